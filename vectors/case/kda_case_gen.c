/* kda_case_gen.c: case files with generated inputs and sampled truth (SPEC.md §10.2).
 * SPDX-License-Identifier: MIT
 *
 * A production-size golden case (K = V = 128, up to 2^20 tokens) cannot store its inputs (a
 * 2^20-token head is gigabytes), so its file stores none: the manifest's golden object says
 * "inputs": "generated", generator_info.description regenerates them bit for bit (kda_gen.c),
 * and golden.generated_sha256 holds the SHA-256 of every input member's .npy bytes as
 * kda_case_save would store them, which the reader must reproduce before it trusts anything.
 * Its outputs may be sampled: o_index (<i8 [P], strictly increasing tokens in [0, T)) and o
 * ([P, HV, V]: row p is token o_index[p]).
 *
 * The hashes are computed window by window from kda_gen_range, in bounded memory, so a
 * streaming reader can prove its inputs without holding them.
 */
#include "kda_case.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case_internal.h"
#include "kda_internal.h"
#include "kda_npz.h"
#include "kda_sha256.h"

/* Elements generated per window while hashing (about 8 MiB of float64). */
#define KDA_GEN_HASH_ELEMS (UINT64_C(1) << 20)

static const int token_members[5] = {KDA_M_Q, KDA_M_K, KDA_M_V, KDA_M_G, KDA_M_BETA};

static double *window_array(const kda_gen_window *w, int m) {
  return m == KDA_M_Q ? w->q : m == KDA_M_K ? w->k : m == KDA_M_V ? w->v
                                                 : m == KDA_M_G ? w->g : w->beta;
}

/* Hashes n values of x (or ix) in dtype into h, through a small buffer. */
static void hash_values(kda_sha256 *h, int32_t dtype, const double *x, const int64_t *ix,
                        uint64_t n) {
  unsigned char buf[512 * 8];
  const size_t es = kda_dtype_size(dtype);
  for (uint64_t i = 0; i < n; i += 512) {
    const size_t k = n - i < 512 ? (size_t)(n - i) : 512;
    kda_case_encode(dtype, x ? x + i : NULL, ix ? ix + i : NULL, k, buf);
    kda_sha256_update(h, buf, k * es);
  }
}

/* Starts h with the .npy header of member m; 0 when m is unused or has no header. */
static int hash_start(kda_sha256 *h, const kda_problem *p, int m, int32_t prec,
                      kda_array_info *info) {
  int used;
  unsigned char header[512];
  kda_case_member_layout(p, m, prec, &used, info);
  if (!used) return 0;
  const size_t hl = kda_npy_format_header(info, header, sizeof header);
  if (hl == 0) return 0;
  kda_sha256_init(h);
  kda_sha256_update(h, header, hl);
  return 1;
}

static void hash_end(kda_sha256 *h, char hex[65]) {
  unsigned char d[KDA_SHA256_BYTES];
  kda_sha256_final(h, d);
  kda_sha256_hex(d, hex);
}

/* The token-major members, window by window. */
static int hash_tokens(const kda_gen_desc *d, kda_sha256 h[5], const int on[5],
                       const kda_array_info info[5], char *err, size_t errlen) {
  const kda_problem *p = &d->p;
  const uint64_t per = (uint64_t)(2 * p->H * p->K + p->HV * (p->V + p->K + 1));
  const int64_t W = per >= KDA_GEN_HASH_ELEMS ? 1 : (int64_t)(KDA_GEN_HASH_ELEMS / per);
  for (int64_t t0 = 0; t0 < p->T; t0 += W) {
    const int64_t t1 = p->T - t0 < W ? p->T : t0 + W;
    kda_gen_window w;
    int st = kda_gen_range(d, t0, t1, &w, err, errlen);
    if (st) return st;
    for (int i = 0; i < 5; i++) {
      if (!on[i]) continue;
      const uint64_t n = info[i].count / (uint64_t)(p->T ? p->T : 1) * (uint64_t)(t1 - t0);
      hash_values(&h[i], info[i].dtype, window_array(&w, token_members[i]), NULL, n);
    }
    kda_gen_window_free(&w);
  }
  return KDA_OK;
}

int kda_gen_inputs_sha256(const kda_gen_desc *d, char hex[KDA_CASE_MEMBERS][65], char *err,
                          size_t errlen) {
  for (int m = 0; m < KDA_CASE_MEMBERS; m++) hex[m][0] = '\0';
  kda_case c;
  int st = kda_gen_case_static(d, &c, err, errlen); /* validates d */
  if (st) return st;
  kda_sha256 h[5], hs;
  kda_array_info info[5], si;
  int on[5];
  for (int i = 0; i < 5; i++) on[i] = hash_start(&h[i], &d->p, token_members[i], d->precision,
                                                 &info[i]);
  st = hash_tokens(d, h, on, info, err, errlen);
  for (int i = 0; !st && i < 5; i++)
    if (on[i]) hash_end(&h[i], hex[token_members[i]]);
  static const int fixed[5] = {KDA_M_A_LOG, KDA_M_DT_BIAS, KDA_M_CU_SEQLENS, KDA_M_H0,
                               KDA_M_CHECKPOINTS};
  for (int i = 0; !st && i < 5; i++) {
    const int m = fixed[i];
    if (!hash_start(&hs, &d->p, m, d->precision, &si)) continue;
    const int64_t *ix = m == KDA_M_CU_SEQLENS ? c.cu_seqlens : c.checkpoints;
    const int is_index = m == KDA_M_CU_SEQLENS || m == KDA_M_CHECKPOINTS;
    hash_values(&hs, si.dtype, is_index ? NULL : kda_case_array(&c, m), is_index ? ix : NULL,
                si.count);
    hash_end(&hs, hex[m]);
  }
  kda_case_free(&c);
  return st;
}

/* ---- Reading a generated-inputs file. */
int kda_case_inputs_generated(json_t *root) {
  json_t *in = json_object_get(json_object_get(root, "golden"), "inputs");
  return json_is_string(in) && strcmp(json_string_value(in), "generated") == 0;
}

int kda_case_golden_form(const kda_case *c, int *generated, int *sampled) {
  *generated = *sampled = 0;
  if (!c || !c->manifest_json) return KDA_OK;
  json_t *root = json_loads(c->manifest_json, 0, NULL);
  if (!root) return KDA_EFORMAT;
  *generated = kda_case_inputs_generated(root);
  *sampled = json_is_true(json_object_get(json_object_get(root, "golden"), "o_sampled"));
  json_decref(root);
  return KDA_OK;
}

/* The description's problem and precision are the manifest's (c). */
static int same_problem(const char *path, const kda_gen_desc *d, const kda_case *c, char *err,
                        size_t errlen) {
  const kda_problem *a = &d->p, *b = &c->p;
  const int same =
      a->N == b->N && a->T == b->T && a->H == b->H && a->HV == b->HV && a->K == b->K &&
      a->V == b->V && a->n_checkpoints == b->n_checkpoints && a->family == b->family &&
      a->gate_mode == b->gate_mode && a->beta_mode == b->beta_mode && a->l2_mode == b->l2_mode &&
      a->head_map == b->head_map && a->state_layout == b->state_layout &&
      a->has_A_log == b->has_A_log && a->has_initial_state == b->has_initial_state &&
      a->want_final_state == b->want_final_state && a->scale == b->scale &&
      a->lower_bound == b->lower_bound && a->l2_eps == b->l2_eps &&
      d->precision == c->input_precision;
  if (same) return KDA_OK;
  return kda_fail(KDA_EFORMAT, err, errlen,
                  "%s: generator_info.description does not describe the manifest's problem "
                  "and input_precision (inputs are generated)", path);
}

/* generator_info.description, parsed; generated inputs allow no catalog design. */
static int gen_description(const char *path, json_t *root, kda_gen_desc *d, char *err,
                           size_t errlen) {
  json_t *gi = json_object_get(root, "generator_info");
  json_t *text = json_object_get(gi, "description");
  if (!json_is_string(text))
    return kda_fail(KDA_EFORMAT, err, errlen,
                    "%s: inputs are generated but generator_info.description is missing", path);
  json_t *design = json_object_get(gi, "design");
  if (design && !json_is_null(design))
    return kda_fail(KDA_EFORMAT, err, errlen,
                    "%s: inputs are generated but generator_info names a design", path);
  char msg[KDA_ERRLEN];
  if (kda_gen_parse(json_string_value(text), d, msg, sizeof msg) != KDA_OK)
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: generator_info.%s", path, msg);
  return KDA_OK;
}

/* Generated input elements kda_case_load may make in full (4 GiB of float64): a 2^20-token
 * head of K = V = 128 fits; a tiny file cannot make the reader generate more. */
#define KDA_CASE_GEN_MAX (UINT64_C(1) << 29)

static int gen_bound(const char *path, const kda_problem *p, char *err, size_t errlen) {
  kda_problem_sizes s;
  int st = kda_problem_sizes_get(p, &s, err, errlen);
  if (st) return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest problem: sizes overflow", path);
  const uint64_t parts[] = {s.q, s.k, s.v, s.g, s.beta, s.h0};
  uint64_t n = 0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    if (parts[i] > KDA_CASE_GEN_MAX - n)
      return kda_fail(KDA_EFORMAT, err, errlen,
                      "%s: generated inputs of more than 2^29 elements (load with "
                      "kda_gen_range instead)", path);
    n += parts[i];
  }
  return KDA_OK;
}

static uint64_t gen_cost_max = KDA_CASE_GEN_COST;
void kda_case_gen_cost_set(uint64_t elements) { gen_cost_max = elements; }
uint64_t kda_case_gen_cost(void) { return gen_cost_max; }

/* The input elements reproducing the hashes generates: within the declared-cost limit. */
static int gen_cost(const char *path, const kda_problem *p, char *err, size_t errlen) {
  kda_problem_sizes s;
  if (kda_problem_sizes_get(p, &s, err, errlen) != KDA_OK)
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest problem: sizes overflow", path);
  const uint64_t parts[] = {s.q, s.k, s.v, s.g, s.beta, s.h0, s.A_log, s.dt_bias};
  uint64_t n = 0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    if (parts[i] > gen_cost_max - n)
      return kda_fail(KDA_EFORMAT, err, errlen,
                      "%s: its generated inputs (%llu elements and more) exceed the limit of %llu "
                      "elements generated to check a file (raise it with --max-generated)", path,
                      (unsigned long long)(n + parts[i]), (unsigned long long)gen_cost_max);
    n += parts[i];
  }
  return KDA_OK;
}

/* No input member stored, and every used one's recorded hash reproduced. */
static int check_hashes(kda_npz *z, const char *path, json_t *root, const kda_gen_desc *d,
                        char *err, size_t errlen) {
  for (int m = 0; m < KDA_M_COUNT; m++)
    if (kda_npz_has(z, kda_case_member_names[m]))
      return kda_fail(KDA_EFORMAT, err, errlen,
                      "%s: member '%s' is stored but the inputs are generated", path,
                      kda_case_member_names[m]);
  json_t *sums = json_object_get(json_object_get(root, "golden"), "generated_sha256");
  if (!json_is_object(sums))
    return kda_fail(KDA_EFORMAT, err, errlen,
                    "%s: inputs are generated but golden.generated_sha256 is missing", path);
  char hex[KDA_CASE_MEMBERS][65];
  int st = kda_gen_inputs_sha256(d, hex, err, errlen);
  if (st) return st;
  for (int m = 0; m < KDA_M_COUNT; m++) {
    if (!hex[m][0]) continue;
    char key[32];
    snprintf(key, sizeof key, "%s.npy", kda_case_member_names[m]);
    json_t *want = json_object_get(sums, key);
    if (!json_is_string(want))
      return kda_fail(KDA_EFORMAT, err, errlen,
                      "%s: golden.generated_sha256 has no hash for member '%s'", path,
                      kda_case_member_names[m]);
    if (strcmp(json_string_value(want), hex[m]) != 0)
      return kda_fail(KDA_EFORMAT, err, errlen,
                      "%s: generated member '%s' does not reproduce its recorded SHA-256 "
                      "(golden.generated_sha256)", path, kda_case_member_names[m]);
  }
  return KDA_OK;
}

/* Moves the generated arrays into c (which keeps its id and manifest text). */
static void take_inputs(kda_case *c, kda_case *g) {
  c->q = g->q, c->k = g->k, c->v = g->v, c->g = g->g, c->beta = g->beta;
  c->A_log = g->A_log, c->dt_bias = g->dt_bias, c->h0 = g->h0;
  c->cu_seqlens = g->cu_seqlens, c->checkpoints = g->checkpoints;
  g->q = g->k = g->v = g->g = g->beta = g->A_log = g->dt_bias = g->h0 = NULL;
  g->cu_seqlens = g->checkpoints = NULL;
}

int kda_case_load_generated(kda_npz *z, const char *path, json_t *root, kda_case *c,
                            int static_only, char *err, size_t errlen) {
  kda_gen_desc d;
  int st = gen_description(path, root, &d, err, errlen);
  if (st) return st;
  st = same_problem(path, &d, c, err, errlen);
  if (!st && !static_only) st = gen_bound(path, &c->p, err, errlen); /* nothing big is made */
  if (!st) st = gen_cost(path, &c->p, err, errlen); /* the hashes cost this much */
  if (!st) st = check_hashes(z, path, root, &d, err, errlen);
  kda_case g;
  if (!st) st = static_only ? kda_gen_case_static(&d, &g, err, errlen)
                            : kda_gen_case(&d, &g, err, errlen);
  if (!st) {
    take_inputs(c, &g);
    kda_case_free(&g);
  }
  kda_gen_desc_free(&d);
  return st;
}

/* ---- Sampled truth. */
static int check_index(const char *path, const int64_t *ix, int64_t n, int64_t T, char *err,
                       size_t errlen) {
  for (int64_t i = 0; i < n; i++) {
    if (ix[i] < 0 || ix[i] >= T)
      return kda_fail(KDA_EFORMAT, err, errlen,
                      "%s: member 'o_index'[%lld] = %lld is not a token in [0, %lld)", path,
                      (long long)i, (long long)ix[i], (long long)T);
    if (i > 0 && ix[i] <= ix[i - 1])
      return kda_fail(KDA_EFORMAT, err, errlen,
                      "%s: member 'o_index' is not strictly increasing at [%lld]", path,
                      (long long)i);
  }
  return KDA_OK;
}

int kda_output_sampled_read(kda_npz *z, const char *path, const kda_problem *p, int64_t **index,
                            int64_t *n, double **o, char *err, size_t errlen) {
  *index = NULL;
  *n = 0;
  if (o) *o = NULL;
  kda_array_info ii, oi;
  int st = kda_npz_info(z, "o_index", &ii, err, errlen);
  if (st) return st;
  if (ii.ndim != 1 || (ii.dtype != KDA_DTYPE_I64 && ii.dtype != KDA_DTYPE_I32))
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: member 'o_index' is not a 1-d <i8 array",
                    path);
  const int64_t P = ii.shape[0];
  if (P > p->T)
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: member 'o_index' has %lld rows, T = %lld",
                    path, (long long)P, (long long)p->T);
  st = kda_npz_info(z, "o", &oi, err, errlen);
  if (st) return st;
  if (oi.dtype != KDA_DTYPE_F64 || oi.ndim != 3 || oi.shape[0] != P || oi.shape[1] != p->HV ||
      oi.shape[2] != p->V)
    return kda_fail(KDA_EFORMAT, err, errlen,
                    "%s: member 'o' is not <f8 [P, HV, V] with P = %lld rows of o_index", path,
                    (long long)P);
  int64_t *ix = NULL;
  st = kda_npz_load_i64(z, "o_index", NULL, &ix, err, errlen);
  if (!st) st = check_index(path, ix, P, p->T, err, errlen);
  if (!st && o) {
    *o = malloc((size_t)(P * p->HV * p->V + 1) * sizeof(double));
    st = *o ? kda_npz_read(z, "o", KDA_DTYPE_F64, *o, (uint64_t)(P * p->HV * p->V), err, errlen)
            : kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", path);
  }
  if (st) {
    free(ix);
    if (o) {
      free(*o);
      *o = NULL;
    }
    return st;
  }
  *index = ix;
  *n = P;
  return KDA_OK;
}

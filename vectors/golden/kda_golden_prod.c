/* kda_golden_prod.c: production-size golden cases: generated inputs, sampled truth, certified
 * by the double-double phase alone (SPEC.md §8.10, §8.12, §10.2).
 * SPDX-License-Identifier: MIT
 *
 * A production L2 case (a catalog entry with prod = 1) is K = V = 128 over up to 2^20
 * tokens.  Its file stores no input (golden.inputs "generated", with the SHA-256 of every
 * member the description regenerates), o only at sampled tokens (o_index, o), and ht and hc
 * in full.  Its values are certified by phase 1 of the fast certifier (kda_cert_forward with
 * no MPFR fallback): MPFR never runs on a production case, because one undecided value late
 * in a 2^20-token head would cost the MPFR evaluation of the whole prefix (hours).  Instead:
 *
 *   - outputs are stored in runs of 3 aligned 64-token windows, at tokens 0 and 2^j
 *     (j >= 8), at k T / KDA_PROD_REGULAR (k = 1 .. KDA_PROD_REGULAR - 1) and at the end; a
 *     run that holds an undecided value moves forward one window at a time to the first place
 *     where every value is decided and it overlaps no earlier run, or, when there is none,
 *     back from its wanted place towards the previous run, or is dropped (deterministic;
 *     recorded as [wanted, stored] first tokens in golden.sampling.runs, -1 when dropped);
 *   - every ht and hc value must be decided, else the case fails (KDA_ENOTCERT, naming the
 *     value): the catalog then needs another seed.
 *
 * The record (golden.certification) is that of phase 1: certifier "dd", u_d = 2^-100, the
 * values stored and decided (all of them), the values evaluated and decided over the whole
 * problem, the largest step-norm and relative bounds (SPEC.md §8.10).  With an annex set
 * (kda_golden_set_annex: the kda command's fp32 envelope, SPEC.md §10.2 "Stored envelope"),
 * the file is written, the annex computed from it, and the file written again with the
 * annex's members and key.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case_internal.h"
#include "kda_cert.h"
#include "kda_golden_internal.h"
#include "kda_npz.h"
#include "kda_ref.h"
#include "kda_sha256.h"

#define KDA_PROD_WINDOW 64  /* tokens of a window (aligned: [64 w, 64 w + 64)) */
#define KDA_PROD_RUN 3      /* consecutive windows of a run (a window and both neighbours) */
#define KDA_PROD_REGULAR 4  /* regular runs at k T / 4 */
#define KDA_PROD_LOG_MIN 8  /* log-spaced runs at 2^j from 2^8 */
#define KDA_PROD_MAX_RUNS KDA_GOLDEN_PROD_MAX_RUNS

typedef struct prod {
  kda_case c;
  kda_problem_sizes s;
  double *gold, *ref;       /* o, ht, hc of the whole problem */
  unsigned char *decided;   /* phase 1's verdict per value */
  kda_cert_report rep;
  int64_t want[KDA_PROD_MAX_RUNS], at[KDA_PROD_MAX_RUNS], n_runs;
  int64_t *o_index, P;      /* stored tokens */
  double *o, *sref;         /* stored outputs [P, HV, V]; the reference's, with ht and hc */
} prod;

static void prod_free(prod *x) {
  kda_case_free(&x->c);
  free(x->gold);
  free(x->ref);
  free(x->decided);
  free(x->o_index);
  free(x->o);
  free(x->sref);
}

static void tensors(const prod *x, double *out, kda_tensors_f64 *t) {
  kda_case_tensors(&x->c, t);
  t->o = out;
  t->ht = out + x->s.o;
  t->hc = out + x->s.o + x->s.ht;
}

/* Phase 1 alone; an undecided value is not an error here (the sampling avoids it). */
static int certify(prod *x, kda_golden_info *info, char *err, size_t errlen) {
  const uint64_t n = x->s.o + x->s.ht + x->s.hc;
  x->gold = calloc(n + 1, sizeof(double));
  x->decided = calloc(n + 1, 1);
  if (!x->gold || !x->decided) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  kda_cert_options o;
  kda_cert_options_init(&o);
  o.no_fallback = 1;
  kda_tensors_f64 t;
  tensors(x, x->gold, &t);
  const double t0 = kda_golden_now();
  int st = kda_cert_forward(&x->c.p, &t, &o, &x->rep, x->decided, err, errlen);
  info->seconds_certify = info->seconds_fast = kda_golden_now() - t0;
  info->certifier = KDA_CERTIFIER_FAST;
  info->n_decided_fast = x->rep.n_decided;
  if (st == KDA_ENOTCERT) st = KDA_OK; /* undecided values: the sampling avoids them */
  for (uint64_t i = x->s.o; !st && i < n; i++)
    if (!x->decided[i])
      st = kda_fail(KDA_ENOTCERT, err, errlen,
                    "state value %llu (ht, then hc) is undecided by the double-double phase; "
                    "production cases run no MPFR (SPEC.md §8.12): choose another seed",
                    (unsigned long long)(i - x->s.o));
  return st;
}

/* 1 when every output of windows [w, w + KDA_PROD_RUN) is decided (row values a token). */
static int run_decided(const unsigned char *decided, int64_t row, int64_t w) {
  const uint64_t a = (uint64_t)(w * KDA_PROD_WINDOW) * (uint64_t)row;
  const uint64_t b = (uint64_t)((w + KDA_PROD_RUN) * KDA_PROD_WINDOW) * (uint64_t)row;
  for (uint64_t i = a; i < b; i++)
    if (!decided[i]) return 0;
  return 1;
}

static int cmp_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The wanted first windows of the runs, sorted and unique. */
static int64_t wanted_windows(int64_t T, int64_t *w) {
  const int64_t nW = T / KDA_PROD_WINDOW;
  int64_t n = 0;
  w[n++] = 0;
  for (int j = KDA_PROD_LOG_MIN; j < 62 && (INT64_C(1) << j) < T; j++)
    w[n++] = (INT64_C(1) << j) / KDA_PROD_WINDOW;
  for (int k = 1; k < KDA_PROD_REGULAR; k++) w[n++] = k * nW / KDA_PROD_REGULAR;
  w[n++] = nW - KDA_PROD_RUN;
  qsort(w, (size_t)n, sizeof *w, cmp_i64);
  int64_t u = 0;
  for (int64_t i = 0; i < n; i++)
    if (w[i] >= 0 && w[i] + KDA_PROD_RUN <= nW && (u == 0 || w[i] != w[u - 1])) w[u++] = w[i];
  return u;
}

int64_t kda_golden_prod_runs(int64_t T, int64_t row, const unsigned char *decided,
                             int64_t want[KDA_GOLDEN_PROD_MAX_RUNS],
                             int64_t at[KDA_GOLDEN_PROD_MAX_RUNS], char *err, size_t errlen) {
  const int64_t nW = T / KDA_PROD_WINDOW;
  int64_t w[KDA_PROD_MAX_RUNS], end = 0, runs = 0, placed = 0;
  const int64_t n = wanted_windows(T, w);
  for (int64_t i = 0; i < n; i++) {
    int64_t a = w[i] > end ? w[i] : end;
    while (a + KDA_PROD_RUN <= nW && !run_decided(decided, row, a)) a++;
    if (a + KDA_PROD_RUN > nW) { /* nothing decided after it: back towards the previous run */
      a = w[i] < nW - KDA_PROD_RUN ? w[i] : nW - KDA_PROD_RUN;
      while (a >= end && !run_decided(decided, row, a)) a--;
    }
    want[runs] = w[i] * KDA_PROD_WINDOW;
    at[runs++] = a >= end ? a * KDA_PROD_WINDOW : -1; /* -1: dropped, nowhere decided */
    if (a >= end) end = a + KDA_PROD_RUN, placed++;
  }
  if (placed == 0) {
    kda_fail(KDA_ENOTCERT, err, errlen, "no fully decided run of %d windows anywhere",
             KDA_PROD_RUN);
    return -1;
  }
  return runs;
}

/* Places the runs (moving any that holds an undecided value) and collects the stored rows. */
static int sample(prod *x, char *err, size_t errlen) {
  const kda_problem *p = &x->c.p;
  x->n_runs = kda_golden_prod_runs(p->T, p->HV * p->V, x->decided, x->want, x->at, err, errlen);
  if (x->n_runs < 0) return KDA_ENOTCERT;
  const int64_t per = KDA_PROD_RUN * KDA_PROD_WINDOW, row = p->HV * p->V;
  x->P = 0;
  for (int64_t r = 0; r < x->n_runs; r++) x->P += x->at[r] >= 0 ? per : 0;
  x->o_index = malloc((size_t)(x->P + 1) * sizeof(int64_t));
  x->o = malloc((size_t)(x->P * row + 1) * sizeof(double));
  if (!x->o_index || !x->o) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  for (int64_t r = 0, k = 0; r < x->n_runs; r++)
    for (int64_t t = x->at[r]; x->at[r] >= 0 && t < x->at[r] + per; t++, k++) {
      x->o_index[k] = t;
      memcpy(x->o + k * row, x->gold + t * row, (size_t)row * sizeof(double));
    }
  return KDA_OK;
}

/* The float64 reference on the whole problem, scored on the stored values only. */
static int score_ref(prod *x, kda_golden_info *info, char *err, size_t errlen) {
  const uint64_t n = x->s.o + x->s.ht + x->s.hc, row = (uint64_t)(x->c.p.HV * x->c.p.V);
  x->ref = calloc(n + 1, sizeof(double));
  const uint64_t ns = (uint64_t)x->P * row + x->s.ht + x->s.hc;
  double *sgold = malloc((ns + 1) * sizeof(double));
  x->sref = malloc((ns + 1) * sizeof(double));
  if (!x->ref || !sgold || !x->sref) {
    free(sgold);
    return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  }
  kda_tensors_f64 t;
  tensors(x, x->ref, &t);
  const double t0 = kda_golden_now();
  int st = kda_ref_forward_f64(&x->c.p, &t, err, errlen);
  info->seconds_ref = kda_golden_now() - t0;
  if (!st) {
    for (int64_t k = 0; k < x->P; k++) {
      memcpy(sgold + (uint64_t)k * row, x->gold + (uint64_t)x->o_index[k] * row, row * 8);
      memcpy(x->sref + (uint64_t)k * row, x->ref + (uint64_t)x->o_index[k] * row, row * 8);
    }
    memcpy(sgold + (uint64_t)x->P * row, x->gold + x->s.o, (x->s.ht + x->s.hc) * 8);
    memcpy(x->sref + (uint64_t)x->P * row, x->ref + x->s.o, (x->s.ht + x->s.hc) * 8);
    const uint64_t part[3] = {(uint64_t)x->P * row, x->s.ht, x->s.hc};
    kda_golden_score_ref(sgold, x->sref, part, info);
  }
  free(sgold);
  return st;
}

/* SHA-256 of an array member's bytes as stored: the .npy header, then the little-endian data
 * (f64 or i64; this writer runs on little-endian hosts, kda_npz's own assumption). */
static int npy_sha256(int32_t dtype, int ndim, const int64_t *shape, const void *data,
                      char hex[65]) {
  kda_array_info info;
  memset(&info, 0, sizeof info);
  info.dtype = dtype;
  info.ndim = ndim;
  info.count = 1;
  for (int d = 0; d < ndim; d++) info.count *= (uint64_t)(info.shape[d] = shape[d]);
  info.nbytes = info.count * 8;
  unsigned char header[512];
  const size_t hl = kda_npy_format_header(&info, header, sizeof header);
  if (hl == 0) return -1;
  kda_sha256 h;
  unsigned char d[KDA_SHA256_BYTES];
  kda_sha256_init(&h);
  kda_sha256_update(&h, header, hl);
  kda_sha256_update(&h, data, (size_t)info.nbytes);
  kda_sha256_final(&h, d);
  kda_sha256_hex(d, hex);
  return 0;
}

/* The stored members: o_index, o, ht, hc. */
typedef struct pmember {
  const char *name;
  int32_t dtype;
  int ndim;
  int64_t shape[4];
  const void *data;
} pmember;

static int members(const prod *x, pmember *m) {
  const kda_problem *p = &x->c.p;
  const int vk = p->state_layout == KDA_STATE_VK;
  const int64_t sa = vk ? p->V : p->K, sb = vk ? p->K : p->V;
  int n = 0;
  m[n++] = (pmember){"o_index", KDA_DTYPE_I64, 1, {x->P}, x->o_index};
  m[n++] = (pmember){"o", KDA_DTYPE_F64, 3, {x->P, p->HV, p->V}, x->o};
  if (p->want_final_state)
    m[n++] = (pmember){"ht", KDA_DTYPE_F64, 4, {p->N, p->HV, sa, sb}, x->gold + x->s.o};
  if (p->n_checkpoints > 0)
    m[n++] = (pmember){"hc", KDA_DTYPE_F64, 4, {p->n_checkpoints, p->HV, sa, sb},
                       x->gold + x->s.o + x->s.ht};
  return n;
}

static json_t *cert_json(const prod *x) {
  const uint64_t stored = (uint64_t)x->P * (uint64_t)(x->c.p.HV * x->c.p.V) + x->s.ht + x->s.hc;
  json_t *o = json_pack(
      "{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:b}", "method", "PROVEN", "certifier",
      "dd", "reference",
      "kda_cert_forward phase 1: double-double evaluation with an a-priori error bound, every "
      "stored value decided; no MPFR evaluation (SPEC.md §8.12)",
      "rounding", "binary64, round to nearest even, zeros written as +0", "u_d", "2^-100",
      "precision_bits", (json_int_t)KDA_CERT_DD_BITS, "evaluations", (json_int_t)1, "values",
      (json_int_t)stored, "values_proven", (json_int_t)stored, "values_evaluated",
      (json_int_t)x->rep.n_values, "values_evaluated_decided", (json_int_t)x->rep.n_decided,
      "expansive", x->rep.expansive ? 1 : 0);
  if (o) {
    json_object_set_new(o, "max_step_norm_bound", kda_golden_jreal(x->rep.max_growth));
    json_object_set_new(o, "max_relative_error_bound", kda_golden_jreal(x->rep.max_rel_bound));
  }
  return o;
}

static json_t *sampling_json(const prod *x) {
  json_t *runs = json_array();
  for (int64_t r = 0; runs && r < x->n_runs; r++)
    json_array_append_new(runs, json_pack("[I,I]", (json_int_t)x->want[r], (json_int_t)x->at[r]));
  return json_pack("{s:I,s:I,s:I,s:I,s:s,s:o}", "window", (json_int_t)KDA_PROD_WINDOW,
                   "run_windows", (json_int_t)KDA_PROD_RUN, "regular_runs",
                   (json_int_t)KDA_PROD_REGULAR, "log_from", (json_int_t)1 << KDA_PROD_LOG_MIN,
                   "rule",
                   "runs of 3 aligned 64-token windows wanted at tokens 0, 2^j (j >= 8), k T / 4 "
                   "and T - 192, each moved to the nearest fully decided place (SPEC.md "
                   "§8.12); runs lists [wanted, stored] first tokens, stored -1 for a run "
                   "dropped",
                   "runs", runs);
}

/* generator_info.description's SHA-256 of every input member (what readers reproduce). */
static json_t *generated_json(const prod *x, char *err, size_t errlen) {
  json_t *root = json_loads(x->c.manifest_json, 0, NULL);
  const char *text =
      json_string_value(json_object_get(json_object_get(root, "generator_info"), "description"));
  kda_gen_desc d;
  char hex[KDA_CASE_MEMBERS][65];
  int st = text ? kda_gen_parse(text, &d, err, errlen) : KDA_EINVAL;
  json_decref(root);
  if (st) return NULL;
  st = kda_gen_inputs_sha256(&d, hex, err, errlen);
  kda_gen_desc_free(&d);
  json_t *o = st ? NULL : json_object();
  for (int m = 0; o && m < KDA_CASE_MEMBERS; m++) {
    char key[32];
    snprintf(key, sizeof key, "%s.npy", kda_case_member_names[m]);
    if (hex[m][0]) json_object_set_new(o, key, json_string(hex[m]));
  }
  return o;
}

/* m[0 .. n_truth) the truth's members (o_index first), the annex's after them. */
static char *manifest(const prod *x, const kda_catalog_entry *e, const pmember *m, int nm,
                      int n_truth, const kda_golden_annex *a, char *err, size_t errlen) {
  json_t *sums = json_object(), *outs = json_array();
  for (int i = 0; i < nm; i++) {
    char hex[65], key[64];
    if (npy_sha256(m[i].dtype, m[i].ndim, m[i].shape, m[i].data, hex)) hex[0] = '\0';
    snprintf(key, sizeof key, "%s.npy", m[i].name);
    json_object_set_new(sums, key, json_string(hex));
    if (i > 0 && i < n_truth) json_array_append_new(outs, json_string(m[i].name));
  }
  json_t *gen = generated_json(x, err, errlen);
  json_t *g = json_pack(
      "{s:s,s:s,s:s,s:o,s:I,s:n,s:s,s:s,s:o,s:b,s:o,s:o,s:o,s:o}", "schema", KDA_GOLDEN_SCHEMA,
      "level", kda_level_name(e->level), "comment", e->comment, "flags",
      kda_golden_flags_json(kda_catalog_flags(e, &x->c)), "seed",
      (json_int_t)kda_catalog_seed(e), "design", "input_precision",
      kda_precision_file_name(x->c.input_precision), "inputs", "generated", "generated_sha256",
      gen ? gen : json_null(), "o_sampled", 1, "sampling", sampling_json(x), "outputs", outs,
      "certification", cert_json(x), "members_sha256", sums);
  json_t *annex = a && a->json ? json_loads(a->json, 0, NULL) : NULL;
  if (a && a->json && (!json_is_object(annex) || !g || json_object_set(g, a->key, annex)))
    json_decref(g), g = NULL;
  json_decref(annex);
  json_t *root = json_loads(x->c.manifest_json, 0, NULL);
  char *text = NULL;
  if (gen && root && g && json_object_set(root, "golden", g) == 0)
    text = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
  json_decref(root);
  json_decref(g);
  return text;
}

static kda_golden_annex_fn annex_fn;

void kda_golden_set_annex(kda_golden_annex_fn fn) { annex_fn = fn; }

void kda_golden_annex_free(kda_golden_annex *a) {
  free(a->json);
  for (int i = 0; i < a->n && i < KDA_GOLDEN_ANNEX_MAX; i++) free(a->data[i]);
  memset(a, 0, sizeof *a);
}

static int write_file(const prod *x, const kda_catalog_entry *e, const char *path,
                      const kda_golden_annex *a, char *err, size_t errlen) {
  pmember m[4 + KDA_GOLDEN_ANNEX_MAX];
  const int n_truth = members(x, m);
  int nm = n_truth;
  for (int i = 0; a && i < a->n; i++)
    m[nm++] = (pmember){a->name[i], KDA_DTYPE_F64, 1, {a->len[i]}, a->data[i]};
  char *text = manifest(x, e, m, nm, n_truth, a, err, errlen);
  if (!text) return kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot build the manifest", path);
  kda_npz_writer *w = NULL;
  int st = kda_npz_writer_open(path, &w, err, errlen);
  if (!st) st = kda_npz_writer_set_manifest(w, text, err, errlen);
  for (int i = 0; !st && i < nm; i++)
    st = m[i].dtype == KDA_DTYPE_I64
             ? kda_npz_writer_add(w, m[i].name, KDA_DTYPE_I64, m[i].ndim, m[i].shape, m[i].data,
                                  err, errlen)
             : kda_npz_writer_add_f64(w, m[i].name, KDA_DTYPE_F64, m[i].ndim, m[i].shape,
                                      m[i].data, err, errlen);
  free(text);
  return kda_npz_writer_finish(w, st, err, errlen);
}

int kda_golden_prod_make(const kda_catalog_entry *e, const char *path, kda_golden_info *info,
                         char *err, size_t errlen) {
  prod x;
  memset(&x, 0, sizeof x);
  int st = e->design ? kda_fail(KDA_EINVAL, err, errlen,
                                "a production case has generated inputs: no design allowed")
                     : kda_catalog_build(e, &x.c, err, errlen);
  if (!st) st = kda_problem_sizes_get(&x.c.p, &x.s, err, errlen);
  if (!st) {
    info->steps = x.c.p.T * x.c.p.HV;
    st = certify(&x, info, err, errlen);
  }
  if (!st) st = sample(&x, err, errlen);
  if (!st) st = score_ref(&x, info, err, errlen);
  if (!st) {
    info->method = KDA_CERT_PROVEN;
    info->prec_bits = KDA_CERT_DD_BITS;
    info->n_evals = 1;
    info->n_values = x.P * x.c.p.HV * x.c.p.V + (int64_t)(x.s.ht + x.s.hc);
    info->n_decided_fast = info->n_values; /* every stored value (the record has the rest) */
    st = write_file(&x, e, path, NULL, err, errlen);
  }
  if (!st && annex_fn) { /* the annex is made from the file as first written */
    kda_golden_annex a;
    memset(&a, 0, sizeof a);
    st = annex_fn(path, &a, err, errlen);
    if (!st && (a.n < 0 || a.n > KDA_GOLDEN_ANNEX_MAX || !a.key[0] || !a.json))
      st = kda_fail(KDA_EINVAL, err, errlen, "%s: an annex of %d members", path, a.n);
    if (!st) st = write_file(&x, e, path, &a, err, errlen);
    kda_golden_annex_free(&a);
  }
  prod_free(&x);
  return st;
}

/* kda_golden.c: making one golden case file: build, certify with MPFR, score ref-f64, write.
 * SPDX-License-Identifier: MIT
 *
 * A golden case file holds, in this order: manifest.json, the input members exactly as a case
 * file stores them (SPEC.md §10.2), then o, ht (when the problem wants it) and hc (when it has
 * checkpoints) as <f8 holding the correctly rounded float64 values of the exact result
 * (SPEC.md §6.1), as kda_mpfr_forward certified them.  The manifest is the case's kda-case/1
 * manifest with one more top-level key, "golden" (KDA_GOLDEN_SCHEMA):
 *   schema, level, comment, flags [names], seed, design (or null), input_precision,
 *   outputs [names], certification {method PROVEN|AGREED, reference, rounding, precision_bits,
 *   check_precision_bits, evaluations, values, values_proven, expansive, max_step_norm_bound,
 *   max_relative_error_bound}, members_sha256 {"<member>.npy": hex} (SHA-256 of each array
 *   member's bytes as stored, .npy header included).
 * Nothing in it depends on the platform (the float64 reference's errors go to the level
 * manifest, kda_golden_set.c).
 */
#include "kda_golden.h"

#include <jansson.h>
#include <math.h>
#include <mpfr.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case_internal.h"
#include "kda_golden_internal.h"
#include "kda_files.h"
#include "kda_cert.h"
#include "kda_mpfr.h"
#include "kda_npz.h"
#include "kda_ref.h"
#include "kda_sha256.h"

#define JSON_FLAGS (JSON_INDENT(1) | JSON_REAL_PRECISION(17))

#define GM_MAX 13

int32_t kda_golden_prec_dtype(int32_t prec) {
  return prec == KDA_PRECISION_FP64 ? KDA_DTYPE_F64 : prec == KDA_PRECISION_FP16 ? KDA_DTYPE_F16
                                                                       : KDA_DTYPE_F32;
}

void kda_golden_member_set(kda_gmember *m, const char *name, int32_t dtype, int ndim,
                           const int64_t *shape, const double *f, const int64_t *ix) {
  m->name = name;
  m->dtype = dtype;
  m->ndim = ndim;
  for (int d = 0; d < ndim; d++) m->shape[d] = shape[d];
  m->f = f;
  m->i = ix;
}

/* The members of case c with outputs gold (o, ht, hc consecutive), in file order. */
int kda_golden_members(const kda_case *c, const double *gold, kda_gmember *m) {
  const kda_problem *p = &c->p;
  const int64_t GW = kda_problem_gate_width(p) > 0 ? kda_problem_gate_width(p) : 1;
  const int vk = p->state_layout == KDA_STATE_VK;
  const int64_t sa = vk ? p->V : p->K, sb = vk ? p->K : p->V;
  const int32_t in = c->input_precision;
  int n = 0;
  kda_golden_member_set(&m[n++], "q", kda_golden_prec_dtype(in), 3, (int64_t[]){p->T, p->H, p->K}, c->q, NULL);
  kda_golden_member_set(&m[n++], "k", kda_golden_prec_dtype(in), 3, (int64_t[]){p->T, p->H, p->K}, c->k, NULL);
  kda_golden_member_set(&m[n++], "v", kda_golden_prec_dtype(in), 3, (int64_t[]){p->T, p->HV, p->V}, c->v, NULL);
  if (kda_problem_uses_g(p))
    kda_golden_member_set(&m[n++], "g", kda_golden_prec_dtype(in), 3, (int64_t[]){p->T, p->HV, GW}, c->g, NULL);
  kda_golden_member_set(&m[n++], "beta", kda_golden_prec_dtype(in), 2, (int64_t[]){p->T, p->HV}, c->beta, NULL);
  if (kda_problem_uses_A_log(p))
    kda_golden_member_set(&m[n++], "A_log", kda_golden_prec_dtype(kda_case_member_prec(KDA_M_A_LOG, in)), 1,
           (int64_t[]){p->HV}, c->A_log, NULL);
  if (kda_problem_uses_dt_bias(p))
    kda_golden_member_set(&m[n++], "dt_bias", kda_golden_prec_dtype(kda_case_member_prec(KDA_M_DT_BIAS, in)), 2,
           (int64_t[]){p->HV, GW}, c->dt_bias, NULL);
  kda_golden_member_set(&m[n++], "cu_seqlens", KDA_DTYPE_I64, 1, (int64_t[]){p->N + 1}, NULL, c->cu_seqlens);
  if (p->has_initial_state)
    kda_golden_member_set(&m[n++], "h0", kda_golden_prec_dtype(in), 4, (int64_t[]){p->N, p->HV, sa, sb}, c->h0, NULL);
  if (p->n_checkpoints > 0)
    kda_golden_member_set(&m[n++], "checkpoints", KDA_DTYPE_I64, 1, (int64_t[]){p->n_checkpoints}, NULL,
           c->checkpoints);
  if (!gold) return n;
  const uint64_t no = (uint64_t)(p->T * p->HV * p->V), ns = (uint64_t)(p->N * p->HV * p->K * p->V);
  kda_golden_member_set(&m[n++], "o", KDA_DTYPE_F64, 3, (int64_t[]){p->T, p->HV, p->V}, gold, NULL);
  if (p->want_final_state)
    kda_golden_member_set(&m[n++], "ht", KDA_DTYPE_F64, 4, (int64_t[]){p->N, p->HV, sa, sb}, gold + no, NULL);
  if (p->n_checkpoints > 0)
    kda_golden_member_set(&m[n++], "hc", KDA_DTYPE_F64, 4, (int64_t[]){p->n_checkpoints, p->HV, sa, sb},
           gold + no + (p->want_final_state ? ns : 0), NULL);
  return n;
}

static uint64_t gm_count(const kda_gmember *m) {
  uint64_t n = 1;
  for (int d = 0; d < m->ndim; d++) n *= (uint64_t)m->shape[d];
  return n;
}

/* Little-endian bits of element e of m, as the npz writer encodes it. */
static uint64_t gm_bits(const kda_gmember *m, uint64_t e) {
  if (m->i) return (uint64_t)m->i[e];
  double x = m->f[e];
  uint64_t b = 0;
  if (m->dtype == KDA_DTYPE_F64) {
    memcpy(&b, &x, 8);
  } else if (m->dtype == KDA_DTYPE_F32) {
    float f = kda_round_f32(x);
    uint32_t u;
    memcpy(&u, &f, 4);
    b = u;
  } else {
    b = kda_f16_bits(x);
  }
  return b;
}

/* SHA-256 of the member's bytes as stored: the .npy header, then the data. */
int kda_golden_member_sha256(const kda_gmember *m, char hex[65]) {
  kda_array_info info;
  memset(&info, 0, sizeof info);
  info.dtype = m->dtype;
  info.ndim = m->ndim;
  for (int d = 0; d < m->ndim; d++) info.shape[d] = m->shape[d];
  info.count = gm_count(m);
  info.nbytes = info.count * kda_dtype_size(m->dtype);
  unsigned char header[512], buf[4096];
  size_t hl = kda_npy_format_header(&info, header, sizeof header);
  if (hl == 0) return -1;
  kda_sha256 h;
  kda_sha256_init(&h);
  kda_sha256_update(&h, header, hl);
  const size_t es = kda_dtype_size(m->dtype);
  size_t fill = 0;
  for (uint64_t e = 0; e < info.count; e++) {
    uint64_t b = gm_bits(m, e);
    for (size_t k = 0; k < es; k++) buf[fill++] = (unsigned char)(b >> (8 * k));
    if (fill + 8 > sizeof buf) {
      kda_sha256_update(&h, buf, fill);
      fill = 0;
    }
  }
  kda_sha256_update(&h, buf, fill);
  unsigned char d[KDA_SHA256_BYTES];
  kda_sha256_final(&h, d);
  kda_sha256_hex(d, hex);
  return 0;
}

int kda_golden_member_add(kda_npz_writer *w, const kda_gmember *m, char *err, size_t errlen) {
  if (m->i) return kda_npz_writer_add(w, m->name, KDA_DTYPE_I64, m->ndim, m->shape, m->i, err,
                                      errlen);
  return kda_npz_writer_add_f64(w, m->name, m->dtype, m->ndim, m->shape, m->f, err, errlen);
}

int kda_golden_npz_write(const char *path, const char *manifest, const kda_gmember *m, int nm,
                         char *err, size_t errlen) {
  kda_npz_writer *w = NULL;
  int st = kda_npz_writer_open(path, &w, err, errlen);
  if (!st) st = kda_npz_writer_set_manifest(w, manifest, err, errlen);
  for (int i = 0; !st && i < nm; i++) st = kda_golden_member_add(w, &m[i], err, errlen);
  return kda_npz_writer_finish(w, st, err, errlen);
}

/* ---- The manifest's golden object. */
static const char *method_name(int32_t method) {
  return method == KDA_CERT_PROVEN ? "PROVEN" : method == KDA_CERT_AGREED ? "AGREED" : "NONE";
}

#define jreal kda_golden_jreal

static json_t *cert_json(const kda_mpfr_report *r) {
  json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:b}", "method",
                        method_name(r->method), "reference",
                        "kda_mpfr_forward: GNU MPFR evaluation with an a-priori error bound, "
                        "Ziv's strategy (SPEC.md §8)",
                        "rounding", "binary64, round to nearest even, zeros written as +0",
                        "precision_bits", (json_int_t)r->prec_used, "check_precision_bits",
                        (json_int_t)r->prec_check, "evaluations", (json_int_t)r->ziv_rounds,
                        "values", (json_int_t)r->n_values, "values_proven",
                        (json_int_t)r->n_proven, "expansive", r->expansive ? 1 : 0);
  if (o) {
    json_object_set_new(o, "max_step_norm_bound", jreal(r->max_growth));
    json_object_set_new(o, "max_relative_error_bound", jreal(r->max_rel_bound));
  }
  return o;
}

static json_t *golden_json(const kda_catalog_entry *e, const kda_case *c,
                           const kda_mpfr_report *r, const kda_gmember *m, int nm) {
  json_t *sums = json_object(), *outs = json_array();
  for (int i = 0; sums && outs && i < nm; i++) {
    char hex[65], key[64];
    if (kda_golden_member_sha256(&m[i], hex) != 0) {
      json_decref(sums);
      json_decref(outs);
      return NULL;
    }
    snprintf(key, sizeof key, "%s.npy", m[i].name);
    json_object_set_new(sums, key, json_string(hex));
    if (!strcmp(m[i].name, "o") || !strcmp(m[i].name, "ht") || !strcmp(m[i].name, "hc"))
      json_array_append_new(outs, json_string(m[i].name));
  }
  return json_pack("{s:s,s:s,s:s,s:o,s:I,s:s?,s:s,s:o,s:o,s:o}", "schema", KDA_GOLDEN_SCHEMA,
                   "level", kda_level_name(e->level), "comment", e->comment, "flags",
                   kda_golden_flags_json(kda_catalog_flags(e, c)), "seed",
                   (json_int_t)kda_catalog_seed(e), "design", e->design, "input_precision",
                   kda_precision_file_name(c->input_precision), "outputs", outs, "certification",
                   cert_json(r), "members_sha256", sums);
}

/* ---- Making one case. */
typedef struct job {
  const kda_catalog_entry *e;
  kda_case c;
  double *gold, *ref; /* [n_values] each: o, ht, hc */
  uint64_t part[3];
  kda_mpfr_report rep;
} job;

static int job_alloc(job *j, char *err, size_t errlen) {
  kda_problem_sizes s;
  int st = kda_problem_sizes_get(&j->c.p, &s, err, errlen);
  if (st) return st;
  j->part[0] = s.o;
  j->part[1] = s.ht;
  j->part[2] = s.hc;
  const size_t n = (size_t)(s.o + s.ht + s.hc) + 1;
  j->gold = calloc(n, sizeof(double));
  j->ref = calloc(n, sizeof(double));
  if (!j->gold || !j->ref) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  return KDA_OK;
}

static void job_tensors(const job *j, double *out, kda_tensors_f64 *t) {
  kda_case_tensors(&j->c, t);
  t->o = out;
  t->ht = out + j->part[0];
  t->hc = out + j->part[0] + j->part[1];
}

/* The certifier of kda_golden_make (kda_golden_set_certifier). */
static int32_t golden_certifier = KDA_CERTIFIER_FAST;

int kda_golden_set_certifier(int32_t certifier) {
  if (certifier != KDA_CERTIFIER_FAST && certifier != KDA_CERTIFIER_MPFR) return KDA_EINVAL;
  golden_certifier = certifier;
  return KDA_OK;
}

int32_t kda_golden_get_certifier(void) { return golden_certifier; }

/* The golden values and the certification record of the manifest (SPEC.md §8.10, §8.12).
 * The record describes the MPFR evaluation (precisions, evaluations, bounds), so the fast
 * certifier runs with its MPFR phase always on (KDA_CERTIFIER_BOTH): the values and the
 * record are MPFR's, byte for byte those of the MPFR-only path, and every value the
 * double-double phase decided has been compared with them. */
static int certify(job *j, kda_tensors_f64 *t, kda_golden_info *info, char *err,
                   size_t errlen) {
  if (golden_certifier == KDA_CERTIFIER_MPFR) {
    kda_mpfr_options o;
    kda_mpfr_options_init(&o);
    return kda_mpfr_forward(&j->c.p, t, &o, &j->rep, err, errlen);
  }
  kda_cert_options o;
  kda_cert_options_init(&o);
  o.certifier = KDA_CERTIFIER_BOTH;
  kda_cert_report r;
  const int st = kda_cert_forward(&j->c.p, t, &o, &r, NULL, err, errlen);
  j->rep = r.mpfr;
  info->n_decided_fast = r.n_decided;
  info->seconds_fast = r.seconds_fast;
  return st;
}

static int job_certify(job *j, kda_golden_info *info, char *err, size_t errlen) {
  kda_tensors_f64 t;
  job_tensors(j, j->gold, &t);
  double t0 = kda_golden_now();
  info->certifier = golden_certifier;
  int st = certify(j, &t, info, err, errlen);
  info->seconds_certify = kda_golden_now() - t0;
  if (st) return st;
  info->method = j->rep.method;
  info->prec_bits = (int32_t)j->rep.prec_used;
  info->n_evals = (int32_t)j->rep.ziv_rounds;
  job_tensors(j, j->ref, &t);
  t0 = kda_golden_now();
  st = kda_ref_forward_f64(&j->c.p, &t, err, errlen);
  info->seconds_ref = kda_golden_now() - t0;
  if (st) return st;
  kda_golden_score_ref(j->gold, j->ref, j->part, info);
  return KDA_OK;
}

/* The case manifest with the golden object appended. */
static char *job_manifest(const job *j, const kda_gmember *m, int nm) {
  json_t *root = json_loads(j->c.manifest_json, 0, NULL);
  json_t *g = golden_json(j->e, &j->c, &j->rep, m, nm);
  char *text = NULL;
  if (root && g && json_object_set(root, "golden", g) == 0) text = json_dumps(root, JSON_FLAGS);
  json_decref(root);
  json_decref(g);
  return text;
}

static int job_write_npz(const job *j, const char *path, char *err, size_t errlen) {
  kda_gmember m[GM_MAX];
  const int nm = kda_golden_members(&j->c, j->gold, m);
  if (kda_id_check(j->c.id, "golden case id", err, errlen) != KDA_OK) return KDA_EINVAL;
  char *text = job_manifest(j, m, nm);
  if (!text) return kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot build the manifest", path);
  const int st = kda_golden_npz_write(path, text, m, nm, err, errlen);
  free(text);
  return st;
}

static int job_write_trace(const job *j, const char *path, char *err, size_t errlen) {
  char *text = NULL;
  int st = kda_golden_trace(&j->c, j->e->comment, method_name(j->rep.method), j->gold, &text,
                            err, errlen);
  if (!st) st = kda_atomic_write(path, text, strlen(text), err, errlen);
  free(text);
  return st;
}

/* A production case (SPEC.md §10.2: generated inputs, sampled truth) is made apart. */
static int prod_run(const kda_catalog_entry *e, const char *dir, kda_golden_info *info,
                    char *err, size_t errlen) {
  const char *lv = kda_level_name(e->level);
  if (kda_id_check(e->id, "golden case id", err, errlen) != KDA_OK) return KDA_EINVAL;
  size_t len = strlen(dir) + strlen(lv) + strlen(e->id) + 16;
  char *path = malloc(len);
  if (!path) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  snprintf(path, len, "%s/%s/%s.npz", dir, lv, e->id);
  int st = kda_golden_prod_make(e, path, info, err, errlen);
  free(path);
  return st;
}

static int job_run(job *j, const char *dir, kda_golden_info *info, char *err, size_t errlen) {
  if (j->e->prod) return prod_run(j->e, dir, info, err, errlen);
  int st = kda_catalog_build(j->e, &j->c, err, errlen);
  if (st) return st;
  info->n_values = (int64_t)(j->c.p.T * j->c.p.HV * j->c.p.V);
  info->steps = j->c.p.T * j->c.p.HV;
  st = job_alloc(j, err, errlen);
  if (!st) st = job_certify(j, info, err, errlen);
  if (st) return st;
  info->n_values = j->rep.n_values;
  const char *lv = kda_level_name(j->e->level);
  size_t len = strlen(dir) + strlen(lv) + strlen(j->e->id) + 16;
  char *path = malloc(len);
  if (!path) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  snprintf(path, len, "%s/%s/%s.npz", dir, lv, j->e->id);
  st = job_write_npz(j, path, err, errlen);
  if (!st && j->e->level == KDA_LEVEL_L0) {
    snprintf(path, len, "%s/%s/%s.txt", dir, lv, j->e->id);
    st = job_write_trace(j, path, err, errlen);
  }
  free(path);
  return st;
}

int kda_golden_make(const kda_catalog_entry *e, const char *dir, kda_golden_info *info,
                    char *err, size_t errlen) {
  memset(info, 0, sizeof *info);
  const double t0 = kda_golden_now();
  info->index = e ? (int64_t)(e - kda_catalog_get(0)) : -1;
  info->method = KDA_CERT_NONE;
  job j;
  memset(&j, 0, sizeof j);
  j.e = e;
  char msg[KDA_ERRLEN] = "";
  int st = !e || !dir ? kda_fail(KDA_EINVAL, msg, sizeof msg, "NULL entry or directory")
                      : job_run(&j, dir, info, msg, sizeof msg);
  if (st && e && !strstr(msg, e->id)) {
    char tmp[KDA_ERRLEN];
    snprintf(tmp, sizeof tmp, "%s", msg);
    snprintf(msg, sizeof msg, "case '%.100s': %.400s", e->id, tmp);
  }
  kda_case_free(&j.c);
  free(j.gold);
  free(j.ref);
  info->status = st;
  info->seconds_total = kda_golden_now() - t0;
  snprintf(info->message, sizeof info->message, "%.255s", st ? msg : "");
  if (st && err && errlen) snprintf(err, errlen, "%s", msg);
  return st;
}

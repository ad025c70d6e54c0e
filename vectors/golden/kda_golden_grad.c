/* kda_golden_grad.c: the golden gradient sets, golden/grad/L0 and golden/grad/L1 (SPEC.md §13.9).
 * SPDX-License-Identifier: MIT
 *
 * A gradient case is a catalog case (kda_catalog.c) with seeds do, dht, dhc drawn by the PRNG
 * from the case's seed (streams 11, 12, 13; SPEC.md §13.9) and its gradients certified by
 * kda_mpfr_backward.  The file golden/grad/<level>/<id>.npz holds the case file's input members
 * exactly as the forward golden file stores them, then the seeds in the input precision, then
 * the certified gradients as <f8; its manifest is the case manifest with a "golden_grad" object
 * (KDA_GOLDEN_GRAD_SCHEMA).  L0 cases also get <id>.txt, the adjoint traced step by step with
 * every operation checked exact (kda_golden_grad_trace.c).  golden/grad/<level>/manifest.json
 * indexes a level; its "ref_f64" objects (the float64 backward's errors, which depend on the
 * libm) are compared leniently by --verify, as the forward's are.
 */
#include "kda_golden_grad.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kda_backward.h"
#include "kda_case.h"
#include "kda_catalog.h"
#include "kda_files.h"
#include "kda_golden_internal.h"
#include "kda_mpfr.h"
#include "kda_npz.h"
#include "kda_prng.h"

#define JSON_FLAGS (JSON_INDENT(1) | JSON_REAL_PRECISION(17))

/* The L1 catalog cases that have a gradient case: every mode and the forward's discriminating
 * cases at CI size (every L0 case has one too). */
static const char *const l1_ids[] = {
    "t1-softplus-gqa",     "t15-log-prob",        "t16-lower-bound-mod", "t17-gdn",
    "t65-lower-bound-vk",  "t127-linear",         "t64-softplus-h0",     "gqa-mod",
    "varlen-ragged-h0",    "varlen-empty-edges",  "varlen-all-empty",    "gate-values-log",
    "gate-values-mixed",   "gate-values-gdn",     "softplus-tails",      "lower-bound-edges",
    "lower-bound-tiny",    "beta-values",         "beta-neg-eigval",     "keys-geometry-fla",
    "keys-geometry-off",   "near-zero-fla",       "near-zero-ggml",      "large-h0",
    "expansive",           "disc-erase-before-decay", "disc-readout-before-write",
    "disc-predict-undecayed", "disc-decay-value-axis", "disc-transposed-state",
    "disc-scale-misplaced", "disc-head-map",      "disc-l2-convention",  "disc-dropped-h0",
    "disc-beta-bf16",      "disc-exp2",
};
#define N_L1 ((int64_t)(sizeof l1_ids / sizeof l1_ids[0]))

/* The gradient cases in order: every L0 entry of the catalog, then l1_ids. */
static int64_t n_l0(void) {
  int64_t n = 0;
  for (int64_t i = 0; i < kda_catalog_count(); i++) n += kda_catalog_get(i)->level == KDA_LEVEL_L0;
  return n;
}

int64_t kda_golden_grad_count(void) { return n_l0() + N_L1; }

const kda_catalog_entry *kda_golden_grad_entry(int64_t i) {
  if (i < 0) return NULL;
  int64_t k = 0;
  for (int64_t j = 0; j < kda_catalog_count(); j++) {
    const kda_catalog_entry *e = kda_catalog_get(j);
    if (e->level != KDA_LEVEL_L0) continue;
    if (k++ == i) return e;
  }
  return i - k < N_L1 ? kda_catalog_find(l1_ids[i - k]) : NULL;
}

/* ---- Seeds (SPEC.md §13.9). */

/* Element e of seed stream s: L0 a dyadic in {-1, -3/4, ..., 3/4} (floor(8u)/4 - 1, exact in
 * every precision, so the adjoint stays exact); otherwise normal(seed, s, e) rounded to prec. */
static double seed_value(uint64_t seed, uint32_t s, uint64_t e, int l0, int32_t prec) {
  if (l0) return floor(8.0 * kda_prng_uniform(seed, s, e)) / 4.0 - 1.0;
  const double x = kda_prng_normal(seed, s, e);
  switch (prec) {
  case KDA_PRECISION_FP32: return (double)(float)x;
  case KDA_PRECISION_BF16: return kda_round_bf16(x);
  case KDA_PRECISION_FP16: return kda_round_f16(x);
  default: return x;
  }
}

typedef struct gcase {
  const kda_catalog_entry *e;
  kda_case c;
  double *seeds;  /* do [T HV V], dht [N HV K V] (want_final_state), dhc [C HV K V] */
  double *grads;  /* dq dk dv dg dbeta dA_log ddt_bias dh0, those present */
  double *ref;    /* the float64 backward, same layout */
  int64_t ns[3], ng[8];
  kda_mpfr_report rep;
} gcase;

static const char *const gnames[8] = {"dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias",
                                      "dh0"};

static void counts(gcase *g) {
  const kda_problem *p = &g->c.p;
  const int64_t GW = kda_problem_gate_width(p), st = p->HV * p->K * p->V;
  g->ns[0] = p->T * p->HV * p->V;
  g->ns[1] = p->want_final_state ? p->N * st : 0;
  g->ns[2] = p->n_checkpoints * st;
  g->ng[0] = g->ng[1] = p->T * p->H * p->K;
  g->ng[2] = p->T * p->HV * p->V;
  g->ng[3] = GW > 0 ? p->T * p->HV * GW : 0;
  g->ng[4] = p->T * p->HV;
  g->ng[5] = kda_problem_uses_A_log(p) && p->T > 0 ? p->HV : 0; /* T = 0: only dh0 */
  g->ng[6] = kda_problem_uses_dt_bias(p) && p->T > 0 ? p->HV * GW : 0;
  g->ng[7] = p->has_initial_state ? p->N * st : 0;
}

static int64_t sum(const int64_t *x, int n) {
  int64_t s = 0;
  for (int i = 0; i < n; i++) s += x[i];
  return s;
}

/* d's pointers into buf (layout of gcase.grads) and the seeds. */
static void grads_view(const gcase *g, double *buf, kda_grads_f64 *d) {
  double *at[8];
  int64_t o = 0;
  for (int k = 0; k < 8; k++) at[k] = g->ng[k] ? buf + o : NULL, o += g->ng[k];
  d->dout = g->seeds;
  d->dht = g->ns[1] ? g->seeds + g->ns[0] : NULL;
  d->dhc = g->ns[2] ? g->seeds + g->ns[0] + g->ns[1] : NULL;
  d->dq = at[0], d->dk = at[1], d->dv = at[2], d->dg = at[3], d->dbeta = at[4];
  d->dA_log = at[5], d->ddt_bias = at[6], d->dh0 = at[7];
}

static int build(gcase *g, char *err, size_t errlen) {
  int st = kda_catalog_build(g->e, &g->c, err, errlen);
  if (st) return st;
  counts(g);
  const size_t nseed = (size_t)sum(g->ns, 3) + 1, ngrad = (size_t)sum(g->ng, 8) + 1;
  g->seeds = calloc(nseed, sizeof(double));
  g->grads = calloc(ngrad, sizeof(double));
  g->ref = calloc(ngrad, sizeof(double));
  if (!g->seeds || !g->grads || !g->ref) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  const uint64_t seed = kda_catalog_seed(g->e);
  const int l0 = g->e->level == KDA_LEVEL_L0;
  int64_t o = 0;
  for (int s = 0; s < 3; s++)
    for (int64_t e = 0; e < g->ns[s]; e++)
      g->seeds[o++] = seed_value(seed, (uint32_t)(11 + s), (uint64_t)e, l0, g->c.input_precision);
  return KDA_OK;
}

static int certify(gcase *g, kda_golden_grad_info *info, char *err, size_t errlen) {
  kda_tensors_f64 t;
  kda_case_tensors(&g->c, &t);
  kda_grads_f64 d;
  grads_view(g, g->grads, &d);
  double t0 = kda_golden_now();
  int st = kda_mpfr_backward(&g->c.p, &t, &d, NULL, &g->rep, err, errlen);
  info->seconds_certify = kda_golden_now() - t0;
  if (st) return st;
  grads_view(g, g->ref, &d);
  st = kda_ref_backward_f64(&g->c.p, &t, &d, err, errlen);
  if (st) return st;
  /* the float64 backward against the certified values: ulps and normwise per gradient */
  int64_t o = 0;
  for (int k = 0; k < 8; k++) {
    double mx = 0, de = 0;
    for (int64_t e = o; e < o + g->ng[k]; e++) {
      mx = fmax(mx, fabs(g->grads[e]));
      de = fmax(de, fabs(g->ref[e] - g->grads[e]));
      if (g->grads[e] != 0) {
        const double ulp = nextafter(fabs(g->grads[e]), INFINITY) - fabs(g->grads[e]);
        info->ref_max_ulps = fmax(info->ref_max_ulps, fabs(g->ref[e] - g->grads[e]) / ulp);
      }
    }
    if (mx > 0) info->ref_max_normwise = fmax(info->ref_max_normwise, de / mx);
    o += g->ng[k];
  }
  info->method = g->rep.method;
  info->n_values = g->rep.n_values;
  info->n_proven = g->rep.n_proven;
  info->prec_bits = (int32_t)g->rep.prec_used;
  return KDA_OK;
}

/* The members: the case's inputs, the seeds, the gradients. */
static int members(const gcase *g, kda_gmember *m) {
  const kda_problem *p = &g->c.p;
  int n = kda_golden_members(&g->c, NULL, m);
  const int vk = p->state_layout == KDA_STATE_VK;
  const int64_t sa = vk ? p->V : p->K, sb = vk ? p->K : p->V;
  /* seeds: <f8 for fp64 cases, else <f4 (values exact in the input precision) */
  const int32_t dt = g->c.input_precision == KDA_PRECISION_FP64 ? KDA_DTYPE_F64 : KDA_DTYPE_F32;
  const int64_t GW = kda_problem_gate_width(p);
  kda_grads_f64 d;
  grads_view(g, g->grads, &d);
  kda_golden_member_set(&m[n++], "do", dt, 3, (int64_t[]){p->T, p->HV, p->V}, d.dout, NULL);
  if (g->ns[1])
    kda_golden_member_set(&m[n++], "dht", dt, 4, (int64_t[]){p->N, p->HV, sa, sb}, d.dht, NULL);
  if (g->ns[2])
    kda_golden_member_set(&m[n++], "dhc", dt, 4, (int64_t[]){p->n_checkpoints, p->HV, sa, sb},
                          d.dhc, NULL);
  const double *gp[8] = {d.dq, d.dk, d.dv, d.dg, d.dbeta, d.dA_log, d.ddt_bias, d.dh0};
  const int64_t shp[8][4] = {{p->T, p->H, p->K}, {p->T, p->H, p->K}, {p->T, p->HV, p->V},
                             {p->T, p->HV, GW},  {p->T, p->HV},      {p->HV},
                             {p->HV, GW},        {p->N, p->HV, sa, sb}};
  const int nd[8] = {3, 3, 3, 3, 2, 1, 2, 4};
  for (int k = 0; k < 8; k++)
    if (g->ng[k]) kda_golden_member_set(&m[n++], gnames[k], KDA_DTYPE_F64, nd[k], shp[k], gp[k], NULL);
  return n;
}

static json_t *grad_json(const gcase *g, const kda_gmember *m, int nm) {
  json_t *sums = json_object(), *seeds = json_array(), *grads = json_array();
  for (int i = 0; i < nm; i++) {
    char hex[65], key[64];
    if (kda_golden_member_sha256(&m[i], hex) != 0) break;
    snprintf(key, sizeof key, "%s.npy", m[i].name);
    json_object_set_new(sums, key, json_string(hex));
    if (m[i].name[0] == 'd' && (!strcmp(m[i].name, "do") || !strcmp(m[i].name, "dht") ||
                                !strcmp(m[i].name, "dhc")))
      json_array_append_new(seeds, json_string(m[i].name));
    else if (m[i].name[0] == 'd' && strcmp(m[i].name, "dt_bias") != 0)
      json_array_append_new(grads, json_string(m[i].name));
  }
  const kda_mpfr_report *r = &g->rep;
  json_t *cert = json_pack(
      "{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "method",
      r->method == KDA_CERT_PROVEN ? "PROVEN" : r->method == KDA_CERT_AGREED ? "AGREED" : "NONE",
      "reference", "kda_mpfr_backward: ball arithmetic in GNU MPFR, Ziv's strategy (SPEC.md §13.8)",
      "rounding", "binary64, round to nearest even, zeros written as +0", "precision_bits",
      (json_int_t)r->prec_used, "check_precision_bits", (json_int_t)r->prec_check, "evaluations",
      (json_int_t)r->ziv_rounds, "values", (json_int_t)r->n_values, "values_proven",
      (json_int_t)r->n_proven);
  const int l0 = g->e->level == KDA_LEVEL_L0;
  return json_pack("{s:s,s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:o,s:o}", "schema", KDA_GOLDEN_GRAD_SCHEMA,
                   "level", kda_level_name(g->e->level), "forward_case", g->e->id, "seed",
                   (json_int_t)kda_catalog_seed(g->e), "seeds_rule",
                   l0 ? "floor(8 uniform(seed, s, e)) / 4 - 1, s = 11 (do), 12 (dht), 13 (dhc)"
                      : "normal(seed, s, e) rounded to the input precision, s = 11 (do), 12 "
                        "(dht), 13 (dhc)",
                   "input_precision", kda_precision_file_name(g->c.input_precision), "seeds",
                   seeds, "gradients", grads, "certification", cert, "members_sha256", sums);
}

static int write_npz(const gcase *g, const char *path, char *err, size_t errlen) {
  kda_gmember m[32];
  const int nm = members(g, m);
  json_t *root = json_loads(g->c.manifest_json, 0, NULL), *gj = grad_json(g, m, nm);
  char *text = NULL;
  if (root && gj && json_object_set(root, "golden_grad", gj) == 0)
    text = json_dumps(root, JSON_FLAGS);
  json_decref(root);
  json_decref(gj);
  if (!text) return kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot build the manifest", path);
  const int st = kda_golden_npz_write(path, text, m, nm, err, errlen);
  free(text);
  return st;
}

static void gcase_free(gcase *g) {
  kda_case_free(&g->c);
  free(g->seeds);
  free(g->grads);
  free(g->ref);
}

int kda_golden_grad_make(int64_t i, const char *dir, kda_golden_grad_info *info, char *err,
                         size_t errlen) {
  memset(info, 0, sizeof *info);
  const double t0 = kda_golden_now();
  gcase g;
  memset(&g, 0, sizeof g);
  g.e = kda_golden_grad_entry(i);
  if (!g.e) return kda_fail(KDA_EINVAL, err, errlen, "gradient case %lld: no such case", (long long)i);
  info->index = i;
  char msg[KDA_ERRLEN] = "";
  int st = build(&g, msg, sizeof msg);
  if (!st) st = certify(&g, info, msg, sizeof msg);
  if (!st) {
    const char *lv = kda_level_name(g.e->level);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s.npz", dir, lv, g.e->id);
    st = write_npz(&g, path, msg, sizeof msg);
    if (!st && g.e->level == KDA_LEVEL_L0) {
      char *text = NULL;
      kda_tensors_f64 t;
      kda_case_tensors(&g.c, &t);
      kda_grads_f64 d;
      grads_view(&g, g.grads, &d);
      st = kda_golden_grad_trace(&g.c, g.e->comment, &t, &d, 1, &text, msg, sizeof msg);
      snprintf(path, sizeof path, "%s/%s/%s.txt", dir, lv, g.e->id);
      if (!st) st = kda_atomic_write(path, text, strlen(text), msg, sizeof msg);
      free(text);
    }
  }
  gcase_free(&g);
  info->status = st;
  info->seconds_total = kda_golden_now() - t0;
  if (st) return kda_fail(st, err, errlen, "gradient case '%s': %s", g.e->id, msg);
  return KDA_OK;
}

/* ---- The level manifests. */

int kda_golden_grad_write_manifest(const char *dir, int32_t level,
                                   const kda_golden_grad_info *infos, char *err, size_t errlen) {
  json_t *cases = json_array();
  for (int64_t i = 0; i < kda_golden_grad_count(); i++) {
    const kda_catalog_entry *e = kda_golden_grad_entry(i);
    if (e->level != level) continue;
    const kda_golden_grad_info *in = &infos[i];
    json_t *ref = json_pack("{s:o,s:o}", "max_ulps", kda_golden_jreal(in->ref_max_ulps),
                            "max_normwise", kda_golden_jreal(in->ref_max_normwise));
    json_array_append_new(
        cases, json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:o}", "id", e->id, "file",
                         e->id /* replaced below */, "comment", e->comment, "method",
                         in->method == KDA_CERT_PROVEN ? "PROVEN" : "AGREED", "values",
                         (json_int_t)in->n_values, "values_proven", (json_int_t)in->n_proven,
                         "ref_f64", ref));
    char file[512];
    snprintf(file, sizeof file, "%s.npz", e->id);
    json_object_set_new(json_array_get(cases, json_array_size(cases) - 1), "file",
                        json_string(file));
  }
  json_t *root = json_pack(
      "{s:s,s:s,s:s,s:s,s:I,s:o}", "schema", KDA_GOLDEN_GRAD_SET_SCHEMA, "level",
      kda_level_name(level), "description",
      "Gradient cases (SPEC.md §13): catalog cases with PRNG seeds do, dht, dhc and their "
      "certified gradients dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0",
      "versions", kda_golden_versions(), "number_of_cases", (json_int_t)json_array_size(cases),
      "cases", cases);
  char *text = root ? json_dumps(root, JSON_FLAGS) : NULL;
  json_decref(root);
  if (!text) return kda_fail(KDA_ENOMEM, err, errlen, "cannot build the gradient manifest");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/manifest.json", dir, kda_level_name(level));
  size_t len = strlen(text);
  text[len] = '\n';
  int st = kda_atomic_write(path, text, len + 1, err, errlen);
  free(text);
  return st;
}

int kda_golden_grad_write_all(const char *dir, double *seconds, char *err, size_t errlen) {
  const double t0 = kda_golden_now();
  const int64_t n = kda_golden_grad_count();
  kda_golden_grad_info *infos = calloc((size_t)n, sizeof *infos);
  if (!infos) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  char path[4096];
  int st = KDA_OK;
  const int32_t levels[2] = {KDA_LEVEL_L0, KDA_LEVEL_L1};
  for (int l = 0; !st && l < 2; l++) {
    snprintf(path, sizeof path, "%s/%s", dir, kda_level_name(levels[l]));
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
      st = kda_fail(KDA_EIO, err, errlen, "%s: cannot create: %s", dir, strerror(errno));
    if (!st && mkdir(path, 0777) != 0 && errno != EEXIST)
      st = kda_fail(KDA_EIO, err, errlen, "%s: cannot create: %s", path, strerror(errno));
  }
  for (int64_t i = 0; !st && i < n; i++) st = kda_golden_grad_make(i, dir, &infos[i], err, errlen);
  for (int l = 0; !st && l < 2; l++)
    st = kda_golden_grad_write_manifest(dir, levels[l], infos, err, errlen);
  free(infos);
  if (seconds) *seconds = kda_golden_now() - t0;
  return st;
}

int kda_golden_grad_owns(const char *level_dir_name, const char *name) {
  int32_t level;
  if (kda_level_parse(level_dir_name, &level) != KDA_OK) return 0;
  if (!strcmp(name, "manifest.json")) return 1;
  for (int64_t i = 0; i < kda_golden_grad_count(); i++) {
    const kda_catalog_entry *e = kda_golden_grad_entry(i);
    if (e->level != level) continue;
    const size_t L = strlen(e->id);
    if (!strncmp(name, e->id, L) &&
        (!strcmp(name + L, ".npz") || (level == KDA_LEVEL_L0 && !strcmp(name + L, ".txt"))))
      return 1;
  }
  return 0;
}

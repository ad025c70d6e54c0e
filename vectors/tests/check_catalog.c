/* check_catalog.c: tests of the golden catalog, the committed golden sets and their verifier.
 * SPDX-License-Identifier: MIT
 *
 * 1. Catalog sanity: unique ids, known designs, every flag defined and used, L0 limits.
 * 2. Coverage: the lists of the issue (sequence lengths, head sizes, grouped heads, varlen,
 *    gate values, softplus tails, lower bounds, betas, key geometries, near-zero vectors,
 *    large states, positive inputs, the three drift regimes) are checked on the built inputs.
 * 3. Discrimination: every mistake flag's case is run through a mutated float64 recurrence
 *    (test-only code below) implementing that mistake; its outputs must differ from the
 *    committed golden values by more than 1e-3 of their magnitude, while the unmutated
 *    recurrence agrees to 1e-12 and the float32 reference to 1e-4.
 * 4. The committed files: each one loads as a case whose inputs are the catalog's, its member
 *    hashes and SHA256SUMS hold, and its manifest names its certification method.
 * 5. Determinism: small cases regenerated twice give identical bytes, equal to the committed
 *    ones.
 * 6. Tamper detection: flipping one bit in every member of one file, and one random bit of
 *    every committed file, is detected by the verifier's checks.
 * Run from the repository root (the golden directory is ./golden).  Fixed seeds are printed in
 * failure messages.
 */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "kda_case.h"
#include "kda_catalog.h"
#include "kda_golden.h"
#include "kda_golden_internal.h"
#include "kda_npz.h"
#include "kda_prng.h"
#include "kda_ref.h"
#include "kda_sha256.h"
#include "kda_test.h"

#define GOLDEN "golden"
#define DISCRIMINATE 1e-3 /* a mistake must move some output by this much of its scale */

/* ==== Helpers ==== */

#define tmp_dir kda_test_tmpdir
static void tmp_setup(void) { kda_test_tmpdir_make("check-catalog"); }
static void tmp_teardown(void) { kda_test_tmpdir_remove(); }

static void build(const kda_catalog_entry *e, kda_case *c) {
  char err[KDA_ERRLEN] = "";
  int st = kda_catalog_build(e, c, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "build %s: %s", e->id, err);
}

static void golden_path(const kda_catalog_entry *e, const char *ext, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s/%s.%s", GOLDEN, kda_level_name(e->level), e->id, ext);
}

/* The committed golden outputs of e: o, then ht, then hc (sizes in part[3]). */
typedef struct gold {
  kda_case c;
  double *v;
  uint64_t part[3];
} gold;

static void gold_load(const kda_catalog_entry *e, gold *g) {
  char path[512], err[KDA_ERRLEN] = "";
  golden_path(e, "npz", path, sizeof path);
  int st = kda_case_load(path, &g->c, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "load %s: %s", path, err);
  kda_problem_sizes s;
  ck_assert_int_eq(kda_problem_sizes_get(&g->c.p, &s, NULL, 0), KDA_OK);
  g->part[0] = s.o;
  g->part[1] = s.ht;
  g->part[2] = s.hc;
  g->v = calloc((size_t)(s.o + s.ht + s.hc + 1), sizeof(double));
  ck_assert_ptr_nonnull(g->v);
  kda_npz *z = NULL;
  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  static const char *const names[3] = {"o", "ht", "hc"};
  uint64_t at = 0;
  for (int q = 0; q < 3; q++) {
    if (g->part[q] > 0) {
      st = kda_npz_read(z, names[q], KDA_DTYPE_F64, g->v + at, g->part[q], err, sizeof err);
      ck_assert_msg(st == KDA_OK, "%s: read %s: %s", path, names[q], err);
    }
    at += g->part[q];
  }
  kda_npz_close(z);
}

static void gold_free(gold *g) {
  kda_case_free(&g->c);
  free(g->v);
}

static int has_flag(const kda_catalog_entry *e, const kda_case *c, int flagno) {
  return (kda_catalog_flags(e, c) >> flagno) & 1;
}

/* A production entry's case without its token-major inputs (kda_gen_case_static): the flags
 * are read off the problem. */
static void build_static(const kda_catalog_entry *e, kda_case *c) {
  char text[1024], err[KDA_ERRLEN] = "";
  snprintf(text, sizeof text, "%s id=%s", e->desc, e->id);
  kda_gen_desc d;
  ck_assert_msg(kda_gen_parse(text, &d, err, sizeof err) == KDA_OK, "%s: %s", e->id, err);
  ck_assert_msg(kda_gen_case_static(&d, c, err, sizeof err) == KDA_OK, "%s: %s", e->id, err);
  kda_gen_desc_free(&d);
}

/* ==== 1. Catalog sanity ==== */

START_TEST(test_catalog_sanity) {
  const int64_t n = kda_catalog_count();
  ck_assert_int_gt(n, 50);
  int used[KDA_FLAG_COUNT] = {0};
  int64_t per_level[KDA_LEVEL_COUNT] = {0};
  for (int64_t i = 0; i < n; i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    ck_assert_ptr_nonnull(kda_level_name(e->level));
    per_level[e->level]++;
    ck_assert_msg(e->comment && strlen(e->comment) > 10, "%s: comment", e->id);
    for (const char *s = e->id; *s; s++)
      ck_assert_msg((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-',
                    "%s: id characters", e->id);
    for (int64_t j = 0; j < i; j++) ck_assert_str_ne(e->id, kda_catalog_get(j)->id);
    ck_assert_ptr_eq(kda_catalog_find(e->id), e);
    if (e->design) ck_assert_msg(kda_catalog_design_find(e->design), "%s: design", e->id);
    ck_assert_msg(i == 0 || kda_catalog_get(i - 1)->level <= e->level, "%s: order", e->id);
    kda_case c;
    if (e->prod) build_static(e, &c); /* production size: the problem, not gigabytes */
    else build(e, &c);
    for (int f = 0; f < KDA_FLAG_COUNT; f++) used[f] += has_flag(e, &c, f);
    if (e->level == KDA_LEVEL_L0) {
      ck_assert_msg(c.p.K <= 4 && c.p.V <= 4 && c.p.T <= 8, "%s: L0 limits", e->id);
      ck_assert(has_flag(e, &c, KDA_FLAGNO_EXACT_DYADIC));
    }
    ck_assert_msg(c.id && strcmp(c.id, e->id) == 0, "%s: case id", e->id);
    kda_case_free(&c);
  }
  ck_assert_int_ge(per_level[KDA_LEVEL_L0], 6);
  ck_assert_int_ge(per_level[KDA_LEVEL_L1], 45);
  ck_assert_int_ge(per_level[KDA_LEVEL_L2], 4);
  for (int f = 0; f < KDA_FLAG_COUNT; f++) {
    const kda_catalog_flag *fl = kda_catalog_flag_get(f);
    ck_assert_msg(fl && strlen(fl->description) > 20, "flag %d description", f);
    ck_assert_ptr_nonnull(kda_flag_kind_name(fl->kind));
    ck_assert_msg(used[f] > 0, "flag %s is on no case", fl->name);
  }
  ck_assert_ptr_null(kda_catalog_flag_get(KDA_FLAG_COUNT));
  ck_assert_ptr_null(kda_catalog_get(n));
  ck_assert_ptr_null(kda_catalog_find("no-such-case"));
  for (int64_t d = 0; d < kda_catalog_design_count(); d++) {
    int refs = 0;
    for (int64_t i = 0; i < n; i++)
      refs += kda_catalog_get(i)->design &&
              !strcmp(kda_catalog_get(i)->design, kda_catalog_design_get(d)->name);
    ck_assert_msg(refs > 0, "design %s is unused", kda_catalog_design_get(d)->name);
  }
}
END_TEST

/* Builds are deterministic and a design that does not fit its description is an error. */
START_TEST(test_catalog_build_errors) {
  kda_catalog_entry bad = {"bad", KDA_LEVEL_L1, 0, "seed=1 T=4 gate=softplus", "gate_values",
                           "a gate design on a softplus case", 0};
  kda_case c;
  char err[KDA_ERRLEN] = "";
  ck_assert_int_eq(kda_catalog_build(&bad, &c, err, sizeof err), KDA_EINVAL);
  ck_assert_msg(strstr(err, "gate=log"), "%s", err);
  bad.design = "no_such_design";
  ck_assert_int_eq(kda_catalog_build(&bad, &c, err, sizeof err), KDA_EINVAL);
  bad.design = "beta_values";
  bad.desc = "seed=1 T=8 beta=prob prec=f16"; /* 2^-126 is not exact in fp16 */
  ck_assert_int_eq(kda_catalog_build(&bad, &c, err, sizeof err), KDA_EINVAL);
  ck_assert_msg(strstr(err, "not exact"), "%s", err);
  bad.design = NULL;
  bad.desc = "seed=1 T=x";
  ck_assert_int_eq(kda_catalog_build(&bad, &c, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(kda_level_parse("L3", NULL), KDA_EINVAL);
  int32_t l = -1;
  ck_assert_int_eq(kda_level_parse("L1", &l), KDA_OK);
  ck_assert_int_eq(l, KDA_LEVEL_L1);
}
END_TEST

/* ==== 2. Coverage ==== */

typedef struct cover {
  int T[10], long_T, kv[3][3], kv_unequal, gqa[2], varlen, gates[8], gate_mix, sp_low,
      sp_high, lb_near_bound, lb_near_zero, lb_tiny, beta[4], neg_eig, key_zero, key_repeat,
      key_orth, key_collinear, nz_l2[3], large_h0, positive, drift_decay, drift_lowrank,
      drift_linear, prec[KDA_PRECISION_COUNT], family[4], vk, expansive;
} cover;

static const int64_t t_list[10] = {1, 15, 16, 17, 63, 64, 65, 127, 128, 129};
static const int64_t kv_list[3] = {60, 100, 128};
static const double gate_list[8] = {0.0, -0x1p-24, -1.0, -5.0, -20.0, -88.0, -1000.0, -INFINITY};

static double dot(const double *a, const double *b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

static void cover_keys(const kda_case *c, cover *cv) {
  const int64_t K = c->p.K, rows = c->p.T * c->p.H;
  for (int64_t r = 0; r < rows; r++) {
    const double *x = c->k + r * K, n2 = dot(x, x, K);
    if (n2 == 0.0) cv->key_zero = 1;
    if (r >= c->p.H && n2 > 0 && !memcmp(x, x - c->p.H * K, (size_t)K * 8)) cv->key_repeat = 1;
    for (int64_t s = (r > 8 * c->p.H ? r - 8 * c->p.H : 0); s < r && n2 > 0; s++) {
      const double *y = c->k + s * K, m2 = dot(y, y, K), d = dot(x, y, K);
      if (m2 == 0.0) continue;
      if (d == 0.0) cv->key_orth = 1;
      if (memcmp(x, y, (size_t)K * 8) && d * d > (1 - 1e-6) * n2 * m2) cv->key_collinear = 1;
    }
  }
}

static void cover_near_zero(const kda_case *c, cover *cv) {
  const int64_t K = c->p.K;
  for (int64_t r = 0; r < c->p.T * c->p.H; r++) {
    const double nq = sqrt(dot(c->q + r * K, c->q + r * K, K));
    const double nk = sqrt(dot(c->k + r * K, c->k + r * K, K));
    if ((nq > 0 && nq < 1e-5) || (nk > 0 && nk < 1e-5)) cv->nz_l2[c->p.l2_mode] = 1;
  }
}

static void cover_gates(const kda_case *c, cover *cv) {
  const kda_problem *p = &c->p;
  const int64_t GW = kda_problem_gate_width(p);
  for (int64_t t = 0; GW > 0 && t < p->T; t++)
    for (int64_t hv = 0; hv < p->HV; hv++) {
      const double *g = c->g + (t * p->HV + hv) * GW;
      for (int64_t ch = 0; ch < GW; ch++) {
        const double b = c->dt_bias ? c->dt_bias[hv * GW + ch] : 0.0;
        const double A = c->A_log ? c->A_log[hv] : 0.0;
        if (p->gate_mode == KDA_GATE_LOG)
          for (int i = 0; i < 8; i++) cv->gates[i] |= g[ch] == gate_list[i];
        if (p->gate_mode == KDA_GATE_LOG && ch > 0 && g[ch] != g[0]) cv->gate_mix = 1;
        if (p->gate_mode == KDA_GATE_SOFTPLUS) {
          cv->sp_low |= g[ch] + b < -16.6;
          cv->sp_high |= g[ch] + b > 20.0;
        }
        if (p->gate_mode == KDA_GATE_LOWER_BOUND) {
          const double ge = kda_ref_gate(p->gate_mode, g[ch], b, A, p->has_A_log, p->lower_bound);
          cv->lb_near_bound |= p->lower_bound == -5.0 && ge < -4.99;
          cv->lb_near_zero |= ge > -1e-6;
          cv->lb_tiny |= p->lower_bound > -0.01;
        }
      }
    }
}

static void cover_beta(const kda_case *c, cover *cv) {
  for (int64_t i = 0; i < c->p.T * c->p.HV; i++) {
    const double b = kda_ref_beta(c->p.beta_mode, c->beta[i]);
    if (c->p.beta_mode == KDA_BETA_PROB) {
      cv->beta[0] |= b == 0.0;
      cv->beta[1] |= b > 0.0 && b < 1e-6;
      cv->beta[2] |= b == 0.5;
      cv->beta[3] |= b == 1.0;
    }
    cv->neg_eig |= c->p.beta_mode == KDA_BETA_LOGIT_NEG && b > 1.99;
  }
}

/* Keys of every head lie in a 2-dimensional subspace: rank of the key rows <= 2. */
static int keys_rank2(const kda_case *c) {
  const int64_t K = c->p.K;
  double b1[64], b2[64];
  if (K > 64 || c->p.H != 1 || c->p.T < 3) return 0;
  memcpy(b1, c->k, (size_t)K * 8);
  const double n1 = dot(b1, b1, K);
  memcpy(b2, c->k + K, (size_t)K * 8);
  const double d12 = dot(b2, b1, K) / n1;
  for (int64_t i = 0; i < K; i++) b2[i] -= d12 * b1[i];
  const double n2 = dot(b2, b2, K);
  for (int64_t t = 2; t < c->p.T; t += 97) {
    double r[64];
    memcpy(r, c->k + t * K, (size_t)K * 8);
    const double a = dot(r, b1, K) / n1, b = dot(r, b2, K) / n2;
    for (int64_t i = 0; i < K; i++) r[i] -= a * b1[i] + b * b2[i];
    if (dot(r, r, K) > 1e-10 * (dot(c->k + t * K, c->k + t * K, K) + 1e-30)) return 0;
  }
  return K >= 4;
}

static void cover_case(const kda_catalog_entry *e, const kda_case *c, cover *cv) {
  const kda_problem *p = &c->p;
  for (int i = 0; i < 10; i++) cv->T[i] |= p->N == 1 && p->T == t_list[i];
  cv->long_T |= p->T > 4096;
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) cv->kv[a][b] |= p->K == kv_list[a] && p->V == kv_list[b];
  cv->kv_unequal |= p->K != p->V;
  if (p->HV > p->H && p->H > 1) cv->gqa[p->head_map] = 1;
  int empty = 0;
  for (int64_t n = 0; n < p->N; n++) empty |= c->cu_seqlens[n] == c->cu_seqlens[n + 1];
  cv->varlen |= p->N > 2 && empty && p->has_initial_state && p->T > 0;
  cover_gates(c, cv);
  cover_beta(c, cv);
  cover_keys(c, cv);
  if (p->l2_mode != KDA_L2_OFF) cover_near_zero(c, cv);
  double hmax = 0.0;
  for (int64_t i = 0; c->h0 && i < p->N * p->HV * p->K * p->V; i++)
    hmax = fmax(hmax, fabs(c->h0[i]));
  cv->large_h0 |= hmax >= 0x1p60;
  int pos = 1;
  for (int64_t i = 0; i < p->T * p->H * p->K; i++) pos &= c->q[i] >= 0 && c->k[i] >= 0;
  for (int64_t i = 0; i < p->T * p->HV * p->V; i++) pos &= c->v[i] >= 0;
  cv->positive |= pos && p->T > 0;
  const int drift = p->T >= 65536 && p->n_checkpoints >= 15 && p->K <= 8 && p->V <= 8;
  if (drift && p->family == KDA_FAMILY_KDA && p->gate_mode == KDA_GATE_LOG) {
    int constant = fabs(c->g[0] + 1e-4) < 1e-7;
    for (int64_t i = 1; constant && i < p->T * p->HV * p->K; i++) constant = c->g[i] == c->g[0];
    cv->drift_decay |= constant;
  }
  cv->drift_lowrank |= drift && p->family == KDA_FAMILY_DELTANET && keys_rank2(c);
  cv->drift_linear |= drift && p->family == KDA_FAMILY_LINEAR;
  cv->prec[c->input_precision] = 1;
  cv->family[p->family] = 1;
  cv->vk |= p->state_layout == KDA_STATE_VK;
  for (int64_t t = 0; p->l2_mode == KDA_L2_OFF && t < p->T; t++) {
    const double *k = c->k + t * p->H * p->K;
    cv->expansive |= kda_ref_beta(p->beta_mode, c->beta[t * p->HV]) * dot(k, k, p->K) > 2.0;
  }
  (void)e;
}

START_TEST(test_coverage) {
  cover cv;
  memset(&cv, 0, sizeof cv);
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (e->level != KDA_LEVEL_L1) continue;
    kda_case c;
    build(e, &c);
    cover_case(e, &c, &cv);
    kda_case_free(&c);
  }
  for (int i = 0; i < 10; i++) ck_assert_msg(cv.T[i], "no case with T = %lld", (long long)t_list[i]);
  ck_assert_msg(cv.long_T, "no case with T > 4096");
  for (int a = 0; a < 3; a++) {
    int any = 0;
    for (int b = 0; b < 3; b++) any |= cv.kv[a][b] | cv.kv[b][a];
    ck_assert_msg(any, "no case with K or V = %lld", (long long)kv_list[a]);
  }
  ck_assert_msg(cv.kv[0][1] && cv.kv[1][0] && cv.kv[2][2], "K/V pairs 60x100, 100x60, 128x128");
  ck_assert(cv.kv_unequal);
  ck_assert_msg(cv.gqa[KDA_HEADMAP_DIV] && cv.gqa[KDA_HEADMAP_MOD], "grouped heads, both maps");
  ck_assert_msg(cv.varlen, "ragged batch with empty sequences and initial states");
  for (int i = 0; i < 8; i++) ck_assert_msg(cv.gates[i], "gate value %a missing", gate_list[i]);
  ck_assert_msg(cv.gate_mix, "gate mixtures");
  ck_assert_msg(cv.sp_low && cv.sp_high, "softplus tails");
  ck_assert_msg(cv.lb_near_bound && cv.lb_near_zero && cv.lb_tiny, "lower-bound gates");
  for (int i = 0; i < 4; i++) ck_assert_msg(cv.beta[i], "beta value %d missing", i);
  ck_assert_msg(cv.neg_eig, "beta up to 2 in logit_neg");
  ck_assert_msg(cv.key_zero && cv.key_repeat && cv.key_orth && cv.key_collinear, "key geometry "
                "zero %d repeated %d orthogonal %d collinear %d", cv.key_zero, cv.key_repeat,
                cv.key_orth, cv.key_collinear);
  ck_assert_msg(cv.nz_l2[KDA_L2_FLA] && cv.nz_l2[KDA_L2_GGML], "near-zero vectors per L2");
  ck_assert_msg(cv.large_h0, "large initial states");
  ck_assert_msg(cv.positive, "all-positive inputs");
  ck_assert_msg(cv.drift_decay && cv.drift_lowrank && cv.drift_linear,
                "drift regimes: decay %d lowrank %d linear %d", cv.drift_decay,
                cv.drift_lowrank, cv.drift_linear);
  /* Every input precision but fp64 (tf32 is a class only: no case has tf32 inputs). */
  for (int i = 1; i < KDA_PRECISION_COUNT; i++)
    if (kda_precision_file_name(i)) ck_assert_msg(cv.prec[i], "precision %s", kda_precision_name(i));
  for (int i = 0; i < 4; i++) ck_assert_msg(cv.family[i], "family %s", kda_family_name(i));
  ck_assert(cv.vk);
  ck_assert_msg(cv.expansive, "an expansive case");
}
END_TEST

/* ==== 3. Discrimination: mutated float64 recurrences (test-only) ==== */

enum {
  M_NONE, M_ERASE_BEFORE_DECAY, M_READOUT_BEFORE_WRITE, M_READOUT_PREVIOUS,
  M_PREDICT_UNDECAYED, M_DECAY_VALUE_AXIS, M_LAYOUT_TRANSPOSED, M_COMPUTE_TRANSPOSED,
  M_SCALE_ON_K, M_SCALE_BEFORE_L2, M_SCALE_TWICE, M_HEAD_MAP, M_OTHER_L2, M_DROP_H0,
  M_BETA_BF16, M_EXP2, M_COUNT
};

static const char *const mutant_names[M_COUNT] = {
    "none", "erase before decay", "readout before write (after decay)",
    "readout of the previous state", "prediction on the undecayed state",
    "decay along the value axis", "state layout transposed", "state used transposed",
    "scale on k", "scale before L2", "scale on q and on o", "other head map",
    "other L2 convention", "initial state dropped", "beta rounded to bf16", "exp2 for exp"};

/* The mutants each mistake flag stands for. */
static int flag_mutants(int flagno, int out[4]) {
  int n = 0;
  switch (flagno) {
  case KDA_FLAGNO_ERASE_BEFORE_DECAY: out[n++] = M_ERASE_BEFORE_DECAY; break;
  case KDA_FLAGNO_READOUT_BEFORE_WRITE:
    out[n++] = M_READOUT_BEFORE_WRITE;
    out[n++] = M_READOUT_PREVIOUS;
    break;
  case KDA_FLAGNO_PREDICT_UNDECAYED: out[n++] = M_PREDICT_UNDECAYED; break;
  case KDA_FLAGNO_DECAY_VALUE_AXIS: out[n++] = M_DECAY_VALUE_AXIS; break;
  case KDA_FLAGNO_TRANSPOSED_STATE:
    out[n++] = M_LAYOUT_TRANSPOSED;
    out[n++] = M_COMPUTE_TRANSPOSED;
    break;
  case KDA_FLAGNO_SCALE_MISPLACED:
    out[n++] = M_SCALE_ON_K;
    out[n++] = M_SCALE_BEFORE_L2;
    out[n++] = M_SCALE_TWICE;
    break;
  case KDA_FLAGNO_WRONG_HEAD_MAP: out[n++] = M_HEAD_MAP; break;
  case KDA_FLAGNO_OTHER_L2_CONVENTION: out[n++] = M_OTHER_L2; break;
  case KDA_FLAGNO_DROPPED_INITIAL_STATE: out[n++] = M_DROP_H0; break;
  case KDA_FLAGNO_BETA_BF16: out[n++] = M_BETA_BF16; break;
  case KDA_FLAGNO_EXP2_FOR_EXP: out[n++] = M_EXP2; break;
  default: break;
  }
  return n;
}

typedef struct mrun {
  const kda_case *c;
  int m;
  double *S, *S0, *qq, *kk, *a, *pr, b;
} mrun;

/* Index of S[i][j] in a stored state of the case's layout (the other one for the mutant). */
static int64_t mstate_at(const mrun *r, int64_t i, int64_t j) {
  const kda_problem *p = &r->c->p;
  int vk = p->state_layout == KDA_STATE_VK;
  if (r->m == M_LAYOUT_TRANSPOSED) vk = !vk;
  return vk ? j * p->K + i : i * p->V + j;
}

static void mprepare(mrun *r, int64_t t, int64_t hv) {
  const kda_case *c = r->c;
  const kda_problem *p = &c->p;
  const int64_t K = p->K, GW = kda_problem_gate_width(p);
  int32_t map = p->head_map, l2 = p->l2_mode;
  if (r->m == M_HEAD_MAP) map = !map;
  if (r->m == M_OTHER_L2 && l2 != KDA_L2_OFF) l2 = l2 == KDA_L2_FLA ? KDA_L2_GGML : KDA_L2_FLA;
  const int64_t h = kda_ref_head(map, p->H, p->HV, hv);
  const double *q = c->q + (t * p->H + h) * K, *k = c->k + (t * p->H + h) * K;
  for (int64_t i = 0; i < K; i++) r->qq[i] = r->m == M_SCALE_BEFORE_L2 ? p->scale * q[i] : q[i];
  kda_ref_l2(l2, p->l2_eps, K, r->qq, r->qq);
  kda_ref_l2(l2, p->l2_eps, K, k, r->kk);
  for (int64_t i = 0; i < K; i++) {
    if (r->m != M_SCALE_BEFORE_L2 && r->m != M_SCALE_ON_K) r->qq[i] *= p->scale;
    if (r->m == M_SCALE_ON_K) r->kk[i] *= p->scale;
  }
  for (int64_t i = 0; i < K; i++) r->a[i] = 1.0;
  for (int64_t ch = 0; ch < GW; ch++) {
    const double b = c->dt_bias ? c->dt_bias[hv * GW + ch] : 0.0, A = c->A_log ? c->A_log[hv] : 0;
    const double ge = kda_ref_gate(p->gate_mode, c->g[(t * p->HV + hv) * GW + ch], b, A,
                                   p->has_A_log, p->lower_bound);
    r->a[ch] = r->m == M_EXP2 ? exp2(ge) : exp(ge);
  }
  for (int64_t i = GW; GW == 1 && i < K; i++) r->a[i] = r->a[0];
  r->b = kda_ref_beta(p->beta_mode, c->beta[t * p->HV + hv]);
  if (r->m == M_BETA_BF16) r->b = kda_round_bf16(r->b);
}

/* S[i][j] as the mutant reads it in the prediction and readout. */
static double mread(const mrun *r, const double *S, int64_t i, int64_t j) {
  const int64_t V = r->c->p.V;
  return r->m == M_COMPUTE_TRANSPOSED ? S[j * V + i] : S[i * V + j];
}

static void mdecay(mrun *r) {
  const int64_t K = r->c->p.K, V = r->c->p.V;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++)
      r->S[i * V + j] *= r->m == M_DECAY_VALUE_AXIS ? r->a[j % K] : r->a[i];
}

static void mreadout(const mrun *r, const double *S, double *o) {
  const int64_t K = r->c->p.K, V = r->c->p.V;
  for (int64_t j = 0; j < V; j++) {
    o[j] = 0.0;
    for (int64_t i = 0; i < K; i++) o[j] += mread(r, S, i, j) * r->qq[i];
    if (r->m == M_SCALE_TWICE) o[j] *= r->c->p.scale;
  }
}

static void mstep(mrun *r, int64_t t, int64_t hv, double *o) {
  const kda_problem *p = &r->c->p;
  const int64_t K = p->K, V = p->V;
  const double *v = r->c->v + (t * p->HV + hv) * V;
  const int decays = p->family <= KDA_FAMILY_GDN, erases = p->family != KDA_FAMILY_LINEAR;
  mprepare(r, t, hv);
  memcpy(r->S0, r->S, (size_t)(K * V) * sizeof(double));
  if (r->m == M_READOUT_PREVIOUS) mreadout(r, r->S0, o);
  if (decays && r->m != M_ERASE_BEFORE_DECAY) mdecay(r);
  const double *P = r->m == M_PREDICT_UNDECAYED || r->m == M_ERASE_BEFORE_DECAY ? r->S0 : r->S;
  for (int64_t j = 0; j < V; j++) {
    r->pr[j] = 0.0;
    for (int64_t i = 0; erases && i < K; i++) r->pr[j] += mread(r, P, i, j) * r->kk[i];
  }
  if (r->m == M_READOUT_BEFORE_WRITE) mreadout(r, r->S, o);
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) r->S[i * V + j] += r->kk[i] * (r->b * (v[j] - r->pr[j]));
  if (decays && r->m == M_ERASE_BEFORE_DECAY) mdecay(r);
  if (r->m != M_READOUT_BEFORE_WRITE && r->m != M_READOUT_PREVIOUS) mreadout(r, r->S, o);
}

/* Runs mutant m on case c; out holds o, ht, hc like the golden values. */
static void mutant_run(const kda_case *c, int m, double *out, const uint64_t part[3]) {
  const kda_problem *p = &c->p;
  const int64_t K = p->K, V = p->V;
  double *w = calloc((size_t)(2 * K * V + 2 * K + K + V), sizeof(double));
  ck_assert_ptr_nonnull(w);
  mrun r = {c, m, w, w + K * V, w + 2 * K * V, w + 2 * K * V + K, w + 2 * K * V + 2 * K,
            w + 2 * K * V + 3 * K, 0.0};
  int64_t cpt = 0;
  for (int64_t n = 0; n < p->N; n++)
    for (int64_t hv = 0; hv < p->HV; hv++) {
      const int64_t base = (n * p->HV + hv) * K * V;
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++)
          r.S[i * V + j] = p->has_initial_state && m != M_DROP_H0 ? c->h0[base + mstate_at(&r, i, j)]
                                                                  : 0.0;
      for (int64_t t = c->cu_seqlens[n]; t < c->cu_seqlens[n + 1]; t++) {
        mstep(&r, t, hv, out + (t * p->HV + hv) * V);
        for (cpt = 0; cpt < p->n_checkpoints && c->checkpoints[cpt] != t; cpt++) {}
        for (int64_t i = 0; cpt < p->n_checkpoints && i < K; i++)
          for (int64_t j = 0; j < V; j++)
            out[part[0] + part[1] + (cpt * p->HV + hv) * K * V + mstate_at(&r, i, j)] =
                r.S[i * V + j];
      }
      for (int64_t i = 0; p->want_final_state && i < K; i++)
        for (int64_t j = 0; j < V; j++) out[part[0] + base + mstate_at(&r, i, j)] = r.S[i * V + j];
    }
  free(w);
}

/* max over o, ht, hc of max|x - gold| / max|gold| (NaN counts as infinite). */
static double spread(const double *x, const double *g, const uint64_t part[3]) {
  double worst = 0.0;
  uint64_t at = 0;
  for (int q = 0; q < 3; q++) {
    double gm = 0.0, dm = 0.0;
    for (uint64_t e = at; e < at + part[q]; e++) {
      gm = fmax(gm, fabs(g[e]));
      dm = isnan(x[e]) ? INFINITY : fmax(dm, fabs(x[e] - g[e]));
    }
    if (dm > 0) worst = fmax(worst, gm > 0 ? dm / gm : INFINITY);
    at += part[q];
  }
  return worst;
}

/* The float32 reference's spread on the same case. */
static double spread_f32(const gold *g) {
  const kda_case *c = &g->c;
  kda_problem_sizes s;
  kda_problem_sizes_get(&c->p, &s, NULL, 0);
  const uint64_t n = g->part[0] + g->part[1] + g->part[2];
  float *in = calloc((size_t)(s.q + s.k + s.v + s.g + s.beta + s.A_log + s.dt_bias + s.h0 + 8),
                     sizeof(float));
  float *out = calloc((size_t)n + 1, sizeof(float));
  double *o64 = calloc((size_t)n + 1, sizeof(double));
  ck_assert(in && out && o64);
  const double *src[8] = {c->q, c->k, c->v, c->g, c->beta, c->A_log, c->dt_bias, c->h0};
  const uint64_t cnt[8] = {s.q, s.k, s.v, s.g, s.beta, s.A_log, s.dt_bias, s.h0};
  const float *dst[8];
  float *at = in;
  for (int m = 0; m < 8; m++) {
    dst[m] = src[m] ? at : NULL;
    for (uint64_t i = 0; src[m] && i < cnt[m]; i++) *at++ = (float)src[m][i];
  }
  kda_tensors_f32 t = {dst[0], dst[1], dst[2], dst[3], dst[4], dst[5], dst[6], dst[7],
                       c->cu_seqlens, c->checkpoints, out, out + g->part[0],
                       out + g->part[0] + g->part[1]};
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_ref_forward_f32(&c->p, &t, err, sizeof err), KDA_OK);
  for (uint64_t i = 0; i < n; i++) o64[i] = out[i];
  const double sp = spread(o64, g->v, g->part);
  free(in);
  free(out);
  free(o64);
  return sp;
}

START_TEST(test_discriminating) {
  int covered[KDA_FLAG_COUNT] = {0};
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    int muts[4], nm = 0, flagno = -1;
    for (int f = 0; f < KDA_FLAG_COUNT && !nm; f++)
      if (kda_catalog_flag_get(f)->kind == KDA_FLAG_MISTAKE && (e->flags >> f) & 1) {
        nm = flag_mutants(f, muts);
        flagno = f;
      }
    if (!nm) continue;
    gold g;
    gold_load(e, &g);
    const uint64_t n = g.part[0] + g.part[1] + g.part[2];
    double *x = calloc((size_t)n + 1, sizeof(double));
    ck_assert_ptr_nonnull(x);
    mutant_run(&g.c, M_NONE, x, g.part);
    const double base = spread(x, g.v, g.part), f32 = spread_f32(&g);
    ck_assert_msg(base < 1e-12, "%s: the unmutated recurrence is %g away", e->id, base);
    ck_assert_msg(f32 < 1e-4, "%s: ref-f32 is %g away", e->id, f32);
    for (int k = 0; k < nm; k++) {
      memset(x, 0, (size_t)n * sizeof(double));
      mutant_run(&g.c, muts[k], x, g.part);
      const double d = spread(x, g.v, g.part);
      printf("  %-26s %-38s relative change %.3g (ref-f32 %.2g)\n", e->id,
             mutant_names[muts[k]], d, f32);
      ck_assert_msg(d > DISCRIMINATE, "%s (seed %llu): mutant '%s' changes the outputs by only "
                    "%g of their scale", e->id, (unsigned long long)kda_catalog_seed(e),
                    mutant_names[muts[k]], d);
    }
    covered[flagno] = 1;
    free(x);
    gold_free(&g);
  }
  for (int f = 0; f < KDA_FLAG_COUNT; f++)
    if (kda_catalog_flag_get(f)->kind == KDA_FLAG_MISTAKE)
      ck_assert_msg(covered[f], "mistake %s has no discriminating case",
                    kda_catalog_flag_get(f)->name);
}
END_TEST

/* ==== 4. The committed files ==== */

START_TEST(test_committed_files) {
  char msg[KDA_ERRLEN] = "";
  ck_assert_msg(kda_golden_check_sums(GOLDEN, msg, sizeof msg) == KDA_OK, "%s", msg);
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (!kda_level_committed(e->level)) continue;
    char path[512];
    golden_path(e, "npz", path, sizeof path);
    ck_assert_msg(kda_golden_check_members(path, msg, sizeof msg) == KDA_OK, "%s", msg);
    gold g;
    kda_case c;
    gold_load(e, &g);
    build(e, &c);
    ck_assert_msg(memcmp(&g.c.p, &c.p, sizeof c.p) == 0, "%s: problem", e->id);
    kda_problem_sizes s;
    kda_problem_sizes_get(&c.p, &s, NULL, 0);
    ck_assert(!memcmp(g.c.q, c.q, s.q * 8) && !memcmp(g.c.k, c.k, s.k * 8));
    ck_assert(!memcmp(g.c.v, c.v, s.v * 8) && !memcmp(g.c.beta, c.beta, s.beta * 8));
    ck_assert(!c.g || !memcmp(g.c.g, c.g, s.g * 8));
    ck_assert(!c.h0 || !memcmp(g.c.h0, c.h0, s.h0 * 8));
    json_t *m = json_loads(g.c.manifest_json, 0, NULL), *go = json_object_get(m, "golden");
    const char *method = json_string_value(json_object_get(json_object_get(go, "certification"),
                                                           "method"));
    ck_assert_msg(method && (!strcmp(method, "PROVEN") || !strcmp(method, "AGREED")),
                  "%s: certification method", e->id);
    json_t *fl = json_object_get(go, "flags");
    size_t nf = 0;
    for (int f = 0; f < KDA_FLAG_COUNT; f++)
      if (has_flag(e, &c, f))
        ck_assert_str_eq(json_string_value(json_array_get(fl, nf++)), kda_catalog_flag_get(f)->name);
    ck_assert_uint_eq(json_array_size(fl), nf);
    ck_assert_int_eq(json_integer_value(json_object_get(go, "seed")), (json_int_t)kda_catalog_seed(e));
    json_decref(m);
    kda_case_free(&c);
    gold_free(&g);
  }
}
END_TEST

/* The on-demand level: golden/L2.sha256 pins exactly its cases, in catalog order, and a
 * pin that does not match is reported. */
START_TEST(test_pins) {
  char path[512], msg[KDA_ERRLEN];
  snprintf(path, sizeof path, "%s/L2.sha256", GOLDEN);
  size_t len;
  char *text = (char *)kda_test_slurp(path, &len);
  text = realloc(text, len + 1);
  text[len] = '\0';
  char *save = NULL, *ln = strtok_r(text, "\n", &save);
  int64_t n = 0;
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    ck_assert_int_eq(kda_level_committed(e->level), e->level != KDA_LEVEL_L2);
    if (e->level != KDA_LEVEL_L2) continue;
    /* the production set: generated inputs need generator regimes (no design), K = V = 128 */
    kda_gen_desc d;
    ck_assert_msg(e->prod && !e->design, "%s: L2 is the production set", e->id);
    ck_assert_int_eq(kda_gen_parse(e->desc, &d, msg, sizeof msg), KDA_OK);
    ck_assert_msg(d.p.K == 128 && d.p.V == 128 && d.p.T >= 4096, "%s: not production size",
                  e->id);
    kda_gen_desc_free(&d);
    char want[256];
    snprintf(want, sizeof want, "L2/%s.npz", e->id);
    ck_assert_msg(ln && strlen(ln) > 66 && !strcmp(ln + 66, want), "pin of %s", e->id);
    ln = strtok_r(NULL, "\n", &save);
    n++;
  }
  ck_assert_ptr_null(ln);
  ck_assert_int_ge(n, 4);
  free(text);
  /* a directory without the files: the first pin fails, naming the file */
  ck_assert_int_eq(kda_golden_check_pins(path, tmp_dir, KDA_LEVEL_L2, msg, sizeof msg), KDA_EIO);
  ck_assert_msg(strstr(msg, "prod-"), "%s", msg);
}
END_TEST

/* ==== 5. Determinism ==== */

static double cost(const kda_catalog_entry *e) {
  kda_case c;
  build(e, &c);
  double x = (double)c.p.T * (double)c.p.HV * (double)c.p.K * (double)c.p.V;
  kda_case_free(&c);
  return x;
}

/* Makes every L0 case and every small L1 case twice; both equal the committed bytes. */
START_TEST(test_regeneration) {
  char d1[128], d2[128], err[KDA_ERRLEN], msg[KDA_ERRLEN];
  int64_t made = 0;
  for (int rep = 0; rep < 2; rep++) {
    snprintf(rep ? d2 : d1, 128, "%s/run%d", tmp_dir, rep);
    const char *d = rep ? d2 : d1;
    ck_assert_int_eq(mkdir(d, 0755), 0);
    for (int l = 0; l < KDA_LEVEL_COUNT; l++) {
      char sub[256];
      snprintf(sub, sizeof sub, "%s/%s", d, kda_level_name(l));
      ck_assert_int_eq(mkdir(sub, 0755), 0);
    }
  }
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (!kda_level_committed(e->level) || cost(e) > 40000) continue;
    for (int rep = 0; rep < 2; rep++) {
      kda_golden_info in;
      int st = kda_golden_make(e, rep ? d2 : d1, &in, err, sizeof err);
      ck_assert_msg(st == KDA_OK, "%s: %s", e->id, err);
      ck_assert_int_eq(in.status, KDA_OK);
    }
    for (int txt = 0; txt <= (e->level == KDA_LEVEL_L0); txt++) {
      char a[512], b[512], c[512];
      const char *ext = txt ? "txt" : "npz";
      snprintf(a, sizeof a, "%s/%s/%s.%s", d1, kda_level_name(e->level), e->id, ext);
      snprintf(b, sizeof b, "%s/%s/%s.%s", d2, kda_level_name(e->level), e->id, ext);
      golden_path(e, ext, c, sizeof c);
      ck_assert_msg(kda_golden_compare_files(a, b, msg, sizeof msg) == 0, "%s", msg);
      ck_assert_msg(kda_golden_compare_files(c, a, msg, sizeof msg) == 0, "%s", msg);
    }
    made++;
  }
  ck_assert_int_ge(made, 35);
}
END_TEST

/* ==== 6. Tamper detection ==== */

/* Offset of member `name`'s bytes inside the archive file buf (stored members). */
static size_t member_offset(const char *path, const unsigned char *buf, size_t len,
                            const char *name, size_t *mlen) {
  int ze = 0;
  zip_t *za = zip_open(path, ZIP_RDONLY, &ze);
  ck_assert_ptr_nonnull(za);
  zip_stat_t zs;
  ck_assert_int_eq(zip_stat(za, name, 0, &zs), 0);
  unsigned char *m = malloc((size_t)zs.size + 1);
  zip_file_t *zf = zip_fopen(za, name, 0);
  ck_assert(m && zf);
  ck_assert_int_eq(zip_fread(zf, m, zs.size), (zip_int64_t)zs.size);
  zip_fclose(zf);
  zip_discard(za);
  size_t off = SIZE_MAX;
  for (size_t i = 0; i + zs.size <= len && off == SIZE_MAX; i++)
    if (buf[i] == m[0] && memcmp(buf + i, m, (size_t)zs.size) == 0) off = i;
  free(m);
  ck_assert_msg(off != SIZE_MAX, "%s: member %s not found in the file bytes", path, name);
  *mlen = (size_t)zs.size;
  return off;
}

static void copy_file(const char *from, const char *to) {
  size_t n;
  unsigned char *b = kda_test_slurp(from, &n);
  kda_test_write_all(to, b, n);
  free(b);
}

/* Flips bit `bit` of byte `pos` of a copy of buf and writes it to path. */
static void write_flipped(const char *path, const unsigned char *buf, size_t len, size_t pos,
                          int bit) {
  unsigned char *b = malloc(len);
  ck_assert_ptr_nonnull(b);
  memcpy(b, buf, len);
  b[pos] ^= (unsigned char)(1u << bit);
  kda_test_write_all(path, b, len);
  free(b);
}

/* The names of an archive's members, in order; returns the count (at most 32: a golden
 * gradient file has inputs, seeds and gradients). */
static int member_names(const char *path, char names[32][64]) {
  int ze = 0;
  zip_t *za = zip_open(path, ZIP_RDONLY, &ze);
  ck_assert_ptr_nonnull(za);
  int n = (int)zip_get_num_entries(za, 0);
  ck_assert_int_le(n, 32);
  for (int i = 0; i < n; i++) snprintf(names[i], 64, "%s", zip_get_name(za, (zip_uint64_t)i, 0));
  zip_discard(za);
  return n;
}

/* Every member of one L0 file: one bit flipped in it is reported by SHA256SUMS (naming the
 * file), by the member hashes or the archive's CRC (naming the member) and by the comparison
 * with the regenerated file (naming the member). */
START_TEST(test_bitflip_members) {
  const kda_catalog_entry *e = kda_catalog_find("l0-varlen-h0");
  ck_assert_ptr_nonnull(e);
  char dir[256], sub[300], path[512], fresh[512], src[512], msg[KDA_ERRLEN], err[KDA_ERRLEN];
  snprintf(dir, sizeof dir, "%s/flip", tmp_dir);
  snprintf(sub, sizeof sub, "%s/L0", dir);
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  snprintf(path, sizeof path, "%s/%s.npz", sub, e->id);
  golden_path(e, "npz", src, sizeof src);
  copy_file(src, path);
  ck_assert_int_eq(kda_golden_write_sums(dir, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_golden_check_sums(dir, msg, sizeof msg), KDA_OK);
  snprintf(sub, sizeof sub, "%s/fresh", tmp_dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  snprintf(fresh, sizeof fresh, "%s/L0", sub);
  ck_assert_int_eq(mkdir(fresh, 0755), 0);
  kda_golden_info in;
  ck_assert_int_eq(kda_golden_make(e, sub, &in, err, sizeof err), KDA_OK);
  snprintf(fresh, sizeof fresh, "%s/L0/%s.npz", sub, e->id);
  ck_assert_int_eq(kda_golden_compare_files(fresh, path, msg, sizeof msg), 0);
  size_t len;
  unsigned char *orig = kda_test_slurp(path, &len);
  char names[32][64];
  const int nm = member_names(path, names);
  ck_assert_int_ge(nm, 9);
  for (int m = 0; m < nm; m++) {
    size_t mlen, off = member_offset(path, orig, len, names[m], &mlen);
    const double u = kda_prng_uniform(77, 1, (uint64_t)m);
    const size_t pos = off + (size_t)(u * (double)mlen);
    const int bit = (int)(8.0 * kda_prng_uniform(77, 2, (uint64_t)m));
    write_flipped(path, orig, len, pos, bit);
    ck_assert_msg(kda_golden_check_sums(dir, msg, sizeof msg) == KDA_EFORMAT && strstr(msg, e->id),
                  "member %s byte %zu bit %d (seed 77): SHA256SUMS: %s", names[m], pos, bit, msg);
    ck_assert_msg(kda_golden_check_members(path, msg, sizeof msg) != KDA_OK &&
                      strstr(msg, names[m]),
                  "member %s byte %zu bit %d (seed 77): member check: %s", names[m], pos, bit,
                  msg);
    ck_assert_msg(kda_golden_compare_files(fresh, path, msg, sizeof msg) == 1 &&
                      strstr(msg, names[m]),
                  "member %s byte %zu bit %d (seed 77): comparison: %s", names[m], pos, bit, msg);
  }
  kda_test_write_all(path, orig, len);
  ck_assert_int_eq(kda_golden_check_sums(dir, msg, sizeof msg), KDA_OK);
  free(orig);
}
END_TEST

/* 1 when byte pos of the archive lies inside some member's stored bytes (not in the zip
 * headers or the central directory, which only the file hash and the comparison cover). */
static int in_member(const char *path, const unsigned char *buf, size_t len, size_t pos) {
  char names[32][64];
  const int nm = member_names(path, names);
  for (int m = 0; m < nm; m++) {
    size_t mlen, off = member_offset(path, buf, len, names[m], &mlen);
    if (pos >= off && pos < off + mlen) return 1;
  }
  return 0;
}

/* One random bit of every committed file: each file is checked alone in a directory with its
 * own SHA256SUMS line, and case files also by their member hashes and by comparison. */
START_TEST(test_bitflip_every_file) {
  char sums[512], msg[KDA_ERRLEN];
  snprintf(sums, sizeof sums, "%s/SHA256SUMS", GOLDEN);
  size_t slen;
  char *text = (char *)kda_test_slurp(sums, &slen);
  text = realloc(text, slen + 1);
  text[slen] = '\0';
  char *save = NULL;
  int64_t files = 0;
  for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save), files++) {
    const char *name = ln + 66, *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    char dir[256], src[512], dst[512];
    snprintf(dir, sizeof dir, "%s/one%lld", tmp_dir, (long long)files);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(src, sizeof src, "%s/%s", GOLDEN, name);
    snprintf(dst, sizeof dst, "%s/%s", dir, base);
    size_t len;
    unsigned char *orig = kda_test_slurp(src, &len);
    char line[512];
    snprintf(line, sizeof line, "%.64s  %s\n", ln, base);
    snprintf(sums, sizeof sums, "%s/SHA256SUMS", dir);
    kda_test_write_all(sums, (const unsigned char *)line, strlen(line));
    kda_test_write_all(dst, orig, len);
    ck_assert_msg(kda_golden_check_sums(dir, msg, sizeof msg) == KDA_OK, "%s: %s", name, msg);
    const size_t pos = (size_t)(kda_prng_uniform(99, 1, (uint64_t)files) * (double)len);
    const int bit = (int)(8.0 * kda_prng_uniform(99, 2, (uint64_t)files));
    write_flipped(dst, orig, len, pos, bit);
    ck_assert_msg(kda_golden_check_sums(dir, msg, sizeof msg) == KDA_EFORMAT,
                  "%s byte %zu bit %d (seed 99): not detected", name, pos, bit);
    ck_assert_int_eq(kda_golden_compare_files(src, dst, msg, sizeof msg), 1);
    const size_t L = strlen(base);
    if (L > 4 && !strcmp(base + L - 4, ".npz") && strncmp(name, "example", 7) != 0 &&
        in_member(src, orig, len, pos))
      ck_assert_msg(kda_golden_check_members(dst, msg, sizeof msg) != KDA_OK,
                    "%s byte %zu bit %d (seed 99): member hashes did not notice", name, pos, bit);
    free(orig);
    kda_test_rm_tree(dir);
  }
  free(text);
  ck_assert_int_ge(files, 60);
}
END_TEST

/* ==== 7. Manifests, traces and helpers ==== */

START_TEST(test_manifest_compare) {
  char a[512], b[512], msg[KDA_ERRLEN];
  snprintf(a, sizeof a, "%s/L0/manifest.json", GOLDEN);
  snprintf(b, sizeof b, "%s/m.json", tmp_dir);
  json_t *m = json_load_file(a, 0, NULL);
  ck_assert_ptr_nonnull(m);
  ck_assert_str_eq(json_string_value(json_object_get(m, "schema")), KDA_GOLDEN_SET_SCHEMA);
  ck_assert(json_is_object(json_object_get(json_object_get(m, "flags"), "ERASE_BEFORE_DECAY")));
  ck_assert_int_eq(json_integer_value(json_object_get(m, "number_of_cases")),
                   (json_int_t)json_array_size(json_object_get(m, "cases")));
  json_object_set_new(json_object_get(m, "versions"), "mpfr", json_string("0.0.0"));
  json_object_set_new(json_object_get(json_array_get(json_object_get(m, "cases"), 0), "ref_f64"),
                      "max_ulps", json_real(3.0));
  ck_assert_int_eq(json_dump_file(m, b, JSON_INDENT(1) | JSON_REAL_PRECISION(17)), 0);
  ck_assert_int_eq(kda_golden_compare_manifests(a, b, msg, sizeof msg), 2);
  ck_assert_msg(strstr(msg, "2 platform-dependent fields"), "%s", msg);
  json_object_set_new(json_array_get(json_object_get(m, "cases"), 0), "comment",
                      json_string("changed"));
  ck_assert_int_eq(json_dump_file(m, b, JSON_INDENT(1) | JSON_REAL_PRECISION(17)), 0);
  ck_assert_int_eq(kda_golden_compare_manifests(a, b, msg, sizeof msg), 1);
  ck_assert_msg(strstr(msg, "cases"), "%s", msg);
  json_decref(m);
  snprintf(b, sizeof b, "%s/missing.json", tmp_dir);
  ck_assert_int_eq(kda_golden_compare_files(a, b, msg, sizeof msg), -1);
}
END_TEST

/* The L0 trace refuses an inexact intermediate and a certified value it does not reach. */
START_TEST(test_trace_checks) {
  const kda_catalog_entry *e = kda_catalog_find("l0-delta-overwrite");
  gold g;
  gold_load(e, &g);
  char txt[512];
  golden_path(e, "txt", txt, sizeof txt);
  size_t len;
  char *t = (char *)kda_test_slurp(txt, &len);
  t = realloc(t, len + 1);
  t[len] = '\0';
  ck_assert(strstr(t, "prediction p = S^T k^") && strstr(t, "0x1.ep+0 (1.875)"));
  free(t);
  char *text = NULL, err[KDA_ERRLEN] = "";
  ck_assert_int_eq(kda_golden_trace(&g.c, e->comment, "PROVEN", g.v, &text, err, sizeof err),
                   KDA_OK);
  free(text);
  g.v[3] += 1.0; /* a certified output the trace does not reach */
  ck_assert_int_eq(kda_golden_trace(&g.c, e->comment, "PROVEN", g.v, &text, err, sizeof err),
                   KDA_EINVAL);
  ck_assert_msg(strstr(err, "differs from the certified"), "%s", err);
  g.v[3] -= 1.0;
  g.c.q[2] = g.c.k[2] = 1.0 / 3.0; /* 53 significant bits: sums round */
  ck_assert_int_eq(kda_golden_trace(&g.c, e->comment, "PROVEN", g.v, &text, err, sizeof err),
                   KDA_EINVAL);
  ck_assert_msg(strstr(err, "not exact"), "%s", err);
  g.c.p.l2_mode = KDA_L2_FLA;
  ck_assert_int_eq(kda_golden_trace(&g.c, e->comment, "PROVEN", g.v, &text, err, sizeof err),
                   KDA_EINVAL);
  ck_assert_msg(strstr(err, "l2=off"), "%s", err);
  ck_assert(kda_golden_owns(KDA_LEVEL_L0, "l0-delta-overwrite.txt"));
  ck_assert(kda_golden_owns(KDA_LEVEL_L1, "manifest.json"));
  ck_assert(!kda_golden_owns(KDA_LEVEL_L1, "l0-delta-overwrite.npz"));
  ck_assert(!kda_golden_owns(KDA_LEVEL_L1, "t1-softplus-gqa.txt"));
  ck_assert(!kda_golden_owns(KDA_LEVEL_L0, "stale.npz"));
  gold_free(&g);
}
END_TEST

static Suite *catalog_suite(void) {
  Suite *s = suite_create("catalog");
  TCase *cat = tcase_create("catalog");
  tcase_set_timeout(cat, 600);
  tcase_add_test(cat, test_catalog_sanity);
  tcase_add_test(cat, test_catalog_build_errors);
  tcase_add_test(cat, test_coverage);
  tcase_add_test(cat, test_discriminating);
  suite_add_tcase(s, cat);
  TCase *files = tcase_create("golden files");
  tcase_set_timeout(files, 600);
  tcase_add_test(files, test_committed_files);
  tcase_add_test(files, test_pins);
  tcase_add_test(files, test_regeneration);
  tcase_add_test(files, test_bitflip_members);
  tcase_add_test(files, test_bitflip_every_file);
  tcase_add_test(files, test_manifest_compare);
  tcase_add_test(files, test_trace_checks);
  tcase_add_checked_fixture(files, tmp_setup, tmp_teardown);
  suite_add_tcase(s, files);
  return s;
}

int main(void) { return kda_test_main(catalog_suite(), CK_NORMAL, CK_FORK_GETENV); }

/* check_ref.c: unit tests of the float64 reference and its float32 twin (SPEC.md §3-§5, §9).
 * SPDX-License-Identifier: MIT
 *
 * 1. hand-computed dyadic cases (every value exact in binary, so results compare with ==);
 * 2. invariants that must hold bit for bit (chaining, permutation, layout, checkpoints,
 *    family reductions, varlen, head maps) or to 1e-12 (an independent matrix-form recurrence);
 * 3. gate / beta / L2 formulas at known points;
 * 4. the float32 twin against the float64 reference;
 * 5. error paths.
 * Random-looking inputs come from a tiny inline LCG with fixed seeds, printed on failure.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_ref.h"
#include "kda_test.h"
#include "kda_version.h"

static const double LN2 = 0.69314718055994530942;

/* ==== Small helpers ==== */

#define lcg_next kda_test_lcg_next /* the shared deterministic inputs (tests/kda_test.h) */
#define u01 kda_test_u01
#define urange kda_test_urange
#define dalloc kda_test_dalloc
static float *falloc(size_t n) {
  float *x = calloc(n ? n : 1, sizeof *x);
  ck_assert_ptr_nonnull(x);
  return x;
}

/* Bit-for-bit equality of two double arrays (distinguishes -0 from +0). */
static void assert_bits(const double *a, const double *b, size_t n, const char *what,
                        uint64_t seed) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
      ck_abort_msg("%s: element %zu differs: %.17g vs %.17g (seed %llu)", what, i, a[i], b[i],
                   (unsigned long long)seed);
}

/* Value equality (== , so -0 == +0) against expected doubles. */
static void assert_vals(const double *got, const double *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i], "%s[%zu] = %.17g, expected %.17g", what, i, got[i], want[i]);
}
static void assert_vals32(const float *got, const double *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg((double)got[i] == want[i], "%s[%zu] = %.9g, expected %.17g", what, i,
                  (double)got[i], want[i]);
}

/* |a - b| <= tol * max(max|b|, floor) for every element; no NaN anywhere. */
static void assert_close(const double *a, const double *b, size_t n, double tol, double floor,
                         const char *what, uint64_t seed) {
  double mag = floor;
  for (size_t i = 0; i < n; i++) mag = fmax(mag, fabs(b[i]));
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(isfinite(a[i]) && fabs(a[i] - b[i]) <= tol * mag,
                  "%s[%zu]: %.17g vs %.17g (tol %g of %g, seed %llu)", what, i, a[i], b[i], tol,
                  mag, (unsigned long long)seed);
}

static void assert_finite(const double *a, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) ck_assert_msg(isfinite(a[i]), "%s[%zu] = %g", what, i, a[i]);
}

/* ==== One test case: a problem and all its buffers (canonical packed layouts) ==== */

typedef struct tcase {
  kda_problem p;
  double *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0, *o, *ht, *hc;
  int64_t *cu, *cp;
  uint64_t seed;
} tcase;

static size_t n_qk(const kda_problem *p) { return (size_t)(p->T * p->H * p->K); }
static size_t n_v(const kda_problem *p) { return (size_t)(p->T * p->HV * p->V); }
static size_t gw(const kda_problem *p) { return (size_t)kda_problem_gate_width(p); }
static size_t n_g(const kda_problem *p) { return (size_t)(p->T * p->HV) * gw(p); }
static size_t n_beta(const kda_problem *p) { return (size_t)(p->T * p->HV); }
static size_t n_slot(const kda_problem *p) { return (size_t)(p->HV * p->K * p->V); }
static size_t n_state(const kda_problem *p) { return (size_t)p->N * n_slot(p); }
static size_t n_hc(const kda_problem *p) { return (size_t)p->n_checkpoints * n_slot(p); }

/* Allocates zeroed buffers for p; copies cu_seqlens [N+1] and checkpoints [C] when given. */
static void tc_init(tcase *c, const kda_problem *p, const int64_t *cu, const int64_t *cp) {
  memset(c, 0, sizeof *c);
  c->p = *p;
  c->q = dalloc(n_qk(p));
  c->k = dalloc(n_qk(p));
  c->v = dalloc(n_v(p));
  c->g = dalloc(n_g(p));
  c->beta = dalloc(n_beta(p));
  c->A_log = dalloc((size_t)p->HV);
  c->dt_bias = dalloc((size_t)p->HV * gw(p));
  c->h0 = dalloc(n_state(p));
  c->o = dalloc(n_v(p));
  c->ht = dalloc(n_state(p));
  c->hc = dalloc(n_hc(p));
  if (cu) {
    c->cu = malloc((size_t)(p->N + 1) * sizeof *c->cu);
    ck_assert_ptr_nonnull(c->cu);
    memcpy(c->cu, cu, (size_t)(p->N + 1) * sizeof *c->cu);
  }
  if (cp && p->n_checkpoints > 0) {
    c->cp = malloc((size_t)p->n_checkpoints * sizeof *c->cp);
    ck_assert_ptr_nonnull(c->cp);
    memcpy(c->cp, cp, (size_t)p->n_checkpoints * sizeof *c->cp);
  }
}

static void tc_free(tcase *c) {
  double *bufs[] = {c->q, c->k, c->v, c->g, c->beta, c->A_log, c->dt_bias, c->h0, c->o, c->ht,
                    c->hc};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
  free(c->cu);
  free(c->cp);
}

static void fill(double *x, size_t n, uint64_t *s, double lo, double hi) {
  for (size_t i = 0; i < n; i++) x[i] = urange(s, lo, hi);
}

/* Random inputs in ranges that suit the modes of c->p. */
static void tc_fill(tcase *c, uint64_t seed) {
  const kda_problem *p = &c->p;
  uint64_t s = seed;
  c->seed = seed;
  fill(c->q, n_qk(p), &s, -1.0, 1.0);
  fill(c->k, n_qk(p), &s, -1.0, 1.0);
  fill(c->v, n_v(p), &s, -1.0, 1.0);
  if (p->gate_mode == KDA_GATE_LOG)
    fill(c->g, n_g(p), &s, -1.0, -0.01);
  else
    fill(c->g, n_g(p), &s, -3.0, 3.0);
  if (p->beta_mode == KDA_BETA_PROB)
    fill(c->beta, n_beta(p), &s, 0.05, 1.0);
  else
    fill(c->beta, n_beta(p), &s, -3.0, 3.0);
  fill(c->A_log, (size_t)p->HV, &s, -1.0, 1.0);
  fill(c->dt_bias, (size_t)p->HV * gw(p), &s, -1.0, 1.0);
  fill(c->h0, n_state(p), &s, -1.0, 1.0);
}

static kda_tensors_f64 tc_tensors(const tcase *c) {
  kda_tensors_f64 t = {c->q,  c->k,  c->v,  c->g,  c->beta, c->A_log, c->dt_bias, c->h0,
                       c->cu, c->cp, c->o,  c->ht, c->hc};
  return t;
}

static void tc_run(tcase *c) {
  char err[KDA_ERRLEN] = "";
  kda_tensors_f64 t = tc_tensors(c);
  int st = kda_ref_forward_f64(&c->p, &t, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "kda_ref_forward_f64: %d %s (seed %llu)", st, err,
                (unsigned long long)c->seed);
}

/* A problem with the "rich" options: softplus gate, logit beta, fla L2, initial state. */
static kda_problem rich_problem(int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V) {
  kda_problem p;
  kda_problem_init(&p, T, H, HV, K, V);
  p.gate_mode = KDA_GATE_SOFTPLUS;
  p.has_A_log = 1;
  p.beta_mode = KDA_BETA_LOGIT;
  p.l2_mode = KDA_L2_FLA;
  p.has_initial_state = 1;
  return p;
}

/* dst = tokens t0 .. t1-1 of single-sequence src, starting from state h0 (NULL: none). */
static void tc_slice(tcase *dst, const tcase *src, int64_t t0, int64_t t1, const double *h0) {
  const kda_problem *p = &src->p;
  kda_problem q = *p;
  q.T = t1 - t0;
  q.N = 1;
  q.n_checkpoints = 0;
  q.has_initial_state = h0 != NULL;
  tc_init(dst, &q, NULL, NULL);
  dst->seed = src->seed;
  const size_t rq = (size_t)(p->H * p->K), rv = (size_t)(p->HV * p->V);
  const size_t rg = (size_t)p->HV * gw(p), rb = (size_t)p->HV;
  const size_t n = (size_t)(t1 - t0), a = (size_t)t0;
  memcpy(dst->q, src->q + a * rq, n * rq * sizeof(double));
  memcpy(dst->k, src->k + a * rq, n * rq * sizeof(double));
  memcpy(dst->v, src->v + a * rv, n * rv * sizeof(double));
  memcpy(dst->g, src->g + a * rg, n * rg * sizeof(double));
  memcpy(dst->beta, src->beta + a * rb, n * rb * sizeof(double));
  memcpy(dst->A_log, src->A_log, (size_t)p->HV * sizeof(double));
  memcpy(dst->dt_bias, src->dt_bias, rg * sizeof(double));
  if (h0) memcpy(dst->h0, h0, n_slot(p) * sizeof(double));
}

/* dst = the first len tokens of sequence n of (packed) src, from src's h0[n]. */
static void tc_sequence(tcase *dst, const tcase *src, int64_t n, int64_t len) {
  const int64_t bos = src->cu ? src->cu[n] : 0;
  const double *h0 = src->p.has_initial_state ? src->h0 + (size_t)n * n_slot(&src->p) : NULL;
  tc_slice(dst, src, bos, bos + len, h0);
}

/* Transposes `slots` states [K][V] -> [V][K]. */
static void transpose_states(const double *src, double *dst, size_t slots, int64_t K,
                             int64_t V) {
  const size_t n = (size_t)(K * V);
  for (size_t s = 0; s < slots; s++)
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++)
        dst[s * n + (size_t)(j * K + i)] = src[s * n + (size_t)(i * V + j)];
}

/* ==== 1. Hand-computed dyadic cases ==== */

/* Two steps on K = V = 2 through the step functions, every intermediate by hand:
 *   S = [[1, 2], [3, 4]]  (rows: key i)
 * step 1: a = (0.5, 0.25)  decay  -> S = [[0.5, 1], [0.75, 1]]
 *   k = (1, 0.5)           erase  -> p = (0.5*1 + 0.75*0.5, 1*1 + 1*0.5) = (0.875, 1.5)
 *   v = (2, 1), beta = 0.5        -> beta (v - p) = 0.5 * (1.125, -0.5) = (0.5625, -0.25)
 *                          write  -> row 0 += 1   * (0.5625, -0.25) = (1.0625, 0.75)
 *                                    row 1 += 0.5 * (0.5625, -0.25) = (1.03125, 0.875)
 *   q = (0.5, -1)          readout-> o = (1.0625*0.5 - 1.03125, 0.75*0.5 - 0.875) = (-0.5, -0.5)
 * step 2: a = (0.25, 0.5)  decay  -> S = [[0.265625, 0.1875], [0.515625, 0.4375]]
 *   k = (0, 1)             erase  -> p = row 1 = (0.515625, 0.4375)
 *   v = (1, -1), beta = 1         -> v - p = (0.484375, -1.4375)
 *                          write  -> row 0 += 0 (unchanged), row 1 = (1, -1)
 *   (beta = 1 with a unit key stores v exactly: S^T k = v afterwards)
 *   q = (4, 1)             readout-> o = (0.265625*4 + 1, 0.1875*4 - 1) = (2.0625, -0.25) */
static const double H_S0[4] = {1, 2, 3, 4};
static const double H_A1[2] = {0.5, 0.25}, H_K1[2] = {1, 0.5}, H_V1[2] = {2, 1};
static const double H_Q1[2] = {0.5, -1};
static const double H_A2[2] = {0.25, 0.5}, H_K2[2] = {0, 1}, H_V2[2] = {1, -1};
static const double H_Q2[2] = {4, 1};
static const double H_DEC1[4] = {0.5, 1, 0.75, 1}, H_P1[2] = {0.875, 1.5};
static const double H_W1[4] = {1.0625, 0.75, 1.03125, 0.875}, H_O1[2] = {-0.5, -0.5};
static const double H_DEC2[4] = {0.265625, 0.1875, 0.515625, 0.4375};
static const double H_P2[2] = {0.515625, 0.4375};
static const double H_W2[4] = {0.265625, 0.1875, 1, -1}, H_O2[2] = {2.0625, -0.25};

START_TEST(test_steps_hand) {
  double S[4], p[2], o[2];
  memcpy(S, H_S0, sizeof S);
  kda_ref_decay(2, 2, S, H_A1);
  assert_vals(S, H_DEC1, 4, "decayed S (step 1)");
  kda_ref_erase(2, 2, S, H_K1, p);
  assert_vals(p, H_P1, 2, "p (step 1)");
  kda_ref_write(2, 2, S, H_K1, H_V1, p, 0.5);
  assert_vals(S, H_W1, 4, "written S (step 1)");
  kda_ref_readout(2, 2, S, H_Q1, o);
  assert_vals(o, H_O1, 2, "o (step 1)");
  kda_ref_decay(2, 2, S, H_A2);
  assert_vals(S, H_DEC2, 4, "decayed S (step 2)");
  kda_ref_erase(2, 2, S, H_K2, p);
  assert_vals(p, H_P2, 2, "p (step 2)");
  kda_ref_write(2, 2, S, H_K2, H_V2, p, 1.0);
  assert_vals(S, H_W2, 4, "written S (step 2)");
  kda_ref_erase(2, 2, S, H_K2, p);
  assert_vals(p, H_V2, 2, "S^T k after a beta = 1 write");
  kda_ref_readout(2, 2, S, H_Q2, o);
  assert_vals(o, H_O2, 2, "o (step 2)");
}
END_TEST

START_TEST(test_steps_hand_f32) {
  float S[4], p[2], o[2], a1[2], k1[2], v1[2], q1[2], a2[2], k2[2], v2[2], q2[2];
  for (int i = 0; i < 4; i++) S[i] = (float)H_S0[i];
  for (int i = 0; i < 2; i++) {
    a1[i] = (float)H_A1[i], k1[i] = (float)H_K1[i], v1[i] = (float)H_V1[i], q1[i] = (float)H_Q1[i];
    a2[i] = (float)H_A2[i], k2[i] = (float)H_K2[i], v2[i] = (float)H_V2[i], q2[i] = (float)H_Q2[i];
  }
  kda_ref32_decay(2, 2, S, a1);
  assert_vals32(S, H_DEC1, 4, "f32 decayed S (step 1)");
  kda_ref32_erase(2, 2, S, k1, p);
  assert_vals32(p, H_P1, 2, "f32 p (step 1)");
  kda_ref32_write(2, 2, S, k1, v1, p, 0.5f);
  assert_vals32(S, H_W1, 4, "f32 written S (step 1)");
  kda_ref32_readout(2, 2, S, q1, o);
  assert_vals32(o, H_O1, 2, "f32 o (step 1)");
  kda_ref32_decay(2, 2, S, a2);
  assert_vals32(S, H_DEC2, 4, "f32 decayed S (step 2)");
  kda_ref32_erase(2, 2, S, k2, p);
  assert_vals32(p, H_P2, 2, "f32 p (step 2)");
  kda_ref32_write(2, 2, S, k2, v2, p, 1.0f);
  assert_vals32(S, H_W2, 4, "f32 written S (step 2)");
  kda_ref32_readout(2, 2, S, q2, o);
  assert_vals32(o, H_O2, 2, "f32 o (step 2)");
}
END_TEST

/* Through the driver: K = V = 2, H = HV = 1, T = 3, pre-gated, scale = 0.5, beta = 0.5,
 * h0 = I, checkpoint at t = 1.
 * t0: q = (1, 1), k = (1, 0), v = (2, 4), g = (0, 0) so a = (1, 1)
 *     p = S^T k = row 0 = (1, 0); beta (v - p) = 0.5 (1, 4) = (0.5, 2)
 *     S = [[1.5, 2], [0, 1]]; qq = 0.5 q = (0.5, 0.5); o = (0.75, 1.5)
 * t1: q = (2, 0), k = (0, 1), v = (1, 1), g = (0, 0)
 *     p = row 1 = (0, 1); beta (v - p) = (0.5, 0); S = [[1.5, 2], [0.5, 1]] (= hc[0])
 *     qq = (1, 0); o = row 0 = (1.5, 2)
 * t2: q = (0, -2), k = (1, 1), v = (2, -2), g = (-inf, -inf) so a = (0, 0): the state is wiped
 *     S = 0; p = 0; beta (v - p) = (1, -1); S = k (1, -1)^T = [[1, -1], [1, -1]] (= ht)
 *     qq = (0, -1); o = -row 1 = (-1, 1) */
static const double F_Q[6] = {1, 1, 2, 0, 0, -2}, F_K[6] = {1, 0, 0, 1, 1, 1};
static const double F_V[6] = {2, 4, 1, 1, 2, -2};
static const double F_G[6] = {0, 0, 0, 0, -INFINITY, -INFINITY};
static const double F_B[3] = {0.5, 0.5, 0.5}, F_H0[4] = {1, 0, 0, 1};
static const double F_O[6] = {0.75, 1.5, 1.5, 2, -1, 1};
static const double F_HC[4] = {1.5, 2, 0.5, 1}, F_HT[4] = {1, -1, 1, -1};
static const double F_HC_VK[4] = {1.5, 0.5, 2, 1}, F_HT_VK[4] = {1, 1, -1, -1};

static kda_problem hand_problem(int32_t layout) {
  kda_problem p;
  kda_problem_init(&p, 3, 1, 1, 2, 2);
  p.scale = 0.5;
  p.has_initial_state = 1;
  p.n_checkpoints = 1;
  p.state_layout = layout;
  return p;
}

START_TEST(test_forward_hand) {
  const int32_t layout = _i ? KDA_STATE_VK : KDA_STATE_KV;
  kda_problem p = hand_problem(layout);
  const int64_t cp[1] = {1};
  double o[6], ht[4], hc[4];
  kda_tensors_f64 t = {F_Q, F_K, F_V, F_G, F_B, NULL, NULL, F_H0, NULL, cp, o, ht, hc};
  char err[KDA_ERRLEN] = "";
  ck_assert_msg(kda_ref_forward_f64(&p, &t, err, sizeof err) == KDA_OK, "%s", err);
  assert_vals(o, F_O, 6, "o");
  assert_vals(hc, layout ? F_HC_VK : F_HC, 4, "hc");
  assert_vals(ht, layout ? F_HT_VK : F_HT, 4, "ht");
}
END_TEST

START_TEST(test_forward_hand_f32) {
  const int32_t layout = _i ? KDA_STATE_VK : KDA_STATE_KV;
  kda_problem p = hand_problem(layout);
  const int64_t cp[1] = {1};
  float q[6], k[6], v[6], g[6], b[3], h0[4], o[6], ht[4], hc[4];
  for (int i = 0; i < 6; i++)
    q[i] = (float)F_Q[i], k[i] = (float)F_K[i], v[i] = (float)F_V[i], g[i] = (float)F_G[i];
  for (int i = 0; i < 3; i++) b[i] = (float)F_B[i];
  for (int i = 0; i < 4; i++) h0[i] = (float)F_H0[i];
  kda_tensors_f32 t = {q, k, v, g, b, NULL, NULL, h0, NULL, cp, o, ht, hc};
  char err[KDA_ERRLEN] = "";
  ck_assert_msg(kda_ref_forward_f32(&p, &t, err, sizeof err) == KDA_OK, "%s", err);
  assert_vals32(o, F_O, 6, "f32 o");
  assert_vals32(hc, layout ? F_HC_VK : F_HC, 4, "f32 hc");
  assert_vals32(ht, layout ? F_HT_VK : F_HT, 4, "f32 ht");
}
END_TEST

/* Linear vs DeltaNet by hand: K = V = 2, scale = 1, beta = 0.5, S0 = 0.
 * t0: k = (1, 2), v = (1, -1): both  S = k (0.5 v)^T = [[0.5, -0.5], [1, -1]]; q = (1, 1),
 *     o = (1.5, -1.5)
 * t1: k = (1, 0), v = (2, 2):
 *     linear:   S += k (0.5 v)^T = [[1.5, 0.5], [1, -1]];                o = (2.5, -0.5)
 *     deltanet: p = row 0 = (0.5, -0.5); 0.5 (v - p) = (0.75, 1.25);
 *               S = [[1.25, 0.75], [1, -1]];                             o = (2.25, -0.25) */
START_TEST(test_linear_deltanet_hand) {
  static const double q[4] = {1, 1, 1, 1}, k[4] = {1, 2, 1, 0}, v[4] = {1, -1, 2, 2};
  static const double b[2] = {0.5, 0.5};
  static const double o_lin[4] = {1.5, -1.5, 2.5, -0.5}, ht_lin[4] = {1.5, 0.5, 1, -1};
  static const double o_dn[4] = {1.5, -1.5, 2.25, -0.25}, ht_dn[4] = {1.25, 0.75, 1, -1};
  const int32_t fam[2] = {KDA_FAMILY_LINEAR, KDA_FAMILY_DELTANET};
  for (int f = 0; f < 2; f++) {
    kda_problem p;
    kda_problem_init(&p, 2, 1, 1, 2, 2);
    p.family = fam[f];
    p.scale = 1.0;
    double o[4], ht[4];
    kda_tensors_f64 t = {q, k, v, NULL, b, NULL, NULL, NULL, NULL, NULL, o, ht, NULL};
    char err[KDA_ERRLEN] = "";
    ck_assert_msg(kda_ref_forward_f64(&p, &t, err, sizeof err) == KDA_OK, "%s", err);
    assert_vals(o, f ? o_dn : o_lin, 4, f ? "deltanet o" : "linear o");
    assert_vals(ht, f ? ht_dn : ht_lin, 4, f ? "deltanet ht" : "linear ht");
  }
}
END_TEST

/* ==== 2. Invariants ==== */

/* beta = 0: every write adds k * (0 * (v - p)) = +-0, so S_t = a_t * S_{t-1} exactly and
 * o_t = S_t^T (scale q_t). */
START_TEST(test_beta_zero_is_pure_decay) {
  kda_problem p;
  kda_problem_init(&p, 4, 2, 2, 3, 4);
  p.has_initial_state = 1;
  tcase c;
  tc_init(&c, &p, NULL, NULL);
  tc_fill(&c, 11);
  for (size_t i = 0; i < n_beta(&p); i++) c.beta[i] = 0.0;
  tc_run(&c);
  for (int64_t hv = 0; hv < p.HV; hv++) {
    double S[12], a[3], qq[3], o[4];
    memcpy(S, c.h0 + hv * 12, sizeof S);
    for (int64_t t = 0; t < p.T; t++) {
      for (int i = 0; i < 3; i++) {
        a[i] = exp(c.g[(t * p.HV + hv) * 3 + i]);
        qq[i] = p.scale * c.q[(t * p.H + hv) * 3 + i];
      }
      kda_ref_decay(3, 4, S, a);
      kda_ref_readout(3, 4, S, qq, o);
      assert_vals(c.o + (t * p.HV + hv) * 4, o, 4, "o with beta = 0");
    }
    assert_vals(c.ht + hv * 12, S, 12, "ht with beta = 0");
  }
  tc_free(&c);
}
END_TEST

/* One call over T tokens equals two calls chained through ht -> h0 (GVA, every option on). */
START_TEST(test_chaining) {
  const int64_t split = 3;
  kda_problem p = rich_problem(7, 2, 4, 4, 3);
  tcase c, a, b;
  tc_init(&c, &p, NULL, NULL);
  tc_fill(&c, 21);
  tc_run(&c);
  tc_slice(&a, &c, 0, split, c.h0);
  tc_run(&a);
  tc_slice(&b, &c, split, p.T, a.ht);
  tc_run(&b);
  assert_bits(c.o, a.o, n_v(&a.p), "o of the first call", c.seed);
  assert_bits(c.o + n_v(&a.p), b.o, n_v(&b.p), "o of the second call", c.seed);
  assert_bits(c.ht, b.ht, n_state(&p), "ht", c.seed);
  tc_free(&c), tc_free(&a), tc_free(&b);
}
END_TEST

/* Permuting heads (H = HV) permutes outputs and final states. */
START_TEST(test_head_permutation) {
  static const int64_t perm[3] = {2, 0, 1}; /* new head m is old head perm[m] */
  kda_problem p = rich_problem(5, 3, 3, 4, 2);
  tcase c, d;
  tc_init(&c, &p, NULL, NULL);
  tc_fill(&c, 31);
  tc_run(&c);
  tc_init(&d, &p, NULL, NULL);
  d.seed = c.seed;
  const size_t K = 4, V = 2, S = K * V;
  for (int64_t t = 0; t < p.T; t++)
    for (int64_t m = 0; m < 3; m++) {
      const size_t dm = (size_t)(t * 3 + m), sm = (size_t)(t * 3 + perm[m]);
      memcpy(d.q + dm * K, c.q + sm * K, K * sizeof(double));
      memcpy(d.k + dm * K, c.k + sm * K, K * sizeof(double));
      memcpy(d.g + dm * K, c.g + sm * K, K * sizeof(double));
      memcpy(d.v + dm * V, c.v + sm * V, V * sizeof(double));
      d.beta[dm] = c.beta[sm];
    }
  for (int64_t m = 0; m < 3; m++) {
    d.A_log[m] = c.A_log[perm[m]];
    memcpy(d.dt_bias + m * K, c.dt_bias + perm[m] * K, K * sizeof(double));
    memcpy(d.h0 + m * S, c.h0 + perm[m] * S, S * sizeof(double));
  }
  tc_run(&d);
  for (int64_t t = 0; t < p.T; t++)
    for (int64_t m = 0; m < 3; m++)
      assert_bits(d.o + (t * 3 + m) * V, c.o + (t * 3 + perm[m]) * V, V, "permuted o", c.seed);
  for (int64_t m = 0; m < 3; m++)
    assert_bits(d.ht + m * S, c.ht + perm[m] * S, S, "permuted ht", c.seed);
  tc_free(&c), tc_free(&d);
}
END_TEST

/* K-major vs V-major state storage: identical o, transposed h0/ht/hc (K != V, varlen). */
START_TEST(test_state_layout) {
  static const int64_t cu[3] = {0, 3, 6}, cp[3] = {0, 2, 4};
  kda_problem p = rich_problem(6, 1, 2, 3, 5);
  p.N = 2;
  p.n_checkpoints = 3;
  tcase c, d;
  tc_init(&c, &p, cu, cp);
  tc_fill(&c, 41);
  tc_run(&c);
  p.state_layout = KDA_STATE_VK;
  tc_init(&d, &p, cu, cp);
  tc_fill(&d, 41);
  transpose_states(c.h0, d.h0, (size_t)(p.N * p.HV), p.K, p.V);
  tc_run(&d);
  double *ht = dalloc(n_state(&p)), *hc = dalloc(n_hc(&p));
  transpose_states(c.ht, ht, (size_t)(p.N * p.HV), p.K, p.V);
  transpose_states(c.hc, hc, (size_t)(p.n_checkpoints * p.HV), p.K, p.V);
  assert_bits(d.o, c.o, n_v(&p), "o (VK vs KV)", c.seed);
  assert_bits(d.ht, ht, n_state(&p), "ht (VK vs transposed KV)", c.seed);
  assert_bits(d.hc, hc, n_hc(&p), "hc (VK vs transposed KV)", c.seed);
  free(ht), free(hc);
  tc_free(&c), tc_free(&d);
}
END_TEST

/* hc[c] equals ht of the run truncated after token cp[c] (single sequence). */
START_TEST(test_checkpoints_single) {
  static const int64_t cp[3] = {0, 2, 5};
  kda_problem p = rich_problem(6, 2, 2, 3, 3);
  p.n_checkpoints = 3;
  tcase c;
  tc_init(&c, &p, NULL, cp);
  tc_fill(&c, 51);
  tc_run(&c);
  for (int64_t i = 0; i < 3; i++) {
    tcase d;
    tc_slice(&d, &c, 0, cp[i] + 1, c.h0);
    tc_run(&d);
    assert_bits(c.hc + (size_t)i * n_slot(&p), d.ht, n_slot(&p), "hc vs truncated ht", c.seed);
    tc_free(&d);
  }
  assert_bits(c.hc + 2 * n_slot(&p), c.ht, n_slot(&p), "hc at the last token vs ht", c.seed);
  tc_free(&c);
}
END_TEST

/* Checkpoints in a packed batch: the state of the sequence that contains the token, including
 * a sequence's last token and the first token of the sequence after an empty one. */
START_TEST(test_checkpoints_varlen) {
  static const int64_t cu[4] = {0, 2, 2, 6}, cp[3] = {1, 2, 4};
  static const int64_t seq_of[3] = {0, 2, 2};
  kda_problem p = rich_problem(6, 1, 2, 3, 4);
  p.N = 3;
  p.n_checkpoints = 3;
  tcase c;
  tc_init(&c, &p, cu, cp);
  tc_fill(&c, 61);
  tc_run(&c);
  for (int64_t i = 0; i < 3; i++) {
    tcase d;
    const int64_t n = seq_of[i];
    tc_sequence(&d, &c, n, cp[i] - cu[n] + 1);
    tc_run(&d);
    assert_bits(c.hc + (size_t)i * n_slot(&p), d.ht, n_slot(&p), "varlen hc", c.seed);
    tc_free(&d);
  }
  assert_bits(c.hc, c.ht, n_slot(&p), "hc at sequence 0's last token vs ht[0]", c.seed);
  tc_free(&c);
}
END_TEST

/* A packed batch (with an empty sequence) equals one call per sequence; with and without h0. */
START_TEST(test_varlen) {
  static const int64_t cu[5] = {0, 3, 3, 7, 8};
  kda_problem p = rich_problem(8, 2, 4, 3, 2);
  p.N = 4;
  p.has_initial_state = _i;
  tcase c;
  tc_init(&c, &p, cu, NULL);
  tc_fill(&c, 71 + (uint64_t)_i);
  tc_run(&c);
  for (int64_t n = 0; n < p.N; n++) {
    tcase d;
    tc_sequence(&d, &c, n, cu[n + 1] - cu[n]);
    tc_run(&d);
    assert_bits(c.o + (size_t)cu[n] * (size_t)(p.HV * p.V), d.o, n_v(&d.p), "varlen o", c.seed);
    assert_bits(c.ht + (size_t)n * n_slot(&p), d.ht, n_slot(&p), "varlen ht", c.seed);
    tc_free(&d);
  }
  /* The empty sequence 1 passes its initial state (or zero) through unchanged. */
  double *want = dalloc(n_slot(&p));
  if (_i) memcpy(want, c.h0 + n_slot(&p), n_slot(&p) * sizeof(double));
  assert_bits(c.ht + n_slot(&p), want, n_slot(&p), "ht of the empty sequence", c.seed);
  free(want);
  tc_free(&c);
}
END_TEST

/* T = 0: no tokens, token buffers may be NULL; ht = h0. */
START_TEST(test_no_tokens) {
  static const int64_t cu[3] = {0, 0, 0};
  static const double h0[2 * 2 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  kda_problem p;
  kda_problem_init(&p, 0, 1, 1, 2, 3);
  p.N = 2;
  p.has_initial_state = 1;
  double ht[12];
  kda_tensors_f64 t = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, h0, cu, NULL, NULL, ht, NULL};
  char err[KDA_ERRLEN] = "";
  ck_assert_msg(kda_ref_forward_f64(&p, &t, err, sizeof err) == KDA_OK, "%s", err);
  assert_vals(ht, h0, 12, "ht with T = 0");
}
END_TEST

/* KDA with g equal across the K channels equals GDN with that scalar g (log and softplus). */
START_TEST(test_kda_equal_g_is_gdn) {
  kda_problem p = rich_problem(5, 2, 2, 3, 4);
  p.gate_mode = _i ? KDA_GATE_SOFTPLUS : KDA_GATE_LOG;
  tcase c, d;
  tc_init(&c, &p, NULL, NULL);
  tc_fill(&c, 81);
  p.family = KDA_FAMILY_GDN;
  tc_init(&d, &p, NULL, NULL);
  tc_fill(&d, 81);
  const size_t K = 3;
  for (size_t e = 0; e < n_beta(&p); e++)
    for (size_t i = 0; i < K; i++) c.g[e * K + i] = d.g[e];
  for (int64_t hv = 0; hv < p.HV; hv++)
    for (size_t i = 0; i < K; i++) c.dt_bias[(size_t)hv * K + i] = d.dt_bias[hv];
  memcpy(d.q, c.q, n_qk(&p) * sizeof(double)), memcpy(d.k, c.k, n_qk(&p) * sizeof(double));
  memcpy(d.v, c.v, n_v(&p) * sizeof(double)), memcpy(d.beta, c.beta, n_beta(&p) * sizeof(double));
  memcpy(d.A_log, c.A_log, (size_t)p.HV * sizeof(double));
  memcpy(d.h0, c.h0, n_state(&p) * sizeof(double));
  tc_run(&c), tc_run(&d);
  assert_bits(c.o, d.o, n_v(&p), "o (KDA equal g vs GDN)", c.seed);
  assert_bits(c.ht, d.ht, n_state(&p), "ht (KDA equal g vs GDN)", c.seed);
  tc_free(&c), tc_free(&d);
}
END_TEST

/* Copies every input of c into d (same problem shape apart from the gate). */
static void copy_inputs_but_gate(tcase *d, const tcase *c) {
  const kda_problem *p = &c->p;
  memcpy(d->q, c->q, n_qk(p) * sizeof(double));
  memcpy(d->k, c->k, n_qk(p) * sizeof(double));
  memcpy(d->v, c->v, n_v(p) * sizeof(double));
  memcpy(d->beta, c->beta, n_beta(p) * sizeof(double));
  memcpy(d->h0, c->h0, n_state(p) * sizeof(double));
  d->seed = c->seed;
}

/* KDA with g = 0 (a = exp(0) = 1 exactly) equals DeltaNet. */
START_TEST(test_kda_zero_g_is_deltanet) {
  kda_problem p = rich_problem(5, 1, 2, 3, 3);
  p.gate_mode = KDA_GATE_LOG;
  tcase c, d;
  tc_init(&c, &p, NULL, NULL);
  tc_fill(&c, 91);
  for (size_t i = 0; i < n_g(&p); i++) c.g[i] = 0.0;
  p.family = KDA_FAMILY_DELTANET;
  tc_init(&d, &p, NULL, NULL);
  copy_inputs_but_gate(&d, &c);
  tc_run(&c), tc_run(&d);
  assert_bits(c.o, d.o, n_v(&p), "o (KDA g = 0 vs DeltaNet)", c.seed);
  assert_bits(c.ht, d.ht, n_state(&p), "ht (KDA g = 0 vs DeltaNet)", c.seed);
  tc_free(&c), tc_free(&d);
}
END_TEST

/* DeltaNet on a zero state with one token per sequence equals the linear family (p = 0). */
START_TEST(test_deltanet_one_token_is_linear) {
  static const int64_t cu[4] = {0, 1, 2, 3};
  kda_problem p = rich_problem(3, 2, 2, 4, 3);
  p.family = KDA_FAMILY_DELTANET;
  p.has_initial_state = 0;
  p.N = 3;
  tcase c, d;
  tc_init(&c, &p, cu, NULL);
  tc_fill(&c, 101);
  p.family = KDA_FAMILY_LINEAR;
  tc_init(&d, &p, cu, NULL);
  copy_inputs_but_gate(&d, &c);
  tc_run(&c), tc_run(&d);
  assert_bits(c.o, d.o, n_v(&p), "o (DeltaNet vs linear)", c.seed);
  assert_bits(c.ht, d.ht, n_state(&p), "ht (DeltaNet vs linear)", c.seed);
  tc_free(&c), tc_free(&d);
}
END_TEST

/* The softplus / lower-bound gates equal the pre-gated mode fed kda_ref_gate's value. */
START_TEST(test_gate_equals_pregated) {
  static const int32_t mode[3] = {KDA_GATE_SOFTPLUS, KDA_GATE_LOWER_BOUND, KDA_GATE_LOWER_BOUND};
  static const int32_t has_A[3] = {1, 1, 0};
  for (int m = 0; m < 3; m++) {
    kda_problem p = rich_problem(5, 1, 2, 4, 3);
    p.family = _i ? KDA_FAMILY_GDN : KDA_FAMILY_KDA;
    p.gate_mode = mode[m];
    p.has_A_log = has_A[m];
    p.lower_bound = -3.5;
    tcase c, d;
    tc_init(&c, &p, NULL, NULL);
    tc_fill(&c, 111 + (uint64_t)m);
    p.gate_mode = KDA_GATE_LOG;
    tc_init(&d, &p, NULL, NULL);
    copy_inputs_but_gate(&d, &c);
    const size_t G = gw(&p);
    for (size_t e = 0; e < n_beta(&p); e++) {
      const size_t hv = e % (size_t)p.HV;
      for (size_t i = 0; i < G; i++)
        d.g[e * G + i] = kda_ref_gate(mode[m], c.g[e * G + i], c.dt_bias[hv * G + i],
                                      c.A_log[hv], has_A[m], -3.5);
    }
    tc_run(&c), tc_run(&d);
    assert_bits(c.o, d.o, n_v(&p), "o (gate vs pre-gated)", c.seed);
    assert_bits(c.ht, d.ht, n_state(&p), "ht (gate vs pre-gated)", c.seed);
    tc_free(&c), tc_free(&d);
  }
}
END_TEST

/* Logit betas equal probability betas fed kda_ref_beta's value. */
START_TEST(test_beta_logit_equals_prob) {
  static const int32_t mode[2] = {KDA_BETA_LOGIT, KDA_BETA_LOGIT_NEG};
  for (int m = 0; m < 2; m++) {
    kda_problem p = rich_problem(5, 1, 1, 3, 3);
    p.beta_mode = mode[m];
    tcase c, d;
    tc_init(&c, &p, NULL, NULL);
    tc_fill(&c, 121 + (uint64_t)m);
    p.beta_mode = KDA_BETA_PROB;
    tc_init(&d, &p, NULL, NULL);
    copy_inputs_but_gate(&d, &c);
    memcpy(d.g, c.g, n_g(&p) * sizeof(double));
    memcpy(d.A_log, c.A_log, (size_t)p.HV * sizeof(double));
    memcpy(d.dt_bias, c.dt_bias, (size_t)p.HV * gw(&p) * sizeof(double));
    for (size_t e = 0; e < n_beta(&p); e++) d.beta[e] = kda_ref_beta(mode[m], c.beta[e]);
    tc_run(&c), tc_run(&d);
    assert_bits(c.o, d.o, n_v(&p), "o (logit beta vs prob)", c.seed);
    assert_bits(c.ht, d.ht, n_state(&p), "ht (logit beta vs prob)", c.seed);
    tc_free(&c), tc_free(&d);
  }
}
END_TEST

/* DIV and MOD agree when HV == H; with HV = 2H each equals the run on q/k expanded to HV heads
 * by its own map (hv / 2 resp. hv % H). */
START_TEST(test_head_maps) {
  kda_problem p = rich_problem(4, 2, 2, 3, 2);
  tcase c, d;
  tc_init(&c, &p, NULL, NULL);
  tc_fill(&c, 131);
  p.head_map = KDA_HEADMAP_MOD;
  tc_init(&d, &p, NULL, NULL);
  tc_fill(&d, 131);
  tc_run(&c), tc_run(&d);
  assert_bits(c.o, d.o, n_v(&p), "o (DIV vs MOD, HV = H)", c.seed);
  assert_bits(c.ht, d.ht, n_state(&p), "ht (DIV vs MOD, HV = H)", c.seed);
  tc_free(&c), tc_free(&d);
  for (int32_t map = 0; map < 2; map++) {
    kda_problem pg = rich_problem(4, 2, 4, 3, 2), pe;
    pg.head_map = map;
    pe = pg;
    pe.H = 4;
    tcase gq, ex;
    tc_init(&gq, &pg, NULL, NULL);
    tc_fill(&gq, 141 + (uint64_t)map);
    tc_init(&ex, &pe, NULL, NULL);
    tc_fill(&ex, 141 + (uint64_t)map); /* same v, g, beta, ...; q and k replaced below */
    const size_t K = 3;
    for (int64_t t = 0; t < pg.T; t++)
      for (int64_t hv = 0; hv < 4; hv++) {
        const int64_t h = map == KDA_HEADMAP_DIV ? hv / 2 : hv % 2;
        memcpy(ex.q + (size_t)(t * 4 + hv) * K, gq.q + (size_t)(t * 2 + h) * K, K * sizeof(double));
        memcpy(ex.k + (size_t)(t * 4 + hv) * K, gq.k + (size_t)(t * 2 + h) * K, K * sizeof(double));
      }
    memcpy(ex.v, gq.v, n_v(&pg) * sizeof(double));
    memcpy(ex.g, gq.g, n_g(&pg) * sizeof(double));
    memcpy(ex.beta, gq.beta, n_beta(&pg) * sizeof(double));
    memcpy(ex.A_log, gq.A_log, 4 * sizeof(double));
    memcpy(ex.dt_bias, gq.dt_bias, 4 * K * sizeof(double));
    memcpy(ex.h0, gq.h0, n_state(&pg) * sizeof(double));
    tc_run(&gq), tc_run(&ex);
    assert_bits(gq.o, ex.o, n_v(&pg), "o (grouped vs expanded heads)", gq.seed);
    assert_bits(gq.ht, ex.ht, n_state(&pg), "ht (grouped vs expanded heads)", gq.seed);
    tc_free(&gq), tc_free(&ex);
  }
}
END_TEST

/* An independent evaluation in matrix form (paper Eq. 1), K != V:
 *   S_t = (I - beta k k^T) Diag(a) S_{t-1} + beta k v^T,  o_t = S_t^T (scale q)
 * with the gate as -exp(A_log) log(1 + exp(x + b)) and the sigmoid as 1 / (1 + exp(-x)). */
static void matrix_form(const tcase *c, double *o, double *ht) {
  const kda_problem *p = &c->p;
  enum { K = 3, V = 5 };
  for (int64_t hv = 0; hv < p->HV; hv++) {
    double S[K][V], A[K][V];
    memcpy(S, c->h0 + (size_t)hv * K * V, sizeof S);
    for (int64_t t = 0; t < p->T; t++) {
      const int64_t h = hv / (p->HV / p->H);
      const double *q = c->q + (t * p->H + h) * K, *k = c->k + (t * p->H + h) * K;
      const double *v = c->v + (t * p->HV + hv) * V;
      double nq = 0, nk = 0, a[K], kn[K], qn[K];
      for (int i = 0; i < K; i++) nq += q[i] * q[i], nk += k[i] * k[i];
      for (int i = 0; i < K; i++) {
        kn[i] = k[i] / sqrt(nk + p->l2_eps);
        qn[i] = p->scale * q[i] / sqrt(nq + p->l2_eps);
        const double x = c->g[(t * p->HV + hv) * K + i] + c->dt_bias[hv * K + i];
        a[i] = exp(-exp(c->A_log[hv]) * log(1.0 + exp(x)));
      }
      const double beta = 1.0 / (1.0 + exp(-c->beta[t * p->HV + hv]));
      for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++) A[i][j] = a[i] * S[i][j];
      for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++) {
          double s = beta * kn[i] * v[j];
          for (int l = 0; l < K; l++) s += ((i == l) - beta * kn[i] * kn[l]) * A[l][j];
          S[i][j] = s;
        }
      for (int j = 0; j < V; j++) {
        double s = 0;
        for (int i = 0; i < K; i++) s += S[i][j] * qn[i];
        o[(t * p->HV + hv) * V + j] = s;
      }
    }
    memcpy(ht + (size_t)hv * K * V, S, sizeof S);
  }
}

START_TEST(test_matrix_form_k_ne_v) {
  kda_problem p = rich_problem(9, 1, 2, 3, 5);
  tcase c;
  tc_init(&c, &p, NULL, NULL);
  tc_fill(&c, 151);
  tc_run(&c);
  double *o = dalloc(n_v(&p)), *ht = dalloc(n_state(&p));
  matrix_form(&c, o, ht);
  assert_close(c.o, o, n_v(&p), 1e-12, 1e-3, "o vs matrix form", c.seed);
  assert_close(c.ht, ht, n_state(&p), 1e-12, 1e-3, "ht vs matrix form", c.seed);
  free(o), free(ht);
  tc_free(&c);
}
END_TEST

/* g = -inf (or a softplus gate input of +inf) wipes the state without NaN: the run from the wiping
 * token on equals a run from that token on a zero state. */
START_TEST(test_gate_wipe) {
  const int64_t tw = 2; /* the wiping token */
  kda_problem p = rich_problem(5, 1, 2, 3, 4);
  p.family = _i == 1 ? KDA_FAMILY_GDN : KDA_FAMILY_KDA;
  p.gate_mode = _i == 2 ? KDA_GATE_SOFTPLUS : KDA_GATE_LOG;
  tcase c;
  tc_init(&c, &p, NULL, NULL);
  tc_fill(&c, 161 + (uint64_t)_i);
  const size_t row = (size_t)p.HV * gw(&p);
  for (size_t e = 0; e < row; e++) c.g[(size_t)tw * row + e] = _i == 2 ? INFINITY : -INFINITY;
  tc_run(&c);
  assert_finite(c.o, n_v(&p), "o after a wipe");
  assert_finite(c.ht, n_state(&p), "ht after a wipe");
  tcase d;
  tc_slice(&d, &c, tw, p.T, NULL);
  tc_run(&d);
  assert_bits(c.o + (size_t)tw * (size_t)(p.HV * p.V), d.o, n_v(&d.p), "o after a wipe", c.seed);
  assert_bits(c.ht, d.ht, n_state(&p), "ht after a wipe", c.seed);
  tc_free(&c), tc_free(&d);
}
END_TEST

/* Only key channel 0 wiped: row 0 of the state restarts, the others keep their memory. */
START_TEST(test_gate_wipe_one_channel) {
  kda_problem p;
  kda_problem_init(&p, 1, 1, 1, 2, 2);
  p.has_initial_state = 1;
  p.scale = 1.0;
  static const double q[2] = {1, 1}, k[2] = {0, 0}, v[2] = {1, 1}, g[2] = {-INFINITY, 0};
  static const double b[1] = {0.5}, h0[4] = {3, 5, 7, 9};
  static const double want_ht[4] = {0, 0, 7, 9}, want_o[2] = {7, 9};
  double o[2], ht[4];
  kda_tensors_f64 t = {q, k, v, g, b, NULL, NULL, h0, NULL, NULL, o, ht, NULL};
  char err[KDA_ERRLEN] = "";
  ck_assert_msg(kda_ref_forward_f64(&p, &t, err, sizeof err) == KDA_OK, "%s", err);
  assert_vals(ht, want_ht, 4, "ht after a one-channel wipe");
  assert_vals(o, want_o, 2, "o after a one-channel wipe");
}
END_TEST

/* ==== 3. Gate, beta, L2, head map at known points ==== */

static double softplus_via_gate(double x) {
  return -kda_ref_gate(KDA_GATE_SOFTPLUS, x, 0.0, 0.0, 1, -5.0); /* exp(0) = 1 */
}

START_TEST(test_softplus_points) {
  ck_assert_double_eq_tol(softplus_via_gate(0.0), LN2, 2 * DBL_EPSILON);
  /* the bias adds to the input: 1 + (-1) = 0 exactly */
  ck_assert(kda_ref_gate(KDA_GATE_SOFTPLUS, 1.0, -1.0, 0.0, 1, -5.0) ==
            kda_ref_gate(KDA_GATE_SOFTPLUS, 0.0, 0.0, 0.0, 1, -5.0));
  /* left tail keeps relative accuracy: softplus(-40) = e^-40 (1 - e^-40 / 2 + ...) */
  const double sm = softplus_via_gate(-40.0);
  ck_assert_msg(sm > 0.0 && fabs(sm / exp(-40.0) - 1.0) <= 4 * DBL_EPSILON, "softplus(-40) = %g",
                sm);
  ck_assert(softplus_via_gate(-800.0) == 0.0);
  /* right tail: 40 + e^-40 rounds to 40; 20 + e^-20 does not */
  ck_assert(softplus_via_gate(40.0) == 40.0);
  ck_assert_double_eq_tol((softplus_via_gate(20.0) - 20.0) / exp(-20.0), 1.0, 1e-5);
  ck_assert(softplus_via_gate(INFINITY) == INFINITY);
  ck_assert(softplus_via_gate(-INFINITY) == 0.0);
  /* A_log scales: -exp(1) softplus(0) */
  const double g1 = kda_ref_gate(KDA_GATE_SOFTPLUS, 0.0, 0.0, 1.0, 1, -5.0);
  ck_assert_double_eq_tol(g1 / (-exp(1.0) * LN2), 1.0, 4 * DBL_EPSILON);
  /* softplus needs A_log; invalid modes are NaN */
  ck_assert(isnan(kda_ref_gate(KDA_GATE_SOFTPLUS, 0.0, 0.0, 0.0, 0, -5.0)));
  ck_assert(isnan(kda_ref_gate(7, 0.0, 0.0, 0.0, 1, -5.0)));
  ck_assert(kda_ref_gate(KDA_GATE_LOG, -0.75, 3.0, 3.0, 1, -5.0) == -0.75);
  ck_assert(kda_ref_gate(KDA_GATE_LOG, -INFINITY, 0.0, 0.0, 0, -5.0) == -INFINITY);
  /* float twin: the same points */
  ck_assert(-kda_ref32_gate(KDA_GATE_SOFTPLUS, 40.0f, 0.0f, 0.0f, 1, -5.0f) == 40.0f);
  const float sm32 = -kda_ref32_gate(KDA_GATE_SOFTPLUS, -40.0f, 0.0f, 0.0f, 1, -5.0f);
  ck_assert_msg(sm32 > 0.0f && fabs((double)sm32 / exp(-40.0) - 1.0) <= 1e-6,
                "f32 softplus(-40) = %g", (double)sm32);
  ck_assert_double_eq_tol(-kda_ref32_gate(KDA_GATE_SOFTPLUS, 0.0f, 0.0f, 0.0f, 1, -5.0f), LN2,
                          2 * FLT_EPSILON);
}
END_TEST

START_TEST(test_sigmoid_points) {
  ck_assert(kda_ref_beta(KDA_BETA_LOGIT, 0.0) == 0.5);
  ck_assert(kda_ref_beta(KDA_BETA_LOGIT_NEG, 0.0) == 1.0);
  ck_assert(kda_ref_beta(KDA_BETA_PROB, 0.375) == 0.375);
  static const double ys[6] = {1e-8, 0.1, 1.0, 3.5, 10.0, 30.0};
  for (int i = 0; i < 6; i++) {
    const double s = kda_ref_beta(KDA_BETA_LOGIT, ys[i]), m = kda_ref_beta(KDA_BETA_LOGIT, -ys[i]);
    ck_assert_msg(fabs(s + m - 1.0) <= 2 * DBL_EPSILON, "sigmoid(%g) + sigmoid(-%g) = 1 + %g",
                  ys[i], ys[i], s + m - 1.0);
    ck_assert(s > 0.5 && m < 0.5);
    ck_assert(kda_ref_beta(KDA_BETA_LOGIT_NEG, ys[i]) == 2.0 * s);
  }
  /* the left tail keeps relative accuracy; nothing overflows */
  const double s40 = kda_ref_beta(KDA_BETA_LOGIT, -40.0);
  ck_assert_double_eq_tol(s40 / exp(-40.0), 1.0, 4 * DBL_EPSILON);
  ck_assert(kda_ref_beta(KDA_BETA_LOGIT, -800.0) == 0.0);
  ck_assert(kda_ref_beta(KDA_BETA_LOGIT, 800.0) == 1.0);
  ck_assert(kda_ref_beta(KDA_BETA_LOGIT, -INFINITY) == 0.0);
  ck_assert(kda_ref_beta(KDA_BETA_LOGIT, INFINITY) == 1.0);
  ck_assert(isnan(kda_ref_beta(5, 0.0)));
  ck_assert(kda_ref32_beta(KDA_BETA_LOGIT, 0.0f) == 0.5f);
  ck_assert(kda_ref32_beta(KDA_BETA_LOGIT_NEG, 0.0f) == 1.0f);
  ck_assert(kda_ref32_beta(KDA_BETA_LOGIT, -200.0f) == 0.0f);
  ck_assert(kda_ref32_beta(KDA_BETA_LOGIT, 200.0f) == 1.0f);
  ck_assert_double_eq_tol(kda_ref32_beta(KDA_BETA_LOGIT, -40.0f) / exp(-40.0), 1.0, 1e-6);
}
END_TEST

START_TEST(test_lower_bound_points) {
  /* x + b = 0 -> sigmoid(0) = 1/2 -> lb / 2, with or without A_log (exp(A_log) * 0 = 0) */
  ck_assert(kda_ref_gate(KDA_GATE_LOWER_BOUND, 0.5, -0.5, 0.0, 0, -5.0) == -2.5);
  ck_assert(kda_ref_gate(KDA_GATE_LOWER_BOUND, 0.5, -0.5, 0.7, 1, -5.0) == -2.5);
  ck_assert(kda_ref_gate(KDA_GATE_LOWER_BOUND, INFINITY, 0.0, 0.0, 0, -5.0) == -5.0);
  ck_assert(kda_ref_gate(KDA_GATE_LOWER_BOUND, -INFINITY, 0.0, 0.0, 0, -5.0) == 0.0);
  /* A_log multiplies the argument: exp(A_log) (x + b) with A_log = log 2 vs has_A_log = 0 at 2x */
  const double a = kda_ref_gate(KDA_GATE_LOWER_BOUND, 1.5, 0.0, LN2, 1, -1.0);
  const double b = kda_ref_gate(KDA_GATE_LOWER_BOUND, 3.0, 0.0, 0.0, 0, -1.0);
  ck_assert_double_eq_tol(a, b, 4 * DBL_EPSILON);
  for (double x = -30.0; x <= 30.0; x += 0.5) {
    const double g = kda_ref_gate(KDA_GATE_LOWER_BOUND, x, 0.25, 0.3, 1, -5.0);
    ck_assert_msg(g >= -5.0 && g <= 0.0, "lower-bound gate %g at x = %g", g, x);
  }
  ck_assert(kda_ref32_gate(KDA_GATE_LOWER_BOUND, 0.5f, -0.5f, 0.0f, 0, -5.0f) == -2.5f);
}
END_TEST

START_TEST(test_l2_points) {
  static const double zero[3] = {0, 0, 0}, tiny[3] = {1e-4, 0, 0}, v34[2] = {3, 4};
  double y[3], z[3];
  for (int32_t m = KDA_L2_FLA; m <= KDA_L2_GGML; m++) {
    kda_ref_l2(m, 1e-6, 3, zero, y);
    ck_assert_msg(y[0] == 0.0 && y[1] == 0.0 && y[2] == 0.0, "L2 mode %d of 0", (int)m);
    float zf[3] = {0, 0, 0}, yf[3];
    kda_ref32_l2(m, 1e-6f, 3, zf, yf);
    ck_assert(yf[0] == 0.0f && yf[1] == 0.0f && yf[2] == 0.0f);
  }
  /* fla: 1e-4 / sqrt(1e-8 + 1e-6) = 0.0995037...; ggml: 1e-4 / max(1e-4, 1e-6) = 1 */
  kda_ref_l2(KDA_L2_FLA, 1e-6, 3, tiny, y);
  kda_ref_l2(KDA_L2_GGML, 1e-6, 3, tiny, z);
  ck_assert_double_eq_tol(y[0], 1e-4 / sqrt(1.01e-6), 1e-15);
  ck_assert(z[0] == 1.0);
  ck_assert(y[0] != z[0]);
  /* ggml is exact on (3, 4): 3/5 and 4/5 correctly rounded; fla is eps-perturbed */
  kda_ref_l2(KDA_L2_GGML, 1e-6, 2, v34, y);
  ck_assert(y[0] == 0.6 && y[1] == 0.8);
  kda_ref_l2(KDA_L2_FLA, 1e-6, 2, v34, y);
  ck_assert_double_eq_tol(y[0], 3.0 / sqrt(25.000001), 1e-15);
  /* OFF copies; x and y may alias */
  double w[2] = {3, 4};
  kda_ref_l2(KDA_L2_OFF, 1e-6, 2, v34, y);
  ck_assert(y[0] == 3.0 && y[1] == 4.0);
  kda_ref_l2(KDA_L2_GGML, 1e-6, 2, w, w);
  ck_assert(w[0] == 0.6 && w[1] == 0.8);
  kda_ref_l2(9, 1e-6, 2, v34, y);
  ck_assert(isnan(y[0]));
}
END_TEST

START_TEST(test_head_map_points) {
  static const int64_t div[6] = {0, 0, 0, 1, 1, 1}, mod[6] = {0, 1, 0, 1, 0, 1};
  for (int64_t hv = 0; hv < 6; hv++) {
    ck_assert_int_eq(kda_ref_head(KDA_HEADMAP_DIV, 2, 6, hv), div[hv]);
    ck_assert_int_eq(kda_ref_head(KDA_HEADMAP_MOD, 2, 6, hv), mod[hv]);
  }
  ck_assert_int_eq(kda_ref_head(5, 2, 6, 1), -1);
}
END_TEST

/* ==== 4. The float32 twin against the float64 reference ==== */

static float *to_f32(const double *x, size_t n) {
  float *y = falloc(n);
  for (size_t i = 0; i < n; i++) y[i] = (float)x[i];
  return y;
}
static double *to_f64(const float *x, size_t n) {
  double *y = dalloc(n);
  for (size_t i = 0; i < n; i++) y[i] = (double)x[i];
  return y;
}

/* Rounds every input of c to float, runs both twins, compares o, ht, hc to 1e-5 of their
 * magnitudes. */
static void compare_twins(tcase *c) {
  const kda_problem *p = &c->p;
  double *in[] = {c->q, c->k, c->v, c->g, c->beta, c->A_log, c->dt_bias, c->h0};
  const size_t n[] = {n_qk(p), n_qk(p), n_v(p), n_g(p), n_beta(p), (size_t)p->HV,
                      (size_t)p->HV * gw(p), n_state(p)};
  float *f[8];
  for (int i = 0; i < 8; i++) {
    f[i] = to_f32(in[i], n[i]);
    for (size_t e = 0; e < n[i]; e++) in[i][e] = (double)f[i][e];
  }
  tc_run(c);
  float *o = falloc(n_v(p)), *ht = falloc(n_state(p)), *hc = falloc(n_hc(p));
  kda_tensors_f32 t = {f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], c->cu, c->cp, o, ht, hc};
  char err[KDA_ERRLEN] = "";
  ck_assert_msg(kda_ref_forward_f32(p, &t, err, sizeof err) == KDA_OK, "%s", err);
  double *o64 = to_f64(o, n_v(p)), *ht64 = to_f64(ht, n_state(p)), *hc64 = to_f64(hc, n_hc(p));
  assert_close(o64, c->o, n_v(p), 1e-5, 0.0, "f32 o vs f64", c->seed);
  assert_close(ht64, c->ht, n_state(p), 1e-5, 0.0, "f32 ht vs f64", c->seed);
  assert_close(hc64, c->hc, n_hc(p), 1e-5, 0.0, "f32 hc vs f64", c->seed);
  free(o64), free(ht64), free(hc64), free(o), free(ht), free(hc);
  for (int i = 0; i < 8; i++) free(f[i]);
}

/* The float32 twin evaluates its gate and beta formulas in float (SPEC.md §9.2): bit for bit
 * the same float expressions written out here, so a twin that slipped into double (e.g. exp
 * instead of expf) is caught even where the results are close. */
static float sp32(float y) { return (y > 0.0f ? y : 0.0f) + log1pf(expf(-fabsf(y))); }
static float sg32(float y) {
  if (y >= 0.0f) return 1.0f / (1.0f + expf(-y));
  float e = expf(y);
  return e / (1.0f + e);
}

START_TEST(test_f32_formulas_in_float) {
  /* the 0x1.3f... points are where log1pf(expf(.)) and the double evaluation rounded to float
   * differ with glibc; on any libm the comparison below is exact. */
  static const float xs[] = {-30.5f, -17.25f, -3.1f, -0.7f, 0.0f, 0.3f, 2.9f, 19.5f, 21.0f,
                             -0x1.3fffd6p+4f, -0x1.3ffc3cp+4f, -0x1.3ff6aap+4f, -0x1.3fe3p+4f};
  const float A = 0.37f, lb = -4.75f;
  for (size_t n = 0; n < 2 * sizeof xs / sizeof xs[0]; n++) {
    float x = xs[n / 2], b = (n & 1) ? -0.45f : 0.0f;
    float want_sp = -(expf(A) * sp32(x + b));
    float want_lb = lb * sg32(expf(A) * (x + b)), want_lb0 = lb * sg32(x + b);
    float got_sp = kda_ref32_gate(KDA_GATE_SOFTPLUS, x, b, A, 1, lb);
    float got_lb = kda_ref32_gate(KDA_GATE_LOWER_BOUND, x, b, A, 1, lb);
    float got_lb0 = kda_ref32_gate(KDA_GATE_LOWER_BOUND, x, b, A, 0, lb);
    ck_assert_msg(memcmp(&got_sp, &want_sp, sizeof(float)) == 0, "softplus gate x=%a: %a vs %a",
                  (double)x, (double)got_sp, (double)want_sp);
    ck_assert_msg(memcmp(&got_lb, &want_lb, sizeof(float)) == 0, "lower-bound gate x=%a",
                  (double)x);
    ck_assert_msg(memcmp(&got_lb0, &want_lb0, sizeof(float)) == 0, "lower-bound gate, no A_log, "
                  "x=%a", (double)x);
    float want_b = 2.0f * sg32(x), got_b = kda_ref32_beta(KDA_BETA_LOGIT_NEG, x);
    ck_assert_msg(memcmp(&got_b, &want_b, sizeof(float)) == 0, "beta x=%a", (double)x);
  }
}
END_TEST

START_TEST(test_f32_vs_f64) {
  static const int64_t cu[4] = {0, 7, 7, 20}, cp[3] = {3, 7, 19};
  kda_problem p = rich_problem(20, 2, 4, 8, 6);
  p.N = 3;
  p.n_checkpoints = 3;
  switch (_i) {
  case 0: break; /* KDA, softplus, logit beta, fla L2 */
  case 1:
    p.family = KDA_FAMILY_GDN, p.gate_mode = KDA_GATE_LOWER_BOUND, p.l2_mode = KDA_L2_GGML;
    p.beta_mode = KDA_BETA_LOGIT_NEG, p.head_map = KDA_HEADMAP_MOD;
    break;
  case 2:
    p.gate_mode = KDA_GATE_LOWER_BOUND, p.has_A_log = 0, p.state_layout = KDA_STATE_VK;
    break;
  case 3: p.family = KDA_FAMILY_DELTANET; break;
  case 4: p.family = KDA_FAMILY_LINEAR, p.beta_mode = KDA_BETA_PROB; break;
  case 5: p.gate_mode = KDA_GATE_LOG, p.l2_mode = KDA_L2_OFF, p.has_initial_state = 0; break;
  }
  tcase c;
  tc_init(&c, &p, cu, cp);
  tc_fill(&c, 171 + (uint64_t)_i);
  if (p.l2_mode == KDA_L2_OFF) /* keep beta ||k||^2 < 2: the recurrence stays non-expansive */
    for (size_t i = 0; i < n_qk(&p); i++) c.k[i] *= 0.3;
  compare_twins(&c);
  tc_free(&c);
}
END_TEST

/* ==== 5. Error paths ==== */

static int run_err(const kda_problem *p, const kda_tensors_f64 *t, char *err) {
  err[0] = '\0';
  return kda_ref_forward_f64(p, t, err, KDA_ERRLEN);
}

/* A valid call with every buffer set (softplus gate with A_log, h0, ht, checkpoints, N = 2). */
typedef struct errcase {
  kda_problem p;
  tcase c;
  kda_tensors_f64 t;
} errcase;

static void errcase_init(errcase *e) {
  static const int64_t cu[3] = {0, 2, 4}, cp[2] = {1, 3};
  e->p = rich_problem(4, 1, 2, 2, 2);
  e->p.N = 2;
  e->p.n_checkpoints = 2;
  tc_init(&e->c, &e->p, cu, cp);
  tc_fill(&e->c, 181);
  e->t = tc_tensors(&e->c);
}

/* Sets the i-th buffer of t (in the order of `buffer_names`) to NULL. */
static const char *const buffer_names[] = {"q",  "k",  "v",  "g",  "beta", "A_log", "dt_bias",
                                           "h0", "o",  "ht", "hc", "checkpoints", "cu_seqlens"};
static void drop_buffer(kda_tensors_f64 *t, int i) {
  switch (i) {
  case 0: t->q = NULL; break;
  case 1: t->k = NULL; break;
  case 2: t->v = NULL; break;
  case 3: t->g = NULL; break;
  case 4: t->beta = NULL; break;
  case 5: t->A_log = NULL; break;
  case 6: t->dt_bias = NULL; break;
  case 7: t->h0 = NULL; break;
  case 8: t->o = NULL; break;
  case 9: t->ht = NULL; break;
  case 10: t->hc = NULL; break;
  case 11: t->checkpoints = NULL; break;
  default: t->cu_seqlens = NULL; break;
  }
}

START_TEST(test_err_null_buffer) {
  for (int i = 0; i < (int)(sizeof buffer_names / sizeof buffer_names[0]); i++) {
    errcase e;
    errcase_init(&e);
    char err[KDA_ERRLEN], needle[64];
    ck_assert_msg(run_err(&e.p, &e.t, err) == KDA_OK, "%s", err);
    drop_buffer(&e.t, i);
    ck_assert_int_eq(run_err(&e.p, &e.t, err), KDA_EINVAL);
    snprintf(needle, sizeof needle, "buffer %s is NULL", buffer_names[i]);
    ck_assert_msg(strstr(err, needle) != NULL, "message '%s' does not say '%s'", err, needle);
    tc_free(&e.c);
  }
}
END_TEST

/* Buffers a mode does not use may be NULL. */
START_TEST(test_optional_buffers) {
  errcase e;
  errcase_init(&e);
  char err[KDA_ERRLEN];
  e.p.family = KDA_FAMILY_DELTANET;
  e.p.has_initial_state = 0;
  e.p.want_final_state = 0;
  e.p.n_checkpoints = 0;
  e.t.g = e.t.A_log = e.t.dt_bias = e.t.h0 = NULL;
  e.t.ht = e.t.hc = NULL;
  e.t.checkpoints = NULL;
  ck_assert_msg(run_err(&e.p, &e.t, err) == KDA_OK, "%s", err);
  e.p.family = KDA_FAMILY_KDA;
  e.p.gate_mode = KDA_GATE_LOG;
  e.t.g = e.c.g;
  ck_assert_msg(run_err(&e.p, &e.t, err) == KDA_OK, "%s", err);
  tc_free(&e.c);
}
END_TEST

/* One version, written once (kda_version.h): the string, the parts, the number and the
 * library's answers agree. */
START_TEST(test_version) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", KDA_VERSION_MAJOR, KDA_VERSION_MINOR,
           KDA_VERSION_PATCH);
  ck_assert_str_eq(KDA_VERSION_STRING, want);
  ck_assert_str_eq(kda_version(), KDA_VERSION_STRING);
  ck_assert_int_eq(kda_version_number(), KDA_VERSION_NUMBER);
  ck_assert_int_eq(KDA_VERSION_NUMBER,
                   KDA_VERSION_MAJOR * 10000 + KDA_VERSION_MINOR * 100 + KDA_VERSION_PATCH);
}
END_TEST

START_TEST(test_err_bad_problem) {
  char err[KDA_ERRLEN];
  for (int k = 0; k < 12; k++) {
    errcase e;
    errcase_init(&e);
    switch (k) {
    case 9: e.p.struct_size = KDA_PROBLEM_V1_SIZE; break; /* not made by kda_problem_init */
    case 10: e.p.struct_size = (uint32_t)sizeof e.p + 8; break;
    case 11: e.p.reserved1 = 1; break;
    case 0: e.p.family = 9; break;
    case 1: e.p.gate_mode = 5; break;
    case 2: e.p.beta_mode = -1; break;
    case 3: e.p.l2_mode = 3; break;
    case 4: e.p.head_map = 2; break;
    case 5: e.p.state_layout = 2; break;
    case 6: e.p.HV = 3; break; /* not a multiple of H = 2 below */
    case 7: e.p.has_A_log = 0; break; /* softplus needs A_log */
    case 8: e.p.K = 0; break;
    }
    if (k == 6) e.p.H = 2;
    ck_assert_msg(run_err(&e.p, &e.t, err) == KDA_EINVAL, "case %d", k);
    ck_assert_msg(err[0] != '\0', "case %d: empty message", k);
    tc_free(&e.c);
  }
  ck_assert_int_eq(kda_ref_forward_f64(NULL, NULL, err, sizeof err), KDA_EINVAL);
  ck_assert(err[0] != '\0');
}
END_TEST

START_TEST(test_err_bad_index) {
  static const int64_t bad_cu[4][3] = {{0, 3, 2}, {1, 2, 4}, {0, 2, 5}, {0, 2, 3}};
  static const int64_t bad_cp[4][2] = {{2, 2}, {3, 1}, {1, 4}, {-1, 2}};
  char err[KDA_ERRLEN];
  for (int k = 0; k < 4; k++) {
    errcase e;
    errcase_init(&e);
    e.t.cu_seqlens = bad_cu[k];
    ck_assert_msg(run_err(&e.p, &e.t, err) == KDA_EINVAL, "cu_seqlens case %d", k);
    ck_assert(err[0] != '\0');
    e.t.cu_seqlens = e.c.cu;
    e.t.checkpoints = bad_cp[k];
    ck_assert_msg(run_err(&e.p, &e.t, err) == KDA_EINVAL, "checkpoints case %d", k);
    ck_assert(err[0] != '\0');
    tc_free(&e.c);
  }
}
END_TEST

START_TEST(test_err_f32) {
  errcase e;
  errcase_init(&e);
  float buf[64] = {0};
  static const int64_t cu[3] = {0, 2, 4}, cp[2] = {1, 3};
  kda_tensors_f32 t = {buf, buf, buf, buf, buf, buf, buf, buf, cu, cp, buf, buf, buf};
  char err[KDA_ERRLEN] = "";
  ck_assert_msg(kda_ref_forward_f32(&e.p, &t, err, sizeof err) == KDA_OK, "%s", err);
  t.dt_bias = NULL;
  ck_assert_int_eq(kda_ref_forward_f32(&e.p, &t, err, sizeof err), KDA_EINVAL);
  ck_assert(strstr(err, "dt_bias") != NULL);
  ck_assert(strstr(err, "f32") != NULL);
  t.dt_bias = buf;
  e.p.beta_mode = 7;
  ck_assert_int_eq(kda_ref_forward_f32(&e.p, &t, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(kda_ref_forward_f32(&e.p, NULL, err, sizeof err), KDA_EINVAL);
  /* err may be NULL */
  ck_assert_int_eq(kda_ref_forward_f32(&e.p, &t, NULL, 0), KDA_EINVAL);
  tc_free(&e.c);
}
END_TEST

static Suite *ref_suite(void) {
  Suite *s = suite_create("ref");
  TCase *hand = tcase_create("hand");
  tcase_add_test(hand, test_steps_hand);
  tcase_add_test(hand, test_steps_hand_f32);
  tcase_add_loop_test(hand, test_forward_hand, 0, 2);
  tcase_add_loop_test(hand, test_forward_hand_f32, 0, 2);
  tcase_add_test(hand, test_linear_deltanet_hand);
  suite_add_tcase(s, hand);
  TCase *inv = tcase_create("invariants");
  tcase_add_test(inv, test_beta_zero_is_pure_decay);
  tcase_add_test(inv, test_chaining);
  tcase_add_test(inv, test_head_permutation);
  tcase_add_test(inv, test_state_layout);
  tcase_add_test(inv, test_checkpoints_single);
  tcase_add_test(inv, test_checkpoints_varlen);
  tcase_add_loop_test(inv, test_varlen, 0, 2);
  tcase_add_test(inv, test_no_tokens);
  tcase_add_loop_test(inv, test_kda_equal_g_is_gdn, 0, 2);
  tcase_add_test(inv, test_kda_zero_g_is_deltanet);
  tcase_add_test(inv, test_deltanet_one_token_is_linear);
  tcase_add_loop_test(inv, test_gate_equals_pregated, 0, 2);
  tcase_add_test(inv, test_beta_logit_equals_prob);
  tcase_add_test(inv, test_head_maps);
  tcase_add_test(inv, test_matrix_form_k_ne_v);
  tcase_add_loop_test(inv, test_gate_wipe, 0, 3);
  tcase_add_test(inv, test_gate_wipe_one_channel);
  suite_add_tcase(s, inv);
  TCase *pts = tcase_create("points");
  tcase_add_test(pts, test_softplus_points);
  tcase_add_test(pts, test_f32_formulas_in_float);
  tcase_add_test(pts, test_sigmoid_points);
  tcase_add_test(pts, test_lower_bound_points);
  tcase_add_test(pts, test_l2_points);
  tcase_add_test(pts, test_head_map_points);
  suite_add_tcase(s, pts);
  TCase *twin = tcase_create("twin");
  tcase_add_loop_test(twin, test_f32_vs_f64, 0, 6);
  suite_add_tcase(s, twin);
  TCase *errs = tcase_create("errors");
  tcase_add_test(errs, test_err_null_buffer);
  tcase_add_test(errs, test_optional_buffers);
  tcase_add_test(errs, test_version);
  tcase_add_test(errs, test_err_bad_problem);
  tcase_add_test(errs, test_err_bad_index);
  tcase_add_test(errs, test_err_f32);
  suite_add_tcase(s, errs);
  return s;
}

int main(void) { return kda_test_main(ref_suite(), CK_NORMAL, CK_FORK_GETENV); }

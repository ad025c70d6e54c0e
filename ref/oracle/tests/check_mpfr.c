/* check_mpfr.c: unit tests of the MPFR reference that certifies golden values (SPEC.md §8).
 * SPDX-License-Identifier: MIT
 *
 * 1. hand-computed dyadic cases (exact results known, compared with ==), every family;
 * 2. agreement with the float64 reference on random small cases across every mode;
 * 3. invariants that hold bit for bit because both sides are correctly rounded values of the
 *    same exact result (GDN vs KDA with constant g, DeltaNet vs KDA with g = 0, VK vs KV,
 *    varlen vs separate calls);
 * 4. PROVEN on non-expansive inputs, AGREED (not PROVEN) on strongly expansive ones;
 * 5. results independent of prec0;
 * 6. MPFR's global state unchanged after every call, including failing ones;
 * 7. error returns, including KDA_ENOTCERT;
 * 8. the binary64 rounding against MPFR's own emulation (emin/emax + mpfr_subnormalize).
 * Random inputs come from an inline LCG with fixed seeds, printed on failure.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "kda_mpfr.h"
#include "kda_mpfr_impl.h"
#include "kda_ref.h"
#include "kda_test.h"

/* ==== Helpers ==== */

#define lcg_next kda_test_lcg_next /* the shared deterministic inputs (tests/kda_test.h) */
#define u01 kda_test_u01
#define urange kda_test_urange
#define dalloc kda_test_dalloc

/* One problem with all its buffers. */
typedef struct tcase {
  kda_problem p;
  double *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0, *o, *ht, *hc;
  int64_t cu[8], cp[8];
  uint64_t seed;
} tcase;

static size_t n_qk(const kda_problem *p) { return (size_t)(p->T * p->H * p->K); }
static size_t n_v(const kda_problem *p) { return (size_t)(p->T * p->HV * p->V); }
static size_t n_slot(const kda_problem *p) { return (size_t)(p->HV * p->K * p->V); }
static size_t n_g(const kda_problem *p) {
  return (size_t)(p->T * p->HV * kda_problem_gate_width(p));
}

/* Allocates every buffer for the shapes in c->p (zeroed). */
static void tc_alloc(tcase *c) {
  const kda_problem *p = &c->p;
  const int64_t GW = p->K; /* room for any family's gate */
  c->q = dalloc(n_qk(p));
  c->k = dalloc(n_qk(p));
  c->v = dalloc(n_v(p));
  c->g = dalloc((size_t)(p->T * p->HV * GW));
  c->beta = dalloc((size_t)(p->T * p->HV));
  c->A_log = dalloc((size_t)p->HV);
  c->dt_bias = dalloc((size_t)(p->HV * GW));
  c->h0 = dalloc((size_t)p->N * n_slot(p));
  c->o = dalloc(n_v(p));
  c->ht = dalloc((size_t)p->N * n_slot(p));
  c->hc = dalloc((size_t)(p->n_checkpoints > 0 ? p->n_checkpoints : 1) * n_slot(p));
}

static void tc_free(tcase *c) {
  free(c->q);
  free(c->k);
  free(c->v);
  free(c->g);
  free(c->beta);
  free(c->A_log);
  free(c->dt_bias);
  free(c->h0);
  free(c->o);
  free(c->ht);
  free(c->hc);
}

static kda_tensors_f64 tc_tensors(tcase *c) {
  kda_tensors_f64 t;
  memset(&t, 0, sizeof t);
  t.q = c->q;
  t.k = c->k;
  t.v = c->v;
  t.g = c->g;
  t.beta = c->beta;
  t.A_log = c->A_log;
  t.dt_bias = c->dt_bias;
  t.h0 = c->h0;
  t.cu_seqlens = c->p.N > 1 ? c->cu : NULL;
  t.checkpoints = c->p.n_checkpoints > 0 ? c->cp : NULL;
  t.o = c->o;
  t.ht = c->ht;
  t.hc = c->hc;
  return t;
}

/* Random inputs suited to the modes in c->p (seeded). */
static void tc_fill(tcase *c, uint64_t seed) {
  kda_problem *p = &c->p;
  uint64_t s = seed;
  c->seed = seed;
  for (size_t i = 0; i < n_qk(p); i++) c->q[i] = urange(&s, -1, 1);
  for (size_t i = 0; i < n_qk(p); i++) c->k[i] = urange(&s, -1, 1);
  for (size_t i = 0; i < n_v(p); i++) c->v[i] = urange(&s, -1, 1);
  for (size_t i = 0; i < (size_t)(p->T * p->HV); i++)
    c->beta[i] = p->beta_mode == KDA_BETA_PROB ? urange(&s, 0, 1) : urange(&s, -3, 3);
  for (size_t i = 0; i < n_g(p); i++)
    c->g[i] = p->gate_mode == KDA_GATE_LOG ? urange(&s, -2, 0) : urange(&s, -3, 3);
  const int64_t GW = kda_problem_gate_width(p);
  for (int64_t hv = 0; hv < p->HV; hv++) {
    c->A_log[hv] = urange(&s, -1, 1);
    for (int64_t ch = 0; ch < GW; ch++) c->dt_bias[hv * GW + ch] = urange(&s, -1, 1);
  }
  for (size_t i = 0; i < (size_t)p->N * n_slot(p); i++) c->h0[i] = urange(&s, -1, 1);
}

static int run_mpfr(tcase *c, const kda_mpfr_options *o, kda_mpfr_report *r) {
  char err[KDA_ERRLEN] = "";
  kda_tensors_f64 t = tc_tensors(c);
  int st = kda_mpfr_forward(&c->p, &t, o, r, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "kda_mpfr_forward: %d %s (seed %llu)", st, err,
                (unsigned long long)c->seed);
  ck_assert_int_ne(r->method, KDA_CERT_NONE);
  return st;
}

static void assert_vals(const double *got, const double *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i], "%s[%zu] = %.17g, expected %.17g", what, i, got[i], want[i]);
}

static void assert_bits(const double *a, const double *b, size_t n, const char *what,
                        uint64_t seed) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(memcmp(&a[i], &b[i], sizeof a[i]) == 0,
                  "%s: element %zu differs: %a vs %a (seed %llu)", what, i, a[i], b[i],
                  (unsigned long long)seed);
}

/* ==== 1. Hand-computed dyadic cases ====
 * K = V = 2, T = 2, scale 1/2, beta 1/2, h0 = [[0,0],[2,2]]:
 *   t0: q = (1,0), k = (1,0), v = (2,4), g = (0,0)
 *   t1: q = (1,1), k = (1,1), v = (4,0), g = (0,-inf)   (GDN: g = -inf for the head)
 * kda:      t0: S = [[1,2],[2,2]], o = (1/2, 1); t1: decay -> [[1,2],[0,0]], p = (1,2),
 *           v - p = (3,-2), S = [[5/2,1],[3/2,-1]], o = (2, 0)
 * deltanet: t1: p = (3,4), v - p = (1,-4), S = [[3/2,0],[5/2,0]], o = (2, 0)
 * gdn:      t1: decay -> 0, S = [[2,0],[2,0]], o = (2, 0)
 * linear:   t1: S = [[3,2],[4,2]], o = (7/2, 2)
 * The zero output o[1][1] is exact: proving it needs a bound below 2^-1075 (about 1100 bits). */
static void dyadic_case(tcase *c, int32_t family) {
  memset(c, 0, sizeof *c);
  kda_problem_init(&c->p, 2, 1, 1, 2, 2);
  c->p.family = family;
  c->p.scale = 0.5;
  c->p.has_initial_state = 1;
  tc_alloc(c);
  const double q[] = {1, 0, 1, 1}, k[] = {1, 0, 1, 1}, v[] = {2, 4, 4, 0};
  const double gk[] = {0, 0, 0, -INFINITY}, gg[] = {0, -INFINITY}, h0[] = {0, 0, 2, 2};
  memcpy(c->q, q, sizeof q);
  memcpy(c->k, k, sizeof k);
  memcpy(c->v, v, sizeof v);
  memcpy(c->g, family == KDA_FAMILY_GDN ? gg : gk, family == KDA_FAMILY_GDN ? sizeof gg
                                                                               : sizeof gk);
  memcpy(c->h0, h0, sizeof h0);
  c->beta[0] = c->beta[1] = 0.5;
}

START_TEST(test_dyadic_families) {
  static const double want_o[4][4] = {
      {0.5, 1, 2, 0}, {0.5, 1, 2, 0}, {0.5, 1, 2, 0}, {0.5, 1, 3.5, 2}};
  static const double want_ht[4][4] = {
      {2.5, 1, 1.5, -1}, {2, 0, 2, 0}, {1.5, 0, 2.5, 0}, {3, 2, 4, 2}};
  for (int32_t f = 0; f < 4; f++) {
    tcase c;
    dyadic_case(&c, f);
    kda_mpfr_report r;
    run_mpfr(&c, NULL, &r);
    assert_vals(c.o, want_o[f], 4, kda_family_name(f));
    assert_vals(c.ht, want_ht[f], 4, kda_family_name(f));
    ck_assert_msg(r.method == KDA_CERT_PROVEN, "%s: method %s", kda_family_name(f),
                  kda_mpfr_method_name(r.method));
    ck_assert_int_eq(r.n_values, 8);
    ck_assert_int_eq(r.n_proven, 8);
    ck_assert_int_eq(r.expansive, 0);
    ck_assert(r.ziv_rounds >= 2 && r.prec_used > r.prec_check);
    tc_free(&c);
  }
}
END_TEST

/* The exact zero needs ~1100 bits to be proven; below that budget it is AGREED. */
START_TEST(test_dyadic_zero_agreed_under_budget) {
  tcase c;
  dyadic_case(&c, KDA_FAMILY_KDA);
  kda_mpfr_options o;
  kda_mpfr_options_init(&o);
  o.prec_max = 512;
  kda_mpfr_report r;
  run_mpfr(&c, &o, &r);
  ck_assert_int_eq(r.method, KDA_CERT_AGREED);
  ck_assert_int_eq(r.n_proven, 7); /* all but o[1][1] = 0 */
  ck_assert(c.o[3] == 0.0 && !signbit(c.o[3]));
  tc_free(&c);
}
END_TEST

START_TEST(test_dyadic_variants) {
  /* vk layout: h0 and ht transposed in storage only */
  tcase c;
  kda_mpfr_report r;
  dyadic_case(&c, KDA_FAMILY_KDA);
  c.p.state_layout = KDA_STATE_VK;
  const double h0vk[] = {0, 2, 0, 2}, htvk[] = {2.5, 1.5, 1, -1}, o[] = {0.5, 1, 2, 0};
  memcpy(c.h0, h0vk, sizeof h0vk);
  run_mpfr(&c, NULL, &r);
  assert_vals(c.ht, htvk, 4, "ht (vk)");
  assert_vals(c.o, o, 4, "o (vk)");
  /* a checkpoint after t0, and logit beta 0 -> sigma(0) = 1/2 exactly */
  c.p.state_layout = KDA_STATE_KV;
  memcpy(c.h0, (const double[]){0, 0, 2, 2}, 4 * sizeof(double));
  c.p.n_checkpoints = 1;
  c.cp[0] = 0;
  c.p.beta_mode = KDA_BETA_LOGIT;
  c.beta[0] = c.beta[1] = 0.0;
  run_mpfr(&c, NULL, &r);
  assert_vals(c.o, o, 4, "o (logit)");
  assert_vals(c.hc, (const double[]){1, 2, 2, 2}, 4, "hc");
  ck_assert_int_eq(r.n_values, 12);
  /* logit_neg: beta_eff = 2 sigma(0) = 1: t0 S = [[2,4],[2,2]], o = (1,2); t1 decay ->
   * [[2,4],[0,0]], p = (2,4), v - p = (2,-4), S = [[4,0],[2,-4]], o = (3,-2) */
  c.p.beta_mode = KDA_BETA_LOGIT_NEG;
  run_mpfr(&c, NULL, &r);
  assert_vals(c.o, (const double[]){1, 2, 3, -2}, 4, "o (logit_neg)");
  assert_vals(c.ht, (const double[]){4, 0, 2, -4}, 4, "ht (logit_neg)");
  assert_vals(c.hc, (const double[]){2, 4, 2, 2}, 4, "hc (logit_neg)");
  ck_assert_int_eq(r.method, KDA_CERT_PROVEN);
  tc_free(&c);
  /* ggml L2 with exact norms: q = (3,0), k = (5,0) normalise to (1,0) (max(5, eps) = 5); the
   * enclosures of 1/3 and 1/5 are not exact, yet the results are proven */
  dyadic_case(&c, KDA_FAMILY_KDA);
  c.p.T = 1;
  c.p.l2_mode = KDA_L2_GGML;
  c.q[0] = 3;
  c.k[0] = 5;
  run_mpfr(&c, NULL, &r);
  assert_vals(c.o, (const double[]){0.5, 1}, 2, "o (ggml)");
  assert_vals(c.ht, (const double[]){1, 2, 2, 2}, 4, "ht (ggml)");
  ck_assert_int_eq(r.method, KDA_CERT_PROVEN);
  tc_free(&c);
}
END_TEST

/* ==== 2. Against the float64 reference ==== */

/* A random problem: N = 3 with an empty middle sequence, h0, two checkpoints. */
static void random_case(tcase *c, int32_t family, int32_t gate, int32_t beta, int32_t l2,
                        int32_t head_map, int32_t layout, uint64_t seed) {
  memset(c, 0, sizeof *c);
  kda_problem_init(&c->p, 6, 2, 4, 3, 2);
  kda_problem *p = &c->p;
  p->N = 3;
  p->family = family;
  p->gate_mode = gate;
  p->beta_mode = beta;
  p->l2_mode = l2;
  p->head_map = head_map;
  p->state_layout = layout;
  p->has_A_log = gate == KDA_GATE_SOFTPLUS || (gate == KDA_GATE_LOWER_BOUND && (seed & 1));
  p->has_initial_state = 1;
  p->n_checkpoints = 2;
  p->lower_bound = -3.0;
  c->cu[0] = 0, c->cu[1] = 4, c->cu[2] = 4, c->cu[3] = 6;
  c->cp[0] = 1, c->cp[1] = 5;
  tc_alloc(c);
  tc_fill(c, seed);
}

/* |a - b| <= tol * max(1, max|b|). */
static void assert_close(const double *a, const double *b, size_t n, double tol,
                         const char *what, uint64_t seed) {
  double mag = 1.0;
  for (size_t i = 0; i < n; i++) mag = fmax(mag, fabs(b[i]));
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(isfinite(a[i]) && fabs(a[i] - b[i]) <= tol * mag,
                  "%s[%zu]: %.17g vs ref %.17g (seed %llu)", what, i, a[i], b[i],
                  (unsigned long long)seed);
}

static void compare_with_ref(tcase *c) {
  const kda_problem *p = &c->p;
  tcase d = *c;
  d.o = dalloc(n_v(p));
  d.ht = dalloc((size_t)p->N * n_slot(p));
  d.hc = dalloc((size_t)p->n_checkpoints * n_slot(p));
  kda_tensors_f64 t = tc_tensors(&d);
  char err[KDA_ERRLEN] = "";
  int st = kda_ref_forward_f64(p, &t, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "kda_ref_forward_f64: %s", err);
  kda_mpfr_report r;
  run_mpfr(c, NULL, &r);
  assert_close(c->o, d.o, n_v(p), 1e-12, "o", c->seed);
  assert_close(c->ht, d.ht, (size_t)p->N * n_slot(p), 1e-12, "ht", c->seed);
  assert_close(c->hc, d.hc, (size_t)p->n_checkpoints * n_slot(p), 1e-12, "hc", c->seed);
  /* the empty sequence: ht[1] = h0[1] exactly */
  assert_bits(c->ht + n_slot(p), c->h0 + n_slot(p), n_slot(p), "ht of the empty sequence",
              c->seed);
  free(d.o);
  free(d.ht);
  free(d.hc);
}

START_TEST(test_vs_ref_all_modes) {
  uint64_t seed = 1000;
  for (int32_t f = 0; f < 4; f++)
    for (int32_t gm = 0; gm < 3; gm++)
      for (int32_t bm = 0; bm < 3; bm++)
        for (int32_t l2 = 0; l2 < 3; l2++) {
          if (f >= KDA_FAMILY_DELTANET && gm > 0) continue; /* gate unused */
          tcase c;
          seed++;
          random_case(&c, f, gm, bm, l2, (int32_t)(seed % 2), (int32_t)((seed / 2) % 2), seed);
          compare_with_ref(&c);
          tc_free(&c);
        }
}
END_TEST

/* Gate tails: softplus far in both tails, sigmoid saturated, a full wipe (g = -inf). */
START_TEST(test_vs_ref_tails) {
  static const double gs[] = {-60.0, -20.0, 25.0, 60.0, 700.0, -700.0};
  for (int32_t gm = 0; gm < 3; gm++) {
    tcase c;
    random_case(&c, KDA_FAMILY_KDA, gm, KDA_BETA_LOGIT, KDA_L2_FLA, 0, 0, 77 + (uint64_t)gm);
    for (size_t i = 0; i < n_g(&c.p); i++)
      c.g[i] = gm == KDA_GATE_LOG ? (i % 7 == 3 ? -INFINITY : -fabs(gs[i % 6]) / 100.0)
                                  : gs[i % 6];
    compare_with_ref(&c);
    tc_free(&c);
  }
}
END_TEST

/* ==== 3. Bitwise invariants of correctly rounded results ==== */

START_TEST(test_invariants) {
  kda_mpfr_report r;
  /* KDA with g constant over channels == GDN with that g */
  tcase a, b;
  random_case(&a, KDA_FAMILY_KDA, KDA_GATE_SOFTPLUS, KDA_BETA_LOGIT, KDA_L2_FLA, 0, 0, 5);
  random_case(&b, KDA_FAMILY_GDN, KDA_GATE_SOFTPLUS, KDA_BETA_LOGIT, KDA_L2_FLA, 0, 0, 5);
  memcpy(b.A_log, a.A_log, (size_t)a.p.HV * sizeof(double));
  for (int64_t th = 0; th < a.p.T * a.p.HV; th++)
    for (int64_t i = 0; i < a.p.K; i++) a.g[th * a.p.K + i] = b.g[th];
  for (int64_t hv = 0; hv < a.p.HV; hv++)
    for (int64_t i = 0; i < a.p.K; i++) a.dt_bias[hv * a.p.K + i] = b.dt_bias[hv];
  memcpy(b.q, a.q, n_qk(&a.p) * sizeof(double));
  memcpy(b.k, a.k, n_qk(&a.p) * sizeof(double));
  memcpy(b.v, a.v, n_v(&a.p) * sizeof(double));
  memcpy(b.beta, a.beta, (size_t)(a.p.T * a.p.HV) * sizeof(double));
  memcpy(b.h0, a.h0, (size_t)a.p.N * n_slot(&a.p) * sizeof(double));
  run_mpfr(&a, NULL, &r);
  run_mpfr(&b, NULL, &r);
  assert_bits(a.o, b.o, n_v(&a.p), "o (kda const g vs gdn)", 5);
  assert_bits(a.ht, b.ht, (size_t)a.p.N * n_slot(&a.p), "ht (kda const g vs gdn)", 5);
  /* KDA with g = 0 == DeltaNet */
  for (size_t i = 0; i < n_g(&a.p); i++) a.g[i] = 0.0;
  a.p.gate_mode = KDA_GATE_LOG;
  b.p.family = KDA_FAMILY_DELTANET;
  b.p.gate_mode = KDA_GATE_LOG;
  run_mpfr(&a, NULL, &r);
  run_mpfr(&b, NULL, &r);
  assert_bits(a.o, b.o, n_v(&a.p), "o (kda g = 0 vs deltanet)", 5);
  assert_bits(a.hc, b.hc, 2 * n_slot(&a.p), "hc (kda g = 0 vs deltanet)", 5);
  tc_free(&b);
  /* VK == transposed KV */
  random_case(&b, KDA_FAMILY_KDA, KDA_GATE_LOWER_BOUND, KDA_BETA_LOGIT_NEG, KDA_L2_GGML, 1, 0,
              9);
  run_mpfr(&b, NULL, &r);
  tcase d = b;
  d.p.state_layout = KDA_STATE_VK;
  d.h0 = dalloc((size_t)b.p.N * n_slot(&b.p));
  d.o = dalloc(n_v(&b.p));
  d.ht = dalloc((size_t)b.p.N * n_slot(&b.p));
  d.hc = dalloc(2 * n_slot(&b.p));
  const int64_t K = b.p.K, V = b.p.V, slots = b.p.N * b.p.HV;
  for (int64_t s = 0; s < slots; s++)
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) d.h0[s * K * V + j * K + i] = b.h0[s * K * V + i * V + j];
  run_mpfr(&d, NULL, &r);
  assert_bits(d.o, b.o, n_v(&b.p), "o (vk vs kv)", 9);
  for (int64_t s = 0; s < slots; s++)
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++)
        ck_assert(memcmp(&d.ht[s * K * V + j * K + i], &b.ht[s * K * V + i * V + j],
                         sizeof(double)) == 0);
  free(d.h0);
  free(d.o);
  free(d.ht);
  free(d.hc);
  /* sequence 2 of the varlen call == a call of its own (tokens 4, 5; checkpoint 5 -> 1) */
  tcase e;
  random_case(&e, KDA_FAMILY_KDA, KDA_GATE_LOWER_BOUND, KDA_BETA_LOGIT_NEG, KDA_L2_GGML, 1, 0,
              9);
  e.p.N = 1;
  e.p.T = 2;
  e.p.n_checkpoints = 1;
  const size_t qo = 4 * (size_t)(e.p.H * e.p.K), vo = 4 * (size_t)(e.p.HV * e.p.V);
  const size_t go = 4 * (size_t)(e.p.HV * e.p.K), bo = 4 * (size_t)e.p.HV;
  memmove(e.q, e.q + qo, 2 * (size_t)(e.p.H * e.p.K) * sizeof(double));
  memmove(e.k, e.k + qo, 2 * (size_t)(e.p.H * e.p.K) * sizeof(double));
  memmove(e.v, e.v + vo, 2 * (size_t)(e.p.HV * e.p.V) * sizeof(double));
  memmove(e.g, e.g + go, 2 * (size_t)(e.p.HV * e.p.K) * sizeof(double));
  memmove(e.beta, e.beta + bo, 2 * (size_t)e.p.HV * sizeof(double));
  memmove(e.h0, e.h0 + 2 * n_slot(&e.p), n_slot(&e.p) * sizeof(double));
  e.cp[0] = 1;
  run_mpfr(&e, NULL, &r);
  assert_bits(e.o, b.o + vo, 2 * (size_t)(e.p.HV * e.p.V), "o (varlen vs alone)", 9);
  assert_bits(e.ht, b.ht + 2 * n_slot(&b.p), n_slot(&b.p), "ht (varlen vs alone)", 9);
  assert_bits(e.hc, b.hc + n_slot(&b.p), n_slot(&b.p), "hc (varlen vs alone)", 9);
  tc_free(&e);
  tc_free(&b);
  tc_free(&a);
}
END_TEST

/* ==== 4. PROVEN vs AGREED ==== */

START_TEST(test_proven_non_expansive) {
  tcase c;
  random_case(&c, KDA_FAMILY_KDA, KDA_GATE_SOFTPLUS, KDA_BETA_LOGIT, KDA_L2_FLA, 0, 1, 21);
  kda_mpfr_report r;
  run_mpfr(&c, NULL, &r);
  ck_assert_int_eq(r.method, KDA_CERT_PROVEN);
  ck_assert_int_eq(r.expansive, 0);
  ck_assert(r.max_growth <= 1.0);
  ck_assert_int_eq(r.n_proven, r.n_values);
  ck_assert_int_eq(r.prec_check, 128); /* proven at the first two precisions */
  ck_assert_int_eq(r.ziv_rounds, 2);
  tc_free(&c);
}
END_TEST

/* Strongly expansive: beta = 4 on unit keys gives the eigenvalue 1 - 4 = -3 along k at every
 * step, so the bound grows like 3^T while the state grows like about 2^T; 600 steps cannot be
 * proven within 256 bits, the two precisions still agree (AGREED), and require_proof then fails
 * with KDA_ENOTCERT.  With the default budget the same case is proven (at about 450 bits). */
static void expansive_case(tcase *c, int64_t T) {
  memset(c, 0, sizeof *c);
  kda_problem_init(&c->p, T, 1, 1, 2, 2);
  c->p.family = KDA_FAMILY_DELTANET;
  c->p.l2_mode = KDA_L2_FLA;
  tc_alloc(c);
  tc_fill(c, 31);
  for (int64_t t = 0; t < T; t++) c->beta[t] = 4.0;
}

START_TEST(test_agreed_expansive) {
  tcase c;
  expansive_case(&c, 600);
  kda_mpfr_options o;
  kda_mpfr_options_init(&o);
  o.prec_max = 256;
  kda_mpfr_report r;
  run_mpfr(&c, &o, &r);
  ck_assert_msg(r.method == KDA_CERT_AGREED, "method %s", kda_mpfr_method_name(r.method));
  ck_assert_int_eq(r.expansive, 1);
  ck_assert(r.max_growth > 2.9);
  ck_assert(r.n_proven < r.n_values);
  /* require_proof: KDA_ENOTCERT naming an unproven value, MPFR state untouched */
  o.require_proof = 1;
  char err[KDA_ERRLEN] = "";
  kda_tensors_f64 t = tc_tensors(&c);
  int st = kda_mpfr_forward(&c.p, &t, &o, &r, err, sizeof err);
  ck_assert_int_eq(st, KDA_ENOTCERT);
  ck_assert_msg(strstr(err, "could not be proven") != NULL, "%s", err);
  ck_assert_int_eq(r.method, KDA_CERT_NONE);
  run_mpfr(&c, NULL, &r);
  ck_assert_int_eq(r.method, KDA_CERT_PROVEN);
  ck_assert(r.prec_used > 256 && r.expansive == 1);
  tc_free(&c);
}
END_TEST

/* The bound is valid for expansive inputs too: mildly expansive ones are proven. */
START_TEST(test_proven_mildly_expansive) {
  tcase c;
  random_case(&c, KDA_FAMILY_KDA, KDA_GATE_LOG, KDA_BETA_PROB, KDA_L2_OFF, 0, 0, 41);
  for (size_t i = 0; i < n_g(&c.p); i++) c.g[i] = 0.25; /* a = e^0.25 > 1 */
  kda_mpfr_report r;
  run_mpfr(&c, NULL, &r);
  ck_assert_int_eq(r.expansive, 1);
  ck_assert(r.max_growth > 1.28);
  ck_assert_int_eq(r.method, KDA_CERT_PROVEN);
  tc_free(&c);
}
END_TEST

/* Soundness of the bound: evaluations at low precisions (53 to 80 bits, where the error is
 * comparable to binary64's own spacing) may prove fewer values, but every value they prove
 * must equal the certified one.  An optimistic bound would show up here as a mismatch. */
static int64_t proven_at_low_precision(tcase *c, mpfr_prec_t prec, const double *truth,
                                       int64_t n) {
  kda_mpfr_result res;
  memset(&res, 0, sizeof res);
  res.val = dalloc((size_t)n);
  res.proven = calloc((size_t)n + 1, 1);
  ck_assert_ptr_nonnull(res.proven);
  const int64_t cu1[2] = {0, c->p.T};
  kda_tensors_f64 t = tc_tensors(c);
  char err[KDA_ERRLEN] = "";
  const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
  mpfr_set_emin(mpfr_get_emin_min());
  mpfr_set_emax(mpfr_get_emax_max());
  const int st = kda_mpfr_run(&c->p, &t, c->p.N > 1 ? c->cu : cu1, prec, &res, err, sizeof err);
  mpfr_set_emin(emin);
  mpfr_set_emax(emax);
  ck_assert_msg(st == KDA_OK, "kda_mpfr_run: %s", err);
  int64_t np = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!res.proven[i]) continue;
    np++;
    ck_assert_msg(kda_mpfr_bits(res.val[i]) == kda_mpfr_bits(truth[i]),
                  "value %lld proven at %ld bits as %a, certified %a (seed %llu)", (long long)i,
                  (long)prec, res.val[i], truth[i], (unsigned long long)c->seed);
  }
  ck_assert_int_eq(np + res.n_unproven, n);
  free(res.val);
  free(res.proven);
  return np;
}

START_TEST(test_bound_sound_at_low_precision) {
  static const mpfr_prec_t precs[] = {53, 56, 60, 64, 72, 80};
  uint64_t seed = 5000;
  int64_t proven = 0, total = 0;
  for (int32_t f = 0; f < 4; f++)
    for (int32_t gm = 0; gm < 3; gm++)
      for (int32_t bm = 0; bm < 3; bm++)
        for (int32_t l2 = 0; l2 < 3; l2++) {
          if (f >= KDA_FAMILY_DELTANET && gm > 0) continue;
          tcase c;
          seed++;
          random_case(&c, f, gm, bm, l2, (int32_t)(seed % 2), (int32_t)((seed / 2) % 2), seed);
          kda_mpfr_report r;
          run_mpfr(&c, NULL, &r);
          const int64_t n = r.n_values, nO = (int64_t)n_v(&c.p), nS = 3 * (int64_t)n_slot(&c.p);
          double *truth = dalloc((size_t)n);
          memcpy(truth, c.o, (size_t)nO * sizeof(double));
          memcpy(truth + nO, c.ht, (size_t)nS * sizeof(double));
          memcpy(truth + nO + nS, c.hc, (size_t)(n - nO - nS) * sizeof(double));
          for (size_t m = 0; m < sizeof precs / sizeof precs[0]; m++) {
            proven += proven_at_low_precision(&c, precs[m], truth, n);
            total += n;
          }
          free(truth);
          tc_free(&c);
        }
  /* the test is not vacuous: most low-precision values are proven (and all were right) */
  ck_assert_msg(proven > total / 3, "only %lld of %lld proven", (long long)proven,
                (long long)total);
}
END_TEST

/* ==== 5. Independent of prec0 ==== */

START_TEST(test_prec0_independent) {
  static const int64_t p0[] = {64, 128, 256};
  tcase c[3];
  for (int m = 0; m < 3; m++) {
    random_case(&c[m], KDA_FAMILY_KDA, KDA_GATE_LOWER_BOUND, KDA_BETA_LOGIT, KDA_L2_FLA, 1, 1,
                61);
    kda_mpfr_options o;
    kda_mpfr_options_init(&o);
    o.prec0 = p0[m];
    kda_mpfr_report r;
    run_mpfr(&c[m], &o, &r);
    ck_assert_int_eq(r.method, KDA_CERT_PROVEN);
    ck_assert(r.prec_check >= p0[m]);
  }
  for (int m = 1; m < 3; m++) {
    assert_bits(c[m].o, c[0].o, n_v(&c[0].p), "o across prec0", 61);
    assert_bits(c[m].ht, c[0].ht, 3 * n_slot(&c[0].p), "ht across prec0", 61);
    assert_bits(c[m].hc, c[0].hc, 2 * n_slot(&c[0].p), "hc across prec0", 61);
  }
  for (int m = 0; m < 3; m++) tc_free(&c[m]);
}
END_TEST

/* ==== 6. MPFR's global state ==== */

typedef struct mpfr_globals {
  mpfr_exp_t emin, emax;
  mpfr_prec_t prec;
  mpfr_rnd_t rnd;
  mpfr_flags_t flags;
} mpfr_globals;

static mpfr_globals globals_now(void) {
  mpfr_globals g = {mpfr_get_emin(), mpfr_get_emax(), mpfr_get_default_prec(),
                    mpfr_get_default_rounding_mode(), mpfr_flags_save()};
  return g;
}

static void assert_globals(const mpfr_globals *want, const char *after) {
  const mpfr_globals now = globals_now();
  ck_assert_msg(now.emin == want->emin && now.emax == want->emax, "%s: exponent range changed",
                after);
  ck_assert_msg(now.prec == want->prec && now.rnd == want->rnd,
                "%s: default precision or rounding changed", after);
  ck_assert_msg(now.flags == want->flags, "%s: flags changed (%x -> %x)", after,
                (unsigned)want->flags, (unsigned)now.flags);
}

START_TEST(test_mpfr_state_restored) {
  const mpfr_globals orig = globals_now();
  mpfr_set_emin(-5000);
  mpfr_set_emax(6000);
  mpfr_set_default_prec(77);
  mpfr_set_default_rounding_mode(MPFR_RNDZ);
  mpfr_clear_flags();
  mpfr_set_inexflag();
  mpfr_set_erangeflag();
  const mpfr_globals want = globals_now();
  char err[KDA_ERRLEN];
  kda_mpfr_report r;
  tcase c;
  random_case(&c, KDA_FAMILY_KDA, KDA_GATE_SOFTPLUS, KDA_BETA_LOGIT, KDA_L2_FLA, 0, 0, 71);
  kda_tensors_f64 t = tc_tensors(&c);
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_OK);
  assert_globals(&want, "success");
  mpfr_clear_flags();
  const mpfr_globals none = globals_now();
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_OK);
  assert_globals(&none, "success with no flags set");
  mpfr_set_underflow();
  mpfr_set_overflow();
  mpfr_set_nanflag();
  mpfr_set_divby0();
  const mpfr_globals all = globals_now();
  c.p.family = 7;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_EINVAL);
  assert_globals(&all, "KDA_EINVAL");
  c.p.family = KDA_FAMILY_KDA;
  c.q[3] = NAN;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_ENONFINITE);
  assert_globals(&all, "KDA_ENONFINITE");
  tc_free(&c);
  expansive_case(&c, 600);
  kda_mpfr_options o;
  kda_mpfr_options_init(&o);
  o.prec_max = 256;
  o.require_proof = 1;
  t = tc_tensors(&c);
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, &o, &r, err, sizeof err), KDA_ENOTCERT);
  assert_globals(&all, "KDA_ENOTCERT");
  tc_free(&c);
  mpfr_set_emin(orig.emin);
  mpfr_set_emax(orig.emax);
  mpfr_set_default_prec(orig.prec);
  mpfr_set_default_rounding_mode(orig.rnd);
  mpfr_flags_restore(orig.flags, MPFR_FLAGS_ALL);
}
END_TEST

/* ==== 7. Error returns ==== */

/* (1+2^-40)^3 - (1+3*2^-40) = 3*2^-80 + 2^-120 through the state of the linear family: at
 * 64 bits the state loses it (o[1] = 0), at 96 bits keeps 3*2^-80, from 121 bits it is exact. */
static void cancellation_case(tcase *c) {
  memset(c, 0, sizeof *c);
  kda_problem_init(&c->p, 2, 1, 1, 1, 1);
  c->p.family = KDA_FAMILY_LINEAR;
  c->p.scale = 1.0;
  tc_alloc(c);
  const double e = 1.0 + 0x1p-40;
  c->q[0] = c->q[1] = 1.0;
  c->k[0] = e, c->k[1] = 1.0;
  c->v[0] = e, c->v[1] = -(1.0 + 3 * 0x1p-40);
  c->beta[0] = e, c->beta[1] = 1.0;
}

START_TEST(test_enotcert_and_exact_cancellation) {
  tcase c;
  cancellation_case(&c);
  kda_mpfr_options o;
  kda_mpfr_options_init(&o);
  o.prec0 = 64;
  o.prec_max = 96;
  kda_mpfr_report r;
  char err[KDA_ERRLEN] = "";
  kda_tensors_f64 t = tc_tensors(&c);
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, &o, &r, err, sizeof err), KDA_ENOTCERT);
  ck_assert_msg(strstr(err, "o[t=1,hv=0,j=0] did not settle") != NULL, "%s", err);
  ck_assert_int_eq(r.method, KDA_CERT_NONE);
  ck_assert_int_eq(r.ziv_rounds, 2);
  /* with the default budget it is proven, and exact */
  run_mpfr(&c, NULL, &r);
  ck_assert_int_eq(r.method, KDA_CERT_PROVEN);
  ck_assert(c.o[1] == 3 * 0x1p-80 + 0x1p-120);
  ck_assert(c.o[0] == 1.0 + 3 * 0x1p-40);
  ck_assert(c.ht[0] == c.o[1]);
  tc_free(&c);
}
END_TEST

START_TEST(test_errors) {
  tcase c;
  random_case(&c, KDA_FAMILY_KDA, KDA_GATE_SOFTPLUS, KDA_BETA_LOGIT, KDA_L2_FLA, 0, 0, 81);
  kda_tensors_f64 t = tc_tensors(&c);
  kda_mpfr_options o;
  kda_mpfr_report r;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_mpfr_forward(NULL, &t, NULL, &r, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(kda_mpfr_forward(&c.p, NULL, NULL, &r, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(r.method, KDA_CERT_NONE);
  /* options */
  kda_mpfr_options_init(&o);
  o.prec0 = 32;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, &o, &r, err, sizeof err), KDA_EINVAL);
  kda_mpfr_options_init(&o);
  o.prec_max = o.prec0;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, &o, &r, err, sizeof err), KDA_EINVAL);
  ck_assert_msg(strstr(err, "prec_max") != NULL, "%s", err);
  kda_mpfr_options_init(&o);
  o.reserved = 1;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, &o, &r, err, sizeof err), KDA_EINVAL);
  o.reserved = 0;
  o.require_proof = 2;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, &o, &r, err, sizeof err), KDA_EINVAL);
  /* buffers */
  kda_tensors_f64 u = t;
  u.o = NULL;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &u, NULL, &r, err, sizeof err), KDA_EINVAL);
  ck_assert_msg(strstr(err, "buffer o") != NULL, "%s", err);
  u = t;
  u.dt_bias = NULL;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &u, NULL, &r, err, sizeof err), KDA_EINVAL);
  u = t;
  u.hc = NULL;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &u, NULL, &r, err, sizeof err), KDA_EINVAL);
  u = t;
  u.cu_seqlens = NULL; /* N = 3 needs it */
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &u, NULL, &r, err, sizeof err), KDA_EINVAL);
  /* problem and index */
  c.p.gate_mode = 9;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_EINVAL);
  c.p.gate_mode = KDA_GATE_SOFTPLUS;
  c.cu[1] = 7;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_EINVAL);
  c.cu[1] = 4;
  c.cp[1] = 1;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_EINVAL);
  c.cp[1] = 5;
  /* non-finite inputs (SPEC.md §6.2), named in the message */
  c.k[2 * 3 + 1] = NAN; /* t = 1, h = 0, i = 1 (H = 2, K = 3) */
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_ENONFINITE);
  ck_assert_msg(strstr(err, "k[t=1,h=0,i=1]") != NULL, "%s", err);
  c.k[2 * 3 + 1] = 0.5;
  c.g[5] = -INFINITY; /* not allowed in the softplus mode */
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_ENONFINITE);
  c.p.gate_mode = KDA_GATE_LOG; /* allowed in the log mode ... */
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_OK);
  c.g[5] = INFINITY; /* ... but +inf never */
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_ENONFINITE);
  c.g[5] = -1.0;
  c.h0[7] = INFINITY;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_ENONFINITE);
  ck_assert_msg(strstr(err, "h0[") != NULL, "%s", err);
  c.h0[7] = 0.0;
  /* a decay factor beyond the exponent window: exp(1e300) */
  c.g[5] = 1e300;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err), KDA_EUNSUPPORTED);
  c.g[5] = -1.0;
  /* NULL err and NULL report are fine */
  ck_assert_int_eq(kda_mpfr_forward(NULL, &t, NULL, NULL, NULL, 0), KDA_EINVAL);
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &t, NULL, NULL, NULL, 0), KDA_OK);
  ck_assert_str_eq(kda_mpfr_method_name(KDA_CERT_AGREED), "agreed");
  ck_assert_ptr_null(kda_mpfr_method_name(9));
  tc_free(&c);
}
END_TEST

/* T = 0: no outputs but the states; nothing to compute, still certified (exact). */
START_TEST(test_no_tokens) {
  tcase c;
  memset(&c, 0, sizeof c);
  kda_problem_init(&c.p, 0, 1, 2, 2, 3);
  c.p.has_initial_state = 1;
  tc_alloc(&c);
  tc_fill(&c, 91);
  kda_mpfr_report r;
  run_mpfr(&c, NULL, &r);
  assert_bits(c.ht, c.h0, n_slot(&c.p), "ht = h0", 91);
  ck_assert_int_eq(r.method, KDA_CERT_PROVEN);
  ck_assert(r.max_growth == 0.0);
  tc_free(&c);
}
END_TEST

/* ==== 8. Binary64 rounding ==== */

/* MPFR's documented emulation: round to 53 bits, then check_range and subnormalize in the
 * binary64 exponent range [-1073, 1024] (the ternary value avoids double rounding). */
static double mpfr_emulated(mpfr_srcptr x) {
  const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
  mpfr_t d;
  mpfr_init2(d, 53);
  int inex = mpfr_set(d, x, MPFR_RNDN);
  mpfr_set_emin(-1073);
  mpfr_set_emax(1024);
  inex = mpfr_check_range(d, inex, MPFR_RNDN);
  mpfr_subnormalize(d, inex, MPFR_RNDN);
  const double r = mpfr_get_d(d, MPFR_RNDN);
  mpfr_set_emin(emin);
  mpfr_set_emax(emax);
  mpfr_clear(d);
  return r == 0.0 ? 0.0 : r;
}

START_TEST(test_round_binary64) {
  mpfr_t x, tmp;
  mpfr_inits2(200, x, tmp, (mpfr_ptr)0);
  uint64_t s = 12345;
  long checked = 0;
  for (int it = 0; it < 20000; it++) {
    /* a random double d in an interesting binade, nudged to near a rounding boundary */
    const int zone = it % 4;
    const long e = zone == 0 ? -1080 + (long)(lcg_next(&s) % 70)
                   : zone == 1 ? 1010 + (long)(lcg_next(&s) % 20)
                               : -60 + (long)(lcg_next(&s) % 120);
    mpfr_set_ui_2exp(x, lcg_next(&s) >> 11 | 1, e - 53, MPFR_RNDN); /* 53-bit significand */
    if (lcg_next(&s) & 1) mpfr_neg(x, x, MPFR_RNDN);
    const int kind = (int)(lcg_next(&s) % 5);
    if (kind > 0) { /* a half-quantum offset at binary64's local quantum, +- a tiny bit */
      const mpfr_exp_t ex = mpfr_get_exp(x);
      const long q = (ex >= -1021 ? (long)ex : -1021) - 53;
      mpfr_set_ui_2exp(tmp, 1, q - 1, MPFR_RNDN);
      mpfr_add(x, x, tmp, MPFR_RNDN);
      if (kind >= 2) {
        mpfr_set_ui_2exp(tmp, 1, q - 1 - 1 - (long)(lcg_next(&s) % 120), MPFR_RNDN);
        if (kind == 2) mpfr_neg(tmp, tmp, MPFR_RNDN);
        mpfr_add(x, x, tmp, MPFR_RNDN);
      }
    }
    const double a = kda_mpfr_round_binary64(x, tmp), b = mpfr_emulated(x);
    if (memcmp(&a, &b, sizeof a) != 0) {
      char buf[128];
      mpfr_snprintf(buf, sizeof buf, "%Ra", x);
      ck_abort_msg("x = %s: %a vs MPFR %a", buf, a, b);
    }
    mpfr_set_prec(tmp, 200);
    checked++;
  }
  ck_assert_int_eq(checked, 20000);
  /* fixed points: the smallest subnormal's tie, overflow threshold, zero's sign */
  mpfr_set_ui_2exp(x, 1, -1075, MPFR_RNDN);
  ck_assert(kda_mpfr_round_binary64(x, tmp) == 0.0);
  mpfr_set_ui_2exp(x, 3, -1076, MPFR_RNDN);
  ck_assert(kda_mpfr_round_binary64(x, tmp) == 0x1p-1074);
  mpfr_set_ui_2exp(x, 3, -1075, MPFR_RNDN); /* 1.5 * 2^-1074: tie to even -> 2^-1073 */
  ck_assert(kda_mpfr_round_binary64(x, tmp) == 0x1p-1073);
  mpfr_set_si_2exp(x, -1, -1100, MPFR_RNDN);
  const double z = kda_mpfr_round_binary64(x, tmp);
  ck_assert(z == 0.0 && !signbit(z));
  mpfr_set_d(x, 0x1.fffffffffffffp1023, MPFR_RNDN);
  mpfr_set_ui_2exp(tmp, 1, 970, MPFR_RNDN); /* DBL_MAX + half an ulp: overflows */
  mpfr_add(x, x, tmp, MPFR_RNDN);
  mpfr_set_prec(tmp, 200);
  ck_assert(isinf(kda_mpfr_round_binary64(x, tmp)));
  mpfr_clears(x, tmp, (mpfr_ptr)0);
}
END_TEST

static Suite *mpfr_suite(void) {
  Suite *s = suite_create("mpfr");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_dyadic_families);
  tcase_add_test(tc, test_dyadic_zero_agreed_under_budget);
  tcase_add_test(tc, test_dyadic_variants);
  tcase_add_test(tc, test_vs_ref_all_modes);
  tcase_add_test(tc, test_vs_ref_tails);
  tcase_add_test(tc, test_invariants);
  tcase_add_test(tc, test_proven_non_expansive);
  tcase_add_test(tc, test_agreed_expansive);
  tcase_add_test(tc, test_proven_mildly_expansive);
  tcase_add_test(tc, test_bound_sound_at_low_precision);
  tcase_add_test(tc, test_prec0_independent);
  tcase_add_test(tc, test_mpfr_state_restored);
  tcase_add_test(tc, test_enotcert_and_exact_cancellation);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_no_tokens);
  tcase_add_test(tc, test_round_binary64);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  const int status = kda_test_main(mpfr_suite(), CK_NORMAL, CK_FORK_GETENV);
  mpfr_free_cache();
  return status;
}

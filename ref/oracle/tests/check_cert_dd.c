/* check_cert_dd.c: the fast certifier's double-double decay factors against MPFR (SPEC.md
 * §8.12, "Decay factors in double-double").
 * SPDX-License-Identifier: MIT
 *
 * Every enclosure of ref/oracle/kda_cert_dd.c (exp with and without an argument error, softplus in
 * both forms, the log and softplus decay factors with and without A_log and dt_bias) is
 * compared with a 400-bit MPFR enclosure of the exact value built with directed roundings:
 * the MPFR interval must lie inside [h + l - e, h + l + e], hi must bound it from above, and
 * the width e must be small (what keeps the certifier's bound tight).  The arguments are
 * random over the whole proven range (log-uniform magnitudes, both signs, dd arguments with
 * low words) plus the edge cases: 0, tiny, the ends of the range, ties of the reduction, the
 * gate values of golden/L1 gate-values-* and softplus-tails; arguments outside the range must
 * be refused (the caller then uses MPFR).  The L2 normalisation (fla, ggml, off; q with its
 * scale, k with the lower bound on its squared norm) likewise against a 500-bit evaluation,
 * on doubles, float32 and bf16-like vectors, wide exponents, zeros and a dominating element.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <mpfr.h>

#include "kda_cert_impl.h"
#include "kda_mpfr_impl.h"
#include "kda_test.h"

#define P 400 /* the reference's precision */

static uint64_t rng = 0x243F6A8885A308D3u;
static double unif(void) { /* [0, 1) */
  rng += 0x9E3779B97F4A7C15u;
  uint64_t z = rng;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

/* A random double of magnitude 2^U(lo2, hi2), either sign. */
static double logu(double lo2, double hi2) {
  const double m = exp2(lo2 + (hi2 - lo2) * unif());
  return unif() < 0.5 ? -m : m;
}

static kda_cert_dd D;

/* Asserts [lo, hi] (exact bounds at P bits) inside [h + l - e, h + l + e] and hi <= up. */
static void assert_encloses(kda_cert_dv v, mpfr_srcptr lo, mpfr_srcptr hi, double up,
                            const char *what, double arg) {
  mpfr_t x, t;
  mpfr_inits2(2400, x, t, (mpfr_ptr)0);
  kda_mpfr_exact_sum(x, v.h, v.l);
  mpfr_set_prec(t, 2400);
  mpfr_sub_d(t, x, v.e, MPFR_RNDU);
  ck_assert_msg(mpfr_lessequal_p(t, lo), "%s(%a): the low end is not enclosed (e = %a)", what,
                arg, v.e);
  mpfr_add_d(t, x, v.e, MPFR_RNDD);
  ck_assert_msg(mpfr_greaterequal_p(t, hi), "%s(%a): the high end is not enclosed (e = %a)",
                what, arg, v.e);
  if (!isnan(up)) ck_assert_msg(mpfr_cmp_d(hi, up) <= 0 && mpfr_cmp_d(x, up) <= 0,
                                "%s(%a): hi = %a is not an upper bound", what, arg, up);
  mpfr_clears(x, t, (mpfr_ptr)0);
}

/* e <= rel |hi| + abs: the enclosure is tight. */
static void assert_width(kda_cert_dv v, mpfr_srcptr hi, double rel, double abs_, const char *what,
                         double arg) {
  const double m = fabs(mpfr_get_d(hi, MPFR_RNDU));
  ck_assert_msg(v.e <= rel * m + abs_, "%s(%a): width %a against %a", what, arg, v.e, m);
}

/* ---- exp. */
static int check_exp(double h, double l, double xe) {
  kda_cert_dv v;
  if (kda_cert_dd_exp(&D, (kda_cert_dv){h, l, xe}, &v)) {
    fprintf(stderr, "exp(%a + %a, %a) refused\n", h, l, xe);
    return 0;
  }
  mpfr_t x, a, lo, hi;
  mpfr_inits2(P, a, lo, hi, (mpfr_ptr)0);
  mpfr_init2(x, 2400);
  kda_mpfr_exact_sum(x, h, l);
  mpfr_set_prec(a, 2400);
  mpfr_sub_d(a, x, xe, MPFR_RNDD);
  mpfr_exp(lo, a, MPFR_RNDD);
  mpfr_add_d(a, x, xe, MPFR_RNDU);
  mpfr_exp(hi, a, MPFR_RNDU);
  assert_encloses(v, lo, hi, NAN, "exp", h);
  assert_width(v, hi, 0x1p-98 + 3 * xe, 0, "exp", h);
  mpfr_clears(x, a, lo, hi, (mpfr_ptr)0);
  return 1;
}

START_TEST(test_exp_against_mpfr) {
  static const double edge[] = {0.0,    -0.0,     0x1p-300, -0x1p-300, 0x1p-60, -0x1p-24,
                                -1.0,   1.0,      -5.0,     -20.0,     -88.0,   88.0,
                                -540.0, 540.0,    0.5,      -0.5,      0x1.62e42fefa39efp-7,
                                -0x1.62e42fefa39efp-7, 0x1.62e42fefa39efp-1, 709.0 / 2};
  int n = 0, tried = 0;
  for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) {
    n += check_exp(edge[i], 0.0, 0.0);
    tried++;
  }
  ck_assert_int_eq(n, tried); /* every edge case lies in the proven range */
  for (int i = 0; i < 20000; i++) {
    const double h = logu(-299.0, log2(540.0));
    const double l = i % 2 ? ldexp(unif() - 0.5, ilogb(h) - 53) : 0.0; /* a dd argument */
    const double xe = i % 3 == 0 ? 0.0 : ldexp(unif(), -(int)(60 + 60 * unif()));
    ck_assert(check_exp(h, l, xe));
  }
  /* out of the proven range: refused (MPFR does these) */
  static const double out[] = {-1000.0, 541.0, 0x1p-301, -0x1p-1074, INFINITY, -INFINITY, NAN};
  for (size_t i = 0; i < sizeof out / sizeof *out; i++) {
    kda_cert_dv v;
    ck_assert_msg(kda_cert_dd_exp(&D, (kda_cert_dv){out[i], 0.0, 0.0}, &v) == 1, "%a", out[i]);
  }
  kda_cert_dv v;
  ck_assert_int_eq(kda_cert_dd_exp(&D, (kda_cert_dv){-1.0, 0.0, 0.5}, &v), 1); /* wide */
}
END_TEST

/* ---- softplus(g + b), both forms (SPEC.md §8.3). */

/* [lo, hi] of softplus(g + b) by directed roundings at P bits. */
static void softplus_ref(double g, double b, mpfr_ptr lo, mpfr_ptr hi) {
  mpfr_t y, t;
  mpfr_init2(y, 2400);
  mpfr_init2(t, P);
  kda_mpfr_exact_sum(y, g, b);
  const int pos = mpfr_sgn(y) > 0;
  for (int up = 0; up < 2; up++) {
    const mpfr_rnd_t r = up ? MPFR_RNDU : MPFR_RNDD;
    mpfr_ptr o = up ? hi : lo;
    if (pos) mpfr_neg(y, y, MPFR_RNDN);
    mpfr_exp(t, y, r);
    if (pos) mpfr_neg(y, y, MPFR_RNDN);
    mpfr_log1p(o, t, r);
    if (pos) mpfr_add(o, o, y, r);
  }
  mpfr_clears(y, t, (mpfr_ptr)0);
}

static int check_softplus(double g, double b) {
  kda_cert_dv v;
  if (kda_cert_dd_softplus(&D, g, b, &v)) {
    fprintf(stderr, "softplus(%a + %a) refused\n", g, b);
    return 0;
  }
  mpfr_t lo, hi;
  mpfr_inits2(P, lo, hi, (mpfr_ptr)0);
  softplus_ref(g, b, lo, hi);
  assert_encloses(v, lo, hi, NAN, "softplus", g);
  assert_width(v, hi, 0x1p-98, 0x1p-97, "softplus", g);
  mpfr_clears(lo, hi, (mpfr_ptr)0);
  return 1;
}

START_TEST(test_softplus_against_mpfr) {
  int n = 0;
  for (int y = -100; y <= 88; y++) { /* softplus-tails */
    n += check_softplus((double)y, 0.0);
  }
  ck_assert_int_eq(n, 189);
  static const double edge[][2] = {{0.0, 0.0}, {0x1p-60, 0.0}, {-0x1p-60, 0.0}, {1.0, -1.0},
                                   {0.1, 0x1p-40}, {-200.0, 0.0}, {500.0, 0.0}, {-3.0, 1.5}};
  for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
    ck_assert(check_softplus(edge[i][0], edge[i][1]));
  for (int i = 0; i < 5000; i++) {
    const double g = logu(-60.0, log2(200.0)), b = i % 2 ? logu(-30.0, 3.0) : 0.0;
    ck_assert(check_softplus(g, b));
  }
  kda_cert_dv v;
  ck_assert_int_eq(kda_cert_dd_softplus(&D, -1000.0, 0.0, &v), 1);
  ck_assert_int_eq(kda_cert_dd_softplus(&D, 1e300, 0.0, &v), 1);
}
END_TEST

/* ---- The decay factors. */

/* [lo, hi] of exp(g_eff) by directed roundings: a decreases in E and in softplus. */
static void factor_ref(const kda_problem *p, double g, const double *A, const double *b,
                       mpfr_ptr lo, mpfr_ptr hi) {
  mpfr_t s0, s1, E, t;
  mpfr_inits2(P, s0, s1, E, t, (mpfr_ptr)0);
  if (p->gate_mode == KDA_GATE_LOG) {
    mpfr_set_d(t, g, MPFR_RNDN);
    mpfr_exp(lo, t, MPFR_RNDD);
    mpfr_exp(hi, t, MPFR_RNDU);
  } else {
    softplus_ref(g, b ? *b : 0.0, s0, s1);
    for (int up = 0; up < 2; up++) { /* the low end from the high softplus and E */
      mpfr_set_d(t, A ? *A : 0.0, MPFR_RNDN);
      if (A) mpfr_exp(E, t, up ? MPFR_RNDD : MPFR_RNDU);
      else mpfr_set_ui(E, 1, MPFR_RNDN);
      mpfr_mul(t, E, up ? s0 : s1, up ? MPFR_RNDD : MPFR_RNDU);
      mpfr_neg(t, t, MPFR_RNDN);
      mpfr_exp(up ? hi : lo, t, up ? MPFR_RNDU : MPFR_RNDD);
    }
  }
  mpfr_clears(s0, s1, E, t, (mpfr_ptr)0);
}

static int check_factor(const kda_problem *p, double g, const double *A, const double *b) {
  kda_cert_dv v;
  double hi_bound;
  int le1;
  if (kda_cert_dd_gate(&D, p, g, A, b, &v, &hi_bound, &le1)) return 0;
  mpfr_t lo, hi;
  mpfr_inits2(P, lo, hi, (mpfr_ptr)0);
  factor_ref(p, g, A, b, lo, hi);
  assert_encloses(v, lo, hi, hi_bound, "gate", g);
  /* a dd g_eff carries an absolute error of order 2^-100 |g_eff|: the relative width of a */
  const double E = A ? exp(*A) : 1.0, ga = fabs(log(mpfr_get_d(hi, MPFR_RNDN)));
  assert_width(v, hi, 0x1p-97 * (1.0 + E) * (ga > 1.0 ? ga : 1.0), 0, "gate", g);
  if (le1) ck_assert_msg(mpfr_cmp_ui(hi, 1) <= 0, "gate(%a): a <= 1 claimed", g);
  mpfr_clears(lo, hi, (mpfr_ptr)0);
  return 1;
}

START_TEST(test_factors_against_mpfr) {
  kda_problem lg = {0}, sp = {0};
  lg.gate_mode = KDA_GATE_LOG;
  sp.gate_mode = KDA_GATE_SOFTPLUS;
  /* gate-values-*: -1000 and -inf are MPFR's (out of the proven range) */
  static const double gv[] = {0.0, -0x1p-24, -1.0, -5.0, -20.0, -88.0};
  for (size_t i = 0; i < sizeof gv / sizeof *gv; i++) ck_assert(check_factor(&lg, gv[i], NULL, NULL));
  ck_assert(!check_factor(&lg, -1000.0, NULL, NULL));
  ck_assert(!check_factor(&lg, -INFINITY, NULL, NULL));
  ck_assert(check_factor(&lg, 3.0, NULL, NULL)); /* expansive: a > 1, not claimed <= 1 */
  int n = 0;
  for (int i = 0; i < 4000; i++) {
    const double g = logu(-40.0, 4.0), A = 3.0 * (2.0 * unif() - 1.0), b = logu(-20.0, 2.0);
    n += check_factor(&lg, -fabs(g) * 20.0, NULL, NULL);
    n += check_factor(&sp, g, i % 2 ? &A : NULL, i % 3 ? &b : NULL);
  }
  ck_assert_int_eq(n, 8000);
  kda_problem other = {0};
  other.gate_mode = KDA_GATE_LOWER_BOUND;
  ck_assert(!check_factor(&other, -1.0, NULL, NULL)); /* another mode: MPFR's */
}
END_TEST

/* ---- The L2 normalisation (kda_cert_l2.c). */

/* ||dd - x*||, ||x*|| and ||x*||^2 at high precision: x* = c x / d, d = sqrt(sum x^2 + eps)
 * (fla), max(sqrt(sum x^2), eps) (ggml) or 1 (off); each x*_i within 2^-490 |x*_i|. */
static void l2_ref(const kda_problem *p, int is_q, int n, const double *x, const double *h,
                   const double *l, double *dist, double *norm, double *norm2) {
  mpfr_t s, r, xi, d, acc, nacc;
  mpfr_inits2(2600, s, xi, d, (mpfr_ptr)0);
  mpfr_inits2(500, r, acc, nacc, (mpfr_ptr)0);
  mpfr_set_zero(s, 1);
  for (int i = 0; i < n; i++) { /* exact: the squares span less than 2600 bits */
    mpfr_set_d(xi, x[i], MPFR_RNDN);
    mpfr_fma(s, xi, xi, s, MPFR_RNDN);
  }
  if (p->l2_mode == KDA_L2_FLA) {
    mpfr_add_d(s, s, p->l2_eps, MPFR_RNDN);
    mpfr_rec_sqrt(r, s, MPFR_RNDN);
  } else if (p->l2_mode == KDA_L2_GGML) {
    mpfr_sqrt(r, s, MPFR_RNDN);
    mpfr_set_d(xi, p->l2_eps, MPFR_RNDN);
    mpfr_max(r, r, xi, MPFR_RNDN);
    mpfr_ui_div(r, 1, r, MPFR_RNDN);
  } else {
    mpfr_set_ui(r, 1, MPFR_RNDN);
  }
  if (is_q) mpfr_mul_d(r, r, p->scale, MPFR_RNDN);
  mpfr_set_zero(acc, 1);
  mpfr_set_zero(nacc, 1);
  for (int i = 0; i < n; i++) {
    mpfr_mul_d(xi, r, x[i], MPFR_RNDN); /* x*_i */
    mpfr_fma(nacc, xi, xi, nacc, MPFR_RNDN);
    kda_mpfr_exact_sum(d, h[i], l[i]);
    mpfr_sub(d, d, xi, MPFR_RNDN);
    mpfr_fma(acc, d, d, acc, MPFR_RNDN);
  }
  *norm2 = mpfr_get_d(nacc, MPFR_RNDN);
  mpfr_sqrt(acc, acc, MPFR_RNDU);
  mpfr_sqrt(nacc, nacc, MPFR_RNDN);
  *dist = mpfr_get_d(acc, MPFR_RNDU);
  *norm = mpfr_get_d(nacc, MPFR_RNDN);
  mpfr_clears(s, r, xi, d, acc, nacc, (mpfr_ptr)0);
}

static kda_cert_l2 W;

/* The denominator alone: the exact sum inside [s0, s1] and [sxlo, sxhi], r* within r.e. */
static void check_factor_l2(const kda_problem *p, int n, const double *x) {
  double sxlo, sxhi;
  kda_cert_dv r;
  if (kda_cert_l2_factor(&W, p, n, x, &sxlo, &sxhi, &r)) return;
  mpfr_t s, xi, q;
  mpfr_inits2(2600, s, xi, (mpfr_ptr)0);
  mpfr_init2(q, 500);
  mpfr_set_zero(s, 1);
  for (int i = 0; i < n; i++) { /* exact */
    mpfr_set_d(xi, x[i], MPFR_RNDN);
    mpfr_fma(s, xi, xi, s, MPFR_RNDN);
  }
  ck_assert(mpfr_cmp_d(s, sxlo) >= 0 && mpfr_cmp_d(s, sxhi) <= 0);
  if (p->l2_mode == KDA_L2_FLA) mpfr_add_d(s, s, p->l2_eps, MPFR_RNDN);
  ck_assert_msg(mpfr_lessequal_p(W.s0, s) && mpfr_lessequal_p(s, W.s1),
                "l2: the sum of squares is not enclosed (n %d)", n);
  if (p->l2_mode == KDA_L2_FLA) {
    mpfr_rec_sqrt(q, s, MPFR_RNDN);
  } else {
    mpfr_sqrt(q, s, MPFR_RNDN);
    mpfr_set_d(xi, p->l2_eps, MPFR_RNDN);
    mpfr_max(q, q, xi, MPFR_RNDN);
    mpfr_ui_div(q, 1, q, MPFR_RNDN);
  }
  kda_mpfr_exact_sum(xi, r.h, r.l);
  mpfr_sub(xi, xi, q, MPFR_RNDN);
  mpfr_abs(xi, xi, MPFR_RNDN);
  const double slack = r.e == 0.0 ? 0.0 : 0x1p-480 * r.h; /* e = 0: eps decides, r exact */
  ck_assert_msg(mpfr_cmp_d(xi, r.e - slack) <= 0, "l2: r is not enclosed (e = %a)", r.e);
  ck_assert_msg(r.e <= 0x1p-104 * r.h, "l2: r width %a against %a", r.e, r.h);
  mpfr_clears(s, xi, q, (mpfr_ptr)0);
}

static int check_l2(const kda_problem *p, int is_q, int n, const double *x) {
  double h[256], l[256], dist, norm, norm2;
  kda_cert_l2_norms o;
  if (p->l2_mode != KDA_L2_OFF) check_factor_l2(p, n, x);
  if (kda_cert_dd_l2(&W, p, is_q, n, x, h, l, &o)) return 0;
  l2_ref(p, is_q, n, x, h, l, &dist, &norm, &norm2);
  const double slack = o.e == 0.0 ? 0.0 : 0x1p-480 * norm; /* e = 0: exact (l2 off) */
  ck_assert_msg(dist + slack <= o.e, "l2 mode %d q %d n %d: distance %a above the bound %a",
                p->l2_mode, is_q, n, dist, o.e);
  ck_assert_msg(norm * (1 + 0x1p-50) <= o.n, "l2: norm %a above %a", norm, o.n);
  ck_assert_msg(o.n2lo <= norm2 * (1 - 0x1p-50), "l2: n2lo %a above %a", o.n2lo, norm2);
  ck_assert_msg(o.e <= 0x1p-98 * norm, "l2: width %a against %a", o.e, norm); /* 0 for 0 */
  ck_assert_msg(o.n2lo >= norm2 * (1 - 0x1p-40), "l2: n2lo %a far below %a", o.n2lo, norm2);
  return 1;
}

START_TEST(test_l2_against_mpfr) {
  static const int32_t modes[] = {KDA_L2_FLA, KDA_L2_GGML, KDA_L2_OFF};
  double x[256];
  int n_ok = 0, n_try = 0;
  for (int m = 0; m < 3; m++)
    for (int it = 0; it < 600; it++) {
      kda_problem p = {0};
      p.l2_mode = modes[m];
      p.l2_eps = it % 7 == 0 ? 0.5 : 1e-6;
      const int n = it % 5 == 0 ? 1 + (int)(unif() * 8) : it % 11 == 0 ? 256 : 128;
      p.scale = it % 2 ? 1.0 / sqrt((double)n) : -0.75;
      for (int i = 0; i < n; i++) {
        const int kind = it % 4;
        double v = kind == 0 ? 2 * unif() - 1                          /* doubles */
                 : kind == 1 ? (double)(float)(4 * unif() - 2)          /* float32 */
                 : kind == 2 ? logu(-60.0, 40.0)                         /* wide exponents */
                             : ldexp((double)(int)(256 * unif()) - 128, -7); /* bf16-like */
        if (unif() < 0.1) v = 0.0;
        x[i] = v;
      }
      if (it % 13 == 0) x[0] = 1e30; /* one element dominates: the others fall below the unit */
      n_try++;
      n_ok += check_l2(&p, it % 3 == 0, n, x);
    }
  ck_assert_int_eq(n_ok, n_try); /* every one of them is in the dd range */
  kda_problem p = {0};
  p.l2_mode = KDA_L2_FLA;
  p.l2_eps = 1e-6;
  for (int i = 0; i < 128; i++) x[i] = 0.0;
  for (int m = 0; m < 3; m++) { /* the zero vector: exactly 0, e = 0 (its outputs are exact) */
    p.l2_mode = modes[m];
    ck_assert(check_l2(&p, m % 2, 128, x));
  }
  p.l2_mode = KDA_L2_GGML; /* 0 / max(0, 0): the zero vector, as kda_mpfr_coef_l2 says */
  p.l2_eps = 0.0;
  kda_cert_l2 w;
  kda_cert_l2_init(&w);
  double h[128], l[128];
  kda_cert_l2_norms o;
  ck_assert_int_eq(kda_cert_dd_l2(&w, &p, 0, 128, x, h, l, &o), 0);
  ck_assert(o.n == 0.0 && o.e == 0.0 && h[5] == 0.0 && l[5] == 0.0);
  kda_cert_l2_clear(&w);
  p.l2_mode = KDA_L2_FLA;
  x[3] = 1e-300; /* its square leaves the double range: MPFR's */
  ck_assert(!check_l2(&p, 0, 128, x));
}
END_TEST

int main(void) {
  kda_cert_dd_init(&D);
  kda_cert_l2_init(&W);
  Suite *s = suite_create("cert_dd");
  TCase *tc = tcase_create("cert_dd");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_exp_against_mpfr);
  tcase_add_test(tc, test_softplus_against_mpfr);
  tcase_add_test(tc, test_factors_against_mpfr);
  tcase_add_test(tc, test_l2_against_mpfr);
  suite_add_tcase(s, tc);
  const int status = kda_test_main(s, CK_NORMAL, CK_FORK_GETENV);
  kda_cert_l2_clear(&W);
  mpfr_free_cache();
  return status;
}

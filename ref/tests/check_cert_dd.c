/* check_cert_dd.c: the fast certifier's double-double decay factors against MPFR (SPEC.md
 * §8.12, "Decay factors in double-double").
 * SPDX-License-Identifier: MIT
 *
 * Every enclosure of ref/kda_cert_dd.c (exp with and without an argument error, softplus in
 * both forms, the log and softplus decay factors with and without A_log and dt_bias) is
 * compared with a 400-bit MPFR enclosure of the exact value built with directed roundings:
 * the MPFR interval must lie inside [h + l - e, h + l + e], hi must bound it from above, and
 * the width e must be small (what keeps the certifier's bound tight).  The arguments are
 * random over the whole proven range (log-uniform magnitudes, both signs, dd arguments with
 * low words) plus the edge cases: 0, tiny, the ends of the range, ties of the reduction, the
 * gate values of golden/L1 gate-values-* and softplus-tails; arguments outside the range must
 * be refused (the caller then uses MPFR).
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

int main(void) {
  kda_cert_dd_init(&D);
  Suite *s = suite_create("cert_dd");
  TCase *tc = tcase_create("cert_dd");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_exp_against_mpfr);
  tcase_add_test(tc, test_softplus_against_mpfr);
  tcase_add_test(tc, test_factors_against_mpfr);
  suite_add_tcase(s, tc);
  const int status = kda_test_main(s, CK_NORMAL, CK_FORK_GETENV);
  mpfr_free_cache();
  return status;
}

/* check_cert.c: unit tests of the fast certifier (ref/oracle/kda_cert.h, SPEC.md §8.12).
 * SPDX-License-Identifier: MIT
 *
 * 1. a value just off a binary64 midpoint, which double-double gets on the wrong side: the
 *    true bound leaves it undecided and MPFR gives the right rounding; a bound made 2^20 times
 *    too small decides it wrongly, and the cross-check (KDA_CERTIFIER_BOTH) catches that;
 * 2. random cases in every family and gate mode: every decided value equals MPFR's, the
 *    fallback gives MPFR's values, threads change nothing;
 * 3. the certifier options and the checks shared with kda_mpfr_forward.
 * The catalog-wide cross-check is vectors/tests/check_certifier.c.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_cert.h"
#include "kda_mpfr_impl.h"
#include "kda_test.h"

#define urange kda_test_urange /* the shared deterministic inputs (tests/kda_test.h) */

typedef struct tcase {
  kda_problem p;
  double *buf[11]; /* q k v g beta A_log dt_bias h0 o ht hc */
  int64_t cu[4], cp[2];
} tcase;

static double *dal(size_t n) {
  double *x = calloc(n ? n : 1, sizeof *x);
  ck_assert_ptr_nonnull(x);
  return x;
}

static void tc_alloc(tcase *c) {
  const kda_problem *p = &c->p;
  const size_t qk = (size_t)(p->T * p->H * p->K), v = (size_t)(p->T * p->HV * p->V);
  const size_t g = (size_t)(p->T * p->HV * p->K), slot = (size_t)(p->HV * p->K * p->V);
  const size_t n[11] = {qk, qk, v, g, (size_t)(p->T * p->HV), (size_t)p->HV,
                        (size_t)(p->HV * p->K), slot * (size_t)p->N, v, slot * (size_t)p->N,
                        slot * (size_t)(p->n_checkpoints ? p->n_checkpoints : 1)};
  for (int i = 0; i < 11; i++) c->buf[i] = dal(n[i]);
}

static void tc_free(tcase *c) {
  for (int i = 0; i < 11; i++) free(c->buf[i]);
}

static void tc_tensors(const tcase *c, kda_tensors_f64 *t, double *o, double *ht, double *hc) {
  memset(t, 0, sizeof *t);
  t->q = c->buf[0], t->k = c->buf[1], t->v = c->buf[2], t->g = c->buf[3];
  t->beta = c->buf[4], t->A_log = c->buf[5], t->dt_bias = c->buf[6];
  t->h0 = c->p.has_initial_state ? c->buf[7] : NULL;
  t->cu_seqlens = c->p.N > 1 ? c->cu : NULL;
  t->checkpoints = c->p.n_checkpoints ? c->cp : NULL;
  t->o = o, t->ht = ht, t->hc = hc;
}

/* ==== 1. A value near a rounding boundary. */

/* Linear family, K = V = 1, q = k = beta = 1: o_t = S_t = sum of v.  v_0 = 1, v_1 = 2^-53 +
 * 2^-98 (S = the midpoint between 1 and 1 + 2^-52, plus 2^-98), then 2046 times -3 2^-110:
 * each is below half the spacing (2^-107) of the dd low word and is lost, so dd stays at
 * mid + 2^-98 while the exact S = mid + (4096 - 3m) 2^-110 after m of them crosses the
 * midpoint between m = 1365 and 1366 (never on it) and ends below it: it rounds to 1. */
static void boundary_case(tcase *c) {
  memset(c, 0, sizeof *c);
  kda_problem_init(&c->p, 2048, 1, 1, 1, 1);
  c->p.family = KDA_FAMILY_LINEAR;
  tc_alloc(c);
  for (int64_t t = 0; t < c->p.T; t++) {
    c->buf[0][t] = c->buf[1][t] = c->buf[4][t] = 1.0;
    c->buf[2][t] = t == 0 ? 1.0 : t == 1 ? 0x1p-53 + 0x1p-98 : -3 * 0x1p-110;
  }
}

START_TEST(test_boundary_goes_to_mpfr) {
  tcase c;
  boundary_case(&c);
  const int64_t T = c.p.T;
  double *o = dal((size_t)T), ht[1];
  unsigned char *dec = calloc((size_t)T + 1, 1);
  kda_tensors_f64 t;
  tc_tensors(&c, &t, o, ht, NULL);
  kda_cert_options opt;
  kda_cert_options_init(&opt);
  kda_cert_report r;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_cert_forward(&c.p, &t, &opt, &r, dec, err, sizeof err), KDA_OK);
  ck_assert_int_eq(r.mpfr_ran, 1);
  ck_assert_int_eq(r.method, KDA_CERT_PROVEN);
  ck_assert(r.n_decided > 0 && r.n_decided < r.n_values);
  ck_assert_int_eq(dec[T - 1], 0);
  ck_assert(o[0] == 1.0);
  ck_assert(o[1] == 1.0 + 0x1p-52);
  ck_assert(o[1366] == 1.0 + 0x1p-52); /* m = 1365: mid + 2^-110 */
  ck_assert(o[1367] == 1.0);           /* m = 1366: mid - 2^-109 */
  ck_assert(o[T - 1] == 1.0 && ht[0] == 1.0);
  free(o);
  free(dec);
  tc_free(&c);
}
END_TEST

/* The bound is per state column (SPEC.md §8.12): V = 2, column 0 all zeros (its bound stays
 * 0), column 1 the boundary sequence.  Column 1's last value is undecided under its own bound
 * and goes to MPFR; column 0's outputs are exact zeros, decided.  A bound that took one
 * column's figures for another (column 0's D for column 1) would decide it wrongly. */
START_TEST(test_bound_is_per_column) {
  tcase c;
  memset(&c, 0, sizeof c);
  kda_problem_init(&c.p, 2048, 1, 1, 1, 2);
  c.p.family = KDA_FAMILY_LINEAR;
  tc_alloc(&c);
  const int64_t T = c.p.T;
  for (int64_t t = 0; t < T; t++) {
    c.buf[0][t] = c.buf[1][t] = c.buf[4][t] = 1.0;
    c.buf[2][2 * t] = 0.0;
    c.buf[2][2 * t + 1] = t == 0 ? 1.0 : t == 1 ? 0x1p-53 + 0x1p-98 : -3 * 0x1p-110;
  }
  double *o = dal((size_t)(2 * T)), ht[2];
  unsigned char *dec = calloc((size_t)(2 * T + 2), 1);
  kda_tensors_f64 t;
  tc_tensors(&c, &t, o, ht, NULL);
  kda_cert_options opt;
  kda_cert_options_init(&opt);
  kda_cert_report r;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_cert_forward(&c.p, &t, &opt, &r, dec, err, sizeof err), KDA_OK);
  ck_assert_int_eq(r.mpfr_ran, 1);
  ck_assert_int_eq(dec[2 * (T - 1) + 1], 0);
  ck_assert(dec[2 * (T - 1)] == 1 && o[2 * (T - 1)] == 0.0);
  ck_assert(o[2 * (T - 1) + 1] == 1.0 && ht[1] == 1.0 && ht[0] == 0.0);
  free(o);
  free(dec);
  tc_free(&c);
}
END_TEST

START_TEST(test_wrong_bound_is_caught) {
  tcase c;
  boundary_case(&c);
  const int64_t T = c.p.T;
  double *o = dal((size_t)T), ht[1];
  unsigned char *dec = calloc((size_t)T + 1, 1);
  kda_tensors_f64 t;
  tc_tensors(&c, &t, o, ht, NULL);
  kda_cert_options opt;
  kda_cert_options_init(&opt);
  opt.bound_scale = 0x1p-20;
  opt.no_fallback = 1;
  kda_cert_report r;
  char err[KDA_ERRLEN];
  /* alone, the wrong bound decides the last value, and wrongly */
  const int st = kda_cert_forward(&c.p, &t, &opt, &r, dec, err, sizeof err);
  ck_assert(st == KDA_OK || st == KDA_ENOTCERT);
  ck_assert_int_eq(dec[T - 1], 1);
  ck_assert(o[T - 1] == 1.0 + 0x1p-52);
  /* the cross-check catches it */
  opt.no_fallback = 0;
  opt.certifier = KDA_CERTIFIER_BOTH;
  ck_assert_int_eq(kda_cert_forward(&c.p, &t, &opt, &r, NULL, err, sizeof err), KDA_ENOTCERT);
  ck_assert_msg(strstr(err, "disagree") != NULL, "%s", err);
  ck_assert_int_eq(r.method, KDA_CERT_NONE);
  free(o);
  free(dec);
  tc_free(&c);
}
END_TEST

/* Two value heads sharing one q/k head: head 0 is the boundary sequence for 2048 tokens, then
 * v = 1/4 + 2^-54 moves it 2^-54 away from the nearest midpoint (decided again) for 52 more;
 * head 1 adds 1/2 each token (exact, decided).  Phase 2 must run on head 0 alone and on its
 * first 2048 tokens, and every value must be MPFR's. */
START_TEST(test_fallback_is_per_head_and_prefix) {
  tcase c;
  memset(&c, 0, sizeof c);
  kda_problem_init(&c.p, 2100, 1, 2, 1, 1);
  c.p.family = KDA_FAMILY_LINEAR;
  tc_alloc(&c);
  for (int64_t t = 0; t < c.p.T; t++) {
    c.buf[0][t] = c.buf[1][t] = c.buf[4][2 * t] = c.buf[4][2 * t + 1] = 1.0;
    c.buf[2][2 * t] = t == 0 ? 1.0 : t == 1 ? 0x1p-53 + 0x1p-98 : t < 2048 ? -3 * 0x1p-110
                    : t == 2048 ? 0.25 + 0x1p-54 : 0.0;
    c.buf[2][2 * t + 1] = 0.5;
  }
  const int64_t n = 2 * c.p.T + 2;
  double *a = dal((size_t)n), *b = dal((size_t)n);
  kda_tensors_f64 ta, tb;
  tc_tensors(&c, &ta, a, a + 2 * c.p.T, NULL);
  tc_tensors(&c, &tb, b, b + 2 * c.p.T, NULL);
  char err[KDA_ERRLEN];
  kda_cert_report r;
  ck_assert_msg(kda_cert_forward(&c.p, &ta, NULL, &r, NULL, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_int_eq(r.mpfr_ran, 1);
  ck_assert_int_eq(r.n_mpfr_heads, 1);
  ck_assert_int_eq(r.mpfr_steps, 2048);
  ck_assert_int_eq(r.method, KDA_CERT_PROVEN);
  kda_mpfr_report rm;
  ck_assert_int_eq(kda_mpfr_forward(&c.p, &tb, NULL, &rm, err, sizeof err), KDA_OK);
  ck_assert(memcmp(a, b, (size_t)n * sizeof *a) == 0);
  ck_assert(a[2 * (c.p.T - 1)] == 1.25 + 0x1p-52 && a[2 * c.p.T] == 1.25 + 0x1p-52);
  free(a);
  free(b);
  tc_free(&c);
}
END_TEST

/* ==== 2. Random cases against MPFR. */

static void random_case(tcase *c, uint64_t seed, int family, int gate, int beta, int l2) {
  uint64_t s = seed;
  memset(c, 0, sizeof *c);
  const int64_t H = 1 + (int64_t)(seed % 2), HV = H * (1 + (int64_t)(seed / 2 % 2));
  kda_problem_init(&c->p, 9, H, HV, 5, 3);
  kda_problem *p = &c->p;
  p->family = family;
  p->gate_mode = gate;
  p->beta_mode = beta;
  p->l2_mode = l2;
  p->has_A_log = 1;
  p->N = 2;
  p->has_initial_state = 1;
  p->n_checkpoints = 1;
  p->state_layout = (int32_t)(seed / 4 % 2);
  p->head_map = (int32_t)(seed / 8 % 2);
  tc_alloc(c);
  c->cu[0] = 0, c->cu[1] = 4, c->cu[2] = 9;
  c->cp[0] = 6;
  const size_t qk = (size_t)(p->T * H * p->K), v = (size_t)(p->T * HV * p->V);
  for (size_t i = 0; i < qk; i++) c->buf[0][i] = urange(&s, -1, 1), c->buf[1][i] = urange(&s, -1, 1);
  for (size_t i = 0; i < v; i++) c->buf[2][i] = urange(&s, -1, 1);
  for (size_t i = 0; i < (size_t)(p->T * HV * p->K); i++) c->buf[3][i] = urange(&s, -3, 0.5);
  for (int64_t i = 0; i < p->T * HV; i++) c->buf[4][i] = urange(&s, beta == KDA_BETA_PROB ? 0 : -3, 1);
  for (int64_t i = 0; i < HV; i++) c->buf[5][i] = urange(&s, -1, 1);
  for (int64_t i = 0; i < HV * p->K; i++) c->buf[6][i] = urange(&s, -1, 1);
  for (int64_t i = 0; i < p->N * HV * p->K * p->V; i++) c->buf[7][i] = urange(&s, -1, 1);
  if (gate == KDA_GATE_LOG)
    for (size_t i = 0; i < (size_t)(p->T * HV * p->K); i++) c->buf[3][i] = -fabs(c->buf[3][i]);
}

static void compare_random(uint64_t seed, int family, int gate, int beta, int l2) {
  tcase c;
  random_case(&c, seed, family, gate, beta, l2);
  const int64_t n = kda_mpfr_count_values(&c.p), nO = c.p.T * c.p.HV * c.p.V;
  const int64_t nS = c.p.N * c.p.HV * c.p.K * c.p.V;
  double *a = dal((size_t)n), *b = dal((size_t)n), *d = dal((size_t)n);
  unsigned char *dec = calloc((size_t)n, 1), *dec2 = calloc((size_t)n, 1);
  kda_tensors_f64 ta, tb, td;
  tc_tensors(&c, &ta, a, a + nO, a + nO + nS);
  tc_tensors(&c, &tb, b, b + nO, b + nO + nS);
  tc_tensors(&c, &td, d, d + nO, d + nO + nS);
  char err[KDA_ERRLEN];
  kda_mpfr_report rm;
  ck_assert_msg(kda_mpfr_forward(&c.p, &tb, NULL, &rm, err, sizeof err) == KDA_OK, "%s", err);
  kda_cert_options opt;
  kda_cert_options_init(&opt);
  opt.no_fallback = 1;
  kda_cert_report r;
  int st = kda_cert_forward(&c.p, &ta, &opt, &r, dec, err, sizeof err);
  ck_assert_msg(st == KDA_OK || st == KDA_ENOTCERT, "%s", err);
  int64_t nd = 0;
  for (int64_t i = 0; i < n; i++) {
    ck_assert_msg(!dec[i] || kda_mpfr_bits(a[i]) == kda_mpfr_bits(b[i]),
                  "seed %llu value %lld: dd %a, MPFR %a", (unsigned long long)seed,
                  (long long)i, a[i], b[i]);
    nd += dec[i];
  }
  ck_assert_int_eq(nd, r.n_decided);
  ck_assert_int_eq(r.n_heads_unsafe, 0);
  ck_assert_msg(nd * 10 >= n * 9, "seed %llu: only %lld of %lld decided",
                (unsigned long long)seed, (long long)nd, (long long)n);
  opt.threads = 3; /* same decisions and values in any thread */
  st = kda_cert_forward(&c.p, &td, &opt, &r, dec2, err, sizeof err);
  ck_assert(memcmp(dec, dec2, (size_t)n) == 0 && memcmp(a, d, (size_t)n * sizeof *a) == 0);
  kda_cert_options_init(&opt); /* with the fallback: MPFR's values for all */
  ck_assert_int_eq(kda_cert_forward(&c.p, &td, &opt, &r, NULL, err, sizeof err), KDA_OK);
  ck_assert(memcmp(b, d, (size_t)n * sizeof *b) == 0);
  ck_assert_int_eq(r.method, rm.method);
  free(a);
  free(b);
  free(d);
  free(dec);
  free(dec2);
  tc_free(&c);
}

START_TEST(test_random_against_mpfr) {
  static const int gates[] = {KDA_GATE_SOFTPLUS, KDA_GATE_LOWER_BOUND, KDA_GATE_LOG};
  static const int betas[] = {KDA_BETA_PROB, KDA_BETA_LOGIT, KDA_BETA_LOGIT_NEG};
  uint64_t seed = 1;
  for (int f = KDA_FAMILY_KDA; f <= KDA_FAMILY_LINEAR; f++)
    for (int g = 0; g < 3; g++)
      for (int l2 = KDA_L2_OFF; l2 <= KDA_L2_GGML; l2++)
        compare_random(seed++, f, gates[g], betas[(g + l2) % 3], l2);
}
END_TEST

/* ==== 3. Options and checks. */

START_TEST(test_options_and_checks) {
  tcase c;
  random_case(&c, 7, KDA_FAMILY_KDA, KDA_GATE_SOFTPLUS, KDA_BETA_LOGIT, KDA_L2_FLA);
  const int64_t n = kda_mpfr_count_values(&c.p), nO = c.p.T * c.p.HV * c.p.V;
  const int64_t nS = c.p.N * c.p.HV * c.p.K * c.p.V;
  double *a = dal((size_t)n), *b = dal((size_t)n);
  kda_tensors_f64 ta, tb;
  tc_tensors(&c, &ta, a, a + nO, a + nO + nS);
  tc_tensors(&c, &tb, b, b + nO, b + nO + nS);
  char err[KDA_ERRLEN];
  kda_cert_options opt;
  kda_cert_report r;
  kda_cert_options_init(&opt);
  opt.certifier = KDA_CERTIFIER_MPFR;
  ck_assert_int_eq(kda_cert_forward(&c.p, &ta, &opt, &r, NULL, err, sizeof err), KDA_OK);
  ck_assert(r.mpfr_ran == 1 && r.n_decided == 0);
  ck_assert_int_eq(kda_cert_forward(&c.p, &tb, NULL, &r, NULL, err, sizeof err), KDA_OK);
  ck_assert(memcmp(a, b, (size_t)n * sizeof *a) == 0);
  for (int bad = 0; bad < 5; bad++) {
    kda_cert_options_init(&opt);
    if (bad == 0) opt.certifier = 3;
    if (bad == 1) opt.threads = 0;
    if (bad == 2) opt.bound_scale = 2.0;
    if (bad == 3) opt.reserved = 1;
    if (bad == 4) opt.mpfr.prec0 = 1;
    ck_assert_int_eq(kda_cert_forward(&c.p, &ta, &opt, &r, NULL, err, sizeof err), KDA_EINVAL);
    ck_assert_int_eq(r.method, KDA_CERT_NONE);
  }
  ck_assert_int_eq(kda_cert_forward(NULL, &ta, NULL, &r, NULL, err, sizeof err), KDA_EINVAL);
  c.buf[2][3] = NAN;
  ck_assert_int_eq(kda_cert_forward(&c.p, &ta, NULL, &r, NULL, err, sizeof err), KDA_ENONFINITE);
  ck_assert_str_eq(kda_cert_certifier_name(KDA_CERTIFIER_BOTH), "both");
  ck_assert_int_eq(kda_cert_certifier_parse("mpfr"), KDA_CERTIFIER_MPFR);
  ck_assert_int_eq(kda_cert_certifier_parse("dd"), -1);
  free(a);
  free(b);
  tc_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cert");
  TCase *tc = tcase_create("cert");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_boundary_goes_to_mpfr);
  tcase_add_test(tc, test_wrong_bound_is_caught);
  tcase_add_test(tc, test_bound_is_per_column);
  tcase_add_test(tc, test_fallback_is_per_head_and_prefix);
  tcase_add_test(tc, test_random_against_mpfr);
  tcase_add_test(tc, test_options_and_checks);
  suite_add_tcase(s, tc);
  const int status = kda_test_main(s, CK_NORMAL, CK_FORK_GETENV);
  mpfr_free_cache();
  return status;
}

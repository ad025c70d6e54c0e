/* check_certifier.c: the fast certifier (ref/oracle/kda_cert.h, SPEC.md §8.12) against the MPFR
 * reference, bit for bit, on the golden catalog.
 * SPDX-License-Identifier: MIT
 *
 * For every selected catalog case: kda_cert_forward with the double-double phase alone (no
 * fallback) and kda_mpfr_forward; every value the first phase decided must have MPFR's bits,
 * and kda_cert_forward with the fallback (the golden writer's path) must give MPFR's values for
 * all of them.  `make check` runs the L0 cases and the cheaper L1 ones (KDA_CERTIFIER_CHECK
 * unset); `make check-certifier` sets KDA_CERTIFIER_CHECK=all and runs every L0 and L1 case.
 * The per-case figures (values decided by the first phase) are printed.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_catalog.h"
#include "kda_cert.h"
#include "kda_mpfr_impl.h"
#include "kda_test.h"

/* Cases above this many state-element steps are skipped unless KDA_CERTIFIER_CHECK=all. */
#define SUBSET_COST 2000000.0

static int want_all(void) {
  const char *s = getenv("KDA_CERTIFIER_CHECK");
  return s && strcmp(s, "all") == 0;
}

static double cost(const kda_problem *p) {
  return (double)p->T * (double)p->HV * (double)p->K * (double)p->V;
}

static double *outputs(const kda_case *c, kda_tensors_f64 *t, int64_t *n) {
  kda_problem_sizes s;
  ck_assert_int_eq(kda_problem_sizes_get(&c->p, &s, NULL, 0), KDA_OK);
  *n = (int64_t)(s.o + s.ht + s.hc);
  double *buf = calloc((size_t)*n + 1, sizeof *buf);
  ck_assert_ptr_nonnull(buf);
  kda_case_tensors(c, t);
  t->o = buf;
  t->ht = buf + s.o;
  t->hc = buf + s.o + s.ht;
  return buf;
}

/* Runs one case; returns 1 when it was checked. */
static int check_case(const kda_catalog_entry *e, int64_t *n_vals, int64_t *n_dec) {
  char err[KDA_ERRLEN];
  kda_case c;
  ck_assert_msg(kda_catalog_build(e, &c, err, sizeof err) == KDA_OK, "%s: %s", e->id, err);
  if (!want_all() && cost(&c.p) > SUBSET_COST) {
    kda_case_free(&c);
    return 0;
  }
  kda_tensors_f64 tf, tm, tb;
  int64_t n;
  double *fast = outputs(&c, &tf, &n), *mp = outputs(&c, &tm, &n), *both = outputs(&c, &tb, &n);
  unsigned char *dec = calloc((size_t)n + 1, 1);
  ck_assert_ptr_nonnull(dec);
  kda_cert_options o;
  kda_cert_options_init(&o);
  o.no_fallback = 1;
  kda_cert_report rf, rb;
  const int st = kda_cert_forward(&c.p, &tf, &o, &rf, dec, err, sizeof err);
  ck_assert_msg(st == KDA_OK || st == KDA_ENOTCERT, "%s: %s", e->id, err);
  kda_mpfr_report rm;
  ck_assert_msg(kda_mpfr_forward(&c.p, &tm, NULL, &rm, err, sizeof err) == KDA_OK, "%s: %s",
                e->id, err);
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(!dec[i] || kda_mpfr_bits(fast[i]) == kda_mpfr_bits(mp[i]),
                  "%s: value %lld decided as %a, MPFR %a", e->id, (long long)i, fast[i], mp[i]);
  kda_cert_options_init(&o);
  ck_assert_msg(kda_cert_forward(&c.p, &tb, &o, &rb, NULL, err, sizeof err) == KDA_OK, "%s: %s",
                e->id, err);
  ck_assert_int_eq(rb.method, rm.method);
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(kda_mpfr_bits(both[i]) == kda_mpfr_bits(mp[i]), "%s: value %lld: %a, MPFR %a",
                  e->id, (long long)i, both[i], mp[i]);
  printf("  %-40s %8lld values, %8lld decided in dd (%.1f%%), %lld heads out of range\n", e->id,
         (long long)n, (long long)rf.n_decided, n ? 100.0 * (double)rf.n_decided / (double)n : 100.0,
         (long long)rf.n_heads_unsafe);
  *n_vals += n;
  *n_dec += rf.n_decided;
  free(dec);
  free(fast);
  free(mp);
  free(both);
  kda_case_free(&c);
  return 1;
}

static void run_level(int32_t level) {
  int64_t checked = 0, n_vals = 0, n_dec = 0;
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (e->level == level) checked += check_case(e, &n_vals, &n_dec);
  }
  printf("%s: %lld cases cross-checked, %lld values, %lld (%.1f%%) decided in double-double\n",
         kda_level_name(level), (long long)checked, (long long)n_vals, (long long)n_dec,
         n_vals ? 100.0 * (double)n_dec / (double)n_vals : 100.0);
  ck_assert_int_gt(checked, 0);
  ck_assert_int_gt(n_dec, n_vals / 2); /* the first phase must do most of the work */
}

START_TEST(test_l0) { run_level(KDA_LEVEL_L0); }
END_TEST

START_TEST(test_l1) { run_level(KDA_LEVEL_L1); }
END_TEST

int main(void) {
  Suite *s = suite_create("certifier");
  TCase *tc = tcase_create("catalog");
  tcase_set_timeout(tc, 3600);
  tcase_add_test(tc, test_l0);
  tcase_add_test(tc, test_l1);
  suite_add_tcase(s, tc);
  return kda_test_main(s, CK_NORMAL, CK_FORK_GETENV);
}

/* check_gen_range.c: kda_gen_range and kda_gen_case_static against kda_gen_case, bit for bit.
 * SPDX-License-Identifier: MIT
 *
 * A generated-inputs case (SPEC.md §10.2) is read by streaming readers window by window:
 * every window must be exactly the rows of the whole generated case.  For every regime, every
 * family, gate, beta mode, head map, varlen and initial-state description and every input
 * precision: random ranges [t0, t1) (fixed LCG seed, printed on failure), the empty range at
 * every end, and the whole range; the static case equals the whole case's token-independent
 * members and manifest.  Out-of-range windows are errors that leave the window empty.  The
 * generator cuts a large range into parts drawn on threads (kda_gen_tune): cases and windows
 * drawn on 2 to 7 threads equal the same drawn on one, in every regime.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_case_internal.h"
#include "kda_test.h"

static const char *const modes[] = {
    "",
    "family=gdn",
    "family=deltanet",
    "family=linear",
    "gate=softplus",
    "gate=lower_bound lb=-3",
    "family=gdn gate=softplus",
    "family=gdn gate=lower_bound",
    "beta=logit",
    "beta=logit_neg",
    "l2=fla",
    "head_map=mod",
    "layout=vk h0=1",
    "seqlens=13,0,24 h0=1 checkpoints=log",
    "HV=6 head_map=mod gate=softplus",
};
#define N_MODES (sizeof modes / sizeof modes[0])

static void parse_ok(const char *text, kda_gen_desc *d) {
  char err[KDA_ERRLEN] = "";
  ck_assert_msg(kda_gen_parse(text, d, err, sizeof err) == KDA_OK, "parse '%s': %s", text, err);
}

/* Rows [t0, t1) of the whole array x (row width w) equal the window array y bit for bit. */
static void same_rows(const double *x, const double *y, int64_t t0, int64_t t1, int64_t w,
                      const char *what, const char *desc) {
  ck_assert_msg((x == NULL) == (y == NULL), "%s: NULL in one only (%s)", what, desc);
  if (!x) return;
  const size_t n = (size_t)((t1 - t0) * w);
  ck_assert_msg(memcmp(x + t0 * w, y, n * sizeof(double)) == 0,
                "%s tokens [%lld, %lld) differ from kda_gen_case (%s)", what, (long long)t0,
                (long long)t1, desc);
}

static void check_window(const kda_gen_desc *d, const kda_case *c, int64_t t0, int64_t t1,
                         const char *desc) {
  kda_gen_window w;
  char err[KDA_ERRLEN] = "";
  int st = kda_gen_range(d, t0, t1, &w, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "range [%lld, %lld) (%s): %s", (long long)t0, (long long)t1, desc,
                err);
  ck_assert(w.t0 == t0 && w.t1 == t1);
  const kda_problem *p = &c->p;
  const int64_t gw = c->g ? (p->family == KDA_FAMILY_GDN ? 1 : p->K) : 0;
  same_rows(c->q, w.q, t0, t1, p->H * p->K, "q", desc);
  same_rows(c->k, w.k, t0, t1, p->H * p->K, "k", desc);
  same_rows(c->v, w.v, t0, t1, p->HV * p->V, "v", desc);
  same_rows(c->g, w.g, t0, t1, p->HV * gw, "g", desc);
  same_rows(c->beta, w.beta, t0, t1, p->HV, "beta", desc);
  kda_gen_window_free(&w);
  ck_assert_ptr_null(w.q);
}

static void same_static(const kda_case *a, const kda_case *b, const char *desc) {
  kda_problem_sizes s;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_problem_sizes_get(&a->p, &s, err, sizeof err), KDA_OK);
  ck_assert_msg(memcmp(&a->p, &b->p, sizeof a->p) == 0, "problem differs (%s)", desc);
  ck_assert(b->q == NULL && b->k == NULL && b->v == NULL && b->g == NULL && b->beta == NULL);
  const double *x[3] = {a->A_log, a->dt_bias, a->h0}, *y[3] = {b->A_log, b->dt_bias, b->h0};
  const uint64_t n[3] = {s.A_log, s.dt_bias, s.h0};
  for (int m = 0; m < 3; m++) {
    ck_assert_msg((x[m] == NULL) == (y[m] == NULL), "static member %d (%s)", m, desc);
    if (x[m]) ck_assert_msg(memcmp(x[m], y[m], n[m] * 8) == 0, "static member %d (%s)", m, desc);
  }
  ck_assert(memcmp(a->cu_seqlens, b->cu_seqlens, s.cu_seqlens * 8) == 0);
  if (s.checkpoints) ck_assert(memcmp(a->checkpoints, b->checkpoints, s.checkpoints * 8) == 0);
  ck_assert_str_eq(a->id, b->id);
  ck_assert_str_eq(a->manifest_json, b->manifest_json);
}

/* One regime (the loop index) x every mode x every input precision. */
START_TEST(test_range_all) {
  const int32_t regime = (int32_t)_i;
  uint64_t lcg = 0x5eed0000u + (uint64_t)regime;
  char desc[512], err[KDA_ERRLEN];
  for (int32_t prec = 0; prec < KDA_PRECISION_COUNT; prec++)
    for (size_t m = 0; m < N_MODES; m++) {
      if (!kda_precision_file_name(prec)) continue;
      if (regime == KDA_REGIME_EXPANSIVE && strstr(modes[m], "l2=")) continue;
      const char *T = strstr(modes[m], "seqlens") ? "" : "T=37";
      const char *HV = strstr(modes[m], "HV=") ? "" : "HV=4";
      snprintf(desc, sizeof desc, "seed=%d %s H=2 %s K=5 V=3 regime=%s prec=%s %s",
               (int)(200 + m), T, HV, kda_regime_name(regime), kda_precision_file_name(prec),
               modes[m]);
      kda_gen_desc d;
      kda_case c, s;
      parse_ok(desc, &d);
      ck_assert_msg(kda_gen_case(&d, &c, err, sizeof err) == KDA_OK, "%s: %s", desc, err);
      const int64_t n = c.p.T;
      check_window(&d, &c, 0, n, desc);
      check_window(&d, &c, 0, 0, desc);
      check_window(&d, &c, n, n, desc);
      for (int r = 0; r < 6; r++) {
        int64_t a = (int64_t)(kda_test_lcg_next(&lcg) % (uint64_t)(n + 1));
        int64_t b = (int64_t)(kda_test_lcg_next(&lcg) % (uint64_t)(n + 1));
        check_window(&d, &c, a < b ? a : b, a < b ? b : a, desc);
      }
      ck_assert_msg(kda_gen_case_static(&d, &s, err, sizeof err) == KDA_OK, "%s: %s", desc, err);
      same_static(&c, &s, desc);
      kda_case_free(&c);
      kda_case_free(&s);
      kda_gen_desc_free(&d);
    }
}
END_TEST

START_TEST(test_range_errors) {
  kda_gen_desc d;
  kda_gen_window w;
  char err[KDA_ERRLEN] = "";
  parse_ok("seed=1 T=10 H=1 K=4 V=4", &d);
  const int64_t bad[][2] = {{-1, 3}, {4, 3}, {0, 11}, {11, 11}, {INT64_MIN, 0}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&w, 0x5a, sizeof w);
    ck_assert_int_eq(kda_gen_range(&d, bad[i][0], bad[i][1], &w, err, sizeof err), KDA_EINVAL);
    ck_assert_msg(strstr(err, "not in [0, 10]") != NULL, "message '%s'", err);
    ck_assert(w.q == NULL && w.k == NULL && w.v == NULL && w.g == NULL && w.beta == NULL);
  }
  ck_assert_int_eq(kda_gen_range(NULL, 0, 1, &w, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(kda_gen_range(&d, 0, 1, NULL, err, sizeof err), KDA_EINVAL);
  kda_case c;
  ck_assert_int_eq(kda_gen_case_static(NULL, &c, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_null(c.id);
  kda_gen_window_free(NULL);
  kda_gen_desc_free(&d);
}
END_TEST

/* The members of two cases of one description, bit for bit. */
static void same_tokens(const kda_case *a, const kda_case *b, const char *desc, int threads) {
  kda_problem_sizes s;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_problem_sizes_get(&a->p, &s, err, sizeof err), KDA_OK);
  const double *x[5] = {a->q, a->k, a->v, a->g, a->beta}, *y[5] = {b->q, b->k, b->v, b->g, b->beta};
  const uint64_t n[5] = {s.q, s.k, s.v, s.g, s.beta};
  static const char *const name[5] = {"q", "k", "v", "g", "beta"};
  for (int m = 0; m < 5; m++) {
    ck_assert_msg((x[m] == NULL) == (y[m] == NULL), "%s: NULL in one only (%s)", name[m], desc);
    if (x[m])
      ck_assert_msg(memcmp(x[m], y[m], n[m] * sizeof(double)) == 0,
                    "%s drawn on %d threads differs from one thread's (%s)", name[m], threads, desc);
  }
}

/* One regime (the loop index): 2 to 7 threads (parts of a few tokens each) against one. */
START_TEST(test_range_threads) {
  const int32_t regime = (int32_t)_i;
  const char *const extra[] = {"", "family=gdn gate=softplus HV=6", "seqlens=50,0,91 h0=1"};
  char desc[512], err[KDA_ERRLEN];
  for (size_t e = 0; e < sizeof extra / sizeof extra[0]; e++) {
    snprintf(desc, sizeof desc, "seed=%d %s H=2 K=5 V=3 regime=%s %s", 300 + (int)e,
             strstr(extra[e], "seqlens") ? "" : "T=141", kda_regime_name(regime), extra[e]);
    if (!strstr(desc, "HV=")) strcat(desc, " HV=4");
    kda_gen_desc d;
    kda_case one, many;
    parse_ok(desc, &d);
    kda_gen_tune(1, (int64_t)1 << 16);
    ck_assert_msg(kda_gen_case(&d, &one, err, sizeof err) == KDA_OK, "%s: %s", desc, err);
    for (int th = 2; th <= 7; th++) {
      kda_gen_tune(th, 1); /* every part a few tokens: the cuts fall everywhere */
      ck_assert_msg(kda_gen_case(&d, &many, err, sizeof err) == KDA_OK, "%s: %s", desc, err);
      same_tokens(&one, &many, desc, th);
      kda_case_free(&many);
      check_window(&d, &one, 3, one.p.T - 2, desc);
    }
    kda_gen_tune(0, (int64_t)1 << 16); /* the defaults */
    kda_case_free(&one);
    kda_gen_desc_free(&d);
  }
}
END_TEST

static Suite *gen_range_suite(void) {
  Suite *s = suite_create("gen_range");
  TCase *tc = tcase_create("range");
  tcase_add_loop_test(tc, test_range_all, 0, 8);
  tcase_add_test(tc, test_range_errors);
  tcase_add_loop_test(tc, test_range_threads, 0, 8);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return kda_test_main(gen_range_suite(), CK_NORMAL, CK_FORK_GETENV); }

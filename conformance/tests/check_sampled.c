/* check_sampled.c: sampled truth (SPEC.md §10.2, golden.o_sampled) scores exactly the stored
 * windows as the full truth does (SPEC.md §7.3).
 * SPDX-License-Identifier: MIT
 *
 * Fixtures (sampled_fixture.h) turn golden/L1 long cases into a file that keeps every window
 * ("all": every metric must equal the full file's bit for bit) and one that keeps runs of 3
 * windows ("runs": on each stored window the errors without allowance are the full file's;
 * the envelope, a running maximum over the stored windows only, is never larger than the full
 * truth's; a window that fails under the full truth fails the sampled one).  Scored backends: ref-f32, simd and
 * the long-sequence defects of plugin_long.c; each truth is computed once.
 */
#include <check.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_case.h"
#include "kda_conform.h"
#include "kda_score_internal.h"
#include "kda_worker_internal.h"
#include "kda_test.h"
#include "sampled_fixture.h"

static const char *const cases[] = {"t5000-long", "prod-lowrank-mixed", "drift-decay-small"};
static char plugin_dir[4096];

static void setup(void) {
  kda_test_tmpdir_make("sampled");
  fixture_exe_dir(plugin_dir, sizeof plugin_dir);
}

static void teardown(void) { kda_test_tmpdir_remove(); }

static kda_worker *start(const char *spec) {
  char err[KDA_ERRLEN];
  kda_backend_ref ref;
  ck_assert_msg(kda_backend_resolve(spec, &ref, err, sizeof err) == KDA_OK, "%s", err);
  kda_call_opts o = {.timeout_s = 120, .isolate = 1};
  kda_worker *w;
  ck_assert_msg(kda_worker_start(&ref, &o, &w, err, sizeof err) == KDA_OK, "%s", err);
  return w;
}

/* Bit-equal or both NaN. */
static int same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

static void expect_same_score(const kda_case_report *f, const kda_case_report *s, const char *what) {
  const kda_score *a = &f->score, *b = &s->score;
  ck_assert_msg(f->verdict == s->verdict, "%s: verdict %s, full %s", what,
                kda_verdict_name(s->verdict), kda_verdict_name(f->verdict));
  ck_assert_msg(same(a->o.worst, b->o.worst) && a->o.n_fail == b->o.n_fail &&
                same(a->ht.worst, b->ht.worst) && same(a->hc.worst, b->hc.worst),
                "%s: worst o %.17g vs full %.17g", what, b->o.worst, a->o.worst);
  ck_assert_msg(same(a->alpha, b->alpha) && a->growth_kind == b->growth_kind &&
                same(a->win_last, b->win_last) && same(a->win_worst, b->win_worst) &&
                a->first_fail_token == b->first_fail_token && a->growth_beyond == b->growth_beyond,
                "%s: growth or windows differ", what);
  ck_assert_int_eq(a->n_win_each, b->n_win_each);
  for (int64_t w = 0; w < a->n_win_each; w++)
    ck_assert_msg(same(a->win_each[w], b->win_each[w]) && same(a->win_max_each[w], b->win_max_each[w]) &&
                  same(a->win_env_each[w], b->win_env_each[w]) &&
                  same(a->win_allow_each[w], b->win_allow_each[w]), "%s: window %lld", what,
                  (long long)w);
}

static int stored(const kda_score *s, int64_t w) {
  return w < 0 || w >= s->n_win_each || !isnan(s->win_each[w]);
}

/* Runs: stored windows as the full truth says; a window failing there fails here. */
static void expect_runs(const kda_case_report *f, const kda_case_report *s, const char *what) {
  const kda_score *a = &f->score, *b = &s->score;
  int64_t kept = 0, middle = 0, must_fail = 0;
  ck_assert_int_eq(a->n_win_each, b->n_win_each);
  for (int64_t w = 0; w < b->n_win_each; w++) {
    if (isnan(b->win_each[w])) continue;
    kept++;
    ck_assert_msg(same(a->win_each[w], b->win_each[w]) && same(a->win_max_each[w], b->win_max_each[w]),
                  "%s: window %lld: error without allowance differs", what, (long long)w);
    /* the running maximum sees the stored windows only: never a larger envelope or
     * allowance, and an envelope wherever the full truth has one */
    ck_assert_msg(!(b->win_env_each[w] > a->win_env_each[w]) &&
                  isnan(b->win_env_each[w]) == isnan(a->win_env_each[w]) &&
                  !(b->win_allow_each[w] > a->win_allow_each[w]),
                  "%s: window %lld: envelope %g allowance %g, full truth %g %g", what,
                  (long long)w, b->win_env_each[w], b->win_allow_each[w], a->win_env_each[w],
                  a->win_allow_each[w]);
    if (!stored(b, w - 1) || !stored(b, w + 1)) continue;
    middle++;
    /* the token with the window's worst error has at most the largest allowance */
    if (a->win_max_each[w] / a->win_allow_each[w] > a->caps.o) must_fail++;
  }
  ck_assert_msg(kept > 0 && middle > 0 && kept < b->n_win_each, "%s: %lld windows kept", what,
                (long long)kept);
  if (must_fail) ck_assert_msg(s->verdict == KDA_VERDICT_FAIL, "%s: %lld kept windows fail under "
                               "the full truth, sampled verdict %s", what, (long long)must_fail,
                               kda_verdict_name(s->verdict));
  ck_assert_msg(same(a->ht.worst, b->ht.worst) && same(a->hc.worst, b->hc.worst),
                "%s: state errors differ", what);
}

/* A case file and its truth, loaded once for every backend. */
typedef struct loaded {
  kda_case c;
  kda_truth t;
} loaded;

static void load(const char *path, loaded *l) {
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_case_load(path, &l->c, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(kda_truth_compute(&l->c, path, &l->t, err, sizeof err) == KDA_OK, "%s", err);
}

static void unload(loaded *l) {
  kda_truth_free(&l->t);
  kda_case_free(&l->c);
}

static void score(kda_worker *w, const loaded *l, kda_case_report *r) {
  char err[KDA_ERRLEN];
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.prefix = 0;
  ck_assert_msg(kda_conform_case_worker(w, &l->c, &l->t, &o, r, err, sizeof err) == KDA_OK, "%s",
                err);
}

/* Every backend on the full file and both fixtures of each case; the first n_ok conform. */
static void check_backends(const char *const *specs, int n, int n_ok) {
  kda_worker *w[16];
  for (int i = 0; i < n; i++) w[i] = start(specs[i]);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char full[256], what[512];
    snprintf(full, sizeof full, "golden/L1/%s.npz", cases[i]);
    fixture_sampled(full, kda_test_path("all.npz"), 1);
    fixture_sampled(full, kda_test_path("runs.npz"), 0);
    loaded lf, la, lr;
    load(full, &lf), load(kda_test_path("all.npz"), &la), load(kda_test_path("runs.npz"), &lr);
    for (int b = 0; b < n; b++) {
      kda_case_report rf, ra, rr;
      score(w[b], &lf, &rf), score(w[b], &la, &ra), score(w[b], &lr, &rr);
      snprintf(what, sizeof what, "%s on %s", specs[b], cases[i]);
      ck_assert_msg(rf.has_score && ra.has_score && rr.has_score, "%s: not scored: %s", what,
                    rf.reason);
      expect_same_score(&rf, &ra, what);
      expect_runs(&rf, &rr, what);
      if (b < n_ok)
        ck_assert_msg(rr.verdict == KDA_VERDICT_PASS, "%s: sampled %s: %s", what,
                      kda_verdict_name(rr.verdict), rr.reason);
      kda_case_report_free(&rf), kda_case_report_free(&ra), kda_case_report_free(&rr);
    }
    unload(&lf), unload(&la), unload(&lr);
  }
  for (int i = 0; i < n; i++) kda_worker_stop(w[i]);
}

START_TEST(test_backends) {
  static const char *const defects[] = {"none", "cumsum_f32", "ulp_bias", "state_bf16",
                                        "exp_fp16", "beta_bf16", "chunk_first_gate",
                                        "chunk_ulp_bias"};
  char specs[10][4200];
  const char *p[10] = {"ref-f32", "simd"};
  for (int d = 0; d < 8; d++) {
    snprintf(specs[d], sizeof specs[d], "%s/kda_plugin_long.so:defect=%s", plugin_dir, defects[d]);
    p[2 + d] = specs[d];
  }
  check_backends(p, 10, 3); /* ref-f32, simd, defect=none conform */
}
END_TEST

/* A malformed index is bad input naming the file, never a wrong score. */
START_TEST(test_bad_index) {
  char err[KDA_ERRLEN];
  kda_case c;
  kda_truth t;
  const char *runs = kda_test_path("bad.npz");
  fixture_sampled("golden/L1/t5000-long.npz", runs, 0);
  ck_assert_msg(kda_case_load(runs, &c, err, sizeof err) == KDA_OK, "%s", err);
  /* a half window: drop o_index's last element by hand is hard in a zip; instead claim
   * sampling for the full file, whose o has T rows but no o_index */
  kda_case full;
  ck_assert_msg(kda_case_load("golden/L1/t5000-long.npz", &full, err, sizeof err) == KDA_OK, "%s", err);
  free(full.manifest_json);
  full.manifest_json = strdup(c.manifest_json);
  ck_assert_int_eq(kda_truth_compute(&full, "golden/L1/t5000-long.npz", &t, err, sizeof err),
                   KDA_ENOTFOUND);
  ck_assert_msg(strstr(err, "t5000-long.npz") && strstr(err, "o_index"), "%s", err);
  kda_case_free(&full);
  kda_case_free(&c);
}
END_TEST

static Suite *sampled_suite(void) {
  Suite *s = suite_create("sampled");
  TCase *tc = tcase_create("sampled");
  tcase_add_unchecked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_bad_index);
  tcase_add_test(tc, test_backends);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return kda_test_main(sampled_suite(), CK_NORMAL, CK_NOFORK); }

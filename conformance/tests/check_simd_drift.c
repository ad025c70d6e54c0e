/* check_simd_drift.c: the strict growth check of SPEC.md §7.5 on golden/L1 drift-lowrank for
 * ref-f32 and for the simd backend with every ISA this CPU has (docs/simd.md, "Drift on
 * drift-lowrank").
 * SPDX-License-Identifier: MIT
 *
 * drift-lowrank is DeltaNet with keys in a 2-D subspace of K = 4 for 65536 tokens: the state's
 * part outside the key span is never erased, so its rounding is a random walk whose path is set
 * by the last bit of every normalised key.  A kernel with a real bias there (a write or a
 * normalisation that is systematically off) makes that error grow linearly; a correct one only
 * changes the path.  For each ISA the test runs kda_conform_case with --strict and requires:
 *   - no element over its cap (the envelope rule of §7.3);
 *   - the mean error of the last window at most C = 4 times ref-f32's (§7.5's magnitude test);
 *   - a least-squares growth slope (alpha_fit, every octave of positions) below 0.75, i.e. no
 *     systematic growth by the estimator that uses the whole sequence;
 *   - a strict verdict that passes, except for a growth flag raised by the two-octave median
 *     ratio alone while the three conditions above hold: docs/simd.md explains why the AVX2
 *     ISA draws such a path on this case (kda_simd_avx2_sumsq's order) and why it is no defect.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_conform.h"
#include "kda_score_internal.h"
#include "kda_worker_internal.h"
#include "backends/simd/kda_simd.h"
#include "kda_test.h"

#define CASE_PATH "golden/L1/drift-lowrank.npz"

/* The strict report of backend b (params) on the case. */
static void run_strict(const char *backend, const char *params, const kda_case *c,
                       const kda_truth *t, kda_case_report *r) {
  char err[KDA_ERRLEN];
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.call.isolate = 0;
  o.strict = 1;
  ck_assert_msg(kda_conform_case(kda_backend_find(backend), params, c, t, &o, r, err,
                                 sizeof err) == KDA_OK, "%s %s: %s", backend, params, err);
  ck_assert_msg(r->has_score, "%s %s: not scored (%s)", backend, params, r->reason);
}

START_TEST(test_drift_lowrank_strict) {
  FILE *f = fopen(CASE_PATH, "rb");
  if (!f) return; /* the golden set is optional in a checkout; `make conform` scores it */
  fclose(f);
  char err[KDA_ERRLEN];
  kda_case c;
  kda_truth t;
  ck_assert_msg(kda_case_load(CASE_PATH, &c, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(kda_truth_compute(&c, CASE_PATH, &t, err, sizeof err) == KDA_OK, "%s", err);
  kda_case_report ref;
  run_strict("ref-f32", "", &c, &t, &ref);
  ck_assert_msg(ref.verdict == KDA_VERDICT_PASS, "ref-f32: %s", ref.reason);
  const double ref_last = ref.score.win_last;
  for (int32_t isa = 0; isa < KDA_SIMD_ISA_COUNT; isa++) {
    const char *why;
    if (!kda_simd_isa_available(isa, &why)) continue;
    char params[64];
    snprintf(params, sizeof params, "isa=%s threads=1", kda_simd_isa_name(isa));
    kda_case_report r;
    run_strict("simd", params, &c, &t, &r);
    const kda_score *s = &r.score;
    fprintf(stderr, "check_simd_drift: %s: %s, last window %.1f (ref-f32 %.1f), alpha %.2f, "
            "alpha_fit %.2f\n", params, kda_verdict_name(r.verdict), s->win_last, ref_last,
            s->alpha, s->alpha_fit);
    ck_assert_msg(s->first_fail_token < 0, "%s: over the cap at token %lld: %s", params,
                  (long long)s->first_fail_token, r.reason);
    ck_assert_msg(s->win_last <= KDA_ENVELOPE_C * ref_last,
                  "%s: last window %.1f > %g x ref-f32's %.1f", params, s->win_last,
                  KDA_ENVELOPE_C, ref_last);
    ck_assert_msg(s->alpha_fit < 0.75, "%s: systematic growth, slope %.2f over the sequence",
                  params, s->alpha_fit);
    /* Beyond the three conditions, only the median-ratio flag may fail the strict verdict. */
    ck_assert_msg(r.verdict == KDA_VERDICT_PASS ||
                      (r.verdict == KDA_VERDICT_FAIL && s->growth_beyond > 0),
                  "%s: %s %s", params, kda_verdict_name(r.verdict), r.reason);
    kda_case_report_free(&r);
  }
  kda_case_report_free(&ref);
  kda_truth_free(&t);
  kda_case_free(&c);
}
END_TEST

static Suite *drift_suite(void) {
  Suite *s = suite_create("simd_drift");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_drift_lowrank_strict);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return kda_test_main(drift_suite(), CK_NORMAL, CK_NOFORK); }

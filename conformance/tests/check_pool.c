/* check_pool.c: unit tests of state pools (SPEC.md §7.7, §7.8): the ABI fields and caps, the
 * gather adapter's contract through the worker, and the runner's state-pool decode check.
 * SPDX-License-Identifier: MIT
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
#include "kda_serving.h"

/* Three sequences (one of zero length), h0, the vk layout: a decode-like batch. */
static const char desc[] =
    "seed=11 seqlens=1,0,3 H=2 HV=4 K=8 V=4 gate=softplus beta=logit l2=fla prec=f32 h0=1 "
    "layout=vk id=pool";
static kda_case c;
static char plugin_dir[4096];

static void setup(void) {
  char err[KDA_ERRLEN];
  kda_gen_desc d;
  ck_assert_msg(kda_gen_parse(desc, &d, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(kda_gen_case(&d, &c, err, sizeof err) == KDA_OK, "%s", err);
  kda_gen_desc_free(&d);
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  ck_assert(n > 0);
  exe[n] = 0;
  snprintf(plugin_dir, sizeof plugin_dir, "%s", dirname(exe));
}

static void teardown(void) { kda_case_free(&c); }

static kda_worker *start(const char *spec) {
  char err[KDA_ERRLEN];
  kda_backend_ref ref;
  ck_assert_msg(kda_backend_resolve(spec, &ref, err, sizeof err) == KDA_OK, "%s", err);
  kda_call_opts o = {.timeout_s = 60, .isolate = 1};
  kda_worker *w;
  ck_assert_msg(kda_worker_start(&ref, &o, &w, err, sizeof err) == KDA_OK, "%s", err);
  return w;
}

#define SLOT ((int64_t)(4 * 8 * 4))
#define S 7

/* A pool of S slots: c's h0 of sequence n at slot of[n], junk (n + 1000 + i) elsewhere. */
static void fill_pool(double *pool, const int64_t *of) {
  for (int64_t i = 0; i < S * SLOT; i++) pool[i] = 1000.0 + (double)i;
  for (int n = 0; n < 3; n++)
    if (of[n] >= 0) memcpy(pool + of[n] * SLOT, c.h0 + n * SLOT, SLOT * sizeof(double));
}

static kda_call_result pool_call(kda_worker *w, const int64_t *idx, double *pool,
                                 kda_outputs *out) {
  char err[KDA_ERRLEN];
  kda_tensors_f64 in;
  kda_case_tensors(&c, &in);
  in.h0 = NULL;
  kda_call_result r;
  ck_assert_msg(kda_outputs_alloc(&c.p, out, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(kda_worker_call_pool(w, &c.p, &in, idx, S, pool, out, &r, err, sizeof err) ==
                KDA_OK, "%s", err);
  return r;
}

/* The ABI: the pool fields follow hc, the caps follow synchronize, the version-2 prefix is
 * unchanged (tables compiled before the caps stay valid). */
/* The runner's way of making the check's pool calls (kda_runner.c), on worker ctx. */
static int runner_pool_call(void *ctx, const kda_problem *p, const kda_tensors_f64 *in,
                            const int64_t *state_indices, int64_t slots, double *pool,
                            kda_outputs *out, kda_call_result *r, char *err, size_t errlen) {
  return kda_worker_call_pool(ctx, p, in, state_indices, slots, pool, out, r, err, errlen);
}

START_TEST(test_abi_layout) {
  ck_assert_uint_gt(offsetof(kda_backend_tensors, state_indices), offsetof(kda_backend_tensors, hc));
  ck_assert_uint_eq(KDA_BACKEND_V2_SIZE, offsetof(kda_backend, caps));
  kda_backend_tensors t = {.struct_size = (uint32_t)offsetof(kda_backend_tensors, state_indices)};
  ck_assert(!KDA_TENSORS_HAS_POOL(&t));
  t.struct_size = sizeof t;
  ck_assert(KDA_TENSORS_HAS_POOL(&t));
  ck_assert_int_eq(KDA_PAD_SLOT, -1);
}
END_TEST

/* ref-f64 through the worker: each named slot ends with the ordinary call's ht bit for bit,
 * the padding and free slots keep their bits, o equals the ordinary call's. */
START_TEST(test_pool_call_ref) {
  kda_worker *w = start("ref-f64");
  ck_assert_uint_eq(kda_worker_caps(w) & KDA_CAP_STATE_POOL, KDA_CAP_STATE_POOL);
  char err[KDA_ERRLEN];
  kda_outputs plain = {0}, out = {0};
  kda_tensors_f64 in;
  kda_case_tensors(&c, &in);
  kda_call_result r;
  ck_assert(kda_outputs_alloc(&c.p, &plain, err, sizeof err) == KDA_OK);
  ck_assert(kda_worker_call(w, &c.p, &in, &plain, &r, err, sizeof err) == KDA_OK);
  ck_assert_int_eq(r.outcome, KDA_CALL_OK);
  const int64_t of[3] = {5, 0, 2}, idx[3] = {5, 0, 2};
  double pool[S * SLOT], before[S * SLOT];
  fill_pool(pool, of);
  memcpy(before, pool, sizeof pool);
  r = pool_call(w, idx, pool, &out);
  ck_assert_msg(r.outcome == KDA_CALL_OK, "%s", r.msg);
  ck_assert(memcmp(out.o, plain.o, plain.n_o * 8) == 0);
  for (int n = 0; n < 3; n++)
    ck_assert_msg(memcmp(pool + of[n] * SLOT, plain.ht + n * SLOT, SLOT * 8) == 0, "slot %d", n);
  for (int s = 0; s < S; s++)
    if (s != 5 && s != 0 && s != 2)
      ck_assert_msg(memcmp(pool + s * SLOT, before + s * SLOT, SLOT * 8) == 0, "free slot %d", s);
  kda_outputs_free(&out);
  /* padding: sequence 2 skipped, its slot (2) untouched */
  const int64_t pad[3] = {5, 0, KDA_PAD_SLOT};
  fill_pool(pool, of);
  r = pool_call(w, pad, pool, &out);
  ck_assert_msg(r.outcome == KDA_CALL_OK, "%s", r.msg);
  ck_assert(memcmp(pool + 2 * SLOT, before + 2 * SLOT, SLOT * 8) == 0);
  ck_assert(memcmp(pool + 5 * SLOT, plain.ht, SLOT * 8) == 0);
  kda_outputs_free(&out);
  /* out of range (S, -2) and a slot named twice: KDA_EINVAL, every slot untouched */
  const int64_t bad[3][3] = {{5, S, 2}, {5, 0, -2}, {5, 5, 2}};
  for (int b = 0; b < 3; b++) {
    fill_pool(pool, of);
    r = pool_call(w, bad[b], pool, &out);
    ck_assert_msg(r.outcome == KDA_CALL_ERROR && r.status == KDA_EINVAL, "bad %d: %s", b, r.msg);
    ck_assert_msg(memcmp(pool, before, sizeof pool) == 0, "bad %d changed the pool", b);
    kda_outputs_free(&out);
  }
  kda_outputs_free(&plain);
  kda_worker_stop(w);
}
END_TEST

/* A backend without the capability never gets a pool call: mpfr and the version-1 plugin
 * have no caps, and the worker declines a pool call to them by itself. */
START_TEST(test_no_caps) {
  char spec[4200];
  snprintf(spec, sizeof spec, "%s/kda_plugin_v1.so", plugin_dir);
  kda_worker *w = start(spec);
  ck_assert_uint_eq(kda_worker_caps(w), 0);
  const int64_t of[3] = {5, 0, 2};
  double pool[S * SLOT], before[S * SLOT];
  fill_pool(pool, of);
  memcpy(before, pool, sizeof pool);
  kda_outputs out = {0};
  kda_call_result r = pool_call(w, of, pool, &out);
  ck_assert_int_eq(r.outcome, KDA_CALL_UNSUPPORTED);
  ck_assert(memcmp(pool, before, sizeof pool) == 0);
  kda_outputs_free(&out);
  kda_worker_stop(w);
}
END_TEST

/* The runner's check: ref-f32 passes it; each pool mutant fails it by its own mistake. */
START_TEST(test_pool_check) {
  static const char *const rows[][2] = {
      {"ref-f32", NULL},
      {"mutants:mutant=none", NULL},
      {"mutants:mutant=pool_touches_free", "named by no sequence, changed"},
      {"mutants:mutant=pool_ignores_index", "named by no sequence, changed"}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char spec[4200], err[KDA_ERRLEN];
    if (strncmp(rows[i][0], "mutants", 7) == 0)
      snprintf(spec, sizeof spec, "%s/kda_plugin_mutants.so%s", plugin_dir, rows[i][0] + 7);
    else snprintf(spec, sizeof spec, "%s", rows[i][0]);
    kda_worker *w = start(spec);
    kda_pool_result pr;
    const kda_pool_caller call = {runner_pool_call, w, kda_worker_output_dtype(w)};
    ck_assert_msg(kda_serving_pool(&call, &c, KDA_PRECISION_FP32, &pr, err, sizeof err) == KDA_OK,
                  "%s", err);
    ck_assert_int_eq(pr.outcome, KDA_CALL_OK);
    if (!rows[i][1]) ck_assert_msg(!pr.failed, "%s: %s", rows[i][0], pr.msg);
    else ck_assert_msg(pr.failed && strstr(pr.msg, rows[i][1]), "%s: '%s'", rows[i][0], pr.msg);
    kda_worker_stop(w);
  }
}
END_TEST

/* The report says whether the check ran: ref-f32 declares pools, the version-1 plugin not. */
START_TEST(test_report_flag) {
  char err[KDA_ERRLEN], spec[4200];
  kda_truth t;
  ck_assert_msg(kda_truth_compute(&c, NULL, &t, err, sizeof err) == KDA_OK, "%s", err);
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.prefix = 1; /* the serving-path checks, as kda conform runs them by default */
  snprintf(spec, sizeof spec, "%s/kda_plugin_v1.so", plugin_dir);
  const char *specs[2] = {"ref-f32", spec};
  for (int i = 0; i < 2; i++) {
    kda_worker *w = start(specs[i]);
    kda_case_report r;
    ck_assert_msg(kda_conform_case_worker(w, &c, &t, &o, &r, err, sizeof err) == KDA_OK, "%s", err);
    ck_assert_msg(r.verdict == KDA_VERDICT_PASS, "%s: %s", specs[i], r.reason);
    ck_assert_int_eq(r.pool_done, i == 0);
    kda_case_report_free(&r);
    kda_worker_stop(w);
  }
  kda_truth_free(&t);
}
END_TEST

static Suite *pool_suite(void) {
  Suite *s = suite_create("pool");
  TCase *tc = tcase_create("pool");
  tcase_add_unchecked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_abi_layout);
  tcase_add_test(tc, test_pool_call_ref);
  tcase_add_test(tc, test_no_caps);
  tcase_add_test(tc, test_pool_check);
  tcase_add_test(tc, test_report_flag);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(pool_suite());
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

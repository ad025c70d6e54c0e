/* check_stream.c: streaming scoring in bounded memory (SPEC.md §7.10) scores as the whole
 * case does.
 * SPDX-License-Identifier: MIT
 *
 * 1. golden/L1 cases streamed in chunks of 1024 and of 64 tokens (stored inputs read by range)
 *    give every metric of the whole-case scoring bit for bit, for ref-f32, simd and the
 *    long-sequence defects that act per step or at 64-token chunk boundaries (chunks of
 *    multiples of 64 keep those boundaries); sequences of a varlen case, h0, checkpoints and
 *    both state layouts included;
 * 2. the same for sampled truth (sampled_fixture.h) and for generated inputs (kda_gen_range);
 * 3. a non-finite input inside a chunk is bad input naming the file and the member;
 * 4. a backend that declines the chained call (plugin_long's no_h0) is scored whole and the
 *    report says so; the defect cumsum_f32 restarts its prefix sum at each chained call, which
 *    is why streaming is a choice (--no-stream, --chunk);
 * 5. crashes, input writes and nondeterminism of chained calls get their verdicts;
 * 6. a case file is opened once (kda_case_file): removed from disk right after the open, it is
 *    still scored whole, streamed, and whole after a declined chained call.
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

static char plugin_dir[4096];

static void setup(void) {
  kda_test_tmpdir_make("stream");
  fixture_exe_dir(plugin_dir, sizeof plugin_dir);
}

static void teardown(void) { kda_test_tmpdir_remove(); }

static kda_worker *start(const char *spec) {
  char err[KDA_ERRLEN], full[4200];
  if (strncmp(spec, "long:", 5) == 0)
    snprintf(full, sizeof full, "%s/kda_plugin_long.so:%s", plugin_dir, spec + 5);
  else
    snprintf(full, sizeof full, "%s", spec);
  kda_backend_ref ref;
  ck_assert_msg(kda_backend_resolve(full, &ref, err, sizeof err) == KDA_OK, "%s", err);
  kda_call_opts o = {.timeout_s = 120, .isolate = 1};
  kda_worker *w;
  ck_assert_msg(kda_worker_start(&ref, &o, &w, err, sizeof err) == KDA_OK, "%s", err);
  return w;
}

static int same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

static int same_q(const kda_qmetric *a, const kda_qmetric *b) {
  return a->count == b->count && same(a->worst, b->worst) && a->worst_index == b->worst_index &&
         same(a->max_abs, b->max_abs) && same(a->rms_ratio, b->rms_ratio) &&
         a->n_fail == b->n_fail && a->n_nan == b->n_nan && a->n_inf == b->n_inf;
}

static void expect_same(const kda_case_report *a, const kda_case_report *b, const char *what) {
  const kda_score *x = &a->score, *y = &b->score;
  ck_assert_msg(a->verdict == b->verdict && a->has_score && b->has_score,
                "%s: streamed %s (%s), whole %s (%s)", what, kda_verdict_name(b->verdict),
                b->reason, kda_verdict_name(a->verdict), a->reason);
  ck_assert_msg(same_q(&x->o, &y->o) && same_q(&x->ht, &y->ht) && same_q(&x->hc, &y->hc),
                "%s: o %.17g vs %.17g, ht %.17g vs %.17g", what, y->o.worst, x->o.worst,
                y->ht.worst, x->ht.worst);
  ck_assert_msg(same(x->alpha, y->alpha) && same(x->alpha_fit, y->alpha_fit) &&
                x->growth_kind == y->growth_kind && x->growth_beyond == y->growth_beyond &&
                same(x->win_first, y->win_first) && same(x->win_last, y->win_last) &&
                same(x->win_worst, y->win_worst) && x->first_fail_token == y->first_fail_token,
                "%s: windows or growth differ", what);
  ck_assert_int_eq(x->n_win_each, y->n_win_each);
  for (int64_t w = 0; w < x->n_win_each; w++)
    ck_assert_msg(same(x->win_each[w], y->win_each[w]) && same(x->win_max_each[w], y->win_max_each[w]) &&
                  same(x->win_env_each[w], y->win_env_each[w]) &&
                  same(x->win_allow_each[w], y->win_allow_each[w]),
                  "%s: window %lld", what, (long long)w);
  for (int64_t c = 0; c < x->n_hc_each; c++) ck_assert(same(x->hc_each[c], y->hc_each[c]));
  ck_assert_msg(b->stream_chunk > 0 && a->stream_chunk == 0, "%s: stream_chunk", what);
}

/* A case whole and streamed, each backend scored on both. */
static void compare(const char *path, int64_t chunk, const char *const *specs, int nspec) {
  char err[KDA_ERRLEN], what[512];
  kda_case whole, part;
  kda_truth tw, ts;
  ck_assert_msg(kda_case_load(path, &whole, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(kda_truth_compute(&whole, path, &tw, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(kda_case_load_static(path, &part, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert(part.q == NULL && part.v == NULL);
  ck_assert_msg(kda_truth_stream(&part, path, chunk, &ts, err, sizeof err) == KDA_OK, "%s", err);
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.prefix = 0;
  for (int i = 0; i < nspec; i++) {
    kda_worker *w = start(specs[i]);
    kda_case_report a, b;
    ck_assert_msg(kda_conform_case_worker(w, &whole, &tw, &o, &a, err, sizeof err) == KDA_OK, "%s", err);
    ck_assert_msg(kda_conform_case_worker(w, &part, &ts, &o, &b, err, sizeof err) == KDA_OK, "%s", err);
    snprintf(what, sizeof what, "%s on %s, chunk %lld", specs[i], path, (long long)chunk);
    expect_same(&a, &b, what);
    kda_case_report_free(&a), kda_case_report_free(&b);
    kda_worker_stop(w);
  }
  kda_truth_free(&tw), kda_truth_free(&ts);
  kda_case_free(&whole), kda_case_free(&part);
}

static const char *const conforming[] = {"ref-f32", "simd", "ref-f64"};
static const char *const defects[] = {"long:defect=state_bf16", "long:defect=chunk_first_gate",
                                      "long:defect=ulp_bias", "long:defect=exp_fp16"};

START_TEST(test_l1_cases) {
  static const char *const cases[] = {"t5000-long", "drift-lowrank", "t64-softplus-h0",
                                      "t65-lower-bound-vk", "gqa-mod", "prod-lowrank-mixed"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char path[256];
    snprintf(path, sizeof path, "golden/L1/%s.npz", cases[i]);
    compare(path, 1024, conforming, 3);
    compare(path, 1024, defects, 4);
  }
  compare("golden/L1/t5000-long.npz", 64, conforming, 2);
}
END_TEST

/* Varlen: every sequence chained on its own, empty ones included. */
START_TEST(test_varlen) {
  static const char *const cases[] = {"varlen-all-empty", "t16-lower-bound-mod"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char path[256];
    snprintf(path, sizeof path, "golden/L1/%s.npz", cases[i]);
    compare(path, 64, conforming, 3);
  }
  const char *gen = kda_test_path("varlen.npz");
  fixture_generated("seed=9 seqlens=300,0,700,65 H=2 HV=4 K=8 V=4 gate=softplus beta=logit "
                    "l2=fla prec=f32 h0=1 alog=1 checkpoints=1,299,300,999,1064 id=varlen",
                    gen, 1);
  compare(gen, 128, conforming, 3);
}
END_TEST

START_TEST(test_sampled_and_generated) {
  const char *runs = kda_test_path("runs.npz");
  fixture_sampled("golden/L1/drift-decay-small.npz", runs, 0);
  compare(runs, 4096, conforming, 2);
  compare(runs, 4096, defects, 4);
  const char *desc = "seed=3 T=5000 H=1 HV=2 K=16 V=8 gate=softplus beta=logit l2=fla "
                     "regime=mixed prec=bf16 checkpoints=log final=1 h0=1 alog=1 id=gen";
  const char *none = kda_test_path("gen-none.npz"), *gruns = kda_test_path("gen-runs.npz");
  fixture_generated(desc, none, 0);
  fixture_generated(desc, gruns, 2);
  compare(none, 1024, conforming, 2);
  compare(gruns, 1024, conforming, 2);
  compare(gruns, 1024, defects, 4);
}
END_TEST

/* A NaN at token 3000 of q: found in the chunk that holds it, naming the file and member. */
START_TEST(test_bad_window) {
  char err[KDA_ERRLEN];
  kda_gen_desc d;
  kda_case c;
  ck_assert(kda_gen_parse("seed=1 T=4000 H=1 HV=1 K=4 V=4 prec=f64 id=nan", &d, err, sizeof err) == KDA_OK);
  ck_assert(kda_gen_case(&d, &c, err, sizeof err) == KDA_OK);
  const char *ok = kda_test_path("ok.npz"), *bad = kda_test_path("nan.npz");
  ck_assert_msg(kda_case_save(ok, &c, NULL, err, sizeof err) == KDA_OK, "%s", err);
  /* the same members, q with a NaN (kda_case_save refuses one) */
  kda_npz *z;
  kda_npz_writer *w;
  char *man;
  ck_assert(kda_npz_open(ok, &z, err, sizeof err) == KDA_OK);
  ck_assert(kda_npz_read_blob(z, "manifest.json", &man, NULL, err, sizeof err) == KDA_OK);
  ck_assert(kda_npz_writer_open(bad, &w, err, sizeof err) == KDA_OK);
  ck_assert(kda_npz_writer_set_manifest(w, man, err, sizeof err) == KDA_OK);
  for (int64_t m = 0; m < kda_npz_count(z); m++) {
    kda_array_info in;
    double *x;
    ck_assert(kda_npz_load_f64(z, kda_npz_name(z, m), &in, &x, err, sizeof err) == KDA_OK);
    if (strcmp(kda_npz_name(z, m), "q") == 0) x[3000 * 4 + 2] = NAN;
    ck_assert_msg(kda_npz_writer_add_f64(w, kda_npz_name(z, m), in.dtype, in.ndim, in.shape, x,
                                         err, sizeof err) == KDA_OK, "%s", err);
    free(x);
  }
  ck_assert(kda_npz_writer_commit(w, err, sizeof err) == KDA_OK);
  kda_npz_close(z);
  free(man);
  /* the command: exit 2, one line naming the file, no report written */
  kda_test_result r = {0};
  const char *jl = kda_test_path("r.jsonl");
  kda_test_run(&r, "conform", "--stream", "--chunk", "1024", "-b", "ref-f32", "--jsonl", jl, bad,
               NULL);
  kda_test_expect_error(&r, "NaN in a chunk", "kda conform: ", "nan.npz", "'q'", NULL);
  ck_assert(!kda_test_exists(jl));
  kda_test_run(&r, "conform", "--chunk", "100", bad, NULL);
  kda_test_expect_error(&r, "--chunk 100", "kda conform: ", "--chunk", "64", NULL);
  kda_test_run(&r, "conform", "--stream", "--chunk", "1024", "-b", "ref-f32", "--no-prefix", ok,
               NULL);
  ck_assert_msg(r.status == 0 && strstr(r.out, "streamed 1024"), "%d %s %s", r.status, r.out, r.err);
  kda_test_run(&r, "conform", "-b", "ref-f32", "--no-prefix", ok, NULL); /* short: whole */
  ck_assert_msg(r.status == 0 && !strstr(r.out, "streamed"), "%s", r.out);
  kda_test_result_free(&r);
  kda_case s;
  kda_truth t;
  ck_assert_msg(kda_case_load_static(bad, &s, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_int_eq(kda_truth_stream(&s, bad, 1024, &t, err, sizeof err), KDA_ENONFINITE);
  ck_assert_msg(strstr(err, "nan.npz") && strstr(err, "'q'") && strstr(err, "12002"), "%s", err);
  ck_assert_int_eq(kda_truth_stream(&s, bad, 1000, &t, err, sizeof err), KDA_EINVAL); /* not 64k */
  /* a flipped bit in a stored member: ranges check no CRC, the stream's open does */
  size_t len;
  unsigned char *bytes = kda_test_slurp(ok, &len);
  ck_assert(len > 20000);
  bytes[10000] ^= 0x10;
  const char *flip = kda_test_path("flip.npz");
  kda_test_write_all(flip, bytes, len);
  free(bytes);
  ck_assert_int_eq(kda_truth_stream(&s, flip, 1024, &t, err, sizeof err), KDA_EFORMAT);
  ck_assert_msg(strstr(err, "flip.npz"), "%s", err);
  kda_case_free(&s);
  kda_case_free(&c);
  kda_gen_desc_free(&d);
}
END_TEST

/* A backend without h0 cannot be chained: scored whole, and the report says so. */
START_TEST(test_fallback_and_cumsum) {
  char err[KDA_ERRLEN];
  const char *path = "golden/L1/t5000-long.npz";
  kda_case part;
  kda_truth ts;
  ck_assert(kda_case_load_static(path, &part, err, sizeof err) == KDA_OK);
  ck_assert(kda_truth_stream(&part, path, 1024, &ts, err, sizeof err) == KDA_OK);
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.prefix = 0;
  kda_worker *w = start("long:no_h0");
  kda_case_report r;
  ck_assert_msg(kda_conform_case_worker(w, &part, &ts, &o, &r, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(r.verdict == KDA_VERDICT_PASS && r.stream_chunk == 0 &&
                strstr(r.reason, "scored whole"), "%s: %s", kda_verdict_name(r.verdict), r.reason);
  kda_case_report_free(&r);
  kda_worker_stop(w);
  /* cumsum_f32's prefix sum spans one call: chained calls of 1024 tokens shrink its error */
  w = start("long:defect=cumsum_f32");
  ck_assert(kda_conform_case_worker(w, &part, &ts, &o, &r, err, sizeof err) == KDA_OK);
  kda_case whole;
  kda_truth tw;
  kda_case_report rw;
  ck_assert(kda_case_load(path, &whole, err, sizeof err) == KDA_OK);
  ck_assert(kda_truth_compute(&whole, path, &tw, err, sizeof err) == KDA_OK);
  ck_assert(kda_conform_case_worker(w, &whole, &tw, &o, &rw, err, sizeof err) == KDA_OK);
  ck_assert_msg(rw.verdict == KDA_VERDICT_FAIL && r.score.o.worst < rw.score.o.worst,
                "cumsum_f32: streamed %g, whole %g", r.score.o.worst, rw.score.o.worst);
  kda_case_report_free(&r), kda_case_report_free(&rw);
  kda_worker_stop(w);
  kda_truth_free(&ts), kda_truth_free(&tw);
  kda_case_free(&part), kda_case_free(&whole);
}
END_TEST

/* The verdicts of SPEC.md §7.6/§7.8 hold for chained calls: a crash names the chunk,
 * --repeat compares every chunk, an input write is a Fail. */
START_TEST(test_faults) {
  static const char *const rows[][3] = {
      {"nondet", "WARN ", "repeat DIFFERS"},
      {"segv_forward", "CRASH ", "chained call on tokens [0, 1024)"},
      {"write_q", "FAIL ", "modified input 'q'"}};
  kda_test_result r = {0};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char spec[4200];
    snprintf(spec, sizeof spec, "%s:fault=%s", kda_test_plugin_path("kda_plugin_faults.so"),
             rows[i][0]);
    kda_test_run(&r, "conform", "-q", "--stream", "--chunk", "1024", "--repeat", "--no-prefix",
                 "--max-lines", "0", "-p", spec, "golden/L1/t5000-long.npz", NULL);
    ck_assert_msg(strncmp(r.out, rows[i][1], strlen(rows[i][1])) == 0 && strstr(r.out, rows[i][2]),
                  "fault %s: %s", rows[i][0], r.out);
  }
  kda_test_result_free(&r);
}
END_TEST

/* Everything of a case is read through the one open of its file: the file removed from
 * disk right after kda_case_file_open, its truth (golden, member hashes verified) and a
 * backend's score still come, for a whole case, a streamed one, and a streamed one scored
 * whole because the backend declines the chained call. */
START_TEST(test_one_open) {
  static const struct { int32_t mode; const char *spec, *reason; } rows[] = {
      {KDA_CASE_STREAM_NEVER, "ref-f32", ""},
      {KDA_CASE_STREAM_ALWAYS, "ref-f32", ""},
      {KDA_CASE_STREAM_ALWAYS, "long:no_h0", "scored whole"}};
  size_t len;
  unsigned char *bytes = kda_test_read_all("golden/L1/t5000-long.npz", &len);
  char *copy = strdup(kda_test_path("once.npz"));
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char err[KDA_ERRLEN];
    kda_test_write_all(copy, bytes, len);
    kda_case_file f;
    ck_assert_msg(kda_case_file_open(copy, rows[i].mode, 1024, &f, err, sizeof err) == KDA_OK,
                  "%s", err);
    ck_assert_int_eq(unlink(copy), 0);
    ck_assert_msg(kda_case_file_truth(&f, err, sizeof err) == KDA_OK, "row %zu: %s", i, err);
    ck_assert(f.t.from_golden || f.streamed);
    kda_conform_opts o;
    kda_conform_opts_init(&o);
    o.prefix = 0;
    kda_worker *w = start(rows[i].spec);
    kda_case_report r;
    ck_assert_msg(kda_conform_case_worker(w, &f.c, &f.t, &o, &r, err, sizeof err) == KDA_OK,
                  "row %zu: %s", i, err);
    ck_assert_msg(r.verdict == KDA_VERDICT_PASS && strstr(r.reason, rows[i].reason),
                  "row %zu: %s: %s", i, kda_verdict_name(r.verdict), r.reason);
    kda_case_report_free(&r);
    kda_worker_stop(w);
    kda_case_file_close(&f);
  }
  free(copy), free(bytes);
}
END_TEST

static Suite *stream_suite(void) {
  Suite *s = suite_create("stream");
  TCase *tc = tcase_create("stream");
  tcase_add_unchecked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_bad_window);
  tcase_add_test(tc, test_fallback_and_cumsum);
  tcase_add_test(tc, test_faults);
  tcase_add_test(tc, test_one_open);
  tcase_add_test(tc, test_varlen);
  tcase_add_test(tc, test_sampled_and_generated);
  tcase_add_test(tc, test_l1_cases);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return kda_test_main(stream_suite(), CK_NORMAL, CK_NOFORK); }

/* check_conformance.c: unit tests of the conformance runner: ABI checks, plugins, isolation,
 * scoring, mutation testing of the case set, candidates, waivers and reports.
 * SPDX-License-Identifier: MIT
 */
#include <check.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kda_case.h"
#include "kda_conform.h"
#include "kda_score_internal.h"
#include "kda_worker_internal.h"
#include "kda_npz.h"
#include "kda_serving.h"
#include "kda_test.h"

/* The fixed set of generated cases (golden/L1 replaces it when present; see SPEC.md §7.7). */
static const char *const case_descs[] = {
    "seed=1 T=16 H=2 HV=4 K=8 V=8 gate=softplus beta=logit l2=fla prec=bf16 id=small",
    "seed=3 T=300 H=2 HV=4 K=16 V=16 gate=softplus beta=logit l2=fla prec=bf16 h0=1 "
    "checkpoints=log id=long",
    "seed=4 T=1024 H=1 HV=2 K=8 V=12 regime=lowrank family=deltanet beta=logit l2=fla prec=f32 "
    "h0=1 id=lowrank-long",
    "seed=5 T=96 H=2 HV=4 K=16 V=16 gate=lower_bound lb=-5 beta=logit l2=fla prec=bf16 h0=1 "
    "layout=vk checkpoints=log id=lb-vk",
    "seed=8 seqlens=5,0,37,100 H=2 HV=4 K=16 V=8 family=gdn gate=softplus beta=logit_neg l2=ggml "
    "prec=f16 h0=1 checkpoints=3,40,120 id=varlen-gdn",
};
#define N_CASES (sizeof case_descs / sizeof case_descs[0])

static const char *const mutant_names[] = {
    "erase_before_decay", "readout_before_write", "predict_undecayed", "decay_value_axis",
    "transposed_state", "scale_on_k", "wrong_head_map", "beta_bf16", "f32_ulp_bias",
    "drop_h0", "exp2_gate"};

static kda_case cases[N_CASES];
static kda_truth truths[N_CASES];
static char plugin_dir[4096];

static void setup(void) {
  char err[KDA_ERRLEN];
  for (size_t i = 0; i < N_CASES; i++) {
    kda_gen_desc d;
    ck_assert_msg(kda_gen_parse(case_descs[i], &d, err, sizeof err) == KDA_OK, "%s", err);
    ck_assert_msg(kda_gen_case(&d, &cases[i], err, sizeof err) == KDA_OK, "%s", err);
    kda_gen_desc_free(&d);
    if (!cases[i].id) cases[i].id = strdup("case");
    ck_assert_msg(kda_truth_compute(&cases[i], NULL, &truths[i], err, sizeof err) == KDA_OK, "%s",
                  err);
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  ck_assert(n > 0);
  exe[n] = 0;
  snprintf(plugin_dir, sizeof plugin_dir, "%s", dirname(exe));
}

static void teardown(void) {
  for (size_t i = 0; i < N_CASES; i++) kda_truth_free(&truths[i]), kda_case_free(&cases[i]);
}

static kda_plugin *load(const char *name, const kda_backend **b) {
  char path[4200], err[KDA_ERRLEN];
  kda_plugin *p = NULL;
  snprintf(path, sizeof path, "%s/kda_plugin_%s.so", plugin_dir, name);
  ck_assert_msg(kda_plugin_load(path, &p, b, err, sizeof err) == KDA_OK, "%s", err);
  return p;
}

static int32_t run_one(const kda_backend *b, const char *params, size_t i,
                       const kda_conform_opts *o, kda_case_report *r) {
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_conform_case(b, params, &cases[i], &truths[i], o, r, err, sizeof err) == KDA_OK,
                "%s", err);
  kda_case_report_free(r); /* the scalar fields stay; r is reused from call to call */
  return r->verdict;
}

/* The allowance of SPEC.md §7.3: the step allowance without an envelope; with one, the cap or
 * C times the running maximum of the honest evaluations' window errors (each window also
 * seeing the next), with no step-allowance ceiling; NaN windows (not held) get L(n). */
START_TEST(test_envelope_allowance) {
  double win[6] = {0.0, 100.0, 0.0, 0.0, 2.0, NAN}, each[2] = {32.0, INFINITY};
  kda_envelope env = {.o = win, .ht = each, .n_win = 6};
  kda_envelope_finish(&env);
  ck_assert(win[0] == 100.0 && win[1] == 100.0 && win[4] == 100.0 && isnan(win[5]));
  ck_assert(kda_envelope_allow_o(NULL, 10, 64.0, 1024) == kda_step_allowance(1024));
  ck_assert(kda_step_allowance(1024) == 4.0 && kda_step_allowance(100) == 1.0);
  /* window 0 sees window 1's 100 units: 4 * 100 / 64 = 6.25, whatever n */
  ck_assert(kda_envelope_allow_o(&env, 0, 64.0, 10000) == 6.25);
  ck_assert(kda_envelope_allow_o(&env, 0, 64.0, 1) == 6.25); /* no n/256 ceiling */
  ck_assert(kda_envelope_allow_o(&env, 4 * 64, 64.0, 10000) == 6.25); /* running maximum */
  ck_assert(kda_envelope_allow_o(&env, 5 * 64, 64.0, 10000) == kda_step_allowance(10000));
  double small[3] = {2.0, 1.0, 3.0};
  kda_envelope env2 = {.o = small, .n_win = 3};
  kda_envelope_finish(&env2);
  ck_assert(small[0] == 2.0 && small[1] == 3.0 && small[2] == 3.0);
  ck_assert(kda_envelope_allow_o(&env2, 0, 64.0, 10000) == 1.0); /* 4 * 2 / 64 < 1 */
  ck_assert(kda_envelope_allow_state(each, 0, 64.0, 65536) == 2.0);
  ck_assert(kda_envelope_allow_state(each, 1, 64.0, 65536) == 256.0); /* inf: L(n) */
  ck_assert(kda_envelope_allow_state(NULL, 0, 64.0, 65536) == 256.0);
}
END_TEST

START_TEST(test_registry) {
  char err[KDA_ERRLEN];
  ck_assert_int_ge(kda_backend_builtin_count(), 2); /* + the simd backends */
  const kda_backend *f64 = kda_backend_find("ref-f64"), *f32 = kda_backend_find("ref-f32");
  ck_assert_ptr_nonnull(f64);
  ck_assert_ptr_nonnull(f32);
  ck_assert_ptr_null(kda_backend_find("nope"));
  ck_assert_int_eq(kda_backend_validate(f64, err, sizeof err), KDA_OK);
  ck_assert_int_eq(f32->precision_class, KDA_PRECISION_FP32);
  kda_backend bad = *f64;
  bad.abi_version = 99;
  ck_assert_int_eq(kda_backend_validate(&bad, err, sizeof err), KDA_EUNSUPPORTED);
  bad = *f64;
  bad.struct_size = 8;
  ck_assert_int_eq(kda_backend_validate(&bad, err, sizeof err), KDA_EINVAL);
  bad = *f64;
  bad.forward = NULL;
  ck_assert_int_eq(kda_backend_validate(&bad, err, sizeof err), KDA_EINVAL);
  bad = *f64;
  bad.precision_class = 17;
  ck_assert_int_eq(kda_backend_validate(&bad, err, sizeof err), KDA_EINVAL);
  bad = *f64;
  bad.reserved0 = 1;
  ck_assert_int_eq(kda_backend_validate(&bad, err, sizeof err), KDA_EINVAL);
  kda_plugin *p;
  const kda_backend *b;
  ck_assert_int_eq(kda_plugin_load("/nonexistent/x.so", &p, &b, err, sizeof err), KDA_EIO);
  int32_t cls;
  ck_assert_int_eq(kda_precision_parse("bf16", &cls), KDA_OK);
  ck_assert(kda_class_unit(cls) == 0x1p-8);
  ck_assert_int_eq(kda_precision_parse("fp8", &cls), KDA_EINVAL);
  ck_assert_str_eq(kda_class_name(KDA_CLASS_BF16), "bf16"); /* the 0.1 names still compile */
  ck_assert_int_eq(kda_class_parse("fp16", &cls), KDA_OK);
  ck_assert_int_eq(cls, KDA_PRECISION_FP16);
}
END_TEST

static int noop_sync(void *h) { return KDA_OK; }
static int32_t noop_create(void *h, const kda_problem *p, const kda_backend_tensors *t,
                           void **buf) {
  return KDA_EUNSUPPORTED;
}

/* SPEC.md §7.8's table rules: sizes per version, buffer slots all or none, synchronize with
 * them; every rejection says why. */
START_TEST(test_validate_v2) {
  char err[KDA_ERRLEN];
  const kda_backend *f64 = kda_backend_find("ref-f64");
  ck_assert_uint_eq(KDA_BACKEND_V1_SIZE, 8 + 2 * sizeof(void *) + 16 + 5 * sizeof(void *));
  ck_assert_uint_lt(KDA_BACKEND_V1_SIZE, KDA_BACKEND_V2_SIZE);
  ck_assert_uint_eq(KDA_PROBLEM_V1_SIZE, 7 * 8 + 10 * 4 + 3 * 8); /* the 0.1 kda_problem */
  ck_assert_uint_eq(sizeof(kda_problem), KDA_PROBLEM_V1_SIZE + 8);
  kda_backend t = *f64;
  t.abi_version = 1, t.struct_size = KDA_BACKEND_V1_SIZE;
  t.buffers_create = noop_create; /* past a v1 table's end: never looked at */
  ck_assert_msg(kda_backend_validate(&t, err, sizeof err) == KDA_OK, "%s", err);
  t.struct_size = KDA_BACKEND_V1_SIZE - 1;
  ck_assert_int_eq(kda_backend_validate(&t, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "smaller than the version-1 table"));
  t = *f64;
  t.struct_size = KDA_BACKEND_V1_SIZE; /* ABI 2 with a version-1 size */
  ck_assert_int_eq(kda_backend_validate(&t, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "smaller than the version-2 table"));
  t.struct_size = KDA_BACKEND_V2_SIZE + 64; /* a later, longer table: its prefix is read */
  ck_assert_msg(kda_backend_validate(&t, err, sizeof err) == KDA_OK, "%s", err);
  t = *f64;
  t.buffers_create = noop_create;
  ck_assert_int_eq(kda_backend_validate(&t, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "1 of the 4 buffer functions"));
  const kda_backend *v2 = NULL;
  kda_plugin *pl = load("v2", &v2);
  ck_assert_msg(kda_backend_validate(v2, err, sizeof err) == KDA_OK, "%s", err);
  t = *v2;
  t.synchronize = NULL;
  ck_assert_int_eq(kda_backend_validate(&t, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "no synchronize"));
  t = *v2;
  t.buffers_read = NULL;
  ck_assert_int_eq(kda_backend_validate(&t, err, sizeof err), KDA_EINVAL);
  t = *v2;
  t.describe = NULL, t.synchronize = noop_sync; /* describe is optional */
  ck_assert_msg(kda_backend_validate(&t, err, sizeof err) == KDA_OK, "%s", err);
  kda_plugin_unload(pl);
}
END_TEST

/* A version-1 table whose memory ends at its last version-1 slot (a guard page follows):
 * validating it and scoring it read nothing past KDA_BACKEND_V1_SIZE. */
START_TEST(test_v1_table_at_page_end) {
  const long pg = sysconf(_SC_PAGESIZE);
  char *mem = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  ck_assert(mem != MAP_FAILED);
  ck_assert_int_eq(mprotect(mem + pg, (size_t)pg, PROT_NONE), 0);
  kda_backend *t = (kda_backend *)(void *)(mem + pg - KDA_BACKEND_V1_SIZE);
  memcpy(t, kda_backend_find("ref-f64"), KDA_BACKEND_V1_SIZE);
  t->abi_version = 1, t->struct_size = KDA_BACKEND_V1_SIZE;
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_backend_validate(t, err, sizeof err) == KDA_OK, "%s", err);
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  kda_case_report r;
  ck_assert_msg(run_one(t, "", 0, &o, &r) == KDA_VERDICT_PASS, "%s", r.reason);
  kda_case_report_free(&r);
  munmap(mem, (size_t)pg * 2);
}
END_TEST

/* A plugin built against the version-1 headers (conformance/tests/abi_v1) loads, is never
 * asked for a version-2 slot, and passes: its problems carry fields it does not know. */
START_TEST(test_v1_plugin) {
  const kda_backend *b;
  kda_plugin *pl = load("v1", &b);
  ck_assert_uint_eq(b->abi_version, 1);
  ck_assert_uint_eq(b->struct_size, KDA_BACKEND_V1_SIZE);
  ck_assert(!KDA_BACKEND_HAS(b, describe) && !KDA_BACKEND_HAS(b, synchronize));
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.repeat = 1;
  for (size_t i = 0; i < N_CASES; i += 4) { /* small, and varlen with checkpoints */
    kda_case_report r;
    ck_assert_msg(run_one(b, "", i, &o, &r) == KDA_VERDICT_PASS, "%s: %s", case_descs[i],
                  r.reason);
    kda_case_report_free(&r);
  }
  kda_plugin_unload(pl);
}
END_TEST

/* Float64 input buffers of case c and (NULL when out is NULL) output buffers of out. */
static kda_backend_tensors case_tensors(const kda_case *c, kda_outputs *out) {
  kda_backend_tensors t = {.struct_size = sizeof t, .in_dtype = KDA_PRECISION_FP64,
                           .out_dtype = KDA_PRECISION_FP64};
  t.q = c->q, t.k = c->k, t.v = c->v, t.g = c->g, t.beta = c->beta, t.A_log = c->A_log;
  t.dt_bias = c->dt_bias, t.h0 = c->h0, t.cu_seqlens = c->cu_seqlens;
  t.checkpoints = c->checkpoints;
  if (out) t.o = out->o, t.ht = out->ht, t.hc = out->hc;
  return t;
}

static void same_outputs(const kda_outputs *a, const kda_outputs *b, const char *what) {
  ck_assert(a->n_o == b->n_o && a->n_ht == b->n_ht && a->n_hc == b->n_hc);
  ck_assert_msg(memcmp(a->o, b->o, a->n_o * 8) == 0, "%s: o differs", what);
  ck_assert_msg(!a->n_ht || memcmp(a->ht, b->ht, a->n_ht * 8) == 0, "%s: ht differs", what);
  ck_assert_msg(!a->n_hc || memcmp(a->hc, b->hc, a->n_hc * 8) == 0, "%s: hc differs", what);
}

/* The version-2 sequence on the test plugin: buffers_create, forward_buffers (twice),
 * synchronize, buffers_read, buffers_destroy gives forward's outputs bit for bit. */
START_TEST(test_v2_buffers) {
  const kda_backend *b;
  kda_plugin *pl = load("v2", &b);
  char err[KDA_ERRLEN] = "";
  void *h = NULL;
  ck_assert_int_eq(b->open("", &h, err, sizeof err), KDA_OK);
  ck_assert(KDA_BACKEND_HAS(b, describe) && b->describe);
  kda_backend_info info = {.struct_size = sizeof info};
  ck_assert_int_eq(b->describe(h, &info), KDA_OK);
  ck_assert(info.device[0] != 0 && info.is_device == 0);
  for (size_t i = 0; i < N_CASES; i++) {
    const kda_case *c = &cases[i];
    kda_outputs direct, resident;
    ck_assert_int_eq(kda_outputs_alloc(&c->p, &direct, err, sizeof err), KDA_OK);
    ck_assert_int_eq(kda_outputs_alloc(&c->p, &resident, err, sizeof err), KDA_OK);
    kda_backend_tensors t = case_tensors(c, &direct);
    ck_assert_msg(b->forward(h, &c->p, &t) == KDA_OK, "%s", b->last_error(h));
    kda_backend_tensors in = case_tensors(c, NULL);
    void *buf = NULL;
    ck_assert_msg(b->buffers_create(h, &c->p, &in, &buf) == KDA_OK, "%s", b->last_error(h));
    ck_assert_int_eq(b->forward_buffers(h, &c->p, buf), KDA_OK);
    ck_assert_int_eq(b->forward_buffers(h, &c->p, buf), KDA_OK);
    ck_assert_int_eq(b->synchronize(h), KDA_OK);
    kda_backend_tensors rd = case_tensors(c, &resident);
    ck_assert_msg(b->buffers_read(h, buf, &rd) == KDA_OK, "%s", b->last_error(h));
    b->buffers_destroy(h, buf);
    same_outputs(&direct, &resident, case_descs[i]);
    kda_outputs_free(&direct), kda_outputs_free(&resident);
  }
  b->buffers_destroy(h, NULL);
  b->close(h);
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  kda_case_report r;
  ck_assert_msg(run_one(b, "", 0, &o, &r) == KDA_VERDICT_PASS, "%s", r.reason);
  kda_case_report_free(&r);
  kda_plugin_unload(pl);
}
END_TEST

/* ref-f64 and ref-f32 pass every case (with prefix, causality and repeat checks); the
 * float32 twin stays at least 3x under the fp32 caps (SPEC.md §7.4's measured margin). */
START_TEST(test_references_pass) {
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.prefix = 1, o.repeat = 1;
  for (size_t i = 0; i < N_CASES; i++) {
    kda_case_report r;
    ck_assert_msg(run_one(kda_backend_find("ref-f64"), "", i, &o, &r) == KDA_VERDICT_PASS,
                  "ref-f64 %s: %s", case_descs[i], r.reason);
    kda_case_report_free(&r);
    int32_t v = run_one(kda_backend_find("ref-f32"), "", i, &o, &r);
    ck_assert_msg(v == KDA_VERDICT_PASS, "ref-f32 %s: %s", case_descs[i], r.reason);
    ck_assert_msg(r.score.o.worst * 3 < r.score.caps.o && r.score.ht.worst * 3 < r.score.caps.ht,
                  "ref-f32 margin on %s: o %g ht %g", case_descs[i], r.score.o.worst,
                  r.score.ht.worst);
    ck_assert(r.repeat_done && r.repeat_identical);
    if (cases[i].p.N == 1) ck_assert(r.prefix_done && r.causal_ok);
    kda_case_report_free(&r);
  }
}
END_TEST

/* Mutation testing: the case set kills every mutant by a wide margin (4x the cap; SPEC.md §7.7). */
START_TEST(test_mutants_killed) {
  const kda_backend *b;
  kda_plugin *p = load("mutants", &b);
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  char params[128];
  for (size_t m = 0; m < sizeof mutant_names / sizeof mutant_names[0]; m++) {
    snprintf(params, sizeof params, "mutant=%s", mutant_names[m]);
    double worst_ratio = 0;
    for (size_t i = 0; i < N_CASES; i++) {
      kda_case_report r;
      if (run_one(b, params, i, &o, &r) == KDA_VERDICT_FAIL) {
        double q = fmax(r.score.o.worst / r.score.caps.o,
                        fmax(r.score.ht.worst / r.score.caps.ht, r.score.hc.worst / r.score.caps.hc));
        if (q > worst_ratio) worst_ratio = q;
      }
      kda_case_report_free(&r);
    }
    ck_assert_msg(worst_ratio > 4, "mutant %s not killed by a wide margin (%g x cap)",
                  mutant_names[m], worst_ratio);
  }
  for (size_t i = 0; i < N_CASES; i++) {
    kda_case_report r;
    ck_assert_msg(run_one(b, "mutant=none", i, &o, &r) == KDA_VERDICT_PASS, "none: %s", r.reason);
    kda_case_report_free(&r);
  }
  kda_plugin_unload(p);
}
END_TEST

/* A crash, a hang, an overrun and an FP-environment change become verdicts; the run goes on. */
START_TEST(test_isolation) {
  const kda_backend *crash, *hang, *mut;
  kda_plugin *pc = load("crash", &crash), *ph = load("hang", &hang), *pm = load("mutants", &mut);
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.call.timeout_s = 0.5;
  kda_case_report r;
  ck_assert_int_eq(run_one(crash, "", 0, &o, &r), KDA_VERDICT_CRASH);
  ck_assert_int_eq(run_one(hang, "", 0, &o, &r), KDA_VERDICT_TIMEOUT);
  ck_assert_int_eq(run_one(mut, "mutant=overrun", 0, &o, &r), KDA_VERDICT_CRASH);
  ck_assert_ptr_nonnull(strstr(r.reason, "past the end"));
  ck_assert_int_eq(run_one(mut, "mutant=fpenv", 0, &o, &r), KDA_VERDICT_FAIL);
  ck_assert_ptr_nonnull(strstr(r.reason, "floating-point environment"));
  ck_assert_int_eq(run_one(mut, "mutant=nosuch", 0, &o, &r), KDA_VERDICT_FAIL);
  ck_assert_int_eq(run_one(kda_backend_find("ref-f32"), "", 0, &o, &r), KDA_VERDICT_PASS);
  kda_case_report_free(&r);
  kda_plugin_unload(pc), kda_plugin_unload(ph), kda_plugin_unload(pm);
}
END_TEST

/* Candidate result files: the float64 reference's file passes; a perturbed one fails with a
 * TestFloat-style line; a missing file is a Fail of the case. */
START_TEST(test_candidates) {
  char err[KDA_ERRLEN], path[] = "/tmp/kda_cand_XXXXXX";
  int fd = mkstemp(path);
  ck_assert(fd >= 0);
  close(fd);
  kda_truth *t = &truths[1];
  ck_assert_msg(kda_result_save(path, &cases[1], "test", KDA_DTYPE_F32, t->out.o, t->out.ht,
                                t->out.hc, err, sizeof err) == KDA_OK, "%s", err);
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  kda_case_report r;
  ck_assert_int_eq(kda_conform_candidate(path, &cases[1], t, KDA_PRECISION_FP32, &o, &r, err, sizeof err),
                   KDA_OK);
  ck_assert_msg(r.verdict == KDA_VERDICT_PASS, "%s", r.reason);
  kda_case_report_free(&r);
  t->out.o[5] += 1e-3;
  ck_assert_int_eq(kda_result_save(path, &cases[1], "test", KDA_DTYPE_F64, t->out.o, t->out.ht,
                                   t->out.hc, err, sizeof err), KDA_OK);
  t->out.o[5] -= 1e-3;
  ck_assert_int_eq(kda_conform_candidate(path, &cases[1], t, KDA_PRECISION_FP32, &o, &r, err, sizeof err),
                   KDA_OK);
  ck_assert_int_eq(r.verdict, KDA_VERDICT_FAIL);
  ck_assert_int_eq(r.score.lines[0].index, 5);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  kda_report_human(f, &r, 3);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "expected 0x"));
  ck_assert_ptr_nonnull(strstr(buf, "observed 0x"));
  /* the failure's detail (SPEC.md §7.9): the worst element is the one perturbed, with both
   * values, what was allowed there and what a unit is */
  const kda_qmetric *wo = &r.score.o;
  ck_assert_uint_eq(wo->worst_index, 5);
  ck_assert(fabs(wo->worst_observed - wo->worst_expected - 1e-3) < 1e-9);
  ck_assert(wo->worst_allow >= 1 && wo->worst_scale > 0);
  char want[256];
  snprintf(want, sizeof want, "    worst o[t=%lld seq=%lld hv=%lld j=%lld]  expected ",
           (long long)wo->at.a, (long long)wo->at.b, (long long)wo->at.c, (long long)wo->at.d);
  ck_assert_msg(strstr(buf, want) && strstr(buf, "a fp32 unit there is u M = ") &&
                strstr(buf, " allowed ") && strstr(buf, "ref-f32 on the same prompt: "),
                "failure detail:\n%s", buf);
  free(buf);
  kda_case_report_free(&r);
  unlink(path);
  ck_assert_int_eq(kda_conform_candidate(path, &cases[1], t, KDA_PRECISION_FP32, &o, &r, err, sizeof err),
                   KDA_OK);
  ck_assert_int_eq(r.verdict, KDA_VERDICT_FAIL);
  kda_case_report_free(&r);
}
END_TEST

/* A tiny structural check of JUnit XML against the common Jenkins/Surefire shape. */
static void check_junit(const char *xml, int64_t want_tests, int64_t want_fail, int64_t want_err,
                        int64_t want_skip) {
  const char *allowed_parent[][2] = {{"testsuites", ""},         {"testsuite", "testsuites"},
                                     {"testcase", "testsuite"},  {"failure", "testcase"},
                                     {"error", "testcase"},      {"skipped", "testcase"},
                                     {"system-out", "testcase"}, {"properties", "testsuite"},
                                     {"properties", "testcase"}, {"property", "properties"}};
  char stack[16][32];
  int depth = 0, cases_seen = 0;
  long long sum[4] = {0, 0, 0, 0};
  const char *s = strstr(xml, "?>");
  ck_assert_ptr_nonnull(s);
  for (s = strchr(s + 2, '<'); s; s = strchr(s + 1, '<')) {
    int closing = s[1] == '/';
    char name[32];
    ck_assert_int_eq(sscanf(s + 1 + closing, "%31[a-z-]", name), 1);
    const char *end = strchr(s, '>');
    ck_assert_ptr_nonnull(end);
    int selfclose = end[-1] == '/';
    if (closing) {
      ck_assert_int_gt(depth, 0);
      ck_assert_str_eq(stack[--depth], name);
      continue;
    }
    const char *parent = depth ? stack[depth - 1] : "";
    int ok = 0;
    for (size_t k = 0; k < sizeof allowed_parent / sizeof allowed_parent[0]; k++)
      if (!strcmp(allowed_parent[k][0], name) && !strcmp(allowed_parent[k][1], parent)) ok = 1;
    ck_assert_msg(ok, "<%s> inside <%s>", name, parent);
    if (!strcmp(name, "testcase")) {
      cases_seen++;
      ck_assert(strstr(s, "classname=\"") < end && strstr(s, " name=\"") < end);
    }
    if (!strcmp(name, "testsuite")) {
      long long t, fa, er, sk;
      ck_assert_int_eq(sscanf(strstr(s, "tests="), "tests=\"%lld\" failures=\"%lld\" errors=\"%lld\" "
                              "skipped=\"%lld\"", &t, &fa, &er, &sk), 4);
      sum[0] += t, sum[1] += fa, sum[2] += er, sum[3] += sk;
    }
    if (!selfclose) snprintf(stack[depth++], sizeof stack[0], "%s", name);
  }
  ck_assert_int_eq(depth, 0);
  ck_assert_int_eq(cases_seen, want_tests);
  ck_assert_int_eq(sum[0], want_tests); /* over every suite: one per backend label */
  ck_assert_int_eq(sum[1], want_fail);
  ck_assert_int_eq(sum[2], want_err);
  ck_assert_int_eq(sum[3], want_skip);
}

START_TEST(test_reports_and_waivers) {
  const kda_backend *mut;
  kda_plugin *pm = load("mutants", &mut);
  char wpath[] = "/tmp/kda_waiver_XXXXXX", err[KDA_ERRLEN];
  int fd = mkstemp(wpath);
  const char *wtext = "{\"waivers\":[{\"case\":\"lb-*\",\"backend\":\"mutant\",\"reason\":\"known\","
                      "\"link\":\"https://example.org/1\"}]}";
  ck_assert(write(fd, wtext, strlen(wtext)) == (ssize_t)strlen(wtext));
  close(fd);
  kda_waivers *w;
  ck_assert_int_eq(kda_waivers_load(wpath, &w, err, sizeof err), KDA_OK);
  unlink(wpath);
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.waivers = w;
  o.call.timeout_s = 30;
  kda_case_report rs[4];
  run_one(mut, "mutant=drop_h0", 1, &o, &rs[0]);   /* Fail */
  run_one(mut, "mutant=drop_h0", 3, &o, &rs[1]);   /* waived */
  run_one(mut, "mutant=none", 2, &o, &rs[2]);      /* Pass */
  run_one(mut, "mutant=overrun", 0, &o, &rs[3]);   /* Crash */
  ck_assert_int_eq(rs[0].verdict, KDA_VERDICT_FAIL);
  ck_assert_int_eq(rs[1].verdict, KDA_VERDICT_WAIVED);
  ck_assert_int_eq(rs[2].verdict, KDA_VERDICT_PASS);
  ck_assert_int_eq(rs[3].verdict, KDA_VERDICT_CRASH);
  kda_tally t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < 4; i++) kda_tally_add(&t, &rs[i]);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  kda_report_final(f, &t);
  fclose(f);
  ck_assert_str_eq(buf, "1 passed, 2 failed, 1 skipped, 0 warnings\n");
  free(buf);
  f = open_memstream(&buf, &len);
  ck_assert_int_eq(kda_report_junit(f, rs, 4), KDA_OK);
  fclose(f);
  check_junit(buf, 4, 1, 1, 1);
  free(buf);
  f = open_memstream(&buf, &len);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(kda_report_jsonl(f, &rs[i]), KDA_OK);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "\"verdict\":\"Waived\""));
  ck_assert_ptr_nonnull(strstr(buf, "\"first_fail_token\""));
  free(buf);
  for (int i = 0; i < 4; i++) kda_case_report_free(&rs[i]);
  kda_waivers_free(w);
  kda_plugin_unload(pm);
}
END_TEST

/* ---- The worker (SPEC.md §7.8): every fault is a verdict and the run goes on. */
static kda_worker *start_plugin(const char *name, const char *params, const kda_conform_opts *o) {
  char spec[4400], err[KDA_ERRLEN];
  snprintf(spec, sizeof spec, "%s/kda_plugin_%s.so%s%s", plugin_dir, name, params ? ":" : "",
           params ? params : "");
  kda_backend_ref ref;
  ck_assert_msg(kda_backend_resolve(spec, &ref, err, sizeof err) == KDA_OK, "%s", err);
  kda_worker *w;
  ck_assert_msg(kda_worker_start(&ref, &o->call, &w, err, sizeof err) == KDA_OK, "%s", err);
  return w;
}

/* The report's scalar fields land in *r; its heap parts (score arrays) are freed at once, as
 * the tests reuse r from call to call. */
static int32_t run_worker(kda_worker *w, size_t i, const kda_conform_opts *o, kda_case_report *r) {
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_conform_case_worker(w, &cases[i], &truths[i], o, r, err, sizeof err) == KDA_OK,
                "%s", err);
  kda_case_report_free(r);
  return r->verdict;
}

/* 1 while pid exists and is not a zombie. */
static int pid_alive(long pid) {
  char path[64], stat[256] = "";
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = 0;
  const char *paren = strrchr(stat, ')');
  return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

/* 1 when pid is gone (or a zombie) within a bounded time. */
static int pid_dies(long pid) {
  for (int k = 0; k < 500; k++) {
    if (!pid_alive(pid)) return 1;
    usleep(10000);
  }
  return 0;
}

static long read_pid(const char *path) {
  long pid = 0;
  for (int k = 0; k < 500 && pid <= 0; k++) {
    FILE *f = fopen(path, "r");
    if (f && fscanf(f, "%ld", &pid) != 1) pid = 0;
    if (f) fclose(f);
    if (pid <= 0) usleep(10000);
  }
  return pid;
}

typedef struct fault_row {
  const char *fault;
  size_t case_i;
  int32_t verdict;
  const char *reason; /* a substring of the reason */
} fault_row;

static const fault_row fault_rows[] = {
    {"segv_open", 1, KDA_VERDICT_CRASH, "in open"},
    {"segv_supports", 1, KDA_VERDICT_CRASH, "in supports"},
    {"segv_forward", 1, KDA_VERDICT_CRASH, "in forward"},
    {"segv_close", 1, KDA_VERDICT_CRASH, "close: "},
    {"abort_forward", 1, KDA_VERDICT_CRASH, "in forward"},
    {"exit_forward", 1, KDA_VERDICT_CRASH, "exited with status 3 in forward"},
    {"loop_forward", 1, KDA_VERDICT_TIMEOUT, "time limit"},
    {"closefds_block", 1, KDA_VERDICT_CRASH, "closed the runner's channel in forward"},
    {"fpenv_open", 1, KDA_VERDICT_FAIL, "open changed the floating-point environment"},
    {"fpenv_supports", 1, KDA_VERDICT_FAIL, "supports changed the floating-point environment"},
    {"fpenv_forward", 1, KDA_VERDICT_FAIL, "forward changed the floating-point environment"},
    {"fpenv_close", 1, KDA_VERDICT_FAIL, "close changed the floating-point environment"},
    {"ht_overrun128", 1, KDA_VERDICT_CRASH, "past the end of output 'ht'"},
    {"o_overrun1", 1, KDA_VERDICT_CRASH, "past the end of output 'o'"},
    {"o_overrun1", 0, KDA_VERDICT_CRASH, "past the end of output 'o'"}, /* o fills its page */
    {"o_far", 0, KDA_VERDICT_CRASH, "past the end of output 'o'"},      /* 1 MiB past its end */
    {"o_far", 1, KDA_VERDICT_CRASH, "past the end of output 'o'"},
    {"write_cu", 1, KDA_VERDICT_FAIL, "modified input 'cu_seqlens'"},
    {"write_ck", 1, KDA_VERDICT_FAIL, "modified input 'checkpoints'"},
    {"write_q", 1, KDA_VERDICT_FAIL, "modified input 'q'"},
    {"print", 1, KDA_VERDICT_QUALITY_WARNING, "the backend printed"},
    {"error", 1, KDA_VERDICT_FAIL, "deliberate error"},
    {"unsupported_forward", 1, KDA_VERDICT_NOT_SUPPORTED, "not this one"},
    {"noncausal", 0, KDA_VERDICT_FAIL, "an unperturbed repeat gave the same bits"},
    {"nondet", 0, KDA_VERDICT_QUALITY_WARNING, "nondeterministic"},
    {"oom", 1, KDA_VERDICT_FAIL, "out of memory"}, /* last: skipped where no limit applies */
};

START_TEST(test_worker_faults) {
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.prefix = 1;
  o.call.timeout_s = 1.0;
  size_t n = sizeof fault_rows / sizeof fault_rows[0] - (kda_worker_limits_memory() ? 0 : 1);
  for (size_t k = 0; k < n; k++) {
    const fault_row *f = &fault_rows[k];
    char params[64];
    snprintf(params, sizeof params, "fault=%s", f->fault);
    kda_worker *w = start_plugin("faults", params, &o);
    ck_assert_str_eq(kda_worker_name(w), "faults");
    ck_assert_int_eq(kda_worker_class(w), KDA_CLASS_FP32);
    kda_case_report r;
    int32_t v = run_worker(w, f->case_i, &o, &r);
    ck_assert_msg(v == f->verdict && strstr(r.reason, f->reason), "%s: %s (%s), want %s (%s)",
                  f->fault, kda_verdict_name(v), r.reason, kda_verdict_name(f->verdict), f->reason);
    kda_case_report_free(&r);
    long pid = (long)kda_worker_pid(w);
    kda_worker_stop(w);
    if (pid) ck_assert_msg(pid_dies(pid), "%s: worker %ld survived stop", f->fault, pid);
    /* The run goes on: a correct backend passes the next case. */
    ck_assert_int_eq(run_one(kda_backend_find("ref-f32"), "", 0, &o, &r), KDA_VERDICT_PASS);
    kda_case_report_free(&r);
  }
}
END_TEST

/* A crashed worker is restarted for the next call; prints never reach the runner's stdout
 * and are kept in the report. */
START_TEST(test_worker_restart_and_log) {
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  char marker[] = "/tmp/kda_marker_XXXXXX", params[128];
  int fd = mkstemp(marker);
  ck_assert(fd >= 0);
  close(fd);
  unlink(marker);
  snprintf(params, sizeof params, "fault=crash_once pidfile=%s", marker);
  kda_worker *w = start_plugin("faults", params, &o);
  kda_case_report r;
  ck_assert_int_eq(run_worker(w, 0, &o, &r), KDA_VERDICT_CRASH);
  ck_assert_int_eq(kda_worker_pid(w), 0);
  ck_assert_msg(run_worker(w, 0, &o, &r) == KDA_VERDICT_PASS, "%s", r.reason);
  ck_assert_int_eq(kda_worker_starts(w), 2);
  ck_assert_msg(run_worker(w, 2, &o, &r) == KDA_VERDICT_PASS, "%s", r.reason);
  ck_assert_int_eq(kda_worker_starts(w), 2); /* one process serves every later case */
  kda_backend_info info;
  kda_call_result cr;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_worker_describe(w, &info, &cr, err, sizeof err), KDA_OK);
  ck_assert_msg(cr.outcome == KDA_CALL_OK, "%s", cr.msg);
  ck_assert_str_eq(info.device, "test device");
  ck_assert_int_eq(info.threads, 1);
  ck_assert_int_eq(kda_worker_end_case(w, &cr, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_worker_abi_version(w), KDA_BACKEND_ABI_VERSION);
  kda_worker_stop(w);
  unlink(marker);

  char out[] = "/tmp/kda_stdout_XXXXXX";
  fd = mkstemp(out);
  ck_assert(fd >= 0);
  fflush(stdout);
  int saved = dup(1);
  dup2(fd, 1);
  w = start_plugin("faults", "fault=print", &o);
  int32_t v = run_worker(w, 0, &o, &r);
  kda_worker_stop(w);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  off_t size = lseek(fd, 0, SEEK_END);
  close(fd);
  unlink(out);
  ck_assert_int_eq(v, KDA_VERDICT_QUALITY_WARNING);
  ck_assert_int_eq(size, 0);
  ck_assert_ptr_nonnull(strstr(r.log, "hello from forward on stdout"));
  ck_assert_ptr_nonnull(strstr(r.log, "and on stderr"));
  ck_assert_int_eq(r.log_bytes, strlen(r.log));
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  kda_report_human(f, &r, 3);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "hello from forward"));
  free(buf);
  kda_case_report_free(&r);
}
END_TEST

/* Load-time faults are the backend's verdict for every case, recorded once. */
START_TEST(test_worker_load_faults) {
  static const struct {
    const char *plugin, *reason;
    int32_t verdict;
  } rows[] = {{"ctor_abort", "in load", KDA_VERDICT_CRASH},
              {"ctor_ftz", "loading the plugin changed the floating-point environment",
               KDA_VERDICT_FAIL},
              {"noentry", "no symbol 'kda_backend_entry'", KDA_VERDICT_FAIL},
              {"nullentry", "returned NULL", KDA_VERDICT_FAIL},
              {"badsize", "table size 8", KDA_VERDICT_FAIL},
              {"ctor_hang", "time limit of 1 s in load", KDA_VERDICT_TIMEOUT}};
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.call.timeout_s = 1.0;
  for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
    kda_worker *w = start_plugin(rows[k].plugin, NULL, &o);
    ck_assert_ptr_nonnull(kda_worker_load_result(w));
    for (size_t i = 0; i < 2; i++) {
      kda_case_report r;
      int32_t v = run_worker(w, i, &o, &r);
      ck_assert_msg(v == rows[k].verdict && strstr(r.reason, rows[k].reason), "%s: %s (%s)",
                    rows[k].plugin, kda_verdict_name(v), r.reason);
      kda_case_report_free(&r);
    }
    ck_assert_int_eq(kda_worker_starts(w), 1);
    kda_worker_stop(w);
  }
  kda_case_report r;
  ck_assert_int_eq(run_one(kda_backend_find("ref-f32"), "", 0, &o, &r), KDA_VERDICT_PASS);
}
END_TEST

/* The backend's children die with the worker at stop. */
START_TEST(test_worker_grandchild) {
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  char pidfile[] = "/tmp/kda_gc_XXXXXX", params[128];
  int fd = mkstemp(pidfile);
  ck_assert(fd >= 0);
  close(fd);
  snprintf(params, sizeof params, "fault=grandchild pidfile=%s", pidfile);
  kda_worker *w = start_plugin("faults", params, &o);
  kda_case_report r;
  ck_assert_msg(run_worker(w, 0, &o, &r) == KDA_VERDICT_PASS, "%s", r.reason);
  long gc = read_pid(pidfile);
  ck_assert_int_gt(gc, 0);
  ck_assert_msg(pid_alive(gc), "grandchild %ld not running", gc);
  kda_worker_stop(w);
  ck_assert_msg(pid_dies(gc), "grandchild %ld survived the worker's stop", gc);
  unlink(pidfile);
}
END_TEST

/* When the runner is killed, its worker and the backend's children die too. */
START_TEST(test_worker_runner_killed) {
  char pidfile[] = "/tmp/kda_gc_XXXXXX", params[128];
  int fd = mkstemp(pidfile);
  ck_assert(fd >= 0);
  close(fd);
  snprintf(params, sizeof params, "fault=grandchild_loop pidfile=%s", pidfile);
  int pp[2];
  ck_assert(pipe(pp) == 0);
  fflush(NULL);
  pid_t runner = fork();
  ck_assert(runner >= 0);
  if (runner == 0) { /* a runner whose worker hangs without a time limit */
    kda_conform_opts o;
    kda_conform_opts_init(&o);
    o.call.timeout_s = 0;
    kda_worker *w = start_plugin("faults", params, &o);
    long wpid = (long)kda_worker_pid(w);
    if (write(pp[1], &wpid, sizeof wpid) != sizeof wpid) _exit(1);
    kda_case_report r;
    run_worker(w, 0, &o, &r);
    _exit(2);
  }
  close(pp[1]);
  long wpid = 0;
  ck_assert(read(pp[0], &wpid, sizeof wpid) == sizeof wpid);
  close(pp[0]);
  long gc = read_pid(pidfile);
  ck_assert_int_gt(wpid, 0);
  ck_assert_int_gt(gc, 0);
  kill(runner, SIGKILL);
  int wst;
  ck_assert(waitpid(runner, &wst, 0) == runner);
  ck_assert_msg(pid_dies(wpid), "worker %ld survived the runner", wpid);
  ck_assert_msg(pid_dies(gc), "grandchild %ld survived the runner", gc);
  unlink(pidfile);
}
END_TEST

/* SPEC.md §7.7: one ulp of run-to-run noise is nondeterminism (QualityWarning), not a
 * causality failure; a deterministic dependence on later tokens still fails. */
START_TEST(test_nondeterminism_vs_causality) {
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.prefix = 1;
  for (int repeat = 0; repeat < 2; repeat++) {
    o.repeat = repeat;
    kda_worker *w = start_plugin("faults", "fault=nondet", &o);
    kda_case_report r;
    ck_assert_msg(run_worker(w, 0, &o, &r) == KDA_VERDICT_QUALITY_WARNING, "%s", r.reason);
    ck_assert(r.nondeterministic && r.prefix_done && r.causal_ok);
    ck_assert_ptr_nonnull(strstr(r.reason, "nondeterministic"));
    kda_worker_stop(w);
    w = start_plugin("faults", "fault=noncausal", &o);
    ck_assert_int_eq(run_worker(w, 0, &o, &r), KDA_VERDICT_FAIL);
    ck_assert(!r.nondeterministic && !r.causal_ok);
    kda_worker_stop(w);
  }
}
END_TEST

/* SPEC.md §7.7: the offsets of each mode, the cuts of a multi-sequence case (a sequence
 * shorter than P is whole in part 1; the decode cut is each sequence's last token), parts that
 * join back into the case, and perturbations only after the cut. */
START_TEST(test_serving_cuts) {
  const kda_case *c = &cases[4]; /* seqlens 5,0,37,100 */
  int64_t P[KDA_SERVING_MAX_OFFSETS], at[4], zero[4] = {0}, end[4] = {5, 0, 37, 100}, len2[4];
  int n = kda_serving_offsets(c, KDA_SERVING_DEFAULT, P);
  ck_assert_int_eq(n, 3);
  ck_assert(P[0] == 63 && P[1] == 65 && P[2] == KDA_SERVING_DECODE);
  n = kda_serving_offsets(c, KDA_SERVING_FULL, P);
  ck_assert_int_eq(n, 5); /* 63 65 1 99 decode: 63 once */
  ck_assert(P[2] == 1 && P[3] == 99 && P[4] == KDA_SERVING_DECODE);
  kda_serving_cut(c, 65, at);
  ck_assert(at[0] == 5 && at[1] == 0 && at[2] == 37 && at[3] == 65);
  kda_serving_cut(c, KDA_SERVING_DECODE, at);
  ck_assert(at[0] == 4 && at[1] == 0 && at[2] == 36 && at[3] == 99);
  kda_case p1, p2, pc;
  char err[KDA_ERRLEN];
  ck_assert(kda_serving_part(c, zero, at, c->h0, NULL, "a", &p1, err, sizeof err) == KDA_OK);
  ck_assert(kda_serving_part(c, at, end, NULL, zero, "b", &p2, err, sizeof err) == KDA_OK);
  ck_assert(p1.p.T == 139 && p2.p.T == 3 && p2.p.n_checkpoints == 3 && !p2.p.has_initial_state);
  ck_assert_str_eq(p2.id, "varlen-gdn.b");
  for (int i = 0; i < 4; i++) len2[i] = end[i] - at[i];
  /* v joined back from the parts is the case's v (HV * V values per token, as o) */
  double *v = malloc((size_t)c->p.T * c->p.HV * c->p.V * sizeof *v);
  ck_assert_ptr_nonnull(v);
  kda_serving_join(c, at, len2, p1.v, p2.v, v);
  ck_assert(memcmp(v, c->v, (size_t)c->p.T * c->p.HV * c->p.V * sizeof *v) == 0);
  ck_assert(kda_serving_perturbed(c, at, KDA_PERTURB_GKB, "g", &pc, err, sizeof err) == KDA_OK);
  ck_assert(kda_serving_before_same(c, at, pc.v, c->v)); /* v is not perturbed by gkb */
  size_t kr = (size_t)(c->p.H * c->p.K);
  for (int i = 0; i < 4; i++) { /* k keeps its bits before the cut and moves at it */
    const double *k0 = c->k + c->cu_seqlens[i] * (int64_t)kr, *k1 = pc.k + c->cu_seqlens[i] * (int64_t)kr;
    ck_assert(memcmp(k0, k1, (size_t)at[i] * kr * sizeof(double)) == 0);
    if (at[i] < end[i]) ck_assert(k1[at[i] * (int64_t)kr] != k0[at[i] * (int64_t)kr]);
  }
  free(v);
  kda_case_free(&p1), kda_case_free(&p2), kda_case_free(&pc);
}
END_TEST

static Suite *conformance_suite(void) {
  Suite *s = suite_create("conformance");
  TCase *tc = tcase_create("runner");
  tcase_add_unchecked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_registry);
  tcase_add_test(tc, test_envelope_allowance);
  tcase_add_test(tc, test_validate_v2);
  tcase_add_test(tc, test_v1_table_at_page_end);
  tcase_add_test(tc, test_v1_plugin);
  tcase_add_test(tc, test_v2_buffers);
  tcase_add_test(tc, test_references_pass);
  tcase_add_test(tc, test_mutants_killed);
  tcase_add_test(tc, test_isolation);
  tcase_add_test(tc, test_candidates);
  tcase_add_test(tc, test_reports_and_waivers);
  tcase_add_test(tc, test_worker_faults);
  tcase_add_test(tc, test_worker_restart_and_log);
  tcase_add_test(tc, test_worker_load_faults);
  tcase_add_test(tc, test_worker_grandchild);
  tcase_add_test(tc, test_worker_runner_killed);
  tcase_add_test(tc, test_nondeterminism_vs_causality);
  tcase_add_test(tc, test_serving_cuts);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return kda_test_main(conformance_suite(), CK_NORMAL, CK_NOFORK);
}

/* check_half.c: unit tests of 16-bit backend buffers and the variant slot (SPEC.md §7.8,
 * §10.3): the conversions of both sides (the runner's kda_dtype.c, the plugins'
 * kda_backend_half.h) over every 16-bit pattern and every float32 rounding boundary, and the
 * worker with plugin_half.so: classes and types per parameter string, cases its input type
 * does not hold declined, hostile variant slots.
 * SPDX-License-Identifier: MIT
 */
#include <check.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_backend_half.h"
#include "kda_case.h"
#include "kda_conform.h"
#include "kda_score_internal.h"
#include "kda_worker_internal.h"
#include "kda_dtype.h"
#include "kda_test.h"

static char plugin_dir[4096];

static void setup(void) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  ck_assert(n > 0);
  exe[n] = 0;
  snprintf(plugin_dir, sizeof plugin_dir, "%s", dirname(exe));
}

/* ---- Conversions. */
static const int32_t halves[2] = {KDA_PRECISION_BF16, KDA_PRECISION_FP16};

static float plugin_widen(int32_t dt, uint16_t b) {
  return dt == KDA_PRECISION_BF16 ? kda_bf16_to_float(b) : kda_f16_to_float(b);
}

static uint16_t plugin_narrow(int32_t dt, float f) {
  return dt == KDA_PRECISION_BF16 ? kda_bf16_from_float(f) : kda_f16_from_float(f);
}

static int is_nan_bits(int32_t dt, uint16_t b) {
  return dt == KDA_PRECISION_BF16 ? (b & 0x7f80) == 0x7f80 && (b & 0x7f)
                                  : (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
}

/* Every pattern: both sides widen it to the same value, and narrowing that value (from float64
 * and from float32) gives the pattern back; a NaN stays a NaN of its sign. */
START_TEST(test_roundtrip_every_pattern) {
  for (int h = 0; h < 2; h++) {
    const int32_t dt = halves[h];
    for (uint32_t b = 0; b < 0x10000; b++) {
      const double v = kda_dtype_half_value(dt, (uint16_t)b);
      const float f = plugin_widen(dt, (uint16_t)b);
      if (is_nan_bits(dt, (uint16_t)b)) {
        ck_assert_msg(isnan(v) && isnan(f), "dtype %d bits %04x: not NaN", dt, b);
        const uint16_t r1 = kda_dtype_half_bits(dt, v), r2 = plugin_narrow(dt, f);
        ck_assert_msg(is_nan_bits(dt, r1) && is_nan_bits(dt, r2), "dtype %d bits %04x", dt, b);
        ck_assert_int_eq(r1 & 0x8000, b & 0x8000);
        ck_assert_int_eq(r2 & 0x8000, b & 0x8000);
        continue;
      }
      ck_assert_msg((double)f == v && !signbit(f) == !signbit(v), "dtype %d bits %04x: %g vs %g",
                    dt, b, (double)f, v);
      ck_assert_msg(kda_dtype_half_bits(dt, v) == b, "dtype %d bits %04x from float64", dt, b);
      ck_assert_msg(plugin_narrow(dt, f) == b, "dtype %d bits %04x from float32", dt, b);
      if (isfinite(v)) ck_assert(kda_dtype_holds(dt, v));
    }
  }
}
END_TEST

/* The value of the non-negative pattern b + 1, where the one after the largest finite value
 * (the infinity's pattern) stands for the next power of two: the rounding boundary. */
static double next_value(int32_t dt, uint16_t b) {
  const uint16_t inf = dt == KDA_PRECISION_BF16 ? 0x7f80 : 0x7c00;
  if ((uint16_t)(b + 1) == inf) return dt == KDA_PRECISION_BF16 ? 0x1p128 : 65536.0;
  return kda_dtype_half_value(dt, (uint16_t)(b + 1));
}

/* The definition of round-to-nearest-even between the consecutive patterns b and b + 1. */
static uint16_t oracle(double x, double lo, double hi, uint16_t b) {
  const double mid = lo + (hi - lo) / 2; /* exact: both are 16-bit values */
  if (x < mid) return b;
  if (x > mid) return (uint16_t)(b + 1);
  return (b & 1) ? (uint16_t)(b + 1) : b;
}

/* Around every rounding boundary (the midpoint of two neighbours) and every value: the float32
 * values at and next to them, and float64 values a hair beside the midpoint (which a
 * conversion through float32 would round twice), both signs, against the definition; and
 * binary16 against the compiler's _Float16 where it has one. */
START_TEST(test_float32_boundaries) {
  for (int h = 0; h < 2; h++) {
    const int32_t dt = halves[h];
    const uint16_t inf = dt == KDA_PRECISION_BF16 ? 0x7f80 : 0x7c00;
    for (uint16_t b = 0; b < inf; b++) {
      const double lo = kda_dtype_half_value(dt, b), hi = next_value(dt, b);
      const float mid = (float)(lo + (hi - lo) / 2); /* exact in float32 */
      const float fs[5] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), (float)lo,
                           nextafterf((float)lo, INFINITY)};
      const double ds[2] = {nextafter((double)mid, 0), nextafter((double)mid, INFINITY)};
      for (int s = 0; s < 2; s++) {
        const uint16_t sign = s ? 0x8000 : 0;
        for (int i = 0; i < 7; i++) {
          const double x = i < 5 ? (double)fs[i] : ds[i - 5];
          if (!(x >= lo && x < hi)) continue; /* the neighbours of another pair */
          const uint16_t want = (uint16_t)(oracle(x, lo, hi, b) | sign);
          const double sx = s ? -x : x;
          ck_assert_msg(kda_dtype_half_bits(dt, sx) == want, "dtype %d x %a: %04x, want %04x", dt,
                        sx, kda_dtype_half_bits(dt, sx), want);
          if (i < 5) {
            ck_assert_msg(plugin_narrow(dt, (float)sx) == want, "dtype %d x %a (float32)", dt, sx);
#if defined(__FLT16_MAX__)
            if (dt == KDA_PRECISION_FP16) {
              _Float16 c = (_Float16)(float)sx;
              uint16_t cb;
              memcpy(&cb, &c, 2);
              ck_assert_msg(cb == want, "x %a: _Float16 %04x, want %04x", sx, cb, want);
            }
#endif
          }
          ck_assert_int_eq(kda_dtype_holds(dt, sx), kda_dtype_half_value(dt, want) == sx);
        }
      }
    }
  }
}
END_TEST

/* The buffer elements the worker writes and reads: exact for values of the type. */
START_TEST(test_put_get) {
  const int32_t all[4] = {KDA_PRECISION_FP64, KDA_PRECISION_FP32, KDA_PRECISION_BF16,
                          KDA_PRECISION_FP16};
  const double xs[6] = {0.0, -0.0, 1.5, -0x1p-20, 0.1, 3e38};
  for (int d = 0; d < 4; d++) {
    unsigned char buf[6 * 8];
    ck_assert(kda_dtype_valid(all[d]));
    ck_assert_int_eq((int)KDA_DTYPE_SIZE(all[d]), all[d] == 0 ? 8 : all[d] == 1 ? 4 : 2);
    for (int i = 0; i < 6; i++) kda_dtype_put(all[d], buf, (size_t)i, xs[i]);
    for (int i = 0; i < 6; i++) {
      double got = kda_dtype_get(all[d], buf, (size_t)i);
      if (kda_dtype_holds(all[d], xs[i]))
        ck_assert(got == xs[i] && !signbit(got) == !signbit(xs[i]));
      else ck_assert(got != xs[i]); /* rounded: 0.1 everywhere but fp64; 3e38 inf in fp16 */
    }
  }
  ck_assert(!kda_dtype_valid(KDA_PRECISION_TF32) && !kda_dtype_valid(-1) && !kda_dtype_valid(5));
  ck_assert_int_eq(KDA_STATE_DTYPE(KDA_PRECISION_BF16), KDA_PRECISION_FP32);
  ck_assert_int_eq(KDA_STATE_DTYPE(KDA_PRECISION_FP64), KDA_PRECISION_FP64);
}
END_TEST

/* ---- The table and the slot, in-process. */
static int32_t never_called(const char *params, kda_backend_variant *v, char *err, uint32_t n) {
  ck_abort_msg("variant read from a table that does not have it");
  return KDA_EIO;
}

/* 16-bit element types are valid in a table, tf32 is not; the slot is read only from a version-2
 * table whose struct_size covers it (an older table's bytes there are not its). */
START_TEST(test_table_and_slot) {
  char path[4200], err[KDA_ERRLEN];
  snprintf(path, sizeof path, "%s/kda_plugin_half.so", plugin_dir);
  kda_plugin *pl;
  const kda_backend *hb;
  ck_assert_msg(kda_plugin_load(path, &pl, &hb, err, sizeof err) == KDA_OK, "%s", err);
  kda_backend b = *hb;
  b.input_dtype = KDA_PRECISION_BF16, b.output_dtype = KDA_PRECISION_FP16;
  ck_assert_msg(kda_backend_validate(&b, err, sizeof err) == KDA_OK, "%s", err);
  b.input_dtype = KDA_PRECISION_TF32;
  ck_assert_int_eq(kda_backend_validate(&b, err, sizeof err), KDA_EINVAL);
  ck_assert_msg(strstr(err, "backend 'half' declares an unknown buffer dtype (input 2"), "%s", err);
  b = *hb;
  kda_backend_variant v;
  int rejected = 1;
  ck_assert(kda_backend_variant_get(&b, "input=f16", &v, &rejected, err, sizeof err) == KDA_OK);
  ck_assert(!rejected && v.input_dtype == KDA_PRECISION_FP16 && v.struct_size == sizeof v);
  ck_assert(kda_backend_variant_get(&b, "x", &v, &rejected, err, sizeof err) == KDA_EINVAL);
  ck_assert(rejected);
  b.variant = never_called;
  b.struct_size = (uint32_t)offsetof(kda_backend, variant); /* compiled before the slot */
  ck_assert(kda_backend_variant_get(&b, "input=f16", &v, &rejected, err, sizeof err) == KDA_OK);
  ck_assert_int_eq(v.input_dtype, KDA_PRECISION_FP32); /* the table's */
  b.struct_size = sizeof b, b.abi_version = 1; /* version 1: nothing past its prefix */
  ck_assert(kda_backend_variant_get(&b, "input=f16", &v, &rejected, err, sizeof err) == KDA_OK);
  ck_assert(v.precision_class == KDA_PRECISION_FP32 && v.output_dtype == KDA_PRECISION_FP32);
  b.abi_version = KDA_BACKEND_ABI_VERSION, b.variant = NULL; /* a NULL slot */
  ck_assert(kda_backend_variant_get(&b, "input=f16", &v, &rejected, err, sizeof err) == KDA_OK);
  ck_assert_int_eq(v.input_dtype, KDA_PRECISION_FP32);
  kda_plugin_unload(pl);
}
END_TEST

/* ---- The worker and plugin_half.so. */
static kda_worker *start(const char *plugin, const char *params, double timeout, int isolate) {
  char spec[4400], err[KDA_ERRLEN];
  snprintf(spec, sizeof spec, "%s/kda_plugin_%s.so%s%s", plugin_dir, plugin, params ? ":" : "",
           params ? params : "");
  kda_backend_ref ref;
  ck_assert_msg(kda_backend_resolve(spec, &ref, err, sizeof err) == KDA_OK, "%s", err);
  kda_call_opts o = {.timeout_s = timeout, .isolate = isolate};
  kda_worker *w;
  ck_assert_msg(kda_worker_start(&ref, &o, &w, err, sizeof err) == KDA_OK, "%s", err);
  return w;
}


/* The case scored with every serving check (prefix resume, speculative verify, pool decode). */
static int32_t score(kda_worker *w, const kda_case *c, const kda_truth *t, kda_case_report *r) {
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.prefix = 1;
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_conform_case_worker(w, c, t, &o, r, err, sizeof err) == KDA_OK, "%s", err);
  kda_case_report_free(r);
  return r->verdict;
}

#define BF16_CASE                                                                           \
  "seed=11 seqlens=7,0,30 H=2 HV=4 K=8 V=8 gate=softplus beta=logit l2=fla prec=bf16 h0=1 " \
  "checkpoints=3,20 id=bf16"
#define F32_CASE "seed=12 T=20 H=1 HV=2 K=8 V=8 gate=softplus beta=logit l2=fla prec=f32 id=f32"

/* The class and types come from variant, per parameter string; the table's without params. */
START_TEST(test_variant_types) {
  static const struct {
    const char *params;
    int32_t cls, in, out;
  } want[] = {
      {NULL, KDA_PRECISION_FP32, KDA_PRECISION_FP32, KDA_PRECISION_FP32},
      {"input=bf16", KDA_PRECISION_BF16, KDA_PRECISION_BF16, KDA_PRECISION_FP32},
      {"input=f16 output=f16", KDA_PRECISION_FP16, KDA_PRECISION_FP16, KDA_PRECISION_FP16},
      {"input=bf16 precision=tf32", KDA_PRECISION_TF32, KDA_PRECISION_BF16, KDA_PRECISION_FP32},
      {"input=f64 output=f64 precision=fp64", KDA_PRECISION_FP64, KDA_PRECISION_FP64,
       KDA_PRECISION_FP64},
  };
  for (int isolate = 0; isolate < 2; isolate++)
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
      kda_worker *w = start("half", want[i].params, 20, isolate);
      ck_assert_msg(!kda_worker_load_result(w), "%s", kda_worker_load_result(w)->msg);
      ck_assert_int_eq(kda_worker_class(w), want[i].cls);
      ck_assert_int_eq(kda_worker_input_dtype(w), want[i].in);
      ck_assert_int_eq(kda_worker_output_dtype(w), want[i].out);
      ck_assert(!kda_worker_params_rejected(w));
      kda_worker_stop(w);
    }
  /* plugins without the slot keep their table's: the frozen version-1 one and plugin_v2 */
  const char *old[2] = {"v1", "v2"};
  for (int i = 0; i < 2; i++) {
    kda_worker *w = start(old[i], NULL, 20, 1);
    ck_assert(!kda_worker_load_result(w));
    ck_assert_int_eq(kda_worker_class(w), KDA_PRECISION_FP64);
    ck_assert_int_eq(kda_worker_input_dtype(w), KDA_PRECISION_FP64);
    ck_assert_int_eq(kda_worker_output_dtype(w), KDA_PRECISION_FP64);
    kda_worker_stop(w);
  }
}
END_TEST

/* A bf16 case passes on bf16 buffers (16-bit o too) with every serving check; an f32 case is
 * NotSupported, never rounded; o on bf16 buffers is exact in bf16 and fails the fp32 class. */
START_TEST(test_bf16_cases) {
  kda_case cb, cf;
  kda_truth tb, tf;
  kda_test_gen_case(BF16_CASE, &cb, &tb);
  kda_test_gen_case(F32_CASE, &cf, &tf);
  kda_case_report r;
  const char *ok[3] = {"input=bf16", "input=bf16 output=bf16", "input=f32"};
  for (int i = 0; i < 3; i++) {
    kda_worker *w = start("half", ok[i], 60, 1);
    ck_assert_msg(score(w, &cb, &tb, &r) == KDA_VERDICT_PASS, "%s: %s", ok[i], r.reason);
    ck_assert_msg(r.prefix_done, "%s: the serving checks did not run", ok[i]);
    ck_assert_int_eq(r.score.cls, i < 2 ? KDA_PRECISION_BF16 : KDA_PRECISION_FP32);
    int32_t v = score(w, &cf, &tf, &r);
    if (i < 2) {
      ck_assert_int_eq(v, KDA_VERDICT_NOT_SUPPORTED);
      ck_assert_msg(strstr(r.reason, "inputs are f32, the backend takes bf16 buffers (q[0] = "),
                    "%s", r.reason);
    } else {
      ck_assert_msg(v == KDA_VERDICT_PASS, "%s", r.reason);
    }
    kda_worker_stop(w);
  }
  /* o through bf16 buffers: widened exactly, so every element is a bfloat16 */
  kda_worker *w = start("half", "input=bf16 output=bf16", 60, 1);
  kda_outputs out;
  kda_tensors_f64 in;
  kda_call_result cr;
  char err[KDA_ERRLEN];
  ck_assert(kda_outputs_alloc(&cb.p, &out, err, sizeof err) == KDA_OK);
  kda_case_tensors(&cb, &in);
  ck_assert(kda_worker_call(w, &cb.p, &in, &out, &cr, err, sizeof err) == KDA_OK);
  ck_assert_msg(cr.outcome == KDA_CALL_OK, "%s", cr.msg);
  for (uint64_t i = 0; i < out.n_o; i++) ck_assert(kda_dtype_holds(KDA_PRECISION_BF16, out.o[i]));
  uint64_t wide = 0; /* the states stay float32: most are not bfloat16 */
  for (uint64_t i = 0; i < out.n_ht; i++) wide += !kda_dtype_holds(KDA_PRECISION_BF16, out.ht[i]);
  ck_assert_msg(wide > out.n_ht / 2, "%lld of %lld", (long long)wide, (long long)out.n_ht);
  kda_worker_end_case(w, &cr, err, sizeof err);
  kda_outputs_free(&out);
  kda_worker_stop(w);
  w = start("half", "input=bf16 output=bf16 precision=fp32", 60, 1);
  ck_assert_int_eq(score(w, &cb, &tb, &r), KDA_VERDICT_FAIL);
  kda_worker_stop(w);
  kda_truth_free(&tb), kda_truth_free(&tf), kda_case_free(&cb), kda_case_free(&cf);
}
END_TEST

/* Per value: a bfloat16 value below binary16's range is not exact in fp16; one of 11 bits is. */
START_TEST(test_inputs_exact_per_value) {
  kda_case cb;
  kda_truth tb;
  kda_test_gen_case(BF16_CASE, &cb, &tb);
  kda_worker *w16 = start("half", "input=f16", 20, 1), *wb = start("half", "input=bf16", 20, 1);
  kda_tensors_f64 in;
  kda_case_tensors(&cb, &in);
  double *q = (double *)in.q;
  char why[256] = "";
  q[5] = 0x1p-30; /* bf16-exact, below fp16's subnormals */
  ck_assert(kda_worker_inputs_exact(wb, &cb.p, &in, why, sizeof why));
  ck_assert(!kda_worker_inputs_exact(w16, &cb.p, &in, why, sizeof why));
  ck_assert_msg(strstr(why, "q[5] = ") && strstr(why, "is not exact in fp16"), "%s", why);
  q[5] = 1.5;
  for (int64_t i = 0; i < cb.p.T * cb.p.H * cb.p.K; i++) q[i] = 1.5;
  double *k = (double *)in.k;
  k[3] = 1.0 + 0x1p-10; /* exact in fp16 (11 bits), not in bf16 (8 bits) */
  ck_assert(!kda_worker_inputs_exact(wb, &cb.p, &in, why, sizeof why));
  ck_assert_msg(strstr(why, "k[3]"), "%s", why);
  /* the call itself declines too (every path: prefix, pool, stream chunks go through it) */
  kda_outputs out;
  kda_call_result cr;
  char err[KDA_ERRLEN];
  ck_assert(kda_outputs_alloc(&cb.p, &out, err, sizeof err) == KDA_OK);
  ck_assert(kda_worker_call(wb, &cb.p, &in, &out, &cr, err, sizeof err) == KDA_OK);
  ck_assert_int_eq(cr.outcome, KDA_CALL_UNSUPPORTED);
  ck_assert_msg(strstr(cr.msg, "the backend takes bf16 buffers"), "%s", cr.msg);
  kda_outputs_free(&out);
  kda_worker_stop(w16), kda_worker_stop(wb);
  kda_truth_free(&tb), kda_case_free(&cb);
}
END_TEST

/* Hostile variant slots: a verdict of every case (recorded once at load), never the runner's
 * end; a rejected parameter string is flagged for the usage error. */
START_TEST(test_hostile_variants) {
  static const struct {
    const char *params;
    int32_t outcome;
    const char *msg;
  } want[] = {
      {"input=bf16 variant=crash", KDA_CALL_CRASH, "in variant"},
      {"variant=hang", KDA_CALL_TIMEOUT, "time limit of 1 s in variant"},
      {"variant=class", KDA_CALL_ERROR, "declares unknown precision class 77"},
      {"variant=dtype", KDA_CALL_ERROR, "declares an unknown buffer dtype"},
      {"variant=overrun", KDA_CALL_ERROR, "variant wrote past struct_size"},
      {"variant=reserved", KDA_CALL_ERROR, "changed struct_size or reserved0"},
      {"variant=fpenv", KDA_CALL_FPENV, "variant changed the floating-point environment"},
      {"variant=eio", KDA_CALL_ERROR, "returned I/O error: no such device"},
      {"input=bf17", KDA_CALL_ERROR, "rejects the parameters 'input=bf17': unknown parameter"},
  };
  kda_case cb;
  kda_truth tb;
  kda_test_gen_case(BF16_CASE, &cb, &tb);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    kda_worker *w = start("half", want[i].params, 1, 1);
    const kda_call_result *lr = kda_worker_load_result(w);
    ck_assert_msg(lr, "%s: loaded", want[i].params);
    ck_assert_msg(lr->outcome == want[i].outcome && strstr(lr->msg, want[i].msg), "%s: %s: %s",
                  want[i].params, kda_call_outcome_name(lr->outcome), lr->msg);
    ck_assert_int_eq(kda_worker_params_rejected(w), i == sizeof want / sizeof want[0] - 1);
    ck_assert_int_eq(kda_worker_class(w), -1);
    kda_case_report r;
    int32_t v = score(w, &cb, &tb, &r);
    ck_assert_msg(kda_verdict_is_failure(v), "%s: %s", want[i].params, kda_verdict_name(v));
    ck_assert_msg(strstr(r.reason, want[i].msg), "%s", r.reason);
    kda_worker_stop(w);
  }
  /* in-process (--no-isolate) the same checks run, but for the crash and the hang */
  for (size_t i = 2; i < sizeof want / sizeof want[0]; i++) {
    kda_worker *w = start("half", want[i].params, 1, 0);
    const kda_call_result *lr = kda_worker_load_result(w);
    ck_assert_msg(lr && lr->outcome == want[i].outcome && strstr(lr->msg, want[i].msg), "%s",
                  want[i].params);
    ck_assert_int_eq(kda_worker_params_rejected(w), i == sizeof want / sizeof want[0] - 1);
    kda_worker_stop(w);
  }
  kda_truth_free(&tb), kda_case_free(&cb);
}
END_TEST

/* A worker restarted after a crash whose variant answers other types than the first one did
 * (the runner lays buffers out for the first): that call fails, saying so. */
START_TEST(test_variant_changes_on_restart) {
  kda_case cf;
  kda_truth tf;
  kda_test_gen_case(F32_CASE, &cf, &tf);
  kda_test_tmpdir_make("half");
  char params[256];
  snprintf(params, sizeof params, "crash_forward flip=%s", kda_test_path("flip"));
  kda_worker *w = start("half", params, 20, 1);
  ck_assert_msg(!kda_worker_load_result(w), "%s", kda_worker_load_result(w)->msg);
  ck_assert_int_eq(kda_worker_input_dtype(w), KDA_PRECISION_FP32);
  kda_case_report r;
  ck_assert_int_eq(score(w, &cf, &tf, &r), KDA_VERDICT_CRASH);
  ck_assert_int_eq(score(w, &cf, &tf, &r), KDA_VERDICT_FAIL);
  ck_assert_msg(strstr(r.reason, "variant answered class 3, types 3 / 1 in a restarted worker"),
                "%s", r.reason);
  ck_assert_int_eq(kda_worker_input_dtype(w), KDA_PRECISION_FP32); /* the first answer */
  kda_worker_stop(w);
  kda_test_tmpdir_remove();
  kda_truth_free(&tf), kda_case_free(&cf);
}
END_TEST

static Suite *half_suite(void) {
  Suite *s = suite_create("half");
  TCase *tc = tcase_create("core");
  tcase_add_unchecked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_roundtrip_every_pattern);
  tcase_add_test(tc, test_float32_boundaries);
  tcase_add_test(tc, test_put_get);
  tcase_add_test(tc, test_table_and_slot);
  tcase_add_test(tc, test_variant_types);
  tcase_add_test(tc, test_bf16_cases);
  tcase_add_test(tc, test_inputs_exact_per_value);
  tcase_add_test(tc, test_hostile_variants);
  tcase_add_test(tc, test_variant_changes_on_restart);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return kda_test_main(half_suite(), CK_NORMAL, CK_NOFORK); }

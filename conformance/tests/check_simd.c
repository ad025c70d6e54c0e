/* check_simd.c: unit tests of the simd backend: conformance in the fp32 class on every mode,
 * edge sizes, layouts, varlen and checkpoints, for every ISA this CPU has; bit-identical
 * results for 1, 2 and 3 threads; what it declines and why.
 * SPDX-License-Identifier: MIT
 */
#include <check.h>
#include <dirent.h>
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

/* Every gate, beta and L2 mode, every family, both head maps and layouts, varlen with empty
 * sequences, checkpoints, f32 / bf16 / f16 inputs, K != V and sizes off the vector width. */
static const char *const mode_descs[] = {
    "seed=11 T=40 H=2 HV=4 K=16 V=16 gate=log beta=prob l2=off prec=f32 id=log-prob-off",
    "seed=12 T=40 H=2 HV=4 K=16 V=24 gate=softplus beta=logit l2=fla prec=bf16 h0=1 id=sp",
    "seed=13 T=40 H=2 HV=4 K=20 V=16 gate=lower_bound lb=-5 beta=logit_neg l2=ggml prec=f16 "
    "h0=1 layout=vk id=lb-vk",
    "seed=14 T=33 H=1 HV=3 K=9 V=17 gate=lower_bound lb=-2 alog=0 beta=logit l2=fla prec=f32 "
    "head_map=mod id=lb-noalog",
    "seed=15 T=50 H=2 HV=4 K=16 V=8 family=gdn gate=softplus beta=logit l2=fla prec=bf16 h0=1 "
    "head_map=mod checkpoints=0,7,49 id=gdn",
    "seed=16 T=50 H=2 HV=2 K=12 V=12 family=deltanet beta=logit l2=fla prec=f32 h0=1 id=dn",
    "seed=17 T=30 H=1 HV=2 K=8 V=8 family=linear beta=prob l2=fla prec=f32 h0=1 id=linear",
    "seed=18 seqlens=0,5,0,37,1,0 H=2 HV=4 K=16 V=20 gate=softplus beta=logit_neg l2=ggml "
    "prec=f16 h0=1 layout=vk checkpoints=0,4,6,40,42 id=varlen",
    "seed=19 T=200 H=1 HV=1 K=32 V=48 regime=decay-small gate=softplus beta=logit l2=fla "
    "prec=f32 checkpoints=log id=decay-small",
    "seed=20 T=300 H=1 HV=2 K=16 V=16 regime=unit beta=prob l2=off prec=f32 final=0 id=unit",
    "seed=21 T=64 H=2 HV=2 K=24 V=40 regime=positive gate=softplus beta=logit l2=fla prec=bf16 "
    "h0=1 checkpoints=63 id=positive",
    "seed=22 T=150 H=1 HV=2 K=16 V=16 regime=lowrank family=deltanet beta=logit l2=fla prec=f32 "
    "id=lowrank",
    /* decode: one token per sequence, h0 in, ht out (the direct decode path), and a batch where
     * a checkpoint and a longer sequence send some sequences through the general path */
    "seed=23 seqlens=1,1,1,1,1 H=2 HV=4 K=24 V=32 gate=softplus beta=logit l2=fla prec=bf16 "
    "h0=1 id=decode",
    "seed=24 seqlens=1,3,1,1 H=1 HV=2 K=16 V=16 gate=lower_bound lb=-5 beta=logit l2=fla "
    "prec=f32 h0=1 checkpoints=0,2,5 id=decode-mixed",
};
#define N_MODES (sizeof mode_descs / sizeof mode_descs[0])

/* Edge sizes: K and V in {1, 7, 60, 100, 128, 129}. */
static const int64_t edge_dims[] = {1, 7, 60, 100, 128, 129};
#define N_EDGE (sizeof edge_dims / sizeof edge_dims[0])

static int isa_here(int32_t isa) {
  const char *why;
  return kda_simd_isa_available(isa, &why);
}


/* Runs simd with params in-process and returns its float64-widened outputs. */
static void run_simd(const kda_case *c, const char *params, kda_outputs *out) {
  char err[KDA_ERRLEN];
  kda_tensors_f64 in;
  kda_case_tensors(c, &in);
  ck_assert_msg(kda_outputs_alloc(&c->p, out, err, sizeof err) == KDA_OK, "%s", err);
  kda_call_opts opts = {0.0, 0, 0, 0};
  kda_call_result r;
  ck_assert_msg(kda_call_forward(kda_backend_find("simd"), params, &c->p, &in, out, &opts, &r,
                                 err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(r.outcome == KDA_CALL_OK, "simd %s on %s: %s (%s)", params, c->id,
                kda_call_outcome_name(r.outcome), r.msg);
}

static int same_bits(const double *a, const double *b, uint64_t n) {
  return n == 0 || memcmp(a, b, n * sizeof *a) == 0;
}

/* For each ISA here: threads=1,2,3 and head groups of 1 and 3 agree bit for bit, and the
 * result conforms (fp32). */
static void check_case(const char *desc) {
  kda_case c;
  kda_truth t;
  kda_test_gen_case(desc, &c, &t);
  for (int32_t isa = 0; isa < KDA_SIMD_ISA_COUNT; isa++) {
    if (!isa_here(isa)) continue;
    char params[64];
    kda_outputs base, other;
    snprintf(params, sizeof params, "isa=%s threads=1", kda_simd_isa_name(isa));
    run_simd(&c, params, &base);
    static const char *const others[] = {"threads=2", "threads=3", "threads=1 group=1",
                                         "threads=2 group=3"};
    for (size_t m = 0; m < sizeof others / sizeof others[0]; m++) {
      snprintf(params, sizeof params, "isa=%s %s", kda_simd_isa_name(isa), others[m]);
      run_simd(&c, params, &other);
      ck_assert_msg(same_bits(base.o, other.o, base.n_o) && same_bits(base.ht, other.ht, base.n_ht)
                        && same_bits(base.hc, other.hc, base.n_hc),
                    "%s: %s differs from threads=1", desc, params);
      kda_outputs_free(&other);
    }
    kda_outputs_free(&base);
    kda_conform_opts o;
    kda_conform_opts_init(&o);
    o.call.isolate = 0;
    kda_case_report r;
    char err[KDA_ERRLEN];
    ck_assert_msg(kda_conform_case(kda_backend_find("simd"), params, &c, &t, &o, &r, err,
                                   sizeof err) == KDA_OK, "%s", err);
    ck_assert_msg(r.verdict == KDA_VERDICT_PASS, "simd %s on %s: %s %s (o %g ht %g hc %g)",
                  params, desc, kda_verdict_name(r.verdict), r.reason, r.score.o.worst,
                  r.score.ht.worst, r.score.hc.worst);
    kda_case_report_free(&r);
  }
  kda_truth_free(&t);
  kda_case_free(&c);
}

START_TEST(test_modes) {
  check_case(mode_descs[_i]);
}
END_TEST

START_TEST(test_edge_sizes) {
  /* Every K with a V that cycles through the list, and V = 129 with K = 1. */
  char desc[256];
  const int64_t K = edge_dims[_i], V = edge_dims[(_i + 2) % N_EDGE];
  snprintf(desc, sizeof desc,
           "seed=%d T=9 H=1 HV=2 K=%lld V=%lld gate=softplus beta=logit l2=fla prec=f32 h0=1 "
           "layout=%s checkpoints=4 id=edge",
           30 + _i, (long long)K, (long long)V, _i % 2 ? "vk" : "kv");
  check_case(desc);
  snprintf(desc, sizeof desc, "seed=%d T=5 H=1 HV=1 K=%lld V=%lld gate=log l2=ggml prec=f32 id=e2",
           40 + _i, (long long)V, (long long)K);
  check_case(desc);
}
END_TEST

/* g = -inf in the log gate wipes the channel (SPEC.md §4.1); T = 0 returns h0. */
START_TEST(test_wipe_and_empty) {
  kda_case c;
  kda_truth t;
  char err[KDA_ERRLEN];
  kda_gen_desc d;
  ck_assert(kda_gen_parse("seed=50 T=20 H=1 HV=2 K=16 V=16 gate=log beta=logit l2=fla prec=f32 "
                          "h0=1 id=wipe", &d, err, sizeof err) == KDA_OK);
  ck_assert(kda_gen_case(&d, &c, err, sizeof err) == KDA_OK);
  kda_gen_desc_free(&d);
  for (int64_t e = 0; e < c.p.T * c.p.HV * c.p.K; e += 7) c.g[e] = -INFINITY;
  ck_assert_msg(kda_truth_compute(&c, NULL, &t, err, sizeof err) == KDA_OK, "%s", err);
  kda_outputs out;
  run_simd(&c, "threads=2", &out);
  kda_score s;
  ck_assert(kda_score_outputs(&c, &t, &out, KDA_PRECISION_FP32, &s, err, sizeof err) == KDA_OK);
  ck_assert_msg(kda_score_within_caps(&s), "wipe: o %g ht %g", s.o.worst, s.ht.worst);
  kda_score_free(&s);
  kda_outputs_free(&out);
  kda_truth_free(&t);
  kda_case_free(&c);
  check_case("seed=51 seqlens=0,0 H=1 HV=2 K=8 V=8 gate=log prec=f32 h0=1 id=empty");
}
END_TEST

/* What simd declines, with a reason, and the parameters it refuses. */
START_TEST(test_declines) {
  const kda_backend *b = kda_backend_find("simd");
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_nonnull(kda_backend_find("simd-avx2"));
  ck_assert_int_eq(b->precision_class, KDA_PRECISION_FP32);
  char err[KDA_ERRLEN], reason[KDA_ERRLEN];
  void *h;
  ck_assert_int_eq(b->open("isa=sse9", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(b->open("threads=-1", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(b->open("bogus", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(b->open("group=9", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_msg(strstr(err, "group=0..8"), "%s", err);
  kda_problem p;
  kda_problem_init(&p, 4, 1, 1, 8, 8);
  for (int32_t isa = 0; isa < KDA_SIMD_ISA_COUNT; isa++) {
    char params[64];
    snprintf(params, sizeof params, "isa=%s threads=2", kda_simd_isa_name(isa));
    ck_assert_int_eq(b->open(params, &h, err, sizeof err), KDA_OK);
    int32_t st = b->supports(h, &p, reason, sizeof reason);
    if (isa_here(isa)) {
      ck_assert_int_eq(st, KDA_OK);
    } else {
      ck_assert_int_eq(st, KDA_EUNSUPPORTED);
      ck_assert_msg(strstr(reason, "not available on this CPU"), "%s", reason);
    }
    b->close(h);
  }
  ck_assert_int_eq(b->open("", &h, err, sizeof err), KDA_OK);
  kda_problem big = p;
  big.K = 5000;
  ck_assert_int_eq(b->supports(h, &big, reason, sizeof reason), KDA_EUNSUPPORTED);
  ck_assert_msg(strstr(reason, "K, V <= 4096"), "%s", reason);
  b->close(h);
}
END_TEST

/* The decode path (one-token sequences straight from h0 to ht) and the general path (the
 * same sequences with a checkpoint on every token, which the decode path leaves alone) give
 * the same o and ht bit for bit, for every ISA here: a column's arithmetic must not depend on
 * which path, block width or pairing of blocks computed it (kda_simd.h).  V = 64, 128 and
 * 160 make the AVX-512 kernel run pairs of 32-column blocks (160: two pairs and a single). */
START_TEST(test_decode_path) {
  static const char *const shapes[] = {
      "K=1 V=8 gate=softplus", "K=7 V=24 gate=lower_bound lb=-4", "K=33 V=64 gate=log",
      "K=128 V=128 gate=softplus", "K=129 V=160 gate=softplus", "K=60 V=40 family=deltanet",
      "K=16 V=72 family=gdn gate=softplus", "K=24 V=16 family=linear"};
  for (size_t n = 0; n < sizeof shapes / sizeof shapes[0]; n++) {
    char desc[256];
    kda_case c[2];
    kda_truth t[2];
    for (int ck = 0; ck < 2; ck++) {
      snprintf(desc, sizeof desc,
               "seed=%d seqlens=1,1,1 H=1 HV=2 %s beta=logit l2=fla prec=f32 h0=1 %s id=dec",
               60 + (int)n, shapes[n], ck ? "checkpoints=0,1,2" : "");
      kda_test_gen_case(desc, &c[ck], &t[ck]);
    }
    for (int32_t isa = 0; isa < KDA_SIMD_ISA_COUNT; isa++) {
      if (!isa_here(isa)) continue;
      char params[64];
      kda_outputs fast, general;
      snprintf(params, sizeof params, "isa=%s threads=1", kda_simd_isa_name(isa));
      run_simd(&c[0], params, &fast);
      run_simd(&c[1], params, &general);
      ck_assert_msg(same_bits(fast.o, general.o, fast.n_o) &&
                        same_bits(fast.ht, general.ht, fast.n_ht),
                    "%s (%s): the decode path differs from the general path", shapes[n], params);
      kda_outputs_free(&fast);
      kda_outputs_free(&general);
    }
    for (int ck = 0; ck < 2; ck++) kda_truth_free(&t[ck]), kda_case_free(&c[ck]);
  }
}
END_TEST

/* Verdict of backend b (params) on case c, in-process. */
static int32_t verdict_of(const kda_backend *b, const char *params, const kda_case *c,
                          const kda_truth *t, char *why, size_t whylen) {
  char err[KDA_ERRLEN];
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  o.call.isolate = 0;
  kda_case_report r;
  ck_assert_msg(kda_conform_case(b, params, c, t, &o, &r, err, sizeof err) == KDA_OK, "%s", err);
  snprintf(why, whylen, "%s %s", kda_verdict_name(r.verdict), r.reason);
  int32_t v = r.verdict;
  kda_case_report_free(&r);
  return v;
}

/* A verdict that counts as passed (SPEC.md §7.6). */
static int passed(int32_t v) {
  return v == KDA_VERDICT_PASS || v == KDA_VERDICT_QUALITY_WARNING;
}

/* golden/L1 (when present): the plain float32 baseline ref-f32 and simd, with every ISA here,
 * pass every case (a QualityWarning for drift counts as passed; simd may decline). */
/* The vector gates (AVX2, AVX-512: each where this CPU has it) against the gate in double on
 * a sweep of y = g + bias through every range, tails included: softplus below -16.6 (log1p
 * of a number under 2^-24) and above 20, the libm lanes past |y| = 87, g = -inf, and n off
 * the vector width.  a within (4 + 3 |log a|) ulp of the double value (the float exponent's own
 * rounding is amplified by |log a|), or 1e-44 absolute (subnormals), or inf past FLT_MAX. */
static double gate_ref(int32_t mode, double y, double eA, double lb) {
  if (mode == KDA_GATE_SOFTPLUS) return exp(-eA * (fmax(y, 0.0) + log1p(exp(-fabs(y)))));
  if (mode == KDA_GATE_LOWER_BOUND) return exp(lb / (1.0 + exp(-y)));
  return exp(y);
}

START_TEST(test_vector_gate) {
  typedef void (*gate_fn)(int32_t, const float *, const float *, float, int32_t, float, int64_t,
                          float *, float *);
  const int32_t isas[2] = {KDA_SIMD_ISA_AVX2, KDA_SIMD_ISA_AVX512};
  const gate_fn fns[2] = {kda_simd_avx2_gate, kda_simd_avx512_gate};
  enum { N = 1201 };
  static float g[N], bias[N], a[N], tmp[N];
  for (int i = 0; i < N; i++) g[i] = -120.0f + 0.2f * (float)i, bias[i] = 0.0f;
  g[7] = -INFINITY, g[8] = -16.7f, g[9] = -16.5f, g[10] = 20.5f, g[11] = 19.5f, g[12] = 1e-9f;
  for (int f = 0; f < 2; f++) {
    if (!isa_here(isas[f])) continue;
    for (int32_t mode = KDA_GATE_LOG; mode <= KDA_GATE_LOWER_BOUND; mode++) {
      const float eA = mode == KDA_GATE_SOFTPLUS ? 0.75f : 1.0f, lb = -3.0f;
      for (int64_t n = 1; n <= N; n += n < 40 ? 1 : 97) {
        fns[f](mode, g, bias, eA, 0, lb, n, a, tmp);
        for (int64_t i = 0; i < n; i++) {
          const double want = gate_ref(mode, (double)g[i], eA, lb);
          const double tol = fmax((4.0 + 3.0 * fabs(log(want))) * 5.96e-8 * want, 1e-44);
          const int over = isinf((float)want); /* past FLT_MAX: a must be inf */
          ck_assert_msg(over ? isinf(a[i]) : fabs((double)a[i] - want) <= tol,
                        "%s gate mode %d n %lld: y = %.9g gives a = %.9g, want %.9g",
                        kda_simd_isa_name(isas[f]), (int)mode, (long long)n, (double)g[i],
                        (double)a[i], want);
        }
      }
    }
  }
}
END_TEST

/* The mean error of a = exp(g) in ulps of the result, on log-gates near zero where a bias in
 * exp becomes a drift of the state (SPEC.md §7.3, "Long sequences"): a decay that is one tenth
 * of an ulp too small every step is a systematic error no float32 rounding makes.  libm's expf
 * is unbiased there (mean 0.00); the polynomial must be too. */
static double exp_mean_ulps(void (*fn)(int32_t, const float *, const float *, float, int32_t,
                                       float, int64_t, float *, float *),
                            double lo, double hi) {
  enum { N = 1 << 15 };
  static float g[N], a[N], tmp[N], bias[N];
  for (int i = 0; i < N; i++) g[i] = (float)(lo + (hi - lo) * ((double)i + 0.5) / N);
  fn(KDA_GATE_LOG, g, bias, 1.0f, 0, 0.0f, N, a, tmp);
  double sum = 0;
  for (int i = 0; i < N; i++) {
    const double want = exp((double)g[i]);
    int e;
    frexp(want, &e);
    sum += ((double)a[i] - want) / ldexp(1.0, e - 24); /* ulp of a float in [2^(e-1), 2^e) */
  }
  return sum / N;
}

START_TEST(test_exp_bias) {
  typedef void (*gate_fn)(int32_t, const float *, const float *, float, int32_t, float, int64_t,
                          float *, float *);
  const int32_t isas[2] = {KDA_SIMD_ISA_AVX2, KDA_SIMD_ISA_AVX512};
  const gate_fn fns[2] = {kda_simd_avx2_gate, kda_simd_avx512_gate};
  const double ranges[4][2] = {{-2e-4, 0.0}, {-5e-3, -2e-4}, {-0.1, -5e-3}, {-1.0, -0.1}};
  for (int f = 0; f < 2; f++) {
    if (!isa_here(isas[f])) continue;
    for (int r = 0; r < 4; r++) {
      const double m = exp_mean_ulps(fns[f], ranges[r][0], ranges[r][1]);
      ck_assert_msg(fabs(m) <= 0.02, "%s exp on (%g, %g): mean error %.3f ulp (want |mean| <= 0.02)",
                    kda_simd_isa_name(isas[f]), ranges[r][0], ranges[r][1], m);
    }
  }
}
END_TEST

START_TEST(test_golden_l1) {
  DIR *dir = opendir("golden/L1");
  if (!dir) return; /* the golden set is optional in a checkout; `make conform` scores it */
  struct dirent *e;
  while ((e = readdir(dir))) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".npz") != 0) continue;
    char path[4096], err[KDA_ERRLEN], why[2 * KDA_ERRLEN];
    snprintf(path, sizeof path, "golden/L1/%s", e->d_name);
    kda_case c;
    kda_truth t;
    ck_assert_msg(kda_case_load(path, &c, err, sizeof err) == KDA_OK, "%s", err);
    if (!c.id) c.id = strdup(e->d_name);
    ck_assert_msg(kda_truth_compute(&c, path, &t, err, sizeof err) == KDA_OK, "%s", err);
    int32_t v = verdict_of(kda_backend_find("ref-f32"), "", &c, &t, why, sizeof why);
    ck_assert_msg(passed(v), "%s ref-f32: %s", path, why);
    for (int32_t isa = 0; isa < KDA_SIMD_ISA_COUNT; isa++) {
      if (!isa_here(isa)) continue;
      char params[64];
      snprintf(params, sizeof params, "isa=%s threads=2", kda_simd_isa_name(isa));
      v = verdict_of(kda_backend_find("simd"), params, &c, &t, why, sizeof why);
      ck_assert_msg(passed(v) || v == KDA_VERDICT_NOT_SUPPORTED, "%s %s: %s", path, params,
                    why);
    }
    kda_truth_free(&t);
    kda_case_free(&c);
  }
  closedir(dir);
}
END_TEST

static Suite *simd_suite(void) {
  Suite *s = suite_create("simd");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_modes, 0, (int)N_MODES);
  tcase_add_loop_test(tc, test_edge_sizes, 0, (int)N_EDGE);
  tcase_add_test(tc, test_decode_path);
  tcase_add_test(tc, test_wipe_and_empty);
  tcase_add_test(tc, test_declines);
  tcase_add_test(tc, test_vector_gate);
  tcase_add_test(tc, test_exp_bias);
  tcase_add_test(tc, test_golden_l1);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return kda_test_main(simd_suite(), CK_NORMAL, CK_NOFORK);
}

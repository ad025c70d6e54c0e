/* check_tools.c: Check tests of the kda command, run as a separate process (tools/).
 * SPDX-License-Identifier: MIT
 *
 * The binary is $KDA_BIN (set by `make check-unit`), else ./build/kda.  Every test works in
 * its own mkdtemp directory; the command runs with standard input from /dev/null and its
 * standard output and error captured into files there.  KDA_CHECK_SHOW=1 prints every
 * expected error message, to review their wording.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "kda_case.h"
#include "kda_npz.h"
#include "kda_problem.h"
#include "kda_version.h"
#include "kda_test.h"

#if defined(__has_include)
#if __has_include("kda_mpfr.h")
#define KDA_CHECK_HAVE_MPFR 1 /* kda ref has --backend mpfr (tools/kda_cmd_ref.c) */
#endif
#endif
#ifndef KDA_CHECK_HAVE_MPFR
#define KDA_CHECK_HAVE_MPFR 0
#endif

/* The shared test harness (tests/kda_test.h), under the short names this file's tests use. */
#define run_result kda_test_result
#define run_free kda_test_result_free
#define run_argv kda_test_run_argv
#define kda kda_test_run
#define kda_bin kda_test_bin
#define tpath kda_test_path
#define read_all kda_test_read_all
#define write_all kda_test_write_all
#define exists kda_test_exists
#define count_entries kda_test_count_entries
#define expect_error kda_test_expect_error
#define expect_ok kda_test_expect_ok
#define plugin_path kda_test_plugin_path

static int same_bytes(const char *a, const char *b) {
  size_t la = 0, lb = 0;
  unsigned char *x = read_all(a, &la), *y = read_all(b, &lb);
  int same = x && y && la == lb && memcmp(x, y, la) == 0;
  free(x);
  free(y);
  return same;
}

/* ---- The hand-computed case (SPEC.md §3.1), K = V = 2, T = 3, H = HV = 1, S0 = 0,
 * pre-gated g = 0 (so a = exp(0) = 1 and the decay is the identity), beta = 0.5 as a
 * probability, no L2, scale = 0.5 given explicitly.  Row i of S is key index i.
 *
 *  t=1  k=[1,0] v=[2,4] q=[1,1]
 *       p = S^T k = [0,0];  S += 0.5*k(v-p)^T = 0.5*[1,0]^T[2,4]   ->  S = [[1,2],[0,0]]
 *       o = S^T (0.5 q) = S^T [0.5,0.5] = [0.5, 1]
 *  t=2  k=[1,1] v=[1,0] q=[2,0]
 *       p = S^T k = [1+0, 2+0] = [1,2];  v-p = [0,-2];  S += 0.5*[1,1]^T[0,-2]
 *                                                          ->  S = [[1,1],[0,-1]]
 *       o = S^T [1,0] = [1, 1]
 *  t=3  k=[0,2] v=[3,1] q=[1,-1]
 *       p = S^T k = [2*0, 2*(-1)] = [0,-2];  v-p = [3,3];  S += 0.5*[0,2]^T[3,3]
 *                                                          ->  S = [[1,1],[3,2]]
 *       o = S^T [0.5,-0.5] = [0.5-1.5, 0.5-1] = [-1, -0.5]
 *  ht = S = [[1,1],[3,2]] (layout kv, shape [N=1, HV=1, K=2, V=2]).
 * Every value is dyadic and small, so float64 and float32 give these exactly. */
static const double hand_q[] = {1, 1, 2, 0, 1, -1};
static const double hand_k[] = {1, 0, 1, 1, 0, 2};
static const double hand_v[] = {2, 4, 1, 0, 3, 1};
static const double hand_g[] = {0, 0, 0, 0, 0, 0};
static const double hand_beta[] = {0.5, 0.5, 0.5};
static const double hand_o[] = {0.5, 1, 1, 1, -1, -0.5};
static const double hand_ht[] = {1, 1, 3, 2};

/* One array member to write through the kda_npz writer. */
typedef struct tmember {
  const char *name;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[4];
  const double *data;
} tmember;

typedef struct tcase {
  const char *manifest;
  int n;
  tmember m[8];
} tcase;

/* The manifest of the hand case (SPEC.md §10.2), with scale = 0.5 given explicitly. */
static const char hand_manifest[] =
    "{\"schema\": \"kda-case/1\", \"id\": \"hand-k2v2t3\", \"input_precision\": \"f64\","
    " \"problem\": {\"N\": 1, \"T\": 3, \"H\": 1, \"HV\": 1, \"K\": 2, \"V\": 2,"
    " \"n_checkpoints\": 0, \"family\": \"kda\", \"gate\": \"log\", \"beta\": \"prob\","
    " \"l2\": \"off\", \"head_map\": \"div\", \"state_layout\": \"kv\", \"has_A_log\": false,"
    " \"has_initial_state\": false, \"want_final_state\": true, \"scale\": 0.5,"
    " \"lower_bound\": -5.0, \"l2_eps\": 1e-06}}";

static tcase hand_case(void) {
  tcase c = {hand_manifest, 5,
             {{"q", KDA_DTYPE_F64, 3, {3, 1, 2}, hand_q},
              {"k", KDA_DTYPE_F64, 3, {3, 1, 2}, hand_k},
              {"v", KDA_DTYPE_F64, 3, {3, 1, 2}, hand_v},
              {"g", KDA_DTYPE_F64, 3, {3, 1, 2}, hand_g},
              {"beta", KDA_DTYPE_F64, 2, {3, 1}, hand_beta}}};
  return c;
}

static void write_case(const char *path, const tcase *c) {
  char err[KDA_ERRLEN] = "";
  kda_npz_writer *w = NULL;
  ck_assert_msg(kda_npz_writer_open(path, &w, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(kda_npz_writer_set_manifest(w, c->manifest, err, sizeof err) == KDA_OK, "%s",
                err);
  for (int i = 0; i < c->n; i++)
    ck_assert_msg(kda_npz_writer_add_f64(w, c->m[i].name, c->m[i].dtype, c->m[i].ndim,
                                         c->m[i].shape, c->m[i].data, err, sizeof err) == KDA_OK,
                  "%s: %s", c->m[i].name, err);
  ck_assert_msg(kda_npz_writer_commit(w, err, sizeof err) == KDA_OK, "%s", err);
}

static tmember *find_member(tcase *c, const char *name) {
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->m[i].name, name) == 0) return &c->m[i];
  ck_abort_msg("no member %s", name);
  return NULL;
}

static void drop_member(tcase *c, const char *name) {
  tmember *m = find_member(c, name);
  int i = (int)(m - c->m);
  memmove(&c->m[i], &c->m[i + 1], (size_t)(c->n - i - 1) * sizeof c->m[0]);
  c->n--;
}

/* Loads member name of a result file as float64, checking its dtype and element count. */
static double *load_member(const char *path, const char *name, int32_t dtype, uint64_t count) {
  char err[KDA_ERRLEN] = "";
  kda_npz *z = NULL;
  kda_array_info info;
  double *x = NULL;
  ck_assert_msg(kda_npz_open(path, &z, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(kda_npz_load_f64(z, name, &info, &x, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(info.dtype == dtype, "%s: %s has dtype %d, want %d", path, name,
                (int)info.dtype, (int)dtype);
  ck_assert_uint_eq(info.count, count);
  kda_npz_close(z);
  return x;
}

static void expect_values(const double *got, const double *want, int n, const char *what) {
  for (int i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i], "%s[%d] = %.17g, want %.17g", what, i, got[i], want[i]);
}

/* ---- Help and usage. */

static void expect_help(const char *sub, const char *const *words) {
  run_result r = {0, NULL, NULL};
  if (sub) kda(&r, sub, "--help", NULL);
  else kda(&r, "--help", NULL);
  expect_ok(&r, sub ? sub : "kda --help");
  for (int i = 0; words[i]; i++)
    ck_assert_msg(strstr(r.out, words[i]) != NULL, "kda %s --help does not mention '%s'",
                  sub ? sub : "", words[i]);
  ck_assert_msg(strstr(r.out, "Exit status") != NULL, "kda %s --help lacks the exit statuses",
                sub ? sub : "");
  run_free(&r);
}

START_TEST(test_help) {
  static const char *const top[] = {"ref", "gen", "inspect", "--help", "-h", "--version", "-V",
                                    NULL};
  static const char *const ref[] = {"--backend", "-b", "--dtype", "-d", "--output", "-o",
                                    "--help", "-h", "ref-f64", "ref-f32", "mpfr", "f64", "f32",
                                    "  0 ", "  2 ", NULL};
  static const char *const gen[] = {"--output", "-o", "--list-regimes", "-l", "--help", "-h",
                                    "  0 ", "  2 ", NULL};
  static const char *const inspect[] = {"--json", "-j", "--values", "-n", "--help", "-h",
                                        "  0 ", "  2 ", NULL};
  expect_help(NULL, top);
  expect_help("ref", ref);
  expect_help("gen", gen);
  expect_help("inspect", inspect);
  static const char *const golden[] = {"--expand", "--output", "-o", "--write", "--verify",
                                       "--level", "L2", "--prec", NULL};
  expect_help("golden", golden);
  static const char *const conform[] = {"--backend", "-b", "--plugin", "-p", "--params",
                                        "deprecated", "-k GLOB", "flag:", "--list-cases",
                                        "--list-backends", "--json", "KDA_PLUGIN_PATH", "mpfr",
                                        NULL};
  static const char *const bench[] = {"--backend", "-b", "--stream-mib", "FMA-slot", "--threads",
                                      "--isa", "--params", "--ref-tokens", NULL};
  static const char *const ref_spec[] = {"SPEC", "KDA_PLUGIN_PATH", "simd", NULL};
  expect_help("conform", conform);
  expect_help("bench", bench);
  expect_help("ref", ref_spec);
  run_result r = {0, NULL, NULL};
  kda(&r, "--version", NULL);
  expect_ok(&r, "kda --version");
  ck_assert_str_eq(r.out, "kda " KDA_VERSION_STRING "\n");
  kda(&r, "gen", "--list-regimes", NULL);
  expect_ok(&r, "kda gen --list-regimes");
  for (int32_t g = KDA_REGIME_RANDN; g <= KDA_REGIME_LOWRANK_SLOW; g++)
    ck_assert_msg(strstr(r.out, kda_regime_name(g)) != NULL, "--list-regimes lacks %s",
                  kda_regime_name(g));
  run_free(&r);
}
END_TEST

/* Each usage error: exit 2, one line "kda[ SUB]: ..." naming the problem. */
START_TEST(test_usage_errors) {
  static const struct {
    const char *args[8];
    const char *prefix, *phrase;
  } cases[] = {
      {{NULL}, "kda: ", "missing subcommand"},
      {{"frob", NULL}, "kda: ", "unknown subcommand 'frob'"},
      {{"--frob", NULL}, "kda: ", "unknown option '--frob'"},
      {{"ref", NULL}, "kda ref: ", "missing INPUT"},
      {{"ref", "in.npz", NULL}, "kda ref: ", "missing -o"},
      {{"ref", "--frob", "in.npz", "-o", "x.npz", NULL}, "kda ref: ", "unknown option '--frob'"},
      {{"ref", "-x", "in.npz", "-o", "x.npz", NULL}, "kda ref: ", "unknown option '-x'"},
      {{"ref", "in.npz", "-o", NULL}, "kda ref: ", "'-o' needs an argument"},
      {{"ref", "in.npz", "--backend", NULL}, "kda ref: ", "'--backend' needs an argument"},
      {{"ref", "--backend", "nope", "in.npz", "-o", "x.npz", NULL}, "kda ref: ",
       "unknown backend 'nope'"},
      {{"ref", "--dtype", "f16", "in.npz", "-o", "x.npz", NULL}, "kda ref: ",
       "unknown dtype 'f16'"},
      {{"ref", "a.npz", "b.npz", "-o", "x.npz", NULL}, "kda ref: ", "unexpected argument"},
      {{"gen", NULL}, "kda gen: ", "missing DESCRIPTION"},
      {{"gen", "seed=1", NULL}, "kda gen: ", "missing -o"},
      {{"gen", "--frob", "seed=1", "-o", "x.npz", NULL}, "kda gen: ", "unknown option"},
      {{"gen", "--list-regimes", "seed=1", NULL}, "kda gen: ", "takes no DESCRIPTION"},
      {{"golden", "--verify", "--certifier", "dd", NULL}, "kda golden: ",
       "bad value 'dd' for --certifier"},
      {{"golden", "--bench-certify", "--T", "0", NULL}, "kda golden: ", "bad value '0' for --T"},
      {{"golden", "--bench-certify", "--prec", "tf32", NULL}, "kda golden: ",
       "bad value 'tf32' for --prec"},
      {{"inspect", NULL}, "kda inspect: ", "missing FILE"},
      {{"inspect", "a.npz", "b.npz", NULL}, "kda inspect: ", "unexpected argument"},
      {{"inspect", "--values", "abc", "a.npz", NULL}, "kda inspect: ", "--values"},
      {{"inspect", "--values", "-3", "a.npz", NULL}, "kda inspect: ", "--values"},
      {{"inspect", "--json=yes", "a.npz", NULL}, "kda inspect: ", "--json=yes"},
      {{"bench", "--gate", "bogus", NULL}, "kda bench: ", "bad --gate 'bogus'"},
      {{"bench", "--params", "group=9", NULL}, "kda bench: ", "bad parameter 'group=9'"},
      {{"bench", "--isa", "sse9", NULL}, "kda bench: ", "unknown --isa 'sse9'"},
      {{"bench", "-T", "0", NULL}, "kda bench: ", "bad --tokens"},
      {{"bench", "-B", "0", NULL}, "kda bench: ", "bad --batch"},
      {{"bench", "-N", "3,0", NULL}, "kda bench: ", "bad --decode-seqs"},
      {{"bench", "-B", "2", "-T", "1099511627776", NULL}, "kda bench: ", "too many tokens"},
      {{"bench", "-b", "nope", NULL}, "kda bench: ", "unknown backend 'nope'"},
      {{"bench", "-b", "simd:bogus=1", NULL}, "kda bench: ", "backend 'simd': unknown parameter 'bogus'"},
      {{"bench", "-b", "ref-f32:x", NULL}, "kda bench: ", "backend 'ref-f32': unknown parameter 'x'"},
      {{"bench", "-b", "simd", "--threads", "1", NULL}, "kda bench: ", "-b simd:isa=avx2,threads=1"},
      {{"bench", "-b", "/nonexistent/libx.so:device=0", NULL}, "kda bench: ", "/nonexistent/libx.so"},
      {{"ref", "-b", "ref-f64:x=1", "in.npz", "-o", "x.npz", NULL}, "kda ref: ",
       "backend 'ref-f64': unknown parameter 'x'"},
      {{"ref", "-b", "mpfr:prec=9", "in.npz", "-o", "x.npz", NULL}, "kda ref: ",
       "backend 'mpfr': bad parameter 'prec=9'"},
      {{"conform", "-b", "simd:bogus=1", "golden/L1/t17-gdn.npz", NULL}, "kda conform: ",
       "backend 'simd': unknown parameter 'bogus'"},
      {{"conform", "-b", "simd", "--params", "bogus=1", "golden/L1/t17-gdn.npz", NULL},
       "kda conform: ", "backend 'simd': unknown parameter 'bogus'"},
      {{"conform", "-b", "mpfr:proof=2", "golden/L1/t17-gdn.npz", NULL}, "kda conform: ",
       "backend 'mpfr': bad parameter 'proof=2'"},
      {{"conform", "-p", "ref-f64", "golden/L1/t17-gdn.npz", NULL}, "kda conform: ",
       "names the built-in backend 'ref-f64'"},
      {{"conform", "-b", "nope", "golden/L1/t17-gdn.npz", NULL}, "kda conform: ",
       "unknown backend 'nope'"},
  };
  run_result r = {0, NULL, NULL};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_argv(&r, cases[i].args);
    char what[128];
    snprintf(what, sizeof what, "usage case %zu (%s %s)", i,
             cases[i].args[0] ? cases[i].args[0] : "", cases[i].args[0] && cases[i].args[1]
                                                            ? cases[i].args[1] : "");
    expect_error(&r, what, cases[i].prefix, cases[i].phrase, NULL);
    ck_assert_msg(!exists("x.npz"), "%s left x.npz behind", what);
  }
  run_free(&r);
}
END_TEST

/* kda bench on a tiny shape: it runs every row it announces and prints the ratio lines
 * (a functional check; speed is only ever read from a real run, never asserted). */
START_TEST(test_bench_runs) {
  run_result r = {0, NULL, NULL};
  kda(&r, "bench", "-T", "40", "--heads", "3", "-K", "9", "--value", "20", "-N", "3",
      "--threads", "1,2", "--ref-tokens", "16", "--params", "group=2", NULL);
  expect_ok(&r, "kda bench");
  static const char *const want[] = {"simd parameters: group=2", "prefill T=40", "ref-f32*",
                                     "decode N=3", "ratios prefill T=40", "ratios decode N=3",
                                     "1->2 threads", NULL};
  for (int i = 0; want[i]; i++)
    ck_assert_msg(strstr(r.out, want[i]) != NULL, "kda bench output lacks '%s':\n%s", want[i],
                  r.out);
  run_free(&r);
  /* Lists of batches and decode sizes (bench_cuda's shapes: B1 and B4 prefill, three decode
   * sizes): a row and a ratio line for each, prefill ratios against the FMA peak and decode
   * ratios against the bandwidth; ref-tokens is cut to whole sequences (7 of 3 x 40: 6). */
  kda(&r, "bench", "-T", "40,24", "-B", "1,3", "--heads", "2", "-K", "8", "--value", "8", "-N",
      "2,5", "--threads", "1", "--ref-tokens", "7", NULL);
  expect_ok(&r, "kda bench -B -N");
  static const char *const rows[] = {"\nprefill T=40 ", "\nprefill T=24 ", "\nprefill B=3 T=40 ",
                                     "\nprefill B=3 T=24 ", "\ndecode N=2 ", "\ndecode N=5 ",
                                     "ratios prefill B=3 T=24:", "ratios decode N=5:", NULL};
  for (int i = 0; rows[i]; i++)
    ck_assert_msg(strstr(r.out, rows[i]) != NULL, "kda bench output lacks '%s':\n%s", rows[i],
                  r.out);
  char line[3][512];
  static const char *const heads[3] = {"ratios prefill B=3 T=24:", "ratios decode N=5:",
                                       "ratios decode N=2:"};
  for (int i = 0; i < 3; i++) { /* the ratio line alone */
    const char *at = strstr(r.out, heads[i]);
    ck_assert(at != NULL);
    snprintf(line[i], sizeof line[i], "%.*s", (int)strcspn(at, "\n"), at);
  }
  ck_assert_msg(strstr(line[0], "of FMA peak") && !strstr(line[0], "bandwidth"), "%s", line[0]);
  for (int i = 1; i < 3; i++)
    ck_assert_msg(strstr(line[i], "of memory bandwidth") && !strstr(line[i], "FMA"), "%s", line[i]);
  run_free(&r);
}
END_TEST

/* One row of the bench table: the GFLOP/s and % of peak of the first line that starts with
 * shape and holds label; returns 0 when found. */
static int bench_row(const char *out, const char *shape, const char *label, double *gflops,
                     double *pct) {
  for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    const char *e = strchr(l, '\n');
    size_t n = e ? (size_t)(e - l) : strlen(l);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), l);
    if (strncmp(line, shape, strlen(shape)) != 0 || !strstr(line, label)) continue;
    /* shape (2 words) label threads reps median min max tokens/s GFLOP/s of-peak */
    if (sscanf(line, "%*s %*s %*s %*s %*d %*f %*f %*f %*f %lf %lf%%", gflops, pct) == 2) return 0;
  }
  return -1;
}

/* kda bench -b through the backend path: built-ins with parameters, a float64 plugin, a
 * plugin with resident buffers; the FMA peak printed is the one its ratios use. */
START_TEST(test_bench_backends) {
  run_result r = {0, NULL, NULL};
  char resident[1100], mutant[1100];
  snprintf(resident, sizeof resident, "%s", plugin_path("kda_plugin_resident.so"));
  snprintf(mutant, sizeof mutant, "%s:mutant=none", plugin_path("kda_plugin_mutants.so"));
  kda(&r, "bench", "-T", "24", "--heads", "2", "-K", "8", "--value", "16", "-N", "2",
      "--stream-mib", "2", "-b", "ref-f32", "-b", "simd:threads=1", "-b", mutant, "-b", resident,
      NULL);
  expect_ok(&r, "kda bench -b");
  static const char *const want[] = {
      "FMA-slot equivalents (an FMA = 2 FLOP", "backend simd(", "simd:threads=1",
      "backend mutant: mutant:mutant=none; timed on host buffers",
      "backend resident(none): resident; timed on resident buffers",
      "its peak 1000.00 GFLOP/s", "memory bandwidth (STREAM, this run, 1 thread",
      "ratios prefill T=24: ref-f32/ref-f32", "mutant/ref-f32", "% of memory bandwidth", NULL};
  for (int i = 0; want[i]; i++)
    ck_assert_msg(strstr(r.out, want[i]) != NULL, "kda bench -b output lacks '%s':\n%s", want[i],
                  r.out);
  /* The printed peak is the figure of the ratios: a 1-thread row's % is GFLOP/s / peak. */
  double peak = 0, gf = 0, pct = 0;
  const char *pk = strstr(r.out, "FMA peak, one core, ");
  if (pk) {
    ck_assert_int_eq(sscanf(strchr(pk, ':') + 1, "%lf GFLOP/s", &peak), 1);
    ck_assert_int_eq(bench_row(r.out, "prefill T=24", "simd(", &gf, &pct), 0);
    /* Within the rows' print rounding: % to 0.05, GFLOP/s and the peak to 0.005 each (a
     * slow row, e.g. under ASan, makes the GFLOP/s rounding count). */
    const double tol = 0.05 + 100 * (0.005 + 0.005 * gf / peak) / peak + 1e-9;
    ck_assert_msg(fabs(100 * gf / peak - pct) <= tol,
                  "simd row: %g GFLOP/s, %g%% of a printed peak of %g GFLOP/s", gf, pct, peak);
    /* The resident plugin's own peak (describe) replaces the CPU's. */
    ck_assert_int_eq(bench_row(r.out, "prefill T=24", "resident(", &gf, &pct), 0);
    ck_assert_msg(fabs(100 * gf / 1000 - pct) <= 0.051 + 0.001 * pct, "resident: %g, %g%%", gf, pct);
  }
  /* A resident-buffer failure is an error, exit 2. */
  snprintf(resident, sizeof resident, "%s:fail=buffers", plugin_path("kda_plugin_resident.so"));
  kda(&r, "bench", "-T", "4", "--heads", "1", "-K", "4", "--value", "4", "-N", "0", "-b",
      resident, NULL);
  ck_assert_msg(r.status == 2 && strstr(r.err, "buffers_create refused"), "status %d: %s",
                r.status, r.err);
  run_free(&r);
}
END_TEST

/* kda bench on the element types of a variant slot (SPEC.md §7.8): plugin_half checks that
 * its buffers are of the types its parameters name (else the call fails, exit 2); a parameter
 * string its variant rejects is a usage error. */
START_TEST(test_bench_variants) {
  run_result r = {0, NULL, NULL};
  char bf16[1100], f64[1100], bad[1100];
  const char *half = plugin_path("kda_plugin_half.so");
  snprintf(bf16, sizeof bf16, "%s:input=bf16 output=bf16", half);
  snprintf(f64, sizeof f64, "%s:input=f64 output=f64", half);
  snprintf(bad, sizeof bad, "%s:input=bf17", half);
  kda(&r, "bench", "-T", "16", "--heads", "1", "-K", "8", "--value", "8", "-N", "2",
      "--stream-mib", "1", "-b", bf16, "-b", f64, NULL);
  expect_ok(&r, "kda bench -b half:input=bf16");
  ck_assert_msg(strstr(r.out, "prefill T=16     half[bf16]") && strstr(r.out, "decode N=2       half "),
                "%s", r.out);
  kda(&r, "bench", "-T", "16", "--heads", "1", "-K", "8", "--value", "8", "-N", "0", "-b", bad,
      NULL);
  ck_assert_msg(r.status == 2 && strstr(r.err, "rejects the parameters 'input=bf17'"),
                "status %d: %s", r.status, r.err);
  run_free(&r);
}
END_TEST

/* kda conform: specs with parameters, a plugin found on KDA_PLUGIN_PATH, the case filter,
 * --list-cases and --list-backends, mpfr as a backend. */
START_TEST(test_conform_backend_path) {
  run_result r = {0, NULL, NULL};
  kda(&r, "conform", "-q", "--no-prefix", "-b", "ref-f32", "-b", "simd:isa=scalar,threads=1",
      "-k", "t17-*", "-k", "!t17-x", "golden/L1", NULL);
  expect_ok(&r, "conform -k");
  ck_assert_str_eq(r.out, "2 passed, 0 failed, 0 skipped, 0 warnings\n"); /* -q: only the final line */
  char dir[1100];
  snprintf(dir, sizeof dir, "%s", plugin_path(""));
  setenv("KDA_PLUGIN_PATH", dir, 1);
  kda(&r, "conform", "-q", "--no-prefix", "-b", "kda_plugin_mutants:mutant=transposed_state",
      "golden/L1/t17-gdn.npz", NULL);
  ck_assert_msg(r.status == 1 && strstr(r.out, "FAIL"), "mutant on the search path: %d %s",
                r.status, r.out);
  /* A plugin's parameters are its own to reject (per case: plugins are not opened up front). */
  kda(&r, "conform", "-q", "--no-prefix", "-p", "kda_plugin_mutants:bogus=1",
      "golden/L1/t17-gdn.npz", NULL);
  ck_assert_msg(r.status == 1 && strstr(r.out, "unknown parameter 'bogus=1'"), "%d %s", r.status,
                r.out);
  unsetenv("KDA_PLUGIN_PATH");
  kda(&r, "conform", "-b", "kda_plugin_mutants", "golden/L1/t17-gdn.npz", NULL);
  expect_error(&r, "plugin off the search path", "kda conform: ", "KDA_PLUGIN_PATH", NULL);
  kda(&r, "conform", "--list-cases", "-k", "flag:FAMILY_GDN", "golden/L1", NULL);
  expect_ok(&r, "--list-cases");
  ck_assert_msg(strstr(r.out, "t17-gdn ") && strstr(r.out, "FAMILY_GDN") &&
                !strstr(r.out, "t15-log-prob"), "--list-cases:\n%s", r.out);
  kda(&r, "conform", "--list-backends", NULL);
  expect_ok(&r, "--list-backends");
  static const char *const names[] = {"ref-f64 ", "ref-f32 ", "simd ", "simd-avx512 ",
                                      "simd-avx2 ", "simd-scalar ", "mpfr ", NULL};
  for (int i = 0; names[i]; i++)
    ck_assert_msg(strstr(r.out, names[i]), "--list-backends lacks %s:\n%s", names[i], r.out);
  ck_assert_msg(strstr(r.out, "\nmpfr           fp64  f64->f64 no "), "mpfr is not off the "
                "default set:\n%s", r.out);
  /* Plugins are listed through their workers (SPEC.md §7.8): one whose constructor aborts and
   * one without its entry are rows saying why, and the listing completes (exit 0). */
  char abort_so[1100], noentry_so[1100], mutants_so[1100];
  snprintf(abort_so, sizeof abort_so, "%s", plugin_path("kda_plugin_ctor_abort.so"));
  snprintf(noentry_so, sizeof noentry_so, "%s", plugin_path("kda_plugin_noentry.so"));
  snprintf(mutants_so, sizeof mutants_so, "%s:mutant=none", plugin_path("kda_plugin_mutants.so"));
  kda(&r, "conform", "--list-backends", "-p", abort_so, "-p", noentry_so, "-p", mutants_so, NULL);
  expect_ok(&r, "--list-backends of hostile plugins");
  ck_assert_msg(strstr(r.out, "not available: load: crash: killed by signal 6") &&
                strstr(r.out, "no symbol 'kda_backend_entry'") &&
                strstr(r.out, "\nmutant         fp32  f64->f64 -        yes "),
                "--list-backends of hostile plugins:\n%s", r.out);
  kda(&r, "conform", "--list-backends", "--json", "-p", abort_so, "-p", mutants_so, "-b",
      "ref-f64:x", NULL);
  expect_ok(&r, "--list-backends --json");
  json_error_t je;
  json_t *lj = json_loads(r.out, 0, &je), *lb = json_object_get(lj, "backends");
  ck_assert_msg(lj && json_array_size(lb) == 3, "--list-backends --json: %s", r.out);
  ck_assert_str_eq(json_string_value(json_object_get(lj, "schema")), "kda-backends/1");
  json_t *b0 = json_array_get(lb, 0), *b1 = json_array_get(lb, 1), *b2 = json_array_get(lb, 2);
  ck_assert_str_eq(json_string_value(json_object_get(b0, "name")), "ref-f64");
  ck_assert(json_is_false(json_object_get(b0, "runs")));
  ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(b0, "why")), "parameter 'x'"));
  ck_assert(json_is_false(json_object_get(b1, "runs")) && json_is_null(json_object_get(b1, "class")));
  ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(b1, "why")), "load: crash"));
  ck_assert_str_eq(json_string_value(json_object_get(b1, "source")), "plugin");
  ck_assert(json_is_true(json_object_get(b2, "runs")));
  ck_assert_str_eq(json_string_value(json_object_get(b2, "params")), "mutant=none");
  ck_assert_str_eq(json_string_value(json_object_get(b2, "class")), "fp32");
  json_decref(lj);
  kda(&r, "conform", "--json", "golden/L1", NULL);
  expect_error(&r, "--json alone", "kda conform: ", "--json needs --list-backends", NULL);
  kda(&r, "conform", "--list-backends", "-b", "simd:threads=3", "-b", "ref-f64:x", NULL);
  expect_ok(&r, "--list-backends -b");
  ck_assert_msg(strstr(r.out, "3 threads") && strstr(r.out, "not available: open: unknown "
                "parameter 'x'"), "--list-backends -b:\n%s", r.out);
  kda(&r, "conform", "-q", "--no-prefix", "-b", "mpfr:prec=64", "golden/L0/l0-reflection.npz",
      NULL);
  expect_ok(&r, "conform -b mpfr");
  ck_assert_str_eq(r.out, "1 passed, 0 failed, 0 skipped, 0 warnings\n");
  run_free(&r);
}
END_TEST

/* kda golden --list says which sets the lookup of kda conform and --verify finds, and where
 * (SPEC.md §12.3): ./golden here, $KDA_GOLDEN before it, and why there is none. */
START_TEST(test_golden_list_sets) {
  run_result r = {0, NULL, NULL};
  unsetenv("KDA_GOLDEN");
  kda(&r, "golden", "--list", NULL);
  expect_ok(&r, "golden --list");
  ck_assert_msg(strncmp(r.out, "golden sets in golden (from ./golden):\n", 39) == 0 &&
                strstr(r.out, "\n  L1       present: ") && strstr(r.out, " case files in golden/L1\n") &&
                strstr(r.out, "\ncatalog:\nL0  "), "golden --list:\n%.600s", r.out);
  mkdir(tpath("gset"), 0755);
  mkdir(tpath("gset/L1"), 0755);
  FILE *f = fopen(tpath("gset/L1/x.npz"), "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  setenv("KDA_GOLDEN", tpath("gset"), 1);
  kda(&r, "golden", "--list", NULL);
  expect_ok(&r, "golden --list with KDA_GOLDEN");
  char want[1200];
  snprintf(want, sizeof want, "golden sets in %s (from KDA_GOLDEN):\n  L0       absent\n"
           "  L1       present: 1 case file in %s/L1\n", tpath("gset"), tpath("gset"));
  ck_assert_msg(strncmp(r.out, want, strlen(want)) == 0, "golden --list:\n%.600s", r.out);
  char real[4096], line[4200];
  ck_assert_ptr_nonnull(realpath(tpath("gset"), real));
  kda(&r, "golden", "--where", NULL); /* the one answer the Python package asks for */
  expect_ok(&r, "golden --where with KDA_GOLDEN");
  snprintf(line, sizeof line, "%s\n", real);
  ck_assert_str_eq(r.out, line);
  setenv("KDA_GOLDEN", tpath("no-such-dir"), 1);
  kda(&r, "golden", "--list", NULL);
  expect_ok(&r, "golden --list with a bad KDA_GOLDEN");
  ck_assert_msg(strstr(r.out, "golden sets: none found (KDA_GOLDEN: ") &&
                strstr(r.out, "no-such-dir is not a directory)\ncatalog:\n"), "%.600s", r.out);
  kda(&r, "golden", "--where", NULL);
  expect_error(&r, "golden --where with a bad KDA_GOLDEN", "kda golden: ", "no-such-dir",
               "KDA_GOLDEN", NULL);
  unsetenv("KDA_GOLDEN");
  kda(&r, "golden", "--where", NULL);
  expect_ok(&r, "golden --where in the source tree");
  ck_assert_ptr_nonnull(realpath("golden", real));
  snprintf(line, sizeof line, "%s\n", real);
  ck_assert_str_eq(r.out, line);
  run_free(&r);
}
END_TEST

/* One serving prompt alone (SPEC.md §7.7): --list-cases --json names the prompts of each
 * case without making them, -k ID.SUFFIX exports and scores that prompt and nothing else. */
START_TEST(test_conform_one_prompt) {
  run_result r = {0, NULL, NULL};
  kda(&r, "conform", "--list-cases", "--json", "-k", "t17-gdn", "-k", "!*.causal-*",
      "golden/L1", NULL);
  expect_ok(&r, "--list-cases --json");
  json_error_t je;
  json_t *j = json_loads(r.out, 0, &je), *cases = json_object_get(j, "cases");
  ck_assert_msg(json_array_size(cases) == 1, "--list-cases --json:\n%.800s", r.out);
  json_t *c = json_array_get(cases, 0), *pr = json_object_get(c, "prompts");
  ck_assert_str_eq(json_string_value(json_object_get(c, "id")), "t17-gdn");
  ck_assert_msg(json_array_size(pr) == 3 &&
                !strcmp(json_string_value(json_array_get(pr, 0)), "t17-gdn.resume-11") &&
                !strcmp(json_string_value(json_array_get(pr, 1)), "t17-gdn.decode") &&
                !strcmp(json_string_value(json_array_get(pr, 2)), "t17-gdn.spec-11"),
                "prompts of t17-gdn:\n%.800s", r.out);
  json_decref(j);
  kda(&r, "conform", "--list-cases", "--json", "-k", "disc-l2-convention.decode", "golden/L1",
      NULL);
  j = json_loads(r.out, 0, &je), cases = json_object_get(j, "cases");
  c = json_array_get(cases, 0);
  ck_assert_msg(json_array_size(cases) == 1 && json_is_false(json_object_get(c, "selected")) &&
                json_array_size(json_object_get(c, "prompts")) == 1 &&
                strstr(json_string_value(json_object_get(c, "intent")),
                       "OTHER_L2_CONVENTION: Exposes an implementation that uses the other L2"),
                "one prompt listed:\n%.1500s", r.out);
  json_decref(j);
  kda(&r, "conform", "--export-prompts", tpath("p"), "-k", "t17-gdn.decode",
      "golden/L1/t17-gdn.npz", NULL);
  expect_ok(&r, "--export-prompts -k one prompt");
  ck_assert_int_eq(count_entries(tpath("p")), 1);
  ck_assert(exists(tpath("p/t17-gdn.decode.npz")));
  /* its result: the float64 reference on the prompt, scored alone (the case's own result
   * file is absent and not asked for) */
  kda(&r, "ref", tpath("p/t17-gdn.decode.npz"), "-o", tpath("p/r.npz"), NULL);
  expect_ok(&r, "kda ref on the prompt");
  mkdir(tpath("res"), 0755);
  ck_assert_int_eq(rename(tpath("p/r.npz"), tpath("res/t17-gdn.decode.npz")), 0);
  kda(&r, "conform", "--candidate", tpath("res"), "-k", "t17-gdn.decode", "golden/L1", NULL);
  ck_assert_msg(r.status == 0 && strstr(r.out, "t17-gdn.decode") &&
                !strstr(r.out, "t17-gdn ") && strstr(r.out, "\n1 passed, 0 failed, 0 skipped, 0 warnings\n"),
                "one prompt scored: %d\n%s%s", r.status, r.out, r.err);
  run_free(&r);
}
END_TEST

/* kda ref runs any backend through the same path: simd and a plugin on the hand case. */
START_TEST(test_ref_any_backend) {
  const char *in = tpath("hand.npz"), *out = tpath("o.npz");
  tcase c = hand_case();
  write_case(in, &c);
  char spec[1100];
  snprintf(spec, sizeof spec, "%s:mutant=none", plugin_path("kda_plugin_mutants.so"));
  const char *const specs[] = {"simd:threads=1", "simd-scalar", spec};
  const int32_t dts[] = {KDA_DTYPE_F32, KDA_DTYPE_F32, KDA_DTYPE_F64};
  run_result r = {0, NULL, NULL};
  for (int i = 0; i < 3; i++) {
    kda(&r, "ref", "-b", specs[i], in, "-o", out, NULL);
    expect_ok(&r, specs[i]);
    double *o = load_member(out, "o", dts[i], 6), *ht = load_member(out, "ht", dts[i], 4);
    expect_values(o, hand_o, 6, specs[i]);
    expect_values(ht, hand_ht, 4, specs[i]);
    free(o);
    free(ht);
  }
  run_free(&r);
}
END_TEST

/* ---- gen, inspect and ref round trip. */

#define RT_DESC "seed=3 T=9 H=1 HV=2 K=4 V=4 gate=softplus beta=logit l2=fla prec=bf16 id=rt"

static void gen_file(const char *desc, const char *path) {
  /* The description is passed as separate words, as a shell would split it. */
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", desc);
  const char *args[40];
  int n = 0;
  args[n++] = "gen";
  for (char *w = strtok(buf, " "); w && n < 36; w = strtok(NULL, " ")) args[n++] = w;
  args[n++] = "-o";
  args[n++] = path;
  args[n] = NULL;
  run_result r = {0, NULL, NULL};
  run_argv(&r, args);
  expect_ok(&r, desc);
  ck_assert_msg(r.out[0] == '\0', "kda gen printed: %s", r.out);
  run_free(&r);
}

START_TEST(test_roundtrip) {
  const char *a = tpath("a.npz"), *b = tpath("b.npz"), *ra = tpath("ra.npz"),
             *rb = tpath("rb.npz"), *rf = tpath("rf.npz");
  gen_file(RT_DESC, a);
  gen_file(RT_DESC, b);
  ck_assert_msg(same_bytes(a, b), "kda gen is not deterministic for '%s'", RT_DESC);

  /* The manifest's canonical description makes the same file again. */
  run_result r = {0, NULL, NULL};
  kda(&r, "inspect", "--json", a, NULL);
  expect_ok(&r, "inspect --json case");
  json_t *root = json_loads(r.out, 0, NULL);
  ck_assert_msg(root != NULL, "inspect --json: %s", r.out);
  const char *canon = json_string_value(json_object_get(
      json_object_get(json_object_get(root, "manifest"), "generator_info"), "description"));
  ck_assert_msg(canon != NULL, "no generator_info.description: %s", r.out);
  gen_file(canon, b);
  ck_assert_msg(same_bytes(a, b), "the canonical description '%s' gives other bytes", canon);
  json_decref(root);

  kda(&r, "inspect", a, NULL);
  expect_ok(&r, "inspect case");
  static const char *const want[] = {"q", "k", "v", "g", "beta", "A_log", "dt_bias",
                                     "manifest", "case rt (bf16):", " T=9", " HV=2", "gate=softplus",
                                     "<f4", "[9, 2, 4]", NULL};
  for (int i = 0; want[i]; i++)
    ck_assert_msg(strstr(r.out, want[i]) != NULL, "inspect lacks '%s': %s", want[i], r.out);

  kda(&r, "ref", a, "-o", ra, NULL);
  expect_ok(&r, "ref a");
  ck_assert_msg(r.out[0] == '\0', "kda ref printed: %s", r.out);
  kda(&r, "ref", "--backend", "ref-f64", b, "-o", rb, NULL);
  expect_ok(&r, "ref b");
  ck_assert_msg(same_bytes(ra, rb), "kda ref is not deterministic for '%s'", RT_DESC);
  double *o = load_member(ra, "o", KDA_DTYPE_F64, 9 * 2 * 4);
  double *ht = load_member(ra, "ht", KDA_DTYPE_F64, 1 * 2 * 4 * 4);
  for (int i = 0; i < 9 * 2 * 4; i++) ck_assert(isfinite(o[i]));
  free(o);
  free(ht);

  /* bf16 inputs are exact in float32, so ref-f32 accepts them; its default dtype is f32. */
  kda(&r, "ref", "-b", "ref-f32", a, "-o", rf, NULL);
  expect_ok(&r, "ref-f32");
  free(load_member(rf, "o", KDA_DTYPE_F32, 9 * 2 * 4));
  kda(&r, "ref", "-b", "ref-f32", "--dtype", "f64", a, "-o", rf, NULL);
  expect_ok(&r, "ref-f32 --dtype f64");
  free(load_member(rf, "o", KDA_DTYPE_F64, 9 * 2 * 4));

  kda(&r, "inspect", ra, NULL);
  expect_ok(&r, "inspect result");
  ck_assert_msg(strstr(r.out, "ht") && strstr(r.out, "result of case rt by ref-f64:") &&
                    strstr(r.out, "<f8"),
                "inspect of the result: %s", r.out);
  run_free(&r);
}
END_TEST

START_TEST(test_inspect_json_values) {
  const char *in = tpath("hand.npz");
  tcase c = hand_case();
  write_case(in, &c);
  run_result r = {0, NULL, NULL};
  kda(&r, "inspect", "--json", "--values", "4", in, NULL);
  expect_ok(&r, "inspect --json");
  json_error_t je;
  json_t *root = json_loads(r.out, 0, &je);
  ck_assert_msg(root != NULL, "inspect --json is not JSON (line %d: %s): %s", je.line, je.text,
                r.out);
  ck_assert(json_is_true(json_object_get(root, "verified")));
  ck_assert_str_eq(json_string_value(json_object_get(root, "file")), in);
  json_t *members = json_object_get(root, "members");
  ck_assert_uint_eq(json_array_size(members), 5);
  json_t *q = json_array_get(members, 0);
  ck_assert_str_eq(json_string_value(json_object_get(q, "name")), "q");
  ck_assert_str_eq(json_string_value(json_object_get(q, "dtype")), "<f8");
  ck_assert_int_eq(json_integer_value(json_object_get(q, "bytes")), 48);
  json_t *shape = json_object_get(q, "shape");
  ck_assert_uint_eq(json_array_size(shape), 3);
  ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), 3);
  json_t *values = json_object_get(q, "values");
  ck_assert_uint_eq(json_array_size(values), 4);
  for (int i = 0; i < 4; i++)
    ck_assert(json_number_value(json_array_get(values, (size_t)i)) == hand_q[i]);
  json_t *beta = json_array_get(members, 4);
  ck_assert_uint_eq(json_array_size(json_object_get(beta, "values")), 3); /* only 3 exist */
  json_t *manifest = json_object_get(root, "manifest");
  ck_assert(json_is_object(manifest));
  ck_assert(json_is_object(json_object_get(manifest, "problem")));
  ck_assert(json_is_string(json_object_get(root, "summary")));
  json_decref(root);

  kda(&r, "inspect", "-n", "3", in, NULL);
  expect_ok(&r, "inspect --values");
  ck_assert_msg(strstr(r.out, "values: 1 1 2 ...") != NULL, "q values: %s", r.out);
  ck_assert_msg(strstr(r.out, "values: 0.5 0.5 0.5\n") != NULL, "beta values: %s", r.out);
  ck_assert_msg(strstr(r.out, "case hand-k2v2t3 (f64): ") && strstr(r.out, " scale=0.5 "),
                "summary: %s", r.out);
  run_free(&r);
}
END_TEST

/* ---- kda ref on the hand-computed case. */

START_TEST(test_ref_hand) {
  const char *in = tpath("hand.npz"), *out64 = tpath("o64.npz"), *out32 = tpath("o32.npz");
  tcase c = hand_case();
  write_case(in, &c);
  run_result r = {0, NULL, NULL};
  kda(&r, "ref", "--backend", "ref-f64", in, "-o", out64, NULL);
  expect_ok(&r, "ref-f64 hand");
  kda(&r, "ref", "--backend=ref-f32", in, "--output", out32, NULL);
  expect_ok(&r, "ref-f32 hand");
  run_free(&r);
  double *o = load_member(out64, "o", KDA_DTYPE_F64, 6);
  double *ht = load_member(out64, "ht", KDA_DTYPE_F64, 4);
  expect_values(o, hand_o, 6, "ref-f64 o");
  expect_values(ht, hand_ht, 4, "ref-f64 ht");
  free(o);
  free(ht);
  o = load_member(out32, "o", KDA_DTYPE_F32, 6);
  ht = load_member(out32, "ht", KDA_DTYPE_F32, 4);
  expect_values(o, hand_o, 6, "ref-f32 o");
  expect_values(ht, hand_ht, 4, "ref-f32 ht");
  free(o);
  free(ht);
#if KDA_CHECK_HAVE_MPFR
  /* The exact results are dyadic, so their correctly rounded float64 values are themselves. */
  const char *outm = tpath("om.npz");
  kda(&r, "ref", "--backend", "mpfr", in, "-o", outm, NULL);
  expect_ok(&r, "mpfr hand");
  run_free(&r);
  o = load_member(outm, "o", KDA_DTYPE_F64, 6);
  ht = load_member(outm, "ht", KDA_DTYPE_F64, 4);
  expect_values(o, hand_o, 6, "mpfr o");
  expect_values(ht, hand_ht, 4, "mpfr ht");
  free(o);
  free(ht);
#endif
}
END_TEST

/* T = 0 (no tokens): every backend writes an empty o and the final state h0 = 0. */
START_TEST(test_ref_empty) {
  const char *in = tpath("t0.npz"), *out = tpath("r0.npz");
  gen_file("seed=4 T=0 H=1 HV=1 K=2 V=2 prec=f32", in);
  static const char *const backends[] = {"ref-f64", "ref-f32"};
  static const double zeros[4] = {0, 0, 0, 0};
  run_result r = {0, NULL, NULL};
  for (int i = 0; i < 2; i++) {
    kda(&r, "ref", "-b", backends[i], in, "-o", out, NULL);
    expect_ok(&r, backends[i]);
    free(load_member(out, "o", i ? KDA_DTYPE_F32 : KDA_DTYPE_F64, 0));
    double *ht = load_member(out, "ht", i ? KDA_DTYPE_F32 : KDA_DTYPE_F64, 4);
    expect_values(ht, zeros, 4, backends[i]);
    free(ht);
  }
  run_free(&r);
}
END_TEST

/* ref-f32 refuses inputs that float32 cannot hold exactly. */
START_TEST(test_ref_f32_refuses_f64_inputs) {
  const char *in = tpath("inexact.npz"), *out = tpath("out.npz");
  static const double q[] = {0.1, 1, 2, 0, 1, -1}; /* 0.1 is not a float32 */
  tcase c = hand_case();
  find_member(&c, "q")->data = q;
  write_case(in, &c);
  run_result r = {0, NULL, NULL};
  kda(&r, "ref", "--backend", "ref-f32", in, "-o", out, NULL);
  expect_error(&r, "ref-f32 inexact", "kda ref: ", in, "'q'", "not exact in float32", NULL);
  ck_assert(!exists(out));
  kda(&r, "ref", in, "-o", out, NULL); /* ref-f64 takes it */
  expect_ok(&r, "ref-f64 inexact");
  run_free(&r);
}
END_TEST

/* ---- Bad inputs: each class gives exit 2, one line naming the file, and no output. */

/* Builds a bad file at path. */
typedef void (*bad_builder)(const char *path);

static void build_truncated_half(const char *path) {
  tcase c = hand_case();
  write_case(path, &c);
  size_t len;
  unsigned char *b = read_all(path, &len);
  write_all(path, b, len / 2);
  free(b);
}

static void build_truncated_tail(const char *path) {
  tcase c = hand_case();
  write_case(path, &c);
  size_t len;
  unsigned char *b = read_all(path, &len);
  write_all(path, b, len - 7); /* cuts the end-of-central-directory record */
  free(b);
}

static void build_garbage(const char *path) {
  unsigned char b[4096];
  uint64_t x = 0x9E3779B97F4A7C15u; /* fixed seed: xorshift64 */
  for (size_t i = 0; i < sizeof b; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = (unsigned char)x;
  }
  write_all(path, b, sizeof b);
}

/* Local-header data of member name in a stored zip: offset of its first byte. */
static size_t member_data_offset(const unsigned char *b, size_t len, const char *name) {
  size_t nlen = strlen(name);
  for (size_t i = 0; i + 30 <= len; i++) {
    if (memcmp(b + i, "PK\3\4", 4) != 0) continue;
    size_t n = (size_t)b[i + 26] | (size_t)b[i + 27] << 8;
    size_t e = (size_t)b[i + 28] | (size_t)b[i + 29] << 8;
    if (n == nlen && i + 30 + n <= len && memcmp(b + i + 30, name, n) == 0) return i + 30 + n + e;
  }
  ck_abort_msg("member %s not found", name);
  return 0;
}

static void build_bad_crc(const char *path) {
  tcase c = hand_case();
  write_case(path, &c);
  size_t len, off;
  unsigned char *b = read_all(path, &len);
  size_t at = member_data_offset(b, len, "q.npy");
  kda_array_info info;
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_npy_parse_header(b + at, len - at, "q", &info, &off, err, sizeof err) ==
                    KDA_OK, "%s", err);
  b[at + off] ^= 1; /* the last bit of q[0]'s mantissa: still finite, only the CRC differs */
  write_all(path, b, len);
  free(b);
}

static void build_text(const char *path) {
  static const char text[] = "this is a text file, not a vector file\n";
  write_all(path, text, sizeof text - 1);
}

/* Replaces the bytes of member name (e.g. "v.npy") with data, through libzip. */
static void replace_member(const char *path, const char *name, const void *data, size_t len) {
  int zerr = 0;
  zip_t *za = zip_open(path, 0, &zerr);
  ck_assert_msg(za != NULL, "zip_open %s: %d", path, zerr);
  zip_int64_t idx = zip_name_locate(za, name, 0);
  ck_assert_msg(idx >= 0, "no member %s", name);
  zip_source_t *src = zip_source_buffer(za, data, len, 0);
  ck_assert_ptr_nonnull(src);
  ck_assert_int_eq(zip_file_replace(za, (zip_uint64_t)idx, src, 0), 0);
  zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0);
  ck_assert_msg(zip_close(za) == 0, "zip_close: %s", zip_strerror(za));
}

static void build_not_npy_member(const char *path) {
  static const char junk[] = "hello, I am not a .npy array";
  tcase c = hand_case();
  write_case(path, &c);
  replace_member(path, "v.npy", junk, sizeof junk - 1);
}

/* A hand-made NumPy 1.0 member: header dictionary dict, padded to 64 bytes, then len bytes. */
static void replace_with_npy(const char *path, const char *name, const char *dict, size_t len) {
  unsigned char buf[1024];
  size_t dlen = strlen(dict), total = (10 + dlen + 1 + 63) / 64 * 64;
  ck_assert(total + len <= sizeof buf);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)((total - 10) & 0xff);
  buf[9] = (unsigned char)((total - 10) >> 8);
  memset(buf + 10, ' ', total - 10);
  memcpy(buf + 10, dict, dlen);
  buf[total - 1] = '\n';
  memset(buf + total, 0, len);
  replace_member(path, name, buf, total + len);
}

static void build_dtype_c16(const char *path) {
  tcase c = hand_case();
  write_case(path, &c);
  replace_with_npy(path, "v.npy", "{'descr': '<c16', 'fortran_order': False, 'shape': (3, 1, 2), }",
                   96);
}

static void build_dtype_big_endian(const char *path) {
  tcase c = hand_case();
  write_case(path, &c);
  replace_with_npy(path, "v.npy", "{'descr': '>f8', 'fortran_order': False, 'shape': (3, 1, 2), }",
                   48);
}

static void build_shape_overflow(const char *path) {
  tcase c = hand_case();
  write_case(path, &c);
  replace_with_npy(path, "v.npy",
                   "{'descr': '<f8', 'fortran_order': False, 'shape': "
                   "(4611686018427387904, 4611686018427387904, 2), }",
                   48);
}

static void build_missing_v(const char *path) {
  tcase c = hand_case();
  drop_member(&c, "v");
  write_case(path, &c);
}

static void build_wrong_v_shape(const char *path) {
  static const double v9[9] = {2, 4, 0, 1, 0, 0, 3, 1, 0};
  tcase c = hand_case();
  tmember *v = find_member(&c, "v");
  v->shape[2] = 3; /* V = 3 where the manifest says V = 2 */
  v->data = v9;
  write_case(path, &c);
}

static void build_nan_q(const char *path) {
  static double q[6];
  memcpy(q, hand_q, sizeof q);
  q[3] = NAN;
  tcase c = hand_case();
  find_member(&c, "q")->data = q;
  write_case(path, &c);
}

static void build_inf_v(const char *path) {
  static double v[6];
  memcpy(v, hand_v, sizeof v);
  v[2] = INFINITY;
  tcase c = hand_case();
  find_member(&c, "v")->data = v;
  write_case(path, &c);
}

static void build_neg_inf_beta(const char *path) {
  static double beta[3];
  memcpy(beta, hand_beta, sizeof beta);
  beta[1] = -INFINITY;
  tcase c = hand_case();
  find_member(&c, "beta")->data = beta;
  write_case(path, &c);
}

typedef struct bad_class {
  const char *label;
  bad_builder build;
  const char *phrase; /* expected in the one-line message, besides the file's name */
} bad_class;

static const bad_class bad_classes[] = {
    {"truncated archive (half)", build_truncated_half, "truncated"},
    {"truncated archive (tail)", build_truncated_tail, "truncated"},
    {"corrupt archive (garbage bytes)", build_garbage, "not a zip archive"},
    {"bad CRC", build_bad_crc, "CRC mismatch"},
    {"wrong magic (text file)", build_text, "not a zip archive"},
    {"wrong magic (member not .npy)", build_not_npy_member, "member 'v': not a .npy array"},
    {"unsupported dtype <c16", build_dtype_c16, "member 'v': unsupported dtype '<c16'"},
    {"unsupported dtype >f8", build_dtype_big_endian, "member 'v': unsupported dtype '>f8'"},
    {"shape product overflow", build_shape_overflow, "member 'v': array size overflows"},
    {"missing member v", build_missing_v, "missing member 'v'"},
    {"shapes disagree (v with V=3)", build_wrong_v_shape, "member 'v' has shape [3,1,3]"},
    {"NaN in q", build_nan_q, "member 'q' element 3 [t=1,h=0,k=1] is NaN"},
    {"+Inf in v", build_inf_v, "member 'v' element 2 [t=1,hv=0,v=0] is +Inf"},
    {"-Inf in beta", build_neg_inf_beta, "member 'beta' element 1 [t=1,hv=0] is -Inf"},
};

#define SENTINEL "previous result, must survive\n"

/* Runs args (with OUT in place of the output) twice: with no output file (none may appear in
 * the output directory) and with a pre-existing output file (it must stay as it was). */
static void expect_no_output(const char *label, const char *const *args, const char *prefix,
                             const char *name_in_msg, const char *phrase) {
  const char *outdir = tpath("out");
  mkdir(outdir, 0755);
  const char *out = tpath("out/result.npz");
  const char *argv[16];
  int n = 0;
  for (; args[n] && n < 15; n++) argv[n + 1] = strcmp(args[n], "OUT") == 0 ? out : args[n];
  argv[n + 1] = NULL;
  run_result r = {0, NULL, NULL};
  for (int pass = 0; pass < 2; pass++) {
    remove(out);
    if (pass == 1) write_all(out, SENTINEL, strlen(SENTINEL));
    run_argv(&r, argv + 1);
    expect_error(&r, label, prefix, name_in_msg, phrase, NULL);
    if (pass == 0) {
      ck_assert_msg(count_entries(outdir) == 0, "%s: left a file in the output directory",
                    label);
    } else {
      size_t len;
      char *s = (char *)read_all(out, &len);
      ck_assert_msg(s && strcmp(s, SENTINEL) == 0, "%s: clobbered the existing output", label);
      free(s);
      ck_assert_msg(count_entries(outdir) == 1, "%s: left a temporary file behind", label);
    }
  }
  run_free(&r);
}

START_TEST(test_bad_inputs) {
  const bad_class *b = &bad_classes[_i];
  const char *in = tpath("bad.npz");
  b->build(in);
  const char *ref_args[] = {"ref", in, "-o", "OUT", NULL};
  expect_no_output(b->label, ref_args, "kda ref: ", in, b->phrase);
  const char *f32_args[] = {"ref", "-b", "ref-f32", in, "-o", "OUT", NULL};
  expect_no_output(b->label, f32_args, "kda ref: ", in, b->phrase);
#if KDA_CHECK_HAVE_MPFR
  const char *mpfr_args[] = {"ref", "-b", "mpfr", in, "-o", "OUT", NULL};
  expect_no_output(b->label, mpfr_args, "kda ref: ", in, b->phrase);
#endif
  /* kda inspect checks every CRC and validates case files as kda ref loads them. */
  run_result r = {0, NULL, NULL};
  kda(&r, "inspect", in, NULL);
  expect_error(&r, b->label, "kda inspect: ", in, b->phrase, NULL);
  kda(&r, "inspect", "--json", "--values", "2", in, NULL);
  expect_error(&r, b->label, "kda inspect: ", in, b->phrase, NULL);
  run_free(&r);
}
END_TEST

/* A missing input is an I/O error naming the input. */
START_TEST(test_missing_input) {
  const char *in = tpath("does-not-exist.npz");
  const char *args[] = {"ref", in, "-o", "OUT", NULL};
  expect_no_output("missing input", args, "kda ref: ", in, "cannot open");
  run_result r = {0, NULL, NULL};
  kda(&r, "inspect", in, NULL);
  expect_error(&r, "inspect missing", "kda inspect: ", in, "cannot open", NULL);
  run_free(&r);
}
END_TEST

/* An output in a directory that does not exist: an I/O error naming the output. */
START_TEST(test_output_dir_missing) {
  const char *in = tpath("hand.npz"), *out = tpath("no/such/dir/out.npz");
  tcase c = hand_case();
  write_case(in, &c);
  run_result r = {0, NULL, NULL};
  kda(&r, "ref", in, "-o", out, NULL);
  expect_error(&r, "ref to missing dir", "kda ref: ", out, "cannot create", NULL);
  ck_assert(!exists(out));
  kda(&r, "gen", "seed=1", "T=2", "H=1", "HV=1", "K=2", "V=2", "-o", out, NULL);
  expect_error(&r, "gen to missing dir", "kda gen: ", out, "cannot create", NULL);
  ck_assert(!exists(out));
  run_free(&r);
}
END_TEST

/* A bad description: exit 2, one line naming the bad word, no output. */
START_TEST(test_gen_bad_description) {
  const char *args[] = {"gen", "seed=1", "T=4", "frobnicate=3", "-o", "OUT", NULL};
  expect_no_output("bad description", args, "kda gen: ", "unknown key 'frobnicate'", "");
}
END_TEST

static void setup(void) { kda_test_tmpdir_make("check-tools"); }
static void teardown(void) { kda_test_tmpdir_remove(); }

static Suite *tools_suite(void) {
  Suite *s = suite_create("kda command");
  TCase *tc = tcase_create("cli");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_help);
  tcase_add_test(tc, test_usage_errors);
  tcase_add_test(tc, test_roundtrip);
  tcase_add_test(tc, test_inspect_json_values);
  tcase_add_test(tc, test_ref_hand);
  tcase_add_test(tc, test_ref_empty);
  tcase_add_test(tc, test_ref_f32_refuses_f64_inputs);
  tcase_add_loop_test(tc, test_bad_inputs, 0, (int)(sizeof bad_classes / sizeof bad_classes[0]));
  tcase_add_test(tc, test_missing_input);
  tcase_add_test(tc, test_bench_runs);
  tcase_add_test(tc, test_bench_backends);
  tcase_add_test(tc, test_bench_variants);
  tcase_add_test(tc, test_conform_backend_path);
  tcase_add_test(tc, test_golden_list_sets);
  tcase_add_test(tc, test_conform_one_prompt);
  tcase_add_test(tc, test_ref_any_backend);
  tcase_add_test(tc, test_output_dir_missing);
  tcase_add_test(tc, test_gen_bad_description);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  printf("kda binary under test: %s\n", kda_bin());
  return kda_test_main(tools_suite(), CK_NORMAL, CK_FORK_GETENV);
}

/* kda_cmd_bench.c: `kda bench`, throughput of the simd backend against ref-f32 and the FMA peak.
 * SPDX-License-Identifier: MIT
 *
 * Prefill (one sequence of T tokens) and decode (N sequences of one token, state in and out)
 * on random float32 inputs, every backend called in-process through its table, exactly as
 * the runner calls it.  FLOPs are counted as the state work of SPEC.md §3.1: 4 K·V
 * multiply-adds (decay, erase, write, readout) = 8 K·V flops per token and value head.  The
 * peak is one core's FMA throughput measured by a microbenchmark (2 flops per lane per FMA),
 * read at the start and again before each shape; the highest reading is used (a reading taken
 * while the machine is busy elsewhere would flatter the percentage).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kda_conform.h"
#include "kda_tool.h"
#include "backends/simd/kda_simd.h"

#define SUB "bench"
#define MAX_T 8

static const char help_text[] =
    "Usage: kda bench [OPTION]...\n"
    "\n"
    "Measures tokens per second and GFLOP/s of the simd backend and of the plain float32\n"
    "baseline ref-f32 (four passes over the state per token, like ggml's CPU op) in one run,\n"
    "and one core's FMA peak.  FLOPs: 8*K*V per token and value head.\n"
    "\n"
    "  -T, --tokens LIST     prefill lengths (default 4096,65536)\n"
    "      --heads H         heads, H = HV (default 32)\n"
    "  -K, --key K           key dimension (default 128)\n"
    "      --value V         value dimension (default 128)\n"
    "  -N, --decode-seqs N   decode: N sequences of one token (default 256; 0 skips decode)\n"
    "      --isa NAME        simd ISA: auto avx512 avx2 scalar (default auto)\n"
    "      --threads LIST    simd thread counts (default 1,2)\n"
    "      --ref-tokens N    run ref-f32 on at most N prefill tokens (default: all)\n"
    "      --gate NAME       log or softplus (default softplus, with A_log; beta logit, l2 fla)\n"
    "      --params STR      more simd parameters, e.g. \"group=1\" (conformance/backends/simd)\n"
    "  -h, --help            print this help and exit\n";

typedef struct bench_args {
  int64_t T[MAX_T];
  int nT;
  int64_t H, K, V, N, ref_tokens;
  int64_t threads[MAX_T];
  int n_threads;
  const char *isa;
  const char *params; /* appended to the simd parameters */
  int32_t gate;
} bench_args;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_list(const char *s, int64_t *out, int *n) {
  *n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (*n == MAX_T || kda_tool_parse_count(tok, &out[*n]) || out[*n] < 1) return -1;
    (*n)++;
  }
  return *n ? 0 : -1;
}

static int parse_args(int argc, char **argv, bench_args *a) {
  enum { O_HEADS = 256, O_VALUE, O_ISA, O_THREADS, O_REF, O_GATE, O_PARAMS };
  static const struct option longopts[] = {
      {"tokens", required_argument, NULL, 'T'}, {"heads", required_argument, NULL, O_HEADS},
      {"key", required_argument, NULL, 'K'}, {"value", required_argument, NULL, O_VALUE},
      {"decode-seqs", required_argument, NULL, 'N'}, {"isa", required_argument, NULL, O_ISA},
      {"threads", required_argument, NULL, O_THREADS},
      {"ref-tokens", required_argument, NULL, O_REF}, {"gate", required_argument, NULL, O_GATE},
      {"params", required_argument, NULL, O_PARAMS},
      {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  memset(a, 0, sizeof *a);
  a->T[0] = 4096, a->T[1] = 65536, a->nT = 2;
  a->H = 32, a->K = 128, a->V = 128, a->N = 256;
  a->threads[0] = 1, a->threads[1] = 2, a->n_threads = 2;
  a->isa = "auto";
  a->params = "";
  a->gate = KDA_GATE_SOFTPLUS;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":T:K:N:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'T': if (parse_list(optarg, a->T, &a->nT)) return kda_tool_usage(SUB, "bad --tokens"); break;
      case O_HEADS: if (kda_tool_parse_count(optarg, &a->H) || a->H < 1) return kda_tool_usage(SUB, "bad --heads"); break;
      case 'K': if (kda_tool_parse_count(optarg, &a->K) || a->K < 1) return kda_tool_usage(SUB, "bad --key"); break;
      case O_VALUE: if (kda_tool_parse_count(optarg, &a->V) || a->V < 1) return kda_tool_usage(SUB, "bad --value"); break;
      case 'N': if (kda_tool_parse_count(optarg, &a->N)) return kda_tool_usage(SUB, "bad --decode-seqs"); break;
      case O_ISA: a->isa = optarg; break;
      case O_PARAMS:
        if (strlen(optarg) > 200) return kda_tool_usage(SUB, "--params is too long");
        a->params = optarg;
        break;
      case O_THREADS: if (parse_list(optarg, a->threads, &a->n_threads)) return kda_tool_usage(SUB, "bad --threads"); break;
      case O_REF: if (kda_tool_parse_count(optarg, &a->ref_tokens)) return kda_tool_usage(SUB, "bad --ref-tokens"); break;
      case O_GATE:
        if (strcmp(optarg, "log") == 0) a->gate = KDA_GATE_LOG;
        else if (strcmp(optarg, "softplus") == 0) a->gate = KDA_GATE_SOFTPLUS;
        else return kda_tool_usage(SUB, "bad --gate '%s' (log, softplus)", optarg);
        break;
      case 'h': fputs(help_text, stdout); return -1;
      default: return kda_tool_bad_option(SUB, c, argv);
    }
  }
  if (optind < argc) return kda_tool_usage(SUB, "unexpected argument '%s'", argv[optind]);
  return 0;
}

/* ---- Inputs: one allocation per tensor, uniform random floats. */
typedef struct bench_data {
  kda_problem p;
  float *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0, *o, *ht;
  int64_t *cu;
} bench_data;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float urand(float lo, float hi) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (float)((double)(rng_state >> 40) / 16777216.0);
}

static float *fill(size_t n, float lo, float hi) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  if (x)
    for (size_t i = 0; i < n; i++) x[i] = urand(lo, hi);
  return x;
}

static void data_free(bench_data *d) {
  free(d->q), free(d->k), free(d->v), free(d->g), free(d->beta), free(d->A_log);
  free(d->dt_bias), free(d->h0), free(d->o), free(d->ht), free(d->cu);
}

/* N sequences of T/N tokens each; decode also carries a state in and out. */
static int data_make(const bench_args *a, int64_t N, int64_t T, int decode, bench_data *d) {
  memset(d, 0, sizeof *d);
  kda_problem_init(&d->p, T, a->H, a->H, a->K, a->V);
  d->p.N = N;
  d->p.gate_mode = a->gate;
  d->p.has_A_log = a->gate == KDA_GATE_SOFTPLUS;
  d->p.beta_mode = KDA_BETA_LOGIT;
  d->p.l2_mode = KDA_L2_FLA;
  d->p.has_initial_state = decode;
  d->p.want_final_state = 1;
  const size_t qk = (size_t)T * a->H * a->K, vv = (size_t)T * a->H * a->V;
  const size_t st = (size_t)N * a->H * a->K * a->V;
  d->q = fill(qk, -1, 1), d->k = fill(qk, -1, 1), d->v = fill(vv, -1, 1);
  d->g = a->gate == KDA_GATE_LOG ? fill(qk, -0.1f, 0.0f) : fill(qk, -3, 3);
  d->beta = fill((size_t)T * a->H, -2, 2);
  d->A_log = fill((size_t)a->H, -1, 0), d->dt_bias = fill((size_t)a->H * a->K, -1, 1);
  d->h0 = decode ? fill(st, -0.1f, 0.1f) : NULL;
  d->o = malloc(vv * sizeof *d->o), d->ht = malloc(st * sizeof *d->ht);
  d->cu = malloc((size_t)(N + 1) * sizeof *d->cu);
  if (!d->q || !d->k || !d->v || !d->g || !d->beta || !d->A_log || !d->dt_bias ||
      (decode && !d->h0) || !d->o || !d->ht || !d->cu)
    return data_free(d), -1;
  for (int64_t n = 0; n <= N; n++) d->cu[n] = n * (T / N);
  return 0;
}

/* Best wall time of a few calls of backend b (params); <0 on failure (message in err). */
static double time_backend(const kda_backend *b, const char *params, bench_data *d,
                           char *err, size_t errlen) {
  void *h = NULL;
  int32_t st = b->open(params, &h, err, (uint32_t)errlen);
  if (st != KDA_OK) return -1;
  char reason[256];
  if (b->supports(h, &d->p, reason, sizeof reason) != KDA_OK) {
    snprintf(err, errlen, "%s %s: %s", b->name, params, reason);
    b->close(h);
    return -1;
  }
  kda_backend_tensors t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.in_dtype = t.out_dtype = KDA_PRECISION_FP32;
  t.q = d->q, t.k = d->k, t.v = d->v, t.g = d->g, t.beta = d->beta;
  t.A_log = d->p.has_A_log ? d->A_log : NULL;
  t.dt_bias = d->p.gate_mode != KDA_GATE_LOG ? d->dt_bias : NULL;
  t.h0 = d->h0, t.cu_seqlens = d->cu, t.o = d->o, t.ht = d->ht;
  double best = INFINITY, spent = 0;
  for (int rep = 0; rep < 5 && (rep < 2 || spent < 1.0); rep++) {
    double t0 = now_s();
    st = b->forward(h, &d->p, &t);
    double dt = now_s() - t0;
    if (st != KDA_OK) {
      snprintf(err, errlen, "%s: %s", b->name, b->last_error(h));
      b->close(h);
      return -1;
    }
    spent += dt;
    if (dt < best) best = dt;
    if (spent > 20.0) break; /* a slow baseline on a long input: one or two calls are enough */
  }
  b->close(h);
  return best;
}

/* One core's FMA peak in GFLOP/s for the ISA, or 0 when there is no probe for it. */
static double fma_probe(int32_t isa) {
  double (*probe)(int64_t) = isa == KDA_SIMD_ISA_AVX512 ? kda_simd_fma_probe_avx512
                           : isa == KDA_SIMD_ISA_AVX2 ? kda_simd_fma_probe_avx2 : NULL;
  if (!probe) return 0;
  double best = 0;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now_s();
    double flops = probe(20000000);
    double rate = flops / (now_s() - t0) / 1e9;
    if (rate > best) best = rate;
  }
  return best;
}

/* The peak: the highest of every reading so far. */
typedef struct peak_t {
  int32_t isa;
  int readings;
  double lowest, best;
} peak_t;

static double peak_read(peak_t *pk) {
  double r = fma_probe(pk->isa);
  if (pk->readings++ == 0 || r < pk->lowest) pk->lowest = r;
  if (r > pk->best) pk->best = r;
  return pk->best;
}

typedef struct row {
  double ref_gflops, simd_gflops[MAX_T];
} row;

static void print_line(const char *what, const char *backend, int64_t threads, double secs,
                       double tokens, double flops, double ref_gf, double peak) {
  double gf = flops / secs / 1e9;
  printf("%-16s %-14s %7lld %12.0f %9.2f", what, backend, (long long)threads, tokens / secs, gf);
  if (ref_gf > 0) printf(" %8.2fx", gf / ref_gf); else printf(" %9s", "-");
  if (peak > 0 && threads == 1) printf(" %7.1f%%", 100 * gf / peak); else printf(" %8s", "-");
  printf("\n");
}

/* Runs ref-f32 and simd at every thread count on one shape; fills r. */
static int bench_shape(const bench_args *a, const char *what, int64_t N, int64_t T, int decode,
                       int32_t isa, peak_t *pk, row *r) {
  char err[KDA_ERRLEN], params[320], name[64];
  bench_data d;
  memset(r, 0, sizeof *r);
  int64_t Tref = decode || !a->ref_tokens || a->ref_tokens >= T ? T : a->ref_tokens;
  if (data_make(a, N, Tref, decode, &d)) return kda_tool_fail(SUB, "out of memory for %s", what);
  double flops_per_token = 8.0 * (double)a->H * (double)a->K * (double)a->V;
  double peak = peak_read(pk);
  double s = time_backend(kda_backend_find("ref-f32"), "", &d, err, sizeof err);
  if (s < 0) return data_free(&d), kda_tool_fail(SUB, "%s", err);
  r->ref_gflops = flops_per_token * (double)Tref / s / 1e9;
  print_line(what, Tref < T ? "ref-f32*" : "ref-f32", 1, s, (double)Tref,
             flops_per_token * (double)Tref, 0, peak);
  fflush(stdout);
  if (Tref != T) {
    data_free(&d);
    if (data_make(a, N, T, decode, &d)) return kda_tool_fail(SUB, "out of memory for %s", what);
  }
  snprintf(name, sizeof name, "simd(%s)", kda_simd_isa_name(isa));
  for (int i = 0; i < a->n_threads; i++) {
    snprintf(params, sizeof params, "isa=%s threads=%lld %s", kda_simd_isa_name(isa),
             (long long)a->threads[i], a->params);
    s = time_backend(kda_backend_find("simd"), params, &d, err, sizeof err);
    if (s < 0) return data_free(&d), kda_tool_fail(SUB, "%s", err);
    r->simd_gflops[i] = flops_per_token * (double)T / s / 1e9;
    print_line(what, name, a->threads[i], s, (double)T, flops_per_token * (double)T,
               r->ref_gflops, peak);
    fflush(stdout);
  }
  data_free(&d);
  return 0;
}

static void print_ratios(const bench_args *a, const char *what, const row *r, double peak) {
  printf("ratios %-14s simd/ref-f32 (1 thread) %.2fx", what, r->simd_gflops[0] / r->ref_gflops);
  if (peak > 0) printf(", %% of FMA peak (1 thread) %.1f%%", 100 * r->simd_gflops[0] / peak);
  for (int i = 1; i < a->n_threads; i++)
    printf(", %lld->%lld threads %.2fx", (long long)a->threads[0], (long long)a->threads[i],
           r->simd_gflops[i] / r->simd_gflops[0]);
  printf("\n");
}

int kda_cmd_bench(int argc, char **argv) {
  bench_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc < 0 ? KDA_EXIT_OK : rc;
  int32_t isa = -1;
  if (strcmp(a.isa, "auto") == 0) isa = kda_simd_isa_best();
  for (int32_t i = 0; i < KDA_SIMD_ISA_COUNT; i++)
    if (strcmp(a.isa, kda_simd_isa_name(i)) == 0) isa = i;
  const char *why;
  if (isa < 0) return kda_tool_usage(SUB, "unknown --isa '%s'", a.isa);
  if (!kda_simd_isa_available(isa, &why)) return kda_tool_fail(SUB, "isa=%s: %s", a.isa, why);
  { /* the parameters, before any output */
    char params[320], err[KDA_ERRLEN];
    void *h = NULL;
    const kda_backend *simd = kda_backend_find("simd");
    snprintf(params, sizeof params, "isa=%s %s", kda_simd_isa_name(isa), a.params);
    if (simd->open(params, &h, err, sizeof err) != KDA_OK) return kda_tool_usage(SUB, "%s", err);
    simd->close(h);
  }
  int32_t peak_isa = isa == KDA_SIMD_ISA_SCALAR ? kda_simd_isa_best() : isa;
  peak_t pk = {peak_isa, 0, 0.0, 0.0};
  double peak = peak_read(&pk);
  printf("kda bench: H = HV = %lld, K = %lld, V = %lld, gate %s, beta logit, l2 fla; "
         "FLOPs = 8*K*V per token and head\n",
         (long long)a.H, (long long)a.K, (long long)a.V, kda_gate_name(a.gate));
  if (*a.params) printf("simd parameters: %s\n", a.params);
  if (peak > 0)
    printf("FMA peak, one core, %s: %.2f GFLOP/s (microbenchmark: 12 independent FMA chains)\n",
           kda_simd_isa_name(peak_isa), peak);
  else
    printf("FMA peak: no vector FMA on this CPU, not measured\n");
  printf("%-16s %-14s %7s %12s %9s %9s %8s\n", "shape", "backend", "threads", "tokens/s",
         "GFLOP/s", "vs ref", "of peak");
  row rows[MAX_T + 1];
  char what[MAX_T + 1][64];
  int nrows = 0;
  for (int i = 0; i < a.nT && rc == 0; i++, nrows++) {
    snprintf(what[nrows], sizeof what[nrows], "prefill T=%lld", (long long)a.T[i]);
    rc = bench_shape(&a, what[nrows], 1, a.T[i], 0, isa, &pk, &rows[nrows]);
  }
  if (rc == 0 && a.N > 0) {
    snprintf(what[nrows], sizeof what[nrows], "decode N=%lld", (long long)a.N);
    rc = bench_shape(&a, what[nrows], a.N, a.N, 1, isa, &pk, &rows[nrows]);
    nrows++;
  }
  if (rc) return rc;
  if (a.ref_tokens) printf("(ref-f32*: measured on the first %lld tokens)\n", (long long)a.ref_tokens);
  peak = pk.best;
  if (peak > 0)
    printf("FMA peak: %d readings, %.2f to %.2f GFLOP/s; the highest is the peak of the ratios\n",
           pk.readings, pk.lowest, peak);
  for (int i = 0; i < nrows; i++) print_ratios(&a, what[i], &rows[i], peak);
  return KDA_EXIT_OK;
}

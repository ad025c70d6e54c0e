/* kda_cmd_bench.c: `kda bench`, throughput of any backend against ref-f32, the FMA peak and
 * the measured memory bandwidth.
 * SPDX-License-Identifier: MIT
 *
 * Prefill (one sequence of T tokens) and decode (N sequences of one token, state in and out)
 * on random float32 inputs (widened exactly for a float64 backend).  Backends are named as in
 * every subcommand (SPEC.md §7.8, kda_backend_resolve) and called in-process through their
 * tables: with the version-2 buffer slots, forward_buffers + synchronize on resident buffers
 * (created once); otherwise forward on host buffers.  Each row is the median of repeats after
 * a warm-up call, with the fastest and slowest call.
 *
 * FLOPs are the state work of SPEC.md §3.1, counted as FMA-slot equivalents: 4 multiply-adds
 * per state element (decay, erase, write, readout), an FMA counting 2, so 8 K·V FLOP per
 * token and value head.  The peak is one core's FMA throughput, measured ONCE at the start
 * (the best of a few microbenchmark runs) or the backend's own describe() figure (a GPU); the
 * printed figure is exactly the one every ratio uses.  Decode is limited by memory, not by
 * FMAs: its rows give GB/s of state traffic (h0 read + ht written, plus the token's inputs and
 * o) against a STREAM copy measured in the same run at the row's thread count (kda_bench_stream.c).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kda_backend_half.h"
#include "kda_conform.h"
#include "kda_bench_stream.h"
#include "kda_tool.h"
#include "backends/simd/kda_simd.h"

#define SUB "bench"
#define MAX_T 8
#define MAX_TARGETS 16

static const char help_text[] =
    "Usage: kda bench [OPTION]...\n"
    "\n"
    "Measures tokens per second and GFLOP/s of backends and of the plain float32 baseline\n"
    "ref-f32 (four passes over the state per token, like ggml's CPU op) in one run, against\n"
    "one core's FMA peak (measured once; the figure printed is the one every ratio uses).\n"
    "FLOPs: 8*K*V per token and value head, as FMA-slot equivalents (an FMA = 2 FLOP).\n"
    "Decode rows also give GB/s of state traffic against the memory bandwidth of a STREAM\n"
    "copy measured in the same run with the row's thread count.\n"
    "\n"
    "  -b, --backend SPEC    a backend to measure, named as in kda conform: NAME[:PARAMS] or\n"
    "                        PATH[:PARAMS] (a plugin, loaded in-process), e.g.\n"
    "                        -b simd:threads=1, -b ref-f64, -b ./libx.so:device=0; repeatable\n"
    "                        (default: simd at each of --threads)\n"
    "  -T, --tokens LIST     prefill lengths (default 4096,65536)\n"
    "  -B, --batch LIST      prefill sequences of T tokens each, every T at every B (default 1)\n"
    "      --heads H         heads, H = HV (default 32)\n"
    "  -K, --key K           key dimension (default 128)\n"
    "      --value V         value dimension (default 128)\n"
    "  -N, --decode-seqs LIST  decode: N sequences of one token, a row per N (default 256;\n"
    "                        0 skips decode)\n"
    "      --ref-tokens N    run ref-f32 on at most N prefill tokens (default: all)\n"
    "      --gate NAME       log or softplus (default softplus, with A_log; beta logit, l2 fla)\n"
    "      --stream-mib M    MiB of each of the three bandwidth arrays (default 128)\n"
    "The default simd rows (without -b):\n"
    "      --isa NAME        simd ISA: auto avx512 avx2 scalar (default auto)\n"
    "      --threads LIST    simd thread counts (default 1,2)\n"
    "      --params STR      more simd parameters, e.g. \"group=1\" (conformance/backends/simd)\n"
    "  -h, --help            print this help and exit\n"
    "\n"
    "Exit status:\n"
    "  0  every row was measured\n"
    "  2  usage error, a backend that cannot be resolved or rejects its parameters, or a\n"
    "     backend call that failed (one line on standard error)\n";

typedef struct bench_args {
  int64_t T[MAX_T], B[MAX_T], N[MAX_T];
  int nT, nB, nN; /* nN 0: no decode rows */
  int64_t H, K, V, ref_tokens, stream_mib;
  int64_t threads[MAX_T];
  int n_threads;
  const char *isa;
  const char *params; /* appended to the default simd rows' parameters */
  const char *specs[MAX_TARGETS];
  int n_specs;
  int simd_option; /* --isa, --threads or --params given (they need the default rows) */
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
  enum { O_HEADS = 256, O_VALUE, O_ISA, O_THREADS, O_REF, O_GATE, O_PARAMS, O_STREAM };
  static const struct option longopts[] = {
      {"tokens", required_argument, NULL, 'T'}, {"heads", required_argument, NULL, O_HEADS},
      {"key", required_argument, NULL, 'K'}, {"value", required_argument, NULL, O_VALUE},
      {"decode-seqs", required_argument, NULL, 'N'}, {"isa", required_argument, NULL, O_ISA},
      {"batch", required_argument, NULL, 'B'},
      {"threads", required_argument, NULL, O_THREADS},
      {"ref-tokens", required_argument, NULL, O_REF}, {"gate", required_argument, NULL, O_GATE},
      {"params", required_argument, NULL, O_PARAMS}, {"backend", required_argument, NULL, 'b'},
      {"stream-mib", required_argument, NULL, O_STREAM},
      {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  memset(a, 0, sizeof *a);
  a->T[0] = 4096, a->T[1] = 65536, a->nT = 2;
  a->B[0] = 1, a->nB = 1, a->N[0] = 256, a->nN = 1;
  a->H = 32, a->K = 128, a->V = 128, a->stream_mib = 128;
  a->threads[0] = 1, a->threads[1] = 2, a->n_threads = 2;
  a->isa = "auto";
  a->params = "";
  a->gate = KDA_GATE_SOFTPLUS;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":T:B:K:N:b:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'T': if (parse_list(optarg, a->T, &a->nT)) return kda_tool_usage(SUB, "bad --tokens"); break;
      case O_HEADS: if (kda_tool_parse_count(optarg, &a->H) || a->H < 1) return kda_tool_usage(SUB, "bad --heads"); break;
      case 'K': if (kda_tool_parse_count(optarg, &a->K) || a->K < 1) return kda_tool_usage(SUB, "bad --key"); break;
      case O_VALUE: if (kda_tool_parse_count(optarg, &a->V) || a->V < 1) return kda_tool_usage(SUB, "bad --value"); break;
      case 'B': if (parse_list(optarg, a->B, &a->nB)) return kda_tool_usage(SUB, "bad --batch"); break;
      case 'N':
        if (strcmp(optarg, "0") == 0) a->nN = 0;
        else if (parse_list(optarg, a->N, &a->nN)) return kda_tool_usage(SUB, "bad --decode-seqs");
        break;
      case O_ISA: a->isa = optarg, a->simd_option = 1; break;
      case O_PARAMS:
        if (strlen(optarg) > 200) return kda_tool_usage(SUB, "--params is too long");
        a->params = optarg, a->simd_option = 1;
        break;
      case O_THREADS:
        if (parse_list(optarg, a->threads, &a->n_threads)) return kda_tool_usage(SUB, "bad --threads");
        a->simd_option = 1;
        break;
      case O_REF: if (kda_tool_parse_count(optarg, &a->ref_tokens)) return kda_tool_usage(SUB, "bad --ref-tokens"); break;
      case O_STREAM:
        if (kda_tool_parse_count(optarg, &a->stream_mib) || a->stream_mib < 1 || a->stream_mib > 65536)
          return kda_tool_usage(SUB, "bad --stream-mib (1 .. 65536)");
        break;
      case O_GATE:
        if (strcmp(optarg, "log") == 0) a->gate = KDA_GATE_LOG;
        else if (strcmp(optarg, "softplus") == 0) a->gate = KDA_GATE_SOFTPLUS;
        else return kda_tool_usage(SUB, "bad --gate '%s' (log, softplus)", optarg);
        break;
      case 'b':
        if (a->n_specs == MAX_TARGETS) return kda_tool_usage(SUB, "too many --backend");
        a->specs[a->n_specs++] = optarg;
        break;
      case 'h': fputs(help_text, stdout); return -1;
      default: return kda_tool_bad_option(SUB, c, argv);
    }
  }
  if (optind < argc) return kda_tool_usage(SUB, "unexpected argument '%s'", argv[optind]);
  if (a->n_specs && a->simd_option)
    return kda_tool_usage(SUB, "--isa, --threads and --params set the default simd rows; with "
                          "-b give parameters in the spec (-b simd:isa=avx2,threads=1)");
  return 0;
}

/* ---- Targets: what each row runs. */
typedef struct target {
  const kda_backend *b;
  kda_plugin *plugin;
  char params[1024];
  char label[96];    /* the row's backend column */
  kda_backend_info info; /* describe(), zero when absent */
  int resident;      /* 1: forward_buffers + synchronize on resident buffers */
  int simd_default;  /* 1: one of the default simd rows (thread scaling is reported) */
  int threads;       /* host threads, 0: unknown */
  int32_t in_dt, out_dt; /* buffer element types of these parameters (the variant slot) */
} target;

/* Opens t once (a parameter the backend rejects is a usage error, before any output) and
 * reads what it says about itself.  0, or the exit status. */
static int target_open(target *t) {
  char err[KDA_ERRLEN] = "";
  void *h = NULL;
  kda_backend_variant v; /* the element types of these parameters (SPEC.md §7.8) */
  int rejected = 0;
  if (kda_backend_variant_get(t->b, t->params, &v, &rejected, err, sizeof err) != KDA_OK)
    return rejected ? kda_tool_usage(SUB, "%s", err) : kda_tool_fail(SUB, "%s", err);
  t->in_dt = v.input_dtype, t->out_dt = v.output_dtype;
  if (t->b->open(t->params, &h, err, sizeof err) != KDA_OK)
    return kda_tool_usage(SUB, "backend '%s': %s", t->b->name, err);
  memset(&t->info, 0, sizeof t->info);
  t->info.struct_size = sizeof t->info;
  if (KDA_BACKEND_HAS(t->b, describe) && t->b->describe && t->b->describe(h, &t->info) != KDA_OK)
    memset(&t->info, 0, sizeof t->info);
  t->info.device[sizeof t->info.device - 1] = t->info.isa[sizeof t->info.isa - 1] = 0;
  t->b->close(h);
  t->resident = KDA_BACKEND_HAS(t->b, buffers_destroy) && t->b->buffers_create &&
                t->b->forward_buffers && t->b->buffers_destroy;
  if (t->info.threads > 0) t->threads = t->info.threads;
  if (t->info.isa[0]) snprintf(t->label, sizeof t->label, "%s(%.60s)", t->b->name, t->info.isa);
  else snprintf(t->label, sizeof t->label, "%s", t->b->name);
  if (KDA_DTYPE_SIZE(t->in_dt) == 2) { /* 16-bit inputs: not the table's row */
    size_t n = strlen(t->label);
    snprintf(t->label + n, sizeof t->label - n, "[%s]", kda_precision_name(t->in_dt));
  }
  return 0;
}

static int target_from_spec(const char *spec, target *t) {
  char err[KDA_ERRLEN];
  kda_backend_ref ref;
  memset(t, 0, sizeof *t);
  if (kda_backend_resolve(spec, &ref, err, sizeof err) != KDA_OK) return kda_tool_usage(SUB, "%s", err);
  snprintf(t->params, sizeof t->params, "%s", ref.params);
  t->b = ref.builtin;
  if (!t->b && kda_plugin_load(ref.path, &t->plugin, &t->b, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err);
  return target_open(t);
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

/* The buffers of one backend: d's floats, or float64 copies for a float64 backend. */
typedef struct host_tensors {
  kda_backend_tensors t;
  void *own[10]; /* copies to free */
  int fail;      /* an allocation failed */
} host_tensors;

/* n floats (NULL for NULL) in element type dt (kda_backend.h): x itself for fp32, else a
 * copy owned by h (float64 widened, bf16 / fp16 rounded to nearest). */
static const void *as_dtype(const float *x, size_t n, int32_t dt, host_tensors *h, int slot) {
  if (!x || dt == KDA_PRECISION_FP32) return x;
  const size_t es = (size_t)KDA_DTYPE_SIZE(dt);
  unsigned char *y = malloc((n ? n : 1) * es);
  h->own[slot] = y;
  if (!y) return h->fail = 1, NULL;
  for (size_t i = 0; i < n; i++) {
    if (es == 8) {
      double v = (double)x[i];
      memcpy(y + 8 * i, &v, 8);
    } else {
      uint16_t b = dt == KDA_PRECISION_BF16 ? kda_bf16_from_float(x[i]) : kda_f16_from_float(x[i]);
      memcpy(y + 2 * i, &b, 2);
    }
  }
  return y;
}

static void host_free(host_tensors *h) {
  for (int i = 0; i < 10; i++) free(h->own[i]);
}

static int host_make(const bench_data *d, const target *tg, host_tensors *h) {
  memset(h, 0, sizeof *h);
  kda_backend_tensors *t = &h->t;
  t->struct_size = sizeof *t;
  const int32_t in = tg->in_dt, out = tg->out_dt;
  const int32_t sin = KDA_STATE_DTYPE(in), sout = KDA_STATE_DTYPE(out); /* A_log dt_bias h0 ht */
  t->in_dtype = in, t->out_dtype = out;
  const kda_problem *p = &d->p;
  const size_t qk = (size_t)p->T * p->H * p->K, vv = (size_t)p->T * p->HV * p->V;
  const size_t st = (size_t)p->N * p->HV * p->K * p->V;
  const float *A = p->has_A_log ? d->A_log : NULL, *bias = p->gate_mode != KDA_GATE_LOG ? d->dt_bias : NULL;
  t->q = as_dtype(d->q, qk, in, h, 0), t->k = as_dtype(d->k, qk, in, h, 1);
  t->v = as_dtype(d->v, vv, in, h, 2), t->g = as_dtype(d->g, qk, in, h, 3);
  t->beta = as_dtype(d->beta, (size_t)p->T * p->HV, in, h, 4);
  t->A_log = as_dtype(A, (size_t)p->HV, sin, h, 5);
  t->dt_bias = as_dtype(bias, (size_t)p->HV * p->K, sin, h, 6);
  t->h0 = as_dtype(d->h0, st, sin, h, 7);
  t->o = out == KDA_PRECISION_FP32 ? d->o : (h->own[8] = malloc((vv ? vv : 1) * 8));
  t->ht = sout == KDA_PRECISION_FP32 ? d->ht : (h->own[9] = malloc((st ? st : 1) * 8));
  if (!t->o || !t->ht) h->fail = 1;
  t->cu_seqlens = d->cu;
  if (h->fail) return host_free(h), -1;
  return 0;
}

/* ---- Timing. */
typedef struct timing {
  double median, min, max; /* seconds a call */
  int reps;
} timing;

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* One timed call: forward, or forward_buffers + synchronize.  <0 on failure. */
static double call_once(const target *tg, void *h, const kda_problem *p,
                        const kda_backend_tensors *t, void *buffers) {
  const kda_backend *b = tg->b;
  double t0 = now_s();
  int32_t st;
  if (buffers) {
    st = b->forward_buffers(h, p, buffers);
    if (st == KDA_OK && KDA_BACKEND_HAS(b, synchronize) && b->synchronize) st = b->synchronize(h);
  } else {
    st = b->forward(h, p, t);
  }
  double dt = now_s() - t0;
  return st == KDA_OK ? dt : -1;
}

/* A warm-up call (kept as the only sample when it takes over 2 s: cold effects are small
 * against that), then repeats until at least 3 calls and 1 s, at most 15 calls or 20 s. */
static int time_calls(const target *tg, void *h, const kda_problem *p,
                      const kda_backend_tensors *t, void *buffers, timing *out) {
  double s[15];
  int n = 0;
  double dt = call_once(tg, h, p, t, buffers), spent = 0;
  if (dt < 0) return -1;
  if (dt > 2.0) s[n++] = dt, spent = dt;
  while (n < 15 && (n < 3 || spent < 1.0) && spent < 20.0) {
    if ((dt = call_once(tg, h, p, t, buffers)) < 0) return -1;
    s[n++] = dt, spent += dt;
  }
  qsort(s, (size_t)n, sizeof s[0], cmp_double);
  out->reps = n;
  out->min = s[0], out->max = s[n - 1];
  out->median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  return 0;
}

/* Times target tg on d.  0, or the exit status (message on stderr). */
static int time_target(const target *tg, const bench_data *d, timing *out) {
  char err[KDA_ERRLEN] = "", reason[256] = "";
  const kda_backend *b = tg->b;
  void *h = NULL, *buffers = NULL;
  if (b->open(tg->params, &h, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "backend '%s': %s", b->name, err);
  host_tensors ht;
  int rc = 0;
  if (b->supports(h, &d->p, reason, sizeof reason) != KDA_OK) {
    rc = kda_tool_fail(SUB, "backend '%s' does not support this shape: %s", b->name, reason);
  } else if (host_make(d, tg, &ht) != 0) {
    rc = kda_tool_fail(SUB, "out of memory for the buffers of '%s'", b->name);
  } else {
    if (tg->resident && b->buffers_create(h, &d->p, &ht.t, &buffers) != KDA_OK)
      rc = kda_tool_fail(SUB, "backend '%s': buffers_create: %s", b->name, b->last_error(h));
    if (rc == 0 && time_calls(tg, h, &d->p, &ht.t, buffers, out) != 0)
      rc = kda_tool_fail(SUB, "backend '%s': %s", b->name, b->last_error(h));
    if (buffers) b->buffers_destroy(h, buffers);
    host_free(&ht);
  }
  b->close(h);
  return rc;
}

/* ---- Peak and bandwidth. */

/* One core's FMA peak in FLOP/s for the ISA (best of five runs), or 0 without a probe. */
static double fma_probe(int32_t isa) {
  double (*probe)(int64_t) = isa == KDA_SIMD_ISA_AVX512 ? kda_simd_fma_probe_avx512
                           : isa == KDA_SIMD_ISA_AVX2 ? kda_simd_fma_probe_avx2 : NULL;
  if (!probe) return 0;
  double best = 0;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now_s();
    double flops = probe(20000000);
    double rate = flops / (now_s() - t0);
    if (rate > best) best = rate;
  }
  return best;
}

/* STREAM copy bandwidth at each thread count, measured on first use. */
typedef struct bw_cache {
  int threads[MAX_TARGETS + 1];
  double copy[MAX_TARGETS + 1], triad[MAX_TARGETS + 1];
  int n;
  size_t bytes;
} bw_cache;

static double bandwidth(bw_cache *c, int threads) {
  for (int i = 0; i < c->n; i++)
    if (c->threads[i] == threads) return c->copy[i];
  kda_stream_result r;
  char err[KDA_ERRLEN];
  if (c->n == MAX_TARGETS + 1 || kda_stream_measure(threads, c->bytes, &r, err, sizeof err) != 0)
    return 0;
  c->threads[c->n] = threads, c->copy[c->n] = r.copy_bytes_per_s, c->triad[c->n] = r.triad_bytes_per_s;
  return c->copy[c->n++];
}

/* ---- Rows. */
typedef struct row {
  double gflops, gbps, of_peak, of_bw; /* of_*: fractions, <0 when not applicable */
} row;

/* Bytes one decode call moves: the state in and out, each token's inputs and o. */
static double decode_bytes(const bench_data *d, const target *tg) {
  const kda_problem *p = &d->p;
  double ei = KDA_DTYPE_SIZE(tg->in_dt), eo = KDA_DTYPE_SIZE(tg->out_dt);
  double si = KDA_DTYPE_SIZE(KDA_STATE_DTYPE(tg->in_dt)); /* h0 in, ht out */
  double so = KDA_DTYPE_SIZE(KDA_STATE_DTYPE(tg->out_dt));
  double state = (double)p->N * p->HV * p->K * p->V;
  double in = (double)p->T * (2.0 * p->H * p->K + p->HV * p->V + p->HV * p->K + p->HV);
  return state * (si + so) + in * ei + (double)p->T * p->HV * p->V * eo;
}

typedef struct bench_ctx {
  const bench_args *a;
  double peak_core; /* FLOP/s of one core, 0: not measured */
  bw_cache bw;
} bench_ctx;

static void print_row(const char *what, const target *tg, const timing *tm, double tokens,
                      const row *r) {
  printf("%-16s %-16s ", what, tg->label);
  if (tg->threads > 0) printf("%7d", tg->threads); else printf("%7s", "-");
  printf(" %4d %10.3f %9.3f %9.3f %12.0f %9.2f", tm->reps, 1e3 * tm->median, 1e3 * tm->min,
         1e3 * tm->max, tokens / tm->median, r->gflops);
  if (r->of_peak >= 0) printf(" %7.1f%%", 100 * r->of_peak); else printf(" %8s", "-");
  if (r->gbps >= 0) printf(" %8.2f", r->gbps); else printf(" %8s", "-");
  if (r->of_bw >= 0) printf(" %6.1f%%", 100 * r->of_bw); else printf(" %7s", "-");
  printf("\n");
  fflush(stdout);
}

/* Measures target tg on d and prints its row. */
static int bench_row(bench_ctx *cx, const char *what, const target *tg, const bench_data *d,
                     int decode, const char *label_suffix, row *r) {
  timing tm = {0, 0, 0, 0};
  int rc = time_target(tg, d, &tm);
  if (rc) return rc;
  double flops = 8.0 * (double)d->p.T * (double)d->p.HV * (double)d->p.K * (double)d->p.V;
  r->gflops = flops / tm.median / 1e9;
  r->of_peak = r->gbps = r->of_bw = -1;
  /* The peak of the row: the backend's own (a device), else threads x one core's. */
  double peak = tg->info.peak_flops > 0 ? tg->info.peak_flops
              : tg->threads > 0 && cx->peak_core > 0 ? cx->peak_core * tg->threads : 0;
  if (!decode && peak > 0) r->of_peak = flops / tm.median / peak;
  if (decode) {
    r->gbps = decode_bytes(d, tg) / tm.median / 1e9;
    double bw = tg->info.peak_bytes_per_s > 0 ? tg->info.peak_bytes_per_s
              : bandwidth(&cx->bw, tg->threads > 0 ? tg->threads : 1);
    if (bw > 0) r->of_bw = r->gbps * 1e9 / bw;
  }
  target shown = *tg;
  if (label_suffix) snprintf(shown.label, sizeof shown.label, "%s%s", tg->b->name, label_suffix);
  print_row(what, &shown, &tm, (double)d->p.T, r);
  return 0;
}

/* ref-f32, then every target, on one shape; rows[0] is ref-f32. */
static int bench_shape(bench_ctx *cx, const char *what, int64_t N, int64_t T, int decode,
                       target *ref, target *tg, int nt, row *rows) {
  const bench_args *a = cx->a;
  bench_data d;
  int64_t Tref = decode || !a->ref_tokens || a->ref_tokens >= T ? T : a->ref_tokens;
  if (Tref < T) Tref = Tref < N ? N : Tref / N * N; /* N whole sequences of Tref / N tokens */
  if (data_make(a, N, Tref, decode, &d)) return kda_tool_fail(SUB, "out of memory for %s", what);
  int rc = bench_row(cx, what, ref, &d, decode, Tref < T ? "*" : NULL, &rows[0]);
  if (rc == 0 && Tref != T) {
    data_free(&d);
    if (data_make(a, N, T, decode, &d)) return kda_tool_fail(SUB, "out of memory for %s", what);
  }
  for (int i = 0; i < nt && rc == 0; i++) rc = bench_row(cx, what, &tg[i], &d, decode, NULL, &rows[i + 1]);
  data_free(&d);
  return rc;
}

static void print_ratios(const char *what, int decode, const target *tg, int nt, const row *r) {
  printf("ratios %s:", what);
  for (int i = 0; i < nt; i++) {
    printf("%s %s/ref-f32", i ? ";" : "", tg[i].label);
    if (tg[i].threads > 0) printf(" (%d thread%s)", tg[i].threads, tg[i].threads == 1 ? "" : "s");
    printf(" %.2fx", r[i + 1].gflops / r[0].gflops);
    if (!decode && r[i + 1].of_peak >= 0) printf(", %.1f%% of FMA peak", 100 * r[i + 1].of_peak);
    if (decode && r[i + 1].of_bw >= 0) printf(", %.1f%% of memory bandwidth", 100 * r[i + 1].of_bw);
  }
  /* Thread scaling of the default simd rows, against the first of them. */
  for (int i = 1; i < nt; i++)
    if (tg[i].simd_default && tg[0].simd_default)
      printf("; %d->%d threads %.2fx", tg[0].threads, tg[i].threads, r[i + 1].gflops / r[1].gflops);
  printf("\n");
}

/* The default rows: simd at each thread count. */
static int default_targets(const bench_args *a, target *tg, int *nt) {
  int32_t isa = -1;
  if (strcmp(a->isa, "auto") == 0) isa = kda_simd_isa_best();
  for (int32_t i = 0; i < KDA_SIMD_ISA_COUNT; i++)
    if (strcmp(a->isa, kda_simd_isa_name(i)) == 0) isa = i;
  const char *why;
  if (isa < 0) return kda_tool_usage(SUB, "unknown --isa '%s'", a->isa);
  if (!kda_simd_isa_available(isa, &why)) return kda_tool_fail(SUB, "isa=%s: %s", a->isa, why);
  for (int i = 0; i < a->n_threads; i++) {
    target *t = &tg[(*nt)++];
    memset(t, 0, sizeof *t);
    t->b = kda_backend_find("simd");
    t->simd_default = 1;
    snprintf(t->params, sizeof t->params, "isa=%s threads=%lld%s%s", kda_simd_isa_name(isa),
             (long long)a->threads[i], a->params[0] ? " " : "", a->params);
    int rc = target_open(t);
    if (rc) return rc;
  }
  return 0;
}

static void print_header(const bench_ctx *cx, const target *tg, int nt) {
  const bench_args *a = cx->a;
  printf("kda bench: H = HV = %lld, K = %lld, V = %lld, gate %s, beta logit, l2 fla\n",
         (long long)a->H, (long long)a->K, (long long)a->V, kda_gate_name(a->gate));
  printf("FLOPs: 8*K*V per token and head, FMA-slot equivalents (an FMA = 2 FLOP; 4 "
         "multiply-adds per state element)\n");
  if (*a->params) printf("simd parameters: %s\n", a->params);
  for (int i = 0; i < nt; i++) {
    const kda_backend_info *in = &tg[i].info;
    printf("backend %s: %s%s%s; %s", tg[i].label, tg[i].b->name, tg[i].params[0] ? ":" : "",
           tg[i].params,
           tg[i].resident ? "timed on resident buffers (forward_buffers + synchronize)"
                          : "timed on host buffers (forward)");
    if (in->device[0]) printf("; %s", in->device);
    /* A backend's own figures replace the CPU's in its rows' ratios: print them. */
    if (in->peak_flops > 0) printf("; its peak %.2f GFLOP/s", in->peak_flops / 1e9);
    if (in->peak_bytes_per_s > 0) printf("; its bandwidth %.2f GB/s", in->peak_bytes_per_s / 1e9);
    if (tg[i].threads <= 0 && in->peak_flops <= 0) printf("; threads unknown: no %% of peak");
    if (tg[i].threads <= 0 && in->peak_bytes_per_s <= 0)
      printf("; threads unknown: decode against the 1-thread bandwidth");
    printf("\n");
  }
  if (cx->peak_core > 0)
    printf("FMA peak, one core, %s: %.2f GFLOP/s (best of 5 runs of 12 independent FMA "
           "chains, measured once; every ratio below uses this figure, times the row's "
           "threads)\n", kda_simd_isa_name(kda_simd_isa_best()), cx->peak_core / 1e9);
  else
    printf("FMA peak: no vector FMA on this CPU, not measured\n");
  printf("%-16s %-16s %7s %4s %10s %9s %9s %12s %9s %8s %8s %7s\n", "shape", "backend",
         "threads", "reps", "median ms", "min ms", "max ms", "tokens/s", "GFLOP/s", "of peak",
         "GB/s", "of BW");
}

static void print_bandwidth(const bw_cache *c) {
  for (int i = 0; i < c->n; i++)
    printf("memory bandwidth (STREAM, this run, %d thread%s, 3 x %.0f MiB): copy %.2f GB/s, "
           "triad %.2f GB/s; decode rows use copy (read h0, write ht)\n", c->threads[i],
           c->threads[i] == 1 ? "" : "s", (double)c->bytes / 1048576.0, c->copy[i] / 1e9,
           c->triad[i] / 1e9);
}

int kda_cmd_bench(int argc, char **argv) {
  static bench_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc < 0 ? KDA_EXIT_OK : rc;
  for (int j = 0; j < a.nB; j++)
    for (int i = 0; i < a.nT; i++)
      if (a.T[i] > ((int64_t)1 << 40) / a.B[j])
        return kda_tool_usage(SUB, "--batch %lld times --tokens %lld is too many tokens",
                              (long long)a.B[j], (long long)a.T[i]);
  static target tg[MAX_TARGETS], ref;
  int nt = 0;
  for (int i = 0; i < a.n_specs && rc == 0; i++) rc = target_from_spec(a.specs[i], &tg[nt++]);
  if (rc == 0 && a.n_specs == 0) rc = default_targets(&a, tg, &nt);
  if (rc == 0) rc = target_from_spec("ref-f32", &ref);
  static bench_ctx cx;
  cx.a = &a;
  cx.bw.bytes = (size_t)a.stream_mib << 20;
  static row rows[MAX_T * MAX_T + MAX_T][MAX_TARGETS + 1];
  static char what[MAX_T * MAX_T + MAX_T][64];
  int nrows = 0, decode_first = -1;
  if (rc == 0) {
    cx.peak_core = fma_probe(kda_simd_isa_best());
    print_header(&cx, tg, nt);
  }
  /* Prefill rows: every B at every T (B sequences of T tokens: B*T tokens a call). */
  for (int j = 0; j < a.nB && rc == 0; j++)
    for (int i = 0; i < a.nT && rc == 0; i++, nrows++) {
      if (a.B[j] > 1)
        snprintf(what[nrows], sizeof what[nrows], "prefill B=%lld T=%lld", (long long)a.B[j],
                 (long long)a.T[i]);
      else
        snprintf(what[nrows], sizeof what[nrows], "prefill T=%lld", (long long)a.T[i]);
      rc = bench_shape(&cx, what[nrows], a.B[j], a.B[j] * a.T[i], 0, &ref, tg, nt, rows[nrows]);
    }
  decode_first = nrows;
  for (int i = 0; i < a.nN && rc == 0; i++, nrows++) {
    snprintf(what[nrows], sizeof what[nrows], "decode N=%lld", (long long)a.N[i]);
    rc = bench_shape(&cx, what[nrows], a.N[i], a.N[i], 1, &ref, tg, nt, rows[nrows]);
  }
  if (rc == 0) {
    if (a.ref_tokens) printf("(ref-f32*: measured on the first %lld tokens)\n", (long long)a.ref_tokens);
    print_bandwidth(&cx.bw);
    for (int i = 0; i < nrows; i++) print_ratios(what[i], i >= decode_first, tg, nt, rows[i]);
  }
  for (int i = 0; i < nt; i++) kda_plugin_unload(tg[i].plugin);
  return rc;
}

/* bench_cuda.cu: standalone timing harness of the CUDA backend's kernels (docs/cuda.md).
 * SPDX-License-Identifier: MIT
 *
 * Beside `kda bench -b libkda_cuda.so` (the runner's view), this prints the figures of
 * docs/cuda.md, with CUDA events around kda_cuda_launch on device-resident buffers: prefill B1
 * at T = 8192, 32768 and 131072 and B4 at T = 8192, decode (T = 1 a sequence, h0 in and ht
 * out) at B = 64, 256, 1024; H = HV = 32, K = V = 128;
 * KDA with the softplus gate, A_log, logit beta and fla L2 (the production configuration).
 * Inputs are pseudo-random (a hash of the element index; never zeros), drawn on the device.
 * Each figure is the median of REPS timed launches after WARMUP untimed ones; tokens/s,
 * TFLOP/s (8 K V FLOP a token and value head) and GB/s (prefill: bytes of inputs and
 * outputs; decode: state bytes read and written).  A repeated launch must give the same
 * bits (SPEC.md §7.7 --repeat), checked on the outputs of the first and the last launch; each
 * line ends with a hash of the output and final-state bits (two builds that print the same
 * hash computed the same bits).  Also the card's device-to-device copy bandwidth, as the ceiling for decode.
 * Prefill runs the chunked kernels, then the recurrent kernel for each ksplit, and prints the
 * largest difference of their outputs; BENCH_PHASES=1 also times each stage alone.
 * Usage: bench_cuda [ksplit ...]   (default 0, the automatic choice; "bench_cuda 0 4 8" compares);
 * BENCH_ONLY=PREFIX runs only the cases whose name starts with PREFIX (for a profiler).
 * Exit status 0, or 1 on a CUDA error or a nondeterministic result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <algorithm>
#include <vector>

#include "kda_cuda.h"
#include "kda_cuda_chunk.h"

#define WARMUP 3
#define REPS 15

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "bench_cuda: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* x in [lo, hi) from a hash of (seed, index): uniform enough, and never all zeros. */
__global__ void fill_uniform(float *x, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed * 40503u ^ (uint32_t)(i >> 32) * 97u;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    x[i] = lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f);
  }
}

static float *dev_uniform(int64_t n, uint32_t seed, float lo, float hi) {
  float *p = NULL;
  if (n <= 0) return NULL;
  CK(cudaMalloc(&p, (size_t)n * sizeof(float)));
  fill_uniform<<<1024, 256>>>(p, n, seed, lo, hi);
  CK(cudaGetLastError());
  return p;
}

typedef struct bench_case {
  const char *name;
  int64_t B, T1; /* B sequences of T1 tokens */
} bench_case;

static double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/* A checksum of a device buffer's bits (copied to the host). */
static uint64_t bits_of(const float *d, size_t n) {
  std::vector<uint32_t> h(n);
  CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  uint64_t s = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) s = (s ^ h[i]) * 1099511628211ull;
  return s;
}

/* The chunked kernels' outputs of the current case, which the recurrent runs are compared to. */
static std::vector<float> g_chunk_o;

/* Largest |a - b| and |b| over the outputs (a sanity check of one against the other). */
static void compare_outputs(const float *d, size_t n, int chunked) {
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  if (chunked) { g_chunk_o.swap(h); return; }
  if (g_chunk_o.size() != n) return;
  double dmax = 0, omax = 0;
  for (size_t i = 0; i < n; i++) {
    const double x = fabs((double)h[i] - g_chunk_o[i]);
    dmax = x > dmax || x != x ? x : dmax;
    omax = fabs(h[i]) > omax ? fabs(h[i]) : omax;
  }
  printf("  chunk vs recurrent: max |diff| %.3g, max |o| %.3g\n", dmax, omax);
}

/* Runs one case; returns 0, or 1 when two launches gave different bits. */
static int run_case(const bench_case *bc, int ksplit, int no_decode, int algo) {
  const int64_t H = 32, K = 128, V = 128, HV = 32, N = bc->B, T = bc->B * bc->T1;
  kda_problem p;
  memset(&p, 0, sizeof p);
  p.N = N, p.T = T, p.H = H, p.HV = HV, p.K = K, p.V = V;
  p.family = KDA_FAMILY_KDA, p.gate_mode = KDA_GATE_SOFTPLUS, p.beta_mode = KDA_BETA_LOGIT;
  p.l2_mode = KDA_L2_FLA, p.head_map = KDA_HEADMAP_DIV, p.state_layout = KDA_STATE_KV;
  p.has_A_log = 1, p.want_final_state = 1, p.has_initial_state = bc->T1 == 1;
  p.scale = 0.08838834764831845, p.lower_bound = -5.0, p.l2_eps = 1e-6;
  const int64_t st = N * HV * K * V;
  kda_cuda_dev d;
  memset(&d, 0, sizeof d);
  d.q = dev_uniform(T * H * K, 1, -1, 1), d.k = dev_uniform(T * H * K, 2, -1, 1);
  d.v = dev_uniform(T * HV * V, 3, -1, 1), d.g = dev_uniform(T * HV * K, 4, -3, 3);
  d.beta = dev_uniform(T * HV, 5, -2, 2), d.A_log = dev_uniform(HV, 6, -1, 0.5f);
  d.dt_bias = dev_uniform(HV * K, 7, -0.5f, 0.5f);
  if (p.has_initial_state) d.h0 = dev_uniform(st, 8, -0.1f, 0.1f);
  std::vector<int64_t> cu(N + 1);
  for (int64_t n = 0; n <= N; n++) cu[n] = n * bc->T1;
  int64_t *dcu = NULL;
  CK(cudaMalloc(&dcu, (N + 1) * 8));
  CK(cudaMemcpy(dcu, cu.data(), (N + 1) * 8, cudaMemcpyHostToDevice));
  d.cu_seqlens = dcu;
  CK(cudaMalloc(&d.o, (size_t)T * HV * V * 4));
  CK(cudaMalloc(&d.ht, (size_t)st * 4));
  const int64_t n_chunks = kda_cuda_chunk_count(&p, cu.data(), NULL);
  const int chunked = kda_cuda_use_chunk(&p, algo, bc->T1, n_chunks, KDA_CUDA_CHUNK_CAP);
  CK(cudaMalloc(&d.scratch, kda_cuda_scratch_bytes(&p, chunked)));
  int32_t *dplan = NULL;
  if (chunked) { /* the plan is built on the host, as the plugin does */
    std::vector<int32_t> plan(kda_cuda_plan_ints(&p, n_chunks));
    kda_cuda_chunk_fill(&p, cu.data(), NULL, plan.data());
    CK(cudaMalloc(&dplan, plan.size() * 4));
    CK(cudaMemcpy(dplan, plan.data(), plan.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d.chunk_scratch, kda_cuda_chunk_bytes(&p, n_chunks)));
    d.plan = dplan, d.n_chunks = n_chunks;
  }
  kda_cuda_opts o = {ksplit, no_decode, bc->T1, 0, 0};
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  char err[512];
  std::vector<float> ms;
  uint64_t first = 0;
  for (int r = 0; r < WARMUP + REPS; r++) {
    CK(cudaEventRecord(e0, s));
    if (kda_cuda_launch(&p, &d, &o, s, err, sizeof err)) {
      fprintf(stderr, "bench_cuda: %s\n", err);
      exit(1);
    }
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r >= WARMUP) ms.push_back(t);
    if (r == 0) first = bits_of(d.o, (size_t)T * HV * V) ^ bits_of(d.ht, (size_t)st);
  }
  const uint64_t last = bits_of(d.o, (size_t)T * HV * V) ^ bits_of(d.ht, (size_t)st);
  if (bc->T1 > 1) compare_outputs(d.o, (size_t)T * HV * V, chunked);
  /* each stage alone: 8 prologue, 1 prep, 2 scan (with the outputs); without the chunked kernels 8 the
   * prologue and 7 the kernel */
  if (getenv("BENCH_PHASES"))
    for (const int ph : chunked ? std::vector<int>{1, 2, 8} : std::vector<int>{7, 8}) {
      o.phases = ph;
      std::vector<float> pm;
      for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(e0, s));
        if (kda_cuda_launch(&p, &d, &o, s, err, sizeof err)) exit(1);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float t = 0;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (r) pm.push_back(t);
      }
      printf("  phase %d alone: %.4f ms\n", ph, median(pm));
      o.phases = 0;
    }
  const double t = median(ms) * 1e-3;
  const double flop = 8.0 * K * V * (double)T * HV;
  const double io = 4.0 * (2.0 * T * H * K + 2.0 * T * HV * V + (double)T * HV * K + T * HV);
  const double state = 4.0 * st * (p.has_initial_state ? 2 : 1);
  printf("%-16s %s ksplit=%-2d %10.4f ms  %9.3f Mtok/s  %7.2f TFLOP/s  %7.1f GB/s io  %7.1f GB/s state  %s %016llx\n",
         bc->name, chunked ? "chunk " : bc->T1 > 1 ? "recur " : no_decode ? "recur " : "decode", ksplit, t * 1e3, T / t * 1e-6, flop / t * 1e-12, io / t * 1e-9,
         state / t * 1e-9, first == last ? "repeat-identical" : "REPEAT-DIFFERS",
         (unsigned long long)last);
  cudaFree((void *)d.q), cudaFree((void *)d.k), cudaFree((void *)d.v), cudaFree((void *)d.g);
  cudaFree((void *)d.beta), cudaFree((void *)d.A_log), cudaFree((void *)d.dt_bias);
  cudaFree((void *)d.h0), cudaFree(dcu), cudaFree(d.o), cudaFree(d.ht), cudaFree(d.scratch);
  cudaFree(dplan), cudaFree(d.chunk_scratch);
  cudaStreamDestroy(s);
  return first == last ? 0 : 1;
}

/* Device-to-device copy bandwidth (bytes read plus written), the decode ceiling. */
static void copy_bandwidth(void) {
  const size_t n = (size_t)2 << 30;
  void *a, *b;
  CK(cudaMalloc(&a, n));
  CK(cudaMalloc(&b, n));
  CK(cudaMemset(a, 1, n));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < 8; r++) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r >= 2) ms.push_back(t);
  }
  printf("copy           2 GiB D2D  %8.3f ms  %7.1f GB/s (read + write)\n", median(ms),
         2.0 * n / (median(ms) * 1e-3) * 1e-9);
  cudaFree(a), cudaFree(b);
}

int main(int argc, char **argv) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int clk = 0;
  CK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
  printf("device: %s, sm_%d%d, %d SMs, %d MHz, fp32 FMA peak %.1f TFLOP/s\n", prop.name,
         prop.major, prop.minor, prop.multiProcessorCount, clk / 1000,
         2.0 * 128 * prop.multiProcessorCount * clk * 1e3 * 1e-12);
  copy_bandwidth();
  std::vector<int> ks;
  for (int a = 1; a < argc; a++) ks.push_back(atoi(argv[a]));
  if (ks.empty()) ks.push_back(0);
  const bench_case cases[] = {{"prefill-T8192", 1, 8192},   {"prefill-T32768", 1, 32768},
                              {"prefill-T131072", 1, 131072}, {"prefill-B4-T8192", 4, 8192},
                              {"decode-B64", 64, 1},          {"decode-B256", 256, 1},
                              {"decode-B1024", 1024, 1}};
  const char *only = getenv("BENCH_ONLY"); /* run only the cases whose name starts so */
  int bad = 0;
  for (const bench_case &c : cases) {
    if (only && *only && strncmp(c.name, only, strlen(only)) != 0) continue;
    g_chunk_o.clear();
    if (c.T1 > 1) bad |= run_case(&c, 0, 0, 1); /* the chunked kernels */
    for (int k : ks) bad |= run_case(&c, k, 0, 2);
    if (c.T1 == 1) bad |= run_case(&c, 8, 1, 2); /* the general kernel on decode, to compare */
  }
  return bad;
}

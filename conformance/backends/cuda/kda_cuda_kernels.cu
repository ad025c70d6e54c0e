/* kda_cuda_kernels.cu: the float32 KDA kernels of the CUDA backend (SPEC.md §3-§5).
 * SPDX-License-Identifier: MIT
 *
 * Two stages on one stream (docs/cuda.md), after a widening kernel when the inputs are 16-bit:
 *   1. Prologue kernels compute, once per token and head, the coefficients of SPEC.md §4
 *      with the formulas of SPEC.md §9.2 evaluated in float64 and rounded to float once:
 *      qh = scale * L2(q) and kh = L2(k) per (t, h) (not for the chunked kernels, whose prep
 *      normalizes its own rows the same way); a = exp(g_eff) per (t, hv, gate
 *      channel); beta_eff per (t, hv); and a map token -> checkpoint index (-1 for none).
 *   2. The chunked kernels (kda_cuda_chunk.cu) when the call's chunk plan says so; else the
 *      recurrent kernel (or, when no sequence has more than one token, a decode kernel: the
 *      row kernel for the kv layout, the column kernel otherwise): one block of 128 threads per work item (sequence, value head, tile of VT
 *      value columns), persistent over items.  KS consecutive lanes share one value column j
 *      and hold R key rows each (i = s*R + r, s the lane's slice), so the column tile of the
 *      state lives in registers for the whole sequence.  The two sums over i of SPEC.md §3.1
 *      (the prediction p_j and the readout o_j) are a per-thread sum of R products followed
 *      by an xor-butterfly over the KS lanes: addition is commutative, so every lane of a
 *      column ends with the same bits, and the order of every sum is fixed by the code alone
 *      (no atomics), so results are identical run to run and whatever the batch composition
 *      or grid.  Coefficients, values, betas and checkpoint indices of up to TB tokens are
 *      staged in shared memory by cp.async, double-buffered; outputs go back through shared
 *      memory in rows.
 * Products may be fused (FMA): SPEC.md §9.2's evaluation order binds the references only;
 * the fp32 class (SPEC.md §7.2) bounds the error, which stays within a few units.
 * Gates of -88, -1000 and -inf give exp(g) = +0 and a decayed row of zeros, never NaN
 * (SPEC.md §9.2), as long as the state is finite.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_pipeline.h>

#include "kda_cuda.h"
#include "kda_cuda_chunk.h"
#include "kda_cuda_math.h"
#include "kda_precision.h"

#define THREADS 128
#define ALIGN_BYTES 256

/* ==== Scratch layout ==== */

typedef struct scratch_map {
  size_t qh, kh, a, b, ckpt, lg, ea, total; /* byte offsets */
} scratch_map;

static size_t round_up(size_t x) { return (x + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES; }

static int64_t gate_width(const kda_problem *p) {
  return p->family == KDA_FAMILY_KDA ? p->K : p->family == KDA_FAMILY_GDN ? 1 : 0;
}

/* chunked: the chunked kernels read neither qh, kh nor a, so those take no room (1.5 GiB at
 * B1 T32768 H32, 26 GB at B4 T131072).  Their prep normalizes q and k itself (kda_cuda_chunk.cu,
 * prep_norms: the prologue's arithmetic, the same bits), which spares the prologue 1 GiB of
 * writes and 1 GiB of reads at B1 T32768 H32, and takes the log-gates lg instead of a. */
static scratch_map scratch_layout(const kda_problem *p, int chunked) {
  scratch_map m;
  const size_t T = (size_t)p->T, qk = chunked ? 0 : T * (size_t)p->H * (size_t)p->K * sizeof(float);
  m.qh = 0;
  m.kh = round_up(qk);
  m.a = m.kh + round_up(qk);
  m.b = m.a + (chunked ? 0 : round_up(T * (size_t)p->HV * (size_t)gate_width(p) * sizeof(float)));
  m.ckpt = m.b + round_up(T * (size_t)p->HV * sizeof(float));
  m.lg = m.ckpt + round_up(T * sizeof(int32_t)); /* g_eff, for the chunked kernels */
  m.ea = m.lg + round_up(T * (size_t)p->HV * (size_t)gate_width(p) * sizeof(float));
  m.total = m.ea + round_up((size_t)p->HV * sizeof(double)); /* e^A_log, once a head */
  return m;
}

size_t kda_cuda_scratch_bytes(const kda_problem *p, int chunked) {
  return p->T > 0 ? scratch_layout(p, chunked).total : 0;
}

/* ==== Coefficients (SPEC.md §4), evaluated in float64 and rounded to float once ====
 *
 * The formulas are those of SPEC.md §9.2 (no threshold in softplus, the sigmoid that never
 * overflows), but in double: each coefficient is then within about half an ulp of float of
 * its exact value.  With CUDA's float expf (up to 2 ulp, not correctly rounded) the betas and
 * decays of a long run carried a small bias that golden/L1's drift-lowrank (a direction that
 * is never decayed nor erased, 65536 steps) turned into 72 units against a cap of 64; with
 * float64 coefficients it stays near ref-f32's figures.  This is O(K) work a token and head
 * against O(K V) for the recurrence, and the fp32 class's claim (SPEC.md §7.2) is about the
 * float32 state and recurrence, which this does not change. */

/* softplus and sigmoid: kda_cuda_math.h (the forms of SPEC.md §9.2 with float64 e^z and log1p
 * built for the ranges they get: 96 instructions a gate element, where CUDA's exp and log1p,
 * with their argument checks and special cases, take about 290). */
__device__ static double dev_softplus(double y) { return kcm_softplus(y); }
__device__ static double dev_sigmoid(double y) { return kcm_sigmoid(y); }

__device__ static double dev_ea(const float *A_log, int64_t hv, int32_t has_A_log) {
  return has_A_log ? exp((double)A_log[hv]) : 1.0;
}

/* ea[hv] = e^A_log[hv] (dev_ea), once a head rather than once an element. */
__global__ void kda_cuda_coef_ea(const float *A_log, double *ea, int64_t HV, int32_t has_A_log) {
  const int64_t hv = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (hv < HV) ea[hv] = dev_ea(A_log, hv, has_A_log);
}

/* beta_eff (SPEC.md §4.2). */
__device__ static float dev_beta(double x, int32_t mode) {
  return (float)(mode == KDA_BETA_PROB ? x : mode == KDA_BETA_LOGIT ? dev_sigmoid(x)
                                                                    : 2.0 * dev_sigmoid(x));
}

/* 1 / the L2 norm of row x of K floats (SPEC.md §4.3), by one warp: per-lane float64 sums over
 * i = lane, lane + 32, ... and an xor-butterfly, so every lane gets the same bits. */
__device__ static double dev_inv_norm(const float *x, int64_t K, int32_t l2_mode, double eps) {
  if (l2_mode == KDA_L2_OFF) return 1.0;
  const int lane = threadIdx.x % 32;
  double ss = 0.0;
  for (int64_t i = lane; i < K; i += 32) ss += (double)x[i] * (double)x[i];
  for (int m = 16; m >= 1; m >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, m);
  return 1.0 / (l2_mode == KDA_L2_FLA ? sqrt(ss + eps) : fmax(sqrt(ss), eps));
}

/* The coefficient kernels' arguments: qh, kh over rows (t, h); a or lg over the n gate
 * elements (t, hv, c < GW); b over the nb betas (t, hv). */
typedef struct coef_args {
  const float *q, *k;
  float *qh, *kh;
  int64_t rows, K;
  int32_t l2_mode, gate_mode, beta_mode, reserved;
  double scale, eps, lb;
  const float *g, *dt_bias, *beta;
  const double *ea;
  float *a, *lg, *b; /* a: the recurrent kernels' e^g_eff; lg: the chunked kernels' g_eff */
  int64_t n, HV, GW, nb;
  const float *A_log; /* kda_cuda_coef_one: e^A_log evaluated by the gate threads (ea unread) */
  int32_t has_A_log;
} coef_args;

/* qh = scale * L2(q), kh = L2(k): one warp per (t, h) (rows of block blk); the sum of squares
 * is a per-lane sum over i = lane, lane + 32, ... and an xor-butterfly (every lane gets the
 * same bits). */
__device__ void coef_qk(const coef_args &C, int64_t blk) {
  const int64_t row = (blk * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= C.rows) return; /* whole warps leave together: blocks hold whole warps */
  for (int which = 0; which < 2; which++) {
    const float *x = (which ? C.k : C.q) + row * C.K;
    float *y = (which ? C.kh : C.qh) + row * C.K;
    /* x * (1/d) in double is within 2^-52 of x / d, far below float's rounding, and spares
     * a float64 division an element (the prologue's largest cost at prefill sizes). */
    const double inv = dev_inv_norm(x, C.K, C.l2_mode, C.eps);
    for (int64_t i = lane; i < C.K; i += 32) {
      const double xi = (double)x[i] * inv;
      y[i] = (float)(which ? xi : C.scale * xi);
    }
  }
}

/* coef_qk for K <= 128 (kda_cuda_coef_one): the q and k rows' loads issued together, four floats a
 * lane each, before either sum (coef_qk waits for q's row, then for k's).  The same operations
 * in the same order as coef_qk and dev_inv_norm (a lane's sum over i = lane + 32 u in u order,
 * the butterfly, x * (1 / norm)), so the same bits: the lanes past K add 0 * 0 = +0 to a sum of
 * squares that starts at +0, which leaves it as it is. */
__device__ void coef_qk_row(const coef_args &C, int64_t blk) {
  const int64_t row = (blk * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= C.rows) return; /* whole warps leave together: blocks hold whole warps */
  float x[2][4];
#pragma unroll
  for (int w = 0; w < 2; w++)
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int64_t i = lane + 32 * u;
      x[w][u] = i < C.K ? (w ? C.k : C.q)[row * C.K + i] : 0.0f;
    }
  double inv[2] = {1.0, 1.0};
  if (C.l2_mode != KDA_L2_OFF) {
    double ss[2] = {0.0, 0.0};
#pragma unroll
    for (int w = 0; w < 2; w++)
#pragma unroll
      for (int u = 0; u < 4; u++) ss[w] += (double)x[w][u] * (double)x[w][u];
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1)
#pragma unroll
      for (int w = 0; w < 2; w++) ss[w] += __shfl_xor_sync(0xffffffffu, ss[w], m);
#pragma unroll
    for (int w = 0; w < 2; w++)
      inv[w] = 1.0 / (C.l2_mode == KDA_L2_FLA ? sqrt(ss[w] + C.eps) : fmax(sqrt(ss[w]), C.eps));
  }
#pragma unroll
  for (int w = 0; w < 2; w++)
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int64_t i = lane + 32 * u;
      const double xi = (double)x[w][u] * inv[w];
      if (i < C.K) (w ? C.kh : C.qh)[row * C.K + i] = (float)(w ? xi : C.scale * xi);
    }
}

/* e^g_eff for the recurrent kernels: g_eff <= 0 in every mode but log with positive gates. */
__device__ static float dev_decay(double ge) {
  return (float)(ge <= 0.0 ? kcm_exp_neg(ge) : exp(ge));
}

/* a = exp(g_eff) per (t, hv, c), c < GW (SPEC.md §4.1; exp(-inf) = +0) for the recurrent
 * kernels, or g_eff itself, rounded once, for the chunked kernels' cumulative decays.  Thread
 * j of the x grid owns gate element j of every token's row of W = HV GW elements (so its
 * value head, dt_bias and e^A_log are read once, and neighbouring threads touch neighbouring
 * elements) and takes tokens blockIdx.y, + gridDim.y, ... (the launch: launch_prologue). */
/* GATE_UNROLL tokens a thread at once: their loads are all issued before the float64 work,
 * so a warp has eight loads in flight instead of one (one at a time moves B1 T32768 H32's
 * 134 M gate elements at about 1.3 TB/s: too few bytes in flight to cover the memory's
 * latency).  Every element's arithmetic is the same, and so are the bits. */
#define GATE_UNROLL 8
__device__ __forceinline__ void gate_put(const coef_args &C, int64_t e, double x, int lm, double ea,
                                         double db) {
  const double ge = lm ? x
                    : C.gate_mode == KDA_GATE_SOFTPLUS ? -(ea * dev_softplus(x + db))
                                                       : C.lb * dev_sigmoid(ea * (x + db));
  if (C.a) C.a[e] = dev_decay(ge);
  if (C.lg) C.lg[e] = (float)ge;
}
/* Block (bx, by) of a grid of gy rows; OWN_EA: e^A_log evaluated here (dev_ea, the ea
 * kernel's function: the same bits) rather than read from C.ea. */
template <bool OWN_EA> __device__ void coef_gate(const coef_args &C, int64_t bx, int64_t by, int64_t gy) {
  const int64_t W = C.HV * C.GW, j = bx * blockDim.x + threadIdx.x;
  if (j >= W) return;
  const int64_t hv = j / C.GW, T = C.n / W, stride = gy * W;
  const int lm = C.gate_mode == KDA_GATE_LOG;
  const double ea = lm ? 1.0 : OWN_EA ? dev_ea(C.A_log, hv, C.has_A_log) : C.ea[hv];
  const double db = lm ? 0.0 : (double)C.dt_bias[j];
  int64_t t = by, e = t * W + j;
  for (; t + (GATE_UNROLL - 1) * gy < T; t += GATE_UNROLL * gy, e += GATE_UNROLL * stride) {
    float x[GATE_UNROLL];
#pragma unroll
    for (int u = 0; u < GATE_UNROLL; u++) x[u] = C.g[e + u * stride];
#pragma unroll
    for (int u = 0; u < GATE_UNROLL; u++) gate_put(C, e + u * stride, (double)x[u], lm, ea, db);
  }
  for (; t < T; t += gy, e += stride) gate_put(C, e, (double)C.g[e], lm, ea, db);
}

/* beta_eff per (t, hv) (SPEC.md §4.2). */
__device__ void coef_beta(const coef_args &C, int64_t blk) {
  const int64_t e = blk * blockDim.x + threadIdx.x;
  if (e < C.nb) C.b[e] = dev_beta(C.beta[e], C.beta_mode);
}

/* Three kernels for prefill (plus kda_cuda_coef_ea): at prefill sizes each is long enough to
 * fill the card alone; one launch for all three, the memory-bound qk blocks interleaved with
 * the float64-bound gate blocks, measured slower (the prologue +9 % at B1 T32768 H32). */
__global__ void kda_cuda_coef_qk(const coef_args C) { coef_qk(C, blockIdx.x); }
__global__ void kda_cuda_coef_gate(const coef_args C) { coef_gate<false>(C, blockIdx.x, blockIdx.y, gridDim.y); }
__global__ void kda_cuda_coef_beta(const coef_args C) { coef_beta(C, blockIdx.x); }

/* For decode (a token a sequence) the whole prologue in one launch: the four kernels' blocks
 * in one grid (ng gate blocks, gx across, nq qk blocks, then the betas'), e^A_log evaluated
 * by each gate thread instead of by a kernel of its own (the same function on the same value,
 * so the same bits).  At decode sizes each of four separate kernels is short and waits for
 * the one before.  The ng gate blocks (float64-bound) are spread evenly among the nq qk blocks
 * (memory-bound): block b is gate block gi = floor(b ng / (ng + nq)) when
 * floor((b + 1) ng / (ng + nq)) > gi, else qk block b - gi.  PRO_ONE_MIN: the blocks a
 * multiprocessor the registers must allow (8: 64 registers a thread, enough for the gate
 * threads' GATE_UNROLL loads without spilling).
 * The row decode kernel is launched as a programmatic dependent of this one
 * (launch_decode_rows), which lets it start once every block of this grid has begun: its
 * blocks issue their state loads, then wait (pdl_wait) for this grid's completion and its
 * writes before they read qh, kh, a and b. */
#define PRO_ONE_MIN 8
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__global__ void __launch_bounds__(THREADS, PRO_ONE_MIN) kda_cuda_coef_one(const coef_args C, int64_t ng, int64_t gx, int64_t gy, int64_t nq) {
  pdl_trigger();
  const int64_t b = blockIdx.x, nm = ng + nq;
  if (b >= nm) {
    coef_beta(C, b - nm);
    return;
  }
  const int64_t gi = b * ng / nm; /* gate blocks before block b */
  const bool gate = (b + 1) * ng / nm > gi;
  if (gate) coef_gate<true>(C, gi % gx, gi / gx, gy);
  else if (C.K <= 128) coef_qk_row(C, b - gi);
  else coef_qk(C, b - gi);
}

/* ckpt[t] = c when checkpoints[c] = t, else -1 (checkpoints were validated on the host). */
__global__ void kda_cuda_ckpt_fill(int32_t *ckpt, int64_t T) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < T) ckpt[e] = -1;
}
__global__ void kda_cuda_ckpt_scatter(int32_t *ckpt, const int64_t *checkpoints, int64_t C) {
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C) ckpt[checkpoints[c]] = (int32_t)c;
}

/* ==== 16-bit inputs ==== */

/* The exact float of a bfloat16 / binary16 pattern (integer arithmetic on the bits, as
 * kda_backend_half.h: no dependence on FTZ or the half-precision intrinsics). */
__device__ __forceinline__ float bf16_bits(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
__device__ __forceinline__ float f16_bits(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return __uint_as_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    const float f = (float)m * 0x1p-24f; /* a subnormal: m 2^-24, exact */
    return sign ? -f : f;
  }
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
struct widen_args {
  const uint16_t *src[5];
  float *dst[5];
  int64_t n[5];
  int32_t bf16;
};
/* blockIdx.y: which of q, k, v, g, beta; a grid-stride loop over its elements.  The argument
 * block is read in place (__grid_constant__): indexed by blockIdx.y, it would otherwise be
 * copied to local memory by every thread first (a 128-byte stack frame). */
__global__ void kda_cuda_widen(const __grid_constant__ widen_args W) {
  const int a = blockIdx.y;
  const uint16_t *s = W.src[a];
  float *d = W.dst[a];
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < W.n[a];
       i += (int64_t)gridDim.x * blockDim.x)
    d[i] = W.bf16 ? bf16_bits(s[i]) : f16_bits(s[i]);
}

/* ==== The recurrent kernel ==== */

typedef struct recur_args {
  int64_t H, HV, K, V, G;
  int32_t decays, erases, gate_scalar, head_mod, vk, has_h0, want_ht, has_ckpt, vec;
  int32_t coltiles, TB;
  int64_t items; /* N * HV * coltiles work items */
  const float *qh, *kh, *a, *b, *v, *h0;
  const int32_t *ckpt;
  const int64_t *cu;
  const int64_t *slots; /* a state pool's slot of each sequence (kda_cuda_dev.slots), or NULL */
  float *o, *ht, *hc;
} recur_args;

/* Floats of one staging buffer of TB tokens, rounded up to 16 bytes so that the second
 * buffer is aligned for the 16-byte copies and loads too. */
__host__ __device__ constexpr int stage_size(int TB, int ROW, int VT) {
  return (TB * (3 * ROW + VT + 2) + 3) / 4 * 4;
}

/* Row stride of a staged key vector slice: padded by 4 floats so that the float4 loads of
 * the KS slices of a warp fall in distinct banks. */
template <int R> struct pad { static constexpr int RP = R >= 4 ? R + 4 : R; };

/* Asynchronous copies global -> shared (cp.async): a chunk's inputs are in flight while the
 * previous chunk is computed. */
__device__ __forceinline__ void async4(void *dst, const void *src) {
  __pipeline_memcpy_async(dst, src, 4);
}
__device__ __forceinline__ void async16(void *dst, const void *src) {
  __pipeline_memcpy_async(dst, src, 16);
}

/* x[0..R) from shared memory into registers, 16 bytes at a time when R allows. */
template <int R> __device__ __forceinline__ void load_row(float *dst, const float *src) {
  if constexpr (R % 4 == 0) {
#pragma unroll
    for (int r = 0; r < R; r += 4) {
      const float4 f = *reinterpret_cast<const float4 *>(src + r);
      dst[r] = f.x, dst[r + 1] = f.y, dst[r + 2] = f.z, dst[r + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; r++) dst[r] = src[r];
  }
}

/* Sum over the KS lanes of one column; every one of them gets the same bits (addition is
 * commutative, and lanes x and x^m add the same two numbers). */
template <int KS> __device__ __forceinline__ float column_sum(float x) {
#pragma unroll
  for (int m = 1; m < KS; m <<= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}
template <int KS> __device__ __forceinline__ void column_sum2(float &x, float &y) {
#pragma unroll
  for (int m = 1; m < KS; m <<= 1) {
    const float xs = __shfl_xor_sync(0xffffffffu, x, m), ys = __shfl_xor_sync(0xffffffffu, y, m);
    x += xs, y += ys;
  }
}

/* sum_r S[r] * x[r], two interleaved accumulators. */
template <int R> __device__ __forceinline__ float dot_rows(const float *S, const float *x) {
  float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
  for (int r = 0; r < R; r += 2) {
    a0 = fmaf(S[r], x[r], a0);
    if (r + 1 < R) a1 = fmaf(S[r + 1], x[r + 1], a1);
  }
  return a0 + a1;
}

/* Decay and erase of one token (SPEC.md §3.1 steps 1-2): S <- a * S, then the per-thread
 * part of p = sum_i S[i][j] k_i on the decayed state. */
template <int R>
__device__ __forceinline__ float decay_erase(const recur_args &A, float *S, const float *sa,
                                             const float *sk) {
  float x[R];
  if (A.decays) {
    load_row<R>(x, sa);
#pragma unroll
    for (int r = 0; r < R; r++) S[r] = x[r] * S[r];
  }
  load_row<R>(x, sk);
  return dot_rows<R>(S, x);
}

/* The tile of one stored state (K rows, VT columns from col0) as tile[i][c], (VT+1) floats a
 * row, copied in the storage order of its layout (SPEC.md §2.4) so that global accesses run
 * along contiguous memory.  Entries outside K x V are left as they are (zero). */
template <int KS, int R>
__device__ void tile_issue(const recur_args &A, const float *src, float *tile, int64_t col0) {
  constexpr int VT = THREADS / KS, KP = KS * R;
  for (int e = threadIdx.x; e < KP * VT; e += THREADS) {
    const int i = A.vk ? e % KP : e / VT, c = A.vk ? e / KP : e % VT;
    const int64_t j = col0 + c;
    if (i < A.K && j < A.V) async4(tile + i * (VT + 1) + c, src + (A.vk ? j * A.K + i : i * A.V + j));
  }
}
template <int KS, int R>
__device__ void tile_store(const recur_args &A, float *dst, const float *tile, int64_t col0) {
  constexpr int VT = THREADS / KS, KP = KS * R;
  for (int e = threadIdx.x; e < KP * VT; e += THREADS) {
    const int i = A.vk ? e % KP : e / VT, c = A.vk ? e / KP : e % VT;
    const int64_t j = col0 + c;
    if (i < A.K && j < A.V) dst[A.vk ? j * A.K + i : i * A.V + j] = tile[i * (VT + 1) + c];
  }
}

/* Writes the registers' state into dst (one stored state of the problem's layout).  Called by
 * every thread of the block (it synchronises). */
template <int KS, int R>
__device__ void state_store(const recur_args &A, const float *S, float *tile, float *dst,
                            int64_t col0) {
  constexpr int VT = THREADS / KS;
  const int s = threadIdx.x % KS, c = threadIdx.x / KS;
  __syncthreads();
#pragma unroll
  for (int r = 0; r < R; r++) tile[(s * R + r) * (VT + 1) + c] = S[r];
  __syncthreads();
  tile_store<KS, R>(A, dst, tile, col0);
}

/* One staging buffer: TB tokens of kh, qh, a (ROW floats each: KS slices of RP), v (VT), beta,
 * checkpoint index. */
struct stage {
  float *k, *q, *a, *v, *b;
  int *c;
};
template <int KS, int R> __device__ stage stage_at(float *base, int TB) {
  constexpr int VT = THREADS / KS, ROW = KS * pad<R>::RP;
  stage g;
  g.k = base, g.q = base + TB * ROW, g.a = base + 2 * TB * ROW, g.v = base + 3 * TB * ROW;
  g.b = g.v + TB * VT, g.c = reinterpret_cast<int *>(g.b + TB);
  return g;
}

/* Issues the copies of tokens t0 .. t0+nt-1 into g.  Key rows beyond K and columns beyond V
 * are never written: they stay zero, so padded rows of the state stay exactly zero. */
template <int KS, int R>
__device__ void stage_issue(const recur_args &A, const stage &g, int64_t t0, int nt, int64_t h,
                            int64_t hv, int64_t col0) {
  constexpr int VT = THREADS / KS, KP = KS * R, RP = pad<R>::RP, ROW = KS * RP;
  if (A.vec) { /* K % 4 == 0 and R % 4 == 0: 16-byte copies, 4 rows never straddle a slice */
    for (int e = threadIdx.x; e < nt * (KP / 4); e += THREADS) {
      const int tt = e / (KP / 4), i = (e % (KP / 4)) * 4, at = tt * ROW + (i / R) * RP + i % R;
      if (i >= A.K) continue;
      const int64_t t = t0 + tt;
      async16(g.k + at, A.kh + (t * A.H + h) * A.K + i);
      async16(g.q + at, A.qh + (t * A.H + h) * A.K + i);
      if (A.decays && !A.gate_scalar) async16(g.a + at, A.a + (t * A.HV + hv) * A.K + i);
    }
  }
  const bool scalar_pass = !A.vec || (A.decays && A.gate_scalar);
  for (int e = threadIdx.x; scalar_pass && e < nt * KP; e += THREADS) {
    const int tt = e / KP, i = e % KP, at = tt * ROW + (i / R) * RP + i % R;
    if (i >= A.K) continue;
    const int64_t t = t0 + tt;
    if (!A.vec) {
      async4(g.k + at, A.kh + (t * A.H + h) * A.K + i);
      async4(g.q + at, A.qh + (t * A.H + h) * A.K + i);
    }
    if (A.decays && A.gate_scalar) async4(g.a + at, A.a + t * A.HV + hv);
    else if (A.decays && !A.vec) async4(g.a + at, A.a + (t * A.HV + hv) * A.K + i);
  }
  for (int e = threadIdx.x; e < nt * VT; e += THREADS) {
    const int tt = e / VT, c = e % VT;
    const int64_t j = col0 + c;
    if (j < A.V) async4(g.v + e, A.v + ((t0 + tt) * A.HV + hv) * A.V + j);
  }
  for (int e = threadIdx.x; e < nt; e += THREADS) {
    async4(g.b + e, A.b + (t0 + e) * A.HV + hv);
    if (A.has_ckpt) async4(g.c + e, A.ckpt + t0 + e);
    else g.c[e] = -1;
  }
}

/* What one work item is: sequence n, value head hv (q/k head h), value columns col0 ..
 * col0+VT-1, tokens bos .. eos-1. */
struct item_at {
  int64_t n, hv, h, col0, bos, eos, state_off;
  bool pad; /* a pool's padding entry: starts from zero, its final state is dropped */
};
template <int KS>
__device__ __forceinline__ item_at item_of(const recur_args &A, int64_t item) {
  constexpr int VT = THREADS / KS;
  item_at it;
  /* 32-bit divisions: items < 2^31 (kda_cuda_why_not), coltiles and HV <= 2^31. */
  const uint32_t u = (uint32_t)item, tiles = (uint32_t)A.coltiles, rest = u / tiles;
  it.hv = rest % (uint32_t)A.HV;
  it.n = rest / (uint32_t)A.HV;
  it.h = A.head_mod ? it.hv % A.H : it.hv / A.G; /* SPEC.md §4.4 */
  it.col0 = (int64_t)(u % tiles) * VT;
  it.bos = A.cu[it.n], it.eos = A.cu[it.n + 1];
  const int64_t slot = A.slots ? A.slots[it.n] : it.n; /* validated on the host */
  it.pad = slot < 0;
  it.state_off = ((it.pad ? 0 : slot) * A.HV + it.hv) * A.K * A.V;
  return it;
}

/* Issues the copies an item starts with: its initial state tile and its first chunk. */
template <int KS, int R>
__device__ void item_issue(const recur_args &A, const item_at &it, const stage &g, float *tile) {
  if (A.has_h0 && !it.pad) tile_issue<KS, R>(A, A.h0 + it.state_off, tile, it.col0);
  if (it.bos < it.eos)
    stage_issue<KS, R>(A, g, it.bos, (int)(it.eos - it.bos < A.TB ? it.eos - it.bos : A.TB),
                       it.h, it.hv, it.col0);
}

/* A persistent block takes items blockIdx.x, + gridDim.x, ...  Within an item, chunk c + 1's
 * copies are in flight while chunk c is computed; during an item's last chunk, the next
 * item's initial state and first chunk are (so decode, one token an item, streams states).
 * Per token, after the chunk's first: write, then the readout of this token and the decay +
 * erase of the next one in one pass over the registers (o_t and p_{t+1} are both sums over i
 * of the same state), their two lane sums interleaved.  Which block computes an item, and
 * when, does not change a bit of its result. */
template <int KS, int R> __global__ void __launch_bounds__(THREADS) kda_cuda_recur(const recur_args A) {
  constexpr int VT = THREADS / KS, KP = KS * R, RP = pad<R>::RP, ROW = KS * RP;
  extern __shared__ __align__(16) float smem[];
  const int TB = A.TB;
  const int stage_floats = stage_size(TB, ROW, VT), tile_floats = KP * (VT + 1);
  const int total = 2 * stage_floats + TB * VT + 2 * tile_floats;
  float *so = smem + 2 * stage_floats, *tiles = so + TB * VT;
  const int s = threadIdx.x % KS, c = threadIdx.x / KS;

  for (int e = threadIdx.x; e < total; e += THREADS) smem[e] = 0.0f;
  __syncthreads(); /* the zeros land before any copy */
  int64_t item = blockIdx.x;
  if (item >= A.items) return; /* the whole block */
  int cur = 0, tb = 0;
  item_issue<KS, R>(A, item_of<KS>(A, item), stage_at<KS, R>(smem, TB), tiles);
  __pipeline_commit();

  for (; item < A.items; item += gridDim.x, tb ^= 1) {
    const item_at it = item_of<KS>(A, item);
    const int64_t next = item + gridDim.x;
    float *tile = tiles + tb * tile_floats;
    __pipeline_wait_prior(0);
    __syncthreads();
    float S[R];
#pragma unroll
    for (int r = 0; r < R; r++) S[r] = A.has_h0 && !it.pad ? tile[(s * R + r) * (VT + 1) + c] : 0.0f;
    bool issued = false;
    for (int64_t t0 = it.bos; t0 < it.eos; t0 += TB, cur ^= 1) {
      const int nt = (int)(it.eos - t0 < TB ? it.eos - t0 : TB);
      const int64_t t1 = t0 + TB;
      const stage gn = stage_at<KS, R>(smem + (cur ^ 1) * stage_floats, TB);
      if (t1 < it.eos) {
        stage_issue<KS, R>(A, gn, t1, (int)(it.eos - t1 < TB ? it.eos - t1 : TB), it.h, it.hv,
                           it.col0);
      } else if (next < A.items) {
        item_issue<KS, R>(A, item_of<KS>(A, next), gn, tiles + (tb ^ 1) * tile_floats);
        issued = true;
      }
      __pipeline_commit();
      __pipeline_wait_prior(1); /* this chunk's copies (the previous group) are done */
      __syncthreads();
      const stage g = stage_at<KS, R>(smem + cur * stage_floats, TB);
      float p = decay_erase<R>(A, S, g.a + s * RP, g.k + s * RP);
      p = A.erases ? column_sum<KS>(p) : 0.0f;
      for (int tt = 0; tt < nt; tt++) {
        float x[R], q[R], y[R], a[R];
        const float w = g.b[tt] * (g.v[tt * VT + c] - p); /* 3. write: S += k (b (v - p)) */
        load_row<R>(x, g.k + tt * ROW + s * RP);
        const bool more = tt + 1 < nt;
        load_row<R>(q, g.q + tt * ROW + s * RP);
        if (more) {
          load_row<R>(y, g.k + (tt + 1) * ROW + s * RP);
          if (A.decays) load_row<R>(a, g.a + (tt + 1) * ROW + s * RP);
        }
#pragma unroll
        for (int r = 0; r < R; r++) S[r] = fmaf(x[r], w, S[r]);
        const int cp = g.c[tt];
        if (cp >= 0) /* uniform over the block: g.c is shared */
          state_store<KS, R>(A, S, tile, A.hc + ((int64_t)cp * A.HV + it.hv) * A.K * A.V, it.col0);
        float o; /* 4. readout after the write */
        if (more) { /* fused with steps 1-2 of token tt + 1 */
          float o0 = 0.0f, o1 = 0.0f, p0 = 0.0f, p1 = 0.0f;
          if (A.decays) {
#pragma unroll
            for (int r = 0; r < R; r++) {
              if (r % 2 == 0) o0 = fmaf(S[r], q[r], o0); else o1 = fmaf(S[r], q[r], o1);
              S[r] = a[r] * S[r];
              if (r % 2 == 0) p0 = fmaf(S[r], y[r], p0); else p1 = fmaf(S[r], y[r], p1);
            }
          } else {
#pragma unroll
            for (int r = 0; r < R; r++) {
              if (r % 2 == 0) o0 = fmaf(S[r], q[r], o0), p0 = fmaf(S[r], y[r], p0);
              else o1 = fmaf(S[r], q[r], o1), p1 = fmaf(S[r], y[r], p1);
            }
          }
          o = o0 + o1, p = p0 + p1;
          column_sum2<KS>(o, p);
          if (!A.erases) p = 0.0f;
        } else {
          o = column_sum<KS>(dot_rows<R>(S, q));
        }
        if (s == 0) so[tt * VT + c] = o;
      }
      __syncthreads();
      for (int e = threadIdx.x; e < nt * VT; e += THREADS) {
        const int tt = e / VT, cc = e % VT;
        if (it.col0 + cc < A.V) A.o[((t0 + tt) * A.HV + it.hv) * A.V + it.col0 + cc] = so[e];
      }
    }
    if (A.want_ht && !it.pad) state_store<KS, R>(A, S, tile, A.ht + it.state_off, it.col0);
    if (!issued && next < A.items) { /* an empty sequence: nothing was overlapped */
      __syncthreads();
      item_issue<KS, R>(A, item_of<KS>(A, next), stage_at<KS, R>(smem + cur * stage_floats, TB),
                        tiles + (tb ^ 1) * tile_floats);
      __pipeline_commit();
    }
  }
}

/* ==== The decode kernel ====
 *
 * When no sequence has more than one token (decode, the serving case: T = 1 a sequence), the
 * work is moving states: K*V floats in and out a token and head.  Then a thread group of KS =
 * 4 lanes per value column holds R = 32 key rows each in registers straight from global
 * memory, with all of its loads in flight at once and no shared memory, so that many blocks
 * fit on a multiprocessor; 8 columns a warp make 32-byte runs in the kv layout and 512-byte
 * runs in the vk layout.  The arithmetic is the recurrent kernel's (same step, same roundings
 * per thread, the same lane sums), in the plain order decay, erase, write, readout. */
template <int R> __global__ void __launch_bounds__(THREADS) kda_cuda_decode(const recur_args A) {
  constexpr int KS = 4;
  const int s = threadIdx.x % KS, c = threadIdx.x / KS;
  /* This thread's rows i0 .. i0+nr-1 of its column; element (i0 + r, j) of a stored state
   * is at (i0, j)'s offset plus r * rs (SPEC.md §2.4). */
  const int64_t i0 = (int64_t)s * R, left = A.K - i0;
  const int nr = left >= R ? R : left > 0 ? (int)left : 0;
  const int64_t rs = A.vk ? 1 : A.V;
  for (int64_t item = blockIdx.x; item < A.items; item += gridDim.x) {
    const item_at it = item_of<KS>(A, item);
    const int64_t j = it.col0 + c;
    const bool col = j < A.V;
    const int64_t off = it.state_off + (A.vk ? j * A.K + i0 : i0 * A.V + j);
    float S[R];
#pragma unroll
    for (int r = 0; r < R; r++) S[r] = (A.has_h0 && !it.pad && col && r < nr) ? A.h0[off + r * rs] : 0.0f;
    if (it.eos > it.bos) { /* one token t (uniform over the block) */
      const int64_t t = it.bos;
      const float *kt = A.kh + (t * A.H + it.h) * A.K + i0, *qt = A.qh + (t * A.H + it.h) * A.K + i0;
      const float *at = A.a + (A.gate_scalar ? t * A.HV + it.hv : (t * A.HV + it.hv) * A.K + i0);
      float p0 = 0.0f, p1 = 0.0f;
#pragma unroll
      for (int r = 0; r < R; r++) {
        if (r < nr) {
          if (A.decays) S[r] = (A.gate_scalar ? at[0] : at[r]) * S[r]; /* 1. decay */
          if (r % 2 == 0) p0 = fmaf(S[r], kt[r], p0); else p1 = fmaf(S[r], kt[r], p1);
        }
      }
      const float p = A.erases ? column_sum<KS>(p0 + p1) : 0.0f; /* 2. erase */
      const float vj = col ? A.v[(t * A.HV + it.hv) * A.V + j] : 0.0f;
      const float w = A.b[t * A.HV + it.hv] * (vj - p);
      float o0 = 0.0f, o1 = 0.0f;
#pragma unroll
      for (int r = 0; r < R; r++) {
        if (r < nr) {
          S[r] = fmaf(kt[r], w, S[r]); /* 3. write */
          if (r % 2 == 0) o0 = fmaf(S[r], qt[r], o0); else o1 = fmaf(S[r], qt[r], o1);
        }
      }
      const float o = column_sum<KS>(o0 + o1); /* 4. readout */
      if (s == 0 && col) A.o[(t * A.HV + it.hv) * A.V + j] = o;
      const int cp = A.has_ckpt ? A.ckpt[t] : -1;
      if (cp >= 0 && col) {
        float *dst = A.hc + ((int64_t)cp * A.HV + it.hv) * A.K * A.V + (off - it.state_off);
#pragma unroll
        for (int r = 0; r < R; r++)
          if (r < nr) dst[r * rs] = S[r];
      }
    }
    if (A.want_ht && col && !it.pad) { /* in place on a pool: this thread read these */
#pragma unroll
      for (int r = 0; r < R; r++)
        if (r < nr) A.ht[off + r * rs] = S[r];
    }
  }
}

template <int R>
static cudaError_t launch_decode(const recur_args &A, int64_t max_grid, cudaStream_t st) {
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (!e) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (!e) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kda_cuda_decode<R>, THREADS, 0);
  if (e) return e;
  const int64_t resident = (int64_t)(per_sm > 0 ? per_sm : 1) * (sms > 0 ? sms : 1);
  int64_t grid = A.items < resident ? A.items : resident;
  if (max_grid > 0 && grid > max_grid) grid = max_grid;
  kda_cuda_decode<R><<<(unsigned)grid, THREADS, 0, st>>>(A);
  return cudaGetLastError();
}

static cudaError_t dispatch_decode(const recur_args &A, int R, int64_t max_grid, cudaStream_t st) {
  switch (R) {
  case 1: return launch_decode<1>(A, max_grid, st);
  case 2: return launch_decode<2>(A, max_grid, st);
  case 4: return launch_decode<4>(A, max_grid, st);
  case 8: return launch_decode<8>(A, max_grid, st);
  case 16: return launch_decode<16>(A, max_grid, st);
  default: return launch_decode<32>(A, max_grid, st);
  }
}

/* ==== The row decode kernel (kv layout) ====
 *
 * In the kv layout a state row (fixed key row i) is V contiguous floats.  One block of 128
 * threads takes (sequence, value head, 128 columns): lane g of warp s holds columns 4g .. 4g+3
 * of rows 32 s .. 32 s + 31 as float4s, so every load and store of a warp is one 512-byte run
 * and all 32 of a thread's loads are in flight at once.  k, q and the gates of the token are
 * staged in shared memory; the sums over i (p_j, then o_j) are a per-thread sum over its 32
 * rows and the four warps' partials added in a fixed order (no atomics). */
#define DROWS 32
/* Two instances: KV = 128 for the production shape K = V = 128 (launch_decode_rows picks it),
 * KV = 0 for the other shapes.  With one block a multiprocessor required, ptxas gives the
 * KV = 128 instance 187 registers, so two blocks fit a multiprocessor; forcing three (168
 * registers) is slower. */
template <int KV> __global__ void __launch_bounds__(THREADS, 1)
kda_cuda_decode_rows(const recur_args A, int64_t items, int64_t tiles_rt) {
  /* KV = 128: K = V = 128 known when compiled (the production shape), so a thread's 32 rows
   * are one base address plus immediate offsets and no row or column is out of range; KV = 0:
   * K, V at run time.  The same operations in the same order either way, so the same bits. */
  const int64_t V = KV ? KV : A.V, K = KV ? KV : A.K, tiles = KV ? 1 : tiles_rt;
  __shared__ __align__(16) float sk[128], sq[128], sa[128], part[4][128];
  const int g = threadIdx.x % 32, sw = threadIdx.x / 32;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t n = item / (A.HV * tiles), hv = item / tiles % A.HV, j = item % tiles * 128 + 4 * g;
    const int64_t slot = A.slots ? A.slots[n] : n;
    const bool pad = slot < 0, col = KV || j < V;
    const int64_t bos = A.cu[n], eos = A.cu[n + 1], h = A.head_mod ? hv % A.H : hv / A.G;
    const int64_t soff = ((pad ? 0 : slot) * A.HV + hv) * K * V;
    /* rows sw*32 + r of this thread's 4 columns: float4 r*V/4 from the first */
    const int64_t r0 = soff + sw * DROWS * V + j;
    const bool load = A.has_h0 && !pad && col;
    float4 S[DROWS];
#pragma unroll
    for (int r = 0; r < DROWS; r++) /* 1. the state, all loads issued before any use */
      S[r] = load && (KV || sw * DROWS + r < K)
                 ? reinterpret_cast<const float4 *>(A.h0 + r0)[r * (V / 4)]
                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (eos > bos) {
      const int64_t t = bos;
      pdl_wait(); /* the prologue's coefficients (launch_decode_rows) */
      __syncthreads(); /* the previous item's readers of sk, sq, sa and part are done */
      const int i = threadIdx.x;
      sk[i] = (KV || i < K) ? A.kh[(t * A.H + h) * K + i] : 0.0f;
      sq[i] = (KV || i < K) ? A.qh[(t * A.H + h) * K + i] : 0.0f;
      sa[i] = !A.decays || i >= K ? 1.0f
              : A.a[A.gate_scalar ? t * A.HV + hv : (t * A.HV + hv) * K + i];
      const float4 v = col ? *reinterpret_cast<const float4 *>(A.v + (t * A.HV + hv) * V + j)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const float beta = A.b[t * A.HV + hv];
      __syncthreads();
      float4 p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int r = 0; r < DROWS; r++) { /* 1. decay (a = 1 without), 2. p = S^T k */
        const float a = sa[sw * DROWS + r], k = sk[sw * DROWS + r];
        if (A.decays) S[r].x *= a, S[r].y *= a, S[r].z *= a, S[r].w *= a;
        p.x = fmaf(S[r].x, k, p.x), p.y = fmaf(S[r].y, k, p.y);
        p.z = fmaf(S[r].z, k, p.z), p.w = fmaf(S[r].w, k, p.w);
      }
      *reinterpret_cast<float4 *>(&part[sw][4 * g]) = p;
      __syncthreads();
      float pj[4];
#pragma unroll
      for (int c = 0; c < 4; c++)
        pj[c] = A.erases ? ((part[0][4 * g + c] + part[1][4 * g + c]) + part[2][4 * g + c]) + part[3][4 * g + c]
                         : 0.0f;
      const float w0 = beta * (v.x - pj[0]), w1 = beta * (v.y - pj[1]);
      const float w2 = beta * (v.z - pj[2]), w3 = beta * (v.w - pj[3]);
      float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int r = 0; r < DROWS; r++) { /* 3. write, 4. o = S^T q after the write */
        const float k = sk[sw * DROWS + r], q = sq[sw * DROWS + r];
        S[r].x = fmaf(k, w0, S[r].x), S[r].y = fmaf(k, w1, S[r].y);
        S[r].z = fmaf(k, w2, S[r].z), S[r].w = fmaf(k, w3, S[r].w);
        o.x = fmaf(S[r].x, q, o.x), o.y = fmaf(S[r].y, q, o.y);
        o.z = fmaf(S[r].z, q, o.z), o.w = fmaf(S[r].w, q, o.w);
      }
      __syncthreads(); /* every p read */
      *reinterpret_cast<float4 *>(&part[sw][4 * g]) = o;
      __syncthreads();
      if (sw == 0 && col) {
        float4 out;
        out.x = ((part[0][4 * g] + part[1][4 * g]) + part[2][4 * g]) + part[3][4 * g];
        out.y = ((part[0][4 * g + 1] + part[1][4 * g + 1]) + part[2][4 * g + 1]) + part[3][4 * g + 1];
        out.z = ((part[0][4 * g + 2] + part[1][4 * g + 2]) + part[2][4 * g + 2]) + part[3][4 * g + 2];
        out.w = ((part[0][4 * g + 3] + part[1][4 * g + 3]) + part[2][4 * g + 3]) + part[3][4 * g + 3];
        *reinterpret_cast<float4 *>(A.o + (t * A.HV + hv) * V + j) = out;
      }
      const int cp = A.has_ckpt ? A.ckpt[t] : -1;
      if (cp >= 0 && col) {
        float4 *dst = reinterpret_cast<float4 *>(A.hc + ((int64_t)cp * A.HV + hv) * K * V + sw * DROWS * V + j);
#pragma unroll
        for (int r = 0; r < DROWS; r++)
          if (KV || sw * DROWS + r < K) dst[r * (V / 4)] = S[r];
      }
    }
    if (A.want_ht && col && !pad) { /* in place on a pool: this thread read these */
#pragma unroll
      for (int r = 0; r < DROWS; r++)
        if (KV || sw * DROWS + r < K) reinterpret_cast<float4 *>(A.ht + r0)[r * (V / 4)] = S[r];
    }
  }
}

/* The row decode kernel's shapes: the kv layout, K <= 128, V a multiple of 4 (float4 rows). */
static int decode_rows_fits(const kda_problem *p) {
  return p->state_layout == KDA_STATE_KV && p->K <= 4 * DROWS && p->V % 4 == 0;
}

/* pdl: the kernel just before it on the stream is the prologue's kda_cuda_coef_one. */
static cudaError_t launch_decode_rows(const recur_args &A, int64_t N, int64_t max_grid, int pdl,
                                      cudaStream_t st) {
  /* One block an item (the scheduler overlaps one block's loads with another's work); tests
   * cap the grid so that blocks take many items in turn. */
  const int64_t tiles = (A.V + 127) / 128, items = N * A.HV * tiles;
  const int64_t grid = max_grid > 0 && items > max_grid ? max_grid : items;
  cudaLaunchAttribute at = {};
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)grid), cfg.blockDim = dim3(THREADS), cfg.stream = st;
  cfg.attrs = &at, cfg.numAttrs = pdl ? 1 : 0;
  return A.K == 128 && A.V == 128
             ? cudaLaunchKernelEx(&cfg, kda_cuda_decode_rows<128>, A, items, tiles)
             : cudaLaunchKernelEx(&cfg, kda_cuda_decode_rows<0>, A, items, tiles);
}

/* ==== Host side ==== */

static int fail(int st, char *err, size_t len, const char *msg, cudaError_t e) {
  if (len) snprintf(err, len, "cuda: %s: %s", msg, cudaGetErrorString(e));
  return st;
}

static int rows_for(int64_t K, int ks) {
  int R = 1;
  while ((int64_t)R * ks < K) R *= 2;
  return R;
}

int kda_cuda_why_not(const kda_problem *p, int32_t ksplit, char *why, size_t len) {
  const int ks = ksplit ? ksplit : 8;
  if (p->K > KDA_CUDA_MAX_K || rows_for(p->K, ks) > 32) {
    if (len)
      snprintf(why, len, "K = %lld: the cuda backend holds K <= %d (ksplit=%d: K <= %d)",
               (long long)p->K, KDA_CUDA_MAX_K, ks, ks * 32 < KDA_CUDA_MAX_K ? ks * 32 : KDA_CUDA_MAX_K);
    return KDA_EUNSUPPORTED;
  }
  const int64_t vt = THREADS / ks, blocks = p->N * p->HV * ((p->V + vt - 1) / vt);
  if (blocks > 0x7fffffffLL || p->T > 0x7fffffffLL) {
    if (len) snprintf(why, len, "N*HV*V = %lld blocks or T = %lld: too many for one launch",
                      (long long)blocks, (long long)p->T);
    return KDA_EUNSUPPORTED;
  }
  return KDA_OK;
}

static unsigned grid_of(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

/* Enqueues the prologue kernels of SPEC.md §4; one: in one launch (kda_cuda_coef_one, decode). */
static void launch_prologue(const kda_problem *p, const kda_cuda_dev *d, const scratch_map *m,
                            int chunked, int one, cudaStream_t st) {
  char *base = (char *)d->scratch;
  const int64_t GW = gate_width(p), T = p->T;
  coef_args C;
  memset(&C, 0, sizeof C);
  C.q = d->q, C.k = d->k, C.qh = (float *)(base + m->qh), C.kh = (float *)(base + m->kh);
  C.rows = T * p->H, C.K = p->K, C.l2_mode = p->l2_mode, C.scale = p->scale, C.eps = p->l2_eps;
  C.g = d->g, C.dt_bias = d->dt_bias, C.ea = (const double *)(base + m->ea);
  C.a = GW > 0 && !chunked ? (float *)(base + m->a) : NULL;
  C.lg = GW > 0 && chunked ? (float *)(base + m->lg) : NULL;
  C.n = GW > 0 ? T * p->HV * GW : 0, C.HV = p->HV, C.GW = GW;
  C.gate_mode = p->gate_mode, C.lb = p->lower_bound;
  C.beta = d->beta, C.b = (float *)(base + m->b), C.nb = T * p->HV, C.beta_mode = p->beta_mode;
  C.A_log = d->A_log, C.has_A_log = p->has_A_log;
  /* the gate grid: about 4096 blocks (two waves of 128-thread blocks on 132 multiprocessors
   * at full occupancy), each thread a few tokens */
  const int64_t W = p->HV * GW, gx = (W + THREADS - 1) / THREADS; /* 0: no gates (GW = 0) */
  int64_t gy = gx == 0 ? 0 : T < (4096 + gx - 1) / gx ? T : (4096 + gx - 1) / gx;
  gy = gy < 65535 ? gy : 65535;
  const int gate = C.n != 0, qk = !chunked;
  if (one) {
    const int64_t ng = gate ? gx * gy : 0, nq = qk ? grid_of(C.rows * 32, THREADS) : 0;
    kda_cuda_coef_one<<<(unsigned)(ng + nq + grid_of(C.nb, THREADS)), THREADS, 0, st>>>(C, ng, gx, gy, nq);
  } else {
    if (GW > 0 && p->gate_mode != KDA_GATE_LOG)
      kda_cuda_coef_ea<<<grid_of(p->HV, THREADS), THREADS, 0, st>>>(d->A_log, (double *)(base + m->ea),
                                                                    p->HV, p->has_A_log);
    if (qk) kda_cuda_coef_qk<<<grid_of(C.rows * 32, THREADS), THREADS, 0, st>>>(C);
    if (gate) kda_cuda_coef_gate<<<dim3((unsigned)gx, (unsigned)gy), THREADS, 0, st>>>(C);
    kda_cuda_coef_beta<<<grid_of(C.nb, THREADS), THREADS, 0, st>>>(C);
  }
  if (p->n_checkpoints > 0) {
    kda_cuda_ckpt_fill<<<grid_of(T, THREADS), THREADS, 0, st>>>((int32_t *)(base + m->ckpt), T);
    kda_cuda_ckpt_scatter<<<grid_of(p->n_checkpoints, THREADS), THREADS, 0, st>>>(
        (int32_t *)(base + m->ckpt), d->checkpoints, p->n_checkpoints);
  }
}

template <int KS, int R>
static cudaError_t launch_recur(const recur_args &A, int64_t blocks, int64_t max_grid,
                                cudaStream_t st) {
  constexpr int VT = THREADS / KS, KP = KS * R, ROW = KS * pad<R>::RP;
  const size_t floats = 2 * (size_t)stage_size(A.TB, ROW, VT) + (size_t)A.TB * VT +
                        2 * (size_t)KP * (VT + 1);
  const size_t bytes = floats * sizeof(float);
  cudaError_t e = cudaSuccess;
  if (bytes > 48 * 1024)
    e = cudaFuncSetAttribute(kda_cuda_recur<KS, R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)bytes);
  /* A persistent grid: as many blocks as are resident at once, each taking items in turn. */
  int dev = 0, sms = 0, per_sm = 0;
  if (!e) e = cudaGetDevice(&dev);
  if (!e) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (!e) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kda_cuda_recur<KS, R>, THREADS, bytes);
  if (e) return e;
  const int64_t resident = (int64_t)(per_sm > 0 ? per_sm : 1) * (sms > 0 ? sms : 1);
  int64_t grid = blocks < resident ? blocks : resident;
  if (max_grid > 0 && grid > max_grid) grid = max_grid;
  kda_cuda_recur<KS, R><<<(unsigned)grid, THREADS, bytes, st>>>(A);
  return cudaGetLastError();
}

template <int KS>
static cudaError_t dispatch_rows(const recur_args &A, int R, int64_t blocks, int64_t max_grid,
                                 cudaStream_t st) {
  switch (R) {
  case 1: return launch_recur<KS, 1>(A, blocks, max_grid, st);
  case 2: return launch_recur<KS, 2>(A, blocks, max_grid, st);
  case 4: return launch_recur<KS, 4>(A, blocks, max_grid, st);
  case 8: return launch_recur<KS, 8>(A, blocks, max_grid, st);
  case 16: return launch_recur<KS, 16>(A, blocks, max_grid, st);
  default: return launch_recur<KS, 32>(A, blocks, max_grid, st);
  }
}

/* ksplit=0: 4 threads a column (32 key rows each: fewer instructions a state element) when
 * there are enough blocks of 32 columns to keep every multiprocessor busy twice over and K
 * fits, else 8 (more warps for a few long sequences). */
static int auto_ksplit(const kda_problem *p) {
  int dev = 0, sms = 132;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    sms = 132;
  const int64_t items4 = p->N * p->HV * ((p->V + 31) / 32);
  return p->K <= 128 && items4 >= 2 * (int64_t)sms ? 4 : 8;
}

/* The chunked kernels (kda_cuda_chunk.cu) on the prologue's coefficients. */
static int launch_chunks(const kda_problem *p, const kda_cuda_dev *d, const scratch_map *m,
                         int32_t phases, cudaStream_t stream, char *err, size_t errlen) {
  const char *base = (const char *)d->scratch;
  kda_cuda_chunk_args C;
  memset(&C, 0, sizeof C);
  C.H = p->H, C.HV = p->HV, C.K = p->K, C.V = p->V, C.VP = (p->V + KDA_CUDA_CHUNK_VS - 1) / KDA_CUDA_CHUNK_VS * KDA_CUDA_CHUNK_VS;
  C.G = p->HV / p->H, C.N = p->N, C.n_chunks = d->n_chunks;
  C.slices = d->slices, C.n_slices = d->n_slices;
  C.scratch_chunks = d->slices ? d->scratch_chunks : d->n_chunks;
  C.decays = p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN;
  C.erases = p->family != KDA_FAMILY_LINEAR;
  C.gate_scalar = p->family == KDA_FAMILY_GDN;
  C.head_mod = p->head_map == KDA_HEADMAP_MOD;
  C.vk = p->state_layout == KDA_STATE_VK;
  C.has_h0 = p->has_initial_state != 0, C.want_ht = p->want_final_state != 0;
  C.phases = phases;
  C.qh = NULL, C.kh = NULL; /* prep normalizes the raw q and k (qk_raw) */
  C.lg = (const float *)(base + m->lg), C.b = (const float *)(base + m->b);
  C.v = d->v, C.h0 = d->h0, C.plan = d->plan, C.slots = d->slots;
  C.o = d->o, C.ht = d->ht, C.hc = d->hc;
  C.q = d->q, C.k = d->k, C.qk_raw = 1, C.l2_mode = p->l2_mode;
  C.scale = p->scale, C.l2_eps = p->l2_eps;
  kda_cuda_chunk_scratch(&C, d->chunk_scratch);
  const cudaError_t e = kda_cuda_chunk_run(&C, stream);
  return e != cudaSuccess ? fail(KDA_EIO, err, errlen, "chunked kernel launch", e) : KDA_OK;
}

int kda_cuda_launch(const kda_problem *p, const kda_cuda_dev *d, const kda_cuda_opts *o,
                    cudaStream_t stream, char *err, size_t errlen) {
  const int decode = !o->no_decode && o->max_len <= 1 && p->K <= 4 * 32;
  const int ks = decode ? 4 : o->ksplit ? o->ksplit : auto_ksplit(p);
  if (ks != 4 && ks != 8 && ks != 16) {
    if (errlen) snprintf(err, errlen, "cuda: ksplit=%d (4, 8 or 16)", ks);
    return KDA_EINVAL;
  }
  int st = kda_cuda_why_not(p, ks, err, errlen);
  if (st) return st;
  if (d->raw_dtype && p->T > 0 && (!o->phases || (o->phases & 8))) {
    /* 16-bit inputs: widened into the float arrays (the buffers' layout reserves them), the
     * first kernel of the call: everything after reads float32 */
    const int64_t GW = gate_width(p);
    widen_args W = {{d->raw_q, d->raw_k, d->raw_v, d->raw_g, d->raw_beta},
                    {(float *)d->q, (float *)d->k, (float *)d->v, (float *)d->g, (float *)d->beta},
                    {p->T * p->H * p->K, p->T * p->H * p->K, p->T * p->HV * p->V,
                     d->raw_g ? p->T * p->HV * GW : 0, p->T * p->HV},
                    d->raw_dtype == KDA_PRECISION_BF16};
    kda_cuda_widen<<<dim3(1024, 5), THREADS, 0, stream>>>(W);
  }
  const int chunked = d->plan && d->n_chunks > 0;
  const scratch_map m = scratch_layout(p, chunked);
  const int prologue = p->T > 0 && (!o->phases || (o->phases & 8));
  if (prologue) launch_prologue(p, d, &m, chunked, decode && !chunked, stream);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail(KDA_EIO, err, errlen, "prologue launch", e);

  if (d->plan && d->n_chunks > 0) return launch_chunks(p, d, &m, o->phases, stream, err, errlen);
  if (o->phases && !(o->phases & 7)) return KDA_OK; /* bench_cuda: the prologue alone */

  const int64_t vt = THREADS / ks, coltiles = (p->V + vt - 1) / vt;
  const int64_t tb = o->max_len < 1 ? 1 : o->max_len < KDA_CUDA_TOKENS ? o->max_len
                                                                         : KDA_CUDA_TOKENS;
  char *base = (char *)d->scratch;
  recur_args A;
  A.H = p->H, A.HV = p->HV, A.K = p->K, A.V = p->V, A.G = p->HV / p->H;
  A.decays = p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN;
  A.erases = p->family != KDA_FAMILY_LINEAR;
  A.gate_scalar = p->family == KDA_FAMILY_GDN;
  A.head_mod = p->head_map == KDA_HEADMAP_MOD;
  A.vk = p->state_layout == KDA_STATE_VK;
  A.has_h0 = p->has_initial_state != 0, A.want_ht = p->want_final_state != 0;
  A.has_ckpt = p->n_checkpoints > 0;
  A.vec = p->K % 4 == 0 && rows_for(p->K, ks) % 4 == 0;
  A.coltiles = (int32_t)coltiles, A.TB = (int32_t)tb;
  A.qh = (const float *)(base + m.qh), A.kh = (const float *)(base + m.kh);
  A.a = (const float *)(base + m.a), A.b = (const float *)(base + m.b);
  A.ckpt = (const int32_t *)(base + m.ckpt);
  A.v = d->v, A.h0 = d->h0, A.cu = d->cu_seqlens, A.slots = d->slots;
  A.o = d->o, A.ht = d->ht, A.hc = d->hc;
  const int64_t blocks = p->N * p->HV * coltiles;
  A.items = blocks;
  const int R = rows_for(p->K, ks);
  if (decode) {
    /* the prologue ran just before (one launch, no checkpoint map after it) */
    const int pdl = prologue && p->n_checkpoints == 0;
    e = decode_rows_fits(p) ? launch_decode_rows(A, p->N, o->max_grid, pdl, stream)
                            : dispatch_decode(A, R, o->max_grid, stream);
    if (e != cudaSuccess) return fail(KDA_EIO, err, errlen, "decode kernel launch", e);
    return KDA_OK;
  }
  e = ks == 4 ? dispatch_rows<4>(A, R, blocks, o->max_grid, stream)
      : ks == 8 ? dispatch_rows<8>(A, R, blocks, o->max_grid, stream)
                : dispatch_rows<16>(A, R, blocks, o->max_grid, stream);
  if (e != cudaSuccess) return fail(KDA_EIO, err, errlen, "recurrent kernel launch", e);
  return KDA_OK;
}

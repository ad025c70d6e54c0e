/* kda_cuda_chunk.cu: the chunked float32 prefill kernels of the CUDA backend (SPEC.md §3, §5).
 * SPDX-License-Identifier: MIT
 *
 * The WY/UT form of the delta rule (docs/cuda.md): within a chunk of L <= 64 tokens, with
 * gamma_t[c] the cumulative log-decay of channel c from the chunk's start to token t
 * (inclusive) and S0 the state at the chunk's start,
 *   (I + A) Unew = beta V - (beta k e^gamma) S0,  A[t][s] = beta_t sum_c k_t k_s e^(gamma_t - gamma_s)
 *   O[t]   = (q_t e^gamma_t) S0 + sum_{s <= t} M[t][s] Unew[s],  M[t][s] = sum_c q_t k_s e^(...)
 *   S_end  = e^gamma_L S0 + sum_s (k_s e^(gamma_L - gamma_s)) Unew[s]
 * which is SPEC.md §3.1's recurrence token by token (decay, erase, write, readout after the
 * write), regrouped.  Two kernels:
 *   prep  (chunk, value head), parallel: k and q normalized (SPEC.md §4.3, the prologue's
 *         arithmetic), gamma in float64, A and M, then W = (I+A)^-1 (beta k e^gamma) and
 *         U = (I+A)^-1 (beta v) by forward substitution, two threads a column;
 *   scan  (sequence, value head, 32 value columns), sequential over the sequence's chunks:
 *         Unew = U - W S, O = Qs S + M Unew and S <- e^gamma_L S + Kd^T Unew on the float64
 *         tensor cores, S in float64 registers from the first chunk to the last.
 * A batch whose chunk scratch would pass the cap (32 GiB, or the scratch_mb parameter) runs
 * in slices of whole sequences that take the scratch in turn (kda_cuda_chunk_slices), the
 * same bits as one slice: no chunk and no sequence's scan depends on the others.
 * Prep's products are float32 FMA in a fixed order, except A and M's off-diagonal 16 x 16
 * blocks, which are 3xTF32 tensor-core products (prep_pairs_tc); the scan's are float64
 * tensor-core products (mma .f64: exact products, float64 sums), never 3xTF32: outputs in
 * 3xTF32 with float32 sums fail golden/L1 drift-decay-small on a prefix resume (94.5 units >
 * 64; docs/cuda.md).  No atomics in any sum: identical bits run to run, whatever the grid or
 * batch.
 *
 * Overflow: e^(gamma_t - gamma_s) is never formed as e^gamma_t / e^gamma_s.  With 16-token
 * sub-blocks I (t) and J (s), J <= I, and rho_J the gamma at J's last token, it is
 *   e^(gamma_t - rho_(I-1)) * e^(rho_(I-1) - rho_J) * e^(rho_J - gamma_s),
 * three factors <= 1 when J < I (gamma does not increase).  For J = I it is
 * e^(gamma_t - rho_(I-1)) * e^(rho_(I-1) - gamma_s), the second factor >= 1, used only when
 * row t's decay since the block's start is <= 80 (else the slow path sums the gates of each
 * pair directly); a reference after t would make row t depend on later tokens' gates.  Every
 * exponent is a sum of the gates between its two ends, within one 16-token block or of whole
 * blocks (prep_decays), rounded once, so a gate of -1000 or -inf (clamped to -1e4 in the sums:
 * e^-1e4 = +0 as e^-inf) costs no precision elsewhere in the chunk and gives no NaN (golden
 * gate-values-*).
 */
#include <cuda_pipeline.h>

#include "kda_cuda_chunk.h"
#include "kda_cuda_math.h"

#define CT KDA_CUDA_CHUNK   /* tokens a chunk */
#define KP KDA_CUDA_CHUNK_K /* key channels (zero-padded) */
#define KSTR (KP + 4)       /* row stride of [token][channel] tiles: float4 rows in distinct banks */
#define ASTR (CT + 4)
#define NTP 512             /* threads a block: prep (4 blocks of 16 tokens x 128 channels) */
#define VS KDA_CUDA_CHUNK_VS /* value columns of a scan block */
/* A row's decay since its block's start above which its diagonal-block pairs take the slow
 * path: below it the factors lie in [e^-80, e^80], normal floats whose products keep float
 * precision.  Production gates stay well inside (lower_bound >= -5 a token: at most 75 over a
 * block); gates of -88, -1000 or -inf take the slow path. */
#define SLOW_RANGE 80.0

typedef kda_cuda_chunk_args cargs;

struct chunk_at {
  int start, len, ckpt, seq;
};
__device__ __forceinline__ chunk_at chunk_of(const cargs &A, int64_t c) {
  const int4 x = reinterpret_cast<const int4 *>(A.plan)[c];
  chunk_at r;
  r.start = x.x, r.len = x.y, r.ckpt = x.z, r.seq = x.w;
  return r;
}
__device__ __forceinline__ int64_t head_of(const cargs &A, int64_t hv) {
  return A.head_mod ? hv % A.H : hv / A.G; /* SPEC.md §4.4 */
}
/* g_eff of token t, value head hv, channel c (SPEC.md §4.1); 0 without decay. */
__device__ __forceinline__ float gate_at(const cargs &A, int64_t t, int64_t hv, int c) {
  if (!A.decays || c >= A.K) return 0.0f;
  return A.gate_scalar ? A.lg[t * A.HV + hv] : A.lg[(t * A.HV + hv) * A.K + c];
}
/* Offset of state element (i, j) in the problem's layout (SPEC.md §2.4). */
__device__ __forceinline__ int64_t state_idx(const cargs &A, int64_t i, int64_t j) {
  return A.vk ? j * A.K + i : i * A.V + j;
}
__device__ __forceinline__ void async16(void *dst, const void *src) {
  __pipeline_memcpy_async(dst, src, 16);
}
/* e^x of an exponent given as xf = RN(x) and its remainder d = x - xf, |x| < 88.7: expf of
 * xf corrected by d (e^(xf + d) = e^xf (1 + d) to d^2 ~ 1e-11).  Rounding x alone would cost
 * up to |x| 2^-25 of relative error, 40 ulps at |x| = 80, in factors whose product is near 1
 * (a pair of nearby tokens far into a strongly decaying block). */
__device__ __forceinline__ float exp_df(kcm_df x) {
  const float e = expf(x.hi);
  return fmaf(e, x.lo, e);
}
__device__ __forceinline__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ void st4(float *p, float4 v) { *reinterpret_cast<float4 *>(p) = v; }
/* ==== prep ==== */

/* Normalized k (q: scaled) of row t from the raw input and the row's 1 / norm, as the
 * prologue's coef_qk rounds it (the same bits). */
__device__ __forceinline__ float qk_norm(double x, double inv, bool q, double scale) {
  const double xi = x * inv;
  return (float)(q ? scale * xi : xi);
}
/* A[t][s] (without beta_t) and M[t][s] of one pair of a diagonal block whose decay range is
 * too large to factor: the gates between s and t summed directly (s <= t < len); with
 * qk_raw the normalized k and q are rebuilt from the raw rows and inv (prep_norms). */
__device__ void slow_pair(const cargs &A, const chunk_at &ch, int64_t h, const float *Gs,
                          const double *inv, int t, int s, int c0, int c1, float &a, float &m) {
  a = m = 0.0f;
  if (t >= ch.len || s > t) return;
  const float *kb = A.qk_raw ? A.k : A.kh, *qb = A.qk_raw ? A.q : A.qh;
  const float *kt = kb + ((int64_t)(ch.start + t) * A.H + h) * A.K;
  const float *ks = kb + ((int64_t)(ch.start + s) * A.H + h) * A.K;
  const float *qt = qb + ((int64_t)(ch.start + t) * A.H + h) * A.K;
  for (int c8 = c0; c8 < c1 && c8 < A.K; c8 += 8) { /* 8 channels' loads in flight at once */
    float x[8], y[8], z[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const bool ok = c8 + u < c1 && c8 + u < A.K;
      x[u] = ok ? kt[c8 + u] : 0.0f, y[u] = ok ? ks[c8 + u] : 0.0f, z[u] = ok ? qt[c8 + u] : 0.0f;
      if (A.qk_raw) /* inv: rows 0..63 of k, then of q */
        x[u] = qk_norm(x[u], inv[t], false, 0.0), y[u] = qk_norm(y[u], inv[s], false, 0.0),
        z[u] = qk_norm(z[u], inv[CT + t], true, A.scale);
    }
#pragma unroll
    for (int u = 0; u < 8; u++) {
      float sum = 0.0f;
      for (int r = s + 1; r <= t; r++) sum += Gs[r * KP + c8 + u]; /* the gates as given: -inf stays */
      const float w = expf(sum) * y[u];
      a = fmaf(x[u], w, a), m = fmaf(z[u], w, m);
    }
  }
}

/* The cumulative decays of channel c over block I (one thread), from the gates staged in Gs:
 * the factors Xa = beta k e^(gamma - rho_(I-1)), Xm = q e^(gamma - rho_(I-1)) (<= 1),
 * Y = k e^(rho_I - gamma) (<= 1: off-diagonal pairs) and Yd = k e^(rho_(I-1) - gamma) (>= 1:
 * diagonal pairs), in place of the raw k (Y) and q (Xm); E, F; and Qs, Kd, gC out.  A row t
 * whose decay since its block's start exceeds SLOW_RANGE on some channel is marked slow.  What
 * row t of A and M uses depends on tokens <= t only, so outputs are bitwise causal (SPEC.md
 * §7's causality check): the diagonal blocks take their reference at the block's start, not
 * its end.  Every exponent is a sum of gates (float pairs within a block, float64 over
 * blocks: below) rounded once; e^gamma and e^(rho_3 - gamma) are products of two such
 * exponentials. */
/* The log-decays as float pairs (kda_cuda_math.h), each exponent from sums over one 16-token
 * block only, so none is a difference of two long sums:
 *   x1_t = gamma_t - rho_(I-1): the gates of block I up to t (a prefix from 0);
 *   x2_t = rho_I - gamma_t: the gates of block I after t (a suffix from 0, summed backwards);
 *   P_J = the whole of block J, exchanged through shared memory; the per-chunk exponents
 *   (r0 = rho_(I-1), rho_3 - rho_I, rho_(I-1) - rho_J, rho_3) are float64 sums of P_J.
 * Every exponent is then within 2^-41 of the largest partial sum of its own block (at most
 * 16 adds, kda_cuda_math.h), where float64 cumulative sums from the chunk's start would be
 * within 2^-47 of the chunk's whole decay, which after a gate of -1000 or -inf is large next
 * to an exponent within a later block.  The pairs run on the float32 pipe: float64 sums would
 * cost about 15 float <-> double conversions a (token, channel) pair, which sm_90 runs at 16 a
 * clock a multiprocessor, an eighth of the float32 rate.  A thread adds 48 gates and subtracts
 * none.  An exponent x = hi + lo is taken as xf = RN(x) and d = x - xf (kcm_df_norm), as
 * exp_df takes them. */
/* x < c for a normalized pair x (|lo| <= ulp(hi) / 2) and a float c. */
__device__ __forceinline__ bool df_below(kcm_df x, float c) { return x.hi < c || (x.hi == c && x.lo < 0.0f); }
__device__ __forceinline__ float clampg(float g) { return fmaxf(g, -1e4f); } /* -inf: e^-1e4 = +0 */

__device__ void prep_decays(const cargs &A, int64_t ci, int c, int I, const float *Gs, float *Xa,
                            float *Xm, float *Y, float *Yd, float *E, float *F, const float *bs,
                            int *slow, float *Pf) {
  /* P_I, then every block's from the other threads of channel c (Pf: 2 4 KP floats) */
  kcm_df p = {0.0f, 0.0f};
  for (int u = 0; u < 16; u++) p = kcm_df_add(p, clampg(Gs[(I * 16 + u) * KP + c]));
  Pf[(I * KP + c) * 2] = p.hi, Pf[(I * KP + c) * 2 + 1] = p.lo;
  __syncthreads();
  double P[4];
#pragma unroll
  for (int J = 0; J < 4; J++) P[J] = kcm_df_val(kcm_df{Pf[(J * KP + c) * 2], Pf[(J * KP + c) * 2 + 1]});
  double r0 = 0.0, after = 0.0; /* rho_(I-1) and rho_3 - rho_I */
#pragma unroll
  for (int J = 0; J < 4; J++) {
    if (J < I) r0 += P[J];
    if (J > I) after += P[J];
  }
  /* Per-chunk factors, correctly rounded (float64 exp): gC multiplies the state once a
   * chunk, so a biased rounding would compound over the sequence. */
  const float fI = (float)exp(r0), gI = (float)exp(after);
  kcm_df x1 = {0.0f, 0.0f};
  for (int u = 0; u < 16; u++) { /* the factors of x1 = gamma_t - rho_(I-1) */
    const int t = I * 16 + u, at = t * KSTR + c;
    x1 = kcm_df_add(x1, clampg(Gs[t * KP + c]));
    const kcm_df x = kcm_df_norm(x1);
    /* e^(r0 - g) directly, capped at e^88 (no inf) only on slow rows, which the fast path
     * never pairs (a row after a slow one is slow).  Not 1 / e^(g - r0) with a cap: any cap
     * below e^80 = 5.54e34 puts a row whose decay since the block's start lies just under 80
     * off on that channel's diagonal term (check_cuda test_chunk_decay_limit). */
    const bool slw = df_below(x, -(float)SLOW_RANGE), cap = df_below(x, -88.0f);
    const float eds = exp_df(x), edd = cap ? expf(88.0f) : exp_df(kcm_df{-x.hi, -x.lo});
    if (slw) atomicOr(&slow[t], 1); /* a flag: the same whatever the order */
    const float k = Y[at], q = Xm[at];
    Xa[at] = bs[t] * k * eds, Xm[at] = q * eds, Yd[at] = k * edd;
    A.Qs[(ci * CT + t) * KP + c] = q * eds * fI;
  }
  kcm_df x2 = {0.0f, 0.0f};
  for (int u = 15; u >= 0; u--) { /* the factors of x2 = rho_I - gamma_t, last token first */
    const int t = I * 16 + u, at = t * KSTR + c;
    const float ede = exp_df(kcm_df_norm(x2)), k = Y[at];
    Y[at] = k * ede;
    A.Kd[(ci * CT + t) * KP + c] = k * ede * gI;
    x2 = kcm_df_add(x2, clampg(Gs[t * KP + c])); /* gamma_t includes token t's gate */
  }
#pragma unroll
  for (int J = 0; J < 3; J++)
    if (J < I) { /* rho_(I-1) - rho_J: the blocks strictly between J and I */
      double d = 0.0;
#pragma unroll
      for (int K = 0; K < 4; K++)
        if (K > J && K < I) d += P[K];
      E[(I * (I - 1) / 2 + J) * KP + c] = (float)exp(d);
    }
  F[I * KP + c] = fI;
  if (I == 0) A.gC[ci * KP + c] = (float)exp(P[0] + P[1] + P[2] + P[3]);
}

/* ---- The off-diagonal pair blocks on the tensor cores, in 3xTF32 ----
 * A[t][s] = sum_c Xa[t][c] (E[c] Y[s][c]) and M[t][s] = sum_c Xm[t][c] (E[c] Y[s][c]) for
 * t in block I, s in block J < I: [16 x 128] by [128 x 16] products.  Each operand x is split
 * into big = tf32(x) and small = tf32(x - big), and a product is small*big + big*small +
 * big*big with float32 accumulation (mma.sync m16n8k8): float32-class sums (the small*small
 * term is below 2^-22 of the product), in a fixed order, so the bits repeat run to run. */
/* tf32(x), rounded to nearest with ties away from zero, as cvt.rna.tf32.f32 rounds a finite
 * x: 2^12 added to the magnitude's bits (a carry out of the 10 kept mantissa bits moves the
 * exponent up, as rounding does), the 13 low bits cleared.  sm_90 has no instruction for the
 * cvt: nvcc emits it as this pair plus an |x| < inf test and a select, so this saves two of
 * the four instructions of each rounding, four a split (the operands here are finite:
 * products of unit-norm keys and factors <= e^88). */
__device__ __forceinline__ uint32_t tf32_of(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }
__device__ __forceinline__ void split_tf32(float x, uint32_t &big, uint32_t &small) {
  big = tf32_of(x);
  small = tf32_of(x - __uint_as_float(big));
}
__device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* c += x y in 3xTF32 from the split fragments (x = xb + xs, y = yb + ys): the small products
 * first, then big * big (a fixed order, so the same bits run to run). */
__device__ __forceinline__ void mma_3x(float c[4], const uint32_t xb[4], const uint32_t xs[4],
                                             const uint32_t yb[2], const uint32_t ys[2]) {
  mma_tf32(c, xs, yb);
  mma_tf32(c, xb, ys);
  mma_tf32(c, xb, yb);
}

/* Block pair pi of (1,0) (2,0) (2,1) (3,0) (3,1) (3,2), columns s = J 16 + 8 (h0 + n) + 0..7
 * for n < NH, by one warp: A and M share the B fragments, the NH halves share the A fragments
 * (Xa, Xm), which are split into big and small parts once a k-step for all of them. */
template <int NH>
__device__ __forceinline__ void pairs_tc(const cargs &A, int64_t ci, const float *Xa, const float *Xm,
                                         const float *Y, const float *E, float *Am, int pi, int h0, int gr,
                                         int tg) {
  const int I = pi < 1 ? 1 : pi < 3 ? 2 : 3, J = pi - I * (I - 1) / 2, t0 = I * 16;
  const float *e = E + (I * (I - 1) / 2 + J) * KP;
  float ca[NH][4] = {}, cm[NH][4] = {};
#pragma unroll 4
  for (int k = 0; k < KP; k += 8) {
    /* A fragments: rows t0 + gr (+8), columns k + tg (+4); B: row k + tg (+4), column s0 + gr.
     * Row strides of KSTR = 132 floats put the 32 lanes in 32 distinct banks. */
    const int r0 = (t0 + gr) * KSTR + k + tg, r1 = r0 + 8 * KSTR;
    const float xa[4] = {Xa[r0], Xa[r1], Xa[r0 + 4], Xa[r1 + 4]};
    const float xm[4] = {Xm[r0], Xm[r1], Xm[r0 + 4], Xm[r1 + 4]};
    uint32_t ab[4], as[4], mb[4], ms[4];
#pragma unroll
    for (int i = 0; i < 4; i++) split_tf32(xa[i], ab[i], as[i]), split_tf32(xm[i], mb[i], ms[i]);
#pragma unroll
    for (int n = 0; n < NH; n++) {
      const int sb = (J * 16 + 8 * (h0 + n) + gr) * KSTR + k + tg;
      const float y[2] = {Y[sb] * e[k + tg], Y[sb + 4] * e[k + tg + 4]};
      uint32_t yb[2], ys[2];
      split_tf32(y[0], yb[0], ys[0]), split_tf32(y[1], yb[1], ys[1]);
      mma_3x(ca[n], ab, as, yb, ys);
      mma_3x(cm[n], mb, ms, yb, ys);
    }
  }
  /* C fragment: rows t0 + gr (+8), columns s0 + 2 tg (+1). */
#pragma unroll
  for (int n = 0; n < NH; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int t = t0 + gr + (i >> 1) * 8, sc = J * 16 + 8 * (h0 + n) + 2 * tg + (i & 1);
      Am[t * ASTR + sc] = A.erases ? ca[n][i] : 0.0f; /* no erase: Unew = beta v */
      A.M[(ci * CT + t) * CT + sc] = cm[n][i];
    }
}

/* The six off-diagonal block pairs: warp w < 6 the w-th, with both 8-column halves; warps
 * 6 - 14 meanwhile take the diagonal blocks (prep_pairs_diag2). */
__device__ void prep_pairs_tc(const cargs &A, int64_t ci, const float *Xa, const float *Xm,
                              const float *Y, const float *E, float *Am) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane >> 2, tg = lane & 3;
  if (w < 6) pairs_tc<2>(A, ci, Xa, Xm, Y, E, Am, w, 0, gr, tg);
}

/* The four diagonal blocks' pairs (t, s), s <= t, at once, 2 x 2 entries a lane pair, by
 * warps 6 - 14 while warps 0 - 5 compute the off-diagonal blocks on tensor cores
 * (prep_pairs_tc).  Rows 2 tp, 2 tp + 1 and columns 2 sp, 2 sp + 1 (sp <= tp: 36 tiles a
 * block, 144 tiles for the four blocks, 144 entries a block for the 136 needed) share their
 * loads: six float4 loads (two rows each of Xa, Xm and Yd) serve 32 FMAs.  The two lanes of
 * a pair sum alternate groups of 4 channels, each with two accumulators, and add the halves
 * with one shuffle (both lanes get the same bits: addition commutes); a slow row's pairs take
 * slow_pair.  prep_pairs_zero writes the zeros of the tiles above (the solve and the scan's
 * outputs read them). */
#define DIAG2_FIRST 192 /* the first thread of prep_pairs_diag2 (after prep_pairs_tc's 6 warps) */
__device__ void pairs_diag2_tile(const cargs &A, const chunk_at &ch, int64_t h, int64_t ci,
                                 const float *Xa, const float *Xm, const float *Yd, const float *Gs,
                                 const float *bs, const int *slow, const double *inv, float *Am,
                                 int q, int half) {
  const int I = q / 36;
  int r = q % 36, tp = 0;
  while (r > tp) r -= ++tp; /* the r-th tile (tp, sp) with sp <= tp, row by row */
  const int sp = r, t0 = I * 16 + 2 * tp, s0 = I * 16 + 2 * sp;
  float a[2][2] = {}, m[2][2] = {}, a1[2][2] = {}, m1[2][2] = {};
#pragma unroll 2
  for (int c = 4 * half; c < KP; c += 8) { /* the halves interleaved: distinct banks */
    float4 p[2], x[2], y[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
      p[i] = ld4(Xa + (t0 + i) * KSTR + c), x[i] = ld4(Xm + (t0 + i) * KSTR + c), y[i] = ld4(Yd + (s0 + i) * KSTR + c);
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int j = 0; j < 2; j++) {
        a[i][j] = fmaf(p[i].x, y[j].x, a[i][j]), a1[i][j] = fmaf(p[i].y, y[j].y, a1[i][j]);
        a[i][j] = fmaf(p[i].z, y[j].z, a[i][j]), a1[i][j] = fmaf(p[i].w, y[j].w, a1[i][j]);
        m[i][j] = fmaf(x[i].x, y[j].x, m[i][j]), m1[i][j] = fmaf(x[i].y, y[j].y, m1[i][j]);
        m[i][j] = fmaf(x[i].z, y[j].z, m[i][j]), m1[i][j] = fmaf(x[i].w, y[j].w, m1[i][j]);
      }
  }
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const int t = t0 + i, s = s0 + j;
      float ae = 0.0f, me = 0.0f;
      if (s <= t && !slow[t]) ae = a[i][j] + a1[i][j], me = m[i][j] + m1[i][j];
      else if (s <= t) {
        slow_pair(A, ch, h, Gs, inv, t, s, half * (KP / 2), half * (KP / 2) + KP / 2, ae, me);
        ae *= bs[t];
      }
      ae += __shfl_xor_sync(0xffffffffu, ae, 1);
      me += __shfl_xor_sync(0xffffffffu, me, 1);
      if (s >= t) ae = 0.0f; /* selected, not multiplied: no inf * 0 */
      if (s > t) me = 0.0f;
      if (!A.erases) ae = 0.0f;
      if (!half) Am[t * ASTR + s] = ae, A.M[(ci * CT + t) * CT + s] = me;
    }
}
__device__ void prep_pairs_diag2(const cargs &A, const chunk_at &ch, int64_t h, int64_t ci,
                                 const float *Xa, const float *Xm, const float *Yd, const float *Gs,
                                 const float *bs, const int *slow, const double *inv, float *Am) {
  const int half = threadIdx.x & 1, q0 = (threadIdx.x - DIAG2_FIRST) >> 1;
  constexpr int NQ = (NTP - DIAG2_FIRST) / 2, LAST = 4 * 36;
  if (threadIdx.x < DIAG2_FIRST) return; /* beside prep_pairs_tc's warps 0 - 5 */
  for (int q = q0; q < LAST; q += NQ) /* uniform a warp: 144 tiles, one round */
    pairs_diag2_tile(A, ch, h, ci, Xa, Xm, Yd, Gs, bs, slow, inv, Am, q, half);
}

/* The zeros of A (into Am) and M above prep_pairs_diag2's 2 x 2 tiles inside the diagonal
 * blocks, which the solve and the scan's outputs read, and of the blocks above the diagonal
 * blocks, which no kernel reads (the scratch then holds whole matrices).  Lanes 2e and 2e + 1
 * of warp ti take entry (ti, e) of each block pair (I, J >= I); half 0 stores. */
__device__ void prep_pairs_zero(const cargs &A, int64_t ci, float *Am) {
  const int half = threadIdx.x & 1, ti = threadIdx.x / 32, si = threadIdx.x / 2 % 16;
  for (int I = 0; I < 4; I++) {
    for (int J = 0; J < 4; J++) {
      const int t = I * 16 + ti, s = J * 16 + si;
      if (J < I) continue; /* prep_pairs_tc wrote these */
      if ((J > I || si / 2 > ti / 2) && !half) Am[t * ASTR + s] = 0.0f, A.M[(ci * CT + t) * CT + s] = 0.0f;
    }
  }
}

/* x = (I + A)^-1 b for one column (W: b = beta k e^gamma; U: b = beta v), by forward
 * substitution in registers, two threads a column (lanes 2c and 2c + 1, half = lane & 1):
 * row t's sum over r < t is split by r mod 4 (entries 0, 1 on half 0, 2, 3 on half 1, two
 * accumulators each), the halves added lo + hi after one shuffle (both lanes get the same
 * bits).  Entries of A at s >= t are zeros and the unsolved x[s] finite, so the unrolled loop
 * needs no guards.  The solve is the largest part of prep: one thread a column (half the block
 * idle) costs 0.45 ms more at B1 T32768 H32, and W and U as products with an explicit
 * T = (I + A)^-1 (fla's solve_tril: 16 x 16 diagonal blocks by substitution, then the
 * off-diagonal blocks in two levels, then an 8 x 4 register-tiled product) 0.44 ms more: the
 * product costs what the substitution does, and building T is seven latency-bound steps
 * between barriers. */
__device__ void prep_solve(const cargs &A, int64_t hv, int64_t ci, int col,
                           int half, const float *Xa, const float *F, const float *bs,
                           const float *Am, const float *Vsm) {
  const bool wcol = col < KP;
  const int j = col - KP;
  float x[CT];
  /* The right-hand side, one branch-free unrolled loop per kind of column (the branch is
   * warp-uniform: 16 columns a warp, KP a multiple of 16).  Range tests inside the 64 unrolled
   * copies would cost about 15 % of prep's warp samples, most of them waiting for instructions
   * (the code outgrows the instruction cache); rows past len and columns past V of Vsm are
   * zeros and bs is 0 there, so no test is needed. */
  if (wcol) {
#pragma unroll
    for (int t = 0; t < CT; t++) x[t] = Xa[t * KSTR + col] * F[(t >> 4) * KP + col];
  } else {
#pragma unroll
    for (int t = 0; t < CT; t++) x[t] = bs[t] * Vsm[t * KSTR + j];
  }
  if (A.erases) {
#pragma unroll
    for (int t = 1; t < CT; t++) {
      float c0 = 0.0f, c1 = 0.0f;
#pragma unroll
      for (int r = 0; r < t; r += 4) { /* row t of A: 2 entries a load and a thread */
        const float2 a2 = *reinterpret_cast<const float2 *>(Am + t * ASTR + r + 2 * half);
        const float x0 = half ? x[r + 2] : x[r], x1 = half ? x[r + 3] : x[r + 1];
        c0 = fmaf(-a2.x, x0, c0), c1 = fmaf(-a2.y, x1, c1);
      }
      const float mine = c0 + c1, other = __shfl_xor_sync(0xffffffffu, mine, 1);
      x[t] += half ? other + mine : mine + other;
    }
  }
  float *dst = wcol ? A.W + ci * CT * KP + col : A.U + ci * CT * A.VP + j;
  const int64_t stride = wcol ? KP : A.VP;
#pragma unroll
  for (int t = 0; t < CT; t++)
    if ((t & 1) == half) dst[t * stride] = x[t]; /* the halves store alternate rows */
}

/* The same solve, the same arithmetic in the same order, for a value column when V > 128
 * (the values are not staged: Vsm is NULL), with runtime loops: x in local memory, slow but
 * small, so that the unrolled solve keeps its registers (a third right-hand side inside it
 * made ptxas spill 1 KB a thread). */
__device__ __noinline__ void prep_solve_v(const cargs &A, const chunk_at &ch, int64_t hv, int64_t ci,
                                          int j, int half, const float *bs, const float *Am) {
  float x[CT];
  for (int t = 0; t < CT; t++)
    x[t] = t < ch.len && j < A.V ? bs[t] * A.v[((int64_t)(ch.start + t) * A.HV + hv) * A.V + j] : 0.0f;
  for (int t = 1; A.erases && t < CT; t++) {
    float c0 = 0.0f, c1 = 0.0f;
    for (int r = 0; r < t; r += 4) {
      const float2 a2 = *reinterpret_cast<const float2 *>(Am + t * ASTR + r + 2 * half);
      c0 = fmaf(-a2.x, x[r + 2 * half], c0), c1 = fmaf(-a2.y, x[r + 2 * half + 1], c1);
    }
    const float mine = c0 + c1, other = __shfl_xor_sync(0xffffffffu, mine, 1);
    x[t] += half ? other + mine : mine + other;
  }
  for (int t = half; t < CT; t += 2) A.U[(ci * CT + t) * A.VP + j] = x[t];
}

/* Raw k into Y, q into Xm, the gates into Gs and (Vsm not NULL) the chunk's values into Vsm,
 * by asynchronous copies (every load of the block in flight at once; 16 bytes at a time when K
 * and V allow); zeros past len and K.  Staged, the values are in shared memory before the
 * solve starts: read from global memory inside the solve, half the block would wait for them
 * (prep's largest stall, long scoreboard, in a profile). */
__device__ void prep_load(const cargs &A, const chunk_at &ch, int64_t h, int64_t hv, float *Y,
                          float *Xm, float *Gs, float *Vsm) {
  const bool v4 = A.K % 4 == 0, gate_rows = A.decays && !A.gate_scalar;
  const int cw = v4 ? 4 : 1, nc = KP / cw;
  const float *kb = A.qk_raw ? A.k : A.kh, *qb = A.qk_raw ? A.q : A.qh;
  for (int e = threadIdx.x; e < CT * nc; e += NTP) {
    const int t = e / nc, c = e % nc * cw;
    const bool ok = t < ch.len && c < A.K;
    const int64_t at = ((int64_t)(ch.start + t) * A.H + h) * A.K + c;
    const int64_t ag = ((int64_t)(ch.start + t) * A.HV + hv) * A.K + c;
    if (ok && v4) {
      __pipeline_memcpy_async(Y + t * KSTR + c, kb + at, 16);
      __pipeline_memcpy_async(Xm + t * KSTR + c, qb + at, 16);
      if (gate_rows) __pipeline_memcpy_async(Gs + t * KP + c, A.lg + ag, 16);
    } else if (ok) {
      __pipeline_memcpy_async(Y + t * KSTR + c, kb + at, 4);
      __pipeline_memcpy_async(Xm + t * KSTR + c, qb + at, 4);
      if (gate_rows) __pipeline_memcpy_async(Gs + t * KP + c, A.lg + ag, 4);
    } else {
      for (int u = 0; u < cw; u++) Y[t * KSTR + c + u] = Xm[t * KSTR + c + u] = 0.0f;
    }
    if (!gate_rows || !ok)
      for (int u = 0; u < cw; u++) Gs[t * KP + c + u] = ok ? gate_at(A, ch.start + t, hv, c + u) : 0.0f;
  }
  const bool vv4 = A.V % 4 == 0;
  const int vw = vv4 ? 4 : 1, nv = (int)(A.VP / vw);
  for (int e = threadIdx.x; Vsm && e < CT * nv; e += NTP) { /* zeros past len and V */
    const int t = e / nv, j = e % nv * vw;
    if (t >= ch.len || j >= A.V) {
      for (int u = 0; u < vw; u++) Vsm[t * KSTR + j + u] = 0.0f;
      continue;
    }
    const float *src = A.v + ((int64_t)(ch.start + t) * A.HV + hv) * A.V + j;
    if (vv4) __pipeline_memcpy_async(Vsm + t * KSTR + j, src, 16);
    else __pipeline_memcpy_async(Vsm + t * KSTR + j, src, 4);
  }
  __pipeline_commit();
}

/* qk_raw: the raw rows of k (in Y) and q (in Xm) normalized in place, by warps, with
 * the prologue's arithmetic (kda_cuda_kernels.cu, coef_qk / dev_inv_norm: float64 per-lane
 * sums over c = lane + 32 u, an xor-butterfly, x * (1 / norm) rounded once), so the bits are
 * the prologue's; the channels past K are zeros and add +0.  inv[t] (k) and inv[CT + t] (q)
 * are kept for the slow pairs.  Rows past len stay zeros (their 1 / norm, inf when l2_eps = 0,
 * is formed but neither stored nor used). */
__device__ void prep_norms(const cargs &A, const chunk_at &ch, float *Y, float *Xm, double *inv) {
  /* Warp w takes rows w + 16 i, i < 8 (k rows for i < 4, q rows after), all eight at once:
   * their sums, butterflies and 1 / norms are independent chains, interleaved, so the latency
   * of the float64 shuffles, square root and division is paid once for eight rows.  Each row's
   * square root and division is computed once a warp (lane l takes row l % 8 and shuffles the
   * results to all lanes), an eighth of that step's float64 instructions; the same operations
   * on the same sums either way, so the same bits. */
  constexpr int NR = 2 * CT / (NTP / 32);
  static_assert(NR == 8, "prep_norms: eight rows a warp");
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  float x[NR][KP / 32];
  double iv[NR];
#pragma unroll
  for (int i = 0; i < NR; i++) {
    const int r = w + (NTP / 32) * i, t = r % CT;
    const float *row = (r >= CT ? Xm : Y) + t * KSTR;
#pragma unroll
    for (int u = 0; u < KP / 32; u++) x[i][u] = row[lane + 32 * u];
  }
  if (A.l2_mode != KDA_L2_OFF) {
    double ss[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) {
      ss[i] = 0.0;
#pragma unroll
      for (int u = 0; u < KP / 32; u++) ss[i] += (double)x[i][u] * (double)x[i][u];
    }
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1)
#pragma unroll
      for (int i = 0; i < NR; i++) ss[i] += __shfl_xor_sync(0xffffffffu, ss[i], m);
    /* lane l: row l % NR's 1 / norm, then every lane all NR of them */
    const int r = lane % NR; /* a select tree, not an indexed (local-memory) read */
    const double s01 = r & 1 ? ss[1] : ss[0], s23 = r & 1 ? ss[3] : ss[2];
    const double s45 = r & 1 ? ss[5] : ss[4], s67 = r & 1 ? ss[7] : ss[6];
    double mine = r & 4 ? (r & 2 ? s67 : s45) : (r & 2 ? s23 : s01);
    mine = 1.0 / (A.l2_mode == KDA_L2_FLA ? sqrt(mine + A.l2_eps) : fmax(sqrt(mine), A.l2_eps));
#pragma unroll
    for (int i = 0; i < NR; i++) iv[i] = __shfl_sync(0xffffffffu, mine, i);
  } else {
#pragma unroll
    for (int i = 0; i < NR; i++) iv[i] = 1.0;
  }
#pragma unroll
  for (int i = 0; i < NR; i++) {
    const int r = w + (NTP / 32) * i, t = r % CT;
    if (t >= ch.len) continue; /* stays zeros */
    float *row = (r >= CT ? Xm : Y) + t * KSTR;
#pragma unroll
    for (int u = 0; u < KP / 32; u++) row[lane + 32 * u] = qk_norm(x[i][u], iv[i], r >= CT, A.scale);
    if (lane == 0) inv[r] = iv[i];
  }
}

/* The argument block is read in place (__grid_constant__): slow_pair and prep_solve_v, not
 * inlined, take its address, for which every thread would otherwise copy the whole block to
 * local memory at the kernel's start (a 624-byte stack frame instead of 256). */
__global__ void __launch_bounds__(NTP) kda_chunk_prep(const __grid_constant__ cargs A) {
  extern __shared__ __align__(16) float sm[];
  float *Xa = sm, *Xm = Xa + CT * KSTR, *Y = Xm + CT * KSTR, *Yd = Y + CT * KSTR;
  float *Gs = Yd + CT * KSTR, *E = Gs + CT * KP, *F = E + 6 * KP, *Am = F + 4 * KP;
  float *bs = Am + CT * ASTR;
  int *slow = reinterpret_cast<int *>(bs + CT);
  double *inv = reinterpret_cast<double *>(slow + CT); /* 2 CT: 1 / norms (qk_raw) */
  float *Vsm = A.VP <= KP ? reinterpret_cast<float *>(inv + 2 * CT) : NULL; /* V <= 128 */
  const int64_t hv = blockIdx.y, ci = (int64_t)blockIdx.x * A.HV + hv; /* ci: in the slice */
  const chunk_at ch = chunk_of(A, A.cbase + blockIdx.x);
  const int64_t h = head_of(A, hv);
  const int tid = threadIdx.x;
  prep_load(A, ch, h, hv, Y, Xm, Gs, Vsm);
  if (tid < CT) bs[tid] = tid < ch.len ? A.b[(int64_t)(ch.start + tid) * A.HV + hv] : 0.0f;
  if (tid < CT) slow[tid] = 0;
  __pipeline_wait_prior(0);
  __syncthreads();
  if (A.qk_raw) {
    prep_norms(A, ch, Y, Xm, inv);
    __syncthreads();
  }
  prep_decays(A, ci, tid % KP, tid / KP, Gs, Xa, Xm, Y, Yd, E, F, bs, slow, Am); /* Am: scratch */
  __syncthreads();
  prep_pairs_tc(A, ci, Xa, Xm, Y, E, Am);
  prep_pairs_diag2(A, ch, h, ci, Xa, Xm, Yd, Gs, bs, slow, inv, Am);
  prep_pairs_zero(A, ci, Am);
  __syncthreads();
  for (int col = tid / 2; col < KP + A.VP; col += NTP / 2) /* warp-uniform: 16 columns a warp */
    if (col >= KP && !Vsm) prep_solve_v(A, ch, hv, ci, col - KP, tid & 1, bs, Am);
    else if (col >= KP || A.erases) prep_solve(A, hv, ci, col, tid & 1, Xa, F, bs, Am, Vsm);
}

/* ==== scan ==== */

/* The scan (sequence, value head, 32 value columns), sequential over the sequence's chunks,
 * on sm_90's float64 tensor cores (mma.sync m16n8k8 .f64), every product and sum in float64:
 * the state S lives in float64 registers across the chunks (checkpoints and the final state
 * store it rounded to float32), Unew and the outputs are float64 sums rounded once.  The
 * operands prep wrote (W, U, Kd, Qs, M, gC: float32) are converted exactly as they are loaded
 * into fragments; S0 and Unew sit in shared memory as float64.  One block of 8 warps, each
 * chunk in two steps between block barriers:
 *   Unew = U - W S0                                   (64 x 32: a 16 x 16 tile a warp, k = 128)
 *   O = Qs S0 + M Unew, S <- e^gamma_L S + Kd^T Unew  (16 x 16 and 16 x 32 tiles a warp)
 * then S to shared memory for the next chunk.  A k-step of a 16 x 16 tile is 64 multiply-adds
 * a lane for eight shared-memory loads, where a float32 FMA scan (4 x 4 register tiles) needs
 * a 32-bit load every two FMAs and is bound by that traffic: on the H100 at B1 T32768 H32
 * this scan takes 3.1 ms against such a scan's 4.1.  m16n8k8 runs at twice the rate of
 * m8n8k4 (sm_80's shape) on Hopper.  Deterministic: a fixed order of tensor-core products, no
 * atomics.  Its float64 tensor pipe is active about half of the cycles, with 2 warps a
 * scheduler; most stalls are fixed-latency waits between dependent DMMAs (docs/cuda.md). */
#define NTS 256      /* threads of the scan: 8 warps */
/* The k-steps a loop body of the 16 x 16 tiles (k = 128) and of the update (k = 64): with
 * 16 and 8 ptxas gives the scan 142 registers instead of 202 (4 and 2) and the scheduler more
 * independent products (scan 3.13-3.15 -> 3.08-3.11 ms on the H100; 8 and 2, 4 and 4 lie
 * between). */
#define SD_UNROLL 16
static constexpr int sd_upd_unroll = 8; /* #pragma unroll takes no macro */
#define SDS (VS + 4) /* row stride (doubles) of S0 and Unew: a B fragment's 32 lanes in 2 wavefronts */
#define KDS (KP + 8) /* row stride of Kd: its A fragments (Kd transposed) in distinct banks */

/* A scan block's work item: (sequence n, value head hv, columns j0 .. j0 + VS - 1), its
 * chunks c0 .. c1 - 1 and its state slot (a pool's padding entry: -1). */
struct scan_item {
  int64_t hv, n, c0, c1, slot, soff;
  int j0;
};
__device__ scan_item scan_item_of(const cargs &A) {
  const int64_t ns = A.VP / VS, item = blockIdx.x;
  scan_item w;
  w.hv = (item / ns) % A.HV, w.n = A.n0 + item / (ns * A.HV);
  w.j0 = (int)(item % ns) * VS;
  const int32_t *seq_first = A.plan + 4 * A.n_chunks;
  w.c0 = seq_first[w.n], w.c1 = seq_first[w.n + 1];
  w.slot = A.slots ? A.slots[w.n] : w.n;
  w.soff = ((w.slot < 0 ? 0 : w.slot) * A.HV + w.hv) * A.K * A.V;
  return w;
}

/* D += A B, m16n8k8 in float64 (sm_90; twice m8n8k4's rate on the H100).  Lane 4 g + q holds
 * A[g][q], A[g + 8][q], A[g][q + 4], A[g + 8][q + 4]; B[q][g], B[q + 4][g];
 * C[g][2q], C[g][2q + 1], C[g + 8][2q], C[g + 8][2q + 1]. */
__device__ __forceinline__ void dmma(double (&d)[4], const double (&a)[4], const double (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
}
/* The A fragment of rows r0.., columns k.. of a float32 tile X (row stride ld), converted exactly. */
__device__ __forceinline__ void frag_a(double (&a)[4], const float *X, int ld, int r0, int k, int g, int q) {
  a[0] = X[(r0 + g) * ld + k + q], a[1] = X[(r0 + g + 8) * ld + k + q];
  a[2] = X[(r0 + g) * ld + k + q + 4], a[3] = X[(r0 + g + 8) * ld + k + q + 4];
}
/* The same of X's transpose (A[r][k] = X[k][r]). */
__device__ __forceinline__ void frag_at(double (&a)[4], const float *X, int ld, int r0, int k, int g, int q) {
  a[0] = X[(k + q) * ld + r0 + g], a[1] = X[(k + q) * ld + r0 + g + 8];
  a[2] = X[(k + q + 4) * ld + r0 + g], a[3] = X[(k + q + 4) * ld + r0 + g + 8];
}
/* The B fragment of rows k.., columns n0.. of a float64 tile Y (row stride SDS). */
__device__ __forceinline__ void frag_b(double (&b)[2], const double *Y, int k, int n0, int g, int q) {
  b[0] = Y[(k + q) * SDS + n0 + g], b[1] = Y[(k + q + 4) * SDS + n0 + g];
}
/* Chunk c's W, U (this block's columns) and gC into one of the two buffers. */
__device__ void sd_issue_wu(const cargs &A, int64_t c, int64_t hv, int j0, float *W, float *U, float *G) {
  const int64_t ci = (c - A.cbase) * A.HV + hv;
  const float *w = A.W + ci * CT * KP;
  for (int e = threadIdx.x; A.erases && e < CT * KP / 4; e += NTS)
    async16(W + e / (KP / 4) * KSTR + e % (KP / 4) * 4, w + e * 4);
  for (int e = threadIdx.x; e < CT * VS / 4; e += NTS) {
    const int t = e / (VS / 4), c4 = e % (VS / 4) * 4;
    async16(U + t * VS + c4, A.U + (ci * CT + t) * A.VP + j0 + c4);
  }
  for (int e = threadIdx.x; e < KP / 4; e += NTS) async16(G + e * 4, A.gC + ci * KP + e * 4);
}
/* Chunk c's Kd, Qs and M (one buffer each: copied once the chunk before has read them). */
__device__ void sd_issue_kqm(const cargs &A, int64_t c, int64_t hv, float *Kd, float *Qb, float *Mb) {
  const int64_t ci = (c - A.cbase) * A.HV + hv;
  const float *k = A.Kd + ci * CT * KP, *qs = A.Qs + ci * CT * KP, *m = A.M + ci * CT * CT;
  for (int e = threadIdx.x; e < CT * KP / 4; e += NTS) {
    const int t = e / (KP / 4), c4 = e % (KP / 4) * 4;
    async16(Kd + t * KDS + c4, k + e * 4), async16(Qb + t * KSTR + c4, qs + e * 4);
  }
  for (int e = threadIdx.x; e < CT * CT / 4; e += NTS) async16(Mb + e / (CT / 4) * ASTR + e % (CT / 4) * 4, m + e * 4);
}

/* acc[ni] += X[rows tb.. + 15][k < nk] Y[k < nk][columns cb + 8 ni..]: a warp's 16 x 16 tile
 * (X float32, row stride ld; Y float64, row stride SDS), U k-steps a loop body. */
template <int U>
__device__ __forceinline__ void sd_tile(double (&acc)[2][4], const float *X, int ld, const double *Y, int nk,
                                        int tb, int cb, int g, int q) {
#pragma unroll U
  for (int k = 0; k < nk; k += 8) {
    double a[4], b[2][2];
    frag_a(a, X, ld, tb, k, g, q);
#pragma unroll
    for (int ni = 0; ni < 2; ni++) frag_b(b[ni], Y, k, cb + 8 * ni, g, q);
#pragma unroll
    for (int ni = 0; ni < 2; ni++) dmma(acc[ni], a, b[ni]);
  }
}
/* Unew = U - W S0 for warp wp's tile (rows tb.. + 15, columns cb.. + 15), into Vs: the
 * fragments accumulate -U + W S0 (negated once at the end, exactly). */
__device__ __forceinline__ void sd_unew(const cargs &A, const float *W, const float *U, const double *Ss,
                                        double *Vs, int wp, int g, int q) {
  const int tb = 16 * (wp >> 1), cb = 16 * (wp & 1);
  double acc[2][4];
#pragma unroll
  for (int ni = 0; ni < 2; ni++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float2 u = *reinterpret_cast<const float2 *>(U + (tb + g + 8 * h) * VS + cb + 8 * ni + 2 * q);
      acc[ni][2 * h] = -(double)u.x, acc[ni][2 * h + 1] = -(double)u.y;
    }
  if (A.erases) sd_tile<SD_UNROLL>(acc, W, KSTR, Ss, KP, tb, cb, g, q);
#pragma unroll
  for (int ni = 0; ni < 2; ni++)
#pragma unroll
    for (int h = 0; h < 2; h++)
      *reinterpret_cast<double2 *>(Vs + (tb + g + 8 * h) * SDS + cb + 8 * ni + 2 * q) =
          make_double2(-acc[ni][2 * h], -acc[ni][2 * h + 1]);
}
/* O = Qs S0 + M Unew for warp wp's tile of chunk c, rounded once; rows past the chunk's
 * length and columns past V not written. */
__device__ __forceinline__ void sd_out(const cargs &A, int64_t c, const scan_item &w, const float *Qb,
                                       const float *Mb, const double *Ss, const double *Vs, int wp, int g,
                                       int q) {
  /* M[t][s] = 0 for s > t, so rows tb.. + 15 need Unew's rows s < tb + 16 only (the products
   * skipped are zeros: 212 instead of 224 float64 tensor-core products a chunk and
   * scheduler); the row tiles 0, 1, 3, 2 of warp pairs 0-1 .. 6-7 put a short and a long tile
   * on each of the four schedulers (warp w on w % 4). */
  static_assert(CT == 64 && NTS == 256, "sd_out: four row tiles, two warps each");
  const int rt = (wp >> 1) >= 2 ? 5 - (wp >> 1) : wp >> 1;
  const int tb = 16 * rt, cb = 16 * (wp & 1);
  double acc[2][4] = {};
  sd_tile<SD_UNROLL>(acc, Qb, KSTR, Ss, KP, tb, cb, g, q);
  sd_tile<2>(acc, Mb, ASTR, Vs, tb + 16, tb, cb, g, q);
  const chunk_at ch = chunk_of(A, c);
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int t = tb + g + 8 * h;
    if (t >= ch.len) continue;
    float *o = A.o + ((int64_t)(ch.start + t) * A.HV + w.hv) * A.V;
#pragma unroll
    for (int ni = 0; ni < 2; ni++) {
      const int jj = w.j0 + cb + 8 * ni + 2 * q;
      const float x = (float)acc[ni][2 * h], y = (float)acc[ni][2 * h + 1];
      if (A.V % 2 == 0 && jj + 1 < A.V) *reinterpret_cast<float2 *>(o + jj) = make_float2(x, y);
      else {
        if (jj < A.V) o[jj] = x;
        if (jj + 1 < A.V) o[jj + 1] = y;
      }
    }
  }
}
/* S <- e^gamma_L S + Kd^T Unew for warp wp's rows 16 wp.. + 15 (all 32 columns). */
__device__ __forceinline__ void sd_update(const float *G, const float *Kd, const double *Vs, int wp, int g,
                                          int q, double (&S)[4][4]) {
  const int ib = 16 * wp;
  const double g0 = G[ib + g], g1 = G[ib + g + 8];
#pragma unroll
  for (int ni = 0; ni < 4; ni++) S[ni][0] *= g0, S[ni][1] *= g0, S[ni][2] *= g1, S[ni][3] *= g1;
#pragma unroll sd_upd_unroll
  for (int t = 0; t < CT; t += 8) {
    double a[4], b[4][2];
    frag_at(a, Kd, KDS, ib, t, g, q);
#pragma unroll
    for (int ni = 0; ni < 4; ni++) frag_b(b[ni], Vs, t, 8 * ni, g, q);
#pragma unroll
    for (int ni = 0; ni < 4; ni++) dmma(S[ni], a, b[ni]);
  }
}
/* Lane (g, q) of warp wp holds S rows 16 wp + g + 8 (r >> 1), columns j0 + 8 ni + 2 q + (r & 1). */
#define SD_EACH(body)                                                                               \
  _Pragma("unroll") for (int ni = 0; ni < 4; ni++) _Pragma("unroll") for (int r = 0; r < 4; r++) { \
    const int64_t i = 16 * wp + g + 8 * (r >> 1), jj = w.j0 + 8 * ni + 2 * q + (r & 1);             \
    const bool in = i < A.K && jj < A.V;                                                             \
    body;                                                                                            \
  }
/* The initial state (zeros without h0 or for a padding entry). */
__device__ void sd_h0(const cargs &A, const scan_item &w, int wp, int g, int q, double (&S)[4][4]) {
  SD_EACH(S[ni][r] = A.has_h0 && w.slot >= 0 && in ? (double)A.h0[w.soff + state_idx(A, i, jj)] : 0.0)
}
/* S rounded to a float32 state at dst (a checkpoint, the final state). */
__device__ void sd_store(const cargs &A, const scan_item &w, int wp, int g, int q, const double (&S)[4][4],
                         float *dst) {
  SD_EACH(if (in) dst[state_idx(A, i, jj)] = (float)S[ni][r])
}
/* S into shared memory (float64) for the next chunk's Unew and outputs. */
__device__ __forceinline__ void sd_share(double *Ss, int wp, int g, int q, const double (&S)[4][4]) {
#pragma unroll
  for (int ni = 0; ni < 4; ni++)
#pragma unroll
    for (int h = 0; h < 2; h++)
      *reinterpret_cast<double2 *>(Ss + (16 * wp + g + 8 * h) * SDS + 8 * ni + 2 * q) =
          make_double2(S[ni][2 * h], S[ni][2 * h + 1]);
}

__global__ void __launch_bounds__(NTS, 1) kda_chunk_scan(const cargs A) {
  extern __shared__ __align__(16) double smd[];
  double *Ss = smd, *Vs = Ss + KP * SDS;
  float *Wb = reinterpret_cast<float *>(Vs + CT * SDS), *Ub = Wb + 2 * CT * KSTR, *Gb = Ub + 2 * CT * VS;
  float *Kb = Gb + 2 * KP, *Qb = Kb + CT * KDS, *Mb = Qb + CT * KSTR;
  const scan_item w = scan_item_of(A);
  const int wp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
  double S[4][4];
  sd_h0(A, w, wp, g, q, S);
  if (w.c0 < w.c1) sd_issue_wu(A, w.c0, w.hv, w.j0, Wb, Ub, Gb);
  __pipeline_commit();
  if (w.c0 < w.c1) sd_issue_kqm(A, w.c0, w.hv, Kb, Qb, Mb);
  __pipeline_commit();
  sd_share(Ss, wp, g, q, S);
  for (int64_t c = w.c0; c < w.c1; c++) {
    const int cur = (int)((c - w.c0) & 1), nxt = cur ^ 1;
    if (c + 1 < w.c1) sd_issue_wu(A, c + 1, w.hv, w.j0, Wb + nxt * CT * KSTR, Ub + nxt * CT * VS, Gb + nxt * KP);
    __pipeline_commit(); /* pending: W/U of c, Kd/Qs/M of c, W/U of c + 1 */
    __pipeline_wait_prior(2);
    __syncthreads(); /* W/U of c and S0 in shared memory */
    sd_unew(A, Wb + cur * CT * KSTR, Ub + cur * CT * VS, Ss, Vs, wp, g, q);
    __pipeline_wait_prior(1);
    __syncthreads(); /* Unew and Kd/Qs/M of c */
    sd_out(A, c, w, Qb, Mb, Ss, Vs, wp, g, q);
    sd_update(Gb + cur * KP, Kb, Vs, wp, g, q, S);
    const int cp = A.plan[4 * c + 2];
    if (cp >= 0) sd_store(A, w, wp, g, q, S, A.hc + ((int64_t)cp * A.HV + w.hv) * A.K * A.V);
    __syncthreads(); /* S0, Unew, Kd, Qs, M and this W/U buffer are read */
    if (c + 1 < w.c1) sd_issue_kqm(A, c + 1, w.hv, Kb, Qb, Mb);
    __pipeline_commit();
    sd_share(Ss, wp, g, q, S);
  }
  if (A.want_ht && w.slot >= 0) sd_store(A, w, wp, g, q, S, A.ht + w.soff);
}

/* ==== Host side ==== */

/* Walks the plan; fills it when plan is not NULL (n_total: the count, to place seq_first). */
static int64_t walk(const kda_problem *p, const int64_t *cu, const int64_t *ck, int32_t *plan,
                    int64_t n_total) {
  int64_t n_ch = 0, c = 0;
  for (int64_t n = 0; n < p->N; n++) {
    if (plan) plan[4 * n_total + n] = (int32_t)n_ch;
    while (c < p->n_checkpoints && ck[c] < cu[n]) c++;
    for (int64_t t = cu[n]; t < cu[n + 1];) {
      int64_t e = t + CT < cu[n + 1] ? t + CT : cu[n + 1];
      int32_t cp = -1;
      if (c < p->n_checkpoints && ck[c] < e) e = ck[c] + 1, cp = (int32_t)c++;
      if (plan) {
        int32_t *r = plan + 4 * n_ch;
        r[0] = (int32_t)t, r[1] = (int32_t)(e - t), r[2] = cp, r[3] = (int32_t)n;
      }
      n_ch++, t = e;
    }
  }
  if (plan) plan[4 * n_total + p->N] = (int32_t)n_ch;
  return n_ch;
}

int64_t kda_cuda_chunk_count(const kda_problem *p, const int64_t *cu, const int64_t *ck) {
  return walk(p, cu, ck, NULL, 0);
}
size_t kda_cuda_plan_ints(const kda_problem *p, int64_t n_chunks) {
  return 4 * (size_t)n_chunks + (size_t)p->N + 1;
}
void kda_cuda_chunk_fill(const kda_problem *p, const int64_t *cu, const int64_t *ck, int32_t *plan) {
  walk(p, cu, ck, plan, walk(p, cu, ck, NULL, 0));
}

static int64_t vpad(const kda_problem *p) { return (p->V + VS - 1) / VS * VS; }
static size_t up256(size_t x) { return (x + 255) / 256 * 256; }

/* Floats of each scratch array per (chunk, value head): W U Qs Kd gC M. */
#define NSCR 6
static void per_chunk(const kda_problem *p, size_t f[NSCR]) {
  const size_t VP = (size_t)vpad(p);
  const size_t v[NSCR] = {CT * KP, CT * VP, CT * KP, CT * KP, KP, CT * CT};
  for (int i = 0; i < NSCR; i++) f[i] = v[i];
}

size_t kda_cuda_chunk_bytes(const kda_problem *p, int64_t n_chunks) {
  size_t f[NSCR], total = 0;
  per_chunk(p, f);
  for (int i = 0; i < NSCR; i++) total += up256(f[i] * sizeof(float) * (size_t)n_chunks * (size_t)p->HV);
  return total;
}

void kda_cuda_chunk_scratch(cargs *a, void *base) {
  kda_problem p;
  p.V = a->V, p.HV = a->HV;
  size_t f[NSCR];
  per_chunk(&p, f);
  float **dst[NSCR] = {&a->W, &a->U, &a->Qs, &a->Kd, &a->gC, &a->M};
  char *at = (char *)base;
  for (int i = 0; i < NSCR; i++) {
    *dst[i] = (float *)at;
    at += up256(f[i] * sizeof(float) * (size_t)a->scratch_chunks * (size_t)a->HV);
  }
}

int kda_cuda_use_chunk(const kda_problem *p, int32_t algo, int64_t max_len, int64_t n_chunks,
                       size_t cap) {
  if (algo == 2 || p->K > KP || p->T == 0 || n_chunks < 1) return 0;
  const int64_t scan_blocks = p->N * p->HV * (vpad(p) / VS);
  if (n_chunks > 0x7fffffffLL || scan_blocks > 0x7fffffffLL || p->HV > 65535)
    return 0;
  if (algo == 1) return 1;
  /* auto: wide heads (K is padded to 128: small heads gain nothing), long sequences (the
   * recurrent kernel is better at a few tokens a sequence), at most 4 work items of 32
   * columns a multiprocessor for the recurrent kernel (B1 and B4 at H32, T8192 and up, are
   * faster chunked; more sequences give the recurrent kernel the parallelism it lacks at B1), and the longest sequence's scratch within the cap
   * (at most ceil(max_len / CT) + one a checkpoint chunks; more sequences run in slices: a
   * fixed cap, not the free memory, so the choice and the bits do not depend on what else the
   * card holds). */
  int dev = 0, sms = 132;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    sms = 132;
  const int64_t items32 = p->N * p->HV * ((p->V + 31) / 32);
  const int64_t longest = (max_len + CT - 1) / CT + p->n_checkpoints;
  return p->K > 64 && max_len >= 256 && items32 <= 4 * (int64_t)sms &&
         kda_cuda_chunk_bytes(p, longest < n_chunks ? longest : n_chunks) <= cap;
}

int64_t kda_cuda_chunk_slices(const kda_problem *p, const int32_t *plan, int64_t n_chunks, size_t cap,
                              int64_t *slices, int64_t *capacity) {
  const int32_t *seq_first = plan + 4 * n_chunks;
  const size_t per = kda_cuda_chunk_bytes(p, 1);
  const int64_t fit = (int64_t)(cap / per); /* chunks a slice may hold (up256 rounding aside) */
  int64_t ns = 0, big = 0;
  slices[0] = 0, slices[1] = 0;
  for (int64_t n = 0; n < p->N; n++) {
    const int64_t c = seq_first[n], len = seq_first[n + 1] - c;
    if (c > slices[2 * ns + 1] && c + len - slices[2 * ns + 1] > fit)
      ns++, slices[2 * ns] = n, slices[2 * ns + 1] = c; /* a new slice from sequence n */
    const int64_t in = c + len - slices[2 * ns + 1];
    if (in > big) big = in;
  }
  ns++, slices[2 * ns] = p->N, slices[2 * ns + 1] = n_chunks;
  *capacity = big > 0 ? big : 1;
  return ns;
}

static const size_t prep_bytes =
    (4 * CT * KSTR + CT * KP + 10 * KP + CT * ASTR + 2 * CT + CT * KSTR) * sizeof(float) +
    2 * CT * sizeof(double);
/* S0, Unew (float64); W, U, gC x 2, Kd, Qs, M: 226 304 bytes, within sm_90's 227 KB a block. */
static const size_t scan_bytes = (KP + CT) * SDS * sizeof(double) +
                                      (2 * CT * KSTR + 2 * CT * VS + 2 * KP + CT * KDS + CT * KSTR + CT * ASTR) *
                                          sizeof(float);

cudaError_t kda_cuda_chunk_run(const cargs *a, cudaStream_t st) {
  cudaError_t e = cudaFuncSetAttribute(kda_chunk_prep, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)prep_bytes);
  if (!e) e = cudaFuncSetAttribute(kda_chunk_scan, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)scan_bytes);
  if (e) return e;
  const int64_t one[4] = {0, 0, a->N, a->n_chunks};
  const int64_t *sl = a->slices ? a->slices : one, nsl = a->slices ? a->n_slices : 1;
  const int ph = a->phases ? a->phases : 7;
  for (int64_t s = 0; s < nsl; s++) { /* each slice a problem of its own, on the same scratch */
    cargs A = *a;
    A.n0 = sl[2 * s], A.cbase = sl[2 * s + 1];
    const int64_t seqs = sl[2 * s + 2] - A.n0, chunks = sl[2 * s + 3] - A.cbase;
    if ((ph & 1) && chunks > 0) kda_chunk_prep<<<dim3((unsigned)chunks, (unsigned)A.HV), NTP, prep_bytes, st>>>(A);
    if ((ph & 2) && seqs > 0) /* empty sequences too: their final state */
      kda_chunk_scan<<<(unsigned)(seqs * A.HV * (A.VP / VS)), NTS, scan_bytes, st>>>(A);
  }
  return cudaGetLastError();
}

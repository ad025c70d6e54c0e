/* kda_simd_avx2.c: the simd backend's AVX2+FMA kernel (8 floats a vector, 16 columns a block).
 * SPDX-License-Identifier: MIT
 *
 * Compiled with -mavx2 -mfma (this file only; the Makefile gives it the flags) and called only
 * after the CPU was found to have both.  One block is 16 value columns: two ymm vectors across
 * j for every key row i.  Tokens are pipelined so that the state makes ONE pass over the K
 * rows per token: the pass of token t does t's write and readout and then already t+1's decay
 * and erase (SPEC.md §3.1 steps 3, 4 of t and 1, 2 of t+1):
 *   x      = S[i] + kh_t[i] * d_t          write, d_t = b_t (v_t - p_t)
 *   o_t   += x * qh_t[i]                   readout on the written state
 *   x      = x * a_{t+1}[i]                decay for the next token
 *   p_t+1 += x * kh_{t+1}[i]               its prediction, on the decayed state
 *   S[i]   = x
 * Sums over i use two partial sums (even and odd rows) to hide the FMA latency.
 */
#include <immintrin.h>

#include "kda_simd.h"

#define BW 16 /* columns a block */

static inline __m256 bc(const float *p) { return _mm256_broadcast_ss(p); }

/* Decay by a_0 and predict with kh_0: the first half-step of the segment. */
static void prologue(const kda_simd_seg *s, float *base, __m256 p[4]) {
  const int64_t K = s->K;
  const float *a = s->a, *k = s->kh;
  __m256 e0 = _mm256_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
  int64_t i = 0;
  for (; i + 1 < K; i += 2) {
    float *r0 = base + i * BW, *r1 = r0 + BW;
    __m256 x0 = _mm256_mul_ps(_mm256_loadu_ps(r0), bc(a + i));
    __m256 x1 = _mm256_mul_ps(_mm256_loadu_ps(r0 + 8), bc(a + i));
    __m256 y0 = _mm256_mul_ps(_mm256_loadu_ps(r1), bc(a + i + 1));
    __m256 y1 = _mm256_mul_ps(_mm256_loadu_ps(r1 + 8), bc(a + i + 1));
    _mm256_storeu_ps(r0, x0), _mm256_storeu_ps(r0 + 8, x1);
    _mm256_storeu_ps(r1, y0), _mm256_storeu_ps(r1 + 8, y1);
    e0 = _mm256_fmadd_ps(x0, bc(k + i), e0), e1 = _mm256_fmadd_ps(x1, bc(k + i), e1);
    o0 = _mm256_fmadd_ps(y0, bc(k + i + 1), o0), o1 = _mm256_fmadd_ps(y1, bc(k + i + 1), o1);
  }
  if (i < K) {
    float *r0 = base + i * BW;
    __m256 x0 = _mm256_mul_ps(_mm256_loadu_ps(r0), bc(a + i));
    __m256 x1 = _mm256_mul_ps(_mm256_loadu_ps(r0 + 8), bc(a + i));
    _mm256_storeu_ps(r0, x0), _mm256_storeu_ps(r0 + 8, x1);
    e0 = _mm256_fmadd_ps(x0, bc(k + i), e0), e1 = _mm256_fmadd_ps(x1, bc(k + i), e1);
  }
  p[0] = e0, p[1] = e1, p[2] = o0, p[3] = o1;
}

/* Token t's write and readout, fused with token t+1's decay and prediction (into p). */
static void step_fused(const kda_simd_seg *s, float *base, int64_t t, __m256 d0, __m256 d1,
                       __m256 p[4], float *out) {
  const int64_t K = s->K;
  const float *kt = s->kh + t * K, *qt = s->qh + t * K;
  const float *an = s->a + (t + 1) * K, *kn = s->kh + (t + 1) * K;
  __m256 z = _mm256_setzero_ps();
  __m256 oe0 = z, oe1 = z, oo0 = z, oo1 = z, pe0 = z, pe1 = z, po0 = z, po1 = z;
  int64_t i = 0;
  for (; i + 1 < K; i += 2) {
    float *r0 = base + i * BW, *r1 = r0 + BW;
    __m256 x0 = _mm256_fmadd_ps(bc(kt + i), d0, _mm256_loadu_ps(r0));
    __m256 x1 = _mm256_fmadd_ps(bc(kt + i), d1, _mm256_loadu_ps(r0 + 8));
    oe0 = _mm256_fmadd_ps(x0, bc(qt + i), oe0), oe1 = _mm256_fmadd_ps(x1, bc(qt + i), oe1);
    x0 = _mm256_mul_ps(x0, bc(an + i)), x1 = _mm256_mul_ps(x1, bc(an + i));
    pe0 = _mm256_fmadd_ps(x0, bc(kn + i), pe0), pe1 = _mm256_fmadd_ps(x1, bc(kn + i), pe1);
    _mm256_storeu_ps(r0, x0), _mm256_storeu_ps(r0 + 8, x1);
    __m256 y0 = _mm256_fmadd_ps(bc(kt + i + 1), d0, _mm256_loadu_ps(r1));
    __m256 y1 = _mm256_fmadd_ps(bc(kt + i + 1), d1, _mm256_loadu_ps(r1 + 8));
    oo0 = _mm256_fmadd_ps(y0, bc(qt + i + 1), oo0), oo1 = _mm256_fmadd_ps(y1, bc(qt + i + 1), oo1);
    y0 = _mm256_mul_ps(y0, bc(an + i + 1)), y1 = _mm256_mul_ps(y1, bc(an + i + 1));
    po0 = _mm256_fmadd_ps(y0, bc(kn + i + 1), po0), po1 = _mm256_fmadd_ps(y1, bc(kn + i + 1), po1);
    _mm256_storeu_ps(r1, y0), _mm256_storeu_ps(r1 + 8, y1);
  }
  if (i < K) {
    float *r0 = base + i * BW;
    __m256 x0 = _mm256_fmadd_ps(bc(kt + i), d0, _mm256_loadu_ps(r0));
    __m256 x1 = _mm256_fmadd_ps(bc(kt + i), d1, _mm256_loadu_ps(r0 + 8));
    oe0 = _mm256_fmadd_ps(x0, bc(qt + i), oe0), oe1 = _mm256_fmadd_ps(x1, bc(qt + i), oe1);
    x0 = _mm256_mul_ps(x0, bc(an + i)), x1 = _mm256_mul_ps(x1, bc(an + i));
    pe0 = _mm256_fmadd_ps(x0, bc(kn + i), pe0), pe1 = _mm256_fmadd_ps(x1, bc(kn + i), pe1);
    _mm256_storeu_ps(r0, x0), _mm256_storeu_ps(r0 + 8, x1);
  }
  _mm256_storeu_ps(out, _mm256_add_ps(oe0, oo0));
  _mm256_storeu_ps(out + 8, _mm256_add_ps(oe1, oo1));
  p[0] = pe0, p[1] = pe1, p[2] = po0, p[3] = po1;
}

/* The last token of the segment: write and readout only, leaving S_t in place. */
static void step_last(const kda_simd_seg *s, float *base, int64_t t, __m256 d0, __m256 d1,
                      float *out) {
  const int64_t K = s->K;
  const float *kt = s->kh + t * K, *qt = s->qh + t * K;
  __m256 oe0 = _mm256_setzero_ps(), oe1 = oe0, oo0 = oe0, oo1 = oe0;
  int64_t i = 0;
  for (; i + 1 < K; i += 2) {
    float *r0 = base + i * BW, *r1 = r0 + BW;
    __m256 x0 = _mm256_fmadd_ps(bc(kt + i), d0, _mm256_loadu_ps(r0));
    __m256 x1 = _mm256_fmadd_ps(bc(kt + i), d1, _mm256_loadu_ps(r0 + 8));
    __m256 y0 = _mm256_fmadd_ps(bc(kt + i + 1), d0, _mm256_loadu_ps(r1));
    __m256 y1 = _mm256_fmadd_ps(bc(kt + i + 1), d1, _mm256_loadu_ps(r1 + 8));
    _mm256_storeu_ps(r0, x0), _mm256_storeu_ps(r0 + 8, x1);
    _mm256_storeu_ps(r1, y0), _mm256_storeu_ps(r1 + 8, y1);
    oe0 = _mm256_fmadd_ps(x0, bc(qt + i), oe0), oe1 = _mm256_fmadd_ps(x1, bc(qt + i), oe1);
    oo0 = _mm256_fmadd_ps(y0, bc(qt + i + 1), oo0), oo1 = _mm256_fmadd_ps(y1, bc(qt + i + 1), oo1);
  }
  if (i < K) {
    float *r0 = base + i * BW;
    __m256 x0 = _mm256_fmadd_ps(bc(kt + i), d0, _mm256_loadu_ps(r0));
    __m256 x1 = _mm256_fmadd_ps(bc(kt + i), d1, _mm256_loadu_ps(r0 + 8));
    _mm256_storeu_ps(r0, x0), _mm256_storeu_ps(r0 + 8, x1);
    oe0 = _mm256_fmadd_ps(x0, bc(qt + i), oe0), oe1 = _mm256_fmadd_ps(x1, bc(qt + i), oe1);
  }
  _mm256_storeu_ps(out, _mm256_add_ps(oe0, oo0));
  _mm256_storeu_ps(out + 8, _mm256_add_ps(oe1, oo1));
}

/* All tokens of the segment for the 16 columns starting at j, prefetching the next segment. */
static void block16(const kda_simd_seg *s, float *S, int64_t j, int64_t *pf_next, int64_t pf_per) {
  float *base = S + j * s->K;
  __m256 p[4];
  prologue(s, base, p);
  for (int64_t t = 0; t < s->L; t++) {
    __m256 p0 = _mm256_add_ps(p[0], p[2]), p1 = _mm256_add_ps(p[1], p[3]);
    if (!s->erase) p0 = p1 = _mm256_setzero_ps();
    const __m256 bt = bc(s->b + t);
    const float *vt = s->v + t * s->ldv + j;
    __m256 d0 = _mm256_mul_ps(bt, _mm256_sub_ps(_mm256_loadu_ps(vt), p0));
    __m256 d1 = _mm256_mul_ps(bt, _mm256_sub_ps(_mm256_loadu_ps(vt + 8), p1));
    float *out = s->o + t * s->ldo + j;
    kda_simd_prefetch(s, pf_next, pf_per);
    if (t + 1 < s->L)
      step_fused(s, base, t, d0, d1, p, out);
    else
      step_last(s, base, t, d0, d1, out);
  }
}

void kda_simd_kernel_avx2(const kda_simd_seg *s, float *S, int64_t j0, int64_t j1) {
  int64_t pf_next = 0, pf_per = kda_simd_prefetch_per(s, (j1 - j0) / BW * s->L);
  for (int64_t j = j0; j < j1; j += BW) block16(s, S, j, &pf_next, pf_per);
}

/* Twelve independent chains of x = x * m + c, in named registers (an array would live in
 * memory): enough to cover the FMA latency on two pipes. */
#define FMA12(f)                                                                                \
  f(x0) f(x1) f(x2) f(x3) f(x4) f(x5) f(x6) f(x7) f(x8) f(x9) f(x10) f(x11)
#define STEP(x) x = _mm256_fmadd_ps(x, m, c);
double kda_simd_fma_probe_avx2(int64_t iters) {
  const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
  __m256 x0 = _mm256_set1_ps(0.f), x1 = _mm256_set1_ps(1.f), x2 = _mm256_set1_ps(2.f);
  __m256 x3 = _mm256_set1_ps(3.f), x4 = _mm256_set1_ps(4.f), x5 = _mm256_set1_ps(5.f);
  __m256 x6 = _mm256_set1_ps(6.f), x7 = _mm256_set1_ps(7.f), x8 = _mm256_set1_ps(8.f);
  __m256 x9 = _mm256_set1_ps(9.f), x10 = _mm256_set1_ps(10.f), x11 = _mm256_set1_ps(11.f);
  for (int64_t n = 0; n < iters; n++) {
    FMA12(STEP)
  }
  __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)),
                           _mm256_add_ps(_mm256_add_ps(x4, x5), _mm256_add_ps(x6, x7)));
  sum = _mm256_add_ps(sum, _mm256_add_ps(_mm256_add_ps(x8, x9), _mm256_add_ps(x10, x11)));
  volatile float sink = _mm256_cvtss_f32(sum);
  (void)sink;
  return (double)iters * 12.0 * 8.0 * 2.0;
}

/* ==== Vector math for the coefficient pass (SPEC.md §4): exp, log1p and sums of squares.
 * Cephes-style single-precision approximations (about 1-2 ulp); the fp32 class allows 64 units
 * of 2^-24 on the whole result, and lanes outside the fast range go to libm. ==== */
#include <math.h>

/* exp(x) for x in [-87, 88]: x = n ln2 + r, exp(r) by a degree-6 polynomial, times 2^n. */
static inline __m256 exp_fast(__m256 x) {
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
  r = _mm256_fnmadd_ps(n, ln2_lo, r);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201E-1f));
  /* 1 + (r + r^2 y): exp(r) - 1 first, so that 1 + ... is the only rounding near 1.  The
   * former (1 + r) + r^2 y rounded twice and was 0.11 ulp low on average for r in
   * (-2e-4, 0), a systematic decay error (SPEC.md §7.3; check_simd test_exp_bias). */
  y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* x[i] = exp(x[i]); vectors with a lane outside [-87, 88] (or NaN, -inf) use libm's expf. */
void kda_simd_avx2_exp(float *x, int64_t n) {
  const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256 ok = _mm256_and_ps(_mm256_cmp_ps(v, lo, _CMP_GE_OQ), _mm256_cmp_ps(v, hi, _CMP_LE_OQ));
    if (_mm256_movemask_ps(ok) == 0xff) {
      _mm256_storeu_ps(x + i, exp_fast(v));
    } else {
      for (int c = 0; c < 8; c++) x[i + c] = expf(x[i + c]);
    }
  }
  for (; i < n; i++) x[i] = expf(x[i]);
}

/* log(w) for w in [1, 2] (Cephes logf: w = 2^e m, m in [sqrt(1/2), sqrt(2))). */
static inline __m256 log_1_2(__m256 w) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 big = _mm256_cmp_ps(w, _mm256_set1_ps(1.41421356237f), _CMP_GT_OQ);
  __m256 m = _mm256_blendv_ps(w, _mm256_mul_ps(w, _mm256_set1_ps(0.5f)), big);
  __m256 e = _mm256_and_ps(big, one);
  __m256 f = _mm256_sub_ps(m, one), z = _mm256_mul_ps(f, f);
  __m256 y = _mm256_set1_ps(7.0376836292E-2f);
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(-1.1514610310E-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.1676998740E-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(-1.2420140846E-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.4249322787E-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(-1.6668057665E-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(2.0000714765E-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(-2.4999993993E-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(3.3333331174E-1f));
  y = _mm256_mul_ps(_mm256_mul_ps(y, f), z);
  y = _mm256_fmadd_ps(e, _mm256_set1_ps(-2.12194440e-4f), y);
  y = _mm256_fnmadd_ps(_mm256_set1_ps(0.5f), z, y);
  return _mm256_fmadd_ps(e, _mm256_set1_ps(0.693359375f), _mm256_add_ps(f, y));
}

/* x[i] = log1p(x[i]) for x in [0, 1]: log(w) * x / (w - 1) with w = 1 + x rounded (the
 * correction restores the bits lost in w; w == 1 gives x). */
void kda_simd_avx2_log1p(float *x, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 u = _mm256_loadu_ps(x + i);
    __m256 ok = _mm256_and_ps(_mm256_cmp_ps(u, zero, _CMP_GE_OQ), _mm256_cmp_ps(u, one, _CMP_LE_OQ));
    if (_mm256_movemask_ps(ok) != 0xff) {
      for (int c = 0; c < 8; c++) x[i + c] = log1pf(x[i + c]);
      continue;
    }
    __m256 w = _mm256_add_ps(one, u), wm1 = _mm256_sub_ps(w, one);
    __m256 tiny = _mm256_cmp_ps(wm1, zero, _CMP_EQ_OQ);
    __m256 corr = _mm256_div_ps(u, _mm256_blendv_ps(wm1, one, tiny));
    __m256 r = _mm256_mul_ps(log_1_2(w), corr);
    _mm256_storeu_ps(x + i, _mm256_blendv_ps(r, u, tiny));
  }
  for (; i < n; i++) x[i] = log1pf(x[i]);
}

/* sum x[i]^2 with eight partial sums. */
float kda_simd_avx2_sumsq(const float *x, int64_t n) {
  __m256 s = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    s = _mm256_fmadd_ps(v, v, s);
  }
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  float r = _mm_cvtss_f32(h);
  for (; i < n; i++) r = fmaf(x[i], x[i], r);
  return r;
}

/* y[i] = mul * (x[i] / d). */
void kda_simd_avx2_scale_div(const float *x, int64_t n, float d, float mul, float *y) {
  const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(mul);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(vm, _mm256_div_ps(_mm256_loadu_ps(x + i), vd)));
  for (; i < n; i++) y[i] = mul * (x[i] / d);
}

/* SPEC.md §4.1 for n gate channels, a = exp(g_eff), vectorised (mode: KDA_GATE_* of
 * kda_problem.h: 0 log, 1 softplus, 2 lower_bound; use_eA: lower_bound with A_log).  tmp
 * holds n floats of scratch.  softplus(y) = max(y, 0) + log1p(exp(-|y|)); the sigmoid is
 * 1/(1+e) for z >= 0 and e/(1+e) below, with e = exp(-|z|). */
void kda_simd_avx2_gate(int32_t mode, const float *g, const float *bias, float eA,
                        int32_t use_eA, float lb, int64_t n, float *a, float *tmp) {
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  const __m256 veA = _mm256_set1_ps(eA), vlb = _mm256_set1_ps(lb);
  int64_t i = 0, n8 = n / 8 * 8;
  if (mode == 1 || mode == 2) {
    for (i = 0; i < n8; i += 8) {
      __m256 y = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(bias + i));
      if (mode == 2 && use_eA) y = _mm256_mul_ps(veA, y);
      _mm256_storeu_ps(a + i, y);
      _mm256_storeu_ps(tmp + i, _mm256_or_ps(y, sign));
    }
    for (; i < n; i++) {
      a[i] = g[i] + bias[i];
      if (mode == 2 && use_eA) a[i] = eA * a[i];
      tmp[i] = -fabsf(a[i]);
    }
    kda_simd_avx2_exp(tmp, n);
    if (mode == 1) kda_simd_avx2_log1p(tmp, n);
    for (i = 0; i < n8; i += 8) {
      __m256 y = _mm256_loadu_ps(a + i), e = _mm256_loadu_ps(tmp + i);
      if (mode == 1) {
        y = _mm256_xor_ps(_mm256_mul_ps(veA, _mm256_add_ps(_mm256_max_ps(y, zero), e)), sign);
      } else {
        __m256 den = _mm256_add_ps(one, e);
        __m256 num = _mm256_blendv_ps(e, one, _mm256_cmp_ps(y, zero, _CMP_GE_OQ));
        y = _mm256_mul_ps(vlb, _mm256_div_ps(num, den));
      }
      _mm256_storeu_ps(a + i, y);
    }
    for (; i < n; i++) {
      if (mode == 1) a[i] = -(eA * ((a[i] > 0.0f ? a[i] : 0.0f) + tmp[i]));
      else a[i] = lb * (a[i] >= 0.0f ? 1.0f / (1.0f + tmp[i]) : tmp[i] / (1.0f + tmp[i]));
    }
  } else {
    for (i = 0; i < n; i++) a[i] = g[i];
  }
  kda_simd_avx2_exp(a, n);
}

/* ==== Decode fast path (kda_simd.h: kda_simd_decode_avx2) ==== */
#include <stdint.h>

/* x to dst: a streaming (non-temporal) store when nt (dst 16-byte aligned), so that the new
 * state does not first read its lines from memory (it is not read again soon). */
static inline void st_state(float *dst, __m256 x, int nt) {
  if (nt) {
    _mm_stream_ps(dst, _mm256_castps256_ps128(x));
    _mm_stream_ps(dst + 4, _mm256_extractf128_ps(x, 1));
  } else {
    _mm256_storeu_ps(dst, x);
  }
}

void kda_simd_decode_avx2(const kda_simd_dec *d) {
  const int64_t K = d->K, ld = d->ld, n = d->ncol;
  const float *h0 = d->h0, *a = d->a, *k = d->kh, *q = d->qh;
  float *pe = d->scratch, *po = pe + n, *dd = po + n, *oo = dd + n;
  const __m256 z = _mm256_setzero_ps();
  /* Pass 1 (the kernel's prologue): x = S a_i; p += x kh_i, even rows into pe, odd into po. */
  for (int64_t c = 0; c < n; c += 8) _mm256_storeu_ps(pe + c, z), _mm256_storeu_ps(po + c, z);
  int64_t i = 0;
  for (; i + 1 < K; i += 2) {
    const float *r0 = h0 + i * ld, *r1 = r0 + ld;
    const __m256 a0 = bc(a + i), k0 = bc(k + i), a1 = bc(a + i + 1), k1 = bc(k + i + 1);
    for (int64_t c = 0; c < n; c += 8) {
      __m256 x = _mm256_mul_ps(_mm256_loadu_ps(r0 + c), a0);
      __m256 y = _mm256_mul_ps(_mm256_loadu_ps(r1 + c), a1);
      _mm256_storeu_ps(pe + c, _mm256_fmadd_ps(x, k0, _mm256_loadu_ps(pe + c)));
      _mm256_storeu_ps(po + c, _mm256_fmadd_ps(y, k1, _mm256_loadu_ps(po + c)));
    }
  }
  if (i < K) {
    const float *r0 = h0 + i * ld;
    const __m256 a0 = bc(a + i), k0 = bc(k + i);
    for (int64_t c = 0; c < n; c += 8) {
      __m256 x = _mm256_mul_ps(_mm256_loadu_ps(r0 + c), a0);
      _mm256_storeu_ps(pe + c, _mm256_fmadd_ps(x, k0, _mm256_loadu_ps(pe + c)));
    }
  }
  /* d = b (v - p) (p = 0 for the linear family); the readout sums restart in pe, po. */
  const __m256 bt = _mm256_set1_ps(d->b);
  for (int64_t c = 0; c < n; c += 8) {
    __m256 p = d->erase ? _mm256_add_ps(_mm256_loadu_ps(pe + c), _mm256_loadu_ps(po + c)) : z;
    _mm256_storeu_ps(dd + c, _mm256_mul_ps(bt, _mm256_sub_ps(_mm256_loadu_ps(d->v + c), p)));
    _mm256_storeu_ps(pe + c, z), _mm256_storeu_ps(oo + c, z);
  }
  /* Pass 2 (the kernel's last step): x = S a_i + kh_i d; ht = x; o += x qh_i (even/odd). */
  const int nt = ((uintptr_t)d->ht & 15) == 0 && (ld & 3) == 0;
  i = 0;
  for (; i + 1 < K; i += 2) {
    const float *r0 = h0 + i * ld, *r1 = r0 + ld;
    float *w0 = d->ht + i * ld, *w1 = w0 + ld;
    if (d->next_h0) /* rows i, i+1 of the next state: its pass 1 then reads them from L2 */
      for (int64_t c = 0; c < n; c += 16)
        _mm_prefetch((const char *)(d->next_h0 + i * ld + c), _MM_HINT_T1),
        _mm_prefetch((const char *)(d->next_h0 + (i + 1) * ld + c), _MM_HINT_T1);
    const __m256 a0 = bc(a + i), k0 = bc(k + i), q0 = bc(q + i);
    const __m256 a1 = bc(a + i + 1), k1 = bc(k + i + 1), q1 = bc(q + i + 1);
    for (int64_t c = 0; c < n; c += 8) {
      const __m256 dc = _mm256_loadu_ps(dd + c);
      __m256 x = _mm256_fmadd_ps(k0, dc, _mm256_mul_ps(_mm256_loadu_ps(r0 + c), a0));
      __m256 y = _mm256_fmadd_ps(k1, dc, _mm256_mul_ps(_mm256_loadu_ps(r1 + c), a1));
      st_state(w0 + c, x, nt), st_state(w1 + c, y, nt);
      _mm256_storeu_ps(pe + c, _mm256_fmadd_ps(x, q0, _mm256_loadu_ps(pe + c)));
      _mm256_storeu_ps(oo + c, _mm256_fmadd_ps(y, q1, _mm256_loadu_ps(oo + c)));
    }
  }
  if (i < K) {
    const float *r0 = h0 + i * ld;
    float *w0 = d->ht + i * ld;
    const __m256 a0 = bc(a + i), k0 = bc(k + i), q0 = bc(q + i);
    for (int64_t c = 0; c < n; c += 8) {
      __m256 x = _mm256_fmadd_ps(k0, _mm256_loadu_ps(dd + c),
                                 _mm256_mul_ps(_mm256_loadu_ps(r0 + c), a0));
      st_state(w0 + c, x, nt);
      _mm256_storeu_ps(pe + c, _mm256_fmadd_ps(x, q0, _mm256_loadu_ps(pe + c)));
    }
  }
  for (int64_t c = 0; c < n; c += 8)
    _mm256_storeu_ps(d->o + c, _mm256_add_ps(_mm256_loadu_ps(pe + c), _mm256_loadu_ps(oo + c)));
  if (nt) _mm_sfence();
}

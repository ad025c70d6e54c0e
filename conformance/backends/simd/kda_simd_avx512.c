/* kda_simd_avx512.c: the simd backend's AVX-512F kernel (16 floats a vector, 32 columns a block).
 * SPDX-License-Identifier: MIT
 *
 * Compiled with -mavx512f -mavx2 -mfma (this file only; the Makefile gives it the flags) and
 * called only after the CPU was found to have AVX-512F.  One block is 32 value columns: two
 * zmm vectors across j for every key row i.  Tokens are pipelined so that the state makes ONE
 * pass over the K rows per token: the pass of token t does t's write and readout and then already t+1's decay
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

#define BW 32 /* columns a block */

static inline __m512 bc(const float *p) { return _mm512_set1_ps(*p); }

/* The kernel runs NZ = 2 zmm vectors a row (one 32-column block) or NZ = 4 (two neighbouring
 * blocks at once, when the column range has them).  Vector c of a row lies at
 * off(c) = (c / 2) * 32K + (c % 2) * 16 from the row of the first block.  A pair does not
 * change any column's arithmetic (same operations, same even/odd sums); it halves the
 * broadcast loads and the per-token overhead per FMA and gives the core two independent
 * blocks to overlap at each token's boundary, where the next token waits for p. */
#define KERNEL_INLINE static inline __attribute__((always_inline))
#define FOR_Z _Pragma("GCC unroll 4") for (int c = 0; c < nz; c++)

/* Keeps the loaded row in a register, so that the write's FMA accumulates into it instead of
 * copying the broadcast key (gcc otherwise folds the load and adds a register move). */
#define REG(x) __asm__("" : "+v"(x))

KERNEL_INLINE int64_t off(int c, int64_t K) { return (int64_t)(c >> 1) * BW * K + (c & 1) * 16; }

/* Decay by a_0 and predict with kh_0: the first half-step of the segment (p[0..nz) even
 * rows, p[nz..2nz) odd rows). */
KERNEL_INLINE void prologue(const kda_simd_seg *s, float *base, int nz, __m512 *p) {
  const int64_t K = s->K;
  const float *a = s->a, *k = s->kh;
  __m512 e[4], o[4];
  FOR_Z e[c] = o[c] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 1 < K; i += 2) {
    float *r0 = base + i * BW, *r1 = r0 + BW;
    FOR_Z {
      __m512 x = _mm512_mul_ps(_mm512_loadu_ps(r0 + off(c, K)), bc(a + i));
      __m512 y = _mm512_mul_ps(_mm512_loadu_ps(r1 + off(c, K)), bc(a + i + 1));
      _mm512_storeu_ps(r0 + off(c, K), x), _mm512_storeu_ps(r1 + off(c, K), y);
      e[c] = _mm512_fmadd_ps(x, bc(k + i), e[c]), o[c] = _mm512_fmadd_ps(y, bc(k + i + 1), o[c]);
    }
  }
  if (i < K) {
    float *r0 = base + i * BW;
    FOR_Z {
      __m512 x = _mm512_mul_ps(_mm512_loadu_ps(r0 + off(c, K)), bc(a + i));
      _mm512_storeu_ps(r0 + off(c, K), x);
      e[c] = _mm512_fmadd_ps(x, bc(k + i), e[c]);
    }
  }
  FOR_Z p[c] = e[c], p[nz + c] = o[c];
}

/* Row r of token t: write and readout; with `next`, t+1's decay and prediction too. */
#define ROW(r, oacc, pacc)                                                                   \
  do {                                                                                       \
    float *row = base + (r) * BW;                                                            \
    const __m512 bk = bc(kt + (r)), bq = bc(qt + (r));                                       \
    FOR_Z {                                                                                  \
      __m512 x = _mm512_loadu_ps(row + off(c, K));                                          \
      REG(x);                                                                                \
      x = _mm512_fmadd_ps(bk, d[c], x);                                                      \
      oacc[c] = _mm512_fmadd_ps(x, bq, oacc[c]);                                             \
      if (next) {                                                                            \
        x = _mm512_mul_ps(x, bc(an + (r)));                                                  \
        pacc[c] = _mm512_fmadd_ps(x, bc(kn + (r)), pacc[c]);                                 \
      }                                                                                      \
      _mm512_storeu_ps(row + off(c, K), x);                                                  \
    }                                                                                        \
  } while (0)

/* Token t's write and readout, fused (next = 1) with token t+1's decay and prediction into
 * p; next = 0 for the segment's last token, leaving S_t in place.  o_t goes to out[c]. */
KERNEL_INLINE void step(const kda_simd_seg *s, float *base, int nz, int next, int64_t t,
                        const __m512 *d, __m512 *p, float *const *out) {
  const int64_t K = s->K;
  const float *kt = s->kh + t * K, *qt = s->qh + t * K;
  const float *an = next ? s->a + (t + 1) * K : NULL, *kn = next ? s->kh + (t + 1) * K : NULL;
  __m512 oe[4], oo[4], pe[4], po[4];
  FOR_Z oe[c] = oo[c] = pe[c] = po[c] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 1 < K; i += 2) {
    ROW(i, oe, pe);
    ROW(i + 1, oo, po);
  }
  if (i < K) ROW(i, oe, pe);
  FOR_Z _mm512_storeu_ps(out[c], _mm512_add_ps(oe[c], oo[c]));
  if (next) FOR_Z p[c] = pe[c], p[nz + c] = po[c];
}

/* All tokens of the segment for the nz/2 blocks from column j, prefetching the next segment. */
KERNEL_INLINE void blocks(const kda_simd_seg *s, float *S, int64_t j, int nz, int64_t *pf_next,
                          int64_t pf_per) {
  const int64_t K = s->K;
  float *base = S + j * K;
  __m512 p[8], d[4];
  float *out[4];
  prologue(s, base, nz, p);
  for (int64_t t = 0; t < s->L; t++) {
    const __m512 bt = bc(s->b + t);
    const float *vt = s->v + t * s->ldv + j;
    FOR_Z {
      const int64_t col = (c >> 1) * BW + (c & 1) * 16;
      __m512 pc = s->erase ? _mm512_add_ps(p[c], p[nz + c]) : _mm512_setzero_ps();
      d[c] = _mm512_mul_ps(bt, _mm512_sub_ps(_mm512_loadu_ps(vt + col), pc));
      out[c] = s->o + t * s->ldo + j + col;
    }
    kda_simd_prefetch(s, pf_next, pf_per);
    if (t + 1 < s->L)
      step(s, base, nz, 1, t, d, p, out);
    else
      step(s, base, nz, 0, t, d, p, out);
  }
}

static void block32(const kda_simd_seg *s, float *S, int64_t j, int64_t *pf_next, int64_t pf_per) {
  blocks(s, S, j, 2, pf_next, pf_per);
}
static void block64(const kda_simd_seg *s, float *S, int64_t j, int64_t *pf_next, int64_t pf_per) {
  blocks(s, S, j, 4, pf_next, pf_per);
}

void kda_simd_kernel_avx512(const kda_simd_seg *s, float *S, int64_t j0, int64_t j1) {
  int64_t pf_next = 0, pf_per = kda_simd_prefetch_per(s, (j1 - j0 + 2 * BW - 1) / (2 * BW) * s->L);
  int64_t j = j0;
  for (; j + 2 * BW <= j1; j += 2 * BW) block64(s, S, j, &pf_next, pf_per);
  if (j < j1) block32(s, S, j, &pf_next, pf_per);
}

/* Twelve independent chains of x = x * m + c, in named registers (an array would live in
 * memory): enough to cover the FMA latency on two pipes. */
#define FMA12(f)                                                                                \
  f(x0) f(x1) f(x2) f(x3) f(x4) f(x5) f(x6) f(x7) f(x8) f(x9) f(x10) f(x11)
#define STEP(x) x = _mm512_fmadd_ps(x, m, c);
double kda_simd_fma_probe_avx512(int64_t iters) {
  const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
  __m512 x0 = _mm512_set1_ps(0.f), x1 = _mm512_set1_ps(1.f), x2 = _mm512_set1_ps(2.f);
  __m512 x3 = _mm512_set1_ps(3.f), x4 = _mm512_set1_ps(4.f), x5 = _mm512_set1_ps(5.f);
  __m512 x6 = _mm512_set1_ps(6.f), x7 = _mm512_set1_ps(7.f), x8 = _mm512_set1_ps(8.f);
  __m512 x9 = _mm512_set1_ps(9.f), x10 = _mm512_set1_ps(10.f), x11 = _mm512_set1_ps(11.f);
  for (int64_t n = 0; n < iters; n++) {
    FMA12(STEP)
  }
  __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                           _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(x6, x7)));
  sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(x8, x9), _mm512_add_ps(x10, x11)));
  volatile float sink = _mm512_cvtss_f32(sum);
  (void)sink;
  return (double)iters * 12.0 * 16.0 * 2.0;
}

/* ==== Vector math of the coefficient pass, 16 lanes (the AVX2 file's Cephes-style
 * polynomials widened to zmm; about 1-2 ulp).  Tails use masked loads and stores; a vector
 * with a lane outside the fast range (or NaN, inf) is computed lane by lane with libm, exactly
 * as the scalar ISA does. ==== */
#include <math.h>

/* exp(x) for x in [-87, 88]: x = n ln2 + r, exp(r) by a degree-6 polynomial, scaled by 2^n. */
static inline __m512 exp16(__m512 x) {
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 y = _mm512_set1_ps(1.9875691500E-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507E-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073E-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894E-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459E-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201E-1f));
  /* 1 + (r + r^2 y): exp(r) - 1 first, so that 1 + ... is the only rounding near 1.  The
   * former (1 + r) + r^2 y rounded twice and was 0.11 ulp low on average for r in
   * (-2e-4, 0), a systematic decay error (SPEC.md §7.3; check_simd test_exp_bias). */
  y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

/* log(w) for w in [1, 2] (Cephes logf: w = 2^e m, m in [sqrt(1/2), sqrt(2))). */
static inline __m512 log16_1_2(__m512 w) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __mmask16 big = _mm512_cmp_ps_mask(w, _mm512_set1_ps(1.41421356237f), _CMP_GT_OQ);
  __m512 m = _mm512_mask_mul_ps(w, big, w, _mm512_set1_ps(0.5f));
  __m512 e = _mm512_maskz_mov_ps(big, one);
  __m512 f = _mm512_sub_ps(m, one), z = _mm512_mul_ps(f, f);
  __m512 y = _mm512_set1_ps(7.0376836292E-2f);
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-1.1514610310E-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.1676998740E-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-1.2420140846E-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.4249322787E-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-1.6668057665E-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(2.0000714765E-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-2.4999993993E-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(3.3333331174E-1f));
  y = _mm512_mul_ps(_mm512_mul_ps(y, f), z);
  y = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), y);
  y = _mm512_fnmadd_ps(_mm512_set1_ps(0.5f), z, y);
  return _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), _mm512_add_ps(f, y));
}

/* log1p(u) for u in [0, 1]: log(w) with w = 1 + u rounded, plus the part of u that w lost,
 * (u - (w - 1)) / w (exact difference; the reciprocal to ~2^-28 by one Newton step). */
static inline __m512 log1p16_0_1(__m512 u) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 w = _mm512_add_ps(one, u);
  __m512 lost = _mm512_sub_ps(u, _mm512_sub_ps(w, one));
  __m512 r = _mm512_rcp14_ps(w);
  r = _mm512_mul_ps(r, _mm512_fnmadd_ps(w, r, _mm512_set1_ps(2.0f)));
  return _mm512_fmadd_ps(lost, r, log16_1_2(w));
}

/* Lanes whose |x| is not <= lim (so NaN and inf too). */
static inline __mmask16 out16(__m512 x, float lim) {
  return _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(lim), _CMP_NLE_UQ);
}

/* One gate channel with libm, as the scalar ISA computes it (SPEC.md §4.1). */
static float gate1(int32_t mode, float g, float bias, float eA, int32_t use_eA, float lb) {
  float y = g;
  if (mode == 1) {
    y = y + bias;
    y = -(eA * ((y > 0.0f ? y : 0.0f) + log1pf(expf(-fabsf(y)))));
  } else if (mode == 2) {
    y = use_eA ? eA * (y + bias) : y + bias;
    const float e = expf(-fabsf(y));
    y = lb * (y >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e));
  }
  return expf(y);
}

/* SPEC.md §4.1, a = exp(g_eff), for n gate channels in one fused pass (mode: KDA_GATE_* of
 * kda_problem.h: 0 log, 1 softplus, 2 lower_bound; use_eA: lower_bound with A_log):
 * softplus(y) = max(y, 0) + log1p(exp(-|y|)), sigmoid(z) = 1/(1+e) or e/(1+e), e = exp(-|z|).
 * The fast path needs |y| <= 87 and the final exponent in [-87, 88]; any other lane (also
 * g = -inf) sends its vector to libm.  tmp is unused. */
void kda_simd_avx512_gate(int32_t mode, const float *g, const float *bias, float eA,
                          int32_t use_eA, float lb, int64_t n, float *a, float *tmp) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  const __m512 veA = _mm512_set1_ps(eA), vlb = _mm512_set1_ps(lb);
  (void)tmp;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 y = _mm512_maskz_loadu_ps(m, g + i), x = y;
    __mmask16 bad = 0;
    if (mode == 1 || mode == 2) {
      y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, bias + i));
      if (mode == 2 && use_eA) y = _mm512_mul_ps(veA, y);
      bad = out16(y, 87.0f);
      __m512 e = exp16(_mm512_sub_ps(zero, _mm512_abs_ps(y)));
      if (mode == 1) {
        __m512 sp = _mm512_add_ps(_mm512_max_ps(y, zero), log1p16_0_1(e));
        x = _mm512_sub_ps(zero, _mm512_mul_ps(veA, sp));
      } else {
        __m512 num = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(y, zero, _CMP_GE_OQ), one);
        x = _mm512_mul_ps(vlb, _mm512_div_ps(num, _mm512_add_ps(one, e)));
      }
    }
    bad |= _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_NGE_UQ) |
           _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.0f), _CMP_NLE_UQ);
    if ((bad & m) == 0) {
      _mm512_mask_storeu_ps(a + i, m, exp16(x));
    } else {
      for (int64_t c = i; c < n && c < i + 16; c++)
        a[c] = gate1(mode, g[c], mode ? bias[c] : 0.0f, eA, use_eA, lb);
    }
  }
}

/* sum x[i]^2 with two 16-lane partial sums (masked tail). */
float kda_simd_avx512_sumsq(const float *x, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 u = _mm512_loadu_ps(x + i), v = _mm512_loadu_ps(x + i + 16);
    s0 = _mm512_fmadd_ps(u, u, s0), s1 = _mm512_fmadd_ps(v, v, s1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 u = _mm512_maskz_loadu_ps(m, x + i);
    s0 = _mm512_fmadd_ps(u, u, s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* y[i] = x[i] * (mul / d): one rounding more than mul * (x[i] / d) (at most 1.5 ulp), and no
 * division per element. */
void kda_simd_avx512_scale_div(const float *x, int64_t n, float d, float mul, float *y) {
  const __m512 r = _mm512_set1_ps(mul / d);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), r));
  }
}

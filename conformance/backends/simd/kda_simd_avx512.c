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

/* Decay by a_0 and predict with kh_0: the first half-step of the segment. */
static void prologue(const kda_simd_seg *s, float *base, __m512 p[4]) {
  const int64_t K = s->K;
  const float *a = s->a, *k = s->kh;
  __m512 e0 = _mm512_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
  int64_t i = 0;
  for (; i + 1 < K; i += 2) {
    float *r0 = base + i * BW, *r1 = r0 + BW;
    __m512 x0 = _mm512_mul_ps(_mm512_loadu_ps(r0), bc(a + i));
    __m512 x1 = _mm512_mul_ps(_mm512_loadu_ps(r0 + 16), bc(a + i));
    __m512 y0 = _mm512_mul_ps(_mm512_loadu_ps(r1), bc(a + i + 1));
    __m512 y1 = _mm512_mul_ps(_mm512_loadu_ps(r1 + 16), bc(a + i + 1));
    _mm512_storeu_ps(r0, x0), _mm512_storeu_ps(r0 + 16, x1);
    _mm512_storeu_ps(r1, y0), _mm512_storeu_ps(r1 + 16, y1);
    e0 = _mm512_fmadd_ps(x0, bc(k + i), e0), e1 = _mm512_fmadd_ps(x1, bc(k + i), e1);
    o0 = _mm512_fmadd_ps(y0, bc(k + i + 1), o0), o1 = _mm512_fmadd_ps(y1, bc(k + i + 1), o1);
  }
  if (i < K) {
    float *r0 = base + i * BW;
    __m512 x0 = _mm512_mul_ps(_mm512_loadu_ps(r0), bc(a + i));
    __m512 x1 = _mm512_mul_ps(_mm512_loadu_ps(r0 + 16), bc(a + i));
    _mm512_storeu_ps(r0, x0), _mm512_storeu_ps(r0 + 16, x1);
    e0 = _mm512_fmadd_ps(x0, bc(k + i), e0), e1 = _mm512_fmadd_ps(x1, bc(k + i), e1);
  }
  p[0] = e0, p[1] = e1, p[2] = o0, p[3] = o1;
}

/* Token t's write and readout, fused with token t+1's decay and prediction (into p). */
static void step_fused(const kda_simd_seg *s, float *base, int64_t t, __m512 d0, __m512 d1,
                       __m512 p[4], float *out) {
  const int64_t K = s->K;
  const float *kt = s->kh + t * K, *qt = s->qh + t * K;
  const float *an = s->a + (t + 1) * K, *kn = s->kh + (t + 1) * K;
  __m512 z = _mm512_setzero_ps();
  __m512 oe0 = z, oe1 = z, oo0 = z, oo1 = z, pe0 = z, pe1 = z, po0 = z, po1 = z;
  int64_t i = 0;
  for (; i + 1 < K; i += 2) {
    float *r0 = base + i * BW, *r1 = r0 + BW;
    __m512 x0 = _mm512_fmadd_ps(bc(kt + i), d0, _mm512_loadu_ps(r0));
    __m512 x1 = _mm512_fmadd_ps(bc(kt + i), d1, _mm512_loadu_ps(r0 + 16));
    oe0 = _mm512_fmadd_ps(x0, bc(qt + i), oe0), oe1 = _mm512_fmadd_ps(x1, bc(qt + i), oe1);
    x0 = _mm512_mul_ps(x0, bc(an + i)), x1 = _mm512_mul_ps(x1, bc(an + i));
    pe0 = _mm512_fmadd_ps(x0, bc(kn + i), pe0), pe1 = _mm512_fmadd_ps(x1, bc(kn + i), pe1);
    _mm512_storeu_ps(r0, x0), _mm512_storeu_ps(r0 + 16, x1);
    __m512 y0 = _mm512_fmadd_ps(bc(kt + i + 1), d0, _mm512_loadu_ps(r1));
    __m512 y1 = _mm512_fmadd_ps(bc(kt + i + 1), d1, _mm512_loadu_ps(r1 + 16));
    oo0 = _mm512_fmadd_ps(y0, bc(qt + i + 1), oo0), oo1 = _mm512_fmadd_ps(y1, bc(qt + i + 1), oo1);
    y0 = _mm512_mul_ps(y0, bc(an + i + 1)), y1 = _mm512_mul_ps(y1, bc(an + i + 1));
    po0 = _mm512_fmadd_ps(y0, bc(kn + i + 1), po0), po1 = _mm512_fmadd_ps(y1, bc(kn + i + 1), po1);
    _mm512_storeu_ps(r1, y0), _mm512_storeu_ps(r1 + 16, y1);
  }
  if (i < K) {
    float *r0 = base + i * BW;
    __m512 x0 = _mm512_fmadd_ps(bc(kt + i), d0, _mm512_loadu_ps(r0));
    __m512 x1 = _mm512_fmadd_ps(bc(kt + i), d1, _mm512_loadu_ps(r0 + 16));
    oe0 = _mm512_fmadd_ps(x0, bc(qt + i), oe0), oe1 = _mm512_fmadd_ps(x1, bc(qt + i), oe1);
    x0 = _mm512_mul_ps(x0, bc(an + i)), x1 = _mm512_mul_ps(x1, bc(an + i));
    pe0 = _mm512_fmadd_ps(x0, bc(kn + i), pe0), pe1 = _mm512_fmadd_ps(x1, bc(kn + i), pe1);
    _mm512_storeu_ps(r0, x0), _mm512_storeu_ps(r0 + 16, x1);
  }
  _mm512_storeu_ps(out, _mm512_add_ps(oe0, oo0));
  _mm512_storeu_ps(out + 16, _mm512_add_ps(oe1, oo1));
  p[0] = pe0, p[1] = pe1, p[2] = po0, p[3] = po1;
}

/* The last token of the segment: write and readout only, leaving S_t in place. */
static void step_last(const kda_simd_seg *s, float *base, int64_t t, __m512 d0, __m512 d1,
                      float *out) {
  const int64_t K = s->K;
  const float *kt = s->kh + t * K, *qt = s->qh + t * K;
  __m512 oe0 = _mm512_setzero_ps(), oe1 = oe0, oo0 = oe0, oo1 = oe0;
  int64_t i = 0;
  for (; i + 1 < K; i += 2) {
    float *r0 = base + i * BW, *r1 = r0 + BW;
    __m512 x0 = _mm512_fmadd_ps(bc(kt + i), d0, _mm512_loadu_ps(r0));
    __m512 x1 = _mm512_fmadd_ps(bc(kt + i), d1, _mm512_loadu_ps(r0 + 16));
    __m512 y0 = _mm512_fmadd_ps(bc(kt + i + 1), d0, _mm512_loadu_ps(r1));
    __m512 y1 = _mm512_fmadd_ps(bc(kt + i + 1), d1, _mm512_loadu_ps(r1 + 16));
    _mm512_storeu_ps(r0, x0), _mm512_storeu_ps(r0 + 16, x1);
    _mm512_storeu_ps(r1, y0), _mm512_storeu_ps(r1 + 16, y1);
    oe0 = _mm512_fmadd_ps(x0, bc(qt + i), oe0), oe1 = _mm512_fmadd_ps(x1, bc(qt + i), oe1);
    oo0 = _mm512_fmadd_ps(y0, bc(qt + i + 1), oo0), oo1 = _mm512_fmadd_ps(y1, bc(qt + i + 1), oo1);
  }
  if (i < K) {
    float *r0 = base + i * BW;
    __m512 x0 = _mm512_fmadd_ps(bc(kt + i), d0, _mm512_loadu_ps(r0));
    __m512 x1 = _mm512_fmadd_ps(bc(kt + i), d1, _mm512_loadu_ps(r0 + 16));
    _mm512_storeu_ps(r0, x0), _mm512_storeu_ps(r0 + 16, x1);
    oe0 = _mm512_fmadd_ps(x0, bc(qt + i), oe0), oe1 = _mm512_fmadd_ps(x1, bc(qt + i), oe1);
  }
  _mm512_storeu_ps(out, _mm512_add_ps(oe0, oo0));
  _mm512_storeu_ps(out + 16, _mm512_add_ps(oe1, oo1));
}

/* All tokens of the segment for the 32 columns starting at j, prefetching the next segment. */
static void block32(const kda_simd_seg *s, float *S, int64_t j, int64_t *pf_next, int64_t pf_per) {
  float *base = S + j * s->K;
  __m512 p[4];
  prologue(s, base, p);
  for (int64_t t = 0; t < s->L; t++) {
    __m512 p0 = _mm512_add_ps(p[0], p[2]), p1 = _mm512_add_ps(p[1], p[3]);
    if (!s->erase) p0 = p1 = _mm512_setzero_ps();
    const __m512 bt = bc(s->b + t);
    const float *vt = s->v + t * s->Vp + j;
    __m512 d0 = _mm512_mul_ps(bt, _mm512_sub_ps(_mm512_loadu_ps(vt), p0));
    __m512 d1 = _mm512_mul_ps(bt, _mm512_sub_ps(_mm512_loadu_ps(vt + 16), p1));
    float *out = s->o + t * s->Vp + j;
    kda_simd_prefetch(s, pf_next, pf_per);
    if (t + 1 < s->L)
      step_fused(s, base, t, d0, d1, p, out);
    else
      step_last(s, base, t, d0, d1, out);
  }
}

void kda_simd_kernel_avx512(const kda_simd_seg *s, float *S, int64_t j0, int64_t j1) {
  int64_t pf_next = 0, pf_per = kda_simd_prefetch_per(s, (j1 - j0) / BW * s->L);
  for (int64_t j = j0; j < j1; j += BW) block32(s, S, j, &pf_next, pf_per);
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

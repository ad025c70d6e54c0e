/* kda_simd_scalar.c: the simd backend's portable kernel (plain C, 8 columns a block).
 * SPDX-License-Identifier: MIT
 *
 * The same token pipeline as the vector kernels (kda_simd_avx2.c explains it) in ISO C with
 * separate multiplies and adds (the build uses -ffp-contract=off): one pass over the K rows of
 * the block per token, doing token t's write and readout and token t+1's decay and prediction.
 * The inner loops over the 8 columns are what a compiler may vectorise for the baseline ISA.
 */
#include "kda_simd.h"

#define W 8

/* Decay by a_0 and predict with kh_0. */
static void prologue(const kda_simd_seg *s, float *base, float p[W]) {
  for (int c = 0; c < W; c++) p[c] = 0.0f;
  for (int64_t i = 0; i < s->K; i++) {
    float *r = base + i * W;
    const float a = s->a[i], k = s->kh[i];
    for (int c = 0; c < W; c++) {
      float x = r[c] * a;
      r[c] = x;
      p[c] = p[c] + x * k;
    }
  }
}

static void block8(const kda_simd_seg *s, float *S, int64_t j, int64_t *pf_next, int64_t pf_per) {
  const int64_t K = s->K;
  float *base = S + j * K;
  float p[W], d[W], o[W];
  prologue(s, base, p);
  for (int64_t t = 0; t < s->L; t++) {
    const float b = s->b[t], *vt = s->v + t * s->ldv + j;
    kda_simd_prefetch(s, pf_next, pf_per);
    for (int c = 0; c < W; c++) d[c] = b * (vt[c] - (s->erase ? p[c] : 0.0f));
    for (int c = 0; c < W; c++) o[c] = 0.0f, p[c] = 0.0f;
    const float *kt = s->kh + t * K, *qt = s->qh + t * K;
    if (t + 1 < s->L) {
      const float *an = s->a + (t + 1) * K, *kn = s->kh + (t + 1) * K;
      for (int64_t i = 0; i < K; i++) {
        float *r = base + i * W;
        for (int c = 0; c < W; c++) {
          float x = r[c] + kt[i] * d[c];
          o[c] = o[c] + x * qt[i];
          x = x * an[i];
          p[c] = p[c] + x * kn[i];
          r[c] = x;
        }
      }
    } else {
      for (int64_t i = 0; i < K; i++) {
        float *r = base + i * W;
        for (int c = 0; c < W; c++) {
          float x = r[c] + kt[i] * d[c];
          o[c] = o[c] + x * qt[i];
          r[c] = x;
        }
      }
    }
    float *out = s->o + t * s->ldo + j;
    for (int c = 0; c < W; c++) out[c] = o[c];
  }
}

void kda_simd_kernel_scalar(const kda_simd_seg *s, float *S, int64_t j0, int64_t j1) {
  int64_t pf_next = 0, pf_per = kda_simd_prefetch_per(s, (j1 - j0) / W * s->L);
  for (int64_t j = j0; j < j1; j += W) block8(s, S, j, &pf_next, pf_per);
}

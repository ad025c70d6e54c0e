/* kda_simd.h: internals of the `simd` backend: the per-ISA kernels and the FMA peak probe.
 * SPDX-License-Identifier: MIT
 *
 * Not installed.  The backend (kda_simd.c) prepares, for one (sequence, value head) and a
 * segment of L consecutive tokens, the per-token coefficients of SPEC.md §3.1
 *   qh[t][i] = scale * L2(q)_i,  kh[t][i] = L2(k)_i,  a[t][i] = exp(g_eff[t][i]),  b[t],
 * and the values v[t][j] (a copy padded with zeros to Vp columns, or the caller's own rows
 * when V is a multiple of the block width).  A kernel then advances the
 * state S over the L tokens for the value columns [j0, j1), writing o[t][j] = sum_i S_t[i][j]
 * qh[t][i].  S is block-major: with W = kda_simd_width(isa), the block of columns [jb, jb+W)
 * (jb a multiple of W) holds its K rows of W floats contiguously, S_t[i][j] at
 * S[jb*K + i*W + (j - jb)], so one block's rows stay together in L1.  Each column j of S evolves on its own
 * given the coefficients, so a kernel vectorises across j and keeps no cross-column state:
 * the result of a column does not depend on which block or thread computed it.
 */
#ifndef KDA_SIMD_H
#define KDA_SIMD_H

#include <stdint.h>

#define KDA_SIMD_ISA_SCALAR 0
#define KDA_SIMD_ISA_AVX2 1
#define KDA_SIMD_ISA_AVX512 2
#define KDA_SIMD_ISA_COUNT 3

/* One segment of tokens for one (sequence, head), coefficients already prepared. */
typedef struct kda_simd_seg {
  int64_t K, L;              /* key rows, tokens */
  int64_t ldv, ldo;          /* floats from one token's row of v (of o) to the next's */
  const float *qh, *kh, *a;  /* [L][K] */
  const float *b;            /* [L] */
  const float *v;            /* L rows, ldv apart: column j of token t at v[t * ldv + j] */
  float *o;                  /* L rows, ldo apart; the kernel writes columns [j0, j1) only */
  int32_t erase;             /* 0: the linear family (prediction p = 0) */
  int32_t reserved0;
  /* Cache lines of the inputs (and outputs) of the NEXT segment, for the kernel to prefetch a
   * few at a time while it works (their rows are H*K floats apart, too far apart for the
   * hardware prefetchers); npf may be 0. */
  const void *const *pf;
  int64_t npf;
} kda_simd_seg;

/* Spreads the segment's prefetches over the kernel: *next counts those issued; each call
 * issues `per` more. */
static inline void kda_simd_prefetch(const kda_simd_seg *s, int64_t *next, int64_t per) {
  for (int64_t e = *next + per < s->npf ? *next + per : s->npf; *next < e; ++*next)
    __builtin_prefetch(s->pf[*next]);
}
/* How many prefetches each of `steps` calls should issue to cover the list. */
static inline int64_t kda_simd_prefetch_per(const kda_simd_seg *s, int64_t steps) {
  return steps > 0 ? (s->npf + steps - 1) / steps : s->npf;
}

/* Advances S over the segment for columns [j0, j1); j0 and j1 are multiples of the ISA's
 * width (kda_simd_width), j1 <= Vp.  The state left in S is the state after token L-1. */
typedef void (*kda_simd_kernel_fn)(const kda_simd_seg *s, float *S, int64_t j0, int64_t j1);

void kda_simd_kernel_scalar(const kda_simd_seg *s, float *S, int64_t j0, int64_t j1);
void kda_simd_kernel_avx2(const kda_simd_seg *s, float *S, int64_t j0, int64_t j1);
void kda_simd_kernel_avx512(const kda_simd_seg *s, float *S, int64_t j0, int64_t j1);

/* Decode fast path (AVX2): ONE token of one (sequence, head) applied straight from the
 * caller's stored state h0 to ht (K-major layout, rows ld floats apart), no block-major copy.
 * Two passes over the K rows: decay and predict (reading h0), then write, readout and store
 * (h0 again, from cache, to ht).  The arithmetic of each column is exactly that of
 * kda_simd_kernel_avx2 with L = 1 (same operations, same even/odd partial sums), so results
 * do not depend on which path computed a column.  ncol is a multiple of 8; h0, ht, v, o point
 * at the first column; ht may equal h0; scratch holds 4 * ncol floats. */
typedef struct kda_simd_dec {
  int64_t K, ld, ncol;
  const float *h0;
  float *ht;
  const float *qh, *kh, *a; /* [K] */
  float b;
  int32_t erase;
  const float *v; /* [ncol] */
  float *o;       /* [ncol] */
  float *scratch; /* [4 * ncol] */
  const float *next_h0; /* the state the next call will read (same shape), or NULL: pass 2
                           prefetches it to L2 while it works from cache */
} kda_simd_dec;
void kda_simd_decode_avx2(const kda_simd_dec *d);

/* Columns per kernel block of each ISA (Vp is a multiple of it). */
int64_t kda_simd_width(int32_t isa);
/* "scalar", "avx2", "avx512", or NULL. */
const char *kda_simd_isa_name(int32_t isa);
/* 1 when this CPU (and OS) can run the ISA's kernel; otherwise 0 and a reason in why. */
int kda_simd_isa_available(int32_t isa, const char **why);
/* The best available ISA. */
int32_t kda_simd_isa_best(void);

/* Vector math of the coefficient pass (kda_simd_avx2.c; exp and log1p also in the AVX-512 table).
 * exp in place; log1p in place for x in [0, 1]; sum of squares; y = mul * (x / d). */
void kda_simd_avx2_exp(float *x, int64_t n);
void kda_simd_avx2_log1p(float *x, int64_t n);
float kda_simd_avx2_sumsq(const float *x, int64_t n);
void kda_simd_avx2_scale_div(const float *x, int64_t n, float d, float mul, float *y);
/* a = exp(g_eff) of n gate channels (SPEC.md §4.1); mode is the KDA_GATE_* code, use_eA 1 when
 * the lower_bound gate has A_log (eA = exp(A_log)); tmp is n floats of scratch. */
void kda_simd_avx2_gate(int32_t mode, const float *g, const float *bias, float eA,
                        int32_t use_eA, float lb, int64_t n, float *a, float *tmp);

/* The same for the AVX-512 build (kda_simd_avx512.c; only call when AVX-512F is available):
 * the gate in ONE fused pass per row (no scratch; tmp is unused), and y = x * (mul / d). */
void kda_simd_avx512_gate(int32_t mode, const float *g, const float *bias, float eA,
                          int32_t use_eA, float lb, int64_t n, float *a, float *tmp);
float kda_simd_avx512_sumsq(const float *x, int64_t n);
void kda_simd_avx512_scale_div(const float *x, int64_t n, float d, float mul, float *y);

/* FMA peak probe: runs `iters` iterations of independent FMA chains on one core and returns
 * the number of floating-point operations performed (2 per lane per FMA).  Only call for an
 * available ISA; the scalar probe counts fmaf-free multiply-adds (2 flops each). */
double kda_simd_fma_probe_avx2(int64_t iters);
double kda_simd_fma_probe_avx512(int64_t iters);

#endif

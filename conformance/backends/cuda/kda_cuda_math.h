/* kda_cuda_math.h: the float64 e^z (z <= 0), log1p (on (0, 1]), softplus and sigmoid of the CUDA
 * prologue's gate and beta coefficients (SPEC.md §4.1, §4.2, in the forms of §9.2), and the
 * float pairs the chunked prep sums its log-decays in (at the end).
 * SPDX-License-Identifier: MIT
 *
 * Why not CUDA's exp and log1p: the prologue's gate kernel evaluates softplus once a gate
 * element (134 M of them at B1 T32768 H32) and, with libdevice's double exp and log1p, issued
 * about 290 instructions an element (72 of them float64: ncu on the H200, docs/cuda.md), most
 * of them argument checks and special cases this prologue never needs.  Here each function
 * serves exactly the range its callers give it and is a plain chain of float64 operations:
 *
 *   e^z, z <= 0: n = rint(z / ln 2), r = z - n ln 2 (two-part ln 2, |r| <= ln2/2), the
 *     Taylor polynomial of degree 12 (truncation (ln2/2)^13 / 13! < 2^-52), times 2^n as two
 *     powers of two built in the exponent field (so subnormal results round as e^z's do).
 *   log1p(e), 0 < e <= 1: 2 atanh(s) with s = f / (2 + f), f = e (e <= sqrt2 - 1) or
 *     f = (e - 1) / 2 and ln 2 added (e > sqrt2 - 1), so |s| <= 0.1716 and the odd series to
 *     s^19 leaves s^20 / 21 < 2^-55 of the result; the division is a float reciprocal, one
 *     Newton step and one correction of the quotient.
 *   softplus(y) = max(y, 0) + log1p(e^-|y|), sigmoid(y) = 1 / (1 + e^-y) (y >= 0) or
 *     e^y / (1 + e^y): the §9.2 forms, exactly as kda_cuda_kernels.cu used them with CUDA's
 *     functions.
 *
 * Each normal result is within 2^-48 of the exact value, relative (conformance/tests/check_cuda.c
 * checks that bound against MPFR over millions of arguments), so rounding it to float gives the
 * correctly rounded float except when the exact value lies within 2^-48 of a midpoint between two
 * floats, and then a neighbour: the coefficients stay "float64, rounded to float once" in the
 * sense of docs/cuda.md item 1, as they were with CUDA's functions (within about 2^-52).
 *
 * The same source runs on the device and on the host (the test): every operation is an
 * explicit IEEE operation in round-to-nearest (no contraction into FMA on either side; the host
 * build uses -ffp-contract=off), so both give the same bits.  NaN in, NaN out.
 */
#ifndef KDA_CUDA_MATH_H
#define KDA_CUDA_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KCM_FN __host__ __device__ static inline
#else
#define KCM_FN static inline
#endif

#ifdef __CUDA_ARCH__
#define KCM_MUL(a, b) __dmul_rn(a, b)
#define KCM_ADD(a, b) __dadd_rn(a, b)
#define KCM_FMA(a, b, c) __fma_rn(a, b, c)
#else
#define KCM_MUL(a, b) ((a) * (b))
#define KCM_ADD(a, b) ((a) + (b))
#define KCM_FMA(a, b, c) fma(a, b, c)
#endif

KCM_FN uint64_t kcm_bits(double x) {
#ifdef __CUDA_ARCH__
  return (uint64_t)__double_as_longlong(x);
#else
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}

KCM_FN double kcm_double(uint64_t u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double((long long)u);
#else
  double x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/* 1 / x in float, round to nearest (IEEE division on both sides). */
KCM_FN float kcm_frcp(float x) {
#ifdef __CUDA_ARCH__
  return __frcp_rn(x);
#else
  return 1.0f / x;
#endif
}

/* e^z for z <= 0 (and -inf): within 2^-51 relative while e^z is a normal double (z >= -708),
 * the correctly scaled subnormal below that, +0 below -1100 (e^z < 2^-1074 there too). */
KCM_FN double kcm_exp_neg(double z) {
  const double SHIFT = 6755399441055744.0; /* 1.5 * 2^52: t's low bits hold rint(z log2 e) */
  const double LOG2E = 1.4426950408889634;
  const double LN2_HI = 0x1.62e42fefa39efp-1, LN2_LO = 0x1.abc9e3b39803fp-56;
  const double zc = z < -1100.0 ? -1100.0 : z; /* NaN compares false, stays and propagates */
  const double t = KCM_FMA(zc, LOG2E, SHIFT);
  const double n = KCM_ADD(t, -SHIFT); /* exact */
  double r = KCM_FMA(n, -LN2_HI, zc);
  r = KCM_FMA(n, -LN2_LO, r);
  double p = 2.08767569878681e-09; /* 1 / 12! ... 1 / 2!, 1, 1 (Horner) */
  p = KCM_FMA(p, r, 2.505210838544172e-08);
  p = KCM_FMA(p, r, 2.755731922398589e-07);
  p = KCM_FMA(p, r, 2.7557319223985893e-06);
  p = KCM_FMA(p, r, 2.48015873015873e-05);
  p = KCM_FMA(p, r, 0.0001984126984126984);
  p = KCM_FMA(p, r, 0.001388888888888889);
  p = KCM_FMA(p, r, 0.008333333333333333);
  p = KCM_FMA(p, r, 0.041666666666666664);
  p = KCM_FMA(p, r, 0.16666666666666666);
  p = KCM_FMA(p, r, 0.5);
  p = KCM_FMA(p, r, 1.0);
  p = KCM_FMA(p, r, 1.0);
  /* p * 2^n, n in [-1587, 0], as p * 2^n1 (exact: normal) * 2^n2 (one rounding, to a
   * subnormal or +0 where e^z is one), n1 = floor(n / 2), n2 = n - n1, both normal powers;
   * the low 32 bits of t are n in two's complement (SHIFT's are zero). */
  const int32_t ni = (int32_t)(uint32_t)kcm_bits(t), n1 = ni >> 1, n2 = ni - n1;
  const double f1 = kcm_double((uint64_t)(n1 + 1023) << 52), f2 = kcm_double((uint64_t)(n2 + 1023) << 52);
  return KCM_MUL(KCM_MUL(p, f1), f2);
}

/* log1p(e) for 0 <= e <= 1 (the callers pass e^-|y|), within 2^-51 relative for normal e; for a
 * subnormal e, e itself give or take its last bit. */
KCM_FN double kcm_log1p_unit(double e) {
  const double LN2_HI = 0x1.62e42fefa39efp-1, LN2_LO = 0x1.abc9e3b39803fp-56;
  const int big = e > 0.41421356237309503; /* 1 + e > sqrt 2: log((1 + e) / 2) + ln 2 */
  const double f = big ? KCM_MUL(KCM_ADD(e, -1.0), 0.5) : e; /* log1p(f), |f| <= 0.415 */
  const double d = KCM_ADD(2.0, f);
  /* s = f / d: a float reciprocal (2^-24), one Newton step (2^-48), then the quotient's
   * residual f - d s0 corrects s0 to about 2^-53. */
  const double r0 = (double)kcm_frcp((float)d);
  const double r1 = KCM_FMA(r0, KCM_FMA(-d, r0, 1.0), r0);
  const double s0 = KCM_MUL(f, r1);
  const double s = KCM_FMA(KCM_FMA(-d, s0, f), r1, s0);
  /* log1p(f) = 2 atanh(s) = 2 s + s^3 (2/3 + s^2 (2/5 + ... + s^2 2/19)) */
  const double s2 = KCM_MUL(s, s), s3 = KCM_MUL(s2, s);
  double q = 0.10526315789473684;
  q = KCM_FMA(q, s2, 0.11764705882352941);
  q = KCM_FMA(q, s2, 0.13333333333333333);
  q = KCM_FMA(q, s2, 0.15384615384615385);
  q = KCM_FMA(q, s2, 0.18181818181818182);
  q = KCM_FMA(q, s2, 0.2222222222222222);
  q = KCM_FMA(q, s2, 0.2857142857142857);
  q = KCM_FMA(q, s2, 0.4);
  q = KCM_FMA(q, s2, 0.6666666666666666);
  const double l = KCM_FMA(s3, q, KCM_ADD(s, s));
  return big ? KCM_ADD(LN2_HI, KCM_ADD(l, LN2_LO)) : l;
}

/* softplus(y) = max(y, 0) + log1p(e^-|y|) (SPEC.md §4.1, §9.2: no threshold). */
KCM_FN double kcm_softplus(double y) {
  return KCM_ADD(y > 0.0 ? y : 0.0, kcm_log1p_unit(kcm_exp_neg(-fabs(y)))); /* NaN: NaN */
}

/* sigmoid in the form that never overflows (SPEC.md §9.2). */
KCM_FN double kcm_sigmoid(double y) {
  if (y >= 0.0) return 1.0 / KCM_ADD(1.0, kcm_exp_neg(-y));
  const double e = kcm_exp_neg(y);
  return e / KCM_ADD(1.0, e);
}

/* ---- Float pairs for the chunked prep's cumulative log-decays (kda_cuda_chunk.cu) ----
 * A sum of gates kept as hi + lo: each float x is added to hi by TwoSum (Knuth: s = RN(hi + x)
 * and its exact error, for any magnitudes), the errors summed in lo.  After n adds of floats
 * whose partial sums stay within |S| in magnitude, hi + lo is within n^2 / 2 * 2^-48 |S| of the
 * exact sum (lo's own roundings, each within 2^-24 |lo|, |lo| <= i 2^-24 |S| after i adds): for
 * the 16 gates of a 16-token block, 2^-41 |S|; check_cuda tests that bound against MPFR. */
#ifdef __CUDA_ARCH__
#define KCM_FADD(a, b) __fadd_rn(a, b)
#define KCM_FSUB(a, b) __fsub_rn(a, b)
#else
#define KCM_FADD(a, b) ((a) + (b))
#define KCM_FSUB(a, b) ((a) - (b))
#endif
typedef struct kcm_df {
  float hi, lo;
} kcm_df;
/* a + b = s + e exactly (s = RN(a + b)). */
KCM_FN void kcm_two_sum(float a, float b, float *s, float *e) {
  const float x = KCM_FADD(a, b), bb = KCM_FSUB(x, a), aa = KCM_FSUB(x, bb);
  *s = x, *e = KCM_FADD(KCM_FSUB(a, aa), KCM_FSUB(b, bb));
}
/* g + x, x a float. */
KCM_FN kcm_df kcm_df_add(kcm_df g, float x) {
  kcm_df r;
  float e;
  kcm_two_sum(g.hi, x, &r.hi, &e);
  r.lo = KCM_FADD(g.lo, e);
  return r;
}
/* hi + lo as RN(hi + lo) and the exact remainder: the form e^x is taken in (xf, x - xf). */
KCM_FN kcm_df kcm_df_norm(kcm_df g) {
  kcm_df r;
  kcm_two_sum(g.hi, g.lo, &r.hi, &r.lo);
  return r;
}
KCM_FN double kcm_df_val(kcm_df g) { return (double)g.hi + (double)g.lo; }

#endif

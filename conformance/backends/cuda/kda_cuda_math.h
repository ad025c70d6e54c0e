/* kda_cuda_math.h: the float64 e^z (z <= 0), log1p (on (0, 1]), softplus and sigmoid of the CUDA
 * prologue's gate and beta coefficients (SPEC.md §4.1, §4.2, in the forms of §9.2), and the
 * float pairs the chunked prep sums its log-decays in (at the end).
 * SPDX-License-Identifier: MIT
 *
 * Why not CUDA's exp and log1p: the prologue's gate kernel evaluates softplus once a gate
 * element (134 M of them at B1 T32768 H32), and with libdevice's double exp and log1p it
 * issues about 290 instructions an element (72 of them float64: ncu), most of them argument
 * checks and special cases this prologue never needs.  Here each function serves exactly the
 * range its callers give it and is a plain chain of float64 operations.  Two implementations:
 *
 *   The kernels' (kcm_exp_neg, kcm_log1p_unit, kcm_softplus, kcm_sigmoid: the functions with
 *     suffix 1), table-driven: e^z = 2^m 2^(j/32) e^r with a 32-entry table and a degree-5
 *     polynomial; log1p(e) = -log c_j + log1p(c_j (1 + e) - 1) with a 31-entry table and a
 *     degree-8 polynomial (below, at each function).  A gate element costs 96 instructions (46
 *     of them float64).
 *   A second, independent one (suffix 0), which the plugin does not call: check_cuda tests it
 *     against MPFR too and checks that the two give the same float roundings.
 *     e^z, z <= 0: n = rint(z / ln 2), r = z - n ln 2 (two-part ln 2, |r| <= ln2/2), the
 *     Taylor polynomial of degree 12 (truncation (ln2/2)^13 / 13! < 2^-52), times 2^n as two
 *     powers of two built in the exponent field (so subnormal results round as e^z's do).
 *     log1p(e), 0 < e <= 1: 2 atanh(s) with s = f / (2 + f), f = e (e <= sqrt2 - 1) or
 *     f = (e - 1) / 2 and ln 2 added (e > sqrt2 - 1), so |s| <= 0.1716 and the odd series to
 *     s^19 leaves s^20 / 21 < 2^-55 of the result; the division is a float reciprocal, one
 *     Newton step and one correction of the quotient.
 *   Both: softplus(y) = max(y, 0) + log1p(e^-|y|), sigmoid(y) = 1 / (1 + e^-y) (y >= 0) or
 *     e^y / (1 + e^y), the forms of SPEC.md §9.2.
 *
 * Each normal result is within 2^-48 of the exact value, relative (conformance/tests/check_cuda.c
 * checks that bound against MPFR over millions of arguments), so rounding it to float gives the
 * correctly rounded float except when the exact value lies within 2^-48 of a midpoint between two
 * floats, and then a neighbour: the coefficients are "float64, rounded to float once" in the
 * sense of docs/cuda.md ("The prologue"), as with CUDA's double functions (within about 2^-52).
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
KCM_FN double kcm_exp_neg0(double z) {
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
KCM_FN double kcm_log1p_unit0(double e) {
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
KCM_FN double kcm_softplus0(double y) {
  return KCM_ADD(y > 0.0 ? y : 0.0, kcm_log1p_unit0(kcm_exp_neg0(-fabs(y)))); /* NaN: NaN */
}

/* sigmoid in the form that never overflows (SPEC.md §9.2). */
KCM_FN double kcm_sigmoid0(double y) {
  if (y >= 0.0) return 1.0 / KCM_ADD(1.0, kcm_exp_neg0(-y));
  const double e = kcm_exp_neg0(y);
  return e / KCM_ADD(1.0, e);
}

/* ---- The table-driven e^z and log1p (the kernels' functions) ----
 * Tables and coefficients: conformance/backends/cuda/kcm_gen.py (mpmath), pasted below as its
 * output.  The tables are __device__ arrays read through the read-only cache on the device and
 * the same values in host arrays on the host (the test), so both sides see the same bits. */
/* e^r = 1 + r (1 + r (a2 + r (a3 + r (a4 + r a5)))): worst 2^-52.6 */
#define KCM_EXP_POLY 0x1.11115d8aec0eap-7, 0x1.5555c4dc61969p-5, 0x1.5555555547471p-3, 0x1.ffffffffe4ab7p-2
#define KCM_EXP_TAB \
  0x1.0000000000000p+64,\
  0x1.059b0d3158574p+64,\
  0x1.0b5586cf9890fp+64,\
  0x1.11301d0125b51p+64,\
  0x1.172b83c7d517bp+64,\
  0x1.1d4873168b9aap+64,\
  0x1.2387a6e756238p+64,\
  0x1.29e9df51fdee1p+64,\
  0x1.306fe0a31b715p+64,\
  0x1.371a7373aa9cbp+64,\
  0x1.3dea64c123422p+64,\
  0x1.44e086061892dp+64,\
  0x1.4bfdad5362a27p+64,\
  0x1.5342b569d4f82p+64,\
  0x1.5ab07dd485429p+64,\
  0x1.6247eb03a5585p+64,\
  0x1.6a09e667f3bcdp+64,\
  0x1.71f75e8ec5f74p+64,\
  0x1.7a11473eb0187p+64,\
  0x1.82589994cce13p+64,\
  0x1.8ace5422aa0dbp+64,\
  0x1.93737b0cdc5e5p+64,\
  0x1.9c49182a3f090p+64,\
  0x1.a5503b23e255dp+64,\
  0x1.ae89f995ad3adp+64,\
  0x1.b7f76f2fb5e47p+64,\
  0x1.c199bdd85529cp+64,\
  0x1.cb720dcef9069p+64,\
  0x1.d5818dcfba487p+64,\
  0x1.dfc97337b9b5fp+64,\
  0x1.ea4afa2a490dap+64,\
  0x1.f50765b6e4540p+64
/* log1p(r) = r + r^2 (b0 + r (b1 + ... + r b6)): worst 2^-56.8 */
#define KCM_LOG_POLY -0x1.ff666ea80a6b5p-4, 0x1.24ac6be7f0637p-3, -0x1.55555cc063e32p-3, 0x1.999998bddb7e0p-3, -0x1.ffffffffd8a91p-3, 0x1.55555555563c8p-2, -0x1.0000000000000p-1
#define KCM_LOG_TAB \
  {0x1.0000000000000p+0, 0x0.0p+0},\
  {0x1.f000000000000p-1, 0x1.0415d89e74444p-5},\
  {0x1.e0f83e0f83e10p-1, 0x1.001558891aedep-4},\
  {0x1.d2d2d2d2d2d2dp-1, 0x1.7a5c724fc5377p-4},\
  {0x1.c57c57c57c57cp-1, 0x1.f11814fd90d71p-4},\
  {0x1.b8e38e38e38e4p-1, 0x1.323db198f4a82p-3},\
  {0x1.acf914c1bacf9p-1, 0x1.6a5aa5a99c635p-3},\
  {0x1.a1af286bca1afp-1, 0x1.a0f87d32164e6p-3},\
  {0x1.96f96f96f96f9p-1, 0x1.d62b1ff6e27c8p-3},\
  {0x1.8cccccccccccdp-1, 0x1.05027950a3599p-2},\
  {0x1.831f3831f3832p-1, 0x1.1e4b7e7ec079ep-2},\
  {0x1.79e79e79e79e8p-1, 0x1.36f885ce88e96p-2},\
  {0x1.711dc47711dc4p-1, 0x1.4f10e6c1e05bap-2},\
  {0x1.68ba2e8ba2e8cp-1, 0x1.669b77359474ap-2},\
  {0x1.60b60b60b60b6p-1, 0x1.7d9e97094f253p-2},\
  {0x1.590b21642c859p-1, 0x1.94203a7f8b88fp-2},\
  {0x1.51b3bea3677d4p-1, 0x1.aa25f37fe2ae5p-2},\
  {0x1.4aaaaaaaaaaabp-1, 0x1.bfb4f9dfc80d3p-2},\
  {0x1.43eb1a1f58d10p-1, 0x1.d4d232d0977eap-2},\
  {0x1.3d70a3d70a3d7p-1, 0x1.e982378d782aap-2},\
  {0x1.3737373737373p-1, 0x1.fdc95b5fead2bp-2},\
  {0x1.313b13b13b13bp-1, 0x1.08d5d8875f7bbp-1},\
  {0x1.2b78c13521cfbp-1, 0x1.129687e444543p-1},\
  {0x1.25ed097b425edp-1, 0x1.1c288bcc39ec7p-1},\
  {0x1.2094f2094f209p-1, 0x1.258d9ab934a2ep-1},\
  {0x1.1b6db6db6db6ep-1, 0x1.2ec75370eb514p-1},\
  {0x1.1674c59d31675p-1, 0x1.37d73eb28255fp-1},\
  {0x1.11a7b9611a7b9p-1, 0x1.40bed0bed8503p-1},\
  {0x1.0d0456c797dd5p-1, 0x1.497f6abf49e5dp-1},\
  {0x1.0888888888889p-1, 0x1.521a5c0e4e6f2p-1},\
  {0x1.04325c53ef369p-1, 0x1.5a90e364eb2ffp-1},\
  {0x1.0000000000000p-1, 0x1.62e42fefa39efp-1}

/* The constants the float64 operations take, by index (KCM_K): on the device a __constant__
 * array that is not const, so that the compiler cannot fold its values into immediates and each
 * FMA reads its operand from the constant bank (a 64-bit immediate costs two UMOVs an
 * element in the gate kernel's loop); on the host the same values. */
enum { KCM_K_INV, KCM_K_CHI, KCM_K_CLO, KCM_K_EP, KCM_K_LP = KCM_K_EP + 4, KCM_K_31 = KCM_K_LP + 7, KCM_K_N };
#define KCM_K_VALUES \
  0x1.71547652b82fep+5,                       /* 32 / ln 2 */ \
  0x1.62e42fefa39efp-6, 0x1.abc9e3b39803fp-61, /* ln2 / 32, high and low parts */ \
  KCM_EXP_POLY, KCM_LOG_POLY, 31.0
#ifdef __CUDACC__
static __constant__ double kcm_k_d[KCM_K_N] = {KCM_K_VALUES};
static __device__ const double kcm_exp_tab_d[32] = {KCM_EXP_TAB};
static __device__ const double2 kcm_log_tab_d[32] = {KCM_LOG_TAB};
#endif
static const double kcm_k_h[KCM_K_N] = {KCM_K_VALUES};
static const double kcm_exp_tab_h[32] = {KCM_EXP_TAB};
static const double kcm_log_tab_h[32][2] = {KCM_LOG_TAB};
#ifdef __CUDA_ARCH__
#define KCM_K(i) kcm_k_d[i]
#else
#define KCM_K(i) kcm_k_h[i]
#endif

/* 2^(j/32) 2^64, j < 32. */
KCM_FN double kcm_exp_tab(uint32_t j) {
#ifdef __CUDA_ARCH__
  return __ldg(&kcm_exp_tab_d[j]);
#else
  return kcm_exp_tab_h[j];
#endif
}
/* c_j = RN(1 / (1 + j/31)) into *c, -log c_j (rounded) into *l, j < 32. */
KCM_FN void kcm_log_tab(uint32_t j, double *c, double *l) {
#ifdef __CUDA_ARCH__
  const double2 v = __ldg(&kcm_log_tab_d[j]);
  *c = v.x, *l = v.y;
#else
  *c = kcm_log_tab_h[j][0], *l = kcm_log_tab_h[j][1];
#endif
}

/* x 2^m by adding m to x's exponent field (x 2^m normal): on the device to the high word alone
 * (one integer op, where a 64-bit add takes two). */
KCM_FN double kcm_scale(double x, int32_t m) {
#ifdef __CUDA_ARCH__
  return __hiloint2double(__double2hiint(x) + (m << 20), __double2loint(x));
#else
  return kcm_double(kcm_bits(x) + ((uint64_t)(int64_t)m << 52));
#endif
}

/* e^z for z <= 0 (and -inf), table-driven: n = rint(32 z / ln 2) = 32 m + j (0 <= j < 32),
 * r = z - n ln2/32 (|r| <= ln2/64; the first FMA is exact: z - n C_HI is a multiple of ulp(C_HI)
 * below 2^-6), e^z = 2^m 2^(j/32) e^r with e^r = 1 + r h(r) (degree 5, 2^-52.6).  The table holds
 * 2^(j/32) 2^64, so s = 2^(j/32) 2^(m+64) is a normal double for every m >= -1076 (z >= -745.5:
 * below, e^z < 2^-1075 rounds to +0, and so does the clamped value) and is built by adding m to
 * the exponent field; the last multiply by 2^-64 is exact for a normal e^z and rounds once
 * (after the one rounding of s (1 + p), 2^-53 of a subnormal's 2^-1022) for a subnormal one. */
KCM_FN double kcm_exp_neg1(double z) {
  const double SHIFT = 6755399441055744.0; /* 1.5 * 2^52: t's low bits hold n */
  const double zc = z < -745.5 ? -745.5 : z; /* NaN compares false, stays and propagates */
  const double t = KCM_FMA(zc, KCM_K(KCM_K_INV), SHIFT);
  const double n = KCM_ADD(t, -SHIFT); /* exact */
  double r = KCM_FMA(n, -KCM_K(KCM_K_CHI), zc);
  r = KCM_FMA(n, -KCM_K(KCM_K_CLO), r);
  double h = KCM_K(KCM_K_EP);
  for (int k = 1; k < 4; k++) h = KCM_FMA(h, r, KCM_K(KCM_K_EP + k));
  h = KCM_FMA(h, r, 1.0);
  const int32_t ni = (int32_t)(uint32_t)kcm_bits(t); /* n in two's complement */
  const double s = kcm_scale(kcm_exp_tab((uint32_t)ni & 31), ni >> 5);
  return KCM_MUL(KCM_FMA(s, KCM_MUL(h, r), s), 0x1p-64);
}

/* log1p(e) for 0 <= e <= 1, table-driven: j = rint(31 e), x = 1 + e = x_j (1 + r) with
 * r = c_j x - 1 = c_j e + (c_j - 1) in one FMA (c_j - 1 exact: c_j >= 1/2), |r| <= 1/62,
 * log1p(e) = -log c_j + log1p(r), log1p(r) = r + r^2 h(r) (degree 8, 2^-56.8).  j = 0: c = 1,
 * r = e exactly and the table's 0 adds nothing, so small and subnormal e keep their relative
 * accuracy (subnormal: e itself). */
KCM_FN double kcm_log1p_unit1(double e) {
  const double SHIFT = 6755399441055744.0;
  const double t = KCM_FMA(e, KCM_K(KCM_K_31), SHIFT);
  double c, l;
  kcm_log_tab((uint32_t)kcm_bits(t) & 31, &c, &l); /* the mask keeps a NaN's index in the table */
  const double r = KCM_FMA(c, e, KCM_ADD(c, -1.0));
  double h = KCM_K(KCM_K_LP);
  for (int k = 1; k < 7; k++) h = KCM_FMA(h, r, KCM_K(KCM_K_LP + k));
  return KCM_ADD(l, KCM_FMA(KCM_MUL(r, r), h, r));
}

/* softplus as kcm_softplus0, the max as a select of the sum (fewer instructions than a max):
 * y + l for y > 0, else l (+ 0, which changes no l >= +0). */
KCM_FN double kcm_softplus1(double y) {
  const double l = kcm_log1p_unit1(kcm_exp_neg1(-fabs(y))); /* NaN: NaN */
  return y > 0.0 ? KCM_ADD(y, l) : l;
}

KCM_FN double kcm_sigmoid1(double y) {
  if (y >= 0.0) return 1.0 / KCM_ADD(1.0, kcm_exp_neg1(-y));
  const double e = kcm_exp_neg1(y);
  return e / KCM_ADD(1.0, e);
}

/* The prologue's functions: the table-driven ones (the Taylor/atanh ones above are the second
 * implementation check_cuda compares them with). */
KCM_FN double kcm_exp_neg(double z) { return kcm_exp_neg1(z); }
KCM_FN double kcm_log1p_unit(double e) { return kcm_log1p_unit1(e); }
KCM_FN double kcm_softplus(double y) { return kcm_softplus1(y); }
KCM_FN double kcm_sigmoid(double y) { return kcm_sigmoid1(y); }

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

/* kda_backend_half.h: bfloat16 and binary16 element conversions for backends (SPEC.md §7.8,
 * §10.3; kda_backend.h "Element types").
 * SPDX-License-Identifier: MIT
 *
 * Header-only (static functions) so that a plugin can use it without linking libkda, C and
 * C++ alike (make check-headers compiles it both ways); installed next to kda_backend.h but
 * no part of libkda's exports (it defines no external function).  Integer arithmetic on the bit
 * patterns only, so the results do not depend on the rounding mode, FTZ/DAZ or the
 * compiler's half-precision support.  Widening is exact; narrowing rounds to nearest, ties
 * to even, overflows to an infinity and keeps a NaN a quiet NaN of the same sign.  The
 * runner's own conversions (from float64, kda_dtype.c) are a separate implementation that
 * conformance/tests/check_dtype.c compares with these over every 16-bit pattern and every
 * float32 rounding boundary.
 */
#ifndef KDA_BACKEND_HALF_H
#define KDA_BACKEND_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline float kda_half_bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint32_t kda_half_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* The exact float of a bfloat16 pattern: its 16 bits become the upper half of binary32. */
static inline float kda_bf16_to_float(uint16_t b) { return kda_half_bits_float((uint32_t)b << 16); }

/* The bfloat16 nearest f (ties to even). */
static inline uint16_t kda_bf16_from_float(float f) {
  uint32_t u = kda_half_float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* carries into the exponent */
}

/* The exact float of a binary16 pattern. */
static inline float kda_f16_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return kda_half_bits_float(sign | 0x7f800000u | (m << 13)); /* inf, NaN */
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
    float f = (float)m * 0x1p-24f;
    return sign ? -f : f;
  }
  return kda_half_bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

/* The binary16 nearest f (ties to even). */
static inline uint16_t kda_f16_from_float(float f) {
  const uint32_t u = kda_half_float_bits(f), a = u & 0x7fffffffu;
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: a tie or more to inf */
  if (a < 0x33000000u) return sign;                        /* < 2^-25: rounds to zero */
  if (a < 0x38800000u) { /* below 2^-14: a multiple of 2^-24 (a carry gives 2^-14) */
    const uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  const uint32_t r = a - (112u << 23); /* rebias the exponent, then drop 13 fraction bits */
  return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

#ifdef __cplusplus
}
#endif

#endif

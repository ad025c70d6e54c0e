/* kda_dtype.c: conversions between float64 and the element types of backend buffers
 * (SPEC.md §7.8, §10.3).
 * SPDX-License-Identifier: MIT
 *
 * Built on the container's roundings (kda_round_bf16, kda_f16_bits, kda_f16_value of
 * kda_npz.h, exhaustively tested in vectors/tests/check_npz.c): one rounding from float64,
 * never through float32, so no value is rounded twice.  A bfloat16 rounded this way is a
 * float32 whose low 16 bits are zero, which gives its pattern.
 */
#include "kda_dtype.h"

#include <math.h>
#include <string.h>

#include "kda_npz.h"
#include "kda_precision.h"

int kda_dtype_valid(int32_t dtype) {
  return dtype == KDA_PRECISION_FP64 || dtype == KDA_PRECISION_FP32 || kda_dtype_is_half(dtype);
}

int kda_dtype_is_half(int32_t dtype) {
  return dtype == KDA_PRECISION_BF16 || dtype == KDA_PRECISION_FP16;
}

uint16_t kda_dtype_half_bits(int32_t dtype, double x) {
  if (dtype == KDA_PRECISION_FP16) return kda_f16_bits(x);
  if (x != x) return signbit(x) ? 0xffc0 : 0x7fc0;
  float f = (float)kda_round_bf16(x); /* exact: a bfloat16 value or an infinity */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

double kda_dtype_half_value(int32_t dtype, uint16_t b) {
  if (dtype == KDA_PRECISION_FP16) return kda_f16_value(b);
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return (double)f;
}

int kda_dtype_holds(int32_t dtype, double x) {
  switch (dtype) {
  case KDA_PRECISION_FP64: return 1;
  case KDA_PRECISION_FP32: return (double)kda_round_f32(x) == x;
  case KDA_PRECISION_BF16: return kda_round_bf16(x) == x;
  case KDA_PRECISION_FP16: return kda_round_f16(x) == x;
  default: return 0;
  }
}

void kda_dtype_put(int32_t dtype, void *d, size_t i, double x) {
  if (dtype == KDA_PRECISION_FP64) {
    memcpy((unsigned char *)d + 8 * i, &x, 8);
  } else if (dtype == KDA_PRECISION_FP32) {
    float f = (float)x;
    memcpy((unsigned char *)d + 4 * i, &f, 4);
  } else {
    uint16_t b = kda_dtype_half_bits(dtype, x);
    memcpy((unsigned char *)d + 2 * i, &b, 2);
  }
}

double kda_dtype_get(int32_t dtype, const void *s, size_t i) {
  const unsigned char *c = s;
  if (dtype == KDA_PRECISION_FP64) {
    double x;
    memcpy(&x, c + 8 * i, 8);
    return x;
  }
  if (dtype == KDA_PRECISION_FP32) {
    float f;
    memcpy(&f, c + 4 * i, 4);
    return (double)f;
  }
  uint16_t b;
  memcpy(&b, c + 2 * i, 2);
  return kda_dtype_half_value(dtype, b);
}

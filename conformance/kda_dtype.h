/* kda_dtype.h: the runner's element types of backend buffers (SPEC.md §7.8, §10.3).
 * SPDX-License-Identifier: MIT
 *
 * Internal to libkda (not installed): the worker converts the case's float64 values into a
 * backend's element types and widens its outputs back with these.  kda_backend.h's "Element
 * types" is the contract; kda_backend_half.h holds the plugins' side.
 */
#ifndef KDA_DTYPE_H
#define KDA_DTYPE_H

#include <stddef.h>
#include <stdint.h>

/* 1 when dtype is a legal element type of a backend buffer (fp64, fp32, bf16, fp16). */
int kda_dtype_valid(int32_t dtype);
/* 1 for KDA_PRECISION_BF16 and _FP16. */
int kda_dtype_is_half(int32_t dtype);
/* The pattern of dtype (bf16 or fp16) nearest x, in one round-to-nearest-even step; NaN: the
 * quiet NaN of x's sign; beyond the range: an infinity. */
uint16_t kda_dtype_half_bits(int32_t dtype, double x);
/* The exact value of pattern b of dtype (bf16 or fp16). */
double kda_dtype_half_value(int32_t dtype, uint16_t b);
/* 1 when dtype (any of the four) holds the finite x exactly. */
int kda_dtype_holds(int32_t dtype, double x);
/* Writes x converted to dtype into element i of buffer d (fp64: the bits; fp32: nearest). */
void kda_dtype_put(int32_t dtype, void *d, size_t i, double x);
/* The exact value of element i of buffer s of type dtype. */
double kda_dtype_get(int32_t dtype, const void *s, size_t i);

#endif

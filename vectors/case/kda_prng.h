/* kda_prng.h: the project's counter-based PRNG, Philox4x32-10 (SPEC.md §11).
 * SPDX-License-Identifier: MIT
 *
 * Every random value is a pure function of (seed, stream, index): no hidden state, no rand(),
 * no clock.  Any element of any tensor can be regenerated alone, in any order, on any thread,
 * and a Python user can re-implement the whole thing from SPEC.md §11 in a few lines.
 *
 * Block function: Philox4x32 with 10 rounds (Salmon et al., SC'11), key (k0, k1) =
 * (lo32(seed), hi32(seed)), counter (c0, c1, c2, c3) = (lo32(index), hi32(index), stream, j).
 * Derived values use only correctly rounded IEEE operations (no libm), so they are the same
 * bits on every conforming platform.
 */
#ifndef KDA_PRNG_H
#define KDA_PRNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Philox4x32-10 of counter ctr[4] under key (lo32(seed), hi32(seed)); writes out[4]. */
void kda_prng_philox(uint64_t seed, const uint32_t ctr[4], uint32_t out[4]);

/* Uniform on [0, 1) with 53 random bits: block (index, stream, j = 0), words out[0] (low) and
 * out[1] (high) form u64 = out[1] << 32 | out[0]; the value is (u64 >> 11) * 2^-53. */
double kda_prng_uniform(uint64_t seed, uint32_t stream, uint64_t index);

/* Approximately standard normal, Irwin-Hall of 12 uniforms: for j = 0..5 the block
 * (index, stream, j) gives two uniforms, (out[1]<<32|out[0]) >> 11 and (out[3]<<32|out[2])
 * >> 11, each times 2^-53; they are summed left to right in the order j=0 first, first word
 * pair first, starting from 0.0, and 6.0 is subtracted.  Range (-6, 6), variance 1. */
double kda_prng_normal(uint64_t seed, uint32_t stream, uint64_t index);

#ifdef __cplusplus
}
#endif
#endif

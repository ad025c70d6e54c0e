/* kda_prng.c: Philox4x32-10 and the uniform and normal values derived from it (SPEC.md §11).
 * SPDX-License-Identifier: MIT
 *
 * The block function is Random123's philox4x32 with 10 rounds (Salmon, Moraes, Dror, Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11), checked against Random123's known
 * answers in vectors/tests/check_vectors.c.  Derived values use only exact integer-to-double
 * conversion, multiplication by a power of two and correctly rounded IEEE addition, so they
 * are the same bits everywhere (no libm, no contraction: the build uses -ffp-contract=off).
 */
#include "kda_prng.h"

#define KDA_PHILOX_M0 0xD2511F53u /* round multipliers */
#define KDA_PHILOX_M1 0xCD9E8D57u
#define KDA_PHILOX_W0 0x9E3779B9u /* Weyl key increments: golden ratio, sqrt(3) - 1 */
#define KDA_PHILOX_W1 0xBB67AE85u
#define KDA_PHILOX_ROUNDS 10

/* 2^-53, exactly: 1 / 9007199254740992. */
#define KDA_TWO_M53 (1.0 / 9007199254740992.0)

/* One Philox round: two 32x32 -> 64 products, their halves mixed with the other two words and
 * the key: out = {hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0}. */
static void philox_round(uint32_t c[4], const uint32_t key[2]) {
  uint64_t p0 = (uint64_t)KDA_PHILOX_M0 * c[0];
  uint64_t p1 = (uint64_t)KDA_PHILOX_M1 * c[2];
  uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  uint32_t c1 = c[1], c3 = c[3];
  c[0] = hi1 ^ c1 ^ key[0];
  c[1] = lo1;
  c[2] = hi0 ^ c3 ^ key[1];
  c[3] = lo0;
}

void kda_prng_philox(uint64_t seed, const uint32_t ctr[4], uint32_t out[4]) {
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  for (int r = 0; r < KDA_PHILOX_ROUNDS; r++) {
    if (r > 0) { /* the key is bumped before every round but the first */
      key[0] += KDA_PHILOX_W0;
      key[1] += KDA_PHILOX_W1;
    }
    philox_round(c, key);
  }
  for (int i = 0; i < 4; i++) out[i] = c[i];
}

/* The block (index, stream, j) of seed. */
static void prng_block(uint64_t seed, uint32_t stream, uint64_t index, uint32_t j,
                       uint32_t out[4]) {
  uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), stream, j};
  kda_prng_philox(seed, ctr, out);
}

/* The top 53 bits of the 64-bit word hi:lo, as a multiple of 2^-53 in [0, 1) (exact). */
static double unit53(uint32_t lo, uint32_t hi) {
  uint64_t u = ((uint64_t)hi << 32) | lo;
  return (double)(u >> 11) * KDA_TWO_M53;
}

double kda_prng_uniform(uint64_t seed, uint32_t stream, uint64_t index) {
  uint32_t out[4];
  prng_block(seed, stream, index, 0, out);
  return unit53(out[0], out[1]);
}

double kda_prng_normal(uint64_t seed, uint32_t stream, uint64_t index) {
  /* Irwin-Hall: the sum of 12 uniforms has mean 6 and variance 12 * (1/12) = 1. */
  double s = 0.0;
  for (uint32_t j = 0; j < 6; j++) {
    uint32_t out[4];
    prng_block(seed, stream, index, j, out);
    s += unit53(out[0], out[1]);
    s += unit53(out[2], out[3]);
  }
  return s - 6.0;
}

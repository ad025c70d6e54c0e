/* kda_sha256.h: SHA-256 (FIPS 180-4) for member and input digests in vector manifests.
 * SPDX-License-Identifier: MIT
 *
 * A small streaming implementation: init, update any number of times, final.  Digests are
 * written in manifests as 64 lowercase hex digits (kda_sha256_hex).  Tested against the
 * FIPS 180-4 / NIST example vectors in vectors/tests/check_vectors.c.
 */
#ifndef KDA_SHA256_H
#define KDA_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KDA_SHA256_BYTES 32

typedef struct kda_sha256 {
  uint32_t h[8];          /* chaining value */
  uint64_t nbytes;        /* message length so far */
  unsigned char buf[64];  /* pending partial block */
  size_t fill;            /* bytes in buf */
} kda_sha256;

void kda_sha256_init(kda_sha256 *s);
void kda_sha256_update(kda_sha256 *s, const void *data, size_t len);
/* Pads, writes the 32-byte digest and leaves s re-initialised. */
void kda_sha256_final(kda_sha256 *s, unsigned char digest[KDA_SHA256_BYTES]);
/* Writes the digest as 64 lowercase hex digits and a NUL into hex[65]. */
void kda_sha256_hex(const unsigned char digest[KDA_SHA256_BYTES], char hex[65]);
/* SHA-256 of len bytes of data as 64 lowercase hex digits and a NUL into hex[65]. */
void kda_sha256_of(const void *data, size_t len, char hex[65]);

#ifdef __cplusplus
}
#endif
#endif

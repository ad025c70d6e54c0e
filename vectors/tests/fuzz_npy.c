/* fuzz_npy.c: libFuzzer target for the .npy header parser (kda_npy_parse_header).
 * SPDX-License-Identifier: MIT
 *
 * Build and run without the Makefile (from the repository root):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *     -Ivectors/format -Iref vectors/tests/fuzz_npy.c vectors/format/kda_npy.c -o /tmp/fuzz_npy
 *   mkdir -p /tmp/fuzz_npy_corpus
 *   /tmp/fuzz_npy -max_total_time=300 -dict=vectors/tests/fixtures/fuzz_npy.dict \
 *     /tmp/fuzz_npy_corpus vectors/tests/fixtures/fuzz_npy
 * or `make fuzz FUZZ_SECONDS=300`.  The seeds (fixtures/fuzz_npy/) are numpy-written .npy files
 * of every header version.
 *
 * Besides memory errors and undefined behaviour (the sanitizers), the target checks the
 * parser's promises: on success the info is consistent (dims >= 0, count and nbytes the
 * products, the data offset inside the input), the header we would write for it parses back
 * to the same info; on failure the status is one of the documented ones and the message is a
 * single NUL-terminated line.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kda_npz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c) \
  do {             \
    if (!(c)) abort(); \
  } while (0)

static void check_info(const kda_array_info *info) {
  uint64_t count = 1;
  REQUIRE(info->ndim >= 0 && info->ndim <= KDA_NPY_MAX_NDIM);
  REQUIRE(kda_dtype_size(info->dtype) != 0);
  for (int32_t i = 0; i < info->ndim; i++) {
    REQUIRE(info->shape[i] >= 0);
    count *= (uint64_t)info->shape[i]; /* cannot wrap: the parser bounded the product */
  }
  REQUIRE(info->count == count);
  REQUIRE(info->nbytes == count * kda_dtype_size(info->dtype));
  REQUIRE(info->nbytes <= (uint64_t)INT64_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kda_array_info info, back;
  size_t off = 0, off2 = 0, n;
  char err[KDA_ERRLEN];
  unsigned char hdr[512];
  int st;
  memset(err, 0x5a, sizeof err);
  st = kda_npy_parse_header(data, size, "fuzz", &info, &off, err, sizeof err);
  if (st != KDA_OK) {
    REQUIRE(st == KDA_EFORMAT || st == KDA_EDTYPE || st == KDA_ESHAPE);
    n = strnlen(err, sizeof err);
    REQUIRE(n < sizeof err && n > 0);
    REQUIRE(memchr(err, '\n', n) == NULL);
    REQUIRE(kda_npy_parse_header(data, size, NULL, &info, &off, NULL, 0) == st);
    return 0;
  }
  REQUIRE(off >= 10 && off <= size);
  check_info(&info);
  n = kda_npy_format_header(&info, hdr, sizeof hdr);
  REQUIRE(n > 0 && n % 64 == 0);
  REQUIRE(kda_npy_parse_header(hdr, n, "again", &back, &off2, err, sizeof err) == KDA_OK);
  REQUIRE(off2 == n);
  REQUIRE(memcmp(&back, &info, sizeof info) == 0);
  return 0;
}

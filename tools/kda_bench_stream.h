/* kda_bench_stream.h: a STREAM-style memory bandwidth microbenchmark for `kda bench` (tools/).
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_BENCH_STREAM_H
#define KDA_BENCH_STREAM_H

#include <stddef.h>

typedef struct kda_stream_result {
  double copy_bytes_per_s;  /* c = a: 2 x 8 bytes an element (STREAM's count) */
  double triad_bytes_per_s; /* a = b + s c: 3 x 8 bytes an element */
  int threads;
  size_t array_bytes; /* bytes of each of the three arrays */
} kda_stream_result;

/* Best of five passes of copy and triad over three arrays of array_bytes each, split over
 * `threads` threads (each first touches its own slice).  Returns 0, or -1 with a message in
 * err (out of memory, cannot start a thread). */
int kda_stream_measure(int threads, size_t array_bytes, kda_stream_result *r, char *err,
                       size_t errlen);

#endif

/* kda_bench_stream.c: STREAM-style copy and triad bandwidth, measured in the same run as kda bench.
 * SPDX-License-Identifier: MIT
 *
 * Decode moves the whole state once in and once out per token (read h0, write ht), so its
 * attainable speed is set by memory bandwidth, not by the FMA peak; this measures that
 * bandwidth on the machine, at the thread count of the row it is compared with.  Bytes are
 * counted as STREAM counts them (copy: one read and one write an element; write-allocate
 * traffic is not counted).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kda_bench_stream.h"

#define MAX_THREADS 256
#define PASSES 5

typedef struct slice {
  double *a, *b, *c;
  size_t n;
  int kernel; /* 0: init, 1: copy, 2: triad */
} slice;

static void *run_slice(void *arg) {
  slice *s = arg;
  double *a = s->a, *b = s->b, *c = s->c;
  if (s->kernel == 0)
    for (size_t i = 0; i < s->n; i++) a[i] = 1.0, b[i] = 2.0, c[i] = 0.0;
  else if (s->kernel == 1)
    for (size_t i = 0; i < s->n; i++) c[i] = a[i];
  else
    for (size_t i = 0; i < s->n; i++) a[i] = b[i] + 3.0 * c[i];
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One kernel over every slice, one thread a slice; wall seconds, or -1. */
static double run_kernel(slice *sl, pthread_t *tid, int threads, int kernel) {
  double t0 = now_s();
  int started = 0, ok = 1;
  for (int i = 0; i < threads; i++) {
    sl[i].kernel = kernel;
    if (pthread_create(&tid[i], NULL, run_slice, &sl[i]) != 0) {
      ok = 0;
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  return ok ? now_s() - t0 : -1;
}

int kda_stream_measure(int threads, size_t array_bytes, kda_stream_result *r, char *err,
                       size_t errlen) {
  memset(r, 0, sizeof *r);
  if (threads < 1) threads = 1;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  size_t n = array_bytes / sizeof(double);
  if (n < (size_t)threads) n = (size_t)threads;
  double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
  slice sl[MAX_THREADS];
  pthread_t tid[MAX_THREADS];
  int rc = 0;
  if (!a || !b || !c) {
    snprintf(err, errlen, "out of memory for the bandwidth arrays (3 x %zu bytes)", array_bytes);
    rc = -1;
  }
  for (int i = 0; rc == 0 && i < threads; i++) {
    size_t lo = n * (size_t)i / (size_t)threads, hi = n * (size_t)(i + 1) / (size_t)threads;
    sl[i] = (slice){a + lo, b + lo, c + lo, hi - lo, 0};
  }
  double best[3] = {0, 1e300, 1e300};
  for (int pass = -1; rc == 0 && pass < PASSES; pass++) /* pass -1: first touch */
    for (int k = pass < 0 ? 0 : 1; rc == 0 && k <= (pass < 0 ? 0 : 2); k++) {
      double s = run_kernel(sl, tid, threads, k);
      if (s < 0) rc = -1, snprintf(err, errlen, "cannot start a bandwidth thread");
      else if (s < best[k]) best[k] = s;
    }
  if (rc == 0) {
    r->copy_bytes_per_s = 2.0 * (double)n * sizeof(double) / best[1];
    r->triad_bytes_per_s = 3.0 * (double)n * sizeof(double) / best[2];
    r->threads = threads;
    r->array_bytes = n * sizeof(double);
  }
  free(a), free(b), free(c);
  return rc;
}

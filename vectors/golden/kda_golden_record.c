/* kda_golden_record.c: what every golden file and level manifest records, shared by the
 * case makers (kda_golden.c, kda_golden_prod.c) and the set writer (kda_golden_set.c): the
 * clock, the library versions, the flags, JSON numbers, and the score of the float64 reference
 * against the certified values (SPEC.md §9.4).
 * SPDX-License-Identifier: MIT
 */
#include <gmp.h>
#include <jansson.h>
#include <math.h>
#include <mpfr.h>
#include <stdio.h>
#include <time.h>
#include <zip.h>
#include <zlib.h>

#include "kda_catalog.h"
#include "kda_golden_internal.h"

/* ---- Clock, versions. */
double kda_golden_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *kda_golden_versions(void) {
  static char text[160];
  if (!text[0])
    snprintf(text, sizeof text, "mpfr %s, gmp %s, zlib %s, libzip %s, jansson %s",
             mpfr_get_version(), gmp_version, zlibVersion(), zip_libzip_version(),
             JANSSON_VERSION);
  return text;
}

/* ---- JSON. */
json_t *kda_golden_flags_json(uint64_t flags) {
  json_t *a = json_array();
  for (int i = 0; a && i < KDA_FLAG_COUNT; i++)
    if (flags & (UINT64_C(1) << i))
      json_array_append_new(a, json_string(kda_catalog_flag_get(i)->name));
  return a;
}

/* A JSON number, or null for a value JSON cannot hold (an infinite bound). */
json_t *kda_golden_jreal(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* ---- Scoring the float64 reference (SPEC.md §9.4). */
/* The spacing of binary64 numbers at x (x finite, nonzero): 2^(e - 53) for x = f 2^e, f in
 * [1/2, 1), never below the subnormal quantum 2^-1074. */
static double ulp_of(double x) {
  int e;
  frexp(x, &e);
  return e - 53 < -1074 ? 0x1p-1074 : ldexp(1.0, e - 53);
}

void kda_golden_score_ref(const double *gold, const double *ref, const uint64_t part[3],
                          kda_golden_info *info) {
  uint64_t at = 0;
  info->ref_worst_index = -1;
  for (int q = 0; q < 3; q++) {
    double gmax = 0.0, dmax = 0.0;
    for (uint64_t e = at; e < at + part[q]; e++) {
      const double g = gold[e], d = isnan(ref[e]) ? INFINITY : fabs(ref[e] - g);
      if (fabs(g) > gmax) gmax = fabs(g);
      if (d > dmax) dmax = d;
      info->ref_n_exact += d == 0.0;
      if (g == 0.0) {
        info->ref_n_zero_mismatch += d != 0.0;
        info->ref_n_within1 += d == 0.0;
        continue;
      }
      const double u = d / ulp_of(g), rel = d / fabs(g);
      info->ref_n_within1 += u <= 1.0;
      if (u > info->ref_max_ulps) {
        info->ref_max_ulps = u;
        info->ref_worst_index = (int64_t)e;
      }
      if (rel > info->ref_max_rel) info->ref_max_rel = rel;
    }
    const double nw = dmax == 0.0 ? 0.0 : gmax == 0.0 ? INFINITY : dmax / gmax;
    if (nw > info->ref_max_normwise) info->ref_max_normwise = nw;
    at += part[q];
  }
}

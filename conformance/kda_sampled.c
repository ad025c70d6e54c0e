/* kda_sampled.c: reading sampled truth, golden outputs stored at chosen tokens only (SPEC.md
 * §10.2, golden.o_sampled; scored at exactly those tokens, §7.3).
 * SPDX-License-Identifier: MIT
 *
 * A production-size case (2^20 tokens of a 128 x 128 head) stores o at runs of whole 64-token
 * windows.  The reader trusts nothing: the index must be strictly increasing, inside the case
 * and made of whole aligned windows, because the envelope rule of §7.3 reads ref-f32's error
 * per window and a half-stored window would make that error a different quantity.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_score_internal.h"

int kda_sampled_declared(const kda_case *c) {
  int generated = 0, sampled = 0;
  return kda_case_golden_form(c, &generated, &sampled) == KDA_OK && sampled;
}

/* Every token of each window the index touches is there (SPEC.md §10.2). */
static int whole_windows(const int64_t *x, int64_t n, int64_t T) {
  const int64_t W = KDA_ENVELOPE_WINDOW;
  for (int64_t i = 0; i < n;) {
    const int64_t a = x[i] / W * W, b = a + W < T ? a + W : T;
    if (x[i] != a || i + (b - a) > n) return 0;
    for (int64_t t = a; t < b; t++, i++)
      if (x[i] != t) return 0;
  }
  return 1;
}

int kda_sampled_read_index(kda_npz *z, const char *path, const kda_problem *p, int64_t **idx,
                           int64_t *n, char *err, size_t errlen) {
  int st = kda_output_sampled_read(z, path, p, idx, n, NULL, err, errlen);
  if (st == KDA_ENOTFOUND)
    snprintf(err, errlen, "%s: golden.o_sampled but no member 'o_index' or 'o'", path);
  if (st == KDA_OK && !(*n >= 1 && whole_windows(*idx, *n, p->T))) {
    free(*idx), *idx = NULL, *n = 0;
    return snprintf(err, errlen, "%s: member 'o_index' does not hold whole aligned windows of "
                    "%d tokens (SPEC.md 10.2)", path, KDA_ENVELOPE_WINDOW), KDA_EFORMAT;
  }
  return st;
}

int kda_sampled_read_o(kda_npz *z, const char *path, const kda_problem *p, int64_t P, double *o,
                       char *err, size_t errlen) {
  kda_array_info info;
  int st = kda_npz_info(z, "o", &info, err, errlen);
  if (st != KDA_OK) return st;
  if (info.dtype != KDA_DTYPE_F64 && info.dtype != KDA_DTYPE_F32)
    return snprintf(err, errlen, "%s: member 'o' has dtype %s, expected <f8 or <f4", path,
                    kda_dtype_descr(info.dtype) ? kda_dtype_descr(info.dtype) : "?"), KDA_EDTYPE;
  if (info.ndim != 3 || info.shape[0] != P || info.shape[1] != p->HV || info.shape[2] != p->V)
    return snprintf(err, errlen, "%s: member 'o' must have shape [P, HV, V] = [%lld,%lld,%lld] "
                    "(sampled truth)", path, (long long)P, (long long)p->HV, (long long)p->V),
           KDA_ESHAPE;
  return kda_npz_read(z, "o", KDA_DTYPE_F64, o, info.count, err, errlen);
}

int64_t kda_sampled_lower(const int64_t *idx, int64_t n, int64_t tt) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (idx[mid] < tt) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

int64_t kda_sampled_row(const int64_t *idx, int64_t n, int64_t tt) {
  int64_t lo = kda_sampled_lower(idx, n, tt);
  return lo < n && idx[lo] == tt ? lo : -1;
}

int kda_truth_full_o(const kda_problem *p, const kda_truth *t, double **o, int *owned, char *err,
                     size_t errlen) {
  *owned = 0, *o = t->out.o;
  if (!t->o_index) return KDA_OK;
  const size_t row = (size_t)(p->HV * p->V), n = (size_t)p->T * row;
  double *x = malloc((n + 1) * sizeof *x);
  if (!x) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  for (size_t i = 0; i < n; i++) x[i] = NAN;
  for (int64_t r = 0; r < t->n_rows; r++)
    memcpy(x + (size_t)t->o_index[r] * row, t->out.o + (size_t)r * row, row * sizeof *x);
  *o = x, *owned = 1;
  return KDA_OK;
}

/* kda_envelope_stored.c: the fp32 envelope as a golden case file carries it (SPEC.md §7.3,
 * §10.2 "Stored envelope"), read instead of recomputed.
 * SPDX-License-Identifier: MIT
 *
 * The envelope of a case is a function of its inputs and its truth alone (ref-f32 and the
 * honest ensemble are deterministic, chained calls give the bits of one whole call), so the
 * golden pipeline can compute it once, through the runner's own code on the file it wrote,
 * and store it: on a production case the ensemble is eight float32 recurrences over up to
 * 2^20 tokens of a 128 x 128 head, several times what scoring one backend costs.  The stored
 * members are hash-checked with the golden outputs (golden.members_sha256) before any of
 * them is read; an envelope of another rule (KDA_ENVELOPE_RULE) is ignored and recomputed.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_npz.h"
#include "kda_score_internal.h"

/* 1 when c's golden object has an envelope of this rule. */
static int declared(const kda_case *c) {
  json_t *root = c->manifest_json ? json_loads(c->manifest_json, 0, NULL) : NULL;
  json_t *env = json_object_get(json_object_get(root, "golden"), "envelope");
  const char *rule = json_string_value(json_object_get(env, "rule"));
  const int yes = rule && strcmp(rule, KDA_ENVELOPE_RULE) == 0;
  json_decref(root);
  return yes;
}

/* Member name as a vector of exactly n values, each NaN or >= 0 (NaN only where nan_ok), into
 * a fresh array of n + 1. */
static int vector(kda_npz *z, const char *name, int64_t n_min, int64_t n_max, int nan_ok,
                  double **out, int64_t *n, char *err, size_t errlen) {
  const char *path = kda_npz_path(z);
  kda_array_info info;
  double *x = NULL;
  *out = NULL;
  int st = kda_npz_load_f64(z, name, &info, &x, err, errlen);
  if (st != KDA_OK) return st;
  if (info.ndim != 1 || (int64_t)info.count < n_min || (int64_t)info.count > n_max) {
    free(x);
    return snprintf(err, errlen, "%s: member '%s' is not a vector of %lld to %lld values", path,
                    name, (long long)n_min, (long long)n_max),
           KDA_EFORMAT;
  }
  for (uint64_t i = 0; i < info.count; i++)
    if (isnan(x[i]) ? !nan_ok : !(x[i] >= 0.0)) {
      const double v = x[i];
      free(x);
      return snprintf(err, errlen, "%s: member '%s' value %llu = %g is not an error in units",
                      path, name, (unsigned long long)i, v),
             KDA_EFORMAT;
    }
  double *y = realloc(x, ((size_t)info.count + 1) * sizeof *y);
  if (!y) return free(x), snprintf(err, errlen, "out of memory for the envelope"), KDA_ENOMEM;
  *out = y, *n = (int64_t)info.count;
  return KDA_OK;
}

int kda_envelope_stored(kda_npz *z, const kda_case *c, kda_envelope *env, int *found,
                        char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  *found = 0;
  if (!z || !declared(c)) return KDA_OK;
  kda_envelope e;
  memset(&e, 0, sizeof e);
  const int64_t n_win = (p->T + KDA_ENVELOPE_WINDOW - 1) / KDA_ENVELOPE_WINDOW;
  const int64_t N = p->want_final_state ? p->N : 0, C = p->n_checkpoints;
  double *last = NULL;
  int64_t n = 0, n_last = 0;
  int st = vector(z, "envelope_o", n_win, n_win, 1, &e.o, &n, err, errlen);
  e.n_win = n_win;
  if (st == KDA_OK && N) st = vector(z, "envelope_ht", N, N, 0, &e.ht, &n, err, errlen);
  if (st == KDA_OK && C) st = vector(z, "envelope_hc", C, C, 0, &e.hc, &n, err, errlen);
  if (st == KDA_OK)
    st = vector(z, "envelope_last", 1, 1 + KDA_ENVELOPE_MEMBERS, 1, &last, &n_last, err, errlen);
  if (st == KDA_OK && !e.ht) e.ht = calloc((size_t)p->N + 1, sizeof *e.ht);
  if (st == KDA_OK && !e.hc) e.hc = calloc((size_t)C + 1, sizeof *e.hc);
  if (st == KDA_OK && (!e.ht || !e.hc))
    st = KDA_ENOMEM, snprintf(err, errlen, "out of memory for the envelope");
  if (st != KDA_OK) return free(last), kda_envelope_free(&e), st;
  e.members = (int32_t)(n_last - 1);
  e.alpha = NAN;
  memcpy(e.win_lasts, last, (size_t)n_last * sizeof *last);
  free(last);
  kda_envelope_median(&e);
  *env = e;
  *found = 1;
  return KDA_OK;
}

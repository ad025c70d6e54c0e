/* kda_magnitude.c: the magnitude scale M[t, hv] of SPEC.md §7.3 by the float64 recurrence,
 * which an output element's error is measured against (kda_mag_trace, kda_score_internal.h).
 * SPDX-License-Identifier: MIT
 */
#include <math.h>
#include <stdlib.h>

#include "kda_ref.h"
#include "kda_ref_internal.h"
#include "kda_score_internal.h"

typedef struct mag_run {
  const kda_problem *p;
  const kda_tensors_f64 *ts;
  double *S, *qq, *kk, *a, *pr, *o, *mag;
  const int64_t *rows; /* sampled truth: the stored tokens (M is kept at those only), or NULL */
  int64_t n_rows;
  int64_t t0;          /* global position of the problem's token 0 (a streamed chunk) */
  int64_t first;       /* with rows: the row of mag[0] */
} mag_run;

static void mag_load(void *ctx, int64_t n, int64_t hv) {
  mag_run *r = ctx;
  const kda_problem *p = r->p;
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++)
      r->S[i * p->V + j] = p->has_initial_state
                               ? r->ts->h0[kda_ref_off_state(p, n, hv) + kda_ref_state_at(p, i, j)]
                               : 0.0;
}

static void mag_step(void *ctx, int64_t t, int64_t hv) {
  mag_run *r = ctx;
  const kda_problem *p = r->p;
  const int64_t K = p->K, V = p->V;
  double beta;
  kda_ref_coefs_f64(p, r->ts, t, hv, r->qq, r->kk, r->a, &beta);
  if (kda_ref_family_decays(p->family)) kda_ref_decay(K, V, r->S, r->a);
  if (kda_ref_family_erases(p->family)) kda_ref_erase(K, V, r->S, r->kk, r->pr);
  else
    for (int64_t j = 0; j < V; j++) r->pr[j] = 0.0;
  kda_ref_write(K, V, r->S, r->kk, r->ts->v + kda_ref_off_v(p, t, hv), r->pr, beta);
  /* the same calls in the same order as ref-f64's step: its o, bit for bit */
  if (r->ts->o) kda_ref_readout(K, V, r->S, r->qq, r->ts->o + kda_ref_off_v(p, t, hv));
  int64_t row = t;
  if (r->rows && (row = kda_sampled_row(r->rows, r->n_rows, r->t0 + t) - r->first) < 0) return;
  double m = 0.0;
  for (int64_t j = 0; j < V; j++) {
    double s = 0.0;
    for (int64_t i = 0; i < K; i++) s += fabs(r->S[i * V + j]) * fabs(r->qq[i]);
    if (s > m) m = s;
  }
  r->mag[row * p->HV + hv] = m;
}

/* The state into slot sl of a stored state array (ht or hc), when one is asked for. */
static void mag_store(const mag_run *r, double *dst, int64_t sl, int64_t hv) {
  const kda_problem *p = r->p;
  if (!dst) return;
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++)
      dst[kda_ref_off_state(p, sl, hv) + kda_ref_state_at(p, i, j)] = r->S[i * p->V + j];
}

static void mag_checkpoint(void *ctx, int64_t c, int64_t hv) {
  mag_run *r = ctx;
  mag_store(r, r->ts->hc, c, hv);
}

static void mag_final(void *ctx, int64_t n, int64_t hv) {
  mag_run *r = ctx;
  mag_store(r, r->ts->ht, n, hv);
}

int kda_mag_trace(const kda_problem *p, const kda_tensors_f64 *ts, const kda_mag_rows *rows,
                  double *mag, char *err, size_t errlen) {
  const size_t K = (size_t)p->K, V = (size_t)p->V;
  double *work = malloc((K * V + 3 * K + V + 1) * sizeof *work);
  if (!work) return snprintf(err, errlen, "out of memory for the magnitude trace"), KDA_ENOMEM;
  mag_run r = {p, ts, work, work + K * V, work + K * V + K,
               work + K * V + 2 * K, work + K * V + 3 * K, NULL, mag,
               rows ? rows->index : NULL, rows ? rows->n : 0, rows ? rows->t0 : 0,
               rows ? rows->first : 0};
  const kda_ref_visitor vis = {&r, mag_load, mag_step, mag_checkpoint, mag_final};
  kda_ref_drive(p, ts->cu_seqlens, ts->checkpoints, &vis);
  free(work);
  return KDA_OK;
}

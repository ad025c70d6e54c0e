/* kda_cert_fallback.c: the fast certifier's second phase, head by head (SPEC.md §8.12).
 * SPDX-License-Identifier: MIT
 *
 * The value heads of a problem are independent recurrences.  For every value head with an
 * undecided value, kda_mpfr_forward runs on that head alone (H = HV = 1: its q/k head, its v,
 * beta, gate, A_log, dt_bias and h0) and only on the tokens up to the last token an undecided
 * value depends on (an output's token, a checkpoint's token, a final state's sequence end).
 * Its values replace the head's values of that prefix; every one the first phase decided must
 * have the same bits.
 */
#include <stdlib.h>
#include <string.h>

#include "kda_cert_impl.h"
#include "kda_internal.h"
#include "kda_mpfr_impl.h"

static const char who[] = "kda_cert_forward";

/* One head's sub-problem and its buffers. */
typedef struct sub {
  kda_problem p;
  double *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0, *o, *ht, *hc;
  int64_t *cu, *cp;
} sub;

static void sub_free(sub *s) {
  double *d[] = {s->q, s->k, s->v, s->g, s->beta, s->A_log, s->dt_bias, s->h0, s->o, s->ht, s->hc};
  for (size_t i = 0; i < sizeof d / sizeof *d; i++) free(d[i]);
  free(s->cu);
  free(s->cp);
}

static double *dalloc(int64_t n) { return malloc((size_t)(n > 0 ? n : 1) * sizeof(double)); }

/* The number of tokens the head's undecided values need; -1 when none is undecided. */
static int64_t prefix_needed(const kda_cert_job *job, int64_t hv) {
  const kda_problem *p = job->p;
  const unsigned char *d = job->decided;
  const int64_t kv = p->K * p->V, nO = p->T * p->HV * p->V;
  const int64_t nHT = p->want_final_state ? p->N * p->HV * kv : 0;
  int64_t need = -1;
  for (int64_t t = 0; t < p->T; t++)
    for (int64_t j = 0; j < p->V; j++)
      if (!d[(t * p->HV + hv) * p->V + j]) need = t + 1;
  for (int64_t n = 0; p->want_final_state && n < p->N; n++)
    for (int64_t e = 0; e < kv; e++)
      if (!d[nO + (n * p->HV + hv) * kv + e] && job->cu[n + 1] > need) need = job->cu[n + 1];
  for (int64_t c = 0; c < p->n_checkpoints; c++)
    for (int64_t e = 0; e < kv; e++)
      if (!d[nO + nHT + (c * p->HV + hv) * kv + e] && job->t->checkpoints[c] + 1 > need)
        need = job->t->checkpoints[c] + 1;
  return need;
}

/* Builds the sub-problem of head hv on tokens [0, T1).  Returns KDA_OK or KDA_ENOMEM. */
static int sub_build(const kda_cert_job *job, int64_t hv, int64_t T1, sub *s) {
  const kda_problem *p = job->p;
  const kda_tensors_f64 *t = job->t;
  const int64_t K = p->K, V = p->V, kv = K * V, GW = kda_problem_gate_width(p);
  const int64_t h = p->head_map == KDA_HEADMAP_DIV ? hv / (p->HV / p->H) : hv % p->H;
  memset(s, 0, sizeof *s);
  s->p = *p;
  int64_t N1 = p->N;
  if (T1 < p->T) { /* the sequences that start before T1, the last one cut at T1 */
    N1 = 0;
    while (N1 < p->N && (job->cu[N1] < T1 || N1 == 0)) N1++;
  }
  int64_t C1 = 0;
  while (C1 < p->n_checkpoints && t->checkpoints[C1] < T1) C1++;
  s->p.T = T1, s->p.N = N1, s->p.H = 1, s->p.HV = 1, s->p.n_checkpoints = C1;
  s->p.head_map = KDA_HEADMAP_DIV;
  s->cu = malloc((size_t)(N1 + 1) * sizeof *s->cu);
  s->cp = malloc((size_t)(C1 + 1) * sizeof *s->cp);
  s->q = dalloc(T1 * K), s->k = dalloc(T1 * K), s->v = dalloc(T1 * V), s->o = dalloc(T1 * V);
  s->beta = dalloc(T1), s->g = dalloc(T1 * GW), s->A_log = dalloc(1), s->dt_bias = dalloc(GW);
  s->h0 = dalloc(N1 * kv), s->ht = dalloc(N1 * kv), s->hc = dalloc(C1 * kv);
  if (!s->cu || !s->cp || !s->q || !s->k || !s->v || !s->o || !s->beta || !s->g || !s->A_log ||
      !s->dt_bias || !s->h0 || !s->ht || !s->hc)
    return KDA_ENOMEM;
  for (int64_t n = 0; n <= N1; n++) s->cu[n] = n < N1 ? job->cu[n] : T1;
  for (int64_t c = 0; c < C1; c++) s->cp[c] = t->checkpoints[c];
  for (int64_t tok = 0; tok < T1; tok++) {
    memcpy(s->q + tok * K, t->q + (tok * p->H + h) * K, (size_t)K * sizeof(double));
    memcpy(s->k + tok * K, t->k + (tok * p->H + h) * K, (size_t)K * sizeof(double));
    memcpy(s->v + tok * V, t->v + (tok * p->HV + hv) * V, (size_t)V * sizeof(double));
    s->beta[tok] = t->beta[tok * p->HV + hv];
    if (GW > 0 && t->g)
      memcpy(s->g + tok * GW, t->g + (tok * p->HV + hv) * GW, (size_t)GW * sizeof(double));
  }
  if (t->A_log) s->A_log[0] = t->A_log[hv];
  if (t->dt_bias && GW > 0) memcpy(s->dt_bias, t->dt_bias + hv * GW, (size_t)GW * sizeof(double));
  for (int64_t n = 0; p->has_initial_state && n < N1; n++)
    memcpy(s->h0 + n * kv, t->h0 + (n * p->HV + hv) * kv, (size_t)kv * sizeof(double));
  return KDA_OK;
}

static void sub_tensors(const sub *s, const kda_tensors_f64 *full, kda_tensors_f64 *t) {
  memset(t, 0, sizeof *t);
  t->q = s->q, t->k = s->k, t->v = s->v, t->beta = s->beta, t->o = s->o;
  t->g = full->g ? s->g : NULL;
  t->A_log = full->A_log ? s->A_log : NULL;
  t->dt_bias = full->dt_bias ? s->dt_bias : NULL;
  t->h0 = s->p.has_initial_state ? s->h0 : NULL;
  t->ht = s->ht, t->hc = s->hc;
  t->cu_seqlens = s->cu;
  t->checkpoints = s->p.n_checkpoints ? s->cp : NULL;
}

/* Checks the head's decided values of the prefix against MPFR's and writes MPFR's into
 * job->val.  Returns the index of the first disagreement, or -1. */
static int64_t merge(const kda_cert_job *job, int64_t hv, const sub *s) {
  const kda_problem *p = job->p;
  const int64_t kv = p->K * p->V, nO = p->T * p->HV * p->V, T1 = s->p.T;
  const int64_t nHT = p->want_final_state ? p->N * p->HV * kv : 0;
  int64_t bad = -1;
#define PUT(idx, x)                                                                            \
  do {                                                                                         \
    const int64_t i_ = (idx);                                                                  \
    if (bad < 0 && job->decided[i_] && kda_mpfr_bits(job->val[i_]) != kda_mpfr_bits(x))       \
      bad = i_;                                                                                \
    if (bad < 0) job->val[i_] = (x);                                                           \
    if (bad < 0 && !job->decided[i_]) job->decided[i_] = 2; /* certified by MPFR */            \
  } while (0)
  for (int64_t tok = 0; tok < T1; tok++)
    for (int64_t j = 0; j < p->V; j++) PUT((tok * p->HV + hv) * p->V + j, s->o[tok * p->V + j]);
  for (int64_t n = 0; p->want_final_state && n < s->p.N; n++)
    if (job->cu[n + 1] <= T1) /* a whole sequence: its final state */
      for (int64_t e = 0; e < kv; e++) PUT(nO + (n * p->HV + hv) * kv + e, s->ht[n * kv + e]);
  for (int64_t c = 0; c < s->p.n_checkpoints; c++)
    for (int64_t e = 0; e < kv; e++) PUT(nO + nHT + (c * p->HV + hv) * kv + e, s->hc[c * kv + e]);
#undef PUT
  return bad;
}

int kda_cert_fallback_heads(const kda_cert_job *job, const kda_mpfr_options *mo,
                            int32_t *method, int64_t *n_heads, int64_t *steps,
                            kda_mpfr_report *last, char *err, size_t errlen) {
  *method = KDA_CERT_PROVEN;
  for (int64_t hv = 0; hv < job->p->HV; hv++) {
    const int64_t T1 = prefix_needed(job, hv);
    if (T1 < 0) continue;
    sub s;
    int st = sub_build(job, hv, T1, &s);
    if (st) {
      sub_free(&s);
      return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", who);
    }
    kda_tensors_f64 t;
    sub_tensors(&s, job->t, &t);
    st = kda_mpfr_forward(&s.p, &t, mo, last, err, errlen);
    const int64_t bad = st ? -1 : merge(job, hv, &s);
    sub_free(&s);
    if (st) return st;
    if (bad >= 0)
      return kda_fail(KDA_ENOTCERT, err, errlen,
                      "%s: value %lld (o, ht, hc flattened) is %a by the double-double bound "
                      "and differs from MPFR's: the two certifiers disagree", who,
                      (long long)bad, job->val[bad]);
    if (last->method == KDA_CERT_AGREED) *method = KDA_CERT_AGREED;
    (*n_heads)++;
    *steps += T1;
  }
  /* every value is now decided (1) or MPFR's (2): a 0 left is a bug of this file */
  int64_t left = -1;
  const int64_t n = kda_mpfr_count_values(job->p);
  for (int64_t i = 0; i < n; i++) {
    if (!job->decided[i] && left < 0) left = i;
    if (job->decided[i] == 2) job->decided[i] = 0;
  }
  if (left >= 0)
    return kda_fail(KDA_ENOTCERT, err, errlen, "%s: value %lld (o, ht, hc flattened) was "
                    "certified by neither phase", who, (long long)left);
  return KDA_OK;
}

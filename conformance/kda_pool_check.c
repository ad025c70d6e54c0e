/* kda_pool_check.c: the state-pool decode check of the serving-path checks (SPEC.md §7.7):
 * a decode batch whose states live in a pool of slots named by state_indices (§7.8).
 * SPDX-License-Identifier: MIT
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_serving.h"
#include "kda_score_internal.h"

/* A fixed LCG: the slot shuffle and the junk are the same on every run and machine. */
static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* The reference's state of every sequence at its decode cut, rounded to the pool's type. */
static int decode_states(const kda_case *c, const int64_t *zero, const int64_t *at, int f32,
                         double **h, char *err, size_t errlen) {
  kda_case p1;
  kda_truth t;
  int st = kda_serving_part(c, zero, at, c->h0, NULL, "pool-prefix", &p1, err, errlen);
  if (st != KDA_OK) return st;
  st = kda_truth_compute_lazy(&p1, &t, err, errlen); /* its states only */
  kda_case_free(&p1);
  if (st != KDA_OK) return st;
  uint64_t n = (uint64_t)(c->p.N * c->p.HV * c->p.K * c->p.V);
  for (uint64_t i = 0; f32 && i < n; i++) t.out.ht[i] = (float)t.out.ht[i];
  *h = t.out.ht, t.out.ht = NULL;
  kda_truth_free(&t);
  return KDA_OK;
}

/* The pool layout of SPEC.md §7.7: N sequences at shuffled slots of S = 2N + 3, a padding
 * entry (KDA_PAD_SLOT) in the middle of the batch as a zero-length sequence, NaN-free junk
 * (exact in float32, both signs) in the free slots. */
typedef struct pool_plan {
  int64_t N, S, slot;  /* sequences, slots, doubles per slot */
  int64_t *idx;        /* [N + 1] state_indices of the padded batch */
  int64_t *cu;         /* [N + 2] its cu_seqlens */
  int64_t *of;         /* [N] the slot of sequence n */
  unsigned char *used; /* [S] */
  double *pool0;       /* [S * slot] */
} pool_plan;

static void plan_free(pool_plan *q) {
  free(q->idx), free(q->cu), free(q->of), free(q->used), free(q->pool0);
}

static int plan_make(const kda_case *d, const double *h, pool_plan *q) {
  const int64_t N = d->p.N, S = 2 * N + 3, slot = d->p.HV * d->p.K * d->p.V, pad = N / 2;
  *q = (pool_plan){N, S, slot, malloc((size_t)(N + 1) * 8), malloc((size_t)(N + 2) * 8),
                   malloc((size_t)N * 8 + 8), calloc((size_t)S, 1),
                   malloc((size_t)(S * slot) * sizeof(double))};
  int64_t *perm = malloc((size_t)S * 8);
  if (!q->idx || !q->cu || !q->of || !q->used || !q->pool0 || !perm)
    return free(perm), plan_free(q), 0;
  uint64_t seed = 0x6b64612d706f6f6cull; /* "kda-pool" */
  for (int64_t i = 0; i < S; i++) perm[i] = i;
  for (int64_t i = S - 1; i > 0; i--) {
    int64_t j = (int64_t)(lcg(&seed) % (uint64_t)(i + 1)), x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  for (int64_t i = 0; i < S * slot; i++)
    q->pool0[i] = ((double)(lcg(&seed) % 4001) - 2000.0) / 512.0;
  for (int64_t n = 0, b = 0; b <= N; b++) {
    q->cu[b] = d->cu_seqlens[n];
    if (b == pad) { q->idx[b] = KDA_PAD_SLOT; continue; }
    q->of[n] = perm[n], q->idx[b] = perm[n], q->used[perm[n]] = 1;
    memcpy(q->pool0 + perm[n] * slot, h + n * slot, (size_t)slot * sizeof(double));
    n++;
  }
  q->cu[N + 1] = d->cu_seqlens[N];
  free(perm);
  return 1;
}

/* The first slot whose bits differ from the plan's (all slots when all_slots, else the free
 * ones), or -1. */
static int64_t changed_slot(const pool_plan *q, const double *pool, int all_slots) {
  for (int64_t s = 0; s < q->S; s++)
    if ((all_slots || !q->used[s]) &&
        memcmp(pool + s * q->slot, q->pool0 + s * q->slot, (size_t)q->slot * sizeof *pool))
      return s;
  return -1;
}

/* One pool call of plan q's batch (problem pp, inputs in) with indices idx on a fresh copy of
 * the plan's pool (returned in *pool). */
static int pool_call(const kda_pool_caller *w, const kda_problem *pp,
                     const kda_tensors_f64 *in, const pool_plan *q, const int64_t *idx,
                     double *pool, kda_outputs *out, kda_call_result *cr, char *err,
                     size_t errlen) {
  memcpy(pool, q->pool0, (size_t)(q->S * q->slot) * sizeof *pool);
  return w->fn(w->ctx, pp, in, idx, q->S, pool, out, cr, err, errlen);
}

/* Judges the in-range call: free slots keep their bits; o and the named slots are scored as
 * o and ht of case d (§7.3). */
static int judge_decode(const kda_case *d, const kda_truth *td, const pool_plan *q,
                        const double *pool, const kda_outputs *out, int32_t cls,
                        kda_pool_result *res, char *err, size_t errlen) {
  int64_t s = changed_slot(q, pool, 0);
  if (s >= 0)
    return res->failed = 1, snprintf(res->msg, sizeof res->msg, "state-pool decode: slot %lld, "
                                     "named by no sequence, changed", (long long)s), KDA_OK;
  kda_outputs obs = *out;
  obs.ht = malloc((size_t)(q->N * q->slot) * sizeof(double));
  obs.hc = NULL, obs.n_hc = 0, obs.n_ht = (uint64_t)(q->N * q->slot);
  if (!obs.ht) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  for (int64_t n = 0; n < q->N; n++)
    memcpy(obs.ht + n * q->slot, pool + q->of[n] * q->slot, (size_t)q->slot * sizeof(double));
  kda_score sc;
  int st = kda_score_outputs(d, td, &obs, cls, &sc, err, errlen);
  free(obs.ht);
  if (st != KDA_OK) return st;
  if (!kda_score_within_caps(&sc)) {
    res->failed = 1;
    snprintf(res->msg, sizeof res->msg, "state-pool decode: o error %.4g units (cap %g), "
             "final states in their slots %.4g units (cap %g), %llu NaN", sc.o.worst,
             sc.caps.o, sc.ht.worst, sc.caps.ht,
             (unsigned long long)(sc.o.n_nan + sc.ht.n_nan));
  }
  kda_score_free(&sc);
  return KDA_OK;
}

/* The out-of-range call: the first sequence's slot replaced by S must be KDA_EINVAL and leave
 * every slot's bits. */
static void judge_reject(const pool_plan *q, const double *pool, const kda_call_result *cr,
                         kda_pool_result *res) {
  if (cr->outcome != KDA_CALL_OK && cr->outcome != KDA_CALL_ERROR &&
      cr->outcome != KDA_CALL_UNSUPPORTED) {
    res->outcome = cr->outcome;
    snprintf(res->msg, sizeof res->msg, "state-pool decode, index out of range: %.400s", cr->msg);
    return;
  }
  int64_t s = changed_slot(q, pool, 1);
  if (cr->outcome != KDA_CALL_ERROR || cr->status != KDA_EINVAL)
    res->failed = 1, snprintf(res->msg, sizeof res->msg, "state-pool decode: a state index %lld "
                              "(>= the %lld slots) was not rejected with KDA_EINVAL (%s)",
                              (long long)q->S, (long long)q->S, kda_strstatus(cr->status));
  else if (s >= 0)
    res->failed = 1, snprintf(res->msg, sizeof res->msg, "state-pool decode: the rejected call "
                              "(an index out of range) changed slot %lld", (long long)s);
}

static int run_plan(const kda_pool_caller *w, const kda_case *d, const pool_plan *q, int32_t cls,
                    kda_pool_result *res, char *err, size_t errlen) {
  kda_problem pp = d->p;
  pp.N = q->N + 1;
  kda_tensors_f64 in;
  kda_case_tensors(d, &in);
  in.h0 = NULL, in.cu_seqlens = q->cu;
  kda_outputs out = {0};
  kda_truth td = {0};
  kda_call_result cr;
  double *pool = malloc((size_t)(q->S * q->slot) * sizeof *pool);
  int64_t *bad = malloc((size_t)(q->N + 1) * 8);
  int st = pool && bad ? kda_outputs_alloc(&pp, &out, err, errlen)
                       : (snprintf(err, errlen, "out of memory"), KDA_ENOMEM);
  if (st == KDA_OK) st = pool_call(w, &pp, &in, q, q->idx, pool, &out, &cr, err, errlen);
  if (st == KDA_OK && cr.outcome != KDA_CALL_OK) {
    res->outcome = cr.outcome;
    snprintf(res->msg, sizeof res->msg, "state-pool decode: %.400s", cr.msg);
  }
  if (st == KDA_OK && cr.outcome == KDA_CALL_OK) st = kda_truth_compute(d, NULL, &td, err, errlen);
  if (st == KDA_OK && cr.outcome == KDA_CALL_OK)
    st = judge_decode(d, &td, q, pool, &out, cls, res, err, errlen);
  if (st == KDA_OK && res->outcome == KDA_CALL_OK && !res->failed) {
    memcpy(bad, q->idx, (size_t)(q->N + 1) * 8);
    bad[q->idx[0] == KDA_PAD_SLOT ? 1 : 0] = q->S;
    st = pool_call(w, &pp, &in, q, bad, pool, &out, &cr, err, errlen);
    if (st == KDA_OK) judge_reject(q, pool, &cr, res);
  }
  kda_truth_free(&td);
  kda_outputs_free(&out);
  free(pool), free(bad);
  return st;
}

int kda_serving_pool(const kda_pool_caller *w, const kda_case *c, int32_t cls,
                     kda_pool_result *res, char *err, size_t errlen) {
  memset(res, 0, sizeof *res);
  const int64_t N = c->p.N;
  int64_t *wk = calloc((size_t)(3 * N + 1), sizeof *wk);
  if (!wk) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  int64_t *zero = wk, *at = wk + N, *end = wk + 2 * N;
  kda_serving_cut(c, KDA_SERVING_DECODE, at);
  for (int64_t n = 0; n < N; n++) end[n] = c->cu_seqlens[n + 1] - c->cu_seqlens[n];
  double *h = NULL;
  kda_case d = {0};
  pool_plan q = {0};
  int f32 = KDA_STATE_DTYPE(w->output_dtype) == KDA_PRECISION_FP32; /* §7.8 */
  int st = decode_states(c, zero, at, f32, &h, err, errlen);
  if (st == KDA_OK) st = kda_serving_part(c, at, end, h, NULL, "pool", &d, err, errlen);
  if (st == KDA_OK && !plan_make(&d, h, &q))
    st = KDA_ENOMEM, snprintf(err, errlen, "out of memory");
  else if (st == KDA_OK)
    st = run_plan(w, &d, &q, cls, res, err, errlen), plan_free(&q);
  if (d.cu_seqlens) kda_case_free(&d);
  free(h), free(wk);
  return st;
}

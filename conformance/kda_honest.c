/* kda_honest.c: the honest ensemble of the fp32 envelope (SPEC.md §7.3): float32 KDA
 * evaluations that are correct in exact arithmetic and differ from ref-f32 only in the order of
 * their operations, as real float32 kernels do.
 * SPDX-License-Identifier: MIT
 *
 * Member m (seed m >= 1) is ref-f32's recurrence with every order choice drawn at random, per
 * token and head, from a hash of (m, global token position, value head), so that a member is a
 * deterministic float32 kernel (the same call gives the same bits, a chained call the same
 * bits as one whole call):
 *   - each reduction (the sums of squares of the q/k normalisation, the prediction S^T k, the
 *     readout S^T q) adds its terms in a random permutation (one per token and reduction,
 *     shared by the value columns, so that the loops over the columns vectorise);
 *   - the write S + k (b (v - p)) is one of: that association, S + (b k)(v - p), a fused
 *     multiply-add fmaf(k, b (v - p), S), or two rank-one updates (S + k (b v)) - k (b p);
 *   - odd members take their decays from the float32 prefix sum G of the log-gates within
 *     64-token chunks of the sequence, a = exp(G_t - G_{t-1}), G counting from the chunk's
 *     second token (the first token's decay applies to the chunk's initial state directly), as
 *     fla's chunked kernels form their decays; even ones from exp(g) directly; members with bit 1 of m set round exp and the sigmoid of beta from
 *     double (a correctly rounded libm), the others use expf.
 * The spread of these evaluations around the truth is what plain float32 arithmetic makes of the
 * case; the envelope takes its maximum (kda_envelope.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_ref.h"
#include "kda_ref_internal.h"
#include "kda_score_internal.h"

#define HONEST_CHUNK 64 /* tokens of a chunk for the chunk-local prefix sum of the gates */

typedef struct honest_run {
  const kda_problem *p;
  const kda_tensors_f32 *ts;
  const kda_honest_at *at;
  uint64_t seed, rng;
  int64_t GW, bos;
  float *S, *qq, *kk, *a, *G, *pr;
  int *ix;
} honest_run;

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static uint64_t next(honest_run *r) { return mix64(r->rng += 0x9e3779b97f4a7c15ULL); }

/* A random permutation of [0, n) into r->ix (Fisher-Yates). */
static void shuffle(honest_run *r, int64_t n) {
  for (int64_t i = 0; i < n; i++) r->ix[i] = (int)i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(next(r) % (uint64_t)(i + 1));
    int t = r->ix[i];
    r->ix[i] = r->ix[j], r->ix[j] = t;
  }
}

/* sum_i x[i] * y[i] in the order of a fresh permutation. */
static float dot(honest_run *r, const float *x, const float *y, int64_t n) {
  shuffle(r, n);
  float acc = 0.0f;
  for (int64_t i = 0; i < n; i++) acc = acc + x[r->ix[i]] * y[r->ix[i]];
  return acc;
}

/* out[j] = sum_i S[i][j] * y[i] for every column j, the terms of every column added in the
 * order of one fresh permutation of i (one loop over j per term: vectorisable). */
static void col_dots(honest_run *r, const float *S, const float *y, float *out) {
  const int64_t K = r->p->K, V = r->p->V;
  shuffle(r, K);
  for (int64_t j = 0; j < V; j++) out[j] = 0.0f;
  for (int64_t i = 0; i < K; i++) {
    const float *row = S + r->ix[i] * V, yi = y[r->ix[i]];
    for (int64_t j = 0; j < V; j++) out[j] = out[j] + row[j] * yi;
  }
}

static float exp_m(const honest_run *r, float x) {
  return (r->seed & 2) ? (float)exp((double)x) : expf(x);
}

static float beta_m(const honest_run *r, float bs) {
  const int32_t mode = r->p->beta_mode;
  if (!(r->seed & 2) || mode == KDA_BETA_PROB) return kda_ref32_beta(mode, bs);
  double s = 1.0 / (1.0 + exp(-(double)bs));
  return (float)(mode == KDA_BETA_LOGIT ? s : 2.0 * s);
}

static void l2_m(honest_run *r, const float *x, float *y) {
  const kda_problem *p = r->p;
  if (p->l2_mode == KDA_L2_OFF) {
    for (int64_t i = 0; i < p->K; i++) y[i] = x[i];
    return;
  }
  float ss = dot(r, x, x, p->K), eps = (float)p->l2_eps;
  float d = p->l2_mode == KDA_L2_FLA ? sqrtf(ss + eps) : fmaxf(sqrtf(ss), eps);
  for (int64_t i = 0; i < p->K; i++) y[i] = x[i] / d;
}

/* The decays of token t (position pos in its sequence). */
static void decays(honest_run *r, int64_t t, int64_t hv, int64_t pos) {
  const kda_problem *p = r->p;
  const float *g = r->ts->g + kda_ref_off_g(p, r->GW, t, hv);
  const float A_log = kda_ref_needs_A_log(p) ? r->ts->A_log[hv] : 0.0f;
  for (int64_t c = 0; c < r->GW; c++) {
    const float b = kda_ref_needs_dt_bias(p) ? r->ts->dt_bias[hv * r->GW + c] : 0.0f;
    float ge = kda_ref32_gate(p->gate_mode, g[c], b, A_log, p->has_A_log, (float)p->lower_bound);
    if ((r->seed & 1) && pos % HONEST_CHUNK == 0) {
      r->G[c] = 0.0f; /* the chunk's first decay applies to the state directly; G counts on */
    } else if (r->seed & 1) {
      const float prev = r->G[c];
      r->G[c] = prev + ge;
      ge = r->G[c] - prev;
    }
    r->a[c] = exp_m(r, ge);
  }
  for (int64_t i = r->GW; i < p->K; i++) r->a[i] = r->a[0];
}

static void write_m(honest_run *r, const float *v, float b) {
  const int64_t K = r->p->K, V = r->p->V;
  const float *pr = r->pr;
  float *S = r->S;
  switch ((int)(next(r) & 3)) {
  case 0:
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) S[i * V + j] = S[i * V + j] + r->kk[i] * (b * (v[j] - pr[j]));
    break;
  case 1:
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) S[i * V + j] = S[i * V + j] + (b * r->kk[i]) * (v[j] - pr[j]);
    break;
  case 2:
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) S[i * V + j] = fmaf(r->kk[i], b * (v[j] - pr[j]), S[i * V + j]);
    break;
  default:
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++)
        S[i * V + j] = (S[i * V + j] + r->kk[i] * (b * v[j])) - r->kk[i] * (b * pr[j]);
    break;
  }
}

static void h_load(void *ctx, int64_t n, int64_t hv) {
  honest_run *r = ctx;
  const kda_problem *p = r->p;
  r->bos = r->ts->cu_seqlens[n];
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++)
      r->S[i * p->V + j] =
          p->has_initial_state ? r->ts->h0[kda_ref_off_state(p, n, hv) + kda_ref_state_at(p, i, j)]
                               : 0.0f;
  (void)hv;
}

static void h_step(void *ctx, int64_t t, int64_t hv) {
  honest_run *r = ctx;
  const kda_problem *p = r->p;
  const int64_t K = p->K, V = p->V;
  (void)V;
  r->rng = mix64(r->seed * 0x100000001b3ULL ^ mix64((uint64_t)(r->at->t0 + t) * 131 + (uint64_t)hv));
  const int64_t h = kda_ref_head(p->head_map, p->H, p->HV, hv);
  l2_m(r, r->ts->q + kda_ref_off_qk(p, t, h), r->qq);
  l2_m(r, r->ts->k + kda_ref_off_qk(p, t, h), r->kk);
  const float scale = (float)p->scale;
  for (int64_t i = 0; i < K; i++) r->qq[i] = scale * r->qq[i];
  const float b = beta_m(r, r->ts->beta[kda_ref_off_beta(p, t, hv)]);
  if (kda_ref_family_decays(p->family)) {
    decays(r, t, hv, r->at->pos0 + (t - r->bos));
    kda_ref32_decay(K, V, r->S, r->a);
  }
  if (kda_ref_family_erases(p->family)) col_dots(r, r->S, r->kk, r->pr);
  else
    for (int64_t j = 0; j < V; j++) r->pr[j] = 0.0f;
  write_m(r, r->ts->v + kda_ref_off_v(p, t, hv), b);
  col_dots(r, r->S, r->qq, r->ts->o + kda_ref_off_v(p, t, hv));
}

static void h_store(const honest_run *r, float *dst) {
  const kda_problem *p = r->p;
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++) dst[kda_ref_state_at(p, i, j)] = r->S[i * p->V + j];
}

static void h_checkpoint(void *ctx, int64_t c, int64_t hv) {
  honest_run *r = ctx;
  h_store(r, r->ts->hc + kda_ref_off_state(r->p, c, hv));
}

static void h_final(void *ctx, int64_t n, int64_t hv) {
  honest_run *r = ctx;
  h_store(r, r->ts->ht + kda_ref_off_state(r->p, n, hv));
}

int kda_honest_forward_f32(const kda_problem *p, const kda_tensors_f32 *ts, uint64_t member,
                           const kda_honest_at *at, char *err, size_t errlen) {
  static const kda_honest_at whole = {0, 0};
  const size_t K = (size_t)p->K, V = (size_t)p->V;
  float *w = malloc((K * V + 5 * K + V + 1) * sizeof *w);
  int *ix = malloc((K + 1) * sizeof *ix);
  if (!w || !ix) {
    free(w), free(ix);
    return snprintf(err, errlen, "out of memory for the honest ensemble"), KDA_ENOMEM;
  }
  honest_run r = {p, ts, at ? at : &whole, member, 0, kda_problem_gate_width(p), 0,
                  w, w + K * V, w + K * V + K, w + K * V + 2 * K, w + K * V + 3 * K,
                  w + K * V + 4 * K, ix};
  memset(r.G, 0, K * sizeof *r.G);
  const kda_ref_visitor vis = {&r, h_load, h_step, h_checkpoint, h_final};
  kda_ref_drive(p, ts->cu_seqlens, ts->checkpoints, &vis);
  free(w), free(ix);
  return KDA_OK;
}

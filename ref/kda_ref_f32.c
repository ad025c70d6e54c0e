/* kda_ref_f32.c: the float32 twin of the reference (SPEC.md §9), every operation in float.
 * SPDX-License-Identifier: MIT
 *
 * Line for line the structure of kda_ref.c: the same step functions, the same order of every
 * operation and of every sum (key index i ascending, from +0), with float storage and the
 * float functions expf, log1pf, sqrtf, fmaxf.  The double options of kda_problem (scale,
 * lower_bound, l2_eps) are rounded to float once.  It is the plain baseline optimized backends
 * are compared against, shaped like ggml's CPU op: four passes over the state per token
 * (decay, erase, write, readout).  The driver loop is shared (kda_ref_internal.h).
 */
#include "kda_ref.h"

#include <math.h>
#include <stdlib.h>

#include "kda_ref_internal.h"

/* ==== Step functions (SPEC.md §3.1).  S is one head's state, [K][V], S[i*V + j]. ==== */

/* Decay: scale key row i of S by a[i] = expf(g_eff[i]). */
void kda_ref32_decay(int64_t K, int64_t V, float *S, const float *a) {
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) S[i * V + j] = a[i] * S[i * V + j];
}

/* Erase (prediction): p[j] = sum_i S[i][j] * k[i], i ascending.  p must not alias S. */
void kda_ref32_erase(int64_t K, int64_t V, const float *S, const float *k, float *p) {
  for (int64_t j = 0; j < V; j++) p[j] = 0.0f;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) p[j] = p[j] + S[i * V + j] * k[i];
}

/* Write (delta rule): S[i][j] += k[i] * (beta * (v[j] - p[j])). */
void kda_ref32_write(int64_t K, int64_t V, float *S, const float *k, const float *v,
                     const float *p, float beta) {
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) S[i * V + j] = S[i * V + j] + k[i] * (beta * (v[j] - p[j]));
}

/* Readout: o[j] = sum_i S[i][j] * q[i], i ascending, q already scaled. */
void kda_ref32_readout(int64_t K, int64_t V, const float *S, const float *q, float *o) {
  for (int64_t j = 0; j < V; j++) o[j] = 0.0f;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) o[j] = o[j] + S[i * V + j] * q[i];
}

/* ==== Preprocessing (SPEC.md §4), the formulas of kda_ref.c in float. ==== */

/* softplus(y) = max(y, 0) + log1pf(expf(-|y|)). */
static float kda_ref32_softplus(float y) {
  return (y > 0.0f ? y : 0.0f) + log1pf(expf(-fabsf(y)));
}

/* sigmoid(y) = 1 / (1 + e^-y) for y >= 0 and e^y / (1 + e^y) for y < 0. */
static float kda_ref32_sigmoid(float y) {
  if (y >= 0.0f) return 1.0f / (1.0f + expf(-y));
  float e = expf(y);
  return e / (1.0f + e);
}

/* SPEC.md §4.1.  An invalid mode, or softplus without A_log, gives NaN. */
float kda_ref32_gate(int32_t gate_mode, float x, float b, float A_log, int32_t has_A_log,
                     float lower_bound) {
  switch (gate_mode) {
  case KDA_GATE_LOG: return x;
  case KDA_GATE_SOFTPLUS:
    if (!has_A_log) return NAN;
    return -(expf(A_log) * kda_ref32_softplus(x + b));
  case KDA_GATE_LOWER_BOUND:
    if (has_A_log) return lower_bound * kda_ref32_sigmoid(expf(A_log) * (x + b));
    return lower_bound * kda_ref32_sigmoid(x + b);
  default: return NAN;
  }
}

/* SPEC.md §4.2.  An invalid mode gives NaN. */
float kda_ref32_beta(int32_t beta_mode, float beta) {
  switch (beta_mode) {
  case KDA_BETA_PROB: return beta;
  case KDA_BETA_LOGIT: return kda_ref32_sigmoid(beta);
  case KDA_BETA_LOGIT_NEG: return 2.0f * kda_ref32_sigmoid(beta);
  default: return NAN;
  }
}

/* SPEC.md §4.3: y = x / sqrtf(sum x^2 + eps) (fla) or x / fmaxf(sqrtf(sum x^2), eps) (ggml),
 * the sum of squares in float, i ascending from +0.  An invalid mode gives NaN. */
void kda_ref32_l2(int32_t l2_mode, float eps, int64_t n, const float *x, float *y) {
  if (l2_mode == KDA_L2_OFF) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return;
  }
  float ss = 0.0f;
  for (int64_t i = 0; i < n; i++) ss = ss + x[i] * x[i];
  float d = NAN;
  if (l2_mode == KDA_L2_FLA) d = sqrtf(ss + eps);
  if (l2_mode == KDA_L2_GGML) d = fmaxf(sqrtf(ss), eps);
  for (int64_t i = 0; i < n; i++) y[i] = x[i] / d;
}

/* ==== The float32 driver (SPEC.md §3.2). ==== */

typedef struct run32 {
  const kda_problem *p;
  const kda_tensors_f32 *ts;
  int64_t GW;  /* gate width: K (KDA), 1 (GDN), 0 (no decay) */
  float *S;    /* [K][V] state of the current (sequence, head) */
  float *qq;   /* [K] scale * L2(q) */
  float *kk;   /* [K] L2(k) */
  float *a;    /* [K] decay factors expf(g_eff) */
  float *pr;   /* [V] prediction S^T k (0 for the linear family) */
  float beta;  /* beta_eff */
  float scale, lower_bound, l2_eps; /* p's options rounded to float */
} run32;

/* Copies a stored state (layout p->state_layout) into the working [K][V] S, or back. */
static void load_state32(const kda_problem *p, const float *src, float *S) {
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++) S[i * p->V + j] = src[kda_ref_state_at(p, i, j)];
}
static void store_state32(const kda_problem *p, const float *S, float *dst) {
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++) dst[kda_ref_state_at(p, i, j)] = S[i * p->V + j];
}

/* a[i] = expf(g_eff) for each gate channel; one channel (GDN) is broadcast to every key row. */
static void prepare_gate32(run32 *r, int64_t t, int64_t hv) {
  const kda_problem *p = r->p;
  const float *g = r->ts->g + kda_ref_off_g(p, r->GW, t, hv);
  const float A_log = kda_ref_needs_A_log(p) ? r->ts->A_log[hv] : 0.0f;
  for (int64_t c = 0; c < r->GW; c++) {
    const float b = kda_ref_needs_dt_bias(p) ? r->ts->dt_bias[hv * r->GW + c] : 0.0f;
    r->a[c] = expf(kda_ref32_gate(p->gate_mode, g[c], b, A_log, p->has_A_log, r->lower_bound));
  }
  for (int64_t i = r->GW; i < p->K; i++) r->a[i] = r->a[0];
}

/* SPEC.md §4: qq = scale * L2(q), kk = L2(k) of head h(hv); a; beta_eff. */
static void prepare32(run32 *r, int64_t t, int64_t hv) {
  const kda_problem *p = r->p;
  const int64_t h = kda_ref_head(p->head_map, p->H, p->HV, hv);
  kda_ref32_l2(p->l2_mode, r->l2_eps, p->K, r->ts->q + kda_ref_off_qk(p, t, h), r->qq);
  kda_ref32_l2(p->l2_mode, r->l2_eps, p->K, r->ts->k + kda_ref_off_qk(p, t, h), r->kk);
  for (int64_t i = 0; i < p->K; i++) r->qq[i] = r->scale * r->qq[i];
  if (r->GW > 0) prepare_gate32(r, t, hv);
  r->beta = kda_ref32_beta(p->beta_mode, r->ts->beta[kda_ref_off_beta(p, t, hv)]);
}

static void load32(void *ctx, int64_t n, int64_t hv) {
  run32 *r = ctx;
  if (r->p->has_initial_state) {
    load_state32(r->p, r->ts->h0 + kda_ref_off_state(r->p, n, hv), r->S);
  } else {
    for (int64_t e = 0; e < r->p->K * r->p->V; e++) r->S[e] = 0.0f;
  }
}

/* One token: decay, erase, write, readout (SPEC.md §3.1, §5). */
static void step32(void *ctx, int64_t t, int64_t hv) {
  run32 *r = ctx;
  const kda_problem *p = r->p;
  const int64_t K = p->K, V = p->V;
  prepare32(r, t, hv);
  if (kda_ref_family_decays(p->family)) kda_ref32_decay(K, V, r->S, r->a);
  if (kda_ref_family_erases(p->family)) {
    kda_ref32_erase(K, V, r->S, r->kk, r->pr);
  } else {
    for (int64_t j = 0; j < V; j++) r->pr[j] = 0.0f;
  }
  kda_ref32_write(K, V, r->S, r->kk, r->ts->v + kda_ref_off_v(p, t, hv), r->pr, r->beta);
  kda_ref32_readout(K, V, r->S, r->qq, r->ts->o + kda_ref_off_v(p, t, hv));
}

static void store_checkpoint32(void *ctx, int64_t c, int64_t hv) {
  run32 *r = ctx;
  store_state32(r->p, r->S, r->ts->hc + kda_ref_off_state(r->p, c, hv));
}

static void store_final32(void *ctx, int64_t n, int64_t hv) {
  run32 *r = ctx;
  store_state32(r->p, r->S, r->ts->ht + kda_ref_off_state(r->p, n, hv));
}

int kda_ref_forward_f32(const kda_problem *p, const kda_tensors_f32 *t, char *err,
                        size_t errlen) {
  static const char who[] = "kda_ref_forward_f32";
  if (!t) return kda_fail(KDA_EINVAL, err, errlen, "%s: tensors are NULL", who);
  const kda_ref_buffers b = {t->q,  t->k,  t->v,  t->g,          t->beta,
                             t->A_log, t->dt_bias, t->h0, t->cu_seqlens, t->checkpoints,
                             t->o,  t->ht, t->hc};
  int st = kda_ref_check_call(who, p, &b, err, errlen);
  if (st) return st;
  /* S, qq, kk, a, pr; K*V fits (kda_problem_check bounds it by SIZE_MAX / 16). */
  const size_t K = (size_t)p->K, V = (size_t)p->V;
  float *work = malloc((K * V + 3 * K + V) * sizeof *work);
  if (!work)
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot allocate the %zu x %zu state", who, K, V);
  run32 r = {p, t, kda_problem_gate_width(p), work, work + K * V, work + K * V + K,
             work + K * V + 2 * K, work + K * V + 3 * K, 0.0f,
             (float)p->scale, (float)p->lower_bound, (float)p->l2_eps};
  const kda_ref_visitor vis = {&r, load32, step32, store_checkpoint32, store_final32};
  kda_ref_drive(p, t->cu_seqlens, t->checkpoints, &vis);
  free(work);
  return KDA_OK;
}

/* kda_ref.c: the plain float64 reference of SPEC.md §3-§4 and the driver shared with its twin.
 * SPDX-License-Identifier: MIT
 *
 * Every function is a scalar loop that reads like the math; compiled with -ffp-contract=off so
 * that each * and + is one IEEE double operation.  The float32 twin (kda_ref_f32.c) has the same
 * structure line for line.  Sums run over the key index i = 0, 1, ..., K-1 in order, starting
 * from +0 (SPEC.md §9).
 */
#include "kda_ref.h"

#include <math.h>
#include <stdlib.h>

#include "kda_ref_internal.h"

/* ==== Step functions (SPEC.md §3.1).  S is one head's state, [K][V], S[i*V + j]. ==== */

/* Decay: scale key row i of S by a[i] = exp(g_eff[i]). */
void kda_ref_decay(int64_t K, int64_t V, double *S, const double *a) {
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) S[i * V + j] = a[i] * S[i * V + j];
}

/* Erase (prediction): p[j] = sum_i S[i][j] * k[i], i ascending.  p must not alias S. */
void kda_ref_erase(int64_t K, int64_t V, const double *S, const double *k, double *p) {
  for (int64_t j = 0; j < V; j++) p[j] = 0.0;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) p[j] = p[j] + S[i * V + j] * k[i];
}

/* Write (delta rule): S[i][j] += k[i] * (beta * (v[j] - p[j])).  The grouping is that of fla's
 * fused_recurrent kernel and ggml's CPU op: the scaled residual beta*(v - p) times k[i]. */
void kda_ref_write(int64_t K, int64_t V, double *S, const double *k, const double *v,
                   const double *p, double beta) {
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) S[i * V + j] = S[i * V + j] + k[i] * (beta * (v[j] - p[j]));
}

/* Readout: o[j] = sum_i S[i][j] * q[i], i ascending, q already scaled. */
void kda_ref_readout(int64_t K, int64_t V, const double *S, const double *q, double *o) {
  for (int64_t j = 0; j < V; j++) o[j] = 0.0;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) o[j] = o[j] + S[i * V + j] * q[i];
}

/* ==== Preprocessing (SPEC.md §4). ==== */

/* softplus(y) = log(1 + e^y) = max(y, 0) + log1p(exp(-|y|)): no threshold, no cancellation,
 * relative accuracy in both tails (softplus(-40) = e^-40 (1 - e^-40/2), not 0). */
static double kda_ref_softplus(double y) {
  return (y > 0.0 ? y : 0.0) + log1p(exp(-fabs(y)));
}

/* sigmoid(y) = 1 / (1 + e^-y) for y >= 0 and e^y / (1 + e^y) for y < 0: exp never overflows,
 * sigmoid(-inf) = 0, sigmoid(+inf) = 1. */
static double kda_ref_sigmoid(double y) {
  if (y >= 0.0) return 1.0 / (1.0 + exp(-y));
  double e = exp(y);
  return e / (1.0 + e);
}

/* SPEC.md §4.1.  An invalid mode, or softplus without A_log, gives NaN. */
double kda_ref_gate(int32_t gate_mode, double x, double b, double A_log, int32_t has_A_log,
                    double lower_bound) {
  switch (gate_mode) {
  case KDA_GATE_LOG: return x;
  case KDA_GATE_SOFTPLUS:
    if (!has_A_log) return NAN;
    return -(exp(A_log) * kda_ref_softplus(x + b));
  case KDA_GATE_LOWER_BOUND:
    if (has_A_log) return lower_bound * kda_ref_sigmoid(exp(A_log) * (x + b));
    return lower_bound * kda_ref_sigmoid(x + b);
  default: return NAN;
  }
}

/* SPEC.md §4.2.  An invalid mode gives NaN. */
double kda_ref_beta(int32_t beta_mode, double beta) {
  switch (beta_mode) {
  case KDA_BETA_PROB: return beta;
  case KDA_BETA_LOGIT: return kda_ref_sigmoid(beta);
  case KDA_BETA_LOGIT_NEG: return 2.0 * kda_ref_sigmoid(beta);
  default: return NAN;
  }
}

/* SPEC.md §4.3: y = x / d with d = sqrt(sum x^2 + eps) (fla) or max(sqrt(sum x^2), eps)
 * (ggml); the sum of squares runs i ascending from +0.  An invalid mode gives NaN. */
void kda_ref_l2(int32_t l2_mode, double eps, int64_t n, const double *x, double *y) {
  if (l2_mode == KDA_L2_OFF) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return;
  }
  double ss = 0.0;
  for (int64_t i = 0; i < n; i++) ss = ss + x[i] * x[i];
  double d = NAN;
  if (l2_mode == KDA_L2_FLA) d = sqrt(ss + eps);
  if (l2_mode == KDA_L2_GGML) d = fmax(sqrt(ss), eps);
  for (int64_t i = 0; i < n; i++) y[i] = x[i] / d;
}

/* SPEC.md §4.4.  -1 for an invalid map. */
int64_t kda_ref_head(int32_t head_map, int64_t H, int64_t HV, int64_t hv) {
  switch (head_map) {
  case KDA_HEADMAP_DIV: return hv / (HV / H);
  case KDA_HEADMAP_MOD: return hv % H;
  default: return -1;
  }
}

/* ==== Shared by both twins (declared in kda_ref_internal.h). ==== */

/* One required buffer: NULL is KDA_EINVAL naming it. */
static int need(const char *who, const void *ptr, const char *name, const char *why, char *err,
                size_t errlen) {
  if (ptr) return KDA_OK;
  return kda_fail(KDA_EINVAL, err, errlen, "%s: buffer %s is NULL but %s", who, name, why);
}

/* The buffers a valid problem reads or writes.  With T = 0 there are no tokens, so the
 * token buffers may be NULL (a zero-size array). */
static int check_buffers(const char *who, const kda_problem *p, const kda_ref_buffers *b,
                         char *err, size_t errlen) {
  const int tok = p->T > 0;
  const int decays = kda_ref_family_decays(p->family);
  int st = KDA_OK;
  if (!st && tok) st = need(who, b->q, "q", "T > 0", err, errlen);
  if (!st && tok) st = need(who, b->k, "k", "T > 0", err, errlen);
  if (!st && tok) st = need(who, b->v, "v", "T > 0", err, errlen);
  if (!st && tok) st = need(who, b->beta, "beta", "T > 0", err, errlen);
  if (!st && tok) st = need(who, b->o, "o", "T > 0", err, errlen);
  if (!st && tok && decays) st = need(who, b->g, "g", "the family decays", err, errlen);
  if (!st && tok && kda_ref_needs_dt_bias(p))
    st = need(who, b->dt_bias, "dt_bias", "the gate mode reads it", err, errlen);
  if (!st && tok && kda_ref_needs_A_log(p))
    st = need(who, b->A_log, "A_log", "has_A_log = 1", err, errlen);
  if (!st && p->has_initial_state)
    st = need(who, b->h0, "h0", "has_initial_state = 1", err, errlen);
  if (!st && p->want_final_state)
    st = need(who, b->ht, "ht", "want_final_state = 1", err, errlen);
  if (!st && p->n_checkpoints > 0)
    st = need(who, b->hc, "hc", "n_checkpoints > 0", err, errlen);
  if (!st && p->n_checkpoints > 0)
    st = need(who, b->checkpoints, "checkpoints", "n_checkpoints > 0", err, errlen);
  if (!st && p->N != 1)
    st = need(who, b->cu_seqlens, "cu_seqlens", "N > 1", err, errlen);
  return st;
}

int kda_ref_check_call(const char *who, const kda_problem *p, const kda_ref_buffers *b,
                       char *err, size_t errlen) {
  if (!p) return kda_fail(KDA_EINVAL, err, errlen, "%s: problem is NULL", who);
  int st = kda_problem_check(p, err, errlen);
  if (st) return st;
  st = check_buffers(who, p, b, err, errlen);
  if (st) return st;
  return kda_problem_check_index(p, b->cu_seqlens, b->checkpoints, err, errlen);
}

/* The token loop of one (sequence, value head); `c` is the first checkpoint >= bos. */
static void drive_head(const kda_problem *p, const int64_t *checkpoints, const kda_ref_visitor *vis,
                       int64_t n, int64_t hv, int64_t bos, int64_t eos, int64_t c) {
  vis->load(vis->ctx, n, hv);
  for (int64_t t = bos; t < eos; t++) {
    vis->step(vis->ctx, t, hv);
    if (c < p->n_checkpoints && checkpoints[c] == t) vis->store_checkpoint(vis->ctx, c++, hv);
  }
  if (p->want_final_state) vis->store_final(vis->ctx, n, hv);
}

void kda_ref_drive(const kda_problem *p, const int64_t *cu_seqlens, const int64_t *checkpoints,
                   const kda_ref_visitor *vis) {
  int64_t c = 0; /* first checkpoint of the current sequence; checkpoints ascend */
  for (int64_t n = 0; n < p->N; n++) {
    const int64_t bos = cu_seqlens ? cu_seqlens[n] : 0;
    const int64_t eos = cu_seqlens ? cu_seqlens[n + 1] : p->T;
    while (c < p->n_checkpoints && checkpoints[c] < bos) c++;
    for (int64_t hv = 0; hv < p->HV; hv++) drive_head(p, checkpoints, vis, n, hv, bos, eos, c);
  }
}

/* ==== The float64 driver (SPEC.md §3.2). ==== */

typedef struct run64 {
  const kda_problem *p;
  const kda_tensors_f64 *ts;
  double *S;    /* [K][V] state of the current (sequence, head) */
  double *qq;   /* [K] scale * L2(q) */
  double *kk;   /* [K] L2(k) */
  double *a;    /* [K] decay factors exp(g_eff) */
  double *pr;   /* [V] prediction S^T k (0 for the linear family) */
  double beta;  /* beta_eff */
} run64;

/* Copies a stored state (layout p->state_layout) into the working [K][V] S, or back. */
static void load_state64(const kda_problem *p, const double *src, double *S) {
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++) S[i * p->V + j] = src[kda_ref_state_at(p, i, j)];
}
static void store_state64(const kda_problem *p, const double *S, double *dst) {
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++) dst[kda_ref_state_at(p, i, j)] = S[i * p->V + j];
}

/* SPEC.md §4 (declared in kda_ref_internal.h): the coefficients of token t for value head hv:
 * qq = scale * L2(q), kk = L2(k) of head h(hv); a[i] = exp(g_eff) per key row (one gate
 * channel, GDN, is broadcast to every row; untouched without decay); *beta = beta_eff. */
void kda_ref_coefs_f64(const kda_problem *p, const kda_tensors_f64 *ts, int64_t t, int64_t hv,
                       double *qq, double *kk, double *a, double *beta) {
  const int64_t h = kda_ref_head(p->head_map, p->H, p->HV, hv), GW = kda_problem_gate_width(p);
  kda_ref_l2(p->l2_mode, p->l2_eps, p->K, ts->q + kda_ref_off_qk(p, t, h), qq);
  kda_ref_l2(p->l2_mode, p->l2_eps, p->K, ts->k + kda_ref_off_qk(p, t, h), kk);
  for (int64_t i = 0; i < p->K; i++) qq[i] = p->scale * qq[i];
  if (GW > 0) {
    const double *g = ts->g + kda_ref_off_g(p, GW, t, hv);
    const double A_log = kda_ref_needs_A_log(p) ? ts->A_log[hv] : 0.0;
    for (int64_t c = 0; c < GW; c++) {
      const double b = kda_ref_needs_dt_bias(p) ? ts->dt_bias[hv * GW + c] : 0.0;
      a[c] = exp(kda_ref_gate(p->gate_mode, g[c], b, A_log, p->has_A_log, p->lower_bound));
    }
    for (int64_t i = GW; i < p->K; i++) a[i] = a[0];
  }
  *beta = kda_ref_beta(p->beta_mode, ts->beta[kda_ref_off_beta(p, t, hv)]);
}

static void load64(void *ctx, int64_t n, int64_t hv) {
  run64 *r = ctx;
  if (r->p->has_initial_state) {
    load_state64(r->p, r->ts->h0 + kda_ref_off_state(r->p, n, hv), r->S);
  } else {
    for (int64_t e = 0; e < r->p->K * r->p->V; e++) r->S[e] = 0.0;
  }
}

/* One token: decay, erase, write, readout (SPEC.md §3.1, §5). */
static void step64(void *ctx, int64_t t, int64_t hv) {
  run64 *r = ctx;
  const kda_problem *p = r->p;
  const int64_t K = p->K, V = p->V;
  kda_ref_coefs_f64(p, r->ts, t, hv, r->qq, r->kk, r->a, &r->beta);
  if (kda_ref_family_decays(p->family)) kda_ref_decay(K, V, r->S, r->a);
  if (kda_ref_family_erases(p->family)) {
    kda_ref_erase(K, V, r->S, r->kk, r->pr);
  } else {
    for (int64_t j = 0; j < V; j++) r->pr[j] = 0.0;
  }
  kda_ref_write(K, V, r->S, r->kk, r->ts->v + kda_ref_off_v(p, t, hv), r->pr, r->beta);
  kda_ref_readout(K, V, r->S, r->qq, r->ts->o + kda_ref_off_v(p, t, hv));
}

static void store_checkpoint64(void *ctx, int64_t c, int64_t hv) {
  run64 *r = ctx;
  store_state64(r->p, r->S, r->ts->hc + kda_ref_off_state(r->p, c, hv));
}

static void store_final64(void *ctx, int64_t n, int64_t hv) {
  run64 *r = ctx;
  store_state64(r->p, r->S, r->ts->ht + kda_ref_off_state(r->p, n, hv));
}

int kda_ref_forward_f64(const kda_problem *p, const kda_tensors_f64 *t, char *err,
                        size_t errlen) {
  static const char who[] = "kda_ref_forward_f64";
  if (!t) return kda_fail(KDA_EINVAL, err, errlen, "%s: tensors are NULL", who);
  const kda_ref_buffers b = {t->q,  t->k,  t->v,  t->g,          t->beta,
                             t->A_log, t->dt_bias, t->h0, t->cu_seqlens, t->checkpoints,
                             t->o,  t->ht, t->hc};
  int st = kda_ref_check_call(who, p, &b, err, errlen);
  if (st) return st;
  /* S, qq, kk, a, pr; K*V fits (kda_problem_check bounds it by SIZE_MAX / 16). */
  const size_t K = (size_t)p->K, V = (size_t)p->V;
  double *work = malloc((K * V + 3 * K + V) * sizeof *work);
  if (!work)
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot allocate the %zu x %zu state", who, K, V);
  run64 r = {p, t, work, work + K * V, work + K * V + K, work + K * V + 2 * K,
             work + K * V + 3 * K, 0.0};
  const kda_ref_visitor vis = {&r, load64, step64, store_checkpoint64, store_final64};
  kda_ref_drive(p, t->cu_seqlens, t->checkpoints, &vis);
  free(work);
  return KDA_OK;
}

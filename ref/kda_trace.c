/* kda_trace.c: one head of SPEC.md §3.1 step by step, in float64 and in its float32 twin.
 * SPDX-License-Identifier: MIT
 *
 * The float64 step repeats the loops of ref/kda_ref.c through an arithmetic table, in the same
 * order and grouping (p and o summed over i ascending from +0; the write adds kk[i] * c[j] with
 * c[j] = b (v[j] - p[j]), which is kda_ref_write's kk[i] * (beta * (v[j] - p[j])) since c[j] is
 * the same rounded value), so plain arithmetic gives kda_ref_forward_f64's bits.
 */
#include "kda_trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_ref.h"
#include "kda_ref_internal.h"

static double plain_mul(void *ctx, double a, double b) { return a * b; }
static double plain_add(void *ctx, double a, double b) { return a + b; }
static const kda_trace_arith plain = {NULL, plain_mul, plain_add};

void kda_trace_step_f64(kda_trace_f64 *s, const kda_trace_arith *ar) {
  if (!ar || !ar->mul || !ar->add) ar = &plain;
  const int64_t K = s->K, V = s->V;
  for (int64_t e = 0; e < K * V; e++)
    s->Sd[e] = s->decays ? ar->mul(ar->ctx, s->a[e / V], s->S[e]) : s->S[e];
  for (int64_t j = 0; j < V; j++) {
    s->p[j] = 0.0;
    for (int64_t i = 0; s->erases && i < K; i++)
      s->p[j] = ar->add(ar->ctx, s->p[j], ar->mul(ar->ctx, s->Sd[i * V + j], s->kk[i]));
    s->c[j] = ar->mul(ar->ctx, s->b, ar->add(ar->ctx, s->v[j], -s->p[j]));
  }
  for (int64_t e = 0; e < K * V; e++)
    s->S[e] = ar->add(ar->ctx, s->Sd[e], ar->mul(ar->ctx, s->kk[e / V], s->c[e % V]));
  for (int64_t j = 0; j < V; j++) {
    s->o[j] = 0.0;
    for (int64_t i = 0; i < K; i++)
      s->o[j] = ar->add(ar->ctx, s->o[j], ar->mul(ar->ctx, s->S[i * V + j], s->qq[i]));
  }
}

/* The float32 twin's own step functions (ref/kda_ref_f32.c), one pass each. */
void kda_trace_step_f32(kda_trace_f32 *s) {
  const int64_t K = s->K, V = s->V;
  memcpy(s->Sd, s->S, (size_t)(K * V) * sizeof *s->S);
  if (s->decays) kda_ref32_decay(K, V, s->Sd, s->a);
  if (s->erases) kda_ref32_erase(K, V, s->Sd, s->kk, s->p);
  else
    for (int64_t j = 0; j < V; j++) s->p[j] = 0.0f;
  for (int64_t j = 0; j < V; j++) s->c[j] = s->b * (s->v[j] - s->p[j]);
  memcpy(s->S, s->Sd, (size_t)(K * V) * sizeof *s->S);
  kda_ref32_write(K, V, s->S, s->kk, s->v, s->p, s->b);
  kda_ref32_readout(K, V, s->S, s->qq, s->o);
}

/* ---- Driving one head. */
typedef struct head_run {
  const kda_problem *p;
  const kda_tensors_f64 *ts;
  int64_t K, V, GW, h;
  kda_trace_f64 s;
  kda_trace_f32 f;
  double *qq, *kk, *a, *g;
  float *qq32, *kk32, *a32, *g32, *v32, *x32;
} head_run;

/* float32 coefficients as in ref/kda_ref_f32.c's prepare32, from inputs rounded to float. */
static void coefs_f32(head_run *r, int64_t t, int64_t hv) {
  const kda_problem *p = r->p;
  const kda_tensors_f64 *ts = r->ts;
  const int64_t K = r->K;
  const float eps = (float)p->l2_eps, lb = (float)p->lower_bound, scale = (float)p->scale;
  for (int64_t i = 0; i < K; i++) r->x32[i] = (float)ts->q[kda_ref_off_qk(p, t, r->h) + i];
  kda_ref32_l2(p->l2_mode, eps, K, r->x32, r->qq32);
  for (int64_t i = 0; i < K; i++) r->qq32[i] = scale * r->qq32[i];
  for (int64_t i = 0; i < K; i++) r->x32[i] = (float)ts->k[kda_ref_off_qk(p, t, r->h) + i];
  kda_ref32_l2(p->l2_mode, eps, K, r->x32, r->kk32);
  for (int64_t i = 0; i < K; i++) r->a32[i] = 1.0f, r->g32[i] = 0.0f;
  if (r->GW > 0) {
    const float A_log = kda_ref_needs_A_log(p) ? (float)ts->A_log[hv] : 0.0f;
    for (int64_t c = 0; c < r->GW; c++) {
      const float b = kda_ref_needs_dt_bias(p) ? (float)ts->dt_bias[hv * r->GW + c] : 0.0f;
      r->g32[c] = kda_ref32_gate(p->gate_mode, (float)ts->g[kda_ref_off_g(p, r->GW, t, hv) + c],
                                 b, A_log, p->has_A_log, lb);
      r->a32[c] = expf(r->g32[c]);
    }
    for (int64_t i = r->GW; i < K; i++) r->a32[i] = r->a32[0], r->g32[i] = r->g32[0];
  }
  r->f.b = kda_ref32_beta(p->beta_mode, (float)ts->beta[kda_ref_off_beta(p, t, hv)]);
  for (int64_t j = 0; j < r->V; j++) r->v32[j] = (float)ts->v[kda_ref_off_v(p, t, hv) + j];
}

/* g_eff in float64, the value kda_ref_coefs_f64 exponentiates. */
static void gates_f64(head_run *r, int64_t t, int64_t hv) {
  const kda_problem *p = r->p;
  for (int64_t i = 0; i < r->K; i++) r->g[i] = 0.0;
  if (r->GW == 0) return;
  const double A_log = kda_ref_needs_A_log(p) ? r->ts->A_log[hv] : 0.0;
  for (int64_t c = 0; c < r->GW; c++) {
    const double b = kda_ref_needs_dt_bias(p) ? r->ts->dt_bias[hv * r->GW + c] : 0.0;
    r->g[c] = kda_ref_gate(p->gate_mode, r->ts->g[kda_ref_off_g(p, r->GW, t, hv) + c], b, A_log,
                           p->has_A_log, p->lower_bound);
  }
  for (int64_t i = r->GW; i < r->K; i++) r->g[i] = r->g[0];
}

static void load_initial(head_run *r, int64_t n, int64_t hv) {
  const kda_problem *p = r->p;
  for (int64_t i = 0; i < r->K; i++)
    for (int64_t j = 0; j < r->V; j++) {
      const double x = p->has_initial_state
                           ? r->ts->h0[kda_ref_off_state(p, n, hv) + kda_ref_state_at(p, i, j)]
                           : 0.0;
      r->s.S[i * r->V + j] = x;
      r->f.S[i * r->V + j] = (float)x;
    }
}

static int run(head_run *r, int64_t n, int64_t hv, kda_trace_fn fn, void *ctx) {
  const kda_problem *p = r->p;
  const int64_t bos = r->ts->cu_seqlens ? r->ts->cu_seqlens[n] : 0;
  const int64_t eos = r->ts->cu_seqlens ? r->ts->cu_seqlens[n + 1] : p->T;
  load_initial(r, n, hv);
  kda_trace_token tok = {1, 0, bos, 0, r->g, r->g32, &r->s, &r->f};
  int rc = fn(ctx, &tok);
  tok.initial = 0;
  for (int64_t t = bos; t < eos && rc == 0; t++) {
    double beta;
    for (int64_t i = 0; i < r->K; i++) r->a[i] = 1.0;
    kda_ref_coefs_f64(p, r->ts, t, hv, r->qq, r->kk, r->a, &beta);
    gates_f64(r, t, hv);
    r->s.b = beta;
    r->s.v = r->ts->v + kda_ref_off_v(p, t, hv);
    kda_trace_step_f64(&r->s, NULL);
    coefs_f32(r, t, hv);
    kda_trace_step_f32(&r->f);
    tok.t = t, tok.pos = t - bos;
    rc = fn(ctx, &tok);
  }
  return rc;
}

int kda_trace_head(const kda_problem *p, const kda_tensors_f64 *ts, int64_t n, int64_t hv,
                   kda_trace_fn fn, void *ctx, char *err, size_t errlen) {
  static const char who[] = "kda_trace_head";
  if (!ts || !fn) return kda_fail(KDA_EINVAL, err, errlen, "%s: tensors or callback NULL", who);
  const kda_ref_buffers b = {ts->q, ts->k, ts->v, ts->g, ts->beta, ts->A_log, ts->dt_bias, ts->h0,
                             ts->cu_seqlens, ts->checkpoints, p ? (const void *)"" : NULL,
                             p && p->want_final_state ? (const void *)"" : NULL,
                             p && p->n_checkpoints ? (const void *)"" : NULL};
  int st = kda_ref_check_call(who, p, &b, err, errlen); /* outputs are not written */
  if (st) return st;
  if (n < 0 || n >= p->N || hv < 0 || hv >= p->HV)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: sequence %lld / head %lld out of range (N=%lld HV=%lld)",
                    who, (long long)n, (long long)hv, (long long)p->N, (long long)p->HV);
  const size_t K = (size_t)p->K, V = (size_t)p->V;
  double *w = malloc((2 * K * V + 4 * K + 3 * V) * sizeof *w);
  float *f = malloc((2 * K * V + 5 * K + 4 * V) * sizeof *f);
  if (!w || !f) {
    free(w), free(f);
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot allocate the %zu x %zu state", who, K, V);
  }
  head_run r;
  memset(&r, 0, sizeof r);
  r.p = p, r.ts = ts, r.K = p->K, r.V = p->V, r.GW = kda_problem_gate_width(p);
  r.h = kda_ref_head(p->head_map, p->H, p->HV, hv);
  const int32_t decays = kda_ref_family_decays(p->family), erases = kda_ref_family_erases(p->family);
  r.qq = w, r.kk = w + K, r.a = w + 2 * K, r.g = w + 3 * K;
  r.s = (kda_trace_f64){p->K, p->V, decays, erases, r.qq, r.kk, r.a, NULL, 0.0,
                        w + 4 * K, w + 4 * K + K * V, w + 4 * K + 2 * K * V,
                        w + 4 * K + 2 * K * V + V, w + 4 * K + 2 * K * V + 2 * V};
  r.qq32 = f, r.kk32 = f + K, r.a32 = f + 2 * K, r.g32 = f + 3 * K, r.x32 = f + 4 * K;
  r.v32 = f + 5 * K;
  r.f = (kda_trace_f32){p->K, p->V, decays, erases, r.qq32, r.kk32, r.a32, r.v32, 0.0f,
                        f + 5 * K + V, f + 5 * K + V + K * V, f + 5 * K + V + 2 * K * V,
                        f + 5 * K + 2 * V + 2 * K * V, f + 5 * K + 3 * V + 2 * K * V};
  st = run(&r, n, hv, fn, ctx);
  free(w);
  free(f);
  return st;
}

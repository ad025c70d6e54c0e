/* plugin_grad.c: test-only backend plugin: a float32 KDA backward (SPEC.md §13) written apart
 * from the reference, in several honest evaluation orders, with one plausible mistake each.
 * SPDX-License-Identifier: MIT
 *
 * It computes the gradients of L = sum do*o + sum dht*ht + sum dhc*hc by the adjoint
 * recurrence, running each (sequence, value head) backwards from its last token, with the
 * forward states kept every CK tokens and each block of CK tokens recomputed (stored whole)
 * before its adjoint steps.  Every operation is in float.  Parameters (words, the last of a
 * kind wins; any other word is rejected, SPEC.md §7.8):
 *   order=seq   sums over i or j ascending (the default)
 *   order=rev   descending
 *   order=pair  four interleaved partial sums, combined pairwise
 *   order=f64   every sum accumulated in double and rounded once
 *   order=fma   fused multiply-adds in the sums and in the rank-one updates
 *   gates=chunk the decays from float32 prefix sums of the log-decays within 64-token chunks,
 *               exp(G_t - G_{t-1}), as fla's chunked kernels form them
 *   offer=all   what supports_backward offers: every gradient (the default), all but dh0
 *               ("offer=noh0": the runner reports dh0 as not provided) or nothing ("none")
 *   mutant=NAME one mistake (mutant_names below; "none": correct); two break the ABI's
 *               contract instead: "overrun" writes one element past dq, "writes_seed"
 *               changes do[0] (the runner must report a Crash and a Fail)
 * An honest parameter set must pass every gradient case in the fp32 class; every mutant must
 * fail at least one (make check-grad asserts both).  The forward slot is a plain float32
 * forward (the order of the reference's twin): the mutants are mistakes of the backward.
 * Self-contained: it includes only kda_backend.h, as any third-party plugin would.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"

enum {
  M_NONE, M_ADJ_NO_DECAY, M_DK_NO_ERASE, M_DG_NO_SOFTPLUS, M_DALOG_NO_EXP, M_DBETA_WRONG_ACT,
  M_L2_GRAD_DROPPED, M_DH0_DROPPED, M_GVA_NO_SUM, M_ADJ_ULP_BIAS, M_OVERRUN, M_WRITES_SEED,
  M_COUNT
};
static const char *const mutant_names[M_COUNT] = {
    "none", "adjoint_no_decay", "dk_no_erase", "dg_no_softplus_chain", "dA_log_no_exp",
    "dbeta_wrong_activation", "l2_grad_dropped", "dh0_dropped", "gva_no_sum",
    "adjoint_ulp_bias", "overrun", "writes_seed"};
enum { O_SEQ, O_REV, O_PAIR, O_F64, O_FMA, O_COUNT };
static const char *const order_names[O_COUNT] = {"seq", "rev", "pair", "f64", "fma"};

#define CK 64 /* tokens per recomputed block; also the chunk of gates=chunk */

enum { OFFER_ALL, OFFER_NOH0, OFFER_NONE, OFFER_COUNT };
static const char *const offer_names[OFFER_COUNT] = {"all", "noh0", "none"};

typedef struct ghandle {
  int mutant, order, chunk_gates, offer;
  char err[256];
} ghandle;

static int word_is(const char *s, size_t n, const char *key, const char *const *names, int count,
                   int *out) {
  size_t kl = strlen(key);
  if (n <= kl || strncmp(s, key, kl) != 0) return 0;
  for (int m = 0; m < count; m++)
    if (strlen(names[m]) == n - kl && strncmp(s + kl, names[m], n - kl) == 0) return *out = m, 1;
  return -1;
}

static int32_t g_open(const char *params, void **handle, char *err, uint32_t errlen) {
  ghandle h = {M_NONE, O_SEQ, 0, OFFER_ALL, ""};
  static const char *const gate_names[2] = {"direct", "chunk"};
  for (const char *s = params; *s;) {
    s += strspn(s, " ,");
    size_t n = strcspn(s, " ,");
    if (!n) break;
    int r = word_is(s, n, "mutant=", mutant_names, M_COUNT, &h.mutant);
    if (!r) r = word_is(s, n, "order=", order_names, O_COUNT, &h.order);
    if (!r) r = word_is(s, n, "gates=", gate_names, 2, &h.chunk_gates);
    if (!r) r = word_is(s, n, "offer=", offer_names, OFFER_COUNT, &h.offer);
    if (r != 1) {
      if (errlen)
        snprintf(err, errlen, "unknown parameter '%.*s' (mutant= order= gates= offer=)",
                 (int)(n > 64 ? 64 : n), s);
      return KDA_EINVAL;
    }
    s += n;
  }
  ghandle *p = malloc(sizeof *p);
  if (!p) return KDA_ENOMEM;
  *p = h;
  *handle = p;
  return KDA_OK;
}

static void g_close(void *h) { free(h); }
static int32_t g_supports(void *h, const kda_problem *p, char *r, uint32_t n) { return KDA_OK; }
static const char *g_last_error(void *h) { return ((ghandle *)h)->err; }

/* ---- Sums in the handle's order: sum over i < n of x[i*sx] * y[i*sy]. */
static float dot(int order, int64_t n, const float *x, int64_t sx, const float *y, int64_t sy) {
  if (order == O_F64) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i * sx] * (double)y[i * sy];
    return (float)s;
  }
  if (order == O_PAIR) {
    float a[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) a[i & 3] = a[i & 3] + x[i * sx] * y[i * sy];
    return (a[0] + a[1]) + (a[2] + a[3]);
  }
  float s = 0;
  if (order == O_REV)
    for (int64_t i = n - 1; i >= 0; i--) s = s + x[i * sx] * y[i * sy];
  else if (order == O_FMA)
    for (int64_t i = 0; i < n; i++) s = fmaf(x[i * sx], y[i * sy], s);
  else
    for (int64_t i = 0; i < n; i++) s = s + x[i * sx] * y[i * sy];
  return s;
}

/* acc + x * y, fused under order=fma. */
static inline float madd(int order, float acc, float x, float y) {
  return order == O_FMA ? fmaf(x, y, acc) : acc + x * y;
}

static float sigm(float y) { return y >= 0 ? 1 / (1 + expf(-y)) : expf(y) / (1 + expf(y)); }
static float softplus(float y) { return fmaxf(y, 0) + log1pf(expf(-fabsf(y))); }

/* ---- Preprocessing (SPEC.md §4) and its derivatives. */
typedef struct gctx {
  const kda_problem *p;
  const kda_backend_tensors *t;
  const kda_backend_grads *d;
  const ghandle *h;
  int64_t K, V, GW;
  float *S;      /* [CK + 1][K][V]: the block's states, S[0] entering its first token */
  float *dS;     /* [K][V] the adjoint of the state */
  float *w;      /* work */
} gctx;

static int64_t gate_width(const kda_problem *p) {
  return p->family == KDA_FAMILY_KDA ? p->K : p->family == KDA_FAMILY_GDN ? 1 : 0;
}

static int64_t head_of(const kda_problem *p, int64_t hv) {
  return p->head_map == KDA_HEADMAP_DIV ? hv / (p->HV / p->H) : hv % p->H;
}

/* y = L2(x) (SPEC.md §4.3), and r, the factor y = x r. */
static void l2f(const gctx *c, const float *x, float *y, float *r) {
  const kda_problem *p = c->p;
  float ss = dot(c->h->order, c->K, x, 1, x, 1), d = 1.0f;
  if (p->l2_mode == KDA_L2_FLA) d = sqrtf(ss + (float)p->l2_eps);
  if (p->l2_mode == KDA_L2_GGML) d = fmaxf(sqrtf(ss), (float)p->l2_eps);
  *r = 1.0f / d;
  for (int64_t i = 0; i < c->K; i++) y[i] = p->l2_mode == KDA_L2_OFF ? x[i] : x[i] / d;
}

/* dx += the gradient through y = L2(x) of dy: r (dy - y (y . dy)) where the norm depends on x
 * (fla always; ggml above eps), r dy where it is a constant. */
static void l2_back(const gctx *c, const float *x, const float *dy, float *dx) {
  const kda_problem *p = c->p;
  const int64_t K = c->K;
  float *y = c->w, r;
  if (p->l2_mode == KDA_L2_OFF) {
    for (int64_t i = 0; i < K; i++) dx[i] += dy[i];
    return;
  }
  l2f(c, x, y, &r);
  float ss = dot(c->h->order, K, x, 1, x, 1);
  int varies = p->l2_mode == KDA_L2_FLA || sqrtf(ss) > (float)p->l2_eps;
  if (c->h->mutant == M_L2_GRAD_DROPPED) varies = 0;
  float yd = varies ? dot(c->h->order, K, y, 1, dy, 1) : 0.0f;
  for (int64_t i = 0; i < K; i++) dx[i] += r * (dy[i] - y[i] * yd);
}

/* The log-decay of token tt, channel ch (SPEC.md §4.1), and its derivatives with respect to
 * the stored g (also dt_bias's) and to A_log. */
static float gate_eff(const gctx *c, int64_t tt, int64_t hv, int64_t ch, float *dx, float *dA) {
  const kda_problem *p = c->p;
  const float x = ((const float *)c->t->g)[(tt * p->HV + hv) * c->GW + ch];
  *dx = 1, *dA = 0;
  if (p->gate_mode == KDA_GATE_LOG) return x;
  const float b = ((const float *)c->t->dt_bias)[hv * c->GW + ch];
  const float eA = p->has_A_log ? expf(((const float *)c->t->A_log)[hv]) : 1.0f;
  if (p->gate_mode == KDA_GATE_SOFTPLUS) {
    const float sp = softplus(x + b), ge = -eA * sp;
    *dx = c->h->mutant == M_DG_NO_SOFTPLUS ? -eA : -eA * sigm(x + b);
    *dA = c->h->mutant == M_DALOG_NO_EXP ? -sp : ge;
    return ge;
  }
  const float lb = (float)p->lower_bound, z = eA * (x + b), s = sigm(z);
  *dx = lb * s * (1 - s) * eA;
  *dA = p->has_A_log ? (c->h->mutant == M_DALOG_NO_EXP ? lb * s * (1 - s) * (x + b)
                                                       : lb * s * (1 - s) * z)
                     : 0;
  return lb * s;
}

/* beta_eff and its derivative with respect to the stored beta (SPEC.md §4.2). */
static float beta_eff(const gctx *c, int64_t tt, int64_t hv, float *db) {
  const kda_problem *p = c->p;
  const float bs = ((const float *)c->t->beta)[tt * p->HV + hv];
  if (p->beta_mode == KDA_BETA_PROB) return *db = 1, bs;
  const float s = sigm(bs), be = p->beta_mode == KDA_BETA_LOGIT ? s : 2 * s;
  /* dbeta_wrong_activation: the logit's derivative written in terms of the output, b(1-b),
   * which is wrong for 2 sigmoid */
  *db = c->h->mutant == M_DBETA_WRONG_ACT ? be * (1 - be)
        : p->beta_mode == KDA_BETA_LOGIT  ? s * (1 - s)
                                          : 2 * s * (1 - s);
  return be;
}

static size_t st_at(const kda_problem *p, int64_t i, int64_t j) {
  return p->state_layout == KDA_STATE_VK ? (size_t)(j * p->K + i) : (size_t)(i * p->V + j);
}

/* The decays a[K] of token tt (the chunk form when asked: G from the first token of the
 * token's 64-token chunk of its sequence, counted from the chunk's second token). */
static void decays(const gctx *c, int64_t t0, int64_t tt, int64_t hv, float *a) {
  const int64_t K = c->K, GW = c->GW;
  float dx, dA;
  for (int64_t i = 0; i < K; i++) a[i] = 1.0f;
  if (!GW) return;
  for (int64_t ch = 0; ch < GW; ch++) {
    if (!c->h->chunk_gates || (tt - t0) % CK == 0) {
      a[ch] = expf(gate_eff(c, tt, hv, ch, &dx, &dA));
      continue;
    }
    float G = 0, Gp = 0; /* G_t and G_{t-1} */
    for (int64_t u = tt - (tt - t0) % CK + 1; u <= tt; u++)
      Gp = G, G = G + gate_eff(c, u, hv, ch, &dx, &dA);
    /* a -inf log-decay in the chunk (a decay of exactly 0) makes G - Gp NaN: that token's own
     * decay is used then, as a chunked kernel that clamps its gates would */
    a[ch] = isnan(G - Gp) ? expf(gate_eff(c, tt, hv, ch, &dx, &dA)) : expf(G - Gp);
  }
  for (int64_t i = GW; i < K; i++) a[i] = a[0];
}

/* One forward step from S0 into S1 (SPEC.md §3.1), also giving qq, kk, a, beta, pr. */
static void fstep(const gctx *c, int64_t t0, int64_t tt, int64_t hv, const float *S0, float *S1,
                  float *qq, float *kk, float *a, float *beta, float *pr) {
  const kda_problem *p = c->p;
  const int64_t K = c->K, V = c->V, h = head_of(p, hv);
  const int o = c->h->order;
  float r, db;
  l2f(c, (const float *)c->t->q + (tt * p->H + h) * K, qq, &r);
  for (int64_t i = 0; i < K; i++) qq[i] *= (float)p->scale;
  l2f(c, (const float *)c->t->k + (tt * p->H + h) * K, kk, &r);
  decays(c, t0, tt, hv, a);
  *beta = beta_eff(c, tt, hv, &db);
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) S1[i * V + j] = a[i] * S0[i * V + j];
  const float *v = (const float *)c->t->v + (tt * p->HV + hv) * V;
  for (int64_t j = 0; j < V; j++) {
    pr[j] = p->family == KDA_FAMILY_LINEAR ? 0.0f : dot(o, K, S1 + j, V, kk, 1);
    const float u = *beta * (v[j] - pr[j]);
    for (int64_t i = 0; i < K; i++) S1[i * V + j] = madd(o, S1[i * V + j], kk[i], u);
  }
}

/* The adjoint of one token tt given S_prev (before) and S_t (after): accumulates into the
 * gradients and turns c->dS into the adjoint of S_prev. */
static void bstep(gctx *c, int64_t t0, int64_t tt, int64_t hv, const float *Sp, const float *St) {
  const kda_problem *p = c->p;
  const kda_backend_grads *d = c->d;
  const int64_t K = c->K, V = c->V, h = head_of(p, hv);
  const int o = c->h->order;
  float *qq = c->w + K, *kk = qq + K, *a = kk + K, *dqq = a + K, *dkk = dqq + K, *da = dkk + K;
  float *pr = da + K, *du = pr + V, *dp = du + V, *Sd = dp + V, beta, db;
  float *dS = c->dS;
  fstep(c, t0, tt, hv, Sp, Sd, qq, kk, a, &beta, pr); /* Sd: a copy of S_t, decayed part below */
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) Sd[i * V + j] = a[i] * Sp[i * V + j];
  const float *dout = (const float *)d->dout + (tt * p->HV + hv) * V;
  const float *v = (const float *)c->t->v + (tt * p->HV + hv) * V;
  /* readout o = S_t^T qq */
  for (int64_t i = 0; i < K; i++) dqq[i] = dot(o, V, St + i * V, 1, dout, 1);
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) dS[i * V + j] = madd(o, dS[i * V + j], qq[i], dout[j]);
  /* write S_t = Sd + kk u^T, u = beta (v - pr) */
  float dbeta = 0;
  for (int64_t j = 0; j < V; j++) {
    du[j] = dot(o, K, dS + j, V, kk, 1);
    dp[j] = p->family == KDA_FAMILY_LINEAR ? 0.0f : -beta * du[j];
  }
  for (int64_t i = 0; i < K; i++) {
    float s = 0;
    for (int64_t j = 0; j < V; j++) s = madd(o, s, dS[i * V + j], beta * (v[j] - pr[j]));
    dkk[i] = s;
  }
  for (int64_t j = 0; j < V; j++) dbeta = madd(o, dbeta, du[j], v[j] - pr[j]);
  /* erase pr = Sd^T kk: dSd = dS + kk dp^T, dkk += Sd dp */
  if (p->family != KDA_FAMILY_LINEAR) {
    if (c->h->mutant != M_DK_NO_ERASE)
      for (int64_t i = 0; i < K; i++) dkk[i] += dot(o, V, Sd + i * V, 1, dp, 1);
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) dS[i * V + j] = madd(o, dS[i * V + j], kk[i], dp[j]);
  }
  /* decay Sd = diag(a) Sp */
  for (int64_t i = 0; i < K; i++) da[i] = dot(o, V, Sp + i * V, 1, dS + i * V, 1);
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) {
      float x = c->h->mutant == M_ADJ_NO_DECAY ? dS[i * V + j] : a[i] * dS[i * V + j];
      if (c->h->mutant == M_ADJ_ULP_BIAS) x = nextafterf(x, INFINITY);
      dS[i * V + j] = x;
    }
  /* the inputs: v, beta, q, k (GVA: summed over the value heads of a q/k head) */
  float *dv = (float *)d->dv + (tt * p->HV + hv) * V;
  for (int64_t j = 0; j < V; j++) dv[j] = beta * du[j];
  (void)beta_eff(c, tt, hv, &db);
  ((float *)d->dbeta)[tt * p->HV + hv] = dbeta * db;
  for (int64_t i = 0; i < K; i++) dqq[i] *= (float)p->scale;
  float *dq = (float *)d->dq + (tt * p->H + h) * K, *dk = (float *)d->dk + (tt * p->H + h) * K;
  if (c->h->mutant == M_GVA_NO_SUM)
    for (int64_t i = 0; i < K; i++) dq[i] = 0, dk[i] = 0;
  l2_back(c, (const float *)c->t->q + (tt * p->H + h) * K, dqq, dq);
  l2_back(c, (const float *)c->t->k + (tt * p->H + h) * K, dkk, dk);
  /* the gate: dgeff = a da per channel (GDN: summed over the channels) */
  if (!c->GW) return;
  float *dg = (float *)d->dg + (tt * p->HV + hv) * c->GW;
  for (int64_t ch = 0; ch < c->GW; ch++) {
    float dge = c->GW == 1 ? dot(o, K, da, 1, a, 0) : a[ch] * da[ch], dx, dA;
    (void)gate_eff(c, tt, hv, ch, &dx, &dA);
    dg[ch] = dge * dx;
    if (d->ddt_bias) ((float *)d->ddt_bias)[hv * c->GW + ch] += dge * dx;
    if (d->dA_log) ((float *)d->dA_log)[hv] += dge * dA;
  }
}

/* One (sequence n, value head hv): blocks of CK tokens from the last, each recomputed from
 * the state entering it (kept by a first forward pass in Sk). */
static int run_head(gctx *c, int64_t n, int64_t hv, float *Sk) {
  const kda_problem *p = c->p;
  const int64_t K = c->K, V = c->V, KV = K * V;
  const int64_t t0 = c->t->cu_seqlens[n], t1 = c->t->cu_seqlens[n + 1];
  float *w = c->w + 7 * K; /* fstep's scratch beyond bstep's (bstep uses w[K..]) */
  float *qq = w, *kk = qq + K, *a = kk + K, *pr = a + K, beta;
  float *S = c->S;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++)
      Sk[i * V + j] = p->has_initial_state
                          ? ((const float *)c->t->h0)[(n * p->HV + hv) * KV + st_at(p, i, j)]
                          : 0.0f;
  for (int64_t tt = t0; tt < t1; tt++) {
    float *nx = (tt - t0 + 1) % CK == 0 ? Sk + ((tt - t0 + 1) / CK) * KV : S;
    fstep(c, t0, tt, hv, (tt - t0) % CK == 0 ? Sk + ((tt - t0) / CK) * KV : S + KV, nx, qq, kk,
          a, &beta, pr);
    if (nx == S) memcpy(S + KV, S, (size_t)KV * sizeof(float));
  }
  for (int64_t e = 0; e < KV; e++) c->dS[e] = 0;
  if (p->want_final_state && c->d->dht)
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++)
        c->dS[i * V + j] = ((const float *)c->d->dht)[(n * p->HV + hv) * KV + st_at(p, i, j)];
  int64_t ck = p->n_checkpoints - 1;
  while (ck >= 0 && c->t->checkpoints[ck] >= t1) ck--;
  for (int64_t b0 = t0 + (t1 - t0 - 1) / CK * CK; t1 > t0 && b0 >= t0; b0 -= CK) {
    const int64_t b1 = b0 + CK < t1 ? b0 + CK : t1;
    memcpy(S, Sk + ((b0 - t0) / CK) * KV, (size_t)KV * sizeof(float));
    for (int64_t tt = b0; tt < b1; tt++)
      fstep(c, t0, tt, hv, S + (tt - b0) * KV, S + (tt - b0 + 1) * KV, qq, kk, a, &beta, pr);
    for (int64_t tt = b1 - 1; tt >= b0; tt--) {
      if (ck >= 0 && c->t->checkpoints[ck] == tt) {
        for (int64_t i = 0; i < K; i++)
          for (int64_t j = 0; j < V; j++)
            c->dS[i * V + j] += ((const float *)c->d->dhc)[(ck * p->HV + hv) * KV + st_at(p, i, j)];
        ck--;
      }
      bstep(c, t0, tt, hv, S + (tt - b0) * KV, S + (tt - b0 + 1) * KV);
    }
  }
  if (c->d->dh0)
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++)
        ((float *)c->d->dh0)[(n * p->HV + hv) * KV + st_at(p, i, j)] =
            c->h->mutant == M_DH0_DROPPED ? 0.0f : c->dS[i * V + j];
  return KDA_OK;
}

static uint32_t problem_grads(const kda_problem *p) {
  uint32_t m = KDA_GRAD_Q | KDA_GRAD_K | KDA_GRAD_V | KDA_GRAD_BETA;
  if (p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN) m |= KDA_GRAD_G;
  if (m & KDA_GRAD_G && p->gate_mode != KDA_GATE_LOG) {
    m |= KDA_GRAD_DT_BIAS;
    if (p->has_A_log) m |= KDA_GRAD_A_LOG;
  }
  if (p->has_initial_state) m |= KDA_GRAD_H0;
  return p->T > 0 ? m : m & KDA_GRAD_H0; /* no tokens: no token gradients (SPEC.md §13.1) */
}

/* The gradients offered for p (offer=). */
static uint32_t offered(const ghandle *h, const kda_problem *p) {
  const uint32_t all = problem_grads(p);
  return h->offer == OFFER_NONE ? 0u : h->offer == OFFER_NOH0 ? all & ~KDA_GRAD_H0 : all;
}

static int32_t g_supports_backward(void *hd, const kda_problem *p, uint32_t *grads, char *r,
                                   uint32_t n) {
  *grads = offered(hd, p);
  return KDA_OK;
}

static int32_t g_backward(void *hd, const kda_problem *p, const kda_backend_tensors *t,
                          const kda_backend_grads *d) {
  ghandle *h = hd;
  if (t->in_dtype != KDA_PRECISION_FP32 || t->out_dtype != KDA_PRECISION_FP32)
    return snprintf(h->err, sizeof h->err, "float32 buffers only"), KDA_EINVAL;
  if (d->want != offered(h, p) || (p->T > 0 && !d->dout))
    return snprintf(h->err, sizeof h->err, "asked for gradients 0x%x, not 0x%x", d->want,
                    offered(h, p)), KDA_EINVAL;
  gctx c = {p, t, d, h, p->K, p->V, gate_width(p), NULL, NULL, NULL};
  int64_t maxlen = 0;
  for (int64_t n = 0; n < p->N; n++)
    if (t->cu_seqlens[n + 1] - t->cu_seqlens[n] > maxlen)
      maxlen = t->cu_seqlens[n + 1] - t->cu_seqlens[n];
  const size_t KV = (size_t)(p->K * p->V);
  float *Sk = malloc(((size_t)(maxlen / CK + 2)) * KV * sizeof(float));
  c.S = malloc((CK + 1) * KV * sizeof(float));
  c.dS = malloc(KV * sizeof(float));
  c.w = malloc((size_t)(16 * p->K + 8 * p->V) * sizeof(float) + KV * sizeof(float));
  if (!Sk || !c.S || !c.dS || !c.w) {
    free(Sk), free(c.S), free(c.dS), free(c.w);
    return snprintf(h->err, sizeof h->err, "out of memory"), KDA_ENOMEM;
  }
  float *summed[4] = {d->dq, d->dk, d->dA_log, d->ddt_bias};
  const size_t ns[4] = {(size_t)(p->T * p->H * p->K), (size_t)(p->T * p->H * p->K),
                        (size_t)p->HV, (size_t)(p->HV * c.GW)};
  for (int b = 0; b < 4; b++)
    if (summed[b]) memset(summed[b], 0, ns[b] * sizeof(float));
  for (int64_t n = 0; n < p->N; n++)
    for (int64_t hv = 0; hv < p->HV; hv++) run_head(&c, n, hv, Sk);
  free(Sk), free(c.S), free(c.dS), free(c.w);
  if (h->mutant == M_OVERRUN) ((float *)d->dq)[ns[0]] = 1.0f;
  if (h->mutant == M_WRITES_SEED && p->T > 0) ((float *)(uintptr_t)d->dout)[0] += 1.0f;
  return KDA_OK;
}

/* A plain float32 forward: the same steps, read out after the write. */
static int32_t g_forward(void *hd, const kda_problem *p, const kda_backend_tensors *t) {
  ghandle *h = hd;
  if (t->in_dtype != KDA_PRECISION_FP32 || (KDA_TENSORS_HAS_POOL(t) && t->state_indices))
    return snprintf(h->err, sizeof h->err, "float32 ordinary calls only"), KDA_EUNSUPPORTED;
  ghandle plain = *h;
  plain.order = O_SEQ;
  gctx c = {p, t, NULL, &plain, p->K, p->V, gate_width(p), NULL, NULL, NULL};
  const int64_t K = p->K, V = p->V, KV = K * V;
  float *S = malloc(2 * (size_t)KV * sizeof(float)), *w = malloc((size_t)(8 * K + 8 * V) * 4);
  if (!S || !w) return free(S), free(w), KDA_ENOMEM;
  c.w = w + 4 * K + 2 * V;
  float *qq = w, *kk = qq + K, *a = kk + K, *pr = a + K, beta;
  for (int64_t n = 0; n < p->N; n++)
    for (int64_t hv = 0; hv < p->HV; hv++) {
      const int64_t t0 = t->cu_seqlens[n], t1 = t->cu_seqlens[n + 1];
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++)
          S[i * V + j] = p->has_initial_state
                             ? ((const float *)t->h0)[(n * p->HV + hv) * KV + st_at(p, i, j)]
                             : 0.0f;
      for (int64_t tt = t0; tt < t1; tt++) {
        fstep(&c, t0, tt, hv, S, S + KV, qq, kk, a, &beta, pr);
        memcpy(S, S + KV, (size_t)KV * sizeof(float));
        float *o = (float *)t->o + (tt * p->HV + hv) * V;
        for (int64_t j = 0; j < V; j++) o[j] = dot(O_SEQ, K, S + j, V, qq, 1);
        for (int64_t ck = 0; ck < p->n_checkpoints; ck++)
          if (t->checkpoints[ck] == tt)
            for (int64_t i = 0; i < K; i++)
              for (int64_t j = 0; j < V; j++)
                ((float *)t->hc)[(ck * p->HV + hv) * KV + st_at(p, i, j)] = S[i * V + j];
      }
      if (p->want_final_state)
        for (int64_t i = 0; i < K; i++)
          for (int64_t j = 0; j < V; j++)
            ((float *)t->ht)[(n * p->HV + hv) * KV + st_at(p, i, j)] = S[i * V + j];
    }
  free(S), free(w);
  return KDA_OK;
}

static const kda_backend table = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "grad",
    .description = "test plugin: a float32 backward in several orders, with mutants",
    .precision_class = KDA_PRECISION_FP32,
    .input_dtype = KDA_PRECISION_FP32,
    .output_dtype = KDA_PRECISION_FP32,
    .open = g_open,
    .close = g_close,
    .supports = g_supports,
    .forward = g_forward,
    .last_error = g_last_error,
    .supports_backward = g_supports_backward,
    .backward = g_backward,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return abi_version >= 2 ? &table : NULL;
}

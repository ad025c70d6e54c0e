/* kda_ref_backward_impl.h: the backward pass of SPEC.md §13, written once for both precisions.
 * SPDX-License-Identifier: MIT
 *
 * Not installed.  Included by kda_ref_backward.c (float64) and kda_ref_backward_f32.c (float32)
 * after they define:
 *   R                 the element type (double or float)
 *   R_EXP, R_SQRT                              the math functions of that type
 *   R_DECAY, R_ERASE, R_WRITE                  the forward step functions (kda_ref.h)
 *   R_GATE, R_BETA, R_L2                       the forward preprocessing (kda_ref.h)
 *   R_TENSORS, R_GRADS                         kda_tensors_f64/f32, kda_grads_f64/f32
 *   R_NAME(x)                                  x suffixed with the precision
 * Every * and + is one operation of type R (-ffp-contract=off); sums run over the index
 * ascending from +0, as in the forward (SPEC.md §9).  Variable names follow SPEC.md §13.2:
 * Sp the state before the token, Sd the decayed state, Sn the state after the write, e = v - p,
 * r = b e, dS the adjoint of the state, dqq, dkk, db, dgeff the adjoints of q^, k^, b, g_eff.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_ref_internal.h"

/* One (sequence, value head) at a time; the buffers below are reused for every head. */
typedef struct R_NAME(bwd) {
  const kda_problem *p;
  const R_TENSORS *ts;
  const R_GRADS *d;
  int64_t GW;         /* gate width: K (KDA), 1 (GDN), 0 (no decay) */
  R scale, lb, eps;   /* p's options in R */
  R *ck;              /* [nblk][K][V] the state at the start of each block */
  R *blk;             /* [B][K][V] the state before each token of the current block */
  R *dS;              /* [K][V] adjoint of the state after the current token */
  R *Sd, *Sn;         /* [K][V] decayed state, state after the write */
  R *lq, *qq, *kk, *a, *dqq, *dkk, *dgeff; /* [K] */
  R *pr, *e, *dr;     /* [V] prediction, residual v - p, adjoint of r = b e */
  R beta;             /* beta_eff */
} R_NAME(bwd);

/* sigma(y), the forward's formula (exp never overflows). */
static R R_NAME(sigmoid)(R y) {
  if (y >= (R)0) return (R)1 / ((R)1 + R_EXP(-y));
  R ex = R_EXP(y);
  return ex / ((R)1 + ex);
}

/* Copies a stored state (layout p->state_layout) into a working [K][V] S, or back. */
static void R_NAME(load_state)(const kda_problem *p, const R *src, R *S) {
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++) S[i * p->V + j] = src[kda_ref_state_at(p, i, j)];
}
static void R_NAME(store_state)(const kda_problem *p, const R *S, R *dst) {
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++) dst[kda_ref_state_at(p, i, j)] = S[i * p->V + j];
}
/* dS += a stored seed (dht or dhc) of layout p->state_layout. */
static void R_NAME(add_state)(const kda_problem *p, const R *src, R *dS) {
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++)
      dS[i * p->V + j] = dS[i * p->V + j] + src[kda_ref_state_at(p, i, j)];
}

/* SPEC.md §4: lq = L2(q), qq = scale lq, kk = L2(k) of head h(hv), a = exp(g_eff) per key row,
 * beta_eff; the same formulas as the forward. */
static void R_NAME(coefs)(R_NAME(bwd) *w, int64_t t, int64_t hv) {
  const kda_problem *p = w->p;
  const int64_t h = kda_ref_head(p->head_map, p->H, p->HV, hv);
  R_L2(p->l2_mode, w->eps, p->K, w->ts->q + kda_ref_off_qk(p, t, h), w->lq);
  R_L2(p->l2_mode, w->eps, p->K, w->ts->k + kda_ref_off_qk(p, t, h), w->kk);
  for (int64_t i = 0; i < p->K; i++) w->qq[i] = w->scale * w->lq[i];
  if (w->GW > 0) {
    const R *g = w->ts->g + kda_ref_off_g(p, w->GW, t, hv);
    const R A_log = kda_ref_needs_A_log(p) ? w->ts->A_log[hv] : (R)0;
    for (int64_t c = 0; c < w->GW; c++) {
      const R b = kda_ref_needs_dt_bias(p) ? w->ts->dt_bias[hv * w->GW + c] : (R)0;
      w->a[c] = R_EXP(R_GATE(p->gate_mode, g[c], b, A_log, p->has_A_log, w->lb));
    }
    for (int64_t i = w->GW; i < p->K; i++) w->a[i] = w->a[0];
  }
  w->beta = R_BETA(p->beta_mode, w->ts->beta[kda_ref_off_beta(p, t, hv)]);
}

/* The forward step without its readout (SPEC.md §3.1): Sd = Diag(a) Sp, p = Sd^T kk (0 for the
 * linear family), e = v - p, Sn = Sd + kk (b e)^T, the forward's operations and grouping. */
static void R_NAME(advance)(R_NAME(bwd) *w, int64_t t, int64_t hv, const R *Sp) {
  const kda_problem *p = w->p;
  const int64_t K = p->K, V = p->V;
  const R *v = w->ts->v + kda_ref_off_v(p, t, hv);
  memcpy(w->Sd, Sp, (size_t)(K * V) * sizeof *Sp);
  if (kda_ref_family_decays(p->family)) R_DECAY(K, V, w->Sd, w->a);
  if (kda_ref_family_erases(p->family)) {
    R_ERASE(K, V, w->Sd, w->kk, w->pr);
  } else {
    for (int64_t j = 0; j < V; j++) w->pr[j] = (R)0;
  }
  for (int64_t j = 0; j < V; j++) w->e[j] = v[j] - w->pr[j];
  memcpy(w->Sn, w->Sd, (size_t)(K * V) * sizeof *Sp);
  R_WRITE(K, V, w->Sn, w->kk, v, w->pr, w->beta);
}

/* SPEC.md §13.3: dx += the adjoint of y = L2(x) for the adjoint dy of y (both conventions;
 * ggml's floor branch when ||x|| <= eps). */
static void R_NAME(l2_back)(const R_NAME(bwd) *w, const R *x, const R *dy, R *dx) {
  const int64_t K = w->p->K;
  if (w->p->l2_mode == KDA_L2_OFF) {
    for (int64_t i = 0; i < K; i++) dx[i] = dx[i] + dy[i];
    return;
  }
  R ss = (R)0;
  for (int64_t i = 0; i < K; i++) ss = ss + x[i] * x[i];
  R dn = NAN;
  if (w->p->l2_mode == KDA_L2_FLA) dn = R_SQRT(ss + w->eps);
  if (w->p->l2_mode == KDA_L2_GGML) {
    const R nrm = R_SQRT(ss);
    if (!(nrm > w->eps)) { /* the floor: y = x / eps, a linear map */
      for (int64_t i = 0; i < K; i++) dx[i] = dx[i] + dy[i] / w->eps;
      return;
    }
    dn = nrm;
  }
  R dot = (R)0;
  for (int64_t i = 0; i < K; i++) dot = dot + (x[i] / dn) * dy[i];
  for (int64_t i = 0; i < K; i++) dx[i] = dx[i] + (dy[i] - (x[i] / dn) * dot) / dn;
}

/* SPEC.md §13.3: dg, ddt_bias and dA_log from dgeff (one value per gate channel). */
static void R_NAME(gate_back)(R_NAME(bwd) *w, int64_t t, int64_t hv) {
  const kda_problem *p = w->p;
  const size_t off = kda_ref_off_g(p, w->GW, t, hv);
  const R *g = w->ts->g + off;
  R *dg = w->d->dg + off;
  for (int64_t c = 0; c < w->GW; c++) {
    if (p->gate_mode == KDA_GATE_LOG) {
      dg[c] = w->dgeff[c];
      continue;
    }
    const R A_log = kda_ref_needs_A_log(p) ? w->ts->A_log[hv] : (R)0;
    const R b = w->ts->dt_bias[hv * w->GW + c];
    R dx, dA = (R)0; /* dL/dx for x = g + dt_bias, and dL/dA_log */
    if (p->gate_mode == KDA_GATE_SOFTPLUS) {
      const R eA = R_EXP(A_log), u = g[c] + b;
      dx = w->dgeff[c] * -(eA * R_NAME(sigmoid)(u));
      dA = w->dgeff[c] * R_GATE(p->gate_mode, g[c], b, A_log, p->has_A_log, w->lb);
    } else { /* lower_bound: g_eff = lb sigma(u), u = e^A (g + b) or g + b */
      const R eA = p->has_A_log ? R_EXP(A_log) : (R)1;
      const R u = p->has_A_log ? eA * (g[c] + b) : g[c] + b;
      const R ds = w->dgeff[c] * (w->lb * (R_NAME(sigmoid)(u) * R_NAME(sigmoid)(-u)));
      dx = p->has_A_log ? ds * eA : ds;
      if (p->has_A_log) dA = ds * u;
    }
    dg[c] = dx;
    w->d->ddt_bias[hv * w->GW + c] = w->d->ddt_bias[hv * w->GW + c] + dx;
    if (kda_ref_needs_A_log(p)) w->d->dA_log[hv] = w->d->dA_log[hv] + dA;
  }
}

/* SPEC.md §13.3: d beta_eff / d beta. */
static R R_NAME(beta_slope)(int32_t beta_mode, R x) {
  if (beta_mode == KDA_BETA_PROB) return (R)1;
  const R s = R_NAME(sigmoid)(x) * R_NAME(sigmoid)(-x);
  return beta_mode == KDA_BETA_LOGIT_NEG ? (R)2 * s : s;
}

/* The adjoint of one token (SPEC.md §13.2), given the state Sp before it and dS, the adjoint of
 * the state after it; leaves in dS the adjoint of Sp. */
static void R_NAME(step_back)(R_NAME(bwd) *w, int64_t t, int64_t hv, const R *Sp) {
  const kda_problem *p = w->p;
  const int64_t K = p->K, V = p->V, h = kda_ref_head(p->head_map, p->H, p->HV, hv);
  const R *dout = w->d->dout + kda_ref_off_v(p, t, hv);
  R *dS = w->dS;
  R_NAME(coefs)(w, t, hv);
  R_NAME(advance)(w, t, hv, Sp);
  /* 4. readout o = Sn^T qq: dqq = Sn do, dS += qq do^T. */
  for (int64_t i = 0; i < K; i++) {
    R s = (R)0;
    for (int64_t j = 0; j < V; j++) s = s + w->Sn[i * V + j] * dout[j];
    w->dqq[i] = s;
    for (int64_t j = 0; j < V; j++) dS[i * V + j] = dS[i * V + j] + w->qq[i] * dout[j];
  }
  /* 3. write Sn = Sd + kk r^T, r = b e: dr = dS^T kk, dkk = dS r, dSd = dS. */
  for (int64_t j = 0; j < V; j++) w->dr[j] = (R)0;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) w->dr[j] = w->dr[j] + dS[i * V + j] * w->kk[i];
  for (int64_t i = 0; i < K; i++) {
    R s = (R)0;
    for (int64_t j = 0; j < V; j++) s = s + dS[i * V + j] * (w->beta * w->e[j]);
    w->dkk[i] = s;
  }
  /* r = b (v - p): dv = b dr, db = dr . e, dp = -b dr. */
  R *dv = w->d->dv + kda_ref_off_v(p, t, hv);
  R db = (R)0;
  for (int64_t j = 0; j < V; j++) {
    dv[j] = w->beta * w->dr[j];
    db = db + w->dr[j] * w->e[j];
  }
  /* 2. erase p = Sd^T kk: dSd += kk dp^T, dkk += Sd dp, with dp = -b dr. */
  if (kda_ref_family_erases(p->family)) {
    for (int64_t j = 0; j < V; j++) w->dr[j] = -(w->beta * w->dr[j]); /* now dp */
    for (int64_t i = 0; i < K; i++) {
      R s = (R)0;
      for (int64_t j = 0; j < V; j++) {
        s = s + w->Sd[i * V + j] * w->dr[j];
        dS[i * V + j] = dS[i * V + j] + w->kk[i] * w->dr[j];
      }
      w->dkk[i] = w->dkk[i] + s;
    }
  }
  /* 1. decay Sd = Diag(a) Sp: dgeff_i = sum_j Sd dSd (= a_i dL/da_i), dSp = Diag(a) dSd. */
  if (kda_ref_family_decays(p->family)) {
    for (int64_t i = 0; i < K; i++) {
      R s = (R)0;
      for (int64_t j = 0; j < V; j++) s = s + w->Sd[i * V + j] * dS[i * V + j];
      w->dgeff[i] = s;
      for (int64_t j = 0; j < V; j++) dS[i * V + j] = w->a[i] * dS[i * V + j];
    }
    if (w->GW == 1) /* GDN: one gate broadcast to every key row */
      for (int64_t i = 1; i < K; i++) w->dgeff[0] = w->dgeff[0] + w->dgeff[i];
    R_NAME(gate_back)(w, t, hv);
  }
  /* Preprocessing: dq, dk (summed over the value heads of h), dbeta. */
  for (int64_t i = 0; i < K; i++) w->dqq[i] = w->scale * w->dqq[i];
  const size_t oqk = kda_ref_off_qk(p, t, h), ob = kda_ref_off_beta(p, t, hv);
  R_NAME(l2_back)(w, w->ts->q + oqk, w->dqq, w->d->dq + oqk);
  R_NAME(l2_back)(w, w->ts->k + oqk, w->dkk, w->d->dk + oqk);
  w->d->dbeta[ob] = db * R_NAME(beta_slope)(p->beta_mode, w->ts->beta[ob]);
}

/* One (sequence n, value head hv) over tokens bos..eos-1; c_end is one past the last
 * checkpoint < eos.  Block length B: states at block starts, then each block recomputed. */
static void R_NAME(head_back)(R_NAME(bwd) *w, int64_t n, int64_t hv, int64_t bos, int64_t eos,
                              int64_t c_end, int64_t B) {
  const kda_problem *p = w->p;
  const size_t KV = (size_t)(p->K * p->V);
  if (p->has_initial_state) {
    R_NAME(load_state)(p, w->ts->h0 + kda_ref_off_state(p, n, hv), w->ck);
  } else {
    for (size_t e = 0; e < KV; e++) w->ck[e] = (R)0;
  }
  const int64_t len = eos - bos, nblk = len > 0 ? (len + B - 1) / B : 0;
  for (int64_t b = 1; b < nblk; b++) { /* forward: ck[b] = state before token bos + b B */
    memcpy(w->ck + (size_t)b * KV, w->ck + (size_t)(b - 1) * KV, KV * sizeof *w->ck);
    for (int64_t t = bos + (b - 1) * B; t < bos + b * B; t++) {
      R_NAME(coefs)(w, t, hv);
      R_NAME(advance)(w, t, hv, w->ck + (size_t)b * KV);
      memcpy(w->ck + (size_t)b * KV, w->Sn, KV * sizeof *w->Sn);
    }
  }
  for (size_t e = 0; e < KV; e++) w->dS[e] = (R)0;
  if (p->want_final_state && w->d->dht)
    R_NAME(add_state)(p, w->d->dht + kda_ref_off_state(p, n, hv), w->dS);
  int64_t c = c_end - 1;
  for (int64_t b = nblk - 1; b >= 0; b--) {
    const int64_t t0 = bos + b * B, t1 = t0 + B < eos ? t0 + B : eos;
    memcpy(w->blk, w->ck + (size_t)b * KV, KV * sizeof *w->blk);
    for (int64_t t = t0; t + 1 < t1; t++) { /* blk[t - t0] = state before token t */
      R_NAME(coefs)(w, t, hv);
      R_NAME(advance)(w, t, hv, w->blk + (size_t)(t - t0) * KV);
      memcpy(w->blk + (size_t)(t + 1 - t0) * KV, w->Sn, KV * sizeof *w->Sn);
    }
    for (int64_t t = t1 - 1; t >= t0; t--) {
      if (c >= 0 && w->p->n_checkpoints > 0 && w->ts->checkpoints[c] == t) {
        if (w->d->dhc) R_NAME(add_state)(p, w->d->dhc + kda_ref_off_state(p, c, hv), w->dS);
        c--;
      }
      R_NAME(step_back)(w, t, hv, w->blk + (size_t)(t - t0) * KV);
    }
  }
  if (p->has_initial_state)
    R_NAME(store_state)(p, w->dS, w->d->dh0 + kda_ref_off_state(p, n, hv));
}

/* A required gradient buffer: NULL is KDA_EINVAL naming it. */
static int R_NAME(need)(const char *who, const void *ptr, const char *name, const char *why,
                        char *err, size_t errlen) {
  if (ptr) return KDA_OK;
  return kda_fail(KDA_EINVAL, err, errlen, "%s: buffer %s is NULL but %s", who, name, why);
}

static int R_NAME(check_grads)(const char *who, const kda_problem *p, const R_GRADS *d,
                               char *err, size_t errlen) {
  const int tok = p->T > 0;
  int st = KDA_OK;
  if (!st && tok) st = R_NAME(need)(who, d->dout, "do", "T > 0", err, errlen);
  if (!st && tok) st = R_NAME(need)(who, d->dq, "dq", "T > 0", err, errlen);
  if (!st && tok) st = R_NAME(need)(who, d->dk, "dk", "T > 0", err, errlen);
  if (!st && tok) st = R_NAME(need)(who, d->dv, "dv", "T > 0", err, errlen);
  if (!st && tok) st = R_NAME(need)(who, d->dbeta, "dbeta", "T > 0", err, errlen);
  if (!st && tok && kda_ref_family_decays(p->family))
    st = R_NAME(need)(who, d->dg, "dg", "the family decays", err, errlen);
  if (!st && tok && kda_ref_needs_dt_bias(p))
    st = R_NAME(need)(who, d->ddt_bias, "ddt_bias", "the gate mode reads dt_bias", err, errlen);
  if (!st && tok && kda_ref_needs_A_log(p))
    st = R_NAME(need)(who, d->dA_log, "dA_log", "the gate mode reads A_log", err, errlen);
  if (!st && p->has_initial_state)
    st = R_NAME(need)(who, d->dh0, "dh0", "has_initial_state = 1", err, errlen);
  return st;
}

/* Zeroes the summed outputs (dq, dk over value heads; dA_log, ddt_bias over tokens). */
static void R_NAME(zero_sums)(const kda_problem *p, const R_GRADS *d) {
  const size_t qk = (size_t)(p->T * p->H * p->K), GW = (size_t)kda_problem_gate_width(p);
  if (d->dq) memset(d->dq, 0, qk * sizeof *d->dq);
  if (d->dk) memset(d->dk, 0, qk * sizeof *d->dk);
  if (d->ddt_bias && kda_ref_needs_dt_bias(p))
    for (size_t e = 0; e < (size_t)p->HV * GW; e++) d->ddt_bias[e] = (R)0;
  if (d->dA_log && kda_ref_needs_A_log(p))
    for (int64_t hv = 0; hv < p->HV; hv++) d->dA_log[hv] = (R)0;
}

/* The longest sequence of the call. */
static int64_t R_NAME(max_len)(const kda_problem *p, const int64_t *cu) {
  int64_t m = 0;
  for (int64_t n = 0; n < p->N; n++) {
    const int64_t len = cu ? cu[n + 1] - cu[n] : p->T;
    if (len > m) m = len;
  }
  return m;
}

static int R_NAME(backward)(const char *who, const kda_problem *p, const R_TENSORS *t,
                            const R_GRADS *d, char *err, size_t errlen) {
  if (!t || !d) return kda_fail(KDA_EINVAL, err, errlen, "%s: tensors or grads are NULL", who);
  /* The forward's outputs are not read: stand-ins satisfy the forward's buffer check. */
  const kda_ref_buffers b = {t->q, t->k, t->v, t->g, t->beta, t->A_log, t->dt_bias, t->h0,
                             t->cu_seqlens, t->checkpoints, p, p, p};
  int st = kda_ref_check_call(who, p, &b, err, errlen);
  if (!st) st = R_NAME(check_grads)(who, p, d, err, errlen);
  if (st) return st;
  const int64_t L = R_NAME(max_len)(p, t->cu_seqlens);
  int64_t B = 1;
  while (B * B < L) B++;
  const int64_t nblk = L > 0 ? (L + B - 1) / B : 1;
  const size_t K = (size_t)p->K, V = (size_t)p->V, KV = K * V;
  if ((size_t)(nblk + B + 3) > SIZE_MAX / 16 / KV)
    return kda_fail(KDA_ESHAPE, err, errlen, "%s: the recomputation buffers overflow", who);
  R *work = malloc(((size_t)(nblk + B + 3) * KV + 7 * K + 3 * V) * sizeof *work);
  if (!work)
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot allocate %lld + %lld states of %zu x %zu",
                    who, (long long)nblk, (long long)B, K, V);
  R_NAME(bwd) w;
  memset(&w, 0, sizeof w);
  w.p = p, w.ts = t, w.d = d, w.GW = kda_problem_gate_width(p);
  w.scale = (R)p->scale, w.lb = (R)p->lower_bound, w.eps = (R)p->l2_eps;
  R *x = work;
  w.ck = x, x += (size_t)nblk * KV;
  w.blk = x, x += (size_t)B * KV;
  w.dS = x, x += KV;
  w.Sd = x, x += KV;
  w.Sn = x, x += KV;
  R **kv[] = {&w.lq, &w.qq, &w.kk, &w.a, &w.dqq, &w.dkk, &w.dgeff};
  for (size_t e = 0; e < 7; e++) *kv[e] = x, x += K;
  w.pr = x, x += V;
  w.e = x, x += V;
  w.dr = x;
  R_NAME(zero_sums)(p, d);
  int64_t c_end = 0; /* one past the last checkpoint < eos */
  for (int64_t n = 0; n < p->N; n++) {
    const int64_t bos = t->cu_seqlens ? t->cu_seqlens[n] : 0;
    const int64_t eos = t->cu_seqlens ? t->cu_seqlens[n + 1] : p->T;
    while (c_end < p->n_checkpoints && t->checkpoints[c_end] < eos) c_end++;
    for (int64_t hv = 0; hv < p->HV; hv++) R_NAME(head_back)(&w, n, hv, bos, eos, c_end, B);
  }
  free(work);
  return KDA_OK;
}

/* plugin_f64.h: a plain float64 KDA forward for the test plugins (SPEC.md §3, §4).
 * SPDX-License-Identifier: MIT
 *
 * Included by plugin_v2.c (current headers) and abi_v1/plugin_v1.c (the frozen version-1
 * headers), so it uses only what both versions declare: the version-1 fields of kda_problem,
 * kda_backend_tensors and the mode constants.  Float64 buffers only.  Correct, not fast:
 * the same recurrence as plugin_mutants.c with mutant "none".
 */
#ifndef KDA_PLUGIN_F64_H
#define KDA_PLUGIN_F64_H

#include <math.h>
#include <stdlib.h>

static double pf_sigm(double y) { return y >= 0 ? 1 / (1 + exp(-y)) : exp(y) / (1 + exp(y)); }
static double pf_softplus(double y) { return fmax(y, 0) + log1p(exp(-fabs(y))); }

static void pf_l2(int32_t mode, double eps, int64_t n, const double *x, double *y) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
  double d = mode == KDA_L2_FLA ? sqrt(s + eps) : mode == KDA_L2_GGML ? fmax(sqrt(s), eps) : 1.0;
  for (int64_t i = 0; i < n; i++) y[i] = mode == KDA_L2_OFF ? x[i] : x[i] / d;
}

/* The log-decay g_eff of channel c (SPEC.md §4.1). */
static double pf_gate(const kda_problem *p, const kda_backend_tensors *t, int64_t GW,
                      int64_t tt, int64_t hv, int64_t c) {
  double x = ((const double *)t->g)[(tt * p->HV + hv) * GW + c];
  if (p->gate_mode == KDA_GATE_LOG) return x;
  double b = ((const double *)t->dt_bias)[hv * GW + c];
  double A = p->has_A_log ? exp(((const double *)t->A_log)[hv]) : 1.0;
  if (p->gate_mode == KDA_GATE_SOFTPLUS) return -A * pf_softplus(x + b);
  return p->lower_bound * pf_sigm(A * (x + b));
}

static size_t pf_at(const kda_problem *p, int64_t i, int64_t j) {
  return p->state_layout == KDA_STATE_VK ? (size_t)(j * p->K + i) : (size_t)(i * p->V + j);
}

static double pf_dot_col(const double *S, const double *x, int64_t K, int64_t V, int64_t j) {
  double s = 0;
  for (int64_t i = 0; i < K; i++) s += S[i * V + j] * x[i];
  return s;
}

/* One (sequence n, value head hv); *ck is the next checkpoint index. */
static void pf_head(const kda_problem *p, const kda_backend_tensors *t, int64_t n, int64_t hv,
                    int64_t *ck, double *S, double *w) {
  const int64_t K = p->K, V = p->V;
  const int64_t GW = p->family == KDA_FAMILY_KDA ? K : p->family == KDA_FAMILY_GDN ? 1 : 0;
  double *qq = w, *kk = w + K, *a = w + 2 * K, *pr = w + 3 * K;
  const int64_t G = p->HV / p->H, h = p->head_map == KDA_HEADMAP_DIV ? hv / G : hv % p->H;
  const size_t kv = (size_t)(K * V);
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++)
      S[i * V + j] = p->has_initial_state
                         ? ((const double *)t->h0)[(size_t)(n * p->HV + hv) * kv + pf_at(p, i, j)]
                         : 0.0;
  for (int64_t tt = t->cu_seqlens[n]; tt < t->cu_seqlens[n + 1]; tt++) {
    pf_l2(p->l2_mode, p->l2_eps, K, (const double *)t->q + (tt * p->H + h) * K, qq);
    pf_l2(p->l2_mode, p->l2_eps, K, (const double *)t->k + (tt * p->H + h) * K, kk);
    for (int64_t i = 0; i < K; i++) {
      qq[i] *= p->scale;
      a[i] = GW ? exp(pf_gate(p, t, GW, tt, hv, GW == 1 ? 0 : i)) : 1.0;
    }
    double bs = ((const double *)t->beta)[tt * p->HV + hv];
    double b = p->beta_mode == KDA_BETA_PROB ? bs
               : p->beta_mode == KDA_BETA_LOGIT ? pf_sigm(bs) : 2 * pf_sigm(bs);
    const double *v = (const double *)t->v + (tt * p->HV + hv) * V;
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) S[i * V + j] *= a[i];
    for (int64_t j = 0; j < V; j++)
      pr[j] = p->family == KDA_FAMILY_LINEAR ? 0.0 : pf_dot_col(S, kk, K, V, j);
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) S[i * V + j] += kk[i] * (b * (v[j] - pr[j]));
    double *out = (double *)t->o + (tt * p->HV + hv) * V;
    for (int64_t j = 0; j < V; j++) out[j] = pf_dot_col(S, qq, K, V, j);
    if (*ck < p->n_checkpoints && t->checkpoints[*ck] == tt) {
      double *hc = (double *)t->hc + (size_t)(*ck * p->HV + hv) * kv;
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) hc[pf_at(p, i, j)] = S[i * V + j];
      (*ck)++;
    }
  }
  if (p->want_final_state) {
    double *ht = (double *)t->ht + (size_t)(n * p->HV + hv) * kv;
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) ht[pf_at(p, i, j)] = S[i * V + j];
  }
}

/* The whole call into t's outputs.  Returns KDA_OK or KDA_ENOMEM. */
static int32_t pf_forward(const kda_problem *p, const kda_backend_tensors *t) {
  double *S = malloc((size_t)(p->K * p->V + 3 * p->K + p->V) * sizeof *S);
  if (!S) return KDA_ENOMEM;
  int64_t c0 = 0; /* the first checkpoint of sequence n */
  for (int64_t n = 0; n < p->N; n++) {
    while (c0 < p->n_checkpoints && t->checkpoints[c0] < t->cu_seqlens[n]) c0++;
    for (int64_t hv = 0; hv < p->HV; hv++) {
      int64_t ck = c0;
      pf_head(p, t, n, hv, &ck, S, S + p->K * p->V);
    }
  }
  free(S);
  return KDA_OK;
}

#endif

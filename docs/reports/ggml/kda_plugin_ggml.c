/* kda_plugin_ggml.c: a kda backend plugin (ABI 2) that runs ggml's CPU GGML_OP_GATED_DELTA_NET.
 * SPDX-License-Identifier: MIT
 *
 * Our adapter, not ggml's code: it is built against a ggml checkout that the report
 * (docs/reports/ggml.md) names by commit; nothing of ggml is committed here.  Each forward
 * builds one ggml graph per call of the op and runs it on the CPU with ggml_graph_compute.
 *
 * What the op does (ggml.h, ggml-cpu/ops.cpp at the report's commit): all float32; S_k == S_v;
 * q/k head iv1 % H_k (SPEC.md §4.4 `mod`); state stored transposed (SPEC.md §2.4 `vk`);
 * log-space gate g, per channel ([S_v,..], KDA) or per head ([1,..], GDN), applied as expf(g);
 * beta used as given (SPEC.md §4.2 `prob`); no L2; readout scale fixed at 1/sqrtf(S_v);
 * equal-length sequences only (n_tokens per n_seqs).  So the adapter, outside the op:
 *   - gate softplus / lower_bound and beta logit / logit_neg: computed in float64 and rounded
 *     once to float32 (as a serving stack's separate kernel would; docs/scoring.md §2.1);
 *   - l2 `ggml`: ggml_l2_norm in the same graph (ggml's own convention, SPEC.md §4.3);
 *     l2 `fla`: in float64 on the host (ggml has no op for x / sqrt(sum x^2 + eps));
 *   - a scale other than the op's 1/sqrtf(S_v): folded into q;
 *   - head map `div`: q/k copied per value head (then the op's `mod` map is the identity);
 *   - state layout `kv`: transposed (exact); family deltanet: a zero scalar gate (expf(0) = 1);
 *   - ragged sequences: one call per sequence; checkpoints: chained calls, each from the
 *     previous call's final state (the op is token-sequential, so this changes no bit), or
 *     with ckpt=snap the op's own K state snapshots (ggml.h:2582-2584) in one call;
 *   - K != V: declined, or with pad=1 zero-padded to D = max(K, V) (exact: padded key
 *     channels and value columns stay zero).
 * Family `linear` is declined: the op always erases.
 * With prep=ggml the gate, beta and both L2 conventions are computed by ggml's own f32 ops in
 * the same graph instead (ggml_add, ggml_softplus, ggml_exp, ggml_mul, ggml_sigmoid,
 * ggml_scale; L2 `fla` as ggml_rms_norm(x, eps/D) / sqrt(D)), as a llama.cpp-style graph does.
 *
 * Params (words split by ',' or ' '): threads=N (1..256, default 1), pad=0|1 (default 0),
 * prep=host|ggml (default host), ckpt=chain|snap (default chain).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kda_backend.h"

typedef struct {
  int threads;
  int pad;
  int prep_ggml; /* 1: gate, beta and L2 by ggml ops in the graph */
  int ckpt_snap; /* 1: checkpoints from the op's K snapshot slots */
  char err[512];
} gg_handle;

/* Host-side float32 inputs of the whole problem, in the op's shapes (D = padded width). */
typedef struct {
  int64_t D, Hq, GW;
  float *q, *k, *v, *g, *beta; /* [T,Hq,D] [T,Hq,D] [T,HV,D] [T,HV,GW] [T,HV] */
  float *state;                /* [N,HV,D,D], the op's transposed layout: s[j*D + i] = S[i][j] */
  float *dtb, *alog;           /* prep=ggml: dt_bias [HV,GW] zero-padded, A_log [HV] */
  float qmul, kmul;            /* factors for q and k in the graph, or 1 */
  int graph_l2, graph_gate;    /* 1: L2 / gate and beta computed in the graph */
} gg_inputs;

static void gg_quiet(enum ggml_log_level level, const char *text, void *user) {
  (void)level, (void)text, (void)user; /* a backend never prints (kda_backend.h) */
}

static int gg_word(const char *s, size_t n, const char *key, long lo, long hi, int *out) {
  size_t kl = strlen(key);
  if (n <= kl || strncmp(s, key, kl) != 0) return 0;
  char buf[32];
  if (n - kl >= sizeof buf) return -1;
  memcpy(buf, s + kl, n - kl);
  buf[n - kl] = 0;
  char *end;
  long v = strtol(buf, &end, 10);
  if (*end || end == buf || v < lo || v > hi) return -1;
  *out = (int)v;
  return 1;
}

static int32_t gg_open(const char *params, void **handle, char *err, uint32_t errlen) {
  int threads = 1, pad = 0, prep = 0, snap = 0;
  for (const char *s = params; *s;) {
    s += strspn(s, " ,");
    size_t n = strcspn(s, " ,");
    if (!n) break;
    int r = gg_word(s, n, "threads=", 1, 256, &threads);
    if (r == 0) r = gg_word(s, n, "pad=", 0, 1, &pad);
    if (r == 0 && n > 5 && strncmp(s, "prep=", 5) == 0) {
      int host = n == 9 && strncmp(s, "prep=host", 9) == 0;
      int graph = n == 9 && strncmp(s, "prep=ggml", 9) == 0;
      r = host || graph ? 1 : -1;
      if (r > 0) prep = graph;
    } else if (r == 0 && n > 5 && strncmp(s, "ckpt=", 5) == 0) {
      int chain = n == 10 && strncmp(s, "ckpt=chain", 10) == 0;
      int slots = n == 9 && strncmp(s, "ckpt=snap", 9) == 0;
      r = chain || slots ? 1 : -1;
      if (r > 0) snap = slots;
    }
    if (r <= 0) {
      if (errlen)
        snprintf(err, errlen, "%s '%.*s' (threads=1..256 pad=0|1 prep=host|ggml ckpt=chain|snap)",
                 r < 0 ? "bad value in" : "unknown parameter", (int)(n > 64 ? 64 : n), s);
      return KDA_EINVAL;
    }
    s += n;
  }
  gg_handle *h = calloc(1, sizeof *h);
  if (!h) return KDA_ENOMEM;
  h->threads = threads;
  h->pad = pad;
  h->prep_ggml = prep;
  h->ckpt_snap = snap;
  ggml_log_set(gg_quiet, NULL);
  ggml_cpu_init();
  *handle = h;
  return KDA_OK;
}

static void gg_close(void *handle) { free(handle); }

static const char *gg_last_error(void *handle) { return handle ? ((gg_handle *)handle)->err : ""; }

/* What the op cannot express, with where ggml says so (commit of the report). */
static int32_t gg_supports(void *handle, const kda_problem *p, char *why, uint32_t n) {
  const gg_handle *h = handle;
  if (p->family == KDA_FAMILY_LINEAR) {
    snprintf(why, n, "family linear: the op always erases, delta = (v - S^T k) * beta "
                     "(ggml-cpu/ops.cpp:10880)");
    return KDA_EUNSUPPORTED;
  }
  if (p->K != p->V && !h->pad) {
    snprintf(why, n, "K != V: the op requires S_k == S_v, state [S_v,S_v,H,n_seqs] "
                     "(ggml.h:2575, ggml.c:6311); pad=1 zero-pads to max(K,V)");
    return KDA_EUNSUPPORTED;
  }
  return KDA_OK;
}

static double gg_sigm(double y) { return y >= 0 ? 1 / (1 + exp(-y)) : exp(y) / (1 + exp(y)); }
static double gg_softplus(double y) { return fmax(y, 0) + log1p(exp(-fabs(y))); }

/* The log-decay g_eff (SPEC.md §4.1) of stored element g at channel c, in float64. */
static double gg_gate(const kda_problem *p, const float *A_log, const float *dt_bias, int64_t GW,
                      int64_t hv, int64_t c, double x) {
  if (p->gate_mode == KDA_GATE_LOG) return x;
  double b = dt_bias[hv * GW + c];
  double A = p->has_A_log ? exp((double)A_log[hv]) : 1.0;
  if (p->gate_mode == KDA_GATE_SOFTPLUS) return -A * gg_softplus(x + b);
  return p->lower_bound * gg_sigm(A * (x + b));
}

/* q or k of one token and op head into dst[D]: head map, L2 `fla` (float64) and the q factor
 * mul; L2 `ggml` is left to ggml_l2_norm in the graph. */
static void gg_qk_row(const kda_problem *p, const gg_inputs *in, const float *src, double mul,
                      float *dst) {
  const int64_t D = in->D;
  double s = 0, f = mul;
  for (int64_t i = 0; i < p->K; i++) s += (double)src[i] * src[i];
  if (p->l2_mode == KDA_L2_FLA && !in->graph_l2) f = mul / sqrt(s + p->l2_eps);
  for (int64_t i = 0; i < D; i++) dst[i] = i < p->K ? (float)(src[i] * f) : 0.0f;
}

static void gg_inputs_free(gg_inputs *in) {
  free(in->q), free(in->k), free(in->v), free(in->g), free(in->beta), free(in->state);
  free(in->dtb), free(in->alog);
  memset(in, 0, sizeof *in);
}

static float *gg_alloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static void gg_prep_qk(const kda_problem *p, const kda_backend_tensors *t, gg_inputs *in,
                       double qscale) {
  const int64_t G = p->HV / p->H;
  for (int64_t tt = 0; tt < p->T; tt++)
    for (int64_t hq = 0; hq < in->Hq; hq++) {
      int64_t h = in->Hq == p->H ? hq : p->head_map == KDA_HEADMAP_DIV ? hq / G : hq % p->H;
      size_t src = (size_t)(tt * p->H + h) * p->K, dst = (size_t)(tt * in->Hq + hq) * in->D;
      gg_qk_row(p, in, (const float *)t->q + src, qscale, in->q + dst);
      gg_qk_row(p, in, (const float *)t->k + src, 1.0, in->k + dst);
    }
}

static void gg_prep_vgb(const kda_problem *p, const kda_backend_tensors *t, gg_inputs *in) {
  const int64_t D = in->D, GW = in->GW;
  const int64_t sgw = p->family == KDA_FAMILY_KDA ? p->K : p->family == KDA_FAMILY_GDN ? 1 : 0;
  const float *v = t->v, *g = t->g, *beta = t->beta;
  for (int64_t r = 0; r < p->T * p->HV; r++) {
    int64_t hv = r % p->HV;
    for (int64_t j = 0; j < D; j++) in->v[r * D + j] = j < p->V ? v[r * p->V + j] : 0.0f;
    for (int64_t c = 0; c < GW; c++) /* deltanet: sgw = 0, a zero gate; padded channels: 0 */
      in->g[r * GW + c] = c >= sgw         ? 0.0f
                          : in->graph_gate ? g[r * sgw + c]
                                           : (float)gg_gate(p, t->A_log, t->dt_bias, sgw, hv, c,
                                                            g[r * sgw + c]);
    double b = beta[r];
    in->beta[r] = p->beta_mode == KDA_BETA_PROB || in->graph_gate ? beta[r]
                  : p->beta_mode == KDA_BETA_LOGIT ? (float)gg_sigm(b)
                                                   : (float)(2 * gg_sigm(b));
  }
}

/* h0 into the op's transposed state, zero-padded; zero without h0. */
static void gg_prep_state(const kda_problem *p, const kda_backend_tensors *t, gg_inputs *in) {
  const int64_t D = in->D, K = p->K, V = p->V;
  if (!p->has_initial_state) return;
  const float *h0 = t->h0;
  for (int64_t nh = 0; nh < p->N * p->HV; nh++)
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) {
        size_t at = p->state_layout == KDA_STATE_VK ? (size_t)(j * K + i) : (size_t)(i * V + j);
        in->state[(nh * D + j) * D + i] = h0[(size_t)nh * K * V + at];
      }
}

static int gg_prep(const gg_handle *h, const kda_problem *p, const kda_backend_tensors *t,
                   gg_inputs *in) {
  in->D = p->K > p->V ? p->K : p->V;
  in->Hq = p->head_map == KDA_HEADMAP_MOD || p->HV == p->H ? p->H : p->HV;
  in->GW = p->family == KDA_FAMILY_KDA ? in->D : 1;
  const float op_scale = 1.0f / sqrtf((float)in->D); /* ggml-cpu/ops.cpp:10826 */
  double qscale = (float)p->scale == op_scale ? 1.0 : p->scale / op_scale;
  in->graph_l2 = p->l2_mode == KDA_L2_GGML || (h->prep_ggml && p->l2_mode == KDA_L2_FLA);
  in->graph_gate = h->prep_ggml;
  in->qmul = in->kmul = 1.0f;
  if (in->graph_l2 || h->prep_ggml) { /* the scale goes into the graph too */
    /* L2 `fla` = rms_norm(x, eps/D) / sqrt(D): mean(x^2) + eps/D = (sum x^2 + eps) / D */
    double f = p->l2_mode == KDA_L2_FLA ? 1 / sqrt((double)in->D) : 1.0;
    in->qmul = (float)(qscale * f), in->kmul = (float)f, qscale = 1.0;
  }
  /* Padding squares the state (D x D per head): refuse sizes whose counts could overflow. */
  if ((double)in->D * in->D * p->HV * p->N > 0x1p50 || (double)p->T * in->Hq * in->D > 0x1p50 ||
      (double)in->D * in->D * p->HV * p->N + (double)p->T * p->HV * in->D > 0x1p50)
    return KDA_ENOMEM;
  in->q = gg_alloc(p->T * in->Hq * in->D), in->k = gg_alloc(p->T * in->Hq * in->D);
  in->v = gg_alloc(p->T * p->HV * in->D), in->g = gg_alloc(p->T * p->HV * in->GW);
  in->beta = gg_alloc(p->T * p->HV), in->state = gg_alloc(p->N * p->HV * in->D * in->D);
  if (!in->q || !in->k || !in->v || !in->g || !in->beta || !in->state) return KDA_ENOMEM;
  if (in->graph_gate && (in->dtb = gg_alloc(p->HV * in->GW)) && (in->alog = gg_alloc(p->HV))) {
    const int64_t sgw = p->family == KDA_FAMILY_KDA ? p->K : p->family == KDA_FAMILY_GDN ? 1 : 0;
    for (int64_t hv = 0; hv < p->HV; hv++) {
      in->alog[hv] = p->has_A_log ? ((const float *)t->A_log)[hv] : 0.0f;
      for (int64_t c = 0; c < sgw && t->dt_bias; c++)
        in->dtb[hv * in->GW + c] = ((const float *)t->dt_bias)[hv * sgw + c];
    }
  }
  if (in->graph_gate && (!in->dtb || !in->alog)) return KDA_ENOMEM;
  gg_prep_qk(p, t, in, qscale);
  gg_prep_vgb(p, t, in);
  gg_prep_state(p, t, in);
  return KDA_OK;
}

/* A tensor whose data is ours (the context holds only metadata). */
static struct ggml_tensor *gg_tensor(struct ggml_context *ctx, int64_t a, int64_t b, int64_t c,
                                     int64_t d, void *data) {
  struct ggml_tensor *x = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, a, b, c, d);
  x->data = data;
  return x;
}

/* A bump allocator over one scratch block for the graph's intermediate tensors. */
static struct ggml_tensor *gg_own(struct ggml_tensor *x, float **arena) {
  x->data = *arena;
  *arena += (ggml_nelements(x) + 15) / 16 * 16;
  return x;
}

/* prep=ggml: g_eff and beta_eff by ggml's f32 ops (SPEC.md §4.1, §4.2). */
static void gg_graph_gate(struct ggml_context *ctx, const kda_problem *p, const gg_inputs *in,
                          struct ggml_tensor **g, struct ggml_tensor **b, float **ar) {
  const int gated = p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN;
  if (gated && p->gate_mode != KDA_GATE_LOG) {
    struct ggml_tensor *dtb = gg_tensor(ctx, in->GW, p->HV, 1, 1, in->dtb);
    struct ggml_tensor *A = gg_own(ggml_exp(ctx, gg_tensor(ctx, 1, p->HV, 1, 1, in->alog)), ar);
    struct ggml_tensor *x = gg_own(ggml_add(ctx, *g, dtb), ar);
    if (p->gate_mode == KDA_GATE_SOFTPLUS) {
      x = gg_own(ggml_softplus(ctx, x), ar);
      x = gg_own(ggml_scale(ctx, gg_own(ggml_mul(ctx, x, A), ar), -1.0f), ar);
    } else {
      if (p->has_A_log) x = gg_own(ggml_mul(ctx, x, A), ar);
      x = gg_own(ggml_scale(ctx, gg_own(ggml_sigmoid(ctx, x), ar), (float)p->lower_bound), ar);
    }
    *g = x;
  }
  if (p->beta_mode != KDA_BETA_PROB) *b = gg_own(ggml_sigmoid(ctx, *b), ar);
  if (p->beta_mode == KDA_BETA_LOGIT_NEG) *b = gg_own(ggml_scale(ctx, *b, 2.0f), ar);
}

/* L2 in the graph (`ggml`: ggml_l2_norm; `fla` with prep=ggml: ggml_rms_norm) and the scales. */
static void gg_graph_qk(struct ggml_context *ctx, const kda_problem *p, const gg_inputs *in,
                        struct ggml_tensor **q, struct ggml_tensor **k, float **ar) {
  if (p->l2_mode == KDA_L2_GGML) { /* SPEC.md §4.3 `ggml`: x / max(||x||, eps) */
    *q = gg_own(ggml_l2_norm(ctx, *q, (float)p->l2_eps), ar);
    *k = gg_own(ggml_l2_norm(ctx, *k, (float)p->l2_eps), ar);
  } else if (p->l2_mode == KDA_L2_FLA && in->graph_l2) {
    *q = gg_own(ggml_rms_norm(ctx, *q, (float)(p->l2_eps / in->D)), ar);
    *k = gg_own(ggml_rms_norm(ctx, *k, (float)(p->l2_eps / in->D)), ar);
  }
  if (in->qmul != 1.0f) *q = gg_own(ggml_scale(ctx, *q, in->qmul), ar);
  if (in->kmul != 1.0f) *k = gg_own(ggml_scale(ctx, *k, in->kmul), ar);
}

/* One call of the op: ns sequences of L tokens each, packed from token t0, state in/out at st
 * ([ns,HV,D,D]); writes o's rows and the final states back into st.  With nsnap > 1 the op
 * keeps that many state snapshots (slot s: the state s tokens before the last), copied to
 * snaps ([nsnap,ns,HV,D,D]). */
static int gg_call(gg_handle *h, const kda_problem *p, const gg_inputs *in, int64_t t0,
                   int64_t L, int64_t ns, float *st, float *o, int64_t nsnap, float *snaps) {
  const int64_t D = in->D, HV = p->HV, Hq = in->Hq, qn = D * Hq * L * ns;
  const int64_t attn = D * HV * L * ns, res_n = attn + nsnap * D * D * HV * ns;
  const int64_t gn = in->GW * HV * L * ns, bn = HV * L * ns;
  float *res = gg_alloc(res_n), *scratch = gg_alloc(4 * qn + 5 * gn + 2 * bn + 2 * HV + 16 * 32);
  float *ar = scratch;
  struct ggml_init_params ip = {ggml_tensor_overhead() * 32 + ggml_graph_overhead() + 4096, NULL,
                                1};
  struct ggml_context *ctx = res && scratch ? ggml_init(ip) : NULL;
  if (!ctx) {
    free(res), free(scratch);
    snprintf(h->err, sizeof h->err, "out of memory for a call of %lld tokens", (long long)L);
    return KDA_ENOMEM;
  }
  struct ggml_tensor *q = gg_tensor(ctx, D, Hq, L, ns, in->q + t0 * Hq * D);
  struct ggml_tensor *k = gg_tensor(ctx, D, Hq, L, ns, in->k + t0 * Hq * D);
  struct ggml_tensor *v = gg_tensor(ctx, D, HV, L, ns, in->v + t0 * HV * D);
  struct ggml_tensor *g = gg_tensor(ctx, in->GW, HV, L, ns, in->g + t0 * HV * in->GW);
  struct ggml_tensor *b = gg_tensor(ctx, 1, HV, L, ns, in->beta + t0 * HV);
  struct ggml_tensor *s = gg_tensor(ctx, D, D, HV, ns, st);
  gg_graph_qk(ctx, p, in, &q, &k, &ar);
  if (in->graph_gate) gg_graph_gate(ctx, p, in, &g, &b, &ar);
  struct ggml_tensor *r = ggml_gated_delta_net(ctx, q, k, v, g, b, s, nsnap);
  r->data = res;
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, r);
  struct ggml_cplan plan = ggml_graph_plan(gf, h->threads, NULL);
  uint8_t *work = plan.work_size ? malloc(plan.work_size) : NULL;
  int rc = KDA_ENOMEM;
  if (!plan.work_size || work) {
    plan.work_data = work;
    rc = ggml_graph_compute(gf, &plan) == GGML_STATUS_SUCCESS ? KDA_OK : KDA_EIO;
  }
  if (rc == KDA_OK) {
    for (int64_t row = 0; row < L * ns * HV; row++) /* attn: [ns, L, HV, D] = packed o rows */
      memcpy(o + (t0 * HV + row) * p->V, res + row * D, (size_t)p->V * sizeof(float));
    memcpy(st, res + attn, (size_t)(D * D * HV * ns) * sizeof(float));
    if (nsnap > 1) memcpy(snaps, res + attn, (size_t)(nsnap * D * D * HV * ns) * sizeof(float));
  } else {
    snprintf(h->err, sizeof h->err, "ggml_graph_compute failed (%s)",
             rc == KDA_ENOMEM ? "work buffer" : "status");
  }
  free(work), ggml_free(ctx), free(res), free(scratch);
  return rc;
}

/* The op's state of head nh into a kv or vk output, unpadded. */
static void gg_state_out(const kda_problem *p, const float *st, int64_t D, float *dst) {
  for (int64_t hv = 0; hv < p->HV; hv++)
    for (int64_t i = 0; i < p->K; i++)
      for (int64_t j = 0; j < p->V; j++) {
        size_t at = p->state_layout == KDA_STATE_VK ? (size_t)(j * p->K + i)
                                                    : (size_t)(i * p->V + j);
        dst[(size_t)hv * p->K * p->V + at] = st[(hv * D + j) * D + i];
      }
}

/* ckpt=snap: sequence n (with checkpoints) in one call keeping end - first checkpoint
 * snapshots; 1 when done, 0 when too large for one call (then chained), or an error. */
static int gg_sequence_snap(gg_handle *h, const kda_problem *p, const kda_backend_tensors *t,
                            const gg_inputs *in, int64_t n, int64_t *ck, int *rc) {
  const int64_t a = t->cu_seqlens[n], end = t->cu_seqlens[n + 1], hsz = p->HV * p->K * p->V;
  const int64_t D = in->D, per = D * D * p->HV, nsnap = end - t->checkpoints[*ck];
  if (nsnap < 2 || (double)nsnap * per > 0x1p26 || nsnap > INT32_MAX) return 0;
  float *st = in->state + n * per, *snaps = gg_alloc(nsnap * per);
  *rc = snaps ? gg_call(h, p, in, a, end - a, 1, st, t->o, nsnap, snaps) : KDA_ENOMEM;
  if (!snaps) snprintf(h->err, sizeof h->err, "out of memory for %lld snapshots", (long long)nsnap);
  while (*rc == KDA_OK && *ck < p->n_checkpoints && t->checkpoints[*ck] < end) {
    int64_t slot = end - 1 - t->checkpoints[*ck]; /* slot s = s tokens back (ggml.h:2582) */
    gg_state_out(p, snaps + slot * per, D, (float *)t->hc + (*ck)++ * hsz);
  }
  if (*rc == KDA_OK && p->want_final_state) gg_state_out(p, st, D, (float *)t->ht + n * hsz);
  free(snaps);
  return 1;
}

/* Sequence n in chained calls split after each checkpoint; *ck is the next checkpoint. */
static int gg_sequence(gg_handle *h, const kda_problem *p, const kda_backend_tensors *t,
                       const gg_inputs *in, int64_t n, int64_t *ck) {
  const int64_t end = t->cu_seqlens[n + 1], hsz = p->HV * p->K * p->V;
  float *st = in->state + n * p->HV * in->D * in->D;
  int rc = KDA_OK;
  if (h->ckpt_snap && *ck < p->n_checkpoints && t->checkpoints[*ck] < end &&
      gg_sequence_snap(h, p, t, in, n, ck, &rc))
    return rc;
  for (int64_t a = t->cu_seqlens[n]; a < end;) {
    int at_ck = *ck < p->n_checkpoints && t->checkpoints[*ck] < end;
    int64_t b = at_ck ? t->checkpoints[*ck] + 1 : end;
    rc = gg_call(h, p, in, a, b - a, 1, st, t->o, 1, NULL);
    if (rc != KDA_OK) return rc;
    if (at_ck) gg_state_out(p, st, in->D, (float *)t->hc + (*ck)++ * hsz);
    a = b;
  }
  if (p->want_final_state) gg_state_out(p, st, in->D, (float *)t->ht + n * hsz);
  return KDA_OK;
}

/* N equal, non-empty sequences and no checkpoints: one call with n_seqs = N. */
static int gg_batchable(const kda_problem *p, const int64_t *cu) {
  if (p->n_checkpoints || p->N < 2 || cu[1] == 0) return 0;
  for (int64_t n = 1; n < p->N; n++)
    if (cu[n + 1] - cu[n] != cu[1]) return 0;
  return 1;
}

static int32_t gg_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  gg_handle *h = handle;
  h->err[0] = 0;
  char why[256];
  if (gg_supports(h, p, why, sizeof why) != KDA_OK) {
    snprintf(h->err, sizeof h->err, "%s", why);
    return KDA_EUNSUPPORTED;
  }
  if (t->in_dtype != KDA_PRECISION_FP32 || t->out_dtype != KDA_PRECISION_FP32) {
    snprintf(h->err, sizeof h->err, "float32 buffers only");
    return KDA_EINVAL;
  }
  gg_inputs in = {0};
  int rc = gg_prep(h, p, t, &in);
  if (rc != KDA_OK) snprintf(h->err, sizeof h->err, "out of memory preparing the inputs");
  int64_t ck = 0;
  if (rc == KDA_OK && gg_batchable(p, t->cu_seqlens)) {
    const int64_t hsz = p->HV * p->K * p->V;
    rc = gg_call(h, p, &in, 0, t->cu_seqlens[1], p->N, in.state, t->o, 1, NULL);
    for (int64_t n = 0; rc == KDA_OK && p->want_final_state && n < p->N; n++)
      gg_state_out(p, in.state + n * p->HV * in.D * in.D, in.D, (float *)t->ht + n * hsz);
  } else {
    for (int64_t n = 0; rc == KDA_OK && n < p->N; n++) rc = gg_sequence(h, p, t, &in, n, &ck);
  }
  gg_inputs_free(&in);
  return rc;
}

static int32_t gg_describe(void *handle, kda_backend_info *info) {
  const gg_handle *h = handle;
  if (!info || info->struct_size < sizeof *info) return KDA_EINVAL;
  snprintf(info->device, sizeof info->device, "x86-64 CPU");
  snprintf(info->isa, sizeof info->isa, "ggml-cpu%s%s", ggml_cpu_has_avx2() ? " avx2" : "",
           ggml_cpu_has_fma() ? " fma" : "");
  info->threads = h->threads;
  return KDA_OK;
}

static const kda_backend gg_backend = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "ggml-cpu",
    .description = "ggml's CPU GGML_OP_GATED_DELTA_NET through an adapter (threads=N pad=0|1 "
                   "prep=host|ggml ckpt=chain|snap)",
    .precision_class = KDA_PRECISION_FP32,
    .input_dtype = KDA_PRECISION_FP32,
    .output_dtype = KDA_PRECISION_FP32,
    .open = gg_open,
    .close = gg_close,
    .supports = gg_supports,
    .forward = gg_forward,
    .last_error = gg_last_error,
    .describe = gg_describe,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  (void)abi_version;
  return &gg_backend;
}

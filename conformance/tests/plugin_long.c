/* plugin_long.c: test-only backend plugin: a float32 KDA with one long-sequence defect each.
 * SPDX-License-Identifier: MIT
 *
 * params "defect=NAME" picks the defect (SPEC.md §7.7 lists them); "defect=none" is the float32
 * reference's arithmetic operation for operation (it scores exactly as ref-f32).  Each defect
 * is small at one step (about an ulp, or a rounding that float32 code could plausibly make) and
 * matters only by accumulating over many tokens, which is what the envelope rule of SPEC.md
 * §7.3 must catch and the former n/256 step allowance forgave:
 *   cumsum_f32        decays from a global float32 prefix sum of the log-gates, a_t =
 *                     exp(G_t - G_{t-1}) (what a naive parallel-scan kernel computes);
 *   state_bf16        the state rounded to bfloat16 at every 64-token chunk boundary;
 *   state_tf32        the same with TF32 (10 fraction bits);
 *   ulp_bias          the state moved one float32 ulp up every step;
 *   chunk_ulp_bias    the state moved one ulp up at every chunk boundary only (a chunk state
 *                     stored rounding toward +inf): a drift 64 times slower, which can stay
 *                     within the caps and is then caught by the growth rule (--strict);
 *   exp_fp16          the log-gate rounded to binary16 before exp (gates held in half);
 *   beta_bf16         beta rounded to bfloat16 every step;
 *   chunk_first_gate  every token of a 64-token chunk decays with the chunk's first gate.
 * Declares the fp32 class with float32 inputs and outputs.  Self-contained: it includes only
 * kda_backend.h, as any third-party plugin would.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"

enum {
  D_NONE, D_CUMSUM_F32, D_STATE_BF16, D_STATE_TF32, D_ULP_BIAS, D_EXP_FP16, D_BETA_BF16,
  D_CHUNK_FIRST_GATE, D_CHUNK_ULP_BIAS, D_COUNT
};
static const char *const defect_names[D_COUNT] = {
    "none", "cumsum_f32", "state_bf16", "state_tf32", "ulp_bias", "exp_fp16", "beta_bf16",
    "chunk_first_gate", "chunk_ulp_bias"};
#define CHUNK 64 /* tokens of a chunk (the chunked kernels' usual size) */

typedef struct lhandle {
  int defect;
  int no_h0; /* "no_h0": declines problems with an initial state (the chained calls of a
                streamed case, SPEC.md §7.10) */
  char err[256];
} lhandle;

/* params: "defect=NAME" words (the last one wins) and "no_h0"; any other word is rejected
 * (SPEC.md §7.8). */
static int32_t l_open(const char *params, void **handle, char *err, uint32_t errlen) {
  int defect = D_NONE, no_h0 = 0;
  for (const char *s = params ? params : ""; *s;) {
    s += strspn(s, " ,");
    size_t n = strcspn(s, " ,");
    if (!n) break;
    if (n == 5 && strncmp(s, "no_h0", 5) == 0) {
      no_h0 = 1, s += n;
      continue;
    }
    int found = -1;
    for (int d = 0; n > 7 && strncmp(s, "defect=", 7) == 0 && d < D_COUNT; d++)
      if (strlen(defect_names[d]) == n - 7 && strncmp(s + 7, defect_names[d], n - 7) == 0)
        found = d;
    if (found < 0) {
      if (errlen)
        snprintf(err, errlen, "%s '%.*s' (defect=NAME)",
                 strncmp(s, "defect=", 7) == 0 ? "unknown defect in" : "unknown parameter",
                 (int)(n > 64 ? 64 : n), s);
      return KDA_EINVAL;
    }
    defect = found;
    s += n;
  }
  lhandle *h = calloc(1, sizeof *h);
  if (!h) return KDA_ENOMEM;
  h->defect = defect;
  h->no_h0 = no_h0;
  *handle = h;
  return KDA_OK;
}

static void l_close(void *h) { free(h); }
static int32_t l_supports(void *h, const kda_problem *p, char *r, uint32_t n) {
  if (p->K > 4096 || p->V > 4096) return snprintf(r, n, "K, V > 4096"), KDA_EUNSUPPORTED;
  if (((lhandle *)h)->no_h0 && p->has_initial_state)
    return snprintf(r, n, "no initial state (no_h0)"), KDA_EUNSUPPORTED;
  return KDA_OK;
}
static const char *l_last_error(void *h) { return ((lhandle *)h)->err; }

/* Round to nearest even keeping `bits` fraction bits of a float (bf16: 7, tf32: 10). */
static float round_bits(float x, int bits) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7F800000u) == 0x7F800000u) return x;
  const int drop = 23 - bits;
  u += (1u << (drop - 1)) - 1u + ((u >> drop) & 1u);
  u &= ~((1u << drop) - 1u);
  memcpy(&x, &u, 4);
  return x;
}

/* Round to binary16 (11 significant bits, subnormal quantum 2^-24; the gates are far from its
 * overflow). */
static float round_fp16(float x) {
  if (x == 0.0f || !isfinite(x)) return x;
  int e;
  frexpf(x, &e);
  float q = ldexpf(1.0f, e - 11 > -24 ? e - 11 : -24);
  return rintf(x / q) * q;
}

static float sigm(float y) {
  if (y >= 0.0f) return 1.0f / (1.0f + expf(-y));
  float e = expf(y);
  return e / (1.0f + e);
}

/* The log-decay g_eff of channel c in float (SPEC.md §4.1, as ref-f32). */
static float gate(const kda_problem *p, const kda_backend_tensors *t, int64_t GW, int64_t tt,
                  int64_t hv, int64_t c) {
  float x = ((const float *)t->g)[(tt * p->HV + hv) * GW + c];
  if (p->gate_mode == KDA_GATE_LOG) return x;
  float b = ((const float *)t->dt_bias)[hv * GW + c];
  float Al = p->has_A_log ? ((const float *)t->A_log)[hv] : 0.0f;
  if (p->gate_mode == KDA_GATE_SOFTPLUS) {
    float y = x + b;
    return -(expf(Al) * ((y > 0.0f ? y : 0.0f) + log1pf(expf(-fabsf(y)))));
  }
  float lb = (float)p->lower_bound;
  return p->has_A_log ? lb * sigm(expf(Al) * (x + b)) : lb * sigm(x + b);
}

static void l2(const kda_problem *p, const float *x, float *y) {
  const int64_t K = p->K;
  if (p->l2_mode == KDA_L2_OFF) {
    for (int64_t i = 0; i < K; i++) y[i] = x[i];
    return;
  }
  float ss = 0.0f, eps = (float)p->l2_eps;
  for (int64_t i = 0; i < K; i++) ss = ss + x[i] * x[i];
  float d = p->l2_mode == KDA_L2_FLA ? sqrtf(ss + eps) : fmaxf(sqrtf(ss), eps);
  for (int64_t i = 0; i < K; i++) y[i] = x[i] / d;
}

static size_t st_at(const kda_problem *p, int64_t i, int64_t j) {
  return p->state_layout == KDA_STATE_VK ? (size_t)(j * p->K + i) : (size_t)(i * p->V + j);
}

/* Work buffers of one (sequence, head): S [K][V], qq kk a G [K], pr [V]. */
typedef struct lrun {
  float *S, *qq, *kk, *a, *G, *pr;
} lrun;

/* a = exp(g_eff) of token tt (position pos in its sequence), with the gate defects. */
static void decays(const kda_problem *p, const kda_backend_tensors *t, int d, int64_t tt,
                   int64_t pos, int64_t hv, lrun *r) {
  const int64_t GW = p->family == KDA_FAMILY_KDA ? p->K : 1;
  if (d == D_CHUNK_FIRST_GATE && pos % CHUNK != 0) return; /* keep the chunk's first a */
  for (int64_t c = 0; c < GW; c++) {
    float ge = gate(p, t, GW, tt, hv, c);
    if (d == D_EXP_FP16) ge = round_fp16(ge);
    if (d == D_CUMSUM_F32) {
      float prev = pos == 0 ? 0.0f : r->G[c];
      r->G[c] = prev + ge;
      ge = r->G[c] - prev;
    }
    r->a[c] = expf(ge);
  }
  for (int64_t i = GW; i < p->K; i++) r->a[i] = r->a[0];
}

static float beta_of(const kda_problem *p, const kda_backend_tensors *t, int d, int64_t tt,
                     int64_t hv) {
  float bs = ((const float *)t->beta)[tt * p->HV + hv];
  float b = p->beta_mode == KDA_BETA_PROB ? bs
            : p->beta_mode == KDA_BETA_LOGIT ? sigm(bs) : 2.0f * sigm(bs);
  return d == D_BETA_BF16 ? round_bits(b, 7) : b;
}

/* One token: decay, erase, write, readout in ref-f32's order (SPEC.md §3.1, §9). */
static void step(const kda_problem *p, const kda_backend_tensors *t, int d, int64_t tt,
                 int64_t pos, int64_t hv, lrun *r) {
  const int64_t K = p->K, V = p->V, G = p->HV / p->H;
  const int64_t h = p->head_map == KDA_HEADMAP_DIV ? hv / G : hv % p->H;
  l2(p, (const float *)t->q + (tt * p->H + h) * K, r->qq);
  l2(p, (const float *)t->k + (tt * p->H + h) * K, r->kk);
  const float scale = (float)p->scale;
  for (int64_t i = 0; i < K; i++) r->qq[i] = scale * r->qq[i];
  const float b = beta_of(p, t, d, tt, hv);
  if (p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN) {
    decays(p, t, d, tt, pos, hv, r);
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) r->S[i * V + j] = r->a[i] * r->S[i * V + j];
  }
  for (int64_t j = 0; j < V; j++) r->pr[j] = 0.0f;
  if (p->family != KDA_FAMILY_LINEAR)
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) r->pr[j] = r->pr[j] + r->S[i * V + j] * r->kk[i];
  const float *v = (const float *)t->v + (tt * p->HV + hv) * V;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) {
      float x = r->S[i * V + j] + r->kk[i] * (b * (v[j] - r->pr[j]));
      r->S[i * V + j] = d == D_ULP_BIAS ? nextafterf(x, INFINITY) : x;
    }
  if ((d == D_STATE_BF16 || d == D_STATE_TF32) && pos % CHUNK == CHUNK - 1)
    for (int64_t e = 0; e < K * V; e++) r->S[e] = round_bits(r->S[e], d == D_STATE_BF16 ? 7 : 10);
  if (d == D_CHUNK_ULP_BIAS && pos % CHUNK == CHUNK - 1)
    for (int64_t e = 0; e < K * V; e++) r->S[e] = nextafterf(r->S[e], INFINITY);
  float *o = (float *)t->o + (tt * p->HV + hv) * V;
  for (int64_t j = 0; j < V; j++) o[j] = 0.0f;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) o[j] = o[j] + r->S[i * V + j] * r->qq[i];
}

/* One (sequence n, value head hv); *ck is the next checkpoint index. */
static void run_head(const kda_problem *p, const kda_backend_tensors *t, int d, int64_t n,
                     int64_t hv, int64_t *ck, lrun *r) {
  const int64_t K = p->K, V = p->V;
  const size_t kv = (size_t)(K * V);
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++)
      r->S[i * V + j] = p->has_initial_state
                            ? ((const float *)t->h0)[(size_t)(n * p->HV + hv) * kv + st_at(p, i, j)]
                            : 0.0f;
  const int64_t bos = t->cu_seqlens[n];
  for (int64_t tt = bos; tt < t->cu_seqlens[n + 1]; tt++) {
    step(p, t, d, tt, tt - bos, hv, r);
    if (*ck < p->n_checkpoints && t->checkpoints[*ck] == tt) {
      float *hc = (float *)t->hc + (size_t)(*ck * p->HV + hv) * kv;
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) hc[st_at(p, i, j)] = r->S[i * V + j];
      (*ck)++;
    }
  }
  if (p->want_final_state) {
    float *ht = (float *)t->ht + (size_t)(n * p->HV + hv) * kv;
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) ht[st_at(p, i, j)] = r->S[i * V + j];
  }
}

static int32_t l_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  lhandle *h = handle;
  const size_t K = (size_t)p->K, V = (size_t)p->V;
  float *w = malloc((K * V + 4 * K + V + 1) * sizeof *w);
  if (!w) return snprintf(h->err, sizeof h->err, "out of memory"), KDA_ENOMEM;
  lrun r = {w, w + K * V, w + K * V + K, w + K * V + 2 * K, w + K * V + 3 * K,
            w + K * V + 4 * K};
  int64_t c0 = 0;
  for (int64_t n = 0; n < p->N; n++) {
    while (c0 < p->n_checkpoints && t->checkpoints[c0] < t->cu_seqlens[n]) c0++;
    for (int64_t hv = 0; hv < p->HV; hv++) {
      int64_t ck = c0;
      run_head(p, t, h->defect, n, hv, &ck, &r);
    }
  }
  free(w);
  return KDA_OK;
}

static const kda_backend long_defects = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "long-defect",
    .description = "test-only: float32 KDA with one long-sequence defect (params defect=NAME)",
    .precision_class = KDA_PRECISION_FP32,
    .input_dtype = KDA_PRECISION_FP32,
    .output_dtype = KDA_PRECISION_FP32,
    .open = l_open,
    .close = l_close,
    .supports = l_supports,
    .forward = l_forward,
    .last_error = l_last_error,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return abi_version >= 1 ? &long_defects : NULL;
}

/* plugin_mutants.c: test-only backend plugin: a float64 KDA with one plausible mistake each.
 * SPDX-License-Identifier: MIT
 *
 * params "mutant=NAME" picks the mistake (SPEC.md §7.7 lists them and why each is plausible);
 * "mutant=none" is a correct float64 implementation (it must pass).  Declares the fp32 class:
 * `make check` asserts that the case set fails every mutant and passes ref-f32 in that class.
 * Self-contained: it includes only kda_backend.h, as any third-party plugin would, and the
 * header-only pool adapter kda_backend_pool.h (it takes pool calls: KDA_CAP_STATE_POOL).
 */
#include <fenv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"
#include "kda_backend_pool.h"

enum {
  M_NONE, M_ERASE_BEFORE_DECAY, M_READOUT_BEFORE_WRITE, M_PREDICT_UNDECAYED,
  M_DECAY_VALUE_AXIS, M_TRANSPOSED_STATE, M_SCALE_ON_K, M_WRONG_HEAD_MAP, M_BETA_BF16,
  M_F32_ULP_BIAS, M_DROP_H0, M_EXP2_GATE, M_FUTURE_GATE_ANCHOR, M_RESUME_UNALIGNED,
  M_DECODE_TRANSPOSED, M_SPEC_STATE_LAST, M_POOL_TOUCHES_FREE, M_POOL_IGNORES_INDEX, M_OVERRUN,
  M_FPENV, M_COUNT
};
static const char *const mutant_names[M_COUNT] = {
    "none", "erase_before_decay", "readout_before_write", "predict_undecayed",
    "decay_value_axis", "transposed_state", "scale_on_k", "wrong_head_map", "beta_bf16",
    "f32_ulp_bias", "drop_h0", "exp2_gate", "future_gate_anchor", "resume_unaligned",
    "decode_transposed", "spec_state_last", "pool_touches_free", "pool_ignores_index",
    "overrun", "fpenv"};

typedef struct mhandle {
  int mutant;
  char err[256];
} mhandle;

/* params: "mutant=NAME" words (the last one wins); any other word is rejected, as every
 * backend must reject a parameter it does not know (SPEC.md §7.8). */
static int32_t m_open(const char *params, void **handle, char *err, uint32_t errlen) {
  int mutant = M_NONE;
  for (const char *s = params; *s;) {
    s += strspn(s, " ,");
    size_t n = strcspn(s, " ,");
    if (!n) break;
    int found = -1;
    for (int m = 0; n > 7 && strncmp(s, "mutant=", 7) == 0 && m < M_COUNT; m++)
      if (strlen(mutant_names[m]) == n - 7 && strncmp(s + 7, mutant_names[m], n - 7) == 0)
        found = m;
    if (found < 0) {
      if (errlen)
        snprintf(err, errlen, "%s '%.*s' (mutant=NAME)",
                 strncmp(s, "mutant=", 7) == 0 ? "unknown mutant in" : "unknown parameter",
                 (int)(n > 64 ? 64 : n), s);
      return KDA_EINVAL;
    }
    mutant = found;
    s += n;
  }
  mhandle *h = calloc(1, sizeof *h);
  if (!h) return KDA_ENOMEM;
  h->mutant = mutant;
  *handle = h;
  return KDA_OK;
}

static void m_close(void *h) { free(h); }
static int32_t m_supports(void *h, const kda_problem *p, char *r, uint32_t n) { return KDA_OK; }
static const char *m_last_error(void *h) { return ((mhandle *)h)->err; }

static double sigm(double y) { return y >= 0 ? 1 / (1 + exp(-y)) : exp(y) / (1 + exp(y)); }
static double softplus(double y) { return fmax(y, 0) + log1p(exp(-fabs(y))); }

static double round_bf16(double x) {
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  memcpy(&f, &u, 4);
  return f;
}

static void l2(int32_t mode, double eps, int64_t n, const double *x, double *y) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
  double d = mode == KDA_L2_FLA ? sqrt(s + eps) : mode == KDA_L2_GGML ? fmax(sqrt(s), eps) : 1.0;
  for (int64_t i = 0; i < n; i++) y[i] = mode == KDA_L2_OFF ? x[i] : x[i] / d;
}

static double gate(const kda_problem *p, const kda_backend_tensors *t, int64_t GW, int64_t tt,
                   int64_t hv, int64_t c) {
  const double *g = t->g;
  double x = g[(tt * p->HV + hv) * GW + c];
  if (p->gate_mode == KDA_GATE_LOG) return x;
  double b = ((const double *)t->dt_bias)[hv * GW + c];
  double A = p->has_A_log ? exp(((const double *)t->A_log)[hv]) : 1.0;
  if (p->gate_mode == KDA_GATE_SOFTPLUS) return -A * softplus(x + b);
  return p->lower_bound * sigm(A * (x + b));
}

static size_t st_at(const kda_problem *p, int64_t i, int64_t j, int transposed) {
  int vk = (p->state_layout == KDA_STATE_VK) != transposed;
  return vk ? (size_t)(j * p->K + i) : (size_t)(i * p->V + j);
}

/* The serving mutants (SPEC.md §7.7) pass the plain scoring of golden/L1 and fail only a
 * serving-path check; each keys its mistake to the call shape of one serving path. */

/* The longest sequence of the call. */
static int64_t longest(const kda_problem *p, const int64_t *cu) {
  int64_t L = 0;
  for (int64_t n = 0; n < p->N; n++) L = cu[n + 1] - cu[n] > L ? cu[n + 1] - cu[n] : L;
  return L;
}

/* A decode call: an initial state and at most one token per sequence (some token). */
static int decode_call(const kda_problem *p, const int64_t *cu) {
  return p->has_initial_state && p->T > 0 && longest(p, cu) <= 1;
}

/* A speculative verify: an initial state, checkpoints, at most 8 tokens per sequence. */
static int verify_call(const kda_problem *p, const int64_t *cu) {
  return p->has_initial_state && p->n_checkpoints > 0 && longest(p, cu) <= 8;
}

/* future_gate_anchor (fla PR #1242's class): exp(ge) computed as exp(ge - r) exp(r) with the
 * reference r the gate of the sequence's last token (a future row), clamped to [-20, 0].  In
 * float64 the value is within an ulp or two, but its bits depend on a future gate. */
static double anchored_exp(const kda_problem *p, const kda_backend_tensors *t, int64_t GW,
                           int64_t last, int64_t hv, int64_t c, double ge) {
  double r = fmin(fmax(gate(p, t, GW, last, hv, c), -20.0), 0.0);
  return exp(ge - r) * exp(r);
}

/* One (sequence, value head) with mutation m. */
static void run_head(const kda_problem *p, const kda_backend_tensors *t, int m, int64_t n,
                     int64_t hv, int64_t *ck, double *S, double *w) {
  const int64_t K = p->K, V = p->V, GW = p->family == KDA_FAMILY_KDA ? K
                                         : p->family == KDA_FAMILY_GDN ? 1 : 0;
  double *qq = w, *kk = w + K, *a = w + 2 * K, *pr = w + 3 * K, *o = pr + V;
  const int64_t *cu = t->cu_seqlens;
  /* decode_transposed: a decode kernel that keeps the state in the other layout (vllm
   * #40956's class) */
  const int tr = m == M_TRANSPOSED_STATE || (m == M_DECODE_TRANSPOSED && decode_call(p, cu));
  const int64_t L = cu[n + 1] - cu[n], ck0 = *ck;
  /* resume_unaligned (tt-metal #54962's class): with an initial state, a sequence of more
   * than 65 tokens (golden/L1's longest with h0 has 65) that does not end on a 64-token chunk
   * boundary starts from zero, as a resumed tail would */
  const int drop = m == M_DROP_H0 || (m == M_RESUME_UNALIGNED && L > 65 && L % 64 != 0);
  const int64_t G = p->HV / p->H;
  int map = m == M_WRONG_HEAD_MAP ? !p->head_map : p->head_map;
  int64_t h = map == KDA_HEADMAP_DIV ? hv / G : hv % p->H;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++)
      S[i * V + j] = (p->has_initial_state && !drop)
                         ? ((const double *)t->h0)[(n * p->HV + hv) * K * V + st_at(p, i, j, tr)]
                         : 0.0;
  for (int64_t tt = cu[n]; tt < cu[n + 1]; tt++) {
    l2(p->l2_mode, p->l2_eps, K, (const double *)t->q + (tt * p->H + h) * K, qq);
    l2(p->l2_mode, p->l2_eps, K, (const double *)t->k + (tt * p->H + h) * K, kk);
    for (int64_t i = 0; i < K; i++) {
      if (m == M_SCALE_ON_K) kk[i] *= p->scale;
      else qq[i] *= p->scale;
    }
    for (int64_t i = 0; i < K; i++) {
      double ge = GW ? gate(p, t, GW, tt, hv, GW == 1 ? 0 : i) : 0.0;
      a[i] = m == M_EXP2_GATE ? exp2(ge)
             : m == M_FUTURE_GATE_ANCHOR && GW ? anchored_exp(p, t, GW, cu[n + 1] - 1, hv,
                                                              GW == 1 ? 0 : i, ge)
                                               : exp(ge);
    }
    double bs = ((const double *)t->beta)[tt * p->HV + hv];
    double b = p->beta_mode == KDA_BETA_PROB ? bs : p->beta_mode == KDA_BETA_LOGIT ? sigm(bs) : 2 * sigm(bs);
    if (m == M_BETA_BF16) b = round_bf16(b);
    const double *v = (const double *)t->v + (tt * p->HV + hv) * V;
    int erases = p->family != KDA_FAMILY_LINEAR;
    for (int64_t j = 0; j < V; j++) {
      double s = 0;
      for (int64_t i = 0; i < K; i++) s += S[i * V + j] * kk[i];
      pr[j] = erases ? s : 0.0; /* prediction on the undecayed state (used by two mutants) */
    }
    if (m == M_ERASE_BEFORE_DECAY)
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) S[i * V + j] -= b * kk[i] * pr[j];
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++)
        S[i * V + j] *= m == M_DECAY_VALUE_AXIS ? a[j % K] : a[i];
    if (m != M_PREDICT_UNDECAYED && m != M_ERASE_BEFORE_DECAY && erases)
      for (int64_t j = 0; j < V; j++) {
        double s = 0;
        for (int64_t i = 0; i < K; i++) s += S[i * V + j] * kk[i];
        pr[j] = s;
      }
    if (m == M_ERASE_BEFORE_DECAY)
      for (int64_t j = 0; j < V; j++) pr[j] = 0;
    if (m == M_READOUT_BEFORE_WRITE)
      for (int64_t j = 0; j < V; j++) {
        double s = 0;
        for (int64_t i = 0; i < K; i++) s += S[i * V + j] * qq[i];
        o[j] = s;
      }
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) {
        double x = S[i * V + j] + kk[i] * (b * (v[j] - pr[j]));
        S[i * V + j] = m == M_F32_ULP_BIAS ? nextafterf((float)x, INFINITY) : x;
      }
    if (m != M_READOUT_BEFORE_WRITE)
      for (int64_t j = 0; j < V; j++) {
        double s = 0;
        for (int64_t i = 0; i < K; i++) s += S[i * V + j] * qq[i];
        o[j] = s;
      }
    double *out = (double *)t->o + (tt * p->HV + hv) * V;
    for (int64_t j = 0; j < V; j++) out[j] = m == M_F32_ULP_BIAS ? (float)o[j] : o[j];
    if (*ck < p->n_checkpoints && t->checkpoints[*ck] == tt) {
      double *hc = (double *)t->hc + (*ck * p->HV + hv) * K * V;
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) hc[st_at(p, i, j, tr)] = S[i * V + j];
      (*ck)++;
    }
  }
  /* spec_state_last: a verify kernel that writes the state after the last draft into every
   * draft position's checkpoint (the rejected drafts' state is kept) */
  for (int64_t c = ck0; m == M_SPEC_STATE_LAST && verify_call(p, cu) && c < *ck; c++) {
    double *hc = (double *)t->hc + (c * p->HV + hv) * K * V;
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) hc[st_at(p, i, j, tr)] = S[i * V + j];
  }
  if (p->want_final_state) {
    double *ht = (double *)t->ht + (n * p->HV + hv) * K * V;
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) ht[st_at(p, i, j, tr)] = S[i * V + j];
  }
}

static int32_t m_plain(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  mhandle *h = handle;
  double *S = malloc((size_t)(p->K * p->V + 3 * p->K + 2 * p->V) * sizeof *S);
  if (!S) return snprintf(h->err, sizeof h->err, "out of memory"), KDA_ENOMEM;
  int64_t c0 = 0;
  for (int64_t n = 0; n < p->N; n++) {
    while (c0 < p->n_checkpoints && t->checkpoints[c0] < t->cu_seqlens[n]) c0++;
    for (int64_t hv = 0; hv < p->HV; hv++) {
      int64_t ck = c0;
      run_head(p, t, h->mutant, n, hv, &ck, S, S + p->K * p->V);
    }
  }
  free(S);
  if (h->mutant == M_OVERRUN) ((double *)t->o)[p->T * p->HV * p->V] = 1.0;
  if (h->mutant == M_FPENV) fesetround(FE_TOWARDZERO);
  return KDA_OK;
}

/* A pool call (SPEC.md §7.8) through the gather adapter, with the two pool mutants:
 * pool_ignores_index uses slot n for sequence n (a batch index taken for a slot index);
 * pool_touches_free zeroes every slot no sequence names (a kernel that clears the pool). */
static int32_t m_pool(mhandle *h, const kda_problem *p, const kda_backend_tensors *t) {
  kda_backend_tensors u = *t;
  int64_t *idx = NULL;
  if (h->mutant == M_POOL_IGNORES_INDEX) {
    if (!(idx = malloc((size_t)p->N * sizeof *idx + 8)))
      return snprintf(h->err, sizeof h->err, "out of memory"), KDA_ENOMEM;
    for (int64_t n = 0; n < p->N; n++) idx[n] = n < t->pool_slots ? n : KDA_PAD_SLOT;
    u.state_indices = idx;
  }
  int32_t st = kda_pool_forward(h, p, &u, m_plain, h->err, sizeof h->err);
  free(idx);
  if (st != KDA_OK || h->mutant != M_POOL_TOUCHES_FREE) return st;
  const size_t slot = (size_t)(p->HV * p->K * p->V);
  for (int64_t s = 0; s < t->pool_slots; s++) {
    int named = 0;
    for (int64_t n = 0; n < p->N; n++) named |= t->state_indices[n] == s;
    if (!named) memset((double *)t->pool + (size_t)s * slot, 0, slot * sizeof(double));
  }
  return KDA_OK;
}

static int32_t m_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  if (kda_pool_is_call(t)) return m_pool(handle, p, t);
  return m_plain(handle, p, t);
}

static const kda_backend mutants = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "mutant",
    .description = "test-only: float64 KDA with one deliberate mistake (params mutant=NAME)",
    .precision_class = KDA_PRECISION_FP32,
    .input_dtype = KDA_PRECISION_FP64,
    .output_dtype = KDA_PRECISION_FP64,
    .open = m_open,
    .close = m_close,
    .supports = m_supports,
    .forward = m_forward,
    .last_error = m_last_error,
    .caps = KDA_CAP_STATE_POOL,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return abi_version >= 1 ? &mutants : NULL;
}

/* kda_catalog_design.c: builders of the designed golden cases (chosen gates, betas, keys, norms).
 * SPDX-License-Identifier: MIT
 *
 * A builder starts from the random case of its catalog entry's description and replaces some
 * inputs.  Chosen values come from short lists and are stored exactly (an inexact one is an
 * error, not a silent rounding); random parts use the PRNG of kda_prng.h on design streams
 * 32..35 and basic IEEE operations (a square root for a norm, powers of two for scaling), then
 * one rounding into the member's precision.  No libm function touches a generated value.
 */
#include <math.h>
#include <string.h>

#include "kda_catalog.h"
#include "kda_catalog_internal.h"
#include "kda_prng.h"

/* Stores x exactly into element i of member m, or fails naming the case. */
static int put_exact(kda_case *c, int m, uint64_t i, double x, char *err, size_t errlen) {
  if (!isinf(x) && kda_catalog_round(c, m, x) != x)
    return kda_fail(KDA_EINVAL, err, errlen,
                    "case '%s': designed value %a of member '%s' is not exact in %s",
                    c->id ? c->id : "", x, kda_case_member_names[m],
                    kda_precision_file_name(kda_case_member_prec(m, c->input_precision)));
  kda_case_array(c, m)[i] = x;
  return KDA_OK;
}

static int need(const kda_case *c, int ok, const char *what, char *err, size_t errlen) {
  if (ok) return KDA_OK;
  return kda_fail(KDA_EINVAL, err, errlen, "case '%s': the design needs %s", c->id ? c->id : "",
                  what);
}

static int64_t gate_width(const kda_case *c) { return kda_problem_gate_width(&c->p); }

/* ---- Gates. */
/* The gate values of the issue, and -inf (a full wipe, allowed in the log mode). */
static const double gate_list[] = {0.0, -0x1p-24, -1.0, -5.0, -20.0, -88.0, -1000.0, -INFINITY};
#define GATE_LIST_N 8

/* g[t,hv,:] = gate_list[(t + hv) mod 8] on every channel. */
static int design_gate_values(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  int st = need(c, c->g && p->gate_mode == KDA_GATE_LOG, "a pre-gated g (gate=log)", err, errlen);
  const int64_t GW = gate_width(c);
  for (int64_t t = 0; !st && t < p->T; t++)
    for (int64_t hv = 0; !st && hv < p->HV; hv++)
      for (int64_t ch = 0; !st && ch < GW; ch++)
        st = put_exact(c, KDA_M_G, (uint64_t)((t * p->HV + hv) * GW + ch),
                       gate_list[(t + hv) % GATE_LIST_N], err, errlen);
  return st;
}

/* Each element: -inf with probability 1/16, else one of the seven finite values. */
static int design_gate_mixture(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  int st = need(c, c->g && p->gate_mode == KDA_GATE_LOG, "a pre-gated g (gate=log)", err, errlen);
  const uint64_t n = (uint64_t)(p->T * p->HV * gate_width(c));
  for (uint64_t i = 0; !st && i < n; i++) {
    const double u = kda_prng_uniform(seed, KDA_DS_GATE, i);
    const int pick = (int)(7.0 * kda_prng_uniform(seed, KDA_DS_GATE2, i));
    st = put_exact(c, KDA_M_G, i, u < 0.0625 ? -INFINITY : gate_list[pick], err, errlen);
  }
  return st;
}


/* Zero dt_bias, and g[t, hv, ch] = vals[(t + a ch + b hv) mod n]: every listed gate input
 * is met, at different tokens for different channels and heads. */
static int gate_table(kda_case *c, const double *vals, int64_t n, int64_t a, int64_t b,
                      char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  const int64_t GW = gate_width(c);
  int st = KDA_OK;
  for (int64_t i = 0; !st && i < p->HV * GW; i++) st = put_exact(c, KDA_M_DT_BIAS, (uint64_t)i,
                                                                  0.0, err, errlen);
  for (int64_t t = 0; !st && t < p->T; t++)
    for (int64_t hv = 0; !st && hv < p->HV; hv++)
      for (int64_t ch = 0; !st && ch < GW; ch++)
        st = put_exact(c, KDA_M_G, (uint64_t)((t * p->HV + hv) * GW + ch),
                       vals[(t + a * ch + b * hv) % n], err, errlen);
  return st;
}

/* Zero dt_bias, and g from a list spread over both of fla's softplus thresholds. */
static int design_softplus_tails(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double tails[] = {-100.0, -40.0, -20.0, -17.0, -16.625, -16.5, -1.0,
                                 0.0,    1.0,   20.0,  20.5,  25.0,    40.0,  88.0};
  const int64_t nt = (int64_t)(sizeof tails / sizeof tails[0]);
  int st = need(c, c->g && c->dt_bias && c->p.gate_mode == KDA_GATE_SOFTPLUS, "gate=softplus",
                err, errlen);
  return st ? st : gate_table(c, tails, nt, 5, 3, err, errlen);
}

/* Zero dt_bias, and g from -100 to 100: sigmoid near 1 (g_eff near lb) and near 0. */
static int design_lower_bound_edges(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double ys[] = {-100.0, -60.0, -20.0, -8.0, -2.0, -0.5, 0.0,
                              0.5,    2.0,   8.0,   20.0, 60.0, 100.0};
  const int64_t ny = (int64_t)(sizeof ys / sizeof ys[0]);
  int st = need(c, c->g && c->dt_bias && c->p.gate_mode == KDA_GATE_LOWER_BOUND,
                "gate=lower_bound", err, errlen);
  return st ? st : gate_table(c, ys, ny, 3, 7, err, errlen);
}

/* g = -2 U: per-channel decays between e^-2 and 1 (pre-gated). */
static int design_strong_decay(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  int st = need(c, c->g && p->gate_mode == KDA_GATE_LOG, "a pre-gated g (gate=log)", err, errlen);
  const uint64_t n = (uint64_t)(p->T * p->HV * gate_width(c));
  for (uint64_t i = 0; !st && i < n; i++)
    c->g[i] = kda_catalog_round(c, KDA_M_G, -2.0 * kda_prng_uniform(seed, KDA_DS_DECAY, i));
  return st;
}

/* A mixed softplus gate (A_log = dt_bias = 0, g_eff = -softplus(x)): even channels decay
 * fast, x ~ N(0, 1) (memories of a few tokens, where a float32 prefix sum of g_eff grows like
 * the position and loses its low bits), odd channels slowly, x = -9.25 - u, g_eff in
 * (-1e-4, -3.5e-5) (memories of 10^4 tokens and more, where the rounding of exp(g_eff) is a
 * systematic error at every step).  g_eff is computed in float32 from the inputs, so it has all
 * its bits whatever the input precision.  SPEC.md §7.3, "Long sequences". */
static int design_mixed_decay(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  int st = need(c, c->g && p->gate_mode == KDA_GATE_SOFTPLUS && c->A_log && c->dt_bias,
                "a softplus gate with A_log", err, errlen);
  const int64_t GW = gate_width(c);
  const uint64_t n = (uint64_t)(p->T * p->HV * GW);
  for (uint64_t i = 0; !st && i < n; i++) {
    const int slow = (int)((i % (uint64_t)GW) % 2);
    const double x = slow ? -9.25 - kda_prng_uniform(seed, KDA_DS_DECAY, i)
                          : kda_prng_normal(seed, KDA_DS_DECAY, i);
    c->g[i] = kda_catalog_round(c, KDA_M_G, x);
  }
  for (int64_t i = 0; !st && i < p->HV; i++) c->A_log[i] = 0.0;
  for (int64_t i = 0; !st && i < p->HV * GW; i++) c->dt_bias[i] = 0.0;
  return st;
}

/* ---- Beta. */
/* beta[t,hv] cycles through 0, 2^-30, 2^-126, 1/2, 1 (prob mode). */
static int design_beta_values(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double bs[] = {0.0, 0x1p-30, 0x1p-126, 0.5, 1.0};
  const kda_problem *p = &c->p;
  int st = need(c, p->beta_mode == KDA_BETA_PROB, "beta=prob", err, errlen);
  for (int64_t t = 0; !st && t < p->T; t++)
    for (int64_t hv = 0; !st && hv < p->HV; hv++)
      st = put_exact(c, KDA_M_BETA, (uint64_t)(t * p->HV + hv), bs[(t + hv) % 5], err, errlen);
  return st;
}

/* Copies key row (t-1, h) onto row (t, h). */
static void repeat_key(kda_case *c, int64_t t, int64_t h) {
  const int64_t K = c->p.K, H = c->p.H;
  memcpy(c->k + (t * H + h) * K, c->k + ((t - 1) * H + h) * K, (size_t)K * sizeof(double));
}

/* Logits from -100 to 100 (beta_eff = 2 sigmoid from ~0 to ~2); odd tokens repeat the key. */
static int design_beta_logit_neg(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double ls[] = {-100.0, -20.0, -2.0, 0.0, 2.0, 20.0, 40.0, 100.0};
  const kda_problem *p = &c->p;
  int st = need(c, p->beta_mode == KDA_BETA_LOGIT_NEG, "beta=logit_neg", err, errlen);
  for (int64_t t = 0; !st && t < p->T; t++)
    for (int64_t hv = 0; !st && hv < p->HV; hv++)
      st = put_exact(c, KDA_M_BETA, (uint64_t)(t * p->HV + hv), ls[(t + hv) % 8], err, errlen);
  for (int64_t t = 1; !st && t < p->T; t += 2)
    for (int64_t h = 0; h < p->H; h++) repeat_key(c, t, h);
  return st;
}

/* Betas near 1/2, a little over half a bfloat16 ulp above the grid point 1/2 at even tokens
 * (bfloat16 rounds them up) and a little under at odd tokens (rounded down); values of
 * alternating sign; g = 0; one key per head repeated at every token.  Rounding beta to
 * bfloat16 then pushes the state along that key the same way at every step. */
static int design_beta_offgrid(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double bs[] = {0.5 + 0x1p-9 + 0x1p-13, 0.5 + 0x1p-9 - 0x1p-13};
  const kda_problem *p = &c->p;
  int st = need(c, p->beta_mode == KDA_BETA_PROB && c->g && p->gate_mode == KDA_GATE_LOG,
                "beta=prob and gate=log", err, errlen);
  for (int64_t t = 0; !st && t < p->T; t++)
    for (int64_t hv = 0; !st && hv < p->HV; hv++) {
      st = put_exact(c, KDA_M_BETA, (uint64_t)(t * p->HV + hv), bs[t % 2], err, errlen);
      for (int64_t j = 0; j < p->V; j++) {
        const uint64_t i = (uint64_t)((t * p->HV + hv) * p->V + j);
        const double mag = 0.5 + kda_prng_uniform(seed, KDA_DS_VALUE, i);
        c->v[i] = kda_catalog_round(c, KDA_M_V, t % 2 ? -mag : mag);
      }
    }
  for (uint64_t i = 0; !st && i < (uint64_t)(p->T * p->HV * gate_width(c)); i++) c->g[i] = 0.0;
  for (int64_t t = 1; !st && t < p->T; t++)
    for (int64_t h = 0; h < p->H; h++) repeat_key(c, t, h);
  return st;
}

/* ---- Keys, queries and norms. */
/* Row (t,h) of q or k. */
static double *row_of(kda_case *c, double *x, int64_t t, int64_t h) {
  return x + (t * c->p.H + h) * c->p.K;
}

/* Entry col of row r of the Sylvester-Hadamard matrix: (-1)^popcount(r & col). */
static double hadamard(int64_t r, int64_t col) {
  uint64_t x = (uint64_t)(r & col);
  int par = 0;
  while (x) {
    par ^= (int)(x & 1u);
    x >>= 1;
  }
  return par ? -1.0 : 1.0;
}

/* One key row by its geometry class t mod 8 (K a power of two, K >= 4):
 * 0 zero; 1 random (as generated); 2 the previous row repeated; 3, 4 two different rows of
 * the Hadamard matrix scaled by 2^-floor(log2(K)/2) (orthogonal to each other); 5 a basis
 * vector; 6 row 3's vector with one entry changed by 2^-12 relative (nearly collinear);
 * 7 the random row 1 plus 2^-16 times another random row (nearly collinear). */
static void geometry_row(kda_case *c, int64_t t, int64_t h, double sc) {
  const int64_t K = c->p.K, r = (t / 8) % K;
  double *row = row_of(c, c->k, t, h);
  switch (t % 8) {
  case 0:
    for (int64_t i = 0; i < K; i++) row[i] = 0.0;
    break;
  case 2:
    repeat_key(c, t, h);
    break;
  case 6:
    memcpy(row, row_of(c, c->k, t - 3, h), (size_t)K * sizeof(double)); /* class 3's row */
    row[0] = row[0] * (1.0 + 0x1p-12);
    break;
  case 3: case 4:
    for (int64_t i = 0; i < K; i++) row[i] = hadamard(r + (t % 8 == 4), i) * sc;
    break;
  case 5:
    for (int64_t i = 0; i < K; i++) row[i] = i == r ? 1.0 : 0.0;
    break;
  case 7: {
    const double *base = row_of(c, c->k, t - 6, h); /* the random row of class 1 */
    for (int64_t i = 0; i < K; i++)
      row[i] = kda_catalog_round(c, KDA_M_K, base[i] + 0x1p-16 * row[i]);
    break;
  }
  default: break;
  }
}

static int design_key_geometry(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  const int64_t K = c->p.K;
  int st = need(c, K >= 4 && (K & (K - 1)) == 0, "K a power of two, at least 4", err, errlen);
  if (st) return st;
  double sc = 1.0;
  for (int64_t k4 = 4; k4 <= K; k4 *= 4) sc *= 0.5; /* 2^-floor(log2(K)/2) */
  for (int64_t t = 0; t < c->p.T; t++)
    for (int64_t h = 0; h < c->p.H; h++) geometry_row(c, t, h, sc);
  /* class 6 changes an entry by a relative 2^-12: it must still be exact */
  for (uint64_t i = 0; i < (uint64_t)(c->p.T * c->p.H * K); i++)
    if (kda_catalog_round(c, KDA_M_K, c->k[i]) != c->k[i])
      return kda_fail(KDA_EINVAL, err, errlen, "case '%s': key geometry needs f32 or f64 inputs",
                      c->id ? c->id : "");
  return KDA_OK;
}

/* Row (t,h) of x replaced by s * r / ||r|| with r the generated row (s a power of two; the
 * zero row when s = 0 or r = 0), rounded to the precision. */
static void scaled_direction(kda_case *c, int m, double *x, int64_t t, int64_t h, double s) {
  double *row = row_of(c, x, t, h), n2 = 0.0;
  for (int64_t i = 0; i < c->p.K; i++) n2 += row[i] * row[i];
  const double nr = sqrt(n2);
  for (int64_t i = 0; i < c->p.K; i++)
    row[i] = nr == 0.0 ? 0.0 : kda_catalog_round(c, m, (row[i] / nr) * s);
}

/* Norms 0, 2^-40 ... 1 for q and k rows, staggered so that q and k of a token differ. */
static int design_near_zero(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double ss[] = {0.0,     0x1p-40, 0x1p-30, 0x1p-21, 0x1p-20, 0x1p-19,
                              0x1p-15, 0x1p-11, 0x1p-10, 0x1p-9,  0x1p-5,  1.0};
  int st = need(c, c->p.l2_mode != KDA_L2_OFF && c->input_precision != KDA_PRECISION_FP16,
                "L2 on and inputs wider than fp16", err, errlen);
  for (int64_t t = 0; !st && t < c->p.T; t++)
    for (int64_t h = 0; h < c->p.H; h++) {
      scaled_direction(c, KDA_M_K, c->k, t, h, ss[(t + h) % 12]);
      scaled_direction(c, KDA_M_Q, c->q, t, h, ss[(t + h + 5) % 12]);
    }
  return st;
}

/* Norms 2^-14 ... 2^-11: above ggml's floor (1e-6), far below fla's sqrt(eps) = 1e-3. */
static int design_l2_between(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double ss[] = {0x1p-14, 0x1p-13, 0x1p-12, 0x1p-11};
  int st = need(c, c->p.l2_mode != KDA_L2_OFF, "L2 on", err, errlen);
  for (int64_t t = 0; !st && t < c->p.T; t++)
    for (int64_t h = 0; h < c->p.H; h++) {
      scaled_direction(c, KDA_M_K, c->k, t, h, ss[(t + h) % 4]);
      scaled_direction(c, KDA_M_Q, c->q, t, h, ss[(t + h + 2) % 4]);
    }
  return st;
}

/* ---- States. */
/* h0[n,hv,i,j] times 2^(20 (1 + (i + j) mod 5)): magnitudes up to 2^100. */
static int design_large_h0(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  int st = need(c, c->h0 != NULL, "an initial state (h0=1)", err, errlen);
  for (int64_t n = 0; !st && n < p->N; n++)
    for (int64_t hv = 0; hv < p->HV; hv++)
      for (int64_t i = 0; i < p->K; i++)
        for (int64_t j = 0; j < p->V; j++) {
          double f = 1.0;
          for (int64_t e = 0; e < 20 * (1 + (i + j) % 5); e++) f *= 2.0;
          c->h0[kda_catalog_state_at(p, n, hv, i, j)] *= f; /* exact: a power of two */
        }
  return st;
}

/* ---- The table of designs. */
static const kda_catalog_design designs[] = {
    {"gate_values", design_gate_values,
     "g[t,hv,:] = L[(t + hv) mod 8] on every channel, L = 0, -2^-24, -1, -5, -20, -88, -1000, "
     "-inf"},
    {"gate_mixture", design_gate_mixture,
     "each g element is -inf with probability 1/16 (uniform stream 32), else L[floor(7 u)] "
     "(uniform stream 33) of the finite values of L"},
    {"softplus_tails", design_softplus_tails,
     "dt_bias = 0; g[t,hv,c] = Y[(t + 5c + 3hv) mod 14], Y = -100, -40, -20, -17, -16.625, "
     "-16.5, -1, 0, 1, 20, 20.5, 25, 40, 88"},
    {"lower_bound_edges", design_lower_bound_edges,
     "dt_bias = 0; g[t,hv,c] = Y[(t + 3c + 7hv) mod 13], Y = -100, -60, -20, -8, -2, -0.5, 0, "
     "0.5, 2, 8, 20, 60, 100"},
    {"strong_decay", design_strong_decay, "g = -2 u, u uniform on stream 34: decays in (e^-2, 1]"},
    {"mixed_decay", design_mixed_decay,
     "softplus gate, A_log = dt_bias = 0: g = z (even channels), -9.25 - u (odd channels), z "
     "normal and u uniform on stream 34"},
    {"beta_values", design_beta_values,
     "beta[t,hv] = B[(t + hv) mod 5], B = 0, 2^-30, 2^-126, 0.5, 1"},
    {"beta_logit_neg", design_beta_logit_neg,
     "beta[t,hv] = B[(t + hv) mod 8], B = -100, -20, -2, 0, 2, 20, 40, 100 (logits); odd tokens "
     "repeat the previous key"},
    {"beta_offgrid", design_beta_offgrid,
     "beta[t] = 1/2 + 2^-9 + 2^-13 (t even), 1/2 + 2^-9 - 2^-13 (t odd); v = +-(1/2 + u), "
     "u uniform on stream 35, sign + at even t; g = 0; every token repeats token 0's key"},
    {"key_geometry", design_key_geometry,
     "key rows by t mod 8: zero, random, repeated, two orthogonal Hadamard rows, a basis "
     "vector, nearly collinear (2^-12 relative), nearly collinear (2^-16 of a random row)"},
    {"near_zero", design_near_zero,
     "q and k rows scaled to norms S[(t + h) mod 12] (k) and S[(t + h + 5) mod 12] (q), S = 0, "
     "2^-40, 2^-30, 2^-21, 2^-20, 2^-19, 2^-15, 2^-11, 2^-10, 2^-9, 2^-5, 1"},
    {"l2_between", design_l2_between,
     "q and k rows scaled to norms 2^-14 ... 2^-11: between ggml's floor and fla's sqrt(eps)"},
    {"large_h0", design_large_h0, "h0[n,hv,i,j] multiplied by 2^(20 (1 + (i + j) mod 5))"},
    {"l0_linear_accumulate", kda_l0_linear_accumulate, "hand-written dyadic inputs"},
    {"l0_delta_overwrite", kda_l0_delta_overwrite, "hand-written dyadic inputs"},
    {"l0_decay_wipe", kda_l0_decay_wipe, "hand-written dyadic inputs, gates 0 and -inf"},
    {"l0_varlen_h0", kda_l0_varlen_h0, "hand-written dyadic inputs, gates 0 and -inf"},
    {"l0_grouped", kda_l0_grouped, "hand-written dyadic inputs"},
    {"l0_gdn_vk", kda_l0_gdn_vk, "hand-written dyadic inputs, gates 0 and -inf"},
    {"l0_reflection", kda_l0_reflection, "hand-written dyadic inputs, beta = 2"},
};

int64_t kda_catalog_design_count(void) { return (int64_t)(sizeof designs / sizeof designs[0]); }

const kda_catalog_design *kda_catalog_design_get(int64_t i) {
  return i >= 0 && i < kda_catalog_design_count() ? &designs[i] : NULL;
}

const kda_catalog_design *kda_catalog_design_find(const char *name) {
  for (int64_t i = 0; name && i < kda_catalog_design_count(); i++)
    if (strcmp(designs[i].name, name) == 0) return &designs[i];
  return NULL;
}

/* plugin_zoo.c: the honest zoo, float32 KDA kernels that differ from each other and from
 * ref-f32 only in their order of evaluation (SPEC.md §7.3, the claim that every honest kernel
 * passes).
 * SPDX-License-Identifier: MIT
 *
 * Every member computes SPEC.md §3.1 exactly in exact arithmetic, in float32 throughout (state,
 * products, sums; `f64acc` widens its dot products only), and declares the fp32 class (bf16
 * with input=bf16).  Written from the mathematics of SPEC.md §3-§5, not from ref-f32's source.
 * params (words separated by spaces or commas; any other word is KDA_EINVAL):
 *   order=NAME   the evaluation order (default spec):
 *     spec      decay, p = S^T k, S += k (b (v - p))^T, o = S^T q; sums in index order
 *     crexp     spec, every exp / log1p / sigmoid computed in double and rounded once
 *     textbook  decay, p = S^T k, S += (b k)(v - p)^T, o = S^T q (b folded into the key)
 *     numpy     textbook with pairwise sums (numpy's reduction order)
 *     fold      decay folded into the key: p = S^T (a o k) on the undecayed state, then
 *               S = a o S + k (b (v - p))^T in one pass
 *     split     the correction as two rank-one updates: S -= (b k) p^T; S += (b k) v^T
 *     f64acc    spec with every dot product and norm accumulated in double
 *     rev       spec with every sum in reverse index order
 *     pairwise  spec with pairwise (tree) sums
 *     block8    spec with eight interleaved partial sums (a SIMD kernel's lanes)
 *     scaleout  scale applied to the output (SPEC.md §4.5), L2 as a multiply by 1/norm
 *     chunk16   the chunked WY/UT form over 16-token chunks: in-chunk float32 cumulative
 *     chunk64     log-decays, A = (k k^T) o exp(G_t - G_s), (I + diag(b) A)^-1 by forward
 *               substitution, w = T (b v) - T (b exp(G) k) S0, o and the chunk's end state
 *               from S0 and w (the order of fla's chunk_kda)
 *     chunk64d  chunk64 with the in-chunk log-decay sums and their differences in double, each
 *               exp(G_t - G_s) rounded once (a careful chunked kernel)
 *     perm      spec with every reduction (p, o, both norms) summed in a random order: a
 *               fresh permutation for each token, head and reduction, from seed=N
 *   seed=N       the permutations of order=perm (any unsigned 64-bit integer; default 0);
 *                they depend on the seed, the token's index and the head only, so a call
 *                repeated gives the same bits and causality is judged by bits (SPEC.md §7.7)
 *   input=bf16   bfloat16 q k v g beta buffers, class bf16, o written as bfloat16 (state and
 *                arithmetic float32): the bf16 zoo; input=f32 (default) is the fp32 zoo
 *   bug=decay0   a deliberate defect for the zoo's own test: key channel 0 never decays
 * Built twice: kda_plugin_zoo.so (-ffp-contract=off) and kda_plugin_zoo_fma.so (-mfma
 * -ffp-contract=fast, products and sums contracted into fused multiply-adds where the compiler
 * sees them; zoo_fma_entry.c refuses it on a CPU without FMA).  Includes only the plugin
 * headers, as any third-party plugin would.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"
#include "kda_backend_half.h"
#include "zoo.h"

enum { SUM_SEQ, SUM_REV, SUM_PAIR, SUM_BLOCK8, SUM_F64, SUM_PERM };
enum { FORM_SPEC, FORM_TEXTBOOK, FORM_FOLD, FORM_SPLIT, FORM_CHUNK };

typedef struct zorder {
  const char *name;
  int form, sum, exp_double, scale_out, chunk;
  int gates_double; /* chunked: in-chunk log-decay sums and their exp in double */
} zorder;

static const zorder orders[] = {
    /* name       form           sum         exp_double scale_out chunk gates_double */
    {"spec",     FORM_SPEC,     SUM_SEQ,    0, 0, 0,  0},
    {"crexp",    FORM_SPEC,     SUM_SEQ,    1, 0, 0,  0},
    {"textbook", FORM_TEXTBOOK, SUM_SEQ,    0, 0, 0,  0},
    {"numpy",    FORM_TEXTBOOK, SUM_PAIR,   0, 0, 0,  0},
    {"fold",     FORM_FOLD,     SUM_SEQ,    0, 0, 0,  0},
    {"split",    FORM_SPLIT,    SUM_SEQ,    0, 0, 0,  0},
    {"f64acc",   FORM_SPEC,     SUM_F64,    0, 0, 0,  0},
    {"rev",      FORM_SPEC,     SUM_REV,    0, 0, 0,  0},
    {"pairwise", FORM_SPEC,     SUM_PAIR,   0, 0, 0,  0},
    {"block8",   FORM_SPEC,     SUM_BLOCK8, 0, 0, 0,  0},
    {"scaleout", FORM_SPEC,     SUM_SEQ,    0, 1, 0,  0},
    {"chunk16",  FORM_CHUNK,    SUM_SEQ,    0, 0, 16, 0},
    {"chunk64",  FORM_CHUNK,    SUM_SEQ,    0, 0, 64, 0},
    {"chunk64d", FORM_CHUNK,    SUM_SEQ,    0, 0, 64, 1},
    {"perm",     FORM_SPEC,     SUM_PERM,   0, 0, 0,  0},
};
#define N_ORDERS ((int)(sizeof orders / sizeof orders[0]))

typedef struct zcfg {
  const zorder *ord;
  uint64_t seed;
  int32_t in, out; /* KDA_PRECISION_FP32 or _BF16 */
  int bug_decay0;
} zcfg;

typedef struct zhandle {
  zcfg cfg;
  char err[256];
} zhandle;

/* ---- Parameters. */
static int word_is(const char *s, size_t n, const char *w) {
  return strlen(w) == n && strncmp(s, w, n) == 0;
}

static int32_t zoo_parse(const char *params, zcfg *c, char *err, uint32_t errlen) {
  memset(c, 0, sizeof *c);
  c->ord = &orders[0], c->in = c->out = KDA_PRECISION_FP32;
  for (const char *s = params ? params : ""; *s;) {
    s += strspn(s, " ,");
    size_t n = strcspn(s, " ,");
    if (!n) break;
    int ok = 0;
    if (n > 6 && strncmp(s, "order=", 6) == 0) {
      for (int o = 0; o < N_ORDERS; o++)
        if (word_is(s + 6, n - 6, orders[o].name)) c->ord = &orders[o], ok = 1;
    } else if (n > 5 && n < 26 && strncmp(s, "seed=", 5) == 0) {
      char buf[24], *end;
      memcpy(buf, s + 5, n - 5), buf[n - 5] = 0;
      unsigned long long v = strtoull(buf, &end, 10);
      if (*end == 0 && buf[0] >= '0' && buf[0] <= '9') c->seed = v, ok = 1;
    } else if (word_is(s, n, "input=bf16")) {
      c->in = c->out = KDA_PRECISION_BF16, ok = 1;
    } else if (word_is(s, n, "input=f32")) {
      c->in = c->out = KDA_PRECISION_FP32, ok = 1;
    } else if (word_is(s, n, "bug=decay0")) {
      c->bug_decay0 = 1, ok = 1;
    }
    if (!ok) {
      if (errlen)
        snprintf(err, errlen, "bad parameter '%.*s' (order=NAME seed=N input=f32|bf16 bug=decay0)",
                 (int)(n > 64 ? 64 : n), s);
      return KDA_EINVAL;
    }
    s += n;
  }
  return KDA_OK;
}

ZOO_HIDDEN int32_t zoo_variant(const char *params, kda_backend_variant *out, char *err,
                               uint32_t errlen) {
  zcfg c;
  int32_t st = zoo_parse(params, &c, err, errlen);
  if (st != KDA_OK) return st;
  out->precision_class = c.in;
  out->input_dtype = c.in, out->output_dtype = c.out;
  return KDA_OK;
}

ZOO_HIDDEN int32_t zoo_open(const char *params, void **handle, char *err, uint32_t errlen) {
  zcfg c;
  int32_t st = zoo_parse(params, &c, err, errlen);
  if (st != KDA_OK) return st;
  zhandle *h = calloc(1, sizeof *h);
  if (!h) return KDA_ENOMEM;
  h->cfg = c;
  *handle = h;
  return KDA_OK;
}

ZOO_HIDDEN void zoo_close(void *h) { free(h); }
ZOO_HIDDEN const char *zoo_last_error(void *h) { return ((zhandle *)h)->err; }
ZOO_HIDDEN int32_t zoo_supports(void *h, const kda_problem *p, char *r, uint32_t n) {
  if (p->K > 1024 || p->V > 1024) return snprintf(r, n, "K or V above 1024"), KDA_EUNSUPPORTED;
  return KDA_OK;
}

/* ---- The random orders of order=perm: splitmix64 keyed by (seed, token, head, purpose). */
static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static void make_perm(int32_t *perm, int64_t K, uint64_t seed, int64_t t, int64_t hv, int what) {
  uint64_t s = mix64(seed ^ mix64((uint64_t)t * 4 + (uint64_t)what) ^ mix64(~(uint64_t)hv));
  for (int64_t i = 0; i < K; i++) perm[i] = (int32_t)i;
  for (int64_t i = K - 1; i > 0; i--) { /* Fisher-Yates */
    s = mix64(s);
    int64_t r = (int64_t)(s % (uint64_t)(i + 1));
    int32_t tmp = perm[i];
    perm[i] = perm[r], perm[r] = tmp;
  }
}

/* Work space of one (sequence, head). */
typedef struct zwork {
  int64_t K, V;
  float *S;      /* [K][V], row i = key channel i, whatever the layout of h0/ht/hc */
  float *tmp;    /* [K][V] products / partial sums */
  double *dacc;  /* [V] */
  int32_t *perm; /* [K] */
  float *qq, *kk, *a, *x, *p, *u; /* [K] [K] [K] [K] [V] [V] */
} zwork;

/* out[j] = sum_i S[i][j] x[i] in the member's order (every j in the same order). */
static void colsum(const zcfg *c, zwork *w, const float *S, const float *x, float *out) {
  const int64_t K = w->K, V = w->V;
  switch (c->ord->sum) {
    case SUM_SEQ:
    case SUM_REV:
    case SUM_PERM:
      for (int64_t j = 0; j < V; j++) out[j] = 0.0f;
      for (int64_t r = 0; r < K; r++) {
        const int64_t i = c->ord->sum == SUM_SEQ ? r : c->ord->sum == SUM_REV ? K - 1 - r
                                                                               : w->perm[r];
        for (int64_t j = 0; j < V; j++) out[j] += S[i * V + j] * x[i];
      }
      return;
    case SUM_F64:
      for (int64_t j = 0; j < V; j++) w->dacc[j] = 0.0;
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) w->dacc[j] += (double)S[i * V + j] * (double)x[i];
      for (int64_t j = 0; j < V; j++) out[j] = (float)w->dacc[j];
      return;
    case SUM_BLOCK8: {
      const int64_t L = K < 8 ? K : 8;
      for (int64_t l = 0; l < L; l++)
        for (int64_t j = 0; j < V; j++) w->tmp[l * V + j] = 0.0f;
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) w->tmp[(i % 8) * V + j] += S[i * V + j] * x[i];
      for (int64_t h = 1; h < L; h *= 2) /* ((l0 + l1) + (l2 + l3)) + ... */
        for (int64_t l = 0; l + h < L; l += 2 * h)
          for (int64_t j = 0; j < V; j++) w->tmp[l * V + j] += w->tmp[(l + h) * V + j];
      for (int64_t j = 0; j < V; j++) out[j] = w->tmp[j];
      return;
    }
    default: /* SUM_PAIR */
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) w->tmp[i * V + j] = S[i * V + j] * x[i];
      for (int64_t h = 1; h < K; h *= 2)
        for (int64_t i = 0; i + h < K; i += 2 * h)
          for (int64_t j = 0; j < V; j++) w->tmp[i * V + j] += w->tmp[(i + h) * V + j];
      for (int64_t j = 0; j < V; j++) out[j] = w->tmp[j];
  }
}

/* sum_i x[i]^2 in the member's order (perm set by the caller for SUM_PERM). */
static float sumsq(const zcfg *c, zwork *w, const float *x) {
  float r; /* x as a K x 1 matrix times x */
  colsum(c, &(zwork){.K = w->K, .V = 1, .tmp = w->tmp, .dacc = w->dacc, .perm = w->perm}, x, x,
         &r);
  return r;
}

/* ---- Scalar functions, float32 (expf ...) or computed in double and rounded once (crexp). */
static float zexp(const zcfg *c, float x) { return c->ord->exp_double ? (float)exp((double)x) : expf(x); }
static float zsigmoid(const zcfg *c, float y) {
  if (c->ord->exp_double) return (float)(1.0 / (1.0 + exp(-(double)y)));
  if (y >= 0.0f) return 1.0f / (1.0f + expf(-y));
  const float e = expf(y);
  return e / (1.0f + e);
}
static float zsoftplus(const zcfg *c, float y) {
  if (c->ord->exp_double) return (float)((y > 0.0f ? (double)y : 0.0) + log1p(exp(-fabs((double)y))));
  return (y > 0.0f ? y : 0.0f) + log1pf(expf(-fabsf(y)));
}

/* The float inputs of one call, widened to float32 (exact for bf16). */
typedef struct zin {
  float *q, *k, *v, *g, *beta;
  const float *A_log, *dt_bias, *h0;
} zin;

/* g_eff of (token tt, value head hv, gate channel ch), SPEC.md §4.1. */
static float gate_eff(const zcfg *c, const kda_problem *p, const zin *in, int64_t GW, int64_t tt,
                      int64_t hv, int64_t ch) {
  const float x = in->g[(tt * p->HV + hv) * GW + ch];
  if (p->gate_mode == KDA_GATE_LOG) return x;
  const float bias = in->dt_bias[hv * GW + ch];
  const float Al = p->has_A_log ? in->A_log[hv] : 0.0f;
  if (p->gate_mode == KDA_GATE_SOFTPLUS) return -(zexp(c, Al) * zsoftplus(c, x + bias));
  const float lb = (float)p->lower_bound;
  return p->has_A_log ? lb * zsigmoid(c, zexp(c, Al) * (x + bias)) : lb * zsigmoid(c, x + bias);
}

/* Log-decays of token tt into lg[K] (every channel; GDN broadcasts its one gate). */
static void log_decays(const zcfg *c, const kda_problem *p, const zin *in, int64_t tt, int64_t hv,
                       float *lg) {
  const int64_t K = p->K;
  if (p->family == KDA_FAMILY_DELTANET || p->family == KDA_FAMILY_LINEAR) {
    for (int64_t i = 0; i < K; i++) lg[i] = 0.0f;
    return;
  }
  const int64_t GW = p->family == KDA_FAMILY_KDA ? K : 1;
  for (int64_t i = 0; i < GW; i++) lg[i] = gate_eff(c, p, in, GW, tt, hv, i);
  for (int64_t i = GW; i < K; i++) lg[i] = lg[0];
  if (c->bug_decay0) lg[0] = 0.0f;
}

static float beta_eff(const zcfg *c, const kda_problem *p, const zin *in, int64_t tt, int64_t hv) {
  const float bs = in->beta[tt * p->HV + hv];
  return p->beta_mode == KDA_BETA_PROB ? bs
         : p->beta_mode == KDA_BETA_LOGIT ? zsigmoid(c, bs) : 2.0f * zsigmoid(c, bs);
}

/* y = scale_q * L2(x) (SPEC.md §4.3, §4.5); what = 0 for q, 1 for k (the permutation). */
static void normalise(const zcfg *c, const kda_problem *p, zwork *w, const float *x, float sc,
                      float *y, int64_t tt, int64_t hv, int what) {
  const int64_t K = p->K;
  if (p->l2_mode == KDA_L2_OFF) {
    for (int64_t i = 0; i < K; i++) y[i] = sc * x[i];
    return;
  }
  if (c->ord->sum == SUM_PERM) make_perm(w->perm, K, c->seed, tt, hv, 2 + what);
  const float eps = (float)p->l2_eps, ss = sumsq(c, w, x);
  const float d = p->l2_mode == KDA_L2_FLA ? sqrtf(ss + eps) : fmaxf(sqrtf(ss), eps);
  if (c->ord->scale_out) {
    const float r = 1.0f / d;
    for (int64_t i = 0; i < K; i++) y[i] = x[i] * r;
  } else {
    for (int64_t i = 0; i < K; i++) y[i] = sc * (x[i] / d);
  }
}

/* q-hat and k-hat of token tt for value head hv. */
static void prepare_qk(const zcfg *c, const kda_problem *p, const zin *in, zwork *w, int64_t tt,
                       int64_t hv) {
  const int64_t K = p->K, G = p->HV / p->H;
  const int64_t h = p->head_map == KDA_HEADMAP_DIV ? hv / G : hv % p->H;
  normalise(c, p, w, in->q + (tt * p->H + h) * K, c->ord->scale_out ? 1.0f : (float)p->scale,
            w->qq, tt, hv, 0);
  normalise(c, p, w, in->k + (tt * p->H + h) * K, 1.0f, w->kk, tt, hv, 1);
}

/* o_t = S^T q-hat (times scale for scaleout), written as float into o. */
static void readout(const zcfg *c, const kda_problem *p, zwork *w, int64_t tt, int64_t hv, float *o) {
  if (c->ord->sum == SUM_PERM) make_perm(w->perm, w->K, c->seed, tt, hv, 1);
  colsum(c, w, w->S, w->qq, o);
  if (c->ord->scale_out)
    for (int64_t j = 0; j < w->V; j++) o[j] = (float)p->scale * o[j];
}

/* One token of the recurrent forms (SPEC.md §3.1 in the member's order). */
static void step(const zcfg *c, const kda_problem *p, const zin *in, zwork *w, int64_t tt,
                 int64_t hv, float *o) {
  const int64_t K = w->K, V = w->V;
  float *S = w->S;
  const int erase = p->family != KDA_FAMILY_LINEAR;
  const int form = c->ord->form;
  prepare_qk(c, p, in, w, tt, hv);
  const float b = beta_eff(c, p, in, tt, hv);
  const float *v = in->v + (tt * p->HV + hv) * V;
  log_decays(c, p, in, tt, hv, w->a);
  for (int64_t i = 0; i < K; i++) w->a[i] = zexp(c, w->a[i]);
  if (c->ord->sum == SUM_PERM) make_perm(w->perm, K, c->seed, tt, hv, 0);
  if (form == FORM_FOLD) { /* p = S_old^T (a o k), then decay and write in one pass */
    for (int64_t i = 0; i < K; i++) w->x[i] = w->a[i] * w->kk[i];
    if (erase) colsum(c, w, S, w->x, w->p);
    else
      for (int64_t j = 0; j < V; j++) w->p[j] = 0.0f;
    for (int64_t j = 0; j < V; j++) w->u[j] = b * (v[j] - w->p[j]);
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) S[i * V + j] = w->a[i] * S[i * V + j] + w->kk[i] * w->u[j];
  } else {
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) S[i * V + j] = w->a[i] * S[i * V + j];
    if (erase) colsum(c, w, S, w->kk, w->p);
    else
      for (int64_t j = 0; j < V; j++) w->p[j] = 0.0f;
    if (form == FORM_SPEC) {
      for (int64_t j = 0; j < V; j++) w->u[j] = b * (v[j] - w->p[j]);
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) S[i * V + j] += w->kk[i] * w->u[j];
    } else {
      for (int64_t i = 0; i < K; i++) w->x[i] = b * w->kk[i];
      if (form == FORM_TEXTBOOK) {
        for (int64_t i = 0; i < K; i++)
          for (int64_t j = 0; j < V; j++) S[i * V + j] += w->x[i] * (v[j] - w->p[j]);
      } else { /* FORM_SPLIT */
        for (int64_t i = 0; i < K; i++)
          for (int64_t j = 0; j < V; j++) S[i * V + j] -= w->x[i] * w->p[j];
        for (int64_t i = 0; i < K; i++)
          for (int64_t j = 0; j < V; j++) S[i * V + j] += w->x[i] * v[j];
      }
    }
  }
  readout(c, p, w, tt, hv, o);
}

/* ---- The chunked WY/UT form.  Chunk work space, C tokens at most. */
typedef struct zchunk {
  int64_t C;
  float *qq, *kk, *vb, *b; /* [C][K] [C][K] [C][V] [C] */
  double *G;               /* [C][K] in-chunk cumulative log-decays (float32 sums but for
                              chunk64d) */
  float *A, *Tm;               /* [C][C]: A_ts (then b_t A_ts), the inverse (I + L)^-1 */
  float *Aq;                   /* [C][C]: q_t . (k_s o exp(G_t - G_s)) */
  float *Wk, *W;               /* [C][K] T (b exp(G) k), [C][V] w */
} zchunk;

/* exp(Gt - Gs) of one channel: the float32 difference of float32 sums (fla's order), or for
 * chunk64d the double difference of double sums, its exp rounded once. */
static float ratio(const zcfg *c, double Gt, double Gs) {
  return c->ord->gates_double ? (float)exp(Gt - Gs) : zexp(c, (float)Gt - (float)Gs);
}

/* Dot of two K-vectors weighted by exp(Gt - Gs), index order. */
static float wdot(const zcfg *c, int64_t K, const float *x, const float *y, const double *Gt,
                  const double *Gs) {
  float s = 0.0f;
  for (int64_t i = 0; i < K; i++) s += x[i] * (y[i] * ratio(c, Gt[i], Gs[i]));
  return s;
}

/* The state after chunk token t: S[i][j] = exp(G_t,i) S0[i][j] + sum_{s<=t}
 * exp(G_t,i - G_s,i) k_s,i w_s,j, into dst (S0 is w->S, not changed). */
static void chunk_state(const zcfg *c, zwork *w, const zchunk *z, int64_t t, float *dst) {
  const int64_t K = w->K, V = w->V;
  for (int64_t i = 0; i < K; i++) {
    const float e = ratio(c, z->G[t * K + i], 0.0);
    for (int64_t j = 0; j < V; j++) dst[i * V + j] = e * w->S[i * V + j];
    for (int64_t s = 0; s <= t; s++) {
      const float f = z->kk[s * K + i] * ratio(c, z->G[t * K + i], z->G[s * K + i]);
      for (int64_t j = 0; j < V; j++) dst[i * V + j] += f * z->W[s * V + j];
    }
  }
}

/* Runs chunk tokens [t0, t0 + C): S0 = w->S on entry (before token t0's decay), the state
 * after the last token on return; o rows written; checkpoints via emit. */
typedef void (*emit_fn)(void *ctx, int64_t tt, const float *S);
static void run_chunk(const zcfg *c, const kda_problem *p, const zin *in, zwork *w, zchunk *z,
                      int64_t t0, int64_t C, int64_t hv, float *orows, emit_fn emit, void *ctx) {
  const int64_t K = w->K, V = w->V;
  const int erase = p->family != KDA_FAMILY_LINEAR;
  float *S = w->S;
  for (int64_t t = 0; t < C; t++) {
    prepare_qk(c, p, in, w, t0 + t, hv);
    memcpy(z->qq + t * K, w->qq, (size_t)K * sizeof(float));
    memcpy(z->kk + t * K, w->kk, (size_t)K * sizeof(float));
    z->b[t] = beta_eff(c, p, in, t0 + t, hv);
    const float *v = in->v + ((t0 + t) * p->HV + hv) * V;
    for (int64_t j = 0; j < V; j++) z->vb[t * V + j] = z->b[t] * v[j];
    log_decays(c, p, in, t0 + t, hv, w->a);
    if (t == 0) { /* the first token's decay applies to S0; G counts from it */
      for (int64_t i = 0; i < K; i++) {
        const float a = zexp(c, w->a[i]);
        for (int64_t j = 0; j < V; j++) S[i * V + j] = a * S[i * V + j];
        z->G[i] = 0.0f;
      }
    } else {
      for (int64_t i = 0; i < K; i++)
        z->G[t * K + i] = c->ord->gates_double ? z->G[(t - 1) * K + i] + (double)w->a[i]
                                               : (double)((float)z->G[(t - 1) * K + i] + w->a[i]);
    }
  }
  /* A (strictly lower, times b_t) and its UT inverse by forward substitution. */
  for (int64_t t = 0; t < C; t++) {
    for (int64_t s = 0; s < t; s++)
      z->A[t * C + s] = erase ? z->b[t] * wdot(c, K, z->kk + t * K, z->kk + s * K, z->G + t * K,
                                               z->G + s * K)
                              : 0.0f;
    for (int64_t s = 0; s <= t; s++) z->Aq[t * C + s] = wdot(c, K, z->qq + t * K, z->kk + s * K,
                                                              z->G + t * K, z->G + s * K);
  }
  for (int64_t t = 0; t < C; t++) {
    z->Tm[t * C + t] = 1.0f;
    for (int64_t s = 0; s < t; s++) {
      float acc = 0.0f;
      for (int64_t r = s; r < t; r++) acc += z->A[t * C + r] * z->Tm[r * C + s];
      z->Tm[t * C + s] = -acc;
    }
  }
  /* w = T (b v) - T (b exp(G) k) S0. */
  for (int64_t t = 0; t < C; t++) {
    float *Wt = z->W + t * V, *Wkt = z->Wk + t * K;
    for (int64_t j = 0; j < V; j++) Wt[j] = 0.0f;
    for (int64_t i = 0; i < K; i++) Wkt[i] = 0.0f;
    for (int64_t s = 0; s <= t; s++) {
      const float T = z->Tm[t * C + s];
      for (int64_t j = 0; j < V; j++) Wt[j] += T * z->vb[s * V + j];
      for (int64_t i = 0; erase && i < K; i++)
        Wkt[i] += T * (z->b[s] * (ratio(c, z->G[s * K + i], 0.0) * z->kk[s * K + i]));
    }
    if (erase) {
      colsum(c, w, S, Wkt, w->p);
      for (int64_t j = 0; j < V; j++) Wt[j] -= w->p[j];
    }
  }
  /* o_t = S0^T (exp(G_t) o q_t) + sum_{s<=t} Aq_ts w_s. */
  for (int64_t t = 0; t < C; t++) {
    for (int64_t i = 0; i < K; i++) w->x[i] = ratio(c, z->G[t * K + i], 0.0) * z->qq[t * K + i];
    float *o = orows + t * p->HV * V;
    colsum(c, w, S, w->x, o);
    for (int64_t s = 0; s <= t; s++)
      for (int64_t j = 0; j < V; j++) o[j] += z->Aq[t * C + s] * z->W[s * V + j];
    if (emit) emit(ctx, t0 + t, NULL);
  }
  chunk_state(c, w, z, C - 1, w->tmp);
  memcpy(S, w->tmp, (size_t)(K * V) * sizeof(float));
}

/* ---- Driver. */
typedef struct zcall {
  const zcfg *cfg;
  const kda_problem *p;
  const zin *in;
  const kda_backend_tensors *t;
  zwork *w;
  zchunk *z;
  float *o; /* [T, HV, V] float, narrowed to the output type at the end */
  int64_t hv, ck, t0_chunk;
} zcall;

static size_t st_at(const kda_problem *p, int64_t i, int64_t j) {
  return p->state_layout == KDA_STATE_VK ? (size_t)(j * p->K + i) : (size_t)(i * p->V + j);
}

static void store_state(const kda_problem *p, const float *S, float *dst) {
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++) dst[st_at(p, i, j)] = S[i * p->V + j];
}

/* A checkpoint at token tt (state S, or NULL in a chunk: computed from the chunk's parts). */
static void emit_checkpoint(void *ctx, int64_t tt, const float *S) {
  zcall *a = ctx;
  const kda_problem *p = a->p;
  if (a->ck >= p->n_checkpoints || a->t->checkpoints[a->ck] != tt) return;
  float *hc = (float *)a->t->hc + (size_t)(a->ck * p->HV + a->hv) * (size_t)(p->K * p->V);
  if (!S) {
    float *buf = a->w->tmp + 0; /* tmp is free between chunk phases */
    chunk_state(a->cfg, a->w, a->z, tt - a->t0_chunk, buf);
    S = buf;
  }
  store_state(p, S, hc);
  a->ck++;
}

/* Whether token tt has a gate whose decay is exactly zero (a wipe): a chunk starts there. */
static int wipes(const zcfg *c, const kda_problem *p, const zin *in, int64_t tt, int64_t hv,
                 float *lg) {
  log_decays(c, p, in, tt, hv, lg);
  for (int64_t i = 0; i < p->K; i++)
    if (zexp(c, lg[i]) == 0.0f) return 1;
  return 0;
}

static void run_head(zcall *a, int64_t n) {
  const kda_problem *p = a->p;
  const zcfg *c = a->cfg;
  zwork *w = a->w;
  const int64_t K = p->K, V = p->V, kv = K * V;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++)
      w->S[i * V + j] = p->has_initial_state
                            ? a->in->h0[(size_t)(n * p->HV + a->hv) * (size_t)kv + st_at(p, i, j)]
                            : 0.0f;
  const int64_t bos = a->t->cu_seqlens[n], eos = a->t->cu_seqlens[n + 1];
  if (c->ord->form == FORM_CHUNK) {
    for (int64_t t0 = bos; t0 < eos;) {
      int64_t C = 1;
      while (t0 + C < eos && (t0 + C - bos) % c->ord->chunk != 0 &&
             !wipes(c, p, a->in, t0 + C, a->hv, w->x))
        C++;
      a->t0_chunk = t0;
      run_chunk(c, p, a->in, w, a->z, t0, C, a->hv, a->o + (t0 * p->HV + a->hv) * V,
                p->n_checkpoints ? emit_checkpoint : NULL, a);
      t0 += C;
    }
  } else {
    for (int64_t tt = bos; tt < eos; tt++) {
      step(c, p, a->in, w, tt, a->hv, a->o + (tt * p->HV + a->hv) * V);
      if (p->n_checkpoints) emit_checkpoint(a, tt, w->S);
    }
  }
  if (p->want_final_state)
    store_state(p, w->S, (float *)a->t->ht + (size_t)(n * p->HV + a->hv) * (size_t)kv);
}

static float *widen(int32_t dt, const void *src, size_t n, int *bad) {
  if (!src) return NULL;
  float *d = malloc((n ? n : 1) * sizeof *d);
  if (!d) return *bad = 1, NULL;
  for (size_t i = 0; i < n; i++)
    d[i] = dt == KDA_PRECISION_BF16 ? kda_bf16_to_float(((const uint16_t *)src)[i])
                                    : ((const float *)src)[i];
  return d;
}

ZOO_HIDDEN int32_t zoo_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  zhandle *h = handle;
  const zcfg *c = &h->cfg;
  if (t->in_dtype != c->in || t->out_dtype != c->out)
    return snprintf(h->err, sizeof h->err, "buffers of types %d / %d, opened for %d / %d",
                    (int)t->in_dtype, (int)t->out_dtype, (int)c->in, (int)c->out),
           KDA_EINVAL;
  if (KDA_TENSORS_HAS_POOL(t) && t->state_indices)
    return snprintf(h->err, sizeof h->err, "no state pools"), KDA_EUNSUPPORTED;
  const int64_t K = p->K, V = p->V, GW = p->family == KDA_FAMILY_KDA ? K : p->family == KDA_FAMILY_GDN ? 1 : 0;
  const size_t T = (size_t)p->T, nv = T * (size_t)(p->HV * V);
  const int64_t C = c->ord->form == FORM_CHUNK ? c->ord->chunk : 0;
  int bad = 0;
  zin in = {widen(c->in, t->q, T * (size_t)(p->H * K), &bad),
            widen(c->in, t->k, T * (size_t)(p->H * K), &bad),
            widen(c->in, t->v, nv, &bad),
            widen(c->in, t->g, T * (size_t)(p->HV * GW), &bad),
            widen(c->in, t->beta, T * (size_t)p->HV, &bad),
            t->A_log, t->dt_bias, t->h0};
  const size_t nwork = (size_t)(2 * K * V + 4 * K + 2 * V + 8 * V) +
                       (size_t)(C * (3 * K + V + 1) + 3 * C * C + C * K + C * V);
  float *f = calloc(nwork ? nwork : 1, sizeof *f);
  double *dacc = malloc((size_t)(V > K ? V : K) * sizeof *dacc + 8);
  double *Gd = malloc((size_t)(C * K) * sizeof *Gd + 8);
  int32_t *perm = malloc((size_t)K * sizeof *perm + 4);
  float *o = malloc((nv ? nv : 1) * sizeof *o);
  int32_t rc = KDA_OK;
  if (bad || !f || !dacc || !Gd || !perm || !o) {
    snprintf(h->err, sizeof h->err, "out of memory");
    rc = KDA_ENOMEM;
  } else {
    float *q = f;
    zwork w = {K, V, q, q + K * V + 8 * V, dacc, perm, 0, 0, 0, 0, 0, 0};
    /* tmp needs max(K, 8) rows of V for the block sums */
    q += 2 * K * V + 8 * V;
    w.qq = q, w.kk = q + K, w.a = q + 2 * K, w.x = q + 3 * K, w.p = q + 4 * K,
    w.u = q + 4 * K + V;
    q += 4 * K + 2 * V;
    zchunk z = {C, q, q + C * K, q + 2 * C * K, q + 2 * C * K + C * V, Gd, NULL, NULL, NULL, NULL,
                NULL};
    q += C * (2 * K + V + 1);
    z.A = q, z.Tm = q + C * C, z.Aq = q + 2 * C * C, z.Wk = q + 3 * C * C,
    z.W = q + 3 * C * C + C * K;
    zcall a = {c, p, &in, t, &w, &z, o, 0, 0, 0};
    int64_t c0 = 0;
    for (int64_t n = 0; n < p->N; n++) {
      while (c0 < p->n_checkpoints && t->checkpoints[c0] < t->cu_seqlens[n]) c0++;
      for (int64_t hv = 0; hv < p->HV; hv++) {
        a.hv = hv, a.ck = c0;
        run_head(&a, n);
      }
    }
    for (size_t e = 0; e < nv; e++) {
      if (c->out == KDA_PRECISION_BF16) ((uint16_t *)t->o)[e] = kda_bf16_from_float(o[e]);
      else ((float *)t->o)[e] = o[e];
    }
  }
  free(in.q), free(in.k), free(in.v), free(in.g), free(in.beta);
  free(f), free(dacc), free(Gd), free(perm), free(o);
  return rc;
}

#ifndef ZOO_FMA
static const kda_backend zoo_table = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "zoo",
    .description = "test: honest float32 KDA in another evaluation order (order=NAME seed=N)",
    .precision_class = KDA_PRECISION_FP32,
    .input_dtype = KDA_PRECISION_FP32,
    .output_dtype = KDA_PRECISION_FP32,
    .open = zoo_open,
    .close = zoo_close,
    .supports = zoo_supports,
    .forward = zoo_forward,
    .last_error = zoo_last_error,
    .variant = zoo_variant,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return abi_version >= 2 ? &zoo_table : NULL;
}
#endif

/* kda_grad.c: gradient cases (SPEC.md §13.7): their seeds and truth (golden gradient members or
 * ref-f64's backward), the magnitude of each element's group, ref-f32's envelope, and the
 * scoring of a backend's gradients in class units.
 * SPDX-License-Identifier: MIT
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backward.h"
#include "kda_conform.h"
#include "kda_golden_check.h"
#include "kda_npz.h"
#include "kda_ref.h"
#include "kda_score_internal.h"

static const char *const grad_names[KDA_GRAD_COUNT] = {"dq", "dk", "dv", "dg", "dbeta",
                                                       "dA_log", "ddt_bias", "dh0"};
static const char *const seed_names[3] = {"do", "dht", "dhc"};

const char *kda_grad_name(int b) { return b >= 0 && b < KDA_GRAD_COUNT ? grad_names[b] : "?"; }

/* ---- Shapes (SPEC.md §13.1): gradient b (0 .. 7) has its input's shape; seed s (8 + s)
 * the shape of o, ht or hc. */
static int grad_shape(const kda_problem *p, int b, int64_t *shape) {
  const int64_t GW = kda_problem_gate_width(p), vk = p->state_layout == KDA_STATE_VK;
  const int64_t S0 = vk ? p->V : p->K, S1 = vk ? p->K : p->V;
  switch (b) {
    case 0: case 1: return shape[0] = p->T, shape[1] = p->H, shape[2] = p->K, 3;
    case 2: case 8: return shape[0] = p->T, shape[1] = p->HV, shape[2] = p->V, 3;
    case 3: return shape[0] = p->T, shape[1] = p->HV, shape[2] = GW, 3;
    case 4: return shape[0] = p->T, shape[1] = p->HV, 2;
    case 5: return shape[0] = p->HV, 1;
    case 6: return shape[0] = p->HV, shape[1] = GW, 2;
    case 7: case 9: case 10: {
      shape[0] = b == 10 ? p->n_checkpoints : p->N;
      return shape[1] = p->HV, shape[2] = S0, shape[3] = S1, 4;
    }
    default: return 0;
  }
}

static uint64_t shape_count(const int64_t *shape, int nd) {
  uint64_t n = 1;
  for (int i = 0; i < nd; i++) n *= (uint64_t)shape[i];
  return n;
}

uint32_t kda_grad_problem(const kda_problem *p) {
  uint32_t m = KDA_GRAD_Q | KDA_GRAD_K | KDA_GRAD_V | KDA_GRAD_BETA;
  if (kda_problem_gate_width(p) > 0) m |= KDA_GRAD_G;
  if (kda_problem_uses_A_log(p)) m |= KDA_GRAD_A_LOG;
  if (kda_problem_uses_dt_bias(p)) m |= KDA_GRAD_DT_BIAS;
  if (p->has_initial_state) m |= KDA_GRAD_H0;
  return p->T > 0 ? m : m & KDA_GRAD_H0;
}

/* Member name of z, read whole as float64 into dst after its dtype (<f4, <f8) and exact shape
 * (b's) are checked; finite values only when finite is set.  Errors name the file. */
static int member_read(kda_npz *z, const kda_problem *p, const char *name, int b, int finite,
                       double *dst, char *err, size_t errlen) {
  const char *path = kda_npz_path(z);
  int64_t shape[4];
  const int nd = grad_shape(p, b, shape);
  kda_array_info info;
  int st = kda_npz_info(z, name, &info, err, errlen);
  if (st == KDA_ENOTFOUND)
    return snprintf(err, errlen, "%s: missing member '%s'", path, name), KDA_ENOTFOUND;
  if (st != KDA_OK) return st;
  if (info.dtype != KDA_DTYPE_F64 && info.dtype != KDA_DTYPE_F32)
    return snprintf(err, errlen, "%s: member '%s' has dtype '%s', expected '<f4' or '<f8'", path,
                    name, kda_dtype_descr(info.dtype)), KDA_EDTYPE;
  int same = info.ndim == nd;
  for (int i = 0; same && i < nd; i++) same = info.shape[i] == shape[i];
  if (!same)
    return snprintf(err, errlen, "%s: member '%s' does not have the shape of its tensor "
                    "(SPEC.md 13.1)", path, name), KDA_ESHAPE;
  const uint64_t n = shape_count(shape, nd);
  st = kda_npz_read(z, name, KDA_DTYPE_F64, dst, n, err, errlen);
  for (uint64_t i = 0; st == KDA_OK && finite && i < n; i++)
    if (!isfinite(dst[i]))
      return snprintf(err, errlen, "%s: member '%s' holds a non-finite value at %llu", path, name,
                      (unsigned long long)i), KDA_ENONFINITE;
  return st;
}

static double *alloc_n(uint64_t n) { return malloc((size_t)(n ? n : 1) * sizeof(double)); }

/* The seeds: from the file's members, or copied from seeds. */
static int read_seeds(const kda_case *c, kda_npz *z, const kda_grad_seeds *seeds,
                      kda_grad_truth *g, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  const int want[3] = {1, p->want_final_state != 0, p->n_checkpoints > 0};
  const double *given[3] = {seeds ? seeds->dout : NULL, seeds ? seeds->dht : NULL,
                            seeds ? seeds->dhc : NULL};
  double **dst[3] = {&g->dout, &g->dht, &g->dhc};
  for (int s = 0; s < 3; s++) {
    if (!want[s]) continue;
    int64_t shape[4];
    const uint64_t n = shape_count(shape, grad_shape(p, 8 + s, shape));
    if (!(*dst[s] = alloc_n(n))) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
    if (z && kda_npz_has(z, seed_names[s])) {
      int st = member_read(z, p, seed_names[s], 8 + s, 1, *dst[s], err, errlen);
      if (st != KDA_OK) return st;
    } else if (!z && given[s]) {
      memcpy(*dst[s], given[s], (size_t)n * sizeof(double));
    } else {
      memset(*dst[s], 0, (size_t)n * sizeof(double)); /* an absent seed is zero (§13.1) */
    }
  }
  return KDA_OK;
}

/* The truth: every golden gradient member of z (hashes verified), else ref-f64's backward. */
static int read_truth(const kda_case *c, kda_npz *z, kda_grad_truth *g, char *err,
                      size_t errlen) {
  const kda_problem *p = &c->p;
  int golden = 0;
  for (int b = 0; b < KDA_GRAD_COUNT; b++) {
    int64_t shape[4];
    g->n[b] = (g->has >> b & 1u) ? shape_count(shape, grad_shape(p, b, shape)) : 0;
    if ((g->has >> b & 1u) && !(g->d[b] = alloc_n(g->n[b])))
      return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
    golden += z && (g->has >> b & 1u) && kda_npz_has(z, grad_names[b]);
  }
  if (golden) {
    char msg[KDA_ERRLEN];
    if (kda_golden_check_members_open(z, msg, sizeof msg) != KDA_OK)
      return snprintf(err, errlen, "golden gradients not verified: %s", msg), KDA_EFORMAT;
    for (int b = 0; b < KDA_GRAD_COUNT; b++)
      if (g->has >> b & 1u) {
        int st = member_read(z, p, grad_names[b], b, 0, g->d[b], err, errlen);
        if (st != KDA_OK) return st;
      }
    return g->from_golden = 1, KDA_OK;
  }
  kda_tensors_f64 t;
  kda_case_tensors(c, &t);
  t.o = t.ht = t.hc = NULL;
  const kda_grads_f64 d = {g->dout, g->dht, g->dhc, g->d[0], g->d[1], g->d[2], g->d[3],
                           g->d[4], g->d[5], g->d[6], g->d[7]};
  return kda_ref_backward_f64(p, &t, &d, err, errlen);
}

/* ---- Groups (SPEC.md §13.7): element e of gradient b belongs to one group, whose magnitude
 * scales its error.  Token rows: (64-token window, head); dh0: (sequence, head); dA_log and
 * ddt_bias: the element itself. */
typedef struct grad_geom {
  int64_t row;   /* elements per token and head (K, V, GW or 1); 0 for the non-token gradients */
  int64_t heads; /* H for dq, dk; HV otherwise */
} grad_geom;

static grad_geom geom(const kda_problem *p, int b) {
  const int64_t rows[5] = {p->K, p->K, p->V, kda_problem_gate_width(p), 1};
  grad_geom g = {b < 5 ? rows[b] : 0, b < 2 ? p->H : p->HV};
  return g;
}

static int64_t n_windows(const kda_problem *p) {
  return (p->T + KDA_GRAD_WINDOW - 1) / KDA_GRAD_WINDOW;
}

static int64_t n_groups(const kda_problem *p, int b, uint64_t n) {
  const grad_geom q = geom(p, b);
  if (q.row) return n_windows(p) * q.heads;
  return b == 7 ? p->N * p->HV : (int64_t)n;
}

/* The group of element e, and its token (-1 for the non-token gradients). */
static int64_t group_of(const kda_problem *p, int b, uint64_t e, int64_t *t) {
  const grad_geom q = geom(p, b);
  *t = -1;
  if (!q.row) return b == 7 ? (int64_t)(e / (uint64_t)(p->K * p->V)) : (int64_t)e;
  const int64_t r = (int64_t)(e / (uint64_t)q.row);
  *t = r / q.heads;
  return (*t / KDA_GRAD_WINDOW) * q.heads + r % q.heads;
}

/* |d g_eff / d A_log| / |d g_eff / d g| at gate input x = g + dt_bias (§13.3): the factor that
 * turns |dg| into the absolute term of dA_log: softplus(x) / sigmoid(x) (softplus), |x|
 * (lower_bound). */
static double alog_factor(const kda_problem *p, double x) {
  if (p->gate_mode == KDA_GATE_LOWER_BOUND) return fabs(x);
  const double sp = fmax(x, 0) + log1p(exp(-fabs(x)));
  const double sg = x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
  return sg > 0 ? sp / sg : 1.0;
}

/* M of each group: the largest |x| (token rows, dh0), or the sum of the absolute terms from the
 * truth's dg (ddt_bias: Sum_t |dg|; dA_log: Sum_{t,c} |dg| times alog_factor). */
static int magnitudes(const kda_case *c, kda_grad_truth *g, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  const int64_t GW = kda_problem_gate_width(p);
  for (int b = 0; b < KDA_GRAD_COUNT; b++) {
    if (!g->d[b]) continue;
    const int64_t ng = n_groups(p, b, g->n[b]);
    if (!(g->mag[b] = calloc((size_t)ng + 1, sizeof(double))))
      return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
    if (b == 5 || b == 6) continue;
    for (uint64_t e = 0; e < g->n[b]; e++) {
      int64_t t, k = group_of(p, b, e, &t);
      g->mag[b][k] = fmax(g->mag[b][k], fabs(g->d[b][e]));
    }
  }
  for (int64_t t = 0; g->d[3] && t < p->T; t++)
    for (int64_t hv = 0; hv < p->HV; hv++)
      for (int64_t ch = 0; ch < GW; ch++) {
        const double dg = fabs(g->d[3][(t * p->HV + hv) * GW + ch]);
        if (g->mag[6]) g->mag[6][hv * GW + ch] += dg;
        if (g->mag[5])
          g->mag[5][hv] += dg * alog_factor(p, c->g[(t * p->HV + hv) * GW + ch] +
                                                   c->dt_bias[hv * GW + ch]);
      }
  return KDA_OK;
}

/* ---- Errors of one element and of a whole gradient (SPEC.md §13.7). */
static double elem_err(double obs, double exact, double scale) {
  if (!isfinite(obs) && isfinite(exact)) return INFINITY;
  return fabs(obs - exact) / scale;
}

static double group_scale(const kda_grad_truth *g, int b, int64_t k, double u, double tiny) {
  return fmax(u * g->mag[b][k], tiny);
}

/* One float32 evaluation's worst error of each group into g->env[b] (an element it could not
 * compute, a non-finite value, widens nothing: such an evaluation bounds nothing there). */
static void eval_errors(const kda_problem *p, kda_grad_truth *g, int b, const float *obs) {
  const double u = kda_class_unit(KDA_PRECISION_FP32), tiny = kda_class_tiny(KDA_PRECISION_FP32);
  double *e = g->env[b];
  for (uint64_t i = 0; i < g->n[b]; i++) {
    int64_t t, k = group_of(p, b, i, &t);
    if (isfinite(obs[i]) || !isfinite(g->d[b][i]))
      e[k] = fmax(e[k], elem_err((double)obs[i], g->d[b][i], group_scale(g, b, k, u, tiny)));
  }
}

/* The token rows' running maximum over the windows of each head from the last: a window's
 * envelope is the largest of its own, the one before it and every later one (the adjoint runs
 * from the end). */
static void envelope_run(const kda_problem *p, kda_grad_truth *g, int b) {
  const grad_geom q = geom(p, b);
  if (!q.row) return;
  double *e = g->env[b];
  const int64_t nw = n_windows(p);
  for (int64_t h = 0; h < q.heads; h++) {
    double run = 0;
    for (int64_t w = nw - 1; w >= 0; w--) {
      const double own = e[w * q.heads + h], prev = w > 0 ? e[(w - 1) * q.heads + h] : 0;
      run = fmax(run, fmax(own, prev));
      e[w * q.heads + h] = run;
    }
  }
}

/* Float copies of the case's inputs and seeds (f[0..10]: q k v g beta A_log dt_bias h0 do dht
 * dhc) and room for the gradients (f[11..18]); NULL where absent. */
typedef struct f32_call {
  float *f[11 + KDA_GRAD_COUNT];
} f32_call;

static int f32_alloc(const kda_case *c, const kda_grad_truth *g, f32_call *x, char *err,
                     size_t errlen) {
  kda_problem_sizes sz;
  memset(x, 0, sizeof *x);
  int st = kda_problem_sizes_get(&c->p, &sz, err, errlen);
  if (st != KDA_OK) return st;
  const double *in64[11] = {c->q, c->k, c->v, c->g, c->beta, c->A_log, c->dt_bias, c->h0,
                            g->dout, g->dht, g->dhc};
  const uint64_t n_in[11] = {sz.q, sz.k, sz.v, sz.g, sz.beta, sz.A_log, sz.dt_bias, sz.h0,
                             sz.o, sz.ht, sz.hc};
  for (int i = 0; i < 11 + KDA_GRAD_COUNT; i++) {
    const double *src = i < 11 ? in64[i] : g->d[i - 11];
    const uint64_t n = i < 11 ? n_in[i] : g->n[i - 11];
    if (!src) continue;
    if (!(x->f[i] = malloc((size_t)(n + 1) * sizeof(float))))
      return snprintf(err, errlen, "out of memory for ref-f32's backward"), KDA_ENOMEM;
    for (uint64_t e = 0; i < 11 && e < n; e++) x->f[i][e] = (float)src[e];
  }
  return KDA_OK;
}

static void f32_free(f32_call *x) {
  for (int i = 0; i < 11 + KDA_GRAD_COUNT; i++) free(x->f[i]), x->f[i] = NULL;
}

static int f32_backward(const kda_case *c, const kda_problem *p, f32_call *x, char *err,
                        size_t errlen) {
  float **f = x->f;
  const kda_tensors_f32 t = {f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], c->cu_seqlens,
                             c->checkpoints, NULL, NULL, NULL};
  const kda_grads_f32 d = {f[8], f[9], f[10], f[11], f[12], f[13], f[14], f[15], f[16],
                           f[17], f[18]};
  return kda_ref_backward_f32(p, &t, &d, err, errlen);
}

/* d g_eff / d x and d g_eff / d A_log in float at the stored gate input (SPEC.md §13.3). */
static void gate_chain32(const kda_problem *p, float x, float b, float A_log, float *dx,
                         float *dA) {
  const float E = p->has_A_log ? expf(A_log) : 1.0f, z = x + b;
  if (p->gate_mode == KDA_GATE_SOFTPLUS) {
    const float sg = 1.0f / (1.0f + expf(-z)), sp = fmaxf(z, 0) + log1pf(expf(-fabsf(z)));
    *dx = -E * sg, *dA = -E * sp;
    return;
  }
  const float u = E * z, sg = 1.0f / (1.0f + expf(-u));
  *dx = (float)p->lower_bound * sg * (1.0f - sg) * E;
  *dA = p->has_A_log ? (float)p->lower_bound * sg * (1.0f - sg) * u : 0.0f;
}

/* The chunked member of the honest spread (SPEC.md §7.3's odd members, on gradients): decays
 * from the float32 prefix sums G of the log-decays within 64-token chunks of each sequence,
 * exp(G_t - G_{t-1}), as fla's chunked kernels form them.  It is ref-f32's backward on the
 * problem with the log gate g' = G_t - G_{t-1} (the same decays), its dg' then taken through
 * the stored gate's chain rule in float. */
static int chunk_member(const kda_case *c, f32_call *x, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  const int64_t GW = kda_problem_gate_width(p);
  float *g0 = x->f[3], *gp = malloc((size_t)(p->T * p->HV * GW + 1) * sizeof(float));
  if (!gp) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  for (int64_t n = 0; n < p->N; n++)
    for (int64_t hv = 0; hv < p->HV; hv++)
      for (int64_t ch = 0; ch < GW; ch++) {
        float G = 0, Gp = 0;
        for (int64_t t = c->cu_seqlens[n]; t < c->cu_seqlens[n + 1]; t++) {
          const size_t i = (size_t)((t * p->HV + hv) * GW + ch);
          const float ge = kda_ref32_gate(p->gate_mode, g0[i], x->f[6] ? x->f[6][hv * GW + ch] : 0,
                                          x->f[5] ? x->f[5][hv] : 0, p->has_A_log,
                                          (float)p->lower_bound);
          if ((t - c->cu_seqlens[n]) % KDA_GRAD_WINDOW == 0) G = 0, gp[i] = ge;
          else Gp = G, G = G + ge, gp[i] = G - Gp;
        }
      }
  kda_problem q = *p;
  q.gate_mode = KDA_GATE_LOG, q.has_A_log = 0;
  float *a_log = x->f[5], *dt_bias = x->f[6], *dA = x->f[16], *ddt = x->f[17];
  x->f[3] = gp, x->f[5] = x->f[6] = x->f[16] = x->f[17] = NULL;
  int st = f32_backward(c, &q, x, err, errlen);
  x->f[3] = g0, x->f[5] = a_log, x->f[6] = dt_bias, x->f[16] = dA, x->f[17] = ddt;
  free(gp);
  if (st != KDA_OK || p->gate_mode == KDA_GATE_LOG) return st;
  if (dA) memset(dA, 0, (size_t)p->HV * sizeof(float));
  if (ddt) memset(ddt, 0, (size_t)(p->HV * GW) * sizeof(float));
  for (int64_t i = 0; i < p->T * p->HV * GW; i++) {
    const int64_t hv = (i / GW) % p->HV, ch = i % GW;
    float dx, dAf;
    gate_chain32(p, g0[i], dt_bias[hv * GW + ch], a_log ? a_log[hv] : 0, &dx, &dAf);
    const float dge = x->f[14][i];
    x->f[14][i] = dge * dx;
    if (ddt) ddt[hv * GW + ch] += dge * dx;
    if (dA) dA[hv] += dge * dAf;
  }
  return KDA_OK;
}

/* The envelope: the worst errors of ref-f32 (kda_ref_backward_f32 on the case rounded to float)
 * and of the chunked member, per group, then the running maximum. */
static int truth_envelope(const kda_case *c, kda_grad_truth *g, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  f32_call x;
  int st = f32_alloc(c, g, &x, err, errlen);
  for (int b = 0; b < KDA_GRAD_COUNT && st == KDA_OK; b++)
    if (g->d[b] && !(g->env[b] = calloc((size_t)n_groups(p, b, g->n[b]) + 1, sizeof(double))))
      st = KDA_ENOMEM, snprintf(err, errlen, "out of memory");
  for (int m = 0; m < 2 && st == KDA_OK; m++) {
    if (m == 1 && !g->d[3]) break; /* no decays (or no tokens): the same evaluation */
    st = m == 0 ? f32_backward(c, p, &x, err, errlen) : chunk_member(c, &x, err, errlen);
    for (int b = 0; b < KDA_GRAD_COUNT && st == KDA_OK; b++)
      if (g->d[b]) eval_errors(p, g, b, x.f[11 + b]);
  }
  for (int b = 0; b < KDA_GRAD_COUNT && st == KDA_OK; b++)
    if (g->d[b]) envelope_run(p, g, b);
  f32_free(&x);
  return st;
}

int kda_grad_truth_read(const kda_case *c, kda_npz *z, const kda_grad_seeds *seeds,
                        kda_grad_truth *g, char *err, size_t errlen) {
  memset(g, 0, sizeof *g);
  if (z ? !kda_npz_has(z, "do") : !(seeds && seeds->dout)) return KDA_OK;
  g->has = kda_grad_problem(&c->p);
  g->n_win = n_windows(&c->p);
  int st = read_seeds(c, z, seeds, g, err, errlen);
  if (st == KDA_OK) st = read_truth(c, z, g, err, errlen);
  if (st == KDA_OK) st = magnitudes(c, g, err, errlen);
  if (st == KDA_OK) st = truth_envelope(c, g, err, errlen);
  if (st != KDA_OK) return kda_grad_truth_free(g), st;
  g->present = 1;
  return KDA_OK;
}

void kda_grad_truth_free(kda_grad_truth *g) {
  free(g->dout), free(g->dht), free(g->dhc);
  for (int b = 0; b < KDA_GRAD_COUNT; b++) free(g->d[b]), free(g->mag[b]), free(g->env[b]);
  memset(g, 0, sizeof *g);
}

/* ---- Scoring. */
/* The sequence of each token and its steps to the sequence's end (the adjoint's length). */
static int token_seqs(const kda_case *c, int64_t **seq, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  if (!(*seq = malloc((size_t)(p->T + 1) * sizeof(int64_t))))
    return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  for (int64_t n = 0; n < p->N; n++)
    for (int64_t t = c->cu_seqlens[n]; t < c->cu_seqlens[n + 1]; t++) (*seq)[t] = n;
  return KDA_OK;
}

/* The allowance A of element e (§7.3's rules on gradients): fp32 the envelope, max(1, C e /
 * cap); otherwise L(n), n the adjoint steps behind the element. */
static double allowance(const kda_case *c, const kda_grad_truth *g, int b, int64_t k, int64_t t,
                        const int64_t *seq, int32_t cls, double cap) {
  const kda_problem *p = &c->p;
  int64_t n = p->T;
  if (t >= 0) n = c->cu_seqlens[seq[t] + 1] - t;
  else if (b == 7) n = c->cu_seqlens[k / p->HV + 1] - c->cu_seqlens[k / p->HV];
  if (cls == KDA_PRECISION_FP32 && g->env[b] && isfinite(g->env[b][k]))
    return fmax(1.0, KDA_ENVELOPE_C * g->env[b][k] / cap);
  return kda_step_allowance(n);
}

typedef struct grad_acc {
  const kda_case *c;
  const kda_grad_truth *g;
  const int64_t *seq;
  kda_score *s;
  double sd, se;
} grad_acc;

/* Where element e of gradient b is: token, sequence, head, channel (-1 where none). */
static kda_where where_of(const kda_case *c, int b, uint64_t e, int64_t t, const int64_t *seq) {
  const kda_problem *p = &c->p;
  const grad_geom q = geom(p, b);
  if (q.row) {
    const int64_t r = (int64_t)(e / (uint64_t)q.row);
    return (kda_where){t, seq[t], r % q.heads, (int64_t)(e % (uint64_t)q.row)};
  }
  if (b == 5) return (kda_where){-1, -1, (int64_t)e, -1};
  if (b == 6) {
    const int64_t GW = kda_problem_gate_width(p);
    return (kda_where){-1, -1, (int64_t)e / GW, (int64_t)e % GW};
  }
  const int64_t KV = p->K * p->V, r = (int64_t)(e / (uint64_t)KV);
  return (kda_where){-1, r / p->HV, r % p->HV, (int64_t)(e % (uint64_t)KV)};
}

static void keep_line(kda_score *s, int b, const kda_where *at, uint64_t e, double x, double y,
                      double err, double allowed) {
  if (s->n_lines >= KDA_MAX_FAIL_LINES) return;
  kda_fail_line *l = &s->lines[s->n_lines++];
  snprintf(l->quantity, sizeof l->quantity, "%s", grad_names[b]);
  l->at = *at, l->index = e, l->expected = x, l->observed = y, l->err = err, l->allowed = allowed;
}

/* Element e of gradient b into its metric and (dq dk dv dg) the window series. */
static void score_elem(grad_acc *a, int b, uint64_t e, double y) {
  kda_score *s = a->s;
  kda_qmetric *m = &s->grad[b];
  const double x = a->g->d[b][e];
  int64_t t, k = group_of(&a->c->p, b, e, &t);
  const double scale = group_scale(a->g, b, k, s->unit, s->tiny);
  const double raw = elem_err(y, x, scale);
  const double A = allowance(a->c, a->g, b, k, t, a->seq, s->cls, s->grad_cap), err = raw / A;
  m->count++;
  if (isnan(y)) m->n_nan++;
  else if (isinf(y) && isfinite(x)) m->n_inf++;
  if (isfinite(y)) m->max_abs = fmax(m->max_abs, fabs(y - x));
  a->sd += isfinite(y) ? (y - x) * (y - x) : 0, a->se += x * x;
  if (!(err <= s->grad_cap)) {
    m->n_fail++;
    kda_where at = where_of(a->c, b, e, t, a->seq);
    keep_line(s, b, &at, e, x, y, raw, s->grad_cap * A);
  }
  if (m->count == 1 || err > m->worst || (isnan(err) && !isnan(m->worst))) {
    m->worst = err, m->worst_index = e, m->at = where_of(a->c, b, e, t, a->seq);
    m->worst_expected = x, m->worst_observed = y, m->worst_scale = scale, m->worst_allow = A;
    m->worst_env = a->g->env[b] && s->cls == KDA_PRECISION_FP32 ? a->g->env[b][k] : NAN;
  }
  if (b < 4 && t >= 0 && s->grad_win) {
    double *wm = &s->grad_win[(2 * b) * s->n_grad_win + t / KDA_GRAD_WINDOW];
    double *wa = &s->grad_win[(2 * b + 1) * s->n_grad_win + t / KDA_GRAD_WINDOW];
    if (isnan(*wm) || raw > *wm || isnan(raw)) *wm = raw;
    if (isnan(*wa) || s->grad_cap * A > *wa) *wa = s->grad_cap * A;
  }
}

int kda_grad_score(const kda_case *c, const kda_grad_truth *g, double *const *obs,
                   uint32_t have, int32_t cls, kda_score *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  s->cls = cls;
  s->first_fail_token = -1;
  s->growth_beyond = -1;
  s->alpha = s->alpha_fit = NAN;
  kda_caps caps;
  if (kda_class_caps(cls, &caps) != KDA_OK)
    return snprintf(err, errlen, "unknown precision class %d", (int)cls), KDA_EINVAL;
  s->caps = caps, s->grad_cap = caps.o;
  s->unit = kda_class_unit(cls), s->tiny = kda_class_tiny(cls);
  s->n_grad_win = g->n_win;
  s->win_tokens = c->p.T; /* the tokens the windows cover (the plots) */
  s->grad_win = malloc((size_t)(8 * g->n_win + 1) * sizeof(double));
  int64_t *seq = NULL;
  int st = s->grad_win ? token_seqs(c, &seq, err, errlen) : KDA_ENOMEM;
  if (st != KDA_OK) return free(s->grad_win), s->grad_win = NULL, st;
  for (int64_t i = 0; i < 8 * g->n_win; i++) s->grad_win[i] = NAN;
  s->grad_scored = g->has & have;
  s->grad_missing = g->has & ~have;
  for (int b = 0; b < KDA_GRAD_COUNT; b++) {
    if (!(s->grad_scored >> b & 1u)) continue;
    grad_acc a = {c, g, seq, s, 0, 0};
    for (uint64_t e = 0; e < g->n[b]; e++) score_elem(&a, b, e, obs[b][e]);
    s->grad[b].rms_ratio = a.se > 0 ? sqrt(a.sd / a.se) : (a.sd > 0 ? INFINITY : 0.0);
  }
  free(seq);
  return KDA_OK;
}

/* ---- A candidate's gradients (SPEC.md §7.9, §13.7): the result file's members dq .. dh0
 * that the problem has, each <f4 or <f8 of its input's shape, into d (allocated here, freed by
 * the caller); *have their bits.  The manifest is checked first (kda_result_load). */
int kda_grad_result_read(const char *path, const kda_case *c, const kda_grad_truth *g,
                         double **d, uint32_t *have, char *err, size_t errlen) {
  *have = 0;
  for (int b = 0; b < KDA_GRAD_COUNT; b++) d[b] = NULL;
  int st = kda_result_load(path, c, NULL, NULL, NULL, err, errlen);
  if (st != KDA_OK) return st;
  kda_npz *z = NULL;
  if ((st = kda_npz_open(path, &z, err, errlen)) != KDA_OK) return st;
  for (int b = 0; b < KDA_GRAD_COUNT && st == KDA_OK; b++) {
    if (!(g->has >> b & 1u) || !kda_npz_has(z, grad_names[b])) continue;
    if (!(d[b] = alloc_n(g->n[b]))) st = KDA_ENOMEM, snprintf(err, errlen, "out of memory");
    else st = member_read(z, &c->p, grad_names[b], b, 0, d[b], err, errlen);
    if (st == KDA_OK) *have |= 1u << b;
  }
  kda_npz_close(z);
  return st;
}

/* Copies member name of z (as stored: dtype and shape) into writer w. */
static int copy_member(kda_npz *z, kda_npz_writer *w, const char *name, char *err,
                       size_t errlen) {
  kda_array_info in;
  double *x = NULL;
  int st = kda_npz_load_f64(z, name, &in, &x, err, errlen);
  if (st == KDA_OK) st = kda_npz_writer_add_f64(w, name, in.dtype, in.ndim, in.shape, x, err,
                                                errlen);
  free(x);
  return st;
}

int kda_grad_prompt_seeds(const char *case_path, const char *prompt_path, char *err,
                          size_t errlen) {
  kda_npz *src = NULL, *dst = NULL;
  int st = kda_npz_open(case_path, &src, err, errlen);
  if (st != KDA_OK || !kda_npz_has(src, "do")) return kda_npz_close(src), st;
  char *man = NULL;
  kda_npz_writer *w = NULL;
  st = kda_npz_open(prompt_path, &dst, err, errlen);
  if (st == KDA_OK) st = kda_npz_read_blob(dst, "manifest.json", &man, NULL, err, errlen);
  if (st == KDA_OK) st = kda_npz_writer_open(prompt_path, &w, err, errlen);
  if (st == KDA_OK) st = kda_npz_writer_set_manifest(w, man, err, errlen);
  for (int64_t m = 0; st == KDA_OK && m < kda_npz_count(dst); m++)
    st = copy_member(dst, w, kda_npz_name(dst, m), err, errlen);
  for (int s = 0; st == KDA_OK && s < 3; s++)
    if (kda_npz_has(src, seed_names[s])) st = copy_member(src, w, seed_names[s], err, errlen);
  st = kda_npz_writer_finish(w, st, err, errlen);
  free(man);
  kda_npz_close(dst);
  kda_npz_close(src);
  return st;
}

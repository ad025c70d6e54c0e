/* kda_score.c: the per-case metrics (SPEC.md §7.3-§7.5); the truth and its magnitude scales
 * are kda_truth.c's.
 * SPDX-License-Identifier: MIT
 *
 * An output element o[t,hv,j] is scored as |o_obs - o_exp| / (max(u * M[t,hv], tiny) * L(n))
 * with M[t,hv] = max_j sum_i |S_t[i][j]| |qhat_t[i]| (SPEC.md §7.3): the size of the terms the
 * readout adds, not the size of their sum, so that cancellation in S^T qhat cannot make a
 * correct backend fail; tiny the class's smallest subnormal; L(n) the step allowance of a token
 * n steps into its sequence.  A state element is scored against u times the largest |S| of its
 * head, with the same floor and allowance.  Drift metrics (windows, growth) use the error
 * without the allowance.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_npz.h"
#include "kda_ref.h"
#include "kda_ref_internal.h"
#include "kda_score_internal.h"

/* ---- Metrics. */
void kda_score_head_max(const double *x, int64_t slots, int64_t HV, int64_t KV, double *mag) {
  for (int64_t s = 0; s < slots * HV; s++) {
    double m = 0.0;
    for (int64_t e = 0; e < KV; e++)
      if (fabs(x[s * KV + e]) > m) m = fabs(x[s * KV + e]);
    mag[s] = m;
  }
}

const char *kda_growth_name(int32_t kind) {
  static const char *const names[] = {"n/a", "bounded", "random-walk", "systematic",
                                      "unstable"};
  return (kind >= 0 && kind <= KDA_GROWTH_UNSTABLE) ? names[kind] : "?";
}

/* Error of one element in class units; NaN/Inf observed where finite expected is infinite. */
static double elem_err(double exp_v, double obs, double unit_scale, kda_qmetric *m) {
  if (isnan(obs) && !isnan(exp_v)) return m->n_nan++, INFINITY;
  if (isinf(obs) && !isinf(exp_v)) return m->n_inf++, INFINITY;
  if (!isfinite(exp_v)) return memcmp(&exp_v, &obs, sizeof obs) == 0 || exp_v == obs ? 0.0 : INFINITY;
  double d = fabs(obs - exp_v);
  if (d > m->max_abs) m->max_abs = d;
  if (d == 0.0) return 0.0;
  return unit_scale > 0.0 ? d / unit_scale : INFINITY;
}

static void keep_line(kda_score *s, const char *q, kda_where at, uint64_t idx, double e,
                      double o, double err, double allowed) {
  if (s->n_lines >= KDA_MAX_FAIL_LINES) return;
  kda_fail_line *l = &s->lines[s->n_lines++];
  snprintf(l->quantity, sizeof l->quantity, "%s", q);
  l->at = at, l->index = idx, l->expected = e, l->observed = o, l->err = err;
  l->allowed = allowed;
}

typedef struct rms_acc {
  double sd, se;
} rms_acc;

/* Where an element was scored: its error scale, allowance and ref-f32's error near it. */
typedef struct elem_ctx {
  double scale, allow, env;
} elem_ctx;

static void record(kda_score *s, kda_qmetric *m, const char *q, kda_where at, uint64_t idx,
                   double e, double o, double err, double cap, const elem_ctx *x,
                   rms_acc *acc) {
  m->count++;
  if (isfinite(e) && isfinite(o)) acc->sd += (o - e) * (o - e), acc->se += e * e;
  if (err > m->worst || m->count == 1) {
    m->worst = err, m->at = at, m->worst_index = idx;
    m->worst_expected = e, m->worst_observed = o;
    m->worst_scale = x->scale, m->worst_allow = x->allow, m->worst_env = x->env;
  }
  if (err > cap) {
    m->n_fail++;
    keep_line(s, q, at, idx, e, o, err, cap);
  }
}

static void finish_rms(kda_qmetric *m, const rms_acc *acc) {
  m->rms_ratio = acc->se > 0 ? sqrt(acc->sd / acc->se) : (acc->sd > 0 ? INFINITY : 0.0);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of the scored values of x[0, n) (NaN marks a token a sampled truth does not hold),
 * NaN when there is none. */
static double median(const double *x, int64_t n, double *tmp) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++)
    if (!isnan(x[i])) tmp[m++] = x[i];
  if (m <= 0) return n <= 0 ? 0.0 : NAN;
  qsort(tmp, (size_t)m, sizeof *tmp, cmp_double);
  return (m & 1) ? tmp[m / 2] : 0.5 * (tmp[m / 2 - 1] + tmp[m / 2]);
}

/* Growth of the per-token error along the longest sequence (SPEC.md §7.5), over the tokens
 * scored (a sampled truth's: NA when a half of the range holds none). */
static void growth(kda_score *s, const double *tok, const kda_case *c, double *tmp) {
  const kda_problem *p = &c->p;
  int64_t bos = 0, len = 0;
  for (int64_t n = 0; n < p->N; n++)
    if (c->cu_seqlens[n + 1] - c->cu_seqlens[n] > len)
      bos = c->cu_seqlens[n], len = c->cu_seqlens[n + 1] - c->cu_seqlens[n];
  s->alpha = NAN, s->alpha_fit = NAN, s->growth_kind = KDA_GROWTH_NA;
  if (len < 256) return;
  const double floor_u = 1e-3;
  double lo = median(tok + bos + len / 4, len / 2 - len / 4, tmp);
  double hi = median(tok + bos + len / 2, len - len / 2, tmp);
  if (isnan(lo) || isnan(hi)) return;
  s->alpha = log2(fmax(hi, floor_u) / fmax(lo, floor_u));
  /* least squares over octaves [2^k, 2^(k+1)) of positions, k >= 3, of the median error */
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int nb = 0;
  for (int64_t a = 8; a < len; a *= 2) {
    int64_t b = a * 2 < len ? a * 2 : len;
    double med = median(tok + bos + a, b - a, tmp);
    if (isnan(med)) continue;
    double x = log2((double)(a + b) / 2.0), y = log2(fmax(med, floor_u));
    sx += x, sy += y, sxx += x * x, sxy += x * y, nb++;
  }
  if (nb >= 2) s->alpha_fit = (nb * sxy - sx * sy) / (nb * sxx - sx * sx);
  double al = s->alpha;
  s->growth_kind = al < 0.25 ? KDA_GROWTH_BOUNDED
                   : al < 0.75 ? KDA_GROWTH_RANDOM_WALK
                   : al < 1.5  ? KDA_GROWTH_SYSTEMATIC
                               : KDA_GROWTH_UNSTABLE;
}

/* Mean per-token error of the scored tokens of [a, b) (an infinite error counts as 1e300),
 * NaN when none is scored. */
static double tok_mean(const double *tok, int64_t a, int64_t b) {
  double sum = 0;
  int64_t n = 0;
  for (int64_t t = a; t < b; t++)
    if (!isnan(tok[t])) sum += isfinite(tok[t]) ? tok[t] : 1e300, n++;
  return n ? sum / (double)n : NAN;
}

/* The per-window series of the report (SPEC.md §7.9), NaN until a token of the window is
 * scored; a failed allocation leaves them out (they are not a metric, so scoring goes on). */
static void window_alloc(kda_score *s, int64_t T) {
  s->window = T < 64 ? (T > 0 ? T : 1) : 64;
  const int64_t n = T > 0 ? (T + s->window - 1) / s->window : 0;
  s->win_each = n > 0 ? malloc(4 * (size_t)n * sizeof *s->win_each) : NULL;
  s->n_win_each = s->win_each ? n : 0;
  s->win_tokens = T;
  if (!s->win_each) return;
  s->win_max_each = s->win_each + n, s->win_env_each = s->win_each + 2 * n;
  s->win_allow_each = s->win_each + 3 * n;
  for (int64_t i = 0; i < 4 * n; i++) s->win_each[i] = NAN;
  if (T <= 0 || T >= KDA_STEP_ALLOWANCE_N0) return;
  s->tok_each = malloc(2 * (size_t)T * sizeof *s->tok_each);
  if (!s->tok_each) return;
  s->n_tok_each = T, s->tok_allow_each = s->tok_each + T;
  for (int64_t i = 0; i < 2 * T; i++) s->tok_each[i] = NAN;
}

/* Token tt's worst error without allowance, its envelope value and its allowance. */
static void window_note(kda_score *s, const kda_envelope *env, int64_t tt, double raw, double L) {
  if (tt < s->n_tok_each) {
    if (!(s->tok_each[tt] >= raw)) s->tok_each[tt] = raw;
    if (!(s->tok_allow_each[tt] >= L)) s->tok_allow_each[tt] = L;
  }
  const int64_t w = tt / s->window;
  if (w >= s->n_win_each) return;
  if (!(s->win_max_each[w] >= raw)) s->win_max_each[w] = raw;
  if (!(s->win_allow_each[w] >= L)) s->win_allow_each[w] = L;
  double e = kda_envelope_near_o(env, tt);
  if (!(s->win_env_each[w] >= e)) s->win_env_each[w] = e;
}

/* Per-window means of the per-token error for plots (NaN: a window a sampled truth does not
 * hold). */
static void window_series(kda_score *s, const double *tok, int64_t T) {
  const int64_t W = s->window;
  for (int64_t w = 0; w < s->n_win_each; w++)
    s->win_each[w] = tok_mean(tok, w * W, w * W + W < T ? w * W + W : T);
}

/* First, worst and last window (SPEC.md §7.5).  The last is the last W scored tokens (the
 * last W tokens, unless the truth is sampled). */
static void windows(kda_score *s, const double *tok, int64_t T) {
  window_series(s, tok, T);
  int64_t W = s->window;
  s->win_first = s->win_last = s->win_worst = 0.0;
  s->win_worst_start = 0;
  int seen = 0;
  for (int64_t a = 0; a + W <= T || (a == 0 && T > 0); a += W) {
    int64_t b = a + W < T ? a + W : T;
    double mean = tok_mean(tok, a, b);
    if (!isnan(mean) && !seen) s->win_first = mean, seen = 1;
    if (mean > s->win_worst) s->win_worst = mean, s->win_worst_start = a;
    if (b >= T) break;
  }
  int64_t a = T, n = 0;
  while (a > 0 && n < W) n += !isnan(tok[--a]);
  if (n) s->win_last = tok_mean(tok, a, T);
}

/* SPEC.md §7.5: growth that is systematic or unstable, with a last window above cap/8, is
 * beyond the honest evaluations' when the median of their last-window means on the same case
 * is more than KDA_ENVELOPE_C times smaller; -1 without an envelope. */
static int growth_beyond(const kda_score *s, const kda_envelope *env) {
  if (!env) return -1;
  if (s->growth_kind < KDA_GROWTH_SYSTEMATIC || !(s->win_last > s->caps.o / 8)) return 0;
  return s->win_last > KDA_ENVELOPE_C * env->win_last;
}

/* The error scale of SPEC.md §7.3: u * magnitude, floored at the output format's smallest
 * subnormal (below it no implementation of the class can be more exact). */
static double error_scale(const kda_score *s, double mag) {
  double sc = s->unit * mag;
  return sc > s->tiny ? sc : s->tiny;
}

/* The allowance of SPEC.md §7.3: the fp32 class's envelope when the truth has one, else the
 * step allowance. */
static const kda_envelope *class_env(const kda_score *s, const kda_truth *t) {
  return s->cls == KDA_PRECISION_FP32 && t->env.o ? &t->env : NULL;
}

static double allow_o(const kda_score *s, const kda_truth *t, int64_t tt, int64_t n) {
  return kda_envelope_allow_o(class_env(s, t), tt, s->caps.o, n);
}

/* Tokens [t0, t1) of sequence n against the truth's rows of them (SPEC.md §7.3): every token,
 * or the stored ones of a sampled truth (§10.2); tok[t] stays NaN at the others. */
void kda_score_o_rows(kda_score_acc *a, const kda_case *c, const kda_o_rows *x) {
  const kda_problem *p = &c->p;
  const kda_truth *t = a->t;
  kda_score *s = a->s;
  rms_acc acc = {a->sd, a->se};
  const int64_t bos = c->cu_seqlens[x->n];
  int64_t row = x->r0;
  for (int64_t tt = x->t0; tt < x->t1; tt++) {
    a->tok[tt] = NAN;
    if (t->o_index) {
      while (row < t->n_rows && t->o_index[row] < tt) row++;
      if (row >= t->n_rows || t->o_index[row] != tt) continue;
    } else {
      row = x->r0 + (tt - x->t0);
    }
    const int64_t lr = row - x->r0;
    a->tok[tt] = 0.0;
    double L = allow_o(s, t, tt, tt - bos + 1);
    double raw_max = 0.0;
    for (int64_t hv = 0; hv < p->HV; hv++) {
      double sc = error_scale(s, x->mag[lr * p->HV + hv]);
      for (int64_t j = 0; j < p->V; j++) {
        uint64_t idx = (uint64_t)((tt * p->HV + hv) * p->V + j);
        double e = x->truth[(lr * p->HV + hv) * p->V + j];
        double o = x->obs[((tt - x->t0) * p->HV + hv) * p->V + j];
        double raw = elem_err(e, o, sc, &s->o), err = raw / L;
        kda_where at = {tt, x->n, hv, j};
        const kda_envelope *env = class_env(s, t);
        elem_ctx ex = {sc, L, env ? kda_envelope_near_o(env, tt) : NAN};
        record(s, &s->o, "o", at, idx, e, o, err, s->caps.o, &ex, &acc);
        if (raw > a->tok[tt]) a->tok[tt] = raw;
        if (!(raw_max >= raw)) raw_max = raw;
        if (err > s->caps.o && s->first_fail_token < 0) s->first_fail_token = tt;
      }
    }
    window_note(s, class_env(s, t), tt, raw_max, L);
  }
  a->sd = acc.sd, a->se = acc.se;
}

/* Steps behind state slot sl: the sequence's length for ht, the checkpoint's position in its
 * sequence (plus one) for hc. */
static int64_t state_steps(const kda_case *c, int is_hc, int64_t sl) {
  if (!is_hc) return c->cu_seqlens[sl + 1] - c->cu_seqlens[sl];
  int64_t t = c->checkpoints[sl], n = 0;
  while (c->cu_seqlens[n + 1] <= t) n++;
  return t - c->cu_seqlens[n] + 1;
}

static void score_state(const kda_case *c, int is_hc, const double *e_all, const double *o_all,
                        const double *mag, const double *env, int64_t slots, const char *q,
                        double cap, kda_qmetric *m, kda_score *s, double *each) {
  const kda_problem *p = &c->p;
  rms_acc acc = {0, 0};
  for (int64_t sl = 0; sl < slots; sl++) {
    if (each) each[sl] = 0.0;
    double L = kda_envelope_allow_state(env, sl, cap, state_steps(c, is_hc, sl));
    for (int64_t hv = 0; hv < p->HV; hv++) {
      double sc = error_scale(s, mag[sl * p->HV + hv]);
      for (int64_t i = 0; i < p->K; i++)
        for (int64_t j = 0; j < p->V; j++) {
          uint64_t idx = (uint64_t)(kda_ref_off_state(p, sl, hv) + kda_ref_state_at(p, i, j));
          double err = elem_err(e_all[idx], o_all[idx], sc, m) / L;
          kda_where at = {sl, hv, i, j};
          elem_ctx ex = {sc, L, env ? env[sl] : NAN};
          record(s, m, q, at, idx, e_all[idx], o_all[idx], err, cap, &ex, &acc);
          if (each && err > each[sl]) each[sl] = err;
        }
    }
  }
  finish_rms(m, &acc);
}

int kda_score_begin(const kda_case *c, const kda_truth *t, int32_t cls, kda_score *s,
                    kda_score_acc *a, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  memset(a, 0, sizeof *a);
  const kda_problem *p = &c->p;
  if (kda_class_caps(cls, &s->caps) != KDA_OK)
    return snprintf(err, errlen, "unknown precision class %d", (int)cls), KDA_EINVAL;
  s->cls = cls;
  s->unit = kda_class_unit(cls);
  s->tiny = kda_class_tiny(cls);
  s->first_fail_token = -1;
  a->s = s, a->t = t;
  a->tok = malloc(((size_t)p->T + 1) * sizeof *a->tok);
  a->tmp = calloc((size_t)p->T + 1, sizeof *a->tmp);
  if (p->n_checkpoints > 0) s->hc_each = calloc((size_t)p->n_checkpoints, sizeof(double));
  if (!a->tok || !a->tmp || (p->n_checkpoints > 0 && !s->hc_each)) {
    free(a->tok), free(a->tmp), kda_score_free(s);
    return snprintf(err, errlen, "out of memory scoring"), KDA_ENOMEM;
  }
  for (int64_t i = 0; i < p->T; i++) a->tok[i] = NAN;
  s->n_hc_each = p->n_checkpoints;
  window_alloc(s, p->T);
  return KDA_OK;
}

void kda_score_end(kda_score_acc *a, const kda_case *c, const double *ht, const double *hc) {
  const kda_problem *p = &c->p;
  const kda_truth *t = a->t;
  kda_score *s = a->s;
  const rms_acc acc = {a->sd, a->se};
  finish_rms(&s->o, &acc);
  const kda_envelope *env = class_env(s, t);
  if (t->out.ht)
    score_state(c, 0, t->out.ht, ht, t->mag_ht, env ? env->ht : NULL, p->N, "ht",
                s->caps.ht, &s->ht, s, NULL);
  if (t->out.hc)
    score_state(c, 1, t->out.hc, hc, t->mag_hc, env ? env->hc : NULL, p->n_checkpoints,
                "hc", s->caps.hc, &s->hc, s, s->hc_each);
  windows(s, a->tok, p->T);
  growth(s, a->tok, c, a->tmp);
  s->growth_beyond = growth_beyond(s, env);
  free(a->tok), free(a->tmp);
  a->tok = a->tmp = NULL;
}

int kda_score_outputs(const kda_case *c, const kda_truth *t, const kda_outputs *obs,
                      int32_t cls, kda_score *s, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  memset(s, 0, sizeof *s);
  if ((t->out.ht && !obs->ht) || (t->out.hc && !obs->hc) || !obs->o)
    return snprintf(err, errlen, "observed outputs are missing"), KDA_EINVAL;
  kda_score_acc a;
  int st = kda_score_begin(c, t, cls, s, &a, err, errlen);
  if (st != KDA_OK) return st;
  for (int64_t n = 0; n < p->N; n++) {
    const int64_t bos = c->cu_seqlens[n];
    const int64_t r0 = t->o_index ? kda_sampled_lower(t->o_index, t->n_rows, bos) : bos;
    const kda_o_rows x = {n, bos, c->cu_seqlens[n + 1], r0,
                          t->out.o + (size_t)(r0 * p->HV * p->V), t->mag_o + (size_t)(r0 * p->HV),
                          obs->o + (size_t)(bos * p->HV * p->V)};
    kda_score_o_rows(&a, c, &x);
  }
  kda_score_end(&a, c, obs->ht, obs->hc);
  return KDA_OK;
}

void kda_score_free(kda_score *s) {
  free(s->hc_each);
  s->hc_each = NULL;
  s->n_hc_each = 0;
  free(s->win_each); /* the other series live in its allocation */
  s->win_each = s->win_max_each = s->win_env_each = s->win_allow_each = NULL;
  s->n_win_each = 0;
  free(s->grad_win);
  s->grad_win = NULL;
  s->n_grad_win = 0;
  free(s->tok_each); /* with tok_allow_each */
  s->tok_each = s->tok_allow_each = NULL;
  s->n_tok_each = 0;
}

int kda_score_within_caps(const kda_score *s) {
  return s->o.n_fail == 0 && s->ht.n_fail == 0 && s->hc.n_fail == 0 && s->o.n_nan == 0 &&
         s->o.n_inf == 0 && s->ht.n_nan == 0 && s->ht.n_inf == 0 && s->hc.n_nan == 0 &&
         s->hc.n_inf == 0;
}

/* kda_envelope.c: the honest spread of float32 arithmetic on a case and the allowance it sets
 * (SPEC.md §7.3, envelope rule).
 * SPDX-License-Identifier: MIT
 *
 * A conforming float32 kernel's error on a long case is whatever float32 rounding does on that
 * case: near one unit where the gates forget within a few tokens, hundreds of units where a
 * direction is never decayed nor erased.  A fixed allowance growing like n cannot tell the two
 * apart, so the fp32 class is judged against float32 evaluations of the same case: ref-f32
 * and the honest ensemble (kda_honest.c), evaluations that differ from ref-f32 only in their
 * order of operations.  In a never-erased direction the rounding error is a persistent random
 * walk, so one evaluation's error at one place is a poor sample of another's: the envelope is
 * the maximum over the evaluations of their worst error per 64-token window (and per state
 * slot), taken as a running maximum along the positions.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_ref.h"
#include "kda_ref_internal.h"
#include "kda_score_internal.h"

/* Float32 copies of the case's inputs and room for ref-f32's outputs: one allocation. */
typedef struct f32_run {
  float *buf;
  kda_tensors_f32 ts;
} f32_run;

static float *take(float **cur, const double *src, uint64_t n) {
  if (!n) return NULL;
  float *d = *cur;
  for (uint64_t i = 0; src && i < n; i++) d[i] = (float)src[i];
  *cur += n;
  return d;
}

static int f32_inputs(const kda_case *c, f32_run *r, char *err, size_t errlen) {
  kda_problem_sizes z;
  int st = kda_problem_sizes_get(&c->p, &z, err, errlen);
  if (st != KDA_OK) return st;
  uint64_t total = z.q + z.k + z.v + z.g + z.beta + z.A_log + z.dt_bias + z.h0 + z.o + z.ht +
                   z.hc + 1;
  r->buf = malloc(total * sizeof *r->buf);
  if (!r->buf) return snprintf(err, errlen, "out of memory for the fp32 envelope"), KDA_ENOMEM;
  float *cur = r->buf;
  r->ts = (kda_tensors_f32){take(&cur, c->q, z.q), take(&cur, c->k, z.k), take(&cur, c->v, z.v),
                            take(&cur, c->g, z.g), take(&cur, c->beta, z.beta),
                            take(&cur, c->A_log, z.A_log), take(&cur, c->dt_bias, z.dt_bias),
                            take(&cur, c->h0, z.h0), c->cu_seqlens, c->checkpoints,
                            take(&cur, NULL, z.o), take(&cur, NULL, z.ht),
                            take(&cur, NULL, z.hc)};
  return KDA_OK;
}

/* Error of one element in fp32 units at scale sc (SPEC.md §7.3); non-finite is infinite. */
static double err_at(double e, float o, double sc) {
  if (!isfinite(o)) return isfinite(e) ? INFINITY : 0.0;
  double d = fabs((double)o - e);
  return d == 0.0 ? 0.0 : d / sc;
}

static double scale(double mag) {
  double sc = kda_class_unit(KDA_PRECISION_FP32) * mag, tiny = kda_class_tiny(KDA_PRECISION_FP32);
  return sc > tiny ? sc : tiny;
}

/* The worst error of each window the truth holds (every window, or a sampled truth's stored
 * ones: NaN at the others, which kda_envelope_allow_o then does not read as a neighbour). */
static void env_o(const kda_case *c, const kda_truth *t, const float *o, kda_envelope *env,
                  int first) {
  const kda_problem *p = &c->p;
  for (int64_t w = 0; first && t->o_index && w < env->n_win; w++) env->o[w] = NAN;
  for (int64_t r = 0; r < t->n_rows; r++) {
    const int64_t tt = t->o_index ? t->o_index[r] : r;
    double *w = &env->o[tt / KDA_ENVELOPE_WINDOW];
    if (isnan(*w)) *w = 0.0;
    for (int64_t hv = 0; hv < p->HV; hv++) {
      double sc = scale(t->mag_o[r * p->HV + hv]);
      for (int64_t j = 0; j < p->V; j++) {
        uint64_t i = (uint64_t)((tt * p->HV + hv) * p->V + j);
        double e = err_at(t->out.o[(uint64_t)((r * p->HV + hv) * p->V + j)], o[i], sc);
        if (e > *w) *w = e;
      }
    }
  }
}

static void env_state(const kda_problem *p, const double *e_all, const float *o_all,
                      const double *mag, int64_t slots, double *each) {
  const int64_t KV = p->K * p->V;
  for (int64_t sl = 0; sl < slots; sl++)
    for (int64_t hv = 0; hv < p->HV; hv++) {
      double sc = scale(mag[sl * p->HV + hv]);
      for (int64_t x = 0; x < KV; x++) {
        uint64_t i = (uint64_t)((sl * p->HV + hv) * KV + x);
        double e = err_at(e_all[i], o_all[i], sc);
        if (e > each[sl]) each[sl] = e;
      }
    }
}

/* ref-f32's outputs, widened, into obs (allocated for the problem). */
static void keep_outputs(const f32_run *r, kda_outputs *obs) {
  for (uint64_t i = 0; i < obs->n_o; i++) obs->o[i] = r->ts.o[i];
  for (uint64_t i = 0; obs->ht && i < obs->n_ht; i++) obs->ht[i] = r->ts.ht[i];
  for (uint64_t i = 0; obs->hc && i < obs->n_hc; i++) obs->hc[i] = r->ts.hc[i];
}

/* The errors of the evaluation in r into env, by maximum; its outputs to each (growth). */
static int env_merge(const kda_case *c, kda_truth *t, const f32_run *r, int n_eval,
                     kda_outputs *obs, kda_envelope_each each, void *ctx, char *err,
                     size_t errlen) {
  const kda_problem *p = &c->p;
  kda_envelope *env = &t->env;
  env_o(c, t, r->ts.o, env, n_eval == 0);
  if (t->out.ht) env_state(p, t->out.ht, r->ts.ht, t->mag_ht, p->N, env->ht);
  if (t->out.hc) env_state(p, t->out.hc, r->ts.hc, t->mag_hc, p->n_checkpoints, env->hc);
  keep_outputs(r, obs);
  return each ? each(ctx, obs, n_eval, err, errlen) : KDA_OK;
}

/* SPEC.md §7.3: members 2 .. E where an evaluation so far exceeds cap / GATE somewhere;
 * below that the allowance is 1 as long as the others stay under 4 times it. */
int kda_envelope_needs_ensemble(const kda_problem *p, const kda_envelope *env) {
  kda_caps caps;
  if (kda_class_caps(KDA_PRECISION_FP32, &caps) != KDA_OK) return 1;
  double m = 0.0;
  for (int64_t w = 0; w < env->n_win; w++) m = env->o[w] > m ? env->o[w] : m;
  int over = m > caps.o / KDA_ENVELOPE_GATE;
  for (int64_t n = 0; env->ht && n < p->N; n++) over |= env->ht[n] > caps.ht / KDA_ENVELOPE_GATE;
  for (int64_t k = 0; env->hc && k < p->n_checkpoints; k++)
    over |= env->hc[k] > caps.hc / KDA_ENVELOPE_GATE;
  return over;
}

int kda_envelope_compute(const kda_case *c, kda_truth *t, int ensemble, kda_outputs *obs,
                         kda_envelope_each each, void *ctx, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  kda_envelope *env = &t->env;
  memset(env, 0, sizeof *env);
  f32_run r;
  int st = f32_inputs(c, &r, err, errlen);
  if (st != KDA_OK) return st;
  st = kda_ref_forward_f32(p, &r.ts, err, errlen);
  env->n_win = (p->T + KDA_ENVELOPE_WINDOW - 1) / KDA_ENVELOPE_WINDOW;
  env->o = calloc((size_t)env->n_win + 1, sizeof *env->o);
  env->ht = calloc((size_t)p->N + 1, sizeof *env->ht);
  env->hc = calloc((size_t)p->n_checkpoints + 1, sizeof *env->hc);
  env->alpha = NAN;
  if (st == KDA_OK && (!env->o || !env->ht || !env->hc))
    st = KDA_ENOMEM, snprintf(err, errlen, "out of memory for the fp32 envelope");
  if (st == KDA_OK) st = env_merge(c, t, &r, 0, obs, each, ctx, err, errlen);
  if (!ensemble) env->members = -1;
  /* member 1 always (its chunk-local prefix sums of the gates err where ref-f32 does not,
   * SPEC.md §7.3), the others where the evaluations so far meet the gate */
  for (int m = 1; st == KDA_OK && ensemble && m <= KDA_ENVELOPE_MEMBERS; m++) {
    if (m == 2 && !kda_envelope_needs_ensemble(p, env)) break;
    st = kda_honest_forward_f32(p, &r.ts, (uint64_t)m, NULL, err, errlen);
    if (st == KDA_OK) st = env_merge(c, t, &r, m, obs, each, ctx, err, errlen);
    env->members = m;
  }
  if (st == KDA_OK) kda_envelope_finish(env);
  free(r.buf);
  if (st != KDA_OK) kda_envelope_free(env);
  return st;
}

void kda_envelope_free(kda_envelope *env) {
  free(env->o);
  free(env->ht);
  free(env->hc);
  memset(env, 0, sizeof *env);
}

double kda_step_allowance(int64_t n) {
  double L = (double)n / (double)KDA_STEP_ALLOWANCE_N0;
  return L > 1.0 ? L : 1.0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void kda_envelope_median(kda_envelope *env) {
  /* SPEC.md §7.5: the median of the evaluations' last windows */
  int n = 1 + (env->members > 0 ? env->members : 0);
  double v[1 + KDA_ENVELOPE_MEMBERS];
  memcpy(v, env->win_lasts, (size_t)n * sizeof *v);
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  env->win_last = (n & 1) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void kda_envelope_finish(kda_envelope *env) {
  kda_envelope_median(env);
  double run = 0.0;
  for (int64_t w = 0; env->o && w < env->n_win; w++) {
    if (isnan(env->o[w])) continue;
    if (env->o[w] > run) run = env->o[w];
    const double next = w + 1 < env->n_win ? env->o[w + 1] : NAN;
    env->o[w] = next > run ? next : run; /* the next window is read before it is replaced */
  }
}

/* max(1, C e / cap); an evaluation that overflowed (e infinite) bounds nothing: L(n). */
static double combine(double e, double cap, int64_t n) {
  if (!isfinite(e)) return kda_step_allowance(n);
  double A = KDA_ENVELOPE_C * e / cap;
  return A > 1.0 ? A : 1.0;
}

double kda_envelope_near_o(const kda_envelope *env, int64_t t) {
  if (!env || !env->o || t < 0) return NAN;
  const int64_t w = t / KDA_ENVELOPE_WINDOW;
  return w < env->n_win ? env->o[w] : NAN; /* NaN: a window the truth does not hold */
}

double kda_envelope_allow_o(const kda_envelope *env, int64_t t, double cap, int64_t n) {
  double e = kda_envelope_near_o(env, t);
  return isnan(e) ? kda_step_allowance(n) : combine(e, cap, n);
}

double kda_envelope_allow_state(const double *each, int64_t sl, double cap, int64_t n) {
  return each && sl >= 0 ? combine(each[sl], cap, n) : kda_step_allowance(n);
}

/* kda_mpfr_coef.c: interval enclosures of q̂, k̂, the decay factors and beta (SPEC.md §4).
 * SPDX-License-Identifier: MIT
 *
 * Each coefficient is a composition of monotone real functions of exact inputs (the stored
 * float64 values).  Evaluating the composition twice, once with every rounding directed so
 * that it can only decrease the result and once so that it can only increase it, gives
 * lo <= x* <= hi for the exact real x*.  No hand-derived constant enters: the error of the
 * working value mid = RN((lo + hi) / 2) is at most max(mid - lo, hi - mid)
 * (SPEC.md §8.3).  Only the state update (kda_mpfr_run.c) needs the a-priori
 * analysis.
 */
#include <math.h>
#include <stdlib.h>

#include "kda_mpfr_impl.h"

/* Named p-bit scratch numbers. */
enum { T_LO, T_HI, T_E_LO, T_E_HI, T_X_LO, T_X_HI, T_S_LO, T_S_HI, T_G_LO, T_G_HI, T_Z, T_D,
       T_A, T_EPS, N_TMP };
/* Named bound-precision scratch numbers. */
enum { B_E, B_T, B_ABS, B_N2, B_E2, B_N2LO, B_MIN, N_BTMP };

#define TMP(c, k) ((c)->tmp.x[(k)])
#define BT(c, k) ((c)->b.x[(k)])

static mpfr_rnd_t opposite(mpfr_rnd_t rnd) { return rnd == MPFR_RNDD ? MPFR_RNDU : MPFR_RNDD; }

int kda_mpfr_coef_init(kda_mpfr_coef *c, mpfr_prec_t prec, int64_t n) {
  c->prec = prec;
  c->pprod = NULL;
  mpfr_init2(c->y, 64);
  if (kda_mpfr_pool_init(&c->tmp, N_TMP, prec) ||
      kda_mpfr_pool_init(&c->prod, (size_t)n + 2, 2 * prec) ||
      kda_mpfr_pool_init(&c->b, N_BTMP, KDA_MPFR_BOUND_PREC))
    return -1;
  c->pprod = malloc(((size_t)n + 2) * sizeof *c->pprod);
  if (!c->pprod) return -1;
  for (size_t i = 0; i < (size_t)n + 2; i++) c->pprod[i] = c->prod.x[i];
  return 0;
}

void kda_mpfr_coef_free(kda_mpfr_coef *c) {
  kda_mpfr_pool_free(&c->tmp);
  kda_mpfr_pool_free(&c->prod);
  kda_mpfr_pool_free(&c->b);
  free(c->pprod);
  c->pprod = NULL;
  mpfr_clear(c->y);
}

void kda_mpfr_vecnorm_init(kda_mpfr_vecnorm *v) {
  mpfr_inits2(KDA_MPFR_BOUND_PREC, v->n, v->e, v->n2lo, (mpfr_ptr)0);
}

void kda_mpfr_vecnorm_clear(kda_mpfr_vecnorm *v) { mpfr_clears(v->n, v->e, v->n2lo, (mpfr_ptr)0); }

int kda_mpfr_coef_dot(kda_mpfr_coef *c, mpfr_ptr rop, mpfr_t *x, mpfr_t *y, int64_t n,
                      mpfr_srcptr z, mpfr_rnd_t rnd) {
  for (int64_t i = 0; i < n; i++) mpfr_mul(c->prod.x[i], x[i], y[i], MPFR_RNDN); /* exact */
  int64_t m = n;
  if (z) c->pprod[m++] = (mpfr_ptr)z;
  const int inex = mpfr_sum(rop, c->pprod, (unsigned long)m, rnd);
  c->pprod[n] = c->prod.x[n];
  return inex;
}

/* mid = RN((lo + hi) / 2), which lies in [lo, hi]; err >= max(mid - lo, hi - mid). */
static void midpoint(kda_mpfr_coef *c, mpfr_ptr mid, mpfr_srcptr lo, mpfr_srcptr hi,
                     mpfr_ptr err) {
  mpfr_add(mid, lo, hi, MPFR_RNDN);
  mpfr_div_2ui(mid, mid, 1, MPFR_RNDN);
  mpfr_sub(err, mid, lo, MPFR_RNDU);
  mpfr_sub(BT(c, B_T), hi, mid, MPFR_RNDU);
  mpfr_max(err, err, BT(c, B_T), MPFR_RNDU);
}

/* rop = sum_i x_i^2 (+ eps when with_eps), rounded in direction rnd: the squares of doubles
 * are exact at 2p >= 106 bits, then one correctly rounded sum. */
static void sum_squares(kda_mpfr_coef *c, mpfr_ptr rop, int64_t n, const double *x, double eps,
                        int with_eps, mpfr_rnd_t rnd) {
  for (int64_t i = 0; i < n; i++) {
    mpfr_set_d(c->prod.x[i], x[i], MPFR_RNDN);
    mpfr_sqr(c->prod.x[i], c->prod.x[i], MPFR_RNDN);
  }
  int64_t m = n;
  if (with_eps) mpfr_set_d(c->prod.x[m++], eps, MPFR_RNDN);
  mpfr_sum(rop, c->pprod, (unsigned long)m, rnd);
}

/* [lo, hi] <- s * [lo, hi] for a double s, widened outward. */
static void scale_interval(kda_mpfr_coef *c, mpfr_ptr lo, mpfr_ptr hi, double s) {
  if (s >= 0.0) {
    mpfr_mul_d(lo, lo, s, MPFR_RNDD);
    mpfr_mul_d(hi, hi, s, MPFR_RNDU);
  } else {
    mpfr_mul_d(TMP(c, T_Z), hi, s, MPFR_RNDD);
    mpfr_mul_d(hi, lo, s, MPFR_RNDU);
    mpfr_set(lo, TMP(c, T_Z), MPFR_RNDN); /* same precision: exact */
  }
}

/* The L2 denominators of SPEC.md §4.3 as outward-rounded factors: for fla, the reciprocal
 * root r in [E_LO, E_HI]; for ggml, the floored norm m in [E_LO, E_HI].  Returns 1 when the
 * denominator is exactly zero (x = 0 and eps = 0: the result is the zero vector). */
static int l2_denominator(kda_mpfr_coef *c, int32_t mode, double eps, int64_t n, const double *x) {
  mpfr_ptr slo = TMP(c, T_S_LO), shi = TMP(c, T_S_HI), lo = TMP(c, T_E_LO), hi = TMP(c, T_E_HI);
  if (mode == KDA_L2_FLA) {
    sum_squares(c, slo, n, x, eps, 1, MPFR_RNDD);
    sum_squares(c, shi, n, x, eps, 1, MPFR_RNDU);
    if (mpfr_zero_p(shi)) return 1;
    mpfr_rec_sqrt(lo, shi, MPFR_RNDD); /* 1/sqrt is decreasing */
    mpfr_rec_sqrt(hi, slo, MPFR_RNDU);
    return 0;
  }
  sum_squares(c, slo, n, x, 0.0, 0, MPFR_RNDD);
  sum_squares(c, shi, n, x, 0.0, 0, MPFR_RNDU);
  mpfr_set_d(TMP(c, T_EPS), eps, MPFR_RNDN);
  mpfr_sqrt(lo, slo, MPFR_RNDD);
  mpfr_sqrt(hi, shi, MPFR_RNDU);
  mpfr_max(lo, lo, TMP(c, T_EPS), MPFR_RNDD);
  mpfr_max(hi, hi, TMP(c, T_EPS), MPFR_RNDU);
  return mpfr_zero_p(hi) ? 1 : 0;
}

/* [lo, hi] encloses L2(x)_i given the denominator enclosure of l2_denominator. */
static void l2_element(kda_mpfr_coef *c, int32_t mode, double xi, mpfr_ptr lo, mpfr_ptr hi) {
  mpfr_srcptr dlo = TMP(c, T_E_LO), dhi = TMP(c, T_E_HI);
  if (mode == KDA_L2_OFF) {
    mpfr_set_d(lo, xi, MPFR_RNDN);
    mpfr_set_d(hi, xi, MPFR_RNDN);
  } else if (mode == KDA_L2_FLA) { /* x * r */
    mpfr_mul_d(lo, xi >= 0.0 ? dlo : dhi, xi, MPFR_RNDD);
    mpfr_mul_d(hi, xi >= 0.0 ? dhi : dlo, xi, MPFR_RNDU);
  } else { /* x / m */
    mpfr_d_div(lo, xi, xi >= 0.0 ? dhi : dlo, MPFR_RNDD);
    mpfr_d_div(hi, xi, xi >= 0.0 ? dlo : dhi, MPFR_RNDU);
  }
}

/* Accumulates one element's contribution to the norms of out. */
static void norm_add(kda_mpfr_coef *c, mpfr_srcptr lo, mpfr_srcptr hi, mpfr_srcptr e) {
  mpfr_ptr ab = BT(c, B_ABS), mn = BT(c, B_MIN), t = BT(c, B_T);
  mpfr_abs(ab, lo, MPFR_RNDU);
  mpfr_abs(t, hi, MPFR_RNDU);
  mpfr_max(ab, ab, t, MPFR_RNDU);
  mpfr_sqr(ab, ab, MPFR_RNDU);
  mpfr_add(BT(c, B_N2), BT(c, B_N2), ab, MPFR_RNDU);
  mpfr_sqr(t, e, MPFR_RNDU);
  mpfr_add(BT(c, B_E2), BT(c, B_E2), t, MPFR_RNDU);
  if (mpfr_sgn(lo) > 0 || mpfr_sgn(hi) < 0) { /* the interval avoids 0 */
    mpfr_abs(mn, lo, MPFR_RNDD);
    mpfr_abs(t, hi, MPFR_RNDD);
    mpfr_min(mn, mn, t, MPFR_RNDD);
    mpfr_sqr(mn, mn, MPFR_RNDD);
    mpfr_add(BT(c, B_N2LO), BT(c, B_N2LO), mn, MPFR_RNDD);
  }
}

void kda_mpfr_coef_l2(kda_mpfr_coef *c, const kda_problem *p, int is_q, int64_t n,
                      const double *x, mpfr_t *mid, kda_mpfr_vecnorm *out) {
  const int32_t mode = p->l2_mode;
  const int zero = mode == KDA_L2_OFF ? 0 : l2_denominator(c, mode, p->l2_eps, n, x);
  mpfr_ptr lo = TMP(c, T_LO), hi = TMP(c, T_HI);
  mpfr_set_zero(BT(c, B_N2), 1);
  mpfr_set_zero(BT(c, B_E2), 1);
  mpfr_set_zero(BT(c, B_N2LO), 1);
  for (int64_t i = 0; i < n; i++) {
    if (zero || x[i] == 0.0) {
      mpfr_set_zero(lo, 1);
      mpfr_set_zero(hi, 1);
    } else {
      l2_element(c, mode, x[i], lo, hi);
      if (is_q) scale_interval(c, lo, hi, p->scale);
    }
    midpoint(c, mid[i], lo, hi, BT(c, B_E));
    norm_add(c, lo, hi, BT(c, B_E));
  }
  mpfr_sqrt(out->n, BT(c, B_N2), MPFR_RNDU);
  mpfr_sqrt(out->e, BT(c, B_E2), MPFR_RNDU);
  mpfr_set(out->n2lo, BT(c, B_N2LO), MPFR_RNDD);
}

/* sigma(x) = 1/(1 + e^-x) (x >= 0) or e^x/(1 + e^x) (x < 0), every rounding directed so that
 * rop is below (rnd = RNDD) or above (RNDU) the real sigma(x).  x is negated and restored. */
static void sigmoid_dir(kda_mpfr_coef *c, mpfr_ptr rop, mpfr_ptr x, mpfr_rnd_t rnd) {
  mpfr_ptr z = TMP(c, T_Z), d = TMP(c, T_D);
  const mpfr_rnd_t opp = opposite(rnd);
  if (mpfr_sgn(x) >= 0) { /* decreasing in z = e^-x */
    mpfr_neg(x, x, MPFR_RNDN);
    mpfr_exp(z, x, opp);
    mpfr_neg(x, x, MPFR_RNDN);
    mpfr_add_ui(d, z, 1, opp);
    mpfr_ui_div(rop, 1, d, rnd);
  } else { /* z/(1+z) is increasing in z = e^x */
    mpfr_exp(z, x, rnd);
    mpfr_add_ui(d, z, 1, opp);
    mpfr_div(rop, z, d, rnd);
  }
}

/* softplus(y) = log1p(e^y) (y <= 0) or y + log1p(e^-y) (y > 0), directed like sigmoid_dir;
 * both forms are the same real function and neither overflows. */
static void softplus_dir(kda_mpfr_coef *c, mpfr_ptr rop, mpfr_ptr y, mpfr_rnd_t rnd) {
  mpfr_ptr z = TMP(c, T_Z);
  if (mpfr_sgn(y) > 0) {
    mpfr_neg(y, y, MPFR_RNDN);
    mpfr_exp(z, y, rnd);
    mpfr_neg(y, y, MPFR_RNDN);
    mpfr_log1p(z, z, rnd);
    mpfr_add(rop, y, z, rnd);
  } else {
    mpfr_exp(z, y, rnd);
    mpfr_log1p(rop, z, rnd);
  }
}

/* [G_LO, G_HI] encloses g_eff of one gate channel (SPEC.md §4.1); E_LO..E_HI hold exp(A_log). */
static void gate_interval(kda_mpfr_coef *c, const kda_problem *p, int has_A, double g, double b) {
  mpfr_ptr glo = TMP(c, T_G_LO), ghi = TMP(c, T_G_HI);
  mpfr_srcptr Elo = TMP(c, T_E_LO), Ehi = TMP(c, T_E_HI);
  if (p->gate_mode == KDA_GATE_LOG) {
    mpfr_set_d(glo, g, MPFR_RNDN);
    mpfr_set_d(ghi, g, MPFR_RNDN);
    return;
  }
  kda_mpfr_exact_sum(c->y, g, b);
  mpfr_ptr y = c->y, lo = TMP(c, T_S_LO), hi = TMP(c, T_S_HI);
  if (p->gate_mode == KDA_GATE_SOFTPLUS) { /* -E * softplus(y): decreasing in E and sp */
    softplus_dir(c, lo, y, MPFR_RNDD);
    softplus_dir(c, hi, y, MPFR_RNDU);
    mpfr_mul(glo, Ehi, hi, MPFR_RNDU);
    mpfr_neg(glo, glo, MPFR_RNDN);
    mpfr_mul(ghi, Elo, lo, MPFR_RNDD);
    mpfr_neg(ghi, ghi, MPFR_RNDN);
    return;
  }
  /* lb * sigma(x), x = E * y or y; lb < 0, so decreasing in sigma. */
  mpfr_ptr xlo = TMP(c, T_X_LO), xhi = TMP(c, T_X_HI);
  if (has_A) {
    const int pos = mpfr_sgn(y) >= 0;
    mpfr_mul(xlo, pos ? Elo : Ehi, y, MPFR_RNDD);
    mpfr_mul(xhi, pos ? Ehi : Elo, y, MPFR_RNDU);
  }
  sigmoid_dir(c, lo, has_A ? xlo : y, MPFR_RNDD);
  sigmoid_dir(c, hi, has_A ? xhi : y, MPFR_RNDU);
  mpfr_mul_d(glo, hi, p->lower_bound, MPFR_RNDD);
  mpfr_mul_d(ghi, lo, p->lower_bound, MPFR_RNDU);
}

int kda_mpfr_coef_gate(kda_mpfr_coef *c, const kda_problem *p, int64_t GW, const double *g,
                       const double *A_log, const double *dt_bias, mpfr_t *mid, mpfr_ptr amax,
                       mpfr_ptr ea) {
  const int has_A = A_log != NULL;
  if (has_A) {
    mpfr_set_d(TMP(c, T_A), *A_log, MPFR_RNDN);
    mpfr_exp(TMP(c, T_E_LO), TMP(c, T_A), MPFR_RNDD);
    mpfr_exp(TMP(c, T_E_HI), TMP(c, T_A), MPFR_RNDU);
  }
  mpfr_set_zero(amax, 1);
  mpfr_set_zero(ea, 1);
  mpfr_ptr lo = TMP(c, T_LO), hi = TMP(c, T_HI), e = BT(c, B_E);
  for (int64_t ch = 0; ch < GW; ch++) {
    gate_interval(c, p, has_A, g[ch], dt_bias ? dt_bias[ch] : 0.0);
    mpfr_exp(lo, TMP(c, T_G_LO), MPFR_RNDD);
    mpfr_exp(hi, TMP(c, T_G_HI), MPFR_RNDU);
    if (mpfr_inf_p(hi) || (!mpfr_zero_p(hi) && mpfr_get_exp(hi) > KDA_MPFR_EXP_GUARD)) return -1;
    if (mpfr_zero_p(hi) || mpfr_get_exp(hi) < KDA_MPFR_FLUSH_EXP) {
      mpfr_set_zero(mid[ch], 1); /* flushed: the whole factor is error */
      mpfr_set(e, hi, MPFR_RNDU);
    } else {
      midpoint(c, mid[ch], lo, hi, e);
    }
    mpfr_max(amax, amax, hi, MPFR_RNDU);
    mpfr_max(ea, ea, e, MPFR_RNDU);
  }
  return 0;
}

void kda_mpfr_coef_beta(kda_mpfr_coef *c, int32_t beta_mode, double beta, mpfr_ptr lo,
                        mpfr_ptr hi, mpfr_ptr mid, mpfr_ptr eb) {
  if (beta_mode == KDA_BETA_PROB) {
    mpfr_set_d(lo, beta, MPFR_RNDN);
    mpfr_set_d(hi, beta, MPFR_RNDN);
  } else {
    mpfr_ptr x = TMP(c, T_A);
    mpfr_set_d(x, beta, MPFR_RNDN);
    sigmoid_dir(c, lo, x, MPFR_RNDD);
    sigmoid_dir(c, hi, x, MPFR_RNDU);
    if (beta_mode == KDA_BETA_LOGIT_NEG) { /* 2 sigma: exact scaling */
      mpfr_mul_2ui(lo, lo, 1, MPFR_RNDN);
      mpfr_mul_2ui(hi, hi, 1, MPFR_RNDN);
    }
  }
  midpoint(c, mid, lo, hi, eb);
}

/* kda_cert_gate.c: the decay factors of the fast certifier with half the MPFR calls of
 * kda_mpfr_coef_gate (SPEC.md §8.12, "coefficients").
 * SPDX-License-Identifier: MIT
 *
 * kda_mpfr_coef_gate evaluates every monotone composition twice, rounding down and up.  When
 * both evaluations have the same argument (exp(y) of the exact y, exp(g) of a stored g), one
 * call rounded down and its ternary value give both ends: RNDD(f(x)) <= f(x) <= the next
 * number above it (or = when exact).  When the arguments differ only by the width d of an
 * enclosure, a bound on the function's growth gives the upper end from the lower one:
 * log1p(z + d) <= log1p(z) + d (z >= 0, derivative <= 1) and exp(x + d) <= exp(x)(1 + d + d^2)
 * (0 <= d <= 1).  Every end stays rigorous; the enclosures are a few ulps wider than those of
 * the MPFR path, which therefore keeps its own code (its manifests record its bounds).
 */
#include <math.h>

#include "kda_cert_impl.h"
#include "kda_mpfr_impl.h"

void kda_cert_gate_init(kda_cert_gate *G, mpfr_prec_t prec) {
  for (int i = 0; i < KDA_CERT_GATE_TMP; i++) mpfr_init2(G->t[i], prec);
  mpfr_init2(G->y, 64);
  mpfr_init2(G->b, KDA_MPFR_BOUND_PREC);
}

void kda_cert_gate_clear(kda_cert_gate *G) {
  for (int i = 0; i < KDA_CERT_GATE_TMP; i++) mpfr_clear(G->t[i]);
  mpfr_clear(G->y);
  mpfr_clear(G->b);
}

/* hi <- the next number above lo when inex says lo is below the exact value, else lo. */
static void upper(mpfr_ptr hi, mpfr_srcptr lo, int inex) {
  mpfr_set(hi, lo, MPFR_RNDN);
  if (inex) mpfr_nextabove(hi);
}

/* [lo, hi] encloses f(x) = exp(x) at an exact x: one call. */
static void exp_both(mpfr_ptr lo, mpfr_ptr hi, mpfr_srcptr x) {
  upper(hi, lo, mpfr_exp(lo, x, MPFR_RNDD));
}

/* [lo, hi] encloses log1p(z*) for z* in [zlo, zhi], zlo >= 0: one call. */
static void log1p_both(mpfr_ptr lo, mpfr_ptr hi, mpfr_srcptr zlo, mpfr_srcptr zhi, mpfr_ptr d) {
  upper(hi, lo, mpfr_log1p(lo, zlo, MPFR_RNDD));
  mpfr_sub(d, zhi, zlo, MPFR_RNDU);
  mpfr_add(hi, hi, d, MPFR_RNDU);
}

/* [lo, hi] encloses softplus(y) of the exact y (G->y), both forms as in SPEC.md §8.3. */
static void softplus_both(kda_cert_gate *G, mpfr_ptr lo, mpfr_ptr hi) {
  mpfr_ptr zlo = G->t[0], zhi = G->t[1], d = G->t[2];
  const int pos = mpfr_sgn(G->y) > 0;
  if (pos) mpfr_neg(G->y, G->y, MPFR_RNDN);
  exp_both(zlo, zhi, G->y);
  if (pos) mpfr_neg(G->y, G->y, MPFR_RNDN);
  log1p_both(lo, hi, zlo, zhi, d);
  if (pos) { /* y + log1p(e^-y) */
    mpfr_add(lo, lo, G->y, MPFR_RNDD);
    mpfr_add(hi, hi, G->y, MPFR_RNDU);
  }
}

/* [alo, ahi] encloses a* = exp(g_eff) of one channel. */
static void channel(kda_cert_gate *G, const kda_problem *p, int has_A, double g, double b,
                    mpfr_ptr alo, mpfr_ptr ahi) {
  mpfr_ptr glo = G->t[3], ghi = G->t[4], slo = G->t[5], shi = G->t[6], d = G->t[7];
  if (p->gate_mode == KDA_GATE_LOG) {
    mpfr_set_d(glo, g, MPFR_RNDN);
    exp_both(alo, ahi, glo);
    return;
  }
  kda_mpfr_exact_sum(G->y, g, b);
  softplus_both(G, slo, shi);
  mpfr_srcptr Elo = G->t[8], Ehi = G->t[9];
  if (has_A) { /* g_eff = -E softplus(y): decreasing in E and softplus */
    mpfr_mul(glo, Ehi, shi, MPFR_RNDU);
    mpfr_mul(ghi, Elo, slo, MPFR_RNDD);
  } else {
    mpfr_set(glo, shi, MPFR_RNDU);
    mpfr_set(ghi, slo, MPFR_RNDD);
  }
  mpfr_neg(glo, glo, MPFR_RNDN);
  mpfr_neg(ghi, ghi, MPFR_RNDN);
  upper(ahi, alo, mpfr_exp(alo, glo, MPFR_RNDD)); /* >= exp(glo) */
  mpfr_sub(d, ghi, glo, MPFR_RNDU);
  if (mpfr_cmp_ui(d, 1) > 0) { /* never at p >= 64 in practice: no shortcut */
    mpfr_exp(ahi, ghi, MPFR_RNDU);
    return;
  }
  mpfr_sqr(glo, d, MPFR_RNDU); /* glo is free now: 1 + d + d^2 */
  mpfr_add(glo, glo, d, MPFR_RNDU);
  mpfr_add_ui(glo, glo, 1, MPFR_RNDU);
  mpfr_mul(ahi, ahi, glo, MPFR_RNDU);
}

int kda_cert_gate_enclose(kda_cert_gate *G, const kda_problem *p, int64_t GW, const double *g,
                          const double *A_log, const double *dt_bias, mpfr_t *mid,
                          mpfr_ptr amax, mpfr_ptr ea) {
  if (p->gate_mode != KDA_GATE_LOG && p->gate_mode != KDA_GATE_SOFTPLUS) return 1;
  const int has_A = A_log != NULL && p->gate_mode == KDA_GATE_SOFTPLUS;
  if (has_A) {
    mpfr_set_d(G->t[0], *A_log, MPFR_RNDN);
    exp_both(G->t[8], G->t[9], G->t[0]);
  }
  mpfr_set_zero(amax, 1);
  mpfr_set_zero(ea, 1);
  mpfr_ptr lo = G->t[10], hi = G->t[11], e = G->b;
  for (int64_t ch = 0; ch < GW; ch++) {
    channel(G, p, has_A, g[ch], dt_bias ? dt_bias[ch] : 0.0, lo, hi);
    if (mpfr_inf_p(hi) || (!mpfr_zero_p(hi) && mpfr_get_exp(hi) > KDA_MPFR_EXP_GUARD)) return -1;
    if (mpfr_zero_p(hi) || mpfr_get_exp(hi) < KDA_MPFR_FLUSH_EXP) {
      mpfr_set_zero(mid[ch], 1); /* flushed: the whole factor is error (SPEC.md §8.3) */
      mpfr_set(e, hi, MPFR_RNDU);
    } else { /* mid = RN((lo + hi) / 2), e >= max(mid - lo, hi - mid) */
      mpfr_add(mid[ch], lo, hi, MPFR_RNDN);
      mpfr_div_2ui(mid[ch], mid[ch], 1, MPFR_RNDN);
      mpfr_sub(e, mid[ch], lo, MPFR_RNDU);
      mpfr_sub(G->t[7], hi, mid[ch], MPFR_RNDU);
      mpfr_max(e, e, G->t[7], MPFR_RNDU);
    }
    mpfr_max(amax, amax, hi, MPFR_RNDU);
    mpfr_max(ea, ea, e, MPFR_RNDU);
  }
  return 0;
}

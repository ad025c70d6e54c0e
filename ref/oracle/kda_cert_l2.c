/* kda_cert_l2.c: the fast certifier's L2 normalisation of q and k in double-double, with the
 * sum of squares exact in fixed point (SPEC.md §8.12, "L2 normalisation in double-double").
 * SPDX-License-Identifier: MIT
 *
 * Every x_i is m_i 2^f_i with a 53-bit integer m_i, so x_i^2 = m_i^2 2^(2 f_i) with m_i^2 below
 * 2^106: an unsigned 128-bit integer.  All squares (and eps for fla) are added in units of
 * 2^L, L chosen from the largest term so that the sum cannot overflow; terms below the unit
 * lose their low bits, at most one unit each, so the exact sum s* lies in
 * [S 2^L, (S + n + 1) 2^L] with S the integer sum: relative width about 2^-110 at n = 128.
 * The denominator is then two directed MPFR calls per vector on that interval (1/sqrt for
 * fla, max(sqrt, eps) and its reciprocal for ggml), its midpoint rounded to dd with the
 * rounding counted, and every element x_i times it in dd (one DWTimesFP3, error at most
 * KDA_CERT_UC).  Out of range (values whose squares leave the double range, no 128-bit
 * integers, a zero denominator, a raised floating-point flag): 1, the caller uses MPFR.
 */
#include <math.h>

#include "kda_cert_impl.h"
#include "kda_cert_kern.h" /* the dd building blocks (no kernel: KDA_CERT_STEP_NAME unset) */


static double up(double x) { return x + fabs(x) * 0x1p-50; }
static double dn(double x) { return x - fabs(x) * 0x1p-50; }
static double au(double a, double b) { return up(a + b); }
static double mu(double a, double b) { return up(a * b); }

void kda_cert_l2_init(kda_cert_l2 *w) {
  mpfr_inits2(256, w->slo, w->shi, w->dlo, w->dhi, w->t, w->s0, w->s1, (mpfr_ptr)0);
}

void kda_cert_l2_clear(kda_cert_l2 *w) {
  mpfr_clears(w->slo, w->shi, w->dlo, w->dhi, w->t, w->s0, w->s1, (mpfr_ptr)0);
}

#ifdef __SIZEOF_INT128__
typedef unsigned __int128 u128;

/* x = m 2^f, m a 53-bit integer (x != 0, finite). */
static uint64_t split(double x, int *f) {
  const double m = frexp(fabs(x), f);
  *f -= 53;
  return (uint64_t)ldexp(m, 53);
}

/* m 2^f in units of 2^L, truncated (m 2^(f - L) < 2^127 by the choice of L). */
static u128 units(u128 m, int f, int L) {
  if (f >= L) return m << (f - L);
  return L - f >= 128 ? 0 : m >> (L - f);
}

/* The integer sums S (squares) and Se (squares and eps) with their unit L; 1 when the terms
 * leave the range where the conversions below are exact. */
static int sums(int64_t n, const double *x, double eps, int with_eps, u128 *S, u128 *Se,
                int *L) {
  int top = -100000, f;
  for (int64_t i = 0; i < n; i++)
    if (x[i] != 0.0) {
      split(x[i], &f);
      if (2 * f + 106 > top) top = 2 * f + 106; /* x_i^2 < 2^(2 f + 106) */
    }
  if (with_eps && eps != 0.0) {
    split(eps, &f);
    if (f + 53 > top) top = f + 53;
  }
  if (top == -100000) return 1; /* no term: a zero denominator or a zero vector, MPFR's */
  if (top < -900 || top > 900) return 1;
  int lg = 0;
  while (((int64_t)1 << lg) < n + 1) lg++;
  if (lg > 20) return 1;
  *L = top - 127 + lg; /* each term < 2^(127 - lg) units, n + 1 of them < 2^127 */
  u128 s = 0;
  for (int64_t i = 0; i < n; i++)
    if (x[i] != 0.0) {
      const u128 m = split(x[i], &f);
      s += units(m * m, 2 * f, *L);
    }
  *S = s;
  if (with_eps && eps != 0.0) {
    const u128 m = split(eps, &f);
    s += units(m, f, *L);
  }
  *Se = s;
  return 0;
}

/* rop = v 2^L exactly (rop has 256 bits). */
static void set_units(mpfr_ptr rop, u128 v, int L) {
  mpfr_set_zero(rop, 1);
  for (int k = 3; k >= 0; k--) { /* 32 bits at a time, each exact as a double */
    mpfr_mul_2ui(rop, rop, 32, MPFR_RNDN);
    mpfr_add_d(rop, rop, (double)(uint32_t)(v >> (32 * k)), MPFR_RNDN);
  }
  mpfr_mul_2si(rop, rop, L, MPFR_RNDN);
}

int kda_cert_l2_factor(kda_cert_l2 *w, const kda_problem *p, int64_t n, const double *x,
                       double *sxlo, double *sxhi, kda_cert_dv *r) {
  u128 S, Se;
  int L;
  const int fla = p->l2_mode == KDA_L2_FLA;
  if (sums(n, x, p->l2_eps, fla, &S, &Se, &L)) return 1;
  const u128 slack = (u128)(n + 1);
  /* [S 2^L, (S + n + 1) 2^L] holds sum x^2 (and Se that sum plus eps) */
  *sxlo = dn(ldexp((double)S, L));
  *sxhi = up(ldexp((double)(S + slack), L));
  set_units(w->slo, fla ? Se : S, L);
  set_units(w->shi, (fla ? Se : S) + slack, L);
  mpfr_set(w->s0, w->slo, MPFR_RNDN); /* kept for the tests */
  mpfr_set(w->s1, w->shi, MPFR_RNDN);
  if (fla) { /* r = 1/sqrt(s + eps), decreasing */
    mpfr_rec_sqrt(w->dlo, w->shi, MPFR_RNDD);
    mpfr_rec_sqrt(w->dhi, w->slo, MPFR_RNDU);
  } else { /* r = 1/max(sqrt(s), eps) */
    mpfr_sqrt(w->dlo, w->slo, MPFR_RNDD);
    mpfr_sqrt(w->dhi, w->shi, MPFR_RNDU);
    mpfr_set_d(w->t, p->l2_eps, MPFR_RNDN);
    mpfr_max(w->dlo, w->dlo, w->t, MPFR_RNDD);
    mpfr_max(w->dhi, w->dhi, w->t, MPFR_RNDU);
    if (mpfr_zero_p(w->dlo)) return 1;
    mpfr_ui_div(w->t, 1, w->dlo, MPFR_RNDU);
    mpfr_ui_div(w->dlo, 1, w->dhi, MPFR_RNDD);
    mpfr_set(w->dhi, w->t, MPFR_RNDU);
  }
  /* mid = RN((lo + hi)/2) -> dd; e >= max(mid - lo, hi - mid) + |mid - dd| */
  mpfr_add(w->t, w->dlo, w->dhi, MPFR_RNDN);
  mpfr_div_2ui(w->t, w->t, 1, MPFR_RNDN);
  r->h = mpfr_get_d(w->t, MPFR_RNDN);
  mpfr_sub_d(w->slo, w->t, r->h, MPFR_RNDN); /* exact (256 bits) */
  r->l = mpfr_get_d(w->slo, MPFR_RNDN);
  mpfr_sub_d(w->slo, w->slo, r->l, MPFR_RNDN); /* exact */
  mpfr_abs(w->slo, w->slo, MPFR_RNDN);
  mpfr_sub(w->shi, w->t, w->dlo, MPFR_RNDU);
  mpfr_sub(w->dlo, w->dhi, w->t, MPFR_RNDU);
  mpfr_max(w->shi, w->shi, w->dlo, MPFR_RNDU);
  mpfr_add(w->shi, w->shi, w->slo, MPFR_RNDU);
  r->e = mpfr_get_d(w->shi, MPFR_RNDU);
  return !(r->h > 0.0) || !(r->e < r->h);
}

static int l2_run(kda_cert_l2 *w, const kda_problem *p, int is_q, int64_t n, const double *x,
                  double *h, double *l, kda_cert_l2_norms *out) {
  double sxlo, sxhi;
  kda_cert_dv r = {1.0, 0.0, 0.0};
  int64_t nz = 0;
  for (int64_t i = 0; i < n; i++) nz += x[i] != 0.0;
  if (nz == 0) { /* the zero vector in every mode (SPEC.md §8.3): exact, so that ε = 0 */
    for (int64_t i = 0; i < n; i++) h[i] = l[i] = 0.0;
    *out = (kda_cert_l2_norms){0.0, 0.0, 0.0};
    return 0;
  }
  if (p->l2_mode == KDA_L2_OFF) {
    u128 S, Se;
    int L;
    if (sums(n, x, 0.0, 0, &S, &Se, &L)) return 1;
    sxlo = dn(ldexp((double)S, L));
    sxhi = up(ldexp((double)(S + (u128)(n + 1)), L));
  } else if (kda_cert_l2_factor(w, p, n, x, &sxlo, &sxhi, &r)) {
    return 1;
  }
  if (is_q) { /* r scale (exact when l2 is off: r = 1) */
    double rh, rl;
    kc_mul_d(r.h, r.l, p->scale, &rh, &rl);
    r.e = au(mu(r.e, fabs(p->scale)), mu(KDA_CERT_UC, au(fabs(rh), fabs(rl))));
    if (p->l2_mode == KDA_L2_OFF) r.e = 0.0;
    r.h = rh;
    r.l = rl;
  }
  for (int64_t i = 0; i < n; i++) kc_mul_d(r.h, r.l, x[i], &h[i], &l[i]);
  /* ||x|| <= xn; the elements are x_i r~ (1 + d_i) with |d_i| <= UC / (1 - UC), exactly
   * x_i r~ when l2 is off (r~ is one double: a two_prod) */
  const double xn = up(sqrt(sxhi)), rm = au(fabs(r.h), fabs(r.l));
  const double ud = p->l2_mode == KDA_L2_OFF ? 0.0 : KDA_CERT_UC;
  out->n = mu(mu(xn, au(rm, r.e)), 1.0 + 0x1p-99); /* >= ||dd|| and ||x*|| */
  out->e = au(mu(xn, r.e), mu(ud, mu(xn, rm)));
  const double rlo = dn(dn(fabs(r.h) - fabs(r.l)) - r.e); /* <= |r*| */
  out->n2lo = rlo > 0.0 ? dn(sxlo * dn(rlo * rlo)) : 0.0;
  return 0;
}

int kda_cert_dd_l2(kda_cert_l2 *w, const kda_problem *p, int is_q, int64_t n, const double *x,
                   double *h, double *l, kda_cert_l2_norms *out) {
  kda_cert_fpregion f;
  kda_cert_fp_enter(&f);
  return kda_cert_fp_leave(&f, l2_run(w, p, is_q, n, x, h, l, out));
}
#else
int kda_cert_l2_factor(kda_cert_l2 *w, const kda_problem *p, int64_t n, const double *x,
                       double *sxlo, double *sxhi, kda_cert_dv *r) {
  return 1;
}

int kda_cert_dd_l2(kda_cert_l2 *w, const kda_problem *p, int is_q, int64_t n, const double *x,
                   double *h, double *l, kda_cert_l2_norms *out) {
  return 1; /* no 128-bit integers: MPFR's */
}
#endif

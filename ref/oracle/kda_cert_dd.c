/* kda_cert_dd.c: the fast certifier's decay factors in double-double, every value with a
 * rigorous error bound carried along (SPEC.md §8.12, "Decay factors in double-double").
 * SPDX-License-Identifier: MIT
 *
 * A value is a dd number h + l and a bound e on its distance to the exact real it stands for
 * (kda_cert_dv).  Each dd operation is one of Joldes, Muller and Popescu's blocks with relative
 * error at most KDA_CERT_UC (with margin), so its bound is the propagated input bounds plus
 * KDA_CERT_UC times the result, all in doubles rounded upward by hand (up()).  exp reduces
 * x = k ln2/64 + r with ln2/64 split so that k C1 is exact, evaluates 12 Taylor terms of exp(r)
 * (|r| < 0.0117, remainder below 2^-118) and multiplies by a table of 2^(j/64) made with MPFR;
 * log1p(z) is one Newton step on exp from a deterministic start, its remainder bounded from the
 * computed residual.  Arguments outside the proven range, and any run that raises underflow,
 * overflow or invalid, return 1: the caller uses the MPFR enclosures instead.
 */
#include <fenv.h>
#include <math.h>

#include "kda_cert_impl.h"
#include "kda_cert_kern.h" /* the dd building blocks (no kernel: KDA_CERT_STEP_NAME unset) */

#define FLAGS (FE_UNDERFLOW | FE_OVERFLOW | FE_INVALID)

typedef kda_cert_dv dv;

/* ---- Upward bound arithmetic (SPEC.md §8.12, "Bound arithmetic"). */
static inline double up(double x) { return x + fabs(x) * 0x1p-50; }
static double au(double a, double b) { return up(a + b); }
static double mu(double a, double b) { return up(a * b); }
/* >= |h + l| */
static inline double mag(dv x) { return au(fabs(x.h), fabs(x.l)); }

static dv exact(double x) { return (dv){x, 0.0, 0.0}; }

/* |z - (x~ + y~)| <= UC |x~ + y~| <= UC |z| / (1 - UC), which mu(UC, mag(z)) covers. */
static inline dv dv_add(dv x, dv y) {
  dv z;
  kc_add(x.h, x.l, y.h, y.l, &z.h, &z.l);
  z.e = au(au(x.e, y.e), mu(KDA_CERT_UC, mag(z)));
  return z;
}

/* |x~ y~ - x* y*| <= |x~| e_y + |y*| e_x with |y*| <= |y~| + e_y. */
static inline dv dv_mul(dv x, dv y) {
  dv z;
  kc_mul(x.h, x.l, y.h, y.l, &z.h, &z.l);
  z.e = au(au(mu(mag(x), y.e), mu(au(mag(y), y.e), x.e)), mu(KDA_CERT_UC, mag(z)));
  return z;
}

static dv dv_neg(dv x) { return (dv){-x.h, -x.l, x.e}; }

/* ---- Constants. */

/* x (p bits, |x - x*| <= 2^(1-p) |x|) rounded to dd with the bound of both roundings. */
static dv from_mpfr(mpfr_srcptr x, mpfr_ptr t) {
  dv r = {mpfr_get_d(x, MPFR_RNDN), 0.0, 0.0};
  mpfr_sub_d(t, x, r.h, MPFR_RNDN); /* exact: below ulp(h)/2, on x's grid */
  r.l = mpfr_get_d(t, MPFR_RNDN);
  mpfr_sub_d(t, t, r.l, MPFR_RNDN); /* exact likewise */
  mpfr_abs(t, t, MPFR_RNDN);
  r.e = au(mpfr_get_d(t, MPFR_RNDU), ldexp(fabs(r.h), 2 - (int)mpfr_get_prec(x)));
  return r;
}

void kda_cert_dd_init(kda_cert_dd *d) {
  mpfr_t x, t, c;
  mpfr_inits2(256, x, t, c, (mpfr_ptr)0);
  for (int j = 0; j < 64; j++) {
    mpfr_set_si_2exp(x, j, -6, MPFR_RNDN);
    mpfr_exp2(x, x, MPFR_RNDN);
    d->T[j] = from_mpfr(x, t);
  }
  for (int n = 0; n < 12; n++) {
    mpfr_fac_ui(x, (unsigned long)n, MPFR_RNDN); /* exact: n! < 2^29 */
    mpfr_ui_div(x, 1, x, MPFR_RNDN);
    d->c[n] = from_mpfr(x, t);
  }
  mpfr_const_log2(x, MPFR_RNDN);
  mpfr_div_2ui(x, x, 6, MPFR_RNDN);
  mpfr_set_prec(c, 32);
  mpfr_set(c, x, MPFR_RNDN);
  d->C1 = mpfr_get_d(c, MPFR_RNDN); /* exact */
  mpfr_sub(x, x, c, MPFR_RNDN);     /* exact */
  const dv c2 = from_mpfr(x, t);
  d->C2h = c2.h;
  d->C2l = c2.l;
  d->eC = c2.e;
  d->E_state = 0;
  mpfr_clears(x, t, c, (mpfr_ptr)0);
}

/* ---- exp. */

/* exp(r*) for |r* - r~| <= dr, r~ = r.h + r.l, |r~| + dr <= R < 0.0117: Taylor to degree 11
 * by Horner in dd at r~, the remainder |r~|^12/12! e^|r~| and the argument error
 * e^R (e^dr - 1) <= 1.03 dr added. */
static dv exp_small(const kda_cert_dd *d, dv r, double dr, double R) {
  const dv x = {r.h, r.l, 0.0};
  dv z = d->c[11];
  for (int n = 10; n >= 0; n--) z = dv_add(dv_mul(z, x), d->c[n]);
  const double R2 = mu(R, R), R4 = mu(R2, R2);
  /* e^R <= 1.02, 12! = 479001600; below 2^-70, R^12/12! < 2^-860 (not computed: up() of a
   * number below 2^-972 would underflow) */
  const double rem = R < 0x1p-70 ? 0x1p-860 : mu(mu(mu(R4, R4), R4), up(1.02 / 479001600.0));
  z.e = au(z.e, au(rem, mu(1.03, dr)));
  return z;
}

static int exp_run(const kda_cert_dd *d, dv x, dv *out) {
  if (x.h == 0.0 && x.l == 0.0 && x.e == 0.0) {
    *out = exact(1.0);
    return 0;
  }
  if (!(fabs(x.h) <= 540.0) || fabs(x.h) < 0x1p-300 || !(x.e <= 0x1p-20)) return 1;
  const double kf = nearbyint(x.h * 92.332482616893657); /* ~64/ln2: any integer is correct */
  dv t;
  kc_two_sum(x.h, -(kf * d->C1), &t.h, &t.l); /* k C1 exact (|k| < 2^16), the sum exact */
  t.e = 0.0;
  dv m2;
  kc_mul_d(d->C2h, d->C2l, kf, &m2.h, &m2.l);
  m2.e = au(mu(KDA_CERT_UC, mag(m2)), mu(fabs(kf), d->eC)); /* k (ln2/64 - C1) */
  const dv r = dv_add(dv_add(t, exact(x.l)), dv_neg(m2));  /* x~ - k ln2/64 */
  const double R = au(mag(r), r.e);
  if (!(R < 0x1.8p-7)) return 1;
  const dv e = exp_small(d, r, r.e, R);
  const long k = (long)kf, j = ((k % 64) + 64) % 64, m = (k - j) / 64;
  dv y = dv_mul(d->T[j], e);
  y.h = ldexp(y.h, (int)m); /* exact: no underflow (the flags are tested) */
  y.l = ldexp(y.l, (int)m);
  y.e = ldexp(y.e, (int)m);
  /* the argument error: |exp(x*) - exp(x~)| <= exp(x~) (e^ex - 1) <= A ex (1 + ex) */
  const double A = au(mag(y), y.e);
  y.e = au(y.e, mu(A, mu(x.e, au(1.0, x.e))));
  *out = y;
  return 0;
}

void kda_cert_fp_enter(kda_cert_fpregion *f) {
  fegetexceptflag(&f->saved, FLAGS);
  feclearexcept(FLAGS);
}

int kda_cert_fp_leave(const kda_cert_fpregion *f, int r) {
  if (fetestexcept(FLAGS)) r = 1;
  fesetexceptflag(&f->saved, FLAGS);
  return r;
}

/* exp_run inside a flag-tested region: 1 when a flag was raised (the result is not trusted);
 * the caller's flags are restored. */
int kda_cert_dd_exp(const kda_cert_dd *d, kda_cert_dv x, kda_cert_dv *out) {
  kda_cert_fpregion f;
  kda_cert_fp_enter(&f);
  return kda_cert_fp_leave(&f, exp_run(d, x, out));
}

/* ---- log1p and softplus. */

/* A start for Newton on log1p(z), z in (0, 1]: 2 atanh(s), s = z/(2 + z) <= 1/3, by 17 terms
 * of its series in plain double.  Any start is correct (the step below bounds its own
 * remainder); this one is a few ulps accurate and, IEEE operations only, the same on every
 * platform (libm's log1p may differ by an ulp between libms, and would change dd bits). */
static double log1p_start(double z) {
  const double s = z / (2.0 + z), u = s * s;
  double p = 1.0 / 33.0;
  for (int n = 15; n >= 0; n--) p = p * u + 1.0 / (double)(2 * n + 1);
  return 2.0 * s * p;
}

/* log1p(z*) for z* within z.e of z~ in (0, 1]: N = L0 - 1 + (1 + z~) e^-L0 from L0 =
 * log1p_start(z.h).  With d = L0 - log1p(z~), (1 + z~) e^-L0 = e^-d and N - log1p(z~) =
 * e^-d - 1 + d in [0, d^2/2 e^|d|].  For delta >= |e^-d - 1|: |d| <= delta / (1 - delta), so
 * the Newton remainder is at most 0.51 delta^2 when delta <= 2^-40 and (2 delta)^2 when
 * delta <= 1/4.  The argument error passes with factor <= 1 (log1p' <= 1 on [0, 1]).  Below
 * 2^-200, log1p(z) = z within z^2/2. */
static int log1p_run(const kda_cert_dd *d, dv z, dv *out) {
  if (!(z.h > 0.0 && z.h <= 1.0 && z.e <= 0.5 * z.h)) return 1;
  if (z.h < 0x1p-200) { /* z - z^2/2 <= log1p(z) <= z, z^2/2 <= 2^-200 z */
    *out = z;
    out->e = au(z.e, mu(au(z.h, z.e), 0x1p-200));
    return 0;
  }
  const double L0 = log1p_start(z.h);
  if (!(L0 > 0.0)) return 1;
  dv w;
  if (exp_run(d, exact(-L0), &w)) return 1;
  const dv pr = dv_mul(dv_add(exact(1.0), (dv){z.h, z.l, 0.0}), w);
  const dv t = dv_add(pr, exact(-1.0));
  const double delta = au(mag(t), t.e);
  if (!(delta <= 0.25)) return 1;
  const double nt = delta <= 0x1p-40 ? mu(mu(0.51, delta), delta) : mu(mu(4.0, delta), delta);
  dv N = dv_add(t, exact(L0));
  N.e = au(au(N.e, nt), z.e);
  *out = N;
  return 0;
}

/* softplus(y), y = g + b exact in dd: log1p(e^y) (y <= 0) or y + log1p(e^-y) (y > 0). */
static int softplus_run(const kda_cert_dd *d, double g, double b, dv *out) {
  dv y;
  kc_two_sum(g, b, &y.h, &y.l); /* exact (the flags catch an overflow) */
  y.e = 0.0;
  if (!(fabs(y.h) <= 500.0)) return 1;
  const int pos = y.h > 0.0; /* normalised: the sign of y.h is the sign of y */
  dv z, L;
  if (exp_run(d, pos ? dv_neg(y) : y, &z) || log1p_run(d, z, &L)) return 1;
  *out = pos ? dv_add(y, L) : L;
  return 0;
}

int kda_cert_dd_softplus(const kda_cert_dd *d, double g, double b, kda_cert_dv *out) {
  kda_cert_fpregion f;
  kda_cert_fp_enter(&f);
  return kda_cert_fp_leave(&f, softplus_run(d, g, b, out));
}

/* ---- The decay factor of one channel. */

/* g_eff in dd: g (log gate, exact) or -E softplus(g + dt_bias). */
static int g_eff(kda_cert_dd *d, const kda_problem *p, double g, const double *A_log,
                 const double *dt_bias, dv *x) {
  if (p->gate_mode == KDA_GATE_LOG) {
    *x = exact(g);
    return 0;
  }
  dv sp;
  if (softplus_run(d, g, dt_bias ? *dt_bias : 0.0, &sp)) return 1;
  if (!A_log) {
    *x = dv_neg(sp);
    return 0;
  }
  if (d->E_state == 0 || d->A_log != *A_log) { /* per head: A_log changes with the head */
    d->A_log = *A_log;
    d->E_state = kda_cert_dd_exp(d, exact(*A_log), &d->E) ? -1 : 1; /* its own flag test */
  }
  if (d->E_state < 0) return 1;
  *x = dv_neg(dv_mul(d->E, sp));
  return 0;
}

static int gate_run(kda_cert_dd *d, const kda_problem *p, double g, const double *A_log,
                    const double *dt_bias, dv *out, double *hi, int *le1) {
  if (p->gate_mode != KDA_GATE_LOG && p->gate_mode != KDA_GATE_SOFTPLUS) return 1;
  dv x;
  if (g_eff(d, p, g, A_log, dt_bias, &x) || exp_run(d, x, out)) return 1;
  /* a* <= 1 when g_eff <= 0: a log gate g <= 0, and always in softplus mode (E, softplus > 0) */
  *le1 = p->gate_mode == KDA_GATE_SOFTPLUS || g <= 0.0;
  *hi = au(mag(*out), out->e);
  if (*le1 && (out->h < 1.0 || (out->h == 1.0 && out->l <= 0.0)) && *hi > 1.0) *hi = 1.0;
  return 0;
}

int kda_cert_dd_gate(kda_cert_dd *d, const kda_problem *p, double g, const double *A_log,
                     const double *dt_bias, kda_cert_dv *out, double *hi, int *le1) {
  kda_cert_fpregion f;
  kda_cert_fp_enter(&f);
  return kda_cert_fp_leave(&f, gate_run(d, p, g, A_log, dt_bias, out, hi, le1));
}

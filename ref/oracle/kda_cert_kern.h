/* kda_cert_kern.h: the double-double step of the fast certifier (SPEC.md §8.12), as a
 * template: a kernel file defines KDA_CERT_STEP_NAME and includes this header once.
 * SPDX-License-Identifier: MIT
 *
 * The step is the one of SPEC.md §8.4 in double-double ("dd", an unevaluated sum hi + lo of
 * two doubles) with the state stored row by row, S[i][j] at i * V + j, so that every inner
 * loop runs over the value index j with independent accumulators and the compiler can
 * vectorise it.  Sums over the key index i are recursive (i = 0, 1, ...), the order the
 * error analysis of SPEC.md §8.12 assumes.
 *
 * The building blocks are those of Joldes, Muller and Popescu, "Tight and rigorous error
 * bounds for basic building blocks of double-word arithmetic", ACM TOMS 44(2), 2017:
 * AccurateDWPlusDW (their Algorithm 6, relative error < 3u^2 + 13u^3), DWTimesDW3
 * (Algorithm 12, < 4u^2) and DWTimesFP3 (Algorithm 9, < 2u^2), u = 2^-53, valid when no
 * underflow or overflow occurs.  The certifier uses 2^-100 = 64u^2 for each (KDA_CERT_UD) and
 * discards a head whose run raised an underflow, overflow or invalid flag.  Products need an
 * exact fma: the kernel calls fma() explicitly, and the files are compiled with
 * -ffp-contract=off so that no other expression is fused.
 */
#include <math.h>
#include <stdint.h>

#include "kda_cert_impl.h"

static inline void kc_two_sum(double a, double b, double *s, double *e) {
  const double x = a + b, bb = x - a;
  *e = (a - (x - bb)) + (b - bb);
  *s = x;
}

static inline void kc_fast_two_sum(double a, double b, double *s, double *e) {
  const double x = a + b;
  *e = b - (x - a);
  *s = x;
}

/* AccurateDWPlusDW. */
static inline void kc_add(double xh, double xl, double yh, double yl, double *zh, double *zl) {
  double sh, sl, th, tl, vh, vl;
  kc_two_sum(xh, yh, &sh, &sl);
  kc_two_sum(xl, yl, &th, &tl);
  const double c = sl + th;
  kc_fast_two_sum(sh, c, &vh, &vl);
  const double w = tl + vl;
  kc_fast_two_sum(vh, w, zh, zl);
}

/* DWTimesDW3. */
static inline void kc_mul(double xh, double xl, double yh, double yl, double *zh, double *zl) {
  const double ch = xh * yh;
  const double cl1 = fma(xh, yh, -ch);
  const double tl0 = xl * yl;
  const double tl1 = fma(xh, yl, tl0);
  const double cl2 = fma(xl, yh, tl1);
  const double cl3 = cl1 + cl2;
  kc_fast_two_sum(ch, cl3, zh, zl);
}

/* DWTimesFP3. */
static inline void kc_mul_d(double xh, double xl, double y, double *zh, double *zl) {
  const double ch = xh * y;
  const double cl1 = fma(xh, y, -ch);
  const double cl3 = fma(xl, y, cl1);
  kc_fast_two_sum(ch, cl3, zh, zl);
}

/* The step kernel itself only where a kernel file asks for it (KDA_CERT_STEP_NAME): the
 * coefficient code (kda_cert_dd.c) includes this header for the building blocks alone. */
#ifdef KDA_CERT_STEP_NAME

/* acc_j += S[i][j] n for one row i. */
static void kc_dot_row(int64_t V, double nh, double nl, const double *restrict rh,
                       const double *restrict rl, double *restrict ah, double *restrict al) {
  for (int64_t j = 0; j < V; j++) {
    double ph, pl, sh, sl;
    kc_mul(rh[j], rl[j], nh, nl, &ph, &pl);
    kc_add(ah[j], al[j], ph, pl, &sh, &sl);
    ah[j] = sh;
    al[j] = sl;
  }
}

/* u_j = v_j + sum_i S[i][j] nak_i (erasing families), then w_j = b u_j. */
static void kc_erase(const kda_cert_step *s) {
  const int64_t K = s->K, V = s->V;
  double *restrict uh = s->uh, *restrict ul = s->ul;
  const double *restrict Sh = s->Sh, *restrict Sl = s->Sl, *restrict v = s->v;
  for (int64_t j = 0; j < V; j++) {
    uh[j] = v[j];
    ul[j] = 0.0;
  }
  for (int64_t i = 0; i < K; i++) kc_dot_row(V, s->nh[i], s->nl[i], Sh + i * V, Sl + i * V, uh, ul);
  for (int64_t j = 0; j < V; j++) kc_mul(s->bh, s->bl, uh[j], ul[j], &s->wh[j], &s->wl[j]);
}

/* One row i: S[i][j] <- a S[i][j] + k w_j (decay) or S[i][j] + k w_j, o_j += S[i][j] q. */
static void kc_row(int64_t V, int decay, double ah, double al, double kh, double kl, double qh,
                   double ql, double *restrict rh, double *restrict rl,
                   const double *restrict wh, const double *restrict wl, double *restrict oh,
                   double *restrict ol) {
  if (decay) {
    for (int64_t j = 0; j < V; j++) {
      double xh, xl, yh, yl, zh, zl, ph, pl, sh, sl;
      kc_mul(ah, al, rh[j], rl[j], &xh, &xl);
      kc_mul(kh, kl, wh[j], wl[j], &yh, &yl);
      kc_add(xh, xl, yh, yl, &zh, &zl);
      rh[j] = zh;
      rl[j] = zl;
      kc_mul(zh, zl, qh, ql, &ph, &pl);
      kc_add(oh[j], ol[j], ph, pl, &sh, &sl);
      oh[j] = sh;
      ol[j] = sl;
    }
  } else {
    for (int64_t j = 0; j < V; j++) {
      double yh, yl, zh, zl, ph, pl, sh, sl;
      kc_mul(kh, kl, wh[j], wl[j], &yh, &yl);
      kc_add(rh[j], rl[j], yh, yl, &zh, &zl);
      rh[j] = zh;
      rl[j] = zl;
      kc_mul(zh, zl, qh, ql, &ph, &pl);
      kc_add(oh[j], ol[j], ph, pl, &sh, &sl);
      oh[j] = sh;
      ol[j] = sl;
    }
  }
}

/* S[i][j] <- a_i S[i][j] + k_i w_j (or S + k_i w_j without decay), o_j = sum_i S[i][j] q_i. */
static void kc_update(const kda_cert_step *s) {
  const int64_t K = s->K, V = s->V;
  for (int64_t j = 0; j < V; j++) s->oh[j] = s->ol[j] = 0.0;
  for (int64_t i = 0; i < K; i++) {
    const int64_t ia = s->scalar_gate ? 0 : i;
    const double ah = s->decay ? s->ah[ia] : 1.0, al = s->decay ? s->al[ia] : 0.0;
    kc_row(V, s->decay, ah, al, s->kh[i], s->kl[i], s->qh[i], s->ql[i], s->Sh + i * V,
           s->Sl + i * V, s->wh, s->wl, s->oh, s->ol);
  }
}

void KDA_CERT_STEP_NAME(const kda_cert_step *s) {
  if (s->erase) {
    for (int64_t i = 0; i < s->K; i++) {
      if (s->decay) {
        const int64_t ia = s->scalar_gate ? 0 : i;
        kc_mul(s->ah[ia], s->al[ia], s->kh[i], s->kl[i], &s->nh[i], &s->nl[i]);
      } else {
        s->nh[i] = s->kh[i];
        s->nl[i] = s->kl[i];
      }
      s->nh[i] = -s->nh[i];
      s->nl[i] = -s->nl[i];
    }
    kc_erase(s);
  } else {
    for (int64_t j = 0; j < s->V; j++) kc_mul_d(s->bh, s->bl, s->v[j], &s->wh[j], &s->wl[j]);
  }
  kc_update(s);
}

#endif /* KDA_CERT_STEP_NAME */

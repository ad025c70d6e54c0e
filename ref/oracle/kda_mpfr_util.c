/* kda_mpfr_util.c: pools of MPFR numbers and the correctly rounded conversion to binary64.
 * SPDX-License-Identifier: MIT
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kda_mpfr_impl.h"

int kda_mpfr_pool_init(kda_mpfr_pool *pl, size_t n, mpfr_prec_t prec) {
  pl->x = NULL;
  pl->limbs = NULL;
  pl->n = 0;
  if (n == 0) return 0;
  const size_t sz = mpfr_custom_get_size(prec); /* a whole number of limbs */
  if (n > SIZE_MAX / sizeof(mpfr_t) || n > SIZE_MAX / sz) return -1;
  pl->x = malloc(n * sizeof(mpfr_t));
  pl->limbs = malloc(n * sz);
  if (!pl->x || !pl->limbs) {
    kda_mpfr_pool_free(pl);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    void *m = (char *)pl->limbs + i * sz;
    mpfr_custom_init(m, prec);
    mpfr_custom_init_set(pl->x[i], MPFR_ZERO_KIND, 0, prec, m);
  }
  pl->n = n;
  return 0;
}

void kda_mpfr_pool_free(kda_mpfr_pool *pl) {
  free(pl->x);
  free(pl->limbs);
  pl->x = NULL;
  pl->limbs = NULL;
  pl->n = 0;
}

uint64_t kda_mpfr_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

/* Binary64 has 53 significand bits for |x| >= 2^-1022 and the fixed quantum 2^-1074 below.
 * In MPFR's convention x = m * 2^e with 1/2 <= |m| < 1, so x is normal when e >= -1021 and
 * then has 53 bits; below, it has e + 1074 bits (the bits from 2^(e-1) down to 2^-1074).
 * Rounding x once to that many bits is exactly binary64 rounding to nearest-even; a carry into
 * the next binade gives a representable number (2^-1022 from the subnormals, 2^1024 = +-inf). */
double kda_mpfr_round_binary64(mpfr_srcptr x, mpfr_ptr tmp) {
  if (mpfr_nan_p(x)) return (double)NAN;
  if (mpfr_inf_p(x)) return mpfr_sgn(x) > 0 ? (double)INFINITY : -(double)INFINITY;
  if (mpfr_zero_p(x)) return 0.0;
  const int neg = mpfr_sgn(x) < 0;
  const mpfr_exp_t e = mpfr_get_exp(x);
  if (e > 1024) return neg ? -(double)INFINITY : (double)INFINITY;
  if (e < -1073) {
    /* |x| < 2^-1074.  Only [2^-1075, 2^-1074) can round away from 0: to 2^-1074 above the
     * midpoint 2^-1075, to 0 (the even neighbour) at it. */
    if (e == -1074 && mpfr_cmp_si_2exp(x, neg ? -1 : 1, -1075) != 0)
      return neg ? -0x1p-1074 : 0x1p-1074;
    return 0.0;
  }
  const mpfr_prec_t bits = e >= -1021 ? 53 : (mpfr_prec_t)(e + 1074);
  mpfr_set_prec(tmp, bits);
  mpfr_set(tmp, x, MPFR_RNDN);
  if (mpfr_get_exp(tmp) > 1024) return neg ? -(double)INFINITY : (double)INFINITY;
  const double d = mpfr_get_d(tmp, MPFR_RNDN); /* exact: tmp is a binary64 value */
  return d == 0.0 ? 0.0 : d;
}

void kda_mpfr_exact_sum(mpfr_ptr y, double g, double b) {
  mpfr_prec_t prec = 54;
  if (g != 0.0 && b != 0.0) {
    int eg, eb;
    frexp(g, &eg);
    frexp(b, &eb);
    prec = (mpfr_prec_t)((eg > eb ? eg - eb : eb - eg) + 54);
  }
  mpfr_set_prec(y, prec);
  mpfr_set_d(y, g, MPFR_RNDN);
  mpfr_add_d(y, y, b, MPFR_RNDN);
}

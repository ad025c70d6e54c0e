/* kda_mpfr_impl.h: internals of the MPFR reference shared by its files (not installed).
 * SPDX-License-Identifier: MIT
 *
 * kda_mpfr.c runs Ziv's loop over whole forward evaluations; kda_mpfr_run.c is one evaluation
 * at a fixed precision together with its a-priori error bound (SPEC.md §8);
 * kda_mpfr_coef.c encloses the per-token coefficients (L2, gate, beta) in intervals with
 * directed roundings; kda_mpfr_util.c has the variable pools and the binary64 rounding.
 * Every function here assumes that the caller has widened MPFR's exponent range to the
 * largest one (kda_mpfr_forward does) and never changes global MPFR state itself.
 */
#ifndef KDA_MPFR_IMPL_H
#define KDA_MPFR_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <mpfr.h>

#include "kda_mpfr.h"
#include "kda_problem.h"

/* Precision (bits) of the upward-rounded numbers that carry error bounds and norms. */
#define KDA_MPFR_BOUND_PREC 64

/* Operands of the state update must have exponents in [-2^60, 2^60]: then no product or sum
 * formed in the update can leave MPFR's exponent range, so every operation's relative error is
 * at most 2^-p (SPEC.md §8.2).  A decay factor below 2^(-2^32) is flushed to 0 and
 * its whole value is counted as error. */
#define KDA_MPFR_EXP_GUARD ((mpfr_exp_t)1 << 60)
#define KDA_MPFR_FLUSH_EXP (-((mpfr_exp_t)1 << 32))

/* ---- kda_mpfr.c */

/* The checks of kda_mpfr_forward (options, problem, buffers, indices, finiteness), for the
 * fast certifier (kda_cert.c), which must reject exactly what kda_mpfr_forward rejects. */
int kda_mpfr_check(const kda_problem *p, const kda_tensors_f64 *t, const kda_mpfr_options *o,
                   char *err, size_t errlen);

/* ---- kda_mpfr_util.c */

/* n MPFR numbers of one precision whose significands share one allocation (MPFR's custom
 * interface: never mpfr_clear them, never change their precision). */
typedef struct kda_mpfr_pool {
  mpfr_t *x;
  void *limbs;
  size_t n;
} kda_mpfr_pool;

/* Allocates n numbers set to +0.  Returns 0, or -1 when an allocation fails (pool emptied). */
int kda_mpfr_pool_init(kda_mpfr_pool *pl, size_t n, mpfr_prec_t prec);
void kda_mpfr_pool_free(kda_mpfr_pool *pl);

/* x rounded to the nearest IEEE-754 binary64 value, ties to even, with binary64's subnormals
 * (gradual underflow, quantum 2^-1074) and overflow to +-inf (when the rounding with unbounded
 * exponent reaches 2^1024).  Zeros, including the rounding of a tiny nonzero x to zero, are
 * returned as +0 (golden files do not certify the sign of zero).  NaN gives NaN.  x may have
 * any precision and exponent; `tmp` is a scratch number whose precision may be changed. */
double kda_mpfr_round_binary64(mpfr_srcptr x, mpfr_ptr tmp);
/* y <- g + b exactly: y's precision is set to what the sum of two doubles needs (their
 * exponents' distance + 54 bits, at most 2151), so the one rounding of the addition is exact
 * (SPEC.md §8.3; shared by the MPFR coefficients and the fast certifier's gates). */
void kda_mpfr_exact_sum(mpfr_ptr y, double g, double b);

/* The bits of a double for bitwise comparison. */
uint64_t kda_mpfr_bits(double d);

/* ---- kda_mpfr_run.c: one forward evaluation at precision prec. */

typedef struct kda_mpfr_result {
  double *val;             /* [n_values] o, then ht, then hc, each rounded to binary64 */
  unsigned char *proven;   /* [n_values] 1 where the error bound proves the rounding */
  int64_t n_unproven;      /* number of zeros in proven[] */
  int64_t first_unproven;  /* index of the first, -1 when none */
  double need_bits;        /* estimated extra bits the bound needs to prove every value
                              (INFINITY when some bound is infinite); 0 when all proven */
  double max_growth;       /* largest upper bound on ||A_t||_2 (0 when there is no step) */
  double max_rel_bound;    /* largest bound / |value| over nonzero values */
  int32_t expansive;       /* 1: some step was not shown non-expansive (SPEC.md §6.3) */
  int32_t reserved;
} kda_mpfr_result;

/* The number of values o, ht, hc together; 0 when it overflows int64 (not for a problem that
 * passed kda_problem_check). */
int64_t kda_mpfr_count_values(const kda_problem *p);

/* Evaluates the problem at precision prec into res (arrays allocated by the caller with
 * kda_mpfr_count_values entries).  The arguments must have been validated by kda_mpfr_forward;
 * cu is never NULL.  Returns KDA_OK, KDA_ENOMEM, or KDA_EUNSUPPORTED when a value leaves the
 * exponent window of KDA_MPFR_EXP_GUARD (astronomically large decays or states). */
int kda_mpfr_run(const kda_problem *p, const kda_tensors_f64 *t, const int64_t *cu,
                 mpfr_prec_t prec, kda_mpfr_result *res, char *err, size_t errlen);

/* ---- kda_mpfr_grad.c: one ball evaluation of the gradients at precision prec (SPEC.md §13.8).
 * val[] (kda_mpfr_backward's order: dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0, those present)
 * gets the binary64 roundings of the balls' midpoints, proven[] 1 where both ends of the ball
 * round to the same binary64 number; *n_unproven, *need (the bits the widest unproven ball
 * misses, INFINITY when some radius is infinite) and *max_rel (largest radius / |midpoint|).
 * The arguments must have passed kda_mpfr_backward's checks; cu is never NULL; the caller has
 * widened MPFR's exponent range.  Returns KDA_OK or KDA_ENOMEM. */
#include "kda_backward.h"
int kda_mpfr_grad_eval(const kda_problem *p, const kda_tensors_f64 *t, const kda_grads_f64 *d,
                       const int64_t *cu, mpfr_prec_t prec, double *val, unsigned char *proven,
                       int64_t *n_unproven, double *need, double *max_rel);

/* ---- kda_mpfr_coef.c: enclosures of the per-token coefficients at precision prec.
 * Each coefficient x* (a real number) is computed twice with directed roundings, giving
 * lo <= x* <= hi; the working value is mid = RN((lo + hi) / 2) and its error bound
 * err >= |mid - x*| is max(mid - lo, hi - mid) rounded up. */

typedef struct kda_mpfr_coef {
  mpfr_prec_t prec;
  kda_mpfr_pool tmp;   /* p-bit scratch */
  kda_mpfr_pool prod;  /* [n + 1] exact products at 2p bits, for sums */
  mpfr_ptr *pprod;     /* pointers into prod */
  kda_mpfr_pool b;     /* bound-precision scratch */
  mpfr_t y;            /* exact g + dt_bias (its precision adapts) */
} kda_mpfr_coef;

/* Scratch for vectors of up to n elements.  Returns 0 or -1 (out of memory); call
 * kda_mpfr_coef_free in both cases (the structure must be zeroed before init). */
int kda_mpfr_coef_init(kda_mpfr_coef *c, mpfr_prec_t prec, int64_t n);
void kda_mpfr_coef_free(kda_mpfr_coef *c);

/* A vector's enclosure summary, in bound precision (rounded up unless said otherwise). */
typedef struct kda_mpfr_vecnorm {
  mpfr_t n;      /* >= max(||mid||, ||x*||) */
  mpfr_t e;      /* >= ||mid - x*|| */
  mpfr_t n2lo;   /* <= ||x*||^2 (rounded down) */
} kda_mpfr_vecnorm;

void kda_mpfr_vecnorm_init(kda_mpfr_vecnorm *v);
void kda_mpfr_vecnorm_clear(kda_mpfr_vecnorm *v);

/* mid[i] (p-bit) and the norms of x* = c * L2(x) (SPEC.md §4.3, §4.5) for x of length n:
 * c = scale for q̂ and 1 for k̂ (pass is_q). */
void kda_mpfr_coef_l2(kda_mpfr_coef *c, const kda_problem *p, int is_q, int64_t n,
                      const double *x, mpfr_t *mid, kda_mpfr_vecnorm *out);

/* Decay factors a_c = exp(g_eff) for the GW gate channels of (t, hv) (SPEC.md §4.1): mid[c]
 * (p-bit); amax >= max_c a*_c and ea >= max_c |mid[c] - a*_c| (bound precision).  A_log and
 * dt_bias are NULL when the mode does not read them.  Returns the exponent-guard verdict: 0 ok,
 * -1 when a factor is too large for the window (KDA_MPFR_EXP_GUARD). */
int kda_mpfr_coef_gate(kda_mpfr_coef *c, const kda_problem *p, int64_t GW, const double *g,
                       const double *A_log, const double *dt_bias, mpfr_t *mid, mpfr_ptr amax,
                       mpfr_ptr ea);

/* beta_eff of a stored beta (SPEC.md §4.2): lo <= beta* <= hi and mid (p-bit), bound eb. */
void kda_mpfr_coef_beta(kda_mpfr_coef *c, int32_t beta_mode, double beta, mpfr_ptr lo,
                        mpfr_ptr hi, mpfr_ptr mid, mpfr_ptr eb);

/* Correctly rounded sum of x[i]*y[i] (i < n) plus z (z may be NULL), in direction rnd, with
 * the products formed exactly in c->prod (inputs of at most prec bits) and one mpfr_sum. */
int kda_mpfr_coef_dot(kda_mpfr_coef *c, mpfr_ptr rop, mpfr_t *x, mpfr_t *y, int64_t n,
                      mpfr_srcptr z, mpfr_rnd_t rnd);

#endif

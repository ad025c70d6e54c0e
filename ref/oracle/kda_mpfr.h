/* kda_mpfr.h: the MPFR reference that certifies golden values (SPEC.md §6.1, §8).
 * SPDX-License-Identifier: MIT
 *
 * kda_mpfr_forward computes the correctly rounded float64 value of every output of a problem:
 * the exact real result of SPEC.md §3-§5 on the stored inputs (which are exact binary numbers),
 * rounded to the nearest binary64 number, ties to even, subnormals and overflow as in IEEE-754.
 * It evaluates the whole recurrence with GNU MPFR at a working precision p and checks each
 * value with Ziv's strategy (SPEC.md §8):
 *
 *   - every evaluation carries a rigorous a-priori bound on the error of each output; a value
 *     is *proven* when every real number within the bound rounds to the same binary64 value;
 *   - the evaluation is repeated at a higher precision (p + p/2, or more when the bound says
 *     how many bits are missing) until two consecutive evaluations give the same binary64 bits
 *     for every value and either every value is proven (KDA_CERT_PROVEN) or the bound cannot
 *     prove them within prec_max (KDA_CERT_AGREED: two precisions agree on every rounded value;
 *     strong evidence, not a proof).
 *
 * The bound holds for every input; it grows with the product of the step norms, so for
 * non-expansive inputs (SPEC.md §6.3) it grows at most linearly in the sequence length and
 * proofs are cheap, while strongly expansive inputs usually end as AGREED.
 *
 * Zeros are written as +0: the sign of a zero result is not certified.
 *
 * MPFR global state: the call widens MPFR's exponent range to the largest one while it runs
 * and restores the caller's exponent range and all MPFR flags before it returns, on every
 * path.  It never changes the default precision or rounding mode, and it does not free MPFR's
 * caches (call mpfr_free_cache yourself if you need to).  With a thread-safe MPFR (the usual
 * build) calls in different threads are independent.
 *
 * Memory: the state of one sequence (HV*K*V numbers of p bits) and two float64 copies of all
 * outputs.  The large allocations are checked (KDA_ENOMEM); the small temporaries that GMP and
 * MPFR allocate inside their own functions use GMP's allocator, which aborts on failure.
 */
#ifndef KDA_MPFR_H
#define KDA_MPFR_H

#include <stddef.h>
#include <stdint.h>

#include "kda_backward.h"
#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the values of a successful call were certified (kda_mpfr_report.method). */
#define KDA_CERT_NONE 0   /* not certified (the call failed) */
#define KDA_CERT_PROVEN 1 /* every value proven by the error bound, and two precisions agree */
#define KDA_CERT_AGREED 2 /* two precisions agree on every value; some value is not proven */

/* Options.  Fill with kda_mpfr_options_init() and then set fields. */
typedef struct kda_mpfr_options {
  int64_t prec0;         /* first working precision in bits; default 128; 53 .. 2^24 */
  int64_t prec_max;      /* highest working precision tried; default 4096; prec0 .. 2^24 */
  int32_t require_proof; /* 1: accept only KDA_CERT_PROVEN; 0 (default): AGREED is enough */
  int32_t reserved;      /* zero */
} kda_mpfr_options;

/* What a call did.  Filled on success; on failure method is KDA_CERT_NONE and the counters
 * describe the evaluations made. */
typedef struct kda_mpfr_report {
  int64_t prec_used;    /* precision (bits) of the evaluation whose values were written */
  int64_t prec_check;   /* precision of the evaluation that agreed with it (lower) */
  int64_t n_values;     /* float64 values written: o, ht (when wanted) and hc together */
  int64_t n_proven;     /* of them, proven by the error bound at prec_used or prec_check */
  int64_t ziv_rounds;   /* complete evaluations performed (at least 2) */
  int32_t method;       /* KDA_CERT_* */
  int32_t expansive;    /* 1: some step was not shown non-expansive (SPEC.md §6.3) */
  double max_growth;    /* largest upper bound on a step norm ||(I - b k k^T) Diag(a)||_2
                           (0 when there are no tokens) */
  double max_rel_bound; /* largest error bound relative to |value| at prec_used */
} kda_mpfr_report;

/* Defaults: prec0 = 128, prec_max = 4096, require_proof = 0. */
void kda_mpfr_options_init(kda_mpfr_options *o);

/* Writes the correctly rounded float64 values of o, ht (when p->want_final_state) and hc
 * (when p->n_checkpoints > 0) into t's output buffers.  o may be NULL (defaults); r may be
 * NULL.  The buffers a problem needs are those of kda_ref_forward_f64 (kda_ref.h): q, k, v,
 * beta and o when T > 0; g for the kda and gdn families; dt_bias for the softplus and
 * lower_bound gates; A_log when has_A_log is 1 and the gate reads it; h0 when
 * has_initial_state; ht when want_final_state; hc and checkpoints when n_checkpoints > 0;
 * cu_seqlens when N > 1.
 *
 * Returns
 *   KDA_OK            every value certified (r->method says how);
 *   KDA_EINVAL        p or t is NULL, an option is out of range, a needed buffer is NULL,
 *                     or kda_problem_check / kda_problem_check_index rejects the problem;
 *   KDA_ESHAPE        a size overflows (from kda_problem_check);
 *   KDA_ENONFINITE    an input is NaN or infinite where SPEC.md §6.2 forbids it (g may be
 *                     -inf in the log gate mode only); the message names the element;
 *   KDA_ENOMEM        an allocation failed;
 *   KDA_EUNSUPPORTED  a decay factor or the state left the exponent range 2^(+-2^60) that
 *                     the reference supports (astronomically expansive inputs);
 *   KDA_ENOTCERT      some value did not settle within prec_max (two precisions disagree),
 *                     or require_proof is set and some value could not be proven; the
 *                     message names the first such value (quantity and indices).
 * On failure the output buffers' contents are unspecified. */
int kda_mpfr_forward(const kda_problem *p, const kda_tensors_f64 *t, const kda_mpfr_options *o,
                     kda_mpfr_report *r, char *err, size_t errlen);

/* The certified gradients of SPEC.md §13 (§13.8): the correctly rounded float64 value of every
 * gradient the problem has (kda_backward.h: dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for
 * the seeds d->dout, d->dht, d->dhc (NULL dht or dhc means zero), by ball arithmetic in MPFR
 * (every quantity a midpoint and a rigorous radius) and Ziv's loop over whole evaluations, as
 * kda_mpfr_forward: PROVEN when both ends of every value's ball round to one binary64 number
 * and two precisions agree, AGREED when two precisions agree but some ball is still too wide
 * at prec_max.  The outputs o, ht, hc of t are not read.  Memory: the states of the longest
 * sequence of one head as balls (len K V numbers of p bits).  Returns the statuses of
 * kda_mpfr_forward (KDA_ENONFINITE also for a seed that is not finite). */
int kda_mpfr_backward(const kda_problem *p, const kda_tensors_f64 *t, const kda_grads_f64 *d,
                      const kda_mpfr_options *o, kda_mpfr_report *r, char *err, size_t errlen);

/* The name of a KDA_CERT_* method ("proven", "agreed", "none"), or NULL if invalid. */
const char *kda_mpfr_method_name(int32_t method);

#ifdef __cplusplus
}
#endif
#endif

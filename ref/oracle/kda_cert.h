/* kda_cert.h: the fast certifier: double-double first, MPFR for what it leaves (SPEC.md §8.12).
 * SPDX-License-Identifier: MIT
 *
 * kda_cert_forward computes the same correctly rounded float64 values as kda_mpfr_forward
 * (kda_mpfr.h, SPEC.md §8.1) in two phases:
 *
 *   1. every value head is evaluated in double-double arithmetic (about 106 bits), threaded
 *      over value heads, with a rigorous a-priori error bound in the model of SPEC.md §8.5
 *      (its derivation is SPEC.md §8.12); a value is *decided* when every real number within
 *      the bound rounds to the same binary64 number (the rule of SPEC.md §8.6);
 *   2. when some value is undecided (close to a rounding boundary, an exact zero reached by
 *      cancellation, a head outside the double-double range), kda_mpfr_forward (Ziv's loop)
 *      runs on each value head that has one, alone and on the tokens up to the last one its
 *      undecided values need, and every value of that range the first phase decided must
 *      equal the MPFR value bit for bit (else KDA_ENOTCERT: one of the two is wrong).
 *
 * KDA_CERTIFIER_MPFR skips phase 1 (kda_mpfr_forward alone).  KDA_CERTIFIER_BOTH runs phase 1
 * and then kda_mpfr_forward on the whole problem, and compares every decided value (the
 * cross-check of the tests and of the golden writer); the values and the MPFR report are then
 * MPFR's.
 */
#ifndef KDA_CERT_H
#define KDA_CERT_H

#include <stddef.h>
#include <stdint.h>

#include "kda_mpfr.h"
#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDA_CERTIFIER_FAST 0 /* double-double, MPFR for undecided values (default) */
#define KDA_CERTIFIER_MPFR 1 /* kda_mpfr_forward only */
#define KDA_CERTIFIER_BOTH 2 /* both, every decided value compared; MPFR's values kept */

/* Bits of the double-double phase's unit roundoff (KDA_CERT_UD = 2^-100), recorded as the
 * precision of a call that phase 1 certified alone. */
#define KDA_CERT_DD_BITS 100

typedef struct kda_cert_options {
  int32_t certifier;   /* KDA_CERTIFIER_*; default FAST */
  int32_t threads;     /* worker threads over value heads; default 1, at most 256 */
  int32_t no_fallback; /* tests: 1 = never run MPFR; undecided values keep their dd rounding
                          and KDA_ENOTCERT is returned when there is one (decided[] says
                          which) */
  int32_t reserved;    /* zero */
  double bound_scale;  /* tests: the dd bound is multiplied by it (default 1; a value < 1 is
                          a deliberately wrong bound that the cross-check must catch) */
  kda_mpfr_options mpfr; /* for the MPFR phase */
} kda_cert_options;

typedef struct kda_cert_report {
  int32_t method;          /* KDA_CERT_PROVEN or KDA_CERT_AGREED (kda_mpfr.h) */
  int32_t mpfr_ran;        /* 1: kda_mpfr_forward ran; mpfr holds its report */
  int64_t n_values;
  int64_t n_decided;       /* values decided by phase 1 */
  int64_t n_heads_unsafe;  /* value heads phase 1 could not run (out of dd range) */
  int32_t expansive;       /* phase 1's verdict, as kda_mpfr_report.expansive */
  int32_t reserved;
  double max_growth;       /* phase 1's largest step-norm bound */
  double max_rel_bound;    /* phase 1's largest bound / |value| */
  double seconds_fast;     /* wall time of phase 1 */
  double seconds_mpfr;     /* wall time of phase 2 */
  int64_t n_mpfr_heads;    /* FAST: value heads phase 2 evaluated */
  int64_t mpfr_steps;      /* FAST: tokens of those heads together */
  kda_mpfr_report mpfr;    /* when mpfr_ran: the (last) kda_mpfr_forward call's report */
} kda_cert_report;

/* Defaults: FAST, 1 thread, fallback on, bound_scale 1, kda_mpfr_options_init. */
void kda_cert_options_init(kda_cert_options *o);

/* Like kda_mpfr_forward (same buffers, same checks, same statuses), with the phases above.
 * o and r may be NULL; decided may be NULL or point to kda_mpfr_count_values(p) bytes, set to
 * 1 for every value phase 1 decided (o, then ht, then hc). */
int kda_cert_forward(const kda_problem *p, const kda_tensors_f64 *t, const kda_cert_options *o,
                     kda_cert_report *r, unsigned char *decided, char *err, size_t errlen);

/* The name of a certifier ("fast", "mpfr", "both"), or NULL; and the reverse (-1 if none). */
const char *kda_cert_certifier_name(int32_t certifier);
int32_t kda_cert_certifier_parse(const char *name);

#ifdef __cplusplus
}
#endif
#endif

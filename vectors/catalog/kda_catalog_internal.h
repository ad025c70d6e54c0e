/* kda_catalog_internal.h: what the designed-case builders share (not installed).
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_CATALOG_INTERNAL_H
#define KDA_CATALOG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kda_case.h"
#include "kda_case_internal.h"
#include "kda_internal.h"

/* Design streams of the PRNG (the generator uses 1..10). */
#define KDA_DS_GATE 32
#define KDA_DS_GATE2 33
#define KDA_DS_DECAY 34
#define KDA_DS_VALUE 35

/* Copies n designed values into member m (KDA_M_*) of c.  The member must exist with exactly
 * n elements and every value must be exact in the member's precision.  Returns KDA_OK or
 * KDA_EINVAL naming the case, member and element. */
int kda_catalog_fill(kda_case *c, int m, const double *src, uint64_t n, char *err,
                     size_t errlen);

/* x rounded to the precision of member m of c. */
double kda_catalog_round(const kda_case *c, int m, double x);

/* Offset of the state element S[i][j] of slot (sequence) n, value head hv in c's layout. */
uint64_t kda_catalog_state_at(const kda_problem *p, int64_t n, int64_t hv, int64_t i,
                              int64_t j);

/* The hand-checkable L0 builders (kda_catalog_l0.c). */
int kda_l0_linear_accumulate(kda_case *c, uint64_t seed, char *err, size_t errlen);
int kda_l0_delta_overwrite(kda_case *c, uint64_t seed, char *err, size_t errlen);
int kda_l0_decay_wipe(kda_case *c, uint64_t seed, char *err, size_t errlen);
int kda_l0_varlen_h0(kda_case *c, uint64_t seed, char *err, size_t errlen);
int kda_l0_grouped(kda_case *c, uint64_t seed, char *err, size_t errlen);
int kda_l0_gdn_vk(kda_case *c, uint64_t seed, char *err, size_t errlen);
int kda_l0_reflection(kda_case *c, uint64_t seed, char *err, size_t errlen);

#endif

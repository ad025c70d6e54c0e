/* kda_ref_backward.c: the float64 backward reference (SPEC.md §13).
 * SPDX-License-Identifier: MIT
 *
 * The adjoint recurrence of kda_ref_backward_impl.h in double, with the forward's own step and
 * preprocessing functions (kda_ref.c) for the recomputed states.
 */
#include "kda_backward.h"

#include <math.h>

#include "kda_ref.h"

#define R double
#define R_EXP exp
#define R_SQRT sqrt
#define R_DECAY kda_ref_decay
#define R_ERASE kda_ref_erase
#define R_WRITE kda_ref_write
#define R_GATE kda_ref_gate
#define R_BETA kda_ref_beta
#define R_L2 kda_ref_l2
#define R_TENSORS kda_tensors_f64
#define R_GRADS kda_grads_f64
#define R_NAME(x) x##_f64
#include "kda_ref_backward_impl.h"

int kda_ref_backward_f64(const kda_problem *p, const kda_tensors_f64 *t, const kda_grads_f64 *d,
                         char *err, size_t errlen) {
  return backward_f64("kda_ref_backward_f64", p, t, d, err, errlen);
}

/* kda_ref_backward_f32.c: the float32 backward reference (SPEC.md §13).
 * SPDX-License-Identifier: MIT
 *
 * The adjoint recurrence of kda_ref_backward_impl.h in float: every operation in float, the
 * double options rounded to float once, the forward's own float step and preprocessing
 * functions (kda_ref_f32.c) for the recomputed states.
 */
#include "kda_backward.h"

#include <math.h>

#include "kda_ref.h"

#define R float
#define R_EXP expf
#define R_SQRT sqrtf
#define R_DECAY kda_ref32_decay
#define R_ERASE kda_ref32_erase
#define R_WRITE kda_ref32_write
#define R_GATE kda_ref32_gate
#define R_BETA kda_ref32_beta
#define R_L2 kda_ref32_l2
#define R_TENSORS kda_tensors_f32
#define R_GRADS kda_grads_f32
#define R_NAME(x) x##_f32
#include "kda_ref_backward_impl.h"

int kda_ref_backward_f32(const kda_problem *p, const kda_tensors_f32 *t, const kda_grads_f32 *d,
                         char *err, size_t errlen) {
  return backward_f32("kda_ref_backward_f32", p, t, d, err, errlen);
}

/* kda_backward.h: the gradients of the KDA recurrence, float64 reference and float32 twin.
 * SPDX-License-Identifier: MIT
 *
 * The backward pass of SPEC.md §13.  A call computes the exact-arithmetic gradients of the
 * scalar
 *
 *   L = sum do * o  +  sum dht * ht  +  sum dhc * hc
 *
 * with respect to every input the problem's modes read: q, k, v, g, beta, A_log, dt_bias and
 * h0.  The seeds do, dht and dhc are given; the gradients come back in the same layouts as the
 * inputs they belong to (SPEC.md §2.3): dq and dk [T, H, K], dv [T, HV, V], dg [T, HV, GW],
 * dbeta [T, HV], dA_log [HV], ddt_bias [HV, GW], dh0 [N, HV, K, V] (or [N, HV, V, K] when
 * state_layout is vk, as h0 is); dht is laid out as ht and dhc as hc.
 *
 * The forward is recomputed inside the call from the inputs (the o, ht and hc fields of the
 * kda_tensors_* argument are not read); the adjoint recurrence (SPEC.md §13.2) then runs each
 * (sequence, value head) from its last token back to its first.  States are kept every
 * ceil(sqrt(len)) tokens and each block recomputed once, so memory is O(sqrt(T) K V) per head.
 *
 * Like the forward reference: scalar loops that read like SPEC.md, -ffp-contract=off, sums
 * over i or j ascending from +0.  The float32 twin performs every operation in float.
 */
#ifndef KDA_BACKWARD_H
#define KDA_BACKWARD_H

#include <stddef.h>

#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The seeds and gradients of one float64 call.  `do` is a C keyword: the seed of o is `dout`
 * (member `do` in case files, SPEC.md §13.6).
 *
 *   dout      [T, HV, V]        seed of o; required when T > 0
 *   dht       [N, HV, K, V]     seed of ht (state_layout); NULL means zero; read only when
 *                               want_final_state = 1
 *   dhc       [C, HV, K, V]     seed of hc (state_layout); NULL means zero; read only when
 *                               n_checkpoints > 0
 *   dq, dk    [T, H, K]         required when T > 0 (GVA: the value heads' terms summed)
 *   dv        [T, HV, V]        required when T > 0
 *   dg        [T, HV, GW]       required when T > 0 and the family decays (kda, gdn)
 *   dbeta     [T, HV]           required when T > 0
 *   dA_log    [HV]              required when the gate reads A_log (kda_problem_uses_A_log)
 *   ddt_bias  [HV, GW]          required when the gate reads dt_bias
 *   dh0       [N, HV, K, V]     required when has_initial_state = 1 (state_layout)
 *
 * Gradients the problem does not use are not written and may be NULL.  Every required output is
 * overwritten in full (summed buffers are zeroed first). */
typedef struct kda_grads_f64 {
  const double *dout, *dht, *dhc;
  double *dq, *dk, *dv, *dg, *dbeta, *dA_log, *ddt_bias, *dh0;
} kda_grads_f64;

typedef struct kda_grads_f32 {
  const float *dout, *dht, *dhc;
  float *dq, *dk, *dv, *dg, *dbeta, *dA_log, *ddt_bias, *dh0;
} kda_grads_f32;

/* The gradients of SPEC.md §13 for every family, gate, beta, L2, head map, state layout,
 * varlen and checkpoint mode.  Returns KDA_OK, KDA_EINVAL / KDA_ESHAPE from the checks of
 * kda_problem_check and kda_problem_check_index, KDA_EINVAL for a NULL buffer the problem needs
 * (named in the message), KDA_ENOMEM.  On failure the outputs' contents are unspecified. */
int kda_ref_backward_f64(const kda_problem *p, const kda_tensors_f64 *t, const kda_grads_f64 *d,
                         char *err, size_t errlen);

/* The float32 twin (SPEC.md §9, §13.5): every operation in float, double options rounded to
 * float once, as kda_ref_forward_f32. */
int kda_ref_backward_f32(const kda_problem *p, const kda_tensors_f32 *t, const kda_grads_f32 *d,
                         char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif

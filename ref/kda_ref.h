/* kda_ref.h: the plain float64 reference of SPEC.md and its float32 twin.
 * SPDX-License-Identifier: MIT
 *
 * The reference is deliberately plain: scalar loops that read like SPEC.md §3, compiled with
 * -ffp-contract=off, no intrinsics.  The four step functions are public so that a tool can
 * trace one head step by step.  All step functions work on one head's state S in the
 * canonical K-major layout [K][V] (S[i*V + j], key index i, value index j).
 *
 * One step at token t (SPEC.md §3.1), with a = exp(g_eff), kk = k_t, qq = scale * q_t:
 *   decay    S[i][j] <- a[i] * S[i][j]
 *   erase    p[j]     = sum_i S[i][j] * kk[i]          (on the decayed state)
 *   write    S[i][j] <- S[i][j] + kk[i] * (beta * (v[j] - p[j]))  (this grouping)
 *   readout  o[j]     = sum_i S[i][j] * qq[i]          (after the write)
 * Sums run over i = 0, 1, ..., K-1 in that order (SPEC.md §9 fixes the order for the
 * reference only; conforming implementations may sum in any order).
 */
#ifndef KDA_REF_H
#define KDA_REF_H

#include <stddef.h>
#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Step functions, float64 (SPEC.md §3.1). */
void kda_ref_decay(int64_t K, int64_t V, double *S, const double *a);
void kda_ref_erase(int64_t K, int64_t V, const double *S, const double *k, double *p);
void kda_ref_write(int64_t K, int64_t V, double *S, const double *k, const double *v,
                   const double *p, double beta);
void kda_ref_readout(int64_t K, int64_t V, const double *S, const double *q, double *o);

/* ---- Preprocessing, float64 (SPEC.md §4). */
/* The log-decay g_eff of one gate input x = g[t,hv,c] with bias b = dt_bias[hv,c]
 * (SPEC.md §4.1).  A_log is ignored when has_A_log is 0.  softplus is evaluated as
 * max(x,0) + log1p(exp(-|x|)), which has no threshold and no cancellation. */
double kda_ref_gate(int32_t gate_mode, double x, double b, double A_log, int32_t has_A_log,
                    double lower_bound);
/* beta_eff from the stored beta (SPEC.md §4.2). */
double kda_ref_beta(int32_t beta_mode, double beta);
/* y = L2(x) over n elements (SPEC.md §4.3); x and y may alias. */
void kda_ref_l2(int32_t l2_mode, double eps, int64_t n, const double *x, double *y);
/* The q/k head h that value head hv reads (SPEC.md §4.4). */
int64_t kda_ref_head(int32_t head_map, int64_t H, int64_t HV, int64_t hv);

/* ---- Drivers (SPEC.md §3.2): every sequence, every value head, every token.
 * Returns KDA_OK, or KDA_EINVAL / KDA_ESHAPE from the checks of kda_problem_check and
 * kda_problem_check_index, KDA_EINVAL for a NULL buffer the problem needs, KDA_ENOMEM.
 * Outputs are written only on success's path; on failure their contents are unspecified. */
int kda_ref_forward_f64(const kda_problem *p, const kda_tensors_f64 *t, char *err, size_t errlen);

/* ---- The float32 twin (SPEC.md §9): the same structure, every operation in float. */
void kda_ref32_decay(int64_t K, int64_t V, float *S, const float *a);
void kda_ref32_erase(int64_t K, int64_t V, const float *S, const float *k, float *p);
void kda_ref32_write(int64_t K, int64_t V, float *S, const float *k, const float *v,
                     const float *p, float beta);
void kda_ref32_readout(int64_t K, int64_t V, const float *S, const float *q, float *o);
float kda_ref32_gate(int32_t gate_mode, float x, float b, float A_log, int32_t has_A_log,
                     float lower_bound);
float kda_ref32_beta(int32_t beta_mode, float beta);
void kda_ref32_l2(int32_t l2_mode, float eps, int64_t n, const float *x, float *y);
int kda_ref_forward_f32(const kda_problem *p, const kda_tensors_f32 *t, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif

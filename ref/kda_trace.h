/* kda_trace.h: one head of SPEC.md §3.1 step by step, every intermediate kept (kda trace, the
 * L0 traces, the explorer).
 * SPDX-License-Identifier: MIT
 *
 * kda_trace_step_f64 is the one step-tracing function of the project: `kda trace`, `kda
 * explore` and the golden L0 traces (vectors/golden/kda_golden_trace.c) all call it.  It
 * performs the operations of the float64 reference (ref/kda_ref.c) in the same order and
 * grouping, so with plain arithmetic its values are bit for bit those of kda_ref_forward_f64;
 * the L0 traces pass an arithmetic that also checks every product and sum for exactness.  The
 * float32 twin (kda_trace_step_f32) does the same in float with the kda_ref32_* step
 * functions.
 */
#ifndef KDA_TRACE_H
#define KDA_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The two operations of a step.  NULL (or a NULL table) means plain IEEE float64 * and +. */
typedef struct kda_trace_arith {
  void *ctx;
  double (*mul)(void *ctx, double a, double b);
  double (*add)(void *ctx, double a, double b);
} kda_trace_arith;

/* One step of one head (SPEC.md §3.1).  Inputs: qq = scale L2(q), kk = L2(k), a = exp(g_eff)
 * ([K]), b = beta_eff, v ([V]), S ([K][V], the state before the token).  Outputs: Sd (the
 * decayed state), p (the prediction S^T kk on the decayed state; 0 without erase), c = b (v -
 * p), S (overwritten with the written state S + kk c^T) and o = S^T qq after the write. */
typedef struct kda_trace_f64 {
  int64_t K, V;
  int32_t decays, erases; /* SPEC.md §5: the family's passes */
  const double *qq, *kk, *a, *v;
  double b;
  double *S, *Sd, *p, *c, *o;
} kda_trace_f64;

typedef struct kda_trace_f32 {
  int64_t K, V;
  int32_t decays, erases;
  const float *qq, *kk, *a, *v;
  float b;
  float *S, *Sd, *p, *c, *o;
} kda_trace_f32;

void kda_trace_step_f64(kda_trace_f64 *s, const kda_trace_arith *ar);
void kda_trace_step_f32(kda_trace_f32 *s);

/* ---- One (sequence, value head) of a problem, traced in both precisions. */

/* What the callback sees: first once with initial = 1 (only s64->S and s32->S, the initial
 * state, are meaningful), then after every token t (global) at position pos of its sequence,
 * with the log-decays g_eff ([K], -inf allowed; 0 without decay) in float64 and float32, and
 * both steps.  Returning nonzero stops the trace (kda_trace_head then returns that value). */
typedef struct kda_trace_token {
  int32_t initial, reserved0;
  int64_t t, pos;
  const double *g_eff;
  const float *g_eff32;
  const kda_trace_f64 *s64;
  const kda_trace_f32 *s32;
} kda_trace_token;
typedef int (*kda_trace_fn)(void *ctx, const kda_trace_token *tok);

/* Runs sequence n, value head hv of problem p on inputs ts (the outputs of ts are not used),
 * from its initial state (h0 or zero), and calls fn after every token.  The float32 twin
 * reads the inputs rounded to float.  Returns KDA_OK, KDA_EINVAL (bad problem, buffer, n or
 * hv; kda_ref_forward_f64's checks), KDA_ENOMEM, or the callback's nonzero value. */
int kda_trace_head(const kda_problem *p, const kda_tensors_f64 *ts, int64_t n, int64_t hv,
                   kda_trace_fn fn, void *ctx, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif

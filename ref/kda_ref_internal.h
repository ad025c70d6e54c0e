/* kda_ref_internal.h: control logic shared by the float64 reference and its float32 twin.
 * SPDX-License-Identifier: MIT
 *
 * Not installed.  The two precisions differ only in their arithmetic; the order in which
 * sequences, value heads, tokens and checkpoints are visited (SPEC.md §3.2), the buffer checks
 * and the index arithmetic of the packed layouts (SPEC.md §2.3) live here once.
 */
#ifndef KDA_REF_INTERNAL_H
#define KDA_REF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kda_problem.h"
#include "kda_internal.h"

/* The buffers of one call with their element type erased, so one check serves both twins. */
typedef struct kda_ref_buffers {
  const void *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0;
  const int64_t *cu_seqlens, *checkpoints;
  const void *o, *ht, *hc;
} kda_ref_buffers;

/* kda_problem_check, the buffers the problem needs (non-NULL), kda_problem_check_index.
 * `who` prefixes the message.  Returns KDA_OK, KDA_EINVAL or KDA_ESHAPE. */
int kda_ref_check_call(const char *who, const kda_problem *p, const kda_ref_buffers *b,
                       char *err, size_t errlen);

/* SPEC.md §5: which of the four passes a family performs (write and readout always). */
static inline int kda_ref_family_decays(int32_t family) {
  return family == KDA_FAMILY_KDA || family == KDA_FAMILY_GDN;
}
static inline int kda_ref_family_erases(int32_t family) {
  return family != KDA_FAMILY_LINEAR;
}

/* SPEC.md §4.1: the gate parameters a decaying family's gate mode reads. */
static inline int kda_ref_needs_dt_bias(const kda_problem *p) {
  return kda_ref_family_decays(p->family) && p->gate_mode != KDA_GATE_LOG;
}
static inline int kda_ref_needs_A_log(const kda_problem *p) {
  return kda_ref_needs_dt_bias(p) && p->has_A_log;
}

/* ---- Offsets (in elements) into the canonical packed layouts of SPEC.md §2.3. */
static inline size_t kda_ref_off_qk(const kda_problem *p, int64_t t, int64_t h) {
  return ((size_t)t * (size_t)p->H + (size_t)h) * (size_t)p->K;
}
static inline size_t kda_ref_off_v(const kda_problem *p, int64_t t, int64_t hv) {
  return ((size_t)t * (size_t)p->HV + (size_t)hv) * (size_t)p->V;
}
static inline size_t kda_ref_off_g(const kda_problem *p, int64_t GW, int64_t t, int64_t hv) {
  return ((size_t)t * (size_t)p->HV + (size_t)hv) * (size_t)GW;
}
static inline size_t kda_ref_off_beta(const kda_problem *p, int64_t t, int64_t hv) {
  return (size_t)t * (size_t)p->HV + (size_t)hv;
}
/* State slot `slot` (a sequence n of h0/ht or a checkpoint c of hc), value head hv. */
static inline size_t kda_ref_off_state(const kda_problem *p, int64_t slot, int64_t hv) {
  return ((size_t)slot * (size_t)p->HV + (size_t)hv) * (size_t)p->K * (size_t)p->V;
}
/* Where S[i][j] (key i, value j) sits inside one stored state of p->state_layout. */
static inline size_t kda_ref_state_at(const kda_problem *p, int64_t i, int64_t j) {
  return p->state_layout == KDA_STATE_VK ? (size_t)j * (size_t)p->K + (size_t)i
                                         : (size_t)i * (size_t)p->V + (size_t)j;
}

/* ---- The driver loop (SPEC.md §3.2), written once for both precisions.
 * For each sequence n (in order), each value head hv (in order):
 *   load(n, hv)                       S <- h0[n, hv], or 0 without an initial state
 *   for t = bos .. eos-1:
 *     step(t, hv)                     one token: preprocess, decay, erase, write, readout
 *     if t is checkpoint c:  store_checkpoint(c, hv)      hc[c, hv] <- S
 *   store_final(n, hv)                ht[n, hv] <- S (only when want_final_state)
 * An empty sequence is just load then store_final: ht[n] = h0[n] (or 0). */
typedef struct kda_ref_visitor {
  void *ctx;
  void (*load)(void *ctx, int64_t n, int64_t hv);
  void (*step)(void *ctx, int64_t t, int64_t hv);
  void (*store_checkpoint)(void *ctx, int64_t c, int64_t hv);
  void (*store_final)(void *ctx, int64_t n, int64_t hv);
} kda_ref_visitor;

/* The per-token coefficients of the float64 reference (SPEC.md §4): qq = scale * L2(q),
 * kk = L2(k), a = exp(g_eff) per key row (left alone without decay), *beta = beta_eff.  Shared
 * with the runner's magnitude pass so that both prepare tokens identically. */
void kda_ref_coefs_f64(const kda_problem *p, const kda_tensors_f64 *ts, int64_t t, int64_t hv,
                       double *qq, double *kk, double *a, double *beta);

/* Runs the loop above; the arguments must have passed kda_ref_check_call. */
void kda_ref_drive(const kda_problem *p, const int64_t *cu_seqlens, const int64_t *checkpoints,
                   const kda_ref_visitor *vis);

#endif

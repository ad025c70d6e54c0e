/* kda_cert_impl.h: internals of the fast certifier shared by its files (not installed).
 * SPDX-License-Identifier: MIT
 *
 * kda_cert.c is the entry point (checks, threads over value heads, the MPFR fallback and the
 * cross-check); kda_cert_head.c runs one value head in double-double with its error bound
 * (SPEC.md §8.12); kda_cert_kern.c and kda_cert_kern_avx2.c are the same step kernel
 * (kda_cert_kern.h) compiled for the baseline ISA and for AVX2 + FMA, picked at run time.
 */
#ifndef KDA_CERT_IMPL_H
#define KDA_CERT_IMPL_H

#include <fenv.h>
#include <stddef.h>
#include <stdint.h>

#include <mpfr.h>

#include "kda_problem.h"

/* The bound on the relative error of one double-double operation (SPEC.md §8.12): 64 u^2,
 * u = 2^-53, above every bound of the building blocks used (at most 4 u^2). */
#define KDA_CERT_UD 0x1p-100

/* Values of magnitude outside [2^-960, 2^960] are never decided in dd; coefficients below
 * KDA_CERT_FLUSH are flushed to 0 with their value counted as error, and a coefficient above
 * 2^960 sends its head to MPFR (SPEC.md §8.12). */
#define KDA_CERT_TINY 0x1p-960
#define KDA_CERT_HUGE 0x1p+960
#define KDA_CERT_FLUSH 0x1p-800

/* One step of one value head, all arrays in dd (hi, lo). */
typedef struct kda_cert_step {
  int64_t K, V;
  int decay, erase, scalar_gate;  /* scalar_gate: one decay factor (ah[0]) for every i */
  double *Sh, *Sl;                /* [K * V] the state, row i at i * V */
  double *ah, *al;                /* [K] (or [1]) decay factors */
  double *kh, *kl, *qh, *ql;      /* [K] k̂ and q̂ */
  double bh, bl;                  /* b̂ */
  const double *v;                /* [V] */
  double *nh, *nl;                /* [K] scratch: nak */
  double *uh, *ul, *wh, *wl;      /* [V] scratch: u, w */
  double *oh, *ol;                /* [V] the outputs */
} kda_cert_step;

typedef void (*kda_cert_step_fn)(const kda_cert_step *s);

/* The kernels; kda_cert_kernel() picks one for this CPU (AVX2 + FMA when present). */
void kda_cert_step_generic(const kda_cert_step *s);
void kda_cert_step_avx2(const kda_cert_step *s);
kda_cert_step_fn kda_cert_kernel(void);

/* ---- kda_cert_gate.c: decay-factor enclosures with one MPFR call per function (the
 * softplus and log gates; 1 for the other modes, which use kda_mpfr_coef_gate). */
#define KDA_CERT_GATE_TMP 12
typedef struct kda_cert_gate {
  mpfr_t t[KDA_CERT_GATE_TMP]; /* p-bit scratch */
  mpfr_t y;                    /* exact g + dt_bias (its precision adapts) */
  mpfr_t b;                    /* bound-precision scratch */
} kda_cert_gate;

void kda_cert_gate_init(kda_cert_gate *G, mpfr_prec_t prec);
void kda_cert_gate_clear(kda_cert_gate *G);
/* As kda_mpfr_coef_gate (kda_mpfr_impl.h): mids, amax, ea; returns 0, -1 (exponent guard)
 * or 1 (gate mode not handled here). */
int kda_cert_gate_enclose(kda_cert_gate *G, const kda_problem *p, int64_t GW, const double *g,
                          const double *A_log, const double *dt_bias, mpfr_t *mid,
                          mpfr_ptr amax, mpfr_ptr ea);

/* ---- kda_cert_dd.c: decay factors in double-double with running error bounds (SPEC.md
 * §8.12, "Decay factors in double-double"); the MPFR enclosures of kda_cert_gate.c remain
 * for every argument outside the proven range. */

/* A dd number h + l with a bound e >= |h + l - x*| on its distance to the exact x*. */
typedef struct kda_cert_dv {
  double h, l, e;
} kda_cert_dv;

/* The bound on the relative error of one dd operation in the coefficient code: 16 u^2, four
 * times the largest bound of Joldes, Muller and Popescu for the blocks used (4 u^2). */
#define KDA_CERT_UC 0x1p-102

/* Constants made once with MPFR (kda_cert_dd_init), and the per-head exp(A_log). */
typedef struct kda_cert_dd {
  kda_cert_dv T[64];      /* 2^(j/64) */
  kda_cert_dv c[12];      /* 1/n!, the Taylor coefficients of exp */
  double C1;              /* ln2/64 to 32 bits: k C1 is exact for |k| < 2^21 */
  double C2h, C2l, eC;    /* ln2/64 - C1 in dd, and >= |ln2/64 - C1 - C2h - C2l| */
  double A_log;           /* the A_log of E below */
  int E_state;            /* 0: not computed, 1: E valid, -1: out of range (use MPFR) */
  kda_cert_dv E;          /* exp(A_log) */
} kda_cert_dd;

void kda_cert_dd_init(kda_cert_dd *d);
/* A flag-tested region (SPEC.md §8.12): a dd result is trusted only when its evaluation
 * raised no underflow, overflow or invalid flag; the caller's flags are restored on leaving.
 * kda_cert_fp_leave returns r, or 1 when a flag was raised inside the region. */
typedef struct kda_cert_fpregion {
  fexcept_t saved;
} kda_cert_fpregion;
void kda_cert_fp_enter(kda_cert_fpregion *f);
int kda_cert_fp_leave(const kda_cert_fpregion *f, int r);
/* exp(x*) for |x* - (x.h + x.l)| <= x.e: 0, or 1 when x is outside the proven range
 * (|x| > 540, 0 < |x| < 2^-300, x.e > 2^-20, a floating-point flag raised): use MPFR. */
int kda_cert_dd_exp(const kda_cert_dd *d, kda_cert_dv x, kda_cert_dv *out);
/* softplus(g + b) in both forms of SPEC.md §8.3: 0, or 1 (use MPFR). */
int kda_cert_dd_softplus(const kda_cert_dd *d, double g, double b, kda_cert_dv *out);
/* The decay factor a* = exp(g_eff) of one channel in the log and softplus gate modes (A_log
 * and dt_bias NULL when absent): its dd value (out), hi >= a* and >= the dd value, and le1 = 1
 * when a* <= 1 is shown.  0, or 1 when MPFR must do it (another mode, an argument out of
 * range). */
int kda_cert_dd_gate(kda_cert_dd *d, const kda_problem *p, double g, const double *A_log,
                     const double *dt_bias, kda_cert_dv *out, double *hi, int *le1);

/* ---- kda_cert_l2.c: the L2 normalisation of q and k in double-double (SPEC.md §8.12, "L2
 * normalisation in double-double"). */
typedef struct kda_cert_l2 {
  mpfr_t slo, shi, dlo, dhi, t; /* 256-bit scratch */
  mpfr_t s0, s1;                /* the last enclosure of the sum of squares (+ eps for fla) */
} kda_cert_l2;

/* ||x̂||+ >= max(||dd||, ||x*||), e >= ||dd - x*||, n2lo <= ||x*||^2. */
typedef struct kda_cert_l2_norms {
  double n, e, n2lo;
} kda_cert_l2_norms;

void kda_cert_l2_init(kda_cert_l2 *w);
void kda_cert_l2_clear(kda_cert_l2 *w);
/* x̂ = c L2(x) (c = scale for q, 1 for k) of the n-vector x as dd (h, l) with its norms: 0,
 * or 1 when MPFR must do it (kda_mpfr_coef_l2). */
int kda_cert_dd_l2(kda_cert_l2 *w, const kda_problem *p, int is_q, int64_t n, const double *x,
                   double *h, double *l, kda_cert_l2_norms *out);
/* Its denominator factor (fla, ggml): r >= 0 in dd with |r~ - r*| <= r.e, where x*_i = x_i r*;
 * sxlo <= sum x_i^2 <= sxhi; w->s0 <= s* <= w->s1 for the sum the denominator is taken of.
 * 0, or 1 (MPFR's). */
int kda_cert_l2_factor(kda_cert_l2 *w, const kda_problem *p, int64_t n, const double *x,
                       double *sxlo, double *sxhi, kda_cert_dv *r);

/* ---- kda_cert_head.c */

/* What the heads share: the problem, the tensors, and the value array in the order of
 * kda_mpfr_count_values (o, then ht, then hc). */
typedef struct kda_cert_job {
  const kda_problem *p;
  const kda_tensors_f64 *t;
  const int64_t *cu;
  double *val;             /* [n] the dd value rounded to binary64 */
  unsigned char *decided;  /* [n] 1 where the dd bound proves that rounding */
  double bound_scale;      /* 1; tests shrink it to see the cross-check catch a wrong bound */
  kda_cert_step_fn step;
} kda_cert_job;

/* What one head did. */
typedef struct kda_cert_head_result {
  int status;          /* KDA_OK, KDA_ENOMEM */
  int safe;            /* 0: the head left the dd range; its values are all undecided */
  int expansive;
  double max_growth;
  double max_rel_bound;
  int64_t n_decided;
} kda_cert_head_result;

/* Per-thread scratch of kda_cert_head_run. */
typedef struct kda_cert_ws kda_cert_ws;
kda_cert_ws *kda_cert_ws_new(const kda_problem *p);
void kda_cert_ws_free(kda_cert_ws *w);

/* Runs value head hv over every sequence and writes its values into job->val and
 * job->decided.  Assumes MPFR's exponent range is the widest (the caller's thread sets it). */
void kda_cert_head_run(const kda_cert_job *job, kda_cert_ws *w, int64_t hv,
                       kda_cert_head_result *res);

/* ---- kda_cert_fallback.c: the second phase head by head (SPEC.md §8.12).  For every value
 * head with an undecided value, kda_mpfr_forward on that head alone and on the tokens its
 * undecided values need; MPFR's values replace the head's in job->val after every decided one
 * was compared.  *method: PROVEN, or AGREED when some call was; *n_heads and *steps are
 * incremented by the heads and head-steps evaluated; *last: the last call's report. */
#include "kda_mpfr.h"
int kda_cert_fallback_heads(const kda_cert_job *job, const kda_mpfr_options *mo,
                            int32_t *method, int64_t *n_heads, int64_t *steps,
                            kda_mpfr_report *last, char *err, size_t errlen);

#endif

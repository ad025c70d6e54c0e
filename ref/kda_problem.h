/* kda_problem.h: the problem description shared by every KDA implementation (SPEC.md §2, §4).
 * SPDX-License-Identifier: MIT
 *
 * This header is the vocabulary of the whole project: the status codes, the named modes of
 * SPEC.md §4, the shape-and-options record `kda_problem`, and the buffers of one call.  It has
 * only fixed-width integer and double fields (no enum, no bool) so that it can cross a plugin
 * ABI unchanged.  Every tensor is a host buffer in SPEC.md's canonical packed, token-major,
 * C-order layout (SPEC.md §2.3):
 *
 *   q, k        [T, H, K]          queries and keys
 *   v           [T, HV, V]         values
 *   g           [T, HV, GW]        gate input; GW = K for KDA, 1 for Gated DeltaNet
 *   beta        [T, HV]            write strength (or its logit, SPEC.md §4.2)
 *   A_log       [HV]               gate parameter (softplus and lower-bound gates)
 *   dt_bias     [HV, GW]           gate bias      (softplus and lower-bound gates)
 *   cu_seqlens  [N + 1]            sequence n owns tokens cu_seqlens[n] .. cu_seqlens[n+1]-1
 *   h0, ht      [N, HV, K, V]      initial / final state   ([N, HV, V, K] when state_layout
 *   hc          [C, HV, K, V]      checkpoint states        is KDA_STATE_VK)
 *   checkpoints [C]                token indices t (0 <= t < T, strictly increasing)
 *   o           [T, HV, V]         outputs
 */
#ifndef KDA_PROBLEM_H
#define KDA_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status codes.  Every library function that can fail returns one of these and writes a
 * one-line message (no trailing newline) into the caller's `err` buffer when it is not NULL. */
#define KDA_OK 0          /* success */
#define KDA_EINVAL 1      /* an argument or option is invalid (bad mode, shape, NULL buffer) */
#define KDA_ENOMEM 2      /* an allocation failed */
#define KDA_EIO 3         /* a file could not be opened, read, written or renamed */
#define KDA_EFORMAT 4     /* a file is not a valid container: magic, CRC, truncation, header */
#define KDA_ENOTFOUND 5   /* a required member or key is missing */
#define KDA_ESHAPE 6      /* shapes disagree with each other or overflow size_t */
#define KDA_EDTYPE 7      /* a dtype is not supported where it was found */
#define KDA_ENONFINITE 8  /* NaN or Inf where SPEC.md §6 forbids it */
#define KDA_EUNSUPPORTED 9 /* valid, but this implementation does not do it */
#define KDA_ENOTCERT 10   /* a value could not be certified (MPFR reference, SPEC.md §8) */

/* Recommended size of an error-message buffer. */
#define KDA_ERRLEN 512

/* ---- The delta-rule family (SPEC.md §5). */
#define KDA_FAMILY_KDA 0      /* per-key-channel decay, erase, write, readout */
#define KDA_FAMILY_GDN 1      /* Gated DeltaNet: one decay per head and token (GW = 1) */
#define KDA_FAMILY_DELTANET 2 /* erase and write, no decay (g unused) */
#define KDA_FAMILY_LINEAR 3   /* plain accumulator S += beta k v^T: no erase, no decay */

/* ---- Gate modes (SPEC.md §4.1): how the stored g becomes the log-decay g_eff <= 0. */
#define KDA_GATE_LOG 0         /* g_eff = g (pre-gated, log space) */
#define KDA_GATE_SOFTPLUS 1    /* g_eff = -exp(A_log[hv]) * softplus(g + dt_bias[hv,c]) */
#define KDA_GATE_LOWER_BOUND 2 /* g_eff = lb * sigmoid(exp(A_log[hv]) * (g + dt_bias[hv,c]));
                                  without A_log: lb * sigmoid(g + dt_bias[hv,c]) */

/* ---- Beta modes (SPEC.md §4.2). */
#define KDA_BETA_PROB 0      /* beta used as stored */
#define KDA_BETA_LOGIT 1     /* beta_eff = sigmoid(beta) */
#define KDA_BETA_LOGIT_NEG 2 /* beta_eff = 2 * sigmoid(beta): negative eigenvalues allowed */

/* ---- q/k L2 normalisation (SPEC.md §4.3). */
#define KDA_L2_OFF 0   /* x used as stored */
#define KDA_L2_FLA 1   /* x / sqrt(sum x^2 + eps)  (fla, FlashKDA; eps = 1e-6) */
#define KDA_L2_GGML 2  /* x / max(||x||, eps)      (ggml_l2_norm) */

/* ---- Grouped value heads: which q/k head h serves value head hv (SPEC.md §4.4). */
#define KDA_HEADMAP_DIV 0 /* h = hv / (HV / H)  (fla, vLLM, SGLang) */
#define KDA_HEADMAP_MOD 1 /* h = hv mod H       (ggml) */

/* ---- State layout in memory (SPEC.md §2.4). */
#define KDA_STATE_KV 0 /* [.., K, V]: S[i][j], key index i, value index j (canonical) */
#define KDA_STATE_VK 1 /* [.., V, K]: the transpose (FlashKDA, vLLM's pool) */

/* One call's shapes and options.  Fill with kda_problem_init() and then set fields. */
typedef struct kda_problem {
  int64_t N;  /* sequences */
  int64_t T;  /* tokens in all sequences together (packed) */
  int64_t H;  /* query/key heads */
  int64_t HV; /* value heads; a multiple of H */
  int64_t K;  /* key dimension */
  int64_t V;  /* value dimension */
  int64_t n_checkpoints; /* C: number of checkpoint token indices (0 for none) */
  int32_t family;        /* KDA_FAMILY_* */
  int32_t gate_mode;     /* KDA_GATE_* (ignored for DeltaNet and linear) */
  int32_t beta_mode;     /* KDA_BETA_* */
  int32_t l2_mode;       /* KDA_L2_* */
  int32_t head_map;      /* KDA_HEADMAP_* */
  int32_t state_layout;  /* KDA_STATE_* for h0, ht and hc */
  int32_t has_A_log;     /* 1: A_log is given (required by the softplus gate) */
  int32_t has_initial_state; /* 1: h0 is given; 0: every sequence starts from S = 0 */
  int32_t want_final_state;  /* 1: write ht */
  int32_t reserved0;         /* zero */
  double scale;       /* readout scale applied to q; kda_problem_init sets K^-1/2 */
  double lower_bound; /* lb of KDA_GATE_LOWER_BOUND, in [-5, 0) */
  double l2_eps;      /* eps of the L2 modes; kda_problem_init sets 1e-6 */
  /* ---- Appended in 0.2.0 (backend ABI 2, SPEC.md §7.8).  Later fields are appended here. */
  uint32_t struct_size; /* sizeof(kda_problem) of whoever filled it (kda_problem_init sets it);
                           fields at or past this offset are absent */
  int32_t reserved1;    /* zero */
} kda_problem;

/* The size of kda_problem before struct_size was appended: what a backend written against
 * 0.1 (backend ABI 1) knows.  Fixed forever. */
#define KDA_PROBLEM_V1_SIZE ((uint32_t)offsetof(kda_problem, struct_size))

/* The buffers of one float64 call.  Inputs a mode does not use may be NULL. */
typedef struct kda_tensors_f64 {
  const double *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0;
  const int64_t *cu_seqlens;  /* NULL means N == 1 and cu_seqlens = {0, T} */
  const int64_t *checkpoints; /* [n_checkpoints] */
  double *o;  /* [T, HV, V], required */
  double *ht; /* required when want_final_state */
  double *hc; /* required when n_checkpoints > 0 */
} kda_tensors_f64;

/* The same for the float32 twin (SPEC.md §9). */
typedef struct kda_tensors_f32 {
  const float *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0;
  const int64_t *cu_seqlens;
  const int64_t *checkpoints;
  float *o;
  float *ht;
  float *hc;
} kda_tensors_f32;

/* Defaults: struct_size = sizeof(kda_problem), N = 1, KDA family, pre-gated g, beta as probability, no L2, head map DIV, K-major
 * state, no initial state, final state wanted, scale = K^-1/2 (set from K, so set K first or
 * call again), lower_bound = -5, l2_eps = 1e-6. Shapes are copied from the arguments. */
void kda_problem_init(kda_problem *p, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V);

/* The gate width GW: K for KDA, 1 for Gated DeltaNet, 0 for the families without decay. */
int64_t kda_problem_gate_width(const kda_problem *p);

/* 1 when the problem reads g, dt_bias, A_log (SPEC.md §4.1; as the reference decides). */
int kda_problem_uses_g(const kda_problem *p);
int kda_problem_uses_dt_bias(const kda_problem *p);
int kda_problem_uses_A_log(const kda_problem *p);

/* Element counts of each tensor of a problem (0 when unused): the inputs, o, ht and hc.
 * Case load, save and the generator take them from here, so that all three agree. */
typedef struct kda_problem_sizes {
  uint64_t q, k, v, g, beta, A_log, dt_bias, h0, cu_seqlens, checkpoints, o, ht, hc;
} kda_problem_sizes;
/* Returns KDA_OK, KDA_EINVAL (a non-positive dimension) or KDA_ESHAPE (a tensor's byte size
 * as float64 would exceed SIZE_MAX). */
int kda_problem_sizes_get(const kda_problem *p, kda_problem_sizes *s, char *err,
                          size_t errlen);

/* Checks every field and every size product against SIZE_MAX (SPEC.md §2, §4).
 * Returns KDA_OK, KDA_EINVAL (struct_size not sizeof(kda_problem), bad mode, non-positive dimension, HV not a multiple of H,
 * lower_bound out of range, scale or eps not finite) or KDA_ESHAPE (a size overflows). */
int kda_problem_check(const kda_problem *p, char *err, size_t errlen);

/* Checks cu_seqlens (starts at 0, non-decreasing, ends at T; NULL allowed when N == 1) and
 * checkpoints (strictly increasing in [0, T)).  Returns KDA_OK or KDA_EINVAL. */
int kda_problem_check_index(const kda_problem *p, const int64_t *cu_seqlens,
                            const int64_t *checkpoints, char *err, size_t errlen);

/* Names of modes for messages and manifests ("kda", "softplus", "fla", ...); NULL if invalid. */
const char *kda_family_name(int32_t family);
const char *kda_gate_name(int32_t gate_mode);
const char *kda_beta_name(int32_t beta_mode);
const char *kda_l2_name(int32_t l2_mode);
const char *kda_head_map_name(int32_t head_map);
const char *kda_state_layout_name(int32_t state_layout);

/* Parses a mode name back into its value; returns KDA_OK or KDA_EINVAL. */
int kda_mode_parse(const char *kind, const char *name, int32_t *out);

/* A one-line message for a status code ("invalid argument", ...). */
const char *kda_strstatus(int status);

#ifdef __cplusplus
}
#endif
#endif

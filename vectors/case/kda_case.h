/* kda_case.h: case files (inputs of one problem) and result files, and the random case generator.
 * SPDX-License-Identifier: MIT
 *
 * A case file is a vector file (kda_npz.h) holding the inputs of one kda_problem under fixed
 * member names, with the problem's options in manifest.json (SPEC.md §10.2):
 *
 *   member       dtype            shape            present when
 *   q, k         f8/f4/f2         [T, H, K]        always
 *   v            f8/f4/f2         [T, HV, V]       always
 *   g            f8/f4/f2         [T, HV, GW]      family kda or gdn
 *   beta         f8/f4/f2         [T, HV]          always
 *   A_log        f8/f4            [HV]             has_A_log
 *   dt_bias      f8/f4            [HV, GW]         gate softplus or lower_bound
 *   cu_seqlens   i8/i4            [N + 1]          always (written always; may be absent on
 *                                                  read, meaning N = 1)
 *   h0           f8/f4/f2         [N, HV, K, V]    has_initial_state ([N,HV,V,K] for layout vk)
 *   checkpoints  i8/i4            [C]              C > 0
 *
 * A result file holds a backend's outputs for one case: o [T, HV, V], ht (when the problem
 * wants the final state) and hc [C, HV, K, V] (when it has checkpoints), with a manifest that
 * names the backend, the case's problem and the SHA-256 of the case's inputs.
 *
 * Input values are loaded into float64 arrays; a member stored as f4 or f2 converts exactly.
 * Loading validates everything SPEC.md §6 asks of inputs: shapes agree with each other and
 * with the manifest, cu_seqlens and checkpoints are well-formed, and inputs are finite (g may
 * be -inf only in the pre-gated mode; nothing may be NaN or +inf).
 */
#ifndef KDA_CASE_H
#define KDA_CASE_H

#include <stddef.h>
#include <stdint.h>
#include "kda_precision.h"
#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A case's input precision is a KDA_PRECISION_* of kda_precision.h with a file spelling
 * (fp64, fp32, bf16, fp16; SPEC.md §10.3).  bf16 inputs are stored as f4 values exactly
 * representable in bfloat16, fp16 inputs as f2.  The KDA_PREC_* and kda_prec_* names are kept
 * for source compatibility only (the values changed in 0.2.0 to the ABI's: bf16 3, f16 4). */
#define KDA_PREC_F64 KDA_PRECISION_FP64
#define KDA_PREC_F32 KDA_PRECISION_FP32
#define KDA_PREC_BF16 KDA_PRECISION_BF16
#define KDA_PREC_F16 KDA_PRECISION_FP16
#define kda_prec_name kda_precision_file_name /* "f64" "f32" "bf16" "f16" */
#define kda_prec_parse kda_precision_parse

typedef struct kda_case {
  kda_problem p;
  int32_t input_precision; /* KDA_PRECISION_*: inputs are exact in this format */
  int32_t reserved0;
  /* Inputs as float64 (NULL when the problem does not use them), owned by the case. */
  double *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0;
  int64_t *cu_seqlens;     /* always allocated on load ({0, T} when the member is absent) */
  int64_t *checkpoints;    /* NULL when n_checkpoints == 0 */
  char *id;                /* case id from the manifest (may be NULL) */
  char *manifest_json;     /* the manifest text as read or as generated (owned) */
} kda_case;

/* Sizes bounded by the data (SPEC.md §10.2): the outputs and states a case implies,
 * T*HV*V + (N + C)*HV*K*V elements, must be at most KDA_CASE_ALLOC_FREE elements (128 MiB of
 * float64) or less than KDA_CASE_ALLOC_RATIO times the input elements the file holds (every
 * input member, cu_seqlens as N + 1); load and save refuse another case (KDA_EFORMAT). */
#define KDA_CASE_ALLOC_FREE (UINT64_C(1) << 24)
#define KDA_CASE_ALLOC_RATIO 1024

/* Loads and validates a case file.  On failure the case is left empty (all NULL).  Returns
 * KDA_OK, KDA_EIO, KDA_EFORMAT (container or manifest malformed: bytes after the JSON, an id
 * that is not one path component, outputs not bounded by the data, SPEC.md §10.2),
 * KDA_ENOTFOUND (a member or
 * manifest key the problem needs is missing), KDA_ESHAPE (shapes disagree), KDA_EDTYPE,
 * KDA_EINVAL (bad option or index array), KDA_ENONFINITE, KDA_ENOMEM.  Messages name the file
 * and the member. */
int kda_case_load(const char *path, kda_case *c, char *err, size_t errlen);
/* Writes the case's inputs in its input precision (f64 as f8, f32 and bf16 as f4, f16 as f2;
 * A_log and dt_bias are f32 values stored as f4 unless the precision is f64) with a manifest
 * generated from its problem (and extra, a JSON object text stored as "generator_info"; when
 * NULL, the generator_info of c->manifest_json is kept).  The case is first checked as
 * kda_case_load would check it.  Atomic.  Returns KDA_OK, KDA_EIO, KDA_EINVAL (bad problem,
 * missing array, bad index array, a value not exact in its precision, extra not an object),
 * KDA_ESHAPE (sizes overflow), KDA_EFORMAT (outputs not bounded by the data), KDA_ENONFINITE,
 * KDA_ENOMEM. */
int kda_case_save(const char *path, const kda_case *c, const char *extra_json, char *err,
                  size_t errlen);
/* The same, but the token-major inputs q, k, v, g, beta stay in the file (NULL in c; their
 * dtype and shape are checked, their values are not read): what a streaming reader needs
 * before it reads them window by window (kda_npz_read_range; SPEC.md §7.10).  Returns as
 * kda_case_load. */
int kda_case_load_static(const char *path, kda_case *c, char *err, size_t errlen);
/* kda_case_load (static_only 0) or kda_case_load_static (1) on an archive already open
 * (kda_npz_open), which stays open: a reader that needs more of the file (golden outputs,
 * ranges) opens it once.  Returns as kda_case_load. */
struct kda_npz;
int kda_case_read(struct kda_npz *z, kda_case *c, int static_only, char *err, size_t errlen);
void kda_case_free(kda_case *c);
/* Points t's inputs at the case's arrays (outputs are left NULL). */
void kda_case_tensors(const kda_case *c, kda_tensors_f64 *t);

/* Writes a result file: outputs in dtype (KDA_DTYPE_F64 or KDA_DTYPE_F32), a manifest naming
 * backend and the case, with inputs_sha256: the SHA-256 of the case's input members as
 * kda_case_save stores them (data bytes only, member order).  ht / hc may be NULL when the
 * problem does not want them.  Atomic.  Returns as kda_case_save. */
int kda_result_save(const char *path, const kda_case *c, const char *backend, int32_t dtype,
                    const double *o, const double *ht, const double *hc, char *err,
                    size_t errlen);

/* Reads result file path for case c (SPEC.md §10.2, §7.9) into o, ht, hc (element counts
 * as kda_problem_sizes_get gives; ht / hc NULL when the problem has none).  The manifest must be
 * exactly one JSON object with schema "kda-result/1"; its case_id, when present, must be an id
 * and c's own; every output member must have exactly the problem's shape and dtype <f8 or
 * <f4.  A manifest with "not_supported": REASON returns KDA_EUNSUPPORTED with REASON in err
 * (members are not read).  Returns KDA_OK, KDA_EUNSUPPORTED, or KDA_EIO, KDA_EFORMAT,
 * KDA_ENOTFOUND, KDA_ESHAPE, KDA_EDTYPE, KDA_EINVAL, KDA_ENOMEM with a message naming the
 * file and member. */
int kda_result_load(const char *path, const kda_case *c, double *o, double *ht, double *hc,
                    char *err, size_t errlen);
/* One output member ("o", "ht", "hc") of an open archive against problem p's shape and the
 * output dtypes (as kda_result_load checks it); kda_output_members_read checks and reads
 * those whose destination is not NULL.  Golden outputs in case files are read this way. */
struct kda_npz;
int kda_output_member_check(struct kda_npz *z, const char *path, const kda_problem *p,
                            const char *name, char *err, size_t errlen);
int kda_output_members_read(struct kda_npz *z, const char *path, const kda_problem *p,
                            double *o, double *ht, double *hc, char *err, size_t errlen);

/* ---- The random case generator (SPEC.md §11.2).
 * A description is a list of key=value words separated by spaces or commas-free tokens, e.g.
 *   "seed=7 T=64 H=2 HV=4 K=16 V=8 regime=randn gate=softplus beta=logit l2=fla prec=bf16"
 * Keys: seed, T, H, HV, K, V, seqlens (comma list; N and T from it), family, gate, beta, l2,
 * head_map, layout, scale, lb, eps, alog (0/1), h0 (0/1), final (0/1), checkpoints (comma
 * list of token indices, or "log" for log-spaced), regime, prec, id.  Regimes (SPEC.md §11.2):
 * randn, positive, unit, decay-small, lowrank, expansive, mixed, lowrank-slow. */
typedef struct kda_gen_desc {
  uint64_t seed;           /* 0 .. 2^63 - 1 (it is a JSON integer in the manifest) */
  kda_problem p;
  int32_t regime;          /* KDA_REGIME_* */
  int32_t precision;       /* KDA_PRECISION_* of the generated inputs */
  int64_t *seqlens;        /* [p.N] or NULL (one sequence of p.T tokens) */
  int64_t *checkpoints;    /* [p.n_checkpoints] or NULL */
  char id[128];
} kda_gen_desc;

#define KDA_REGIME_RANDN 0       /* q,k,v ~ N(0,1) (Irwin-Hall); g ~ -U(0,1); beta ~ U(0,1) */
#define KDA_REGIME_POSITIVE 1    /* q,k,v ~ U(0,1) as fla's tests draw them; g, beta as randn */
#define KDA_REGIME_UNIT 2        /* k unit-norm rows; beta ~ U(0,1): contractive */
#define KDA_REGIME_DECAY_SMALL 3 /* g = -1e-4 everywhere (rounded to prec); softplus and
                                    lower_bound gates: g = -9.25 / -11, A_log = dt_bias = 0 */
#define KDA_REGIME_LOWRANK 4     /* keys in a 2-dimensional subspace, full-rank queries */
#define KDA_REGIME_EXPANSIVE 5   /* beta * ||k||^2 up to 3 (outside the non-expansive set) */
#define KDA_REGIME_MIXED 6       /* every 4th gate channel decays slowly (log-decay near -1e-4),
                                    the others as randn; A_log = dt_bias = 0 */
#define KDA_REGIME_LOWRANK_SLOW 7 /* lowrank keys, every channel slow as in mixed */

const char *kda_regime_name(int32_t regime);
int kda_regime_parse(const char *name, int32_t *regime);

/* Parses a description; the desc owns its arrays (free with kda_gen_desc_free).  Returns
 * KDA_OK or KDA_EINVAL with a message naming the bad word. */
int kda_gen_parse(const char *text, kda_gen_desc *d, char *err, size_t errlen);
void kda_gen_desc_free(kda_gen_desc *d);
/* Generates the case of a description, deterministic bit for bit.  Returns KDA_OK,
 * KDA_EINVAL, KDA_ESHAPE, KDA_ENOMEM. */
int kda_gen_case(const kda_gen_desc *d, kda_case *c, char *err, size_t errlen);

/* Inputs of tokens [t0, t1) of description d, all heads, the same bits as kda_gen_case's
 * rows t0 .. t1-1 (q, k [t1-t0, H, K]; v [t1-t0, HV, V]; g [t1-t0, HV, gate width];
 * beta [t1-t0, HV]; NULL where the problem has no such input).  Arrays are malloc'ed
 * float64, owned by w (kda_gen_window_free); an empty range still allocates (one element).
 * Token-independent inputs (A_log, dt_bias, h0, cu_seqlens, checkpoints) come from
 * kda_gen_case_static.  Returns KDA_OK, or as kda_gen_case, with KDA_EINVAL also for a range
 * outside 0 <= t0 <= t1 <= T; on failure w is empty. */
typedef struct kda_gen_window {
  int64_t t0, t1;
  double *q, *k, *v, *g, *beta;
} kda_gen_window;
int kda_gen_range(const kda_gen_desc *d, int64_t t0, int64_t t1, kda_gen_window *w,
                  char *err, size_t errlen);
void kda_gen_window_free(kda_gen_window *w);
/* The case with only its token-independent inputs (q, k, v, g, beta NULL), and its manifest
 * as kda_gen_case makes it.  Returns as kda_gen_case. */
int kda_gen_case_static(const kda_gen_desc *d, kda_case *c, char *err, size_t errlen);

struct kda_npz;
/* ---- Generated inputs and sampled truth (SPEC.md §10.2; kda_case_gen.c).
 * A golden case file whose manifest's golden object says "inputs": "generated" stores no input
 * member; kda_case_load regenerates every input from generator_info.description and checks the
 * SHA-256 of each member's .npy bytes (as kda_case_save would store them) against
 * golden.generated_sha256 ("<member>.npy": hex), which kda_gen_inputs_sha256 computes window
 * by window in bounded memory.  One with "o_sampled": true stores o only at the tokens of
 * member o_index. */
#define KDA_CASE_MEMBERS 10 /* input members, in file order (SPEC.md §10.2) */
/* hex[m]: the SHA-256 of member m (file order: q k v g beta A_log dt_bias cu_seqlens h0
 * checkpoints), "" where the problem does not use it.  Returns as kda_gen_case. */
int kda_gen_inputs_sha256(const kda_gen_desc *d, char hex[KDA_CASE_MEMBERS][65], char *err,
                          size_t errlen);
/* *generated, *sampled from c->manifest_json (0 when it has no golden object).  Returns
 * KDA_OK, or KDA_EFORMAT when the manifest text is not JSON. */
int kda_case_golden_form(const kda_case *c, int *generated, int *sampled);
/* Reads the sampled truth of an open golden case file: o_index (<i8 or <i4 [P], strictly
 * increasing tokens in [0, T)) into *index (malloc'ed), P into *n, and, when o is not NULL,
 * o (<f8 [P, HV, V]) into *o (malloc'ed).  Returns KDA_OK, KDA_ENOTFOUND (no o_index or o),
 * KDA_EFORMAT (the index or o's shape is wrong; the message names the file and member),
 * KDA_EDTYPE, KDA_ENOMEM, KDA_EIO. */
int kda_output_sampled_read(struct kda_npz *z, const char *path, const kda_problem *p,
                            int64_t **index, int64_t *n, double **o, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif

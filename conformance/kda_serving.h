/* kda_serving.h: the cases the serving-path checks derive from a case (SPEC.md §7.7); shared by
 * the runner (kda_runner.c) and `kda conform --export-prompts` / `--candidate` (not installed).
 * SPDX-License-Identifier: MIT
 *
 * Every check splits each sequence n of a case at a cut at[n] (a position inside the sequence,
 * 0 <= at[n] <= L_n): part 1 holds its tokens [0, at[n]), part 2 the tokens [at[n], L_n).  A
 * cut is derived from one offset P of the longest sequence (at[n] = min(P, L_n)) or is the
 * decode cut (at[n] = max(L_n - 1, 0): every sequence resumes at its own last token).
 */
#ifndef KDA_SERVING_H
#define KDA_SERVING_H

#include <stddef.h>
#include <stdint.h>
#include "kda_conform.h"

#define KDA_SERVING_DECODE (-1) /* the offset value naming the decode cut */
#define KDA_SERVING_MAX_OFFSETS 6
#define KDA_SERVING_DRAFTS 4 /* k: draft tokens of the speculative verify */

/* The length of the longest sequence of c. */
int64_t kda_serving_longest(const kda_case *c);
/* The resume offsets for mode (KDA_SERVING_*) of c, in order, deduplicated, each in [1, T)
 * of the longest sequence, KDA_SERVING_DECODE last; writes up to KDA_SERVING_MAX_OFFSETS and
 * returns their number (0 when the longest sequence has fewer than 2 tokens). */
int kda_serving_offsets(const kda_case *c, int32_t mode, int64_t *P);
/* The offset of the causality and speculative checks: floor(5 L / 8) + 1 of the longest L. */
int64_t kda_serving_main_offset(const kda_case *c);
/* at[n] (c->p.N entries) of offset P or KDA_SERVING_DECODE. */
void kda_serving_cut(const kda_case *c, int64_t P, int64_t *at);

/* A derived case (owned copies of everything; free with kda_case_free): the tokens
 * [from[n], to[n]) of every sequence n of c (positions inside the sequence), id
 * "<c's id>.<suffix>", starting from h0 ([N, HV, K, V] in c's layout; NULL: from zero), with
 * the final state asked for, and checkpoints at every token whose position in its sequence is
 * >= ck_from[n] (ck_from NULL: none).  Returns KDA_OK, KDA_ENOMEM, KDA_EINVAL. */
int kda_serving_part(const kda_case *c, const int64_t *from, const int64_t *to,
                     const double *h0, const int64_t *ck_from, const char *suffix,
                     kda_case *out, char *err, size_t errlen);

/* o of c's layout [T, HV, V] from two parts: sequence n takes len1[n] rows of a (rows of
 * sequence n in a follow each other, sequences in order) then len2[n] rows of b. */
void kda_serving_join(const kda_case *c, const int64_t *len1, const int64_t *len2,
                      const double *a, const double *b, double *o);
/* 1 when the rows of tokens before the cut (position in sequence < at[n]) of a and b have the
 * same bits. */
int kda_serving_before_same(const kda_case *c, const int64_t *at, const double *a,
                            const double *b);
/* o = the rows before the cut from before, the others from after (both of c's layout). */
void kda_serving_mix(const kda_case *c, const int64_t *at, const double *before,
                     const double *after, double *o);

/* The perturbations of the causality check (SPEC.md §7.7), applied to every token whose
 * position in its sequence is >= at[n]. */
#define KDA_PERTURB_QV 0  /* q -> -q, v -> -v - 1/2 */
#define KDA_PERTURB_GKB 1 /* g -> g - 1/2, k -> -k - 1/4, beta -> 1 - beta (probability) or
                             -beta - 1/4 (logits) */
/* A copy of c (id "<id>.<suffix>") with perturbation `which` after the cut. */
int kda_serving_perturbed(const kda_case *c, const int64_t *at, int which, const char *suffix,
                          kda_case *out, char *err, size_t errlen);

/* ---- State-pool decode (SPEC.md §7.7, kda_pool_check.c), for a worker whose caps have
 * KDA_CAP_STATE_POOL. */
typedef struct kda_pool_result {
  int32_t outcome; /* KDA_CALL_* of a call that did not run to its end (msg says which) */
  int32_t failed;  /* 1: the check failed (msg says why) */
  char msg[KDA_ERRLEN];
} kda_pool_result;
/* How the check calls the backend (the runner's function, kda_worker_call_pool on its
 * worker, so that the runner is the one caller of the worker), and the backend's output
 * type. */
typedef int (*kda_pool_call_fn)(void *ctx, const kda_problem *p, const kda_tensors_f64 *in,
                                const int64_t *state_indices, int64_t slots, double *pool,
                                kda_outputs *out, kda_call_result *r, char *err,
                                size_t errlen);
typedef struct kda_pool_caller {
  kda_pool_call_fn fn;
  void *ctx;
  int32_t output_dtype;
} kda_pool_caller;
/* The decode cut of c (each sequence's last token from the float64 reference's state before
 * it, rounded to the backend's output type) as one pool call through w: the sequences at shuffled
 * slots of a pool of S = 2N + 3, a padding entry, junk in the free slots, which must keep
 * their bits; o and the final states in their slots scored in class cls as o and ht; then
 * the same call with one index set to S must be KDA_EINVAL and change no slot.  Returns
 * KDA_OK (the verdict in *res) or a runner error (KDA_ENOMEM, the reference's). */
int kda_serving_pool(const kda_pool_caller *w, const kda_case *c, int32_t cls,
                     kda_pool_result *res, char *err, size_t errlen);

/* ---- Serving prompts of candidates (SPEC.md §7.7, §7.9). */
typedef struct kda_serving_prompt {
  kda_case c;      /* the derived case: a case file of its own */
  int32_t kind;    /* KDA_PROMPT_* */
  int32_t reserved0;
  int64_t P;       /* the offset (KDA_SERVING_DECODE for the decode cut) */
} kda_serving_prompt;
#define KDA_PROMPT_RESUME 0 /* ID.resume-P: tokens after the cut from the reference state */
#define KDA_PROMPT_SPEC 1   /* ID.spec-P: k drafts from the reference state, checkpoint each */
#define KDA_PROMPT_CAUSAL 2 /* ID.causal-qv / ID.causal-gkb: perturbed after the main offset */
/* The id of a serving prompt: "<case id>.<suffix>" (resume-P, decode, spec-P, causal-qv,
 * causal-gkb), its kind, offset and (causal prompts) perturbation. */
#define KDA_SERVING_MAX_PROMPTS (KDA_SERVING_MAX_OFFSETS + 3)
typedef struct kda_serving_prompt_id {
  char suffix[32];
  int32_t kind, perturb;
  int64_t P;
} kda_serving_prompt_id;
/* The prompts kda_serving_prompts makes for mode, in its order, without making them (only
 * c's problem and cu_seqlens are read): fills ids (KDA_SERVING_MAX_PROMPTS entries) and
 * returns their number. */
int kda_serving_prompt_ids(const kda_case *c, int32_t mode, kda_serving_prompt_id *ids);
/* The serving prompts of c for mode; *out (owned, free with kda_serving_prompts_free) holds *n.
 * Part-2 prompts start from the float64 reference's state at the cut, rounded to the case's
 * input precision.  Returns KDA_OK or a KDA_* error (the reference's, KDA_ENOMEM). */
int kda_serving_prompts(const kda_case *c, int32_t mode, kda_serving_prompt **out, int64_t *n,
                        char *err, size_t errlen);
/* The same for the prompts i of kda_serving_prompt_ids with want[i] != 0 (want NULL: all). */
int kda_serving_prompts_some(const kda_case *c, int32_t mode, const uint8_t *want,
                             kda_serving_prompt **out, int64_t *n, char *err, size_t errlen);
void kda_serving_prompts_free(kda_serving_prompt *p, int64_t n);
/* 1 when c is an exported serving prompt (its manifest's generator_info has "serving"). */
int kda_serving_is_prompt(const kda_case *c);
/* The generator_info JSON text of prompt sp of case c (free with free()), or NULL. */
char *kda_serving_prompt_info(const kda_case *c, const kda_serving_prompt *sp);
/* Scores a candidate's result file of prompt sp of case c (kda_runner.c): as a case of its
 * own against the reference (kda_conform_candidate); a causal prompt's outputs before the cut
 * must also keep the bits of the case's own result main_path, else a QualityWarning (a
 * candidate cannot be repeated to tell nondeterminism apart).  Returns as
 * kda_conform_candidate. */
int kda_conform_candidate_prompt(const char *result_path, const kda_serving_prompt *sp,
                                 const kda_case *c, const char *main_path,
                                 int32_t cls, const kda_conform_opts *o, kda_case_report *r,
                                 char *err, size_t errlen);

#endif

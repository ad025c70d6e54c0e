/* kda_score_internal.h: what the scorer (kda_score.c) shares with the truth (kda_truth.c),
 * sampled truth (SPEC.md §10.2, golden.o_sampled; kda_sampled.c), streaming scoring (§7.10;
 * kda_score_stream.c) and the runner.  Not installed.
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_SCORE_INTERNAL_H
#define KDA_SCORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "kda_conform.h"
#include "kda_npz.h"

/* ---- Scoring and the fp32 envelope (SPEC.md §7.3-§7.5), behind kda_conform_target. */
double kda_step_allowance(int64_t n);
/* Scores obs against the truth in class cls.  Returns KDA_OK, KDA_EINVAL, KDA_ENOMEM. */
int kda_score_outputs(const kda_case *c, const kda_truth *t, const kda_outputs *obs,
                      int32_t cls, kda_score *s, char *err, size_t errlen);
void kda_score_free(kda_score *s);
/* 1 when every quantity is within its cap and nothing is NaN or Inf. */
int kda_score_within_caps(const kda_score *s);

/* The allowance of an fp32-class element: max(1, C e / cap) with e the envelope at token t
 * (o) or of slot sl (states); the step allowance L(n) when the envelope is absent or e is
 * infinite (an evaluation that overflowed bounds nothing). */
double kda_envelope_allow_o(const kda_envelope *env, int64_t t, double cap, int64_t n);
/* The envelope e at token t, NaN when it is absent or does not hold t's window. */
double kda_envelope_near_o(const kda_envelope *env, int64_t t);
double kda_envelope_allow_state(const double *each, int64_t sl, double cap, int64_t n);
/* Turns the per-window maxima of env->o into the running maximum along the positions (each
 * window also sees the next one; NaN windows, not held by a sampled truth, stay NaN), and
 * env->win_lasts into their median env->win_last. */
void kda_envelope_finish(kda_envelope *env);
/* env->win_lasts (ref-f32's and env->members members') into their median env->win_last. */
void kda_envelope_median(kda_envelope *env);
/* The envelope the open golden case file z carries (SPEC.md §10.2, "Stored envelope"), read
 * into env as kda_envelope_finish leaves it, *found = 1; *found = 0 when z is NULL or c's
 * golden object declares no envelope of rule KDA_ENVELOPE_RULE.  The caller has verified the
 * file's member hashes.  KDA_OK, KDA_EFORMAT (a member of the wrong shape or value, naming the
 * file and member), KDA_ENOTFOUND (a member missing), KDA_ENOMEM. */
int kda_envelope_stored(kda_npz *z, const kda_case *c, kda_envelope *env, int *found,
                        char *err, size_t errlen);
/* Whether the errors in env so far (before kda_envelope_finish) call for members 2 .. E. */
int kda_envelope_needs_ensemble(const kda_problem *p, const kda_envelope *env);
/* Called with each evaluation's outputs (n_eval 0: ref-f32, m: member m), for its growth. */
typedef int (*kda_envelope_each)(void *ctx, const kda_outputs *obs, int n_eval, char *err,
                                 size_t errlen);
/* Runs ref-f32 and (ensemble != 0) the honest ensemble on the case and fills t->env from
 * their errors against t's outputs and scales (t->out and t->mag_* must be set); obs
 * (kda_outputs_alloc'ed for the case) receives each evaluation's outputs before each is
 * called.  ensemble == 0: ref-f32 alone, env->members = -1 (a lazy truth).  KDA_OK,
 * KDA_ENOMEM or the reference's status. */
struct kda_truth;
int kda_envelope_compute(const kda_case *c, struct kda_truth *t, int ensemble,
                         kda_outputs *obs, kda_envelope_each each, void *ctx, char *err,
                         size_t errlen);
void kda_envelope_free(kda_envelope *env);
/* Where a member runs: t0 the global position of the problem's token 0 (its random orders are
 * keyed by it), pos0 the position in its sequence of the problem's first token. */
typedef struct kda_honest_at {
  int64_t t0, pos0;
} kda_honest_at;
/* Honest ensemble member `member` (>= 1, SPEC.md §7.3) on float32 tensors laid out as for
 * kda_ref_forward_f32 (at NULL: a whole case).  KDA_OK or KDA_ENOMEM. */
int kda_honest_forward_f32(const kda_problem *p, const kda_tensors_f32 *ts, uint64_t member,
                           const kda_honest_at *at, char *err, size_t errlen);
/* kda_truth_compute of a derived case (no file) with ref-f32's envelope alone; kda_truth_widen
 * then adds the honest ensemble.  The ensemble only widens the allowance, so a score within
 * the caps under the lazy truth is within them under the widened one. */
int kda_truth_compute_lazy(const kda_case *c, struct kda_truth *t, char *err, size_t errlen);
int kda_truth_widen(const kda_case *c, struct kda_truth *t, char *err, size_t errlen);

/* 1 when the problem is long enough to be streamed by default (SPEC.md §7.10). */
int kda_stream_auto(const kda_problem *p);
/* The truth of case c (only its token-independent inputs loaded: kda_case_load_static) from
 * the file at path, in one chunked pass of ref-f64 (magnitudes, and the truth without golden
 * outputs) and ref-f32 (the envelope of §7.3).  chunk <= 0: KDA_STREAM_CHUNK.  c must outlive
 * t.  kda_conform_case_worker then scores a backend the same way.  Returns KDA_OK or the
 * status of the file or the reference (KDA_EINVAL for a chunk that is not a multiple of 64). */
int kda_truth_stream(const kda_case *c, const char *path, int64_t chunk, kda_truth *t,
                     char *err, size_t errlen);

/* 1 when the case's manifest says golden.o_sampled (kda_case_golden_form), else 0. */
int kda_sampled_declared(const kda_case *c);
/* Reads member o_index of an open archive for problem p (kda_output_sampled_read: <i8 or <i4
 * [P], strictly increasing tokens in [0, T), o of shape [P, HV, V]) and requires whole aligned
 * windows of KDA_ENVELOPE_WINDOW tokens (every token of [64w, min(64w + 64, T)) of each window
 * it touches) and P >= 1.  *idx is freed with free().  Returns KDA_OK, or KDA_ENOTFOUND /
 * KDA_EFORMAT / KDA_EDTYPE / KDA_ENOMEM with a message naming path. */
int kda_sampled_read_index(kda_npz *z, const char *path, const kda_problem *p, int64_t **idx,
                           int64_t *n, char *err, size_t errlen);
/* Reads the sampled o, <f8 of shape exactly [P, HV, V], into o (P * HV * V). */
int kda_sampled_read_o(kda_npz *z, const char *path, const kda_problem *p, int64_t P, double *o,
                       char *err, size_t errlen);
/* The row of token tt in a sampled truth (binary search), or -1 when it is not stored. */
int64_t kda_sampled_row(const int64_t *idx, int64_t n, int64_t tt);
/* The first row of a sampled truth at token tt or later (n when none). */
int64_t kda_sampled_lower(const int64_t *idx, int64_t n, int64_t tt);
/* The truth's o as a full [T, HV, V] array: t->out.o itself when not sampled (*owned 0), else a
 * new array (*owned 1, free()) holding the stored rows and NaN elsewhere. */
int kda_truth_full_o(const kda_problem *p, const kda_truth *t, double **o, int *owned, char *err,
                     size_t errlen);

/* kda_truth_compute on the open case file z (NULL: no file, the float64 reference's truth),
 * which stays open. */
int kda_truth_read(const kda_case *c, kda_npz *z, kda_truth *t, char *err, size_t errlen);
/* kda_truth_stream on the open case file z (closed with the truth when owns_z, also on
 * failure). */
int kda_truth_stream_read(const kda_case *c, kda_npz *z, int owns_z, int64_t chunk,
                          kda_truth *t, char *err, size_t errlen);
/* Largest |S| of each head of a stored state array [slots, HV, K*V] into mag [slots, HV]: the
 * magnitude a state element's error is scaled by (SPEC.md §7.3). */
void kda_score_head_max(const double *x, int64_t slots, int64_t HV, int64_t KV, double *mag);

/* M[t, hv] of SPEC.md §7.3 by the float64 recurrence of problem p on ts (cu_seqlens and
 * checkpoints included): into mag[t * HV + hv] for every token, or with rows, only at the
 * stored tokens: the token t of p (global position rows->t0 + t) that is index[r] goes to
 * mag[(r - rows->first) * HV + hv].  Where ts->o, ts->ht, ts->hc are not NULL they receive
 * ref-f64's outputs, bit for bit (the same calls in the same order as kda_ref_forward_f64):
 * a streamed case runs the float64 recurrence once per chunk. */
typedef struct kda_mag_rows {
  const int64_t *index;
  int64_t n, t0, first;
} kda_mag_rows;
int kda_mag_trace(const kda_problem *p, const kda_tensors_f64 *ts, const kda_mag_rows *rows,
                  double *mag, char *err, size_t errlen);

/* ---- Scoring in pieces (SPEC.md §7.10): kda_score_outputs is begin, the o rows of each
 * sequence, end; a streamed case calls kda_score_o_rows once per chunk, in token order, so
 * that both give the same bits. */
typedef struct kda_score_acc {
  kda_score *s;
  const kda_truth *t; /* envelope, sampled index, states and their magnitudes */
  double *tok, *tmp;  /* [T] per-token error without allowance (NaN: not scored); work */
  double sd, se;      /* o's sums for the RMS ratio */
} kda_score_acc;
/* Tokens [t0, t1) of sequence n: truth and mag hold the truth's rows of these tokens starting
 * at row r0 of the truth (t0's row, or a sampled truth's first stored row >= t0), obs the
 * observed rows of every token [t1 - t0, HV, V]. */
typedef struct kda_o_rows {
  int64_t n, t0, t1, r0;
  const double *truth, *mag, *obs;
} kda_o_rows;
int kda_score_begin(const kda_case *c, const kda_truth *t, int32_t cls, kda_score *s,
                    kda_score_acc *a, char *err, size_t errlen);
void kda_score_o_rows(kda_score_acc *a, const kda_case *c, const kda_o_rows *x);
/* The states (whole arrays, ht / hc NULL when the truth has none), windows and growth. */
void kda_score_end(kda_score_acc *a, const kda_case *c, const double *ht, const double *hc);

/* ---- A streamed case's passes (kda_score_stream.c, SPEC.md §7.10). */
/* The reference pass of kda_truth_stream over the open case file z (closed with the stream
 * when owns_z, also on failure): fills t (t->stream first), which the caller frees on
 * failure. */
int kda_stream_truth_pass(const kda_case *c, kda_npz *z, int owns_z, int64_t chunk,
                          kda_truth *t, char *err, size_t errlen);

/* How the scoring pass calls the backend on one chained chunk (the runner's function, so that
 * the runner is the one caller of the worker): outputs of problem p on inputs in into out
 * (allocated for p), the outcome in r.  Returns KDA_OK or a runner failure. */
typedef int (*kda_chunk_call_fn)(void *ctx, const kda_problem *p, const kda_tensors_f64 *in,
                                 kda_outputs *out, kda_call_result *r, char *err, size_t errlen);
typedef struct kda_chunk_caller {
  kda_chunk_call_fn fn;
  void *ctx;
} kda_chunk_caller;

typedef struct kda_stream_result {
  kda_call_result call;   /* KDA_CALL_OK, or the first chunk call's other outcome */
  int64_t chunks;         /* chained calls that ran */
  int64_t fail_t0, fail_t1; /* the tokens of the chunk whose call did not succeed */
  double seconds;         /* their wall time, summed */
} kda_stream_result;
/* Scores the backend called by call on streamed case c (t from kda_truth_stream) in class cls:
 * every chunk of every sequence is one call from the state the backend returned for the chunk
 * before (the case's h0 for the first), scored as it comes.  res->call is the outcome
 * (KDA_CALL_UNSUPPORTED: the backend does not take a chunk's problem, typically a chained one
 * with h0).  Returns KDA_OK or a runner failure. */
int kda_stream_score(const kda_chunk_caller *call, const kda_case *c, const kda_truth *t,
                     int32_t cls, kda_score *s, kda_stream_result *res, char *err,
                     size_t errlen);
int64_t kda_stream_chunk(const struct kda_stream *s);
const char *kda_stream_path(const struct kda_stream *s);
/* The case file the stream reads (open while the truth lives). */
kda_npz *kda_stream_npz(const struct kda_stream *s);
void kda_stream_free(struct kda_stream *s);

/* The gradients of a candidate's result file (kda_grad.c, SPEC.md §13.7): the members dq .. dh0
 * present and in g->has, checked (dtype, shape) and read into d[b] (allocated, free()); *have
 * their bits.  The manifest is checked as kda_result_load does (KDA_EUNSUPPORTED with the
 * reason for not_supported).  Returns KDA_OK or the file's error, naming it. */
int kda_grad_result_read(const char *path, const kda_case *c, const kda_grad_truth *g,
                         double **d, uint32_t *have, char *err, size_t errlen);

/* kda_runner.c: scores one case held in memory as a candidate's result file (the truth its
 * float64 reference), filling r (zeroed by the caller; kda_case_report_free after); the
 * engine of kda_conform_outputs (kda_bind.c).  Returns KDA_OK or the error with a message. */
int kda_runner_score_memory(const kda_problem *p, const kda_tensors_f64 *in, int32_t cls,
                            const char *id, kda_case_report *r, char *err, size_t errlen);

#endif

/* kda_conform.h: the conformance runner: backend registry and loader, isolated calls, the
 * tolerance model and metrics, verdicts and reports (SPEC.md §7).
 * SPDX-License-Identifier: MIT
 *
 * A run: each backend to score is a target (kda_target_open: a worker process of its own,
 * started once); each case file is opened once (kda_case_file_open) and its truth computed
 * once (kda_case_file_truth: golden float64 outputs when the file carries them, verified
 * against their recorded hashes, else the float64 reference, with the magnitude scales and
 * the fp32 envelope); kda_conform_target scores a target on it in units of its precision
 * class and forms the verdict (kda_case_report); the reports are written by kda_report_*
 * and the run's exit status is kda_run_status.  Library functions never print except into
 * the FILE* they are given, never exit, and return KDA_* statuses with one-line messages.
 *
 * Installed (include/kda), so that programs and bindings can drive the runner; libkda.so
 * exports exactly what is declared here and in the other installed headers (make
 * check-symbols).  Stability until 1.0 (SPEC.md §7.8):
 *   - stable: the registry, kda_backend_resolve / kda_backend_validate, kda_plugin_load /
 *     unload, the class functions (kda_class_*), the KDA_CALL_* and KDA_VERDICT_* values and
 *     their name functions;
 *   - UNSTABLE: the layout of every struct below (kda_backend_ref, kda_call_opts,
 *     kda_call_result, kda_outputs, kda_truth, kda_score, kda_case_report, kda_conform_opts,
 *     kda_tally, ...) and the functions that take them: fields may be added, resized or
 *     reordered in any 0.x release, so a program using them is rebuilt against each
 *     release's headers (it must not be given a struct by a library of another version).
 *     Use kda_conform_opts_init and the library's allocators rather than filling them by hand.
 */
#ifndef KDA_CONFORM_H
#define KDA_CONFORM_H

#include <stdint.h>
#include <stdio.h>
#include "kda_backend.h"
#include "kda_case.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Registry of built-in backends (BLIS-style: the reference is just another backend). */
int32_t kda_backend_builtin_count(void);
const kda_backend *kda_backend_builtin(int32_t i);   /* NULL when i is out of range */
const kda_backend *kda_backend_find(const char *name); /* a built-in by name, or NULL */
/* 1 when built-in i is in the set `kda conform` scores when no backend is named (every
 * built-in but the slow mpfr), else 0. */
int kda_backend_builtin_is_default(int32_t i);
/* Appends b to the built-ins (after libkda's own, in the order of the calls), in the default
 * set when is_default.  A program that links a backend of another library adds it before
 * anything uses the registry: the `mpfr` backend lives in libkda-oracle with the MPFR
 * reference (conformance/backends/mpfr/kda_backend_mpfr.h), so that libkda needs no MPFR.
 * Returns KDA_OK, KDA_EINVAL (b NULL or its name taken) or KDA_ENOMEM (KDA_BUILTIN_ADDED_MAX
 * added already). */
#define KDA_BUILTIN_ADDED_MAX 8
int kda_backend_builtin_add(const kda_backend *b, int is_default);
/* Checks a table (SPEC.md §7.8): version, struct_size against the version's prefix
 * (KDA_BACKEND_V1_SIZE or KDA_BACKEND_V2_SIZE), reserved0 zero, required slots, name, class
 * and dtypes; for version 2 the buffer slots all or none, with synchronize when present.
 * Reads nothing past the version's prefix.  Returns KDA_OK or KDA_EINVAL with a message
 * (KDA_EUNSUPPORTED for an ABI version this runner does not know). */
int kda_backend_validate(const kda_backend *b, char *err, size_t errlen);
/* The precision class and element types of b opened with params (SPEC.md §7.8): the table's,
 * or what its variant slot (when present) returns for params, validated as the table's
 * fields (a write past the record's struct_size is caught too).  Returns KDA_OK; KDA_EINVAL
 * with *rejected = 1 when the backend rejected params (a usage error), or with *rejected = 0
 * for what it returned; or the backend's other status.  The caller runs it where plugin code
 * may run (the worker). */
int kda_backend_variant_get(const kda_backend *b, const char *params, kda_backend_variant *v,
                            int *rejected, char *err, size_t errlen);

/* ---- One way to name a backend (SPEC.md §7.8), shared by every subcommand.
 * A spec is "NAME[:PARAMS]" for a built-in, or "PATH[:PARAMS]" for a plugin, where PATH
 * contains a '/' or ends in ".so"; a NAME that is not a built-in is looked up as
 * libkda_NAME.so, then NAME.so, in the directories of KDA_PLUGIN_PATH (':'-separated).
 * PARAMS is the string passed to the backend's open ("" when absent).  The spec splits at
 * its first ':' (a PATH cannot contain one); "x.so" means "./x.so"; a path must name a
 * readable file; a searched NAME is [A-Za-z0-9._-]+. */
typedef struct kda_backend_ref {
  const kda_backend *builtin; /* the built-in table, or NULL for a plugin */
  char path[4096];            /* the plugin's path ("" for a built-in) */
  char params[1024];          /* parameters for open ("" when none) */
  char spec[1024];            /* the spec as given, for messages */
} kda_backend_ref;
/* Returns KDA_OK, KDA_ENOTFOUND (no such built-in or plugin) or KDA_EINVAL (too long). */
int kda_backend_resolve(const char *spec, kda_backend_ref *out, char *err, size_t errlen);
/* The reference of a built-in table b with params (NULL for none), its spec b's name: what
 * kda_conform_case and kda_call_forward start a worker with.  Longer params are cut. */
void kda_backend_ref_of(const kda_backend *b, const char *params, kda_backend_ref *out);

/* ---- Case filter (SPEC.md §7.8): which cases a run scores.  Each pattern is an fnmatch GLOB
 * on the case id, or "flag:GLOB" on the names in the manifest's golden.flags; a leading '!'
 * negates it.  A case is selected when no positive pattern is given or one matches, and no
 * negative pattern matches.  manifest_json may be NULL (no flags).  Returns 1 or 0. */
int kda_case_filter_match(const char *const *patterns, int32_t n, const char *case_id,
                          const char *manifest_json);
/* The same rule for a serving prompt prompt_id of case case_id (SPEC.md §7.7): a pattern
 * matches the prompt when it matches the prompt's id or its case's id, so that -k ID selects
 * a case with its prompts and -k ID.decode that prompt alone.  Returns 1 or 0. */
int kda_prompt_filter_match(const char *const *patterns, int32_t n, const char *case_id,
                            const char *prompt_id, const char *manifest_json);
/* The manifest's golden.flags joined with ',' into buf ("" when none).  Returns buf. */
char *kda_case_flags(const char *manifest_json, char *buf, size_t cap);

/* A loaded plugin (dlopen).  kda_plugin_load resolves kda_backend_entry, calls it with
 * KDA_BACKEND_ABI_VERSION and validates the table.  Returns KDA_OK, KDA_EIO (dlopen failed),
 * KDA_ENOTFOUND (no entry symbol, or the entry returned NULL), KDA_EINVAL, KDA_EUNSUPPORTED,
 * KDA_ENOMEM. */
typedef struct kda_plugin kda_plugin;
int kda_plugin_load(const char *path, kda_plugin **out, const kda_backend **backend, char *err,
                    size_t errlen);
void kda_plugin_unload(kda_plugin *p);

/* ---- Precision classes and the tolerance table (SPEC.md §7.2, §7.4). */
typedef struct kda_caps {
  double o, ht, hc; /* allowed error in class units at the magnitude scale of §7.3 */
} kda_caps;
/* Class names are kda_precision_name / kda_precision_parse of kda_precision.h (SPEC.md §10.3);
 * the 0.1 names remain as aliases for source compatibility. */
#define kda_class_name kda_precision_name
#define kda_class_parse kda_precision_parse
double kda_class_unit(int32_t cls);                  /* the unit roundoff u, or 0 */
double kda_class_tiny(int32_t cls); /* smallest subnormal of the output format, or 0 (§7.3) */
/* The step allowance L(n) = max(1, n / KDA_STEP_ALLOWANCE_N0) of an element n steps into its
 * sequence (SPEC.md §7.3): caps were calibrated up to N0 steps; the a-priori error bound of a
 * non-expansive recurrence grows linearly with the number of steps. */
#define KDA_STEP_ALLOWANCE_N0 256
int kda_class_caps(int32_t cls, kda_caps *caps);     /* KDA_OK or KDA_EINVAL */

/* ---- Outputs of one call, float64 whatever the backend computed in. */
typedef struct kda_outputs {
  double *o, *ht, *hc;      /* ht / hc NULL when the problem has none */
  uint64_t n_o, n_ht, n_hc; /* element counts */
} kda_outputs;
int kda_outputs_alloc(const kda_problem *p, kda_outputs *out, char *err, size_t errlen);
void kda_outputs_free(kda_outputs *out);

/* ---- The envelope of the class's honest spread (SPEC.md §7.3): the errors of ref-f32 and of
 * the honest ensemble (kda_honest.c) on the case, in fp32 units without any allowance, per
 * window of KDA_ENVELOPE_WINDOW tokens (global positions) and per state slot, the maximum over
 * the evaluations, then the running maximum along the positions.  An fp32-class element is
 * allowed KDA_ENVELOPE_C times that (never less than the cap).  Member 1 runs on every case,
 * the other members where ref-f32's or member 1's error exceeds cap / KDA_ENVELOPE_GATE. */
#define KDA_ENVELOPE_WINDOW 64
#define KDA_ENVELOPE_C 4.0
#define KDA_ENVELOPE_MEMBERS 8  /* honest evaluations besides ref-f32 */
#define KDA_ENVELOPE_GATE 16.0
/* A golden case file may carry its envelope (SPEC.md §10.2, "Stored envelope"): the golden
 * object's "envelope" {"rule": KDA_ENVELOPE_RULE, ...} and the members envelope_o [n_win]
 * (after the running maximum), envelope_ht [N], envelope_hc [C] and envelope_last [1 +
 * members] (each evaluation's last-window mean), hash-checked like every member.  The rule
 * names the ensemble, the window and the gate above: a change to any of them is a new rule,
 * and an envelope stored under another rule is recomputed. */
#define KDA_ENVELOPE_RULE "kda-envelope/1"
typedef struct kda_envelope {
  double *o;          /* [n_win] the envelope of each window (running maximum), or NULL */
  double *ht, *hc;    /* [N], [C] worst honest state error of each slot (NULL when none) */
  int64_t n_win;
  int32_t growth_kind; /* the largest growth class of the evaluations (SPEC.md §7.5) */
  int32_t members;     /* members run besides ref-f32 (-1: a lazy truth, not yet considered) */
  double alpha;        /* the largest growth exponent of the evaluations */
  double win_last;     /* the median of the evaluations' last-window means */
  double win_lasts[1 + KDA_ENVELOPE_MEMBERS]; /* ref-f32's, then each member's */
} kda_envelope;
/* ---- The truth and its magnitude scales (SPEC.md §7.3). */
typedef struct kda_truth {
  kda_outputs out;   /* exact result (golden, correctly rounded) or the float64 reference */
  double *mag_o;     /* [n_rows, HV]: max_j sum_i |S_t[i][j]| |qhat_i| */
  double *mag_ht;    /* [N, HV]: max |S| over the head's final state */
  double *mag_hc;    /* [C, HV]: max |S| over the head's checkpoint state */
  int32_t from_golden; /* 1: the outputs came from the case file's golden members */
  int32_t reserved0;
  kda_envelope env;    /* the fp32 class's plain emulation on this case (SPEC.md §7.3) */
  /* Sampled truth (SPEC.md §10.2, golden.o_sampled): the global tokens, strictly increasing
   * and in whole aligned 64-token windows, whose rows out.o and mag_o hold; NULL when they
   * hold every token.  n_rows is the number of rows (T when not sampled). */
  int64_t *o_index;
  int64_t n_rows;
  /* A streamed case (SPEC.md §7.10, kda_truth_stream): out.o and mag_o are NULL; the inputs
   * and truth rows are read chunk by chunk from here when a backend is scored. */
  struct kda_stream *stream;
  /* A streamed case with golden outputs: the magnitudes M of every truth row [n_rows, HV]
   * (what mag_o holds for a whole case), kept by the reference pass when they fit
   * KDA_STREAM_MAG_MAX values so that scoring passes need not rerun the float64 recurrence;
   * NULL otherwise (SPEC.md §7.10). */
  double *mag_rows;
} kda_truth;
#define KDA_STREAM_MAG_MAX (INT64_C(1) << 24)
/* Golden members o / ht / hc are used when the case file at path (may be NULL) has them.
 * Returns KDA_OK or the status of the reference or the file. */
int kda_truth_compute(const kda_case *c, const char *path, kda_truth *t, char *err,
                      size_t errlen);
void kda_truth_free(kda_truth *t);

/* ---- Streaming scoring in bounded memory (SPEC.md §7.10).  A case whose T * HV * max(K, V)
 * exceeds KDA_STREAM_AUTO (or any case, on request) is scored from its file chunk by chunk:
 * inputs read by range (or generated, golden.inputs "generated"), backends called on chunks
 * of `chunk` tokens chained through h0 -> ht, only per-window summaries and states kept. */
#define KDA_STREAM_AUTO (INT64_C(1) << 24)
#define KDA_STREAM_CHUNK 16384 /* default tokens per chained call, a multiple of 64 */
/* ---- Gradient cases (SPEC.md §13.7): a case file with the seed member `do` (and `dht`,
 * `dhc` where the problem has ht, hc) is also scored on the backward pass, in a report of its
 * own, ID.backward.  Its truth is the golden gradient members (dq dk dv dg dbeta dA_log
 * ddt_bias dh0) when the file carries them (their hashes verified), else ref-f64's backward
 * (kda_ref_backward_f64).  An element's error is |x^ - x| / max(u M, eta) with M the
 * magnitude of its group: the largest |x| of its (64-token window, head) for dq dk dv dg
 * dbeta, of its (sequence, head) for dh0, and the sum of the absolute terms Sum_t |dg| (times
 * the gate's factor for dA_log) for ddt_bias and dA_log. */
#define KDA_GRAD_WINDOW KDA_ENVELOPE_WINDOW
/* The KDA_GRAD_* bits of the gradients problem p has (SPEC.md §13.1): dq dk dv dbeta when it
 * has tokens, dg for a decaying family, dA_log and ddt_bias when the gate reads them, dh0 with
 * an initial state. */
uint32_t kda_grad_problem(const kda_problem *p);
/* The member name of gradient bit b ("dq" .. "dh0"), "?" out of range. */
const char *kda_grad_name(int b);
typedef struct kda_grad_truth {
  int32_t present;     /* 1: the case carries seeds and the truth below is computed */
  int32_t from_golden; /* 1: the golden gradient members of the case file */
  uint32_t has;        /* KDA_GRAD_* bits of the gradients the problem has */
  int32_t reserved0;
  double *dout, *dht, *dhc;       /* the seeds (dht, dhc NULL when the problem has none) */
  double *d[KDA_GRAD_COUNT];      /* the exact gradients, bit order (NULL: not in the problem) */
  uint64_t n[KDA_GRAD_COUNT];     /* their element counts */
  double *mag[KDA_GRAD_COUNT];    /* M of each group */
  double *env[KDA_GRAD_COUNT];    /* fp32 class: ref-f32's worst error of each group, as a
                                     running maximum over the windows from the sequence's end;
                                     NULL before kda_grad_truth_envelope */
  int64_t n_win;                  /* windows of KDA_GRAD_WINDOW tokens */
} kda_grad_truth;
/* The seeds and truth of case c: seeds from the open case file z (members do, dht, dhc) or,
 * z NULL, from seeds (a case held in memory; NULL: none); the truth from z's golden gradient
 * members or ref-f64; then ref-f32's envelope (§7.3's rule on gradients).  g->present is 0
 * (and KDA_OK returned) when there are no seeds.  Returns KDA_OK, or the file's or the
 * reference's status (a seed of the wrong shape, dtype or a non-finite value is bad input
 * naming the file and member). */
typedef struct kda_grad_seeds {
  const double *dout, *dht, *dhc;
} kda_grad_seeds;
int kda_grad_truth_read(const kda_case *c, struct kda_npz *z, const kda_grad_seeds *seeds,
                        kda_grad_truth *g, char *err, size_t errlen);
void kda_grad_truth_free(kda_grad_truth *g);
/* ---- A case file, opened once for a run: the archive stays open while the handle lives,
 * and the inputs, the member hashes, the golden outputs and the sampled index are all read
 * through it (one open of the file per case). */
#define KDA_CASE_STREAM_NEVER (-1) /* whole arrays in memory */
#define KDA_CASE_STREAM_AUTO 0     /* streamed when kda_stream_auto says so (SPEC.md §7.10) */
#define KDA_CASE_STREAM_ALWAYS 1
typedef struct kda_case_file {
  kda_case c;            /* the inputs: whole, or the token-independent ones when streamed */
  kda_problem_sizes sizes; /* the problem's geometry, computed once */
  kda_truth t;           /* valid after kda_case_file_truth */
  int32_t streamed;      /* 1: scored chunk by chunk (kda_truth_stream) */
  int32_t has_truth;
  int64_t chunk;         /* tokens per chained call when streamed (<= 0: the default) */
  struct kda_npz *z;     /* the archive, open until kda_case_file_close */
  kda_grad_truth g;      /* the gradient truth (SPEC.md §13.7), after kda_case_file_grad_truth */
} kda_case_file;
/* Opens path and reads its inputs (kda_case_read): whole, or as kda_case_load_static when
 * streamed (stream KDA_CASE_STREAM_*).  On failure f is empty.  Returns as kda_case_load. */
int kda_case_file_open(const char *path, int32_t stream, int64_t chunk, kda_case_file *f,
                       char *err, size_t errlen);
/* The truth of f, from the open archive (kda_truth_compute, or kda_truth_stream when
 * streamed); computed once.  Returns as those. */
int kda_case_file_truth(kda_case_file *f, char *err, size_t errlen);
void kda_case_file_close(kda_case_file *f);
/* Reads f's seeds and gradient truth (kda_grad_truth_read; f->g.present 0 when the file has
 * no member do).  Returns as that. */
int kda_case_file_grad_truth(kda_case_file *f, char *err, size_t errlen);

/* ---- Isolated calls (SPEC.md §7.8). */
#define KDA_CALL_OK 0
#define KDA_CALL_UNSUPPORTED 1 /* supports or forward said KDA_EUNSUPPORTED */
#define KDA_CALL_ERROR 2       /* open or forward returned another error */
#define KDA_CALL_CRASH 3       /* a signal, an exit, or a write past an output buffer */
#define KDA_CALL_TIMEOUT 4     /* killed after the time limit */
#define KDA_CALL_FPENV 5       /* the floating-point environment changed */
#define KDA_CALL_INPUT 6       /* the backend modified an input buffer */

typedef struct kda_call_opts {
  double timeout_s; /* per wait on the backend (load, open, call, close); <= 0: no limit */
  int32_t isolate;  /* 1: a worker process per backend (§7.8); 0: in-process (debugging) */
  int32_t reserved0;
  int64_t memory_limit; /* the worker's address space in bytes; 0: automatic, sized from each
                           call's buffers (§7.8); -1: none */
} kda_call_opts;

typedef struct kda_call_result {
  int32_t outcome; /* KDA_CALL_* */
  int32_t status;  /* the backend's KDA_* status */
  double seconds;  /* wall time of the call */
  char msg[KDA_ERRLEN];
} kda_call_result;
const char *kda_call_outcome_name(int32_t outcome);

/* Runs open(params), supports, forward and close of backend b on problem p with the float64
 * inputs in (outputs of in are ignored), writing float64 outputs into out (allocated by the
 * caller with kda_outputs_alloc), in a worker started for this one call (kda_worker_start;
 * opts->isolate 0: in-process).  Returns KDA_OK when the call ran to an outcome (read
 * r->outcome) or KDA_ENOMEM / KDA_EIO when the runner itself failed (fork, mmap, pipe). */
int kda_call_forward(const kda_backend *b, const char *params, const kda_problem *p,
                     const kda_tensors_f64 *in, kda_outputs *out, const kda_call_opts *opts,
                     kda_call_result *r, char *err, size_t errlen);

/* ---- Targets: a backend to score, in a worker process of its own (SPEC.md §7.8).  Started
 * once per run (the plugin is loaded only inside it) and serving every call of every case; a
 * crash or time-out is that call's outcome and the next call starts a fresh process; a load
 * failure is recorded once and is the outcome of every case. */
typedef struct kda_target kda_target;
#define KDA_TARGET_LOG_MAX 4096 /* bytes of the backend's stdout/stderr kept per case */
#define KDA_WORKER_LOG_MAX KDA_TARGET_LOG_MAX
typedef struct kda_target_info {
  char name[64];           /* the table's name (before it loaded: the spec's file name) */
  char label[64];          /* what reports call it: NAME, or NAME:PARAMS (SPEC.md §7.6) */
  char description[256];
  int32_t cls;             /* precision class of its parameters (§7.8), -1 when not loaded */
  int32_t input_dtype, output_dtype; /* element types of its buffers */
  uint32_t abi_version, caps;
  int32_t loaded;          /* 0: loading failed, load_result says how */
  int32_t params_rejected; /* 1: its variant slot rejected the parameters (a usage error) */
  kda_call_result load_result;
} kda_target_info;
/* Starts the worker of ref with the time and memory limits of o (NULL: isolated, 60 s,
 * automatic memory limit) and waits (bounded) until it has loaded the backend.  Returns
 * KDA_OK and sets *out, also when the backend failed to load (info->loaded 0), or KDA_ENOMEM
 * / KDA_EIO (fork, socket, memfd). */
int kda_target_open(const kda_backend_ref *ref, const kda_call_opts *o, kda_target **out,
                    char *err, size_t errlen);
const kda_target_info *kda_target_info_get(const kda_target *t);
/* Kills the worker's process group and reaps it (bounded); t may be NULL. */
void kda_target_close(kda_target *t);

/* A backend's first call, as `kda conform --list-backends` makes it (SPEC.md §7.8): supports
 * and forward on a tiny problem (T = 4, K = V = 16, inputs exact in the backend's input type),
 * then describe, on target t; its handle closed after. */
typedef struct kda_probe {
  int32_t runs;              /* 1: the call succeeded */
  int32_t has_info;          /* 1: describe filled info */
  kda_backend_info info;
  char why[KDA_ERRLEN + 64]; /* why it does not run here ("" when it runs) */
} kda_probe;
void kda_conform_probe(kda_target *t, kda_probe *out);

/* ---- Metrics (SPEC.md §7.5). */
typedef struct kda_where {
  int64_t a, b, c, d; /* o: token, seq, head, channel j; ht: seq, head, i, j; hc: ckpt, head,
                         i, j (c, d are key and value channels whatever the layout) */
} kda_where;

typedef struct kda_qmetric {
  uint64_t count;      /* elements scored */
  double worst;        /* max error in class units */
  kda_where at;        /* where worst occurs */
  uint64_t worst_index;
  double max_abs;      /* max |observed - expected| */
  double rms_ratio;    /* fla's RMS(diff) / RMS(expected) */
  uint64_t n_nan, n_inf, n_fail; /* NaN, Inf (where expected is finite), elements over cap */
  /* The worst element (SPEC.md §7.3, §7.9): its values; the error scale max(u M, tiny) of
   * that element (one class unit there); the allowance A it was divided by (worst and the
   * cap are in units of A: A x cap allowed); ref-f32's error near it in class units (the
   * fp32 envelope; NaN when the class has none). */
  double worst_expected, worst_observed, worst_scale, worst_allow, worst_env;
} kda_qmetric;

#define KDA_MAX_FAIL_LINES 16
typedef struct kda_fail_line {
  char quantity[12];   /* "o", "ht", "hc", or a gradient "dq" .. "ddt_bias" (SPEC.md §13.7) */
  kda_where at;
  uint64_t index;      /* flat element index in the member */
  double expected, observed, err, allowed;
} kda_fail_line;

#define KDA_GROWTH_NA 0
#define KDA_GROWTH_BOUNDED 1
#define KDA_GROWTH_RANDOM_WALK 2
#define KDA_GROWTH_SYSTEMATIC 3
#define KDA_GROWTH_UNSTABLE 4
const char *kda_growth_name(int32_t kind);

typedef struct kda_score {
  int32_t cls;
  int32_t growth_kind;   /* KDA_GROWTH_* (NA for sequences shorter than 256 tokens) */
  kda_caps caps;
  double unit;
  double tiny;           /* floor of the error scale: kda_class_tiny(cls) */
  kda_qmetric o, ht, hc; /* errors in class units divided by the step allowance */
  int64_t first_fail_token; /* -1 when no output element exceeds its cap */
  int64_t window;           /* tokens per window */
  double win_first, win_last, win_worst; /* mean per-token o error (class units, without the
                                            step allowance) in the first, last, worst window */
  int64_t win_worst_start;
  double alpha;             /* growth exponent (median-ratio estimator), NaN when NA */
  double alpha_fit;         /* least-squares slope of log err against log position */
  double *hc_each;          /* [C] worst state error at each checkpoint (owned), or NULL */
  int64_t n_hc_each;
  double *win_each;         /* [n_win_each] mean per-token o error (class units, without the
                               step allowance) of each window of `window` tokens, the last one
                               possibly shorter (owned), or NULL; for the report's plots */
  int64_t n_win_each;
  int64_t win_tokens;       /* tokens the windows cover (T) */
  /* Per window too (SPEC.md §7.9; in the same allocation as win_each, NaN for a window no
   * token of which was scored): the worst o error without allowance, the envelope value e
   * of §7.3 used there (ref-f32's worst over the window and its stored neighbours; NaN
   * without an envelope) and the largest allowance used in the window. */
  double *win_max_each, *win_env_each, *win_allow_each;
  /* A case shorter than KDA_STEP_ALLOWANCE_N0 tokens has too few windows to plot: per token
   * instead (SPEC.md §7.9), its worst o error without allowance and its allowance, NaN for a
   * token not scored (one allocation, owned); NULL and 0 for longer cases. */
  double *tok_each, *tok_allow_each;
  int64_t n_tok_each;
  int32_t n_lines;          /* failure lines kept, first failing elements in index order */
  int32_t growth_beyond;    /* growth against the class emulation's on the case (§7.5): 1
                               beyond it, 0 not beyond (the case's own drift), -1 no emulation
                               (classes other than fp32) */
  kda_fail_line lines[KDA_MAX_FAIL_LINES];
  /* A backward report (SPEC.md §13.7; o, ht, hc not scored): the KDA_GRAD_* bits of the
   * gradients scored, and of those the problem has that the backend did not provide; each
   * scored gradient's metrics in grad[] (bit order, errors over the allowance), all under the
   * cap grad_cap; per window of KDA_GRAD_WINDOW tokens, for the plots, the worst error of dq,
   * dk, dv, dg without the allowance and the largest cap x allowance used there (NaN where
   * the window holds no element): grad_win[(2 q + 0) n + w] and [(2 q + 1) n + w], q = 0..3,
   * n = n_grad_win (owned, or NULL). */
  uint32_t grad_scored, grad_missing;
  double grad_cap;
  kda_qmetric grad[KDA_GRAD_COUNT];
  double *grad_win;
  int64_t n_grad_win;
} kda_score;

/* ---- Verdicts (SPEC.md §7.6). */
#define KDA_VERDICT_PASS 0
#define KDA_VERDICT_FAIL 1
#define KDA_VERDICT_QUALITY_WARNING 2
#define KDA_VERDICT_NOT_SUPPORTED 3
#define KDA_VERDICT_WAIVED 4
#define KDA_VERDICT_CRASH 5
#define KDA_VERDICT_TIMEOUT 6
const char *kda_verdict_name(int32_t v); /* "Pass", "Fail", ... */
/* 1 for the verdicts that make the run fail (Fail, Crash, Timeout). */
int kda_verdict_is_failure(int32_t v);

/* Waivers (SPEC.md §7.6, conformance/kda_ci.c): a JSON file {"waivers":[{"case":GLOB,
 * "backend":GLOB,"flag":NAME,"reason":TEXT,"link":URL}, ...]} (optional "schema":
 * "kda-waivers/1"); a waiver matches when every key it gives matches.  The loader rejects
 * unknown keys, non-string or empty values, a missing reason and a waiver that selects nothing,
 * naming the file and the waiver's index (KDA_EFORMAT). */
typedef struct kda_waivers kda_waivers;
int kda_waivers_load(const char *path, kda_waivers **out, char *err, size_t errlen);
void kda_waivers_free(kda_waivers *w);
int64_t kda_waivers_count(const kda_waivers *w); /* 0 for NULL */
/* Index of the first waiver matching the case, or -1. */
int64_t kda_waivers_find(const kda_waivers *w, const char *case_id, const char *backend,
                         const char *manifest_json);
const char *kda_waivers_reason(const kda_waivers *w, int64_t i);
const char *kda_waivers_link(const kda_waivers *w, int64_t i); /* NULL when none */
/* "waiver I case=... backend=... flag=..." for messages. */
void kda_waivers_describe(const kda_waivers *w, int64_t i, char *buf, size_t cap);

/* Baselines (SPEC.md §7.6): the worst errors in class units, either of one backend
 * {"schema":"kda-baseline/1","backend":NAME,"class":NAME,"cases":{ID:{"o":x,"ht":y,"hc":z}}}
 * or of several {"schema":"kda-baseline/2","backends":{NAME:{"class":NAME,"cases":{...}}}}.
 * Values are numbers >= 0 or null; anything else is KDA_EFORMAT naming the file. */
typedef struct kda_baseline kda_baseline;
int kda_baseline_load(const char *path, kda_baseline **out, char *err, size_t errlen);
void kda_baseline_free(kda_baseline *b);
/* Whether b may score backend in class cls: KDA_OK; KDA_EINVAL when a kda-baseline/1 file
 * names another backend or the class differs (a usage error: its errors are in other units);
 * KDA_ENOTFOUND when a kda-baseline/2 map has no entry for backend. */
int kda_baseline_check(const kda_baseline *b, const char *backend, int32_t cls, char *err,
                       size_t errlen);
/* Looks up a case of backend; returns 1 and fills the three values (NaN when absent), else 0. */
int kda_baseline_get(const kda_baseline *b, const char *backend, const char *case_id, double *o,
                     double *ht, double *hc);

typedef struct kda_conform_opts {
  kda_call_opts call;
  int32_t cls;           /* class to score in; -1: the backend's declared class */
  int32_t repeat;        /* 1: run twice, flag bitwise differences */
  int32_t prefix;        /* 1: the serving-path checks (resume, verify, causality; §7.7) */
  int32_t serving;       /* KDA_SERVING_DEFAULT or _FULL: which resume offsets (§7.7) */
  double baseline_factor;        /* QualityWarning above factor x baseline (default 2) */
  int32_t fail_on_regression;    /* 1: a regression above the factor is a Fail */
  int32_t strict;        /* 1 (--strict): growth beyond the class emulation's is a Fail (§7.6) */
  const kda_waivers *waivers;    /* may be NULL */
  const kda_baseline *baseline;  /* may be NULL */
} kda_conform_opts;
void kda_conform_opts_init(kda_conform_opts *o);
#define KDA_SERVING_DEFAULT 0 /* resume at floor(5T/8)+1, 65 and the decode cut */
#define KDA_SERVING_FULL 1    /* also at 1, 63 and T-1 */

typedef struct kda_case_report {
  char case_id[128];
  char backend[64];
  int32_t verdict;
  int32_t has_score;        /* 1 when outputs were scored */
  char reason[KDA_ERRLEN];  /* why the verdict, one line ("" for a plain Pass) */
  char waiver[KDA_ERRLEN];  /* reason of the waiver that applied, or "" */
  kda_score score;
  double seconds;           /* wall time of the backend call */
  int32_t prefix_done;      /* 1: serving-path checks ran (§7.7) */
  int32_t causal_ok;        /* 1: outputs before P unchanged bit for bit (both perturbations) */
  int64_t prefix_P;         /* floor(5L/8)+1 of the longest sequence L */
  double prefix_worst;      /* worst error of the resumed runs, class units, vs the truth */
  int32_t repeat_done;
  int32_t repeat_identical;
  uint64_t bytes_scored;    /* truth plus candidate bytes */
  int32_t waiver_no;        /* 1 + index of the waiver that applied, 0 when none */
  int32_t baseline_state;   /* KDA_BASELINE_* */
  char waiver_link[512];    /* link of the waiver that applied, or "" */
  int32_t nondeterministic; /* 1: an unperturbed repeat differed from the first call (§7.7) */
  int32_t pool_done;        /* 1: the state-pool decode ran to its verdict (§7.7) */
  int64_t stream_chunk;     /* tokens per chained call of a streamed case (§7.10); 0: one
                               call on the whole case */
  char about[2048];         /* the case in words for a failure's detail (kda_case_about):
                               its comment, flags and the defects it is designed to catch */
  int32_t backward;         /* 1: a gradient report ID.backward (SPEC.md §13.7) */
  uint64_t log_bytes;       /* bytes the backend printed during the case (§7.8) */
  char log[KDA_TARGET_LOG_MAX]; /* their beginning, NUL-terminated */
} kda_case_report;
#define KDA_BASELINE_NONE 0     /* no --baseline, or the case did not pass the caps */
#define KDA_BASELINE_COMPARED 1 /* compared with the recorded errors */
#define KDA_BASELINE_ABSENT 2   /* the baseline has no entry for this case and backend */

/* Scores target t on case file f (its truth computed, kda_case_file_truth): every call of the
 * case (repeat, prefix, causality, chunks) goes to t's worker, then its handle is closed.
 * Always fills r; returns KDA_OK or a runner failure (KDA_ENOMEM, KDA_EIO) with r->verdict
 * meaningless. */
int kda_conform_target(kda_target *t, const kda_case_file *f, const kda_conform_opts *o,
                       kda_case_report *r, char *err, size_t errlen);
/* The same with a worker started for this case from table b (params may be NULL). */
int kda_conform_case(const kda_backend *b, const char *params, const kda_case *c,
                     const kda_truth *t, const kda_conform_opts *o, kda_case_report *r,
                     char *err, size_t errlen);
/* Scores a result file (SPEC.md §10.2, schema kda-result/1) against case c in class cls.
 * A missing or malformed file is a Fail of that case, not a runner error. */
int kda_conform_candidate(const char *result_path, const kda_case *c, const kda_truth *t,
                          int32_t cls, const kda_conform_opts *o, kda_case_report *r,
                          char *err, size_t errlen);
/* Scores gradients obs (KDA_GRAD_COUNT arrays in bit order, float64, those of bits have)
 * against g in class cls into s (kda_score_free after). */
int kda_grad_score(const kda_case *c, const kda_grad_truth *g, double *const *obs,
                   uint32_t have, int32_t cls, kda_score *s, char *err, size_t errlen);
/* --export-prompts of a gradient case (SPEC.md §13.7): the prompt file written at prompt_path
 * (the case's inputs) gains the case file's seeds do, dht, dhc as stored, rewritten
 * atomically; nothing happens when the case file has no member do.  Returns KDA_OK or the
 * files' error naming the file. */
int kda_grad_prompt_seeds(const char *case_path, const char *prompt_path, char *err,
                          size_t errlen);
/* The gradient report of target t on case file f (its gradient truth read, f->g.present):
 * one backward call, scored; NotSupported for a backend without the backward pass, or when the
 * case is streamed.  Returns as kda_conform_target. */
int kda_conform_target_backward(kda_target *t, const kda_case_file *f, const kda_conform_opts *o,
                                kda_case_report *r, char *err, size_t errlen);
/* The same for a candidate's result file (SPEC.md §7.9) with members dq .. dh0 (<f4 or <f8,
 * the inputs' shapes): those present are scored; the report is NotSupported when the file
 * has none of them, or its manifest has not_supported. */
int kda_conform_candidate_backward(const char *result_path, const kda_case *c,
                                   const kda_grad_truth *g, int32_t cls,
                                   const kda_conform_opts *o, kda_case_report *r, char *err,
                                   size_t errlen);

void kda_case_report_free(kda_case_report *r);
/* One case built in memory, for bindings (the Python package's assert_kda): problem p with the
 * float64 inputs of in (cu_seqlens NULL: one sequence), and the candidate's float64 outputs in
 * in->o, in->ht, in->hc, scored as a candidate's result file is (kda_conform_candidate) against
 * the float64 reference of SPEC.md §3 in class cls.  *verdict gets KDA_VERDICT_*; *text the
 * human report (kda_report_human with max_lines; free with kda_conform_text_free).  Returns
 * KDA_OK, or KDA_EINVAL (a bad problem, index array or missing output) and the reference's or
 * the allocator's status with a message. */
int kda_conform_outputs(const kda_problem *p, const kda_tensors_f64 *in, int32_t cls,
                        const char *id, int32_t max_lines, int32_t *verdict, char **text,
                        char *err, size_t errlen);
void kda_conform_text_free(char *text);
/* The case `kda gen DESC` makes (kda_gen_parse, kda_gen_case; docs/generator.md), in memory:
 * free with kda_case_free.  Returns as kda_gen_parse and kda_gen_case. */
int kda_conform_gen(const char *desc, kda_case *c, char *err, size_t errlen);

/* ---- Reports (SPEC.md §7.9). */
/* One line per case, then up to max_lines TestFloat-style failure lines and, for a failure
 * (max_lines > 0), its detail: the worst element with both values, its error, the cap and
 * allowance that applied there, what one class unit is there, ref-f32's error near it
 * (fp32), and the case (comment, flags, the defects it is designed to catch).  The one
 * formatter of a failure's words (the Python package shows this text). */
void kda_report_human(FILE *f, const kda_case_report *r, int32_t max_lines);
/* One JSON object and a newline. */
int kda_report_jsonl(FILE *f, const kda_case_report *r);
/* Counts: passed (Pass, QualityWarning), failed (Fail, Crash, Timeout), skipped
 * (NotSupported, Waived). */
typedef struct kda_tally {
  int64_t passed, failed, skipped, by_verdict[7];
} kda_tally;
void kda_tally_add(kda_tally *t, const kda_case_report *r);
/* The final plain line "N passed, N failed, N skipped, N warnings" (SPEC.md §7.9): the
 * warnings are the QualityWarning reports, counted among the passed. */
void kda_report_final(FILE *f, const kda_tally *t);

/* ---- Exit status of a run (SPEC.md §12.2; conformance/kda_ci.c), counts in, status out. */
#define KDA_RUN_OK 0      /* nothing failed */
#define KDA_RUN_FAILED 1  /* Fail, Crash or Timeout; with strict also QualityWarning, Waived
                             or a waiver that waived nothing */
#define KDA_RUN_NOTHING 5 /* nothing ran: no case, or every report NotSupported (pytest's 5) */
/* Reports whose verdict is not NotSupported (Waived cases ran: they count). */
int64_t kda_tally_ran(const kda_tally *t);
int32_t kda_run_status(const kda_tally *t, int64_t unused_waivers, int32_t strict);
/* Waivers that waived no report (waiver_no); unused[i] set for each when unused is not NULL
 * (kda_waivers_count(w) entries).  Returns their number. */
int64_t kda_waivers_unused(const kda_waivers *w, const kda_case_report *rs, int64_t n,
                           uint8_t *unused);
/* What summary.json says about the run besides the reports (SPEC.md §7.9); every pointer may
 * be NULL. */
typedef struct kda_run_target_info {
  const char *name, *class_name, *params, *plugin; /* plugin: its path, NULL for a built-in */
  const char *input_dtype, *output_dtype; /* buffer element types ("f32", "bf16"), or NULL */
} kda_run_target_info;
typedef struct kda_run_info {
  const kda_run_target_info *targets;
  int64_t n_targets;
  const char *const *case_paths; /* the case files and directories given, or the default */
  int64_t n_case_paths;
  int64_t n_case_files;
  const char *golden_dir;        /* the golden set the cases came from, or NULL */
  const char *golden_sha256sums; /* SHA-256 (hex) of its SHA256SUMS file, or NULL */
  const kda_waivers *waivers;
  const char *baseline;          /* --baseline path */
  int32_t strict;
  int32_t exit_status;           /* kda_run_status */
} kda_run_info;
int kda_report_summary_json(FILE *f, const kda_tally *t, const kda_case_report *rs, int64_t n,
                            const kda_run_info *info);
/* JUnit XML (testsuites/testsuite/testcase with failure, error and skipped children);
 * reports are grouped into one testsuite per backend.  What the backend printed goes to the
 * testcase's <system-out>, nondeterminism to a property (SPEC.md §7.9). */
int kda_report_junit(FILE *f, const kda_case_report *rs, int64_t n);
/* The same for a --strict run (strict 1): QualityWarning and Waived cases, which fail such a
 * run (SPEC.md §12.2), are <failure> elements and counted as failures, not skipped. */
int kda_report_junit_strict(FILE *f, const kda_case_report *rs, int64_t n, int32_t strict);
/* A baseline file from the reports: kda-baseline/1 when they hold one backend, else
 * kda-baseline/2 with one entry per backend. */
int kda_report_baseline(FILE *f, const kda_case_report *rs, int64_t n);
/* A self-contained HTML page: the verdict table and, per case of at least 256 tokens, an
 * error-versus-position plot (log-log, per window, cap and step allowance drawn) per backend
 * as inline SVG (kda_report_html.c).  _write puts it in DIR/index.html atomically, creating
 * DIR.  Return KDA_OK, KDA_EIO, KDA_ENOMEM (KDA_EINVAL: DIR too long). */
int kda_report_html(FILE *f, const kda_case_report *rs, int64_t n);
int kda_report_html_write(const char *dir, const kda_case_report *rs, int64_t n, char *err,
                          size_t errlen);

#ifdef __cplusplus
}
#endif
#endif

/* kda_conform.h: the conformance runner: backend registry and loader, isolated calls, the
 * tolerance model and metrics, verdicts and reports (SPEC.md §7).
 * SPDX-License-Identifier: MIT
 *
 * Flow of one case: the truth (golden float64 outputs when the case file carries them, else
 * the float64 reference) and its magnitude scales are computed once (kda_truth_compute); each
 * backend runs in a child process (kda_call_forward); its outputs are scored in units of its
 * precision class (kda_score_outputs); a verdict is formed (kda_conform_case) and reported
 * (kda_report_*).  Library functions never print except into the FILE* they are given, never
 * exit, and return KDA_* statuses with one-line messages.
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
/* Checks a table: version, size, required slots, name, class and dtypes.  Returns KDA_OK or
 * KDA_EINVAL (KDA_EUNSUPPORTED for an ABI version this runner does not know). */
int kda_backend_validate(const kda_backend *b, char *err, size_t errlen);

/* ---- One way to name a backend (SPEC.md §7.8), shared by every subcommand.
 * A spec is "NAME[:PARAMS]" for a built-in, or "PATH[:PARAMS]" for a plugin, where PATH
 * contains a '/' or ends in ".so"; a NAME that is not a built-in is looked up as
 * libkda_NAME.so, then NAME.so, in the directories of KDA_PLUGIN_PATH (':'-separated).
 * PARAMS is the string passed to the backend's open ("" when absent). */
typedef struct kda_backend_ref {
  const kda_backend *builtin; /* the built-in table, or NULL for a plugin */
  char path[4096];            /* the plugin's path ("" for a built-in) */
  char params[1024];          /* parameters for open ("" when none) */
  char spec[1024];            /* the spec as given, for messages */
} kda_backend_ref;
/* Returns KDA_OK, KDA_ENOTFOUND (no such built-in or plugin) or KDA_EINVAL (too long). */
int kda_backend_resolve(const char *spec, kda_backend_ref *out, char *err, size_t errlen);

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
const char *kda_class_name(int32_t cls); /* "fp64" "fp32" "tf32" "bf16" "fp16", or NULL */
int kda_class_parse(const char *name, int32_t *cls); /* KDA_OK or KDA_EINVAL */
double kda_class_unit(int32_t cls);                  /* the unit roundoff u, or 0 */
double kda_class_tiny(int32_t cls); /* smallest subnormal of the output format, or 0 (§7.3) */
/* The step allowance L(n) = max(1, n / KDA_STEP_ALLOWANCE_N0) of an element n steps into its
 * sequence (SPEC.md §7.3): caps were calibrated up to N0 steps; the a-priori error bound of a
 * non-expansive recurrence grows linearly with the number of steps. */
#define KDA_STEP_ALLOWANCE_N0 256
double kda_step_allowance(int64_t n);
int kda_class_caps(int32_t cls, kda_caps *caps);     /* KDA_OK or KDA_EINVAL */

/* ---- Outputs of one call, float64 whatever the backend computed in. */
typedef struct kda_outputs {
  double *o, *ht, *hc;      /* ht / hc NULL when the problem has none */
  uint64_t n_o, n_ht, n_hc; /* element counts */
} kda_outputs;
int kda_outputs_alloc(const kda_problem *p, kda_outputs *out, char *err, size_t errlen);
void kda_outputs_free(kda_outputs *out);

/* ---- The truth and its magnitude scales (SPEC.md §7.3). */
typedef struct kda_truth {
  kda_outputs out;   /* exact result (golden, correctly rounded) or the float64 reference */
  double *mag_o;     /* [T, HV]: max_j sum_i |S_t[i][j]| |qhat_i| */
  double *mag_ht;    /* [N, HV]: max |S| over the head's final state */
  double *mag_hc;    /* [C, HV]: max |S| over the head's checkpoint state */
  int32_t from_golden; /* 1: the outputs came from the case file's golden members */
  int32_t reserved0;
} kda_truth;
/* Golden members o / ht / hc are used when the case file at path (may be NULL) has them.
 * Returns KDA_OK or the status of the reference or the file. */
int kda_truth_compute(const kda_case *c, const char *path, kda_truth *t, char *err,
                      size_t errlen);
void kda_truth_free(kda_truth *t);

/* ---- Isolated calls (SPEC.md §7.8). */
#define KDA_CALL_OK 0
#define KDA_CALL_UNSUPPORTED 1 /* supports or forward said KDA_EUNSUPPORTED */
#define KDA_CALL_ERROR 2       /* open or forward returned another error */
#define KDA_CALL_CRASH 3       /* a signal, an exit, or a write past an output buffer */
#define KDA_CALL_TIMEOUT 4     /* killed after the time limit */
#define KDA_CALL_FPENV 5       /* the floating-point environment changed */
#define KDA_CALL_INPUT 6       /* the backend modified an input buffer */

typedef struct kda_call_opts {
  double timeout_s; /* per call; <= 0: no limit */
  int32_t isolate;  /* 1: fork a child per call; 0: in-process (debugging, benchmarks) */
  int32_t reserved0;
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
 * caller with kda_outputs_alloc).  Returns KDA_OK when the call ran to an outcome (read
 * r->outcome) or KDA_ENOMEM / KDA_EIO when the runner itself failed (fork, mmap, pipe). */
int kda_call_forward(const kda_backend *b, const char *params, const kda_problem *p,
                     const kda_tensors_f64 *in, kda_outputs *out, const kda_call_opts *opts,
                     kda_call_result *r, char *err, size_t errlen);

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
} kda_qmetric;

#define KDA_MAX_FAIL_LINES 16
typedef struct kda_fail_line {
  char quantity[4];    /* "o", "ht", "hc" */
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
  int32_t n_lines;          /* failure lines kept, first failing elements in index order */
  int32_t reserved0;
  kda_fail_line lines[KDA_MAX_FAIL_LINES];
} kda_score;

/* Scores obs against the truth in class cls.  Returns KDA_OK, KDA_EINVAL, KDA_ENOMEM. */
int kda_score_outputs(const kda_case *c, const kda_truth *t, const kda_outputs *obs,
                      int32_t cls, kda_score *s, char *err, size_t errlen);
void kda_score_free(kda_score *s);
/* 1 when every quantity is within its cap and nothing is NaN or Inf. */
int kda_score_within_caps(const kda_score *s);

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

/* Waivers: a JSON file {"waivers":[{"case":GLOB,"backend":GLOB,"flag":NAME,"reason":TEXT,
 * "link":URL}, ...]}; a waiver matches when every key it gives matches. */
typedef struct kda_waivers kda_waivers;
int kda_waivers_load(const char *path, kda_waivers **out, char *err, size_t errlen);
void kda_waivers_free(kda_waivers *w);
/* The reason and link of the first matching waiver, or NULL. */
const char *kda_waivers_match(const kda_waivers *w, const char *case_id, const char *backend,
                              const char *manifest_json, const char **link);

/* Baselines: {"schema":"kda-baseline/1","backend":NAME,"class":NAME,"cases":{ID:{"o":x,
 * "ht":y,"hc":z}}}, the worst errors in class units recorded for one backend. */
typedef struct kda_baseline kda_baseline;
int kda_baseline_load(const char *path, kda_baseline **out, char *err, size_t errlen);
void kda_baseline_free(kda_baseline *b);
/* Looks up a case; returns 1 and fills the three values (NaN when absent), else 0. */
int kda_baseline_get(const kda_baseline *b, const char *case_id, double *o, double *ht,
                     double *hc);

typedef struct kda_conform_opts {
  kda_call_opts call;
  int32_t cls;           /* class to score in; -1: the backend's declared class */
  int32_t repeat;        /* 1: run twice, flag bitwise differences */
  int32_t prefix;        /* 1: prefix-resume and causality checks */
  int32_t reserved0;
  double baseline_factor;        /* QualityWarning above factor x baseline (default 2) */
  const kda_waivers *waivers;    /* may be NULL */
  const kda_baseline *baseline;  /* may be NULL */
} kda_conform_opts;
void kda_conform_opts_init(kda_conform_opts *o);

typedef struct kda_case_report {
  char case_id[128];
  char backend[64];
  int32_t verdict;
  int32_t has_score;        /* 1 when outputs were scored */
  char reason[KDA_ERRLEN];  /* why the verdict, one line ("" for a plain Pass) */
  char waiver[KDA_ERRLEN];  /* reason of the waiver that applied, or "" */
  kda_score score;
  double seconds;           /* wall time of the backend call */
  int32_t prefix_done;      /* 1: prefix checks ran */
  int32_t causal_ok;        /* 1: outputs before P unchanged bit for bit */
  int64_t prefix_P;
  double prefix_worst;      /* worst error of the resumed run, class units, vs the truth */
  int32_t repeat_done;
  int32_t repeat_identical;
  uint64_t bytes_scored;    /* truth plus candidate bytes */
} kda_case_report;

/* Scores backend b (params may be NULL) on case c with truth t.  Always fills r; returns
 * KDA_OK or a runner failure (KDA_ENOMEM, KDA_EIO) with r->verdict meaningless. */
int kda_conform_case(const kda_backend *b, const char *params, const kda_case *c,
                     const kda_truth *t, const kda_conform_opts *o, kda_case_report *r,
                     char *err, size_t errlen);
/* Scores a result file (SPEC.md §10.2, schema kda-result/1) against case c in class cls.
 * A missing or malformed file is a Fail of that case, not a runner error. */
int kda_conform_candidate(const char *result_path, const kda_case *c, const kda_truth *t,
                          int32_t cls, const kda_conform_opts *o, kda_case_report *r,
                          char *err, size_t errlen);
void kda_case_report_free(kda_case_report *r);

/* ---- Reports (SPEC.md §7.9). */
/* One line per case, then up to max_lines TestFloat-style failure lines. */
void kda_report_human(FILE *f, const kda_case_report *r, int32_t max_lines);
/* One JSON object and a newline. */
int kda_report_jsonl(FILE *f, const kda_case_report *r);
/* Counts: passed (Pass, QualityWarning), failed (Fail, Crash, Timeout), skipped
 * (NotSupported, Waived). */
typedef struct kda_tally {
  int64_t passed, failed, skipped, by_verdict[7];
} kda_tally;
void kda_tally_add(kda_tally *t, const kda_case_report *r);
/* The final plain line "N passed, N failed, N skipped". */
void kda_report_final(FILE *f, const kda_tally *t);
int kda_report_summary_json(FILE *f, const kda_tally *t, const kda_case_report *rs, int64_t n);
/* JUnit XML (testsuites/testsuite/testcase with failure, error and skipped children);
 * reports are grouped into one testsuite per backend. */
int kda_report_junit(FILE *f, const kda_case_report *rs, int64_t n);
/* A baseline file from reports of one backend. */
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

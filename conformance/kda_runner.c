/* kda_runner.c: verdicts of one case: isolated call, scoring, repeat, prefix checks, baselines
 * and waivers (SPEC.md §7.6-§7.8).
 * SPDX-License-Identifier: MIT
 */
#include <fnmatch.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_npz.h"

const char *kda_verdict_name(int32_t v) {
  static const char *const names[] = {"Pass",   "Fail",  "QualityWarning", "NotSupported",
                                      "Waived", "Crash", "Timeout"};
  return (v >= 0 && v <= KDA_VERDICT_TIMEOUT) ? names[v] : "?";
}

int kda_verdict_is_failure(int32_t v) {
  return v == KDA_VERDICT_FAIL || v == KDA_VERDICT_CRASH || v == KDA_VERDICT_TIMEOUT;
}

void kda_conform_opts_init(kda_conform_opts *o) {
  memset(o, 0, sizeof *o);
  o->call.timeout_s = 60.0;
  o->call.isolate = 1;
  o->cls = -1;
  o->baseline_factor = 2.0;
}

/* Waivers and baselines are read in kda_ci.c. */

/* ---- One case. */
static void report_init(kda_case_report *r, const kda_case *c, const char *backend,
                        const char *fallback_id) {
  memset(r, 0, sizeof *r);
  snprintf(r->case_id, sizeof r->case_id, "%s", c->id ? c->id : fallback_id);
  snprintf(r->backend, sizeof r->backend, "%s", backend);
  r->causal_ok = 1;
  r->repeat_identical = 1;
}

static void set_reason(kda_case_report *r, int32_t verdict, const char *msg) {
  r->verdict = verdict;
  snprintf(r->reason, sizeof r->reason, "%s", msg);
}

static int32_t outcome_verdict(int32_t outcome) {
  switch (outcome) {
    case KDA_CALL_OK: return KDA_VERDICT_PASS;
    case KDA_CALL_UNSUPPORTED: return KDA_VERDICT_NOT_SUPPORTED;
    case KDA_CALL_CRASH: return KDA_VERDICT_CRASH;
    case KDA_CALL_TIMEOUT: return KDA_VERDICT_TIMEOUT;
    default: return KDA_VERDICT_FAIL;
  }
}

static const char *worst_quantity(const kda_score *s, const kda_qmetric **m, double *cap) {
  const kda_qmetric *ms[3] = {&s->o, &s->ht, &s->hc};
  const double caps[3] = {s->caps.o, s->caps.ht, s->caps.hc};
  static const char *const names[3] = {"o", "ht", "hc"};
  int best = 0;
  double ratio = -1;
  for (int q = 0; q < 3; q++) {
    if (!ms[q]->count) continue;
    double x = ms[q]->worst / caps[q];
    if (x > ratio || isnan(x)) ratio = x, best = q;
  }
  *m = ms[best];
  *cap = caps[best];
  return names[best];
}

/* Verdict from a score: Fail over a cap, else Pass. */
static void verdict_from_score(kda_case_report *r) {
  const kda_score *s = &r->score;
  r->has_score = 1;
  if (kda_score_within_caps(s)) return set_reason(r, KDA_VERDICT_PASS, "");
  const kda_qmetric *m;
  double cap;
  const char *q = worst_quantity(s, &m, &cap);
  char msg[KDA_ERRLEN];
  snprintf(msg, sizeof msg,
           "%s error %.4g %s units > %g allowed (%llu elements over, %llu NaN, %llu Inf)%s",
           q, m->worst, kda_precision_name(s->cls), cap, (unsigned long long)m->n_fail,
           (unsigned long long)(s->o.n_nan + s->ht.n_nan + s->hc.n_nan),
           (unsigned long long)(s->o.n_inf + s->ht.n_inf + s->hc.n_inf),
           s->first_fail_token >= 0 ? "" : "");
  set_reason(r, KDA_VERDICT_FAIL, msg);
  if (s->first_fail_token >= 0) {
    size_t n = strlen(r->reason);
    snprintf(r->reason + n, sizeof r->reason - n, "; first failing token %lld",
             (long long)s->first_fail_token);
  }
}

/* The case's entry in the baseline, and whether the worst error regressed beyond the factor
 * (baselines below 1 unit count as 1, SPEC.md §7.6): 1 with msg filled, else 0. */
static int baseline_regressed(kda_case_report *r, const kda_conform_opts *o, char *msg,
                              size_t cap) {
  const kda_score *s = &r->score;
  double base[3];
  if (!o->baseline) return 0;
  if (!kda_baseline_get(o->baseline, r->backend, r->case_id, &base[0], &base[1], &base[2]))
    return r->baseline_state = KDA_BASELINE_ABSENT, 0;
  r->baseline_state = KDA_BASELINE_COMPARED;
  const double obs[3] = {s->o.worst, s->ht.worst, s->hc.worst};
  const uint64_t count[3] = {s->o.count, s->ht.count, s->hc.count};
  static const char *const names[3] = {"o", "ht", "hc"};
  for (int q = 0; q < 3; q++) {
    if (isnan(base[q]) || !count[q]) continue;
    if (obs[q] > o->baseline_factor * fmax(base[q], 1.0))
      return snprintf(msg, cap, "regression: %s error %.4g > %g x baseline %.4g", names[q],
                      obs[q], o->baseline_factor, base[q]), 1;
  }
  return 0;
}

/* Regression against a recorded baseline (a Fail with fail_on_regression), and systematic
 * growth: QualityWarning (a Fail with strict when beyond the class emulation's). */
static void quality_checks(kda_case_report *r, const kda_conform_opts *o) {
  const kda_score *s = &r->score;
  if (r->verdict != KDA_VERDICT_PASS) return;
  char msg[KDA_ERRLEN];
  if (baseline_regressed(r, o, msg, sizeof msg))
    return set_reason(r, o->fail_on_regression ? KDA_VERDICT_FAIL : KDA_VERDICT_QUALITY_WARNING,
                      msg);
  /* Growth the class's plain emulation shows as much on the same case is the case's own
   * drift, not the backend's (growth_beyond 0); growth beyond it is a defect, a Fail with
   * --strict (SPEC.md §7.6). */
  if ((s->growth_kind == KDA_GROWTH_SYSTEMATIC || s->growth_kind == KDA_GROWTH_UNSTABLE) &&
      s->win_last > s->caps.o / 8 && s->growth_beyond != 0) {
    snprintf(msg, sizeof msg, "error grows %s along the sequence (alpha %.2f, last window %.3g)%s",
             kda_growth_name(s->growth_kind), s->alpha, s->win_last,
             s->growth_beyond > 0 ? ", beyond the class emulation's" : "");
    set_reason(r, o->strict && s->growth_beyond > 0 ? KDA_VERDICT_FAIL
                                                    : KDA_VERDICT_QUALITY_WARNING, msg);
  }
}

static void apply_waiver(kda_case_report *r, const kda_case *c, const kda_conform_opts *o) {
  if (r->verdict == KDA_VERDICT_PASS || r->verdict == KDA_VERDICT_NOT_SUPPORTED) return;
  int64_t i = kda_waivers_find(o->waivers, r->case_id, r->backend, c->manifest_json);
  if (i < 0) return;
  const char *link = kda_waivers_link(o->waivers, i);
  snprintf(r->waiver, sizeof r->waiver, "%s", kda_waivers_reason(o->waivers, i));
  snprintf(r->waiver_link, sizeof r->waiver_link, "%s", link ? link : "");
  r->waiver_no = (int32_t)(i + 1);
  size_t n = strlen(r->reason);
  snprintf(r->reason + n, sizeof r->reason - n, "%s(was %s)", n ? " " : "",
           kda_verdict_name(r->verdict));
  r->verdict = KDA_VERDICT_WAIVED;
}

static int same_bits(const double *a, const double *b, uint64_t n) {
  return n == 0 || !a || !b || memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

static int same_outputs(const kda_outputs *a, const kda_outputs *b) {
  return same_bits(a->o, b->o, a->n_o) && same_bits(a->ht, b->ht, a->n_ht) &&
         same_bits(a->hc, b->hc, a->n_hc);
}

static const char nondet_reason[] = "nondeterministic: a repeated call gave different bits";

/* A second identical call: any bitwise difference is nondeterminism (SPEC.md §7.6). */
static int repeat_check(kda_worker *w, const kda_case *c, const kda_outputs *first,
                        kda_case_report *r, char *err, size_t errlen) {
  kda_outputs out2;
  int st = kda_outputs_alloc(&c->p, &out2, err, errlen);
  if (st != KDA_OK) return st;
  kda_tensors_f64 in;
  kda_case_tensors(c, &in);
  kda_call_result cr;
  st = kda_worker_call(w, &c->p, &in, &out2, &cr, err, errlen);
  if (st == KDA_OK) {
    r->repeat_done = 1;
    if (cr.outcome != KDA_CALL_OK) {
      char msg[KDA_ERRLEN];
      snprintf(msg, sizeof msg, "repeated call: %.400s", cr.msg);
      set_reason(r, outcome_verdict(cr.outcome), msg);
    } else {
      r->repeat_identical = same_outputs(first, &out2);
      r->nondeterministic = !r->repeat_identical;
      if (!r->repeat_identical && r->verdict == KDA_VERDICT_PASS)
        set_reason(r, KDA_VERDICT_QUALITY_WARNING, nondet_reason);
    }
  }
  kda_outputs_free(&out2);
  return st;
}

typedef struct prefix_ctx {
  kda_worker *w;
  const kda_case *c;
  const kda_truth *t;
  const kda_conform_opts *o;
  kda_case_report *r;
} prefix_ctx;

static int run_call(prefix_ctx *x, const kda_problem *p, const kda_tensors_f64 *in,
                    kda_outputs *out, const char *what, char *err, size_t errlen) {
  int st = kda_outputs_alloc(p, out, err, errlen);
  if (st != KDA_OK) return st;
  kda_call_result cr;
  st = kda_worker_call(x->w, p, in, out, &cr, err, errlen);
  if (st != KDA_OK) return st;
  if (cr.outcome == KDA_CALL_OK) return KDA_OK;
  char msg[KDA_ERRLEN];
  snprintf(msg, sizeof msg, "%s: %.400s", what, cr.msg);
  set_reason(x->r, outcome_verdict(cr.outcome), msg);
  return -1; /* reported in r */
}

/* Worst error (class units, SPEC.md §7.3, the same scoring as the case itself) of the o of
 * tokens [0, P) taken from a, [P, T) from b, and of the final state ht (NULL: not scored). */
static double joined_worst(prefix_ctx *x, int64_t P, const double *a, const double *b,
                           uint64_t n_b, const double *ht, char *err, size_t errlen, int *st) {
  const kda_problem *p0 = &x->c->p;
  uint64_t n1 = (uint64_t)(P * p0->HV * p0->V);
  kda_outputs joined = {0};
  joined.o = malloc((size_t)(n1 + n_b + 1) * sizeof(double));
  if (!joined.o) return *st = KDA_ENOMEM, snprintf(err, errlen, "out of memory"), INFINITY;
  memcpy(joined.o, a, (size_t)n1 * sizeof(double));
  memcpy(joined.o + n1, b, (size_t)n_b * sizeof(double));
  joined.ht = (double *)ht;
  kda_truth t = *x->t;
  t.out.hc = NULL; /* no checkpoints in the joined outputs */
  if (!ht) t.out.ht = NULL;
  kda_score sc;
  *st = kda_score_outputs(x->c, &t, &joined, x->r->score.cls, &sc, err, errlen);
  free(joined.o);
  if (*st != KDA_OK) return INFINITY;
  double w = fmax(sc.o.worst, t.out.ht ? sc.ht.worst : 0.0);
  kda_score_free(&sc);
  return w;
}

/* Prefix resume: tokens [0,P) then [P,T) from the returned state, against the truth. */
static int prefix_resume(prefix_ctx *x, int64_t P, char *err, size_t errlen) {
  const kda_problem *p0 = &x->c->p;
  kda_tensors_f64 in;
  kda_case_tensors(x->c, &in);
  kda_problem p1 = *p0, p2 = *p0;
  int64_t cu1[2] = {0, P}, cu2[2] = {0, p0->T - P};
  p1.T = P, p1.n_checkpoints = 0, p1.want_final_state = 1;
  p2.T = p0->T - P, p2.n_checkpoints = 0, p2.has_initial_state = 1;
  kda_tensors_f64 in1 = in, in2 = in;
  in1.cu_seqlens = cu1, in1.checkpoints = NULL;
  kda_outputs o1 = {0}, o2 = {0};
  int st = run_call(x, &p1, &in1, &o1, "prefix resume, first part", err, errlen);
  if (st == KDA_OK) {
    int64_t GW = kda_problem_gate_width(p0);
    in2.q += P * p0->H * p0->K, in2.k += P * p0->H * p0->K, in2.v += P * p0->HV * p0->V;
    if (in2.g) in2.g += P * p0->HV * GW;
    in2.beta += P * p0->HV;
    in2.h0 = o1.ht, in2.cu_seqlens = cu2, in2.checkpoints = NULL;
    st = run_call(x, &p2, &in2, &o2, "prefix resume, second part", err, errlen);
  }
  if (st == KDA_OK) {
    x->r->prefix_worst = joined_worst(x, P, o1.o, o2.o, o2.n_o, o2.ht, err, errlen, &st);
    x->r->prefix_done = st == KDA_OK;
    double cap = fmin(x->r->score.caps.o, x->r->score.caps.ht);
    if (st == KDA_OK && !(x->r->prefix_worst <= cap)) {
      char msg[KDA_ERRLEN];
      snprintf(msg, sizeof msg, "prefix resume at P=%lld: error %.4g units > %g allowed",
               (long long)P, x->r->prefix_worst, cap);
      set_reason(x->r, KDA_VERDICT_FAIL, msg);
    }
  }
  kda_outputs_free(&o1);
  kda_outputs_free(&o2);
  return st < 0 ? KDA_OK : st;
}

/* Changed bits before P under a perturbation are blamed on it only when the unperturbed call
 * repeats bit for bit (SPEC.md §7.7).  Returns 1 when the backend is nondeterministic (an
 * unperturbed repeat differs from the first call), 0 when not, -1 when the repeat failed (r
 * says why) and a KDA_* error through *st. */
static int repeats_differ(prefix_ctx *x, const kda_outputs *first, char *err, size_t errlen,
                          int *st) {
  *st = KDA_OK;
  if (x->r->nondeterministic) return 1;
  kda_tensors_f64 in;
  kda_case_tensors(x->c, &in);
  kda_outputs o3 = {0};
  *st = run_call(x, &x->c->p, &in, &o3, "causality check, unperturbed repeat", err, errlen);
  int differ = *st == KDA_OK ? !same_outputs(first, &o3) : -1;
  kda_outputs_free(&o3);
  if (*st < 0) *st = KDA_OK;
  x->r->nondeterministic = differ == 1;
  return differ;
}

/* Causality: perturb q and v after P; outputs before P must keep their bits, or, for a
 * nondeterministic backend, stay within the caps of the truth. */
static int causality(prefix_ctx *x, int64_t P, const kda_outputs *first, char *err,
                     size_t errlen) {
  const kda_problem *p = &x->c->p;
  kda_tensors_f64 in;
  kda_case_tensors(x->c, &in);
  size_t nq = (size_t)(p->T * p->H * p->K), nv = (size_t)(p->T * p->HV * p->V);
  double *q = malloc(nq * sizeof *q + 1), *v = malloc(nv * sizeof *v + 1);
  if (!q || !v) return free(q), free(v), snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  memcpy(q, in.q, nq * sizeof *q);
  memcpy(v, in.v, nv * sizeof *v);
  for (size_t i = (size_t)(P * p->H * p->K); i < nq; i++) q[i] = -q[i];
  for (size_t i = (size_t)(P * p->HV * p->V); i < nv; i++) v[i] = -v[i] - 0.5;
  in.q = q, in.v = v;
  kda_outputs o2 = {0};
  int st = run_call(x, p, &in, &o2, "causality check", err, errlen);
  uint64_t n1 = (uint64_t)(P * p->HV * p->V);
  int differ = 0;
  if (st == KDA_OK && !same_bits(first->o, o2.o, n1))
    differ = repeats_differ(x, first, err, errlen, &st);
  if (st == KDA_OK && differ == 1) {
    /* Bits cannot tell: the prefix of the perturbed run must be as good as the backend's
     * unperturbed output, i.e. within the caps of the truth. */
    double worst = joined_worst(x, P, o2.o, x->t->out.o + n1, x->t->out.n_o - n1, NULL, err,
                                errlen, &st);
    double cap = x->r->score.caps.o;
    char msg[KDA_ERRLEN];
    if (st == KDA_OK && !(worst <= cap)) {
      x->r->causal_ok = 0;
      snprintf(msg, sizeof msg, "causality: outputs before token %lld moved %.4g units (> %g) "
               "when later tokens were perturbed (nondeterministic backend)", (long long)P,
               worst, cap);
      set_reason(x->r, KDA_VERDICT_FAIL, msg);
    } else if (st == KDA_OK && x->r->verdict == KDA_VERDICT_PASS) {
      snprintf(msg, sizeof msg, "%s; causality judged within the caps (prefix error %.3g units)",
               nondet_reason, worst);
      set_reason(x->r, KDA_VERDICT_QUALITY_WARNING, msg);
    }
  } else if (st == KDA_OK && differ == 0 && !same_bits(first->o, o2.o, n1)) {
    x->r->causal_ok = 0;
    char msg[KDA_ERRLEN];
    snprintf(msg, sizeof msg, "causality: outputs before token %lld changed when later "
             "tokens were perturbed (an unperturbed repeat gave the same bits)", (long long)P);
    set_reason(x->r, KDA_VERDICT_FAIL, msg);
  }
  free(q), free(v);
  kda_outputs_free(&o2);
  return st < 0 ? KDA_OK : st;
}

static int judged(const kda_case_report *r) {
  return r->verdict == KDA_VERDICT_PASS || r->verdict == KDA_VERDICT_QUALITY_WARNING;
}

static int prefix_checks(prefix_ctx *x, const kda_outputs *first, char *err, size_t errlen) {
  const kda_problem *p = &x->c->p;
  if (p->N != 1 || p->T < 4) return KDA_OK;
  int64_t P = p->T * 5 / 8 + 1;
  x->r->prefix_P = P;
  int st = prefix_resume(x, P, err, errlen);
  if (st == KDA_OK && judged(x->r)) st = causality(x, P, first, err, errlen);
  return st;
}

/* After the case: close's outcome, and what the backend printed (SPEC.md §7.8: a warning,
 * shown with the report). */
static int finish_case(kda_worker *w, kda_case_report *r, char *err, size_t errlen) {
  kda_call_result cr;
  int st = kda_worker_end_case(w, &cr, err, errlen);
  if (st != KDA_OK) return st;
  if (cr.outcome != KDA_CALL_OK && !kda_verdict_is_failure(r->verdict)) {
    char msg[KDA_ERRLEN];
    snprintf(msg, sizeof msg, "close: %.400s", cr.msg);
    set_reason(r, outcome_verdict(cr.outcome), msg);
  }
  kda_worker_take_log(w, r->log, sizeof r->log, &r->log_bytes);
  if (r->log_bytes && r->verdict == KDA_VERDICT_PASS) {
    char msg[KDA_ERRLEN];
    snprintf(msg, sizeof msg, "the backend printed %llu bytes (stdout/stderr)",
             (unsigned long long)r->log_bytes);
    set_reason(r, KDA_VERDICT_QUALITY_WARNING, msg);
  }
  return KDA_OK;
}

int kda_conform_case_worker(kda_worker *w, const kda_case *c, const kda_truth *t,
                            const kda_conform_opts *o, kda_case_report *r, char *err,
                            size_t errlen) {
  report_init(r, c, kda_worker_name(w), "case");
  int32_t wcls = kda_worker_class(w);
  int32_t cls = o->cls >= 0 ? o->cls : wcls >= 0 ? wcls : KDA_CLASS_FP64;
  kda_outputs out;
  int st = kda_outputs_alloc(&c->p, &out, err, errlen);
  if (st != KDA_OK) return st;
  kda_tensors_f64 in;
  kda_case_tensors(c, &in);
  kda_call_result cr;
  st = kda_worker_call(w, &c->p, &in, &out, &cr, err, errlen);
  if (st != KDA_OK) return kda_outputs_free(&out), st;
  r->seconds = cr.seconds;
  r->score.cls = cls;
  if (cr.outcome != KDA_CALL_OK) {
    set_reason(r, outcome_verdict(cr.outcome), cr.msg);
  } else {
    st = kda_score_outputs(c, t, &out, cls, &r->score, err, errlen);
    if (st != KDA_OK) return kda_outputs_free(&out), st;
    r->bytes_scored = 2 * 8 * (out.n_o + out.n_ht + out.n_hc);
    verdict_from_score(r);
    if (o->repeat && st == KDA_OK) st = repeat_check(w, c, &out, r, err, errlen);
    prefix_ctx x = {w, c, t, o, r};
    if (o->prefix && st == KDA_OK && (r->verdict == KDA_VERDICT_PASS || r->nondeterministic))
      st = prefix_checks(&x, &out, err, errlen);
    quality_checks(r, o);
  }
  if (st == KDA_OK) st = finish_case(w, r, err, errlen);
  apply_waiver(r, c, o);
  kda_outputs_free(&out);
  return st;
}

int kda_conform_case(const kda_backend *b, const char *params, const kda_case *c,
                     const kda_truth *t, const kda_conform_opts *o, kda_case_report *r,
                     char *err, size_t errlen) {
  kda_backend_ref ref;
  memset(&ref, 0, sizeof ref);
  ref.builtin = b;
  snprintf(ref.params, sizeof ref.params, "%s", params ? params : "");
  snprintf(ref.spec, sizeof ref.spec, "%s", b->name ? b->name : "backend");
  kda_worker *w;
  int st = kda_worker_start(&ref, &o->call, &w, err, errlen);
  if (st != KDA_OK) return st;
  st = kda_conform_case_worker(w, c, t, o, r, err, errlen);
  kda_worker_stop(w);
  return st;
}

/* ---- Candidate result files: read strictly by kda_result_load (kda_case.h). */
int kda_conform_candidate(const char *result_path, const kda_case *c, const kda_truth *t,
                          int32_t cls, const kda_conform_opts *o, kda_case_report *r,
                          char *err, size_t errlen) {
  report_init(r, c, "candidate", "case");
  r->score.cls = cls;
  kda_outputs out;
  int st = kda_outputs_alloc(&c->p, &out, err, errlen);
  if (st != KDA_OK) return st;
  char msg[KDA_ERRLEN] = "";
  int rs = kda_result_load(result_path, c, out.o, out.ht, out.hc, msg, sizeof msg);
  if (rs == KDA_EUNSUPPORTED) { /* the candidate's manifest says so (SPEC.md §7.9) */
    char why[KDA_ERRLEN];
    snprintf(why, sizeof why, "candidate: not supported: %.400s", msg);
    set_reason(r, KDA_VERDICT_NOT_SUPPORTED, why);
  } else if (rs != KDA_OK) { /* missing or malformed: a Fail of the case */
    set_reason(r, KDA_VERDICT_FAIL, msg);
  } else {
    st = kda_score_outputs(c, t, &out, cls, &r->score, err, errlen);
    if (st == KDA_OK) {
      r->bytes_scored = 2 * 8 * (out.n_o + out.n_ht + out.n_hc);
      verdict_from_score(r);
      quality_checks(r, o);
    }
  }
  if (st == KDA_OK) apply_waiver(r, c, o);
  kda_outputs_free(&out);
  return st;
}

void kda_case_report_free(kda_case_report *r) { kda_score_free(&r->score); }

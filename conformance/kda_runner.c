/* kda_runner.c: verdicts of one case: isolated call, scoring, repeat, prefix checks, baselines
 * and waivers (SPEC.md §7.6-§7.8); the serving-path checks' calls (§7.7, kda_serving.c).
 * SPDX-License-Identifier: MIT
 */
#include <fnmatch.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_explain.h"
#include "kda_worker_internal.h"
#include "kda_files.h"
#include "kda_npz.h"
#include "kda_score_internal.h"
#include "kda_serving.h"

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
  kda_case_about(c->manifest_json, r->about, sizeof r->about);
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
static const char paths_reason[] = "nondeterministic: forward (the repeated call) and the "
                                   "resident path gave different bits";

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
  st = kda_worker_call_via(x->w, KDA_VIA_RESIDENT, p, in, out, &cr, err, errlen);
  if (st != KDA_OK) return st;
  if (cr.outcome == KDA_CALL_OK) return KDA_OK;
  char msg[KDA_ERRLEN];
  snprintf(msg, sizeof msg, "%s: %.400s", what, cr.msg);
  set_reason(x->r, outcome_verdict(cr.outcome), msg);
  return -1; /* reported in r */
}

/* ---- Serving-path checks (SPEC.md §7.7): every derived call goes to the same worker and is
 * scored against the truth (the case's, or the reference's for a derived case). */

/* Scores obs against truth t of case c in the case's class; *within: inside every cap.  With
 * what != NULL, a score over the caps is a Fail of the case saying "what: ...". */
static int serving_score(prefix_ctx *x, const kda_case *c, kda_truth *t,
                         const kda_outputs *obs, const char *what, double *worst, char *err,
                         size_t errlen) {
  kda_score sc;
  int st = kda_score_outputs(c, t, obs, x->r->score.cls, &sc, err, errlen);
  if (st == KDA_OK && !kda_score_within_caps(&sc) && t->env.members < 0) {
    /* a lazy truth (kda_truth_compute_lazy): over the caps under ref-f32's envelope alone,
     * so the honest ensemble decides (SPEC.md §7.3) */
    kda_score_free(&sc);
    st = kda_truth_widen(c, t, err, errlen);
    if (st == KDA_OK) st = kda_score_outputs(c, t, obs, x->r->score.cls, &sc, err, errlen);
  }
  if (st != KDA_OK) return st;
  *worst = fmax(sc.o.worst, fmax(t->out.ht ? sc.ht.worst : 0.0, t->out.hc ? sc.hc.worst : 0.0));
  if (what && !kda_score_within_caps(&sc)) {
    const kda_qmetric *m;
    double cap;
    const char *q = worst_quantity(&sc, &m, &cap);
    char msg[KDA_ERRLEN];
    snprintf(msg, sizeof msg, "%s: %s error %.4g units > %g allowed (%llu elements over, %llu "
             "NaN)", what, q, m->worst, cap, (unsigned long long)m->n_fail,
             (unsigned long long)(sc.o.n_nan + sc.ht.n_nan + sc.hc.n_nan));
    set_reason(x->r, KDA_VERDICT_FAIL, msg);
  }
  kda_score_free(&sc);
  return KDA_OK;
}

/* A second identical call: any bitwise difference is nondeterminism (SPEC.md §7.6).  It goes
 * through forward: for a backend with the resident-buffer slots, whose case call went through
 * them, both paths are then checked, forward's outputs scored against the truth too when
 * their bits differ (SPEC.md §7.8). */
static int repeat_check(prefix_ctx *x, const kda_outputs *first, char *err, size_t errlen) {
  kda_case_report *r = x->r;
  kda_outputs out2;
  int st = kda_outputs_alloc(&x->c->p, &out2, err, errlen);
  if (st != KDA_OK) return st;
  kda_tensors_f64 in;
  kda_case_tensors(x->c, &in);
  kda_call_result cr;
  st = kda_worker_call_via(x->w, KDA_VIA_FORWARD, &x->c->p, &in, &out2, &cr, err, errlen);
  const int resident = kda_worker_has_resident(x->w);
  if (st == KDA_OK) {
    r->repeat_done = 1;
    if (cr.outcome != KDA_CALL_OK) {
      char msg[KDA_ERRLEN];
      snprintf(msg, sizeof msg, "repeated call: %.400s", cr.msg);
      set_reason(r, outcome_verdict(cr.outcome), msg);
    } else {
      r->repeat_identical = same_outputs(first, &out2);
      r->nondeterministic = !r->repeat_identical;
      double worst;
      if (!r->repeat_identical && resident) {
        kda_truth tc = *x->t; /* the case's truth: eager, never widened (a shallow copy) */
        st = serving_score(x, x->c, &tc, &out2, "forward (the repeated call)", &worst, err,
                           errlen);
      }
      if (!r->repeat_identical && r->verdict == KDA_VERDICT_PASS)
        set_reason(r, KDA_VERDICT_QUALITY_WARNING, resident ? paths_reason : nondet_reason);
    }
  }
  kda_outputs_free(&out2);
  return st;
}

/* Work arrays of N entries each: zero, at (the cut), end (L_n), len2 (L_n - at), to. */
typedef struct cut_arrays {
  int64_t *zero, *at, *end, *len2, *to;
} cut_arrays;

static int cut_alloc(const kda_case *c, int64_t P, cut_arrays *a, char *err, size_t errlen) {
  size_t N = (size_t)c->p.N;
  int64_t *w = calloc(5 * N + 1, sizeof *w);
  if (!w) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  *a = (cut_arrays){w, w + N, w + 2 * N, w + 3 * N, w + 4 * N};
  kda_serving_cut(c, P, a->at);
  for (size_t n = 0; n < N; n++) {
    a->end[n] = c->cu_seqlens[n + 1] - c->cu_seqlens[n];
    a->len2[n] = a->end[n] - a->at[n];
    a->to[n] = a->at[n] + KDA_SERVING_DRAFTS < a->end[n] ? a->at[n] + KDA_SERVING_DRAFTS
                                                         : a->end[n];
  }
  return KDA_OK;
}

/* One derived case's call: out allocated for d's problem. */
static int part_call(prefix_ctx *x, const kda_case *d, kda_outputs *out, const char *what,
                     char *err, size_t errlen) {
  kda_tensors_f64 in;
  kda_case_tensors(d, &in);
  return run_call(x, &d->p, &in, out, what, err, errlen);
}

static void offset_name(int64_t P, char *buf, size_t cap) {
  if (P == KDA_SERVING_DECODE) snprintf(buf, cap, "decode resume (each sequence at its last token)");
  else snprintf(buf, cap, "resume at P=%lld", (long long)P);
}

/* Resume: every sequence's tokens before the cut, then the rest from the returned states;
 * the joined outputs and final states are scored as the case itself (§7.3). */
static int resume_at(prefix_ctx *x, int64_t P, char *err, size_t errlen) {
  const kda_case *c = x->c;
  cut_arrays a;
  int st = cut_alloc(c, P, &a, err, errlen);
  if (st != KDA_OK) return st;
  char name[96], what[160];
  offset_name(P, name, sizeof name);
  kda_case p1 = {0}, p2 = {0};
  kda_outputs o1 = {0}, o2 = {0}, j = {0};
  st = kda_serving_part(c, a.zero, a.at, c->h0, NULL, "part1", &p1, err, errlen);
  snprintf(what, sizeof what, "%s, first part", name);
  if (st == KDA_OK) st = part_call(x, &p1, &o1, what, err, errlen);
  if (st == KDA_OK) st = kda_serving_part(c, a.at, a.end, o1.ht, NULL, "part2", &p2, err, errlen);
  if (st == KDA_OK) {
    p2.p.want_final_state = c->p.want_final_state;
    snprintf(what, sizeof what, "%s, second part", name);
    st = part_call(x, &p2, &o2, what, err, errlen);
  }
  if (st == KDA_OK) st = kda_outputs_alloc(&c->p, &j, err, errlen);
  if (st == KDA_OK) {
    kda_serving_join(c, a.at, a.len2, o1.o, o2.o, j.o);
    if (j.ht) memcpy(j.ht, o2.ht, (size_t)j.n_ht * sizeof *j.ht);
    free(j.hc), j.hc = NULL, j.n_hc = 0;
    kda_truth t = *x->t;
    t.out.hc = NULL; /* the parts have no checkpoints */
    double worst;
    st = serving_score(x, c, &t, &j, name, &worst, err, errlen);
    if (st == KDA_OK) x->r->prefix_worst = fmax(x->r->prefix_worst, worst), x->r->prefix_done = 1;
  }
  kda_outputs_free(&o1), kda_outputs_free(&o2), kda_outputs_free(&j);
  kda_case_free(&p1), kda_case_free(&p2);
  free(a.zero);
  return st < 0 ? KDA_OK : st;
}

/* Speculative verify: after the prefix [0, at), k draft tokens from the backend's own state
 * with a checkpoint at every draft; the state after each accepted prefix (hc), the drafts'
 * outputs and the last state must match a fresh run over prefix + drafts (the reference). */
static int spec_verify(prefix_ctx *x, char *err, size_t errlen) {
  const kda_case *c = x->c;
  cut_arrays a;
  int st = cut_alloc(c, kda_serving_main_offset(c), &a, err, errlen);
  if (st != KDA_OK) return st;
  int64_t drafts = 0;
  for (int64_t n = 0; n < c->p.N; n++) drafts += a.to[n] - a.at[n], a.len2[n] = a.to[n] - a.at[n];
  kda_case p1 = {0}, ver = {0}, d = {0};
  kda_outputs o1 = {0}, o2 = {0}, j = {0};
  kda_truth td = {0};
  char what[128];
  snprintf(what, sizeof what, "speculative verify after P=%lld (%d drafts)",
           (long long)kda_serving_main_offset(c), KDA_SERVING_DRAFTS);
  if (!drafts) goto done;
  st = kda_serving_part(c, a.zero, a.at, c->h0, NULL, "part1", &p1, err, errlen);
  if (st == KDA_OK) st = part_call(x, &p1, &o1, "speculative verify, prefix", err, errlen);
  if (st == KDA_OK) st = kda_serving_part(c, a.at, a.to, o1.ht, a.at, "verify", &ver, err, errlen);
  if (st == KDA_OK) st = part_call(x, &ver, &o2, what, err, errlen);
  if (st == KDA_OK) st = kda_serving_part(c, a.zero, a.to, c->h0, a.at, "fresh", &d, err, errlen);
  if (st == KDA_OK) st = kda_truth_compute_lazy(&d, &td, err, errlen);
  if (st == KDA_OK) st = kda_outputs_alloc(&d.p, &j, err, errlen);
  if (st == KDA_OK) {
    kda_serving_join(&d, a.at, a.len2, o1.o, o2.o, j.o);
    memcpy(j.ht, o2.ht, (size_t)j.n_ht * sizeof *j.ht);
    memcpy(j.hc, o2.hc, (size_t)j.n_hc * sizeof *j.hc);
    double worst;
    st = serving_score(x, &d, &td, &j, what, &worst, err, errlen);
  }
done:
  kda_truth_free(&td);
  kda_outputs_free(&o1), kda_outputs_free(&o2), kda_outputs_free(&j);
  kda_case_free(&p1), kda_case_free(&ver), kda_case_free(&d);
  free(a.zero);
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

/* A nondeterministic backend's causality: the outputs before the cut of the perturbed call,
 * completed by the truth after it, must be within the o cap (SPEC.md §7.7). */
static int causal_within_caps(prefix_ctx *x, const int64_t *at, const kda_outputs *o2,
                              const char *inputs, char *err, size_t errlen) {
  const kda_case *c = x->c;
  kda_outputs mixed = {0};
  double *truth_o;
  int owned;
  int st = kda_truth_full_o(&c->p, x->t, &truth_o, &owned, err, errlen);
  if (st != KDA_OK) return st;
  mixed.n_o = (uint64_t)(c->p.T * c->p.HV * c->p.V);
  mixed.o = malloc((size_t)(mixed.n_o + 1) * sizeof(double));
  if (!mixed.o) {
    if (owned) free(truth_o);
    return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  }
  /* a sampled truth's missing rows are NaN here; only its stored rows are scored */
  kda_serving_mix(c, at, o2->o, truth_o, mixed.o);
  if (owned) free(truth_o);
  kda_truth t = *x->t;
  t.out.ht = NULL, t.out.hc = NULL;
  double worst;
  st = serving_score(x, c, &t, &mixed, NULL, &worst, err, errlen);
  free(mixed.o);
  if (st != KDA_OK) return st;
  char msg[KDA_ERRLEN];
  int64_t P = kda_serving_main_offset(c);
  if (!(worst <= x->r->score.caps.o)) {
    x->r->causal_ok = 0;
    snprintf(msg, sizeof msg, "causality: outputs before token %lld moved %.4g units (> %g) "
             "when later %s were perturbed (nondeterministic backend)", (long long)P, worst,
             x->r->score.caps.o, inputs);
    set_reason(x->r, KDA_VERDICT_FAIL, msg);
  } else if (x->r->verdict == KDA_VERDICT_PASS) {
    snprintf(msg, sizeof msg, "%s; causality judged within the caps (prefix error %.3g units)",
             nondet_reason, worst);
    set_reason(x->r, KDA_VERDICT_QUALITY_WARNING, msg);
  }
  return KDA_OK;
}

/* Causality: perturb (q, v) or (g, k, beta) after the main offset of every sequence; the
 * outputs before it must keep their bits, or, for a nondeterministic backend, stay within the
 * caps of the truth. */
static int causality(prefix_ctx *x, int which, const kda_outputs *first, char *err,
                     size_t errlen) {
  const kda_case *c = x->c;
  const char *inputs = which == KDA_PERTURB_QV ? "q and v" : "g, k and beta";
  cut_arrays a;
  int st = cut_alloc(c, kda_serving_main_offset(c), &a, err, errlen);
  if (st != KDA_OK) return st;
  kda_case pc = {0};
  kda_outputs o2 = {0};
  char what[96];
  snprintf(what, sizeof what, "causality check (%s perturbed)", inputs);
  st = kda_serving_perturbed(c, a.at, which, "perturbed", &pc, err, errlen);
  if (st == KDA_OK) st = part_call(x, &pc, &o2, what, err, errlen);
  int differ = 0;
  if (st == KDA_OK && !kda_serving_before_same(c, a.at, first->o, o2.o))
    differ = repeats_differ(x, first, err, errlen, &st);
  if (st == KDA_OK && differ == 1) {
    st = causal_within_caps(x, a.at, &o2, inputs, err, errlen);
  } else if (st == KDA_OK && differ == 0 && !kda_serving_before_same(c, a.at, first->o, o2.o)) {
    x->r->causal_ok = 0;
    char msg[KDA_ERRLEN];
    snprintf(msg, sizeof msg, "causality: outputs before token %lld changed when later %s "
             "were perturbed (an unperturbed repeat gave the same bits)",
             (long long)kda_serving_main_offset(c), inputs);
    set_reason(x->r, KDA_VERDICT_FAIL, msg);
  }
  kda_outputs_free(&o2);
  kda_case_free(&pc);
  free(a.zero);
  return st < 0 ? KDA_OK : st;
}

static int judged(const kda_case_report *r) {
  return r->verdict == KDA_VERDICT_PASS || r->verdict == KDA_VERDICT_QUALITY_WARNING;
}

/* The state-pool check's calls (kda_serving_pool) on the worker. */
static int pool_call(void *ctx, const kda_problem *p, const kda_tensors_f64 *in,
                     const int64_t *state_indices, int64_t slots, double *pool,
                     kda_outputs *out, kda_call_result *r, char *err, size_t errlen) {
  return kda_worker_call_pool(ctx, p, in, state_indices, slots, pool, out, r, err, errlen);
}

/* State-pool decode (SPEC.md §7.7): only for a backend that declares KDA_CAP_STATE_POOL. */
static int pool_decode(prefix_ctx *x, char *err, size_t errlen) {
  if (!(kda_worker_caps(x->w) & KDA_CAP_STATE_POOL)) return KDA_OK;
  kda_pool_result pr;
  const kda_pool_caller call = {pool_call, x->w, kda_worker_output_dtype(x->w)};
  int st = kda_serving_pool(&call, x->c, x->r->score.cls, &pr, err, errlen);
  if (st != KDA_OK) return st;
  if (pr.outcome == KDA_CALL_UNSUPPORTED) return KDA_OK; /* declined for this problem */
  x->r->pool_done = pr.outcome == KDA_CALL_OK;
  if (pr.outcome != KDA_CALL_OK) set_reason(x->r, outcome_verdict(pr.outcome), pr.msg);
  else if (pr.failed) set_reason(x->r, KDA_VERDICT_FAIL, pr.msg);
  return KDA_OK;
}

/* Resume at every offset of the mode, the speculative verify, then both causality
 * perturbations; each runs while the case is still judged a pass (SPEC.md §7.7). */
static int prefix_checks(prefix_ctx *x, const kda_outputs *first, char *err, size_t errlen) {
  int64_t P[KDA_SERVING_MAX_OFFSETS];
  int np = kda_serving_offsets(x->c, x->o->serving, P);
  if (!np) return KDA_OK;
  x->r->prefix_P = kda_serving_main_offset(x->c);
  int st = KDA_OK;
  for (int i = 0; i < np && st == KDA_OK && judged(x->r); i++) st = resume_at(x, P[i], err, errlen);
  if (st == KDA_OK && judged(x->r)) st = pool_decode(x, err, errlen);
  if (st == KDA_OK && judged(x->r)) st = spec_verify(x, err, errlen);
  if (st == KDA_OK && judged(x->r)) st = causality(x, KDA_PERTURB_QV, first, err, errlen);
  if (st == KDA_OK && judged(x->r)) st = causality(x, KDA_PERTURB_GKB, first, err, errlen);
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

/* ---- Streamed cases (SPEC.md §7.10). */
static int case_worker(kda_worker *w, const kda_case *c, const kda_truth *t,
                       const kda_conform_opts *o, kda_case_report *r, char *err, size_t errlen);

/* A backend that declines the chained chunk call is scored on the whole case, which is loaded
 * for it (not in bounded memory), and the report says so; a case too large to load whole is
 * NotSupported for it. */
static int stream_whole(kda_worker *w, const kda_case *c, const kda_truth *t,
                        const kda_conform_opts *o, kda_case_report *r, const char *why,
                        char *err, size_t errlen) {
  kda_npz *z = kda_stream_npz(t->stream); /* the case file, still open */
  kda_case full;
  kda_truth tf;
  char msg[KDA_ERRLEN];
  if (kda_case_read(z, &full, 0, msg, sizeof msg) != KDA_OK) {
    char reason[KDA_ERRLEN];
    snprintf(reason, sizeof reason, "streaming: the backend declines the chained call (%.150s) "
             "and the case cannot be run whole: %.200s", why, msg);
    set_reason(r, KDA_VERDICT_NOT_SUPPORTED, reason);
    return finish_case(w, r, err, errlen);
  }
  int st = kda_truth_read(&full, z, &tf, err, errlen);
  if (st == KDA_OK) {
    kda_case_report_free(r);
    st = case_worker(w, &full, &tf, o, r, err, errlen);
    size_t n = strlen(r->reason);
    if (st == KDA_OK)
      snprintf(r->reason + n, sizeof r->reason - n, "%sscored whole: the backend declines the "
               "chained chunk call of streaming (%.200s)", n ? "; " : "", why);
    kda_truth_free(&tf);
  }
  kda_case_free(&full);
  return st;
}

/* The runner's call of a streamed case's chunk (kda_stream_score): through the resident
 * buffers when the backend has them, and with --repeat once more through forward, the bits
 * compared (SPEC.md §7.8, §7.10). */
typedef struct chunk_ctx {
  kda_worker *w;
  int32_t repeat, repeat_done, repeat_identical;
} chunk_ctx;

static int chunk_call(void *ctx, const kda_problem *p, const kda_tensors_f64 *in,
                      kda_outputs *out, kda_call_result *cr, char *err, size_t errlen) {
  chunk_ctx *x = ctx;
  int st = kda_worker_call_via(x->w, KDA_VIA_RESIDENT, p, in, out, cr, err, errlen);
  if (st != KDA_OK || cr->outcome != KDA_CALL_OK || !x->repeat) return st;
  const double seconds = cr->seconds; /* the scored call's */
  kda_outputs o2;
  st = kda_outputs_alloc(p, &o2, err, errlen);
  if (st == KDA_OK) st = kda_worker_call_via(x->w, KDA_VIA_FORWARD, p, in, &o2, cr, err, errlen);
  if (st == KDA_OK && cr->outcome == KDA_CALL_OK) {
    x->repeat_done = 1;
    if (!same_outputs(out, &o2)) x->repeat_identical = 0;
    cr->seconds = seconds;
  }
  kda_outputs_free(&o2);
  return st;
}

/* Chained chunk calls, scored as they come; the serving-path checks are not run on a streamed
 * case (every chunk boundary is a resume from the backend's own state), --repeat calls every
 * chunk twice. */
static int stream_case(kda_worker *w, const kda_case *c, const kda_truth *t,
                       const kda_conform_opts *o, int32_t cls, kda_case_report *r, char *err,
                       size_t errlen) {
  kda_stream_result res;
  chunk_ctx x = {w, o->repeat, 0, 1};
  const kda_chunk_caller call = {chunk_call, &x};
  int st = kda_stream_score(&call, c, t, cls, &r->score, &res, err, errlen);
  if (st != KDA_OK) return st;
  r->seconds = res.seconds;
  r->score.cls = cls;
  if (res.call.outcome == KDA_CALL_UNSUPPORTED) /* e.g. no h0 for a chained chunk */
    return stream_whole(w, c, t, o, r, res.call.msg, err, errlen);
  r->stream_chunk = kda_stream_chunk(t->stream);
  if (res.call.outcome != KDA_CALL_OK) {
    char msg[KDA_ERRLEN];
    snprintf(msg, sizeof msg, "chained call on tokens [%lld, %lld): %.400s",
             (long long)res.fail_t0, (long long)res.fail_t1, res.call.msg);
    set_reason(r, outcome_verdict(res.call.outcome), msg);
  } else {
    verdict_from_score(r);
    r->repeat_done = x.repeat_done, r->repeat_identical = x.repeat_identical;
    r->nondeterministic = !x.repeat_identical;
    if (!x.repeat_identical && r->verdict == KDA_VERDICT_PASS)
      set_reason(r, KDA_VERDICT_QUALITY_WARNING,
                 kda_worker_has_resident(w) ? paths_reason : nondet_reason);
    quality_checks(r, o);
  }
  st = finish_case(w, r, err, errlen);
  apply_waiver(r, c, o);
  return st;
}

/* A backend with 16-bit input buffers is given only cases whose q k v g beta it holds
 * exactly, never rounded ones (SPEC.md §10.3); a streamed case, read chunk by chunk, is judged
 * by its input precision.  0 and why when the case is not for it. */
static int input_type_fits(kda_worker *w, const kda_case *c, const kda_truth *t, char *why,
                           size_t cap) {
  const int32_t dt = kda_worker_input_dtype(w);
  if (kda_worker_load_result(w) || (dt != KDA_PRECISION_BF16 && dt != KDA_PRECISION_FP16))
    return 1;
  char at[256] = "a streamed case is judged by its input precision";
  kda_tensors_f64 in;
  kda_case_tensors(c, &in);
  if (t->stream ? c->input_precision == dt : kda_worker_inputs_exact(w, &c->p, &in, at, sizeof at))
    return 1;
  snprintf(why, cap, "inputs are %s, the backend takes %s buffers (%s)",
           kda_precision_file_name(c->input_precision), kda_precision_name(dt), at);
  return 0;
}

static int case_worker(kda_worker *w, const kda_case *c, const kda_truth *t,
                       const kda_conform_opts *o, kda_case_report *r, char *err, size_t errlen) {
  report_init(r, c, kda_worker_label(w), "case");
  int32_t wcls = kda_worker_class(w);
  int32_t cls = o->cls >= 0 ? o->cls : wcls >= 0 ? wcls : KDA_CLASS_FP64;
  char why[KDA_ERRLEN];
  if (!input_type_fits(w, c, t, why, sizeof why)) {
    r->score.cls = cls;
    set_reason(r, KDA_VERDICT_NOT_SUPPORTED, why);
    int st = finish_case(w, r, err, errlen);
    apply_waiver(r, c, o);
    return st;
  }
  if (t->stream) return stream_case(w, c, t, o, cls, r, err, errlen);
  kda_outputs out;
  int st = kda_outputs_alloc(&c->p, &out, err, errlen);
  if (st != KDA_OK) return st;
  kda_tensors_f64 in;
  kda_case_tensors(c, &in);
  kda_call_result cr; /* through the resident buffers when the backend has them (§7.8) */
  st = kda_worker_call_via(w, KDA_VIA_RESIDENT, &c->p, &in, &out, &cr, err, errlen);
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
    prefix_ctx x = {w, c, t, o, r};
    if (o->repeat && st == KDA_OK) st = repeat_check(&x, &out, err, errlen);
    if (o->prefix && st == KDA_OK && (r->verdict == KDA_VERDICT_PASS || r->nondeterministic))
      st = prefix_checks(&x, &out, err, errlen);
    quality_checks(r, o);
  }
  if (st == KDA_OK) st = finish_case(w, r, err, errlen);
  apply_waiver(r, c, o);
  kda_outputs_free(&out);
  return st;
}

/* The report's boundary (SPEC.md §7.9): every string in it came from a file, a plugin or a
 * waiver, and leaves here as report text (kda_text_clean), once, for every writer. */
static void report_clean(kda_case_report *r) {
  kda_text_clean(r->case_id, sizeof r->case_id, r->case_id, 0);
  kda_text_clean(r->backend, sizeof r->backend, r->backend, 0);
  kda_text_clean(r->reason, sizeof r->reason, r->reason, 0);
  kda_text_clean(r->waiver, sizeof r->waiver, r->waiver, 0);
  kda_text_clean(r->waiver_link, sizeof r->waiver_link, r->waiver_link, 0);
  kda_text_clean(r->log, sizeof r->log, r->log, 1);
  kda_text_clean(r->about, sizeof r->about, r->about, 0);
}

int kda_conform_case_worker(kda_worker *w, const kda_case *c, const kda_truth *t,
                            const kda_conform_opts *o, kda_case_report *r, char *err,
                            size_t errlen) {
  int st = case_worker(w, c, t, o, r, err, errlen);
  report_clean(r);
  return st;
}

int kda_conform_target(kda_target *t, const kda_case_file *f, const kda_conform_opts *o,
                       kda_case_report *r, char *err, size_t errlen) {
  return kda_conform_case_worker(kda_target_worker(t), &f->c, &f->t, o, r, err, errlen);
}

int kda_conform_case(const kda_backend *b, const char *params, const kda_case *c,
                     const kda_truth *t, const kda_conform_opts *o, kda_case_report *r,
                     char *err, size_t errlen) {
  kda_backend_ref ref;
  kda_backend_ref_of(b, params, &ref);
  kda_worker *w;
  int st = kda_worker_start(&ref, &o->call, &w, err, errlen);
  if (st != KDA_OK) return st;
  st = kda_conform_case_worker(w, c, t, o, r, err, errlen);
  kda_worker_stop(w);
  return st;
}

/* A worker for this one call: start, call, close the handle, stop. */
int kda_call_forward(const kda_backend *b, const char *params, const kda_problem *p,
                     const kda_tensors_f64 *in, kda_outputs *out, const kda_call_opts *opts,
                     kda_call_result *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  kda_backend_ref ref;
  kda_backend_ref_of(b, params, &ref);
  kda_worker *w;
  int st = kda_worker_start(&ref, opts, &w, err, errlen);
  if (st != KDA_OK) return st;
  st = kda_worker_call(w, p, in, out, r, err, errlen);
  kda_call_result cr;
  if (st == KDA_OK && kda_worker_end_case(w, &cr, err, errlen) == KDA_OK &&
      r->outcome == KDA_CALL_OK && cr.outcome != KDA_CALL_OK)
    *r = cr;
  kda_worker_stop(w);
  return st;
}

/* ---- Candidate result files: read strictly by kda_result_load (kda_case.h). */
static int candidate(const char *result_path, const kda_case *c, const kda_truth *t,
                     int32_t cls, const kda_conform_opts *o, kda_case_report *r, char *err,
                     size_t errlen) {
  report_init(r, c, "candidate", "case");
  r->score.cls = cls;
  if (t->stream) /* a result file holds whole arrays: score it against a whole truth */
    return snprintf(err, errlen, "a candidate cannot be scored against a streamed truth"),
           KDA_EINVAL;
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

int kda_conform_candidate(const char *result_path, const kda_case *c, const kda_truth *t,
                          int32_t cls, const kda_conform_opts *o, kda_case_report *r,
                          char *err, size_t errlen) {
  int st = candidate(result_path, c, t, cls, o, r, err, errlen);
  report_clean(r);
  return st;
}

void kda_case_report_free(kda_case_report *r) { kda_score_free(&r->score); }

/* ---- Gradient reports ID.backward (SPEC.md §13.7). */
static void grad_report_init(kda_case_report *r, const kda_case *c, const char *backend,
                             int32_t cls) {
  report_init(r, c, backend, "case");
  size_t n = strlen(r->case_id);
  snprintf(r->case_id + n, sizeof r->case_id - n, ".backward");
  r->backward = 1;
  r->score.cls = cls;
}

/* Fail over the cap or on NaN / Inf, naming the worst gradient; else a QualityWarning when a
 * gradient the problem has was not provided; else Pass. */
static void grad_verdict(kda_case_report *r) {
  const kda_score *s = &r->score;
  r->has_score = 1;
  int worst = -1;
  uint64_t over = 0, nan = 0, inf = 0;
  for (int b = 0; b < KDA_GRAD_COUNT; b++) {
    const kda_qmetric *m = &s->grad[b];
    if (!(s->grad_scored >> b & 1u)) continue;
    over += m->n_fail, nan += m->n_nan, inf += m->n_inf;
    if (worst < 0 || !(m->worst <= s->grad[worst].worst)) worst = b;
  }
  char msg[KDA_ERRLEN] = "";
  if (over || nan || inf) {
    snprintf(msg, sizeof msg, "%s error %.4g %s units > %g allowed (%llu elements over, %llu NaN, "
             "%llu Inf)", kda_grad_name(worst), s->grad[worst].worst, kda_precision_name(s->cls),
             s->grad_cap, (unsigned long long)over, (unsigned long long)nan,
             (unsigned long long)inf);
    return set_reason(r, KDA_VERDICT_FAIL, msg);
  }
  if (!s->grad_missing) return set_reason(r, KDA_VERDICT_PASS, "");
  size_t n = (size_t)snprintf(msg, sizeof msg, "not provided:");
  for (int b = 0; b < KDA_GRAD_COUNT && n < sizeof msg; b++)
    if (s->grad_missing >> b & 1u)
      n += (size_t)snprintf(msg + n, sizeof msg - n, " %s", kda_grad_name(b));
  set_reason(r, KDA_VERDICT_QUALITY_WARNING, msg);
}

static void grads_free(double **d) {
  for (int b = 0; b < KDA_GRAD_COUNT; b++) free(d[b]), d[b] = NULL;
}

/* Scores gradients d (bits have) into r's verdict. */
static int grad_scored(const kda_case *c, const kda_grad_truth *g, double *const *d,
                       uint32_t have, kda_case_report *r, char *err, size_t errlen) {
  int st = kda_grad_score(c, g, d, have, r->score.cls, &r->score, err, errlen);
  if (st != KDA_OK) return st;
  for (int b = 0; b < KDA_GRAD_COUNT; b++)
    if (have >> b & 1u) r->bytes_scored += 2 * 8 * g->n[b];
  grad_verdict(r);
  return KDA_OK;
}

static int target_backward(kda_worker *w, const kda_case_file *f, const kda_conform_opts *o,
                           kda_case_report *r, char *err, size_t errlen) {
  const kda_case *c = &f->c;
  const kda_grad_truth *g = &f->g;
  const int32_t wcls = kda_worker_class(w);
  grad_report_init(r, c, kda_worker_label(w), o->cls >= 0 ? o->cls : wcls >= 0 ? wcls : 0);
  if (f->streamed || !g->present) {
    set_reason(r, KDA_VERDICT_NOT_SUPPORTED, f->streamed ? "gradients of a streamed case are "
               "not scored (SPEC.md 13.7: whole arrays)" : "the case has no seeds (member do)");
    return KDA_OK;
  }
  double *d[KDA_GRAD_COUNT] = {0};
  int st = KDA_OK;
  for (int b = 0; b < KDA_GRAD_COUNT && st == KDA_OK; b++)
    if (g->d[b] && !(d[b] = malloc((size_t)(g->n[b] + 1) * sizeof(double))))
      st = KDA_ENOMEM, snprintf(err, errlen, "out of memory");
  kda_tensors_f64 in;
  kda_case_tensors(c, &in);
  const kda_worker_seeds sd = {g->dout, g->dht, g->dhc};
  kda_call_result cr;
  uint32_t wrote = 0;
  if (st == KDA_OK)
    st = kda_worker_backward(w, &c->p, &in, &sd, g->has, d, &wrote, &cr, err, errlen);
  if (st == KDA_OK) {
    r->seconds = cr.seconds;
    if (cr.outcome != KDA_CALL_OK) set_reason(r, outcome_verdict(cr.outcome), cr.msg);
    else st = grad_scored(c, g, d, wrote, r, err, errlen);
  }
  grads_free(d);
  if (st == KDA_OK) st = finish_case(w, r, err, errlen);
  if (st == KDA_OK) apply_waiver(r, c, o);
  return st;
}

int kda_conform_target_backward(kda_target *t, const kda_case_file *f, const kda_conform_opts *o,
                                kda_case_report *r, char *err, size_t errlen) {
  int st = target_backward(kda_target_worker(t), f, o, r, err, errlen);
  report_clean(r);
  return st;
}

int kda_conform_candidate_backward(const char *result_path, const kda_case *c,
                                   const kda_grad_truth *g, int32_t cls,
                                   const kda_conform_opts *o, kda_case_report *r, char *err,
                                   size_t errlen) {
  grad_report_init(r, c, "candidate", cls);
  double *d[KDA_GRAD_COUNT];
  uint32_t have = 0;
  char msg[KDA_ERRLEN] = "";
  int rs = kda_grad_result_read(result_path, c, g, d, &have, msg, sizeof msg), st = KDA_OK;
  if (rs == KDA_EUNSUPPORTED) {
    char why[KDA_ERRLEN];
    snprintf(why, sizeof why, "candidate: not supported: %.400s", msg);
    set_reason(r, KDA_VERDICT_NOT_SUPPORTED, why);
  } else if (rs != KDA_OK) {
    set_reason(r, KDA_VERDICT_FAIL, msg);
  } else if (!have) {
    set_reason(r, KDA_VERDICT_NOT_SUPPORTED, "candidate: the result file has no gradient members");
  } else {
    st = grad_scored(c, g, d, have, r, err, errlen);
  }
  grads_free(d);
  if (st == KDA_OK) apply_waiver(r, c, o);
  report_clean(r);
  return st;
}

/* ---- Candidates' serving prompts (SPEC.md §7.7). */

/* The causal prompt's outputs before the cut against the case's own result: the same bits,
 * else a QualityWarning.  Both passed their own scoring against the same truth before the
 * cut, so the difference is within the caps, and a candidate cannot be repeated to tell
 * nondeterminism from a causality bug (SPEC.md §7.7). */
static int candidate_causal(const char *result_path, const kda_serving_prompt *sp,
                            const kda_case *c, const char *main_path, kda_case_report *r,
                            char *err, size_t errlen) {
  kda_outputs a = {0}, b = {0};
  int64_t *at = malloc(((size_t)c->p.N + 1) * sizeof *at);
  int st = at ? kda_outputs_alloc(&c->p, &a, err, errlen) : KDA_ENOMEM;
  if (st == KDA_OK) st = kda_outputs_alloc(&c->p, &b, err, errlen);
  char msg[KDA_ERRLEN];
  if (st == KDA_OK && kda_result_load(main_path, c, a.o, a.ht, a.hc, msg, sizeof msg) == KDA_OK &&
      kda_result_load(result_path, &sp->c, b.o, b.ht, b.hc, msg, sizeof msg) == KDA_OK) {
    kda_serving_cut(c, sp->P, at);
    if (!kda_serving_before_same(c, at, a.o, b.o)) {
      r->causal_ok = 0;
      snprintf(msg, sizeof msg, "causality: outputs before token %lld differ in bits from %s's "
               "result (within the caps; a candidate cannot be repeated to tell "
               "nondeterminism apart)", (long long)sp->P, c->id ? c->id : "the case");
      set_reason(r, KDA_VERDICT_QUALITY_WARNING, msg);
    }
  } /* else the case's own report says what is wrong with its result */
  if (st == KDA_ENOMEM && !at) snprintf(err, errlen, "out of memory");
  free(at);
  kda_outputs_free(&a), kda_outputs_free(&b);
  return st;
}

int kda_conform_candidate_prompt(const char *result_path, const kda_serving_prompt *sp,
                                 const kda_case *c, const char *main_path,
                                 int32_t cls, const kda_conform_opts *o, kda_case_report *r,
                                 char *err, size_t errlen) {
  kda_truth tp;
  int st = kda_truth_compute(&sp->c, NULL, &tp, err, errlen);
  if (st != KDA_OK) return st;
  st = candidate(result_path, &sp->c, &tp, cls, o, r, err, errlen);
  kda_truth_free(&tp);
  kda_case_about(c->manifest_json, r->about, sizeof r->about); /* the prompt's case */
  if (st == KDA_OK && sp->kind == KDA_PROMPT_CAUSAL && judged(r))
    st = candidate_causal(result_path, sp, c, main_path, r, err, errlen);
  report_clean(r);
  return st;
}

/* ---- A backend's first call (kda conform --list-backends). */
/* The tiny problem's case: inputs exact in a 16-bit input type (the runner never rounds into
 * one). */
static int probe_case(int32_t dt, kda_case *c, char *err, size_t errlen) {
  kda_gen_desc d;
  char desc[96];
  const int half = dt == KDA_PRECISION_BF16 || dt == KDA_PRECISION_FP16;
  snprintf(desc, sizeof desc, "seed=1 T=4 H=1 K=16 V=16%s%s", half ? " prec=" : "",
           half ? kda_precision_file_name(dt) : "");
  int st = kda_gen_parse(desc, &d, err, errlen);
  if (st == KDA_OK) st = kda_gen_case(&d, c, err, errlen), kda_gen_desc_free(&d);
  return st;
}

void kda_conform_probe(kda_target *t, kda_probe *out) {
  kda_worker *w = kda_target_worker(t);
  char err[KDA_ERRLEN] = "";
  kda_case c;
  kda_outputs o = {0};
  kda_tensors_f64 in;
  kda_call_result cr;
  memset(out, 0, sizeof *out);
  if (probe_case(kda_worker_input_dtype(w), &c, err, sizeof err) != KDA_OK)
    return (void)snprintf(out->why, sizeof out->why, "runner: %s", err);
  kda_case_tensors(&c, &in);
  int st = kda_outputs_alloc(&c.p, &o, err, sizeof err);
  if (st == KDA_OK) st = kda_worker_call(w, &c.p, &in, &o, &cr, err, sizeof err);
  if (st != KDA_OK) snprintf(out->why, sizeof out->why, "runner: %s", err);
  else if (cr.outcome == KDA_CALL_OK) out->runs = 1;
  else if (cr.outcome == KDA_CALL_UNSUPPORTED) snprintf(out->why, sizeof out->why, "%s", cr.msg);
  else snprintf(out->why, sizeof out->why, "%s: %s", kda_call_outcome_name(cr.outcome), cr.msg);
  if (st == KDA_OK && (cr.outcome == KDA_CALL_OK || cr.outcome == KDA_CALL_UNSUPPORTED) &&
      kda_worker_describe(w, &out->info, &cr, err, sizeof err) == KDA_OK &&
      cr.outcome == KDA_CALL_OK)
    out->has_info = 1;
  kda_worker_end_case(w, &cr, err, sizeof err);
  kda_outputs_free(&o);
  kda_case_free(&c);
}

/* ---- One case in memory, for bindings (SPEC.md §7.9): the candidate path without files. */

/* c borrows p and the inputs of in (never freed here); cu_seqlens {0, T} when absent. */
static int case_in_memory(const kda_problem *p, const kda_tensors_f64 *in, const char *id,
                          kda_case *c, int64_t *cu1, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  c->p = *p;
  c->input_precision = KDA_PRECISION_FP64;
  c->q = (double *)in->q, c->k = (double *)in->k, c->v = (double *)in->v;
  c->g = (double *)in->g, c->beta = (double *)in->beta, c->A_log = (double *)in->A_log;
  c->dt_bias = (double *)in->dt_bias, c->h0 = (double *)in->h0;
  cu1[0] = 0, cu1[1] = p->T;
  c->cu_seqlens = (int64_t *)(in->cu_seqlens ? in->cu_seqlens : cu1);
  c->checkpoints = (int64_t *)in->checkpoints;
  c->id = (char *)(id && id[0] ? id : "in-memory");
  if (!in->cu_seqlens && p->N != 1)
    return snprintf(err, errlen, "N = %lld but no cu_seqlens", (long long)p->N), KDA_EINVAL;
  int st = kda_problem_check(p, err, errlen);
  if (st == KDA_OK) st = kda_problem_check_index(p, c->cu_seqlens, c->checkpoints, err, errlen);
  return st;
}

int kda_runner_score_memory(const kda_problem *p, const kda_tensors_f64 *in, int32_t cls,
                            const char *id, kda_case_report *r, char *err, size_t errlen) {
  if (!in->o || (p->want_final_state && !in->ht) || (p->n_checkpoints > 0 && !in->hc))
    return snprintf(err, errlen, "outputs o, ht (want_final_state), hc (checkpoints) are "
                    "required"), KDA_EINVAL;
  kda_case c;
  int64_t cu1[2];
  int st = case_in_memory(p, in, id, &c, cu1, err, errlen);
  kda_truth t;
  if (st == KDA_OK) st = kda_truth_compute(&c, NULL, &t, err, errlen);
  if (st != KDA_OK) return st;
  kda_outputs out;
  st = kda_outputs_alloc(p, &out, err, errlen);
  if (st == KDA_OK) {
    memcpy(out.o, in->o, out.n_o * sizeof *out.o);
    if (out.ht) memcpy(out.ht, in->ht, out.n_ht * sizeof *out.ht);
    if (out.hc) memcpy(out.hc, in->hc, out.n_hc * sizeof *out.hc);
    report_init(r, &c, "candidate", "in-memory");
    r->score.cls = cls;
    st = kda_score_outputs(&c, &t, &out, cls, &r->score, err, errlen);
    kda_outputs_free(&out);
  }
  if (st == KDA_OK) {
    kda_conform_opts o;
    kda_conform_opts_init(&o);
    verdict_from_score(r);
    quality_checks(r, &o);
    report_clean(r);
  }
  kda_truth_free(&t);
  return st;
}


int kda_conform_gen(const char *desc, kda_case *c, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  kda_gen_desc d;
  int st = kda_gen_parse(desc, &d, err, errlen);
  if (st != KDA_OK) return st;
  st = kda_gen_case(&d, c, err, errlen);
  kda_gen_desc_free(&d);
  return st;
}

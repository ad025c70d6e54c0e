/* kda_report.c: reports of a conformance run: human lines, JSON Lines, summary JSON, JUnit XML,
 * baselines (SPEC.md §7.9).
 * SPDX-License-Identifier: MIT
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_files.h"

static const char *short_verdict(int32_t v) {
  static const char *const tags[] = {"PASS", "FAIL", "WARN", "SKIP", "WAIVED", "CRASH", "TIMEOUT"};
  return (v >= 0 && v <= KDA_VERDICT_TIMEOUT) ? tags[v] : "?";
}

/* Where a gradient element is (SPEC.md §13.7): token rows by token, sequence, head and channel;
 * dA_log by head; ddt_bias by head and channel; dh0 by sequence, head and flat state index. */
static void grad_where_text(const kda_fail_line *l, char *buf, size_t cap) {
  const kda_where *w = &l->at;
  if (w->a >= 0)
    snprintf(buf, cap, "%s[t=%lld seq=%lld h=%lld c=%lld]", l->quantity, (long long)w->a,
             (long long)w->b, (long long)w->c, (long long)w->d);
  else if (w->b >= 0)
    snprintf(buf, cap, "%s[seq=%lld hv=%lld e=%lld]", l->quantity, (long long)w->b,
             (long long)w->c, (long long)w->d);
  else if (w->d >= 0)
    snprintf(buf, cap, "%s[hv=%lld c=%lld]", l->quantity, (long long)w->c, (long long)w->d);
  else
    snprintf(buf, cap, "%s[hv=%lld]", l->quantity, (long long)w->c);
}

static void where_text(const kda_fail_line *l, char *buf, size_t cap) {
  if (l->quantity[0] == 'd') return grad_where_text(l, buf, cap);
  if (strcmp(l->quantity, "o") == 0)
    snprintf(buf, cap, "o[t=%lld seq=%lld hv=%lld j=%lld]", (long long)l->at.a,
             (long long)l->at.b, (long long)l->at.c, (long long)l->at.d);
  else
    snprintf(buf, cap, "%s[%s=%lld hv=%lld i=%lld j=%lld]", l->quantity,
             l->quantity[1] == 't' ? "seq" : "ckpt", (long long)l->at.a, (long long)l->at.b,
             (long long)l->at.c, (long long)l->at.d);
}

static void qtext(char *buf, size_t cap, const char *name, const kda_qmetric *m, double allowed) {
  if (!m->count) snprintf(buf, cap, "%s -", name);
  else snprintf(buf, cap, "%s %.3g/%g", name, m->worst, allowed);
}

/* The quantity whose worst error is the largest against its cap, or NULL: o, ht, hc, or in a
 * backward report the gradients. */
static const kda_qmetric *worst_metric(const kda_score *s, const char **name, double *cap) {
  const kda_qmetric *ms[3] = {&s->o, &s->ht, &s->hc}, *best = NULL;
  const double caps[3] = {s->caps.o, s->caps.ht, s->caps.hc};
  static const char *const names[3] = {"o", "ht", "hc"};
  for (int i = 0; i < 3; i++)
    if (ms[i]->count && (!best || !(ms[i]->worst / caps[i] <= best->worst / *cap)))
      best = ms[i], *name = names[i], *cap = caps[i];
  for (int b = 0; b < KDA_GRAD_COUNT; b++)
    if ((s->grad_scored >> b & 1u) && s->grad[b].count &&
        (!best || !(s->grad[b].worst / s->grad_cap <= best->worst / *cap)))
      best = &s->grad[b], *name = kda_grad_name(b), *cap = s->grad_cap;
  return best;
}

/* The failure detail of a scored report (SPEC.md §7.9): the worst element with both values,
 * its error and what was allowed there and why, what one unit is there, and ref-f32's error
 * near it.  The one formatter of a failure's words: the kda command prints it and the Python
 * package shows the same text. */
static void worst_detail(FILE *f, const kda_score *s) {
  const char *q = "o";
  double cap = 0;
  const kda_qmetric *m = worst_metric(s, &q, &cap);
  if (!m) return;
  kda_fail_line l = {{0}, m->at, m->worst_index, m->worst_expected, m->worst_observed, 0, 0};
  snprintf(l.quantity, sizeof l.quantity, "%s", q);
  char w[128];
  where_text(&l, w, sizeof w);
  const char *cls = kda_precision_name(s->cls);
  const double A = m->worst_allow > 0 ? m->worst_allow : 1.0;
  fprintf(f, "    worst %s  expected %a (%.17g)  observed %a (%.17g)  error %.4g %s units, "
          "allowed %.4g = cap %g x allowance %.4g\n", w, l.expected, l.expected, l.observed,
          l.observed, m->worst * A, cls, cap * A, cap, A);
  if (s->unit > 0 && m->worst_scale > 0) {
    if (m->worst_scale > s->tiny)
      fprintf(f, "    a %s unit there is u M = %.4g: u = %a the class's unit roundoff, M = %.4g "
              "%s (SPEC.md 7.3)\n", cls, m->worst_scale, s->unit, m->worst_scale / s->unit,
              q[0] == 'o'                             ? "the magnitude of the terms summed into the element"
              : q[0] != 'd'                           ? "the largest |S| of the head's state"
              : (!strcmp(q, "dA_log") || !strcmp(q, "ddt_bias")) ? "the sum of the absolute terms summed into the element (SPEC.md 13.7)"
              : !strcmp(q, "dh0") ? "the largest |dh0| of the head's state (SPEC.md 13.7)"
                                  : "the largest |gradient| of the head in the element's 64-token window (SPEC.md 13.7)");
    else
      fprintf(f, "    a %s unit there is %.4g, the smallest subnormal of the output format "
              "(u M is below it; SPEC.md 7.3)\n", cls, m->worst_scale);
  }
  if (!isnan(m->worst_env))
    fprintf(f, "    ref-f32 on the same prompt: %.4g %s units near that element (the float32 "
            "envelope the allowance follows, SPEC.md 7.3)\n", m->worst_env, cls);
  else
    fprintf(f, "    allowance: the step allowance of the element's position (SPEC.md 7.3); no "
            "float32 envelope in class %s\n", cls);
}

static uint64_t grad_fails(const kda_score *s) {
  uint64_t n = 0;
  for (int b = 0; b < KDA_GRAD_COUNT; b++) n += s->grad[b].n_fail;
  return n;
}

/* The gradients of a backward report on its line: each scored one's worst / cap. */
static void grad_line(FILE *f, const kda_score *s) {
  fprintf(f, " %s", kda_precision_name(s->cls));
  for (int b = 0; b < KDA_GRAD_COUNT; b++)
    if (s->grad_scored >> b & 1u) {
      char t[64];
      qtext(t, sizeof t, kda_grad_name(b), &s->grad[b], s->grad_cap);
      fprintf(f, " %s", t);
    }
}

void kda_report_human(FILE *f, const kda_case_report *r, int32_t max_lines) {
  const kda_score *s = &r->score;
  fprintf(f, "%-7s %-12s %-28s", short_verdict(r->verdict), r->backend, r->case_id);
  if (r->has_score && r->backward) {
    grad_line(f, s);
  } else if (r->has_score) {
    char a[64], b[64], c[64];
    qtext(a, sizeof a, "o", &s->o, s->caps.o);
    qtext(b, sizeof b, "ht", &s->ht, s->caps.ht);
    qtext(c, sizeof c, "hc", &s->hc, s->caps.hc);
    fprintf(f, " %s %s  %s  %s  rms %.2g", kda_precision_name(s->cls), a, b, c, s->o.rms_ratio);
    if (s->growth_kind != KDA_GROWTH_NA)
      fprintf(f, "  growth %s (%.2f)", kda_growth_name(s->growth_kind), s->alpha);
    if (r->prefix_done) fprintf(f, "  prefix %.3g%s", r->prefix_worst, r->causal_ok ? "" : " NONCAUSAL");
    if (r->repeat_done) fprintf(f, "  repeat %s", r->repeat_identical ? "same" : "DIFFERS");
    if (r->stream_chunk) fprintf(f, "  streamed %lld", (long long)r->stream_chunk);
  }
  if (r->reason[0]) fprintf(f, "  -- %s", r->reason);
  if (r->waiver[0]) fprintf(f, " [waiver: %s%s%s]", r->waiver, r->waiver_link[0] ? " " : "",
                            r->waiver_link);
  if (r->baseline_state == KDA_BASELINE_ABSENT) fputs("  (not in the baseline)", f);
  fputc('\n', f);
  int32_t n = s->n_lines < max_lines ? s->n_lines : max_lines;
  if (r->verdict == KDA_VERDICT_PASS) n = 0;
  for (int32_t i = 0; i < n; i++) {
    const kda_fail_line *l = &s->lines[i];
    char w[128];
    where_text(l, w, sizeof w);
    fprintf(f, "    %s  expected %a (%.17g)  observed %a (%.17g)  err %.4g > %g %s units\n", w,
            l->expected, l->expected, l->observed, l->observed, l->err, l->allowed,
            kda_precision_name(s->cls));
  }
  if (r->verdict != KDA_VERDICT_PASS && s->n_lines > n)
    fprintf(f, "    ... %d more failure lines kept, %llu elements over the cap in all\n",
            (int)(s->n_lines - n),
            (unsigned long long)(s->o.n_fail + s->ht.n_fail + s->hc.n_fail + grad_fails(s)));
  if (kda_verdict_is_failure(r->verdict) && max_lines > 0) { /* the words of a failure */
    if (r->has_score && s->n_lines > 0) worst_detail(f, s);
    if (r->about[0]) fprintf(f, "    case: %s\n", r->about);
  }
  if (r->verdict != KDA_VERDICT_PASS && r->log_bytes) { /* what the backend printed (§7.8) */
    fprintf(f, "    backend output (%llu bytes%s):\n", (unsigned long long)r->log_bytes,
            r->log_bytes > strlen(r->log) ? ", beginning" : "");
    for (const char *l = r->log; *l;) {
      size_t k = strcspn(l, "\n");
      fprintf(f, "    | %.*s\n", (int)k, l);
      l += k + (l[k] == '\n');
    }
  }
}

/* JSON numbers must be finite: a NaN or infinite value is written as null, so that every
 * numeric field holds a number or null, never a string (SPEC.md §7.9). */
static json_t *jnum(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *jmetric(const kda_qmetric *m, double cap) {
  if (!m->count) return json_null();
  return json_pack("{s:I,s:o,s:o,s:[I,I,I,I],s:o,s:o,s:I,s:I,s:I}", "count", (json_int_t)m->count,
                   "worst", jnum(m->worst), "allowed", jnum(cap), "at", (json_int_t)m->at.a,
                   (json_int_t)m->at.b, (json_int_t)m->at.c, (json_int_t)m->at.d, "max_abs",
                   jnum(m->max_abs), "rms_ratio", jnum(m->rms_ratio), "nan",
                   (json_int_t)m->n_nan, "inf", (json_int_t)m->n_inf, "over_cap",
                   (json_int_t)m->n_fail);
}

/* The per-window series of a long case (SPEC.md §7.9), for plots: only the windows with a
 * scored token (every window, or a sampled truth's stored ones), each with its index. */
static json_t *window_series(const kda_score *s) {
  json_t *idx = json_array(), *mean = json_array(), *worst = json_array();
  json_t *env = json_array(), *allow = json_array();
  for (int64_t w = 0; w < s->n_win_each; w++) {
    if (isnan(s->win_each[w])) continue;
    json_array_append_new(idx, json_integer((json_int_t)w));
    json_array_append_new(mean, jnum(s->win_each[w]));
    json_array_append_new(worst, jnum(s->win_max_each[w]));
    json_array_append_new(env, jnum(s->win_env_each[w]));
    json_array_append_new(allow, jnum(s->win_allow_each[w]));
  }
  return json_pack("{s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o}", "size", (json_int_t)s->window, "tokens",
                   (json_int_t)s->win_tokens, "cap", jnum(s->caps.o), "index", idx, "mean", mean,
                   "worst", worst, "envelope", env, "allowance", allow);
}

/* A backward report's gradients (SPEC.md §13.7): each scored one's metrics, those not
 * provided, and (a case of at least 256 tokens) the per-window series of dq dk dv dg. */
static json_t *grad_json(json_t *j, const kda_score *s) {
  json_object_set_new(j, "class", json_string(kda_precision_name(s->cls)));
  json_t *gr = json_object(), *missing = json_array();
  for (int b = 0; b < KDA_GRAD_COUNT; b++) {
    if (s->grad_scored >> b & 1u)
      json_object_set_new(gr, kda_grad_name(b), jmetric(&s->grad[b], s->grad_cap));
    if (s->grad_missing >> b & 1u) json_array_append_new(missing, json_string(kda_grad_name(b)));
  }
  json_object_set_new(j, "gradients", gr);
  json_object_set_new(j, "not_provided", missing);
  if (!s->grad_win || s->n_grad_win * KDA_GRAD_WINDOW < KDA_STEP_ALLOWANCE_N0) return j;
  json_t *series = json_pack("{s:I,s:o}", "size", (json_int_t)KDA_GRAD_WINDOW, "cap",
                             jnum(s->grad_cap));
  for (int q = 0; q < 4; q++) {
    if (!(s->grad_scored >> q & 1u)) continue;
    json_t *worst = json_array(), *allowed = json_array();
    for (int64_t w = 0; w < s->n_grad_win; w++) {
      json_array_append_new(worst, jnum(s->grad_win[(2 * q) * s->n_grad_win + w]));
      json_array_append_new(allowed, jnum(s->grad_win[(2 * q + 1) * s->n_grad_win + w]));
    }
    json_object_set_new(series, kda_grad_name(q),
                        json_pack("{s:o,s:o}", "worst", worst, "allowed", allowed));
  }
  json_object_set_new(j, "grad_window_series", series);
  return j;
}

/* The per-token series of a short case (SPEC.md §7.9): the scored tokens, each with its
 * position, worst o error without allowance and allowance. */
static json_t *token_series(const kda_score *s) {
  json_t *idx = json_array(), *worst = json_array(), *allow = json_array();
  for (int64_t t = 0; t < s->n_tok_each; t++) {
    if (isnan(s->tok_each[t])) continue;
    json_array_append_new(idx, json_integer((json_int_t)t));
    json_array_append_new(worst, jnum(s->tok_each[t]));
    json_array_append_new(allow, jnum(s->tok_allow_each[t]));
  }
  return json_pack("{s:I,s:o,s:o,s:o,s:o}", "tokens", (json_int_t)s->n_tok_each, "cap",
                   jnum(s->caps.o), "index", idx, "worst", worst, "allowance", allow);
}

static json_t *report_json(const kda_case_report *r) {
  json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:o}", "case", r->case_id, "backend", r->backend,
                        "verdict", kda_verdict_name(r->verdict), "reason", r->reason, "seconds",
                        jnum(r->seconds));
  if (!j) return NULL;
  int bad = 0; /* a string jansson refuses (not UTF-8) is an error, never a dropped key */
  if (r->waiver_no)
    bad |= json_object_set_new(j, "waiver",
                               json_pack("{s:I,s:s,s:o}", "index", (json_int_t)r->waiver_no - 1,
                                         "reason", r->waiver, "link",
                                         r->waiver_link[0] ? json_string(r->waiver_link)
                                                           : json_null()));
  /* what the backend printed and whether it repeated itself bit for bit (SPEC.md §7.7, §7.8) */
  json_object_set_new(j, "nondeterministic", json_boolean(r->nondeterministic));
  json_object_set_new(j, "log_bytes", json_integer((json_int_t)r->log_bytes));
  bad |= json_object_set_new(j, "log", r->log_bytes ? json_string(r->log) : json_null());
  if (bad) return json_decref(j), NULL;
  static const char *const bstate[] = {NULL, "compared", "absent"};
  if (r->baseline_state > 0 && r->baseline_state <= KDA_BASELINE_ABSENT)
    json_object_set_new(j, "baseline", json_string(bstate[r->baseline_state]));
  if (!r->has_score) return j;
  const kda_score *s = &r->score;
  if (r->backward) return grad_json(j, s);
  json_object_set_new(j, "class", json_string(kda_precision_name(s->cls)));
  json_object_set_new(j, "o", jmetric(&s->o, s->caps.o));
  json_object_set_new(j, "ht", jmetric(&s->ht, s->caps.ht));
  json_object_set_new(j, "hc", jmetric(&s->hc, s->caps.hc));
  json_t *each = json_array();
  for (int64_t c = 0; c < s->n_hc_each; c++) json_array_append_new(each, jnum(s->hc_each[c]));
  json_object_set_new(j, "hc_each", each);
  json_object_set_new(j, "first_fail_token", json_integer(s->first_fail_token));
  json_object_set_new(j, "windows",
                      json_pack("{s:I,s:o,s:o,s:o,s:I}", "size", (json_int_t)s->window, "first",
                                jnum(s->win_first), "last", jnum(s->win_last), "worst",
                                jnum(s->win_worst), "worst_start", (json_int_t)s->win_worst_start));
  json_object_set_new(j, "growth",
                      json_pack("{s:s,s:o,s:o,s:o}", "kind", kda_growth_name(s->growth_kind),
                                "alpha", jnum(s->alpha), "alpha_fit", jnum(s->alpha_fit),
                                /* SPEC.md §7.5; null without a class emulation */
                                "beyond_emulation",
                                s->growth_beyond < 0 ? json_null()
                                                     : json_boolean(s->growth_beyond > 0)));
  /* SPEC.md §7.10: tokens per chained call of a streamed case, null when it ran whole */
  json_object_set_new(j, "stream_chunk", r->stream_chunk ? json_integer((json_int_t)r->stream_chunk)
                                                          : json_null());
  if (s->n_win_each > 0 && s->win_tokens >= KDA_STEP_ALLOWANCE_N0)
    json_object_set_new(j, "window_series", window_series(s));
  if (s->n_tok_each > 0) json_object_set_new(j, "token_series", token_series(s));
  if (r->prefix_done)
    json_object_set_new(j, "prefix", json_pack("{s:I,s:o,s:b,s:b}", "P", (json_int_t)r->prefix_P,
                                               "worst", jnum(r->prefix_worst), "causal",
                                               r->causal_ok, "pool", r->pool_done));
  if (r->repeat_done) json_object_set_new(j, "repeat_identical", json_boolean(r->repeat_identical));
  return j;
}

int kda_report_jsonl(FILE *f, const kda_case_report *r) {
  json_t *j = report_json(r);
  if (!j) return KDA_ENOMEM;
  int rc = json_dumpf(j, f, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(j);
  fputc('\n', f);
  return rc == 0 && !ferror(f) ? KDA_OK : KDA_EIO;
}

void kda_tally_add(kda_tally *t, const kda_case_report *r) {
  if (r->verdict < 0 || r->verdict > KDA_VERDICT_TIMEOUT) return;
  t->by_verdict[r->verdict]++;
  if (kda_verdict_is_failure(r->verdict)) t->failed++;
  else if (r->verdict == KDA_VERDICT_NOT_SUPPORTED || r->verdict == KDA_VERDICT_WAIVED) t->skipped++;
  else t->passed++;
}

void kda_report_final(FILE *f, const kda_tally *t) {
  const long long w = (long long)t->by_verdict[KDA_VERDICT_QUALITY_WARNING];
  fprintf(f, "%lld passed, %lld failed, %lld skipped, %lld warning%s\n", (long long)t->passed,
          (long long)t->failed, (long long)t->skipped, w, w == 1 ? "" : "s");
}

/* The version string in one place (the abi engineer's kda_version() may replace it). */
static const char *report_version(void) {
#ifdef KDA_VERSION
  return KDA_VERSION;
#else
  return "unknown";
#endif
}

/* A string of the run's own description (paths, parameters, waiver selectors) as report text
 * (kda_text_clean): a non-UTF-8 path is shown with U+FFFD, never dropped. */
static json_t *jstr(const char *s) {
  if (!s) return json_null();
  size_t cap = 3 * strlen(s) + 1;
  char *t = malloc(cap);
  if (!t) return NULL;
  kda_text_clean(t, cap, s, 0);
  json_t *j = json_string(t);
  free(t);
  return j;
}

static json_t *summary_backends(const kda_run_info *info) {
  json_t *a = json_array();
  for (int64_t i = 0; info && i < info->n_targets; i++) {
    const kda_run_target_info *t = &info->targets[i];
    json_array_append_new(a, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "name", jstr(t->name),
                                       "class", jstr(t->class_name), "params", jstr(t->params),
                                       "plugin", jstr(t->plugin), "input_dtype",
                                       jstr(t->input_dtype), "output_dtype",
                                       jstr(t->output_dtype)));
  }
  return a;
}

static json_t *summary_case_set(const kda_run_info *info) {
  json_t *paths = json_array();
  for (int64_t i = 0; info && i < info->n_case_paths; i++)
    json_array_append_new(paths, jstr(info->case_paths[i]));
  json_t *golden = info && info->golden_dir
                       ? json_pack("{s:o,s:o}", "dir", jstr(info->golden_dir), "sha256sums",
                                   jstr(info->golden_sha256sums))
                       : json_null();
  return json_pack("{s:o,s:I,s:o}", "paths", paths, "files",
                   (json_int_t)(info ? info->n_case_files : 0), "golden", golden);
}

/* Reports that make this run fail: Fail, Crash, Timeout, and with strict QualityWarning and
 * Waived. */
static json_t *summary_failing(const kda_case_report *rs, int64_t n, int32_t strict) {
  json_t *a = json_array();
  for (int64_t i = 0; i < n; i++) {
    int32_t v = rs[i].verdict;
    int bad = kda_verdict_is_failure(v) ||
              (strict && (v == KDA_VERDICT_QUALITY_WARNING || v == KDA_VERDICT_WAIVED));
    if (bad && json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:s}", "case", rs[i].case_id,
                                                  "backend", rs[i].backend, "verdict",
                                                  kda_verdict_name(v), "reason", rs[i].reason)))
      return json_decref(a), NULL; /* never a "failing" list shorter than the failures */
  }
  return a;
}

/* Reports of backends found nondeterministic, and of backends that printed (with the bytes),
 * so that a CI job can see both without reading every line (SPEC.md §7.9). */
static json_t *summary_flagged(const kda_case_report *rs, int64_t n, int printed) {
  json_t *a = json_array();
  for (int64_t i = 0; i < n; i++) {
    if (printed ? !rs[i].log_bytes : !rs[i].nondeterministic) continue;
    json_t *x = json_pack("{s:s,s:s}", "case", rs[i].case_id, "backend", rs[i].backend);
    if (printed) json_object_set_new(x, "log_bytes", json_integer((json_int_t)rs[i].log_bytes));
    json_array_append_new(a, x);
  }
  return a;
}

static json_t *summary_unused(const kda_case_report *rs, int64_t n, const kda_run_info *info) {
  json_t *a = json_array();
  const kda_waivers *w = info ? info->waivers : NULL;
  int64_t nw = kda_waivers_count(w);
  uint8_t *unused = nw ? calloc((size_t)nw, 1) : NULL;
  if (nw && !unused) return json_decref(a), NULL;
  kda_waivers_unused(w, rs, n, unused);
  for (int64_t i = 0; i < nw; i++) {
    if (!unused[i]) continue;
    char d[512];
    kda_waivers_describe(w, i, d, sizeof d);
    json_array_append_new(a, json_pack("{s:I,s:o,s:o}", "index", (json_int_t)i, "waiver", jstr(d),
                                       "reason", jstr(kda_waivers_reason(w, i))));
  }
  free(unused);
  return a;
}

static json_t *summary_baseline(const kda_case_report *rs, int64_t n, const kda_run_info *info) {
  if (!info || !info->baseline) return json_null();
  json_int_t compared = 0, absent = 0;
  for (int64_t i = 0; i < n; i++) {
    compared += rs[i].baseline_state == KDA_BASELINE_COMPARED;
    absent += rs[i].baseline_state == KDA_BASELINE_ABSENT;
  }
  return json_pack("{s:o,s:I,s:I}", "path", jstr(info->baseline), "compared", compared, "absent",
                   absent);
}

int kda_report_summary_json(FILE *f, const kda_tally *t, const kda_case_report *rs, int64_t n,
                            const kda_run_info *info) {
  json_t *by = json_object();
  for (int32_t v = 0; v <= KDA_VERDICT_TIMEOUT; v++)
    json_object_set_new(by, kda_verdict_name(v), json_integer(t->by_verdict[v]));
  int32_t strict = info ? info->strict : 0;
  json_t *j = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:o}", "schema", "kda-conform-summary/2",
                        "kda_version", report_version(), "cases", (json_int_t)n, "passed",
                        (json_int_t)t->passed, "failed", (json_int_t)t->failed, "skipped",
                        (json_int_t)t->skipped, "by_verdict", by);
  if (!j) return KDA_ENOMEM;
  int bad = json_object_set_new(j, "exit_status", info ? json_integer(info->exit_status)
                                                       : json_null());
  bad |= json_object_set_new(j, "strict", json_boolean(strict));
  bad |= json_object_set_new(j, "backends", summary_backends(info));
  bad |= json_object_set_new(j, "case_set", summary_case_set(info));
  bad |= json_object_set_new(j, "failing", summary_failing(rs, n, strict));
  bad |= json_object_set_new(j, "unused_waivers", summary_unused(rs, n, info));
  bad |= json_object_set_new(j, "nondeterministic", summary_flagged(rs, n, 0));
  bad |= json_object_set_new(j, "backend_output", summary_flagged(rs, n, 1));
  bad |= json_object_set_new(j, "baseline", summary_baseline(rs, n, info));
  if (bad) return json_decref(j), KDA_ENOMEM;
  int rc = json_dumpf(j, f, JSON_INDENT(1));
  json_decref(j);
  fputc('\n', f);
  return rc == 0 && !ferror(f) ? KDA_OK : KDA_EIO;
}

static void xml_text(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '&': fputs("&amp;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&apos;", f); break;
      default:
        if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t') fputc(' ', f);
        else fputc(*s, f);
    }
  }
}

static void junit_property(FILE *f, const char *name, const char *value) {
  fprintf(f, "        <property name=\"%s\" value=\"", name);
  xml_text(f, value);
  fputs("\"/>\n", f);
}

/* Warnings, waivers, nondeterminism and the bytes the backend printed as testcase
 * properties, which Jenkins, GitLab and pytest's junit readers show next to the case
 * (SPEC.md §7.9). */
static void junit_properties(FILE *f, const kda_case_report *r) {
  int warn = r->verdict == KDA_VERDICT_QUALITY_WARNING, waived = r->verdict == KDA_VERDICT_WAIVED;
  if (!warn && !waived && !r->nondeterministic && !r->log_bytes) return;
  fputs("      <properties>\n", f);
  junit_property(f, "verdict", kda_verdict_name(r->verdict));
  if (warn) junit_property(f, "warning", r->reason);
  if (waived) junit_property(f, "waiver", r->waiver);
  if (waived && r->waiver_link[0]) junit_property(f, "waiver_link", r->waiver_link);
  if (r->nondeterministic) junit_property(f, "nondeterministic", "true");
  if (r->log_bytes) {
    char n[32];
    snprintf(n, sizeof n, "%llu", (unsigned long long)r->log_bytes);
    junit_property(f, "backend_output_bytes", n);
  }
  fputs("      </properties>\n", f);
}

/* <skipped>: NotSupported with its reason; Waived with "waived: REASON" and, as text, what
 * it would have been. */
static void junit_skipped(FILE *f, const kda_case_report *r) {
  fputs("      <skipped message=\"", f);
  if (r->verdict == KDA_VERDICT_WAIVED) fputs("waived: ", f), xml_text(f, r->waiver);
  else xml_text(f, r->reason);
  fprintf(f, "\" type=\"%s\"", kda_verdict_name(r->verdict));
  if (r->verdict != KDA_VERDICT_WAIVED) return (void)fputs("/>\n", f);
  fputc('>', f);
  xml_text(f, r->reason);
  if (r->waiver_link[0]) fputs(" -- ", f), xml_text(f, r->waiver_link);
  fputs("</skipped>\n", f);
}

/* Under --strict a QualityWarning or Waived case fails the run (SPEC.md §12.2), so it is a
 * <failure> too: CI reporters then agree with the exit status. */
static int junit_strict_failure(const kda_case_report *r, int32_t strict) {
  return strict && (r->verdict == KDA_VERDICT_QUALITY_WARNING || r->verdict == KDA_VERDICT_WAIVED);
}

static void junit_problem(FILE *f, const kda_case_report *r, const char *tag) {
  fprintf(f, "      <%s message=\"", tag);
  if (r->verdict == KDA_VERDICT_QUALITY_WARNING || r->verdict == KDA_VERDICT_WAIVED)
    fputs("strict: ", f);
  if (r->verdict == KDA_VERDICT_WAIVED) fputs("waived: ", f), xml_text(f, r->waiver);
  else xml_text(f, r->reason);
  fprintf(f, "\" type=\"%s\">", kda_verdict_name(r->verdict));
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (m) {
    kda_report_human(m, r, KDA_MAX_FAIL_LINES);
    fclose(m);
    xml_text(f, buf);
    free(buf);
  }
  fprintf(f, "</%s>\n", tag);
}

/* <system-out>: a QualityWarning's reason, then what the backend printed (SPEC.md §7.8). */
static void junit_system_out(FILE *f, const kda_case_report *r) {
  int warn = r->verdict == KDA_VERDICT_QUALITY_WARNING;
  if (!warn && !r->log_bytes) return;
  fputs("      <system-out>", f);
  if (warn) fputs("QualityWarning: ", f), xml_text(f, r->reason);
  if (warn && r->log_bytes) fputc('\n', f);
  if (r->log_bytes) {
    fprintf(f, "backend output (%llu bytes%s):\n", (unsigned long long)r->log_bytes,
            r->log_bytes > strlen(r->log) ? ", beginning" : "");
    xml_text(f, r->log);
  }
  fputs("</system-out>\n", f);
}

static void junit_case(FILE *f, const kda_case_report *r, int32_t strict) {
  fputs("    <testcase classname=\"kda.conform.", f);
  xml_text(f, r->backend);
  fputs("\" name=\"", f);
  xml_text(f, r->case_id);
  fprintf(f, "\" time=\"%.6f\"", r->seconds);
  int32_t v = r->verdict;
  if (v == KDA_VERDICT_PASS && !r->reason[0] && !r->log_bytes && !r->nondeterministic)
    return (void)fputs("/>\n", f);
  fputs(">\n", f);
  junit_properties(f, r);
  if (junit_strict_failure(r, strict)) junit_problem(f, r, "failure");
  else if (v == KDA_VERDICT_NOT_SUPPORTED || v == KDA_VERDICT_WAIVED) junit_skipped(f, r);
  else if (v == KDA_VERDICT_CRASH || v == KDA_VERDICT_TIMEOUT) junit_problem(f, r, "error");
  else if (v == KDA_VERDICT_FAIL) junit_problem(f, r, "failure");
  junit_system_out(f, r);
  fputs("    </testcase>\n", f);
}

int kda_report_junit(FILE *f, const kda_case_report *rs, int64_t n) {
  return kda_report_junit_strict(f, rs, n, 0);
}

int kda_report_junit_strict(FILE *f, const kda_case_report *rs, int64_t n, int32_t strict) {
  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kda-conform\">\n", f);
  for (int64_t i = 0; i < n; i++) {
    int first = 1;
    for (int64_t k = 0; k < i; k++)
      if (strcmp(rs[k].backend, rs[i].backend) == 0) first = 0;
    if (!first) continue;
    int64_t tests = 0, failures = 0, errors = 0, skipped = 0;
    double time = 0;
    for (int64_t k = i; k < n; k++) {
      if (strcmp(rs[k].backend, rs[i].backend) != 0) continue;
      tests++, time += rs[k].seconds;
      int32_t v = rs[k].verdict;
      int sf = junit_strict_failure(&rs[k], strict);
      failures += v == KDA_VERDICT_FAIL || sf;
      errors += v == KDA_VERDICT_CRASH || v == KDA_VERDICT_TIMEOUT;
      skipped += (v == KDA_VERDICT_NOT_SUPPORTED || v == KDA_VERDICT_WAIVED) && !sf;
    }
    fputs("  <testsuite name=\"", f);
    xml_text(f, rs[i].backend);
    fprintf(f, "\" tests=\"%lld\" failures=\"%lld\" errors=\"%lld\" skipped=\"%lld\" time=\"%.6f\">\n",
            (long long)tests, (long long)failures, (long long)errors, (long long)skipped, time);
    for (int64_t k = i; k < n; k++)
      if (strcmp(rs[k].backend, rs[i].backend) == 0) junit_case(f, &rs[k], strict);
    fputs("  </testsuite>\n", f);
  }
  fputs("</testsuites>\n", f);
  return ferror(f) ? KDA_EIO : KDA_OK;
}

/* {ID: {"o", "ht", "hc"}} of one backend's scored reports. */
static json_t *baseline_cases(const kda_case_report *rs, int64_t n, const char *backend) {
  json_t *cases = json_object();
  for (int64_t i = 0; i < n; i++) {
    if (!rs[i].has_score || strcmp(rs[i].backend, backend) != 0) continue;
    const kda_score *s = &rs[i].score;
    json_object_set_new(cases, rs[i].case_id,
                        json_pack("{s:o,s:o,s:o}", "o", jnum(s->o.worst), "ht",
                                  s->ht.count ? jnum(s->ht.worst) : json_null(), "hc",
                                  s->hc.count ? jnum(s->hc.worst) : json_null()));
  }
  return cases;
}

static const char *class_text(int32_t cls) {
  return kda_precision_name(cls) ? kda_precision_name(cls) : "?";
}

int kda_report_baseline(FILE *f, const kda_case_report *rs, int64_t n) {
  int several = 0;
  for (int64_t i = 1; i < n; i++) several |= strcmp(rs[i].backend, rs[0].backend) != 0;
  json_t *j;
  if (!several) {
    const char *backend = n > 0 ? rs[0].backend : "";
    j = json_pack("{s:s,s:s,s:s,s:o}", "schema", "kda-baseline/1", "backend", backend, "class",
                  class_text(n > 0 ? rs[0].score.cls : 0), "cases", baseline_cases(rs, n, backend));
  } else {
    json_t *bs = json_object();
    for (int64_t i = 0; i < n; i++)
      if (!json_object_get(bs, rs[i].backend))
        json_object_set_new(bs, rs[i].backend,
                            json_pack("{s:s,s:o}", "class", class_text(rs[i].score.cls), "cases",
                                      baseline_cases(rs, n, rs[i].backend)));
    j = json_pack("{s:s,s:o}", "schema", "kda-baseline/2", "backends", bs);
  }
  if (!j) return KDA_ENOMEM;
  int rc = json_dumpf(j, f, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
  json_decref(j);
  fputc('\n', f);
  return rc == 0 && !ferror(f) ? KDA_OK : KDA_EIO;
}

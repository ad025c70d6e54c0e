/* kda_report_html.c: the self-contained HTML report of a conformance run (kda conform --html):
 * the summary, a case x backend matrix coloured by verdict, the full table and one plot per
 * case with every backend's o error along the sequence (SPEC.md §7.5, §7.9).
 * SPDX-License-Identifier: MIT
 *
 * Cases are ordered non-passing first (a failure, then a warning, a waiver, NotSupported, then
 * all passing), each keeping its order in the run.  The numbers are those of results.jsonl: a
 * plot of a case of at least 256 tokens draws window_series (the worst o error of each
 * 64-token window, class units without allowance, kda_score.win_max_each) against the
 * window's middle position; a shorter case draws token_series (kda_score.tok_each), one point
 * per token.  Each backend is one colour and dash pattern: its error (solid) and the cap times
 * the allowance its rule gave there (dotted, kda_score.win_allow_each / tok_allow_each: for
 * fp32 the envelope rule, else the step allowance; SPEC.md §7.3); the cap itself is dashed
 * black.  An element passes where its error is under the cap times its allowance.  Windows a
 * sampled truth does not hold are gaps.  The page has no external resource; its only script
 * records script errors in #kda-errors and sets body[data-ready] (the browser test's
 * protocol, tools/tests/browser_check.sh).  Verdicts are words as well as colours.  Every
 * string in the page was made report text where it entered (kda_text_clean, SPEC.md §7.9)
 * and is HTML-escaped here.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kda_conform.h"
#include "kda_files.h"

#define PLOT_W 620
#define PLOT_H 280
#define PAD_L 64
#define PAD_B 40
#define PAD_T 14
#define PAD_R 16
#define ERR_FLOOR 1e-3 /* class units: below it an error is drawn at the floor */
#define N_STYLES 8

/* Text into HTML: the five special characters escaped, control characters dropped. */
static void esc(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '&': fputs("&amp;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&#39;", f); break;
      default:
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
  }
}

/* ---- The run's cases and backends, in order of appearance. */
typedef struct grid {
  const kda_case_report *rs;
  int64_t n;
  int64_t *cases;   /* index of each case's first report, non-passing first */
  int64_t n_cases;
  int64_t *backs;   /* index of each backend's first report */
  int64_t n_backs;
} grid;

/* How much a report needs a look: 0 failed, 1 warned, 2 waived, 3 not supported, 4 passed. */
static int rank(int32_t v) {
  if (kda_verdict_is_failure(v)) return 0;
  return v == KDA_VERDICT_QUALITY_WARNING ? 1 : v == KDA_VERDICT_WAIVED ? 2
         : v == KDA_VERDICT_NOT_SUPPORTED ? 3 : 4;
}

/* The report of case c (a report index) and backend b, or NULL. */
static const kda_case_report *cell(const grid *g, int64_t c, int64_t b) {
  for (int64_t i = 0; i < g->n; i++)
    if (!strcmp(g->rs[i].case_id, g->rs[c].case_id) && !strcmp(g->rs[i].backend, g->rs[b].backend))
      return &g->rs[i];
  return NULL;
}

static int case_rank(const grid *g, int64_t c) {
  int r = 4;
  for (int64_t i = 0; i < g->n; i++)
    if (!strcmp(g->rs[i].case_id, g->rs[c].case_id) && rank(g->rs[i].verdict) < r)
      r = rank(g->rs[i].verdict);
  return r;
}

/* Appends i to v unless a report of the same key (case or backend) is there. */
static void add_unique(const grid *g, int64_t *v, int64_t *n, int64_t i, int by_backend) {
  for (int64_t k = 0; k < *n; k++)
    if (!strcmp(by_backend ? g->rs[v[k]].backend : g->rs[v[k]].case_id,
                by_backend ? g->rs[i].backend : g->rs[i].case_id))
      return;
  v[(*n)++] = i;
}

static int grid_build(grid *g, const kda_case_report *rs, int64_t n) {
  memset(g, 0, sizeof *g);
  g->rs = rs, g->n = n;
  g->cases = malloc(((size_t)n + 1) * sizeof *g->cases);
  g->backs = malloc(((size_t)n + 1) * sizeof *g->backs);
  int64_t *seen = malloc(((size_t)n + 1) * sizeof *seen), nc = 0;
  if (!g->cases || !g->backs || !seen) return free(seen), KDA_ENOMEM;
  for (int64_t i = 0; i < n; i++)
    add_unique(g, seen, &nc, i, 0), add_unique(g, g->backs, &g->n_backs, i, 1);
  for (int r = 0; r <= 4; r++) /* a stable order by rank */
    for (int64_t k = 0; k < nc; k++)
      if (case_rank(g, seen[k]) == r) g->cases[g->n_cases++] = seen[k];
  free(seen);
  return KDA_OK;
}

static void grid_free(grid *g) {
  free(g->cases), free(g->backs);
}

/* ---- Head, summary and legend. */
static const char *const verdict_css[] = {"pass", "fail", "warn", "skip", "waived", "crash", "timeout"};
static const char *const style_color[N_STYLES] = {"#1f5fbf", "#c0392b", "#1e8449", "#7d3c98",
                                                  "#b9770e", "#117a8b", "#555555", "#a93226"};
static const char *const style_dash[N_STYLES] = {"none", "6 3", "2 2", "8 3 2 3", "none", "4 4",
                                                 "1 3", "10 4"};

static const char *css(int32_t v) {
  return v >= 0 && v <= KDA_VERDICT_TIMEOUT ? verdict_css[v] : "fail";
}

static void head(FILE *f) {
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<title>kda conform report</title>\n<style>\n"
        "body{font:14px/1.4 system-ui,sans-serif;margin:12px 18px;color:#111}\n"
        "table{border-collapse:collapse;font-size:13px}\n"
        "td,th{border:1px solid #999;padding:2px 6px;text-align:left}\n"
        "td.num{text-align:right;font-family:ui-monospace,monospace}\n"
        "tr.bad td{font-weight:700}\n"
        "#matrix td{font:12px ui-monospace,monospace;white-space:nowrap}\n"
        "#matrix th[scope=row]{font-weight:400}\n"
        ".pass{background:#d5efd5}.warn{background:#ffe08a}.fail{background:#f5a9a9;font-weight:700}\n"
        ".crash{background:#e57373;font-weight:700}.timeout{background:#f0a0d0;font-weight:700}\n"
        ".skip{background:#e6e6e6;color:#333}.waived{background:#c9d8f0}\n"
        ".plots{display:flex;flex-wrap:wrap;gap:12px}\n"
        "figure{margin:0;border:1px solid #bbb;padding:6px;max-width:640px}\n"
        "svg text{font:11px system-ui,sans-serif}\n"
        "#kda-errors{color:#900;font-weight:700}\n"
        ".legend{max-width:60em}.nw{white-space:nowrap}\n"
        "</style>\n</head>\n<body>\n<ul id=\"kda-errors\"></ul>\n"
        "<h1>kda conform report</h1>\n", f);
}

static void summary(FILE *f, const kda_tally *t, const grid *g) {
  fprintf(f, "<p id=\"summary\"><b>%lld passed</b> (%lld with a warning), <b>%lld failed</b>, "
             "<b>%lld skipped</b>; %lld reports: %lld case(s) by %lld backend(s).</p>\n",
          (long long)t->passed, (long long)t->by_verdict[KDA_VERDICT_QUALITY_WARNING],
          (long long)t->failed, (long long)t->skipped, (long long)g->n, (long long)g->n_cases,
          (long long)g->n_backs);
  fputs("<p id=\"by-verdict\">", f);
  for (int32_t v = 0; v <= KDA_VERDICT_TIMEOUT; v++)
    fprintf(f, "%s<span class=\"%s\" data-verdict=\"%s\">%s: %lld</span>", v ? " &middot; " : "",
            css(v), kda_verdict_name(v), kda_verdict_name(v), (long long)t->by_verdict[v]);
  fputs("</p>\n<p class=\"legend\" id=\"legend\">Errors are in <b>units of the backend's "
        "precision class</b>: one unit is <i>u M</i>, <i>u</i> the class's unit roundoff (", f);
  for (int32_t c = KDA_PRECISION_FP64, k = 0; c <= KDA_PRECISION_FP16; c++)
    if (kda_class_name(c) && kda_class_unit(c) > 0)
      fprintf(f, "%s<span class=\"nw\">%s 2<sup>%d</sup></span>", k++ ? ", " : "", kda_class_name(c),
              (int)lround(log2(kda_class_unit(c))));
  fputs(") and <i>M</i> the largest sum of "
        "absolute terms of that token's readout (for states the largest |S|; SPEC.md &sect;7.3). "
        "<i>o</i>, <i>ht</i>, <i>hc</i>: the worst error of the outputs, the final state and "
        "the checkpointed states, after the allowance of long sequences, as error / cap. "
        "Pass and QualityWarning (a pass with a remark: growth, a baseline regression, "
        "nondeterminism or printing) count as passed; Fail, Crash and Timeout as failed; "
        "NotSupported and Waived as skipped.</p>\n", f);
}

/* ---- The matrix: one row per case (non-passing first), one column per backend. */
static void matrix_cell(FILE *f, const kda_case_report *r) {
  if (!r) {
    fputs("<td>-</td>", f);
    return;
  }
  fprintf(f, "<td class=\"%s\" data-verdict=\"%s\" title=\"", css(r->verdict),
          kda_verdict_name(r->verdict));
  esc(f, r->reason[0] ? r->reason : kda_verdict_name(r->verdict));
  fprintf(f, "\">%s", kda_verdict_name(r->verdict));
  if (r->has_score && r->score.o.count)
    fprintf(f, " o %.3g/%g", r->score.o.worst, r->score.caps.o);
  fputs("</td>", f);
}

static void matrix(FILE *f, const grid *g) {
  fputs("<h2>Cases &times; backends</h2>\n<table id=\"matrix\">\n<caption>Each cell: the "
        "verdict and the worst o error / cap in class units; hover for the reason. Cases with "
        "a non-passing report first.</caption>\n<tr><th scope=\"col\">case</th>", f);
  for (int64_t b = 0; b < g->n_backs; b++) {
    fputs("<th scope=\"col\">", f);
    esc(f, g->rs[g->backs[b]].backend);
    fputs("</th>", f);
  }
  fputs("</tr>\n", f);
  for (int64_t c = 0; c < g->n_cases; c++) {
    fputs("<tr><th scope=\"row\"><a href=\"#case-", f);
    fprintf(f, "%lld\">", (long long)c);
    esc(f, g->rs[g->cases[c]].case_id);
    fputs("</a></th>", f);
    for (int64_t b = 0; b < g->n_backs; b++) matrix_cell(f, cell(g, g->cases[c], g->backs[b]));
    fputs("</tr>\n", f);
  }
  fputs("</table>\n", f);
}

/* ---- The full table, in the matrix's order. */
static void metric_cell(FILE *f, const kda_qmetric *m, double cap) {
  if (!m->count) fputs("<td class=\"num\">-</td>", f);
  else fprintf(f, "<td class=\"num\">%.3g / %g</td>", m->worst, cap);
}

static void verdict_row(FILE *f, const kda_case_report *r) {
  const kda_score *s = &r->score;
  fprintf(f, "<tr%s><td>", kda_verdict_is_failure(r->verdict) ? " class=\"bad\"" : "");
  esc(f, r->case_id);
  fputs("</td><td>", f);
  esc(f, r->backend);
  fprintf(f, "</td><td class=\"%s\">%s</td>", css(r->verdict), kda_verdict_name(r->verdict));
  if (r->has_score && r->backward) { /* the gradients' worst / cap (SPEC.md §13.7) */
    fprintf(f, "<td>%s</td><td class=\"num\">", kda_class_name(s->cls) ? kda_class_name(s->cls) : "?");
    for (int b = 0; b < KDA_GRAD_COUNT; b++)
      if (s->grad_scored >> b & 1u)
        fprintf(f, "%s %.3g/%g ", kda_grad_name(b), s->grad[b].worst, s->grad_cap);
    fputs("</td><td>-</td><td>-</td><td>-</td>", f);
  } else if (r->has_score) {
    fprintf(f, "<td>%s</td>", kda_class_name(s->cls) ? kda_class_name(s->cls) : "?");
    metric_cell(f, &s->o, s->caps.o);
    metric_cell(f, &s->ht, s->caps.ht);
    metric_cell(f, &s->hc, s->caps.hc);
    if (s->growth_kind != KDA_GROWTH_NA)
      fprintf(f, "<td>%s (&alpha; = %.2f)</td>", kda_growth_name(s->growth_kind), s->alpha);
    else fputs("<td>-</td>", f);
  } else {
    fputs("<td>-</td><td>-</td><td>-</td><td>-</td><td>-</td>", f);
  }
  fputs("<td>", f);
  esc(f, r->reason);
  if (r->waiver[0]) fputs(" [waiver: ", f), esc(f, r->waiver), fputs("]", f);
  fputs("</td></tr>\n", f);
}

static void verdict_table(FILE *f, const grid *g) {
  fputs("<h2>Every report</h2>\n<table id=\"verdicts\">\n<tr><th>case</th><th>backend</th>"
        "<th>verdict</th><th>class</th><th>o worst / cap</th><th>ht worst / cap</th>"
        "<th>hc worst / cap</th><th>growth</th><th>reason</th></tr>\n", f);
  for (int64_t c = 0; c < g->n_cases; c++)
    for (int64_t b = 0; b < g->n_backs; b++) {
      const kda_case_report *r = cell(g, g->cases[c], g->backs[b]);
      if (r) verdict_row(f, r);
    }
  fputs("</table>\n", f);
}

/* ---- One log-log plot per case, every backend overlaid. */
typedef struct axes {
  double x0, x1, y0, y1; /* log10 ranges */
} axes;

/* The series of one backend: n points (position x, error y, allowance a; y NaN: a gap). */
typedef struct curve {
  int64_t n;
  const double *y, *a;
  int64_t window; /* tokens per point: 64, or 1 for the per-token series */
} curve;

static int curve_of(const kda_score *s, curve *c) {
  if (s->n_tok_each > 0) *c = (curve){s->n_tok_each, s->tok_each, s->tok_allow_each, 1};
  else if (s->n_win_each > 0 && s->win_tokens >= KDA_STEP_ALLOWANCE_N0)
    *c = (curve){s->n_win_each, s->win_max_each, s->win_allow_each, s->window};
  else return 0;
  return 1;
}

/* The middle position (tokens, 1-based) of point w. */
static double mid(const curve *c, int64_t w, int64_t T) {
  const int64_t a = w * c->window, b = a + c->window < T ? a + c->window : T;
  return 0.5 * (double)(a + 1 + b);
}

static double px(const axes *a, double x) {
  return PAD_L + (log10(x) - a->x0) / (a->x1 - a->x0) * (PLOT_W - PAD_L - PAD_R);
}
static double py(const axes *a, double y) {
  double l = log10(y < pow(10, a->y0) ? pow(10, a->y0) : y);
  if (l > a->y1) l = a->y1;
  return PAD_T + (a->y1 - l) / (a->y1 - a->y0) * (PLOT_H - PAD_T - PAD_B);
}

static void raise_top(axes *a, double y) {
  if (isfinite(y) && y > 0 && log10(y) > a->y1) a->y1 = log10(y);
}

static void decade_ticks(FILE *f, const axes *a) {
  for (int d = (int)ceil(a->x0); d <= (int)floor(a->x1); d++) {
    const double x = px(a, pow(10, d));
    fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
               "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">1e%d</text>\n",
            x, x, PAD_T, PLOT_H - PAD_B, x, PLOT_H - PAD_B + 14, d);
  }
  for (int d = (int)ceil(a->y0); d <= (int)floor(a->y1); d++) {
    const double y = py(a, pow(10, d));
    fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
               "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n",
            PAD_L, PLOT_W - PAD_R, y, y, PAD_L - 4, y + 4, d);
  }
}

/* One polyline per run of points where y has a value; a run of one point is a dot. */
static void series(FILE *f, const axes *a, const curve *c, int64_t T, const double *y,
                   double scale, const char *cls, const char *style, const char *color) {
  for (int64_t w = 0; w < c->n;) {
    if (isnan(y[w])) {
      w++;
      continue;
    }
    const int64_t first = w;
    while (w < c->n && !isnan(y[w])) w++;
    if (w - first == 1) {
      fprintf(f, "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", cls,
              px(a, mid(c, first, T)), py(a, scale * y[first]), color);
      continue;
    }
    fprintf(f, "<polyline class=\"%s\" fill=\"none\" %s points=\"", cls, style);
    for (int64_t k = first; k < w; k++) {
      const double e = isfinite(y[k]) && scale * y[k] > ERR_FLOOR ? scale * y[k]
                       : isinf(y[k]) ? pow(10, a->y1) : ERR_FLOOR;
      fprintf(f, "%s%.1f,%.1f", k > first ? " " : "", px(a, mid(c, k, T)), py(a, e));
    }
    fputs("\"/>\n", f);
  }
}

/* The reports of case row c that have a curve, and the axes holding them all. */
static int64_t case_curves(const grid *g, int64_t c, const kda_case_report **rep, curve *cv,
                           axes *a, int64_t *T) {
  int64_t m = 0;
  *a = (axes){0.0, 1.0, log10(ERR_FLOOR), 0.0};
  for (int64_t b = 0; b < g->n_backs; b++) {
    const kda_case_report *r = cell(g, g->cases[c], g->backs[b]);
    if (!r || !r->has_score || r->backward || !curve_of(&r->score, &cv[m])) continue;
    const kda_score *s = &r->score;
    *T = s->n_tok_each > 0 ? s->n_tok_each : s->win_tokens;
    raise_top(a, s->caps.o);
    for (int64_t w = 0; w < cv[m].n; w++)
      raise_top(a, cv[m].y[w]), raise_top(a, s->caps.o * cv[m].a[w]);
    rep[m++] = r;
  }
  a->x1 = log10((double)(*T > 1 ? *T : 2));
  a->y1 = ceil(a->y1 + 0.01), a->y0 = floor(a->y0);
  return m;
}

static void plot_frame(FILE *f, const axes *a, const char *cls_units) {
  decade_ticks(f, a);
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#000\"/>\n",
          PAD_L, PAD_T, PLOT_W - PAD_L - PAD_R, PLOT_H - PAD_T - PAD_B);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">token position (log)</text>\n",
          (PLOT_W + PAD_L) / 2, PLOT_H - 6);
  fprintf(f, "<text x=\"12\" y=\"%d\" transform=\"rotate(-90 12 %d)\" text-anchor=\"middle\">"
             "worst o error, %s units (log)</text>\n", PLOT_H / 2, PLOT_H / 2, cls_units);
}

static void plot_curves(FILE *f, const axes *a, const kda_case_report **rep, const curve *cv,
                        int64_t m, int64_t T) {
  double cap = rep[0]->score.caps.o;
  int same_cap = 1;
  for (int64_t k = 1; k < m; k++) same_cap &= rep[k]->score.caps.o == cap;
  if (same_cap)
    fprintf(f, "<line class=\"cap\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
               "stroke=\"#000\" stroke-dasharray=\"6 3\"/>\n", px(a, 1.0), px(a, (double)T),
            py(a, cap), py(a, cap));
  for (int64_t k = 0; k < m; k++) {
    const char *col = style_color[k % N_STYLES], *dash = style_dash[k % N_STYLES];
    char st[160];
    snprintf(st, sizeof st, "stroke=\"%s\" stroke-dasharray=\"1 3\" stroke-width=\"2\"", col);
    series(f, a, &cv[k], T, cv[k].a, rep[k]->score.caps.o, "allowance", st, col);
    snprintf(st, sizeof st, "stroke=\"%s\" stroke-dasharray=\"%s\" stroke-width=\"1.6\"", col, dash);
    series(f, a, &cv[k], T, cv[k].y, 1.0, "err", st, col);
  }
}

static void plot_key(FILE *f, const kda_case_report **rep, const curve *cv, int64_t m) {
  fputs("<figcaption><ul class=\"key\">", f);
  for (int64_t k = 0; k < m; k++) {
    fprintf(f, "<li><svg width=\"36\" height=\"10\" aria-hidden=\"true\"><line x1=\"0\" x2=\"36\" "
               "y1=\"5\" y2=\"5\" stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"%s\"/></svg> ",
            style_color[k % N_STYLES], style_dash[k % N_STYLES]);
    esc(f, rep[k]->backend);
    fprintf(f, " (%s, %s): worst o %.3g / cap %g after allowance</li>",
            kda_class_name(rep[k]->score.cls), kda_verdict_name(rep[k]->verdict),
            rep[k]->score.o.worst, rep[k]->score.caps.o);
  }
  fprintf(f, "</ul>Solid or dashed: the worst o error %s, without allowance; dotted, same "
             "colour: cap &times; the allowance that backend's rule used there (%s); black "
             "dashed: the cap. An element passes while its error is under its dotted line. "
             "Gaps: tokens the truth does not store; errors below %g are drawn at %g."
             "</figcaption>", cv[0].window == 1 ? "of each token" : "of each 64-token window",
          "fp32: the envelope rule of SPEC.md &sect;7.3, max(1, 4 e / cap) with e the honest "
          "float32 evaluations' worst error near there; other classes: the step allowance "
          "max(1, n/256)", ERR_FLOOR, ERR_FLOOR);
}

/* A backward report's plot (SPEC.md §13.7): the worst error of dq, dk, dv, dg per 64-token
 * window without allowance, each with what was allowed there (cap x allowance), by colour
 * and dash. */
static void grad_plot(FILE *f, const kda_case_report *r, int64_t T) {
  static const char *const colour[4] = {"#1f5fbf", "#2a8a2a", "#8a2a8a", "#b06000"};
  static const char *const dash[4] = {"none", "6 2", "2 2", "8 2 2 2"};
  const kda_score *s = &r->score;
  const int64_t n = s->n_grad_win;
  axes a = {0.0, log10((double)T), log10(ERR_FLOOR), log10(s->grad_cap)};
  for (int64_t i = 0; i < 8 * n; i++) raise_top(&a, s->grad_win[i]);
  a.y1 = ceil(a.y1 + 0.01), a.y0 = floor(a.y0);
  if (a.x1 <= a.x0) a.x1 = a.x0 + 1;
  fprintf(f, "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\"%d\" "
             "height=\"%d\" aria-label=\"gradient error per window of ", PLOT_W, PLOT_H);
  esc(f, r->backend);
  fputs("\">\n", f);
  plot_frame(f, &a, kda_class_name(s->cls));
  for (int q = 0; q < 4; q++) {
    if (!(s->grad_scored >> q & 1u)) continue;
    char style[160];
    const curve worst = {n, s->grad_win + 2 * q * n, NULL, KDA_GRAD_WINDOW};
    snprintf(style, sizeof style, "stroke=\"%s\" stroke-dasharray=\"1 3\" stroke-width=\"2\"",
             colour[q]);
    series(f, &a, &worst, T, s->grad_win + (2 * q + 1) * n, 1.0, "allowance", style, colour[q]);
    snprintf(style, sizeof style, "stroke=\"%s\" stroke-dasharray=\"%s\" stroke-width=\"1.5\"",
             colour[q], dash[q]);
    series(f, &a, &worst, T, worst.y, 1.0, kda_grad_name(q), style, colour[q]);
  }
  fputs("</svg><figcaption>", f);
  esc(f, r->backend);
  fprintf(f, " (%s): the worst error per %d-token window, without allowance, of dq (blue, "
             "solid), dk (green, dashed), dv (purple, dotted), dg (orange, dash-dot); dotted in "
             "the same colour: cap %g &times; the allowance used there (SPEC.md &sect;13.7). "
             "Errors below %g are drawn at %g.</figcaption></figure>\n",
          kda_verdict_name(r->verdict), KDA_GRAD_WINDOW, s->grad_cap, ERR_FLOOR, ERR_FLOOR);
}

/* The gradient plots of case row c, one per backend; returns their number. */
static int64_t grad_plots(FILE *f, const grid *g, int64_t c) {
  int64_t m = 0;
  for (int64_t b = 0; b < g->n_backs; b++) {
    const kda_case_report *r = cell(g, g->cases[c], g->backs[b]);
    if (!r || !r->has_score || !r->backward || !r->score.grad_win || r->score.n_grad_win < 1 ||
        r->score.win_tokens < KDA_STEP_ALLOWANCE_N0)
      continue;
    grad_plot(f, r, r->score.win_tokens);
    m++;
  }
  return m;
}

static void plot_case(FILE *f, const grid *g, int64_t c) {
  const kda_case_report **rep = malloc(((size_t)g->n_backs + 1) * sizeof *rep);
  curve *cv = malloc(((size_t)g->n_backs + 1) * sizeof *cv);
  axes a;
  int64_t T = g->rs[g->cases[c]].score.win_tokens;
  const int64_t m = rep && cv ? case_curves(g, c, rep, cv, &a, &T) : 0;
  fprintf(f, "<section class=\"case\" id=\"case-%lld\"><h3>", (long long)c);
  esc(f, g->rs[g->cases[c]].case_id);
  fprintf(f, " (%lld tokens)</h3>\n", (long long)T);
  if (m > 0) {
    int same_cls = 1;
    for (int64_t k = 1; k < m; k++) same_cls &= rep[k]->score.cls == rep[0]->score.cls;
    fprintf(f, "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\"%d\" "
               "height=\"%d\" aria-label=\"worst o error along the sequence of ", PLOT_W, PLOT_H);
    esc(f, g->rs[g->cases[c]].case_id);
    fprintf(f, ", %lld backends\">\n", (long long)m);
    plot_frame(f, &a, same_cls ? kda_class_name(rep[0]->score.cls) : "each backend's class");
    plot_curves(f, &a, rep, cv, m, T);
    fputs("</svg>", f);
    plot_key(f, rep, cv, m);
    fputs("</figure>\n", f);
  } else if (grad_plots(f, g, c) == 0) {
    fputs("<p>No plot: no backend was scored on this case along its sequence.</p>\n", f);
  }
  fputs("</section>\n", f);
  free(rep), free(cv);
}

static void plots(FILE *f, const grid *g) {
  fputs("<h2>Error along the sequence, case by case</h2>\n", f);
  for (int64_t c = 0; c < g->n_cases; c++) plot_case(f, g, c);
}

static void tail(FILE *f) {
  fputs("<script>\n(function(){var e=document.getElementById(\"kda-errors\");"
        "window.onerror=function(m){var li=document.createElement(\"li\");"
        "li.textContent=\"error: \"+m;e.appendChild(li);};"
        "document.body.setAttribute(\"data-ready\",\"1\");})();\n</script>\n</body>\n</html>\n", f);
}

int kda_report_html(FILE *f, const kda_case_report *rs, int64_t n) {
  kda_tally t;
  memset(&t, 0, sizeof t);
  for (int64_t i = 0; i < n; i++) kda_tally_add(&t, &rs[i]);
  grid g;
  if (grid_build(&g, rs, n) != KDA_OK) return grid_free(&g), KDA_ENOMEM;
  head(f);
  summary(f, &t, &g);
  matrix(f, &g);
  plots(f, &g);
  verdict_table(f, &g);
  tail(f);
  grid_free(&g);
  return ferror(f) ? KDA_EIO : KDA_OK;
}

int kda_report_html_write(const char *dir, const kda_case_report *rs, int64_t n, char *err,
                          size_t errlen) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return snprintf(err, errlen, "%s: cannot create the directory: %s", dir, strerror(errno)),
           KDA_EIO;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return snprintf(err, errlen, "out of memory for the HTML report"), KDA_ENOMEM;
  int st = kda_report_html(f, rs, n);
  if (fclose(f) != 0 || st != KDA_OK) {
    free(text);
    return snprintf(err, errlen, "out of memory for the HTML report"), KDA_ENOMEM;
  }
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s/index.html", dir) >= sizeof path) {
    free(text);
    return snprintf(err, errlen, "%s: path too long", dir), KDA_EINVAL;
  }
  st = kda_atomic_write(path, text, len, err, errlen);
  free(text);
  return st;
}

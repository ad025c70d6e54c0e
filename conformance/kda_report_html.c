/* kda_report_html.c: the self-contained HTML report of a conformance run (kda conform --html):
 * the verdict table and, per long case, an error-versus-position plot per backend as inline
 * SVG (SPEC.md §7.5, §7.9).
 * SPDX-License-Identifier: MIT
 *
 * A plot shows the mean and the worst per-token o error of each 64-token window
 * (kda_score.win_each and win_max_each, class units, without any allowance) against the
 * window's middle position, log-log, with the cap of the class (dashed) and the cap times the
 * allowance the rule gave in that window (dotted; kda_score.win_allow_each: for fp32 the
 * envelope rule, else the step allowance; SPEC.md §7.3).  Windows a sampled truth does not
 * hold are gaps: each run of scored windows is one polyline.  The page has
 * no external resource; its only script records script errors in #kda-errors and sets
 * body[data-ready] (the browser test's protocol, tools/tests/browser_check.sh).  Verdicts are
 * words, curves differ by dash pattern as well as colour.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kda_conform.h"
#include "kda_files.h"

#define PLOT_W 560
#define PLOT_H 260
#define PAD_L 64
#define PAD_B 40
#define PAD_T 14
#define PAD_R 16
#define ERR_FLOOR 1e-3 /* class units: below it an error is drawn at the floor */

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

static void head(FILE *f, const kda_tally *t) {
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<title>kda conform report</title>\n<style>\n"
        "body{font:14px/1.4 system-ui,sans-serif;margin:12px 18px;color:#111}\n"
        "table{border-collapse:collapse;font-size:13px}\n"
        "td,th{border:1px solid #999;padding:2px 6px;text-align:left}\n"
        "td.num{text-align:right;font-family:ui-monospace,monospace}\n"
        "tr.bad td{font-weight:700}\n"
        ".plots{display:flex;flex-wrap:wrap;gap:12px}\n"
        "figure{margin:0;border:1px solid #bbb;padding:6px;max-width:580px}\n"
        "svg text{font:11px system-ui,sans-serif}\n"
        "#kda-errors{color:#900;font-weight:700}\n"
        "</style>\n</head>\n<body>\n<ul id=\"kda-errors\"></ul>\n"
        "<h1>kda conform report</h1>\n", f);
  fprintf(f, "<p id=\"summary\">%lld passed, %lld failed, %lld skipped.</p>\n",
          (long long)t->passed, (long long)t->failed, (long long)t->skipped);
}

static void metric_cell(FILE *f, const kda_qmetric *m, double cap) {
  if (!m->count) fputs("<td class=\"num\">-</td>", f);
  else fprintf(f, "<td class=\"num\">%.3g / %g</td>", m->worst, cap);
}

static void verdict_table(FILE *f, const kda_case_report *rs, int64_t n) {
  fputs("<h2>Verdicts</h2>\n<table id=\"verdicts\">\n<tr><th>case</th><th>backend</th>"
        "<th>verdict</th><th>class</th><th>o worst / cap</th><th>ht worst / cap</th>"
        "<th>hc worst / cap</th><th>growth</th><th>reason</th></tr>\n", f);
  for (int64_t i = 0; i < n; i++) {
    const kda_case_report *r = &rs[i];
    const kda_score *s = &r->score;
    fprintf(f, "<tr%s><td>", kda_verdict_is_failure(r->verdict) ? " class=\"bad\"" : "");
    esc(f, r->case_id);
    fputs("</td><td>", f);
    esc(f, r->backend);
    fprintf(f, "</td><td>%s</td>", kda_verdict_name(r->verdict));
    if (r->has_score && r->backward) {
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
  fputs("</table>\n", f);
}

/* ---- One log-log plot. */
typedef struct axes {
  double x0, x1, y0, y1; /* log10 ranges */
} axes;

static double px(const axes *a, double x) {
  return PAD_L + (log10(x) - a->x0) / (a->x1 - a->x0) * (PLOT_W - PAD_L - PAD_R);
}
static double py(const axes *a, double y) {
  double l = log10(y < pow(10, a->y0) ? pow(10, a->y0) : y);
  return PAD_T + (a->y1 - l) / (a->y1 - a->y0) * (PLOT_H - PAD_T - PAD_B);
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

/* The middle position (tokens, 1-based) of window w of `window` tokens. */
static double win_mid(int64_t window, int64_t w, int64_t T) {
  const int64_t a = w * window, b = a + window < T ? a + window : T;
  return 0.5 * (double)(a + 1 + b);
}

static void raise_top(axes *a, double y) {
  if (isfinite(y) && y > 0 && log10(y) > a->y1) a->y1 = log10(y);
}

static axes plot_axes(const kda_score *s, int64_t T) {
  axes a = {0.0, log10((double)T), log10(ERR_FLOOR), log10(s->caps.o)};
  for (int64_t w = 0; w < s->n_win_each; w++) {
    raise_top(&a, s->win_each[w]);
    raise_top(&a, s->win_max_each[w]);
    raise_top(&a, s->caps.o * s->win_allow_each[w]);
  }
  a.y1 = ceil(a.y1 + 0.01), a.y0 = floor(a.y0);
  if (a.x1 <= a.x0) a.x1 = a.x0 + 1;
  return a;
}

/* A series: n_win values of windows of `window` tokens over T tokens. */
typedef struct win_series {
  const double *y;
  int64_t n_win, window, T;
} win_series;

/* One polyline of class cls per run of windows where y (scale times series) has a value. */
static void series(FILE *f, const axes *a, const win_series *ws, double scale, const char *cls,
                   const char *style) {
  const double *y = ws->y;
  for (int64_t w = 0; w < ws->n_win;) {
    if (isnan(y[w])) {
      w++;
      continue;
    }
    fprintf(f, "<polyline class=\"%s\" fill=\"none\" %s points=\"", cls, style);
    const int64_t first = w;
    for (; w < ws->n_win && !isnan(y[w]); w++) {
      const double e = isfinite(y[w]) && scale * y[w] > ERR_FLOOR ? scale * y[w]
                       : isinf(y[w]) ? pow(10, a->y1) : ERR_FLOOR;
      fprintf(f, "%s%.1f,%.1f", w > first ? " " : "", px(a, win_mid(ws->window, w, ws->T)),
              py(a, e));
    }
    fputs("\"/>\n", f);
  }
}

static void plot(FILE *f, const kda_case_report *r, int64_t T) {
  const kda_score *s = &r->score;
  const axes a = plot_axes(s, T);
  fputs("<figure><svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" ", f);
  fprintf(f, "width=\"%d\" height=\"%d\" aria-label=\"error per window of ", PLOT_W, PLOT_H);
  esc(f, r->backend);
  fputs("\">\n", f);
  decade_ticks(f, &a);
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#000\"/>\n",
          PAD_L, PAD_T, PLOT_W - PAD_L - PAD_R, PLOT_H - PAD_T - PAD_B);
  /* the cap, then what the rule allowed in each window (SPEC.md §7.3), then the errors */
  fprintf(f, "<line class=\"cap\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#b00\" "
             "stroke-dasharray=\"6 3\"/>\n", px(&a, 1.0), px(&a, (double)T), py(&a, s->caps.o),
          py(&a, s->caps.o));
  const win_series allow = {s->win_allow_each, s->n_win_each, s->window, T};
  const win_series worst = {s->win_max_each, s->n_win_each, s->window, T};
  const win_series mean = {s->win_each, s->n_win_each, s->window, T};
  series(f, &a, &allow, s->caps.o, "allowance",
         "stroke=\"#b00\" stroke-dasharray=\"1 3\" stroke-width=\"2\"");
  series(f, &a, &worst, 1.0, "worst",
         "stroke=\"#7a9fd8\" stroke-dasharray=\"4 2\" stroke-width=\"1\"");
  series(f, &a, &mean, 1.0, "err", "stroke=\"#1f5fbf\" stroke-width=\"1.5\"");
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">token position (log)</text>\n",
          (PLOT_W + PAD_L) / 2, PLOT_H - 6);
  fprintf(f, "<text x=\"12\" y=\"%d\" transform=\"rotate(-90 12 %d)\" text-anchor=\"middle\">"
             "o error, %s units (log)</text>\n", PLOT_H / 2, PLOT_H / 2, kda_class_name(s->cls));
  fputs("</svg><figcaption>", f);
  esc(f, r->backend);
  fprintf(f, " (%s): solid = mean, thin dashed = worst o error per %lld-token window, without "
             "allowance; dashed = cap %g; dotted = cap &times; the allowance used in the window "
             "(%s). Gaps: windows the truth does not store. Errors below %g are drawn at "
             "%g.</figcaption></figure>\n", kda_verdict_name(r->verdict), (long long)s->window,
          s->caps.o, s->cls == KDA_PRECISION_FP32
                         ? "the envelope rule of SPEC.md &sect;7.3: min(n/256, max(1, 4 e / cap)), "
                           "e = ref-f32's worst error near the window"
                         : "the step allowance max(1, n/256) of SPEC.md &sect;7.3",
          ERR_FLOOR, ERR_FLOOR);
}

/* A backward report's plot (SPEC.md §13.7): the worst error of dq, dk, dv, dg per 64-token window
 * without allowance, each with what was allowed there (cap x allowance), by colour and dash. */
static void grad_plot(FILE *f, const kda_case_report *r, int64_t T) {
  static const char *const colour[4] = {"#1f5fbf", "#2a8a2a", "#8a2a8a", "#b06000"};
  static const char *const dash[4] = {"", "6 2", "2 2", "8 2 2 2"};
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
  decade_ticks(f, &a);
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#000\"/>\n",
          PAD_L, PAD_T, PLOT_W - PAD_L - PAD_R, PLOT_H - PAD_T - PAD_B);
  for (int q = 0; q < 4; q++) {
    if (!(s->grad_scored >> q & 1u)) continue;
    char style[160];
    const win_series worst = {s->grad_win + 2 * q * n, n, KDA_GRAD_WINDOW, T};
    const win_series allow = {s->grad_win + (2 * q + 1) * n, n, KDA_GRAD_WINDOW, T};
    snprintf(style, sizeof style, "stroke=\"%s\" stroke-dasharray=\"1 3\" stroke-width=\"2\"",
             colour[q]);
    series(f, &a, &allow, 1.0, "allowance", style);
    snprintf(style, sizeof style, "stroke=\"%s\" stroke-dasharray=\"%s\" stroke-width=\"1.5\"",
             colour[q], dash[q]);
    series(f, &a, &worst, 1.0, kda_grad_name(q), style);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">token position (log)</text>\n"
             "<text x=\"12\" y=\"%d\" transform=\"rotate(-90 12 %d)\" text-anchor=\"middle\">"
             "gradient error, %s units (log)</text>\n</svg><figcaption>",
          (PLOT_W + PAD_L) / 2, PLOT_H - 6, PLOT_H / 2, PLOT_H / 2, kda_class_name(s->cls));
  esc(f, r->backend);
  fprintf(f, " (%s): the worst error per %d-token window, without allowance, of dq (blue, "
             "solid), dk (green, dashed), dv (purple, dotted), dg (orange, dash-dot); dotted in "
             "the same colour: cap %g &times; the allowance used there (SPEC.md &sect;13.7). "
             "Errors below %g are drawn at %g.</figcaption></figure>\n",
          kda_verdict_name(r->verdict), KDA_GRAD_WINDOW, s->grad_cap, ERR_FLOOR, ERR_FLOOR);
}

/* Reports come case by case (every backend of a case in a row): one section per long case. */
static void plots(FILE *f, const kda_case_report *rs, int64_t n) {
  fputs("<h2>Error along the sequence (long cases)</h2>\n", f);
  int any = 0;
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    while (j < n && strcmp(rs[j].case_id, rs[i].case_id) == 0) j++;
    int started = 0;
    for (int64_t k = i; k < j; k++) {
      const kda_score *s = &rs[k].score;
      const int grad = rs[k].backward && s->grad_win && s->n_grad_win > 0;
      if (!rs[k].has_score || (s->n_win_each < 1 && !grad) ||
          s->win_tokens < KDA_STEP_ALLOWANCE_N0)
        continue;
      if (!started) {
        fputs("<section class=\"case\"><h3>", f);
        esc(f, rs[i].case_id);
        fprintf(f, " (%lld tokens)</h3>\n<div class=\"plots\">\n", (long long)s->win_tokens);
        started = any = 1;
      }
      if (grad) grad_plot(f, &rs[k], s->win_tokens);
      else plot(f, &rs[k], s->win_tokens);
    }
    if (started) fputs("</div></section>\n", f);
    i = j;
  }
  if (!any) fputs("<p>No case of at least 256 tokens was scored.</p>\n", f);
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
  head(f, &t);
  verdict_table(f, rs, n);
  plots(f, rs, n);
  tail(f);
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

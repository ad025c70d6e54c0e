/* kda_cmd_explore.c: `kda explore`, one self-contained HTML page: a notebook of a small head
 * whose inputs the reader edits (three memories on one token stream, the sub-steps of SPEC.md
 * §3.1, a KV cache against the fixed state) and, given a case, a player that steps one head of
 * it token by token beside the plain accumulator on the same inputs.
 * SPDX-License-Identifier: MIT
 *
 * The page (tools/explore/explorer.html) has no network access and no external script; the
 * notebook computes with its own port of the float64 step.  The data of the case's head,
 * traced by kda_trace_head (the step function of kda trace and the L0 traces), is embedded as
 * JSON in place of the page's marker (null without a case).  The file is written atomically.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_score_internal.h"
#include "kda_files.h"
#include "kda_npz.h"
#include "kda_sbuf.h"
#include "kda_study.h"
#include "kda_tool.h"
#include "kda_trace.h"

#define SUB "explore"
#define MAX_CELLS 65536 /* tokens x K x V embedded: about 2 MB of page */
#define MAX_DIM 64      /* K and V shown as a heatmap */

extern const char kda_explore_page[]; /* kda_explore_page.c */
#define DATA_MARKER "<!--KDA-DATA-->"

static const char help_text[] =
    "Usage: kda explore [CASE.npz] -o EXPLORER.html [--seq N] [--head HV]\n"
    "                   [--tokens A:B] [--result RESULT.npz]\n"
    "\n"
    "Writes one self-contained HTML file (no network, no external scripts).  Its\n"
    "notebook is a 4 x 4 head whose inputs you edit: a forget dial per key channel\n"
    "(KDA), one dimmer (Gated DeltaNet), beta, the next token's key and value or a\n"
    "'next fact' preset; KDA, Gated DeltaNet and the plain accumulator side by side on\n"
    "the same token stream with their memory mass ||S||_F and the read-back error of a\n"
    "chosen fact; the four sub-steps of one token with the changed cells marked; and a\n"
    "KV cache's size against the fixed state over the conversation length.  Every\n"
    "number there is computed in the page by a port of the float64 step.  With\n"
    "CASE.npz the page also steps the state of one value head of it token by token:\n"
    "the K x V state as a heatmap with its numbers, the four sub-steps of SPEC.md\n"
    "section 3.1 (decay, erase, write, readout) highlighted in turn, the per-channel\n"
    "decay factors as bars, the prediction, correction and output vectors, and the\n"
    "plain accumulator (S += b k^ v^T: no decay, no erase) beside the delta rule on\n"
    "the same inputs, with the total state mass ||S||_F of both.  With --result, the\n"
    "error of that result file's o against the truth (the case's certified o, else\n"
    "the float64 reference) along the whole sequence.  Keys: Right/Left step, Space\n"
    "play/pause, Home/End.  EXPLORER.html#step=N opens at sub-step N (4 per token).\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE   the HTML file to write (required)\n"
    "  -s, --seq N         the sequence (default 0)\n"
    "  -H, --head HV       the value head (default 0)\n"
    "  -t, --tokens A:B    step through positions A .. B-1 of the sequence (default\n"
    "                      all); at most 65536 / (K V) tokens, K and V at most 64\n"
    "  -r, --result FILE   a result file (kda ref -o, a backend's output) to compare\n"
    "  -h, --help          print this help and exit\n"
    "\n"
    "Exit status:\n"
    "  0  the page was written\n"
    "  2  usage error, I/O error, bad input or a case too big to show (one line on\n"
    "     standard error)\n";

typedef struct explore_args {
  const char *path, *output, *tokens, *result;
  int64_t seq, head;
} explore_args;

static int parse_args(int argc, char **argv, explore_args *a) {
  static const struct option longopts[] = {
      {"output", required_argument, NULL, 'o'}, {"seq", required_argument, NULL, 's'},
      {"head", required_argument, NULL, 'H'},   {"tokens", required_argument, NULL, 't'},
      {"result", required_argument, NULL, 'r'}, {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  memset(a, 0, sizeof *a);
  int c, st;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":o:s:H:t:r:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'o': a->output = optarg; break;
      case 's': case 'H': case 't': /* where to look, as kda trace and kda explore both take it */
        if ((st = kda_study_where_option(SUB, c, optarg, &a->seq, &a->head, &a->tokens)) != 0)
          return st;
        break;
      case 'r': a->result = optarg; break;
      case 'h': fputs(help_text, stdout); return -1;
      default: return kda_tool_bad_option(SUB, c, argv);
    }
  }
  if (optind < argc - 1) return kda_tool_usage(SUB, "at most one CASE.npz");
  if (!a->output) return kda_tool_usage(SUB, "missing -o EXPLORER.html");
  a->path = optind < argc ? argv[optind] : NULL;
  if (!a->path && (a->result || a->tokens || a->seq || a->head))
    return kda_tool_usage(SUB, "--seq, --head, --tokens and --result need a CASE.npz");
  return 0;
}

/* ---- The embedded data. */
typedef struct page {
  kda_sbuf b;
  kda_study *st;
  int64_t tok_a, tok_b;
  double *lin;      /* [2][K][V] the plain accumulator on the same inputs; then its state
                       before the first token shown */
  double *prev;     /* [2][K][V] the delta rule's state before the current token; then
                       before the first token shown */
  int64_t stride;   /* outside the shown tokens, the mass is kept every stride tokens */
  int first;
} page;

/* Long sequences keep about 4096 points of their mass and error curves. */
static int64_t curve_stride(int64_t len) { return len > 4096 ? (len + 4095) / 4096 : 1; }

/* Six significant digits are plenty for a picture; non-finite values become null. */
static void num(kda_sbuf *b, double x) {
  if (isfinite(x)) kda_sbuf_printf(b, "%.6g", x);
  else kda_sbuf_printf(b, "null");
}

static void arr(kda_sbuf *b, const char *key, const double *x, int64_t n) {
  kda_sbuf_printf(b, "\"%s\":[", key);
  for (int64_t i = 0; i < n; i++) {
    if (i) kda_sbuf_printf(b, ",");
    num(b, x[i]);
  }
  kda_sbuf_printf(b, "]");
}

static double frob(const double *S, int64_t n) {
  double s = 0.0;
  for (int64_t e = 0; e < n; e++) s += S[e] * S[e];
  return sqrt(s);
}

static int on_token(void *ctx, const kda_trace_token *tk) {
  page *pg = ctx;
  const kda_trace_f64 *s = tk->s64;
  const int64_t K = s->K, V = s->V;
  kda_sbuf *b = &pg->b;
  const size_t KV = (size_t)(K * V);
  if (tk->initial) {
    memcpy(pg->lin, s->S, KV * sizeof *pg->lin);
    memcpy(pg->prev, s->S, KV * sizeof *pg->prev);
    return 0;
  }
  const int shown = tk->pos >= pg->tok_a && tk->pos < pg->tok_b;
  if (shown && tk->pos == pg->tok_a) { /* the first token shown: both states before it */
    memcpy(pg->prev + KV, pg->prev, KV * sizeof *pg->prev);
    memcpy(pg->lin + KV, pg->lin, KV * sizeof *pg->lin);
  }
  memcpy(pg->prev, s->S, KV * sizeof *pg->prev);
  /* the plain accumulator: no decay, no erase, S += b k^ v^T (SPEC.md §5, family linear) */
  for (int64_t e = 0; e < K * V; e++) pg->lin[e] = pg->lin[e] + s->kk[e / V] * (s->b * s->v[e % V]);
  if (!shown && tk->pos % pg->stride != 0) return 0;
  const double mass = frob(s->S, K * V), lmass = frob(pg->lin, K * V);
  kda_sbuf_printf(b, "%s{\"t\":%lld,\"pos\":%lld,\"mass\":", pg->first ? "" : ",\n",
                  (long long)tk->t, (long long)tk->pos);
  pg->first = 0;
  num(b, mass);
  kda_sbuf_printf(b, ",\"lmass\":");
  num(b, lmass);
  if (!shown) return kda_sbuf_printf(b, "}"), 0;
  kda_sbuf_printf(b, ",\"b\":");
  num(b, s->b);
  const struct { const char *k; const double *x; int64_t n; } m[] = {
      {"g", tk->g_eff, K}, {"a", s->a, K},   {"q", s->qq, K},     {"k", s->kk, K},
      {"v", s->v, V},      {"Sd", s->Sd, K * V}, {"p", s->p, V}, {"c", s->c, V},
      {"S", s->S, K * V},  {"o", s->o, V},   {"L", pg->lin, K * V}};
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    kda_sbuf_printf(b, ",");
    arr(b, m[i].k, m[i].x, m[i].n);
  }
  kda_sbuf_printf(b, "}");
  return 0;
}

/* Per-token error of the result's o against the truth, relative to the token's largest |o|:
 * max_j |o_res - o_true| / max(max_j |o_true|, smallest normal). */
static int result_errors(const explore_args *a, kda_study *st, kda_sbuf *b) {
  const kda_problem *p = &st->c.p;
  char err[KDA_ERRLEN];
  kda_truth tr;
  /* a sampled golden o (SPEC.md §10.2) has rows at some tokens only: use ref-f64 instead */
  const char *golden = kda_sampled_declared(&st->c) ? NULL : a->path;
  if (kda_truth_compute(&st->c, golden, &tr, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err);
  const uint64_t n = (uint64_t)(p->T * p->HV * p->V);
  double *o = malloc((size_t)n * sizeof *o + 1);
  kda_npz *z = NULL;
  int rc = 0;
  if (!o) rc = kda_tool_fail(SUB, "out of memory");
  if (!rc && kda_npz_open(a->result, &z, err, sizeof err) != KDA_OK) rc = kda_tool_fail(SUB, "%s", err);
  if (!rc && kda_npz_read(z, "o", KDA_DTYPE_F64, o, n, err, sizeof err) != KDA_OK)
    rc = kda_tool_fail(SUB, "%s", err);
  if (z) kda_npz_close(z);
  if (!rc) {
    /* [position, error] pairs; a long sequence keeps the worst of every stride tokens */
    const int64_t stride = curve_stride(st->eos - st->bos);
    kda_sbuf_printf(b, ",\"truth\":\"%s\",\"err\":[", tr.from_golden ? "certified" : "ref-f64");
    for (int64_t a0 = st->bos; a0 < st->eos; a0 += stride) {
      double worst = 0.0;
      for (int64_t t = a0; t < a0 + stride && t < st->eos; t++) {
        double d = 0.0, m = 0.0;
        for (int64_t j = 0; j < p->V; j++) {
          const size_t at = (size_t)((t * p->HV + st->hv) * p->V + j);
          d = fmax(d, isfinite(o[at]) ? fabs(o[at] - tr.out.o[at]) : INFINITY);
          m = fmax(m, fabs(tr.out.o[at]));
        }
        worst = fmax(worst, isfinite(d) ? d / fmax(m, 2.2250738585072014e-308) : 1e300);
      }
      kda_sbuf_printf(b, "%s[%lld,", a0 > st->bos ? "," : "", (long long)(a0 - st->bos));
      num(b, worst);
      kda_sbuf_printf(b, "]");
    }
    kda_sbuf_printf(b, "]");
  }
  free(o);
  kda_truth_free(&tr);
  return rc;
}


static int build(const explore_args *a, kda_study *st, page *pg) {
  const kda_problem *p = &st->c.p;
  const int64_t len = st->eos - st->bos;
  pg->tok_b = len;
  if (a->tokens && kda_study_parse_range(a->tokens, len, &pg->tok_a, &pg->tok_b))
    return kda_tool_usage(SUB, "bad --tokens '%s' (A:B, positions in the sequence)", a->tokens);
  if (p->K > MAX_DIM || p->V > MAX_DIM)
    return kda_tool_fail(SUB, "%s: K = %lld, V = %lld: the explorer shows K, V <= %d (use kda "
                         "trace for larger heads)", a->path, (long long)p->K, (long long)p->V, MAX_DIM);
  if (pg->tok_b == pg->tok_a)
    return kda_tool_fail(SUB, "%s: sequence %lld has no tokens to show", a->path, (long long)st->n);
  if ((pg->tok_b - pg->tok_a) * p->K * p->V > MAX_CELLS)
    return kda_tool_fail(SUB, "%s: %lld tokens of %lld x %lld states are too many for one page "
                         "(at most %d values); pick fewer with --tokens A:B", a->path,
                         (long long)(pg->tok_b - pg->tok_a), (long long)p->K, (long long)p->V,
                         MAX_CELLS);
  kda_sbuf *b = &pg->b;
  kda_sbuf_printf(b, "{\"case\":");
  kda_study_json_str(b, st->c.id ? st->c.id : "");
  kda_sbuf_printf(b, ",\"family\":\"%s\",\"gate\":\"%s\",\"beta\":\"%s\",\"K\":%lld,\"V\":%lld,"
                     "\"seq\":%lld,\"head\":%lld,\"qk_head\":%lld,\"bos\":%lld,\"len\":%lld,"
                     "\"first\":%lld,\"decays\":%d,\"erases\":%d",
                  kda_family_name(p->family), kda_gate_name(p->gate_mode),
                  kda_beta_name(p->beta_mode), (long long)p->K, (long long)p->V, (long long)st->n,
                  (long long)st->hv, (long long)st->h, (long long)st->bos, (long long)len,
                  (long long)pg->tok_a, p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN,
                  p->family != KDA_FAMILY_LINEAR);
  if (a->result) {
    kda_sbuf_printf(b, ",\"result\":");
    kda_study_json_str(b, a->result);
    int rc = result_errors(a, st, b);
    if (rc) return rc;
  }
  kda_sbuf_printf(b, ",\"steps\":[\n");
  const int64_t KV = p->K * p->V;
  pg->lin = malloc(2 * (size_t)KV * sizeof *pg->lin);
  pg->prev = malloc(2 * (size_t)KV * sizeof *pg->prev);
  int st_rc = pg->lin && pg->prev ? 0 : KDA_ENOMEM;
  pg->first = 1;
  pg->stride = curve_stride(len);
  char err[KDA_ERRLEN] = "out of memory";
  if (!st_rc) st_rc = kda_trace_head(p, &st->ts, st->n, st->hv, on_token, pg, err, sizeof err);
  if (!st_rc) { /* the states before the first token shown (SPEC.md §3.1: S_{t-1}) */
    kda_sbuf_printf(b, "],");
    arr(b, "Sb", pg->prev + KV, KV);
    kda_sbuf_printf(b, ",");
    arr(b, "Lb", pg->lin + KV, KV);
    kda_sbuf_printf(b, "}");
  }
  free(pg->lin), free(pg->prev);
  if (st_rc) return kda_tool_fail(SUB, "%s: %s", a->path, err);
  if (b->oom) return kda_tool_fail(SUB, "out of memory building the page");
  return 0;
}

/* The page with the data (or null) in place of its marker. */
static int compose(const char *data, kda_sbuf *out) {
  const char *m = strstr(kda_explore_page, DATA_MARKER);
  if (!m) return kda_tool_fail(SUB, "the built-in page has no data marker");
  kda_sbuf_printf(out, "%.*s%s%s", (int)(m - kda_explore_page), kda_explore_page, data,
                  m + strlen(DATA_MARKER));
  return out->oom ? kda_tool_fail(SUB, "out of memory building the page") : 0;
}

int kda_cmd_explore(int argc, char **argv) {
  explore_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc < 0 ? KDA_EXIT_OK : rc;
  char err[KDA_ERRLEN];
  const char *inputs[2] = {a.path, a.result ? a.result : a.path};
  if (a.path && kda_output_check(a.output, inputs, 2, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err); /* never an input */
  page pg;
  memset(&pg, 0, sizeof pg);
  kda_study st;
  memset(&st, 0, sizeof st);
  if (a.path && (rc = kda_study_open(SUB, a.path, a.seq, a.head, &st)) != 0) return rc;
  pg.st = &st;
  rc = a.path ? build(&a, &st, &pg) : 0;
  kda_sbuf html = {0};
  if (!rc) rc = compose(a.path ? pg.b.s : "null", &html);
  if (!rc && kda_atomic_write(a.output, html.s, html.len, err, sizeof err) != KDA_OK)
    rc = kda_tool_fail(SUB, "%s", err);
  free(pg.b.s), free(html.s);
  if (a.path) kda_study_close(&st);
  return rc;
}

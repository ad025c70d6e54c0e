/* kda_cmd_trace.c: `kda trace`, every step of one head (SPEC.md §3.1) in float64, its float32
 * twin and, for small cases, the certified value.
 * SPDX-License-Identifier: MIT
 *
 * The steps come from kda_trace_head (ref/kda_trace.h), the step function the golden L0
 * traces use too; `--l0` prints a golden L0 case's trace exactly as golden/L0/<id>.txt holds it.
 * All output is built in memory and printed only once nothing can fail.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_golden.h"
#include "kda_golden_grad.h"
#include "kda_ref.h"
#include "kda_sbuf.h"
#include "kda_study.h"
#include "kda_tool.h"
#include "kda_trace.h"

#define SUB "trace"
#define CELLS 8                 /* values per text line: 8 cells of 9 columns + 8 = 80 */
#define CERT_MAX_VALUES 131072  /* T HV K V up to which the MPFR reference certifies */

static const char help_text[] =
    "Usage: kda trace CASE.npz [--seq N] [--head HV] [--tokens A:B]\n"
    "                          [--channels A:B] [--json] [--no-certify]\n"
    "       kda trace --l0 CASE.npz\n"
    "       kda trace --backward GRAD.npz\n"
    "\n"
    "Prints every step of one value head as SPEC.md section 3.1 defines it: the\n"
    "gate and beta after their modes (g_eff, a = exp(g_eff), b), the normalised q^\n"
    "and k^, the decayed state, the prediction p = S^T k^, the correction\n"
    "c = b (v - p), the written state and the output o = S^T q^.  Each value is\n"
    "shown in float64 (the reference ref-f64) with the float32 twin (ref-f32) below\n"
    "it; for small cases (T HV K V <= 131072) the written state and o also get the\n"
    "certified value (the MPFR reference, SPEC.md section 8) and the decimal digits\n"
    "float64 got right ('=': all of them, it is the correctly rounded value).  Text\n"
    "fits 80 columns; more than 8 channels are elided (0..3, ..., the last 3).\n"
    "\n"
    "Options:\n"
    "  -s, --seq N         the sequence (default 0)\n"
    "  -H, --head HV       the value head (default 0); its q/k head follows the\n"
    "                      head map\n"
    "  -t, --tokens A:B    print positions A .. B-1 of the sequence (default all;\n"
    "                      the recurrence still runs from its first token)\n"
    "  -c, --channels A:B  key and value channels A .. B-1 shown in text (default\n"
    "                      all)\n"
    "  -j, --json          one JSON object (schema kda-trace/1), every channel\n"
    "      --no-certify    skip the MPFR certification\n"
    "      --l0            print the golden L0 trace of a golden/L0 case file: byte\n"
    "                      for byte golden/L0/<id>.txt (exact hex floats)\n"
    "      --backward      print the adjoint (SPEC.md section 13.2) of a golden\n"
    "                      gradient file (golden/grad/<level>/<id>.npz) step by step\n"
    "                      for every sequence and value head, then the gradients of\n"
    "                      the inputs; for golden/grad/L0 byte for byte its <id>.txt\n"
    "                      (every number exact, equal to the certified gradients);\n"
    "                      needs l2 off, gate log and beta prob\n"
    "  -h, --help          print this help and exit\n"
    "\n"
    "Exit status:\n"
    "  0  the trace was printed\n"
    "  2  usage error, I/O error or bad input (one line on standard error)\n";

typedef struct trace_args {
  const char *path, *tokens, *channels;
  int64_t seq, head;
  int json, certify, l0, backward;
} trace_args;

static int parse_args(int argc, char **argv, trace_args *a) {
  enum { O_NOCERT = 256, O_L0, O_BACKWARD };
  static const struct option longopts[] = {
      {"seq", required_argument, NULL, 's'},      {"head", required_argument, NULL, 'H'},
      {"tokens", required_argument, NULL, 't'},   {"channels", required_argument, NULL, 'c'},
      {"json", no_argument, NULL, 'j'},           {"no-certify", no_argument, NULL, O_NOCERT},
      {"l0", no_argument, NULL, O_L0},            {"help", no_argument, NULL, 'h'},
      {"backward", no_argument, NULL, O_BACKWARD},
      {NULL, 0, NULL, 0}};
  memset(a, 0, sizeof *a);
  a->certify = 1;
  int c, st;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":s:H:t:c:jh", longopts, NULL)) != -1) {
    switch (c) {
      case 's': case 'H': case 't': /* where to look, as kda trace and kda explore both take it */
        if ((st = kda_study_where_option(SUB, c, optarg, &a->seq, &a->head, &a->tokens)) != 0)
          return st;
        break;
      case 'c': a->channels = optarg; break;
      case 'j': a->json = 1; break;
      case O_NOCERT: a->certify = 0; break;
      case O_L0: a->l0 = 1; break;
      case O_BACKWARD: a->backward = 1; break;
      case 'h': fputs(help_text, stdout); return -1;
      default: return kda_tool_bad_option(SUB, c, argv);
    }
  }
  if (optind != argc - 1)
    return kda_tool_usage(SUB, optind >= argc ? "missing CASE.npz" : "exactly one CASE.npz");
  a->path = argv[optind];
  return 0;
}

/* ---- Which channels a text line shows: all of [a, b) when they fit, else the first four,
 * an elision mark and the last three. */
typedef struct chan_sel {
  int64_t idx[CELLS];
  int n, gap;   /* gap: the cell before which "..." stands, -1 for none */
  int partial;  /* 1: not every channel is shown, so lines get an index header */
} chan_sel;

static chan_sel select_channels(int64_t a, int64_t b, int64_t all) {
  chan_sel s = {{0}, 0, -1, a != 0 || b != all || b - a > CELLS};
  if (b - a <= CELLS) {
    for (int64_t i = a; i < b; i++) s.idx[s.n++] = i;
    return s;
  }
  for (int64_t i = 0; i < 4; i++) s.idx[s.n++] = a + i;
  s.gap = s.n;
  for (int64_t i = b - 3; i < b; i++) s.idx[s.n++] = i;
  return s;
}

/* x in at most 8 columns: the most significant digits that fit. */
static void cell(kda_sbuf *b, double x) {
  char t[32];
  for (int prec = 4; prec >= 1; prec--) {
    snprintf(t, sizeof t, "%.*g", prec, x);
    if (strlen(t) <= 8) break;
  }
  kda_sbuf_printf(b, " %8s", t);
}

typedef enum { K_F64, K_F32, K_CERT, K_DIG } row_kind;
static const char *const kind_names[] = {"f64", "f32", "cert", "dig"};

/* One line: a 4-column label, a 4-column kind, the selected cells of x[stride * idx]. */
static void row(kda_sbuf *b, const char *label, row_kind kind, const chan_sel *s,
                const double *x, const float *xf, const double *cert, const double *x64) {
  kda_sbuf_printf(b, "%3s %-4s", label, kind_names[kind]);
  for (int c = 0; c < s->n; c++) {
    if (c == s->gap) kda_sbuf_printf(b, " %8s", "...");
    const int64_t i = s->idx[c];
    if (kind == K_F64) cell(b, x[i]);
    else if (kind == K_F32) cell(b, (double)xf[i]);
    else if (kind == K_CERT) cell(b, cert[i]);
    else {
      const int d = kda_study_digits(x64[i], cert[i]);
      if (d == 17) kda_sbuf_printf(b, " %8s", "=");
      else kda_sbuf_printf(b, " %8d", d);
    }
  }
  kda_sbuf_printf(b, "\n");
}

/* The channel indices of the cells, when not every channel is shown. */
static void index_line(kda_sbuf *b, const char *label, const chan_sel *s) {
  if (!s->partial) return;
  kda_sbuf_printf(b, "%3s %-4s", "", label);
  for (int c = 0; c < s->n; c++) {
    if (c == s->gap) kda_sbuf_printf(b, " %8s", "...");
    kda_sbuf_printf(b, " %8lld", (long long)s->idx[c]);
  }
  kda_sbuf_printf(b, "\n");
}

/* A vector quantity: its f64 line, its f32 line, and certified lines when given. */
static void vec(kda_sbuf *b, const char *title, const chan_sel *s, const double *x,
                const float *xf, const double *cert) {
  kda_sbuf_printf(b, "  %s\n", title);
  index_line(b, "ch", s);
  row(b, "", K_F64, s, x, NULL, NULL, NULL);
  if (xf) row(b, "", K_F32, s, NULL, xf, NULL, NULL);
  if (cert) row(b, "", K_CERT, s, NULL, NULL, cert, NULL), row(b, "", K_DIG, s, NULL, NULL, cert, x);
}

static void mat(kda_sbuf *b, const char *title, const chan_sel *rows, const chan_sel *cols,
                int64_t V, const double *S, const float *Sf, const double *cert) {
  kda_sbuf_printf(b, "  %s\n", title);
  index_line(b, "i\\j", cols);
  for (int r = 0; r < rows->n; r++) {
    if (r == rows->gap) kda_sbuf_printf(b, "    ...\n");
    char lab[16];
    const int64_t i = rows->idx[r];
    snprintf(lab, sizeof lab, "%lld", (long long)(i % 1000));
    row(b, lab, K_F64, cols, S + i * V, NULL, NULL, NULL);
    row(b, "", K_F32, cols, NULL, Sf + i * V, NULL, NULL);
    if (cert) {
      row(b, "", K_CERT, cols, NULL, NULL, cert + i * V, NULL);
      row(b, "", K_DIG, cols, NULL, NULL, cert + i * V, S + i * V);
    }
  }
}

/* ---- The walk over one head. */
typedef struct walk {
  const trace_args *a;
  kda_study *st;
  kda_sbuf out;
  int64_t tok_a, tok_b;
  chan_sel krow, vcol;
  int first; /* JSON: no step written yet */
} walk;

static void text_step(walk *w, const kda_trace_token *tk) {
  const kda_problem *p = &w->st->c.p;
  const kda_trace_f64 *s = tk->s64;
  const kda_trace_f32 *f = tk->s32;
  kda_sbuf *b = &w->out;
  const double *co = w->st->certified ? w->st->cert_o + tk->pos * p->V : NULL;
  const double *cS = w->st->certified ? w->st->cert_S + tk->pos * p->K * p->V : NULL;
  const double v64[1] = {s->b};
  const float v32[1] = {f->b};
  const chan_sel one = {{0}, 1, -1, 0};
  kda_sbuf_printf(b, "\n-- token t=%lld (position %lld of sequence %lld)\n", (long long)tk->t,
                  (long long)tk->pos, (long long)w->st->n);
  if (s->decays) {
    char title[96];
    snprintf(title, sizeof title, "gate g_eff (%s, SPEC.md 4.1)", kda_gate_name(p->gate_mode));
    vec(b, title, &w->krow, tk->g_eff, tk->g_eff32, NULL);
    vec(b, "decay factor a = exp(g_eff)", &w->krow, s->a, f->a, NULL);
  }
  char title[96];
  snprintf(title, sizeof title, "beta b (%s, SPEC.md 4.2)", kda_beta_name(p->beta_mode));
  vec(b, title, &one, v64, v32, NULL);
  vec(b, "q^ = scale L2(q)", &w->krow, s->qq, f->qq, NULL);
  vec(b, "k^ = L2(k)", &w->krow, s->kk, f->kk, NULL);
  vec(b, "v (input)", &w->vcol, s->v, NULL, NULL);
  if (s->decays) mat(b, "1 decay    S <- Diag(a) S", &w->krow, &w->vcol, p->V, s->Sd, f->Sd, NULL);
  vec(b, s->erases ? "2 erase    p = S^T k^ (on the decayed state)"
                   : "2 erase    none in this family: p = 0", &w->vcol, s->p, f->p, NULL);
  vec(b, "  correction c = b (v - p)", &w->vcol, s->c, f->c, NULL);
  mat(b, "3 write    S <- S + k^ c^T", &w->krow, &w->vcol, p->V, s->S, f->S, cS);
  vec(b, "4 readout  o = S^T q^ (after the write)", &w->vcol, s->o, f->o, co);
}

static void json_vec(kda_sbuf *b, const char *name, const double *x, const float *xf,
                     const double *cert, int64_t n) {
  kda_sbuf_printf(b, ",\"%s\":{\"f64\":[", name);
  for (int64_t i = 0; i < n; i++) {
    if (i) kda_sbuf_printf(b, ",");
    kda_study_json_num(b, x[i]);
  }
  kda_sbuf_printf(b, "]");
  if (xf) {
    kda_sbuf_printf(b, ",\"f32\":[");
    for (int64_t i = 0; i < n; i++) kda_sbuf_printf(b, i ? "," : ""), kda_study_json_num(b, xf[i]);
    kda_sbuf_printf(b, "]");
  }
  if (cert) {
    kda_sbuf_printf(b, ",\"certified\":[");
    for (int64_t i = 0; i < n; i++) kda_sbuf_printf(b, i ? "," : ""), kda_study_json_num(b, cert[i]);
    kda_sbuf_printf(b, "],\"digits\":[");
    for (int64_t i = 0; i < n; i++) kda_sbuf_printf(b, i ? ",%d" : "%d", kda_study_digits(x[i], cert[i]));
    kda_sbuf_printf(b, "]");
  }
  kda_sbuf_printf(b, "}");
}

static void json_step(walk *w, const kda_trace_token *tk) {
  const kda_problem *p = &w->st->c.p;
  const kda_trace_f64 *s = tk->s64;
  const kda_trace_f32 *f = tk->s32;
  const int64_t K = p->K, V = p->V;
  kda_sbuf *b = &w->out;
  const double *co = w->st->certified ? w->st->cert_o + tk->pos * V : NULL;
  const double *cS = w->st->certified ? w->st->cert_S + tk->pos * K * V : NULL;
  const double b64 = s->b;
  const float b32 = f->b;
  kda_sbuf_printf(b, "%s{\"t\":%lld,\"pos\":%lld", w->first ? "" : ",", (long long)tk->t,
                  (long long)tk->pos);
  w->first = 0;
  json_vec(b, "g_eff", tk->g_eff, tk->g_eff32, NULL, K);
  json_vec(b, "a", s->a, f->a, NULL, K);
  json_vec(b, "beta", &b64, &b32, NULL, 1);
  json_vec(b, "q_hat", s->qq, f->qq, NULL, K);
  json_vec(b, "k_hat", s->kk, f->kk, NULL, K);
  json_vec(b, "v", s->v, NULL, NULL, V);
  json_vec(b, "decayed_state", s->Sd, f->Sd, NULL, K * V);
  json_vec(b, "p", s->p, f->p, NULL, V);
  json_vec(b, "correction", s->c, f->c, NULL, V);
  json_vec(b, "written_state", s->S, f->S, cS, K * V);
  json_vec(b, "o", s->o, f->o, co, V);
  kda_sbuf_printf(b, "}");
}

static int on_token(void *ctx, const kda_trace_token *tk) {
  walk *w = ctx;
  const kda_problem *p = &w->st->c.p;
  if (tk->initial) {
    if (w->a->json) {
      kda_sbuf_printf(&w->out, ",\"states_are\":\"K x V, row-major, S[i*V+j]\"");
      json_vec(&w->out, "initial_state", tk->s64->S, tk->s32->S, NULL, p->K * p->V);
      kda_sbuf_printf(&w->out, ",\"steps\":[");
    } else if (w->tok_a == 0) {
      mat(&w->out, p->has_initial_state ? "initial state h0" : "initial state (zero)", &w->krow,
          &w->vcol, p->V, tk->s64->S, tk->s32->S, NULL);
    }
    return 0;
  }
  if (tk->pos < w->tok_a || tk->pos >= w->tok_b) return 0;
  if (w->a->json) json_step(w, tk);
  else text_step(w, tk);
  return 0;
}

static void header_text(walk *w) {
  const kda_study *s = w->st;
  const kda_problem *p = &s->c.p;
  kda_sbuf *b = &w->out;
  char span[64];
  if (s->eos > s->bos)
    snprintf(span, sizeof span, "tokens %lld..%lld", (long long)s->bos, (long long)s->eos - 1);
  else
    snprintf(span, sizeof span, "empty: no tokens");
  kda_sbuf_printf(b, "kda trace %s: sequence %lld (%s), value head %lld (q/k head %lld)\n",
                  s->c.id ? s->c.id : w->a->path, (long long)s->n, span, (long long)s->hv,
                  (long long)s->h);
  kda_sbuf_printf(b, "problem: family=%s gate=%s beta=%s l2=%s scale=%.6g\n",
                  kda_family_name(p->family), kda_gate_name(p->gate_mode),
                  kda_beta_name(p->beta_mode), kda_l2_name(p->l2_mode), p->scale);
  kda_sbuf_printf(b, "shapes:  N=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld\n", (long long)p->N,
                  (long long)p->T, (long long)p->H, (long long)p->HV, (long long)p->K,
                  (long long)p->V);
  kda_sbuf_printf(b, "rows: f64 = float64 reference, f32 = float32 twin");
  if (s->certified) kda_sbuf_printf(b, ", cert = certified (%s),\n      dig = decimal digits "
                                       "float64 got right ('=' all)\n", s->method);
  else kda_sbuf_printf(b, "\n%s\n", s->note);
  kda_sbuf_printf(b, "states: K x V, row i = key channel, column j = value channel\n");
}

static void header_json(walk *w) {
  const kda_study *s = w->st;
  const kda_problem *p = &s->c.p;
  kda_sbuf *b = &w->out;
  kda_sbuf_printf(b, "{\"schema\":\"kda-trace/1\",\"case\":");
  kda_study_json_str(b, s->c.id ? s->c.id : "");
  kda_sbuf_printf(b, ",\"problem\":{\"family\":\"%s\",\"gate\":\"%s\",\"beta\":\"%s\","
                     "\"l2\":\"%s\",\"N\":%lld,\"T\":%lld,\"H\":%lld,\"HV\":%lld,\"K\":%lld,"
                     "\"V\":%lld},\"sequence\":%lld,\"head\":%lld,\"qk_head\":%lld,"
                     "\"tokens\":[%lld,%lld],\"certified\":",
                  kda_family_name(p->family), kda_gate_name(p->gate_mode),
                  kda_beta_name(p->beta_mode), kda_l2_name(p->l2_mode), (long long)p->N,
                  (long long)p->T, (long long)p->H, (long long)p->HV, (long long)p->K,
                  (long long)p->V, (long long)s->n, (long long)s->hv, (long long)s->h,
                  (long long)s->bos, (long long)s->eos);
  if (s->certified) kda_sbuf_printf(b, "\"%s\"", s->method);
  else kda_sbuf_printf(b, "null");
}

static int print_l0(const char *path) {
  char *text = NULL, err[KDA_ERRLEN];
  if (kda_golden_trace_file(path, &text, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err);
  fputs(text, stdout);
  free(text);
  return KDA_EXIT_OK;
}

static int print_backward(const char *path) {
  char *text = NULL, err[KDA_ERRLEN];
  if (kda_golden_grad_trace_file(path, &text, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err);
  fputs(text, stdout);
  free(text);
  return KDA_EXIT_OK;
}

static int trace(const trace_args *a, kda_study *st) {
  const kda_problem *p = &st->c.p;
  walk w;
  memset(&w, 0, sizeof w);
  w.a = a, w.st = st, w.first = 1;
  int64_t ca = 0, cb = p->K > p->V ? p->K : p->V;
  if (a->tokens && kda_study_parse_range(a->tokens, st->eos - st->bos, &w.tok_a, &w.tok_b))
    return kda_tool_usage(SUB, "bad --tokens '%s' (A:B, positions in the sequence)", a->tokens);
  if (!a->tokens) w.tok_b = st->eos - st->bos;
  if (a->channels && kda_study_parse_range(a->channels, cb, &ca, &cb))
    return kda_tool_usage(SUB, "bad --channels '%s' (A:B)", a->channels);
  w.krow = select_channels(ca < p->K ? ca : p->K, cb < p->K ? cb : p->K, p->K);
  w.vcol = select_channels(ca < p->V ? ca : p->V, cb < p->V ? cb : p->V, p->V);
  if (a->certify && kda_study_certify(SUB, st, CERT_MAX_VALUES)) return KDA_EXIT_USAGE;
  if (!a->certify) snprintf(st->note, sizeof st->note, "not certified: --no-certify");
  if (a->json) header_json(&w);
  else header_text(&w);
  char err[KDA_ERRLEN];
  int rc = kda_trace_head(p, &st->ts, st->n, st->hv, on_token, &w, err, sizeof err);
  if (a->json) kda_sbuf_printf(&w.out, "]}\n");
  if (rc == KDA_OK && w.out.oom) rc = KDA_ENOMEM, snprintf(err, sizeof err, "out of memory");
  if (rc == KDA_OK) fputs(w.out.s, stdout);
  free(w.out.s);
  return rc == KDA_OK ? KDA_EXIT_OK : kda_tool_fail(SUB, "%s: %s", a->path, err);
}

int kda_cmd_trace(int argc, char **argv) {
  trace_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc < 0 ? KDA_EXIT_OK : rc;
  if (a.l0) return print_l0(a.path);
  if (a.backward) return print_backward(a.path);
  kda_study st;
  rc = kda_study_open(SUB, a.path, a.seq, a.head, &st);
  if (rc) return rc;
  rc = trace(&a, &st);
  kda_study_close(&st);
  return rc;
}

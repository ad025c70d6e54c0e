/* kda_cmd_conform.c: `kda conform`, score backends, plugins or candidate files (SPEC.md §7).
 * SPDX-License-Identifier: MIT
 */
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kda_case.h"
#include "kda_conform.h"
#include "kda_tool.h"

#define SUB "conform"
#define MAX_ITEMS 64

static const char help_text[] =
    "Usage: kda conform [OPTION]... [CASE.npz|DIR]...\n"
    "\n"
    "Scores KDA implementations on case files (default: golden/L1, else golden/example)\n"
    "against the exact result, in units of each backend's precision class (SPEC.md section 7).\n"
    "Every backend call runs in a child process with a time limit.\n"
    "\n"
    "What to score (default: every built-in backend):\n"
    "  -b, --backend NAME        a built-in backend (ref-f64, ref-f32); repeatable\n"
    "  -p, --plugin LIB.so       a backend plugin (exports kda_backend_entry); repeatable\n"
    "      --params STRING       parameters passed to the plugins' open\n"
    "  -c, --candidate PATH      score result files: PATH is a result file (one case) or a\n"
    "                            directory holding CASE_ID.npz for each case\n"
    "      --class NAME          precision class to score in: fp64 fp32 tf32 bf16 fp16\n"
    "                            (default: the backend's own; fp32 for candidates)\n"
    "      --export-prompts DIR  write input-only case files (no answers) into DIR and exit\n"
    "Checks:\n"
    "  -t, --timeout SECONDS     time limit per backend call (default 60)\n"
    "      --repeat              run every case twice and flag bitwise differences\n"
    "      --no-prefix           skip the prefix-resume and causality checks\n"
    "      --no-isolate          call backends in-process (debugging; a crash ends the run)\n"
    "      --waivers FILE        waivers (JSON, SPEC.md section 7.6)\n"
    "      --baseline FILE       recorded baseline; QualityWarning above FACTOR x baseline\n"
    "      --baseline-factor X   (default 2)\n"
    "      --record-baseline FILE  write the worst errors of this run as a baseline\n"
    "Reports:\n"
    "  -o, --out DIR             write results.jsonl, summary.json and junit.xml into DIR\n"
    "      --jsonl FILE, --summary FILE, --junit FILE   each report separately\n"
    "      --max-lines N         failure lines shown per case (default 5)\n"
    "      --html DIR            self-contained HTML report DIR/index.html: verdicts\n"
    "                            and, per case of >= 256 tokens and backend, the o\n"
    "                            error per 64-token window against the position\n"
    "                            (log-log, cap and allowance drawn)\n"
    "  -q, --quiet               print only non-passing cases and the final line\n"
    "      --bench               measure scoring throughput (MB/s of truth + candidate data)\n"
    "  -h, --help                print this help and exit\n"
    "\n"
    "The last line is 'N passed, N failed' (', N skipped' when some were skipped).\n"
    "Exit status:\n"
    "  0  nothing failed\n"
    "  1  a case got Fail, Crash or Timeout\n"
    "  2  usage error, I/O error or bad input (one line on standard error)\n";

typedef struct conform_args {
  const char *backends[MAX_ITEMS];
  int n_backends;
  const char *plugins[MAX_ITEMS];
  int n_plugins;
  const char *params, *candidate, *export_dir, *waivers, *baseline, *record_baseline;
  const char *out_dir, *jsonl, *summary, *junit;
  const char *html; /* --html DIR */
  int32_t cls;
  int quiet, bench;
  int64_t max_lines;
  kda_conform_opts opts;
  char **paths;
  int n_paths;
} conform_args;

typedef struct path_list {
  char **v;
  int n, cap;
} path_list;

static int add_path(path_list *l, const char *p) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    char **v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    l->v = v, l->cap = cap;
  }
  l->v[l->n] = strdup(p);
  return l->v[l->n++] ? 0 : -1;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Case files under path: the file itself, or every *.npz below a directory, sorted. */
static int collect(const char *path, path_list *l) {
  struct stat st;
  if (stat(path, &st) != 0) return kda_tool_fail(SUB, "%s: no such file or directory", path);
  if (!S_ISDIR(st.st_mode)) return add_path(l, path) ? kda_tool_fail(SUB, "out of memory") : 0;
  DIR *d = opendir(path);
  if (!d) return kda_tool_fail(SUB, "%s: cannot open directory", path);
  path_list here = {0};
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", path, e->d_name);
    size_t n = strlen(e->d_name);
    struct stat s2;
    if (stat(full, &s2) == 0 && (S_ISDIR(s2.st_mode) || (n > 4 && !strcmp(e->d_name + n - 4, ".npz"))))
      rc = add_path(&here, full);
  }
  closedir(d);
  if (here.n) qsort(here.v, (size_t)here.n, sizeof *here.v, cmp_str);
  for (int i = 0; i < here.n; i++) {
    if (rc == 0) rc = collect(here.v[i], l);
    free(here.v[i]);
  }
  free(here.v);
  return rc;
}

static int parse_args(int argc, char **argv, conform_args *a) {
  enum { O_PARAMS = 256, O_CLASS, O_EXPORT, O_REPEAT, O_NOPREFIX, O_NOISOLATE, O_WAIVERS,
         O_BASELINE, O_BFACTOR, O_RECORD, O_JSONL, O_SUMMARY, O_JUNIT, O_MAXLINES, O_BENCH };
  enum { O_HTML = 512 };
  static const struct option longopts[] = {
      {"backend", required_argument, NULL, 'b'}, {"plugin", required_argument, NULL, 'p'},
      {"params", required_argument, NULL, O_PARAMS}, {"candidate", required_argument, NULL, 'c'},
      {"class", required_argument, NULL, O_CLASS}, {"export-prompts", required_argument, NULL, O_EXPORT},
      {"timeout", required_argument, NULL, 't'}, {"repeat", no_argument, NULL, O_REPEAT},
      {"no-prefix", no_argument, NULL, O_NOPREFIX}, {"no-isolate", no_argument, NULL, O_NOISOLATE},
      {"waivers", required_argument, NULL, O_WAIVERS}, {"baseline", required_argument, NULL, O_BASELINE},
      {"baseline-factor", required_argument, NULL, O_BFACTOR},
      {"record-baseline", required_argument, NULL, O_RECORD}, {"out", required_argument, NULL, 'o'},
      {"jsonl", required_argument, NULL, O_JSONL}, {"summary", required_argument, NULL, O_SUMMARY},
      {"junit", required_argument, NULL, O_JUNIT}, {"max-lines", required_argument, NULL, O_MAXLINES},
      {"quiet", no_argument, NULL, 'q'}, {"bench", no_argument, NULL, O_BENCH},
      {"html", required_argument, NULL, O_HTML},
      {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  memset(a, 0, sizeof *a);
  kda_conform_opts_init(&a->opts);
  a->opts.prefix = 1;
  a->cls = -1;
  a->max_lines = 5;
  int c;
  char *end;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":b:p:c:t:o:qh", longopts, NULL)) != -1) {
    switch (c) {
      case 'b':
        if (a->n_backends == MAX_ITEMS) return kda_tool_usage(SUB, "too many --backend");
        if (!kda_backend_find(optarg)) return kda_tool_usage(SUB, "unknown backend '%s'", optarg);
        a->backends[a->n_backends++] = optarg;
        break;
      case 'p':
        if (a->n_plugins == MAX_ITEMS) return kda_tool_usage(SUB, "too many --plugin");
        a->plugins[a->n_plugins++] = optarg;
        break;
      case O_PARAMS: a->params = optarg; break;
      case 'c': a->candidate = optarg; break;
      case O_CLASS:
        if (kda_class_parse(optarg, &a->cls) != KDA_OK)
          return kda_tool_usage(SUB, "unknown class '%s' (fp64 fp32 tf32 bf16 fp16)", optarg);
        break;
      case O_EXPORT: a->export_dir = optarg; break;
      case 't':
        a->opts.call.timeout_s = strtod(optarg, &end);
        if (*end || !(a->opts.call.timeout_s > 0)) return kda_tool_usage(SUB, "bad --timeout '%s'", optarg);
        break;
      case O_REPEAT: a->opts.repeat = 1; break;
      case O_NOPREFIX: a->opts.prefix = 0; break;
      case O_NOISOLATE: a->opts.call.isolate = 0; break;
      case O_WAIVERS: a->waivers = optarg; break;
      case O_BASELINE: a->baseline = optarg; break;
      case O_BFACTOR:
        a->opts.baseline_factor = strtod(optarg, &end);
        if (*end || !(a->opts.baseline_factor >= 1)) return kda_tool_usage(SUB, "bad --baseline-factor");
        break;
      case O_RECORD: a->record_baseline = optarg; break;
      case 'o': a->out_dir = optarg; break;
      case O_JSONL: a->jsonl = optarg; break;
      case O_SUMMARY: a->summary = optarg; break;
      case O_JUNIT: a->junit = optarg; break;
      case O_MAXLINES:
        if (kda_tool_parse_count(optarg, &a->max_lines)) return kda_tool_usage(SUB, "bad --max-lines");
        break;
      case 'q': a->quiet = 1; break;
      case O_BENCH: a->bench = 1; break;
      case O_HTML: a->html = optarg; break;
      case 'h': fputs(help_text, stdout); return -1;
      default: return kda_tool_bad_option(SUB, c, argv);
    }
  }
  a->opts.cls = a->cls;
  a->paths = argv + optind;
  a->n_paths = argc - optind;
  return 0;
}

/* One scoring target: a built-in or plugin backend, or the candidate files. */
typedef struct target {
  const kda_backend *b;
  kda_plugin *plugin;
} target;

typedef struct run_state {
  kda_case_report *reports;
  int64_t n, cap;
  kda_tally tally;
  FILE *jsonl;
  double score_s, truth_s;
  uint64_t bytes;
} run_state;

static kda_case_report *next_report(run_state *s) {
  if (s->n == s->cap) {
    int64_t cap = s->cap ? 2 * s->cap : 64;
    kda_case_report *r = realloc(s->reports, (size_t)cap * sizeof *r);
    if (!r) return NULL;
    s->reports = r, s->cap = cap;
  }
  return &s->reports[s->n];
}

static void emit(run_state *s, const conform_args *a, kda_case_report *r) {
  kda_tally_add(&s->tally, r);
  if (!a->quiet || r->verdict != KDA_VERDICT_PASS) kda_report_human(stdout, r, (int32_t)a->max_lines);
  if (s->jsonl) kda_report_jsonl(s->jsonl, r);
  s->n++;
}

static const char *base_id(const char *path, char *buf, size_t cap) {
  const char *b = strrchr(path, '/');
  snprintf(buf, cap, "%s", b ? b + 1 : path);
  size_t n = strlen(buf);
  if (n > 4 && strcmp(buf + n - 4, ".npz") == 0) buf[n - 4] = 0;
  return buf;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int score_case(const conform_args *a, const char *path, target *tg, int nt, run_state *s) {
  char err[KDA_ERRLEN], idbuf[256];
  kda_case c;
  int st = kda_case_load(path, &c, err, sizeof err);
  if (st != KDA_OK) return kda_tool_fail(SUB, "%s", err);
  if (!c.id) c.id = strdup(base_id(path, idbuf, sizeof idbuf));
  kda_truth t;
  double t0 = now_s();
  st = kda_truth_compute(&c, path, &t, err, sizeof err);
  s->truth_s += now_s() - t0;
  if (st != KDA_OK) return kda_case_free(&c), kda_tool_fail(SUB, "%s", err);
  for (int i = 0; i < nt && st == KDA_OK; i++) {
    kda_case_report *r = next_report(s);
    if (!r) st = KDA_ENOMEM, snprintf(err, sizeof err, "out of memory");
    else st = kda_conform_case(tg[i].b, tg[i].plugin ? (a->params ? a->params : "") : "", &c, &t,
                               &a->opts, r, err, sizeof err);
    if (st == KDA_OK) emit(s, a, r);
  }
  if (st == KDA_OK && a->candidate) {
    char rp[4096];
    struct stat sb;
    if (stat(a->candidate, &sb) == 0 && S_ISDIR(sb.st_mode))
      snprintf(rp, sizeof rp, "%s/%s.npz", a->candidate, c.id);
    else
      snprintf(rp, sizeof rp, "%s", a->candidate);
    kda_case_report *r = next_report(s);
    t0 = now_s();
    if (!r) st = KDA_ENOMEM, snprintf(err, sizeof err, "out of memory");
    else st = kda_conform_candidate(rp, &c, &t, a->cls >= 0 ? a->cls : KDA_CLASS_FP32, &a->opts,
                                    r, err, sizeof err);
    s->score_s += now_s() - t0;
    if (st == KDA_OK) s->bytes += r->bytes_scored;
    if (st == KDA_OK) emit(s, a, r);
  }
  kda_truth_free(&t);
  kda_case_free(&c);
  return st == KDA_OK ? 0 : kda_tool_fail(SUB, "%s", err);
}

static int export_prompts(const char *dir, path_list *cases) {
  mkdir(dir, 0777);
  for (int i = 0; i < cases->n; i++) {
    char err[KDA_ERRLEN], out[4096], idbuf[256];
    kda_case c;
    if (kda_case_load(cases->v[i], &c, err, sizeof err) != KDA_OK) return kda_tool_fail(SUB, "%s", err);
    const char *id = c.id ? c.id : base_id(cases->v[i], idbuf, sizeof idbuf);
    snprintf(out, sizeof out, "%s/%s.npz", dir, id);
    int st = kda_case_save(out, &c, NULL, err, sizeof err);
    kda_case_free(&c);
    if (st != KDA_OK) return kda_tool_fail(SUB, "%s", err);
    printf("%s\n", out);
  }
  return 0;
}

static FILE *open_out(const char *dir, const char *name, const char *explicit_path, char *buf) {
  const char *p = explicit_path;
  if (!p && dir) snprintf(buf, 4096, "%s/%s", dir, name), p = buf;
  return p ? fopen(p, "w") : NULL;
}

static int write_reports(const conform_args *a, run_state *s) {
  char buf[4096];
  FILE *f = open_out(a->out_dir, "summary.json", a->summary, buf);
  if ((a->out_dir || a->summary) && !f) return kda_tool_fail(SUB, "cannot write the summary");
  if (f) kda_report_summary_json(f, &s->tally, s->reports, s->n), fclose(f);
  f = open_out(a->out_dir, "junit.xml", a->junit, buf);
  if ((a->out_dir || a->junit) && !f) return kda_tool_fail(SUB, "cannot write the JUnit report");
  if (f) kda_report_junit(f, s->reports, s->n), fclose(f);
  if (a->html && kda_report_html_write(a->html, s->reports, s->n, buf, sizeof buf) != KDA_OK)
    return kda_tool_fail(SUB, "%s", buf);
  if (a->record_baseline) {
    f = fopen(a->record_baseline, "w");
    if (!f) return kda_tool_fail(SUB, "%s: cannot write", a->record_baseline);
    kda_report_baseline(f, s->reports, s->n);
    fclose(f);
  }
  return 0;
}

static int default_paths(path_list *l) {
  struct stat st;
  if (stat("golden/L1", &st) == 0) return collect("golden/L1", l);
  printf("note: golden/L1 not found; scoring the reduced set golden/example\n");
  return collect("golden/example", l);
}

static int load_targets(conform_args *a, target *tg, int *nt) {
  char err[KDA_ERRLEN];
  *nt = 0;
  if (!a->n_backends && !a->n_plugins && !a->candidate)
    for (int32_t i = 0; i < kda_backend_builtin_count(); i++) tg[(*nt)++].b = kda_backend_builtin(i);
  for (int i = 0; i < a->n_backends; i++) tg[(*nt)++].b = kda_backend_find(a->backends[i]);
  for (int i = 0; i < a->n_plugins; i++) {
    if (kda_plugin_load(a->plugins[i], &tg[*nt].plugin, &tg[*nt].b, err, sizeof err) != KDA_OK)
      return kda_tool_fail(SUB, "%s", err);
    (*nt)++;
  }
  return 0;
}

int kda_cmd_conform(int argc, char **argv) {
  conform_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc < 0 ? KDA_EXIT_OK : rc;
  path_list cases = {0};
  for (int i = 0; i < a.n_paths && rc == 0; i++) rc = collect(a.paths[i], &cases);
  if (rc == 0 && a.n_paths == 0) rc = default_paths(&cases);
  if (rc == 0 && cases.n == 0) rc = kda_tool_fail(SUB, "no case files found");
  if (rc == 0 && a.export_dir) {
    rc = export_prompts(a.export_dir, &cases);
    goto done;
  }
  char err[KDA_ERRLEN];
  kda_waivers *w = NULL;
  kda_baseline *bl = NULL;
  if (rc == 0 && a.waivers && kda_waivers_load(a.waivers, &w, err, sizeof err) != KDA_OK)
    rc = kda_tool_fail(SUB, "%s", err);
  if (rc == 0 && a.baseline && kda_baseline_load(a.baseline, &bl, err, sizeof err) != KDA_OK)
    rc = kda_tool_fail(SUB, "%s", err);
  a.opts.waivers = w, a.opts.baseline = bl;
  target tg[2 * MAX_ITEMS + 4];
  memset(tg, 0, sizeof tg);
  int nt = 0;
  if (rc == 0) rc = load_targets(&a, tg, &nt);
  run_state s;
  memset(&s, 0, sizeof s);
  char buf[4096];
  if (rc == 0 && a.out_dir) mkdir(a.out_dir, 0777);
  if (rc == 0 && (a.jsonl || a.out_dir)) {
    s.jsonl = open_out(a.out_dir, "results.jsonl", a.jsonl, buf);
    if (!s.jsonl) rc = kda_tool_fail(SUB, "cannot write the JSON Lines report");
  }
  double t0 = now_s();
  for (int i = 0; i < cases.n && rc == 0; i++) rc = score_case(&a, cases.v[i], tg, nt, &s);
  double wall = now_s() - t0;
  if (s.jsonl) fclose(s.jsonl);
  if (rc == 0) rc = write_reports(&a, &s);
  if (rc == 0 && a.bench)
    printf("bench: candidate scoring %llu bytes (truth + candidate, as float64) in %.3f s: "
           "%.1f MB/s; truth and magnitudes %.3f s; wall %.3f s for %lld reports\n",
           (unsigned long long)s.bytes, s.score_s, s.score_s > 0 ? s.bytes / s.score_s / 1e6 : 0.0,
           s.truth_s, wall, (long long)s.n);
  if (rc == 0) {
    kda_report_final(stdout, &s.tally);
    rc = s.tally.failed ? KDA_EXIT_CHECK : KDA_EXIT_OK;
  }
  for (int64_t i = 0; i < s.n; i++) kda_case_report_free(&s.reports[i]);
  free(s.reports);
  for (int i = 0; i < nt; i++) kda_plugin_unload(tg[i].plugin);
  kda_waivers_free(w);
  kda_baseline_free(bl);
done:
  for (int i = 0; i < cases.n; i++) free(cases.v[i]);
  free(cases.v);
  return rc;
}

/* kda_cmd_conform.c: `kda conform`, score backends, plugins or candidate files (SPEC.md §7).
 * SPDX-License-Identifier: MIT
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kda_case.h"
#include "kda_case_internal.h" /* kda_case_gen_cost_set */
#include "kda_conform.h"
#include "kda_conform_list.h"
#include "kda_conform_shard.h"
#include "kda_sha256.h"
#include "kda_files.h"
#include "kda_npz.h"
#include "kda_serving.h"
#include "kda_tool.h"

#define SUB "conform"
#define MAX_ITEMS 64
#define MAX_FILTERS 4096 /* -k patterns: a front end may name every prompt it ran */

static const char help_text[] =
    "Usage: kda conform [OPTION]... [CASE.npz|DIR]...\n"
    "\n"
    "Scores KDA implementations on case files (default: GOLDEN/L1, else GOLDEN/example, where\n"
    "GOLDEN is $KDA_GOLDEN, else ./golden, else golden/ beside the folder holding kda, else\n"
    "the installed share/kda/golden)\n"
    "against the exact result, in units of each backend's precision class (SPEC.md section 7).\n"
    "Every backend runs in its own worker process (loaded there, never in the runner), with a\n"
    "time limit on every wait and a memory limit; a crash, hang or stray print is that backend's\n"
    "verdict, and the worker is restarted for the next call (SPEC.md section 7.8).\n"
    "\n"
    "What to score (default: every built-in backend but mpfr):\n"
    "  -b, --backend SPEC        a backend, SPEC = NAME[:PARAMS] or PATH[:PARAMS]: a built-in\n"
    "                            (ref-f64 ref-f32 simd simd-avx512 simd-avx2 simd-scalar mpfr),\n"
    "                            a plugin PATH (holds a '/' or ends in .so), or a plugin NAME\n"
    "                            found as libkda_NAME.so or NAME.so on KDA_PLUGIN_PATH\n"
    "                            (':'-separated directories); PARAMS go to that backend's open,\n"
    "                            e.g. -b simd:isa=avx2,threads=1; repeatable\n"
    "  -p, --plugin SPEC         the same, but SPEC must name a plugin (e.g. ./libx.so:device=0)\n"
    "      --params STRING       deprecated: PARAMS for every backend given without its own\n"
    "  -k GLOB                   score only the cases whose id matches GLOB (fnmatch);\n"
    "                            flag:GLOB matches the manifest's golden.flags; !GLOB excludes;\n"
    "                            repeatable (any positive pattern selects, any '!' one drops)\n"
    "      --list-cases          list the selected cases (id, N, T, H, HV, K, V, family, flags)\n"
    "                            and exit\n"
    "      --list-backends       list the backends (-b/-p, default: every built-in): name,\n"
    "                            class, dtypes, source, ISA or device picked, and whether it runs\n"
    "                            on this machine (and why not); exit 0.  A plugin is loaded only\n"
    "                            in a worker, which tries a tiny problem (a plugin that fails to\n"
    "                            load is listed with the reason)\n"
    "      --json                with --list-backends: one JSON document (kda-backends/1);\n"
    "                            with --list-cases: kda-cases/1, each case with its flags,\n"
    "                            comment, the defects it is designed to catch and the ids of\n"
    "                            its serving prompts (--serving), read from the manifests\n"
    "  -c, --candidate PATH      score result files: PATH is a result file (one case) or a\n"
    "                            directory holding CASE_ID.npz for each case; members o,\n"
    "                            ht, hc of exactly the problem's shapes as <f4 or <f8; a\n"
    "                            manifest with \"not_supported\": REASON is NotSupported\n"
    "      --class NAME          precision class to score in: fp64 fp32 tf32 bf16 fp16\n"
    "                            (default: the backend's own for its parameters, its\n"
    "                            variant slot's when it has one; fp32 for candidates)\n"
    "      --export-prompts DIR  write input-only case files (no answers) into DIR and exit;\n"
    "                            -k selects cases and prompts (a pattern matching a prompt's\n"
    "                            id or its case's id selects the prompt);\n"
    "                            also each case's serving prompts ID.resume-P, ID.decode,\n"
    "                            ID.spec-P, ID.causal-qv, ID.causal-gkb (--serving off: none),\n"
    "                            which --candidate DIR scores when their results are there\n"
    "Checks:\n"
    "  -t, --timeout SECONDS     time limit per backend call, load, open and close (default 60)\n"
    "      --memory-limit BYTES|auto|none  address-space limit of each worker (suffix k M G;\n"
    "                            default auto: a multiple of each call's buffers plus 4 GiB)\n"
    "      --repeat              run every case twice and flag bitwise differences\n"
    "      --serving MODE        serving-path checks (SPEC.md section 7.7): default (resume at\n"
    "                            floor(5T/8)+1, 65 and each sequence's last token, a\n"
    "                            4-draft speculative verify, causality with q,v and with\n"
    "                            g,k,beta perturbed), full (also resume at 1, 63 and T-1),\n"
    "                            off; with --export-prompts: which prompts are written\n"
    "      --no-prefix           the same as --serving off\n"
    "      --no-isolate          call backends in-process (debugging; a crash ends the run,\n"
    "                            prints are not captured, no guard pages or memory limit)\n"
    "      --waivers FILE        waivers (JSON, SPEC.md section 7.6); an unknown key, a missing\n"
    "                            reason or a waiver selecting nothing is an error (exit 2); a\n"
    "                            waiver that waived nothing is reported after the run\n"
    "      --baseline FILE       recorded baseline; QualityWarning above FACTOR x baseline; it\n"
    "                            must name the backend and class scored (exit 2 otherwise)\n"
    "      --baseline-factor X   (default 2)\n"
    "      --fail-on-regression  a regression above the baseline factor is a Fail\n"
    "      --strict              QualityWarning, Waived and unused waivers fail the run (CI);\n"
    "                            error growth beyond ref-f32's on the same case is a Fail\n"
    "      --record-baseline FILE  write the worst errors of this run as a baseline\n"
    "                            (kda-baseline/2, a map by backend, when several were scored)\n"
    "Reports:\n"
    "  -o, --out DIR             write results.jsonl, summary.json and junit.xml into DIR\n"
    "                            (every report is written atomically; an existing target\n"
    "                            must be a regular file and not an input)\n"
    "      --jsonl FILE, --summary FILE, --junit FILE   each report separately\n"
    "      --max-lines N         failure lines shown per case (default 5); a failure then\n"
    "                            names its worst element, the allowance there and why,\n"
    "                            what a class unit is there, ref-f32's error near it and\n"
    "                            what the case is designed to catch (0: the verdict line only)\n"
    "      --stream              score every case in bounded memory (SPEC.md section 7.10):\n"
    "                            inputs read or generated chunk by chunk, each backend\n"
    "                            called on chunks of --chunk tokens chained through h0 ->\n"
    "                            ht (each sequence separately); no serving-path checks;\n"
    "                            default: only cases with T*HV*max(K,V) > 2^24\n"
    "      --no-stream           never stream (whole arrays in memory)\n"
    "      --chunk N             tokens per chained call when streaming, a multiple of 64\n"
    "                            (default 16384)\n"
    "      --html DIR            self-contained HTML report DIR/index.html: verdict\n"
    "                            counts, a case x backend matrix (non-passing first)\n"
    "                            and per case one plot of every backend's worst o error\n"
    "                            per 64-token window (per token below 256 tokens)\n"
    "                            against the position, with cap x allowance\n"
    "  -q, --quiet               print only non-passing cases and the final line\n"
    "      --bench               measure scoring throughput (MB/s of truth + candidate data)\n"
    "      --max-generated N     generate at most N input elements to check a case file whose\n"
    "                            inputs are generated (default 2^30; a larger one is refused)\n"
    "  -h, --help                print this help and exit\n"
    "Scale-out (docs/scale.md):\n"
    "      --shard I/N           score only shard I of N (0 <= I < N) of the (case, backend)\n"
    "                            pairs, a partition balanced by case size; needs --out, where\n"
    "                            shard.json (kda-shard/1) goes beside the reports\n"
    "      --merge OUTDIR SHARD_OUT...  (first option, nothing else) check the shards' outputs\n"
    "                            and write the results.jsonl, summary.json and junit.xml of one\n"
    "                            run into OUTDIR; exit status as that run's (timings differ)\n"

    "\n"
    "Output: a header (the case files and golden set, the backends, where the reports go,\n"
    "the legend of the result lines and what a class unit is), one line per case and\n"
    "backend, notes, and the last line 'N passed, N failed, N skipped, N warnings' (a WARN,\n"
    "QualityWarning, counts as passed).\n"
    "Exit status:\n"
    "  0  nothing failed\n"
    "  1  a case got Fail, Crash or Timeout (with --strict also QualityWarning or Waived,\n"
    "     or a waiver waived nothing)\n"
    "  2  usage error, I/O error or bad input (one line on standard error)\n"
    "  5  nothing ran: no case files, or every case NotSupported by every backend\n";

typedef struct conform_args {
  const char *backends[MAX_ITEMS];
  int n_backends;
  const char *plugins[MAX_ITEMS];
  int n_plugins;
  const char *params, *candidate, *export_dir, *waivers, *baseline, *record_baseline;
  const char *filters[MAX_FILTERS]; /* -k patterns */
  int n_filters, list_cases, list_backends;
  const char *out_dir, *jsonl, *summary, *junit;
  const char *html; /* --html DIR */
  int32_t cls;
  int quiet, bench, strict;
  int json; /* --json: --list-backends as one JSON document */
  int stream;    /* --stream 1, --no-stream -1, 0: long cases only (SPEC.md §7.10) */
  int64_t chunk; /* --chunk: tokens per chained call of a streamed case (0: default) */
  int64_t max_lines;
  kda_conform_opts opts;
  kda_conform_shard *shard; /* --shard I/N, or NULL */
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

static void free_paths(path_list *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  *l = (path_list){0};
}

/* One case id per run: two files with one id would give reports, waivers and result or
 * prompt files (DIR/ID.npz) that cannot be told apart.  ids and from (the file of each) grow
 * together.  0, or the exit status after a message. */
static int unique_id(path_list *ids, path_list *from, const char *id, const char *path) {
  for (int i = 0; i < ids->n; i++)
    if (strcmp(ids->v[i], id) == 0)
      return kda_tool_fail(SUB, "%s: case id '%s' is also the id of %s (two cases with one id)",
                           path, id, from->v[i]);
  return add_path(ids, id) || add_path(from, path) ? kda_tool_fail(SUB, "out of memory") : 0;
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

/* A -b or -p SPEC resolves (SPEC.md §7.8); -p must name a plugin.  0, or the exit status. */
static int check_spec(const char *spec, int plugin_only) {
  kda_backend_ref r;
  char err[KDA_ERRLEN];
  if (kda_backend_resolve(spec, &r, err, sizeof err) != KDA_OK) return kda_tool_usage(SUB, "%s", err);
  if (plugin_only && r.builtin)
    return kda_tool_usage(SUB, "-p '%s' names the built-in backend '%s' (use -b)", spec,
                          r.builtin->name);
  return 0;
}

/* --memory-limit: "auto" (0), "none" (-1), or bytes with an optional binary suffix. */
static int parse_memory_limit(const char *s, int64_t *out) {
  if (strcmp(s, "auto") == 0) return *out = 0, 0;
  if (strcmp(s, "none") == 0) return *out = -1, 0;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  int shift = *end == 'k' || *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  if (shift) end++;
  if (errno || end == s || *end || s[0] == '-' || x == 0 || x > (1ULL << (62 - shift))) return -1;
  *out = (int64_t)(x << shift);
  return 0;
}

static int parse_args(int argc, char **argv, conform_args *a) {
  enum { O_PARAMS = 256, O_CLASS, O_EXPORT, O_REPEAT, O_NOPREFIX, O_NOISOLATE, O_WAIVERS,
         O_BASELINE, O_BFACTOR, O_RECORD, O_JSONL, O_SUMMARY, O_JUNIT, O_MAXLINES, O_BENCH,
         O_LISTCASES = 400, O_LISTBACKENDS, O_STRICT, O_FAILREG, O_MEMLIMIT };
  enum { O_HTML = 512, O_JSON, O_SERVING, O_MAXGEN };
  enum { O_STREAM = 600, O_NOSTREAM, O_CHUNK, O_SHARD };
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
      {"list-cases", no_argument, NULL, O_LISTCASES},
      {"list-backends", no_argument, NULL, O_LISTBACKENDS},
      {"strict", no_argument, NULL, O_STRICT},
      {"fail-on-regression", no_argument, NULL, O_FAILREG},
      {"memory-limit", required_argument, NULL, O_MEMLIMIT},
      {"html", required_argument, NULL, O_HTML}, {"json", no_argument, NULL, O_JSON},
      {"max-generated", required_argument, NULL, O_MAXGEN},
      {"serving", required_argument, NULL, O_SERVING},
      {"stream", no_argument, NULL, O_STREAM}, {"no-stream", no_argument, NULL, O_NOSTREAM},
      {"chunk", required_argument, NULL, O_CHUNK},
      {"shard", required_argument, NULL, O_SHARD},
      {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  memset(a, 0, sizeof *a);
  kda_conform_opts_init(&a->opts);
  a->opts.prefix = 1;
  a->cls = -1;
  a->max_lines = 5;
  int c;
  char *end;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":b:p:c:t:o:qhk:", longopts, NULL)) != -1) {
    switch (c) {
      case 'b':
        if (a->n_backends == MAX_ITEMS) return kda_tool_usage(SUB, "too many --backend");
        if (check_spec(optarg, 0)) return KDA_EXIT_USAGE;
        a->backends[a->n_backends++] = optarg;
        break;
      case 'p':
        if (a->n_plugins == MAX_ITEMS) return kda_tool_usage(SUB, "too many --plugin");
        if (check_spec(optarg, 1)) return KDA_EXIT_USAGE;
        a->plugins[a->n_plugins++] = optarg;
        break;
      case 'k':
        if (a->n_filters == MAX_FILTERS) return kda_tool_usage(SUB, "too many -k");
        a->filters[a->n_filters++] = optarg;
        break;
      case O_LISTCASES: a->list_cases = 1; break;
      case O_LISTBACKENDS: a->list_backends = 1; break;
      case O_PARAMS: a->params = optarg; break;
      case 'c': a->candidate = optarg; break;
      case O_CLASS:
        if (kda_precision_parse(optarg, &a->cls) != KDA_OK)
          return kda_tool_usage(SUB, "unknown class '%s' (fp64 fp32 tf32 bf16 fp16)", optarg);
        break;
      case O_EXPORT: a->export_dir = optarg; break;
      case 't':
        a->opts.call.timeout_s = strtod(optarg, &end);
        if (*end || !(a->opts.call.timeout_s > 0)) return kda_tool_usage(SUB, "bad --timeout '%s'", optarg);
        break;
      case O_REPEAT: a->opts.repeat = 1; break;
      case O_NOPREFIX: a->opts.prefix = 0; break;
      case O_SERVING: /* SPEC.md §7.7: which serving checks */
        if (strcmp(optarg, "off") == 0) a->opts.prefix = 0;
        else if (strcmp(optarg, "default") == 0) a->opts.prefix = 1, a->opts.serving = KDA_SERVING_DEFAULT;
        else if (strcmp(optarg, "full") == 0) a->opts.prefix = 1, a->opts.serving = KDA_SERVING_FULL;
        else return kda_tool_usage(SUB, "bad --serving '%s' (default, full, off)", optarg);
        break;
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
      case O_MEMLIMIT:
        if (parse_memory_limit(optarg, &a->opts.call.memory_limit))
          return kda_tool_usage(SUB, "bad --memory-limit '%s' (BYTES[k|M|G], auto, none)", optarg);
        break;
      case 'q': a->quiet = 1; break;
      case O_BENCH: a->bench = 1; break;
      case O_MAXGEN: { /* SPEC.md §10.2: the declared-cost limit of generated inputs */
        int64_t n;
        if (kda_tool_parse_count(optarg, &n) || n < 1)
          return kda_tool_usage(SUB, "bad --max-generated '%s' (input elements)", optarg);
        kda_case_gen_cost_set((uint64_t)n);
        break;
      }
      case O_STRICT: a->strict = 1; break;
      case O_FAILREG: a->opts.fail_on_regression = 1; break;
      case O_HTML: a->html = optarg; break;
      case O_JSON: a->json = 1; break;
      case O_STREAM: a->stream = 1; break;    /* SPEC.md §7.10 */
      case O_NOSTREAM: a->stream = -1; break;
      case O_CHUNK:
        if (kda_tool_parse_count(optarg, &a->chunk) || a->chunk < 64 || a->chunk % 64)
          return kda_tool_usage(SUB, "bad --chunk '%s' (a multiple of 64 tokens)", optarg);
        break;
      case O_SHARD:
        kda_conform_shard_free(a->shard);
        if (!(a->shard = kda_conform_shard_new(optarg))) return KDA_EXIT_USAGE;
        break;
      case 'h': fputs(help_text, stdout); return -1;
      default: return kda_tool_bad_option(SUB, c, argv);
    }
  }
  a->opts.cls = a->cls;
  if (a->json && !a->list_backends && !a->list_cases)
    return kda_tool_usage(SUB, "--json needs --list-backends or --list-cases");
  a->opts.strict = a->strict;
  if (a->opts.fail_on_regression && !a->baseline)
    return kda_tool_usage(SUB, "--fail-on-regression needs --baseline");
  a->paths = argv + optind;
  a->n_paths = argc - optind;
  return 0;
}

/* One scoring target: the worker process of a built-in or plugin backend (SPEC.md §7.8). */
typedef struct target {
  kda_target *t;
  const kda_backend *builtin; /* the built-in table (for the up-front parameter check), or NULL */
  const char *params; /* for open: the spec's own PARAMS, else --params, else "" */
  char *path;         /* the plugin's path (owned), NULL for a built-in */
} target;

typedef struct run_state {
  kda_case_report *reports;
  int64_t n, cap;
  kda_tally tally;
  FILE *jsonl;
  kda_atomic *jsonl_at; /* the atomic writer behind jsonl */
  const kda_run_info *info; /* for summary.json (SPEC.md §7.9) */
  double score_s, truth_s;
  uint64_t bytes;
  int64_t selected; /* cases the -k filter let through */
  int64_t serving_absent, serving_given; /* candidates' serving prompts (SPEC.md §7.7) */
  path_list ids, id_files; /* the case ids met, and their files (unique_id) */
  /* the header, printed before the first result line (a run that fails before any result
   * prints only its one-line error) */
  const path_list *cases;
  const char *default_dir;
  const struct target *tg;
  int nt, header_done;
} run_state;

/* A report file: DIR/NAME under --out, or the explicit path; NULL path when neither.
 * Reports go through the atomic writer (kda_files.h): written in full or not at all. */
static const char *out_path(const char *dir, const char *name, const char *explicit_path,
                            char *buf) {
  if (explicit_path) return explicit_path;
  if (!dir) return NULL;
  snprintf(buf, 4096, "%s/%s", dir, name);
  return buf;
}

static void print_header(const conform_args *a, const path_list *cases, const char *default_dir,
                         const struct target *tg, int nt);

static kda_case_report *next_report(run_state *s) {
  if (s->n == s->cap) {
    int64_t cap = s->cap ? 2 * s->cap : 64;
    kda_case_report *r = realloc(s->reports, (size_t)cap * sizeof *r);
    if (!r) return NULL;
    s->reports = r, s->cap = cap;
  }
  return &s->reports[s->n];
}

/* Counts, prints and records one report; a line that cannot be written is a runner error
 * (exit 2), never a record missing from results.jsonl. */
static int emit(run_state *s, const conform_args *a, kda_case_report *r, char *err,
                size_t errlen) {
  kda_tally_add(&s->tally, r);
  s->n++;
  if (!a->quiet && !s->header_done) print_header(a, s->cases, s->default_dir, s->tg, s->nt);
  s->header_done = 1;
  if (!a->quiet || r->verdict != KDA_VERDICT_PASS) kda_report_human(stdout, r, (int32_t)a->max_lines);
  errno = 0; /* the stream's write sets it (kda_atomic keeps a failed write's errno) */
  if (s->jsonl && kda_report_jsonl(s->jsonl, r) != KDA_OK) {
    char buf[4096];
    const int e = errno;
    return snprintf(err, errlen, "%.*s: cannot write the report of case %s: %s", (int)errlen / 2,
                    out_path(a->out_dir, "results.jsonl", a->jsonl, buf), r->case_id,
                    e ? strerror(e) : "not encodable as JSON"), KDA_EIO;
  }
  kda_conform_shard_emitted(a->shard);
  return KDA_OK;
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

/* Which serving prompts of case c the -k patterns select (SPEC.md §7.7, kda_prompt_filter_match):
 * fills want (KDA_SERVING_MAX_PROMPTS entries) and returns how many. */
static int prompts_wanted(const conform_args *a, const kda_case *c, int32_t mode,
                          kda_serving_prompt_id *ids, int *n_ids, uint8_t *want) {
  *n_ids = kda_serving_prompt_ids(c, mode, ids);
  int n = 0;
  for (int i = 0; i < *n_ids; i++) {
    char pid[512];
    snprintf(pid, sizeof pid, "%s.%s", c->id ? c->id : "", ids[i].suffix);
    want[i] = (uint8_t)kda_prompt_filter_match(a->filters, a->n_filters, c->id, pid,
                                               c->manifest_json);
    n += want[i];
  }
  return n;
}

/* The serving prompts of case c selected by -k whose result files are in the candidate
 * directory (SPEC.md §7.7): each present one is a report; an absent one is counted, not a
 * Fail. */
static int score_prompts(const conform_args *a, const kda_case *c, const char *main_path,
                         run_state *s, char *err, size_t errlen) {
  kda_serving_prompt_id ids[KDA_SERVING_MAX_PROMPTS];
  uint8_t want[KDA_SERVING_MAX_PROMPTS];
  int n_ids;
  if (!prompts_wanted(a, c, a->opts.serving, ids, &n_ids, want)) return KDA_OK;
  for (int i = 0; i < n_ids; i++) { /* make only the prompts that have a result file */
    char pp[4096];
    struct stat sb;
    snprintf(pp, sizeof pp, "%s/%s.%s.npz", a->candidate, c->id, ids[i].suffix);
    if (want[i] && stat(pp, &sb) != 0) want[i] = 0, s->serving_absent++;
  }
  kda_serving_prompt *sp;
  int64_t n;
  int st = kda_serving_prompts_some(c, a->opts.serving, want, &sp, &n, err, errlen);
  for (int64_t i = 0; i < n && st == KDA_OK; i++) {
    char pp[4096];
    snprintf(pp, sizeof pp, "%s/%s.npz", a->candidate, sp[i].c.id);
    kda_case_report *r = next_report(s);
    if (!r) st = KDA_ENOMEM, snprintf(err, errlen, "out of memory");
    else st = kda_conform_candidate_prompt(pp, &sp[i], c, main_path,
                                           a->cls >= 0 ? a->cls : KDA_PRECISION_FP32, &a->opts,
                                           r, err, errlen);
    if (st == KDA_OK) st = emit(s, a, r, err, errlen);
  }
  kda_serving_prompts_free(sp, n);
  return st;
}

/* The case file, opened once (SPEC.md §7.10: streamed with --stream, or when long, and never
 * for a candidate). */
static int open_case(const conform_args *a, const char *path, kda_case_file *f, char *err,
                     size_t errlen) {
  const int32_t mode = a->stream < 0 || a->candidate ? KDA_CASE_STREAM_NEVER
                       : a->stream > 0              ? KDA_CASE_STREAM_ALWAYS
                                                    : KDA_CASE_STREAM_AUTO;
  return kda_case_file_open(path, mode, a->chunk, f, err, errlen);
}

/* The candidate's result file for case c and its report (SPEC.md §7.9) when -k selects the
 * case itself (main_sel), then its selected serving prompts' (§7.7). */
static int score_candidate(const conform_args *a, const kda_case_file *f, int main_sel,
                           run_state *s, char *err, size_t errlen) {
  char rp[4096];
  struct stat sb;
  int is_dir = stat(a->candidate, &sb) == 0 && S_ISDIR(sb.st_mode);
  if (is_dir) snprintf(rp, sizeof rp, "%s/%s.npz", a->candidate, f->c.id);
  else snprintf(rp, sizeof rp, "%s", a->candidate);
  if (!main_sel) return a->opts.prefix && is_dir ? score_prompts(a, &f->c, rp, s, err, errlen)
                                                 : KDA_OK;
  kda_case_report *r = next_report(s);
  double t0 = now_s();
  int st = r ? KDA_OK : KDA_ENOMEM;
  if (!r) snprintf(err, errlen, "out of memory");
  else st = kda_conform_candidate(rp, &f->c, &f->t, a->cls >= 0 ? a->cls : KDA_PRECISION_FP32,
                                  &a->opts, r, err, errlen);
  s->score_s += now_s() - t0;
  if (st == KDA_OK) s->bytes += r->bytes_scored;
  if (st == KDA_OK) st = emit(s, a, r, err, errlen);
  if (st == KDA_OK && f->g.present) { /* its gradients, ID.backward (SPEC.md §13.7) */
    if (!(r = next_report(s))) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
    st = kda_conform_candidate_backward(rp, &f->c, &f->g, a->cls >= 0 ? a->cls
                                                                        : KDA_PRECISION_FP32,
                                        &a->opts, r, err, errlen);
    if (st == KDA_OK) st = emit(s, a, r, err, errlen);
  }
  if (st == KDA_OK && a->opts.prefix && is_dir) st = score_prompts(a, &f->c, rp, s, err, errlen);
  return st;
}

/* 0 when case f is to be scored here: its id checked, selected by -k (itself, *main_sel, or
 * for a candidate directory one of its serving prompts alone, §7.7), not a serving prompt
 * given as a case (scored through its case); -1 when skipped; else an exit status. */
static int case_skipped(const conform_args *a, const char *path, kda_case_file *f, int nt,
                        run_state *s, int *main_sel) {
  char err[KDA_ERRLEN], idbuf[256];
  kda_case *c = &f->c;
  if (!c->id || !c->id[0]) free(c->id), c->id = strdup(base_id(path, idbuf, sizeof idbuf));
  /* the id names the candidate's file: one path component (kda_files.h) */
  if (c->id && kda_id_check(c->id, "case id", err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s: %s", path, err);
  int st;
  if (c->id && (st = unique_id(&s->ids, &s->id_files, c->id, path)) != 0) return st;
  *main_sel = kda_case_filter_match(a->filters, a->n_filters, c->id, c->manifest_json);
  struct stat cb;
  const int cand_dir = a->candidate && stat(a->candidate, &cb) == 0 && S_ISDIR(cb.st_mode);
  kda_serving_prompt_id ids[KDA_SERVING_MAX_PROMPTS];
  uint8_t want[KDA_SERVING_MAX_PROMPTS];
  int n_ids;
  if (!*main_sel && !(cand_dir && a->opts.prefix && !f->streamed &&
                      prompts_wanted(a, c, a->opts.serving, ids, &n_ids, want) > 0))
    return -1; /* -k: not selected */
  if (a->candidate && !nt && kda_serving_is_prompt(c)) return s->serving_given++, -1;
  s->selected++;
  return 0;
}

static int score_case(const conform_args *a, const char *path, target *tg, int nt, run_state *s) {
  char err[KDA_ERRLEN];
  kda_case_file f;
  int st = open_case(a, path, &f, err, sizeof err);
  if (st != KDA_OK) return kda_tool_fail(SUB, "%s", err);
  int main_sel = 0;
  int rc = case_skipped(a, path, &f, nt, s, &main_sel);
  if (rc) return kda_case_file_close(&f), rc < 0 ? 0 : rc;
  double t0 = now_s();
  if (main_sel) st = kda_case_file_truth(&f, err, sizeof err); /* a prompt alone: its own */
  s->truth_s += now_s() - t0;
  /* a gradient case (member do): each backend's backward too, ID.backward (SPEC.md §13.7) */
  const int grads = main_sel && st == KDA_OK && kda_npz_has(f.z, "do");
  if (grads) st = kda_case_file_grad_truth(&f, err, sizeof err);
  for (int i = 0; i < nt && st == KDA_OK && main_sel; i++) {
    if (!kda_conform_shard_target(a->shard, i)) continue; /* another shard's */
    kda_case_report *r = next_report(s);
    if (!r) st = KDA_ENOMEM, snprintf(err, sizeof err, "out of memory");
    else st = kda_conform_target(tg[i].t, &f, &a->opts, r, err, sizeof err);
    if (st == KDA_OK) st = emit(s, a, r, err, sizeof err);
    if (st != KDA_OK || !grads) continue;
    if (!(r = next_report(s))) st = KDA_ENOMEM, snprintf(err, sizeof err, "out of memory");
    else st = kda_conform_target_backward(tg[i].t, &f, &a->opts, r, err, sizeof err);
    if (st == KDA_OK) st = emit(s, a, r, err, sizeof err);
  }
  if (st == KDA_OK && a->candidate && kda_conform_shard_target(a->shard, nt))
    st = score_candidate(a, &f, main_sel, s, err, sizeof err);
  kda_case_file_close(&f);
  return st == KDA_OK ? 0 : kda_tool_fail(SUB, "%s", err);
}

/* The selected serving prompts of case c (SPEC.md §7.7) as case files DIR/ID.SUFFIX.npz. */
static int export_serving(const conform_args *a, const char *dir, const kda_case *c,
                          int32_t mode, path_list *cases, path_list *ids_seen,
                          path_list *id_files, const char *path) {
  char err[KDA_ERRLEN], out[4096];
  kda_serving_prompt_id ids[KDA_SERVING_MAX_PROMPTS];
  uint8_t want[KDA_SERVING_MAX_PROMPTS];
  int n_ids;
  if (!prompts_wanted(a, c, mode, ids, &n_ids, want)) return 0;
  kda_serving_prompt *sp;
  int64_t n;
  int st = kda_serving_prompts_some(c, mode, want, &sp, &n, err, sizeof err);
  for (int64_t i = 0; i < n && st == KDA_OK; i++) {
    char *info = kda_serving_prompt_info(c, &sp[i]);
    st = info ? kda_id_check(sp[i].c.id, "prompt id", err, sizeof err) : KDA_ENOMEM;
    if (!info) snprintf(err, sizeof err, "out of memory");
    if (st == KDA_OK && unique_id(ids_seen, id_files, sp[i].c.id, path) != 0) {
      free(info);
      kda_serving_prompts_free(sp, n);
      return KDA_EXIT_USAGE;
    }
    if (st == KDA_OK) snprintf(out, sizeof out, "%s/%s.npz", dir, sp[i].c.id);
    if (st == KDA_OK) st = kda_output_check(out, (const char *const *)cases->v, cases->n, err, sizeof err);
    if (st == KDA_OK) st = kda_case_save(out, &sp[i].c, info, err, sizeof err);
    if (st == KDA_OK) printf("%s\n", out);
    free(info);
  }
  kda_serving_prompts_free(sp, n);
  return st == KDA_OK ? 0 : kda_tool_fail(SUB, "%s", err);
}

static int export_all(const conform_args *a, const char *dir, path_list *cases,
                      int32_t serving, path_list *ids, path_list *id_files);
/* --export-prompts DIR: the selected cases (-k) and serving prompts, inputs only. */
static int export_prompts(const conform_args *a, const char *dir, path_list *cases,
                          int32_t serving) {
  path_list ids = {0}, id_files = {0}; /* never one file written twice (unique_id) */
  int rc = export_all(a, dir, cases, serving, &ids, &id_files);
  free_paths(&ids), free_paths(&id_files);
  return rc;
}

/* Every case's id read from its manifest alone, before anything is written: two cases with
 * one id are refused with no file exported (a manifest that cannot be read is left to the
 * export, which names the problem). */
static int export_ids_unique(const path_list *cases) {
  path_list ids = {0}, files = {0};
  int rc = 0;
  for (int i = 0; i < cases->n && !rc; i++) {
    char err[KDA_ERRLEN], idbuf[256];
    kda_npz *z = NULL;
    kda_case c;
    json_t *root = NULL;
    memset(&c, 0, sizeof c);
    if (kda_npz_open(cases->v[i], &z, err, sizeof err) != KDA_OK) continue;
    if (kda_case_read_manifest(z, cases->v[i], &c, &root, err, sizeof err) == KDA_OK)
      rc = unique_id(&ids, &files, c.id && c.id[0] ? c.id : base_id(cases->v[i], idbuf,
                                                                     sizeof idbuf), cases->v[i]);
    json_decref(root);
    kda_case_free(&c);
    kda_npz_close(z);
  }
  free_paths(&ids), free_paths(&files);
  return rc;
}

static int export_all(const conform_args *a, const char *dir, path_list *cases,
                      int32_t serving, path_list *ids, path_list *id_files) {
  int rc0 = export_ids_unique(cases);
  if (rc0) return rc0;
  mkdir(dir, 0777);
  for (int i = 0; i < cases->n; i++) {
    char err[KDA_ERRLEN], out[4096], idbuf[256];
    kda_case c;
    if (kda_case_load(cases->v[i], &c, err, sizeof err) != KDA_OK) return kda_tool_fail(SUB, "%s", err);
    if (!c.id || !c.id[0]) free(c.id), c.id = strdup(base_id(cases->v[i], idbuf, sizeof idbuf));
    if (!c.id) return kda_case_free(&c), kda_tool_fail(SUB, "out of memory");
    /* only validated ids become paths, and no output replaces an input (kda_files.h) */
    int st = kda_id_check(c.id, "case id", err, sizeof err);
    if (st != KDA_OK) {
      kda_case_free(&c);
      return kda_tool_fail(SUB, "%s: %s", cases->v[i], err);
    }
    if ((st = unique_id(ids, id_files, c.id, cases->v[i])) != 0) return kda_case_free(&c), st;
    if (kda_case_filter_match(a->filters, a->n_filters, c.id, c.manifest_json)) {
      snprintf(out, sizeof out, "%s/%s.npz", dir, c.id);
      st = kda_output_check(out, (const char *const *)cases->v, cases->n, err, sizeof err);
      if (st == KDA_OK) st = kda_case_save(out, &c, NULL, err, sizeof err);
      if (st == KDA_OK) st = kda_grad_prompt_seeds(cases->v[i], out, err, sizeof err);
      if (st != KDA_OK) return kda_case_free(&c), kda_tool_fail(SUB, "%s", err);
      printf("%s\n", out);
    }
    int rc = serving >= 0 && !kda_serving_is_prompt(&c)
                 ? export_serving(a, dir, &c, serving, cases, ids, id_files, cases->v[i]) : 0;
    kda_case_free(&c);
    if (rc) return rc;
  }
  return 0;
}

typedef int (*report_fn)(FILE *f, const run_state *s);

static int rep_summary(FILE *f, const run_state *s) {
  return kda_report_summary_json(f, &s->tally, s->reports, s->n, s->info);
}
static int rep_junit(FILE *f, const run_state *s) {
  return kda_report_junit_strict(f, s->reports, s->n, s->info ? s->info->strict : 0);
}
static int rep_baseline(FILE *f, const run_state *s) {
  return kda_report_baseline(f, s->reports, s->n);
}

/* Writes one report into a temporary file (kda_atomic), kept in *at for the commit of all
 * of them; every error (the writer's status, the stream) is exit 2 with nothing left behind. */
static int write_report(const char *path, report_fn fn, const run_state *s, kda_atomic **at) {
  char err[KDA_ERRLEN];
  FILE *f;
  *at = NULL;
  if (!path) return 0;
  if (kda_atomic_open(path, at, &f, err, sizeof err) != KDA_OK) return kda_tool_fail(SUB, "%s", err);
  errno = 0;
  if (fn(f, s) != 0) {
    const int e = errno;
    return kda_tool_fail(SUB, "%s: cannot write the report: %s", path,
                         e ? strerror(e) : "not encodable as JSON");
  }
  return 0;
}

/* 1 when paths a and b name one file: the same directory (resolved) and the same name. */
static int same_target(const char *a, const char *b) {
  char da[4096], db[4096], ra[4096], rb[4096];
  const char *na = strrchr(a, '/'), *nb = strrchr(b, '/');
  snprintf(da, sizeof da, "%.*s", na ? (int)(na - a) + 1 : 1, na ? a : ".");
  snprintf(db, sizeof db, "%.*s", nb ? (int)(nb - b) + 1 : 1, nb ? b : ".");
  na = na ? na + 1 : a, nb = nb ? nb + 1 : b;
  if (strcmp(na, nb) != 0) return 0;
  if (!realpath(da, ra) || !realpath(db, rb)) return strcmp(da, db) == 0;
  return strcmp(ra, rb) == 0;
}

/* Before any work: no report may replace one of the run's inputs (case files, waivers,
 * baseline, a candidate file) or a target that is not a regular file. */
static int check_report_targets(const conform_args *a, const path_list *cases) {
  static const char *const names[4] = {"results.jsonl", "summary.json", "junit.xml", NULL};
  const char *explicit_paths[4] = {a->jsonl, a->summary, a->junit, a->record_baseline};
  const char **in = malloc((size_t)(cases->n + 3) * sizeof *in);
  char buf[4096], err[KDA_ERRLEN];
  int n = 0, rc = 0;
  if (!in) return kda_tool_fail(SUB, "out of memory");
  for (int i = 0; i < cases->n; i++) in[n++] = cases->v[i];
  in[n++] = a->waivers, in[n++] = a->baseline, in[n++] = a->candidate;
  char paths[4][4096];
  for (int i = 0; i < 4 && rc == 0; i++) {
    const char *p = names[i] ? out_path(a->out_dir, names[i], explicit_paths[i], buf)
                             : explicit_paths[i];
    snprintf(paths[i], sizeof paths[i], "%s", p ? p : "");
    if (p && kda_output_check(p, in, n, err, sizeof err) != KDA_OK)
      rc = kda_tool_fail(SUB, "%s", err);
    for (int j = 0; j < i && rc == 0 && p; j++) /* one report would replace another */
      if (paths[j][0] && same_target(paths[j], p))
        rc = kda_tool_fail(SUB, "%s: is also the target of another report; give each report "
                           "its own file", p);
  }
  free(in);
  return rc;
}

/* results.jsonl (written as the run went) and the other reports, committed together: a
 * report that cannot be written replaces none of them (kda_atomic_commit_all). */
static int write_reports(const conform_args *a, run_state *s, const kda_run_info *info) {
  char buf[4096], err[KDA_ERRLEN];
  kda_atomic *at[4] = {s->jsonl_at, NULL, NULL, NULL};
  s->info = info, s->jsonl_at = NULL;
  int rc = write_report(out_path(a->out_dir, "summary.json", a->summary, buf), rep_summary, s,
                        &at[1]);
  if (rc == 0) rc = write_report(out_path(a->out_dir, "junit.xml", a->junit, buf), rep_junit, s,
                                 &at[2]);
  if (rc == 0) rc = write_report(a->record_baseline, rep_baseline, s, &at[3]);
  kda_atomic *some[4];
  int n = 0;
  for (int k = 0; k < 4; k++)
    if (at[k] && rc == 0) some[n++] = at[k];
    else kda_atomic_abort(at[k]);
  if (rc == 0 && kda_atomic_commit_all(some, n, err, sizeof err) != KDA_OK)
    rc = kda_tool_fail(SUB, "%s", err);
  if (rc == 0 && a->html && kda_report_html_write(a->html, s->reports, s->n, buf, sizeof buf) != KDA_OK)
    rc = kda_tool_fail(SUB, "%s", buf);
  return rc;
}

/* GOLDEN/L1, else GOLDEN/example, GOLDEN found by kda_tool_golden_dir (SPEC.md §12.3); the
 * directory scored goes into dir. */
static int default_paths(path_list *l, char *dir, size_t cap) {
  char g[4096];
  const char *source;
  if (kda_tool_golden_dir(g, sizeof g, &source) != 0)
    return kda_tool_fail(SUB, "%s: no golden set there (from %s); set KDA_GOLDEN or give case "
                         "files", g, source);
  struct stat st;
  snprintf(dir, cap, "%s/L1", g);
  if (stat(dir, &st) != 0) {
    printf("note: %s not found; scoring the reduced set %s/example\n", dir, g);
    snprintf(dir, cap, "%s/example", g);
  }
  return collect(dir, l);
}

/* ---- What a CI job gates on (SPEC.md §7.6, §12.2). */

/* A baseline must be of the backend and class scored: anything else compares errors in
 * other units.  A kda-baseline/2 map without an entry for a backend is only noted. */
static int check_baseline(const conform_args *a, const kda_baseline *bl, const target *tg,
                          int nt) {
  char err[KDA_ERRLEN], notes[8][KDA_ERRLEN];
  int n_notes = 0;
  for (int i = 0; i <= nt; i++) {
    if (i == nt && !a->candidate) break;
    const char *name = i < nt ? kda_target_info_get(tg[i].t)->label : "candidate";
    int32_t cls = a->cls >= 0 ? a->cls : (i < nt ? kda_target_info_get(tg[i].t)->cls : KDA_CLASS_FP32);
    int st = kda_baseline_check(bl, name, cls, err, sizeof err);
    if (st == KDA_ENOTFOUND && n_notes < 8) snprintf(notes[n_notes++], sizeof notes[0], "%s", err);
    else if (st != KDA_OK && st != KDA_ENOTFOUND) return kda_tool_fail(SUB, "%s", err);
  }
  for (int i = 0; i < n_notes; i++) printf("note: %s; its cases are not compared\n", notes[i]);
  return 0;
}

/* Lines for the waivers that waived nothing; returns their number. */
static int64_t report_unused(const kda_waivers *w, const run_state *s, int strict) {
  int64_t nw = kda_waivers_count(w);
  uint8_t *unused = nw ? calloc((size_t)nw, 1) : NULL;
  int64_t n = kda_waivers_unused(w, s->reports, s->n, unused);
  for (int64_t i = 0; unused && i < nw; i++) {
    if (!unused[i]) continue;
    char d[512];
    kda_waivers_describe(w, i, d, sizeof d);
    printf("%s: unused %s: it waived no case (reason: %s)\n", strict ? "error" : "warning", d,
           kda_waivers_reason(w, i));
  }
  free(unused);
  return n;
}

/* SHA-256 of DIR/SHA256SUMS or DIR/../SHA256SUMS, the digest of the golden set scored (DIR:
 * the case path, or the directory of a case file). */
static int golden_digest(const char *path, char *set, size_t cap, char hex[65]) {
  static const char *const where[] = {"%s/SHA256SUMS", "%s/../SHA256SUMS"};
  char dir[4096];
  struct stat st;
  snprintf(dir, sizeof dir, "%s", path);
  if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
  }
  for (int k = 0; k < 2; k++) {
    char p[4200];
    snprintf(p, sizeof p, where[k], dir);
    FILE *f = fopen(p, "rb");
    if (!f) continue;
    kda_sha256 h;
    kda_sha256_init(&h);
    unsigned char buf[4096], d[KDA_SHA256_BYTES];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) kda_sha256_update(&h, buf, got);
    int bad = ferror(f);
    fclose(f);
    if (bad) return 0;
    kda_sha256_final(&h, d);
    kda_sha256_hex(d, hex);
    snprintf(set, cap, "%s", dir);
    return 1;
  }
  return 0;
}

/* ---- What the run prints before its first result line (not with -q). */

/* A path or label as report text (SPEC.md §7.9): valid UTF-8, no control characters. */
static const char *clean(const char *s, char *buf, size_t cap) {
  kda_text_clean(buf, cap, s ? s : "", 0);
  return buf;
}

/* Where the reports go: --out's three, each separate one, --html's page; "none" without. */
static void header_reports(const conform_args *a) {
  char buf[4096], c[4096];
  static const char *const names[] = {"results.jsonl", "summary.json", "junit.xml"};
  const char *explicit_paths[] = {a->jsonl, a->summary, a->junit};
  int any = 0;
  printf("reports:");
  for (int i = 0; i < 3; i++) {
    const char *p = out_path(a->out_dir, names[i], explicit_paths[i], buf);
    if (p) printf("%s %s", any++ ? "," : "", clean(p, c, sizeof c));
  }
  if (a->record_baseline)
    printf("%s baseline %s", any++ ? "," : "", clean(a->record_baseline, c, sizeof c));
  if (a->html) printf("%s %s/index.html", any++ ? "," : "", clean(a->html, c, sizeof c));
  printf("%s\n", any ? "" : " none (--out DIR writes results.jsonl, summary.json, junit.xml; "
                            "--html DIR a page with plots)");
}

/* The header: the case set scored (and the golden set's SHA256SUMS digest when it has one),
 * the backends, where the reports go and the legend of the result lines that follow. */
static void print_header(const conform_args *a, const path_list *cases, const char *default_dir,
                         const struct target *tg, int nt) {
  char set[4096], hex[65] = "", c[4096];
  const char *first = a->n_paths ? a->paths[0] : default_dir;
  printf("cases: %d case file%s from %s%s", cases->n, cases->n == 1 ? "" : "s",
         clean(first, c, sizeof c), a->n_paths > 1 ? " and the other paths given" : "");
  if (first[0] && golden_digest(first, set, sizeof set, hex))
    printf(" (golden set %s, SHA256SUMS %.12s)", clean(set, c, sizeof c), hex);
  printf("\nbackends:");
  for (int i = 0; i < nt; i++) printf(" %s", clean(kda_target_info_get(tg[i].t)->label, c, sizeof c));
  if (a->candidate) printf(" candidate (%s)", clean(a->candidate, c, sizeof c));
  printf("\n");
  header_reports(a);
  printf("legend: VERDICT BACKEND CASE CLASS, then o, ht, hc: the worst error of the outputs, "
         "the final state and the checkpointed states as 'error/cap' (- when the case has "
         "none), in units of the class, after the allowance of long sequences\n");
  printf("units: 1 unit = u M, u = 2^-53 for fp64, 2^-24 for fp32, M the largest sum of "
         "|terms| of that token's readout (for states the largest |S|; SPEC.md section 7.3); "
         "rms = RMS(o error) / "
         "RMS(o), fla's ratio; growth = how o's error grows along the sequence (section 7.5); "
         "prefix = the worst error of the serving-path resumes (section 7.7).  WARN "
         "(QualityWarning) passes; FAIL, CRASH and TIMEOUT fail; SKIP is NotSupported.\n");
  fflush(stdout);
}

typedef struct run_summary {
  kda_run_target_info targets[2 * MAX_ITEMS + 5];
  char golden[4096], hex[65];
  kda_run_info info;
} run_summary;

static void summary_info(const conform_args *a, const target *tg, int nt, const path_list *cases,
                         const char *default_dir, const kda_waivers *w, run_summary *u) {
  kda_run_info *in = &u->info;
  memset(in, 0, sizeof *in);
  for (int i = 0; i < nt; i++) {
    int32_t cls = a->cls >= 0 ? a->cls : kda_target_info_get(tg[i].t)->cls;
    const int loaded = kda_target_info_get(tg[i].t)->loaded; /* the variant's types (§7.8) */
    u->targets[i] = (kda_run_target_info){
        kda_target_info_get(tg[i].t)->label, kda_class_name(cls), tg[i].params ? tg[i].params : "",
        tg[i].path, loaded ? kda_precision_file_name(kda_target_info_get(tg[i].t)->input_dtype) : NULL,
        loaded ? kda_precision_file_name(kda_target_info_get(tg[i].t)->output_dtype) : NULL};
  }
  if (a->candidate)
    u->targets[nt] = (kda_run_target_info){"candidate", kda_class_name(a->cls >= 0 ? a->cls
                                           : KDA_CLASS_FP32), NULL, NULL, NULL, NULL};
  in->targets = u->targets;
  in->n_targets = nt + (a->candidate ? 1 : 0);
  static const char *one[1];
  one[0] = default_dir;
  in->case_paths = a->n_paths ? (const char *const *)a->paths : one;
  in->n_case_paths = a->n_paths ? a->n_paths : 1;
  in->n_case_files = cases->n;
  if (golden_digest(in->case_paths[0], u->golden, sizeof u->golden, u->hex))
    in->golden_dir = u->golden, in->golden_sha256sums = u->hex;
  in->waivers = w;
  in->baseline = a->baseline;
  in->strict = a->strict;
}

/* What a WARN line means, once, and why a growth warning can fall on an honest evaluation:
 * a class without a plain emulation in the runner (fp64, tf32, bf16, fp16) has nothing to
 * compare the growth with (growth_beyond < 0, SPEC.md §7.5), so a case built to drift warns on
 * every backend of the class, ref-f64 included. */
static void explain_warnings(const run_state *s) {
  const kda_tally *t = &s->tally;
  const int64_t w = t->by_verdict[KDA_VERDICT_QUALITY_WARNING];
  if (!w) return;
  printf("note: %lld WARN (QualityWarning): within every cap, so counted as passed, with a "
         "remark: the error grows along the sequence, exceeds the baseline, differs between "
         "repeated calls, or the backend printed (SPEC.md section 7.6); --strict fails them\n",
         (long long)w);
  for (int64_t i = 0; i < s->n; i++) {
    const kda_case_report *r = &s->reports[i];
    if (r->verdict != KDA_VERDICT_QUALITY_WARNING || !r->has_score ||
        r->score.growth_beyond >= 0 || strncmp(r->reason, "error grows", 11) != 0)
      continue;
    char c[256], b[128];
    printf("note: %s on %s: the %s class has no plain emulation to compare growth with "
           "(SPEC.md section 7.5), so the drift of the case itself is reported on every backend "
           "of the class, the float64 reference included: its own rounding accumulates in a "
           "direction of the state that is never decayed nor erased; within the cap after the "
           "allowance of long sequences (o %.3g/%g; 'last window' is without it)\n",
           clean(r->backend, b, sizeof b), clean(r->case_id, c, sizeof c),
           kda_precision_name(r->score.cls), r->score.o.worst, r->score.caps.o);
  }
}

/* The lines before the final one: cases the baseline lacks (SPEC.md §7.6), and why a status
 * is other than plain pass/fail. */
static void explain_status(const conform_args *a, const run_state *s, int64_t unused,
                           int32_t status) {
  const kda_tally *t = &s->tally;
  int64_t absent = 0;
  for (int64_t i = 0; i < s->n; i++) absent += s->reports[i].baseline_state == KDA_BASELINE_ABSENT;
  explain_warnings(s);
  if (absent)
    printf("note: %lld reports have no entry in the baseline %s (not compared)\n",
           (long long)absent, a->baseline);
  if (status == KDA_RUN_NOTHING)
    printf("nothing ran: %s (exit status %d)\n",
           s->n ? "every case was NotSupported" : "no case files", KDA_RUN_NOTHING);
  else if (a->strict && status == KDA_RUN_FAILED && !t->failed)
    printf("strict: %lld QualityWarning, %lld Waived, %lld unused waivers count as failures\n",
           (long long)t->by_verdict[KDA_VERDICT_QUALITY_WARNING],
           (long long)t->by_verdict[KDA_VERDICT_WAIVED], (long long)unused);
}

/* The PARAMS of a spec (a pointer into it), or the deprecated --params when it has none. */
static const char *spec_params(const char *spec, const char *fallback) {
  const char *colon = strchr(spec, ':');
  return colon ? colon + 1 : fallback ? fallback : "";
}

/* One worker per target.  A plugin that fails to load is not an error of the run: the
 * worker records it and every case reports it as that backend's verdict. */
static int start_target(conform_args *a, const char *spec, target *tg, int *nt) {
  char err[KDA_ERRLEN];
  kda_backend_ref ref;
  if (kda_backend_resolve(spec, &ref, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err);
  target *t = &tg[*nt];
  t->params = spec_params(spec, a->params);
  snprintf(ref.params, sizeof ref.params, "%s", t->params);
  t->builtin = ref.builtin;
  if (!ref.builtin && !(t->path = strdup(ref.path))) return kda_tool_fail(SUB, "out of memory");
  if (kda_target_open(&ref, &a->opts.call, &t->t, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err);
  (*nt)++;
  return 0;
}

/* Rows, waivers and baselines are keyed by the label (SPEC.md §7.6): two targets with one
 * label would be indistinguishable in every report. */
static int unique_labels(target *tg, int nt) {
  for (int i = 0; i < nt; i++)
    for (int j = 0; j < i; j++) {
      char li[64];
      snprintf(li, sizeof li, "%s", kda_target_info_get(tg[i].t)->label);
      if (strcmp(li, kda_target_info_get(tg[j].t)->label) == 0)
        return kda_tool_usage(SUB, "backend '%s' given twice (the reports could not tell the "
                              "two apart; give them different parameters)", li);
    }
  return 0;
}

static int load_targets(conform_args *a, target *tg, int *nt) {
  *nt = 0;
  int rc = 0;
  if (!a->n_backends && !a->n_plugins && !a->candidate)
    for (int32_t i = 0; i < kda_backend_builtin_count() && !rc; i++)
      if (kda_backend_builtin_is_default(i))
        rc = start_target(a, kda_backend_builtin(i)->name, tg, nt);
  for (int i = 0; i < a->n_backends + a->n_plugins && !rc; i++)
    rc = start_target(a, i < a->n_backends ? a->backends[i] : a->plugins[i - a->n_backends], tg, nt);
  return rc ? rc : unique_labels(tg, *nt);
}

/* ---- The backend path (SPEC.md §7.8): the up-front parameter check. */

/* Opens every built-in target once, in-process, before the run: a parameter it rejects
 * (KDA_EINVAL) is a usage error caught here once, not a Fail of every case.  Other open
 * failures (e.g. KDA_EUNSUPPORTED on this machine) are left to the cases, which report them.
 * Plugins are not opened here: they are only ever loaded in their worker, and their open's
 * parameter errors are reported by the cases; a parameter string their variant slot rejected
 * in the worker (before any open, SPEC.md §7.8) is a usage error too. */
static int probe_targets(const target *tg, int nt) {
  for (int i = 0; i < nt; i++) {
    /* a variant slot that rejected the parameters (SPEC.md §7.8), in the worker: the same */
    const kda_target_info *ti = kda_target_info_get(tg[i].t);
    if (ti->params_rejected) /* the message names the plugin's path */
      return kda_tool_fail(SUB, "%s", ti->load_result.msg);
    const kda_backend *b = tg[i].builtin;
    if (!b) continue;
    void *h = NULL;
    char err[KDA_ERRLEN] = "";
    int32_t st = b->open(tg[i].params ? tg[i].params : "", &h, err, sizeof err);
    if (st == KDA_OK) b->close(h);
    else if (st == KDA_EINVAL) return kda_tool_fail(SUB, "backend '%s': %s", b->name, err);
  }
  return 0;
}

/* --shard: the plan is the cases and targets (docs/scale.md); the shard's reports and
 * shard.json go to --out. */
static int plan_shard(conform_args *a, const path_list *cases, const target *tg, int nt,
                      int argc, char **argv) {
  const char *names[2 * MAX_ITEMS + 5];
  if (!a->out_dir) return kda_tool_usage(SUB, "--shard needs --out DIR");
  if (a->jsonl || a->summary || a->junit)
    return kda_tool_usage(SUB, "--shard writes its reports into --out DIR (not --jsonl, "
                          "--summary, --junit)");
  for (int i = 0; i < nt; i++) names[i] = kda_target_info_get(tg[i].t)->label;
  if (a->candidate) names[nt] = "candidate";
  return kda_conform_shard_plan(a->shard, cases->v, cases->n, names, nt + !!a->candidate, argc,
                                argv);
}

int kda_cmd_conform(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--merge") == 0) return kda_conform_merge_main(argc, argv);
  conform_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc < 0 ? KDA_EXIT_OK : rc;
  if (a.list_backends) {
    const char *specs[2 * MAX_ITEMS];
    for (int i = 0; i < a.n_backends + a.n_plugins; i++)
      specs[i] = i < a.n_backends ? a.backends[i] : a.plugins[i - a.n_backends];
    return kda_conform_list_backends(specs, a.n_backends + a.n_plugins, a.params, &a.opts.call,
                                     a.json);
  }
  path_list cases = {0};
  for (int i = 0; i < a.n_paths && rc == 0; i++) rc = collect(a.paths[i], &cases);
  char default_dir[4200] = "";
  if (rc == 0 && a.n_paths == 0) rc = default_paths(&cases, default_dir, sizeof default_dir);
  if (rc == 0 && cases.n == 0 && a.export_dir) rc = kda_tool_fail(SUB, "no case files found");
  if (rc == 0 && a.list_cases) {
    rc = a.json ? kda_conform_list_cases_json(a.filters, a.n_filters, cases.v, cases.n,
                                              a.opts.prefix ? a.opts.serving : -1)
                : kda_conform_list_cases(a.filters, a.n_filters, cases.v, cases.n);
    goto done;
  }
  if (rc == 0 && a.export_dir) {
    rc = export_prompts(&a, a.export_dir, &cases, a.opts.prefix ? a.opts.serving : -1);
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
  if (rc == 0) rc = probe_targets(tg, nt);
  if (rc == 0 && a.shard) rc = plan_shard(&a, &cases, tg, nt, argc, argv);
  if (rc == 0 && bl) rc = check_baseline(&a, bl, tg, nt);
  run_state s;
  memset(&s, 0, sizeof s);
  char buf[4096];
  if (rc == 0) rc = check_report_targets(&a, &cases);
  int lock = -1; /* one run per --out DIR; then what a killed run left there is stale */
  if (rc == 0 && a.out_dir) mkdir(a.out_dir, 0777);
  if (rc == 0 && a.out_dir && kda_dir_lock(a.out_dir, &lock, err, sizeof err) != KDA_OK)
    rc = kda_tool_fail(SUB, "%s", err);
  if (rc == 0 && a.out_dir) kda_tmp_sweep(a.out_dir);
  if (rc == 0 && (a.jsonl || a.out_dir) &&
      kda_atomic_open(out_path(a.out_dir, "results.jsonl", a.jsonl, buf), &s.jsonl_at, &s.jsonl,
                      err, sizeof err) != KDA_OK)
    rc = kda_tool_fail(SUB, "%s", err);
  s.cases = &cases, s.default_dir = default_dir, s.tg = tg, s.nt = nt;
  double t0 = now_s();
  for (int i = 0; i < cases.n && rc == 0; i++)
    if (kda_conform_shard_case(a.shard, i)) rc = score_case(&a, cases.v[i], tg, nt, &s);
  double wall = now_s() - t0;
  if (s.jsonl_at && rc != 0) kda_atomic_abort(s.jsonl_at), s.jsonl_at = NULL;
  if (rc == 0 && (s.serving_absent || s.serving_given))
    printf("note: serving prompts (SPEC.md section 7.7): %lld without a result file in %s (not "
           "run), %lld prompt files given as cases (scored through their case, when given)\n",
           (long long)s.serving_absent, a.candidate, (long long)s.serving_given);
  if (rc == 0 && s.selected == 0 && a.n_filters > 0)
    printf("note: no case matches the -k patterns\n"); /* nothing ran: status 5 below */
  int64_t unused = 0;
  int32_t status = KDA_RUN_OK;
  run_summary *u = rc == 0 ? calloc(1, sizeof *u) : NULL;
  if (rc == 0 && !u) rc = kda_tool_fail(SUB, "out of memory");
  if (rc != 0 && s.jsonl_at) kda_atomic_abort(s.jsonl_at), s.jsonl_at = NULL;
  if (rc == 0) {
    unused = report_unused(w, &s, a.strict);
    status = kda_run_status(&s.tally, unused, a.strict);
    summary_info(&a, tg, nt, &cases, default_dir, w, u);
    u->info.exit_status = status;
    rc = write_reports(&a, &s, &u->info);
  }
  if (rc == 0 && a.shard) rc = kda_conform_shard_finish(a.shard, a.out_dir);
  free(u);
  if (rc == 0 && a.bench)
    printf("bench: candidate scoring %llu bytes (truth + candidate, as float64) in %.3f s: "
           "%.1f MB/s; truth and magnitudes %.3f s; wall %.3f s for %lld reports\n",
           (unsigned long long)s.bytes, s.score_s, s.score_s > 0 ? s.bytes / s.score_s / 1e6 : 0.0,
           s.truth_s, wall, (long long)s.n);
  if (rc == 0) {
    explain_status(&a, &s, unused, status);
    kda_report_final(stdout, &s.tally);
    rc = status;
  }
  for (int64_t i = 0; i < s.n; i++) kda_case_report_free(&s.reports[i]);
  free(s.reports);
  free_paths(&s.ids), free_paths(&s.id_files);
  for (int i = 0; i < nt; i++) kda_target_close(tg[i].t), free(tg[i].path);
  kda_waivers_free(w);
  kda_baseline_free(bl);
  kda_dir_unlock(lock);
done:
  kda_conform_shard_free(a.shard);
  for (int i = 0; i < cases.n; i++) free(cases.v[i]);
  free(cases.v);
  return rc;
}

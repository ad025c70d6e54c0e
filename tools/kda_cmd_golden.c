/* kda_cmd_golden.c: `kda golden`, write and verify the committed golden sets (golden/L0, L1).
 * SPDX-License-Identifier: MIT
 *
 * --write regenerates every case of the catalog (vectors/catalog/kda_catalog.c) with its certified
 * outputs, the level manifests and SHA256SUMS; --verify checks SHA256SUMS and every file's
 * member hashes, then regenerates everything into a temporary directory and compares it with
 * the committed files byte for byte.  Cases run in forked worker processes (two by default),
 * longest first; a progress bar goes to standard error when it is a terminal.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kda_case.h"
#include "kda_catalog.h"
#include "kda_files.h"
#include "kda_golden.h"
#include "kda_golden_grad.h"
#include "kda_golden_shard.h"
#include "kda_cert.h"
#include "kda_mpfr.h"
#include "kda_ref.h"
#include "kda_tool.h"

#define SUB "golden"

int kda_cmd_golden(int argc, char **argv);

static const char help_text[] =
    "Usage: kda golden --write [--level L0|L1|L2|all] [--jobs N] [--certifier C] [DIR]\n"
    "       kda golden --verify [--level L0|L1|L2|all] [--jobs N] [--certifier C] [DIR]\n"
    "       kda golden --write --shard I/N [--level L] [--jobs N] [--certifier C] SHARD_DIR\n"
    "       kda golden --merge OUT SHARD_DIR...\n"
    "       kda golden --list\n"
    "       kda golden --where\n"
    "       kda golden --bench-step [--K N] [--V N] [--T N] [--prec P]\n"
    "       kda golden --bench-certify [--K N] [--V N] [--T N] [--prec P]\n"
    "       kda golden --expand FILE -o OUT.npz\n"
    "\n"
    "The golden sets (docs/golden.md): every case of the catalog with its inputs and its\n"
    "outputs certified by the MPFR reference, under DIR (default: golden; for --verify\n"
    "$KDA_GOLDEN, else ./golden, else golden/ beside the folder holding kda, else the\n"
    "installed share/kda/golden).\n"
    "\n"
    "  --write       regenerate DIR/L0 and DIR/L1 (case files, L0 traces, manifests) and\n"
    "                DIR/SHA256SUMS; print the generation time and the float64 reference's\n"
    "                error budget.  `make golden` runs this.\n"
    "  --verify      check DIR/SHA256SUMS and the member hashes of every case file, then\n"
    "                regenerate every case into a temporary directory and compare it with\n"
    "                DIR byte for byte (generator-made files such as DIR/example/*.npz too).\n"
    "                `make check` runs this.\n"
    "  --shard I/N   with --write: make only shard I of N (0 <= I < N) of the level's cases,\n"
    "                a deterministic partition balanced by cost (docs/scale.md), into\n"
    "                SHARD_DIR/<level> with SHARD_DIR/shard.json (kda-shard/1: catalog\n"
    "                identity, I, N, units, SHA-256 of every file); no level manifest\n"
    "  --merge       check the shard directories (every manifest and hash, one catalog, all\n"
    "                N shards, every case exactly once), then write into OUT what one --write\n"
    "                of those levels writes, byte for byte; nothing is written when a shard\n"
    "                is corrupt, missing, duplicated or foreign (exit 2, the shard named)\n"
    "  --list        say which golden sets are present and where ($KDA_GOLDEN, else\n"
    "                ./golden, else golden/ beside kda's folder, else the installed\n"
    "                share/kda/golden: the sets kda conform\n"
    "                and --verify use), then print the catalog: level, id, flags and\n"
    "                comment of every case\n"
    "  --where       print the absolute path of the golden sets' directory kda conform and\n"
    "                --verify use (the lookup of --list) on one line; exit 2, naming it,\n"
    "                when there is none\n"
    "  --bench-step  time one certified MPFR step against one float64 step (K = V = 128)\n"
    "                and against the fast certifier's double-double phase\n"
    "  --bench-certify  time the fast certifier's double-double phase alone (no MPFR) on\n"
    "                one head, with the values it decides, and project a 2^20-token head\n"
    "  --expand FILE  write the ordinary case file of golden case FILE to OUT.npz: its\n"
    "                inputs (regenerated and checked against the recorded hashes when FILE\n"
    "                has generated inputs, SPEC.md §10.2) and its case manifest with\n"
    "                generator_info; not the golden object or outputs (a sampled o is not\n"
    "                an ordinary o).  For numpy, the Python adapters and candidate files\n"
    "\n"
    "Options:\n"
    "  -l, --level L   L0, L1, L2 or all: the cases to write or regenerate (default: the\n"
    "                  committed levels L0 and L1).  L2 is made on demand: --write puts its\n"
    "                  files in DIR/L2 (not committed) and pins their SHA-256 in\n"
    "                  DIR/L2.sha256; --verify regenerates it and checks the pins.  L2 is\n"
    "                  the production set (K = V = 128, up to 2^20 tokens): generated\n"
    "                  inputs, sampled truth, certified by the double-double phase alone\n"
    "                  whatever --certifier says (SPEC.md §8.12, §10.2)\n"
    "  -j, --jobs N    worker processes (default 2)\n"
    "  -c, --certifier C  fast (default) or mpfr.  fast: the double-double phase of the fast\n"
    "                  certifier (SPEC.md §8.12), then MPFR, and every value the first phase\n"
    "                  decided compared with MPFR's bit for bit (a disagreement fails the\n"
    "                  case); mpfr: MPFR alone.  Both write the same bytes: the manifests\n"
    "                  record the MPFR evaluation\n"
    "      --K N, --V N  the bench problem's head dimensions (default 128, 128; 1 to 4096)\n"
    "      --T N      the bench problem's tokens (default 8; 1 to 2^20)\n"
    "      --prec P   the bench problem's input precision: bf16 (default; its gates repeat,\n"
    "                  and the certifier caches their decay factors), f16, f32 or f64 (gates\n"
    "                  that do not repeat: every decay factor is evaluated)\n"
    "  -o, --output OUT.npz  the case file --expand writes (atomic)\n"
    "  -h, --help      print this help and exit\n"
    "\n"
    "Exit status:\n"
    "  0  written, or everything verified\n"
    "  1  --verify found a difference (the file and its first differing member are named)\n"
    "  2  usage error, I/O error, or a case could not be made\n";

enum { MODE_NONE, MODE_WRITE, MODE_VERIFY, MODE_LIST, MODE_BENCH, MODE_BENCH_CERT, MODE_EXPAND,
       MODE_MERGE, MODE_WHERE };

typedef struct gargs {
  int mode;
  int32_t level; /* a KDA_LEVEL_*, -1: the committed levels (L0, L1), -2: all */
  int64_t jobs;
  const char *dir;
  int64_t bK, bV, bT;
  const char *bprec; /* --prec: the bench problem's input precision */
  int32_t certifier;
  const char *expand, *output; /* --expand FILE -o OUT */
  int64_t shard_i, shard_n; /* --shard I/N (shard_n 0: none) */
  const int64_t *shard_of;  /* the partition (kda_golden_partition) when sharded */
  char **shards;            /* --merge: the shard directories */
  int n_shards;
} gargs;

/* ---- Arguments. */
static int set_mode(gargs *a, int mode) {
  if (a->mode != MODE_NONE && a->mode != mode)
    return kda_tool_usage(SUB, "give only one of --write, --verify, --merge, --list, --where, "
                          "--bench-step, --bench-certify, --expand");
  a->mode = mode;
  return -1;
}

static int parse_dim(const char *s, int64_t *out, const char *what) {
  if (kda_tool_parse_count(s, out) != 0 || *out < 1 || *out > 4096)
    return kda_tool_usage(SUB, "bad value '%s' for %s (1 to 4096)", s, what);
  return -1;
}

static int parse_option(gargs *a, int c) {
  switch (c) {
  case 'w': return set_mode(a, MODE_WRITE);
  case 'v': return set_mode(a, MODE_VERIFY);
  case 'L': return set_mode(a, MODE_LIST);
  case 'W': return set_mode(a, MODE_WHERE);
  case 'b': return set_mode(a, MODE_BENCH);
  case 'B': return set_mode(a, MODE_BENCH_CERT);
  case 'M': return set_mode(a, MODE_MERGE);
  case 's': {
    char e[KDA_ERRLEN];
    if (kda_shard_parse(optarg, &a->shard_i, &a->shard_n, e, sizeof e) != KDA_OK)
      return kda_tool_usage(SUB, "%s", e);
    return -1;
  }
  case 'c':
    a->certifier = kda_cert_certifier_parse(optarg);
    if (a->certifier != KDA_CERTIFIER_FAST && a->certifier != KDA_CERTIFIER_MPFR)
      return kda_tool_usage(SUB, "bad value '%s' for --certifier (fast or mpfr)", optarg);
    return -1;
  case 'l':
    if (strcmp(optarg, "all") == 0) a->level = -2;
    else if (kda_level_parse(optarg, &a->level) != KDA_OK)
      return kda_tool_usage(SUB, "bad level '%s' (L0, L1, L2 or all)", optarg);
    return -1;
  case 'j':
    if (kda_tool_parse_count(optarg, &a->jobs) != 0 || a->jobs < 1 || a->jobs > 256)
      return kda_tool_usage(SUB, "bad value '%s' for --jobs (1 to 256)", optarg);
    return -1;
  case 'K': return parse_dim(optarg, &a->bK, "--K");
  case 'V': return parse_dim(optarg, &a->bV, "--V");
  case 'T':
    if (kda_tool_parse_count(optarg, &a->bT) != 0 || a->bT < 1 || a->bT > ((int64_t)1 << 20))
      return kda_tool_usage(SUB, "bad value '%s' for --T (1 to 2^20)", optarg);
    return -1;
  case 'P': {
    int32_t pr;
    if (kda_precision_parse(optarg, &pr) != KDA_OK || !kda_precision_file_name(pr))
      return kda_tool_usage(SUB, "bad value '%s' for --prec (bf16, f16, f32 or f64)", optarg);
    a->bprec = optarg;
    return -1;
  }
  case 'e': a->expand = optarg; return set_mode(a, MODE_EXPAND);
  case 'o': a->output = optarg; return -1;
  case 'h': fputs(help_text, stdout); return KDA_EXIT_OK;
  default: return -2;
  }
}

/* --verify without DIR checks the set kda conform would score: $KDA_GOLDEN, ./golden, or the
 * installed one (SPEC.md §12.3).  --write keeps ./golden: it never writes an installed set. */
static const char default_dir[] = "golden";

static int find_default(gargs *a) {
  static char dir[4096];
  const char *source;
  if (kda_tool_golden_dir(dir, sizeof dir, &source) != 0)
    return kda_tool_fail(SUB, "%s: no golden set there (from %s); set KDA_GOLDEN or give DIR",
                         dir, source);
  a->dir = dir;
  return -1;
}

static int parse_args(int argc, char **argv, gargs *a) {
  static const struct option longopts[] = {
      {"write", no_argument, NULL, 'w'},      {"verify", no_argument, NULL, 'v'},
      {"list", no_argument, NULL, 'L'},       {"bench-step", no_argument, NULL, 'b'},
      {"bench-certify", no_argument, NULL, 'B'}, {"certifier", required_argument, NULL, 'c'},
      {"level", required_argument, NULL, 'l'}, {"jobs", required_argument, NULL, 'j'},
      {"K", required_argument, NULL, 'K'},    {"V", required_argument, NULL, 'V'},
      {"T", required_argument, NULL, 'T'},    {"help", no_argument, NULL, 'h'},
      {"expand", required_argument, NULL, 'e'}, {"output", required_argument, NULL, 'o'},
      {"shard", required_argument, NULL, 's'}, {"merge", no_argument, NULL, 'M'},
      {"prec", required_argument, NULL, 'P'}, {"where", no_argument, NULL, 'W'},
      {NULL, 0, NULL, 0}};
  *a = (gargs){MODE_NONE, -1, 2, default_dir, 128, 128, 8, "bf16", KDA_CERTIFIER_FAST, NULL,
               NULL, 0, 0, NULL, NULL, 0};
  opterr = 0;
  optind = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":l:j:c:e:o:h", longopts, NULL)) != -1) {
    int st = parse_option(a, c);
    if (st == -2) return kda_tool_bad_option(SUB, c, argv);
    if (st >= 0) return st;
  }
  if (a->mode == MODE_NONE)
    return kda_tool_usage(SUB, "missing --write, --verify, --merge, --list, --where, "
                          "--bench-step, --bench-certify or --expand");
  if (a->mode == MODE_EXPAND && !a->output) return kda_tool_usage(SUB, "missing -o OUT.npz");
  if (a->mode != MODE_EXPAND && a->output) return kda_tool_usage(SUB, "-o goes with --expand");
  if (a->shard_n && a->mode != MODE_WRITE) return kda_tool_usage(SUB, "--shard needs --write");
  if (a->mode == MODE_MERGE) { /* OUT SHARD_DIR... */
    if (argc - optind < 2) return kda_tool_usage(SUB, "--merge needs OUT and a shard directory");
    a->dir = argv[optind];
    a->shards = argv + optind + 1;
    a->n_shards = argc - optind - 1;
    return -1;
  }
  if (a->shard_n && optind >= argc) return kda_tool_usage(SUB, "--shard needs SHARD_DIR");
  if (optind < argc) {
    if (a->mode == MODE_LIST || a->mode == MODE_WHERE || a->mode == MODE_BENCH ||
        a->mode == MODE_BENCH_CERT || a->mode == MODE_EXPAND)
      return kda_tool_usage(SUB, "--list, --where, --bench-step, --bench-certify and --expand "
                            "take no DIR");
    a->dir = argv[optind++];
  }
  if (optind < argc) return kda_tool_usage(SUB, "unexpected argument '%s'", argv[optind]);
  return a->mode == MODE_VERIFY && a->dir == default_dir ? find_default(a) : -1;
}

/* ---- Progress on a terminal. */
typedef struct progress {
  int on;
  const char *what;
  int64_t done, total;
  double t0;
} progress;

static void progress_show(progress *pg, const char *id) {
  if (!pg->on) return;
  const int width = 30;
  int fill = pg->total ? (int)(width * pg->done / pg->total) : width;
  fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld %6.1fs  %-28.28s", pg->what, fill,
          "##############################", width - fill, "", (long long)pg->done,
          (long long)pg->total, kda_golden_now() - pg->t0, id ? id : "");
  fflush(stderr);
}

static void progress_end(progress *pg) {
  if (!pg->on) return;
  fprintf(stderr, "\r%*s\r", 100, "");
  fflush(stderr);
}

/* ---- Running cases over worker processes. */
static ssize_t io_full(int fd, void *buf, size_t n, int writing) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = writing ? write(fd, (char *)buf + done, n - done)
                        : read(fd, (char *)buf + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += (size_t)r;
  }
  return (ssize_t)done;
}

static void make_one(int64_t i, const char *dir, kda_golden_info *info) {
  char err[KDA_ERRLEN];
  kda_golden_make(kda_catalog_get(i), dir, info, err, sizeof err);
}

/* A worker: reads case indices until EOF, answers each with its info. */
static void worker_main(int cmd, int res, const char *dir) {
  int64_t i;
  while (io_full(cmd, &i, sizeof i, 0) == (ssize_t)sizeof i) {
    kda_golden_info info;
    make_one(i, dir, &info);
    if (io_full(res, &info, sizeof info, 1) != (ssize_t)sizeof info) _exit(3);
  }
  _exit(0);
}

typedef struct worker {
  pid_t pid;
  int cmd, res;
  int64_t busy; /* case index, or -1 */
} worker;

/* Estimated cost of a case: tokens x value heads x K x V. */
static double case_cost(int64_t i) {
  kda_gen_desc d;
  if (kda_gen_parse(kda_catalog_get(i)->desc, &d, NULL, 0) != KDA_OK) return 0.0;
  double c = (double)d.p.T * (double)d.p.HV * (double)d.p.K * (double)d.p.V + 1.0;
  kda_gen_desc_free(&d);
  return c;
}

static const double *sort_costs;
/* Descending cost, then ascending catalog index. */
static int by_cost(const void *a, const void *b) {
  const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
  const double x = sort_costs[i], y = sort_costs[j];
  return x < y ? 1 : x > y ? -1 : (i > j) - (i < j);
}

static void record(kda_golden_info *infos, const kda_golden_info *in, progress *pg) {
  infos[in->index] = *in;
  pg->done++;
  progress_show(pg, kda_catalog_get(in->index)->id);
}

/* Starts up to nw workers; returns how many started (the rest could not be: no pipe or no
 * fork), each with a command pipe (parent writes) and a result pipe (parent reads). */
static int spawn(worker *w, int nw, const char *dir) {
  for (int k = 0; k < nw; k++) {
    int cp[2], rp[2];
    if (pipe(cp) != 0) return k;
    if (pipe(rp) != 0) {
      close(cp[0]);
      close(cp[1]);
      return k;
    }
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
      close(cp[0]);
      close(cp[1]);
      close(rp[0]);
      close(rp[1]);
      return k;
    }
    if (pid == 0) {
      kda_tool_child_bind(parent); /* no worker outlives a killed kda golden */
      for (int j = 0; j < k; j++) {
        close(w[j].cmd);
        close(w[j].res);
      }
      close(cp[1]);
      close(rp[0]);
      worker_main(cp[0], rp[1], dir);
    }
    close(cp[0]);
    close(rp[1]);
    w[k] = (worker){pid, cp[1], rp[0], -1};
  }
  return nw;
}

/* Sends the next case to an idle worker, or closes its command pipe when none is left (or
 * it cannot take one: that case then stays "not run"). */
static void dispatch(worker *w, const int64_t *order, int64_t n, int64_t *next) {
  if (*next < n) {
    int64_t i = order[(*next)++];
    if (io_full(w->cmd, &i, sizeof i, 1) == (ssize_t)sizeof i) {
      w->busy = i;
      return;
    }
  }
  w->busy = -1;
  close(w->cmd);
  w->cmd = -1;
}

/* Polls the busy workers until every case is answered; a worker that dies fails its case. */
static void collect(worker *w, int nw, const int64_t *order, int64_t n, int64_t next,
                    kda_golden_info *infos, progress *pg) {
  int64_t done = 0;
  while (done < n) {
    struct pollfd fds[256];
    int map[256], nf = 0;
    for (int k = 0; k < nw; k++)
      if (w[k].busy >= 0) {
        fds[nf] = (struct pollfd){w[k].res, POLLIN, 0};
        map[nf++] = k;
      }
    if (nf == 0) break;
    if (poll(fds, (nfds_t)nf, -1) < 0 && errno != EINTR) break;
    for (int f = 0; f < nf; f++) {
      if (!fds[f].revents) continue;
      worker *wk = &w[map[f]];
      kda_golden_info in;
      if (io_full(wk->res, &in, sizeof in, 0) != (ssize_t)sizeof in) {
        memset(&in, 0, sizeof in);
        in.index = wk->busy;
        in.status = KDA_EIO;
        snprintf(in.message, sizeof in.message, "case '%s': the worker process died",
                 kda_catalog_get(wk->busy)->id);
        wk->busy = -1;
        if (wk->cmd >= 0) close(wk->cmd);
        wk->cmd = -1;
      } else {
        wk->busy = -1;
        if (wk->cmd >= 0) dispatch(wk, order, n, &next);
      }
      record(infos, &in, pg);
      done++;
    }
  }
}

/* Makes the cases idx[0..n) into dir with `jobs` workers; infos[catalog index] filled. */
static void run_cases(const int64_t *idx, int64_t n, const char *dir, int64_t jobs,
                      kda_golden_info *infos, progress *pg) {
  int64_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  double *cost = calloc((size_t)kda_catalog_count(), sizeof *cost);
  if (!order || !cost) {
    for (int64_t i = 0; i < n; i++) {
      infos[idx[i]].status = KDA_ENOMEM;
      snprintf(infos[idx[i]].message, sizeof infos[idx[i]].message, "out of memory");
    }
    free(order);
    free(cost);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    order[i] = idx[i];
    cost[idx[i]] = case_cost(idx[i]);
    memset(&infos[idx[i]], 0, sizeof infos[idx[i]]);
    infos[idx[i]].index = idx[i];
    infos[idx[i]].status = KDA_EIO;
    snprintf(infos[idx[i]].message, sizeof infos[idx[i]].message, "case '%s': not run",
             kda_catalog_get(idx[i])->id);
  }
  sort_costs = cost;
  qsort(order, (size_t)n, sizeof *order, by_cost);
  int nw = (int)(jobs < n ? jobs : n);
  worker w[256];
  void (*old)(int) = signal(SIGPIPE, SIG_IGN);
  const int started = nw > 1 ? spawn(w, nw, dir) : 0;
  if (started <= 1) { /* one job, or not two workers: run here */
    if (started == 1) {
      close(w[0].cmd);
      close(w[0].res);
      waitpid(w[0].pid, NULL, 0);
    }
    for (int64_t i = 0; i < n; i++) {
      kda_golden_info in;
      make_one(order[i], dir, &in);
      record(infos, &in, pg);
    }
  } else {
    int64_t next = 0;
    for (int k = 0; k < started; k++) dispatch(&w[k], order, n, &next);
    collect(w, started, order, n, next, infos, pg);
    for (int k = 0; k < started; k++) {
      if (w[k].cmd >= 0) close(w[k].cmd);
      close(w[k].res);
      waitpid(w[k].pid, NULL, 0);
    }
  }
  signal(SIGPIPE, old);
  free(order);
  free(cost);
}

/* ---- Shared by write and verify. */
/* Level -1 (the default) is the committed levels, -2 every level. */
static int level_on(const gargs *a, int32_t level) {
  if (a->level == -1) return kda_level_committed(level);
  return a->level == -2 || a->level == level;
}

static int64_t selected(const gargs *a, int64_t *idx) {
  int64_t n = 0;
  for (int64_t i = 0; i < kda_catalog_count(); i++)
    if (level_on(a, kda_catalog_get(i)->level) && (!a->shard_of || a->shard_of[i] == a->shard_i))
      idx[n++] = i;
  return n;
}

/* The temporary files a killed run left in DIR and its levels (DIR's lock held). */
static void sweep_tmp(const char *dir, const gargs *a) {
  char path[4096];
  kda_tmp_sweep(dir);
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++) {
    snprintf(path, sizeof path, "%s/%s", dir, kda_level_name(l));
    if (level_on(a, l)) kda_tmp_sweep(path);
  }
}

static int make_dirs(const char *dir, const gargs *a) {
  char path[4096];
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++) {
    if (!level_on(a, l)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, kda_level_name(l));
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
  }
  return 0;
}

/* Prints the failed cases; returns how many. */
/* One line: the first failure, and how many cases failed with it (a full disk fails all). */
static int64_t report_failures(const kda_golden_info *infos, const int64_t *idx, int64_t n) {
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++)
    if (infos[idx[i]].status != KDA_OK && bad++ == 0) first = idx[i];
  if (bad == 1) kda_tool_fail(SUB, "%s", infos[first].message);
  else if (bad > 1)
    kda_tool_fail(SUB, "%s (and %lld more cases failed)", infos[first].message,
                  (long long)(bad - 1));
  return bad;
}

static int write_manifests(const char *dir, const gargs *a, const kda_golden_info *infos) {
  char err[KDA_ERRLEN];
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++)
    if (level_on(a, l) &&
        kda_golden_write_level_manifest(dir, l, infos, kda_catalog_count(), err, sizeof err))
      return kda_tool_fail(SUB, "%s", err);
  return KDA_EXIT_OK;
}

/* ---- --write. */
/* Removes files in DIR/<level> that the catalog no longer produces. */
static void remove_stale(const char *dir, const gargs *a) {
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++) {
    if (!level_on(a, l)) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, kda_level_name(l));
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.' || kda_golden_owns(l, e->d_name)) continue;
      char f[8192];
      snprintf(f, sizeof f, "%s/%s", path, e->d_name);
      if (unlink(f) == 0) printf("removed %s (no longer in the catalog)\n", f);
    }
    if (d) closedir(d);
  }
}

static void print_level_summary(int32_t l, const kda_golden_info *infos, double wall) {
  int64_t cases = 0, proven = 0, values = 0, steps = 0, exact = 0, within1 = 0, dec = 0;
  double cert = 0, fast = 0, ulps = 0, rel = 0, nw = 0;
  const char *wu = "", *wr = "", *wn = "";
  int32_t pmin = 1 << 30, pmax = 0;
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_golden_info *in = &infos[i];
    if (kda_catalog_get(i)->level != l) continue;
    cases++;
    proven += in->method == KDA_CERT_PROVEN;
    values += in->n_values;
    steps += in->steps;
    exact += in->ref_n_exact;
    within1 += in->ref_n_within1;
    cert += in->seconds_certify;
    fast += in->seconds_fast;
    dec += in->n_decided_fast;
    if (in->prec_bits < pmin) pmin = in->prec_bits;
    if (in->prec_bits > pmax) pmax = in->prec_bits;
    if (in->ref_max_ulps >= ulps) ulps = in->ref_max_ulps, wu = kda_catalog_get(i)->id;
    if (in->ref_max_rel >= rel) rel = in->ref_max_rel, wr = kda_catalog_get(i)->id;
    if (in->ref_max_normwise >= nw) nw = in->ref_max_normwise, wn = kda_catalog_get(i)->id;
  }
  printf("%s: %lld cases (%lld PROVEN, %lld AGREED), %lld values, %lld head-steps; precision "
         "%d..%d bits\n", kda_level_name(l), (long long)cases, (long long)proven,
         (long long)(cases - proven), (long long)values, (long long)steps, (int)pmin, (int)pmax);
  printf("%s: generated and certified in %.1f s wall (%.1f s of certification in all "
         "workers)\n", kda_level_name(l), wall, cert);
  if (kda_golden_get_certifier() == KDA_CERTIFIER_FAST)
    printf("%s: fast certifier: %lld of %lld values (%.1f%%) decided in double-double in "
           "%.1f s, %s\n", kda_level_name(l), (long long)dec,
           (long long)values, values ? 100.0 * (double)dec / (double)values : 100.0, fast,
           kda_level_committed(l) ? "all equal to MPFR's bit for bit"
                                  : "certified by it alone (production cases, SPEC.md §8.12)");
  printf("%s: ref-f64 error budget: max %.3g ulps (%s), max relative %.3g (%s), max normwise "
         "relative %.3g (%s); %.2f%% of values exact, %.2f%% within 1 ulp\n",
         kda_level_name(l), ulps, wu, rel, wr, nw, wn, values ? 100.0 * exact / values : 100.0,
         values ? 100.0 * within1 / values : 100.0);
}

/* ---- --write --shard and --merge (docs/scale.md). */
static uint32_t level_mask(const gargs *a) {
  uint32_t m = 0;
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++)
    if (level_on(a, l)) m |= UINT32_C(1) << l;
  return m;
}

static int finish_shard(const gargs *a, int64_t *idx, const kda_golden_info *infos) {
  char err[KDA_ERRLEN];
  int64_t n = selected(a, idx);
  if (kda_golden_shard_finish(a->dir, level_mask(a), a->shard_i, a->shard_n, "lpt", idx, n,
                              infos, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err);
  printf("wrote shard %lld/%lld of %s: %lld cases into %s\n", (long long)a->shard_i,
         (long long)a->shard_n, a->level == -2 ? "all levels" : a->level == -1 ? "L0, L1"
         : kda_level_name(a->level), (long long)n, a->dir);
  return KDA_EXIT_OK;
}

static int cmd_write(const gargs *a);
static int cmd_write_shard(const gargs *a) {
  char err[KDA_ERRLEN];
  int64_t *of = malloc((size_t)kda_catalog_count() * sizeof *of);
  if (!of) return kda_tool_fail(SUB, "out of memory");
  int rc = kda_golden_partition(level_mask(a), a->shard_n, of, err, sizeof err) == KDA_OK
               ? KDA_EXIT_OK : kda_tool_fail(SUB, "%s", err);
  gargs s = *a;
  s.shard_of = of;
  if (rc == KDA_EXIT_OK) rc = cmd_write(&s);
  free(of);
  return rc;
}

static int cmd_merge(const gargs *a) {
  char err[KDA_ERRLEN];
  kda_golden_merge_info m;
  if (kda_golden_merge(a->dir, (const char *const *)a->shards, a->n_shards, &m, err,
                       sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err);
  printf("merged %lld shards: %lld cases, %lld files into %s\n", (long long)m.shards,
         (long long)m.units, (long long)m.files, a->dir);
  kda_golden_merge_info_free(&m);
  return KDA_EXIT_OK;
}

/* The gradient sets (SPEC.md §13.9) go with the committed levels L0 and L1 together. */
static int grad_on(const gargs *a) {
  return !a->shard_n && level_on(a, KDA_LEVEL_L0) && level_on(a, KDA_LEVEL_L1);
}

/* DIR/grad: every gradient case, L0 traces and the level manifests; stale files removed. */
static int write_grad(const char *dir, double *wall) {
  char path[4096], err[KDA_ERRLEN];
  snprintf(path, sizeof path, "%s/grad", dir);
  if (kda_golden_grad_write_all(path, wall, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err);
  for (int32_t l = KDA_LEVEL_L0; l <= KDA_LEVEL_L1; l++) {
    char lp[4200];
    snprintf(lp, sizeof lp, "%s/%s", path, kda_level_name(l));
    DIR *d = opendir(lp);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.' || kda_golden_grad_owns(kda_level_name(l), e->d_name)) continue;
      char f[8192];
      snprintf(f, sizeof f, "%s/%s", lp, e->d_name);
      if (unlink(f) == 0) printf("removed %s (no longer a gradient case)\n", f);
    }
    if (d) closedir(d);
  }
  return KDA_EXIT_OK;
}

static int cmd_write(const gargs *a) {
  kda_golden_set_certifier(a->certifier);
  int64_t n0 = kda_catalog_count();
  int64_t *idx = malloc((size_t)n0 * sizeof *idx);
  kda_golden_info *infos = calloc((size_t)n0, sizeof *infos);
  if (!idx || !infos) {
    free(idx);
    free(infos);
    return kda_tool_fail(SUB, "out of memory");
  }
  int rc = KDA_EXIT_OK, lock = -1;
  char err[KDA_ERRLEN];
  if (make_dirs(a->dir, a) != 0) rc = kda_tool_fail(SUB, "%s: cannot create: %s", a->dir,
                                                    strerror(errno));
  /* one writer at a time; then what a killed run left is stale (kda_files.h) */
  if (rc == KDA_EXIT_OK && kda_dir_lock(a->dir, &lock, err, sizeof err) != KDA_OK)
    rc = kda_tool_fail(SUB, "%s", err);
  if (rc == KDA_EXIT_OK) sweep_tmp(a->dir, a);
  double wall[KDA_LEVEL_COUNT] = {0};
  for (int32_t l = 0; rc == KDA_EXIT_OK && l < KDA_LEVEL_COUNT; l++) {
    if (!level_on(a, l)) continue;
    gargs one = *a;
    one.level = l;
    int64_t n = selected(&one, idx);
    progress pg = {isatty(STDERR_FILENO), kda_level_name(l), 0, n, kda_golden_now()};
    run_cases(idx, n, a->dir, a->jobs, infos, &pg);
    progress_end(&pg);
    wall[l] = kda_golden_now() - pg.t0;
    if (report_failures(infos, idx, n) > 0) rc = KDA_EXIT_USAGE;
  }
  if (a->shard_n) { /* a shard: its manifest instead of the level's (kda_golden_shard.h) */
    if (rc == KDA_EXIT_OK) rc = finish_shard(a, idx, infos);
    free(idx);
    free(infos);
    kda_dir_unlock(lock);
    return rc;
  }
  if (rc == KDA_EXIT_OK) rc = write_manifests(a->dir, a, infos);
  double grad_wall = -1;
  if (rc == KDA_EXIT_OK && grad_on(a)) rc = write_grad(a->dir, &grad_wall);
  for (int32_t l = 0; rc == KDA_EXIT_OK && l < KDA_LEVEL_COUNT; l++)
    if (level_on(a, l) && !kda_level_committed(l) &&
        kda_golden_write_pins(a->dir, l, err, sizeof err) != KDA_OK)
      rc = kda_tool_fail(SUB, "%s", err);
  if (rc == KDA_EXIT_OK) {
    remove_stale(a->dir, a);
    if (kda_golden_write_sums(a->dir, err, sizeof err)) rc = kda_tool_fail(SUB, "%s", err);
  }
  for (int32_t l = 0; rc == KDA_EXIT_OK && l < KDA_LEVEL_COUNT; l++)
    if (level_on(a, l)) print_level_summary(l, infos, wall[l]);
  if (rc == KDA_EXIT_OK && grad_wall >= 0)
    printf("grad: %lld gradient cases (L0, L1) certified and written in %.1f s\n",
           (long long)kda_golden_grad_count(), grad_wall);
  if (rc == KDA_EXIT_OK) printf("wrote %s (jobs %lld; %s)\n", a->dir, (long long)a->jobs,
                                kda_golden_versions());
  free(idx);
  free(infos);
  kda_dir_unlock(lock);
  return rc;
}

/* ---- --verify. */

typedef struct vstate {
  int64_t files, mismatches, notes;
} vstate;

static void mismatch(vstate *v, const char *msg) {
  printf("MISMATCH %s\n", msg);
  v->mismatches++;
}

static void compare_one(vstate *v, const char *committed, const char *fresh, int manifest) {
  char msg[KDA_ERRLEN];
  int rc = manifest ? kda_golden_compare_manifests(fresh, committed, msg, sizeof msg)
                    : kda_golden_compare_files(fresh, committed, msg, sizeof msg);
  v->files++;
  if (rc == 2) {
    printf("note: %s\n", msg);
    v->notes++;
  } else if (rc != 0) {
    mismatch(v, msg);
  }
}

/* Member hashes of every committed case file, and files the catalog does not produce. */
static void check_level_files(const gargs *a, vstate *v) {
  char msg[KDA_ERRLEN], path[4096];
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++) {
    if (!level_on(a, l) || !kda_level_committed(l)) continue;
    snprintf(path, sizeof path, "%s/%s", a->dir, kda_level_name(l));
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
      if (e->d_name[0] != '.' && !kda_golden_owns(l, e->d_name)) {
        snprintf(msg, sizeof msg, "%.300s/%.150s: not produced by the catalog (stale file)",
                 path, e->d_name);
        mismatch(v, msg);
      }
    if (d) closedir(d);
    for (int64_t i = 0; i < kda_catalog_count(); i++) {
      const kda_catalog_entry *c = kda_catalog_get(i);
      if (c->level != l) continue;
      char f[8192];
      snprintf(f, sizeof f, "%s/%s.npz", path, c->id);
      if (kda_golden_check_members(f, msg, sizeof msg) != KDA_OK) mismatch(v, msg);
    }
  }
}

static void compare_levels(const gargs *a, const char *tmp, vstate *v) {
  char c1[8192], c2[8192];
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (!level_on(a, e->level) || !kda_level_committed(e->level)) continue;
    const char *lv = kda_level_name(e->level);
    for (int txt = 0; txt <= (e->level == KDA_LEVEL_L0); txt++) {
      snprintf(c1, sizeof c1, "%s/%s/%s.%s", a->dir, lv, e->id, txt ? "txt" : "npz");
      snprintf(c2, sizeof c2, "%s/%s/%s.%s", tmp, lv, e->id, txt ? "txt" : "npz");
      compare_one(v, c1, c2, 0);
    }
  }
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++) {
    if (!level_on(a, l)) continue;
    if (!kda_level_committed(l)) { /* on demand: the regenerated files against the pins */
      char msg[KDA_ERRLEN];
      snprintf(c1, sizeof c1, "%s/%s.sha256", a->dir, kda_level_name(l));
      int64_t n = 0;
      for (int64_t i = 0; i < kda_catalog_count(); i++) n += kda_catalog_get(i)->level == l;
      v->files += n;
      if (kda_golden_check_pins(c1, tmp, l, msg, sizeof msg) != KDA_OK) mismatch(v, msg);
      continue;
    }
    snprintf(c1, sizeof c1, "%s/%s/manifest.json", a->dir, kda_level_name(l));
    snprintf(c2, sizeof c2, "%s/%s/manifest.json", tmp, kda_level_name(l));
    compare_one(v, c1, c2, 1);
  }
}

/* DIR/grad against a fresh copy: every file byte for byte (the level manifests up to their
 * platform-dependent fields), and no file the gradient sets do not own. */
static void compare_grad(const gargs *a, const char *tmp, vstate *v) {
  char c1[8192], c2[8192], msg[KDA_ERRLEN];
  for (int32_t l = KDA_LEVEL_L0; l <= KDA_LEVEL_L1; l++) {
    const char *lv = kda_level_name(l);
    snprintf(c1, sizeof c1, "%s/grad/%s", a->dir, lv);
    DIR *d = opendir(c1);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
      if (e->d_name[0] != '.' && !kda_golden_grad_owns(lv, e->d_name)) {
        snprintf(msg, sizeof msg, "%.300s/%.150s: not a gradient case (stale file)", c1, e->d_name);
        mismatch(v, msg);
      }
    if (d) closedir(d);
    snprintf(c1, sizeof c1, "%s/grad/%s/manifest.json", a->dir, lv);
    snprintf(c2, sizeof c2, "%s/grad/%s/manifest.json", tmp, lv);
    compare_one(v, c1, c2, 1);
  }
  for (int64_t i = 0; i < kda_golden_grad_count(); i++) {
    const kda_catalog_entry *e = kda_golden_grad_entry(i);
    const char *lv = kda_level_name(e->level);
    for (int txt = 0; txt <= (e->level == KDA_LEVEL_L0); txt++) {
      snprintf(c1, sizeof c1, "%s/grad/%s/%s.%s", a->dir, lv, e->id, txt ? "txt" : "npz");
      snprintf(c2, sizeof c2, "%s/grad/%s/%s.%s", tmp, lv, e->id, txt ? "txt" : "npz");
      if (!txt && kda_golden_check_members(c1, msg, sizeof msg) != KDA_OK) mismatch(v, msg);
      compare_one(v, c1, c2, 0);
    }
  }
}

/* Generator-made case files outside the level directories (such as golden/example). */
static void compare_generated(const char *dir, const char *rel, const char *tmp, vstate *v) {
  char path[4096];
  snprintf(path, sizeof path, "%s%s%s", dir, *rel ? "/" : "", rel);
  DIR *d = opendir(path);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (!*rel && kda_level_parse(e->d_name, NULL) == KDA_OK) continue;
    if (!*rel && strcmp(e->d_name, "grad") == 0) continue; /* compare_grad */
    char sub[4096], full[8192], out[8192], err[KDA_ERRLEN];
    snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
    snprintf(full, sizeof full, "%s/%s", dir, sub);
    struct stat sb;
    if (lstat(full, &sb) != 0) continue;
    if (S_ISDIR(sb.st_mode)) {
      compare_generated(dir, sub, tmp, v);
      continue;
    }
    const size_t L = strlen(e->d_name);
    if (L < 4 || strcmp(e->d_name + L - 4, ".npz") != 0) continue;
    snprintf(out, sizeof out, "%s/generated-%lld.npz", tmp, (long long)v->files);
    int st = kda_golden_regen_generated(full, out, err, sizeof err);
    if (st == KDA_ENOTFOUND) continue;
    if (st != KDA_OK) {
      char msg[KDA_ERRLEN + 64];
      snprintf(msg, sizeof msg, "%.300s: cannot regenerate: %.250s", full, err);
      mismatch(v, msg);
      continue;
    }
    compare_one(v, full, out, 0);
  }
  if (d) closedir(d);
}

static int cmd_verify(const gargs *a) {
  kda_golden_set_certifier(a->certifier);
  char msg[KDA_ERRLEN];
  vstate v = {0, 0, 0};
  const double t0 = kda_golden_now();
  int st = kda_golden_check_sums(a->dir, msg, sizeof msg);
  if (st == KDA_EIO) return kda_tool_fail(SUB, "%s", msg);
  if (st) mismatch(&v, msg);
  check_level_files(a, &v);
  const char *td = getenv("TMPDIR");
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s/kda-golden-verify.XXXXXX", td && *td ? td : "/tmp");
  if (!mkdtemp(tmp)) return kda_tool_fail(SUB, "cannot create a temporary directory: %s",
                                          strerror(errno));
  int64_t n0 = kda_catalog_count();
  int64_t *idx = malloc((size_t)n0 * sizeof *idx);
  kda_golden_info *infos = calloc((size_t)n0, sizeof *infos);
  int rc = !idx || !infos ? kda_tool_fail(SUB, "out of memory") : KDA_EXIT_OK;
  if (rc == KDA_EXIT_OK && make_dirs(tmp, a) != 0)
    rc = kda_tool_fail(SUB, "%s: cannot create: %s", tmp, strerror(errno));
  if (rc == KDA_EXIT_OK) {
    int64_t n = selected(a, idx);
    progress pg = {isatty(STDERR_FILENO), "verify", 0, n, kda_golden_now()};
    run_cases(idx, n, tmp, a->jobs, infos, &pg);
    progress_end(&pg);
    if (report_failures(infos, idx, n) > 0) rc = KDA_EXIT_USAGE;
  }
  if (rc == KDA_EXIT_OK) rc = write_manifests(tmp, a, infos);
  const int grad = grad_on(a);
  if (rc == KDA_EXIT_OK && grad) rc = write_grad(tmp, NULL);
  if (rc == KDA_EXIT_OK) {
    if (grad) compare_grad(a, tmp, &v);
    compare_levels(a, tmp, &v);
    compare_generated(a->dir, "", tmp, &v);
  }
  kda_tool_rm_tree(tmp);
  free(idx);
  free(infos);
  if (rc != KDA_EXIT_OK) return rc;
  printf("kda golden --verify %s: SHA256SUMS and member hashes checked, %lld files regenerated "
         "and compared in %.1f s (jobs %lld): %s\n", a->dir, (long long)v.files, kda_golden_now() - t0, (long long)a->jobs,
         v.mismatches ? "MISMATCH" : "identical");
  return v.mismatches ? KDA_EXIT_CHECK : KDA_EXIT_OK;
}

/* ---- --list. */
/* Case files (*.npz) directly in dir, or -1 when dir is not a directory. */
static int64_t count_cases(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int64_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    n += len > 4 && strcmp(e->d_name + len - 4, ".npz") == 0;
  }
  closedir(d);
  return n;
}

/* Which golden sets the lookup of kda conform and --verify finds (SPEC.md §12.3) and where:
 * "golden sets in DIR (from SOURCE)" and one line per level, or why there are none. */
static void list_sets(void) {
  char dir[4096], sub[4200];
  const char *source;
  if (kda_tool_golden_dir(dir, sizeof dir, &source) != 0) {
    printf("golden sets: none found (%s: %s is not a directory)\n", source, dir);
    return (void)printf("catalog:\n");
  }
  printf("golden sets in %s (from %s):\n", dir, source);
  static const char *const sets[] = {"L0", "L1", "L2", "example"};
  for (int i = 0; i < 4; i++) {
    snprintf(sub, sizeof sub, "%s/%s", dir, sets[i]);
    int64_t n = count_cases(sub);
    if (n >= 0)
      printf("  %-8s present: %lld case file%s in %s\n", sets[i], (long long)n, n == 1 ? "" : "s",
             sub);
    else printf("  %-8s absent%s\n", sets[i],
                i == 2 ? " (made on demand: kda golden --write --level L2)" : "");
  }
  snprintf(sub, sizeof sub, "%s/SHA256SUMS", dir);
  printf("  %-8s %s\n", "SHA256SUMS", access(sub, R_OK) == 0 ? "present" : "absent");
  printf("catalog:\n");
}

/* --where: the one answer to "where are this kda's golden sets" (SPEC.md §12.3), for the
 * Python package and scripts. */
static int cmd_where(void) {
  char dir[4096], abs_dir[PATH_MAX];
  const char *source;
  if (kda_tool_golden_dir(dir, sizeof dir, &source) != 0)
    return kda_tool_fail(SUB, "%s: no golden set there (from %s)", dir, source);
  if (!realpath(dir, abs_dir)) return kda_tool_fail(SUB, "%s: cannot resolve the path", dir);
  printf("%s\n", abs_dir);
  return KDA_EXIT_OK;
}

static int cmd_list(void) {
  list_sets();
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    printf("%s  %-26s ", kda_level_name(e->level), e->id);
    int first = 1;
    for (int f = 0; f < KDA_FLAG_COUNT; f++)
      if (e->flags & (UINT64_C(1) << f)) {
        printf("%s%s", first ? "" : ",", kda_catalog_flag_get(f)->name);
        first = 0;
      }
    printf("%s %s\n", first ? "-" : "", e->comment);
  }
  return KDA_EXIT_OK;
}

/* ---- --bench-step. */
static int bench_case(const gargs *a, kda_case *c, char *err, size_t errlen) {
  char desc[256];
  snprintf(desc, sizeof desc, "seed=1 T=%lld H=1 K=%lld V=%lld gate=softplus beta=logit l2=fla "
           "prec=%s id=bench-step", (long long)a->bT, (long long)a->bK, (long long)a->bV,
           a->bprec);
  kda_gen_desc d;
  int st = kda_gen_parse(desc, &d, err, errlen);
  if (st) return st;
  st = kda_gen_case(&d, c, err, errlen);
  kda_gen_desc_free(&d);
  if (!st) printf("%s: %s\n", a->mode == MODE_BENCH ? "bench-step" : "bench-certify", desc);
  return st;
}

/* The fast certifier's double-double phase alone on c (no MPFR): seconds, values decided. */
static int bench_fast(kda_case *c, kda_tensors_f64 *t, kda_cert_report *r, double *cpu,
                      char *err, size_t errlen) {
  kda_cert_options o;
  kda_cert_options_init(&o);
  o.no_fallback = 1;
  const clock_t c0 = clock();
  int st = kda_cert_forward(&c->p, t, &o, r, NULL, err, errlen);
  *cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
  return st == KDA_ENOTCERT && r->n_values > 0 ? KDA_OK : st; /* undecided values: counted */
}

/* Repeats the float64 reference for about a second; ms per step. */
static int bench_f64(kda_case *c, kda_tensors_f64 *t, double *ms, char *err, size_t errlen) {
  int64_t reps = 0;
  const double t0 = kda_golden_now();
  double tf = 0.0;
  int st = KDA_OK;
  while (!st && (tf < 1.0 || reps < 3)) {
    st = kda_ref_forward_f64(&c->p, t, err, errlen);
    reps++;
    tf = kda_golden_now() - t0;
  }
  *ms = 1e3 * tf / (double)reps / (double)(c->p.T * c->p.HV);
  return st;
}

static void print_fast(const kda_cert_report *f, double cpu, double steps, double fs) {
  const double ms = 1e3 * f->seconds_fast / steps, mc = 1e3 * cpu / steps;
  printf("  fast certifier, double-double phase (1 thread): %.3f s wall, %.3f s CPU = %.3f ms "
         "per step (CPU %.3f) = %.0f float64 steps\n", f->seconds_fast, cpu, ms, mc, ms / fs);
  printf("  fast certifier: %lld of %lld values decided (%.2f%%), largest relative bound %.3g\n",
         (long long)f->n_decided, (long long)f->n_values,
         f->n_values ? 100.0 * (double)f->n_decided / (double)f->n_values : 100.0,
         f->max_rel_bound);
  printf("  projected 2^20-token head: %.0f s of double-double phase (%.0f s from CPU time)\n",
         ms * 1048576e-3, mc * 1048576e-3);
}

static int cmd_bench(const gargs *a) {
  char err[KDA_ERRLEN];
  kda_case c;
  int st = bench_case(a, &c, err, sizeof err);
  if (st) return kda_tool_fail(SUB, "%s", err);
  kda_problem_sizes s;
  kda_problem_sizes_get(&c.p, &s, NULL, 0);
  double *out = calloc((size_t)(s.o + s.ht + 1), sizeof(double));
  kda_tensors_f64 t;
  kda_case_tensors(&c, &t);
  t.o = out;
  t.ht = out + s.o;
  kda_mpfr_report r;
  kda_cert_report f;
  const int with_mpfr = a->mode == MODE_BENCH;
  double t0 = kda_golden_now(), fs = 0.0, cpu = 0.0;
  st = !out ? KDA_ENOMEM : with_mpfr ? kda_mpfr_forward(&c.p, &t, NULL, &r, err, sizeof err)
                                     : KDA_OK;
  const double tm = kda_golden_now() - t0;
  if (!st) st = bench_fast(&c, &t, &f, &cpu, err, sizeof err);
  if (!st) st = bench_f64(&c, &t, &fs, err, sizeof err);
  free(out);
  const double steps = (double)(c.p.T * c.p.HV);
  kda_case_free(&c);
  if (st) return kda_tool_fail(SUB, "%s", st == KDA_ENOMEM ? "out of memory" : err);
  printf("  float64 reference: %.6f ms per step\n", fs);
  if (with_mpfr) {
    const double ms = 1e3 * tm / steps;
    printf("  MPFR, certified (%s, %lld evaluations at %lld and %lld bits): %.3f s = %.3f ms "
           "per step\n", kda_mpfr_method_name(r.method), (long long)r.ziv_rounds,
           (long long)r.prec_check, (long long)r.prec_used, tm, ms);
    printf("  MPFR, per evaluation (average of the %lld): %.3f ms per step\n",
           (long long)r.ziv_rounds, ms / (double)r.ziv_rounds);
    printf("  ratio: one certified MPFR step = %.0f float64 steps; one MPFR evaluation step = "
           "%.0f float64 steps\n", ms / fs, ms / (double)r.ziv_rounds / fs);
    printf("  projected 2^20-token head: %.0f s of MPFR\n", ms * 1048576e-3);
  }
  print_fast(&f, cpu, steps, fs);
  if (with_mpfr)
    printf("  ratio: one certified MPFR step = %.1f double-double steps\n",
           tm / f.seconds_fast);
  return KDA_EXIT_OK;
}

/* ---- --expand: the ordinary case file of a golden case (SPEC.md §10.2). */
static int cmd_expand(const gargs *a) {
  char err[KDA_ERRLEN] = "";
  kda_case c;
  const char *const in[1] = {a->expand};
  int st = kda_output_check(a->output, in, 1, err, sizeof err);
  if (st) return kda_tool_fail(SUB, "%s", err); /* the message names the output */
  st = kda_case_load(a->expand, &c, err, sizeof err);
  if (st) return kda_tool_fail(SUB, "%s", err);
  /* extra_json NULL keeps generator_info; the golden object is not a case manifest key */
  st = kda_case_save(a->output, &c, NULL, err, sizeof err);
  kda_case_free(&c);
  if (st == KDA_EIO && !strstr(err, a->output)) return kda_tool_fail(SUB, "%s: %s", a->output, err);
  if (st) return kda_tool_fail(SUB, "%s", err);
  return KDA_EXIT_OK;
}

int kda_cmd_golden(int argc, char **argv) {
  gargs a;
  int st = parse_args(argc, argv, &a);
  if (st >= 0) return st;
  switch (a.mode) {
  case MODE_WRITE: return a.shard_n ? cmd_write_shard(&a) : cmd_write(&a);
  case MODE_MERGE: return cmd_merge(&a);
  case MODE_VERIFY: return cmd_verify(&a);
  case MODE_LIST: return cmd_list();
  case MODE_WHERE: return cmd_where();
  case MODE_BENCH_CERT: return cmd_bench(&a);
  case MODE_EXPAND: return cmd_expand(&a);
  default: return cmd_bench(&a);
  }
}

/* kda_mpi.c: `kda-mpi golden --write` and `kda-mpi conform`, run by the ranks of an MPI job.
 * SPDX-License-Identifier: MIT
 *
 *   mpirun -np N kda-mpi golden --write [--level L0|L1|L2|all] [--certifier C] DIR
 *   mpirun -np N kda-mpi conform [kda conform options] --out DIR [CASES]
 *
 * Rank 0 hands out the level's cases one at a time, longest first (kda_golden_units_by_cost),
 * to whichever rank asks (itself included: a coordinator thread answers while its main thread
 * certifies).  Each rank makes its cases into its own shard directory
 * DIR/.kda-mpi.tmp.XXXXXX/rank-R (DIR must be on a file system every rank sees) and writes
 * its shard.json (assignment "dynamic"); rank 0 then merges the shards with kda_golden_merge,
 * the code of `kda golden --merge`, so DIR gets the bytes of one `kda golden --write`
 * (docs/scale.md).  A case that fails stops the hand-out; the run then fails with that
 * rank's message on standard error (exit 2, DIR's level untouched).  MPI_Abort is used only
 * when MPI itself fails, after the message is out.
 *
 * conform: rank R runs `kda conform --shard R/N --out DIR/.kda-mpi.tmp.XXXXXX/rank-R` with
 * the other options as given (R/N names the shard; its units are claimed, below) (its standard output into rank-R.log there), and rank 0 merges
 * the shards' reports into DIR as `kda conform --merge` does; the exit status is the run's.
 * The conform units are handed out dynamically too, first come first served: every rank's
 * runner goes through the cases in order and claims each (case, backend) unit from rank 0
 * before scoring it (kda_conform_shard_use_claims), so a rank takes the next unit nobody has
 * taken; the --shard partition is not used.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kda_catalog.h"
#include "kda_cert.h"
#include "kda_golden.h"
#include "kda_golden_shard.h"
#include "kda_conform_shard.h"
#include "kda_tool.h"

#define TAG_ASK 1    /* worker -> rank 0: a done report (index -1 on the first ask) */
#define TAG_GIVE 2   /* rank 0 -> worker: the next catalog index, or -1: stop */
#define TAG_DONE 3   /* worker -> rank 0: the shard is written (status, message) */
#define TAG_CLAIM 4  /* worker -> rank 0: may I score this conform unit? (reply TAG_GIVE) */

/* Requests go to rank 0 on to_root, answers come back on from_root: rank 0's coordinator
 * thread receives from any source with any tag, and must never take an answer meant for
 * rank 0's own main thread (two communicators keep the two directions apart). */
static MPI_Comm to_root, from_root;

static const char help_text[] =
    "Usage: mpirun -np N kda-mpi golden --write [--level L0|L1|L2|all] [--certifier C] DIR\n"
    "       mpirun -np N kda-mpi conform [kda conform options] --out DIR [CASES]\n"
    "\n"
    "Makes the golden cases of the level (default: the committed levels L0 and L1) with the\n"
    "ranks of an MPI job and writes DIR as one `kda golden --write DIR` does, byte for byte\n"
    "(docs/scale.md).  Rank 0 hands out the cases longest first; each rank writes a shard\n"
    "into DIR/.kda-mpi.tmp.*/rank-R (DIR must be on a file system every rank sees); rank 0\n"
    "merges them as `kda golden --merge` does and removes them.\n"
    "\n"
    "  -l, --level L       L0, L1, L2 or all\n"
    "  -c, --certifier C   fast (default) or mpfr (the same bytes)\n"
    "  -h, --help          print this help and exit\n"
    "\n"
    "conform: every rank runs kda conform with the options given, taking each (case,\n"
    "backend) unit nobody has taken yet (rank 0 grants them, first come first served), into\n"
    "DIR/.kda-mpi.tmp.*/rank-R; rank 0 merges the reports into DIR as `kda conform --merge`\n"
    "does (results.jsonl, summary.json, junit.xml) and exits with the run's status.\n"
    "\n"
    "Exit status: 0 written (conform: the run's status, 0, 1 or 5, as kda conform's); 2 usage\n"
    "error, I/O error, a case that could not be made or a rank whose kda conform failed (the\n"
    "rank and its message on standard error).\n";

/* What a worker tells rank 0 (plain bytes: the same binary on every rank). */
typedef struct report {
  int64_t index;   /* the case just made, -1 for none */
  int32_t status;  /* KDA_OK or the failure */
  int32_t rank;
  char message[512];
} report;

typedef struct run {
  int rank, size;
  uint32_t mask;
  const char *dir;
  char tmp[4096];     /* DIR/.kda-mpi.tmp.XXXXXX (the same on every rank) */
  int64_t *order, n;  /* rank 0: the cases, longest first */
  report first_bad;   /* rank 0: the first failure */
} run;

static void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kda-mpi: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
}

/* MPI failing is the one thing not recoverable: message out, then abort. */
static void mpi_check(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return;
  say("MPI failed in %s (error %d); aborting the job", what, rc);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

/* ---- Rank 0's coordinator thread: answers asks until every rank has been told to stop and
 * has reported its shard. */
static void *coordinate(void *arg) {
  run *r = arg;
  int64_t next = 0;
  int finished = 0;
  while (finished < r->size) {
    report in;
    MPI_Status st;
    mpi_check(MPI_Recv(&in, (int)sizeof in, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, to_root,
                       &st), "MPI_Recv");
    if (in.status != KDA_OK && r->first_bad.status == KDA_OK) r->first_bad = in;
    if (st.MPI_TAG == TAG_DONE) {
      finished++;
      continue;
    }
    int64_t give = r->first_bad.status == KDA_OK && next < r->n ? r->order[next++] : -1;
    mpi_check(MPI_Send(&give, 1, MPI_INT64_T, st.MPI_SOURCE, TAG_GIVE, from_root), "MPI_Send");
  }
  return NULL;
}

/* ---- Every rank: ask, make, report, until told to stop; then write the shard. */
static int make_dirs(const char *dir, uint32_t mask) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++) {
    char p[4600];
    snprintf(p, sizeof p, "%s/%s", dir, kda_level_name(l));
    if ((mask & (UINT32_C(1) << l)) && mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
  }
  return 0;
}

static void work(run *r) {
  char shard[4400];
  snprintf(shard, sizeof shard, "%s/rank-%d", r->tmp, r->rank);
  const int64_t nc = kda_catalog_count();
  int64_t *mine = malloc((size_t)nc * sizeof *mine), nm = 0;
  kda_golden_info *infos = calloc((size_t)nc, sizeof *infos);
  report out = {-1, KDA_OK, r->rank, ""};
  if (!mine || !infos) out.status = KDA_ENOMEM, snprintf(out.message, sizeof out.message,
                                                         "out of memory");
  else if (make_dirs(shard, r->mask) != 0)
    out.status = KDA_EIO, snprintf(out.message, sizeof out.message, "%.400s: cannot create: %s",
                                   shard, strerror(errno));
  for (;;) {
    int64_t give;
    mpi_check(MPI_Send(&out, (int)sizeof out, MPI_BYTE, 0, TAG_ASK, to_root), "MPI_Send");
    mpi_check(MPI_Recv(&give, 1, MPI_INT64_T, 0, TAG_GIVE, from_root, MPI_STATUS_IGNORE),
              "MPI_Recv");
    if (give < 0 || give >= nc) break;
    char err[KDA_ERRLEN];
    out.index = give;
    out.status = kda_golden_make(kda_catalog_get(give), shard, &infos[give], err, sizeof err);
    snprintf(out.message, sizeof out.message, "%s", out.status ? err : "");
    if (out.status == KDA_OK) mine[nm++] = give;
  }
  if (out.status == KDA_OK) { /* the last case made is reported; now the shard */
    char err[KDA_ERRLEN];
    out.index = -1;
    out.status = kda_golden_shard_finish(shard, r->mask, r->rank, r->size, "dynamic", mine, nm,
                                         infos, err, sizeof err);
    snprintf(out.message, sizeof out.message, "%s", out.status ? err : "");
  } else {
    out.status = KDA_OK; /* reported already with the failed case */
    out.message[0] = '\0';
  }
  mpi_check(MPI_Send(&out, (int)sizeof out, MPI_BYTE, 0, TAG_DONE, to_root), "MPI_Send");
  free(mine);
  free(infos);
}

/* ---- Rank 0 at the end: merge, clean up. */

static int merge(run *r) {
  char **shards = malloc((size_t)r->size * sizeof *shards), err[KDA_ERRLEN];
  int rc = shards ? 0 : 2;
  for (int k = 0; !rc && k < r->size; k++) {
    shards[k] = malloc(4400);
    if (!shards[k]) rc = 2;
    else snprintf(shards[k], 4400, "%s/rank-%d", r->tmp, k);
  }
  kda_golden_merge_info m;
  if (!rc && kda_golden_merge(r->dir, (const char *const *)shards, r->size, &m, err,
                              sizeof err) != KDA_OK) {
    say("%s", err);
    rc = 2;
  } else if (!rc) {
    printf("kda-mpi: %d ranks made %lld cases; merged into %s\n", r->size, (long long)m.units,
           r->dir);
    kda_golden_merge_info_free(&m);
  } else {
    say("out of memory");
  }
  for (int k = 0; shards && k < r->size; k++) free(shards[k]);
  free(shards);
  return rc;
}

/* ---- Arguments (every rank parses the same argv). */
static int parse(int argc, char **argv, run *r, int32_t *certifier, int quiet) {
  static const struct option longopts[] = {{"write", no_argument, NULL, 'w'},
                                           {"level", required_argument, NULL, 'l'},
                                           {"certifier", required_argument, NULL, 'c'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int write = 0, c;
  int32_t level = -1;
  opterr = 0;
  if (argc < 2 || strcmp(argv[1], "golden") != 0) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
      if (!quiet) fputs(help_text, stdout);
      return -1;
    }
    if (!quiet) say("usage: kda-mpi golden --write [--level L] [--certifier C] DIR (try "
                    "'kda-mpi --help')");
    return 2;
  }
  optind = 2;
  while ((c = getopt_long(argc, argv, ":l:c:h", longopts, NULL)) != -1) {
    if (c == 'w') write = 1;
    else if (c == 'h') {
      if (!quiet) fputs(help_text, stdout);
      return -1;
    } else if (c == 'l' && !strcmp(optarg, "all")) level = -2;
    else if (c == 'l' && kda_level_parse(optarg, &level) == KDA_OK) {
    } else if (c == 'c' && (*certifier = kda_cert_certifier_parse(optarg)) >= 0 &&
               (*certifier == KDA_CERTIFIER_FAST || *certifier == KDA_CERTIFIER_MPFR)) {
    } else {
      if (!quiet) say("bad option or value '%s' (try 'kda-mpi --help')", argv[optind - 1]);
      return 2;
    }
  }
  if (!write || optind != argc - 1) {
    if (!quiet) say("give --write and one DIR (try 'kda-mpi --help')");
    return 2;
  }
  r->dir = argv[optind];
  r->mask = 0;
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++)
    if (level == -2 || level == l || (level == -1 && kda_level_committed(l)))
      r->mask |= UINT32_C(1) << l;
  return 0;
}

/* Rank 0 makes DIR and the temporary directory and lists the cases; the name goes to every
 * rank (empty: failed, the message is out). */
static int setup(run *r) {
  int ok = 1;
  if (r->rank == 0) {
    const int64_t nc = kda_catalog_count();
    snprintf(r->tmp, sizeof r->tmp, "%s/.kda-mpi.tmp.XXXXXX", r->dir);
    if ((mkdir(r->dir, 0755) != 0 && errno != EEXIST) || !mkdtemp(r->tmp)) {
      say("%s: cannot create: %s", r->tmp, strerror(errno));
      ok = 0;
    }
    r->order = malloc((size_t)nc * sizeof *r->order);
    if (ok && (!r->order || (r->n = kda_golden_units_by_cost(r->mask, r->order)) < 0)) {
      say("out of memory");
      ok = 0;
    }
    if (!ok) r->tmp[0] = '\0';
  }
  mpi_check(MPI_Bcast(r->tmp, (int)sizeof r->tmp, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return r->tmp[0] ? 0 : 2;
}


/* ---- conform. */
int kda_cmd_conform(int argc, char **argv);           /* tools/kda_cmd_conform.c */

/* The --out DIR of the conform options; argv without it goes to out_args. */
static const char *conform_out(int argc, char **argv, char **out_args, int *n) {
  const char *out = NULL;
  *n = 0;
  for (int k = 1; k < argc; k++) {
    if ((!strcmp(argv[k], "--out") || !strcmp(argv[k], "-o")) && k + 1 < argc) out = argv[++k];
    else if (!strncmp(argv[k], "--out=", 6)) out = argv[k] + 6;
    else out_args[(*n)++] = argv[k];
  }
  return out;
}

/* Rank 0's coordinator for conform: each unit to the first rank that claims it. */
static void *coordinate_claims(void *arg) {
  run *r = arg;
  uint8_t *taken = NULL;
  int64_t cap = 0;
  int finished = 0;
  while (finished < r->size) {
    int64_t u;
    MPI_Status st;
    mpi_check(MPI_Recv(&u, 1, MPI_INT64_T, MPI_ANY_SOURCE, MPI_ANY_TAG, to_root, &st),
              "MPI_Recv");
    if (st.MPI_TAG == TAG_DONE) {
      finished++;
      continue;
    }
    int64_t yes = 0;
    if (u >= 0 && u >= cap) { /* the plan's size is the runner's: grow as units come */
      int64_t nc = cap ? cap : 1024;
      while (nc <= u) nc *= 2;
      uint8_t *t = realloc(taken, (size_t)nc);
      if (t) memset(t + cap, 0, (size_t)(nc - cap)), taken = t, cap = nc;
    }
    if (u >= 0 && u < cap && !taken[u]) taken[u] = 1, yes = 1;
    mpi_check(MPI_Send(&yes, 1, MPI_INT64_T, st.MPI_SOURCE, TAG_GIVE, from_root), "MPI_Send");
  }
  free(taken);
  return NULL;
}

static int claim_unit(void *ctx, int64_t unit) {
  int64_t yes = 0;
  (void)ctx;
  mpi_check(MPI_Send(&unit, 1, MPI_INT64_T, 0, TAG_CLAIM, to_root), "MPI_Send");
  mpi_check(MPI_Recv(&yes, 1, MPI_INT64_T, 0, TAG_GIVE, from_root, MPI_STATUS_IGNORE),
            "MPI_Recv");
  return yes == 1;
}

static int conform_rank(run *r, char **args, int na) {
  char shard[4400], log[4500], spec[64];
  snprintf(shard, sizeof shard, "%s/rank-%d", r->tmp, r->rank);
  snprintf(log, sizeof log, "%s/rank-%d.log", r->tmp, r->rank);
  snprintf(spec, sizeof spec, "%d/%d", r->rank, r->size);
  char **av = malloc((size_t)(na + 6) * sizeof *av);
  if (!av) return say("rank %d: out of memory", r->rank), 2;
  int n = 0;
  av[n++] = "conform";
  for (int k = 0; k < na; k++) av[n++] = args[k];
  av[n++] = "--shard", av[n++] = spec, av[n++] = "--out", av[n++] = shard;
  av[n] = NULL;
  fflush(stdout);
  int keep = dup(STDOUT_FILENO); /* the shard's lines go to its log, not the terminal */
  FILE *f = freopen(log, "w", stdout);
  optind = 1;
  int rc = f ? kda_cmd_conform(n, av) : 2;
  fflush(stdout);
  if (keep >= 0) dup2(keep, STDOUT_FILENO), close(keep);
  free(av);
  return rc;
}

static int conform_merge(run *r, const char *out) {
  char **av = malloc((size_t)(r->size + 4) * sizeof *av);
  int rc = 2;
  if (av) {
    av[0] = "conform", av[1] = "--merge", av[2] = (char *)out;
    for (int k = 0; k < r->size; k++) {
      av[3 + k] = malloc(4400);
      if (av[3 + k]) snprintf(av[3 + k], 4400, "%s/rank-%d", r->tmp, k);
    }
    rc = kda_conform_merge_main(r->size + 3, av);
    for (int k = 0; k < r->size; k++) free(av[3 + k]);
    free(av);
  }
  return rc;
}

static int conform_main(run *r, int argc, char **argv) {
  char **args = malloc((size_t)argc * sizeof *args);
  int na = 0;
  const char *out = args ? conform_out(argc, argv, args, &na) : NULL;
  if (!out) {
    if (r->rank == 0) say("conform needs --out DIR (try 'kda-mpi --help')");
    free(args);
    return 2;
  }
  r->dir = out;
  int rc = setup(r);
  pthread_t th;
  if (!rc && r->rank == 0 && pthread_create(&th, NULL, coordinate_claims, r) != 0) {
    say("cannot start the coordinator thread");
    MPI_Abort(MPI_COMM_WORLD, 2); /* the other ranks wait for it: nothing else ends them */
  }
  kda_conform_shard_use_claims(claim_unit, NULL);
  int mine = rc ? rc : conform_rank(r, args, na), worst = 0, bad_rank = -1;
  int64_t done = -1;
  if (!rc) mpi_check(MPI_Send(&done, 1, MPI_INT64_T, 0, TAG_DONE, to_root), "MPI_Send");
  if (!rc && r->rank == 0) pthread_join(th, NULL);
  int *all = r->rank == 0 ? calloc((size_t)r->size, sizeof *all) : NULL;
  mpi_check(MPI_Gather(&mine, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  if (r->rank == 0 && !rc) {
    for (int k = 0; all && k < r->size; k++)
      if (all[k] > 1 && all[k] != 5 && bad_rank < 0) worst = all[k], bad_rank = k;
    if (bad_rank >= 0) {
      say("rank %d: kda conform failed (exit status %d; its message is above, its output in "
          "%s/rank-%d.log)", bad_rank, worst, r->tmp, bad_rank);
      rc = 2;
    } else {
      rc = conform_merge(r, out);
      kda_tool_rm_tree(r->tmp);
    }
  }
  free(all);
  free(args);
  return rc;
}

int main(int argc, char **argv) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    say("MPI_Init_thread failed");
    return 2;
  }
  kda_tool_add_backends();
  run r;
  memset(&r, 0, sizeof r);
  MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r.size);
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &to_root), "MPI_Comm_dup");
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &from_root), "MPI_Comm_dup");
  int32_t certifier = KDA_CERTIFIER_FAST;
  if (argc >= 2 && strcmp(argv[1], "conform") == 0) {
    int all = conform_main(&r, argc - 1, argv + 1);
    MPI_Bcast(&all, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(r.order);
    MPI_Finalize();
    return all;
  }
  int rc = parse(argc, argv, &r, &certifier, r.rank != 0);
  if (rc == 0 && provided < MPI_THREAD_MULTIPLE) {
    if (r.rank == 0) say("the MPI library gives no MPI_THREAD_MULTIPLE (rank 0's coordinator "
                         "thread needs it)");
    rc = 2;
  }
  if (rc == 0) kda_golden_set_certifier(certifier);
  if (rc == 0) rc = setup(&r);
  if (rc == 0) {
    pthread_t th;
    if (r.rank == 0 && pthread_create(&th, NULL, coordinate, &r) != 0) {
      say("cannot start the coordinator thread");
      MPI_Abort(MPI_COMM_WORLD, 2); /* the other ranks wait for it: nothing else ends them */
    }
    work(&r);
    if (r.rank == 0) {
      pthread_join(th, NULL);
      if (r.first_bad.status != KDA_OK) {
        say("rank %d: %s", r.first_bad.rank, r.first_bad.message);
        rc = 2;
      } else {
        rc = merge(&r);
      }
      kda_tool_rm_tree(r.tmp);
    }
  }
  int all = rc < 0 ? 0 : rc; /* every rank exits with rank 0's status */
  MPI_Bcast(&all, 1, MPI_INT, 0, MPI_COMM_WORLD);
  free(r.order);
  MPI_Finalize();
  return all;
}

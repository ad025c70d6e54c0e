/* kda_worker.c: a persistent, isolated backend worker: one child process per (backend,
 * parameters) serving many calls over a socket and a shared memory region (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 *
 * The runner (parent) forks the worker once; the worker puts itself in its own process group,
 * asks for SIGKILL when the runner dies, forks a guard that kills the whole group when the
 * runner's end of a pipe closes (so that the backend's own children die with the runner
 * too), redirects stdout/stderr into a pipe the parent drains, and only then loads the plugin
 * (dlopen), asks its variant slot for the class and element types of the parameters, and sends
 * the table's identity back with them.  Requests: OPEN (a handle for one case), CALL
 * (supports and forward on buffers in the shared region), CLOSE.  The parent bounds every wait
 * with poll; end-of-file or a short message means the worker died: the parent kills its
 * process group, reaps it with a bounded wait, reports Crash or Timeout with the stage, and
 * starts a fresh worker on the next call.  The parent, not the worker, checks what the worker
 * cannot be trusted to: the canary bytes before each output's guard page, and every input
 * (floats and index arrays) bit for bit.
 */
#define _GNU_SOURCE /* memfd_create */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fenv.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kda_conform.h"
#include "kda_dtype.h"

/* RLIMIT_AS cannot coexist with AddressSanitizer, which reserves terabytes of shadow address
 * space at start-up: under ASan the limit is skipped (kda_worker_limits_memory says 0). */
#if defined(__SANITIZE_ADDRESS__)
#define KDA_WORKER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KDA_WORKER_ASAN 1
#endif
#endif
#ifndef KDA_WORKER_ASAN
#define KDA_WORKER_ASAN 0
#endif

#define CANARY 0xA5
#define AUTO_ALLOWANCE ((uint64_t)4 << 30) /* fixed part of the automatic memory limit */
#define AUTO_FACTOR 16                     /* times the case's buffers */
/* The PROT_NONE guard after each output is at least the output's own size and at least this
 * (SPEC.md §7.8): a write far past the end faults too, not only one into the next page. */
#define GUARD_MIN ((size_t)2 << 20)
#define REAP_S 5.0                         /* bounded wait for a killed process */
#define EXIT_GRACE_S 1.0                   /* after EOF, time for the worker to finish dying */

/* ---- The floating-point control state that a backend must leave unchanged (SPEC.md §7.8). */
typedef struct fpctl {
  int round;
  unsigned mxcsr; /* control bits only: DAZ, masks, rounding, FTZ */
  unsigned x87;   /* x87 control word */
} fpctl;

static void fpctl_get(fpctl *f) {
  memset(f, 0, sizeof *f);
  f->round = fegetround();
#if defined(__x86_64__) || defined(__i386__)
  unsigned m = 0;
  unsigned short cw = 0;
  __asm__ volatile("stmxcsr %0" : "=m"(m));
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  f->mxcsr = m & 0xFFC0u;
  f->x87 = cw;
#endif
}

static void fpctl_set(const fpctl *f) {
  fesetround(f->round);
#if defined(__x86_64__) || defined(__i386__)
  unsigned m = 0;
  __asm__ volatile("stmxcsr %0" : "=m"(m));
  m = (m & 0x3Fu) | f->mxcsr;
  unsigned short cw = (unsigned short)f->x87;
  __asm__ volatile("ldmxcsr %0" : : "m"(m));
  __asm__ volatile("fldcw %0" : : "m"(cw));
#endif
}

/* What changed, for the message: "MXCSR 0x1f80 -> 0x9fc0 (FTZ DAZ)". */
static void fpctl_diff(const fpctl *a, const fpctl *b, char *buf, size_t cap) {
  if (a->mxcsr != b->mxcsr)
    snprintf(buf, cap, "MXCSR 0x%x -> 0x%x%s%s%s", a->mxcsr, b->mxcsr,
             ((a->mxcsr ^ b->mxcsr) & 0x8000u) ? " FTZ" : "",
             ((a->mxcsr ^ b->mxcsr) & 0x0040u) ? " DAZ" : "",
             ((a->mxcsr ^ b->mxcsr) & 0x6000u) ? " rounding" : "");
  else if (a->round != b->round)
    snprintf(buf, cap, "rounding mode %d -> %d", a->round, b->round);
  else
    snprintf(buf, cap, "x87 control word 0x%x -> 0x%x", a->x87, b->x87);
}

/* ---- Protocol: fixed-size messages on a stream socket. */
#define MAGIC 0x4B444157u /* "KDAW" */
enum { RQ_OPEN = 1, RQ_CALL, RQ_CLOSE, RQ_DESCRIBE, RP_INFO, RP_DONE };
enum { ST_NONE, ST_LOAD, ST_OPEN, ST_SUPPORTS, ST_FORWARD, ST_CLOSE, ST_VARIANT,
       ST_BUF_CREATE, ST_BUF_FORWARD, ST_BUF_SYNC, ST_BUF_READ, ST_BUF_DESTROY, ST_LAST };
static const char *const stage_names[ST_LAST] = {
    "the worker", "load", "open", "supports", "forward", "close", "variant",
    "buffers_create", "forward_buffers", "synchronize", "buffers_read", "buffers_destroy"};

/* Offsets in the shared region of q k v g beta A_log dt_bias h0, cu_seqlens, checkpoints,
 * state_indices (inputs), o ht hc (outputs) and the pool (both); -1 when absent. */
#define N_FIN 8
#define B_CU 8
#define B_CK 9
#define B_IDX 10
#define B_O 11
#define B_POOL 14
#define N_BUF 15
#define N_GUARD 4 /* o ht hc pool: each ends before a guard page */
static const char *const buf_names[N_BUF] = {
    "q", "k", "v", "g", "beta", "A_log", "dt_bias", "h0", "cu_seqlens", "checkpoints",
    "state_indices", "o", "ht", "hc", "pool"};

typedef struct wreq {
  uint32_t magic;
  int32_t type;
  uint64_t map_size;
  int64_t mem_limit;     /* bytes; 0 automatic; -1 none */
  int64_t off[N_BUF];
  uint64_t len[N_BUF];   /* bytes */
  int64_t guard[N_GUARD]; /* offset of the PROT_NONE guard after o, ht, hc, pool (-1: none) */
  uint64_t guard_len[N_GUARD]; /* its length in bytes: guard_size() of the output's length */
  int64_t pool_slots;     /* S of a pool call (SPEC.md §7.8), 0 otherwise */
  int32_t resident;       /* 1: through the resident-buffer slots, not forward (§7.8) */
  int32_t reserved0;
  kda_problem p;
  char params[1024];
} wreq;

typedef struct wrep {
  uint32_t magic;
  int32_t type, outcome, status, stage, cls, in_dtype, out_dtype;
  uint32_t abi_version, struct_size;
  uint32_t caps;    /* RP_INFO: the table's caps (0 when it has none) */
  int32_t rejected; /* RP_INFO: 1 when the variant slot rejected the parameters (EINVAL) */
  int32_t resident; /* RP_INFO: 1 when the table has the resident-buffer slots */
  int32_t reserved0;
  double seconds;
  char name[64], desc[256];
  char msg[KDA_ERRLEN];
  kda_backend_info info; /* RQ_DESCRIBE */
} wrep;

/* The first page of the region: written by the worker, read by the parent after a death. */
typedef struct shm_hdr {
  volatile int32_t stage;
  volatile int32_t fault_sig;
  volatile uint64_t fault_addr;
  volatile uint64_t child_base; /* where the worker mapped the region */
  volatile uint64_t mem_limit;  /* the address-space limit in force (0: none) */
} shm_hdr;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sends n bytes; with limit_s > 0 the wait for room in the socket is bounded too. */
static int send_all(int fd, const void *buf, size_t n, double limit_s) {
  const char *p = buf;
  double deadline = now_s() + limit_s;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL | (limit_s > 0 ? MSG_DONTWAIT : 0));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      double left = deadline - now_s();
      struct pollfd pf = {fd, POLLOUT, 0};
      if (left <= 0 || poll(&pf, 1, (int)(left * 1000.0) + 1) < 0) return -1;
      continue;
    }
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* ---- The worker's side. */
static shm_hdr *volatile g_hdr; /* the region's first page, for the fault handler */

typedef struct wchild {
  const kda_backend *b;
  int32_t in_dtype, out_dtype; /* the variant's (SPEC.md §7.8), else the table's */
  void *handle;
  int ctl, memfd;
  unsigned char *map;
  size_t map_size;
  int isolated; /* 0: served in the runner's process (--no-isolate) */
} wchild;


static void on_fault(int sig, siginfo_t *si, void *uc) {
  shm_hdr *h = g_hdr;
  if (h) h->fault_sig = sig, h->fault_addr = (uint64_t)(uintptr_t)si->si_addr;
  /* SA_RESETHAND restored the default action: returning re-executes the faulting access. */
  if (si->si_code <= 0) raise(sig);
}

static void rep_set(wrep *a, int32_t outcome, int32_t status, const char *fmt, const char *x,
                    const char *y) {
  a->outcome = outcome;
  a->status = status;
  snprintf(a->msg, sizeof a->msg, fmt, x ? x : "", y ? y : "");
}

/* 1 (and the reply set to FPENV) when entry changed the environment; restores it. */
static int fp_check(const fpctl *before, const char *entry, wrep *a) {
  fpctl after;
  fpctl_get(&after);
  if (memcmp(before, &after, sizeof after) == 0) return 0;
  char d[128];
  fpctl_diff(before, &after, d, sizeof d);
  fpctl_set(before);
  rep_set(a, KDA_CALL_FPENV, KDA_OK, "%s changed the floating-point environment (%s)", entry, d);
  return 1;
}

static void set_stage(wchild *c, int32_t st) {
  if (c->map) ((shm_hdr *)c->map)->stage = st;
}

/* The automatic limit: the address space now, plus a generous multiple of this call's
 * buffers, plus a fixed allowance (threads' stacks and malloc arenas reserve address space
 * they never touch).  Applied from supports on, so that a device runtime's reservations in
 * open are not counted against the case. */
static void apply_limit(const wreq *q) {
  if (KDA_WORKER_ASAN || q->mem_limit < 0 || !(q->type == RQ_CALL || q->mem_limit > 0)) return;
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0) return;
  uint64_t want = (uint64_t)q->mem_limit;
  if (q->mem_limit == 0) {
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%llu", &pages) != 1) pages = 0;
    if (f) fclose(f);
    uint64_t guards = 0; /* reserved address space, counted once, not AUTO_FACTOR times */
    for (int b = 0; b < N_GUARD; b++) guards += q->guard_len[b];
    uint64_t bufs = q->map_size > guards ? q->map_size - guards : 0;
    want = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE) + AUTO_FACTOR * bufs + guards +
           AUTO_ALLOWANCE;
  }
  rl.rlim_cur = (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max) ? rl.rlim_max : want;
  if (setrlimit(RLIMIT_AS, &rl) == 0 && g_hdr) g_hdr->mem_limit = rl.rlim_cur;
}

/* Just before backend code runs: its memory limit, the FP environment it must leave as it
 * found it (fp_check), and the stage a crash or timeout is reported in. */
static void enter_backend(wchild *c, const wreq *q, fpctl *before, int32_t stage) {
  if (c->isolated) apply_limit(q);
  fpctl_get(before);
  set_stage(c, stage);
}

static void serve_open(wchild *c, const wreq *q, wrep *a) {
  char msg[KDA_ERRLEN] = "";
  fpctl before;
  enter_backend(c, q, &before, ST_OPEN);
  int32_t st = c->b->open(q->params, &c->handle, msg, sizeof msg);
  msg[sizeof msg - 1] = 0;
  if (fp_check(&before, "open", a)) return;
  if (st != KDA_OK) {
    c->handle = NULL;
    rep_set(a, st == KDA_EUNSUPPORTED ? KDA_CALL_UNSUPPORTED : KDA_CALL_ERROR, st,
            "open failed: %.480s%s", msg, NULL);
    return;
  }
  rep_set(a, KDA_CALL_OK, KDA_OK, "%s%s", NULL, NULL);
}

/* (Re)maps the region when its size changed and puts the guard pages in place. */
static int child_map(wchild *c, const wreq *q) {
  if (c->map_size != q->map_size) {
    if (c->map) munmap(c->map, c->map_size);
    c->map = mmap(NULL, q->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
    if (c->map == MAP_FAILED) return c->map = NULL, c->map_size = 0, -1;
    c->map_size = q->map_size;
    g_hdr = (shm_hdr *)c->map;
  }
  if (mprotect(c->map, c->map_size, PROT_READ | PROT_WRITE) != 0) return -1;
  for (int b = 0; b < N_GUARD; b++)
    if (q->guard[b] >= 0 && mprotect(c->map + q->guard[b], (size_t)q->guard_len[b], PROT_NONE))
      return -1;
  ((shm_hdr *)c->map)->child_base = (uint64_t)(uintptr_t)c->map;
  return 0;
}

/* A slot's failure as the reply: NotSupported for KDA_EUNSUPPORTED, else an error, with the
 * backend's last_error. */
static void slot_failed(wchild *c, wrep *a, const char *slot, int32_t st) {
  const char *le = c->b->last_error(c->handle);
  char why[400];
  snprintf(why, sizeof why, "%s returned %s: %s", slot, kda_strstatus(st), le ? le : "");
  rep_set(a, st == KDA_EUNSUPPORTED ? KDA_CALL_UNSUPPORTED : KDA_CALL_ERROR, st, "%s%s", why,
          NULL);
}

/* forward on the region's buffers, timed. */
static int32_t call_forward(wchild *c, const wreq *q, kda_backend_tensors *t, wrep *a) {
  set_stage(c, ST_FORWARD);
  double t0 = now_s();
  int32_t st = c->b->forward(c->handle, &q->p, t);
  a->seconds = now_s() - t0;
  if (st != KDA_OK) slot_failed(c, a, "forward", st);
  return st;
}

/* The resident path (SPEC.md §7.8): buffers_create from the region's inputs, forward_buffers
 * and synchronize (timed, as `kda bench` times them), buffers_read into the region's outputs,
 * buffers_destroy; each in a stage of its own. */
static int32_t call_resident(wchild *c, const wreq *q, kda_backend_tensors *t, wrep *a) {
  void *bufs = NULL;
  set_stage(c, ST_BUF_CREATE);
  int32_t st = c->b->buffers_create(c->handle, &q->p, t, &bufs);
  if (st != KDA_OK) return slot_failed(c, a, "buffers_create", st), st;
  set_stage(c, ST_BUF_FORWARD);
  double t0 = now_s();
  const char *slot = "forward_buffers";
  st = c->b->forward_buffers(c->handle, &q->p, bufs);
  set_stage(c, ST_BUF_SYNC);
  if (st == KDA_OK) slot = "synchronize", st = c->b->synchronize(c->handle);
  a->seconds = now_s() - t0;
  set_stage(c, ST_BUF_READ);
  if (st == KDA_OK) slot = "buffers_read", st = c->b->buffers_read(c->handle, bufs, t);
  if (st != KDA_OK) slot_failed(c, a, slot, st);
  set_stage(c, ST_BUF_DESTROY);
  c->b->buffers_destroy(c->handle, bufs);
  return st;
}

/* 1 when the table has the resident-buffer slots (validated: all or none, with synchronize). */
static int has_resident(const kda_backend *b) {
  return KDA_BACKEND_HAS(b, synchronize) && b->buffers_create && b->forward_buffers &&
         b->buffers_read && b->buffers_destroy && b->synchronize;
}

static void serve_call(wchild *c, const wreq *q, wrep *a) {
  if (c->isolated && child_map(c, q) != 0)
    return rep_set(a, KDA_CALL_ERROR, KDA_ENOMEM, "worker: cannot map the buffers%s%s", 0, 0);
  void *x[N_BUF];
  for (int b = 0; b < N_BUF; b++) x[b] = q->off[b] >= 0 ? c->map + q->off[b] : NULL;
  kda_backend_tensors t = {sizeof t, c->in_dtype, c->out_dtype, 0,
                           x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7],
                           x[B_CU], x[B_CK], x[B_O], x[B_O + 1], x[B_O + 2],
                           x[B_IDX], q->pool_slots, x[B_POOL]};
  if (x[B_IDX] && !(KDA_BACKEND_HAS(c->b, caps) && (c->b->caps & KDA_CAP_STATE_POOL)))
    return rep_set(a, KDA_CALL_UNSUPPORTED, KDA_EUNSUPPORTED, "no state pools (caps)%s%s", 0, 0);
  char msg[KDA_ERRLEN] = "";
  fpctl before;
  enter_backend(c, q, &before, ST_SUPPORTS);
  int32_t st = c->b->supports(c->handle, &q->p, msg, sizeof msg);
  msg[sizeof msg - 1] = 0;
  if (fp_check(&before, "supports", a)) return;
  if (st != KDA_OK)
    return rep_set(a, KDA_CALL_UNSUPPORTED, st, "%s%s", msg[0] ? msg : "not supported", NULL);
  const int resident = q->resident && !x[B_IDX] && has_resident(c->b);
  st = resident ? call_resident(c, q, &t, a) : call_forward(c, q, &t, a);
  set_stage(c, ST_NONE);
  if (fp_check(&before, resident ? "the resident path" : "forward", a) || st != KDA_OK) return;
  rep_set(a, KDA_CALL_OK, KDA_OK, "%s%s", NULL, NULL);
}

/* describe (ABI version 2, optional): KDA_CALL_UNSUPPORTED when the table has none. */
static void serve_describe(wchild *c, wrep *a) {
  memset(&a->info, 0, sizeof a->info);
  a->info.struct_size = sizeof a->info;
  if (!KDA_BACKEND_HAS(c->b, describe) || !c->b->describe)
    return rep_set(a, KDA_CALL_UNSUPPORTED, KDA_EUNSUPPORTED, "no describe%s%s", 0, 0);
  fpctl before;
  fpctl_get(&before);
  int32_t st = c->b->describe(c->handle, &a->info);
  if (fp_check(&before, "describe", a)) return;
  if (st != KDA_OK) return rep_set(a, KDA_CALL_ERROR, st, "describe failed%s%s", 0, 0);
  rep_set(a, KDA_CALL_OK, KDA_OK, "%s%s", NULL, NULL);
}

static void serve_close(wchild *c, wrep *a) {
  fpctl before;
  fpctl_get(&before);
  set_stage(c, ST_CLOSE);
  c->b->close(c->handle);
  c->handle = NULL;
  set_stage(c, ST_NONE);
  if (!fp_check(&before, "close", a)) rep_set(a, KDA_CALL_OK, KDA_OK, "%s%s", NULL, NULL);
}

/* Closes every descriptor but those in keep (the runner's, other workers' sockets: a worker
 * holding them would keep them open after the runner closes its end). */
static void close_others(const int *keep, int n) {
  int fds[4096], nf = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) && nf < 4096)
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') fds[nf++] = atoi(e->d_name);
    closedir(d);
  } else {
    for (int f = 3; f < 1024; f++) fds[nf++] = f;
  }
  for (int i = 0; i < nf; i++) {
    int k = fds[i] <= 2;
    for (int j = 0; j < n; j++) k |= fds[i] == keep[j];
    if (!k) close(fds[i]);
  }
}

/* The guard: kills the worker's whole process group when the runner dies (its end of the
 * alive pipe closes) or stops the worker.  It never loads the plugin. */
static void spawn_guard(int alive) {
  pid_t group = getpid(), g = fork();
  if (g != 0) return;
  close_others(&alive, 1);
  close(0), close(1), close(2);
  for (;;) {
    char ch;
    ssize_t k = read(alive, &ch, 1);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0 || k < 0) break;
  }
  if (getpgrp() == group) kill(-group, SIGKILL); /* never the runner's own group */
  _exit(0);
}

static void child_reply(wchild *c, wrep *a) {
  fflush(NULL); /* the backend's buffered prints go to the log before the reply */
  a->magic = MAGIC;
  if (send_all(c->ctl, a, sizeof *a, 0) != 0) _exit(0);
}

/* The class and types of the worker's parameters (the variant slot, SPEC.md §7.8), before any
 * open; a crash or hang in it is reported in stage "variant" (the region's first page is
 * mapped for that). */
static void child_variant(wchild *c, const kda_backend_ref *ref, wrep *a) {
  if (c->isolated && !c->map) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    void *m = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
    if (m != MAP_FAILED) c->map = m, c->map_size = pg, g_hdr = (shm_hdr *)m;
  }
  kda_backend_variant v;
  char err[KDA_ERRLEN] = "";
  fpctl before;
  fpctl_get(&before);
  set_stage(c, ST_VARIANT);
  int rejected = 0;
  int st = kda_backend_variant_get(c->b, ref->params, &v, &rejected, err, sizeof err);
  set_stage(c, ST_NONE);
  if (fp_check(&before, "variant", a)) return;
  if (st != KDA_OK) { /* a plugin named by its path, as kda_plugin_load names a bad table */
    char pre[256] = "";
    if (!ref->builtin) snprintf(pre, sizeof pre, "%.200s: ", ref->path);
    a->rejected = rejected;
    return rep_set(a, KDA_CALL_ERROR, st, "%s%s", pre, err);
  }
  a->cls = v.precision_class, a->in_dtype = v.input_dtype, a->out_dtype = v.output_dtype;
  c->in_dtype = v.input_dtype, c->out_dtype = v.output_dtype;
  rep_set(a, KDA_CALL_OK, KDA_OK, "%s%s", NULL, NULL);
}

static void child_load(wchild *c, const kda_backend_ref *ref, wrep *a) {
  memset(a, 0, sizeof *a);
  a->type = RP_INFO;
  a->stage = ST_LOAD;
  const kda_backend *b = ref->builtin;
  if (!b) {
    fpctl before;
    fpctl_get(&before);
    kda_plugin *pl;
    char err[KDA_ERRLEN];
    int st = kda_plugin_load(ref->path, &pl, &b, err, sizeof err);
    if (fp_check(&before, "loading the plugin", a)) return;
    if (st != KDA_OK) return rep_set(a, KDA_CALL_ERROR, st, "%s%s", err, NULL);
  }
  c->b = b;
  snprintf(a->name, sizeof a->name, "%s", b->name);
  snprintf(a->desc, sizeof a->desc, "%s", b->description ? b->description : "");
  a->abi_version = b->abi_version, a->struct_size = b->struct_size;
  a->caps = KDA_BACKEND_HAS(b, caps) ? b->caps : 0;
  a->resident = has_resident(b);
  child_variant(c, ref, a);
}

static void child_main(const kda_backend_ref *ref, pid_t parent, int ctl, int memfd, int logw,
                       int alive) {
  if (setpgid(0, 0) != 0 && getpgrp() != getpid()) _exit(1); /* no group: no safe kill */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1); /* the runner died before the request took effect */
  int keep[4] = {ctl, memfd, logw, alive};
  close_others(keep, 4);
  spawn_guard(alive);
  close(alive);
  int nul = open("/dev/null", O_RDONLY);
  if (nul >= 0) dup2(nul, 0), close(nul);
  dup2(logw, 1), dup2(logw, 2);
  if (logw > 2) close(logw);
  wchild c = {NULL, 0, 0, NULL, ctl, memfd, NULL, 0, 1};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  wrep a;
  child_load(&c, ref, &a);
  child_reply(&c, &a);
  if (a.outcome != KDA_CALL_OK) _exit(0);
  for (;;) {
    wreq q;
    size_t got = 0;
    while (got < sizeof q) {
      ssize_t k = recv(ctl, (char *)&q + got, sizeof q - got, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) _exit(0); /* the runner closed the socket: stop */
      got += (size_t)k;
    }
    if (q.magic != MAGIC) _exit(1);
    q.params[sizeof q.params - 1] = 0;
    memset(&a, 0, sizeof a);
    a.type = RP_DONE;
    a.stage = q.type == RQ_OPEN ? ST_OPEN : q.type == RQ_CLOSE ? ST_CLOSE : ST_FORWARD;
    if (q.type == RQ_OPEN) serve_open(&c, &q, &a);
    else if (q.type == RQ_CALL) serve_call(&c, &q, &a);
    else if (q.type == RQ_CLOSE) serve_close(&c, &a);
    else if (q.type == RQ_DESCRIBE) serve_describe(&c, &a);
    child_reply(&c, &a);
  }
}

/* ---- The runner's side. */
struct kda_worker {
  kda_backend_ref ref;
  kda_call_opts opts;
  char name[64], desc[256];
  char label[64]; /* kda_worker_label's buffer */
  int32_t cls, in_dtype, out_dtype; /* of the parameters: the variant's, else the table's */
  uint32_t abi_version, caps;
  int resident; /* the table has the resident-buffer slots */
  int load_failed;
  int params_rejected; /* the variant slot rejected the parameters (KDA_EINVAL) */
  kda_call_result load_res;
  pid_t pid;
  int ctl, logr, alivew;
  int handle_open;
  int memfd;
  unsigned char *map;
  size_t map_size;
  char log[KDA_WORKER_LOG_MAX];
  size_t log_len;
  uint64_t log_total;
  int64_t starts;
  wchild local; /* --no-isolate: the backend served in this process */
  kda_plugin *plugin;
};

int kda_worker_limits_memory(void) { return !KDA_WORKER_ASAN; }

static void log_drain(kda_worker *w) {
  if (w->logr < 0) return;
  char buf[4096];
  for (;;) {
    ssize_t k = read(w->logr, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    size_t room = sizeof w->log - 1 - w->log_len, n = (size_t)k < room ? (size_t)k : room;
    for (size_t i = 0; i < n; i++) /* no terminal escapes or NULs into the report */
      w->log[w->log_len + i] = (buf[i] == '\n' || buf[i] == '\t' ||
                                ((unsigned char)buf[i] >= 0x20 && buf[i] != 0x7f)) ? buf[i] : '?';
    w->log_len += n;
    w->log[w->log_len] = 0;
    w->log_total += (uint64_t)k;
  }
}

/* Reads one reply: 0, -1 when the worker closed the socket (or sent garbage), -2 on the time
 * limit.  Drains the log pipe meanwhile, so that a chatty backend never blocks on it. */
static int recv_reply(kda_worker *w, wrep *a) {
  double limit = w->opts.timeout_s, deadline = now_s() + limit;
  size_t got = 0;
  while (got < sizeof *a) {
    int ms = -1;
    if (limit > 0) {
      double left = deadline - now_s();
      if (left <= 0) return -2;
      ms = (int)(left * 1000.0) + 1;
    }
    struct pollfd pf[2] = {{w->ctl, POLLIN, 0}, {w->logr, POLLIN, 0}};
    int n = poll(pf, w->logr >= 0 ? 2 : 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n > 0 && (pf[1].revents & (POLLIN | POLLHUP))) {
      log_drain(w);
      if (pf[1].revents & POLLHUP && !(pf[1].revents & POLLIN)) close(w->logr), w->logr = -1;
    }
    if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t k = recv(w->ctl, (char *)a + got, sizeof *a - got, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return -1;
      got += (size_t)k;
    }
  }
  log_drain(w);
  /* The backend shares the worker's process and could write here: anything malformed is a
   * dead worker. */
  if (a->magic != MAGIC || a->outcome < KDA_CALL_OK || a->outcome > KDA_CALL_INPUT) return -1;
  a->msg[sizeof a->msg - 1] = 0, a->name[sizeof a->name - 1] = 0, a->desc[sizeof a->desc - 1] = 0;
  return 0;
}

/* Waits (bounded) until pid has exited, without reaping it: 1 when it has. */
static int exited_within(pid_t pid, double seconds) {
  double deadline = now_s() + seconds;
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
      return 1;
    if (now_s() > deadline) return 0;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

/* Kills the worker's process group (the guard and the backend's children too) and reaps the
 * worker with a bounded wait.  Returns its wait status, or -1 when it could not be reaped. */
static int kill_and_reap(kda_worker *w) {
  int wst = -1;
  if (w->pid > 0) {
    kill(-w->pid, SIGKILL);
    kill(w->pid, SIGKILL);
    if (exited_within(w->pid, REAP_S)) waitpid(w->pid, &wst, 0);
  }
  log_drain(w);
  if (w->ctl >= 0) close(w->ctl);
  if (w->logr >= 0) close(w->logr);
  if (w->alivew >= 0) close(w->alivew);
  w->ctl = w->logr = w->alivew = -1;
  w->pid = 0;
  w->handle_open = 0;
  return wst;
}

/* Names the output whose guard page the fault hit, from the worker's report of the address. */
static const char *fault_buffer(const kda_worker *w, const wreq *q) {
  const shm_hdr *h = (const shm_hdr *)w->map;
  if (!h || !h->fault_sig || !q) return NULL;
  uint64_t off = h->fault_addr - h->child_base;
  for (int b = 0; b < N_GUARD; b++)
    if (q->guard[b] >= 0 && off >= (uint64_t)q->guard[b] &&
        off - (uint64_t)q->guard[b] < q->guard_len[b])
      return buf_names[B_O + b];
  return NULL;
}

/* The worker died or stopped answering during stage: kill, reap, describe. */
static void worker_lost(kda_worker *w, int why, int32_t stage, const wreq *q,
                        kda_call_result *r) {
  const shm_hdr *h = (const shm_hdr *)w->map;
  if (h && h->stage > ST_LOAD && stage != ST_OPEN && stage != ST_CLOSE) stage = h->stage;
  const char *where = stage_names[stage >= 0 && stage < ST_LAST ? stage : 0];
  int self_exit = why == -1 && exited_within(w->pid, EXIT_GRACE_S);
  const char *over = fault_buffer(w, q);
  int wst = kill_and_reap(w);
  r->outcome = KDA_CALL_CRASH;
  if (why == -2) {
    r->outcome = KDA_CALL_TIMEOUT;
    snprintf(r->msg, sizeof r->msg, "killed after the time limit of %g s in %s",
             w->opts.timeout_s, where);
  } else if (over) {
    snprintf(r->msg, sizeof r->msg, "%s wrote past the end of output '%s' (guard page; signal %d)",
             where, over, WIFSIGNALED(wst) ? WTERMSIG(wst) : 0);
  } else if (!self_exit) {
    snprintf(r->msg, sizeof r->msg, "the backend closed the runner's channel in %s and kept "
             "running (killed)", where);
  } else if (wst != -1 && WIFSIGNALED(wst)) {
    snprintf(r->msg, sizeof r->msg, "killed by signal %d (%s) in %s", WTERMSIG(wst),
             strsignal(WTERMSIG(wst)), where);
  } else {
    snprintf(r->msg, sizeof r->msg, "the backend's process exited with status %d in %s",
             wst != -1 && WIFEXITED(wst) ? WEXITSTATUS(wst) : -1, where);
  }
  if (h && h->mem_limit && r->outcome == KDA_CALL_CRASH) { /* the limit may be why */
    size_t n = strlen(r->msg);
    snprintf(r->msg + n, sizeof r->msg - n, " (address-space limit %llu MiB)",
             (unsigned long long)(h->mem_limit >> 20));
  }
  if (h) ((shm_hdr *)w->map)->fault_sig = 0, ((shm_hdr *)w->map)->stage = ST_NONE;
}

/* Grows the shared region to at least size bytes (never shrinks: the worker remaps on a size
 * change only). */
static int region_reserve(kda_worker *w, size_t size) {
  if (size <= w->map_size) return KDA_OK;
  if (ftruncate(w->memfd, (off_t)size) != 0) return KDA_ENOMEM;
  void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, w->memfd, 0);
  if (m == MAP_FAILED) return KDA_ENOMEM;
  if (w->map) munmap(w->map, w->map_size);
  w->map = m, w->map_size = size;
  return KDA_OK;
}

/* A request of this type, the rest zero, and a zeroed reply for it. */
static void request_init(wreq *q, wrep *a, int32_t type) {
  memset(q, 0, sizeof *q);
  memset(a, 0, sizeof *a);
  q->type = type;
}

/* The reply's outcome, status and message, as the call's result. */
static void result_from(kda_call_result *r, const wrep *a) {
  r->outcome = a->outcome, r->status = a->status;
  snprintf(r->msg, sizeof r->msg, "%s", a->msg);
}

/* 1 when a reply's class and element types are valid (kda_backend_variant_get checked them
 * in the worker, which the backend shares: the runner checks again before it indexes by them). */
static int types_ok(const wrep *a) {
  return kda_precision_name(a->cls) && kda_dtype_valid(a->in_dtype) &&
         kda_dtype_valid(a->out_dtype);
}

static int spawn(kda_worker *w, kda_call_result *r, char *err, size_t errlen) {
  int sv[2], lp[2], ap[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return snprintf(err, errlen, "socketpair: %s", strerror(errno)), KDA_EIO;
  if (pipe2(lp, O_CLOEXEC) != 0) {
    close(sv[0]), close(sv[1]);
    return snprintf(err, errlen, "pipe: %s", strerror(errno)), KDA_EIO;
  }
  if (pipe2(ap, O_CLOEXEC) != 0) {
    close(sv[0]), close(sv[1]), close(lp[0]), close(lp[1]);
    return snprintf(err, errlen, "pipe: %s", strerror(errno)), KDA_EIO;
  }
  memset(w->map, 0, sizeof(shm_hdr)); /* nothing of the previous worker's state */
  fflush(NULL); /* nothing of the runner's buffered output may reach the worker's log */
  pid_t parent = getpid(), pid = fork();
  if (pid < 0) {
    close(sv[0]), close(sv[1]), close(lp[0]), close(lp[1]), close(ap[0]), close(ap[1]);
    return snprintf(err, errlen, "fork: %s", strerror(errno)), KDA_EIO;
  }
  if (pid == 0) {
    close(sv[0]), close(lp[0]), close(ap[1]);
    child_main(&w->ref, parent, sv[1], w->memfd, lp[1], ap[0]);
    _exit(0);
  }
  setpgid(pid, pid); /* also here, so that no kill(-pid) can precede the child's own call */
  close(sv[1]), close(lp[1]), close(ap[0]);
  w->pid = pid, w->ctl = sv[0], w->logr = lp[0], w->alivew = ap[1];
  fcntl(w->logr, F_SETFL, O_NONBLOCK);
  w->starts++;
  wrep a;
  int rc = recv_reply(w, &a);
  if (rc != 0 || a.type != RP_INFO) {
    worker_lost(w, rc ? rc : -1, ST_LOAD, NULL, r);
    return KDA_OK;
  }
  if (a.outcome != KDA_CALL_OK) {
    kill_and_reap(w);
    result_from(r, &a);
    w->params_rejected = w->starts == 1 && a.rejected == 1;
    return KDA_OK;
  }
  if (w->starts == 1 && !types_ok(&a)) { /* the worker validated them: a forged reply */
    kill_and_reap(w);
    r->outcome = KDA_CALL_CRASH, r->status = KDA_EINVAL;
    snprintf(r->msg, sizeof r->msg, "the worker's reply names an invalid class or element type "
             "(%d, %d, %d): the backend wrote into the runner's channel", (int)a.cls,
             (int)a.in_dtype, (int)a.out_dtype);
    return KDA_OK;
  }
  if (w->starts > 1 && (a.cls != w->cls || a.in_dtype != w->in_dtype ||
                        a.out_dtype != w->out_dtype)) { /* buffers laid out for the first */
    kill_and_reap(w);
    r->outcome = KDA_CALL_ERROR, r->status = KDA_EINVAL;
    snprintf(r->msg, sizeof r->msg, "variant answered class %d, types %d / %d in a restarted "
             "worker, %d, %d / %d at first", (int)a.cls, (int)a.in_dtype, (int)a.out_dtype,
             (int)w->cls, (int)w->in_dtype, (int)w->out_dtype);
    return KDA_OK;
  }
  if (w->starts == 1) {
    int ok = a.name[0] != 0;
    for (const char *c = a.name; *c; c++)
      ok &= (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
            *c == '.' || *c == '_' || *c == '-';
    if (ok) snprintf(w->name, sizeof w->name, "%s", a.name);
    for (char *c = a.desc; *c; c++)
      if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    snprintf(w->desc, sizeof w->desc, "%s", a.desc);
    w->cls = a.cls, w->in_dtype = a.in_dtype, w->out_dtype = a.out_dtype;
    w->abi_version = a.abi_version, w->caps = a.caps, w->resident = a.resident == 1;
  }
  r->outcome = KDA_CALL_OK;
  return KDA_OK;
}

/* A fallback name before the table is known: the spec up to ':' and without directories. */
static void name_from_spec(kda_worker *w) {
  const char *s = w->ref.builtin ? w->ref.builtin->name : w->ref.path;
  const char *slash = strrchr(s, '/');
  snprintf(w->name, sizeof w->name, "%.63s", slash ? slash + 1 : s);
}

static int start_local(kda_worker *w, char *err, size_t errlen) {
  const kda_backend *b = w->ref.builtin;
  if (!b) {
    int st = kda_plugin_load(w->ref.path, &w->plugin, &b, w->load_res.msg, sizeof w->load_res.msg);
    if (st != KDA_OK) {
      w->load_failed = 1, w->load_res.outcome = KDA_CALL_ERROR, w->load_res.status = st;
      return KDA_OK;
    }
  }
  w->local = (wchild){b, 0, 0, NULL, -1, -1, w->map, w->map_size, 0};
  snprintf(w->name, sizeof w->name, "%s", b->name);
  snprintf(w->desc, sizeof w->desc, "%s", b->description ? b->description : "");
  wrep a;
  memset(&a, 0, sizeof a);
  child_variant(&w->local, &w->ref, &a);
  if (a.outcome != KDA_CALL_OK) {
    result_from(&w->load_res, &a);
    w->load_failed = 1, w->params_rejected = a.rejected == 1;
    return KDA_OK;
  }
  w->cls = a.cls, w->in_dtype = a.in_dtype, w->out_dtype = a.out_dtype;
  w->abi_version = b->abi_version;
  w->caps = KDA_BACKEND_HAS(b, caps) ? b->caps : 0;
  w->resident = has_resident(b);
  return KDA_OK;
}

int kda_worker_start(const kda_backend_ref *ref, const kda_call_opts *o, kda_worker **out,
                     char *err, size_t errlen) {
  *out = NULL;
  kda_worker *w = calloc(1, sizeof *w);
  if (!w) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  w->ref = *ref;
  if (o) w->opts = *o;
  else w->opts.timeout_s = 60.0, w->opts.isolate = 1;
  w->ctl = w->logr = w->alivew = -1;
  w->cls = -1;
  name_from_spec(w);
  w->memfd = memfd_create("kda-worker", MFD_CLOEXEC);
  if (w->memfd < 0 || region_reserve(w, (size_t)sysconf(_SC_PAGESIZE)) != KDA_OK) {
    if (w->memfd >= 0) close(w->memfd);
    free(w);
    return snprintf(err, errlen, "cannot create the shared region: %s", strerror(errno)), KDA_EIO;
  }
  int st = w->opts.isolate ? spawn(w, &w->load_res, err, errlen) : start_local(w, err, errlen);
  if (st != KDA_OK) return kda_worker_stop(w), st;
  if (w->opts.isolate && w->load_res.outcome != KDA_CALL_OK) w->load_failed = 1;
  *out = w;
  return KDA_OK;
}

const kda_call_result *kda_worker_load_result(const kda_worker *w) {
  return w->load_failed ? &w->load_res : NULL;
}
const char *kda_worker_name(const kda_worker *w) { return w->name; }
int kda_worker_params_rejected(const kda_worker *w) { return w->params_rejected; }
/* NAME:PARAMS (SPEC.md §7.6): two instances of one backend with different parameters get
 * different rows, waivers and baselines.  Truncated to the report's 63 bytes; the caller
 * refuses two targets whose labels coincide. */
const char *kda_worker_label(kda_worker *w) {
  size_t n = 0;
  for (const char *s = w->name; *s && n + 1 < sizeof w->label; s++) w->label[n++] = *s;
  if (w->ref.params[0] && n + 1 < sizeof w->label) w->label[n++] = ':';
  for (const char *s = w->ref.params; *s && n + 1 < sizeof w->label; s++) w->label[n++] = *s;
  w->label[n] = 0;
  return w->label;
}
const char *kda_worker_description(const kda_worker *w) { return w->desc; }
int32_t kda_worker_class(const kda_worker *w) { return w->load_failed ? -1 : w->cls; }
int32_t kda_worker_input_dtype(const kda_worker *w) { return w->in_dtype; }
int32_t kda_worker_output_dtype(const kda_worker *w) { return w->out_dtype; }
uint32_t kda_worker_abi_version(const kda_worker *w) { return w->abi_version; }
uint32_t kda_worker_caps(const kda_worker *w) { return w->load_failed ? 0 : w->caps; }
int kda_worker_has_resident(const kda_worker *w) { return !w->load_failed && w->resident; }
int64_t kda_worker_pid(const kda_worker *w) { return w->pid; }
int64_t kda_worker_starts(const kda_worker *w) { return w->starts; }

/* In-process, the backend sees the runner's own mapping of the region. */
static void sync_local(kda_worker *w) {
  w->local.map = w->map, w->local.map_size = w->map_size;
}

/* One request and its reply; on a death r says what happened and 1 is returned. */
static int transact(kda_worker *w, wreq *q, wrep *a, int32_t stage, kda_call_result *r) {
  q->magic = MAGIC;
  int rc = send_all(w->ctl, q, sizeof *q, w->opts.timeout_s) == 0 ? recv_reply(w, a) : -1;
  if (rc == 0 && a->type == RP_DONE) return 0;
  worker_lost(w, rc ? rc : -1, stage, q->type == RQ_CALL ? q : NULL, r);
  return 1;
}

/* A running worker with an open handle, or r says why not (returns 0). */
static int ready(kda_worker *w, kda_call_result *r, char *err, size_t errlen, int *st) {
  *st = KDA_OK;
  if (w->load_failed) return *r = w->load_res, 0;
  if (w->opts.isolate && !w->pid) {
    *st = spawn(w, r, err, errlen);
    if (*st != KDA_OK || r->outcome != KDA_CALL_OK) return 0;
  }
  if (w->handle_open) return 1;
  wreq q;
  wrep a;
  request_init(&q, &a, RQ_OPEN);
  q.mem_limit = w->opts.memory_limit;
  snprintf(q.params, sizeof q.params, "%s", w->ref.params);
  if (!w->opts.isolate) sync_local(w), serve_open(&w->local, &q, &a);
  else if (transact(w, &q, &a, ST_OPEN, r)) return 0;
  if (a.outcome != KDA_CALL_OK) {
    result_from(r, &a);
    return 0;
  }
  w->handle_open = 1;
  return 1;
}

/* ---- The layout of one call in the region. */
static size_t up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* A pool call's state_indices [N], its S and the pool [S, HV, K, V] as float64 (SPEC.md
 * §7.8); NULL for an ordinary call. */
typedef struct pool_io {
  const int64_t *idx;
  int64_t S;
  double *pool;
} pool_io;

/* The element type of float buffer b (kda_backend.h, "Element types"): q k v g beta take the
 * input type and o the output type; A_log dt_bias h0, and ht hc pool, the wide type of theirs
 * (float for a 16-bit type, SPEC.md §10.3). */
static int32_t buf_dtype(const kda_worker *w, int b) {
  if (b < N_FIN) return b < 5 ? w->in_dtype : KDA_STATE_DTYPE(w->in_dtype);
  return b == B_O ? w->out_dtype : KDA_STATE_DTYPE(w->out_dtype);
}

static size_t buf_es(const kda_worker *w, int b) {
  return (size_t)KDA_DTYPE_SIZE(buf_dtype(w, b));
}

/* Element i of a buffer of type dt: the wide types inline (the long cases' inner loops), the
 * 16-bit ones through kda_dtype.c. */
static inline void put_elem(int32_t dt, unsigned char *d, size_t i, double x) {
  if (dt == KDA_PRECISION_FP64) {
    memcpy(d + 8 * i, &x, 8);
  } else if (dt == KDA_PRECISION_FP32) {
    float f = (float)x;
    memcpy(d + 4 * i, &f, 4);
  } else {
    kda_dtype_put(dt, d, i, x);
  }
}

static inline double get_elem(int32_t dt, const unsigned char *s, size_t i) {
  if (dt == KDA_PRECISION_FP64) {
    double x;
    memcpy(&x, s + 8 * i, 8);
    return x;
  }
  if (dt == KDA_PRECISION_FP32) {
    float f;
    memcpy(&f, s + 4 * i, 4);
    return (double)f;
  }
  return kda_dtype_get(dt, s, i);
}

/* The guard after an output of len bytes: whole pages, at least len and at least GUARD_MIN. */
static size_t guard_size(size_t len, size_t pg) {
  size_t g = up(len ? len : 1, pg);
  return g < GUARD_MIN ? up(GUARD_MIN, pg) : g;
}

/* Places the inputs, then each output so that its end is followed by a guard (the start is
 * 64-byte aligned; the < 64 bytes of slack before the guard hold canaries).  The guards are
 * address space only: the memfd's pages there are never touched.  Returns the region's size,
 * or 0 for a problem whose sizes do not fit. */
static size_t layout(const kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                     const pool_io *pl, wreq *q) {
  kda_problem_sizes s;
  if (kda_problem_sizes_get(p, &s, NULL, 0) != KDA_OK) return 0;
  const double *xs[N_FIN] = {in->q, in->k, in->v, in->g, in->beta, in->A_log, in->dt_bias, in->h0};
  const uint64_t ns[N_FIN] = {s.q, s.k, s.v, s.g, s.beta, s.A_log, s.dt_bias, s.h0};
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), off = pg;
  for (int b = 0; b < N_BUF; b++) q->off[b] = -1, q->len[b] = 0;
  for (int b = 0; b < N_FIN; b++)
    if (xs[b])
      q->off[b] = (int64_t)off, q->len[b] = ns[b] * buf_es(w, b), off = up(off + q->len[b] + 1, 64);
  q->off[B_CU] = (int64_t)off, q->len[B_CU] = (uint64_t)(p->N + 1) * 8;
  off = up(off + q->len[B_CU], 64);
  if (p->n_checkpoints > 0) {
    q->off[B_CK] = (int64_t)off, q->len[B_CK] = (uint64_t)p->n_checkpoints * 8;
    off = up(off + q->len[B_CK], 64);
  }
  if (pl) {
    q->off[B_IDX] = (int64_t)off, q->len[B_IDX] = (uint64_t)p->N * 8;
    off = up(off + q->len[B_IDX] + 1, 64);
    q->pool_slots = pl->S;
  }
  off = up(off, pg);
  /* a pool call has no ht: the final states go into the pool, in place */
  const int want[N_GUARD] = {1, p->want_final_state != 0 && !pl, p->n_checkpoints > 0, !!pl};
  const uint64_t on[N_GUARD] = {s.o, s.ht, s.hc, pl ? (uint64_t)(pl->S * p->HV * p->K * p->V) : 0};
  for (int b = 0; b < N_GUARD; b++) {
    q->guard[b] = -1, q->guard_len[b] = 0;
    if (!want[b]) continue;
    size_t len = (size_t)on[b] * buf_es(w, B_O + b), block = up(len ? len : 1, pg);
    q->off[B_O + b] = (int64_t)(off + block - up(len, 64));
    q->len[B_O + b] = len;
    q->guard[b] = (int64_t)(off + block);
    q->guard_len[b] = guard_size(len, pg);
    off += block + q->guard_len[b];
  }
  return off;
}

static void put_inputs(kda_worker *w, const kda_tensors_f64 *in, const pool_io *pl,
                       const wreq *q) {
  const double *xs[N_FIN] = {in->q, in->k, in->v, in->g, in->beta, in->A_log, in->dt_bias, in->h0};
  for (int b = 0; b < N_FIN; b++) {
    if (q->off[b] < 0) continue;
    const int32_t dt = buf_dtype(w, b);
    const uint64_t n = q->len[b] / buf_es(w, b);
    for (uint64_t i = 0; i < n; i++) put_elem(dt, w->map + q->off[b], (size_t)i, xs[b][i]);
  }
  memcpy(w->map + q->off[B_CU], in->cu_seqlens, (size_t)q->len[B_CU]);
  if (q->off[B_CK] >= 0) memcpy(w->map + q->off[B_CK], in->checkpoints, (size_t)q->len[B_CK]);
  if (pl) memcpy(w->map + q->off[B_IDX], pl->idx, (size_t)q->len[B_IDX]);
  for (int b = B_O; b < N_BUF; b++) {
    if (q->off[b] < 0) continue;
    unsigned char *d = w->map + q->off[b];
    const int32_t dt = buf_dtype(w, b);
    const uint64_t n = q->len[b] / buf_es(w, b);
    for (uint64_t i = 0; i < n; i++) /* NaN: an unwritten element cannot pass */
      put_elem(dt, d, (size_t)i, b == B_POOL ? pl->pool[i] : NAN);
    memset(d + q->len[b], CANARY, up((size_t)q->len[b], 64) - (size_t)q->len[b]);
  }
}

/* Name of the first input (floats or index arrays) that no longer equals what was handed
 * over, bit for bit, or NULL. */
static const char *changed_input(const kda_worker *w, const kda_tensors_f64 *in,
                                 const pool_io *pl, const wreq *q) {
  const double *xs[N_FIN] = {in->q, in->k, in->v, in->g, in->beta, in->A_log, in->dt_bias, in->h0};
  for (int b = 0; b < N_FIN; b++) {
    if (q->off[b] < 0) continue;
    const unsigned char *d = w->map + q->off[b];
    const int32_t dt = buf_dtype(w, b);
    const size_t es = buf_es(w, b);
    for (uint64_t i = 0; i < q->len[b] / es; i++) {
      unsigned char want[8]; /* what put_inputs wrote */
      put_elem(dt, want, 0, xs[b][i]);
      if (memcmp(d + es * i, want, es) != 0) return buf_names[b];
    }
  }
  if (memcmp(w->map + q->off[B_CU], in->cu_seqlens, (size_t)q->len[B_CU]) != 0)
    return buf_names[B_CU];
  if (q->off[B_CK] >= 0 && memcmp(w->map + q->off[B_CK], in->checkpoints, (size_t)q->len[B_CK]))
    return buf_names[B_CK];
  if (pl && memcmp(w->map + q->off[B_IDX], pl->idx, (size_t)q->len[B_IDX]) != 0)
    return buf_names[B_IDX];
  return NULL;
}

/* Name of the first output whose canary bytes before its guard page changed, or NULL. */
static const char *overrun(const kda_worker *w, const wreq *q) {
  for (int b = B_O; b < N_BUF; b++) {
    if (q->off[b] < 0) continue;
    const unsigned char *g = w->map + q->off[b] + q->len[b];
    for (size_t i = q->len[b]; i < up((size_t)q->len[b], 64); i++, g++)
      if (*g != CANARY) return buf_names[b];
  }
  return NULL;
}

static void widen(const kda_worker *w, const wreq *q, kda_outputs *out) {
  double *dst[3] = {out->o, out->ht, out->hc};
  for (int b = 0; b < 3; b++) {
    if (q->off[B_O + b] < 0 || !dst[b]) continue;
    const int32_t dt = buf_dtype(w, B_O + b);
    const uint64_t n = q->len[B_O + b] / buf_es(w, B_O + b);
    for (uint64_t i = 0; i < n; i++) dst[b][i] = get_elem(dt, w->map + q->off[B_O + b], (size_t)i);
  }
}

/* The pool as the backend left it, widened exactly into pl->pool. */
static void widen_pool(const kda_worker *w, const wreq *q, const pool_io *pl) {
  const int32_t dt = buf_dtype(w, B_POOL);
  const uint64_t n = q->len[B_POOL] / buf_es(w, B_POOL);
  for (uint64_t i = 0; i < n; i++) pl->pool[i] = get_elem(dt, w->map + q->off[B_POOL], (size_t)i);
}

/* 16-bit input types are never rounded into (SPEC.md §10.3): 1 when every value of q k v g
 * beta is exact in the backend's input type (always for fp64 / fp32, which round as before);
 * otherwise 0 and why names the first value that is not. */
int kda_worker_inputs_exact(const kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                            char *why, size_t cap) {
  if (!kda_dtype_is_half(w->in_dtype)) return 1;
  kda_problem_sizes s;
  if (kda_problem_sizes_get(p, &s, NULL, 0) != KDA_OK) return 1; /* the call reports the sizes */
  const double *xs[5] = {in->q, in->k, in->v, in->g, in->beta};
  const uint64_t ns[5] = {s.q, s.k, s.v, s.g, s.beta};
  for (int b = 0; b < 5; b++)
    for (uint64_t i = 0; xs[b] && i < ns[b]; i++)
      if (!kda_dtype_holds(w->in_dtype, xs[b][i]))
        return snprintf(why, cap, "%s[%llu] = %.9g is not exact in %s", buf_names[b],
                        (unsigned long long)i, xs[b][i], kda_precision_name(w->in_dtype)),
               0;
  return 1;
}

static int call_impl(kda_worker *w, int32_t via, const kda_problem *p,
                     const kda_tensors_f64 *in, const pool_io *pl, kda_outputs *out,
                     kda_call_result *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  char why[256];
  if (!w->load_failed && !kda_worker_inputs_exact(w, p, in, why, sizeof why)) {
    r->outcome = KDA_CALL_UNSUPPORTED, r->status = KDA_EUNSUPPORTED;
    snprintf(r->msg, sizeof r->msg, "the backend takes %s buffers and the runner does not round "
             "into them: %s", kda_precision_name(w->in_dtype), why);
    return KDA_OK;
  }
  int st;
  if (!ready(w, r, err, errlen, &st)) return st;
  wreq q;
  wrep a;
  request_init(&q, &a, RQ_CALL);
  q.p = *p;
  q.mem_limit = w->opts.memory_limit;
  q.resident = via == KDA_VIA_RESIDENT;
  size_t size = layout(w, p, in, pl, &q);
  if (!size) return snprintf(err, errlen, "problem sizes out of range"), KDA_EINVAL;
  if (region_reserve(w, size) != KDA_OK)
    return snprintf(err, errlen, "cannot grow the shared region to %zu bytes", size), KDA_ENOMEM;
  q.map_size = w->map_size;
  put_inputs(w, in, pl, &q);
  if (!w->opts.isolate) {
    sync_local(w);
    serve_call(&w->local, &q, &a);
  } else if (transact(w, &q, &a, ST_FORWARD, r)) {
    return KDA_OK;
  }
  const char *over = overrun(w, &q), *changed = changed_input(w, in, pl, &q);
  r->status = a.status;
  r->seconds = a.seconds;
  if (a.outcome == KDA_CALL_FPENV) {
    r->outcome = a.outcome;
    snprintf(r->msg, sizeof r->msg, "%s", a.msg);
  } else if (over) {
    r->outcome = KDA_CALL_CRASH;
    snprintf(r->msg, sizeof r->msg, "forward wrote past the end of output '%s'", over);
  } else if (changed) {
    r->outcome = KDA_CALL_INPUT;
    snprintf(r->msg, sizeof r->msg, "forward modified input '%s'", changed);
  } else {
    r->outcome = a.outcome;
    snprintf(r->msg, sizeof r->msg, "%s", a.msg);
  }
  if (r->outcome == KDA_CALL_OK) widen(w, &q, out);
  if (pl) widen_pool(w, &q, pl); /* also after an error: a rejected call must leave it as is */
  return KDA_OK;
}

int kda_worker_call(kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                    kda_outputs *out, kda_call_result *r, char *err, size_t errlen) {
  return call_impl(w, KDA_VIA_FORWARD, p, in, NULL, out, r, err, errlen);
}

int kda_worker_call_via(kda_worker *w, int32_t via, const kda_problem *p,
                        const kda_tensors_f64 *in, kda_outputs *out, kda_call_result *r,
                        char *err, size_t errlen) {
  return call_impl(w, via, p, in, NULL, out, r, err, errlen);
}

int kda_worker_call_pool(kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                         const int64_t *state_indices, int64_t slots, double *pool,
                         kda_outputs *out, kda_call_result *r, char *err, size_t errlen) {
  /* the pool's bytes must fit the region's size_t arithmetic: at most 2^40 bytes */
  if (slots < 1 || !state_indices || !pool || in->h0 || p->N < 1 ||
      (double)slots * (double)(p->HV * p->K * p->V) * 8.0 > 0x1p40)
    return snprintf(err, errlen, "pool call: bad arguments"), KDA_EINVAL;
  pool_io pl = {state_indices, slots, pool};
  return call_impl(w, KDA_VIA_FORWARD, p, in, &pl, out, r, err, errlen);
}

int kda_worker_end_case(kda_worker *w, kda_call_result *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  if (!w->handle_open) return KDA_OK;
  wreq q;
  wrep a;
  request_init(&q, &a, RQ_CLOSE);
  w->handle_open = 0;
  if (!w->opts.isolate) sync_local(w), serve_close(&w->local, &a);
  else if (transact(w, &q, &a, ST_CLOSE, r)) return KDA_OK;
  result_from(r, &a);
  return KDA_OK;
}

int kda_worker_describe(kda_worker *w, kda_backend_info *info, kda_call_result *r, char *err,
                        size_t errlen) {
  memset(r, 0, sizeof *r);
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  int st;
  if (!ready(w, r, err, errlen, &st)) return st;
  wreq q;
  wrep a;
  request_init(&q, &a, RQ_DESCRIBE);
  if (!w->opts.isolate) sync_local(w), serve_describe(&w->local, &a);
  else if (transact(w, &q, &a, ST_OPEN, r)) return KDA_OK;
  result_from(r, &a);
  if (a.outcome != KDA_CALL_OK) return KDA_OK;
  *info = a.info;
  info->struct_size = sizeof *info;
  info->device[sizeof info->device - 1] = 0, info->isa[sizeof info->isa - 1] = 0;
  return KDA_OK;
}

size_t kda_worker_take_log(kda_worker *w, char *buf, size_t cap, uint64_t *total) {
  log_drain(w);
  size_t n = 0;
  if (cap) {
    n = w->log_len < cap - 1 ? w->log_len : cap - 1;
    memcpy(buf, w->log, n);
    buf[n] = 0;
  }
  if (total) *total = w->log_total;
  w->log_len = 0, w->log_total = 0, w->log[0] = 0;
  return n;
}

void kda_worker_stop(kda_worker *w) {
  if (!w) return;
  if (!w->opts.isolate && w->handle_open) w->local.b->close(w->local.handle);
  kill_and_reap(w);
  if (w->map) munmap(w->map, w->map_size);
  if (w->memfd >= 0) close(w->memfd);
  kda_plugin_unload(w->plugin);
  free(w);
}

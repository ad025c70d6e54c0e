/* kda_worker_child.c: the worker process (SPEC.md §7.8): it isolates itself (process group,
 * SIGKILL with the runner, a guard process, every inherited descriptor closed, stdout and
 * stderr into the runner's log pipe), loads the backend, and serves OPEN, CALL (supports and
 * forward, or the resident-buffer slots, on the shared region's buffers), DESCRIBE and CLOSE,
 * each with the floating-point environment checked around the backend's code and the stage
 * a crash or hang is reported in written to the region's first page.
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <fenv.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "kda_worker_impl.h"

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

static shm_hdr *volatile g_hdr; /* the region's first page, for the fault handler */



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
  if (KDA_WORKER_ASAN || q->mem_limit < 0 || !(q->type == RQ_CALL || q->type == RQ_BACKWARD || q->mem_limit > 0)) return;
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

void kda_wchild_open(wchild *c, const wreq *q, wrep *a) {
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
int kda_wchild_has_resident(const kda_backend *b) {
  return KDA_BACKEND_HAS(b, synchronize) && b->buffers_create && b->forward_buffers &&
         b->buffers_read && b->buffers_destroy && b->synchronize;
}

void kda_wchild_call(wchild *c, const wreq *q, wrep *a) {
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
  const int resident = q->resident && !x[B_IDX] && kda_wchild_has_resident(c->b);
  st = resident ? call_resident(c, q, &t, a) : call_forward(c, q, &t, a);
  set_stage(c, ST_NONE);
  if (fp_check(&before, resident ? "the resident path" : "forward", a) || st != KDA_OK) return;
  rep_set(a, KDA_CALL_OK, KDA_OK, "%s%s", NULL, NULL);
}

void kda_wchild_backward(wchild *c, const wreq *q, wrep *a) {
  if (c->isolated && child_map(c, q) != 0)
    return rep_set(a, KDA_CALL_ERROR, KDA_ENOMEM, "worker: cannot map the buffers%s%s", 0, 0);
  if (!kda_backend_has_backward(c->b))
    return rep_set(a, KDA_CALL_UNSUPPORTED, KDA_EUNSUPPORTED, "no backward pass%s%s", 0, 0);
  void *x[N_BUF];
  for (int b = 0; b < N_BUF; b++) x[b] = q->off[b] >= 0 ? c->map + q->off[b] : NULL;
  kda_backend_tensors t = {sizeof t, c->in_dtype, c->out_dtype, 0,
                           x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7],
                           x[B_CU], x[B_CK], NULL, NULL, NULL, NULL, 0, NULL};
  char msg[KDA_ERRLEN] = "";
  uint32_t offered = 0;
  fpctl before;
  enter_backend(c, q, &before, ST_SUPPORTS_BACKWARD);
  int32_t st = c->b->supports_backward(c->handle, &q->p, &offered, msg, sizeof msg);
  msg[sizeof msg - 1] = 0;
  if (fp_check(&before, "supports_backward", a)) return;
  if (st != KDA_OK)
    return rep_set(a, KDA_CALL_UNSUPPORTED, st, "%s%s", msg[0] ? msg : "not supported", NULL);
  /* only buffers the runner laid out, of gradients the problem has and the backend offers */
  uint32_t want = 0;
  for (int b = 0; b < KDA_GRAD_COUNT; b++)
    if (x[B_GRAD + b] && (offered & kda_grad_problem(&q->p) & (1u << b))) want |= 1u << b;
  if (!want)
    return rep_set(a, KDA_CALL_UNSUPPORTED, KDA_EUNSUPPORTED,
                   "supports_backward offers none of the problem's gradients%s%s", 0, 0);
  void *g[KDA_GRAD_COUNT];
  for (int b = 0; b < KDA_GRAD_COUNT; b++) g[b] = (want & (1u << b)) ? x[B_GRAD + b] : NULL;
  kda_backend_grads d = {sizeof d, want, x[B_SEED], x[B_SEED + 1], x[B_SEED + 2],
                         g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]};
  set_stage(c, ST_BACKWARD);
  double t0 = now_s();
  st = c->b->backward(c->handle, &q->p, &t, &d);
  a->seconds = now_s() - t0;
  set_stage(c, ST_NONE);
  if (fp_check(&before, "backward", a)) return;
  if (st != KDA_OK) return slot_failed(c, a, "backward", st);
  a->grads = want;
  rep_set(a, KDA_CALL_OK, KDA_OK, "%s%s", NULL, NULL);
}

/* describe (ABI version 2, optional): KDA_CALL_UNSUPPORTED when the table has none. */
void kda_wchild_describe(wchild *c, wrep *a) {
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

void kda_wchild_close(wchild *c, wrep *a) {
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
void kda_wchild_variant(wchild *c, const kda_backend_ref *ref, wrep *a) {
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
  a->resident = kda_wchild_has_resident(b);
  a->grads = (uint32_t)kda_backend_has_backward(b);
  kda_wchild_variant(c, ref, a);
}

void kda_wchild_main(const kda_backend_ref *ref, pid_t parent, int ctl, int memfd, int logw,
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
    a.stage = q.type == RQ_OPEN      ? ST_OPEN
              : q.type == RQ_CLOSE   ? ST_CLOSE
              : q.type == RQ_BACKWARD ? ST_BACKWARD
                                     : ST_FORWARD;
    if (q.type == RQ_OPEN) kda_wchild_open(&c, &q, &a);
    else if (q.type == RQ_CALL) kda_wchild_call(&c, &q, &a);
    else if (q.type == RQ_BACKWARD) kda_wchild_backward(&c, &q, &a);
    else if (q.type == RQ_CLOSE) kda_wchild_close(&c, &a);
    else if (q.type == RQ_DESCRIBE) kda_wchild_describe(&c, &a);
    child_reply(&c, &a);
  }
}

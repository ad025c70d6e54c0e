/* kda_worker.c: a persistent, isolated backend worker, the runner's side: one child process
 * per (backend, parameters) serving many calls over a socket and a shared memory region
 * (SPEC.md §7.8).
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
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kda_worker_impl.h"

#define REAP_S 5.0       /* bounded wait for a killed process */
#define EXIT_GRACE_S 1.0 /* after EOF, time for the worker to finish dying */

static const char *const stage_names[ST_LAST] = {
    "the worker", "load", "open", "supports", "forward", "close", "variant",
    "buffers_create", "forward_buffers", "synchronize", "buffers_read", "buffers_destroy",
    "supports_backward", "backward"};

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
      return kda_worker_buf_names[B_O + b];
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
    kda_wchild_main(&w->ref, parent, sv[1], w->memfd, lp[1], ap[0]);
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
    w->backward = a.grads == 1;
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
  kda_wchild_variant(&w->local, &w->ref, &a);
  if (a.outcome != KDA_CALL_OK) {
    result_from(&w->load_res, &a);
    w->load_failed = 1, w->params_rejected = a.rejected == 1;
    return KDA_OK;
  }
  w->cls = a.cls, w->in_dtype = a.in_dtype, w->out_dtype = a.out_dtype;
  w->abi_version = b->abi_version;
  w->caps = KDA_BACKEND_HAS(b, caps) ? b->caps : 0;
  w->resident = kda_wchild_has_resident(b);
  w->backward = kda_backend_has_backward(b);
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
int kda_worker_has_backward(const kda_worker *w) { return !w->load_failed && w->backward; }
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
  worker_lost(w, rc ? rc : -1, stage, q->type == RQ_CALL || q->type == RQ_BACKWARD ? q : NULL,
              r);
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
  if (!w->opts.isolate) sync_local(w), kda_wchild_open(&w->local, &q, &a);
  else if (transact(w, &q, &a, ST_OPEN, r)) return 0;
  if (a.outcome != KDA_CALL_OK) {
    result_from(r, &a);
    return 0;
  }
  w->handle_open = 1;
  return 1;
}

/* The outcome of a call that returned: the environment, the canaries, the inputs bit for bit
 * (the runner's checks, SPEC.md §7.8), else the backend's own. */
static void call_checked(kda_worker *w, const wreq *q, const wrep *a, const kda_tensors_f64 *in,
                         const pool_io *pl, const grad_io *gr, const char *entry,
                         kda_call_result *r) {
  const char *over = kda_region_overrun(w, q);
  const char *changed = kda_region_changed_input(w, in, pl, gr, q);
  r->status = a->status;
  r->seconds = a->seconds;
  if (a->outcome == KDA_CALL_FPENV) {
    r->outcome = a->outcome;
    snprintf(r->msg, sizeof r->msg, "%s", a->msg);
  } else if (over) {
    r->outcome = KDA_CALL_CRASH;
    snprintf(r->msg, sizeof r->msg, "%s wrote past the end of output '%s'", entry, over);
  } else if (changed) {
    r->outcome = KDA_CALL_INPUT;
    snprintf(r->msg, sizeof r->msg, "%s modified input '%s'", entry, changed);
  } else {
    r->outcome = a->outcome;
    snprintf(r->msg, sizeof r->msg, "%s", a->msg);
  }
}

/* A call on inputs in can go ahead: they are exact in the backend's input type (16-bit types
 * are never rounded into, SPEC.md §10.3) and the worker runs with an open handle; else r
 * says why not (or *st a runner failure) and 0 is returned. */
static int callable(kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                    kda_call_result *r, char *err, size_t errlen, int *st) {
  char why[256];
  *st = KDA_OK;
  if (!w->load_failed && !kda_worker_inputs_exact(w, p, in, why, sizeof why)) {
    r->outcome = KDA_CALL_UNSUPPORTED, r->status = KDA_EUNSUPPORTED;
    snprintf(r->msg, sizeof r->msg, "the backend takes %s buffers and the runner does not round "
             "into them: %s", kda_precision_name(w->in_dtype), why);
    return 0;
  }
  return ready(w, r, err, errlen, st);
}

static int call_impl(kda_worker *w, int32_t via, const kda_problem *p,
                     const kda_tensors_f64 *in, const pool_io *pl, kda_outputs *out,
                     kda_call_result *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  int st;
  if (!callable(w, p, in, r, err, errlen, &st)) return st;
  wreq q;
  wrep a;
  request_init(&q, &a, RQ_CALL);
  q.p = *p;
  q.mem_limit = w->opts.memory_limit;
  q.resident = via == KDA_VIA_RESIDENT;
  size_t size = kda_region_layout(w, p, in, pl, &q);
  if (!size) return snprintf(err, errlen, "problem sizes out of range"), KDA_EINVAL;
  if (region_reserve(w, size) != KDA_OK)
    return snprintf(err, errlen, "cannot grow the shared region to %zu bytes", size), KDA_ENOMEM;
  q.map_size = w->map_size;
  kda_region_put_inputs(w, in, pl, NULL, &q);
  if (!w->opts.isolate) {
    sync_local(w);
    kda_wchild_call(&w->local, &q, &a);
  } else if (transact(w, &q, &a, ST_FORWARD, r)) {
    return KDA_OK;
  }
  call_checked(w, &q, &a, in, pl, NULL, "forward", r);
  if (r->outcome == KDA_CALL_OK) kda_region_widen(w, &q, out);
  if (pl) kda_region_widen_pool(w, &q, pl); /* also after an error: a rejected call must leave it as is */
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

int kda_worker_backward(kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                        const kda_worker_seeds *sd, uint32_t want, double *const *grads,
                        uint32_t *wrote, kda_call_result *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  *wrote = 0;
  if (!w->load_failed && !w->backward) {
    r->outcome = KDA_CALL_UNSUPPORTED, r->status = KDA_EUNSUPPORTED;
    snprintf(r->msg, sizeof r->msg, "the backend has no backward pass");
    return KDA_OK;
  }
  int st;
  if (!callable(w, p, in, r, err, errlen, &st)) return st;
  grad_io gr = {sd->dout, p->want_final_state ? sd->dht : NULL,
                p->n_checkpoints > 0 ? sd->dhc : NULL, want & KDA_GRAD_ALL};
  wreq q;
  wrep a;
  request_init(&q, &a, RQ_BACKWARD);
  q.p = *p;
  q.mem_limit = w->opts.memory_limit;
  size_t size = kda_region_layout_backward(w, p, in, &gr, &q);
  if (!size) return snprintf(err, errlen, "problem sizes out of range"), KDA_EINVAL;
  if (region_reserve(w, size) != KDA_OK)
    return snprintf(err, errlen, "cannot grow the shared region to %zu bytes", size), KDA_ENOMEM;
  q.map_size = w->map_size;
  kda_region_put_inputs(w, in, NULL, &gr, &q);
  if (!w->opts.isolate) {
    sync_local(w);
    kda_wchild_backward(&w->local, &q, &a);
  } else if (transact(w, &q, &a, ST_BACKWARD, r)) {
    return KDA_OK;
  }
  call_checked(w, &q, &a, in, NULL, &gr, "backward", r);
  if (r->outcome != KDA_CALL_OK) return KDA_OK;
  *wrote = a.grads & gr.want; /* the worker's word, bounded by what was laid out */
  kda_region_widen_grads(w, &q, *wrote, grads);
  return KDA_OK;
}

int kda_worker_end_case(kda_worker *w, kda_call_result *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  if (!w->handle_open) return KDA_OK;
  wreq q;
  wrep a;
  request_init(&q, &a, RQ_CLOSE);
  w->handle_open = 0;
  if (!w->opts.isolate) sync_local(w), kda_wchild_close(&w->local, &a);
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
  if (!w->opts.isolate) sync_local(w), kda_wchild_describe(&w->local, &a);
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

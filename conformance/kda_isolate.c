/* kda_isolate.c: one backend call in a child process with a time limit (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 *
 * The child opens the backend, asks supports, converts the float64 inputs to the backend's
 * input type, runs forward into output buffers in a MAP_SHARED mapping, checks the
 * floating-point environment and the inputs, closes the backend and _exits.  The parent waits
 * on a pipe with poll (the child's end closes when it dies), kills it with SIGKILL on the time
 * limit, and reads the outcome from the mapping.  Guard bytes after every output buffer catch
 * writes past the end; outputs start as NaN so that an unwritten element cannot pass.
 */
#include <errno.h>
#include <fenv.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kda_conform.h"

#define GUARD_BYTES 64
#define GUARD_BYTE 0xA5

/* ---- Outputs. */
static double *alloc_f64(uint64_t n, int *fail) {
  double *p = (n + 1 > SIZE_MAX / sizeof(double)) ? NULL : calloc((size_t)n + 1, sizeof(double));
  if (!p) *fail = 1;
  return p;
}

int kda_outputs_alloc(const kda_problem *p, kda_outputs *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  kda_case_sizes s;
  int st = kda_case_sizes_get(p, &s, err, errlen);
  if (st != KDA_OK) return st;
  int fail = 0;
  out->n_o = s.o;
  out->n_ht = p->want_final_state ? s.ht : 0;
  out->n_hc = p->n_checkpoints > 0 ? s.hc : 0;
  out->o = alloc_f64(out->n_o, &fail);
  if (p->want_final_state) out->ht = alloc_f64(out->n_ht, &fail);
  if (p->n_checkpoints > 0) out->hc = alloc_f64(out->n_hc, &fail);
  if (!fail) return KDA_OK;
  kda_outputs_free(out);
  return snprintf(err, errlen, "out of memory for the outputs"), KDA_ENOMEM;
}

void kda_outputs_free(kda_outputs *out) {
  free(out->o);
  free(out->ht);
  free(out->hc);
  memset(out, 0, sizeof *out);
}

const char *kda_call_outcome_name(int32_t outcome) {
  static const char *const names[] = {"ok", "unsupported", "error", "crash",
                                      "timeout", "fpenv", "input-modified"};
  return (outcome >= 0 && outcome <= KDA_CALL_INPUT) ? names[outcome] : "?";
}

/* ---- The floating-point control state that a backend must leave unchanged. */
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

/* ---- The shared mapping: a header, then each output buffer followed by guard bytes. */
typedef struct call_hdr {
  int32_t outcome, status, done, stage;
  double seconds;
  char msg[KDA_ERRLEN];
} call_hdr;

typedef struct call_map {
  unsigned char *base;
  size_t size;
  call_hdr *hdr;
  void *o, *ht, *hc;
  size_t esize;
  uint64_t n_o, n_ht, n_hc;
} call_map;

static size_t round64(size_t x) { return (x + 63) & ~(size_t)63; }

static int map_create(call_map *m, const kda_outputs *out, int32_t dtype, int shared) {
  memset(m, 0, sizeof *m);
  m->esize = dtype == KDA_PRECISION_FP64 ? sizeof(double) : sizeof(float);
  m->n_o = out->n_o;
  m->n_ht = out->n_ht;
  m->n_hc = out->n_hc;
  size_t off_o = round64(sizeof(call_hdr));
  size_t off_ht = off_o + round64(m->n_o * m->esize + GUARD_BYTES);
  size_t off_hc = off_ht + round64(m->n_ht * m->esize + GUARD_BYTES);
  m->size = off_hc + round64(m->n_hc * m->esize + GUARD_BYTES);
  void *base = mmap(NULL, m->size, PROT_READ | PROT_WRITE,
                    (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return KDA_ENOMEM;
  m->base = base;
  m->hdr = base;
  m->o = m->base + off_o;
  m->ht = out->ht ? m->base + off_ht : NULL;
  m->hc = out->hc ? m->base + off_hc : NULL;
  void *bufs[3] = {m->o, m->ht, m->hc};
  uint64_t ns[3] = {m->n_o, m->n_ht, m->n_hc};
  for (int b = 0; b < 3; b++) {
    if (!bufs[b]) continue;
    for (uint64_t i = 0; i < ns[b]; i++) {
      if (m->esize == sizeof(double)) ((double *)bufs[b])[i] = NAN;
      else ((float *)bufs[b])[i] = NAN;
    }
    memset((unsigned char *)bufs[b] + ns[b] * m->esize, GUARD_BYTE, GUARD_BYTES);
  }
  return KDA_OK;
}

static void map_destroy(call_map *m) {
  if (m->base) munmap(m->base, m->size);
  memset(m, 0, sizeof *m);
}

/* Name of the first output buffer whose guard bytes changed, or NULL. */
static const char *map_overrun(const call_map *m) {
  static const char *const names[3] = {"o", "ht", "hc"};
  const void *bufs[3] = {m->o, m->ht, m->hc};
  uint64_t ns[3] = {m->n_o, m->n_ht, m->n_hc};
  for (int b = 0; b < 3; b++) {
    if (!bufs[b]) continue;
    const unsigned char *g = (const unsigned char *)bufs[b] + ns[b] * m->esize;
    for (int i = 0; i < GUARD_BYTES; i++)
      if (g[i] != GUARD_BYTE) return names[b];
  }
  return NULL;
}

static void map_widen(const call_map *m, kda_outputs *out) {
  double *dst[3] = {out->o, out->ht, out->hc};
  const void *src[3] = {m->o, m->ht, m->hc};
  uint64_t ns[3] = {m->n_o, m->n_ht, m->n_hc};
  for (int b = 0; b < 3; b++) {
    if (!src[b] || !dst[b]) continue;
    for (uint64_t i = 0; i < ns[b]; i++)
      dst[b][i] = m->esize == sizeof(double) ? ((const double *)src[b])[i]
                                             : (double)((const float *)src[b])[i];
  }
}

/* ---- Inputs converted to the backend's type (always copies: the originals stay pristine
 * so that a backend writing into its inputs is detected). */
#define N_IN 8
typedef struct conv_inputs {
  void *x[N_IN];
  uint64_t n[N_IN];
} conv_inputs;

static void in_list(const kda_tensors_f64 *in, const double *xs[N_IN]) {
  xs[0] = in->q, xs[1] = in->k, xs[2] = in->v, xs[3] = in->g;
  xs[4] = in->beta, xs[5] = in->A_log, xs[6] = in->dt_bias, xs[7] = in->h0;
}

static int conv_make(const kda_problem *p, const kda_tensors_f64 *in, int32_t dtype,
                     conv_inputs *c) {
  memset(c, 0, sizeof *c);
  kda_case_sizes s;
  if (kda_case_sizes_get(p, &s, NULL, 0) != KDA_OK) return KDA_EINVAL;
  const uint64_t ns[N_IN] = {s.q, s.k, s.v, s.g, s.beta, s.A_log, s.dt_bias, s.h0};
  const double *xs[N_IN];
  in_list(in, xs);
  size_t es = dtype == KDA_PRECISION_FP64 ? sizeof(double) : sizeof(float);
  for (int a = 0; a < N_IN; a++) {
    if (!xs[a]) continue;
    c->n[a] = ns[a];
    c->x[a] = malloc((size_t)ns[a] * es + 1);
    if (!c->x[a]) return KDA_ENOMEM;
    for (uint64_t i = 0; i < ns[a]; i++) {
      if (dtype == KDA_PRECISION_FP64) ((double *)c->x[a])[i] = xs[a][i];
      else ((float *)c->x[a])[i] = (float)xs[a][i];
    }
  }
  return KDA_OK;
}

/* 1 when the converted inputs still equal a fresh conversion of the originals. */
static int conv_intact(const kda_tensors_f64 *in, int32_t dtype, const conv_inputs *c) {
  const double *xs[N_IN];
  in_list(in, xs);
  for (int a = 0; a < N_IN; a++) {
    if (!c->x[a]) continue;
    for (uint64_t i = 0; i < c->n[a]; i++) {
      if (dtype == KDA_PRECISION_FP64) {
        if (memcmp(&((double *)c->x[a])[i], &xs[a][i], sizeof(double)) != 0) return 0;
      } else {
        float f = (float)xs[a][i];
        if (memcmp(&((float *)c->x[a])[i], &f, sizeof f) != 0) return 0;
      }
    }
  }
  return 1;
}

static void conv_free(conv_inputs *c) {
  for (int a = 0; a < N_IN; a++) free(c->x[a]);
  memset(c, 0, sizeof *c);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void set_result(call_hdr *h, int32_t outcome, int32_t status, const char *fmt,
                       const char *a, const char *b) {
  h->outcome = outcome;
  h->status = status;
  snprintf(h->msg, sizeof h->msg, fmt, a ? a : "", b ? b : "");
}

/* The body of a call, in the child (or in-process).  Writes the outcome into m->hdr. */
static void call_body(const kda_backend *b, const char *params, const kda_problem *p,
                      const kda_tensors_f64 *in, call_map *m) {
  call_hdr *h = m->hdr;
  char msg[KDA_ERRLEN] = "";
  void *handle = NULL;
  h->stage = 1;
  int32_t st = b->open(params ? params : "", &handle, msg, sizeof msg);
  if (st != KDA_OK) {
    set_result(h, st == KDA_EUNSUPPORTED ? KDA_CALL_UNSUPPORTED : KDA_CALL_ERROR, st,
               "open failed: %.480s%s", msg, NULL);
    return;
  }
  h->stage = 2;
  st = b->supports(handle, p, msg, sizeof msg);
  if (st != KDA_OK) {
    set_result(h, KDA_CALL_UNSUPPORTED, st, "%s%s", msg[0] ? msg : "not supported", NULL);
    b->close(handle);
    return;
  }
  conv_inputs c;
  if (conv_make(p, in, b->input_dtype, &c) != KDA_OK) {
    set_result(h, KDA_CALL_ERROR, KDA_ENOMEM, "runner: out of memory for inputs%s%s", 0, 0);
    conv_free(&c);
    b->close(handle);
    return;
  }
  kda_backend_tensors t = {sizeof t, b->input_dtype, b->output_dtype, 0,
                           c.x[0], c.x[1], c.x[2], c.x[3], c.x[4], c.x[5], c.x[6], c.x[7],
                           in->cu_seqlens, in->checkpoints, m->o, m->ht, m->hc};
  fpctl before, after;
  fpctl_get(&before);
  h->stage = 3;
  double t0 = now_s();
  st = b->forward(handle, p, &t);
  h->seconds = now_s() - t0;
  fpctl_get(&after);
  h->stage = 4;
  const char *over = map_overrun(m);
  if (memcmp(&before, &after, sizeof before) != 0) {
    fesetround(before.round);
    set_result(h, KDA_CALL_FPENV, st,
               "forward changed the floating-point environment (rounding, masks, FTZ/DAZ)%s%s",
               0, 0);
  } else if (over) {
    set_result(h, KDA_CALL_CRASH, st, "forward wrote past the end of output '%s'%s", over, 0);
  } else if (!conv_intact(in, b->input_dtype, &c)) {
    set_result(h, KDA_CALL_INPUT, st, "forward modified an input buffer%s%s", 0, 0);
  } else if (st != KDA_OK) {
    const char *le = b->last_error(handle);
    set_result(h, st == KDA_EUNSUPPORTED ? KDA_CALL_UNSUPPORTED : KDA_CALL_ERROR, st,
               "forward returned %s: %s", kda_strstatus(st), le ? le : "");
  } else {
    set_result(h, KDA_CALL_OK, KDA_OK, "%s%s", 0, 0);
  }
  conv_free(&c);
  h->stage = 5;
  b->close(handle);
}

static void describe_death(int wst, const call_hdr *h, kda_call_result *r) {
  static const char *const stages[] = {"before open", "open", "supports", "forward",
                                       "the checks", "close"};
  const char *where = (h->stage >= 0 && h->stage <= 5) ? stages[h->stage] : "?";
  r->outcome = KDA_CALL_CRASH;
  if (WIFSIGNALED(wst))
    snprintf(r->msg, sizeof r->msg, "killed by signal %d (%s) in %s", WTERMSIG(wst),
             strsignal(WTERMSIG(wst)), where);
  else
    snprintf(r->msg, sizeof r->msg, "the backend's process exited with status %d in %s",
             WIFEXITED(wst) ? WEXITSTATUS(wst) : -1, where);
}

/* Waits for the child: 1 when it finished in time, 0 when it had to be killed. */
static int wait_child(pid_t pid, int rfd, double timeout_s, int *wst) {
  double deadline = now_s() + timeout_s;
  int finished = 0;
  for (;;) {
    int ms = -1;
    if (timeout_s > 0) {
      double left = deadline - now_s();
      if (left <= 0) break;
      ms = (int)(left * 1000.0) + 1;
    }
    struct pollfd pf = {rfd, POLLIN, 0};
    int n = poll(&pf, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      char buf[16];
      ssize_t k = read(rfd, buf, sizeof buf);
      if (k > 0 || (k < 0 && errno == EINTR)) continue;
      finished = 1; /* EOF: the child's end is closed */
    }
    break;
  }
  if (!finished) kill(pid, SIGKILL);
  while (waitpid(pid, wst, 0) < 0 && errno == EINTR) {
  }
  return finished;
}

int kda_call_forward(const kda_backend *b, const char *params, const kda_problem *p,
                     const kda_tensors_f64 *in, kda_outputs *out, const kda_call_opts *opts,
                     kda_call_result *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  call_map m;
  int isolate = opts ? opts->isolate : 1;
  if (map_create(&m, out, b->output_dtype, isolate) != KDA_OK)
    return snprintf(err, errlen, "cannot map the output buffers"), KDA_ENOMEM;
  if (!isolate) {
    call_body(b, params, p, in, &m);
  } else {
    int fds[2];
    if (pipe(fds) != 0) {
      map_destroy(&m);
      return snprintf(err, errlen, "pipe: %s", strerror(errno)), KDA_EIO;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
      close(fds[0]), close(fds[1]);
      map_destroy(&m);
      return snprintf(err, errlen, "fork: %s", strerror(errno)), KDA_EIO;
    }
    if (pid == 0) {
      close(fds[0]);
      call_body(b, params, p, in, &m);
      m.hdr->done = 1;
      _exit(0);
    }
    close(fds[1]);
    int wst = 0;
    int finished = wait_child(pid, fds[0], opts ? opts->timeout_s : 0, &wst);
    close(fds[0]);
    if (!finished) {
      r->outcome = KDA_CALL_TIMEOUT;
      snprintf(r->msg, sizeof r->msg, "killed after the time limit of %g s",
               opts ? opts->timeout_s : 0.0);
      map_destroy(&m);
      return KDA_OK;
    }
    if (!m.hdr->done || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
      describe_death(wst, m.hdr, r);
      map_destroy(&m);
      return KDA_OK;
    }
  }
  r->outcome = m.hdr->outcome;
  r->status = m.hdr->status;
  r->seconds = m.hdr->seconds;
  snprintf(r->msg, sizeof r->msg, "%s", m.hdr->msg);
  if (r->outcome == KDA_CALL_OK) map_widen(&m, out);
  map_destroy(&m);
  return KDA_OK;
}

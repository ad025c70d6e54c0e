/* plugin_faults.c: test-only backend plugin that misbehaves in one chosen way (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 *
 * params "fault=NAME [pidfile=PATH]" picks the fault; "fault=none" is the correct float64
 * implementation of plugin_mutants.c (included below), which every fault otherwise runs.
 * check_conformance.c asserts the verdict of each fault and that the run goes on.
 */
#include <errno.h>
#include <signal.h>
#include <unistd.h>

/* The correct implementation, without its entry point (this file exports its own). */
#define kda_backend_entry kda_plugin_mutants_entry_unused
#include "plugin_mutants.c"
#undef kda_backend_entry

#define FAULTS(X)                                                                        \
  X(none) X(segv_open) X(segv_supports) X(segv_forward) X(segv_close) X(abort_forward)   \
  X(exit_forward) X(loop_forward) X(closefds_block) X(grandchild) X(fpenv_open)          \
  X(fpenv_forward) X(fpenv_close) X(ht_overrun128) X(o_overrun1) X(write_cu) X(write_ck) \
  X(write_q) X(print) X(oom) X(error) X(unsupported_forward) X(nondet) X(noncausal)     \
  X(crash_once) X(grandchild_loop) X(fpenv_supports) X(o_far)
#define AS_ENUM(n) F_##n,
#define AS_NAME(n) #n,
enum { FAULTS(AS_ENUM) F_COUNT };
static const char *const fault_names[F_COUNT] = {FAULTS(AS_NAME)};

typedef struct fhandle {
  mhandle m; /* first: the handle of the correct implementation */
  int fault;
  char pidfile[256];
} fhandle;

static unsigned long n_calls; /* per process: the worker keeps it across calls */
static double *volatile nowhere;

static void die_segv(void) { *nowhere = 1.0; }

/* Sets flush-to-zero and denormals-are-zero (what a -ffast-math constructor does). */
static void set_ftz(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned m;
  __asm__ volatile("stmxcsr %0" : "=m"(m));
  m |= 0x8040u;
  __asm__ volatile("ldmxcsr %0" : : "m"(m));
#else
  fesetround(FE_TOWARDZERO);
#endif
}

static const char *word_after(const char *params, const char *key, char *buf, size_t cap) {
  const char *s = strstr(params, key);
  if (!s) return NULL;
  s += strlen(key);
  size_t n = strcspn(s, " ");
  snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), s);
  return buf;
}

static int32_t f_open(const char *params, void **handle, char *err, uint32_t errlen) {
  char name[64];
  if (!word_after(params, "fault=", name, sizeof name)) snprintf(name, sizeof name, "none");
  int f = 0;
  while (f < F_COUNT && strcmp(fault_names[f], name) != 0) f++;
  if (f == F_COUNT) {
    if (errlen) snprintf(err, errlen, "unknown fault '%s'", name);
    return KDA_EINVAL;
  }
  fhandle *h = calloc(1, sizeof *h);
  if (!h) return KDA_ENOMEM;
  h->fault = f;
  word_after(params, "pidfile=", h->pidfile, sizeof h->pidfile);
  *handle = h;
  if (f == F_segv_open) die_segv();
  if (f == F_fpenv_open) set_ftz();
  return KDA_OK;
}

static void f_close(void *handle) {
  fhandle *h = handle;
  if (h && h->fault == F_segv_close) die_segv();
  if (h && h->fault == F_fpenv_close) fesetround(FE_UPWARD);
  free(h);
}

static int32_t f_supports(void *handle, const kda_problem *p, char *r, uint32_t n) {
  if (((fhandle *)handle)->fault == F_segv_supports) die_segv();
  if (((fhandle *)handle)->fault == F_fpenv_supports) fesetround(FE_DOWNWARD);
  return KDA_OK;
}

static const char *f_last_error(void *handle) { return ((fhandle *)handle)->m.err; }

/* A child that outlives forward unless the runner kills the process group. */
static void spawn_grandchild(const fhandle *h) {
  pid_t pid = fork();
  if (pid == 0) {
    for (;;) sleep(1);
  }
  FILE *f = h->pidfile[0] ? fopen(h->pidfile, "w") : NULL;
  if (f) fprintf(f, "%ld\n", (long)pid), fclose(f);
}

/* Allocates (without touching) until malloc fails; frees everything; reports KDA_ENOMEM. */
static int32_t eat_memory(fhandle *h) {
  void *chunks[1 << 14];
  int n = 0;
  while (n < (1 << 14) && (chunks[n] = malloc((size_t)1 << 28))) n++;
  int hit = n < (1 << 14);
  while (n > 0) free(chunks[--n]);
  if (!hit) return KDA_OK; /* no limit: 4 TiB of address space was granted */
  snprintf(h->m.err, sizeof h->m.err, "out of memory (malloc failed)");
  return KDA_ENOMEM;
}

static int32_t f_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  fhandle *h = handle;
  unsigned long call = n_calls++;
  switch (h->fault) {
    case F_segv_forward: die_segv(); break;
    case F_abort_forward: abort();
    case F_exit_forward: exit(3);
    case F_crash_once: { /* the first call of the test (the marker file is the memory) */
      FILE *f = fopen(h->pidfile, "r");
      if (f) fclose(f);
      else if ((f = fopen(h->pidfile, "w"))) fclose(f), die_segv();
      break;
    }
    case F_grandchild_loop: spawn_grandchild(h); /* fall through */
    case F_loop_forward: {
      volatile uint64_t spin = 0;
      for (;;) spin++;
    }
    case F_closefds_block:
      for (int fd = 0; fd < 1024; fd++) close(fd);
      for (;;) pause();
    case F_oom: return eat_memory(h);
    case F_error: return snprintf(h->m.err, sizeof h->m.err, "deliberate error"), KDA_EINVAL;
    case F_unsupported_forward:
      return snprintf(h->m.err, sizeof h->m.err, "not this one"), KDA_EUNSUPPORTED;
    default: break;
  }
  int32_t st = m_forward(&h->m, p, t);
  uint64_t n_o = (uint64_t)(p->T * p->HV * p->V);
  double *o = t->o;
  switch (h->fault) {
    case F_grandchild: spawn_grandchild(h); break;
    case F_fpenv_forward: set_ftz(); break;
    case F_ht_overrun128:
      if (t->ht) memset((char *)t->ht + (size_t)(p->N * p->HV * p->K * p->V) * 8, 0x55, 128);
      break;
    case F_o_overrun1: o[n_o] = 1.0; break;
    case F_o_far: /* one float 1 MiB past the end of o (not into the next page) */
      *(volatile float *)((char *)(o + n_o) + ((size_t)1 << 20)) = 1.0f;
      break;
    case F_write_cu: ((int64_t *)t->cu_seqlens)[0] = 0x7fff; break;
    case F_write_ck:
      if (t->checkpoints) ((int64_t *)t->checkpoints)[0] += 1;
      break;
    case F_write_q: ((double *)t->q)[0] += 1.0; break;
    case F_print:
      printf("hello from forward on stdout\n");
      fprintf(stderr, "and on stderr\n");
      break;
    case F_nondet: /* GPU-atomics-like: one ulp somewhere different on every call */
      if (n_o) o[call % n_o] = nextafter(o[call % n_o], INFINITY);
      break;
    case F_noncausal: /* deterministic, but token 0 sees the last token's v: the runner's
                         perturbation (v -> -v - 0.5) always moves v across -0.25 */
      if (n_o) {
        double vl = ((const double *)t->v)[(p->T - 1) * p->HV * p->V];
        o[0] = nextafter(o[0], vl > -0.25 ? INFINITY : -INFINITY);
      }
      break;
    default: break;
  }
  return st;
}

static int32_t f_describe(void *handle, kda_backend_info *info) {
  snprintf(info->device, sizeof info->device, "test device");
  snprintf(info->isa, sizeof info->isa, "scalar");
  info->threads = 1;
  return KDA_OK;
}

static const kda_backend faults = {
    KDA_BACKEND_ABI_VERSION, sizeof(kda_backend), "faults",
    "test-only: float64 KDA with one deliberate fault (params fault=NAME)", KDA_CLASS_FP32,
    KDA_BACKEND_DTYPE_F64, KDA_BACKEND_DTYPE_F64, 0, f_open, f_close, f_supports, f_forward,
    f_last_error, f_describe, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return abi_version >= 1 ? &faults : NULL;
}

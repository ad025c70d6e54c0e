/* kda_worker_impl.h: what the worker's three files share (not installed): the protocol
 * between the runner's side (kda_worker.c) and the worker process (kda_worker_child.c), the
 * layout of a call in the shared region (kda_worker_region.c), and the worker's state.
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_WORKER_IMPL_H
#define KDA_WORKER_IMPL_H

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include "kda_dtype.h"
#include "kda_worker_internal.h"

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

/* ---- Protocol: fixed-size messages on a stream socket. */
#define MAGIC 0x4B444157u /* "KDAW" */
enum { RQ_OPEN = 1, RQ_CALL, RQ_CLOSE, RQ_DESCRIBE, RP_INFO, RP_DONE, RQ_BACKWARD };
enum { ST_NONE, ST_LOAD, ST_OPEN, ST_SUPPORTS, ST_FORWARD, ST_CLOSE, ST_VARIANT,
       ST_BUF_CREATE, ST_BUF_FORWARD, ST_BUF_SYNC, ST_BUF_READ, ST_BUF_DESTROY,
       ST_SUPPORTS_BACKWARD, ST_BACKWARD, ST_LAST };

/* Offsets in the shared region of q k v g beta A_log dt_bias h0, cu_seqlens, checkpoints,
 * state_indices, the seeds do dht dhc of a backward call (inputs), o ht hc (outputs), the pool
 * (both) and the gradients dq dk dv dg dbeta dA_log ddt_bias dh0 of a backward call (outputs);
 * -1 when absent.  Every buffer from B_O on is an output ending before a guard page. */
#define N_FIN 8
#define B_CU 8
#define B_CK 9
#define B_IDX 10
#define B_SEED 11 /* do dht dhc */
#define N_SEED 3
#define B_O 14
#define B_POOL 17
#define B_GRAD 18 /* dq dk dv dg dbeta dA_log ddt_bias dh0, in KDA_GRAD_* bit order */
#define N_BUF 26
#define N_GUARD (N_BUF - B_O) /* o ht hc pool and the gradients */
extern const char *const kda_worker_buf_names[N_BUF]; /* kda_worker_region.c */

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
  uint32_t grads;   /* RQ_BACKWARD: the KDA_GRAD_* bits the backend wrote (offered and
                       asked for); RP_INFO: 1 when the table has the backward slots */
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

/* The worker's side of a backend: in the worker process, or in the runner's own process with
 * --no-isolate (kda_worker_child.c). */
typedef struct wchild {
  const kda_backend *b;
  int32_t in_dtype, out_dtype; /* the variant's (SPEC.md §7.8), else the table's */
  void *handle;
  int ctl, memfd;
  unsigned char *map;
  size_t map_size;
  int isolated; /* 0: served in the runner's process (--no-isolate) */
} wchild;

/* The runner's side of a worker (kda_worker.c). */
struct kda_worker {
  kda_backend_ref ref;
  kda_call_opts opts;
  char name[64], desc[256];
  char label[64]; /* kda_worker_label's buffer */
  int32_t cls, in_dtype, out_dtype; /* of the parameters: the variant's, else the table's */
  uint32_t abi_version, caps;
  int resident; /* the table has the resident-buffer slots */
  int backward; /* the table has the backward slots (supports_backward, backward) */
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

/* A pool call's state_indices [N], its S and the pool [S, HV, K, V] as float64 (SPEC.md
 * §7.8); NULL for an ordinary call. */
typedef struct pool_io {
  const int64_t *idx;
  int64_t S;
  double *pool;
} pool_io;

/* A backward call's seeds as float64 (do [T, HV, V], dht as ht, dhc as hc; NULL when the
 * problem has none) and the gradients asked for (KDA_GRAD_* bits); NULL for a forward call. */
typedef struct grad_io {
  const double *dout, *dht, *dhc;
  uint32_t want;
} grad_io;

/* 1 when the table has both backward slots (validated: both or neither). */
static inline int kda_backend_has_backward(const kda_backend *b) {
  return KDA_BACKEND_HAS(b, backward) && b->supports_backward && b->backward;
}

static inline size_t up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sends n bytes; with limit_s > 0 the wait for room in the socket is bounded too. */
static inline int send_all(int fd, const void *buf, size_t n, double limit_s) {
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

/* ---- The worker process's requests (kda_worker_child.c); with --no-isolate the runner serves
 * them itself on its own mapping of the region. */
void kda_wchild_open(wchild *c, const wreq *q, wrep *a);
void kda_wchild_call(wchild *c, const wreq *q, wrep *a);
/* supports_backward, then backward on the region's buffers (RQ_BACKWARD). */
void kda_wchild_backward(wchild *c, const wreq *q, wrep *a);
void kda_wchild_describe(wchild *c, wrep *a);
void kda_wchild_close(wchild *c, wrep *a);
/* The class and types of the worker's parameters (the variant slot), before any open. */
void kda_wchild_variant(wchild *c, const kda_backend_ref *ref, wrep *a);
/* 1 when the table has the resident-buffer slots (validated: all or none). */
int kda_wchild_has_resident(const kda_backend *b);
/* The worker process: isolates itself, loads the backend, serves requests until EOF. */
void kda_wchild_main(const kda_backend_ref *ref, pid_t parent, int ctl, int memfd, int logw,
                     int alive);

/* ---- One call in the shared region (kda_worker_region.c). */
/* Places the inputs, then each output before its guard; the region's size, or 0 for a problem
 * whose sizes do not fit. */
size_t kda_region_layout(const kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                         const pool_io *pl, wreq *q);
/* The same for a backward call: the inputs and seeds, then each gradient of gr->want (no o,
 * ht, hc) before its guard. */
size_t kda_region_layout_backward(const kda_worker *w, const kda_problem *p,
                                  const kda_tensors_f64 *in, const grad_io *gr, wreq *q);
void kda_region_put_inputs(kda_worker *w, const kda_tensors_f64 *in, const pool_io *pl,
                           const grad_io *gr, const wreq *q);
/* Name of the first input changed, bit for bit, or NULL. */
const char *kda_region_changed_input(const kda_worker *w, const kda_tensors_f64 *in,
                                     const pool_io *pl, const grad_io *gr, const wreq *q);
/* The gradients of bits `which`, widened exactly into d[KDA_GRAD_COUNT] (bit order). */
void kda_region_widen_grads(const kda_worker *w, const wreq *q, uint32_t which, double *const *d);
/* Name of the first output whose canary bytes changed, or NULL. */
const char *kda_region_overrun(const kda_worker *w, const wreq *q);
void kda_region_widen(const kda_worker *w, const wreq *q, kda_outputs *out);
void kda_region_widen_pool(const kda_worker *w, const wreq *q, const pool_io *pl);

#endif

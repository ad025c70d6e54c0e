/* kda_worker_region.c: the layout of one call in the worker's shared region (SPEC.md §7.8):
 * inputs converted to the backend's element types, each output (and a pool) ending before a
 * PROT_NONE guard with canary bytes in the slack before it, and the checks the runner makes
 * after the call (inputs unchanged bit for bit, canaries intact) and the widening of outputs.
 * SPDX-License-Identifier: MIT
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_worker_impl.h"

const char *const kda_worker_buf_names[N_BUF] = {
    "q", "k", "v", "g", "beta", "A_log", "dt_bias", "h0", "cu_seqlens", "checkpoints",
    "state_indices", "do", "dht", "dhc", "o", "ht", "hc", "pool", "dq", "dk", "dv", "dg", "dbeta",
    "dA_log", "ddt_bias", "dh0"};

/* The element type of float buffer b (kda_backend.h, "Element types"): q k v g beta take the
 * input type and o the output type; A_log dt_bias h0, and ht hc pool, the wide type of theirs
 * (float for a 16-bit type, SPEC.md §10.3).  A seed has the type of the output it seeds, a
 * gradient the type of its input (kda_backend_grads). */
static int32_t buf_dtype(const kda_worker *w, int b) {
  if (b >= B_GRAD) b -= B_GRAD;
  else if (b >= B_SEED && b < B_SEED + N_SEED) b = B_O + (b - B_SEED);
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

/* Places the float inputs (and a backward call's seeds) and the index arrays from the
 * region's second page on; returns the offset after them. */
static size_t layout_inputs(const kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                            const kda_problem_sizes *sz, const pool_io *pl, const grad_io *gr,
                            wreq *q) {
  const kda_problem_sizes s = *sz;
  const double *xs[N_FIN] = {in->q, in->k, in->v, in->g, in->beta, in->A_log, in->dt_bias, in->h0};
  const uint64_t ns[N_FIN] = {s.q, s.k, s.v, s.g, s.beta, s.A_log, s.dt_bias, s.h0};
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), off = pg;
  for (int b = 0; b < N_BUF; b++) q->off[b] = -1, q->len[b] = 0;
  for (int b = 0; b < N_GUARD; b++) q->guard[b] = -1, q->guard_len[b] = 0;
  for (int b = 0; b < N_FIN; b++)
    if (xs[b])
      q->off[b] = (int64_t)off, q->len[b] = ns[b] * buf_es(w, b), off = up(off + q->len[b] + 1, 64);
  if (gr) {
    const double *ds[N_SEED] = {gr->dout, gr->dht, gr->dhc};
    const uint64_t dn[N_SEED] = {s.o, s.ht, s.hc};
    for (int b = 0; b < N_SEED; b++)
      if (ds[b] && dn[b])
        q->off[B_SEED + b] = (int64_t)off, q->len[B_SEED + b] = dn[b] * buf_es(w, B_SEED + b),
        off = up(off + q->len[B_SEED + b] + 1, 64);
  }
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
  return up(off, pg);
}

/* Places output b of n elements at off so that its end is followed by its guard; returns the
 * offset after the guard. */
static size_t layout_output(const kda_worker *w, int b, uint64_t n, size_t off, wreq *q) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  size_t len = (size_t)n * buf_es(w, b), block = up(len ? len : 1, pg);
  q->off[b] = (int64_t)(off + block - up(len, 64));
  q->len[b] = len;
  q->guard[b - B_O] = (int64_t)(off + block);
  q->guard_len[b - B_O] = guard_size(len, pg);
  return off + block + q->guard_len[b - B_O];
}

/* Places the inputs, then each output so that its end is followed by a guard (the start is
 * 64-byte aligned; the < 64 bytes of slack before the guard hold canaries).  The guards are
 * address space only: the memfd's pages there are never touched.  Returns the region's size,
 * or 0 for a problem whose sizes do not fit. */
size_t kda_region_layout(const kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                     const pool_io *pl, wreq *q) {
  kda_problem_sizes s;
  if (kda_problem_sizes_get(p, &s, NULL, 0) != KDA_OK) return 0;
  size_t off = layout_inputs(w, p, in, &s, pl, NULL, q);
  /* a pool call has no ht: the final states go into the pool, in place */
  const int want[4] = {1, p->want_final_state != 0 && !pl, p->n_checkpoints > 0, !!pl};
  const uint64_t on[4] = {s.o, s.ht, s.hc, pl ? (uint64_t)(pl->S * p->HV * p->K * p->V) : 0};
  for (int b = 0; b < 4; b++)
    if (want[b]) off = layout_output(w, B_O + b, on[b], off, q);
  return off;
}

size_t kda_region_layout_backward(const kda_worker *w, const kda_problem *p,
                                  const kda_tensors_f64 *in, const grad_io *gr, wreq *q) {
  kda_problem_sizes s;
  if (kda_problem_sizes_get(p, &s, NULL, 0) != KDA_OK) return 0;
  size_t off = layout_inputs(w, p, in, &s, NULL, gr, q);
  const uint64_t gn[KDA_GRAD_COUNT] = {s.q, s.k, s.v, s.g, s.beta, s.A_log, s.dt_bias, s.h0};
  for (int b = 0; b < KDA_GRAD_COUNT; b++)
    if (gr->want & (1u << b)) off = layout_output(w, B_GRAD + b, gn[b], off, q);
  return off;
}

/* The float64 source of float input b (q .. h0, or a seed), NULL when absent. */
static const double *input_src(const kda_tensors_f64 *in, const grad_io *gr, int b) {
  const double *xs[N_FIN] = {in->q, in->k, in->v, in->g, in->beta, in->A_log, in->dt_bias, in->h0};
  if (b < N_FIN) return xs[b];
  if (!gr || b < B_SEED || b >= B_SEED + N_SEED) return NULL;
  const double *ds[N_SEED] = {gr->dout, gr->dht, gr->dhc};
  return ds[b - B_SEED];
}

/* 1 when b is a float input buffer (q .. h0, the seeds). */
static int float_input(int b) { return b < N_FIN || (b >= B_SEED && b < B_SEED + N_SEED); }

void kda_region_put_inputs(kda_worker *w, const kda_tensors_f64 *in, const pool_io *pl,
                       const grad_io *gr, const wreq *q) {
  for (int b = 0; b < B_O; b++) {
    if (!float_input(b)) continue;
    const double *x = input_src(in, gr, b);
    if (q->off[b] < 0) continue;
    const int32_t dt = buf_dtype(w, b);
    const uint64_t n = q->len[b] / buf_es(w, b);
    for (uint64_t i = 0; i < n; i++) put_elem(dt, w->map + q->off[b], (size_t)i, x[i]);
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
const char *kda_region_changed_input(const kda_worker *w, const kda_tensors_f64 *in,
                                 const pool_io *pl, const grad_io *gr, const wreq *q) {
  for (int b = 0; b < B_O; b++) {
    if (!float_input(b) || q->off[b] < 0) continue;
    const double *x = input_src(in, gr, b);
    const unsigned char *d = w->map + q->off[b];
    const int32_t dt = buf_dtype(w, b);
    const size_t es = buf_es(w, b);
    for (uint64_t i = 0; i < q->len[b] / es; i++) {
      unsigned char want[8]; /* what put_inputs wrote */
      put_elem(dt, want, 0, x[i]);
      if (memcmp(d + es * i, want, es) != 0) return kda_worker_buf_names[b];
    }
  }
  if (memcmp(w->map + q->off[B_CU], in->cu_seqlens, (size_t)q->len[B_CU]) != 0)
    return kda_worker_buf_names[B_CU];
  if (q->off[B_CK] >= 0 && memcmp(w->map + q->off[B_CK], in->checkpoints, (size_t)q->len[B_CK]))
    return kda_worker_buf_names[B_CK];
  if (pl && memcmp(w->map + q->off[B_IDX], pl->idx, (size_t)q->len[B_IDX]) != 0)
    return kda_worker_buf_names[B_IDX];
  return NULL;
}

/* Name of the first output whose canary bytes before its guard page changed, or NULL. */
const char *kda_region_overrun(const kda_worker *w, const wreq *q) {
  for (int b = B_O; b < N_BUF; b++) {
    if (q->off[b] < 0) continue;
    const unsigned char *g = w->map + q->off[b] + q->len[b];
    for (size_t i = q->len[b]; i < up((size_t)q->len[b], 64); i++, g++)
      if (*g != CANARY) return kda_worker_buf_names[b];
  }
  return NULL;
}

void kda_region_widen(const kda_worker *w, const wreq *q, kda_outputs *out) {
  double *dst[3] = {out->o, out->ht, out->hc};
  for (int b = 0; b < 3; b++) {
    if (q->off[B_O + b] < 0 || !dst[b]) continue;
    const int32_t dt = buf_dtype(w, B_O + b);
    const uint64_t n = q->len[B_O + b] / buf_es(w, B_O + b);
    for (uint64_t i = 0; i < n; i++) dst[b][i] = get_elem(dt, w->map + q->off[B_O + b], (size_t)i);
  }
}

void kda_region_widen_grads(const kda_worker *w, const wreq *q, uint32_t which, double *const *d) {
  for (int b = 0; b < KDA_GRAD_COUNT; b++) {
    const int k = B_GRAD + b;
    if (!(which & (1u << b)) || q->off[k] < 0 || !d[b]) continue;
    const int32_t dt = buf_dtype(w, k);
    const uint64_t n = q->len[k] / buf_es(w, k);
    for (uint64_t i = 0; i < n; i++) d[b][i] = get_elem(dt, w->map + q->off[k], (size_t)i);
  }
}

/* The pool as the backend left it, widened exactly into pl->pool. */
void kda_region_widen_pool(const kda_worker *w, const wreq *q, const pool_io *pl) {
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
        return snprintf(why, cap, "%s[%llu] = %.9g is not exact in %s", kda_worker_buf_names[b],
                        (unsigned long long)i, xs[b][i], kda_precision_name(w->in_dtype)),
               0;
  return 1;
}

/* plugin_v2.c: a test-only version-2 backend with every version-2 slot (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 *
 * A correct float64 KDA (plugin_f64.h) whose "device" is host memory: buffers_create copies
 * the inputs into memory the backend owns and allocates the outputs there; forward_buffers
 * only queues the call, as an asynchronous device would; synchronize runs what is queued,
 * and buffers_read orders itself after the queued calls (as a copy on the same stream does)
 * before it copies the outputs out.  describe reports a host "device".  Tests, bench and
 * backend authors use it as the reference of the version-2 contract.  It includes only
 * kda_backend.h, as any third-party plugin would.
 *
 * Parameters (for the runner's tests that both paths are scored, SPEC.md §7.8): "bad=resident"
 * adds 1 to the last element of o as buffers_read returns it, "bad=forward" does so in
 * forward, "bad=crash" dies of SIGSEGV in forward_buffers; every other non-empty string is
 * rejected (KDA_EINVAL).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"
#include "plugin_f64.h"

enum { BAD_NONE, BAD_RESIDENT, BAD_FORWARD, BAD_CRASH };

typedef struct v2handle {
  int bad;        /* BAD_*: the deliberate defect of the parameters */
  int64_t queued; /* forward_buffers calls not yet run (over every buffer set) */
  struct v2buffers *pending; /* the buffer set they were issued on */
  char err[256];
} v2handle;

enum { B_Q, B_K, B_V, B_G, B_BETA, B_ALOG, B_DTB, B_H0, B_O, B_HT, B_HC, B_COUNT };

typedef struct v2buffers {
  kda_problem p;        /* as given to buffers_create (this plugin's sizeof) */
  kda_backend_tensors t; /* points into mem */
  double *mem[B_COUNT];
  int64_t *cu, *ck;
} v2buffers;

static int32_t v2_open(const char *params, void **handle, char *err, uint32_t errlen) {
  int bad = BAD_NONE;
  if (strcmp(params, "bad=resident") == 0) bad = BAD_RESIDENT;
  else if (strcmp(params, "bad=forward") == 0) bad = BAD_FORWARD;
  else if (strcmp(params, "bad=crash") == 0) bad = BAD_CRASH;
  else if (params[0])
    return snprintf(err, errlen, "unknown parameters '%.64s' (bad=resident, bad=forward, bad=crash)",
                    params), KDA_EINVAL;
  v2handle *h = calloc(1, sizeof *h);
  if (!h) return KDA_ENOMEM;
  h->bad = bad;
  *handle = h;
  return KDA_OK;
}

/* The deliberate defect: the last element of o off by 1. */
static void v2_spoil(const kda_problem *p, double *o) {
  if (p->T > 0) o[p->T * p->HV * p->V - 1] += 1.0;
}

static void v2_close(void *h) { free(h); }
static int32_t v2_supports(void *h, const kda_problem *p, char *r, uint32_t n) { return KDA_OK; }
static const char *v2_last_error(void *h) { return ((v2handle *)h)->err; }

static int32_t v2_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  v2handle *h = handle;
  if (t->in_dtype != KDA_PRECISION_FP64 || t->out_dtype != KDA_PRECISION_FP64)
    return snprintf(h->err, sizeof h->err, "float64 buffers only"), KDA_EINVAL;
  int32_t st = pf_forward(p, t);
  if (st) snprintf(h->err, sizeof h->err, "out of memory");
  if (!st && h->bad == BAD_FORWARD) v2_spoil(p, t->o);
  return st;
}

static int32_t v2_describe(void *handle, kda_backend_info *info) {
  if (!info || info->struct_size < sizeof *info) return KDA_EINVAL;
  info->is_device = 0;
  snprintf(info->device, sizeof info->device, "host memory (test stand-in for a device)");
  snprintf(info->isa, sizeof info->isa, "c");
  info->threads = 1;
  return KDA_OK;
}

/* Element counts of every float buffer of p (SPEC.md §2.3). */
static void v2_counts(const kda_problem *p, size_t n[B_COUNT]) {
  const int64_t GW = p->family == KDA_FAMILY_KDA ? p->K : p->family == KDA_FAMILY_GDN ? 1 : 0;
  const int64_t kv = p->HV * p->K * p->V;
  const int gated = GW > 0 && p->gate_mode != KDA_GATE_LOG;
  n[B_Q] = n[B_K] = (size_t)(p->T * p->H * p->K);
  n[B_V] = n[B_O] = (size_t)(p->T * p->HV * p->V);
  n[B_G] = (size_t)(p->T * p->HV * GW);
  n[B_BETA] = (size_t)(p->T * p->HV);
  n[B_ALOG] = gated && p->has_A_log ? (size_t)p->HV : 0;
  n[B_DTB] = gated ? (size_t)(p->HV * GW) : 0;
  n[B_H0] = p->has_initial_state ? (size_t)(p->N * kv) : 0;
  n[B_HT] = p->want_final_state ? (size_t)(p->N * kv) : 0;
  n[B_HC] = (size_t)(p->n_checkpoints * kv);
}

static void v2_buffers_destroy(void *handle, void *buffers) {
  v2handle *h = handle;
  v2buffers *b = buffers;
  if (!b) return;
  if (h && h->pending == b) h->pending = NULL, h->queued = 0; /* dropped unrun */
  for (int i = 0; i < B_COUNT; i++) free(b->mem[i]);
  free(b->cu), free(b->ck), free(b);
}

/* A copy of n elements of src (NULL, and no allocation, when n is 0). */
static int v2_copy(double **dst, const void *src, size_t n) {
  *dst = NULL;
  if (n == 0) return 1;
  if (!src || !(*dst = malloc(n * sizeof **dst))) return 0;
  memcpy(*dst, src, n * sizeof **dst);
  return 1;
}

static int32_t v2_buffers_create(void *handle, const kda_problem *p, const kda_backend_tensors *t,
                                 void **buffers) {
  v2handle *h = handle;
  *buffers = NULL;
  if (t->in_dtype != KDA_PRECISION_FP64 || t->out_dtype != KDA_PRECISION_FP64)
    return snprintf(h->err, sizeof h->err, "float64 buffers only"), KDA_EINVAL;
  v2buffers *b = calloc(1, sizeof *b);
  if (!b) return snprintf(h->err, sizeof h->err, "out of memory"), KDA_ENOMEM;
  size_t n[B_COUNT];
  v2_counts(p, n);
  const void *in[B_O] = {t->q, t->k, t->v, t->g, t->beta, t->A_log, t->dt_bias, t->h0};
  int ok = 1;
  for (int i = 0; i < B_O; i++) ok &= v2_copy(&b->mem[i], in[i], n[i]);
  for (int i = B_O; i < B_COUNT; i++)
    ok &= n[i] == 0 || (b->mem[i] = calloc(n[i], sizeof(double))) != NULL;
  b->cu = malloc((size_t)(p->N + 1) * sizeof *b->cu);
  b->ck = p->n_checkpoints ? malloc((size_t)p->n_checkpoints * sizeof *b->ck) : NULL;
  if (!ok || !b->cu || (p->n_checkpoints && (!b->ck || !t->checkpoints)) || !t->cu_seqlens) {
    v2_buffers_destroy(h, b);
    return snprintf(h->err, sizeof h->err, "out of memory or a NULL input"), KDA_ENOMEM;
  }
  memcpy(b->cu, t->cu_seqlens, (size_t)(p->N + 1) * sizeof *b->cu);
  if (b->ck) memcpy(b->ck, t->checkpoints, (size_t)p->n_checkpoints * sizeof *b->ck);
  b->p = *p;
  b->t = *t;
  b->t.q = b->mem[B_Q], b->t.k = b->mem[B_K], b->t.v = b->mem[B_V], b->t.g = b->mem[B_G];
  b->t.beta = b->mem[B_BETA], b->t.A_log = b->mem[B_ALOG], b->t.dt_bias = b->mem[B_DTB];
  b->t.h0 = b->mem[B_H0], b->t.o = b->mem[B_O], b->t.ht = b->mem[B_HT], b->t.hc = b->mem[B_HC];
  b->t.cu_seqlens = b->cu, b->t.checkpoints = b->ck;
  *buffers = b;
  return KDA_OK;
}

/* Runs the queued calls (each recomputes the same outputs: forward is a pure function). */
static int32_t v2_drain(v2handle *h) {
  int32_t st = KDA_OK;
  if (h->pending && h->queued > 0) st = pf_forward(&h->pending->p, &h->pending->t);
  if (st) snprintf(h->err, sizeof h->err, "out of memory");
  h->queued = 0, h->pending = NULL;
  return st;
}

static int32_t v2_forward_buffers(void *handle, const kda_problem *p, void *buffers) {
  v2handle *h = handle;
  v2buffers *b = buffers;
  if (!b || p->N != b->p.N || p->T != b->p.T || p->HV != b->p.HV || p->K != b->p.K ||
      p->V != b->p.V || p->n_checkpoints != b->p.n_checkpoints)
    return snprintf(h->err, sizeof h->err, "problem differs from buffers_create's"), KDA_EINVAL;
  if (h->bad == BAD_CRASH) raise(SIGSEGV);
  if (h->pending && h->pending != b) { /* one queue per handle: run the other set's first */
    int32_t st = v2_drain(h);
    if (st) return st;
  }
  h->pending = b;
  h->queued++;
  return KDA_OK;
}

static int32_t v2_synchronize(void *handle) { return v2_drain(handle); }

static int32_t v2_buffers_read(void *handle, void *buffers, const kda_backend_tensors *t) {
  v2handle *h = handle;
  v2buffers *b = buffers;
  if (h->pending == b) {
    int32_t st = v2_drain(h);
    if (st) return st;
  }
  size_t n[B_COUNT];
  v2_counts(&b->p, n);
  void *out[B_COUNT] = {[B_O] = t->o, [B_HT] = t->ht, [B_HC] = t->hc};
  for (int i = B_O; i < B_COUNT; i++) {
    if (n[i] == 0) continue;
    if (!out[i]) return snprintf(h->err, sizeof h->err, "an output buffer is NULL"), KDA_EINVAL;
    memcpy(out[i], b->mem[i], n[i] * sizeof(double));
  }
  if (h->bad == BAD_RESIDENT) v2_spoil(&b->p, t->o);
  return KDA_OK;
}

static const kda_backend v2_table = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "abi-v2",
    .description = "test-only: float64 KDA with the version-2 slots (host memory as device)",
    .precision_class = KDA_PRECISION_FP64,
    .input_dtype = KDA_PRECISION_FP64,
    .output_dtype = KDA_PRECISION_FP64,
    .open = v2_open,
    .close = v2_close,
    .supports = v2_supports,
    .forward = v2_forward,
    .last_error = v2_last_error,
    .describe = v2_describe,
    .buffers_create = v2_buffers_create,
    .forward_buffers = v2_forward_buffers,
    .buffers_read = v2_buffers_read,
    .buffers_destroy = v2_buffers_destroy,
    .synchronize = v2_synchronize,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return abi_version >= 2 ? &v2_table : NULL;
}

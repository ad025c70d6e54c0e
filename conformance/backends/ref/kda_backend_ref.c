/* kda_backend_ref.c: the built-in backends ref-f64 and ref-f32, the references behind the ABI.
 * SPDX-License-Identifier: MIT
 *
 * They go through exactly the same table and the same isolated call path as a plugin, so the
 * runner has no special case for its own references (BLIS's reference kernels are registered
 * like any optimized kernel).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"
#include "kda_backend_pool.h"
#include "kda_backward.h"
#include "kda_ref.h"

typedef struct ref_handle {
  char err[KDA_ERRLEN];
} ref_handle;

/* The references take no parameters (SPEC.md §7.8): the first word is named in the error. */
static int32_t ref_open(const char *params, void **handle, char *err, uint32_t errlen) {
  const char *w = params ? params + strspn(params, " ,") : "";
  if (*w) {
    size_t n = strcspn(w, " ,=");
    if (errlen) snprintf(err, errlen, "unknown parameter '%.*s' (the references take none)",
                         (int)(n > 64 ? 64 : n), w);
    return KDA_EINVAL;
  }
  ref_handle *h = calloc(1, sizeof *h);
  if (!h) {
    if (errlen) snprintf(err, errlen, "out of memory opening a reference backend");
    return KDA_ENOMEM;
  }
  *handle = h;
  return KDA_OK;
}

/* What the references run on: one host thread, plain C (for kda bench and --list-backends). */
static int32_t ref_describe(void *handle, kda_backend_info *info) {
  snprintf(info->device, sizeof info->device, "CPU, plain C (no vector code)");
  info->threads = 1;
  return KDA_OK;
}

static void ref_close(void *handle) { free(handle); }

/* The references run every valid problem. */
static int32_t ref_supports(void *handle, const kda_problem *p, char *reason, uint32_t len) {
  return KDA_OK;
}

static const char *ref_last_error(void *handle) {
  return handle ? ((ref_handle *)handle)->err : "";
}

static int32_t ref_plain_f64(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  ref_handle *h = handle;
  kda_tensors_f64 x = {t->q, t->k, t->v, t->g, t->beta, t->A_log, t->dt_bias, t->h0,
                       t->cu_seqlens, t->checkpoints, t->o, t->ht, t->hc};
  return kda_ref_forward_f64(p, &x, h->err, sizeof h->err);
}

static int32_t ref_plain_f32(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  ref_handle *h = handle;
  kda_tensors_f32 x = {t->q, t->k, t->v, t->g, t->beta, t->A_log, t->dt_bias, t->h0,
                       t->cu_seqlens, t->checkpoints, t->o, t->ht, t->hc};
  return kda_ref_forward_f32(p, &x, h->err, sizeof h->err);
}

/* A pool call (kda_backend.h) is gathered into h0 and scattered from ht around the plain
 * forward: the references take pools with exactly their ordinary arithmetic. */
static int32_t ref_forward_f64(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  ref_handle *h = handle;
  if (kda_pool_is_call(t)) return kda_pool_forward(h, p, t, ref_plain_f64, h->err, sizeof h->err);
  return ref_plain_f64(h, p, t);
}

static int32_t ref_forward_f32(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  ref_handle *h = handle;
  if (kda_pool_is_call(t)) return kda_pool_forward(h, p, t, ref_plain_f32, h->err, sizeof h->err);
  return ref_plain_f32(h, p, t);
}

/* The references write every gradient a problem has (SPEC.md §13.5). */
static int32_t ref_supports_backward(void *handle, const kda_problem *p, uint32_t *grads,
                                     char *reason, uint32_t len) {
  *grads = KDA_GRAD_ALL;
  return KDA_OK;
}

static int32_t ref_backward_f64(void *handle, const kda_problem *p, const kda_backend_tensors *t,
                                const kda_backend_grads *d) {
  ref_handle *h = handle;
  kda_tensors_f64 x = {t->q, t->k, t->v, t->g, t->beta, t->A_log, t->dt_bias, t->h0,
                       t->cu_seqlens, t->checkpoints, NULL, NULL, NULL};
  kda_grads_f64 g = {d->dout, d->dht, d->dhc, d->dq, d->dk, d->dv, d->dg, d->dbeta, d->dA_log,
                     d->ddt_bias, d->dh0};
  return kda_ref_backward_f64(p, &x, &g, h->err, sizeof h->err);
}

static int32_t ref_backward_f32(void *handle, const kda_problem *p, const kda_backend_tensors *t,
                                const kda_backend_grads *d) {
  ref_handle *h = handle;
  kda_tensors_f32 x = {t->q, t->k, t->v, t->g, t->beta, t->A_log, t->dt_bias, t->h0,
                       t->cu_seqlens, t->checkpoints, NULL, NULL, NULL};
  kda_grads_f32 g = {d->dout, d->dht, d->dhc, d->dq, d->dk, d->dv, d->dg, d->dbeta, d->dA_log,
                     d->ddt_bias, d->dh0};
  return kda_ref_backward_f32(p, &x, &g, h->err, sizeof h->err);
}

#define REF_TABLE(sym, nm, desc, cls, dt, fwd, bwd)                                       \
  const kda_backend sym = {.abi_version = KDA_BACKEND_ABI_VERSION,                          \
                           .struct_size = sizeof(kda_backend),                              \
                           .name = nm, .description = desc, .precision_class = cls,         \
                           .input_dtype = dt, .output_dtype = dt, .open = ref_open,         \
                           .close = ref_close, .supports = ref_supports, .forward = fwd,    \
                           .last_error = ref_last_error, .describe = ref_describe,       \
                           .caps = KDA_CAP_STATE_POOL,                                      \
                           .supports_backward = ref_supports_backward, .backward = bwd}

REF_TABLE(kda_backend_ref_f64, "ref-f64", "the plain float64 reference (SPEC.md section 9)",
          KDA_PRECISION_FP64, KDA_PRECISION_FP64, ref_forward_f64, ref_backward_f64);
REF_TABLE(kda_backend_ref_f32, "ref-f32", "the float32 twin of the reference (SPEC.md section 9)",
          KDA_PRECISION_FP32, KDA_PRECISION_FP32, ref_forward_f32, ref_backward_f32);

/* plugin_resident.c: test-only plugin with the version-2 slots: describe (a pretend device
 * with peak figures), device-resident buffers and synchronize, so that `kda bench` and
 * `kda conform --list-backends` exercise those paths.
 * SPDX-License-Identifier: MIT
 *
 * NOT a KDA implementation: forward writes zeros (it would fail every case).  The "device" is
 * host memory.  It rejects every parameter but "fail=buffers" (buffers_create fails), as a
 * backend must (SPEC.md §7.8).  Self-contained: it includes only kda_backend.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"

typedef struct rhandle {
  int fail_buffers;
  int64_t pending; /* forward_buffers calls not yet synchronized */
  char err[256];
} rhandle;

typedef struct rbuffers {
  float *o, *ht;
  size_t n_o, n_ht;
} rbuffers;

static int32_t r_open(const char *params, void **handle, char *err, uint32_t errlen) {
  int fail = 0;
  for (const char *s = params; *s;) {
    s += strspn(s, " ,");
    size_t n = strcspn(s, " ,");
    if (!n) break;
    if (n == 12 && strncmp(s, "fail=buffers", 12) == 0) {
      fail = 1;
    } else {
      if (errlen) snprintf(err, errlen, "unknown parameter '%.*s' (fail=buffers)", (int)(n > 64 ? 64 : n), s);
      return KDA_EINVAL;
    }
    s += n;
  }
  rhandle *h = calloc(1, sizeof *h);
  if (!h) return KDA_ENOMEM;
  h->fail_buffers = fail;
  *handle = h;
  return KDA_OK;
}

static void r_close(void *h) { free(h); }
static int32_t r_supports(void *h, const kda_problem *p, char *r, uint32_t n) { return KDA_OK; }
static const char *r_last_error(void *h) { return ((rhandle *)h)->err; }

static size_t n_out(const kda_problem *p) { return (size_t)(p->T * p->HV * p->V); }
static size_t n_state(const kda_problem *p) { return (size_t)(p->N * p->HV * p->K * p->V); }

static int32_t r_forward(void *h, const kda_problem *p, const kda_backend_tensors *t) {
  memset(t->o, 0, n_out(p) * sizeof(float));
  if (t->ht) memset(t->ht, 0, n_state(p) * sizeof(float));
  return KDA_OK;
}

static int32_t r_describe(void *h, kda_backend_info *info) {
  snprintf(info->device, sizeof info->device, "test device");
  snprintf(info->isa, sizeof info->isa, "none");
  info->is_device = 1;
  info->peak_flops = 1e12;
  info->peak_bytes_per_s = 1e11;
  return KDA_OK;
}

static int32_t r_buffers_create(void *handle, const kda_problem *p, const kda_backend_tensors *t,
                                void **buffers) {
  rhandle *h = handle;
  if (h->fail_buffers) return snprintf(h->err, sizeof h->err, "buffers_create refused (fail=buffers)"), KDA_ENOMEM;
  rbuffers *b = calloc(1, sizeof *b);
  if (!b) return KDA_ENOMEM;
  b->n_o = n_out(p), b->n_ht = p->want_final_state ? n_state(p) : 0;
  b->o = calloc(b->n_o + 1, sizeof(float));
  b->ht = calloc(b->n_ht + 1, sizeof(float));
  if (!b->o || !b->ht) return free(b->o), free(b->ht), free(b), KDA_ENOMEM;
  *buffers = b;
  return KDA_OK;
}

static int32_t r_forward_buffers(void *handle, const kda_problem *p, void *buffers) {
  rhandle *h = handle;
  rbuffers *b = buffers;
  memset(b->o, 0, b->n_o * sizeof(float));
  h->pending++;
  return KDA_OK;
}

static int32_t r_buffers_read(void *handle, void *buffers, const kda_backend_tensors *t) {
  rbuffers *b = buffers;
  memcpy(t->o, b->o, b->n_o * sizeof(float));
  if (t->ht) memcpy(t->ht, b->ht, b->n_ht * sizeof(float));
  return KDA_OK;
}

static void r_buffers_destroy(void *handle, void *buffers) {
  rbuffers *b = buffers;
  if (!b) return;
  free(b->o), free(b->ht), free(b);
}

static int32_t r_synchronize(void *handle) {
  ((rhandle *)handle)->pending = 0;
  return KDA_OK;
}

static const kda_backend table = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "resident",
    .description = "test-only: v2 slots on host memory; forward writes zeros (not a KDA)",
    .precision_class = KDA_CLASS_FP32,
    .input_dtype = KDA_BACKEND_DTYPE_F32,
    .output_dtype = KDA_BACKEND_DTYPE_F32,
    .open = r_open,
    .close = r_close,
    .supports = r_supports,
    .forward = r_forward,
    .last_error = r_last_error,
    .describe = r_describe,
    .buffers_create = r_buffers_create,
    .forward_buffers = r_forward_buffers,
    .buffers_read = r_buffers_read,
    .buffers_destroy = r_buffers_destroy,
    .synchronize = r_synchronize,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return abi_version >= 2 ? &table : NULL;
}

/* plugin_v1.c: a test-only backend written against the version-1 ABI (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 *
 * Compiled against the frozen copies of kda_backend.h and kda_problem.h next to it (the
 * headers as they were before ABI 2, commit 6f90fa1^; quoted includes find them first), the
 * way a third-party plugin built years ago was: abi_version 1, struct_size = that header's
 * sizeof(kda_backend), a positional table, and a kda_problem without struct_size.  The
 * runner must load it, never read past its version-1 table, and score it: it is a correct
 * float64 KDA (plugin_f64.h), declared in the fp64 class.  Do not edit the two headers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"
#include "../plugin_f64.h"

/* What the frozen headers are: the 0.1 layouts the runner's KDA_BACKEND_V1_SIZE and
 * KDA_PROBLEM_V1_SIZE must keep matching (check_conformance asserts the runner's side). */
_Static_assert(KDA_BACKEND_ABI_VERSION == 1, "abi_v1/kda_backend.h is the version-1 header");
_Static_assert(sizeof(kda_backend) == 8 + 2 * sizeof(void *) + 16 + 5 * sizeof(void *),
               "the version-1 table");
_Static_assert(sizeof(kda_problem) == 7 * 8 + 10 * 4 + 3 * 8, "the 0.1 kda_problem");

typedef struct v1handle {
  char err[256];
} v1handle;

static int32_t v1_open(const char *params, void **handle, char *err, uint32_t errlen) {
  v1handle *h = calloc(1, sizeof *h);
  if (!h) return KDA_ENOMEM;
  *handle = h;
  return KDA_OK;
}

static void v1_close(void *h) { free(h); }

static int32_t v1_supports(void *h, const kda_problem *p, char *r, uint32_t n) { return KDA_OK; }

static int32_t v1_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  v1handle *h = handle;
  if (t->in_dtype != KDA_BACKEND_DTYPE_F64 || t->out_dtype != KDA_BACKEND_DTYPE_F64)
    return snprintf(h->err, sizeof h->err, "float64 buffers only"), KDA_EINVAL;
  int32_t st = pf_forward(p, t);
  if (st) snprintf(h->err, sizeof h->err, "out of memory");
  return st;
}

static const char *v1_last_error(void *h) { return ((v1handle *)h)->err; }

static const kda_backend v1_table = {
    KDA_BACKEND_ABI_VERSION, sizeof(kda_backend), "abi-v1",
    "test-only: float64 KDA built against the version-1 backend ABI", KDA_CLASS_FP64,
    KDA_BACKEND_DTYPE_F64, KDA_BACKEND_DTYPE_F64, 0, v1_open, v1_close, v1_supports,
    v1_forward, v1_last_error};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return abi_version >= 1 ? &v1_table : NULL;
}

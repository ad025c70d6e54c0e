/* plugin_crash.c: test-only backend plugin whose forward dies of a segmentation fault.
 * SPDX-License-Identifier: MIT
 */
#include <stdlib.h>

#include "kda_backend.h"

static int32_t c_open(const char *params, void **handle, char *err, uint32_t errlen) {
  *handle = malloc(1);
  return *handle ? KDA_OK : KDA_ENOMEM;
}
static void c_close(void *h) { free(h); }
static int32_t c_supports(void *h, const kda_problem *p, char *r, uint32_t n) { return KDA_OK; }
static const char *c_last_error(void *h) { return ""; }

/* volatile, so that the compiler cannot prove the store undefined and drop it. */
static double *volatile nowhere;

static int32_t c_forward(void *h, const kda_problem *p, const kda_backend_tensors *t) {
  *nowhere = 1.0; /* a store through a null pointer: SIGSEGV */
  return KDA_OK;
}

static const kda_backend crash = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "crash",
    .description = "test-only: segfaults in forward",
    .precision_class = KDA_PRECISION_FP32,
    .input_dtype = KDA_PRECISION_FP32,
    .output_dtype = KDA_PRECISION_FP32,
    .open = c_open,
    .close = c_close,
    .supports = c_supports,
    .forward = c_forward,
    .last_error = c_last_error,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) { return &crash; }

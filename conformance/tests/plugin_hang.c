/* plugin_hang.c: test-only backend plugin whose forward never returns (a busy loop).
 * SPDX-License-Identifier: MIT
 */
#include <stdlib.h>

#include "kda_backend.h"

static int32_t h_open(const char *params, void **handle, char *err, uint32_t errlen) {
  *handle = malloc(1);
  return *handle ? KDA_OK : KDA_ENOMEM;
}
static void h_close(void *h) { free(h); }
static int32_t h_supports(void *h, const kda_problem *p, char *r, uint32_t n) { return KDA_OK; }
static const char *h_last_error(void *h) { return ""; }

static int32_t h_forward(void *h, const kda_problem *p, const kda_backend_tensors *t) {
  volatile uint64_t spin = 0;
  for (;;) spin++;
  return KDA_OK;
}

static const kda_backend hang = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "hang",
    .description = "test-only: loops forever in forward",
    .precision_class = KDA_PRECISION_FP32,
    .input_dtype = KDA_PRECISION_FP32,
    .output_dtype = KDA_PRECISION_FP32,
    .open = h_open,
    .close = h_close,
    .supports = h_supports,
    .forward = h_forward,
    .last_error = h_last_error,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) { return &hang; }

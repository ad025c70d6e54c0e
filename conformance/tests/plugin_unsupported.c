/* plugin_unsupported.c: test-only backend plugin that supports no problem, for the exit
 * status of a run in which nothing ran (SPEC.md §12.2).
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <stdlib.h>

#include "kda_backend.h"

static int32_t u_open(const char *params, void **handle, char *err, uint32_t errlen) {
  *handle = malloc(1);
  return *handle ? KDA_OK : KDA_ENOMEM;
}
static void u_close(void *h) { free(h); }
static int32_t u_supports(void *h, const kda_problem *p, char *why, uint32_t n) {
  if (n) snprintf(why, n, "test-only: supports nothing");
  return KDA_EUNSUPPORTED;
}
static int32_t u_forward(void *h, const kda_problem *p, const kda_backend_tensors *t) {
  return KDA_EUNSUPPORTED;
}
static const char *u_last_error(void *h) { return "supports nothing"; }

static const kda_backend unsupported = {
    KDA_BACKEND_ABI_VERSION, sizeof(kda_backend), "unsupported",
    "test-only: answers KDA_EUNSUPPORTED to every problem", KDA_CLASS_FP32,
    KDA_BACKEND_DTYPE_F32, KDA_BACKEND_DTYPE_F32, 0, u_open, u_close, u_supports, u_forward,
    u_last_error};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return &unsupported;
}

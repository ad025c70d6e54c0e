/* plugin_ctor_ftz.c: test-only plugin whose load-time constructor sets flush-to-zero and
 * denormals-are-zero, as any shared object linked with -ffast-math does (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 */
#include <stdlib.h>

#include "kda_backend.h"

__attribute__((constructor)) static void set_ftz_at_load(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned m;
  __asm__ volatile("stmxcsr %0" : "=m"(m));
  m |= 0x8040u;
  __asm__ volatile("ldmxcsr %0" : : "m"(m));
#endif
}

static int32_t z_open(const char *params, void **handle, char *err, uint32_t errlen) {
  *handle = malloc(1);
  return *handle ? KDA_OK : KDA_ENOMEM;
}
static void z_close(void *h) { free(h); }
static int32_t z_supports(void *h, const kda_problem *p, char *r, uint32_t n) { return KDA_OK; }
static int32_t z_forward(void *h, const kda_problem *p, const kda_backend_tensors *t) {
  return KDA_OK;
}
static const char *z_last_error(void *h) { return ""; }

static const kda_backend ftz = {
    KDA_BACKEND_ABI_VERSION, sizeof(kda_backend), "ctor-ftz", "test-only: FTZ/DAZ at load",
    KDA_CLASS_FP32, KDA_BACKEND_DTYPE_F32, KDA_BACKEND_DTYPE_F32, 0, z_open, z_close,
    z_supports, z_forward, z_last_error, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, NULL,
    NULL};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) { return &ftz; }

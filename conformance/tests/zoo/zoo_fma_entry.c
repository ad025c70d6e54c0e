/* zoo_fma_entry.c: the table of the zoo's FMA build (kda_plugin_zoo_fma.so).
 * SPDX-License-Identifier: MIT
 *
 * plugin_zoo.c is compiled for this build with -mfma -ffp-contract=fast: its products and sums
 * become fused multiply-adds wherever the compiler contracts them, so its code may use AVX and
 * FMA instructions anywhere.  This file is compiled without them and is all that runs before
 * the CPU is known to have both: on a CPU without them the variant slot and open answer
 * KDA_EUNSUPPORTED, so the plugin is refused (every case reports why) instead of dying of an
 * illegal instruction.
 */
#include <stdio.h>

#include "kda_backend.h"
#include "zoo.h"

static int cpu_has_fma(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") && __builtin_cpu_supports("fma");
#else
  return 0;
#endif
}

static int32_t guard_variant(const char *params, kda_backend_variant *out, char *err,
                             uint32_t errlen) {
  if (!cpu_has_fma())
    return errlen ? snprintf(err, errlen, "zoo-fma needs a CPU with AVX and FMA") : 0,
           KDA_EUNSUPPORTED;
  return zoo_variant(params, out, err, errlen);
}

static int32_t guard_open(const char *params, void **handle, char *err, uint32_t errlen) {
  if (!cpu_has_fma())
    return errlen ? snprintf(err, errlen, "zoo-fma needs a CPU with AVX and FMA") : 0,
           KDA_EUNSUPPORTED;
  return zoo_open(params, handle, err, errlen);
}

static const kda_backend zoo_fma_table = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "zoo-fma",
    .description = "test: honest float32 KDA, FMA-contracted build (order=NAME seed=N)",
    .precision_class = KDA_PRECISION_FP32,
    .input_dtype = KDA_PRECISION_FP32,
    .output_dtype = KDA_PRECISION_FP32,
    .open = guard_open,
    .close = zoo_close,
    .supports = zoo_supports,
    .forward = zoo_forward,
    .last_error = zoo_last_error,
    .variant = guard_variant,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return abi_version >= 2 ? &zoo_fma_table : NULL;
}

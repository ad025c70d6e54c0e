/* kda_cert_kern.c: the fast certifier's step kernel for the baseline ISA, and the choice of
 * kernel at run time (SPEC.md §8.12).
 * SPDX-License-Identifier: MIT
 *
 * Without hardware FMA, fma() is the C library's correctly rounded software fma: slower, the
 * same results bit for bit (every operation of the kernel is correctly rounded).
 */
#define KDA_CERT_STEP_NAME kda_cert_step_generic
#include "kda_cert_kern.h"

kda_cert_step_fn kda_cert_kernel(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return kda_cert_step_avx2;
#endif
  return kda_cert_step_generic;
}

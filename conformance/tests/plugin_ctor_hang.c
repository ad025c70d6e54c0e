/* plugin_ctor_hang.c: test-only plugin whose load-time constructor never returns: loading it
 * is bounded by the time limit like every other wait (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 */
#include <unistd.h>

#include "kda_backend.h"

__attribute__((constructor)) static void hang_at_load(void) {
  for (;;) pause();
}

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) { return NULL; }

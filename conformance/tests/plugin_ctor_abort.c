/* plugin_ctor_abort.c: test-only plugin whose load-time constructor aborts (as a device
 * runtime without a device may): the worker dies while loading it (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 */
#include <stdlib.h>

#include "kda_backend.h"

__attribute__((constructor)) static void die_at_load(void) { abort(); }

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) { return NULL; }

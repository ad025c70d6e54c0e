/* plugin_nullentry.c: test-only plugin whose kda_backend_entry returns NULL (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 */
#include "kda_backend.h"

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) { return NULL; }

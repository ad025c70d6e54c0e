/* plugin_badsize.c: test-only plugin whose table declares a struct_size smaller than the
 * version-1 table: the loader must reject it before reading any slot (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 */
#include "kda_backend.h"

static const kda_backend tiny = {KDA_BACKEND_ABI_VERSION, 8, "badsize", NULL, 0, 0, 0, 0,
                                 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                 NULL, NULL, NULL, 0, 0, NULL, NULL, NULL};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) { return &tiny; }

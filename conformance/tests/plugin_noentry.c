/* plugin_noentry.c: test-only plugin that exports no kda_backend_entry (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 */
#include "kda_backend.h"

KDA_BACKEND_EXPORT int kda_backend_entry_misspelt(void);
KDA_BACKEND_EXPORT int kda_backend_entry_misspelt(void) { return 0; }

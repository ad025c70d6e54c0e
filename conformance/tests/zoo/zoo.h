/* zoo.h: the entry points of the zoo plugin (plugin_zoo.c), shared with the FMA build's guard
 * (zoo_fma_entry.c), which loads them only on a CPU that has FMA.
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_ZOO_H
#define KDA_ZOO_H

#include "kda_backend.h"

#if defined(__GNUC__)
#define ZOO_HIDDEN __attribute__((visibility("hidden")))
#else
#define ZOO_HIDDEN
#endif

ZOO_HIDDEN int32_t zoo_variant(const char *params, kda_backend_variant *out, char *err,
                               uint32_t errlen);
ZOO_HIDDEN int32_t zoo_open(const char *params, void **handle, char *err, uint32_t errlen);
ZOO_HIDDEN void zoo_close(void *handle);
ZOO_HIDDEN int32_t zoo_supports(void *handle, const kda_problem *p, char *reason,
                                uint32_t reasonlen);
ZOO_HIDDEN int32_t zoo_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t);
ZOO_HIDDEN const char *zoo_last_error(void *handle);

#endif

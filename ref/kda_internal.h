/* kda_internal.h: small helpers shared by every library module (not installed).
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_INTERNAL_H
#define KDA_INTERNAL_H

#include <stddef.h>

/* Writes a one-line message into err (when err is not NULL and errlen > 0; snprintf
 * truncation) and returns status, so that a check can end with `return kda_fail(...)`. */
int kda_fail(int status, char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#endif

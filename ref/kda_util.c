/* kda_util.c: small helpers shared by every library module (declared in kda_internal.h).
 * SPDX-License-Identifier: MIT
 */
#include "kda_internal.h"

#include <stdarg.h>
#include <stdio.h>

int kda_fail(int status, char *err, size_t errlen, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return status;
}

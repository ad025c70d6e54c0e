/* kda_sbuf.c: a growable string for the generator and the golden sets (kda_sbuf.h).
 * SPDX-License-Identifier: MIT
 */
#include "kda_sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void kda_sbuf_printf(kda_sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if (b->s && (size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = (b->cap ? 2 * b->cap : 1024) + (size_t)n;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

void kda_sbuf_shortest(kda_sbuf *b, double x) {
  char dec[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(dec, sizeof dec, "%.*g", prec, x);
    if (strtod(dec, NULL) == x) break;
  }
  kda_sbuf_printf(b, "%s", dec);
}

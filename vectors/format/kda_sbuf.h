/* kda_sbuf.h: a growable string for the generator and the golden sets (not installed).
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_SBUF_H
#define KDA_SBUF_H

#include <stddef.h>

/* A growable string; start from {0}, free s with free().  oom is set (and later output
 * dropped) when an allocation or a format fails. */
typedef struct kda_sbuf {
  char *s;
  size_t len, cap;
  int oom;
} kda_sbuf;

/* Appends printf-formatted text. */
void kda_sbuf_printf(kda_sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Appends the shortest "%.Ng" text (N = 1..17) that reads back as x. */
void kda_sbuf_shortest(kda_sbuf *b, double x);

#endif

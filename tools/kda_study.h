/* kda_study.h: what `kda trace` and `kda explore` share: one head of one case, its certified
 * values, ranges and JSON numbers.
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_STUDY_H
#define KDA_STUDY_H

#include <stdint.h>

#include "kda_case.h"
#include "kda_sbuf.h"

/* One (sequence, value head) of a loaded case. */
typedef struct kda_study {
  kda_case c;
  kda_tensors_f64 ts;
  int64_t n, hv, h, bos, eos; /* sequence n owns tokens bos .. eos-1 */
  int32_t certified;          /* 1: cert_o / cert_S hold MPFR-certified values */
  int32_t reserved0;
  const char *method;         /* "proven" / "agreed" when certified */
  double *cert_o;             /* [len][V]: certified o of this head, token by token */
  double *cert_S;             /* [len][K][V]: certified state after each token's write */
  char note[256];             /* why there are no certified values ("" when there are) */
} kda_study;

/* Loads path and selects sequence n, head hv (range-checked).  Returns an exit status
 * (0, or KDA_EXIT_USAGE after printing the one-line error as "kda SUB: ..."). */
int kda_study_open(const char *sub, const char *path, int64_t n, int64_t hv, kda_study *s);
void kda_study_close(kda_study *s);

/* Certifies the selected head with the MPFR reference (checkpoints at every token of the
 * sequence) when the case has at most max_values state values (T HV K V); otherwise, or when
 * MPFR is not built in or the values do not settle, leaves certified 0 and says why in note.
 * Returns 0, or KDA_EXIT_USAGE on out of memory. */
int kda_study_certify(const char *sub, kda_study *s, int64_t max_values);

/* The options both study tools take for where to look: c is 's' (--seq N), 'H' (--head N)
 * or 't' (--tokens A:B, kept as text for kda_study_parse_range).  Returns 0, or the usage
 * status after the usage message for a count that does not parse. */
int kda_study_where_option(const char *sub, int c, const char *arg, int64_t *seq, int64_t *head,
                           const char **tokens);

/* "A:B" (A <= B, either may be empty: 0 and `all`) as the half-open range [A, B) clipped to
 * [0, all).  Returns 0, or -1 for text that is not such a range. */
int kda_study_parse_range(const char *text, int64_t all, int64_t *a, int64_t *b);

/* The number of decimal digits of the certified value c that x gets right: 17 when x == c,
 * else floor(-log10(|x - c| / |c|)) clamped to 0 .. 16 (0 when c is 0 or x is not finite). */
int kda_study_digits(double x, double c);

/* A JSON number (%.17g, which reads back exactly) or, for a non-finite x, the string "inf",
 * "-inf" or "nan" (JSON has no such numbers). */
void kda_study_json_num(kda_sbuf *b, double x);

/* A JSON string of text from a file: printable ASCII as is except " \\ < > & (so that it can
 * sit inside an HTML <script> element too), every other byte as \u00XX. */
void kda_study_json_str(kda_sbuf *b, const char *s);

#endif

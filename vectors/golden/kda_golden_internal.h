/* kda_golden_internal.h: what the golden-set files share (not installed).
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_GOLDEN_INTERNAL_H
#define KDA_GOLDEN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kda_case.h"
#include "kda_golden.h"
#include "kda_internal.h"
#include "kda_sbuf.h"

/* x as "%a (shortest decimal)", e.g. "0x1.8p+1 (3)"; "-inf", "0x0p+0 (0)". */
void kda_sbuf_value(kda_sbuf *b, double x);

/* Reads a whole file; *out freed by the caller.  Returns KDA_OK, KDA_EIO, KDA_ENOMEM. */
int kda_golden_slurp(const char *path, unsigned char **out, size_t *len, char *err,
                     size_t errlen);

/* The L0 trace of case c (kda_golden_trace.c): every step of every head with its
 * intermediates, each checked to be exact, and the traced outputs checked against the
 * certified values gold (o, then ht, then hc).  *text freed by the caller.  Returns KDA_OK,
 * KDA_EINVAL (an intermediate is not exact, a gate is neither 0 nor -inf, or an output
 * differs from the certified value; the message says where), KDA_ENOMEM. */
int kda_golden_trace(const kda_case *c, const char *comment, const char *method,
                     const double *gold, char **text, char *err, size_t errlen);

/* Shared with kda_golden_prod.c: the flag names of a mask, a JSON real (null when not
 * finite), and the float64 reference scored against golden values (part: o, ht, hc counts). */
struct json_t;
struct json_t *kda_golden_flags_json(uint64_t flags);
struct json_t *kda_golden_jreal(double x);
void kda_golden_score_ref(const double *gold, const double *ref, const uint64_t part[3],
                          kda_golden_info *info);

/* Makes production catalog entry e (e->prod) into path: generated inputs, sampled truth,
 * certified by the double-double phase alone (kda_golden_prod.c, SPEC.md §8.12, §10.2).
 * Returns KDA_OK, KDA_ENOTCERT (a state value undecided, or no decided run left), KDA_EINVAL,
 * KDA_EIO, KDA_ENOMEM. */
int kda_golden_prod_make(const kda_catalog_entry *e, const char *path, kda_golden_info *info,
                         char *err, size_t errlen);

/* The sampling rule of SPEC.md §8.12 on its own (for the tests): the runs of a T-token
 * problem with row values per token whose decided flags (o only, [T * row]) are given;
 * want[r] and at[r] are the wanted and stored first tokens (at[r] = -1: dropped, no fully
 * decided place).  Returns the number of runs, or -1 (KDA_ENOTCERT's message in err) when
 * no run has a fully decided place. */
#define KDA_GOLDEN_PROD_MAX_RUNS 80
int64_t kda_golden_prod_runs(int64_t T, int64_t row, const unsigned char *decided,
                             int64_t want[KDA_GOLDEN_PROD_MAX_RUNS],
                             int64_t at[KDA_GOLDEN_PROD_MAX_RUNS], char *err, size_t errlen);

/* ---- Members of a golden file (kda_golden.c): a name, its stored dtype and shape, and its
 * values (float members converted to dtype when written; index members I64). */
struct kda_npz_writer;
typedef struct kda_gmember {
  const char *name;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[4];
  const double *f;
  const int64_t *i;
} kda_gmember;
/* The stored dtype of a value of input precision prec: f64, f32 (bf16 stored as f4), f16. */
int32_t kda_golden_prec_dtype(int32_t prec);
void kda_golden_member_set(kda_gmember *m, const char *name, int32_t dtype, int ndim,
                           const int64_t *shape, const double *f, const int64_t *ix);
/* The members of case c in file order: its inputs as a case file stores them, then (when gold
 * is not NULL) the certified o, ht, hc held consecutively in gold.  Returns their number
 * (at most 13). */
int kda_golden_members(const kda_case *c, const double *gold, kda_gmember *m);
/* SHA-256 (hex) of the member's bytes as stored: .npy header, then data.  0 or -1. */
int kda_golden_member_sha256(const kda_gmember *m, char hex[65]);
int kda_golden_member_add(struct kda_npz_writer *w, const kda_gmember *m, char *err,
                          size_t errlen);
/* Writes path atomically: the manifest text, then the nm members in order (kda_npz_writer;
 * nothing is left behind on an error). */
int kda_golden_npz_write(const char *path, const char *manifest, const kda_gmember *m, int nm,
                         char *err, size_t errlen);

#endif

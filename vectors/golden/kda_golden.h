/* kda_golden.h: writing and verifying the committed golden sets (golden/L0, golden/L1).
 * SPDX-License-Identifier: MIT
 *
 * Layout of a golden directory DIR (docs/golden.md):
 *   DIR/<level>/<id>.npz     one case of the catalog (kda_catalog.h): the case file's members
 *                            (SPEC.md §10.2), then the certified outputs o, ht, hc as <f8, with
 *                            manifest.json = the kda-case/1 manifest plus a "golden" object
 *                            (level, comment, flags, seed, design, input precision,
 *                            certification, SHA-256 of every array member).
 *   DIR/L0/<id>.txt          the L0 case traced by hand: every step's intermediates in hex
 *                            floats and decimals, all exact.
 *   DIR/<level>/manifest.json  the Wycheproof-style index of the level: schema, versions,
 *                            flag definitions, certification methods, the float64 reference's
 *                            error budget, and one entry per case with the SHA-256 of every
 *                            member.
 *   DIR/SHA256SUMS           `sha256sum` lines for every other file under DIR (except the
 *                            on-demand level directories, DIR/L2).
 *   DIR/L2.sha256            the pinned SHA-256 of every L2 case file; the L2 files themselves
 *                            are made on demand (kda golden --write --level L2) and not
 *                            committed (golden/.gitignore).
 * A golden case file is also a valid case file: kda_case_load reads it (extra members and
 * manifest keys are ignored).
 *
 * Everything written is deterministic: the same catalog, generator and certification give the
 * same bytes.  Two things depend on the platform and are kept out of the case files: the
 * library versions and the float64 reference's errors (which depend on the libm's exp and
 * log1p).  They live in the level manifests, and the verifier compares those two fields
 * leniently (it reports a difference but does not fail on it).
 */
#ifndef KDA_GOLDEN_H
#define KDA_GOLDEN_H

#include <stddef.h>
#include <stdint.h>

#include "kda_catalog.h"
#include "kda_golden_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDA_GOLDEN_SCHEMA "kda-golden/1"         /* the "golden" object of a case file */
#define KDA_GOLDEN_SET_SCHEMA "kda-golden-set/1" /* a level's manifest.json */

/* What making one case produced (plain data: it crosses a pipe from a worker process). */
typedef struct kda_golden_info {
  int64_t index;           /* catalog index */
  int32_t status;          /* KDA_OK or the failure status */
  int32_t method;          /* certification method (KDA_CERT_* of kda_mpfr.h) */
  int64_t n_values;        /* o, ht, hc values together */
  int64_t steps;           /* token steps of all heads: sum over sequences of len * HV */
  int32_t prec_bits;       /* precision (bits) of the evaluation that certified the values */
  int32_t n_evals;         /* MPFR evaluations it took (Ziv's loop) */
  /* The float64 reference against the golden values (SPEC.md §9.4). */
  double ref_max_ulps;     /* max |ref - gold| / ulp(gold) over nonzero golden values */
  double ref_max_rel;      /* max |ref - gold| / |gold| over nonzero golden values */
  double ref_max_normwise; /* max over o, ht, hc of max|ref - gold| / max|gold| */
  int64_t ref_n_zero_mismatch; /* golden value 0 where the reference is not 0 */
  int64_t ref_n_exact;     /* values where the reference equals the golden value */
  int64_t ref_n_within1;   /* values where it is within one ulp of it */
  int64_t ref_worst_index; /* flat index (o, then ht, then hc) of the max ulps */
  double seconds_certify;  /* wall time of the certification (both phases) */
  int32_t certifier;       /* KDA_CERTIFIER_FAST or KDA_CERTIFIER_MPFR (kda_cert.h) */
  int32_t reserved;
  int64_t n_decided_fast;  /* values the double-double phase decided (fast certifier) */
  double seconds_fast;     /* wall time of the double-double phase */
  double seconds_ref;      /* wall time of the float64 reference */
  double seconds_total;    /* wall time of building, certifying and writing */
  char message[256];       /* the error message when status != KDA_OK */
} kda_golden_info;

/* Makes catalog entry e: builds the case, certifies its outputs with the MPFR reference,
 * scores the float64 reference against them, and writes DIR/<level>/<id>.npz (and, for L0,
 * DIR/L0/<id>.txt, after checking that every traced intermediate is exact and that the
 * traced outputs equal the certified ones).  DIR/<level> must exist.  Atomic per file.
 * Returns KDA_OK, KDA_ENOTCERT, KDA_EINVAL, KDA_EIO, KDA_ENOMEM, ... with the message in
 * info->message as well as in err. */
int kda_golden_make(const kda_catalog_entry *e, const char *dir, kda_golden_info *info,
                    char *err, size_t errlen);

/* The certifier kda_golden_make uses in this process (and in the worker processes forked
 * after the call): KDA_CERTIFIER_FAST (the default: the double-double phase of kda_cert.h,
 * then MPFR, every decided value compared with MPFR's; the files are those of the MPFR path,
 * byte for byte, because the manifest records the MPFR evaluation) or KDA_CERTIFIER_MPFR
 * (kda_mpfr_forward alone).  Returns KDA_OK or KDA_EINVAL. */
int kda_golden_set_certifier(int32_t certifier);
int32_t kda_golden_get_certifier(void);

/* An annex of a production case file (SPEC.md §10.2, "Stored envelope"): float64 vectors
 * stored as members beside the truth, hash-checked like them (golden.members_sha256), and one
 * key of the golden object (a JSON object) describing them.  The pipeline stores an annex
 * without knowing what it means: it is computed from the case file as first written, by the
 * function set with kda_golden_set_annex (tools/kda_golden_envelope.c: the fp32 envelope, as
 * the runner computes it), and the file is then written again with it. */
#define KDA_GOLDEN_ANNEX_MAX 8
typedef struct kda_golden_annex {
  char key[32];                          /* the golden object's key */
  char *json;                            /* its value, a JSON object text (malloc) */
  int n;                                 /* members */
  char name[KDA_GOLDEN_ANNEX_MAX][32];   /* member names (without .npy) */
  int64_t len[KDA_GOLDEN_ANNEX_MAX];     /* values of each (a vector) */
  double *data[KDA_GOLDEN_ANNEX_MAX];    /* malloc */
} kda_golden_annex;
/* Fills a (zeroed by the caller) from the case file at path; KDA_OK or a status with err. */
typedef int (*kda_golden_annex_fn)(const char *path, kda_golden_annex *a, char *err,
                                   size_t errlen);
/* The annex kda_golden_make adds to production cases in this process (and in worker
 * processes forked after the call); NULL (the default): none. */
void kda_golden_set_annex(kda_golden_annex_fn fn);
void kda_golden_annex_free(kda_golden_annex *a);

/* Writes DIR/<level>/manifest.json from the case files already in DIR/<level> and the infos
 * of the level's cases (infos[i] for catalog index i; n = kda_catalog_count()).  Atomic.
 * Returns KDA_OK, KDA_EIO, KDA_EFORMAT (a case file is not what was written), KDA_ENOMEM. */
int kda_golden_write_level_manifest(const char *dir, int32_t level,
                                    const kda_golden_info *infos, int64_t n, char *err,
                                    size_t errlen);

/* Writes DIR/SHA256SUMS covering every regular file under DIR (recursively, sorted, paths
 * relative to DIR; temporaries "<name>.tmp.<suffix>" and on-demand level directories skipped).
 * Atomic.  Returns KDA_OK, KDA_EIO,
 * KDA_ENOMEM. */
int kda_golden_write_sums(const char *dir, char *err, size_t errlen);

/* Checks DIR/SHA256SUMS: every listed file exists and has its hash, and every file under DIR
 * is listed.  Returns KDA_OK; KDA_EFORMAT when a check fails (msg names the first file and
 * what is wrong); KDA_EIO when SHA256SUMS cannot be read. */
int kda_golden_check_sums(const char *dir, char *msg, size_t msglen);

/* Writes DIR/<level>.sha256, the pinned hashes of an on-demand level: one `sha256sum` line
 * "HEX  <level>/<id>.npz" per case of the level, in catalog order, hashed from the files in
 * DIR/<level>.  Atomic.  Returns KDA_OK, KDA_EIO, KDA_ENOMEM, KDA_EINVAL. */
int kda_golden_write_pins(const char *dir, int32_t level, char *err, size_t errlen);

/* Checks the case files of `level` under DIR/<level> against the pin file `pins`: every case
 * of the level is pinned, its file has the pinned SHA-256, and nothing else is pinned.
 * Returns KDA_OK, KDA_EFORMAT (msg names the file), KDA_EIO. */
int kda_golden_check_pins(const char *pins, const char *dir, int32_t level, char *msg,
                          size_t msglen);

/* Compares a file (actual, e.g. a committed one) with the expected one (e.g. regenerated) byte
 * for byte.  Returns 0 when identical, 1 when they differ (msg names actual and says where:
 * for archives, the first member whose name or bytes differ or that cannot be read; otherwise
 * the first differing byte offset), -1 when a file cannot be read (msg says which). */
int kda_golden_compare_files(const char *expected, const char *actual, char *msg,
                             size_t msglen);

/* Compares two level manifests: identical bytes, or identical once the platform-dependent
 * fields ("versions", and every "ref_f64" / "ref_f64_budget" object) of actual are replaced by
 * those of expected.  Returns 0 identical, 2 equal up to those fields (msg says which differ),
 * 1 different (msg names the first differing key), -1 unreadable. */
int kda_golden_compare_manifests(const char *expected, const char *actual, char *msg,
                                 size_t msglen);

/* Regenerates a generator-made file (a case file whose manifest has generator_info.description
 * and no golden object, such as golden/example/example.npz) into out_path.  Returns KDA_OK,
 * KDA_ENOTFOUND (a valid case file that is not generator-made), the loader's status for a
 * file that cannot be loaded (KDA_EFORMAT where the loader said KDA_ENOTFOUND), or the
 * generator's and writer's statuses. */
int kda_golden_regen_generated(const char *path, const char *out_path, char *err,
                               size_t errlen);

/* The relative file names a level owns in a golden directory, for the writer's clean-up and
 * the verifier: "<id>.npz" (and "<id>.txt" for L0) of every entry, and "manifest.json".
 * Returns 1 when name (a file name inside DIR/<level>) is one of them, else 0. */
int kda_golden_owns(int32_t level, const char *name);

/* Versions of the libraries that produced the values: "mpfr 4.2.0, gmp 6.2.1, zlib 1.2.13,
 * libzip 1.7.3, jansson 2.14" (static storage). */
const char *kda_golden_versions(void);

/* The L0 trace (the text of golden/L0/<id>.txt) of a golden case file: its inputs, its
 * manifest's golden.comment and certification method, and its certified o / ht / hc members,
 * through the same tracer `kda golden --write` uses (kda_golden_trace.c).  *text freed by the
 * caller.  Returns KDA_OK, the file's status (KDA_EIO, KDA_EFORMAT, ...), KDA_ENOTFOUND (not a
 * golden case file: no golden object or no certified o), KDA_EINVAL (the case is not an L0
 * case: see kda_golden_trace), KDA_ENOMEM. */
int kda_golden_trace_file(const char *path, char **text, char *err, size_t errlen);

/* Seconds on a monotonic clock. */
double kda_golden_now(void);

#ifdef __cplusplus
}
#endif
#endif

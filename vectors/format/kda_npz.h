/* kda_npz.h: the vector container, NumPy .npz archives with a manifest.json member (SPEC.md §10).
 * SPDX-License-Identifier: MIT
 *
 * A vector file is a zip archive of .npy members (NumPy format 1.0, 2.0 or 3.0 headers) plus
 * one member "manifest.json", so that numpy.load opens it with no extra dependency.  The zip
 * layer is libzip and the JSON layer is jansson (docs/dependencies.md says why); the small .npy
 * header dictionary is parsed here and is fuzzed (vectors/tests/fuzz_npy.c).
 *
 * Reading: members are streamed through libzip, stored or deflated, with their CRC-32
 * checked when a member is read to its end; Zip64 extra fields as numpy writes them are
 * accepted.  A member is never loaded whole unless the caller asks for the whole array;
 * kda_npz_read_range reads a slice of a stored member by seeking.
 *
 * Writing: members are stored (not deflated) in the order they were added, after the
 * manifest, with a fixed DOS timestamp (1980-01-01 00:00) and fixed attributes (0644), so the
 * same content always gives the same bytes.  libzip builds the archive in memory; it is
 * written to a temporary file in the target's directory and renamed over the target only by
 * kda_npz_writer_commit: a failed or aborted write leaves no file behind and never a partial
 * one.
 *
 * Every function that can fail returns a KDA_* status (kda_problem.h) and writes a one-line
 * message that names the file (and member) into err when err is not NULL.
 */
#ifndef KDA_NPZ_H
#define KDA_NPZ_H

#include <stddef.h>
#include <stdint.h>
#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Storage element types of .npy members, all little-endian, C order.  Not precisions (those
 * are KDA_PRECISION_* of kda_precision.h, SPEC.md §10.3): a bf16 case is stored as '<f4'. */
#define KDA_DTYPE_F64 0 /* '<f8' */
#define KDA_DTYPE_F32 1 /* '<f4' */
#define KDA_DTYPE_F16 2 /* '<f2' */
#define KDA_DTYPE_I64 3 /* '<i8' */
#define KDA_DTYPE_I32 4 /* '<i4' */

#define KDA_NPY_MAX_NDIM 8

/* Size in bytes of one element (0 for an invalid dtype) and its NumPy descr ("<f8", ...). */
size_t kda_dtype_size(int32_t dtype);
const char *kda_dtype_descr(int32_t dtype);

/* Shape and type of one member. */
typedef struct kda_array_info {
  int32_t dtype;                      /* KDA_DTYPE_* */
  int32_t ndim;                       /* 0 .. KDA_NPY_MAX_NDIM */
  int64_t shape[KDA_NPY_MAX_NDIM];
  uint64_t count;                     /* product of shape (1 for ndim 0) */
  uint64_t nbytes;                    /* count * element size */
} kda_array_info;

/* ---- The .npy header (exposed for the fuzzer and for tools). */
/* Parses the header at the start of buf (len bytes): magic, version, header length, and the
 * dictionary {'descr': .., 'fortran_order': False, 'shape': (..)}.  On success fills info and
 * *data_offset (where the array data starts).  Returns KDA_OK, KDA_EFORMAT (not a .npy header,
 * truncated, malformed dictionary, fortran_order True), KDA_EDTYPE (a descr this project does
 * not support, e.g. '>f8' or '<c16'), or KDA_ESHAPE (negative dimension, too many dimensions,
 * a size that overflows).  what names the member in messages. */
int kda_npy_parse_header(const unsigned char *buf, size_t len, const char *what,
                         kda_array_info *info, size_t *data_offset, char *err, size_t errlen);
/* Writes the NumPy 1.0 header (2.0 if it does not fit) for info, padded with spaces and a
 * newline so that the data starts at a multiple of 64 bytes (byte for byte what numpy.save
 * writes).  Returns the header length, or 0 when cap is too small or info is invalid (dtype,
 * ndim, a negative dimension). */
size_t kda_npy_format_header(const kda_array_info *info, unsigned char *buf, size_t cap);

/* ---- Reading. */
typedef struct kda_npz kda_npz;

/* Opens an archive and indexes its members (central directory consistency is checked).
 * Allocation is bounded by the data present (SPEC.md §10.1): a stored member must declare
 * exactly its compressed size, a deflated one at most 1032 times it (plus 1024 bytes).
 * Returns KDA_OK, KDA_EIO (cannot open), KDA_EFORMAT (not a zip, truncated, corrupt,
 * inconsistent, empty file, duplicate member names, encrypted members, a compression method
 * other than stored or deflated, a declared size the compressed data cannot hold), KDA_ENOMEM,
 * KDA_EINVAL (NULL argument). */
int kda_npz_open(const char *path, kda_npz **out, char *err, size_t errlen);
void kda_npz_close(kda_npz *z);
const char *kda_npz_path(const kda_npz *z);

/* Array members, in archive order, named without the ".npy" suffix. */
int64_t kda_npz_count(const kda_npz *z);
const char *kda_npz_name(const kda_npz *z, int64_t i);
/* 1 when the archive has the array member name, else 0. */
int kda_npz_has(const kda_npz *z, const char *name);
/* Every member (arrays as "NAME.npy", and the others, e.g. "manifest.json"), in archive
 * order, by its full name: what kda_npz_read_blob reads. */
int64_t kda_npz_member_count(const kda_npz *z);
const char *kda_npz_member_name(const kda_npz *z, int64_t i);

/* Shape and dtype of a member.  Returns KDA_OK, KDA_ENOTFOUND, KDA_EFORMAT, KDA_EDTYPE,
 * KDA_ESHAPE (the header disagrees with the member's size), KDA_EIO (a read error),
 * KDA_ENOMEM. */
int kda_npz_info(kda_npz *z, const char *name, kda_array_info *info, char *err, size_t errlen);

/* Reads the whole member converted to dtype_out into dst, which holds exactly count elements
 * (count must equal the member's element count).  Conversions: any float or integer dtype to
 * F64; F32, F16 to F32; I64, I32 to I64; anything else is KDA_EDTYPE, and so is an I64 value
 * that F64 cannot hold exactly (|x| > 2^53 and not representable).  The CRC-32 is checked.
 * Returns KDA_OK, KDA_ENOTFOUND, KDA_EFORMAT (truncated, bad CRC, decompression error),
 * KDA_EDTYPE, KDA_ESHAPE (count mismatch), KDA_ENOMEM, KDA_EIO (a read error), KDA_EINVAL
 * (dst NULL while count > 0). */
int kda_npz_read(kda_npz *z, const char *name, int32_t dtype_out, void *dst, uint64_t count,
                 char *err, size_t errlen);
/* Reads elements [first, first + count) converted to dtype_out.  Stored members seek; deflated
 * members are decompressed up to the slice.  A slice is not CRC-checked (only whole reads are).
 * Returns as kda_npz_read, plus KDA_ESHAPE for a slice outside the member. */
int kda_npz_read_range(kda_npz *z, const char *name, int32_t dtype_out, uint64_t first,
                       uint64_t count, void *dst, char *err, size_t errlen);
/* Allocates and reads a whole member as F64 (or I64 for kda_npz_load_i64); *out is freed by
 * the caller with free().  info may be NULL. */
int kda_npz_load_f64(kda_npz *z, const char *name, kda_array_info *info, double **out,
                     char *err, size_t errlen);
int kda_npz_load_i64(kda_npz *z, const char *name, kda_array_info *info, int64_t **out,
                     char *err, size_t errlen);
/* Reads a member by its full name (e.g. "manifest.json", or "q.npy" for the raw .npy bytes)
 * whole, CRC-checked and NUL-terminated; *out freed by the caller, *len may be NULL.  Returns
 * KDA_OK, KDA_ENOTFOUND, KDA_EFORMAT, KDA_ENOMEM, KDA_EIO (a read error). */
int kda_npz_read_blob(kda_npz *z, const char *member, char **out, size_t *len, char *err,
                      size_t errlen);
/* Reads every member to its end and checks every CRC.  Returns KDA_OK or KDA_EFORMAT (or
 * KDA_EIO on a read error, KDA_ENOMEM). */
int kda_npz_verify(kda_npz *z, char *err, size_t errlen);

/* ---- Writing. */
typedef struct kda_npz_writer kda_npz_writer;

/* Starts an archive that will replace path on commit; creates the temporary file
 * "<path>.tmp.XXXXXX" at once (registered for removal on a signal, kda_files.h), so that an
 * unwritable directory fails here.  Returns KDA_OK, KDA_EIO (no path, a target that exists
 * and is not a regular file, or the temporary file cannot be created), KDA_ENOMEM.  Callers
 * that have inputs check kda_output_check first. */
int kda_npz_writer_open(const char *path, kda_npz_writer **out, char *err, size_t errlen);
/* Adds an array member whose data (in dtype, C order) is copied.  Returns KDA_OK, KDA_EINVAL
 * (bad name, duplicate, bad dtype), KDA_ESHAPE, KDA_ENOMEM. */
int kda_npz_writer_add(kda_npz_writer *w, const char *name, int32_t dtype, int32_t ndim,
                       const int64_t *shape, const void *data, char *err, size_t errlen);
/* Adds an array member from float64 data, rounded to dtype (F32, F16 round to nearest even;
 * I64/I32 require integral values).  Returns as kda_npz_writer_add. */
int kda_npz_writer_add_f64(kda_npz_writer *w, const char *name, int32_t dtype, int32_t ndim,
                           const int64_t *shape, const double *data, char *err, size_t errlen);
/* Sets (or replaces) the manifest.json text (copied; written as the first member).  Returns
 * KDA_OK, KDA_EINVAL (NULL, or not a JSON object, or duplicate keys), KDA_ENOMEM. */
int kda_npz_writer_set_manifest(kda_npz_writer *w, const char *json_text, char *err,
                                size_t errlen);
/* Writes everything to the temporary file, syncs it and renames it over the target; frees w
 * in every case.  With no member at all it writes the 22-byte empty zip.  On failure the
 * temporary file is removed and an existing target is untouched.  Returns KDA_OK, KDA_EIO,
 * KDA_ENOMEM. */
int kda_npz_writer_commit(kda_npz_writer *w, char *err, size_t errlen);
/* Discards everything; no file is left behind.  Frees w. */
void kda_npz_writer_abort(kda_npz_writer *w);
/* The end of a write that went as st says: kda_npz_writer_commit when st is KDA_OK, else
 * kda_npz_writer_abort and st again (st as well when w is NULL, the open having failed).
 * Frees w. */
int kda_npz_writer_finish(kda_npz_writer *w, int st, char *err, size_t errlen);

/* ---- Rounding helpers (SPEC.md §10.3), exact and round-to-nearest-even. */
float kda_round_f32(double x);
double kda_round_bf16(double x);          /* the nearest bfloat16, as a double */
double kda_round_f16(double x);           /* the nearest IEEE binary16, as a double */
uint16_t kda_f16_bits(double x);          /* binary16 bits of the nearest binary16 */
double kda_f16_value(uint16_t bits);      /* exact value of binary16 bits */

#ifdef __cplusplus
}
#endif
#endif

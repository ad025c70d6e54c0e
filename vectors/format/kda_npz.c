/* kda_npz.c: NumPy .npz vector files, streamed when read, deterministic when written (SPEC §10.1).
 * SPDX-License-Identifier: MIT
 *
 * The zip layer is libzip.  Reading takes sizes, CRCs and offsets from the central directory
 * (zip_open with ZIP_CHECKCONS also compares every local header with it, including the Zip64
 * local extra fields that numpy writes) and streams members with zip_fread; a member read to
 * its end has its CRC-32 checked by libzip.  Writing buffers the members, then has libzip
 * build the archive in memory, stored, with fixed times and attributes; it is written into a
 * temporary file next to the target, which is synced and renamed over the target.
 */
#include "kda_npz.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

#include "kda_files.h"
#include "kda_internal.h"

#define NPZ_CHUNK ((uint64_t)1 << 20)     /* streaming buffer: 1 MiB, a multiple of 8 */
#define NPZ_MAX_HEADER ((uint64_t)1 << 20) /* longest .npy header read (numpy reads 10000) */
#define NPZ_MAX_NAME 200                  /* longest array name the writer accepts */
/* Deflate expands at most 1032:1 (a 258-byte match in about 2 bits); the slack covers the
 * fixed overhead of tiny streams.  A member declaring more is a zip bomb or a lie. */
#define NPZ_DEFLATE_RATIO 1032u
#define NPZ_DEFLATE_SLACK 1024u
/* The archive as a whole (SPEC.md §10.1): its deflated members together may inflate to at most
 * 64 times their compressed bytes plus 1 MiB.  Float data compresses far less (random values
 * hardly at all, bf16-exact float32 about 2:1); a file over it is a bomb built of zeros. */
#define NPZ_ARCHIVE_RATIO 64u
#define NPZ_ARCHIVE_SLACK ((uint64_t)1 << 20)
/* A blob member (manifest.json) is text of a few KB: read whole only up to this. */
#define NPZ_MAX_BLOB ((uint64_t)16 << 20)
/* The most JSON values a manifest.json may hold (a case's holds about two hundred): what
 * parsing it allocates is then bounded too, not only its text (kda_json_values_check). */
#define NPZ_MAX_MANIFEST_VALUES ((int64_t)1 << 16)
#define NPZ_DOS_DATE 0x21                 /* 1980-01-01 */
#define NPZ_DOS_TIME 0                    /* 00:00:00 */
#define NPZ_ATTR (0100644u << 16)         /* regular file, rw-r--r-- (Unix mode in the high half) */

/* ---- Messages. */

/* A libzip error code as a status. */
static int zip_status(int ze) {
  switch (ze) {
  case ZIP_ER_MEMORY:
    return KDA_ENOMEM;
  case ZIP_ER_NOENT:
  case ZIP_ER_OPEN:
  case ZIP_ER_READ:
  case ZIP_ER_SEEK:
  case ZIP_ER_TELL:
  case ZIP_ER_WRITE:
  case ZIP_ER_CLOSE:
  case ZIP_ER_RENAME:
  case ZIP_ER_TMPOPEN:
  case ZIP_ER_REMOVE:
    return KDA_EIO;
  default:
    return KDA_EFORMAT;
  }
}

/* What a libzip error means for one member's data. */
static const char *member_problem(int ze) {
  switch (ze) {
  case ZIP_ER_CRC:
    return "CRC mismatch";
  case ZIP_ER_ZLIB:
  case ZIP_ER_COMPRESSED_DATA:
    return "decompression error (corrupt deflate data)";
  case ZIP_ER_EOF:
    return "truncated data";
  case ZIP_ER_INCONS:
    return "data size disagrees with the central directory";
  default:
    return "cannot read member";
  }
}

/* ---- Little-endian element access. */

static uint64_t le_load(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void le_store(unsigned char *p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static int host_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

static double bits_f64(uint64_t b) {
  double d;
  memcpy(&d, &b, sizeof d);
  return d;
}

static float bits_f32(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* ---- The reader. */

typedef struct npz_member {
  char *name;         /* name in the archive */
  char *array;        /* name without ".npy", or NULL for other members */
  zip_uint64_t index; /* libzip index */
  uint64_t size;      /* uncompressed size */
  uint64_t comp_size; /* compressed size (bytes present in the archive) */
  int32_t stored;     /* 1: ZIP_CM_STORE (seekable) */
  int32_t have_info;  /* 1: info and data_offset are valid */
  kda_array_info info;
  uint64_t data_offset;
} npz_member;

struct kda_npz {
  char *path;
  zip_t *za;
  npz_member *m;
  int64_t nm;
  int64_t *arrays; /* indices into m of the .npy members, archive order */
  int64_t na;
};

/* How messages name a member: arrays without ".npy", like numpy's keys. */
static const char *mname(const npz_member *m) {
  return m->array != NULL ? m->array : m->name;
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d != NULL) memcpy(d, s, n);
  return d;
}

static int ends_with_npy(const char *s) {
  size_t n = strlen(s);
  return n >= 4 && strcmp(s + n - 4, ".npy") == 0;
}

/* Allocation follows declared sizes only as far as the archive can back them (SPEC.md §10.1):
 * a stored member holds exactly its size in bytes, a deflated one at most NPZ_DEFLATE_RATIO
 * times its compressed size.  Checked from the directory, before anything is allocated. */
static int size_bound(const kda_npz *z, npz_member *m, const zip_stat_t *st, char *err,
                      size_t errlen) {
  if (!(st->valid & ZIP_STAT_COMP_SIZE))
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: member '%s': no compressed size", z->path,
                    m->name);
  m->comp_size = st->comp_size;
  if (m->stored && m->comp_size != m->size)
    return kda_fail(KDA_EFORMAT, err, errlen,
                    "%s: member '%s': stored with %llu bytes but declares %llu", z->path, m->name,
                    (unsigned long long)m->comp_size, (unsigned long long)m->size);
  if (!m->stored && (m->comp_size > (UINT64_MAX - NPZ_DEFLATE_SLACK) / NPZ_DEFLATE_RATIO ||
                     m->size > m->comp_size * NPZ_DEFLATE_RATIO + NPZ_DEFLATE_SLACK))
    return kda_fail(KDA_EFORMAT, err, errlen,
                    "%s: member '%s': declares %llu bytes from %llu compressed, more than "
                    "deflate can produce (zip bomb or corrupt directory)",
                    z->path, m->name, (unsigned long long)m->size,
                    (unsigned long long)m->comp_size);
  return KDA_OK;
}

/* The deflated members together: at most NPZ_ARCHIVE_RATIO times their compressed bytes (a
 * zip bomb of zeros passes each member's deflate bound but not this). */
static int archive_bound(const kda_npz *z, char *err, size_t errlen) {
  uint64_t comp = 0, size = 0;
  for (int64_t i = 0; i < z->nm; i++)
    if (!z->m[i].stored) comp += z->m[i].comp_size, size += z->m[i].size;
  if (size > comp * NPZ_ARCHIVE_RATIO + NPZ_ARCHIVE_SLACK)
    return kda_fail(KDA_EFORMAT, err, errlen,
                    "%s: its compressed members declare %llu bytes from %llu, more than %u:1 "
                    "(zip bomb)", z->path, (unsigned long long)size, (unsigned long long)comp,
                    NPZ_ARCHIVE_RATIO);
  return KDA_OK;
}

/* Fills z->m from the central directory. */
static int npz_index(kda_npz *z, char *err, size_t errlen) {
  zip_int64_t n = zip_get_num_entries(z->za, 0);
  if (n < 0) return kda_fail(KDA_EFORMAT, err, errlen, "%s: cannot list the archive", z->path);
  z->m = calloc(n > 0 ? (size_t)n : 1, sizeof *z->m);
  z->arrays = calloc(n > 0 ? (size_t)n : 1, sizeof *z->arrays);
  if (z->m == NULL || z->arrays == NULL)
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", z->path);
  for (zip_int64_t i = 0; i < n; i++) {
    zip_stat_t st;
    npz_member *m = &z->m[i];
    zip_stat_init(&st);
    if (zip_stat_index(z->za, (zip_uint64_t)i, 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE) || !(st.valid & ZIP_STAT_COMP_METHOD))
      return kda_fail(KDA_EFORMAT, err, errlen, "%s: entry %lld: unreadable directory entry",
                      z->path, (long long)i);
    if ((m->name = dup_str(st.name)) == NULL)
      return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", z->path);
    z->nm = i + 1;
    m->index = (zip_uint64_t)i;
    m->size = st.size;
    m->stored = st.comp_method == ZIP_CM_STORE;
    if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)
      return kda_fail(KDA_EFORMAT, err, errlen, "%s: member '%s' is encrypted", z->path, m->name);
    if (!zip_compression_method_supported(st.comp_method, 0) ||
        (st.comp_method != ZIP_CM_STORE && st.comp_method != ZIP_CM_DEFLATE))
      return kda_fail(KDA_EFORMAT, err, errlen,
                      "%s: member '%s': unsupported compression method %d", z->path, m->name,
                      (int)st.comp_method);
    if (size_bound(z, m, &st, err, errlen) != KDA_OK) return KDA_EFORMAT;
    for (zip_int64_t j = 0; j < i; j++)
      if (strcmp(z->m[j].name, m->name) == 0)
        return kda_fail(KDA_EFORMAT, err, errlen, "%s: duplicate member '%s'", z->path, m->name);
    if (ends_with_npy(m->name)) {
      if ((m->array = dup_str(m->name)) == NULL)
        return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", z->path);
      m->array[strlen(m->array) - 4] = '\0';
      z->arrays[z->na++] = i;
    }
  }
  return archive_bound(z, err, errlen);
}

int kda_npz_open(const char *path, kda_npz **out, char *err, size_t errlen) {
  struct stat sb;
  int ze = 0, st;
  kda_npz *z;
  if (out == NULL || path == NULL)
    return kda_fail(KDA_EINVAL, err, errlen, "kda_npz_open: NULL argument");
  *out = NULL;
  /* libzip takes an empty file for an empty archive (a vector file never is one) and reports
   * a directory as "operation not supported". */
  if (stat(path, &sb) == 0) {
    if (S_ISDIR(sb.st_mode))
      return kda_fail(KDA_EIO, err, errlen, "%s: cannot open: is a directory", path);
    if (S_ISREG(sb.st_mode) && sb.st_size == 0)
      return kda_fail(KDA_EFORMAT, err, errlen, "%s: empty file, not a zip archive", path);
  }
  if ((z = calloc(1, sizeof *z)) == NULL || (z->path = dup_str(path)) == NULL) {
    free(z);
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", path);
  }
  if ((z->za = zip_open(path, ZIP_CHECKCONS | ZIP_RDONLY, &ze)) == NULL) {
    zip_error_t e;
    zip_error_init_with_code(&e, ze);
    st = zip_status(ze);
    if (ze == ZIP_ER_NOZIP)
      kda_fail(st, err, errlen,
               "%s: not a zip archive, or truncated or corrupt (no valid central directory)", path);
    else if (ze == ZIP_ER_INCONS)
      kda_fail(st, err, errlen,
               "%s: corrupt zip archive (central directory inconsistent or truncated)", path);
    else if (st == KDA_EIO)
      kda_fail(st, err, errlen, "%s: cannot open: %s", path, zip_error_strerror(&e));
    else
      kda_fail(st, err, errlen, "%s: invalid zip archive: %s", path, zip_error_strerror(&e));
    zip_error_fini(&e);
    kda_npz_close(z);
    return st;
  }
  if ((st = npz_index(z, err, errlen)) != KDA_OK) {
    kda_npz_close(z);
    return st;
  }
  *out = z;
  return KDA_OK;
}

void kda_npz_close(kda_npz *z) {
  if (z == NULL) return;
  if (z->za != NULL) zip_discard(z->za);
  for (int64_t i = 0; i < z->nm; i++) {
    free(z->m[i].name);
    free(z->m[i].array);
  }
  free(z->m);
  free(z->arrays);
  free(z->path);
  free(z);
}

const char *kda_npz_path(const kda_npz *z) {
  return z != NULL ? z->path : NULL;
}

int64_t kda_npz_count(const kda_npz *z) {
  return z != NULL ? z->na : 0;
}

const char *kda_npz_name(const kda_npz *z, int64_t i) {
  if (z == NULL || i < 0 || i >= z->na) return NULL;
  return z->m[z->arrays[i]].array;
}

static npz_member *find_array(const kda_npz *z, const char *name) {
  if (z == NULL || name == NULL) return NULL;
  for (int64_t i = 0; i < z->na; i++)
    if (strcmp(z->m[z->arrays[i]].array, name) == 0) return &z->m[z->arrays[i]];
  return NULL;
}

static npz_member *find_member(const kda_npz *z, const char *name) {
  if (z == NULL || name == NULL) return NULL;
  for (int64_t i = 0; i < z->nm; i++)
    if (strcmp(z->m[i].name, name) == 0) return &z->m[i];
  return NULL;
}

int kda_npz_has(const kda_npz *z, const char *name) {
  return find_array(z, name) != NULL;
}

int64_t kda_npz_member_count(const kda_npz *z) {
  return z != NULL ? z->nm : 0;
}

const char *kda_npz_member_name(const kda_npz *z, int64_t i) {
  if (z == NULL || i < 0 || i >= z->nm) return NULL;
  return z->m[i].name;
}

/* ---- Streaming a member. */

static int open_member(kda_npz *z, const npz_member *m, zip_file_t **zf, char *err,
                       size_t errlen) {
  if ((*zf = zip_fopen_index(z->za, m->index, 0)) == NULL) {
    int ze = zip_error_code_zip(zip_get_error(z->za));
    return kda_fail(zip_status(ze), err, errlen, "%s: member '%s': %s (%s)", z->path, mname(m),
                    member_problem(ze), zip_strerror(z->za));
  }
  return KDA_OK;
}

/* Reads exactly n bytes. */
static int read_exact(kda_npz *z, const npz_member *m, zip_file_t *zf, void *buf, uint64_t n,
                      char *err, size_t errlen) {
  uint64_t got = 0;
  while (got < n) {
    zip_int64_t r = zip_fread(zf, (unsigned char *)buf + got, n - got);
    if (r < 0) {
      int ze = zip_error_code_zip(zip_file_get_error(zf));
      return kda_fail(zip_status(ze), err, errlen, "%s: member '%s': %s", z->path, mname(m),
                      member_problem(ze));
    }
    if (r == 0)
      return kda_fail(KDA_EFORMAT, err, errlen,
                      "%s: member '%s': truncated data (%llu of %llu bytes)", z->path, mname(m),
                      (unsigned long long)got, (unsigned long long)n);
    got += (uint64_t)r;
  }
  return KDA_OK;
}

/* Reads past the last byte of a member read from its start: libzip then compares the CRC-32
 * of everything read with the central directory's. */
static int read_end(kda_npz *z, const npz_member *m, zip_file_t *zf, char *err, size_t errlen) {
  unsigned char probe;
  zip_int64_t r = zip_fread(zf, &probe, 1);
  if (r < 0) {
    int ze = zip_error_code_zip(zip_file_get_error(zf));
    return kda_fail(zip_status(ze), err, errlen, "%s: member '%s': %s", z->path, mname(m),
                    member_problem(ze));
  }
  if (r != 0)
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: member '%s': more data than its size", z->path,
                    mname(m));
  return KDA_OK;
}

/* Reads and discards n bytes. */
static int skip_bytes(kda_npz *z, const npz_member *m, zip_file_t *zf, unsigned char *buf,
                      uint64_t cap, uint64_t n, char *err, size_t errlen) {
  while (n > 0) {
    uint64_t k = n < cap ? n : cap;
    int st = read_exact(z, m, zf, buf, k, err, errlen);
    if (st != KDA_OK) return st;
    n -= k;
  }
  return KDA_OK;
}

/* Parses a member's .npy header (only the header bytes are read) and checks it against the
 * member's size. */
static int member_info(kda_npz *z, npz_member *m, char *err, size_t errlen) {
  unsigned char pre[12], *buf = NULL;
  char what[512];
  zip_file_t *zf;
  uint64_t n, total;
  size_t off;
  int st;
  if (m->have_info) return KDA_OK;
  snprintf(what, sizeof what, "%s: member '%s'", z->path, mname(m));
  if ((st = open_member(z, m, &zf, err, errlen)) != KDA_OK) return st;
  n = m->size < sizeof pre ? m->size : sizeof pre;
  if ((st = read_exact(z, m, zf, pre, n, err, errlen)) != KDA_OK) goto done;
  total = n; /* unless the prefix is recognised, the parser reports what is wrong with it */
  if (n >= 10 && memcmp(pre, "\x93NUMPY", 6) == 0 && pre[7] == 0 &&
      (pre[6] == 1 || (n >= 12 && (pre[6] == 2 || pre[6] == 3)))) {
    total = pre[6] == 1 ? 10 + le_load(pre + 8, 2) : 12 + le_load(pre + 8, 4);
    /* A HEADER_LEN so small that the header ends inside the 12 bytes already read (v1 with
     * 0 or 1) would make the copy below overflow; no valid header is that short. */
    if (total < n) {
      st = kda_fail(KDA_EFORMAT, err, errlen,
                    "%s: .npy header length %llu is too short (no header dictionary)", what,
                    (unsigned long long)(total - (pre[6] == 1 ? 10 : 12)));
      goto done;
    }
    if (total > NPZ_MAX_HEADER || total > m->size) {
      st = kda_fail(KDA_EFORMAT, err, errlen, "%s: .npy header of %llu bytes %s (member has %llu)",
                    what, (unsigned long long)total,
                    total > m->size ? "is truncated" : "is too long", (unsigned long long)m->size);
      goto done;
    }
  }
  if ((buf = malloc(total > 0 ? (size_t)total : 1)) == NULL) {
    st = kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", what);
    goto done;
  }
  memcpy(buf, pre, (size_t)n);
  if ((st = read_exact(z, m, zf, buf + n, total - n, err, errlen)) != KDA_OK) goto done;
  if ((st = kda_npy_parse_header(buf, (size_t)total, what, &m->info, &off, err, errlen)) != KDA_OK)
    goto done;
  m->data_offset = off;
  if (m->data_offset + m->info.nbytes != m->size) {
    st = kda_fail(KDA_ESHAPE, err, errlen,
                  "%s: header says %llu bytes (%llu header + %llu data), member has %llu", what,
                  (unsigned long long)(m->data_offset + m->info.nbytes),
                  (unsigned long long)m->data_offset, (unsigned long long)m->info.nbytes,
                  (unsigned long long)m->size);
    goto done;
  }
  m->have_info = 1;
done:
  free(buf);
  zip_fclose(zf);
  return st;
}

int kda_npz_info(kda_npz *z, const char *name, kda_array_info *info, char *err, size_t errlen) {
  npz_member *m = find_array(z, name);
  int st;
  if (m == NULL)
    return kda_fail(KDA_ENOTFOUND, err, errlen, "%s: no member '%s'",
                    z != NULL ? z->path : "(null)", name != NULL ? name : "(null)");
  if ((st = member_info(z, m, err, errlen)) != KDA_OK) return st;
  if (info != NULL) *info = m->info;
  return KDA_OK;
}

/* ---- Conversions: which (member dtype, output dtype) pairs are allowed, all exact. */

static int conversion_ok(int32_t in, int32_t out) {
  switch (out) {
  case KDA_DTYPE_F64:
    return kda_dtype_size(in) != 0;
  case KDA_DTYPE_F32:
    return in == KDA_DTYPE_F32 || in == KDA_DTYPE_F16;
  case KDA_DTYPE_I64:
    return in == KDA_DTYPE_I64 || in == KDA_DTYPE_I32;
  default:
    return 0;
  }
}

static int check_conversion(const kda_npz *z, const npz_member *m, int32_t out, char *err,
                            size_t errlen) {
  if (conversion_ok(m->info.dtype, out)) return KDA_OK;
  return kda_fail(KDA_EDTYPE, err, errlen, "%s: member '%s': cannot read dtype '%s' as '%s'",
                  z->path, m->array, kda_dtype_descr(m->info.dtype),
                  kda_dtype_descr(out) != NULL ? kda_dtype_descr(out) : "(invalid dtype)");
}

/* Converts n elements from src (member dtype in, little-endian) to dst[first ...].  An int64
 * that float64 cannot hold exactly is refused rather than rounded. */
static int convert(const kda_npz *z, const npz_member *m, const unsigned char *src, int32_t out,
                   void *dst, uint64_t first, uint64_t n, char *err, size_t errlen) {
  int32_t in = m->info.dtype;
  size_t es = kda_dtype_size(in);
  if (in == out && host_little_endian()) {
    memcpy((unsigned char *)dst + first * es, src, (size_t)(n * es));
    return KDA_OK;
  }
  for (uint64_t i = 0; i < n; i++) {
    uint64_t b = le_load(src + i * es, es);
    double d = 0;
    int64_t iv = 0;
    switch (in) {
    case KDA_DTYPE_F64: d = bits_f64(b); break;
    case KDA_DTYPE_F32: d = bits_f32((uint32_t)b); break;
    case KDA_DTYPE_F16: d = kda_f16_value((uint16_t)b); break;
    case KDA_DTYPE_I64: iv = (int64_t)b; break;
    default: iv = (int64_t)(b ^ 0x80000000u) - 0x80000000; break; /* sign-extend i4 */
    }
    if (out == KDA_DTYPE_I64) {
      ((int64_t *)dst)[first + i] = iv;
      continue;
    }
    if (in == KDA_DTYPE_I64 || in == KDA_DTYPE_I32) {
      d = (double)iv;
      if (d >= 0x1p63 || (int64_t)d != iv)
        return kda_fail(
            KDA_EDTYPE, err, errlen,
            "%s: member '%s': element %llu (%lld) is not exactly representable as float64", z->path,
            m->array, (unsigned long long)(first + i), (long long)iv);
    }
    if (out == KDA_DTYPE_F32)
      ((float *)dst)[first + i] = (float)d; /* exact: d came from f4 or f2 */
    else
      ((double *)dst)[first + i] = d;
  }
  return KDA_OK;
}

/* Streams elements [first, first + count) of an array member into dst; whole reads continue
 * to the end of the member so that libzip checks the CRC. */
static int read_elements(kda_npz *z, npz_member *m, int32_t out, uint64_t first, uint64_t count,
                         void *dst, char *err, size_t errlen) {
  size_t es = kda_dtype_size(m->info.dtype);
  uint64_t want = count * es, start = m->data_offset + first * es, done = 0, cap;
  unsigned char *buf;
  zip_file_t *zf;
  int st;
  cap = want > start ? want : start;
  cap = cap < 64 ? 64 : cap > NPZ_CHUNK ? NPZ_CHUNK : (cap + 7) / 8 * 8;
  if ((buf = malloc((size_t)cap)) == NULL)
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: member '%s': out of memory", z->path, m->array);
  if ((st = open_member(z, m, &zf, err, errlen)) != KDA_OK) {
    free(buf);
    return st;
  }
  if (first > 0 && m->stored) {
    /* Stored data is seekable (and then not CRC-checked); deflated data is decompressed up
     * to the slice. */
    if (zip_fseek(zf, (zip_int64_t)start, SEEK_SET) != 0)
      st = kda_fail(KDA_EFORMAT, err, errlen, "%s: member '%s': cannot seek: %s", z->path, m->array,
                    zip_file_strerror(zf));
  } else {
    st = skip_bytes(z, m, zf, buf, cap, start, err, errlen);
  }
  while (st == KDA_OK && done < want) {
    uint64_t k = want - done < cap ? want - done : cap;
    if ((st = read_exact(z, m, zf, buf, k, err, errlen)) == KDA_OK)
      st = convert(z, m, buf, out, dst, done / es, k / es, err, errlen);
    done += k;
  }
  if (st == KDA_OK && first == 0 && count == m->info.count)
    st = read_end(z, m, zf, err, errlen); /* end of member: CRC check */
  zip_fclose(zf);
  free(buf);
  return st;
}

/* Looks up an array member and its header, and checks the requested conversion. */
static int prepare_read(kda_npz *z, const char *name, int32_t out, npz_member **mp, char *err,
                        size_t errlen) {
  npz_member *m = find_array(z, name);
  int st;
  if (m == NULL)
    return kda_fail(KDA_ENOTFOUND, err, errlen, "%s: no member '%s'",
                    z != NULL ? z->path : "(null)", name != NULL ? name : "(null)");
  if ((st = member_info(z, m, err, errlen)) != KDA_OK) return st;
  if ((st = check_conversion(z, m, out, err, errlen)) != KDA_OK) return st;
  *mp = m;
  return KDA_OK;
}

int kda_npz_read(kda_npz *z, const char *name, int32_t dtype_out, void *dst, uint64_t count,
                 char *err, size_t errlen) {
  npz_member *m;
  int st = prepare_read(z, name, dtype_out, &m, err, errlen);
  if (st != KDA_OK) return st;
  if (count != m->info.count)
    return kda_fail(KDA_ESHAPE, err, errlen,
                    "%s: member '%s': has %llu elements, caller expects %llu", z->path, name,
                    (unsigned long long)m->info.count, (unsigned long long)count);
  if (dst == NULL && count > 0)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: member '%s': NULL destination", z->path, name);
  /* Counted elements start at element 0, and the range covers the member: CRC is checked. */
  return read_elements(z, m, dtype_out, 0, count, dst, err, errlen);
}

int kda_npz_read_range(kda_npz *z, const char *name, int32_t dtype_out, uint64_t first,
                       uint64_t count, void *dst, char *err, size_t errlen) {
  npz_member *m;
  int st = prepare_read(z, name, dtype_out, &m, err, errlen);
  if (st != KDA_OK) return st;
  if (first > m->info.count || count > m->info.count - first)
    return kda_fail(KDA_ESHAPE, err, errlen,
                    "%s: member '%s': slice [%llu, %llu + %llu) outside its %llu elements", z->path,
                    name, (unsigned long long)first, (unsigned long long)first,
                    (unsigned long long)count, (unsigned long long)m->info.count);
  if (dst == NULL && count > 0)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: member '%s': NULL destination", z->path, name);
  if (count == 0) return KDA_OK;
  return read_elements(z, m, dtype_out, first, count, dst, err, errlen);
}

/* Allocates count elements of es bytes (at least one byte, so that empty arrays are not NULL). */
static int load_alloc(const kda_npz *z, const char *name, uint64_t count, size_t es, void **out,
                      char *err, size_t errlen) {
  if (count > SIZE_MAX / es)
    return kda_fail(KDA_ESHAPE, err, errlen, "%s: member '%s': too large for memory", z->path,
                    name);
  if ((*out = malloc(count > 0 ? (size_t)count * es : 1)) == NULL)
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: member '%s': out of memory (%llu elements)",
                    z->path, name, (unsigned long long)count);
  return KDA_OK;
}

static int load_as(kda_npz *z, const char *name, int32_t out, kda_array_info *info, void **dst,
                   char *err, size_t errlen) {
  npz_member *m;
  int st;
  *dst = NULL;
  if ((st = prepare_read(z, name, out, &m, err, errlen)) != KDA_OK) return st;
  if ((st = load_alloc(z, name, m->info.count, 8, dst, err, errlen)) != KDA_OK) return st;
  if ((st = read_elements(z, m, out, 0, m->info.count, *dst, err, errlen)) != KDA_OK) {
    free(*dst);
    *dst = NULL;
    return st;
  }
  if (info != NULL) *info = m->info;
  return KDA_OK;
}

int kda_npz_load_f64(kda_npz *z, const char *name, kda_array_info *info, double **out,
                     char *err, size_t errlen) {
  void *p;
  int st = load_as(z, name, KDA_DTYPE_F64, info, &p, err, errlen);
  if (out != NULL) *out = p;
  else free(p);
  return st;
}

int kda_npz_load_i64(kda_npz *z, const char *name, kda_array_info *info, int64_t **out,
                     char *err, size_t errlen) {
  void *p;
  int st = load_as(z, name, KDA_DTYPE_I64, info, &p, err, errlen);
  if (out != NULL) *out = p;
  else free(p);
  return st;
}

int kda_npz_read_blob(kda_npz *z, const char *member, char **out, size_t *len, char *err,
                      size_t errlen) {
  npz_member *m = find_member(z, member);
  zip_file_t *zf;
  char *buf;
  int st;
  if (out != NULL) *out = NULL;
  if (m == NULL)
    return kda_fail(KDA_ENOTFOUND, err, errlen, "%s: no member '%s'",
                    z != NULL ? z->path : "(null)", member != NULL ? member : "(null)");
  if (m->size > NPZ_MAX_BLOB)
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: member '%s': %llu bytes, more than a %llu-"
                    "byte text member may hold", z->path, member, (unsigned long long)m->size,
                    (unsigned long long)NPZ_MAX_BLOB);
  if ((buf = malloc((size_t)m->size + 1)) == NULL)
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: member '%s': out of memory", z->path, member);
  if ((st = open_member(z, m, &zf, err, errlen)) != KDA_OK) {
    free(buf);
    return st;
  }
  st = read_exact(z, m, zf, buf, m->size, err, errlen);
  if (st == KDA_OK) st = read_end(z, m, zf, err, errlen);
  zip_fclose(zf);
  if (st != KDA_OK) {
    free(buf);
    return st;
  }
  buf[m->size] = '\0';
  char what[4200];
  snprintf(what, sizeof what, "%s: member '%s'", z->path, member);
  if (strcmp(member, "manifest.json") == 0 &&
      (st = kda_json_values_check(buf, (size_t)m->size, NPZ_MAX_MANIFEST_VALUES, what, err,
                                  errlen)) != KDA_OK) {
    free(buf);
    return st;
  }
  if (len != NULL) *len = (size_t)m->size;
  if (out != NULL) *out = buf;
  else free(buf);
  return KDA_OK;
}

int kda_npz_verify(kda_npz *z, char *err, size_t errlen) {
  unsigned char *buf;
  int st = KDA_OK;
  if (z == NULL) return kda_fail(KDA_EINVAL, err, errlen, "kda_npz_verify: NULL archive");
  if ((buf = malloc((size_t)NPZ_CHUNK)) == NULL)
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", z->path);
  for (int64_t i = 0; i < z->nm && st == KDA_OK; i++) {
    npz_member *m = &z->m[i];
    zip_file_t *zf;
    if ((st = open_member(z, m, &zf, err, errlen)) != KDA_OK) break;
    st = skip_bytes(z, m, zf, buf, NPZ_CHUNK, m->size, err, errlen);
    if (st == KDA_OK) st = read_end(z, m, zf, err, errlen);
    zip_fclose(zf);
  }
  free(buf);
  return st;
}

/* ---- The writer. */

typedef struct npz_wmember {
  char *name;         /* member name, with ".npy" for arrays */
  unsigned char *buf; /* the whole member: .npy header and data, or the manifest text */
  size_t len;
} npz_wmember;

struct kda_npz_writer {
  char *path;
  char *tmp;           /* the temporary file, created by open, renamed by commit */
  npz_wmember *m;
  size_t n, cap;
  npz_wmember manifest; /* buf == NULL until set */
};

/* Creates "<path>.tmp.XXXXXX" (kda_files.h: registered for removal on a signal). */
static int create_tmp(kda_npz_writer *w, char *err, size_t errlen) {
  int fd = kda_tmp_create(w->path, &w->tmp);
  if (fd < 0)
    return kda_fail(errno == ENOMEM ? KDA_ENOMEM : KDA_EIO, err, errlen,
                    "%s: cannot create temporary file: %s", w->path, strerror(errno));
  close(fd);
  return KDA_OK;
}

static void writer_free(kda_npz_writer *w) {
  if (w == NULL) return;
  for (size_t i = 0; i < w->n; i++) {
    free(w->m[i].name);
    free(w->m[i].buf);
  }
  free(w->m);
  free(w->manifest.name);
  free(w->manifest.buf);
  kda_tmp_forget(w->tmp);
  free(w->tmp);
  free(w->path);
  free(w);
}

int kda_npz_writer_open(const char *path, kda_npz_writer **out, char *err, size_t errlen) {
  kda_npz_writer *w;
  int st;
  if (out == NULL || path == NULL || path[0] == '\0')
    return kda_fail(KDA_EIO, err, errlen, "kda_npz_writer_open: no path");
  *out = NULL;
  if ((st = kda_output_check(path, NULL, 0, err, errlen)) != KDA_OK) return st;
  if ((w = calloc(1, sizeof *w)) == NULL || (w->path = dup_str(path)) == NULL) {
    free(w);
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", path);
  }
  if ((st = create_tmp(w, err, errlen)) != KDA_OK) {
    writer_free(w);
    return st;
  }
  *out = w;
  return KDA_OK;
}

void kda_npz_writer_abort(kda_npz_writer *w) {
  if (w == NULL) return;
  if (w->tmp != NULL) unlink(w->tmp);
  writer_free(w);
}

int kda_npz_writer_finish(kda_npz_writer *w, int st, char *err, size_t errlen) {
  if (w == NULL) return st;
  if (st != KDA_OK) {
    kda_npz_writer_abort(w);
    return st;
  }
  return kda_npz_writer_commit(w, err, errlen);
}

/* Names are what numpy.savez accepts as keywords and what is safe as a file name. */
static int name_ok(const char *name) {
  size_t n = 0;
  if (name == NULL || name[0] == '\0' || name[0] == '.') return 0;
  for (; name[n] != '\0'; n++) {
    char c = name[n];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-' || c == '.'))
      return 0;
  }
  return n <= NPZ_MAX_NAME;
}

/* Validates one array and allocates its member with the .npy header written; *data points
 * at where the data goes. */
static int member_new(kda_npz_writer *w, const char *name, int32_t dtype, int32_t ndim,
                      const int64_t *shape, const void *data, npz_wmember *mem,
                      unsigned char **dst, kda_array_info *info, char *err, size_t errlen) {
  unsigned char header[512];
  size_t hl, es = kda_dtype_size(dtype);
  uint64_t count = 1, nbytes;
  if (w == NULL) return kda_fail(KDA_EINVAL, err, errlen, "kda_npz_writer_add: NULL writer");
  if (!name_ok(name))
    return kda_fail(KDA_EINVAL, err, errlen, "%s: invalid member name '%s'", w->path,
                    name != NULL ? name : "(null)");
  for (size_t i = 0; i < w->n; i++)
    if (strlen(w->m[i].name) == strlen(name) + 4 && strncmp(w->m[i].name, name, strlen(name)) == 0)
      return kda_fail(KDA_EINVAL, err, errlen, "%s: duplicate member '%s'", w->path, name);
  if (es == 0)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: member '%s': invalid dtype %d", w->path, name,
                    (int)dtype);
  if (ndim < 0 || ndim > KDA_NPY_MAX_NDIM)
    return kda_fail(KDA_ESHAPE, err, errlen, "%s: member '%s': %d dimensions (0 to %d allowed)",
                    w->path, name, (int)ndim, KDA_NPY_MAX_NDIM);
  if (ndim > 0 && shape == NULL)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: member '%s': NULL shape", w->path, name);
  memset(info, 0, sizeof *info);
  info->dtype = dtype;
  info->ndim = ndim;
  nbytes = es;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return kda_fail(KDA_ESHAPE, err, errlen, "%s: member '%s': negative dimension %lld", w->path,
                      name, (long long)shape[i]);
    info->shape[i] = shape[i];
    if (shape[i] != 0 && nbytes > (uint64_t)INT64_MAX / (uint64_t)shape[i])
      return kda_fail(KDA_ESHAPE, err, errlen, "%s: member '%s': size overflows", w->path, name);
    nbytes *= shape[i] != 0 ? (uint64_t)shape[i] : 1;
    count *= (uint64_t)shape[i];
  }
  info->count = count;
  info->nbytes = nbytes = count * es;
  if (data == NULL && count > 0)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: member '%s': NULL data", w->path, name);
  hl = kda_npy_format_header(info, header, sizeof header);
  if (hl == 0 || nbytes > SIZE_MAX - hl)
    return kda_fail(KDA_ESHAPE, err, errlen, "%s: member '%s': size overflows", w->path, name);
  mem->len = hl + (size_t)nbytes;
  mem->name = malloc(strlen(name) + 5);
  mem->buf = malloc(mem->len);
  if (mem->name == NULL || mem->buf == NULL) {
    free(mem->name);
    free(mem->buf);
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: member '%s': out of memory", w->path, name);
  }
  snprintf(mem->name, strlen(name) + 5, "%s.npy", name);
  memcpy(mem->buf, header, hl);
  *dst = mem->buf + hl;
  return KDA_OK;
}

static int member_push(kda_npz_writer *w, npz_wmember *mem, char *err, size_t errlen) {
  if (w->n == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 16;
    npz_wmember *m = realloc(w->m, cap * sizeof *m);
    if (m == NULL) {
      free(mem->name);
      free(mem->buf);
      return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", w->path);
    }
    w->m = m;
    w->cap = cap;
  }
  w->m[w->n++] = *mem;
  return KDA_OK;
}

int kda_npz_writer_add(kda_npz_writer *w, const char *name, int32_t dtype, int32_t ndim,
                       const int64_t *shape, const void *data, char *err, size_t errlen) {
  npz_wmember mem = {0};
  kda_array_info info;
  unsigned char *dst;
  size_t es = kda_dtype_size(dtype);
  int st = member_new(w, name, dtype, ndim, shape, data, &mem, &dst, &info, err, errlen);
  if (st != KDA_OK) return st;
  /* Host-order elements to little-endian bytes. */
  if (host_little_endian()) {
    if (info.nbytes > 0) memcpy(dst, data, (size_t)info.nbytes);
  } else {
    for (uint64_t i = 0; i < info.count; i++)
      for (size_t j = 0; j < es; j++)
        dst[i * es + j] = ((const unsigned char *)data)[i * es + es - 1 - j];
  }
  return member_push(w, &mem, err, errlen);
}

/* One float64 value in dtype's little-endian bits; ints must be integral and in range. */
static int encode_f64(double x, int32_t dtype, uint64_t *bits) {
  float f;
  switch (dtype) {
  case KDA_DTYPE_F64:
    memcpy(bits, &x, 8);
    return 1;
  case KDA_DTYPE_F32:
    f = kda_round_f32(x);
    {
      uint32_t u;
      memcpy(&u, &f, 4);
      *bits = u;
    }
    return 1;
  case KDA_DTYPE_F16:
    *bits = kda_f16_bits(x);
    return 1;
  case KDA_DTYPE_I64:
    if (!(x >= -0x1p63 && x < 0x1p63) || x != floor(x)) return 0;
    *bits = (uint64_t)(int64_t)x;
    return 1;
  default:
    if (!(x >= -0x1p31 && x < 0x1p31) || x != floor(x)) return 0;
    *bits = (uint32_t)(int32_t)x;
    return 1;
  }
}

int kda_npz_writer_add_f64(kda_npz_writer *w, const char *name, int32_t dtype, int32_t ndim,
                           const int64_t *shape, const double *data, char *err, size_t errlen) {
  npz_wmember mem = {0};
  kda_array_info info;
  unsigned char *dst;
  size_t es = kda_dtype_size(dtype);
  int st = member_new(w, name, dtype, ndim, shape, data, &mem, &dst, &info, err, errlen);
  if (st != KDA_OK) return st;
  for (uint64_t i = 0; i < info.count; i++) {
    uint64_t bits;
    if (!encode_f64(data[i], dtype, &bits)) {
      free(mem.name);
      free(mem.buf);
      return kda_fail(KDA_EINVAL, err, errlen,
                      "%s: member '%s': element %llu (%.17g) is not an integer in '%s' range",
                      w->path, name, (unsigned long long)i, data[i], kda_dtype_descr(dtype));
    }
    le_store(dst + i * es, bits, es);
  }
  return member_push(w, &mem, err, errlen);
}

int kda_npz_writer_set_manifest(kda_npz_writer *w, const char *json_text, char *err,
                                size_t errlen) {
  json_error_t je;
  json_t *j;
  size_t n;
  char *name, *buf;
  if (w == NULL || json_text == NULL)
    return kda_fail(KDA_EINVAL, err, errlen, "kda_npz_writer_set_manifest: NULL argument");
  if ((j = json_loads(json_text, JSON_REJECT_DUPLICATES, &je)) == NULL || !json_is_object(j)) {
    json_decref(j);
    return kda_fail(KDA_EINVAL, err, errlen, "%s: manifest.json is not a JSON object (%s)", w->path,
                    j == NULL ? je.text : "not an object");
  }
  json_decref(j);
  n = strlen(json_text);
  name = dup_str("manifest.json");
  buf = malloc(n > 0 ? n : 1);
  if (name == NULL || buf == NULL) {
    free(name);
    free(buf);
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", w->path);
  }
  memcpy(buf, json_text, n);
  free(w->manifest.name);
  free(w->manifest.buf);
  w->manifest.name = name;
  w->manifest.buf = (unsigned char *)buf;
  w->manifest.len = n;
  return KDA_OK;
}

/* Adds one stored member with the fixed time and attributes. */
static int zip_add_member(zip_t *za, const npz_wmember *mem) {
  zip_source_t *src = zip_source_buffer(za, mem->buf, mem->len, 0);
  zip_int64_t idx;
  if (src == NULL) return -1;
  if ((idx = zip_file_add(za, mem->name, src, 0)) < 0) {
    zip_source_free(src);
    return -1;
  }
  if (zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0) != 0 ||
      zip_file_set_dostime(za, (zip_uint64_t)idx, NPZ_DOS_TIME, NPZ_DOS_DATE, 0) != 0 ||
      zip_file_set_external_attributes(za, (zip_uint64_t)idx, 0, ZIP_OPSYS_UNIX, NPZ_ATTR) != 0)
    return -1;
  return 0;
}

/* Writes len bytes to path (which exists: the temporary file), every write checked. */
static int write_file(const char *path, const unsigned char *buf, size_t len) {
  int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC), e = 0;
  if (fd < 0) return -1;
  while (len > 0) {
    ssize_t r = write(fd, buf, len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      e = r < 0 ? errno : EIO;
      break;
    }
    buf += r;
    len -= (size_t)r;
  }
  if (close(fd) != 0 && e == 0) e = errno;
  errno = e;
  return e ? -1 : 0;
}

/* The archive is built in memory by libzip (so that libzip leaves no temporary file of its
 * own behind when the process is killed), then written into w->tmp.  libzip deletes an
 * archive without entries instead of writing one, so the empty archive (an
 * end-of-central-directory record alone, as Python's zipfile writes it) is written here. */
static int write_archive(kda_npz_writer *w, char *err, size_t errlen) {
  static const unsigned char eocd[22] = {'P', 'K', 5, 6};
  zip_error_t ze;
  zip_source_t *src;
  zip_t *za;
  zip_stat_t zs;
  unsigned char *buf = NULL;
  int st = KDA_OK;
  if (w->manifest.buf == NULL && w->n == 0) {
    if (write_file(w->tmp, eocd, sizeof eocd) != 0)
      return kda_fail(KDA_EIO, err, errlen, "%s: cannot write %s: %s", w->path, w->tmp,
                      strerror(errno));
    return KDA_OK;
  }
  zip_error_init(&ze);
  if ((src = zip_source_buffer_create(NULL, 0, 0, &ze)) == NULL ||
      (za = zip_open_from_source(src, ZIP_TRUNCATE, &ze)) == NULL) {
    st = kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot build the archive: %s", w->path,
                  zip_error_strerror(&ze));
    if (src != NULL) zip_source_free(src);
    zip_error_fini(&ze);
    return st;
  }
  zip_source_keep(src);
  if (w->manifest.buf != NULL && zip_add_member(za, &w->manifest) != 0) goto fail;
  for (size_t i = 0; i < w->n; i++)
    if (zip_add_member(za, &w->m[i]) != 0) goto fail;
  if (zip_close(za) != 0) goto fail;
  zip_stat_init(&zs);
  if (zip_source_stat(src, &zs) != 0 || !(zs.valid & ZIP_STAT_SIZE) ||
      (buf = malloc(zs.size > 0 ? (size_t)zs.size : 1)) == NULL || zip_source_open(src) != 0)
    st = kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot build the archive in memory", w->path);
  else {
    if (zip_source_read(src, buf, zs.size) != (zip_int64_t)zs.size)
      st = kda_fail(KDA_EIO, err, errlen, "%s: cannot read the archive built in memory", w->path);
    zip_source_close(src);
  }
  if (st == KDA_OK && write_file(w->tmp, buf, (size_t)zs.size) != 0)
    st = kda_fail(KDA_EIO, err, errlen, "%s: cannot write %s: %s", w->path, w->tmp,
                  strerror(errno));
  free(buf);
  zip_source_free(src);
  zip_error_fini(&ze);
  return st;
fail:
  st = kda_fail(zip_error_code_zip(zip_get_error(za)) == ZIP_ER_MEMORY ? KDA_ENOMEM : KDA_EIO,
                err, errlen, "%s: cannot write %s: %s", w->path, w->tmp, zip_strerror(za));
  zip_discard(za);
  zip_source_free(src);
  zip_error_fini(&ze);
  return st;
}

static int sync_path(const char *path, int flags) {
  int fd = open(path, flags | O_CLOEXEC), r;
  if (fd < 0) return -1;
  r = fsync(fd);
  close(fd);
  return r;
}

/* Syncs the directory holding path, so that the rename itself is durable (best effort). */
static void sync_dir(const char *path) {
  char *dir = dup_str(path), *slash;
  if (dir == NULL) return;
  slash = strrchr(dir, '/');
  if (slash == NULL)
    (void)sync_path(".", O_RDONLY);
  else {
    slash[slash == dir ? 1 : 0] = '\0';
    (void)sync_path(dir, O_RDONLY);
  }
  free(dir);
}

int kda_npz_writer_commit(kda_npz_writer *w, char *err, size_t errlen) {
  int st;
  if (w == NULL) return kda_fail(KDA_EIO, err, errlen, "kda_npz_writer_commit: NULL writer");
  st = write_archive(w, err, errlen);
  if (st == KDA_OK && kda_test_fail_write(w->path)) /* test hook, kda_files.h */
    st = kda_fail(KDA_EIO, err, errlen, "%s: cannot write %s: %s", w->path, w->tmp,
                  strerror(ENOSPC));
  if (st == KDA_OK && sync_path(w->tmp, O_RDONLY) != 0)
    st = kda_fail(KDA_EIO, err, errlen, "%s: cannot sync %s: %s", w->path, w->tmp, strerror(errno));
  if (st == KDA_OK && rename(w->tmp, w->path) != 0)
    st = kda_fail(KDA_EIO, err, errlen, "%s: cannot rename %s onto it: %s", w->path, w->tmp,
                  strerror(errno));
  if (st != KDA_OK) {
    unlink(w->tmp);
  } else {
    sync_dir(w->path);
  }
  writer_free(w); /* forgets the temporary file: removed or renamed */
  return st;
}

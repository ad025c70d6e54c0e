/* kda_npy.c: .npy headers (parse, write) and exact rounding to f32, bf16, f16 (SPEC §10.1, 10.3).
 * SPDX-License-Identifier: MIT
 *
 * The header parser is hand-written because the grammar is tiny: the Python literal
 *   {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }
 * with the three keys in any order, either quote style, any whitespace and optional trailing
 * commas.  It reads only the bytes it is given, never recurses, and is fuzzed
 * (vectors/tests/fuzz_npy.c).  Anything numpy itself would not write for the five dtypes of
 * this project (comments, escapes, string prefixes, hex or '+' integers, lists) is refused.
 */
#include "kda_npz.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
#define NPY_GROWTH_DIGITS 21 /* numpy's GROWTH_AXIS_MAX_DIGITS: spare room after the dict */
#define NPY_MAX_STRING 64    /* longest quoted string kept (longer ones are truncated) */

static const char *const dtype_descr[] = {"<f8", "<f4", "<f2", "<i8", "<i4"};
static const size_t dtype_bytes[] = {8, 4, 2, 8, 4};

size_t kda_dtype_size(int32_t dtype) {
  return (dtype >= 0 && dtype <= KDA_DTYPE_I32) ? dtype_bytes[dtype] : 0;
}

const char *kda_dtype_descr(int32_t dtype) {
  return (dtype >= 0 && dtype <= KDA_DTYPE_I32) ? dtype_descr[dtype] : NULL;
}

/* ---- Messages. */

static int fail(int status, char *err, size_t errlen, const char *what, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s: %s", what != NULL ? what : ".npy header", msg);
  }
  return status;
}

/* Copies s into out as printable ASCII (other bytes as '?'), for quoting in messages. */
static void printable(const char *s, size_t n, char *out, size_t cap) {
  size_t i;
  for (i = 0; i < n && i + 1 < cap; i++)
    out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  out[i] = '\0';
}

/* ---- The dictionary scanner: a cursor over [p, end). */

typedef struct npy_scan {
  const unsigned char *p, *end;
} npy_scan;

static void skip_ws(npy_scan *s) {
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r' ||
                           *s->p == '\f' || *s->p == '\v'))
    s->p++;
}

static int accept(npy_scan *s, char c) {
  skip_ws(s);
  if (s->p < s->end && *s->p == (unsigned char)c) {
    s->p++;
    return 1;
  }
  return 0;
}

/* A quoted string without escapes; its text (truncated to NPY_MAX_STRING) goes to out. */
static int scan_string(npy_scan *s, char out[NPY_MAX_STRING + 1], size_t *outlen) {
  unsigned char q;
  size_t n = 0;
  skip_ws(s);
  if (s->p >= s->end || (*s->p != '\'' && *s->p != '"')) return 0;
  q = *s->p++;
  while (s->p < s->end && *s->p != q) {
    if (*s->p == '\\' || *s->p < 0x20 || *s->p >= 0x7f) return 0;
    if (n < NPY_MAX_STRING) out[n++] = (char)*s->p;
    s->p++;
  }
  if (s->p >= s->end) return 0;
  s->p++;
  out[n] = '\0';
  *outlen = n;
  return 1;
}

/* A Python identifier-like word (True, False). */
static size_t scan_word(npy_scan *s, const unsigned char **word) {
  skip_ws(s);
  *word = s->p;
  while (s->p < s->end && ((*s->p >= 'A' && *s->p <= 'Z') || (*s->p >= 'a' && *s->p <= 'z') ||
                           (*s->p >= '0' && *s->p <= '9') || *s->p == '_'))
    s->p++;
  return (size_t)(s->p - *word);
}

/* Result of parsing the dictionary, checked afterwards. */
typedef struct npy_dict {
  int have_descr, have_fortran, have_shape;
  char descr[NPY_MAX_STRING + 1];
  size_t descr_len;
  int fortran;
  int32_t ndim;
  int64_t shape[KDA_NPY_MAX_NDIM];
} npy_dict;

/* One decimal dimension: 0 or [1-9][0-9]*, optionally negative (refused by the caller). */
static int scan_dim(npy_scan *s, const char *what, int64_t *dim, char *err, size_t errlen) {
  int neg = 0;
  uint64_t v = 0;
  const unsigned char *start;
  skip_ws(s);
  if (s->p < s->end && *s->p == '-') {
    neg = 1;
    s->p++;
  }
  start = s->p;
  while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
    unsigned d = (unsigned)(*s->p - '0');
    if (v > ((uint64_t)INT64_MAX - d) / 10)
      return fail(KDA_ESHAPE, err, errlen, what, "shape dimension is too large");
    v = v * 10 + d;
    s->p++;
  }
  if (s->p == start || (s->p - start > 1 && *start == '0'))
    return fail(KDA_EFORMAT, err, errlen, what, "malformed shape tuple");
  if (neg && v != 0)
    return fail(KDA_ESHAPE, err, errlen, what, "negative dimension -%llu in shape",
                (unsigned long long)v);
  *dim = (int64_t)v;
  return KDA_OK;
}

/* The shape tuple: (), (n,), (n, m), (n, m,) ...; (n) is an int in Python, not a tuple. */
static int scan_shape(npy_scan *s, const char *what, npy_dict *d, char *err, size_t errlen) {
  int32_t n = 0;
  int last_comma = 0;
  if (!accept(s, '('))
    return fail(KDA_EFORMAT, err, errlen, what, "shape is not a tuple");
  for (;;) {
    int64_t dim = 0;
    int st;
    if (accept(s, ')')) break;
    if (n > 0 && !last_comma)
      return fail(KDA_EFORMAT, err, errlen, what, "malformed shape tuple");
    if (n == KDA_NPY_MAX_NDIM)
      return fail(KDA_ESHAPE, err, errlen, what, "more than %d dimensions", KDA_NPY_MAX_NDIM);
    if ((st = scan_dim(s, what, &dim, err, errlen)) != KDA_OK) return st;
    d->shape[n++] = dim;
    last_comma = accept(s, ',');
  }
  if (n == 1 && !last_comma)
    return fail(KDA_EFORMAT, err, errlen, what, "shape is not a tuple");
  d->ndim = n;
  return KDA_OK;
}

static int scan_value(npy_scan *s, const char *key, const char *what, npy_dict *d, char *err,
                      size_t errlen) {
  if (strcmp(key, "descr") == 0) {
    skip_ws(s);
    if (s->p < s->end && *s->p == '[')
      return fail(KDA_EDTYPE, err, errlen, what, "structured dtypes are not supported");
    if (!scan_string(s, d->descr, &d->descr_len))
      return fail(KDA_EFORMAT, err, errlen, what, "malformed 'descr' value");
    d->have_descr = 1;
    return KDA_OK;
  }
  if (strcmp(key, "fortran_order") == 0) {
    const unsigned char *w;
    size_t n = scan_word(s, &w);
    if (n == 4 && memcmp(w, "True", 4) == 0)
      d->fortran = 1;
    else if (n == 5 && memcmp(w, "False", 5) == 0)
      d->fortran = 0;
    else
      return fail(KDA_EFORMAT, err, errlen, what, "'fortran_order' is not True or False");
    d->have_fortran = 1;
    return KDA_OK;
  }
  d->have_shape = 1;
  return scan_shape(s, what, d, err, errlen);
}

/* The whole dictionary, then only whitespace to the end of the header. */
static int scan_dict(npy_scan *s, const char *what, npy_dict *d, char *err, size_t errlen) {
  int entries = 0, last_comma = 0;
  if (!accept(s, '{'))
    return fail(KDA_EFORMAT, err, errlen, what, "header is not a dictionary");
  for (;;) {
    char key[NPY_MAX_STRING + 1], shown[NPY_MAX_STRING + 1];
    size_t keylen;
    int *seen, st;
    if (accept(s, '}')) break;
    if (entries > 0 && !last_comma)
      return fail(KDA_EFORMAT, err, errlen, what, "malformed header dictionary");
    if (!scan_string(s, key, &keylen))
      return fail(KDA_EFORMAT, err, errlen, what, "malformed header dictionary");
    if (strcmp(key, "descr") == 0)
      seen = &d->have_descr;
    else if (strcmp(key, "fortran_order") == 0)
      seen = &d->have_fortran;
    else if (strcmp(key, "shape") == 0)
      seen = &d->have_shape;
    else {
      printable(key, keylen, shown, sizeof shown);
      return fail(KDA_EFORMAT, err, errlen, what, "unexpected key '%s' in header", shown);
    }
    if (*seen)
      return fail(KDA_EFORMAT, err, errlen, what, "duplicate key '%s' in header", key);
    if (!accept(s, ':'))
      return fail(KDA_EFORMAT, err, errlen, what, "malformed header dictionary");
    if ((st = scan_value(s, key, what, d, err, errlen)) != KDA_OK) return st;
    entries++;
    last_comma = accept(s, ',');
  }
  skip_ws(s);
  if (s->p != s->end)
    return fail(KDA_EFORMAT, err, errlen, what, "junk after the header dictionary");
  if (!d->have_descr || !d->have_fortran || !d->have_shape)
    return fail(KDA_EFORMAT, err, errlen, what, "header lacks key '%s'",
                !d->have_descr ? "descr" : !d->have_fortran ? "fortran_order" : "shape");
  return KDA_OK;
}

/* Element count and byte size; like numpy, zero dimensions are skipped when checking that
 * the byte size fits (in int64, and in size_t). */
static int fill_sizes(const npy_dict *d, int32_t dtype, const char *what, kda_array_info *info,
                      char *err, size_t errlen) {
  uint64_t count = 1, bytes = kda_dtype_size(dtype);
  uint64_t limit = (uint64_t)INT64_MAX < (uint64_t)SIZE_MAX ? (uint64_t)INT64_MAX : SIZE_MAX;
  int zero = 0;
  memset(info, 0, sizeof *info);
  for (int32_t i = 0; i < d->ndim; i++) {
    uint64_t n = (uint64_t)d->shape[i];
    info->shape[i] = d->shape[i];
    if (n == 0) {
      zero = 1;
      continue;
    }
    if (bytes > limit / n)
      return fail(KDA_ESHAPE, err, errlen, what, "array size overflows (shape too large)");
    bytes *= n;
    count *= n;
  }
  info->dtype = dtype;
  info->ndim = d->ndim;
  info->count = zero ? 0 : count;
  info->nbytes = zero ? 0 : bytes;
  return KDA_OK;
}

static int32_t descr_dtype(const char *descr) {
  for (int32_t t = 0; t <= KDA_DTYPE_I32; t++)
    if (strcmp(descr, dtype_descr[t]) == 0) return t;
  return -1;
}

int kda_npy_parse_header(const unsigned char *buf, size_t len, const char *what,
                         kda_array_info *info, size_t *data_offset, char *err, size_t errlen) {
  size_t prefix;
  uint64_t hlen;
  npy_dict d;
  npy_scan s;
  int32_t dtype;
  int st;
  if (buf == NULL || len < NPY_MAGIC_LEN + 4)
    return fail(KDA_EFORMAT, err, errlen, what, "truncated .npy header");
  if (memcmp(buf, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
    return fail(KDA_EFORMAT, err, errlen, what, "not a .npy array (bad magic)");
  if (buf[7] != 0 || buf[6] < 1 || buf[6] > 3)
    return fail(KDA_EFORMAT, err, errlen, what, "unsupported .npy format version %u.%u",
                (unsigned)buf[6], (unsigned)buf[7]);
  if (buf[6] == 1) {
    prefix = 10;
    hlen = (uint64_t)buf[8] | (uint64_t)buf[9] << 8;
  } else {
    if (len < 12) return fail(KDA_EFORMAT, err, errlen, what, "truncated .npy header");
    prefix = 12;
    hlen = (uint64_t)buf[8] | (uint64_t)buf[9] << 8 | (uint64_t)buf[10] << 16 |
           (uint64_t)buf[11] << 24;
  }
  if (hlen > len - prefix)
    return fail(KDA_EFORMAT, err, errlen, what, "truncated .npy header (%llu bytes, have %llu)",
                (unsigned long long)hlen, (unsigned long long)(len - prefix));
  memset(&d, 0, sizeof d);
  s.p = buf + prefix;
  s.end = s.p + hlen;
  if ((st = scan_dict(&s, what, &d, err, errlen)) != KDA_OK) return st;
  if ((dtype = descr_dtype(d.descr)) < 0) {
    char shown[NPY_MAX_STRING + 1];
    printable(d.descr, d.descr_len, shown, sizeof shown);
    return fail(KDA_EDTYPE, err, errlen, what,
                "unsupported dtype '%s' (supported: '<f8' '<f4' '<f2' '<i8' '<i4')", shown);
  }
  if (d.fortran)
    return fail(KDA_EFORMAT, err, errlen, what, "fortran_order arrays are not supported");
  if ((st = fill_sizes(&d, dtype, what, info, err, errlen)) != KDA_OK) return st;
  if (info->nbytes > UINT64_MAX - (prefix + hlen))
    return fail(KDA_ESHAPE, err, errlen, what, "array size overflows (shape too large)");
  if (data_offset != NULL) *data_offset = (size_t)(prefix + hlen);
  return KDA_OK;
}

/* ---- The header as numpy writes it (numpy/lib/_format_impl.py, _write_array_header):
 * the sorted dict, 21 - len(repr(shape[0])) spare spaces when ndim > 0, then spaces and a
 * newline so that magic + length field + header is a multiple of 64 (a full 64 when it
 * already was). */
size_t kda_npy_format_header(const kda_array_info *info, unsigned char *buf, size_t cap) {
  char dict[64 + KDA_NPY_MAX_NDIM * 24 + NPY_GROWTH_DIGITS];
  size_t n, prefix, hlen, pad, total;
  int k;
  if (info == NULL || kda_dtype_descr(info->dtype) == NULL || info->ndim < 0 ||
      info->ndim > KDA_NPY_MAX_NDIM)
    return 0;
  n = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                       kda_dtype_descr(info->dtype));
  for (int32_t i = 0; i < info->ndim; i++) {
    if (info->shape[i] < 0) return 0;
    n += (size_t)snprintf(dict + n, sizeof dict - n, i ? ", %lld" : "%lld",
                          (long long)info->shape[i]);
  }
  n += (size_t)snprintf(dict + n, sizeof dict - n, "%s), }", info->ndim == 1 ? "," : "");
  if (info->ndim > 0) {
    k = snprintf(NULL, 0, "%lld", (long long)info->shape[0]);
    for (; k < NPY_GROWTH_DIGITS; k++) dict[n++] = ' ';
  }
  /* Version 1.0 has a 16-bit length; 2.0 a 32-bit one (never needed for <= 8 dimensions). */
  prefix = 10;
  hlen = n + 1;
  pad = NPY_ALIGN - (prefix + hlen) % NPY_ALIGN;
  if (hlen + pad > 0xffff) {
    prefix = 12;
    pad = NPY_ALIGN - (prefix + hlen) % NPY_ALIGN;
  }
  total = prefix + hlen + pad;
  if (buf == NULL || cap < total) return 0;
  memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
  buf[6] = prefix == 10 ? 1 : 2;
  buf[7] = 0;
  for (size_t i = 0; i < prefix - 8; i++) buf[8 + i] = (unsigned char)((hlen + pad) >> (8 * i));
  memcpy(buf + prefix, dict, n);
  memset(buf + prefix + n, ' ', pad);
  buf[total - 1] = '\n';
  return total;
}

/* ---- Rounding (SPEC.md §10.3).  x = M * 2^E exactly (M < 2^53); the target format with p
 * significand bits and normal range [2^emin, 2^(emax+1)) has quantum 2^q at x, where
 * q = max(floor(log2|x|), emin) - p + 1.  M is rounded to a multiple of 2^(q - E) with ties
 * to even in integer arithmetic, so the result does not depend on the FPU rounding mode and
 * there is exactly one rounding. */
static double round_format(double x, int p, int emin, int emax) {
  uint64_t bits, M, r, rem, half;
  int e, E, top, q, shift;
  double y;
  if (x != x || x == 0 || isinf(x)) return x;
  memcpy(&bits, &x, sizeof bits);
  e = (int)((bits >> 52) & 0x7ff);
  M = bits & 0xfffffffffffffULL;
  if (e == 0) {
    E = -1074;
  } else {
    M |= 1ULL << 52;
    E = e - 1075;
  }
  top = 63 - __builtin_clzll(M); /* floor(log2 M) */
  q = (top + E > emin ? top + E : emin) - p + 1;
  shift = q - E;
  if (shift <= 0) {
    r = M; /* already a multiple of the quantum */
    q = E;
  } else if (shift > 54) {
    r = 0; /* below a quarter of the quantum */
  } else {
    r = M >> shift;
    rem = M & ((1ULL << shift) - 1);
    half = 1ULL << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
  }
  y = ldexp((double)r, q); /* exact: r < 2^(p+1) */
  if (y >= ldexp(1.0, emax + 1)) y = INFINITY;
  return signbit(x) ? -y : y;
}

float kda_round_f32(double x) {
  return (float)round_format(x, 24, -126, 127);
}

double kda_round_bf16(double x) {
  return round_format(x, 8, -126, 127);
}

double kda_round_f16(double x) {
  return round_format(x, 11, -14, 15);
}

uint16_t kda_f16_bits(double x) {
  double y = kda_round_f16(x), a = fabs(y);
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  if (x != x) return (uint16_t)(sign | 0x7e00);
  if (isinf(a)) return (uint16_t)(sign | 0x7c00);
  if (a < 0x1p-14) return (uint16_t)(sign | (uint16_t)(a * 0x1p24)); /* subnormal or zero */
  {
    int ex = ilogb(a);
    uint16_t mant = (uint16_t)(ldexp(a, -ex) * 1024.0 - 1024.0);
    return (uint16_t)(sign | (uint16_t)((ex + 15) << 10) | mant);
  }
}

double kda_f16_value(uint16_t bits) {
  int ex = (bits >> 10) & 0x1f;
  int mant = bits & 0x3ff;
  double v;
  if (ex == 0x1f)
    v = mant ? NAN : INFINITY;
  else if (ex == 0)
    v = ldexp((double)mant, -24);
  else
    v = ldexp((double)(mant + 1024), ex - 25);
  return (bits & 0x8000) ? -v : v;
}

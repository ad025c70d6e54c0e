/* check_npz.c: tests of the .npz container, the .npy header parser and the rounding helpers.
 * SPDX-License-Identifier: MIT
 *
 * Run from the repository root (fixtures are read from vectors/tests/fixtures/, written by
 * make_fixtures.py with numpy).  Bad files are made by mutating good ones in a temporary
 * directory under /tmp, which is removed afterwards.  When KDA_INTEROP_DIR is set, the
 * interop test also leaves its C-written archives there for vectors/tests/numpy_interop.py.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "kda_npz.h"
#include "kda_test.h"

#define FIX "vectors/tests/fixtures/"

/* ---- Temporary directories: the base is made and removed by the parent process (unchecked
 * fixture), so it is cleaned up even when a forked test fails. */

static void base_setup(void) { kda_test_tmpdir_make("check-npz"); }
static void base_teardown(void) { kda_test_tmpdir_remove(); }

/* A fresh empty directory for one test; returns a static buffer. */
static const char *fresh_dir(void) {
  static char dir[128];
  snprintf(dir, sizeof dir, "%s/tXXXXXX", kda_test_tmpdir);
  ck_assert_ptr_nonnull(mkdtemp(dir));
  return dir;
}

/* Offset of the first occurrence of pat in buf (which must occur). */
static size_t find(const unsigned char *buf, size_t len, const void *pat, size_t plen) {
  for (size_t i = 0; i + plen <= len; i++)
    if (memcmp(buf + i, pat, plen) == 0) return i;
  ck_abort_msg("pattern of %zu bytes not found", plen);
  return 0;
}

/* Asserts a status and that the message contains each of up to two substrings. */
static void expect(int st, int want, const char *err, const char *s1, const char *s2) {
  ck_assert_msg(st == want, "status %d (%s), expected %d", st, err, want);
  if (s1 != NULL) ck_assert_msg(strstr(err, s1) != NULL, "message '%s' lacks '%s'", err, s1);
  if (s2 != NULL) ck_assert_msg(strstr(err, s2) != NULL, "message '%s' lacks '%s'", err, s2);
}

static uint64_t f64_bits(double d) {
  uint64_t b;
  memcpy(&b, &d, 8);
  return b;
}

static uint32_t f32_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

/* A zip with raw members, made with libzip (for members whose .npy bytes are hand-made). */
static void write_raw_zip(const char *path, int n, const char *const *names,
                          const void *const *data, const size_t *lens) {
  int ze;
  zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &ze);
  ck_assert_ptr_nonnull(za);
  for (int i = 0; i < n; i++) {
    zip_source_t *s = zip_source_buffer(za, data[i], lens[i], 0);
    zip_int64_t idx;
    ck_assert_ptr_nonnull(s);
    idx = zip_file_add(za, names[i], s, 0);
    ck_assert_int_ge(idx, 0);
    zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0);
  }
  ck_assert_int_eq(zip_close(za), 0);
}

/* A .npy member: version-1.0 prefix, the dict text as given, then ndata zero bytes. */
static size_t make_npy(unsigned char *buf, size_t cap, const char *dict, size_t ndata) {
  size_t h = strlen(dict);
  ck_assert_uint_le(10 + h + ndata, cap);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)(h & 0xff);
  buf[9] = (unsigned char)(h >> 8);
  memcpy(buf + 10, dict, h);
  memset(buf + 10 + h, 0, ndata);
  return 10 + h + ndata;
}

/* Parses a header made from dict (exactly sized heap buffer, so ASan sees overreads). */
static int parse_dict(const char *dict, int version, kda_array_info *info, size_t *off, char *err) {
  size_t h = strlen(dict), pre = version == 1 ? 10 : 12;
  unsigned char *buf = malloc(pre + h + 1);
  int st;
  ck_assert_ptr_nonnull(buf);
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)version;
  buf[7] = 0;
  for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (unsigned char)(h >> (8 * i));
  memcpy(buf + pre, dict, h);
  st = kda_npy_parse_header(buf, pre + h, "hdr", info, off, err, KDA_ERRLEN);
  free(buf);
  return st;
}

/* ================================================================ .npy header */

START_TEST(test_dtype_table) {
  ck_assert_uint_eq(kda_dtype_size(KDA_DTYPE_F64), 8);
  ck_assert_uint_eq(kda_dtype_size(KDA_DTYPE_F32), 4);
  ck_assert_uint_eq(kda_dtype_size(KDA_DTYPE_F16), 2);
  ck_assert_uint_eq(kda_dtype_size(KDA_DTYPE_I64), 8);
  ck_assert_uint_eq(kda_dtype_size(KDA_DTYPE_I32), 4);
  ck_assert_uint_eq(kda_dtype_size(-1), 0);
  ck_assert_uint_eq(kda_dtype_size(5), 0);
  ck_assert_str_eq(kda_dtype_descr(KDA_DTYPE_F64), "<f8");
  ck_assert_str_eq(kda_dtype_descr(KDA_DTYPE_F16), "<f2");
  ck_assert_str_eq(kda_dtype_descr(KDA_DTYPE_I32), "<i4");
  ck_assert_ptr_null(kda_dtype_descr(7));
}
END_TEST

/* Our header bytes equal numpy's for the seed files numpy wrote (version 1.0 ones). */
START_TEST(test_format_matches_numpy) {
  static const char *const files[] = {"f8_2x3_v1.npy", "f4_scalar_v1.npy", "i4_4d_v1.npy"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[256], err[KDA_ERRLEN];
    size_t len, off, hl;
    unsigned char *buf, out[512];
    kda_array_info info;
    snprintf(path, sizeof path, FIX "fuzz_npy/%s", files[i]);
    buf = kda_test_slurp(path, &len);
    ck_assert_int_eq(kda_npy_parse_header(buf, len, path, &info, &off, err, sizeof err), KDA_OK);
    ck_assert_uint_eq(off % 64, 0);
    hl = kda_npy_format_header(&info, out, sizeof out);
    ck_assert_uint_eq(hl, off);
    ck_assert_mem_eq(out, buf, hl);
    ck_assert_uint_eq(kda_npy_format_header(&info, out, hl - 1), 0); /* too small */
    free(buf);
  }
}
END_TEST

START_TEST(test_format_shapes) {
  kda_array_info info, back;
  unsigned char out[512];
  char err[KDA_ERRLEN];
  size_t hl, off;
  memset(&info, 0, sizeof info);
  info.dtype = KDA_DTYPE_F16;
  info.ndim = 1;
  info.shape[0] = 3;
  hl = kda_npy_format_header(&info, out, sizeof out);
  ck_assert_uint_eq(hl % 64, 0);
  ck_assert_ptr_nonnull(strstr((char *)out + 10, "'shape': (3,), }"));
  ck_assert_int_eq(out[hl - 1], '\n');
  ck_assert_int_eq(kda_npy_parse_header(out, hl, NULL, &back, &off, err, sizeof err), KDA_OK);
  ck_assert_uint_eq(off, hl);
  ck_assert_int_eq(back.ndim, 1);
  ck_assert_int_eq(back.shape[0], 3);
  info.ndim = 0;
  hl = kda_npy_format_header(&info, out, sizeof out);
  ck_assert_ptr_nonnull(strstr((char *)out + 10, "'shape': (), }"));
  info.ndim = KDA_NPY_MAX_NDIM;
  for (int i = 0; i < KDA_NPY_MAX_NDIM; i++) info.shape[i] = INT64_MAX / 4 + i;
  info.dtype = KDA_DTYPE_I32;
  hl = kda_npy_format_header(&info, out, sizeof out);
  ck_assert_uint_gt(hl, 0); /* the widest header still fits version 1.0 */
  ck_assert_int_eq(out[6], 1);
  info.dtype = 9;
  ck_assert_uint_eq(kda_npy_format_header(&info, out, sizeof out), 0);
  info.dtype = KDA_DTYPE_F64;
  info.ndim = 9;
  ck_assert_uint_eq(kda_npy_format_header(&info, out, sizeof out), 0);
}
END_TEST

/* Valid spellings of the dictionary: key order, quotes, whitespace, trailing commas. */
START_TEST(test_parse_variants) {
  static const struct {
    const char *dict;
    int32_t dtype, ndim;
    int64_t d0, d1;
  } ok[] = {
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", KDA_DTYPE_F64, 2, 2, 3},
      {"{'shape': (2,3), 'descr': '<f4', 'fortran_order': False}", KDA_DTYPE_F32, 2, 2, 3},
      {"{\"fortran_order\":False,\"shape\":(7,),\"descr\":\"<f2\"}\n", KDA_DTYPE_F16, 1, 7, 0},
      {"  {\n 'descr' :\t'<i8' ,\r\n 'fortran_order' : False ,\n 'shape' : ( ) , }   \n",
       KDA_DTYPE_I64, 0, 0, 0},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': ( 0 , 5 , ), }", KDA_DTYPE_I32, 2, 0, 5},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (-0,)}", KDA_DTYPE_F64, 1, 0, 0},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (1152921504606846975,)}",
       KDA_DTYPE_F64, 1, 1152921504606846975LL, 0},
  };
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
    for (int v = 1; v <= 3; v++) {
      kda_array_info info;
      size_t off;
      char err[KDA_ERRLEN] = "";
      int st = parse_dict(ok[i].dict, v, &info, &off, err);
      ck_assert_msg(st == KDA_OK, "case %zu v%d: %s", i, v, err);
      ck_assert_int_eq(info.dtype, ok[i].dtype);
      ck_assert_int_eq(info.ndim, ok[i].ndim);
      if (ok[i].ndim > 0) ck_assert_int_eq(info.shape[0], ok[i].d0);
      if (ok[i].ndim > 1) ck_assert_int_eq(info.shape[1], ok[i].d1);
      ck_assert_uint_eq(off, (v == 1 ? 10 : 12) + strlen(ok[i].dict));
      ck_assert_uint_eq(info.nbytes, info.count * kda_dtype_size(info.dtype));
    }
}
END_TEST

/* Every malformed or unsupported header: status and message. */
START_TEST(test_parse_rejects) {
  static const struct {
    const char *dict;
    int status;
    const char *text;
  } bad[] = {
      {"{'descr': '<c16', 'fortran_order': False, 'shape': (1,)}", KDA_EDTYPE, "'<c16'"},
      {"{'descr': '>f8', 'fortran_order': False, 'shape': (1,)}", KDA_EDTYPE, "'>f8'"},
      {"{'descr': '|b1', 'fortran_order': False, 'shape': (1,)}", KDA_EDTYPE, "'|b1'"},
      {"{'descr': '|f8', 'fortran_order': False, 'shape': (1,)}", KDA_EDTYPE, "'|f8'"},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (1,)}", KDA_EDTYPE, "'<u2'"},
      {"{'descr': 'float64', 'fortran_order': False, 'shape': (1,)}", KDA_EDTYPE, "'float64'"},
      {"{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,)}", KDA_EDTYPE,
       "structured"},
      {"{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3)}", KDA_EFORMAT,
       "fortran_order arrays are not supported"},
      {"{'descr': '<f8', 'fortran_order': True , 'shape': (2, 3)}", KDA_EFORMAT,
       "fortran_order arrays are not supported"},
      {"{'descr': '<f8', 'fortran_order': 0, 'shape': (2,)}", KDA_EFORMAT, "True or False"},
      {"{'descr': '<f8', 'fortran_order': false, 'shape': (2,)}", KDA_EFORMAT, "True or False"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2)}",
       KDA_ESHAPE, "overflow"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (1152921504606846976,)}", KDA_ESHAPE,
       "overflow"},
      {"{'descr': '<f2', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4)}",
       KDA_ESHAPE, "overflow"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,)}", KDA_ESHAPE,
       "too large"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (9223372036854775808,)}", KDA_ESHAPE,
       "too large"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (-1,)}", KDA_ESHAPE, "negative"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, -3)}", KDA_ESHAPE, "negative"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", KDA_ESHAPE,
       "more than 8"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (3)}", KDA_EFORMAT, "not a tuple"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': [3]}", KDA_EFORMAT, "not a tuple"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (,)}", KDA_EFORMAT, "malformed shape"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (3 4)}", KDA_EFORMAT, "malformed shape"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (03,)}", KDA_EFORMAT, "malformed shape"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (+3,)}", KDA_EFORMAT, "malformed shape"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (0x3,)}", KDA_EFORMAT, "malformed shape"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (3,)", KDA_EFORMAT, "malformed header"},
      {"{'descr': '<f8', 'fortran_order': False}", KDA_EFORMAT, "lacks key 'shape'"},
      {"{'shape': (), 'fortran_order': False}", KDA_EFORMAT, "lacks key 'descr'"},
      {"{'descr': '<f8', 'shape': ()}", KDA_EFORMAT, "lacks key 'fortran_order'"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (), 'x': 1}", KDA_EFORMAT,
       "unexpected key 'x'"},
      {"{'descr': '<f8', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", KDA_EFORMAT,
       "duplicate key 'descr'"},
      {"{'descr': '<f8' 'fortran_order': False, 'shape': ()}", KDA_EFORMAT, "malformed header"},
      {"{'descr': '<f8',, 'fortran_order': False, 'shape': ()}", KDA_EFORMAT, "malformed header"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': ()} x", KDA_EFORMAT, "junk"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': ()} # c", KDA_EFORMAT, "junk"},
      {"{'descr': '<f8\\x', 'fortran_order': False, 'shape': ()}", KDA_EFORMAT, "'descr'"},
      {"{'descr': '<f8, 'fortran_order': False, 'shape': ()}", KDA_EFORMAT, "malformed"},
      {"{'descr': b'<f8', 'fortran_order': False, 'shape': ()}", KDA_EFORMAT, "'descr'"},
      {"{'descr' '<f8', 'fortran_order': False, 'shape': ()}", KDA_EFORMAT, "malformed header"},
      {"['descr', '<f8']", KDA_EFORMAT, "not a dictionary"},
      {"", KDA_EFORMAT, "not a dictionary"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    kda_array_info info;
    size_t off;
    char err[KDA_ERRLEN] = "";
    int st = parse_dict(bad[i].dict, 1, &info, &off, err);
    ck_assert_msg(st == bad[i].status, "case %zu (%s): status %d, want %d: %s", i, bad[i].dict, st,
                  bad[i].status, err);
    ck_assert_msg(strstr(err, bad[i].text) != NULL, "case %zu: '%s' lacks '%s'", i, err,
                  bad[i].text);
    ck_assert_msg(strncmp(err, "hdr: ", 5) == 0, "case %zu: '%s' does not name the member", i, err);
  }
}
END_TEST

START_TEST(test_parse_prefix) {
  unsigned char buf[256];
  char err[KDA_ERRLEN];
  kda_array_info info;
  size_t off;
  const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,)}";
  size_t n = make_npy(buf, sizeof buf, dict, 0);
  ck_assert_int_eq(kda_npy_parse_header(buf, n, "m", &info, &off, err, sizeof err), KDA_OK);
  for (size_t cut = 0; cut < n; cut++)
    expect(kda_npy_parse_header(buf, cut, "m", &info, &off, err, sizeof err), KDA_EFORMAT, err,
           "m: ", "truncated");
  buf[5] = 'X';
  expect(kda_npy_parse_header(buf, n, "m", &info, &off, err, sizeof err), KDA_EFORMAT, err,
         "bad magic", NULL);
  buf[5] = 'Y';
  buf[6] = 4;
  expect(kda_npy_parse_header(buf, n, "m", &info, &off, err, sizeof err), KDA_EFORMAT, err,
         "version 4.0", NULL);
  buf[6] = 1;
  buf[7] = 1;
  expect(kda_npy_parse_header(buf, n, "m", &info, &off, err, sizeof err), KDA_EFORMAT, err,
         "version 1.1", NULL);
  buf[7] = 0;
  buf[10 + 3] = '\0'; /* a NUL inside the dictionary */
  expect(kda_npy_parse_header(buf, n, "m", &info, &off, err, sizeof err), KDA_EFORMAT, err,
         "malformed", NULL);
  expect(kda_npy_parse_header(NULL, 0, NULL, &info, &off, err, sizeof err), KDA_EFORMAT, err,
         ".npy header: truncated", NULL);
  /* err may be NULL or tiny. */
  ck_assert_int_eq(kda_npy_parse_header(buf, 3, "m", &info, &off, NULL, 0), KDA_EFORMAT);
  memset(err, 'x', sizeof err);
  ck_assert_int_eq(kda_npy_parse_header(buf, 3, "member", &info, &off, err, 5), KDA_EFORMAT);
  ck_assert_str_eq(err, "memb");
}
END_TEST

/* ================================================================ rounding */

static uint64_t g_rng;
static uint64_t rnd(void) {
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* A random double spread over binades from 2^-160 to 2^140, both signs. */
static double rnd_double(void) {
  uint64_t r = rnd();
  double m = 1.0 + (double)(r >> 12) * 0x1p-52;
  int e = (int)(rnd() % 301) - 160;
  return ldexp((r & 1) ? -m : m, e);
}

/* Sorted table of all finite non-negative values of a 16-bit format, for an exhaustive-search
 * oracle of nearest-even rounding. */
static double g_tab[0x7f80];
static int g_ntab;

static void table_f16(void) {
  g_ntab = 0;
  for (uint32_t b = 0; b < 0x7c00; b++) g_tab[g_ntab++] = kda_f16_value((uint16_t)b);
}

static void table_bf16(void) {
  g_ntab = 0;
  for (uint32_t b = 0; b < 0x7f80; b++) {
    uint32_t u = b << 16;
    float f;
    memcpy(&f, &u, 4);
    g_tab[g_ntab++] = f;
  }
}

/* Nearest table value to |x| with ties to the even index (= even significand); inf beyond the
 * last value's half-ulp (the next power of two, index ntab, would be even). */
static double oracle(double x, double top) {
  double a = fabs(x), r;
  int lo = 0, hi = g_ntab - 1;
  if (a >= top) {
    r = INFINITY;
  } else if (a >= g_tab[hi]) {
    double mid = g_tab[hi] + (top - g_tab[hi]) / 2;
    r = a < mid ? g_tab[hi] : (a > mid ? INFINITY : ((hi & 1) ? INFINITY : g_tab[hi]));
  } else {
    while (hi - lo > 1) {
      int m = (lo + hi) / 2;
      if (g_tab[m] <= a) lo = m;
      else hi = m;
    }
    {
      double mid = g_tab[lo] + (g_tab[hi] - g_tab[lo]) / 2;
      r = a < mid ? g_tab[lo] : a > mid ? g_tab[hi] : ((lo & 1) ? g_tab[hi] : g_tab[lo]);
    }
  }
  return signbit(x) ? -r : r;
}

START_TEST(test_f16_exhaustive_bits) {
  for (uint32_t b = 0; b < 0x10000; b++) {
    double v = kda_f16_value((uint16_t)b);
    if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff)) {
      ck_assert_msg(isnan(v), "bits %04x", b);
      ck_assert_uint_eq(kda_f16_bits(v) & 0x7e00, 0x7e00);
      continue;
    }
    ck_assert_msg(kda_f16_bits(v) == b, "bits %04x -> %a -> %04x", b, v, kda_f16_bits(v));
    ck_assert_msg(f64_bits(kda_round_f16(v)) == f64_bits(v), "bits %04x not fixed", b);
  }
}
END_TEST

START_TEST(test_f16_edges) {
  ck_assert(kda_round_f16(65504.0) == 65504.0);
  ck_assert(kda_round_f16(65519.999) == 65504.0);
  ck_assert(isinf(kda_round_f16(65520.0)));  /* the tie above the largest value overflows */
  ck_assert(isinf(kda_round_f16(-1e300)) && kda_round_f16(-1e300) < 0);
  ck_assert_uint_eq(kda_f16_bits(65520.0), 0x7c00);
  ck_assert_uint_eq(kda_f16_bits(-INFINITY), 0xfc00);
  ck_assert_uint_eq(kda_f16_bits(NAN) & 0x7e00, 0x7e00);
  ck_assert(isnan(kda_round_f16(NAN)));
  ck_assert(kda_round_f16(0x1p-25) == 0 && !signbit(kda_round_f16(0x1p-25))); /* tie to 0 */
  ck_assert(kda_round_f16(0x1.0000000000001p-25) == 0x1p-24);
  ck_assert(kda_round_f16(0x1.8p-24) == 0x1p-23); /* tie between 1 and 2 quanta: even (2) */
  ck_assert(kda_round_f16(-0x1p-30) == 0 && signbit(kda_round_f16(-0x1p-30)));
  ck_assert_uint_eq(kda_f16_bits(-0.0), 0x8000);
  ck_assert_uint_eq(kda_f16_bits(0x1p-24), 0x0001);
  ck_assert_uint_eq(kda_f16_bits(0x1p-14), 0x0400);
  ck_assert_uint_eq(kda_f16_bits(0x1.ff8p-15), 0x03ff); /* the largest subnormal */
  ck_assert_uint_eq(kda_f16_bits(0x1.ffcp-15), 0x0400); /* tie: rounds up into the normals */
  ck_assert(kda_round_f16(0.1) == 0.0999755859375);
  /* No double rounding: 1 + 2^-11 + 2^-40 is just above the tie of 1 and 1 + 2^-10; through
   * float32 first it would become the tie and round to 1. */
  ck_assert(kda_round_f16(1 + 0x1p-11 + 0x1p-40) == 1 + 0x1p-10);
  ck_assert(kda_round_f16(1 + 0x1p-11) == 1);
  ck_assert(kda_round_f16(1 + 0x1p-11 + 0x1p-10) == 1 + 0x1p-9);
  ck_assert(kda_round_f16(0x1p-1074) == 0);
}
END_TEST

START_TEST(test_f16_random_oracle) {
  const uint64_t seed = 20240611;
  g_rng = seed;
  table_f16();
  for (int i = 0; i < 200000; i++) {
    double x = rnd_double();
    if (i % 3 == 0) { /* near a midpoint */
      int k = (int)(rnd() % (uint64_t)(g_ntab - 1));
      x = g_tab[k] + (g_tab[k + 1] - g_tab[k]) / 2;
      x = (i % 2) ? x : nextafter(x, (rnd() & 1) ? INFINITY : 0);
    }
    ck_assert_msg(f64_bits(kda_round_f16(x)) == f64_bits(oracle(x, 65536.0)),
                  "seed %llu i %d x %a: %a vs oracle %a", (unsigned long long)seed, i, x,
                  kda_round_f16(x), oracle(x, 65536.0));
  }
}
END_TEST

START_TEST(test_bf16) {
  const uint64_t seed = 77;
  ck_assert(kda_round_bf16(1 + 0x1p-8) == 1);
  ck_assert(kda_round_bf16(1 + 0x1p-7 + 0x1p-8) == 1 + 0x1p-6);
  ck_assert(kda_round_bf16(1 + 0x1p-8 + 0x1p-40) == 1 + 0x1p-7);
  ck_assert(kda_round_bf16(0x1.fep127) == 0x1.fep127);
  ck_assert(isinf(kda_round_bf16(0x1.ffp127)));
  ck_assert(kda_round_bf16(0x1.fefffffffffffp127) == 0x1.fep127);
  ck_assert(kda_round_bf16(0x1p-133) == 0x1p-133);
  ck_assert(kda_round_bf16(0x1p-134) == 0);
  ck_assert(kda_round_bf16(0x1.0000000000001p-134) == 0x1p-133);
  ck_assert(isnan(kda_round_bf16(NAN)));
  ck_assert(signbit(kda_round_bf16(-0.0)));
  g_rng = seed;
  table_bf16();
  for (int i = 0; i < 200000; i++) {
    double x = rnd_double();
    ck_assert_msg(f64_bits(kda_round_bf16(x)) == f64_bits(oracle(x, 0x1p128)),
                  "seed %llu i %d x %a: %a vs oracle %a", (unsigned long long)seed, i, x,
                  kda_round_bf16(x), oracle(x, 0x1p128));
  }
}
END_TEST

/* kda_round_f32 agrees with the C conversion (correctly rounded in the default mode). */
START_TEST(test_f32) {
  const uint64_t seed = 12345;
  ck_assert(kda_round_f32(FLT_MAX) == FLT_MAX);
  ck_assert(isinf(kda_round_f32(0x1.ffffffp127)));
  ck_assert(kda_round_f32(0x1.fffffefffffffp127) == FLT_MAX);
  ck_assert(kda_round_f32(0x1p-150) == 0);
  ck_assert(kda_round_f32(0x1.0000000000001p-150) == 0x1p-149f);
  ck_assert(isnan(kda_round_f32(NAN)));
  ck_assert(signbit(kda_round_f32(-0.0)));
  ck_assert(kda_round_f32(1 + 0x1p-24 + 0x1p-50) == 1 + 0x1p-23f); /* no double rounding */
  g_rng = seed;
  for (int i = 0; i < 500000; i++) {
    double x = rnd_double();
    ck_assert_msg(f32_bits(kda_round_f32(x)) == f32_bits((float)x), "seed %llu i %d x %a",
                  (unsigned long long)seed, i, x);
  }
}
END_TEST

/* ================================================================ round trips */

/* Fills n elements of dtype with a pattern that uses the whole range of the type. */
static void fill(int32_t dtype, void *p, uint64_t n, uint64_t salt) {
  for (uint64_t i = 0; i < n; i++) {
    double base = ((double)((i * 37 + salt) % 101) - 50) / 8;
    switch (dtype) {
    case KDA_DTYPE_F64: ((double *)p)[i] = base + 1.0 / 3; break;
    case KDA_DTYPE_F32: ((float *)p)[i] = (float)(base - 1.0 / 3); break;
    case KDA_DTYPE_F16: ((uint16_t *)p)[i] = kda_f16_bits(base); break;
    case KDA_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)(i * 1000000007u) - 4000000000LL; break;
    default: ((int32_t *)p)[i] = (int32_t)(i * 7919u) - 100000; break;
    }
  }
}

static double elem_f64(int32_t dtype, const void *p, uint64_t i) {
  switch (dtype) {
  case KDA_DTYPE_F64: return ((const double *)p)[i];
  case KDA_DTYPE_F32: return ((const float *)p)[i];
  case KDA_DTYPE_F16: return kda_f16_value(((const uint16_t *)p)[i]);
  case KDA_DTYPE_I64: return (double)((const int64_t *)p)[i];
  default: return ((const int32_t *)p)[i];
  }
}

static const struct {
  int32_t ndim;
  int64_t shape[4];
} g_shapes[] = {{0, {0}}, {1, {5}}, {4, {2, 1, 3, 2}}, {1, {0}}, {3, {3, 0, 2}}, {2, {17, 33}}};
#define NSHAPES ((int)(sizeof g_shapes / sizeof *g_shapes))

START_TEST(test_roundtrip_all) {
  const char *dir = fresh_dir();
  char *path = kda_test_join(dir, "rt.npz"), err[KDA_ERRLEN];
  kda_npz_writer *w;
  kda_npz *z;
  void *data[5][NSHAPES];
  uint64_t count[NSHAPES];
  char name[5][NSHAPES][32];
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, "{\"k\": [1, 2]}", err, sizeof err), KDA_OK);
  for (int t = 0; t < 5; t++)
    for (int s = 0; s < NSHAPES; s++) {
      count[s] = 1;
      for (int d = 0; d < g_shapes[s].ndim; d++) count[s] *= (uint64_t)g_shapes[s].shape[d];
      data[t][s] = malloc(count[s] * 8 + 1);
      fill(t, data[t][s], count[s], (uint64_t)s);
      snprintf(name[t][s], sizeof name[t][s], "a%d_%d", t, s);
      ck_assert_int_eq(kda_npz_writer_add(w, name[t][s], t, g_shapes[s].ndim, g_shapes[s].shape,
                                          data[t][s], err, sizeof err), KDA_OK);
    }
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_test_count_entries(dir), 1);

  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  ck_assert_str_eq(kda_npz_path(z), path);
  ck_assert_int_eq(kda_npz_count(z), 5 * NSHAPES);
  ck_assert_int_eq(kda_npz_verify(z, err, sizeof err), KDA_OK);
  for (int t = 0; t < 5; t++)
    for (int s = 0; s < NSHAPES; s++) {
      kda_array_info info;
      void *back = malloc(count[s] * 8 + 1);
      double *f;
      ck_assert_str_eq(kda_npz_name(z, t * NSHAPES + s), name[t][s]);
      ck_assert(kda_npz_has(z, name[t][s]));
      ck_assert_int_eq(kda_npz_info(z, name[t][s], &info, err, sizeof err), KDA_OK);
      ck_assert_int_eq(info.dtype, t);
      ck_assert_int_eq(info.ndim, g_shapes[s].ndim);
      for (int d = 0; d < info.ndim; d++) ck_assert_int_eq(info.shape[d], g_shapes[s].shape[d]);
      ck_assert_uint_eq(info.count, count[s]);
      ck_assert_uint_eq(info.nbytes, count[s] * kda_dtype_size(t));
      /* Native read: identical bytes.  F16 is read as F32 and compared by value. */
      if (t == KDA_DTYPE_F16) {
        ck_assert_int_eq(kda_npz_read(z, name[t][s], KDA_DTYPE_F32, back, count[s], err,
                                      sizeof err), KDA_OK);
        for (uint64_t i = 0; i < count[s]; i++)
          ck_assert(((float *)back)[i] == (float)elem_f64(t, data[t][s], i));
      } else {
        ck_assert_int_eq(kda_npz_read(z, name[t][s], t == KDA_DTYPE_I32 ? KDA_DTYPE_I64 : t,
                                      back, count[s], err, sizeof err), KDA_OK);
        if (t == KDA_DTYPE_I32) {
          for (uint64_t i = 0; i < count[s]; i++)
            ck_assert_int_eq(((int64_t *)back)[i], ((int32_t *)data[t][s])[i]);
        } else if (count[s] > 0) {
          ck_assert_mem_eq(back, data[t][s], count[s] * kda_dtype_size(t));
        }
      }
      /* Every dtype loads as float64 exactly. */
      ck_assert_int_eq(kda_npz_load_f64(z, name[t][s], &info, &f, err, sizeof err), KDA_OK);
      ck_assert_ptr_nonnull(f);
      for (uint64_t i = 0; i < count[s]; i++)
        ck_assert(f64_bits(f[i]) == f64_bits(elem_f64(t, data[t][s], i)));
      free(f);
      if (t == KDA_DTYPE_I64 || t == KDA_DTYPE_I32) {
        int64_t *iv;
        ck_assert_int_eq(kda_npz_load_i64(z, name[t][s], NULL, &iv, err, sizeof err), KDA_OK);
        for (uint64_t i = 0; i < count[s]; i++)
          ck_assert_int_eq(iv[i], (int64_t)elem_f64(t, data[t][s], i));
        free(iv);
      }
      free(back);
      free(data[t][s]);
    }
  {
    char *blob;
    size_t len;
    ck_assert_int_eq(kda_npz_read_blob(z, "manifest.json", &blob, &len, err, sizeof err), KDA_OK);
    ck_assert_str_eq(blob, "{\"k\": [1, 2]}");
    ck_assert_uint_eq(len, strlen(blob));
    free(blob);
  }
  ck_assert(!kda_npz_has(z, "manifest.json"));
  ck_assert_ptr_null(kda_npz_name(z, -1));
  ck_assert_ptr_null(kda_npz_name(z, 5 * NSHAPES));
  kda_npz_close(z);
}
END_TEST

START_TEST(test_add_f64_rounding) {
  const char *dir = fresh_dir();
  char *path = kda_test_join(dir, "r.npz"), err[KDA_ERRLEN];
  const double x[4] = {0.1, 1 + 0x1p-11 + 0x1p-40, -65520.0, 0x1p-26};
  const double ints[3] = {-2147483648.0, 2147483647.0, -0.0};
  int64_t n4 = 4, n3 = 3;
  kda_npz_writer *w;
  kda_npz *z;
  float f[4];
  double d[4];
  int64_t iv[3];
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "f4", KDA_DTYPE_F32, 1, &n4, x, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "f2", KDA_DTYPE_F16, 1, &n4, x, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "f8", KDA_DTYPE_F64, 1, &n4, x, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "i4", KDA_DTYPE_I32, 1, &n3, ints,
                                          err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "i8", KDA_DTYPE_I64, 1, &n3, ints,
                                          err, sizeof err), 0);
  {
    const double bad[][1] = {{1.5}, {0x1p31}, {NAN}, {INFINITY}, {-0x1p31 - 1}};
    int64_t one = 1;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
      expect(kda_npz_writer_add_f64(w, "bad", KDA_DTYPE_I32, 1, &one, bad[i], err, sizeof err),
             KDA_EINVAL, err, "member 'bad'", "not an integer");
    expect(kda_npz_writer_add_f64(w, "bad", KDA_DTYPE_I64, 1, &one, (const double[]){0x1p63},
                                  err, sizeof err), KDA_EINVAL, err, "not an integer", NULL);
  }
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_read(z, "f4", KDA_DTYPE_F32, f, 4, err, sizeof err), KDA_OK);
  for (int i = 0; i < 4; i++) ck_assert(f32_bits(f[i]) == f32_bits((float)x[i]));
  ck_assert_int_eq(kda_npz_read(z, "f2", KDA_DTYPE_F64, d, 4, err, sizeof err), KDA_OK);
  ck_assert(d[0] == 0.0999755859375);
  ck_assert(d[1] == 1 + 0x1p-10);
  ck_assert(isinf(d[2]) && d[2] < 0);
  ck_assert(d[3] == 0x1p-24 * 0); /* 2^-26 is below half the smallest subnormal */
  ck_assert_int_eq(kda_npz_read(z, "f2", KDA_DTYPE_F32, f, 4, err, sizeof err), KDA_OK);
  ck_assert(f[1] == 1 + 0x1p-10f);
  ck_assert_int_eq(kda_npz_read(z, "i4", KDA_DTYPE_I64, iv, 3, err, sizeof err), KDA_OK);
  ck_assert(iv[0] == INT32_MIN && iv[1] == INT32_MAX && iv[2] == 0);
  kda_npz_close(z);
}
END_TEST

START_TEST(test_writer_arguments) {
  const char *dir = fresh_dir();
  char err[KDA_ERRLEN], longname[300];
  kda_npz_writer *w;
  int64_t sh[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, neg = -1, huge[2] = {INT64_MAX, 2};
  double one = 1;
  ck_assert_int_eq(kda_npz_writer_open(kda_test_join(dir, "a.npz"), &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "x", KDA_DTYPE_F64, 0, NULL, &one,
                                          err, sizeof err), 0);
  expect(kda_npz_writer_add_f64(w, "x", KDA_DTYPE_F64, 0, NULL, &one, err, sizeof err), KDA_EINVAL,
         err, "duplicate member 'x'", NULL);
  expect(kda_npz_writer_add_f64(w, "", KDA_DTYPE_F64, 0, NULL, &one, err, sizeof err), KDA_EINVAL,
         err, "invalid member name", NULL);
  expect(kda_npz_writer_add_f64(w, "a/b", KDA_DTYPE_F64, 0, NULL, &one, err, sizeof err),
         KDA_EINVAL, err, "invalid member name 'a/b'", NULL);
  expect(kda_npz_writer_add_f64(w, ".x", KDA_DTYPE_F64, 0, NULL, &one, err, sizeof err),
         KDA_EINVAL, err, "invalid member name", NULL);
  expect(kda_npz_writer_add_f64(w, NULL, KDA_DTYPE_F64, 0, NULL, &one, err, sizeof err),
         KDA_EINVAL, err, "invalid member name", NULL);
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  expect(kda_npz_writer_add_f64(w, longname, KDA_DTYPE_F64, 0, NULL, &one, err, sizeof err),
         KDA_EINVAL, err, "invalid member name", NULL);
  expect(kda_npz_writer_add(w, "y", 5, 0, NULL, &one, err, sizeof err), KDA_EINVAL, err,
         "invalid dtype", NULL);
  expect(kda_npz_writer_add(w, "y", KDA_DTYPE_F64, 9, sh, &one, err, sizeof err), KDA_ESHAPE, err,
         "dimensions", NULL);
  expect(kda_npz_writer_add(w, "y", KDA_DTYPE_F64, 1, &neg, &one, err, sizeof err), KDA_ESHAPE,
         err, "negative", NULL);
  expect(kda_npz_writer_add(w, "y", KDA_DTYPE_F64, 2, huge, &one, err, sizeof err), KDA_ESHAPE,
         err, "overflows", NULL);
  expect(kda_npz_writer_add(w, "y", KDA_DTYPE_F64, 1, NULL, &one, err, sizeof err), KDA_EINVAL,
         err, "NULL shape", NULL);
  expect(kda_npz_writer_add(w, "y", KDA_DTYPE_F64, 0, NULL, NULL, err, sizeof err), KDA_EINVAL,
         err, "NULL data", NULL);
  expect(kda_npz_writer_set_manifest(w, "{\"a\": 1", err, sizeof err), KDA_EINVAL, err,
         "manifest.json is not a JSON object", NULL);
  expect(kda_npz_writer_set_manifest(w, "[1]", err, sizeof err), KDA_EINVAL, err,
         "not a JSON object", NULL);
  expect(kda_npz_writer_set_manifest(w, "{\"a\": 1, \"a\": 2}", err, sizeof err), KDA_EINVAL, err,
         "not a JSON object", NULL);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, "{}", err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, "{\"b\": 2}", err, sizeof err), KDA_OK);
  kda_npz_writer_abort(w);
  ck_assert_int_eq(kda_test_count_entries(dir), 0);
}
END_TEST

/* The same content gives the same bytes; the layout is the documented one. */
static void write_sample(const char *path, const char *manifest) {
  char err[KDA_ERRLEN];
  kda_npz_writer *w;
  int64_t sh[2] = {3, 4};
  double d[12];
  for (int i = 0; i < 12; i++) d[i] = i * 0.5 - 1;
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "q", KDA_DTYPE_F64, 2, sh, d, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "k", KDA_DTYPE_F16, 2, sh, d, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, manifest, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
}

START_TEST(test_deterministic) {
  const char *dir = fresh_dir();
  char *a = kda_test_join(dir, "a.npz"), *b = kda_test_join(dir, "b.npz");
  size_t la, lb, lc, pos;
  unsigned char *ba, *bb, *bc;
  struct stat sb;
  mode_t um = umask(022);
  write_sample(a, "{\"id\": 1}");
  sleep(1); /* a different wall-clock second must not matter */
  write_sample(b, "{\"id\": 1}");
  ba = kda_test_slurp(a, &la);
  bb = kda_test_slurp(b, &lb);
  ck_assert_uint_eq(la, lb);
  ck_assert_mem_eq(ba, bb, la);
  write_sample(a, "{\"id\": 1}"); /* rewriting over an existing target */
  bc = kda_test_slurp(a, &lc);
  ck_assert_uint_eq(la, lc);
  ck_assert_mem_eq(ba, bc, la);
  ck_assert_int_eq(kda_test_count_entries(dir), 2);
  ck_assert_int_eq(stat(a, &sb), 0);
  ck_assert_int_eq(sb.st_mode & 0777, 0644);
  umask(um);
  /* Layout: manifest.json first, then q, k; stored; DOS time 0 and date 0x21; no extras. */
  ck_assert_mem_eq(ba, "PK\x03\x04", 4);
  ck_assert_int_eq(ba[8] | ba[9] << 8, 0);     /* method: stored */
  ck_assert_int_eq(ba[6] | ba[7] << 8, 0);     /* flags: no data descriptor */
  ck_assert_int_eq(ba[10] | ba[11] << 8, 0);   /* time */
  ck_assert_int_eq(ba[12] | ba[13] << 8, 0x21); /* date 1980-01-01 */
  ck_assert_int_eq(ba[26] | ba[27] << 8, 13);
  ck_assert_int_eq(ba[28] | ba[29] << 8, 0);   /* no extra field */
  ck_assert_mem_eq(ba + 30, "manifest.json", 13);
  pos = find(ba, la, "PK\x01\x02", 4); /* first central directory entry */
  ck_assert_int_eq(ba[pos + 5], 3);    /* made by Unix */
  ck_assert_int_eq(ba[pos + 30] | ba[pos + 31] << 8, 0); /* no extra field */
  ck_assert_uint_eq((uint32_t)ba[pos + 38] | (uint32_t)ba[pos + 39] << 8 |
                        (uint32_t)ba[pos + 40] << 16 | (uint32_t)ba[pos + 41] << 24,
                    0100644u << 16);
  ck_assert_uint_lt(find(ba, la, "q.npy", 5), find(ba, la, "k.npy", 5));
  free(ba);
  free(bb);
  free(bc);
}
END_TEST

START_TEST(test_empty_archive) {
  const char *dir = fresh_dir();
  char *path = kda_test_join(dir, "e.npz"), err[KDA_ERRLEN];
  kda_npz_writer *w;
  kda_npz *z;
  size_t len;
  unsigned char *b;
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  b = kda_test_slurp(path, &len);
  ck_assert_uint_eq(len, 22);
  free(b);
  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_count(z), 0);
  ck_assert_int_eq(kda_npz_verify(z, err, sizeof err), KDA_OK);
  expect(kda_npz_read_blob(z, "manifest.json", NULL, NULL, err, sizeof err), KDA_ENOTFOUND, err,
         "no member 'manifest.json'", NULL);
  kda_npz_close(z);
}
END_TEST

/* Slices: stored members seek, deflated members are decompressed up to the slice. */
START_TEST(test_read_range) {
  const char *dir = fresh_dir();
  char *path = kda_test_join(dir, "r.npz"), err[KDA_ERRLEN];
  kda_npz_writer *w;
  kda_npz *z;
  enum { N = 300000 }; /* 2.4 MB: more than one streaming chunk */
  double *d = malloc(N * sizeof *d), out[64];
  int64_t n = N;
  float f[4];
  for (int i = 0; i < N; i++) d[i] = i * 0.25;
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "x", KDA_DTYPE_F64, 1, &n, d, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "h", KDA_DTYPE_F16, 1, &n, d, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  {
    const uint64_t firsts[] = {0, 1, 131071, 131072, 200000, N - 64};
    for (size_t i = 0; i < sizeof firsts / sizeof *firsts; i++) {
      ck_assert_int_eq(kda_npz_read_range(z, "x", KDA_DTYPE_F64, firsts[i], 64, out, err,
                                          sizeof err), KDA_OK);
      for (int j = 0; j < 64; j++) ck_assert(out[j] == (double)(firsts[i] + (uint64_t)j) * 0.25);
    }
  }
  ck_assert_int_eq(kda_npz_read_range(z, "h", KDA_DTYPE_F32, 10, 4, f, err, sizeof err), KDA_OK);
  ck_assert(f[0] == 2.5f && f[3] == 3.25f);
  ck_assert_int_eq(kda_npz_read_range(z, "x", KDA_DTYPE_F64, N, 0, NULL, err, sizeof err), KDA_OK);
  expect(kda_npz_read_range(z, "x", KDA_DTYPE_F64, N - 1, 2, out, err, sizeof err), KDA_ESHAPE,
         err, "outside its 300000 elements", path);
  expect(kda_npz_read_range(z, "x", KDA_DTYPE_F64, UINT64_MAX, 2, out, err, sizeof err),
         KDA_ESHAPE, err, "outside", NULL);
  expect(kda_npz_read_range(z, "x", KDA_DTYPE_F32, 0, 2, f, err, sizeof err), KDA_EDTYPE, err,
         "cannot read dtype '<f8' as '<f4'", NULL);
  expect(kda_npz_read_range(z, "nope", KDA_DTYPE_F64, 0, 1, out, err, sizeof err), KDA_ENOTFOUND,
         err, "no member 'nope'", NULL);
  kda_npz_close(z);
  free(d);
  /* Deflated (numpy savez_compressed): f8 is (arange(24) - 11.5) / 4 with three specials. */
  ck_assert_int_eq(kda_npz_open(FIX "deflated.npz", &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_read_range(z, "f8", KDA_DTYPE_F64, 8, 4, out, err, sizeof err), KDA_OK);
  for (int j = 0; j < 4; j++) ck_assert(out[j] == (8 + j - 11.5) / 4);
  ck_assert_int_eq(kda_npz_read_range(z, "f2", KDA_DTYPE_F64, 6, 1, out, err, sizeof err), KDA_OK);
  ck_assert(out[0] == 0.0999755859375);
  kda_npz_close(z);
}
END_TEST

START_TEST(test_read_conversions) {
  const char *dir = fresh_dir();
  char *path = kda_test_join(dir, "c.npz"), err[KDA_ERRLEN];
  kda_npz_writer *w;
  kda_npz *z;
  int64_t n = 3, big[3] = {0, (1LL << 53) + 1, 5}, ok[3] = {-(1LL << 53), 1LL << 53, INT64_MIN};
  double d[3];
  float f[3];
  int64_t iv[3];
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add(w, "big", KDA_DTYPE_I64, 1, &n, big, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add(w, "ok", KDA_DTYPE_I64, 1, &n, ok, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "f", KDA_DTYPE_F64, 1, &n, (double[]){1, 2, 3}, err,
                                          sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  expect(kda_npz_read(z, "big", KDA_DTYPE_F64, d, 3, err, sizeof err), KDA_EDTYPE, err,
         "member 'big': element 1", "not exactly representable");
  ck_assert_int_eq(kda_npz_read(z, "ok", KDA_DTYPE_F64, d, 3, err, sizeof err), KDA_OK);
  ck_assert(d[0] == -0x1p53 && d[1] == 0x1p53 && d[2] == -0x1p63);
  ck_assert_int_eq(kda_npz_read(z, "big", KDA_DTYPE_I64, iv, 3, err, sizeof err), KDA_OK);
  ck_assert_int_eq(iv[1], (1LL << 53) + 1);
  expect(kda_npz_read(z, "f", KDA_DTYPE_F32, f, 3, err, sizeof err), KDA_EDTYPE, err,
         "cannot read dtype '<f8' as '<f4'", NULL);
  expect(kda_npz_read(z, "f", KDA_DTYPE_I64, iv, 3, err, sizeof err), KDA_EDTYPE, err,
         "as '<i8'", NULL);
  expect(kda_npz_read(z, "big", KDA_DTYPE_F32, f, 3, err, sizeof err), KDA_EDTYPE, err,
         "cannot read dtype '<i8' as '<f4'", NULL);
  expect(kda_npz_read(z, "f", KDA_DTYPE_F16, f, 3, err, sizeof err), KDA_EDTYPE, err,
         "as '<f2'", NULL);
  expect(kda_npz_read(z, "f", 42, f, 3, err, sizeof err), KDA_EDTYPE, err, "invalid dtype", NULL);
  expect(kda_npz_read(z, "f", KDA_DTYPE_F64, d, 2, err, sizeof err), KDA_ESHAPE, err,
         "has 3 elements, caller expects 2", NULL);
  expect(kda_npz_read(z, "f", KDA_DTYPE_F64, d, 4, err, sizeof err), KDA_ESHAPE, err,
         "caller expects 4", NULL);
  kda_npz_close(z);
}
END_TEST

/* ================================================================ numpy-written fixtures */

static void check_fixture_arrays(const char *path) {
  char err[KDA_ERRLEN];
  kda_npz *z;
  kda_array_info info;
  double d[24];
  float f[7];
  int64_t iv[4];
  static const char *const names[] = {"f8", "f4", "f2", "i8", "i4", "empty"};
  ck_assert_msg(kda_npz_open(path, &z, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_int_eq(kda_npz_count(z), 6);
  for (int i = 0; i < 6; i++) ck_assert_str_eq(kda_npz_name(z, i), names[i]);
  ck_assert_int_eq(kda_npz_verify(z, err, sizeof err), KDA_OK);

  ck_assert_int_eq(kda_npz_info(z, "f8", &info, err, sizeof err), KDA_OK);
  ck_assert(info.dtype == KDA_DTYPE_F64 && info.ndim == 3 && info.shape[0] == 2 &&
            info.shape[1] == 3 && info.shape[2] == 4 && info.count == 24 && info.nbytes == 192);
  ck_assert_int_eq(kda_npz_read(z, "f8", KDA_DTYPE_F64, d, 24, err, sizeof err), KDA_OK);
  for (int i = 0; i < 24; i++) {
    double want = (i - 11.5) / 4;
    if (i == 5) want = 0.1;
    if (i == 7) want = -0.0;
    if (i == 23) want = 1e-310;
    ck_assert_msg(f64_bits(d[i]) == f64_bits(want), "%s f8[%d] = %a", path, i, d[i]);
  }

  ck_assert_int_eq(kda_npz_read(z, "f4", KDA_DTYPE_F32, f, 5, err, sizeof err), KDA_OK);
  ck_assert(f[0] == 1.5f && f[1] == -2.25f && f[2] == 0.1f && f[3] == FLT_MAX &&
            f[4] == 0x1p-149f);
  ck_assert_int_eq(kda_npz_read(z, "f4", KDA_DTYPE_F64, d, 5, err, sizeof err), KDA_OK);
  ck_assert(d[2] == (double)0.1f && d[4] == 0x1p-149);

  ck_assert_int_eq(kda_npz_read(z, "f2", KDA_DTYPE_F64, d, 7, err, sizeof err), KDA_OK);
  ck_assert(d[0] == 1 && d[1] == -2.5 && d[2] == 65504 && d[3] == 0x1p-24 && isinf(d[4]) &&
            d[4] > 0 && d[5] == 0 && signbit(d[5]) && d[6] == 0.0999755859375);
  ck_assert_int_eq(kda_npz_read(z, "f2", KDA_DTYPE_F32, f, 7, err, sizeof err), KDA_OK);
  ck_assert(f[3] == 0x1p-24f && f[6] == 0.0999755859375f);

  ck_assert_int_eq(kda_npz_info(z, "i8", &info, err, sizeof err), KDA_OK);
  ck_assert(info.dtype == KDA_DTYPE_I64 && info.ndim == 0 && info.count == 1);
  ck_assert_int_eq(kda_npz_read(z, "i8", KDA_DTYPE_I64, iv, 1, err, sizeof err), KDA_OK);
  ck_assert_int_eq(iv[0], -1234567890123LL);
  ck_assert_int_eq(kda_npz_read(z, "i4", KDA_DTYPE_I64, iv, 4, err, sizeof err), KDA_OK);
  ck_assert(iv[0] == INT32_MIN && iv[1] == INT32_MAX && iv[2] == 0 && iv[3] == -1);
  ck_assert_int_eq(kda_npz_read(z, "i4", KDA_DTYPE_F64, d, 4, err, sizeof err), KDA_OK);
  ck_assert(d[0] == -2147483648.0 && d[3] == -1);

  ck_assert_int_eq(kda_npz_info(z, "empty", &info, err, sizeof err), KDA_OK);
  ck_assert(info.ndim == 2 && info.shape[0] == 0 && info.shape[1] == 3 && info.count == 0);
  ck_assert_int_eq(kda_npz_read(z, "empty", KDA_DTYPE_F64, NULL, 0, err, sizeof err), KDA_OK);
  {
    double *p;
    ck_assert_int_eq(kda_npz_load_f64(z, "empty", NULL, &p, err, sizeof err), KDA_OK);
    ck_assert_ptr_nonnull(p);
    free(p);
  }
  kda_npz_close(z);
}

START_TEST(test_numpy_stored) {
  check_fixture_arrays(FIX "stored.npz");
}
END_TEST

START_TEST(test_numpy_deflated) {
  check_fixture_arrays(FIX "deflated.npz");
}
END_TEST

/* Re-writing numpy's arrays with our writer gives byte-identical .npy members. */
START_TEST(test_members_match_numpy) {
  const char *dir = fresh_dir();
  char *path = kda_test_join(dir, "same.npz"), err[KDA_ERRLEN];
  static const char *const names[] = {"f8", "f4", "f2", "i8", "i4", "empty"};
  kda_npz *z, *y;
  kda_npz_writer *w;
  ck_assert_int_eq(kda_npz_open(FIX "stored.npz", &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  for (int i = 0; i < 6; i++) {
    kda_array_info info;
    char *blob;
    size_t len, off;
    ck_assert_int_eq(kda_npz_read_blob(z, names[i], &blob, &len, err, sizeof err),
                     KDA_ENOTFOUND); /* blobs are named with ".npy" */
    {
      char member[32];
      snprintf(member, sizeof member, "%s.npy", names[i]);
      ck_assert_int_eq(kda_npz_read_blob(z, member, &blob, &len, err, sizeof err), KDA_OK);
    }
    ck_assert_int_eq(kda_npy_parse_header((unsigned char *)blob, len, names[i], &info, &off, err,
                                          sizeof err), KDA_OK);
    ck_assert_int_eq(kda_npz_writer_add(w, names[i], info.dtype, info.ndim, info.shape,
                                        blob + off, err, sizeof err), KDA_OK);
    free(blob);
  }
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_open(path, &y, err, sizeof err), KDA_OK);
  for (int i = 0; i < 6; i++) {
    char member[32], *a, *b;
    size_t la, lb;
    snprintf(member, sizeof member, "%s.npy", names[i]);
    ck_assert_int_eq(kda_npz_read_blob(z, member, &a, &la, err, sizeof err), KDA_OK);
    ck_assert_int_eq(kda_npz_read_blob(y, member, &b, &lb, err, sizeof err), KDA_OK);
    ck_assert_uint_eq(la, lb);
    ck_assert_mem_eq(a, b, la);
    free(a);
    free(b);
  }
  kda_npz_close(y);
  kda_npz_close(z);
}
END_TEST

START_TEST(test_numpy_manifest_and_versions) {
  char err[KDA_ERRLEN], *text;
  size_t len;
  kda_npz *z;
  json_t *j;
  json_error_t je;
  double d[3];
  float f[2];
  int64_t iv[3];
  ck_assert_int_eq(kda_npz_open(FIX "manifest.npz", &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_count(z), 2);
  ck_assert(kda_npz_has(z, "q") && kda_npz_has(z, "cu_seqlens") && !kda_npz_has(z, "manifest"));
  ck_assert_int_eq(kda_npz_read_blob(z, "manifest.json", &text, &len, err, sizeof err), KDA_OK);
  j = json_loads(text, 0, &je);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(json_string_value(json_object_get(j, "schema")), "kda-vectors/1");
  json_decref(j);
  free(text);
  ck_assert_int_eq(kda_npz_read(z, "cu_seqlens", KDA_DTYPE_I64, iv, 3, err, sizeof err), KDA_OK);
  ck_assert(iv[0] == 0 && iv[1] == 3 && iv[2] == 8);
  ck_assert_int_eq(kda_npz_verify(z, err, sizeof err), KDA_OK);
  kda_npz_close(z);

  ck_assert_int_eq(kda_npz_open(FIX "versions.npz", &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_read(z, "v1", KDA_DTYPE_F64, d, 3, err, sizeof err), KDA_OK);
  ck_assert(d[0] == 1 && d[1] == 2 && d[2] == 3);
  ck_assert_int_eq(kda_npz_read(z, "v2", KDA_DTYPE_F32, f, 2, err, sizeof err), KDA_OK);
  ck_assert(f[0] == 4 && f[1] == 5);
  ck_assert_int_eq(kda_npz_read(z, "v3", KDA_DTYPE_I64, iv, 1, err, sizeof err), KDA_OK);
  ck_assert_int_eq(iv[0], 6);
  kda_npz_close(z);
}
END_TEST

START_TEST(test_numpy_unsupported) {
  static const struct {
    const char *name;
    int status;
    const char *text;
  } cases[] = {
      {"c16", KDA_EDTYPE, "unsupported dtype '<c16'"},
      {"be", KDA_EDTYPE, "unsupported dtype '>f8'"},
      {"b1", KDA_EDTYPE, "unsupported dtype '|b1'"},
      {"u2", KDA_EDTYPE, "unsupported dtype '<u2'"},
      {"fortran", KDA_EFORMAT, "fortran_order arrays are not supported"},
  };
  char err[KDA_ERRLEN];
  kda_npz *z;
  double d[8];
  ck_assert_int_eq(kda_npz_open(FIX "unsupported.npz", &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_verify(z, err, sizeof err), KDA_OK); /* the zip itself is fine */
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char who[64];
    snprintf(who, sizeof who, "member '%s'", cases[i].name);
    expect(kda_npz_info(z, cases[i].name, NULL, err, sizeof err), cases[i].status, err,
           cases[i].text, who);
    expect(kda_npz_read(z, cases[i].name, KDA_DTYPE_F64, d, 1, err, sizeof err), cases[i].status,
           err, cases[i].text, FIX "unsupported.npz");
  }
  kda_npz_close(z);
}
END_TEST

/* ================================================================ bad files */

START_TEST(test_truncated) {
  const char *dir = fresh_dir();
  static const char *const srcs[] = {FIX "stored.npz", FIX "deflated.npz"};
  for (int s = 0; s < 2; s++) {
    size_t len;
    unsigned char *b = kda_test_slurp(srcs[s], &len);
    const size_t cuts[] = {0, 1, 4, 30, 100, len / 2, len - 100, len - 22, len - 21, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
      char name[32], err[KDA_ERRLEN], *path;
      kda_npz *z = NULL;
      int st;
      snprintf(name, sizeof name, "cut%d_%zu.npz", s, cuts[i]);
      path = kda_test_join(dir, name);
      kda_test_write_all(path, b, cuts[i]);
      st = kda_npz_open(path, &z, err, sizeof err);
      ck_assert_msg(st == KDA_EFORMAT, "%s cut at %zu: status %d (%s)", srcs[s], cuts[i], st, err);
      ck_assert_ptr_null(z);
      ck_assert_msg(strstr(err, path) != NULL, "'%s' does not name the file", err);
      ck_assert_msg(strstr(err, cuts[i] == 0 ? "empty file" : "not a zip archive") != NULL ||
                        strstr(err, "corrupt zip archive") != NULL,
                    "cut %zu: '%s'", cuts[i], err);
    }
    free(b);
  }
}
END_TEST

START_TEST(test_corrupt_central_directory) {
  const char *dir = fresh_dir();
  size_t len;
  unsigned char *good = kda_test_slurp(FIX "stored.npz", &len);
  size_t cd = find(good, len, "PK\x01\x02", 4), eocd = find(good, len, "PK\x05\x06", 4);
  static const struct {
    int where; /* 0: central entry, 1: end record */
    size_t at;
    unsigned char x;
  } muts[] = {
      {0, 0, 0xff},  /* signature of the first central entry */
      {0, 10, 0x01}, /* compression method differs from the local header */
      {0, 16, 0x55}, /* CRC (differs from the local header's) */
      {0, 42, 0x40}, /* local header offset */
      {0, 28, 0x05}, /* file name length */
      {1, 10, 0x7f}, /* number of entries */
      {1, 16, 0x33}, /* central directory offset */
  };
  for (size_t i = 0; i < sizeof muts / sizeof *muts; i++) {
    unsigned char *b = malloc(len);
    char name[32], err[KDA_ERRLEN], *path;
    kda_npz *z = NULL;
    int st;
    memcpy(b, good, len);
    b[(muts[i].where ? eocd : cd) + muts[i].at] ^= muts[i].x;
    snprintf(name, sizeof name, "cd%zu.npz", i);
    path = kda_test_join(dir, name);
    kda_test_write_all(path, b, len);
    st = kda_npz_open(path, &z, err, sizeof err);
    if (st == KDA_OK) { /* then the damage must show when reading */
      st = kda_npz_verify(z, err, sizeof err);
      kda_npz_close(z);
    }
    ck_assert_msg(st == KDA_EFORMAT, "mutation %zu: status %d (%s)", i, st, err);
    ck_assert_msg(strstr(err, path) != NULL, "'%s' does not name the file", err);
    free(b);
  }
  free(good);
}
END_TEST

/* A stored archive written by us with one array "q" of n float64 values 0, 1, ... */
static char *write_q(const char *dir, const char *name, int64_t n) {
  char *path = kda_test_join(dir, name), err[KDA_ERRLEN];
  kda_npz_writer *w;
  double *d = malloc((size_t)n * sizeof *d);
  for (int64_t i = 0; i < n; i++) d[i] = (double)i;
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, "{\"case\": \"q\"}", err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "q", KDA_DTYPE_F64, 1, &n, d, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  free(d);
  return path;
}

/* Applies f to a copy of src's bytes and writes it to dir/name. */
static char *mutate(const char *src, const char *dir, const char *name, const char *pat,
                    const char *repl, size_t skip) {
  size_t len, at;
  unsigned char *b = kda_test_slurp(src, &len);
  char *path = kda_test_join(dir, name);
  at = find(b, len, pat, strlen(pat)) + skip;
  memcpy(b + at, repl, strlen(repl));
  kda_test_write_all(path, b, len);
  free(b);
  return path;
}

START_TEST(test_bad_crc) {
  const char *dir = fresh_dir();
  char *good = write_q(dir, "good.npz", 1000), err[KDA_ERRLEN], *bad;
  size_t len, at;
  unsigned char *b = kda_test_slurp(good, &len);
  kda_npz *z;
  double *d, slice[4];
  kda_array_info info;
  /* Flip one byte in the middle of q's data (after its 128-byte .npy header). */
  at = find(b, len, "\x93NUMPY", 6) + 128 + 4000;
  b[at] ^= 0x10;
  bad = kda_test_join(dir, "badcrc.npz");
  kda_test_write_all(bad, b, len);
  free(b);
  ck_assert_int_eq(kda_npz_open(bad, &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_info(z, "q", &info, err, sizeof err), KDA_OK); /* header intact */
  d = malloc(1000 * sizeof *d);
  expect(kda_npz_read(z, "q", KDA_DTYPE_F64, d, 1000, err, sizeof err), KDA_EFORMAT, err,
         "member 'q': CRC mismatch", bad);
  free(d);
  expect(kda_npz_load_f64(z, "q", NULL, &d, err, sizeof err), KDA_EFORMAT, err, "CRC mismatch",
         NULL);
  ck_assert_ptr_null(d);
  expect(kda_npz_verify(z, err, sizeof err), KDA_EFORMAT, err, "member 'q': CRC mismatch", bad);
  /* A slice is not CRC-checked: it reads the (corrupt) bytes as they are. */
  ck_assert_int_eq(kda_npz_read_range(z, "q", KDA_DTYPE_F64, 10, 4, slice, err, sizeof err),
                   KDA_OK);
  ck_assert(slice[0] == 10 && slice[3] == 13);
  kda_npz_close(z);
  /* The manifest (a blob) has a CRC too. */
  bad = mutate(good, dir, "badjson.npz", "{\"case\"", "[", 0);
  ck_assert_int_eq(kda_npz_open(bad, &z, err, sizeof err), KDA_OK);
  {
    char *blob = (char *)1;
    expect(kda_npz_read_blob(z, "manifest.json", &blob, NULL, err, sizeof err), KDA_EFORMAT, err,
           "member 'manifest.json': CRC mismatch", NULL);
    ck_assert_ptr_null(blob);
  }
  kda_npz_close(z);
}
END_TEST

START_TEST(test_corrupt_deflate) {
  const char *dir = fresh_dir();
  size_t len, at;
  unsigned char *b = kda_test_slurp(FIX "deflated.npz", &len);
  char *path = kda_test_join(dir, "bad.npz"), err[KDA_ERRLEN];
  kda_npz *z;
  double d[24];
  int st;
  /* Damage f8's compressed data (its local header's name is followed by a 20-byte Zip64
   * extra field, then the deflate stream). */
  at = find(b, len, "f8.npy", 6) + 6 + 20 + 40;
  b[at] ^= 0xff;
  b[at + 1] ^= 0x5a;
  kda_test_write_all(path, b, len);
  free(b);
  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  st = kda_npz_read(z, "f8", KDA_DTYPE_F64, d, 24, err, sizeof err);
  if (st == KDA_OK) ck_abort_msg("corrupt deflate data was read without error");
  ck_assert_msg(st == KDA_EFORMAT || st == KDA_ESHAPE, "status %d: %s", st, err);
  ck_assert_msg(strstr(err, "member 'f8'") != NULL, "'%s'", err);
  expect(kda_npz_verify(z, err, sizeof err), KDA_EFORMAT, err, "member 'f8'", path);
  ck_assert_int_eq(kda_npz_read(z, "i4", KDA_DTYPE_F64, d, 4, err, sizeof err), KDA_OK);
  kda_npz_close(z);
}
END_TEST

START_TEST(test_wrong_magic) {
  const char *dir = fresh_dir();
  char *path = kda_test_join(dir, "text.npz"), err[KDA_ERRLEN], *good, *bad;
  kda_npz *z;
  double d[4];
  kda_test_write_all(path, "hello, this is not a zip archive\n", 33);
  expect(kda_npz_open(path, &z, err, sizeof err), KDA_EFORMAT, err, path, "not a zip archive");
  /* A zip whose .npy member has the wrong magic. */
  good = write_q(dir, "good.npz", 4);
  bad = mutate(good, dir, "magic.npz", "\x93NUMPY", "\x93NUMPX", 0);
  ck_assert_int_eq(kda_npz_open(bad, &z, err, sizeof err), KDA_OK);
  expect(kda_npz_info(z, "q", NULL, err, sizeof err), KDA_EFORMAT, err, "member 'q'",
         "not a .npy array (bad magic)");
  expect(kda_npz_read(z, "q", KDA_DTYPE_F64, d, 4, err, sizeof err), KDA_EFORMAT, err,
         "bad magic", bad);
  kda_npz_close(z);
  /* Members that are not .npy at all, or too short for a header. */
  {
    const char *names[] = {"x.npy", "y.npy", "z.npy"};
    const void *data[] = {"hello world", "abc", ""};
    size_t lens[] = {11, 3, 0};
    path = kda_test_join(dir, "raw.npz");
    write_raw_zip(path, 3, names, data, lens);
    ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
    expect(kda_npz_info(z, "x", NULL, err, sizeof err), KDA_EFORMAT, err, "member 'x'",
           "bad magic");
    expect(kda_npz_info(z, "y", NULL, err, sizeof err), KDA_EFORMAT, err, "member 'y'",
           "truncated");
    expect(kda_npz_info(z, "z", NULL, err, sizeof err), KDA_EFORMAT, err, "member 'z'",
           "truncated");
    kda_npz_close(z);
  }
}
END_TEST

START_TEST(test_bad_headers_in_archive) {
  const char *dir = fresh_dir();
  char *good = write_q(dir, "good.npz", 3), err[KDA_ERRLEN], *bad;
  kda_npz *z;
  double d[4];
  /* Big-endian descr. */
  bad = mutate(good, dir, "be.npz", "'<f8'", "'>f8'", 0);
  ck_assert_int_eq(kda_npz_open(bad, &z, err, sizeof err), KDA_OK);
  expect(kda_npz_info(z, "q", NULL, err, sizeof err), KDA_EDTYPE, err, "member 'q'",
         "unsupported dtype '>f8'");
  kda_npz_close(z);
  /* fortran_order True (the dictionary stays the same length). */
  bad = mutate(good, dir, "fortran.npz", "False", "True ", 0);
  ck_assert_int_eq(kda_npz_open(bad, &z, err, sizeof err), KDA_OK);
  expect(kda_npz_read(z, "q", KDA_DTYPE_F64, d, 3, err, sizeof err), KDA_EFORMAT, err,
         "member 'q': fortran_order arrays are not supported", bad);
  kda_npz_close(z);
  /* Header and size disagree: (3,) becomes (4,). */
  bad = mutate(good, dir, "size.npz", "(3,)", "(4,)", 0);
  ck_assert_int_eq(kda_npz_open(bad, &z, err, sizeof err), KDA_OK);
  expect(kda_npz_info(z, "q", NULL, err, sizeof err), KDA_ESHAPE, err,
         "member 'q': header says 160 bytes (128 header + 32 data), member has 152", bad);
  expect(kda_npz_read(z, "q", KDA_DTYPE_F64, d, 4, err, sizeof err), KDA_ESHAPE, err,
         "header says", NULL);
  kda_npz_close(z);
  /* Hand-made members: unsupported dtypes, overflowing shape, short data. */
  {
    unsigned char m[5][256];
    const char *names[] = {"c16.npy", "b1.npy", "big.npy", "short.npy", "long.npy"};
    const void *data[5] = {m[0], m[1], m[2], m[3], m[4]};
    size_t lens[5];
    lens[0] = make_npy(m[0], 256, "{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", 16);
    lens[1] = make_npy(m[1], 256, "{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }", 1);
    lens[2] = make_npy(m[2], 256,
                       "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, "
                       "4294967296, 2), }", 0);
    lens[3] = make_npy(m[3], 256, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", 12);
    lens[4] = make_npy(m[4], 256, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }", 8);
    bad = kda_test_join(dir, "hand.npz");
    write_raw_zip(bad, 5, names, data, lens);
    ck_assert_int_eq(kda_npz_open(bad, &z, err, sizeof err), KDA_OK);
    expect(kda_npz_info(z, "c16", NULL, err, sizeof err), KDA_EDTYPE, err, "member 'c16'",
           "'<c16'");
    expect(kda_npz_info(z, "b1", NULL, err, sizeof err), KDA_EDTYPE, err, "'|b1'", NULL);
    expect(kda_npz_info(z, "big", NULL, err, sizeof err), KDA_ESHAPE, err, "member 'big'",
           "overflow");
    expect(kda_npz_info(z, "short", NULL, err, sizeof err), KDA_ESHAPE, err, "member 'short'",
           "header says");
    expect(kda_npz_info(z, "long", NULL, err, sizeof err), KDA_ESHAPE, err, "member 'long'",
           "member has");
    ck_assert_int_eq(kda_npz_verify(z, err, sizeof err), KDA_OK);
    kda_npz_close(z);
  }
}
END_TEST

START_TEST(test_missing_member) {
  char err[KDA_ERRLEN], *blob;
  kda_npz *z;
  double d[1], *p;
  int64_t *ip;
  ck_assert_int_eq(kda_npz_open(FIX "stored.npz", &z, err, sizeof err), KDA_OK);
  ck_assert(!kda_npz_has(z, "nope"));
  expect(kda_npz_info(z, "nope", NULL, err, sizeof err), KDA_ENOTFOUND, err,
         FIX "stored.npz: no member 'nope'", NULL);
  expect(kda_npz_read(z, "nope", KDA_DTYPE_F64, d, 1, err, sizeof err), KDA_ENOTFOUND, err,
         "no member 'nope'", NULL);
  expect(kda_npz_read_range(z, "nope", KDA_DTYPE_F64, 0, 1, d, err, sizeof err), KDA_ENOTFOUND,
         err, "no member 'nope'", NULL);
  expect(kda_npz_load_f64(z, "nope", NULL, &p, err, sizeof err), KDA_ENOTFOUND, err, "'nope'",
         NULL);
  expect(kda_npz_load_i64(z, "f8.npy", NULL, &ip, err, sizeof err), KDA_ENOTFOUND, err,
         "'f8.npy'", NULL);
  expect(kda_npz_read_blob(z, "manifest.json", &blob, NULL, err, sizeof err), KDA_ENOTFOUND, err,
         "no member 'manifest.json'", NULL);
  expect(kda_npz_info(z, NULL, NULL, err, sizeof err), KDA_ENOTFOUND, err, "(null)", NULL);
  kda_npz_close(z);
}
END_TEST

START_TEST(test_open_errors) {
  const char *dir = fresh_dir();
  char err[KDA_ERRLEN];
  kda_npz *z = (kda_npz *)1;
  expect(kda_npz_open(kda_test_join(dir, "absent.npz"), &z, err, sizeof err), KDA_EIO, err,
         "absent.npz: cannot open", NULL);
  ck_assert_ptr_null(z);
  expect(kda_npz_open(dir, &z, err, sizeof err), KDA_EIO, err, dir, NULL);
}
END_TEST

/* ================================================================ writer failures */

START_TEST(test_abort_leaves_nothing) {
  const char *dir = fresh_dir();
  char *path = kda_test_join(dir, "t.npz"), err[KDA_ERRLEN];
  kda_npz_writer *w;
  unsigned char *b;
  size_t len;
  double one = 1;
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "x", KDA_DTYPE_F64, 0, NULL, &one,
                                          err, sizeof err), 0);
  kda_npz_writer_abort(w);
  ck_assert_int_eq(kda_test_count_entries(dir), 0);
  /* An existing target is left as it was. */
  kda_test_write_all(path, "old", 3);
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_test_count_entries(dir), 2); /* the target and the temporary file */
  kda_npz_writer_abort(w);
  ck_assert_int_eq(kda_test_count_entries(dir), 1);
  b = kda_test_slurp(path, &len);
  ck_assert_uint_eq(len, 3);
  ck_assert_mem_eq(b, "old", 3);
  free(b);
  kda_npz_writer_abort(NULL);
}
END_TEST

/* kda_npz_writer_finish: commits on KDA_OK, else aborts and passes the status on. */
START_TEST(test_writer_finish) {
  const char *dir = fresh_dir();
  char *path = kda_test_join(dir, "f.npz"), err[KDA_ERRLEN];
  kda_npz_writer *w;
  double one = 1;
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_finish(w, KDA_EIO, err, sizeof err), KDA_EIO);
  ck_assert_int_eq(kda_test_count_entries(dir), 0);
  ck_assert_int_eq(kda_npz_writer_finish(NULL, KDA_EINVAL, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "x", KDA_DTYPE_F64, 0, NULL, &one,
                                          err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_finish(w, KDA_OK, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_test_count_entries(dir), 1);
  kda_npz *z;
  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  kda_npz_close(z);
}
END_TEST

START_TEST(test_commit_failures) {
  const char *dir = fresh_dir();
  char *path = kda_test_join(dir, "t.npz"), err[KDA_ERRLEN], *sub;
  kda_npz_writer *w;
  unsigned char *b;
  size_t len;
  struct rlimit old, lim;
  enum { N = 100000 };
  double *d = calloc(N, sizeof *d);
  int64_t n = N;
  int st;
  /* No such directory. */
  expect(kda_npz_writer_open(kda_test_join(dir, "no/such.npz"), &w, err, sizeof err), KDA_EIO, err,
         "cannot create temporary file", NULL);
  /* An I/O error while writing (file size limit): EIO, old target intact, nothing left. */
  kda_test_write_all(path, "old", 3);
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "x", KDA_DTYPE_F64, 1, &n, d, err, sizeof err), 0);
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 65536;
  signal(SIGXFSZ, SIG_IGN);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  st = kda_npz_writer_commit(w, err, sizeof err);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, SIG_DFL);
  expect(st, KDA_EIO, err, path, "cannot write");
  ck_assert_int_eq(kda_test_count_entries(dir), 1);
  b = kda_test_slurp(path, &len);
  ck_assert_uint_eq(len, 3);
  ck_assert_mem_eq(b, "old", 3);
  free(b);
  /* The target is a directory: refused at once (kda_files.h), the directory is untouched. */
  sub = kda_test_join(dir, "isdir.npz");
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  {
    char keep[600];
    snprintf(keep, sizeof keep, "%s/keep", sub);
    kda_test_write_all(keep, "k", 1);
  }
  expect(kda_npz_writer_open(sub, &w, err, sizeof err), KDA_EIO, err, "not a regular file",
         "a directory");
  ck_assert_int_eq(kda_test_count_entries(dir), 2);
  ck_assert_int_eq(kda_test_count_entries(sub), 1);
  free(d);
}
END_TEST

/* ================================================================ numpy interop files */

/* The archive that vectors/tests/numpy_interop.py checks (keep the two in step):
 *   manifest.json  {"generator": "check_npz", "version": 1}
 *   f8  <f8 (2, 3)       base(i) + 1/3, then [1] = 0.1, [2] = -0.0, [5] = 1e-310
 *   f4  <f4 (4,)         base(i) + 1/3 rounded to float32 (add_f64)
 *   f2  <f2 (3, 2)       base(i) + 1/3 rounded to float16 (add_f64), then [5] from
 *                        1 + 2^-11 + 2^-40 (must give 1 + 2^-10: no double rounding)
 *   i8  <i8 (5,)         i * 1000000007 - 2^40, then [0] = INT64_MIN, [4] = INT64_MAX
 *   i4  <i4 (2, 2)       7 - 3 i, then [0] = INT32_MIN
 *   scalar <f8 ()        2.5
 *   empty  <f4 (0, 4)
 *   r4  <f8 (2, 1, 3, 2) base(i)
 * with base(i) = ((37 i) mod 101 - 50) / 8. */
static double base_value(int i) {
  return (double)((37 * i) % 101 - 50) / 8;
}

static void write_interop(const char *path) {
  char err[KDA_ERRLEN];
  kda_npz_writer *w;
  double f8[6], f4[4], f2[6], r4[12], scalar = 2.5;
  int64_t i8[5], s23[2] = {2, 3}, s4 = 4, s32[2] = {3, 2}, s5 = 5, s22[2] = {2, 2},
                 s04[2] = {0, 4}, s2132[4] = {2, 1, 3, 2};
  int32_t i4[4];
  for (int i = 0; i < 6; i++) f8[i] = f2[i] = base_value(i) + 1.0 / 3;
  for (int i = 0; i < 4; i++) f4[i] = base_value(i) + 1.0 / 3;
  for (int i = 0; i < 12; i++) r4[i] = base_value(i);
  f8[1] = 0.1;
  f8[2] = -0.0;
  f8[5] = 1e-310;
  f2[5] = 1 + 0x1p-11 + 0x1p-40;
  for (int i = 0; i < 5; i++) i8[i] = (int64_t)i * 1000000007 - (1LL << 40);
  i8[0] = INT64_MIN;
  i8[4] = INT64_MAX;
  for (int i = 0; i < 4; i++) i4[i] = 7 - 3 * i;
  i4[0] = INT32_MIN;
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, "{\"generator\": \"check_npz\", \"version\": 1}",
                                               err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "f8", KDA_DTYPE_F64, 2, s23, f8, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "f4", KDA_DTYPE_F32, 1, &s4, f4, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "f2", KDA_DTYPE_F16, 2, s32, f2, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add(w, "i8", KDA_DTYPE_I64, 1, &s5, i8, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add(w, "i4", KDA_DTYPE_I32, 2, s22, i4, err, sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "scalar", KDA_DTYPE_F64, 0, NULL, &scalar, err,
                                          sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "empty", KDA_DTYPE_F32, 2, s04, NULL, err,
                                          sizeof err), 0);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "r4", KDA_DTYPE_F64, 4, s2132, r4, err, sizeof err),
                   0);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
}

START_TEST(test_interop_files) {
  const char *out = getenv("KDA_INTEROP_DIR");
  const char *dir = out != NULL && out[0] != '\0' ? out : fresh_dir();
  char *path = kda_test_join(dir, "c_writer.npz"), *empty = kda_test_join(dir, "c_empty.npz"), err[KDA_ERRLEN];
  kda_npz *z;
  kda_npz_writer *w;
  double f8[6], f2[6];
  write_interop(path);
  ck_assert_int_eq(kda_npz_writer_open(empty, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  /* Read back here too. */
  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_count(z), 8);
  ck_assert_int_eq(kda_npz_read(z, "f8", KDA_DTYPE_F64, f8, 6, err, sizeof err), KDA_OK);
  ck_assert(f8[1] == 0.1 && signbit(f8[2]) && f8[5] == 1e-310 && f8[0] == base_value(0) + 1.0 / 3);
  ck_assert_int_eq(kda_npz_read(z, "f2", KDA_DTYPE_F64, f2, 6, err, sizeof err), KDA_OK);
  ck_assert(f2[5] == 1 + 0x1p-10);
  ck_assert_int_eq(kda_npz_verify(z, err, sizeof err), KDA_OK);
  kda_npz_close(z);
}
END_TEST

static Suite *npz_suite(void) {
  Suite *s = suite_create("npz");
  TCase *tc;

  tc = tcase_create("npy");
  tcase_add_test(tc, test_dtype_table);
  tcase_add_test(tc, test_format_matches_numpy);
  tcase_add_test(tc, test_format_shapes);
  tcase_add_test(tc, test_parse_variants);
  tcase_add_test(tc, test_parse_rejects);
  tcase_add_test(tc, test_parse_prefix);
  suite_add_tcase(s, tc);

  tc = tcase_create("rounding");
  tcase_add_test(tc, test_f16_exhaustive_bits);
  tcase_add_test(tc, test_f16_edges);
  tcase_add_test(tc, test_f16_random_oracle);
  tcase_add_test(tc, test_bf16);
  tcase_add_test(tc, test_f32);
  suite_add_tcase(s, tc);

  tc = tcase_create("roundtrip");
  tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
  tcase_add_test(tc, test_roundtrip_all);
  tcase_add_test(tc, test_add_f64_rounding);
  tcase_add_test(tc, test_writer_arguments);
  tcase_add_test(tc, test_deterministic);
  tcase_add_test(tc, test_empty_archive);
  tcase_add_test(tc, test_read_range);
  tcase_add_test(tc, test_read_conversions);
  suite_add_tcase(s, tc);

  tc = tcase_create("numpy_fixtures");
  tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
  tcase_add_test(tc, test_numpy_stored);
  tcase_add_test(tc, test_numpy_deflated);
  tcase_add_test(tc, test_members_match_numpy);
  tcase_add_test(tc, test_numpy_manifest_and_versions);
  tcase_add_test(tc, test_numpy_unsupported);
  suite_add_tcase(s, tc);

  tc = tcase_create("corrupt");
  tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
  tcase_add_test(tc, test_truncated);
  tcase_add_test(tc, test_corrupt_central_directory);
  tcase_add_test(tc, test_bad_crc);
  tcase_add_test(tc, test_corrupt_deflate);
  tcase_add_test(tc, test_wrong_magic);
  tcase_add_test(tc, test_bad_headers_in_archive);
  tcase_add_test(tc, test_missing_member);
  tcase_add_test(tc, test_open_errors);
  suite_add_tcase(s, tc);

  tc = tcase_create("writer_failures");
  tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
  tcase_add_test(tc, test_abort_leaves_nothing);
  tcase_add_test(tc, test_writer_finish);
  tcase_add_test(tc, test_commit_failures);
  suite_add_tcase(s, tc);

  tc = tcase_create("interop");
  tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
  tcase_add_test(tc, test_interop_files);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return kda_test_main(npz_suite(), CK_ENV, CK_FORK_GETENV); /* CK_VERBOSITY, default normal */
}

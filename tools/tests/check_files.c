/* check_files.c: regression tests of files that cannot lie: every reader
 * defect (header length, zip bombs, trailing manifest bytes, ids, result shapes and dtypes,
 * golden hashes) and every writer defect (non-regular targets, output = input, unchecked
 * report writes, temporary files left by a signal), through the library and the kda command.
 * SPDX-License-Identifier: MIT
 *
 * Run from the repository root; the binary is $KDA_BIN, else ./build/kda.  Files are made in
 * a temporary directory that is removed afterwards.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include "kda_case.h"
#include "kda_catalog.h"
#include "kda_conform.h"
#include "kda_files.h"
#include "kda_golden.h"
#include "kda_golden_internal.h"
#include "kda_npz.h"
#include "kda_test.h"

#define EXAMPLE "golden/example/example.npz"
#define GOLDEN "golden/L1/gqa-div.npz"

static void setup(void) { kda_test_tmpdir_make("check-files"); }
static void teardown(void) { kda_test_tmpdir_remove(); }
static const char *tpath(const char *name) { return kda_test_path(name); }

/* Entries of dir whose name contains ".tmp." */
static int count_tmp(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  ck_assert_ptr_nonnull(d);
  while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

static void expect(int st, int want, const char *err, const char *s1, const char *s2) {
  ck_assert_msg(st == want, "status %d (%s), expected %d", st, err, want);
  if (s1) ck_assert_msg(strstr(err, s1) != NULL, "message '%s' lacks '%s'", err, s1);
  if (s2) ck_assert_msg(strstr(err, s2) != NULL, "message '%s' lacks '%s'", err, s2);
}

/* ---- Archives as lists of raw members, to make bad files from good ones. */
typedef struct rmember {
  char name[64];
  unsigned char *data;
  size_t len;
} rmember;

typedef struct rzip {
  rmember m[16];
  int n;
} rzip;

static void rzip_read(const char *path, rzip *r) {
  int ze;
  zip_t *za = zip_open(path, ZIP_RDONLY, &ze);
  ck_assert_ptr_nonnull(za);
  r->n = (int)zip_get_num_entries(za, 0);
  ck_assert_int_le(r->n, 16);
  for (int i = 0; i < r->n; i++) {
    zip_stat_t st;
    ck_assert_int_eq(zip_stat_index(za, (zip_uint64_t)i, 0, &st), 0);
    snprintf(r->m[i].name, sizeof r->m[i].name, "%s", st.name);
    r->m[i].len = st.size;
    r->m[i].data = malloc(st.size + 1);
    zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)i, 0);
    ck_assert_ptr_nonnull(zf);
    ck_assert_int_eq(zip_fread(zf, r->m[i].data, st.size), (zip_int64_t)st.size);
    zip_fclose(zf);
  }
  zip_discard(za);
}

static void rzip_write(const char *path, const rzip *r) {
  int ze;
  zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &ze);
  ck_assert_ptr_nonnull(za);
  for (int i = 0; i < r->n; i++) {
    zip_source_t *s = zip_source_buffer(za, r->m[i].data, r->m[i].len, 0);
    zip_int64_t idx = zip_file_add(za, r->m[i].name, s, 0);
    ck_assert_int_ge(idx, 0);
    zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0);
  }
  ck_assert_int_eq(zip_close(za), 0);
}

static void rzip_free(rzip *r) {
  for (int i = 0; i < r->n; i++) free(r->m[i].data);
  r->n = 0;
}

static rmember *rzip_get(rzip *r, const char *name) {
  for (int i = 0; i < r->n; i++)
    if (!strcmp(r->m[i].name, name)) return &r->m[i];
  ck_abort_msg("no member %s", name);
  return NULL;
}

static void rzip_set(rmember *m, const void *data, size_t len) {
  free(m->data);
  m->data = malloc(len + 1);
  memcpy(m->data, data, len);
  m->len = len;
}

static void rzip_drop(rzip *r, const char *name) {
  rmember *m = rzip_get(r, name);
  int i = (int)(m - r->m);
  free(m->data);
  memmove(&r->m[i], &r->m[i + 1], (size_t)(r->n - i - 1) * sizeof r->m[0]);
  r->n--;
}

/* A copy of src with the manifest text replaced by text (len bytes, NULs allowed). */
static const char *with_manifest(const char *src, const char *name, const char *text, size_t len) {
  rzip r;
  const char *out = tpath(name);
  rzip_read(src, &r);
  rzip_set(rzip_get(&r, "manifest.json"), text, len);
  rzip_write(out, &r);
  rzip_free(&r);
  return out;
}

/* The manifest text of src with the first occurrence of from replaced by to. */
static const char *manifest_edit(const char *src, const char *name, const char *from,
                                 const char *to) {
  rzip r;
  char buf[16384];
  rzip_read(src, &r);
  rmember *m = rzip_get(&r, "manifest.json");
  ck_assert_uint_lt(m->len, sizeof buf - 256);
  memcpy(buf, m->data, m->len);
  buf[m->len] = 0;
  char *at = strstr(buf, from);
  ck_assert_msg(at != NULL, "manifest lacks %s", from);
  char tail[16384];
  snprintf(tail, sizeof tail, "%s", at + strlen(from));
  snprintf(at, sizeof buf - (size_t)(at - buf), "%s%s", to, tail);
  rzip_free(&r);
  return with_manifest(src, name, buf, strlen(buf));
}

/* ---- Running kda (tests/kda_test.h) with args (NULL-terminated); returns the exit status
 * (128 + signal).  The last stderr is in g_err. */
static char g_err[4096];
static int kda_run(const char *a0, ...) {
  const char *args[32];
  int n = 0;
  va_list ap;
  args[n++] = a0;
  va_start(ap, a0);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 31) args[n++] = a;
  va_end(ap);
  args[n] = NULL;
  kda_test_result r = {0};
  kda_test_run_argv(&r, args);
  snprintf(g_err, sizeof g_err, "%s", r.err);
  kda_test_result_free(&r);
  return r.status;
}

/* ================================================================ readers */

/* A stored .npy member whose header length field is hl (version v), padded to len bytes. */
static void header_len_member(unsigned char *buf, size_t len, int v, uint32_t hl) {
  memset(buf, ' ', len);
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)v;
  buf[7] = 0;
  for (int i = 0; i < (v == 1 ? 2 : 4); i++) buf[8 + i] = (unsigned char)(hl >> (8 * i));
}

START_TEST(test_header_len_tiny_and_huge) {
  static const struct {
    int v;
    uint32_t hl;
    const char *text;
  } cases[] = {{1, 0, "too short"},         {1, 1, "too short"},    {1, 2, "member 'x'"},
               {2, 0, "member 'x'"},        {3, 1, "member 'x'"},   {1, 65535, "truncated"},
               {2, 0xffffffffu, "member"},  {3, 0x7fffffffu, "member"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    unsigned char buf[64];
    rzip r = {.n = 1};
    header_len_member(buf, sizeof buf, cases[i].v, cases[i].hl);
    snprintf(r.m[0].name, sizeof r.m[0].name, "x.npy");
    r.m[0].data = malloc(sizeof buf);
    memcpy(r.m[0].data, buf, sizeof buf);
    r.m[0].len = 12; /* the prefix alone: the header ends inside the bytes read first */
    rzip_write(tpath("hl.npz"), &r);
    rzip_free(&r);
    char err[KDA_ERRLEN] = "";
    kda_npz *z;
    ck_assert_int_eq(kda_npz_open(tpath("hl.npz"), &z, err, sizeof err), KDA_OK);
    int st = kda_npz_info(z, "x", NULL, err, sizeof err);
    ck_assert_msg(st == KDA_EFORMAT, "v%d HEADER_LEN %u: status %d (%s)", cases[i].v,
                  (unsigned)cases[i].hl, st, err);
    ck_assert_msg(strstr(err, cases[i].text) && strstr(err, "member 'x'"),
                  "v%d HEADER_LEN %u: %s", cases[i].v, (unsigned)cases[i].hl, err);
    kda_npz_close(z);
  }
}
END_TEST

static void put16(unsigned char *p, unsigned v) { p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A zip whose one deflated member "x.npy" declares an <f8 array of 2^28 elements (2 GiB) but
 * holds 64 KiB of deflated zeros: local header, data, central directory, end record. */
static void write_bomb(const char *path) {
  static unsigned char raw[65536], comp[4096], zipb[8192];
  const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (268435456,), }";
  size_t hl = 118, off = 0;
  memset(raw, 0, sizeof raw);
  memcpy(raw, "\x93NUMPY\x01\x00", 8);
  put16(raw + 8, (unsigned)hl);
  memset(raw + 10, ' ', hl);
  memcpy(raw + 10, dict, strlen(dict));
  raw[10 + hl - 1] = '\n';
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  ck_assert_int_eq(deflateInit2(&zs, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  zs.next_in = raw, zs.avail_in = sizeof raw, zs.next_out = comp, zs.avail_out = sizeof comp;
  ck_assert_int_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
  const uint32_t csize = (uint32_t)zs.total_out, usize = 128u + (268435456u * 8u);
  deflateEnd(&zs);
  unsigned char *p = zipb;
  put32(p, 0x04034b50), put16(p + 4, 20), put16(p + 6, 0), put16(p + 8, 8), put16(p + 10, 0);
  put16(p + 12, 0x21), put32(p + 14, 0), put32(p + 18, csize), put32(p + 22, usize);
  put16(p + 26, 5), put16(p + 28, 0), memcpy(p + 30, "x.npy", 5);
  off = 35;
  memcpy(p + off, comp, csize);
  off += csize;
  size_t cd = off;
  p = zipb + cd;
  put32(p, 0x02014b50), put16(p + 4, 20), put16(p + 6, 20), put16(p + 8, 0), put16(p + 10, 8);
  put16(p + 12, 0), put16(p + 14, 0x21), put32(p + 16, 0), put32(p + 20, csize);
  put32(p + 24, usize), put16(p + 28, 5), put16(p + 30, 0), put16(p + 32, 0), put16(p + 34, 0);
  put16(p + 36, 0), put32(p + 38, 0), put32(p + 42, 0), memcpy(p + 46, "x.npy", 5);
  off = cd + 51;
  p = zipb + off;
  put32(p, 0x06054b50), put16(p + 4, 0), put16(p + 6, 0), put16(p + 8, 1), put16(p + 10, 1);
  put32(p + 12, 51), put32(p + 16, (uint32_t)cd), put16(p + 20, 0);
  off += 22;
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(zipb, 1, off, f), off);
  fclose(f);
}

START_TEST(test_zip_bomb_bounded) {
  const char *bomb = tpath("bomb.npz");
  write_bomb(bomb);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    /* 256 MiB of address space (beyond what the process has), unless a sanitizer needs its
     * shadow reservations: the 2 GiB the member declares must never be asked for. */
#if !defined(__SANITIZE_ADDRESS__)
    struct rlimit lim = {(rlim_t)1 << 30, (rlim_t)1 << 30};
    setrlimit(RLIMIT_AS, &lim);
#endif
    char err[KDA_ERRLEN] = "";
    kda_npz *z = NULL;
    int st = kda_npz_open(bomb, &z, err, sizeof err);
    double *x = NULL;
    if (st == KDA_OK) st = kda_npz_load_f64(z, "x", NULL, &x, err, sizeof err);
    _exit(st == KDA_EFORMAT && strstr(err, "member 'x.npy'") && strstr(err, "zip bomb") ? 0 : 1);
  }
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "bomb not refused at open (status %d)", ws);
}
END_TEST

/* A zip of one member name -> bytes (deflated, or stored), written with libzip. */
static void zip_one(const char *path, const char *name, const void *data, size_t len, int deflate) {
  int ze;
  zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &ze);
  ck_assert_ptr_nonnull(za);
  zip_source_t *src = zip_source_buffer(za, data, len, 0);
  ck_assert_ptr_nonnull(src);
  zip_int64_t i = zip_file_add(za, name, src, ZIP_FL_OVERWRITE);
  ck_assert_int_ge(i, 0);
  ck_assert_int_eq(zip_set_file_compression(za, (zip_uint64_t)i,
                                            deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 9), 0);
  ck_assert_int_eq(zip_close(za), 0);
}

/* Honest deflate (each member within deflate's 1032:1) of 64 MiB of zeros in ~64 KB, and a
 * 17 MiB manifest: refused before anything of that size is allocated (SPEC.md §10.1). */
START_TEST(test_zip_bomb_archive_ratio) {
  const size_t n = (size_t)8 << 20; /* float64 elements: 64 MiB */
  unsigned char *raw = calloc(n * 8 + 128, 1);
  ck_assert_ptr_nonnull(raw);
  char dict[128];
  snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (%zu,), }", n);
  memcpy(raw, "\x93NUMPY\x01\x00", 8);
  put16(raw + 8, 118);
  memset(raw + 10, ' ', 118);
  memcpy(raw + 10, dict, strlen(dict));
  raw[127] = '\n';
  zip_one(tpath("zeros.npz"), "x.npy", raw, n * 8 + 128, 1);
  free(raw);
  char err[KDA_ERRLEN] = "";
  kda_npz *z = NULL;
  expect(kda_npz_open(tpath("zeros.npz"), &z, err, sizeof err), KDA_EFORMAT, err, "zeros.npz",
         "zip bomb");
  const size_t mlen = (size_t)17 << 20;
  char *man = malloc(mlen);
  ck_assert_ptr_nonnull(man);
  memset(man, ' ', mlen);
  man[0] = '{', man[mlen - 1] = '}';
  zip_one(tpath("bigman.npz"), "manifest.json", man, mlen, 0);
  free(man);
  kda_case c;
  expect(kda_case_load(tpath("bigman.npz"), &c, err, sizeof err), KDA_EFORMAT, err,
         "manifest.json", "text member");
}
END_TEST

/* A manifest.json within its text cap whose values would cost a parser a hundred times its
 * text (an extra key holding 2^17 empty objects): refused before it is parsed (SPEC.md §10.1). */
START_TEST(test_manifest_values_bounded) {
  rzip r;
  rzip_read(EXAMPLE, &r);
  rmember *m = rzip_get(&r, "manifest.json");
  const size_t n = (size_t)1 << 17, len = 3 * n + m->len + 16;
  char *text = malloc(len), *p = text;
  ck_assert_ptr_nonnull(text);
  p += sprintf(p, "{\"pad\":[");
  for (size_t k = 0; k < n; k++) memcpy(p, "{},", 3), p += 3;
  p[-1] = ']', *p++ = ',';
  const char *open_brace = memchr(m->data, '{', m->len);
  ck_assert_ptr_nonnull(open_brace);
  size_t rest = m->len - (size_t)(open_brace + 1 - (const char *)m->data);
  memcpy(p, open_brace + 1, rest), p += rest;
  rzip_free(&r);
  const char *bad = with_manifest(EXAMPLE, "values.npz", text, (size_t)(p - text));
  free(text);
  char err[KDA_ERRLEN] = "";
  kda_case c;
  expect(kda_case_load(bad, &c, err, sizeof err), KDA_EFORMAT, err, "manifest.json",
         "JSON values");
  ck_assert_int_eq(kda_run("inspect", bad, NULL), 2);
  ck_assert_ptr_nonnull(strstr(g_err, "JSON values"));
}
END_TEST

/* A generated-inputs file of a few KB declaring T = 2^31 - 1 is refused before anything is
 * generated (its hashes would take days to reproduce); --max-generated sets the limit. */
#define GENERATED "vectors/tests/fixtures/generated.npz"
START_TEST(test_generated_cost_bounded) {
  const char *a = manifest_edit(GENERATED, "t1.npz", "\"T\": 256", "\"T\": 2147483647");
  const char *b = manifest_edit(a, "huge.npz", "T=256", "T=2147483647");
  char err[KDA_ERRLEN] = "";
  kda_case c;
  expect(kda_case_load_static(b, &c, err, sizeof err), KDA_EFORMAT, err, "huge.npz",
         "exceed the limit");
  ck_assert_int_eq(kda_run("conform", "-q", "-b", "ref-f64", b, NULL), 2);
  ck_assert_ptr_nonnull(strstr(g_err, "--max-generated"));
  /* the limit is the flag's: the fixture (T = 256) passes by default, not under 100 */
  ck_assert_int_eq(kda_run("conform", "-q", "-b", "ref-f64", "--max-generated", "100",
                           GENERATED, NULL), 2);
  ck_assert_ptr_nonnull(strstr(g_err, "exceed the limit of 100"));
  ck_assert_int_eq(kda_run("conform", "-q", "-b", "ref-f64", GENERATED, NULL), 0);
}
END_TEST

START_TEST(test_manifest_trailing_bytes) {
  rzip r;
  rzip_read(EXAMPLE, &r);
  rmember *m = rzip_get(&r, "manifest.json");
  char buf[16384];
  memcpy(buf, m->data, m->len);
  memcpy(buf + m->len, "\0garbage", 8);
  const char *bad = with_manifest(EXAMPLE, "nul.npz", buf, m->len + 8);
  rzip_free(&r);
  char err[KDA_ERRLEN] = "";
  kda_case c;
  expect(kda_case_load(bad, &c, err, sizeof err), KDA_EFORMAT, err, "manifest.json", "JSON");
  ck_assert_int_eq(kda_run("inspect", bad, NULL), 2);
}
END_TEST

START_TEST(test_ids) {
  static const char *const good[] = {"a", "example", "l0-decay.wipe_2", "A.B-c"};
  static const char *const bad[] = {"", ".", "..", "../x", "a/b", "/abs", "a b", "a\\b", "é"};
  char err[KDA_ERRLEN];
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    ck_assert_msg(kda_id_check(good[i], "id", err, sizeof err) == KDA_OK, "%s: %s", good[i], err);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    ck_assert_msg(kda_id_check(bad[i], "id", err, sizeof err) == KDA_EINVAL, "'%s' accepted", bad[i]);
  char longid[KDA_ID_MAX + 2];
  memset(longid, 'a', sizeof longid - 1);
  longid[sizeof longid - 1] = 0;
  ck_assert_int_eq(kda_id_check(longid, "id", err, sizeof err), KDA_EINVAL);
  kda_case c0;
  for (int64_t i = 0; i < kda_catalog_count(); i++) /* golden files are named by these */
    ck_assert_msg(kda_id_check(kda_catalog_get(i)->id, "catalog id", err, sizeof err) == KDA_OK,
                  "%s", err);
  /* An empty id is no id: the file name stands in for it. */
  const char *noid = manifest_edit(EXAMPLE, "noid.npz", "\"id\": \"example\"", "\"id\": \"\"");
  ck_assert_msg(kda_case_load(noid, &c0, err, sizeof err) == KDA_OK, "%s", err);
  kda_case_free(&c0);
  ck_assert_int_eq(kda_run("conform", "-b", "ref-f64", "--no-prefix", noid, NULL), 0);
  /* Read: a case whose manifest id is "../x". */
  const char *esc = manifest_edit(EXAMPLE, "esc.npz", "\"id\": \"example\"", "\"id\": \"../x\"");
  kda_case c;
  expect(kda_case_load(esc, &c, err, sizeof err), KDA_EFORMAT, err, "esc.npz", "../x");
  mkdir(tpath("prompts"), 0755);
  ck_assert_int_eq(kda_run("conform", "--export-prompts", tpath("prompts"), esc, NULL), 2);
  ck_assert_msg(access(tpath("x.npz"), F_OK) != 0, "export escaped its directory");
  /* Written: kda gen refuses the id. */
  ck_assert_int_eq(kda_run("gen", "seed=1", "T=4", "H=1", "HV=1", "K=2", "V=2", "id=../x", "-o",
                           tpath("prompts/g.npz"), NULL), 2);
  ck_assert_ptr_nonnull(strstr(g_err, "id"));
  ck_assert_msg(access(tpath("x.npz"), F_OK) != 0 && access(tpath("prompts/g.npz"), F_OK) != 0,
                "kda gen wrote a file for id ../x");
}
END_TEST

/* Report text: valid UTF-8, no controls or noncharacters, cut on a character boundary. */
START_TEST(test_text_clean) {
  static const struct { const char *in, *out; int multiline; } rows[] = {
      {"plain", "plain", 0},
      {"a\xff" "b", "a\xef\xbf\xbd" "b", 0},                   /* an invalid byte */
      {"\xc0\x80", "\xef\xbf\xbd\xef\xbf\xbd", 0},        /* an overlong NUL */
      {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 0}, /* a surrogate */
      {"\x1b[31m", "?[31m", 0},                                /* ESC */
      {"\xc2\x9b" "2J", "?2J", 0},                               /* C1 CSI */
      {"x\xef\xbf\xbey\xef\xbf\xbf", "x\xef\xbf\xbdy\xef\xbf\xbd", 0}, /* U+FFFE U+FFFF */
      {"\xe2\x80\xae", "\xef\xbf\xbd", 0},                   /* a bidi override */
      {"a\nb\tc", "a?b?c", 0},
      {"a\nb\tc\r", "a\nb\tc?", 1},
      {"\xc3\xa9\xf0\x9f\x98\x80", "\xc3\xa9\xf0\x9f\x98\x80", 0}, /* é and an emoji stay */
  };
  char buf[64];
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    kda_text_clean(buf, sizeof buf, rows[i].in, rows[i].multiline);
    ck_assert_msg(strcmp(buf, rows[i].out) == 0, "row %zu", i);
    snprintf(buf, sizeof buf, "%s", rows[i].in); /* in place */
    kda_text_clean(buf, sizeof buf, buf, rows[i].multiline);
    ck_assert_msg(strcmp(buf, rows[i].out) == 0, "row %zu in place", i);
  }
  /* "x" then "é"s: a 4-byte buffer keeps "xé", never half of the second "é" */
  ck_assert_uint_eq(kda_text_clean(buf, 5, "x\xc3\xa9\xc3\xa9", 0), 3);
  ck_assert_str_eq(buf, "x\xc3\xa9");
  ck_assert_uint_eq(kda_text_clean(buf, 4, "ab\xff", 0), 2); /* U+FFFD does not fit */
}
END_TEST

/* Inputs read whole are regular files: a FIFO is refused at once, a symlink is not followed,
 * and the size is capped. */
START_TEST(test_input_read) {
  char err[KDA_ERRLEN], *buf;
  size_t len;
  const char *fifo = tpath("fifo"), *link = tpath("link"), *big = tpath("big.json");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  expect(kda_input_read(fifo, 100, &buf, &len, err, sizeof err), KDA_EIO, err, "fifo",
         "not a regular file");
  ck_assert_int_eq(symlink("/etc/passwd", link), 0);
  expect(kda_input_read(link, 100000, &buf, &len, err, sizeof err), KDA_EIO, err, "link",
         "symbolic link");
  FILE *f = fopen(big, "w");
  ck_assert_ptr_nonnull(f);
  fputs("{\"waivers\": []}      ", f);
  fclose(f);
  expect(kda_input_read(big, 8, &buf, &len, err, sizeof err), KDA_EFORMAT, err, "big.json",
         "larger than 8 bytes");
  ck_assert_int_eq(kda_input_read(big, 100, &buf, &len, err, sizeof err), KDA_OK);
  ck_assert_uint_eq(len, 21);
  free(buf);
  /* the waiver and baseline readers use it: a FIFO is an error, not a hang */
  kda_waivers *w;
  expect(kda_waivers_load(fifo, &w, err, sizeof err), KDA_EIO, err, "fifo", "regular");
  kda_baseline *b;
  expect(kda_baseline_load(fifo, &b, err, sizeof err), KDA_EIO, err, "fifo", "regular");
}
END_TEST

/* A write that fails (here EFBIG under RLIMIT_FSIZE, as ENOSPC on a full disk) is reported
 * with its own errno at the commit, whatever other calls set errno to in between. */
START_TEST(test_write_errno_kept) {
  struct rlimit old, small = {4096, 4096};
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  small.rlim_max = old.rlim_max;
  signal(SIGXFSZ, SIG_IGN);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
  kda_atomic *a;
  FILE *f;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_atomic_open(tpath("big.txt"), &a, &f, err, sizeof err), KDA_OK);
  static char big[1 << 16]; /* larger than the stream's buffer: written through at once */
  memset(big, 'x', sizeof big);
  fwrite(big, 1, sizeof big, f);
  errno = EAGAIN; /* what an unrelated call leaves behind */
  int st = kda_atomic_commit(a, err, sizeof err);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  expect(st, KDA_EIO, err, "big.txt", strerror(EFBIG));
  ck_assert_msg(access(tpath("big.txt"), F_OK) != 0, "a failed write left its target");
}
END_TEST

START_TEST(test_golden_verify_load_error) {
  /* A damaged generator-made file is an error of --verify, never "not generator-made". */
  rzip r;
  rzip_read(EXAMPLE, &r);
  rzip_drop(&r, "q.npy");
  rzip_write(tpath("broken.npz"), &r);
  rzip_free(&r);
  char err[KDA_ERRLEN] = "";
  int st = kda_golden_regen_generated(tpath("broken.npz"), tpath("regen.npz"), err, sizeof err);
  ck_assert_msg(st != KDA_OK && st != KDA_ENOTFOUND, "status %d (%s)", st, err);
  ck_assert_ptr_nonnull(strstr(err, "broken.npz"));
  /* A valid file without a description still is "not generator-made". */
  ck_assert_int_eq(kda_golden_regen_generated(GOLDEN, tpath("regen.npz"), err, sizeof err),
                   KDA_ENOTFOUND);
}
END_TEST

static void copy_file(const char *from, const char *to) {
  unsigned char *b = NULL;
  size_t n = 0;
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_golden_slurp(from, &b, &n, err, sizeof err) == KDA_OK, "%s", err);
  FILE *f = fopen(to, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(b, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
  free(b);
}

START_TEST(test_golden_verify_cli) {
  /* A copy of golden/ (L1 and grad linked) whose example.npz lost a member and whose SHA256SUMS was
   * updated to match: --verify must fail and name the file. */
  static const char *const top[] = {"SHA256SUMS", "L2.sha256", ".gitignore", "example/README.md"};
  char from[512], to[512], hex[65];
  mkdir(tpath("g"), 0755), mkdir(tpath("g/L0"), 0755), mkdir(tpath("g/example"), 0755);
  char cwd[400];
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
  snprintf(from, sizeof from, "%s/golden/L1", cwd);
  ck_assert_int_eq(symlink(from, tpath("g/L1")), 0);
  snprintf(from, sizeof from, "%s/golden/grad", cwd); /* listed in SHA256SUMS too */
  ck_assert_int_eq(symlink(from, tpath("g/grad")), 0);
  for (int i = 0; i < 4; i++) {
    snprintf(from, sizeof from, "golden/%s", top[i]);
    snprintf(to, sizeof to, "%s/g/%s", kda_test_tmpdir, top[i]);
    copy_file(from, to);
  }
  DIR *d = opendir("golden/L0");
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(from, sizeof from, "golden/L0/%s", e->d_name);
    snprintf(to, sizeof to, "%s/g/L0/%s", kda_test_tmpdir, e->d_name);
    copy_file(from, to);
  }
  closedir(d);
  copy_file(EXAMPLE, tpath("g/example/example.npz"));
  ck_assert_int_eq(kda_run("golden", "--verify", "--level", "L0", tpath("g"), NULL), 0);
  rzip r;
  rzip_read(EXAMPLE, &r);
  rzip_drop(&r, "q.npy");
  rzip_write(tpath("g/example/example.npz"), &r);
  rzip_free(&r);
  unsigned char *b;
  size_t n;
  char err[KDA_ERRLEN], *sums;
  ck_assert_int_eq(kda_golden_slurp(tpath("g/example/example.npz"), &b, &n, err, sizeof err), 0);
  kda_sha256_of(b, n, hex);
  free(b);
  ck_assert_int_eq(kda_golden_slurp(tpath("g/SHA256SUMS"), &b, &n, err, sizeof err), 0);
  sums = (char *)b;
  char *line = strstr(sums, "  example/example.npz");
  ck_assert_ptr_nonnull(line);
  memcpy(line - 64, hex, 64);
  FILE *f = fopen(tpath("g/SHA256SUMS"), "wb");
  fwrite(b, 1, n, f);
  fclose(f);
  free(b);
  int rc = kda_run("golden", "--verify", "--level", "L0", tpath("g"), NULL);
  ck_assert_msg(rc != 0, "--verify passed a broken example.npz");
}
END_TEST

/* A copy of GOLDEN with the first element of member name doubled (its bytes change, its
 * recorded hash does not). */
static const char *golden_doubled(const char *name, const char *out) {
  rzip r;
  char mem[64];
  rzip_read(GOLDEN, &r);
  snprintf(mem, sizeof mem, "%s.npy", name);
  rmember *m = rzip_get(&r, mem);
  size_t hl = (size_t)m->data[8] | (size_t)m->data[9] << 8;
  unsigned char *d = m->data + 10 + hl;
  if (strstr((char *)m->data + 10, "<f8")) {
    double x;
    memcpy(&x, d, 8), x = x * 2 + (x == 0), memcpy(d, &x, 8);
  } else {
    float x;
    memcpy(&x, d, 4), x = x * 2 + (x == 0), memcpy(d, &x, 4);
  }
  rzip_write(tpath(out), &r);
  rzip_free(&r);
  return tpath(out);
}

START_TEST(test_golden_truth_verified) {
  static const char *const members[] = {"v", "o"};
  for (int i = 0; i < 2; i++) {
    const char *bad = golden_doubled(members[i], "doubled.npz");
    char err[KDA_ERRLEN] = "";
    kda_case c;
    kda_truth t;
    ck_assert_msg(kda_case_load(bad, &c, err, sizeof err) == KDA_OK, "%s", err);
    expect(kda_truth_compute(&c, bad, &t, err, sizeof err), KDA_EFORMAT, err,
           "golden outputs not verified", members[i]);
    kda_case_free(&c);
    /* kda conform: a runner error for that file (exit 2), not a Fail of every backend. */
    ck_assert_int_eq(kda_run("conform", "-b", "ref-f64", "--no-prefix", bad, NULL), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "doubled.npz"));
    /* kda inspect prints the file, says MISMATCH and exits 1: a check failed (§12.2) */
    ck_assert_int_eq(kda_run("inspect", bad, NULL), 1);
    ck_assert_int_eq(kda_run("inspect", "--json", bad, NULL), 1);
  }
  ck_assert_int_eq(kda_run("inspect", GOLDEN, NULL), 0);
  ck_assert_int_eq(kda_run("conform", "-b", "ref-f64", "--no-prefix", GOLDEN, NULL), 0);
}
END_TEST

/* ---- Sizes bounded by the data (SPEC.md §10.2). */
/* A case of description desc (T = 0: every float member empty) written member by member, as
 * an outside tool would: kda_case_save refuses to write what the bound refuses. */
static const char *empty_case(const char *desc, const char *name, int save_refused) {
  char err[KDA_ERRLEN] = "";
  kda_gen_desc d;
  kda_case c;
  ck_assert_msg(kda_gen_parse(desc, &d, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(kda_gen_case(&d, &c, err, sizeof err) == KDA_OK, "%s", err);
  kda_gen_desc_free(&d);
  const char *path = tpath(name);
  int st = kda_case_save(path, &c, NULL, err, sizeof err);
  ck_assert_msg(st == (save_refused ? KDA_EFORMAT : KDA_OK), "save %s: %d %s", desc, st, err);
  kda_npz_writer *w;
  const kda_problem *p = &c.p;
  int64_t qs[3] = {0, p->H, p->K}, vs[3] = {0, p->HV, p->V}, bs[2] = {0, p->HV}, cs[1] = {2};
  const int64_t cu[2] = {0, 0};
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, c.manifest_json, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add(w, "q", KDA_DTYPE_F32, 3, qs, NULL, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add(w, "k", KDA_DTYPE_F32, 3, qs, NULL, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add(w, "v", KDA_DTYPE_F32, 3, vs, NULL, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add(w, "beta", KDA_DTYPE_F32, 2, bs, NULL, err, sizeof err),
                   KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add(w, "cu_seqlens", KDA_DTYPE_I64, 1, cs, cu, err, sizeof err),
                   KDA_OK);
  ck_assert_msg(kda_npz_writer_commit(w, err, sizeof err) == KDA_OK, "%s", err);
  kda_case_free(&c);
  return path;
}

/* T = 0 with K = V = 65536 declares a 32 GiB state in a file of 2 KB: refused on load with
 * KDA_EFORMAT naming the file, before anything is allocated; kda ref and kda conform exit 2.
 * A state of exactly the free bound (K = V = 4096) still loads. */
START_TEST(test_alloc_bounded_by_data) {
  const char *huge = empty_case("T=0 K=65536 V=65536 family=deltanet id=huge", "huge.npz", 1);
  char err[KDA_ERRLEN] = "";
  kda_case c;
  expect(kda_case_load(huge, &c, err, sizeof err), KDA_EFORMAT, err, "huge.npz",
         "needs 4294967296 output and state elements but the file holds 2 input elements");
#if !defined(__SANITIZE_ADDRESS__)
  struct rlimit lim = {(rlim_t)2 << 30, (rlim_t)2 << 30}; /* were it allocated: ENOMEM, not OOM */
  setrlimit(RLIMIT_AS, &lim);
#endif
  ck_assert_int_eq(kda_run("ref", huge, "-o", tpath("huge-out.npz"), NULL), 2);
  ck_assert_msg(strstr(g_err, "huge.npz") && strstr(g_err, "SPEC.md 10.2"), "%s", g_err);
  ck_assert_int_eq(access(tpath("huge-out.npz"), F_OK), -1);
  ck_assert_int_eq(kda_run("conform", "-b", "ref-f64", huge, NULL), 2);
  ck_assert_msg(strstr(g_err, "huge.npz") && strstr(g_err, "input elements"), "%s", g_err);
  const char *edge = empty_case("T=0 K=4096 V=4096 family=deltanet id=edge", "edge.npz", 0);
  ck_assert_msg(kda_case_load(edge, &c, err, sizeof err) == KDA_OK, "%s", err);
  kda_case_free(&c);
}
END_TEST

/* ---- Result files. */
static void make_result(const char *path, const kda_case *c, const char *manifest,
                        const char *member, int32_t dtype, int ndim, const int64_t *shape,
                        const double *o, const double *ht) {
  char err[KDA_ERRLEN] = "";
  kda_npz_writer *w;
  const kda_problem *p = &c->p;
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, manifest, err, sizeof err), KDA_OK);
  if (member) {
    int64_t os[3] = {p->T, p->HV, p->V}, hs[4] = {p->N, p->HV, p->K, p->V};
    int is_o = !strcmp(member, "o");
    ck_assert_msg(kda_npz_writer_add_f64(w, "o", is_o ? dtype : KDA_DTYPE_F32, is_o ? ndim : 3,
                                         is_o ? shape : os, o, err, sizeof err) == KDA_OK, "%s", err);
    ck_assert_msg(kda_npz_writer_add_f64(w, "ht", is_o ? KDA_DTYPE_F32 : dtype, is_o ? 4 : ndim,
                                         is_o ? hs : shape, ht, err, sizeof err) == KDA_OK, "%s", err);
  }
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
}

START_TEST(test_result_shapes_dtypes) {
  char err[KDA_ERRLEN] = "";
  kda_case c;
  kda_truth t;
  ck_assert_int_eq(kda_case_load(EXAMPLE, &c, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_truth_compute(&c, EXAMPLE, &t, err, sizeof err), KDA_OK);
  const kda_problem *p = &c.p;
  const char *man = "{\"schema\": \"kda-result/1\", \"case_id\": \"example\"}";
  const int64_t good[3] = {p->T, p->HV, p->V}, flat[1] = {p->T * p->HV * p->V},
                trans[3] = {p->T, p->V, p->HV}, htt[4] = {p->N, p->HV, p->V + 1, p->K};
  static const struct {
    const char *member;
    int32_t dtype;
    int ndim;
    int which; /* 0 good, 1 flat, 2 transposed, 3 bad ht */
    int status;
    const char *text;
  } cases[] = {
      {"o", KDA_DTYPE_F32, 3, 0, KDA_OK, NULL},
      {"o", KDA_DTYPE_F64, 3, 0, KDA_OK, NULL},
      {"o", KDA_DTYPE_F32, 1, 1, KDA_ESHAPE, "member 'o' has shape"},
      {"o", KDA_DTYPE_F32, 3, 2, KDA_ESHAPE, "expected (16, 4, 8)"},
      {"o", KDA_DTYPE_F16, 3, 0, KDA_EDTYPE, "'<f2'"},
      {"o", KDA_DTYPE_I64, 3, 0, KDA_EDTYPE, "'<i8'"},
      {"ht", KDA_DTYPE_F32, 4, 3, KDA_ESHAPE, "member 'ht'"},
  };
  uint64_t nht = (uint64_t)(p->N * p->HV * p->K * p->V);
  double *ht = calloc(nht + 64, sizeof *ht), *o = calloc(t.out.n_o + 64, sizeof *o);
  memcpy(ht, t.out.ht, nht * sizeof *ht);
  for (uint64_t i = 0; i < t.out.n_o; i++) o[i] = (double)(float)t.out.o[i];
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const int64_t *sh = cases[i].which == 0 ? good : cases[i].which == 1 ? flat
                        : cases[i].which == 2 ? trans : htt;
    if (cases[i].dtype == KDA_DTYPE_I64) for (uint64_t j = 0; j < t.out.n_o; j++) o[j] = 1;
    make_result(tpath("r.npz"), &c, man, cases[i].member, cases[i].dtype, cases[i].ndim, sh, o, ht);
    int st = kda_result_load(tpath("r.npz"), &c, o, ht, NULL, err, sizeof err);
    ck_assert_msg(st == cases[i].status, "case %zu: status %d (%s)", i, st, err);
    if (cases[i].text) ck_assert_msg(strstr(err, cases[i].text), "case %zu: %s", i, err);
    /* Scored as a candidate: a precise Fail, never a Pass. */
    kda_conform_opts opts;
    kda_case_report r;
    kda_conform_opts_init(&opts);
    ck_assert_int_eq(kda_conform_candidate(tpath("r.npz"), &c, &t, KDA_CLASS_FP32, &opts, &r,
                                           err, sizeof err), KDA_OK);
    if (cases[i].status != KDA_OK) {
      ck_assert_int_eq(r.verdict, KDA_VERDICT_FAIL);
      ck_assert_msg(strstr(r.reason, cases[i].text), "case %zu: reason %s", i, r.reason);
    }
    kda_case_report_free(&r);
  }
  /* NotSupported with its reason; members may be absent. */
  make_result(tpath("ns.npz"), &c,
              "{\"schema\":\"kda-result/1\",\"case_id\":\"example\",\"not_supported\":\"no vk\"}",
              NULL, 0, 0, NULL, NULL, NULL);
  expect(kda_result_load(tpath("ns.npz"), &c, o, ht, NULL, err, sizeof err), KDA_EUNSUPPORTED,
         err, "no vk", NULL);
  kda_conform_opts opts;
  kda_case_report r;
  kda_conform_opts_init(&opts);
  ck_assert_int_eq(kda_conform_candidate(tpath("ns.npz"), &c, &t, KDA_CLASS_FP32, &opts, &r, err,
                                         sizeof err), KDA_OK);
  ck_assert_int_eq(r.verdict, KDA_VERDICT_NOT_SUPPORTED);
  ck_assert_ptr_nonnull(strstr(r.reason, "no vk"));
  kda_case_report_free(&r);
  /* case_id must be an id. */
  make_result(tpath("id.npz"), &c, "{\"schema\":\"kda-result/1\",\"case_id\":\"../x\"}", "o",
              KDA_DTYPE_F32, 3, good, o, ht);
  expect(kda_result_load(tpath("id.npz"), &c, o, ht, NULL, err, sizeof err), KDA_EFORMAT, err,
         "case_id", "../x");
  /* kda conform: a missing candidate is a Fail (exit 1); a NotSupported candidate is skipped,
   * and a run where every case was skipped as NotSupported ran nothing (exit 5, SPEC §12.2). */
  mkdir(tpath("cand"), 0755);
  ck_assert_int_eq(kda_run("conform", "--candidate", tpath("cand"), EXAMPLE, NULL), 1);
  rename(tpath("ns.npz"), tpath("cand/example.npz"));
  ck_assert_int_eq(kda_run("conform", "--candidate", tpath("cand"), EXAMPLE, NULL), 5);
  free(o), free(ht);
  kda_truth_free(&t);
  kda_case_free(&c);
}
END_TEST

/* ================================================================ writers */

START_TEST(test_targets_refused) {
  char err[KDA_ERRLEN] = "";
  kda_npz_writer *w;
  kda_atomic *a;
  FILE *f;
  ck_assert_int_eq(mkfifo(tpath("fifo"), 0644), 0);
  ck_assert_int_eq(symlink(EXAMPLE, tpath("link.npz")), 0);
  mkdir(tpath("dir"), 0755);
  const char *targets[] = {tpath("fifo"), tpath("link.npz"), tpath("dir"), "/dev/null"};
  for (int i = 0; i < 4; i++) {
    expect(kda_npz_writer_open(targets[i], &w, err, sizeof err), KDA_EIO, err,
           "not a regular file", targets[i]);
    expect(kda_atomic_open(targets[i], &a, &f, err, sizeof err), KDA_EIO, err,
           "not a regular file", NULL);
    expect(kda_atomic_write(targets[i], "x", 1, err, sizeof err), KDA_EIO, err,
           "not a regular file", NULL);
  }
  ck_assert_int_eq(count_tmp(kda_test_tmpdir), 0);
  /* Output = input, also through another name (a hard link). */
  ck_assert_int_eq(kda_run("gen", "seed=1", "T=4", "H=1", "HV=1", "K=2", "V=2", "id=in", "-o",
                           tpath("in.npz"), NULL), 0);
  ck_assert_int_eq(link(tpath("in.npz"), tpath("alias.npz")), 0);
  ck_assert_int_eq(kda_run("ref", tpath("in.npz"), "-o", tpath("alias.npz"), NULL), 2);
  ck_assert_ptr_nonnull(strstr(g_err, "input"));
  ck_assert_int_eq(kda_run("conform", "--export-prompts", kda_test_tmpdir, tpath("in.npz"), NULL),
                   2);
  ck_assert_int_eq(kda_run("conform", "-b", "ref-f64", "--no-prefix", "--junit",
                           tpath("alias.npz"), tpath("in.npz"), NULL), 2);
  ck_assert_int_eq(kda_run("conform", "-b", "ref-f64", "--no-prefix", "--record-baseline",
                           tpath("in.npz"), tpath("in.npz"), NULL), 2);
  /* two reports to one file (also through another spelling of it): refused before the run */
  ck_assert_int_eq(kda_run("conform", "-b", "ref-f64", "--no-prefix", "--jsonl", tpath("r.txt"),
                           "--summary", tpath("./r.txt"), tpath("in.npz"), NULL), 2);
  ck_assert_msg(strstr(g_err, "another report"), "%s", g_err);
  ck_assert_int_eq(kda_run("conform", "-b", "ref-f64", "--no-prefix", "--out", kda_test_tmpdir,
                           "--record-baseline", tpath("junit.xml"), tpath("in.npz"), NULL), 2);
  ck_assert_msg(strstr(g_err, "another report") && access(tpath("r.txt"), F_OK) != 0, "%s", g_err);
  kda_case c;
  ck_assert_int_eq(kda_case_load(tpath("in.npz"), &c, err, sizeof err), KDA_OK);
  kda_case_free(&c);
  ck_assert_int_eq(kda_run("conform", "-b", "ref-f64", "--no-prefix", "--junit", "/dev/full",
                           tpath("in.npz"), NULL), 2);
  /* kda explore: its page never replaces the case or the result it reads */
  size_t len0 = 0, len1 = 0;
  unsigned char *before = kda_test_slurp(tpath("in.npz"), &len0);
  ck_assert_int_eq(kda_run("explore", tpath("in.npz"), "-o", tpath("alias.npz"), NULL), 2);
  ck_assert_ptr_nonnull(strstr(g_err, "input"));
  ck_assert_int_eq(kda_run("ref", tpath("in.npz"), "-o", tpath("r.npz"), NULL), 0);
  ck_assert_int_eq(kda_run("explore", tpath("in.npz"), "--result", tpath("r.npz"), "-o",
                           tpath("r.npz"), NULL), 2);
  ck_assert_ptr_nonnull(strstr(g_err, "input"));
  unsigned char *after = kda_test_slurp(tpath("in.npz"), &len1);
  ck_assert_msg(len0 == len1 && memcmp(before, after, len0) == 0, "explore replaced its input");
  free(before), free(after);
}
END_TEST

/* Two case files with one id: refused (reports, waivers and DIR/ID.npz could not tell them
 * apart), and --export-prompts refuses them before it writes anything. */
START_TEST(test_duplicate_case_ids) {
  ck_assert_int_eq(kda_run("gen", "seed=1", "T=4", "H=1", "HV=1", "K=2", "V=2", "id=same", "-o",
                           tpath("a.npz"), NULL), 0);
  ck_assert_int_eq(kda_run("gen", "seed=2", "T=4", "H=1", "HV=1", "K=2", "V=2", "id=same", "-o",
                           tpath("b.npz"), NULL), 0);
  ck_assert_int_eq(kda_run("conform", "-q", "-b", "ref-f64", tpath("a.npz"), tpath("b.npz"),
                           NULL), 2);
  ck_assert_msg(strstr(g_err, "two cases with one id") && strstr(g_err, "b.npz"), "%s", g_err);
  mkdir(tpath("p"), 0755);
  ck_assert_int_eq(kda_run("conform", "--export-prompts", tpath("p"), tpath("a.npz"),
                           tpath("b.npz"), NULL), 2);
  ck_assert_ptr_nonnull(strstr(g_err, "two cases with one id"));
  /* refused before anything is exported: no set half-written */
  ck_assert_msg(kda_test_count_entries(tpath("p")) == 0, "--export-prompts wrote files before "
                "refusing two cases with one id");
}
END_TEST

START_TEST(test_report_write_failure) {
  char err[KDA_ERRLEN] = "";
  kda_atomic *a;
  FILE *f;
  /* A failed commit (the full-disk hook) leaves the old target and no temporary file. */
  FILE *old = fopen(tpath("rep.txt"), "w");
  fputs("old\n", old);
  fclose(old);
  ck_assert_int_eq(kda_atomic_open(tpath("rep.txt"), &a, &f, err, sizeof err), KDA_OK);
  fputs("new\n", f);
  setenv("KDA_TEST_FAIL_WRITE", "rep.txt", 1);
  expect(kda_atomic_commit(a, err, sizeof err), KDA_EIO, err, "rep.txt", "No space");
  unsetenv("KDA_TEST_FAIL_WRITE");
  char buf[16] = "";
  old = fopen(tpath("rep.txt"), "r");
  ck_assert_ptr_nonnull(fgets(buf, sizeof buf, old));
  fclose(old);
  ck_assert_str_eq(buf, "old\n");
  ck_assert_int_eq(count_tmp(kda_test_tmpdir), 0);
  ck_assert_int_eq(kda_atomic_open(tpath("rep.txt"), &a, &f, err, sizeof err), KDA_OK);
  fputs("new\n", f);
  ck_assert_int_eq(kda_atomic_commit(a, err, sizeof err), KDA_OK);
  /* kda conform on a failing disk, each report in turn: exit 2, that report absent, nothing
   * left over. */
  static const char *const reps[] = {"results.jsonl", "summary.json", "junit.xml", "base.json"};
  for (int i = 0; i < 4; i++) {
    char want[600];
    snprintf(want, sizeof want, "%s/%s", tpath("out"), reps[i]);
    setenv("KDA_TEST_FAIL_WRITE", reps[i], 1);
    int rc = kda_run("conform", "-b", "ref-f64", "--no-prefix", "--out", tpath("out"),
                     "--record-baseline", tpath("out/base.json"), EXAMPLE, NULL);
    unsetenv("KDA_TEST_FAIL_WRITE");
    ck_assert_msg(rc == 2, "%s: exit %d", reps[i], rc);
    ck_assert_msg(strstr(g_err, "No space") && strstr(g_err, reps[i]), "%s: %s", reps[i], g_err);
    ck_assert_msg(access(want, F_OK) != 0, "%s written", reps[i]);
    ck_assert_int_eq(count_tmp(tpath("out")), 0);
  }
  /* results.jsonl failing as the run goes (more lines than a stream buffer holds): one line
   * naming the file, the case and the errno of the write, no stale one */
  setenv("KDA_TEST_FAIL_WRITE", "results.jsonl", 1);
  int rc = kda_run("conform", "-q", "-b", "ref-f64", "-b", "ref-f32", "--no-prefix", "--out",
                   tpath("out"), "golden/L0", NULL);
  unsetenv("KDA_TEST_FAIL_WRITE");
  ck_assert_msg(rc == 2 && strstr(g_err, "results.jsonl: cannot write the report of case") &&
                strstr(g_err, "No space left on device") &&
                strchr(g_err, '\n') == g_err + strlen(g_err) - 1, "exit %d: %s", rc, g_err);
  ck_assert_int_eq(count_tmp(tpath("out")), 0);
  /* The golden writer's text files (manifests, SHA256SUMS) likewise. */
  setenv("KDA_TEST_FAIL_WRITE", "rep.txt", 1);
  expect(kda_atomic_write(tpath("rep.txt"), "x", 1, err, sizeof err), KDA_EIO, err,
         "No space", NULL);
  unsetenv("KDA_TEST_FAIL_WRITE");
  ck_assert_int_eq(count_tmp(kda_test_tmpdir), 0);
  /* A result file (kda ref, the npz writer) likewise. */
  setenv("KDA_TEST_FAIL_WRITE", "res.npz", 1);
  ck_assert_int_eq(kda_run("ref", EXAMPLE, "-o", tpath("res.npz"), NULL), 2);
  unsetenv("KDA_TEST_FAIL_WRITE");
  ck_assert_int_eq(access(tpath("res.npz"), F_OK), -1);
  ck_assert_int_eq(count_tmp(kda_test_tmpdir), 0);
  ck_assert_int_eq(kda_run("conform", "-b", "ref-f64", "--no-prefix", "--out", tpath("out"),
                           EXAMPLE, NULL), 0);
  ck_assert_int_eq(access(tpath("out/junit.xml"), F_OK), 0);
}
END_TEST

START_TEST(test_sigterm_removes_tmp) {
  /* kda conform --out with a backend that hangs: the report's temporary file exists while
   * the call runs; SIGTERM must remove it. */
  /* the plugin is built next to the kda under test: BUILD/conformance/tests */
  char so[600];
  snprintf(so, sizeof so, "%s", kda_test_plugin_path("kda_plugin_hang.so"));
  ck_assert_msg(access(so, F_OK) == 0, "no %s", so);
  mkdir(tpath("out"), 0755);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    int dn = open("/dev/null", O_WRONLY);
    dup2(dn, 1), dup2(dn, 2);
    execl(kda_test_bin(), kda_test_bin(), "conform", "-p", so, "--timeout", "600", "--out",
          tpath("out"), EXAMPLE, (char *)NULL);
    _exit(127);
  }
  setpgid(pid, pid);
  int seen = 0;
  for (int i = 0; i < 3000 && !seen; i++) { /* until the report's temporary file exists */
    seen = count_tmp(tpath("out")) > 0;
    if (!seen) usleep(10000);
  }
  ck_assert_msg(seen, "kda conform made no temporary file");
  ck_assert_int_eq(kill(pid, SIGTERM), 0);
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  kill(-pid, SIGKILL); /* the hanging backend child, if still there */
  ck_assert_msg(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGTERM, "status %d", ws);
  ck_assert_int_eq(count_tmp(tpath("out")), 0);
}
END_TEST

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The children of process pid (from /proc), at most cap of them. */
static int children_of(pid_t pid, pid_t *out, int cap) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  int n = 0;
  while (d && (e = readdir(d)) != NULL && n < cap) {
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    char *rp = strrchr(buf, ')');
    int ppid = 0;
    char st;
    if (rp && sscanf(rp + 1, " %c %d", &st, &ppid) == 2 && ppid == pid) out[n++] = atoi(e->d_name);
  }
  if (d) closedir(d);
  return n;
}

/* 1 when pid is gone (or a zombie) within seconds. */
static int gone(pid_t pid, double seconds) {
  for (int k = 0; k < (int)(seconds * 100); k++) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    if (rp && rp[1] == ' ' && rp[2] == 'Z') return 1;
    usleep(10000);
  }
  return 0;
}

/* kda golden --write --jobs 2 killed by SIGTERM or SIGKILL leaves no worker running, and a
 * later run removes the temporary files a killed one left. */
/* 1 when dir's lock (kda_dir_lock) can be taken within seconds: the kernel releases a dead
 * writer's flock when the last descriptor of it is put, which may trail its exit a little. */
static int lock_released(const char *dir, double seconds) {
  const double deadline = now_s() + seconds;
  char err[KDA_ERRLEN];
  int fd;
  do {
    if (access(dir, F_OK) != 0) return 1;
    if (kda_dir_lock(dir, &fd, err, sizeof err) == KDA_OK) return kda_dir_unlock(fd), 1;
    usleep(10000);
  } while (now_s() < deadline);
  return 0;
}

START_TEST(test_golden_workers_die_with_parent) {
  static const int sigs[2] = {SIGTERM, SIGKILL};
  for (int k = 0; k < 2; k++) {
    ck_assert_msg(lock_released(tpath("g"), 10), "%s stays locked 10 s after kda golden and its "
                  "workers died", tpath("g"));
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      int devnull = open("/dev/null", O_WRONLY), errfd = creat(tpath("golden.err"), 0644);
      dup2(devnull, 1), dup2(errfd >= 0 ? errfd : devnull, 2);
      execl(kda_test_bin(), "kda", "golden", "--write", "--level", "L1", "--jobs", "2",
            tpath("g"), (char *)NULL);
      _exit(127);
    }
    /* both workers seen, polled on the clock (a loaded machine), or kda golden's exit and
     * its message when it ended before they were */
    pid_t kids[8];
    int n = 0, status = 0;
    const double deadline = now_s() + 120;
    while (n < 2 && now_s() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        size_t len = 0;
        char *msg = (char *)kda_test_slurp(tpath("golden.err"), &len);
        ck_abort_msg("kda golden --jobs 2 ended (status %d) before its workers were seen: %s",
                     status, msg);
      }
      usleep(10000);
      n = children_of(pid, kids, 8);
    }
    ck_assert_msg(n == 2, "kda golden --jobs 2 started %d workers within 120 s", n);
    kill(pid, sigs[k]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    for (int j = 0; j < n; j++)
      ck_assert_msg(gone(kids[j], 5.0), "worker %d outlived kda golden (signal %d)", (int)kids[j],
                    sigs[k]);
  }
  /* what a killed run may leave: removed by the next one, which holds the directory */
  mkdir(tpath("g/L0"), 0755);
  kda_test_write_all(tpath("g/SHA256SUMS.tmp.abc123"), "x", 1);
  kda_test_write_all(tpath("g/L0/l0-basic.npz.tmp.zz09yy"), "x", 1);
  ck_assert_msg(lock_released(tpath("g"), 10), "%s stays locked after kda golden died",
                tpath("g"));
  ck_assert_msg(kda_run("golden", "--write", "--level", "L0", tpath("g"), NULL) == 0, "%s", g_err);
  ck_assert_int_eq(count_tmp(tpath("g")), 0);
  ck_assert_int_eq(count_tmp(tpath("g/L0")), 0);
}
END_TEST

/* Two writers into one directory: the second is refused, one line, nothing written. */
START_TEST(test_output_dir_locked) {
  char err[KDA_ERRLEN];
  int fd;
  ck_assert_int_eq(mkdir(tpath("g"), 0755), 0);
  ck_assert_int_eq(kda_dir_lock(tpath("g"), &fd, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_run("golden", "--write", "--level", "L0", tpath("g"), NULL), 2);
  ck_assert_msg(strstr(g_err, "another kda is writing") &&
                strchr(g_err, '\n') == g_err + strlen(g_err) - 1, "not one line: %s", g_err);
  ck_assert_int_eq(kda_test_count_entries(tpath("g/L0")), 0);
  ck_assert_int_eq(kda_run("conform", "-q", "-b", "ref-f64", "--out", tpath("g"),
                           "golden/example", NULL), 2);
  ck_assert_ptr_nonnull(strstr(g_err, "another kda is writing"));
  kda_dir_unlock(fd);
  ck_assert_int_eq(kda_run("conform", "-q", "-b", "ref-f64", "--out", tpath("g"),
                           "golden/example", NULL), 0);
}
END_TEST

static Suite *files_suite(void) {
  Suite *s = suite_create("files");
  TCase *tc = tcase_create("readers");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_header_len_tiny_and_huge);
  tcase_add_test(tc, test_zip_bomb_bounded);
  tcase_add_test(tc, test_zip_bomb_archive_ratio);
  tcase_add_test(tc, test_manifest_values_bounded);
  tcase_add_test(tc, test_generated_cost_bounded);
  tcase_add_test(tc, test_manifest_trailing_bytes);
  tcase_add_test(tc, test_ids);
  tcase_add_test(tc, test_text_clean);
  tcase_add_test(tc, test_input_read);
  tcase_add_test(tc, test_golden_verify_load_error);
  tcase_add_test(tc, test_golden_verify_cli);
  tcase_add_test(tc, test_golden_truth_verified);
  tcase_add_test(tc, test_result_shapes_dtypes);
  tcase_add_test(tc, test_alloc_bounded_by_data);
  suite_add_tcase(s, tc);
  tc = tcase_create("writers");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300); /* a loaded machine: kda golden's workers polled for 120 s */
  tcase_add_test(tc, test_targets_refused);
  tcase_add_test(tc, test_duplicate_case_ids);
  tcase_add_test(tc, test_report_write_failure);
  tcase_add_test(tc, test_write_errno_kept);
  tcase_add_test(tc, test_golden_workers_die_with_parent);
  tcase_add_test(tc, test_output_dir_locked);
  tcase_add_test(tc, test_sigterm_removes_tmp);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return kda_test_main(files_suite(), CK_ENV, CK_FORK_GETENV); }

/* kda_test.c: the helpers every Check test program shares (tests/kda_test.h).
 * SPDX-License-Identifier: MIT
 */
#include "kda_test.h"
#include "kda_case.h"
#include "kda_conform.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---- Temporary directories. */

char kda_test_tmpdir[KDA_TEST_TMPDIR_MAX];

void kda_test_tmpdir_make(const char *tag) {
  const char *base = getenv("TMPDIR");
  const int n = snprintf(kda_test_tmpdir, sizeof kda_test_tmpdir, "%s/kda-%s-XXXXXX",
                         base && *base ? base : "/tmp", tag);
  if (n < 0 || (size_t)n >= sizeof kda_test_tmpdir) {
    fprintf(stderr, "TMPDIR %s: too long for a test directory\n", base);
    abort();
  }
  if (mkdtemp(kda_test_tmpdir) == NULL) {
    fprintf(stderr, "mkdtemp(%s): %s\n", kda_test_tmpdir, strerror(errno));
    abort();
  }
}

void kda_test_rm_tree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0) return;
  if (!S_ISDIR(sb.st_mode)) {
    unlink(path);
    return;
  }
  DIR *d = opendir(path);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    kda_test_rm_tree(sub);
  }
  if (d) closedir(d);
  rmdir(path);
}

void kda_test_tmpdir_remove(void) {
  if (kda_test_tmpdir[0]) kda_test_rm_tree(kda_test_tmpdir);
  kda_test_tmpdir[0] = '\0';
}

char *kda_test_join(const char *dir, const char *name) {
  static char bufs[64][512];
  static int next;
  char *b = bufs[next++ % 64];
  snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
  return b;
}

const char *kda_test_path(const char *name) { return kda_test_join(kda_test_tmpdir, name); }

/* ---- Whole files. */

unsigned char *kda_test_read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0, got;
  unsigned char *buf = malloc(cap + 1);
  ck_assert_ptr_nonnull(buf);
  while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      cap *= 2;
      buf = realloc(buf, cap + 1);
      ck_assert_ptr_nonnull(buf);
    }
  }
  ck_assert_msg(!ferror(f), "cannot read %s", path);
  fclose(f);
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

unsigned char *kda_test_slurp(const char *path, size_t *len) {
  unsigned char *b = kda_test_read_all(path, len);
  ck_assert_msg(b != NULL, "cannot open %s: %s", path, strerror(errno));
  return b;
}

void kda_test_write_all(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_msg(f != NULL, "cannot create %s: %s", path, strerror(errno));
  ck_assert_uint_eq(fwrite(data, 1, len, f), len);
  ck_assert_int_eq(fclose(f), 0);
}

int kda_test_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int kda_test_count_entries(const char *dir) {
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "opendir(%s): %s", dir, strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

int kda_test_count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* ---- Running the kda command. */

const char *kda_test_bin(void) {
  const char *b = getenv("KDA_BIN");
  return b && *b ? b : "./build/kda";
}

const char *kda_test_plugin_path(const char *name) {
  static char bufs[4][1024];
  static int next;
  char *b = bufs[next++ % 4];
  const char *dir = getenv("PLUGIN_DIR"), *bin = kda_test_bin(), *slash = strrchr(bin, '/');
  if (dir && *dir)
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
  else
    snprintf(b, sizeof bufs[0], "%.*s/conformance/tests/%s", slash ? (int)(slash - bin) : 1,
             slash ? bin : ".", name);
  return b;
}

void kda_test_result_free(kda_test_result *r) {
  free(r->out);
  free(r->err);
  r->out = r->err = NULL;
}

void kda_test_run_argv(kda_test_result *r, const char *const *args) {
  const char *argv[64];
  int n = 0;
  argv[n++] = kda_test_bin();
  for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
  argv[n] = NULL;
  char out[512], err[512];
  snprintf(out, sizeof out, "%s/.stdout", kda_test_tmpdir);
  snprintf(err, sizeof err, "%s/.stderr", kda_test_tmpdir);
  posix_spawn_file_actions_t fa;
  ck_assert_int_eq(posix_spawn_file_actions_init(&fa), 0);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  ck_assert_msg(rc == 0, "cannot run %s: %s", argv[0], strerror(rc));
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  kda_test_result_free(r);
  r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  r->out = (char *)kda_test_read_all(out, NULL);
  r->err = (char *)kda_test_read_all(err, NULL);
  ck_assert_ptr_nonnull(r->out);
  ck_assert_ptr_nonnull(r->err);
  remove(out);
  remove(err);
}

void kda_test_run(kda_test_result *r, ...) {
  const char *args[64];
  int n = 0;
  va_list ap;
  va_start(ap, r);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 63) args[n++] = a;
  va_end(ap);
  args[n] = NULL;
  kda_test_run_argv(r, args);
}

void kda_test_expect_error(const kda_test_result *r, const char *what, const char *prefix, ...) {
  if (getenv("KDA_CHECK_SHOW")) printf("%s: %s", what, r->err); /* to review the messages */
  ck_assert_msg(r->status == 2, "%s: exit status %d, want 2 (stderr: %s)", what, r->status,
                r->err);
  ck_assert_msg(r->out[0] == '\0', "%s: stdout not empty: %s", what, r->out);
  ck_assert_msg(kda_test_count_lines(r->err) == 1 && r->err[strlen(r->err) - 1] == '\n',
                "%s: want exactly one line on stderr, got: %s", what, r->err);
  ck_assert_msg(strncmp(r->err, prefix, strlen(prefix)) == 0, "%s: stderr lacks prefix '%s': %s",
                what, prefix, r->err);
  va_list ap;
  va_start(ap, prefix);
  const char *phrase;
  while ((phrase = va_arg(ap, const char *)) != NULL)
    ck_assert_msg(strstr(r->err, phrase) != NULL, "%s: stderr lacks '%s': %s", what, phrase,
                  r->err);
  va_end(ap);
}

void kda_test_expect_ok(const kda_test_result *r, const char *what) {
  ck_assert_msg(r->status == 0, "%s: exit status %d, want 0 (stderr: %s)", what, r->status,
                r->err);
  ck_assert_msg(r->err[0] == '\0', "%s: stderr not empty: %s", what, r->err);
}

/* ---- Deterministic inputs. */

uint64_t kda_test_lcg_next(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s;
}

double kda_test_u01(uint64_t *s) { return (double)(kda_test_lcg_next(s) >> 11) * 0x1p-53; }

double kda_test_urange(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * kda_test_u01(s);
}

double *kda_test_dalloc(size_t n) {
  double *x = calloc(n ? n : 1, sizeof *x);
  ck_assert_ptr_nonnull(x);
  return x;
}

/* ---- main(). */

int kda_test_main(Suite *s, enum print_output mode, enum fork_status fork) {
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, fork);
  srunner_run_all(sr, mode);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* ---- Generated cases. */

void kda_test_gen_case(const char *desc, kda_case *c, kda_truth *t) {
  char err[KDA_ERRLEN];
  kda_gen_desc d;
  ck_assert_msg(kda_gen_parse(desc, &d, err, sizeof err) == KDA_OK, "%s: %s", desc, err);
  ck_assert_msg(kda_gen_case(&d, c, err, sizeof err) == KDA_OK, "%s: %s", desc, err);
  kda_gen_desc_free(&d);
  if (!c->id) c->id = strdup("case");
  if (t) ck_assert_msg(kda_truth_compute(c, NULL, t, err, sizeof err) == KDA_OK, "%s: %s", desc, err);
}

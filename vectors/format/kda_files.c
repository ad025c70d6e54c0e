/* kda_files.c: ids, output targets, the atomic text writer and the temporary-file registry
 * (SPEC.md §10.1, §10.2).
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE /* fopencookie: the atomic writer keeps the errno of the write that failed */
#include "kda_files.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <sys/file.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kda_internal.h"

/* ---- Ids. */
int kda_id_check(const char *id, const char *what, char *err, size_t errlen) {
  size_t n = 0;
  if (id == NULL || id[0] == '\0')
    return kda_fail(KDA_EINVAL, err, errlen, "%s is empty", what);
  for (; id[n] != '\0'; n++) {
    char c = id[n];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-') || n >= KDA_ID_MAX)
      return kda_fail(KDA_EINVAL, err, errlen,
                      "%s '%.120s' is not one path component of [A-Za-z0-9._-] (at most %d "
                      "bytes)", what, id, KDA_ID_MAX);
  }
  if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
    return kda_fail(KDA_EINVAL, err, errlen, "%s '%s' is not a file name", what, id);
  return KDA_OK;
}

/* ---- Output targets. */
int kda_output_check(const char *path, const char *const *inputs, int n, char *err,
                     size_t errlen) {
  struct stat t, s;
  if (path == NULL || path[0] == '\0') return kda_fail(KDA_EIO, err, errlen, "no output path");
  if (lstat(path, &t) != 0) return KDA_OK; /* absent: nothing to compare */
  if (!S_ISREG(t.st_mode))
    return kda_fail(KDA_EIO, err, errlen, "%s: exists and is not a regular file (%s); refusing "
                    "to replace it", path, S_ISLNK(t.st_mode) ? "a symbolic link"
                                               : S_ISDIR(t.st_mode) ? "a directory"
                                               : S_ISFIFO(t.st_mode) ? "a FIFO" : "a device");
  for (int i = 0; i < n; i++)
    if (inputs[i] != NULL && stat(inputs[i], &s) == 0 && s.st_dev == t.st_dev &&
        s.st_ino == t.st_ino)
      return kda_fail(KDA_EINVAL, err, errlen, "%s: is the input %s; refusing to overwrite an "
                      "input", path, inputs[i]);
  return KDA_OK;
}

/* ---- The registry: fixed slots, so that the signal handler needs no allocation.  A slot is
 * claimed atomically (0 free, 2 being filled, 1 in use: threads may create files at once),
 * filled, then marked in use.  Each slot records the creating process: a forked child
 * inherits the parent's slots but removes only its own files. */
#define TMP_SLOTS 64
#define TMP_PATH 4096
static char tmp_path[TMP_SLOTS][TMP_PATH];
static pid_t tmp_owner[TMP_SLOTS];
static atomic_int tmp_used[TMP_SLOTS];

static void tmp_register(const char *tmp) {
  size_t n = strlen(tmp);
  if (n >= TMP_PATH) return; /* not removable on a signal; still removed on every error */
  for (int i = 0; i < TMP_SLOTS; i++) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&tmp_used[i], &expect, 2)) {
      memcpy(tmp_path[i], tmp, n + 1);
      tmp_owner[i] = getpid();
      atomic_store(&tmp_used[i], 1);
      return;
    }
  }
}

void kda_tmp_forget(const char *tmp) {
  if (tmp == NULL) return;
  for (int i = 0; i < TMP_SLOTS; i++)
    if (atomic_load(&tmp_used[i]) == 1 && tmp_owner[i] == getpid() &&
        strcmp(tmp_path[i], tmp) == 0) {
      atomic_store(&tmp_used[i], 0);
      return;
    }
}

void kda_tmp_unlink_all(void) {
  pid_t me = getpid();
  for (int i = 0; i < TMP_SLOTS; i++)
    if (atomic_load(&tmp_used[i]) == 1 && tmp_owner[i] == me) unlink(tmp_path[i]);
}

int kda_tmp_create(const char *path, char **tmp) {
  struct timespec ts;
  size_t n = strlen(path);
  uint64_t seed;
  char *t;
  *tmp = NULL;
  clock_gettime(CLOCK_REALTIME, &ts);
  seed = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 12 ^
         (uint64_t)(uintptr_t)&ts;
  if ((t = malloc(n + 12)) == NULL) {
    errno = ENOMEM;
    return -1;
  }
  for (int attempt = 0; attempt < 100; attempt++) {
    uint64_t x = (seed += 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    memcpy(t, path, n);
    memcpy(t + n, ".tmp.", 5);
    for (size_t i = 0; i < 6; i++, x /= 36) t[n + 5 + i] = "0123456789abcdefghijklmnopqrstuvwxyz"[x % 36];
    t[n + 11] = '\0';
    int fd = open(t, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      tmp_register(t);
      *tmp = t;
      return fd;
    }
    if (errno != EEXIST) break;
  }
  int e = errno;
  free(t);
  errno = e;
  return -1;
}

int kda_test_fail_write(const char *path) {
  const char *hook = getenv("KDA_TEST_FAIL_WRITE");
  return hook != NULL && *hook != '\0' && path != NULL && strstr(path, hook) != NULL;
}

/* ---- Inputs. */
int kda_input_open(const char *path, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (fd < 0)
    return kda_fail(KDA_EIO, err, errlen, "%s: cannot open: %s", path,
                    errno == ELOOP ? "a symbolic link (not followed)" : strerror(errno)), -1;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return kda_fail(KDA_EIO, err, errlen, "%s: not a regular file", path), -1;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

int kda_input_read(const char *path, size_t max, char **buf, size_t *len, char *err,
                   size_t errlen) {
  *buf = NULL, *len = 0;
  int fd = kda_input_open(path, err, errlen);
  if (fd < 0) return KDA_EIO;
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size > max) {
    close(fd);
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: larger than %zu bytes", path, max);
  }
  size_t n = (size_t)sb.st_size, k = 0;
  char *b = malloc(n + 1);
  if (!b) return close(fd), kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", path);
  while (k < n) { /* the size fstat gave: a file that grows meanwhile is read as it was */
    ssize_t r = read(fd, b + k, n - k);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    k += (size_t)r;
  }
  int e = errno;
  close(fd);
  if (k < n) {
    free(b);
    return kda_fail(KDA_EIO, err, errlen, "%s: cannot read: %s", path,
                    k ? "the file shrank" : strerror(e));
  }
  b[n] = 0;
  *buf = b, *len = n;
  return KDA_OK;
}

/* ---- Output directories. */
int kda_dir_lock(const char *dir, int *fd, char *err, size_t errlen) {
  *fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (*fd < 0)
    return kda_fail(KDA_EIO, err, errlen, "%s: cannot open the output directory: %s", dir,
                    errno == ELOOP || errno == ENOTDIR ? "not a directory (or a symbolic link)"
                                                       : strerror(errno));
  if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(*fd);
    *fd = -1;
    return kda_fail(KDA_EIO, err, errlen, "%s: %s", dir,
                    e == EWOULDBLOCK ? "another kda is writing into this directory (locked); "
                                       "wait for it to end or write elsewhere"
                                     : strerror(e));
  }
  return KDA_OK;
}

void kda_dir_unlock(int fd) {
  if (fd >= 0) close(fd); /* the lock goes with the last descriptor of it */
}

/* 1 when name ends as kda_tmp_create's names do: ".tmp." and six of [0-9a-z]. */
static int tmp_name(const char *name) {
  size_t n = strlen(name);
  if (n < 12 || memcmp(name + n - 11, ".tmp.", 5) != 0) return 0;
  for (size_t i = n - 6; i < n; i++)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'z'))) return 0;
  return 1;
}

int64_t kda_tmp_sweep(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int64_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    struct stat sb;
    if (!tmp_name(e->d_name) || fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(sb.st_mode))
      continue;
    n += unlinkat(dirfd(d), e->d_name, 0) == 0;
  }
  closedir(d);
  return n;
}

/* ---- Paths. */

void kda_path_resolved(const char *dir, char *buf) {
  char tmp[4400], *slash;
  if (realpath(dir, buf)) return;
  snprintf(tmp, sizeof tmp, "%s", dir);
  while ((slash = strrchr(tmp, '/')) && slash[1] == 0 && slash > tmp) *slash = 0;
  slash = strrchr(tmp, '/');
  const char *last = slash ? slash + 1 : tmp;
  char parent[PATH_MAX];
  if (!realpath(slash ? (slash == tmp ? "/" : (*slash = 0, tmp)) : ".", parent)) {
    buf[0] = 0;
    return;
  }
  snprintf(buf, PATH_MAX, "%.2000s/%.1000s", strcmp(parent, "/") ? parent : "", last);
}

int kda_path_within(const char *a, const char *b) {
  size_t n = strlen(b);
  return n && strncmp(a, b, n) == 0 && (a[n] == 0 || a[n] == '/');
}

/* ---- JSON text. */

int kda_json_values_check(const char *text, size_t len, int64_t max, const char *what,
                          char *err, size_t errlen) {
  int64_t n = 1;
  int in_str = 0;
  for (size_t i = 0; i < len; i++) {
    const char ch = text[i];
    if (in_str) {
      if (ch == '\\') i++;
      else if (ch == '"') in_str = 0;
    } else if (ch == '"') {
      in_str = 1;
    } else if (ch == '{' || ch == '[' || ch == ',' || ch == ':') {
      if (++n > max)
        return kda_fail(KDA_EFORMAT, err, errlen, "%s: more than %lld JSON values, more than "
                        "such a file holds", what, (long long)max);
    }
  }
  return KDA_OK;
}

/* ---- Report text. */

/* The code point at s (n bytes left) if s starts a valid UTF-8 sequence (shortest form, no
 * surrogate, at most U+10FFFF): its length, else 0. */
static int utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
  if (s[0] < 0x80) return *cp = s[0], 1;
  int len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
  if (len == 0 || s[0] > 0xF4 || (size_t)len > n) return 0;
  uint32_t c = s[0] & (0x7F >> len);
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    c = c << 6 | (s[i] & 0x3F);
  }
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < least[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  return *cp = c, len;
}

/* Code points no report keeps as they are: controls (C0, DEL, C1), the noncharacters
 * (XML 1.0 forbids U+FFFE and U+FFFF), the bidirectional overrides and isolates. */
static int text_unsafe(uint32_t c, int multiline) {
  if (c < 0x20) return !(multiline && (c == '\n' || c == '\t'));
  if (c >= 0x7F && c <= 0x9F) return 1;
  if ((c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE) return 1;
  return (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069);
}

size_t kda_text_clean(char *dst, size_t cap, const char *src, int multiline) {
  if (cap == 0) return 0;
  char *copy = NULL;
  if (src == NULL) src = "";
  else if (dst == src && (copy = strdup(src)) != NULL) src = copy;
  else if (dst == src) { /* no memory: ASCII only, in place (never longer) */
    size_t k = 0;
    for (; dst[k] && k + 1 < cap; k++)
      if ((unsigned char)dst[k] >= 0x80 || text_unsafe((unsigned char)dst[k], multiline))
        dst[k] = '?';
    return dst[k] = 0, k;
  }
  const unsigned char *s = (const unsigned char *)src;
  size_t n = strlen(src), k = 0;
  for (size_t i = 0; i < n;) {
    uint32_t c;
    int len = utf8_next(s + i, n - i, &c);
    const char *put = (const char *)s + i;
    size_t put_len = (size_t)len;
    if (len == 0) put = "\xEF\xBF\xBD", put_len = 3, len = 1; /* U+FFFD */
    else if (c < 0xA0 && text_unsafe(c, multiline)) put = "?", put_len = 1;
    else if (text_unsafe(c, multiline)) put = "\xEF\xBF\xBD", put_len = 3;
    if (k + put_len + 1 > cap) break; /* whole characters only */
    memcpy(dst + k, put, put_len);
    k += put_len, i += (size_t)len;
  }
  dst[k] = 0;
  free(copy);
  return k;
}

/* ---- The atomic text writer. */
struct kda_atomic {
  char *path, *tmp;
  FILE *f;
  int fd;
  int werr; /* errno of the first write that failed (a full disk: ENOSPC, never a stale one) */
};

static ssize_t atomic_write(void *cookie, const char *buf, size_t n) {
  kda_atomic *a = cookie;
  size_t k = 0;
  if (kda_test_fail_write(a->path)) { /* the test hook: a full disk at the first write */
    if (!a->werr) a->werr = ENOSPC;
    return errno = ENOSPC, -1;
  }
  while (k < n) {
    ssize_t w = write(a->fd, buf + k, n - k);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (!a->werr) a->werr = w < 0 ? errno : EIO;
      return k ? (ssize_t)k : -1;
    }
    k += (size_t)w;
  }
  return (ssize_t)n;
}

static int atomic_close(void *cookie) {
  kda_atomic *a = cookie;
  int rc = a->fd >= 0 ? close(a->fd) : 0;
  if (rc != 0 && !a->werr) a->werr = errno;
  a->fd = -1;
  return rc;
}

static void atomic_free(kda_atomic *a) {
  if (a == NULL) return;
  if (a->f != NULL) fclose(a->f);
  if (a->fd >= 0) close(a->fd);
  if (a->tmp != NULL) {
    unlink(a->tmp);
    kda_tmp_forget(a->tmp);
  }
  free(a->tmp);
  free(a->path);
  free(a);
}

int kda_atomic_open(const char *path, kda_atomic **out, FILE **f, char *err, size_t errlen) {
  int st = kda_output_check(path, NULL, 0, err, errlen);
  kda_atomic *a;
  *out = NULL;
  *f = NULL;
  if (st != KDA_OK) return st;
  if ((a = calloc(1, sizeof *a)) == NULL || (a->path = strdup(path)) == NULL) {
    free(a);
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", path);
  }
  a->fd = -1;
  if ((a->fd = kda_tmp_create(path, &a->tmp)) < 0) {
    st = kda_fail(KDA_EIO, err, errlen, "%s: cannot create temporary file: %s", path,
                  strerror(errno));
    atomic_free(a);
    return st;
  }
  cookie_io_functions_t io = {NULL, atomic_write, NULL, atomic_close};
  if ((a->f = fopencookie(a, "w", io)) == NULL) {
    st = kda_fail(KDA_EIO, err, errlen, "%s: cannot open %s: %s", path, a->tmp, strerror(errno));
    atomic_free(a);
    return st;
  }
  *out = a;
  *f = a->f;
  return KDA_OK;
}

int kda_atomic_fd(const kda_atomic *a) { return a ? a->fd : -1; }

void kda_atomic_abort(kda_atomic *a) {
  atomic_free(a);
}

/* Flushes, syncs and closes the temporary file: 0, or the errno of what failed. */
static int atomic_finish(kda_atomic *a) {
  FILE *f = a->f;
  int e = 0;
  a->f = NULL;
  if (kda_test_fail_write(a->path)) e = ENOSPC; /* the test hook of kda_files.h */
  else if (fflush(f) != 0 || ferror(f)) e = a->werr ? a->werr : EIO;
  else if (fsync(a->fd) != 0) e = errno;
  if (fclose(f) != 0 && e == 0) e = a->werr ? a->werr : EIO;
  return e;
}

int kda_atomic_commit(kda_atomic *a, char *err, size_t errlen) {
  return kda_atomic_commit_all(&a, 1, err, errlen);
}

int kda_atomic_commit_all(kda_atomic *const *as, int n, char *err, size_t errlen) {
  int st = KDA_OK;
  for (int i = 0; i < n && st == KDA_OK; i++) {
    if (as[i] == NULL) st = kda_fail(KDA_EIO, err, errlen, "kda_atomic_commit: NULL writer");
    int e = st == KDA_OK ? atomic_finish(as[i]) : 0;
    if (e != 0)
      st = kda_fail(KDA_EIO, err, errlen, "%s: cannot write: %s", as[i]->path, strerror(e));
  }
  for (int i = 0; i < n && st == KDA_OK; i++) /* every file whole: now the renames */
    if (rename(as[i]->tmp, as[i]->path) != 0) {
      st = kda_fail(KDA_EIO, err, errlen, "%s: cannot write: %s", as[i]->path, strerror(errno));
    } else {
      kda_tmp_forget(as[i]->tmp);
      free(as[i]->tmp);
      as[i]->tmp = NULL; /* renamed: nothing to remove */
    }
  for (int i = 0; i < n; i++) atomic_free(as[i]);
  return st;
}

int kda_atomic_write(const char *path, const void *data, size_t len, char *err, size_t errlen) {
  kda_atomic *a;
  FILE *f;
  int st = kda_atomic_open(path, &a, &f, err, errlen);
  if (st != KDA_OK) return st;
  if (fchmod(a->fd, 0644) != 0) {
    int e = errno;
    kda_atomic_abort(a);
    return kda_fail(KDA_EIO, err, errlen, "%s: cannot write: %s", path, strerror(e));
  }
  if (len > 0) fwrite(data, 1, len, f); /* a failed write: the commit names its errno */
  return kda_atomic_commit(a, err, errlen);
}

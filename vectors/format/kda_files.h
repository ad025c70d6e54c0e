/* kda_files.h: files that cannot lie: ids as path components, exact JSON, atomic outputs.
 * SPDX-License-Identifier: MIT
 *
 * Every name that comes from a file and becomes part of a path is an id (SPEC.md §10.2): one
 * path component of [A-Za-z0-9._-], not "." or "..", at most KDA_ID_MAX bytes.  Every output
 * is written to "<target>.tmp.XXXXXX" in the target's directory, synced and renamed over the
 * target (SPEC.md §10.1): a failure at any step leaves the target as it was.  A target that
 * exists and is not a regular file (FIFO, device, symlink, directory) is refused, and so is a
 * target that is one of the command's own input files.  Temporary files are recorded in a
 * process-wide registry so that a signal handler (installed by the kda tool, not by the
 * library) can remove them with kda_tmp_unlink_all.
 */
#ifndef KDA_FILES_H
#define KDA_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDA_ID_MAX 100

/* KDA_OK when id is a valid id, else KDA_EINVAL with a message naming what ("case id", ...). */
int kda_id_check(const char *id, const char *what, char *err, size_t errlen);

/* Checks that path may be replaced by an output: absent or a regular file (lstat: a symlink
 * is refused), and not the same file (st_dev, st_ino) as any of the n inputs.  Returns KDA_OK,
 * KDA_EIO (not a regular file) or KDA_EINVAL (an input). */
int kda_output_check(const char *path, const char *const *inputs, int n, char *err,
                     size_t errlen);

/* An atomic text output for report writers, which keep taking a FILE*.  open checks the
 * target (kda_output_check with no inputs) and creates the temporary file; commit checks the
 * stream's error flag, flushes, syncs, closes and renames; abort removes the temporary file.
 * Both free a.  Returns KDA_OK, KDA_EIO, KDA_ENOMEM. */
typedef struct kda_atomic kda_atomic;
int kda_atomic_open(const char *path, kda_atomic **a, FILE **f, char *err, size_t errlen);
int kda_atomic_commit(kda_atomic *a, char *err, size_t errlen);
void kda_atomic_abort(kda_atomic *a);
/* The temporary file's descriptor (for fchmod; the FILE* is not a file stream: fileno fails). */
int kda_atomic_fd(const kda_atomic *a);
/* Commits n writers together: every temporary file is flushed, synced and closed first, and
 * only when all of them are whole are they renamed over their targets, so a failure (a full
 * disk) replaces none of them.  Frees every writer.  A write error names the errno of the
 * write that failed. */
int kda_atomic_commit_all(kda_atomic *const *as, int n, char *err, size_t errlen);

/* The whole of an output at once: writes len bytes of data to path through kda_atomic_open
 * (mode 0644) and kda_atomic_commit.  Returns KDA_OK, KDA_EIO or KDA_ENOMEM. */
int kda_atomic_write(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* Creates "<path>.tmp.XXXXXX" (O_EXCL, mode 0666 less the umask) and registers it; *tmp is
 * malloc'd.  Returns the open descriptor, or -1 with errno set.  kda_tmp_forget unregisters
 * it (after a rename or an unlink). */
int kda_tmp_create(const char *path, char **tmp);
void kda_tmp_forget(const char *tmp);
/* Removes every temporary file this process registered (not those of a parent it was forked
 * from); async-signal-safe (getpid, lock-free atomics and unlink only). */
void kda_tmp_unlink_all(void);

/* Opens an input that must be a regular file (O_NOFOLLOW, O_NONBLOCK: a symlink, FIFO, device
 * or directory is refused at once, never waited on).  Returns the descriptor (blocking again,
 * close-on-exec) or -1 with a message naming the file. */
int kda_input_open(const char *path, char *err, size_t errlen);
/* The whole of such an input of at most max bytes, NUL-terminated (*buf malloc'd).  Returns
 * KDA_OK, KDA_EIO (unreadable, not a regular file), KDA_EFORMAT (larger than max),
 * KDA_ENOMEM. */
int kda_input_read(const char *path, size_t max, char **buf, size_t *len, char *err,
                   size_t errlen);

/* Report text (SPEC.md §7.9): copies src into dst (cap bytes with the NUL; dst may be src)
 * as text every report format holds as it is: valid UTF-8 (each invalid byte becomes U+FFFD),
 * no control or escape characters (C0, DEL and C1 become '?', except '\n' and '\t' when
 * multiline), no code point XML 1.0 forbids or a terminal or editor would act on
 * (U+FFFE, U+FFFF and the other noncharacters, the bidirectional overrides and isolates
 * become U+FFFD), cut on a character boundary.  Returns the length written. */
size_t kda_text_clean(char *dst, size_t cap, const char *src, int multiline);

/* The absolute, resolved path of dir (PATH_MAX bytes at buf), or of its parent joined with
 * its last component when dir does not exist yet; "" when neither resolves. */
void kda_path_resolved(const char *dir, char *buf);
/* 1 when resolved path a is b or inside it (an output inside an input directory). */
int kda_path_within(const char *a, const char *b);

/* What parsing JSON text costs is bounded by the bytes present only up to a parser's cost
 * per value (an empty object is 3 bytes of text and a hundred of memory): returns KDA_OK when
 * text (len bytes) holds at most max values, counted as the '{', '[', ',' and ':' outside
 * strings plus one (an upper bound of the values a parse makes), else KDA_EFORMAT with a
 * message naming what (the file and member). */
int kda_json_values_check(const char *text, size_t len, int64_t max, const char *what,
                          char *err, size_t errlen);

/* One writer per output directory: an exclusive, non-blocking flock on the directory itself
 * (no file is added to it), held until kda_dir_unlock or the process ends (its forked workers
 * hold it too).  A directory another process holds is KDA_EIO with a message saying so; a
 * symbolic link or a non-directory is refused. */
int kda_dir_lock(const char *dir, int *fd, char *err, size_t errlen);
void kda_dir_unlock(int fd);
/* Removes the temporary files ("NAME.tmp.XXXXXX", regular files) a killed run left in dir;
 * call it holding dir's lock, so that none is another writer's.  Returns how many. */
int64_t kda_tmp_sweep(const char *dir);

/* Test hook: writes to and commits of a target whose path contains the value of the
 * environment variable KDA_TEST_FAIL_WRITE fail as on a full disk (ENOSPC), so that tests can
 * see that no target is left half-written and that the error names ENOSPC.  Returns 1 when
 * path is to fail. */
int kda_test_fail_write(const char *path);

#ifdef __cplusplus
}
#endif
#endif

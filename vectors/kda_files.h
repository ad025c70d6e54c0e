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

/* Creates "<path>.tmp.XXXXXX" (O_EXCL, mode 0666 less the umask) and registers it; *tmp is
 * malloc'd.  Returns the open descriptor, or -1 with errno set.  kda_tmp_forget unregisters
 * it (after a rename or an unlink). */
int kda_tmp_create(const char *path, char **tmp);
void kda_tmp_forget(const char *tmp);
/* Removes every temporary file this process registered (not those of a parent it was forked
 * from); async-signal-safe (getpid, lock-free atomics and unlink only). */
void kda_tmp_unlink_all(void);

/* Test hook: commits of a target whose path contains the value of the environment variable
 * KDA_TEST_FAIL_WRITE fail as on a full disk (ENOSPC), so that tests can see that no target is
 * left half-written.  Returns 1 when path is to fail. */
int kda_test_fail_write(const char *path);

#ifdef __cplusplus
}
#endif
#endif

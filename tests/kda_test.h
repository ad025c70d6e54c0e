/* kda_test.h: the helpers every Check test program shares (temporary directories, whole
 * files, running the kda command, the suite's main).  Test code only: linked into each
 * <module>/tests/check_*.c program, never part of libkda.
 * SPDX-License-Identifier: MIT
 *
 * The helpers fail the running test with ck_assert where a test cannot go on (a file that
 * must exist, a process that cannot be started), so a test states only what it checks.
 */
#ifndef KDA_TEST_H
#define KDA_TEST_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* ---- Temporary directories. */

/* The temporary directory of the running test (or test group): made by kda_test_tmpdir_make,
 * removed with everything in it by kda_test_tmpdir_remove; "" when there is none.  Short
 * enough that "DIR/NAME" fits the tests' 128-byte path buffers. */
#define KDA_TEST_TMPDIR_MAX 96
extern char kda_test_tmpdir[KDA_TEST_TMPDIR_MAX];

/* Makes $TMPDIR/kda-TAG-XXXXXX (/tmp when TMPDIR is unset).  Aborts when it cannot: it is
 * also called from unchecked fixtures, in the parent process, where ck_assert cannot, and
 * when the name would not fit. */
void kda_test_tmpdir_make(const char *tag);
void kda_test_tmpdir_remove(void);
/* Removes path and, when it is a directory, everything below it (links are not followed). */
void kda_test_rm_tree(const char *path);
/* "DIR/NAME" in one of 64 rotating static buffers (a test holds far fewer at a time). */
char *kda_test_join(const char *dir, const char *name);
/* kda_test_join(kda_test_tmpdir, name). */
const char *kda_test_path(const char *name);

/* ---- Whole files. */

/* The bytes of path, NUL-terminated (the NUL not counted in *len, len may be NULL); NULL when
 * path cannot be opened.  The caller frees. */
unsigned char *kda_test_read_all(const char *path, size_t *len);
/* The same, failing the test when path cannot be opened. */
unsigned char *kda_test_slurp(const char *path, size_t *len);
/* Writes len bytes to path (created or truncated), failing the test on any error. */
void kda_test_write_all(const char *path, const void *data, size_t len);
int kda_test_exists(const char *path);
/* Entries of a directory, "." and ".." not counted. */
int kda_test_count_entries(const char *dir);
int kda_test_count_lines(const char *s);

/* ---- Running the kda command: $KDA_BIN (set by make check-unit), else ./build/kda. */

typedef struct kda_test_result {
  int status;      /* exit status, or 128 + signal */
  char *out, *err; /* captured standard output and error, NUL-terminated */
} kda_test_result;

const char *kda_test_bin(void);
/* A test plugin: $PLUGIN_DIR/NAME, else BIN_DIR/conformance/tests/NAME next to the kda under
 * test (one of 4 rotating static buffers). */
const char *kda_test_plugin_path(const char *name);
/* Runs kda with the NULL-terminated arguments, standard input from /dev/null, standard output
 * and error captured through files in kda_test_tmpdir; r is freed first when it holds
 * output. */
void kda_test_run_argv(kda_test_result *r, const char *const *args);
/* kda_test_run(&r, "ref", "in.npz", "-o", "out.npz", NULL) */
void kda_test_run(kda_test_result *r, ...);
void kda_test_result_free(kda_test_result *r);
/* The error contract (SPEC.md §12.2): exit 2, nothing on stdout, exactly one line on stderr
 * that starts with prefix ("kda SUB: ") and contains every phrase of the NULL-terminated
 * list.  KDA_CHECK_SHOW=1 prints each message, to review their wording. */
void kda_test_expect_error(const kda_test_result *r, const char *what, const char *prefix, ...);
/* Exit 0 and nothing on stderr. */
void kda_test_expect_ok(const kda_test_result *r, const char *what);

/* ---- Deterministic inputs. */

/* A 64-bit LCG (Knuth's MMIX constants); kda_test_u01 takes the top 53 bits. */
uint64_t kda_test_lcg_next(uint64_t *s);
double kda_test_u01(uint64_t *s);
double kda_test_urange(uint64_t *s, double lo, double hi);
/* n zeroed doubles (at least one), failing the test when out of memory. */
double *kda_test_dalloc(size_t n);

/* ---- Generated cases (the conformance tests). */

struct kda_case;
struct kda_truth;
/* The case of generator description desc (SPEC.md §11.2), with the id "case" when the
 * description names none, and, when t is not NULL, its truth (kda_truth_compute); fails the
 * test, naming desc, when either cannot be made. */
void kda_test_gen_case(const char *desc, struct kda_case *c, struct kda_truth *t);

/* ---- main(). */

/* Runs the suite (fork mode: CK_FORK_GETENV reads CK_FORK as Check does by default) and
 * returns main's exit status: EXIT_SUCCESS when no test failed. */
int kda_test_main(Suite *s, enum print_output mode, enum fork_status fork);

#endif

/* check_fuzz_files.c: the fuzz target of the whole reader path (fuzz_files.c), compiled with
 * the normal compiler and run on its seeds and on deterministic mutations of them
 * (truncations, byte flips, header-length and size fields), so that `make check` (and its
 * ASan + UBSan pass) exercises every reader on bad input without clang.
 * SPDX-License-Identifier: MIT
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_files.c"
#include "kda_test.h"

/* The seed itself, then mutations: every byte of the first 256 and of the last 128 (the
 * local header, the first .npy header, the central directory) set to 0, 1 and 0xff, and
 * truncations. */
static int run_seed(const char *path) {
  size_t n, runs = 0;
  unsigned char *b = kda_test_slurp(path, &n);
  LLVMFuzzerTestOneInput(b, n), runs++;
  unsigned char *m = malloc(n + 1);
  static const unsigned char vals[3] = {0, 1, 0xff};
  for (size_t i = 0; i < n; i++) {
    if (i >= 256 && i + 128 < n) continue;
    for (int v = 0; v < 3; v++) {
      if (b[i] == vals[v]) continue;
      memcpy(m, b, n);
      m[i] = vals[v];
      LLVMFuzzerTestOneInput(m, n), runs++;
    }
  }
  for (size_t cut = 1; cut < n; cut += n / 16 + 1) LLVMFuzzerTestOneInput(b, cut), runs++;
  free(m);
  free(b);
  return (int)runs;
}

START_TEST(test_seeds_and_mutations) {
  static const char *const dirs[] = {"golden/example", "golden/L0", "vectors/tests/fixtures"};
  int files = 0, runs = 0;
  for (int d = 0; d < 3; d++) {
    DIR *dir = opendir(dirs[d]);
    ck_assert_ptr_nonnull(dir);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
      size_t L = strlen(e->d_name);
      if (L < 5 || strcmp(e->d_name + L - 4, ".npz") != 0) continue;
      if (d == 1 && files > 4) continue; /* a few golden files are enough */
      char path[512];
      snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
      runs += run_seed(path);
      files++;
    }
    closedir(dir);
  }
  ck_assert_int_ge(files, 5);
  ck_assert_int_ge(runs, 1000);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fuzz_files");
  TCase *tc = tcase_create("corpus");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_seeds_and_mutations);
  suite_add_tcase(s, tc);
  return kda_test_main(s, CK_ENV, CK_FORK_GETENV);
}

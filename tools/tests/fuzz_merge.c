/* fuzz_merge.c: libFuzzer target for the whole path of the merges: `kda conform --merge` on a
 * shard directory whose shard.json, results.jsonl, summary.json and junit.xml come from the
 * input, and `kda golden --merge` on a shard.json from the input (docs/scale.md, SPEC.md
 * §10.4).
 * SPDX-License-Identifier: MIT
 *
 * The input is the four files separated by the line "--8<--" (a seed is a real shard's files,
 * made by `make fuzz`).  Before the conform merge runs, the harness records each report's
 * present SHA-256 and size in shard.json, as whoever edits a shard can, so that mutations get
 * past the hash check to what the merge must recount and cross-check.  An input whose first
 * byte is odd goes to the golden merge instead, with its first part as shard.json.
 *
 * Besides memory errors and undefined behaviour, the target checks the merges' promises: the
 * exit status is 0, 1, 5 (a merged run's) or 2 (refused), and a refused merge writes nothing.
 * Commits into OUT are made to fail (KDA_TEST_FAIL_WRITE), so that a merge that passes every
 * check still ends in the all-or-nothing write failing, without an fsync per execution.
 */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kda_golden_shard.h"
#include "kda_tool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int kda_cmd_conform(int argc, char **argv);

#define FUZZ_REQUIRE(c) \
  do {                  \
    if (!(c)) abort();  \
  } while (0)

static char g_root[64], g_shard[128], g_out[128];
static const char *const names[4] = {"shard.json", "results.jsonl", "summary.json", "junit.xml"};

static void put(const char *dir, const char *name, const uint8_t *p, size_t n) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return;
  if (n) fwrite(p, 1, n, f);
  fclose(f);
}

/* Removes every entry of dir (one level; the merges create no deeper ones but levels). */
static void empty(const char *dir, int rmdir_too) {
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) empty(path, 1);
    else unlink(path);
  }
  if (d) closedir(d);
  if (rmdir_too) rmdir(dir);
}

/* shard.json's "files" set to the reports' present hashes and sizes, when it parses. */
static void rehash(void) {
  char path[256];
  snprintf(path, sizeof path, "%s/shard.json", g_shard);
  json_t *root = json_load_file(path, 0, NULL);
  if (!json_is_object(root)) return json_decref(root);
  json_t *files = json_object();
  for (int k = 1; k < 4; k++) {
    char p[256], hex[65], err[256];
    int64_t n;
    snprintf(p, sizeof p, "%s/%s", g_shard, names[k]);
    if (kda_golden_file_sha256(p, hex, &n, err, sizeof err) == KDA_OK)
      json_object_set_new(files, names[k], json_pack("{s:s,s:I}", "sha256", hex, "size",
                                                     (json_int_t)n));
  }
  json_object_set_new(root, "files", files);
  json_dump_file(root, path, JSON_COMPACT);
  json_decref(root);
}

static void init(void) {
  snprintf(g_root, sizeof g_root, "/tmp/kda-fuzz-merge-%ld", (long)getpid());
  snprintf(g_shard, sizeof g_shard, "%s/s0", g_root);
  snprintf(g_out, sizeof g_out, "%s/out", g_root);
  mkdir(g_root, 0700); /* make fuzz passes -close_fd_mask=3: no summary or refusal lines */
  /* Every commit into OUT fails as on a full disk (kda_files.h's test hook): no fsync per
   * execution, and a merge that got that far must still leave nothing behind. */
  setenv("KDA_TEST_FAIL_WRITE", g_out, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_root[0]) init();
  empty(g_root, 0);
  mkdir(g_shard, 0700);
  const uint8_t *p = data + (size > 0), *end = data + size;
  static const char sep[] = "\n--8<--\n";
  for (int k = 0; k < 4; k++) {
    const uint8_t *q = k < 3 ? memmem(p, (size_t)(end - p), sep, sizeof sep - 1) : NULL;
    const uint8_t *stop = q ? q : end;
    put(g_shard, names[k], p, (size_t)(stop - p));
    p = q ? q + sizeof sep - 1 : end;
    if (!q) break;
  }
  int rc;
  if (size > 0 && (data[0] & 1)) {
    char *argv[] = {"golden", "--merge", g_out, g_shard, NULL};
    char err[KDA_ERRLEN];
    kda_golden_merge_info info;
    const char *sh[1] = {g_shard};
    rc = kda_golden_merge(g_out, sh, 1, &info, err, sizeof err) == KDA_OK ? 0 : 2;
    if (rc == 0) kda_golden_merge_info_free(&info);
    else FUZZ_REQUIRE(memchr(err, '\n', strlen(err)) == NULL);
    (void)argv;
  } else {
    rehash();
    char *argv[] = {"conform", "--merge", g_out, g_shard, NULL};
    rc = kda_cmd_conform(4, argv);
    FUZZ_REQUIRE(rc == 0 || rc == 1 || rc == 2 || rc == 5);
  }
  if (rc == 2) { /* refused: nothing written */
    char path[256];
    for (int k = 1; k < 4; k++) {
      snprintf(path, sizeof path, "%s/%s", g_out, names[k]);
      FUZZ_REQUIRE(access(path, F_OK) != 0);
    }
  }
  return 0;
}

/* fuzz_files.c: libFuzzer target for the whole reader path of vector files: the bytes as an
 * .npz archive on disk, opened (zip directory, size bounds), every member's .npy header and
 * data, the manifest, the case loader, the result loader and the golden member hashes.
 * SPDX-License-Identifier: MIT
 *
 * `make fuzz FUZZ_SECONDS=300` builds it with clang under ASan + UBSan and runs it on a seed
 * corpus (golden/example, golden/L0, the numpy fixtures, a result file written by kda ref, and
 * vectors/tests/fixtures/generated.npz: a golden case in the production form of SPEC.md §10.2,
 * generated inputs and sampled truth, written by kda_golden_prod_make from the description
 * "seed=41 T=256 H=1 K=4 V=4 gate=softplus beta=logit l2=fla h0=1 checkpoints=127 prec=bf16",
 * so that the mutations reach golden.inputs, golden.generated_sha256, o_index and o).
 * vectors/tests/check_fuzz_files.c compiles this file with the normal compiler and runs the
 * seeds and mutations of them through the same entry point as a unit test.
 *
 * Besides memory errors and undefined behaviour, the target checks the readers' promises:
 * every status is a documented one and every message a single NUL-terminated line.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_case.h"
#include "kda_golden.h"
#include "kda_npz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_REQUIRE(c) \
  do {                  \
    if (!(c)) abort();  \
  } while (0)
/* Outputs larger than this (elements) are not allocated by the harness: a case with many
 * empty sequences may declare a large final state that no reader allocates. */
#define FUZZ_MAX_OUT ((uint64_t)1 << 22)

static void check_msg(int st, const char *err) {
  FUZZ_REQUIRE(st >= KDA_OK && st <= KDA_ENOTCERT);
  if (st == KDA_OK) return;
  FUZZ_REQUIRE(memchr(err, '\0', KDA_ERRLEN) != NULL);
}

/* Every member: header, then the data as float64 (or int64), then the whole-archive CRCs. */
static void fuzz_members(kda_npz *z) {
  char err[KDA_ERRLEN];
  for (int64_t i = 0; i < kda_npz_count(z); i++) {
    const char *name = kda_npz_name(z, i);
    kda_array_info info;
    int st = kda_npz_info(z, name, &info, err, sizeof err);
    check_msg(st, err);
    if (st != KDA_OK) continue;
    FUZZ_REQUIRE(info.ndim >= 0 && info.ndim <= KDA_NPY_MAX_NDIM);
    double *f = NULL;
    int64_t *ix = NULL;
    st = info.dtype == KDA_DTYPE_I64 || info.dtype == KDA_DTYPE_I32
             ? kda_npz_load_i64(z, name, NULL, &ix, err, sizeof err)
             : kda_npz_load_f64(z, name, NULL, &f, err, sizeof err);
    check_msg(st, err);
    free(f);
    free(ix);
    if (info.count > 1) {
      double two[2];
      st = kda_npz_read_range(z, name, KDA_DTYPE_F64, info.count - 2, 2, two, err, sizeof err);
      check_msg(st, err);
    }
  }
  char *blob = NULL;
  size_t len = 0;
  int st = kda_npz_read_blob(z, "manifest.json", &blob, &len, err, sizeof err);
  check_msg(st, err);
  if (st == KDA_OK) FUZZ_REQUIRE(blob[len] == '\0');
  free(blob);
  check_msg(kda_npz_verify(z, err, sizeof err), err);
}

/* Sampled truth (o_index, o) against the problem of the file's own case. */
static void fuzz_sampled(const char *path, const kda_case *c) {
  char err[KDA_ERRLEN];
  kda_npz *z = NULL;
  if (kda_npz_open(path, &z, err, sizeof err) != KDA_OK) return;
  int64_t *ix = NULL, n = 0;
  double *o = NULL;
  const int st = kda_output_sampled_read(z, path, &c->p, &ix, &n, &o, err, sizeof err);
  check_msg(st, err);
  if (st == KDA_OK)
    for (int64_t i = 0; i < n; i++)
      FUZZ_REQUIRE(ix[i] >= 0 && ix[i] < c->p.T && (!i || ix[i] > ix[i - 1]));
  else
    FUZZ_REQUIRE(ix == NULL && o == NULL);
  free(ix);
  free(o);
  kda_npz_close(z);
}

/* The result loader against case c (the file's own case, or the fixed one). */
static void fuzz_result(const char *path, const kda_case *c) {
  char err[KDA_ERRLEN];
  kda_problem_sizes s;
  if (kda_problem_sizes_get(&c->p, &s, err, sizeof err) != KDA_OK) return;
  if (s.o > FUZZ_MAX_OUT || s.ht > FUZZ_MAX_OUT || s.hc > FUZZ_MAX_OUT) return;
  double *o = malloc((s.o + 1) * sizeof *o), *ht = malloc((s.ht + 1) * sizeof *ht);
  double *hc = malloc((s.hc + 1) * sizeof *hc);
  if (o && ht && hc)
    check_msg(kda_result_load(path, c, o, s.ht ? ht : NULL, s.hc ? hc : NULL, err, sizeof err),
              err);
  free(o), free(ht), free(hc);
}

static char g_path[64];
static kda_case g_fixed; /* a valid problem to read result files against */

static void fuzz_init(void) {
  char err[KDA_ERRLEN];
  snprintf(g_path, sizeof g_path, "/tmp/kda-fuzz-files-%ld.npz", (long)getpid());
  kda_gen_desc d;
  if (kda_gen_parse("seed=1 T=4 H=1 HV=2 K=2 V=2 id=example", &d, err, sizeof err) == KDA_OK) {
    if (kda_gen_case(&d, &g_fixed, err, sizeof err) != KDA_OK) memset(&g_fixed, 0, sizeof g_fixed);
    kda_gen_desc_free(&d);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[KDA_ERRLEN];
  if (!g_path[0]) fuzz_init();
  FILE *f = fopen(g_path, "wb");
  if (!f) return 0;
  size_t wrote = fwrite(data, 1, size, f);
  if (fclose(f) != 0 || wrote != size) return 0;
  kda_npz *z = NULL;
  int st = kda_npz_open(g_path, &z, err, sizeof err);
  check_msg(st, err);
  if (st == KDA_OK) {
    fuzz_members(z);
    kda_npz_close(z);
  }
  kda_case c;
  st = kda_case_load(g_path, &c, err, sizeof err);
  check_msg(st, err);
  if (st == KDA_OK) {
    fuzz_result(g_path, &c);
    fuzz_sampled(g_path, &c);
    kda_case_free(&c);
  }
  if (g_fixed.q) fuzz_result(g_path, &g_fixed);
  check_msg(kda_golden_check_members(g_path, err, sizeof err) , err);
  unlink(g_path);
  return 0;
}

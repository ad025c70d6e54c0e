/* fuzz_ci.c: libFuzzer target for what a CI job feeds the runner: waiver files and baselines
 * (SPEC.md §7.6, §7.9), read whole (kda_waivers_load, kda_baseline_load), then every lookup a
 * run makes of them, and the text a report takes from them.
 * SPDX-License-Identifier: MIT
 *
 * The input is written to a file and read as a waiver file and as a baseline.  Besides memory
 * errors and undefined behaviour, the target checks the readers' promises: every status is a
 * documented one, every message a single line, and every string a report takes from a waiver
 * (reason, link, description) is report text: valid UTF-8 without control characters.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_conform.h"
#include "kda_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_REQUIRE(c) \
  do {                  \
    if (!(c)) abort();  \
  } while (0)

static void check_msg(int st, const char *err) {
  FUZZ_REQUIRE(st >= KDA_OK && st <= KDA_ENOTCERT);
  if (st == KDA_OK) return;
  FUZZ_REQUIRE(memchr(err, '\0', KDA_ERRLEN) != NULL && strchr(err, '\n') == NULL);
}

/* s is report text already: cleaning it changes nothing. */
static void check_text(const char *s) {
  if (!s) return;
  size_t n = strlen(s);
  char *t = malloc(3 * n + 1);
  FUZZ_REQUIRE(t != NULL);
  kda_text_clean(t, 3 * n + 1, s, 0);
  FUZZ_REQUIRE(strcmp(s, t) == 0);
  free(t);
}

static char g_path[64];
static kda_case_report g_rep[2];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[KDA_ERRLEN];
  if (!g_path[0]) {
    snprintf(g_path, sizeof g_path, "/tmp/kda-fuzz-ci-%ld.json", (long)getpid());
    snprintf(g_rep[0].case_id, sizeof g_rep[0].case_id, "t15-log-prob");
    snprintf(g_rep[0].backend, sizeof g_rep[0].backend, "ref-f32");
    g_rep[0].verdict = KDA_VERDICT_WAIVED, g_rep[0].waiver_no = 1;
    snprintf(g_rep[1].case_id, sizeof g_rep[1].case_id, "l0-basic");
    snprintf(g_rep[1].backend, sizeof g_rep[1].backend, "mutant");
    g_rep[1].verdict = KDA_VERDICT_FAIL;
  }
  FILE *f = fopen(g_path, "wb");
  if (!f) return 0;
  size_t wrote = fwrite(data, 1, size, f);
  if (fclose(f) != 0 || wrote != size) return 0;
  kda_waivers *w = NULL;
  int st = kda_waivers_load(g_path, &w, err, sizeof err);
  check_msg(st, err);
  if (st == KDA_OK) {
    static const char manifest[] = "{\"golden\": {\"flags\": [\"LONG\", \"DRIFT\"]}}";
    for (int64_t i = 0; i < kda_waivers_count(w); i++) {
      char d[512];
      kda_waivers_describe(w, i, d, sizeof d);
      check_text(d);
      check_text(kda_waivers_reason(w, i));
      check_text(kda_waivers_link(w, i));
    }
    int64_t k = kda_waivers_find(w, "t15-log-prob", "ref-f32", manifest);
    FUZZ_REQUIRE(k >= -1 && k < kda_waivers_count(w));
    uint8_t unused[64];
    if (kda_waivers_count(w) <= 64) kda_waivers_unused(w, g_rep, 2, unused);
    kda_waivers_free(w);
  }
  kda_baseline *b = NULL;
  st = kda_baseline_load(g_path, &b, err, sizeof err);
  check_msg(st, err);
  if (st == KDA_OK) {
    static const char *const backends[3] = {"ref-f32", "simd", "candidate"};
    for (int i = 0; i < 3; i++) {
      check_msg(kda_baseline_check(b, backends[i], KDA_PRECISION_FP32, err, sizeof err), err);
      double o, ht, hc;
      kda_baseline_get(b, backends[i], "t15-log-prob", &o, &ht, &hc);
    }
    kda_baseline_free(b);
  }
  unlink(g_path);
  return 0;
}

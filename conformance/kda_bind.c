/* kda_bind.c: one case in memory for bindings (the Python package's assert_kda): scored by the
 * runner, reported by the report's one formatter (SPEC.md §7.9).
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <stdlib.h>

#include "kda_conform.h"
#include "kda_score_internal.h"

int kda_conform_outputs(const kda_problem *p, const kda_tensors_f64 *in, int32_t cls,
                        const char *id, int32_t max_lines, int32_t *verdict, char **text,
                        char *err, size_t errlen) {
  *verdict = KDA_VERDICT_FAIL, *text = NULL;
  kda_case_report *r = calloc(1, sizeof *r);
  if (!r) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  int st = kda_runner_score_memory(p, in, cls, id, r, err, errlen);
  if (st == KDA_OK) {
    *verdict = r->verdict;
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    if (f) kda_report_human(f, r, max_lines);
    if (!f || fclose(f) != 0 || !*text)
      st = KDA_ENOMEM, snprintf(err, errlen, "out of memory for the report"), free(*text),
      *text = NULL;
  }
  kda_case_report_free(r);
  free(r);
  return st;
}

void kda_conform_text_free(char *text) { free(text); }

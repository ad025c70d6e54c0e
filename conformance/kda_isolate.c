/* kda_isolate.c: output buffers of a call and the names of call outcomes (SPEC.md §7.8; the
 * worker is kda_worker.c, its one caller kda_runner.c).
 * SPDX-License-Identifier: MIT
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"

/* ---- Outputs. */
static double *alloc_f64(uint64_t n, int *fail) {
  double *p = (n + 1 > SIZE_MAX / sizeof(double)) ? NULL : calloc((size_t)n + 1, sizeof(double));
  if (!p) *fail = 1;
  return p;
}

int kda_outputs_alloc(const kda_problem *p, kda_outputs *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  kda_problem_sizes s;
  int st = kda_problem_sizes_get(p, &s, err, errlen);
  if (st != KDA_OK) return st;
  int fail = 0;
  out->n_o = s.o;
  out->n_ht = p->want_final_state ? s.ht : 0;
  out->n_hc = p->n_checkpoints > 0 ? s.hc : 0;
  out->o = alloc_f64(out->n_o, &fail);
  if (p->want_final_state) out->ht = alloc_f64(out->n_ht, &fail);
  if (p->n_checkpoints > 0) out->hc = alloc_f64(out->n_hc, &fail);
  if (!fail) return KDA_OK;
  kda_outputs_free(out);
  return snprintf(err, errlen, "out of memory for the outputs"), KDA_ENOMEM;
}

void kda_outputs_free(kda_outputs *out) {
  free(out->o);
  free(out->ht);
  free(out->hc);
  memset(out, 0, sizeof *out);
}

const char *kda_call_outcome_name(int32_t outcome) {
  static const char *const names[] = {"ok", "unsupported", "error", "crash",
                                      "timeout", "fpenv", "input-modified"};
  return (outcome >= 0 && outcome <= KDA_CALL_INPUT) ? names[outcome] : "?";
}

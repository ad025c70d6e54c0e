/* kda_golden_envelope.c: the fp32 envelope of a production case file as the golden pipeline's
 * annex (SPEC.md §7.3, §10.2 "Stored envelope"), computed by the runner.
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_golden.h"
#include "kda_golden_envelope.h"

/* A vector member of the annex (copied). */
static int annex_add(kda_golden_annex *x, const char *name, const double *v, int64_t n) {
  if (x->n >= KDA_GOLDEN_ANNEX_MAX) return KDA_EINVAL;
  double *d = malloc(((size_t)n + 1) * sizeof *d);
  if (!d) return KDA_ENOMEM;
  if (n) memcpy(d, v, (size_t)n * sizeof *d);
  snprintf(x->name[x->n], sizeof x->name[x->n], "%s", name);
  x->len[x->n] = n, x->data[x->n++] = d;
  return KDA_OK;
}

/* The fp32 envelope a production case file carries (SPEC.md §7.3, §10.2 "Stored envelope"):
 * computed by the runner from the file as first written, exactly what kda conform computes
 * from that file, so that kda conform need not run the honest ensemble on it again. */
int kda_tool_envelope_annex(const char *path, kda_golden_annex *x, char *err, size_t errlen) {
  kda_case_file f;
  int st = kda_case_file_open(path, KDA_CASE_STREAM_AUTO, 0, &f, err, errlen);
  if (st != KDA_OK) return st;
  st = kda_case_file_truth(&f, err, errlen);
  const kda_problem *p = &f.c.p;
  const kda_envelope *env = &f.t.env;
  if (st == KDA_OK && (env->members < 0 || !env->o))
    st = KDA_EINVAL, snprintf(err, errlen, "%s: no envelope", path);
  if (st == KDA_OK) {
    snprintf(x->key, sizeof x->key, "envelope");
    char json[160];
    snprintf(json, sizeof json, "{\"rule\": \"%s\", \"members\": %d, \"window\": %d}",
             KDA_ENVELOPE_RULE, (int)env->members, KDA_ENVELOPE_WINDOW);
    x->json = strdup(json);
    st = x->json ? annex_add(x, "envelope_o", env->o, env->n_win) : KDA_ENOMEM;
  }
  if (st == KDA_OK && p->want_final_state) st = annex_add(x, "envelope_ht", env->ht, p->N);
  if (st == KDA_OK && p->n_checkpoints)
    st = annex_add(x, "envelope_hc", env->hc, p->n_checkpoints);
  if (st == KDA_OK) st = annex_add(x, "envelope_last", env->win_lasts, 1 + env->members);
  if (st == KDA_ENOMEM) snprintf(err, errlen, "%s: out of memory for the envelope", path);
  kda_case_file_close(&f);
  return st;
}


/* kda_conform_shard.c: conform runs in shards, and their reports merged (docs/scale.md).
 * SPDX-License-Identifier: MIT
 *
 * The merge works on the three reports as written, not on the runner's structures: the lines
 * of results.jsonl are kept verbatim and put back in the order of one run (by unit, then as
 * the shard wrote them); summary.json's counts are added, its per-report lists reordered the
 * same way, a waiver is unused when no shard used it, and the exit status is recomputed
 * (kda_run_status); junit.xml's testcases are regrouped per backend with the suites' counts
 * added.  Every key the merge does not know must be equal in every shard, so a report field
 * added later is carried or refused, never dropped.
 */
#include "kda_conform_shard.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kda_conform.h"
#include "kda_files.h"
#include "kda_golden_shard.h" /* kda_shard_parse, kda_golden_file_sha256 */
#include "kda_sha256.h"
#include "kda_tool.h"

#define SUB "conform"
#define SHARD_JSON_MAX (256 << 20)

struct kda_conform_shard {
  int64_t i, n;
  int ncase, nt;
  int64_t *shard_of; /* per unit k * nt + t */
  int cur_case;
  int64_t cur_unit;
  int64_t *lines, n_lines, cap_lines; /* the unit of each emitted report */
  json_t *plan;
  char plan_hex[65];
};

static int (*claim_fn)(void *, int64_t); /* kda_conform_shard_use_claims */
static void *claim_ctx;

void kda_conform_shard_use_claims(int (*claim)(void *ctx, int64_t unit), void *ctx) {
  claim_fn = claim;
  claim_ctx = ctx;
}

static const char *const report_names[3] = {"results.jsonl", "summary.json", "junit.xml"};

kda_conform_shard *kda_conform_shard_new(const char *spec) {
  char err[KDA_ERRLEN];
  kda_conform_shard *s = calloc(1, sizeof *s);
  if (!s) return kda_tool_fail(SUB, "out of memory"), NULL;
  if (kda_shard_parse(spec, &s->i, &s->n, err, sizeof err) != KDA_OK) {
    free(s);
    kda_tool_usage(SUB, "%s", err);
    return NULL;
  }
  return s;
}

void kda_conform_shard_free(kda_conform_shard *s) {
  if (!s) return;
  free(s->shard_of);
  free(s->lines);
  json_decref(s->plan);
  free(s);
}

static const double *sort_cost;
static int by_cost(const void *a, const void *b) {
  const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
  const double x = sort_cost[i], y = sort_cost[j];
  return x < y ? 1 : x > y ? -1 : (i > j) - (i < j);
}

/* Greedy longest processing time, as for golden shards (kda_golden_partition). */
static int partition(kda_conform_shard *s, char *const *paths) {
  const int64_t nu = (int64_t)s->ncase * s->nt;
  int64_t *order = malloc((size_t)(nu ? nu : 1) * sizeof *order);
  double *cost = malloc((size_t)(nu ? nu : 1) * sizeof *cost);
  double *load = calloc((size_t)s->n, sizeof *load);
  s->shard_of = malloc((size_t)(nu ? nu : 1) * sizeof *s->shard_of);
  if (!order || !cost || !load || !s->shard_of) {
    free(order), free(cost), free(load);
    return kda_tool_fail(SUB, "out of memory");
  }
  for (int64_t u = 0; u < nu; u++) {
    struct stat sb;
    order[u] = u;
    cost[u] = 1.0 + (stat(paths[u / s->nt], &sb) == 0 ? (double)sb.st_size : 0.0);
  }
  sort_cost = cost;
  qsort(order, (size_t)nu, sizeof *order, by_cost);
  for (int64_t k = 0; k < nu; k++) {
    int64_t best = 0;
    for (int64_t j = 1; j < s->n; j++)
      if (load[j] < load[best]) best = j;
    s->shard_of[order[k]] = best;
    load[best] += cost[order[k]];
  }
  free(order), free(cost), free(load);
  return 0;
}

int kda_conform_shard_plan(kda_conform_shard *s, char *const *paths, int n,
                           const char *const *targets, int nt, int argc, char **argv) {
  json_t *cases = json_array(), *tg = json_array(), *args = json_array();
  for (int k = 0; k < n; k++) /* a path JSON cannot hold would shift every unit after it */
    if (json_array_append_new(cases, json_string(paths[k])))
      return json_decref(cases), json_decref(tg), json_decref(args),
             kda_tool_fail(SUB, "%s: a case path that is not UTF-8 cannot be in a shard's plan",
                           paths[k]);
  for (int t = 0; t < nt; t++)
    if (json_array_append_new(tg, json_string(targets[t])))
      return json_decref(cases), json_decref(tg), json_decref(args),
             kda_tool_fail(SUB, "%s: a target that is not UTF-8 cannot be in a shard's plan",
                           targets[t]);
  for (int k = 1; k < argc; k++) { /* the options, less where this shard's reports go */
    const char *a = argv[k];
    if (!strcmp(a, "--shard") || !strcmp(a, "-o") || !strcmp(a, "--out")) {
      k++;
      continue;
    }
    if (!strncmp(a, "--shard=", 8) || !strncmp(a, "--out=", 6) || (!strncmp(a, "-o", 2) && a[2]))
      continue;
    json_array_append_new(args, json_string(a));
  }
  s->plan = json_pack("{s:o,s:o,s:o}", "cases", cases, "targets", tg, "args", args);
  char *text = s->plan ? json_dumps(s->plan, JSON_COMPACT) : NULL;
  if (!text) return kda_tool_fail(SUB, "out of memory");
  kda_sha256 h;
  unsigned char d[KDA_SHA256_BYTES];
  kda_sha256_init(&h);
  kda_sha256_update(&h, text, strlen(text));
  kda_sha256_final(&h, d);
  kda_sha256_hex(d, s->plan_hex);
  free(text);
  s->ncase = n;
  s->nt = nt;
  int rc = partition(s, paths);
  for (int64_t u = 0; !rc && claim_fn && u < (int64_t)n * nt; u++) s->shard_of[u] = -1;
  return rc; /* with claims, -1: not asked yet (kda_conform_shard_case asks) */
}

int kda_conform_shard_case(kda_conform_shard *s, int k) {
  if (!s) return 1;
  s->cur_case = k;
  int any = 0;
  for (int t = 0; t < s->nt; t++) {
    int64_t *o = &s->shard_of[(int64_t)k * s->nt + t];
    if (*o == -1) *o = claim_fn(claim_ctx, (int64_t)k * s->nt + t) == 1 ? s->i : -2;
    any |= *o == s->i;
  }
  return any;
}

int kda_conform_shard_target(kda_conform_shard *s, int t) {
  if (!s) return 1;
  s->cur_unit = (int64_t)s->cur_case * s->nt + t;
  return t < s->nt && s->shard_of[s->cur_unit] == s->i;
}

void kda_conform_shard_emitted(kda_conform_shard *s) {
  if (!s) return;
  if (s->n_lines == s->cap_lines) {
    int64_t cap = s->cap_lines ? 2 * s->cap_lines : 64;
    int64_t *p = realloc(s->lines, (size_t)cap * sizeof *p);
    if (!p) return; /* the count then disagrees with results.jsonl: the merge refuses it */
    s->lines = p, s->cap_lines = cap;
  }
  s->lines[s->n_lines++] = s->cur_unit;
}

int kda_conform_shard_finish(const kda_conform_shard *s, const char *dir) {
  char err[KDA_ERRLEN], path[4200];
  json_t *units = json_array(), *lines = json_array(), *files = json_object();
  for (int64_t u = 0; u < (int64_t)s->ncase * s->nt; u++)
    if (s->shard_of[u] == s->i) json_array_append_new(units, json_integer(u));
  for (int64_t k = 0; k < s->n_lines; k++) json_array_append_new(lines, json_integer(s->lines[k]));
  for (int f = 0; f < 3; f++) {
    char hex[65];
    int64_t size = 0;
    snprintf(path, sizeof path, "%s/%s", dir, report_names[f]);
    if (kda_golden_file_sha256(path, hex, &size, err, sizeof err) != KDA_OK)
      return json_decref(units), json_decref(lines), json_decref(files),
             kda_tool_fail(SUB, "%s", err);
    json_object_set_new(files, report_names[f], json_pack("{s:s,s:I}", "sha256", hex, "size",
                                                          (json_int_t)size));
  }
  json_t *root = json_pack("{s:s,s:s,s:s,s:O,s:I,s:I,s:o,s:o,s:o}", "schema", KDA_SHARD_SCHEMA,
                           "kind", "conform", "plan_sha256", s->plan_hex, "plan", s->plan,
                           "shard", (json_int_t)s->i, "of", (json_int_t)s->n, "units", units,
                           "lines", lines, "files", files);
  char *text = root ? json_dumps(root, JSON_INDENT(1)) : NULL;
  json_decref(root);
  if (!text) return kda_tool_fail(SUB, "out of memory");
  snprintf(path, sizeof path, "%s/shard.json", dir);
  kda_atomic *at;
  FILE *f;
  int st = kda_atomic_open(path, &at, &f, err, sizeof err);
  if (st == KDA_OK) {
    fputs(text, f);
    fputc('\n', f);
    st = kda_atomic_commit(at, err, sizeof err);
  }
  free(text);
  return st == KDA_OK ? 0 : kda_tool_fail(SUB, "%s", err);
}

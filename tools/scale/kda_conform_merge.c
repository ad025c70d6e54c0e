/* kda_conform_merge.c: `kda conform --merge OUTDIR SHARD_OUT...` (docs/scale.md).
 * SPDX-License-Identifier: MIT
 *
 * Every shard is checked before anything is written: its shard.json (kda-shard/1, kind
 * conform), that all shards share one plan (the same cases, targets and options), that there
 * are N of them with distinct I covering every unit once, and the SHA-256 of its three
 * reports.  Then the reports of one run are assembled (kda_conform_shard.c says how) and
 * written atomically into OUTDIR.  The exit status is the merged run's (0, 1 or 5; SPEC.md
 * §12.2), or 2 with one line naming the shard.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kda_conform.h"
#include "kda_conform_shard.h"
#include "kda_files.h"
#include "kda_golden_shard.h"
#include "kda_internal.h" /* kda_fail */
#include "kda_sha256.h"
#include "kda_tool.h"

#define SUB "conform"
#define FILE_MAX ((size_t)1 << 31) /* reports larger than this are not a shard's */

typedef struct mline {
  int64_t unit, local;
  const char *text; /* the line, verbatim (into the shard's buffer) */
  size_t len;
  const char *case_id, *backend; /* owned by the shard's parsed lines */
  int32_t verdict;
  json_t *j; /* the parsed line (borrowed from the shard's parsed lines) */
} mline;

typedef struct cshard {
  const char *dir;
  json_t *root, *summary, *parsed; /* parsed: the lines as JSON, for case and backend */
  char *jsonl, *junit;
  mline *lines;
  int64_t nl;
} cshard;

typedef struct mstate {
  cshard *sh;
  int n;
  int64_t n_of, n_units;
  char plan[65];
  int *owner; /* per unit */
  char *seen_i;
  int64_t units_listed; /* units every shard.json lists, together: n_units is at most this */
  json_t *plan_cases, *plan_targets; /* the first shard's plan (borrowed) */
  int strict;
} mstate;

static int bad(char *err, size_t errlen, const char *dir, const char *what) {
  return kda_fail(KDA_EFORMAT, err, errlen, "%s: %s", dir, what);
}

static int read_text(const char *dir, const char *name, char **out, size_t *len, char *err,
                     size_t errlen) {
  char path[4200], e2[KDA_ERRLEN];
  size_t n;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (access(path, F_OK) != 0)
    return bad(err, errlen, dir, "a report is missing (results.jsonl, summary.json or "
               "junit.xml)");
  int st = kda_input_read(path, FILE_MAX, out, &n, e2, sizeof e2); /* regular files only */
  if (st != KDA_OK) return kda_fail(st, err, errlen, "%s", e2);
  if (len) *len = n;
  return KDA_OK;
}

/* A JSON file of the shard, read as read_text does. */
static json_t *read_json(const char *dir, const char *name, int *st, char *err, size_t errlen) {
  char *text;
  size_t len;
  *st = read_text(dir, name, &text, &len, err, errlen);
  if (*st) return NULL;
  json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
  free(text);
  if (!j) {
    char msg[64];
    snprintf(msg, sizeof msg, "%s: not valid JSON", name);
    *st = bad(err, errlen, dir, msg);
  }
  return j;
}

static int get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out) {
  json_t *x = json_object_get(o, key);
  if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi) return -1;
  *out = (int64_t)json_integer_value(x);
  return 0;
}

/* The files of a shard: each with its recorded size and SHA-256. */
static int check_files(const char *dir, json_t *files, char *err, size_t errlen) {
  static const char *const names[3] = {"results.jsonl", "summary.json", "junit.xml"};
  if (!json_is_object(files) || json_object_size(files) != 3)
    return bad(err, errlen, dir, "shard.json: malformed files");
  for (int f = 0; f < 3; f++) {
    json_t *rec = json_object_get(files, names[f]);
    const char *want = json_string_value(json_object_get(rec, "sha256"));
    int64_t size = -1, got = -1;
    char path[4200], hex[65], e2[KDA_ERRLEN], msg[300];
    if (!want || get_int(rec, "size", 0, INT64_MAX, &size))
      return bad(err, errlen, dir, "shard.json: malformed files");
    snprintf(path, sizeof path, "%s/%s", dir, names[f]);
    if (kda_golden_file_sha256(path, hex, &got, e2, sizeof e2) != KDA_OK)
      return bad(err, errlen, dir, e2);
    if (got != size || strcmp(hex, want) != 0) {
      snprintf(msg, sizeof msg, "%s: SHA-256 or size differs from shard.json (corrupt shard)",
               names[f]);
      return bad(err, errlen, dir, msg);
    }
  }
  return KDA_OK;
}

/* shard.json's header: schema, kind, plan (its hash recomputed), I/N, units. */
static int check_header(cshard *c, mstate *m, int s, char *err, size_t errlen) {
  json_t *r = c->root;
  const char *schema = json_string_value(json_object_get(r, "schema"));
  const char *kind = json_string_value(json_object_get(r, "kind"));
  const char *plan = json_string_value(json_object_get(r, "plan_sha256"));
  int64_t I = -1, N = 0;
  if (!schema || strcmp(schema, KDA_SHARD_SCHEMA) || !kind || strcmp(kind, "conform"))
    return bad(err, errlen, c->dir, "shard.json: not a " KDA_SHARD_SCHEMA " conform shard");
  json_t *p = json_object_get(r, "plan");
  json_t *cases = json_object_get(p, "cases"), *tg = json_object_get(p, "targets");
  if (!plan || get_int(r, "of", 1, KDA_SHARD_MAX, &N) || get_int(r, "shard", 0, N - 1, &I) ||
      !json_is_array(cases) || !json_is_array(tg) ||
      !json_is_array(json_object_get(r, "units")) || !json_is_array(json_object_get(r, "lines")))
    return bad(err, errlen, c->dir, "shard.json: malformed (plan, shard, of, units or lines)");
  char *text = json_dumps(p, JSON_COMPACT), hex[65];
  if (!text) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  kda_sha256 h;
  unsigned char d[KDA_SHA256_BYTES];
  kda_sha256_init(&h);
  kda_sha256_update(&h, text, strlen(text));
  kda_sha256_final(&h, d);
  kda_sha256_hex(d, hex);
  free(text);
  if (strcmp(hex, plan) != 0)
    return bad(err, errlen, c->dir, "shard.json: the plan does not have its plan_sha256");
  if (s == 0) {
    snprintf(m->plan, sizeof m->plan, "%s", plan);
    m->n_of = N;
    m->n_units = (int64_t)json_array_size(cases) * (int64_t)json_array_size(tg);
    m->plan_cases = cases, m->plan_targets = tg;
    m->seen_i = calloc((size_t)N, 1);
    if (!m->seen_i) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  } else if (strcmp(plan, m->plan) != 0 || N != m->n_of) {
    return bad(err, errlen, c->dir, "a shard of another run (its cases, targets, options or N "
               "differ from the first shard's: foreign shard)");
  }
  if (m->seen_i[I]) return bad(err, errlen, c->dir, "this shard is given twice (duplicated "
                               "shard)");
  m->seen_i[I] = 1;
  return KDA_OK;
}

/* The units of shard s, once every header is checked: each in range and in no other shard.
 * The owner table is sized by the plan only once the shards list that many units together
 * (memory bounded by the data, not by a plan's claim). */
static int claim_units(cshard *c, mstate *m, int s, char *err, size_t errlen) {
  if (s == 0) {
    for (int64_t i = 0; i < m->n_of; i++)
      if (!m->seen_i[i])
        return kda_fail(KDA_EFORMAT, err, errlen, "shard %lld/%lld is missing (no directory "
                        "given holds it)", (long long)i, (long long)m->n_of);
    if (m->n_units > m->units_listed)
      return bad(err, errlen, c->dir, "the plan has more units than its shards list (missing "
                 "units)");
    m->owner = malloc((size_t)(m->n_units ? m->n_units : 1) * sizeof *m->owner);
    if (!m->owner) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
    for (int64_t u = 0; u < m->n_units; u++) m->owner[u] = -1;
  }
  json_t *units = json_object_get(c->root, "units");
  for (size_t k = 0; k < json_array_size(units); k++) {
    json_t *x = json_array_get(units, k);
    int64_t u = json_is_integer(x) ? json_integer_value(x) : -1;
    if (u < 0 || u >= m->n_units) return bad(err, errlen, c->dir, "shard.json: a unit out of "
                                             "range");
    if (m->owner[u] >= 0) return bad(err, errlen, c->dir, "a unit is also in another shard "
                                     "(duplicated unit)");
    m->owner[u] = s;
  }
  return KDA_OK;
}

/* The verdict a line names, or -1. */
static int32_t verdict_of(json_t *j) {
  const char *v = json_string_value(json_object_get(j, "verdict"));
  for (int32_t k = 0; v && k <= KDA_VERDICT_TIMEOUT; k++)
    if (!strcmp(v, kda_verdict_name(k))) return k;
  return -1;
}

/* A line of unit u (case-major: case u / nt, target u % nt) names that target and that case:
 * the case file's name less ".npz", or its id when the file is here to read, or a serving
 * prompt of it ("ID.SUFFIX", SPEC.md §7.7). */
static int line_in_plan(const mstate *m, int64_t u, const char *case_id, const char *backend) {
  const int64_t nt = (int64_t)json_array_size(m->plan_targets);
  const char *tg = json_string_value(json_array_get(m->plan_targets, (size_t)(u % nt)));
  const char *path = json_string_value(json_array_get(m->plan_cases, (size_t)(u / nt)));
  if (!tg || !path || strcmp(tg, backend) != 0) return 0;
  const char *b = strrchr(path, '/');
  char id[4096];
  snprintf(id, sizeof id, "%s", b ? b + 1 : path);
  size_t n = strlen(id);
  if (n > 4 && !strcmp(id + n - 4, ".npz")) id[n -= 4] = 0;
  if (!strncmp(case_id, id, n) && (case_id[n] == 0 || case_id[n] == '.')) return 1;
  kda_case c; /* a case file named otherwise than its id */
  char e2[KDA_ERRLEN];
  if (access(path, R_OK) != 0 || kda_case_load_static(path, &c, e2, sizeof e2) != KDA_OK) return 0;
  n = c.id ? strlen(c.id) : 0;
  int ok = n && !strncmp(case_id, c.id, n) && (case_id[n] == 0 || case_id[n] == '.');
  kda_case_free(&c);
  return ok;
}

/* results.jsonl: as many lines as shard.json says, each of one of the shard's units, each a
 * JSON object with its case and backend. */
static int load_lines(cshard *c, const mstate *m, int s, char *err, size_t errlen) {
  size_t len = 0;
  int st = read_text(c->dir, "results.jsonl", &c->jsonl, &len, err, errlen);
  if (st) return st;
  json_t *units = json_object_get(c->root, "lines");
  const int64_t n = (int64_t)json_array_size(units);
  c->lines = calloc((size_t)(n ? n : 1), sizeof *c->lines);
  c->parsed = json_array();
  if (!c->lines || !c->parsed) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  char *p = c->jsonl, *end = c->jsonl + len;
  for (int64_t k = 0; k < n; k++) {
    char *nl = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
    json_t *x = json_array_get(units, (size_t)k);
    int64_t u = json_is_integer(x) ? json_integer_value(x) : -1;
    if (!nl) return bad(err, errlen, c->dir, "results.jsonl has fewer lines than shard.json "
                        "says");
    if (u < 0 || u >= m->n_units || m->owner[u] != s)
      return bad(err, errlen, c->dir, "shard.json: a line of a unit not in the shard");
    json_t *j = json_loadb(p, (size_t)(nl - p), JSON_REJECT_DUPLICATES, NULL);
    const char *cs = json_string_value(json_object_get(j, "case"));
    const char *bk = json_string_value(json_object_get(j, "backend"));
    const int32_t v = verdict_of(j);
    if (!cs || !bk || v < 0)
      return json_decref(j), bad(err, errlen, c->dir, "results.jsonl: a line without case, "
                                 "backend or verdict");
    json_array_append_new(c->parsed, j);
    if (!line_in_plan(m, u, cs, bk))
      return bad(err, errlen, c->dir, "results.jsonl: a line whose case or backend is not its "
                 "unit's in the plan");
    c->lines[k] = (mline){u, k, p, (size_t)(nl + 1 - p), cs, bk, v, j};
    p = nl + 1;
  }
  if (p != end) return bad(err, errlen, c->dir, "results.jsonl has more lines than shard.json "
                           "says");
  c->nl = n;
  return KDA_OK;
}

/* shard.json of every shard first: how many units they list bounds what the plan may ask. */
static int load_root(cshard *c, mstate *m, char *err, size_t errlen) {
  char path[4200];
  snprintf(path, sizeof path, "%s/shard.json", c->dir);
  if (access(path, F_OK) != 0)
    return bad(err, errlen, c->dir, "no shard.json (not a conform shard, or its run did not "
               "finish)");
  int st;
  c->root = read_json(c->dir, "shard.json", &st, err, errlen);
  if (st) return st;
  m->units_listed += (int64_t)json_array_size(json_object_get(c->root, "units"));
  return KDA_OK;
}

static int load_shard(cshard *c, mstate *m, int s, char *err, size_t errlen) {
  int st = check_files(c->dir, json_object_get(c->root, "files"), err, errlen);
  if (!st) st = load_lines(c, m, s, err, errlen);
  if (!st) c->summary = read_json(c->dir, "summary.json", &st, err, errlen);
  if (!st && !json_is_object(c->summary))
    st = bad(err, errlen, c->dir, "summary.json: not an object");
  if (!st) st = read_text(c->dir, "junit.xml", &c->junit, NULL, err, errlen);
  return st;
}

/* ---- summary.json. */
typedef struct entry {
  int64_t unit, local;
  void *v;       /* json_t * or a junit testcase block (const char *) */
  size_t len;
} entry;

static int by_unit(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->unit != y->unit) return x->unit < y->unit ? -1 : 1;
  return (x->local > y->local) - (x->local < y->local);
}

/* ---- Recounted from the lines (never taken from a shard's summary). */

/* The tally of lines [0, n) of order (entries whose v is an mline). */
static int tally_lines(const entry *order, int64_t n, kda_tally *t) {
  kda_case_report *r = calloc(1, sizeof *r);
  if (!r) return -1;
  memset(t, 0, sizeof *t);
  for (int64_t k = 0; k < n; k++) {
    r->verdict = ((const mline *)order[k].v)->verdict;
    kda_tally_add(t, r);
  }
  free(r);
  return 0;
}

/* A per-report list (failing, nondeterministic, backend_output) of the merged run, from the
 * lines in the order of one run (as kda_report_summary_json makes it). */
static json_t *list_of(const mstate *m, const entry *order, int64_t n, const char *key) {
  json_t *out = json_array();
  for (int64_t k = 0; out && k < n; k++) {
    const mline *l = order[k].v;
    json_t *x = NULL;
    if (!strcmp(key, "failing")) {
      int32_t v = l->verdict;
      if (kda_verdict_is_failure(v) ||
          (m->strict && (v == KDA_VERDICT_QUALITY_WARNING || v == KDA_VERDICT_WAIVED)))
        x = json_pack("{s:s,s:s,s:s,s:O}", "case", l->case_id, "backend", l->backend, "verdict",
                      kda_verdict_name(v), "reason", json_object_get(l->j, "reason"));
    } else if (!strcmp(key, "nondeterministic")) {
      if (json_is_true(json_object_get(l->j, "nondeterministic")))
        x = json_pack("{s:s,s:s}", "case", l->case_id, "backend", l->backend);
    } else {
      json_t *lb = json_object_get(l->j, "log_bytes");
      if (json_is_integer(lb) && json_integer_value(lb) > 0)
        x = json_pack("{s:s,s:s,s:O}", "case", l->case_id, "backend", l->backend, "log_bytes", lb);
    }
    if (x && json_array_append_new(out, x)) return json_decref(out), NULL;
  }
  return out;
}

/* 1 when a line of shard c was waived by waiver index i. */
static int shard_used(const cshard *c, json_int_t i) {
  for (int64_t k = 0; k < c->nl; k++) {
    json_t *ix = json_object_get(json_object_get(c->lines[k].j, "waiver"), "index");
    if (json_is_integer(ix) && json_integer_value(ix) == i) return 1;
  }
  return 0;
}

/* A waiver waived nothing in the run when no line of any shard was waived by it.  Each
 * shard's list must be what its lines say (an entry exactly when none of its lines used it). */
static json_t *merge_unused(const mstate *m, char *err, size_t errlen) {
  json_t *out = json_array();
  for (int s = 0; out && s < m->n; s++) {
    json_t *a = json_object_get(m->sh[s].summary, "unused_waivers");
    if (!json_is_array(a)) return json_decref(out), bad(err, errlen, m->sh[s].dir,
                                                        "summary.json: malformed unused_waivers"), NULL;
    for (size_t k = 0; k < json_array_size(a); k++) {
      json_t *w = json_array_get(a, k), *ix = json_object_get(w, "index");
      if (!json_is_integer(ix) || shard_used(&m->sh[s], json_integer_value(ix)))
        return json_decref(out), bad(err, errlen, m->sh[s].dir, "summary.json: an unused "
                                     "waiver its own results.jsonl used"), NULL;
      int used = 0, listed = 0;
      for (size_t j = 0; j < json_array_size(out) && !listed; j++)
        listed = json_equal(json_array_get(out, j), w);
      for (int s2 = 0; s2 < m->n && !used; s2++) {
        json_t *b = json_object_get(m->sh[s2].summary, "unused_waivers");
        int in_b = 0;
        for (size_t j = 0; j < json_array_size(b) && !in_b; j++)
          in_b = json_equal(json_array_get(b, j), w);
        used = !in_b;
        if (!in_b && !shard_used(&m->sh[s2], json_integer_value(ix)))
          return json_decref(out), bad(err, errlen, m->sh[s2].dir, "summary.json: a waiver its "
                                       "lines did not use is missing from unused_waivers"), NULL;
      }
      if (!used && !listed) json_array_append(out, w);
    }
  }
  return out;
}

/* Reports compared with the baseline, and absent from it, from the lines. */
static json_t *merge_baseline(const entry *order, int64_t n, json_t *x0) {
  if (!json_is_object(x0)) return json_incref(x0);
  json_int_t c = 0, a = 0;
  for (int64_t k = 0; k < n; k++) {
    const char *b = json_string_value(json_object_get(((const mline *)order[k].v)->j, "baseline"));
    c += b && !strcmp(b, "compared"), a += b && !strcmp(b, "absent");
  }
  return json_pack("{s:O,s:I,s:I}", "path", json_object_get(x0, "path"), "compared", c,
                   "absent", a);
}

/* The value of one key of the merged summary; NULL with err set when the shards disagree. */
static json_t *merge_key(const mstate *m, const entry *order, int64_t nl, const kda_tally *t,
                         const char *key, char *err, size_t errlen) {
  json_t *x0 = json_object_get(m->sh[0].summary, key);
  if (!strcmp(key, "cases")) return json_integer((json_int_t)nl);
  if (!strcmp(key, "passed")) return json_integer(t->passed);
  if (!strcmp(key, "failed")) return json_integer(t->failed);
  if (!strcmp(key, "skipped")) return json_integer(t->skipped);
  if (!strcmp(key, "by_verdict")) {
    json_t *o = json_object();
    for (int32_t v = 0; o && v <= KDA_VERDICT_TIMEOUT; v++)
      json_object_set_new(o, kda_verdict_name(v), json_integer(t->by_verdict[v]));
    return o;
  }
  if (!strcmp(key, "failing") || !strcmp(key, "nondeterministic") ||
      !strcmp(key, "backend_output"))
    return list_of(m, order, nl, key);
  if (!strcmp(key, "unused_waivers")) return merge_unused(m, err, errlen);
  if (!strcmp(key, "exit_status")) return json_null(); /* recomputed at the end */
  for (int s = 1; s < m->n; s++) /* everything else: the same in every shard */
    if (!json_equal(json_object_get(m->sh[s].summary, key), x0)) {
      char msg[200];
      snprintf(msg, sizeof msg, "summary.json: '%.100s' differs from the first shard's", key);
      return bad(err, errlen, m->sh[s].dir, msg), NULL;
    }
  if (!strcmp(key, "baseline")) return merge_baseline(order, nl, x0);
  return json_incref(x0);
}

/* Each shard's own counts against its lines: an edited summary is refused, not merged. */
static int check_counts(const cshard *c, char *err, size_t errlen) {
  entry *e = calloc((size_t)(c->nl ? c->nl : 1), sizeof *e);
  kda_tally t;
  if (!e) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  for (int64_t k = 0; k < c->nl; k++) e[k].v = &c->lines[k];
  int rc = tally_lines(e, c->nl, &t);
  free(e);
  if (rc) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  static const char *const keys[4] = {"cases", "passed", "failed", "skipped"};
  const int64_t want[4] = {c->nl, t.passed, t.failed, t.skipped};
  for (int k = 0; k < 4; k++) {
    json_t *x = json_object_get(c->summary, keys[k]);
    if (!json_is_integer(x) || json_integer_value(x) != want[k])
      return bad(err, errlen, c->dir, "summary.json: its counts are not those of its "
                 "results.jsonl (an edited shard)");
  }
  return KDA_OK;
}

static json_t *merge_summary(mstate *m, const entry *order, int64_t nl, kda_tally *t,
                             int32_t *status, char *err, size_t errlen) {
  json_t *out = json_object(), *x0 = m->sh[0].summary;
  const char *key;
  json_t *val;
  err[0] = '\0';
  for (int s = 0; s < m->n; s++) {
    if (json_object_size(m->sh[s].summary) != json_object_size(x0))
      return json_decref(out), bad(err, errlen, m->sh[s].dir, "summary.json: other keys than "
                                   "the first shard's"), NULL;
    if (check_counts(&m->sh[s], err, errlen)) return json_decref(out), NULL;
  }
  m->strict = json_is_true(json_object_get(x0, "strict"));
  if (!out || tally_lines(order, nl, t))
    return json_decref(out), kda_fail(KDA_ENOMEM, err, errlen, "out of memory"), NULL;
  json_object_foreach(x0, key, val) {
    json_t *v = merge_key(m, order, nl, t, key, err, errlen);
    if (!v) {
      if (!err[0]) bad(err, errlen, m->sh[0].dir, "summary.json: malformed");
      return json_decref(out), NULL;
    }
    json_object_set_new(out, key, v);
  }
  *status = kda_run_status(t, (int64_t)json_array_size(json_object_get(out, "unused_waivers")),
                           m->strict);
  json_object_set_new(out, "exit_status", json_integer(*status));
  return out;
}

/* ---- junit.xml: suites "  <testsuite name=...>" of testcase blocks ("    <testcase .../>"
 * or up to "    </testcase>"), the k-th block of a suite being the shard's k-th report of
 * that backend (kda_report_junit_strict). */
static void xml_escape(const char *s, char *out, size_t cap) {
  size_t n = 0;
  for (; *s && n + 7 < cap; s++) {
    const char *r = *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : *s == '&' ? "&amp;"
                    : *s == '"' ? "&quot;" : *s == '\'' ? "&apos;" : NULL;
    if (r) n += (size_t)snprintf(out + n, cap - n, "%s", r);
    else out[n++] = (unsigned char)*s < 0x20 && *s != '\n' && *s != '\t' ? ' ' : *s;
  }
  out[n] = '\0';
}

typedef struct suite {
  char name[512];
  long long tests, failures, errors, skipped;
  double time;
  entry *cases;
  size_t n, cap;
} suite;

static suite *find_suite(suite *s, size_t n, const char *name) {
  for (size_t k = 0; k < n; k++)
    if (!strcmp(s[k].name, name)) return &s[k];
  return NULL;
}

/* A testcase block of line l: its classname and name are the line's backend and case, its
 * element (failure, error, skipped or none) the line's verdict's (kda_report_junit_strict);
 * counted into suite s.  0, or -1 when it is another's. */
static int testcase_check(const mline *l, const char *p, size_t len, int strict, suite *s) {
  char be[512], ce[512], head[1200];
  xml_escape(l->backend, be, sizeof be), xml_escape(l->case_id, ce, sizeof ce);
  int n = snprintf(head, sizeof head, "    <testcase classname=\"kda.conform.%s\" name=\"%s\" "
                   "time=\"", be, ce);
  if (n < 0 || (size_t)n >= sizeof head || len < (size_t)n || strncmp(p, head, (size_t)n)) return -1;
  const int32_t v = l->verdict;
  const int sf = strict && (v == KDA_VERDICT_QUALITY_WARNING || v == KDA_VERDICT_WAIVED);
  const int fail = v == KDA_VERDICT_FAIL || sf, error = v == KDA_VERDICT_CRASH ||
                   v == KDA_VERDICT_TIMEOUT;
  const int skip = (v == KDA_VERDICT_NOT_SUPPORTED || v == KDA_VERDICT_WAIVED) && !sf;
  /* the element opens the block's first line after the properties: search the block */
  char *blk = strndup(p, len);
  if (!blk) return -1;
  const int has_f = strstr(blk, "\n      <failure ") != NULL;
  const int has_e = strstr(blk, "\n      <error ") != NULL;
  const int has_s = strstr(blk, "\n      <skipped ") != NULL;
  free(blk);
  if (has_f != fail || has_e != error || has_s != skip) return -1;
  s->tests++, s->failures += fail, s->errors += error, s->skipped += skip;
  return 0;
}

/* The testsuites of one shard's junit.xml, each testcase matched to the next unused line of
 * its backend in results.jsonl (marked in used). */
static int junit_suites(const cshard *c, int strict, suite *su, size_t *nsu, size_t cap,
                        const char **pre, size_t *npre, char *used, char *err, size_t errlen) {
  const char *p = c->junit, *first = strstr(p, "\n  <testsuite ");
  const char *end_all = strstr(p, "</testsuites>\n");
  if (!end_all) return bad(err, errlen, c->dir, "junit.xml: malformed");
  const size_t np = first && first < end_all ? (size_t)(first + 1 - p) : (size_t)(end_all - p);
  if (*pre && (np != *npre || strncmp(*pre, p, np)))
    return bad(err, errlen, c->dir, "junit.xml: another header than the first shard's");
  *pre = p, *npre = np;
  p += np;
  while (!strncmp(p, "  <testsuite name=\"", 19)) {
    const char *q = strchr(p + 19, '"'), *eol = strchr(p, '\n');
    suite h = {{0}, 0, 0, 0, 0, 0, NULL, 0, 0};
    if (!q || !eol || (size_t)(q - p - 19) >= sizeof h.name ||
        sscanf(q, "\" tests=\"%lld\" failures=\"%lld\" errors=\"%lld\" skipped=\"%lld\" time=\"%lf\">",
               &h.tests, &h.failures, &h.errors, &h.skipped, &h.time) != 5)
      return bad(err, errlen, c->dir, "junit.xml: malformed testsuite");
    memcpy(h.name, p + 19, (size_t)(q - p - 19));
    suite *s = find_suite(su, *nsu, h.name);
    if (!s && *nsu == cap) return bad(err, errlen, c->dir, "junit.xml: too many testsuites");
    if (!s) s = &su[(*nsu)++], *s = h, s->tests = s->failures = s->errors = s->skipped = 0,
            s->time = 0;
    s->time += h.time; /* the counts: from the lines below */
    p = eol + 1;
    int64_t k = 0; /* the shard's lines of this backend, in order */
    while (!strncmp(p, "    <testcase ", 14)) {
      const char *e = strchr(p, '\n');
      if (e && e[-1] != '>') e = NULL;
      if (e && e[-2] != '/') e = strstr(p, "\n    </testcase>\n"), e = e ? e + 16 : NULL;
      char esc[512];
      while (k < c->nl && (xml_escape(c->lines[k].backend, esc, sizeof esc), strcmp(esc, h.name)))
        k++;
      if (!e || k >= c->nl || used[k]) return bad(err, errlen, c->dir, "junit.xml: testcases do "
                                                  "not match results.jsonl");
      if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 64;
        entry *x = realloc(s->cases, nc * sizeof *x);
        if (!x) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
        s->cases = x, s->cap = nc;
      }
      if (testcase_check(&c->lines[k], p, (size_t)(e + 1 - p), strict, s))
        return bad(err, errlen, c->dir, "junit.xml: a testcase is not its results.jsonl line's "
                   "(case, backend or verdict)");
      s->cases[s->n++] = (entry){c->lines[k].unit, c->lines[k].local, (void *)p,
                                 (size_t)(e + 1 - p)};
      used[k++] = 1;
      p = e + 1;
    }
    if (strncmp(p, "  </testsuite>\n", 15)) return bad(err, errlen, c->dir, "junit.xml: "
                                                       "malformed testsuite end");
    p += 15;
  }
  if (strcmp(p, "</testsuites>\n")) return bad(err, errlen, c->dir, "junit.xml: malformed end");
  return KDA_OK;
}

/* One shard's junit.xml into the merged suites (created in the order met; reordered later):
 * every line of results.jsonl has exactly one testcase (used), none is dropped or repeated. */
static int junit_shard(const cshard *c, int strict, suite *su, size_t *nsu, size_t cap,
                       const char **pre, size_t *npre, char *err, size_t errlen) {
  char *used = calloc((size_t)(c->nl ? c->nl : 1), 1);
  if (!used) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  int st = junit_suites(c, strict, su, nsu, cap, pre, npre, used, err, errlen);
  for (int64_t k = 0; !st && k < c->nl; k++)
    if (!used[k]) st = bad(err, errlen, c->dir, "junit.xml: a line of results.jsonl has no "
                           "testcase");
  free(used);
  return st;
}

static char *merge_junit(const mstate *m, entry *order, int64_t nl, char *err, size_t errlen) {
  enum { MAXS = 256 };
  suite *su = calloc(MAXS, sizeof *su);
  size_t nsu = 0, npre = 0;
  const char *pre = NULL;
  int st = su ? KDA_OK : kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  for (int s = 0; !st && s < m->n; s++)
    st = junit_shard(&m->sh[s], m->strict, su, &nsu, MAXS, &pre, &npre, err, errlen);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = st ? NULL : open_memstream(&buf, &len);
  if (f) {
    fwrite(pre, 1, npre, f);
    /* suites in the order their backends first report in the merged run */
    for (int64_t k = 0; k < nl; k++) {
      char esc[512];
      xml_escape(((const mline *)order[k].v)->backend, esc, sizeof esc);
      suite *s = find_suite(su, nsu, esc);
      if (!s || s->tests < 0) continue;
      if (s->n) qsort(s->cases, s->n, sizeof *s->cases, by_unit);
      fprintf(f, "  <testsuite name=\"%s\" tests=\"%lld\" failures=\"%lld\" errors=\"%lld\" "
              "skipped=\"%lld\" time=\"%.6f\">\n", s->name, s->tests, s->failures, s->errors,
              s->skipped, s->time);
      for (size_t j = 0; j < s->n; j++) fwrite(s->cases[j].v, 1, s->cases[j].len, f);
      fputs("  </testsuite>\n", f);
      s->tests = -1; /* written */
    }
    fputs("</testsuites>\n", f);
    fclose(f);
  }
  for (size_t k = 0; su && k < nsu; k++) free(su[k].cases);
  free(su);
  if (!st && !buf) kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  return st ? NULL : buf;
}

/* ---- Writing and the command. */

/* The three reports into DIR, all or none (kda_atomic_commit_all). */
static int write_all(const char *dir, const char *const *names, const char *const *text,
                     const size_t *len) {
  char path[4200], err[KDA_ERRLEN];
  kda_atomic *at[3] = {NULL, NULL, NULL};
  int st = KDA_OK;
  for (int k = 0; k < 3 && st == KDA_OK; k++) {
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, names[k]);
    st = kda_atomic_open(path, &at[k], &f, err, sizeof err);
    if (st == KDA_OK) fwrite(text[k], 1, len[k], f);
  }
  if (st == KDA_OK) return kda_atomic_commit_all(at, 3, err, sizeof err) == KDA_OK
                              ? 0 : kda_tool_fail(SUB, "%s", err);
  for (int k = 0; k < 3; k++) kda_atomic_abort(at[k]);
  return kda_tool_fail(SUB, "%s", err);
}

static int check_all(mstate *m, char *err, size_t errlen) {
  int st = KDA_OK;
  for (int s = 0; !st && s < m->n; s++) st = load_root(&m->sh[s], m, err, errlen);
  for (int s = 0; !st && s < m->n; s++) st = check_header(&m->sh[s], m, s, err, errlen);
  for (int s = 0; !st && s < m->n; s++) st = claim_units(&m->sh[s], m, s, err, errlen);
  for (int s = 0; !st && s < m->n; s++) st = load_shard(&m->sh[s], m, s, err, errlen);
  for (int64_t i = 0; !st && i < m->n_of; i++)
    if (!m->seen_i[i])
      st = kda_fail(KDA_EFORMAT, err, errlen, "shard %lld/%lld is missing (no directory given "
                    "holds it)", (long long)i, (long long)m->n_of);
  for (int64_t u = 0; !st && u < m->n_units; u++)
    if (m->owner[u] < 0)
      st = kda_fail(KDA_EFORMAT, err, errlen, "unit %lld is in no shard (missing unit)",
                    (long long)u);
  return st;
}

/* The lines of every shard in the order of one run. */
static entry *order_lines(const mstate *m, int64_t *n) {
  *n = 0;
  for (int s = 0; s < m->n; s++) *n += m->sh[s].nl;
  entry *e = calloc((size_t)(*n ? *n : 1), sizeof *e);
  int64_t k = 0;
  for (int s = 0; e && s < m->n; s++)
    for (int64_t j = 0; j < m->sh[s].nl; j++)
      e[k++] = (entry){m->sh[s].lines[j].unit, j, &m->sh[s].lines[j], 0};
  if (e) qsort(e, (size_t)*n, sizeof *e, by_unit);
  return e;
}

static int merge_run(mstate *m, const char *out) {
  char err[KDA_ERRLEN] = "";
  if (check_all(m, err, sizeof err)) return kda_tool_fail(SUB, "%s", err);
  int64_t nl;
  entry *order = order_lines(m, &nl);
  kda_tally t;
  int32_t status = 0;
  json_t *sum = order ? merge_summary(m, order, nl, &t, &status, err, sizeof err) : NULL;
  char *junit = sum ? merge_junit(m, order, nl, err, sizeof err) : NULL;
  char *stext = sum ? json_dumps(sum, JSON_INDENT(1)) : NULL;
  char *jsonl = NULL;
  size_t jlen = 0;
  FILE *f = stext && junit ? open_memstream(&jsonl, &jlen) : NULL;
  for (int64_t k = 0; f && k < nl; k++)
    fwrite(((const mline *)order[k].v)->text, 1, ((const mline *)order[k].v)->len, f);
  if (f) fclose(f);
  int rc = jsonl ? 0 : kda_tool_fail(SUB, "%s", err[0] ? err : "out of memory"), lock = -1;
  if (!rc && mkdir(out, 0777) != 0 && errno != EEXIST)
    rc = kda_tool_fail(SUB, "%s: cannot create: %s", out, strerror(errno));
  if (!rc && kda_dir_lock(out, &lock, err, sizeof err) != KDA_OK) rc = kda_tool_fail(SUB, "%s", err);
  if (!rc) kda_tmp_sweep(out);
  size_t sl = stext ? strlen(stext) : 0;
  char *s2 = stext ? realloc(stext, sl + 2) : NULL; /* summary.json ends with a newline */
  if (s2) stext = s2, stext[sl++] = '\n', stext[sl] = '\0';
  static const char *const names[3] = {"results.jsonl", "summary.json", "junit.xml"};
  const char *texts[3] = {jsonl, stext, junit};
  const size_t lens[3] = {jlen, sl, junit ? strlen(junit) : 0};
  if (!rc) rc = write_all(out, names, texts, lens);
  kda_dir_unlock(lock);
  if (!rc) kda_report_final(stdout, &t);
  free(order), free(junit), free(stext), free(jsonl);
  json_decref(sum);
  return rc ? rc : status;
}

int kda_conform_merge_main(int argc, char **argv) {
  if (argc < 4) return kda_tool_usage(SUB, "--merge needs OUTDIR and a shard output directory");
  const char *out = argv[2];
  char ro[PATH_MAX], rs[PATH_MAX];
  kda_path_resolved(out, ro);
  for (int k = 3; k < argc && ro[0]; k++) /* a shard is read, never written into */
    if (realpath(argv[k], rs) && kda_path_within(ro, rs))
      return kda_tool_fail(SUB, "%s: the output is, or is inside, the shard %s", out, argv[k]);
  mstate m = {calloc((size_t)(argc - 3), sizeof(cshard)), argc - 3, 0, 0, "", NULL, NULL, 0,
              NULL, NULL, 0};
  if (!m.sh) return kda_tool_fail(SUB, "out of memory");
  for (int s = 0; s < m.n; s++) m.sh[s].dir = argv[3 + s];
  int rc = merge_run(&m, out);
  for (int s = 0; s < m.n; s++) {
    json_decref(m.sh[s].root), json_decref(m.sh[s].summary), json_decref(m.sh[s].parsed);
    free(m.sh[s].jsonl), free(m.sh[s].junit), free(m.sh[s].lines);
  }
  free(m.sh), free(m.owner), free(m.seen_i);
  return rc;
}

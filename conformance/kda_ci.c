/* kda_ci.c: what a CI job gates on: validated waivers, baselines tied to a backend and a
 * class, and the exit status of a run (SPEC.md §7.6, §12.2).
 * SPDX-License-Identifier: MIT
 *
 * A waiver file or a baseline that does not say exactly what it means is an error, not a
 * silent no-op: a misspelled key would otherwise waive everything, and a baseline of another
 * backend would compare errors in the wrong units.
 */
#include <fnmatch.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_files.h"

/* Waiver files are written by hand, baselines by kda: both far smaller than these. */
#define WAIVERS_MAX ((size_t)1 << 20)
#define BASELINE_MAX ((size_t)16 << 20)
/* and what parsing them allocates (kda_json_values_check) */
#define CI_VALUES_MAX ((int64_t)1 << 20)

/* The JSON of a capped regular file (kda_input_read), or NULL with err filled. */
static json_t *load_json(const char *path, size_t max, int *st, char *err, size_t errlen) {
  char *buf;
  size_t len;
  json_error_t je;
  *st = kda_input_read(path, max, &buf, &len, err, errlen);
  if (*st != KDA_OK) return NULL;
  if ((*st = kda_json_values_check(buf, len, CI_VALUES_MAX, path, err, errlen)) != KDA_OK)
    return free(buf), NULL;
  json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
  free(buf);
  if (!root) { /* jansson quotes the bytes near the error: one line of report text */
    *st = KDA_EFORMAT;
    snprintf(err, errlen, "%s:%d: %s", path, je.line, je.text);
    kda_text_clean(err, errlen, err, 0);
  }
  return root;
}

/* ---- Waivers (SPEC.md §7.6). */
struct kda_waivers {
  json_t *root;
  json_t *list; /* borrowed from root */
};

static int key_allowed(const char *key, const char *const *allowed) {
  for (; *allowed; allowed++)
    if (strcmp(key, *allowed) == 0) return 1;
  return 0;
}

/* One waiver: only known keys, string values, at least one selector, a non-empty reason. */
static int waiver_check(const char *path, size_t i, json_t *w, char *err, size_t errlen) {
  static const char *const keys[] = {"case", "backend", "flag", "reason", "link", NULL};
  if (!json_is_object(w))
    return snprintf(err, errlen, "%s: waiver %zu is not an object", path, i), KDA_EFORMAT;
  const char *k;
  json_t *v;
  int selectors = 0;
  json_object_foreach(w, k, v) {
    if (!key_allowed(k, keys))
      return snprintf(err, errlen, "%s: waiver %zu: unknown key '%.64s' (allowed: case backend "
                      "flag reason link)", path, i, k), KDA_EFORMAT;
    if (!json_is_string(v) || json_string_length(v) == 0)
      return snprintf(err, errlen, "%s: waiver %zu: '%s' must be a non-empty string", path, i, k),
             KDA_EFORMAT;
    if (strlen(json_string_value(v)) != json_string_length(v))
      return snprintf(err, errlen, "%s: waiver %zu: '%s' holds a NUL byte", path, i, k),
             KDA_EFORMAT;
    selectors += strcmp(k, "case") == 0 || strcmp(k, "backend") == 0 || strcmp(k, "flag") == 0;
  }
  const char *const text[2] = {"reason", "link"}; /* report text from here on (SPEC.md §7.9) */
  for (int t = 0; t < 2; t++) {
    json_t *tv = json_object_get(w, text[t]);
    if (!tv) continue;
    size_t cap = json_string_length(tv) * 3 + 1;
    char *clean = malloc(cap);
    if (!clean) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
    kda_text_clean(clean, cap, json_string_value(tv), 0);
    int bad = json_string_set(tv, clean);
    free(clean);
    if (bad) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  }
  if (!json_object_get(w, "reason"))
    return snprintf(err, errlen, "%s: waiver %zu has no \"reason\"", path, i), KDA_EFORMAT;
  if (!selectors)
    return snprintf(err, errlen, "%s: waiver %zu selects nothing (give case, backend or flag); "
                    "it would waive every failure", path, i), KDA_EFORMAT;
  return KDA_OK;
}

static int waivers_check(const char *path, json_t *root, char *err, size_t errlen) {
  static const char *const keys[] = {"schema", "waivers", NULL};
  if (!json_is_object(root))
    return snprintf(err, errlen, "%s: top level is not an object", path), KDA_EFORMAT;
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) if (!key_allowed(k, keys))
    return snprintf(err, errlen, "%s: unknown top-level key '%.64s' (allowed: schema waivers)",
                    path, k), KDA_EFORMAT;
  json_t *schema = json_object_get(root, "schema");
  if (schema && !(json_is_string(schema) && !strcmp(json_string_value(schema), "kda-waivers/1")))
    return snprintf(err, errlen, "%s: schema is not \"kda-waivers/1\"", path), KDA_EFORMAT;
  json_t *list = json_object_get(root, "waivers");
  if (!json_is_array(list))
    return snprintf(err, errlen, "%s: no \"waivers\" array", path), KDA_EFORMAT;
  size_t i;
  json_t *w;
  json_array_foreach(list, i, w) {
    int st = waiver_check(path, i, w, err, errlen);
    if (st != KDA_OK) return st;
  }
  return KDA_OK;
}

static int waivers_load(const char *path, kda_waivers **out, char *err, size_t errlen) {
  *out = NULL;
  int st;
  json_t *root = load_json(path, WAIVERS_MAX, &st, err, errlen);
  if (!root) return st;
  st = waivers_check(path, root, err, errlen);
  if (st != KDA_OK) return json_decref(root), st;
  kda_waivers *w = calloc(1, sizeof *w);
  if (!w) return json_decref(root), snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  w->root = root;
  w->list = json_object_get(root, "waivers");
  *out = w;
  return KDA_OK;
}

void kda_waivers_free(kda_waivers *w) {
  if (!w) return;
  json_decref(w->root);
  free(w);
}

int64_t kda_waivers_count(const kda_waivers *w) {
  return w ? (int64_t)json_array_size(w->list) : 0;
}

static const char *wkey(const kda_waivers *w, int64_t i, const char *key) {
  return json_string_value(json_object_get(json_array_get(w->list, (size_t)i), key));
}

const char *kda_waivers_reason(const kda_waivers *w, int64_t i) { return wkey(w, i, "reason"); }
const char *kda_waivers_link(const kda_waivers *w, int64_t i) { return wkey(w, i, "link"); }

void kda_waivers_describe(const kda_waivers *w, int64_t i, char *buf, size_t cap) {
  static const char *const sel[] = {"case", "backend", "flag"};
  size_t n = (size_t)snprintf(buf, cap, "waiver %lld", (long long)i);
  for (int k = 0; k < 3 && n < cap; k++) {
    const char *v = wkey(w, i, sel[k]);
    if (v) n += (size_t)snprintf(buf + n, cap - n, " %s=%.100s", sel[k], v);
  }
  kda_text_clean(buf, cap, buf, 0); /* a glob cut mid-character, or control characters */
}

/* 1 when the case manifest's golden.flags (or top-level flags) array holds flag. */
static int has_flag(const char *manifest_json, const char *flag) {
  if (!manifest_json) return 0;
  json_t *m = json_loads(manifest_json, 0, NULL);
  if (!m) return 0;
  json_t *g = json_object_get(m, "golden");
  json_t *flags = json_object_get(g ? g : m, "flags");
  int found = 0;
  size_t i;
  json_t *f;
  json_array_foreach(flags, i, f) if (json_is_string(f) && strcmp(json_string_value(f), flag) == 0)
      found = 1;
  json_decref(m);
  return found;
}

static int glob_ok(json_t *w, const char *key, const char *value) {
  const char *pat = json_string_value(json_object_get(w, key));
  return !pat || fnmatch(pat, value ? value : "", 0) == 0;
}

/* A backend pattern matches the report's label NAME[:PARAMS] or the bare NAME (SPEC.md
 * §7.6): "simd" waives every simd instance, "simd:isa=avx2" only that one. */
static int backend_ok(json_t *w, const char *label) {
  if (glob_ok(w, "backend", label)) return 1;
  const char *colon = label ? strchr(label, ':') : NULL;
  if (!colon) return 0;
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)(colon - label), label);
  return glob_ok(w, "backend", name);
}

int64_t kda_waivers_find(const kda_waivers *ws, const char *case_id, const char *backend,
                         const char *manifest_json) {
  if (!ws) return -1;
  size_t i;
  json_t *w;
  json_array_foreach(ws->list, i, w) {
    const char *flag = json_string_value(json_object_get(w, "flag"));
    if (!glob_ok(w, "case", case_id) || !backend_ok(w, backend)) continue;
    if (flag && !has_flag(manifest_json, flag)) continue;
    return (int64_t)i;
  }
  return -1;
}

/* A waiver is used when it turned some report into Waived (r->waiver_no is 1 + its index);
 * one that only matched passing cases is stale and reported as unused. */
int64_t kda_waivers_unused(const kda_waivers *w, const kda_case_report *rs, int64_t n,
                           uint8_t *unused) {
  int64_t count = 0;
  for (int64_t i = 0; i < kda_waivers_count(w); i++) {
    int used = 0;
    for (int64_t k = 0; k < n && !used; k++) used = rs[k].waiver_no == i + 1;
    if (unused) unused[i] = (uint8_t)!used;
    count += !used;
  }
  return count;
}

/* ---- Baselines (SPEC.md §7.6): kda-baseline/1 holds one backend, kda-baseline/2 a map. */
struct kda_baseline {
  json_t *root;
  json_t *backends; /* kda-baseline/2: borrowed; NULL for /1 */
  char path[1024];
};

/* {ID: {"o": x, "ht": y, "hc": z}} with numbers >= 0 or null. */
static int cases_check(const char *path, const char *where, json_t *cases, char *err,
                       size_t errlen) {
  static const char *const keys[] = {"o", "ht", "hc", NULL};
  if (!json_is_object(cases))
    return snprintf(err, errlen, "%s: %s: no \"cases\" object", path, where), KDA_EFORMAT;
  const char *id, *k;
  json_t *c, *v;
  json_object_foreach(cases, id, c) {
    if (!json_is_object(c))
      return snprintf(err, errlen, "%s: %s: case '%.64s' is not an object", path, where, id),
             KDA_EFORMAT;
    json_object_foreach(c, k, v) {
      if (!key_allowed(k, keys))
        return snprintf(err, errlen, "%s: %s: case '%.64s': unknown key '%.32s' (o ht hc)", path,
                        where, id, k), KDA_EFORMAT;
      if (!json_is_null(v) && !(json_is_number(v) && json_number_value(v) >= 0))
        return snprintf(err, errlen, "%s: %s: case '%.64s': '%s' is not a number >= 0 or null",
                        path, where, id, k), KDA_EFORMAT;
    }
  }
  return KDA_OK;
}

static int class_check(const char *path, const char *where, json_t *cls, char *err,
                       size_t errlen) {
  int32_t c;
  if (!json_is_string(cls) || kda_class_parse(json_string_value(cls), &c) != KDA_OK)
    return snprintf(err, errlen, "%s: %s: \"class\" is not fp64 fp32 tf32 bf16 fp16", path, where),
           KDA_EFORMAT;
  return KDA_OK;
}

static int only_keys(const char *path, const char *where, json_t *o, const char *const *keys,
                     char *err, size_t errlen) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) if (!key_allowed(k, keys))
    return snprintf(err, errlen, "%s: %s: unknown key '%.64s'", path, where, k), KDA_EFORMAT;
  return KDA_OK;
}

static int baseline_check(const char *path, json_t *root, char *err, size_t errlen) {
  static const char *const v1[] = {"schema", "backend", "class", "cases", NULL};
  static const char *const v2[] = {"schema", "backends", NULL};
  static const char *const entry[] = {"class", "cases", NULL};
  const char *schema = json_string_value(json_object_get(root, "schema"));
  if (!json_is_object(root) || !schema)
    return snprintf(err, errlen, "%s: not a baseline (no \"schema\")", path), KDA_EFORMAT;
  int st;
  if (strcmp(schema, "kda-baseline/1") == 0) {
    if ((st = only_keys(path, "top level", root, v1, err, errlen)) != KDA_OK) return st;
    if (!json_is_string(json_object_get(root, "backend")))
      return snprintf(err, errlen, "%s: no \"backend\" name", path), KDA_EFORMAT;
    st = class_check(path, "top level", json_object_get(root, "class"), err, errlen);
    if (st != KDA_OK) return st;
    return cases_check(path, "top level", json_object_get(root, "cases"), err, errlen);
  }
  if (strcmp(schema, "kda-baseline/2") != 0)
    return snprintf(err, errlen, "%s: unknown schema '%.64s' (kda-baseline/1 or /2)", path,
                    schema), KDA_EFORMAT;
  if ((st = only_keys(path, "top level", root, v2, err, errlen)) != KDA_OK) return st;
  json_t *bs = json_object_get(root, "backends");
  if (!json_is_object(bs))
    return snprintf(err, errlen, "%s: no \"backends\" object", path), KDA_EFORMAT;
  const char *name;
  json_t *e;
  json_object_foreach(bs, name, e) {
    char where[128];
    snprintf(where, sizeof where, "backend '%.64s'", name);
    if (!json_is_object(e))
      return snprintf(err, errlen, "%s: %s is not an object", path, where), KDA_EFORMAT;
    if ((st = only_keys(path, where, e, entry, err, errlen)) != KDA_OK) return st;
    if ((st = class_check(path, where, json_object_get(e, "class"), err, errlen))) return st;
    if ((st = cases_check(path, where, json_object_get(e, "cases"), err, errlen))) return st;
  }
  return KDA_OK;
}

static int baseline_load(const char *path, kda_baseline **out, char *err, size_t errlen) {
  *out = NULL;
  int st;
  json_t *root = load_json(path, BASELINE_MAX, &st, err, errlen);
  if (!root) return st;
  st = baseline_check(path, root, err, errlen);
  if (st != KDA_OK) return json_decref(root), st;
  kda_baseline *b = calloc(1, sizeof *b);
  if (!b) return json_decref(root), snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  b->root = root;
  b->backends = json_object_get(root, "backends");
  snprintf(b->path, sizeof b->path, "%s", path);
  *out = b;
  return KDA_OK;
}

void kda_baseline_free(kda_baseline *b) {
  if (!b) return;
  json_decref(b->root);
  free(b);
}

/* The object holding "class" and "cases" for backend, or NULL. */
static json_t *baseline_entry(const kda_baseline *b, const char *backend) {
  if (!b) return NULL;
  if (b->backends) return json_object_get(b->backends, backend);
  const char *name = json_string_value(json_object_get(b->root, "backend"));
  return name && strcmp(name, backend) == 0 ? b->root : NULL;
}

int kda_baseline_check(const kda_baseline *b, const char *backend, int32_t cls, char *err,
                       size_t errlen) {
  json_t *e = baseline_entry(b, backend);
  if (!e && !b->backends)
    return snprintf(err, errlen, "%s: baseline recorded for backend '%s', not '%s' (record one "
                    "per backend, or a kda-baseline/2 map)",
                    b->path, json_string_value(json_object_get(b->root, "backend")), backend),
           KDA_EINVAL;
  if (!e)
    return snprintf(err, errlen, "%s: no baseline for backend '%s'", b->path, backend),
           KDA_ENOTFOUND;
  const char *bc = json_string_value(json_object_get(e, "class"));
  const char *rc = kda_class_name(cls);
  if (!rc || strcmp(bc, rc) != 0)
    return snprintf(err, errlen, "%s: baseline of backend '%s' is in class %s, this run scores "
                    "it in %s", b->path, backend, bc, rc ? rc : "?"), KDA_EINVAL;
  return KDA_OK;
}

static double num_or_nan(json_t *x) { return json_is_number(x) ? json_number_value(x) : NAN; }

int kda_baseline_get(const kda_baseline *b, const char *backend, const char *case_id, double *o,
                     double *ht, double *hc) {
  json_t *c = json_object_get(json_object_get(baseline_entry(b, backend), "cases"), case_id);
  if (!c) return 0;
  *o = num_or_nan(json_object_get(c, "o"));
  *ht = num_or_nan(json_object_get(c, "ht"));
  *hc = num_or_nan(json_object_get(c, "hc"));
  return 1;
}

/* ---- Exit status of a run (SPEC.md §12.2). */
int64_t kda_tally_ran(const kda_tally *t) {
  int64_t n = 0;
  for (int32_t v = 0; v <= KDA_VERDICT_TIMEOUT; v++)
    if (v != KDA_VERDICT_NOT_SUPPORTED) n += t->by_verdict[v];
  return n;
}

int32_t kda_run_status(const kda_tally *t, int64_t unused_waivers, int32_t strict) {
  if (t->failed) return KDA_RUN_FAILED;
  /* Nothing collected, or every backend declined every case: the run proved nothing. */
  if (kda_tally_ran(t) == 0) return KDA_RUN_NOTHING;
  if (strict && (t->by_verdict[KDA_VERDICT_QUALITY_WARNING] || t->by_verdict[KDA_VERDICT_WAIVED] ||
                 unused_waivers))
    return KDA_RUN_FAILED;
  return KDA_RUN_OK;
}

/* The readers' messages quote keys and values of the file: one line of report text, always. */
int kda_waivers_load(const char *path, kda_waivers **out, char *err, size_t errlen) {
  int st = waivers_load(path, out, err, errlen);
  if (st != KDA_OK) kda_text_clean(err, errlen, err, 0);
  return st;
}

int kda_baseline_load(const char *path, kda_baseline **out, char *err, size_t errlen) {
  int st = baseline_load(path, out, err, errlen);
  if (st != KDA_OK) kda_text_clean(err, errlen, err, 0);
  return st;
}

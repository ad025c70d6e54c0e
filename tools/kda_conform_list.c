/* kda_conform_list.c: `kda conform --list-backends` and `--list-cases` (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 *
 * Built-ins are listed in-process (they are part of this program); a plugin is loaded only in
 * a worker (SPEC.md §7.8), which tries a tiny problem, so that a plugin whose constructor
 * aborts, or that lacks its entry, is a row that says why, and the listing completes.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_conform.h"
#include "kda_conform_list.h"
#include "kda_explain.h"
#include "kda_serving.h"
#include "kda_tool.h"

#define SUB "conform"

/* One row of --list-backends, text or JSON. */
typedef struct row {
  char name[128];
  int32_t cls, in_dt, out_dt; /* -1: unknown (a plugin that did not load) */
  const char *def;            /* in the default set: "yes", "no", "-" (named) */
  int runs;
  char why[KDA_ERRLEN + 64];  /* why it does not run here, or "" */
  char picked[400];           /* ISA/device (describe), or "-" */
  char desc[512];
  char plugin[4096];          /* the plugin's path, "" for a built-in */
  char params[1024];          /* given to open */
  uint32_t abi;
} row;

/* What describe said (info from a hostile table: strings terminated first), or "-". */
static void picked_text(kda_backend_info *info, char *out, size_t cap) {
  info->device[sizeof info->device - 1] = info->isa[sizeof info->isa - 1] = 0;
  int w = snprintf(out, cap, "%s%s%s", info->device, info->device[0] && info->isa[0] ? ", " : "",
                   info->isa);
  if (w >= 0 && (size_t)w < cap && info->threads > 0)
    w += snprintf(out + w, cap - (size_t)w, ", %d thread%s", (int)info->threads,
                  info->threads == 1 ? "" : "s");
  if (w >= 0 && (size_t)w < cap && info->peak_flops > 0)
    snprintf(out + w, cap - (size_t)w, ", peak %.0f GFLOP/s", info->peak_flops / 1e9);
  if (!out[0]) snprintf(out, cap, "-");
}

/* A built-in, in-process (it is part of this program): open, describe, supports of a tiny
 * problem. */
static void builtin_row(const kda_backend *b, const char *params, const char *def, row *r) {
  snprintf(r->name, sizeof r->name, "%s", b->name);
  r->cls = b->precision_class, r->in_dt = b->input_dtype, r->out_dt = b->output_dtype;
  r->def = def, r->abi = b->abi_version;
  snprintf(r->params, sizeof r->params, "%s", params);
  snprintf(r->desc, sizeof r->desc, "%s", b->description ? b->description : "");
  char why[KDA_ERRLEN] = "";
  void *h = NULL;
  int32_t st = b->open(params, &h, why, sizeof why);
  if (st != KDA_OK) {
    snprintf(r->why, sizeof r->why, "open: %s", why[0] ? why : kda_strstatus(st));
    return;
  }
  kda_problem p;
  kda_problem_init(&p, 4, 1, 1, 16, 16);
  kda_backend_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (KDA_BACKEND_HAS(b, describe) && b->describe && b->describe(h, &info) == KDA_OK)
    picked_text(&info, r->picked, sizeof r->picked);
  if (b->supports(h, &p, why, sizeof why) != KDA_OK)
    snprintf(r->why, sizeof r->why, "%s", why[0] ? why : "does not support a tiny problem");
  else r->runs = 1;
  b->close(h);
}

/* The tiny problem through the target's worker (kda_conform_probe). */
static void target_try(kda_target *t, row *r) {
  kda_probe pr;
  kda_conform_probe(t, &pr);
  r->runs = pr.runs;
  snprintf(r->why, sizeof r->why, "%s", pr.why);
  if (pr.has_info) picked_text(&pr.info, r->picked, sizeof r->picked);
}

/* A plugin, only ever loaded in its worker (SPEC.md §7.8): a constructor that aborts, a
 * missing entry or a bad table is this row's "why", not the end of the listing. */
static void plugin_row(const kda_backend_ref *ref, const kda_call_opts *o, row *r) {
  r->def = "-";
  snprintf(r->plugin, sizeof r->plugin, "%s", ref->path);
  snprintf(r->params, sizeof r->params, "%s", ref->params);
  r->cls = r->in_dt = r->out_dt = -1;
  char err[KDA_ERRLEN] = "";
  kda_target *t;
  if (kda_target_open(ref, o, &t, err, sizeof err) != KDA_OK) {
    snprintf(r->name, sizeof r->name, "%s", ref->spec);
    snprintf(r->why, sizeof r->why, "runner: %s", err);
    return;
  }
  const kda_target_info *ti = kda_target_info_get(t);
  snprintf(r->name, sizeof r->name, "%s", ti->name);
  snprintf(r->desc, sizeof r->desc, "%s", ti->description);
  if (!ti->loaded) {
    snprintf(r->why, sizeof r->why, "load: %s: %s", kda_call_outcome_name(ti->load_result.outcome),
             ti->load_result.msg);
  } else {
    r->cls = ti->cls, r->abi = ti->abi_version;
    r->in_dt = ti->input_dtype, r->out_dt = ti->output_dtype;
    target_try(t, r);
  }
  kda_target_close(t);
}

static const char *dtype_text(int32_t dt) {
  const char *n = dt >= 0 ? kda_precision_file_name(dt) : NULL; /* f64 f32 bf16 f16 */
  return n ? n : "?";
}

static const char *class_text(int32_t cls) {
  const char *n = cls >= 0 ? kda_class_name(cls) : NULL;
  return n ? n : "-";
}

static void print_row(const row *r) {
  printf("%-14s %-5s %3s->%-3s %-8s %-4s %s\n", r->name, class_text(r->cls), dtype_text(r->in_dt),
         dtype_text(r->out_dt), r->def, r->runs ? "yes" : "no", r->picked);
  if (r->plugin[0]) printf("    plugin %s%s%s\n", r->plugin, r->desc[0] ? ": " : "", r->desc);
  else printf("    built-in%s%s\n", r->desc[0] ? ": " : "", r->desc);
  if (!r->runs) printf("    not available: %s\n", r->why);
}

/* A JSON string of text a plugin may have chosen: invalid UTF-8 (which jansson refuses) is
 * written with '?' for every byte outside printable ASCII, so the row is never dropped. */
static json_t *jsafe(const char *s) {
  json_t *j = json_string(s);
  if (j) return j;
  char buf[4096];
  size_t n = 0;
  for (; s[n] && n < sizeof buf - 1; n++)
    buf[n] = (unsigned char)s[n] >= 0x20 && (unsigned char)s[n] < 0x7f ? s[n] : '?';
  buf[n] = 0;
  return json_string(buf);
}

/* null for "" and "-" (nothing known). */
static json_t *jtext(const char *s) {
  return s && s[0] && strcmp(s, "-") ? jsafe(s) : json_null();
}

static json_t *row_json(const row *r) {
  json_t *def = strcmp(r->def, "-") == 0 ? json_null() : json_boolean(r->def[0] == 'y');
  return json_pack("{s:o,s:o,s:o,s:o,s:o,s:s,s:o,s:o,s:o,s:o,s:b,s:o,s:o}", "name", jsafe(r->name),
                   "class", jtext(r->cls >= 0 ? kda_class_name(r->cls) : NULL), "input_dtype",
                   r->in_dt >= 0 ? json_string(dtype_text(r->in_dt)) : json_null(),
                   "output_dtype",
                   r->out_dt >= 0 ? json_string(dtype_text(r->out_dt)) : json_null(), "default",
                   def, "source", r->plugin[0] ? "plugin" : "built-in", "plugin", jtext(r->plugin),
                   "params", jsafe(r->params), "description", jtext(r->desc),
                   "abi_version", r->abi ? json_integer(r->abi) : json_null(), "runs", r->runs,
                   "why", r->runs ? json_null() : jsafe(r->why), "picked",
                   jtext(r->picked));
}

/* Every row, resolved first (an unknown spec is exit 2 before anything is printed). */
static row *gather_rows(const char *const *specs, int n_specs, const char *params,
                        const kda_call_opts *o, int *n_rows) {
  int n = n_specs ? n_specs : kda_backend_builtin_count();
  row *rows = calloc((size_t)n, sizeof *rows);
  kda_backend_ref *refs = calloc((size_t)n, sizeof *refs);
  char err[KDA_ERRLEN];
  if (!rows || !refs) return free(rows), free(refs), kda_tool_fail(SUB, "out of memory"), NULL;
  for (int i = 0; i < n_specs; i++)
    if (kda_backend_resolve(specs[i], &refs[i], err, sizeof err) != KDA_OK)
      return free(rows), free(refs), kda_tool_fail(SUB, "%s", err), NULL;
  for (int i = 0; i < n; i++) {
    snprintf(rows[i].picked, sizeof rows[i].picked, "-");
    if (!n_specs) {
      builtin_row(kda_backend_builtin(i), params ? params : "",
                  kda_backend_builtin_is_default(i) ? "yes" : "no", &rows[i]);
      continue;
    }
    /* The spec's own parameters, else the deprecated --params (as the run gives them). */
    if (!strchr(specs[i], ':'))
      snprintf(refs[i].params, sizeof refs[i].params, "%s", params ? params : "");
    if (refs[i].builtin) builtin_row(refs[i].builtin, refs[i].params, "-", &rows[i]);
    else plugin_row(&refs[i], o, &rows[i]);
  }
  free(refs);
  *n_rows = n;
  return rows;
}

int kda_conform_list_backends(const char *const *specs, int n_specs, const char *params,
                              const kda_call_opts *o, int json) {
  int n = 0;
  row *rows = gather_rows(specs, n_specs, params, o, &n);
  if (!rows) return KDA_EXIT_USAGE;
  int rc = KDA_EXIT_OK;
  if (json) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, row_json(&rows[i]));
    json_t *j = json_pack("{s:s,s:o}", "schema", "kda-backends/1", "backends", a);
    char *text = j ? json_dumps(j, JSON_INDENT(1)) : NULL;
    if (text) printf("%s\n", text);
    else rc = kda_tool_fail(SUB, "out of memory formatting JSON");
    free(text);
    json_decref(j);
  } else {
    printf("%-14s %-5s %-8s %-8s %-4s %s\n", "name", "class", "dtypes", "default", "runs",
           "ISA/device picked");
    for (int i = 0; i < n; i++) print_row(&rows[i]);
  }
  free(rows);
  return rc;
}

/* The case id: the manifest's, else the file name without ".npz". */
static const char *case_id(const kda_case *c, const char *path, char *buf, size_t cap) {
  if (c->id) return c->id;
  const char *b = strrchr(path, '/');
  snprintf(buf, cap, "%s", b ? b + 1 : path);
  size_t n = strlen(buf);
  if (n > 4 && strcmp(buf + n - 4, ".npz") == 0) buf[n - 4] = 0;
  return buf;
}

int kda_conform_list_cases(const char *const *filters, int n_filters, char *const *paths,
                           int n_paths) {
  printf("%-28s %6s %7s %4s %4s %5s %5s %-9s %s\n", "id", "N", "T", "H", "HV", "K", "V", "family",
         "flags");
  for (int i = 0; i < n_paths; i++) {
    char err[KDA_ERRLEN], idbuf[256], flags[1024];
    kda_case c;
    /* the problem is enough: a production case's inputs stay unread (SPEC.md §7.10) */
    if (kda_case_load_static(paths[i], &c, err, sizeof err) != KDA_OK) return kda_tool_fail(SUB, "%s", err);
    const char *id = case_id(&c, paths[i], idbuf, sizeof idbuf);
    if (kda_case_filter_match(filters, n_filters, id, c.manifest_json))
      printf("%-28s %6lld %7lld %4lld %4lld %5lld %5lld %-9s %s\n", id, (long long)c.p.N,
             (long long)c.p.T, (long long)c.p.H, (long long)c.p.HV, (long long)c.p.K,
             (long long)c.p.V, kda_family_name(c.p.family),
             kda_case_flags(c.manifest_json, flags, sizeof flags));
    kda_case_free(&c);
  }
  return KDA_EXIT_OK;
}

/* A string member of an object member of the manifest ("" when absent). */
static const char *manifest_str(json_t *m, const char *obj, const char *key) {
  json_t *o = json_object_get(m, obj);
  json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
  return json_is_string(v) ? json_string_value(v) : "";
}

/* One case of --list-cases --json: what collection needs, read from the manifest and
 * cu_seqlens only (kda_case_load_static), or NULL when neither the case nor a prompt of it
 * is selected. */
static json_t *case_json(const char *const *filters, int n_filters, const char *path,
                         const kda_case *c, const char *id, int32_t serving) {
  const int main_sel = kda_case_filter_match(filters, n_filters, id, c->manifest_json);
  json_t *prompts = json_array();
  kda_serving_prompt_id ids[KDA_SERVING_MAX_PROMPTS];
  const int n_ids = serving >= 0 && !kda_serving_is_prompt(c) ? kda_serving_prompt_ids(c, serving, ids) : 0;
  for (int i = 0; i < n_ids; i++) {
    char pid[512];
    snprintf(pid, sizeof pid, "%s.%s", id, ids[i].suffix);
    if (kda_prompt_filter_match(filters, n_filters, id, pid, c->manifest_json))
      json_array_append_new(prompts, json_string(pid));
  }
  if (!main_sel && json_array_size(prompts) == 0) return json_decref(prompts), NULL;
  json_t *m = c->manifest_json ? json_loads(c->manifest_json, 0, NULL) : NULL;
  json_t *g = m ? json_object_get(m, "golden") : NULL;
  json_t *flags = json_is_object(g) ? json_object_get(g, "flags") : NULL;
  char intent[4096];
  const char *design = manifest_str(m, "generator_info", "design_description");
  json_t *j = json_pack(
      "{s:s,s:s,s:b,s:{s:I,s:I,s:I,s:I,s:I,s:I,s:s},s:O,s:s,s:s,s:s,s:s,s:o}", "id", id,
      "path", path, "selected", main_sel, "problem", "N", (json_int_t)c->p.N, "T",
      (json_int_t)c->p.T, "H", (json_int_t)c->p.H, "HV", (json_int_t)c->p.HV, "K",
      (json_int_t)c->p.K, "V", (json_int_t)c->p.V, "family", kda_family_name(c->p.family),
      "flags", json_is_array(flags) ? flags : json_array(), "comment",
      manifest_str(m, "golden", "comment"), "design", design[0] ? design
      : manifest_str(m, "generator_info", "description"), "input_precision",
      json_is_string(json_object_get(m, "input_precision"))
          ? json_string_value(json_object_get(m, "input_precision")) : "",
      "intent", kda_case_intent(c->manifest_json, intent, sizeof intent), "prompts", prompts);
  json_decref(m);
  return j;
}

int kda_conform_list_cases_json(const char *const *filters, int n_filters, char *const *paths,
                                int n_paths, int32_t serving) {
  json_t *cases = json_array();
  for (int i = 0; i < n_paths; i++) {
    char err[KDA_ERRLEN], idbuf[256];
    kda_case c;
    if (kda_case_load_static(paths[i], &c, err, sizeof err) != KDA_OK) {
      json_decref(cases);
      return kda_tool_fail(SUB, "%s", err);
    }
    json_t *j = case_json(filters, n_filters, paths[i], &c,
                          case_id(&c, paths[i], idbuf, sizeof idbuf), serving);
    if (j) json_array_append_new(cases, j);
    kda_case_free(&c);
  }
  json_t *doc = json_pack("{s:s,s:o}", "schema", "kda-cases/1", "cases", cases);
  char *text = doc ? json_dumps(doc, JSON_INDENT(1)) : NULL;
  int rc = text ? KDA_EXIT_OK : kda_tool_fail(SUB, "out of memory formatting JSON");
  if (text) printf("%s\n", text);
  free(text);
  json_decref(doc);
  return rc;
}

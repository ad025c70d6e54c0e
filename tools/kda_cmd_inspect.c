/* kda_cmd_inspect.c: `kda inspect`, the members, manifest and problem of a vector file.
 * SPDX-License-Identifier: MIT
 */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_golden_check.h"
#include "kda_npz.h"
#include "kda_tool.h"

#define SUB "inspect"
#define MANIFEST "manifest.json"
#define CASE_SCHEMA "kda-case/1"
#define RESULT_SCHEMA "kda-result/1"

static const char help_text[] =
    "Usage: kda inspect [--json] [--values N] FILE.npz\n"
    "\n"
    "Checks the CRC-32 of every member of the vector file FILE.npz, then prints its array\n"
    "members (name, dtype, shape, bytes), its manifest.json and, for a case or result\n"
    "file, a one-line summary of the problem.  A case file is also validated as kda ref\n"
    "would load it (shapes, index arrays, finite values).  When the manifest records\n"
    "golden.members_sha256, a last line says whether every member's SHA-256 matches it\n"
    "(\"golden hashes: verified\" or \"golden hashes: MISMATCH: ...\"; golden outputs are\n"
    "used as truth only when they verify; a mismatch is exit 1).  A golden case with\n"
    "generated inputs (SPEC.md §10.2) is regenerated and every recorded input hash\n"
    "checked, and a sampled o has its o_index checked; a line says so.  Nothing is printed\n"
    "when the file is bad.\n"
    "\n"
    "Options:\n"
    "  -j, --json           print one JSON object instead of text: {\"file\", \"verified\",\n"
    "                       \"members\": [{\"name\", \"dtype\", \"shape\", \"count\", \"bytes\",\n"
    "                       \"values\"}], \"manifest\", \"summary\", \"forms\", \"golden_hashes\"}\n"
    "  -n, --values N       also print the first N values of each member (C order; NaN and\n"
    "                       infinities are written as the strings \"nan\", \"inf\", \"-inf\"\n"
    "                       in JSON)\n"
    "  -h, --help           print this help and exit\n"
    "\n"
    "Exit status:\n"
    "  0  the file is a valid vector file and was printed\n"
    "  1  it was printed, but its golden.members_sha256 do not match its members (a check\n"
    "     failed: its golden outputs are not truth)\n"
    "  2  usage error, I/O error or bad file: not a zip archive, truncated, a CRC-32\n"
    "     mismatch, a bad .npy member, a bad manifest or an invalid case (one line on\n"
    "     standard error)\n";

typedef struct inspect_args {
  const char *path;
  int json;
  int64_t values;
} inspect_args;

/* One array member, and its first values when asked for. */
typedef struct member {
  char *name; /* a copy: the archive is closed before printing */
  kda_array_info info;
  uint64_t n_values;
  double *f;  /* float members */
  int64_t *i; /* integer members */
} member;

typedef struct inspection {
  const char *path;
  int64_t count;
  member *m;
  json_t *manifest;  /* NULL when the file has no manifest.json */
  char summary[1024]; /* the problem in one line; empty unless a case or result file */
  char hashes[KDA_ERRLEN + 64]; /* golden.members_sha256 checked; empty when not recorded */
  int hashes_ok;
  char forms[256]; /* generated inputs and sampled truth (SPEC.md §10.2); empty when neither */
} inspection;

static void inspection_free(inspection *s) {
  for (int64_t j = 0; s->m && j < s->count; j++) {
    free(s->m[j].name);
    free(s->m[j].f);
    free(s->m[j].i);
  }
  free(s->m);
  json_decref(s->manifest);
}

static int is_int_dtype(int32_t dtype) {
  return dtype == KDA_DTYPE_I64 || dtype == KDA_DTYPE_I32;
}

/* ---- Gathering (everything is read before anything is printed). */

static int read_values(kda_npz *z, member *m, int64_t want, char *err, size_t errlen) {
  m->n_values = m->info.count < (uint64_t)want ? m->info.count : (uint64_t)want;
  if (m->n_values == 0) return KDA_OK;
  if (is_int_dtype(m->info.dtype)) {
    m->i = calloc((size_t)m->n_values, sizeof *m->i);
    if (!m->i) goto nomem;
    return kda_npz_read_range(z, m->name, KDA_DTYPE_I64, 0, m->n_values, m->i, err, errlen);
  }
  m->f = calloc((size_t)m->n_values, sizeof *m->f);
  if (!m->f) goto nomem;
  return kda_npz_read_range(z, m->name, KDA_DTYPE_F64, 0, m->n_values, m->f, err, errlen);
nomem:
  snprintf(err, errlen, "%s: out of memory reading member '%s'", kda_npz_path(z), m->name);
  return KDA_ENOMEM;
}

static int gather_members(kda_npz *z, const inspect_args *a, inspection *s, char *err,
                          size_t errlen) {
  s->count = kda_npz_count(z);
  s->m = calloc(s->count > 0 ? (size_t)s->count : 1, sizeof *s->m);
  if (!s->m) {
    snprintf(err, errlen, "%s: out of memory", a->path);
    return KDA_ENOMEM;
  }
  for (int64_t j = 0; j < s->count; j++) {
    member *m = &s->m[j];
    const char *name = kda_npz_name(z, j);
    if (!name || !(m->name = strdup(name))) {
      snprintf(err, errlen, "%s: out of memory", a->path);
      return KDA_ENOMEM;
    }
    int st = kda_npz_info(z, m->name, &m->info, err, errlen);
    if (st == KDA_OK && a->values > 0) st = read_values(z, m, a->values, err, errlen);
    if (st != KDA_OK) return st;
  }
  return KDA_OK;
}

/* Golden outputs are truth only when their recorded hashes verify (SPEC.md §8.10): say so. */
static void check_hashes(inspection *s) {
  json_t *g = s->manifest ? json_object_get(s->manifest, "golden") : NULL;
  if (!json_object_get(g, "members_sha256")) return;
  char msg[KDA_ERRLEN];
  s->hashes_ok = kda_golden_check_members(s->path, msg, sizeof msg) == KDA_OK;
  if (s->hashes_ok)
    snprintf(s->hashes, sizeof s->hashes, "golden hashes: verified (every member matches "
             "golden.members_sha256)");
  else
    snprintf(s->hashes, sizeof s->hashes, "golden hashes: MISMATCH: %s", msg);
}

static int gather_manifest(kda_npz *z, inspection *s, char *err, size_t errlen) {
  char *text = NULL;
  size_t len = 0;
  int st = kda_npz_read_blob(z, MANIFEST, &text, &len, err, errlen);
  if (st == KDA_ENOTFOUND) return KDA_OK; /* a plain .npz: nothing to show */
  if (st != KDA_OK) return st;
  json_error_t je;
  /* the member's whole length: bytes after the JSON (a NUL and garbage) are an error */
  s->manifest = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!s->manifest || !json_is_object(s->manifest)) {
    snprintf(err, errlen, "%s: member '%s' is not a JSON object (line %d: %s)",
             kda_npz_path(z), MANIFEST, s->manifest ? 1 : je.line,
             s->manifest ? "not an object" : je.text);
    return KDA_EFORMAT;
  }
  return KDA_OK;
}

/* A manifest value as text: strings as they are, numbers shortest, booleans true/false. */
static void format_json_value(json_t *x, char *buf, size_t cap) {
  if (json_is_string(x)) snprintf(buf, cap, "%s", json_string_value(x));
  else if (json_is_integer(x)) snprintf(buf, cap, "%lld", (long long)json_integer_value(x));
  else if (json_is_real(x)) kda_tool_format_value(json_real_value(x), KDA_DTYPE_F64, buf, cap);
  else if (json_is_boolean(x)) snprintf(buf, cap, "%s", json_is_true(x) ? "true" : "false");
  else snprintf(buf, cap, "?");
}

/* Appends " key=value" for every key of the manifest's problem object, in manifest order. */
static void append_problem(json_t *problem, char *buf, size_t cap) {
  const char *key;
  json_t *x;
  char val[128];
  json_object_foreach(problem, key, x) {
    size_t n = strlen(buf);
    format_json_value(x, val, sizeof val);
    if (n < cap) snprintf(buf + n, cap - n, " %s=%s", key, val);
  }
}

/* The one-line summary of a case or result file, from its manifest (kda_case.h):
 *   case ID (PRECISION): key=value ...        result of case ID by BACKEND: key=value ... */
static void summarize(json_t *m, const char *schema, char *buf, size_t cap) {
  const char *id = json_string_value(json_object_get(m, "id"));
  const char *case_id = json_string_value(json_object_get(m, "case_id"));
  const char *prec = json_string_value(json_object_get(m, "input_precision"));
  const char *backend = json_string_value(json_object_get(m, "backend"));
  if (strcmp(schema, CASE_SCHEMA) == 0)
    snprintf(buf, cap, "case %s (%s):", id && *id ? id : "-", prec ? prec : "?");
  else
    snprintf(buf, cap, "result of case %s by %s:", case_id && *case_id ? case_id : "-",
             backend ? backend : "?");
  json_t *problem = json_object_get(m, "problem");
  if (json_is_object(problem)) append_problem(problem, buf, cap);
}

/* Says whether the inputs were generated (kda_case_load regenerated them and reproduced every
 * recorded SHA-256) and whether o is sampled (o_index checked). */
static int describe_forms(kda_npz *z, const kda_case *c, inspection *s, char *err,
                          size_t errlen) {
  int generated = 0, sampled = 0;
  kda_case_golden_form(c, &generated, &sampled);
  int64_t *ix = NULL, n = 0;
  if (sampled || kda_npz_has(z, "o_index")) {
    int st = kda_output_sampled_read(z, kda_npz_path(z), &c->p, &ix, &n, NULL, err, errlen);
    free(ix);
    if (st != KDA_OK) return st;
  }
  size_t len = 0;
  if (generated)
    len = (size_t)snprintf(s->forms, sizeof s->forms, "inputs: generated from generator_info."
                           "description (every golden.generated_sha256 reproduced)%s",
                           sampled || n ? "\n" : "");
  if ((sampled || n) && len < sizeof s->forms)
    snprintf(s->forms + len, sizeof s->forms - len,
             "o: sampled at %lld of %lld tokens (o_index)", (long long)n, (long long)c->p.T);
  return KDA_OK;
}

/* A case file (schema kda-case/1) is also loaded whole, which validates it (SPEC.md §6). */
static int gather_case(kda_npz *z, inspection *s, char *err, size_t errlen) {
  const char *schema = json_string_value(json_object_get(s->manifest, "schema"));
  if (!schema || (strcmp(schema, CASE_SCHEMA) != 0 && strcmp(schema, RESULT_SCHEMA) != 0))
    return KDA_OK;
  if (strcmp(schema, CASE_SCHEMA) == 0) {
    kda_case c;
    memset(&c, 0, sizeof c);
    /* Generated inputs (SPEC.md §10.2) are proven by their recorded hashes, which the static
     * load checks window by window in bounded memory: a 2^20-token head is never built whole.
     * Stored inputs are loaded whole, which validates every value. */
    int st = kda_case_load_static(kda_npz_path(z), &c, err, errlen);
    int generated = 0;
    int sampled = 0;
    if (st == KDA_OK) kda_case_golden_form(&c, &generated, &sampled);
    if (st == KDA_OK && !generated) {
      kda_case_free(&c);
      memset(&c, 0, sizeof c);
      st = kda_case_load(kda_npz_path(z), &c, err, errlen);
    }
    if (st == KDA_OK) st = describe_forms(z, &c, s, err, errlen);
    kda_case_free(&c);
    if (st != KDA_OK) return st;
  }
  summarize(s->manifest, schema, s->summary, sizeof s->summary);
  return KDA_OK;
}

static int gather(const inspect_args *a, inspection *s, char *err, size_t errlen) {
  kda_npz *z = NULL;
  int st = kda_npz_open(a->path, &z, err, errlen);
  if (st != KDA_OK) return st;
  st = kda_npz_verify(z, err, errlen);
  if (st == KDA_OK) st = gather_members(z, a, s, err, errlen);
  if (st == KDA_OK) st = gather_manifest(z, s, err, errlen);
  if (st == KDA_OK) check_hashes(s);
  if (st == KDA_OK) st = gather_case(z, s, err, errlen);
  kda_npz_close(z);
  return st;
}

/* ---- Text output. */

static void format_shape(const kda_array_info *info, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int32_t d = 0; d < info->ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)info->shape[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

static void print_values(const member *m) {
  char num[64];
  printf("      values:");
  for (uint64_t j = 0; j < m->n_values; j++) {
    if (m->i) printf(" %lld", (long long)m->i[j]);
    else printf(" %s", kda_tool_format_value(m->f[j], m->info.dtype, num, sizeof num));
  }
  printf("%s\n", m->n_values < m->info.count ? " ..." : "");
}

static void print_text(const inspect_args *a, const inspection *s) {
  int wname = 4, wshape = 5;
  char shape[256];
  for (int64_t j = 0; j < s->count; j++) {
    int n = (int)strlen(s->m[j].name);
    if (n > wname) wname = n;
    format_shape(&s->m[j].info, shape, sizeof shape);
    if ((int)strlen(shape) > wshape) wshape = (int)strlen(shape);
  }
  printf("file: %s\n", s->path);
  printf("members: %lld (CRC-32 of every member verified)\n", (long long)s->count);
  printf("    %-*s  %-5s  %-*s  %s\n", wname, "name", "dtype", wshape, "shape", "bytes");
  for (int64_t j = 0; j < s->count; j++) {
    const member *m = &s->m[j];
    format_shape(&m->info, shape, sizeof shape);
    printf("    %-*s  %-5s  %-*s  %llu\n", wname, m->name, kda_dtype_descr(m->info.dtype),
           wshape, shape, (unsigned long long)m->info.nbytes);
    if (a->values > 0 && m->info.count > 0) print_values(m);
  }
  if (s->manifest) {
    char *text = json_dumps(s->manifest, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("manifest:\n");
    for (const char *line = text; line && *line;) {
      const char *nl = strchr(line, '\n');
      int len = nl ? (int)(nl - line) : (int)strlen(line);
      printf("  %.*s\n", len, line);
      line += len + (nl ? 1 : 0);
    }
    free(text);
  } else {
    printf("manifest: none\n");
  }
  if (s->summary[0]) printf("%s\n", s->summary);
  if (s->forms[0]) printf("%s\n", s->forms);
  if (s->hashes[0]) printf("%s\n", s->hashes);
}

/* ---- JSON output. */

static json_t *json_value(double x) {
  if (x != x) return json_string("nan");
  if (x > 1.7976931348623157e308) return json_string("inf");
  if (x < -1.7976931348623157e308) return json_string("-inf");
  return json_real(x);
}

static json_t *member_json(const member *m, int64_t values) {
  json_t *o = json_object(), *shape = json_array();
  json_object_set_new(o, "name", json_string(m->name));
  json_object_set_new(o, "dtype", json_string(kda_dtype_descr(m->info.dtype)));
  for (int32_t d = 0; d < m->info.ndim; d++)
    json_array_append_new(shape, json_integer((json_int_t)m->info.shape[d]));
  json_object_set_new(o, "shape", shape);
  json_object_set_new(o, "count", json_integer((json_int_t)m->info.count));
  json_object_set_new(o, "bytes", json_integer((json_int_t)m->info.nbytes));
  if (values > 0) {
    json_t *v = json_array();
    for (uint64_t j = 0; j < m->n_values; j++)
      json_array_append_new(v, m->i ? json_integer((json_int_t)m->i[j]) : json_value(m->f[j]));
    json_object_set_new(o, "values", v);
  }
  return o;
}

static int print_json(const inspect_args *a, const inspection *s) {
  json_t *root = json_object(), *members = json_array();
  json_object_set_new(root, "file", json_string(s->path));
  json_object_set_new(root, "verified", json_true());
  for (int64_t j = 0; j < s->count; j++)
    json_array_append_new(members, member_json(&s->m[j], a->values));
  json_object_set_new(root, "members", members);
  json_object_set(root, "manifest", s->manifest ? s->manifest : json_null());
  if (s->summary[0]) json_object_set_new(root, "summary", json_string(s->summary));
  if (s->forms[0]) json_object_set_new(root, "forms", json_string(s->forms));
  if (s->hashes[0])
    json_object_set_new(root, "golden_hashes", json_string(s->hashes_ok ? "verified" : s->hashes));
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!text) return kda_tool_fail(SUB, "%s: out of memory formatting JSON", s->path);
  printf("%s\n", text);
  free(text);
  return KDA_EXIT_OK;
}

/* ---- Arguments. */

/* Returns -1 to go on, or the exit status (0 after --help). */
static int parse_args(int argc, char **argv, inspect_args *a) {
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                           {"values", required_argument, NULL, 'n'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  a->path = NULL;
  a->json = 0;
  a->values = 0;
  opterr = 0;
  optind = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":jn:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'j': a->json = 1; break;
    case 'n':
      if (kda_tool_parse_count(optarg, &a->values) != 0)
        return kda_tool_usage(SUB, "--values needs a count >= 0, not '%s'", optarg);
      break;
    case 'h': fputs(help_text, stdout); return KDA_EXIT_OK;
    default: return kda_tool_bad_option(SUB, c, argv);
    }
  }
  if (optind >= argc) return kda_tool_usage(SUB, "missing FILE.npz");
  if (argc - optind > 1) return kda_tool_usage(SUB, "unexpected argument '%s'", argv[optind + 1]);
  a->path = argv[optind];
  return -1;
}

int kda_cmd_inspect(int argc, char **argv) {
  inspect_args a;
  int st = parse_args(argc, argv, &a);
  if (st >= 0) return st;
  inspection s;
  memset(&s, 0, sizeof s);
  s.path = a.path;
  char err[KDA_ERRLEN] = "";
  if (gather(&a, &s, err, sizeof err) != KDA_OK) {
    st = strstr(err, a.path) ? kda_tool_fail(SUB, "%s", err)
                             : kda_tool_fail(SUB, "%s: %s", a.path, err);
  } else {
    st = a.json ? print_json(&a, &s) : (print_text(&a, &s), KDA_EXIT_OK);
    /* recorded hashes that do not verify are a failed check (SPEC.md §12.2), after printing */
    if (st == KDA_EXIT_OK && s.hashes[0] && !s.hashes_ok) st = KDA_EXIT_CHECK;
  }
  inspection_free(&s);
  return st;
}

/* kda_golden_set.c: the golden directory as a whole: level manifests, SHA256SUMS, comparisons.
 * SPDX-License-Identifier: MIT
 *
 * A level's manifest.json is modelled on Wycheproof's test-vector files: a schema and
 * generator version, the versions of the libraries that produced the values, how values are
 * certified, every flag with what it tests and why, the float64 reference's error budget on
 * the level, and one entry per case (id, file, comment, flags, seed, design, input precision,
 * problem summary, certification, the reference's errors, and the SHA-256 of the file and of
 * every member).  Keys are written in a fixed order, reals with 17 significant digits.
 */
#include "kda_golden.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kda_files.h"
#include "kda_golden_internal.h"
#include "kda_case_internal.h" /* KDA_GENERATOR */
#include "kda_mpfr.h"
#include "kda_sha256.h"
#include "kda_zip_raw.h"

#define JSON_FLAGS (JSON_INDENT(1) | JSON_REAL_PRECISION(17))

/* ---- Files. */
int kda_golden_slurp(const char *path, unsigned char **out, size_t *len, char *err,
                     size_t errlen) {
  *out = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return kda_fail(KDA_EIO, err, errlen, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  while (buf) {
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (n < cap) break;
    unsigned char *b2 = realloc(buf, 2 * cap);
    if (!b2) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = b2;
    cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!buf) return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", path);
  if (bad) {
    free(buf);
    return kda_fail(KDA_EIO, err, errlen, "%s: read error", path);
  }
  *out = buf;
  *len = n;
  return KDA_OK;
}

/* ---- Level manifests. */
static const char *const level_text[KDA_LEVEL_COUNT] = {
    "Hand-checkable cases: K, V <= 4, T <= 8, dyadic inputs, gates 0 or -inf; every "
    "intermediate is exact and traced step by step in <id>.txt.",
    "The CI set: every option and edge of SPEC.md, the long drift cases and one "
    "discriminating case per plausible mistake.",
    "Larger cases made on demand (kda golden --write --level L2), not committed; the SHA-256 "
    "of every case file is pinned in golden/L2.sha256."};

static json_t *flags_defs(void) {
  json_t *o = json_object();
  for (int i = 0; o && i < KDA_FLAG_COUNT; i++) {
    const kda_catalog_flag *f = kda_catalog_flag_get(i);
    json_object_set_new(o, f->name, json_pack("{s:s,s:s}", "kind", kda_flag_kind_name(f->kind),
                                              "description", f->description));
  }
  return o;
}

static json_t *versions_json(void) {
  char v[160];
  snprintf(v, sizeof v, "%s", kda_golden_versions());
  json_t *o = json_object();
  char *save = NULL;
  for (char *w = strtok_r(v, ",", &save); o && w; w = strtok_r(NULL, ",", &save)) {
    while (*w == ' ') w++;
    char *sp = strchr(w, ' ');
    if (!sp) continue;
    *sp = '\0';
    json_object_set_new(o, w, json_string(sp + 1));
  }
  return o;
}

static json_t *certification_defs(void) {
  return json_pack(
      "{s:s,s:{s:s,s:s},s:{s:i,s:i}}", "reference",
      "kda_mpfr_forward (ref/kda_mpfr.c): the whole recurrence evaluated with GNU MPFR at a "
      "working precision p with a rigorous a-priori error bound on every output; p grows "
      "(Ziv's strategy) until two consecutive precisions round every value to the same "
      "binary64 number (SPEC.md §8).  Each value is the binary64 number nearest "
      "to the exact result of SPEC.md §6.1 (ties to even; zeros written as +0).",
      "methods", "PROVEN",
      "every value of the case is proven correctly rounded: the error bound at the precision "
      "used leaves only one binary64 number possible",
      "AGREED",
      "two working precisions round every value of the case to the same binary64 number but "
      "the bound does not prove all of them (values_proven says how many it does)",
      "working_precision", "first_bits", 128, "max_bits", 4096);
}

static json_t *jnum(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *ref_json(const kda_golden_info *in) {
  json_t *o = json_object();
  json_object_set_new(o, "max_ulps", jnum(in->ref_max_ulps));
  json_object_set_new(o, "max_rel", jnum(in->ref_max_rel));
  json_object_set_new(o, "max_normwise_rel", jnum(in->ref_max_normwise));
  json_object_set_new(o, "zero_mismatches", json_integer(in->ref_n_zero_mismatch));
  json_object_set_new(o, "exact", json_integer(in->ref_n_exact));
  json_object_set_new(o, "within_1_ulp", json_integer(in->ref_n_within1));
  return o;
}

static json_t *problem_summary(json_t *problem) {
  static const char *const keys[] = {"N", "T", "H", "HV", "K", "V", "n_checkpoints",
                                     "family", "gate", "beta", "l2", "head_map",
                                     "state_layout"};
  json_t *o = json_object();
  for (size_t i = 0; o && i < sizeof keys / sizeof keys[0]; i++) {
    json_t *x = json_object_get(problem, keys[i]);
    if (x) json_object_set(o, keys[i], x);
  }
  return o;
}

/* The level-manifest entry of one written case file. */
static int case_entry(const char *dir, const kda_catalog_entry *e, const kda_golden_info *in,
                      int64_t number, json_t **out, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/%s.npz", dir, kda_level_name(e->level), e->id);
  unsigned char *bytes = NULL;
  size_t len = 0;
  int st = kda_golden_slurp(path, &bytes, &len, err, errlen);
  if (st) return st;
  char file_hex[65];
  kda_sha256_of(bytes, len, file_hex);
  free(bytes);
  kda_zip_member *m = NULL;
  int64_t nm = kda_zip_members_read(path, &m, err, errlen);
  if (nm < 1 || strcmp(m[0].name, "manifest.json") != 0) {
    kda_zip_members_free(m, nm);
    return nm < 0
               ? KDA_EFORMAT
               : kda_fail(KDA_EFORMAT, err, errlen, "%s: first member is not manifest.json", path);
  }
  json_t *man = json_loadb((const char *)m[0].data, m[0].len, 0, NULL);
  json_t *g = man ? json_object_get(man, "golden") : NULL;
  json_t *sums = json_object();
  for (int64_t i = 0; sums && i < nm; i++) {
    char hex[65];
    kda_sha256_of(m[i].data, m[i].len, hex);
    json_object_set_new(sums, m[i].name, json_string(hex));
  }
  kda_zip_members_free(m, nm);
  if (!json_is_object(g)) {
    json_decref(man);
    json_decref(sums);
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest has no golden object", path);
  }
  char file[300];
  snprintf(file, sizeof file, "%s.npz", e->id);
  *out = json_pack("{s:I,s:s,s:s,s:s,s:O,s:O,s:O,s:O,s:o,s:O,s:o,s:{s:s,s:o}}", "case_number",
                   (json_int_t)number, "id", e->id, "file", file, "comment", e->comment, "flags",
                   json_object_get(g, "flags"), "seed", json_object_get(g, "seed"), "design",
                   json_object_get(g, "design"), "input_precision",
                   json_object_get(g, "input_precision"), "problem",
                   problem_summary(json_object_get(man, "problem")), "certification",
                   json_object_get(g, "certification"), "ref_f64", ref_json(in), "sha256",
                   "file", file_hex, "members", sums);
  json_decref(man);
  if (!*out) return kda_fail(KDA_EFORMAT, err, errlen, "%s: golden object incomplete", path);
  return KDA_OK;
}

/* The worst of the reference's errors over the level, each with the case it occurs in. */
static json_t *budget_json(const kda_golden_info *infos, int64_t n, int32_t level) {
  double w[3] = {0, 0, 0};
  const char *at[3] = {NULL, NULL, NULL};
  int64_t zm = 0, vals = 0, exact = 0, within1 = 0;
  for (int64_t i = 0; i < n; i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (e->level != level) continue;
    const double x[3] = {infos[i].ref_max_ulps, infos[i].ref_max_rel, infos[i].ref_max_normwise};
    for (int k = 0; k < 3; k++)
      if (!at[k] || x[k] > w[k]) {
        w[k] = x[k];
        at[k] = e->id;
      }
    zm += infos[i].ref_n_zero_mismatch;
    vals += infos[i].n_values;
    exact += infos[i].ref_n_exact;
    within1 += infos[i].ref_n_within1;
  }
  json_t *o = json_object();
  json_object_set_new(o, "backend", json_string("ref-f64"));
  json_object_set_new(o, "values", json_integer(vals));
  json_object_set_new(o, "max_ulps", jnum(w[0]));
  json_object_set_new(o, "max_ulps_case", json_string(at[0] ? at[0] : ""));
  json_object_set_new(o, "max_rel", jnum(w[1]));
  json_object_set_new(o, "max_rel_case", json_string(at[1] ? at[1] : ""));
  json_object_set_new(o, "max_normwise_rel", jnum(w[2]));
  json_object_set_new(o, "max_normwise_rel_case", json_string(at[2] ? at[2] : ""));
  json_object_set_new(o, "zero_mismatches", json_integer(zm));
  json_object_set_new(o, "exact", json_integer(exact));
  json_object_set_new(o, "within_1_ulp", json_integer(within1));
  json_object_set_new(o, "definitions",
                      json_string("ulps: |ref - gold| / ulp(gold) over nonzero golden values; "
                                  "rel: |ref - gold| / |gold| over the same; normwise_rel: "
                                  "max |ref - gold| / max |gold| per quantity (o, ht, hc); "
                                  "zero_mismatches: golden zeros the reference missed; exact, "
                                  "within_1_ulp: values the reference gets exactly or within "
                                  "one ulp.  These "
                                  "depend on the libm's exp and log1p (SPEC.md §9.1)."));
  return o;
}

static json_t *level_json(int32_t level, const kda_golden_info *infos, int64_t n) {
  int64_t count = 0, proven = 0, agreed = 0;
  for (int64_t i = 0; i < n; i++)
    if (kda_catalog_get(i)->level == level) {
      count++;
      proven += infos[i].method == KDA_CERT_PROVEN;
      agreed += infos[i].method == KDA_CERT_AGREED;
    }
  json_t *cert = certification_defs();
  json_object_set_new(cert, "counts", json_pack("{s:I,s:I}", "PROVEN", (json_int_t)proven,
                                                "AGREED", (json_int_t)agreed));
  return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o,s:I,s:[]}", "schema",
                   KDA_GOLDEN_SET_SCHEMA, "algorithm",
                   "KDA (Kimi Delta Attention) forward pass, SPEC.md", "level",
                   kda_level_name(level), "level_description", level_text[level], "generator",
                   KDA_GENERATOR, "versions", versions_json(), "certification", cert,
                   "flags", flags_defs(), "ref_f64_budget", budget_json(infos, n, level),
                   "number_of_cases", (json_int_t)count, "cases");
}

int kda_golden_write_level_manifest(const char *dir, int32_t level,
                                    const kda_golden_info *infos, int64_t n, char *err,
                                    size_t errlen) {
  if (!kda_level_name(level) || n != kda_catalog_count())
    return kda_fail(KDA_EINVAL, err, errlen, "bad level or info count");
  json_t *root = level_json(level, infos, n);
  json_t *cases = root ? json_object_get(root, "cases") : NULL;
  if (!cases) {
    json_decref(root);
    return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  }
  int st = KDA_OK;
  int64_t number = 0;
  for (int64_t i = 0; !st && i < n; i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (e->level != level) continue;
    json_t *c = NULL;
    st = case_entry(dir, e, &infos[i], ++number, &c, err, errlen);
    if (!st) json_array_append_new(cases, c);
  }
  char *text = st ? NULL : json_dumps(root, JSON_FLAGS);
  json_decref(root);
  if (st) return st;
  if (!text) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/manifest.json", dir, kda_level_name(level));
  size_t len = strlen(text);
  char *nl = realloc(text, len + 2); /* end the file with a newline */
  if (nl) {
    text = nl;
    text[len++] = '\n';
    text[len] = '\0';
  }
  st = kda_atomic_write(path, text, len, err, errlen);
  free(text);
  return st;
}

/* ---- SHA256SUMS. */
typedef struct flist {
  char **p;
  size_t n, cap;
  int oom;
} flist;

static void flist_add(flist *l, const char *s) {
  if (l->oom) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    char **p = realloc(l->p, cap * sizeof *p);
    if (!p) {
      l->oom = 1;
      return;
    }
    l->p = p;
    l->cap = cap;
  }
  if (!(l->p[l->n] = strdup(s))) l->oom = 1;
  else l->n++;
}

static void flist_free(flist *l) {
  for (size_t i = 0; i < l->n; i++) free(l->p[i]);
  free(l->p);
  memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Regular files under dir/rel, recursively; skips temporaries (*.tmp.*), the top-level
 * SHA256SUMS and the directories of on-demand levels. */
static int walk(const char *dir, const char *rel, flist *out) {
  char path[4096];
  snprintf(path, sizeof path, "%s%s%s", dir, *rel ? "/" : "", rel);
  DIR *d = opendir(path);
  if (!d) return -1;
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || strstr(e->d_name, ".tmp."))
      continue;
    if (!*rel && strcmp(e->d_name, "SHA256SUMS") == 0) continue;
    int32_t lv;
    if (!*rel && kda_level_parse(e->d_name, &lv) == KDA_OK && !kda_level_committed(lv))
      continue; /* an on-demand level's files, checked against their pins instead */
    char sub[4096], full[8192];
    snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
    snprintf(full, sizeof full, "%s/%s", dir, sub);
    struct stat sb;
    if (lstat(full, &sb) != 0) continue;
    if (S_ISDIR(sb.st_mode)) rc = walk(dir, sub, out);
    else if (S_ISREG(sb.st_mode)) flist_add(out, sub);
  }
  closedir(d);
  return rc;
}

static int file_sha256(const char *path, char hex[65], char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return kda_fail(KDA_EIO, err, errlen, "%s: cannot open: %s", path, strerror(errno));
  kda_sha256 h;
  unsigned char buf[65536], d[KDA_SHA256_BYTES];
  size_t r;
  kda_sha256_init(&h);
  while ((r = fread(buf, 1, sizeof buf, f)) > 0) kda_sha256_update(&h, buf, r);
  int bad = ferror(f);
  fclose(f);
  if (bad) return kda_fail(KDA_EIO, err, errlen, "%s: read error", path);
  kda_sha256_final(&h, d);
  kda_sha256_hex(d, hex);
  return KDA_OK;
}

int kda_golden_write_sums(const char *dir, char *err, size_t errlen) {
  flist l = {0};
  if (walk(dir, "", &l) != 0 || l.oom) {
    flist_free(&l);
    return kda_fail(KDA_EIO, err, errlen, "%s: cannot list the directory", dir);
  }
  if (l.n > 1) qsort(l.p, l.n, sizeof *l.p, cmp_str);
  kda_sbuf b = {0};
  int st = KDA_OK;
  for (size_t i = 0; !st && i < l.n; i++) {
    char path[8192], hex[65];
    snprintf(path, sizeof path, "%s/%s", dir, l.p[i]);
    st = file_sha256(path, hex, err, errlen);
    if (!st) kda_sbuf_printf(&b, "%s  %s\n", hex, l.p[i]);
  }
  flist_free(&l);
  if (!st && b.oom) st = kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  if (!st) {
    char path[4096];
    snprintf(path, sizeof path, "%s/SHA256SUMS", dir);
    st = kda_atomic_write(path, b.s ? b.s : "", b.len, err, errlen);
  }
  free(b.s);
  return st;
}

/* Parses SHA256SUMS text into names and hashes (pointers into text, which is modified). */
static int parse_sums(char *text, flist *names, flist *hashes, char *msg, size_t msglen) {
  char *save = NULL;
  int line = 0;
  for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
    line++;
    size_t len = strlen(ln);
    int ok = len > 66 && ln[64] == ' ' && ln[65] == ' ';
    for (int i = 0; ok && i < 64; i++) ok = strchr("0123456789abcdef", ln[i]) && ln[i];
    if (!ok)
      return kda_fail(KDA_EFORMAT, msg, msglen, "SHA256SUMS line %d is malformed", line);
    ln[64] = '\0';
    flist_add(hashes, ln);
    flist_add(names, ln + 66);
  }
  return names->oom || hashes->oom ? kda_fail(KDA_ENOMEM, msg, msglen, "out of memory") : KDA_OK;
}

static int listed(const flist *names, const char *name) {
  for (size_t i = 0; i < names->n; i++)
    if (strcmp(names->p[i], name) == 0) return 1;
  return 0;
}

int kda_golden_check_sums(const char *dir, char *msg, size_t msglen) {
  char path[4096];
  snprintf(path, sizeof path, "%s/SHA256SUMS", dir);
  unsigned char *text = NULL;
  size_t len = 0;
  int st = kda_golden_slurp(path, &text, &len, msg, msglen);
  if (st) return KDA_EIO;
  char *t = realloc(text, len + 1);
  if (!t) {
    free(text);
    return kda_fail(KDA_EIO, msg, msglen, "out of memory");
  }
  t[len] = '\0';
  flist names = {0}, hashes = {0}, present = {0};
  st = parse_sums(t, &names, &hashes, msg, msglen);
  for (size_t i = 0; !st && i < names.n; i++) {
    char full[8192], hex[65], e2[KDA_ERRLEN];
    snprintf(full, sizeof full, "%s/%s", dir, names.p[i]);
    if (file_sha256(full, hex, e2, sizeof e2) != KDA_OK)
      st = kda_fail(KDA_EFORMAT, msg, msglen, "%s: listed in SHA256SUMS but %s", names.p[i],
                    access(full, F_OK) ? "missing" : "unreadable");
    else if (strcmp(hex, hashes.p[i]) != 0)
      st = kda_fail(KDA_EFORMAT, msg, msglen, "%s: SHA-256 %s, SHA256SUMS says %s", names.p[i], hex,
                    hashes.p[i]);
  }
  if (!st && walk(dir, "", &present) != 0)
    st = kda_fail(KDA_EIO, msg, msglen, "%s: cannot list the directory", dir);
  if (present.n > 1) qsort(present.p, present.n, sizeof *present.p, cmp_str);
  for (size_t i = 0; !st && i < present.n; i++)
    if (!listed(&names, present.p[i]))
      st = kda_fail(KDA_EFORMAT, msg, msglen, "%s: file not listed in SHA256SUMS", present.p[i]);
  flist_free(&present);
  flist_free(&names);
  flist_free(&hashes);
  free(t);
  return st;
}

/* ---- Pinned hashes of an on-demand level. */
int kda_golden_write_pins(const char *dir, int32_t level, char *err, size_t errlen) {
  const char *lv = kda_level_name(level);
  if (!lv) return kda_fail(KDA_EINVAL, err, errlen, "bad level %d", (int)level);
  kda_sbuf b = {0};
  int st = KDA_OK;
  for (int64_t i = 0; !st && i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (e->level != level) continue;
    char path[4096], hex[65];
    snprintf(path, sizeof path, "%s/%s/%s.npz", dir, lv, e->id);
    st = file_sha256(path, hex, err, errlen);
    if (!st) kda_sbuf_printf(&b, "%s  %s/%s.npz\n", hex, lv, e->id);
  }
  if (!st && b.oom) st = kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  if (!st) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.sha256", dir, lv);
    st = kda_atomic_write(path, b.s ? b.s : "", b.len, err, errlen);
  }
  free(b.s);
  return st;
}

int kda_golden_check_pins(const char *pins, const char *dir, int32_t level, char *msg,
                          size_t msglen) {
  const char *lv = kda_level_name(level);
  unsigned char *text = NULL;
  size_t len = 0;
  if (!lv) return kda_fail(KDA_EINVAL, msg, msglen, "bad level %d", (int)level);
  if (kda_golden_slurp(pins, &text, &len, msg, msglen) != KDA_OK) return KDA_EIO;
  char *t = realloc(text, len + 1);
  if (!t) {
    free(text);
    return kda_fail(KDA_EIO, msg, msglen, "out of memory");
  }
  t[len] = '\0';
  flist names = {0}, hashes = {0};
  int st = parse_sums(t, &names, &hashes, msg, msglen);
  size_t expected = 0;
  for (int64_t i = 0; !st && i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (e->level != level) continue;
    char rel[512], path[4096], hex[65], e2[KDA_ERRLEN];
    snprintf(rel, sizeof rel, "%s/%s.npz", lv, e->id);
    size_t k = 0;
    while (k < names.n && strcmp(names.p[k], rel) != 0) k++;
    expected++;
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    if (k == names.n)
      st = kda_fail(KDA_EFORMAT, msg, msglen, "%s: no pinned hash for %s", pins, rel);
    else if (file_sha256(path, hex, e2, sizeof e2) != KDA_OK)
      st = kda_fail(KDA_EIO, msg, msglen, "%s", e2);
    else if (strcmp(hex, hashes.p[k]) != 0)
      st = kda_fail(KDA_EFORMAT, msg, msglen, "%s: regenerated SHA-256 %s, %s pins %s", rel, hex,
                    pins, hashes.p[k]);
  }
  if (!st && names.n != expected)
    st = kda_fail(KDA_EFORMAT, msg, msglen, "%s pins %zu files, the catalog's %s has %zu", pins,
                  names.n, lv, expected);
  flist_free(&names);
  flist_free(&hashes);
  free(t);
  return st;
}

/* ---- Comparisons. */
static size_t first_diff(const unsigned char *a, size_t na, const unsigned char *b, size_t nb) {
  size_t i = 0;
  while (i < na && i < nb && a[i] == b[i]) i++;
  return i;
}

/* Names the first member in which two different archives differ; 1 if found. */
static int member_diff(const char *expected, const char *actual, char *msg, size_t msglen) {
  kda_zip_member *a = NULL, *b = NULL;
  char e1[KDA_ERRLEN];
  int64_t na = kda_zip_members_read(expected, &a, e1, sizeof e1);
  int64_t nb = na < 0 ? -1 : kda_zip_members_read(actual, &b, msg, msglen);
  if (na < 0) kda_fail(1, msg, msglen, "%s", e1);
  int found = nb < 0; /* either is unreadable as an archive: msg says which */
  for (int64_t i = 0; !found && i < na && i < nb; i++) {
    if (strcmp(a[i].name, b[i].name) != 0) {
      kda_fail(1, msg, msglen, "%s: member %lld is '%s', expected '%s'", actual, (long long)i,
               b[i].name, a[i].name);
      found = 1;
    } else if (a[i].len != b[i].len || memcmp(a[i].data, b[i].data, a[i].len) != 0) {
      kda_fail(1, msg, msglen,
               "%s: member '%s' differs from the regenerated one (first at byte %zu of the member)",
               actual, a[i].name, first_diff(a[i].data, a[i].len, b[i].data, b[i].len));
      found = 1;
    }
  }
  if (!found && na >= 0 && na != nb) {
    kda_fail(1, msg, msglen, "%s: %lld members, expected %lld", actual, (long long)nb,
             (long long)na);
    found = 1;
  }
  kda_zip_members_free(a, na);
  kda_zip_members_free(b, nb);
  return found;
}

int kda_golden_compare_files(const char *expected, const char *actual, char *msg,
                             size_t msglen) {
  unsigned char *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  if (kda_golden_slurp(expected, &a, &na, msg, msglen) != KDA_OK) return -1;
  if (kda_golden_slurp(actual, &b, &nb, msg, msglen) != KDA_OK) {
    free(a);
    return -1;
  }
  int same = na == nb && memcmp(a, b, na) == 0;
  size_t at = first_diff(a, na, b, nb);
  free(a);
  free(b);
  if (same) return 0;
  const size_t L = strlen(expected);
  if (L > 4 && strcmp(expected + L - 4, ".npz") == 0 && member_diff(expected, actual, msg, msglen))
    return 1;
  kda_fail(1, msg, msglen, "%s: differs from the regenerated file at byte %zu (sizes %zu and %zu)",
           actual, at, nb, na);
  return 1;
}

/* Replaces the platform-dependent fields of a (versions, ref_f64_budget, cases[].ref_f64) by
 * those of b.  Returns the number of fields that differed. */
static int normalise(json_t *a, json_t *b) {
  int n = 0;
  static const char *const top[] = {"versions", "ref_f64_budget"};
  for (int i = 0; i < 2; i++) {
    json_t *x = json_object_get(b, top[i]);
    if (!x) continue;
    n += !json_equal(json_object_get(a, top[i]), x);
    json_object_set(a, top[i], x);
  }
  json_t *ca = json_object_get(a, "cases"), *cb = json_object_get(b, "cases");
  for (size_t i = 0; i < json_array_size(ca) && i < json_array_size(cb); i++) {
    json_t *x = json_object_get(json_array_get(cb, i), "ref_f64");
    if (!x) continue;
    n += !json_equal(json_object_get(json_array_get(ca, i), "ref_f64"), x);
    json_object_set(json_array_get(ca, i), "ref_f64", x);
  }
  return n;
}

int kda_golden_compare_manifests(const char *expected, const char *actual, char *msg,
                                 size_t msglen) {
  int rc = kda_golden_compare_files(expected, actual, msg, msglen);
  if (rc <= 0) return rc;
  json_t *a = json_load_file(actual, JSON_REJECT_DUPLICATES, NULL);
  json_t *b = json_load_file(expected, JSON_REJECT_DUPLICATES, NULL);
  if (!a || !b) {
    json_decref(a);
    json_decref(b);
    return 1; /* msg from the byte comparison */
  }
  int n = normalise(a, b);
  char *ta = json_dumps(a, JSON_FLAGS), *tb = json_dumps(b, JSON_FLAGS);
  int same = ta && tb && strcmp(ta, tb) == 0;
  if (same)
    kda_fail(2, msg, msglen,
             "%s: %d platform-dependent field%s (library versions or "
             "the float64 reference's errors) differ from this platform's; everything "
             "else is identical",
             actual, n, n == 1 ? "" : "s");
  else {
    const char *const keys[] = {"schema", "level", "generator", "certification", "flags",
                                "number_of_cases", "cases"};
    const char *k = "?";
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
      if (!json_equal(json_object_get(a, keys[i]), json_object_get(b, keys[i]))) {
        k = keys[i];
        break;
      }
    kda_fail(1, msg, msglen, "%s: differs from the regenerated manifest (key '%s')", actual, k);
  }
  free(ta);
  free(tb);
  json_decref(a);
  json_decref(b);
  return same ? 2 : 1;
}

/* ---- Generator-made files. */
int kda_golden_regen_generated(const char *path, const char *out_path, char *err,
                               size_t errlen) {
  kda_case c;
  int st = kda_case_load(path, &c, err, errlen);
  /* A file that cannot be loaded is an error, never "not generator-made": KDA_ENOTFOUND is
   * kept for a loadable file without a description (a missing member is KDA_EFORMAT here). */
  if (st) return st == KDA_ENOTFOUND ? KDA_EFORMAT : st;
  json_t *m = json_loads(c.manifest_json, 0, NULL);
  json_t *desc = json_object_get(json_object_get(m, "generator_info"), "description");
  if (!json_is_string(desc) || json_object_get(m, "golden")) {
    json_decref(m);
    kda_case_free(&c);
    return kda_fail(KDA_ENOTFOUND, err, errlen, "%s: not a generator-made case file", path);
  }
  kda_gen_desc d;
  kda_case g;
  st = kda_gen_parse(json_string_value(desc), &d, err, errlen);
  json_decref(m);
  kda_case_free(&c);
  if (st) return st;
  st = kda_gen_case(&d, &g, err, errlen);
  kda_gen_desc_free(&d);
  if (st) return st;
  st = kda_case_save(out_path, &g, NULL, err, errlen);
  kda_case_free(&g);
  return st;
}

int kda_golden_owns(int32_t level, const char *name) {
  if (!name || !kda_level_name(level)) return 0;
  if (strcmp(name, "manifest.json") == 0) return 1;
  const char *dot = strrchr(name, '.');
  if (!dot) return 0;
  const int npz = strcmp(dot, ".npz") == 0, txt = strcmp(dot, ".txt") == 0;
  if (!npz && !(txt && level == KDA_LEVEL_L0)) return 0;
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (e->level == level && strlen(e->id) == (size_t)(dot - name) &&
        strncmp(e->id, name, (size_t)(dot - name)) == 0)
      return 1;
  }
  return 0;
}

/* kda_golden_merge.c: shard directories merged into the golden set one --write writes.
 * SPDX-License-Identifier: MIT
 *
 * SPEC.md §10.4.  Every shard is checked in full before anything is written: a shard.json is
 * hostile input (its paths become paths, its numbers become the level manifest's), so every
 * key is type-checked, every file path must be one the catalog gives the unit, and every file
 * is hashed.  Then the files are copied (hashed again while copied: a file changed between
 * the check and the copy fails the merge) and the level is finished as kda golden --write
 * finishes it: level manifests, pins, stale files removed, SHA256SUMS.
 */
#include "kda_golden_shard.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kda_case_internal.h" /* KDA_GENERATOR */
#include "kda_files.h"
#include "kda_golden_internal.h"
#include "kda_sha256.h"

#define SHARD_JSON_MAX (256 << 20) /* a shard.json larger than this is not one we wrote */
/* nor one of more JSON values (a unit is about 40): what parsing it allocates stays bounded */
#define SHARD_JSON_VALUES ((int64_t)1 << 22)

typedef struct copy_file {
  int64_t index;   /* catalog index of its unit */
  char rel[300];   /* "<level>/<name>", checked */
  char sha256[65]; /* as checked */
} copy_file;

typedef struct mstate {
  int64_t nc;          /* catalog entries */
  int64_t *owner;      /* shard number (position in the argument list) per catalog index */
  uint8_t *seen_i;     /* which I of N were given */
  int64_t n_of;        /* N, from the first shard */
  uint32_t mask;       /* levels, from the first shard */
  kda_golden_info *infos;
  int64_t files;
  copy_file *copy; /* the checked files, copied after every check passed */
  int64_t n_copy, cap_copy;
} mstate;

static int bad(char *err, size_t errlen, const char *shard, const char *what) {
  return kda_fail(KDA_EFORMAT, err, errlen, "%s: %s", shard, what);
}

static int get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out) {
  json_t *x = json_object_get(o, key);
  if (!json_is_integer(x)) return -1;
  const json_int_t v = json_integer_value(x);
  if (v < lo || v > hi) return -1;
  *out = (int64_t)v;
  return 0;
}

/* A hex-float string as written by kda_golden_shard.c ("%a"; "inf", "nan" too). */
static int get_real(json_t *o, const char *key, double *out) {
  json_t *x = json_object_get(o, key);
  if (!json_is_string(x)) return -1;
  const char *s = json_string_value(x);
  char *end;
  errno = 0;
  *out = strtod(s, &end);
  return *s && !*end ? 0 : -1;
}

static int parse_info(json_t *o, int64_t index, kda_golden_info *in) {
  static const char *const ints[] = {"method", "n_values", "steps", "prec_bits", "n_evals",
                                     "ref_n_zero_mismatch", "ref_n_exact", "ref_n_within1",
                                     "ref_worst_index", "certifier", "n_decided_fast"};
  static const char *const reals[] = {"ref_max_ulps", "ref_max_rel", "ref_max_normwise",
                                      "seconds_certify", "seconds_fast", "seconds_ref",
                                      "seconds_total"};
  int64_t v[11];
  double r[7];
  if (!json_is_object(o)) return -1;
  for (int k = 0; k < 11; k++)
    if (get_int(o, ints[k], k == 8 ? -1 : 0, INT64_MAX, &v[k])) return -1;
  for (int k = 0; k < 7; k++)
    if (get_real(o, reals[k], &r[k])) return -1;
  if (v[0] > 16 || v[3] > INT32_MAX || v[4] > INT32_MAX || v[9] > 16) return -1;
  memset(in, 0, sizeof *in);
  in->index = index;
  in->status = KDA_OK;
  in->method = (int32_t)v[0], in->n_values = v[1], in->steps = v[2];
  in->prec_bits = (int32_t)v[3], in->n_evals = (int32_t)v[4];
  in->ref_n_zero_mismatch = v[5], in->ref_n_exact = v[6], in->ref_n_within1 = v[7];
  in->ref_worst_index = v[8], in->certifier = (int32_t)v[9], in->n_decided_fast = v[10];
  in->ref_max_ulps = r[0], in->ref_max_rel = r[1], in->ref_max_normwise = r[2];
  in->seconds_certify = r[3], in->seconds_fast = r[4], in->seconds_ref = r[5];
  in->seconds_total = r[6];
  return 0;
}

static int is_hex64(const char *s) {
  return s && strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

/* Checks one recorded file of unit e: an allowed path, a regular file of the recorded size
 * and SHA-256. */
static int check_file(const char *shard, const kda_catalog_entry *e, const char *rel,
                      json_t *rec, char *err, size_t errlen) {
  char msg[600], path[4400], hex[65];
  int64_t size = -1, got = -1;
  json_t *h = json_object_get(rec, "sha256");
  if (!json_is_object(rec) || !is_hex64(json_string_value(h)) ||
      get_int(rec, "size", 0, INT64_MAX, &size)) {
    snprintf(msg, sizeof msg, "shard.json: file '%.300s' has no valid sha256 and size", rel);
    return bad(err, errlen, shard, msg);
  }
  snprintf(path, sizeof path, "%s/%s", shard, rel);
  struct stat sb;
  const int absent = lstat(path, &sb) != 0;
  if (absent || !S_ISREG(sb.st_mode)) {
    snprintf(msg, sizeof msg, "%.300s: %s", rel, absent ? "missing" : "not a regular file");
    return bad(err, errlen, shard, msg);
  }
  char e2[KDA_ERRLEN];
  if (kda_golden_file_sha256(path, hex, &got, e2, sizeof e2) != KDA_OK)
    return bad(err, errlen, shard, e2);
  if (got != size || strcmp(hex, json_string_value(h)) != 0) {
    snprintf(msg, sizeof msg, "%.300s: %s (corrupt shard)", rel,
             got != size ? "size differs from shard.json" : "SHA-256 differs from shard.json");
    return bad(err, errlen, shard, msg);
  }
  (void)e;
  return KDA_OK;
}

/* Remembers a checked file for the copy: its unit, path under the shard and SHA-256. */
static int keep_file(mstate *m, int64_t index, const char *rel, const char *hex) {
  if (m->n_copy == m->cap_copy) {
    int64_t cap = m->cap_copy ? 2 * m->cap_copy : 64;
    copy_file *c = realloc(m->copy, (size_t)cap * sizeof *c);
    if (!c) return -1;
    m->copy = c, m->cap_copy = cap;
  }
  copy_file *c = &m->copy[m->n_copy];
  c->index = index;
  snprintf(c->rel, sizeof c->rel, "%s", rel);
  snprintf(c->sha256, sizeof c->sha256, "%s", hex);
  m->n_copy++;
  return 0;
}

/* The contents, not only the hashes shard.json records (which whoever edits a file can
 * recompute): the case file's CRCs and member hashes (a truncated or altered archive), and
 * for L0 the trace, which must be the one the case file gives (kda_golden_trace_file). */
static int check_unit_content(const char *shard, const kda_catalog_entry *e, char *err,
                              size_t errlen) {
  char path[4400], msg[KDA_ERRLEN + 200], e2[KDA_ERRLEN];
  snprintf(path, sizeof path, "%s/%s/%s.npz", shard, kda_level_name(e->level), e->id);
  if (kda_golden_check_members(path, e2, sizeof e2) != KDA_OK) {
    snprintf(msg, sizeof msg, "%s (corrupt shard)", e2);
    return bad(err, errlen, shard, msg);
  }
  char name[200];
  snprintf(name, sizeof name, "%s.txt", e->id);
  if (!kda_golden_owns(e->level, name)) return KDA_OK;
  char *want = NULL;
  unsigned char *have = NULL;
  size_t len = 0;
  int st = kda_golden_trace_file(path, &want, e2, sizeof e2);
  snprintf(path, sizeof path, "%s/%s/%s", shard, kda_level_name(e->level), name);
  if (st == KDA_OK) st = kda_golden_slurp(path, &have, &len, e2, sizeof e2);
  int same = st == KDA_OK && len == strlen(want) && memcmp(have, want, len) == 0;
  free(want), free(have);
  if (st != KDA_OK) return bad(err, errlen, shard, e2);
  if (!same) {
    snprintf(msg, sizeof msg, "%s/%s: not the trace of its case file (corrupt shard)",
             kda_level_name(e->level), name);
    return bad(err, errlen, shard, msg);
  }
  return KDA_OK;
}

/* The files of unit e: each a name its level owns with e's id (the name up to its last '.',
 * as kda_golden_owns reads it), one path component under "<level>/"; every name the level
 * owns for e with the extensions --write always writes (the case file, L0's trace) present. */
static int check_unit_files(const char *shard, const kda_catalog_entry *e, json_t *files,
                            mstate *m, char *err, size_t errlen) {
  static const char *const ext[] = {"npz", "txt"};
  const char *lv = kda_level_name(e->level), *rel;
  const size_t L = strlen(lv), I = strlen(e->id);
  char msg[600], e2[KDA_ERRLEN];
  json_t *rec;
  if (!json_is_object(files)) return bad(err, errlen, shard, "shard.json: unit without files");
  json_object_foreach(files, rel, rec) {
    const char *name = rel + L + 1, *dot = strrchr(rel, '.');
    if (strncmp(rel, lv, L) != 0 || rel[L] != '/' ||
        kda_id_check(name, "file name", e2, sizeof e2) != KDA_OK || !dot ||
        (size_t)(dot - name) != I || strncmp(name, e->id, I) != 0 ||
        !kda_golden_owns(e->level, name)) {
      snprintf(msg, sizeof msg, "shard.json: unit '%s' lists files the catalog does not give "
               "it", e->id);
      return bad(err, errlen, shard, msg);
    }
    int st = check_file(shard, e, rel, rec, err, errlen);
    if (st) return st;
    if (keep_file(m, e - kda_catalog_get(0), rel,
                  json_string_value(json_object_get(rec, "sha256"))) != 0)
      return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
    m->files++;
  }
  for (int k = 0; k < 2; k++) {
    char name[200], want[300];
    snprintf(name, sizeof name, "%s.%s", e->id, ext[k]);
    snprintf(want, sizeof want, "%s/%s", lv, name);
    if (kda_golden_owns(e->level, name) && !json_object_get(files, want)) {
      snprintf(msg, sizeof msg, "shard.json: unit '%s' lacks its file %s", e->id, want);
      return bad(err, errlen, shard, msg);
    }
  }
  return check_unit_content(shard, e, err, errlen);
}

static int check_unit(const char *shard, int64_t s, json_t *u, mstate *m,
                      const char *const *shards, char *err, size_t errlen) {
  char msg[600];
  int64_t index = -1;
  json_t *id = json_object_get(u, "id");
  if (!json_is_object(u) || !json_is_string(id) || get_int(u, "index", 0, m->nc - 1, &index))
    return bad(err, errlen, shard, "shard.json: a unit without a valid id and index");
  const kda_catalog_entry *e = kda_catalog_get(index);
  if (strcmp(e->id, json_string_value(id)) != 0 || !(m->mask & (UINT32_C(1) << e->level))) {
    snprintf(msg, sizeof msg, "shard.json: unit '%.100s' (index %lld) is not in this catalog's "
             "levels (foreign shard)", json_string_value(id), (long long)index);
    return bad(err, errlen, shard, msg);
  }
  if (m->owner[index] >= 0) {
    snprintf(msg, sizeof msg, "unit '%s' is also in %.300s (duplicated shard or unit)", e->id,
             shards[m->owner[index]]);
    return bad(err, errlen, shard, msg);
  }
  m->owner[index] = s;
  if (parse_info(json_object_get(u, "info"), index, &m->infos[index])) {
    snprintf(msg, sizeof msg, "shard.json: unit '%s' has no valid info", e->id);
    return bad(err, errlen, shard, msg);
  }
  return check_unit_files(shard, e, json_object_get(u, "files"), m, err, errlen);
}

static int parse_levels(json_t *a, uint32_t *mask) {
  *mask = 0;
  if (!json_is_array(a) || json_array_size(a) == 0) return -1;
  for (size_t k = 0; k < json_array_size(a); k++) {
    int32_t l;
    const char *s = json_string_value(json_array_get(a, k));
    if (!s || kda_level_parse(s, &l) != KDA_OK || (*mask & (UINT32_C(1) << l))) return -1;
    *mask |= UINT32_C(1) << l;
  }
  return 0;
}

/* The header of a shard: schema, kind, levels, catalog, generator, I/N, assignment. */
static int check_header(const char *shard, json_t *root, mstate *m, int64_t *I, char *err,
                        size_t errlen) {
  char msg[300], cat[65];
  uint32_t mask;
  int64_t n = 0;
  const char *as = json_string_value(json_object_get(root, "assignment"));
  const char *schema = json_string_value(json_object_get(root, "schema"));
  if (!json_is_object(root) || !schema || strcmp(schema, KDA_SHARD_SCHEMA) != 0)
    return bad(err, errlen, shard, "shard.json: not a " KDA_SHARD_SCHEMA " manifest");
  if (strcmp(json_string_value(json_object_get(root, "kind")) ?
             json_string_value(json_object_get(root, "kind")) : "", "golden") != 0 ||
      parse_levels(json_object_get(root, "levels"), &mask) ||
      get_int(root, "of", 1, KDA_SHARD_MAX, &n) || get_int(root, "shard", 0, n - 1, I) ||
      !as || (strcmp(as, "lpt") && strcmp(as, "dynamic")) ||
      !json_is_array(json_object_get(root, "units")))
    return bad(err, errlen, shard, "shard.json: malformed (kind, levels, shard, of, "
               "assignment or units)");
  kda_golden_catalog_sha256(mask, cat);
  const char *gen = json_string_value(json_object_get(root, "generator"));
  if (!gen || strcmp(gen, KDA_GENERATOR) != 0 ||
      strcmp(json_string_value(json_object_get(root, "catalog_sha256")) ?
             json_string_value(json_object_get(root, "catalog_sha256")) : "", cat) != 0)
    return bad(err, errlen, shard, "shard.json: made from another catalog or generator "
               "(foreign shard)");
  if (!m->owner) { /* the first shard fixes the levels and N */
    m->mask = mask, m->n_of = n;
    m->owner = malloc((size_t)m->nc * sizeof *m->owner);
    m->seen_i = calloc((size_t)n, 1);
    if (!m->owner || !m->seen_i) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
    for (int64_t i = 0; i < m->nc; i++) m->owner[i] = -1;
  } else if (mask != m->mask || n != m->n_of) {
    snprintf(msg, sizeof msg, "shard.json: shard of other levels or another N (%lld) than the "
             "first shard (%lld) (foreign shard)", (long long)n, (long long)m->n_of);
    return bad(err, errlen, shard, msg);
  }
  if (m->seen_i[*I]) {
    snprintf(msg, sizeof msg, "shard %lld/%lld given twice (duplicated shard)", (long long)*I,
             (long long)n);
    return bad(err, errlen, shard, msg);
  }
  m->seen_i[*I] = 1;
  return KDA_OK;
}

/* Nothing but the listed files in the shard's level directories. */
static int listed(const mstate *m, int64_t s, const char *rel) {
  for (int64_t k = 0; k < m->n_copy; k++)
    if (m->owner[m->copy[k].index] == s && strcmp(m->copy[k].rel, rel) == 0) return 1;
  return 0;
}

static int check_unlisted(const char *shard, int64_t s, const mstate *m, char *err,
                          size_t errlen) {
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++) {
    if (!(m->mask & (UINT32_C(1) << l))) continue;
    char path[4400], rel[600], msg[700];
    snprintf(path, sizeof path, "%s/%s", shard, kda_level_name(l));
    DIR *d = opendir(path);
    struct dirent *de;
    int st = KDA_OK;
    while (!st && d && (de = readdir(d)) != NULL) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      snprintf(rel, sizeof rel, "%s/%.500s", kda_level_name(l), de->d_name);
      if (!listed(m, s, rel)) {
        snprintf(msg, sizeof msg, "%.600s: not listed in shard.json", rel);
        st = bad(err, errlen, shard, msg);
      }
    }
    if (d) closedir(d);
    if (st) return st;
  }
  return KDA_OK;
}

static int check_shard(const char *shard, int64_t s, mstate *m, const char *const *shards,
                       char *err, size_t errlen) {
  char path[4200], *text, e2[KDA_ERRLEN];
  size_t len;
  snprintf(path, sizeof path, "%s/shard.json", shard);
  struct stat sb;
  const int absent = lstat(path, &sb) != 0;
  if (absent || kda_input_read(path, SHARD_JSON_MAX, &text, &len, e2, sizeof e2) != KDA_OK)
    return bad(err, errlen, shard, absent ? "no shard.json (not a shard, or its "
               "writer did not finish)" : "shard.json is not a regular file of sane size");
  if (kda_json_values_check(text, len, SHARD_JSON_VALUES, "shard.json", e2, sizeof e2)) {
    free(text);
    return bad(err, errlen, shard, e2);
  }
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!root) {
    char msg[300];
    snprintf(msg, sizeof msg, "shard.json: not valid JSON (line %d: %.150s)", je.line, je.text);
    kda_text_clean(msg, sizeof msg, msg, 0); /* jansson quotes the bytes near the error */
    return bad(err, errlen, shard, msg);
  }
  int64_t I = -1;
  int st = check_header(shard, root, m, &I, err, errlen);
  json_t *units = json_object_get(root, "units");
  for (size_t k = 0; !st && k < json_array_size(units); k++)
    st = check_unit(shard, s, json_array_get(units, k), m, shards, err, errlen);
  json_decref(root);
  return st ? st : check_unlisted(shard, s, m, err, errlen);
}

/* Every shard of N and every unit of the levels present. */
static int check_cover(const mstate *m, char *err, size_t errlen) {
  for (int64_t i = 0; i < m->n_of; i++)
    if (!m->seen_i[i])
      return kda_fail(KDA_EFORMAT, err, errlen, "shard %lld/%lld is missing (no directory "
                      "given holds it)", (long long)i, (long long)m->n_of);
  for (int64_t i = 0; i < m->nc; i++)
    if ((m->mask & (UINT32_C(1) << kda_catalog_get(i)->level)) && m->owner[i] < 0)
      return kda_fail(KDA_EFORMAT, err, errlen, "unit '%s' is in no shard (missing unit)",
                      kda_catalog_get(i)->id);
  return KDA_OK;
}

/* ---- Writing. */
/* Copies src to dst atomically, checking that the bytes copied have the SHA-256 checked. */
static int copy_checked(const char *src, const char *dst, const char *want, char *err,
                        size_t errlen) {
  int fd = kda_input_open(src, err, errlen);
  FILE *in = fd >= 0 ? fdopen(fd, "rb") : NULL, *out;
  if (fd >= 0 && !in) close(fd);
  if (!in) return fd < 0 ? KDA_EIO : kda_fail(KDA_EIO, err, errlen, "%s: cannot open", src);
  kda_atomic *a;
  int st = kda_atomic_open(dst, &a, &out, err, errlen);
  if (st) {
    fclose(in);
    return st;
  }
  kda_sha256 h;
  unsigned char buf[65536], d[KDA_SHA256_BYTES];
  char hex[65];
  size_t r;
  kda_sha256_init(&h);
  while ((r = fread(buf, 1, sizeof buf, in)) > 0 && fwrite(buf, 1, r, out) == r)
    kda_sha256_update(&h, buf, r);
  int rd = ferror(in);
  fclose(in);
  kda_sha256_final(&h, d);
  kda_sha256_hex(d, hex);
  if (rd || strcmp(hex, want) != 0 || fchmod(kda_atomic_fd(a), 0644) != 0) {
    kda_atomic_abort(a);
    return kda_fail(KDA_EIO, err, errlen, "%s: %s while copied", src,
                    rd ? "read error" : "changed");
  }
  return kda_atomic_commit(a, err, errlen);
}

static int copy_units(const char *out, const char *const *shards, const mstate *m, char *err,
                      size_t errlen) {
  for (int64_t k = 0; k < m->n_copy; k++) {
    const copy_file *c = &m->copy[k];
    char src[4400], dst[4400];
    snprintf(src, sizeof src, "%s/%s", shards[m->owner[c->index]], c->rel);
    snprintf(dst, sizeof dst, "%s/%s", out, c->rel);
    int st = copy_checked(src, dst, c->sha256, err, errlen);
    if (st) return st;
  }
  return KDA_OK;
}

/* What kda golden --write does after its cases: manifests, pins, stale files, SHA256SUMS. */
static int finish_levels(const char *out, const mstate *m, char *err, size_t errlen) {
  int st = KDA_OK;
  for (int32_t l = 0; !st && l < KDA_LEVEL_COUNT; l++)
    if (m->mask & (UINT32_C(1) << l))
      st = kda_golden_write_level_manifest(out, l, m->infos, m->nc, err, errlen);
  for (int32_t l = 0; !st && l < KDA_LEVEL_COUNT; l++)
    if ((m->mask & (UINT32_C(1) << l)) && !kda_level_committed(l))
      st = kda_golden_write_pins(out, l, err, errlen);
  for (int32_t l = 0; !st && l < KDA_LEVEL_COUNT; l++) {
    if (!(m->mask & (UINT32_C(1) << l))) continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", out, kda_level_name(l));
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
      if (de->d_name[0] == '.' || kda_golden_owns(l, de->d_name)) continue;
      char f[4800];
      snprintf(f, sizeof f, "%s/%s", path, de->d_name);
      unlink(f); /* no longer in the catalog: --write removes it too */
    }
    if (d) closedir(d);
  }
  return st ? st : kda_golden_write_sums(out, err, errlen);
}

/* DIR, created or a directory itself (a symbolic link there would have its target's files
 * replaced and its stale ones removed). */
static int out_dir(const char *path, char *err, size_t errlen) {
  struct stat sb;
  if (mkdir(path, 0755) != 0 && errno != EEXIST)
    return kda_fail(KDA_EIO, err, errlen, "%s: cannot create: %s", path, strerror(errno));
  if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return kda_fail(KDA_EIO, err, errlen, "%s: not a directory (a symbolic link is not "
                    "followed)", path);
  return KDA_OK;
}

static int make_out_dirs(const char *out, uint32_t mask, char *err, size_t errlen) {
  int st = out_dir(out, err, errlen);
  for (int32_t l = 0; !st && l < KDA_LEVEL_COUNT; l++) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", out, kda_level_name(l));
    if (mask & (UINT32_C(1) << l)) st = out_dir(path, err, errlen);
  }
  return st;
}

/* OUT may not be one of the shards or inside one, and no shard may be inside one of OUT's
 * level directories (its shard.json would end up in SHA256SUMS, or the merge would replace
 * and remove files it reads).  A shard elsewhere inside OUT is fine (kda-mpi's
 * OUT/.kda-mpi.tmp.XXXXXX/rank-R: SHA256SUMS never lists a .tmp. name). */
static int check_out(const char *out, const char *const *shards, int64_t n, char *err,
                     size_t errlen) {
  struct stat so;
  char ro[PATH_MAX], rs[PATH_MAX];
  if (lstat(out, &so) == 0 && !S_ISDIR(so.st_mode))
    return kda_fail(KDA_EIO, err, errlen, "%s: not a directory (a symbolic link is not "
                    "followed)", out);
  kda_path_resolved(out, ro);
  for (int64_t s = 0; s < n; s++) {
    if (!realpath(shards[s], rs)) continue; /* named missing by its check */
    int bad_place = ro[0] && kda_path_within(ro, rs);
    for (int32_t l = 0; ro[0] && l < KDA_LEVEL_COUNT; l++) {
      char lv[PATH_MAX + 8];
      snprintf(lv, sizeof lv, "%.4000s/%s", ro, kda_level_name(l));
      bad_place |= kda_path_within(rs, lv);
    }
    if (bad_place)
      return kda_fail(KDA_EINVAL, err, errlen, "%s: the output is, or is inside, the shard %s "
                      "(or the shard is inside a level of it)", out, shards[s]);
  }
  return KDA_OK;
}

void kda_golden_merge_info_free(kda_golden_merge_info *m) {
  if (!m) return;
  free(m->infos);
  m->infos = NULL;
}

int kda_golden_merge(const char *out, const char *const *shards, int64_t n,
                     kda_golden_merge_info *info, char *err, size_t errlen) {
  memset(info, 0, sizeof *info);
  if (n < 1) return kda_fail(KDA_EINVAL, err, errlen, "no shard directories given");
  mstate m = {kda_catalog_count(), NULL, NULL, 0, 0, NULL, 0, NULL, 0, 0};
  m.infos = calloc((size_t)m.nc, sizeof *m.infos);
  int st = m.infos ? check_out(out, shards, n, err, errlen)
                   : kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  for (int64_t s = 0; !st && s < n; s++) st = check_shard(shards[s], s, &m, shards, err, errlen);
  if (!st) st = check_cover(&m, err, errlen);
  if (!st) st = make_out_dirs(out, m.mask, err, errlen);
  int lock = -1; /* one writer into OUT; what a killed one left there is stale */
  if (!st) st = kda_dir_lock(out, &lock, err, errlen);
  for (int32_t l = -1; !st && l < KDA_LEVEL_COUNT; l++) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", out, l < 0 ? "." : kda_level_name(l));
    if (l < 0 || (m.mask & (UINT32_C(1) << l))) kda_tmp_sweep(path);
  }
  if (!st) st = copy_units(out, shards, &m, err, errlen);
  if (!st) st = finish_levels(out, &m, err, errlen);
  kda_dir_unlock(lock);
  int64_t units = 0;
  for (int64_t i = 0; m.owner && i < m.nc; i++) units += m.owner[i] >= 0;
  *info = (kda_golden_merge_info){m.mask, n, units, m.files, m.infos};
  free(m.owner);
  free(m.seen_i);
  free(m.copy);
  if (st) kda_golden_merge_info_free(info);
  return st;
}

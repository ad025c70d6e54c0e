/* kda_golden_shard.c: the shards of a golden set: partition, shard manifests (SPEC.md §10.4).
 * SPDX-License-Identifier: MIT
 *
 * The merge (kda_golden_merge.c) reads what this file writes.  Reals of the golden infos are
 * written as C99 hex floats ("%a") so that the merged level manifest gets the very doubles the
 * shard computed (decimal with 17 digits would too, but hex states it).
 */
#include "kda_golden_shard.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_case.h"
#include "kda_case_internal.h" /* KDA_GENERATOR */
#include "kda_files.h"
#include "kda_golden_internal.h"
#include "kda_sha256.h"

int kda_shard_parse(const char *s, int64_t *i, int64_t *n, char *err, size_t errlen) {
  long long a = -1, b = -1;
  int used = 0;
  /* digits only: sscanf alone would take signs, spaces and "0x" */
  int ok = s && strspn(s, "0123456789/") == strlen(s) &&
           sscanf(s, "%lld/%lld%n", &a, &b, &used) == 2 && (size_t)used == strlen(s);
  if (!ok || b < 1 || b > KDA_SHARD_MAX || a < 0 || a >= b)
    return kda_fail(KDA_EINVAL, err, errlen, "bad shard '%s' (I/N with 0 <= I < N <= %d)",
                    s ? s : "", KDA_SHARD_MAX);
  *i = a;
  *n = b;
  return KDA_OK;
}

double kda_golden_unit_cost(int64_t i) {
  kda_gen_desc d;
  if (kda_gen_parse(kda_catalog_get(i)->desc, &d, NULL, 0) != KDA_OK) return 1.0;
  double c = (double)d.p.T * (double)d.p.HV * (double)d.p.K * (double)d.p.V + 1.0;
  kda_gen_desc_free(&d);
  return c;
}

int64_t kda_golden_units(uint32_t level_mask, int64_t *idx) {
  int64_t n = 0;
  for (int64_t i = 0; i < kda_catalog_count(); i++)
    if (level_mask & (UINT32_C(1) << kda_catalog_get(i)->level)) idx[n++] = i;
  return n;
}

static const double *sort_cost;
/* Decreasing cost, then increasing catalog index: the same order on every machine. */
static int by_cost(const void *a, const void *b) {
  const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
  const double x = sort_cost[i], y = sort_cost[j];
  return x < y ? 1 : x > y ? -1 : (i > j) - (i < j);
}

int kda_golden_units_by_cost(uint32_t level_mask, int64_t *idx) {
  const int64_t nc = kda_catalog_count();
  double *cost = calloc((size_t)(nc ? nc : 1), sizeof *cost);
  if (!cost) return -1;
  const int64_t nu = kda_golden_units(level_mask, idx);
  for (int64_t u = 0; u < nu; u++) cost[idx[u]] = kda_golden_unit_cost(idx[u]);
  sort_cost = cost;
  qsort(idx, (size_t)nu, sizeof *idx, by_cost);
  free(cost);
  return nu;
}

int kda_golden_partition(uint32_t level_mask, int64_t n, int64_t *shard_of, char *err,
                         size_t errlen) {
  if (n < 1 || n > KDA_SHARD_MAX)
    return kda_fail(KDA_EINVAL, err, errlen, "bad shard count %lld", (long long)n);
  const int64_t nc = kda_catalog_count();
  int64_t *idx = malloc((size_t)nc * sizeof *idx);
  double *cost = calloc((size_t)nc, sizeof *cost), *load = calloc((size_t)n, sizeof *load);
  const int64_t nu = idx ? kda_golden_units_by_cost(level_mask, idx) : -1;
  if (nu < 0 || !cost || !load) {
    free(idx), free(cost), free(load);
    return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  }
  for (int64_t i = 0; i < nc; i++) shard_of[i] = -1;
  for (int64_t u = 0; u < nu; u++) cost[idx[u]] = kda_golden_unit_cost(idx[u]);
  for (int64_t u = 0; u < nu; u++) {
    int64_t best = 0; /* costs are integers below 2^53: the sums are exact */
    for (int64_t s = 1; s < n; s++)
      if (load[s] < load[best]) best = s;
    shard_of[idx[u]] = best;
    load[best] += cost[idx[u]];
  }
  free(idx), free(cost), free(load);
  return KDA_OK;
}

void kda_golden_catalog_sha256(uint32_t level_mask, char hex[65]) {
  kda_sbuf b = {0};
  kda_sbuf_printf(&b, "%s\n", KDA_GENERATOR);
  for (int64_t i = 0; i < kda_catalog_count(); i++) {
    const kda_catalog_entry *e = kda_catalog_get(i);
    if (!(level_mask & (UINT32_C(1) << e->level))) continue;
    kda_sbuf_printf(&b, "%lld\x1f%s\x1f%s\x1f%s\x1f%s\x1f%llx\x1f%s\n", (long long)i,
                    kda_level_name(e->level), e->id, e->desc, e->design ? e->design : "",
                    (unsigned long long)e->flags, e->comment);
  }
  /* out of memory: a hash no shard can match (the merge then refuses, never accepts) */
  kda_sha256_of(b.oom ? "" : b.s, b.oom ? 0 : b.len, hex);
  if (b.oom) memset(hex, '0', 64);
  free(b.s);
}

/* ---- Writing shard.json. */
static json_t *hexreal(double x) {
  char s[64];
  snprintf(s, sizeof s, "%a", x);
  return json_string(s);
}

/* The kda_golden_info fields the level manifest and the summary lines read. */
static json_t *info_json(const kda_golden_info *in) {
  json_t *o = json_object();
  json_object_set_new(o, "method", json_integer(in->method));
  json_object_set_new(o, "n_values", json_integer(in->n_values));
  json_object_set_new(o, "steps", json_integer(in->steps));
  json_object_set_new(o, "prec_bits", json_integer(in->prec_bits));
  json_object_set_new(o, "n_evals", json_integer(in->n_evals));
  json_object_set_new(o, "ref_max_ulps", hexreal(in->ref_max_ulps));
  json_object_set_new(o, "ref_max_rel", hexreal(in->ref_max_rel));
  json_object_set_new(o, "ref_max_normwise", hexreal(in->ref_max_normwise));
  json_object_set_new(o, "ref_n_zero_mismatch", json_integer(in->ref_n_zero_mismatch));
  json_object_set_new(o, "ref_n_exact", json_integer(in->ref_n_exact));
  json_object_set_new(o, "ref_n_within1", json_integer(in->ref_n_within1));
  json_object_set_new(o, "ref_worst_index", json_integer(in->ref_worst_index));
  json_object_set_new(o, "certifier", json_integer(in->certifier));
  json_object_set_new(o, "n_decided_fast", json_integer(in->n_decided_fast));
  json_object_set_new(o, "seconds_certify", hexreal(in->seconds_certify));
  json_object_set_new(o, "seconds_fast", hexreal(in->seconds_fast));
  json_object_set_new(o, "seconds_ref", hexreal(in->seconds_ref));
  json_object_set_new(o, "seconds_total", hexreal(in->seconds_total));
  return o;
}

int kda_golden_file_sha256(const char *path, char hex[65], int64_t *size, char *err,
                           size_t errlen) {
  int fd = kda_input_open(path, err, errlen); /* a regular file: no FIFO, no symlink */
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (fd >= 0 && !f) close(fd);
  if (!f) return fd < 0 ? KDA_EIO : kda_fail(KDA_EIO, err, errlen, "%s: cannot open", path);
  kda_sha256 h;
  unsigned char buf[65536], d[KDA_SHA256_BYTES];
  size_t r;
  int64_t n = 0;
  kda_sha256_init(&h);
  while ((r = fread(buf, 1, sizeof buf, f)) > 0) {
    kda_sha256_update(&h, buf, r);
    n += (int64_t)r;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) return kda_fail(KDA_EIO, err, errlen, "%s: read error", path);
  kda_sha256_final(&h, d);
  kda_sha256_hex(d, hex);
  if (size) *size = n;
  return KDA_OK;
}

/* The files of unit e in DIR/<level>: every name the level owns whose id (the name up to its
 * last '.', as kda_golden_owns reads it) is e's; the case file must be one of them. */
static int unit_files(const char *dir, const kda_catalog_entry *e, json_t *files, char *err,
                      size_t errlen) {
  const char *lv = kda_level_name(e->level);
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", dir, lv);
  DIR *d = opendir(path);
  if (!d) return kda_fail(KDA_EIO, err, errlen, "%s: cannot list: %s", path, strerror(errno));
  struct dirent *de;
  int st = KDA_OK;
  const size_t L = strlen(e->id);
  while (!st && (de = readdir(d)) != NULL) {
    const char *dot = strrchr(de->d_name, '.');
    if (!dot || (size_t)(dot - de->d_name) != L || strncmp(de->d_name, e->id, L) != 0 ||
        !kda_golden_owns(e->level, de->d_name))
      continue;
    char rel[300], full[4800], hex[65];
    int64_t size = 0;
    snprintf(rel, sizeof rel, "%s/%s", lv, de->d_name);
    snprintf(full, sizeof full, "%s/%s", dir, rel);
    st = kda_golden_file_sha256(full, hex, &size, err, errlen);
    if (!st) json_object_set_new(files, rel, json_pack("{s:s,s:I}", "sha256", hex, "size",
                                                       (json_int_t)size));
  }
  closedir(d);
  char npz[300];
  snprintf(npz, sizeof npz, "%s/%s.npz", lv, e->id);
  if (!st && !json_object_get(files, npz))
    st = kda_fail(KDA_EIO, err, errlen, "%s/%s: missing", dir, npz);
  return st;
}

/* Removes DIR/<level>/<name> for every name the level owns that is not one of this shard's. */
static void remove_others(const char *dir, uint32_t mask, const uint8_t *mine) {
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++) {
    if (!(mask & (UINT32_C(1) << l))) continue;
    for (int64_t i = 0; i < kda_catalog_count(); i++) {
      const kda_catalog_entry *e = kda_catalog_get(i);
      if (e->level != l || mine[i]) continue;
      char path[4400];
      snprintf(path, sizeof path, "%s/%s/%s.npz", dir, kda_level_name(l), e->id);
      unlink(path);
      snprintf(path, sizeof path, "%s/%s/%s.txt", dir, kda_level_name(l), e->id);
      unlink(path);
    }
    char path[4400];
    snprintf(path, sizeof path, "%s/%s/manifest.json", dir, kda_level_name(l));
    unlink(path);
  }
}

static json_t *levels_json(uint32_t mask) {
  json_t *a = json_array();
  for (int32_t l = 0; l < KDA_LEVEL_COUNT; l++)
    if (mask & (UINT32_C(1) << l)) json_array_append_new(a, json_string(kda_level_name(l)));
  return a;
}

int kda_golden_shard_finish(const char *dir, uint32_t mask, int64_t i, int64_t n,
                            const char *assignment, const int64_t *idx, int64_t nu,
                            const kda_golden_info *infos, char *err, size_t errlen) {
  uint8_t *mine = calloc((size_t)kda_catalog_count(), 1);
  if (!mine) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  for (int64_t u = 0; u < nu; u++) mine[idx[u]] = 1;
  remove_others(dir, mask, mine);
  free(mine);
  char cat[65];
  kda_golden_catalog_sha256(mask, cat);
  json_t *units = json_array();
  json_t *root = json_pack("{s:s,s:s,s:o,s:s,s:s,s:I,s:I,s:s,s:O}", "schema", KDA_SHARD_SCHEMA,
                           "kind", "golden", "levels", levels_json(mask), "catalog_sha256", cat,
                           "generator", KDA_GENERATOR, "shard", (json_int_t)i, "of",
                           (json_int_t)n, "assignment", assignment, "units", units);
  int st = root && units ? KDA_OK : kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  for (int64_t u = 0; !st && u < nu; u++) {
    const kda_catalog_entry *e = kda_catalog_get(idx[u]);
    json_t *files = json_object();
    st = unit_files(dir, e, files, err, errlen);
    json_t *o = json_pack("{s:s,s:I,s:f,s:o,s:o}", "id", e->id, "index", (json_int_t)idx[u],
                          "cost", kda_golden_unit_cost(idx[u]), "info", info_json(&infos[idx[u]]),
                          "files", files);
    if (!st && (!o || json_array_append_new(units, o) != 0))
      st = kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
    else if (st) json_decref(o);
  }
  json_decref(units);
  char *text = st ? NULL : json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
  json_decref(root);
  if (!st && !text) st = kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  if (!st) {
    char path[4200];
    snprintf(path, sizeof path, "%s/shard.json", dir);
    st = kda_atomic_write(path, text, strlen(text), err, errlen);
  }
  free(text);
  return st;
}

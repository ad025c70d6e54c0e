/* check_scale.c: Check tests of the scale-out primitives: kda golden --write --shard and
 * --merge (docs/scale.md, SPEC.md §10.4), on L0, whose cases take milliseconds.
 * SPDX-License-Identifier: MIT
 *
 * The merged set must equal a single-process --write byte for byte for N = 1, 2, 3, 7, and
 * every kind of bad shard (corrupt, missing, duplicated, foreign, tampered) must be refused
 * with exit status 2, one line naming the shard, and nothing written.  The L1 and L2 runs,
 * MPI and the Slurm steps are in tools/tests/scale.sh (make check-scale).
 */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kda_catalog.h"
#include "kda_golden_shard.h"
#include "kda_sha256.h"
#include "kda_test.h"

#define P kda_test_path

static void setup(void) { kda_test_tmpdir_make("check-scale"); }
static void teardown(void) { kda_test_tmpdir_remove(); }

/* 1 when the trees a and b hold the same names with the same bytes (links not followed). */
static int same_tree(const char *a, const char *b) {
  struct stat sa, sb;
  if (lstat(a, &sa) != 0 || lstat(b, &sb) != 0) return 0;
  if (S_ISDIR(sa.st_mode) != S_ISDIR(sb.st_mode)) return 0;
  if (!S_ISDIR(sa.st_mode)) {
    size_t la = 0, lb = 0;
    unsigned char *x = kda_test_read_all(a, &la), *y = kda_test_read_all(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    if (!same) fprintf(stderr, "same_tree: %s and %s differ\n", a, b);
    free(x);
    free(y);
    return same;
  }
  if (kda_test_count_entries(a) != kda_test_count_entries(b)) {
    fprintf(stderr, "same_tree: %s and %s hold different numbers of entries\n", a, b);
    return 0;
  }
  DIR *d = opendir(a);
  struct dirent *e;
  int same = d != NULL;
  while (same && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char x[4096], y[4096];
    snprintf(x, sizeof x, "%s/%s", a, e->d_name);
    snprintf(y, sizeof y, "%s/%s", b, e->d_name);
    same = same_tree(x, y);
  }
  if (d) closedir(d);
  return same;
}

static void write_ref(const char *dir) {
  kda_test_result r = {0};
  kda_test_run(&r, "golden", "--write", "--level", "L0", "--jobs", "1", dir, NULL);
  kda_test_expect_ok(&r, "golden --write");
  kda_test_result_free(&r);
}

/* Shards I/N, I = 0..n-1, into PREFIX<I>. */
static void write_shards(const char *prefix, int n) {
  for (int i = 0; i < n; i++) {
    char spec[32], dir[256];
    snprintf(spec, sizeof spec, "%d/%d", i, n);
    snprintf(dir, sizeof dir, "%s%d", prefix, i);
    kda_test_result r = {0};
    kda_test_run(&r, "golden", "--write", "--shard", spec, "--level", "L0", "--jobs", "1", dir,
                 NULL);
    kda_test_expect_ok(&r, "golden --write --shard");
    ck_assert_msg(strstr(r.out, "wrote shard") != NULL, "%s", r.out);
    kda_test_result_free(&r);
  }
}

START_TEST(merge_equals_write) {
  static const int ns[] = {1, 2, 3, 7};
  write_ref(P("ref"));
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
    char prefix[256], out[256];
    snprintf(prefix, sizeof prefix, "%s/n%d-s", kda_test_tmpdir, ns[k]);
    snprintf(out, sizeof out, "%s/n%d-out", kda_test_tmpdir, ns[k]);
    write_shards(prefix, ns[k]);
    const char *args[16] = {"golden", "--merge", out};
    int na = 3;
    char dirs[8][300];
    for (int i = ns[k] - 1; i >= 0; i--) { /* any order */
      snprintf(dirs[i], sizeof dirs[i], "%s%d", prefix, i);
      args[na++] = dirs[i];
    }
    args[na] = NULL;
    kda_test_result r = {0};
    kda_test_run_argv(&r, args);
    kda_test_expect_ok(&r, "golden --merge");
    ck_assert_msg(same_tree(P("ref"), out), "N = %d: merged set differs from --write", ns[k]);
    kda_test_result_free(&r);
  }
}
END_TEST


/* Every unit in exactly one shard, the same partition twice, and the LPT bound. */
START_TEST(partition_balanced) {
  const uint32_t mask = (1u << KDA_LEVEL_L0) | (1u << KDA_LEVEL_L1);
  const int64_t nc = kda_catalog_count();
  int64_t *a = malloc((size_t)nc * sizeof *a), *b = malloc((size_t)nc * sizeof *b);
  double load[3] = {0, 0, 0}, last[3] = {0, 0, 0}, total = 0, big = 0;
  int64_t count[3] = {0, 0, 0};
  ck_assert(a && b);
  ck_assert_int_eq(kda_golden_partition(mask, 3, a, NULL, 0), KDA_OK);
  ck_assert_int_eq(kda_golden_partition(mask, 3, b, NULL, 0), KDA_OK);
  for (int64_t i = 0; i < nc; i++) {
    const int in = kda_catalog_get(i)->level != KDA_LEVEL_L2;
    ck_assert_int_eq(a[i], b[i]);
    ck_assert_msg(in ? a[i] >= 0 && a[i] < 3 : a[i] == -1, "unit %lld: shard %lld",
                  (long long)i, (long long)a[i]);
    if (!in) continue;
    const double c = kda_golden_unit_cost(i);
    load[a[i]] += c, total += c, count[a[i]]++;
    if (c > big) big = c;
    if (last[a[i]] == 0 || c < last[a[i]]) last[a[i]] = c; /* its smallest: placed last */
  }
  const double least = fmin(load[0], fmin(load[1], load[2]));
  for (int s = 0; s < 3; s++) {
    ck_assert_msg(count[s] > 0 && load[s] <= total / 3 + big, "shard %d: load %g of %g", s,
                  load[s], total);
    /* greedy: when its last unit came, this shard was the least loaded of all */
    ck_assert_msg(load[s] - last[s] <= least, "shard %d: load %g, least %g", s, load[s], least);
  }
  ck_assert_int_eq(kda_golden_partition(mask, 0, a, NULL, 0), KDA_EINVAL);
  free(a);
  free(b);
}
END_TEST

START_TEST(shard_spec_parse) {
  static const char *const badv[] = {"3/3", "-1/2", "1/0", "a/b", "1/2x", " 1/2", "1/100001",
                                     "+1/2", "1//2", "", "0x1/2", "1"};
  int64_t i, n;
  for (size_t k = 0; k < sizeof badv / sizeof badv[0]; k++)
    ck_assert_msg(kda_shard_parse(badv[k], &i, &n, NULL, 0) == KDA_EINVAL, "'%s'", badv[k]);
  ck_assert_int_eq(kda_shard_parse("6/7", &i, &n, NULL, 0), KDA_OK);
  ck_assert(i == 6 && n == 7);
  kda_test_result r = {0};
  kda_test_run(&r, "golden", "--write", "--shard", "3/3", P("d"), NULL);
  kda_test_expect_error(&r, "--shard 3/3", "kda golden: ", "bad shard '3/3'", NULL);
  kda_test_run(&r, "golden", "--verify", "--shard", "0/3", P("d"), NULL);
  kda_test_expect_error(&r, "--verify --shard", "kda golden: ", "--shard needs --write", NULL);
  kda_test_run(&r, "golden", "--merge", P("out"), NULL);
  kda_test_expect_error(&r, "--merge without shards", "kda golden: ", "--merge needs", NULL);
  kda_test_result_free(&r);
  ck_assert(!kda_test_exists(P("d")) && !kda_test_exists(P("out")));
}
END_TEST

/* ---- Bad shards: each made from three good ones, then refused naming the shard. */
static json_t *load_json(const char *path) {
  json_t *j = json_load_file(path, 0, NULL);
  ck_assert_msg(j != NULL, "%s", path);
  return j;
}

/* The infos a shard records reach the level manifest as the very doubles (L0's reference
 * errors are all 0, so the values are made up here and written through the library). */
START_TEST(info_round_trip) {
  write_ref(P("ref"));
  ck_assert_int_eq(mkdir(P("sh"), 0755), 0);
  ck_assert_int_eq(mkdir(P("sh/L0"), 0755), 0);
  const int64_t nc = kda_catalog_count();
  int64_t *idx = malloc((size_t)nc * sizeof *idx);
  kda_golden_info *in = calloc((size_t)nc, sizeof *in);
  ck_assert(idx && in);
  const int64_t n = kda_golden_units(1u << KDA_LEVEL_L0, idx);
  for (int64_t u = 0; u < n; u++) {
    static const char *const ext[] = {"npz", "txt"};
    for (int k = 0; k < 2; k++) {
      char name[256];
      snprintf(name, sizeof name, "L0/%s.%s", kda_catalog_get(idx[u])->id, ext[k]);
      size_t len = 0;
      unsigned char *b = kda_test_slurp(kda_test_join(P("ref"), name), &len);
      kda_test_write_all(kda_test_join(P("sh"), name), b, len);
      free(b);
    }
    in[idx[u]].method = 1;
    in[idx[u]].ref_max_ulps = 0x1.23456789abcdfp-3 * (double)(u + 1);
    in[idx[u]].ref_max_rel = 1.0 / 3.0;
  }
  char err[256];
  ck_assert_int_eq(kda_golden_shard_finish(P("sh"), 1u << KDA_LEVEL_L0, 0, 1, "lpt", idx, n,
                                           in, err, sizeof err), KDA_OK);
  kda_test_result r = {0};
  kda_test_run(&r, "golden", "--merge", P("out"), P("sh"), NULL);
  kda_test_expect_ok(&r, "golden --merge");
  kda_test_result_free(&r);
  json_t *m = load_json(P("out/L0/manifest.json"));
  json_t *cases = json_object_get(m, "cases");
  ck_assert_int_eq((int64_t)json_array_size(cases), n);
  for (int64_t u = 0; u < n; u++) {
    json_t *ref = json_object_get(json_array_get(cases, (size_t)u), "ref_f64");
    ck_assert(json_real_value(json_object_get(ref, "max_ulps")) ==
              0x1.23456789abcdfp-3 * (double)(u + 1));
    ck_assert(json_real_value(json_object_get(ref, "max_rel")) == 1.0 / 3.0);
  }
  json_decref(m);
  free(idx);
  free(in);
}
END_TEST

static void save_json(const char *path, json_t *j) {
  ck_assert_int_eq(json_dump_file(j, path, JSON_INDENT(1)), 0);
  json_decref(j);
}

/* The first unit of shard s's manifest. */
static json_t *first_unit(json_t *root) {
  return json_array_get(json_object_get(root, "units"), 0);
}

static void corrupt_byte(const char *path) {
  size_t len = 0;
  unsigned char *b = kda_test_slurp(path, &len);
  b[len / 2] ^= 0x01;
  kda_test_write_all(path, b, len);
  free(b);
}

/* A file name of shard dir's first unit ("L0/<id>.npz"). */
static const char *unit_npz(const char *dir) {
  static char rel[512];
  json_t *root = load_json(kda_test_join(dir, "shard.json"));
  snprintf(rel, sizeof rel, "L0/%s.npz", json_string_value(json_object_get(first_unit(root),
                                                                           "id")));
  json_decref(root);
  return rel;
}

typedef struct bad_case {
  const char *name, *shard, *phrase; /* the shard the message names, a phrase of it */
} bad_case;

static const bad_case bad_cases[] = {
    {"corrupt-file", "s1", "SHA-256 differs from shard.json"},
    {"missing-shard", "s", "shard 2/3 is missing"},
    {"duplicated-shard", "s1", "given twice"},
    {"foreign-catalog", "s1", "foreign shard"},
    {"other-n", "t0", "another N"},
    {"missing-file", "s1", "missing"},
    {"unlisted-file", "s1", "not listed in shard.json"},
    {"bad-json", "s1", "not valid JSON"},
    {"no-manifest", "s1", "no shard.json"},
    {"unit-twice", "s1", "duplicated shard or unit"},
    {"hostile-path", "s1", "lists files the catalog does not give it"},
    {"bad-info", "s1", "no valid info"},
    {"size-differs", "s1", "size differs from shard.json"},
    {"foreign-unit", "s1", "not in this catalog's levels"},
    {"out-is-shard", "s1", "the output is, or is inside, the shard"},
    {"truncated-npz", "s1", "corrupt shard"},
    {"forged-trace", "s1", "not the trace of its case file"},
    {"out-in-shard", "s1", "the output is, or is inside, the shard"},
    {"out-level-symlink", "out/L0", "not a directory"},
    {"many-values", "s1", "more than 4194304 JSON values"},
};

/* The first unit's file rel of shard dir recorded with its present SHA-256 and size, as
 * whoever edits a file can always record it. */
static void rehash_unit_file(const char *dir, const char *rel) {
  char hex[65], err[KDA_ERRLEN];
  int64_t size;
  ck_assert_int_eq(kda_golden_file_sha256(kda_test_join(dir, rel), hex, &size, err, sizeof err),
                   KDA_OK);
  json_t *root = load_json(kda_test_join(dir, "shard.json"));
  json_t *rec = json_object_get(json_object_get(first_unit(root), "files"), rel);
  ck_assert_ptr_nonnull(rec);
  json_object_set_new(rec, "sha256", json_string(hex));
  json_object_set_new(rec, "size", json_integer(size));
  save_json(kda_test_join(dir, "shard.json"), root);
}

static void make_bad(int k, const char **args, int *na) {
  const char *s0 = P("s0"), *s1 = P("s1"), *s2 = P("s2");
  const char *name = bad_cases[k].name;
  json_t *root = NULL;
  args[(*na)++] = s0, args[(*na)++] = s1, args[(*na)++] = s2;
  if (!strcmp(name, "corrupt-file")) corrupt_byte(kda_test_join(s1, unit_npz(s1)));
  else if (!strcmp(name, "missing-shard")) (*na)--;
  else if (!strcmp(name, "duplicated-shard")) args[*na - 1] = s1;
  else if (!strcmp(name, "other-n")) {
    write_shards(P("t"), 2); /* the first shard fixes N: the N = 2 one last */
    args[2] = P("t0");
  } else if (!strcmp(name, "missing-file")) ck_assert(unlink(kda_test_join(s1, unit_npz(s1))) == 0);
  else if (!strcmp(name, "unlisted-file")) kda_test_write_all(kda_test_join(s1, "L0/x.npz"), "x", 1);
  else if (!strcmp(name, "bad-json")) kda_test_write_all(kda_test_join(s1, "shard.json"), "{\"sch", 5);
  else if (!strcmp(name, "no-manifest")) ck_assert(unlink(kda_test_join(s1, "shard.json")) == 0);
  else if (!strcmp(name, "truncated-npz")) { /* half an archive, its hash recomputed */
    char rel[512];
    snprintf(rel, sizeof rel, "%s", unit_npz(s1));
    size_t len = 0;
    unsigned char *b = kda_test_slurp(kda_test_join(s1, rel), &len);
    kda_test_write_all(kda_test_join(s1, rel), b, len / 2);
    free(b);
    rehash_unit_file(s1, rel);
  } else if (!strcmp(name, "forged-trace")) { /* one digit of the trace, hash recomputed */
    char rel[512];
    snprintf(rel, sizeof rel, "%s", unit_npz(s1));
    memcpy(rel + strlen(rel) - 3, "txt", 3);
    size_t len = 0;
    unsigned char *b = kda_test_slurp(kda_test_join(s1, rel), &len);
    unsigned char *d = (unsigned char *)strpbrk((char *)b + len / 2, "123456789");
    ck_assert_ptr_nonnull(d);
    *d = *d == '9' ? '8' : (unsigned char)(*d + 1);
    kda_test_write_all(kda_test_join(s1, rel), b, len);
    free(b);
    rehash_unit_file(s1, rel);
  } else if (!strcmp(name, "many-values")) { /* 13 MiB of [] costing a parser 400 MB */
    const size_t n = ((size_t)1 << 22) + 1;
    char *b = malloc(3 * n + 16), *q = b;
    ck_assert_ptr_nonnull(b);
    q += sprintf(q, "{\"x\":[");
    for (size_t v = 0; v < n; v++) memcpy(q, "[],", 3), q += 3;
    strcpy(q - 1, "]}");
    kda_test_write_all(kda_test_join(s1, "shard.json"), b, strlen(b));
    free(b);
  } else if (!strcmp(name, "out-level-symlink")) { /* OUT/L0 -> a directory of someone's */
    ck_assert_int_eq(mkdir(P("victim"), 0755), 0);
    kda_test_write_all(P("victim/mine.txt"), "mine", 4);
    ck_assert_int_eq(mkdir(P("out"), 0755), 0);
    ck_assert_int_eq(symlink(P("victim"), P("out/L0")), 0);
  } else if (strcmp(name, "out-in-shard") != 0) root = load_json(kda_test_join(s1, "shard.json"));
  if (!root) return;
  json_t *u = first_unit(root);
  if (!strcmp(name, "foreign-catalog"))
    json_object_set_new(root, "catalog_sha256", json_string("00000000000000000000000000000000"
                                                            "00000000000000000000000000000000"));
  else if (!strcmp(name, "unit-twice")) { /* s0's first unit listed by s1 too, files copied */
    json_t *r0 = load_json(kda_test_join(s0, "shard.json"));
    json_t *u0 = json_deep_copy(first_unit(r0));
    const char *files[2] = {unit_npz(s0), NULL};
    char txt[512];
    snprintf(txt, sizeof txt, "%.*s.txt", (int)(strlen(files[0]) - 4), files[0]);
    files[1] = txt;
    for (int f = 0; f < 2; f++) {
      size_t len = 0;
      unsigned char *b = kda_test_slurp(kda_test_join(s0, files[f]), &len);
      kda_test_write_all(kda_test_join(s1, files[f]), b, len);
      free(b);
    }
    json_array_append_new(json_object_get(root, "units"), u0);
    json_decref(r0);
  } else if (!strcmp(name, "hostile-path"))
    json_object_set_new(json_object_get(u, "files"), "../../etc/passwd",
                        json_pack("{s:s,s:i}", "sha256", "00", "size", 0));
  else if (!strcmp(name, "bad-info"))
    json_object_set_new(json_object_get(u, "info"), "method", json_string("PROVEN"));
  else if (!strcmp(name, "size-differs")) {
    json_t *files = json_object_get(u, "files");
    const char *key;
    json_t *v;
    json_object_foreach(files, key, v) json_object_set_new(v, "size", json_integer(1));
  } else if (!strcmp(name, "foreign-unit"))
    json_object_set_new(u, "index", json_integer(kda_catalog_count() - 1));
  save_json(kda_test_join(s1, "shard.json"), root);
}

START_TEST(bad_shard_refused) {
  write_shards(P("s"), 3);
  kda_test_write_all(P("keep"), "kept", 4);
  const char *args[16] = {"golden", "--merge", P("out")};
  int na = 0;
  make_bad(_i, args + 3, &na);
  na += 3;
  args[na] = NULL;
  if (!strcmp(bad_cases[_i].name, "out-is-shard")) args[2] = P("s1");
  if (!strcmp(bad_cases[_i].name, "out-in-shard")) args[2] = P("s1/out");
  kda_test_result r = {0};
  kda_test_run_argv(&r, args);
  const char *named = !strcmp(bad_cases[_i].shard, "s") ? "" : P(bad_cases[_i].shard);
  kda_test_expect_error(&r, bad_cases[_i].name, "kda golden: ", named, bad_cases[_i].phrase,
                        NULL);
  if (!strcmp(bad_cases[_i].name, "out-level-symlink"))
    ck_assert_msg(kda_test_exists(P("victim/mine.txt")) && kda_test_count_entries(P("victim")) == 1,
                  "the merge wrote into or removed from a symlinked level");
  else
    ck_assert_msg(!kda_test_exists(P("out")) && !kda_test_exists(P("s1/out")),
                  "%s: the merge wrote something", bad_cases[_i].name);
  kda_test_result_free(&r);
}
END_TEST


/* ---- kda conform --shard / --merge, on L0 with a failing mutant, a used and an unused
 * waiver.  What may differ from one run: the "seconds" of each results.jsonl line and the
 * junit time attributes (timings); summary.json must be identical. */
static const char *mutant_spec(void) {
  static char spec[600];
  snprintf(spec, sizeof spec, "%s:mutant=transposed_state",
           kda_test_plugin_path("kda_plugin_mutants.so"));
  return spec;
}

static void write_waivers(void) {
  static const char w[] =
      "{\"waivers\":[{\"case\":\"l0-decay-wipe\",\"backend\":\"mutant\",\"reason\":\"known\"},"
      "{\"case\":\"l0-reflection\",\"backend\":\"ref-f64\",\"reason\":\"never fails\"}]}";
  kda_test_write_all(P("waivers.json"), w, sizeof w - 1);
}

/* kda conform on golden/L0 into OUT, as shard SPEC when not NULL; the exit status. */
static int conform_run(const char *out, const char *spec) {
  const char *args[20] = {"conform", "-q", "-b", "ref-f64", "-p", mutant_spec(), "-b",
                          "ref-f32", "--waivers", P("waivers.json"), "--out", out};
  int n = 12;
  if (spec) args[n++] = "--shard", args[n++] = spec;
  args[n++] = "golden/L0";
  args[n] = NULL;
  kda_test_result r = {0};
  kda_test_run_argv(&r, args);
  /* the whole run fails (the mutant); a shard fails when its units do */
  ck_assert_msg(spec ? r.status == 0 || r.status == 1 : r.status == 1, "conform %s: status %d: "
                "%s", spec ? spec : "", r.status, r.err);
  int st = r.status;
  kda_test_result_free(&r);
  return st;
}

/* results.jsonl without the timings: each line re-dumped without "seconds", sorted keys. */
static char *jsonl_normalised(const char *path) {
  size_t len = 0;
  char *text = (char *)kda_test_slurp(path, &len), *save = NULL, *out = calloc(1, 1);
  size_t n = 0;
  for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
    json_t *j = json_loads(ln, 0, NULL);
    ck_assert_msg(j && json_object_get(j, "seconds"), "%s: a line without seconds", path);
    json_object_del(j, "seconds");
    char *d = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    out = realloc(out, n + strlen(d) + 2);
    memcpy(out + n, d, strlen(d));
    n += strlen(d);
    out[n++] = '\n';
    out[n] = '\0';
    free(d);
    json_decref(j);
  }
  free(text);
  return out;
}

/* junit.xml with every time="..." emptied. */
static char *junit_normalised(const char *path) {
  char *t = (char *)kda_test_slurp(path, NULL), *p = t;
  while ((p = strstr(p, " time=\"")) != NULL) {
    char *q = strchr(p + 7, '"');
    ck_assert(q != NULL);
    memmove(p + 7, q, strlen(q) + 1);
    p += 8;
  }
  return t;
}

static void expect_same_reports(const char *a, const char *b) {
  char *x = jsonl_normalised(kda_test_join(a, "results.jsonl"));
  char *y = jsonl_normalised(kda_test_join(b, "results.jsonl"));
  ck_assert_msg(strcmp(x, y) == 0, "results.jsonl of %s and %s differ beyond seconds", a, b);
  free(x), free(y);
  size_t la = 0, lb = 0;
  unsigned char *sa = kda_test_slurp(kda_test_join(a, "summary.json"), &la);
  unsigned char *sb = kda_test_slurp(kda_test_join(b, "summary.json"), &lb);
  ck_assert_msg(la == lb && memcmp(sa, sb, la) == 0, "summary.json of %s and %s differ", a, b);
  free(sa), free(sb);
  x = junit_normalised(kda_test_join(a, "junit.xml"));
  y = junit_normalised(kda_test_join(b, "junit.xml"));
  ck_assert_msg(strcmp(x, y) == 0, "junit.xml of %s and %s differ beyond time", a, b);
  free(x), free(y);
}

static void conform_shards(const char *prefix, int n) {
  for (int i = 0; i < n; i++) {
    char spec[32], dir[300];
    snprintf(spec, sizeof spec, "%d/%d", i, n);
    snprintf(dir, sizeof dir, "%s%d", prefix, i);
    conform_run(dir, spec);
  }
}

START_TEST(conform_merge_equals_run) {
  static const int ns[] = {1, 2, 3, 5};
  write_waivers();
  conform_run(P("single"), NULL);
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
    char prefix[256], out[256], dirs[8][300];
    snprintf(prefix, sizeof prefix, "%s/c%d-s", kda_test_tmpdir, ns[k]);
    snprintf(out, sizeof out, "%s/c%d-out", kda_test_tmpdir, ns[k]);
    conform_shards(prefix, ns[k]);
    const char *args[16] = {"conform", "--merge", out};
    int na = 3;
    for (int i = 0; i < ns[k]; i++) {
      snprintf(dirs[i], sizeof dirs[i], "%s%d", prefix, i);
      args[na++] = dirs[i];
    }
    args[na] = NULL;
    kda_test_result r = {0};
    kda_test_run_argv(&r, args);
    ck_assert_msg(r.status == 1, "merge of %d: status %d (the run's is 1): %s", ns[k], r.status,
                  r.err);
    kda_test_result_free(&r);
    expect_same_reports(P("single"), out);
  }
}
END_TEST

/* shard.json's record of DIR/NAME set to the file's present SHA-256 and size: what an
 * attacker who edits a report can always do. */
static void rehash(const char *dir, const char *name) {
  char path[600], hex[65], err[KDA_ERRLEN];
  int64_t size;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  ck_assert_int_eq(kda_golden_file_sha256(path, hex, &size, err, sizeof err), KDA_OK);
  snprintf(path, sizeof path, "%s/shard.json", dir);
  json_t *root = load_json(path);
  json_t *rec = json_object_get(json_object_get(root, "files"), name);
  json_object_set_new(rec, "sha256", json_string(hex));
  json_object_set_new(rec, "size", json_integer(size));
  save_json(path, root);
}

/* The text of path with its first `from` replaced by `to`. */
static void edit_file(const char *path, const char *from, const char *to) {
  size_t len = 0;
  char *b = (char *)kda_test_slurp(path, &len), *at = strstr(b, from);
  ck_assert_msg(at != NULL, "%s: no '%s'", path, from);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  fwrite(b, 1, (size_t)(at - b), f), fputs(to, f), fputs(at + strlen(from), f);
  ck_assert_int_eq(fclose(f), 0);
  free(b);
}

/* junit.xml without its last testcase (a failure hidden by dropping it, not by editing it). */
static void drop_last_testcase(const char *path) {
  size_t len = 0;
  char *b = (char *)kda_test_slurp(path, &len), *at = NULL;
  for (char *q = strstr(b, "\n    <testcase "); q; q = strstr(q + 1, "\n    <testcase ")) at = q;
  ck_assert_msg(at != NULL, "%s: no testcase", path);
  char *end = strstr(at, "\n  </testsuite>");
  ck_assert_ptr_nonnull(end);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  fwrite(b, 1, (size_t)(at - b), f), fputs(end, f);
  ck_assert_int_eq(fclose(f), 0);
  free(b);
}

/* A plan of 40000 x 40000 units in a shard.json of a few hundred KB, its hash recomputed. */
static void huge_plan(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/shard.json", dir);
  json_t *root = load_json(path), *plan = json_object_get(root, "plan");
  json_t *cases = json_array(), *tg = json_array();
  for (int k = 0; k < 40000; k++) json_array_append_new(cases, json_string("c"));
  for (int k = 0; k < 40000; k++) json_array_append_new(tg, json_string("t"));
  json_object_set_new(plan, "cases", cases), json_object_set_new(plan, "targets", tg);
  char *text = json_dumps(plan, JSON_COMPACT), hex[65];
  kda_sha256 h;
  unsigned char d[KDA_SHA256_BYTES];
  kda_sha256_init(&h);
  kda_sha256_update(&h, text, strlen(text));
  kda_sha256_final(&h, d);
  kda_sha256_hex(d, hex);
  free(text);
  json_object_set_new(root, "plan_sha256", json_string(hex));
  save_json(path, root);
}

static const bad_case conform_bad[] = {
    {"forged-summary", "s2", "counts are not those of its results.jsonl"},
    {"line-outside-plan", "s1", "not its unit's in the plan"},
    {"forged-junit", "s2", "a testcase is not its results.jsonl line's"},
    {"dropped-testcase", "s2", "a line of results.jsonl has no testcase"},
    {"fifo-report", "s1", "not a regular file"},
    {"symlink-report", "s1", "symbolic link"},
    {"huge-plan", "s0", "more units than its shards list"},
    {"corrupt-report", "s1", "differs from shard.json (corrupt shard)"},
    {"missing-shard", "s", "shard 2/3 is missing"},
    {"duplicated-shard", "s1", "given twice"},
    {"foreign-run", "f0", "another run"},
    {"no-manifest", "s1", "no shard.json"},
    {"tampered-plan", "s1", "does not have its plan_sha256"},
    {"out-in-shard", "s1", "the output is, or is inside, the shard"},
};

START_TEST(conform_bad_shard) {
  write_waivers();
  conform_shards(P("s"), 3);
  const char *name = conform_bad[_i].name;
  const char *args[16] = {"conform", "--merge", P("out"), P("s0"), P("s1"), P("s2"), NULL};
  if (!strcmp(name, "forged-summary")) { /* "0 failed" over Fail lines, hash recomputed */
    json_t *sm = load_json(P("s2/summary.json"));
    json_int_t failed = json_integer_value(json_object_get(sm, "failed"));
    ck_assert_msg(failed > 0, "shard 2 has no failure to hide");
    json_object_set_new(sm, "passed", json_integer(json_integer_value(json_object_get(sm, "passed")) + failed));
    json_object_set_new(sm, "failed", json_integer(0));
    json_object_set_new(sm, "failing", json_array());
    save_json(P("s2/summary.json"), sm);
    rehash(P("s2"), "summary.json");
  } else if (!strcmp(name, "line-outside-plan")) {
    edit_file(P("s1/results.jsonl"), "{\"case\":\"l0-", "{\"case\":\"xx-");
    rehash(P("s1"), "results.jsonl");
  } else if (!strcmp(name, "forged-junit")) { /* a failure shown as passed in junit.xml */
    edit_file(P("s2/junit.xml"), "<failure ", "<skipped ");
    edit_file(P("s2/junit.xml"), "</failure>", "</skipped>");
    rehash(P("s2"), "junit.xml");
  } else if (!strcmp(name, "dropped-testcase")) { /* 8 Fail lines, 7 failures in junit.xml */
    drop_last_testcase(P("s2/junit.xml"));
    rehash(P("s2"), "junit.xml");
  } else if (!strcmp(name, "fifo-report")) { /* read, it would hang the merge */
    ck_assert_int_eq(unlink(P("s1/results.jsonl")), 0);
    ck_assert_int_eq(mkfifo(P("s1/results.jsonl"), 0600), 0);
  } else if (!strcmp(name, "symlink-report")) {
    ck_assert_int_eq(unlink(P("s1/junit.xml")), 0);
    ck_assert_int_eq(symlink("/etc/passwd", P("s1/junit.xml")), 0);
  } else if (!strcmp(name, "huge-plan")) { /* every shard, consistently: owner[1.6e9] before */
    huge_plan(P("s0")), huge_plan(P("s1")), huge_plan(P("s2"));
  }
  else if (!strcmp(name, "corrupt-report")) corrupt_byte(P("s1/junit.xml"));
  else if (!strcmp(name, "missing-shard")) args[5] = NULL;
  else if (!strcmp(name, "duplicated-shard")) args[5] = P("s1");
  else if (!strcmp(name, "foreign-run")) { /* shard 0 of a run with other backends */
    kda_test_result r = {0};
    kda_test_run(&r, "conform", "-q", "-b", "ref-f64", "--shard", "0/3", "--out", P("f0"),
                 "golden/L0", NULL);
    kda_test_expect_ok(&r, "conform --shard (foreign)");
    kda_test_result_free(&r);
    args[5] = P("f0");
  } else if (!strcmp(name, "no-manifest")) ck_assert(unlink(P("s1/shard.json")) == 0);
  else if (!strcmp(name, "out-in-shard")) args[2] = P("s1/out");
  else if (!strcmp(name, "tampered-plan")) {
    json_t *root = load_json(P("s1/shard.json"));
    json_array_append_new(json_object_get(json_object_get(root, "plan"), "targets"),
                          json_string("extra"));
    save_json(P("s1/shard.json"), root);
  }
  kda_test_result r = {0};
  kda_test_run_argv(&r, args);
  const char *named = !strcmp(conform_bad[_i].shard, "s") ? "" : P(conform_bad[_i].shard);
  kda_test_expect_error(&r, name, "kda conform: ", named, conform_bad[_i].phrase, NULL);
  ck_assert_msg(!kda_test_exists(P("out")) && !kda_test_exists(P("s1/out")),
                "%s: the merge wrote something", name);
  kda_test_run(&r, "conform", "-b", "ref-f64", "--shard", "0/2", "golden/L0", NULL);
  kda_test_expect_error(&r, "--shard without --out", "kda conform: ", "--shard needs --out",
                        NULL);
  kda_test_result_free(&r);
}
END_TEST

/* The merged reports are written all or none: a summary.json that cannot be written leaves
 * no results.jsonl either (and the message names the errno of the failed write). */
START_TEST(conform_merge_all_or_nothing) {
  write_waivers();
  conform_shards(P("s"), 2);
  ck_assert_int_eq(setenv("KDA_TEST_FAIL_WRITE", "summary.json", 1), 0);
  kda_test_result r = {0};
  kda_test_run(&r, "conform", "--merge", P("out"), P("s0"), P("s1"), NULL);
  unsetenv("KDA_TEST_FAIL_WRITE");
  kda_test_expect_error(&r, "merge, summary.json unwritable", "kda conform: ", "summary.json",
                        "No space left on device", NULL);
  kda_test_result_free(&r);
  ck_assert_msg(!kda_test_exists(P("out/results.jsonl")) && !kda_test_exists(P("out/junit.xml")),
                "a failed merge replaced some of its reports");
}
END_TEST

static Suite *scale_suite(void) {
  Suite *s = suite_create("scale");
  TCase *t = tcase_create("shard-merge");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 300);
  tcase_add_test(t, merge_equals_write);
  tcase_add_test(t, partition_balanced);
  tcase_add_test(t, info_round_trip);
  tcase_add_test(t, shard_spec_parse);
  tcase_add_loop_test(t, bad_shard_refused, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
  suite_add_tcase(s, t);
  TCase *c = tcase_create("conform-shard-merge");
  tcase_add_checked_fixture(c, setup, teardown);
  tcase_set_timeout(c, 300);
  tcase_add_test(c, conform_merge_equals_run);
  tcase_add_test(c, conform_merge_all_or_nothing);
  tcase_add_loop_test(c, conform_bad_shard, 0, (int)(sizeof conform_bad / sizeof conform_bad[0]));
  suite_add_tcase(s, c);
  return s;
}

int main(void) { return kda_test_main(scale_suite(), CK_ENV, CK_FORK_GETENV); }

/* check_case_gen.c: case files with generated inputs and sampled truth (SPEC.md §10.2).
 * SPDX-License-Identifier: MIT
 *
 * 1. kda_gen_inputs_sha256 (window by window) equals the SHA-256 of the .npy bytes that
 *    kda_case_save stores, member by member, over families, gates, varlen, h0, checkpoints.
 * 2. A generated-inputs file (no input member, golden.inputs "generated") loads as the
 *    generated case bit for bit; every broken variant is KDA_EFORMAT naming the file and the
 *    member or key: a wrong hash, a description that does not reproduce the hashes, a stored
 *    input member, a design, a missing hash object, a problem the description does not give.
 * 3. Sampled truth: o_index strictly increasing, inside [0, T), matching o's rows.
 */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_npz.h"
#include "kda_sha256.h"
#include "kda_test.h"

static const char *const member_names[KDA_CASE_MEMBERS] = {
    "q", "k", "v", "g", "beta", "A_log", "dt_bias", "cu_seqlens", "h0", "checkpoints"};

static void parse_ok(const char *text, kda_gen_desc *d) {
  char err[KDA_ERRLEN] = "";
  ck_assert_msg(kda_gen_parse(text, d, err, sizeof err) == KDA_OK, "parse '%s': %s", text, err);
}

static const char *const descs[] = {
    "seed=5 T=37 H=2 HV=4 K=5 V=3 gate=softplus beta=logit prec=bf16",
    "seed=6 seqlens=13,0,24 H=1 K=4 V=6 h0=1 checkpoints=log family=gdn prec=f16 layout=vk",
    "seed=7 T=20 H=1 K=8 V=8 family=deltanet regime=lowrank-slow prec=f64",
    "seed=8 T=30 H=1 K=8 V=4 regime=mixed gate=log h0=1 prec=f32",
};

START_TEST(test_hashes_match_saved) {
  char err[KDA_ERRLEN] = "";
  for (size_t i = 0; i < sizeof descs / sizeof descs[0]; i++) {
    kda_gen_desc d;
    kda_case c;
    parse_ok(descs[i], &d);
    ck_assert_int_eq(kda_gen_case(&d, &c, err, sizeof err), KDA_OK);
    const char *path = kda_test_path("saved.npz");
    ck_assert_msg(kda_case_save(path, &c, NULL, err, sizeof err) == KDA_OK, "%s", err);
    char hex[KDA_CASE_MEMBERS][65];
    ck_assert_msg(kda_gen_inputs_sha256(&d, hex, err, sizeof err) == KDA_OK, "%s", err);
    kda_npz *z;
    ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
    for (int m = 0; m < KDA_CASE_MEMBERS; m++) {
      char name[32], *blob = NULL, want[65];
      size_t len = 0;
      snprintf(name, sizeof name, "%s.npy", member_names[m]);
      const int present = kda_npz_has(z, member_names[m]);
      ck_assert_msg(present == (hex[m][0] != '\0'), "%s: member %s (%s)", descs[i], name,
                    hex[m]);
      if (!present) continue;
      ck_assert_int_eq(kda_npz_read_blob(z, name, &blob, &len, err, sizeof err), KDA_OK);
      kda_sha256 h;
      unsigned char dg[KDA_SHA256_BYTES];
      kda_sha256_init(&h);
      kda_sha256_update(&h, blob, len);
      kda_sha256_final(&h, dg);
      kda_sha256_hex(dg, want);
      ck_assert_msg(strcmp(want, hex[m]) == 0, "%s: %s hash differs", descs[i], name);
      free(blob);
    }
    kda_npz_close(z);
    kda_case_free(&c);
    kda_gen_desc_free(&d);
  }
}
END_TEST

/* Ways to break a generated-inputs file. */
enum { OK_FILE, BAD_HASH, OTHER_SEED, STORED_MEMBER, DESIGN, NO_SUMS, NO_HASH, OTHER_T };

/* Writes a generated-inputs file of description text, broken as `how` says. */
static void write_generated(const char *path, const char *text, int how) {
  char err[KDA_ERRLEN] = "";
  kda_gen_desc d;
  kda_case c;
  parse_ok(text, &d);
  ck_assert_int_eq(kda_gen_case(&d, &c, err, sizeof err), KDA_OK);
  char hex[KDA_CASE_MEMBERS][65];
  ck_assert_int_eq(kda_gen_inputs_sha256(&d, hex, err, sizeof err), KDA_OK);
  json_t *root = json_loads(c.manifest_json, 0, NULL), *sums = json_object();
  for (int m = 0; m < KDA_CASE_MEMBERS; m++) {
    char key[32];
    snprintf(key, sizeof key, "%s.npy", member_names[m]);
    if (hex[m][0] && !(how == NO_HASH && m == 2)) json_object_set_new(sums, key, json_string(hex[m]));
  }
  if (how == BAD_HASH) json_object_set_new(sums, "v.npy", json_string(hex[0]));
  json_t *gold = json_pack("{s:s,s:s}", "schema", "kda-golden/1", "inputs", "generated");
  if (how != NO_SUMS) json_object_set_new(gold, "generated_sha256", sums);
  else json_decref(sums);
  json_object_set_new(root, "golden", gold);
  json_t *gi = json_object_get(root, "generator_info");
  if (how == DESIGN) json_object_set_new(gi, "design", json_string("mixed_decay"));
  if (how == OTHER_SEED || how == OTHER_T) { /* one digit of the seed (or of T) changed */
    const char *key = how == OTHER_SEED ? "seed=" : "T=";
    char *canon = strdup(json_string_value(json_object_get(gi, "description")));
    char *at = strstr(canon, key) + strlen(key);
    *at = *at == '1' ? '2' : '1';
    json_object_set_new(gi, "description", json_string(canon));
    free(canon);
  }
  char *mtext = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
  kda_npz_writer *w;
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, mtext, err, sizeof err), KDA_OK);
  if (how == STORED_MEMBER) {
    const int64_t shape[1] = {c.p.HV};
    ck_assert_int_eq(kda_npz_writer_add_f64(w, "beta", KDA_DTYPE_F64, 1, shape, c.beta, err,
                                            sizeof err), KDA_OK);
  }
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  free(mtext);
  json_decref(root);
  kda_case_free(&c);
  kda_gen_desc_free(&d);
}

START_TEST(test_load_generated) {
  static const struct {
    int how;
    const char *msg;
  } bad[] = {
      {BAD_HASH, "generated member 'v' does not reproduce its recorded SHA-256"},
      {OTHER_SEED, "generated member 'q' does not reproduce its recorded SHA-256"},
      {STORED_MEMBER, "member 'beta' is stored but the inputs are generated"},
      {DESIGN, "generator_info names a design"},
      {NO_SUMS, "golden.generated_sha256 is missing"},
      {NO_HASH, "golden.generated_sha256 has no hash for member 'v'"},
  };
  char err[KDA_ERRLEN] = "";
  const char *path = kda_test_path("gen.npz");
  for (size_t i = 0; i < sizeof descs / sizeof descs[0]; i++) {
    kda_gen_desc d;
    kda_case want, got;
    parse_ok(descs[i], &d);
    ck_assert_int_eq(kda_gen_case(&d, &want, err, sizeof err), KDA_OK);
    write_generated(path, descs[i], OK_FILE);
    ck_assert_msg(kda_case_load(path, &got, err, sizeof err) == KDA_OK, "%s: %s", descs[i], err);
    kda_problem_sizes s;
    ck_assert_int_eq(kda_problem_sizes_get(&want.p, &s, err, sizeof err), KDA_OK);
    const double *a[8] = {want.q, want.k, want.v, want.g, want.beta, want.A_log, want.dt_bias,
                          want.h0};
    const double *b[8] = {got.q, got.k, got.v, got.g, got.beta, got.A_log, got.dt_bias, got.h0};
    const uint64_t n[8] = {s.q, s.k, s.v, s.g, s.beta, s.A_log, s.dt_bias, s.h0};
    for (int m = 0; m < 8; m++) {
      ck_assert((a[m] == NULL) == (b[m] == NULL));
      if (a[m]) ck_assert_msg(memcmp(a[m], b[m], n[m] * 8) == 0, "member %d (%s)", m, descs[i]);
    }
    ck_assert(memcmp(want.cu_seqlens, got.cu_seqlens, s.cu_seqlens * 8) == 0);
    int gen, smp;
    ck_assert_int_eq(kda_case_golden_form(&got, &gen, &smp), KDA_OK);
    ck_assert(gen == 1 && smp == 0);
    kda_case_free(&want);
    kda_case_free(&got);
    kda_gen_desc_free(&d);
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kda_case c;
    write_generated(path, descs[0], bad[i].how);
    ck_assert_int_eq(kda_case_load(path, &c, err, sizeof err), KDA_EFORMAT);
    ck_assert_msg(strstr(err, bad[i].msg) && strstr(err, path), "case %zu: '%s'", i, err);
    ck_assert_ptr_null(c.q);
  }
  kda_case c;
  write_generated(path, descs[0], OTHER_T);
  ck_assert_int_eq(kda_case_load(path, &c, err, sizeof err), KDA_EFORMAT);
  ck_assert_msg(strstr(err, "does not describe the manifest's problem"), "'%s'", err);
}
END_TEST

/* A file with only o_index and o (the index given, o with `rows` rows). */
static void write_sampled(const char *path, const int64_t *ix, int64_t n, int64_t rows) {
  char err[KDA_ERRLEN] = "";
  kda_npz_writer *w;
  double o[64 * 2] = {0};
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, "{}", err, sizeof err), KDA_OK);
  const int64_t s1[1] = {n}, s3[3] = {rows, 1, 2};
  ck_assert_int_eq(kda_npz_writer_add(w, "o_index", KDA_DTYPE_I64, 1, s1, ix, err, sizeof err),
                   KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "o", KDA_DTYPE_F64, 3, s3, o, err, sizeof err),
                   KDA_OK);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
}

START_TEST(test_sampled_index) {
  static const struct {
    int64_t ix[4];
    int64_t n, rows;
    const char *msg;
  } cases[] = {
      {{0, 3, 9, 15}, 4, 4, NULL},
      {{0, 3, 3, 15}, 4, 4, "not strictly increasing at [2]"},
      {{0, 5, 4, 15}, 4, 4, "not strictly increasing at [2]"},
      {{0, 3, 9, 16}, 4, 4, "'o_index'[3] = 16 is not a token in [0, 16)"},
      {{-1, 3, 9, 15}, 4, 4, "'o_index'[0] = -1 is not a token"},
      {{0, 3, 9, 15}, 4, 3, "member 'o' is not <f8 [P, HV, V] with P = 4"},
  };
  kda_problem p;
  kda_problem_init(&p, 16, 1, 1, 4, 2);
  char err[KDA_ERRLEN] = "";
  const char *path = kda_test_path("sampled.npz");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_sampled(path, cases[i].ix, cases[i].n, cases[i].rows);
    kda_npz *z;
    ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
    int64_t *ix = NULL, n = -1;
    double *o = NULL;
    const int st = kda_output_sampled_read(z, path, &p, &ix, &n, &o, err, sizeof err);
    if (!cases[i].msg) {
      ck_assert_msg(st == KDA_OK, "%s", err);
      ck_assert(n == 4 && ix[3] == 15 && o != NULL);
    } else {
      ck_assert_int_eq(st, KDA_EFORMAT);
      ck_assert_msg(strstr(err, cases[i].msg) && strstr(err, path), "case %zu: '%s'", i, err);
      ck_assert(ix == NULL && o == NULL && n == 0);
    }
    free(ix);
    free(o);
    kda_npz_close(z);
  }
}
END_TEST

static void tmp_setup(void) { kda_test_tmpdir_make("check-case-gen"); }
static void tmp_teardown(void) { kda_test_tmpdir_remove(); }

static Suite *case_gen_suite(void) {
  Suite *s = suite_create("case_gen");
  TCase *tc = tcase_create("generated");
  tcase_add_test(tc, test_hashes_match_saved);
  tcase_add_test(tc, test_load_generated);
  tcase_add_test(tc, test_sampled_index);
  tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return kda_test_main(case_gen_suite(), CK_NORMAL, CK_FORK_GETENV); }

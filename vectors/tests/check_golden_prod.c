/* check_golden_prod.c: production-size golden case files (kda_golden_prod.c; SPEC.md §8.12,
 * §10.2) on small problems of the same form, and `kda golden --expand`.
 * SPDX-License-Identifier: MIT
 *
 * A production entry is written with generated inputs and sampled truth, then read back the
 * way every reader reads it: kda_case_load regenerates the inputs and proves their hashes,
 * kda_golden_check_members proves the stored members, kda_output_sampled_read the index.
 * Every stored value (sampled o, ht, hc) must equal the MPFR reference's certified value bit
 * for bit (the double-double phase alone certified them); the sampled tokens come in whole
 * aligned 64-token windows, runs of three, starting at the wanted tokens or moved forward.
 * `kda golden --expand` writes the ordinary case file (the generated inputs), and refuses a
 * file whose inputs do not reproduce (exit 2, naming the file and member).
 */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_golden.h"
#include "kda_golden_internal.h"
#include "kda_mpfr.h"
#include "kda_npz.h"
#include "kda_test.h"

static const kda_catalog_entry entries[] = {
    {"p-mixed", KDA_LEVEL_L2, 0,
     "seed=31 T=1024 H=1 K=8 V=8 regime=mixed gate=log beta=logit l2=fla h0=1 "
     "checkpoints=255,1023 prec=bf16",
     NULL, "test", 1},
    {"p-gva-varlen", KDA_LEVEL_L2, 0,
     "seed=32 seqlens=300,0,500 H=2 HV=4 head_map=mod K=4 V=6 gate=softplus beta=logit l2=fla "
     "h0=1 layout=vk prec=f32",
     NULL, "test", 1},
    {"p-deltanet", KDA_LEVEL_L2, 0,
     "seed=33 T=640 H=1 K=8 V=4 family=deltanet regime=lowrank-slow beta=logit l2=fla prec=f16",
     NULL, "test", 1},
};

static json_t *golden_of(const kda_case *c) {
  json_t *root = json_loads(c->manifest_json, 0, NULL);
  ck_assert_ptr_nonnull(root);
  return root;
}

/* Stored o rows, ht, hc against the MPFR reference on the regenerated inputs. */
static void check_truth(const char *path, const kda_case *c) {
  char err[KDA_ERRLEN] = "";
  kda_problem_sizes s;
  ck_assert_int_eq(kda_problem_sizes_get(&c->p, &s, err, sizeof err), KDA_OK);
  double *want = kda_test_dalloc((size_t)(s.o + s.ht + s.hc + 1));
  kda_tensors_f64 t;
  kda_case_tensors(c, &t);
  t.o = want, t.ht = want + s.o, t.hc = want + s.o + s.ht;
  kda_mpfr_options mo;
  kda_mpfr_options_init(&mo);
  ck_assert_msg(kda_mpfr_forward(&c->p, &t, &mo, NULL, err, sizeof err) == KDA_OK, "%s", err);
  kda_npz *z;
  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  int64_t *ix = NULL, P = 0;
  double *o = NULL;
  ck_assert_msg(kda_output_sampled_read(z, path, &c->p, &ix, &P, &o, err, sizeof err) == KDA_OK,
                "%s", err);
  const int64_t row = c->p.HV * c->p.V;
  ck_assert(P > 0 && P % 192 == 0);
  for (int64_t r = 0; r < P; r += 192) { /* runs of 3 aligned windows */
    ck_assert(ix[r] % 64 == 0);
    for (int64_t k = 1; k < 192; k++) ck_assert(ix[r + k] == ix[r] + k);
  }
  for (int64_t k = 0; k < P; k++)
    ck_assert_msg(memcmp(o + k * row, want + ix[k] * row, (size_t)row * 8) == 0,
                  "%s: o at token %lld differs from MPFR's", path, (long long)ix[k]);
  double *states = kda_test_dalloc((size_t)(s.ht + s.hc + 1));
  ck_assert_int_eq(kda_output_members_read(z, path, &c->p, NULL, s.ht ? states : NULL,
                                           s.hc ? states + s.ht : NULL, err, sizeof err), KDA_OK);
  ck_assert_msg(memcmp(states, want + s.o, (size_t)(s.ht + s.hc) * 8) == 0, "%s: states", path);
  kda_npz_close(z);
  free(ix);
  free(o);
  free(states);
  free(want);
}

START_TEST(test_prod_files) {
  char err[KDA_ERRLEN] = "";
  const kda_catalog_entry *e = &entries[_i];
  const char *path = kda_test_path("prod.npz");
  kda_golden_info info;
  memset(&info, 0, sizeof info);
  ck_assert_msg(kda_golden_prod_make(e, path, &info, err, sizeof err) == KDA_OK, "%s: %s",
                e->id, err);
  ck_assert_int_eq(info.method, KDA_CERT_PROVEN);
  ck_assert_int_eq(kda_golden_check_members(path, err, sizeof err), KDA_OK);
  kda_case c, g;
  ck_assert_msg(kda_case_load(path, &c, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_int_eq(kda_catalog_build(e, &g, err, sizeof err), KDA_OK);
  kda_problem_sizes s;
  ck_assert_int_eq(kda_problem_sizes_get(&g.p, &s, err, sizeof err), KDA_OK);
  ck_assert(memcmp(c.q, g.q, s.q * 8) == 0 && memcmp(c.v, g.v, s.v * 8) == 0);
  int gen, smp;
  ck_assert_int_eq(kda_case_golden_form(&c, &gen, &smp), KDA_OK);
  ck_assert(gen && smp);
  json_t *root = golden_of(&c), *gold = json_object_get(root, "golden");
  json_t *cert = json_object_get(gold, "certification");
  ck_assert_str_eq(json_string_value(json_object_get(cert, "certifier")), "dd");
  ck_assert_str_eq(json_string_value(json_object_get(cert, "method")), "PROVEN");
  ck_assert(json_integer_value(json_object_get(cert, "values")) == info.n_values);
  json_t *runs = json_object_get(json_object_get(gold, "sampling"), "runs");
  ck_assert(json_array_size(runs) > 0);
  for (size_t r = 0; r < json_array_size(runs); r++) {
    json_t *w = json_array_get(runs, r);
    const json_int_t want = json_integer_value(json_array_get(w, 0));
    const json_int_t at = json_integer_value(json_array_get(w, 1));
    ck_assert(at == -1 || (at >= 0 && at % 64 == 0 && want % 64 == 0));
  }
  json_decref(root);
  check_truth(path, &c);
  kda_case_free(&c);
  kda_case_free(&g);
}
END_TEST

/* A prod file with one byte of a recorded input hash changed. */
static void corrupt_hash(const char *in, const char *out) {
  char err[KDA_ERRLEN] = "", *text = NULL;
  kda_npz *z;
  ck_assert_int_eq(kda_npz_open(in, &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_read_blob(z, "manifest.json", &text, NULL, err, sizeof err), KDA_OK);
  char *at = strstr(text, "\"k.npy\": \"");
  ck_assert_ptr_nonnull(at);
  at += strlen("\"k.npy\": \"");
  *at = *at == '0' ? '1' : '0';
  double *o = NULL;
  int64_t *ix = NULL, P = 0;
  kda_problem p;
  kda_problem_init(&p, 1024, 1, 1, 8, 8);
  ck_assert_int_eq(kda_output_sampled_read(z, in, &p, &ix, &P, &o, err, sizeof err), KDA_OK);
  kda_npz_writer *w;
  ck_assert_int_eq(kda_npz_writer_open(out, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, text, err, sizeof err), KDA_OK);
  const int64_t s1[1] = {P}, s3[3] = {P, 1, 8};
  ck_assert_int_eq(kda_npz_writer_add(w, "o_index", KDA_DTYPE_I64, 1, s1, ix, err, sizeof err),
                   KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add_f64(w, "o", KDA_DTYPE_F64, 3, s3, o, err, sizeof err),
                   KDA_OK);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  kda_npz_close(z);
  free(text);
  free(o);
  free(ix);
}

START_TEST(test_expand_cli) {
  char err[KDA_ERRLEN] = "";
  const char *path = kda_test_path("p.npz"), *out = kda_test_path("expanded.npz");
  const char *bad = kda_test_path("bad.npz");
  kda_golden_info info;
  ck_assert_msg(kda_golden_prod_make(&entries[0], path, &info, err, sizeof err) == KDA_OK, "%s",
                err);
  kda_test_result r = {0};
  kda_test_run(&r, "golden", "--expand", path, "-o", out, NULL);
  kda_test_expect_ok(&r, "kda golden --expand");
  kda_case a, b;
  ck_assert_msg(kda_case_load(out, &a, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_int_eq(kda_catalog_build(&entries[0], &b, err, sizeof err), KDA_OK);
  kda_problem_sizes s;
  ck_assert_int_eq(kda_problem_sizes_get(&b.p, &s, err, sizeof err), KDA_OK);
  ck_assert(memcmp(a.q, b.q, s.q * 8) == 0 && memcmp(a.g, b.g, s.g * 8) == 0 &&
            memcmp(a.h0, b.h0, s.h0 * 8) == 0);
  int gen, smp;
  ck_assert_int_eq(kda_case_golden_form(&a, &gen, &smp), KDA_OK);
  ck_assert(!gen && !smp); /* an ordinary case file */
  kda_case_free(&a);
  kda_case_free(&b);
  corrupt_hash(path, bad);
  kda_test_run(&r, "golden", "--expand", bad, "-o", out, NULL);
  kda_test_expect_error(&r, "expand of a file whose inputs do not reproduce", "kda golden: ",
                        bad, "generated member 'k' does not reproduce", NULL);
  kda_test_run(&r, "golden", "--expand", path, NULL);
  kda_test_expect_error(&r, "expand without -o", "kda golden: ", "missing -o", NULL);
  kda_test_run(&r, "golden", "--expand", path, "-o", path, NULL);
  kda_test_expect_error(&r, "expand onto its input", "kda golden: ", NULL);
  kda_test_result_free(&r);
}
END_TEST

/* The placement rule (SPEC.md §8.12): wanted runs, moves past undecided values, no overlap,
 * dropped at the end when covered, a failure when nothing decided is left. */
START_TEST(test_runs) {
  char err[KDA_ERRLEN] = "";
  const int64_t T = 4096, row = 2;
  unsigned char *dec = malloc((size_t)(T * row));
  int64_t want[KDA_GOLDEN_PROD_MAX_RUNS], at[KDA_GOLDEN_PROD_MAX_RUNS];
  memset(dec, 1, (size_t)(T * row));
  int64_t n = kda_golden_prod_runs(T, row, dec, want, at, err, sizeof err);
  static const int64_t all[] = {0, 256, 512, 1024, 2048, 3072, 3904};
  ck_assert_int_eq(n, 7);
  for (int64_t r = 0; r < n; r++) ck_assert(want[r] == all[r] && at[r] == all[r]);
  dec[(600 * row) + 1] = 0; /* token 600 (run at 512) and 1100 (run at 1024) undecided */
  dec[1100 * row] = 0;
  n = kda_golden_prod_runs(T, row, dec, want, at, err, sizeof err);
  ck_assert_int_eq(n, 7);
  ck_assert(want[2] == 512 && at[2] == 640);   /* first window after token 600 */
  ck_assert(want[3] == 1024 && at[3] == 1152); /* after 1100, and after the moved run's end */
  for (int64_t r = 1; r < n; r++) ck_assert(at[r] >= at[r - 1] + 192 && at[r] % 64 == 0);
  for (int64_t r = 0; r < n; r++)
    for (int64_t t = at[r]; t < at[r] + 192; t++) ck_assert(dec[t * row] && dec[t * row + 1]);
  memset(dec + 3000 * row, 0, (size_t)((T - 3000) * row)); /* nothing decided from 3000 on */
  n = kda_golden_prod_runs(T, row, dec, want, at, err, sizeof err);
  ck_assert_int_eq(n, 7);
  ck_assert(want[5] == 3072 && at[5] == 2752); /* back towards the run at 2048 (ends 2240) */
  ck_assert(want[6] == 3904 && at[6] == -1);   /* dropped: nowhere decided */
  memset(dec, 0, (size_t)(T * row));
  ck_assert_int_eq(kda_golden_prod_runs(T, row, dec, want, at, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "no fully decided run of 3 windows anywhere"), "%s", err);
  free(dec);
}
END_TEST

static void tmp_setup(void) { kda_test_tmpdir_make("check-golden-prod"); }
static void tmp_teardown(void) { kda_test_tmpdir_remove(); }

static Suite *prod_suite(void) {
  Suite *s = suite_create("golden_prod");
  TCase *tc = tcase_create("prod");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_prod_files, 0, (int)(sizeof entries / sizeof entries[0]));
  tcase_add_test(tc, test_expand_cli);
  tcase_add_test(tc, test_runs);
  tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return kda_test_main(prod_suite(), CK_NORMAL, CK_FORK_GETENV); }

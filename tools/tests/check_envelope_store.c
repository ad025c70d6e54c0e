/* check_envelope_store.c: the fp32 envelope a production golden file carries (SPEC.md §7.3,
 * §10.2 "Stored envelope"; the annex of tools/kda_golden_envelope.c) is the envelope the
 * runner computes from the file without it, bit for bit, on the whole-case and the streamed
 * path; the runner reads it instead of recomputing it (a changed value, its hash made to
 * match, changes the envelope), refuses it when its bytes do not match their recorded hash,
 * and recomputes it when it was stored under another rule.
 * SPDX-License-Identifier: MIT
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_golden.h"
#include "kda_golden_envelope.h"
#include "kda_golden_internal.h"
#include "kda_npz.h"
#include "kda_sha256.h"
#include "kda_test.h"

/* Small problems of the production form: generated inputs, sampled truth; a drifting one
 * (the ensemble runs), one with varlen, value heads, checkpoints and final states. */
static const kda_catalog_entry entries[] = {
    {"e-lowrank", KDA_LEVEL_L2, 0,
     "seed=41 T=1536 H=1 K=8 V=4 family=deltanet regime=lowrank beta=logit l2=fla "
     "checkpoints=767 prec=f32",
     NULL, "test", 1},
    {"e-varlen", KDA_LEVEL_L2, 0,
     "seed=42 seqlens=700,0,500 H=2 HV=4 head_map=mod K=4 V=6 gate=softplus beta=logit l2=fla "
     "h0=1 checkpoints=100,900 layout=vk prec=bf16",
     NULL, "test", 1},
};

static int same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

static void expect_same_env(const kda_envelope *a, const kda_envelope *b, const kda_problem *p,
                            const char *what) {
  ck_assert_msg(a->n_win == b->n_win && a->members == b->members, "%s: windows or members",
                what);
  for (int64_t w = 0; w < a->n_win; w++)
    ck_assert_msg(same(a->o[w], b->o[w]), "%s: window %lld: %.17g vs %.17g", what,
                  (long long)w, a->o[w], b->o[w]);
  for (int64_t n = 0; p->want_final_state && n < p->N; n++)
    ck_assert_msg(same(a->ht[n], b->ht[n]), "%s: ht %lld", what, (long long)n);
  for (int64_t k = 0; k < p->n_checkpoints; k++)
    ck_assert_msg(same(a->hc[k], b->hc[k]), "%s: hc %lld", what, (long long)k);
  ck_assert_msg(same(a->win_last, b->win_last), "%s: median last window %.17g vs %.17g", what,
                a->win_last, b->win_last);
}

/* The truth of path as kda conform opens it (stream: KDA_CASE_STREAM_*), kept open in f. */
static int truth_of(const char *path, int32_t stream, kda_case_file *f, char *err) {
  int st = kda_case_file_open(path, stream, 256, f, err, KDA_ERRLEN);
  if (st == KDA_OK) st = kda_case_file_truth(f, err, KDA_ERRLEN);
  return st;
}

/* path rewritten into out with every member as stored, except: envelope_o[0] set to v0
 * (v0 >= 0), its recorded hash made to match when fix_hash; the rule replaced by rule. */
static void rewrite(const char *path, const char *out, double v0, int fix_hash,
                    const char *rule) {
  char err[KDA_ERRLEN] = "", *text = NULL;
  kda_npz *z;
  ck_assert_int_eq(kda_npz_open(path, &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_read_blob(z, "manifest.json", &text, NULL, err, sizeof err), KDA_OK);
  kda_npz_writer *w;
  ck_assert_int_eq(kda_npz_writer_open(out, &w, err, sizeof err), KDA_OK);
  for (int64_t i = 0; i < kda_npz_count(z); i++) {
    const char *name = kda_npz_name(z, i);
    kda_array_info info;
    ck_assert_int_eq(kda_npz_info(z, name, &info, err, sizeof err), KDA_OK);
    void *data = malloc((size_t)info.count * 8 + 8);
    ck_assert_int_eq(kda_npz_read(z, name, info.dtype, data, info.count, err, sizeof err),
                     KDA_OK);
    if (strcmp(name, "envelope_o") == 0 && v0 >= 0) {
      ((double *)data)[0] = v0;
      if (fix_hash) { /* the member's new SHA-256 into the manifest */
        unsigned char hdr[512], d[KDA_SHA256_BYTES];
        info.nbytes = info.count * 8;
        const size_t hl = kda_npy_format_header(&info, hdr, sizeof hdr);
        kda_sha256 h;
        char hex[65], *at = strstr(text, "\"envelope_o.npy\": \"");
        kda_sha256_init(&h);
        kda_sha256_update(&h, hdr, hl);
        kda_sha256_update(&h, data, (size_t)info.nbytes);
        kda_sha256_final(&h, d);
        kda_sha256_hex(d, hex);
        ck_assert_ptr_nonnull(at);
        memcpy(at + strlen("\"envelope_o.npy\": \""), hex, 64);
      }
    }
    ck_assert_int_eq(kda_npz_writer_add(w, name, info.dtype, (int32_t)info.ndim, info.shape,
                                        data, err, sizeof err),
                     KDA_OK);
    free(data);
  }
  char *at = rule ? strstr(text, KDA_ENVELOPE_RULE) : NULL;
  if (rule) {
    ck_assert_ptr_nonnull(at);
    ck_assert_uint_eq(strlen(rule), strlen(KDA_ENVELOPE_RULE));
    memcpy(at, rule, strlen(rule));
  }
  ck_assert_int_eq(kda_npz_writer_set_manifest(w, text, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  kda_npz_close(z);
  free(text);
}

START_TEST(test_stored_is_computed) {
  char err[KDA_ERRLEN] = "";
  const kda_catalog_entry *e = &entries[_i];
  const char *bare = kda_test_path("bare.npz"), *with = kda_test_path("with.npz");
  kda_golden_info info;
  kda_golden_set_annex(NULL);
  ck_assert_msg(kda_golden_prod_make(e, bare, &info, err, sizeof err) == KDA_OK, "%s", err);
  kda_golden_set_annex(kda_tool_envelope_annex);
  ck_assert_msg(kda_golden_prod_make(e, with, &info, err, sizeof err) == KDA_OK, "%s", err);
  kda_golden_set_annex(NULL);
  ck_assert_msg(kda_golden_check_members(with, err, sizeof err) == KDA_OK, "%s", err);
  static const int32_t modes[2] = {KDA_CASE_STREAM_NEVER, KDA_CASE_STREAM_ALWAYS};
  for (int m = 0; m < 2; m++) {
    kda_case_file a, b;
    ck_assert_msg(truth_of(bare, modes[m], &a, err) == KDA_OK, "%s", err);
    ck_assert_msg(truth_of(with, modes[m], &b, err) == KDA_OK, "%s", err);
    ck_assert(kda_npz_has(b.z, "envelope_o") && !kda_npz_has(a.z, "envelope_o"));
    ck_assert_int_ge(a.t.env.members, 1);
    expect_same_env(&a.t.env, &b.t.env, &a.c.p, m ? "streamed" : "whole");
    kda_case_file_close(&a);
    kda_case_file_close(&b);
  }
}
END_TEST

START_TEST(test_stored_is_read_and_checked) {
  char err[KDA_ERRLEN] = "";
  const char *with = kda_test_path("with.npz"), *bad = kda_test_path("bad.npz");
  kda_golden_info info;
  kda_golden_set_annex(kda_tool_envelope_annex);
  ck_assert_msg(kda_golden_prod_make(&entries[0], with, &info, err, sizeof err) == KDA_OK, "%s",
                err);
  kda_golden_set_annex(NULL);
  static const int32_t modes[2] = {KDA_CASE_STREAM_NEVER, KDA_CASE_STREAM_ALWAYS};
  for (int m = 0; m < 2; m++) {
    kda_case_file f;
    /* read, not recomputed: a value changed with its hash shows in the envelope */
    rewrite(with, bad, 1e6, 1, NULL);
    ck_assert_msg(truth_of(bad, modes[m], &f, err) == KDA_OK, "%s", err);
    ck_assert_msg(f.t.env.o[0] == 1e6, "stored envelope not read (%g)", f.t.env.o[0]);
    kda_case_file_close(&f);
    /* another rule: recomputed */
    rewrite(with, bad, 1e6, 1, "kda-envelope/0");
    ck_assert_msg(truth_of(bad, modes[m], &f, err) == KDA_OK, "%s", err);
    ck_assert_msg(f.t.env.o[0] < 1e6, "an envelope of another rule was read");
    kda_case_file_close(&f);
    /* a value that does not match its recorded hash: the file's error, not a verdict */
    rewrite(with, bad, 1e6, 0, NULL);
    ck_assert_int_eq(truth_of(bad, modes[m], &f, err), KDA_EFORMAT);
    ck_assert_msg(strstr(err, "envelope_o") != NULL, "%s", err);
    kda_case_file_close(&f);
  }
  /* the command: kda conform reports the file, exit 2 */
  kda_test_result r = {0};
  kda_test_run(&r, "conform", "-b", "ref-f32", bad, NULL);
  kda_test_expect_error(&r, "a stored envelope that fails its hash", "kda conform: ", bad,
                        "envelope_o", NULL);
  kda_test_result_free(&r);
}
END_TEST

static void tmp_setup(void) { kda_test_tmpdir_make("check-envelope-store"); }
static void tmp_teardown(void) { kda_test_tmpdir_remove(); }

static Suite *suite(void) {
  Suite *s = suite_create("envelope_store");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 600);
  tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
  tcase_add_loop_test(tc, test_stored_is_computed, 0, (int)(sizeof entries / sizeof *entries));
  tcase_add_test(tc, test_stored_is_read_and_checked);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return kda_test_main(suite(), CK_NORMAL, CK_FORK_GETENV); }

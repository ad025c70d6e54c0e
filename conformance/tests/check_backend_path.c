/* check_backend_path.c: unit tests of the one backend path (SPEC.md §7.8): backend specs,
 * KDA_PLUGIN_PATH, per-backend parameters rejected by every built-in, the mpfr backend, the
 * default set, describe, and the case filter of `kda conform -k`.
 * SPDX-License-Identifier: MIT
 */
#include <check.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/mpfr/kda_backend_mpfr.h"
#include "kda_case.h"
#include "kda_conform.h"
#include "kda_score_internal.h"
#include "kda_worker_internal.h"
#include "kda_test.h"

static char plugin_dir[4096]; /* build/conformance/tests: this program's directory */

static int find_plugin_dir(void) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = 0;
  snprintf(plugin_dir, sizeof plugin_dir, "%s", dirname(exe));
  return 0;
}

static int resolve(const char *spec, kda_backend_ref *r, char *err) {
  return kda_backend_resolve(spec, r, err, KDA_ERRLEN);
}

START_TEST(test_resolve_builtin) {
  kda_backend_ref r;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(resolve("ref-f64", &r, err), KDA_OK);
  ck_assert_ptr_eq(r.builtin, kda_backend_find("ref-f64"));
  ck_assert_str_eq(r.params, "");
  ck_assert_str_eq(r.path, "");
  ck_assert_str_eq(r.spec, "ref-f64");
  /* Parameters split at the first ':'; later ':' belong to them. */
  ck_assert_int_eq(resolve("simd:isa=avx2 threads=1:x", &r, err), KDA_OK);
  ck_assert_ptr_eq(r.builtin, kda_backend_find("simd"));
  ck_assert_str_eq(r.params, "isa=avx2 threads=1:x");
  ck_assert_int_eq(resolve("simd:", &r, err), KDA_OK);
  ck_assert_str_eq(r.params, "");
  ck_assert_int_eq(resolve("mpfr:prec=200", &r, err), KDA_OK);
  ck_assert_ptr_eq(r.builtin, kda_backend_find("mpfr"));
  ck_assert_int_eq(resolve("", &r, err), KDA_EINVAL);
  ck_assert_int_eq(resolve(":x=1", &r, err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "no backend name"));
}
END_TEST

START_TEST(test_resolve_path) {
  kda_backend_ref r;
  char err[KDA_ERRLEN], spec[4200];
  snprintf(spec, sizeof spec, "%s/kda_plugin_mutants.so:mutant=drop_h0", plugin_dir);
  ck_assert_int_eq(resolve(spec, &r, err), KDA_OK);
  ck_assert_ptr_null(r.builtin);
  ck_assert_str_eq(r.params, "mutant=drop_h0");
  ck_assert(strstr(r.path, "/kda_plugin_mutants.so") && !strchr(r.path, ':'));
  /* A path that is not there is reported at once, naming it. */
  ck_assert_int_eq(resolve("/nonexistent/libx.so:device=0", &r, err), KDA_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(err, "/nonexistent/libx.so"));
  /* "x.so" is ./x.so, never a library on the system's search path. */
  ck_assert_int_eq(resolve("libc.so", &r, err), KDA_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(err, "./libc.so"));
}
END_TEST

START_TEST(test_resolve_search_path) {
  kda_backend_ref r;
  char err[KDA_ERRLEN], sp[8300];
  snprintf(sp, sizeof sp, "/nonexistent::%s", plugin_dir);
  setenv("KDA_PLUGIN_PATH", sp, 1);
  /* kda_plugin_mutants.so is NAME.so for NAME = kda_plugin_mutants ... */
  ck_assert_int_eq(resolve("kda_plugin_mutants:mutant=none", &r, err), KDA_OK);
  ck_assert_ptr_null(r.builtin);
  ck_assert_str_eq(r.params, "mutant=none");
  char want[4200];
  snprintf(want, sizeof want, "%s/kda_plugin_mutants.so", plugin_dir);
  ck_assert_str_eq(r.path, want);
  /* ... and libkda_NAME.so for NAME = plugin_mutants (the first form). */
  ck_assert_int_eq(resolve("plugin_mutants", &r, err), KDA_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(err, "KDA_PLUGIN_PATH"));
  /* A miss names the name; a built-in wins over the search path. */
  ck_assert_int_eq(resolve("no-such-backend", &r, err), KDA_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(err, "'no-such-backend'"));
  ck_assert_int_eq(resolve("ref-f32", &r, err), KDA_OK);
  ck_assert_ptr_nonnull(r.builtin);
  /* A searched name cannot step out of the directories. */
  ck_assert_int_eq(resolve("..", &r, err), KDA_ENOTFOUND);
  ck_assert_int_eq(resolve("a b", &r, err), KDA_EINVAL);
  unsetenv("KDA_PLUGIN_PATH");
  ck_assert_int_eq(resolve("kda_plugin_mutants", &r, err), KDA_ENOTFOUND);
}
END_TEST

/* kda_backend_ref_of: the reference a built-in table is run through (kda_conform_case,
 * kda_call_forward), the same as resolving the built-in's spec. */
START_TEST(test_ref_of_builtin) {
  const kda_backend *b = kda_backend_find("simd");
  ck_assert_ptr_nonnull(b);
  kda_backend_ref r, want;
  char err[KDA_ERRLEN];
  memset(&r, 0x5a, sizeof r);
  kda_backend_ref_of(b, "threads=2", &r);
  ck_assert_int_eq(resolve("simd:threads=2", &want, err), KDA_OK);
  ck_assert_ptr_eq(r.builtin, want.builtin);
  ck_assert_str_eq(r.params, want.params);
  ck_assert_str_eq(r.path, "");
  ck_assert_str_eq(r.spec, "simd");
  kda_backend_ref_of(b, NULL, &r);
  ck_assert_str_eq(r.params, "");
}
END_TEST

START_TEST(test_resolve_too_long) {
  kda_backend_ref r;
  char err[KDA_ERRLEN];
  char *spec = malloc(sizeof r.spec + 1);
  ck_assert_ptr_nonnull(spec);
  memset(spec, 'a', sizeof r.spec);
  spec[sizeof r.spec] = 0;
  ck_assert_int_eq(resolve(spec, &r, err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "too long"));
  spec[sizeof r.spec - 1] = 0; /* the longest accepted: an unknown name */
  ck_assert_int_eq(resolve(spec, &r, err), KDA_ENOTFOUND);
  memcpy(spec, "simd:", 5); /* long parameters are the backend's to judge */
  ck_assert_int_eq(resolve(spec, &r, err), KDA_OK);
  ck_assert_uint_eq(strlen(r.params), sizeof r.spec - 1 - 5);
  free(spec);
}
END_TEST

/* Every built-in rejects a parameter it does not know, with KDA_EINVAL naming it. */
START_TEST(test_builtins_reject_unknown_params) {
  for (int32_t i = 0; i < kda_backend_builtin_count(); i++) {
    const kda_backend *b = kda_backend_builtin(i);
    void *h = NULL;
    char err[KDA_ERRLEN] = "";
    ck_assert_msg(b->open("bogus=1", &h, err, sizeof err) == KDA_EINVAL, "%s took bogus=1",
                  b->name);
    ck_assert_msg(strstr(err, "unknown parameter 'bogus'") != NULL, "%s: %s", b->name, err);
    ck_assert_msg(b->open("", &h, err, sizeof err) == KDA_OK, "%s: %s", b->name, err);
    b->close(h);
  }
  const kda_backend *simd = kda_backend_find("simd");
  void *h = NULL;
  char err[KDA_ERRLEN] = "";
  ck_assert_int_eq(simd->open("threads=1 group=9", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "bad parameter 'group=9'"));
  const kda_backend *m = kda_backend_find("mpfr");
  ck_assert_int_eq(m->open("prec=20", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(m->open("prec", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(m->open("prec=300 prec_max=200", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(m->open("prec=64,prec_max=512 proof=1", &h, err, sizeof err), KDA_OK);
  m->close(h);
}
END_TEST

START_TEST(test_mutant_plugin_rejects_unknown_params) {
  char path[4200], err[KDA_ERRLEN] = "";
  snprintf(path, sizeof path, "%s/kda_plugin_mutants.so", plugin_dir);
  kda_plugin *p;
  const kda_backend *b;
  ck_assert_msg(kda_plugin_load(path, &p, &b, err, sizeof err) == KDA_OK, "%s", err);
  void *h = NULL;
  ck_assert_int_eq(b->open("bogus=1", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "unknown parameter 'bogus=1'"));
  ck_assert_int_eq(b->open("mutant=drop_h0 bogus", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(b->open("mutant=nope", &h, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(b->open("mutant=drop_h0", &h, err, sizeof err), KDA_OK);
  b->close(h);
  ck_assert_int_eq(b->open("", &h, err, sizeof err), KDA_OK);
  b->close(h);
  kda_plugin_unload(p);
}
END_TEST

/* The default set is every built-in but mpfr; describe says what simd picked. */
START_TEST(test_default_set_and_describe) {
  int saw_mpfr = 0, n_default = 0;
  for (int32_t i = 0; i < kda_backend_builtin_count(); i++) {
    const char *name = kda_backend_builtin(i)->name;
    int d = kda_backend_builtin_is_default(i);
    if (strcmp(name, "mpfr") == 0) {
      saw_mpfr = 1;
      ck_assert_int_eq(d, 0);
    }
    n_default += d;
  }
  ck_assert(saw_mpfr);
  ck_assert_int_eq(n_default, kda_backend_builtin_count() - 1);
  ck_assert_int_eq(kda_backend_builtin_is_default(-1), 0);
  const kda_backend *simd = kda_backend_find("simd");
  ck_assert(KDA_BACKEND_HAS(simd, describe) && simd->describe);
  void *h = NULL;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(simd->open("isa=scalar threads=3", &h, err, sizeof err), KDA_OK);
  kda_backend_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ck_assert_int_eq(simd->describe(h, &info), KDA_OK);
  ck_assert_str_eq(info.isa, "scalar");
  ck_assert_int_eq(info.threads, 3);
  simd->close(h);
}
END_TEST

/* mpfr through the table: on a generated case it equals the certified truth bit for bit. */
START_TEST(test_mpfr_backend) {
  char err[KDA_ERRLEN];
  kda_gen_desc d;
  kda_case c;
  ck_assert_int_eq(kda_gen_parse("seed=2 T=5 H=1 HV=2 K=4 V=3 prec=bf16 h0=1 id=m", &d, err,
                                 sizeof err), KDA_OK);
  ck_assert_msg(kda_gen_case(&d, &c, err, sizeof err) == KDA_OK, "%s", err);
  kda_gen_desc_free(&d);
  kda_truth t;
  ck_assert_msg(kda_truth_compute(&c, NULL, &t, err, sizeof err) == KDA_OK, "%s", err);
  kda_conform_opts o;
  kda_conform_opts_init(&o);
  kda_case_report r;
  ck_assert_msg(kda_conform_case(kda_backend_find("mpfr"), "prec=100", &c, &t, &o, &r, err,
                                 sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(r.verdict == KDA_VERDICT_PASS, "mpfr: %s", r.reason);
  ck_assert_int_eq(r.score.cls, KDA_CLASS_FP64);
  kda_case_report_free(&r);
  kda_truth_free(&t);
  kda_case_free(&c);
}
END_TEST

START_TEST(test_case_filter) {
  static const char *m =
      "{\"id\":\"t17-gdn\",\"golden\":{\"flags\":[\"SEQLEN_EDGE\",\"FAMILY_GDN\"]}}";
  const char *p1[] = {"t17-*"};
  ck_assert_int_eq(kda_case_filter_match(p1, 1, "t17-gdn", m), 1);
  ck_assert_int_eq(kda_case_filter_match(p1, 1, "t1-softplus", m), 0);
  const char *p2[] = {"flag:FAMILY_GDN"};
  ck_assert_int_eq(kda_case_filter_match(p2, 1, "x", m), 1);
  ck_assert_int_eq(kda_case_filter_match(p2, 1, "x", "{\"golden\":{\"flags\":[]}}"), 0);
  ck_assert_int_eq(kda_case_filter_match(p2, 1, "x", NULL), 0);
  ck_assert_int_eq(kda_case_filter_match(p2, 1, "x", "not json"), 0);
  const char *p3[] = {"flag:FAMILY_*", "!t17-*"};
  ck_assert_int_eq(kda_case_filter_match(p3, 2, "t17-gdn", m), 0);
  ck_assert_int_eq(kda_case_filter_match(p3, 2, "t18-gdn", m), 1);
  const char *p4[] = {"!flag:SEQLEN_EDGE"}; /* only negative: everything else is selected */
  ck_assert_int_eq(kda_case_filter_match(p4, 1, "t17-gdn", m), 0);
  ck_assert_int_eq(kda_case_filter_match(p4, 1, "other", "{}"), 1);
  ck_assert_int_eq(kda_case_filter_match(NULL, 0, "any", NULL), 1);
  const char *p5[] = {"nope", "t17-gdn"}; /* positives: any one is enough */
  ck_assert_int_eq(kda_case_filter_match(p5, 2, "t17-gdn", m), 1);
  char buf[64];
  ck_assert_str_eq(kda_case_flags(m, buf, sizeof buf), "SEQLEN_EDGE,FAMILY_GDN");
  ck_assert_str_eq(kda_case_flags(NULL, buf, sizeof buf), "");
  ck_assert_str_eq(kda_case_flags(m, buf, 8), "SEQLEN_");
}
END_TEST

static Suite *backend_path_suite(void) {
  Suite *s = suite_create("backend path");
  TCase *tc = tcase_create("resolve");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_resolve_builtin);
  tcase_add_test(tc, test_resolve_path);
  tcase_add_test(tc, test_resolve_search_path);
  tcase_add_test(tc, test_resolve_too_long);
  tcase_add_test(tc, test_ref_of_builtin);
  tcase_add_test(tc, test_builtins_reject_unknown_params);
  tcase_add_test(tc, test_mutant_plugin_rejects_unknown_params);
  tcase_add_test(tc, test_default_set_and_describe);
  tcase_add_test(tc, test_mpfr_backend);
  tcase_add_test(tc, test_case_filter);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  kda_backend_builtin_add(&kda_backend_mpfr, 0); /* as the kda command does (libkda-oracle) */
  if (find_plugin_dir() != 0) return fprintf(stderr, "cannot read /proc/self/exe\n"), EXIT_FAILURE;
  return kda_test_main(backend_path_suite(), CK_NORMAL, CK_FORK_GETENV);
}

/* check_ci.c: unit tests of what a CI job gates on (conformance/kda_ci.c, SPEC.md §7.6, §7.9,
 * §12.2): waiver and baseline validation, the run status, and the numeric fields of the JSON
 * reports.
 * SPDX-License-Identifier: MIT
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_conform.h"
#include "kda_score_internal.h"
#include "kda_worker_internal.h"
#include "kda_test.h"

/* Writes text into a fresh temporary file; the path goes into path[32]. */
static void temp_file(char path[32], const char *text) {
  snprintf(path, 32, "/tmp/kda_ci_XXXXXX");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
}

static const struct {
  const char *json, *phrase;
} bad_waivers[] = {
    {"{\"waivers\":[{}]}", "waiver 0 has no \"reason\""},
    {"{\"waivers\":[{\"reason\":\"r\"}]}", "waiver 0 selects nothing"},
    {"{\"waivers\":[{\"case\":\"a\",\"reason\":\"r\"},{\"case\":\"*\",\"resaon\":\"r\"}]}",
     "waiver 1: unknown key 'resaon'"},
    {"{\"waivers\":[{\"case\":\"*\",\"reason\":\"\"}]}", "waiver 0: 'reason' must be a non-empty"},
    {"{\"waivers\":[{\"case\":\"*\",\"reason\":\"r\",\"link\":7}]}", "waiver 0: 'link' must be"},
    {"{\"waivers\":[{\"case\":\"*\",\"reason\":\"r\\u0000x\"}]}", "NUL"},
    {"{\"waivers\":[{\"case\":\"*\",\"case\":\"x\",\"reason\":\"r\"}]}", "duplicate"},
    {"{\"waivers\":[7]}", "waiver 0 is not an object"},
    {"{\"waivers\":{}}", "no \"waivers\" array"},
    {"{\"waiver\":[]}", "unknown top-level key 'waiver'"},
    {"{\"schema\":\"kda-waivers/9\",\"waivers\":[]}", "schema"},
    {"[]", "top level is not an object"},
    {"{\"waivers\":[", ""},
};

START_TEST(test_waivers_rejected) {
  char path[32], err[KDA_ERRLEN];
  temp_file(path, bad_waivers[_i].json);
  kda_waivers *w = (kda_waivers *)1;
  int st = kda_waivers_load(path, &w, err, sizeof err);
  unlink(path);
  ck_assert_msg(st == KDA_EFORMAT, "%s: status %d", bad_waivers[_i].json, st);
  ck_assert_ptr_null(w);
  ck_assert_msg(strstr(err, path) && strstr(err, bad_waivers[_i].phrase), "%s: '%s'",
                bad_waivers[_i].json, err);
}
END_TEST

static kda_case_report *report(kda_case_report *r, const char *id, const char *backend,
                               int32_t verdict) {
  memset(r, 0, sizeof *r);
  snprintf(r->case_id, sizeof r->case_id, "%s", id);
  snprintf(r->backend, sizeof r->backend, "%s", backend);
  r->verdict = verdict;
  return r;
}

START_TEST(test_waivers_match_and_unused) {
  char path[32], err[KDA_ERRLEN];
  temp_file(path, "{\"schema\":\"kda-waivers/1\",\"waivers\":["
                  "{\"case\":\"lb-*\",\"backend\":\"mut\",\"reason\":\"known\",\"link\":\"L\"},"
                  "{\"case\":\"gone\",\"reason\":\"fixed\"}]}");
  kda_waivers *w;
  ck_assert_int_eq(kda_waivers_load(path, &w, err, sizeof err), KDA_OK);
  unlink(path);
  ck_assert_int_eq(kda_waivers_count(w), 2);
  ck_assert_int_eq(kda_waivers_find(w, "lb-vk", "mut", NULL), 0);
  ck_assert_int_eq(kda_waivers_find(w, "lb-vk", "other", NULL), -1);
  ck_assert_int_eq(kda_waivers_find(w, "gone", "any", NULL), 1);
  ck_assert_str_eq(kda_waivers_reason(w, 0), "known");
  ck_assert_str_eq(kda_waivers_link(w, 0), "L");
  ck_assert_ptr_null(kda_waivers_link(w, 1));
  kda_case_report rs[2];
  report(&rs[0], "lb-vk", "mut", KDA_VERDICT_WAIVED)->waiver_no = 1;
  report(&rs[1], "gone", "x", KDA_VERDICT_PASS); /* matched, but waived nothing */
  uint8_t unused[2];
  ck_assert_int_eq(kda_waivers_unused(w, rs, 2, unused), 1);
  ck_assert(!unused[0] && unused[1]);
  ck_assert_int_eq(kda_waivers_unused(w, rs, 0, NULL), 2);
  kda_waivers_free(w);
}
END_TEST

/* Counts in, status out: failures first, then nothing ran, then what --strict adds. */
START_TEST(test_run_status) {
  static const struct {
    int64_t by[7], unused;
    int32_t strict, want;
  } rows[] = {
      {{0}, 0, 0, KDA_RUN_NOTHING},                   /* no case at all */
      {{0, 0, 0, 3}, 0, 0, KDA_RUN_NOTHING},          /* every report NotSupported */
      {{0, 0, 0, 3}, 2, 1, KDA_RUN_NOTHING},
      {{1, 0, 0, 3}, 0, 0, KDA_RUN_OK},
      {{0, 0, 0, 0, 1}, 0, 0, KDA_RUN_OK},            /* a waived case ran */
      {{0, 0, 0, 0, 1}, 0, 1, KDA_RUN_FAILED},
      {{1, 0, 1}, 0, 0, KDA_RUN_OK},                  /* QualityWarning */
      {{1, 0, 1}, 0, 1, KDA_RUN_FAILED},
      {{1}, 1, 0, KDA_RUN_OK},                        /* an unused waiver */
      {{1}, 1, 1, KDA_RUN_FAILED},
      {{1}, 0, 1, KDA_RUN_OK},
      {{0, 1}, 0, 0, KDA_RUN_FAILED},
      {{0, 0, 0, 0, 0, 1}, 0, 0, KDA_RUN_FAILED},     /* Crash */
      {{0, 0, 0, 0, 0, 0, 1}, 0, 0, KDA_RUN_FAILED},  /* Timeout */
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    kda_tally t;
    memset(&t, 0, sizeof t);
    for (int32_t v = 0; v < 7; v++)
      for (int64_t k = 0; k < rows[i].by[v]; k++) {
        kda_case_report r;
        kda_tally_add(&t, report(&r, "c", "b", v));
      }
    ck_assert_msg(kda_run_status(&t, rows[i].unused, rows[i].strict) == rows[i].want, "row %zu",
                  i);
  }
}
END_TEST

static const struct {
  const char *json, *phrase;
} bad_baselines[] = {
    {"{\"cases\":{}}", "no \"schema\""},
    {"{\"schema\":\"kda-baseline/3\",\"cases\":{}}", "unknown schema"},
    {"{\"schema\":\"kda-baseline/1\",\"class\":\"fp32\",\"cases\":{}}", "no \"backend\""},
    {"{\"schema\":\"kda-baseline/1\",\"backend\":\"b\",\"class\":\"fp33\",\"cases\":{}}", "class"},
    {"{\"schema\":\"kda-baseline/1\",\"backend\":\"b\",\"class\":\"fp32\"}", "no \"cases\""},
    {"{\"schema\":\"kda-baseline/1\",\"backend\":\"b\",\"class\":\"fp32\",\"cases\":{\"c\":{\"o\":"
     "\"nan\"}}}", "'o' is not a number"},
    {"{\"schema\":\"kda-baseline/1\",\"backend\":\"b\",\"class\":\"fp32\",\"cases\":{\"c\":{\"oo\":"
     "1}}}", "unknown key 'oo'"},
    {"{\"schema\":\"kda-baseline/1\",\"backend\":\"b\",\"class\":\"fp32\",\"cases\":{},\"x\":1}",
     "unknown key 'x'"},
    {"{\"schema\":\"kda-baseline/2\",\"backends\":{\"b\":{\"cases\":{}}}}", "class"},
    {"{\"schema\":\"kda-baseline/2\",\"backends\":[]}", "no \"backends\""},
};

/* A baseline within its size cap whose values would cost a parser a hundred times its text
 * (2^20 + 1 empty objects in 3 MiB): refused before it is parsed (SPEC.md §7.9). */
START_TEST(test_ci_values_bounded) {
  const size_t n = ((size_t)1 << 20) + 1, len = 3 * n + 64;
  char *text = malloc(len), path[32], err[KDA_ERRLEN];
  ck_assert_ptr_nonnull(text);
  char *p = text + sprintf(text, "{\"schema\":\"kda-baseline/1\",\"pad\":[");
  for (size_t k = 0; k < n; k++) memcpy(p, "{},", 3), p += 3;
  strcpy(p - 1, "]}");
  temp_file(path, text);
  kda_baseline *b = (kda_baseline *)1;
  int st = kda_baseline_load(path, &b, err, sizeof err);
  ck_assert_msg(st == KDA_EFORMAT && strstr(err, path) && strstr(err, "JSON values"), "'%s'", err);
  unlink(path);
  free(text);
}
END_TEST

START_TEST(test_baselines_rejected) {
  char path[32], err[KDA_ERRLEN];
  temp_file(path, bad_baselines[_i].json);
  kda_baseline *b = (kda_baseline *)1;
  int st = kda_baseline_load(path, &b, err, sizeof err);
  unlink(path);
  ck_assert_msg(st == KDA_EFORMAT, "%s: status %d", bad_baselines[_i].json, st);
  ck_assert_ptr_null(b);
  ck_assert_msg(strstr(err, path) && strstr(err, bad_baselines[_i].phrase), "%s: '%s'",
                bad_baselines[_i].json, err);
}
END_TEST

START_TEST(test_baseline_backend_and_class) {
  char path[32], err[KDA_ERRLEN];
  double o, ht, hc;
  temp_file(path, "{\"schema\":\"kda-baseline/1\",\"backend\":\"a\",\"class\":\"fp32\","
                  "\"cases\":{\"c\":{\"o\":3,\"ht\":null}}}");
  kda_baseline *b;
  ck_assert_int_eq(kda_baseline_load(path, &b, err, sizeof err), KDA_OK);
  unlink(path);
  ck_assert_int_eq(kda_baseline_check(b, "a", KDA_CLASS_FP32, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_baseline_check(b, "z", KDA_CLASS_FP32, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "'a', not 'z'"));
  ck_assert_int_eq(kda_baseline_check(b, "a", KDA_CLASS_BF16, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(kda_baseline_get(b, "a", "c", &o, &ht, &hc), 1);
  ck_assert(o == 3 && isnan(ht) && isnan(hc));
  ck_assert_int_eq(kda_baseline_get(b, "z", "c", &o, &ht, &hc), 0);
  ck_assert_int_eq(kda_baseline_get(b, "a", "d", &o, &ht, &hc), 0);
  kda_baseline_free(b);
  temp_file(path, "{\"schema\":\"kda-baseline/2\",\"backends\":{\"a\":{\"class\":\"fp32\","
                  "\"cases\":{\"c\":{\"o\":1}}},\"b\":{\"class\":\"bf16\","
                  "\"cases\":{\"c\":{\"o\":2}}}}}");
  ck_assert_int_eq(kda_baseline_load(path, &b, err, sizeof err), KDA_OK);
  unlink(path);
  ck_assert_int_eq(kda_baseline_check(b, "a", KDA_CLASS_FP32, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_baseline_check(b, "b", KDA_CLASS_BF16, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_baseline_check(b, "b", KDA_CLASS_FP32, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(kda_baseline_check(b, "z", KDA_CLASS_FP32, err, sizeof err), KDA_ENOTFOUND);
  ck_assert_int_eq(kda_baseline_get(b, "b", "c", &o, &ht, &hc), 1);
  ck_assert(o == 2);
  kda_baseline_free(b);
}
END_TEST

/* Reports of two backends, with non-finite metrics. */
static void sample_reports(kda_case_report rs[3]) {
  report(&rs[0], "c1", "a", KDA_VERDICT_FAIL);
  rs[0].has_score = 1;
  rs[0].score.cls = KDA_CLASS_FP32;
  rs[0].score.o = (kda_qmetric){.count = 4, .worst = NAN, .max_abs = INFINITY, .rms_ratio = NAN};
  rs[0].score.alpha = NAN;
  rs[0].score.alpha_fit = -INFINITY;
  rs[0].seconds = NAN;
  snprintf(rs[0].reason, sizeof rs[0].reason, "o error nan");
  report(&rs[1], "c1", "b", KDA_VERDICT_QUALITY_WARNING);
  rs[1].has_score = 1;
  rs[1].score.cls = KDA_CLASS_BF16;
  rs[1].score.o = (kda_qmetric){.count = 4, .worst = 2.5};
  rs[1].baseline_state = KDA_BASELINE_ABSENT;
  snprintf(rs[1].reason, sizeof rs[1].reason, "regression: o error 2.5 > 2 x baseline 1");
  report(&rs[2], "c2", "b", KDA_VERDICT_WAIVED);
  rs[2].waiver_no = 1;
  snprintf(rs[2].waiver, sizeof rs[2].waiver, "known <bug>");
  snprintf(rs[2].waiver_link, sizeof rs[2].waiver_link, "https://example.org/1");
}

/* Fails when a string stands where a number belongs (SPEC.md §7.9: null, never "nan"). */
static void no_strings_for_numbers(json_t *x, const char *key) {
  static const char *const numeric[] = {"worst", "allowed", "max_abs", "rms_ratio", "seconds",
                                        "alpha", "alpha_fit", "first", "last", "o", "ht", "hc",
                                        "exit_status", "cases", "count", NULL};
  const char *k;
  json_t *v;
  size_t i;
  if (json_is_object(x)) json_object_foreach(x, k, v) no_strings_for_numbers(v, k);
  else if (json_is_array(x)) json_array_foreach(x, i, v) no_strings_for_numbers(v, key);
  else if (json_is_string(x) && key)
    for (int n = 0; numeric[n]; n++)
      ck_assert_msg(strcmp(key, numeric[n]) != 0, "\"%s\": \"%s\"", key, json_string_value(x));
}

static json_t *parse(char *buf) {
  json_error_t je;
  json_t *j = json_loads(buf, 0, &je);
  ck_assert_msg(j != NULL, "not JSON: %s: %s", je.text, buf);
  free(buf);
  return j;
}

START_TEST(test_json_numbers_and_summary) {
  kda_case_report rs[3];
  sample_reports(rs);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_int_eq(kda_report_jsonl(f, &rs[0]), KDA_OK);
  fclose(f);
  json_t *j = parse(buf);
  no_strings_for_numbers(j, NULL);
  ck_assert(json_is_null(json_object_get(json_object_get(j, "o"), "worst")));
  ck_assert(json_is_null(json_object_get(j, "seconds")));
  json_decref(j);
  kda_tally t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < 3; i++) kda_tally_add(&t, &rs[i]);
  const kda_run_target_info tg[2] = {{"a", "fp32", NULL, NULL, NULL, NULL},
                                     {"b", "bf16", "x=1", "./b.so", "bf16", "f32"}};
  const char *paths[1] = {"golden/L1"};
  kda_run_info info = {tg, 2, paths, 1, 2, "golden/L1", "00ff", NULL, "base.json", 1, 1};
  f = open_memstream(&buf, &len);
  ck_assert_int_eq(kda_report_summary_json(f, &t, rs, 3, &info), KDA_OK);
  fclose(f);
  j = parse(buf);
  no_strings_for_numbers(j, NULL);
  ck_assert_str_eq(json_string_value(json_object_get(j, "schema")), "kda-conform-summary/2");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "exit_status")), 1);
  json_t *b = json_array_get(json_object_get(j, "backends"), 1);
  ck_assert_str_eq(json_string_value(json_object_get(b, "plugin")), "./b.so");
  ck_assert_str_eq(json_string_value(json_object_get(b, "class")), "bf16");
  ck_assert_str_eq(json_string_value(json_object_get(b, "input_dtype")), "bf16");
  ck_assert_str_eq(json_string_value(json_object_get(b, "output_dtype")), "f32");
  ck_assert(json_is_null(json_object_get(json_array_get(json_object_get(j, "backends"), 0),
                                         "input_dtype")));
  json_t *g = json_object_get(json_object_get(j, "case_set"), "golden");
  ck_assert_str_eq(json_string_value(json_object_get(g, "sha256sums")), "00ff");
  ck_assert_int_eq(json_array_size(json_object_get(j, "failing")), 3); /* strict */
  json_t *bl = json_object_get(j, "baseline");
  ck_assert_int_eq(json_integer_value(json_object_get(bl, "absent")), 1);
  json_decref(j);
  info.strict = 0;
  f = open_memstream(&buf, &len);
  ck_assert_int_eq(kda_report_summary_json(f, &t, rs, 3, &info), KDA_OK);
  fclose(f);
  j = parse(buf);
  json_t *fl = json_object_get(j, "failing");
  ck_assert_int_eq(json_array_size(fl), 1);
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(fl, 0), "verdict")), "Fail");
  json_decref(j);
  for (int i = 0; i < 3; i++) kda_case_report_free(&rs[i]);
}
END_TEST

START_TEST(test_junit_warning_and_waiver) {
  kda_case_report rs[3];
  sample_reports(rs);
  rs[0].seconds = 0;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_int_eq(kda_report_junit(f, rs, 3), KDA_OK);
  fclose(f);
  const char *w = strstr(buf, "<property name=\"warning\" value=\"regression: o error 2.5");
  ck_assert_msg(w != NULL, "%s", buf);
  ck_assert_ptr_nonnull(strstr(w, "<system-out>QualityWarning: regression"));
  const char *s = strstr(buf, "<property name=\"waiver\" value=\"known &lt;bug&gt;\"/>");
  ck_assert_msg(s != NULL, "%s", buf);
  ck_assert_ptr_nonnull(
      strstr(s, "<property name=\"waiver_link\" value=\"https://example.org/1\"/>"));
  ck_assert_ptr_nonnull(
      strstr(s, "<skipped message=\"waived: known &lt;bug&gt;\" type=\"Waived\">"));
  free(buf);
  for (int i = 0; i < 3; i++) kda_case_report_free(&rs[i]);
}
END_TEST

/* JUnit of the reports, strict or not, in a string the caller frees. */
static char *junit_text(const kda_case_report *rs, int64_t n, int32_t strict) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_int_eq(kda_report_junit_strict(f, rs, n, strict), KDA_OK);
  fclose(f);
  return buf;
}

/* --strict: QualityWarning and Waived fail the run, so JUnit shows them as <failure> and counts
 * them; without it they stay a pass with properties and a <skipped> (SPEC.md §7.9, §12.2). */
START_TEST(test_junit_strict) {
  kda_case_report rs[3];
  sample_reports(rs);
  char *plain = junit_text(rs, 3, 0), *strict = junit_text(rs, 3, 1);
  ck_assert_msg(strstr(plain, "name=\"b\" tests=\"2\" failures=\"0\" errors=\"0\" skipped=\"1\""),
                "%s", plain);
  ck_assert_ptr_null(strstr(plain, "strict:"));
  ck_assert_msg(strstr(strict, "name=\"b\" tests=\"2\" failures=\"2\" errors=\"0\" skipped=\"0\""),
                "%s", strict);
  ck_assert_msg(strstr(strict, "<failure message=\"strict: regression: o error 2.5 &gt; 2 x baseline "
                              "1\" type=\"QualityWarning\">"), "%s", strict);
  ck_assert_msg(strstr(strict, "<failure message=\"strict: waived: known &lt;bug&gt;\" "
                              "type=\"Waived\">"), "%s", strict);
  ck_assert_ptr_null(strstr(strict, "<skipped"));
  ck_assert_ptr_nonnull(strstr(strict, "<property name=\"waiver\" value=\"known &lt;bug&gt;\"/>"));
  free(plain), free(strict);
  /* the library's plain writer is the non-strict one */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_int_eq(kda_report_junit(f, rs, 3), KDA_OK);
  fclose(f);
  plain = junit_text(rs, 3, 0);
  ck_assert_str_eq(buf, plain);
  free(buf), free(plain);
  for (int i = 0; i < 3; i++) kda_case_report_free(&rs[i]);
}
END_TEST

/* What the backend printed and nondeterminism reach JSONL, summary.json and JUnit, not only the
 * human report (SPEC.md §7.7, §7.8, §7.9). */
START_TEST(test_log_and_nondeterminism_reported) {
  kda_case_report rs[3];
  sample_reports(rs);
  snprintf(rs[0].log, sizeof rs[0].log, "hello <x> & \"y\"\nline 2");
  rs[0].log_bytes = 5000; /* more than kept: "beginning" */
  rs[1].nondeterministic = 1;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(kda_report_jsonl(f, &rs[i]), KDA_OK);
  fclose(f);
  char *nl = strchr(buf, '\n');
  ck_assert_ptr_nonnull(nl);
  json_t *j1 = json_loads(nl + 1, 0, NULL);
  *nl = 0;
  json_t *j0 = parse(buf);
  ck_assert_ptr_nonnull(j1);
  ck_assert_str_eq(json_string_value(json_object_get(j0, "log")), rs[0].log);
  ck_assert_int_eq(json_integer_value(json_object_get(j0, "log_bytes")), 5000);
  ck_assert(json_is_false(json_object_get(j0, "nondeterministic")));
  ck_assert(json_is_true(json_object_get(j1, "nondeterministic")));
  ck_assert(json_is_null(json_object_get(j1, "log")));
  ck_assert_int_eq(json_integer_value(json_object_get(j1, "log_bytes")), 0);
  json_decref(j0), json_decref(j1);
  kda_tally t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < 3; i++) kda_tally_add(&t, &rs[i]);
  f = open_memstream(&buf, &len);
  ck_assert_int_eq(kda_report_summary_json(f, &t, rs, 3, NULL), KDA_OK);
  fclose(f);
  json_t *j = parse(buf);
  json_t *nd = json_object_get(j, "nondeterministic"), *out = json_object_get(j, "backend_output");
  ck_assert_int_eq(json_array_size(nd), 1);
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(nd, 0), "backend")), "b");
  ck_assert_int_eq(json_array_size(out), 1);
  ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(out, 0), "log_bytes")), 5000);
  json_decref(j);
  char *x = junit_text(rs, 3, 0);
  const char *c0 = strstr(x, "name=\"c1\""), *so = c0 ? strstr(c0, "<system-out>") : NULL;
  ck_assert_msg(so && strstr(so, "<system-out>backend output (5000 bytes, beginning):\nhello "
                                 "&lt;x&gt; &amp; &quot;y&quot;\nline 2</system-out>") == so,
                "%s", x);
  ck_assert_ptr_nonnull(strstr(x, "<property name=\"backend_output_bytes\" value=\"5000\"/>"));
  const char *c1 = strstr(x, "classname=\"kda.conform.b\" name=\"c1\"");
  ck_assert_msg(c1 && strstr(c1, "<property name=\"nondeterministic\" value=\"true\"/>"), "%s", x);
  ck_assert_ptr_nonnull(strstr(c1, "<system-out>QualityWarning: regression"));
  free(x);
  for (int i = 0; i < 3; i++) kda_case_report_free(&rs[i]);
}
END_TEST

/* Baselines of several backends are written as one kda-baseline/2 map, readable back. */
START_TEST(test_baseline_written_per_backend) {
  kda_case_report rs[3];
  sample_reports(rs);
  char path[32], err[KDA_ERRLEN];
  temp_file(path, "");
  FILE *f = fopen(path, "w");
  ck_assert_int_eq(kda_report_baseline(f, rs, 3), KDA_OK);
  fclose(f);
  kda_baseline *b;
  ck_assert_msg(kda_baseline_load(path, &b, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_int_eq(kda_baseline_check(b, "a", KDA_CLASS_FP32, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_baseline_check(b, "b", KDA_CLASS_BF16, err, sizeof err), KDA_OK);
  double o, ht, hc;
  ck_assert_int_eq(kda_baseline_get(b, "b", "c1", &o, &ht, &hc), 1);
  ck_assert(o == 2.5 && isnan(ht));
  ck_assert_int_eq(kda_baseline_get(b, "a", "c1", &o, &ht, &hc), 1);
  ck_assert(isnan(o)); /* a NaN worst error is recorded as null */
  kda_baseline_free(b);
  f = fopen(path, "w");
  ck_assert_int_eq(kda_report_baseline(f, rs + 1, 2), KDA_OK);
  fclose(f);
  ck_assert_int_eq(kda_baseline_load(path, &b, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_baseline_check(b, "a", KDA_CLASS_FP32, err, sizeof err), KDA_EINVAL);
  kda_baseline_free(b);
  unlink(path);
  for (int i = 0; i < 3; i++) kda_case_report_free(&rs[i]);
}
END_TEST

static Suite *ci_suite(void) {
  Suite *s = suite_create("ci");
  TCase *tc = tcase_create("ci");
  tcase_add_loop_test(tc, test_waivers_rejected, 0,
                      (int)(sizeof bad_waivers / sizeof bad_waivers[0]));
  tcase_add_test(tc, test_waivers_match_and_unused);
  tcase_add_test(tc, test_run_status);
  tcase_add_test(tc, test_ci_values_bounded);
  tcase_add_loop_test(tc, test_baselines_rejected, 0,
                      (int)(sizeof bad_baselines / sizeof bad_baselines[0]));
  tcase_add_test(tc, test_baseline_backend_and_class);
  tcase_add_test(tc, test_json_numbers_and_summary);
  tcase_add_test(tc, test_junit_warning_and_waiver);
  tcase_add_test(tc, test_junit_strict);
  tcase_add_test(tc, test_log_and_nondeterminism_reported);
  tcase_add_test(tc, test_baseline_written_per_backend);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return kda_test_main(ci_suite(), CK_NORMAL, CK_FORK_GETENV);
}

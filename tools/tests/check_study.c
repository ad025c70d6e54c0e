/* check_study.c: Check tests of the study tools: kda trace, kda explore, kda conform --html.
 * SPDX-License-Identifier: MIT
 *
 * Run like check_tools.c, through the shared harness (tests/kda_test.h): the binary is
 * $KDA_BIN, else ./build/kda; every test works in its own mkdtemp directory, from the
 * repository root (the golden sets are read from golden/).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kda_case.h"
#include "kda_npz.h"
#include "kda_problem.h"
#include "kda_test.h"

#if defined(__has_include)
#if __has_include("kda_mpfr.h")
#define KDA_CHECK_HAVE_MPFR 1 /* kda trace certifies small cases */
#endif
#endif
#ifndef KDA_CHECK_HAVE_MPFR
#define KDA_CHECK_HAVE_MPFR 0
#endif

/* A float64 member of a case or result file. */
static double *load_member(const char *path, const char *name, uint64_t count) {
  char err[KDA_ERRLEN];
  kda_npz *z = NULL;
  ck_assert_msg(kda_npz_open(path, &z, err, sizeof err) == KDA_OK, "%s", err);
  double *x = calloc((size_t)count + 1, sizeof *x);
  ck_assert_ptr_nonnull(x);
  ck_assert_msg(kda_npz_read(z, name, KDA_DTYPE_F64, x, count, err, sizeof err) == KDA_OK, "%s",
                err);
  kda_npz_close(z);
  return x;
}

static kda_problem problem_of(const char *path) {
  char err[KDA_ERRLEN];
  kda_case c;
  ck_assert_msg(kda_case_load(path, &c, err, sizeof err) == KDA_OK, "%s", err);
  kda_problem p = c.p;
  kda_case_free(&c);
  return p;
}

/* The ids of golden/L0 (the *.txt traces), sorted; returns the count. */
static int l0_ids(char ids[][64], int cap) {
  DIR *d = opendir("golden/L0");
  ck_assert_msg(d != NULL, "golden/L0: %s (run from the repository root)", strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < cap) {
    size_t l = strlen(e->d_name);
    if (l > 4 && l < 60 && strcmp(e->d_name + l - 4, ".txt") == 0)
      snprintf(ids[n++], 64, "%.*s", (int)(l - 4), e->d_name);
  }
  closedir(d);
  ck_assert_int_ge(n, 8);
  return n;
}

/* json[key].f64 as an array of numbers (non-finite values are strings). */
static double jnum(const json_t *x) {
  if (json_is_string(x)) {
    const char *s = json_string_value(x);
    return strcmp(s, "-inf") == 0 ? -INFINITY : strcmp(s, "inf") == 0 ? INFINITY : NAN;
  }
  ck_assert_msg(json_is_number(x), "not a number");
  return json_number_value(x);
}

static json_t *trace_json(kda_test_result *r, const char *path, const char *seq, const char *head) {
  kda_test_run(r, "trace", path, "--json", "--seq", seq, "--head", head, NULL);
  kda_test_expect_ok(r, path);
  json_error_t je;
  json_t *j = json_loads(r->out, 0, &je);
  ck_assert_msg(j != NULL, "%s: kda trace --json is not JSON: %s (line %d)", path, je.text,
                je.line);
  return j;
}

/* ---- Help. */

/* kda --help lists the subcommands; each documents every option it takes. */
START_TEST(test_help) {
  kda_test_result r = {0};
  kda_test_run(&r, "--help", NULL);
  kda_test_expect_ok(&r, "kda --help");
  ck_assert_ptr_nonnull(strstr(r.out, "\n  trace "));
  ck_assert_ptr_nonnull(strstr(r.out, "\n  explore "));
  const char *trace_opts[] = {"--seq", "--head", "--tokens", "--channels", "--json",
                              "--no-certify", "--l0", "--help", NULL};
  const char *explore_opts[] = {"--output", "--seq", "--head", "--tokens", "--result", "--help", NULL};
  const struct { const char *sub; const char *const *opts; } subs[] = {
      {"trace", trace_opts}, {"explore", explore_opts}};
  for (int i = 0; i < 2; i++) {
    kda_test_run(&r, subs[i].sub, "--help", NULL);
    kda_test_expect_ok(&r, subs[i].sub);
    for (const char *const *o = subs[i].opts; *o; o++)
      ck_assert_msg(strstr(r.out, *o) != NULL, "kda %s --help lacks %s", subs[i].sub, *o);
  }
  kda_test_run(&r, "conform", "--help", NULL);
  ck_assert_ptr_nonnull(strstr(r.out, "--html DIR"));
  kda_test_result_free(&r);
}
END_TEST

/* ---- kda trace. */

/* The committed L0 traces are exactly what kda trace --l0 prints (it runs the step function
 * the L0 writer uses), and the default trace's float64 values are the certified ones. */
START_TEST(test_trace_l0_files) {
  char ids[32][64] = {{0}};
  const int n = l0_ids(ids, 32);
  kda_test_result r = {0};
  for (int i = 0; i < n; i++) {
    char npz[160], txt[160];
    snprintf(npz, sizeof npz, "golden/L0/%.64s.npz", ids[i]);
    snprintf(txt, sizeof txt, "golden/L0/%.64s.txt", ids[i]);
    kda_test_run(&r, "trace", "--l0", npz, NULL);
    kda_test_expect_ok(&r, npz);
    size_t len = 0;
    char *want = (char *)kda_test_read_all(txt, &len);
    ck_assert_ptr_nonnull(want);
    ck_assert_msg(strlen(r.out) == len && memcmp(r.out, want, len) == 0,
                  "kda trace --l0 %s differs from the committed %s", npz, txt);
    free(want);
  }
  kda_test_result_free(&r);
}
END_TEST

/* kda trace --backward: the committed adjoint traces of golden/grad/L0 exactly (every number
 * exact, gradients equal to the certified ones, SPEC.md §13.9); a forward golden file and a
 * gradient case outside the trace's modes are refused with one line. */
START_TEST(test_trace_backward) {
  char ids[32][64] = {{0}};
  const int n = l0_ids(ids, 32);
  kda_test_result r = {0};
  for (int i = 0; i < n; i++) {
    char npz[160], txt[160];
    snprintf(npz, sizeof npz, "golden/grad/L0/%.64s.npz", ids[i]);
    snprintf(txt, sizeof txt, "golden/grad/L0/%.64s.txt", ids[i]);
    kda_test_run(&r, "trace", "--backward", npz, NULL);
    kda_test_expect_ok(&r, npz);
    size_t len = 0;
    char *want = (char *)kda_test_read_all(txt, &len);
    ck_assert_ptr_nonnull(want);
    ck_assert_msg(strlen(r.out) == len && memcmp(r.out, want, len) == 0,
                  "kda trace --backward %s differs from the committed %s", npz, txt);
    free(want);
  }
  kda_test_run(&r, "trace", "--backward", "golden/L0/l0-reflection.npz", NULL);
  kda_test_expect_error(&r, "--backward on a forward file", "kda trace: ", "l0-reflection.npz",
                        "not a golden gradient file", NULL);
  kda_test_run(&r, "trace", "--backward", "golden/grad/L1/t17-gdn.npz", NULL);
  kda_test_expect_error(&r, "--backward on softplus", "kda trace: ", "l2 off", NULL);
  kda_test_result_free(&r);
}
END_TEST

/* Every o and final state of every head of every L0 case, traced by the default (JSON) path,
 * equals the certified golden value bit for bit (L0 arithmetic is exact), and so do the
 * certified values kda trace reports, with 17 digits right. */
START_TEST(test_trace_l0_json_values) {
  char ids[32][64] = {{0}};
  const int n = l0_ids(ids, 32);
  kda_test_result r = {0};
  for (int i = 0; i < n; i++) {
    char npz[160], sq[24], hd[24];
    snprintf(npz, sizeof npz, "golden/L0/%.64s.npz", ids[i]);
    const kda_problem p = problem_of(npz);
    double *o = load_member(npz, "o", (uint64_t)(p.T * p.HV * p.V));
    double *ht = p.want_final_state ? load_member(npz, "ht", (uint64_t)(p.N * p.HV * p.K * p.V)) : NULL;
    for (int64_t sn = 0; sn < p.N; sn++)
      for (int64_t hv = 0; hv < p.HV; hv++) {
        snprintf(sq, sizeof sq, "%lld", (long long)sn);
        snprintf(hd, sizeof hd, "%lld", (long long)hv);
        json_t *j = trace_json(&r, npz, sq, hd);
        json_t *steps = json_object_get(j, "steps");
        size_t k;
        json_t *st;
        json_array_foreach(steps, k, st) {
          const int64_t t = json_integer_value(json_object_get(st, "t"));
          json_t *jo = json_object_get(st, "o");
          for (int64_t c = 0; c < p.V; c++) {
            const double want = o[(t * p.HV + hv) * p.V + c];
            ck_assert_msg(jnum(json_array_get(json_object_get(jo, "f64"), (size_t)c)) == want,
                          "%s t=%lld hv=%lld o[%lld]", npz, (long long)t, (long long)hv, (long long)c);
            if (KDA_CHECK_HAVE_MPFR)
              ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(jo, "digits"), (size_t)c)), 17);
          }
          if (ht && k + 1 == json_array_size(steps)) {
            json_t *ws = json_object_get(json_object_get(st, "written_state"), "f64");
            for (int64_t e = 0; e < p.K * p.V; e++) {
              const int64_t i0 = e / p.V, j0 = e % p.V;
              const int64_t at = p.state_layout == KDA_STATE_VK ? j0 * p.K + i0 : e;
              ck_assert_msg(jnum(json_array_get(ws, (size_t)e)) ==
                                ht[(sn * p.HV + hv) * p.K * p.V + at],
                            "%s seq %lld hv %lld final state element %lld", npz, (long long)sn,
                            (long long)hv, (long long)e);
            }
          }
        }
        json_decref(j);
      }
    free(o);
    free(ht);
  }
  kda_test_result_free(&r);
}
END_TEST

/* On a random case (L1) the traced float64 outputs are kda ref's bits, and the certified
 * ones are the golden values. */
START_TEST(test_trace_matches_ref) {
  const char *npz = "golden/L1/gqa-mod.npz";
  const kda_problem p = problem_of(npz);
  kda_test_result r = {0};
  kda_test_run(&r, "ref", npz, "-o", kda_test_path("ref.npz"), NULL);
  kda_test_expect_ok(&r, "kda ref");
  const uint64_t no = (uint64_t)(p.T * p.HV * p.V);
  double *ref = load_member(kda_test_path("ref.npz"), "o", no), *gold = load_member(npz, "o", no);
  json_t *j = trace_json(&r, npz, "0", "5");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "qk_head")), 1); /* mod: 5 % 2 */
  json_t *steps = json_object_get(j, "steps");
  ck_assert_int_eq((int)json_array_size(steps), (int)p.T);
  size_t k;
  json_t *st;
  json_array_foreach(steps, k, st) {
    json_t *jo = json_object_get(st, "o");
    for (int64_t c = 0; c < p.V; c++) {
      const uint64_t idx = (uint64_t)(((int64_t)k * p.HV + 5) * p.V + c);
      ck_assert_msg(jnum(json_array_get(json_object_get(jo, "f64"), (size_t)c)) == ref[idx],
                    "t=%zu o[%lld] differs from kda ref", k, (long long)c);
      if (KDA_CHECK_HAVE_MPFR)
        ck_assert_msg(jnum(json_array_get(json_object_get(jo, "certified"), (size_t)c)) == gold[idx],
                      "t=%zu certified o[%lld] differs from the golden value", k, (long long)c);
    }
  }
  json_decref(j);
  free(ref);
  free(gold);
  kda_test_result_free(&r);
}
END_TEST

/* Text fits 80 columns for K, V <= 8 and, elided, for K = 16; --tokens picks positions. */
START_TEST(test_trace_text) {
  const char *cases[] = {"golden/L1/disc-exp2.npz", "golden/L1/gqa-div.npz"};
  kda_test_result r = {0};
  for (int c = 0; c < 2; c++) {
    kda_test_run(&r, "trace", cases[c], "--tokens", "2:4", NULL);
    kda_test_expect_ok(&r, cases[c]);
    int width = 0, cur = 0, tokens = 0;
    for (const char *s = r.out; *s; s++) {
      if (*s == '\n') cur = 0;
      else if ((*s & 0xC0) != 0x80 && ++cur > width) width = cur;
    }
    for (const char *s = r.out; (s = strstr(s, "\n-- token t=")); s++) tokens++;
    ck_assert_msg(width <= 80, "%s: a line of %d columns", cases[c], width);
    ck_assert_int_eq(tokens, 2);
    ck_assert_ptr_nonnull(strstr(r.out, "-- token t=2 "));
    ck_assert_ptr_nonnull(strstr(r.out, "3 write    S <- S + k^ c^T"));
    if (c == 1) ck_assert_ptr_nonnull(strstr(r.out, "..."));
  }
  kda_test_result_free(&r);
}
END_TEST

START_TEST(test_trace_errors) {
  kda_test_result r = {0};
  kda_test_run(&r, "trace", "golden/L1/disc-exp2.npz", "--seq", "1", NULL);
  kda_test_expect_error(&r, "--seq out of range", "kda trace: ", "--seq 1", "N = 1", NULL);
  kda_test_run(&r, "trace", "golden/L1/disc-exp2.npz", "--head", "3", NULL);
  kda_test_expect_error(&r, "--head out of range", "kda trace: ", "--head 3", NULL);
  kda_test_run(&r, "trace", "golden/L1/disc-exp2.npz", "--tokens", "5:2", NULL);
  kda_test_expect_error(&r, "bad --tokens", "kda trace: ", "--tokens", NULL);
  kda_test_run(&r, "trace", kda_test_path("missing.npz"), NULL);
  kda_test_expect_error(&r, "missing file", "kda trace: ", "missing.npz", NULL);
  kda_test_run(&r, "trace", "--l0", "golden/example/example.npz", NULL);
  kda_test_expect_error(&r, "--l0 on a non-golden file", "kda trace: ", "example.npz", NULL);
  kda_test_result_free(&r);
}
END_TEST

/* --seq, --head and --tokens, parsed alike by both tools (kda_study_where_option). */
START_TEST(test_where_options) {
  const char *npz = "golden/example/example.npz", *html = kda_test_path("x.html");
  kda_test_result r = {0};
  kda_test_run(&r, "trace", npz, "--seq", "x", NULL);
  kda_test_expect_error(&r, "trace bad --seq", "kda trace: ", "bad --seq 'x'", NULL);
  kda_test_run(&r, "trace", npz, "-H", "-1", NULL);
  kda_test_expect_error(&r, "trace bad --head", "kda trace: ", "bad --head '-1'", NULL);
  kda_test_run(&r, "trace", npz, "--tokens", "2:3", "--seq", "0", "--head", "3", NULL);
  kda_test_expect_ok(&r, "trace --tokens --seq --head");
  ck_assert_msg(strstr(r.out, "value head 3") && strstr(r.out, "token t=2 (") &&
                    !strstr(r.out, "token t=1 ("),
                "%s", r.out);
  kda_test_run(&r, "explore", npz, "-o", html, "-s", "x", NULL);
  kda_test_expect_error(&r, "explore bad --seq", "kda explore: ", "bad --seq 'x'", NULL);
  kda_test_run(&r, "explore", npz, "-o", html, "--head", "-1", NULL);
  kda_test_expect_error(&r, "explore bad --head", "kda explore: ", "bad --head '-1'", NULL);
  kda_test_run(&r, "explore", npz, "-o", html, "-t", "0:1", "-s", "0", "-H", "3", NULL);
  kda_test_expect_ok(&r, "explore --tokens --seq --head");
  kda_test_result_free(&r);
}
END_TEST

/* ---- kda explore. */

/* A page is self-contained: no external script, stylesheet, image or address (the SVG
 * namespace is a name, not a fetch). */
static void expect_self_contained(const char *path) {
  char *html = (char *)kda_test_read_all(path, NULL);
  ck_assert_msg(html != NULL, "%s was not written", path);
  const char *bad[] = {"<script src", " src=", "<link", "@import", "url(", "https:", "//cdn"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(strstr(html, bad[i]) == NULL, "%s: not self-contained ('%s')", path, bad[i]);
  const char *h = html;
  while ((h = strstr(h, "http:")) != NULL) {
    ck_assert_msg(strncmp(h, "http://www.w3.org/2000/svg", 26) == 0, "%s: an address: %.40s",
                  path, h);
    h++;
  }
  free(html);
}

/* The embedded data parses and holds every token of the head with its state. */
START_TEST(test_explore_page) {
  kda_test_result r = {0};
  const char *npz = "golden/L1/disc-head-map.npz";
  kda_test_run(&r, "ref", npz, "--backend", "ref-f32", "-o", kda_test_path("r32.npz"), NULL);
  kda_test_expect_ok(&r, "kda ref");
  kda_test_run(&r, "explore", npz, "--head", "3", "--result", kda_test_path("r32.npz"), "-o",
               kda_test_path("x.html"), NULL);
  kda_test_expect_ok(&r, "kda explore");
  ck_assert_str_eq(r.out, "");
  expect_self_contained(kda_test_path("x.html"));
  char *html = (char *)kda_test_read_all(kda_test_path("x.html"), NULL);
  char *a = strstr(html, "<script type=\"application/json\" id=\"kda-data\">");
  ck_assert_ptr_nonnull(a);
  a = strchr(a, '>') + 1;
  char *e = strstr(a, "</script>");
  ck_assert_ptr_nonnull(e);
  *e = 0;
  json_error_t je;
  json_t *j = json_loads(a, 0, &je);
  ck_assert_msg(j != NULL, "embedded data is not JSON: %s", je.text);
  const kda_problem p = problem_of(npz);
  ck_assert_int_eq((int)json_array_size(json_object_get(j, "steps")), (int)p.T);
  ck_assert_int_eq((int)json_array_size(json_object_get(j, "err")), (int)p.T);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "qk_head")), 1); /* div: 3 / 2 */
  json_t *last = json_array_get(json_object_get(j, "steps"), (size_t)p.T - 1);
  ck_assert_int_eq((int)json_array_size(json_object_get(last, "S")), (int)(p.K * p.V));
  ck_assert_int_eq((int)json_array_size(json_object_get(last, "L")), (int)(p.K * p.V));
  ck_assert(json_number_value(json_object_get(last, "mass")) > 0);
  /* the states before the first token shown, for its decay and erase sub-steps */
  ck_assert_int_eq((int)json_array_size(json_object_get(j, "Sb")), (int)(p.K * p.V));
  ck_assert_int_eq((int)json_array_size(json_object_get(j, "Lb")), (int)(p.K * p.V));
  json_decref(j);
  free(html);
  /* without a case: the notebook alone, its data null; the case options then need a case */
  kda_test_run(&r, "explore", "-o", kda_test_path("nb.html"), NULL);
  kda_test_expect_ok(&r, "kda explore -o");
  expect_self_contained(kda_test_path("nb.html"));
  html = (char *)kda_test_read_all(kda_test_path("nb.html"), NULL);
  ck_assert_ptr_nonnull(strstr(html, "id=\"kda-data\">\nnull\n</script>"));
  ck_assert_ptr_nonnull(strstr(html, "<script id=\"kda-step\">"));
  free(html);
  kda_test_run(&r, "explore", "--head", "1", "-o", kda_test_path("nb.html"), NULL);
  kda_test_expect_error(&r, "--head without a case", "kda explore: ", "need a CASE.npz", NULL);
  kda_test_result_free(&r);
}
END_TEST

/* Too big to show: one line, exit 2, no file; --tokens makes it fit. */
START_TEST(test_explore_refuses_big) {
  kda_test_result r = {0};
  const char *npz = "golden/L1/drift-decay-small.npz";
  kda_test_run(&r, "explore", npz, "-o", kda_test_path("big.html"), NULL);
  kda_test_expect_error(&r, "a long case", "kda explore: ", "too many", "--tokens", NULL);
  ck_assert(kda_test_read_all(kda_test_path("big.html"), NULL) == NULL);
  kda_test_run(&r, "explore", npz, "--tokens", "0:64", "-o", kda_test_path("big.html"), NULL);
  kda_test_expect_ok(&r, "kda explore --tokens 0:64");
  expect_self_contained(kda_test_path("big.html"));
  kda_test_run(&r, "explore", "golden/L1/t128-k128.npz", "-o", kda_test_path("k.html"), NULL);
  kda_test_expect_error(&r, "K = 128", "kda explore: ", "K = 128", NULL);
  kda_test_run(&r, "explore", npz, NULL);
  kda_test_expect_error(&r, "no -o", "kda explore: ", "-o", NULL);
  kda_test_run(&r, "explore", npz, "--tokens", "0:8", "--result", kda_test_path("none.npz"), "-o",
               kda_test_path("n.html"), NULL);
  kda_test_expect_error(&r, "missing result", "kda explore: ", "none.npz", NULL);
  ck_assert(kda_test_read_all(kda_test_path("n.html"), NULL) == NULL);
  kda_test_result_free(&r);
}
END_TEST

/* ---- kda conform --html. */

static int count_of(const char *s, const char *what) {
  int n = 0;
  for (; (s = strstr(s, what)) != NULL; s++) n++;
  return n;
}

/* A matrix row per case and a table row per report; one plot per case with both backends: a
 * point per 64-token window of the long case, a point per token of the short one. */
static int points_of(const char *html, const char *section) {
  const char *pts = strstr(strstr(html, section), "class=\"err\"");
  ck_assert_ptr_nonnull(pts);
  pts = strstr(pts, "points=\"") + 8;
  int n = 1;
  for (; *pts != '"'; pts++) n += *pts == ' ';
  return n;
}

START_TEST(test_conform_html) {
  kda_test_result r = {0};
  kda_test_run(&r, "conform", "-q", "-b", "ref-f64", "-b", "ref-f32", "--no-prefix", "--html",
      kda_test_path("rep"), "golden/L1/t5000-long.npz", "golden/L1/disc-exp2.npz", NULL);
  ck_assert_msg(r.status == 0, "kda conform --html: exit %d: %s", r.status, r.err);
  expect_self_contained(kda_test_path("rep/index.html"));
  char *html = (char *)kda_test_read_all(kda_test_path("rep/index.html"), NULL);
  ck_assert_int_eq(count_of(html, "<tr><th scope=\"row\">"), 2);
  ck_assert_int_eq(count_of(html, "<td class=\"pass\" data-verdict=\"Pass\""), 4);
  ck_assert_int_eq(count_of(html, "<tr>") + count_of(html, "<tr class"), 3 + 1 + 4);
  ck_assert_int_eq(count_of(html, "<svg xmlns"), 2);
  ck_assert_int_eq(count_of(html, "\"><h3>t5000-long (5000 tokens)"), 1);
  ck_assert_int_eq(count_of(html, "\"><h3>disc-exp2 ("), 1);
  ck_assert_int_eq(count_of(html, "class=\"cap\""), 2);
  ck_assert_int_eq(count_of(html, "<polyline class=\"allowance\""), 4);
  ck_assert_int_eq(count_of(html, "<polyline class=\"err\""), 4);
  ck_assert_int_eq(points_of(html, "<h3>t5000-long"), (5000 + 63) / 64);
  ck_assert_int_eq(points_of(html, "<h3>disc-exp2"), 16);
  free(html);
  kda_test_run(&r, "conform", "-q", "-b", "ref-f64", "--html", kda_test_path("none/sub"),
               "golden/L1/disc-exp2.npz", NULL);
  kda_test_expect_error(&r, "--html under a missing directory", "kda conform: ", "none/sub", NULL);
  kda_test_result_free(&r);
}
END_TEST

/* A case id is text from a file: it must not become markup in either page. */
START_TEST(test_hostile_id) {
  /* An id cannot carry markup any more (ids are one path component, SPEC.md §10.2) ... */
  kda_test_result r = {0};
  kda_test_run(&r, "gen", "seed=1 T=4 K=2 V=2 id=</script><i>zz'&", "-o",
               kda_test_path("evil.npz"), NULL);
  ck_assert_int_eq(r.status, 2);
  /* ... but a reason can: a candidate directory named with markup appears in the Fail reason of
   * a missing result file, and the report must show it as text. */
  char dir[1200];
  snprintf(dir, sizeof dir, "%s", kda_test_path("x<script><i>zz'&"));
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  kda_test_run(&r, "conform", "-q", "--candidate", dir, "--html", kda_test_path("rep"),
      "golden/example/example.npz", NULL);
  ck_assert_int_eq(r.status, 1);
  char *html = (char *)kda_test_read_all(kda_test_path("rep/index.html"), NULL);
  ck_assert_ptr_nonnull(html);
  ck_assert_ptr_null(strstr(html, "<i>zz"));
  ck_assert_ptr_nonnull(strstr(html, "x&lt;script&gt;&lt;i&gt;zz&#39;&amp;"));
  free(html);
  kda_test_result_free(&r);
}
END_TEST

static void setup(void) { kda_test_tmpdir_make("check-study"); }
static void teardown(void) { kda_test_tmpdir_remove(); }

static Suite *study_suite(void) {
  Suite *s = suite_create("study tools");
  TCase *tc = tcase_create("trace");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_help);
  tcase_add_test(tc, test_trace_l0_files);
  tcase_add_test(tc, test_trace_backward);
  tcase_add_test(tc, test_trace_l0_json_values);
  tcase_add_test(tc, test_trace_matches_ref);
  tcase_add_test(tc, test_trace_text);
  tcase_add_test(tc, test_trace_errors);
  tcase_add_test(tc, test_where_options);
  tcase_add_test(tc, test_explore_page);
  tcase_add_test(tc, test_explore_refuses_big);
  tcase_add_test(tc, test_conform_html);
  tcase_add_test(tc, test_hostile_id);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  printf("kda binary under test: %s\n", kda_test_bin());
  return kda_test_main(study_suite(), CK_NORMAL, CK_FORK_GETENV);
}

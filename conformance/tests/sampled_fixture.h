/* sampled_fixture.h: test code, a golden case file turned into a sampled-truth one (SPEC.md
 * §10.2: o stored at whole 64-token windows only, member o_index, golden.o_sampled), shared by
 * kda_fixture_sampled (the command) and check_sampled.c.
 * SPDX-License-Identifier: MIT
 *
 * fixture_sampled(IN, OUT, all): all keeps every window (the file must score exactly as IN);
 * otherwise runs of 3 windows around log-spaced windows (1, 2, 4, ...) and 7 regular ones
 * (i * n_win / 8), as the L2 files store them.  Every other member is copied value for value
 * in its dtype; golden.members_sha256 is recomputed so that the runner's member check passes.
 * fixture_generated(DESC, OUT, how): a case file with generated inputs (golden.inputs
 * "generated", golden.generated_sha256; SPEC.md §10.2) of generator description DESC; how 0:
 * no outputs (the runner's truth is ref-f64), 1 or 2: ref-f64's o, ht, hc stored as if golden
 * (every window, or runs as above; a fixture, not certified).
 * Test code: a failure prints and exits 2.
 */
#ifndef SAMPLED_FIXTURE_H
#define SAMPLED_FIXTURE_H

#include <jansson.h>
#include <libgen.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_golden_internal.h"
#include "kda_npz.h"
#include "kda_ref.h"

#define FIX_W 64

/* The directory of the running test program (where the test plugins are built). */
static inline void fixture_exe_dir(char *dir, size_t cap) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) abort();
  exe[n] = 0;
  snprintf(dir, cap, "%s", dirname(exe));
}

static void fixture_die(const char *what, const char *msg) {
  fprintf(stderr, "kda_fixture_sampled: %s: %s\n", what, msg);
  exit(2);
}

/* Marks window w and its two neighbours. */
static void keep_run(unsigned char *keep, int64_t n_win, int64_t w) {
  for (int64_t x = w - 1; x <= w + 1; x++)
    if (x >= 0 && x < n_win) keep[x] = 1;
}

static int64_t *pick(int64_t T, int all, int64_t *P) {
  const int64_t n_win = (T + FIX_W - 1) / FIX_W;
  unsigned char *keep = calloc((size_t)n_win + 1, 1);
  int64_t *idx = malloc(((size_t)T + 1) * sizeof *idx);
  if (!keep || !idx) fixture_die("pick", "out of memory");
  for (int64_t w = 1; w < n_win; w *= 2) keep_run(keep, n_win, w);
  for (int i = 1; i < 8; i++) keep_run(keep, n_win, i * n_win / 8);
  *P = 0;
  for (int64_t t = 0; t < T; t++)
    if (all || keep[t / FIX_W]) idx[(*P)++] = t;
  free(keep);
  return idx;
}

/* Writes every member of z to path, o replaced by its rows idx[0..P) after o_index. */
static void write_all(kda_npz *z, const char *path, const char *manifest, const int64_t *idx,
                      int64_t P) {
  char err[512];
  kda_npz_writer *w;
  if (kda_npz_writer_open(path, &w, err, sizeof err) || kda_npz_writer_set_manifest(w, manifest, err, sizeof err))
    fixture_die(path, err);
  for (int64_t m = 0; m < kda_npz_count(z); m++) {
    const char *name = kda_npz_name(z, m);
    kda_array_info in;
    double *x;
    if (kda_npz_load_f64(z, name, &in, &x, err, sizeof err)) fixture_die(name, err);
    if (strcmp(name, "o") == 0) {
      const int64_t row = in.shape[1] * in.shape[2];
      double *o = malloc(((size_t)(P * row) + 1) * sizeof *o);
      double *ix = malloc(((size_t)P + 1) * sizeof *ix);
      for (int64_t r = 0; r < P; r++) {
        memcpy(o + r * row, x + idx[r] * row, (size_t)row * sizeof *o);
        ix[r] = (double)idx[r];
      }
      int64_t shp[3] = {P, in.shape[1], in.shape[2]};
      if (kda_npz_writer_add_f64(w, "o_index", KDA_DTYPE_I64, 1, &P, ix, err, sizeof err) ||
          kda_npz_writer_add_f64(w, "o", KDA_DTYPE_F64, 3, shp, o, err, sizeof err))
        fixture_die(path, err);
      free(o), free(ix);
    } else if (kda_npz_writer_add_f64(w, name, in.dtype, in.ndim, in.shape, x, err, sizeof err)) {
      fixture_die(name, err);
    }
    free(x);
  }
  if (kda_npz_writer_commit(w, err, sizeof err)) fixture_die(path, err);
}

/* golden.members_sha256 of the file at path, every member's .npy bytes. */
static json_t *member_sums(const char *path) {
  char err[512];
  kda_npz *z;
  if (kda_npz_open(path, &z, err, sizeof err)) fixture_die(path, err);
  json_t *sums = json_object();
  for (int64_t m = 0; m < kda_npz_count(z); m++) {
    char member[128], hex[65];
    snprintf(member, sizeof member, "%s.npy", kda_npz_name(z, m));
    char *blob;
    size_t len;
    if (kda_npz_read_blob(z, member, &blob, &len, err, sizeof err)) fixture_die(member, err);
    kda_sha256_of(blob, len, hex);
    json_object_set_new(sums, member, json_string(hex));
    free(blob);
  }
  kda_npz_close(z);
  return sums;
}

/* Writes OUT from IN (see above). */
static inline void fixture_sampled(const char *in_path, const char *out_path, int all) {
  char err[512];
  kda_npz *z;
  if (kda_npz_open(in_path, &z, err, sizeof err)) fixture_die(in_path, err);
  char *text;
  if (kda_npz_read_blob(z, "manifest.json", &text, NULL, err, sizeof err)) fixture_die(in_path, err);
  json_t *man = json_loads(text, 0, NULL), *golden = json_object_get(man, "golden");
  json_t *T = json_object_get(json_object_get(man, "problem"), "T");
  if (!golden || !json_is_integer(T) || !kda_npz_has(z, "o")) fixture_die(in_path, "not a golden case");
  int64_t P;
  int64_t *idx = pick(json_integer_value(T), all, &P);
  json_object_set_new(golden, "o_sampled", json_true());
  char *m1 = json_dumps(man, JSON_SORT_KEYS);
  write_all(z, out_path, m1, idx, P);
  json_object_set_new(golden, "members_sha256", member_sums(out_path));
  char *m2 = json_dumps(man, JSON_SORT_KEYS);
  write_all(z, out_path, m2, idx, P);
  kda_npz_close(z);
  free(m1), free(m2), free(text), free(idx);
  json_decref(man);
}

static const char *const fixture_members[KDA_CASE_MEMBERS] = {
    "q", "k", "v", "g", "beta", "A_log", "dt_bias", "cu_seqlens", "h0", "checkpoints"};

/* The manifest of the generated case, its golden object saying how the file is made. */
static json_t *generated_manifest(const kda_gen_desc *d, const kda_case *c) {
  char err[512], hex[KDA_CASE_MEMBERS][65];
  if (kda_gen_inputs_sha256(d, hex, err, sizeof err)) fixture_die("hashes", err);
  json_t *root = json_loads(c->manifest_json, 0, NULL), *sums = json_object();
  for (int m = 0; m < KDA_CASE_MEMBERS; m++) {
    char key[32];
    snprintf(key, sizeof key, "%s.npy", fixture_members[m]);
    if (hex[m][0]) json_object_set_new(sums, key, json_string(hex[m]));
  }
  json_t *gold = json_pack("{s:s,s:s,s:o}", "schema", "kda-golden/1", "inputs", "generated",
                           "generated_sha256", sums);
  json_object_set_new(root, "golden", gold);
  return root;
}

static inline void fixture_generated(const char *text, const char *out_path, int how) {
  char err[512];
  kda_gen_desc d;
  kda_case c;
  if (kda_gen_parse(text, &d, err, sizeof err)) fixture_die("description", err);
  if (how == 0 ? kda_gen_case_static(&d, &c, err, sizeof err) : kda_gen_case(&d, &c, err, sizeof err))
    fixture_die("generate", err);
  json_t *root = generated_manifest(&d, &c);
  kda_npz_writer *w;
  if (how == 0) {
    char *m = json_dumps(root, JSON_SORT_KEYS);
    if (kda_npz_writer_open(out_path, &w, err, sizeof err) ||
        kda_npz_writer_set_manifest(w, m, err, sizeof err) || kda_npz_writer_commit(w, err, sizeof err))
      fixture_die(out_path, err);
    free(m);
  } else { /* ref-f64's outputs, written as a whole file first, then sampled by fixture_sampled */
    kda_problem_sizes z;
    if (kda_problem_sizes_get(&c.p, &z, err, sizeof err)) fixture_die("sizes", err);
    double *o = malloc((z.o + 1) * 8), *ht = malloc((z.ht + 1) * 8), *hc = malloc((z.hc + 1) * 8);
    kda_tensors_f64 ts;
    kda_case_tensors(&c, &ts);
    ts.o = o, ts.ht = c.p.want_final_state ? ht : NULL, ts.hc = c.p.n_checkpoints ? hc : NULL;
    if (kda_ref_forward_f64(&c.p, &ts, err, sizeof err)) fixture_die("ref-f64", err);
    json_object_set_new(json_object_get(root, "golden"), "members_sha256", json_object());
    char *m = json_dumps(root, JSON_SORT_KEYS);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.whole.npz", out_path);
    const int64_t so[3] = {c.p.T, c.p.HV, c.p.V};
    const int64_t ss[4] = {c.p.N, c.p.HV, c.p.K, c.p.V}, sc[4] = {c.p.n_checkpoints, c.p.HV, c.p.K, c.p.V};
    if (kda_npz_writer_open(tmp, &w, err, sizeof err) || kda_npz_writer_set_manifest(w, m, err, sizeof err) ||
        kda_npz_writer_add_f64(w, "o", KDA_DTYPE_F64, 3, so, o, err, sizeof err) ||
        (ts.ht && kda_npz_writer_add_f64(w, "ht", KDA_DTYPE_F64, 4, ss, ht, err, sizeof err)) ||
        (ts.hc && kda_npz_writer_add_f64(w, "hc", KDA_DTYPE_F64, 4, sc, hc, err, sizeof err)) ||
        kda_npz_writer_commit(w, err, sizeof err))
      fixture_die(tmp, err);
    fixture_sampled(tmp, out_path, how == 1);
    remove(tmp);
    free(m), free(o), free(ht), free(hc);
  }
  json_decref(root);
  kda_case_free(&c);
  kda_gen_desc_free(&d);
}

#endif

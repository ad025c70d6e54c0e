/* grad_fixture.h: test code, a gradient case file (SPEC.md §13.7): a generated case (kda gen's
 * description) with the seed members do, dht (when the problem has ht) and dhc (when it has
 * hc) added, from the PRNG (SPEC.md §11.1: seed 0x6772616473, streams 20, 21, 22, normals
 * rounded to float so that a float32 backend receives them exactly).  No golden gradients: the
 * runner's truth is ref-f64's backward.  Used by kda_fixture (make check-grad).
 * SPDX-License-Identifier: MIT
 * Test code: a failure prints and exits 2.
 */
#ifndef GRAD_FIXTURE_H
#define GRAD_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_npz.h"
#include "kda_prng.h"

#define GRAD_FIXTURE_SEED UINT64_C(0x6772616473)

static void grad_fixture_die(const char *what, const char *msg) {
  fprintf(stderr, "kda_fixture grad: %s: %s\n", what, msg);
  exit(2);
}

/* Adds seed member name of shape [n0, n1, n2(, n3)] from stream s to writer w. */
static void grad_fixture_seed(kda_npz_writer *w, const char *name, uint32_t s, int nd,
                              const int64_t *shape) {
  uint64_t n = 1;
  for (int i = 0; i < nd; i++) n *= (uint64_t)shape[i];
  double *x = malloc((size_t)(n + 1) * sizeof *x);
  if (!x) grad_fixture_die(name, "out of memory");
  for (uint64_t i = 0; i < n; i++) x[i] = (double)(float)kda_prng_normal(GRAD_FIXTURE_SEED, s, i);
  char err[512];
  if (kda_npz_writer_add_f64(w, name, KDA_DTYPE_F32, nd, shape, x, err, sizeof err))
    grad_fixture_die(name, err);
  free(x);
}

static inline void fixture_grad(const char *text, const char *out_path) {
  char err[512], tmp[4096];
  kda_gen_desc d;
  kda_case c;
  if (kda_gen_parse(text, &d, err, sizeof err) || kda_gen_case(&d, &c, err, sizeof err))
    grad_fixture_die("description", err);
  snprintf(tmp, sizeof tmp, "%s.inputs.npz", out_path);
  if (kda_case_save(tmp, &c, NULL, err, sizeof err)) grad_fixture_die(tmp, err);
  kda_npz *z;
  kda_npz_writer *w;
  char *man;
  if (kda_npz_open(tmp, &z, err, sizeof err) ||
      kda_npz_read_blob(z, "manifest.json", &man, NULL, err, sizeof err) ||
      kda_npz_writer_open(out_path, &w, err, sizeof err) ||
      kda_npz_writer_set_manifest(w, man, err, sizeof err))
    grad_fixture_die(out_path, err);
  for (int64_t m = 0; m < kda_npz_count(z); m++) { /* the inputs, value for value */
    const char *name = kda_npz_name(z, m);
    kda_array_info in;
    double *x;
    if (kda_npz_load_f64(z, name, &in, &x, err, sizeof err) ||
        kda_npz_writer_add_f64(w, name, in.dtype, in.ndim, in.shape, x, err, sizeof err))
      grad_fixture_die(name, err);
    free(x);
  }
  const kda_problem *p = &c.p;
  const int vk = p->state_layout == KDA_STATE_VK;
  const int64_t so[3] = {p->T, p->HV, p->V};
  const int64_t st[4] = {p->N, p->HV, vk ? p->V : p->K, vk ? p->K : p->V};
  const int64_t sc[4] = {p->n_checkpoints, p->HV, st[2], st[3]};
  grad_fixture_seed(w, "do", 20, 3, so);
  if (p->want_final_state) grad_fixture_seed(w, "dht", 21, 4, st);
  if (p->n_checkpoints > 0) grad_fixture_seed(w, "dhc", 22, 4, sc);
  if (kda_npz_writer_commit(w, err, sizeof err)) grad_fixture_die(out_path, err);
  kda_npz_close(z);
  remove(tmp);
  free(man);
  kda_case_free(&c);
  kda_gen_desc_free(&d);
}

#endif

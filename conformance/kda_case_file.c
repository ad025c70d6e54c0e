/* kda_case_file.c: one case file opened once for a run (SPEC.md §7.10, §10.2): the archive, the
 * inputs (whole, or only the token-independent ones for a streamed case), and the truth read
 * from the same open archive (verified member hashes, golden outputs, the sampled index).
 * SPDX-License-Identifier: MIT
 */
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_npz.h"
#include "kda_score_internal.h"

/* The inputs: whole when never streamed; else the token-independent ones, and the rest only
 * when the case is not streamed after all (auto, and short). */
static int read_inputs(kda_case_file *f, int32_t stream, char *err, size_t errlen) {
  if (stream == KDA_CASE_STREAM_NEVER) return kda_case_read(f->z, &f->c, 0, err, errlen);
  int st = kda_case_read(f->z, &f->c, 1, err, errlen);
  if (st != KDA_OK) return st;
  if (stream == KDA_CASE_STREAM_ALWAYS || kda_stream_auto(&f->c.p)) return f->streamed = 1, st;
  kda_case_free(&f->c);
  return kda_case_read(f->z, &f->c, 0, err, errlen);
}

int kda_case_file_open(const char *path, int32_t stream, int64_t chunk, kda_case_file *f,
                       char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  f->chunk = chunk;
  if (!path) return snprintf(err, errlen, "case path is NULL"), KDA_EINVAL;
  int st = kda_npz_open(path, &f->z, err, errlen);
  if (st == KDA_OK) st = read_inputs(f, stream, err, errlen);
  if (st == KDA_OK) st = kda_problem_sizes_get(&f->c.p, &f->sizes, err, errlen);
  if (st != KDA_OK) kda_case_file_close(f);
  return st;
}

int kda_case_file_truth(kda_case_file *f, char *err, size_t errlen) {
  if (f->has_truth) return KDA_OK;
  int st = f->streamed ? kda_truth_stream_read(&f->c, f->z, 0, f->chunk, &f->t, err, errlen)
                       : kda_truth_read(&f->c, f->z, &f->t, err, errlen);
  f->has_truth = st == KDA_OK;
  return st;
}

int kda_case_file_grad_truth(kda_case_file *f, char *err, size_t errlen) {
  if (f->g.present || f->streamed) return KDA_OK; /* streamed: no gradients (SPEC.md §13.7) */
  return kda_grad_truth_read(&f->c, f->z, NULL, &f->g, err, errlen);
}

void kda_case_file_close(kda_case_file *f) {
  kda_grad_truth_free(&f->g);
  kda_truth_free(&f->t); /* a streamed truth reads f->z: freed first */
  kda_case_free(&f->c);
  kda_npz_close(f->z);
  memset(f, 0, sizeof *f);
}

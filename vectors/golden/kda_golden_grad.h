/* kda_golden_grad.h: the golden gradient sets, golden/grad/L0 and golden/grad/L1 (SPEC.md §13.9).
 * SPDX-License-Identifier: MIT
 *
 * Layout of DIR (the grad/ folder of a golden directory):
 *   DIR/<level>/<id>.npz      a catalog case's inputs (as its forward golden file stores them),
 *                             the seeds do, dht, dhc (PRNG streams 11-13 of the case's seed, in
 *                             the input precision) and the certified gradients dq, dk, dv, dg,
 *                             dbeta, dA_log, ddt_bias, dh0 (<f8, those the problem has); the
 *                             manifest is the case manifest plus a "golden_grad" object.
 *   DIR/L0/<id>.txt           the adjoint traced step by step, every number exact.
 *   DIR/<level>/manifest.json the level's index (the float64 backward's errors in "ref_f64").
 * Everything written is deterministic; `kda golden --write` makes it, `--verify` regenerates
 * and compares it byte for byte.
 */
#ifndef KDA_GOLDEN_GRAD_H
#define KDA_GOLDEN_GRAD_H

#include <stddef.h>
#include <stdint.h>

#include "kda_backward.h"
#include "kda_case.h"
#include "kda_catalog.h"

#define KDA_GOLDEN_GRAD_SCHEMA "kda-golden-grad/1"
#define KDA_GOLDEN_GRAD_SET_SCHEMA "kda-golden-grad-set/1"

typedef struct kda_golden_grad_info {
  int64_t index;
  int32_t status, method;
  int64_t n_values, n_proven;
  int32_t prec_bits, reserved;
  double ref_max_ulps;      /* the float64 backward against the certified gradients */
  double ref_max_normwise;  /* max over gradients of max|ref - gold| / max|gold| */
  double seconds_certify, seconds_total;
} kda_golden_grad_info;

/* The gradient cases: every L0 catalog case, then the chosen L1 ones. */
int64_t kda_golden_grad_count(void);
const kda_catalog_entry *kda_golden_grad_entry(int64_t i);

/* Makes gradient case i into DIR/<level>/ (which must exist).  Returns KDA_OK or the failing
 * status, with a message naming the case. */
int kda_golden_grad_make(int64_t i, const char *dir, kda_golden_grad_info *info, char *err,
                         size_t errlen);
int kda_golden_grad_write_manifest(const char *dir, int32_t level,
                                   const kda_golden_grad_info *infos, char *err, size_t errlen);
/* Every case and both level manifests into DIR (created); *seconds the wall time. */
int kda_golden_grad_write_all(const char *dir, double *seconds, char *err, size_t errlen);
/* 1 when DIR/<level_dir_name>/<name> is a file the gradient sets own. */
int kda_golden_grad_owns(const char *level_dir_name, const char *name);

/* The adjoint of case c traced step by step for the seeds in d (SPEC.md §13.2); with exact,
 * every operation is checked exact and the traced gradients must equal d's (certified) ones bit
 * for bit.  Needs l2 off, gate log, beta prob.  *text freed by the caller.  Returns KDA_OK,
 * KDA_EINVAL (another mode, an inexact operation, a gradient that differs), KDA_ENOMEM. */
int kda_golden_grad_trace(const kda_case *c, const char *comment, const kda_tensors_f64 *t,
                          const kda_grads_f64 *d, int exact, char **text, char *err,
                          size_t errlen);

/* The trace of a golden gradient file (golden/grad/<level>/<id>.npz): its inputs, seeds and
 * certified gradients through kda_golden_grad_trace, exact for an L0 file (the text of
 * golden/grad/L0/<id>.txt).  Returns KDA_OK, the file's status, KDA_ENOTFOUND (no golden_grad
 * object), KDA_EINVAL (a mode the trace does not take), KDA_ENOMEM. */
int kda_golden_grad_trace_file(const char *path, char **text, char *err, size_t errlen);

#endif

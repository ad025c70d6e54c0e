/* kda_truth.c: the truth of a case and its magnitude scales (SPEC.md §7.3): golden outputs
 * read from the case file (once its members' hashes are verified) or the float64 reference,
 * the sampled index (§10.2), M[t, hv] by the float64 recurrence, and the fp32 envelope.
 * SPDX-License-Identifier: MIT
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_conform.h"
#include "kda_golden_check.h"
#include "kda_npz.h"
#include "kda_ref.h"
#include "kda_ref_internal.h"
#include "kda_score_internal.h"

static int mag_trace(const kda_case *c, const kda_truth *t, double *mag, char *err,
                     size_t errlen) {
  kda_tensors_f64 ts;
  kda_case_tensors(c, &ts); /* no outputs: magnitudes only */
  const kda_mag_rows rows = {t->o_index, t->n_rows, 0, 0};
  return kda_mag_trace(&c->p, &ts, t->o_index ? &rows : NULL, mag, err, errlen);
}


/* The golden outputs of the open case file z (NULL: none), once every member's bytes match the
 * SHA-256 its manifest records (golden.members_sha256, SPEC.md §8.10): a damaged o must not be
 * blamed on every backend. */
static int load_golden(kda_npz *z, const kda_problem *p, kda_truth *t, int *found, char *err,
                       size_t errlen) {
  *found = 0;
  if (!z || !kda_npz_has(z, "o")) return KDA_OK;
  const char *path = kda_npz_path(z);
  char msg[KDA_ERRLEN];
  if (kda_golden_check_members_open(z, msg, sizeof msg) != KDA_OK)
    return snprintf(err, errlen, "golden outputs not verified: %s", msg), KDA_EFORMAT;
  int st;
  if (t->o_index) {
    st = kda_sampled_read_o(z, path, p, t->n_rows, t->out.o, err, errlen);
    if (st == KDA_OK)
      st = kda_output_members_read(z, path, p, NULL, t->out.ht, t->out.hc, err, errlen);
  } else {
    st = kda_output_members_read(z, path, p, t->out.o, t->out.ht, t->out.hc, err, errlen);
  }
  if (st == KDA_OK) *found = 1;
  return st;
}

/* Sampled truth (SPEC.md §10.2): the stored tokens, and o shrunk to their rows. */
static int sampled_rows(const kda_case *c, kda_npz *z, kda_truth *t, char *err, size_t errlen) {
  t->n_rows = c->p.T;
  if (!z || !kda_sampled_declared(c)) return KDA_OK;
  int st = kda_sampled_read_index(z, kda_npz_path(z), &c->p, &t->o_index, &t->n_rows, err,
                                  errlen);
  if (st != KDA_OK) return st;
  free(t->out.o);
  t->out.n_o = (uint64_t)(t->n_rows * c->p.HV * c->p.V);
  t->out.o = malloc((size_t)t->out.n_o * sizeof(double));
  if (!t->out.o) return snprintf(err, errlen, "out of memory for the truth"), KDA_ENOMEM;
  return KDA_OK;
}

/* The truth's arrays: outputs, the sampled index, magnitudes. */
static int truth_alloc(const kda_case *c, kda_npz *z, kda_truth *t, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  int st = kda_outputs_alloc(p, &t->out, err, errlen);
  if (st == KDA_OK) st = sampled_rows(c, z, t, err, errlen);
  if (st != KDA_OK) return st;
  t->mag_o = calloc((size_t)(t->n_rows * p->HV) + 1, sizeof(double));
  t->mag_ht = calloc((size_t)(p->N * p->HV) + 1, sizeof(double));
  t->mag_hc = calloc((size_t)(p->n_checkpoints * p->HV) + 1, sizeof(double));
  if (!t->mag_o || !t->mag_ht || !t->mag_hc)
    return snprintf(err, errlen, "out of memory for the truth"), KDA_ENOMEM;
  return KDA_OK;
}

/* An evaluation's own growth on the case (SPEC.md §7.5, for --strict), scored as any
 * backend's: the envelope keeps the largest class and exponent, and each last-window mean. */
typedef struct growth_ctx {
  const kda_case *c;
  kda_truth *t;
} growth_ctx;

static int eval_growth(void *ctx, const kda_outputs *obs, int n_eval, char *err,
                       size_t errlen) {
  growth_ctx *g = ctx;
  kda_truth plain = *g->t;
  memset(&plain.env, 0, sizeof plain.env);
  kda_score s;
  int st = kda_score_outputs(g->c, &plain, obs, KDA_PRECISION_FP32, &s, err, errlen);
  kda_envelope *env = &g->t->env;
  if (st == KDA_OK) {
    if (s.growth_kind > env->growth_kind) env->growth_kind = s.growth_kind;
    if (!(env->alpha >= s.alpha)) env->alpha = s.alpha;
    if (n_eval >= 0 && n_eval <= KDA_ENVELOPE_MEMBERS) env->win_lasts[n_eval] = s.win_last;
  }
  kda_score_free(&s);
  return st;
}

/* The fp32 envelope of SPEC.md §7.3 (kda_envelope.c) with each evaluation's growth. */
static int truth_envelope(const kda_case *c, kda_truth *t, int ensemble, char *err,
                          size_t errlen) {
  kda_outputs obs;
  int st = kda_outputs_alloc(&c->p, &obs, err, errlen);
  growth_ctx g = {c, t};
  if (st == KDA_OK) st = kda_envelope_compute(c, t, ensemble, &obs, eval_growth, &g, err, errlen);
  kda_outputs_free(&obs);
  return st;
}

static int truth_read(const kda_case *c, kda_npz *z, kda_truth *t, int ensemble, char *err,
                      size_t errlen);

int kda_truth_read(const kda_case *c, kda_npz *z, kda_truth *t, char *err, size_t errlen) {
  return truth_read(c, z, t, 1, err, errlen);
}

int kda_truth_compute_lazy(const kda_case *c, kda_truth *t, char *err, size_t errlen) {
  return truth_read(c, NULL, t, 0, err, errlen);
}

int kda_truth_widen(const kda_case *c, kda_truth *t, char *err, size_t errlen) {
  if (t->env.members >= 0 || t->stream) return KDA_OK; /* already decided */
  kda_envelope_free(&t->env);
  return truth_envelope(c, t, 1, err, errlen);
}

static int truth_read(const kda_case *c, kda_npz *z, kda_truth *t, int ensemble, char *err,
                      size_t errlen) {
  memset(t, 0, sizeof *t);
  const kda_problem *p = &c->p;
  int golden = 0;
  int st = truth_alloc(c, z, t, err, errlen);
  if (st == KDA_OK) st = load_golden(z, p, t, &golden, err, errlen);
  if (st == KDA_OK && !golden && t->o_index)
    st = KDA_EFORMAT, snprintf(err, errlen, "%s: golden.o_sampled but no member 'o'",
                               kda_npz_path(z));
  if (st == KDA_OK && !golden) {
    kda_tensors_f64 ts;
    kda_case_tensors(c, &ts);
    ts.o = t->out.o, ts.ht = t->out.ht, ts.hc = t->out.hc;
    st = kda_ref_forward_f64(p, &ts, err, errlen);
  }
  if (st == KDA_OK) st = mag_trace(c, t, t->mag_o, err, errlen);
  if (st != KDA_OK) return kda_truth_free(t), st;
  t->from_golden = golden;
  if (t->out.ht) kda_score_head_max(t->out.ht, p->N, p->HV, p->K * p->V, t->mag_ht);
  if (t->out.hc) kda_score_head_max(t->out.hc, p->n_checkpoints, p->HV, p->K * p->V, t->mag_hc);
  int stored = 0; /* a golden file's own envelope (SPEC.md §10.2), its hashes verified above */
  if (golden) st = kda_envelope_stored(z, c, &t->env, &stored, err, errlen);
  if (st == KDA_OK && !stored) st = truth_envelope(c, t, ensemble, err, errlen);
  if (st != KDA_OK) kda_truth_free(t);
  return st;
}

int kda_truth_compute(const kda_case *c, const char *path, kda_truth *t, char *err,
                      size_t errlen) {
  kda_npz *z = NULL;
  memset(t, 0, sizeof *t);
  int st = path ? kda_npz_open(path, &z, err, errlen) : KDA_OK;
  if (st == KDA_OK) st = kda_truth_read(c, z, t, err, errlen);
  kda_npz_close(z);
  return st;
}

void kda_truth_free(kda_truth *t) {
  kda_outputs_free(&t->out);
  free(t->mag_o);
  free(t->mag_rows);
  free(t->mag_ht);
  free(t->mag_hc);
  kda_envelope_free(&t->env);
  free(t->o_index);
  kda_stream_free(t->stream);
  memset(t, 0, sizeof *t);
}

int kda_truth_stream_read(const kda_case *c, kda_npz *z, int owns_z, int64_t chunk,
                          kda_truth *t, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  int st = kda_stream_truth_pass(c, z, owns_z, chunk, t, err, errlen);
  if (st != KDA_OK) kda_truth_free(t);
  return st;
}

int kda_truth_stream(const kda_case *c, const char *path, int64_t chunk, kda_truth *t,
                     char *err, size_t errlen) {
  kda_npz *z;
  memset(t, 0, sizeof *t);
  int st = kda_npz_open(path, &z, err, errlen);
  return st == KDA_OK ? kda_truth_stream_read(c, z, 1, chunk, t, err, errlen) : st;
}

/* kda_test_grad.h: gradient test cases shared by the backward tests (ref/tests/check_backward.c,
 * ref/oracle/tests/check_mpfr_grad.c): mode configurations, a case with random inputs and
 * seeds, the loss of SPEC.md §13.1 and the list of (input, gradient) pairs.  Test code only.
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_TEST_GRAD_H
#define KDA_TEST_GRAD_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backward.h"
#include "kda_ref.h"
#include "kda_test.h"

/* One configuration: the problem's modes and shape. */
typedef struct bconf {
  const char *name;
  int32_t family, gate, beta, l2, head_map, layout, has_A_log, h0, final;
  int64_t N, T, H, HV, K, V, C;
  int tiny_key; /* one key vector scaled to norm 1e-9 (ggml's floor branch, fla's eps) */
  int wipe;     /* one gate channel -inf (log gate): dg there is 0 */
} bconf;

static const bconf confs[] = {
    /* name         fam  gate bet l2 map lay A  h0 fin  N  T  H HV K  V  C tiny wipe */
    {"base",          0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 5, 1, 1, 3, 2, 0, 0, 0},
    {"base_h0",       0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 6, 1, 1, 3, 4, 0, 0, 0},
    {"softplus",      0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 5, 1, 1, 3, 2, 0, 0, 0},
    {"lb_A",          0, 2, 2, 2, 0, 0, 1, 1, 1, 1, 5, 1, 1, 4, 3, 0, 0, 0},
    {"lb_noA",        0, 2, 0, 1, 0, 1, 0, 1, 1, 1, 5, 1, 1, 3, 2, 0, 0, 0},
    {"gdn",           1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 5, 1, 1, 3, 2, 0, 0, 0},
    {"gdn_lb",        1, 2, 2, 2, 1, 1, 0, 1, 1, 1, 4, 1, 2, 3, 2, 0, 0, 0},
    {"deltanet",      2, 0, 1, 1, 0, 0, 0, 1, 1, 1, 5, 1, 1, 3, 2, 0, 0, 0},
    {"linear",        3, 0, 0, 0, 0, 0, 0, 1, 1, 1, 5, 1, 1, 3, 2, 0, 0, 0},
    {"gva_div",       0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 4, 2, 4, 3, 2, 0, 0, 0},
    {"gva_mod",       0, 2, 2, 2, 1, 1, 1, 1, 1, 1, 4, 2, 4, 3, 2, 0, 0, 0},
    {"varlen_ckpt",   0, 1, 1, 1, 0, 1, 1, 1, 1, 4, 9, 1, 2, 3, 2, 3, 0, 0},
    {"ckpt_nofinal",  0, 0, 2, 2, 0, 0, 0, 0, 0, 1, 7, 1, 1, 3, 2, 2, 0, 0},
    {"tiny_fla",      0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 4, 1, 1, 3, 2, 0, 1, 0},
    {"tiny_ggml",     0, 0, 0, 2, 0, 0, 0, 1, 1, 1, 4, 1, 1, 3, 2, 0, 1, 0},
    {"wipe",          0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 5, 1, 1, 3, 2, 0, 0, 1},
    {"long_blocks",   0, 1, 2, 1, 0, 0, 1, 1, 1, 2, 23, 1, 1, 2, 2, 2, 0, 0},
};
#define NCONF ((int)(sizeof confs / sizeof confs[0]))

/* A case: problem, inputs, seeds and gradients, float64. */
typedef struct bcase {
  kda_problem p;
  double *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0;   /* inputs */
  double *o, *ht, *hc;                                  /* forward outputs */
  double *dout, *dht, *dhc;                             /* seeds */
  double *dq, *dk, *dv, *dg, *dbeta, *dA_log, *ddt_bias, *dh0; /* gradients */
  int64_t cu[8], cp[8];
  uint64_t seed;
} bcase;

static inline size_t gwid(const kda_problem *p) { return (size_t)kda_problem_gate_width(p); }
static inline size_t nqk(const kda_problem *p) { return (size_t)(p->T * p->H * p->K); }
static inline size_t nv(const kda_problem *p) { return (size_t)(p->T * p->HV * p->V); }
static inline size_t ng(const kda_problem *p) { return (size_t)(p->T * p->HV) * gwid(p); }
static inline size_t nb(const kda_problem *p) { return (size_t)(p->T * p->HV); }
static inline size_t nslot(const kda_problem *p) { return (size_t)(p->HV * p->K * p->V); }

static inline void fill(double *x, size_t n, uint64_t *s, double lo, double hi) {
  for (size_t i = 0; i < n; i++) x[i] = kda_test_urange(s, lo, hi);
}

static inline void bc_make(bcase *c, const bconf *f, uint64_t seed) {
  memset(c, 0, sizeof *c);
  kda_problem *p = &c->p;
  kda_problem_init(p, f->T, f->H, f->HV, f->K, f->V);
  p->family = f->family, p->gate_mode = f->gate, p->beta_mode = f->beta, p->l2_mode = f->l2;
  p->head_map = f->head_map, p->state_layout = f->layout, p->has_A_log = f->has_A_log;
  p->has_initial_state = f->h0, p->want_final_state = f->final;
  p->N = f->N, p->n_checkpoints = f->C, p->lower_bound = -2.5;
  c->seed = seed;
  uint64_t s = seed;
  /* cu_seqlens: sequence 1 empty when N > 2; the rest split T. */
  c->cu[0] = 0;
  for (int64_t n = 1; n <= p->N; n++) c->cu[n] = (n == 2 && p->N > 2) ? c->cu[1] : p->T * n / p->N;
  c->cu[p->N] = p->T;
  for (int64_t i = 0; i < p->n_checkpoints; i++) c->cp[i] = (p->T * (2 * i + 1)) / (2 * p->n_checkpoints);
  const size_t st = (size_t)p->N * nslot(p), hc = (size_t)p->n_checkpoints * nslot(p);
  double **in[] = {&c->q, &c->k, &c->dq, &c->dk};
  for (int i = 0; i < 4; i++) *in[i] = kda_test_dalloc(nqk(p));
  double **vv[] = {&c->v, &c->o, &c->dout, &c->dv};
  for (int i = 0; i < 4; i++) *vv[i] = kda_test_dalloc(nv(p));
  c->g = kda_test_dalloc(ng(p)), c->dg = kda_test_dalloc(ng(p));
  c->beta = kda_test_dalloc(nb(p)), c->dbeta = kda_test_dalloc(nb(p));
  c->A_log = kda_test_dalloc((size_t)p->HV), c->dA_log = kda_test_dalloc((size_t)p->HV);
  c->dt_bias = kda_test_dalloc((size_t)p->HV * gwid(p));
  c->ddt_bias = kda_test_dalloc((size_t)p->HV * gwid(p));
  double **ss[] = {&c->h0, &c->ht, &c->dht, &c->dh0};
  for (int i = 0; i < 4; i++) *ss[i] = kda_test_dalloc(st);
  c->hc = kda_test_dalloc(hc), c->dhc = kda_test_dalloc(hc);
  fill(c->q, nqk(p), &s, -1, 1);
  fill(c->k, nqk(p), &s, -1, 1);
  fill(c->v, nv(p), &s, -1, 1);
  fill(c->g, ng(p), &s, p->gate_mode == KDA_GATE_LOG ? -1.0 : -3.0,
       p->gate_mode == KDA_GATE_LOG ? -0.05 : 3.0);
  fill(c->beta, nb(p), &s, p->beta_mode == KDA_BETA_PROB ? 0.1 : -3.0,
       p->beta_mode == KDA_BETA_PROB ? 1.0 : 3.0);
  fill(c->A_log, (size_t)p->HV, &s, -1, 1);
  fill(c->dt_bias, (size_t)p->HV * gwid(p), &s, -1, 1);
  fill(c->h0, st, &s, -1, 1);
  fill(c->dout, nv(p), &s, -1, 1);
  fill(c->dht, st, &s, -1, 1);
  fill(c->dhc, hc, &s, -1, 1);
  if (f->tiny_key) /* token 1's key (and query) near zero */
    for (int64_t i = 0; i < p->K; i++) c->k[p->H * p->K + i] *= 1e-9, c->q[i] *= 1e-9;
  if (f->wipe) c->g[p->HV * p->K + 1] = -INFINITY; /* token 1, head 0, channel 1 */
}

static inline void bc_free(bcase *c) {
  double *b[] = {c->q,   c->k,  c->v,   c->g,    c->beta, c->A_log, c->dt_bias, c->h0,
                 c->o,   c->ht, c->hc,  c->dout, c->dht,  c->dhc,   c->dq,      c->dk,
                 c->dv,  c->dg, c->dbeta, c->dA_log, c->ddt_bias, c->dh0};
  for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) free(b[i]);
}

static inline kda_tensors_f64 bc_tensors(bcase *c) {
  kda_tensors_f64 t = {c->q, c->k, c->v, c->g, c->beta, c->A_log, c->dt_bias, c->h0,
                       c->cu, c->cp, c->o, c->ht, c->hc};
  return t;
}

static inline kda_grads_f64 bc_grads(bcase *c) {
  kda_grads_f64 d = {c->dout, c->dht, c->dhc, c->dq, c->dk, c->dv, c->dg, c->dbeta,
                     c->dA_log, c->ddt_bias, c->dh0};
  return d;
}

/* L of SPEC.md §13.1 from one forward call, summed in long double. */
static inline double loss(bcase *c) {
  char err[KDA_ERRLEN] = "";
  kda_tensors_f64 t = bc_tensors(c);
  int st = kda_ref_forward_f64(&c->p, &t, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "forward: %s", err);
  const kda_problem *p = &c->p;
  long double L = 0;
  for (size_t i = 0; i < nv(p); i++) L += (long double)c->dout[i] * c->o[i];
  if (p->want_final_state)
    for (size_t i = 0; i < (size_t)p->N * nslot(p); i++) L += (long double)c->dht[i] * c->ht[i];
  for (size_t i = 0; i < (size_t)p->n_checkpoints * nslot(p); i++)
    L += (long double)c->dhc[i] * c->hc[i];
  return (double)L;
}

/* One input tensor and its gradient. */
typedef struct slot {
  const char *name;
  double *x, *dx;
  size_t n;
} slot;

static inline int slots_of(bcase *c, slot *s) {
  const kda_problem *p = &c->p;
  int m = 0;
  s[m++] = (slot){"q", c->q, c->dq, nqk(p)};
  s[m++] = (slot){"k", c->k, c->dk, nqk(p)};
  s[m++] = (slot){"v", c->v, c->dv, nv(p)};
  s[m++] = (slot){"beta", c->beta, c->dbeta, nb(p)};
  if (kda_problem_uses_g(p)) s[m++] = (slot){"g", c->g, c->dg, ng(p)};
  if (kda_problem_uses_dt_bias(p))
    s[m++] = (slot){"dt_bias", c->dt_bias, c->ddt_bias, (size_t)p->HV * gwid(p)};
  if (kda_problem_uses_A_log(p)) s[m++] = (slot){"A_log", c->A_log, c->dA_log, (size_t)p->HV};
  if (p->has_initial_state) s[m++] = (slot){"h0", c->h0, c->dh0, (size_t)p->N * nslot(p)};
  return m;
}

#endif

/* check_backward.c: the backward references (SPEC.md §13) against finite differences.
 * SPDX-License-Identifier: MIT
 *
 * For each mode configuration below, random inputs and random seeds do, dht, dhc; the loss
 * L = sum do*o + sum dht*ht + sum dhc*hc of kda_ref_forward_f64; every gradient element of
 * kda_ref_backward_f64 against the central difference (L(x+h) - L(x-h)) / 2h of that input
 * element, h = 1e-5 max(|x|, 0.1) (1e-8 for the near-zero vectors).  The difference's
 * error is O(h^2) + O(u |L| / h), below 1e-8 of the gradients' size here; the check allows 1e-6 of the largest gradient of the tensor.
 * Then the float32 twin against the float64 backward (1e-4 of the largest gradient), and
 * the argument checks.  Seeds are printed on failure.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
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

static size_t gwid(const kda_problem *p) { return (size_t)kda_problem_gate_width(p); }
static size_t nqk(const kda_problem *p) { return (size_t)(p->T * p->H * p->K); }
static size_t nv(const kda_problem *p) { return (size_t)(p->T * p->HV * p->V); }
static size_t ng(const kda_problem *p) { return (size_t)(p->T * p->HV) * gwid(p); }
static size_t nb(const kda_problem *p) { return (size_t)(p->T * p->HV); }
static size_t nslot(const kda_problem *p) { return (size_t)(p->HV * p->K * p->V); }

static void fill(double *x, size_t n, uint64_t *s, double lo, double hi) {
  for (size_t i = 0; i < n; i++) x[i] = kda_test_urange(s, lo, hi);
}

static void bc_make(bcase *c, const bconf *f, uint64_t seed) {
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

static void bc_free(bcase *c) {
  double *b[] = {c->q,   c->k,  c->v,   c->g,    c->beta, c->A_log, c->dt_bias, c->h0,
                 c->o,   c->ht, c->hc,  c->dout, c->dht,  c->dhc,   c->dq,      c->dk,
                 c->dv,  c->dg, c->dbeta, c->dA_log, c->ddt_bias, c->dh0};
  for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) free(b[i]);
}

static kda_tensors_f64 bc_tensors(bcase *c) {
  kda_tensors_f64 t = {c->q, c->k, c->v, c->g, c->beta, c->A_log, c->dt_bias, c->h0,
                       c->cu, c->cp, c->o, c->ht, c->hc};
  return t;
}

static kda_grads_f64 bc_grads(bcase *c) {
  kda_grads_f64 d = {c->dout, c->dht, c->dhc, c->dq, c->dk, c->dv, c->dg, c->dbeta,
                     c->dA_log, c->ddt_bias, c->dh0};
  return d;
}

/* L of SPEC.md §13.1 from one forward call, summed in long double. */
static double loss(bcase *c) {
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

static int slots_of(bcase *c, slot *s) {
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

/* Every gradient element against the central difference; returns the worst error / allowance. */
static double fd_check(bcase *c, const char *name) {
  slot sl[8];
  const int m = slots_of(c, sl);
  double worst = 0;
  for (int s = 0; s < m; s++) {
    double mag = 1e-300;
    for (size_t e = 0; e < sl[s].n; e++) mag = fmax(mag, fabs(sl[s].dx[e]));
    for (size_t e = 0; e < sl[s].n; e++) {
      const double x0 = sl[s].x[e];
      if (isinf(x0)) { /* a wiped channel: exp(-inf) = 0, so dg = 0 exactly */
        ck_assert_msg(sl[s].dx[e] == 0.0, "%s: d%s[%zu] = %g at -inf", name, sl[s].name, e,
                      sl[s].dx[e]);
        continue;
      }
      /* The step: 1e-8 for the near-zero vectors (fla's L2 bends on the scale sqrt(eps) =
       * 1e-3; ggml's floor is linear below eps = 1e-6), 1e-5 max(|x|, 0.1) otherwise. */
      const double ax = fabs(x0);
      const double h = ax < 1e-6 ? 1e-8 : 1e-5 * fmax(ax, 0.1);
      sl[s].x[e] = x0 + h;
      const double lp = loss(c);
      sl[s].x[e] = x0 - h;
      const double lm = loss(c);
      sl[s].x[e] = x0;
      const double fd = (lp - lm) / (2 * h), tol = 1e-6 * fmax(mag, 1e-3);
      const double r = fabs(fd - sl[s].dx[e]) / tol;
      if (r > worst) worst = r;
      ck_assert_msg(r <= 1.0, "%s: d%s[%zu] = %.17g, finite difference %.17g (tol %g, seed %llu)",
                    name, sl[s].name, e, sl[s].dx[e], fd, tol, (unsigned long long)c->seed);
    }
  }
  return worst;
}

static void run_backward(bcase *c) {
  char err[KDA_ERRLEN] = "";
  kda_tensors_f64 t = bc_tensors(c);
  kda_grads_f64 d = bc_grads(c);
  int st = kda_ref_backward_f64(&c->p, &t, &d, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "kda_ref_backward_f64: %d %s", st, err);
}

START_TEST(test_fd_f64) {
  const bconf *f = &confs[_i];
  for (uint64_t seed = 1; seed <= 2; seed++) {
    bcase c;
    bc_make(&c, f, seed * 7919 + (uint64_t)_i);
    run_backward(&c);
    fd_check(&c, f->name);
    bc_free(&c);
  }
}
END_TEST

/* The float32 twin against the float64 backward on the same (float-representable) inputs. */
START_TEST(test_f32_twin) {
  const bconf *f = &confs[_i];
  bcase c;
  bc_make(&c, f, 104729 + (uint64_t)_i);
  slot sl[8];
  const int m = slots_of(&c, sl);
  double *seeds[] = {c.dout, c.dht, c.dhc};
  size_t nseed[] = {nv(&c.p), (size_t)c.p.N * nslot(&c.p), (size_t)c.p.n_checkpoints * nslot(&c.p)};
  for (int s = 0; s < m; s++)
    for (size_t e = 0; e < sl[s].n; e++) sl[s].x[e] = (double)(float)sl[s].x[e];
  for (int s = 0; s < 3; s++)
    for (size_t e = 0; e < nseed[s]; e++) seeds[s][e] = (double)(float)seeds[s][e];
  run_backward(&c);
  /* float copies of every buffer */
  float *fx[8], *fdx[8], *fs[3];
  for (int s = 0; s < m; s++) {
    fx[s] = calloc(sl[s].n + 1, sizeof(float));
    fdx[s] = calloc(sl[s].n + 1, sizeof(float));
    ck_assert(fx[s] && fdx[s]);
    for (size_t e = 0; e < sl[s].n; e++) fx[s][e] = (float)sl[s].x[e];
  }
  for (int s = 0; s < 3; s++) {
    fs[s] = calloc(nseed[s] + 1, sizeof(float));
    ck_assert(fs[s]);
    for (size_t e = 0; e < nseed[s]; e++) fs[s][e] = (float)seeds[s][e];
  }
  const float *in[8] = {0};
  float *out[8] = {0};
  const char *names[] = {"q", "k", "v", "beta", "g", "dt_bias", "A_log", "h0"};
  for (int s = 0; s < m; s++)
    for (int n = 0; n < 8; n++)
      if (strcmp(sl[s].name, names[n]) == 0) in[n] = fx[s], out[n] = fdx[s];
  kda_tensors_f32 t = {in[0], in[1], in[2], in[4], in[3], in[6], in[5], in[7], c.cu, c.cp,
                       NULL, NULL, NULL};
  kda_grads_f32 d = {fs[0], fs[1], fs[2], out[0], out[1], out[2], out[4], out[3], out[6], out[5],
                     out[7]};
  char err[KDA_ERRLEN] = "";
  int st = kda_ref_backward_f32(&c.p, &t, &d, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "kda_ref_backward_f32: %s", err);
  for (int s = 0; s < m; s++) {
    double mag = 1e-300;
    for (size_t e = 0; e < sl[s].n; e++) mag = fmax(mag, fabs(sl[s].dx[e]));
    for (size_t e = 0; e < sl[s].n; e++)
      ck_assert_msg(fabs((double)fdx[s][e] - sl[s].dx[e]) <= 1e-4 * fmax(mag, 1e-3),
                    "%s: f32 d%s[%zu] = %.9g, f64 %.17g", f->name, sl[s].name, e,
                    (double)fdx[s][e], sl[s].dx[e]);
    free(fx[s]);
    free(fdx[s]);
  }
  for (int s = 0; s < 3; s++) free(fs[s]);
  bc_free(&c);
}
END_TEST

/* Argument checks: a NULL gradient the problem needs is named; bad problems are refused. */
START_TEST(test_errors) {
  bcase c;
  bc_make(&c, &confs[2], 5);
  kda_tensors_f64 t = bc_tensors(&c);
  kda_grads_f64 d = bc_grads(&c);
  char err[KDA_ERRLEN] = "";
  d.dA_log = NULL;
  ck_assert_int_eq(kda_ref_backward_f64(&c.p, &t, &d, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "dA_log"));
  d = bc_grads(&c);
  d.dout = NULL;
  ck_assert_int_eq(kda_ref_backward_f64(&c.p, &t, &d, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "buffer do "));
  d = bc_grads(&c);
  d.dh0 = NULL;
  ck_assert_int_eq(kda_ref_backward_f64(&c.p, &t, &d, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "dh0"));
  d = bc_grads(&c);
  ck_assert_int_eq(kda_ref_backward_f64(&c.p, &t, NULL, err, sizeof err), KDA_EINVAL);
  ck_assert_int_eq(kda_ref_backward_f64(&c.p, NULL, &d, err, sizeof err), KDA_EINVAL);
  c.p.H = 2, c.p.HV = 3;
  ck_assert_int_eq(kda_ref_backward_f64(&c.p, &t, &d, err, sizeof err), KDA_EINVAL);
  bc_free(&c);
}
END_TEST

/* NULL seeds dht/dhc mean zero: the gradients equal those with zero-filled seeds. */
START_TEST(test_null_seeds) {
  bcase c;
  bc_make(&c, &confs[11], 77);
  memset(c.dht, 0, (size_t)c.p.N * nslot(&c.p) * sizeof(double));
  memset(c.dhc, 0, (size_t)c.p.n_checkpoints * nslot(&c.p) * sizeof(double));
  run_backward(&c);
  double *dq = malloc(nqk(&c.p) * sizeof *dq);
  ck_assert_ptr_nonnull(dq);
  memcpy(dq, c.dq, nqk(&c.p) * sizeof *dq);
  kda_tensors_f64 t = bc_tensors(&c);
  kda_grads_f64 d = bc_grads(&c);
  d.dht = NULL, d.dhc = NULL;
  char err[KDA_ERRLEN] = "";
  ck_assert_int_eq(kda_ref_backward_f64(&c.p, &t, &d, err, sizeof err), KDA_OK);
  ck_assert(memcmp(dq, c.dq, nqk(&c.p) * sizeof *dq) == 0);
  free(dq);
  bc_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("backward");
  TCase *tc = tcase_create("backward");
  tcase_add_loop_test(tc, test_fd_f64, 0, NCONF);
  tcase_add_loop_test(tc, test_f32_twin, 0, NCONF);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_null_seeds);
  suite_add_tcase(s, tc);
  return kda_test_main(s, CK_NORMAL, CK_FORK_GETENV);
}

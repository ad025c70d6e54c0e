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
#include "kda_test_grad.h"

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

/* The worked example of docs/math.md ("The backward pass, by hand"): two tokens, K = V = 2,
 * h0, do = ((1, 0), (0, 1)), dht = [[0, 0], [1, 0]]; every gradient a dyadic rational. */
START_TEST(test_worked_example) {
  kda_problem p;
  kda_problem_init(&p, 2, 1, 1, 2, 2);
  p.scale = 0.5;
  p.has_initial_state = 1;
  const double q[] = {1, 1, 2, 0}, k[] = {1, 0, 0, 1}, v[] = {3, 1, -1, 2};
  const double g[] = {0.0, log(0.5), log(0.5), log(0.25)}, beta[] = {0.5, 1.0};
  const double h0[] = {1, 2, 0, 4}, dout[] = {1, 0, 0, 1}, dht[] = {0, 0, 1, 0};
  double o[4], ht[4], dq[4], dk[4], dv[4], dg[4], dbeta[2], dh0[4];
  kda_tensors_f64 t = {q, k, v, g, beta, NULL, NULL, h0, NULL, NULL, o, ht, NULL};
  kda_grads_f64 d = {dout, dht, NULL, dq, dk, dv, dg, dbeta, NULL, NULL, dh0};
  char err[KDA_ERRLEN] = "";
  ck_assert_int_eq(kda_ref_forward_f64(&p, &t, err, sizeof err), KDA_OK);
  ck_assert(o[0] == 1 && o[1] == 1.75 && o[2] == 1 && o[3] == 0.75);
  ck_assert_int_eq(kda_ref_backward_f64(&p, &t, &d, err, sizeof err), KDA_OK);
  const double want_dq[] = {1, 0, 0.375, 1}, want_dk[] = {-0.5, 0, 0.5, -1};
  const double want_dv[] = {0.25, 0.25, 1, 0}, want_dg[] = {0.75, 0, 0.75, 0};
  const double want_dbeta[] = {0.5, -1}, want_dh0[] = {0.25, 0.25, 0.25, 0};
  for (int e = 0; e < 4; e++) {
    ck_assert_msg(dq[e] == want_dq[e], "dq[%d] = %g", e, dq[e]);
    ck_assert_msg(dk[e] == want_dk[e], "dk[%d] = %g", e, dk[e]);
    ck_assert_msg(dv[e] == want_dv[e], "dv[%d] = %g", e, dv[e]);
    ck_assert_msg(dg[e] == want_dg[e], "dg[%d] = %g", e, dg[e]);
    ck_assert_msg(dh0[e] == want_dh0[e], "dh0[%d] = %g", e, dh0[e]);
  }
  ck_assert(dbeta[0] == want_dbeta[0] && dbeta[1] == want_dbeta[1]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("backward");
  TCase *tc = tcase_create("backward");
  tcase_add_loop_test(tc, test_fd_f64, 0, NCONF);
  tcase_add_loop_test(tc, test_f32_twin, 0, NCONF);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_null_seeds);
  tcase_add_test(tc, test_worked_example);
  suite_add_tcase(s, tc);
  return kda_test_main(s, CK_NORMAL, CK_FORK_GETENV);
}

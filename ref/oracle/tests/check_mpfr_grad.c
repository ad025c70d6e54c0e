/* check_mpfr_grad.c: the certified gradients (kda_mpfr_backward, SPEC.md §13.8).
 * SPDX-License-Identifier: MIT
 *
 * 1. Against finite differences in MPFR: a plain forward of SPEC.md §3-§5 written here at 480
 *    bits (no bound, no shared code with the oracle) gives L(x + h) and L(x - h) for
 *    h = 2^-100 |x| (2^-100 at 0); the central difference is the gradient to about 2^-190
 *    relative (truncation h^2, cancellation 2^-480 / h), so its binary64 rounding must equal
 *    the certified value bit for bit, for every gradient element of every mode configuration
 *    of tests/kda_test_grad.h.
 * 2. Against the float64 backward reference: within 1e-10 of the largest gradient.
 * 3. Soundness at low precision: one ball evaluation at 53..80 bits proves many values; every
 *    value it proves must equal the certified one.
 * 4. Method and MPFR's global state after the call; error returns.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "kda_backward.h"
#include "kda_mpfr.h"
#include "kda_mpfr_impl.h"
#include "kda_test.h"
#include "kda_test_grad.h"

#define FDP 480 /* bits of the finite-difference forward */

/* The perturbed element: input tensor `which` (a slot name), element e, x + delta. */
typedef struct perturb {
  const double *base;
  size_t e;
  mpfr_srcptr delta;
} perturb;

/* x[e] of a tensor as an MPFR number, plus delta when it is the perturbed element. */
static void getx(mpfr_ptr out, const double *x, size_t e, const perturb *pt) {
  mpfr_set_d(out, x[e], MPFR_RNDN);
  if (pt && pt->base == x && pt->e == e) mpfr_add(out, out, pt->delta, MPFR_RNDN);
}

static void sigm(mpfr_ptr out, mpfr_srcptr y) { /* 1 / (1 + e^-y) */
  mpfr_t t;
  mpfr_init2(t, FDP);
  mpfr_neg(t, y, MPFR_RNDN);
  mpfr_exp(t, t, MPFR_RNDN);
  mpfr_add_ui(t, t, 1, MPFR_RNDN);
  mpfr_ui_div(out, 1, t, MPFR_RNDN);
  mpfr_clear(t);
}

/* y = L2(x) of K elements starting at x + off (SPEC.md §4.3). */
static void l2(const kda_problem *p, const double *x, size_t off, const perturb *pt, mpfr_t *y) {
  mpfr_t ss, d, t;
  mpfr_inits2(FDP, ss, d, t, (mpfr_ptr)0);
  mpfr_set_zero(ss, 1);
  for (int64_t i = 0; i < p->K; i++) {
    getx(y[i], x, off + (size_t)i, pt);
    mpfr_sqr(t, y[i], MPFR_RNDN);
    mpfr_add(ss, ss, t, MPFR_RNDN);
  }
  if (p->l2_mode != KDA_L2_OFF) {
    if (p->l2_mode == KDA_L2_FLA) {
      mpfr_add_d(d, ss, p->l2_eps, MPFR_RNDN);
      mpfr_sqrt(d, d, MPFR_RNDN);
    } else {
      mpfr_sqrt(d, ss, MPFR_RNDN);
      if (mpfr_cmp_d(d, p->l2_eps) <= 0) mpfr_set_d(d, p->l2_eps, MPFR_RNDN);
    }
    for (int64_t i = 0; i < p->K; i++) mpfr_div(y[i], y[i], d, MPFR_RNDN);
  }
  mpfr_clears(ss, d, t, (mpfr_ptr)0);
}

/* L (SPEC.md §13.1) of case c at FDP bits with one input element perturbed. */
static void loss_mpfr(bcase *c, const perturb *pt, mpfr_ptr L) {
  const kda_problem *p = &c->p;
  const int64_t K = p->K, V = p->V, GW = kda_problem_gate_width(p);
  mpfr_t *S = malloc((size_t)(K * V) * sizeof *S), *q = malloc((size_t)K * sizeof *q);
  mpfr_t *k = malloc((size_t)K * sizeof *k), *a = malloc((size_t)K * sizeof *a);
  mpfr_t *pr = malloc((size_t)V * sizeof *pr);
  ck_assert(S && q && k && a && pr);
  for (int64_t e = 0; e < K * V; e++) mpfr_init2(S[e], FDP);
  for (int64_t i = 0; i < K; i++) mpfr_inits2(FDP, q[i], k[i], a[i], (mpfr_ptr)0);
  for (int64_t j = 0; j < V; j++) mpfr_init2(pr[j], FDP);
  mpfr_t x, b, t, bet, E;
  mpfr_inits2(FDP, x, b, t, bet, E, (mpfr_ptr)0);
  mpfr_set_zero(L, 1);
  int64_t cidx = 0;
  for (int64_t n = 0; n < p->N; n++) {
    const int64_t bos = c->cu[n], eos = c->cu[n + 1];
    for (int64_t hv = 0; hv < p->HV; hv++) {
      const int64_t h = p->head_map == KDA_HEADMAP_DIV ? hv / (p->HV / p->H) : hv % p->H;
      const size_t sofs = (size_t)((n * p->HV + hv) * K * V);
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) {
          const size_t at = p->state_layout == KDA_STATE_VK ? (size_t)(j * K + i) : (size_t)(i * V + j);
          if (p->has_initial_state)
            getx(S[i * V + j], c->h0, sofs + at, pt);
          else
            mpfr_set_zero(S[i * V + j], 1);
        }
      int64_t cc = cidx;
      for (int64_t tt = bos; tt < eos; tt++) {
        l2(p, c->q, (size_t)((tt * p->H + h) * K), pt, q);
        l2(p, c->k, (size_t)((tt * p->H + h) * K), pt, k);
        for (int64_t i = 0; i < K; i++) mpfr_mul_d(q[i], q[i], p->scale, MPFR_RNDN);
        for (int64_t ch = 0; ch < GW; ch++) {
          getx(x, c->g, (size_t)((tt * p->HV + hv) * GW + ch), pt);
          if (p->gate_mode != KDA_GATE_LOG) {
            getx(b, c->dt_bias, (size_t)(hv * GW + ch), pt);
            mpfr_add(x, x, b, MPFR_RNDN);
            mpfr_set_ui(E, 1, MPFR_RNDN);
            if (p->has_A_log) {
              getx(E, c->A_log, (size_t)hv, pt);
              mpfr_exp(E, E, MPFR_RNDN);
            }
            if (p->gate_mode == KDA_GATE_SOFTPLUS) { /* -E log1p(e^x) */
              mpfr_exp(t, x, MPFR_RNDN);
              mpfr_log1p(t, t, MPFR_RNDN);
              mpfr_mul(x, t, E, MPFR_RNDN);
              mpfr_neg(x, x, MPFR_RNDN);
            } else {
              mpfr_mul(x, x, E, MPFR_RNDN);
              sigm(t, x);
              mpfr_mul_d(x, t, p->lower_bound, MPFR_RNDN);
            }
          }
          mpfr_exp(a[ch], x, MPFR_RNDN);
        }
        for (int64_t i = GW; i < K && GW > 0; i++) mpfr_set(a[i], a[0], MPFR_RNDN);
        getx(bet, c->beta, (size_t)(tt * p->HV + hv), pt);
        if (p->beta_mode != KDA_BETA_PROB) {
          sigm(t, bet);
          mpfr_mul_ui(bet, t, p->beta_mode == KDA_BETA_LOGIT_NEG ? 2 : 1, MPFR_RNDN);
        }
        if (GW > 0)
          for (int64_t e = 0; e < K * V; e++) mpfr_mul(S[e], S[e], a[e / V], MPFR_RNDN);
        for (int64_t j = 0; j < V; j++) {
          mpfr_set_zero(pr[j], 1);
          if (p->family != KDA_FAMILY_LINEAR)
            for (int64_t i = 0; i < K; i++) {
              mpfr_mul(t, S[i * V + j], k[i], MPFR_RNDN);
              mpfr_add(pr[j], pr[j], t, MPFR_RNDN);
            }
          getx(t, c->v, (size_t)((tt * p->HV + hv) * V + j), pt);
          mpfr_sub(pr[j], t, pr[j], MPFR_RNDN);
          mpfr_mul(pr[j], pr[j], bet, MPFR_RNDN); /* r = b (v - p) */
        }
        for (int64_t i = 0; i < K; i++)
          for (int64_t j = 0; j < V; j++) {
            mpfr_mul(t, k[i], pr[j], MPFR_RNDN);
            mpfr_add(S[i * V + j], S[i * V + j], t, MPFR_RNDN);
          }
        for (int64_t j = 0; j < V; j++) { /* L += do_j * sum_i S q */
          mpfr_set_zero(x, 1);
          for (int64_t i = 0; i < K; i++) {
            mpfr_mul(t, S[i * V + j], q[i], MPFR_RNDN);
            mpfr_add(x, x, t, MPFR_RNDN);
          }
          mpfr_mul_d(x, x, c->dout[(tt * p->HV + hv) * V + j], MPFR_RNDN);
          mpfr_add(L, L, x, MPFR_RNDN);
        }
        if (cc < p->n_checkpoints && c->cp[cc] == tt) {
          const size_t cs = (size_t)((cc * p->HV + hv) * K * V);
          for (int64_t i = 0; i < K; i++)
            for (int64_t j = 0; j < V; j++) {
              const size_t at = p->state_layout == KDA_STATE_VK ? (size_t)(j * K + i) : (size_t)(i * V + j);
              mpfr_mul_d(t, S[i * V + j], c->dhc[cs + at], MPFR_RNDN);
              mpfr_add(L, L, t, MPFR_RNDN);
            }
          cc++;
        }
      }
      if (p->want_final_state)
        for (int64_t i = 0; i < K; i++)
          for (int64_t j = 0; j < V; j++) {
            const size_t at = p->state_layout == KDA_STATE_VK ? (size_t)(j * K + i) : (size_t)(i * V + j);
            mpfr_mul_d(t, S[i * V + j], c->dht[sofs + at], MPFR_RNDN);
            mpfr_add(L, L, t, MPFR_RNDN);
          }
    }
    while (cidx < p->n_checkpoints && c->cp[cidx] < eos) cidx++;
  }
  for (int64_t e = 0; e < K * V; e++) mpfr_clear(S[e]);
  for (int64_t i = 0; i < K; i++) mpfr_clears(q[i], k[i], a[i], (mpfr_ptr)0);
  for (int64_t j = 0; j < V; j++) mpfr_clear(pr[j]);
  mpfr_clears(x, b, t, bet, E, (mpfr_ptr)0);
  free(S), free(q), free(k), free(a), free(pr);
}

static void certify(bcase *c, kda_mpfr_report *r) {
  char err[KDA_ERRLEN] = "";
  kda_tensors_f64 t = bc_tensors(c);
  kda_grads_f64 d = bc_grads(c);
  const int st = kda_mpfr_backward(&c->p, &t, &d, NULL, r, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "kda_mpfr_backward: %d %s (seed %llu)", st, err,
                (unsigned long long)c->seed);
}

/* 1 and 2: every certified gradient = RN64(MPFR central difference); near the f64 reference. */
START_TEST(test_fd_mpfr) {
  const bconf *f = &confs[_i];
  bcase c;
  bc_make(&c, f, 31337 + (uint64_t)_i);
  kda_mpfr_report r;
  certify(&c, &r);
  ck_assert_msg(r.method == KDA_CERT_PROVEN, "%s: method %d", f->name, r.method);
  slot sl[8];
  const int m = slots_of(&c, sl);
  double *cert[8];
  for (int s = 0; s < m; s++) {
    cert[s] = malloc((sl[s].n + 1) * sizeof(double));
    ck_assert_ptr_nonnull(cert[s]);
    memcpy(cert[s], sl[s].dx, sl[s].n * sizeof(double));
  }
  /* 2: the float64 reference */
  char err[KDA_ERRLEN] = "";
  kda_tensors_f64 t = bc_tensors(&c);
  kda_grads_f64 d = bc_grads(&c);
  ck_assert_int_eq(kda_ref_backward_f64(&c.p, &t, &d, err, sizeof err), KDA_OK);
  for (int s = 0; s < m; s++) {
    double mag = 1e-300;
    for (size_t e = 0; e < sl[s].n; e++) mag = fmax(mag, fabs(cert[s][e]));
    for (size_t e = 0; e < sl[s].n; e++)
      ck_assert_msg(fabs(sl[s].dx[e] - cert[s][e]) <= 1e-10 * mag, "%s: ref d%s[%zu] %.17g, cert %.17g",
                    f->name, sl[s].name, e, sl[s].dx[e], cert[s][e]);
  }
  /* 1: finite differences */
  mpfr_t h, Lp, Lm, fd, tmp;
  mpfr_inits2(FDP, h, Lp, Lm, fd, tmp, (mpfr_ptr)0);
  for (int s = 0; s < m; s++)
    for (size_t e = 0; e < sl[s].n; e++) {
      const double x0 = sl[s].x[e];
      if (isinf(x0)) {
        ck_assert_msg(cert[s][e] == 0.0, "%s: d%s[%zu] at -inf is %g", f->name, sl[s].name, e,
                      cert[s][e]);
        continue;
      }
      mpfr_set_d(h, x0 != 0 ? fabs(x0) : 1.0, MPFR_RNDN);
      mpfr_mul_2si(h, h, -100, MPFR_RNDN);
      perturb pt = {sl[s].x, e, h};
      loss_mpfr(&c, &pt, Lp);
      mpfr_neg(h, h, MPFR_RNDN);
      loss_mpfr(&c, &pt, Lm);
      mpfr_neg(h, h, MPFR_RNDN);
      mpfr_sub(fd, Lp, Lm, MPFR_RNDN);
      mpfr_div(fd, fd, h, MPFR_RNDN);
      mpfr_div_2ui(fd, fd, 1, MPFR_RNDN);
      double want = kda_mpfr_round_binary64(fd, tmp);
      if (fabs(want) < 0x1p-300) want = 0.0; /* an exact zero seen through the difference */
      ck_assert_msg(kda_mpfr_bits(want) == kda_mpfr_bits(cert[s][e]),
                    "%s: certified d%s[%zu] = %a, MPFR finite difference %a (seed %llu)", f->name,
                    sl[s].name, e, cert[s][e], want, (unsigned long long)c.seed);
    }
  mpfr_clears(h, Lp, Lm, fd, tmp, (mpfr_ptr)0);
  for (int s = 0; s < m; s++) free(cert[s]);
  bc_free(&c);
}
END_TEST

/* 3: what a low-precision evaluation proves is the certified value. */
START_TEST(test_sound_low_precision) {
  const bconf *f = &confs[_i];
  bcase c;
  bc_make(&c, f, 4242 + (uint64_t)_i);
  kda_mpfr_report r;
  certify(&c, &r);
  slot sl[8];
  const int m = slots_of(&c, sl);
  size_t n = 0;
  for (int s = 0; s < m; s++) n += sl[s].n;
  /* certified values in kda_mpfr_backward's order: dq dk dv dg dbeta dA_log ddt_bias dh0 */
  static const char *const order[] = {"q", "k", "v", "g", "beta", "A_log", "dt_bias", "h0"};
  double *want = malloc(n * sizeof *want), *val = malloc(n * sizeof *val);
  unsigned char *pv = malloc(n);
  ck_assert(want && val && pv);
  size_t o = 0;
  for (int k = 0; k < 8; k++)
    for (int s = 0; s < m; s++)
      if (strcmp(sl[s].name, order[k]) == 0) {
        memcpy(want + o, sl[s].dx, sl[s].n * sizeof(double));
        o += sl[s].n;
      }
  kda_tensors_f64 t = bc_tensors(&c);
  kda_grads_f64 d = bc_grads(&c);
  static const mpfr_prec_t precs[] = {53, 56, 60, 64, 72, 80};
  const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
  mpfr_set_emin(mpfr_get_emin_min());
  mpfr_set_emax(mpfr_get_emax_max());
  int64_t proven_total = 0;
  for (size_t ip = 0; ip < sizeof precs / sizeof precs[0]; ip++) {
    int64_t nu = 0;
    double need = 0, rel = 0;
    ck_assert_int_eq(kda_mpfr_grad_eval(&c.p, &t, &d, c.cu, precs[ip], val, pv, &nu, &need, &rel),
                     KDA_OK);
    for (size_t e = 0; e < n; e++) {
      if (!pv[e]) continue;
      proven_total++;
      ck_assert_msg(kda_mpfr_bits(val[e]) == kda_mpfr_bits(want[e]),
                    "%s: value %zu proven at %ld bits as %a, certified %a", f->name, e,
                    (long)precs[ip], val[e], want[e]);
    }
  }
  mpfr_set_emin(emin);
  mpfr_set_emax(emax);
  ck_assert_msg(proven_total > 0, "%s: nothing proven at low precision", f->name);
  free(want), free(val), free(pv);
  bc_free(&c);
}
END_TEST

/* 4: MPFR's state is restored; errors are named. */
START_TEST(test_state_and_errors) {
  bcase c;
  bc_make(&c, &confs[2], 9);
  const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
  mpfr_clear_flags();
  kda_mpfr_report r;
  certify(&c, &r);
  ck_assert(mpfr_get_emin() == emin && mpfr_get_emax() == emax);
  ck_assert_int_eq(mpfr_flags_save(), 0);
  ck_assert_int_ge(r.ziv_rounds, 2);
  ck_assert_int_eq(r.n_values, r.n_proven);
  kda_tensors_f64 t = bc_tensors(&c);
  kda_grads_f64 d = bc_grads(&c);
  char err[KDA_ERRLEN] = "";
  d.dA_log = NULL;
  ck_assert_int_eq(kda_mpfr_backward(&c.p, &t, &d, NULL, &r, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "dA_log"));
  d = bc_grads(&c);
  c.dout[3] = NAN;
  ck_assert_int_eq(kda_mpfr_backward(&c.p, &t, &d, NULL, &r, err, sizeof err), KDA_ENONFINITE);
  ck_assert_ptr_nonnull(strstr(err, "do[3]"));
  ck_assert(mpfr_get_emin() == emin && mpfr_get_emax() == emax);
  bc_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpfr_grad");
  TCase *tc = tcase_create("mpfr_grad");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_fd_mpfr, 0, NCONF);
  tcase_add_loop_test(tc, test_sound_low_precision, 0, NCONF);
  tcase_add_test(tc, test_state_and_errors);
  suite_add_tcase(s, tc);
  int rc = kda_test_main(s, CK_NORMAL, CK_FORK_GETENV);
  mpfr_free_cache();
  return rc;
}

/* bench_mpfr.c: cost of one MPFR step relative to one float64 step (not a test; built by hand).
 * SPDX-License-Identifier: MIT
 *
 *   cc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -ffp-contract=off -Iref -Iref/oracle \
 *      ref/oracle/tests/bench_mpfr.c ref/oracle/kda_mpfr*.c ref/kda_problem.c ref/kda_ref.c \
 *      $(pkg-config --cflags --libs mpfr gmp) -lm -o /tmp/bench_mpfr && /tmp/bench_mpfr [T [K [V]]]
 *
 * One value head, family kda, softplus gate with A_log, logit beta, fla L2 (the most
 * expensive preprocessing), random inputs.  Prints seconds per token for the float64
 * reference, for one MPFR evaluation at several precisions (kda_mpfr_run: the step, its error
 * bound and the rounding and proof of every output), and for the whole certified call
 * (kda_mpfr_forward: Ziv's loop, two or more evaluations).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpfr.h>

#include "kda_mpfr.h"
#include "kda_mpfr_impl.h"
#include "kda_ref.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s;
}
static double unif(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * (double)(lcg(s) >> 11) * 0x1p-53;
}

static double *fill(size_t n, uint64_t *s, double lo, double hi) {
  double *x = malloc((n ? n : 1) * sizeof *x);
  if (!x) exit(2);
  for (size_t i = 0; i < n; i++) x[i] = unif(s, lo, hi);
  return x;
}

int main(int argc, char **argv) {
  const int64_t T = argc > 1 ? atoll(argv[1]) : 16, K = argc > 2 ? atoll(argv[2]) : 128;
  const int64_t V = argc > 3 ? atoll(argv[3]) : K;
  kda_problem p;
  kda_problem_init(&p, T, 1, 1, K, V);
  p.gate_mode = KDA_GATE_SOFTPLUS;
  p.has_A_log = 1;
  p.beta_mode = KDA_BETA_LOGIT;
  p.l2_mode = KDA_L2_FLA;
  uint64_t s = 2024;
  kda_tensors_f64 t;
  memset(&t, 0, sizeof t);
  t.q = fill((size_t)(T * K), &s, -1, 1);
  t.k = fill((size_t)(T * K), &s, -1, 1);
  t.v = fill((size_t)(T * V), &s, -1, 1);
  t.g = fill((size_t)(T * K), &s, -3, 3);
  t.beta = fill((size_t)T, &s, -3, 3);
  t.A_log = fill(1, &s, -1, 1);
  t.dt_bias = fill((size_t)K, &s, -1, 1);
  t.o = fill((size_t)(T * V), &s, 0, 0);
  t.ht = fill((size_t)(K * V), &s, 0, 0);
  char err[KDA_ERRLEN] = "";

  /* float64: repeat until at least 0.2 s */
  int reps = 0;
  double t0 = now(), f64;
  do {
    if (kda_ref_forward_f64(&p, &t, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    reps++;
  } while (now() - t0 < 0.2);
  f64 = (now() - t0) / (double)(reps * T);
  printf("K=%lld V=%lld T=%lld  float64 reference: %.3g s/token\n", (long long)K, (long long)V,
         (long long)T, f64);

  /* one MPFR evaluation (with bound and proofs) at fixed precisions */
  const int64_t n = kda_mpfr_count_values(&p);
  kda_mpfr_result res;
  memset(&res, 0, sizeof res);
  res.val = malloc((size_t)n * sizeof(double));
  res.proven = malloc((size_t)n);
  const int64_t cu[2] = {0, T};
  const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
  mpfr_set_emin(mpfr_get_emin_min());
  mpfr_set_emax(mpfr_get_emax_max());
  static const mpfr_prec_t precs[] = {64, 128, 192, 256, 512, 1024};
  for (size_t m = 0; m < sizeof precs / sizeof precs[0]; m++) {
    t0 = now();
    if (kda_mpfr_run(&p, &t, cu, precs[m], &res, err, sizeof err))
      return fprintf(stderr, "%s\n", err), 1;
    const double sec = (now() - t0) / (double)T;
    printf("  one MPFR evaluation at %4ld bits: %.3g s/token = %6.0f x float64 "
           "(%lld of %lld values proven)\n",
           (long)precs[m], sec, sec / f64, (long long)(n - res.n_unproven), (long long)n);
  }
  mpfr_set_emin(emin);
  mpfr_set_emax(emax);
  free(res.val);
  free(res.proven);

  /* the whole certified call */
  kda_mpfr_report r;
  t0 = now();
  int st = kda_mpfr_forward(&p, &t, NULL, &r, err, sizeof err);
  const double sec = (now() - t0) / (double)T;
  if (st) return fprintf(stderr, "%s\n", err), 1;
  printf("  certified kda_mpfr_forward: %.3g s/token = %.0f x float64; method %s, precisions "
         "%lld/%lld, %lld evaluations, max relative bound %.3g\n",
         sec, sec / f64, kda_mpfr_method_name(r.method), (long long)r.prec_check,
         (long long)r.prec_used, (long long)r.ziv_rounds, r.max_rel_bound);
  mpfr_free_cache();
  free((void *)t.q);
  free((void *)t.k);
  free((void *)t.v);
  free((void *)t.g);
  free((void *)t.beta);
  free((void *)t.A_log);
  free((void *)t.dt_bias);
  free(t.o);
  free(t.ht);
  return 0;
}

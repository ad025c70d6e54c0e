/* check_backward_abi.c: the backward slot of the backend ABI (kda_backend.h, SPEC.md §7.8, §13):
 * validation of tables with and without it, the isolated backward call (seeds and gradients
 * in the shared region, canaries, the input check), and the test plugin's float32 backward
 * in every honest order against central finite differences of the float64 forward, with each
 * of its mutants seen to differ.
 * SPDX-License-Identifier: MIT
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_conform.h"
#include "kda_prng.h"
#include "kda_ref.h"
#include "kda_worker_internal.h"
#include "kda_test.h"

/* Small cases covering every mode the gradients go through: GVA with both head maps, the
 * three gates (lower_bound with and without A_log), the three betas, both L2 conventions and
 * none, both state layouts, varlen with an empty sequence, h0, checkpoints, every family, and
 * a sequence longer than the plugin's 64-token recompute blocks. */
static const char *const descs[] = {
    "seed=11 T=9 H=1 HV=2 K=4 V=3 gate=softplus beta=logit l2=fla h0=1 checkpoints=2,6 prec=f32",
    "seed=12 seqlens=4,0,5 H=2 HV=4 K=4 V=4 head_map=mod gate=lower_bound beta=logit_neg "
    "l2=ggml h0=1 layout=vk checkpoints=1,7 prec=f32",
    "seed=13 T=7 H=1 K=4 V=5 gate=log beta=prob l2=off h0=1 prec=f32",
    "seed=14 T=8 H=1 HV=2 K=3 V=4 family=gdn gate=softplus beta=logit l2=fla h0=1 prec=f32",
    "seed=15 T=6 H=1 K=4 V=4 family=deltanet beta=logit l2=fla prec=f32",
    "seed=16 T=6 H=1 K=4 V=4 family=linear beta=prob l2=fla h0=1 prec=f32",
    "seed=17 T=7 H=1 K=4 V=3 gate=lower_bound alog=0 beta=logit l2=fla prec=f32",
    "seed=18 T=150 H=1 K=3 V=3 gate=log beta=logit l2=fla h0=1 checkpoints=log prec=f32",
};
#define N_DESCS (sizeof descs / sizeof descs[0])

typedef struct gcase {
  kda_case c;
  double *dout, *dht, *dhc;
  double *fd[KDA_GRAD_COUNT]; /* central differences of L, NULL where the problem has none */
  uint64_t n[KDA_GRAD_COUNT];
} gcase;

static gcase gc[N_DESCS];

static const char *const grad_names[KDA_GRAD_COUNT] = {"dq", "dk", "dv", "dg", "dbeta",
                                                       "dA_log", "ddt_bias", "dh0"};

/* L = sum do o + sum dht ht + sum dhc hc of the float64 forward. */
static double loss(const gcase *g) {
  const kda_case *c = &g->c;
  kda_problem_sizes s;
  ck_assert(kda_problem_sizes_get(&c->p, &s, NULL, 0) == KDA_OK);
  double *o = malloc(8 * (s.o + s.ht + s.hc + 1)), *ht = o + s.o, *hc = ht + s.ht;
  kda_tensors_f64 t = {c->q, c->k, c->v, c->g, c->beta, c->A_log, c->dt_bias, c->h0,
                       c->cu_seqlens, c->checkpoints, o, s.ht ? ht : NULL, s.hc ? hc : NULL};
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_ref_forward_f64(&c->p, &t, err, sizeof err) == KDA_OK, "%s", err);
  double L = 0;
  for (uint64_t i = 0; i < s.o; i++) L += g->dout[i] * o[i];
  for (uint64_t i = 0; i < s.ht; i++) L += g->dht[i] * ht[i];
  for (uint64_t i = 0; i < s.hc; i++) L += g->dhc[i] * hc[i];
  free(o);
  return L;
}

static double *seed(uint64_t n, uint32_t stream) {
  double *x = malloc(8 * (n + 1));
  for (uint64_t i = 0; i < n; i++) x[i] = (double)(float)kda_prng_normal(77, stream, i);
  return x;
}

static void setup(void) {
  char err[KDA_ERRLEN];
  for (size_t i = 0; i < N_DESCS; i++) {
    gcase *g = &gc[i];
    kda_gen_desc d;
    ck_assert_msg(kda_gen_parse(descs[i], &d, err, sizeof err) == KDA_OK, "%s", err);
    ck_assert_msg(kda_gen_case(&d, &g->c, err, sizeof err) == KDA_OK, "%s", err);
    kda_gen_desc_free(&d);
    kda_problem_sizes s;
    ck_assert(kda_problem_sizes_get(&g->c.p, &s, NULL, 0) == KDA_OK);
    g->dout = seed(s.o, 20), g->dht = seed(s.ht, 21), g->dhc = seed(s.hc, 22);
    double *xs[KDA_GRAD_COUNT] = {g->c.q, g->c.k, g->c.v, g->c.g, g->c.beta, g->c.A_log,
                                  g->c.dt_bias, g->c.h0};
    const uint64_t ns[KDA_GRAD_COUNT] = {s.q, s.k, s.v, s.g, s.beta, s.A_log, s.dt_bias, s.h0};
    for (int b = 0; b < KDA_GRAD_COUNT; b++) {
      g->n[b] = xs[b] ? ns[b] : 0;
      if (!g->n[b]) continue;
      g->fd[b] = malloc(8 * g->n[b]);
      for (uint64_t e = 0; e < g->n[b]; e++) {
        const double x = xs[b][e], h = 1e-5 * fmax(1.0, fabs(x));
        xs[b][e] = x + h;
        const double up = loss(g);
        xs[b][e] = x - h;
        const double dn = loss(g);
        xs[b][e] = x;
        g->fd[b][e] = (up - dn) / (2 * h);
      }
    }
  }
}

static void teardown(void) {
  for (size_t i = 0; i < N_DESCS; i++) {
    for (int b = 0; b < KDA_GRAD_COUNT; b++) free(gc[i].fd[b]);
    free(gc[i].dout), free(gc[i].dht), free(gc[i].dhc);
    kda_case_free(&gc[i].c);
  }
  memset(gc, 0, sizeof gc);
}

/* A worker for the test plugin with params, or (builtin) for that built-in. */
static kda_worker *start_on(const char *builtin, const char *params, int isolate) {
  char spec[4200], err[KDA_ERRLEN];
  snprintf(spec, sizeof spec, "%s%s%s",
           builtin ? builtin : kda_test_plugin_path("kda_plugin_grad.so"), params ? ":" : "",
           params ? params : "");
  kda_backend_ref ref;
  ck_assert_msg(kda_backend_resolve(spec, &ref, err, sizeof err) == KDA_OK, "%s", err);
  kda_call_opts o = {30.0, isolate, 0, 0};
  kda_worker *w = NULL;
  ck_assert_msg(kda_worker_start(&ref, &o, &w, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(!kda_worker_load_result(w), "%s", kda_worker_load_result(w)->msg);
  return w;
}

static kda_worker *start(const char *params, int isolate) {
  return start_on(NULL, params, isolate);
}

/* The backward of worker w on case i into d (allocated here); returns the call's outcome. */
static int32_t backward(kda_worker *w, size_t i, double **d, uint32_t *wrote, char *msg) {
  const gcase *g = &gc[i];
  const kda_case *c = &g->c;
  kda_tensors_f64 in = {c->q, c->k, c->v, c->g, c->beta, c->A_log, c->dt_bias, c->h0,
                        c->cu_seqlens, c->checkpoints, NULL, NULL, NULL};
  kda_worker_seeds sd = {g->dout, g->dht, g->dhc};
  for (int b = 0; b < KDA_GRAD_COUNT; b++) d[b] = g->n[b] ? calloc(g->n[b], 8) : NULL;
  kda_call_result r;
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_worker_backward(w, &c->p, &in, &sd, KDA_GRAD_ALL, d, wrote, &r, err,
                                    sizeof err) == KDA_OK, "%s", err);
  kda_worker_end_case(w, &(kda_call_result){0}, err, sizeof err);
  snprintf(msg, KDA_ERRLEN, "%s", r.msg);
  return r.outcome;
}

/* The largest error of d against the differences, relative to the largest difference of the
 * quantity, over every gradient of case i. */
static double worst_rel(size_t i, double *const *d, int *which) {
  double worst = 0;
  for (int b = 0; b < KDA_GRAD_COUNT; b++) {
    double m = 0, e = 0;
    for (uint64_t k = 0; k < gc[i].n[b]; k++) m = fmax(m, fabs(gc[i].fd[b][k]));
    for (uint64_t k = 0; k < gc[i].n[b]; k++) e = fmax(e, fabs(d[b][k] - gc[i].fd[b][k]));
    if (gc[i].n[b] && (e / fmax(m, 1e-300) > worst || isnan(e)))
      worst = isnan(e) ? INFINITY : e / fmax(m, 1e-300), *which = b;
  }
  return worst;
}

static void free_grads(double **d) {
  for (int b = 0; b < KDA_GRAD_COUNT; b++) free(d[b]), d[b] = NULL;
}



/* Every honest order of the plugin agrees with the differences to 1e-3 of each quantity's
 * largest gradient, on every case, and writes every gradient the problem has. */
START_TEST(honest_orders_match_differences) {
  static const char *const orders[] = {"order=seq", "order=rev", "order=pair", "order=f64",
                                       "order=fma", "gates=chunk", "order=rev gates=chunk"};
  for (size_t o = 0; o < sizeof orders / sizeof orders[0]; o++) {
    kda_worker *w = start(orders[o], 1);
    for (size_t i = 0; i < N_DESCS; i++) {
      double *d[KDA_GRAD_COUNT];
      uint32_t wrote = 0;
      char msg[KDA_ERRLEN];
      ck_assert_msg(backward(w, i, d, &wrote, msg) == KDA_CALL_OK, "%s", msg);
      for (int b = 0; b < KDA_GRAD_COUNT; b++)
        ck_assert_msg(!!(wrote & (1u << b)) == !!gc[i].n[b], "%s: %s written %d", descs[i],
                      grad_names[b], !!(wrote & (1u << b)));
      int which = 0;
      const double e = worst_rel(i, d, &which);
      ck_assert_msg(e < 1e-3, "%s on %s: %s off by %g of its largest", orders[o], descs[i],
                    grad_names[which], e);
      free_grads(d);
    }
    kda_worker_stop(w);
  }
}
END_TEST

/* Each mutant (adjoint_ulp_bias aside: one ulp a step is far below the differences' noise
 * here; the runner kills it on long cases) is off by more than 1% of some quantity's largest
 * gradient on some case: each is a real mistake. */
START_TEST(mutants_differ) {
  static const char *const mutants[] = {
      "adjoint_no_decay", "dk_no_erase", "dg_no_softplus_chain", "dA_log_no_exp",
      "dbeta_wrong_activation", "l2_grad_dropped", "dh0_dropped", "gva_no_sum"};
  for (size_t m = 0; m < sizeof mutants / sizeof mutants[0]; m++) {
    char params[128];
    snprintf(params, sizeof params, "mutant=%s", mutants[m]);
    kda_worker *w = start(params, 1);
    double worst = 0;
    for (size_t i = 0; i < N_DESCS; i++) {
      double *d[KDA_GRAD_COUNT];
      uint32_t wrote;
      char msg[KDA_ERRLEN];
      ck_assert_msg(backward(w, i, d, &wrote, msg) == KDA_CALL_OK, "%s", msg);
      int which;
      worst = fmax(worst, worst_rel(i, d, &which));
      free_grads(d);
    }
    kda_worker_stop(w);
    ck_assert_msg(worst > 1e-2, "mutant %s is within %g of the differences everywhere",
                  mutants[m], worst);
  }
}
END_TEST

/* The built-in references take backward calls (kda_ref_backward_f64 / _f32 behind the ABI):
 * float64 within 1e-7 of the differences (their own truncation error), float32 within 1e-3. */
START_TEST(references_through_the_worker) {
  static const char *const names[2] = {"ref-f64", "ref-f32"};
  const double tol[2] = {1e-7, 1e-3};
  for (int r = 0; r < 2; r++) {
    kda_worker *w = start_on(names[r], NULL, 1);
    ck_assert(kda_worker_has_backward(w));
    for (size_t i = 0; i < N_DESCS; i++) {
      double *d[KDA_GRAD_COUNT];
      uint32_t wrote = 0;
      char msg[KDA_ERRLEN];
      ck_assert_msg(backward(w, i, d, &wrote, msg) == KDA_CALL_OK, "%s", msg);
      for (int b = 0; b < KDA_GRAD_COUNT; b++)
        ck_assert_msg(!!(wrote & (1u << b)) == !!gc[i].n[b], "%s: %s", descs[i], grad_names[b]);
      int which = 0;
      const double e = worst_rel(i, d, &which);
      ck_assert_msg(e < tol[r], "%s on %s: %s off by %g", names[r], descs[i], grad_names[which],
                    e);
      free_grads(d);
    }
    kda_worker_stop(w);
  }
}
END_TEST

/* The isolated call returns exactly what the backend computes in the runner's process. */
START_TEST(isolated_equals_in_process) {
  kda_worker *wi = start("order=pair", 1), *wl = start("order=pair", 0);
  for (size_t i = 0; i < N_DESCS; i++) {
    double *a[KDA_GRAD_COUNT], *b[KDA_GRAD_COUNT];
    uint32_t wa, wb;
    char msg[KDA_ERRLEN];
    ck_assert_msg(backward(wi, i, a, &wa, msg) == KDA_CALL_OK, "%s", msg);
    ck_assert_msg(backward(wl, i, b, &wb, msg) == KDA_CALL_OK, "%s", msg);
    ck_assert_uint_eq(wa, wb);
    for (int q = 0; q < KDA_GRAD_COUNT; q++)
      ck_assert_msg(gc[i].n[q] == 0 || memcmp(a[q], b[q], 8 * gc[i].n[q]) == 0, "%s differs",
                    grad_names[q]);
    free_grads(a), free_grads(b);
  }
  kda_worker_stop(wi), kda_worker_stop(wl);
}
END_TEST

/* A write past a gradient buffer is a Crash naming it; a changed seed is an input change. */
START_TEST(hostile_backward) {
  kda_worker *w = start("mutant=overrun", 1);
  double *d[KDA_GRAD_COUNT];
  uint32_t wrote;
  char msg[KDA_ERRLEN];
  ck_assert_int_eq(backward(w, 0, d, &wrote, msg), KDA_CALL_CRASH);
  ck_assert_msg(strstr(msg, "backward wrote past the end of output 'dq'"), "%s", msg);
  free_grads(d);
  kda_worker_stop(w);
  w = start("mutant=writes_seed", 1);
  ck_assert_int_eq(backward(w, 0, d, &wrote, msg), KDA_CALL_INPUT);
  ck_assert_msg(strstr(msg, "backward modified input 'do'"), "%s", msg);
  free_grads(d);
  kda_worker_stop(w);
}
END_TEST

/* A table without the slots (struct_size ending before them, as a plugin compiled before they
 * were appended) validates and has no backward: its call is NotSupported; a table with one of
 * the two slots is refused. */
START_TEST(tables_without_backward) {
  const kda_backend *ref = kda_backend_find("ref-f32");
  ck_assert_ptr_nonnull(ref);
  volatile size_t old_v = offsetof(kda_backend, supports_backward);
  const size_t old = old_v;     /* (volatile: the compiler need not see the short table) */
  kda_backend *t = malloc(old); /* the older table's memory ends where its fields end */
  memcpy(t, ref, old);
  t->struct_size = (uint32_t)old;
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_backend_validate(t, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert(!KDA_BACKEND_HAS(t, backward));
  free(t);
  kda_backend half = *ref;
  half.supports_backward = NULL;
  half.backward = (int32_t(*)(void *, const kda_problem *, const kda_backend_tensors *,
                               const struct kda_backend_grads *))(uintptr_t)1;
  ck_assert_int_eq(kda_backend_validate(&half, err, sizeof err), KDA_EINVAL);
  ck_assert_msg(strstr(err, "supports_backward and backward"), "%s", err);
  /* the version-1 test plugin, scored through the same worker, declines a backward call */
  char spec[4200];
  snprintf(spec, sizeof spec, "%s", kda_test_plugin_path("kda_plugin_v1.so"));
  kda_backend_ref r;
  ck_assert_msg(kda_backend_resolve(spec, &r, err, sizeof err) == KDA_OK, "%s", err);
  kda_call_opts o = {30.0, 1, 0, 0};
  kda_worker *w = NULL;
  ck_assert_msg(kda_worker_start(&r, &o, &w, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert(!kda_worker_load_result(w));
  ck_assert(!kda_worker_has_backward(w));
  double *d[KDA_GRAD_COUNT];
  uint32_t wrote;
  char msg[KDA_ERRLEN];
  ck_assert_int_eq(backward(w, 2, d, &wrote, msg), KDA_CALL_UNSUPPORTED);
  ck_assert_uint_eq(wrote, 0);
  free_grads(d);
  kda_worker_stop(w);
}
END_TEST

static Suite *backward_suite(void) {
  Suite *s = suite_create("backward");
  TCase *tc = tcase_create("backward");
  tcase_add_unchecked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, tables_without_backward);
  tcase_add_test(tc, hostile_backward);
  tcase_add_test(tc, isolated_equals_in_process);
  tcase_add_test(tc, references_through_the_worker);
  tcase_add_test(tc, honest_orders_match_differences);
  tcase_add_test(tc, mutants_differ);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return kda_test_main(backward_suite(), CK_NORMAL, CK_NOFORK); }

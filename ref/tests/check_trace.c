/* check_trace.c: the traced step (ref/kda_trace.h) is the reference, bit for bit.
 * SPDX-License-Identifier: MIT
 *
 * For random cases of every family and mode (generated with prec=f32, so the float32 twin's
 * inputs are exact), kda_trace_head on every (sequence, value head) must give o and the final
 * state exactly as kda_ref_forward_f64 does, and its float32 twin exactly as
 * kda_ref_forward_f32 does: kda trace, kda explore and the L0 traces show what the references
 * compute, not an approximation of it.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_ref.h"
#include "kda_test.h"
#include "kda_trace.h"

static const char *const descs[] = {
    "seed=1 T=9 H=2 HV=4 K=5 V=3 family=kda gate=softplus beta=logit l2=fla alog=1 prec=f32",
    "seed=2 T=7 H=1 HV=2 K=4 V=6 family=gdn gate=lower_bound beta=logit_neg l2=ggml prec=f32",
    "seed=3 T=8 H=2 HV=2 K=3 V=3 family=deltanet beta=prob l2=fla head_map=mod prec=f32",
    "seed=4 T=6 H=1 HV=1 K=4 V=4 family=linear beta=prob prec=f32",
    "seed=5 seqlens=3,0,5 H=1 HV=2 K=4 V=3 family=kda gate=log h0=1 layout=vk prec=f32",
};

typedef struct cmp {
  const kda_case *c;
  const double *o64, *ht64;
  const float *o32, *ht32;
  int64_t n, hv, last_t, bad;
  char what[160];
} cmp;

static void mismatch(cmp *x, const char *fmt, long long a, long long b) {
  if (x->bad++) return;
  snprintf(x->what, sizeof x->what, fmt, a, b);
}

static int on_token(void *ctx, const kda_trace_token *tk) {
  cmp *x = ctx;
  const kda_problem *p = &x->c->p;
  if (tk->initial) return 0;
  for (int64_t j = 0; j < p->V; j++) {
    const size_t at = (size_t)((tk->t * p->HV + x->hv) * p->V + j);
    if (memcmp(&tk->s64->o[j], &x->o64[at], sizeof(double)) != 0)
      mismatch(x, "f64 o at t=%lld j=%lld", (long long)tk->t, (long long)j);
    if (memcmp(&tk->s32->o[j], &x->o32[at], sizeof(float)) != 0)
      mismatch(x, "f32 o at t=%lld j=%lld", (long long)tk->t, (long long)j);
  }
  x->last_t = tk->t;
  if (tk->t + 1 == x->c->cu_seqlens[x->n + 1] && x->ht64)
    for (int64_t i = 0; i < p->K; i++)
      for (int64_t j = 0; j < p->V; j++) {
        const int64_t e = p->state_layout == KDA_STATE_VK ? j * p->K + i : i * p->V + j;
        const size_t at = (size_t)((x->n * p->HV + x->hv) * p->K * p->V + e);
        if (tk->s64->S[i * p->V + j] != x->ht64[at] || tk->s32->S[i * p->V + j] != x->ht32[at])
          mismatch(x, "final state at i=%lld j=%lld", (long long)i, (long long)j);
      }
  return 0;
}

static float *to_f32(const double *x, size_t n) {
  if (!x) return NULL;
  float *y = malloc((n ? n : 1) * sizeof *y);
  ck_assert_ptr_nonnull(y);
  for (size_t i = 0; i < n; i++) y[i] = (float)x[i];
  return y;
}

START_TEST(test_trace_is_the_reference) {
  char err[KDA_ERRLEN];
  kda_gen_desc d;
  ck_assert_msg(kda_gen_parse(descs[_i], &d, err, sizeof err) == KDA_OK, "%s", err);
  kda_case c;
  ck_assert_msg(kda_gen_case(&d, &c, err, sizeof err) == KDA_OK, "%s", err);
  kda_gen_desc_free(&d);
  const kda_problem *p = &c.p;
  kda_problem_sizes sz;
  ck_assert_int_eq(kda_problem_sizes_get(p, &sz, err, sizeof err), KDA_OK);
  double *o64 = calloc(sz.o + 1, sizeof *o64), *ht64 = calloc(sz.ht + 1, sizeof *ht64);
  float *o32 = calloc(sz.o + 1, sizeof *o32), *ht32 = calloc(sz.ht + 1, sizeof *ht32);
  ck_assert(o64 && ht64 && o32 && ht32);
  kda_tensors_f64 t;
  kda_case_tensors(&c, &t);
  t.o = o64, t.ht = p->want_final_state ? ht64 : NULL, t.hc = NULL;
  kda_problem q = *p;
  q.n_checkpoints = 0;
  t.checkpoints = NULL;
  ck_assert_msg(kda_ref_forward_f64(&q, &t, err, sizeof err) == KDA_OK, "%s", err);
  kda_tensors_f32 f = {to_f32(c.q, sz.q), to_f32(c.k, sz.k), to_f32(c.v, sz.v),
                       to_f32(c.g, sz.g), to_f32(c.beta, sz.beta), to_f32(c.A_log, sz.A_log),
                       to_f32(c.dt_bias, sz.dt_bias), to_f32(c.h0, sz.h0), c.cu_seqlens, NULL,
                       o32, p->want_final_state ? ht32 : NULL, NULL};
  ck_assert_msg(kda_ref_forward_f32(&q, &f, err, sizeof err) == KDA_OK, "%s", err);
  for (int64_t n = 0; n < p->N; n++)
    for (int64_t hv = 0; hv < p->HV; hv++) {
      cmp x = {&c, o64, p->want_final_state ? ht64 : NULL, o32, ht32, n, hv, -1, 0, ""};
      ck_assert_msg(kda_trace_head(&q, &t, n, hv, on_token, &x, err, sizeof err) == KDA_OK, "%s", err);
      ck_assert_msg(x.bad == 0, "'%s' sequence %lld head %lld: %s (%lld mismatches)", descs[_i],
                    (long long)n, (long long)hv, x.what, (long long)x.bad);
    }
  free((void *)f.q), free((void *)f.k), free((void *)f.v), free((void *)f.g);
  free((void *)f.beta), free((void *)f.A_log), free((void *)f.dt_bias), free((void *)f.h0);
  free(o64), free(ht64), free(o32), free(ht32);
  kda_case_free(&c);
}
END_TEST

static int stop_at_two(void *ctx, const kda_trace_token *tk) {
  int *seen = ctx;
  return ++*seen == 3 ? 7 : 0; /* the initial call, then two tokens */
}

/* A nonzero callback value stops the trace and is returned; bad arguments are KDA_EINVAL. */
START_TEST(test_trace_stops_and_checks) {
  char err[KDA_ERRLEN];
  kda_gen_desc d;
  ck_assert_int_eq(kda_gen_parse(descs[0], &d, err, sizeof err), KDA_OK);
  kda_case c;
  ck_assert_int_eq(kda_gen_case(&d, &c, err, sizeof err), KDA_OK);
  kda_gen_desc_free(&d);
  kda_tensors_f64 t;
  kda_case_tensors(&c, &t);
  int seen = 0;
  ck_assert_int_eq(kda_trace_head(&c.p, &t, 0, 0, stop_at_two, &seen, err, sizeof err), 7);
  ck_assert_int_eq(seen, 3);
  ck_assert_int_eq(kda_trace_head(&c.p, &t, 0, c.p.HV, stop_at_two, &seen, err, sizeof err),
                   KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "out of range"));
  ck_assert_int_eq(kda_trace_head(&c.p, NULL, 0, 0, stop_at_two, &seen, err, sizeof err),
                   KDA_EINVAL);
  t.v = NULL;
  ck_assert_int_eq(kda_trace_head(&c.p, &t, 0, 0, stop_at_two, &seen, err, sizeof err), KDA_EINVAL);
  kda_case_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("trace");
  TCase *tc = tcase_create("trace");
  tcase_add_loop_test(tc, test_trace_is_the_reference, 0, (int)(sizeof descs / sizeof descs[0]));
  tcase_add_test(tc, test_trace_stops_and_checks);
  suite_add_tcase(s, tc);
  return kda_test_main(s, CK_NORMAL, CK_FORK_GETENV);
}

/* kda_cert.c: the fast certifier's entry point: checks, threads over value heads, the MPFR
 * phase for undecided values and the bit-for-bit cross-check (SPEC.md §8.12).
 * SPDX-License-Identifier: MIT
 */
#include "kda_cert.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kda_cert_impl.h"
#include "kda_internal.h"
#include "kda_mpfr_impl.h"

static const char who[] = "kda_cert_forward";

void kda_cert_options_init(kda_cert_options *o) {
  memset(o, 0, sizeof *o);
  o->certifier = KDA_CERTIFIER_FAST;
  o->threads = 1;
  o->bound_scale = 1.0;
  kda_mpfr_options_init(&o->mpfr);
}

const char *kda_cert_certifier_name(int32_t certifier) {
  switch (certifier) {
  case KDA_CERTIFIER_FAST: return "fast";
  case KDA_CERTIFIER_MPFR: return "mpfr";
  case KDA_CERTIFIER_BOTH: return "both";
  default: return NULL;
  }
}

int32_t kda_cert_certifier_parse(const char *name) {
  for (int32_t c = 0; c <= KDA_CERTIFIER_BOTH; c++)
    if (name && strcmp(name, kda_cert_certifier_name(c)) == 0) return c;
  return -1;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- Phase 1 over threads: each worker takes the next value head. */
typedef struct pool {
  const kda_cert_job *job;
  kda_cert_head_result *res; /* [HV] */
  pthread_mutex_t lock;
  int64_t next, HV;
  int nomem;
} pool;

static void *worker(void *arg) {
  pool *pl = arg;
  /* MPFR's exponent range is per thread: widen it here (SPEC.md §8.9); flags are restored. */
  const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
  const mpfr_flags_t flags = mpfr_flags_save();
  mpfr_set_emin(mpfr_get_emin_min());
  mpfr_set_emax(mpfr_get_emax_max());
  kda_cert_ws *w = kda_cert_ws_new(pl->job->p);
  for (;;) {
    pthread_mutex_lock(&pl->lock);
    const int64_t hv = w ? pl->next++ : pl->HV;
    if (!w) pl->nomem = 1;
    pthread_mutex_unlock(&pl->lock);
    if (hv >= pl->HV) break;
    kda_cert_head_run(pl->job, w, hv, &pl->res[hv]);
  }
  kda_cert_ws_free(w);
  mpfr_set_emin(emin);
  mpfr_set_emax(emax);
  mpfr_flags_restore(flags, MPFR_FLAGS_ALL);
  return NULL;
}

/* A thread of our own: its MPFR caches and mpz pool are ours to free (SPEC.md §8.9 leaves the
 * calling thread's to the application). */
static void *thread_main(void *arg) {
  worker(arg);
  mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
  mpfr_free_pool();
  return NULL;
}

static int phase1(const kda_cert_job *job, int threads, kda_cert_report *rep, char *err,
                  size_t errlen) {
  const int64_t HV = job->p->HV;
  pool pl = {job, calloc((size_t)HV, sizeof(kda_cert_head_result)), PTHREAD_MUTEX_INITIALIZER,
             0, HV, 0};
  if (!pl.res) return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", who);
  if (threads > HV) threads = (int)HV;
  pthread_t tid[256];
  int started = 0;
  for (; started < threads - 1; started++)
    if (pthread_create(&tid[started], NULL, thread_main, &pl) != 0) break;
  worker(&pl); /* the calling thread works too */
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  pthread_mutex_destroy(&pl.lock);
  for (int64_t hv = 0; hv < HV; hv++) {
    const kda_cert_head_result *h = &pl.res[hv];
    rep->n_decided += h->n_decided;
    rep->n_heads_unsafe += !h->safe;
    rep->expansive |= h->expansive;
    if (h->max_growth > rep->max_growth) rep->max_growth = h->max_growth;
    if (h->max_rel_bound > rep->max_rel_bound) rep->max_rel_bound = h->max_rel_bound;
  }
  free(pl.res);
  if (pl.nomem) return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", who);
  return KDA_OK;
}

/* ---- Moving values between the flat array (o | ht | hc) and the tensors. */
static void flat_copy(const kda_problem *p, const kda_tensors_f64 *t, double *val, int to_t) {
  const int64_t nO = p->T * p->HV * p->V, kv = p->HV * p->K * p->V;
  double *dst[3] = {t->o, t->ht, t->hc};
  const int64_t len[3] = {nO, p->want_final_state ? p->N * kv : 0, p->n_checkpoints * kv};
  for (int q = 0; q < 3; q++) {
    if (len[q] && to_t) memcpy(dst[q], val, (size_t)len[q] * sizeof *val);
    if (len[q] && !to_t) memcpy(val, dst[q], (size_t)len[q] * sizeof *val);
    val += len[q];
  }
}

/* The first decided value whose bits differ from MPFR's, or -1. */
static int64_t first_disagreement(const double *fast, const double *mp, const unsigned char *dec,
                                  int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (dec[i] && kda_mpfr_bits(fast[i]) != kda_mpfr_bits(mp[i])) return i;
  return -1;
}

static int run_mpfr(const kda_problem *p, const kda_tensors_f64 *t, const kda_cert_options *o,
                    kda_cert_report *rep, char *err, size_t errlen) {
  const double t0 = now();
  const int st = kda_mpfr_forward(p, t, &o->mpfr, &rep->mpfr, err, errlen);
  rep->seconds_mpfr = now() - t0;
  rep->mpfr_ran = 1;
  rep->method = rep->mpfr.method;
  return st;
}

/* Phase 2 and the cross-check: MPFR's values land in t; every decided value must match. */
static int phase2(const kda_problem *p, const kda_tensors_f64 *t, const kda_cert_options *o,
                  const kda_cert_job *job, int64_t n, kda_cert_report *rep, char *err,
                  size_t errlen) {
  int st = run_mpfr(p, t, o, rep, err, errlen);
  if (st) return st;
  double *mp = malloc((size_t)n * sizeof *mp + 1);
  if (!mp) return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", who);
  flat_copy(p, t, mp, 0);
  const int64_t bad = first_disagreement(job->val, mp, job->decided, n);
  if (bad >= 0)
    st = kda_fail(KDA_ENOTCERT, err, errlen,
                  "%s: value %lld (o, ht, hc flattened) is %a by the double-double bound and "
                  "%a by MPFR: the two certifiers disagree", who, (long long)bad,
                  job->val[bad], mp[bad]);
  free(mp);
  return st;
}

static int fast(const kda_problem *p, const kda_tensors_f64 *t, const kda_cert_options *o,
                kda_cert_report *rep, unsigned char *decided, char *err, size_t errlen) {
  const int64_t n = kda_mpfr_count_values(p);
  const int64_t cu_default[2] = {0, p->T};
  kda_cert_job job = {p, t, t->cu_seqlens ? t->cu_seqlens : cu_default,
                      malloc((size_t)n * sizeof(double) + 1),
                      decided ? decided : malloc((size_t)n + 1), o->bound_scale,
                      kda_cert_kernel()};
  int st = KDA_OK;
  if (!job.val || !job.decided) st = kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", who);
  const double t0 = now();
  if (!st) st = phase1(&job, o->threads, rep, err, errlen);
  rep->seconds_fast = now() - t0;
  const int all = !st && rep->n_decided == n;
  if (!st && all && o->certifier == KDA_CERTIFIER_FAST) {
    flat_copy(p, t, job.val, 1);
    rep->method = KDA_CERT_PROVEN;
  } else if (!st && o->no_fallback) {
    flat_copy(p, t, job.val, 1);
    rep->method = all ? KDA_CERT_PROVEN : KDA_CERT_NONE;
    if (!all)
      st = kda_fail(KDA_ENOTCERT, err, errlen, "%s: %lld of %lld values undecided by the "
                    "double-double phase (no fallback)", who, (long long)(n - rep->n_decided),
                    (long long)n);
  } else if (!st && o->certifier == KDA_CERTIFIER_FAST) { /* MPFR on the heads that need it */
    const double t1 = now();
    st = kda_cert_fallback_heads(&job, &o->mpfr, &rep->method, &rep->n_mpfr_heads,
                                 &rep->mpfr_steps, &rep->mpfr, err, errlen);
    rep->seconds_mpfr = now() - t1;
    rep->mpfr_ran = 1;
    if (!st) flat_copy(p, t, job.val, 1);
  } else if (!st) {
    st = phase2(p, t, o, &job, n, rep, err, errlen);
  }
  free(job.val);
  if (!decided) free(job.decided);
  return st;
}

static int check_options(const kda_cert_options *o, char *err, size_t errlen) {
  if (!kda_cert_certifier_name(o->certifier))
    return kda_fail(KDA_EINVAL, err, errlen, "%s: certifier = %d is not a KDA_CERTIFIER_*",
                    who, (int)o->certifier);
  if (o->threads < 1 || o->threads > 256)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: threads = %d is outside [1, 256]", who,
                    (int)o->threads);
  if (o->no_fallback < 0 || o->no_fallback > 1 || o->reserved != 0 ||
      !(o->bound_scale > 0.0 && o->bound_scale <= 1.0))
    return kda_fail(KDA_EINVAL, err, errlen, "%s: no_fallback must be 0 or 1, reserved 0 and "
                    "bound_scale in (0, 1]", who);
  return KDA_OK;
}

int kda_cert_forward(const kda_problem *p, const kda_tensors_f64 *t, const kda_cert_options *o,
                     kda_cert_report *r, unsigned char *decided, char *err, size_t errlen) {
  kda_cert_options def;
  if (!o) {
    kda_cert_options_init(&def);
    o = &def;
  }
  kda_cert_report rep;
  memset(&rep, 0, sizeof rep);
  int st = check_options(o, err, errlen);
  if (!st) st = kda_mpfr_check(p, t, &o->mpfr, err, errlen);
  if (!st) {
    rep.n_values = kda_mpfr_count_values(p);
    if (o->certifier == KDA_CERTIFIER_MPFR) {
      st = run_mpfr(p, t, o, &rep, err, errlen);
      if (decided) memset(decided, 0, (size_t)rep.n_values);
    } else {
      st = fast(p, t, o, &rep, decided, err, errlen);
    }
  }
  if (st && !(o->no_fallback && st == KDA_ENOTCERT && !rep.mpfr_ran)) rep.method = KDA_CERT_NONE;
  if (r) *r = rep;
  return st;
}

/* kda_mpfr.c: the MPFR reference's entry point: checks, MPFR state, Ziv's loop (SPEC.md §8).
 * SPDX-License-Identifier: MIT
 *
 * Ziv's strategy over whole evaluations (SPEC.md §8.6): evaluate at p0, then at
 * increasing precisions; stop when two consecutive evaluations round every value to the same
 * binary64 bits and either the error bound proves every value (PROVEN) or proving the rest is
 * out of reach within prec_max (AGREED).  The next precision is p + p/2, or p plus the number
 * of bits the bound says are missing when that is larger.
 */
#include "kda_mpfr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_mpfr_impl.h"
#include "kda_internal.h"

#define PREC_LIMIT ((int64_t)1 << 24)
static const char who[] = "kda_mpfr_forward";

void kda_mpfr_options_init(kda_mpfr_options *o) {
  memset(o, 0, sizeof *o);
  o->prec0 = 128;
  o->prec_max = 4096;
}

const char *kda_mpfr_method_name(int32_t method) {
  switch (method) {
  case KDA_CERT_NONE: return "none";
  case KDA_CERT_PROVEN: return "proven";
  case KDA_CERT_AGREED: return "agreed";
  default: return NULL;
  }
}

/* ---- Checks. */

static int check_options(const kda_mpfr_options *o, char *err, size_t errlen) {
  if (o->prec0 < 53 || o->prec0 > PREC_LIMIT)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: prec0 = %lld is outside [53, 2^24]", who,
                    (long long)o->prec0);
  if (o->prec_max <= o->prec0 || o->prec_max > PREC_LIMIT)
    return kda_fail(KDA_EINVAL, err, errlen,
                    "%s: prec_max = %lld must exceed prec0 = %lld (two "
                    "precisions are compared) and be at most 2^24",
                    who, (long long)o->prec_max, (long long)o->prec0);
  if (o->require_proof < 0 || o->require_proof > 1 || o->reserved != 0)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: require_proof must be 0 or 1 and reserved 0",
                    who);
  return KDA_OK;
}

static int need(const void *ptr, const char *name, const char *why, char *err, size_t errlen) {
  if (ptr) return KDA_OK;
  return kda_fail(KDA_EINVAL, err, errlen, "%s: buffer %s is NULL but %s", who, name, why);
}

/* Which inputs the problem reads (SPEC.md §4.1, §5). */
static int decays(const kda_problem *p) { return kda_problem_gate_width(p) > 0; }
static int reads_dt_bias(const kda_problem *p) {
  return decays(p) && p->gate_mode != KDA_GATE_LOG;
}
static int reads_A_log(const kda_problem *p) { return reads_dt_bias(p) && p->has_A_log; }

static int check_buffers(const kda_problem *p, const kda_tensors_f64 *t, char *err,
                         size_t errlen) {
  const int tok = p->T > 0;
  int st = KDA_OK;
  if (!st && tok) st = need(t->q, "q", "T > 0", err, errlen);
  if (!st && tok) st = need(t->k, "k", "T > 0", err, errlen);
  if (!st && tok) st = need(t->v, "v", "T > 0", err, errlen);
  if (!st && tok) st = need(t->beta, "beta", "T > 0", err, errlen);
  if (!st && tok) st = need(t->o, "o", "T > 0", err, errlen);
  if (!st && tok && decays(p)) st = need(t->g, "g", "the family decays", err, errlen);
  if (!st && tok && reads_dt_bias(p))
    st = need(t->dt_bias, "dt_bias", "the gate mode reads it", err, errlen);
  if (!st && tok && reads_A_log(p)) st = need(t->A_log, "A_log", "has_A_log = 1", err, errlen);
  if (!st && p->has_initial_state)
    st = need(t->h0, "h0", "has_initial_state = 1", err, errlen);
  if (!st && p->want_final_state) st = need(t->ht, "ht", "want_final_state = 1", err, errlen);
  if (!st && p->n_checkpoints > 0) st = need(t->hc, "hc", "n_checkpoints > 0", err, errlen);
  return st;
}

/* Every element of x (shape dims[0..nd), index names lbl) is finite, or -inf where allowed. */
static int all_finite(const double *x, const char *name, int nd, const int64_t *dims,
                  const char *const *lbl, int allow_ninf, char *err, size_t errlen) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= dims[d];
  for (int64_t e = 0; e < n; e++) {
    if (isfinite(x[e]) || (allow_ninf && x[e] == -INFINITY)) continue;
    char at[160] = "";
    size_t used = 0;
    int64_t rem = e, stride = n;
    for (int d = 0; d < nd && used < sizeof at; d++) {
      stride /= dims[d];
      used += (size_t)snprintf(at + used, sizeof at - used, "%s%s=%lld", d ? "," : "", lbl[d],
                               (long long)(rem / stride));
      rem %= stride;
    }
    return kda_fail(KDA_ENONFINITE, err, errlen, "%s: %s[%s] = %g is not finite (SPEC.md §6.2%s)",
                    who, name, at, x[e], allow_ninf ? ": only g = -inf is allowed" : "");
  }
  return KDA_OK;
}

static int check_finite(const kda_problem *p, const kda_tensors_f64 *t, char *err,
                        size_t errlen) {
  static const char *const tok_h[] = {"t", "h", "i"}, *const tok_v[] = {"t", "hv", "j"};
  static const char *const tok_g[] = {"t", "hv", "c"}, *const hvc[] = {"hv", "c"};
  static const char *const kv[] = {"n", "hv", "i", "j"}, *const vk[] = {"n", "hv", "j", "i"};
  const int64_t GW = kda_problem_gate_width(p);
  const int64_t dq[] = {p->T, p->H, p->K}, dv[] = {p->T, p->HV, p->V};
  const int64_t dg[] = {p->T, p->HV, GW}, dbias[] = {p->HV, GW};
  const int vkl = p->state_layout == KDA_STATE_VK;
  const int64_t ds[] = {p->N, p->HV, vkl ? p->V : p->K, vkl ? p->K : p->V};
  int st = KDA_OK;
  if (p->T > 0) {
    if (!st) st = all_finite(t->q, "q", 3, dq, tok_h, 0, err, errlen);
    if (!st) st = all_finite(t->k, "k", 3, dq, tok_h, 0, err, errlen);
    if (!st) st = all_finite(t->v, "v", 3, dv, tok_v, 0, err, errlen);
    if (!st) st = all_finite(t->beta, "beta", 2, dv, tok_v, 0, err, errlen);
    if (!st && decays(p))
      st = all_finite(t->g, "g", 3, dg, tok_g, p->gate_mode == KDA_GATE_LOG, err, errlen);
    if (!st && reads_dt_bias(p))
      st = all_finite(t->dt_bias, "dt_bias", 2, dbias, hvc, 0, err, errlen);
    if (!st && reads_A_log(p)) st = all_finite(t->A_log, "A_log", 1, dbias, hvc, 0, err, errlen);
  }
  if (!st && p->has_initial_state)
    st = all_finite(t->h0, "h0", 4, ds, vkl ? vk : kv, 0, err, errlen);
  return st;
}

static int check_call(const kda_problem *p, const kda_tensors_f64 *t, const kda_mpfr_options *o,
                      char *err, size_t errlen) {
  if (!p) return kda_fail(KDA_EINVAL, err, errlen, "%s: problem is NULL", who);
  if (!t) return kda_fail(KDA_EINVAL, err, errlen, "%s: tensors are NULL", who);
  int st = check_options(o, err, errlen);
  if (!st) st = kda_problem_check(p, err, errlen);
  if (!st) st = check_buffers(p, t, err, errlen);
  if (!st) st = kda_problem_check_index(p, t->cu_seqlens, t->checkpoints, err, errlen);
  if (!st) st = check_finite(p, t, err, errlen);
  return st;
}

/* ---- Naming a value by its index in o | ht | hc. */

static void name_value(const kda_problem *p, int64_t idx, char *buf, size_t len) {
  const int64_t nO = p->T * p->HV * p->V, kv = p->K * p->V;
  const int64_t nHT = p->want_final_state ? p->N * p->HV * kv : 0;
  if (idx < nO) {
    snprintf(buf, len, "o[t=%lld,hv=%lld,j=%lld]", (long long)(idx / (p->HV * p->V)),
             (long long)(idx / p->V % p->HV), (long long)(idx % p->V));
    return;
  }
  idx -= nO;
  const char *q = "ht", *s = "n";
  if (idx >= nHT) {
    idx -= nHT;
    q = "hc";
    s = "c";
  }
  const int64_t slot = idx / (p->HV * kv), hv = idx / kv % p->HV, e = idx % kv;
  const int vk = p->state_layout == KDA_STATE_VK;
  const int64_t i = vk ? e % p->K : e / p->V, j = vk ? e / p->K : e % p->V;
  snprintf(buf, len, "%s[%s=%lld,hv=%lld,i=%lld,j=%lld]", q, s, (long long)slot, (long long)hv,
           (long long)i, (long long)j);
}

/* ---- MPFR's global state. */

typedef struct mpfr_state {
  mpfr_exp_t emin, emax;
  mpfr_flags_t flags;
} mpfr_state;

static void widen(mpfr_state *s) {
  s->emin = mpfr_get_emin();
  s->emax = mpfr_get_emax();
  s->flags = mpfr_flags_save();
  mpfr_set_emin(mpfr_get_emin_min());
  mpfr_set_emax(mpfr_get_emax_max());
}

static void restore(const mpfr_state *s) {
  mpfr_set_emin(s->emin);
  mpfr_set_emax(s->emax);
  mpfr_flags_restore(s->flags, MPFR_FLAGS_ALL);
}

/* ---- Ziv's loop. */

typedef struct ziv {
  const kda_problem *p;
  const kda_mpfr_options *o;
  int64_t n;                /* values */
  kda_mpfr_result res[2];   /* the current and the previous evaluation */
  int64_t prec[2];
  int cur;
  int64_t rounds;
} ziv;

static int64_t round32(int64_t p) { return (p + 31) / 32 * 32; }

/* The index of the first value whose bits differ between the two evaluations, or -1. */
static int64_t first_mismatch(const ziv *z) {
  const double *a = z->res[0].val, *b = z->res[1].val;
  for (int64_t i = 0; i < z->n; i++)
    if (kda_mpfr_bits(a[i]) != kda_mpfr_bits(b[i])) return i;
  return -1;
}

/* Values proven by either evaluation (they agree, so a proof of one is a proof of both). */
static int64_t count_proven(const ziv *z, int64_t *first) {
  int64_t c = 0;
  *first = -1;
  for (int64_t i = 0; i < z->n; i++) {
    if (z->res[0].proven[i] || z->res[1].proven[i])
      c++;
    else if (*first < 0)
      *first = i;
  }
  return c;
}

/* Whether more precision can be expected to prove the unproven values within prec_max: the
 * bound must be finite, fit, and shrink by about 2^-(p - p_prev) between evaluations. */
static int proof_in_reach(const ziv *z) {
  const kda_mpfr_result *c = &z->res[z->cur], *q = &z->res[!z->cur];
  const int64_t p = z->prec[z->cur], pq = z->prec[!z->cur];
  if (!isfinite(c->need_bits)) return 0;
  if ((double)p + c->need_bits + 16.0 > (double)z->o->prec_max) return 0;
  if (q->n_unproven > 0 && isfinite(q->need_bits) &&
      c->need_bits > q->need_bits - 0.5 * (double)(p - pq))
    return 0;
  return 1;
}

static int64_t next_precision(const ziv *z) {
  const kda_mpfr_result *c = &z->res[z->cur];
  const int64_t p = z->prec[z->cur];
  int64_t np = round32(p + p / 2);
  if (c->n_unproven > 0 && isfinite(c->need_bits) &&
      c->need_bits + 16.0 < (double)PREC_LIMIT) {
    const int64_t want = round32(p + (int64_t)ceil(c->need_bits) + 16);
    if (want > np) np = want;
  }
  if (np > z->o->prec_max) np = p < z->o->prec_max ? z->o->prec_max : -1;
  return np;
}

/* Runs evaluations until acceptance; returns the status and sets *method. */
static int loop(ziv *z, const kda_tensors_f64 *t, const int64_t *cu, int32_t *method,
                int64_t *n_proven, char *err, size_t errlen) {
  char name[128];
  int64_t p = z->o->prec0, mism = -1, first = -1;
  for (int have_prev = 0;; have_prev = 1) {
    z->prec[z->cur] = p;
    int st = kda_mpfr_run(z->p, t, cu, (mpfr_prec_t)p, &z->res[z->cur], err, errlen);
    z->rounds++;
    if (st) return st;
    if (have_prev && (mism = first_mismatch(z)) < 0) {
      *n_proven = count_proven(z, &first);
      if (*n_proven == z->n) {
        *method = KDA_CERT_PROVEN;
        return KDA_OK;
      }
      if (!proof_in_reach(z)) {
        if (!z->o->require_proof) {
          *method = KDA_CERT_AGREED;
          return KDA_OK;
        }
        name_value(z->p, first, name, sizeof name);
        return kda_fail(KDA_ENOTCERT, err, errlen,
                        "%s: %s could not be proven within prec_max = "
                        "%lld bits (require_proof; the bound lacks about %.0f bits at %lld)",
                        who, name, (long long)z->o->prec_max, z->res[z->cur].need_bits,
                        (long long)p);
      }
    }
    const int64_t np = next_precision(z);
    if (np < 0) {
      if (mism >= 0) {
        name_value(z->p, mism, name, sizeof name);
        return kda_fail(KDA_ENOTCERT, err, errlen,
                        "%s: %s did not settle: %a at %lld bits, %a at %lld bits (prec_max = %lld)",
                        who, name, z->res[z->cur].val[mism], (long long)p,
                        z->res[!z->cur].val[mism], (long long)z->prec[!z->cur],
                        (long long)z->o->prec_max);
      }
      return kda_fail(KDA_ENOTCERT, err, errlen,
                      "%s: no second precision fits below prec_max = %lld", who,
                      (long long)z->o->prec_max);
    }
    z->cur = !z->cur;
    p = np;
  }
}

static void copy_out(const kda_problem *p, const kda_tensors_f64 *t, const double *val) {
  const int64_t nO = p->T * p->HV * p->V, kv = p->HV * p->K * p->V;
  if (nO) memcpy(t->o, val, (size_t)nO * sizeof *val);
  val += nO;
  if (p->want_final_state) {
    memcpy(t->ht, val, (size_t)(p->N * kv) * sizeof *val);
    val += p->N * kv;
  }
  if (p->n_checkpoints > 0) memcpy(t->hc, val, (size_t)(p->n_checkpoints * kv) * sizeof *val);
}

int kda_mpfr_forward(const kda_problem *p, const kda_tensors_f64 *t, const kda_mpfr_options *o,
                     kda_mpfr_report *r, char *err, size_t errlen) {
  kda_mpfr_options def;
  if (!o) {
    kda_mpfr_options_init(&def);
    o = &def;
  }
  kda_mpfr_report rep;
  memset(&rep, 0, sizeof rep);
  int st = check_call(p, t, o, err, errlen);
  if (st) {
    if (r) *r = rep;
    return st;
  }
  const int64_t cu_default[2] = {0, p->T};
  const int64_t *cu = t->cu_seqlens ? t->cu_seqlens : cu_default;
  ziv z;
  memset(&z, 0, sizeof z);
  z.p = p;
  z.o = o;
  z.n = kda_mpfr_count_values(p);
  const size_t n = (size_t)z.n + 1;
  for (int i = 0; i < 2; i++) {
    z.res[i].val = malloc(n * sizeof(double));
    z.res[i].proven = malloc(n);
  }
  if (!z.res[0].val || !z.res[1].val || !z.res[0].proven || !z.res[1].proven) {
    st = kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot allocate %lld values", who, (long long)z.n);
  } else {
    mpfr_state saved;
    widen(&saved);
    st = loop(&z, t, cu, &rep.method, &rep.n_proven, err, errlen);
    restore(&saved);
  }
  rep.ziv_rounds = z.rounds;
  rep.n_values = z.n;
  if (st == KDA_OK) {
    const kda_mpfr_result *c = &z.res[z.cur];
    copy_out(p, t, c->val);
    rep.prec_used = z.prec[z.cur];
    rep.prec_check = z.prec[!z.cur];
    rep.expansive = c->expansive;
    rep.max_growth = c->max_growth;
    rep.max_rel_bound = c->max_rel_bound;
  } else {
    rep.method = KDA_CERT_NONE;
    rep.n_proven = 0;
  }
  for (int i = 0; i < 2; i++) {
    free(z.res[i].val);
    free(z.res[i].proven);
  }
  if (r) *r = rep;
  return st;
}

int kda_mpfr_check(const kda_problem *p, const kda_tensors_f64 *t, const kda_mpfr_options *o,
                   char *err, size_t errlen) {
  return check_call(p, t, o, err, errlen);
}

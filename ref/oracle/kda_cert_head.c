/* kda_cert_head.c: one value head of the fast certifier in double-double, with its a-priori
 * error bound (SPEC.md §8.12).
 * SPDX-License-Identifier: MIT
 *
 * Per token the coefficients q̂, k̂, a, b are enclosed in dd (kda_cert_dd.c, kda_cert_l2.c)
 * or, where those cannot, by the MPFR code of SPEC.md §8.3 at KDA_CERT_COEF_PREC bits rounded
 * to dd, their error bounds widened by the rounding; the state step runs in dd
 * (kda_cert_kern.h); the bounds D_j >= ||S_dd[:, j] - S*[:, j]|| and M_j >= ||S*[:, j]|| of
 * every column follow the recurrence of SPEC.md §8.5 with the dd constants of §8.12, in
 * double arithmetic rounded upward by hand (up()).  Every step runs with the floating-point
 * exception flags cleared; an underflow, overflow or invalid flag at its end (the relative
 * error model would not hold) makes the whole head undecided, and the caller sends it to MPFR.
 */
#include <fenv.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_cert_impl.h"
#include "kda_mpfr_impl.h"

#define KDA_CERT_COEF_PREC 128
#define FLAGS (FE_UNDERFLOW | FE_OVERFLOW | FE_INVALID)

/* u^2 with u = 2^-53: the relative error of rounding a 128-bit number to dd (SPEC §8.12). */
#define DD_CONV 0x1p-106

struct kda_cert_ws {
  int64_t K, V, GW;
  kda_mpfr_coef co;
  kda_cert_gate gate;
  kda_cert_dd dd;   /* the dd decay factors (kda_cert_dd.c); MPFR (gate) where they cannot */
  kda_cert_l2 l2;   /* the dd L2 normalisation (kda_cert_l2.c); MPFR (co) where it cannot */
  kda_mpfr_pool m;  /* [K] q mids, [K] k mids, [K] a mids, beta lo, hi, mid, tmp */
  kda_mpfr_vecnorm qn, kn;
  mpfr_t amax, ea, eb;
  double *buf;      /* every dd array below, in one allocation */
  kda_cert_step st;
  double *D, *M;    /* [V] the bounds of the current state, per column (SPEC.md §8.12) */
  double *cn;       /* [V] scratch: column norms of the computed state */
  struct gate_entry *gc; /* the decay-factor cache of the current head (gate_factor) */
  uint64_t gc_mask;
  struct gate_entry {
    uint64_t g;        /* the bits of g */
    int64_t ch;        /* channel; -1: empty slot */
    double ah, al;     /* the dd factor */
    double hi;         /* >= a* and >= mid (up) */
    double e;          /* >= |dd - a*| (up) */
    int le1;           /* a* <= 1 is shown */
    int bad;           /* the factor is outside the dd range: the head goes to MPFR */
  } gc_spare;
};

/* One channel's decay factor in dd with its bounds: a pure function of (channel, g) within a
 * head (dt_bias and A_log are per head), cached because stored gates are low-precision
 * numbers that repeat (a bf16 g has at most 65536 values): the cache changes no bit. */
typedef struct gate_entry gate_entry;

#define GATE_PROBES 8

/* ---- Upward and downward rounding by hand (x = RN(x*) of some exact x*; SPEC §8.12). */
static double up(double x) { return x + fabs(x) * 0x1p-50; }
static double dn(double x) { return x - fabs(x) * 0x1p-50; }
static double au(double a, double b) { return up(a + b); }
static double mu(double a, double b) { return up(a * b); }

/* A bound-precision MPFR number as a double rounded up (or down), clamped away from the
 * subnormal range: a positive bound below 2^-800 becomes 2^-800 (still an upper bound). */
static double bd_up(mpfr_srcptr x) {
  if (mpfr_zero_p(x)) return 0.0;
  if (!mpfr_number_p(x) || mpfr_get_exp(x) > 1000) return mpfr_sgn(x) > 0 ? INFINITY : -0x1p-800;
  if (mpfr_get_exp(x) < -800) return mpfr_sgn(x) > 0 ? 0x1p-800 : 0.0;
  return mpfr_get_d(x, MPFR_RNDU);
}

static double bd_dn(mpfr_srcptr x) {
  if (mpfr_zero_p(x)) return 0.0;
  if (!mpfr_number_p(x) || mpfr_get_exp(x) > 1000) return mpfr_sgn(x) > 0 ? 0x1p+1000 : -INFINITY;
  if (mpfr_get_exp(x) < -800) return mpfr_sgn(x) > 0 ? 0.0 : -0x1p-800;
  return mpfr_get_d(x, MPFR_RNDD);
}

/* ---- Workspace. */
kda_cert_ws *kda_cert_ws_new(const kda_problem *p) {
  kda_cert_ws *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->K = p->K;
  w->V = p->V;
  w->GW = kda_problem_gate_width(p);
  kda_mpfr_vecnorm_init(&w->qn);
  kda_mpfr_vecnorm_init(&w->kn);
  mpfr_inits2(KDA_MPFR_BOUND_PREC, w->amax, w->ea, w->eb, (mpfr_ptr)0);
  kda_cert_gate_init(&w->gate, KDA_CERT_COEF_PREC);
  kda_cert_dd_init(&w->dd);
  kda_cert_l2_init(&w->l2);
  const size_t K = (size_t)p->K, V = (size_t)p->V;
  int fail = kda_mpfr_coef_init(&w->co, KDA_CERT_COEF_PREC, p->K);
  fail |= kda_mpfr_pool_init(&w->m, 3 * K + 4, KDA_CERT_COEF_PREC);
  w->buf = malloc((2 * K * V + 12 * K + 9 * V) * sizeof(double));
  uint64_t cap = 64; /* about 2 T GW entries, at most 2^19 (32 MiB) */
  while (cap < ((uint64_t)1 << 19) && (double)cap < 2.0 * (double)p->T * (double)w->GW) cap *= 2;
  w->gc = w->GW > 0 ? malloc(cap * sizeof *w->gc) : NULL;
  w->gc_mask = cap - 1;
  if (fail || !w->buf || (w->GW > 0 && !w->gc)) {
    kda_cert_ws_free(w);
    return NULL;
  }
  double *b = w->buf;
  kda_cert_step *s = &w->st;
  s->K = p->K;
  s->V = p->V;
  s->Sh = b, b += K * V;
  s->Sl = b, b += K * V;
  double *ah = b, *al = b + K, *kh = b + 2 * K, *kl = b + 3 * K, *qh = b + 4 * K, *ql = b + 5 * K;
  s->ah = ah, s->al = al, s->kh = kh, s->kl = kl, s->qh = qh, s->ql = ql;
  s->nh = b + 6 * K, s->nl = b + 7 * K;
  b += 12 * K;
  s->uh = b, s->ul = b + V, s->wh = b + 2 * V, s->wl = b + 3 * V, s->oh = b + 4 * V;
  s->ol = b + 5 * V;
  w->D = b + 6 * V, w->M = b + 7 * V, w->cn = b + 8 * V;
  return w;
}

void kda_cert_ws_free(kda_cert_ws *w) {
  if (!w) return;
  kda_mpfr_coef_free(&w->co);
  kda_mpfr_pool_free(&w->m);
  kda_mpfr_vecnorm_clear(&w->qn);
  kda_mpfr_vecnorm_clear(&w->kn);
  mpfr_clears(w->amax, w->ea, w->eb, (mpfr_ptr)0);
  kda_cert_gate_clear(&w->gate);
  kda_cert_l2_clear(&w->l2);
  free(w->buf);
  free(w->gc);
  free(w);
}

/* ---- Coefficients: MPFR enclosures (SPEC.md §8.3) rounded to dd (SPEC.md §8.12). */

/* mid -> hi + lo with |mid - hi - lo| <= 2^-106 |mid|.  Returns 0, 1 when mid is tiny and was
 * flushed to 0 (its whole value is error, below KDA_CERT_FLUSH), -1 when it is too large. */
static int to_dd(mpfr_srcptr mid, mpfr_ptr tmp, double *h, double *l) {
  *h = *l = 0.0;
  if (mpfr_zero_p(mid)) return 0;
  const mpfr_exp_t e = mpfr_get_exp(mid);
  if (e > 960) return -1;
  if (e <= -800) return 1; /* |mid| < 2^-800 = KDA_CERT_FLUSH */
  *h = mpfr_get_d(mid, MPFR_RNDN);
  mpfr_sub_d(tmp, mid, *h, MPFR_RNDN); /* exact: |mid - hi| <= ulp(hi)/2, a multiple of ulp(mid) */
  *l = mpfr_get_d(tmp, MPFR_RNDN);     /* |tmp| >= ulp(mid) >= 2^-928: no underflow */
  return 0;
}

/* Dd values of n mids; *flushed counts the tiny ones.  -1 when one is too large. */
static int vec_to_dd(kda_cert_ws *w, mpfr_t *mid, int64_t n, double *h, double *l, int *flushed) {
  mpfr_ptr tmp = w->m.x[3 * w->K + 3];
  for (int64_t i = 0; i < n; i++) {
    const int r = to_dd(mid[i], tmp, &h[i], &l[i]);
    if (r < 0) return -1;
    *flushed += r;
  }
  return 0;
}

/* The norms of one step, in doubles (SPEC.md §8.12, "coefficients"). */
typedef struct norms {
  double qn, eq, kn, ek, kn2lo, amax, ea, bmag, eb, blo, bhi;
  int a_le_1;
} norms;

/* ||x|| >= max(||mid||, ||x*||, ||dd||) and e >= ||dd - x*||, from the MPFR vecnorm. */
static void vec_norms(const kda_mpfr_vecnorm *v, int flushed, int64_t K, double *n, double *e) {
  const double nm = bd_up(v->n);
  *n = mu(nm, 1.0 + 0x1p-105);
  *e = au(bd_up(v->e), mu(nm, DD_CONV));
  if (flushed) *e = au(*e, mu((double)K, KDA_CERT_FLUSH));
}

static int mpfr_factor(kda_cert_ws *w, const kda_problem *p, double g, const double *A,
                       const double *db, gate_entry *out);

/* The cache entry of (ch, g), computed on a miss: the enclosure of SPEC.md §8.3 / §8.12 for one
 * channel, rounded to dd, its error widened by the rounding (or by the flush). */
static const gate_entry *gate_factor(kda_cert_ws *w, const kda_problem *p, int64_t ch, double g,
                                     const double *A, const double *db) {
  static const gate_entry none = {0, -1, 0, 0, 0, 0, 0, 1};
  uint64_t bits;
  memcpy(&bits, &g, sizeof bits);
  uint64_t at = bits ^ ((uint64_t)ch * 0x9E3779B97F4A7C15u); /* splitmix64's finaliser */
  at = (at ^ (at >> 30)) * 0xBF58476D1CE4E5B9u;
  at = (at ^ (at >> 27)) * 0x94D049BB133111EBu;
  at ^= at >> 31;
  gate_entry *slot = NULL;
  for (int k = 0; k < GATE_PROBES; k++) {
    gate_entry *e = &w->gc[(at + (uint64_t)k) & w->gc_mask];
    if (e->ch == ch && e->g == bits) return e;
    if (e->ch < 0) {
      slot = e;
      break;
    }
  }
  gate_entry tmp, *out = slot ? slot : &tmp;
  kda_cert_dv a;
  if (!kda_cert_dd_gate(&w->dd, p, g, A, db, &a, &out->hi, &out->le1)) {
    out->ah = a.h, out->al = a.l, out->e = a.e, out->bad = 0; /* SPEC.md §8.12 */
  } else if (mpfr_factor(w, p, g, A, db, out)) {
    if (!slot) return &none;
    *out = none;
  }
  out->g = bits;
  out->ch = ch;
  if (!slot) { /* the probe window is full: not cached */
    w->gc_spare = tmp;
    return &w->gc_spare;
  }
  return out;
}

/* The MPFR enclosure of one factor (SPEC.md §8.3) rounded to dd: -1 when out of range. */
static int mpfr_factor(kda_cert_ws *w, const kda_problem *p, double g, const double *A,
                       const double *db, gate_entry *out) {
  mpfr_t *am = w->m.x + 2 * w->K;
  int r = kda_cert_gate_enclose(&w->gate, p, 1, &g, A, db, am, w->amax, w->ea);
  if (r == 1) r = kda_mpfr_coef_gate(&w->co, p, 1, &g, A, db, am, w->amax, w->ea);
  int flushed = 0;
  if (r || vec_to_dd(w, am, 1, &out->ah, &out->al, &flushed)) return -1;
  out->bad = 0;
  out->hi = bd_up(w->amax);
  out->e = au(bd_up(w->ea), mu(out->hi, DD_CONV)); /* |mid| <= hi */
  if (flushed) out->e = au(out->e, KDA_CERT_FLUSH);
  out->le1 = mpfr_cmp_ui(w->amax, 1) <= 0;
  return 0;
}

/* q̂ or k̂ by the MPFR enclosure of SPEC.md §8.3 rounded to dd (where kda_cert_dd_l2 cannot):
 * -1 when a value is out of the dd range. */
static int l2_mpfr(kda_cert_ws *w, const kda_problem *p, int is_q, const double *x, mpfr_t *mid,
                   kda_mpfr_vecnorm *vn, double *h, double *l, double *n, double *e) {
  int flushed = 0;
  kda_mpfr_coef_l2(&w->co, p, is_q, w->K, x, mid, vn);
  if (vec_to_dd(w, mid, w->K, h, l, &flushed)) return -1;
  vec_norms(vn, flushed, w->K, n, e);
  return 0;
}

static int coefficients(const kda_cert_job *job, kda_cert_ws *w, int64_t t, int64_t hv,
                        norms *nm) {
  const kda_problem *p = job->p;
  const kda_tensors_f64 *ts = job->t;
  const int64_t K = w->K, GW = w->GW;
  const int64_t h = p->head_map == KDA_HEADMAP_DIV ? hv / (p->HV / p->H) : hv % p->H;
  mpfr_t *qm = w->m.x, *km = w->m.x + K;
  mpfr_ptr blo = w->m.x[3 * K], bhi = w->m.x[3 * K + 1], bmid = w->m.x[3 * K + 2];
  kda_cert_step *s = &w->st;
  const size_t off = (size_t)((t * p->H + h) * K);
  kda_cert_l2_norms dq, dk;
  if (kda_cert_dd_l2(&w->l2, p, 1, K, ts->q + off, s->qh, s->ql, &dq) == 0) {
    nm->qn = dq.n, nm->eq = dq.e;
  } else if (l2_mpfr(w, p, 1, ts->q + off, qm, &w->qn, s->qh, s->ql, &nm->qn, &nm->eq)) {
    return -1;
  }
  if (kda_cert_dd_l2(&w->l2, p, 0, K, ts->k + off, s->kh, s->kl, &dk) == 0) {
    nm->kn = dk.n, nm->ek = dk.e, nm->kn2lo = dk.n2lo;
  } else if (l2_mpfr(w, p, 0, ts->k + off, km, &w->kn, s->kh, s->kl, &nm->kn, &nm->ek)) {
    return -1;
  } else {
    nm->kn2lo = bd_dn(w->kn.n2lo);
  }
  int fb = 0;
  if (GW > 0) {
    const int gated = p->gate_mode != KDA_GATE_LOG;
    const double *A = gated && p->has_A_log ? ts->A_log + hv : NULL;
    const double *db = gated ? ts->dt_bias + hv * GW : NULL;
    const double *g = ts->g + (t * p->HV + hv) * GW;
    nm->amax = nm->ea = 0.0;
    nm->a_le_1 = 1;
    for (int64_t ch = 0; ch < GW; ch++) {
      const gate_entry *ge = gate_factor(w, p, ch, g[ch], A, db ? db + ch : NULL);
      if (ge->bad) return -1;
      s->ah[ch] = ge->ah;
      s->al[ch] = ge->al;
      const double hi = mu(ge->hi, 1.0 + 0x1p-105); /* also >= the dd factor */
      if (hi > nm->amax) nm->amax = hi;
      if (ge->e > nm->ea) nm->ea = ge->e;
      nm->a_le_1 &= ge->le1;
    }
  } else {
    nm->amax = 1.0;
    nm->ea = 0.0;
    nm->a_le_1 = 1;
  }
  kda_mpfr_coef_beta(&w->co, p->beta_mode, ts->beta[t * p->HV + hv], blo, bhi, bmid, w->eb);
  if (to_dd(bmid, w->m.x[3 * K + 3], &s->bh, &s->bl) < 0) return -1;
  fb = mpfr_zero_p(bmid) ? 0 : mpfr_get_exp(bmid) <= -800;
  nm->blo = bd_dn(blo);
  nm->bhi = bd_up(bhi);
  const double bm = fabs(nm->blo) > fabs(nm->bhi) ? fabs(nm->blo) : fabs(nm->bhi);
  nm->bmag = mu(bm, 1.0 + 0x1p-105);
  nm->eb = au(bd_up(w->eb), mu(bm, DD_CONV));
  if (fb) nm->eb = au(nm->eb, KDA_CERT_FLUSH);
  const double *v = ts->v + (t * p->HV + hv) * w->V;
  s->v = v;
  return 0;
}

/* ---- The bound (SPEC.md §8.5 with the dd model of §8.12), upward throughout. */

/* rho >= ||(I - b* k* k*^T) Diag(a*)||_2; *nonexp = 1 when the step is shown non-expansive. */
static double growth(const norms *nm, int erase, int *nonexp) {
  *nonexp = 1;
  if (!erase) return 1.0;
  const double n2 = mu(nm->kn, nm->kn);
  double xlo, xhi;
  if (nm->blo >= 0) {
    xlo = dn(nm->blo * nm->kn2lo);
    xhi = mu(nm->bhi, n2);
  } else {
    xlo = dn(nm->blo * n2);
    xhi = up(nm->bhi * (nm->bhi > 0 ? n2 : nm->kn2lo));
  }
  *nonexp = xlo >= 0 && xhi <= 2 && nm->a_le_1;
  double rho = 1.0;
  const double x1 = up(xhi - 1.0), x2 = up(1.0 - xlo);
  if (x1 > rho) rho = x1;
  if (x2 > rho) rho = x2;
  return mu(rho, nm->amax);
}

/* gamma_n = n ud / (1 - n ud) for the n-term recursive dd sums (n ud < 2^-60). */
static double gamma_n(int64_t n) { return mu(mu((double)n, KDA_CERT_UD), 1.0 + 0x1p-59); }

/* Per column j (SPEC.md §8.12, "per column"): D_j <- rho D_j + epsA Sn_j + epsB_j + F_j,
 * M_j <- rho M_j + b ||k|| |v_j|, with Sn_j = M_j + D_j >= ||S^_{:,j}||. */
static void bound_step(kda_cert_ws *w, const norms *nm, int erase, double rho) {
  const double ud = KDA_CERT_UD, g = gamma_n(w->K + 1), g2 = gamma_n(2);
  const double kn = nm->kn, bm = nm->bmag;
  const double cb = au(mu(nm->eb, kn), mu(bm, nm->ek)), bk = mu(bm, kn);
  const double t1 = mu(nm->amax, kn);
  double epsa = 0.0;
  if (erase) {
    epsa = au(nm->ea, au(mu(mu(nm->eb, kn), t1), mu(mu(bm, nm->ek), t1)));
    epsa = au(epsa, mu(bm, au(mu(nm->ea, kn), mu(nm->amax, nm->ek))));
  }
  const double *v = w->st.v;
  for (int64_t j = 0; j < w->V; j++) {
    const double vn = fabs(v[j]), sn = au(w->M[j], w->D[j]);
    double F;
    if (erase) {
      const double un = au(vn, mu(t1, sn));
      const double e1 = mu(mu(ud, sn), t1);
      const double eu = au(e1, mu(g, au(vn, mu(mu(1.0 + ud, t1), sn))));
      const double ew = mu(bm, au(eu, mu(ud, au(un, eu))));
      const double wn = mu(mu(bm, 1.0 + ud), au(un, eu));
      F = au(mu(kn, ew), mu(g2, au(mu(nm->amax, sn), mu(kn, wn))));
    } else {
      const double ew = mu(mu(ud, bm), vn), wn = mu(mu(bm, 1.0 + ud), vn);
      F = au(mu(kn, ew), mu(g2, au(sn, mu(kn, wn))));
    }
    double D = au(au(au(mu(rho, w->D[j]), mu(epsa, sn)), mu(cb, vn)), F);
    double M = au(mu(rho, w->M[j]), mu(bk, vn));
    w->D[j] = isnan(D) ? INFINITY : D;
    w->M[j] = isnan(M) ? INFINITY : M;
  }
}

/* ---- Deciding a value: [h + l - e, h + l + e] strictly inside the rounding interval of h,
 * i.e. l + e below half the spacing above h and l - e above minus half the spacing below
 * (the spacing towards zero halves when |h| is a power of 2). */
static int decide(double h, double l, double e, double *out) {
  *out = h == 0.0 ? 0.0 : h; /* +0 for zeros (SPEC.md §8.1) */
  if (!(e >= 0.0) || !isfinite(e) || !isfinite(h)) return 0;
  if (h == 0.0) return l == 0.0 && e == 0.0;
  const double a = fabs(h);
  if (a < KDA_CERT_TINY || a > KDA_CERT_HUGE) return 0;
  const int E = ilogb(h);
  const double away = ldexp(1.0, E - 53);
  const double toward = a == ldexp(1.0, E) ? ldexp(1.0, E - 54) : away;
  const double above = h > 0 ? away : toward, below = h > 0 ? toward : away;
  /* RN(x) < m (1 - 2^-50) implies x < m; m (1 - 2^-50) is exact and nothing here underflows
   * with an inexact result (a subnormal sum or difference is exact) */
  return l + e < above - above * 0x1p-50 && l - e > -(below - below * 0x1p-50);
}

typedef struct head {
  const kda_cert_job *job;
  kda_cert_ws *w;
  int64_t hv, nO, nHT;
  kda_cert_head_result *res;
} head;

static void put(head *hd, int64_t idx, double h, double l, double e) {
  double val;
  e *= hd->job->bound_scale;
  const int ok = decide(h, l, e, &val);
  hd->job->val[idx] = val;
  hd->job->decided[idx] = (unsigned char)ok;
  hd->res->n_decided += ok;
  if (h != 0.0 && isfinite(h) && e > 0.0 && isfinite(e) && ilogb(e) - ilogb(h) > -900) {
    const double rel = up(e / fabs(h)); /* no underflow: the quotient exceeds 2^-901 */
    if (rel > hd->res->max_rel_bound) hd->res->max_rel_bound = rel;
  }
}

static int64_t state_index(const kda_problem *p, int64_t slot, int64_t hv, int64_t i, int64_t j) {
  const int64_t base = (slot * p->HV + hv) * p->K * p->V;
  return base + (p->state_layout == KDA_STATE_VK ? j * p->K + i : i * p->V + j);
}

static void put_states(head *hd, int64_t offset, int64_t slot) {
  const kda_cert_step *s = &hd->w->st;
  for (int64_t i = 0; i < s->K; i++)
    for (int64_t j = 0; j < s->V; j++)
      put(hd, offset + state_index(hd->job->p, slot, hd->hv, i, j), s->Sh[i * s->V + j],
          s->Sl[i * s->V + j], hd->w->D[j]);
}

static void load_state(head *hd, int64_t n) {
  const kda_problem *p = hd->job->p;
  const kda_tensors_f64 *ts = hd->job->t;
  kda_cert_ws *w = hd->w;
  for (int64_t j = 0; j < w->V; j++) w->cn[j] = 0.0;
  for (int64_t i = 0; i < w->K; i++)
    for (int64_t j = 0; j < w->V; j++) {
      const double x = p->has_initial_state ? ts->h0[state_index(p, n, hd->hv, i, j)] : 0.0;
      w->st.Sh[i * w->V + j] = x;
      w->st.Sl[i * w->V + j] = 0.0;
      w->cn[j] = au(w->cn[j], mu(x, x));
    }
  for (int64_t j = 0; j < w->V; j++) {
    w->M[j] = up(sqrt(w->cn[j])); /* ||h0_{:,j}|| */
    w->D[j] = 0.0;
  }
}

/* M_j <- min(M_j, ||S^_{:,j}||+ + D_j) per column (SPEC.md §8.12, "a tighter M"): the norm of
 * the computed column plus its error bound is also an upper bound on ||S*_{:,j}||, and far
 * below the recurrence's sum of write norms when the state is a random walk (slow decay, no
 * decay), which is what lets long drift heads be decided.  ||S^_{:,j}||+ sums
 * (|Sh| + |Sl|)^2 upward; a square that underflows loses less than 2^-1022 each, covered by
 * adding 2^-500 to the root (K <= 2^22); the flags it raises are not the step's and are
 * restored. */
static void tighten_M(kda_cert_ws *w) {
  fexcept_t saved;
  fegetexceptflag(&saved, FLAGS);
  const kda_cert_step *s = &w->st;
  const int64_t V = s->V;
  double *restrict c = w->cn;
  for (int64_t j = 0; j < V; j++) c[j] = 0.0;
  for (int64_t i = 0; i < s->K; i++)
    for (int64_t j = 0; j < V; j++) {
      const double a = au(fabs(s->Sh[i * V + j]), fabs(s->Sl[i * V + j]));
      c[j] = au(c[j], mu(a, a));
    }
  for (int64_t j = 0; j < V; j++) {
    const double n = au(au(up(sqrt(c[j])), 0x1p-500), w->D[j]);
    if (n < w->M[j]) w->M[j] = n;
  }
  fesetexceptflag(&saved, FLAGS);
}

/* One token of the head: coefficients, bound, dd step, outputs.  -1: out of dd range. */
static int token(head *hd, int64_t t) {
  const kda_problem *p = hd->job->p;
  kda_cert_ws *w = hd->w;
  kda_cert_step *s = &w->st;
  norms nm;
  feclearexcept(FLAGS);
  if (coefficients(hd->job, w, t, hd->hv, &nm)) return -1;
  s->erase = p->family != KDA_FAMILY_LINEAR;
  s->decay = w->GW > 0;
  s->scalar_gate = w->GW == 1;
  int nonexp;
  const double rho = growth(&nm, s->erase, &nonexp);
  if (!nonexp) hd->res->expansive = 1;
  if (rho > hd->res->max_growth) hd->res->max_growth = rho;
  bound_step(w, &nm, s->erase, rho);
  hd->job->step(s);
  tighten_M(w);
  /* q̂ = 0 (a zero q row): every output is exactly 0 */
  const double gq = mu(gamma_n(w->K + 1), nm.qn);
  for (int64_t j = 0; j < w->V; j++) {
    const double eo = nm.qn == 0.0 ? 0.0
                                   : au(au(mu(w->D[j], nm.qn), mu(w->M[j], nm.eq)),
                                        mu(gq, au(w->M[j], w->D[j])));
    put(hd, (t * p->HV + hd->hv) * w->V + j, s->oh[j], s->ol[j], eo);
  }
  return fetestexcept(FLAGS) ? -1 : 0;
}

static int sequences(head *hd) {
  const kda_problem *p = hd->job->p;
  const kda_tensors_f64 *ts = hd->job->t;
  int64_t c = 0;
  for (int64_t n = 0; n < p->N; n++) {
    load_state(hd, n);
    for (int64_t t = hd->job->cu[n]; t < hd->job->cu[n + 1]; t++) {
      if (token(hd, t)) return -1;
      if (c < p->n_checkpoints && ts->checkpoints[c] == t) put_states(hd, hd->nO + hd->nHT, c++);
    }
    if (p->want_final_state) put_states(hd, hd->nO, n);
  }
  return 0;
}

/* Marks every value of the head undecided. */
static void undecide(head *hd) {
  const kda_problem *p = hd->job->p;
  unsigned char *d = hd->job->decided;
  for (int64_t t = 0; t < p->T; t++) memset(d + (t * p->HV + hd->hv) * p->V, 0, (size_t)p->V);
  const int64_t slots = (p->want_final_state ? p->N : 0) + p->n_checkpoints;
  for (int64_t sl = 0; sl < slots; sl++)
    memset(d + hd->nO + (sl * p->HV + hd->hv) * p->K * p->V, 0, (size_t)(p->K * p->V));
}

void kda_cert_head_run(const kda_cert_job *job, kda_cert_ws *w, int64_t hv,
                       kda_cert_head_result *res) {
  const kda_problem *p = job->p;
  memset(res, 0, sizeof *res);
  res->safe = 1;
  for (uint64_t i = 0; w->gc && i <= w->gc_mask; i++) w->gc[i].ch = -1; /* a new head */
  head hd = {job, w, hv, p->T * p->HV * p->V,
             p->want_final_state ? p->N * p->HV * p->K * p->V : 0, res};
  if (sequences(&hd)) {
    res->safe = 0;
    res->n_decided = 0;
    undecide(&hd);
  }
}

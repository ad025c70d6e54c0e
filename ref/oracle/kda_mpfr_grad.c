/* kda_mpfr_grad.c: the certified gradients of SPEC.md §13 (kda_mpfr_backward, SPEC.md §13.8).
 * SPDX-License-Identifier: MIT
 *
 * Ball arithmetic in MPFR: every quantity is a ball (m, r), an m of p bits and a radius r of
 * KDA_MPFR_BOUND_PREC bits rounded upward, with the invariant |x* - m| <= r for the exact real
 * x* it stands for.  Each operation keeps the invariant rigorously:
 *   x +- y    m = RN(mx +- my),  r = rx + ry + 2^-p |m|
 *   x * y     m = RN(mx my),     r = |mx| ry + |my| rx + rx ry + 2^-p |m|
 *   sum_i x_i y_i   one mpfr_sum of exact products, r = sum_i (|mx| ry + |my| rx + rx ry) + 2^-p |m|
 *   f(x), f monotone (exp, sqrt, 1/x, sigma, softplus): f at the endpoints m -+ r with every
 *             rounding directed outward, m = RN(midpoint), r = half-width rounded up
 * (round to nearest has |RN(x) - x| <= 2^-p |RN(x)|; the exponent range is the widest, so
 * nothing overflows or underflows).  The forward states of one (sequence, head) are kept as
 * balls; the adjoint of SPEC.md §13.2-§13.4 then runs on balls.  A gradient value is proven
 * when both ends of its ball round to the same binary64 number (SPEC.md §8.6); Ziv's loop
 * raises the precision until every value is proven or prec_max is reached.
 *
 * The evaluation order is written for the proof, not for speed: it is independent of the
 * float64 reference's (dot products in one rounding, the coefficients by enclosure).
 */
#include "kda_mpfr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "kda_backward.h"
#include "kda_internal.h"
#include "kda_mpfr_impl.h"

static const char who[] = "kda_mpfr_backward";

#define BP KDA_MPFR_BOUND_PREC

typedef struct ball {
  mpfr_t m, r;
} ball;

/* Scratch of one evaluation at precision prec. */
typedef struct gctx {
  mpfr_prec_t prec;
  mpfr_t t1, t2, lo, hi;   /* p-bit (lo, hi: p + 64 bits for endpoint arithmetic) */
  mpfr_t b1, b2;           /* bound precision */
  mpfr_t *prod;            /* [nmax] exact products, 2p bits */
  mpfr_ptr *pprod;
  int64_t nprod, nmax;
  mpfr_t racc;             /* radius accumulator of a dot product */
  mpfr_t ss, sq;           /* exact sum of squares and one square (ggml's branch) */
} gctx;

static void ball_init(ball *b, mpfr_prec_t p) {
  mpfr_init2(b->m, p);
  mpfr_init2(b->r, BP);
  mpfr_set_zero(b->m, 1);
  mpfr_set_zero(b->r, 1);
}
static void ball_clear(ball *b) {
  mpfr_clear(b->m);
  mpfr_clear(b->r);
}
static ball *balls_new(size_t n, mpfr_prec_t p) {
  ball *b = malloc((n ? n : 1) * sizeof *b);
  if (b)
    for (size_t i = 0; i < n; i++) ball_init(&b[i], p);
  return b;
}
static void balls_free(ball *b, size_t n) {
  if (!b) return;
  for (size_t i = 0; i < n; i++) ball_clear(&b[i]);
  free(b);
}

static void ball_set_d(ball *z, double x) {
  mpfr_set_d(z->m, x, MPFR_RNDN); /* exact: p >= 53 */
  mpfr_set_zero(z->r, 1);
}
static void ball_set(ball *z, const ball *x) {
  mpfr_set(z->m, x->m, MPFR_RNDN);
  mpfr_set(z->r, x->r, MPFR_RNDU);
}

/* z->r += 2^-p |z->m|: the rounding of z->m to nearest. */
static void add_rounding(gctx *c, ball *z) {
  mpfr_abs(c->b1, z->m, MPFR_RNDU);
  mpfr_mul_2si(c->b1, c->b1, -(long)c->prec, MPFR_RNDU);
  mpfr_add(z->r, z->r, c->b1, MPFR_RNDU);
}

/* z = x + s*y, s = +1 or -1.  z may alias x or y. */
static void ball_add(gctx *c, ball *z, const ball *x, const ball *y, int s) {
  mpfr_add(c->b2, x->r, y->r, MPFR_RNDU);
  if (s > 0)
    mpfr_add(z->m, x->m, y->m, MPFR_RNDN);
  else
    mpfr_sub(z->m, x->m, y->m, MPFR_RNDN);
  mpfr_set(z->r, c->b2, MPFR_RNDU);
  add_rounding(c, z);
}

/* The radius of x*y before rounding, into c->b2: |mx| ry + |my| rx + rx ry. */
static void mul_radius(gctx *c, const ball *x, const ball *y) {
  mpfr_abs(c->b1, x->m, MPFR_RNDU);
  mpfr_mul(c->b2, c->b1, y->r, MPFR_RNDU);
  mpfr_abs(c->b1, y->m, MPFR_RNDU);
  mpfr_mul(c->b1, c->b1, x->r, MPFR_RNDU);
  mpfr_add(c->b2, c->b2, c->b1, MPFR_RNDU);
  mpfr_mul(c->b1, x->r, y->r, MPFR_RNDU);
  mpfr_add(c->b2, c->b2, c->b1, MPFR_RNDU);
}

/* z = x * y.  z may alias x or y. */
static void ball_mul(gctx *c, ball *z, const ball *x, const ball *y) {
  mul_radius(c, x, y);
  mpfr_mul(z->m, x->m, y->m, MPFR_RNDN);
  mpfr_set(z->r, c->b2, MPFR_RNDU);
  add_rounding(c, z);
}

/* A dot product: dot_begin, dot_term for each pair (plus dot_add for a lone term), dot_end. */
static void dot_begin(gctx *c) {
  c->nprod = 0;
  mpfr_set_zero(c->racc, 1);
}
static void dot_term(gctx *c, const ball *x, const ball *y, int neg) {
  mul_radius(c, x, y);
  mpfr_add(c->racc, c->racc, c->b2, MPFR_RNDU);
  mpfr_mul(c->prod[c->nprod], x->m, y->m, MPFR_RNDN); /* exact: 2p bits */
  if (neg) mpfr_neg(c->prod[c->nprod], c->prod[c->nprod], MPFR_RNDN);
  c->pprod[c->nprod] = c->prod[c->nprod];
  c->nprod++;
}
static void dot_add(gctx *c, const ball *x) {
  mpfr_add(c->racc, c->racc, x->r, MPFR_RNDU);
  mpfr_set(c->prod[c->nprod], x->m, MPFR_RNDN); /* exact */
  c->pprod[c->nprod] = c->prod[c->nprod];
  c->nprod++;
}
static void dot_end(gctx *c, ball *z) {
  mpfr_sum(z->m, c->pprod, (unsigned long)c->nprod, MPFR_RNDN);
  mpfr_set(z->r, c->racc, MPFR_RNDU);
  add_rounding(c, z);
}

/* A real function evaluated with every rounding in direction rnd (outward for the ends). */
typedef void (*dirfn)(gctx *c, mpfr_ptr out, mpfr_srcptr x, mpfr_rnd_t rnd);

static mpfr_rnd_t flip(mpfr_rnd_t r) { return r == MPFR_RNDD ? MPFR_RNDU : MPFR_RNDD; }

static void f_exp(gctx *c, mpfr_ptr out, mpfr_srcptr x, mpfr_rnd_t rnd) {
  (void)c;
  mpfr_exp(out, x, rnd);
}
static void f_sqrt(gctx *c, mpfr_ptr out, mpfr_srcptr x, mpfr_rnd_t rnd) {
  (void)c;
  if (mpfr_sgn(x) < 0) { /* the argument is a sum of squares: never negative */
    mpfr_set_zero(out, 1);
    return;
  }
  mpfr_sqrt(out, x, rnd);
}
/* sigma(x) = 1 / (1 + e^-x): increasing in x; e^-x and the sum rounded against rnd. */
static void f_sigmoid(gctx *c, mpfr_ptr out, mpfr_srcptr x, mpfr_rnd_t rnd) {
  mpfr_neg(c->t2, x, MPFR_RNDN);
  mpfr_exp(c->t2, c->t2, flip(rnd));
  mpfr_add_ui(c->t2, c->t2, 1, flip(rnd));
  mpfr_ui_div(out, 1, c->t2, rnd);
}
/* softplus(x) = x + log1p(e^-x) (x > 0) or log1p(e^x): increasing in every inner value. */
static void f_softplus(gctx *c, mpfr_ptr out, mpfr_srcptr x, mpfr_rnd_t rnd) {
  if (mpfr_sgn(x) > 0) {
    mpfr_neg(c->t2, x, MPFR_RNDN);
    mpfr_exp(c->t2, c->t2, flip(rnd)); /* decreasing in x: but at a fixed x, a bound on */
    mpfr_log1p(c->t2, c->t2, rnd);     /* softplus needs e^-x rounded in rnd's direction */
    mpfr_add(out, x, c->t2, rnd);
  } else {
    mpfr_exp(c->t2, x, rnd);
    mpfr_log1p(out, c->t2, rnd);
  }
}

/* z = f(x) for f increasing (dec = 0) or decreasing (dec = 1) on the ball's interval. */
static void ball_fn(gctx *c, ball *z, const ball *x, dirfn f, int dec) {
  mpfr_sub(c->lo, x->m, x->r, MPFR_RNDD);
  mpfr_add(c->hi, x->m, x->r, MPFR_RNDU);
  if (!mpfr_number_p(x->r)) {
    f(c, z->m, x->m, MPFR_RNDN);
    mpfr_set_inf(z->r, 1);
    return;
  }
  f(c, c->t1, dec ? c->hi : c->lo, MPFR_RNDD); /* the lower end of f */
  f(c, c->lo, dec ? c->lo : c->hi, MPFR_RNDU); /* the upper end (c->lo reused) */
  mpfr_add(z->m, c->t1, c->lo, MPFR_RNDN);
  mpfr_div_2ui(z->m, z->m, 1, MPFR_RNDN);
  mpfr_sub(c->b1, z->m, c->t1, MPFR_RNDU);
  mpfr_sub(c->b2, c->lo, z->m, MPFR_RNDU);
  mpfr_max(z->r, c->b1, c->b2, MPFR_RNDU);
  if (mpfr_sgn(z->r) < 0) mpfr_set_zero(z->r, 1);
}

/* z = 1 / x for a ball with x > 0; an infinite radius when the ball reaches 0. */
static void f_rec(gctx *c, mpfr_ptr out, mpfr_srcptr x, mpfr_rnd_t rnd) {
  (void)c;
  mpfr_ui_div(out, 1, x, rnd);
}
static void ball_rec(gctx *c, ball *z, const ball *x) {
  mpfr_sub(c->b1, x->m, x->r, MPFR_RNDD);
  if (mpfr_sgn(c->b1) <= 0) {
    mpfr_ui_div(z->m, 1, x->m, MPFR_RNDN);
    mpfr_set_inf(z->r, 1);
    return;
  }
  ball_fn(c, z, x, f_rec, 1);
}

/* ---- One evaluation. */

typedef struct geval {
  const kda_problem *p;
  const kda_tensors_f64 *t;
  const kda_grads_f64 *d;
  const int64_t *cu;
  gctx c;
  int64_t GW, L;        /* gate width, longest sequence */
  ball *St;             /* [L][K][V] the state before each token of the current head */
  ball *S, *Sd, *Sn, *dS; /* [K][V] */
  ball *xq, *xk, *lq, *qq, *kk, *a, *geff, *dqq, *dkk, *dgeff, *tmpK; /* [K] */
  ball *pr, *e, *r, *dr, *dout; /* [V] */
  ball beta, db, one, scale, eps, s1, s2, s3;
  ball *dq, *dk, *dA_log, *ddt_bias; /* sums: [T,H,K], [T,H,K], [HV], [HV,GW] */
  ball *out;            /* [n_values] every gradient, in kda_mpfr_backward's order */
  int64_t o_dv, o_dg, o_dbeta, o_dh0; /* offsets into out */
} geval;

/* y = c0 * L2(x) as balls (SPEC.md §4.3, §4.5); x exact doubles. */
static void l2_ball(geval *w, const double *x, ball *xb, ball *y, const ball *c0) {
  gctx *c = &w->c;
  const kda_problem *p = w->p;
  const int64_t K = p->K;
  for (int64_t i = 0; i < K; i++) ball_set_d(&xb[i], x[i]);
  if (p->l2_mode == KDA_L2_OFF) {
    for (int64_t i = 0; i < K; i++) ball_mul(c, &y[i], &xb[i], c0);
    return;
  }
  dot_begin(c);
  for (int64_t i = 0; i < K; i++) dot_term(c, &xb[i], &xb[i], 0);
  if (p->l2_mode == KDA_L2_FLA) dot_add(c, &w->eps);
  dot_end(c, &w->s1); /* s1 = sum x^2 (+ eps) */
  int floor_branch = 0;
  if (p->l2_mode == KDA_L2_GGML) { /* ||x|| <= eps decided exactly: sum x^2 <= eps^2 */
    mpfr_set_zero(c->ss, 1);
    for (int64_t i = 0; i < K; i++) {
      mpfr_set_d(c->sq, x[i], MPFR_RNDN);
      mpfr_sqr(c->sq, c->sq, MPFR_RNDN);        /* exact: 106 bits */
      mpfr_add(c->ss, c->ss, c->sq, MPFR_RNDN); /* exact: the accumulator spans every double^2 */
    }
    mpfr_set_d(c->sq, p->l2_eps, MPFR_RNDN);
    mpfr_sqr(c->sq, c->sq, MPFR_RNDN);
    floor_branch = mpfr_cmp(c->ss, c->sq) <= 0;
  }
  if (floor_branch) {
    ball_set(&w->s2, &w->eps);
  } else {
    ball_fn(c, &w->s2, &w->s1, f_sqrt, 0); /* d */
  }
  ball_rec(c, &w->s3, &w->s2);    /* 1/d */
  ball_mul(c, &w->s3, &w->s3, c0); /* c0/d */
  for (int64_t i = 0; i < K; i++) ball_mul(c, &y[i], &xb[i], &w->s3);
}

/* Coefficients of token t, head hv: lq = L2(q), qq = scale lq, kk = L2(k), a, geff, beta. */
static void coefs(geval *w, int64_t t, int64_t hv) {
  gctx *c = &w->c;
  const kda_problem *p = w->p;
  const int64_t h = p->head_map == KDA_HEADMAP_DIV ? hv / (p->HV / p->H) : hv % p->H;
  const size_t oqk = ((size_t)t * (size_t)p->H + (size_t)h) * (size_t)p->K;
  l2_ball(w, w->t->q + oqk, w->xq, w->qq, &w->scale);
  l2_ball(w, w->t->k + oqk, w->xk, w->kk, &w->one);
  if (w->GW > 0) {
    const double *g = w->t->g + ((size_t)t * (size_t)p->HV + (size_t)hv) * (size_t)w->GW;
    for (int64_t ch = 0; ch < w->GW; ch++) {
      ball *ge = &w->geff[ch];
      if (p->gate_mode == KDA_GATE_LOG) {
        if (g[ch] == -INFINITY) { /* a full wipe: a = 0 exactly, dg = 0 (SPEC.md §13.3) */
          mpfr_set_inf(ge->m, -1);
          mpfr_set_zero(ge->r, 1);
          mpfr_set_zero(w->a[ch].m, 1);
          mpfr_set_zero(w->a[ch].r, 1);
          continue;
        }
        ball_set_d(ge, g[ch]);
      } else {
        ball_set_d(&w->s1, g[ch]);
        ball_set_d(&w->s2, w->t->dt_bias[hv * w->GW + ch]);
        ball_add(c, &w->s1, &w->s1, &w->s2, 1); /* x = g + dt_bias */
        const int hasA = p->has_A_log;
        if (hasA) {
          ball_set_d(&w->s2, w->t->A_log[hv]);
          ball_fn(c, &w->s2, &w->s2, f_exp, 0); /* E */
        }
        if (p->gate_mode == KDA_GATE_SOFTPLUS) {
          ball_fn(c, &w->s3, &w->s1, f_softplus, 0);
          ball_mul(c, ge, &w->s2, &w->s3);
          mpfr_neg(ge->m, ge->m, MPFR_RNDN);
        } else {
          if (hasA) ball_mul(c, &w->s1, &w->s1, &w->s2); /* u = E x */
          ball_fn(c, &w->s3, &w->s1, f_sigmoid, 0);
          ball_set_d(&w->s2, p->lower_bound);
          ball_mul(c, ge, &w->s3, &w->s2);
        }
      }
      ball_fn(c, &w->a[ch], ge, f_exp, 0);
    }
    for (int64_t i = w->GW; i < p->K; i++) ball_set(&w->a[i], &w->a[0]);
  }
  const double bs = w->t->beta[(size_t)t * (size_t)p->HV + (size_t)hv];
  ball_set_d(&w->beta, bs);
  if (p->beta_mode != KDA_BETA_PROB) {
    ball_fn(c, &w->beta, &w->beta, f_sigmoid, 0);
    if (p->beta_mode == KDA_BETA_LOGIT_NEG) {
      mpfr_mul_2ui(w->beta.m, w->beta.m, 1, MPFR_RNDN);
      mpfr_mul_2ui(w->beta.r, w->beta.r, 1, MPFR_RNDU);
    }
  }
}

/* The step after coefs: Sd = Diag(a) Sp, pr = Sd^T kk, e = v - pr, r = beta e, Sn = Sd + kk r^T. */
static void advance(geval *w, int64_t t, int64_t hv, const ball *Sp) {
  gctx *c = &w->c;
  const kda_problem *p = w->p;
  const int64_t K = p->K, V = p->V;
  const double *v = w->t->v + ((size_t)t * (size_t)p->HV + (size_t)hv) * (size_t)V;
  const int decays = w->GW > 0, erases = p->family != KDA_FAMILY_LINEAR;
  for (int64_t e = 0; e < K * V; e++) {
    if (decays)
      ball_mul(c, &w->Sd[e], &w->a[e / V], &Sp[e]);
    else
      ball_set(&w->Sd[e], &Sp[e]);
  }
  for (int64_t j = 0; j < V; j++) {
    dot_begin(c);
    ball_set_d(&w->s1, v[j]);
    dot_add(c, &w->s1);
    if (erases)
      for (int64_t i = 0; i < K; i++) dot_term(c, &w->Sd[i * V + j], &w->kk[i], 1);
    dot_end(c, &w->e[j]);
    ball_mul(c, &w->r[j], &w->beta, &w->e[j]);
  }
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) {
      dot_begin(c);
      dot_add(c, &w->Sd[i * V + j]);
      dot_term(c, &w->kk[i], &w->r[j], 0);
      dot_end(c, &w->Sn[i * V + j]);
    }
}

static size_t state_at(const kda_problem *p, int64_t i, int64_t j) {
  return p->state_layout == KDA_STATE_VK ? (size_t)(j * p->K + i) : (size_t)(i * p->V + j);
}

/* dx += the adjoint of y = c0 L2(x) for dy (SPEC.md §13.3), xb the exact x as balls. */
static void l2_back(geval *w, const ball *xb, const ball *dy, ball *dx, const ball *c0) {
  gctx *c = &w->c;
  const kda_problem *p = w->p;
  const int64_t K = p->K;
  for (int64_t i = 0; i < K; i++) ball_mul(c, &w->tmpK[i], &dy[i], c0); /* dL/dL2(x) */
  if (p->l2_mode == KDA_L2_OFF) {
    for (int64_t i = 0; i < K; i++) ball_add(c, &dx[i], &dx[i], &w->tmpK[i], 1);
    return;
  }
  /* d again, as in l2_ball */
  dot_begin(c);
  for (int64_t i = 0; i < K; i++) dot_term(c, &xb[i], &xb[i], 0);
  if (p->l2_mode == KDA_L2_FLA) dot_add(c, &w->eps);
  dot_end(c, &w->s1);
  int floor_branch = 0;
  if (p->l2_mode == KDA_L2_GGML) {
    mpfr_set_zero(c->ss, 1);
    for (int64_t i = 0; i < K; i++) {
      mpfr_sqr(c->sq, xb[i].m, MPFR_RNDN);
      mpfr_add(c->ss, c->ss, c->sq, MPFR_RNDN);
    }
    mpfr_set_d(c->sq, p->l2_eps, MPFR_RNDN);
    mpfr_sqr(c->sq, c->sq, MPFR_RNDN);
    floor_branch = mpfr_cmp(c->ss, c->sq) <= 0;
  }
  if (floor_branch) {
    ball_rec(c, &w->s3, &w->eps);
    for (int64_t i = 0; i < K; i++) {
      ball_mul(c, &w->s2, &w->tmpK[i], &w->s3);
      ball_add(c, &dx[i], &dx[i], &w->s2, 1);
    }
    return;
  }
  ball_fn(c, &w->s2, &w->s1, f_sqrt, 0);
  ball_rec(c, &w->s3, &w->s2); /* 1/d */
  /* dot = sum_i y_i dy_i with y_i = x_i / d: (sum_i x_i dy_i) / d */
  dot_begin(c);
  for (int64_t i = 0; i < K; i++) dot_term(c, &xb[i], &w->tmpK[i], 0);
  dot_end(c, &w->s1);
  ball_mul(c, &w->s1, &w->s1, &w->s3); /* dot */
  ball_mul(c, &w->s2, &w->s3, &w->s3); /* 1/d^2 */
  ball_mul(c, &w->s2, &w->s2, &w->s1); /* dot/d^2 */
  for (int64_t i = 0; i < K; i++) {    /* dx += dy/d - x dot/d^2 */
    dot_begin(c);
    dot_add(c, &dx[i]);
    dot_term(c, &w->tmpK[i], &w->s3, 0);
    dot_term(c, &xb[i], &w->s2, 1);
    dot_end(c, &dx[i]);
  }
}

/* sigma(u) sigma(-u) into z. */
static void sig_slope(geval *w, ball *z, const ball *u) {
  gctx *c = &w->c;
  ball_fn(c, &w->s3, u, f_sigmoid, 0);
  ball_set(z, u);
  mpfr_neg(z->m, z->m, MPFR_RNDN);
  ball_fn(c, z, z, f_sigmoid, 0);
  ball_mul(c, z, z, &w->s3);
}

/* dg, ddt_bias, dA_log from dgeff (SPEC.md §13.3). */
static void gate_back(geval *w, int64_t t, int64_t hv) {
  gctx *c = &w->c;
  const kda_problem *p = w->p;
  const size_t og = ((size_t)t * (size_t)p->HV + (size_t)hv) * (size_t)w->GW;
  for (int64_t ch = 0; ch < w->GW; ch++) {
    ball *dg = &w->out[w->o_dg + (int64_t)og + ch];
    if (p->gate_mode == KDA_GATE_LOG) {
      ball_set(dg, &w->dgeff[ch]);
      continue;
    }
    ball_set_d(&w->s1, w->t->g[og + (size_t)ch]);
    ball_set_d(&w->s2, w->t->dt_bias[hv * w->GW + ch]);
    ball_add(c, &w->s1, &w->s1, &w->s2, 1); /* x */
    ball E;
    ball_init(&E, c->prec);
    ball_set_d(&E, 1.0);
    if (p->has_A_log) {
      ball_set_d(&E, w->t->A_log[hv]);
      ball_fn(c, &E, &E, f_exp, 0);
    }
    if (p->gate_mode == KDA_GATE_SOFTPLUS) { /* dg = -E sigma(x) dgeff; dA = geff dgeff */
      ball_fn(c, &w->s2, &w->s1, f_sigmoid, 0);
      ball_mul(c, &w->s2, &w->s2, &E);
      ball_mul(c, dg, &w->s2, &w->dgeff[ch]);
      mpfr_neg(dg->m, dg->m, MPFR_RNDN);
      ball_mul(c, &w->s2, &w->geff[ch], &w->dgeff[ch]);
      ball_add(c, &w->dA_log[hv], &w->dA_log[hv], &w->s2, 1);
    } else { /* u = E x or x; ds = lb sigma(u) sigma(-u) dgeff; dg = ds E; dA = ds u */
      if (p->has_A_log) ball_mul(c, &w->s1, &w->s1, &E);
      ball slope;
      ball_init(&slope, c->prec);
      sig_slope(w, &slope, &w->s1);
      ball_set_d(&w->s2, p->lower_bound);
      ball_mul(c, &slope, &slope, &w->s2);
      ball_mul(c, &slope, &slope, &w->dgeff[ch]);
      if (p->has_A_log) {
        ball_mul(c, dg, &slope, &E);
        ball_mul(c, &w->s2, &slope, &w->s1);
        ball_add(c, &w->dA_log[hv], &w->dA_log[hv], &w->s2, 1);
      } else {
        ball_set(dg, &slope);
      }
      ball_clear(&slope);
    }
    ball_add(c, &w->ddt_bias[hv * w->GW + ch], &w->ddt_bias[hv * w->GW + ch], dg, 1);
    ball_clear(&E);
  }
}

/* Readout and write of the adjoint (SPEC.md §13.2 steps 4, 3): dqq = Sn do, dS += qq do^T,
 * dr = dS^T kk, dkk = dS r, db = dr . e, dv = beta dr. */
static void readout_write_back(geval *w, size_t ov) {
  gctx *c = &w->c;
  const int64_t K = w->p->K, V = w->p->V;
  for (int64_t i = 0; i < K; i++) {
    dot_begin(c);
    for (int64_t j = 0; j < V; j++) dot_term(c, &w->Sn[i * V + j], &w->dout[j], 0);
    dot_end(c, &w->dqq[i]);
    for (int64_t j = 0; j < V; j++) {
      dot_begin(c);
      dot_add(c, &w->dS[i * V + j]);
      dot_term(c, &w->qq[i], &w->dout[j], 0);
      dot_end(c, &w->dS[i * V + j]);
    }
  }
  for (int64_t j = 0; j < V; j++) {
    dot_begin(c);
    for (int64_t i = 0; i < K; i++) dot_term(c, &w->dS[i * V + j], &w->kk[i], 0);
    dot_end(c, &w->dr[j]);
  }
  for (int64_t i = 0; i < K; i++) {
    dot_begin(c);
    for (int64_t j = 0; j < V; j++) dot_term(c, &w->dS[i * V + j], &w->r[j], 0);
    dot_end(c, &w->dkk[i]);
  }
  dot_begin(c);
  for (int64_t j = 0; j < V; j++) dot_term(c, &w->dr[j], &w->e[j], 0);
  dot_end(c, &w->db);
  for (int64_t j = 0; j < V; j++)
    ball_mul(c, &w->out[w->o_dv + (int64_t)ov + j], &w->beta, &w->dr[j]);
}

/* Erase and decay of the adjoint (steps 2, 1): dp = -beta dr, dkk += Sd dp, dS += kk dp^T;
 * dgeff = rows of Sd * dS, dS = Diag(a) dS. */
static void erase_decay_back(geval *w, int64_t t, int64_t hv) {
  gctx *c = &w->c;
  const int64_t K = w->p->K, V = w->p->V;
  if (w->p->family != KDA_FAMILY_LINEAR) {
    for (int64_t j = 0; j < V; j++) {
      ball_mul(c, &w->dr[j], &w->beta, &w->dr[j]);
      mpfr_neg(w->dr[j].m, w->dr[j].m, MPFR_RNDN);
    }
    for (int64_t i = 0; i < K; i++) {
      dot_begin(c);
      dot_add(c, &w->dkk[i]);
      for (int64_t j = 0; j < V; j++) dot_term(c, &w->Sd[i * V + j], &w->dr[j], 0);
      dot_end(c, &w->dkk[i]);
      for (int64_t j = 0; j < V; j++) {
        dot_begin(c);
        dot_add(c, &w->dS[i * V + j]);
        dot_term(c, &w->kk[i], &w->dr[j], 0);
        dot_end(c, &w->dS[i * V + j]);
      }
    }
  }
  if (w->GW == 0) return;
  for (int64_t i = 0; i < K; i++) {
    dot_begin(c);
    for (int64_t j = 0; j < V; j++) dot_term(c, &w->Sd[i * V + j], &w->dS[i * V + j], 0);
    dot_end(c, &w->dgeff[i]);
    for (int64_t j = 0; j < V; j++) ball_mul(c, &w->dS[i * V + j], &w->a[i], &w->dS[i * V + j]);
  }
  if (w->GW == 1) {
    dot_begin(c);
    for (int64_t i = 0; i < K; i++) dot_add(c, &w->dgeff[i]);
    dot_end(c, &w->dgeff[0]);
  }
  gate_back(w, t, hv);
}

/* The adjoint of token t (SPEC.md §13.2) on balls; dS in, dS out. */
static void step_back(geval *w, int64_t t, int64_t hv, const ball *Sp) {
  gctx *c = &w->c;
  const kda_problem *p = w->p;
  const int64_t h = p->head_map == KDA_HEADMAP_DIV ? hv / (p->HV / p->H) : hv % p->H;
  const size_t ov = ((size_t)t * (size_t)p->HV + (size_t)hv) * (size_t)p->V;
  coefs(w, t, hv);
  advance(w, t, hv, Sp);
  for (int64_t j = 0; j < p->V; j++) ball_set_d(&w->dout[j], w->d->dout[ov + (size_t)j]);
  readout_write_back(w, ov);
  erase_decay_back(w, t, hv);
  const size_t oqk = ((size_t)t * (size_t)p->H + (size_t)h) * (size_t)p->K;
  l2_back(w, w->xq, w->dqq, w->dq + oqk, &w->scale);
  l2_back(w, w->xk, w->dkk, w->dk + oqk, &w->one);
  ball *dbeta = &w->out[w->o_dbeta + (int64_t)((size_t)t * (size_t)p->HV + (size_t)hv)];
  if (p->beta_mode == KDA_BETA_PROB) {
    ball_set(dbeta, &w->db);
    return;
  }
  ball_set_d(&w->s1, w->t->beta[(size_t)t * (size_t)p->HV + (size_t)hv]);
  sig_slope(w, &w->s2, &w->s1);
  if (p->beta_mode == KDA_BETA_LOGIT_NEG) {
    mpfr_mul_2ui(w->s2.m, w->s2.m, 1, MPFR_RNDN);
    mpfr_mul_2ui(w->s2.r, w->s2.r, 1, MPFR_RNDU);
  }
  ball_mul(c, dbeta, &w->s2, &w->db);
}

/* One (sequence n, head hv): forward states as balls, then the adjoint. */
static void head_back(geval *w, int64_t n, int64_t hv, int64_t bos, int64_t eos, int64_t c_end) {
  gctx *c = &w->c;
  const kda_problem *p = w->p;
  const int64_t K = p->K, V = p->V, KV = K * V;
  const size_t slot = ((size_t)n * (size_t)p->HV + (size_t)hv) * (size_t)KV;
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) {
      if (p->has_initial_state)
        ball_set_d(&w->S[i * V + j], w->t->h0[slot + state_at(p, i, j)]);
      else
        ball_set_d(&w->S[i * V + j], 0.0);
    }
  for (int64_t t = bos; t < eos; t++) {
    ball *St = &w->St[(t - bos) * KV];
    for (int64_t e = 0; e < KV; e++) ball_set(&St[e], &w->S[e]);
    coefs(w, t, hv);
    advance(w, t, hv, St);
    for (int64_t e = 0; e < KV; e++) ball_set(&w->S[e], &w->Sn[e]);
  }
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) {
      const double s = p->want_final_state && w->d->dht ? w->d->dht[slot + state_at(p, i, j)] : 0;
      ball_set_d(&w->dS[i * V + j], s);
    }
  int64_t cc = c_end - 1;
  for (int64_t t = eos - 1; t >= bos; t--) {
    if (cc >= 0 && p->n_checkpoints > 0 && w->t->checkpoints[cc] == t) {
      if (w->d->dhc) {
        const size_t cs = ((size_t)cc * (size_t)p->HV + (size_t)hv) * (size_t)KV;
        for (int64_t i = 0; i < K; i++)
          for (int64_t j = 0; j < V; j++) {
            ball_set_d(&w->s1, w->d->dhc[cs + state_at(p, i, j)]);
            ball_add(c, &w->dS[i * V + j], &w->dS[i * V + j], &w->s1, 1);
          }
      }
      cc--;
    }
    step_back(w, t, hv, &w->St[(t - bos) * KV]);
  }
  if (p->has_initial_state)
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++)
        ball_set(&w->out[w->o_dh0 + (int64_t)(slot + state_at(p, i, j))], &w->dS[i * V + j]);
}

/* The gradients present, in order: dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0. */
typedef struct glayout {
  int64_t n[8];  /* element counts (0 when absent) */
  int64_t total;
} glayout;

static const char *const gnames[8] = {"dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias",
                                      "dh0"};

static void layout_of(const kda_problem *p, glayout *g) {
  const int64_t GW = kda_problem_gate_width(p);
  memset(g, 0, sizeof *g);
  g->n[0] = g->n[1] = p->T * p->H * p->K;
  g->n[2] = p->T * p->HV * p->V;
  g->n[3] = GW > 0 ? p->T * p->HV * GW : 0;
  g->n[4] = p->T * p->HV;
  g->n[5] = kda_problem_uses_A_log(p) && p->T > 0 ? p->HV : 0; /* without tokens: only dh0 */
  g->n[6] = kda_problem_uses_dt_bias(p) && p->T > 0 ? p->HV * GW : 0;
  g->n[7] = p->has_initial_state ? p->N * p->HV * p->K * p->V : 0;
  for (int k = 0; k < 8; k++) g->total += g->n[k];
}

static double *gbuf(const kda_grads_f64 *d, int k) {
  double *b[8] = {d->dq, d->dk, d->dv, d->dg, d->dbeta, d->dA_log, d->ddt_bias, d->dh0};
  return b[k];
}

/* The scratch of one evaluation at precision prec.  Returns KDA_OK or KDA_ENOMEM (call
 * geval_free in both cases). */
#define KBALLS(w) {&(w)->xq, &(w)->xk, &(w)->lq, &(w)->qq, &(w)->kk, &(w)->a, &(w)->geff, \
                   &(w)->dqq, &(w)->dkk, &(w)->dgeff, &(w)->tmpK}
#define VBALLS(w) {&(w)->pr, &(w)->e, &(w)->r, &(w)->dr, &(w)->dout}
#define SBALLS(w) {&(w)->beta, &(w)->db, &(w)->one, &(w)->scale, &(w)->eps, &(w)->s1, \
                   &(w)->s2, &(w)->s3}
static int geval_init(geval *w, const glayout *gl, mpfr_prec_t prec) {
  const int64_t K = w->p->K, V = w->p->V, KV = K * V;
  gctx *c = &w->c;
  c->prec = prec;
  mpfr_inits2(prec, c->t1, c->t2, (mpfr_ptr)0);
  mpfr_inits2(prec + 64, c->lo, c->hi, (mpfr_ptr)0);
  mpfr_inits2(BP, c->b1, c->b2, c->racc, (mpfr_ptr)0);
  mpfr_init2(c->ss, 4300); /* sums of squares of doubles (2^-2148 .. 2^2048), exact */
  mpfr_init2(c->sq, 110);
  c->nmax = (K > V ? K : V) + 4;
  c->prod = malloc((size_t)c->nmax * sizeof *c->prod);
  c->pprod = malloc((size_t)c->nmax * sizeof *c->pprod);
  int ok = c->prod && c->pprod;
  if (ok)
    for (int64_t i = 0; i < c->nmax; i++) mpfr_init2(c->prod[i], 2 * prec + 2);
  w->St = balls_new((size_t)(w->L > 0 ? w->L : 1) * (size_t)KV, prec);
  w->S = balls_new((size_t)KV, prec), w->Sd = balls_new((size_t)KV, prec);
  w->Sn = balls_new((size_t)KV, prec), w->dS = balls_new((size_t)KV, prec);
  ball **kb[] = KBALLS(w), **vb[] = VBALLS(w), *sc[] = SBALLS(w);
  for (size_t i = 0; i < sizeof kb / sizeof kb[0]; i++) ok = (*kb[i] = balls_new((size_t)K, prec)) && ok;
  for (size_t i = 0; i < sizeof vb / sizeof vb[0]; i++) ok = (*vb[i] = balls_new((size_t)V, prec)) && ok;
  for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) ball_init(sc[i], prec);
  w->out = balls_new((size_t)gl->total, prec);
  ok = ok && w->St && w->S && w->Sd && w->Sn && w->dS && w->out;
  int64_t off[8], o = 0;
  for (int k = 0; k < 8; k++) off[k] = o, o += gl->n[k];
  w->dq = w->out ? w->out + off[0] : NULL, w->dk = w->out ? w->out + off[1] : NULL;
  w->o_dv = off[2], w->o_dg = off[3], w->o_dbeta = off[4], w->o_dh0 = off[7];
  w->dA_log = w->out ? w->out + off[5] : NULL, w->ddt_bias = w->out ? w->out + off[6] : NULL;
  ball_set_d(&w->one, 1.0);
  ball_set_d(&w->scale, w->p->scale);
  ball_set_d(&w->eps, w->p->l2_eps);
  return ok ? KDA_OK : KDA_ENOMEM;
}

static void geval_free(geval *w, const glayout *gl) {
  const size_t K = (size_t)w->p->K, V = (size_t)w->p->V, KV = K * V;
  gctx *c = &w->c;
  balls_free(w->St, (size_t)(w->L > 0 ? w->L : 1) * KV);
  balls_free(w->S, KV), balls_free(w->Sd, KV), balls_free(w->Sn, KV), balls_free(w->dS, KV);
  ball **kb[] = KBALLS(w), **vb[] = VBALLS(w), *sc[] = SBALLS(w);
  for (size_t i = 0; i < sizeof kb / sizeof kb[0]; i++) balls_free(*kb[i], K);
  for (size_t i = 0; i < sizeof vb / sizeof vb[0]; i++) balls_free(*vb[i], V);
  for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) ball_clear(sc[i]);
  balls_free(w->out, (size_t)gl->total);
  if (c->prod && c->pprod)
    for (int64_t i = 0; i < c->nmax; i++) mpfr_clear(c->prod[i]);
  free(c->prod);
  free(c->pprod);
  mpfr_clears(c->t1, c->t2, c->lo, c->hi, c->b1, c->b2, c->racc, c->ss, c->sq, (mpfr_ptr)0);
}

/* val = RN64(m), proven when RN64(m - r) = RN64(m + r) (SPEC.md §8.6), for every ball of out. */
static void round_out(geval *w, int64_t total, double *val, unsigned char *proven,
                      int64_t *n_unproven, double *need, double *max_rel) {
  gctx *c = &w->c;
  *n_unproven = 0, *need = 0, *max_rel = 0;
  for (int64_t e = 0; e < total; e++) {
    ball *b = &w->out[e];
    val[e] = kda_mpfr_round_binary64(b->m, c->t1);
    mpfr_sub(c->lo, b->m, b->r, MPFR_RNDD);
    mpfr_add(c->hi, b->m, b->r, MPFR_RNDU);
    const double lo = kda_mpfr_round_binary64(c->lo, c->t1);
    const double hi = kda_mpfr_round_binary64(c->hi, c->t1);
    proven[e] = mpfr_number_p(b->r) && kda_mpfr_bits(lo) == kda_mpfr_bits(hi);
    if (!mpfr_zero_p(b->m) && mpfr_number_p(b->r)) {
      mpfr_div(c->b1, b->r, b->m, MPFR_RNDU);
      const double rel = fabs(mpfr_get_d(c->b1, MPFR_RNDU));
      if (rel > *max_rel) *max_rel = rel;
    }
    if (proven[e]) continue;
    (*n_unproven)++;
    double miss = INFINITY; /* log2(r / (2^-60 |m|)): the bits the ball is too wide by */
    if (mpfr_number_p(b->r) && !mpfr_zero_p(b->m))
      miss = log2(mpfr_get_d(b->r, MPFR_RNDU)) - (double)mpfr_get_exp(b->m) + 60.0;
    if (miss > *need) *need = miss;
  }
}

/* Declared in kda_mpfr_impl.h. */
int kda_mpfr_grad_eval(const kda_problem *p, const kda_tensors_f64 *t, const kda_grads_f64 *d,
                       const int64_t *cu, mpfr_prec_t prec, double *val, unsigned char *proven,
                       int64_t *n_unproven, double *need, double *max_rel) {
  geval w;
  memset(&w, 0, sizeof w);
  w.p = p, w.t = t, w.d = d, w.cu = cu, w.GW = kda_problem_gate_width(p);
  for (int64_t n = 0; n < p->N; n++)
    if (cu[n + 1] - cu[n] > w.L) w.L = cu[n + 1] - cu[n];
  glayout gl;
  layout_of(p, &gl);
  int st = geval_init(&w, &gl, prec);
  if (!st) {
    int64_t c_end = 0;
    for (int64_t n = 0; n < p->N; n++) {
      while (c_end < p->n_checkpoints && t->checkpoints[c_end] < cu[n + 1]) c_end++;
      for (int64_t hv = 0; hv < p->HV; hv++) head_back(&w, n, hv, cu[n], cu[n + 1], c_end);
    }
    round_out(&w, gl.total, val, proven, n_unproven, need, max_rel);
  }
  geval_free(&w, &gl);
  return st;
}

/* The seeds and gradient buffers: present where needed, seeds finite. */
static int check_grads(const kda_problem *p, const kda_grads_f64 *d, char *err, size_t errlen) {
  if (!d) return kda_fail(KDA_EINVAL, err, errlen, "%s: grads are NULL", who);
  glayout gl;
  layout_of(p, &gl);
  if (p->T > 0 && !d->dout)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: buffer do is NULL but T > 0", who);
  for (int k = 0; k < 8; k++)
    if (gl.n[k] > 0 && !gbuf(d, k))
      return kda_fail(KDA_EINVAL, err, errlen, "%s: buffer %s is NULL but the problem has it",
                      who, gnames[k]);
  const int64_t ns = p->N * p->HV * p->K * p->V, nc = p->n_checkpoints * p->HV * p->K * p->V;
  const struct { const double *x; int64_t n; const char *name; } seeds[] = {
      {d->dout, p->T * p->HV * p->V, "do"},
      {p->want_final_state ? d->dht : NULL, ns, "dht"},
      {d->dhc, nc, "dhc"}};
  for (size_t s = 0; s < 3; s++)
    for (int64_t e = 0; seeds[s].x && e < seeds[s].n; e++)
      if (!isfinite(seeds[s].x[e]))
        return kda_fail(KDA_ENONFINITE, err, errlen, "%s: seed %s[%lld] = %g is not finite", who,
                        seeds[s].name, (long long)e, seeds[s].x[e]);
  return KDA_OK;
}

/* The first value index where two evaluations' bits differ, or -1. */
static int64_t first_diff(const double *a, const double *b, int64_t n) {
  for (int64_t e = 0; e < n; e++)
    if (kda_mpfr_bits(a[e]) != kda_mpfr_bits(b[e])) return e;
  return -1;
}

static void name_value(const kda_problem *p, int64_t e, char *buf, size_t len) {
  glayout gl;
  layout_of(p, &gl);
  int k = 0;
  while (k < 7 && e >= gl.n[k]) e -= gl.n[k], k++;
  snprintf(buf, len, "%s[%lld]", gnames[k], (long long)e);
}

static int ziv(const kda_problem *p, const kda_tensors_f64 *t, const kda_grads_f64 *d,
               const int64_t *cu, const kda_mpfr_options *o, kda_mpfr_report *r, char *err,
               size_t errlen) {
  glayout gl;
  layout_of(p, &gl);
  const size_t n = (size_t)(gl.total ? gl.total : 1);
  double *val[2] = {malloc(n * sizeof(double)), malloc(n * sizeof(double))};
  unsigned char *pv[2] = {malloc(n), malloc(n)};
  int st = KDA_OK;
  if (!val[0] || !val[1] || !pv[0] || !pv[1])
    st = kda_fail(KDA_ENOMEM, err, errlen, "%s: cannot allocate %lld values", who,
                  (long long)gl.total);
  mpfr_prec_t prec = (mpfr_prec_t)o->prec0, prev_prec = 0;
  int cur = 0, have_prev = 0, done = 0;
  while (!st && !done) {
    int64_t nu = 0;
    double need = 0, max_rel = 0;
    st = kda_mpfr_grad_eval(p, t, d, cu, prec, val[cur], pv[cur], &nu, &need, &max_rel);
    if (st) {
      st = kda_fail(st, err, errlen, "%s: out of memory at %ld bits", who, (long)prec);
      break;
    }
    r->ziv_rounds++;
    const int agree = have_prev && first_diff(val[cur], val[1 - cur], gl.total) < 0;
    if (agree && (nu == 0 || prec >= (mpfr_prec_t)o->prec_max)) {
      int64_t proven = 0;
      for (int64_t e = 0; e < gl.total; e++) proven += pv[cur][e] || pv[1 - cur][e];
      if (proven < gl.total && o->require_proof) {
        int64_t e = 0;
        while (pv[cur][e] || pv[1 - cur][e]) e++;
        char nm[64];
        name_value(p, e, nm, sizeof nm);
        st = kda_fail(KDA_ENOTCERT, err, errlen, "%s: %s not proven within %lld bits", who, nm,
                      (long long)o->prec_max);
        break;
      }
      r->method = proven == gl.total ? KDA_CERT_PROVEN : KDA_CERT_AGREED;
      r->n_proven = proven, r->prec_used = prec, r->prec_check = prev_prec;
      r->max_rel_bound = max_rel;
      done = 1;
      break;
    }
    if (prec >= (mpfr_prec_t)o->prec_max) {
      const int64_t e = have_prev ? first_diff(val[cur], val[1 - cur], gl.total) : 0;
      char nm[64];
      name_value(p, e < 0 ? 0 : e, nm, sizeof nm);
      st = kda_fail(KDA_ENOTCERT, err, errlen, "%s: %s did not settle within %lld bits", who, nm,
                    (long long)o->prec_max);
      break;
    }
    mpfr_prec_t next = prec + prec / 2;
    if (isfinite(need) && prec + (mpfr_prec_t)need + 16 > next) next = prec + (mpfr_prec_t)need + 16;
    next = (next + 31) / 32 * 32;
    if (next > (mpfr_prec_t)o->prec_max) next = (mpfr_prec_t)o->prec_max;
    prev_prec = prec, prec = next, have_prev = 1, cur = 1 - cur;
  }
  if (!st)
    for (int k = 0, off = 0; k < 8; off += (int)gl.n[k], k++)
      if (gl.n[k] > 0) memcpy(gbuf(d, k), val[cur] + off, (size_t)gl.n[k] * sizeof(double));
  r->n_values = gl.total;
  free(val[0]), free(val[1]), free(pv[0]), free(pv[1]);
  return st;
}

int kda_mpfr_backward(const kda_problem *p, const kda_tensors_f64 *t, const kda_grads_f64 *d,
                      const kda_mpfr_options *o, kda_mpfr_report *r, char *err, size_t errlen) {
  kda_mpfr_options def;
  kda_mpfr_options_init(&def);
  if (!o) o = &def;
  kda_mpfr_report rep;
  memset(&rep, 0, sizeof rep);
  if (!p || !t) return kda_fail(KDA_EINVAL, err, errlen, "%s: problem or tensors are NULL", who);
  /* The forward's checks; its outputs are not read here, so stand-ins fill them. */
  double dummy = 0;
  kda_tensors_f64 tin = *t;
  tin.o = &dummy, tin.ht = &dummy, tin.hc = &dummy;
  int st = kda_mpfr_check(p, &tin, o, err, errlen);
  if (!st) st = check_grads(p, d, err, errlen);
  if (st) {
    if (r) *r = rep;
    return st;
  }
  int64_t one_seq[2] = {0, p->T};
  const int64_t *cu = t->cu_seqlens ? t->cu_seqlens : one_seq;
  const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
  mpfr_flags_t flags = mpfr_flags_save();
  mpfr_set_emin(mpfr_get_emin_min());
  mpfr_set_emax(mpfr_get_emax_max());
  st = ziv(p, t, d, cu, o, &rep, err, errlen);
  mpfr_set_emin(emin);
  mpfr_set_emax(emax);
  mpfr_flags_restore(flags, MPFR_FLAGS_ALL);
  if (st) rep.method = KDA_CERT_NONE;
  if (r) *r = rep;
  return st;
}

/* kda_mpfr_run.c: one MPFR evaluation of the whole problem at precision p, with its error bound.
 * SPDX-License-Identifier: MIT
 *
 * Written independently of the float64 reference.  The loop runs token by token and, inside a
 * token, over all value heads (the float64 driver runs head by head).  Each head's state is
 * kept column by column, S[j] = (S[0][j], ..., S[K-1][j]), so that one pass over the columns
 * does the whole step with few roundings (SPEC.md §8.4):
 *
 *   nak_i = -RN(a_i k_i)                              (once per step)
 *   u_j   = RN(v_j + sum_i S[i][j] nak_i)             (decay and erase in one rounding)
 *   w_j   = RN(b u_j)
 *   S[i][j] = RN(a_i S[i][j] + k_i w_j)               (decay and write in one rounding, fmma)
 *   o_j   = RN(sum_i S[i][j] q_i)                     (one rounding)
 *
 * which is S <- (I - b k k^T) Diag(a) S + b k v^T, o = S^T q (SPEC.md §3.1).  Sums are exact
 * products followed by one mpfr_sum.  Alongside, upward-rounded bounds D >= ||S_mpfr - S*||_F
 * and M >= ||S*||_F follow the recurrence of SPEC.md §8.5, and every output is
 * rounded to binary64 together with the verdict of its error bound.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_mpfr_impl.h"

/* Bound-precision scalars of one step (indices into run.bn after the 2*HV of M and D). */
enum { B_U, B_AMAX, B_EA, B_EB, B_BMAG, B_VN, B_RHO, B_SN, B_T1, B_EPSA, B_EPSB, B_UN, B_E1,
       B_EU, B_EW, B_WN, B_F, B_X, B_Y, B_EO, B_EPS, B_XLO, B_XHI, N_B };
/* p-bit scalars of one step (indices into run.w after the 2*K of a and nak). */
enum { W_BLO, W_BHI, W_BMID, W_VJ, W_U, W_W, W_O, W_LO, W_HI, N_W };

typedef struct run {
  const kda_problem *p;
  const kda_tensors_f64 *t;
  const int64_t *cu;
  kda_mpfr_result *res;
  mpfr_prec_t prec;
  int64_t K, V, H, HV, GW, nO, nHT;
  int erase, decay;
  kda_mpfr_coef co;
  kda_mpfr_pool S;  /* [HV][V][K]: head hv, column j, key i */
  kda_mpfr_pool qk; /* [H][K] mids of q̂, then [H][K] mids of k̂ */
  kda_mpfr_pool w;  /* [K] a mids, [K] nak, then the W_* scalars */
  kda_mpfr_pool bn; /* [HV] M, [HV] D, then the B_* scalars */
  kda_mpfr_vecnorm *qn, *kn; /* [H] */
  int64_t nvec;
  mpfr_t t53;
  int64_t bad_t, bad_hv; /* first exponent-guard failure */
} run;

#define BB(r, k) ((r)->bn.x[2 * (r)->HV + (k)])
#define WW(r, k) ((r)->w.x[2 * (r)->K + (k)])
#define MM(r, hv) ((r)->bn.x[(hv)])
#define DD(r, hv) ((r)->bn.x[(r)->HV + (hv)])

int64_t kda_mpfr_count_values(const kda_problem *p) {
  const int64_t kv = p->HV * p->K * p->V; /* kda_problem_check bounded these products */
  int64_t n = p->T * p->HV * p->V;
  if (p->want_final_state) n += p->N * kv;
  return n + p->n_checkpoints * kv;
}

static void run_free(run *r) {
  kda_mpfr_coef_free(&r->co);
  kda_mpfr_pool_free(&r->S);
  kda_mpfr_pool_free(&r->qk);
  kda_mpfr_pool_free(&r->w);
  kda_mpfr_pool_free(&r->bn);
  for (int64_t h = 0; h < r->nvec; h++) {
    kda_mpfr_vecnorm_clear(&r->qn[h]);
    kda_mpfr_vecnorm_clear(&r->kn[h]);
  }
  free(r->qn);
  free(r->kn);
  mpfr_clear(r->t53);
}

static int run_init(run *r, const kda_problem *p, const kda_tensors_f64 *t, const int64_t *cu,
                    mpfr_prec_t prec, kda_mpfr_result *res) {
  memset(r, 0, sizeof *r);
  r->p = p;
  r->t = t;
  r->cu = cu;
  r->res = res;
  r->prec = prec;
  r->K = p->K;
  r->V = p->V;
  r->H = p->H;
  r->HV = p->HV;
  r->GW = kda_problem_gate_width(p);
  r->erase = p->family != KDA_FAMILY_LINEAR;
  r->decay = r->GW > 0;
  r->nO = p->T * p->HV * p->V;
  r->nHT = p->want_final_state ? p->N * p->HV * p->K * p->V : 0;
  r->bad_t = r->bad_hv = -1;
  mpfr_init2(r->t53, 53);
  const size_t K = (size_t)p->K, V = (size_t)p->V, HV = (size_t)p->HV, H = (size_t)p->H;
  int fail = kda_mpfr_coef_init(&r->co, prec, p->K);
  fail |= kda_mpfr_pool_init(&r->S, HV * V * K, prec);
  fail |= kda_mpfr_pool_init(&r->qk, 2 * H * K, prec);
  fail |= kda_mpfr_pool_init(&r->w, 2 * K + N_W, prec);
  fail |= kda_mpfr_pool_init(&r->bn, 2 * HV + N_B, KDA_MPFR_BOUND_PREC);
  r->qn = malloc(H * sizeof *r->qn);
  r->kn = malloc(H * sizeof *r->kn);
  if (r->qn && r->kn) {
    for (; r->nvec < p->H; r->nvec++) {
      kda_mpfr_vecnorm_init(&r->qn[r->nvec]);
      kda_mpfr_vecnorm_init(&r->kn[r->nvec]);
    }
  }
  if (fail || !r->qn || !r->kn) return -1;
  mpfr_set_ui_2exp(BB(r, B_U), 1, -prec, MPFR_RNDU); /* u = 2^-p */
  return 0;
}

/* ---- Certification of one value: y at precision p, |y - y*| <= eps. */

/* An estimate of how many more bits the bound needs before [y - eps, y + eps] avoids every
 * rounding boundary of binary64 (midpoints between neighbours): log2(eps / distance). */
static double need_bits(run *r, mpfr_srcptr y, mpfr_srcptr eps, double val) {
  if (mpfr_inf_p(eps) || isinf(val)) return INFINITY;
  mpfr_exp_t e = mpfr_zero_p(y) ? -1021 : mpfr_get_exp(y);
  if (e < -1021) e = -1021;
  mpfr_ptr d = WW(r, W_LO), half = BB(r, B_X);
  mpfr_sub_d(d, y, val, MPFR_RNDN); /* y minus its rounding */
  mpfr_abs(d, d, MPFR_RNDN);
  mpfr_set_ui_2exp(half, 1, e - 54, MPFR_RNDN); /* half an ulp of binary64 near y */
  mpfr_sub(d, half, d, MPFR_RNDN);              /* distance to the nearest midpoint */
  if (mpfr_sgn(d) <= 0) return (double)r->prec; /* y sits on a midpoint: guess p more bits */
  return (double)(mpfr_get_exp(eps) - mpfr_get_exp(d) + 1);
}

/* Rounds y into res->val[idx] and records whether the bound eps proves that rounding: the
 * rounding to nearest is monotone, so if y - eps and y + eps round to the same binary64 value
 * then so does every real in between, the exact value among them. */
static void certify(run *r, mpfr_srcptr y, mpfr_ptr eps, int64_t idx) {
  kda_mpfr_result *res = r->res;
  if (mpfr_nan_p(eps)) mpfr_set_inf(eps, 1); /* 0 * inf in the bound: no information */
  const double val = kda_mpfr_round_binary64(y, r->t53);
  int proven = mpfr_zero_p(eps);
  if (!proven && !mpfr_inf_p(eps)) {
    mpfr_ptr lo = WW(r, W_LO), hi = WW(r, W_HI);
    mpfr_sub(lo, y, eps, MPFR_RNDD);
    mpfr_add(hi, y, eps, MPFR_RNDU);
    const double a = kda_mpfr_round_binary64(lo, r->t53);
    const double b = kda_mpfr_round_binary64(hi, r->t53);
    proven = kda_mpfr_bits(a) == kda_mpfr_bits(b);
  }
  res->val[idx] = val;
  res->proven[idx] = (unsigned char)proven;
  if (!mpfr_zero_p(y)) {
    mpfr_ptr rel = BB(r, B_Y);
    mpfr_div(rel, eps, y, MPFR_RNDU);
    mpfr_abs(rel, rel, MPFR_RNDU);
    const double q = mpfr_get_d(rel, MPFR_RNDU);
    if (q > res->max_rel_bound) res->max_rel_bound = q;
  }
  if (proven) return;
  if (res->first_unproven < 0) res->first_unproven = idx;
  res->n_unproven++;
  const double nb = need_bits(r, y, eps, val);
  if (nb > res->need_bits) res->need_bits = nb;
}

/* Where S[i][j] of head hv of stored slot `slot` sits in h0/ht/hc (SPEC.md §2.3, §2.4). */
static int64_t state_index(const run *r, int64_t slot, int64_t hv, int64_t i, int64_t j) {
  const int64_t base = (slot * r->HV + hv) * r->K * r->V;
  return base + (r->p->state_layout == KDA_STATE_VK ? j * r->K + i : i * r->V + j);
}

/* Certifies every head's state into ht (slot n, offset nO) or hc (slot c, offset nO + nHT). */
static void certify_states(run *r, int64_t offset, int64_t slot) {
  for (int64_t hv = 0; hv < r->HV; hv++)
    for (int64_t j = 0; j < r->V; j++)
      for (int64_t i = 0; i < r->K; i++)
        certify(r, r->S.x[(hv * r->V + j) * r->K + i], DD(r, hv),
                offset + state_index(r, slot, hv, i, j));
}

/* S <- h0[n] (exact: doubles fit in p >= 53 bits) or 0; M = ||h0[n]||_F, D = 0. */
static void load_states(run *r, int64_t n) {
  const double *h0 = r->p->has_initial_state ? r->t->h0 : NULL;
  for (int64_t hv = 0; hv < r->HV; hv++) {
    mpfr_ptr m = MM(r, hv), sq = BB(r, B_X);
    mpfr_set_zero(m, 1);
    mpfr_set_zero(DD(r, hv), 1);
    for (int64_t j = 0; j < r->V; j++)
      for (int64_t i = 0; i < r->K; i++) {
        mpfr_ptr s = r->S.x[(hv * r->V + j) * r->K + i];
        const double x = h0 ? h0[state_index(r, n, hv, i, j)] : 0.0;
        mpfr_set_d(s, x, MPFR_RNDN);
        mpfr_sqr(sq, s, MPFR_RNDU);
        mpfr_add(m, m, sq, MPFR_RNDU);
      }
    mpfr_sqrt(m, m, MPFR_RNDU);
  }
}

/* ---- The error bound of one step (SPEC.md §8.5), all rounded upward. */

/* rho >= ||(I - b* k* k*^T) Diag(a*)||_2 = max(1, |1 - b*||k*||^2|) * max_i a*_i, from the
 * enclosures of b* and ||k*||^2; returns 1 when the step is shown non-expansive (SPEC §6.3). */
static int growth(run *r, const kda_mpfr_vecnorm *kn) {
  mpfr_ptr xlo = BB(r, B_XLO), xhi = BB(r, B_XHI), n2 = BB(r, B_X), bl = BB(r, B_Y);
  mpfr_ptr bh = BB(r, B_T1), rho = BB(r, B_RHO);
  if (!r->erase) {
    mpfr_set_ui(rho, 1, MPFR_RNDU);
    return 1;
  }
  mpfr_sqr(n2, kn->n, MPFR_RNDU);
  mpfr_set(bl, WW(r, W_BLO), MPFR_RNDD);
  mpfr_set(bh, WW(r, W_BHI), MPFR_RNDU);
  if (mpfr_sgn(bl) >= 0) {
    mpfr_mul(xlo, bl, kn->n2lo, MPFR_RNDD);
    mpfr_mul(xhi, bh, n2, MPFR_RNDU);
  } else {
    mpfr_mul(xlo, bl, n2, MPFR_RNDD);
    mpfr_mul(xhi, bh, mpfr_sgn(bh) > 0 ? n2 : kn->n2lo, MPFR_RNDU);
  }
  const int nonexp = mpfr_sgn(xlo) >= 0 && mpfr_cmp_ui(xhi, 2) <= 0 &&
                     mpfr_cmp_ui(BB(r, B_AMAX), 1) <= 0;
  mpfr_sub_ui(xhi, xhi, 1, MPFR_RNDU); /* b||k||^2 - 1 */
  mpfr_ui_sub(xlo, 1, xlo, MPFR_RNDU); /* 1 - b||k||^2 */
  mpfr_set_ui(rho, 1, MPFR_RNDU);
  mpfr_max(rho, rho, xhi, MPFR_RNDU);
  mpfr_max(rho, rho, xlo, MPFR_RNDU);
  mpfr_mul(rho, rho, BB(r, B_AMAX), MPFR_RNDU);
  return nonexp;
}

/* acc <- acc + x * y, upward. */
static void addmul(mpfr_ptr acc, mpfr_srcptr x, mpfr_srcptr y, mpfr_ptr tmp) {
  mpfr_mul(tmp, x, y, MPFR_RNDU);
  mpfr_add(acc, acc, tmp, MPFR_RNDU);
}

/* D <- rho D + epsA Sn + epsB + F and M <- rho M + bmag ||k|| ||v|| for one erasing step. */
static void bound_erase(run *r, int64_t hv, const kda_mpfr_vecnorm *k) {
  mpfr_ptr u = BB(r, B_U), amax = BB(r, B_AMAX), ea = BB(r, B_EA), eb = BB(r, B_EB);
  mpfr_ptr bm = BB(r, B_BMAG), vn = BB(r, B_VN), sn = BB(r, B_SN), t1 = BB(r, B_T1);
  mpfr_ptr epsa = BB(r, B_EPSA), epsb = BB(r, B_EPSB), un = BB(r, B_UN), e1 = BB(r, B_E1);
  mpfr_ptr eu = BB(r, B_EU), ew = BB(r, B_EW), wn = BB(r, B_WN), f = BB(r, B_F);
  mpfr_ptr x = BB(r, B_X), y = BB(r, B_Y), D = DD(r, hv), M = MM(r, hv);
  mpfr_add(sn, M, D, MPFR_RNDU);           /* ||S_mpfr|| <= M + D */
  mpfr_mul(t1, amax, k->n, MPFR_RNDU);     /* ||Diag(a) k|| */
  /* epsA >= ||A_mpfr - A*||_2 */
  mpfr_set(epsa, ea, MPFR_RNDU);
  mpfr_mul(x, eb, k->n, MPFR_RNDU);
  addmul(epsa, x, t1, y);
  mpfr_mul(x, bm, k->e, MPFR_RNDU);
  addmul(epsa, x, t1, y);
  mpfr_mul(x, ea, k->n, MPFR_RNDU);
  addmul(x, amax, k->e, y);
  mpfr_mul(x, x, k->n, MPFR_RNDU);
  addmul(epsa, x, bm, y);
  /* epsB >= ||b k v^T - b* k* v^T||_F */
  mpfr_mul(epsb, eb, k->n, MPFR_RNDU);
  addmul(epsb, bm, k->e, y);
  mpfr_mul(epsb, epsb, vn, MPFR_RNDU);
  /* the rounding errors of nak, u, w and the fmma */
  mpfr_set(un, vn, MPFR_RNDU);
  addmul(un, t1, sn, y);                   /* ||v - k^T Diag(a) S|| */
  mpfr_mul(e1, u, sn, MPFR_RNDU);
  mpfr_mul(e1, e1, t1, MPFR_RNDU);         /* from rounding a_i k_i */
  mpfr_add_ui(x, u, 1, MPFR_RNDU);
  mpfr_mul(eu, x, e1, MPFR_RNDU);
  addmul(eu, u, un, y);                    /* ||u_mpfr - u|| */
  mpfr_add(x, un, eu, MPFR_RNDU);          /* ||u_mpfr|| */
  mpfr_mul(ew, u, x, MPFR_RNDU);
  mpfr_add(ew, ew, eu, MPFR_RNDU);
  mpfr_mul(ew, ew, bm, MPFR_RNDU);         /* ||w_mpfr - b u|| */
  mpfr_add_ui(y, u, 1, MPFR_RNDU);
  mpfr_mul(wn, x, y, MPFR_RNDU);
  mpfr_mul(wn, wn, bm, MPFR_RNDU);         /* ||w_mpfr|| */
  mpfr_mul(f, amax, sn, MPFR_RNDU);
  addmul(f, k->n, wn, y);
  mpfr_mul(f, f, u, MPFR_RNDU);
  addmul(f, k->n, ew, y);                  /* ||F|| */
  /* D and M */
  mpfr_mul(D, D, BB(r, B_RHO), MPFR_RNDU);
  addmul(D, epsa, sn, y);
  mpfr_add(D, D, epsb, MPFR_RNDU);
  mpfr_add(D, D, f, MPFR_RNDU);
  mpfr_mul(M, M, BB(r, B_RHO), MPFR_RNDU);
  mpfr_mul(x, bm, k->n, MPFR_RNDU);
  addmul(M, x, vn, y);
  if (mpfr_nan_p(D)) mpfr_set_inf(D, 1); /* 0 * inf: conservative */
  if (mpfr_nan_p(M)) mpfr_set_inf(M, 1);
}

/* The same for the linear family: S <- S + b k v^T (A = I). */
static void bound_linear(run *r, int64_t hv, const kda_mpfr_vecnorm *k) {
  mpfr_ptr u = BB(r, B_U), eb = BB(r, B_EB), bm = BB(r, B_BMAG), vn = BB(r, B_VN);
  mpfr_ptr sn = BB(r, B_SN), epsb = BB(r, B_EPSB), ew = BB(r, B_EW), wn = BB(r, B_WN);
  mpfr_ptr f = BB(r, B_F), x = BB(r, B_X), y = BB(r, B_Y), D = DD(r, hv), M = MM(r, hv);
  mpfr_add(sn, M, D, MPFR_RNDU);
  mpfr_mul(epsb, eb, k->n, MPFR_RNDU);
  addmul(epsb, bm, k->e, y);
  mpfr_mul(epsb, epsb, vn, MPFR_RNDU);
  mpfr_mul(ew, u, bm, MPFR_RNDU);
  mpfr_mul(ew, ew, vn, MPFR_RNDU);          /* ||w_mpfr - b v|| */
  mpfr_add_ui(x, u, 1, MPFR_RNDU);
  mpfr_mul(wn, bm, x, MPFR_RNDU);
  mpfr_mul(wn, wn, vn, MPFR_RNDU);
  mpfr_set(f, sn, MPFR_RNDU);
  addmul(f, k->n, wn, y);
  mpfr_mul(f, f, u, MPFR_RNDU);
  addmul(f, k->n, ew, y);
  mpfr_add(D, D, epsb, MPFR_RNDU);
  mpfr_add(D, D, f, MPFR_RNDU);
  mpfr_mul(x, bm, k->n, MPFR_RNDU);
  addmul(M, x, vn, y);
  if (mpfr_nan_p(D)) mpfr_set_inf(D, 1);
  if (mpfr_nan_p(M)) mpfr_set_inf(M, 1);
}

/* ---- One step of one head. */

/* The coefficients of (t, hv): a mids (w[0..GW)), beta, ||v||, amax, ea, eb, bmag. */
static int coefficients(run *r, int64_t t, int64_t hv) {
  const kda_problem *p = r->p;
  const kda_tensors_f64 *ts = r->t;
  if (r->decay) {
    const int gated = p->gate_mode != KDA_GATE_LOG;
    const double *A = gated && p->has_A_log ? ts->A_log + hv : NULL;
    const double *db = gated ? ts->dt_bias + hv * r->GW : NULL;
    if (kda_mpfr_coef_gate(&r->co, p, r->GW, ts->g + (t * r->HV + hv) * r->GW, A, db, r->w.x,
                           BB(r, B_AMAX), BB(r, B_EA)))
      return -1;
  } else {
    mpfr_set_ui(BB(r, B_AMAX), 1, MPFR_RNDU);
    mpfr_set_zero(BB(r, B_EA), 1);
  }
  kda_mpfr_coef_beta(&r->co, p->beta_mode, ts->beta[t * r->HV + hv], WW(r, W_BLO),
                     WW(r, W_BHI), WW(r, W_BMID), BB(r, B_EB));
  mpfr_ptr bm = BB(r, B_BMAG), x = BB(r, B_X), vn = BB(r, B_VN);
  mpfr_abs(bm, WW(r, W_BLO), MPFR_RNDU);
  mpfr_abs(x, WW(r, W_BHI), MPFR_RNDU);
  mpfr_max(bm, bm, x, MPFR_RNDU);
  const double *v = ts->v + (t * r->HV + hv) * r->V;
  mpfr_set_zero(vn, 1);
  for (int64_t j = 0; j < r->V; j++) {
    mpfr_set_d(x, v[j], MPFR_RNDU);
    mpfr_sqr(x, x, MPFR_RNDU);
    mpfr_add(vn, vn, x, MPFR_RNDU);
  }
  mpfr_sqrt(vn, vn, MPFR_RNDU);
  return 0;
}

static int out_of_window(mpfr_srcptr x) {
  if (!mpfr_number_p(x)) return 1;
  if (mpfr_zero_p(x)) return 0;
  const mpfr_exp_t e = mpfr_get_exp(x);
  return e > KDA_MPFR_EXP_GUARD || e < -KDA_MPFR_EXP_GUARD;
}

/* The point update of one column j (see the file comment) and its readout, certified. */
static int column(run *r, int64_t t, int64_t hv, int64_t j, mpfr_t *km, mpfr_t *qm) {
  mpfr_t *col = r->S.x + (hv * r->V + j) * r->K;
  mpfr_t *a = r->w.x, *nak = r->w.x + r->K;
  mpfr_ptr vj = WW(r, W_VJ), u = WW(r, W_U), w = WW(r, W_W), o = WW(r, W_O);
  mpfr_set_d(vj, r->t->v[(t * r->HV + hv) * r->V + j], MPFR_RNDN);
  if (r->erase) {
    kda_mpfr_coef_dot(&r->co, u, col, nak, r->K, vj, MPFR_RNDN);
    mpfr_mul(w, WW(r, W_BMID), u, MPFR_RNDN);
  } else {
    mpfr_mul(w, WW(r, W_BMID), vj, MPFR_RNDN);
  }
  int bad = out_of_window(w);
  for (int64_t i = 0; i < r->K; i++) {
    if (r->decay)
      mpfr_fmma(col[i], a[r->GW == 1 ? 0 : i], col[i], km[i], w, MPFR_RNDN);
    else
      mpfr_fma(col[i], km[i], w, col[i], MPFR_RNDN);
    bad |= out_of_window(col[i]);
  }
  kda_mpfr_coef_dot(&r->co, o, col, qm, r->K, NULL, MPFR_RNDN);
  bad |= out_of_window(o);
  /* |o_mpfr - o*| <= D ||q|| + M ||q_mpfr - q*|| + u |o| / (1 - u) <= EO + 2u|o| */
  mpfr_ptr eps = BB(r, B_EPS);
  mpfr_abs(eps, o, MPFR_RNDU);
  mpfr_mul(eps, eps, BB(r, B_U), MPFR_RNDU);
  mpfr_mul_2ui(eps, eps, 1, MPFR_RNDU);
  mpfr_add(eps, eps, BB(r, B_EO), MPFR_RNDU);
  certify(r, o, eps, (t * r->HV + hv) * r->V + j);
  return bad;
}

static int step(run *r, int64_t t, int64_t hv) {
  const int64_t h = r->p->head_map == KDA_HEADMAP_DIV ? hv / (r->HV / r->H) : hv % r->H;
  mpfr_t *qm = r->qk.x + h * r->K, *km = r->qk.x + (r->H + h) * r->K;
  const kda_mpfr_vecnorm *qn = &r->qn[h], *kn = &r->kn[h];
  if (coefficients(r, t, hv)) return -1;
  /* nak_i = -RN(a_i k_i) */
  mpfr_t *a = r->w.x, *nak = r->w.x + r->K;
  for (int64_t i = 0; r->erase && i < r->K; i++) {
    if (r->decay)
      mpfr_mul(nak[i], a[r->GW == 1 ? 0 : i], km[i], MPFR_RNDN);
    else
      mpfr_set(nak[i], km[i], MPFR_RNDN);
    mpfr_neg(nak[i], nak[i], MPFR_RNDN);
  }
  /* the bound first: the outputs of this step are certified with D_t and M_t */
  const int nonexp = growth(r, kn);
  if (!nonexp) r->res->expansive = 1;
  const double g = mpfr_get_d(BB(r, B_RHO), MPFR_RNDU);
  if (g > r->res->max_growth) r->res->max_growth = g;
  if (r->erase)
    bound_erase(r, hv, kn);
  else
    bound_linear(r, hv, kn);
  mpfr_mul(BB(r, B_EO), DD(r, hv), qn->n, MPFR_RNDU);
  addmul(BB(r, B_EO), MM(r, hv), qn->e, BB(r, B_X));
  int bad = 0;
  for (int64_t j = 0; j < r->V; j++) bad |= column(r, t, hv, j, km, qm);
  return bad ? -1 : 0;
}

/* q̂ and k̂ of every q/k head at token t. */
static void prepare_token(run *r, int64_t t) {
  for (int64_t h = 0; h < r->H; h++) {
    const size_t off = (size_t)((t * r->H + h) * r->K);
    kda_mpfr_coef_l2(&r->co, r->p, 1, r->K, r->t->q + off, r->qk.x + h * r->K, &r->qn[h]);
    kda_mpfr_coef_l2(&r->co, r->p, 0, r->K, r->t->k + off, r->qk.x + (r->H + h) * r->K,
                     &r->kn[h]);
  }
}

static int sequences(run *r) {
  const kda_problem *p = r->p;
  int64_t c = 0;
  for (int64_t n = 0; n < p->N; n++) {
    load_states(r, n);
    for (int64_t t = r->cu[n]; t < r->cu[n + 1]; t++) {
      prepare_token(r, t);
      for (int64_t hv = 0; hv < p->HV; hv++)
        if (step(r, t, hv)) {
          r->bad_t = t;
          r->bad_hv = hv;
          return -1;
        }
      if (c < p->n_checkpoints && r->t->checkpoints[c] == t)
        certify_states(r, r->nO + r->nHT, c++);
    }
    if (p->want_final_state) certify_states(r, r->nO, n);
  }
  return 0;
}

int kda_mpfr_run(const kda_problem *p, const kda_tensors_f64 *t, const int64_t *cu,
                 mpfr_prec_t prec, kda_mpfr_result *res, char *err, size_t errlen) {
  res->n_unproven = 0;
  res->first_unproven = -1;
  res->need_bits = 0.0;
  res->max_growth = 0.0;
  res->max_rel_bound = 0.0;
  res->expansive = 0;
  run r;
  if (run_init(&r, p, t, cu, prec, res)) {
    run_free(&r);
    if (err && errlen)
      snprintf(err, errlen, "kda_mpfr_forward: cannot allocate the %lld-bit state of %lld "
               "heads of %lld x %lld", (long long)prec, (long long)p->HV, (long long)p->K,
               (long long)p->V);
    return KDA_ENOMEM;
  }
  const int bad = sequences(&r);
  run_free(&r);
  if (bad) {
    if (err && errlen)
      snprintf(err, errlen, "kda_mpfr_forward: at token t=%lld, value head hv=%lld a decay "
               "factor or the state leaves the exponent window 2^(+-2^60) of the MPFR "
               "reference", (long long)r.bad_t, (long long)r.bad_hv);
    return KDA_EUNSUPPORTED;
  }
  return KDA_OK;
}

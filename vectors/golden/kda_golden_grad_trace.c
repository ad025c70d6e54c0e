/* kda_golden_grad_trace.c: the adjoint of SPEC.md §13.2 traced step by step (golden/grad/L0
 * traces, kda trace --backward).
 * SPDX-License-Identifier: MIT
 *
 * For each (sequence, value head): the forward states before every token, then the tokens from
 * last to first with every intermediate of the adjoint step: the incoming adjoint dS (with dht
 * and dhc added where they enter), the readout's dq^ and dS + q^ do^T, the write's dr = dS^T k^,
 * dv = b dr, db = dr . e, dp = -b dr and dk^ = dS r + Sd dp, the erase's dS + k^ dp^T, the
 * decay's dgeff = rows of Sd * dS and the outgoing Diag(a) dS.  In exact mode (the L0 cases:
 * gate log with gates 0 or -inf, beta prob, L2 off) every product and sum is checked with an
 * error-free transformation, the gradients of the inputs are assembled from the traced values
 * (dq = scale dq^ summed over the value heads of h, dk = dk^ likewise, dg = dgeff, dbeta = db,
 * dh0 = the last dS) and must equal the certified ones bit for bit.
 */
#include "kda_golden_grad.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_golden_internal.h"
#include "kda_npz.h"
#include "kda_ref.h"
#include "kda_sbuf.h"

typedef struct btr {
  kda_sbuf out;
  const kda_problem *p;
  int exact, inexact;
  char where[200], ctx[96];
} btr;

static void note(btr *b, const char *op, double x, double y) {
  if (b->inexact) return;
  b->inexact = 1;
  snprintf(b->where, sizeof b->where, "%s: %a %s %a is not exact in float64", b->ctx, x, op, y);
}
static double mul(btr *b, double x, double y) {
  const double r = x * y;
  if (b->exact && isfinite(r) && fma(x, y, -r) != 0.0) note(b, "*", x, y);
  return r;
}
static double add(btr *b, double x, double y) {
  const double s = x + y;
  if (b->exact && isfinite(s)) {
    const double bb = s - x, e = (x - (s - bb)) + (y - bb);
    if (e != 0.0) note(b, "+", x, y);
  }
  return s;
}

static void put_vec(btr *b, const char *label, const double *x, int64_t n) {
  kda_sbuf_printf(&b->out, "  %s = [", label);
  for (int64_t i = 0; i < n; i++) {
    kda_sbuf_printf(&b->out, i ? ", " : " ");
    kda_sbuf_value(&b->out, x[i]);
  }
  kda_sbuf_printf(&b->out, " ]\n");
}
static void put_mat(btr *b, const char *label, const double *S, int64_t K, int64_t V) {
  kda_sbuf_printf(&b->out, "  %s:\n", label);
  for (int64_t i = 0; i < K; i++) {
    char row[32];
    snprintf(row, sizeof row, "  i=%lld", (long long)i);
    put_vec(b, row, S + i * V, V);
  }
}

/* Scratch of one head: states [len+1][K][V], and the step's vectors. */
typedef struct hbuf {
  double *St, *Sd, *Sn, *dS, *qq, *kk, *a, *pr, *e, *r, *dr, *dqq, *dkk, *dge;
} hbuf;

/* The coefficients of token t for head hv (SPEC.md §4) through kda_ref.h's public functions:
 * qq = scale L2(q), kk = L2(k), a = exp(g_eff) per key row; returns beta_eff. */
static double coefs(const kda_problem *p, const kda_tensors_f64 *t, int64_t tt, int64_t hv,
                    hbuf *w) {
  const int64_t K = p->K, GW = kda_problem_gate_width(p);
  const int64_t h = kda_ref_head(p->head_map, p->H, p->HV, hv);
  kda_ref_l2(p->l2_mode, p->l2_eps, K, t->q + (tt * p->H + h) * K, w->qq);
  kda_ref_l2(p->l2_mode, p->l2_eps, K, t->k + (tt * p->H + h) * K, w->kk);
  for (int64_t i = 0; i < K; i++) w->qq[i] = p->scale * w->qq[i];
  for (int64_t c = 0; c < GW; c++) {
    const double b = kda_problem_uses_dt_bias(p) ? t->dt_bias[hv * GW + c] : 0.0;
    const double A = kda_problem_uses_A_log(p) ? t->A_log[hv] : 0.0;
    w->a[c] = exp(kda_ref_gate(p->gate_mode, t->g[(tt * p->HV + hv) * GW + c], b, A,
                               p->has_A_log, p->lower_bound));
  }
  for (int64_t i = GW; i < K && GW > 0; i++) w->a[i] = w->a[0];
  return kda_ref_beta(p->beta_mode, t->beta[tt * p->HV + hv]);
}

/* The forward step after the coefficients (SPEC.md §3.1), reference order. */
static void fwd(btr *b, const double *Sp, const double *v, double beta, hbuf *h) {
  const kda_problem *p = b->p;
  const int64_t K = p->K, V = p->V;
  const int dec = kda_problem_gate_width(p) > 0, era = p->family != KDA_FAMILY_LINEAR;
  for (int64_t e = 0; e < K * V; e++) h->Sd[e] = dec ? mul(b, h->a[e / V], Sp[e]) : Sp[e];
  for (int64_t j = 0; j < V; j++) {
    double s = 0.0;
    for (int64_t i = 0; era && i < K; i++) s = add(b, s, mul(b, h->Sd[i * V + j], h->kk[i]));
    h->pr[j] = s;
    h->e[j] = add(b, v[j], -s);
    h->r[j] = mul(b, beta, h->e[j]);
  }
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++)
      h->Sn[i * V + j] = add(b, h->Sd[i * V + j], mul(b, h->kk[i], h->r[j]));
}

static double *state_slot(const kda_problem *p, double *base, int64_t slot, int64_t hv) {
  return base + ((size_t)slot * (size_t)p->HV + (size_t)hv) * (size_t)(p->K * p->V);
}
static size_t at(const kda_problem *p, int64_t i, int64_t j) {
  return p->state_layout == KDA_STATE_VK ? (size_t)(j * p->K + i) : (size_t)(i * p->V + j);
}

/* The adjoint of token t (SPEC.md §13.2), printed; accumulates into the traced gradients. */
static void back_step(btr *b, const kda_tensors_f64 *t, const kda_grads_f64 *d, int64_t tt,
                      int64_t hv, int64_t h, hbuf *w, double *gq, double *gk, double *gv,
                      double *gg, double *gb) {
  const kda_problem *p = b->p;
  const int64_t K = p->K, V = p->V, GW = kda_problem_gate_width(p);
  const double *dout = d->dout + ((size_t)tt * (size_t)p->HV + (size_t)hv) * (size_t)V;
  const double beta = kda_ref_beta(p->beta_mode, t->beta[tt * p->HV + hv]);
  put_vec(b, "do", dout, V);
  for (int64_t i = 0; i < K; i++) {
    double s = 0.0;
    for (int64_t j = 0; j < V; j++) s = add(b, s, mul(b, w->Sn[i * V + j], dout[j]));
    w->dqq[i] = s;
    for (int64_t j = 0; j < V; j++) w->dS[i * V + j] = add(b, w->dS[i * V + j], mul(b, w->qq[i], dout[j]));
  }
  put_vec(b, "readout:  dq^ = Sn do", w->dqq, K);
  put_mat(b, "          dS + q^ do^T", w->dS, K, V);
  for (int64_t j = 0; j < V; j++) {
    double s = 0.0;
    for (int64_t i = 0; i < K; i++) s = add(b, s, mul(b, w->dS[i * V + j], w->kk[i]));
    w->dr[j] = s;
  }
  for (int64_t i = 0; i < K; i++) {
    double s = 0.0;
    for (int64_t j = 0; j < V; j++) s = add(b, s, mul(b, w->dS[i * V + j], w->r[j]));
    w->dkk[i] = s;
  }
  double db = 0.0;
  double *dv = gv + ((size_t)tt * (size_t)p->HV + (size_t)hv) * (size_t)V;
  for (int64_t j = 0; j < V; j++) {
    dv[j] = mul(b, beta, w->dr[j]);
    db = add(b, db, mul(b, w->dr[j], w->e[j]));
  }
  put_vec(b, "write:    dr = dS^T k^", w->dr, V);
  put_vec(b, "          dv = b dr", dv, V);
  kda_sbuf_printf(&b->out, "            db = dr . (v - p) = ");
  kda_sbuf_value(&b->out, db);
  kda_sbuf_printf(&b->out, "\n");
  put_vec(b, "          dk^ = dS r", w->dkk, K);
  if (p->family != KDA_FAMILY_LINEAR) {
    for (int64_t j = 0; j < V; j++) w->dr[j] = -mul(b, beta, w->dr[j]);
    for (int64_t i = 0; i < K; i++) {
      double s = 0.0;
      for (int64_t j = 0; j < V; j++) {
        s = add(b, s, mul(b, w->Sd[i * V + j], w->dr[j]));
        w->dS[i * V + j] = add(b, w->dS[i * V + j], mul(b, w->kk[i], w->dr[j]));
      }
      w->dkk[i] = add(b, w->dkk[i], s);
    }
    put_vec(b, "erase:    dp = -b dr", w->dr, V);
    put_vec(b, "          dk^ + Sd dp", w->dkk, K);
    put_mat(b, "          dS + k^ dp^T", w->dS, K, V);
  }
  if (GW > 0) {
    for (int64_t i = 0; i < K; i++) {
      double s = 0.0;
      for (int64_t j = 0; j < V; j++) s = add(b, s, mul(b, w->Sd[i * V + j], w->dS[i * V + j]));
      w->dge[i] = s;
      for (int64_t j = 0; j < V; j++) w->dS[i * V + j] = mul(b, w->a[i], w->dS[i * V + j]);
    }
    put_vec(b, "decay:    dgeff = rows of Sd * dS", w->dge, K);
    if (GW == 1)
      for (int64_t i = 1; i < K; i++) w->dge[0] = add(b, w->dge[0], w->dge[i]);
    double *dg = gg + ((size_t)tt * (size_t)p->HV + (size_t)hv) * (size_t)GW;
    for (int64_t c = 0; c < GW; c++) dg[c] = w->dge[c];
    put_mat(b, "          dS <- Diag(a) dS", w->dS, K, V);
  }
  const size_t oqk = ((size_t)tt * (size_t)p->H + (size_t)h) * (size_t)K;
  for (int64_t i = 0; i < K; i++) {
    gq[oqk + (size_t)i] = add(b, gq[oqk + (size_t)i], mul(b, p->scale, w->dqq[i]));
    gk[oqk + (size_t)i] = add(b, gk[oqk + (size_t)i], w->dkk[i]);
  }
  gb[tt * p->HV + hv] = db;
}

/* One (sequence n, head hv). */
static void trace_head(btr *b, const kda_tensors_f64 *t, const kda_grads_f64 *d, int64_t n,
                       int64_t hv, int64_t bos, int64_t eos, hbuf *w, double *g[8]) {
  const kda_problem *p = b->p;
  const int64_t K = p->K, V = p->V, KV = K * V, GW = kda_problem_gate_width(p);
  const int64_t h = kda_ref_head(p->head_map, p->H, p->HV, hv);
  kda_sbuf_printf(&b->out, "\n== sequence %lld (tokens %lld..%lld), value head %lld (q/k head %lld)\n",
                  (long long)n, (long long)bos, (long long)eos - 1, (long long)hv, (long long)h);
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++)
      w->St[i * V + j] = p->has_initial_state ? state_slot(p, (double *)t->h0, n, hv)[at(p, i, j)] : 0.0;
  for (int64_t s = bos; s < eos; s++) { /* forward: St[s - bos + 1] = state after s */
    snprintf(b->ctx, sizeof b->ctx, "forward t=%lld hv=%lld", (long long)s, (long long)hv);
    const double beta = coefs(p, t, s, hv, w);
    fwd(b, w->St + (s - bos) * KV, t->v + (s * p->HV + hv) * V, beta, w);
    memcpy(w->St + (s - bos + 1) * KV, w->Sn, (size_t)KV * sizeof(double));
  }
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++)
      w->dS[i * V + j] = p->want_final_state && d->dht ? state_slot(p, (double *)d->dht, n, hv)[at(p, i, j)] : 0.0;
  put_mat(b, p->want_final_state ? "adjoint after the last token: dS = dht" : "adjoint: dS = 0", w->dS, K, V);
  int64_t c = p->n_checkpoints - 1;
  for (int64_t s = eos - 1; s >= bos; s--) {
    snprintf(b->ctx, sizeof b->ctx, "adjoint t=%lld hv=%lld", (long long)s, (long long)hv);
    kda_sbuf_printf(&b->out, "-- token t=%lld (backward)\n", (long long)s);
    while (c >= 0 && t->checkpoints[c] > s) c--;
    if (c >= 0 && t->checkpoints[c] == s && d->dhc) {
      for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++)
          w->dS[i * V + j] = add(b, w->dS[i * V + j], state_slot(p, (double *)d->dhc, c, hv)[at(p, i, j)]);
      put_mat(b, "dS + dhc (checkpoint)", w->dS, K, V);
    }
    const double beta = coefs(p, t, s, hv, w);
    fwd(b, w->St + (s - bos) * KV, t->v + (s * p->HV + hv) * V, beta, w);
    put_mat(b, "state after the write Sn", w->Sn, K, V);
    back_step(b, t, d, s, hv, h, w, g[0], g[1], g[2], g[3], g[4]);
  }
  (void)GW;
  if (p->has_initial_state) {
    double *dh0 = state_slot(p, g[7], n, hv);
    for (int64_t i = 0; i < K; i++)
      for (int64_t j = 0; j < V; j++) dh0[at(p, i, j)] = w->dS[i * V + j];
    put_mat(b, "dh0 = dS", w->dS, K, V);
  }
}

/* The head buffers carved from one allocation of (L + 4) K V + 7 K + 4 V doubles. */
static void hbuf_carve(hbuf *w, double *x, int64_t L, int64_t K, int64_t V) {
  const int64_t KV = K * V;
  w->St = x, x += (L + 1) * KV;
  w->Sd = x, x += KV;
  w->Sn = x, x += KV;
  w->dS = x, x += KV;
  double **kv[] = {&w->qq, &w->kk, &w->a, &w->dqq, &w->dkk, &w->dge};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) *kv[i] = x, x += K;
  x += K;
  double **vv[] = {&w->pr, &w->e, &w->r, &w->dr};
  for (size_t i = 0; i < sizeof vv / sizeof vv[0]; i++) *vv[i] = x, x += V;
}

/* The trace's opening: what it shows, the problem and the scale. */
static void put_header(btr *bt, const kda_case *c, const char *comment) {
  const kda_problem *p = bt->p;
  const int exact = bt->exact;
  const int64_t K = p->K, V = p->V;
  kda_sbuf_printf(&bt->out, "# KDA %s: %s\n# %s\n#\n", exact ? "golden L0 gradient trace" : "gradient trace",
                  c->id ? c->id : "", comment ? comment : "");
  kda_sbuf_printf(&bt->out,
                  "# SPEC.md §13.2: L = sum do*o + sum dht*ht + sum dhc*hc.  Per (sequence, value head)\n"
                  "# the adjoint dS of the state runs from the last token to the first:\n"
                  "#   readout  dq^ = Sn do            dS <- dS + q^ do^T\n"
                  "#   write    dr = dS^T k^   dv = b dr   db = dr.(v - p)   dk^ = dS r\n"
                  "#   erase    dp = -b dr     dk^ <- dk^ + Sd dp     dS <- dS + k^ dp^T\n"
                  "#   decay    dgeff_i = sum_j Sd[i][j] dS[i][j]     dS <- Diag(a) dS\n"
                  "# then dq = scale dq^ (summed over the value heads of a q/k head), dk = dk^,\n"
                  "# dg = dgeff (summed over the rows for gdn), dbeta = db, dh0 = the final dS.\n"
                  "# Sn and Sd are the forward's states after the write and after the decay.\n"
                  "%s#\n",
                  exact ? "# Every number is exact (each product and sum checked with an error-free\n"
                          "# transformation) and the gradients equal the certified ones bit for bit.\n"
                        : "");
  kda_sbuf_printf(&bt->out, "problem: family=%s gate=%s beta=%s l2=%s head_map=%s layout=%s\n",
                  kda_family_name(p->family), kda_gate_name(p->gate_mode), kda_beta_name(p->beta_mode),
                  kda_l2_name(p->l2_mode), kda_head_map_name(p->head_map),
                  kda_state_layout_name(p->state_layout));
  kda_sbuf_printf(&bt->out, "shapes:  N=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld C=%lld\n",
                  (long long)p->N, (long long)p->T, (long long)p->H, (long long)p->HV,
                  (long long)K, (long long)V, (long long)p->n_checkpoints);
  kda_sbuf_printf(&bt->out, "scale:   ");
  kda_sbuf_value(&bt->out, p->scale);
  kda_sbuf_printf(&bt->out, "\n");
}

/* The traced gradients of the inputs, printed; in exact mode each must equal d's. */
static int put_grads(btr *bt, const kda_grads_f64 *d, double *const g[8], const int64_t ng[8],
                     char *err, size_t errlen) {
  const double *cert[8] = {d->dq, d->dk, d->dv, d->dg, d->dbeta, NULL, NULL, d->dh0};
  static const char *const names[8] = {"dq", "dk", "dv", "dg", "dbeta", "", "", "dh0"};
  kda_sbuf_printf(&bt->out, "\n== gradients of the inputs\n");
  for (int k = 0; k < 8; k++) {
    if (!ng[k]) continue;
    put_vec(bt, names[k], g[k], ng[k]);
    for (int64_t e = 0; bt->exact && e < ng[k]; e++)
      if (g[k][e] != cert[k][e])
        return kda_fail(KDA_EINVAL, err, errlen, "%s[%lld]: traced %a, certified %a", names[k],
                        (long long)e, g[k][e], cert[k][e]);
  }
  return KDA_OK;
}

int kda_golden_grad_trace(const kda_case *c, const char *comment, const kda_tensors_f64 *t,
                          const kda_grads_f64 *d, int exact, char **text, char *err,
                          size_t errlen) {
  *text = NULL;
  const kda_problem *p = &c->p;
  if (p->l2_mode != KDA_L2_OFF || p->gate_mode != KDA_GATE_LOG || p->beta_mode != KDA_BETA_PROB)
    return kda_fail(KDA_EINVAL, err, errlen,
                    "the adjoint trace needs l2 off, gate log and beta prob (an L0 case); this "
                    "case has l2 %s, gate %s, beta %s",
                    kda_l2_name(p->l2_mode), kda_gate_name(p->gate_mode), kda_beta_name(p->beta_mode));
  btr b;
  memset(&b, 0, sizeof b);
  b.p = p, b.exact = exact;
  const int64_t K = p->K, V = p->V, KV = K * V, GW = kda_problem_gate_width(p);
  int64_t L = 0; /* the longest sequence */
  for (int64_t n = 0; n < p->N; n++)
    if (c->cu_seqlens[n + 1] - c->cu_seqlens[n] > L) L = c->cu_seqlens[n + 1] - c->cu_seqlens[n];
  const int64_t ng[8] = {p->T * p->H * K, p->T * p->H * K, p->T * p->HV * V,
                         GW > 0 ? p->T * p->HV * GW : 0, p->T * p->HV, 0, 0,
                         p->has_initial_state ? p->N * p->HV * KV : 0};
  double *g[8] = {0};
  hbuf w;
  memset(&w, 0, sizeof w);
  double *all = calloc((size_t)((L + 1) * KV + 4 * KV + 7 * K + 4 * V + 8), sizeof(double));
  int ok = all != NULL;
  for (int k = 0; k < 8; k++) ok = ok && (g[k] = calloc((size_t)ng[k] + 1, sizeof(double)));
  if (!ok) {
    free(all);
    for (int k = 0; k < 8; k++) free(g[k]);
    return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  }
  hbuf_carve(&w, all, L, K, V);
  put_header(&b, c, comment);
  for (int64_t n = 0; n < p->N; n++)
    for (int64_t hv = 0; hv < p->HV; hv++)
      trace_head(&b, t, d, n, hv, c->cu_seqlens[n], c->cu_seqlens[n + 1], &w, g);
  int st = KDA_OK;
  if (b.inexact) st = kda_fail(KDA_EINVAL, err, errlen, "%s", b.where);
  if (!st) st = put_grads(&b, d, g, ng, err, errlen);
  free(all);
  for (int k = 0; k < 8; k++) free(g[k]);
  if (!st && b.out.oom) st = kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  if (st) {
    free(b.out.s);
    return st;
  }
  *text = b.out.s;
  return KDA_OK;
}

/* ---- A golden gradient file's trace (kda trace --backward). */

/* Member `name` of z into a new buffer of n doubles (NULL and KDA_OK when n is 0). */
static int load_member(kda_npz *z, const char *path, const char *name, int64_t n, double **out,
                       char *err, size_t errlen) {
  *out = NULL;
  if (n == 0) return KDA_OK;
  *out = calloc((size_t)n, sizeof(double));
  if (!*out) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  char msg[KDA_ERRLEN];
  int st = kda_npz_read(z, name, KDA_DTYPE_F64, *out, (uint64_t)n, msg, sizeof msg);
  if (st) return kda_fail(st, err, errlen, "%s: member %s: %s", path, name, msg);
  return KDA_OK;
}

int kda_golden_grad_trace_file(const char *path, char **text, char *err, size_t errlen) {
  *text = NULL;
  kda_case c;
  int st = kda_case_load(path, &c, err, errlen);
  if (st) return st;
  json_t *root = c.manifest_json ? json_loads(c.manifest_json, 0, NULL) : NULL;
  json_t *gg = json_object_get(root, "golden_grad");
  const char *fid = json_string_value(json_object_get(gg, "forward_case"));
  const char *lv = json_string_value(json_object_get(gg, "level"));
  const kda_catalog_entry *e = fid ? kda_catalog_find(fid) : NULL;
  if (!gg || !lv)
    st = kda_fail(KDA_ENOTFOUND, err, errlen,
                  "%s: not a golden gradient file (its manifest has no golden_grad.level)", path);
  const kda_problem *p = &c.p;
  const int64_t GW = kda_problem_gate_width(p), st_n = p->HV * p->K * p->V;
  const int64_t n[11] = {p->T * p->HV * p->V, p->want_final_state ? p->N * st_n : 0,
                         p->n_checkpoints * st_n, p->T * p->H * p->K, p->T * p->H * p->K,
                         p->T * p->HV * p->V, GW > 0 ? p->T * p->HV * GW : 0, p->T * p->HV,
                         0, 0, p->has_initial_state ? p->N * st_n : 0};
  static const char *const names[11] = {"do", "dht", "dhc", "dq", "dk", "dv", "dg", "dbeta",
                                        "", "", "dh0"};
  double *buf[11] = {0};
  kda_npz *z = NULL;
  if (!st) st = kda_npz_open(path, &z, err, errlen);
  for (int k = 0; !st && k < 11; k++) st = load_member(z, path, names[k], n[k], &buf[k], err, errlen);
  if (z) kda_npz_close(z);
  if (!st) {
    kda_tensors_f64 t;
    kda_case_tensors(&c, &t);
    kda_grads_f64 d = {buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6], buf[7], NULL, NULL,
                       buf[10]};
    st = kda_golden_grad_trace(&c, e ? e->comment : "", &t, &d, !strcmp(lv, "L0"), text, err,
                               errlen);
  }
  for (int k = 0; k < 11; k++) free(buf[k]);
  json_decref(root);
  kda_case_free(&c);
  return st;
}

/* kda_golden_trace.c: the L0 traces: every step of a tiny case, every intermediate exact.
 * SPDX-License-Identifier: MIT
 *
 * An L0 case has L2 off, beta given as a probability, gates 0 or -inf and small dyadic inputs
 * (kda_catalog_l0.c).  The trace runs SPEC.md §3.1 in float64 with the reference's grouping
 * (SPEC.md §9.2) and checks every single product and sum for exactness with an error-free
 * transformation (fma(a, b, -a*b) = 0; TwoSum's error = 0), so every number it prints is the
 * exact real value; the outputs and states it reaches must then equal the MPFR-certified
 * golden values bit for bit, which is checked too.  Values are printed as C99 hex floats and
 * as the shortest decimal that reads back to them.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_golden_internal.h"
#include "kda_ref.h"
#include "kda_trace.h"
#include "kda_npz.h"

/* ---- Values as text. */
void kda_sbuf_value(kda_sbuf *b, double x) {
  if (isinf(x)) {
    kda_sbuf_printf(b, "%s", x < 0 ? "-inf" : "inf");
    return;
  }
  kda_sbuf_printf(b, "%a (", x);
  kda_sbuf_shortest(b, x);
  kda_sbuf_printf(b, ")");
}

/* ---- Exact arithmetic, checked. */
typedef struct tracer {
  kda_sbuf out;
  const kda_case *c;
  const double *gold;  /* o, ht, hc */
  int inexact;         /* set at the first inexact operation */
  char where[160];     /* what was being computed then */
  char ctx[96];        /* the current step, for messages */
} tracer;

static void note_inexact(tracer *tr, const char *op, double a, double b) {
  if (tr->inexact) return;
  tr->inexact = 1;
  snprintf(tr->where, sizeof tr->where, "%s: %a %s %a is not exact in float64", tr->ctx, a, op,
           b);
}

static double xmul(tracer *tr, double a, double b) {
  const double r = a * b;
  if (isfinite(r) && fma(a, b, -r) != 0.0) note_inexact(tr, "*", a, b);
  return r;
}

/* TwoSum (Knuth): the rounding error of a + b is (a - (s - bb)) + (b - bb). */
static double xadd(tracer *tr, double a, double b) {
  const double s = a + b;
  if (isfinite(s)) {
    const double bb = s - a, e = (a - (s - bb)) + (b - bb);
    if (e != 0.0) note_inexact(tr, "+", a, b);
  }
  return s;
}

/* The checked operations as the arithmetic of the shared step (ref/kda_trace.h). */
static double tr_mul(void *ctx, double a, double b) { return xmul(ctx, a, b); }
static double tr_add(void *ctx, double a, double b) { return xadd(ctx, a, b); }

/* ---- Printing. */
static void put_vec(tracer *tr, const char *label, const double *x, int64_t n) {
  kda_sbuf_printf(&tr->out, "  %s = [", label);
  for (int64_t i = 0; i < n; i++) {
    kda_sbuf_printf(&tr->out, i ? ", " : " ");
    kda_sbuf_value(&tr->out, x[i]);
  }
  kda_sbuf_printf(&tr->out, " ]\n");
}

static void put_mat(tracer *tr, const char *label, const double *S, int64_t K, int64_t V) {
  kda_sbuf_printf(&tr->out, "  %s:\n", label);
  for (int64_t i = 0; i < K; i++) {
    char row[32];
    snprintf(row, sizeof row, "  i=%lld", (long long)i);
    put_vec(tr, row, S + i * V, V);
  }
}

static void put_header(tracer *tr, const char *comment, const char *method) {
  const kda_problem *p = &tr->c->p;
  kda_sbuf *b = &tr->out;
  kda_sbuf_printf(b, "# KDA golden L0 trace: %s\n# %s\n#\n", tr->c->id ? tr->c->id : "",
                  comment);
  kda_sbuf_printf(b, "# SPEC.md §3.1, one step per token and value head, in this order:\n"
                     "#   decay       S <- Diag(a) S           a = exp(g_eff), per key channel\n"
                     "#   prediction  p = S^T k^               on the decayed state\n"
                     "#   correction  c = b (v - p)\n"
                     "#   write       S <- S + k^ c^T\n"
                     "#   readout     o = S^T q^               after the write\n"
                     "# States are K x V matrices, row i = key channel, column j = value channel.\n"
                     "# Every number below is exact (each product and sum was checked with an\n"
                     "# error-free transformation) and is printed as a C99 hex float followed by\n"
                     "# the shortest decimal that reads back to it.  The outputs, checkpoints and\n"
                     "# final states equal the file's certified golden values bit for bit.\n#\n");
  kda_sbuf_printf(b, "problem: family=%s gate=%s beta=%s l2=%s head_map=%s layout=%s\n",
                  kda_family_name(p->family), kda_gate_name(p->gate_mode),
                  kda_beta_name(p->beta_mode), kda_l2_name(p->l2_mode),
                  kda_head_map_name(p->head_map), kda_state_layout_name(p->state_layout));
  kda_sbuf_printf(b, "shapes:  N=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld C=%lld\n",
                  (long long)p->N, (long long)p->T, (long long)p->H, (long long)p->HV,
                  (long long)p->K, (long long)p->V, (long long)p->n_checkpoints);
  kda_sbuf_printf(b, "scale:   ");
  kda_sbuf_value(b, p->scale);
  kda_sbuf_printf(b, "\ncertification: %s\n", method);
}

/* ---- The recurrence. */
typedef struct head {
  int64_t n, hv, h, bos, eos;
  double *S, *qq, *kk, *a, *pr, *cr, *o, *Sd;
} head;

static int64_t state_index(const kda_problem *p, int64_t i, int64_t j) {
  return p->state_layout == KDA_STATE_VK ? j * p->K + i : i * p->V + j;
}

/* Compares the working state with stored state `slot` of gold member base; 0 when equal. */
static int same_state(const kda_problem *p, const double *S, const double *base, int64_t slot,
                      int64_t hv) {
  const double *st = base + (slot * p->HV + hv) * p->K * p->V;
  for (int64_t i = 0; i < p->K; i++)
    for (int64_t j = 0; j < p->V; j++)
      if (!(S[i * p->V + j] == st[state_index(p, i, j)])) return 0;
  return 1;
}

/* The step's inputs: q^ = scale q, k^ = k, a from g in {0, -inf}, b = beta. */
static int prepare(tracer *tr, head *hd, int64_t t, char *err, size_t errlen) {
  const kda_case *c = tr->c;
  const kda_problem *p = &c->p;
  const int64_t K = p->K, GW = kda_problem_gate_width(p);
  for (int64_t i = 0; i < K; i++) {
    hd->qq[i] = xmul(tr, p->scale, c->q[(t * p->H + hd->h) * K + i]);
    hd->kk[i] = c->k[(t * p->H + hd->h) * K + i];
    hd->a[i] = 1.0;
  }
  for (int64_t ch = 0; ch < GW; ch++) {
    const double g = c->g[(t * p->HV + hd->hv) * GW + ch];
    if (g != 0.0 && !(isinf(g) && g < 0))
      return kda_fail(KDA_EINVAL, err, errlen, "%s: gate %a is neither 0 nor -inf", tr->ctx, g);
    for (int64_t i = GW == 1 ? 0 : ch; i < (GW == 1 ? K : ch + 1); i++) hd->a[i] = g == 0.0;
  }
  return KDA_OK;
}

static void step(tracer *tr, head *hd, int64_t t) {
  const kda_case *c = tr->c;
  const kda_problem *p = &c->p;
  const int64_t K = p->K, V = p->V;
  const double b = c->beta[t * p->HV + hd->hv], *v = c->v + (t * p->HV + hd->hv) * V;
  const int decays = p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN;
  const int erases = p->family != KDA_FAMILY_LINEAR;
  put_vec(tr, "q^ = scale q", hd->qq, K);
  put_vec(tr, "k^ = k", hd->kk, K);
  put_vec(tr, "v", v, V);
  if (decays) put_vec(tr, "a = exp(g)", hd->a, K);
  kda_sbuf_printf(&tr->out, "  b = ");
  kda_sbuf_value(&tr->out, b);
  kda_sbuf_printf(&tr->out, "\n");
  /* the step itself is the one kda trace runs, with every operation checked for exactness */
  kda_trace_f64 st = {K, V, decays, erases, hd->qq, hd->kk, hd->a, v, b,
                      hd->S, hd->Sd, hd->pr, hd->cr, hd->o};
  const kda_trace_arith ar = {tr, tr_mul, tr_add};
  kda_trace_step_f64(&st, &ar);
  if (decays) put_mat(tr, "decayed state Diag(a) S", hd->Sd, K, V);
  put_vec(tr, erases ? "prediction p = S^T k^" : "prediction p (none: no erase)", hd->pr, V);
  put_vec(tr, "correction c = b (v - p)", hd->cr, V);
  put_mat(tr, "written state S + k^ c^T", hd->S, K, V);
  put_vec(tr, "output o = S^T q^", hd->o, V);
}

static int run_head(tracer *tr, head *hd, int64_t *cpt, char *err, size_t errlen) {
  const kda_case *c = tr->c;
  const kda_problem *p = &c->p;
  const int64_t K = p->K, V = p->V;
  const uint64_t no = (uint64_t)(p->T * p->HV * V), ns = (uint64_t)(p->N * p->HV * K * V);
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++)
      hd->S[i * V + j] = p->has_initial_state ? c->h0[(hd->n * p->HV + hd->hv) * K * V +
                                                       state_index(p, i, j)] : 0.0;
  char span[64];
  if (hd->eos > hd->bos)
    snprintf(span, sizeof span, "tokens %lld..%lld", (long long)hd->bos, (long long)hd->eos - 1);
  else
    snprintf(span, sizeof span, "empty: no tokens");
  kda_sbuf_printf(&tr->out, "\n== sequence %lld (%s), value head %lld (q/k head %lld)\n",
                  (long long)hd->n, span, (long long)hd->hv, (long long)hd->h);
  put_mat(tr, p->has_initial_state ? "initial state h0" : "initial state (zero)", hd->S, K, V);
  for (int64_t t = hd->bos; t < hd->eos; t++) {
    snprintf(tr->ctx, sizeof tr->ctx, "case '%s' sequence %lld head %lld token %lld",
             c->id ? c->id : "", (long long)hd->n, (long long)hd->hv, (long long)t);
    kda_sbuf_printf(&tr->out, "-- token t=%lld\n", (long long)t);
    int st = prepare(tr, hd, t, err, errlen);
    if (st) return st;
    step(tr, hd, t);
    if (tr->inexact) return kda_fail(KDA_EINVAL, err, errlen, "%s", tr->where);
    for (int64_t j = 0; j < V; j++)
      if (!(hd->o[j] == tr->gold[(t * p->HV + hd->hv) * V + j]))
        return kda_fail(KDA_EINVAL, err, errlen,
                        "%s: traced o[%lld] = %a differs from the certified %a", tr->ctx,
                        (long long)j, hd->o[j], tr->gold[(t * p->HV + hd->hv) * V + j]);
    while (*cpt < p->n_checkpoints && c->checkpoints[*cpt] < t) (*cpt)++;
    if (*cpt < p->n_checkpoints && c->checkpoints[*cpt] == t) {
      kda_sbuf_printf(&tr->out, "  (checkpoint hc[%lld, %lld] is this written state)\n",
                      (long long)*cpt, (long long)hd->hv);
      if (!same_state(p, hd->S, tr->gold + no + (p->want_final_state ? ns : 0), *cpt, hd->hv))
        return kda_fail(KDA_EINVAL, err, errlen,
                        "%s: checkpoint %lld differs from the certified state", tr->ctx,
                        (long long)*cpt);
    }
  }
  if (p->want_final_state) {
    put_mat(tr, "final state ht", hd->S, K, V);
    if (!same_state(p, hd->S, tr->gold + no, hd->n, hd->hv))
      return kda_fail(KDA_EINVAL, err, errlen,
                      "case '%s': traced final state of "
                      "sequence %lld head %lld differs from the certified one",
                      c->id ? c->id : "", (long long)hd->n, (long long)hd->hv);
  }
  return KDA_OK;
}

static int check_l0(const kda_case *c, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  if (p->l2_mode != KDA_L2_OFF || p->beta_mode != KDA_BETA_PROB ||
      (kda_problem_gate_width(p) > 0 && p->gate_mode != KDA_GATE_LOG))
    return kda_fail(KDA_EINVAL, err, errlen,
                    "case '%s': an L0 trace needs l2=off, beta=prob and gate=log",
                    c->id ? c->id : "");
  return KDA_OK;
}

static int trace_all(tracer *tr, double *work, char *err, size_t errlen) {
  const kda_problem *p = &tr->c->p;
  const int64_t K = p->K, V = p->V;
  head hd = {0, 0, 0, 0, 0, work, work + K * V, work + K * V + K, work + K * V + 2 * K,
             work + K * V + 3 * K, work + K * V + 3 * K + V, work + K * V + 3 * K + 2 * V,
             work + K * V + 3 * K + 3 * V};
  for (hd.n = 0; hd.n < p->N; hd.n++) {
    hd.bos = tr->c->cu_seqlens[hd.n];
    hd.eos = tr->c->cu_seqlens[hd.n + 1];
    for (hd.hv = 0; hd.hv < p->HV; hd.hv++) {
      int64_t cpt = 0;
      hd.h = kda_ref_head(p->head_map, p->H, p->HV, hd.hv);
      int st = run_head(tr, &hd, &cpt, err, errlen);
      if (st) return st;
    }
  }
  return KDA_OK;
}

int kda_golden_trace(const kda_case *c, const char *comment, const char *method,
                     const double *gold, char **text, char *err, size_t errlen) {
  *text = NULL;
  int st = check_l0(c, err, errlen);
  if (st) return st;
  tracer tr;
  memset(&tr, 0, sizeof tr);
  tr.c = c;
  tr.gold = gold;
  double *work = calloc((size_t)(2 * c->p.K * c->p.V + 3 * c->p.K + 3 * c->p.V), sizeof(double));
  if (!work) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  put_header(&tr, comment, method);
  st = trace_all(&tr, work, err, errlen);
  free(work);
  if (!st && tr.out.oom) st = kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  if (st) {
    free(tr.out.s);
    return st;
  }
  *text = tr.out.s;
  return KDA_OK;
}

/* ---- The trace of a committed case file (kda trace --l0). */
static int file_golden_info(const kda_case *c, const char *path, char *comment, size_t clen,
                            char *method, size_t mlen, char *err, size_t errlen) {
  json_error_t je;
  json_t *root = c->manifest_json ? json_loads(c->manifest_json, 0, &je) : NULL;
  json_t *g = root ? json_object_get(root, "golden") : NULL;
  const char *cm = json_string_value(json_object_get(g, "comment"));
  const char *me = json_string_value(json_object_get(json_object_get(g, "certification"),
                                                     "method"));
  int st = KDA_OK;
  if (!cm || !me)
    st = kda_fail(KDA_ENOTFOUND, err, errlen,
                  "%s: not a golden case file (its manifest has no golden.comment and "
                  "golden.certification.method)", path);
  else
    snprintf(comment, clen, "%s", cm), snprintf(method, mlen, "%s", me);
  json_decref(root);
  return st;
}

/* The certified o, ht, hc of the file, one buffer in that order (what kda_golden_trace takes). */
static int file_gold(const kda_case *c, const char *path, double **gold, char *err,
                     size_t errlen) {
  kda_problem_sizes sz;
  int st = kda_problem_sizes_get(&c->p, &sz, err, errlen);
  if (st) return st;
  const uint64_t n[3] = {sz.o, c->p.want_final_state ? sz.ht : 0, sz.hc};
  const char *names[3] = {"o", "ht", "hc"};
  *gold = calloc((size_t)(n[0] + n[1] + n[2] + 1), sizeof(double));
  if (!*gold) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  kda_npz *z = NULL;
  st = kda_npz_open(path, &z, err, errlen);
  uint64_t off = 0;
  for (int m = 0; m < 3 && !st; m++) {
    if (n[m] == 0) continue;
    if (!kda_npz_has(z, names[m]))
      st = kda_fail(KDA_ENOTFOUND, err, errlen, "%s: no certified member '%s'", path, names[m]);
    else
      st = kda_npz_read(z, names[m], KDA_DTYPE_F64, *gold + off, n[m], err, errlen);
    off += n[m];
  }
  if (z) kda_npz_close(z);
  if (st) free(*gold), *gold = NULL;
  return st;
}

int kda_golden_trace_file(const char *path, char **text, char *err, size_t errlen) {
  *text = NULL;
  kda_case c;
  int st = kda_case_load(path, &c, err, errlen);
  if (st) return st;
  char comment[1024], method[32];
  double *gold = NULL;
  st = file_golden_info(&c, path, comment, sizeof comment, method, sizeof method, err, errlen);
  if (!st) st = file_gold(&c, path, &gold, err, errlen);
  if (!st) st = kda_golden_trace(&c, comment, method, gold, text, err, errlen);
  free(gold);
  kda_case_free(&c);
  return st;
}

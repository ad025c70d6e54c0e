/* kda_score_stream.c: streaming scoring in bounded memory (SPEC.md §7.10).
 * SPDX-License-Identifier: MIT
 *
 * A production-size case (2^20 tokens of a 128 x 128 head: 1 GiB of float64 outputs alone) is
 * scored without any whole array of tokens: inputs are read (kda_npz_read_range) or generated
 * (kda_gen_range) one chunk of C tokens at a time, each sequence is run chunk after chunk with
 * the state chained through h0 -> ht, and only per-token errors, per-window summaries and the
 * states stay.  Two passes, because the envelope of §7.3 needs ref-f32's error in a token's
 * neighbour window before the token can be scored: the reference pass (once per case, in
 * kda_truth_stream: the float64 recurrence for the magnitudes and, without golden outputs, the
 * truth; ref-f32 for the envelope) and one scoring pass per backend (kda_stream_score), which
 * runs the float64 recurrence again rather than keep M[t, hv] for every token.  The backend
 * is not called from here: the runner hands the scoring pass a function that makes a chunk's
 * call (kda_chunk_caller), so that the runner is the one caller of the worker.
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case_internal.h"
#include "kda_conform.h"
#include "kda_golden_check.h"
#include "kda_ref.h"
#include "kda_ref_internal.h"
#include "kda_score_internal.h"

typedef struct kda_stream kda_stream;
struct kda_stream {
  char *path;
  kda_npz *z;         /* the case file: stored inputs, golden rows */
  int owns_z;         /* 1: opened here (kda_truth_stream), closed with the stream */
  int generated;      /* inputs from the generator (golden.inputs "generated", §10.2) */
  kda_gen_desc desc;  /* their description */
  int golden;         /* the file's o is the truth (every row, or the sampled ones) */
  int64_t chunk;
};

int kda_stream_auto(const kda_problem *p) {
  const int64_t w = p->K > p->V ? p->K : p->V;
  return p->T > 0 && p->HV > 0 && w > 0 && p->T > KDA_STREAM_AUTO / p->HV / w;
}

/* ---- Chunks: tokens [a, b) of sequence n and the checkpoints [c0, c1) inside them. */
typedef struct chunk_t {
  int64_t n, a, b, c0, c1;
  int first, last;          /* the first / last chunk of its sequence */
  kda_problem p;            /* one sequence of b - a tokens, from h0, asking for ht */
  int64_t cu[2];
  int64_t *ck;              /* [c1 - c0] checkpoints, chunk positions */
  double *q, *k, *v, *g, *beta;
} chunk_t;

static void chunk_free(chunk_t *ch) {
  free(ch->ck), free(ch->q), free(ch->k), free(ch->v), free(ch->g), free(ch->beta);
  ch->ck = NULL, ch->q = ch->k = ch->v = ch->g = ch->beta = NULL;
}

/* Every value finite (g may be -inf in the log gate mode) and exact in its precision, as
 * kda_case_load checks a whole member (SPEC.md §6.2, §10.3). */
static int check_rows(const kda_stream *s, const kda_case *c, int m, const double *x, uint64_t n,
                      uint64_t first, char *err, size_t errlen) {
  const int32_t prec = kda_case_member_prec(m, c->input_precision);
  const int ninf_ok = m == KDA_M_G && c->p.gate_mode == KDA_GATE_LOG;
  for (uint64_t i = 0; i < n; i++) {
    const double xi = x[i];
    if (isnan(xi) || (isinf(xi) && !(xi < 0 && ninf_ok)) ||
        (!isinf(xi) && kda_case_round(prec, xi) != xi))
      return snprintf(err, errlen, "%s: member '%s' element %llu = %.17g is %s", s->path,
                      kda_case_member_names[m], (unsigned long long)(first + i), xi,
                      isnan(xi) || isinf(xi) ? "not finite" : "not exact in its precision"),
             isnan(xi) || isinf(xi) ? KDA_ENONFINITE : KDA_EINVAL;
  }
  return KDA_OK;
}

/* Elements per token of input member m (0 when the problem does not use it). */
static uint64_t per_token(const kda_problem *p, int m) {
  const int64_t GW = kda_problem_gate_width(p) > 0 ? kda_problem_gate_width(p) : 1;
  switch (m) {
    case KDA_M_Q:
    case KDA_M_K: return (uint64_t)(p->H * p->K);
    case KDA_M_V: return (uint64_t)(p->HV * p->V);
    case KDA_M_G: return kda_problem_uses_g(p) ? (uint64_t)(p->HV * GW) : 0;
    case KDA_M_BETA: return (uint64_t)p->HV;
    default: return 0;
  }
}

static int read_member(const kda_stream *s, const kda_case *c, int m, int64_t a, int64_t b,
                       double **out, char *err, size_t errlen) {
  const uint64_t w = per_token(&c->p, m), n = w * (uint64_t)(b - a), first = w * (uint64_t)a;
  *out = NULL;
  if (!w) return KDA_OK;
  *out = malloc(((size_t)n + 1) * sizeof **out);
  if (!*out) return snprintf(err, errlen, "%s: out of memory for a chunk", s->path), KDA_ENOMEM;
  int st = n ? kda_npz_read_range(s->z, kda_case_member_names[m], KDA_DTYPE_F64, first, n, *out,
                                  err, errlen)
             : KDA_OK;
  return st == KDA_OK ? check_rows(s, c, m, *out, n, first, err, errlen) : st;
}

/* The inputs of tokens [a, b): read by range, or generated (the same bits, SPEC.md §11.2). */
static int chunk_inputs(const kda_stream *s, const kda_case *c, chunk_t *ch, char *err,
                        size_t errlen) {
  if (s->generated) {
    kda_gen_window w;
    int st = kda_gen_range(&s->desc, ch->a, ch->b, &w, err, errlen);
    if (st != KDA_OK) return st;
    ch->q = w.q, ch->k = w.k, ch->v = w.v, ch->g = w.g, ch->beta = w.beta;
    return KDA_OK;
  }
  double **dst[5] = {&ch->q, &ch->k, &ch->v, &ch->g, &ch->beta};
  const int ms[5] = {KDA_M_Q, KDA_M_K, KDA_M_V, KDA_M_G, KDA_M_BETA};
  for (int i = 0; i < 5; i++) {
    int st = read_member(s, c, ms[i], ch->a, ch->b, dst[i], err, errlen);
    if (st != KDA_OK) return st;
  }
  return KDA_OK;
}

static int chunk_make(const kda_stream *s, const kda_case *c, chunk_t *ch, char *err,
                      size_t errlen) {
  ch->p = c->p;
  ch->p.N = 1, ch->p.T = ch->b - ch->a, ch->p.n_checkpoints = ch->c1 - ch->c0;
  ch->p.has_initial_state = 1, ch->p.want_final_state = 1;
  ch->cu[0] = 0, ch->cu[1] = ch->b - ch->a;
  ch->ck = malloc(((size_t)(ch->c1 - ch->c0) + 1) * sizeof *ch->ck);
  if (!ch->ck) return snprintf(err, errlen, "out of memory for a chunk"), KDA_ENOMEM;
  for (int64_t i = ch->c0; i < ch->c1; i++) ch->ck[i - ch->c0] = c->checkpoints[i] - ch->a;
  return chunk_inputs(s, c, ch, err, errlen);
}

static void chunk_tensors(const kda_case *c, const chunk_t *ch, const double *h0,
                          kda_tensors_f64 *ts) {
  memset(ts, 0, sizeof *ts);
  ts->q = ch->q, ts->k = ch->k, ts->v = ch->v, ts->g = ch->g, ts->beta = ch->beta;
  ts->A_log = c->A_log, ts->dt_bias = c->dt_bias, ts->h0 = h0;
  ts->cu_seqlens = ch->cu, ts->checkpoints = ch->ck;
}

/* Calls fn on every chunk in token order: each sequence from its first token, C tokens at a
 * time (one empty chunk for an empty sequence, whose ht is its h0). */
typedef int (*chunk_fn)(void *ctx, chunk_t *ch, char *err, size_t errlen);

static int each_chunk(const kda_stream *s, const kda_case *c, chunk_fn fn, void *ctx, char *err,
                      size_t errlen) {
  int64_t ck = 0;
  int st = KDA_OK;
  for (int64_t n = 0; n < c->p.N && st == KDA_OK; n++) {
    const int64_t bos = c->cu_seqlens[n], eos = c->cu_seqlens[n + 1];
    int64_t a = bos;
    do {
      chunk_t ch;
      memset(&ch, 0, sizeof ch);
      ch.n = n, ch.a = a, ch.b = eos - a > s->chunk ? a + s->chunk : eos, ch.c0 = ch.c1 = ck;
      ch.first = a == bos;
      ch.last = ch.b == eos;
      while (ch.c1 < c->p.n_checkpoints && c->checkpoints[ch.c1] < ch.b) ch.c1++;
      ck = ch.c1;
      st = chunk_make(s, c, &ch, err, errlen);
      if (st == KDA_OK) st = fn(ctx, &ch, err, errlen);
      chunk_free(&ch);
      a = ch.b;
    } while (st == KDA_OK && a < eos);
  }
  return st;
}

/* ---- The float64 recurrence of a chunk: the state chained, M at the truth's rows, and with
 * o64 (no golden outputs) ref-f64's o. */
typedef struct ref64 {
  const kda_case *c;
  const kda_truth *t;
  double *S;        /* [HV, K, V] the float64 state after the chunks so far */
  double *o, *hc, *mag;
  int64_t r0, r1;   /* truth rows of the chunk_t */
} ref64;

static int64_t state_size(const kda_problem *p) { return p->HV * p->K * p->V; }

/* The truth rows [r0, r1) of tokens [a, b): the tokens themselves, or a sampled truth's rows. */
static void rows_of(const kda_truth *t, int64_t a, int64_t b, int64_t *r0, int64_t *r1) {
  *r0 = t->o_index ? kda_sampled_lower(t->o_index, t->n_rows, a) : a;
  *r1 = t->o_index ? kda_sampled_lower(t->o_index, t->n_rows, b) : b;
}

static int ref64_chunk(ref64 *r, const chunk_t *ch, int want_o, char *err, size_t errlen) {
  const kda_problem *p = &r->c->p;
  const kda_truth *t = r->t;
  const int64_t len = ch->b - ch->a, S = state_size(p);
  free(r->o), free(r->hc), free(r->mag);
  r->o = r->hc = r->mag = NULL;
  rows_of(t, ch->a, ch->b, &r->r0, &r->r1);
  if (ch->first) {
    for (int64_t e = 0; e < S; e++)
      r->S[e] = p->has_initial_state ? r->c->h0[ch->n * S + e] : 0.0;
  }
  r->mag = malloc(((size_t)((r->r1 - r->r0) * p->HV) + 1) * sizeof *r->mag);
  r->hc = malloc(((size_t)((ch->c1 - ch->c0) * S) + 1) * sizeof *r->hc);
  if (want_o) r->o = malloc(((size_t)(len * p->HV * p->V) + 1) * sizeof *r->o);
  double *ht = malloc(((size_t)S + 1) * sizeof *ht);
  if (!r->mag || !r->hc || !ht || (want_o && !r->o))
    return free(ht), snprintf(err, errlen, "out of memory for the float64 pass"), KDA_ENOMEM;
  kda_tensors_f64 ts;
  chunk_tensors(r->c, ch, r->S, &ts);
  ts.o = r->o, ts.ht = ht, ts.hc = ch->c1 > ch->c0 ? r->hc : NULL;
  const kda_mag_rows rows = {t->o_index, t->n_rows, ch->a, r->r0};
  int st = kda_mag_trace(&ch->p, &ts, t->o_index ? &rows : NULL, r->mag, err, errlen);
  if (st == KDA_OK) memcpy(r->S, ht, (size_t)S * sizeof *ht);
  free(ht);
  return st;
}

/* The truth's rows r0 .. r1 of the chunk: golden ones read by range, else ref-f64's o. */
static int truth_rows(const kda_stream *s, const kda_case *c, const ref64 *r, double **rows,
                      char *err, size_t errlen) {
  *rows = NULL;
  if (!s->golden) return *rows = r->o, KDA_OK;
  const uint64_t w = (uint64_t)(c->p.HV * c->p.V), n = w * (uint64_t)(r->r1 - r->r0);
  double *x = malloc(((size_t)n + 1) * sizeof *x);
  if (!x) return snprintf(err, errlen, "out of memory for the truth"), KDA_ENOMEM;
  int st = n ? kda_npz_read_range(s->z, "o", KDA_DTYPE_F64, w * (uint64_t)r->r0, n, x, err, errlen)
             : KDA_OK;
  if (st != KDA_OK) return free(x), st;
  *rows = x;
  return KDA_OK;
}

/* Observed states of the chunk into whole arrays: ht of its sequence (last chunk), hc. */
static void keep_states(const kda_case *c, const chunk_t *ch, const double *ht, const double *hc,
                        double *all_ht, double *all_hc) {
  const int64_t S = state_size(&c->p);
  if (all_ht && ch->last) memcpy(all_ht + ch->n * S, ht, (size_t)S * sizeof *ht);
  if (all_hc && ch->c1 > ch->c0)
    memcpy(all_hc + ch->c0 * S, hc, (size_t)((ch->c1 - ch->c0) * S) * sizeof *hc);
}

/* ---- The reference pass (kda_truth_stream). */
typedef struct ref_pass {
  const kda_stream *s;
  kda_truth *t;
  ref64 r;
  float *S32;          /* [HV, K, V] ref-f32's state */
  double *ht32, *hc32; /* ref-f32's states, every slot */
  double *ht64, *hc64; /* ref-f64's (the truth without golden states) */
  kda_score plain;     /* ref-f32 scored without an envelope: its windows and growth */
  kda_score_acc acc;
  int stored;          /* the file carries its envelope: no ref-f32 (SPEC.md §10.2) */
} ref_pass;

static float *to_f32(const double *x, uint64_t n) {
  float *y = malloc(((size_t)n + 1) * sizeof *y);
  for (uint64_t i = 0; y && x && i < n; i++) y[i] = (float)x[i];
  return y;
}

/* ref-f32 (member 0) or honest ensemble member `member` (SPEC.md §7.3) on the chunk from its
 * own chained state S32; o as float64 rows into o (len rows), checkpoints into hc. */
static int f32_chunk(const kda_case *c, const chunk_t *ch, float *S32, uint64_t member,
                     double *o, double *hc, char *err, size_t errlen) {
  const kda_problem *p = &ch->p;
  const int64_t len = ch->b - ch->a, S = state_size(p), nck = ch->c1 - ch->c0;
  kda_problem_sizes z;
  int st = kda_problem_sizes_get(p, &z, err, errlen);
  if (st != KDA_OK) return st;
  if (ch->first)
    for (int64_t e = 0; e < S; e++)
      S32[e] = c->p.has_initial_state ? (float)c->h0[ch->n * S + e] : 0.0f;
  float *q = to_f32(ch->q, z.q), *k = to_f32(ch->k, z.k), *v = to_f32(ch->v, z.v);
  float *g = to_f32(ch->g, z.g), *beta = to_f32(ch->beta, z.beta);
  float *al = to_f32(c->A_log, z.A_log), *dt = to_f32(c->dt_bias, z.dt_bias);
  float *o32 = malloc(((size_t)(len * p->HV * p->V) + 1) * sizeof *o32);
  float *ht32 = malloc(((size_t)S + 1) * sizeof *ht32), *hc32 = malloc(((size_t)(nck * S) + 1) * sizeof(float));
  if (!q || !k || !v || !g || !beta || !al || !dt || !o32 || !ht32 || !hc32) {
    st = KDA_ENOMEM, snprintf(err, errlen, "out of memory for the fp32 envelope");
  } else {
    kda_tensors_f32 ts = {q, k, v, ch->g ? g : NULL, beta, c->A_log ? al : NULL,
                          c->dt_bias ? dt : NULL, S32, ch->cu, ch->ck, o32, ht32,
                          nck ? hc32 : NULL};
    const kda_honest_at at = {ch->a, ch->a - c->cu_seqlens[ch->n]};
    st = member ? kda_honest_forward_f32(p, &ts, member, &at, err, errlen)
                : kda_ref_forward_f32(p, &ts, err, errlen);
  }
  if (st == KDA_OK) {
    for (int64_t i = 0; i < len * p->HV * p->V; i++) o[i] = o32[i];
    for (int64_t i = 0; i < nck * S; i++) hc[i] = hc32[i];
    memcpy(S32, ht32, (size_t)S * sizeof *ht32);
  }
  free(q), free(k), free(v), free(g), free(beta), free(al), free(dt), free(o32), free(ht32);
  free(hc32);
  return st;
}

static int ref32_chunk(ref_pass *x, const chunk_t *ch, double *o, double *hc, char *err,
                       size_t errlen) {
  return f32_chunk(x->r.c, ch, x->S32, 0, o, hc, err, errlen);
}

/* ref-f32 on one chunk, on a thread of its own beside ref-f64 (ref_pass_chunk): the two
 * recurrences share only the chunk's inputs (read only) and chain their own states, so the
 * results are those of running them one after the other, bit for bit. */
typedef struct ref32_job {
  ref_pass *x;
  const chunk_t *ch;
  double *o, *hc;
  int st;
  char err[KDA_ERRLEN];
} ref32_job;
static void *ref32_run(void *arg) {
  ref32_job *j = arg;
  j->st = ref32_chunk(j->x, j->ch, j->o, j->hc, j->err, sizeof j->err);
  return NULL;
}

static int ref_pass_chunk(void *ctx, chunk_t *ch, char *err, size_t errlen) {
  ref_pass *x = ctx;
  const kda_case *c = x->r.c;
  const int64_t len = ch->b - ch->a, S = state_size(&c->p), nck = ch->c1 - ch->c0;
  double *rows = NULL;
  if (x->stored) { /* the float64 recurrence alone: M and, without golden states, the truth's */
    int st = ref64_chunk(&x->r, ch, !x->s->golden, err, errlen);
    if (st == KDA_OK && x->t->mag_rows)
      memcpy(x->t->mag_rows + x->r.r0 * c->p.HV, x->r.mag,
             (size_t)((x->r.r1 - x->r.r0) * c->p.HV) * sizeof(double));
    if (st == KDA_OK) keep_states(c, ch, x->r.S, x->r.hc, x->ht64, x->hc64);
    return st;
  }
  double *o32 = malloc(((size_t)(len * c->p.HV * c->p.V) + 1) * sizeof *o32);
  double *hc32 = malloc(((size_t)(nck * S) + 1) * sizeof *hc32);
  if (!o32 || !hc32)
    return free(o32), free(hc32), snprintf(err, errlen, "out of memory for the fp32 envelope"),
           KDA_ENOMEM;
  /* The two passes at once (the long cases' scoring is these two single-threaded recurrences
   * over every token); without a thread, one after the other. */
  ref32_job job = {x, ch, o32, hc32, KDA_OK, ""};
  pthread_t tid;
  const int threaded = pthread_create(&tid, NULL, ref32_run, &job) == 0;
  int st = ref64_chunk(&x->r, ch, !x->s->golden, err, errlen);
  if (st == KDA_OK && x->t->mag_rows) /* kept for the scoring passes */
    memcpy(x->t->mag_rows + x->r.r0 * c->p.HV, x->r.mag,
           (size_t)((x->r.r1 - x->r.r0) * c->p.HV) * sizeof(double));
  if (threaded) pthread_join(tid, NULL);
  else ref32_run(&job);
  if (st == KDA_OK && job.st != KDA_OK) st = job.st, snprintf(err, errlen, "%s", job.err);
  if (st == KDA_OK) st = truth_rows(x->s, c, &x->r, &rows, err, errlen);
  if (st == KDA_OK) {
    const kda_o_rows o = {ch->n, ch->a, ch->b, x->r.r0, rows, x->r.mag, o32};
    kda_score_o_rows(&x->acc, c, &o);
    double *ht32 = malloc(((size_t)S + 1) * sizeof *ht32);
    if (!ht32) st = KDA_ENOMEM, snprintf(err, errlen, "out of memory");
    for (int64_t e = 0; ht32 && e < S; e++) ht32[e] = x->S32[e];
    if (ht32) keep_states(c, ch, ht32, hc32, x->ht32, x->hc32);
    if (ht32) keep_states(c, ch, x->r.S, x->r.hc, x->ht64, x->hc64);
    free(ht32);
  }
  if (rows != x->r.o) free(rows);
  free(o32), free(hc32);
  return st;
}

/* Worst ref-f32 error of each state slot (fp32 units, no allowance), as kda_envelope.c's. */
static void env_states(const kda_problem *p, const double *truth, const double *f32,
                       const double *mag, int64_t slots, double *each) {
  const int64_t KV = p->K * p->V;
  const double u = kda_class_unit(KDA_PRECISION_FP32), tiny = kda_class_tiny(KDA_PRECISION_FP32);
  for (int64_t sl = 0; sl < slots; sl++)
    for (int64_t hv = 0; hv < p->HV; hv++) {
      const double sc = fmax(u * mag[sl * p->HV + hv], tiny);
      for (int64_t e = 0; e < KV; e++) {
        const uint64_t i = (uint64_t)((sl * p->HV + hv) * KV + e);
        double d = !isfinite(f32[i]) ? (isfinite(truth[i]) ? INFINITY : 0.0)
                                     : fabs(f32[i] - truth[i]) / sc;
        if (d > each[sl]) each[sl] = d;
      }
    }
}

/* Generated inputs (golden.inputs "generated", SPEC.md §10.2): their description;
 * kda_case_read proved its hashes. */
static int stream_desc(kda_stream *s, const kda_case *c, char *err, size_t errlen) {
  json_t *root = json_loads(c->manifest_json, 0, NULL);
  const char *d = json_string_value(
      json_object_get(json_object_get(root, "generator_info"), "description"));
  int st = d ? kda_gen_parse(d, &s->desc, err, errlen) : KDA_EFORMAT;
  if (!d) snprintf(err, errlen, "%s: generated inputs without a description", s->path);
  else if (st == KDA_OK) s->generated = 1;
  json_decref(root);
  return st;
}

/* The stream of case c over the open case file z (closed with the stream when owns_z). */
static int stream_open(const kda_case *c, kda_npz *z, int owns_z, int64_t chunk, kda_stream **out,
                       char *err, size_t errlen) {
  const char *path = kda_npz_path(z);
  kda_stream *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path))) {
    if (owns_z) kda_npz_close(z);
    return free(s), snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  }
  *out = s;
  s->z = z, s->owns_z = owns_z;
  s->chunk = chunk > 0 ? chunk : KDA_STREAM_CHUNK;
  if (s->chunk % KDA_ENVELOPE_WINDOW)
    return snprintf(err, errlen, "streaming chunk %lld is not a multiple of %d tokens",
                    (long long)s->chunk, KDA_ENVELOPE_WINDOW), KDA_EINVAL;
  int generated = 0, sampled = 0;
  int st = kda_case_golden_form(c, &generated, &sampled);
  if (st == KDA_OK && generated) st = stream_desc(s, c, err, errlen);
  if (st != KDA_OK) return st;
  s->golden = kda_npz_has(s->z, "o");
  /* chunks are read by range, which checks no CRC: every member's is checked once here, by
   * the hash check of a golden file (which reads every member whole) or by a verify pass */
  if (!s->golden) return kda_npz_verify(s->z, err, errlen);
  char msg[KDA_ERRLEN];
  if (kda_golden_check_members_open(s->z, msg, sizeof msg) != KDA_OK)
    return snprintf(err, errlen, "golden outputs not verified: %s", msg), KDA_EFORMAT;
  return sampled ? KDA_OK : kda_output_member_check(s->z, path, &c->p, "o", err, errlen);
}

static void stream_close(kda_stream *s) {
  if (!s) return;
  if (s->owns_z) kda_npz_close(s->z);
  if (s->generated) kda_gen_desc_free(&s->desc);
  free(s->path);
  free(s);
}

/* The truth's states: golden ones read whole (they are small: (N + C) HV K V), or NULL. */
static int truth_alloc(const kda_case *c, kda_truth *t, ref_pass *x, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  const size_t S = (size_t)state_size(p), N = (size_t)p->N, C = (size_t)p->n_checkpoints;
  t->out.n_ht = p->want_final_state ? N * S : 0;
  t->out.n_hc = C * S;
  if (p->want_final_state) t->out.ht = malloc((N * S + 1) * sizeof(double));
  if (C) t->out.hc = malloc((C * S + 1) * sizeof(double));
  t->mag_ht = calloc(N * (size_t)p->HV + 1, sizeof(double));
  t->mag_hc = calloc(C * (size_t)p->HV + 1, sizeof(double));
  t->env.n_win = (p->T + KDA_ENVELOPE_WINDOW - 1) / KDA_ENVELOPE_WINDOW;
  t->env.ht = calloc(N + 1, sizeof(double));
  t->env.hc = calloc(C + 1, sizeof(double));
  x->r.S = malloc((S + 1) * sizeof(double));
  x->S32 = malloc((S + 1) * sizeof(float));
  x->ht32 = malloc((N * S + 1) * sizeof(double)), x->hc32 = malloc((C * S + 1) * sizeof(double));
  x->ht64 = malloc((N * S + 1) * sizeof(double)), x->hc64 = malloc((C * S + 1) * sizeof(double));
  /* A golden truth's rows come from the file, so the scoring passes need only M from the
   * float64 recurrence: keep it when it is small enough (none, or too large: they rerun it). */
  if (x->s->golden && t->n_rows * p->HV <= KDA_STREAM_MAG_MAX)
    t->mag_rows = calloc((size_t)(t->n_rows * p->HV) + 1, sizeof(double));
  if ((p->want_final_state && !t->out.ht) || (C && !t->out.hc) || !t->mag_ht || !t->mag_hc ||
      !t->env.ht || !t->env.hc || !x->r.S || !x->S32 || !x->ht32 || !x->hc32 || !x->ht64 ||
      !x->hc64)
    return snprintf(err, errlen, "out of memory for the streamed truth"), KDA_ENOMEM;
  if (!x->s->golden) return KDA_OK;
  return kda_output_members_read(x->s->z, x->s->path, p, NULL, t->out.ht, t->out.hc, err,
                                 errlen);
}

/* After the pass: the truth's states (ref-f64's without golden ones), their magnitudes, the
 * envelope (ref-f32's worst error per window and slot), ref-f32's growth. */
static int truth_finish(const kda_case *c, kda_truth *t, ref_pass *x, char *err,
                        size_t errlen) {
  const kda_problem *p = &c->p;
  const int64_t S = state_size(p);
  if (!x->s->golden && t->out.ht) memcpy(t->out.ht, x->ht64, (size_t)(p->N * S) * sizeof(double));
  if (!x->s->golden && t->out.hc)
    memcpy(t->out.hc, x->hc64, (size_t)(p->n_checkpoints * S) * sizeof(double));
  if (t->out.ht) kda_score_head_max(t->out.ht, p->N, p->HV, p->K * p->V, t->mag_ht);
  if (t->out.hc) kda_score_head_max(t->out.hc, p->n_checkpoints, p->HV, p->K * p->V, t->mag_hc);
  if (x->stored) return KDA_OK;
  kda_score_end(&x->acc, c, x->ht32, x->hc32); /* t->env.o still NULL: no envelope */
  kda_envelope *env = &t->env;
  env->growth_kind = x->plain.growth_kind, env->alpha = x->plain.alpha;
  env->win_lasts[0] = x->plain.win_last;
  if (t->out.ht) env_states(p, t->out.ht, x->ht32, t->mag_ht, p->N, env->ht);
  if (t->out.hc) env_states(p, t->out.hc, x->hc32, t->mag_hc, p->n_checkpoints, env->hc);
  /* the worst window errors of ref-f32's own score are the envelope of §7.3 */
  env->o = malloc(((size_t)env->n_win + 1) * sizeof *env->o);
  if (!env->o || x->plain.n_win_each != env->n_win)
    return snprintf(err, errlen, "out of memory for the fp32 envelope"), KDA_ENOMEM;
  if (env->n_win) memcpy(env->o, x->plain.win_max_each, (size_t)env->n_win * sizeof *env->o);
  return KDA_OK;
}

static void ref_pass_free(ref_pass *x) {
  free(x->r.S), free(x->r.o), free(x->r.hc), free(x->r.mag);
  free(x->S32), free(x->ht32), free(x->hc32), free(x->ht64), free(x->hc64);
  free(x->acc.tok), free(x->acc.tmp);
  kda_score_free(&x->plain);
}

/* ---- The honest ensemble's pass (SPEC.md §7.3), run when ref-f32's errors call for it:
 * every member over every chunk from its own chained state, scored as a backend against the
 * truth without an envelope, exactly as kda_envelope_compute scores them on the whole case. */
typedef struct members_pass {
  const kda_stream *s;
  kda_truth *t;
  ref64 r;
  float *S32;      /* [E][S] the members' states */
  double *ht, *hc; /* [E][N S], [E][C S] their states, every slot */
  int n;           /* members 1 .. n */
  kda_score sc[KDA_ENVELOPE_MEMBERS];
  kda_score_acc acc[KDA_ENVELOPE_MEMBERS];
} members_pass;

/* One member on one chunk, on a thread of its own: its own chained state, score and state
 * arrays; the chunk's inputs, truth rows and scales shared read only. */
typedef struct member_job {
  members_pass *x;
  const chunk_t *ch;
  const double *rows, *mag;
  int m, st;
  char err[KDA_ERRLEN];
} member_job;

static void *member_run(void *arg) {
  member_job *j = arg;
  members_pass *x = j->x;
  const kda_case *c = x->r.c;
  const chunk_t *ch = j->ch;
  const int64_t S = state_size(&c->p), len = ch->b - ch->a, nck = ch->c1 - ch->c0;
  double *o = malloc(((size_t)(len * c->p.HV * c->p.V) + 1) * sizeof *o);
  double *hc = malloc(((size_t)(nck * S) + 1) * sizeof *hc);
  double *ht = malloc(((size_t)S + 1) * sizeof *ht);
  float *S32 = x->S32 + (size_t)j->m * (size_t)S;
  j->st = o && hc && ht ? KDA_OK : KDA_ENOMEM;
  if (j->st != KDA_OK) snprintf(j->err, sizeof j->err, "out of memory for the honest ensemble");
  if (j->st == KDA_OK)
    j->st = f32_chunk(c, ch, S32, (uint64_t)j->m + 1, o, hc, j->err, sizeof j->err);
  if (j->st == KDA_OK) {
    const kda_o_rows orow = {ch->n, ch->a, ch->b, x->r.r0, j->rows, j->mag, o};
    kda_score_o_rows(&x->acc[j->m], c, &orow);
    for (int64_t e = 0; e < S; e++) ht[e] = S32[e];
    keep_states(c, ch, ht, hc, x->ht + (size_t)j->m * (size_t)(c->p.N * S),
                x->hc + (size_t)j->m * (size_t)(c->p.n_checkpoints * S));
  }
  free(o), free(hc), free(ht);
  return NULL;
}

static int members_chunk(void *ctx, chunk_t *ch, char *err, size_t errlen) {
  members_pass *x = ctx;
  const kda_case *c = x->r.c;
  const double *mag = NULL;
  int st = KDA_OK;
  if (x->t->mag_rows) {
    rows_of(x->t, ch->a, ch->b, &x->r.r0, &x->r.r1);
    mag = x->t->mag_rows + x->r.r0 * c->p.HV;
  } else {
    st = ref64_chunk(&x->r, ch, !x->s->golden, err, errlen);
    mag = x->r.mag;
  }
  double *rows = NULL;
  if (st == KDA_OK) st = truth_rows(x->s, c, &x->r, &rows, err, errlen);
  /* the members at once (independent recurrences: the same bits as one after the other);
   * one that gets no thread runs here */
  member_job jobs[KDA_ENVELOPE_MEMBERS];
  pthread_t tid[KDA_ENVELOPE_MEMBERS];
  int threaded[KDA_ENVELOPE_MEMBERS] = {0};
  for (int m = 0; st == KDA_OK && m < x->n; m++) {
    jobs[m] = (member_job){x, ch, rows, mag, m, KDA_OK, ""};
    threaded[m] = pthread_create(&tid[m], NULL, member_run, &jobs[m]) == 0;
    if (!threaded[m]) member_run(&jobs[m]);
  }
  for (int m = 0; st == KDA_OK && m < x->n; m++) {
    if (threaded[m]) pthread_join(tid[m], NULL);
  }
  for (int m = 0; st == KDA_OK && m < x->n; m++)
    if (jobs[m].st != KDA_OK) st = jobs[m].st, snprintf(err, errlen, "%s", jobs[m].err);
  if (rows != x->r.o) free(rows);
  return st;
}

/* Each member's window maxima, state errors and growth into t->env, by maximum. */
static void members_merge(const kda_case *c, kda_truth *t, members_pass *x) {
  const kda_problem *p = &c->p;
  kda_envelope *env = &t->env;
  const int64_t S = state_size(p);
  for (int m = 0; m < x->n; m++) {
    double *ht = x->ht + (size_t)m * (size_t)(p->N * S);
    double *hc = x->hc + (size_t)m * (size_t)(p->n_checkpoints * S);
    kda_score_end(&x->acc[m], c, ht, hc);
    const kda_score *s = &x->sc[m];
    for (int64_t w = 0; w < env->n_win && w < s->n_win_each; w++)
      if (s->win_max_each[w] > env->o[w]) env->o[w] = s->win_max_each[w];
    if (t->out.ht) env_states(p, t->out.ht, ht, t->mag_ht, p->N, env->ht);
    if (t->out.hc) env_states(p, t->out.hc, hc, t->mag_hc, p->n_checkpoints, env->hc);
    if (s->growth_kind > env->growth_kind) env->growth_kind = s->growth_kind;
    if (!(env->alpha >= s->alpha)) env->alpha = s->alpha;
    env->win_lasts[m + 1] = s->win_last;
    env->members = m + 1;
  }
}

static int members_stream(const kda_case *c, kda_truth *t, int n, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  const size_t S = (size_t)state_size(p), E = (size_t)n;
  members_pass x;
  memset(&x, 0, sizeof x);
  x.s = t->stream, x.t = t, x.r.c = c, x.r.t = t, x.n = n;
  x.r.S = malloc((S + 1) * sizeof(double));
  x.S32 = malloc((E * S + 1) * sizeof(float));
  x.ht = malloc((E * (size_t)p->N * S + 1) * sizeof(double));
  x.hc = malloc((E * (size_t)p->n_checkpoints * S + 1) * sizeof(double));
  int st = x.r.S && x.S32 && x.ht && x.hc ? KDA_OK : KDA_ENOMEM;
  if (st != KDA_OK) snprintf(err, errlen, "out of memory for the honest ensemble");
  /* scored without an envelope: t->env.o is set only after this pass */
  double *env_o = t->env.o;
  t->env.o = NULL;
  int begun = 0; /* kda_score_begin cleans up after itself when it fails */
  while (st == KDA_OK && begun < (int)E &&
         (st = kda_score_begin(c, t, KDA_PRECISION_FP32, &x.sc[begun], &x.acc[begun], err,
                               errlen)) == KDA_OK)
    begun++;
  if (st == KDA_OK) st = each_chunk(t->stream, c, members_chunk, &x, err, errlen);
  t->env.o = env_o;
  if (st == KDA_OK) members_merge(c, t, &x);
  for (int m = 0; m < begun; m++) {
    if (st != KDA_OK) free(x.acc[m].tok), free(x.acc[m].tmp);
    kda_score_free(&x.sc[m]);
  }
  free(x.r.S), free(x.r.o), free(x.r.hc), free(x.r.mag);
  free(x.S32), free(x.ht), free(x.hc);
  return st;
}

int kda_stream_truth_pass(const kda_case *c, kda_npz *z, int owns_z, int64_t chunk,
                          kda_truth *t, char *err, size_t errlen) {
  t->n_rows = c->p.T;
  int st = stream_open(c, z, owns_z, chunk, &t->stream, err, errlen);
  if (st == KDA_OK && kda_sampled_declared(c))
    st = kda_sampled_read_index(z, kda_npz_path(z), &c->p, &t->o_index, &t->n_rows, err,
                                errlen);
  ref_pass x;
  memset(&x, 0, sizeof x);
  x.s = t->stream, x.t = t, x.r.c = c, x.r.t = t;
  /* a golden file's own envelope (its hashes verified by stream_open) */
  kda_envelope stored;
  memset(&stored, 0, sizeof stored);
  if (st == KDA_OK && t->stream->golden)
    st = kda_envelope_stored(z, c, &stored, &x.stored, err, errlen);
  if (st == KDA_OK) st = truth_alloc(c, t, &x, err, errlen);
  if (st == KDA_OK && !x.stored)
    st = kda_score_begin(c, t, KDA_PRECISION_FP32, &x.plain, &x.acc, err, errlen);
  if (st == KDA_OK) st = each_chunk(t->stream, c, ref_pass_chunk, &x, err, errlen);
  if (st == KDA_OK) st = truth_finish(c, t, &x, err, errlen);
  ref_pass_free(&x);
  if (x.stored) {
    kda_envelope_free(&t->env);
    t->env = stored;
    return st;
  }
  /* as kda_envelope_compute: member 1 always, the others where the gate is met (a second
   * pass, member 1 again, when only member 1's errors meet it: the same result) */
  if (st == KDA_OK && !kda_envelope_needs_ensemble(&c->p, &t->env))
    st = members_stream(c, t, 1, err, errlen);
  if (st == KDA_OK && kda_envelope_needs_ensemble(&c->p, &t->env))
    st = members_stream(c, t, KDA_ENVELOPE_MEMBERS, err, errlen);
  if (st == KDA_OK) kda_envelope_finish(&t->env);
  return st; /* on failure the caller frees t (kda_truth_free) */
}

void kda_stream_free(kda_stream *s) { stream_close(s); }
int64_t kda_stream_chunk(const kda_stream *s) { return s ? s->chunk : 0; }
const char *kda_stream_path(const kda_stream *s) { return s ? s->path : NULL; }
kda_npz *kda_stream_npz(const kda_stream *s) { return s ? s->z : NULL; }

/* ---- A backend's pass (kda_stream_score). */
typedef struct score_pass {
  const kda_stream *s;
  const kda_truth *t;
  const kda_chunk_caller *call;
  ref64 r;
  double *Sb;            /* [HV, K, V] the backend's state after the chunks so far */
  double *ht, *hc;       /* the backend's states, every slot */
  kda_score_acc acc;
  kda_stream_result *res;
} score_pass;

/* One chained call of the backend on the chunk, through the runner's caller. */
static int backend_chunk(score_pass *x, const chunk_t *ch, kda_outputs *out, char *err,
                         size_t errlen) {
  const kda_case *c = x->r.c;
  const int64_t S = state_size(&c->p);
  kda_problem p = ch->p;
  if (ch->first) p.has_initial_state = c->p.has_initial_state; /* the case's own first call */
  kda_tensors_f64 in;
  chunk_tensors(c, ch, ch->first ? (c->h0 ? c->h0 + ch->n * S : NULL) : x->Sb, &in);
  int st = kda_outputs_alloc(&p, out, err, errlen);
  kda_call_result *cr = &x->res->call;
  if (st == KDA_OK) st = x->call->fn(x->call->ctx, &p, &in, out, cr, err, errlen);
  if (st != KDA_OK || cr->outcome != KDA_CALL_OK) return st;
  x->res->seconds += cr->seconds, x->res->chunks++;
  return KDA_OK;
}

static int score_pass_chunk(void *ctx, chunk_t *ch, char *err, size_t errlen) {
  score_pass *x = ctx;
  const kda_case *c = x->r.c;
  const int64_t S = state_size(&c->p);
  kda_outputs out = {0};
  int st = backend_chunk(x, ch, &out, err, errlen);
  if (st == KDA_OK && x->res->call.outcome != KDA_CALL_OK) {
    x->res->fail_t0 = ch->a, x->res->fail_t1 = ch->b;
    return kda_outputs_free(&out), -1; /* stop; the outcome says why */
  }
  const double *mag = NULL;
  if (st == KDA_OK && x->t->mag_rows) { /* M kept by the reference pass (a golden truth) */
    rows_of(x->t, ch->a, ch->b, &x->r.r0, &x->r.r1);
    mag = x->t->mag_rows + x->r.r0 * c->p.HV;
  } else if (st == KDA_OK) {
    st = ref64_chunk(&x->r, ch, !x->s->golden, err, errlen);
    mag = x->r.mag;
  }
  double *rows = NULL;
  if (st == KDA_OK) st = truth_rows(x->s, c, &x->r, &rows, err, errlen);
  if (st == KDA_OK) {
    const kda_o_rows o = {ch->n, ch->a, ch->b, x->r.r0, rows, mag, out.o};
    kda_score_o_rows(&x->acc, c, &o);
    keep_states(c, ch, out.ht, out.hc, x->ht, x->hc);
    memcpy(x->Sb, out.ht, (size_t)S * sizeof *x->Sb);
  }
  if (rows != x->r.o) free(rows);
  kda_outputs_free(&out);
  return st;
}

int kda_stream_score(const kda_chunk_caller *call, const kda_case *c, const kda_truth *t,
                     int32_t cls, kda_score *sc, kda_stream_result *res, char *err,
                     size_t errlen) {
  memset(res, 0, sizeof *res);
  res->call.outcome = KDA_CALL_OK;
  const kda_problem *p = &c->p;
  const size_t S = (size_t)state_size(p);
  score_pass x;
  memset(&x, 0, sizeof x);
  x.s = t->stream, x.t = t, x.call = call, x.r.c = c, x.r.t = t, x.res = res;
  x.r.S = malloc((S + 1) * sizeof(double));
  x.Sb = malloc((S + 1) * sizeof(double));
  x.ht = malloc(((size_t)p->N * S + 1) * sizeof(double));
  x.hc = malloc(((size_t)p->n_checkpoints * S + 1) * sizeof(double));
  int st = x.r.S && x.Sb && x.ht && x.hc ? KDA_OK : KDA_ENOMEM;
  if (st != KDA_OK) snprintf(err, errlen, "out of memory for the streamed scoring");
  if (st == KDA_OK) st = kda_score_begin(c, t, cls, sc, &x.acc, err, errlen);
  if (st == KDA_OK) {
    st = each_chunk(t->stream, c, score_pass_chunk, &x, err, errlen);
    if (st == KDA_OK) kda_score_end(&x.acc, c, x.ht, x.hc);
    else free(x.acc.tok), free(x.acc.tmp);
    if (st < 0) st = KDA_OK; /* a call's outcome, in res */
  }
  free(x.r.S), free(x.r.o), free(x.r.hc), free(x.r.mag);
  free(x.Sb), free(x.ht), free(x.hc);
  return st;
}

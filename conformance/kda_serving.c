/* kda_serving.c: the cases the serving-path checks derive from a case: cuts, parts, joins,
 * perturbations and the candidates' serving prompts (SPEC.md §7.7).
 * SPDX-License-Identifier: MIT
 */
#include "kda_serving.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case_internal.h"
#include "kda_score_internal.h"

static int64_t seq_len(const kda_case *c, int64_t n) {
  return c->cu_seqlens[n + 1] - c->cu_seqlens[n];
}

int64_t kda_serving_longest(const kda_case *c) {
  int64_t L = 0;
  for (int64_t n = 0; n < c->p.N; n++) L = seq_len(c, n) > L ? seq_len(c, n) : L;
  return L;
}

int64_t kda_serving_main_offset(const kda_case *c) { return kda_serving_longest(c) * 5 / 8 + 1; }

static int add_offset(int64_t *P, int n, int64_t x, int64_t L) {
  if (x < 1 || x >= L) return n;
  for (int i = 0; i < n; i++)
    if (P[i] == x) return n;
  P[n] = x;
  return n + 1;
}

/* Default: the historical floor(5L/8)+1 and 65 (past the first 64-token chunk, not aligned to
 * it); full adds 1, 63 and L-1 (for one sequence L-1 is the decode cut).  Both end with the
 * decode cut (SPEC.md §7.7). */
int kda_serving_offsets(const kda_case *c, int32_t mode, int64_t *P) {
  int64_t L = kda_serving_longest(c);
  if (L < 2) return 0;
  int n = add_offset(P, 0, kda_serving_main_offset(c), L);
  n = add_offset(P, n, 65, L);
  if (mode == KDA_SERVING_FULL) {
    n = add_offset(P, n, 1, L);
    n = add_offset(P, n, 63, L);
    if (c->p.N > 1) n = add_offset(P, n, L - 1, L);
  }
  P[n++] = KDA_SERVING_DECODE;
  return n;
}

void kda_serving_cut(const kda_case *c, int64_t P, int64_t *at) {
  for (int64_t n = 0; n < c->p.N; n++) {
    int64_t L = seq_len(c, n);
    at[n] = P == KDA_SERVING_DECODE ? (L > 0 ? L - 1 : 0) : (P < L ? P : L);
  }
}

/* Copies rows [cu[n] + from[n], cu[n] + to[n]) of every sequence, `row` doubles each. */
static double *gather(const kda_case *c, const double *x, int64_t row, const int64_t *from,
                      const int64_t *to, int64_t T) {
  if (!x) return NULL;
  double *y = malloc((size_t)(T * row + 1) * sizeof *y);
  if (!y) return NULL;
  double *w = y;
  for (int64_t n = 0; n < c->p.N; n++) {
    size_t len = (size_t)((to[n] - from[n]) * row);
    memcpy(w, x + (c->cu_seqlens[n] + from[n]) * row, len * sizeof *y);
    w += len;
  }
  return y;
}

static double *dup_doubles(const double *x, uint64_t n) {
  if (!x) return NULL;
  double *y = malloc((size_t)(n + 1) * sizeof *y);
  if (y) memcpy(y, x, (size_t)n * sizeof *y);
  return y;
}

static char *derived_id(const kda_case *c, const char *suffix) {
  const char *id = c->id && c->id[0] ? c->id : "case";
  size_t n = strlen(id) + strlen(suffix) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s.%s", id, suffix);
  return s;
}

/* The checkpoints of a part: every token at a position >= ck_from[n] in its sequence. */
static int part_checkpoints(kda_case *d, const int64_t *from, const int64_t *ck_from) {
  int64_t C = 0;
  for (int64_t n = 0; n < d->p.N; n++)
    for (int64_t t = d->cu_seqlens[n]; t < d->cu_seqlens[n + 1]; t++)
      C += from[n] + (t - d->cu_seqlens[n]) >= ck_from[n];
  if (!C) return 1;
  int64_t *ck = malloc((size_t)C * sizeof *ck);
  if (!ck) return 0;
  int64_t i = 0;
  for (int64_t n = 0; n < d->p.N; n++)
    for (int64_t t = d->cu_seqlens[n]; t < d->cu_seqlens[n + 1]; t++)
      if (from[n] + (t - d->cu_seqlens[n]) >= ck_from[n]) ck[i++] = t;
  d->checkpoints = ck;
  d->p.n_checkpoints = C;
  return 1;
}

int kda_serving_part(const kda_case *c, const int64_t *from, const int64_t *to,
                     const double *h0, const int64_t *ck_from, const char *suffix,
                     kda_case *out, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  memset(out, 0, sizeof *out);
  out->p = *p;
  out->input_precision = c->input_precision;
  int64_t T = 0;
  for (int64_t n = 0; n < p->N; n++) {
    if (from[n] < 0 || from[n] > to[n] || to[n] > seq_len(c, n))
      return snprintf(err, errlen, "serving: bad part of sequence %lld", (long long)n),
             KDA_EINVAL;
    T += to[n] - from[n];
  }
  out->p.T = T, out->p.n_checkpoints = 0, out->p.want_final_state = 1;
  out->p.has_initial_state = h0 != NULL;
  const int64_t GW = kda_problem_gate_width(p), S = p->HV * p->K * p->V;
  out->cu_seqlens = malloc((size_t)(p->N + 1) * sizeof(int64_t));
  out->id = derived_id(c, suffix);
  int ok = out->cu_seqlens && out->id;
  if (ok) {
    out->cu_seqlens[0] = 0;
    for (int64_t n = 0; n < p->N; n++)
      out->cu_seqlens[n + 1] = out->cu_seqlens[n] + to[n] - from[n];
  }
  out->q = gather(c, c->q, p->H * p->K, from, to, T);
  out->k = gather(c, c->k, p->H * p->K, from, to, T);
  out->v = gather(c, c->v, p->HV * p->V, from, to, T);
  out->g = GW ? gather(c, c->g, p->HV * GW, from, to, T) : NULL;
  out->beta = gather(c, c->beta, p->HV, from, to, T);
  out->A_log = dup_doubles(c->A_log, (uint64_t)p->HV);
  out->dt_bias = dup_doubles(c->dt_bias, (uint64_t)(p->HV * GW));
  out->h0 = dup_doubles(h0, (uint64_t)(p->N * S));
  ok = ok && out->q && out->k && out->v && (out->g || !GW || !c->g) && out->beta &&
       (out->A_log || !c->A_log) && (out->dt_bias || !c->dt_bias) && (out->h0 || !h0);
  if (ok && ck_from) ok = part_checkpoints(out, from, ck_from);
  if (!ok) {
    kda_case_free(out);
    memset(out, 0, sizeof *out);
    return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  }
  return KDA_OK;
}

void kda_serving_join(const kda_case *c, const int64_t *len1, const int64_t *len2,
                      const double *a, const double *b, double *o) {
  const size_t row = (size_t)(c->p.HV * c->p.V);
  for (int64_t n = 0; n < c->p.N; n++) {
    memcpy(o, a, (size_t)len1[n] * row * sizeof *o);
    o += len1[n] * row, a += len1[n] * row;
    memcpy(o, b, (size_t)len2[n] * row * sizeof *o);
    o += len2[n] * row, b += len2[n] * row;
  }
}

int kda_serving_before_same(const kda_case *c, const int64_t *at, const double *a,
                            const double *b) {
  const size_t row = (size_t)(c->p.HV * c->p.V);
  for (int64_t n = 0; n < c->p.N; n++) {
    size_t off = (size_t)c->cu_seqlens[n] * row;
    if (memcmp(a + off, b + off, (size_t)at[n] * row * sizeof *a) != 0) return 0;
  }
  return 1;
}

void kda_serving_mix(const kda_case *c, const int64_t *at, const double *before,
                     const double *after, double *o) {
  const size_t row = (size_t)(c->p.HV * c->p.V);
  memcpy(o, after, (size_t)c->p.T * row * sizeof *o);
  for (int64_t n = 0; n < c->p.N; n++) {
    size_t off = (size_t)c->cu_seqlens[n] * row;
    memcpy(o + off, before + off, (size_t)at[n] * row * sizeof *o);
  }
}

/* x = f(x) rounded to the member's precision, for the tokens after the cut. */
static void perturb(const kda_case *c, const int64_t *at, double *x, int64_t row, int member,
                    double sign, double shift) {
  if (!x) return;
  int32_t prec = kda_case_member_prec(member, c->input_precision);
  for (int64_t n = 0; n < c->p.N; n++)
    for (int64_t t = c->cu_seqlens[n] + at[n]; t < c->cu_seqlens[n + 1]; t++)
      for (int64_t i = 0; i < row; i++)
        x[t * row + i] = kda_case_round(prec, sign * x[t * row + i] + shift);
}

int kda_serving_perturbed(const kda_case *c, const int64_t *at, int which, const char *suffix,
                          kda_case *out, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  int64_t *zero = calloc((size_t)p->N + 1, sizeof *zero), *len = malloc(((size_t)p->N + 1) * 8);
  if (!zero || !len) return free(zero), free(len), snprintf(err, errlen, "out of memory"),
                            KDA_ENOMEM;
  for (int64_t n = 0; n < p->N; n++) len[n] = seq_len(c, n), zero[n] = 0;
  int st = kda_serving_part(c, zero, len, c->h0, NULL, suffix, out, err, errlen);
  free(zero), free(len);
  if (st != KDA_OK) return st;
  out->p = *p; /* the case's own problem (checkpoints and final state as it asks) */
  if (c->checkpoints) {
    out->checkpoints = malloc((size_t)p->n_checkpoints * sizeof(int64_t));
    if (!out->checkpoints) return kda_case_free(out), snprintf(err, errlen, "out of memory"),
                                  KDA_ENOMEM;
    memcpy(out->checkpoints, c->checkpoints, (size_t)p->n_checkpoints * sizeof(int64_t));
  }
  const int64_t GW = kda_problem_gate_width(p);
  if (which == KDA_PERTURB_QV) {
    perturb(c, at, out->q, p->H * p->K, KDA_M_Q, -1, 0);
    perturb(c, at, out->v, p->HV * p->V, KDA_M_V, -1, -0.5);
  } else {
    /* g moves for every gate mode (raw or pre-gated: a stronger decay, -inf stays -inf) */
    perturb(c, at, out->g, p->HV * GW, KDA_M_G, 1, -0.5);
    perturb(c, at, out->k, p->H * p->K, KDA_M_K, -1, -0.25);
    if (p->beta_mode == KDA_BETA_PROB) perturb(c, at, out->beta, p->HV, KDA_M_BETA, -1, 1);
    else perturb(c, at, out->beta, p->HV, KDA_M_BETA, -1, -0.25);
  }
  return KDA_OK;
}

/* ---- Serving prompts. */
static int ref_state(const kda_case *part, double **ht, char *err, size_t errlen) {
  kda_truth t;
  int st = kda_truth_compute_lazy(part, &t, err, errlen); /* its state only */
  if (st != KDA_OK) return st;
  int32_t prec = kda_case_member_prec(KDA_M_H0, part->input_precision);
  uint64_t n = (uint64_t)(part->p.N * part->p.HV * part->p.K * part->p.V);
  for (uint64_t i = 0; i < n; i++) t.out.ht[i] = kda_case_round(prec, t.out.ht[i]);
  *ht = t.out.ht, t.out.ht = NULL;
  kda_truth_free(&t);
  return KDA_OK;
}

/* The resume (ck NULL) or speculative (k drafts, a checkpoint each) prompt after cut at. */
static int part2_prompt(const kda_case *c, const int64_t *at, int spec, const char *suffix,
                        kda_case *out, char *err, size_t errlen) {
  const int64_t N = c->p.N;
  int64_t *w = calloc((size_t)(3 * N + 1), sizeof *w);
  if (!w) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  int64_t *zero = w, *to = w + N, *end = w + 2 * N;
  for (int64_t n = 0; n < N; n++) {
    end[n] = seq_len(c, n);
    to[n] = spec && at[n] + KDA_SERVING_DRAFTS < end[n] ? at[n] + KDA_SERVING_DRAFTS : end[n];
  }
  kda_case p1;
  double *h = NULL;
  int st = kda_serving_part(c, zero, at, c->h0, NULL, "part1", &p1, err, errlen);
  if (st == KDA_OK) st = ref_state(&p1, &h, err, errlen);
  if (p1.cu_seqlens) kda_case_free(&p1);
  if (st == KDA_OK) st = kda_serving_part(c, at, to, h, spec ? at : NULL, suffix, out, err, errlen);
  if (st == KDA_OK && !spec) out->p.want_final_state = c->p.want_final_state;
  free(h), free(w);
  return st;
}

static int prompts_push(kda_serving_prompt **v, int64_t *n, int64_t *cap, int kind, int64_t P) {
  if (*n == *cap) {
    int64_t nc = *cap ? 2 * *cap : 8;
    kda_serving_prompt *nv = realloc(*v, (size_t)nc * sizeof *nv);
    if (!nv) return 0;
    *v = nv, *cap = nc;
  }
  memset(&(*v)[*n], 0, sizeof **v);
  (*v)[*n].kind = kind, (*v)[*n].P = P;
  return 1;
}

int kda_serving_prompt_ids(const kda_case *c, int32_t mode, kda_serving_prompt_id *ids) {
  int64_t P[KDA_SERVING_MAX_OFFSETS];
  int np = kda_serving_offsets(c, mode, P);
  if (!np) return 0;
  /* resume at every offset, the speculative verify and both causality perturbations at the
   * main offset */
  for (int i = 0; i < np + 3; i++) {
    kda_serving_prompt_id *d = &ids[i];
    d->kind = i < np ? KDA_PROMPT_RESUME : i == np ? KDA_PROMPT_SPEC : KDA_PROMPT_CAUSAL;
    d->P = i < np ? P[i] : kda_serving_main_offset(c);
    d->perturb = i == np + 1 ? KDA_PERTURB_QV : KDA_PERTURB_GKB;
    if (d->kind == KDA_PROMPT_RESUME && d->P == KDA_SERVING_DECODE)
      snprintf(d->suffix, sizeof d->suffix, "decode");
    else if (d->kind == KDA_PROMPT_RESUME)
      snprintf(d->suffix, sizeof d->suffix, "resume-%lld", (long long)d->P);
    else if (d->kind == KDA_PROMPT_SPEC)
      snprintf(d->suffix, sizeof d->suffix, "spec-%lld", (long long)d->P);
    else snprintf(d->suffix, sizeof d->suffix, "causal-%s", i == np + 1 ? "qv" : "gkb");
  }
  return np + 3;
}

int kda_serving_prompts(const kda_case *c, int32_t mode, kda_serving_prompt **out, int64_t *n,
                        char *err, size_t errlen) {
  return kda_serving_prompts_some(c, mode, NULL, out, n, err, errlen);
}

int kda_serving_prompts_some(const kda_case *c, int32_t mode, const uint8_t *want,
                             kda_serving_prompt **out, int64_t *n, char *err, size_t errlen) {
  *out = NULL, *n = 0;
  kda_serving_prompt_id ids[KDA_SERVING_MAX_PROMPTS];
  int64_t cap = 0;
  int np = kda_serving_prompt_ids(c, mode, ids);
  if (!np) return KDA_OK;
  int64_t *at = malloc(((size_t)c->p.N + 1) * sizeof *at);
  if (!at) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  int st = KDA_OK;
  for (int i = 0; i < np && st == KDA_OK; i++) {
    const kda_serving_prompt_id *id = &ids[i];
    if (want && !want[i]) continue;
    kda_serving_cut(c, id->P, at);
    if (!prompts_push(out, n, &cap, id->kind, id->P)) {
      st = KDA_ENOMEM, snprintf(err, errlen, "out of memory");
      break;
    }
    kda_case *d = &(*out)[*n].c;
    if (id->kind == KDA_PROMPT_CAUSAL)
      st = kda_serving_perturbed(c, at, id->perturb, id->suffix, d, err, errlen);
    else
      st = part2_prompt(c, at, id->kind == KDA_PROMPT_SPEC, id->suffix, d, err, errlen);
    if (st == KDA_OK) (*n)++;
  }
  free(at);
  if (st != KDA_OK) kda_serving_prompts_free(*out, *n), *out = NULL, *n = 0;
  return st;
}

void kda_serving_prompts_free(kda_serving_prompt *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) kda_case_free(&p[i].c);
  free(p);
}

int kda_serving_is_prompt(const kda_case *c) {
  json_t *m = c->manifest_json ? json_loads(c->manifest_json, 0, NULL) : NULL;
  json_t *gi = m ? json_object_get(m, "generator_info") : NULL;
  int yes = json_is_object(gi) && json_is_object(json_object_get(gi, "serving"));
  json_decref(m);
  return yes;
}

/* {"serving": {"case": ID, "check": "resume"|"decode"|"spec"|"causal-qv"|"causal-gkb",
 * "P": P}} (P null for the decode cut): the generator_info of an exported prompt. */
char *kda_serving_prompt_info(const kda_case *c, const kda_serving_prompt *sp) {
  const char *id = c->id && c->id[0] ? c->id : "case";
  const char *dot = strrchr(sp->c.id, '.');
  const char *check = sp->kind == KDA_PROMPT_RESUME ? (sp->P == KDA_SERVING_DECODE ? "decode" : "resume")
                      : sp->kind == KDA_PROMPT_SPEC ? "spec"
                      : dot ? dot + 1 : "causal";
  json_t *s = json_pack("{s:s,s:s,s:o}", "case", id, "check", check, "P",
                        sp->P == KDA_SERVING_DECODE ? json_null() : json_integer(sp->P));
  json_t *o = s ? json_pack("{s:o}", "serving", s) : NULL;
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return text;
}

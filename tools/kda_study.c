/* kda_study.c: one head of one case, certified values, ranges (kda trace, kda explore).
 * SPDX-License-Identifier: MIT
 */
#include "kda_study.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_ref.h"
#include "kda_tool.h"

#if defined(__has_include)
#if __has_include("kda_mpfr.h")
#include "kda_mpfr.h"
#define KDA_STUDY_HAVE_MPFR 1
#endif
#endif
#ifndef KDA_STUDY_HAVE_MPFR
#define KDA_STUDY_HAVE_MPFR 0
#endif

int kda_study_open(const char *sub, const char *path, int64_t n, int64_t hv, kda_study *s) {
  memset(s, 0, sizeof *s);
  char err[KDA_ERRLEN];
  if (kda_case_load(path, &s->c, err, sizeof err) != KDA_OK) return kda_tool_fail(sub, "%s", err);
  const kda_problem *p = &s->c.p;
  const int64_t N = p->N, HV = p->HV;
  if (n < 0 || n >= N || hv < 0 || hv >= HV) {
    kda_case_free(&s->c);
    if (n < 0 || n >= N)
      return kda_tool_fail(sub, "%s: --seq %lld is out of range (the case has N = %lld "
                           "sequences)", path, (long long)n, (long long)N);
    return kda_tool_fail(sub, "%s: --head %lld is out of range (the case has HV = %lld value "
                         "heads)", path, (long long)hv, (long long)HV);
  }
  kda_case_tensors(&s->c, &s->ts);
  s->n = n, s->hv = hv;
  s->h = kda_ref_head(p->head_map, p->H, p->HV, hv);
  s->bos = s->c.cu_seqlens[n], s->eos = s->c.cu_seqlens[n + 1];
  return 0;
}

void kda_study_close(kda_study *s) {
  free(s->cert_o);
  free(s->cert_S);
  kda_case_free(&s->c);
  memset(s, 0, sizeof *s);
}

#if KDA_STUDY_HAVE_MPFR
/* The case again with a checkpoint after every token of the sequence: the MPFR reference then
 * certifies the written state of every step, not only the final one. */
static int certify_mpfr(const char *sub, kda_study *s) {
  const kda_problem *p = &s->c.p;
  const int64_t len = s->eos - s->bos, KV = p->K * p->V;
  kda_problem q = *p;
  q.n_checkpoints = len, q.want_final_state = 0;
  int64_t *cks = malloc((size_t)len * sizeof *cks);
  double *o = malloc((size_t)(p->T * p->HV * p->V) * sizeof *o);
  double *hc = malloc((size_t)(len * p->HV * KV) * sizeof *hc);
  s->cert_o = malloc((size_t)(len * p->V) * sizeof *s->cert_o);
  s->cert_S = malloc((size_t)(len * KV) * sizeof *s->cert_S);
  if (!cks || !o || !hc || !s->cert_o || !s->cert_S) {
    free(cks), free(o), free(hc);
    return kda_tool_fail(sub, "out of memory for the certified values");
  }
  for (int64_t t = 0; t < len; t++) cks[t] = s->bos + t;
  kda_tensors_f64 t = s->ts;
  t.checkpoints = cks, t.o = o, t.ht = NULL, t.hc = hc;
  kda_mpfr_report rep;
  char err[KDA_ERRLEN];
  if (kda_mpfr_forward(&q, &t, NULL, &rep, err, sizeof err) == KDA_OK) {
    for (int64_t k = 0; k < len; k++) {
      memcpy(s->cert_o + k * p->V, o + ((s->bos + k) * p->HV + s->hv) * p->V,
             (size_t)p->V * sizeof *o);
      const double *st = hc + (k * p->HV + s->hv) * KV;
      for (int64_t i = 0; i < p->K; i++)
        for (int64_t j = 0; j < p->V; j++)
          s->cert_S[k * KV + i * p->V + j] =
              st[p->state_layout == KDA_STATE_VK ? j * p->K + i : i * p->V + j];
    }
    s->certified = 1;
    s->method = kda_mpfr_method_name(rep.method);
  } else {
    snprintf(s->note, sizeof s->note, "not certified: %.200s", err);
  }
  free(cks), free(o), free(hc);
  return 0;
}
#endif

int kda_study_certify(const char *sub, kda_study *s, int64_t max_values) {
  const kda_problem *p = &s->c.p;
  if (s->eos == s->bos) return snprintf(s->note, sizeof s->note, "no tokens"), 0;
  const double values = (double)p->T * (double)p->HV * (double)p->K * (double)p->V;
  if (values > (double)max_values)
    return snprintf(s->note, sizeof s->note,
                    "not certified: T HV K V = %.0f is over %lld (only small cases are)",
                    values, (long long)max_values), 0;
#if KDA_STUDY_HAVE_MPFR
  return certify_mpfr(sub, s);
#else
  snprintf(s->note, sizeof s->note, "not certified: the MPFR reference is not built in");
  return 0;
#endif
}

int kda_study_where_option(const char *sub, int c, const char *arg, int64_t *seq, int64_t *head,
                           const char **tokens) {
  if (c == 't') return *tokens = arg, 0;
  if (kda_tool_parse_count(arg, c == 's' ? seq : head))
    return kda_tool_usage(sub, "bad --%s '%s'", c == 's' ? "seq" : "head", arg);
  return 0;
}

int kda_study_parse_range(const char *text, int64_t all, int64_t *a, int64_t *b) {
  const char *colon = strchr(text, ':');
  if (!colon) return -1;
  char left[32];
  size_t nl = (size_t)(colon - text);
  if (nl >= sizeof left) return -1;
  memcpy(left, text, nl);
  left[nl] = 0;
  int64_t x = 0, y = all;
  if (nl && kda_tool_parse_count(left, &x)) return -1;
  if (colon[1] && kda_tool_parse_count(colon + 1, &y)) return -1;
  if (y > all) y = all;
  if (x > y) return -1;
  *a = x, *b = y;
  return 0;
}

int kda_study_digits(double x, double c) {
  if (x == c) return 17;
  if (!isfinite(x) || !isfinite(c) || c == 0.0) return 0;
  const double d = floor(-log10(fabs(x - c) / fabs(c)));
  return d < 0 ? 0 : d > 16 ? 16 : (int)d;
}

void kda_study_json_num(kda_sbuf *b, double x) {
  if (isnan(x)) kda_sbuf_printf(b, "\"nan\"");
  else if (isinf(x)) kda_sbuf_printf(b, x < 0 ? "\"-inf\"" : "\"inf\"");
  else kda_sbuf_printf(b, "%.17g", x);
}

void kda_study_json_str(kda_sbuf *b, const char *s) {
  kda_sbuf_printf(b, "\"");
  for (; s && *s; s++) {
    const unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c < 0x7f && !strchr("\"\\<>&", c)) kda_sbuf_printf(b, "%c", c);
    else kda_sbuf_printf(b, "\\u%04x", c);
  }
  kda_sbuf_printf(b, "\"");
}

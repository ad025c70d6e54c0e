/* kda_problem_sizes.c: a problem's geometry: which inputs its modes read and how many
 * elements each tensor holds (SPEC.md §2.3, §4.1).
 * SPDX-License-Identifier: MIT
 */
#include "kda_problem.h"

#include <stdint.h>
#include <string.h>

#include "kda_internal.h"

/* ---- Which members a problem uses (the same rules as the reference). */
int kda_problem_uses_g(const kda_problem *p) {
  return p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN;
}
int kda_problem_uses_dt_bias(const kda_problem *p) {
  return kda_problem_uses_g(p) && p->gate_mode != KDA_GATE_LOG;
}
int kda_problem_uses_A_log(const kda_problem *p) {
  return kda_problem_uses_dt_bias(p) && p->has_A_log;
}

/* ---- Sizes. */
/* a * b into *out unless the byte size of an 8-byte element array would exceed SIZE_MAX. */
static int mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
  const uint64_t lim = (uint64_t)(SIZE_MAX / 8);
  if (a != 0 && b > lim / a) return 0;
  if (a * b > lim) return 0;
  *out = a * b;
  return 1;
}

static int mul3(uint64_t a, uint64_t b, uint64_t c, uint64_t *out) {
  uint64_t x;
  return mul_ok(a, b, &x) && mul_ok(x, c, out);
}

static int mul4(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t *out) {
  uint64_t x;
  return mul_ok(a, b, &x) && mul3(x, c, d, out);
}

int kda_problem_sizes_get(const kda_problem *p, kda_problem_sizes *s, char *err,
                          size_t errlen) {
  memset(s, 0, sizeof *s);
  if (p->N < 1 || p->T < 0 || p->H < 1 || p->HV < 1 || p->K < 1 || p->V < 1 ||
      p->n_checkpoints < 0)
    return kda_fail(KDA_EINVAL, err, errlen,
                    "invalid shape N=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld C=%lld",
                    (long long)p->N, (long long)p->T, (long long)p->H, (long long)p->HV,
                    (long long)p->K, (long long)p->V, (long long)p->n_checkpoints);
  uint64_t N = (uint64_t)p->N, T = (uint64_t)p->T, H = (uint64_t)p->H, HV = (uint64_t)p->HV;
  uint64_t K = (uint64_t)p->K, V = (uint64_t)p->V, C = (uint64_t)p->n_checkpoints;
  uint64_t GW = (uint64_t)kda_problem_gate_width(p), state = 0, hc = 0;
  int ok = mul3(T, H, K, &s->q) && mul3(T, HV, V, &s->v) && mul_ok(T, HV, &s->beta) &&
           mul3(T, HV, GW, &s->g) && mul_ok(HV, GW, &s->dt_bias) &&
           mul4(N, HV, K, V, &state) && mul4(C, HV, K, V, &hc);
  if (!ok) return kda_fail(KDA_ESHAPE, err, errlen, "shape products overflow the address space");
  s->k = s->q;
  s->o = s->v;
  if (!kda_problem_uses_g(p)) s->g = 0;
  if (!kda_problem_uses_dt_bias(p)) s->dt_bias = 0;
  s->A_log = kda_problem_uses_A_log(p) ? HV : 0;
  s->h0 = p->has_initial_state ? state : 0;
  s->ht = p->want_final_state ? state : 0;
  s->hc = hc;
  s->cu_seqlens = N + 1;
  s->checkpoints = C;
  return KDA_OK;
}

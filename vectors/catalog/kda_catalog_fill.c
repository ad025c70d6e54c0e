/* kda_catalog_fill.c: what the designed-case builders share (kda_catalog_design.c and the L0
 * builders of kda_catalog_l0.c): designed values stored exactly, rounding into a member's
 * precision, and the offset of a state element.
 * SPDX-License-Identifier: MIT
 */
#include <math.h>

#include "kda_catalog_internal.h"

static uint64_t member_count(const kda_case *c, int m) {
  kda_problem_sizes s;
  if (kda_problem_sizes_get(&c->p, &s, NULL, 0) != KDA_OK) return 0;
  switch (m) {
  case KDA_M_Q: return s.q;
  case KDA_M_K: return s.k;
  case KDA_M_V: return s.v;
  case KDA_M_G: return s.g;
  case KDA_M_BETA: return s.beta;
  case KDA_M_A_LOG: return s.A_log;
  case KDA_M_DT_BIAS: return s.dt_bias;
  case KDA_M_H0: return s.h0;
  default: return 0;
  }
}

double kda_catalog_round(const kda_case *c, int m, double x) {
  return kda_case_round(kda_case_member_prec(m, c->input_precision), x);
}

int kda_catalog_fill(kda_case *c, int m, const double *src, uint64_t n, char *err,
                     size_t errlen) {
  double *dst = kda_case_array(c, m);
  const char *id = c->id ? c->id : "";
  if (!dst || member_count(c, m) != n)
    return kda_fail(KDA_EINVAL, err, errlen,
                    "case '%s': design gives %llu values for member '%s', the problem has %llu", id,
                    (unsigned long long)n, kda_case_member_names[m],
                    (unsigned long long)member_count(c, m));
  for (uint64_t i = 0; i < n; i++) {
    if (!isinf(src[i]) && kda_catalog_round(c, m, src[i]) != src[i])
      return kda_fail(KDA_EINVAL, err, errlen,
                      "case '%s': designed value %a of member "
                      "'%s' element %llu is not exact in its precision",
                      id, src[i], kda_case_member_names[m], (unsigned long long)i);
    dst[i] = src[i];
  }
  return KDA_OK;
}

uint64_t kda_catalog_state_at(const kda_problem *p, int64_t n, int64_t hv, int64_t i,
                              int64_t j) {
  const uint64_t base = (uint64_t)((n * p->HV + hv) * p->K * p->V);
  return base + (uint64_t)(p->state_layout == KDA_STATE_VK ? j * p->K + i : i * p->V + j);
}

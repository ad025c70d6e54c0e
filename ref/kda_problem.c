/* kda_problem.c: defaults, validation and mode names of a kda_problem (SPEC.md §2, §4).
 * SPDX-License-Identifier: MIT
 */
#include "kda_problem.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kda_internal.h"

void kda_problem_init(kda_problem *p, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V) {
  memset(p, 0, sizeof *p);
  p->N = 1;
  p->T = T;
  p->H = H;
  p->HV = HV;
  p->K = K;
  p->V = V;
  p->family = KDA_FAMILY_KDA;
  p->gate_mode = KDA_GATE_LOG;
  p->beta_mode = KDA_BETA_PROB;
  p->l2_mode = KDA_L2_OFF;
  p->head_map = KDA_HEADMAP_DIV;
  p->state_layout = KDA_STATE_KV;
  p->want_final_state = 1;
  p->scale = K > 0 ? 1.0 / sqrt((double)K) : 1.0; /* SPEC.md §3.1: default K^-1/2 */
  p->lower_bound = -5.0;
  p->l2_eps = 1e-6;
  p->struct_size = (uint32_t)sizeof *p;
}

int64_t kda_problem_gate_width(const kda_problem *p) {
  switch (p->family) {
  case KDA_FAMILY_KDA: return p->K;
  case KDA_FAMILY_GDN: return 1;
  default: return 0;
  }
}

/* a * b into *out unless it exceeds the largest size_t / 16 (room for an element size). */
static int mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
  const uint64_t lim = (uint64_t)(SIZE_MAX / 16);
  if (a != 0 && b > lim / a) return 0;
  *out = a * b;
  return 1;
}

/* a * b * c into *out, 0 when it overflows. */
static int mul3_ok(int64_t a, int64_t b, int64_t c) {
  uint64_t x;
  return mul_ok((uint64_t)a, (uint64_t)b, &x) && mul_ok(x, (uint64_t)c, &x);
}

/* The largest products of SPEC.md §2.3 fit: T*H*K, T*HV*V, T*HV*K, (N|C)*HV*K*V. */
static int sizes_ok(const kda_problem *p) {
  int64_t nc = p->N > p->n_checkpoints ? p->N : p->n_checkpoints;
  uint64_t kv;
  return mul3_ok(p->T, p->H, p->K) && mul3_ok(p->T, p->HV, p->V) &&
         mul3_ok(p->T, p->HV, p->K) && mul_ok((uint64_t)p->K, (uint64_t)p->V, &kv) &&
         mul3_ok(nc, p->HV, (int64_t)kv);
}

static int modes_ok(const kda_problem *p, char *err, size_t errlen) {
  if (!kda_family_name(p->family))
    return kda_fail(KDA_EINVAL, err, errlen, "invalid family %d", (int)p->family);
  if (!kda_gate_name(p->gate_mode))
    return kda_fail(KDA_EINVAL, err, errlen, "invalid gate mode %d", (int)p->gate_mode);
  if (!kda_beta_name(p->beta_mode))
    return kda_fail(KDA_EINVAL, err, errlen, "invalid beta mode %d", (int)p->beta_mode);
  if (!kda_l2_name(p->l2_mode))
    return kda_fail(KDA_EINVAL, err, errlen, "invalid l2 mode %d", (int)p->l2_mode);
  if (!kda_head_map_name(p->head_map))
    return kda_fail(KDA_EINVAL, err, errlen, "invalid head map %d", (int)p->head_map);
  if (!kda_state_layout_name(p->state_layout))
    return kda_fail(KDA_EINVAL, err, errlen, "invalid state layout %d", (int)p->state_layout);
  return KDA_OK;
}

/* SPEC.md §4.1: the options a gate mode needs. */
static int gate_ok(const kda_problem *p, char *err, size_t errlen) {
  if (kda_problem_gate_width(p) == 0) return KDA_OK;
  if (p->gate_mode == KDA_GATE_SOFTPLUS && !p->has_A_log)
    return kda_fail(KDA_EINVAL, err, errlen, "gate mode softplus needs A_log (has_A_log = 0)");
  if (p->gate_mode == KDA_GATE_LOWER_BOUND &&
      !(p->lower_bound >= -5.0 && p->lower_bound < 0.0))
    return kda_fail(KDA_EINVAL, err, errlen, "lower_bound %.17g is outside [-5, 0)",
                    p->lower_bound);
  return KDA_OK;
}

int kda_problem_check(const kda_problem *p, char *err, size_t errlen) {
  if (!p) return kda_fail(KDA_EINVAL, err, errlen, "problem is NULL");
  /* A problem made by this library's kda_problem_init: a mismatch means a caller compiled
   * against another version of kda_problem.h (or one that never called kda_problem_init). */
  if (p->struct_size != sizeof *p)
    return kda_fail(KDA_EINVAL, err, errlen,
                    "problem struct_size %u is not %u (make problems with kda_problem_init)",
                    (unsigned)p->struct_size, (unsigned)sizeof *p);
  if (p->N < 1 || p->T < 0 || p->H < 1 || p->HV < 1 || p->K < 1 || p->V < 1 ||
      p->n_checkpoints < 0)
    return kda_fail(KDA_EINVAL, err, errlen,
                    "invalid shape N=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld C=%lld "
                    "(need N,H,HV,K,V >= 1 and T,C >= 0)",
                    (long long)p->N, (long long)p->T, (long long)p->H, (long long)p->HV,
                    (long long)p->K, (long long)p->V, (long long)p->n_checkpoints);
  if (p->HV % p->H != 0)
    return kda_fail(KDA_EINVAL, err, errlen, "HV=%lld is not a multiple of H=%lld",
                    (long long)p->HV, (long long)p->H);
  if (!sizes_ok(p))
    return kda_fail(KDA_ESHAPE, err, errlen, "shape products overflow the address space");
  int st = modes_ok(p, err, errlen);
  if (st) return st;
  if (p->has_A_log > 1 || p->has_A_log < 0 || p->has_initial_state < 0 ||
      p->has_initial_state > 1 || p->want_final_state < 0 || p->want_final_state > 1)
    return kda_fail(KDA_EINVAL, err, errlen,
                    "has_A_log, has_initial_state and want_final_state "
                    "must be 0 or 1");
  if (!isfinite(p->scale))
    return kda_fail(KDA_EINVAL, err, errlen, "scale %.17g is not finite", p->scale);
  /* SPEC.md §4.3: eps > 0, so that L2 of the zero vector is the zero vector. */
  if (p->l2_mode != KDA_L2_OFF && !(p->l2_eps > 0.0 && isfinite(p->l2_eps)))
    return kda_fail(KDA_EINVAL, err, errlen, "l2_eps %.17g must be finite and > 0 when l2 is %s",
                    p->l2_eps, kda_l2_name(p->l2_mode));
  if (p->reserved0 != 0 || p->reserved1 != 0)
    return kda_fail(KDA_EINVAL, err, errlen, "reserved0 and reserved1 must be 0");
  return gate_ok(p, err, errlen);
}

int kda_problem_check_index(const kda_problem *p, const int64_t *cu_seqlens,
                            const int64_t *checkpoints, char *err, size_t errlen) {
  if (!cu_seqlens && p->N != 1)
    return kda_fail(KDA_EINVAL, err, errlen, "cu_seqlens is required when N=%lld > 1",
                    (long long)p->N);
  if (cu_seqlens) {
    if (cu_seqlens[0] != 0)
      return kda_fail(KDA_EINVAL, err, errlen, "cu_seqlens[0] = %lld, must be 0",
                      (long long)cu_seqlens[0]);
    for (int64_t n = 0; n < p->N; n++)
      if (cu_seqlens[n + 1] < cu_seqlens[n])
        return kda_fail(KDA_EINVAL, err, errlen, "cu_seqlens decreases at index %lld (%lld < %lld)",
                        (long long)(n + 1), (long long)cu_seqlens[n + 1], (long long)cu_seqlens[n]);
    if (cu_seqlens[p->N] != p->T)
      return kda_fail(KDA_EINVAL, err, errlen, "cu_seqlens[N] = %lld, must equal T = %lld",
                      (long long)cu_seqlens[p->N], (long long)p->T);
  }
  if (p->n_checkpoints > 0 && !checkpoints)
    return kda_fail(KDA_EINVAL, err, errlen, "checkpoints is NULL but n_checkpoints = %lld",
                    (long long)p->n_checkpoints);
  for (int64_t c = 0; c < p->n_checkpoints; c++) {
    if (checkpoints[c] < 0 || checkpoints[c] >= p->T)
      return kda_fail(KDA_EINVAL, err, errlen, "checkpoints[%lld] = %lld is outside [0, T=%lld)",
                      (long long)c, (long long)checkpoints[c], (long long)p->T);
    if (c > 0 && checkpoints[c] <= checkpoints[c - 1])
      return kda_fail(KDA_EINVAL, err, errlen,
                      "checkpoints are not strictly increasing at index %lld", (long long)c);
  }
  return KDA_OK;
}

/* ---- Names.  One table per mode; the value is the index. */
static const char *const family_names[] = {"kda", "gdn", "deltanet", "linear"};
static const char *const gate_names[] = {"log", "softplus", "lower_bound"};
static const char *const beta_names[] = {"prob", "logit", "logit_neg"};
static const char *const l2_names[] = {"off", "fla", "ggml"};
static const char *const head_map_names[] = {"div", "mod"};
static const char *const layout_names[] = {"kv", "vk"};

#define NAME_OF(table, v) \
  ((v) >= 0 && (size_t)(v) < sizeof(table) / sizeof(table[0]) ? (table)[(v)] : NULL)

const char *kda_family_name(int32_t v) { return NAME_OF(family_names, v); }
const char *kda_gate_name(int32_t v) { return NAME_OF(gate_names, v); }
const char *kda_beta_name(int32_t v) { return NAME_OF(beta_names, v); }
const char *kda_l2_name(int32_t v) { return NAME_OF(l2_names, v); }
const char *kda_head_map_name(int32_t v) { return NAME_OF(head_map_names, v); }
const char *kda_state_layout_name(int32_t v) { return NAME_OF(layout_names, v); }

struct mode_kind {
  const char *kind;
  const char *const *names;
  int32_t count;
};

static const struct mode_kind kinds[] = {
    {"family", family_names, 4}, {"gate", gate_names, 3},         {"beta", beta_names, 3},
    {"l2", l2_names, 3},         {"head_map", head_map_names, 2}, {"state_layout", layout_names, 2},
};

int kda_mode_parse(const char *kind, const char *name, int32_t *out) {
  if (!kind || !name) return KDA_EINVAL;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    if (strcmp(kinds[i].kind, kind) != 0) continue;
    for (int32_t v = 0; v < kinds[i].count; v++)
      if (strcmp(kinds[i].names[v], name) == 0) {
        if (out) *out = v;
        return KDA_OK;
      }
    return KDA_EINVAL;
  }
  return KDA_EINVAL;
}

const char *kda_strstatus(int status) {
  switch (status) {
  case KDA_OK: return "ok";
  case KDA_EINVAL: return "invalid argument";
  case KDA_ENOMEM: return "out of memory";
  case KDA_EIO: return "I/O error";
  case KDA_EFORMAT: return "malformed file";
  case KDA_ENOTFOUND: return "not found";
  case KDA_ESHAPE: return "shape mismatch or overflow";
  case KDA_EDTYPE: return "unsupported dtype";
  case KDA_ENONFINITE: return "NaN or Inf where the contract forbids it";
  case KDA_EUNSUPPORTED: return "not supported";
  case KDA_ENOTCERT: return "value could not be certified";
  default: return "unknown status";
  }
}

/* kda_catalog_l0.c: the hand-checkable L0 cases: small dyadic inputs written out in full.
 * SPDX-License-Identifier: MIT
 *
 * Every input is a small dyadic rational (an integer or a few halvings), L2 is off, the scale is
 * 1/2 and every gate is 0 (keep) or -inf (wipe), so every intermediate value of SPEC.md §3.1 is
 * a dyadic rational with few bits: exact in float64, and printable by hand.  kda_golden.c
 * checks this exactness operation by operation when it writes the L0 trace.  Tables are in the
 * canonical layouts of SPEC.md §2.3 (q, k [T][H][K]; v [T][HV][V]; g [T][HV][GW]; beta [T][HV];
 * h0 [N][HV][K][V], or [N][HV][V][K] for layout vk).
 */
#include <math.h>

#include "kda_catalog_internal.h"

#define N_OF(a) ((uint64_t)(sizeof(a) / sizeof((a)[0])))
#define FILL(m, a)                                                                            \
  do {                                                                                        \
    int st_ = kda_catalog_fill(c, (m), (a), N_OF(a), err, errlen);                           \
    if (st_) return st_;                                                                      \
  } while (0)

/* S += b k v^T over three tokens (family linear, K = V = 2). */
int kda_l0_linear_accumulate(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double q[] = {1, 0, 0, 1, 1, 1};
  static const double k[] = {1, 0, 0, 1, 1, 1};
  static const double v[] = {1, 2, 3, -1, 0.5, 0.25};
  static const double beta[] = {1, 0.5, 0.25};
  FILL(KDA_M_Q, q);
  FILL(KDA_M_K, k);
  FILL(KDA_M_V, v);
  FILL(KDA_M_BETA, beta);
  return KDA_OK;
}

/* DeltaNet, unit keys e0, e0, e1 and (1/2, 1/2); b = 1 makes the second write to e0 replace
 * the stored value (S^T e0 = v afterwards). */
int kda_l0_delta_overwrite(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double q[] = {1, 0, 1, 1, 0, 2, 1, -1};
  static const double k[] = {1, 0, 1, 0, 0, 1, 0.5, 0.5};
  static const double v[] = {2, -1, 4, 3, 1, 1, -2, 0.5};
  static const double beta[] = {1, 1, 0.5, 1};
  FILL(KDA_M_Q, q);
  FILL(KDA_M_K, k);
  FILL(KDA_M_V, v);
  FILL(KDA_M_BETA, beta);
  return KDA_OK;
}

/* KDA, K = 3, V = 2: gates 0 or -inf per key channel. */
int kda_l0_decay_wipe(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double q[] = {1, 1, 1, 1, 1, 0, 1, 1, 1, 1, -1, 2};
  static const double k[] = {1, 0, 0, 0, 1, 0, 0.5, 0, 0.5, 1, 1, 1};
  static const double v[] = {1, 2, 3, 4, -1, 0.5, 2, -2};
  static const double g[] = {0, 0, 0, 0, 0, 0, -INFINITY, 0, 0, 0, -INFINITY, 0};
  static const double beta[] = {1, 0.5, 1, 0.25};
  FILL(KDA_M_Q, q);
  FILL(KDA_M_K, k);
  FILL(KDA_M_V, v);
  FILL(KDA_M_G, g);
  FILL(KDA_M_BETA, beta);
  return KDA_OK;
}

/* Three sequences of 2, 0 and 3 tokens, each with its own initial state (K-major here). */
int kda_l0_varlen_h0(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double q[] = {1, 0, 1, 1, 0, 1, 1, -1, 2, 2};
  static const double k[] = {1, 0, 0, 1, 0.5, 0.5, 1, 0, 0, 1};
  static const double v[] = {1, 1, 2, 0, 0, -1, 0.5, 0.5, 4, -4};
  static const double g[] = {0, 0, -INFINITY, 0, 0, 0, 0, -INFINITY, -INFINITY, -INFINITY};
  static const double beta[] = {0.5, 1, 1, 0.5, 0.25};
  static const double h0[] = {1, 0, 0, 1, 2, -1, 0.5, 3, 0, 1, -1, 0};
  FILL(KDA_M_Q, q);
  FILL(KDA_M_K, k);
  FILL(KDA_M_V, v);
  FILL(KDA_M_G, g);
  FILL(KDA_M_BETA, beta);
  FILL(KDA_M_H0, h0);
  return KDA_OK;
}

/* Two q/k heads, four value heads (DeltaNet); the head map comes from the description. */
int kda_l0_grouped(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double q[] = {1, 0, 0, 1, 1, 1, 1, -1};
  static const double k[] = {1, 0, 0, 1, 0, 1, 1, 0};
  static const double v[] = {1, 0, 0, 1, 2, 2, -1, 1, 0.5, 0, 0, 0.5, 1, -1, 2, 0};
  static const double beta[] = {1, 0.5, 1, 0.5, 0.5, 1, 0.25, 1};
  FILL(KDA_M_Q, q);
  FILL(KDA_M_K, k);
  FILL(KDA_M_V, v);
  FILL(KDA_M_BETA, beta);
  return KDA_OK;
}

/* Gated DeltaNet, K = 2, V = 3, layout vk: h0 is stored as S^T with S = [[1,2,0],[0,-1,3]]. */
int kda_l0_gdn_vk(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double q[] = {1, 1, 0, 1, 1, 0};
  static const double k[] = {1, 0, 0, 1, 0.5, 0.5};
  static const double v[] = {1, 0, -1, 2, 2, 2, 0, 1, 0};
  static const double g[] = {0, -INFINITY, 0};
  static const double beta[] = {0.5, 1, 1};
  static const double h0[] = {1, 0, 2, -1, 0, 3};
  FILL(KDA_M_Q, q);
  FILL(KDA_M_K, k);
  FILL(KDA_M_V, v);
  FILL(KDA_M_G, g);
  FILL(KDA_M_BETA, beta);
  FILL(KDA_M_H0, h0);
  return KDA_OK;
}

/* DeltaNet with b = 2 and unit keys: the state's row along k is reflected, -row + 2 v. */
int kda_l0_reflection(kda_case *c, uint64_t seed, char *err, size_t errlen) {
  static const double q[] = {1, 0, 0, 1, 1, 1};
  static const double k[] = {1, 0, 0, 1, 1, 0};
  static const double v[] = {1, 0, 0, 1, 1, 1};
  static const double beta[] = {2, 2, 2};
  static const double h0[] = {1, 2, 3, 4};
  FILL(KDA_M_Q, q);
  FILL(KDA_M_K, k);
  FILL(KDA_M_V, v);
  FILL(KDA_M_BETA, beta);
  FILL(KDA_M_H0, h0);
  return KDA_OK;
}

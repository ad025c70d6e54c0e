/* kda_case_internal.h: what kda_case.c shares with the generator and the catalog (not installed).
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_CASE_INTERNAL_H
#define KDA_CASE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "kda_case.h"

#ifndef KDA_VERSION
#define KDA_VERSION "0.0.0"
#endif

/* Input members in file order (SPEC.md §10.2). */
enum {
  KDA_M_Q, KDA_M_K, KDA_M_V, KDA_M_G, KDA_M_BETA, KDA_M_A_LOG, KDA_M_DT_BIAS,
  KDA_M_CU_SEQLENS, KDA_M_H0, KDA_M_CHECKPOINTS, KDA_M_COUNT
};

/* The member names of the file, indexed by KDA_M_*. */
extern const char *const kda_case_member_names[KDA_M_COUNT];

/* The float array of input member m of c (NULL for the index members and absent ones). */
static inline double *kda_case_array(const kda_case *c, int m) {
  switch (m) {
  case KDA_M_Q: return c->q;
  case KDA_M_K: return c->k;
  case KDA_M_V: return c->v;
  case KDA_M_G: return c->g;
  case KDA_M_BETA: return c->beta;
  case KDA_M_A_LOG: return c->A_log;
  case KDA_M_DT_BIAS: return c->dt_bias;
  case KDA_M_H0: return c->h0;
  default: return NULL;
  }
}

/* 1 when the problem reads g, dt_bias, A_log (SPEC.md §4.1; as the reference decides). */
int kda_case_uses_g(const kda_problem *p);
int kda_case_uses_dt_bias(const kda_problem *p);
int kda_case_uses_A_log(const kda_problem *p);

/* The precision of member m in a case of input precision prec: the input precision, except
 * that the gate parameters A_log and dt_bias are f32 unless the case is f64 (models keep
 * them in f32).  Index members have none (-1). */
int32_t kda_case_member_prec(int member, int32_t prec);
/* x rounded to nearest-even in prec (KDA_PREC_*); f64 returns x. */
double kda_case_round(int32_t prec, double x);

/* The manifest text of case c (kda-case/1), with generator_info taken from extra_json (an
 * object's JSON text) or, when extra_json is NULL, from c->manifest_json when that has one.
 * *out is freed with free().  Returns KDA_OK, KDA_EINVAL (extra_json not an object, a
 * value JSON cannot hold), KDA_ENOMEM. */
int kda_case_manifest_text(const kda_case *c, const char *extra_json, char **out, char *err,
                           size_t errlen);

/* Parses a manifest of len bytes as exactly one JSON value (duplicate keys rejected): any
 * byte after it, a NUL included, is an error.  Returns the value, or NULL with a message
 * naming path in err (the caller's status is KDA_EFORMAT). */
struct json_t;
struct json_t *kda_json_load_exact(const char *path, const char *text, size_t len, char *err,
                                   size_t errlen);

#endif

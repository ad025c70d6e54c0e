/* kda_backend_mpfr.c: the built-in backend `mpfr`, the certified MPFR reference behind the ABI.
 * SPDX-License-Identifier: MIT
 *
 * Every output is the float64 nearest to the exact result, certified by Ziv's strategy
 * (ref/oracle/kda_mpfr.h, SPEC.md §8); it is scored in the fp64 class like ref-f64.  It is slow
 * (minutes on an L1 case), so `kda conform` runs it only when named (kda_registry.c).
 * Parameters: prec=N (first working precision in bits), prec_max=N (highest), proof=0|1
 * (1: accept only values proven by the error bound, SPEC.md §8).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend_mpfr.h"
#include "kda_mpfr.h"
#include "kda_ref.h"

#define PREC_LIMIT ((int64_t)1 << 24) /* kda_mpfr_options' bound on both precisions */

typedef struct mpfr_handle {
  kda_mpfr_options opts;
  char err[KDA_ERRLEN];
} mpfr_handle;

static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* One "key=value" word (n bytes at w) into o. */
static int parse_word(kda_mpfr_options *o, const char *w, size_t n, char *err, uint32_t errlen) {
  char buf[64];
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, w, n);
  buf[n] = 0;
  const char *eq = strchr(buf, '=');
  size_t key = eq ? (size_t)(eq - buf) : n;
  const char *val = eq ? eq + 1 : ""; /* a known key without '=' is a bad value */
  int64_t v;
  if (key == 4 && strncmp(buf, "prec", 4) == 0) {
    if (parse_int(val, 53, PREC_LIMIT, &v) == 0) return o->prec0 = v, KDA_OK;
  } else if (key == 8 && strncmp(buf, "prec_max", 8) == 0) {
    if (parse_int(val, 53, PREC_LIMIT, &v) == 0) return o->prec_max = v, KDA_OK;
  } else if (key == 5 && strncmp(buf, "proof", 5) == 0) {
    if (parse_int(val, 0, 1, &v) == 0) return o->require_proof = (int32_t)v, KDA_OK;
  } else {
    if (errlen)
      snprintf(err, errlen, "unknown parameter '%.*s' (prec=53..%lld, prec_max=53..%lld, proof=0|1)",
               (int)key, buf, (long long)PREC_LIMIT, (long long)PREC_LIMIT);
    return KDA_EINVAL;
  }
  if (errlen)
    snprintf(err, errlen, "bad parameter '%s' (prec=53..%lld, prec_max=53..%lld, proof=0|1)", buf,
             (long long)PREC_LIMIT, (long long)PREC_LIMIT);
  return KDA_EINVAL;
}

static int32_t mpfr_open(const char *params, void **handle, char *err, uint32_t errlen) {
  kda_mpfr_options o;
  kda_mpfr_options_init(&o);
  for (const char *s = params ? params : ""; *s;) {
    while (*s == ' ' || *s == ',') s++;
    size_t n = strcspn(s, " ,");
    if (n && parse_word(&o, s, n, err, errlen) != KDA_OK) return KDA_EINVAL;
    s += n;
  }
  if (o.prec_max < o.prec0) {
    if (errlen)
      snprintf(err, errlen, "bad parameters: prec_max=%lld is below prec=%lld",
               (long long)o.prec_max, (long long)o.prec0);
    return KDA_EINVAL;
  }
  mpfr_handle *h = calloc(1, sizeof *h);
  if (!h) {
    if (errlen) snprintf(err, errlen, "out of memory opening the mpfr backend");
    return KDA_ENOMEM;
  }
  h->opts = o;
  *handle = h;
  return KDA_OK;
}

static void mpfr_close(void *handle) { free(handle); }

/* The MPFR reference runs every valid problem (it may still fail to certify one). */
static int32_t mpfr_supports(void *handle, const kda_problem *p, char *reason, uint32_t len) {
  return KDA_OK;
}

static const char *mpfr_last_error(void *handle) {
  return handle ? ((mpfr_handle *)handle)->err : "";
}

static int32_t mpfr_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  mpfr_handle *h = handle;
  h->err[0] = 0;
  kda_tensors_f64 x = {t->q, t->k, t->v, t->g, t->beta, t->A_log, t->dt_bias, t->h0,
                       t->cu_seqlens, t->checkpoints, t->o, t->ht, t->hc};
  return kda_mpfr_forward(p, &x, &h->opts, NULL, h->err, sizeof h->err);
}

const kda_backend kda_backend_mpfr = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "mpfr",
    .description = "the certified MPFR reference: float64 nearest to the exact result (SPEC.md "
                   "section 8; prec=N prec_max=N proof=0|1)",
    .precision_class = KDA_CLASS_FP64,
    .input_dtype = KDA_BACKEND_DTYPE_F64,
    .output_dtype = KDA_BACKEND_DTYPE_F64,
    .open = mpfr_open,
    .close = mpfr_close,
    .supports = mpfr_supports,
    .forward = mpfr_forward,
    .last_error = mpfr_last_error,
};

/* plugin_half.c: test-only backend plugin with a variant slot and 16-bit buffers (SPEC.md §7.8,
 * §10.3).
 * SPDX-License-Identifier: MIT
 *
 * A correct KDA (plugin_f64.h's float64 forward) on buffers of the types its parameters name:
 *   input=f64|f32|bf16|f16    the q k v g beta type (default f32; A_log dt_bias h0 are float
 *                             for a 16-bit one, kda_backend.h "Element types");
 *   output=f64|f32|bf16|f16   the o type (default f32; ht hc pool float for a 16-bit one);
 *   precision=NAME            the class (fp64 fp32 tf32 bf16 fp16; default: the input's,
 *                             fp32 for f32);
 * and, for the runner's tests, one hostile variant slot each:
 *   variant=crash   a SIGSEGV in variant      variant=hang      never returns
 *   variant=class   returns class 77          variant=dtype     returns input dtype tf32
 *   variant=overrun writes past struct_size   variant=reserved  sets reserved0
 *   variant=fpenv   leaves FE_UPWARD set      variant=eio       returns KDA_EIO
 *   flip=PATH       answers input f32 while the file PATH does not exist (and creates it),
 *                   bf16 once it does: another answer in a restarted worker
 *   crash_forward   forward dies of a SIGSEGV (a restart for the next call)
 * Any other word is KDA_EINVAL, from variant and open alike.  The table declares fp32 and
 * float32 buffers (what a runner without the variant slot uses).  forward widens every input
 * exactly (kda_backend_half.h), computes in float64 and narrows the outputs, so its error is
 * the output type's rounding only; it checks that the tensors' types are its parameters'.
 * Pool calls go through kda_backend_pool.h.  It includes only the plugin headers, as any
 * third-party plugin would.
 */
#include <fenv.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_backend.h"
#include "kda_backend_half.h"
#include "kda_backend_pool.h"
#include "plugin_f64.h"

enum { V_NONE, V_CRASH, V_HANG, V_CLASS, V_DTYPE, V_OVERRUN, V_RESERVED, V_FPENV, V_EIO, V_COUNT };
static const char *const variant_names[V_COUNT] = {"none",    "crash",    "hang",  "class", "dtype",
                                                   "overrun", "reserved", "fpenv", "eio"};

typedef struct hconfig {
  int32_t in, out, cls;
  int variant, crash_forward;
  char flip[256]; /* flip=PATH, "" when not given */
} hconfig;

typedef struct hhandle {
  hconfig cfg;
  char err[256];
} hhandle;

/* "f64" "f32" "bf16" "f16" and the class names "fp64" "fp32" "tf32" "bf16" "fp16". */
static int32_t prec_of(const char *s, size_t n, int is_class) {
  static const char *const file[] = {"f64", "f32", "", "bf16", "f16"};
  static const char *const canon[] = {"fp64", "fp32", "tf32", "bf16", "fp16"};
  for (int32_t i = 0; i < KDA_PRECISION_COUNT; i++)
    if ((strlen(file[i]) == n && file[i][0] && strncmp(s, file[i], n) == 0) ||
        (strlen(canon[i]) == n && strncmp(s, canon[i], n) == 0))
      return !is_class && i == KDA_PRECISION_TF32 ? -1 : i;
  return -1;
}

/* A value word "key=VALUE" of params: VALUE's length, or -1 when s is not that key. */
static long word_value(const char *s, size_t n, const char *key) {
  size_t k = strlen(key);
  return n > k && strncmp(s, key, k) == 0 && s[k] == '=' ? (long)(n - k - 1) : -1;
}

static int32_t parse(const char *params, hconfig *c, char *err, uint32_t errlen) {
  memset(c, 0, sizeof *c);
  c->in = c->out = KDA_PRECISION_FP32, c->cls = -1, c->variant = V_NONE;
  for (const char *s = params ? params : ""; *s;) {
    s += strspn(s, " ,");
    size_t n = strcspn(s, " ,");
    if (!n) break;
    long m;
    int32_t *dst = NULL;
    int is_class = 0;
    const char *val = NULL;
    if ((m = word_value(s, n, "input")) > 0) dst = &c->in, val = s + 6;
    else if ((m = word_value(s, n, "output")) > 0) dst = &c->out, val = s + 7;
    else if ((m = word_value(s, n, "precision")) > 0) dst = &c->cls, val = s + 10, is_class = 1;
    if (dst && (*dst = prec_of(val, (size_t)m, is_class)) >= 0) {
      s += n;
      continue;
    }
    if (n == 13 && strncmp(s, "crash_forward", 13) == 0) {
      c->crash_forward = 1, s += n;
      continue;
    }
    if ((m = word_value(s, n, "flip")) > 0 && (size_t)m < sizeof c->flip) {
      memcpy(c->flip, s + 5, (size_t)m), s += n;
      continue;
    }
    int found = -1;
    if ((m = word_value(s, n, "variant")) > 0)
      for (int v = 0; v < V_COUNT; v++)
        if (strlen(variant_names[v]) == (size_t)m &&
            strncmp(s + 8, variant_names[v], (size_t)m) == 0)
          found = v;
    if (found < 0) {
      if (errlen)
        snprintf(err, errlen, "unknown parameter '%.*s' (input= output= precision= variant=)",
                 (int)(n > 64 ? 64 : n), s);
      return KDA_EINVAL;
    }
    c->variant = found;
    s += n;
  }
  if (c->cls < 0)
    c->cls = c->in == KDA_PRECISION_BF16 || c->in == KDA_PRECISION_FP16 ? c->in
             : c->in == KDA_PRECISION_FP64 ? KDA_PRECISION_FP64 : KDA_PRECISION_FP32;
  return KDA_OK;
}

static int32_t h_variant(const char *params, kda_backend_variant *out, char *err, uint32_t errlen) {
  hconfig c;
  int32_t st = parse(params, &c, err, errlen);
  if (st != KDA_OK) return st;
  out->precision_class = c.cls, out->input_dtype = c.in, out->output_dtype = c.out;
  if (c.flip[0]) {
    FILE *f = fopen(c.flip, "r");
    if (f) out->input_dtype = out->precision_class = KDA_PRECISION_BF16, fclose(f);
    else if ((f = fopen(c.flip, "w"))) fclose(f);
  }
  switch (c.variant) {
    case V_CRASH: {
      volatile uintptr_t nowhere = 16; /* unknown to the compiler: a real store, a SIGSEGV */
      *(int *)nowhere = 1;
      break;
    }
    case V_HANG:
      for (;;) pause();
    case V_CLASS: out->precision_class = 77; break;
    case V_DTYPE: out->input_dtype = KDA_PRECISION_TF32; break;
    case V_OVERRUN: ((volatile unsigned char *)out)[out->struct_size + 3] = 0; break;
    case V_RESERVED: out->reserved0 = 1; break;
    case V_FPENV: fesetround(FE_UPWARD); break;
    case V_EIO: return snprintf(err, errlen, "no such device"), KDA_EIO;
    default: break;
  }
  return KDA_OK;
}

static int32_t h_open(const char *params, void **handle, char *err, uint32_t errlen) {
  hhandle *h = calloc(1, sizeof *h);
  if (!h) return KDA_ENOMEM;
  int32_t st = parse(params, &h->cfg, err, errlen);
  if (st != KDA_OK) return free(h), st;
  *handle = h;
  return KDA_OK;
}

static void h_close(void *h) { free(h); }
static int32_t h_supports(void *h, const kda_problem *p, char *r, uint32_t n) { return KDA_OK; }
static const char *h_last_error(void *h) { return ((hhandle *)h)->err; }

static double rd(int32_t dt, const void *b, size_t i) {
  switch (dt) {
    case KDA_PRECISION_FP64: return ((const double *)b)[i];
    case KDA_PRECISION_FP32: return ((const float *)b)[i];
    case KDA_PRECISION_BF16: return kda_bf16_to_float(((const uint16_t *)b)[i]);
    default: return kda_f16_to_float(((const uint16_t *)b)[i]);
  }
}

static void wr(int32_t dt, void *b, size_t i, double x) {
  switch (dt) {
    case KDA_PRECISION_FP64: ((double *)b)[i] = x; break;
    case KDA_PRECISION_FP32: ((float *)b)[i] = (float)x; break;
    case KDA_PRECISION_BF16: ((uint16_t *)b)[i] = kda_bf16_from_float((float)x); break;
    default: ((uint16_t *)b)[i] = kda_f16_from_float((float)x); break;
  }
}

/* A float64 copy of n elements of b (type dt); NULL b: NULL.  *bad is set on no memory. */
static double *widen(int32_t dt, const void *b, size_t n, int *bad) {
  if (!b) return NULL;
  double *d = malloc((n ? n : 1) * sizeof *d);
  if (!d) return *bad = 1, NULL;
  for (size_t i = 0; i < n; i++) d[i] = rd(dt, b, i);
  return d;
}

/* The ordinary call: float64 copies in, pf_forward, outputs narrowed into t's. */
static int32_t h_plain(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  const int32_t in = t->in_dtype, out = t->out_dtype;
  const int32_t sin = KDA_STATE_DTYPE(in), sout = KDA_STATE_DTYPE(out);
  const int64_t GW = p->family == KDA_FAMILY_KDA ? p->K : p->family == KDA_FAMILY_GDN ? 1 : 0;
  const size_t T = (size_t)p->T, st = (size_t)(p->N * p->HV * p->K * p->V);
  const size_t nq = T * (size_t)(p->H * p->K), nv = T * (size_t)(p->HV * p->V);
  const size_t nc = (size_t)(p->n_checkpoints * p->HV * p->K * p->V);
  int bad = 0;
  double *x[8] = {widen(in, t->q, nq, &bad), widen(in, t->k, nq, &bad), widen(in, t->v, nv, &bad),
                  widen(in, t->g, T * (size_t)(p->HV * GW), &bad),
                  widen(in, t->beta, T * (size_t)p->HV, &bad),
                  widen(sin, t->A_log, (size_t)p->HV, &bad),
                  widen(sin, t->dt_bias, (size_t)(p->HV * GW), &bad), widen(sin, t->h0, st, &bad)};
  double *o = malloc((nv ? nv : 1) * sizeof *o), *ht = t->ht ? malloc((st ? st : 1) * 8) : NULL;
  double *hc = t->hc ? malloc((nc ? nc : 1) * 8) : NULL;
  int32_t rc = KDA_ENOMEM;
  if (!bad && o && (ht || !t->ht) && (hc || !t->hc)) {
    kda_backend_tensors u = *t;
    u.in_dtype = u.out_dtype = KDA_PRECISION_FP64;
    u.q = x[0], u.k = x[1], u.v = x[2], u.g = x[3], u.beta = x[4];
    u.A_log = x[5], u.dt_bias = x[6], u.h0 = x[7], u.o = o, u.ht = ht, u.hc = hc;
    rc = pf_forward(p, &u);
  }
  if (rc == KDA_OK) {
    for (size_t i = 0; i < nv; i++) wr(out, t->o, i, o[i]);
    for (size_t i = 0; ht && i < st; i++) wr(sout, t->ht, i, ht[i]);
    for (size_t i = 0; hc && i < nc; i++) wr(sout, t->hc, i, hc[i]);
  } else {
    snprintf(((hhandle *)handle)->err, sizeof ((hhandle *)handle)->err, "out of memory");
  }
  for (int i = 0; i < 8; i++) free(x[i]);
  free(o), free(ht), free(hc);
  return rc;
}

static int32_t h_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  hhandle *h = handle;
  if (h->cfg.crash_forward) {
    volatile uintptr_t nowhere = 16;
    *(int *)nowhere = 1;
  }
  if (t->in_dtype != h->cfg.in || t->out_dtype != h->cfg.out)
    return snprintf(h->err, sizeof h->err, "buffers of types %d / %d, opened for %d / %d",
                    (int)t->in_dtype, (int)t->out_dtype, (int)h->cfg.in, (int)h->cfg.out),
           KDA_EINVAL;
  if (kda_pool_is_call(t)) return kda_pool_forward(handle, p, t, h_plain, h->err, sizeof h->err);
  return h_plain(handle, p, t);
}

static const kda_backend table = {
    .abi_version = KDA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kda_backend),
    .name = "half",
    .description = "test: a float64 KDA on the buffer types its parameters name (variant slot)",
    .precision_class = KDA_PRECISION_FP32,
    .input_dtype = KDA_PRECISION_FP32,
    .output_dtype = KDA_PRECISION_FP32,
    .open = h_open,
    .close = h_close,
    .supports = h_supports,
    .forward = h_forward,
    .last_error = h_last_error,
    .caps = KDA_CAP_STATE_POOL,
    .variant = h_variant,
};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) { return &table; }

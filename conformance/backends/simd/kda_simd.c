/* kda_simd.c: the `simd` backend: float32 KDA on the CPU with AVX-512, AVX2+FMA or plain C.
 * SPDX-License-Identifier: MIT
 *
 * Every (sequence, value head) is independent (SPEC.md §3.2), and so is every value column j
 * of its state once the per-token coefficients are known (SPEC.md §3.1: the decay a, the
 * normalised key kh, the scaled query qh and beta scale or sum over the key index i only).
 * The backend therefore
 *   1. prepares the coefficients of a segment of at most CHUNK tokens (gate, beta and L2
 *      modes fused here, O(K) work a token), then
 *   2. runs an ISA kernel (kda_simd.h) that streams the segment's tokens past blocks of value
 *      columns of the state, one pass over the block's K rows a token.
 * Work items are (sequence, group of neighbouring value heads, column group); the heads of a
 * group advance together a segment at a time, so that their input rows, neighbours in memory,
 * are read as runs.  Threads take items from a shared counter.  A column's arithmetic is the
 * same whichever item, group, block or thread computes it, so the results are identical bit
 * for bit for every thread count and group size.  Segments end at checkpoints, where the
 * state of that token is stored.
 *
 * Built-in tables: `simd` (params "isa=auto|avx512|avx2|scalar threads=N group=N") and the presets
 * `simd-avx512`, `simd-avx2`, `simd-scalar` (one ISA forced, so `kda conform` scores each).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_backend.h"
#include "kda_backend_pool.h"
#include "kda_simd.h"

#define CHUNK 32          /* tokens a segment at most */
#define MAX_DIM 4096      /* largest K and V the work buffers are sized for */
#define MAX_THREADS 256
#define HEAD_GROUP 8      /* heads a work item advances together, at most (run_segment) */
#define ITEMS_PER_THREAD 2 /* head groups are halved until there are this many items a thread */
#define GROUP_BYTES ((size_t)4 << 20) /* a head group's work buffers, at most */
#define ISA_AUTO (-1)

/* ==== ISAs ==== */

int64_t kda_simd_width(int32_t isa) {
  return isa == KDA_SIMD_ISA_AVX512 ? 32 : isa == KDA_SIMD_ISA_AVX2 ? 16 : 8;
}

const char *kda_simd_isa_name(int32_t isa) {
  static const char *const names[KDA_SIMD_ISA_COUNT] = {"scalar", "avx2", "avx512"};
  return (isa >= 0 && isa < KDA_SIMD_ISA_COUNT) ? names[isa] : NULL;
}

int kda_simd_isa_available(int32_t isa, const char **why) {
  static const char *const none = "";
  *why = none;
  if (isa == KDA_SIMD_ISA_SCALAR) return 1;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  if (isa == KDA_SIMD_ISA_AVX2) {
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
    *why = "avx2 and fma not available on this CPU";
    return 0;
  }
  if (isa == KDA_SIMD_ISA_AVX512) {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
      return 1;
    *why = "avx512f not available on this CPU";
    return 0;
  }
#else
  if (isa == KDA_SIMD_ISA_AVX2 || isa == KDA_SIMD_ISA_AVX512) {
    *why = "not an x86 build";
    return 0;
  }
#endif
  *why = "unknown ISA";
  return 0;
}

int32_t kda_simd_isa_best(void) {
  const char *why;
  if (kda_simd_isa_available(KDA_SIMD_ISA_AVX512, &why)) return KDA_SIMD_ISA_AVX512;
  if (kda_simd_isa_available(KDA_SIMD_ISA_AVX2, &why)) return KDA_SIMD_ISA_AVX2;
  return KDA_SIMD_ISA_SCALAR;
}

static kda_simd_kernel_fn kernel_of(int32_t isa) {
  if (isa == KDA_SIMD_ISA_AVX512) return kda_simd_kernel_avx512;
  if (isa == KDA_SIMD_ISA_AVX2) return kda_simd_kernel_avx2;
  return kda_simd_kernel_scalar;
}

/* ==== Handle and parameters ==== */

typedef struct simd_handle {
  int32_t isa;      /* KDA_SIMD_ISA_*, resolved (auto becomes the best available) */
  int32_t threads;  /* >= 1 */
  int32_t group;    /* heads a work item advances together; 0: chosen by the backend */
  char err[KDA_ERRLEN];
  char reason[KDA_ERRLEN];
} simd_handle;

static int32_t default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int32_t)n;
}

/* Parses one "key=value" word into h. */
static int parse_word(simd_handle *h, const char *w, size_t n, char *err, uint32_t errlen) {
  char buf[64];
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, w, n);
  buf[n] = 0;
  if (strncmp(buf, "isa=", 4) == 0) {
    const char *v = buf + 4;
    if (strcmp(v, "auto") == 0) return h->isa = ISA_AUTO, KDA_OK;
    for (int32_t i = 0; i < KDA_SIMD_ISA_COUNT; i++)
      if (strcmp(v, kda_simd_isa_name(i)) == 0) return h->isa = i, KDA_OK;
  } else if (strncmp(buf, "threads=", 8) == 0) {
    char *end;
    errno = 0;
    long t = strtol(buf + 8, &end, 10);
    if (!errno && end != buf + 8 && !*end && t >= 0 && t <= MAX_THREADS) {
      h->threads = t == 0 ? default_threads() : (int32_t)t;
      return KDA_OK;
    }
  } else if (strncmp(buf, "group=", 6) == 0) {
    char *end;
    errno = 0;
    long g = strtol(buf + 6, &end, 10);
    if (!errno && end != buf + 6 && !*end && g >= 0 && g <= HEAD_GROUP)
      return h->group = (int32_t)g, KDA_OK;
  }
  /* SPEC.md §7.8: an unknown key is an error of its own, never ignored. */
  int known = strncmp(buf, "isa=", 4) == 0 || strncmp(buf, "threads=", 8) == 0 ||
              strncmp(buf, "group=", 6) == 0;
  if (errlen)
    snprintf(err, errlen, "%s parameter '%.*s' (isa=auto|avx512|avx2|scalar, threads=0..%d, "
             "group=0..%d)", known ? "bad" : "unknown", known ? (int)n : (int)strcspn(buf, "="),
             buf, MAX_THREADS, HEAD_GROUP);
  return KDA_EINVAL;
}

static int32_t open_isa(int32_t isa, const char *params, void **handle, char *err,
                        uint32_t errlen) {
  simd_handle *h = calloc(1, sizeof *h);
  if (!h) {
    if (errlen) snprintf(err, errlen, "simd: out of memory opening the backend");
    return KDA_ENOMEM;
  }
  h->isa = isa;
  h->threads = default_threads();
  for (const char *s = params ? params : ""; *s;) {
    while (*s == ' ' || *s == ',') s++;
    size_t n = strcspn(s, " ,");
    if (n && parse_word(h, s, n, err, errlen) != KDA_OK) return free(h), KDA_EINVAL;
    s += n;
  }
  if (h->isa == ISA_AUTO) h->isa = kda_simd_isa_best();
  *handle = h;
  return KDA_OK;
}

static int32_t simd_open(const char *params, void **handle, char *err, uint32_t errlen) {
  return open_isa(ISA_AUTO, params, handle, err, errlen);
}
static int32_t simd_open_avx512(const char *params, void **handle, char *err, uint32_t errlen) {
  return open_isa(KDA_SIMD_ISA_AVX512, params, handle, err, errlen);
}
static int32_t simd_open_avx2(const char *params, void **handle, char *err, uint32_t errlen) {
  return open_isa(KDA_SIMD_ISA_AVX2, params, handle, err, errlen);
}
static int32_t simd_open_scalar(const char *params, void **handle, char *err, uint32_t errlen) {
  return open_isa(KDA_SIMD_ISA_SCALAR, params, handle, err, errlen);
}

static void simd_close(void *handle) { free(handle); }

/* The ISA and thread count open picked (isa=auto resolved), for --list-backends and bench. */
static int32_t simd_describe(void *handle, kda_backend_info *info) {
  const simd_handle *h = handle;
  const char *why;
  snprintf(info->device, sizeof info->device, "CPU");
  snprintf(info->isa, sizeof info->isa, "%s%s", kda_simd_isa_name(h->isa),
           kda_simd_isa_available(h->isa, &why) ? "" : " (not available here)");
  info->threads = h->threads;
  return KDA_OK;
}

static const char *simd_last_error(void *handle) {
  return handle ? ((simd_handle *)handle)->err : "";
}

/* Whether the handle's ISA runs here and the problem fits the work buffers. */
static int32_t why_not(const simd_handle *h, const kda_problem *p, char *reason, uint32_t len) {
  const char *why;
  if (!kda_simd_isa_available(h->isa, &why)) {
    if (len) snprintf(reason, len, "%s", why);
    return KDA_EUNSUPPORTED;
  }
  if (p->K > MAX_DIM || p->V > MAX_DIM) {
    if (len)
      snprintf(reason, len, "K = %lld, V = %lld: the simd backend handles K, V <= %d",
               (long long)p->K, (long long)p->V, MAX_DIM);
    return KDA_EUNSUPPORTED;
  }
  return KDA_OK;
}

static int32_t simd_supports(void *handle, const kda_problem *p, char *reason, uint32_t len) {
  return why_not(handle, p, reason, len);
}

/* ==== Coefficients (SPEC.md §4), in float as the float32 reference computes them. ==== */

/* The elementwise math of the coefficient pass: libm (scalar) or vector (kda_simd_avx2.c,
 * and kda_simd_avx512.c's fused gate and L2 for the AVX-512 ISA). */
typedef struct simd_math {
  void (*exp)(float *x, int64_t n);   /* in place */
  void (*log1p)(float *x, int64_t n); /* in place, x in [0, 1] */
  float (*sumsq)(const float *x, int64_t n);
  void (*scale_div)(const float *x, int64_t n, float d, float mul, float *y);
  void (*gate)(int32_t mode, const float *g, const float *bias, float eA, int32_t use_eA,
               float lb, int64_t n, float *a, float *tmp); /* a = exp(g_eff) */
} simd_math;

typedef struct job {
  const kda_problem *p;
  const kda_backend_tensors *t;
  const float *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0;
  float *o, *ht, *hc;
  int64_t GW, Vp, W, G, cols_per_group; /* gate width; padded V; ISA width; column groups */
  int64_t HG;                           /* value heads an item advances together */
  int64_t n_items;
  int32_t decays, erases, needs_bias, needs_A_log;
  int32_t decode; /* 1: one-token sequences may take run_decode */
  int32_t decode_pf; /* 1: run_decode prefetches the next head's state (AVX-512 ISA) */
  float scale, lower_bound, l2_eps;
  kda_simd_kernel_fn kernel;
  const simd_math *math;
  const float *zeros;  /* [K] zeros: the bias of a gate mode without dt_bias */
  int64_t next;   /* the shared item counter */
} job;

static void exp_libm(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = expf(x[i]);
}
static void log1p_libm(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = log1pf(x[i]);
}
static float sumsq_plain(const float *x, int64_t n) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; i++) ss = ss + x[i] * x[i];
  return ss;
}
static void scale_div_plain(const float *x, int64_t n, float d, float mul, float *y) {
  for (int64_t i = 0; i < n; i++) y[i] = mul * (x[i] / d);
}

static void gate_libm(int32_t mode, const float *g, const float *bias, float eA, int32_t use_eA,
                      float lb, int64_t n, float *a, float *tmp);
static const simd_math math_scalar = {exp_libm, log1p_libm, sumsq_plain, scale_div_plain,
                                      gate_libm};
static const simd_math math_avx2 = {kda_simd_avx2_exp, kda_simd_avx2_log1p, kda_simd_avx2_sumsq,
                                    kda_simd_avx2_scale_div, kda_simd_avx2_gate};
static const simd_math math_avx512 = {kda_simd_avx2_exp, kda_simd_avx2_log1p,
                                      kda_simd_avx512_sumsq, kda_simd_avx512_scale_div,
                                      kda_simd_avx512_gate};

static float sigmoid_f(float y) {
  if (y >= 0.0f) return 1.0f / (1.0f + expf(-y));
  float e = expf(y);
  return e / (1.0f + e);
}

/* SPEC.md §4.3 with the scale: y = mul * (x / norm(x)). */
static void l2_f(const job *J, const float *x, float mul, float *y) {
  const int64_t K = J->p->K;
  if (J->p->l2_mode == KDA_L2_OFF) {
    for (int64_t i = 0; i < K; i++) y[i] = mul * x[i];
    return;
  }
  const float ss = J->math->sumsq(x, K);
  const float d = J->p->l2_mode == KDA_L2_FLA ? sqrtf(ss + J->l2_eps) : fmaxf(sqrtf(ss), J->l2_eps);
  J->math->scale_div(x, K, d, mul, y);
}

/* SPEC.md §4.1 for n gate channels with libm: a = exp(g_eff).  tmp holds n floats of scratch.
 * softplus(y) = max(y, 0) + log1p(exp(-|y|)); sigmoid(z) = 1/(1+e) or e/(1+e), e = exp(-|z|). */
static void gate_libm(int32_t mode, const float *g, const float *bias, float eA, int32_t use_eA,
                      float lb, int64_t n, float *a, float *tmp) {
  for (int64_t c = 0; c < n; c++) {
    float y = g[c];
    if (mode == KDA_GATE_SOFTPLUS) {
      y = y + bias[c];
      y = -(eA * ((y > 0.0f ? y : 0.0f) + log1pf(expf(-fabsf(y)))));
    } else if (mode == KDA_GATE_LOWER_BOUND) {
      y = use_eA ? eA * (y + bias[c]) : y + bias[c];
      const float e = expf(-fabsf(y));
      y = lb * (y >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e));
    }
    a[c] = expf(y);
  }
  (void)tmp;
}

/* qh, kh, a, b of token t for value head hv. */
static void coef_token(const job *J, int64_t t, int64_t hv, float *qh, float *kh, float *a,
                       float *b, float *tmp) {
  const kda_problem *p = J->p;
  const int64_t K = p->K, G = p->HV / p->H;
  const int64_t h = p->head_map == KDA_HEADMAP_MOD ? hv % p->H : hv / G;
  const size_t qk = ((size_t)t * (size_t)p->H + (size_t)h) * (size_t)K;
  l2_f(J, J->q + qk, J->scale, qh);
  l2_f(J, J->k + qk, 1.0f, kh);
  if (J->decays) {
    const float *g = J->g + ((size_t)t * (size_t)p->HV + (size_t)hv) * (size_t)J->GW;
    const float eA = J->needs_A_log ? expf(J->A_log[hv]) : 1.0f;
    J->math->gate(p->gate_mode, g, J->needs_bias ? J->dt_bias + hv * J->GW : J->zeros, eA,
                  J->needs_A_log, J->lower_bound, J->GW, a, tmp);
    for (int64_t i = J->GW; i < K; i++) a[i] = a[0];
  } else {
    for (int64_t i = 0; i < K; i++) a[i] = 1.0f;
  }
  const float beta = J->beta[(size_t)t * (size_t)p->HV + (size_t)hv];
  *b = p->beta_mode == KDA_BETA_LOGIT ? sigmoid_f(beta)
     : p->beta_mode == KDA_BETA_LOGIT_NEG ? 2.0f * sigmoid_f(beta) : beta;
}

/* ==== Work items ==== */

/* One thread's buffers, for a group of up to HG value heads (slot e = head hv0 + e). */
typedef struct workspace {
  int64_t K, Vp;
  float *S;               /* [HG][Vp/W][K][W]: block-major (kda_simd.h) */
  float *qh, *kh, *a, *b; /* [HG][CHUNK][K] x 3, [HG][CHUNK] */
  float *v, *o;           /* [HG][CHUNK][Vp] */
  float *tmp;             /* [K] scratch of the gate */
  const void **pf;        /* [HG * CHUNK * lines a token] prefetch list (token_lines) */
} workspace;

static float *S_of(const workspace *w, int64_t e) { return w->S + e * w->K * w->Vp; }

/* Cache lines token_lines lists for one token, at most. */
static size_t pf_lines(int64_t K, int64_t Vp) { return (size_t)(3 * (K / 16 + 1) + 2 * (Vp / 16 + 1)); }

/* Floats of one head's slot: state, coefficients, b, v and o of a segment. */
static size_t slot_floats(int64_t K, int64_t Vp) {
  return (size_t)K * (size_t)Vp + (size_t)CHUNK * (3 * (size_t)K + 1 + 2 * (size_t)Vp);
}

static size_t ws_floats(int64_t K, int64_t Vp, int64_t HG) {
  const size_t pf = (size_t)(HG * CHUNK) * pf_lines(K, Vp) * sizeof(void *) / sizeof(float);
  return (size_t)HG * slot_floats(K, Vp) + (size_t)K + 64 + pf;
}

static void ws_carve(workspace *w, float *base, int64_t K, int64_t Vp, int64_t HG) {
  w->K = K, w->Vp = Vp;
  w->S = base;
  w->v = w->S + HG * K * Vp;
  w->o = w->v + HG * CHUNK * Vp;
  w->qh = w->o + HG * CHUNK * Vp;
  w->kh = w->qh + HG * CHUNK * K;
  w->a = w->kh + HG * CHUNK * K;
  w->b = w->a + HG * CHUNK * K;
  w->tmp = w->b + HG * CHUNK + 16;
  w->pf = (const void **)(void *)(w->tmp + (K + 15) / 16 * 16 + 16);
}

static size_t state_off(const kda_problem *p, int64_t slot, int64_t hv) {
  return ((size_t)slot * (size_t)p->HV + (size_t)hv) * (size_t)p->K * (size_t)p->V;
}

/* The work state is block-major (kda_simd.h): the block of W columns starting at jb holds its K
 * rows of W floats contiguously at S + jb*K.  These copy columns [j0, j1) (multiples of W)
 * between it and a stored state (either layout); columns past V are zero padding. */
static void load_state(const job *J, float *S, int64_t n, int64_t hv, int64_t j0, int64_t j1) {
  const kda_problem *p = J->p;
  const int64_t K = p->K, V = p->V, W = J->W;
  const float *src = J->h0 ? J->h0 + state_off(p, n, hv) : NULL;
  for (int64_t jb = j0; jb < j1; jb += W) {
    float *blk = S + jb * K;
    const int64_t nv = !src ? 0 : jb + W <= V ? W : V > jb ? V - jb : 0;
    for (int64_t i = 0; i < K; i++) {
      float *row = blk + i * W;
      if (p->state_layout == KDA_STATE_VK)
        for (int64_t c = 0; c < nv; c++) row[c] = src[(size_t)(jb + c) * (size_t)K + (size_t)i];
      else if (nv)
        memcpy(row, src + (size_t)i * (size_t)V + (size_t)jb, (size_t)nv * sizeof *row);
      for (int64_t c = nv; c < W; c++) row[c] = 0.0f;
    }
  }
}

static void store_state(const job *J, const float *S, float *dst, int64_t j0, int64_t j1) {
  const kda_problem *p = J->p;
  const int64_t K = p->K, V = p->V, W = J->W;
  for (int64_t jb = j0; jb < j1 && jb < V; jb += W) {
    const float *blk = S + jb * K;
    const int64_t nv = jb + W <= V ? W : V - jb;
    for (int64_t i = 0; i < K; i++) {
      const float *row = blk + i * W;
      if (p->state_layout == KDA_STATE_VK)
        for (int64_t c = 0; c < nv; c++) dst[(size_t)(jb + c) * (size_t)K + (size_t)i] = row[c];
      else
        memcpy(dst + (size_t)i * (size_t)V + (size_t)jb, row, (size_t)nv * sizeof *row);
    }
  }
}

/* Index of the first checkpoint at or after token t0. */
static int64_t first_checkpoint(const job *J, int64_t t0) {
  int64_t lo = 0, hi = J->p->n_checkpoints;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (J->t->checkpoints[mid] < t0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Appends to pf the cache lines of token t of value head hv (q, k, g, v rows and the o row):
 * the kernel prefetches them while it runs the segment before. */
static int64_t token_lines(const job *J, int64_t t, int64_t hv, const void **pf) {
  const kda_problem *p = J->p;
  const int64_t K = p->K, V = p->V, G = p->HV / p->H, LINE = 16;
  const int64_t h = p->head_map == KDA_HEADMAP_MOD ? hv % p->H : hv / G;
  const size_t qk = ((size_t)t * (size_t)p->H + (size_t)h) * (size_t)K;
  const size_t tv = ((size_t)t * (size_t)p->HV + (size_t)hv) * (size_t)V;
  int64_t n = 0;
  for (int64_t i = 0; i < K; i += LINE) pf[n++] = J->q + qk + i, pf[n++] = J->k + qk + i;
  for (int64_t j = 0; j < V; j += LINE) pf[n++] = J->v + tv + j, pf[n++] = J->o + tv + j;
  if (J->decays) {
    const float *g = J->g + ((size_t)t * (size_t)p->HV + (size_t)hv) * (size_t)J->GW;
    for (int64_t i = 0; i < J->GW; i += LINE) pf[n++] = g + i;
  }
  return n;
}

/* Tokens [t0, t1) of the nh value heads from hv0 of one sequence, columns [j0, j1):
 * coefficients (and v), the kernel of each head, (o).  The per-token work runs token-major
 * over the heads, because the rows of neighbouring heads of one token are neighbours in
 * memory (SPEC.md §10.1: [T][H][K]): the group reads runs of nh rows instead of single rows
 * H*K floats apart, which the hardware prefetchers follow.  When V is a multiple of the
 * block width (Vp = V) the kernels read v from and write o to the caller's rows directly;
 * otherwise through copies padded to Vp columns. */
static void run_segment(const job *J, workspace *w, int64_t hv0, int64_t nh, int64_t t0,
                        int64_t t1, int64_t eos, int64_t j0, int64_t j1) {
  const kda_problem *p = J->p;
  const int64_t K = p->K, V = p->V, Vp = J->Vp, L = t1 - t0, jv = j1 < V ? j1 : V;
  const int64_t CK = CHUNK * K, CV = CHUNK * Vp, ld = p->HV * V;
  const int direct = Vp == V;
  for (int64_t l = 0; l < L; l++) {
    const int64_t t = t0 + l;
    for (int64_t e = 0; e < nh; e++) {
      coef_token(J, t, hv0 + e, w->qh + e * CK + l * K, w->kh + e * CK + l * K,
                 w->a + e * CK + l * K, w->b + e * CHUNK + l, w->tmp);
      if (direct) continue;
      const float *vt = J->v + (size_t)t * (size_t)ld + (size_t)(hv0 + e) * (size_t)V;
      float *vb = w->v + e * CV + l * Vp;
      if (jv > j0) memcpy(vb + j0, vt + j0, (size_t)(jv - j0) * sizeof *vb);
      for (int64_t j = jv > j0 ? jv : j0; j < j1; j++) vb[j] = 0.0f;
    }
  }
  /* the next segment's lines, token-major too; head e's kernel prefetches its share */
  int64_t npf = 0;
  for (int64_t t = t1; t < t1 + CHUNK && t < eos; t++)
    for (int64_t e = 0; e < nh; e++) npf += token_lines(J, t, hv0 + e, w->pf + npf);
  for (int64_t e = 0; e < nh; e++) {
    const int64_t f0 = npf * e / nh, f1 = npf * (e + 1) / nh;
    const size_t row0 = (size_t)t0 * (size_t)ld + (size_t)(hv0 + e) * (size_t)V;
    const kda_simd_seg seg = {K, L, direct ? ld : Vp, direct ? ld : Vp,
                              w->qh + e * CK, w->kh + e * CK, w->a + e * CK, w->b + e * CHUNK,
                              direct ? J->v + row0 : w->v + e * CV,
                              direct ? J->o + row0 : w->o + e * CV, J->erases, 0,
                              w->pf + f0, f1 - f0};
    J->kernel(&seg, S_of(w, e), j0, j1);
  }
  if (direct || jv <= j0) return;
  for (int64_t l = 0; l < L; l++)
    for (int64_t e = 0; e < nh; e++) {
      float *ot = J->o + (size_t)(t0 + l) * (size_t)ld + (size_t)(hv0 + e) * (size_t)V;
      memcpy(ot + j0, w->o + e * CV + l * Vp + j0, (size_t)(jv - j0) * sizeof *ot);
    }
}

/* Decode fast path (J->decode: AVX2 or AVX-512 ISA, K-major state with h0 and ht, V a
 * multiple of 8): a sequence of ONE token without a checkpoint goes from h0 to ht in place
 * of the block-major copy, load, kernel and store (kda_simd_decode_avx2: the same arithmetic
 * per column).  With `next`, the call prefetches head hv+1's h0, the next call's input. */
static void run_decode(const job *J, workspace *w, int64_t n, int64_t hv, int64_t t,
                       int64_t j0, int64_t j1, int next) {
  const kda_problem *p = J->p;
  const int64_t K = p->K, V = p->V, jv = j1 < V ? j1 : V;
  if (jv <= j0) return;
  coef_token(J, t, hv, w->qh, w->kh, w->a, w->b, w->tmp);
  const size_t tv = ((size_t)t * (size_t)p->HV + (size_t)hv) * (size_t)V + (size_t)j0;
  const kda_simd_dec d = {K, V, jv - j0, J->h0 + state_off(p, n, hv) + j0,
                          J->ht + state_off(p, n, hv) + j0, w->qh, w->kh, w->a, w->b[0],
                          J->erases, J->v + tv, J->o + tv, w->o,
                          next ? J->h0 + state_off(p, n, hv + 1) + j0 : NULL};
  kda_simd_decode_avx2(&d);
}

/* Item = (sequence n, group of HG value heads, column group): the whole sequence for those
 * heads and columns, the heads advancing together a segment at a time. */
static void run_item(const job *J, workspace *w, int64_t item) {
  const kda_problem *p = J->p;
  const int64_t NG = (p->HV + J->HG - 1) / J->HG;
  const int64_t grp = item % J->G, hv0 = (item / J->G) % NG * J->HG, n = item / (J->G * NG);
  const int64_t nh = hv0 + J->HG <= p->HV ? J->HG : p->HV - hv0;
  const int64_t j0 = grp * J->cols_per_group;
  int64_t j1 = j0 + J->cols_per_group;
  if (j1 > J->Vp) j1 = J->Vp;
  if (j0 >= j1) return;
  const int64_t bos = J->t->cu_seqlens[n], eos = J->t->cu_seqlens[n + 1];
  int64_t c = first_checkpoint(J, bos);
  if (J->decode && eos - bos == 1 && !(c < p->n_checkpoints && J->t->checkpoints[c] < eos)) {
    for (int64_t e = 0; e < nh; e++)
      run_decode(J, w, n, hv0 + e, bos, j0, j1, J->decode_pf && e + 1 < nh);
    return;
  }
  for (int64_t e = 0; e < nh; e++) load_state(J, S_of(w, e), n, hv0 + e, j0, j1);
  for (int64_t t = bos; t < eos;) {
    int64_t end = eos < t + CHUNK ? eos : t + CHUNK;
    const int at_ck = c < p->n_checkpoints && J->t->checkpoints[c] < end;
    if (at_ck) end = J->t->checkpoints[c] + 1;
    run_segment(J, w, hv0, nh, t, end, eos, j0, j1);
    for (int64_t e = 0; at_ck && e < nh; e++)
      store_state(J, S_of(w, e), J->hc + state_off(p, c, hv0 + e), j0, j1);
    c += at_ck;
    t = end;
  }
  for (int64_t e = 0; p->want_final_state && e < nh; e++)
    store_state(J, S_of(w, e), J->ht + state_off(p, n, hv0 + e), j0, j1);
}

typedef struct worker {
  job *J;
  workspace w;
  pthread_t tid;
  int started;
} worker;

static void *work(void *arg) {
  worker *me = arg;
  for (;;) {
    int64_t item = __atomic_fetch_add(&me->J->next, 1, __ATOMIC_RELAXED);
    if (item >= me->J->n_items) break;
    run_item(me->J, &me->w, item);
  }
  return NULL;
}

/* Heads a work item advances together (run_item): `want` when the handle sets group=N,
 * otherwise HEAD_GROUP, halved while the sequences would give fewer than two items a thread;
 * either way no more than fit GROUP_BYTES of work buffers.  The group changes which work is
 * done together, never a column's arithmetic.  (Measured with `kda bench --params group=N`,
 * docs/simd.md: 8 heads beat 1, 2 and 4 on Zen 3 with 512 KiB of L2 as on the Xeon, although
 * 8 heads' buffers, 1.2 MB at K = V = 128, do not fit the Zen 3 L2: a segment's pass over one
 * head's state from L3 costs little next to its 32 tokens of work.) */
static int64_t head_group(const job *J, int32_t threads, int32_t want) {
  const size_t slot = slot_floats(J->p->K, J->Vp) * sizeof(float);
  int64_t HG = want ? want : HEAD_GROUP;
  while (!want && HG > 1 &&
         J->p->N * ((J->p->HV + HG - 1) / HG) < ITEMS_PER_THREAD * (int64_t)threads)
    HG = (HG + 1) / 2;
  if ((size_t)HG * slot > GROUP_BYTES) HG = (int64_t)(GROUP_BYTES / slot);
  if (HG > J->p->HV) HG = J->p->HV;
  return HG < 1 ? 1 : HG;
}

/* Items: (sequence, head group, column group).  Whole rows of state per item unless there
 * are fewer (sequence, head group) pairs than ITEMS_PER_THREAD a thread; then the columns are
 * split too (in multiples of the ISA width). */
static void plan(job *J, int32_t threads, int32_t group) {
  J->HG = head_group(J, threads, group);
  const int64_t pairs = J->p->N * ((J->p->HV + J->HG - 1) / J->HG), blocks = J->Vp / J->W;
  int64_t G = 1;
  const int64_t want_items = ITEMS_PER_THREAD * (int64_t)threads;
  if (threads > 1 && pairs < want_items) G = (want_items + pairs - 1) / pairs;
  if (G > blocks) G = blocks;
  const int64_t per = (blocks + G - 1) / G;
  J->cols_per_group = per * J->W;
  J->G = (blocks + per - 1) / per;
  J->n_items = pairs * J->G;
}

static int32_t run_threads(simd_handle *h, job *J) {
  int64_t nt = h->threads;
  if (nt > J->n_items) nt = J->n_items;
  if (nt < 1) nt = 1;
  const size_t per = (ws_floats(J->p->K, J->Vp, J->HG) + 15) & ~(size_t)15;
  float *mem = NULL;
  worker *wk = calloc((size_t)nt, sizeof *wk);
  if (!wk || posix_memalign((void **)&mem, 64, per * (size_t)nt * sizeof(float)) != 0) {
    free(wk);
    snprintf(h->err, sizeof h->err, "simd: cannot allocate work buffers for %lld threads",
             (long long)nt);
    return KDA_ENOMEM;
  }
  for (int64_t i = 0; i < nt; i++) {
    wk[i].J = J;
    ws_carve(&wk[i].w, mem + per * (size_t)i, J->p->K, J->Vp, J->HG);
  }
  /* Threads that cannot be created leave their items to the others (the counter is shared). */
  for (int64_t i = 1; i < nt; i++) wk[i].started = pthread_create(&wk[i].tid, NULL, work, &wk[i]) == 0;
  work(&wk[0]);
  for (int64_t i = 1; i < nt; i++)
    if (wk[i].started) pthread_join(wk[i].tid, NULL);
  free(mem);
  free(wk);
  return KDA_OK;
}

static int32_t simd_plain(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  simd_handle *h = handle;
  h->err[0] = 0;
  if (why_not(h, p, h->err, sizeof h->err) != KDA_OK) return KDA_EUNSUPPORTED;
  if (t->in_dtype != KDA_PRECISION_FP32 || t->out_dtype != KDA_PRECISION_FP32) {
    snprintf(h->err, sizeof h->err, "simd: buffers must be float32");
    return KDA_EINVAL;
  }
  if (p->T > 0 && (!t->q || !t->k || !t->v || !t->beta || !t->o)) {
    snprintf(h->err, sizeof h->err, "simd: q, k, v, beta or o is NULL");
    return KDA_EINVAL;
  }
  job J;
  memset(&J, 0, sizeof J);
  J.p = p, J.t = t;
  J.q = t->q, J.k = t->k, J.v = t->v, J.g = t->g, J.beta = t->beta, J.A_log = t->A_log;
  J.dt_bias = t->dt_bias, J.h0 = p->has_initial_state ? t->h0 : NULL;
  J.o = t->o, J.ht = t->ht, J.hc = t->hc;
  J.decays = p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN;
  J.erases = p->family != KDA_FAMILY_LINEAR;
  J.GW = p->family == KDA_FAMILY_KDA ? p->K : J.decays ? 1 : 0;
  J.needs_bias = J.decays && p->gate_mode != KDA_GATE_LOG;
  J.needs_A_log = J.needs_bias && p->has_A_log;
  if ((J.decays && !J.g) || (J.needs_bias && !J.dt_bias) || (J.needs_A_log && !J.A_log) ||
      (p->has_initial_state && !J.h0) || (p->want_final_state && !J.ht) ||
      (p->n_checkpoints > 0 && (!J.hc || !t->checkpoints)) || !t->cu_seqlens) {
    snprintf(h->err, sizeof h->err, "simd: a buffer the problem needs is NULL");
    return KDA_EINVAL;
  }
  J.scale = (float)p->scale, J.lower_bound = (float)p->lower_bound, J.l2_eps = (float)p->l2_eps;
  J.W = kda_simd_width(h->isa);
  J.Vp = (p->V + J.W - 1) / J.W * J.W;
  J.kernel = kernel_of(h->isa);
  J.decode = (h->isa == KDA_SIMD_ISA_AVX2 || h->isa == KDA_SIMD_ISA_AVX512) &&
             p->state_layout == KDA_STATE_KV && J.h0 && p->want_final_state && p->V % 8 == 0;
  /* Measured (docs/simd.md): +15% decode on the AVX-512 Xeon, -7% on Zen 3 with AVX2. */
  J.decode_pf = h->isa == KDA_SIMD_ISA_AVX512;
  J.math = h->isa == KDA_SIMD_ISA_SCALAR ? &math_scalar
         : h->isa == KDA_SIMD_ISA_AVX512 ? &math_avx512 : &math_avx2;
  float *zeros = calloc((size_t)p->K, sizeof *zeros);
  if (!zeros) return snprintf(h->err, sizeof h->err, "simd: out of memory"), KDA_ENOMEM;
  J.zeros = zeros;
  plan(&J, h->threads, h->group);
  int32_t st = run_threads(h, &J);
  free(zeros);
  return st;
}

/* A pool call (kda_backend.h): gathered into h0 and scattered from ht around the plain call
 * (the decode kernel sees an ordinary h0 / ht batch). */
static int32_t simd_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  simd_handle *h = handle;
  if (!kda_pool_is_call(t)) return simd_plain(h, p, t);
  h->err[0] = 0;
  return kda_pool_forward(h, p, t, simd_plain, h->err, sizeof h->err);
}

#define SIMD_TABLE(sym, nm, desc, openfn)                                                     \
  const kda_backend sym = {.abi_version = KDA_BACKEND_ABI_VERSION,                            \
                           .struct_size = sizeof(kda_backend), .name = nm,                    \
                           .description = desc, .precision_class = KDA_PRECISION_FP32,            \
                           .input_dtype = KDA_PRECISION_FP32,                              \
                           .output_dtype = KDA_PRECISION_FP32, .open = openfn,             \
                           .close = simd_close, .supports = simd_supports,                    \
                           .forward = simd_forward, .last_error = simd_last_error,        \
                           .describe = simd_describe, .caps = KDA_CAP_STATE_POOL}

SIMD_TABLE(kda_backend_simd, "simd",
           "float32 KDA, vectorised over value columns (isa=auto|avx512|avx2|scalar threads=N)",
           simd_open);
SIMD_TABLE(kda_backend_simd_avx512, "simd-avx512", "the simd backend with isa=avx512",
           simd_open_avx512);
SIMD_TABLE(kda_backend_simd_avx2, "simd-avx2", "the simd backend with isa=avx2", simd_open_avx2);
SIMD_TABLE(kda_backend_simd_scalar, "simd-scalar", "the simd backend with isa=scalar",
           simd_open_scalar);

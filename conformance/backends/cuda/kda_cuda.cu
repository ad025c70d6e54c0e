/* kda_cuda.cu: the `cuda` backend plugin (libkda_cuda.so): float32 KDA on an NVIDIA GPU.
 * SPDX-License-Identifier: MIT
 *
 * The ABI table of conformance/kda_backend.h (SPEC.md §7.8), version 2: open / supports /
 * forward on host buffers, describe, and device-resident buffers (buffers_create,
 * forward_buffers, buffers_read, buffers_destroy, synchronize) for benchmarks, with the cap
 * KDA_CAP_STATE_POOL (pool calls run in place on a device copy of the pool).  The kernels
 * are in kda_cuda_kernels.cu and kda_cuda_chunk.cu; algo=auto|chunk|recurrent picks between
 * the recurrent and the chunked prefill kernels (kda_cuda_use_chunk).  The variant slot
 * answers the element types of a parameter string: input=bf16|f16 takes 16-bit q, k, v, g,
 * beta buffers (kda_backend.h "Element types"), which every launch widens on the device.
 *
 * CUDA contexts do not survive fork(), and the runner loads a plugin in its parent and calls
 * it in forked children: nothing here touches CUDA before open, so the context is created in
 * the process that calls open (the child).  Without a usable GPU open still succeeds, and
 * supports declines every problem with the reason ("no CUDA device: ..."), so a CPU-only
 * machine scores the plugin as NotSupported instead of failing.
 *
 * Every entry point treats its arguments as hostile: the problem, the tensors' struct_size
 * and dtypes, every pointer the problem needs, cu_seqlens and checkpoints are checked on the
 * host before anything reaches the device, where an index out of range would be a fault.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"
#include "kda_backend_pool.h"
#include "kda_cuda.h"
#include "kda_cuda_chunk.h"

#define ERRLEN 512

typedef struct cuda_handle {
  int32_t device;  /* CUDA device ordinal */
  int32_t ksplit;  /* threads per value column, 0: chosen from the shape */
  int64_t grid;    /* cap on the persistent grid, 0: none */
  int32_t decode;  /* 0: never the decode kernel (param decode=0) */
  int32_t algo;    /* 0 auto, 1 chunk (where the chunked kernels can), 2 recurrent */
  int32_t in_dtype; /* q k v g beta: KDA_PRECISION_FP32, _BF16 or _FP16 (param input=) */
  size_t chunk_cap; /* the chunked kernels' scratch cap, bytes (param scratch_mb=) */
  int32_t ready;   /* 1: the device is set and the stream exists */
  cudaStream_t stream;
  char why[ERRLEN];    /* why the handle cannot run anything (ready == 0) */
  char err[ERRLEN];    /* last_error */
  char reason[ERRLEN];
} cuda_handle;

/* The device copy of one call (buffers_create). */
typedef struct cuda_buffers {
  kda_problem p;
  kda_cuda_dev d;
  kda_cuda_opts o;
  void *mem;            /* one allocation holding every tensor and the scratch */
  int64_t *slices;      /* the chunked kernels' slices (kda_cuda_dev.slices), or NULL */
  size_t off_o, off_ht, off_hc;
  int64_t pool_slots;   /* a pool call's S (its pool is d.ht, in place), or 0 */
} cuda_buffers;

static int32_t say(char *buf, uint32_t len, int32_t st, const char *msg) {
  if (len) snprintf(buf, len, "%s", msg);
  return st;
}

/* ==== Problem and tensor checks ==== */

/* Mode ranges and dimensions (the runner's kda_problem_check, restated: this plugin links
 * nothing of libkda).  Also bounds every dimension by 2^31 and every element count by 2^40
 * (in an order where no product can overflow), so that the size arithmetic below is safe. */
static int32_t check_problem(const kda_problem *p, char *msg, uint32_t len) {
  const int64_t dim = (int64_t)1 << 31, lim = (int64_t)1 << 40;
  if (!p) return say(msg, len, KDA_EINVAL, "cuda: problem is NULL");
  if (p->N < 1 || p->T < 0 || p->H < 1 || p->HV < 1 || p->K < 1 || p->V < 1 ||
      p->n_checkpoints < 0 || p->HV % p->H)
    return say(msg, len, KDA_EINVAL, "cuda: bad dimensions");
  if (p->N > dim || p->T > dim || p->HV > dim || p->K > dim || p->V > dim ||
      p->n_checkpoints > dim || p->T * p->HV > lim || p->T * p->H > lim ||
      p->K * p->V > lim / (p->HV) ||
      (p->N > p->n_checkpoints ? p->N : p->n_checkpoints) > lim / (p->HV * p->K * p->V) ||
      p->T > lim / (p->HV * (p->K > p->V ? p->K : p->V)))
    return say(msg, len, KDA_ESHAPE, "cuda: shape too large");
  if (p->family < 0 || p->family > 3 || p->gate_mode < 0 || p->gate_mode > 2 ||
      p->beta_mode < 0 || p->beta_mode > 2 || p->l2_mode < 0 || p->l2_mode > 2 ||
      p->head_map < 0 || p->head_map > 1 || p->state_layout < 0 || p->state_layout > 1)
    return say(msg, len, KDA_EINVAL, "cuda: bad mode");
  const int decays = p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN;
  if (decays && p->gate_mode == KDA_GATE_SOFTPLUS && !p->has_A_log)
    return say(msg, len, KDA_EINVAL, "cuda: the softplus gate needs A_log");
  return KDA_OK;
}

static int needs_dt_bias(const kda_problem *p) {
  return (p->family == KDA_FAMILY_KDA || p->family == KDA_FAMILY_GDN) &&
         p->gate_mode != KDA_GATE_LOG;
}
static int64_t gate_width(const kda_problem *p) {
  return p->family == KDA_FAMILY_KDA ? p->K : p->family == KDA_FAMILY_GDN ? 1 : 0;
}

/* cu_seqlens: 0, non-decreasing, ends at T; checkpoints: strictly increasing in [0, T).
 * Also the longest sequence, which sizes the kernel's staging. */
static int32_t check_index(const kda_problem *p, const kda_backend_tensors *t, int64_t *max_len,
                           char *msg, uint32_t len) {
  const int64_t *cu = t->cu_seqlens;
  if (!cu) return say(msg, len, KDA_EINVAL, "cuda: cu_seqlens is NULL");
  if (cu[0] != 0 || cu[p->N] != p->T)
    return say(msg, len, KDA_EINVAL, "cuda: cu_seqlens must start at 0 and end at T");
  *max_len = 0;
  for (int64_t n = 0; n < p->N; n++) {
    if (cu[n + 1] < cu[n]) return say(msg, len, KDA_EINVAL, "cuda: cu_seqlens decreases");
    if (cu[n + 1] - cu[n] > *max_len) *max_len = cu[n + 1] - cu[n];
  }
  if (p->n_checkpoints > 0 && !t->checkpoints)
    return say(msg, len, KDA_EINVAL, "cuda: checkpoints is NULL");
  for (int64_t c = 0; c < p->n_checkpoints; c++) {
    const int64_t x = t->checkpoints[c];
    if (x < 0 || x >= p->T || (c > 0 && x <= t->checkpoints[c - 1]))
      return say(msg, len, KDA_EINVAL, "cuda: checkpoints must increase strictly within [0, T)");
  }
  return KDA_OK;
}

/* 1 when t is a pool call (SPEC.md §7.8: the pool fields are present and state_indices set). */
static int is_pool_call(const kda_backend_tensors *t) {
  return KDA_TENSORS_HAS_POOL(t) && t->state_indices != NULL;
}

/* The struct, its dtypes and every pointer the problem needs (inputs; outputs when out). */
static int32_t check_tensors(const kda_problem *p, const kda_backend_tensors *t, int32_t in_dtype,
                             int out, char *msg, uint32_t len) {
  if (!t || t->struct_size < sizeof(kda_backend_tensors))
    return say(msg, len, KDA_EINVAL, "cuda: tensors are NULL or too small");
  if (t->in_dtype != in_dtype || (out && t->out_dtype != KDA_BACKEND_DTYPE_F32)) {
    if (len)
      snprintf(msg, len, "cuda: input buffers must be %s (param input=), outputs float32",
               in_dtype == KDA_PRECISION_BF16   ? "bfloat16"
               : in_dtype == KDA_PRECISION_FP16 ? "binary16"
                                                : "float32");
    return KDA_EINVAL;
  }
  const int T = p->T > 0;
  if ((T && (!t->q || !t->k || !t->v || !t->beta)) || (T && gate_width(p) && !t->g) ||
      (needs_dt_bias(p) && !t->dt_bias) || (needs_dt_bias(p) && p->has_A_log && !t->A_log) ||
      (p->has_initial_state && !t->h0 && !is_pool_call(t)))
    return say(msg, len, KDA_EINVAL, "cuda: an input the problem needs is NULL");
  if (out && ((T && !t->o) || (p->want_final_state && !t->ht && !is_pool_call(t)) ||
              (p->n_checkpoints > 0 && !t->hc)))
    return say(msg, len, KDA_EINVAL, "cuda: an output the problem asks for is NULL");
  return KDA_OK;
}

/* The pool fields of a pool call against kda_backend.h's contract: a bound on the pool's size
 * (its device copy), then kda_backend_pool.h's checks (a pool, no h0 / ht, every index a slot
 * or KDA_PAD_SLOT and no slot named twice), the ones the gather adapter of the built-ins uses. */
static int32_t check_pool(const kda_problem *p, const kda_backend_tensors *t, char *msg, uint32_t len) {
  if (t->pool_slots > ((int64_t)1 << 40) / (p->HV * p->K * p->V))
    return say(msg, len, KDA_ESHAPE, "cuda: pool too large");
  char why[200];
  const int32_t st = kda_pool_validate(p, t, why, sizeof why);
  if (st && len) snprintf(msg, len, "cuda: %s", why);
  return st;
}

/* ==== Handle ==== */

/* The index of s among the n names, or -1. */
static int name_index(const char *s, const char *const *names, int n) {
  for (int a = 0; a < n; a++)
    if (strcmp(s, names[a]) == 0) return a;
  return -1;
}

static int32_t parse_params(cuda_handle *h, const char *params, char *err, uint32_t errlen) {
  for (const char *s = params ? params : ""; *s;) {
    while (*s == ' ' || *s == ',') s++;
    size_t n = strcspn(s, " ,");
    if (!n) break;
    char w[64];
    if (n >= sizeof w) n = sizeof w - 1;
    memcpy(w, s, n);
    w[n] = 0;
    s += strcspn(s, " ,");
    char *end;
    if (strncmp(w, "device=", 7) == 0) {
      long d = strtol(w + 7, &end, 10);
      if (end != w + 7 && !*end && d >= 0 && d < 1024) { h->device = (int32_t)d; continue; }
    } else if (strcmp(w, "decode=0") == 0 || strcmp(w, "decode=1") == 0) {
      h->decode = w[7] == '1';
      continue;
    } else if (strncmp(w, "input=", 6) == 0) {
      static const char *const names[3] = {"f32", "bf16", "f16"};
      static const int32_t types[3] = {KDA_PRECISION_FP32, KDA_PRECISION_BF16, KDA_PRECISION_FP16};
      const int found = name_index(w + 6, names, 3);
      if (found >= 0) { h->in_dtype = types[found]; continue; }
    } else if (strncmp(w, "algo=", 5) == 0) {
      static const char *const names[3] = {"auto", "chunk", "recurrent"};
      const int found = name_index(w + 5, names, 3);
      if (found >= 0) { h->algo = found; continue; }
    } else if (strncmp(w, "grid=", 5) == 0) {
      long g = strtol(w + 5, &end, 10);
      if (end != w + 5 && !*end && g >= 0 && g <= (1L << 24)) { h->grid = g; continue; }
    } else if (strncmp(w, "scratch_mb=", 11) == 0) {
      long m = strtol(w + 11, &end, 10);
      if (end != w + 11 && !*end && m >= 1 && m <= (1L << 24)) { h->chunk_cap = (size_t)m << 20; continue; }
    } else if (strncmp(w, "ksplit=", 7) == 0) {
      long k = strtol(w + 7, &end, 10);
      if (end != w + 7 && !*end && (k == 0 || k == 4 || k == 8 || k == 16)) { h->ksplit = (int32_t)k; continue; }
    }
    if (errlen) snprintf(err, errlen, "cuda: bad parameter '%s' (device=N, ksplit=0|4|8|16, grid=N, decode=0|1, algo=auto|chunk|recurrent, input=f32|bf16|f16, scratch_mb=N)", w);
    return KDA_EINVAL;
  }
  return KDA_OK;
}

/* Finds the device and creates the stream: the first CUDA call of the process. */
static void attach(cuda_handle *h) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    snprintf(h->why, sizeof h->why, "no CUDA device: %s",
             e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return;
  }
  if (h->device >= count) {
    snprintf(h->why, sizeof h->why, "no CUDA device: device=%d, but %d present", h->device, count);
    return;
  }
  int major = 0;
  e = cudaSetDevice(h->device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, h->device);
  if (e == cudaSuccess && major < 9) {
    snprintf(h->why, sizeof h->why, "CUDA device %d has compute capability %d.x; the cuda "
             "backend is built for 9.0 (sm_90a, compute_90)", h->device, major);
    return;
  }
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    snprintf(h->why, sizeof h->why, "no CUDA device: %s", cudaGetErrorString(e));
    return;
  }
  h->ready = 1;
}

static int32_t cuda_open(const char *params, void **handle, char *err, uint32_t errlen) {
  if (!handle) return say(err, errlen, KDA_EINVAL, "cuda: handle pointer is NULL");
  cuda_handle *h = (cuda_handle *)calloc(1, sizeof *h);
  if (!h) return say(err, errlen, KDA_ENOMEM, "cuda: out of memory opening the backend");
  h->decode = 1, h->in_dtype = KDA_PRECISION_FP32, h->chunk_cap = KDA_CUDA_CHUNK_CAP;
  if (parse_params(h, params, err, errlen) != KDA_OK) return free(h), KDA_EINVAL;
  attach(h);
  *handle = h;
  return KDA_OK;
}

static void cuda_close(void *handle) {
  cuda_handle *h = (cuda_handle *)handle;
  if (!h) return;
  if (h->ready) cudaStreamDestroy(h->stream);
  free(h);
}

static const char *cuda_last_error(void *handle) {
  return handle ? ((cuda_handle *)handle)->err : "";
}

static int32_t cuda_supports(void *handle, const kda_problem *p, char *reason, uint32_t len) {
  cuda_handle *h = (cuda_handle *)handle;
  if (!h) return say(reason, len, KDA_EUNSUPPORTED, "cuda: handle is NULL");
  if (!h->ready) return say(reason, len, KDA_EUNSUPPORTED, h->why);
  int32_t st = check_problem(p, reason, len);
  if (st) return say(reason, len, KDA_EUNSUPPORTED, st == KDA_ESHAPE ? "cuda: shape too large"
                                                                     : "cuda: invalid problem");
  char why[ERRLEN];
  if (kda_cuda_why_not(p, h->ksplit, why, sizeof why)) return say(reason, len, KDA_EUNSUPPORTED, why);
  return KDA_OK;
}

/* ==== Device copies ==== */

typedef struct layout {
  size_t q, k, v, g, beta, A_log, dt_bias, h0, cu, ck, o, ht, hc, scratch, total; /* bytes */
} layout;

static size_t up(size_t x) { return (x + 255) / 256 * 256; }

static layout layout_of(const kda_problem *p, int chunked) {
  const size_t f = sizeof(float), T = (size_t)p->T, HV = (size_t)p->HV, K = (size_t)p->K,
               V = (size_t)p->V, st = HV * K * V * f;
  const size_t sz[14] = {T * p->H * K * f, T * p->H * K * f, T * HV * V * f,
                         T * HV * (size_t)gate_width(p) * f, T * HV * f, HV * f,
                         HV * (size_t)gate_width(p) * f, (size_t)p->N * st,
                         ((size_t)p->N + 1) * 8, (size_t)p->n_checkpoints * 8, T * HV * V * f,
                         (size_t)p->N * st, (size_t)p->n_checkpoints * st,
                         kda_cuda_scratch_bytes(p, chunked)};
  size_t off[14], at = 0;
  for (int i = 0; i < 14; i++) off[i] = at, at += up(sz[i]);
  layout L = {off[0], off[1], off[2], off[3], off[4], off[5], off[6],
              off[7], off[8], off[9], off[10], off[11], off[12], off[13], at};
  return L;
}

/* Copies n bytes of host src to device dst (when both are given). */
static cudaError_t put(char *base, size_t off, const void *src, size_t n, cudaStream_t s) {
  if (!src || !n) return cudaSuccess;
  return cudaMemcpyAsync(base + off, src, n, cudaMemcpyHostToDevice, s);
}

static int32_t cuda_err(cuda_handle *h, int32_t st, const char *what, cudaError_t e) {
  snprintf(h->err, sizeof h->err, "cuda: %s: %s", what, cudaGetErrorString(e));
  return st;
}

/* Checks p and t, allocates the device copy and enqueues the input copies. */
static int32_t make_buffers(cuda_handle *h, const kda_problem *p, const kda_backend_tensors *t,
                            cuda_buffers *b) {
  int32_t st = check_problem(p, h->err, sizeof h->err);
  if (!st) st = check_tensors(p, t, h->in_dtype, 0, h->err, sizeof h->err);
  if (!st) st = check_index(p, t, &b->o.max_len, h->err, sizeof h->err);
  if (!st && is_pool_call(t)) st = check_pool(p, t, h->err, sizeof h->err);
  if (st) return st;
  if (!h->ready) return say(h->err, sizeof h->err, KDA_EUNSUPPORTED, h->why);
  if (kda_cuda_why_not(p, h->ksplit, h->err, sizeof h->err)) return KDA_EUNSUPPORTED;
  /* A pool call (SPEC.md §7.8): the indices are checked before anything is written; the pool
   * goes to the device whole, the kernels read and write its slots in place, and the whole
   * pool comes back, so slots no sequence names keep their bits. */
  const int pooled = is_pool_call(t);
  const size_t slot_bytes = (size_t)p->HV * (size_t)p->K * (size_t)p->V * sizeof(float);
  /* The chunk plan (host: it is built from cu_seqlens and checkpoints) and its scratch after
   * the rest of the allocation. */
  const int64_t n_chunks = kda_cuda_chunk_count(p, t->cu_seqlens, t->checkpoints);
  const int chunked = kda_cuda_use_chunk(p, h->algo, b->o.max_len, n_chunks, h->chunk_cap);
  const layout L = layout_of(p, chunked);
  const size_t plan_bytes = chunked ? kda_cuda_plan_ints(p, n_chunks) * sizeof(int32_t) : 0;
  /* The sequences go through the chunk scratch in slices of at most chunk_cap bytes (the
   * same bits: kda_cuda_chunk.h); the scratch holds the largest slice.  b->slices belongs to
   * b from here on: the callers free it, on failure too. */
  int32_t *plan = NULL;
  int64_t n_slices = 0, capacity = 0;
  if (chunked) {
    plan = (int32_t *)malloc(plan_bytes);
    b->slices = (int64_t *)malloc(2 * ((size_t)p->N + 1) * sizeof(int64_t));
    if (!plan || !b->slices) {
      free(plan);
      return say(h->err, sizeof h->err, KDA_ENOMEM, "cuda: out of memory for the chunk plan");
    }
    kda_cuda_chunk_fill(p, t->cu_seqlens, t->checkpoints, plan);
    n_slices = kda_cuda_chunk_slices(p, plan, n_chunks, h->chunk_cap, b->slices, &capacity);
  }
  const size_t off_plan = L.total, off_cs = off_plan + up(plan_bytes);
  const size_t off_pool = off_cs + up(chunked ? kda_cuda_chunk_bytes(p, capacity) : 0);
  const size_t pool_bytes = pooled ? (size_t)t->pool_slots * slot_bytes : 0;
  const size_t off_idx = off_pool + up(pool_bytes);
  /* 16-bit inputs: their patterns after the rest; each launch widens them into L.q .. L.beta */
  const int half = h->in_dtype != KDA_PRECISION_FP32;
  const size_t nqk = (size_t)p->T * (size_t)p->H * (size_t)p->K;
  const size_t nv = (size_t)p->T * (size_t)p->HV * (size_t)p->V;
  const size_t ng = (size_t)p->T * (size_t)p->HV * (size_t)gate_width(p), nb = (size_t)p->T * (size_t)p->HV;
  const size_t off_raw = off_idx + up(pooled ? (size_t)p->N * sizeof(int64_t) : 0);
  const size_t raw_off[5] = {0, up(2 * nqk), 2 * up(2 * nqk), 2 * up(2 * nqk) + up(2 * nv),
                             2 * up(2 * nqk) + up(2 * nv) + up(2 * ng)};
  const size_t total = off_raw + (half ? raw_off[4] + up(2 * nb) : 0);
  cudaError_t e = cudaMalloc(&b->mem, total);
  if (e != cudaSuccess) return free(plan), b->mem = NULL, cuda_err(h, KDA_ENOMEM, "device allocation", e);
  char *m = (char *)b->mem;
  const size_t f = sizeof(float), HV = (size_t)p->HV;
  const size_t GW = (size_t)gate_width(p), st_bytes = HV * (size_t)p->K * (size_t)p->V * f;
  const int dt = needs_dt_bias(p), al = dt && p->has_A_log;
  const cudaStream_t s = h->stream;
  const size_t es = half ? 2 : f; /* q k v g beta: to L.q .. or, 16-bit, to the raw area */
  const size_t at[5] = {half ? off_raw + raw_off[0] : L.q, half ? off_raw + raw_off[1] : L.k,
                        half ? off_raw + raw_off[2] : L.v, half ? off_raw + raw_off[3] : L.g,
                        half ? off_raw + raw_off[4] : L.beta};
  if ((e = put(m, at[0], t->q, nqk * es, s)) || (e = put(m, at[1], t->k, nqk * es, s)) ||
      (e = put(m, at[2], t->v, nv * es, s)) || (e = put(m, at[3], GW ? t->g : NULL, ng * es, s)) ||
      (e = put(m, at[4], t->beta, nb * es, s)) ||
      (e = put(m, L.A_log, al ? t->A_log : NULL, HV * f, s)) ||
      (e = put(m, L.dt_bias, dt ? t->dt_bias : NULL, HV * GW * f, s)) ||
      (e = put(m, L.h0, p->has_initial_state ? t->h0 : NULL, (size_t)p->N * st_bytes, s)) ||
      (e = put(m, L.cu, t->cu_seqlens, ((size_t)p->N + 1) * 8, s)) ||
      (e = put(m, L.ck, t->checkpoints, (size_t)p->n_checkpoints * 8, s)) ||
      (e = put(m, off_plan, plan, plan_bytes, s)) ||
      (e = put(m, off_pool, pooled ? t->pool : NULL, pool_bytes, s)) ||
      (e = put(m, off_idx, pooled ? t->state_indices : NULL, (size_t)p->N * sizeof(int64_t), s)) ||
      (e = cudaStreamSynchronize(s))) {
    free(plan);
    cudaFree(b->mem);
    b->mem = NULL;
    return cuda_err(h, KDA_EIO, "copy to the device", e);
  }
  free(plan); /* copied: the stream was synchronised */
  b->p = *p;
  b->o.ksplit = h->ksplit;
  b->o.max_grid = h->grid;
  b->o.no_decode = !h->decode;
  kda_cuda_dev *d = &b->d;
  d->q = (const float *)(m + L.q), d->k = (const float *)(m + L.k);
  d->v = (const float *)(m + L.v), d->g = GW ? (const float *)(m + L.g) : NULL;
  d->beta = (const float *)(m + L.beta), d->A_log = al ? (const float *)(m + L.A_log) : NULL;
  d->dt_bias = dt ? (const float *)(m + L.dt_bias) : NULL;
  d->h0 = p->has_initial_state ? (const float *)(m + L.h0) : NULL;
  d->cu_seqlens = (const int64_t *)(m + L.cu);
  d->checkpoints = p->n_checkpoints ? (const int64_t *)(m + L.ck) : NULL;
  d->o = (float *)(m + L.o), d->ht = (float *)(m + L.ht), d->hc = (float *)(m + L.hc);
  d->scratch = m + L.scratch;
  d->plan = chunked ? (const int32_t *)(m + off_plan) : NULL;
  if (half) {
    d->raw_dtype = h->in_dtype;
    d->raw_q = (const uint16_t *)(m + at[0]), d->raw_k = (const uint16_t *)(m + at[1]);
    d->raw_v = (const uint16_t *)(m + at[2]), d->raw_g = GW ? (const uint16_t *)(m + at[3]) : NULL;
    d->raw_beta = (const uint16_t *)(m + at[4]);
  }
  d->n_chunks = chunked ? n_chunks : 0;
  d->chunk_scratch = chunked ? m + off_cs : NULL;
  d->slices = b->slices, d->n_slices = n_slices, d->scratch_chunks = capacity;
  if (pooled) { /* initial and final states are the pool's slots, read and written in place */
    d->h0 = p->has_initial_state ? (const float *)(m + off_pool) : NULL;
    d->ht = (float *)(m + off_pool);
    d->slots = (const int64_t *)(m + off_idx);
    b->pool_slots = t->pool_slots;
  }
  b->off_o = L.o, b->off_ht = L.ht, b->off_hc = L.hc;
  return KDA_OK;
}

/* Copies the outputs of b into t's host buffers and waits for them. */
static int32_t read_buffers(cuda_handle *h, const cuda_buffers *b, const kda_backend_tensors *t) {
  const kda_problem *p = &b->p;
  int32_t st = check_tensors(p, t, h->in_dtype, 1, h->err, sizeof h->err);
  if (st) return st;
  const size_t f = sizeof(float), st_bytes = (size_t)p->HV * (size_t)p->K * (size_t)p->V * f;
  const size_t no = (size_t)p->T * (size_t)p->HV * (size_t)p->V * f;
  if (b->pool_slots && (!is_pool_call(t) || t->pool_slots != b->pool_slots))
    return say(h->err, sizeof h->err, KDA_EINVAL, "cuda: buffers hold a pool of another size");
  cudaError_t e = cudaSuccess;
  if (no) e = cudaMemcpyAsync(t->o, b->d.o, no, cudaMemcpyDeviceToHost, h->stream);
  if (!e && p->want_final_state && b->pool_slots)
    e = cudaMemcpyAsync(t->pool, b->d.ht, (size_t)b->pool_slots * st_bytes, cudaMemcpyDeviceToHost,
                        h->stream);
  else if (!e && p->want_final_state)
    e = cudaMemcpyAsync(t->ht, b->d.ht, (size_t)p->N * st_bytes, cudaMemcpyDeviceToHost, h->stream);
  if (!e && p->n_checkpoints)
    e = cudaMemcpyAsync(t->hc, b->d.hc, (size_t)p->n_checkpoints * st_bytes,
                        cudaMemcpyDeviceToHost, h->stream);
  if (!e) e = cudaStreamSynchronize(h->stream);
  return e ? cuda_err(h, KDA_EIO, "copy from the device", e) : KDA_OK;
}

static int32_t launch(cuda_handle *h, const cuda_buffers *b) {
  return kda_cuda_launch(&b->p, &b->d, &b->o, h->stream, h->err, sizeof h->err);
}

/* ==== Version 1: forward on host buffers ==== */

static int32_t cuda_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  cuda_handle *h = (cuda_handle *)handle;
  if (!h) return KDA_EINVAL;
  h->err[0] = 0;
  int32_t st = check_problem(p, h->err, sizeof h->err);
  if (!st) st = check_tensors(p, t, h->in_dtype, 1, h->err, sizeof h->err);
  if (st) return st;
  cuda_buffers b;
  memset(&b, 0, sizeof b);
  st = make_buffers(h, p, t, &b);
  if (!st) st = launch(h, &b);
  if (!st) st = read_buffers(h, &b, t);
  if (b.mem) {
    cudaError_t e = cudaStreamSynchronize(h->stream);
    cudaFree(b.mem);
    if (!st && e) st = cuda_err(h, KDA_EIO, "kernel", e);
  }
  free(b.slices);
  return st;
}

/* ==== Version 2 ==== */

static int32_t cuda_describe(void *handle, kda_backend_info *info) {
  cuda_handle *h = (cuda_handle *)handle;
  if (!h || !info || info->struct_size < sizeof(kda_backend_info)) return KDA_EINVAL;
  if (!h->ready) return say(h->err, sizeof h->err, KDA_EUNSUPPORTED, h->why);
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, h->device);
  int clock_khz = 0, mem_khz = 0, bus_bits = 0;
  if (!e) e = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, h->device);
  if (!e) e = cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, h->device);
  if (!e) e = cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, h->device);
  if (e) return cuda_err(h, KDA_EIO, "device properties", e);
  info->is_device = 1;
  snprintf(info->device, sizeof info->device, "%.127s", prop.name);
  snprintf(info->isa, sizeof info->isa, "sm_%d%d", prop.major, prop.minor);
  /* 128 float32 FMA lanes a multiprocessor on sm_90, 2 FLOP an FMA; DDR: 2 transfers a clock. */
  info->peak_flops = 2.0 * 128.0 * prop.multiProcessorCount * clock_khz * 1e3;
  info->peak_bytes_per_s = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0);
  info->threads = 1;
  return KDA_OK;
}

static int32_t cuda_buffers_create(void *handle, const kda_problem *p, const kda_backend_tensors *t,
                                   void **buffers) {
  cuda_handle *h = (cuda_handle *)handle;
  if (!h || !buffers) return KDA_EINVAL;
  cuda_buffers *b = (cuda_buffers *)calloc(1, sizeof *b);
  if (!b) return say(h->err, sizeof h->err, KDA_ENOMEM, "cuda: out of memory");
  int32_t st = make_buffers(h, p, t, b);
  cudaError_t e = st ? cudaSuccess : cudaStreamSynchronize(h->stream);
  if (!st && e) st = cuda_err(h, KDA_EIO, "copy to the device", e);
  if (st) {
    if (b->mem) cudaFree(b->mem);
    free(b->slices), free(b);
    return st;
  }
  *buffers = b;
  return KDA_OK;
}

static int32_t cuda_forward_buffers(void *handle, const kda_problem *p, void *buffers) {
  cuda_handle *h = (cuda_handle *)handle;
  cuda_buffers *b = (cuda_buffers *)buffers;
  if (!h || !b) return KDA_EINVAL;
  if (!p || memcmp(p, &b->p, sizeof *p) != 0)
    return say(h->err, sizeof h->err, KDA_EINVAL, "cuda: problem differs from buffers_create's");
  return launch(h, b);
}

static int32_t cuda_buffers_read(void *handle, void *buffers, const kda_backend_tensors *t) {
  cuda_handle *h = (cuda_handle *)handle;
  if (!h || !buffers) return KDA_EINVAL;
  return read_buffers(h, (const cuda_buffers *)buffers, t);
}

static void cuda_buffers_destroy(void *handle, void *buffers) {
  cuda_buffers *b = (cuda_buffers *)buffers;
  if (!b) return;
  if (b->mem) cudaFree(b->mem); /* cudaFree synchronises with pending work on the memory */
  free(b->slices), free(b);
}

static int32_t cuda_synchronize(void *handle) {
  cuda_handle *h = (cuda_handle *)handle;
  if (!h) return KDA_EINVAL;
  if (!h->ready) return KDA_OK;
  cudaError_t e = cudaStreamSynchronize(h->stream);
  return e ? cuda_err(h, KDA_EIO, "synchronize", e) : KDA_OK;
}

/* The class and element types of a parameter string (SPEC.md §7.8): input=bf16|f16 makes q, k,
 * v, g, beta 16-bit buffers (widened on the device); the class stays fp32 and the outputs,
 * states, A_log and dt_bias float32.  Touches no device. */
static int32_t cuda_variant(const char *params, kda_backend_variant *out, char *err, uint32_t errlen) {
  if (!out || out->struct_size < offsetof(kda_backend_variant, output_dtype) + sizeof(int32_t))
    return say(err, errlen, KDA_EINVAL, "cuda: variant record is NULL or too small");
  cuda_handle h;
  memset(&h, 0, sizeof h);
  h.in_dtype = KDA_PRECISION_FP32;
  if (parse_params(&h, params, err, errlen) != KDA_OK) return KDA_EINVAL;
  out->precision_class = KDA_CLASS_FP32;
  out->input_dtype = h.in_dtype;
  out->output_dtype = KDA_BACKEND_DTYPE_F32;
  return KDA_OK;
}

static const kda_backend cuda_table = {
    KDA_BACKEND_ABI_VERSION,
    sizeof(kda_backend),
    "cuda",
    "float32 KDA on an NVIDIA GPU (sm_90a): recurrent, chunked and decode kernels, state pools; params device=N ksplit=0|4|8|16 grid=N decode=0|1 algo=auto|chunk|recurrent input=f32|bf16|f16 scratch_mb=N",
    KDA_CLASS_FP32,
    KDA_BACKEND_DTYPE_F32,
    KDA_BACKEND_DTYPE_F32,
    0,
    cuda_open,
    cuda_close,
    cuda_supports,
    cuda_forward,
    cuda_last_error,
    cuda_describe,
    cuda_buffers_create,
    cuda_forward_buffers,
    cuda_buffers_read,
    cuda_buffers_destroy,
    cuda_synchronize,
    KDA_CAP_STATE_POOL, /* decode (and prefill) in place on a pool of states */
    0,
    cuda_variant,
};

extern "C" KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return abi_version >= 1 ? &cuda_table : NULL;
}

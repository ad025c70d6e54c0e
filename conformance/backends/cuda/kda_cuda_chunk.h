/* kda_cuda_chunk.h: the chunked prefill kernels' arguments and host helpers (docs/cuda.md).
 * SPDX-License-Identifier: MIT
 *
 * Shared by kda_cuda_kernels.cu (which launches them after the prologue), kda_cuda.cu and
 * bench_cuda.cu (which build the chunk plan on the host).  Not installed.
 *
 * The plan cuts every sequence into chunks of at most KDA_CUDA_CHUNK tokens starting at the
 * sequence's own first token, and ends a chunk after every checkpoint token, so that every
 * stored state (SPEC.md §5) is a state at a chunk's end.  Layout (int32):
 * [n_chunks][4] = {first token, length, checkpoint index or -1, sequence}, then
 * seq_first[N + 1] (the chunks of sequence n are seq_first[n] .. seq_first[n+1]-1).
 */
#ifndef KDA_CUDA_CHUNK_H
#define KDA_CUDA_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDA_CUDA_CHUNK 64   /* tokens a chunk at most */
#define KDA_CUDA_CHUNK_K 128 /* K the chunked kernels hold (smaller K is zero-padded) */
#define KDA_CUDA_CHUNK_VS 32 /* value columns of a scan block (V is zero-padded to a multiple) */

/* Chunks of the plan for these (host) cu_seqlens and checkpoints (validated by the caller). */
int64_t kda_cuda_chunk_count(const kda_problem *p, const int64_t *cu, const int64_t *ck);
/* int32 entries of the plan: 4 * n_chunks + N + 1. */
size_t kda_cuda_plan_ints(const kda_problem *p, int64_t n_chunks);
/* Fills the plan (kda_cuda_plan_ints entries). */
void kda_cuda_chunk_fill(const kda_problem *p, const int64_t *cu, const int64_t *ck, int32_t *plan);
/* Bytes of the chunked kernels' scratch for n_chunks chunks. */
size_t kda_cuda_chunk_bytes(const kda_problem *p, int64_t n_chunks);
/* The default cap on that scratch (the plugin's scratch_mb parameter overrides it). */
#define KDA_CUDA_CHUNK_CAP ((size_t)32 << 30)
/* 1 when the chunked kernels run p: algo 1 (chunk) when they can, 0 (auto) when they can, the
 * sequences are long enough to gain and the longest one's scratch fits in cap bytes, 2
 * (recurrent) never. */
int kda_cuda_use_chunk(const kda_problem *p, int32_t algo, int64_t max_len, int64_t n_chunks,
                       size_t cap);
/* Slices of whole sequences whose chunks' scratch fits in cap bytes (a sequence alone over it
 * is a slice of its own), from the host plan: slices[2 s], slices[2 s + 1] = the first
 * sequence and the first chunk of slice s, for s <= the returned count (the last pair: N and
 * n_chunks); slices holds 2 (N + 1) entries.  *capacity: the chunks the scratch must hold (the
 * largest slice).  Each slice runs as a problem of its own on the same scratch, which changes
 * no bit: every chunk and every sequence's scan are computed alike in any batch. */
int64_t kda_cuda_chunk_slices(const kda_problem *p, const int32_t *plan, int64_t n_chunks, size_t cap,
                              int64_t *slices, int64_t *capacity);

typedef struct kda_cuda_chunk_args {
  int64_t H, HV, K, V, VP, G, N, n_chunks;
  int32_t decays, erases, gate_scalar, head_mod, vk, has_h0, want_ht;
  int32_t phases; /* kda_cuda_opts.phases */
  const float *qh, *kh, *lg, *b, *v, *h0; /* prologue coefficients (lg = g_eff) and inputs */
  /* qk_raw: prep normalizes the raw q and k itself (SPEC.md §4.3, the prologue's formula and
   * order, so the same bits) and qh, kh are not read; l2_mode, scale, l2_eps as the problem's */
  const float *q, *k;
  int32_t qk_raw, l2_mode;
  double scale, l2_eps;
  const int32_t *plan;                    /* device copy of the plan */
  const int64_t *slots;                   /* a state pool's slots (kda_cuda_dev.slots) or NULL */
  float *o, *ht, *hc;
  float *W, *U, *Qs, *Kd, *gC, *M; /* scratch, per (chunk, value head) */
  /* Slices (kda_cuda_chunk_slices): n_slices pairs (first sequence, first chunk) and the
   * sentinel, a host array; NULL: one slice, everything.  The scratch holds scratch_chunks
   * chunks (n_chunks when not sliced); the kernels of a slice index it from the slice's first
   * chunk (cbase) and its sequences from n0. */
  const int64_t *slices;
  int64_t n_slices, scratch_chunks, cbase, n0;
} kda_cuda_chunk_args;

/* Splits the chunk scratch at base into the arrays of a. */
void kda_cuda_chunk_scratch(kda_cuda_chunk_args *a, void *base);
/* Enqueues the two phases (prep; the scan with the outputs) on stream. */
cudaError_t kda_cuda_chunk_run(const kda_cuda_chunk_args *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif

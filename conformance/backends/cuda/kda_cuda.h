/* kda_cuda.h: the device-side API of the CUDA backend, shared by the plugin and the bench.
 * SPDX-License-Identifier: MIT
 *
 * Not installed and not part of libkda: only the .cu files of this folder include it.  Every
 * pointer in kda_cuda_dev is a device pointer to float32 data in SPEC.md §2.3's canonical
 * packed layout (int64 for cu_seqlens and checkpoints).  kda_cuda_launch enqueues the whole
 * call on a stream and returns without waiting.
 */
#ifndef KDA_CUDA_H
#define KDA_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kda_problem.h"

#ifdef __cplusplus
extern "C" { /* plain C names: check_cuda.c asserts that none of them is exported */
#endif

#define KDA_CUDA_MAX_K 256 /* K the kernels' register tiles hold at most (KS * R) */
#define KDA_CUDA_TOKENS 16 /* tokens staged in shared memory a chunk at most */

/* One call's device buffers.  Inputs a problem does not use are NULL (SPEC.md §2.3). */
typedef struct kda_cuda_dev {
  const float *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0;
  const int64_t *cu_seqlens; /* [N + 1], never NULL */
  const int64_t *checkpoints; /* [C] or NULL */
  float *o, *ht, *hc;
  /* Scratch (kda_cuda_scratch_bytes): the per-token coefficients of SPEC.md §4. */
  void *scratch;
  /* The chunked kernels (kda_cuda_chunk.h): the device copy of the chunk plan and their
   * scratch (kda_cuda_chunk_bytes), or NULL and 0: the recurrent kernel runs. */
  const int32_t *plan;
  int64_t n_chunks;
  void *chunk_scratch;
  /* Slices of sequences that take the chunk scratch in turn (kda_cuda_chunk_slices; a host
   * array of n_slices + 1 pairs), and the chunks that scratch holds; slices NULL: one slice
   * and scratch for n_chunks. */
  const int64_t *slices;
  int64_t n_slices, scratch_chunks;
  /* A state pool (SPEC.md §7.8): h0 and ht are the pool, sequence n's state is slot
   * slots[n] (KDA_PAD_SLOT: from zero, final state dropped); NULL: slot n of h0 / ht. */
  const int64_t *slots;
  /* 16-bit inputs (SPEC.md §7.8 "Element types"): raw_dtype KDA_PRECISION_BF16 or _FP16 and
   * the bit patterns of q, k, v, g, beta, which each launch first widens (exactly) into the
   * float arrays above (then scratch of the call); 0: the float arrays are the inputs. */
  int32_t raw_dtype;
  const uint16_t *raw_q, *raw_k, *raw_v, *raw_g, *raw_beta;
} kda_cuda_dev;

/* Options of a launch: ksplit is the number of threads that share one value column's key
 * rows (4, 8 or 16; 0 picks one from the shape); max_len the longest sequence of the call
 * (sizes the staging; <= 1 selects the decode kernel unless no_decode); max_grid caps the persistent grid (0: as many blocks as are resident;
 * tests set a small one so that every block takes many work items). */
typedef struct kda_cuda_opts {
  int32_t ksplit;
  int32_t no_decode; /* 1: never the decode kernel (every sequence <= 1 token, K <= 128) */
  int64_t max_len;
  int64_t max_grid;
  int32_t phases; /* the stages to run: 8 the prologue; chunked: 1 prep, 2 scan (with the outputs), else any
                   * of 7 the kernel; 0: all (bench_cuda times them one by one; results are
                   * only right with all) */
} kda_cuda_opts;

/* Bytes of scratch one call needs (0 when T = 0); chunked: the call runs the chunked kernels
 * (kda_cuda_use_chunk), which need less. */
size_t kda_cuda_scratch_bytes(const kda_problem *p, int chunked);

/* KDA_OK or KDA_EUNSUPPORTED with the reason in why: what the kernels cannot run. */
int kda_cuda_why_not(const kda_problem *p, int32_t ksplit, char *why, size_t len);

/* Enqueues the prologue (coefficients, checkpoint map) and the recurrent kernel on stream.
 * Returns KDA_OK, or a KDA_* status with a one-line message in err. */
int kda_cuda_launch(const kda_problem *p, const kda_cuda_dev *d, const kda_cuda_opts *o,
                    cudaStream_t stream, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif

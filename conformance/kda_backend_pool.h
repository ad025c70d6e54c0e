/* kda_backend_pool.h: a pool call done by gathering and scattering (SPEC.md §7.8, state pools),
 * for backends whose forward takes only h0 / ht: the built-ins and the test plugins.
 * SPDX-License-Identifier: MIT
 *
 * Header-only (static functions) so that a plugin can use it without linking libkda; it needs
 * only kda_backend.h.  kda_pool_forward validates the indices (kda_backend.h's contract), copies
 * each named slot into a temporary h0, runs the backend's own forward on h0 / ht, and writes
 * ht back into the named slots; nothing is written before the indices are accepted, so a
 * rejected call leaves the pool untouched.  Not installed, but C and C++ alike (the CUDA
 * plugin, a C++ file, uses kda_pool_validate; make check-headers compiles it both ways), so
 * allocations are cast explicitly.
 */
#ifndef KDA_BACKEND_POOL_H
#define KDA_BACKEND_POOL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t (*kda_pool_fwd_fn)(void *handle, const kda_problem *p,
                                   const kda_backend_tensors *t);

/* 1 when t is a pool call (the fields are present and state_indices is set). */
static inline int kda_pool_is_call(const kda_backend_tensors *t) {
  return KDA_TENSORS_HAS_POOL(t) && t->state_indices != NULL;
}

/* KDA_OK, or KDA_EINVAL with a message: the pool fields of a pool call against the contract. */
static inline int32_t kda_pool_validate(const kda_problem *p, const kda_backend_tensors *t,
                                        char *err, size_t errlen) {
  if (!t->pool || t->pool_slots < 1 || t->h0 || t->ht)
    return snprintf(err, errlen, "pool call: pool NULL, pool_slots < 1, or h0 / ht given"),
           KDA_EINVAL;
  if (KDA_STATE_DTYPE(t->in_dtype) != KDA_STATE_DTYPE(t->out_dtype)) /* h0 and ht types */
    return snprintf(err, errlen, "pool call: the gather adapter needs one state type in and out"),
           KDA_EINVAL;
  unsigned char *seen = (unsigned char *)calloc((size_t)t->pool_slots, 1);
  if (!seen) return snprintf(err, errlen, "pool call: out of memory"), KDA_ENOMEM;
  int32_t st = KDA_OK;
  for (int64_t n = 0; n < p->N && st == KDA_OK; n++) {
    int64_t s = t->state_indices[n];
    if (s == KDA_PAD_SLOT) continue;
    if (s < 0 || s >= t->pool_slots)
      st = KDA_EINVAL, snprintf(err, errlen, "state_indices[%lld] = %lld outside [0, %lld)",
                                (long long)n, (long long)s, (long long)t->pool_slots);
    else if (seen[s]++)
      st = KDA_EINVAL, snprintf(err, errlen, "state_indices[%lld] = %lld names a slot twice",
                                (long long)n, (long long)s);
  }
  free(seen);
  return st;
}

/* A pool call through fwd (an ordinary forward): see the top of this file. */
static inline int32_t kda_pool_forward(void *handle, const kda_problem *p,
                                       const kda_backend_tensors *t, kda_pool_fwd_fn fwd,
                                       char *err, size_t errlen) {
  int32_t st = kda_pool_validate(p, t, err, errlen);
  if (st != KDA_OK) return st;
  const size_t es = KDA_DTYPE_SIZE(KDA_STATE_DTYPE(t->out_dtype));
  const size_t slot = (size_t)(p->HV * p->K * p->V) * es;
  unsigned char *h0 = (unsigned char *)calloc((size_t)p->N * slot + 1, 1);
  unsigned char *ht = (unsigned char *)malloc((size_t)p->N * slot + 1);
  if (!h0 || !ht) return free(h0), free(ht), snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  const unsigned char *pool = (const unsigned char *)t->pool;
  for (int64_t n = 0; n < p->N; n++)
    if (t->state_indices[n] != KDA_PAD_SLOT)
      memcpy(h0 + (size_t)n * slot, pool + (size_t)t->state_indices[n] * slot, slot);
  kda_backend_tensors u = *t;
  u.struct_size = (uint32_t)offsetof(kda_backend_tensors, state_indices); /* an ordinary call */
  u.h0 = p->has_initial_state ? h0 : NULL;
  u.ht = p->want_final_state ? ht : NULL;
  u.state_indices = NULL, u.pool_slots = 0, u.pool = NULL;
  st = fwd(handle, p, &u);
  if (st == KDA_OK && p->want_final_state)
    for (int64_t n = 0; n < p->N; n++)
      if (t->state_indices[n] != KDA_PAD_SLOT)
        memcpy((unsigned char *)t->pool + (size_t)t->state_indices[n] * slot,
               ht + (size_t)n * slot, slot);
  free(h0), free(ht);
  return st;
}

#ifdef __cplusplus
}
#endif

#endif

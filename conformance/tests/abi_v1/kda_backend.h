/* kda_backend.h: the backend ABI, the one header a KDA backend author needs (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 *
 * A backend is a versioned table of function pointers (struct kda_backend) that the
 * conformance runner calls.  Built-in backends (ref-f64, ref-f32) are tables compiled into
 * libkda; a loadable backend is a shared library that exports exactly one symbol,
 *
 *     const kda_backend *kda_backend_entry(uint32_t abi_version);
 *
 * which returns a pointer to a table with static storage duration (or NULL when it cannot
 * serve the ABI version the runner asks for).  The loader checks the table's abi_version and
 * struct_size before it touches anything else.  The table is APPENDED TO ONLY: a later ABI
 * version adds fields at the end, never changes or removes one, so a runner built for version
 * n reads the version-n prefix of any table whose struct_size is at least that prefix's size.
 *
 * Everything in the ABI is a fixed-width integer, a double, a pointer or a function pointer:
 * no enum, no bool, no size_t.  The problem record is kda_problem of kda_problem.h (installed
 * next to this header), whose fields obey the same rule.
 *
 * Data.  Every tensor is a host buffer in SPEC.md §2.3's canonical packed, token-major,
 * C-order layout (h0, ht and hc in the layout the problem's state_layout names).  A backend
 * declares one element type for its float inputs and one for its float outputs
 * (KDA_BACKEND_DTYPE_F64 or _F32) and the runner converts: inputs are rounded to nearest from
 * the case's float64 values (exact for a case whose input precision the type holds), outputs
 * are widened exactly.  Index arrays (cu_seqlens, checkpoints) are always int64.
 *
 * Contract (a backend that breaks it is scored Fail or Crash):
 *   - A backend never prints, never reads stdin, never calls exit/abort, never installs signal
 *     handlers, and leaves the floating-point environment (rounding mode, exception masks,
 *     flush-to-zero / denormals-are-zero, MXCSR and x87 control words) as it found it.  The
 *     runner compares the environment before and after every call.
 *   - Memory: the runner owns every buffer it passes.  Inputs are read-only; outputs are
 *     written, only within their extent, and are not kept after forward returns.  The handle
 *     returned by open is owned by the backend until close.  Strings returned by the backend
 *     (name, description, last_error) stay valid until the next call on the same handle.
 *   - Threading: the runner calls one handle from one thread at a time.  A backend may use
 *     threads or devices internally but must have finished all work on the outputs, and joined
 *     or parked its threads, before forward returns.  Different handles may be used from
 *     different threads or processes concurrently.
 *   - Processes: the runner may call open, supports, forward and close in a fresh child
 *     process for every case (SPEC.md §7.8): open must not depend on state of another handle,
 *     and a backend must tolerate being killed at any point (SIGKILL on a timeout).
 *   - supports is answered before forward: the runner calls forward only for problems that
 *     supports accepted, and forward may then still return KDA_EUNSUPPORTED.
 */
#ifndef KDA_BACKEND_H
#define KDA_BACKEND_H

#include <stdint.h>
#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDA_BACKEND_ABI_VERSION 1
#define KDA_BACKEND_ENTRY_SYMBOL "kda_backend_entry"

/* ---- Precision classes (SPEC.md §7.2): the accuracy a backend claims and is scored in. */
#define KDA_CLASS_FP64 0      /* float64 everywhere (u = 2^-53) */
#define KDA_CLASS_FP32 1      /* float32 inputs, state, arithmetic and outputs (u = 2^-24) */
#define KDA_CLASS_TF32 2      /* float32 storage, products with 10-bit fractions (u = 2^-11) */
#define KDA_CLASS_BF16 3      /* bfloat16 inputs and outputs, float32 state (u = 2^-8) */
#define KDA_CLASS_FP16 4      /* binary16 inputs and outputs, float32 state (u = 2^-11) */
#define KDA_CLASS_COUNT 5

/* ---- Element types of the float buffers a backend sees. */
#define KDA_BACKEND_DTYPE_F64 0 /* double */
#define KDA_BACKEND_DTYPE_F32 1 /* float */

/* The buffers of one forward call.  Float pointers point at elements of the type named by
 * in_dtype (inputs) and out_dtype (outputs), which equal the backend's declared input_dtype
 * and output_dtype.  Inputs a problem does not use are NULL (g for DeltaNet/linear, A_log
 * when has_A_log is 0, dt_bias for the log gate, h0 when has_initial_state is 0).
 * cu_seqlens is never NULL (N + 1 entries); checkpoints is NULL when n_checkpoints is 0;
 * ht is NULL when want_final_state is 0; hc is NULL when n_checkpoints is 0. */
typedef struct kda_backend_tensors {
  uint32_t struct_size; /* sizeof(kda_backend_tensors) of the runner; appended to only */
  int32_t in_dtype;     /* KDA_BACKEND_DTYPE_* of q k v g beta A_log dt_bias h0 */
  int32_t out_dtype;    /* KDA_BACKEND_DTYPE_* of o ht hc */
  int32_t reserved0;    /* zero */
  const void *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0;
  const int64_t *cu_seqlens;  /* [N + 1] */
  const int64_t *checkpoints; /* [n_checkpoints] */
  void *o;  /* [T, HV, V] */
  void *ht; /* [N, HV, K, V] */
  void *hc; /* [C, HV, K, V] */
} kda_backend_tensors;

typedef struct kda_backend kda_backend;

struct kda_backend {
  /* ---- Version 1. */
  uint32_t abi_version;    /* KDA_BACKEND_ABI_VERSION the table was written for */
  uint32_t struct_size;    /* sizeof(kda_backend) as the backend was compiled */
  const char *name;        /* short name, [a-z0-9._-]+ ("ref-f32"); shown in reports */
  const char *description; /* one line, may be NULL */
  int32_t precision_class; /* KDA_CLASS_*: the class its results are scored in */
  int32_t input_dtype;     /* KDA_BACKEND_DTYPE_* of its float inputs */
  int32_t output_dtype;    /* KDA_BACKEND_DTYPE_* of its float outputs */
  int32_t reserved0;       /* zero */

  /* Creates a handle.  params is a backend-defined string ("" when none is given, never
   * NULL), e.g. "device=0 mutant=transposed_state".  Returns KDA_OK and sets *handle, or a
   * KDA_* error (KDA_EINVAL for bad params, KDA_ENOMEM, KDA_EUNSUPPORTED when the machine
   * lacks what the backend needs) with a one-line message in err (errlen bytes, may be 0). */
  int32_t (*open)(const char *params, void **handle, char *err, uint32_t errlen);
  /* Frees a handle; handle may be NULL. */
  void (*close)(void *handle);
  /* Whether forward can run problem p.  Returns KDA_OK, or KDA_EUNSUPPORTED with a one-line
   * reason in reason (reasonlen bytes).  Must not fail otherwise; p has passed
   * kda_problem_check. */
  int32_t (*supports)(void *handle, const kda_problem *p, char *reason, uint32_t reasonlen);
  /* Runs one call: writes o, and ht / hc when asked.  Returns KDA_OK, KDA_EUNSUPPORTED,
   * KDA_EINVAL (a buffer or option it cannot accept), KDA_ENOMEM or another KDA_* status;
   * on failure last_error describes it and the outputs are unspecified. */
  int32_t (*forward)(void *handle, const kda_problem *p, const kda_backend_tensors *t);
  /* The message of the last failed call on handle (never NULL; "" when none). */
  const char *(*last_error)(void *handle);
  /* Methods above are valid for version 1.  Later versions append here. */
};

/* The size of the version-1 prefix of struct kda_backend. */
#define KDA_BACKEND_V1_SIZE ((uint32_t)sizeof(struct kda_backend))

/* The exported entry of a loadable backend.  abi_version is the runner's
 * KDA_BACKEND_ABI_VERSION; a backend returns a table whose abi_version it can serve to that
 * runner (normally its own), or NULL. */
typedef const kda_backend *(*kda_backend_entry_fn)(uint32_t abi_version);

#if defined(__GNUC__)
#define KDA_BACKEND_EXPORT __attribute__((visibility("default")))
#else
#define KDA_BACKEND_EXPORT
#endif

#ifdef __cplusplus
}
#endif
#endif

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
 * Data.  Every tensor the runner passes is a host buffer in SPEC.md §2.3's canonical packed,
 * token-major, C-order layout (h0, ht and hc in the layout the problem's state_layout names).
 * A backend declares one element type for its float inputs and one for its float outputs
 * (KDA_PRECISION_FP64, _FP32, _BF16 or _FP16: see "Element types" below), in its table or,
 * per parameter string, through its variant slot, and the runner converts: inputs are rounded
 * to nearest-even from the case's float64 values (exact for a case whose input precision the
 * type holds; a 16-bit type is never rounded into: a case whose values it does not hold is
 * NotSupported, SPEC.md §10.3), outputs are widened exactly.  Index arrays (cu_seqlens,
 * checkpoints, state_indices) are always int64.  Version 2 adds optional device-resident
 * copies (buffers_create and the slots after it), created from and read back into such host
 * buffers, and state pools (a pool call reads and writes states in place in slots named by
 * state_indices; only for a backend whose caps has KDA_CAP_STATE_POOL), and the optional
 * backward pass (supports_backward and backward: the gradients of SPEC.md §13 into the
 * buffers of a kda_backend_grads record).
 *
 * The problem.  kda_problem grows by appending too.  Its struct_size (appended in 0.2.0,
 * with ABI 2) is the sizeof(kda_problem) of the runner that filled it, so it covers every
 * field the runner filled.  A backend of ABI >= 2 may read it and treats a field it knows
 * that lies at or past struct_size as absent (at its kda_problem_init default).  A
 * version-1 backend, compiled without struct_size, never looks past KDA_PROBLEM_V1_SIZE and
 * needs nothing there.  A field appended later is set away from its default only for
 * backends whose ABI version knows it.  Backends never write the problem.
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
 *   - Processes (SPEC.md §7.8): the runner runs each backend, with its parameters, in one
 *     persistent worker process that serves many cases, and loads a plugin only there, never
 *     in the runner.  The worker opens one handle per case and closes it at the end of the
 *     case (so open must not depend on the state of another handle); a crash or timeout
 *     kills the worker with its whole process group (children of the backend included), at
 *     any point, with SIGKILL, and the next call starts a fresh worker that loads the plugin
 *     again.  Constructors and kda_backend_entry must therefore be cheap and must not touch
 *     a device: create device contexts (a CUDA context, a stream, a cuBLAS handle) lazily in
 *     open or forward, never in a constructor, where a runtime without a device aborts the
 *     load and the plugin gets no verdict but Crash.
 *   - supports is answered before forward: the runner calls forward only for problems that
 *     supports accepted, and forward may then still return KDA_EUNSUPPORTED.
 */
#ifndef KDA_BACKEND_H
#define KDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "kda_precision.h"
#include "kda_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDA_BACKEND_ABI_VERSION 2
#define KDA_BACKEND_ENTRY_SYMBOL "kda_backend_entry"

/* ---- Precisions: KDA_PRECISION_* of kda_precision.h (SPEC.md §7.2, §10.3) name both the
 * precision class a backend claims and is scored in and the element type of its float
 * buffers (KDA_PRECISION_FP64: double, KDA_PRECISION_FP32: float).  The KDA_CLASS_* and
 * KDA_BACKEND_DTYPE_* names below are aliases kept for the source compatibility of plugins
 * written against 0.1; their values are the ABI's and never change. */
#define KDA_CLASS_FP64 KDA_PRECISION_FP64
#define KDA_CLASS_FP32 KDA_PRECISION_FP32
#define KDA_CLASS_TF32 KDA_PRECISION_TF32
#define KDA_CLASS_BF16 KDA_PRECISION_BF16
#define KDA_CLASS_FP16 KDA_PRECISION_FP16
#define KDA_CLASS_COUNT KDA_PRECISION_COUNT
#define KDA_BACKEND_DTYPE_F64 KDA_PRECISION_FP64
#define KDA_BACKEND_DTYPE_F32 KDA_PRECISION_FP32

/* ---- Element types (SPEC.md §7.8, §10.3).  A buffer of type
 *   KDA_PRECISION_FP64 holds double (IEEE 754 binary64), _FP32 float (binary32);
 *   KDA_PRECISION_BF16 holds uint16_t bfloat16 bit patterns: the upper 16 bits of the binary32
 *     pattern of the value (sign, 8 exponent bits, 7 fraction bits; subnormals down to
 *     2^-133; widen with kda_bf16_to_float of kda_backend_half.h, i.e. bits << 16);
 *   KDA_PRECISION_FP16 holds uint16_t IEEE 754 binary16 bit patterns (sign, 5 exponent bits,
 *     bias 15, 10 fraction bits; subnormals down to 2^-24; kda_f16_to_float).
 * Host byte order, packed (2 bytes an element).  The runner converts float64 to a 16-bit type
 * with one round-to-nearest-even step (never through float32), and only values the type holds
 * exactly reach a backend; cases hold no NaN or infinity (§6.2 rejects such inputs), so a
 * backend need not expect their patterns on input.  It widens 16-bit outputs exactly: a NaN
 * pattern is NaN, 0x7F80 / 0x7C00 are +inf (and they are scored as such).
 * The 16-bit types are the q, k, v, g, beta type (input_dtype) and the o type (output_dtype)
 * only.  State and parameter tensors stay wide: with a 16-bit input_dtype, A_log, dt_bias and
 * h0 are float (the case's member precision of A_log and dt_bias is float32 in bf16 and f16
 * cases, SPEC.md §10.2, and the state is float32, §7.2); with a 16-bit output_dtype, ht, hc
 * and the pool are float.  KDA_STATE_DTYPE names that wide type. */
#define KDA_STATE_DTYPE(dtype) \
  ((dtype) == KDA_PRECISION_FP64 ? KDA_PRECISION_FP64 : KDA_PRECISION_FP32)
/* Bytes of one element of a buffer of type dtype: 8, 4 or 2 (0 for another value). */
#define KDA_DTYPE_SIZE(dtype)                                                       \
  ((dtype) == KDA_PRECISION_FP64   ? 8                                              \
   : (dtype) == KDA_PRECISION_FP32 ? 4                                              \
   : ((dtype) == KDA_PRECISION_BF16 || (dtype) == KDA_PRECISION_FP16) ? 2 : 0)

/* The buffers of one forward call.  Float pointers point at elements of the type named by
 * in_dtype (inputs) and out_dtype (outputs), with the wide-state rule above, which equal the
 * input_dtype and output_dtype the runner holds for the backend's parameters (its variant's,
 * else the table's).  A backend checks them: a runner that predates the variant slot passes
 * the table's types whatever the parameters.  Inputs a problem does not use are NULL (g for
 * DeltaNet/linear, A_log when has_A_log is 0, dt_bias for the log gate, h0 when
 * has_initial_state is 0).
 * cu_seqlens is never NULL (N + 1 entries); checkpoints is NULL when n_checkpoints is 0;
 * ht is NULL when want_final_state is 0; hc is NULL when n_checkpoints is 0. */
typedef struct kda_backend_tensors {
  uint32_t struct_size; /* sizeof(kda_backend_tensors) of the runner; appended to only */
  int32_t in_dtype;     /* KDA_PRECISION_*: type of q k v g beta (and, when wide, of A_log
                           dt_bias h0; float when in_dtype is 16-bit) */
  int32_t out_dtype;    /* KDA_PRECISION_*: type of o (and, when wide, of ht hc pool; float
                           when out_dtype is 16-bit) */
  int32_t reserved0;    /* zero */
  const void *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0;
  const int64_t *cu_seqlens;  /* [N + 1] */
  const int64_t *checkpoints; /* [n_checkpoints] */
  void *o;  /* [T, HV, V] */
  void *ht; /* [N, HV, K, V] */
  void *hc; /* [C, HV, K, V] */
  /* ---- Appended in ABI version 2 (SPEC.md §7.8, state pools).  Present when struct_size
   * covers them (KDA_TENSORS_HAS_POOL); the runner sets them only for a backend whose table
   * has caps with KDA_CAP_STATE_POOL, and otherwise leaves them NULL / 0.
   * state_indices NULL: an ordinary call (h0 / ht as above; pool NULL, pool_slots 0).
   * state_indices non-NULL: a POOL CALL.  pool holds pool_slots (S >= 1) states
   * [S, HV, K, V] (in the problem's state_layout, element type KDA_STATE_DTYPE(out_dtype)),
   * h0 and ht are NULL, and sequence n uses slot s = state_indices[n]:
   *   - 0 <= s < S: it starts from slot s when has_initial_state is 1 (from zero when 0) and,
   *     when want_final_state is 1, writes its final state back into slot s, in place;
   *   - s == KDA_PAD_SLOT (-1): a padding entry: the sequence's slot is none, it starts from
   *     zero and its final state is discarded (its rows of o are computed as usual);
   *   - any other s (< -1 or >= S), or one slot named by two sequences: the backend returns
   *     KDA_EINVAL before it writes anything, the pool untouched.
   * Slots that no sequence names keep their bits; so does every slot when want_final_state is
   * 0.  state_indices is an input (read-only); the pool is both input and output, the only
   * buffer a backend may read after writing.  Checkpoints (hc) work as in an ordinary call. */
  const int64_t *state_indices; /* [N]: the slot of each sequence, or KDA_PAD_SLOT */
  int64_t pool_slots;           /* S: the number of slots in pool */
  void *pool; /* [S, HV, K, V] of KDA_STATE_DTYPE(out_dtype): read and written in place */
} kda_backend_tensors;

/* A padding entry of state_indices (vLLM's PAD_SLOT_ID). */
#define KDA_PAD_SLOT (-1)
/* 1 when tensors record t has the pool fields. */
#define KDA_TENSORS_HAS_POOL(t) \
  ((t)->struct_size >= offsetof(kda_backend_tensors, pool) + sizeof(void *))

typedef struct kda_backend kda_backend;
struct kda_backend_grads;

/* What a handle runs on (version 2, describe).  The runner zeroes it and sets struct_size;
 * a backend fills what it knows and leaves the rest zero. */
typedef struct kda_backend_info {
  uint32_t struct_size;    /* sizeof(kda_backend_info) of the runner; appended to only */
  int32_t is_device;       /* 1: forward_buffers' buffers live on an accelerator */
  char device[128];        /* "NVIDIA H200", "x86-64 CPU" */
  char isa[64];            /* ISA or architecture picked: "avx512", "sm_90a" */
  double peak_flops;       /* FMA-slot-equivalent FLOP/s (an FMA counts 2), 0: unknown */
  double peak_bytes_per_s; /* memory bandwidth, 0: unknown */
  int32_t threads;         /* host threads forward uses, 0: unknown */
  int32_t reserved0;       /* zero */
} kda_backend_info;

/* The precision class and element types of one parameter string (the variant slot).  The
 * runner fills struct_size (its sizeof) and the table's precision_class, input_dtype and
 * output_dtype, and zeroes the rest; the backend changes what its parameters change and
 * writes nothing past struct_size.  Appended to only. */
typedef struct kda_backend_variant {
  uint32_t struct_size;    /* sizeof(kda_backend_variant) of the runner */
  int32_t precision_class; /* KDA_PRECISION_*: the class these parameters are scored in */
  int32_t input_dtype;     /* KDA_PRECISION_FP64, _FP32, _BF16 or _FP16 */
  int32_t output_dtype;    /* KDA_PRECISION_FP64, _FP32, _BF16 or _FP16 */
  int32_t reserved0;       /* zero */
} kda_backend_variant;

struct kda_backend {
  /* ---- Version 1. */
  uint32_t abi_version;    /* KDA_BACKEND_ABI_VERSION the table was written for */
  uint32_t struct_size;    /* sizeof(kda_backend) as the backend was compiled */
  const char *name;        /* short name, [a-z0-9._-]+ ("ref-f32"); shown in reports */
  const char *description; /* one line, may be NULL */
  int32_t precision_class; /* KDA_PRECISION_*: the class its results are scored in */
  int32_t input_dtype;     /* KDA_PRECISION_FP64, _FP32, _BF16 or _FP16: type of its float
                              inputs ("Element types" above) */
  int32_t output_dtype;    /* KDA_PRECISION_FP64 or _FP32 (or _BF16 or _FP16): of outputs */
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

  /* ---- Version 2 (SPEC.md §7.8).  Read only when abi_version >= 2 and struct_size covers
   * the slot (KDA_BACKEND_HAS); the runner never reads these from a version-1 table.  Every
   * version-2 slot may be NULL, with two rules kda_backend_validate enforces: the four buffer
   * slots (buffers_create, forward_buffers, buffers_read, buffers_destroy) are all set or
   * all NULL, and synchronize is set when they are.  Threading as for version 1: one thread
   * at a time per handle, and every slot below takes the handle open returned. */

  /* Describes what the handle runs on, for reports and `kda bench`.  The runner zeroes *info
   * and sets info->struct_size to its sizeof(kda_backend_info); the backend writes only
   * fields that struct_size covers (it may refuse a smaller one with KDA_EINVAL), fills what
   * it knows, leaves the rest zero and NUL-terminates device and isa.  peak_flops counts an
   * FMA as 2 FLOP.  Returns KDA_OK; KDA_EINVAL (info NULL or too small); KDA_EUNSUPPORTED
   * (nothing to say, e.g. no device: the runner reports unknowns); KDA_EIO (the device could
   * not be queried).  Keeps nothing of info after it returns. */
  int32_t (*describe)(void *handle, kda_backend_info *info);
  /* Device-resident buffers, for timing without host copies (`kda bench`): the runner
   * creates them once and calls forward_buffers on them repeatedly.  buffers_create copies
   * the inputs of t (host buffers, laid out as for forward) to wherever forward_buffers reads
   * them (a GPU's memory) and allocates the outputs there; t's o / ht / hc are ignored and
   * may be NULL.  The backend keeps nothing of t or p after it returns (it copies the problem
   * if it needs it).  supports(p) has accepted p.  Returns KDA_OK and sets *buffers (an
   * opaque pointer the backend owns until buffers_destroy); or KDA_EINVAL (a dtype or buffer
   * it cannot take), KDA_ENOMEM (host or device memory), KDA_EUNSUPPORTED, KDA_EIO (a device
   * error), with *buffers NULL, nothing left allocated and last_error saying why. */
  int32_t (*buffers_create)(void *handle, const kda_problem *p, const kda_backend_tensors *t,
                            void **buffers);
  /* Runs forward on resident buffers: the same computation as forward on the inputs given
   * to buffers_create, into the resident outputs.  p equals (field for field) the problem
   * given to buffers_create; a backend may check and return KDA_EINVAL otherwise.  May
   * return as soon as the work is issued (asynchronous): synchronize waits for it.  Returns
   * KDA_OK, KDA_EINVAL, or KDA_EIO (the launch failed); last_error says why.  An error of
   * issued work may instead surface from synchronize or buffers_read. */
  int32_t (*forward_buffers)(void *handle, const kda_problem *p, void *buffers);
  /* Copies the resident outputs into t's o, and ht / hc when the problem has them (host
   * buffers in the runner's out_dtype, as for forward; t's inputs are ignored).  Ordered
   * after every forward_buffers issued on these buffers (it waits for them, as a copy on
   * the same stream does), so the outputs are those of the last one; the outputs are
   * unspecified before the first.  Returns KDA_OK, KDA_EINVAL (a needed output pointer is
   * NULL), KDA_EIO (a device error, also one of earlier issued work); last_error says why. */
  int32_t (*buffers_read)(void *handle, void *buffers, const kda_backend_tensors *t);
  /* Frees buffers (NULL: nothing), first waiting for or abandoning work issued on them.
   * Cannot fail; buffers is invalid afterwards.  The runner destroys every buffer set before
   * it closes the handle. */
  void (*buffers_destroy)(void *handle, void *buffers);
  /* Waits until all work issued on handle (every forward_buffers so far) has finished, so
   * that the time between an issue and synchronize's return is the computation's.  Returns
   * KDA_OK (also when nothing was issued) or KDA_EIO (issued work failed; last_error says
   * why).  Required when the buffer slots are present. */
  int32_t (*synchronize)(void *handle);
  /* Capabilities (appended to version 2; read only when KDA_BACKEND_HAS(b, caps)): a set of
   * KDA_CAP_* bits; 0 or absent: none.  The runner hands a backend a call that needs a
   * capability only when the bit is set, so a backend that does not know the fields such a
   * call fills (older ones) never sees one.  Unknown bits are ignored. */
  uint32_t caps;
  uint32_t reserved1; /* zero */
  /* Per-parameter class and types (appended to version 2 after caps; read only when
   * KDA_BACKEND_HAS(b, variant); absent or NULL: every parameter string has the table's
   * precision_class, input_dtype and output_dtype).  The runner calls it in the worker of
   * each parameter string it scores (params as given to open, "" when none), once after
   * loading the plugin and before any open (again in a worker restarted after a crash),
   * with *out prefilled as kda_backend_variant says.
   * Returns KDA_OK with *out set, or KDA_EINVAL for parameters the backend rejects, with a
   * one-line message in err (errlen bytes): the runner's usage error (exit 2), before any
   * case.  Any other status fails the backend's load (every case reports it).  Like
   * kda_backend_entry it must be cheap and must not touch a device; it keeps nothing of out.
   * What it returns is validated as the table's fields are (a valid class, element types
   * among fp64 fp32 bf16 fp16, reserved0 zero), must be the same in every worker, and
   * open(params) must then serve those types. */
  int32_t (*variant)(const char *params, kda_backend_variant *out, char *err, uint32_t errlen);
  /* The backward pass (appended to version 2 after variant; read only when
   * KDA_BACKEND_HAS(b, backward); absent or NULL: the backend computes no gradients, and its
   * gradient reports are NotSupported).  Both slots are set or both NULL (validated).
   * supports_backward is answered before backward, as supports before forward: for problem p
   * it returns KDA_OK and sets *grads to the KDA_GRAD_* bits of the gradients backward writes
   * (the runner asks for and scores those of them that p has, reports a gradient p has that is
   * not offered as not provided, and a call offering none of p's gradients as NotSupported),
   * or KDA_EUNSUPPORTED with a one-line reason.  backward then computes the gradients of SPEC.md
   * §13 on the inputs of t (laid out and typed as for forward; o, ht, hc and the pool fields
   * are NULL: a backward recomputes what it needs of the forward) with the seeds and into the
   * gradient buffers of d (kda_backend_grads).  It writes exactly the buffers d names
   * (d->want), and only within their extent, and returns KDA_OK, KDA_EUNSUPPORTED,
   * KDA_EINVAL, KDA_ENOMEM or another status with last_error set, as forward does.  The
   * contract above (no prints, the floating-point environment, inputs read-only, one thread
   * per handle) holds for both. */
  int32_t (*supports_backward)(void *handle, const kda_problem *p, uint32_t *grads, char *reason,
                               uint32_t reasonlen);
  int32_t (*backward)(void *handle, const kda_problem *p, const kda_backend_tensors *t,
                      const struct kda_backend_grads *d);
  /* Version 2 ends here.  Later versions append here. */
};

/* Gradient bits (supports_backward, kda_backend_grads.want): one per input whose gradient a
 * backward can write (SPEC.md §13). */
#define KDA_GRAD_Q 0x01u
#define KDA_GRAD_K 0x02u
#define KDA_GRAD_V 0x04u
#define KDA_GRAD_G 0x08u
#define KDA_GRAD_BETA 0x10u
#define KDA_GRAD_A_LOG 0x20u
#define KDA_GRAD_DT_BIAS 0x40u
#define KDA_GRAD_H0 0x80u
#define KDA_GRAD_ALL 0xFFu
#define KDA_GRAD_COUNT 8

/* The seeds and gradient buffers of one backward call (SPEC.md §13): the scalar
 *   L = sum do * o + sum dht * ht + sum dhc * hc
 * is differentiated with respect to every input the problem reads.  Element types follow the
 * tensors they belong to: dout is of t->out_dtype (as o), dht and dhc of
 * KDA_STATE_DTYPE(t->out_dtype) (as ht and hc); dq dk dv dg dbeta of t->in_dtype (as q k v g
 * beta), dA_log ddt_bias dh0 of KDA_STATE_DTYPE(t->in_dtype) (as A_log dt_bias h0).  Layouts are
 * those of the inputs (SPEC.md §2.3): dq, dk [T, H, K] (a q/k head that serves several value
 * heads gets their terms summed, §4.4), dv [T, HV, V], dg [T, HV, GW], dbeta [T, HV], dA_log
 * [HV], ddt_bias [HV, GW], dh0 [N, HV, K, V] in the problem's state_layout, as h0; dht as ht,
 * dhc as hc.  A gradient buffer is non-NULL exactly when its bit is in want; the runner sets
 * in want only bits that supports_backward offered and the problem has (dg only for a family
 * that decays, dA_log and ddt_bias only when the gate reads them, dh0 only with an initial
 * state).  dht is NULL when want_final_state is 0, dhc when n_checkpoints is 0.  The runner
 * fills every gradient element with NaN before the call, and owns every buffer. */
typedef struct kda_backend_grads {
  uint32_t struct_size; /* sizeof(kda_backend_grads) of the runner; appended to only */
  uint32_t want;        /* KDA_GRAD_* bits of the buffers below that are present */
  const void *dout;     /* [T, HV, V]: the seed of o (`do` in case files) */
  const void *dht;      /* [N, HV, K, V]: the seed of ht */
  const void *dhc;      /* [C, HV, K, V]: the seed of hc */
  void *dq, *dk, *dv, *dg, *dbeta, *dA_log, *ddt_bias, *dh0;
} kda_backend_grads;

/* Capability bits of kda_backend.caps. */
#define KDA_CAP_STATE_POOL 1u /* forward takes pool calls (kda_backend_tensors.state_indices) */

/* The size of the version-1 prefix of struct kda_backend: fixed forever (a v1 plugin's
 * struct_size), whatever later versions append. */
#define KDA_BACKEND_V1_SIZE \
  ((uint32_t)(offsetof(struct kda_backend, last_error) + sizeof(const char *(*)(void *))))
/* The size of the version-2 prefix. */
#define KDA_BACKEND_V2_SIZE \
  ((uint32_t)(offsetof(struct kda_backend, synchronize) + sizeof(int32_t (*)(void *))))
/* 1 when table b has the version-2 slot `field` (it may still be NULL). */
#define KDA_BACKEND_HAS(b, field)                                       \
  ((b)->abi_version >= 2 &&                                             \
   (b)->struct_size >= offsetof(struct kda_backend, field) + sizeof((b)->field))

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

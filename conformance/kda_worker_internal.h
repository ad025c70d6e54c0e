/* kda_worker_internal.h: the persistent isolated worker (SPEC.md §7.8), private to conformance/ (not
 * installed): the runner (kda_runner.c) is its one caller; kda_target (kda_conform.h) is what
 * programs see of it.
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_WORKER_INTERNAL_H
#define KDA_WORKER_INTERNAL_H

#include "kda_conform.h"

/* ---- Persistent isolated workers (SPEC.md §7.8).
 * One child process per (backend, parameters), started once and serving every call of a run
 * over a socket and a shared memory region; the plugin is loaded only inside it.  A crash or
 * time-out kills its process group and is that call's outcome; the next call starts a fresh
 * worker.  A load failure (dlopen, the entry, the table, a constructor that crashes or
 * changes the floating-point environment) is recorded once and is the outcome of every call.
 * A handle is opened by the first call after kda_worker_end_case and closed by it: one handle
 * per case. */
typedef struct kda_worker kda_worker;
typedef kda_call_opts kda_worker_opts; /* timeout_s, isolate, memory_limit */
/* Starts the worker of ref (a built-in table, or a plugin path, and params) and waits (bounded
 * by o->timeout_s) until it has loaded the backend.  Returns KDA_OK and sets *w, also when the
 * backend failed to load (kda_worker_load_result), or KDA_ENOMEM / KDA_EIO (fork, socket,
 * memfd).  o NULL: isolated, 60 s, automatic memory limit. */
int kda_worker_start(const kda_backend_ref *ref, const kda_worker_opts *o, kda_worker **w,
                     char *err, size_t errlen);
/* The outcome of loading the backend (KDA_CALL_ERROR, _CRASH, _TIMEOUT, _FPENV and why), or
 * NULL when it loaded. */
const kda_call_result *kda_worker_load_result(const kda_worker *w);
/* The backend's table as read inside the worker (sent to the runner after loading), with the
 * class and element types of its parameters (the variant slot's, else the table's).  Before a
 * successful load the name is the spec's file name and the class is -1. */
const char *kda_worker_name(const kda_worker *w);
/* The name the reports give the backend: its name, or NAME:PARAMS when it was opened with
 * parameters (SPEC.md §7.6), at most 63 bytes; valid until the next call on w. */
const char *kda_worker_label(kda_worker *w);
const char *kda_worker_description(const kda_worker *w);
int32_t kda_worker_class(const kda_worker *w);
int32_t kda_worker_input_dtype(const kda_worker *w);
int32_t kda_worker_output_dtype(const kda_worker *w);
/* 1 when the backend's variant slot rejected the worker's parameters (KDA_EINVAL, SPEC.md
 * §7.8): a usage error of the run; kda_worker_load_result says why. */
int kda_worker_params_rejected(const kda_worker *w);
/* 1 when every value of in's q k v g beta is exact in w's input type (always for fp64 and
 * fp32); else 0 with the first value that is not in why.  A 16-bit input type is never
 * rounded into (SPEC.md §10.3): kda_worker_call declines such a call (NotSupported). */
int kda_worker_inputs_exact(const kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                            char *why, size_t cap);
uint32_t kda_worker_abi_version(const kda_worker *w);
/* The table's capability bits (KDA_CAP_*, kda_backend.h); 0 when it has none or failed to load. */
uint32_t kda_worker_caps(const kda_worker *w);
int64_t kda_worker_pid(const kda_worker *w);    /* the worker's pid (its process group), 0 */
int64_t kda_worker_starts(const kda_worker *w); /* processes started so far */
/* supports and forward on p (opening a handle first when none is open), with the same
 * outcomes and return values as kda_call_forward. */
int kda_worker_call(kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                    kda_outputs *out, kda_call_result *r, char *err, size_t errlen);
/* 1 when the backend's table has the resident-buffer slots (buffers_create, forward_buffers,
 * synchronize, buffers_read, buffers_destroy; kda_backend.h). */
int kda_worker_has_resident(const kda_worker *w);
/* The same call through either path (SPEC.md §7.8): KDA_VIA_FORWARD, or KDA_VIA_RESIDENT
 * (buffers_create from the inputs, forward_buffers and synchronize, timed, buffers_read into
 * the outputs, buffers_destroy), which is forward for a table without those slots. */
#define KDA_VIA_FORWARD 0
#define KDA_VIA_RESIDENT 1
int kda_worker_call_via(kda_worker *w, int32_t via, const kda_problem *p,
                        const kda_tensors_f64 *in, kda_outputs *out, kda_call_result *r,
                        char *err, size_t errlen);
/* A pool call (SPEC.md §7.8; only for a worker whose caps have KDA_CAP_STATE_POOL): as
 * kda_worker_call with in->h0 NULL, out->ht unused, and the state pool [slots, HV, K, V]
 * (float64, converted to the backend's output type and back, exact for values of that type)
 * passed in place with state_indices [N].  pool holds on return what the backend left there
 * whenever the call returned (also on an error); unchanged after a crash or timeout. */
int kda_worker_call_pool(kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                         const int64_t *state_indices, int64_t slots, double *pool,
                         kda_outputs *out, kda_call_result *r, char *err, size_t errlen);
/* 1 when the backend's table has the backward slots (supports_backward, backward). */
int kda_worker_has_backward(const kda_worker *w);
/* The seeds of a backward call as float64: do [T, HV, V], dht as ht and dhc as hc (NULL: the
 * problem has none; converted to the backend's output types as o, ht and hc are). */
typedef struct kda_worker_seeds {
  const double *dout, *dht, *dhc;
} kda_worker_seeds;
/* A backward call (SPEC.md §13, kda_backend.h): supports_backward, then backward on the
 * gradients of want (KDA_GRAD_* bits, only those the problem has) that the backend offers;
 * grads[b] (KDA_GRAD_COUNT pointers in bit order, each NULL or allocated for its gradient)
 * receives gradient b widened exactly, for each b in *wrote.  The same checks as a forward call
 * (inputs and seeds unchanged, canaries, guards, the floating-point environment) and the same
 * outcomes (KDA_CALL_UNSUPPORTED also for a backend without the slots).  Returns as
 * kda_worker_call. */
int kda_worker_backward(kda_worker *w, const kda_problem *p, const kda_tensors_f64 *in,
                        const kda_worker_seeds *sd, uint32_t want, double *const *grads,
                        uint32_t *wrote, kda_call_result *r, char *err, size_t errlen);
/* The backend's describe (ABI version 2) on the open handle (opening one when none is):
 * KDA_CALL_UNSUPPORTED when the table has no describe; info zeroed unless KDA_CALL_OK. */
int kda_worker_describe(kda_worker *w, kda_backend_info *info, kda_call_result *r, char *err,
                        size_t errlen);
/* Closes the open handle (r: close's outcome; KDA_CALL_OK when none was open). */
int kda_worker_end_case(kda_worker *w, kda_call_result *r, char *err, size_t errlen);
/* Moves what the backend printed since the last take into buf (cap bytes, NUL-terminated,
 * the first KDA_WORKER_LOG_MAX - 1 bytes kept); *total: bytes printed.  Returns the length. */
size_t kda_worker_take_log(kda_worker *w, char *buf, size_t cap, uint64_t *total);
/* Kills the worker's process group and reaps it (bounded); w may be NULL. */
void kda_worker_stop(kda_worker *w);
/* 1 when the worker applies the memory limit (0 under AddressSanitizer). */
int kda_worker_limits_memory(void);

/* Scores the backend of worker w on case c with truth t (kda_conform_target on a case in
 * memory): every call of the case (repeat, prefix, causality) goes to w, then its handle is
 * closed.  Always fills r; returns KDA_OK or a runner failure (KDA_ENOMEM, KDA_EIO) with
 * r->verdict meaningless. */
int kda_conform_case_worker(kda_worker *w, const kda_case *c, const kda_truth *t,
                            const kda_conform_opts *o, kda_case_report *r, char *err,
                            size_t errlen);
/* The worker behind a target. */
kda_worker *kda_target_worker(const kda_target *t);

#endif

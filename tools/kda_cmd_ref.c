/* kda_cmd_ref.c: `kda ref`, run a reference on a case file and write a result file.
 * SPDX-License-Identifier: MIT
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_npz.h"
#include "kda_ref.h"
#include "kda_files.h"
#include "kda_tool.h"

#if defined(__has_include)
#if __has_include("kda_mpfr.h")
#include "kda_mpfr.h"
#define KDA_TOOL_HAVE_MPFR 1
#endif
#endif
#ifndef KDA_TOOL_HAVE_MPFR
#define KDA_TOOL_HAVE_MPFR 0
#endif

#define SUB "ref"

static const char help_text[] =
    "Usage: kda ref [--backend NAME] [--dtype f64|f32] INPUT.npz -o OUTPUT.npz\n"
    "\n"
    "Runs a reference implementation on the case file INPUT.npz and writes its outputs\n"
    "(o, and ht / hc when the problem asks for them) to the result file OUTPUT.npz.\n"
    "The result file is written atomically: on any error no output file is left behind\n"
    "and an existing OUTPUT.npz is not touched.\n"
    "\n"
    "Options:\n"
    "  -b, --backend NAME   the reference to run (default ref-f64):\n"
    "                         ref-f64  the plain float64 reference (SPEC.md section 9)\n"
    "                         ref-f32  its float32 twin; the case's inputs must be exact\n"
    "                                  in float32, otherwise kda ref refuses (exit 2)\n"
    "                         mpfr     the MPFR reference: every output the correctly\n"
    "                                  rounded float64 of the exact result, certified\n"
    "                                  by Ziv's strategy (SPEC.md section 8)"
#if !KDA_TOOL_HAVE_MPFR
    "; not built in\n"
#else
    "\n"
#endif
    "  -d, --dtype TYPE     element type of the outputs in OUTPUT.npz, f64 or f32\n"
    "                       (default f64 for ref-f64 and mpfr, f32 for ref-f32)\n"
    "  -o, --output FILE    the result file to write (required)\n"
    "  -h, --help           print this help and exit\n"
    "\n"
    "Exit status:\n"
    "  0  the result file was written\n"
    "  2  usage error, I/O error or bad input (one line on standard error)\n";

enum { BACKEND_F64, BACKEND_F32, BACKEND_MPFR };
static const char *const backend_names[] = {"ref-f64", "ref-f32", "mpfr"};

typedef struct ref_args {
  int backend;
  int32_t dtype; /* KDA_DTYPE_F64 / F32, or -1 for the backend's default */
  const char *input;
  const char *output;
} ref_args;

/* The outputs of one run, float64 whatever the backend computed in. */
typedef struct ref_out {
  double *o, *ht, *hc;
} ref_out;

static void ref_out_free(ref_out *r) {
  free(r->o);
  free(r->ht);
  free(r->hc);
  memset(r, 0, sizeof *r);
}

/* calloc of n elements (at least one, so that an empty output, T = 0, is still a buffer);
 * *fail is set when the allocation fails. */
static void *alloc_n(uint64_t n, size_t size, int *fail) {
  if (n == 0) n = 1;
  void *p = (n > SIZE_MAX / size) ? NULL : calloc((size_t)n, size);
  if (!p) *fail = 1;
  return p;
}

static int ref_out_alloc(const kda_case_sizes *s, ref_out *r, char *err, size_t errlen) {
  int fail = 0;
  r->o = alloc_n(s->o, sizeof(double), &fail);
  r->ht = alloc_n(s->ht, sizeof(double), &fail);
  r->hc = alloc_n(s->hc, sizeof(double), &fail);
  if (!fail) return KDA_OK;
  ref_out_free(r);
  snprintf(err, errlen, "out of memory for the outputs");
  return KDA_ENOMEM;
}

/* The case's inputs with freshly allocated float64 outputs r (for ref-f64 and mpfr). */
static int f64_tensors(const kda_case *c, const kda_case_sizes *s, ref_out *r,
                       kda_tensors_f64 *t, char *err, size_t errlen) {
  int st = ref_out_alloc(s, r, err, errlen);
  if (st != KDA_OK) return st;
  kda_case_tensors(c, t);
  t->o = r->o;
  t->ht = r->ht;
  t->hc = r->hc;
  return KDA_OK;
}

static int run_f64(const kda_case *c, const kda_case_sizes *s, ref_out *r, char *err,
                   size_t errlen) {
  kda_tensors_f64 t;
  int st = f64_tensors(c, s, r, &t, err, errlen);
  if (st != KDA_OK) return st;
  return kda_ref_forward_f64(&c->p, &t, err, errlen);
}

/* ---- ref-f32: the inputs are converted to float, which must be exact. */

/* A float copy of n values of member name; refuses a value that float cannot hold exactly. */
static int to_f32(const char *path, const char *name, const double *x, uint64_t n, float **out,
                  int32_t prec, char *err, size_t errlen) {
  *out = NULL;
  if (!x) return KDA_OK;
  int fail = 0;
  float *y = alloc_n(n, sizeof(float), &fail);
  if (fail) {
    snprintf(err, errlen, "%s: out of memory converting member '%s' to float32", path, name);
    return KDA_ENOMEM;
  }
  for (uint64_t i = 0; i < n; i++) {
    y[i] = (float)x[i];
    if ((double)y[i] != x[i] && x[i] == x[i]) {
      snprintf(err, errlen,
               "%s: member '%s' element %llu (%.17g) is not exact in float32; backend ref-f32 "
               "needs inputs exact in float32 (input precision %s)",
               path, name, (unsigned long long)i, x[i],
               kda_prec_name(prec) ? kda_prec_name(prec) : "?");
      free(y);
      return KDA_EINVAL;
    }
  }
  *out = y;
  return KDA_OK;
}

typedef struct f32_inputs {
  float *q, *k, *v, *g, *beta, *A_log, *dt_bias, *h0;
} f32_inputs;

static void f32_inputs_free(f32_inputs *in) {
  free(in->q);
  free(in->k);
  free(in->v);
  free(in->g);
  free(in->beta);
  free(in->A_log);
  free(in->dt_bias);
  free(in->h0);
}

static int f32_inputs_make(const kda_case *c, const kda_case_sizes *s, const char *path,
                           f32_inputs *in, char *err, size_t errlen) {
  const struct {
    const char *name;
    const double *x;
    uint64_t n;
    float **y;
  } m[] = {
      {"q", c->q, s->q, &in->q},           {"k", c->k, s->k, &in->k},
      {"v", c->v, s->v, &in->v},           {"g", c->g, s->g, &in->g},
      {"beta", c->beta, s->beta, &in->beta}, {"A_log", c->A_log, s->A_log, &in->A_log},
      {"dt_bias", c->dt_bias, s->dt_bias, &in->dt_bias}, {"h0", c->h0, s->h0, &in->h0},
  };
  memset(in, 0, sizeof *in);
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    int st = to_f32(path, m[i].name, m[i].x, m[i].n, m[i].y, c->input_precision, err, errlen);
    if (st != KDA_OK) {
      f32_inputs_free(in);
      return st;
    }
  }
  return KDA_OK;
}

/* Widens n floats into doubles (exact). */
static void widen(const float *x, double *y, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) y[i] = (double)x[i];
}

static int run_f32(const kda_case *c, const kda_case_sizes *s, const char *path, ref_out *r,
                   char *err, size_t errlen) {
  f32_inputs in;
  int st = f32_inputs_make(c, s, path, &in, err, errlen);
  if (st != KDA_OK) return st;
  int fail = 0;
  float *o = alloc_n(s->o, sizeof(float), &fail);
  float *ht = alloc_n(s->ht, sizeof(float), &fail);
  float *hc = alloc_n(s->hc, sizeof(float), &fail);
  if (fail) {
    snprintf(err, errlen, "out of memory for the float32 outputs");
    st = KDA_ENOMEM;
  } else {
    kda_tensors_f32 t = {in.q, in.k, in.v, in.g, in.beta, in.A_log, in.dt_bias, in.h0,
                         c->cu_seqlens, c->checkpoints, o, ht, hc};
    st = kda_ref_forward_f32(&c->p, &t, err, errlen);
  }
  if (st == KDA_OK) st = ref_out_alloc(s, r, err, errlen);
  if (st == KDA_OK) {
    widen(o, r->o, s->o);
    widen(ht, r->ht, s->ht);
    widen(hc, r->hc, s->hc);
  }
  free(o);
  free(ht);
  free(hc);
  f32_inputs_free(&in);
  return st;
}

#if KDA_TOOL_HAVE_MPFR
static int run_mpfr(const kda_case *c, const kda_case_sizes *s, ref_out *r, char *err,
                    size_t errlen) {
  kda_tensors_f64 t;
  int st = f64_tensors(c, s, r, &t, err, errlen);
  if (st != KDA_OK) return st;
  return kda_mpfr_forward(&c->p, &t, NULL, NULL, err, errlen);
}
#endif

/* ---- Arguments. */

static int parse_backend(const char *s, int *out) {
  for (int i = 0; i < 3; i++)
    if (strcmp(s, backend_names[i]) == 0) {
      *out = i;
      return 0;
    }
  return -1;
}

/* Returns -1 to go on, or the exit status (0 after --help). */
static int parse_args(int argc, char **argv, ref_args *a) {
  static const struct option longopts[] = {
      {"backend", required_argument, NULL, 'b'}, {"dtype", required_argument, NULL, 'd'},
      {"output", required_argument, NULL, 'o'},  {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  a->backend = BACKEND_F64;
  a->dtype = -1;
  a->input = a->output = NULL;
  opterr = 0;
  optind = 0; /* glibc: full re-initialisation */
  int c;
  while ((c = getopt_long(argc, argv, ":b:d:o:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'b':
      if (parse_backend(optarg, &a->backend) != 0)
        return kda_tool_usage(SUB, "unknown backend '%s' (ref-f64, ref-f32 or mpfr)", optarg);
      break;
    case 'd':
      if (strcmp(optarg, "f64") == 0) a->dtype = KDA_DTYPE_F64;
      else if (strcmp(optarg, "f32") == 0) a->dtype = KDA_DTYPE_F32;
      else return kda_tool_usage(SUB, "unknown dtype '%s' (f64 or f32)", optarg);
      break;
    case 'o': a->output = optarg; break;
    case 'h': fputs(help_text, stdout); return KDA_EXIT_OK;
    default: return kda_tool_bad_option(SUB, c, argv);
    }
  }
  if (optind >= argc) return kda_tool_usage(SUB, "missing INPUT.npz");
  if (argc - optind > 1) return kda_tool_usage(SUB, "unexpected argument '%s'", argv[optind + 1]);
  a->input = argv[optind];
  if (!a->output) return kda_tool_usage(SUB, "missing -o OUTPUT.npz");
  if (a->backend == BACKEND_MPFR && !KDA_TOOL_HAVE_MPFR)
    return kda_tool_usage(SUB, "backend 'mpfr' is not built into this kda");
  if (a->dtype < 0) a->dtype = a->backend == BACKEND_F32 ? KDA_DTYPE_F32 : KDA_DTYPE_F64;
  return -1;
}

static int run_backend(const ref_args *a, const kda_case *c, const kda_case_sizes *s,
                       ref_out *r, char *err, size_t errlen) {
  switch (a->backend) {
  case BACKEND_F32: return run_f32(c, s, a->input, r, err, errlen);
#if KDA_TOOL_HAVE_MPFR
  case BACKEND_MPFR: return run_mpfr(c, s, r, err, errlen);
#endif
  default: return run_f64(c, s, r, err, errlen);
  }
}

/* A backend's message does not always name the file: prefix the input's path when it is
 * missing from the message. */
static int fail_with(const char *path, const char *err) {
  if (strstr(err, path)) return kda_tool_fail(SUB, "%s", err);
  return kda_tool_fail(SUB, "%s: %s", path, err);
}

int kda_cmd_ref(int argc, char **argv) {
  ref_args a;
  int st = parse_args(argc, argv, &a);
  if (st >= 0) return st;
  char err[KDA_ERRLEN] = "";
  kda_case c;
  memset(&c, 0, sizeof c);
  const char *inputs[1] = {a.input};
  if (kda_output_check(a.output, inputs, 1, err, sizeof err) != KDA_OK) /* never the input */
    return kda_tool_fail(SUB, "%s", err);
  if (kda_case_load(a.input, &c, err, sizeof err) != KDA_OK) return fail_with(a.input, err);
  kda_case_sizes s;
  ref_out r = {NULL, NULL, NULL};
  st = kda_case_sizes_get(&c.p, &s, err, sizeof err);
  if (st == KDA_OK) st = run_backend(&a, &c, &s, &r, err, sizeof err);
  if (st == KDA_OK)
    st = kda_result_save(a.output, &c, backend_names[a.backend], a.dtype, r.o,
                         c.p.want_final_state ? r.ht : NULL, c.p.n_checkpoints > 0 ? r.hc : NULL,
                         err, sizeof err);
  int status = KDA_EXIT_OK;
  if (st != KDA_OK) status = fail_with(st == KDA_EIO ? a.output : a.input, err);
  ref_out_free(&r);
  kda_case_free(&c);
  return status;
}

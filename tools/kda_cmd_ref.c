/* kda_cmd_ref.c: `kda ref`, run a backend on a case file and write a result file.
 * SPDX-License-Identifier: MIT
 *
 * The backend is named as in every subcommand (SPEC.md §7.8, kda_backend_resolve): a
 * built-in (ref-f64 by default, ref-f32, mpfr, simd...) or a plugin, with its parameters.  It
 * is called in-process through its table, as the runner calls it with --no-isolate.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_conform.h"
#include "kda_npz.h"
#include "kda_ref.h"
#include "kda_files.h"
#include "kda_tool.h"

#define SUB "ref"

static const char help_text[] =
    "Usage: kda ref [--backend SPEC] [--dtype f64|f32] INPUT.npz -o OUTPUT.npz\n"
    "\n"
    "Runs a backend (by default the float64 reference) on the case file INPUT.npz and writes\n"
    "its outputs (o, and ht / hc when the problem asks for them) to the result file\n"
    "OUTPUT.npz.  The result file is written atomically: on any error no output file is left\n"
    "behind and an existing OUTPUT.npz is not touched.\n"
    "\n"
    "Options:\n"
    "  -b, --backend SPEC   the backend to run (default ref-f64), named as in kda conform:\n"
    "                       NAME[:PARAMS] or PATH[:PARAMS] (a plugin; NAME is also looked up\n"
    "                       on KDA_PLUGIN_PATH; see kda conform --help), e.g.\n"
    "                         ref-f64  the plain float64 reference (SPEC.md section 9)\n"
    "                         ref-f32  its float32 twin\n"
    "                         mpfr     the MPFR reference: every output the correctly\n"
    "                                  rounded float64 of the exact result, certified\n"
    "                                  by Ziv's strategy (SPEC.md section 8);\n"
    "                                  params prec=N prec_max=N proof=0|1\n"
    "                         simd     the vectorised float32 backend (isa=, threads=)\n"
    "                       A backend with float32 inputs (ref-f32, simd) needs the case's\n"
    "                       inputs exact in float32, otherwise kda ref refuses (exit 2)\n"
    "  -d, --dtype TYPE     element type of the outputs in OUTPUT.npz, f64 or f32\n"
    "                       (default: the backend's output type: f64 for ref-f64 and mpfr,\n"
    "                       f32 for ref-f32)\n"
    "  -o, --output FILE    the result file to write (required)\n"
    "  -h, --help           print this help and exit\n"
    "\n"
    "Exit status:\n"
    "  0  the result file was written\n"
    "  2  usage error, I/O error, bad input, a parameter the backend rejects, or a backend\n"
    "     that fails or does not support the case (one line on standard error)\n";

typedef struct ref_args {
  kda_backend_ref backend;
  int32_t dtype; /* KDA_DTYPE_F64 / F32, or -1 for the backend's default */
  const char *input;
  const char *output;
} ref_args;

/* ---- Backends with float32 inputs: the case's inputs must be exact in float32. */

/* Refuses a value of member name that float cannot hold exactly. */
static int check_f32(const char *path, const char *name, const double *x, uint64_t n,
                     int32_t prec, const char *backend, char *err, size_t errlen) {
  for (uint64_t i = 0; x && i < n; i++) {
    float y = (float)x[i];
    if ((double)y != x[i] && x[i] == x[i]) {
      snprintf(err, errlen,
               "%s: member '%s' element %llu (%.17g) is not exact in float32; backend %s "
               "needs inputs exact in float32 (input precision %s)",
               path, name, (unsigned long long)i, x[i], backend,
               kda_prec_name(prec) ? kda_prec_name(prec) : "?");
      return KDA_EINVAL;
    }
  }
  return KDA_OK;
}

static int check_f32_inputs(const kda_case *c, const kda_problem_sizes *s, const char *path,
                            const char *backend, char *err, size_t errlen) {
  const struct {
    const char *name;
    const double *x;
    uint64_t n;
  } m[] = {
      {"q", c->q, s->q},       {"k", c->k, s->k},          {"v", c->v, s->v},
      {"g", c->g, s->g},       {"beta", c->beta, s->beta}, {"A_log", c->A_log, s->A_log},
      {"dt_bias", c->dt_bias, s->dt_bias}, {"h0", c->h0, s->h0},
  };
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    int st = check_f32(path, m[i].name, m[i].x, m[i].n, c->input_precision, backend, err, errlen);
    if (st != KDA_OK) return st;
  }
  return KDA_OK;
}

/* ---- Arguments. */

/* Returns -1 to go on, or the exit status (0 after --help). */
static int parse_args(int argc, char **argv, ref_args *a) {
  static const struct option longopts[] = {
      {"backend", required_argument, NULL, 'b'}, {"dtype", required_argument, NULL, 'd'},
      {"output", required_argument, NULL, 'o'},  {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *spec = "ref-f64";
  a->dtype = -1;
  a->input = a->output = NULL;
  opterr = 0;
  optind = 0; /* glibc: full re-initialisation */
  int c;
  while ((c = getopt_long(argc, argv, ":b:d:o:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'b': spec = optarg; break;
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
  char err[KDA_ERRLEN];
  if (kda_backend_resolve(spec, &a->backend, err, sizeof err) != KDA_OK)
    return kda_tool_usage(SUB, "%s", err);
  if (optind >= argc) return kda_tool_usage(SUB, "missing INPUT.npz");
  if (argc - optind > 1) return kda_tool_usage(SUB, "unexpected argument '%s'", argv[optind + 1]);
  a->input = argv[optind];
  if (!a->output) return kda_tool_usage(SUB, "missing -o OUTPUT.npz");
  return -1;
}

/* Loads the plugin (if any) and opens the backend once, so that a parameter it rejects is
 * reported as such before the input is read.  Returns -1 to go on, or the exit status. */
static int open_backend(const ref_args *a, kda_plugin **pl, const kda_backend **b) {
  char err[KDA_ERRLEN] = "";
  *pl = NULL;
  *b = a->backend.builtin;
  if (!*b && kda_plugin_load(a->backend.path, pl, b, err, sizeof err) != KDA_OK)
    return kda_tool_fail(SUB, "%s", err);
  void *h = NULL;
  int32_t st = (*b)->open(a->backend.params, &h, err, sizeof err);
  if (st != KDA_OK) return kda_tool_fail(SUB, "backend '%s': %s", (*b)->name, err);
  (*b)->close(h);
  return -1;
}

/* A backend's message does not always name the file: prefix the input's path when it is
 * missing from the message. */
static int fail_with(const char *path, const char *err) {
  if (strstr(err, path)) return kda_tool_fail(SUB, "%s", err);
  return kda_tool_fail(SUB, "%s: %s", path, err);
}

/* Runs b on the case, in-process: outputs into out (float64, widened exactly). */
static int run_backend(const ref_args *a, const kda_backend *b, const kda_case *c,
                       kda_outputs *out, char *err, size_t errlen) {
  kda_problem_sizes s;
  int st = kda_problem_sizes_get(&c->p, &s, err, errlen);
  if (st == KDA_OK && b->input_dtype == KDA_BACKEND_DTYPE_F32)
    st = check_f32_inputs(c, &s, a->input, b->name, err, errlen);
  if (st == KDA_OK) st = kda_outputs_alloc(&c->p, out, err, errlen);
  if (st != KDA_OK) return st;
  kda_tensors_f64 in;
  kda_case_tensors(c, &in);
  kda_call_opts opts = {.timeout_s = 0, .isolate = 0}; /* in-process, no time limit */
  kda_call_result r;
  st = kda_call_forward(b, a->backend.params, &c->p, &in, out, &opts, &r, err, errlen);
  if (st != KDA_OK) return st;
  if (r.outcome == KDA_CALL_OK) return KDA_OK;
  snprintf(err, errlen, "backend '%s': %s%.400s", b->name,
           r.outcome == KDA_CALL_UNSUPPORTED ? "does not support this case: " : "", r.msg);
  return r.status != KDA_OK ? r.status : KDA_EINVAL;
}

int kda_cmd_ref(int argc, char **argv) {
  static ref_args a; /* kda_backend_ref is large */
  int st = parse_args(argc, argv, &a);
  if (st >= 0) return st;
  kda_plugin *pl;
  const kda_backend *b;
  if ((st = open_backend(&a, &pl, &b)) >= 0) return st;
  char err[KDA_ERRLEN] = "";
  kda_case c;
  memset(&c, 0, sizeof c);
  const char *inputs[1] = {a.input};
  if (kda_output_check(a.output, inputs, 1, err, sizeof err) != KDA_OK) { /* never the input */
    kda_plugin_unload(pl);
    return kda_tool_fail(SUB, "%s", err);
  }
  if (kda_case_load(a.input, &c, err, sizeof err) != KDA_OK) {
    kda_plugin_unload(pl);
    return fail_with(a.input, err);
  }
  int32_t dtype = a.dtype >= 0 ? a.dtype
                : b->output_dtype == KDA_BACKEND_DTYPE_F32 ? KDA_DTYPE_F32 : KDA_DTYPE_F64;
  kda_outputs out;
  memset(&out, 0, sizeof out);
  st = run_backend(&a, b, &c, &out, err, sizeof err);
  if (st == KDA_OK)
    st = kda_result_save(a.output, &c, b->name, dtype, out.o, out.ht, out.hc, err, sizeof err);
  int status = KDA_EXIT_OK;
  if (st != KDA_OK) status = fail_with(st == KDA_EIO ? a.output : a.input, err);
  kda_outputs_free(&out);
  kda_case_free(&c);
  kda_plugin_unload(pl);
  return status;
}

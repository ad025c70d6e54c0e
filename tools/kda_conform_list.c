/* kda_conform_list.c: `kda conform --list-backends` and `--list-cases` (SPEC.md §7.8).
 * SPDX-License-Identifier: MIT
 *
 * Kept out of kda_cmd_conform.c: listing opens backends in-process (plugins too: the user
 * asked about them, and nothing is scored), while a run isolates every plugin call.
 */
#include <stdio.h>
#include <string.h>

#include "kda_case.h"
#include "kda_conform.h"
#include "kda_conform_list.h"
#include "kda_tool.h"

#define SUB "conform"

/* What an open handle of b says about itself (v2 describe), or "-". */
static void describe_handle(const kda_backend *b, void *h, char *out, size_t cap) {
  snprintf(out, cap, "-");
  if (!KDA_BACKEND_HAS(b, describe) || !b->describe) return;
  kda_backend_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (b->describe(h, &info) != KDA_OK) return;
  info.device[sizeof info.device - 1] = info.isa[sizeof info.isa - 1] = 0; /* hostile tables */
  int w = snprintf(out, cap, "%s%s%s", info.device, info.device[0] && info.isa[0] ? ", " : "",
                   info.isa);
  if (w >= 0 && (size_t)w < cap && info.threads > 0)
    w += snprintf(out + w, cap - (size_t)w, ", %d thread%s", (int)info.threads,
                  info.threads == 1 ? "" : "s");
  if (w >= 0 && (size_t)w < cap && info.peak_flops > 0)
    snprintf(out + w, cap - (size_t)w, ", peak %.0f GFLOP/s", info.peak_flops / 1e9);
}

/* One row of --list-backends: opens b with params and asks it about a tiny problem. */
static void list_backend(const kda_backend *b, const char *params, const char *source,
                         const char *def) {
  char avail[KDA_ERRLEN + 32] = "yes", picked[400] = "-", why[KDA_ERRLEN] = "";
  void *h = NULL;
  int32_t st = b->open(params, &h, why, sizeof why);
  if (st != KDA_OK) {
    snprintf(avail, sizeof avail, "no: open: %s", why[0] ? why : kda_strstatus(st));
  } else {
    kda_problem p;
    kda_problem_init(&p, 4, 1, 1, 16, 16);
    describe_handle(b, h, picked, sizeof picked);
    if (b->supports(h, &p, why, sizeof why) != KDA_OK)
      snprintf(avail, sizeof avail, "no: %s", why[0] ? why : "does not support a tiny problem");
    b->close(h);
  }
  static const char *const dt[] = {"f64", "f32"};
  printf("%-14s %-5s %3s->%-3s %-8s %-4s %s\n", b->name, kda_class_name(b->precision_class),
         dt[b->input_dtype], dt[b->output_dtype], def, avail[0] == 'y' ? "yes" : "no", picked);
  printf("    %s%s%s\n", source, b->description ? ": " : "", b->description ? b->description : "");
  if (avail[0] != 'y') printf("    not available: %s\n", avail + 4);
}

int kda_conform_list_backends(const char *const *specs, int n_specs, const char *params) {
  char err[KDA_ERRLEN], source[4200];
  printf("%-14s %-5s %-8s %-8s %-4s %s\n", "name", "class", "dtypes", "default", "runs",
         "ISA/device picked");
  if (n_specs == 0)
    for (int32_t i = 0; i < kda_backend_builtin_count(); i++)
      list_backend(kda_backend_builtin(i), params ? params : "", "built-in",
                   kda_backend_builtin_is_default(i) ? "yes" : "no");
  for (int i = 0; i < n_specs; i++) {
    kda_backend_ref ref;
    if (kda_backend_resolve(specs[i], &ref, err, sizeof err) != KDA_OK)
      return kda_tool_fail(SUB, "%s", err);
    /* The spec's own parameters, else the deprecated --params (as the run gives them). */
    const char *p = strchr(specs[i], ':') ? ref.params : params ? params : "";
    if (ref.builtin) {
      list_backend(ref.builtin, p, "built-in", "-");
      continue;
    }
    kda_plugin *pl;
    const kda_backend *b;
    if (kda_plugin_load(ref.path, &pl, &b, err, sizeof err) != KDA_OK)
      return kda_tool_fail(SUB, "%s", err);
    snprintf(source, sizeof source, "plugin %s", ref.path);
    list_backend(b, p, source, "-");
    kda_plugin_unload(pl);
  }
  return KDA_EXIT_OK;
}

/* The case id: the manifest's, else the file name without ".npz". */
static const char *case_id(const kda_case *c, const char *path, char *buf, size_t cap) {
  if (c->id) return c->id;
  const char *b = strrchr(path, '/');
  snprintf(buf, cap, "%s", b ? b + 1 : path);
  size_t n = strlen(buf);
  if (n > 4 && strcmp(buf + n - 4, ".npz") == 0) buf[n - 4] = 0;
  return buf;
}

int kda_conform_list_cases(const char *const *filters, int n_filters, char *const *paths,
                           int n_paths) {
  printf("%-28s %6s %7s %4s %4s %5s %5s %-9s %s\n", "id", "N", "T", "H", "HV", "K", "V", "family",
         "flags");
  for (int i = 0; i < n_paths; i++) {
    char err[KDA_ERRLEN], idbuf[256], flags[1024];
    kda_case c;
    if (kda_case_load(paths[i], &c, err, sizeof err) != KDA_OK) return kda_tool_fail(SUB, "%s", err);
    const char *id = case_id(&c, paths[i], idbuf, sizeof idbuf);
    if (kda_case_filter_match(filters, n_filters, id, c.manifest_json))
      printf("%-28s %6lld %7lld %4lld %4lld %5lld %5lld %-9s %s\n", id, (long long)c.p.N,
             (long long)c.p.T, (long long)c.p.H, (long long)c.p.HV, (long long)c.p.K,
             (long long)c.p.V, kda_family_name(c.p.family),
             kda_case_flags(c.manifest_json, flags, sizeof flags));
    kda_case_free(&c);
  }
  return KDA_EXIT_OK;
}

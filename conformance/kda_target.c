/* kda_target.c: a backend to score, as programs see it (kda_conform.h): its worker process
 * (kda_worker.c; its header kda_worker_internal.h is private) and what the worker learned when it loaded the backend.
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_worker_internal.h"

struct kda_target {
  kda_worker *w;
  kda_target_info info;
};

/* The worker's answers after loading, fixed for the run (a restarted worker must give the
 * same, SPEC.md §7.8). */
static void info_fill(kda_target *t) {
  kda_target_info *i = &t->info;
  const kda_call_result *lr = kda_worker_load_result(t->w);
  snprintf(i->name, sizeof i->name, "%s", kda_worker_name(t->w));
  snprintf(i->label, sizeof i->label, "%s", kda_worker_label(t->w));
  snprintf(i->description, sizeof i->description, "%s", kda_worker_description(t->w));
  i->cls = kda_worker_class(t->w);
  i->input_dtype = kda_worker_input_dtype(t->w), i->output_dtype = kda_worker_output_dtype(t->w);
  i->abi_version = kda_worker_abi_version(t->w), i->caps = kda_worker_caps(t->w);
  i->loaded = !lr;
  i->params_rejected = kda_worker_params_rejected(t->w);
  if (lr) i->load_result = *lr;
}

int kda_target_open(const kda_backend_ref *ref, const kda_call_opts *o, kda_target **out,
                    char *err, size_t errlen) {
  *out = NULL;
  kda_target *t = calloc(1, sizeof *t);
  if (!t) return snprintf(err, errlen, "out of memory"), KDA_ENOMEM;
  int st = kda_worker_start(ref, o, &t->w, err, errlen);
  if (st != KDA_OK) return free(t), st;
  info_fill(t);
  *out = t;
  return KDA_OK;
}

const kda_target_info *kda_target_info_get(const kda_target *t) { return &t->info; }

kda_worker *kda_target_worker(const kda_target *t) { return t->w; }

void kda_target_close(kda_target *t) {
  if (!t) return;
  kda_worker_stop(t->w);
  free(t);
}

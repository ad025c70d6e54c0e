/* kda_conform_list.h: the listings of `kda conform` (tools/kda_conform_list.c).
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_CONFORM_LIST_H
#define KDA_CONFORM_LIST_H

#include "kda_conform.h"

/* --list-backends: one entry per spec (every built-in when n_specs is 0); params is the
 * deprecated --params (may be NULL).  Built-ins are asked in-process, plugins in a worker
 * started with o (NULL: the defaults).  Prints a table, or with json one JSON document
 * ({"schema": "kda-backends/1", "backends": [...]}), on stdout; returns an exit status (0 also
 * when a backend cannot run here: its row says why). */
int kda_conform_list_backends(const char *const *specs, int n_specs, const char *params,
                              const kda_call_opts *o, int json);

/* --list-cases: the cases of paths that the -k filters select.  Returns an exit status. */
int kda_conform_list_cases(const char *const *filters, int n_filters, char *const *paths,
                           int n_paths);

/* --list-cases --json: {"schema": "kda-cases/1", "cases": [{"id", "path", "selected" (the
 * case itself is selected), "problem" {N T H HV K V family}, "flags", "comment", "design",
 * "input_precision", "intent" (kda_case_intent), "prompts" (the ids of its selected serving
 * prompts for mode serving, -1: none)}]}: every case of paths that is selected or has a
 * selected prompt, read without its token-major inputs.  Returns an exit status. */
int kda_conform_list_cases_json(const char *const *filters, int n_filters, char *const *paths,
                                int n_paths, int32_t serving);

#endif

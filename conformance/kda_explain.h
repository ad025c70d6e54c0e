/* kda_explain.h: what a case is for and why a report failed, in words (SPEC.md §7.9); one
 * formatter shared by the kda command's failure detail, results.jsonl and the Python package.
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_EXPLAIN_H
#define KDA_EXPLAIN_H

#include <stddef.h>
#include "kda_conform.h"

/* The defects a case was designed to catch: for each MISTAKE flag of its manifest's
 * golden.flags, "FLAG: description" from the catalog (vectors/kda_catalog.h), joined with
 * "; ", into buf ("" when none).  Returns buf. */
char *kda_case_intent(const char *manifest_json, char *buf, size_t cap);

/* The case in words for a failure's detail: "case: COMMENT (flags: A, B)" and, for a case
 * with MISTAKE flags, "; designed to catch: " kda_case_intent.  "" without a golden object. */
char *kda_case_about(const char *manifest_json, char *buf, size_t cap);

#endif

/* kda_filter.c: the case filter of `kda conform -k` (SPEC.md §7.8): globs on case ids and flags.
 * SPDX-License-Identifier: MIT
 *
 * Kept apart from the runner so that every front end (the kda command, the Python package)
 * selects cases by exactly the same rule.
 */
#include <fnmatch.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "kda_conform.h"

/* golden.flags (or a top-level flags array) of a parsed manifest, or NULL. */
static json_t *flags_of(json_t *m) {
  json_t *g = json_object_get(m, "golden");
  json_t *f = json_object_get(json_is_object(g) ? g : m, "flags");
  return json_is_array(f) ? f : NULL;
}

static int any_flag_matches(json_t *flags, const char *glob) {
  size_t i;
  json_t *f;
  json_array_foreach(flags, i, f) {
    if (json_is_string(f) && fnmatch(glob, json_string_value(f), 0) == 0) return 1;
  }
  return 0;
}

/* 1 when one pattern (without its '!') matches the case. */
static int pattern_matches(const char *pat, const char *id, json_t *flags) {
  if (strncmp(pat, "flag:", 5) == 0) return flags && any_flag_matches(flags, pat + 5);
  return fnmatch(pat, id ? id : "", 0) == 0;
}

/* The rule for one case or prompt: a pattern matches when it matches any of ids. */
static int filter_match(const char *const *patterns, int32_t n, const char *const *ids, int n_ids,
                        const char *manifest_json) {
  json_t *m = manifest_json ? json_loads(manifest_json, 0, NULL) : NULL;
  json_t *flags = m ? flags_of(m) : NULL;
  int have_positive = 0, positive = 0, negative = 0;
  for (int32_t i = 0; i < n; i++) {
    const char *p = patterns[i];
    if (!p) continue;
    int hit = 0;
    for (int k = 0; k < n_ids; k++) hit |= pattern_matches(p[0] == '!' ? p + 1 : p, ids[k], flags);
    if (p[0] == '!') {
      negative |= hit;
    } else {
      have_positive = 1;
      positive |= hit;
    }
  }
  json_decref(m);
  return !negative && (!have_positive || positive);
}

int kda_case_filter_match(const char *const *patterns, int32_t n, const char *case_id,
                          const char *manifest_json) {
  const char *ids[1] = {case_id};
  return filter_match(patterns, n, ids, 1, manifest_json);
}

int kda_prompt_filter_match(const char *const *patterns, int32_t n, const char *case_id,
                            const char *prompt_id, const char *manifest_json) {
  const char *ids[2] = {case_id, prompt_id};
  return filter_match(patterns, n, ids, 2, manifest_json);
}

char *kda_case_flags(const char *manifest_json, char *buf, size_t cap) {
  if (cap) buf[0] = 0;
  json_t *m = manifest_json ? json_loads(manifest_json, 0, NULL) : NULL;
  json_t *flags = m ? flags_of(m) : NULL;
  size_t i, used = 0;
  json_t *f;
  json_array_foreach(flags, i, f) {
    if (!json_is_string(f) || used >= cap) continue;
    int w = snprintf(buf + used, cap - used, "%s%s", used ? "," : "", json_string_value(f));
    used = w < 0 ? cap : used + (size_t)w;
  }
  json_decref(m);
  return buf;
}

/* kda_explain.c: what a case is for and why a report failed, in words (SPEC.md §7.9).
 * SPDX-License-Identifier: MIT
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "kda_catalog.h"
#include "kda_explain.h"

static const kda_catalog_flag *flag_named(const char *name) {
  for (int i = 0; i < KDA_FLAG_COUNT; i++) {
    const kda_catalog_flag *f = kda_catalog_flag_get(i);
    if (f && strcmp(f->name, name) == 0) return f;
  }
  return NULL;
}

char *kda_case_intent(const char *manifest_json, char *buf, size_t cap) {
  if (cap) buf[0] = 0;
  json_t *m = manifest_json ? json_loads(manifest_json, 0, NULL) : NULL;
  json_t *g = m ? json_object_get(m, "golden") : NULL;
  json_t *flags = json_object_get(json_is_object(g) ? g : m, "flags");
  size_t i, used = 0;
  json_t *f;
  json_array_foreach(flags, i, f) {
    const kda_catalog_flag *cf = json_is_string(f) ? flag_named(json_string_value(f)) : NULL;
    if (!cf || cf->kind != KDA_FLAG_MISTAKE || used >= cap) continue;
    int w = snprintf(buf + used, cap - used, "%s%s: %s", used ? "; " : "", cf->name,
                     cf->description);
    used = w < 0 ? cap : used + (size_t)w;
  }
  json_decref(m);
  return buf;
}

char *kda_case_about(const char *manifest_json, char *buf, size_t cap) {
  if (cap) buf[0] = 0;
  json_t *m = manifest_json ? json_loads(manifest_json, 0, NULL) : NULL;
  json_t *g = m ? json_object_get(m, "golden") : NULL;
  if (!json_is_object(g)) return json_decref(m), buf;
  json_t *comment = json_object_get(g, "comment"), *flags = json_object_get(g, "flags");
  size_t used = 0, i;
  int w = snprintf(buf, cap, "%s", json_is_string(comment) ? json_string_value(comment) : "");
  used = w < 0 || (size_t)w >= cap ? cap : (size_t)w;
  json_t *f;
  json_array_foreach(flags, i, f) {
    if (!json_is_string(f) || used >= cap) continue;
    w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : " (flags: ", json_string_value(f));
    used = w < 0 ? cap : used + (size_t)w;
  }
  if (json_array_size(flags) && used < cap) used += (size_t)snprintf(buf + used, cap - used, ")");
  json_decref(m);
  char intent[1536];
  if (used < cap && kda_case_intent(manifest_json, intent, sizeof intent)[0])
    snprintf(buf + used, cap - used, "; designed to catch: %s", intent);
  return buf;
}

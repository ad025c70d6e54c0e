/* kda_golden_check.c: one golden case file checked on its own (kda_golden_check.h).
 * SPDX-License-Identifier: MIT
 */
#include "kda_golden_check.h"

#include <jansson.h>
#include <string.h>

#include "kda_internal.h"
#include "kda_problem.h" /* status codes */
#include "kda_sha256.h"
#include "kda_zip_raw.h"

int kda_golden_check_members(const char *path, char *msg, size_t msglen) {
  kda_zip_member *m = NULL;
  int64_t nm = kda_zip_members_read(path, &m, msg, msglen);
  if (nm < 0) return KDA_EFORMAT;
  json_t *man = nm > 0 && strcmp(m[0].name, "manifest.json") == 0
                    ? json_loadb((const char *)m[0].data, m[0].len, 0, NULL) : NULL;
  json_t *sums = json_object_get(json_object_get(man, "golden"), "members_sha256");
  int st = json_is_object(sums) ? KDA_OK
                                : kda_fail(KDA_EFORMAT, msg, msglen,
                                           "%s: manifest.json has no golden.members_sha256", path);
  for (int64_t i = 1; !st && i < nm; i++) {
    char hex[65];
    json_t *want = json_object_get(sums, m[i].name);
    kda_sha256_of(m[i].data, m[i].len, hex);
    if (!json_is_string(want))
      st = kda_fail(KDA_EFORMAT, msg, msglen, "%s: member '%s' has no recorded SHA-256", path,
                    m[i].name);
    else if (strcmp(json_string_value(want), hex) != 0)
      st = kda_fail(KDA_EFORMAT, msg, msglen,
                    "%s: member '%s' has SHA-256 %s, the manifest records %s", path, m[i].name, hex,
                    json_string_value(want));
  }
  if (!st && (int64_t)json_object_size(sums) != nm - 1)
    st = kda_fail(KDA_EFORMAT, msg, msglen,
                  "%s: the manifest records %zu members, the archive has %lld", path,
                  json_object_size(sums), (long long)nm - 1);
  json_decref(man);
  kda_zip_members_free(m, nm);
  return st;
}

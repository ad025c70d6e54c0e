/* kda_golden_check.c: one golden case file checked on its own (kda_golden_check.h).
 * SPDX-License-Identifier: MIT
 */
#include "kda_golden_check.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "kda_internal.h"
#include "kda_npz.h"
#include "kda_problem.h" /* status codes */
#include "kda_sha256.h"
#include "kda_zip_raw.h"

/* The manifest's golden.members_sha256 (a golden gradient file's golden_grad.members_sha256,
 * SPEC.md §13.9; borrowed from man), or NULL with msg. */
static json_t *member_sums(const char *path, json_t *man, char *msg, size_t msglen) {
  json_t *sums = json_object_get(json_object_get(man, "golden"), "members_sha256");
  if (!json_is_object(sums))
    sums = json_object_get(json_object_get(man, "golden_grad"), "members_sha256");
  if (!json_is_object(sums))
    kda_fail(KDA_EFORMAT, msg, msglen,
             "%s: manifest.json has no golden.members_sha256 (nor golden_grad's)", path);
  return json_is_object(sums) ? sums : NULL;
}

/* Member name's bytes against the SHA-256 sums record for it. */
static int member_sum_check(const char *path, json_t *sums, const char *name,
                            const unsigned char *data, size_t len, char *msg, size_t msglen) {
  char hex[65];
  json_t *want = json_object_get(sums, name);
  kda_sha256_of(data, len, hex);
  if (!json_is_string(want))
    return kda_fail(KDA_EFORMAT, msg, msglen, "%s: member '%s' has no recorded SHA-256", path,
                    name);
  if (strcmp(json_string_value(want), hex) != 0)
    return kda_fail(KDA_EFORMAT, msg, msglen,
                    "%s: member '%s' has SHA-256 %s, the manifest records %s", path, name, hex,
                    json_string_value(want));
  return KDA_OK;
}

/* As many sums as members besides the manifest. */
static int member_count_check(const char *path, json_t *sums, int64_t members, char *msg,
                              size_t msglen) {
  if ((int64_t)json_object_size(sums) == members) return KDA_OK;
  return kda_fail(KDA_EFORMAT, msg, msglen, "%s: the manifest records %zu members, the archive "
                  "has %lld", path, json_object_size(sums), (long long)members);
}

int kda_golden_check_members(const char *path, char *msg, size_t msglen) {
  kda_zip_member *m = NULL;
  int64_t nm = kda_zip_members_read(path, &m, msg, msglen);
  if (nm < 0) return KDA_EFORMAT;
  json_t *man = nm > 0 && strcmp(m[0].name, "manifest.json") == 0
                    ? json_loadb((const char *)m[0].data, m[0].len, 0, NULL) : NULL;
  json_t *sums = member_sums(path, man, msg, msglen);
  int st = sums ? KDA_OK : KDA_EFORMAT;
  for (int64_t i = 1; !st && i < nm; i++)
    st = member_sum_check(path, sums, m[i].name, m[i].data, m[i].len, msg, msglen);
  if (!st) st = member_count_check(path, sums, nm - 1, msg, msglen);
  json_decref(man);
  kda_zip_members_free(m, nm);
  return st;
}

int kda_golden_check_members_open(struct kda_npz *z, char *msg, size_t msglen) {
  const char *path = kda_npz_path(z);
  const int64_t nm = kda_npz_member_count(z);
  char *text = NULL, *data = NULL;
  size_t len = 0;
  int st = nm > 0 && strcmp(kda_npz_member_name(z, 0), "manifest.json") == 0
               ? kda_npz_read_blob(z, "manifest.json", &text, &len, msg, msglen) : KDA_OK;
  json_t *man = text ? json_loadb(text, len, 0, NULL) : NULL;
  free(text);
  json_t *sums = st ? NULL : member_sums(path, man, msg, msglen);
  if (!st && !sums) st = KDA_EFORMAT;
  for (int64_t i = 1; !st && i < nm; i++) {
    const char *name = kda_npz_member_name(z, i);
    st = kda_npz_read_blob(z, name, &data, &len, msg, msglen);
    if (!st) st = member_sum_check(path, sums, name, (unsigned char *)data, len, msg, msglen);
    free(data), data = NULL;
  }
  if (!st) st = member_count_check(path, sums, nm - 1, msg, msglen);
  json_decref(man);
  return st ? KDA_EFORMAT : KDA_OK;
}

/* kda_zip_raw.c: every member of a zip archive as stored (kda_zip_raw.h).
 * SPDX-License-Identifier: MIT
 */
#include "kda_zip_raw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "kda_internal.h"

void kda_zip_members_free(kda_zip_member *m, int64_t n) {
  for (int64_t i = 0; m && i < n; i++) {
    free(m[i].name);
    free(m[i].data);
  }
  free(m);
}

int64_t kda_zip_members_read(const char *path, kda_zip_member **out, char *msg,
                             size_t msglen) {
  int ze = 0;
  *out = NULL;
  zip_t *za = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
  if (!za) {
    zip_error_t e;
    zip_error_init_with_code(&e, ze);
    kda_fail(-1, msg, msglen, "%s: not a readable zip archive: %s", path, zip_error_strerror(&e));
    zip_error_fini(&e);
    return -1;
  }
  const zip_int64_t n = zip_get_num_entries(za, 0);
  kda_zip_member *m = calloc((size_t)(n > 0 ? n : 1), sizeof *m);
  int64_t i = 0;
  for (; m && i < n; i++) {
    zip_stat_t zs;
    zip_file_t *zf = NULL;
    const char *name = zip_get_name(za, (zip_uint64_t)i, 0);
    int ok = name && zip_stat_index(za, (zip_uint64_t)i, 0, &zs) == 0 && (zs.valid & ZIP_STAT_SIZE);
    /* allocate only what the archive can back (deflate expands at most 1032:1, kda_npz.c) */
    if (ok) ok = (zs.valid & ZIP_STAT_COMP_SIZE) && zs.comp_size <= UINT64_MAX / 2048 &&
                 zs.size <= zs.comp_size * 1032 + 1024;
    if (ok) {
      m[i].name = strdup(name);
      m[i].len = (size_t)zs.size;
      m[i].data = malloc(m[i].len ? m[i].len : 1);
      ok = m[i].name && m[i].data && (zf = zip_fopen_index(za, (zip_uint64_t)i, 0)) != NULL;
    }
    if (ok) ok = zip_fread(zf, m[i].data, m[i].len) == (zip_int64_t)m[i].len;
    if (ok) {
      char extra;
      ok = zip_fread(zf, &extra, 1) == 0; /* reading to the end checks the CRC */
    }
    char why[128];
    snprintf(why, sizeof why, "%s", zf ? zip_file_strerror(zf) : zip_strerror(za));
    if (zf) zip_fclose(zf);
    if (!ok) {
      kda_fail(-1, msg, msglen, "%s: member '%s' (number %lld) cannot be read: %s", path,
               name ? name : "?", (long long)i, why);
      kda_zip_members_free(m, i + 1);
      zip_discard(za);
      return -1;
    }
  }
  zip_discard(za);
  if (!m) {
    kda_fail(-1, msg, msglen, "%s: out of memory", path);
    return -1;
  }
  *out = m;
  return (int64_t)n;
}

/* kda_case_load.c: opening a case file (SPEC.md §10.2): the manifest, then the input members
 * as stored or, for a production file, generated from the description (kda_case_gen.c).
 * SPDX-License-Identifier: MIT
 */
#include "kda_case.h"

#include <jansson.h>
#include <string.h>

#include "kda_case_internal.h"
#include "kda_internal.h"
#include "kda_npz.h"

static int load_from(kda_npz *z, const char *path, kda_case *c, int static_only, char *err,
                     size_t errlen) {
  json_t *root = NULL;
  int st = kda_case_read_manifest(z, path, c, &root, err, errlen);
  if (!st && kda_case_inputs_generated(root)) /* SPEC.md §10.2: inputs from the description */
    st = kda_case_load_generated(z, path, root, c, static_only, err, errlen);
  else if (!st)
    st = kda_case_load_members(z, path, c, static_only, err, errlen);
  json_decref(root);
  return st;
}

static int load(const char *path, kda_case *c, int static_only, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  if (!path) return kda_fail(KDA_EINVAL, err, errlen, "case path is NULL");
  kda_npz *z = NULL;
  int st = kda_npz_open(path, &z, err, errlen);
  if (st) return st;
  st = load_from(z, path, c, static_only, err, errlen);
  kda_npz_close(z);
  if (st) kda_case_free(c);
  return st;
}

int kda_case_read(struct kda_npz *z, kda_case *c, int static_only, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  if (!z) return kda_fail(KDA_EINVAL, err, errlen, "case archive is NULL");
  int st = load_from(z, kda_npz_path(z), c, static_only != 0, err, errlen);
  if (st) kda_case_free(c);
  return st;
}

int kda_case_load(const char *path, kda_case *c, char *err, size_t errlen) {
  return load(path, c, 0, err, errlen);
}

int kda_case_load_static(const char *path, kda_case *c, char *err, size_t errlen) {
  return load(path, c, 1, err, errlen);
}

/* kda_result.c: reading result files and output members, strictly (SPEC.md §10.2, §7.9).
 * SPDX-License-Identifier: MIT
 *
 * An output member (o, ht, hc, in a result file or as golden outputs in a case file) must have
 * exactly the problem's shape and dtype <f8 or <f4: a flat or transposed o has the right
 * element count and would otherwise be scored.  The .npy parser already refuses big-endian
 * and Fortran-order data.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_case_internal.h"
#include "kda_files.h"
#include "kda_internal.h"
#include "kda_npz.h"

#define RESULT_SCHEMA "kda-result/1"

/* The shape of output q (0 o, 1 ht, 2 hc) of problem p, in its state layout. */
static int output_shape(const kda_problem *p, int q, int64_t shape[4]) {
  const int vk = p->state_layout == KDA_STATE_VK;
  if (q == 0) {
    shape[0] = p->T, shape[1] = p->HV, shape[2] = p->V;
    return 3;
  }
  shape[0] = q == 1 ? p->N : p->n_checkpoints;
  shape[1] = p->HV;
  shape[2] = vk ? p->V : p->K;
  shape[3] = vk ? p->K : p->V;
  return 4;
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, cap, "(");
  for (int i = 0; i < ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, ")");
}

int kda_output_member_check(struct kda_npz *z, const char *path, const kda_problem *p,
                            const char *name, char *err, size_t errlen) {
  static const char *const names[3] = {"o", "ht", "hc"};
  int q = 0;
  while (q < 3 && strcmp(names[q], name) != 0) q++;
  if (q == 3) return kda_fail(KDA_EINVAL, err, errlen, "%s: '%s' is not an output", path, name);
  kda_array_info info;
  int st = kda_npz_info(z, name, &info, err, errlen);
  if (st == KDA_ENOTFOUND)
    return kda_fail(st, err, errlen, "%s: missing member '%s'", path, name);
  if (st) return st;
  if (info.dtype != KDA_DTYPE_F64 && info.dtype != KDA_DTYPE_F32)
    return kda_fail(KDA_EDTYPE, err, errlen, "%s: member '%s' has dtype '%s', expected '<f4' or "
                    "'<f8'", path, name, kda_dtype_descr(info.dtype));
  int64_t want[4];
  int nd = output_shape(p, q, want), same = info.ndim == nd;
  for (int i = 0; same && i < nd; i++) same = info.shape[i] == want[i];
  if (same) return KDA_OK;
  char got[160], exp[160];
  shape_text(got, sizeof got, info.ndim, info.shape);
  shape_text(exp, sizeof exp, nd, want);
  return kda_fail(KDA_ESHAPE, err, errlen, "%s: member '%s' has shape %s, expected %s %s", path,
                  name, got, exp,
                  q == 0 ? "[T, HV, V]"
                  : p->state_layout == KDA_STATE_VK ? (q == 1 ? "[N, HV, V, K]" : "[C, HV, V, K]")
                                                    : (q == 1 ? "[N, HV, K, V]" : "[C, HV, K, V]"));
}

int kda_output_members_read(struct kda_npz *z, const char *path, const kda_problem *p,
                            double *o, double *ht, double *hc, char *err, size_t errlen) {
  static const char *const names[3] = {"o", "ht", "hc"};
  double *dst[3] = {o, ht, hc};
  for (int q = 0; q < 3; q++) {
    if (!dst[q]) continue;
    int64_t shape[4];
    int nd = output_shape(p, q, shape);
    uint64_t n = 1;
    for (int i = 0; i < nd; i++) n *= (uint64_t)shape[i]; /* kda_problem_sizes_get bounded it */
    int st = kda_output_member_check(z, path, p, names[q], err, errlen);
    if (!st) st = kda_npz_read(z, names[q], KDA_DTYPE_F64, dst[q], n, err, errlen);
    if (st) return st;
  }
  return KDA_OK;
}

/* The manifest: exact JSON, the schema, a case_id that is an id and the case's own, and an
 * optional "not_supported" reason (SPEC.md §7.9). */
static int result_manifest_check(struct kda_npz *z, const char *path, const kda_case *c,
                                 char *err, size_t errlen) {
  char *text = NULL;
  size_t len = 0;
  int st = kda_npz_read_blob(z, "manifest.json", &text, &len, err, errlen);
  if (st == KDA_ENOTFOUND) return kda_fail(st, err, errlen, "%s: missing member 'manifest.json'", path);
  if (st) return st;
  json_t *m = kda_json_load_exact(path, text, len, err, errlen);
  free(text);
  if (!m) return KDA_EFORMAT;
  const char *schema = json_string_value(json_object_get(m, "schema"));
  json_t *cid = json_object_get(m, "case_id"), *ns = json_object_get(m, "not_supported");
  if (!json_is_object(m) || !schema || strcmp(schema, RESULT_SCHEMA) != 0)
    st = kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest schema is not %s", path, RESULT_SCHEMA);
  else if (cid && !json_is_string(cid))
    st = kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest key 'case_id' is not a string", path);
  else if (cid && json_string_length(cid) > 0 &&
           kda_id_check(json_string_value(cid), "case_id", err, errlen) != KDA_OK) {
    char tmp[KDA_ERRLEN];
    snprintf(tmp, sizeof tmp, "%s", err);
    st = kda_fail(KDA_EFORMAT, err, errlen, "%s: %s", path, tmp);
  } else if (cid && c->id && strcmp(json_string_value(cid), c->id) != 0)
    st = kda_fail(KDA_EINVAL, err, errlen, "%s: case_id '%s' is not '%s'", path,
                  json_string_value(cid), c->id);
  else if (ns && (!json_is_string(ns) || json_string_length(ns) == 0))
    st = kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest key 'not_supported' is not a "
                  "non-empty string (the reason)", path);
  else if (ns)
    st = kda_fail(KDA_EUNSUPPORTED, err, errlen, "%s", json_string_value(ns));
  json_decref(m);
  return st;
}

int kda_result_load(const char *path, const kda_case *c, double *o, double *ht, double *hc,
                    char *err, size_t errlen) {
  struct kda_npz *z = NULL;
  if (!path || !c) return kda_fail(KDA_EINVAL, err, errlen, "result path or case is NULL");
  int st = kda_npz_open(path, &z, err, errlen);
  if (st) return st;
  st = result_manifest_check(z, path, c, err, errlen);
  if (!st) st = kda_output_members_read(z, path, &c->p, o, ht, hc, err, errlen);
  kda_npz_close(z);
  return st;
}

/* kda_case.c: case files (inputs of one problem) and result files (SPEC.md §10.2, §10.3).
 * SPDX-License-Identifier: MIT
 *
 * Manifest of a case (kda-case/1), keys in this order:
 *   schema "kda-case/1", generator "kda VERSION", id, problem {N T H HV K V n_checkpoints
 *   family gate beta l2 head_map state_layout has_A_log has_initial_state want_final_state
 *   scale lower_bound l2_eps}, input_precision, members {NAME: {precision}}, generator_info.
 * Manifest of a result (kda-result/1):
 *   schema, generator, backend, case_id, problem, inputs_sha256.
 * Reading is strict about what the problem needs and lenient about what it does not know
 * (extra top-level keys and extra members are ignored; unknown problem keys are errors).
 */
#include "kda_case.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case_internal.h"
#include "kda_files.h"
#include "kda_internal.h"
#include "kda_npz.h"
#include "kda_sha256.h"

#define KDA_CASE_SCHEMA "kda-case/1"
#define KDA_RESULT_SCHEMA "kda-result/1"
#define KDA_JSON_FLAGS (JSON_INDENT(1) | JSON_REAL_PRECISION(17))

const char *const kda_case_member_names[KDA_M_COUNT] = {
    "q", "k", "v", "g", "beta", "A_log", "dt_bias", "cu_seqlens", "h0", "checkpoints"};

/* Prefixes an error message already in err with "path: what: ". */
static int prefix_err(int status, char *err, size_t errlen, const char *path, const char *what) {
  if (err && errlen) {
    char tmp[KDA_ERRLEN];
    snprintf(tmp, sizeof tmp, "%s", err);
    snprintf(err, errlen, "%s: %s%s%s", path, what, *what ? ": " : "", tmp);
  }
  return status;
}

/* ---- Precisions (names: ref/kda_precision.h, SPEC.md §10.3). */
int32_t kda_case_member_prec(int member, int32_t prec) {
  if (member == KDA_M_CU_SEQLENS || member == KDA_M_CHECKPOINTS) return -1;
  if ((member == KDA_M_A_LOG || member == KDA_M_DT_BIAS) && prec != KDA_PRECISION_FP64)
    return KDA_PRECISION_FP32;
  return prec;
}

double kda_case_round(int32_t prec, double x) {
  switch (prec) {
  case KDA_PRECISION_FP32: return (double)kda_round_f32(x);
  case KDA_PRECISION_BF16: return kda_round_bf16(x);
  case KDA_PRECISION_FP16: return kda_round_f16(x);
  default: return x;
  }
}

/* The .npy dtype a member of precision prec is stored in. */
static int32_t prec_dtype(int32_t prec) {
  switch (prec) {
  case KDA_PRECISION_FP64: return KDA_DTYPE_F64;
  case KDA_PRECISION_FP16: return KDA_DTYPE_F16;
  default: return KDA_DTYPE_F32;
  }
}

/* The manifest's name of a member's precision ("i64" for the index members). */
static const char *member_prec_name(int m, int32_t prec) {
  int32_t mp = kda_case_member_prec(m, prec);
  return mp < 0 ? "i64" : kda_precision_file_name(mp);
}

static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* Sizes bounded by the data (SPEC.md §10.2): what a case makes a reader allocate, o and the
 * states of every sequence and checkpoint (T*HV*V + (N + C)*HV*K*V elements), is at most
 * KDA_CASE_ALLOC_FREE elements or KDA_CASE_ALLOC_RATIO times the input elements the file holds.
 * Declared sizes alone (T = 0 and K = V = 65536: a 2 KB file, a 32 GiB state) witness
 * nothing.  Checked on load after the members are read (so the inputs are witnessed), and on
 * save, before anything is allocated for outputs. */
static int check_alloc_bound(const char *path, const kda_problem *p,
                             const kda_problem_sizes *sz, char *err, size_t errlen) {
  /* N*HV*K*V cannot overflow: kda_problem_sizes_get made sz */
  uint64_t in = 0, state = (uint64_t)p->N * (uint64_t)p->HV * (uint64_t)p->K * (uint64_t)p->V;
  uint64_t out;
  const uint64_t parts[] = {sz->q, sz->k, sz->v, sz->g, sz->beta, sz->A_log, sz->dt_bias,
                            sz->h0, sz->cu_seqlens, sz->checkpoints};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) in = add_sat(in, parts[i]);
  out = add_sat(add_sat(sz->o, state), sz->hc);
  if (out <= KDA_CASE_ALLOC_FREE || out / KDA_CASE_ALLOC_RATIO < in) return KDA_OK;
  return kda_fail(KDA_EFORMAT, err, errlen,
                  "%s: the problem (N=%lld T=%lld HV=%lld K=%lld V=%lld C=%lld) needs %llu "
                  "output and state elements but the file holds %llu input elements: at most "
                  "%llu or %d times the inputs (SPEC.md 10.2)", path, (long long)p->N,
                  (long long)p->T, (long long)p->HV, (long long)p->K, (long long)p->V,
                  (long long)p->n_checkpoints, (unsigned long long)out, (unsigned long long)in,
                  (unsigned long long)KDA_CASE_ALLOC_FREE, KDA_CASE_ALLOC_RATIO);
}

/* ---- Member specifications: shape, names of the axes, why the member is needed. */
typedef struct member_spec {
  int used;                  /* the problem reads the member */
  int ndim;
  int64_t shape[4];
  const char *dims[4];       /* symbolic shape for messages: "T", "HV", ... */
  const char *axes[4];       /* element index names: "t", "hv", ... */
  uint64_t count;
  char reason[96];           /* "needed by ..." */
} member_spec;

static void spec_set(member_spec *m, int used, int ndim, const int64_t *shape,
                     const char *const *dims, const char *const *axes) {
  m->used = used;
  m->ndim = ndim;
  m->count = 1;
  for (int i = 0; i < ndim; i++) {
    m->shape[i] = shape[i];
    m->dims[i] = dims[i];
    m->axes[i] = axes[i];
    m->count *= (uint64_t)shape[i]; /* cannot overflow: kda_problem_sizes_get checked */
  }
}

/* Fills m[KDA_M_COUNT]; the problem must have passed kda_problem_sizes_get. */
static void member_specs(const kda_problem *p, member_spec m[KDA_M_COUNT]) {
  const int64_t GW = kda_problem_gate_width(p) > 0 ? kda_problem_gate_width(p) : 1;
  const char *gw = p->family == KDA_FAMILY_GDN ? "1" : "K";
  const int vk = p->state_layout == KDA_STATE_VK;
  memset(m, 0, sizeof(member_spec) * KDA_M_COUNT);
  spec_set(&m[KDA_M_Q], 1, 3, (int64_t[]){p->T, p->H, p->K}, (const char *[]){"T", "H", "K"},
           (const char *[]){"t", "h", "k"});
  m[KDA_M_K] = m[KDA_M_Q];
  spec_set(&m[KDA_M_V], 1, 3, (int64_t[]){p->T, p->HV, p->V},
           (const char *[]){"T", "HV", "V"}, (const char *[]){"t", "hv", "v"});
  spec_set(&m[KDA_M_G], kda_problem_uses_g(p), 3, (int64_t[]){p->T, p->HV, GW},
           (const char *[]){"T", "HV", gw}, (const char *[]){"t", "hv", "k"});
  spec_set(&m[KDA_M_BETA], 1, 2, (int64_t[]){p->T, p->HV}, (const char *[]){"T", "HV"},
           (const char *[]){"t", "hv"});
  spec_set(&m[KDA_M_A_LOG], kda_problem_uses_A_log(p), 1, (int64_t[]){p->HV},
           (const char *[]){"HV"}, (const char *[]){"hv"});
  spec_set(&m[KDA_M_DT_BIAS], kda_problem_uses_dt_bias(p), 2, (int64_t[]){p->HV, GW},
           (const char *[]){"HV", gw}, (const char *[]){"hv", "k"});
  spec_set(&m[KDA_M_CU_SEQLENS], 1, 1, (int64_t[]){p->N + 1}, (const char *[]){"N+1"},
           (const char *[]){"n"});
  spec_set(&m[KDA_M_H0], p->has_initial_state, 4,
           (int64_t[]){p->N, p->HV, vk ? p->V : p->K, vk ? p->K : p->V},
           (const char *[]){"N", "HV", vk ? "V" : "K", vk ? "K" : "V"},
           (const char *[]){"n", "hv", vk ? "v" : "k", vk ? "k" : "v"});
  spec_set(&m[KDA_M_CHECKPOINTS], p->n_checkpoints > 0, 1, (int64_t[]){p->n_checkpoints},
           (const char *[]){"C"}, (const char *[]){"c"});
  const char *gate = kda_gate_name(p->gate_mode) ? kda_gate_name(p->gate_mode) : "?";
  for (int i = 0; i < KDA_M_COUNT; i++) snprintf(m[i].reason, sizeof m[i].reason, "every problem");
  snprintf(m[KDA_M_G].reason, sizeof m[KDA_M_G].reason, "gate mode %s", gate);
  snprintf(m[KDA_M_DT_BIAS].reason, sizeof m[KDA_M_DT_BIAS].reason, "gate mode %s", gate);
  snprintf(m[KDA_M_A_LOG].reason, sizeof m[KDA_M_A_LOG].reason, "gate mode %s with has_A_log",
           gate);
  snprintf(m[KDA_M_CU_SEQLENS].reason, sizeof m[KDA_M_CU_SEQLENS].reason, "N = %lld",
           (long long)p->N);
  snprintf(m[KDA_M_H0].reason, sizeof m[KDA_M_H0].reason, "has_initial_state");
  snprintf(m[KDA_M_CHECKPOINTS].reason, sizeof m[KDA_M_CHECKPOINTS].reason,
           "n_checkpoints = %lld", (long long)p->n_checkpoints);
}

void kda_case_member_layout(const kda_problem *p, int m, int32_t prec, int *used,
                            kda_array_info *info) {
  member_spec s[KDA_M_COUNT];
  member_specs(p, s);
  const int is_index = m == KDA_M_CU_SEQLENS || m == KDA_M_CHECKPOINTS;
  memset(info, 0, sizeof *info);
  *used = s[m].used;
  info->dtype = is_index ? KDA_DTYPE_I64 : prec_dtype(kda_case_member_prec(m, prec));
  info->ndim = s[m].ndim;
  for (int d = 0; d < s[m].ndim; d++) info->shape[d] = s[m].shape[d];
  info->count = s[m].count;
  info->nbytes = s[m].count * kda_dtype_size(info->dtype);
}

/* "[8,2,4]" */
static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* "[t=4,h=0,k=1]" for flat element index i. */
static void format_index(char *buf, size_t cap, const member_spec *m, uint64_t i) {
  uint64_t idx[4] = {0};
  for (int d = m->ndim - 1; d >= 0; d--) {
    idx[d] = i % (uint64_t)m->shape[d];
    i /= (uint64_t)m->shape[d];
  }
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < m->ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s=%llu", d ? "," : "", m->axes[d],
                          (unsigned long long)idx[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* ---- Value checks shared by load and save (SPEC.md §6, §10.3). */
static double **case_slot(kda_case *c, int m) {
  switch (m) {
  case KDA_M_Q: return &c->q;
  case KDA_M_K: return &c->k;
  case KDA_M_V: return &c->v;
  case KDA_M_G: return &c->g;
  case KDA_M_BETA: return &c->beta;
  case KDA_M_A_LOG: return &c->A_log;
  case KDA_M_DT_BIAS: return &c->dt_bias;
  case KDA_M_H0: return &c->h0;
  default: return NULL;
  }
}

/* Finite everywhere (g may be -inf in the pre-gated mode) and exact in the precision. */
static int check_member_values(const char *path, const kda_case *c, int m,
                               const member_spec *s, char *err, size_t errlen) {
  const double *x = kda_case_array(c, m);
  const int32_t prec = kda_case_member_prec(m, c->input_precision);
  const int ninf_ok = m == KDA_M_G && c->p.gate_mode == KDA_GATE_LOG;
  char at[128];
  for (uint64_t i = 0; i < s->count; i++) {
    double xi = x[i];
    if (isnan(xi) || (isinf(xi) && !(xi < 0 && ninf_ok))) {
      format_index(at, sizeof at, s, i);
      return kda_fail(KDA_ENONFINITE, err, errlen, "%s: member '%s' element %llu %s is %s%s", path,
                      kda_case_member_names[m], (unsigned long long)i, at,
                      isnan(xi) ? "NaN" : xi > 0 ? "+Inf" : "-Inf",
                      m == KDA_M_G && !isnan(xi) && xi < 0 ? " (allowed only with gate mode log)"
                                                           : "");
    }
    if (!isinf(xi) && kda_case_round(prec, xi) != xi) {
      format_index(at, sizeof at, s, i);
      return kda_fail(KDA_EINVAL, err, errlen,
                      "%s: member '%s' element %llu %s = %.17g is not exact in %s "
                      "(input_precision %s)",
                      path, kda_case_member_names[m], (unsigned long long)i, at, xi,
                      kda_precision_file_name(prec), kda_precision_file_name(c->input_precision));
    }
  }
  return KDA_OK;
}

static int check_values(const char *path, const kda_case *c, const member_spec *s, char *err,
                        size_t errlen) {
  for (int m = 0; m < KDA_M_COUNT; m++) {
    if (!s[m].used || !kda_case_array(c, m)) continue;
    int st = check_member_values(path, c, m, &s[m], err, errlen);
    if (st) return st;
  }
  return KDA_OK;
}

/* ---- Manifest writing. */
static json_t *problem_json(const kda_problem *p) {
  json_t *o = json_object();
  if (!o) return NULL;
  int bad = 0;
  bad |= json_object_set_new(o, "N", json_integer(p->N));
  bad |= json_object_set_new(o, "T", json_integer(p->T));
  bad |= json_object_set_new(o, "H", json_integer(p->H));
  bad |= json_object_set_new(o, "HV", json_integer(p->HV));
  bad |= json_object_set_new(o, "K", json_integer(p->K));
  bad |= json_object_set_new(o, "V", json_integer(p->V));
  bad |= json_object_set_new(o, "n_checkpoints", json_integer(p->n_checkpoints));
  bad |= json_object_set_new(o, "family", json_string(kda_family_name(p->family)));
  bad |= json_object_set_new(o, "gate", json_string(kda_gate_name(p->gate_mode)));
  bad |= json_object_set_new(o, "beta", json_string(kda_beta_name(p->beta_mode)));
  bad |= json_object_set_new(o, "l2", json_string(kda_l2_name(p->l2_mode)));
  bad |= json_object_set_new(o, "head_map", json_string(kda_head_map_name(p->head_map)));
  bad |= json_object_set_new(o, "state_layout",
                             json_string(kda_state_layout_name(p->state_layout)));
  bad |= json_object_set_new(o, "has_A_log", json_boolean(p->has_A_log));
  bad |= json_object_set_new(o, "has_initial_state", json_boolean(p->has_initial_state));
  bad |= json_object_set_new(o, "want_final_state", json_boolean(p->want_final_state));
  bad |= json_object_set_new(o, "scale", json_real(p->scale));
  bad |= json_object_set_new(o, "lower_bound", json_real(p->lower_bound));
  bad |= json_object_set_new(o, "l2_eps", json_real(p->l2_eps));
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

/* The generator_info object: parsed from extra_json, else carried over from c->manifest_json;
 * *out = NULL when there is none. */
static int generator_info(const kda_case *c, const char *extra_json, json_t **out, char *err,
                          size_t errlen) {
  *out = NULL;
  if (extra_json) {
    json_error_t je;
    json_t *x = json_loads(extra_json, 0, &je);
    if (!x || !json_is_object(x)) {
      json_decref(x);
      return kda_fail(KDA_EINVAL, err, errlen, "generator_info is not a JSON object: %s",
                      x ? "wrong type" : je.text);
    }
    *out = x;
    return KDA_OK;
  }
  if (c->manifest_json) {
    json_t *m = json_loads(c->manifest_json, 0, NULL);
    json_t *gi = m ? json_object_get(m, "generator_info") : NULL;
    if (json_is_object(gi)) *out = json_incref(gi);
    json_decref(m);
  }
  return KDA_OK;
}

static char *dump_json(json_t *o) { return json_dumps(o, KDA_JSON_FLAGS); }

static int problem_json_ok(const kda_problem *p, char *err, size_t errlen) {
  int st = kda_problem_check(p, err, errlen);
  if (st) return st;
  if (!isfinite(p->lower_bound))
    return kda_fail(KDA_EINVAL, err, errlen, "lower_bound %g is not finite", p->lower_bound);
  return KDA_OK;
}

int kda_case_manifest_text(const kda_case *c, const char *extra_json, char **out, char *err,
                           size_t errlen) {
  *out = NULL;
  int st = problem_json_ok(&c->p, err, errlen);
  if (st) return st;
  if (!kda_precision_file_name(c->input_precision))
    return kda_fail(KDA_EINVAL, err, errlen, "invalid input precision %d", (int)c->input_precision);
  if (c->id && c->id[0] && (st = kda_id_check(c->id, "case id", err, errlen)) != KDA_OK)
    return st;
  json_t *gi = NULL;
  st = generator_info(c, extra_json, &gi, err, errlen);
  if (st) return st;
  member_spec s[KDA_M_COUNT];
  member_specs(&c->p, s);
  json_t *o = json_object(), *members = json_object();
  int bad = !o || !members;
  if (!bad) {
    bad |= json_object_set_new(o, "schema", json_string(KDA_CASE_SCHEMA));
    bad |= json_object_set_new(o, "generator", json_string(KDA_GENERATOR));
    bad |= json_object_set_new(o, "id", json_string(c->id ? c->id : ""));
    bad |= json_object_set_new(o, "problem", problem_json(&c->p));
    bad |= json_object_set_new(o, "input_precision",
                               json_string(kda_precision_file_name(c->input_precision)));
    for (int m = 0; m < KDA_M_COUNT; m++)
      if (s[m].used)
        bad |= json_object_set_new(members, kda_case_member_names[m],
                                   json_pack("{s:s}", "precision",
                                             member_prec_name(m, c->input_precision)));
    bad |= json_object_set(o, "members", members);
    if (gi) bad |= json_object_set(o, "generator_info", gi);
  }
  if (!bad) *out = dump_json(o);
  json_decref(o);
  json_decref(members);
  json_decref(gi);
  if (bad) /* json_string fails on text that is not UTF-8 (an id) as well as on memory */
    return kda_fail(KDA_EINVAL, err, errlen, "cannot build the manifest (id not UTF-8, or memory)");
  return *out ? KDA_OK : kda_fail(KDA_ENOMEM, err, errlen, "out of memory writing the manifest");
}

/* ---- Manifest reading. */
static int get_int(const char *path, json_t *pj, const char *key, int64_t *out, char *err,
                   size_t errlen) {
  json_t *x = json_object_get(pj, key);
  if (!json_is_integer(x))
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest key 'problem.%s' is not an integer",
                    path, key);
  *out = json_integer_value(x);
  return KDA_OK;
}

/* One optional problem key (the required shape keys were read before). */
static int parse_problem_key(const char *path, const char *key, json_t *x, kda_problem *p,
                             char *err, size_t errlen) {
  static const char *const modes[] = {"family", "gate", "beta", "l2", "head_map", "state_layout"};
  int32_t *mode_fields[] = {&p->family, &p->gate_mode, &p->beta_mode,
                            &p->l2_mode, &p->head_map, &p->state_layout};
  static const char *const flags[] = {"has_A_log", "has_initial_state", "want_final_state"};
  int32_t *flag_fields[] = {&p->has_A_log, &p->has_initial_state, &p->want_final_state};
  static const char *const reals[] = {"scale", "lower_bound", "l2_eps"};
  double *real_fields[] = {&p->scale, &p->lower_bound, &p->l2_eps};
  static const char *const ints[] = {"N", "T", "H", "HV", "K", "V", "n_checkpoints"};
  int64_t *int_fields[] = {&p->N, &p->T, &p->H, &p->HV, &p->K, &p->V, &p->n_checkpoints};
  for (int i = 0; i < 7; i++)
    if (strcmp(key, ints[i]) == 0) {
      if (!json_is_integer(x))
        return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest key 'problem.%s' is not an integer",
                        path, key);
      *int_fields[i] = json_integer_value(x);
      return KDA_OK;
    }
  for (int i = 0; i < 6; i++)
    if (strcmp(key, modes[i]) == 0) {
      if (!json_is_string(x))
        return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest key 'problem.%s' is not a string",
                        path, key);
      if (kda_mode_parse(modes[i], json_string_value(x), mode_fields[i]) != KDA_OK)
        return kda_fail(KDA_EINVAL, err, errlen, "%s: manifest: unknown %s mode '%s'", path, key,
                        json_string_value(x));
      return KDA_OK;
    }
  for (int i = 0; i < 3; i++)
    if (strcmp(key, flags[i]) == 0) {
      if (!json_is_boolean(x))
        return kda_fail(KDA_EFORMAT, err, errlen,
                        "%s: manifest key 'problem.%s' is not true or false", path, key);
      *flag_fields[i] = json_is_true(x) ? 1 : 0;
      return KDA_OK;
    }
  for (int i = 0; i < 3; i++)
    if (strcmp(key, reals[i]) == 0) {
      if (!json_is_number(x))
        return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest key 'problem.%s' is not a number",
                        path, key);
      *real_fields[i] = json_number_value(x);
      return KDA_OK;
    }
  return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest has unknown key 'problem.%s'", path, key);
}

/* problem: T, H, HV, K, V required; every other key defaults as kda_problem_init says. */
static int parse_problem(const char *path, json_t *pj, kda_problem *p, char *err,
                         size_t errlen) {
  static const char *const req[] = {"T", "H", "HV", "K", "V"};
  int64_t d[5];
  if (!json_is_object(pj))
    return kda_fail(pj ? KDA_EFORMAT : KDA_ENOTFOUND, err, errlen,
                    "%s: manifest key 'problem' is %s", path, pj ? "not an object" : "missing");
  for (int i = 0; i < 5; i++) {
    if (!json_object_get(pj, req[i]))
      return kda_fail(KDA_ENOTFOUND, err, errlen, "%s: manifest key 'problem.%s' is missing", path,
                      req[i]);
    int st = get_int(path, pj, req[i], &d[i], err, errlen);
    if (st) return st;
  }
  kda_problem_init(p, d[0], d[1], d[2], d[3], d[4]);
  const char *key;
  json_t *x;
  json_object_foreach(pj, key, x) {
    int st = parse_problem_key(path, key, x, p, err, errlen);
    if (st) return st;
  }
  return KDA_OK; /* scale, when absent, is K^-1/2 of this K (kda_problem_init) */
}

json_t *kda_json_load_exact(const char *path, const char *text, size_t len, char *err,
                            size_t errlen) {
  json_error_t je;
  /* json_loadb with the member's length: bytes after the value (a NUL and garbage) are an
   * error, where json_loads would stop at the NUL (SPEC.md §10.2). */
  json_t *m = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!m) { /* jansson quotes the bytes near the error: one line of report text */
    kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest.json is not valid JSON (line %d: %s)", path,
             je.line, je.text);
    if (err) kda_text_clean(err, errlen, err, 0);
  }
  return m;
}

/* Top level: schema, problem, input_precision, id. */
static int parse_manifest(const char *path, const char *text, size_t len, kda_case *c,
                          json_t **root, char *err, size_t errlen) {
  json_t *m = kda_json_load_exact(path, text, len, err, errlen);
  *root = m;
  if (!m) return KDA_EFORMAT;
  if (!json_is_object(m))
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest.json is not a JSON object", path);
  json_t *schema = json_object_get(m, "schema");
  if (!schema)
    return kda_fail(KDA_ENOTFOUND, err, errlen, "%s: manifest key 'schema' is missing", path);
  if (!json_is_string(schema) || strcmp(json_string_value(schema), KDA_CASE_SCHEMA) != 0)
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest schema is not \"%s\"", path,
                    KDA_CASE_SCHEMA);
  int st = parse_problem(path, json_object_get(m, "problem"), &c->p, err, errlen);
  if (st) return st;
  json_t *prec = json_object_get(m, "input_precision");
  if (!prec)
    return kda_fail(KDA_ENOTFOUND, err, errlen, "%s: manifest key 'input_precision' is missing",
                    path);
  if (!json_is_string(prec) || kda_precision_parse(json_string_value(prec), &c->input_precision) ||
      !kda_precision_file_name(c->input_precision))
    return kda_fail(KDA_EINVAL, err, errlen,
                    "%s: manifest input_precision is not one of f64, f32, bf16, f16", path);
  json_t *id = json_object_get(m, "id");
  if (id && !json_is_string(id))
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest key 'id' is not a string", path);
  if (id && json_string_length(id) > 0 && /* "" is allowed: no id (SPEC.md §10.2) */
      kda_id_check(json_string_value(id), "manifest id", err, errlen) != KDA_OK)
    return prefix_err(KDA_EFORMAT, err, errlen, path, "");
  if (id && !(c->id = strdup(json_string_value(id))))
    return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", path);
  return KDA_OK;
}

/* members {NAME: {precision}} is optional; a listed member's precision must be what the
 * input precision gives it (kda_case_member_prec). */
static int check_members_map(const char *path, json_t *root, const kda_case *c, char *err,
                             size_t errlen) {
  json_t *mm = json_object_get(root, "members");
  if (!mm) return KDA_OK;
  if (!json_is_object(mm))
    return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest key 'members' is not an object", path);
  for (int m = 0; m < KDA_M_COUNT; m++) {
    json_t *e = json_object_get(mm, kda_case_member_names[m]);
    if (!e) continue;
    json_t *pr = json_is_object(e) ? json_object_get(e, "precision") : NULL;
    if (!json_is_object(e) || (pr && !json_is_string(pr)))
      return kda_fail(KDA_EFORMAT, err, errlen, "%s: manifest entry 'members.%s' is malformed",
                      path, kda_case_member_names[m]);
    const char *want = member_prec_name(m, c->input_precision);
    if (pr && strcmp(json_string_value(pr), want) != 0)
      return kda_fail(KDA_EINVAL, err, errlen,
                      "%s: member '%s' is declared precision '%s' in the "
                      "manifest, expected '%s' (input_precision %s)",
                      path, kda_case_member_names[m], json_string_value(pr), want,
                      kda_precision_file_name(c->input_precision));
  }
  return KDA_OK;
}

/* ---- Member reading. */
static int check_member_info(const char *path, int m, const member_spec *s,
                             const kda_array_info *info, char *err, size_t errlen) {
  const int is_index = m == KDA_M_CU_SEQLENS || m == KDA_M_CHECKPOINTS;
  const int dt = info->dtype;
  int dtype_ok = is_index ? (dt == KDA_DTYPE_I64 || dt == KDA_DTYPE_I32)
                          : (dt == KDA_DTYPE_F64 || dt == KDA_DTYPE_F32 || dt == KDA_DTYPE_F16);
  if (!dtype_ok)
    return kda_fail(KDA_EDTYPE, err, errlen, "%s: member '%s' has dtype %s, expected %s", path,
                    kda_case_member_names[m], kda_dtype_descr(dt) ? kda_dtype_descr(dt) : "?",
                    is_index ? "<i8 or <i4" : "<f8, <f4 or <f2");
  int same = info->ndim == s->ndim;
  for (int d = 0; same && d < s->ndim; d++) same = info->shape[d] == s->shape[d];
  if (same) return KDA_OK;
  char got[160], want[160], dims[64];
  format_shape(got, sizeof got, info->ndim, info->shape);
  format_shape(want, sizeof want, s->ndim, s->shape);
  size_t n = (size_t)snprintf(dims, sizeof dims, "[");
  for (int d = 0; d < s->ndim && n < sizeof dims; d++)
    n += (size_t)snprintf(dims + n, sizeof dims - n, "%s%s", d ? "," : "", s->dims[d]);
  if (n < sizeof dims) snprintf(dims + n, sizeof dims - n, "]");
  return kda_fail(KDA_ESHAPE, err, errlen, "%s: member '%s' has shape %s, expected %s = %s", path,
                  kda_case_member_names[m], got, dims, want);
}

/* Loads one member (present or not) into the case. */
static int load_member(kda_npz *z, const char *path, int m, const member_spec *s, kda_case *c,
                       char *err, size_t errlen) {
  const char *name = kda_case_member_names[m];
  const int present = kda_npz_has(z, name);
  if (!s->used) {
    if (present)
      return kda_fail(KDA_ESHAPE, err, errlen,
                      "%s: member '%s' is present but the problem does not use it", path, name);
    return KDA_OK;
  }
  if (!present) {
    if (m == KDA_M_CU_SEQLENS && c->p.N == 1) return KDA_OK; /* {0, T} below */
    return kda_fail(KDA_ENOTFOUND, err, errlen, "%s: missing member '%s' (needed by %s)", path,
                    name, s->reason);
  }
  kda_array_info info;
  int st = kda_npz_info(z, name, &info, err, errlen);
  if (!st) st = check_member_info(path, m, s, &info, err, errlen);
  if (st) return st;
  if (s->count == 0) { /* an empty member (T = 0): keep a non-NULL buffer */
    void *e = calloc(1, sizeof(double));
    if (!e) return kda_fail(KDA_ENOMEM, err, errlen, "%s: out of memory", path);
    if (m == KDA_M_CU_SEQLENS) c->cu_seqlens = e;
    else if (m == KDA_M_CHECKPOINTS) c->checkpoints = e;
    else *case_slot(c, m) = e;
    return KDA_OK;
  }
  if (m == KDA_M_CU_SEQLENS) return kda_npz_load_i64(z, name, NULL, &c->cu_seqlens, err, errlen);
  if (m == KDA_M_CHECKPOINTS)
    return kda_npz_load_i64(z, name, NULL, &c->checkpoints, err, errlen);
  return kda_npz_load_f64(z, name, NULL, case_slot(c, m), err, errlen);
}

static int default_cu_seqlens(kda_case *c, char *err, size_t errlen) {
  if (c->cu_seqlens) return KDA_OK;
  c->cu_seqlens = malloc(2 * sizeof(int64_t));
  if (!c->cu_seqlens) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  c->cu_seqlens[0] = 0;
  c->cu_seqlens[1] = c->p.T;
  return KDA_OK;
}

/* The token-major inputs, which kda_case_load_static leaves in the file. */
static int token_major(int m) {
  return m == KDA_M_Q || m == KDA_M_K || m == KDA_M_V || m == KDA_M_G || m == KDA_M_BETA;
}

int kda_case_read_manifest(kda_npz *z, const char *path, kda_case *c, json_t **root,
                           char *err, size_t errlen) {
  char *text = NULL;
  size_t len = 0;
  *root = NULL;
  int st = kda_npz_read_blob(z, "manifest.json", &text, &len, err, errlen);
  if (st == KDA_ENOTFOUND)
    return kda_fail(st, err, errlen, "%s: missing member 'manifest.json'", path);
  if (st) return st;
  c->manifest_json = text;
  st = parse_manifest(path, text, len, c, root, err, errlen);
  if (!st) {
    st = kda_problem_check(&c->p, err, errlen);
    if (st) prefix_err(st, err, errlen, path, "manifest problem");
  }
  if (!st) st = check_members_map(path, *root, c, err, errlen);
  return st;
}

int kda_case_load_members(kda_npz *z, const char *path, kda_case *c, int static_only,
                          char *err, size_t errlen) {
  kda_problem_sizes sz;
  int st = kda_problem_sizes_get(&c->p, &sz, err, errlen);
  if (st) return prefix_err(st, err, errlen, path, "manifest problem");
  member_spec s[KDA_M_COUNT];
  member_specs(&c->p, s);
  for (int m = 0; m < KDA_M_COUNT && !st; m++) {
    kda_array_info info;
    if (static_only && token_major(m) && s[m].used && kda_npz_has(z, kda_case_member_names[m])) {
      st = kda_npz_info(z, kda_case_member_names[m], &info, err, errlen); /* checked, not read */
      if (!st) st = check_member_info(path, m, &s[m], &info, err, errlen);
    } else {
      st = load_member(z, path, m, &s[m], c, err, errlen);
    }
  }
  if (!st) st = check_alloc_bound(path, &c->p, &sz, err, errlen);
  if (!st) st = default_cu_seqlens(c, err, errlen);
  if (!st) st = check_values(path, c, s, err, errlen);
  if (!st) {
    st = kda_problem_check_index(&c->p, c->cu_seqlens, c->checkpoints, err, errlen);
    if (st) prefix_err(st, err, errlen, path, "");
  }
  return st;
}

void kda_case_free(kda_case *c) {
  if (!c) return;
  free(c->q);
  free(c->k);
  free(c->v);
  free(c->g);
  free(c->beta);
  free(c->A_log);
  free(c->dt_bias);
  free(c->h0);
  free(c->cu_seqlens);
  free(c->checkpoints);
  free(c->id);
  free(c->manifest_json);
  memset(c, 0, sizeof *c);
}

void kda_case_tensors(const kda_case *c, kda_tensors_f64 *t) {
  memset(t, 0, sizeof *t);
  t->q = c->q;
  t->k = c->k;
  t->v = c->v;
  t->g = c->g;
  t->beta = c->beta;
  t->A_log = c->A_log;
  t->dt_bias = c->dt_bias;
  t->h0 = c->h0;
  t->cu_seqlens = c->cu_seqlens;
  t->checkpoints = c->checkpoints;
}

/* ---- Saving. */
/* Everything load would check, on a case in memory.  *cu points at the cu_seqlens to write. */
static int save_checks(const char *path, const kda_case *c, member_spec *s, const int64_t **cu,
                       int64_t cu1[2], char *err, size_t errlen) {
  int st = problem_json_ok(&c->p, err, errlen);
  kda_problem_sizes sz;
  if (!st) st = kda_problem_sizes_get(&c->p, &sz, err, errlen);
  if (st) return prefix_err(st, err, errlen, path, "problem");
  st = check_alloc_bound(path, &c->p, &sz, err, errlen);
  if (st) return st;
  if (!kda_precision_file_name(c->input_precision))
    return kda_fail(KDA_EINVAL, err, errlen, "%s: invalid input precision %d", path,
                    (int)c->input_precision);
  member_specs(&c->p, s);
  for (int m = 0; m < KDA_M_COUNT; m++)
    if (s[m].used && kda_case_array(c, m) == NULL && m != KDA_M_CU_SEQLENS &&
        m != KDA_M_CHECKPOINTS)
      return kda_fail(KDA_EINVAL, err, errlen, "%s: case has no '%s' array (needed by %s)", path,
                      kda_case_member_names[m], s[m].reason);
  cu1[0] = 0;
  cu1[1] = c->p.T;
  *cu = c->cu_seqlens ? c->cu_seqlens : c->p.N == 1 ? cu1 : NULL;
  st = kda_problem_check_index(&c->p, *cu, c->checkpoints, err, errlen);
  if (st) return prefix_err(st, err, errlen, path, "");
  return check_values(path, c, s, err, errlen);
}

static int save_members(kda_npz_writer *w, const kda_case *c, const member_spec *s,
                        const int64_t *cu, char *err, size_t errlen) {
  int st = KDA_OK;
  for (int m = 0; m < KDA_M_COUNT && !st; m++) {
    if (!s[m].used) continue;
    if (m == KDA_M_CU_SEQLENS)
      st = kda_npz_writer_add(w, "cu_seqlens", KDA_DTYPE_I64, 1, s[m].shape, cu, err, errlen);
    else if (m == KDA_M_CHECKPOINTS)
      st = kda_npz_writer_add(w, "checkpoints", KDA_DTYPE_I64, 1, s[m].shape, c->checkpoints,
                              err, errlen);
    else
      st = kda_npz_writer_add_f64(w, kda_case_member_names[m],
                                  prec_dtype(kda_case_member_prec(m, c->input_precision)),
                                  s[m].ndim, s[m].shape, kda_case_array(c, m), err, errlen);
  }
  return st;
}

int kda_case_save(const char *path, const kda_case *c, const char *extra_json, char *err,
                  size_t errlen) {
  if (!path || !c) return kda_fail(KDA_EINVAL, err, errlen, "case or path is NULL");
  member_spec s[KDA_M_COUNT];
  const int64_t *cu = NULL;
  int64_t cu1[2];
  int st = save_checks(path, c, s, &cu, cu1, err, errlen);
  if (st) return st;
  char *text = NULL;
  st = kda_case_manifest_text(c, extra_json, &text, err, errlen);
  if (st) return prefix_err(st, err, errlen, path, "");
  kda_npz_writer *w = NULL;
  st = kda_npz_writer_open(path, &w, err, errlen);
  if (!st) st = kda_npz_writer_set_manifest(w, text, err, errlen);
  if (!st) st = save_members(w, c, s, cu, err, errlen);
  free(text);
  return kda_npz_writer_finish(w, st, err, errlen);
}

/* ---- Results. */
static void encode_values(int32_t dtype, const double *x, const int64_t *ix, size_t n,
                          unsigned char *out);

void kda_case_encode(int32_t dtype, const double *x, const int64_t *ix, size_t n,
                     unsigned char *out) {
  encode_values(dtype, x, ix, n, out);
}

/* Little-endian bytes of n values as member m of the case stores them (kda_case_save). */
static void encode_values(int32_t dtype, const double *x, const int64_t *ix, size_t n,
                          unsigned char *out) {
  for (size_t i = 0; i < n; i++) {
    uint64_t bits = 0;
    size_t w = kda_dtype_size(dtype);
    if (dtype == KDA_DTYPE_I64) {
      bits = (uint64_t)ix[i];
    } else if (dtype == KDA_DTYPE_F64) {
      memcpy(&bits, &x[i], 8);
    } else if (dtype == KDA_DTYPE_F32) {
      float f = kda_round_f32(x[i]);
      uint32_t b32;
      memcpy(&b32, &f, 4);
      bits = b32;
    } else {
      bits = kda_f16_bits(x[i]);
    }
    for (size_t b = 0; b < w; b++) out[i * w + b] = (unsigned char)(bits >> (8 * b));
  }
}

/* SHA-256 over the stored bytes of every input member, in member order. */
static void inputs_sha256(const kda_case *c, const member_spec *s, const int64_t *cu,
                          char hex[65]) {
  kda_sha256 h;
  unsigned char buf[512 * 8], digest[KDA_SHA256_BYTES];
  kda_sha256_init(&h);
  for (int m = 0; m < KDA_M_COUNT; m++) {
    if (!s[m].used) continue;
    const int is_index = m == KDA_M_CU_SEQLENS || m == KDA_M_CHECKPOINTS;
    const int32_t dt = is_index ? KDA_DTYPE_I64
                                : prec_dtype(kda_case_member_prec(m, c->input_precision));
    const double *x = is_index ? NULL : kda_case_array(c, m);
    const int64_t *ix = m == KDA_M_CU_SEQLENS ? cu : c->checkpoints;
    for (uint64_t i = 0; i < s[m].count; i += 512) {
      size_t n = s[m].count - i < 512 ? (size_t)(s[m].count - i) : 512;
      encode_values(dt, x ? x + i : NULL, is_index ? ix + i : NULL, n, buf);
      kda_sha256_update(&h, buf, n * kda_dtype_size(dt));
    }
  }
  kda_sha256_final(&h, digest);
  kda_sha256_hex(digest, hex);
}

static int result_manifest(const kda_case *c, const char *backend, const char *hex,
                           char **out, char *err, size_t errlen) {
  json_t *o = json_object();
  int bad = !o;
  if (!bad) {
    bad |= json_object_set_new(o, "schema", json_string(KDA_RESULT_SCHEMA));
    bad |= json_object_set_new(o, "generator", json_string(KDA_GENERATOR));
    bad |= json_object_set_new(o, "backend", json_string(backend));
    bad |= json_object_set_new(o, "case_id", json_string(c->id ? c->id : ""));
    bad |= json_object_set_new(o, "problem", problem_json(&c->p));
    bad |= json_object_set_new(o, "inputs_sha256", json_string(hex));
  }
  *out = bad ? NULL : dump_json(o);
  json_decref(o);
  if (bad)
    return kda_fail(KDA_EINVAL, err, errlen,
                    "cannot build the result manifest (backend or "
                    "id not UTF-8, or memory)");
  return *out ? KDA_OK : kda_fail(KDA_ENOMEM, err, errlen, "out of memory writing the manifest");
}

static int result_members(kda_npz_writer *w, const kda_case *c, int32_t dtype, const double *o,
                          const double *ht, const double *hc, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  const int vk = p->state_layout == KDA_STATE_VK;
  const int64_t a = vk ? p->V : p->K, b = vk ? p->K : p->V;
  int st = kda_npz_writer_add_f64(w, "o", dtype, 3, (int64_t[]){p->T, p->HV, p->V}, o, err,
                                  errlen);
  if (!st && p->want_final_state)
    st = kda_npz_writer_add_f64(w, "ht", dtype, 4, (int64_t[]){p->N, p->HV, a, b}, ht, err,
                                errlen);
  if (!st && p->n_checkpoints > 0)
    st = kda_npz_writer_add_f64(w, "hc", dtype, 4, (int64_t[]){p->n_checkpoints, p->HV, a, b},
                                hc, err, errlen);
  return st;
}

int kda_result_save(const char *path, const kda_case *c, const char *backend, int32_t dtype,
                    const double *o, const double *ht, const double *hc, char *err,
                    size_t errlen) {
  if (!path || !c || !backend || !*backend)
    return kda_fail(KDA_EINVAL, err, errlen, "result path, case or backend is NULL or empty");
  if (dtype != KDA_DTYPE_F64 && dtype != KDA_DTYPE_F32)
    return kda_fail(KDA_EINVAL, err, errlen, "%s: result dtype must be f64 or f32", path);
  if (!o || (c->p.want_final_state && !ht) || (c->p.n_checkpoints > 0 && !hc))
    return kda_fail(KDA_EINVAL, err, errlen, "%s: missing output array (o, ht or hc)", path);
  member_spec s[KDA_M_COUNT];
  const int64_t *cu = NULL;
  int64_t cu1[2];
  int st = save_checks(path, c, s, &cu, cu1, err, errlen);
  if (st) return st;
  char hex[65], *text = NULL;
  inputs_sha256(c, s, cu, hex);
  st = result_manifest(c, backend, hex, &text, err, errlen);
  if (st) return prefix_err(st, err, errlen, path, "");
  kda_npz_writer *w = NULL;
  st = kda_npz_writer_open(path, &w, err, errlen);
  if (!st) st = kda_npz_writer_set_manifest(w, text, err, errlen);
  if (!st) st = result_members(w, c, dtype, o, ht, hc, err, errlen);
  free(text);
  return kda_npz_writer_finish(w, st, err, errlen);
}

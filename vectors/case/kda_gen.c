/* kda_gen.c: the random case generator: descriptions, regimes and inputs (SPEC.md §11.2).
 * SPDX-License-Identifier: MIT
 *
 * Every input element is a pure function of (seed, stream, flat index) through kda_prng.h,
 * followed by a few correctly rounded IEEE operations (+ - * / sqrt, never exp or log) and a
 * round-to-nearest-even into the member's precision, so a case is the same bits everywhere.
 *
 * Streams: q 1, k 2, v 3, g 4, beta 5, A_log 6, dt_bias 7, h0 8, the low-rank key
 * directions u1 9 and u2 10.  The index is the flat C-order element index of the member
 * (for h0 the index of the K-major [N, HV, K, V] element, whatever the stored layout, so the
 * kv and vk cases of one description are the same problem).  U(s,i) = kda_prng_uniform,
 * Z(s,i) = kda_prng_normal, P(x) = x rounded to the member's precision:
 *
 *   q     positive: U(1,i)                     others: Z(1,i)
 *   k     positive: U(2,i)        randn, decay-small: Z(2,i)
 *         unit: r = Z(2, row*K + c) for the row (t,h); k[c] = r[c] / sqrt(sum_c r[c]*r[c])
 *         expansive: the unit row times sqrt(2.0)      (||k||^2 ~ 2)
 *         lowrank, lowrank-slow: row = t*H + h, a = Z(2, 2*row), b = Z(2, 2*row + 1),
 *                  k[c] = (a * Z(9, h*K + c) + b * Z(10, h*K + c)) * sqrt(0.5)
 *   v     positive: U(3,i)                     others: Z(3,i)
 *   g     gate log: -U(4,i); softplus, lower_bound: Z(4,i)
 *         decay-small: log -1e-4, softplus -9.25, lower_bound -11.0 (A_log, dt_bias = 0)
 *         mixed: channel c = i mod GW; c mod 4 = 0 (every head for gdn, GW = 1) is slow:
 *                log -1e-4 * (1 + U(4,i)), softplus -9.25 - U(4,i), lower_bound -11 - U(4,i);
 *                the other channels as randn; A_log, dt_bias = 0
 *         lowrank-slow: every channel slow as in mixed (A_log, dt_bias = 0); k as lowrank
 *   beta  prob: U(5,i) (expansive: 1.5 * U(5,i)); logit, logit_neg: Z(5,i)
 *   A_log 2 * U(6,i) - 1                       (in [-1, 1))
 *   dt_bias Z(7,i)
 *   h0    0.5 * Z(8,i)
 * Sums run in increasing c from 0.0; each named product or quotient is one IEEE operation.
 */
#include "kda_case.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_case_internal.h"
#include "kda_files.h"
#include "kda_internal.h"
#include "kda_npz.h"
#include "kda_prng.h"
#include "kda_sbuf.h"
#include "kda_sha256.h"

enum {
  KDA_S_Q = 1, KDA_S_K = 2, KDA_S_V = 3, KDA_S_G = 4, KDA_S_BETA = 5, KDA_S_A_LOG = 6,
  KDA_S_DT_BIAS = 7, KDA_S_H0 = 8, KDA_S_U1 = 9, KDA_S_U2 = 10
};

/* Description defaults (besides those of kda_problem_init). */
#define KDA_GEN_T 8
#define KDA_GEN_H 1
#define KDA_GEN_K 8
#define KDA_GEN_V 8

/* ---- Regimes. */
static const char *const regime_names[] = {"randn",     "positive",  "unit",  "decay-small",
                                           "lowrank",   "expansive", "mixed", "lowrank-slow"};
#define KDA_REGIME_COUNT 8

const char *kda_regime_name(int32_t regime) {
  return regime >= 0 && regime < KDA_REGIME_COUNT ? regime_names[regime] : NULL;
}

int kda_regime_parse(const char *name, int32_t *regime) {
  for (int32_t i = 0; name && i < KDA_REGIME_COUNT; i++)
    if (strcmp(name, regime_names[i]) == 0) {
      if (regime) *regime = i;
      return KDA_OK;
    }
  return KDA_EINVAL;
}

/* ---- Canonical text. */
static void sb_list(kda_sbuf *b, const char *key, const int64_t *x, int64_t n) {
  kda_sbuf_printf(b, " %s=", key);
  for (int64_t i = 0; i < n; i++) kda_sbuf_printf(b, "%s%lld", i ? "," : "", (long long)x[i]);
}

/* The canonical description: every key, in a fixed order, values in canonical form. */
static char *desc_canonical(const kda_gen_desc *d, const char *id) {
  const kda_problem *p = &d->p;
  kda_sbuf b = {0};
  kda_sbuf_printf(&b, "seed=%llu T=%lld H=%lld HV=%lld K=%lld V=%lld", (unsigned long long)d->seed,
                  (long long)p->T, (long long)p->H, (long long)p->HV, (long long)p->K,
                  (long long)p->V);
  if (d->seqlens) sb_list(&b, "seqlens", d->seqlens, p->N);
  kda_sbuf_printf(&b, " family=%s gate=%s beta=%s l2=%s head_map=%s layout=%s scale=",
                  kda_family_name(p->family), kda_gate_name(p->gate_mode),
                  kda_beta_name(p->beta_mode), kda_l2_name(p->l2_mode),
                  kda_head_map_name(p->head_map), kda_state_layout_name(p->state_layout));
  kda_sbuf_shortest(&b, p->scale);
  kda_sbuf_printf(&b, " lb=");
  kda_sbuf_shortest(&b, p->lower_bound);
  kda_sbuf_printf(&b, " eps=");
  kda_sbuf_shortest(&b, p->l2_eps);
  kda_sbuf_printf(&b, " alog=%d h0=%d final=%d", (int)p->has_A_log, (int)p->has_initial_state,
                  (int)p->want_final_state);
  if (p->n_checkpoints > 0) sb_list(&b, "checkpoints", d->checkpoints, p->n_checkpoints);
  kda_sbuf_printf(&b, " regime=%s prec=%s", kda_regime_name(d->regime),
                  kda_precision_file_name(d->precision));
  if (id) kda_sbuf_printf(&b, " id=%s", id);
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

/* "gen-" and the first 16 hex digits of the SHA-256 of the canonical description sans id. */
static int default_id(const kda_gen_desc *d, char id[128]) {
  char *text = desc_canonical(d, NULL);
  if (!text) return KDA_ENOMEM;
  kda_sha256 h;
  unsigned char digest[KDA_SHA256_BYTES];
  char hex[65];
  kda_sha256_init(&h);
  kda_sha256_update(&h, text, strlen(text));
  kda_sha256_final(&h, digest);
  kda_sha256_hex(digest, hex);
  snprintf(id, 128, "gen-%.16s", hex);
  free(text);
  return KDA_OK;
}

/* ---- Parsing. */
enum {
  KEY_SEED, KEY_T, KEY_H, KEY_HV, KEY_K, KEY_V, KEY_SEQLENS, KEY_FAMILY, KEY_GATE, KEY_BETA,
  KEY_L2, KEY_HEAD_MAP, KEY_LAYOUT, KEY_SCALE, KEY_LB, KEY_EPS, KEY_ALOG, KEY_H0, KEY_FINAL,
  KEY_CHECKPOINTS, KEY_REGIME, KEY_PREC, KEY_ID, KEY_COUNT
};
static const char *const key_names[KEY_COUNT] = {
    "seed", "T", "H", "HV", "K", "V", "seqlens", "family", "gate", "beta", "l2", "head_map",
    "layout", "scale", "lb", "eps", "alog", "h0", "final", "checkpoints", "regime", "prec", "id"};

static int bad_value(const char *key, const char *val, char *err, size_t errlen) {
  return kda_fail(KDA_EINVAL, err, errlen, "description: bad value '%s' for key '%s'", val, key);
}

/* A decimal (or 0x hexadecimal) integer in [lo, hi]. */
static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (!*s || *s == '+' || *s == ' ') return 0;
  char *end;
  const int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  errno = 0;
  long long x = strtoll(s, &end, hex ? 16 : 10);
  if (errno || *end || x < lo || x > hi) return 0;
  *out = x;
  return 1;
}

static int parse_real(const char *s, double *out) {
  if (!*s) return 0;
  char *end;
  double x = strtod(s, &end);
  if (*end || !isfinite(x)) return 0;
  *out = x;
  return 1;
}

/* A comma list of integers in [0, INT64_MAX]; *out allocated. */
static int parse_list(const char *s, int64_t **out, int64_t *n) {
  int64_t count = 1;
  for (const char *c = s; *c; c++) count += *c == ',';
  int64_t *x = calloc((size_t)count, sizeof *x);
  if (!x) return 0;
  const char *c = s;
  for (int64_t i = 0; i < count; i++) {
    char item[32];
    size_t len = strcspn(c, ",");
    if (len == 0 || len >= sizeof item) {
      free(x);
      return 0;
    }
    memcpy(item, c, len);
    item[len] = '\0';
    if (!parse_int(item, 0, INT64_MAX, &x[i])) {
      free(x);
      return 0;
    }
    c += len + (c[len] == ',');
  }
  *out = x;
  *n = count;
  return 1;
}

/* Splits text into key=value words; vals[key] points into buf. */
static int split_words(char *buf, const char *vals[KEY_COUNT], char *err, size_t errlen) {
  char *save = NULL;
  for (char *w = strtok_r(buf, " \t\r\n", &save); w; w = strtok_r(NULL, " \t\r\n", &save)) {
    char *eq = strchr(w, '=');
    if (!eq) return kda_fail(KDA_EINVAL, err, errlen, "description: word '%s' is not key=value", w);
    *eq = '\0';
    int k = 0;
    while (k < KEY_COUNT && strcmp(key_names[k], w) != 0) k++;
    if (k == KEY_COUNT)
      return kda_fail(KDA_EINVAL, err, errlen, "description: unknown key '%s'", w);
    if (vals[k]) return kda_fail(KDA_EINVAL, err, errlen, "description: key '%s' given twice", w);
    vals[k] = eq + 1;
  }
  return KDA_OK;
}

/* Shapes: H, HV (default H), K, V, T, or seqlens (N and T). */
static int parse_shapes(const char *vals[KEY_COUNT], kda_gen_desc *d, char *err, size_t errlen) {
  int64_t dim[5] = {KDA_GEN_T, KDA_GEN_H, -1, KDA_GEN_K, KDA_GEN_V}, N = 1;
  for (int i = 0; i < 5; i++) {
    const int key = KEY_T + i;
    if (vals[key] && !parse_int(vals[key], key == KEY_T ? 0 : 1, INT32_MAX, &dim[i]))
      return bad_value(key_names[key], vals[key], err, errlen);
  }
  if (dim[2] < 0) dim[2] = dim[1];
  if (vals[KEY_SEQLENS]) {
    int64_t sum = 0;
    if (!parse_list(vals[KEY_SEQLENS], &d->seqlens, &N))
      return bad_value("seqlens", vals[KEY_SEQLENS], err, errlen);
    for (int64_t n = 0; n < N; n++) {
      if (d->seqlens[n] > INT32_MAX - sum) return bad_value("seqlens", vals[KEY_SEQLENS], err,
                                                            errlen);
      sum += d->seqlens[n];
    }
    if (vals[KEY_T] && dim[0] != sum)
      return kda_fail(KDA_EINVAL, err, errlen,
                      "description: T=%lld disagrees with seqlens (sum %lld)", (long long)dim[0],
                      (long long)sum);
    dim[0] = sum;
  }
  kda_problem_init(&d->p, dim[0], dim[1], dim[2], dim[3], dim[4]);
  d->p.N = N;
  return KDA_OK;
}

static int parse_modes(const char *vals[KEY_COUNT], kda_problem *p, char *err, size_t errlen) {
  static const int keys[] = {KEY_FAMILY, KEY_GATE, KEY_BETA, KEY_L2, KEY_HEAD_MAP, KEY_LAYOUT};
  static const char *const kinds[] = {"family", "gate", "beta", "l2", "head_map", "state_layout"};
  int32_t *fields[] = {&p->family, &p->gate_mode, &p->beta_mode,
                       &p->l2_mode, &p->head_map, &p->state_layout};
  for (int i = 0; i < 6; i++)
    if (vals[keys[i]] && kda_mode_parse(kinds[i], vals[keys[i]], fields[i]) != KDA_OK)
      return bad_value(key_names[keys[i]], vals[keys[i]], err, errlen);
  static const int rkeys[] = {KEY_SCALE, KEY_LB, KEY_EPS};
  double *rfields[] = {&p->scale, &p->lower_bound, &p->l2_eps};
  for (int i = 0; i < 3; i++)
    if (vals[rkeys[i]] && !parse_real(vals[rkeys[i]], rfields[i]))
      return bad_value(key_names[rkeys[i]], vals[rkeys[i]], err, errlen);
  p->has_A_log = kda_problem_uses_dt_bias(p) ? 1 : 0; /* softplus and lower_bound gates */
  static const int fkeys[] = {KEY_ALOG, KEY_H0, KEY_FINAL};
  int32_t *ffields[] = {&p->has_A_log, &p->has_initial_state, &p->want_final_state};
  for (int i = 0; i < 3; i++) {
    int64_t x;
    if (!vals[fkeys[i]]) continue;
    if (!parse_int(vals[fkeys[i]], 0, 1, &x))
      return bad_value(key_names[fkeys[i]], vals[fkeys[i]], err, errlen);
    *ffields[i] = (int32_t)x;
  }
  return KDA_OK;
}

/* checkpoints: a list, "log" (2^j - 1 below T, and T - 1) or "none". */
static int parse_checkpoints(const char *val, kda_gen_desc *d, char *err, size_t errlen) {
  const int64_t T = d->p.T;
  if (!val || strcmp(val, "none") == 0) return KDA_OK;
  if (strcmp(val, "log") != 0) {
    if (!parse_list(val, &d->checkpoints, &d->p.n_checkpoints))
      return bad_value("checkpoints", val, err, errlen);
    return KDA_OK;
  }
  if (T == 0) return KDA_OK;
  d->checkpoints = calloc(66, sizeof(int64_t));
  if (!d->checkpoints) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  int64_t n = 0;
  for (int64_t pos = 1; pos - 1 < T; pos *= 2) {
    d->checkpoints[n++] = pos - 1;
    if (pos > INT64_MAX / 2) break;
  }
  if (d->checkpoints[n - 1] != T - 1) d->checkpoints[n++] = T - 1;
  d->p.n_checkpoints = n;
  return KDA_OK;
}

static int parse_rest(const char *vals[KEY_COUNT], kda_gen_desc *d, char *err, size_t errlen) {
  int64_t seed = 0;
  if (vals[KEY_SEED] && !parse_int(vals[KEY_SEED], 0, INT64_MAX, &seed))
    return bad_value("seed", vals[KEY_SEED], err, errlen);
  d->seed = (uint64_t)seed;
  if (vals[KEY_REGIME] && kda_regime_parse(vals[KEY_REGIME], &d->regime))
    return bad_value("regime", vals[KEY_REGIME], err, errlen);
  if (vals[KEY_PREC] && (kda_precision_parse(vals[KEY_PREC], &d->precision) ||
                         !kda_precision_file_name(d->precision)))
    return bad_value("prec", vals[KEY_PREC], err, errlen);
  if (vals[KEY_ID]) {
    size_t n = strlen(vals[KEY_ID]);
    /* an id names files (SPEC.md §10.2): one path component */
    int ok = n > 0 && n < sizeof d->id && kda_id_check(vals[KEY_ID], "id", NULL, 0) == KDA_OK;
    if (!ok) return bad_value("id", vals[KEY_ID], err, errlen);
    memcpy(d->id, vals[KEY_ID], n + 1);
  }
  return parse_checkpoints(vals[KEY_CHECKPOINTS], d, err, errlen);
}

int kda_gen_parse(const char *text, kda_gen_desc *d, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  d->regime = KDA_REGIME_RANDN;
  d->precision = KDA_PRECISION_FP32;
  if (!text) return kda_fail(KDA_EINVAL, err, errlen, "description is NULL");
  char *buf = strdup(text);
  if (!buf) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  const char *vals[KEY_COUNT] = {0};
  int st = split_words(buf, vals, err, errlen);
  if (!st) st = parse_shapes(vals, d, err, errlen);
  if (!st) st = parse_modes(vals, &d->p, err, errlen);
  if (!st) st = parse_rest(vals, d, err, errlen);
  if (!st && !d->id[0] && default_id(d, d->id) != KDA_OK)
    st = kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  free(buf);
  if (st) kda_gen_desc_free(d);
  return st;
}

void kda_gen_desc_free(kda_gen_desc *d) {
  if (!d) return;
  free(d->seqlens);
  free(d->checkpoints);
  memset(d, 0, sizeof *d);
}

/* ---- Generation. */
typedef struct gen {
  const kda_gen_desc *d;
  const kda_problem *p;
  uint64_t seed;
  int32_t regime;
} gen;

static double U(const gen *g, uint32_t s, uint64_t i) { return kda_prng_uniform(g->seed, s, i); }
static double Z(const gen *g, uint32_t s, uint64_t i) { return kda_prng_normal(g->seed, s, i); }

/* The token-major members are filled for a range of flat indices [i0, i0 + n) (or of tokens
 * [t0, t1) for k) into x[0 ..], so that kda_gen_range and kda_gen_case share one code path
 * and element i is the same value whichever range it is generated in. */
static void gen_q(const gen *g, double *q, uint64_t i0, uint64_t n, int32_t prec) {
  for (uint64_t j = 0, i = i0; j < n; j++, i++)
    q[j] = kda_case_round(prec, g->regime == KDA_REGIME_POSITIVE ? U(g, KDA_S_Q, i)
                                                                 : Z(g, KDA_S_Q, i));
}

/* One key row (t, h) of the unit, expansive and low-rank regimes, before rounding.  u1, u2
 * (or NULL): the low-rank directions Z(9, j), Z(10, j) for j < H*K, drawn once for a range of
 * tokens rather than once a row (they do not depend on t: the same values, the same bits). */
static void gen_k_row(const gen *g, int64_t t, int64_t h, const double *u1, const double *u2,
                      double *r) {
  const int64_t K = g->p->K;
  const uint64_t row = (uint64_t)(t * g->p->H + h);
  if (g->regime == KDA_REGIME_LOWRANK || g->regime == KDA_REGIME_LOWRANK_SLOW) {
    const double a = Z(g, KDA_S_K, 2 * row), b = Z(g, KDA_S_K, 2 * row + 1), s = sqrt(0.5);
    for (int64_t c = 0; c < K; c++) {
      const uint64_t j = (uint64_t)(h * K + c);
      const double x1 = u1 ? u1[j] : Z(g, KDA_S_U1, j), x2 = u2 ? u2[j] : Z(g, KDA_S_U2, j);
      r[c] = (a * x1 + b * x2) * s;
    }
    return;
  }
  double n2 = 0.0;
  for (int64_t c = 0; c < K; c++) {
    r[c] = Z(g, KDA_S_K, row * (uint64_t)K + (uint64_t)c);
    n2 += r[c] * r[c];
  }
  const double nr = sqrt(n2), m = g->regime == KDA_REGIME_EXPANSIVE ? sqrt(2.0) : 1.0;
  if (nr == 0.0) return; /* an all-zero row stays zero */
  for (int64_t c = 0; c < K; c++)
    r[c] = g->regime == KDA_REGIME_EXPANSIVE ? (r[c] / nr) * m : r[c] / nr;
}

/* Keys of tokens [t0, t1) into k[0 ..]. */
static void gen_k(const gen *g, double *k, int64_t t0, int64_t t1, int32_t prec) {
  const int r = g->regime;
  const int64_t K = g->p->K, H = g->p->H;
  if (r == KDA_REGIME_UNIT || r == KDA_REGIME_EXPANSIVE || r == KDA_REGIME_LOWRANK ||
      r == KDA_REGIME_LOWRANK_SLOW) {
    const int lowrank = r == KDA_REGIME_LOWRANK || r == KDA_REGIME_LOWRANK_SLOW;
    double *u1 = lowrank && t1 > t0 ? malloc((size_t)(H * K) * 2 * sizeof *u1) : NULL;
    double *u2 = u1 ? u1 + H * K : NULL; /* NULL (out of memory): drawn a row at a time */
    for (int64_t j = 0; u1 && j < H * K; j++)
      u1[j] = Z(g, KDA_S_U1, (uint64_t)j), u2[j] = Z(g, KDA_S_U2, (uint64_t)j);
    for (int64_t t = t0; t < t1; t++)
      for (int64_t h = 0; h < H; h++) {
        double *row = k + ((t - t0) * H + h) * K;
        gen_k_row(g, t, h, u1, u2, row);
        for (int64_t c = 0; c < K; c++) row[c] = kda_case_round(prec, row[c]);
      }
    free(u1);
    return;
  }
  const uint64_t i0 = (uint64_t)(t0 * H * K), n = (uint64_t)((t1 - t0) * H * K);
  for (uint64_t j = 0, i = i0; j < n; j++, i++)
    k[j] = kda_case_round(prec, r == KDA_REGIME_POSITIVE ? U(g, KDA_S_K, i) : Z(g, KDA_S_K, i));
}

static void gen_v(const gen *g, double *v, uint64_t i0, uint64_t n, int32_t prec) {
  for (uint64_t j = 0, i = i0; j < n; j++, i++)
    v[j] = kda_case_round(prec, g->regime == KDA_REGIME_POSITIVE ? U(g, KDA_S_V, i)
                                                                 : Z(g, KDA_S_V, i));
}

/* The regimes whose gate parameters are A_log = dt_bias = 0 (the stored g sets the decay). */
static int zero_gate_params(int32_t regime) {
  return regime == KDA_REGIME_DECAY_SMALL || regime == KDA_REGIME_MIXED ||
         regime == KDA_REGIME_LOWRANK_SLOW;
}

/* A slow channel of mixed and lowrank-slow: log-decays in [-2e-4, -1e-4) (memories of 5000
 * tokens and more, where exp's rounding is a systematic error at every step; SPEC.md §7.3). */
static double g_slow(const gen *g, uint64_t i) {
  const int32_t gate = g->p->gate_mode;
  const double u = U(g, KDA_S_G, i);
  return gate == KDA_GATE_LOG ? -1e-4 * (1.0 + u) : gate == KDA_GATE_SOFTPLUS ? -9.25 - u
                                                                              : -11.0 - u;
}

static double g_value(const gen *g, uint64_t i) {
  const int32_t gate = g->p->gate_mode;
  if (g->regime == KDA_REGIME_DECAY_SMALL)
    return gate == KDA_GATE_LOG ? -1e-4 : gate == KDA_GATE_SOFTPLUS ? -9.25 : -11.0;
  const uint64_t GW = (uint64_t)kda_problem_gate_width(g->p);
  if (g->regime == KDA_REGIME_LOWRANK_SLOW || (g->regime == KDA_REGIME_MIXED && GW > 0 && (i % GW) % 4 == 0))
    return g_slow(g, i);
  return gate == KDA_GATE_LOG ? -U(g, KDA_S_G, i) : Z(g, KDA_S_G, i);
}

static void gen_g(const gen *g, double *x, uint64_t i0, uint64_t n, int32_t prec) {
  for (uint64_t j = 0, i = i0; j < n; j++, i++) x[j] = kda_case_round(prec, g_value(g, i));
}

static void gen_beta(const gen *g, double *b, uint64_t i0, uint64_t n, int32_t prec) {
  for (uint64_t j = 0, i = i0; j < n; j++, i++) {
    double x = Z(g, KDA_S_BETA, i);
    if (g->p->beta_mode == KDA_BETA_PROB)
      x = g->regime == KDA_REGIME_EXPANSIVE ? 1.5 * U(g, KDA_S_BETA, i) : U(g, KDA_S_BETA, i);
    b[j] = kda_case_round(prec, x);
  }
}

static void gen_gate_params(const gen *g, kda_case *c, const kda_problem_sizes *s) {
  const int small = zero_gate_params(g->regime);
  const int32_t pa = kda_case_member_prec(KDA_M_A_LOG, c->input_precision);
  const int32_t pb = kda_case_member_prec(KDA_M_DT_BIAS, c->input_precision);
  for (uint64_t i = 0; i < s->A_log; i++)
    c->A_log[i] = small ? 0.0 : kda_case_round(pa, 2.0 * U(g, KDA_S_A_LOG, i) - 1.0);
  for (uint64_t i = 0; i < s->dt_bias; i++)
    c->dt_bias[i] = small ? 0.0 : kda_case_round(pb, Z(g, KDA_S_DT_BIAS, i));
}

/* h0: element (n, hv, i, j) of the K-major state draws index ((n*HV + hv)*K + i)*V + j. */
static void gen_h0(const gen *g, double *h0, int32_t prec) {
  const kda_problem *p = g->p;
  const int vk = p->state_layout == KDA_STATE_VK;
  for (int64_t nh = 0; nh < p->N * p->HV; nh++)
    for (int64_t i = 0; i < p->K; i++)
      for (int64_t j = 0; j < p->V; j++) {
        const uint64_t idx = (uint64_t)((nh * p->K + i) * p->V + j);
        const int64_t at = vk ? (nh * p->V + j) * p->K + i : (nh * p->K + i) * p->V + j;
        h0[at] = kda_case_round(prec, 0.5 * Z(g, KDA_S_H0, idx));
      }
}

/* An array of n doubles (at least one element, so that a used member is never NULL). */
static int alloc_f64(double **x, uint64_t n) {
  *x = calloc(n ? (size_t)n : 1, sizeof(double));
  return *x != NULL;
}

/* The token-major inputs q, k, v, g, beta of s (g only when p uses it). */
static int alloc_tokens(const kda_problem *p, const kda_problem_sizes *s, double **q, double **k,
                        double **v, double **g, double **beta) {
  int ok = alloc_f64(q, s->q) && alloc_f64(k, s->k) && alloc_f64(v, s->v) &&
           alloc_f64(beta, s->beta);
  if (ok && kda_problem_uses_g(p)) ok = alloc_f64(g, s->g);
  return ok;
}

/* The case's arrays; the token-major ones only when tokens (kda_gen_case_static has none). */
static int gen_alloc(kda_case *c, const kda_problem_sizes *s, int tokens) {
  const kda_problem *p = &c->p;
  int ok = !tokens || alloc_tokens(p, s, &c->q, &c->k, &c->v, &c->g, &c->beta);
  if (ok && kda_problem_uses_dt_bias(p)) ok = alloc_f64(&c->dt_bias, s->dt_bias);
  if (ok && kda_problem_uses_A_log(p)) ok = alloc_f64(&c->A_log, s->A_log);
  if (ok && p->has_initial_state) ok = alloc_f64(&c->h0, s->h0);
  if (ok) ok = (c->cu_seqlens = calloc((size_t)s->cu_seqlens, sizeof(int64_t))) != NULL;
  if (ok && s->checkpoints)
    ok = (c->checkpoints = calloc((size_t)s->checkpoints, sizeof(int64_t))) != NULL;
  return ok;
}

/* ---- The token range cut into parts generated on threads of their own: every element is a
 * pure function of its index, so the parts are the same bits whoever draws them; the long
 * cases' scoring regenerates every input once a pass (SPEC.md §7.10), where the draws (six
 * Philox blocks a normal value) were most of the main thread's time. */
#define GEN_THREADS_MAX 64
static int gen_max_threads = 0; /* kda_gen_tune; 0: min(8, the processors online) */
static int64_t gen_min_values = (int64_t)1 << 16; /* values a thread at least */

void kda_gen_tune(int max_threads, int64_t min_values) {
  gen_max_threads = max_threads < 0 ? 0 : max_threads > GEN_THREADS_MAX ? GEN_THREADS_MAX : max_threads;
  gen_min_values = min_values < 1 ? 1 : min_values;
}

/* One part: tokens [t0, t1) of every token-major member, into arrays whose first row is token
 * base (x: g, or NULL). */
typedef struct gen_job {
  const gen *g;
  int64_t t0, t1, base;
  int32_t prec;
  double *q, *k, *v, *x, *beta;
} gen_job;

static void gen_job_do(const gen_job *j) {
  const gen *g = j->g;
  const kda_problem *p = g->p;
  const uint64_t t = (uint64_t)j->t0, n = (uint64_t)(j->t1 - j->t0), o = (uint64_t)(j->t0 - j->base);
  const uint64_t HV = (uint64_t)p->HV, HK = (uint64_t)(p->H * p->K), VW = HV * (uint64_t)p->V;
  const uint64_t GW = HV * (uint64_t)kda_problem_gate_width(p);
  gen_q(g, j->q + o * HK, t * HK, n * HK, j->prec);
  gen_k(g, j->k + o * HK, j->t0, j->t1, j->prec);
  gen_v(g, j->v + o * VW, t * VW, n * VW, j->prec);
  if (j->x) gen_g(g, j->x + o * GW, t * GW, n * GW, j->prec);
  gen_beta(g, j->beta + o * HV, t * HV, n * HV, j->prec);
}

static void *gen_job_run(void *arg) {
  gen_job_do(arg);
  return NULL;
}

/* Threads for n tokens of w values each, each with at least gen_min_values values: at most
 * gen_max_threads, or by default 8 and the processors online. */
static int gen_threads(int64_t n, int64_t w) {
  long most = gen_max_threads;
  if (most == 0) {
    most = sysconf(_SC_NPROCESSORS_ONLN);
    most = most < 1 ? 1 : most > 8 ? 8 : most;
  }
  int64_t m = w > 0 ? n * w / gen_min_values : 0;
  if (m > most) m = most;
  if (m > n) m = n;
  return m < 1 ? 1 : (int)m;
}

/* Tokens [t0, t1) of every token-major member into the arrays (x: g, or NULL). */
static void gen_tokens(const gen *g, int64_t t0, int64_t t1, int32_t prec, double *q, double *k,
                       double *v, double *x, double *beta) {
  const kda_problem *p = g->p;
  const int64_t w = 2 * p->H * p->K + p->HV * (p->V + kda_problem_gate_width(p) + 1);
  const int64_t n = t1 - t0;
  const int nt = gen_threads(n, w);
  gen_job jobs[GEN_THREADS_MAX];
  pthread_t tid[GEN_THREADS_MAX];
  int started[GEN_THREADS_MAX] = {0};
  for (int i = 0; i < nt; i++) { /* part i: tokens [t0 + i n / nt, t0 + (i+1) n / nt) */
    jobs[i] = (gen_job){g, t0 + n * i / nt, t0 + n * (i + 1) / nt, t0, prec, q, k, v, x, beta};
    if (i > 0) started[i] = pthread_create(&tid[i], NULL, gen_job_run, &jobs[i]) == 0;
  }
  gen_job_do(&jobs[0]);
  for (int i = 1; i < nt; i++) {
    if (started[i]) pthread_join(tid[i], NULL);
    else gen_job_do(&jobs[i]); /* no thread: drawn here, the same values */
  }
}

static void gen_fill(const gen *g, kda_case *c, const kda_problem_sizes *s) {
  const int32_t prec = c->input_precision;
  if (c->q) gen_tokens(g, 0, c->p.T, prec, c->q, c->k, c->v, c->g, c->beta);
  gen_gate_params(g, c, s);
  if (c->h0) gen_h0(g, c->h0, prec);
}

/* Index arrays from the description: cu_seqlens from seqlens ({0, T} without), checkpoints. */
static int gen_index(const kda_gen_desc *d, kda_case *c, char *err, size_t errlen) {
  const kda_problem *p = &c->p;
  if (d->seqlens) {
    c->cu_seqlens[0] = 0;
    for (int64_t n = 0; n < p->N; n++) {
      if (d->seqlens[n] < 0 || d->seqlens[n] > INT64_MAX - c->cu_seqlens[n])
        return kda_fail(KDA_EINVAL, err, errlen, "description: bad sequence length %lld",
                        (long long)d->seqlens[n]);
      c->cu_seqlens[n + 1] = c->cu_seqlens[n] + d->seqlens[n];
    }
  } else {
    c->cu_seqlens[p->N] = p->T; /* N = 1 unless the caller set N without seqlens */
  }
  if (p->n_checkpoints > 0) {
    if (!d->checkpoints)
      return kda_fail(KDA_EINVAL, err, errlen,
                      "description: n_checkpoints > 0 without checkpoints");
    memcpy(c->checkpoints, d->checkpoints, (size_t)p->n_checkpoints * sizeof(int64_t));
  }
  return kda_problem_check_index(p, c->cu_seqlens, c->checkpoints, err, errlen);
}

/* generator_info {description, seed, regime, prng}. */
static int gen_manifest(const kda_gen_desc *d, kda_case *c, char *err, size_t errlen) {
  char *desc = desc_canonical(d, c->id);
  if (!desc) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  kda_sbuf b = {0};
  kda_sbuf_printf(&b,
                  "{\"description\": \"%s\", \"seed\": %llu, \"regime\": \"%s\", "
                  "\"prng\": \"philox4x32-10\"}",
                  desc, (unsigned long long)d->seed, kda_regime_name(d->regime));
  free(desc);
  if (b.oom) {
    free(b.s);
    return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  }
  int st = kda_case_manifest_text(c, b.s, &c->manifest_json, err, errlen);
  free(b.s);
  return st;
}

static int gen_checks(const kda_gen_desc *d, char *err, size_t errlen) {
  if (!kda_regime_name(d->regime))
    return kda_fail(KDA_EINVAL, err, errlen, "description: invalid regime %d", (int)d->regime);
  if (!kda_precision_file_name(d->precision))
    return kda_fail(KDA_EINVAL, err, errlen, "description: invalid precision %d",
                    (int)d->precision);
  if (d->seed > (uint64_t)INT64_MAX)
    return kda_fail(KDA_EINVAL, err, errlen, "description: seed is above 2^63 - 1");
  if (d->regime == KDA_REGIME_EXPANSIVE && d->p.l2_mode != KDA_L2_OFF)
    return kda_fail(KDA_EINVAL, err, errlen, "description: regime expansive needs l2=off");
  if (!isfinite(d->p.lower_bound))
    return kda_fail(KDA_EINVAL, err, errlen, "description: lb is not finite");
  if (d->id[0] && kda_id_check(d->id, "description: id", err, errlen) != KDA_OK)
    return KDA_EINVAL;
  return KDA_OK;
}

/* The description is valid and its sizes do not overflow. */
static int gen_valid(const kda_gen_desc *d, kda_problem_sizes *s, char *err, size_t errlen) {
  if (!d) return kda_fail(KDA_EINVAL, err, errlen, "description is NULL");
  int st = gen_checks(d, err, errlen);
  if (!st) st = kda_problem_check(&d->p, err, errlen);
  if (!st) st = kda_problem_sizes_get(&d->p, s, err, errlen);
  return st;
}

/* kda_gen_case (tokens 1) and kda_gen_case_static (tokens 0). */
static int gen_case(const kda_gen_desc *d, kda_case *c, int tokens, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  kda_problem_sizes s;
  int st = gen_valid(d, &s, err, errlen);
  if (st) return st;
  c->p = d->p;
  c->input_precision = d->precision;
  if (!gen_alloc(c, &s, tokens)) {
    kda_case_free(c);
    return kda_fail(KDA_ENOMEM, err, errlen, "out of memory generating a case");
  }
  st = gen_index(d, c, err, errlen);
  char id[128];
  snprintf(id, sizeof id, "%s", d->id);
  if (!st && !id[0] && default_id(d, id) != KDA_OK)
    st = kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  if (!st && !(c->id = strdup(id))) st = kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  if (!st) {
    const gen g = {d, &c->p, d->seed, d->regime};
    gen_fill(&g, c, &s);
    st = gen_manifest(d, c, err, errlen);
  }
  if (st) kda_case_free(c);
  return st;
}

int kda_gen_case(const kda_gen_desc *d, kda_case *c, char *err, size_t errlen) {
  return gen_case(d, c, 1, err, errlen);
}

int kda_gen_case_static(const kda_gen_desc *d, kda_case *c, char *err, size_t errlen) {
  return gen_case(d, c, 0, err, errlen);
}

void kda_gen_window_free(kda_gen_window *w) {
  if (!w) return;
  free(w->q);
  free(w->k);
  free(w->v);
  free(w->g);
  free(w->beta);
  memset(w, 0, sizeof *w);
}

/* Tokens [t0, t1) of the description: the same functions of (seed, stream, flat index) as
 * kda_gen_case, started at the range's first flat index (SPEC.md §11.2), so that a streaming
 * reader of a generated-inputs case (SPEC.md §10.2) sees the bits kda_case_load would. */
int kda_gen_range(const kda_gen_desc *d, int64_t t0, int64_t t1, kda_gen_window *w, char *err,
                  size_t errlen) {
  if (!w) return kda_fail(KDA_EINVAL, err, errlen, "kda_gen_range: window is NULL");
  memset(w, 0, sizeof *w);
  kda_problem_sizes s;
  int st = gen_valid(d, &s, err, errlen);
  if (st) return st;
  if (t0 < 0 || t1 < t0 || t1 > d->p.T)
    return kda_fail(KDA_EINVAL, err, errlen, "kda_gen_range: tokens [%lld, %lld) not in [0, %lld]",
                    (long long)t0, (long long)t1, (long long)d->p.T);
  kda_problem pw = d->p;
  pw.T = t1 - t0;
  st = kda_problem_sizes_get(&pw, &s, err, errlen);
  if (st) return st;
  if (!alloc_tokens(&pw, &s, &w->q, &w->k, &w->v, &w->g, &w->beta)) {
    kda_gen_window_free(w);
    return kda_fail(KDA_ENOMEM, err, errlen, "out of memory generating tokens [%lld, %lld)",
                    (long long)t0, (long long)t1);
  }
  const gen g = {d, &d->p, d->seed, d->regime};
  gen_tokens(&g, t0, t1, d->precision, w->q, w->k, w->v, w->g, w->beta);
  w->t0 = t0;
  w->t1 = t1;
  return KDA_OK;
}

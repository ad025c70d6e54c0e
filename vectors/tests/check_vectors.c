/* check_vectors.c: unit tests of the PRNG, SHA-256, case files and the case generator.
 * SPDX-License-Identifier: MIT
 *
 * 1. Philox4x32-10 against Random123's known answers; uniform and normal values pinned as
 *    hex-float literals (computed once from the algorithm of kda_prng.h / SPEC.md §11; they
 *    pin that specified algorithm, so a change in them is a change of every generated case);
 *    distribution moments over 1e5 draws.
 * 2. SHA-256 against the FIPS 180-4 example vectors.
 * 3. The generator: determinism (arrays and file bytes), every regime and every mode saved and
 *    loaded back bit for bit, values exact in their precision, regime properties.
 * 4. Case loading: every class of bad file (made by writing a good case and rewriting members
 *    or the manifest with the kda_npz writer in a mkdtemp directory), with the status code and
 *    a substring of the message.
 * Seeds are fixed and printed in failure messages.
 */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#include "kda_case.h"
#include "kda_npz.h"
#include "kda_prng.h"
#include "kda_sha256.h"
#include "kda_test.h"

/* ==== Helpers ==== */

/* One mkdtemp directory per test case group, made and removed (with every file in it) by an
 * unchecked fixture, i.e. in the parent process, so that a failing test leaves nothing. */
static void make_dir(char dir[64]) {
  ck_assert_int_lt(snprintf(dir, 64, "%s", kda_test_tmpdir), 64);
}

static void path_in(char *out, size_t cap, const char *dir, const char *name) {
  snprintf(out, cap, "%s/%s", dir, name);
}

static void gen_from(const char *desc, kda_case *c) {
  kda_gen_desc d;
  char err[KDA_ERRLEN] = "";
  int st = kda_gen_parse(desc, &d, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "parse '%s': %s", desc, err);
  st = kda_gen_case(&d, c, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "gen '%s': %s", desc, err);
  kda_gen_desc_free(&d);
}

static void save_ok(const char *path, const kda_case *c) {
  char err[KDA_ERRLEN] = "";
  int st = kda_case_save(path, c, NULL, err, sizeof err);
  ck_assert_msg(st == KDA_OK, "save %s: %s", path, err);
}

/* Bit-for-bit equality of two double arrays (NULL only with NULL). */
static void same_bits(const double *a, const double *b, uint64_t n, const char *what,
                      const char *desc) {
  ck_assert_msg((a == NULL) == (b == NULL), "%s: one array is NULL (%s)", what, desc);
  if (!a) return;
  for (uint64_t i = 0; i < n; i++)
    ck_assert_msg(memcmp(&a[i], &b[i], sizeof a[i]) == 0, "%s[%llu]: %a vs %a (%s)", what,
                  (unsigned long long)i, a[i], b[i], desc);
}

static void same_case(const kda_case *a, const kda_case *b, const char *desc) {
  kda_problem_sizes s;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_problem_sizes_get(&a->p, &s, err, sizeof err), KDA_OK);
  ck_assert_msg(memcmp(&a->p, &b->p, sizeof a->p) == 0, "problem fields differ (%s)", desc);
  ck_assert_int_eq(a->input_precision, b->input_precision);
  same_bits(a->q, b->q, s.q, "q", desc);
  same_bits(a->k, b->k, s.k, "k", desc);
  same_bits(a->v, b->v, s.v, "v", desc);
  same_bits(a->g, b->g, s.g, "g", desc);
  same_bits(a->beta, b->beta, s.beta, "beta", desc);
  same_bits(a->A_log, b->A_log, s.A_log, "A_log", desc);
  same_bits(a->dt_bias, b->dt_bias, s.dt_bias, "dt_bias", desc);
  same_bits(a->h0, b->h0, s.h0, "h0", desc);
  ck_assert(memcmp(a->cu_seqlens, b->cu_seqlens, (size_t)s.cu_seqlens * 8) == 0);
  ck_assert_msg((a->checkpoints == NULL) == (b->checkpoints == NULL), "checkpoints (%s)", desc);
  if (s.checkpoints) ck_assert(memcmp(a->checkpoints, b->checkpoints, s.checkpoints * 8) == 0);
  ck_assert_str_eq(a->id, b->id);
}

/* ==== 1. PRNG ==== */

/* Random123 kat_vectors, philox4x32 10: counter, key (k0 k1), expected output. */
START_TEST(test_philox_kat) {
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int t = 0; t < 3; t++) {
    uint32_t out[4];
    uint64_t seed = (uint64_t)kat[t][5] << 32 | kat[t][4]; /* key = (lo32, hi32) of seed */
    kda_prng_philox(seed, kat[t], out);
    for (int i = 0; i < 4; i++)
      ck_assert_msg(out[i] == kat[t][6 + i], "KAT %d word %d: %08x, expected %08x", t, i,
                    out[i], kat[t][6 + i]);
  }
}
END_TEST

/* Pinned values of the specified algorithm (seed 42, stream 1, indices 0..3; and a large seed,
 * stream and index).  Computed once with this implementation after it passed the KATs. */
START_TEST(test_prng_pinned) {
  static const double u42[4] = {0x1.028f489814998p-3, 0x1.fba43b2841ff2p-1,
                                0x1.f70ab0736794p-4, 0x1.5c74b57e3d1b8p-1};
  static const double z42[4] = {0x1.46a4b69e3424cp+1, -0x1.e15d391bfb36p-3,
                                -0x1.3326bdc89634p+0, 0x1.e55f1abb8b918p-1};
  for (int i = 0; i < 4; i++) {
    ck_assert_msg(kda_prng_uniform(42, 1, (uint64_t)i) == u42[i], "uniform(42,1,%d) = %a", i,
                  kda_prng_uniform(42, 1, (uint64_t)i));
    ck_assert_msg(kda_prng_normal(42, 1, (uint64_t)i) == z42[i], "normal(42,1,%d) = %a", i,
                  kda_prng_normal(42, 1, (uint64_t)i));
  }
  const uint64_t seed = 0xfedcba9876543210ull, index = (1ull << 40) + 5;
  ck_assert_msg(kda_prng_uniform(seed, 7, index) == 0x1.b187fbba7f6acp-3, "uniform big = %a",
                kda_prng_uniform(seed, 7, index));
  ck_assert_msg(kda_prng_normal(seed, 7, index) == -0x1.fad195a9bb3cp-3, "normal big = %a",
                kda_prng_normal(seed, 7, index));
}
END_TEST

/* The derived values recomputed from kda_prng_philox as SPEC.md §11 words them. */
START_TEST(test_prng_derivation) {
  const uint64_t seed = 0x0123456789abcdefull;
  for (uint64_t idx = 0; idx < 64; idx++) {
    const uint64_t index = idx * 0x100000001ull; /* exercise both index words */
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), 3, 0}, out[4];
    kda_prng_philox(seed, ctr, out);
    double u = (double)((((uint64_t)out[1] << 32) | out[0]) >> 11) * 0x1p-53;
    ck_assert(kda_prng_uniform(seed, 3, index) == u);
    double s = 0.0;
    for (uint32_t j = 0; j < 6; j++) {
      ctr[3] = j;
      kda_prng_philox(seed, ctr, out);
      s += (double)((((uint64_t)out[1] << 32) | out[0]) >> 11) * 0x1p-53;
      s += (double)((((uint64_t)out[3] << 32) | out[2]) >> 11) * 0x1p-53;
    }
    ck_assert(kda_prng_normal(seed, 3, index) == s - 6.0);
  }
  /* streams and seeds are independent inputs */
  ck_assert(kda_prng_uniform(1, 1, 0) != kda_prng_uniform(1, 2, 0));
  ck_assert(kda_prng_uniform(1, 1, 0) != kda_prng_uniform(2, 1, 0));
}
END_TEST

START_TEST(test_prng_moments) {
  const int n = 100000;
  const uint64_t seed = 12345;
  double su = 0, sz = 0, szz = 0;
  for (int i = 0; i < n; i++) {
    double u = kda_prng_uniform(seed, 1, (uint64_t)i), z = kda_prng_normal(seed, 2, (uint64_t)i);
    ck_assert_msg(u >= 0.0 && u < 1.0, "uniform %d = %a (seed %llu)", i, u,
                  (unsigned long long)seed);
    ck_assert_msg(z > -6.0 && z < 6.0, "normal %d = %a (seed %llu)", i, z,
                  (unsigned long long)seed);
    ck_assert(u == 0.0 || u >= 0x1p-53);
    su += u;
    sz += z;
    szz += z * z;
  }
  const double mu = su / n, mz = sz / n, vz = szz / n - mz * mz;
  /* standard errors: 0.29/sqrt(n) = 9e-4, 1/sqrt(n) = 3.2e-3, sqrt(2/n) = 4.5e-3 */
  ck_assert_msg(fabs(mu - 0.5) < 0.005, "uniform mean %g (seed %llu)", mu,
                (unsigned long long)seed);
  ck_assert_msg(fabs(mz) < 0.02, "normal mean %g (seed %llu)", mz, (unsigned long long)seed);
  ck_assert_msg(fabs(vz - 1.0) < 0.03, "normal variance %g (seed %llu)", vz,
                (unsigned long long)seed);
}
END_TEST

/* ==== 2. SHA-256 ==== */

static void sha_hex(const void *data, size_t len, char hex[65]) {
  kda_sha256 s;
  unsigned char d[KDA_SHA256_BYTES];
  kda_sha256_init(&s);
  kda_sha256_update(&s, data, len);
  kda_sha256_final(&s, d);
  kda_sha256_hex(d, hex);
}

START_TEST(test_sha256_fips) {
  char hex[65];
  sha_hex("abc", 3, hex);
  ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  sha_hex("", 0, hex);
  ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  sha_hex(m448, strlen(m448), hex);
  ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                     "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  sha_hex(m896, strlen(m896), hex);
  ck_assert_str_eq(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  /* one million 'a', fed in uneven pieces to cross every block boundary case */
  static char a[1024];
  memset(a, 'a', sizeof a); /* pieces are at most 1009 bytes */
  kda_sha256 s;
  unsigned char d[KDA_SHA256_BYTES];
  kda_sha256_init(&s);
  size_t left = 1000000, piece = 1;
  while (left) {
    size_t n = piece < left ? piece : left;
    kda_sha256_update(&s, a, n);
    left -= n;
    piece = piece % 997 + 13;
  }
  kda_sha256_final(&s, d);
  kda_sha256_hex(d, hex);
  ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* lengths around the padding boundary: pieces and one shot agree */
  for (size_t n = 50; n < 140; n++) {
    char one[65], two[65];
    sha_hex(a, n, one);
    kda_sha256_init(&s);
    kda_sha256_update(&s, a, n / 3);
    kda_sha256_update(&s, a, n - n / 3);
    kda_sha256_final(&s, d);
    kda_sha256_hex(d, two);
    ck_assert_str_eq(one, two);
  }
}
END_TEST

/* ==== 3. Generator ==== */

START_TEST(test_names) {
  int32_t x;
  /* One table, two spellings (SPEC.md §10.3); the file spellings are what manifests hold. */
  static const char *const file[KDA_PRECISION_COUNT] = {"f64", "f32", NULL, "bf16", "f16"};
  static const char *const canon[KDA_PRECISION_COUNT] = {"fp64", "fp32", "tf32", "bf16", "fp16"};
  for (int32_t p = 0; p < KDA_PRECISION_COUNT; p++) {
    ck_assert_str_eq(kda_precision_name(p), canon[p]);
    ck_assert_int_eq(kda_precision_parse(canon[p], &x), KDA_OK);
    ck_assert_int_eq(x, p);
    if (!file[p]) {
      ck_assert_ptr_null(kda_precision_file_name(p));
      continue;
    }
    ck_assert_str_eq(kda_precision_file_name(p), file[p]);
    ck_assert_int_eq(kda_precision_parse(file[p], &x), KDA_OK);
    ck_assert_int_eq(x, p);
  }
  ck_assert_int_eq(KDA_PRECISION_BF16, 3); /* the ABI's values (KDA_CLASS_BF16) */
  ck_assert_ptr_null(kda_precision_name(KDA_PRECISION_COUNT));
  ck_assert_ptr_null(kda_precision_file_name(-1));
  ck_assert_int_eq(kda_precision_parse("f8", &x), KDA_EINVAL);
  ck_assert_int_eq(kda_precision_parse(NULL, &x), KDA_EINVAL);
  for (int32_t r = 0; r < 8; r++) {
    ck_assert_int_eq(kda_regime_parse(kda_regime_name(r), &x), KDA_OK);
    ck_assert_int_eq(x, r);
  }
  ck_assert_str_eq(kda_regime_name(KDA_REGIME_DECAY_SMALL), "decay-small");
  ck_assert_str_eq(kda_regime_name(KDA_REGIME_LOWRANK_SLOW), "lowrank-slow");
  ck_assert_ptr_null(kda_regime_name(8));
  ck_assert_int_eq(kda_regime_parse("gauss", &x), KDA_EINVAL);
}
END_TEST

START_TEST(test_parse) {
  kda_gen_desc d;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_gen_parse("seed=7 T=64 H=2 HV=4 K=16 V=8 regime=randn gate=softplus "
                                 "beta=logit l2=fla prec=bf16", &d, err, sizeof err), KDA_OK);
  ck_assert_uint_eq(d.seed, 7);
  ck_assert_int_eq(d.p.T, 64);
  ck_assert_int_eq(d.p.HV, 4);
  ck_assert_int_eq(d.p.gate_mode, KDA_GATE_SOFTPLUS);
  ck_assert_int_eq(d.p.has_A_log, 1); /* default for softplus */
  ck_assert_int_eq(d.p.beta_mode, KDA_BETA_LOGIT);
  ck_assert_int_eq(d.precision, KDA_PRECISION_BF16);
  ck_assert(d.p.scale == 0.25);
  ck_assert(strncmp(d.id, "gen-", 4) == 0);
  kda_gen_desc_free(&d);
  /* seqlens sets N and T; checkpoints=log is 2^j - 1 below T, and T - 1 */
  ck_assert_int_eq(kda_gen_parse("seqlens=3,0,7 checkpoints=log gate=lower_bound alog=0 lb=-2.5",
                                 &d, err, sizeof err), KDA_OK);
  ck_assert_int_eq(d.p.N, 3);
  ck_assert_int_eq(d.p.T, 10);
  ck_assert_int_eq(d.p.n_checkpoints, 5);
  static const int64_t ck[5] = {0, 1, 3, 7, 9};
  for (int i = 0; i < 5; i++) ck_assert_int_eq(d.checkpoints[i], ck[i]);
  ck_assert_int_eq(d.p.has_A_log, 0);
  ck_assert(d.p.lower_bound == -2.5);
  kda_gen_desc_free(&d);
  ck_assert_int_eq(kda_gen_parse("T=8 checkpoints=log", &d, err, sizeof err), KDA_OK);
  ck_assert_int_eq(d.p.n_checkpoints, 4); /* 0 1 3 7 */
  ck_assert_int_eq(d.checkpoints[3], 7);
  kda_gen_desc_free(&d);
  /* errors name the word */
  static const struct { const char *text, *msg; } bad[] = {
      {"T=x", "description: bad value 'x' for key 'T'"},
      {"T=-1", "bad value '-1' for key 'T'"},
      {"K=0", "bad value '0' for key 'K'"},
      {"foo=1", "unknown key 'foo'"},
      {"T=4 T=5", "key 'T' given twice"},
      {"T", "word 'T' is not key=value"},
      {"gate=softmax", "bad value 'softmax' for key 'gate'"},
      {"layout=kk", "bad value 'kk' for key 'layout'"},
      {"seqlens=3,,4", "bad value '3,,4' for key 'seqlens'"},
      {"T=5 seqlens=3,4", "T=5 disagrees with seqlens"},
      {"checkpoints=1,a", "bad value '1,a' for key 'checkpoints'"},
      {"scale=nan", "bad value 'nan' for key 'scale'"},
      {"alog=2", "bad value '2' for key 'alog'"},
      {"regime=gauss", "bad value 'gauss' for key 'regime'"},
      {"prec=f8", "bad value 'f8' for key 'prec'"},
      {"seed=-3", "bad value '-3' for key 'seed'"},
      {"id=a\"b", "bad value 'a\"b' for key 'id'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    ck_assert_int_eq(kda_gen_parse(bad[i].text, &d, err, sizeof err), KDA_EINVAL);
    ck_assert_msg(strstr(err, bad[i].msg) != NULL, "'%s': message '%s'", bad[i].text, err);
    kda_gen_desc_free(&d);
  }
}
END_TEST

/* Errors found when generating rather than when parsing. */
START_TEST(test_gen_errors) {
  static const struct { const char *text, *msg; int st; } bad[] = {
      {"regime=expansive l2=fla", "regime expansive needs l2=off", KDA_EINVAL},
      {"gate=softplus alog=0", "softplus needs A_log", KDA_EINVAL},
      {"gate=lower_bound lb=-6", "outside [-5, 0)", KDA_EINVAL},
      {"H=2 HV=3", "not a multiple", KDA_EINVAL},
      {"T=4 checkpoints=1,1", "strictly increasing", KDA_EINVAL},
      {"T=4 checkpoints=4", "outside [0, T=4)", KDA_EINVAL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kda_gen_desc d;
    kda_case c;
    char err[KDA_ERRLEN] = "";
    ck_assert_int_eq(kda_gen_parse(bad[i].text, &d, err, sizeof err), KDA_OK);
    ck_assert_int_eq(kda_gen_case(&d, &c, err, sizeof err), bad[i].st);
    ck_assert_msg(strstr(err, bad[i].msg) != NULL, "'%s': message '%s'", bad[i].text, err);
    ck_assert_ptr_null(c.q);
    kda_gen_desc_free(&d);
  }
}
END_TEST

START_TEST(test_gen_determinism) {
  const char *desc = "seed=99 seqlens=5,0,6 H=2 HV=4 K=8 V=4 gate=softplus beta=logit h0=1 "
                     "checkpoints=log layout=vk prec=bf16 regime=lowrank";
  kda_case a, b;
  gen_from(desc, &a);
  gen_from(desc, &b);
  same_case(&a, &b, desc);
  ck_assert_str_eq(a.manifest_json, b.manifest_json);
  char dir[64], p1[128], p2[128], p3[128];
  make_dir(dir);
  path_in(p1, sizeof p1, dir, "a.npz");
  path_in(p2, sizeof p2, dir, "b.npz");
  path_in(p3, sizeof p3, dir, "c.npz");
  save_ok(p1, &a);
  save_ok(p2, &b);
  size_t n1, n2, n3;
  unsigned char *f1 = kda_test_slurp(p1, &n1), *f2 = kda_test_slurp(p2, &n2);
  ck_assert_uint_eq(n1, n2);
  ck_assert(memcmp(f1, f2, n1) == 0);
  /* load and save again: the same bytes (generator_info is carried over) */
  kda_case c;
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_case_load(p1, &c, err, sizeof err) == KDA_OK, "%s", err);
  same_case(&a, &c, desc);
  ck_assert_str_eq(a.manifest_json, c.manifest_json);
  save_ok(p3, &c);
  unsigned char *f3 = kda_test_slurp(p3, &n3);
  ck_assert_uint_eq(n1, n3);
  ck_assert(memcmp(f1, f3, n1) == 0);
  /* the canonical description in generator_info makes the same case */
  json_t *m = json_loads(a.manifest_json, 0, NULL);
  const char *canon = json_string_value(
      json_object_get(json_object_get(m, "generator_info"), "description"));
  ck_assert_ptr_nonnull(canon);
  kda_case e;
  gen_from(canon, &e);
  same_case(&a, &e, canon);
  ck_assert_str_eq(a.manifest_json, e.manifest_json);
  json_decref(m);
  free(f1);
  free(f2);
  free(f3);
  kda_case_free(&a);
  kda_case_free(&b);
  kda_case_free(&c);
  kda_case_free(&e);
}
END_TEST

/* Pinned generated values: the first q, g, beta of one description, per precision. */
START_TEST(test_gen_pinned) {
  kda_case c;
  gen_from("seed=42 T=2 H=1 K=2 V=2 prec=f64", &c);
  ck_assert(c.q[0] == kda_prng_normal(42, 1, 0));
  ck_assert(c.k[1] == kda_prng_normal(42, 2, 1));
  ck_assert(c.v[3] == kda_prng_normal(42, 3, 3));
  ck_assert(c.g[2] == -kda_prng_uniform(42, 4, 2));
  ck_assert(c.beta[1] == kda_prng_uniform(42, 5, 1));
  ck_assert(c.q[0] == 0x1.46a4b69e3424cp+1);
  kda_case_free(&c);
  gen_from("seed=42 T=2 H=1 K=2 V=2 prec=bf16", &c);
  ck_assert(c.q[0] == kda_round_bf16(0x1.46a4b69e3424cp+1));
  kda_case_free(&c);
  gen_from("seed=42 T=2 H=1 K=2 V=2 prec=f16 gate=softplus", &c);
  ck_assert(c.A_log[0] == (double)kda_round_f32(2.0 * kda_prng_uniform(42, 6, 0) - 1.0));
  ck_assert(c.dt_bias[1] == (double)kda_round_f32(kda_prng_normal(42, 7, 1)));
  ck_assert(c.g[0] == kda_round_f16(kda_prng_normal(42, 4, 0)));
  kda_case_free(&c);
  /* h0 draws the K-major index whatever the layout: vk is the transpose of kv */
  kda_case kv, vk;
  gen_from("seed=3 T=1 K=3 V=2 h0=1 layout=kv prec=f64", &kv);
  gen_from("seed=3 T=1 K=3 V=2 h0=1 layout=vk prec=f64", &vk);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) {
      ck_assert(kv.h0[i * 2 + j] == vk.h0[j * 3 + i]);
      ck_assert(kv.h0[i * 2 + j] == 0.5 * kda_prng_normal(3, 8, (uint64_t)(i * 2 + j)));
    }
  kda_case_free(&kv);
  kda_case_free(&vk);
}
END_TEST

/* Every value of every float member is exact in the member's precision. */
static void assert_exact(const kda_case *c, const char *desc) {
  kda_problem_sizes s;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_problem_sizes_get(&c->p, &s, err, sizeof err), KDA_OK);
  const double *x[8] = {c->q, c->k, c->v, c->g, c->beta, c->h0, c->A_log, c->dt_bias};
  const uint64_t n[8] = {s.q, s.k, s.v, s.g, s.beta, s.h0, s.A_log, s.dt_bias};
  for (int m = 0; m < 8; m++) {
    const int32_t prec = m >= 6 && c->input_precision != KDA_PRECISION_FP64 ? KDA_PRECISION_FP32
                                                                       : c->input_precision;
    for (uint64_t i = 0; i < n[m]; i++) {
      double r = prec == KDA_PRECISION_BF16 ? kda_round_bf16(x[m][i])
                 : prec == KDA_PRECISION_FP16 ? kda_round_f16(x[m][i])
                 : prec == KDA_PRECISION_FP32 ? (double)kda_round_f32(x[m][i])
                                        : x[m][i];
      ck_assert_msg(r == x[m][i] && isfinite(x[m][i]), "member %d [%llu] = %a not exact (%s)",
                    m, (unsigned long long)i, x[m][i], desc);
    }
  }
}

/* Properties that a regime promises. */
static void assert_regime(const kda_case *c, int32_t regime, const char *desc) {
  kda_problem_sizes s;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_problem_sizes_get(&c->p, &s, err, sizeof err), KDA_OK);
  const kda_problem *p = &c->p;
  if (regime == KDA_REGIME_POSITIVE)
    for (uint64_t i = 0; i < s.q; i++) ck_assert(c->q[i] >= 0 && c->k[i] >= 0 && c->q[i] <= 1); /* 1 after rounding */
  if (regime == KDA_REGIME_UNIT || regime == KDA_REGIME_EXPANSIVE) {
    const double want = regime == KDA_REGIME_UNIT ? 1.0 : 2.0;
    const double tol = c->input_precision == KDA_PRECISION_FP64 ? 1e-14
                       : c->input_precision == KDA_PRECISION_FP32 ? 1e-6 : 0.05;
    for (int64_t r = 0; r < p->T * p->H; r++) {
      double n2 = 0;
      for (int64_t i = 0; i < p->K; i++) n2 += c->k[r * p->K + i] * c->k[r * p->K + i];
      ck_assert_msg(fabs(n2 - want) < tol * want, "row %lld: ||k||^2 = %g (%s)", (long long)r,
                    n2, desc);
    }
  }
  if (regime == KDA_REGIME_EXPANSIVE && p->beta_mode == KDA_BETA_PROB)
    for (uint64_t i = 0; i < s.beta; i++) ck_assert(c->beta[i] >= 0 && c->beta[i] <= 1.5);
  if (c->g && regime == KDA_REGIME_DECAY_SMALL) {
    const double want = p->gate_mode == KDA_GATE_LOG ? -1e-4
                        : p->gate_mode == KDA_GATE_SOFTPLUS ? -9.25 : -11.0;
    for (uint64_t i = 0; i < s.g; i++)
      ck_assert(c->g[i] == (c->input_precision == KDA_PRECISION_BF16 ? kda_round_bf16(want)
                            : c->input_precision == KDA_PRECISION_FP16 ? kda_round_f16(want)
                            : c->input_precision == KDA_PRECISION_FP32 ? (double)kda_round_f32(want)
                                                                 : want));
  }
  if (c->g && p->gate_mode == KDA_GATE_LOG)
    for (uint64_t i = 0; i < s.g; i++) ck_assert(c->g[i] <= 0.0 && c->g[i] >= -1.0);
  if ((regime == KDA_REGIME_MIXED || regime == KDA_REGIME_LOWRANK_SLOW) && c->g &&
      p->gate_mode == KDA_GATE_LOG) { /* slow channels: log-decays in [-2e-4, -1e-4] */
    const uint64_t GW = (uint64_t)(p->family == KDA_FAMILY_GDN ? 1 : p->K);
    int64_t n_slow = 0;
    for (uint64_t i = 0; i < s.g; i++) {
      const int slow = regime == KDA_REGIME_LOWRANK_SLOW || (i % GW) % 4 == 0;
      n_slow += slow;
      if (slow) ck_assert_msg(c->g[i] >= -2.01e-4 && c->g[i] <= -0.99e-4, "g[%llu] = %g (%s)",
                              (unsigned long long)i, c->g[i], desc);
    }
    ck_assert(n_slow > 0 && (regime == KDA_REGIME_LOWRANK_SLOW || (uint64_t)n_slow < s.g ||
                             GW == 1));
  }
  if ((regime == KDA_REGIME_LOWRANK || regime == KDA_REGIME_LOWRANK_SLOW) &&
      c->input_precision == KDA_PRECISION_FP64 && p->T >= 3) {
    /* three key rows of head 0 span at most two dimensions: Gram determinant ~ 0 */
    const double *r0 = c->k, *r1 = c->k + p->H * p->K, *r2 = c->k + 2 * p->H * p->K;
    const double *rows[3] = {r0, r1, r2};
    double G[3][3];
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++) {
        G[a][b] = 0;
        for (int64_t i = 0; i < p->K; i++) G[a][b] += rows[a][i] * rows[b][i];
      }
    double det = G[0][0] * (G[1][1] * G[2][2] - G[1][2] * G[2][1]) -
                 G[0][1] * (G[1][0] * G[2][2] - G[1][2] * G[2][0]) +
                 G[0][2] * (G[1][0] * G[2][1] - G[1][1] * G[2][0]);
    ck_assert_msg(fabs(det) < 1e-10 * G[0][0] * G[1][1] * G[2][2], "Gram det %g (%s)", det,
                  desc);
  }
}

/* Every regime x every mode value x every precision: generate, save, load, compare. */
START_TEST(test_gen_roundtrip_all) {
  static const char *const modes[] = {
      "",
      "family=gdn",
      "family=deltanet",
      "family=linear",
      "gate=softplus",
      "gate=lower_bound lb=-3",
      "gate=lower_bound alog=0",
      "family=gdn gate=softplus",
      "family=gdn gate=lower_bound",
      "beta=logit",
      "beta=logit_neg",
      "l2=fla",
      "l2=ggml eps=1e-5",
      "head_map=mod",
      "layout=vk h0=1",
      "h0=1 final=0",
      "seqlens=3,0,5 h0=1 checkpoints=log",
      "checkpoints=0,4,7 scale=0.125",
  };
  const int32_t regime = (int32_t)_i;
  char dir[64], path[128], desc[512], err[KDA_ERRLEN];
  make_dir(dir);
  path_in(path, sizeof path, dir, "case.npz");
  for (int32_t prec = 0; prec < KDA_PRECISION_COUNT; prec++)
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
      if (!kda_precision_file_name(prec)) continue; /* tf32: a class, no input precision */
      if (regime == KDA_REGIME_EXPANSIVE && strstr(modes[m], "l2=")) continue;
      snprintf(desc, sizeof desc, "seed=%d T=8 H=2 HV=4 K=4 V=3 regime=%s prec=%s %s",
               (int)(100 + m), kda_regime_name(regime), kda_precision_file_name(prec), modes[m]);
      kda_case a, b;
      gen_from(desc, &a);
      assert_exact(&a, desc);
      assert_regime(&a, regime, desc);
      save_ok(path, &a);
      int st = kda_case_load(path, &b, err, sizeof err);
      ck_assert_msg(st == KDA_OK, "load (%s): %s", desc, err);
      same_case(&a, &b, desc);
      kda_case_free(&a);
      kda_case_free(&b);
    }
}
END_TEST

/* T = 0 and empty sequences survive the round trip. */
START_TEST(test_gen_empty) {
  char dir[64], path[128], err[KDA_ERRLEN];
  make_dir(dir);
  path_in(path, sizeof path, dir, "empty.npz");
  static const char *const descs[] = {"T=0", "seqlens=0,0 h0=1", "T=0 checkpoints=log"};
  for (size_t i = 0; i < 3; i++) {
    kda_case a, b;
    gen_from(descs[i], &a);
    save_ok(path, &a);
    ck_assert_msg(kda_case_load(path, &b, err, sizeof err) == KDA_OK, "%s: %s", descs[i], err);
    same_case(&a, &b, descs[i]);
    kda_case_free(&a);
    kda_case_free(&b);
  }
}
END_TEST

START_TEST(test_manifest_text) {
  kda_case c;
  gen_from("seed=5 T=4 H=1 K=16 V=2 gate=lower_bound id=example-1", &c);
  json_error_t je;
  json_t *m = json_loads(c.manifest_json, JSON_REJECT_DUPLICATES, &je);
  ck_assert_msg(m != NULL, "%s", je.text);
  /* keys in the fixed order */
  static const char *const top[] = {"schema", "generator", "id", "problem", "input_precision",
                                    "members", "generator_info"};
  const char *key;
  json_t *x;
  size_t i = 0;
  json_object_foreach(m, key, x) {
    ck_assert_uint_lt(i, 7);
    ck_assert_str_eq(key, top[i++]);
  }
  ck_assert_uint_eq(i, 7);
  ck_assert_str_eq(json_string_value(json_object_get(m, "schema")), "kda-case/1");
  ck_assert_str_eq(json_string_value(json_object_get(m, "id")), "example-1");
  static const char *const prob[] = {"N", "T", "H", "HV", "K", "V", "n_checkpoints", "family",
                                     "gate", "beta", "l2", "head_map", "state_layout",
                                     "has_A_log", "has_initial_state", "want_final_state",
                                     "scale", "lower_bound", "l2_eps"};
  i = 0;
  json_object_foreach(json_object_get(m, "problem"), key, x) ck_assert_str_eq(key, prob[i++]);
  ck_assert_uint_eq(i, 19);
  /* exact numbers: 0.25, -5.0 stay readable and exact */
  ck_assert_ptr_nonnull(strstr(c.manifest_json, "\"scale\": 0.25,"));
  ck_assert_ptr_nonnull(strstr(c.manifest_json, "\"lower_bound\": -5.0,"));
  ck_assert_ptr_nonnull(strstr(c.manifest_json, "\"gate\": \"lower_bound\""));
  ck_assert_ptr_nonnull(strstr(c.manifest_json, "\"has_A_log\": true"));
  json_t *members = json_object_get(m, "members");
  static const char *const mem[] = {"q", "k", "v", "g", "beta", "A_log", "dt_bias",
                                    "cu_seqlens"};
  i = 0;
  json_object_foreach(members, key, x) ck_assert_str_eq(key, mem[i++]);
  ck_assert_uint_eq(i, 8);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(members, "A_log"),
                                                     "precision")), "f32");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(members, "cu_seqlens"),
                                                     "precision")), "i64");
  json_t *gi = json_object_get(m, "generator_info");
  ck_assert_int_eq(json_integer_value(json_object_get(gi, "seed")), 5);
  ck_assert_str_eq(json_string_value(json_object_get(gi, "regime")), "randn");
  ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(gi, "description")),
                               "seed=5 T=4 H=1 HV=1 K=16 V=2 family=kda gate=lower_bound"));
  json_decref(m);
  kda_case_free(&c);
}
END_TEST

/* ==== 4. Bad case files ==== */

/* A rewrite of a case file: members in the standard order from case c (stored as f8 or i8),
 * with one member left out or replaced, and optionally another manifest. */
typedef struct edit {
  const char *skip;      /* member left out */
  const char *name;      /* member replaced by (dtype, ndim, shape, data) */
  int32_t dtype, ndim;
  int64_t shape[4];
  const void *data;
  const char *manifest;  /* manifest text instead of the case's */
  const char *extra;     /* an extra member (same replacement data) */
} edit;

static void write_edited(const char *path, const kda_case *c, const edit *e) {
  kda_problem_sizes s;
  char err[KDA_ERRLEN];
  ck_assert_int_eq(kda_problem_sizes_get(&c->p, &s, err, sizeof err), KDA_OK);
  const kda_problem *p = &c->p;
  const int vk = p->state_layout == KDA_STATE_VK;
  const int64_t GW = kda_problem_gate_width(p) ? kda_problem_gate_width(p) : 1;
  struct { const char *name; const double *x; const int64_t *ix; int ndim; int64_t sh[4]; } m[] = {
      {"q", c->q, NULL, 3, {p->T, p->H, p->K}},
      {"k", c->k, NULL, 3, {p->T, p->H, p->K}},
      {"v", c->v, NULL, 3, {p->T, p->HV, p->V}},
      {"g", c->g, NULL, 3, {p->T, p->HV, GW}},
      {"beta", c->beta, NULL, 2, {p->T, p->HV}},
      {"A_log", c->A_log, NULL, 1, {p->HV}},
      {"dt_bias", c->dt_bias, NULL, 2, {p->HV, GW}},
      {"cu_seqlens", NULL, c->cu_seqlens, 1, {p->N + 1}},
      {"h0", c->h0, NULL, 4, {p->N, p->HV, vk ? p->V : p->K, vk ? p->K : p->V}},
      {"checkpoints", NULL, c->checkpoints, 1, {p->n_checkpoints}},
  };
  kda_npz_writer *w;
  ck_assert_msg(kda_npz_writer_open(path, &w, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_msg(kda_npz_writer_set_manifest(w, e->manifest ? e->manifest : c->manifest_json, err,
                                            sizeof err) == KDA_OK, "%s", err);
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    int st = KDA_OK;
    if (e->skip && strcmp(e->skip, m[i].name) == 0) continue;
    if (e->name && strcmp(e->name, m[i].name) == 0)
      st = kda_npz_writer_add(w, m[i].name, e->dtype, e->ndim, e->shape, e->data, err,
                              sizeof err);
    else if (m[i].x)
      st = kda_npz_writer_add(w, m[i].name, KDA_DTYPE_F64, m[i].ndim, m[i].sh, m[i].x, err,
                              sizeof err);
    else if (m[i].ix)
      st = kda_npz_writer_add(w, m[i].name, KDA_DTYPE_I64, m[i].ndim, m[i].sh, m[i].ix, err,
                              sizeof err);
    ck_assert_msg(st == KDA_OK, "%s", err);
  }
  if (e->extra)
    ck_assert_int_eq(kda_npz_writer_add(w, e->extra, e->dtype, e->ndim, e->shape, e->data, err,
                                        sizeof err), KDA_OK);
  ck_assert_msg(kda_npz_writer_commit(w, err, sizeof err) == KDA_OK, "%s", err);
}

static void expect_load(const char *path, int want, const char *msg, const char *what) {
  kda_case c;
  char err[KDA_ERRLEN] = "";
  int st = kda_case_load(path, &c, err, sizeof err);
  ck_assert_msg(st == want, "%s: status %d, expected %d (%s)", what, st, want, err);
  if (msg) ck_assert_msg(strstr(err, msg) != NULL, "%s: message '%s' lacks '%s'", what, err, msg);
  if (want != KDA_OK) {
    ck_assert_ptr_null(c.q);
    ck_assert_ptr_null(c.manifest_json);
  }
  kda_case_free(&c);
}

/* The manifest of c with one JSON path (a.b) set to a value given as JSON text (NULL: del). */
static char *manifest_with(const kda_case *c, const char *obj, const char *key,
                           const char *value_json) {
  json_t *m = json_loads(c->manifest_json, 0, NULL);
  json_t *o = obj ? json_object_get(m, obj) : m;
  if (value_json)
    json_object_set_new(o, key, json_loads(value_json, JSON_DECODE_ANY, NULL));
  else
    json_object_del(o, key);
  char *text = json_dumps(m, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
  json_decref(m);
  return text;
}

/* A good case with every member (softplus gate, h0, checkpoints, 3 sequences). */
static const char *const GOOD = "seed=11 seqlens=3,0,5 H=2 HV=4 K=4 V=3 gate=softplus h0=1 "
                                "checkpoints=0,4,7 prec=f32";

START_TEST(test_bad_members) {
  char dir[64], path[128];
  make_dir(dir);
  path_in(path, sizeof path, dir, "bad.npz");
  kda_case c;
  gen_from(GOOD, &c);
  write_edited(path, &c, &(edit){0});
  expect_load(path, KDA_OK, NULL, "unedited rewrite (stored as f8)");
  /* missing members */
  write_edited(path, &c, &(edit){.skip = "g"});
  expect_load(path, KDA_ENOTFOUND, "bad.npz: missing member 'g' (needed by gate mode softplus)",
              "missing g");
  write_edited(path, &c, &(edit){.skip = "h0"});
  expect_load(path, KDA_ENOTFOUND, "missing member 'h0' (needed by has_initial_state)", "h0");
  write_edited(path, &c, &(edit){.skip = "cu_seqlens"});
  expect_load(path, KDA_ENOTFOUND, "missing member 'cu_seqlens' (needed by N = 3)", "cu");
  write_edited(path, &c, &(edit){.skip = "A_log"});
  expect_load(path, KDA_ENOTFOUND, "missing member 'A_log'", "A_log");
  /* shape disagreement */
  double v[8 * 4 * 2] = {0};
  write_edited(path, &c, &(edit){.name = "v", .dtype = KDA_DTYPE_F64, .ndim = 3,
                                 .shape = {8, 4, 2}, .data = v});
  expect_load(path, KDA_ESHAPE, "member 'v' has shape [8,4,2], expected [T,HV,V] = [8,4,3]",
              "v shape");
  write_edited(path, &c, &(edit){.name = "beta", .dtype = KDA_DTYPE_F64, .ndim = 1,
                                 .shape = {32}, .data = c.beta});
  expect_load(path, KDA_ESHAPE, "member 'beta' has shape [32], expected [T,HV] = [8,4]", "beta");
  /* wrong dtype */
  int64_t qi[8 * 2 * 4] = {0};
  write_edited(path, &c, &(edit){.name = "q", .dtype = KDA_DTYPE_I64, .ndim = 3,
                                 .shape = {8, 2, 4}, .data = qi});
  expect_load(path, KDA_EDTYPE, "member 'q' has dtype <i8", "q dtype");
  /* a member the problem does not use */
  write_edited(path, &c, &(edit){.extra = "h0x", .dtype = KDA_DTYPE_F64, .ndim = 1,
                                 .shape = {2}, .data = v});
  expect_load(path, KDA_OK, NULL, "unknown extra member is ignored");
  kda_case d;
  gen_from("seed=11 seqlens=3,0,5 H=2 HV=4 K=4 V=3 prec=f32", &d); /* log gate, no h0 */
  write_edited(path, &d, &(edit){.extra = "dt_bias", .dtype = KDA_DTYPE_F64, .ndim = 2,
                                 .shape = {4, 4}, .data = v});
  expect_load(path, KDA_ESHAPE, "member 'dt_bias' is present but the problem does not use it",
              "unused dt_bias");
  kda_case_free(&d);
  kda_case_free(&c);
}
END_TEST

START_TEST(test_bad_manifest) {
  char dir[64], path[128];
  make_dir(dir);
  path_in(path, sizeof path, dir, "bad.npz");
  kda_case c;
  gen_from(GOOD, &c);
  static const struct { const char *obj, *key, *val; int st; const char *msg; } bad[] = {
      /* manifest fields that disagree with the arrays */
      {"problem", "T", "9", KDA_ESHAPE, "member 'q' has shape [8,2,4], expected [T,H,K] = [9,2,4]"},
      {"problem", "K", "5", KDA_ESHAPE, "member 'q' has shape [8,2,4], expected [T,H,K] = [8,2,5]"},
      {"problem", "N", "2", KDA_ESHAPE, "member 'cu_seqlens' has shape [4], expected [N+1] = [3]"},
      {"problem", "n_checkpoints", "2", KDA_ESHAPE, "member 'checkpoints' has shape [3]"},
      {"problem", "has_initial_state", "false", KDA_ESHAPE,
       "member 'h0' is present but the problem does not use it"},
      {"problem", "family", "\"gdn\"", KDA_ESHAPE, "expected [T,HV,1] = [8,4,1]"},
      /* bad option names and values */
      {"problem", "gate", "\"softmax\"", KDA_EINVAL, "unknown gate mode 'softmax'"},
      {"problem", "family", "\"mamba\"", KDA_EINVAL, "unknown family mode 'mamba'"},
      {"problem", "state_layout", "\"kk\"", KDA_EINVAL, "unknown state_layout mode 'kk'"},
      {"problem", "HV", "3", KDA_EINVAL, "not a multiple"},
      {"problem", "has_A_log", "false", KDA_EINVAL, "softplus needs A_log"},
      {NULL, "input_precision", "\"f8\"", KDA_EINVAL, "input_precision is not one of"},
      {"members", "q", "{\"precision\": \"bf16\"}", KDA_EINVAL,
       "member 'q' is declared precision 'bf16' in the manifest, expected 'f32'"},
      /* malformed or missing keys */
      {"problem", "T", "\"8\"", KDA_EFORMAT, "'problem.T' is not an integer"},
      {"problem", "want_final_state", "1", KDA_EFORMAT, "is not true or false"},
      {"problem", "gat", "\"log\"", KDA_EFORMAT, "unknown key 'problem.gat'"},
      {"problem", "T", NULL, KDA_ENOTFOUND, "'problem.T' is missing"},
      {NULL, "problem", NULL, KDA_ENOTFOUND, "'problem' is missing"},
      {NULL, "schema", NULL, KDA_ENOTFOUND, "'schema' is missing"},
      {NULL, "schema", "\"kda-case/2\"", KDA_EFORMAT, "schema is not"},
      {NULL, "input_precision", NULL, KDA_ENOTFOUND, "'input_precision' is missing"},
      /* keys that are optional or ignored */
      {NULL, "members", NULL, KDA_OK, NULL},
      {NULL, "generator_info", NULL, KDA_OK, NULL},
      {NULL, "future_key", "[1, 2]", KDA_OK, NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *text = manifest_with(&c, bad[i].obj, bad[i].key, bad[i].val);
    char what[128];
    snprintf(what, sizeof what, "%s.%s = %s", bad[i].obj ? bad[i].obj : "", bad[i].key,
             bad[i].val ? bad[i].val : "(deleted)");
    write_edited(path, &c, &(edit){.manifest = text});
    expect_load(path, bad[i].st, bad[i].msg, what);
    free(text);
  }
  kda_case_free(&c);
}
END_TEST

/* A zip with only a manifest.json member of the given text (the writer refuses non-JSON). */
static void write_raw_manifest(const char *path, const char *text) {
  int ze = 0;
  zip_t *z = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &ze);
  ck_assert_ptr_nonnull(z);
  zip_source_t *src = zip_source_buffer(z, text, strlen(text), 0);
  ck_assert_ptr_nonnull(src);
  ck_assert_int_ge(zip_file_add(z, "manifest.json", src, ZIP_FL_OVERWRITE), 0);
  ck_assert_int_eq(zip_close(z), 0);
}

START_TEST(test_bad_container) {
  char dir[64], path[128];
  make_dir(dir);
  path_in(path, sizeof path, dir, "bad.npz");
  write_raw_manifest(path, "{\"schema\": \"kda-case/1\", oops");
  expect_load(path, KDA_EFORMAT, "manifest.json is not valid JSON", "not JSON");
  write_raw_manifest(path, "[1, 2]");
  expect_load(path, KDA_EFORMAT, "manifest.json is not a JSON object", "JSON array");
  write_raw_manifest(path, "{\"schema\": \"kda-case/1\", \"schema\": \"kda-case/1\"}");
  expect_load(path, KDA_EFORMAT, "not valid JSON", "duplicate key");
  /* no manifest at all */
  kda_npz_writer *w;
  char err[KDA_ERRLEN];
  double x[2] = {1, 2};
  ck_assert_int_eq(kda_npz_writer_open(path, &w, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_add(w, "q", KDA_DTYPE_F64, 1, (int64_t[]){2}, x, err,
                                      sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_writer_commit(w, err, sizeof err), KDA_OK);
  expect_load(path, KDA_ENOTFOUND, "missing member 'manifest.json'", "no manifest");
  /* not a file */
  path_in(path, sizeof path, dir, "absent.npz");
  expect_load(path, KDA_EIO, NULL, "missing file");
}
END_TEST

START_TEST(test_bad_values) {
  char dir[64], path[128];
  make_dir(dir);
  path_in(path, sizeof path, dir, "bad.npz");
  kda_case c;
  gen_from(GOOD, &c);
  double q[64], g[128];
  memcpy(q, c.q, sizeof q);
  memcpy(g, c.g, sizeof g);
  const edit eq = {.name = "q", .dtype = KDA_DTYPE_F64, .ndim = 3, .shape = {8, 2, 4}, .data = q};
  const edit eg = {.name = "g", .dtype = KDA_DTYPE_F64, .ndim = 3, .shape = {8, 4, 4}, .data = g};
  q[17] = NAN; /* t = 2, h = 0, k = 1 */
  write_edited(path, &c, &eq);
  expect_load(path, KDA_ENONFINITE, "bad.npz: member 'q' element 17 [t=2,h=0,k=1] is NaN", "NaN");
  q[17] = c.q[17];
  q[63] = INFINITY;
  write_edited(path, &c, &eq);
  expect_load(path, KDA_ENONFINITE, "member 'q' element 63 [t=7,h=1,k=3] is +Inf", "+Inf");
  q[63] = -INFINITY;
  write_edited(path, &c, &eq);
  expect_load(path, KDA_ENONFINITE, "member 'q' element 63 [t=7,h=1,k=3] is -Inf", "-Inf q");
  q[63] = c.q[63];
  /* -inf g: forbidden in the softplus gate, allowed (a state wipe) in the log gate */
  g[5] = -INFINITY;
  write_edited(path, &c, &eg);
  expect_load(path, KDA_ENONFINITE, "member 'g' element 5 [t=0,hv=1,k=1] is -Inf (allowed only "
              "with gate mode log)", "-inf g softplus");
  g[5] = INFINITY;
  write_edited(path, &c, &eg);
  expect_load(path, KDA_ENONFINITE, "is +Inf", "+inf g");
  kda_case lg;
  gen_from("seed=11 T=8 H=2 HV=4 K=4 V=3 prec=bf16", &lg);
  double gl[128];
  memcpy(gl, lg.g, sizeof gl);
  gl[100] = -INFINITY;
  write_edited(path, &lg, &(edit){.name = "g", .dtype = KDA_DTYPE_F32, .ndim = 3,
                                  .shape = {8, 4, 4}, .data = (float[128]){0}});
  expect_load(path, KDA_OK, NULL, "zero g in the log gate");
  write_edited(path, &lg, &(edit){.name = "g", .dtype = KDA_DTYPE_F64, .ndim = 3,
                                  .shape = {8, 4, 4}, .data = gl});
  kda_case back;
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_case_load(path, &back, err, sizeof err) == KDA_OK, "-inf g log: %s", err);
  ck_assert(isinf(back.g[100]) && back.g[100] < 0);
  kda_case_free(&back);
  /* values not exact in the declared precision */
  q[3] = 0.1; /* not a float */
  write_edited(path, &c, &eq);
  expect_load(path, KDA_EINVAL, "member 'q' element 3 [t=0,h=0,k=3] = 0.10000000000000001 is "
              "not exact in f32 (input_precision f32)", "not f32");
  double lq[64];
  memcpy(lq, lg.q, sizeof lq);
  lq[0] = 1.0 + 0x1p-10; /* a float, not a bfloat16 */
  write_edited(path, &lg, &(edit){.name = "q", .dtype = KDA_DTYPE_F64, .ndim = 3,
                                  .shape = {8, 2, 4}, .data = lq});
  expect_load(path, KDA_EINVAL, "is not exact in bf16 (input_precision bf16)", "not bf16");
  kda_case h;
  gen_from("seed=2 T=2 H=1 K=2 V=2 prec=f16", &h);
  double hv[4];
  memcpy(hv, h.v, sizeof hv);
  hv[1] = 70000.0; /* beyond binary16 */
  write_edited(path, &h, &(edit){.name = "v", .dtype = KDA_DTYPE_F64, .ndim = 3,
                                 .shape = {2, 1, 2}, .data = hv});
  expect_load(path, KDA_EINVAL, "member 'v' element 1 [t=0,hv=0,v=1] = 70000 is not exact in "
              "f16", "not f16");
  kda_case_free(&h);
  kda_case_free(&lg);
  kda_case_free(&c);
}
END_TEST

START_TEST(test_bad_index) {
  char dir[64], path[128];
  make_dir(dir);
  path_in(path, sizeof path, dir, "bad.npz");
  kda_case c;
  gen_from(GOOD, &c); /* N = 3, T = 8, C = 3 */
  static const struct { int64_t cu[4]; const char *msg; } cu[] = {
      {{1, 3, 3, 8}, "cu_seqlens[0] = 1, must be 0"},
      {{0, 5, 3, 8}, "cu_seqlens decreases at index 2"},
      {{0, 3, 3, 7}, "cu_seqlens[N] = 7, must equal T = 8"},
  };
  for (int i = 0; i < 3; i++) {
    write_edited(path, &c, &(edit){.name = "cu_seqlens", .dtype = KDA_DTYPE_I64, .ndim = 1,
                                   .shape = {4}, .data = cu[i].cu});
    expect_load(path, KDA_EINVAL, cu[i].msg, cu[i].msg);
  }
  static const struct { int64_t ck[3]; const char *msg; } ck[] = {
      {{0, 4, 4}, "checkpoints are not strictly increasing at index 2"},
      {{0, 4, 8}, "checkpoints[2] = 8 is outside [0, T=8)"},
      {{-1, 4, 7}, "checkpoints[0] = -1 is outside"},
  };
  for (int i = 0; i < 3; i++) {
    write_edited(path, &c, &(edit){.name = "checkpoints", .dtype = KDA_DTYPE_I64, .ndim = 1,
                                   .shape = {3}, .data = ck[i].ck});
    expect_load(path, KDA_EINVAL, ck[i].msg, ck[i].msg);
  }
  /* int32 index members are accepted */
  int32_t cu32[4] = {0, 3, 3, 8};
  write_edited(path, &c, &(edit){.name = "cu_seqlens", .dtype = KDA_DTYPE_I32, .ndim = 1,
                                 .shape = {4}, .data = cu32});
  expect_load(path, KDA_OK, NULL, "int32 cu_seqlens");
  /* float index members are not */
  double cuf[4] = {0, 3, 3, 8};
  write_edited(path, &c, &(edit){.name = "cu_seqlens", .dtype = KDA_DTYPE_F64, .ndim = 1,
                                 .shape = {4}, .data = cuf});
  expect_load(path, KDA_EDTYPE, "member 'cu_seqlens' has dtype <f8", "float cu_seqlens");
  kda_case_free(&c);
  /* one sequence: cu_seqlens may be absent */
  gen_from("seed=1 T=5", &c);
  write_edited(path, &c, &(edit){.skip = "cu_seqlens"});
  kda_case b;
  char err[KDA_ERRLEN];
  ck_assert_msg(kda_case_load(path, &b, err, sizeof err) == KDA_OK, "%s", err);
  ck_assert_int_eq(b.cu_seqlens[0], 0);
  ck_assert_int_eq(b.cu_seqlens[1], 5);
  kda_case_free(&b);
  kda_case_free(&c);
}
END_TEST

/* kda_case_save refuses what kda_case_load would refuse; nothing is left behind. */
START_TEST(test_save_errors) {
  char dir[64], path[128], err[KDA_ERRLEN];
  make_dir(dir);
  path_in(path, sizeof path, dir, "s.npz");
  kda_case c;
  gen_from("seed=4 T=4 K=4 V=4 prec=bf16", &c);
  double keep = c.q[2];
  c.q[2] = 0.1;
  ck_assert_int_eq(kda_case_save(path, &c, NULL, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "not exact in bf16"));
  c.q[2] = NAN;
  ck_assert_int_eq(kda_case_save(path, &c, NULL, err, sizeof err), KDA_ENONFINITE);
  c.q[2] = keep;
  ck_assert_int_eq(kda_case_save(path, &c, "[1]", err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "generator_info is not a JSON object"));
  double *g = c.g;
  c.g = NULL;
  ck_assert_int_eq(kda_case_save(path, &c, NULL, err, sizeof err), KDA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "case has no 'g' array"));
  c.g = g;
  c.p.gate_mode = 7;
  ck_assert_int_eq(kda_case_save(path, &c, NULL, err, sizeof err), KDA_EINVAL);
  c.p.gate_mode = KDA_GATE_LOG;
  ck_assert_int_eq(access(path, F_OK), -1);
  /* an extra generator_info replaces the generated one */
  ck_assert_int_eq(kda_case_save(path, &c, "{\"tool\": \"test\"}", err, sizeof err), KDA_OK);
  kda_case b;
  ck_assert_int_eq(kda_case_load(path, &b, err, sizeof err), KDA_OK);
  ck_assert_ptr_nonnull(strstr(b.manifest_json, "\"generator_info\": {\n  \"tool\": \"test\"\n }"));
  kda_case_free(&b);
  kda_case_free(&c);
}
END_TEST

START_TEST(test_sizes) {
  kda_problem p;
  kda_problem_sizes s;
  char err[KDA_ERRLEN];
  kda_problem_init(&p, 10, 2, 4, 8, 6);
  p.N = 2;
  p.n_checkpoints = 3;
  p.has_initial_state = 1;
  p.gate_mode = KDA_GATE_SOFTPLUS;
  p.has_A_log = 1;
  ck_assert_int_eq(kda_problem_sizes_get(&p, &s, err, sizeof err), KDA_OK);
  ck_assert_uint_eq(s.q, 160);
  ck_assert_uint_eq(s.v, 240);
  ck_assert_uint_eq(s.g, 320);
  ck_assert_uint_eq(s.beta, 40);
  ck_assert_uint_eq(s.A_log, 4);
  ck_assert_uint_eq(s.dt_bias, 32);
  ck_assert_uint_eq(s.h0, 384);
  ck_assert_uint_eq(s.ht, 384);
  ck_assert_uint_eq(s.hc, 576);
  ck_assert_uint_eq(s.cu_seqlens, 3);
  ck_assert_uint_eq(s.checkpoints, 3);
  ck_assert_uint_eq(s.o, 240);
  p.family = KDA_FAMILY_GDN;
  ck_assert_int_eq(kda_problem_sizes_get(&p, &s, err, sizeof err), KDA_OK);
  ck_assert_uint_eq(s.g, 40);
  ck_assert_uint_eq(s.dt_bias, 4);
  p.family = KDA_FAMILY_LINEAR;
  ck_assert_int_eq(kda_problem_sizes_get(&p, &s, err, sizeof err), KDA_OK);
  ck_assert_uint_eq(s.g + s.dt_bias + s.A_log, 0);
  p.T = INT64_MAX / 2;
  ck_assert_int_eq(kda_problem_sizes_get(&p, &s, err, sizeof err), KDA_ESHAPE);
  p.T = 1;
  p.K = (int64_t)1 << 40;
  p.V = (int64_t)1 << 30;
  ck_assert_int_eq(kda_problem_sizes_get(&p, &s, err, sizeof err), KDA_ESHAPE);
  p.K = 0;
  ck_assert_int_eq(kda_problem_sizes_get(&p, &s, err, sizeof err), KDA_EINVAL);
}
END_TEST

/* Result files: outputs, manifest, and inputs_sha256 = SHA-256 of the stored input bytes. */
START_TEST(test_result) {
  char dir[64], cpath[128], rpath[128], err[KDA_ERRLEN];
  make_dir(dir);
  path_in(cpath, sizeof cpath, dir, "case.npz");
  path_in(rpath, sizeof rpath, dir, "result.npz");
  kda_case c;
  gen_from("seed=8 seqlens=2,3 H=1 HV=2 K=3 V=2 gate=lower_bound h0=1 checkpoints=1,4 "
           "layout=vk prec=f32 id=r1", &c);
  save_ok(cpath, &c);
  kda_problem_sizes s;
  ck_assert_int_eq(kda_problem_sizes_get(&c.p, &s, err, sizeof err), KDA_OK);
  double *o = calloc(s.o, 8), *ht = calloc(s.ht, 8), *hc = calloc(s.hc, 8);
  for (uint64_t i = 0; i < s.o; i++) o[i] = 0.1 * (double)i;
  for (uint64_t i = 0; i < s.ht; i++) ht[i] = -(double)i;
  for (uint64_t i = 0; i < s.hc; i++) hc[i] = 0.5 * (double)i;
  ck_assert_int_eq(kda_result_save(rpath, &c, "ref-f64", KDA_DTYPE_F32, o, NULL, hc, err,
                                   sizeof err), KDA_EINVAL); /* ht wanted */
  ck_assert_int_eq(kda_result_save(rpath, &c, "ref-f64", KDA_DTYPE_F16, o, ht, hc, err,
                                   sizeof err), KDA_EINVAL);
  ck_assert_msg(kda_result_save(rpath, &c, "ref-f64", KDA_DTYPE_F64, o, ht, hc, err,
                                sizeof err) == KDA_OK, "%s", err);
  /* the expected digest, from the case file's members read back in their stored dtypes */
  kda_npz *z;
  ck_assert_int_eq(kda_npz_open(cpath, &z, err, sizeof err), KDA_OK);
  kda_sha256 h;
  kda_sha256_init(&h);
  static const char *const names[] = {"q", "k", "v", "g", "beta", "A_log", "dt_bias",
                                      "cu_seqlens", "h0", "checkpoints"};
  for (int m = 0; m < 10; m++) {
    kda_array_info info;
    ck_assert_int_eq(kda_npz_info(z, names[m], &info, err, sizeof err), KDA_OK);
    void *buf = malloc(info.nbytes);
    ck_assert_int_eq(kda_npz_read(z, names[m], info.dtype, buf, info.count, err, sizeof err),
                     KDA_OK);
    kda_sha256_update(&h, buf, info.nbytes); /* little-endian host: the stored bytes */
    free(buf);
  }
  kda_npz_close(z);
  unsigned char d[KDA_SHA256_BYTES];
  char hex[65];
  kda_sha256_final(&h, d);
  kda_sha256_hex(d, hex);
  ck_assert_int_eq(kda_npz_open(rpath, &z, err, sizeof err), KDA_OK);
  char *text;
  ck_assert_int_eq(kda_npz_read_blob(z, "manifest.json", &text, NULL, err, sizeof err), KDA_OK);
  json_t *m = json_loads(text, 0, NULL);
  static const char *const keys[] = {"schema", "generator", "backend", "case_id", "problem",
                                     "inputs_sha256"};
  const char *key;
  json_t *x;
  size_t i = 0;
  json_object_foreach(m, key, x) ck_assert_str_eq(key, keys[i++]);
  ck_assert_uint_eq(i, 6);
  ck_assert_str_eq(json_string_value(json_object_get(m, "schema")), "kda-result/1");
  ck_assert_str_eq(json_string_value(json_object_get(m, "backend")), "ref-f64");
  ck_assert_str_eq(json_string_value(json_object_get(m, "case_id")), "r1");
  ck_assert_str_eq(json_string_value(json_object_get(m, "inputs_sha256")), hex);
  json_decref(m);
  free(text);
  double *back;
  kda_array_info info;
  ck_assert_int_eq(kda_npz_load_f64(z, "ht", &info, &back, err, sizeof err), KDA_OK);
  ck_assert_int_eq(info.ndim, 4);
  ck_assert_int_eq(info.shape[2], 2); /* vk: [N, HV, V, K] */
  ck_assert_int_eq(info.shape[3], 3);
  same_bits(back, ht, s.ht, "ht", "result");
  free(back);
  ck_assert_int_eq(kda_npz_load_f64(z, "o", &info, &back, err, sizeof err), KDA_OK);
  same_bits(back, o, s.o, "o", "result");
  free(back);
  ck_assert_int_eq(kda_npz_info(z, "hc", &info, err, sizeof err), KDA_OK);
  ck_assert_int_eq(info.shape[0], 2);
  kda_npz_close(z);
  /* f32 outputs are rounded */
  ck_assert_int_eq(kda_result_save(rpath, &c, "ref-f32", KDA_DTYPE_F32, o, ht, hc, err,
                                   sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_open(rpath, &z, err, sizeof err), KDA_OK);
  ck_assert_int_eq(kda_npz_info(z, "o", &info, err, sizeof err), KDA_OK);
  ck_assert_int_eq(info.dtype, KDA_DTYPE_F32);
  kda_npz_close(z);
  /* kda_case_tensors points at the case's arrays */
  kda_tensors_f64 t;
  kda_case_tensors(&c, &t);
  ck_assert_ptr_eq(t.q, c.q);
  ck_assert_ptr_eq(t.h0, c.h0);
  ck_assert_ptr_eq(t.cu_seqlens, c.cu_seqlens);
  ck_assert_ptr_eq(t.checkpoints, c.checkpoints);
  ck_assert_ptr_null(t.o);
  free(o);
  free(ht);
  free(hc);
  kda_case_free(&c);
}
END_TEST

static void tmp_setup(void) { kda_test_tmpdir_make("check-vectors"); }
static void tmp_teardown(void) { kda_test_tmpdir_remove(); }

static Suite *vectors_suite(void) {
  Suite *s = suite_create("vectors");
  TCase *prng = tcase_create("prng");
  tcase_add_test(prng, test_philox_kat);
  tcase_add_test(prng, test_prng_pinned);
  tcase_add_test(prng, test_prng_derivation);
  tcase_add_test(prng, test_prng_moments);
  tcase_add_test(prng, test_sha256_fips);
  suite_add_tcase(s, prng);
  TCase *gen = tcase_create("generator");
  tcase_add_test(gen, test_names);
  tcase_add_test(gen, test_parse);
  tcase_add_test(gen, test_gen_errors);
  tcase_add_test(gen, test_gen_determinism);
  tcase_add_test(gen, test_gen_pinned);
  tcase_add_loop_test(gen, test_gen_roundtrip_all, 0, 8);
  tcase_add_test(gen, test_gen_empty);
  tcase_add_test(gen, test_manifest_text);
  tcase_add_unchecked_fixture(gen, tmp_setup, tmp_teardown);
  suite_add_tcase(s, gen);
  TCase *cs = tcase_create("case files");
  tcase_add_test(cs, test_bad_members);
  tcase_add_test(cs, test_bad_manifest);
  tcase_add_test(cs, test_bad_container);
  tcase_add_test(cs, test_bad_values);
  tcase_add_test(cs, test_bad_index);
  tcase_add_test(cs, test_save_errors);
  tcase_add_test(cs, test_sizes);
  tcase_add_test(cs, test_result);
  tcase_add_unchecked_fixture(cs, tmp_setup, tmp_teardown);
  suite_add_tcase(s, cs);
  return s;
}

int main(void) { return kda_test_main(vectors_suite(), CK_NORMAL, CK_FORK_GETENV); }

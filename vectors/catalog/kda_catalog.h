/* kda_catalog.h: the catalog of golden cases (L0, L1) and the flags that say what each one tests.
 * SPDX-License-Identifier: MIT
 *
 * One table (kda_catalog.c) lists every committed golden case: its id, level, flags, a
 * comment, the description of the random case it starts from (vectors/case/kda_gen.c, SPEC.md
 * §11.2) and, for designed cases, the name of a builder that replaces some inputs with chosen
 * values (kda_catalog_design.c: gate values, key geometries, near-zero vectors, the
 * discriminating cases; kda_catalog_l0.c: the hand-checkable L0 cases).  Builders use only the
 * PRNG of kda_prng.h and basic IEEE operations followed by one rounding into the case's
 * precision, so every case is the same bits on every platform.
 *
 * Flags are defined once, with a description of what they test and why (the Wycheproof
 * "notes" idea).  Two kinds:
 *   coverage  the case exercises an option or an edge (a short sequence, a gate tail, ...);
 *   mistake   the case discriminates one plausible wrong implementation: a backend that makes
 *             that mistake differs from the golden values by far more than float32 rounding
 *             (vectors/tests/check_catalog.c proves this for every such flag with a mutated
 *             float64 recurrence).
 */
#ifndef KDA_CATALOG_H
#define KDA_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "kda_case.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Levels of golden sets. */
#define KDA_LEVEL_L0 0 /* tiny hand-checkable cases, every intermediate exact in float64 */
#define KDA_LEVEL_L1 1 /* the CI set: every option and edge */
#define KDA_LEVEL_L2 2 /* larger cases made on demand: not committed, their SHA-256 pinned */
#define KDA_LEVEL_COUNT 3

const char *kda_level_name(int32_t level);           /* "L0", "L1", "L2", or NULL */
int kda_level_parse(const char *name, int32_t *out); /* KDA_OK or KDA_EINVAL */
/* 1 when the level's files are committed under golden/ (L0, L1), 0 when they are made on
 * demand and checked against the pinned hashes of golden/<level>.sha256 (L2). */
int kda_level_committed(int32_t level);

/* Kinds of flags. */
#define KDA_FLAG_COVERAGE 0
#define KDA_FLAG_MISTAKE 1

/* X(NAME, KIND, DESCRIPTION): every flag, once. */
#define KDA_CATALOG_FLAGS(X)                                                                  \
  X(EXACT_DYADIC, COVERAGE,                                                                   \
    "Every input and every intermediate value (decayed state, prediction, correction, "       \
    "written state, output) is a dyadic rational exactly representable in float64; the "     \
    "case can be followed by hand and a float64 implementation must reproduce it exactly.")   \
  X(SEQLEN_EDGE, COVERAGE,                                                                    \
    "T is 1 or sits on or next to a multiple of 16, 64 or 128, where chunked kernels change " \
    "chunk; off-by-one errors at chunk boundaries show here.")                               \
  X(LONG, COVERAGE, "T > 4096: long enough for accumulated rounding to show.")                \
  X(DRIFT, COVERAGE,                                                                          \
    "T >= 65536 at small K and V in a regime designed to expose drift (constant near-zero "   \
    "decay, low-rank keys with full-rank queries, or the plain accumulator), with state "     \
    "checkpoints at log-spaced positions; random unit keys would hide drift because the "     \
    "delta rule is contractive for them.")                                                    \
  X(ODD_DIMS, COVERAGE,                                                                       \
    "K or V is 60 or 100: not a power of two, so tiled kernels run partial tiles.")           \
  X(HEAD_DIM_128, COVERAGE, "K or V is 128, the production head size.")                       \
  X(KV_UNEQUAL, COVERAGE,                                                                     \
    "K != V: a state transposed or indexed with the wrong stride cannot go unnoticed.")       \
  X(GROUPED_HEADS, COVERAGE,                                                                  \
    "HV > H: several value heads share one q/k head (head_map div or mod, SPEC.md §4.4).")    \
  X(VARLEN, COVERAGE, "Several packed sequences of different lengths (cu_seqlens).")          \
  X(EMPTY_SEQUENCE, COVERAGE,                                                                 \
    "At least one sequence is empty: no outputs, and its final state is its initial state.")  \
  X(INITIAL_STATE, COVERAGE, "An initial state h0 is given (per sequence when N > 1).")       \
  X(CHECKPOINTS, COVERAGE, "States are requested after given tokens (hc).")                   \
  X(STATE_LAYOUT_VK, COVERAGE, "States are stored transposed ([.., V, K], SPEC.md §2.4).")     \
  X(GATE_VALUES, COVERAGE,                                                                    \
    "Pre-gated g takes the values 0, -2^-24, -1, -5, -20, -88, -1000 (and -inf, a full "      \
    "wipe), alone and mixed over channels: a decay of exactly 1, one just below 1 (the "      \
    "float32 rounding of exp(g) is then biased), float32 subnormal decays (exp(-88)) and "    \
    "decays that underflow float64 (exp(-1000)).")                                            \
  X(SOFTPLUS_TAIL, COVERAGE,                                                                  \
    "Softplus inputs in both tails: below -16.6 (fla's float32 kernels return 0 there, the "  \
    "exact value is e^y) and above 20 (fla returns y, the exact value is y + log1p(e^-y)).")  \
  X(LOWER_BOUND_GATE, COVERAGE,                                                               \
    "Lower-bound gates whose log-decay is near the bound (-5) and near 0, and a bound near 0.") \
  X(BETA_VALUES, COVERAGE,                                                                    \
    "beta takes the values 0 (no write), a tiny value, 0.5 and 1 (an exact overwrite along " \
    "a unit key).")                                                                           \
  X(NEG_EIGVAL, COVERAGE,                                                                     \
    "beta_eff up to 2 (mode logit_neg): I - b k k^T has eigenvalues down to -1, still "       \
    "non-expansive.")                                                                         \
  X(KEY_GEOMETRY, COVERAGE,                                                                   \
    "Zero keys, repeated keys, mutually orthogonal keys and nearly collinear keys.")          \
  X(NEAR_ZERO_L2, COVERAGE,                                                                   \
    "q and k rows of norm 0 and near the L2 epsilon, where the two L2 conventions differ "    \
    "most (SPEC.md §4.3).")                                                                   \
  X(LARGE_STATE, COVERAGE, "Initial states up to 2^100 in magnitude.")                        \
  X(POSITIVE_INPUTS, COVERAGE,                                                                \
    "q, k, v uniform in [0, 1) as fla's tests draw them: no cancellation, large norms.")      \
  X(EXPANSIVE, COVERAGE,                                                                      \
    "Outside the non-expansive set (b ||k||^2 > 2 at some steps, SPEC.md §6.3): errors can "  \
    "grow from step to step, and the MPFR error bound grows with the product of the step "    \
    "norms, so such cases need more precision to be proven or end as AGREED.")                \
  X(FAMILY_GDN, COVERAGE, "The Gated DeltaNet member: one decay per head and token.")        \
  X(FAMILY_DELTANET, COVERAGE, "The DeltaNet member: no decay.")                             \
  X(FAMILY_LINEAR, COVERAGE, "The plain linear-attention accumulator: no erase, no decay.")  \
  X(ERASE_BEFORE_DECAY, MISTAKE,                                                              \
    "Exposes an implementation that erases and writes before it decays, S <- Diag(a)(S + "    \
    "b k (v - S^T k)), instead of decaying first (SPEC.md §3.1).")                            \
  X(READOUT_BEFORE_WRITE, MISTAKE,                                                            \
    "Exposes an implementation that reads o out of the state before the write of the "        \
    "current token (o_t = S_{t-1}^T q or (Diag(a) S_{t-1})^T q) instead of after it.")         \
  X(PREDICT_UNDECAYED, MISTAKE,                                                               \
    "Exposes an implementation that computes the prediction p = S^T k on the state before "   \
    "the decay instead of on the decayed state.")                                             \
  X(DECAY_VALUE_AXIS, MISTAKE,                                                                \
    "Exposes an implementation that decays along the value axis (S <- S Diag(a)) instead "    \
    "of the key axis (S <- Diag(a) S).")                                                      \
  X(TRANSPOSED_STATE, MISTAKE,                                                                \
    "Exposes an implementation that reads or writes the state transposed: h0/ht/hc in the "   \
    "other layout, or S used as V x K in the prediction and readout (K = V, layout vk).")     \
  X(SCALE_MISPLACED, MISTAKE,                                                                 \
    "Exposes an implementation that applies scale to k instead of q, to q before the L2 "     \
    "normalisation (where it cancels), or to q and again to the output.")                      \
  X(WRONG_HEAD_MAP, MISTAKE,                                                                  \
    "Exposes an implementation that maps value heads to q/k heads with the other map (div "   \
    "instead of mod or the reverse; H > 1, HV > H).")                                         \
  X(OTHER_L2_CONVENTION, MISTAKE,                                                             \
    "Exposes an implementation that uses the other L2 convention (eps under the root vs a "   \
    "floor on the norm): q and k norms sit between the two thresholds.")                      \
  X(DROPPED_INITIAL_STATE, MISTAKE,                                                           \
    "Exposes an implementation that ignores h0 and starts from the zero state.")              \
  X(BETA_BF16, MISTAKE,                                                                       \
    "Exposes an implementation that rounds beta_eff to bfloat16 at every step: the betas "    \
    "are float32 values far from the bfloat16 grid and the keys repeat, so the error "        \
    "accumulates along one direction.")                                                       \
  X(EXP2_FOR_EXP, MISTAKE,                                                                    \
    "Exposes an implementation that uses exp2(g) where exp(g) is meant (fla keeps gates in "  \
    "log2 units inside its kernels and must convert, SPEC.md §4.1).")

/* Flag numbers (bit positions) and masks. */
enum {
#define KDA_FLAG_ENUM_(name, kind, text) KDA_FLAGNO_##name,
  KDA_CATALOG_FLAGS(KDA_FLAG_ENUM_)
#undef KDA_FLAG_ENUM_
  KDA_FLAG_COUNT
};
#define KDA_F(name) (UINT64_C(1) << KDA_FLAGNO_##name)

typedef struct kda_catalog_flag {
  const char *name;        /* "ERASE_BEFORE_DECAY" */
  int32_t kind;            /* KDA_FLAG_COVERAGE or KDA_FLAG_MISTAKE */
  const char *description; /* what it tests and why */
} kda_catalog_flag;

/* The flag with number i (0 <= i < KDA_FLAG_COUNT), or NULL. */
const kda_catalog_flag *kda_catalog_flag_get(int i);
const char *kda_flag_kind_name(int32_t kind); /* "coverage", "mistake" */

/* One golden case. */
typedef struct kda_catalog_entry {
  const char *id;      /* unique over all levels; the file is golden/<level>/<id>.npz */
  int32_t level;       /* KDA_LEVEL_* */
  uint64_t flags;      /* KDA_F(...) | ... */
  const char *desc;    /* kda_gen description of the base case (without id=) */
  const char *design;  /* builder name (kda_catalog_design_*), or NULL for a random case */
  const char *comment; /* one sentence: what the case is */
  int32_t prod;        /* 1: a production-size case (L2): generated inputs, sampled truth,
                          certified by the double-double phase alone (SPEC.md §8.12, §10.2) */
} kda_catalog_entry;

/* The whole catalog, in file order: L0 first, then L1, then L2. */
int64_t kda_catalog_count(void);
const kda_catalog_entry *kda_catalog_get(int64_t i);
/* The entry with this id, or NULL. */
const kda_catalog_entry *kda_catalog_find(const char *id);

/* A designed-case builder: replaces inputs of c (generated from the entry's description,
 * whose seed is given) by designed values.  Returns KDA_OK or KDA_EINVAL (the base case does
 * not have the shape or modes the design needs), with a message. */
typedef int (*kda_catalog_builder)(kda_case *c, uint64_t seed, char *err, size_t errlen);

typedef struct kda_catalog_design {
  const char *name;        /* as in kda_catalog_entry.design */
  kda_catalog_builder build;
  const char *description; /* what the builder puts into the case */
} kda_catalog_design;

/* The design with this name, or NULL.  kda_catalog_design_get(i) for 0 <= i < count. */
const kda_catalog_design *kda_catalog_design_find(const char *name);
int64_t kda_catalog_design_count(void);
const kda_catalog_design *kda_catalog_design_get(int64_t i);

/* Builds the inputs of entry e: parses e->desc with id=e->id, generates it (kda_gen_case),
 * applies the design, and sets c->manifest_json to the case manifest whose generator_info
 * holds {description, seed, regime, prng, design, design_description}.  Deterministic bit for
 * bit.  Returns KDA_OK, KDA_EINVAL (bad description or design), KDA_ESHAPE, KDA_ENOMEM. */
int kda_catalog_build(const kda_catalog_entry *e, kda_case *c, char *err, size_t errlen);

/* The entry's flags together with the structural ones read off its built case c (LONG,
 * ODD_DIMS, HEAD_DIM_128, KV_UNEQUAL, GROUPED_HEADS, VARLEN, EMPTY_SEQUENCE, INITIAL_STATE,
 * CHECKPOINTS, STATE_LAYOUT_VK, FAMILY_*). */
uint64_t kda_catalog_flags(const kda_catalog_entry *e, const kda_case *c);

/* The seed of the entry's description (0 when it has none). */
uint64_t kda_catalog_seed(const kda_catalog_entry *e);

#ifdef __cplusplus
}
#endif
#endif

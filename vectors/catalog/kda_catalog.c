/* kda_catalog.c: the table of golden cases (L0, L1), their flags, and building a case's inputs.
 * SPDX-License-Identifier: MIT
 *
 * Each row is one golden file.  `desc` is a kda_gen description (SPEC.md §11.2, docs/generator.md)
 * of the base case; `design` names a builder (kda_catalog_design.c, kda_catalog_l0.c) that
 * replaces inputs with designed values.  Flags listed in a row are the ones that cannot be read
 * off the problem; the structural ones (grouped heads, K != V, varlen, families, ...) are added
 * by kda_catalog_flags from the built case, so they can never be wrong.
 *
 * Sizes are chosen so that `kda golden --verify` regenerates and certifies everything in a
 * couple of minutes on two cores and golden/ stays well under 25 MB (docs/golden.md).
 */
#include "kda_catalog.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case_internal.h"
#include "kda_internal.h"

/* ---- Flags. */
static const kda_catalog_flag flag_table[KDA_FLAG_COUNT] = {
#define KDA_FLAG_ROW_(name, kind, text) {#name, KDA_FLAG_##kind, text},
    KDA_CATALOG_FLAGS(KDA_FLAG_ROW_)
#undef KDA_FLAG_ROW_
};

const kda_catalog_flag *kda_catalog_flag_get(int i) {
  return i >= 0 && i < KDA_FLAG_COUNT ? &flag_table[i] : NULL;
}

const char *kda_flag_kind_name(int32_t kind) {
  return kind == KDA_FLAG_COVERAGE ? "coverage" : kind == KDA_FLAG_MISTAKE ? "mistake" : NULL;
}

static const char *const level_names[KDA_LEVEL_COUNT] = {"L0", "L1", "L2"};

int kda_level_committed(int32_t level) {
  return level == KDA_LEVEL_L0 || level == KDA_LEVEL_L1;
}

const char *kda_level_name(int32_t level) {
  return level >= 0 && level < KDA_LEVEL_COUNT ? level_names[level] : NULL;
}

int kda_level_parse(const char *name, int32_t *out) {
  for (int32_t i = 0; name && i < KDA_LEVEL_COUNT; i++)
    if (strcmp(name, level_names[i]) == 0) {
      if (out) *out = i;
      return KDA_OK;
    }
  return KDA_EINVAL;
}

/* ---- The table. */
#define F(name) KDA_F(name)
#define L0(id, flags, desc, design, comment) {id, KDA_LEVEL_L0, flags, desc, design, comment, 0}
#define L1(id, flags, desc, design, comment) {id, KDA_LEVEL_L1, flags, desc, design, comment, 0}
#define L2(id, flags, desc, design, comment) {id, KDA_LEVEL_L2, flags, desc, design, comment, 0}
/* A production-size L2 case: generated inputs, sampled truth, no design (SPEC.md §10.2). */
#define PROD(id, flags, desc, comment) {id, KDA_LEVEL_L2, flags, desc, NULL, comment, 1}

static const kda_catalog_entry catalog[] = {
    /* ==== L0: hand-checkable, every intermediate exact (kda_catalog_l0.c). */
    L0("l0-linear-accumulate", F(EXACT_DYADIC),
       "seed=0 T=3 H=1 K=2 V=2 family=linear beta=prob l2=off scale=0.5 prec=bf16",
       "l0_linear_accumulate",
       "Plain accumulator S += b k v^T over three tokens; no erase, no decay."),
    L0("l0-delta-overwrite", F(EXACT_DYADIC) | F(KEY_GEOMETRY) | F(BETA_VALUES),
       "seed=0 T=4 H=1 K=2 V=2 family=deltanet beta=prob l2=off scale=0.5 prec=bf16",
       "l0_delta_overwrite",
       "DeltaNet with unit keys and b = 1: the second write to the same key replaces the value."),
    L0("l0-decay-wipe", F(EXACT_DYADIC) | F(GATE_VALUES),
       "seed=0 T=4 H=1 K=3 V=2 gate=log beta=prob l2=off scale=0.5 prec=bf16", "l0_decay_wipe",
       "KDA with gates 0 (keep) and -inf (wipe) per key channel; K = 3, V = 2."),
    L0("l0-varlen-h0", F(EXACT_DYADIC) | F(GATE_VALUES),
       "seed=0 seqlens=2,0,3 H=1 K=2 V=2 gate=log beta=prob l2=off scale=0.5 h0=1 "
       "checkpoints=1,3 prec=bf16",
       "l0_varlen_h0",
       "Three sequences (the middle one empty) with their own initial states and checkpoints."),
    L0("l0-grouped-div", F(EXACT_DYADIC),
       "seed=0 T=2 H=2 HV=4 K=2 V=2 family=deltanet beta=prob l2=off head_map=div scale=0.5 "
       "prec=bf16",
       "l0_grouped",
       "Four value heads on two q/k heads, head map div (value heads 0,1 read q/k head 0)."),
    L0("l0-grouped-mod", F(EXACT_DYADIC),
       "seed=0 T=2 H=2 HV=4 K=2 V=2 family=deltanet beta=prob l2=off head_map=mod scale=0.5 "
       "prec=bf16",
       "l0_grouped",
       "The same inputs with head map mod (value heads 0,2 read q/k head 0)."),
    L0("l0-gdn-vk", F(EXACT_DYADIC) | F(GATE_VALUES),
       "seed=0 T=3 H=1 K=2 V=3 family=gdn gate=log beta=prob l2=off layout=vk scale=0.5 h0=1 "
       "prec=bf16",
       "l0_gdn_vk",
       "Gated DeltaNet (one gate per head) with an initial state stored transposed (layout vk)."),
    L0("l0-reflection", F(EXACT_DYADIC) | F(NEG_EIGVAL),
       "seed=0 T=3 H=1 K=2 V=2 family=deltanet beta=prob l2=off scale=0.5 h0=1 prec=bf16",
       "l0_reflection",
       "b = 2 with unit keys: I - 2 k k^T is a reflection, the edge of the non-expansive set."),

    /* ==== L1: sequence lengths around chunk boundaries, every mode spread over them. */
    L1("t1-softplus-gqa", F(SEQLEN_EDGE),
       "seed=101 T=1 H=2 HV=4 K=16 V=16 gate=softplus beta=logit l2=fla prec=bf16", NULL,
       "One token, softplus gate, grouped heads."),
    L1("t15-log-prob", F(SEQLEN_EDGE),
       "seed=102 T=15 H=1 K=32 V=16 gate=log beta=prob l2=fla prec=f32", NULL,
       "One token short of a 16-token chunk; pre-gated g, beta as probability."),
    L1("t16-lower-bound-mod", F(SEQLEN_EDGE),
       "seed=103 T=16 H=2 HV=4 K=16 V=32 gate=lower_bound beta=logit l2=ggml head_map=mod "
       "prec=f16",
       NULL, "Exactly one 16-token chunk; lower-bound gate, ggml L2, head map mod, fp16 inputs."),
    L1("t17-gdn", F(SEQLEN_EDGE),
       "seed=104 T=17 H=1 K=32 V=32 family=gdn gate=softplus beta=logit l2=fla prec=bf16", NULL,
       "One token past a 16-token chunk; Gated DeltaNet."),
    L1("t63-deltanet", F(SEQLEN_EDGE),
       "seed=105 T=63 H=1 K=64 V=64 family=deltanet beta=logit l2=fla prec=f32", NULL,
       "One token short of a 64-token chunk; DeltaNet."),
    L1("t64-softplus-h0", F(SEQLEN_EDGE),
       "seed=106 T=64 H=2 K=64 V=32 gate=softplus beta=logit l2=fla h0=1 checkpoints=15,31,63 "
       "prec=bf16",
       NULL, "Exactly one 64-token chunk with an initial state and checkpoints at chunk ends."),
    L1("t65-lower-bound-vk", F(SEQLEN_EDGE),
       "seed=107 T=65 H=1 K=32 V=64 gate=lower_bound alog=0 beta=logit l2=fla layout=vk h0=1 "
       "prec=f32",
       NULL, "One token past a 64-token chunk; lower-bound gate without A_log; layout vk."),
    L1("t127-linear", F(SEQLEN_EDGE),
       "seed=108 T=127 H=1 K=32 V=32 family=linear beta=prob l2=fla prec=f32", NULL,
       "One token short of a 128-token chunk; the plain accumulator."),
    L1("t128-k128", F(SEQLEN_EDGE),
       "seed=109 T=128 H=1 HV=2 K=128 V=128 gate=softplus beta=logit l2=fla prec=bf16", NULL,
       "The production configuration: K = V = 128, softplus gate, logit beta, fla L2, bf16."),
    L1("t129-k128", F(SEQLEN_EDGE),
       "seed=110 T=129 H=1 K=128 V=128 gate=log beta=prob l2=fla checkpoints=63,64,128 prec=f32",
       NULL, "One token past a 128-token chunk at K = V = 128, checkpoints across the boundary."),
    L1("t5000-long", F(LONG),
       "seed=111 T=5000 H=1 K=8 V=8 gate=softplus beta=logit l2=fla checkpoints=log prec=bf16",
       NULL, "A sequence longer than 4096 tokens with log-spaced checkpoints."),

    /* ==== L1: head dimensions. */
    L1("k60-v100", 0,
       "seed=201 T=33 H=1 K=60 V=100 gate=softplus beta=logit l2=fla prec=bf16", NULL,
       "K = 60, V = 100: partial tiles on both axes."),
    L1("k100-v60", 0, "seed=202 T=33 H=1 K=100 V=60 gate=log beta=prob l2=ggml prec=f32", NULL,
       "K = 100, V = 60, ggml L2."),
    L1("k128-v100", 0,
       "seed=203 T=20 H=1 K=128 V=100 gate=lower_bound beta=logit l2=fla prec=f16", NULL,
       "K = 128, V = 100, fp16 inputs."),
    L1("k60-v128-gdn", 0,
       "seed=204 T=20 H=1 K=60 V=128 family=gdn gate=softplus beta=logit l2=fla prec=bf16", NULL,
       "K = 60, V = 128, Gated DeltaNet."),

    /* ==== L1: grouped value heads under both maps. */
    L1("gqa-div", 0,
       "seed=301 T=24 H=2 HV=8 K=32 V=16 head_map=div gate=softplus beta=logit l2=fla prec=bf16",
       NULL, "Eight value heads on two q/k heads, head map div."),
    L1("gqa-mod", 0,
       "seed=302 T=24 H=2 HV=8 K=32 V=16 head_map=mod gate=softplus beta=logit l2=fla prec=bf16",
       NULL, "Eight value heads on two q/k heads, head map mod."),

    /* ==== L1: varying-length batches. */
    L1("varlen-ragged-h0", 0,
       "seed=401 seqlens=5,0,17,1,0,33 H=2 HV=4 K=16 V=16 gate=softplus beta=logit l2=fla h0=1 "
       "checkpoints=0,4,5,21,22,55 prec=bf16",
       NULL, "Six ragged sequences, two empty, each with its own initial state; checkpoints at "
             "sequence starts and ends."),
    L1("varlen-empty-edges", 0,
       "seed=402 seqlens=0,16,0,0,9,0 H=1 K=16 V=8 gate=log beta=prob l2=fla h0=1 "
       "checkpoints=log prec=f32",
       NULL, "Empty sequences first, last and in a row."),
    L1("varlen-all-empty", 0,
       "seed=403 seqlens=0,0,0 H=1 HV=2 K=8 V=8 gate=softplus beta=logit l2=fla h0=1 prec=bf16",
       NULL, "T = 0: three empty sequences; the final states are the initial states."),
    L1("varlen-no-h0", 0,
       "seed=404 seqlens=64,1,63 H=1 K=32 V=32 gate=softplus beta=logit l2=fla prec=bf16", NULL,
       "Three sequences without initial states; lengths around a chunk."),

    /* ==== L1: gates. */
    L1("gate-values-log", F(GATE_VALUES),
       "seed=501 T=16 H=1 K=8 V=8 gate=log beta=logit l2=fla prec=f32", "gate_values",
       "Each token's g is one of 0, -2^-24, -1, -5, -20, -88, -1000, -inf on every channel."),
    L1("gate-values-mixed", F(GATE_VALUES),
       "seed=502 T=32 H=2 K=16 V=16 gate=log beta=logit l2=fla h0=1 prec=bf16", "gate_mixture",
       "The same gate values mixed over channels, tokens and heads."),
    L1("gate-values-gdn", F(GATE_VALUES),
       "seed=503 T=16 H=1 HV=2 K=16 V=16 family=gdn gate=log beta=logit l2=fla h0=1 prec=f32",
       "gate_values", "The gate values as Gated DeltaNet's scalar gate."),
    L1("softplus-tails", F(SOFTPLUS_TAIL),
       "seed=601 T=24 H=1 HV=2 K=16 V=16 gate=softplus beta=logit l2=fla prec=f32",
       "softplus_tails", "Softplus inputs from -100 to 88, in both of fla's threshold tails."),
    L1("lower-bound-edges", F(LOWER_BOUND_GATE),
       "seed=701 T=24 H=1 K=16 V=16 gate=lower_bound lb=-5 beta=logit l2=fla prec=f32",
       "lower_bound_edges", "Lower-bound gate inputs from -100 to 100: log-decays near -5 and 0."),
    L1("lower-bound-tiny", F(LOWER_BOUND_GATE),
       "seed=702 T=24 H=1 K=16 V=16 gate=lower_bound lb=-0.0009765625 alog=0 beta=logit l2=fla "
       "prec=bf16",
       "lower_bound_edges", "A lower bound of -2^-10: every decay is within 0.1% of 1."),

    /* ==== L1: beta. */
    L1("beta-values", F(BETA_VALUES),
       "seed=801 T=30 H=1 K=16 V=16 gate=log beta=prob l2=fla prec=f32", "beta_values",
       "beta cycles through 0, 2^-30, 2^-126, 0.5 and 1."),
    L1("beta-neg-eigval", F(NEG_EIGVAL),
       "seed=802 T=32 H=1 HV=2 K=16 V=16 gate=softplus beta=logit_neg l2=fla prec=f32",
       "beta_logit_neg", "beta_eff from 0 to 2 (logits -100 to 100) with repeated keys."),

    /* ==== L1: keys and L2. */
    L1("keys-geometry-fla", F(KEY_GEOMETRY),
       "seed=901 T=32 H=1 K=16 V=16 gate=softplus beta=logit l2=fla prec=f32", "key_geometry",
       "Zero, repeated, orthogonal and nearly collinear keys, fla L2."),
    L1("keys-geometry-off", F(KEY_GEOMETRY),
       "seed=902 T=32 H=1 K=16 V=16 gate=log beta=prob l2=off prec=f32", "key_geometry",
       "The same geometries without L2 (unit and zero keys as given)."),
    L1("near-zero-fla", F(NEAR_ZERO_L2),
       "seed=1001 T=24 H=1 K=16 V=16 gate=log beta=logit l2=fla prec=f32", "near_zero",
       "q and k rows of norms 0, 2^-40 ... 1 under fla's L2 (eps under the root)."),
    L1("near-zero-ggml", F(NEAR_ZERO_L2),
       "seed=1002 T=24 H=1 K=16 V=16 gate=log beta=logit l2=ggml prec=f32", "near_zero",
       "q and k rows of norms 0, 2^-40 ... 1 under ggml's L2 (a floor on the norm)."),

    /* ==== L1: magnitudes and regimes. */
    L1("large-h0", F(LARGE_STATE),
       "seed=1101 T=16 H=1 HV=2 K=16 V=16 gate=softplus beta=logit l2=fla h0=1 prec=f32",
       "large_h0", "Initial states of magnitude 2^20 to 2^100."),
    L1("positive-fla", F(POSITIVE_INPUTS),
       "seed=1201 T=64 H=2 K=32 V=32 regime=positive gate=log beta=logit l2=fla prec=bf16", NULL,
       "All-positive q, k, v as fla's tests draw them."),
    L1("positive-softplus", F(POSITIVE_INPUTS),
       "seed=1202 T=48 H=1 HV=2 K=16 V=32 regime=positive gate=softplus beta=logit l2=fla "
       "prec=f16",
       NULL, "All-positive inputs with the softplus gate, fp16."),
    L1("expansive", F(EXPANSIVE),
       "seed=1301 T=24 H=1 K=8 V=8 regime=expansive gate=log beta=prob l2=off prec=f32", NULL,
       "b ||k||^2 up to 3: outside the non-expansive set."),

    /* ==== L1: long cases for drift, T = 65536 at K = 4 and V <= 4, log-spaced checkpoints. */
    L1("drift-decay-small", F(DRIFT) | F(LONG),
       "seed=1401 T=65536 H=1 K=4 V=4 regime=decay-small gate=log beta=logit l2=fla "
       "checkpoints=log prec=f16",
       NULL, "Constant g = -1e-4: a backend's rounding of exp(g) is the same biased error at every "
             "step."),
    L1("drift-lowrank", F(DRIFT) | F(LONG),
       "seed=1402 T=65536 H=1 K=4 V=2 regime=lowrank family=deltanet beta=logit l2=fla "
       "checkpoints=log prec=f32",
       NULL, "Keys in a 2-dimensional subspace, full-rank queries, no decay: errors outside the "
             "key span are never erased."),
    L1("drift-linear", F(DRIFT) | F(LONG),
       "seed=1403 T=65536 H=1 K=4 V=2 family=linear beta=prob l2=fla checkpoints=log prec=f32",
       NULL, "The plain accumulator: no erase, no decay; errors only add up."),

    /* ==== L1: a production-size head short enough for CI (SPEC.md §7.3, "Long sequences"):
     * K = V = 128, KDA family, keys in a 2-dimensional subspace, an initial state, half the
     * channels decaying fast and half slowly, so that float32 drift is real and the
     * long-sequence defects of SPEC.md §7.7 show within 4096 tokens. */
    L1("prod-lowrank-mixed", F(DRIFT) | F(LONG),
       "seed=1601 T=4096 H=1 K=128 V=128 regime=lowrank gate=softplus beta=logit l2=fla h0=1 "
       "prec=f16",
       "mixed_decay", "Keys in 2 of 128 dimensions; even channels forget within a few tokens, "
                      "odd ones keep errors outside the key span for the whole sequence."),

    /* ==== L1: discriminating cases, one per mistake. */
    L1("disc-erase-before-decay", F(ERASE_BEFORE_DECAY),
       "seed=1501 T=16 H=1 K=8 V=8 gate=log beta=prob l2=fla h0=1 prec=f32", "strong_decay",
       "Strong per-channel decays on a full initial state."),
    L1("disc-readout-before-write", F(READOUT_BEFORE_WRITE),
       "seed=1502 T=16 H=1 K=8 V=8 gate=log beta=prob l2=fla prec=f32", NULL,
       "Random KDA case: the current token's write dominates its output."),
    L1("disc-predict-undecayed", F(PREDICT_UNDECAYED),
       "seed=1503 T=16 H=1 K=8 V=8 gate=log beta=prob l2=fla h0=1 prec=f32", "strong_decay",
       "Strong decays with keys on the decayed channels."),
    L1("disc-decay-value-axis", F(DECAY_VALUE_AXIS),
       "seed=1504 T=16 H=1 K=8 V=8 gate=log beta=prob l2=fla h0=1 prec=f32", "strong_decay",
       "K = V with decays that differ strongly between channels."),
    L1("disc-transposed-state", F(TRANSPOSED_STATE),
       "seed=1505 T=16 H=1 K=8 V=8 gate=softplus beta=logit l2=fla layout=vk h0=1 prec=f32",
       NULL, "K = V, layout vk, a non-symmetric initial state."),
    L1("disc-scale-misplaced", F(SCALE_MISPLACED),
       "seed=1506 T=16 H=1 K=16 V=8 gate=softplus beta=logit l2=fla prec=f32", NULL,
       "scale = 1/4 with L2 on: moving it to k, before the L2 or doubling it all show."),
    L1("disc-head-map", F(WRONG_HEAD_MAP),
       "seed=1507 T=16 H=2 HV=4 K=8 V=8 head_map=div gate=softplus beta=logit l2=fla prec=bf16",
       NULL, "Two q/k heads, four value heads: div and mod pair them differently."),
    L1("disc-l2-convention", F(OTHER_L2_CONVENTION),
       "seed=1508 T=16 H=1 K=16 V=8 gate=softplus beta=logit l2=fla prec=f32", "l2_between",
       "q and k norms between 1e-6 and 1e-3, where eps under the root and a norm floor differ."),
    L1("disc-dropped-h0", F(DROPPED_INITIAL_STATE),
       "seed=1509 T=16 H=1 K=8 V=8 gate=softplus beta=logit l2=fla h0=1 prec=bf16", NULL,
       "A random initial state with mild decay."),
    L1("disc-beta-bf16", F(BETA_BF16),
       "seed=1510 T=32 H=1 K=8 V=8 gate=log beta=prob l2=fla prec=f32", "beta_offgrid",
       "float32 betas just off the bfloat16 grid on alternating sides, values of alternating "
       "sign, one repeated key."),
    L1("disc-exp2", F(EXP2_FOR_EXP),
       "seed=1511 T=16 H=1 K=8 V=8 gate=softplus beta=logit l2=fla prec=f32", NULL,
       "Random softplus gates of order one."),

    /* ==== L2: the production-size set, made on demand (kda golden --write --level
     * L2), SHA-256 pinned in golden/L2.sha256.  K = V = 128, 4096 to 2^18 tokens, generated
     * inputs and sampled truth (SPEC.md §10.2), certified by the double-double phase alone
     * (SPEC.md §8.12).  Gated cases store their gates in bf16 or as one constant, so the
     * certifier's decay factors repeat (docs/golden.md, "Performance"). */
    PROD("prod-softplus-64k", F(LONG),
         "seed=2101 T=65536 H=1 K=128 V=128 gate=softplus beta=logit l2=fla "
         "checkpoints=16383,65535 prec=bf16",
         "Contractive control: random softplus gates, every error forgotten within a few "
         "tokens."),
    PROD("prod-softplus-1m", F(LONG),
         "seed=2111 T=1048576 H=1 K=128 V=128 gate=softplus beta=logit l2=fla "
         "checkpoints=65535,524287,1048575 prec=bf16",
         "The contractive control over 2^20 tokens, a production head's full context: a "
         "correct float32 kernel's error stays near one unit to the end."),
    /* The slow-decay and no-decay heads store no state (final=0, no checkpoints): about one
     * state value in 10^4 to 10^5 is left undecided there by the double-double phase, and a
     * state is stored whole (SPEC.md §8.12). */
    PROD("prod-lowrank-slow-256k", F(DRIFT) | F(LONG),
         "seed=2103 T=262144 H=1 K=128 V=128 regime=lowrank-slow gate=log beta=logit l2=fla "
         "h0=1 final=0 prec=bf16",
         "KDA family, keys in 2 of 128 dimensions, every channel decaying slowly: errors "
         "outside the key span persist over 2^18 tokens."),
    PROD("prod-decay-small-128k", F(DRIFT) | F(LONG),
         "seed=2102 T=131072 H=1 K=128 V=128 regime=decay-small gate=log beta=logit l2=fla "
         "h0=1 final=0 prec=f32",
         "Constant g = -1e-4 over 2^17 tokens: exp's rounding is the same systematic error "
         "at every step."),
    PROD("prod-mixed-64k", F(DRIFT) | F(LONG),
         "seed=2104 T=65536 H=1 K=128 V=128 regime=mixed gate=softplus beta=logit l2=fla h0=1 "
         "final=0 prec=bf16",
         "A realistic mixed gate: every fourth channel with a log-decay near -1e-4, the "
         "others forgetting fast."),
    PROD("prod-deltanet-lowrank-64k", F(DRIFT) | F(LONG),
         "seed=2105 T=65536 H=1 K=128 V=128 regime=lowrank family=deltanet beta=logit l2=fla "
         "final=0 prec=f32",
         "DeltaNet with keys in 2 of 128 dimensions: nothing outside the key span is ever "
         "erased."),
    PROD("prod-linear-128k", F(DRIFT) | F(LONG),
         "seed=2106 T=131072 H=1 K=128 V=128 family=linear beta=prob l2=fla "
         "checkpoints=16383,131071 prec=f32",
         "The plain accumulator over 2^17 tokens: no erase, no decay; errors only add up."),
    PROD("prod-varlen-h0", F(LONG),
         "seed=2107 seqlens=16384,0,40000,9152 H=1 K=128 V=128 gate=softplus beta=logit "
         "l2=fla h0=1 prec=bf16",
         "Ragged sequences (one empty) with per-sequence initial states and final states."),
    PROD("prod-gva-div", 0,
         "seed=2108 T=4096 H=2 HV=4 K=128 V=128 head_map=div gate=softplus beta=logit l2=fla "
         "checkpoints=2047 prec=bf16",
         "Grouped value heads (two per q/k head) under head map div."),
    PROD("prod-gva-mod", 0,
         "seed=2109 T=4096 H=2 HV=4 K=128 V=128 head_map=mod gate=softplus beta=logit l2=fla "
         "checkpoints=2047 prec=bf16",
         "Grouped value heads (two per q/k head) under head map mod."),
    PROD("prod-expansive-gdn", F(EXPANSIVE) | F(LONG),
         "seed=2110 T=65536 H=1 K=128 V=128 regime=expansive family=gdn gate=log beta=prob "
         "l2=off checkpoints=4095,65535 prec=f32",
         "Characterisation: b ||k||^2 up to 3 (locally expansive steps) under a GDN decay that "
         "keeps the whole contractive."),
};

#undef L0
#undef L1
#undef L2
#undef PROD
#undef F

int64_t kda_catalog_count(void) { return (int64_t)(sizeof catalog / sizeof catalog[0]); }

const kda_catalog_entry *kda_catalog_get(int64_t i) {
  return i >= 0 && i < kda_catalog_count() ? &catalog[i] : NULL;
}

const kda_catalog_entry *kda_catalog_find(const char *id) {
  for (int64_t i = 0; id && i < kda_catalog_count(); i++)
    if (strcmp(catalog[i].id, id) == 0) return &catalog[i];
  return NULL;
}

uint64_t kda_catalog_seed(const kda_catalog_entry *e) {
  const char *s = e && e->desc ? strstr(e->desc, "seed=") : NULL;
  return s ? strtoull(s + 5, NULL, 0) : 0;
}

/* ---- Flags read off a built case. */
static int has_empty_sequence(const kda_case *c) {
  for (int64_t n = 0; n < c->p.N; n++)
    if (c->cu_seqlens[n] == c->cu_seqlens[n + 1]) return 1;
  return 0;
}

uint64_t kda_catalog_flags(const kda_catalog_entry *e, const kda_case *c) {
  const kda_problem *p = &c->p;
  uint64_t f = e->flags;
  if (p->T > 4096) f |= KDA_F(LONG);
  if ((p->K % 16 != 0 || p->V % 16 != 0) && (p->K > 16 || p->V > 16)) f |= KDA_F(ODD_DIMS);
  if (p->K == 128 || p->V == 128) f |= KDA_F(HEAD_DIM_128);
  if (p->K != p->V) f |= KDA_F(KV_UNEQUAL);
  if (p->HV > p->H) f |= KDA_F(GROUPED_HEADS);
  if (p->N > 1) f |= KDA_F(VARLEN);
  if (has_empty_sequence(c)) f |= KDA_F(EMPTY_SEQUENCE);
  if (p->has_initial_state) f |= KDA_F(INITIAL_STATE);
  if (p->n_checkpoints > 0) f |= KDA_F(CHECKPOINTS);
  if (p->state_layout == KDA_STATE_VK) f |= KDA_F(STATE_LAYOUT_VK);
  if (p->family == KDA_FAMILY_GDN) f |= KDA_F(FAMILY_GDN);
  if (p->family == KDA_FAMILY_DELTANET) f |= KDA_F(FAMILY_DELTANET);
  if (p->family == KDA_FAMILY_LINEAR) f |= KDA_F(FAMILY_LINEAR);
  return f;
}

/* ---- Building. */
/* Replaces the manifest's generator_info by {description, seed, regime, prng, design,
 * design_description} (the first four as the generator wrote them). */
static int set_design_manifest(kda_case *c, const kda_catalog_design *dz, char *err,
                               size_t errlen) {
  json_t *m = json_loads(c->manifest_json, 0, NULL);
  json_t *gi = m ? json_object_get(m, "generator_info") : NULL;
  if (!json_is_object(gi)) {
    json_decref(m);
    return kda_fail(KDA_EINVAL, err, errlen, "case '%s': generated manifest has no generator_info",
                    c->id ? c->id : "");
  }
  int bad = json_object_set_new(gi, "design", json_string(dz->name));
  bad |= json_object_set_new(gi, "design_description", json_string(dz->description));
  char *extra = bad ? NULL : json_dumps(gi, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(m);
  if (!extra) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  char *text = NULL;
  int st = kda_case_manifest_text(c, extra, &text, err, errlen);
  free(extra);
  if (st) return st;
  free(c->manifest_json);
  c->manifest_json = text;
  return KDA_OK;
}

int kda_catalog_build(const kda_catalog_entry *e, kda_case *c, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  if (!e || !e->desc) return kda_fail(KDA_EINVAL, err, errlen, "catalog entry is NULL");
  const kda_catalog_design *dz = NULL;
  if (e->design && !(dz = kda_catalog_design_find(e->design)))
    return kda_fail(KDA_EINVAL, err, errlen, "case '%s': unknown design '%s'", e->id, e->design);
  size_t len = strlen(e->desc) + strlen(e->id) + 8;
  char *text = malloc(len);
  if (!text) return kda_fail(KDA_ENOMEM, err, errlen, "out of memory");
  snprintf(text, len, "%s id=%s", e->desc, e->id);
  kda_gen_desc d;
  int st = kda_gen_parse(text, &d, err, errlen);
  free(text);
  if (st) return st;
  st = kda_gen_case(&d, c, err, errlen);
  const uint64_t seed = d.seed;
  kda_gen_desc_free(&d);
  if (st) return st;
  if (dz) {
    st = dz->build(c, seed, err, errlen);
    if (!st) st = set_design_manifest(c, dz, err, errlen);
  }
  if (st) kda_case_free(c);
  return st;
}

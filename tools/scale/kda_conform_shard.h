/* kda_conform_shard.h: `kda conform --shard I/N` and `kda conform --merge` (docs/scale.md).
 * SPDX-License-Identifier: MIT
 *
 * A conform run's work units are its (case file, target) pairs, target = each backend and
 * then the candidate files, numbered case-major as one run scores them.  --shard I/N scores
 * the units of shard I of a deterministic partition balanced by cost (the case file's size:
 * loading, the truth and scoring are linear in it) and writes, beside its reports,
 * OUT/shard.json (kda-shard/1, kind "conform"): the plan (case paths, targets, the options
 * given), I, N, its units, the unit of every line of its results.jsonl and the SHA-256 of
 * its three reports.  --merge checks every shard and writes the reports one run writes; what
 * may differ from them is stated in docs/scale.md (timings).
 */
#ifndef KDA_CONFORM_SHARD_H
#define KDA_CONFORM_SHARD_H

#include <stdint.h>

typedef struct kda_conform_shard kda_conform_shard;

/* --shard I/N: a new shard (freed by kda_conform_shard_free), NULL after a message (usage). */
kda_conform_shard *kda_conform_shard_new(const char *spec);
void kda_conform_shard_free(kda_conform_shard *s);

/* The plan: the n sorted case paths and the nt targets (names), and the command line (argv,
 * whose --shard, -o/--out values are left out of the plan's identity).  Partitions the units.
 * 0, or the exit status after a message. */
int kda_conform_shard_plan(kda_conform_shard *s, char *const *paths, int n,
                           const char *const *targets, int nt, int argc, char **argv);

/* Dynamic hand-out (kda-mpi conform): from the next plan on, a shard takes a unit only when
 * claim(ctx, unit) says 1 (rank 0 grants each unit to the first rank that asks), instead of
 * the static partition.  Process-wide; claim NULL restores the partition. */
void kda_conform_shard_use_claims(int (*claim)(void *ctx, int64_t unit), void *ctx);

/* 1 when shard s (NULL: no sharding) scores any unit of case k; then selects that case. */
int kda_conform_shard_case(kda_conform_shard *s, int k);
/* 1 when it scores target t of the selected case; then selects that unit. */
int kda_conform_shard_target(kda_conform_shard *s, int t);
/* A report of the selected unit was emitted (a line of results.jsonl). */
void kda_conform_shard_emitted(kda_conform_shard *s);

/* Writes DIR/shard.json after the reports DIR/results.jsonl, summary.json and junit.xml.
 * 0, or the exit status after a message. */
int kda_conform_shard_finish(const kda_conform_shard *s, const char *dir);

/* kda conform --merge OUTDIR SHARD_OUT... (argv[1] is "--merge"): the exit status. */
int kda_conform_merge_main(int argc, char **argv);

#endif

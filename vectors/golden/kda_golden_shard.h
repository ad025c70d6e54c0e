/* kda_golden_shard.h: golden sets made in shards (processes, MPI ranks, Slurm array tasks)
 * and merged into the bytes one `kda golden --write` writes (docs/scale.md, SPEC.md §10.4).
 * SPDX-License-Identifier: MIT
 *
 * A work unit is one catalog case: the certifier's record in a case file's manifest (working
 * precision, evaluations, values proven) is that of one Ziv loop over the whole case, so a
 * file assembled from separately certified heads would record other numbers than the
 * single-process file; units are therefore whole cases.  A shard directory SHARD holds what
 * kda_golden_make wrote for its units (SHARD/<level>/<id>.npz, L0 traces) and SHARD/shard.json
 * (KDA_SHARD_SCHEMA): the levels, the catalog identity, I and N, and per unit its catalog
 * index, cost, the kda_golden_info the level manifest needs and the SHA-256 and size of every
 * file.  The merge trusts nothing in a shard that it has not checked.
 */
#ifndef KDA_GOLDEN_SHARD_H
#define KDA_GOLDEN_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "kda_golden.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDA_SHARD_SCHEMA "kda-shard/1"
#define KDA_SHARD_MAX 100000 /* the largest N of --shard I/N */

/* "I/N" with 0 <= I < N <= KDA_SHARD_MAX (decimal, nothing else).  KDA_OK or KDA_EINVAL. */
int kda_shard_parse(const char *s, int64_t *i, int64_t *n, char *err, size_t errlen);

/* The cost model of a unit (docs/scale.md): tokens x value heads x K x V + 1, from the
 * entry's description (the certifier's work is that many multiply-adds per evaluation). */
double kda_golden_unit_cost(int64_t catalog_index);

/* The units of the levels in level_mask (bit l: level l), in catalog order, into idx (room
 * for kda_catalog_count()); returns how many. */
int64_t kda_golden_units(uint32_t level_mask, int64_t *idx);

/* The same units by decreasing cost, ties by catalog index (the order work is handed out
 * in, longest first).  Returns how many, or -1 when out of memory. */
int kda_golden_units_by_cost(uint32_t level_mask, int64_t *idx);

/* A deterministic partition of those units over n shards, balanced by cost: greedy longest
 * processing time (units by decreasing cost, ties by catalog index, each to the least loaded
 * shard, ties to the lowest shard).  shard_of[catalog index] = its shard, -1 outside the
 * levels.  KDA_OK, KDA_EINVAL (n out of range). */
int kda_golden_partition(uint32_t level_mask, int64_t n, int64_t *shard_of, char *err,
                         size_t errlen);

/* The catalog identity of the levels: SHA-256 over the generator and every selected entry
 * (index, level, id, description, design, flags, comment), as 64 hex digits. */
void kda_golden_catalog_sha256(uint32_t level_mask, char hex[65]);

/* Writes DIR/shard.json for the units idx[0..nu) already made into DIR (infos indexed by
 * catalog index), after removing from DIR/<level> the files of the level's other cases (a
 * reused shard directory holds exactly its units).  assignment: "lpt" (--shard) or
 * "dynamic" (kda-mpi).  Atomic.  KDA_OK, KDA_EIO, KDA_EINVAL, KDA_ENOMEM. */
int kda_golden_shard_finish(const char *dir, uint32_t level_mask, int64_t i, int64_t n,
                            const char *assignment, const int64_t *idx, int64_t nu,
                            const kda_golden_info *infos, char *err, size_t errlen);

/* What a merge did. */
typedef struct kda_golden_merge_info {
  uint32_t level_mask; /* the levels the shards hold */
  int64_t shards, units, files;
  kda_golden_info *infos; /* by catalog index (malloc'ed; kda_golden_merge_info_free) */
} kda_golden_merge_info;
void kda_golden_merge_info_free(kda_golden_merge_info *m);

/* Checks the n shard directories (every shard.json, that they hold the same levels of this
 * catalog, that there are N of them with distinct I, that they cover every unit exactly once,
 * and every listed file's size and SHA-256, with no unlisted file in a level directory), then
 * writes into OUT what `kda golden --write` of those levels writes: the case files, the level
 * manifests, the pins of on-demand levels, and OUT/SHA256SUMS (stale files of the levels
 * removed).  Nothing is written when a check fails (err names the shard and the problem);
 * every file is written atomically.  KDA_OK, KDA_EFORMAT (a bad shard), KDA_EIO, KDA_ENOMEM,
 * KDA_EINVAL. */
int kda_golden_merge(const char *out, const char *const *shards, int64_t n,
                     kda_golden_merge_info *info, char *err, size_t errlen);

/* SHA-256 (64 hex digits) and size of a file, read in blocks (case files of a production
 * level are large).  KDA_OK, KDA_EIO. */
int kda_golden_file_sha256(const char *path, char hex[65], int64_t *size, char *err,
                           size_t errlen);

#ifdef __cplusplus
}
#endif
#endif

/* kda_precision.c: the one name table of precisions (SPEC.md §10.3).
 * SPDX-License-Identifier: MIT
 */
#include "kda_precision.h"

#include <string.h>

#include "kda_problem.h"

/* Indexed by KDA_PRECISION_*.  The second column is what files have always stored; it must
 * not change (committed golden sets and the pinned hashes of L2 contain it). */
static const struct {
  const char *name;
  const char *file_name;
} precision_table[KDA_PRECISION_COUNT] = {
    {"fp64", "f64"}, {"fp32", "f32"}, {"tf32", NULL}, {"bf16", "bf16"}, {"fp16", "f16"},
};

const char *kda_precision_name(int32_t prec) {
  return prec >= 0 && prec < KDA_PRECISION_COUNT ? precision_table[prec].name : NULL;
}

const char *kda_precision_file_name(int32_t prec) {
  return prec >= 0 && prec < KDA_PRECISION_COUNT ? precision_table[prec].file_name : NULL;
}

int kda_precision_parse(const char *name, int32_t *prec) {
  for (int32_t i = 0; name && i < KDA_PRECISION_COUNT; i++) {
    const char *f = precision_table[i].file_name;
    if (strcmp(name, precision_table[i].name) == 0 || (f && strcmp(name, f) == 0)) {
      if (prec) *prec = i;
      return KDA_OK;
    }
  }
  return KDA_EINVAL;
}

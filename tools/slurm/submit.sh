#!/bin/sh
# submit.sh: submit a golden level as a Slurm job array of N shards and a dependent merge.
# SPDX-License-Identifier: MIT
#
# Usage: tools/slurm/submit.sh N WORK OUT [LEVEL]
#   N      shards (array tasks 0..N-1)
#   WORK   shard root (WORK/shard-I), on a file system every node sees
#   OUT    the golden directory the merge writes (as kda golden --write OUT would)
#   LEVEL  L0, L1, L2 or all (default: L0 and L1)
# KDA names the kda binary (default: kda on the PATH); other sbatch options go in
# SBATCH_* variables (SBATCH_PARTITION, SBATCH_ACCOUNT, ...).  Prints the two job ids.
set -eu
if [ $# -lt 3 ]; then
  echo "usage: $0 N WORK OUT [LEVEL]" >&2
  exit 2
fi
n=$1 work=$2 out=$3 level=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
export KDA_WORK="$work" KDA_OUT="$out" KDA_SHARDS="$n" KDA_LEVEL="$level"
array=$(sbatch --parsable --array="0-$((n - 1))" "$here/golden-shard.sbatch")
merge=$(sbatch --parsable --dependency="afterok:${array%%;*}" "$here/golden-merge.sbatch")
echo "shards: job $array (array 0-$((n - 1))); merge: job $merge"

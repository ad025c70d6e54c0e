#!/bin/sh
# submit.sh: submit a golden level or a conform run as a Slurm job array and a dependent merge.
# SPDX-License-Identifier: MIT
#
# Usage: scripts/cluster/slurm/submit.sh golden N WORK OUT [LEVEL]
#        scripts/cluster/slurm/submit.sh conform N WORK OUT CONFORM_ARGS...
#   N      shards (array tasks 0..N-1)
#   WORK   shard root (WORK/shard-I), on a file system every node sees
#   OUT    what the merge writes: the golden directory (as kda golden --write OUT would), or
#          the report directory (as kda conform --out OUT would)
#   LEVEL  L0, L1, L2 or all (default: L0 and L1)
#   CONFORM_ARGS  the run's options and case paths (kept in WORK/conform.args)
# KDA names the kda binary (default: kda on the PATH); other sbatch options go in SBATCH_*
# variables (SBATCH_PARTITION, SBATCH_ACCOUNT, ...).  Prints the two job ids.
set -eu
if [ $# -lt 4 ]; then
  echo "usage: $0 golden|conform N WORK OUT [LEVEL | CONFORM_ARGS...]" >&2
  exit 2
fi
kind=$1 n=$2 work=$3 out=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
export KDA_WORK="$work" KDA_OUT="$out" KDA_SHARDS="$n" KDA_LEVEL=
case $kind in
  golden) KDA_LEVEL=${1:-}; dep=afterok ;;
  conform) : > "$work/conform.args"; for a in "$@"; do printf '%s\n' "$a" >> "$work/conform.args"; done
           dep=afterany ;;
  *) echo "$0: golden or conform, not '$kind'" >&2; exit 2 ;;
esac
array=$(sbatch --parsable --array="0-$((n - 1))" "$here/$kind-shard.sbatch")
merge=$(sbatch --parsable --dependency="$dep:${array%%;*}" "$here/$kind-merge.sbatch")
echo "shards: job $array (array 0-$((n - 1))); merge: job $merge"

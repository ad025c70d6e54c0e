#!/bin/sh
# measure.sh: the speed-up of sharded (or MPI) golden generation, bytes checked (docs/scale.md).
# SPDX-License-Identifier: MIT
#
# Usage: scripts/cluster/measure.sh KDA_BIN LEVEL "1 2 4 8 16" [--mpi]
#   KDA_BIN  the kda binary (kda-mpi is looked for next to it, or in $KDA_MPI)
#   LEVEL    L0, L1, L2 or all
#   list     the numbers of processes (ranks) to time
#   --mpi    mpirun -np N kda-mpi golden --write instead of N shard processes + kda golden --merge
# For each N: N shard processes `kda golden --write --shard I/N --level LEVEL --jobs 1`
# launched in parallel, then `kda golden --merge` (or one mpirun), timed as a whole, REPEAT
# times (default 1; the table gives the best and the worst); the merged directory is compared
# byte for byte (diff -r) with a single-process `kda golden --write --jobs 1`.  Work goes to
# $WORK (default: a new directory under ${TMPDIR:-/tmp}, removed at the end unless KEEP=1).
# Prints a table: N, best and worst wall seconds, speed-up and efficiency against N = 1 (or
# the single-process run when 1 is not in the list), the slowest and the fastest shard, and
# whether the bytes are identical.  Exit 1 when some merged directory differs.
set -eu
if [ $# -lt 3 ]; then
  echo "usage: $0 KDA_BIN LEVEL \"1 2 4 8 16\" [--mpi]" >&2
  exit 2
fi
kda=$1 level=$2 list=$3 mode=${4:-shards}
case $mode in shards|--mpi) ;; *) echo "$0: unknown option $mode" >&2; exit 2 ;; esac
kda_mpi=${KDA_MPI:-$(dirname "$kda")/kda-mpi}
repeat=${REPEAT:-1}
work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/kda-measure.XXXXXX")}
mkdir -p "$work"
now() { date +%s.%N; }
sub() { echo "$1 $2" | awk '{printf "%.2f\n", $1 - $2}'; }
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

t0=$(now)
"$kda" golden --write --level "$level" --jobs 1 "$work/single" > "$work/single.log"
single=$(sub "$(now)" "$t0")
echo "single process (kda golden --write --level $level --jobs 1): $single s"

# One run of N; prints "WALL SLOWEST FASTEST" (shard times: "-" under MPI).
run_n() { # N DIR
  n=$1 d=$2
  rm -rf "$d"
  mkdir -p "$d"
  t0=$(now)
  if [ "$mode" = --mpi ]; then
    mpirun --oversubscribe -np "$n" "$kda_mpi" golden --write --level "$level" "$d/out" \
      > "$d/mpi.log" 2>&1 || { cat "$d/mpi.log" >&2; exit 2; }
    echo "$(sub "$(now)" "$t0") - -"
    return
  fi
  i=0
  while [ "$i" -lt "$n" ]; do
    ( s=$(now); "$kda" golden --write --shard "$i/$n" --level "$level" --jobs 1 \
        "$d/shard-$i" > "$d/shard-$i.log" 2>&1 || { echo failed > "$d/shard-$i.failed"; };
      sub "$(now)" "$s" > "$d/shard-$i.time" ) &
    i=$((i + 1))
  done
  wait
  if ls "$d"/shard-*.failed >/dev/null 2>&1; then cat "$d"/shard-*.log >&2; exit 2; fi
  set --
  i=0
  while [ "$i" -lt "$n" ]; do set -- "$@" "$d/shard-$i"; i=$((i + 1)); done
  "$kda" golden --merge "$d/out" "$@" > "$d/merge.log"
  wall=$(sub "$(now)" "$t0")
  slow=$(cat "$d"/shard-*.time | sort -g | tail -1)
  fast=$(cat "$d"/shard-*.time | sort -g | head -1)
  echo "$wall $slow $fast"
}

bad=0 base=
printf '%5s %9s %9s %8s %6s %9s %9s  %s\n' N best_s worst_s speedup eff slow_shd fast_shd bytes
for n in $list; do
  best= worst= slow= fast= same=identical
  r=0
  while [ "$r" -lt "$repeat" ]; do
    set -- $(run_n "$n" "$work/n$n")
    lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
    if [ -z "$best" ] || lt "$1" "$best"; then best=$1; fi
    if [ -z "$worst" ] || lt "$worst" "$1"; then worst=$1; fi
    slow=$2 fast=$3
    diff -r "$work/single" "$work/n$n/out" > /dev/null || { same=DIFFERENT; bad=1; }
    r=$((r + 1))
  done
  [ -n "$base" ] || base=$([ "$n" = 1 ] && echo "$best" || echo "$single")
  awk -v n="$n" -v b="$best" -v w="$worst" -v base="$base" -v s="$slow" -v f="$fast" \
    -v same="$same" 'BEGIN { printf "%5d %9.2f %9.2f %8.2f %6.2f %9s %9s  %s\n", n, b, w,
                             base / b, base / b / n, s, f, same }'
done
echo "level $level, $(echo $list | wc -w) configurations, REPEAT=$repeat, mode ${mode#--}," \
  "$(nproc) CPUs ($(uname -n)); work in $work"
[ "${KEEP:-0}" = 1 ] || rm -rf "$work"
exit "$bad"

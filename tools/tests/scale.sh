#!/bin/sh
# scale.sh: make check-scale: the scale-out paths give the single-process bytes (docs/scale.md).
# SPDX-License-Identifier: MIT
#
# Usage: KDA_BIN=build/kda KDA_MPI=build/kda-mpi sh tools/tests/scale.sh WORKDIR
#   1. The Slurm scripts (scripts/cluster/slurm) with the array variables set as Slurm sets
#      them, through a stand-in sbatch that runs each array task and then the dependent
#      merge: golden L0 with 3 shards (tasks numbered from 1, to check SLURM_ARRAY_TASK_MIN)
#      and a conform run on L0 with 3.
#   2. mpirun -np 2 kda-mpi golden on L0 + L1 and on L2, and kda-mpi conform on L1
#      (skipped, saying so, when mpirun or
#      kda-mpi is missing, unless KDA_REQUIRE_MPI=1, as in CI).
# The references of L0 and L1 are the committed golden/L0 and golden/L1: make check-golden
# proves that they are what a single-process `kda golden --write` writes here; that of the
# L2 is checked against the committed pins golden/L2.sha256.  Each merged level is compared byte for
# byte: every case file, trace and manifest, the SHA256SUMS lines or the L2 pins.
set -eu
work=${1:?usage: scale.sh WORKDIR}
kda=${KDA_BIN:-build/kda}
mpi=${KDA_MPI:-build/kda-mpi}
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work/bin"
fail() { echo "check-scale: FAIL: $*" >&2; exit 1; }

# A committed level and the same level of a merged directory: the same files, the same bytes.
same_level() { # OUT LEVEL WHAT
  diff -r "$root/golden/$2" "$1/$2" >/dev/null || fail "$3: $1/$2 differs from golden/$2"
  grep " $2/" "$root/golden/SHA256SUMS" > "$work/want.sums"
  grep " $2/" "$1/SHA256SUMS" > "$work/got.sums" || true
  cmp -s "$work/want.sums" "$work/got.sums" || fail "$3: SHA256SUMS lines of $2 differ"
  echo "check-scale: $3: $2 identical to the single-process --write"
}
# L2 (the production set, about 12 CPU-minutes): against the committed pins, golden/L2.sha256,
# which `kda golden --verify --level L2` proves are the single-process --write's bytes
# (docs/golden.md); a second single-process write here would double the cost.
same_l2() { # OUT WHAT
  cmp -s "$root/golden/L2.sha256" "$1/L2.sha256" || fail "$2: $1/L2.sha256 differs from the pins"
  (cd "$1" && sha256sum -c --quiet L2.sha256) || fail "$2: a file of $1/L2 differs from its pin"
  echo "check-scale: $2: L2 identical to the pinned single-process --write"
}

# ---- 1. Slurm: a stand-in sbatch (no Slurm here) that runs an array's tasks one after the
# other with the variables Slurm sets, then the dependent job.
cat > "$work/bin/sbatch" <<'SB'
#!/bin/sh
# stand-in sbatch: --parsable, --array=A-B, --dependency=afterok:ID, then the script
set -eu
array= dep=
for a in "$@"; do
  case $a in
    --array=*) array=${a#--array=} ;;
    --dependency=*) dep=${a#--dependency=} ;;
    --parsable) ;;
    -*) echo "sbatch stand-in: unexpected option $a" >&2; exit 2 ;;
    *) script=$a ;;
  esac
done
id=$(( $(cat "$SBATCH_STANDIN_IDS" 2>/dev/null || echo 100) + 1 ))
echo "$id" > "$SBATCH_STANDIN_IDS"
if [ -n "$dep" ]; then
  case $dep in afterok:$((id - 1))|afterany:$((id - 1))) ;;
    *) echo "sbatch stand-in: dependency $dep" >&2; exit 2 ;; esac
  SLURM_JOB_ID=$id sh "$script" >> "$SBATCH_STANDIN_LOG" 2>&1
elif [ -n "$array" ]; then
  lo=${array%-*} hi=${array#*-}
  lo=$((lo + ${SBATCH_STANDIN_SHIFT:-0})) hi=$((hi + ${SBATCH_STANDIN_SHIFT:-0}))
  t=$lo
  while [ "$t" -le "$hi" ]; do
    SLURM_ARRAY_JOB_ID=$id SLURM_ARRAY_TASK_ID=$t SLURM_ARRAY_TASK_MIN=$lo \
      SLURM_ARRAY_TASK_MAX=$hi SLURM_ARRAY_TASK_COUNT=$((hi - lo + 1)) SLURM_CPUS_PER_TASK=2 \
      sh "$script" >> "$SBATCH_STANDIN_LOG" 2>&1
    t=$((t + 1))
  done
fi
echo "$id"
SB
chmod +x "$work/bin/sbatch"
export SBATCH_STANDIN_IDS="$work/sbatch.ids" SBATCH_STANDIN_LOG="$work/sbatch.log"
slurm() { # SHIFT KIND N WORK OUT ARGS...
  shift_=$1
  shift
  SBATCH_STANDIN_SHIFT=$shift_ PATH="$work/bin:$PATH" KDA="$kda" \
    sh "$root/scripts/cluster/slurm/submit.sh" "$@" > "$work/submit.out" ||
    { cat "$SBATCH_STANDIN_LOG" >&2; fail "slurm: submit.sh $*"; }
}
slurm 1 golden 3 "$work/slurm-l0" "$work/slurm-l0/out" L0
grep -q "merged 3 shards" "$SBATCH_STANDIN_LOG" || fail "slurm: no merge of 3 shards"
same_level "$work/slurm-l0/out" L0 "slurm (3 tasks numbered from 1)"
# A shard that did not get written: the merge fails naming it (exit 2), nothing written.
rm -rf "$work/slurm-l0/shard-1"
if "$kda" golden --merge "$work/slurm-l0/out2" "$work/slurm-l0/shard-0" \
    "$work/slurm-l0/shard-1" "$work/slurm-l0/shard-2" 2> "$work/merge.err"; then
  fail "slurm: merge with a missing shard succeeded"
fi
grep -q "shard-1" "$work/merge.err" || fail "slurm: the missing shard is not named"
[ ! -e "$work/slurm-l0/out2" ] || fail "slurm: a failed merge wrote $work/slurm-l0/out2"

# A conform run in 3 array tasks against one run: the same reports but for the timings.
normalise() { # DIR: results.jsonl without "seconds", junit.xml without time values
  sed 's/"seconds":[^,]*,//' "$1/results.jsonl" > "$1/results.norm"
  sed 's/ time="[^"]*"/ time=""/' "$1/junit.xml" > "$1/junit.norm"
}
"$kda" conform -q -b ref-f64 -b ref-f32 --out "$work/conform-one" "$root/golden/L0" > /dev/null ||
  fail "conform: one run"
slurm 0 conform 3 "$work/slurm-cf" "$work/slurm-cf/out" -q -b ref-f64 -b ref-f32 "$root/golden/L0"
normalise "$work/conform-one"
normalise "$work/slurm-cf/out"
for f in results.norm summary.json junit.norm; do
  cmp -s "$work/conform-one/$f" "$work/slurm-cf/out/$f" ||
    fail "slurm conform: $f differs from one run's"
done
echo "check-scale: slurm conform (3 tasks): reports identical to one run's (timings aside)"

# ---- 2. MPI, 2 ranks.
if command -v mpirun >/dev/null 2>&1 && [ -x "$mpi" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  run_mpi() { mpirun --oversubscribe -np 2 "$mpi" golden --write "$@"; }
  mpirun --oversubscribe -np 1 "$mpi" golden --write --level L0 "$work/mpi-1" > "$work/mpi.log" \
    2>&1 || { cat "$work/mpi.log" >&2; fail "mpi: one rank"; }
  same_level "$work/mpi-1" L0 "mpi (1 rank)"
  run_mpi "$work/mpi" > "$work/mpi.log" 2>&1 || { cat "$work/mpi.log" >&2; fail "mpi: L0 + L1"; }
  same_level "$work/mpi" L0 "mpi (2 ranks)"
  same_level "$work/mpi" L1 "mpi (2 ranks)"
  run_mpi --level L2 "$work/mpi-l2" > "$work/mpi.log" 2>&1 || { cat "$work/mpi.log" >&2; fail "mpi: L2"; }
  same_l2 "$work/mpi-l2" "mpi (2 ranks)"
  # conform over 2 ranks on L1 against one run (timings aside)
  "$kda" conform -q -b ref-f64 -b ref-f32 --out "$work/conform-l1" "$root/golden/L1" \
    > /dev/null || fail "conform: one run on L1"
  mpirun --oversubscribe -np 2 "$mpi" conform -q -b ref-f64 -b ref-f32 --out "$work/mpi-cf" \
    "$root/golden/L1" > "$work/mpi.log" 2>&1 || { cat "$work/mpi.log" >&2; fail "mpi: conform"; }
  normalise "$work/conform-l1"
  normalise "$work/mpi-cf"
  for f in results.norm summary.json junit.norm; do
    cmp -s "$work/conform-l1/$f" "$work/mpi-cf/$f" || fail "mpi conform: $f differs from one run's"
  done
  echo "check-scale: mpi conform (2 ranks): L1 reports identical to one run's (timings aside)"
  # A rank that fails: the run fails with that rank's message, the level is not written.
  if KDA_TEST_FAIL_WRITE=l0-gdn-vk run_mpi --level L0 "$work/mpi-bad" > "$work/mpi.log" 2>&1; then
    fail "mpi: a failing rank did not fail the run"
  fi
  grep -q "kda-mpi: rank [01]: .*l0-gdn-vk" "$work/mpi.log" || fail "mpi: no rank message"
  [ ! -e "$work/mpi-bad/L0" ] || fail "mpi: a failed run wrote $work/mpi-bad/L0"
  echo "check-scale: mpi: a failing rank fails the run with its message"
elif [ "${KDA_REQUIRE_MPI:-0}" = 1 ]; then
  fail "mpirun or $mpi missing (KDA_REQUIRE_MPI=1)"
else
  echo "check-scale: mpirun or $mpi not found: the MPI runs are skipped (make mpi)"
fi
echo "check-scale: all passed"

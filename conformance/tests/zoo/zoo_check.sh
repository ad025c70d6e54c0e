#!/bin/sh
# zoo_check.sh: make check-zoo: every member of the honest zoo (members.sh: the zoo plugin's
# orders without and with FMA, simd's ISAs, ref-f32; the bf16 zoo) on every case of golden/L1
# with every serving check (SPEC.md §7.7), and on every serving prompt of L1 as the candidate
# path scores it (an exported prompt file is an ordinary case, its truth from ref-f64); then
# the member x case table (zoo_table.py).  The zoo's claim (SPEC.md §7.3): no honest kernel
# fails.  Exit 1 when one does.
# SPDX-License-Identifier: MIT
# Usage: KDA_BIN=build/kda ZOO=build/conformance/tests/zoo sh conformance/tests/zoo/zoo_check.sh \
#          [--strict] [-k GLOB]...
#   --strict   the runner's --strict (growth beyond ref-f32's is a Fail; warnings fail)
#   -k GLOB    only the cases (and their prompts) whose id matches, as kda conform -k
#   KEEP=DIR   keep the reports (results.jsonl of each run) in DIR
set -u
kda=${KDA_BIN:-build/kda}
ZOO=${ZOO:-build/conformance/tests/zoo}
golden=${KDA_GOLDEN:-golden}/L1
here=$(dirname "$0")
strict="" sel=""
while [ $# -gt 0 ]; do
  case $1 in
    --strict) strict=--strict; shift ;;
    -k) sel="$sel -k $2 -k $2.*"; shift 2 ;;
    *) echo "zoo_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
. "$here/members.sh"
if [ -n "${KEEP:-}" ]; then tmp=$KEEP; mkdir -p "$tmp" || exit 2
else
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-zoo.XXXXXX") || exit 2
  trap 'rm -rf "$tmp"' EXIT INT TERM
fi
for so in kda_plugin_zoo.so kda_plugin_zoo_fma.so; do
  [ -f "$ZOO/$so" ] || { echo "zoo_check: $ZOO/$so is missing (make zoo)" >&2; exit 2; }
done
t0=$(date +%s)
rm -rf "$tmp/prompts"
"$kda" conform --export-prompts "$tmp/prompts" "$golden" >/dev/null 2>"$tmp/export.err" ||
  { echo "zoo_check: exporting the prompts: $(head -1 "$tmp/export.err")" >&2; exit 2; }
# The prompt files proper (ID.SUFFIX.npz); the bare ID.npz copies have no answers.
prompts=$(ls "$tmp"/prompts/*.*.npz | grep -E '\.(resume-[0-9]+|decode|spec-[0-9]+|causal-qv|causal-gkb)\.npz$')
m32=$(zoo_members | tr '\n' ' ')
m16=$(zoo_bf16_members | tr '\n' ' ')
run() { # $1 name, rest: kda conform arguments
  name=$1; shift
  "$kda" conform $strict --max-lines 0 -q "$@" -o "$tmp/$name" >"$tmp/$name.txt" 2>&1
  rc=$?
  # 5: every selected case NotSupported (bf16 members on float32 cases only): nothing to table
  [ $rc -le 1 ] || [ $rc = 5 ] ||
    { echo "zoo_check: kda conform ($name) exited $rc: $(tail -2 "$tmp/$name.txt")" >&2; exit 2; }
  [ -f "$tmp/$name/results.jsonl" ] && echo "$tmp/$name/results.jsonl" >> "$tmp/tables"
}
: > "$tmp/tables"
run l1 $sel $m32 "$golden"
run prompts $sel --serving off $m32 $prompts
run l1-bf16 $sel $m16 "$golden"
run prompts-bf16 $sel --serving off $m16 $prompts
echo "zoo_check: ${strict:-default} verdicts, $(( $(date +%s) - t0 )) s"
python3 "$here/zoo_table.py" $(cat "$tmp/tables")

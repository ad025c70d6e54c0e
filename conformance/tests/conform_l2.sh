#!/bin/sh
# conform_l2.sh: make check-l2, the long-sequence tolerance on the production L2 set (K = V =
# 128, up to 2^20 tokens, streamed: SPEC.md §7.10), slow and not part of make check.
# SPDX-License-Identifier: MIT
#  1. ref-f32, simd and four orders of the honest zoo (conformance/tests/zoo: fla's chunked
#     form at chunk 64, the textbook loop, ref-f32's order built with FMA, a random
#     permutation of every reduction) pass every L2 case but the expansive characterisation
#     one, --strict;
#  2. every line of conformance/tests/l2_kills.txt holds: each long-sequence defect of
#     plugin_long.c fails (--strict) where it acts and passes where it cannot act.
# A case glob of the table that matches no file of golden/L2 is an error (KDA_L2_PARTIAL=1:
# skipped, saying so).  KDA_L2_DIR overrides golden/L2; KDA_L2_CHUNK sets --chunk (default: kda's).
# Usage: KDA_BIN=build/kda PLUGIN_DIR=build/conformance/tests sh conformance/tests/conform_l2.sh
set -u
kda=${KDA_BIN:-build/kda}
plugin=${PLUGIN_DIR:-build/conformance/tests}/kda_plugin_long.so
zoo=${ZOO:-build/conformance/tests/zoo}
dir=${KDA_L2_DIR:-golden/L2}
table=conformance/tests/l2_kills.txt
chunk=${KDA_L2_CHUNK:+--chunk $KDA_L2_CHUNK}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-l2.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "conform_l2: FAIL: $*" >&2; exit 1; }
ls "$dir"/*.npz > /dev/null 2>&1 ||
  fail "no L2 files in $dir: make them with 'build/kda golden --write --level L2 golden'"

# 1. Conforming float32 passes (the expansive case is characterisation, SPEC.md §6.3).
# shellcheck disable=SC2086
"$kda" conform --strict $chunk -b ref-f32 -b simd -p "$zoo/kda_plugin_zoo.so:order=chunk64" \
  -p "$zoo/kda_plugin_zoo.so:order=textbook" -p "$zoo/kda_plugin_zoo.so:order=perm,seed=1" \
  -p "$zoo/kda_plugin_zoo_fma.so:order=spec" -k '!flag:EXPANSIVE' --jsonl "$tmp/ok.jsonl" \
  "$dir" > "$tmp/ok.txt" 2>&1 ||
  fail "ref-f32, simd or a zoo member fail L2: $(grep -v '^PASS' "$tmp/ok.txt" | head -3)"
echo "conform_l2: ref-f32, simd and the zoo members pass L2 ($(tail -1 "$tmp/ok.txt"))"

# 2. The kill table: each CASE is an id glob, matched against the files of $dir.
grep -v '^#' "$table" | grep -v '^ *$' | while read -r defect want globs; do
  ids=""
  for g in $globs; do
    found=""
    for f in "$dir"/$g.npz; do
      [ -f "$f" ] && found="$found $(basename "$f" .npz)"
    done
    if [ -z "$found" ]; then
      [ "${KDA_L2_PARTIAL:-0}" = 1 ] || fail "no case $g of $table in $dir"
      echo "conform_l2: $g: not in $dir, skipped"
    fi
    ids="$ids$found"
  done
  [ -n "$ids" ] || continue
  ks=""
  for c in $ids; do ks="$ks -k $c"; done
  # shellcheck disable=SC2086
  "$kda" conform --strict --no-prefix $chunk --max-lines 0 -p "$plugin:defect=$defect" $ks "$dir" \
    > "$tmp/out.txt" 2>&1
  [ $? = 2 ] && fail "kda conform exited 2 on defect $defect: $(tail -1 "$tmp/out.txt")"
  for c in $ids; do
    got=$(awk -v c="$c" '$3 == c {print $1}' "$tmp/out.txt")
    [ "$got" = "$want" ] || fail "defect $defect on $c: ${got:-no verdict}, expected $want"
  done
  echo "conform_l2: $defect: $want on$ids"
done || exit 1
echo "conform_l2: every defect of $table killed where it acts"

#!/bin/sh
# conform_half.sh: kda conform on 16-bit input buffers through the variant slot (SPEC.md §7.8,
# §10.3), run by make check: plugin_half.so with input=bf16 passes exactly the bf16 cases of
# golden/L1 (every serving check on) and reports each other case NotSupported, never rounded;
# the same when streamed (judged by input precision); f32 buffers pass all; the report's class
# is the variant's; a parameter string the variant rejects is a one-line usage error (exit 2).
# SPDX-License-Identifier: MIT
# Usage: KDA_BIN=build/kda PLUGIN_DIR=build/conformance/tests sh conformance/tests/conform_half.sh
set -u
kda=${KDA_BIN:-build/kda}
plugin=${PLUGIN_DIR:-build/conformance/tests}/kda_plugin_half.so
fail() { echo "conform_half: FAIL: $*" >&2; exit 1; }
n=$(ls golden/L1/*.npz | wc -l)
nb=0
for f in golden/L1/*.npz; do
  "$kda" inspect "$f" | grep -q '"input_precision": "bf16"' && nb=$((nb + 1))
done
[ "$nb" -gt 0 ] && [ "$nb" -lt "$n" ] || fail "golden/L1 has $nb bf16 cases of $n"
tmp=${TMPDIR:-/tmp}/conform_half.$$
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp"
for mode in "" --stream; do
  out=$("$kda" conform $mode --out "$tmp/r" -p "$plugin:input=bf16" golden/L1 2>&1)
  rc=$?
  [ $rc = 0 ] || fail "input=bf16 $mode: exit status $rc: $(echo "$out" | tail -3)"
  want="$nb passed, 0 failed, $((n - nb)) skipped, 0 warnings"
  [ "$(echo "$out" | tail -1)" = "$want" ] || fail "input=bf16 $mode: '$(echo "$out" | tail -1)', expected '$want'"
  skips=$(echo "$out" | grep -c '^SKIP')
  why=$(echo "$out" | grep '^SKIP' | grep -c -- "-- inputs are f[0-9]*, the backend takes bf16 buffers (")
  [ "$skips" = $((n - nb)) ] && [ "$why" = "$skips" ] ||
    fail "input=bf16 $mode: $why of $skips NotSupported lines say why: $(echo "$out" | grep '^SKIP' | head -2)"
  if [ -z "$mode" ]; then
    echo "$out" | grep '^PASS' | grep -q 'prefix' || fail "no serving checks ran"
  else # not loaded whole to be checked value by value
    [ "$(echo "$out" | grep -c 'a streamed case is judged by its input precision')" = "$skips" ] ||
      fail "--stream: a case was declined other than by its input precision"
  fi
  grep -q '"name": "half:input=bf16",' "$tmp/r/summary.json" &&
    grep -A1 '"name": "half:input=bf16",' "$tmp/r/summary.json" | grep -q '"class": "bf16"' &&
    grep -A4 '"name": "half:input=bf16",' "$tmp/r/summary.json" | grep -q '"input_dtype": "bf16"' ||
    fail "summary.json does not score half:input=bf16 in bf16 on bf16 buffers"
done
echo "conform_half: input=bf16 passes the $nb bf16 cases of golden/L1, the $((n - nb)) others NotSupported (also streamed)"
out=$("$kda" conform -q --no-prefix -p "$plugin:input=f32" golden/L1 2>&1)
[ "$(echo "$out" | tail -1)" = "$n passed, 0 failed, 0 skipped, 0 warnings" ] || fail "input=f32: $(echo "$out" | tail -1)"
"$kda" conform -q -p "$plugin:input=bf17" golden/L1 >"$tmp/o" 2>"$tmp/e"
rc=$?
[ $rc = 2 ] || fail "rejected parameters: exit status $rc, expected 2"
[ "$(wc -l <"$tmp/e")" = 1 ] && grep -q "kda_plugin_half.so: backend 'half' rejects the parameters 'input=bf17'" "$tmp/e" ||
  fail "rejected parameters: stderr '$(cat "$tmp/e")'"
[ ! -s "$tmp/o" ] || fail "rejected parameters: stdout '$(head -2 "$tmp/o")'"
echo "conform_half: input=f32 passes all $n; a rejected parameter string is exit 2 with one line"

#!/bin/sh
# conform_long.sh: the long-sequence tolerance of SPEC.md §7.3 (envelope rule) on golden/L1,
# run by make check.
# SPDX-License-Identifier: MIT
#  1. every long-sequence defect of conformance/tests/plugin_long.c fails each L1 case where
#     it acts (listed below; prod-lowrank-mixed and drift-decay-small are the cases the former
#     n/256 allowance let cumsum_f32 pass), and passes the cases where it cannot act;
#  2. defect=none, ref-f32 and simd pass all of L1 with the worst error at most cap / 1.25;
#  3. growth beyond the honest evaluations' within the caps is a QualityWarning, and a Fail
#     with --strict; ref-f32's and simd's own growth on the same case is neither.
# Usage: KDA_BIN=build/kda PLUGIN_DIR=build/conformance/tests sh conformance/tests/conform_long.sh
set -u
kda=${KDA_BIN:-build/kda}
plugin=${PLUGIN_DIR:-build/conformance/tests}/kda_plugin_long.so
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-long.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "conform_long: FAIL: $*" >&2; exit 1; }
[ -d golden/L1 ] || fail "golden/L1 is missing"

# run DEFECT CASE... : one line per case, "VERDICT CASE", into $tmp/v.txt
run() {
  d=$1; shift
  ks=""
  for c in "$@"; do ks="$ks -k $c"; done
  # shellcheck disable=SC2086
  "$kda" conform --no-prefix --max-lines 0 -p "$plugin:defect=$d" $ks golden/L1 \
    > "$tmp/out.txt" 2>&1
  [ $? = 2 ] && fail "kda conform exited 2 on defect $d: $(tail -1 "$tmp/out.txt")"
  awk '/^(PASS|FAIL|WARN|CRASH|TIMEOUT) /{print $1, $3}' "$tmp/out.txt" > "$tmp/v.txt"
}
must() { # must VERDICT DEFECT CASE...
  want=$1 d=$2; shift 2
  run "$d" "$@"
  for c in "$@"; do
    got=$(awk -v c="$c" '$2 == c {print $1}' "$tmp/v.txt")
    [ "$got" = "$want" ] || fail "defect $d on $c: ${got:-no verdict}, expected $want"
  done
  echo "conform_long: $d: $want on $*"
}

# 1. Where each defect acts it fails; where it cannot act (no gates, gates exact in fp16) it
#    passes, so each kill is the defect's.
must FAIL cumsum_f32 prod-lowrank-mixed drift-decay-small t5000-long gate-values-log
must PASS cumsum_f32 drift-lowrank drift-linear
must FAIL state_bf16 prod-lowrank-mixed drift-lowrank drift-linear drift-decay-small t5000-long t128-k128
must FAIL state_tf32 prod-lowrank-mixed drift-lowrank drift-linear drift-decay-small t5000-long t128-k128
must FAIL ulp_bias prod-lowrank-mixed drift-lowrank drift-linear t127-linear
must FAIL exp_fp16 prod-lowrank-mixed t5000-long t15-log-prob t17-gdn
must PASS exp_fp16 drift-decay-small drift-lowrank
must FAIL beta_bf16 prod-lowrank-mixed drift-lowrank drift-decay-small t5000-long disc-beta-bf16
must FAIL chunk_first_gate prod-lowrank-mixed t5000-long gate-values-mixed t128-k128
must PASS chunk_first_gate drift-lowrank drift-linear
must FAIL chunk_ulp_bias drift-linear

# 2. Conforming float32 passes every L1 case, with a margin.
"$kda" conform --no-prefix -b ref-f32 -b simd -p "$plugin:defect=none" --jsonl "$tmp/ok.jsonl" \
  golden/L1 > "$tmp/ok.txt" 2>&1 || fail "ref-f32, simd or defect=none fail L1: $(grep -v '^PASS' "$tmp/ok.txt" | head -2)"
grep -Ev '^(PASS|cases:|backends:|reports:|legend:|units:)' "$tmp/ok.txt" | grep -Eqv '^[0-9]+ passed, 0 failed, 0 skipped, 0 warnings$' &&
  fail "not every line is a Pass: $(grep -v '^PASS' "$tmp/ok.txt" | head -1)"
# the worst error of each quantity (o, ht, hc) is the "worst" followed by its "allowed"
grep -o '"worst": *[0-9.eE+-]*, *"allowed"' "$tmp/ok.jsonl" |
  sed 's/^"worst": *\([0-9.eE+-]*\),.*/\1/' |
  awk '$1 + 0 > w {w = $1 + 0} END {print NR " worst " w; if (NR < 100 || w > 64 / 1.25) exit 1}' \
  > "$tmp/m.txt" ||
  fail "a conforming backend is within 1.25x of the cap on L1 ($(cat "$tmp/m.txt"))"
echo "conform_long: ref-f32, simd and defect=none pass L1 within cap / 1.25"

# 3. Growth beyond the honest evaluations' (SPEC.md §7.5, §7.6): chunk_ulp_bias on a
#    16384-token low-rank case stays within the caps but its last window is more than 4x the
#    median of the honest evaluations' (173 units); at 400 tokens it is within their spread.
"$kda" gen seed=6 T=16384 H=1 K=4 V=2 regime=lowrank family=deltanet beta=logit l2=fla prec=f32 \
  id=lowrank-16k -o "$tmp/lr.npz" || fail "kda gen"
"$kda" conform --no-prefix -p "$plugin:defect=chunk_ulp_bias" "$tmp/lr.npz" > "$tmp/g.txt" 2>&1 ||
  fail "growth alone must not fail a run without --strict: $(head -1 "$tmp/g.txt")"
grep -q "^WARN .*beyond the class emulation" "$tmp/g.txt" || fail "no growth warning: $(head -1 "$tmp/g.txt")"
"$kda" conform --strict --no-prefix -p "$plugin:defect=chunk_ulp_bias" "$tmp/lr.npz" > "$tmp/g.txt" 2>&1
[ $? = 1 ] || fail "--strict: growth beyond ref-f32's is not a failed run"
grep -q "^FAIL .*beyond the class emulation" "$tmp/g.txt" || fail "--strict: not a Fail: $(head -1 "$tmp/g.txt")"
"$kda" conform --strict --no-prefix -b ref-f32 -b simd "$tmp/lr.npz" > "$tmp/g.txt" 2>&1 ||
  fail "--strict: ref-f32 or simd fail on their own drift: $(head -2 "$tmp/g.txt")"
echo "conform_long: growth beyond the honest evaluations': QualityWarning, Fail with --strict; ref-f32 and simd pass"

# 4. The fp64 class has no emulation to compare growth with: ref-f64's own drift on a DRIFT
#    case is a QualityWarning, and the run says why (the note), counting it on the last line.
"$kda" conform --no-prefix -b ref-f64 golden/L1/prod-lowrank-mixed.npz > "$tmp/w.txt" 2>&1 ||
  fail "ref-f64 fails prod-lowrank-mixed: $(tail -2 "$tmp/w.txt")"
grep -q '^note: ref-f64 on prod-lowrank-mixed: the fp64 class has no plain emulation' "$tmp/w.txt" &&
  [ "$(tail -1 "$tmp/w.txt")" = "1 passed, 0 failed, 0 skipped, 1 warning" ] ||
  fail "ref-f64's growth warning is not explained and counted: $(tail -3 "$tmp/w.txt")"
echo "conform_long: ref-f64's own growth on prod-lowrank-mixed is a counted, explained warning"

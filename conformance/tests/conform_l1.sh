#!/bin/sh
# conform_l1.sh: kda conform end to end on golden/L1 (SPEC.md §7.7, §7.9), run by make check.
# SPDX-License-Identifier: MIT
#  1. every test-only mutant fails at least one L1 case (the golden set catches each mistake);
#  2. a recorded baseline turns a larger error into a QualityWarning (a regression) that still
#     counts as passed, and the same run within the baseline factor is a Pass;
#  3. a report holding every verdict kind (pass, fail, crash, timeout, waived) is JUnit XML
#     that validates against conformance/tests/junit.xsd (xmllint), and the summary line and
#     exit status are right.
# Usage: KDA_BIN=build/kda PLUGIN_DIR=build/conformance/tests sh conformance/tests/conform_l1.sh
set -u
kda=${KDA_BIN:-build/kda}
plugins=${PLUGIN_DIR:-build/conformance/tests}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-conform.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "conform_l1: FAIL: $*" >&2; exit 1; }
[ -d golden/L1 ] || fail "golden/L1 is missing"

# 1. Mutants.  Cases are tried smallest first; the first Fail kills the mutant.
cases=$(ls -S -r golden/L1/*.npz)
for m in erase_before_decay readout_before_write predict_undecayed decay_value_axis \
         transposed_state scale_on_k wrong_head_map beta_bf16 f32_ulp_bias drop_h0 exp2_gate; do
  killed=""
  for c in $cases; do
    "$kda" conform -q --no-prefix --max-lines 0 -p "$plugins/kda_plugin_mutants.so" \
      --params "mutant=$m" "$c" >/dev/null 2>&1
    rc=$?
    [ $rc = 2 ] && fail "kda conform exited 2 on mutant $m, case $c"
    if [ $rc = 1 ]; then killed=$c; break; fi
  done
  [ -n "$killed" ] || fail "mutant $m survives every golden/L1 case"
  echo "conform_l1: mutant $m killed by $(basename "$killed" .npz)"
done

# 2. Baselines (SPEC.md §7.6): record ref-f32's errors, shrink them to 0.5 units (baselines
#    below 1 count as 1), and the unchanged backend becomes a regression warning.
case=golden/L1/t15-log-prob.npz
"$kda" conform -q -b ref-f32 --record-baseline "$tmp/base.json" "$case" >/dev/null ||
  fail "recording a baseline"
grep -q '"schema": "kda-baseline/1"' "$tmp/base.json" || fail "baseline file has no schema"
sed -E 's/("(o|ht)": *)[0-9.eE+-]+/\10.5/g' "$tmp/base.json" > "$tmp/small.json"
"$kda" conform -b ref-f32 --baseline "$tmp/small.json" "$case" > "$tmp/b.txt" 2>&1 ||
  fail "a QualityWarning must not fail the run"
grep -q '^WARN .*regression: o error' "$tmp/b.txt" || fail "no regression warning: $(head -1 "$tmp/b.txt")"
# the terminal explains itself: the header names the cases, backends and reports and holds the
# legend; the last line counts the warning; a note says what a WARN is
head -1 "$tmp/b.txt" | grep -q "^cases: 1 case file from $case" &&
  grep -q '^backends: ref-f32$' "$tmp/b.txt" && grep -q '^reports: none' "$tmp/b.txt" &&
  grep -q '^legend: VERDICT BACKEND CASE CLASS' "$tmp/b.txt" && grep -q '^units: 1 unit = u M' "$tmp/b.txt" ||
  fail "no header (cases, backends, reports, legend, units): $(head -3 "$tmp/b.txt")"
[ "$(tail -1 "$tmp/b.txt")" = "1 passed, 0 failed, 0 skipped, 1 warning" ] ||
  fail "the last line does not count the warning: $(tail -1 "$tmp/b.txt")"
grep -q '^note: 1 WARN (QualityWarning): within every cap' "$tmp/b.txt" || fail "no note on the WARN"
"$kda" conform -b ref-f32 --baseline "$tmp/base.json" "$case" > "$tmp/b.txt" 2>&1 ||
  fail "the baseline's own run must pass"
grep -q '^PASS' "$tmp/b.txt" || fail "run at its own baseline is not a Pass: $(head -1 "$tmp/b.txt")"
echo "conform_l1: baselines: regression warning above 2x, pass at the recorded errors"

# 3. Every verdict kind in one JUnit report.
cat > "$tmp/waivers.json" <<'W'
{"waivers": [{"case": "t17-gdn", "backend": "mutant*", "reason": "exercise Waived", "link": "SPEC.md#76"}]}
W
"$kda" conform --timeout 2 --waivers "$tmp/waivers.json" --junit "$tmp/junit.xml" \
  -b ref-f32 -p "$plugins/kda_plugin_mutants.so:mutant=transposed_state" \
  -p "$plugins/kda_plugin_crash.so" -p "$plugins/kda_plugin_hang.so" \
  golden/L1/t15-log-prob.npz golden/L1/t17-gdn.npz > "$tmp/out.txt" 2>&1
rc=$?
[ $rc = 1 ] || fail "exit status $rc, expected 1 (a Fail, a Crash and a Timeout): $(tail -1 "$tmp/out.txt")"
for v in PASS FAIL CRASH TIMEOUT WAIVED; do
  grep -q "^$v" "$tmp/out.txt" || fail "no $v line in the report"
done
tail -1 "$tmp/out.txt" | grep -Eq '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped, [0-9]+ warnings?$' ||
  fail "last line is not 'N passed, N failed, N skipped, N warnings': $(tail -1 "$tmp/out.txt")"
command -v xmllint >/dev/null 2>&1 || fail "xmllint is missing (Debian package libxml2-utils)"
xmllint --noout --schema conformance/tests/junit.xsd "$tmp/junit.xml" 2>"$tmp/xmllint.txt" ||
  fail "JUnit report does not validate: $(head -3 "$tmp/xmllint.txt")"
for tag in failure error skipped; do
  grep -q "<$tag " "$tmp/junit.xml" || fail "JUnit report has no <$tag> element"
done
echo "conform_l1: JUnit report with pass, failure, error and skipped validates against junit.xsd"

# 4. The worker (SPEC.md §7.8) from the command line: a plugin that cannot be loaded, one whose
#    constructor aborts, a crashing and a printing backend are each that backend's verdict on
#    every case; ref-f32 still passes both cases; nothing the backend printed reaches stdout.
"$kda" conform --timeout 5 -b ref-f32 -p "$plugins/kda_plugin_ctor_abort.so" \
  -p "$plugins/kda_plugin_noentry.so" -p "$plugins/kda_plugin_faults.so:fault=print" \
  golden/L1/t15-log-prob.npz golden/L1/t17-gdn.npz > "$tmp/w.txt" 2>"$tmp/w.err"
rc=$?
[ $rc = 1 ] || fail "worker faults: exit status $rc, expected 1: $(tail -1 "$tmp/w.txt")"
[ "$(grep -c '^PASS    ref-f32' "$tmp/w.txt")" = 2 ] || fail "ref-f32 did not pass both cases"
[ "$(grep -c '^CRASH   kda_plugin_ctor_abort.so .*in load' "$tmp/w.txt")" = 2 ] ||
  fail "an aborting constructor is not a Crash on every case"
[ "$(grep -c "^FAIL    kda_plugin_noentry.so .*no symbol" "$tmp/w.txt")" = 2 ] ||
  fail "a plugin without an entry is not a Fail on every case"
[ "$(grep -c '^WARN    faults:fault=print .*the backend printed' "$tmp/w.txt")" = 2 ] ||
  fail "a printing backend is not a QualityWarning"
grep -q '^    | hello from forward on stdout' "$tmp/w.txt" || fail "the backend's output is not shown"
grep -v '^    | ' "$tmp/w.txt" "$tmp/w.err" | grep -q 'hello from forward' &&
  fail "the backend's output reached the runner's stdout or stderr"
"$kda" conform --memory-limit 12x -b ref-f32 golden/L1/t15-log-prob.npz >/dev/null 2>&1
[ $? = 2 ] || fail "a bad --memory-limit is not a usage error"
"$kda" conform --memory-limit 8G -b ref-f32 golden/L1/t15-log-prob.npz >/dev/null 2>&1 ||
  fail "--memory-limit 8G"
"$kda" conform --help | grep -q -- '--memory-limit' || fail "--help does not document --memory-limit"
echo "conform_l1: worker: load failures and crashes are verdicts, prints captured, run completes"

# 5. The serving-path checks (SPEC.md §7.7).  Each serving mutant passes the plain scoring of
#    every L1 case (--serving off) and fails its own serving check (the reason names it) on
#    some case; the correct backends pass all of L1 with every offset (--serving full).
for row in "future_gate_anchor:causality: outputs before token [0-9]* changed when later g, k and beta" \
           "resume_unaligned:resume at P=" \
           "decode_transposed:decode resume (each sequence at its last token)" \
           "spec_state_last:speculative verify after P=[0-9]* (4 drafts): hc error" \
           "pool_touches_free:state-pool decode: slot [0-9]*, named by no sequence, changed" \
           "pool_ignores_index:state-pool decode: slot [0-9]*, named by no sequence, changed"; do
  m=${row%%:*} why=${row#*:}
  "$kda" conform -q --serving off --max-lines 0 -p "$plugins/kda_plugin_mutants.so:mutant=$m" \
    golden/L1 > "$tmp/s.txt" 2>&1 || fail "serving mutant $m fails the plain scoring: $(head -1 "$tmp/s.txt")"
  "$kda" conform -q --max-lines 0 -p "$plugins/kda_plugin_mutants.so:mutant=$m" golden/L1 \
    > "$tmp/s.txt" 2>&1
  rc=$?
  [ $rc = 1 ] || fail "serving mutant $m: exit status $rc, expected 1"
  grep -q "^FAIL .*-- $why" "$tmp/s.txt" || fail "serving mutant $m is not failed by its check"
  grep "^FAIL" "$tmp/s.txt" | grep -v -- "-- $why" | grep -q . &&
    fail "serving mutant $m failed by another check: $(grep '^FAIL' "$tmp/s.txt" | grep -v -- "-- $why" | head -1)"
  echo "conform_l1: serving mutant $m passes plain scoring, killed by its check on $(grep -c '^FAIL' "$tmp/s.txt") cases"
done
"$kda" conform -q --max-lines 0 -p "$plugins/kda_plugin_mutants.so:mutant=decode_transposed" \
  -k 'varlen-*' golden/L1 | grep -q '^FAIL .*varlen-ragged-h0 .*decode resume' ||
  fail "the decode resume does not run on multi-sequence cases"
"$kda" conform -q --serving full --max-lines 0 -b ref-f32 -b simd golden/L1 > "$tmp/s.txt" 2>&1 ||
  fail "ref-f32 or simd fails a serving check: $(grep -v '^WARN' "$tmp/s.txt" | head -1)"
echo "conform_l1: ref-f32 and simd pass every serving check (--serving full) on golden/L1"
"$kda" conform --help | grep -q -- '--serving MODE' || fail "--help does not document --serving"
"$kda" conform --serving most -b ref-f32 golden/L1/t15-log-prob.npz >/dev/null 2>&1
[ $? = 2 ] || fail "a bad --serving is not a usage error"

# 6. Candidates get the serving checks through prompt files (SPEC.md §7.7): results of every
#    prompt written by a correct backend pass; a mutant's fail (or, for the causality prompt of
#    a candidate, which cannot be repeated, warn) on the right prompt; an absent result is not
#    run, not a Fail.
mkdir "$tmp/in" && cp golden/L1/t64-softplus-h0.npz golden/L1/varlen-ragged-h0.npz "$tmp/in/" || exit 2
"$kda" conform --export-prompts "$tmp/p" "$tmp/in" > "$tmp/e.txt" || fail "--export-prompts"
for s in resume-41 decode spec-41 causal-qv causal-gkb; do
  [ -f "$tmp/p/t64-softplus-h0.$s.npz" ] || fail "no serving prompt t64-softplus-h0.$s"
done
results() { # backend spec, result directory
  mkdir -p "$2" && for f in "$tmp"/p/*.npz; do
    "$kda" ref -b "$1" "$f" -o "$2/$(basename "$f")" >/dev/null || fail "kda ref -b $1 $f"
  done
}
results ref-f32 "$tmp/r"
"$kda" conform --candidate "$tmp/r" "$tmp/p" > "$tmp/c.txt" 2>&1 ||
  fail "ref-f32's results of the serving prompts: $(grep -v '^PASS' "$tmp/c.txt" | head -1)"
[ "$(grep -c '^PASS    candidate' "$tmp/c.txt")" = 12 ] || fail "not every prompt was scored: $(tail -2 "$tmp/c.txt")"
rm "$tmp/r/varlen-ragged-h0.decode.npz"
"$kda" conform --candidate "$tmp/r" "$tmp/p" > "$tmp/c.txt" 2>&1 || fail "an absent prompt result failed the run"
grep -q '^note: serving prompts .*: 1 without a result file' "$tmp/c.txt" || fail "an absent prompt result is not reported"
for row in "spec_state_last:FAIL    candidate    t64-softplus-h0.spec-41 .*hc error" \
           "decode_transposed:FAIL    candidate    varlen-ragged-h0.decode .*ht error" \
           "future_gate_anchor:WARN    candidate    t64-softplus-h0.causal-gkb .*causality: outputs before token 41 differ in bits"; do
  m=${row%%:*} want=${row#*:}
  results "$plugins/kda_plugin_mutants.so:mutant=$m" "$tmp/r-$m"
  "$kda" conform --max-lines 0 --candidate "$tmp/r-$m" "$tmp/p" > "$tmp/c.txt" 2>&1
  grep -q "^$want" "$tmp/c.txt" || fail "candidate $m: no '$want' line: $(grep -v '^PASS' "$tmp/c.txt" | head -1)"
done
echo "conform_l1: candidates: serving prompts exported and scored; mutants caught; absent results not run"

#!/bin/sh
# ci_semantics.sh: what a CI job gates on (SPEC.md §7.6, §7.9, §12.2), run by make check.
# SPDX-License-Identifier: MIT
#  1. waiver files that would waive too much or say nothing are exit 2, one line naming the
#     file and the waiver; a waiver that waived nothing is a warning, and fails --strict;
#  2. a regression is a QualityWarning (exit 0), a failure with --strict or
#     --fail-on-regression; a baseline of another backend or class is exit 2; a kda-baseline/2
#     map serves several backends; a case absent from the baseline is reported;
#  3. nothing ran (no case files, or every case NotSupported) is exit 5;
#  4. summary.json names the backends, the golden set, the failing cases, the unused waivers
#     and the exit status, with numbers (or null) in numeric fields; JUnit carries the waiver
#     reason and the warning (as <failure> under --strict), and validates against junit.xsd.
# Usage: KDA_BIN=build/kda PLUGIN_DIR=build/conformance/tests sh conformance/tests/ci_semantics.sh
set -u
kda=${KDA_BIN:-build/kda}
plugins=${PLUGIN_DIR:-build/conformance/tests}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-ci.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "ci_semantics: FAIL: $*" >&2; exit 1; }
c15=golden/L1/t15-log-prob.npz
c17=golden/L1/t17-gdn.npz
mutant="-p $plugins/kda_plugin_mutants.so:mutant=transposed_state"

# run EXPECTED_STATUS ARGS...: kda conform with stdout in $tmp/out.txt, stderr in $tmp/err.txt.
run() {
  want=$1
  shift
  "$kda" conform "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"
  got=$?
  [ "$got" = "$want" ] ||
    fail "kda conform $*: exit $got, expected $want: $(tail -2 "$tmp/out.txt") $(cat "$tmp/err.txt")"
}

# 0. The help names the options and statuses.
"$kda" conform --help > "$tmp/help.txt" || fail "kda conform --help"
for w in --strict --fail-on-regression --baseline --waivers "  5  nothing ran" KDA_GOLDEN; do
  grep -q -e "$w" "$tmp/help.txt" || fail "kda conform --help does not mention '$w'"
done

# 1. Waivers.
bad_waiver() { # JSON PHRASE
  printf '%s\n' "$1" > "$tmp/w.json"
  run 2 -q -b ref-f32 --waivers "$tmp/w.json" "$c15"
  [ "$(wc -l < "$tmp/err.txt")" = 1 ] && [ ! -s "$tmp/out.txt" ] ||
    fail "waivers $1: not exactly one line on stderr and nothing on stdout"
  grep -q "$tmp/w.json" "$tmp/err.txt" && grep -q "$2" "$tmp/err.txt" ||
    fail "waivers $1: message does not name the file and '$2': $(cat "$tmp/err.txt")"
}
bad_waiver '{"waivers": [{}]}' 'waiver 0 has no "reason"'
bad_waiver '{"waivers": [{"reason": "x"}]}' 'waiver 0 selects nothing'
bad_waiver '{"waivers": [{"case": "a", "reason": "x"}, {"case": "*", "resaon": "x"}]}' \
  "waiver 1: unknown key 'resaon'"
bad_waiver '{"waivers": [{"case": "*", "reason": ""}]}' "waiver 0: 'reason' must be a non-empty"
bad_waiver '{"waivers": [{"case": 3, "reason": "x"}]}' "waiver 0: 'case' must be a non-empty string"
bad_waiver '{"waiver": []}' "unknown top-level key 'waiver'"
bad_waiver '[{"case": "*", "reason": "x"}]' 'top level is not an object'
echo '{"waivers": [{"case": "t17-gdn", "backend": "mutant", "reason": "known transposition", "link": "https://example.org/7"},
                   {"case": "no-such-case", "reason": "fixed long ago"}]}' > "$tmp/w.json"
run 1 -q -b ref-f32 $mutant --waivers "$tmp/w.json" "$c17" "$c15"
grep -q '^warning: unused waiver 1 case=no-such-case' "$tmp/out.txt" ||
  fail "no warning for the unused waiver: $(cat "$tmp/out.txt")"
run 0 -q -b ref-f32 --waivers "$tmp/w.json" "$c15"
run 1 -q -b ref-f32 --strict --waivers "$tmp/w.json" "$c15"
grep -q '^error: unused waiver' "$tmp/out.txt" || fail "--strict does not name the unused waiver"
echo '{"waivers": [{"case": "t15-log-prob", "backend": "mutant", "reason": "known transposition"}]}' \
  > "$tmp/w1.json"
run 0 -q $mutant --waivers "$tmp/w1.json" "$c15"
run 1 -q --strict $mutant --waivers "$tmp/w1.json" "$c15"
echo "ci_semantics: waivers validated; unused waivers reported; --strict fails on Waived and unused"

# 1b. Labels (SPEC.md §7.6): a backend opened with parameters is NAME:PARAMS in every report;
# a waiver names the label or the bare name; one label twice is a usage error.
run 0 -q -b simd -b simd:isa=scalar --jsonl "$tmp/lab.jsonl" --record-baseline "$tmp/lab.json" "$c17"
grep -q '"backend":"simd",' "$tmp/lab.jsonl" && grep -q '"backend":"simd:isa=scalar",' "$tmp/lab.jsonl" ||
  fail "results.jsonl does not label the two simd instances apart: $(cut -c1-60 "$tmp/lab.jsonl")"
grep -q '"simd:isa=scalar"' "$tmp/lab.json" || fail "the baseline is not keyed by the label"
run 0 -q -b simd -b simd:isa=scalar --strict --baseline "$tmp/lab.json" "$c17"
grep -q 'no entry in the baseline' "$tmp/out.txt" && fail "a labelled baseline entry was not found"
run 2 -b simd -b simd "$c17"
grep -q "backend 'simd' given twice" "$tmp/err.txt" || fail "one label twice: $(cat "$tmp/err.txt")"
echo '{"waivers": [{"backend": "mutant:mutant=none", "reason": "another instance"}]}' > "$tmp/w2.json"
run 1 -q $mutant --waivers "$tmp/w2.json" "$c17"
echo '{"waivers": [{"backend": "mutant:mutant=transposed_state", "reason": "this instance"}]}' \
  > "$tmp/w2.json"
run 0 $mutant --waivers "$tmp/w2.json" "$c17"
grep -q '^WAIVED  mutant:mutant=transposed_state t17-gdn' "$tmp/out.txt" ||
  fail "the labelled waiver did not apply: $(cut -c1-80 "$tmp/out.txt")"
echo "ci_semantics: labels name parameters; waivers and baselines follow them"

# 2. Baselines.
run 0 -q -b ref-f32 --record-baseline "$tmp/base.json" "$c15"
sed -E 's/("(o|ht)": *)[0-9.eE+-]+/\10.5/g' "$tmp/base.json" > "$tmp/small.json"
run 0 -b ref-f32 --baseline "$tmp/small.json" "$c15"
grep -q '^WARN .*regression' "$tmp/out.txt" || fail "no regression warning"
run 1 -b ref-f32 --strict --baseline "$tmp/small.json" "$c15"
run 1 -b ref-f32 --fail-on-regression --baseline "$tmp/small.json" "$c15"
grep -q '^FAIL .*regression' "$tmp/out.txt" || fail "--fail-on-regression: no FAIL line"
run 2 -b ref-f64 --baseline "$tmp/base.json" "$c15"
grep -q "baseline recorded for backend 'ref-f32', not 'ref-f64'" "$tmp/err.txt" ||
  fail "another backend's baseline: $(cat "$tmp/err.txt")"
run 2 -b ref-f32 --class bf16 --baseline "$tmp/base.json" "$c15"
grep -q "in class fp32, this run scores it in bf16" "$tmp/err.txt" ||
  fail "another class's baseline: $(cat "$tmp/err.txt")"
run 2 -b ref-f32 --fail-on-regression "$c15"
sed 's/"o": *[0-9.eE+-]*/"o": "3"/' "$tmp/base.json" > "$tmp/str.json"
run 2 -b ref-f32 --baseline "$tmp/str.json" "$c15"
grep -q "is not a number" "$tmp/err.txt" || fail "a string in a baseline: $(cat "$tmp/err.txt")"
run 0 -q -b ref-f32 -b ref-f64 --record-baseline "$tmp/two.json" "$c15"
grep -q '"schema": "kda-baseline/2"' "$tmp/two.json" || fail "two backends: not kda-baseline/2"
run 0 -b ref-f32 -b ref-f64 --strict --baseline "$tmp/two.json" "$c15" "$c17"
[ "$(grep -c 'not in the baseline' "$tmp/out.txt")" = 2 ] ||
  fail "the case absent from the baseline is not reported for both backends: $(cat "$tmp/out.txt")"
grep -q "^note: 2 reports have no entry in the baseline" "$tmp/out.txt" ||
  fail "no note counting the cases absent from the baseline"
echo "ci_semantics: baselines bound to backend and class; regressions gate with --strict and --fail-on-regression"

# 3. Nothing ran.
mkdir "$tmp/empty"
run 5 -b ref-f32 -o "$tmp/r0" "$tmp/empty"
grep -q '^nothing ran' "$tmp/out.txt" || fail "exit 5 without saying why"
run 5 -p "$plugins/kda_plugin_unsupported.so" "$c15" "$c17"
run 1 -b ref-f32 $mutant -p "$plugins/kda_plugin_unsupported.so" "$c15"
run 5 -b ref-f32 -k 'nomatch*' "$c15" "$c17"
grep -q '^note: no case matches the -k patterns' "$tmp/out.txt" || fail "-k matching nothing: no note"
echo "ci_semantics: nothing ran (no case files, every case NotSupported, -k matching nothing): exit 5"

# 4. summary.json and JUnit of a run with a Fail, a waiver, a warning and an unused waiver.
echo '{"waivers": [{"case": "t17-gdn", "backend": "mutant", "reason": "known & <transposed>", "link": "https://example.org/7"},
                   {"flag": "no-such-flag", "reason": "stale"}]}' > "$tmp/w.json"
sed -E 's/("(o|ht)": *)[0-9.eE+-]+/\10.5/g' "$tmp/two.json" > "$tmp/small2.json"
run 1 -b ref-f32 $mutant --strict --waivers "$tmp/w.json" --baseline "$tmp/small2.json" -o "$tmp/r" \
  "$c17" "$c15"
grep -q "^note: .*no baseline for backend 'mutant:mutant=transposed_state'" "$tmp/out.txt" ||
  fail "a kda-baseline/2 map without the backend is not noted"
command -v xmllint >/dev/null 2>&1 || fail "xmllint is missing (Debian package libxml2-utils)"
xmllint --noout --schema conformance/tests/junit.xsd "$tmp/r/junit.xml" 2>"$tmp/xmllint.txt" ||
  fail "JUnit report does not validate: $(head -3 "$tmp/xmllint.txt")"
# --strict: Waived and QualityWarning fail the run, so JUnit shows them as <failure> (and
# counts them), not <skipped>: CI reporters agree with the exit status.
grep -q '<failure message="strict: waived: known &amp; &lt;transposed&gt;" type="Waived">' \
  "$tmp/r/junit.xml" || fail "JUnit --strict: the waived case is not a <failure> with its reason"
grep -q '<failure message="strict: regression.*type="QualityWarning">' "$tmp/r/junit.xml" ||
  fail "JUnit --strict: the QualityWarning is not a <failure>"
grep -q '<skipped' "$tmp/r/junit.xml" && fail "JUnit --strict: a case is still <skipped>"
grep -q '<testsuite name="mutant:mutant=transposed_state" tests="2" failures="2" errors="0" skipped="0"' \
  "$tmp/r/junit.xml" || fail "JUnit --strict: the mutant's suite does not count 2 failures"
grep -q '<property name="waiver_link" value="https://example.org/7"/>' "$tmp/r/junit.xml" ||
  fail "JUnit: no waiver link property"
grep -q '<property name="warning" value="regression' "$tmp/r/junit.xml" &&
  grep -q '<system-out>QualityWarning: regression' "$tmp/r/junit.xml" ||
  fail "JUnit: the warning is not in a property and system-out"
grep -q '"reason":"known & <transposed>","link":"https://example.org/7"' "$tmp/r/results.jsonl" ||
  fail "JSONL: no waiver reason and link"
if command -v "${PYTHON:-python3}" >/dev/null 2>&1; then
  "${PYTHON:-python3}" - "$tmp/r/summary.json" "$tmp/r/results.jsonl" <<'PY' || fail "summary.json: see above"
import json, sys
s = json.load(open(sys.argv[1]))
def bad(msg): print("ci_semantics: summary.json:", msg, file=sys.stderr); sys.exit(1)
if s["schema"] != "kda-conform-summary/2" or not isinstance(s["kda_version"], str): bad("schema")
if s["exit_status"] != 1 or s["strict"] is not True: bad("exit status %r" % s["exit_status"])
names = sorted(b["name"] for b in s["backends"])
if names != ["mutant:mutant=transposed_state", "ref-f32"] or any(b["class"] != "fp32" for b in s["backends"]): bad("backends")
if not [b for b in s["backends"] if b["plugin"] and b["params"] == "mutant=transposed_state"]: bad("plugin")
g = s["case_set"]["golden"]
if g["dir"] != "golden/L1" or len(g["sha256sums"]) != 64 or s["case_set"]["files"] != 2: bad("case set")
fails = {(f["case"], f["backend"], f["verdict"]) for f in s["failing"]}
mt = "mutant:mutant=transposed_state"  # the label (SPEC.md §7.6)
want = {("t15-log-prob", mt, "Fail"), ("t17-gdn", mt, "Waived"),
        ("t15-log-prob", "ref-f32", "QualityWarning")}
if fails != want: bad("failing %r" % sorted(fails))
if [u["index"] for u in s["unused_waivers"]] != [1]: bad("unused waivers")
if s["by_verdict"]["Fail"] != 1 or s["cases"] != 4: bad("counts")
numeric = {"cases", "passed", "failed", "skipped", "exit_status", "files", "index", "compared",
           "absent", "count", "worst", "allowed", "max_abs", "rms_ratio", "nan", "inf", "over_cap",
           "seconds", "first_fail_token", "size", "first", "last", "worst_start", "alpha",
           "alpha_fit", "P"}
def walk(x, key=None):
    if isinstance(x, dict):
        for k, v in x.items(): walk(v, k)
    elif isinstance(x, list):
        for v in x: walk(v, key)
    elif isinstance(x, str) and (key in numeric or x in ("nan", "inf", "-inf")):
        bad("string %r in numeric field %r" % (x, key))
walk(s)
for line in open(sys.argv[2]): walk(json.loads(line))
PY
else
  fail "python3 is missing: summary.json cannot be checked"
fi
echo "ci_semantics: summary.json names backends, golden set, failing cases, unused waivers, exit status; JUnit validates"

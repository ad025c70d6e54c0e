#!/bin/sh
# conform_hostile.sh: reports stay whole and well-formed whatever the strings that enter them
# (SPEC.md §7.9), run by make check-conform.  A plugin puts invalid UTF-8, escape sequences,
# U+FFFE and 4 KiB of multi-byte output into its open error, supports reason, last_error and
# output; a plugin path that is not UTF-8; a waiver whose reason holds U+FFFE and an escape and
# whose glob is cut mid-character when described.  Every run keeps one results.jsonl line per
# report, summary.json lists every failure, junit.xml parses, and no escape byte reaches the
# terminal or a report.  A report that cannot be written is exit 2, and then none is written.
# Usage: KDA_BIN=build/kda PLUGIN_DIR=build/conformance/tests sh conformance/tests/conform_hostile.sh
set -u
kda=${KDA_BIN:-build/kda}
plugins=${PLUGIN_DIR:-build/conformance/tests}
py=${PYTHON:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-hostile.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "conform_hostile: FAIL: $*" >&2; exit 1; }
case_file=golden/L1/t15-log-prob.npz

# check DIR WANT_LINES WANT_FAILING: the three reports of DIR are whole and well-formed.
check() {
  "$py" - "$1" "$2" "$3" "$tmp/out.txt" <<'EOF' || fail "reports in $1 (see above)"
import json, sys, xml.dom.minidom
d, lines, failing, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def text(p):
    b = open(p, "rb").read()
    assert b"\x1b" not in b and b"\xc2\x9b" not in b, p + ": an escape sequence"
    return b.decode("utf-8")  # raises on invalid UTF-8
rows = [json.loads(l) for l in text(d + "/results.jsonl").splitlines()]
assert len(rows) == lines, "%d lines in results.jsonl, expected %d" % (len(rows), lines)
s = json.loads(text(d + "/summary.json"))
assert len(s["failing"]) == failing, "summary: %s" % s["failing"]
for u in s["unused_waivers"]:
    assert "\ufffe" not in u["reason"] and "\ufffe" not in u["waiver"], u
x = text(d + "/junit.xml")
assert "\ufffe" not in x and "\uffff" not in x, "junit.xml: a noncharacter"
xml.dom.minidom.parseString(x.encode("utf-8"))  # well-formed
text(out)
EOF
}

# run EXPECTED_STATUS ARGS...
run() {
  want=$1
  shift
  "$kda" conform "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"
  got=$?
  [ "$got" = "$want" ] || fail "kda conform $*: exit $got, expected $want: $(cat "$tmp/err.txt")"
}

for at in open supports forward print; do
  rm -rf "$tmp/o"
  case $at in open|forward) st=1 failing=1 ;; *) st=5 failing=0 ;; esac
  run $st -p "$plugins/kda_plugin_hostile.so:at=$at" --out "$tmp/o" "$case_file"
  check "$tmp/o" 1 $failing
  echo "conform_hostile: at=$at: one whole line, summary and junit.xml well-formed"
done

# A plugin path that is not UTF-8, and a waiver with U+FFFE, an escape, a glob cut mid-character.
bad=$(printf 'ev\377il.so')
cp "$plugins/kda_plugin_hostile.so" "$tmp/$bad"
glob=$("$py" -c 'print("t15" + "\u00e9" * 60 + "*")')
printf '{"waivers": [{"case": "%s", "reason": "r\\ufffe \\u001b[2J x"},
                     {"case": "t15-log-prob", "reason": "k\\ufffe\\u001b[31m"}]}\n' "$glob" \
  > "$tmp/w.json"
rm -rf "$tmp/o"
run 1 -p "$tmp/$bad:at=forward" --waivers "$tmp/w.json" --strict --out "$tmp/o" "$case_file"
check "$tmp/o" 1 1
grep -q 'unused waiver 0' "$tmp/out.txt" || fail "the unused waiver is not reported"
echo "conform_hostile: non-UTF-8 plugin path, hostile waivers: reports whole, --strict exit 1"

# A report that cannot be written is exit 2, one line, and nothing half-written.
rm -rf "$tmp/o"
KDA_TEST_FAIL_WRITE=summary.json run 2 -p "$plugins/kda_plugin_hostile.so:at=forward" \
  --out "$tmp/o" "$case_file"
[ "$(wc -l < "$tmp/err.txt")" = 1 ] || fail "a failed write: not one line: $(cat "$tmp/err.txt")"
grep -q 'No space left on device' "$tmp/err.txt" || fail "a failed write: $(cat "$tmp/err.txt")"
for f in results.jsonl summary.json junit.xml; do
  [ ! -e "$tmp/o/$f" ] || fail "a failed write of summary.json left $f (reports all or none)"
done
echo "conform_hostile: a report that cannot be written: exit 2, one line, no report written"

#!/bin/sh
# browser_check.sh: the study pages in a real browser (make check-browser).
# SPDX-License-Identifier: MIT
#
# Writes kda explore pages and a kda conform --html report, loads each in headless Chromium
# and checks that it renders: the page's own error list (#kda-errors, filled by window.onerror)
# is empty, body[data-ready] is set, nothing was logged as an uncaught error on the console.
# The explorer is then driven by tools/tests/browser_drive.py (inputs set, buttons and keys
# pressed, what is shown read back); the report's matrix and summary must count the verdicts
# of its results.jsonl.  Keeps screenshots in OUT (build/browser/*.png) as artefacts.
#
# Usage: browser_check.sh OUT   with KDA_BIN the kda to run.  Chromium is $CHROMIUM, else
# chromium or chromium-browser on PATH; without one the check is skipped with a message
# (KDA_REQUIRE_BROWSER=1 makes that a failure).
set -eu
OUT=${1:?usage: browser_check.sh OUT}
KDA=${KDA_BIN:-./build/kda}
BROWSER=${CHROMIUM:-}
if [ -z "$BROWSER" ]; then
  for b in chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then BROWSER=$(command -v "$b"); break; fi
  done
fi
if [ -z "$BROWSER" ]; then
  if [ "${KDA_REQUIRE_BROWSER:-0}" = 1 ]; then
    echo "browser check: FAIL: no chromium (KDA_REQUIRE_BROWSER=1)" >&2
    exit 1
  fi
  echo "browser check: skipped: no chromium on PATH (Debian: apt-get install chromium)"
  exit 0
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
fail=0
bad() { echo "browser check: FAIL: $*" >&2; fail=1; }

# One headless run; --virtual-time-budget lets the page's script finish before the dump.
# A private profile per run keeps runs independent.
chrome() {
  prof=$(mktemp -d "$OUT/profile.XXXXXX")
  timeout 120 "$BROWSER" --headless=new --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$prof" --window-size=1280,800 --virtual-time-budget=3000 \
    --enable-logging=stderr --v=0 "$@" 2>"$OUT/console.log" || true
  rm -rf "$prof"
}

# dump URL NAME: the DOM after scripts into OUT/NAME.dom; checks the rendering protocol.
dump() {
  chrome --dump-dom "$1" >"$OUT/$2.dom"
  grep -q 'data-ready="1"' "$OUT/$2.dom" || bad "$2: the page's script did not finish (no data-ready)"
  grep -q '<ul id="kda-errors"></ul>' "$OUT/$2.dom" || bad "$2: script errors: $(grep -o '<ul id="kda-errors">.*</ul>' "$OUT/$2.dom" | head -c 400)"
  if grep -i 'CONSOLE' "$OUT/console.log" | grep -qi 'uncaught\|error'; then
    bad "$2: console: $(grep -i CONSOLE "$OUT/console.log" | head -3)"
  fi
}

# The explorer: the notebook alone, and a player of the README's example case (K = 16: the
# decay bars' labels must not overlap), with the page's dump checked as above; then driven as
# a reader would (tools/tests/browser_drive.py): the page's port of the step against kda
# trace's float64 bits on every family, each interactive of the notebook, the player's
# sub-steps and keys.  Screenshots of each in OUT.
"$KDA" gen "seed=7 T=64 H=2 HV=4 K=16 V=8 gate=softplus beta=logit l2=fla prec=bf16" -o "$OUT/t64.npz"
"$KDA" ref --backend ref-f32 "$OUT/t64.npz" -o "$OUT/result-f32.npz"
"$KDA" explore -o "$OUT/notebook.html"
"$KDA" explore "$OUT/t64.npz" --result "$OUT/result-f32.npz" -o "$OUT/explorer.html"
dump "file://$OUT/notebook.html" notebook
URL="file://$OUT/explorer.html"
dump "$URL#step=9" step9
grep -q 'data-step="9"' "$OUT/step9.dom" || bad "explorer: #step=9 did not select step 9"
grep -q 'token t=2 (position 2), sub-step 2/4 erase' "$OUT/step9.dom" ||
  bad "explorer: #step=9 does not show token 2, sub-step erase"
for c in "$OUT/t64.npz" golden/L1/t17-gdn.npz golden/L0/l0-linear-accumulate.npz \
         golden/L0/l0-delta-overwrite.npz golden/L0/l0-varlen-h0.npz; do
  "$KDA" trace --json --no-certify "$c" >"$OUT/trace-$(basename "$c" .npz).json"
done
python3 tools/tests/browser_drive.py "$BROWSER" "$OUT/notebook.html" "$OUT/explorer.html" "$OUT" \
  "$OUT"/trace-*.json >"$OUT/drive.log" 2>&1 || bad "explorer: $(grep -v '^ok' "$OUT/drive.log" | head -8)"
chrome --screenshot="$OUT/notebook.png" "file://$OUT/notebook.html" >/dev/null
[ -s "$OUT/notebook.png" ] || bad "notebook: no screenshot"

# The conformance report: a long case (windows), a short one (tokens) and the README's T = 64
# example, three backends; the matrix must count what results.jsonl holds, verdict by verdict,
# and every case gets one plot with one error curve per backend.
"$KDA" conform -q -b ref-f64 -b ref-f32 -b simd --no-prefix --html "$OUT/report" \
  --jsonl "$OUT/report.jsonl" golden/L1/t5000-long.npz golden/L1/prod-lowrank-mixed.npz \
  golden/L1/disc-exp2.npz "$OUT/t64.npz" >/dev/null
dump "file://$OUT/report/index.html" report
sed 's/>/>\n/g' "$OUT/report.dom" >"$OUT/report.lines"
for v in Pass Fail QualityWarning NotSupported Waived Crash Timeout; do
  want=$(grep -c "\"verdict\":\"$v\"" "$OUT/report.jsonl" || true)
  got=$(grep -c "<td class=\"[a-z]*\" data-verdict=\"$v\"" "$OUT/report.lines" || true)
  shown=$(grep -o "data-verdict=\"$v\">$v: [0-9]*<" "$OUT/report.dom" | grep -o '[0-9]*' | tail -1)
  [ "$got" = "$want" ] && [ "$shown" = "$want" ] ||
    bad "report: $v: the matrix has $got cells, the summary says $shown, results.jsonl has $want"
done
python3 tools/tests/report_matrix.py "$OUT/report.dom" "$OUT/report.jsonl" >"$OUT/matrix.log" 2>&1 ||
  bad "report: the matrix is not results.jsonl: $(head -3 "$OUT/matrix.log")"
grep -q 'data-verdict="QualityWarning">QualityWarning: 1<' "$OUT/report.dom" ||
  bad "report: the summary does not count ref-f64's warning on prod-lowrank-mixed"
first=$(grep -o '<th scope="row"><a href="#case-0">[^<]*' "$OUT/report.dom" | sed 's/.*>//')
[ "$first" = prod-lowrank-mixed ] || bad "report: the first row is '$first', not the warned case"
[ "$(grep -c '<figure>' "$OUT/report.lines")" = 4 ] || bad "report: want 4 plots (one per case)"
[ "$(grep -o '<polyline class="err"' "$OUT/report.dom" | wc -l)" -ge 12 ] ||
  bad "report: want an error curve per backend in each plot"
sed -n '/id="case-[0-9]*"><h3>gen-/,/<\/section>/p' "$OUT/report.dom" | grep -q '<polyline class="err"' ||
  bad "report: the T = 64 case (the README's --html example) has no error curve"
chrome --screenshot="$OUT/report.png" "file://$OUT/report/index.html" >/dev/null
[ -s "$OUT/report.png" ] || bad "report: no screenshot"

[ "$fail" = 0 ] || exit 1
echo "browser check: explorer and report in $(basename "$BROWSER"): $(grep -c '^ok' "$OUT/drive.log") driven checks of the explorer pass, the report's matrix counts results.jsonl; screenshots in $OUT"

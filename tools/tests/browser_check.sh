#!/bin/sh
# browser_check.sh: the study pages in a real browser (make check-browser).
# SPDX-License-Identifier: MIT
#
# Writes a kda explore page and a kda conform --html report, loads each in headless Chromium
# and checks that it renders: the page's own error list (#kda-errors, filled by window.onerror)
# is empty, body[data-ready] is set, nothing was logged as an uncaught error on the console,
# and, for the explorer, that stepping (explorer.html#step=N) changes the state shown.  Keeps
# screenshots at 1280x800 in OUT (build/browser/*.png) as artefacts.
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

# The explorer on a small case, with a float32 result to compare.
CASE=golden/L1/disc-exp2.npz
"$KDA" ref --backend ref-f32 "$CASE" -o "$OUT/result-f32.npz"
"$KDA" explore "$CASE" --result "$OUT/result-f32.npz" -o "$OUT/explorer.html"
URL="file://$OUT/explorer.html"
dump "$URL#step=0" step0
dump "$URL#step=9" step9
grep -q 'data-step="9"' "$OUT/step9.dom" || bad "explorer: #step=9 did not select step 9"
grep -q 'token t=2 (position 2), sub-step 2/4 erase' "$OUT/step9.dom" ||
  bad "explorer: #step=9 does not show token 2, sub-step erase"
heat() { tr '\n' ' ' <"$1" | grep -o '<div id="heat-delta">.*</div>' | sed 's|</table>.*|</table>|'; }
h0=$(heat "$OUT/step0.dom")
h9=$(heat "$OUT/step9.dom")
[ -n "$h0" ] && [ -n "$h9" ] || bad "explorer: no state heatmap in the page"
[ "$h0" != "$h9" ] || bad "explorer: stepping from step 0 to step 9 did not change the state shown"
chrome --screenshot="$OUT/explorer.png" "$URL#step=11" >/dev/null
[ -s "$OUT/explorer.png" ] || bad "explorer: no screenshot"

# The conformance report with a long case (plots) and a short one (table only).
"$KDA" conform -q -b ref-f64 -b ref-f32 --no-prefix --html "$OUT/report" \
  golden/L1/t5000-long.npz "$CASE" >/dev/null
dump "file://$OUT/report/index.html" report
[ "$(grep -o '<svg' "$OUT/report.dom" | wc -l)" -eq 2 ] || bad "report: want 2 plots (t5000-long x 2 backends)"
grep -q '<table id="verdicts">' "$OUT/report.dom" || bad "report: no verdict table"
chrome --screenshot="$OUT/report.png" "file://$OUT/report/index.html" >/dev/null
[ -s "$OUT/report.png" ] || bad "report: no screenshot"

[ "$fail" = 0 ] || exit 1
echo "browser check: explorer and report render in $(basename "$BROWSER") without errors; stepping changes the state; screenshots $OUT/explorer.png, $OUT/report.png"

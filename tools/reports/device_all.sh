#!/bin/sh
# device_all.sh: the three kernel reports side by side in one run on a GPU (fla, FlashKDA, SGLang).
# SPDX-License-Identifier: MIT
#
# Usage (from the repository root, on a machine with a Hopper GPU, torch and triton):
#   tools/reports/device_all.sh FLA_SRC FLASHKDA_SRC SGLANG_SRC [OUT]
# The three folders are fetched checkouts at the commits named in docs/reports/*.md
# (FLASHKDA_SRC with its extension already built by FlashKDA's own setup.py); nothing is
# fetched or built here.  Each report gets its own work folder under /tmp and its tables under
# OUT (default /tmp/kda-reports); every row is appended to docs/reports/history.md.
# Environment: JOBS_FLA (9), JOBS_FLASHKDA (3), JOBS_SGLANG (3), SETS (L1,prod,prod64k),
# TRITON_CACHE_DIR (/tmp/triton-cache; keep it between runs to skip compiles), ARGS (more
# options for every script, e.g. "-k 't1*'" or "--stand-in" for a CPU rehearsal), HISTORY
# (docs/reports/history.md).
set -eu
[ $# -ge 3 ] || { echo "usage: $0 FLA_SRC FLASHKDA_SRC SGLANG_SRC [OUT]" >&2; exit 2; }
out=${4:-/tmp/kda-reports}
mkdir -p "$out"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} TRITON_CACHE_AUTOTUNING=1
export PYTHONUNBUFFERED=1
sets=${SETS:-L1,prod,prod64k}
hist=${HISTORY:-docs/reports/history.md}
commit() { git -C "$1" rev-parse HEAD 2>/dev/null || echo unknown; }
run() {  # family checkout jobs
  python3 tools/reports/report_$1.py --checkout "$2" --commit "$(commit "$2")" \
    --jobs "$3" --sets "$sets" --work "/tmp/kda-report-$1" --out "$out/$1" \
    --history "$out/$1.history.md" ${ARGS:-} > "$out/$1.log" 2>&1
}
status=0
run sglang "$3" "${JOBS_SGLANG:-3}" & p1=$!
run flashkda "$2" "${JOBS_FLASHKDA:-3}" & p2=$!
run fla "$1" "${JOBS_FLA:-9}" || status=1
wait $p1 || status=1
wait $p2 || status=1
for f in fla flashkda sglang; do
  [ -f "$out/$f.history.md" ] && grep '^| ' "$out/$f.history.md" | grep -v '^| kernel \|^|---' \
    > "$out/$f.rows" || true
done
python3 - "$hist" "$out"/*.rows <<'PY'
import sys
sys.path.insert(0, "tools/reports")
import reportlib
rows = [l.rstrip("\n") for f in sys.argv[2:] for l in open(f, encoding="utf-8") if l.strip()]
reportlib.append_history(sys.argv[1], rows)
PY
tail -n 20 "$out"/*.log
exit $status

#!/bin/sh
# zoo_fpr.sh: the false-failure rate of the fp32 verdict (SPEC.md §7.3), measured: N honest
# float32 kernels that differ only in a random order of every reduction (the zoo's order=perm,
# seeds S0 .. S0+N-1) are scored on the cases where honest kernels come nearest the allowance
# (drift-lowrank and its serving prompts causal-gkb, resume-65, causal-qv; prod-lowrank-mixed),
# each prompt as the candidate path scores it (an ordinary case file, its truth from ref-f64).
# Prints, per case, how many seeds failed and the worst error over allowance; exit 0 always
# when the run itself worked (the rate is a measurement, not an assertion), 2 on a usage error.
# SPDX-License-Identifier: MIT
# Usage: KDA_BIN=build/kda ZOO=build/conformance/tests/zoo sh conformance/tests/zoo/zoo_fpr.sh \
#          [-n N] [-s S0] [--strict] [--fma] [CASE_OR_PROMPT_ID...]
set -u
kda=${KDA_BIN:-build/kda}
ZOO=${ZOO:-build/conformance/tests/zoo}
golden=${KDA_GOLDEN:-golden}/L1
n=20 s0=1000 strict="" so=kda_plugin_zoo.so
while [ $# -gt 0 ]; do
  case $1 in
    -n) n=$2; shift 2 ;;
    -s) s0=$2; shift 2 ;;
    --strict) strict=--strict; shift ;;
    --fma) so=kda_plugin_zoo_fma.so; shift ;;
    -*) echo "zoo_fpr: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
ids=${*:-drift-lowrank drift-lowrank.causal-gkb drift-lowrank.resume-65 drift-lowrank.causal-qv prod-lowrank-mixed prod-lowrank-mixed.causal-gkb}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-zoo-fpr.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
files=""
for id in $ids; do
  base=${id%%.*}
  if [ "$base" = "$id" ]; then files="$files $golden/$id.npz"; continue; fi
  [ -d "$tmp/p-$base" ] || "$kda" conform --export-prompts "$tmp/p-$base" "$golden/$base.npz" \
    >/dev/null 2>&1 || { echo "zoo_fpr: cannot export the prompts of $base" >&2; exit 2; }
  [ -f "$tmp/p-$base/$id.npz" ] || { echo "zoo_fpr: no prompt $id" >&2; exit 2; }
  files="$files $tmp/p-$base/$id.npz"
done
start=$(date +%s)
: > "$tmp/all.jsonl"
i=0
while [ $i -lt "$n" ]; do  # at most 32 targets a run (kda conform takes 64)
  targets="" j=0
  while [ $j -lt 32 ] && [ $i -lt "$n" ]; do
    targets="$targets -p $ZOO/$so:order=perm,seed=$((s0 + i))"
    i=$((i + 1)) j=$((j + 1))
  done
  rm -rf "$tmp/r"
  "$kda" conform -q $strict --serving off --max-lines 0 $targets -o "$tmp/r" $files >/dev/null 2>&1
  rc=$?
  [ $rc -le 1 ] || { echo "zoo_fpr: kda conform exited $rc" >&2; exit 2; }
  cat "$tmp/r/results.jsonl" >> "$tmp/all.jsonl"
done
secs=$(( $(date +%s) - start ))
python3 - "$tmp/all.jsonl" "$n" "$secs" "$strict" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n, secs, strict = int(sys.argv[2]), sys.argv[3], sys.argv[4] or "default"
per = collections.OrderedDict()
for r in rows:
    c = per.setdefault(r["case"], {"fail": 0, "n": 0, "ratio": 0.0, "seeds": []})
    c["n"] += 1
    worst = 0.0
    for q in ("o", "ht", "hc"):
        m = r.get(q)
        if m and m.get("worst") is not None and m.get("allowed"):
            worst = max(worst, m["worst"] / m["allowed"])
    c["ratio"] = max(c["ratio"], worst)
    if r["verdict"] not in ("Pass", "QualityWarning"):
        c["fail"] += 1
        c["seeds"].append(r["backend"].rsplit("=", 1)[-1])
tot = sum(c["fail"] for c in per.values())
print("zoo_fpr: %d random-order kernels x %d cases (%s verdict), %s s" % (n, len(per), strict, secs))
for case, c in per.items():
    print("  %-36s failed %3d of %3d (%.1f%%)  worst error/allowance %.2f%s" % (
        case, c["fail"], c["n"], 100.0 * c["fail"] / max(c["n"], 1), c["ratio"],
        "  seeds " + ",".join(c["seeds"][:8]) if c["seeds"] else ""))
print("zoo_fpr: %d of %d reports failed (%.1f%%)" % (tot, len(rows), 100.0 * tot / max(len(rows), 1)))
PY

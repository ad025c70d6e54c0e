#!/bin/sh
# conform_grad.sh: the backward pass scored end to end (SPEC.md §13.7), run by make check
# (check-grad).  SPDX-License-Identifier: MIT
#  1. gradient cases (kda_fixture grad: generated inputs plus the seeds do, dht, dhc) covering
#     the gates, betas, L2 conventions, GVA with both head maps, both layouts, varlen with an
#     empty sequence, h0, checkpoints, every family and a 1024-token low-rank case;
#  2. ref-f64, ref-f32 and the test plugin's honest float32 backwards (five orders, chunked
#     gates) pass every gradient report; the largest error over its cap is printed (margin);
#  3. every gradient mutant fails at least one gradient report: the kill table (mutant, the
#     case with the largest kill, worst error / allowed);
#  4. a backend without the backward pass (the ABI 1 plugin) is NotSupported on gradients;
#     a write past a gradient is a Crash, a changed seed a Fail; JSON Lines carry the gradients;
#     the HTML report plots the gradients of the long case along the sequence;
#  5. the certified gradient set golden/grad/L1: the honest backwards pass it, every mutant
#     fails one of its gradient reports.
# Usage: KDA_BIN=build/kda PLUGIN_DIR=build/conformance/tests sh conformance/tests/conform_grad.sh
set -u
kda=${KDA_BIN:-build/kda}
plugins=${PLUGIN_DIR:-build/conformance/tests}
grad="$plugins/kda_plugin_grad.so"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-grad.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "conform_grad: FAIL: $*" >&2; exit 1; }
mkdir "$tmp/cases"

# 1. The cases.
while read -r id desc; do
  "$plugins/kda_fixture" grad "$desc id=$id" "$tmp/cases/$id.npz" || fail "fixture $id"
done <<CASES
g-soft-gva seed=11 T=90 H=1 HV=2 K=8 V=8 gate=softplus beta=logit l2=fla h0=1 checkpoints=2,60 prec=f32
g-lb-vk seed=12 seqlens=40,0,57 H=2 HV=4 K=8 V=8 head_map=mod gate=lower_bound beta=logit_neg l2=ggml h0=1 layout=vk checkpoints=1,70 prec=f32
g-gdn seed=14 T=80 H=1 HV=2 K=8 V=8 family=gdn gate=softplus beta=logit l2=fla h0=1 prec=f32
g-log seed=13 T=70 H=2 K=8 V=8 gate=log beta=prob l2=off h0=1 prec=f32
g-linear seed=16 T=60 H=1 K=8 V=8 family=linear beta=prob l2=fla h0=1 prec=f32
g-lowrank-long seed=4 T=1024 H=1 HV=2 K=8 V=12 regime=lowrank family=deltanet beta=logit l2=fla h0=1 prec=f32
CASES

# The largest worst / allowed over the gradient reports of a JSON Lines file, and its case.
worst() {
  python3 - "$1" <<'PY'
import json, sys
best = (0.0, "-")
for line in open(sys.argv[1]):
    r = json.loads(line)
    if not r["case"].endswith(".backward") or "gradients" not in r:
        continue
    for name, m in r["gradients"].items():
        if m and m["worst"] is not None and m["worst"] / m["allowed"] > best[0]:
            best = (m["worst"] / m["allowed"], r["case"][:-9] + " " + name)
        elif m and m["worst"] is None:
            best = (float("inf"), r["case"][:-9] + " " + name)
print("%.4g %s" % best)
PY
}

# 2. Honest backwards pass every gradient report.
"$kda" conform -q --no-prefix --max-lines 3 -b ref-f64 -b ref-f32 -p "$grad" \
  -p "$grad:order=rev" -p "$grad:order=pair" -p "$grad:order=f64" -p "$grad:order=fma" \
  -p "$grad:gates=chunk" -p "$grad:gates=chunk order=fma" --jsonl "$tmp/honest.jsonl" \
  --html "$tmp/html" \
  "$tmp/cases" >"$tmp/honest.txt" 2>&1 || { cat "$tmp/honest.txt"; fail "an honest backward fails"; }
n=$(grep -c '\.backward"' "$tmp/honest.jsonl")
[ "$n" = 54 ] || fail "expected 54 gradient reports (9 backends x 6 cases), got $n"
echo "conform_grad: 9 honest backwards pass all 6 gradient cases; largest error / allowed: $(worst "$tmp/honest.jsonl")"

# 3. Every mutant fails a gradient report.
for m in adjoint_no_decay dk_no_erase dg_no_softplus_chain dA_log_no_exp dbeta_wrong_activation \
         l2_grad_dropped dh0_dropped gva_no_sum adjoint_ulp_bias; do
  "$kda" conform -q --no-prefix --max-lines 0 -p "$grad:mutant=$m" --jsonl "$tmp/m.jsonl" \
    "$tmp/cases" >/dev/null 2>&1
  rc=$?
  [ $rc = 1 ] || fail "mutant $m: exit $rc (expected 1: a failing report)"
  grep -q '"case":"[^"]*\.backward","backend":"[^"]*","verdict":"Fail"' "$tmp/m.jsonl" ||
    fail "mutant $m fails no gradient report"
  echo "conform_grad: mutant $m killed: $(worst "$tmp/m.jsonl") (error / allowed, case, gradient)"
done

# 4. No backward pass, hostile backwards, the JSON Lines record.
"$kda" conform -q --no-prefix -p "$plugins/kda_plugin_v1.so" --jsonl "$tmp/v1.jsonl" \
  "$tmp/cases/g-log.npz" >/dev/null 2>&1
grep -q '"case":"g-log.backward","backend":"abi-v1","verdict":"NotSupported"' "$tmp/v1.jsonl" ||
  fail "a backend without the backward pass is not NotSupported on gradients"
"$kda" conform -q --no-prefix -p "$grad:mutant=overrun" "$tmp/cases/g-log.npz" >"$tmp/o.txt" 2>&1
grep -q "^CRASH .*g-log.backward.*backward wrote past the end of output 'dq'" "$tmp/o.txt" ||
  { cat "$tmp/o.txt"; fail "a write past dq is not a Crash naming it"; }
"$kda" conform -q --no-prefix -p "$grad:mutant=writes_seed" "$tmp/cases/g-log.npz" >"$tmp/o.txt" 2>&1
grep -q "^FAIL .*g-log.backward.*backward modified input 'do'" "$tmp/o.txt" ||
  { cat "$tmp/o.txt"; fail "a changed seed is not a Fail naming it"; }
"$kda" conform -q --no-prefix -p "$grad:offer=noh0" -p "$grad:offer=none" "$tmp/cases/g-log.npz" \
  >"$tmp/o.txt" 2>&1
grep -q "^WARN .*grad:offer=noh0 *g-log.backward.*-- not provided: dh0" "$tmp/o.txt" ||
  { cat "$tmp/o.txt"; fail "a gradient not offered is not a QualityWarning naming it"; }
grep -q "^SKIP .*grad:offer=none *g-log.backward.*offers none of the problem's gradients" \
  "$tmp/o.txt" || { cat "$tmp/o.txt"; fail "an offer of nothing is not NotSupported"; }
python3 - "$tmp/honest.jsonl" <<'PY' || fail "gradient records in results.jsonl"
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
g = [r for r in rs if r["case"] == "g-soft-gva.backward" and r["backend"] == "ref-f32"][0]
want = {"dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"}
assert set(g["gradients"]) == want, g["gradients"].keys()
assert g["not_provided"] == [] and g["class"] == "fp32" and g["verdict"] == "Pass"
lin = [r for r in rs if r["case"] == "g-linear.backward" and r["backend"] == "ref-f32"][0]
assert set(lin["gradients"]) == {"dq", "dk", "dv", "dbeta", "dh0"}, lin["gradients"].keys()
long = [r for r in rs if r["case"] == "g-lowrank-long.backward" and r["backend"] == "grad"][0]
s = long["grad_window_series"]
assert s["size"] == 64 and len(s["dq"]["worst"]) == 16 and len(s["dv"]["allowed"]) == 16
PY
n=$(grep -c 'aria-label="gradient error per window of' "$tmp/html/index.html")
[ "$n" = 9 ] || fail "the HTML report has $n gradient plots, expected 9 (g-lowrank-long)"
# 5. The certified gradient set (golden/grad/L1, SPEC.md §13.9): every honest backward passes
#    every report, forward and gradient, and each mutant fails at least one gradient report.
set1=golden/grad/L1
[ -d "$set1" ] || fail "$set1 is missing"
"$kda" conform -q --no-prefix --max-lines 3 -b ref-f64 -b ref-f32 -p "$grad" -p "$grad:order=rev" \
  -p "$grad:order=pair" -p "$grad:order=f64" -p "$grad:order=fma" -p "$grad:gates=chunk" \
  -p "$grad:gates=chunk order=fma" --jsonl "$tmp/l1.jsonl" "$set1" >"$tmp/l1.txt" 2>&1 ||
  { cat "$tmp/l1.txt"; fail "an honest backward fails on $set1"; }
echo "conform_grad: 9 honest backwards pass $set1 ($(grep -c '\.backward"' "$tmp/l1.jsonl") gradient reports); largest error / allowed: $(worst "$tmp/l1.jsonl")"
for m in adjoint_no_decay dk_no_erase dg_no_softplus_chain dA_log_no_exp dbeta_wrong_activation \
         l2_grad_dropped dh0_dropped gva_no_sum adjoint_ulp_bias; do
  "$kda" conform -q --no-prefix --max-lines 0 -p "$grad:mutant=$m" --jsonl "$tmp/m.jsonl" \
    "$set1" >/dev/null 2>&1
  grep -q '"case":"[^"]*\.backward","backend":"[^"]*","verdict":"Fail"' "$tmp/m.jsonl" ||
    fail "mutant $m fails no gradient report of $set1"
  echo "conform_grad: $set1: mutant $m killed: $(worst "$tmp/m.jsonl")"
done

echo "conform_grad: NotSupported without the slot or offering nothing; not provided named; Crash past dq; Fail on a changed seed; JSON Lines"

#!/bin/sh
# zoo_correct.sh: every member of the honest zoo is a correct KDA (SPEC.md §3-§5): on small
# well-conditioned cases (every family, gate, beta and L2 mode, both head maps and layouts,
# varlen with an empty sequence, h0, checkpoints) each scores within a quarter of its class's
# caps against the float64 truth, with every serving check on; and the zoo's deliberate defect
# (bug=decay0: key channel 0 never decays) fails.  A wrong member would prove nothing about
# the tolerance.  Run by make check (about ten seconds).
# SPDX-License-Identifier: MIT
# Usage: KDA_BIN=build/kda ZOO=build/conformance/tests/zoo sh conformance/tests/zoo/zoo_correct.sh
set -u
kda=${KDA_BIN:-build/kda}
ZOO=${ZOO:-build/conformance/tests/zoo}
here=$(dirname "$0")
fail() { echo "zoo_correct: FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-zoo.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$here/members.sh"
mkdir -p "$tmp/f32" "$tmp/slow" "$tmp/bf16"
gen() { "$kda" gen "$@" >/dev/null 2>"$tmp/gen.err" || fail "kda gen $*: $(cat "$tmp/gen.err")"; }
gen seed=21 seqlens=40,0,57 H=2 HV=4 K=16 V=16 gate=softplus beta=logit l2=fla prec=f32 h0=1 \
  checkpoints=10,45,90 id=kda-varlen -o "$tmp/f32/kda-varlen.npz"
gen seed=22 T=70 H=2 HV=4 K=16 V=8 family=gdn gate=lower_bound lb=-1 beta=logit_neg l2=ggml \
  head_map=mod layout=vk h0=1 checkpoints=3,66 prec=f32 id=gdn-vk -o "$tmp/f32/gdn-vk.npz"
gen seed=23 T=50 H=1 HV=2 K=8 V=12 family=deltanet beta=prob l2=fla prec=f32 id=deltanet \
  -o "$tmp/slow/deltanet.npz"
gen seed=24 T=33 H=1 HV=1 K=12 V=8 family=linear beta=prob l2=off prec=f32 h0=1 id=linear \
  -o "$tmp/slow/linear.npz"
gen seed=26 T=150 H=2 HV=2 K=16 V=16 regime=decay-small gate=log beta=logit l2=fla prec=f32 \
  h0=1 checkpoints=20,70,140 id=kda-slow -o "$tmp/slow/kda-slow.npz"
gen seed=25 T=80 H=1 HV=2 K=16 V=16 gate=log beta=logit l2=fla prec=f32 id=kda-log \
  -o "$tmp/f32/kda-log.npz"
gen seed=21 seqlens=40,0,57 H=2 HV=4 K=16 V=16 gate=softplus beta=logit l2=fla prec=bf16 h0=1 \
  checkpoints=10,45,90 id=kda-bf16 -o "$tmp/bf16/kda-bf16.npz"

# Every member, its worst error of each quantity at most cap/4 (fp32: 16 units; bf16: 2).
check() { # $1 report dir, $2 members file, $3 case dir, $4 limit
  "$kda" conform -q $(cat "$2") -o "$1" "$3" >"$1.txt" 2>&1
  rc=$?
  [ $rc = 0 ] || fail "members fail on $3 (exit $rc): $(grep -v '^PASS' "$1.txt" | head -3)"
  python3 - "$1/results.jsonl" "$4" <<'PY' || exit 1
import json, sys
lim = float(sys.argv[2]); bad = []; n = 0
for line in open(sys.argv[1]):
    r = json.loads(line); n += 1
    for q in ("o", "ht", "hc"):
        m = r.get(q)
        if m and m.get("worst") is not None and not m["worst"] <= lim:
            bad.append("%s %s %s %.3g" % (r["backend"], r["case"], q, m["worst"]))
        elif m and r["verdict"] != "Pass":
            bad.append("%s %s %s" % (r["backend"], r["case"], r["verdict"]))
if bad:
    print("zoo_correct: FAIL: above %g units: %s" % (lim, "; ".join(bad[:6])), file=sys.stderr)
    sys.exit(1)
print("zoo_correct: %d reports within %g units" % (n, lim))
PY
}
# The chunked members in fla's order (chunk16, chunk64) carry the rounding of in-chunk float32
# sums of the log-decays, u |G| with |G| up to the chunk's whole decay: a property of that order,
# not of the form, which chunk64d (the same code with those sums in double) checks on every case.
# They are checked for correctness where the decays are slow or absent.
zoo_members | grep -v 'ref-f32' > "$tmp/m32"
grep -Ev 'order=chunk(16|64)$' "$tmp/m32" > "$tmp/m32-fast"
check "$tmp/r32" "$tmp/m32-fast" "$tmp/f32" 16
check "$tmp/r32s" "$tmp/m32" "$tmp/slow" 16
zoo_bf16_members > "$tmp/m16"
check "$tmp/r16" "$tmp/m16" "$tmp/bf16" 2
# A deliberate defect must fail where KDA gates act.
"$kda" conform -q --serving off -p "$ZOO/kda_plugin_zoo.so:bug=decay0" "$tmp/f32/kda-varlen.npz" \
  "$tmp/f32/kda-log.npz" > "$tmp/bug.txt" 2>&1
[ $? = 1 ] && [ "$(grep -c '^FAIL' "$tmp/bug.txt")" = 2 ] ||
  fail "bug=decay0 is not failed on both KDA cases: $(head -2 "$tmp/bug.txt")"
echo "zoo_correct: $(wc -l <"$tmp/m32") fp32 and $(wc -l <"$tmp/m16") bf16 members correct; bug=decay0 fails both KDA cases"

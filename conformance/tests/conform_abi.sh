#!/bin/sh
# conform_abi.sh: kda conform scores plugins of both ABI versions (SPEC.md §7.8), run by make
# check: the plugin built against the frozen version-1 headers (abi_v1/plugin_v1.c) and the
# version-2 test plugin (plugin_v2.c), both correct float64 KDAs, pass every golden/L1 case
# in the fp64 class.  The version-2 plugin is scored through its resident buffers
# (buffers_create, forward_buffers, synchronize, buffers_read), and through forward too under
# --repeat: a defect in either path (plugin_v2's bad=resident, bad=forward) is a Fail, and a
# crash in a resident slot is a Crash naming that slot's stage.
# SPDX-License-Identifier: MIT
# Usage: KDA_BIN=build/kda PLUGIN_DIR=build/conformance/tests sh conformance/tests/conform_abi.sh
set -u
kda=${KDA_BIN:-build/kda}
plugins=${PLUGIN_DIR:-build/conformance/tests}
fail() { echo "conform_abi: FAIL: $*" >&2; exit 1; }
n=$(ls golden/L1/*.npz | wc -l)
[ "$n" -gt 0 ] || fail "golden/L1 is missing"
for v in v1 v2; do
  out=$("$kda" conform -q --no-prefix -p "$plugins/kda_plugin_$v.so" golden/L1 2>&1)
  rc=$?
  [ $rc = 0 ] || fail "the ABI $v plugin: exit status $rc: $(echo "$out" | tail -3)"
  last=$(echo "$out" | tail -1)
  case "$last" in # a warning is a pass (an fp64-class plugin warns on ref-f64's own drift)
    "$n passed, 0 failed, 0 skipped, "*) ;;
    *) fail "the ABI $v plugin: '$last', expected '$n passed, 0 failed, 0 skipped, W warnings'" ;;
  esac
  echo "conform_abi: the ABI $v plugin passes all $n golden/L1 cases"
done
case=golden/L1/beta-values.npz
expect_fail() { # what, then the arguments of kda conform
  what=$1; shift
  out=$("$kda" conform -q "$@" "$case" 2>&1)
  rc=$?
  [ $rc = 1 ] || fail "$what: exit status $rc, expected 1 (a Fail): $(echo "$out" | tail -2)"
  echo "$out" | grep -q '^FAIL ' || fail "$what: no FAIL line: $(echo "$out" | tail -2)"
}
expect_fail "a wrong resident path" -p "$plugins/kda_plugin_v2.so:bad=resident"
expect_fail "a wrong resident path, streamed" --stream --chunk 64 \
  -p "$plugins/kda_plugin_v2.so:bad=resident"
expect_fail "a wrong forward under --repeat" --repeat -p "$plugins/kda_plugin_v2.so:bad=forward"
echo "conform_abi: a wrong resident path, or a wrong forward under --repeat, is a Fail"
out=$("$kda" conform -q --no-prefix -p "$plugins/kda_plugin_v2.so:bad=crash" "$case" 2>&1)
echo "$out" | grep -q '^CRASH .*in forward_buffers' ||
  fail "a crash in forward_buffers is not a Crash in that stage: $(echo "$out" | head -2)"
echo "conform_abi: a crash in forward_buffers is a Crash reported in that stage"

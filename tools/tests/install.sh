#!/bin/sh
# install.sh: `make install` puts the golden sets under share/kda/golden and the installed kda,
# run outside the source tree, finds them (SPEC.md §12.3), run by make check.
# SPDX-License-Identifier: MIT
#  1. DESTDIR staging: the installed kda finds the staged set through KDA_GOLDEN (conform
#     scores GOLDEN/L1, golden --verify checks its SHA256SUMS and L0); a KDA_GOLDEN naming nothing is
#     exit 2 with one line on stderr.
#  2. PREFIX=$tmp (a copy of the build, so only the lookup object is rebuilt): with no
#     KDA_GOLDEN and no ./golden, the installed kda finds the compiled-in share/kda/golden.
# Usage: MAKE=make BUILD=build sh tools/tests/install.sh
set -u
make=${MAKE:-make}
build=${BUILD:-build}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-install.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install: FAIL: $*" >&2; exit 1; }
n_l1=$(ls golden/L1/*.npz | wc -l)

# 1. Staged install, lookup through KDA_GOLDEN.
$make -s install DESTDIR="$tmp/stage" PREFIX=/usr/local BUILD="$build" >"$tmp/make.txt" 2>&1 ||
  fail "make install DESTDIR: $(tail -3 "$tmp/make.txt")"
share=$tmp/stage/usr/local/share/kda/golden
for f in SHA256SUMS L0/manifest.json L1/manifest.json example/example.npz; do
  [ -f "$share/$f" ] || fail "make install did not install golden/$f"
done
kda=$tmp/stage/usr/local/bin/kda
mkdir "$tmp/elsewhere" && cd "$tmp/elsewhere" || exit 2
KDA_GOLDEN=$share "$kda" conform --serving off --export-prompts prompts >out.txt 2>err.txt ||
  fail "installed kda with KDA_GOLDEN: $(cat err.txt)"
[ "$(ls prompts | wc -l)" = "$n_l1" ] || fail "installed kda did not score the staged L1 set"
KDA_GOLDEN=$share "$kda" golden --verify --level L0 >out.txt 2>err.txt ||
  fail "kda golden --verify of the installed set: $(cat err.txt)"
grep -q "verify $share: .*identical" out.txt || fail "golden --verify did not check $share"
KDA_GOLDEN=$tmp/nowhere "$kda" conform -b ref-f64 >out.txt 2>err.txt
rc=$?
[ $rc = 2 ] && [ "$(wc -l < err.txt)" = 1 ] && grep -q "KDA_GOLDEN" err.txt ||
  fail "KDA_GOLDEN naming nothing: exit $rc, stderr: $(cat err.txt)"
cd - >/dev/null || exit 2
echo "install: staged install; the installed kda finds golden/ through KDA_GOLDEN"

# 2. Compiled-in path: a copy of the build installed under PREFIX=$tmp/prefix.
mkdir "$tmp/build" && (cd "$build" && tar cf - --exclude=./asan .) | (cd "$tmp/build" && tar xf -) ||
  exit 2
$make -s install PREFIX="$tmp/prefix" BUILD="$tmp/build" >"$tmp/make.txt" 2>&1 ||
  fail "make install PREFIX: $(tail -3 "$tmp/make.txt")"
cd "$tmp/elsewhere" && rm -rf prompts || exit 2
env -u KDA_GOLDEN "$tmp/prefix/bin/kda" conform --serving off --export-prompts prompts >out.txt 2>err.txt ||
  fail "installed kda without KDA_GOLDEN: $(cat err.txt)"
[ "$(ls prompts | wc -l)" = "$n_l1" ] || fail "installed kda did not find share/kda/golden/L1"
env -u KDA_GOLDEN "$tmp/prefix/bin/kda" golden --verify --level L0 >out.txt 2>err.txt &&
  grep -q "verify $tmp/prefix/share/kda/golden: .*identical" out.txt ||
  fail "installed kda golden --verify without KDA_GOLDEN: $(cat out.txt err.txt)"
env -u KDA_GOLDEN "$tmp/prefix/bin/kda" golden --list >out.txt 2>err.txt &&
  grep -q "^golden sets in $tmp/prefix/share/kda/golden (from the installed set):" out.txt &&
  grep -q "^  L1       present: $n_l1 case files in $tmp/prefix/share/kda/golden/L1" out.txt ||
  fail "installed kda golden --list does not name share/kda/golden: $(head -3 out.txt) $(cat err.txt)"
gd=$(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --variable=goldendir kda)
[ "$gd" = "$tmp/prefix/share/kda/golden" ] || fail "kda.pc goldendir is '$gd'"
echo "install: PREFIX install; the installed kda finds its compiled-in share/kda/golden"

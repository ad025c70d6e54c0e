#!/bin/sh
# test_check_layers.sh: make check-layers is seen to fail on what it forbids.  Each plant adds
# one file to a copy of the tree's rooms (sources and objects) and expects check_layers.py to
# name the offence: an upward call (ref/ calling the runner), a cycle between two files of one
# room, an include of another module's private header.  The unplanted copy must pass.
# SPDX-License-Identifier: MIT
#
# Usage: scripts/build/test_check_layers.sh BUILD   (from the repository root, objects built)
set -eu
build=$1
root=$(pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-layers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM HUP
CC=${CC:-cc}
copy_tree() {  # $1: destination; the rooms' sources and objects, the checker and its list
  mkdir -p "$1/scripts/build"
  cp "$root/scripts/build/check_layers.py" "$root/scripts/build/layers-known.txt" "$1/scripts/build/"
  for d in ref ref/oracle vectors/format vectors/case vectors/catalog vectors/golden \
           conformance conformance/backends/ref conformance/backends/simd \
           conformance/backends/mpfr tools tools/scale; do
    mkdir -p "$1/$d" "$1/b/$d"
    for f in "$root/$d"/*.c "$root/$d"/*.h; do [ -f "$f" ] && cp "$f" "$1/$d/"; done
    for f in "$root/$build/$d"/*.o; do [ -f "$f" ] && cp "$f" "$1/b/$d/"; done
  done
}
expect() {  # $1: name, $2: the message expected, $3: the tree
  if (cd "$3" && python3 scripts/build/check_layers.py b) > "$tmp/out" 2>&1; then
    echo "test_check_layers: $1: the check passed on a planted offence" >&2; exit 1
  fi
  grep -q "$2" "$tmp/out" || {
    echo "test_check_layers: $1: no line with '$2' in:" >&2; cat "$tmp/out" >&2; exit 1; }
  echo "test_check_layers: $1: caught ($(grep -m1 "$2" "$tmp/out" | cut -c1-100))"
}
plant_c() {  # $1: tree, $2: source path in the tree, $3: C text
  printf '%s\n' "$3" > "$1/$2"
  $CC -c -o "$1/b/${2%.c}.o" "$1/$2"
}

copy_tree "$tmp/clean"
(cd "$tmp/clean" && python3 scripts/build/check_layers.py b) > /dev/null \
  || { echo "test_check_layers: the unplanted copy fails" >&2; exit 1; }

copy_tree "$tmp/up"
plant_c "$tmp/up" ref/kda_planted.c \
  'int kda_conform_gen(const char *, void *, char *, unsigned long);
int kda_planted(void) { return kda_conform_gen(0, 0, 0, 0); }'
expect "upward call" "ref/kda_planted.c calls conformance/.*: upward" "$tmp/up"

copy_tree "$tmp/ring"
plant_c "$tmp/ring" conformance/kda_planted_a.c \
  'int kda_planted_b(int); int kda_planted_a(int n) { return n ? kda_planted_b(n - 1) : 0; }'
plant_c "$tmp/ring" conformance/kda_planted_b.c \
  'int kda_planted_a(int); int kda_planted_b(int n) { return n ? kda_planted_a(n - 1) : 1; }'
expect "cycle" "cycle between files: conformance/kda_planted_a.c <-> conformance/kda_planted_b.c" "$tmp/ring"

copy_tree "$tmp/priv"
printf '#include "kda_worker_internal.h"\n' > "$tmp/priv/tools/kda_planted.h"
expect "private header" "tools/kda_planted.h includes conformance/kda_worker_internal.h, a private header" "$tmp/priv"

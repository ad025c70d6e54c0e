#!/bin/sh
# headers.sh: each installed header, and the plugins' header-only kda_backend_pool.h, compiles
# alone as C11 and as C++17 and gives the functions it declares C linkage; run by make check.
# SPDX-License-Identifier: MIT
#
#   CC=cc CXX=g++ CPPFLAGS='-D... -I/abs...' sh tools/tests/headers.sh HEADER...
#
# A plugin may be C++ (the CUDA plugin is), so a C-only construct in a header (an implicit
# void * conversion, a designated initialiser or restrict in inline code, a compound literal)
# or a missing extern "C" breaks it.  Each header is compiled from one flat directory, as
# installed (include/kda), so only the tree's relative -I flags are dropped from CPPFLAGS, and
# with -Wall -Wextra -Werror -pedantic in both languages.  -fsyntax-only cannot see linkage:
# a C++ object that takes the address of every function (and extern object) the header
# declares (scripts/build/kda_symbols.sh list) must refer to them by their unmangled names.
# Compiler messages are cut to their first lines (one broken header would otherwise flood the log).
set -u

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kda-headers.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
cp "$@" "$tmp/" || exit 2
flags=$(echo " ${CPPFLAGS:-}" | sed 's/ -I[^/ ][^ ]*//g')
warn="-Wall -Wextra -Werror -pedantic"
cc=${CC:-cc}
cxx=${CXX:-g++}
failed=0
fail() { echo "check-headers: $*" >&2; failed=1; }

# $1: the header's base name.  Writes $tmp/use.cc: one reference to each declared name.
write_use() {
  names=$(CC="$cc" CPPFLAGS="$flags -I$tmp" sh scripts/build/kda_symbols.sh list "$tmp/$1") || return 1
  {
    echo "#include \"$1\""
    echo "template <class T> void kda_use(T *p); /* never defined: the object is not linked */"
    echo "void kda_headers_use();"
    echo "void kda_headers_use() {"
    for s in $names; do echo "  kda_use(&$s);"; done
    echo "}"
  } > "$tmp/use.cc"
  echo "$names" > "$tmp/names"
}

n=0
for h in "$@"; do
  b=${h##*/}
  echo "#include \"$b\"" > "$tmp/one.c"
  # shellcheck disable=SC2086 # flags and warn are lists of flags
  $cc -std=c11 $flags $warn -I"$tmp" -fsyntax-only -x c "$tmp/one.c" 2>"$tmp/err" ||
    { head -n 8 "$tmp/err" >&2; fail "$b does not compile alone as C11"; }
  # shellcheck disable=SC2086
  if ! $cxx -std=c++17 $flags $warn -I"$tmp" -fsyntax-only -x c++ "$tmp/one.c" 2>"$tmp/err"; then
    head -n 8 "$tmp/err" >&2
    fail "$b does not compile alone as C++17"
    continue
  fi
  write_use "$b" || { fail "scripts/build/kda_symbols.sh list failed on $b"; continue; }
  # shellcheck disable=SC2086
  $cxx -std=c++17 $flags $warn -I"$tmp" -O0 -c -x c++ "$tmp/use.cc" -o "$tmp/use.o" 2>"$tmp/err" ||
    { head -n 8 "$tmp/err" >&2; fail "$b: C++ taking its functions' addresses does not compile"; continue; }
  nm -u "$tmp/use.o" | awk '{ print $NF }' > "$tmp/undef"
  for s in $(cat "$tmp/names"); do
    grep -qx "$s" "$tmp/undef" || fail "$b declares $s without C linkage (no extern \"C\")"
  done
  n=$((n + 1))
done
[ "$failed" = 0 ] || exit 1
echo "check-headers: $n headers compile alone as C11 and C++17, with C linkage"

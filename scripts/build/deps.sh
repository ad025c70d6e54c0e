#!/bin/sh
# deps.sh: make sure the build's libraries are present (DEVELOPERS.md: a fresh machine builds).
# SPDX-License-Identifier: MIT
# Usage: scripts/build/deps.sh STAMP.  When a pkg-config module is missing: as root, install the
# Debian packages (one apt-get update first); otherwise print the exact apt-get line and fail.
# KDA_DEPS_OPTIONAL: Debian packages named after the command they provide (CI: chromium for
# make check-browser), installed in the same apt-get run when their command is absent; a failure
# to install them is a note, not an error (the tests that need them skip, saying so).
# OpenMPI (openmpi-bin libopenmpi-dev, for make mpi) is one of them in CI (.ci/run).
set -eu
stamp=${1:-}
pkgs="pkg-config check libzip-dev libjansson-dev libmpfr-dev libgmp-dev zlib1g-dev libsubunit-dev libxml2-utils"
mods="check libzip jansson mpfr gmp zlib"
missing() {
  command -v pkg-config >/dev/null 2>&1 || { echo pkg-config; return; }
  for m in $mods; do pkg-config --exists "$m" || echo "$m"; done
  command -v xmllint >/dev/null 2>&1 || echo xmllint  # JUnit schema check (make check)
}
optional=${KDA_DEPS_OPTIONAL:-}
# An entry CMD=PKG+PKG names the packages that provide CMD (CI: mpicc=openmpi-bin+libopenmpi-dev
# for make mpi and check-scale).
opt_missing() {
  for p in $optional; do
    command -v "${p%%=*}" >/dev/null 2>&1 || echo "${p#*=}" | tr '+' ' '
  done
}
m=$(missing)
o=$(opt_missing)
if [ -n "$m$o" ] && [ "$(id -u)" = 0 ] && command -v flock >/dev/null 2>&1; then
  # Parallel makes (make -j check runs the sanitizer build beside the plain one) would race
  # for apt's lock: take ours first, then look again (the other one may have installed them).
  exec 9>"${TMPDIR:-/tmp}/kda-deps.lock"
  flock 9
  m=$(missing)
  o=$(opt_missing)
fi
if [ -n "$m$o" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps.sh: missing $(echo $m $o | tr '\n' ' '); installing Debian packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  if [ -n "$m" ]; then apt-get install -y -qq $pkgs >&2; m=$(missing); fi
  if [ -n "$o" ]; then
    apt-get install -y -qq $o >/dev/null 2>&1 ||
      echo "deps.sh: note: optional packages $(echo $o | tr '\n' ' ')could not be installed" >&2
  fi
elif [ -n "$o" ]; then
  echo "deps.sh: note: optional commands missing (not root, not installed): $(echo $o | tr '\n' ' ')" >&2
fi
if [ -n "$m" ]; then
  echo "deps.sh: missing pkg-config modules or tools: $(echo $m | tr '\n' ' ')" >&2
  echo "deps.sh: install them with: sudo apt-get install -y $pkgs" >&2
  exit 1
fi
if [ -n "$stamp" ]; then mkdir -p "$(dirname "$stamp")" && : > "$stamp"; fi

#!/bin/sh
# numpy_interop.sh: numpy reads what our C writer wrote (make check-numpy).
# SPDX-License-Identifier: MIT
#
# Environment: KDA_BIN (the kda binary; its folder is the build folder), PYTHON (python3),
# KDA_REQUIRE_NUMPY=1 to fail instead of skipping when numpy is missing (CI).
#  1. check_npz (built if missing) writes its interop archives into a temporary folder
#     (KDA_INTEROP_DIR, test case "interop"); numpy_interop.py checks them bit for bit.
#  2. When $KDA_BIN is executable, `kda gen` writes a small case file and numpy checks it too.
set -eu
PYTHON=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

if ! "$PYTHON" -c 'import numpy' >/dev/null 2>&1; then
  if [ "${KDA_REQUIRE_NUMPY:-0}" = 1 ]; then
    echo "check-numpy: FAIL: numpy not installed (pip install numpy), and KDA_REQUIRE_NUMPY=1" >&2
    exit 1
  fi
  echo "check-numpy: SKIP: numpy not installed (pip install numpy)"
  exit 0
fi

build=$root/build
if [ -n "${KDA_BIN:-}" ] && [ -d "$(dirname "$KDA_BIN")" ]; then build=$(dirname "$KDA_BIN"); fi
check=$build/vectors/tests/check_npz
if [ ! -x "$check" ]; then
  (cd "$root" && ${MAKE:-make} -s BUILD="$build" "$check") || {
    echo "check-numpy: FAIL: cannot build $check" >&2
    exit 1
  }
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kda-numpy.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

(cd "$root" && KDA_INTEROP_DIR=$work CK_RUN_CASE=interop CK_VERBOSITY=silent "$check") || {
  echo "check-numpy: FAIL: $check could not write the interop archives" >&2
  exit 1
}
"$PYTHON" "$here/numpy_interop.py" c-writer "$work"

if [ -n "${KDA_BIN:-}" ] && [ -x "$KDA_BIN" ]; then
  "$KDA_BIN" gen "seed=1 T=8 H=1 HV=2 K=4 V=4" -o "$work/case.npz" || {
    echo "check-numpy: FAIL: $KDA_BIN gen could not write a case file" >&2
    exit 1
  }
  "$PYTHON" "$here/numpy_interop.py" case "$work/case.npz"
else
  echo "check-numpy: note: no kda binary (KDA_BIN=${KDA_BIN:-unset}); case-file check skipped"
fi
echo "check-numpy: all numpy interop checks passed"

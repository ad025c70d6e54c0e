#!/bin/sh
# cuda-toolkit.sh: nvcc for machines without a CUDA toolkit (CI), from NVIDIA's pip wheels.
# SPDX-License-Identifier: MIT
# Usage: scripts/build/cuda-toolkit.sh DIR.  Installs the wheels pinned by hash in
# cuda-toolkit.txt (beside it) into DIR (once: a later run finds them), checks that the
# compiler runs, and prints the path of nvcc on standard output:
# NVCC=$(sh scripts/build/cuda-toolkit.sh build-cuda-toolkit).  nvcc finds cicc, the headers and static cudart beside itself (bin/nvcc.profile); the host compiler is
# the machine's g++.  On failure: one line on standard error, exit 1, DIR left as it was.
set -eu
dir=${1:?usage: scripts/build/cuda-toolkit.sh DIR}
here=$(cd "$(dirname "$0")" && pwd)
nvcc=$dir/nvidia/cu13/bin/nvcc
if [ ! -x "$nvcc" ]; then
  case $(uname -m) in
  x86_64) ;;
  *) echo "scripts/build/cuda-toolkit.sh: the pinned wheels are for x86_64, not $(uname -m)" >&2
     exit 1 ;;
  esac
  tmp=$dir.tmp.$$
  rm -rf "$tmp"
  # The wheels only, checked against their hashes; stdout stays the path alone.
  if ! PIP_ROOT_USER_ACTION=ignore "${PYTHON:-python3}" -m pip install --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --require-hashes --target "$tmp" -r "$here/cuda-toolkit.txt" >&2; then
    rm -rf "$tmp"
    echo "scripts/build/cuda-toolkit.sh: pip could not install $here/cuda-toolkit.txt into $tmp" >&2
    exit 1
  fi
  rm -rf "$dir"
  mv "$tmp" "$dir"
fi
if ! "$nvcc" --version >/dev/null 2>&1; then
  echo "scripts/build/cuda-toolkit.sh: $nvcc does not run" >&2
  exit 1
fi
echo "$nvcc"

#!/bin/sh
# check_python.sh: make check-python: pip install ./python into the build folder, then its pytest suite.
# SPDX-License-Identifier: MIT
#
# Environment: KDA_BIN (the kda binary; its folder is the build folder), PYTHON (python3).
# No network: --no-deps --no-build-isolation use the numpy and setuptools already installed
# (the package's only dependency is numpy).  pytest missing: skipped, saying so, unless
# KDA_REQUIRE_PYTEST=1 (as in CI), where it is a failure.  The package is built from a copy
# of python/ so that the source tree gets no build/ or egg-info.
set -eu
PYTHON=${PYTHON:-python3}
: "${KDA_BIN:?KDA_BIN must name the kda binary}"
build=$(dirname "$KDA_BIN")
if ! "$PYTHON" -c 'import pytest, numpy' >/dev/null 2>&1; then
  if [ "${KDA_REQUIRE_PYTEST:-0}" = 1 ]; then
    echo "check-python: $PYTHON cannot import pytest and numpy (KDA_REQUIRE_PYTEST=1)" >&2
    exit 1
  fi
  echo "check-python: skipped: $PYTHON cannot import pytest and numpy"
  exit 0
fi
src="$build/python-src"
site="$build/python-site"
rm -rf "$src" "$site"
mkdir -p "$src"
cp -R python/pyproject.toml python/README.md python/kda_conform "$src/"
# Offline first (needs setuptools >= 61 and, before setuptools 70.1, wheel); else pip's
# isolated build, which fetches setuptools.
if ! "$PYTHON" -m pip install --quiet --no-deps --no-build-isolation --no-index \
     --target "$site" "$src" >"$build/python-pip.log" 2>&1; then
  echo "check-python: offline build failed (see $build/python-pip.log); trying an isolated build"
  "$PYTHON" -m pip install --quiet --no-deps --target "$site" "$src" \
    >>"$build/python-pip.log" 2>&1 ||
    { tail -20 "$build/python-pip.log" >&2; echo "check-python: pip install ./python failed" >&2; exit 1; }
fi
PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 KDA_REQUIRE_KDA=1 KDA_EXPECT_SITE="$site" \
  "$PYTHON" -m pytest -q -p no:cacheprovider python/tests

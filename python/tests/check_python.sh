#!/bin/sh
# check_python.sh: make check-python / check-python-l1: build the kda-conform wheel, install it into a fresh venv, run its tests there.
# SPDX-License-Identifier: MIT
#
# Usage: check_python.sh [fast|l1].  fast (make check-python, in make check): every test but
# those marked slow; l1 (make check-python-l1, run by .ci/run after make check): the slow ones,
# which score whole golden sets (the author's kernel on L1 through the plugin, the example, the
# adapters' stand-ins).  Each has its own folders, so both may run at once.
#
# Environment: KDA_BIN (the kda binary; its folder is the build folder the wheel's CMake step
# runs `make` in, already up to date), PYTHON (python3).  The wheel is built by pip with the
# scikit-build-core already installed (--no-build-isolation --no-index: no network; .ci/run
# installs it), installed with --no-deps into a venv made here (--system-site-packages: numpy,
# pytest, hypothesis and pytest-xdist come from PYTHON's site), and the tests run from a folder
# outside the repository with no KDA_BIN, KDA_GOLDEN or kda on PATH: the package must find the
# judge and the golden sets it carries.  A missing module: skipped, saying so, unless
# KDA_REQUIRE_PYTEST=1 (as in CI), where it is a failure.
set -eu
PYTHON=${PYTHON:-python3}
suite=${1:-fast}
case $suite in
  fast) mark="not slow" ;;
  l1) mark="slow" ;;
  *) echo "check_python.sh: unknown suite '$suite' (fast or l1)" >&2; exit 2 ;;
esac
: "${KDA_BIN:?KDA_BIN must name the kda binary}"
build=$(cd "$(dirname "$KDA_BIN")" && pwd)
repo=$(pwd)
mods="pytest, numpy, hypothesis, xdist, scikit_build_core"
if ! "$PYTHON" -c "import $mods" >/dev/null 2>&1; then
  if [ "${KDA_REQUIRE_PYTEST:-0}" = 1 ]; then
    echo "check-python: $PYTHON cannot import $mods (KDA_REQUIRE_PYTEST=1)" >&2
    exit 1
  fi
  echo "check-python: skipped: $PYTHON cannot import $mods"
  exit 0
fi
base="$build/python-$suite"
wheels="$base/wheel"
venv="$base/venv"
run="$base/run"
log="$base/pip.log"
rm -rf "$base"
mkdir -p "$run"
if ! KDA_BUILD_DIR="$build" "$PYTHON" -m pip wheel --no-deps --no-build-isolation --no-index \
     -w "$wheels" ./python >"$log" 2>&1; then
  tail -20 "$log" >&2
  echo "check-python: pip wheel ./python failed (see $log)" >&2
  exit 1
fi
"$PYTHON" -m venv --without-pip --system-site-packages "$venv"
"$PYTHON" -m pip --python "$venv/bin/python" install --quiet --no-deps --no-index \
  "$wheels"/kda_conform-*.whl >>"$log" 2>&1 ||
  { tail -20 "$log" >&2; echo "check-python: installing the wheel failed" >&2; exit 1; }
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# PATH without any folder holding a kda: the wheel's own must be the one found.
path=
IFS=:
for d in $PATH; do [ -x "$d/kda" ] || path="${path:+$path:}$d"; done
unset IFS
cd "$run"
env -u KDA_BIN -u KDA_GOLDEN PATH="$path" PYTHONPYCACHEPREFIX="$base/pycache" KDA_EXPECT_SITE="$site" \
  KDA_REPO="$repo" "$venv/bin/python" -m pytest -q -p no:cacheprovider -m "$mark" "$repo/python/tests"

#!/bin/sh
# check_python_install.sh: make check-python-install: `pip install ./python` as a kernel author runs it, then the plugin.
# SPDX-License-Identifier: MIT
#
# Into a fresh venv with nothing in it (no system site), pip installs ./python and pytest the
# way an author does: an isolated build, scikit-build-core (and cmake where none is installed)
# and numpy fetched from the package index, kda and libkda.so compiled by the project's Makefile
# in the build's own folder.  What the machine must have is what `make` needs (the Debian
# packages of scripts/build/deps.sh) and a Python with pip.  Then, from a folder outside the
# repository with no KDA_BIN, KDA_GOLDEN or kda on PATH, pytest on an author's test module:
# the author's kernel (tests/author.py) passes t17-gdn and its serving prompts, and its wrong
# L2 eps fails disc-l2-convention naming the case's intent.  Needs the network (the index).
# Environment: BUILD (the folder for its files), PYTHON (python3).
set -eu
PYTHON=${PYTHON:-python3}
: "${BUILD:?BUILD must name the build folder}"
repo=$(pwd)
mkdir -p "$BUILD"
base="$(cd "$BUILD" && pwd)/python-install"
rm -rf "$base"
mkdir -p "$base/run"
log="$base/pip.log"
"$PYTHON" -m venv --without-pip "$base/venv"
if ! "$PYTHON" -m pip --python "$base/venv/bin/python" install "$repo/python" pytest \
     >"$log" 2>&1; then
  tail -20 "$log" >&2
  echo "check-python-install: pip install ./python pytest failed (see $log)" >&2
  exit 1
fi
cat >"$base/run/test_author.py" <<PY
import sys
sys.path.insert(0, "$repo/python/tests")
import kda_conform, author
test_l1 = kda_conform.suite(author.kernel, cases=["t17-gdn"])
test_eps = kda_conform.suite(author.buggy("l2_eps"),
                             cases=["disc-l2-convention", "!disc-l2-convention.*"])
PY
path=
IFS=:
for d in $PATH; do [ -x "$d/kda" ] || path="${path:+$path:}$d"; done
unset IFS
cd "$base/run"
status=0
env -u KDA_BIN -u KDA_GOLDEN PATH="$path" PYTHONDONTWRITEBYTECODE=1 \
  "$base/venv/bin/python" -m pytest -q -p no:cacheprovider >out.txt 2>&1 || status=$?
fail() { cat out.txt >&2; echo "check-python-install: $1" >&2; exit 1; }
[ "$status" = 1 ] || fail "pytest exited $status, not 1 (one failing test)"
grep -q "^test_author.test_l1: 6 passed, 0 failed, 0 skipped, 0 warnings$" out.txt || fail "t17-gdn did not pass"
grep -q "^test_author.test_eps: 0 passed, 1 failed, 0 skipped, 0 warnings$" out.txt || fail "the eps bug did not fail"
grep -q "designed to catch: OTHER_L2_CONVENTION: Exposes" out.txt ||
  fail "the failure does not name the case's intent"
kda=$(env -u KDA_BIN PATH="$path" "$base/venv/bin/python" -c \
  'import kda_conform; print(kda_conform.find_kda())')
case $kda in
  "$base/venv/"*) ;;
  *) fail "the kda found is $kda, not the one the wheel carries" ;;
esac
echo "check-python-install: pip install ./python in a bare venv: t17-gdn passes, the eps bug fails"

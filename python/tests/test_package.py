# test_package.py: what the installed wheel is: one version (ref/kda_version.h), py.typed, its judge, its module names.
# SPDX-License-Identifier: MIT
import ctypes
import importlib.metadata
import os
import re
import subprocess
import sys

import kda_conform as kc
from conftest import REPO

PKG = os.path.dirname(os.path.abspath(kc.__file__))


def test_one_version_from_kda_version_h(kda):
    """The package, its metadata, the kda it carries and libkda.so all say the version that
    ref/kda_version.h writes once."""
    with open(os.path.join(REPO, "ref", "kda_version.h"), encoding="utf-8") as f:
        want = re.search(r'#define KDA_VERSION_STRING "([0-9.]+)"', f.read()).group(1)
    assert kc.__version__ == want
    assert importlib.metadata.version("kda-conform") == want
    out = subprocess.run([kda, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["kda", want]
    lib = ctypes.CDLL(os.path.join(PKG, "_judge", "lib", "libkda.so"))
    lib.kda_version.restype = ctypes.c_char_p
    assert lib.kda_version().decode() == want


def test_typed_and_its_judge_inside():
    """py.typed (PEP 561), and the judge the wheel carries: kda, libkda.so, golden L0 and L1;
    the kda found is that one."""
    assert os.path.isfile(os.path.join(PKG, "py.typed"))
    judge = os.path.join(PKG, "_judge")
    assert os.access(os.path.join(judge, "bin", "kda"), os.X_OK)
    assert os.path.isfile(os.path.join(judge, "lib", "libkda.so"))
    for level in ("L0", "L1"):
        assert any(f.endswith(".npz") for f in os.listdir(os.path.join(judge, "golden", level)))
    if os.environ.get("KDA_EXPECT_SITE"):          # make check-python: the installed wheel
        assert kc.find_kda() == os.path.join(judge, "bin", "kda")
        assert kc.golden_root() == os.path.join(judge, "golden")


def test_no_module_shadows_the_standard_library():
    """No kda_conform/io.py (or any name of a standard module a test folder may put first on
    sys.path)."""
    mods = {f[:-3] for f in os.listdir(PKG) if f.endswith(".py")}
    std = set(getattr(sys, "stdlib_module_names", ("io", "types", "typing", "json", "random")))
    assert not mods & std, mods & std

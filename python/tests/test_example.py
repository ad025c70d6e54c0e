# test_example.py: conformance/examples/kda_candidate.py, as documented, passes golden/L1; broken, fails.
# SPDX-License-Identifier: MIT
import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import REPO

EXAMPLE = os.path.join(REPO, "conformance", "examples", "kda_candidate.py")


def _score(kda, results, golden_l1):
    return subprocess.run([kda, "conform", "-q", "--candidate", results, golden_l1],
                          capture_output=True, text=True)


@pytest.mark.slow
def test_example_passes_every_l1_case(kda, golden_l1, all_prompts, tmp_path):
    results = str(tmp_path / "results")
    subprocess.run([sys.executable, EXAMPLE, all_prompts, results], check=True)
    p = _score(kda, results, golden_l1)
    n = len([f for f in os.listdir(all_prompts) if f.endswith(".npz")])   # cases + serving prompts
    assert n > len([f for f in os.listdir(golden_l1) if f.endswith(".npz")])
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1] == f"{n} passed, 0 failed, 0 skipped, 0 warnings"
    assert not [f for f in os.listdir(results) if not f.endswith(".npz")]   # no temp left


@pytest.mark.slow
def test_broken_example_fails(kda, golden_l1, all_prompts, tmp_path):
    spec = importlib.util.spec_from_file_location("kda_candidate", EXAMPLE)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    right = ex.forward

    def off_by_a_little(P, a):           # outputs 1e-3 off: far above fp32's 64 units
        o, ht, hc = right(P, a)
        return o * (1 + 1e-3), ht, hc
    ex.forward = off_by_a_little
    results = str(tmp_path / "results")
    ex.main(all_prompts, results)
    p = _score(kda, results, golden_l1)
    assert p.returncode == 1, p.stdout + p.stderr
    passed, failed = (int(w) for w in p.stdout.strip().splitlines()[-1].split()[0:3:2])
    assert passed <= 2 and failed >= 49      # only the cases without tokens can pass

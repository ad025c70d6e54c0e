# test_native.py: gen and assert_kda through libkda in-process; the hypothesis strategy draws and shrinks.
# SPDX-License-Identifier: MIT
import os
import re
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings

import author
import kda_conform as kc
from kda_conform.strategies import cases

DESC = "seed=7 T=64 H=2 HV=4 K=16 V=8 gate=softplus beta=logit l2=fla h0=1 checkpoints=5,40"


def test_gen_is_the_generator_of_kda_gen(kda, tmp_path):
    p, a = kc.gen(DESC)
    path = str(tmp_path / "c.npz")
    subprocess.run([kda, "gen", *DESC.split(), "-o", path], check=True, capture_output=True)
    c = kc.read_case(path)
    assert c.problem == p
    for m, x in c.inputs.items():
        assert np.array_equal(np.asarray(x, np.float64), a[m]), m
    with pytest.raises(ValueError, match="frobnicate"):
        kc.gen("seed=1 frobnicate=2")


def test_the_same_scorer_and_words_as_the_cli(kda, tmp_path):
    """assert_kda's message is the runner's report of the same case and outputs."""
    p, a = kc.gen(DESC)
    out = kc.reference(p, a)
    out["hc"] = out["hc"].copy()
    out["hc"][1, 2, 3, 4] += 1e-3
    with pytest.raises(kc.KdaAssertionError) as e:
        kc.assert_kda(p, a, out, case_id="c")
    mine = str(e.value)
    assert e.value.verdict == "Fail"
    assert "worst hc[ckpt=1 hv=2 i=3 j=4]" in mine and "a fp32 unit there is u M = " in mine
    case, res = tmp_path / "c.npz", tmp_path / "r"
    subprocess.run([kda, "gen", *DESC.split(), "id=c", "-o", str(case)], check=True)
    res.mkdir()
    kc.write_result(str(res / "c.npz"), "c", problem=p, **out)
    cli = subprocess.run([kda, "conform", "-q", "--serving", "off", "--candidate", str(res),
                          str(case)], capture_output=True, text=True).stdout
    strip = lambda s: [ln for ln in s.splitlines() if re.match(r"(FAIL| {4}[a-z])", ln)]  # noqa
    assert strip(mine) == strip(cli), f"{mine}\n---\n{cli}"


def test_passing_outputs_and_bad_arguments():
    p, a = kc.gen(DESC)
    kc.assert_kda(p, a, kc.reference(p, a), cls="fp32")
    kc.assert_kda(p, a, author.kernel(p, a), cls="fp32")
    with pytest.raises(ValueError, match="outputs lack 'hc'"):
        kc.assert_kda(p, a, {"o": np.zeros((64, 4, 8)), "ht": np.zeros((1, 4, 16, 8))})
    with pytest.raises(kc.CaseError, match="'o' has shape"):
        kc.assert_kda(p, a, {"o": np.zeros((64, 8, 4)), "ht": 0, "hc": 0})
    with pytest.raises(ValueError, match="cls"):
        kc.assert_kda(p, a, kc.reference(p, a), cls="fp8")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_drawn_problems_are_valid_and_the_author_kernel_passes(case):
    p, a = case
    kc.assert_kda(p, a, author.kernel(p, a), cls="fp32")


def test_a_failure_shrinks_to_a_small_problem():
    def fails(case):
        p, a = case
        try:
            kc.assert_kda(p, a, author.kernel(p, a, bug="no_decay"))
        except kc.KdaAssertionError:
            return True
        return False
    p, a = find(cases(), fails, settings=settings(max_examples=300, deadline=None,
                                                  database=None))
    assert p.family in ("kda", "gdn") and p.T <= 2 and p.K == 1 and p.V == 1, p

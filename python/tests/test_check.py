# test_check.py: run + score through kda conform: a numpy kernel passes every L1 case, broken ones fail.
# SPDX-License-Identifier: MIT
import os

import numpy as np
import pytest

import kda_conform as kc


def numpy_kernel(problem, inputs):
    return kc.reference(problem, inputs)


def readout_before_write(problem, inputs):
    """A classic bug (SPEC.md §3.1 step 4): o_t read from the state before token t's write."""
    p, out = problem, kc.reference(problem, inputs)
    # The reference does not return the state before each write: o_t := o_{t-1} within a
    # sequence (0 at its start) is the same bug seen from outside, up to the q of token t.
    cu = inputs["cu_seqlens"]
    o = np.zeros_like(out["o"])
    for n in range(p.N):
        lo, hi = int(cu[n]), int(cu[n + 1])
        o[lo + 1:hi] = out["o"][lo:hi - 1]
    out["o"] = o
    return out


def final_state_off(problem, inputs):
    """The final state 1e-3 off (relative): well above fp32's 64 units, o untouched."""
    out = kc.reference(problem, inputs)
    out["ht"] = out["ht"] * (1 + 1e-3)
    return out


def test_numpy_kernel_passes_every_l1_case(kda, golden_l1):
    res = kc.check(numpy_kernel, level="L1", cls="fp32")
    ids = {f[:-4] for f in os.listdir(golden_l1) if f.endswith(".npz")}
    assert {r.base_case for r in res} == ids                     # every case ...
    assert len([r for r in res if not r.serving]) == len(ids)    # ... once, plus its serving
    assert any(r.serving.startswith("resume-") for r in res)     # prompts (SPEC.md §7.7)
    assert all(r.verdict == "Pass" for r in res), kc.summary(res)


def test_broken_kernels_fail(kda):
    res = {r.case: r for r in kc.check(readout_before_write, level="L1", cls="fp32")}
    bad = [c for c, r in res.items() if r.verdict == "Fail"]
    assert res["disc-readout-before-write"].verdict == "Fail"
    assert "o error" in res["disc-readout-before-write"].reason
    assert len(bad) >= 45, kc.summary(list(res.values()))
    res = kc.check(final_state_off, level="L1", cls="fp32", cases=["t65-*", "large-h0"])
    res = [r for r in res if not r.serving]
    assert [r.case for r in res] == ["large-h0", "t65-lower-bound-vk"]
    assert all(r.verdict == "Fail" and "ht" in r.reason for r in res), kc.summary(res)


def test_kernel_errors_and_filters(kda):
    def picky(problem, inputs):
        if problem.family == "linear":
            raise ValueError("no linear here")
        return kc.reference(problem, inputs)
    res = kc.check(picky, cases=["*linear*", "!drift-*"])
    assert [r.case for r in res] == ["t127-linear"]
    assert res[0].verdict == "Fail" and "kernel raised ValueError: no linear here" in res[0].reason


def test_declines(kda, knows_not_supported):
    def decline(problem, inputs):
        raise kc.NotSupported("K too small for me")
    res = [r for r in kc.check(decline, cases=["t15-*"]) if not r.serving]
    assert len(res) == 1
    if not knows_not_supported:
        assert res[0].verdict == "Fail" and "declined: K too small for me" in res[0].reason
        pytest.skip("this kda conform does not know not_supported (kda conform --help)")
    assert res[0].verdict == "NotSupported" and res[0].skipped


def test_runner_args(kda):
    with pytest.raises(kc.ScoreError, match="unknown|unrecognized|invalid|option"):
        kc.check(numpy_kernel, cases=["t17-gdn"], runner_args=["--no-such-option"])
    res = kc.check(numpy_kernel, cases=["t17-gdn"], runner_args=["--strict"])
    assert [r.verdict for r in res] == ["Pass"]


def test_bad_arguments(kda):
    with pytest.raises(ValueError, match="cls"):
        kc.check(numpy_kernel, cls="fp8")
    with pytest.raises(kc.ScoreError, match="plain name"):
        kc.check(numpy_kernel, level="../L1")
    with pytest.raises(kc.ScoreError, match="not found"):
        kc.check(numpy_kernel, level="L99")
    with pytest.raises(kc.ScoreError, match="no case"):       # a typo in a filter
        kc.check(numpy_kernel, cases=["t17-gnd"])


def test_kda_bin_must_be_executable(monkeypatch, tmp_path):
    monkeypatch.setenv("KDA_BIN", str(tmp_path / "nope"))
    with pytest.raises(kc.ScoreError, match="KDA_BIN"):
        kc.find_kda()


def test_workdir_keeps_files(kda, tmp_path):
    res = kc.check(numpy_kernel, cases=["t17-gdn"], workdir=str(tmp_path))
    assert [r.verdict for r in res] == ["Pass"]
    assert os.path.exists(tmp_path / "results" / "t17-gdn.npz")
    assert os.path.exists(tmp_path / "report" / "results.jsonl")


# One test per case, as a kernel author writes it (the parametrisation runs the kernel once).
@pytest.mark.parametrize("case", kc.pytest_cases(numpy_kernel, level="L1", cls="fp32",
                                                 cases=["t1*", "varlen-*"]))
def test_l1_per_case(case):
    case.check()


def test_case_result_check_fails_with_the_runner_message():
    r = kc.CaseResult("x", "Fail", "o error 2e6 fp32 units > 64 allowed")
    with pytest.raises(AssertionError, match="x: Fail -- o error 2e6"):
        r.check()
    kc.CaseResult("y", "Pass").check()

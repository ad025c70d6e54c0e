# test_check.py: kda_conform.check: verdicts through kda conform, failing closed, declines, input dtype.
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


def test_broken_kernels_fail(kda):
    res = {r.case: r for r in kc.check(readout_before_write, cls="fp32", cases=["disc-*"])}
    assert res["disc-readout-before-write"].verdict == "Fail"
    assert "o error" in res["disc-readout-before-write"].reason
    assert sum(r.verdict == "Fail" for r in res.values()) >= 50, kc.summary(list(res.values()))
    res = kc.check(final_state_off, level="L1", cls="fp32", cases=["t65-*", "large-h0"])
    res = [r for r in res if not r.serving]
    assert [r.case for r in res] == ["large-h0", "t65-lower-bound-vk"]
    assert all(r.verdict == "Fail" and "ht" in r.reason for r in res), kc.summary(res)
    # The runner's words, as `kda conform` prints them: its verdict line, the worst element,
    # the case; summary() and CaseResult.check() show them.
    text = kc.summary(res)
    for r in res:
        assert r.text.startswith(f"FAIL    candidate    {r.case} ") and r.text in text, text
        assert "\n    worst ht[seq=0 hv=" in r.text and "\n    case: " in r.text, r.text
        with pytest.raises(AssertionError) as e:
            r.check()
        assert str(e.value) == r.text


def test_only_the_selected_prompts_run(kda):
    seen = []

    def spy(problem, inputs):
        seen.append(problem.T)
        return kc.reference(problem, inputs)
    res = kc.check(spy, cases=["t17-gdn.decode"])
    assert [r.case for r in res] == ["t17-gdn.decode"] and len(seen) == 1
    assert res[0].verdict == "Pass"


def test_kernel_errors_carry_only_the_kernel_message(kda):
    def picky(problem, inputs):
        if problem.family == "linear":
            raise ValueError("no linear here")
        return kc.reference(problem, inputs)
    res = [r for r in kc.check(picky, cases=["*linear*", "!drift-*"]) if not r.serving]
    assert [r.case for r in res] == ["t127-linear"]
    assert res[0].verdict == "Fail"
    assert res[0].reason.startswith("kernel raised ValueError: no linear here at ")
    assert "runner" not in res[0].reason and "cannot open" not in res[0].reason
    assert res[0].text == "" and "cannot open" not in kc.summary(res)


def test_declining_everything_fails_unless_declared(kda):
    def decline(problem, inputs):
        raise kc.NotSupported("K too small for me")
    with pytest.raises(kc.ScoreError, match="nothing was scored: the kernel declined all 6"):
        kc.check(decline, cases=["t15-*"])
    res = kc.check(decline, cases=["t15-*"], expect_declines=["t15-*"])
    assert len(res) == 6 and all(r.verdict == "NotSupported" and r.skipped for r in res)
    assert "K too small for me" in res[0].reason


def test_undeclared_declines_fail(kda):
    def no_gdn(problem, inputs):
        if problem.family == "gdn":
            raise kc.NotSupported("gdn is not mine")
        return kc.reference(problem, inputs)
    res = kc.check(no_gdn, cases=["t17-gdn", "t15-*"], expect_declines=["t15-*"])
    gdn = [r for r in res if r.base_case == "t17-gdn"]
    assert gdn and all(r.verdict == "Fail" and "not in expect_declines" in r.reason
                       for r in gdn), kc.summary(res)
    assert all(r.verdict == "Pass" for r in res if r.base_case != "t17-gdn")


def test_input_dtype_declines_cases_it_cannot_hold(kda):
    calls = []

    def bf16_kernel(problem, inputs):
        calls.append(1)
        return kc.reference(problem, inputs)
    res = kc.check(bf16_kernel, cls="bf16", cases=["disc-beta-bf16"], input_dtype="bfloat16",
                   expect_declines=["disc-beta-bf16"])
    main = [r for r in res if not r.serving][0]
    assert main.verdict == "NotSupported" and not calls
    assert "inputs are f32, the kernel takes bf16 inputs (" in main.reason
    assert "is not exact in bf16" in main.reason
    with pytest.raises(ValueError, match="input_dtype"):
        kc.check(bf16_kernel, input_dtype="int8")


def test_runner_args(kda):
    with pytest.raises(kc.ScoreError, match="unknown|unrecognized|invalid|option"):
        kc.check(numpy_kernel, cases=["t17-gdn"], runner_args=["--no-such-option"])
    res = kc.check(numpy_kernel, cases=["t17-gdn"], runner_args=["--strict"])
    assert [r.verdict for r in res] == ["Pass"] * 6


def test_bad_arguments(kda):
    with pytest.raises(ValueError, match="cls"):
        kc.check(numpy_kernel, cls="fp8")
    with pytest.raises(kc.ScoreError, match="plain name"):
        kc.check(numpy_kernel, level="../L1")
    with pytest.raises(kc.ScoreError, match="golden set L99 not found: .* holds .*L1"):
        kc.check(numpy_kernel, level="L99")
    with pytest.raises(kc.ScoreError, match="nothing"):       # a typo in a filter
        kc.check(numpy_kernel, cases=["t17-gnd"])
    with pytest.raises(TypeError, match="expect_declines"):
        kc.check(numpy_kernel, expect_declines="t17-*")


def test_a_missing_judge_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("KDA_BIN", str(tmp_path / "nope"))
    with pytest.raises(kc.ScoreError, match="KDA_BIN"):
        kc.check(numpy_kernel)
    monkeypatch.delenv("KDA_BIN")
    monkeypatch.setenv("KDA_GOLDEN", str(tmp_path / "no-golden"))
    with pytest.raises(kc.ScoreError, match="golden --where: .*no-golden"):
        kc.check(numpy_kernel)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("KDA_GOLDEN", str(tmp_path / "empty"))
    with pytest.raises(kc.ScoreError, match="golden set L1 not found: .*empty .* holds no set"):
        kc.check(numpy_kernel)


def test_the_package_asks_kda_where_its_golden_sets_are(kda):
    assert kc.golden_root(kda) == os.path.dirname(kc.find_golden("L1", kda))
    site = os.environ.get("KDA_EXPECT_SITE")
    if site:             # make check-python: the wheel's own kda and golden sets
        judge = os.path.join(os.path.realpath(site), "kda_conform", "_judge")
        assert os.path.realpath(kda) == os.path.join(judge, "bin", "kda")
        assert os.path.realpath(kc.golden_root(kda)) == os.path.join(judge, "golden")


def test_workdir_keeps_files(kda, tmp_path):
    res = kc.check(numpy_kernel, cases=["t17-gdn"], workdir=str(tmp_path))
    assert [r.verdict for r in res] == ["Pass"] * 6
    assert os.path.exists(tmp_path / "results" / "t17-gdn.npz")
    assert os.path.exists(tmp_path / "report" / "results.jsonl")
    assert os.stat(tmp_path / "results" / "t17-gdn.npz").st_mode & 0o777 == \
        0o666 & ~_umask()


def _umask():
    m = os.umask(0o022)
    os.umask(m)
    return m


def test_case_result_check_fails_with_the_runner_message():
    r = kc.CaseResult("x", "Fail", "o error 2e6 fp32 units > 64 allowed")
    with pytest.raises(AssertionError, match="x: Fail -- o error 2e6"):
        r.check()
    kc.CaseResult("y", "Pass").check()

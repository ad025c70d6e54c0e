# test_plugin.py: the pytest plugin as a kernel author meets it: L1 through it, five bugs, failing closed.
# SPDX-License-Identifier: MIT
"""Each test writes an author's test module and runs pytest on it in a subprocess (pytester),
so the plugin is loaded through its pytest11 entry point from the installed package."""
import json
import re
import subprocess

import numpy as np
import pytest

import author
import kda_conform as kc
from conftest import HERE

HEADER = f"import sys\nsys.path.insert(0, {HERE!r})\nimport kda_conform, author\n"


def _run(pytester, body, *args):
    pytester.makepyfile(test_author=HEADER + body)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                                         *args)


@pytest.mark.slow
def test_the_author_kernel_passes_l1(pytester, tmp_path):
    out = tmp_path / "reports"
    r = _run(pytester, 'test_l1 = kda_conform.suite(author.kernel, level="L1", cls="fp32")\n',
             "-q", "--kda-out", str(out))
    r.assert_outcomes(passed=310)
    assert r.ret == 0
    r.stdout.fnmatch_lines(["test_author.test_l1: 310 passed, 0 failed, 0 skipped, 0 warnings"])
    rep = out / "test_author.test_l1" / "report"
    recs = [json.loads(x) for x in (rep / "results.jsonl").read_text().splitlines()]
    assert len(recs) == 310 and {x["verdict"] for x in recs} == {"Pass"}
    assert (rep / "junit.xml").read_text().count("<testcase") == 310
    assert json.loads((rep / "summary.json").read_text())["exit_status"] == 0


def test_collection_runs_nothing_and_is_fast(pytester):
    """--collect-only on L1: 310 tests from the manifests, the kernel never called, in well
    under a second of pytest's own collection time (best of 2: the machine's pace, not a
    neighbour's load)."""
    pytester.makepyfile(test_author=HEADER + "def boom(p, a):\n    raise AssertionError('ran')\n"
                        "test_l1 = kda_conform.suite(boom, level='L1')\n")
    took = []
    for _ in range(2):
        r = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider",
                                          "-p", "no:hypothesispytest")
        assert r.ret == 0
        m = re.search(r"^310 tests collected in ([0-9.]+)s", r.stdout.str(), re.M)
        assert m, r.stdout.str()[-500:]
        took.append(float(m.group(1)))
    r.stdout.fnmatch_lines(["test_author.py::test_l1::beta-neg-eigval",
                            "test_author.py::test_l1::t17-gdn.resume-11"])
    assert min(took) < 1.0, f"collecting golden/L1 took {took} s"


def test_one_case_by_k(pytester, tmp_path, golden_l1, kda):
    out = tmp_path / "reports"
    r = _run(pytester, "test_l1 = kda_conform.suite(author.kernel)\n", "-q", "-k",
             "t17-gdn and not causal", "--kda-out", str(out))
    r.assert_outcomes(passed=4, deselected=306)
    r.stdout.fnmatch_lines(["test_author.test_l1: 4 passed, 0 failed, 0 skipped, 0 warnings"])
    rep = out / "test_author.test_l1" / "report" / "results.jsonl"
    assert sorted(json.loads(x)["case"] for x in rep.read_text().splitlines()) == \
        ["t17-gdn", "t17-gdn.decode", "t17-gdn.resume-11", "t17-gdn.spec-11"]
    # The count line is the runner's own, scoring the same results.
    p = subprocess.run([kda, "conform", "-q", "--candidate",
                        str(out / "test_author.test_l1" / "work" / "results"), "-k", "t17-gdn",
                        "-k", "!t17-gdn.causal-*", golden_l1], capture_output=True, text=True)
    assert p.stdout.strip().splitlines()[-1] == "4 passed, 0 failed, 0 skipped, 0 warnings"
    r = _run(pytester, "test_l1 = kda_conform.suite(author.kernel)\n", "-q", "-k",
             "t17-gdn.decode", "--kda-out", str(out))      # the same folder, one prompt now
    r.assert_outcomes(passed=1, deselected=309)
    assert [json.loads(x)["case"] for x in rep.read_text().splitlines()] == ["t17-gdn.decode"]


def test_flags_are_keywords_and_x_stops(pytester):
    bug = "test_l1 = kda_conform.suite(author.buggy('no_decay'))\n"
    r = _run(pytester, bug, "-q", "-x", "-k", "DECAY_VALUE_AXIS")
    r.assert_outcomes(failed=1)
    assert r.ret == 1


def test_last_failed_reruns_only_the_failed_prompts(pytester):
    """--lf (pytest's cache): a run with the transposed-state bug, then --lf runs exactly the
    prompts that failed, by the same names."""
    pytester.makepyfile(test_author=HEADER + "test_l1 = kda_conform.suite("
                        "author.buggy('transposed_state'), cases=['*-vk', 'disc-transposed*'])\n")
    args = ("-p", "no:hypothesispytest", "-q", "-rf")
    r = pytester.runpytest_subprocess(*args)
    failed = sorted(re.findall(r"^FAILED test_author.py::test_l1::(\S+)", r.stdout.str(), re.M))
    outcomes = r.parseoutcomes()
    assert failed and outcomes.get("passed", 0) > 0 and len(failed) == outcomes["failed"]
    r = pytester.runpytest_subprocess(*args, "--lf")
    r.assert_outcomes(failed=len(failed), deselected=outcomes["passed"])
    assert sorted(re.findall(r"^FAILED test_author.py::test_l1::(\S+)", r.stdout.str(),
                             re.M)) == failed
    assert "disc-transposed-state" in failed


# The case designed to catch each bug (or, where no case names the mistake, one that shows it).
DESIGNED = {"no_decay": "disc-decay-value-axis", "l2_eps": "disc-l2-convention",
            "transposed_state": "disc-transposed-state", "beta_raw": "beta-neg-eigval",
            "checkpoint_late": "t64-softplus-h0"}


def _run_bug(case_id, bug, golden_l1, kda, tmp_path):
    """The case, the buggy kernel's outputs and the float64 reference's, computed here,
    independently of the runner."""
    d = tmp_path / case_id
    kc.export_prompts(golden_l1, str(d), kda, filters=[case_id, f"!{case_id}.*"])
    c = kc.read_case(str(d / f"{case_id}.npz"))
    return c, author.kernel(c.problem, c.inputs, bug=bug), kc.reference(c.problem, c.inputs)


def _first_bad(c, got, ref):
    """Where the buggy kernel first leaves the reference: the text of its failure line's
    location."""
    cu = np.asarray(c.inputs.get("cu_seqlens", [0, c.problem.T]))
    for m in ("o", "ht", "hc"):
        if m not in got:
            continue
        diff = np.abs(got[m] - ref[m]) > 1e-6 * np.abs(ref[m]).max()
        if not diff.any():
            continue
        idx = np.unravel_index(int(np.argmax(diff.ravel())), diff.shape)
        if m == "o":
            t, hv, j = (int(x) for x in idx)
            seq = int(np.searchsorted(cu, t, side="right") - 1)
            return f"o[t={t} seq={seq} hv={hv} j={j}]"
        a, hv, x, y = (int(v) for v in idx)
        i, j = (y, x) if c.problem.state_layout == "vk" else (x, y)
        return f"{m}[{'seq' if m == 'ht' else 'ckpt'}={a} hv={hv} i={i} j={j}]"
    raise AssertionError(f"the bug changes nothing on {c.id}")


WORST = re.compile(r"^    worst (o|ht|hc)\[(?:t|seq|ckpt)=(\d+) (?:seq=\d+ )?hv=(\d+) "
                   r"(?:i=(\d+) )?j=(\d+)\]  expected (\S+) \(\S+\)  observed (\S+) \(\S+\)  "
                   r"error (\S+) fp32 units, allowed (\S+) = cap 64 x allowance (\S+)$", re.M)


def _check_worst(msg, c, got, ref):
    """The worst line names an element where the kernel's value and the reference's are the
    ones printed (observed exactly: the kernel's float64 result is scored as written)."""
    m = WORST.search(msg)
    assert m, msg
    q, a, hv, i, j = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4), int(m.group(5))
    if q == "o":
        idx = (a, hv, j)
    else:
        i = int(i)
        idx = (a, hv, j, i) if c.problem.state_layout == "vk" else (a, hv, i, j)
    expected, observed = float.fromhex(m.group(6)), float.fromhex(m.group(7))
    assert observed == got[q][idx], (m.group(0), got[q][idx])
    scale = 1.0 + np.abs(ref[q]).max()
    assert abs(expected - ref[q][idx]) < 1e-9 * scale, (m.group(0), ref[q][idx])
    assert float(m.group(8)) > float(m.group(9)) >= 64 and float(m.group(10)) >= 1


def test_five_bugs_fail_naming_where_and_the_case_intent(pytester, golden_l1, kda, tmp_path):
    """Each bug fails its case with the runner's words: the first failing elements (token,
    sequence, head, channel), the worst one with expected and observed values, its error and
    what was allowed (cap x allowance), what a unit is there, ref-f32's error near it, and the
    case's comment, flags and, for a disc-* case, the defect it was designed to catch."""
    body = "".join(f"test_{b} = kda_conform.suite(author.buggy({b!r}), "
                   f"cases=[{cid!r}, '!{cid}.*'])\n" for b, cid in DESIGNED.items())
    r = _run(pytester, body, "-q", "-rN")
    r.assert_outcomes(failed=5)
    text = r.stdout.str()
    cases = {x.id: x for x in kc.list_cases(golden_l1, kda)}
    for bug, cid in DESIGNED.items():
        head = f"_ test_{bug}::{cid} _"
        assert head in text, text[-3000:]
        msg = text.split(head, 1)[1].split("\n____", 1)[0].split("\n====", 1)[0]
        c, got, ref = _run_bug(cid, bug, golden_l1, kda, tmp_path)
        where = _first_bad(c, got, ref)
        assert f"\n    {where}  expected " in msg, f"{bug}: {where} not in\n{msg}"
        _check_worst(msg, c, got, ref)
        assert f"FAIL    candidate    {cid}" in msg, msg
        assert re.search(r"^    a fp32 unit there is (u M = \S+: u = 0x1p-24 the class's unit "
                         r"roundoff|\S+, the smallest subnormal of the output format)", msg,
                         re.M), msg
        assert re.search(r"^    ref-f32 on the same prompt: \S+ fp32 units near that element",
                         msg, re.M), msg
        case_line = f"    case: {cases[cid].comment} (flags: {', '.join(cases[cid].flags)})"
        assert case_line in msg, msg
        if cid.startswith("disc-"):
            assert cases[cid].intent.startswith(cases[cid].flags[-1] + ": Exposes")
            assert f"{case_line}; designed to catch: {cases[cid].intent}" in msg, msg


def test_a_missing_golden_set_fails(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("KDA_GOLDEN", str(tmp_path / "no-golden"))
    r = _run(pytester, "test_l1 = kda_conform.suite(author.kernel)\n", "-q")
    r.assert_outcomes(failed=1)
    assert r.ret == 1
    r.stdout.fnmatch_lines(["*kda-conform cannot judge this suite: *golden --where*no-golden*"])


def test_nothing_scored_fails_unless_the_declines_are_declared(pytester):
    body = ("def no(p, a):\n    raise kda_conform.NotSupported('not my shapes')\n"
            "test_l1 = kda_conform.suite(no, cases=['t15-*'])\n")
    r = _run(pytester, body, "-q", "-rs")
    r.assert_outcomes(skipped=6)
    assert r.ret == 5
    r.stdout.fnmatch_lines(["*nothing was scored: every prompt was declined*",
                            "*NotSupported -- candidate: not supported: not my shapes*"])
    body = body.replace("cases=['t15-*'])", "cases=['t15-*'], expect_declines=['t15-*'])")
    r = _run(pytester, body, "-q")
    r.assert_outcomes(skipped=6)
    assert r.ret == 0


def test_an_undeclared_decline_and_a_kernel_exception_fail_plainly(pytester):
    body = ("def k(p, a):\n"
            "    if p.family == 'gdn':\n        raise kda_conform.NotSupported('no gdn')\n"
            "    raise ValueError('boom in my kernel')\n"
            "test_l1 = kda_conform.suite(k, cases=['t17-gdn', 't15-*', '!*.*'], "
            "expect_declines=['t15-*'])\n")
    r = _run(pytester, body, "-q")
    r.assert_outcomes(failed=2)
    text = r.stdout.str()
    assert "t17-gdn: declined, and not in expect_declines ['t15-*']" in text
    assert "ValueError: boom in my kernel" in text
    assert "cannot open" not in text and "runner:" not in text


def test_pytest_xdist_runs_prompts_apart(pytester):
    pytest.importorskip("xdist")
    r = _run(pytester, "test_l1 = kda_conform.suite(author.kernel, cases=['t17-gdn'])\n",
             "-q", "-n", "2")
    r.assert_outcomes(passed=6)
    r.stdout.fnmatch_lines(["test_author.test_l1: 6 passed, 0 failed, 0 skipped, 0 warnings"])

# test_reports.py: tools/reports/ (the kernel-report scripts) on the CPU: arguments, sharding, tables, stand-in runs.
# SPDX-License-Identifier: MIT
"""The GPU-free half of the report scripts (docs/reports/README.md): argument handling, the
case filter, the sharding, the regression table, and whole runs of the scripts with the
numpy stand-ins of fakes.py (`--stand-in`), including a deliberately wrong kernel whose
failures must reach the tables."""
import os
import subprocess
import sys

import pytest

from conftest import REPO

TOOLS = os.path.join(REPO, "tools", "reports")
sys.path.insert(0, TOOLS)
import reportlib as R  # noqa: E402


def _run(script, kda, tmp, *args):
    env = dict(os.environ, KDA_BIN=kda)
    p = subprocess.run([sys.executable, os.path.join(TOOLS, script), "--stand-in", "--jobs", "2",
                        "--work", str(tmp), "--kda", kda, *args],
                       capture_output=True, text=True, env=env, timeout=300)
    return p


def test_shard_balances_and_keeps_every_item():
    items = [(f"f{i}", c) for i, c in enumerate([9, 7, 5, 5, 3, 1, 1, 1])]
    groups = R.shard(items, 3)
    assert sorted(x for g in groups for x in g) == sorted(p for p, _ in items)
    cost = dict(items)
    loads = [sum(cost[x] for x in g) for g in groups]
    assert max(loads) - min(loads) <= 2, loads
    assert R.shard(items, 3) == groups                       # deterministic
    assert R.shard(items[:2], 8) == [["f0"], ["f1"]]          # no empty shards
    assert R.shard([], 4) == []


@pytest.mark.parametrize("case,globs,want", [
    ("t17-gdn", [], True),
    ("t17-gdn.resume-11", ["t17-*"], True),
    ("t17-gdn.causal-qv", ["!t17-gdn"], False),
    ("p32-lb-64k", ["!p32-lb-64k"], False),
    ("p32-softplus-64k", ["!p32-lb-64k"], True),
    ("t5000-long", ["t1*", "!t17-*"], False),
])
def test_case_selected(case, globs, want):
    assert R.case_selected(case, globs) is want


def test_arguments_refused():
    runs = [R.Run("a", "float32", ("fp32",), None)]
    with pytest.raises(SystemExit):
        R.parse_args("x", runs, ["--checkout", "/nonexistent/dir"])
    with pytest.raises(SystemExit):
        R.parse_args("x", runs, ["--stand-in", "--runs", "b"], needs_checkout=False)
    with pytest.raises(SystemExit):
        R.parse_args("x", runs, ["--stand-in", "--sets", "L9"], needs_checkout=False)
    with pytest.raises(SystemExit):
        R.parse_args("x", runs, ["--stand-in", "--jobs", "0"], needs_checkout=False)
    a = R.parse_args("x", runs, ["--stand-in", "--sets", "prod,L1"], needs_checkout=False)
    assert a.sets == ["prod", "L1"] and a.runs == ["a"]


def test_tiny_descriptions():
    for cid, desc, _ in R.PROD_CASES:
        t = R.tiny(desc).split()
        assert ("T=64" in t or "seqlens=40,0,24" in t) and "H=2" in t, cid
        assert "K=128" in t and "V=128" in t


def test_history_appends_once(tmp_path):
    h = tmp_path / "history.md"
    h.write_text("# History\n")
    R.append_history(str(h), ["| a | 1 |", "| b | 2 |"])
    R.append_history(str(h), ["| b | 2 |", "| c | 3 |"])
    lines = h.read_text().splitlines()
    assert lines[0] == "# History" and lines.count(R.HISTORY_HEAD[0]) == 1
    assert [l for l in lines if l.startswith("| ") and l[2] in "abc"] == \
        ["| a | 1 |", "| b | 2 |", "| c | 3 |"]


@pytest.mark.slow
def test_stand_in_runs_every_set(kda, tmp_path):
    p = _run("report_sglang.py", kda, tmp_path, "-k", "t17-gdn", "-k", "t1-softplus-gqa",
             "-k", "p32-softplus-2k", "-k", "p32-lb-2k", "-k", "p32-softplus-64k",
             "--history", str(tmp_path / "h.md"))
    assert p.returncode == 0, p.stderr + p.stdout
    rows = {l.split("|")[6].strip(): l for l in (tmp_path / "h.md").read_text().splitlines()
            if l.startswith("| sglang")}
    assert set(rows) == {"L1", "prod", "prod64k"}
    cells = lambda s: [c.strip() for c in rows[s].split("|")]  # noqa: E731
    # L1: t17-gdn and its 6 serving prompts, t1-softplus-gqa (T = 1: no serving prompt)
    assert cells("L1")[7:10] == ["8", "0", "0"], rows["L1"]
    # prod: softplus 2k and its 8 serving prompts pass; the lower_bound case is declined
    assert cells("prod")[7:10] == ["8", "0", "8"], rows["prod"]
    assert cells("prod64k")[7:10] == ["1", "0", "0"], rows["prod64k"]
    table = (tmp_path / "out" / "decode-fp32.fp32.md").read_text()
    assert "`p32-lb-2k` | NotSupported" in table and "lower_bound" in table


BROKEN = '''
import os, sys
sys.path.insert(0, {tools!r})
import reportlib as R


def make(checkout, stand_in):
    sys.path.insert(0, os.path.join(R.REPO, "python", "tests"))
    import fakes
    from kda_conform import fla
    good = fla.adapter(fakes.fused_recurrent_kda, kernel="recurrent", array="numpy")

    def broken(p, a):
        out = good(p, a)
        if p.T > 8:
            out["o"] = out["o"] * 1.001                  # the deliberate bug
        return out
    return broken


RUNS = (R.Run("broken", "float32", ("fp32",), make),)
if __name__ == "__main__":
    sys.exit(R.main("broken", __file__, RUNS, needs_checkout=False))
'''


@pytest.mark.slow
def test_a_wrong_kernel_reaches_the_tables(kda, tmp_path):
    script = tmp_path / "report_broken.py"
    script.write_text(BROKEN.format(tools=TOOLS))
    env = dict(os.environ, KDA_BIN=kda)
    p = subprocess.run([sys.executable, str(script), "--stand-in", "--jobs", "2", "--work",
                        str(tmp_path / "w"), "--kda", kda, "--sets", "L1", "-k", "t17-gdn",
                        "-k", "t1-softplus-gqa"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    row = [l for l in p.stdout.splitlines() if l.startswith("| broken")][0]
    cells = [c.strip() for c in row.split("|")]
    # prompts of at most 8 tokens pass (t1-softplus-gqa, t17-gdn.resume-11 with 6 tokens,
    # .decode with 1, .spec-11 with 4 drafts); the 4 longer ones fail
    assert cells[7:10] == ["4", "4", "0"], row
    assert cells[10].startswith("t17-gdn"), row

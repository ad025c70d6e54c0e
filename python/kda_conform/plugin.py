# kda_conform.plugin: the pytest plugin: one test per case and serving prompt of a golden set.
# SPDX-License-Identifier: MIT
"""Loaded by pytest through the `pytest11` entry point of kda-conform.  A test module says

    import kda_conform
    from mykernels import my_kernel
    test_kda = kda_conform.suite(my_kernel, level="L1", cls="bf16")

and collection lists one test per case and serving prompt from the golden set's manifests
(`kda conform --list-cases --json`, nothing run), named as the runner names them:
`test_kda.py::test_kda::t17-gdn`, `...::t17-gdn.resume-11`.  Each test exports its own
prompt, calls the kernel and has the runner score it, so `-k`, `-x`, `--lf` and
pytest-xdist work per prompt; a Fail shows the runner's report of the case.  Flags are
keywords (`-k OTHER_L2_CONVENTION`).  The run ends with the runner's count line;
`--kda-out DIR` has the runner write its results.jsonl, summary.json and junit.xml of the
prompts that ran into DIR/<module>.<suite>/.

Fail closed: a missing kda or golden set is a failing test saying so; a run whose every
prompt was declined (NotSupported) exits 5, as `kda conform` does, unless the suite
declared those declines (`expect_declines`); with `expect_declines`, an undeclared decline
is a failing test.
"""
from __future__ import annotations

import os
import re
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from .check import Suite, declared
from .one import Outcome, Workspace, run_one
from .score import CaseInfo, ScoreError, find_golden, find_kda, list_cases, score

# user_properties key; its value: (suite id, prompt, verdict, decline declared, golden dir,
# class, kda, case id, the case's prompt ids)
_KEY = "kda_conform"


class KdaFailure(Exception):
    """A prompt the runner did not pass: its message is the runner's report."""


def pytest_addoption(parser: Any) -> None:
    g = parser.getgroup("kda-conform", "kda-conform (KDA kernels against the golden sets)")
    g.addoption("--kda-out", metavar="DIR", default=None,
                help="write the runner's results.jsonl, summary.json and junit.xml of the "
                     "prompts that ran into DIR/<module>.<suite>/")


def pytest_pycollect_makeitem(collector: Any, name: str, obj: Any) -> Any:
    if isinstance(obj, Suite) and collector.funcnamefilter(name):
        return SuiteCollector.from_parent(collector, name=name, suite=obj)
    return None


def _suite_id(nodeid: str) -> str:
    """"dir/test_x.py::test_kda" -> "test_x.test_kda" (a folder name)."""
    path, _, name = nodeid.partition("::")
    stem = os.path.splitext(os.path.basename(path))[0]
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{stem}.{name}")


class SuiteCollector(pytest.Collector):
    """The tests of one Suite: its golden set's cases and serving prompts."""

    def __init__(self, *, suite: Suite, **kw: Any) -> None:
        super().__init__(**kw)
        self.suite = suite
        self.kda: Optional[str] = None
        self.golden: Optional[str] = None

    def collect(self) -> Iterator[pytest.Item]:
        s = self.suite
        try:
            self.kda = find_kda(s.kda)
            self.golden = s.golden or find_golden(s.level, self.kda)
            cases = list_cases(self.golden, self.kda, s.cases)
        except ScoreError as e:
            yield MissingJudge.from_parent(self, name="kda-conform", why=str(e))
            return
        if not cases:
            yield MissingJudge.from_parent(
                self, name="kda-conform",
                why=f"no case of {self.golden} is selected by {list(s.cases or [])}")
            return
        for c in cases:
            ids = ([c.id] if c.selected else []) + c.prompts
            for pid in ids:
                item = PromptItem.from_parent(self, name=pid, case=c)
                item.extra_keyword_matches.update(c.flags)
                yield item


class MissingJudge(pytest.Item):
    """Stands for a suite that cannot be judged: fails with the reason, never skips."""

    def __init__(self, *, why: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.why = why

    def runtest(self) -> None:
        raise KdaFailure(self.why)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, KdaFailure):
            return f"kda-conform cannot judge this suite: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> Tuple[Any, Optional[int], str]:
        return self.path, None, f"{self.parent.name}: kda-conform"


def _workspace(config: Any, suite_id: str) -> Workspace:
    """Results of a suite: under --kda-out (shared by xdist workers, read by the final
    runner call), else in this process's temporary folder."""
    out = config.getoption("kda_out")
    if out:
        return Workspace(os.path.join(os.path.abspath(out), suite_id, "work"))
    ws = getattr(config, "_kda_tmp", None)
    if ws is None:
        ws = config._kda_tmp = tempfile.mkdtemp(prefix="kda_conform.")
    return Workspace(os.path.join(ws, suite_id))


class PromptItem(pytest.Item):
    """One case or serving prompt: export it, call the kernel, have the runner score it."""

    def __init__(self, *, case: CaseInfo, **kw: Any) -> None:
        super().__init__(**kw)
        self.case = case
        self.outcome: Optional[Outcome] = None

    def _record(self, verdict: str, is_declared: bool = False) -> None:
        col: SuiteCollector = self.parent
        self.user_properties.append(
            (_KEY, (_suite_id(col.nodeid), self.name, verdict, is_declared, col.golden,
                    col.suite.cls, col.kda, self.case.id, tuple(self.case.prompts))))

    def runtest(self) -> None:
        col: SuiteCollector = self.parent
        s = col.suite
        ws = _workspace(self.config, _suite_id(col.nodeid))
        out = run_one(s.kernel, self.case, self.name, ws, cls=s.cls, kda=col.kda,
                      input_dtype=s.input_dtype, backend=s.backend, runner_args=s.runner_args)
        self.outcome = out
        if out.error is not None:
            self._record("Fail")
            raise out.error
        r = out.result
        if r.skipped:
            if s.expect_declines is not None and not declared(r.case, s.expect_declines):
                self._record("Fail")
                raise KdaFailure(f"{r.case}: declined, and not in expect_declines "
                                 f"{list(s.expect_declines)}: {r.reason}")
            self._record(r.verdict, s.expect_declines is not None)
            pytest.skip(f"{r.case}: NotSupported -- {r.reason}")
        self._record(r.verdict)
        if not r.ok:
            raise KdaFailure(out.text or r.message)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, KdaFailure):     # the runner's own words
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> Tuple[Any, Optional[int], str]:
        return self.path, None, f"{self.parent.name}::{self.name}"


# ---- The run's end: the runner's count line, exit 5 when nothing was scored, --kda-out.

def _tally(runs: List[tuple]) -> str:
    """The runner's count line (kda_tally_add, kda_report_final): passed (Pass,
    QualityWarning), failed (Fail, Crash, Timeout), skipped (NotSupported, Waived), and the
    QualityWarnings among the passed."""
    p = sum(v[2] in ("Pass", "QualityWarning") for v in runs)
    f = sum(v[2] in ("Fail", "Crash", "Timeout") for v in runs)
    w = sum(v[2] == "QualityWarning" for v in runs)
    return (f"{p} passed, {f} failed, {len(runs) - p - f} skipped, {w} warning"
            + ("" if w == 1 else "s"))


def _nothing_scored(runs: List[tuple]) -> bool:
    """Every prompt declined, and not every decline declared (the runner's exit 5)."""
    return bool(runs) and all(v[2] == "NotSupported" for v in runs) and \
        not all(v[3] for v in runs)


class _RunState:
    """What the prompts of this session (or, under xdist, of its workers) ended with."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.runs: Dict[str, List[tuple]] = {}
        self.report_error = ""

    def pytest_runtest_logreport(self, report: Any) -> None:
        for key, val in getattr(report, "user_properties", ()):
            if key == _KEY and report.when == "call":
                self.runs.setdefault(val[0], []).append(tuple(val))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput"):       # an xdist worker: the controller ends
            return
        if any(_nothing_scored(vs) for vs in self.runs.values()) and session.exitstatus == 0:
            session.exitstatus = 5
        out = self.config.getoption("kda_out")
        if out and self.runs:
            self._write_reports(os.path.abspath(out))

    def _write_reports(self, out: str) -> None:
        """The runner's own reports of the prompts that ran: one scoring pass over their
        result files, -k naming each."""
        for sid, vs in self.runs.items():
            d = os.path.join(out, sid)
            ran = {v[1] for v in vs}
            filters = sorted(ran)          # a case id selects its prompts too: drop those
            for v in vs:                   # of its prompts that did not run here
                if v[1] == v[7]:
                    filters += [f"!{p}" for p in v[8] if p not in ran]
            try:
                score(Workspace(os.path.join(d, "work")).results, vs[0][4],
                      os.path.join(d, "report"), cls=vs[0][5], filters=filters,
                      kda=vs[0][6])
            except ScoreError as e:
                self.report_error = f"{sid}: {e}"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.runs:
            return
        tr = terminalreporter
        tr.write_sep("=", "kda-conform")
        for sid, vs in self.runs.items():
            tr.write_line(f"{sid}: {_tally(vs)}")
            if _nothing_scored(vs):
                tr.write_line(f"{sid}: nothing was scored: every prompt was declined (exit "
                              "status 5); declare the expected declines with "
                              "expect_declines=[...]")
        out = self.config.getoption("kda_out")
        if out:
            tr.write_line(f"kda-conform reports: {self.report_error}" if self.report_error
                          else "kda-conform reports (results.jsonl, summary.json, junit.xml) "
                          f"in {os.path.abspath(out)}/<suite>/report")


def pytest_configure(config: Any) -> None:
    config.pluginmanager.register(_RunState(config), "kda_conform_state")

# kda_conform.check: one call from a test: export prompts, run the kernel, score, per-case verdicts.
# SPDX-License-Identifier: MIT
"""`check(kernel, level="L1", cls="bf16")` runs a kernel over a golden set and returns the
runner's verdict for every case; `pytest_cases(...)` gives the same as `pytest.param`s so
that each case is its own test:

    @pytest.mark.parametrize("case", kda_conform.pytest_cases(my_kernel, cls="bf16"))
    def test_kda(case):
        case.check()
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import run as _run
from .score import CaseResult, ScoreError, export_prompts, find_golden, find_kda, score

CLASSES = ("fp64", "fp32", "tf32", "bf16", "fp16")
_cache: Dict[Tuple[Any, ...], List[CaseResult]] = {}


def check(kernel: Any, level: str = "L1", cls: str = "fp32",
          cases: Optional[Sequence[str]] = None, *, golden: Optional[str] = None,
          kda: Optional[str] = None, workdir: Optional[str] = None,
          backend: str = "python", runner_args: Sequence[str] = ()) -> List[CaseResult]:
    """Score `kernel` (the interface of kda_conform.run) on golden set `level` in precision
    class `cls`.  `cases`: `-k` globs of `kda conform` (ids, `flag:GLOB`, `!GLOB`).
    `golden`: the set's directory (default: found by find_golden).  `workdir`: keep the
    prompts, results and reports there (default: a temporary directory, removed).
    `runner_args`: more options for `kda conform` (e.g. ["--strict", "--waivers", FILE]).
    Returns one CaseResult per scored case, in the runner's order; a case whose kernel
    raised carries that exception in its reason."""
    if cls not in CLASSES:
        raise ValueError(f"cls {cls!r} is not one of {CLASSES}")
    if isinstance(cases, str):
        cases = [cases]
    exe = find_kda(kda)
    gold = golden or find_golden(level, exe)
    tmp = None
    if workdir is None:
        tmp = workdir = tempfile.mkdtemp(prefix="kda_conform.")
    try:
        prompts = os.path.join(workdir, "prompts")
        results = os.path.join(workdir, "results")
        report_dir = os.path.join(workdir, "report")
        for d in (results, report_dir):
            os.makedirs(d, exist_ok=True)
        export_prompts(gold, prompts, exe)
        ran = _run.run(kernel, prompts, results, cases=cases, backend=backend)
        rep = score(results, gold, report_dir, cls=cls, filters=cases, kda=exe,
                    extra=runner_args)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    for r in rep.results:
        if r.case in ran.errors:
            r.reason = f"kernel raised {ran.errors[r.case]}" + (
                f"; runner: {r.reason}" if r.reason else "")
        elif r.case in ran.not_supported and not r.skipped:
            # A runner that does not know not_supported scores the declining file as a Fail.
            r.reason += f" (the candidate declined: {ran.not_supported[r.case]})"
    return rep.results


def pytest_cases(kernel: Any, level: str = "L1", cls: str = "fp32",
                 cases: Optional[Sequence[str]] = None, **kw: Any) -> List[Any]:
    """`check(...)` as a list of `pytest.param(result, id=case)`, run once per process for
    the same arguments (collection calls it).  When kda or the golden set is missing, one
    param that skips with the reason."""
    import pytest
    key = (id(kernel), level, cls, tuple(cases or ()),
           tuple(sorted((k, repr(v)) for k, v in kw.items())))
    if key not in _cache:
        try:
            _cache[key] = check(kernel, level, cls, cases, **kw)
        except ScoreError as e:
            return [pytest.param(None, id="kda-conform",
                                 marks=pytest.mark.skip(reason=str(e)))]
    return [pytest.param(r, id=r.case) for r in _cache[key]]


def summary(results: Sequence[CaseResult]) -> str:
    """One line per non-passing case and a count, for an assertion message."""
    bad = [r.message for r in results if not r.ok and not r.skipped]
    skipped = sum(r.skipped for r in results)
    passed = sum(r.ok for r in results)
    head = f"{passed} passed, {len(bad)} failed" + (f", {skipped} skipped" if skipped else "")
    return "\n".join([head] + bad)

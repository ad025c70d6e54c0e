# kda_conform.check: score a kernel on a golden set in one call, or declare a pytest suite of it.
# SPDX-License-Identifier: MIT
"""Two ways to put a kernel before the judge:

    test_kda = kda_conform.suite(my_kernel, level="L1", cls="bf16")   # pytest: one test per prompt

    results = kda_conform.check(my_kernel, level="L1", cls="bf16")    # one call, a list back

Both fail closed: a missing `kda` or golden set is an error (ScoreError here, a failing test
under pytest), a run that scored nothing is an error, and a kernel that declines every case
fails unless the declines were declared (`expect_declines`).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import shutil
import tempfile
from typing import Any, List, Optional, Sequence

from . import grad as _grad
from . import run as _run
from .one import dtype_name
from .score import CaseResult, ScoreError, export_prompts, find_golden, find_kda, score

CLASSES = ("fp64", "fp32", "tf32", "bf16", "fp16")


def declared(case_id: str, expect_declines: Optional[Sequence[str]]) -> bool:
    """Whether a decline of `case_id` was declared: it matches one of the globs (a serving
    prompt "ID.SUFFIX" also matches through its case's id ID)."""
    base = case_id.split(".", 1)[0]
    return any(fnmatch.fnmatchcase(case_id, g) or fnmatch.fnmatchcase(base, g)
               for g in expect_declines or ())


def _check_args(cls: str, expect_declines: Any, input_dtype: Any) -> None:
    if cls not in CLASSES:
        raise ValueError(f"cls {cls!r} is not one of {CLASSES}")
    if isinstance(expect_declines, str):
        raise TypeError("expect_declines is a list of case-id globs, not a string")
    if input_dtype is not None:
        dtype_name(input_dtype)


def _judge(results: List[CaseResult], expect_declines: Optional[Sequence[str]]) -> None:
    """Fail closed on declines: with expect_declines, an undeclared decline is a Fail; without,
    declining every case is an error (as `kda conform` exits 5: nothing was scored)."""
    if expect_declines is not None:
        for r in results:
            if r.skipped and not declared(r.case, expect_declines):
                r.reason = f"declined, and not in expect_declines: {r.reason}"
                r.verdict = "Fail"
    elif results and all(r.skipped for r in results):
        raise ScoreError(f"nothing was scored: the kernel declined all {len(results)} cases "
                         f"(first: {results[0].message}); declare the declines you expect "
                         "with expect_declines=[...] if that is right")


def check(kernel: Any, level: str = "L1", cls: str = "fp32",
          cases: Optional[Sequence[str]] = None, *, golden: Optional[str] = None,
          kda: Optional[str] = None, workdir: Optional[str] = None,
          backend: str = "python", runner_args: Sequence[str] = (),
          input_dtype: Any = None,
          expect_declines: Optional[Sequence[str]] = None,
          backward: bool = False) -> List[CaseResult]:
    """Score `kernel` (the interface of kda_conform.run) on golden set `level` in precision
    class `cls`; one CaseResult per case and serving prompt, in the runner's order.

    `cases`: `-k` patterns of `kda conform` (ids, `flag:GLOB`, `!GLOB`; a serving prompt is
    selected by its own id or its case's id); only the selected prompts are exported.
    `golden`: the set's directory (default: LEVEL under `kda golden --where`).  `workdir`:
    keep the prompts, results and reports there.  `input_dtype`: the dtype the kernel takes
    its inputs in (e.g. "bfloat16"): cases whose q k v g beta are not exact in it are
    NotSupported, as for a plugin with 16-bit input buffers.  `expect_declines`: globs of the
    case ids the kernel is expected to decline; given, any other decline is a Fail; not
    given, declining every case raises ScoreError.  `runner_args`: more `kda conform`
    options (e.g. ["--strict"]).  `backward`: `kernel` is a backward kernel
    (kda_conform.grad; kda_conform.torch.autograd_adapter makes one) whose gradients are
    scored too, in a report `ID.backward` per gradient case (SPEC.md §13.7).  Raises ScoreError when kda or the golden set is missing or
    nothing was scored; a kernel exception is that case's Fail, with its message."""
    _check_args(cls, expect_declines, input_dtype)
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
        export_prompts(gold, prompts, exe, filters=cases)
        runner = _grad.run if backward else _run.run
        ran = runner(kernel, prompts, results, backend=backend, input_dtype=input_dtype)
        rep = score(results, gold, report_dir, cls=cls, filters=cases, kda=exe,
                    extra=runner_args)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    results = rep.results
    if not backward:   # a forward kernel: the gradient reports of gradient cases are not its
        results = [r for r in results if not r.case.endswith(".backward")]
    for r in results:
        if r.case in ran.errors:       # no result file: the exception is the whole story
            r.reason, r.text = f"kernel raised {ran.errors[r.case]}", ""
    _judge(results, expect_declines)
    return results


@dataclasses.dataclass
class Suite:
    """A kernel and what to score it on, collected by the pytest plugin (kda_conform.plugin)
    as one test per case and serving prompt.  Make it with kda_conform.suite(...)."""
    kernel: Any
    level: str = "L1"
    cls: str = "fp32"
    cases: Optional[Sequence[str]] = None
    input_dtype: Any = None
    expect_declines: Optional[Sequence[str]] = None
    golden: Optional[str] = None
    kda: Optional[str] = None
    backend: str = "python"
    runner_args: Sequence[str] = ()


def suite(kernel: Any, level: str = "L1", cls: str = "fp32",
          cases: Optional[Sequence[str]] = None, *, input_dtype: Any = None,
          expect_declines: Optional[Sequence[str]] = None, golden: Optional[str] = None,
          kda: Optional[str] = None, backend: str = "python",
          runner_args: Sequence[str] = ()) -> Suite:
    """A pytest suite: assign it to a name starting with `test` in a test module and the
    plugin collects one test per case and serving prompt of the golden set, named as the
    runner names them (`t17-gdn`, `t17-gdn.resume-11`, ...), listed from the manifests
    without running anything.  Arguments as for check()."""
    _check_args(cls, expect_declines, input_dtype)
    if isinstance(cases, str):
        cases = [cases]
    return Suite(kernel, level, cls, cases, input_dtype, expect_declines, golden, kda, backend,
                 tuple(runner_args))


def summary(results: Sequence[CaseResult]) -> str:
    """The runner's count line, then the runner's report of each failing case (its failure
    detail, as `kda conform` prints it), for an assertion message."""
    bad = [r.text or r.message for r in results if not r.ok and not r.skipped]
    skipped = sum(r.skipped for r in results)
    passed = sum(r.ok for r in results)
    head = f"{passed} passed, {len(bad)} failed" + (f", {skipped} skipped" if skipped else "")
    return "\n".join([head] + bad)

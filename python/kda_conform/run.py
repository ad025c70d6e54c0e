# kda_conform.run: call a kernel on every prompt file and write its result files (SPEC.md §7.9).
# SPDX-License-Identifier: MIT
"""Drive any Python callable over prompt files.

The kernel interface (documented in python/README.md)::

    def my_kernel(problem: kda_conform.Problem, inputs: dict) -> dict | tuple

`inputs` maps the case's members (`q k v g beta A_log dt_bias cu_seqlens h0 checkpoints`,
only those present) to numpy arrays as stored (float members `<f4` or `<f8`, indices
int64), shapes of SPEC.md §2.3, states in `problem.state_layout`.  The kernel returns
`{"o": ..., "ht": ..., "hc": ...}` or a tuple `(o, ht[, hc])` of numpy arrays or torch
tensors (any device; ht when problem.want_final_state, hc when problem.n_checkpoints > 0),
or raises `kda_conform.NotSupported(reason)` to decline the case.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import traceback
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

from .files import CaseError, read_case, write_result

Kernel = Callable[..., Any]


class NotSupported(Exception):
    """Raised by a kernel (or an adapter) to decline a case; the reason is reported."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = str(reason)


@dataclasses.dataclass
class RunReport:
    """What `run` did: result files written, cases declined, cases whose kernel raised."""
    written: List[str] = dataclasses.field(default_factory=list)
    not_supported: Dict[str, str] = dataclasses.field(default_factory=dict)
    errors: Dict[str, str] = dataclasses.field(default_factory=dict)


def selected(case_id: str, patterns: Optional[Sequence[str]]) -> bool:
    """The `-k` rule of `kda conform` on ids: any positive glob selects (all when none is
    given), any `!glob` drops.  (`flag:` patterns are left to the runner.)"""
    if not patterns:
        return True
    pos = [p for p in patterns if not p.startswith("!") and not p.startswith("flag:")]
    neg = [p[1:] for p in patterns if p.startswith("!") and not p.startswith("!flag:")]
    if any(fnmatch.fnmatchcase(case_id, p) for p in neg):
        return False
    return not pos or any(fnmatch.fnmatchcase(case_id, p) for p in pos)


def _outputs(ret: Any) -> Dict[str, Any]:
    if isinstance(ret, dict):
        unknown = set(ret) - {"o", "ht", "hc"}
        if unknown:
            raise TypeError(f"kernel returned unknown keys {sorted(unknown)}")
        return ret
    if isinstance(ret, (tuple, list)) and 1 <= len(ret) <= 3:
        return dict(zip(("o", "ht", "hc"), ret))
    raise TypeError("kernel must return a dict {'o','ht','hc'} or a tuple (o, ht[, hc]), "
                    f"got {type(ret).__name__}")


def _prompt_files(prompts: Union[str, Iterable[str]]) -> List[str]:
    if isinstance(prompts, (str, os.PathLike)):
        prompts = os.fspath(prompts)
        if os.path.isdir(prompts):
            return sorted(os.path.join(prompts, f) for f in os.listdir(prompts)
                          if f.endswith(".npz"))
        return [prompts]
    return [os.fspath(p) for p in prompts]


def run_case(kernel: Kernel, path: str, results: str, report: RunReport,
             backend: str = "python", input_dtype: Any = None, backward: bool = False) -> None:
    """Run the kernel on one prompt file and write `results/<id>.npz` (or record why not).
    With `input_dtype`, a case whose inputs are not exact in it is declined unseen.  With
    `backward`, the kernel is a backward kernel (kda_conform.grad: it gets the prompt's seeds
    and returns gradients too)."""
    from . import grad
    from .one import inexact_inputs
    case = read_case(path)
    out = os.path.join(results, case.id + ".npz")
    try:
        try:
            why = inexact_inputs(case, input_dtype) if input_dtype is not None else ""
            if why:
                raise NotSupported(why)
            if backward:
                ret = kernel(case.problem, dict(case.inputs), grad.read_seeds(path, case.problem))
            else:
                ret = kernel(case.problem, dict(case.inputs))
        except NotSupported as e:
            write_result(out, case.id, not_supported=e.reason, backend=backend)
            report.not_supported[case.id] = e.reason
            return
        if backward:
            grad.write_grad_result(out, case.id, case.problem, ret, backend)
        else:
            write_result(out, case.id, problem=case.problem, backend=backend, **_outputs(ret))
        report.written.append(out)
    except Exception as e:  # the kernel's failure is that case's result, not the run's end
        if os.path.isfile(out) and not os.path.islink(out):
            os.unlink(out)           # never let a stale result be scored for this run
        last = traceback.extract_tb(e.__traceback__)[-1:]
        where = f" at {os.path.basename(last[0].filename)}:{last[0].lineno}" if last else ""
        report.errors[case.id] = f"{type(e).__name__}: {e}{where}"


def run(kernel: Kernel, prompts: Union[str, Iterable[str]], results: str, *,
        cases: Optional[Sequence[str]] = None, backend: str = "python",
        input_dtype: Any = None, backward: bool = False) -> RunReport:
    """Call `kernel` on each prompt file (a directory or a list of files) whose id the
    `cases` globs select, writing `results/<id>.npz` atomically.  A kernel that raises
    NotSupported gets a `not_supported` result; one that raises anything else gets no
    file (the runner scores that as a Fail) and its message is kept in `errors`.  A
    malformed prompt file raises CaseError."""
    os.makedirs(results, exist_ok=True)
    report = RunReport()
    for path in _prompt_files(prompts):
        cid = os.path.basename(path)[:-4] if path.endswith(".npz") else None
        if cid is not None and not selected(cid, cases):
            continue
        run_case(kernel, path, results, report, backend, input_dtype, backward)
    return report


__all__ = ["NotSupported", "RunReport", "run", "run_case", "selected", "CaseError"]

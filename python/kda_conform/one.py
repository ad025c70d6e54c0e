# kda_conform.one: one case or serving prompt end to end: export it alone, call the kernel, score it.
# SPDX-License-Identifier: MIT
"""What one pytest test of the plugin does (kda_conform.plugin), usable without pytest:

    info = kda_conform.list_cases(kda_conform.find_golden("L1"))[0]
    out = kda_conform.one.run_one(my_kernel, info, info.id, Workspace(tmpdir), cls="fp32")

The prompt is exported alone (`kda conform --export-prompts -k ID`), the kernel is called on
it, its result file is written and scored alone (`kda conform --candidate -k ID`): the
runner is the judge of every verdict and writes every message (SPEC.md §7.7, §7.9).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from typing import Any, Optional, Sequence

import numpy as np

from .files import read_case, write_result
from .run import NotSupported, _outputs
from .score import CaseInfo, CaseResult, ScoreError, export_prompts, score

# Names a kernel may declare its input dtype by, and the runner's name of each (SPEC.md §10.3).
_DTYPES = {"float64": "fp64", "fp64": "fp64", "f64": "fp64", "double": "fp64",
           "float32": "fp32", "fp32": "fp32", "f32": "fp32", "float": "fp32",
           "bfloat16": "bf16", "bf16": "bf16",
           "float16": "fp16", "fp16": "fp16", "f16": "fp16", "half": "fp16"}
_CHECKED = ("q", "k", "v", "g", "beta")      # the members the runner checks (kda_worker.c)


def dtype_name(dtype: Any) -> str:
    """The runner's name (fp64 fp32 bf16 fp16) of a dtype given as a string, a numpy dtype
    or a torch dtype (str(torch.bfloat16) is "torch.bfloat16")."""
    key = str(dtype).replace("torch.", "").lower()
    if key not in _DTYPES:
        raise ValueError(f"input_dtype {dtype!r} is not one of bfloat16, float16, float32, "
                         "float64")
    return _DTYPES[key]


def _exact(x: np.ndarray, cls: str) -> np.ndarray:
    """Element-wise: is x exactly a value of format cls (finite values; SPEC.md §10.3)."""
    x = np.asarray(x, dtype=np.float64)
    if cls == "fp64":
        return np.ones(x.shape, bool)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        ok = f.astype(np.float64) == x
        if cls == "bf16":
            ok &= (f.view(np.uint32) & np.uint32(0xFFFF)) == 0
        elif cls == "fp16":
            ok &= f.astype(np.float16).astype(np.float64) == x
    return ok | ~np.isfinite(x)


def inexact_inputs(case: Any, dtype: Any) -> str:
    """"" when every value of q k v g beta of the case is exact in dtype, else why not, in the
    runner's words for a backend with 16-bit input buffers (the runner never rounds into an
    input type: the rounding would be the kernel's error)."""
    cls = dtype_name(dtype)
    for m in _CHECKED:
        if m not in case.inputs:
            continue
        ok = _exact(case.inputs[m], cls).ravel()
        if not ok.all():
            i = int(np.argmin(ok))
            x = float(np.asarray(case.inputs[m], np.float64).ravel()[i])
            prec = case.manifest.get("input_precision", "?")
            return (f"inputs are {prec}, the kernel takes {cls} inputs ({m}[{i}] = {x:.9g} is "
                    f"not exact in {cls}; the runner does not round into them)")
    return ""


@dataclasses.dataclass
class Workspace:
    """Where prompts (one folder per test, removed after it) and result files go."""
    root: str

    @property
    def results(self) -> str:
        d = os.path.join(self.root, "results")
        os.makedirs(d, exist_ok=True)
        return d

    def scratch(self) -> str:
        os.makedirs(self.root, exist_ok=True)
        return tempfile.mkdtemp(prefix="prompt.", dir=self.root)


@dataclasses.dataclass
class Outcome:
    """One prompt's end: the runner's verdict and its human report, or the kernel's
    exception (then no result file was scored: the exception is the verdict)."""
    prompt: str
    result: Optional[CaseResult] = None
    text: str = ""
    error: Optional[BaseException] = None
    declined: str = ""           # why the kernel (or its input dtype) declined, if it did

    @property
    def verdict(self) -> str:
        return self.result.verdict if self.result else "Fail"


def _filters(case: CaseInfo, prompt: str) -> Sequence[str]:
    """-k patterns selecting exactly `prompt`: the case alone without its serving prompts,
    or one prompt (ids hold no glob characters, SPEC.md §10.2)."""
    return [prompt, f"!{prompt}.*"] if prompt == case.id else [prompt]


def run_one(kernel: Any, case: CaseInfo, prompt: str, work: Workspace, *, cls: str = "fp32",
            kda: Optional[str] = None, input_dtype: Any = None, backend: str = "python",
            runner_args: Sequence[str] = ()) -> Outcome:
    """Export `prompt` (the case's id or one of its serving prompts) alone, call `kernel` on
    it, write its result file in work.results and score it alone.  A kernel exception ends
    here (Outcome.error); NotSupported and inputs not exact in `input_dtype` write a
    declining result, which the runner scores NotSupported."""
    tmp = work.scratch()
    try:
        export_prompts(case.path, tmp, kda, filters=_filters(case, prompt))
        path = os.path.join(tmp, prompt + ".npz")
        if not os.path.exists(path):
            raise ScoreError(f"kda conform --export-prompts -k {prompt} {case.path} wrote no "
                             f"{prompt}.npz")
        c = read_case(path)
        out = os.path.join(work.results, prompt + ".npz")
        why = inexact_inputs(c, input_dtype) if input_dtype is not None else ""
        if not why:
            try:
                ret = kernel(c.problem, dict(c.inputs))
                write_result(out, prompt, problem=c.problem, backend=backend, **_outputs(ret))
            except NotSupported as e:
                why = e.reason
            except Exception as e:                      # the kernel's failure is the verdict
                if os.path.exists(out):
                    os.unlink(out)
                return Outcome(prompt, error=e)
        if why:
            write_result(out, prompt, not_supported=why, backend=backend)
        rep = score(work.results, case.path, cls=cls, kda=kda, extra=runner_args,
                    filters=_filters(case, prompt), jsonl=os.path.join(tmp, "r.jsonl"))
        mine = [r for r in rep.results if r.case == prompt]
        if len(mine) != 1:
            raise ScoreError(f"kda conform --candidate -k {prompt}: {len(mine)} reports of "
                             f"{prompt} among {[r.case for r in rep.results]}")
        return Outcome(prompt, mine[0], mine[0].text, declined=why)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

# kda_conform: score a Python (PyTorch, Triton, numpy) KDA kernel with the kda conformance runner.
# SPDX-License-Identifier: MIT
"""kda-conform: put a Python KDA kernel before the `kda conform` judge (SPEC.md §7.9).

In a test module (the pytest plugin collects one test per case and serving prompt):

    import kda_conform
    test_kda = kda_conform.suite(my_kernel, level="L1", cls="bf16")

or in one call: `results = kda_conform.check(my_kernel, level="L1", cls="bf16")`.
Adapters for fla, FlashKDA and vLLM/SGLang decode kernels: kda_conform.fla,
kda_conform.flashkda, kda_conform.vllm (torch is imported only when an adapter converts).
"""
import importlib as _importlib
from typing import Any as _Any

try:
    from ._version import __version__          # written by the wheel build
except ImportError:                            # a source tree: the one version, in C
    import re as _re
    from pathlib import Path as _Path

    _h = _Path(__file__).resolve().parents[2] / "ref" / "kda_version.h"
    _m = _re.search(r'#define KDA_VERSION_STRING "([0-9.]+)"', _h.read_text()) \
        if _h.is_file() else None
    __version__ = _m.group(1) if _m else "0+unknown"
from .check import Suite, check, declared, suite, summary
from .files import Case, CaseError, read_case, read_result, valid_id, write_result
from .native import KdaAssertionError, assert_kda, gen, score_outputs
from .problem import Problem, ProblemError, reference
from .run import NotSupported, RunReport, run
from .score import (CaseInfo, CaseResult, ScoreError, export_prompts, find_golden, find_kda,
                    golden_root, list_cases, score)

_ADAPTERS = ("fla", "flashkda", "vllm", "torch", "grad")


def __getattr__(name: str) -> _Any:
    """kda_conform.fla, .flashkda, .vllm after a plain `import kda_conform` (imported on first
    use: they import nothing heavy themselves, torch only when they convert)."""
    if name in _ADAPTERS:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["check", "suite", "Suite", "declared", "summary", "Case", "CaseError", "read_case",
           "read_result", "valid_id", "write_result", "Problem", "ProblemError", "reference",
           "NotSupported", "RunReport", "run", "CaseInfo", "CaseResult", "ScoreError",
           "export_prompts", "find_golden", "find_kda", "golden_root", "list_cases", "score",
           "__version__", "fla", "flashkda", "vllm", "torch", "grad", "KdaAssertionError", "assert_kda", "gen",
           "score_outputs"]

# kda_conform: score a Python (PyTorch, Triton, numpy) KDA kernel with the kda conformance runner.
# SPDX-License-Identifier: MIT
"""kda-conform: read prompt files, run any callable, write result files, score them with
`kda conform --candidate` (SPEC.md §7.9), and adapters for fla, FlashKDA and vLLM/SGLang
decode kernels (kda_conform.fla, kda_conform.flashkda, kda_conform.vllm; torch is imported
only when an adapter converts tensors).

    import kda_conform
    results = kda_conform.check(my_kernel, level="L1", cls="bf16")
    assert all(r.ok or r.skipped for r in results), kda_conform.summary(results)
"""
from .check import check, pytest_cases, summary
from .io import Case, CaseError, read_case, read_result, valid_id, write_result
from .problem import Problem, ProblemError, reference
from .run import NotSupported, RunReport, run
from .score import CaseResult, ScoreError, export_prompts, find_golden, find_kda, score

__version__ = "0.1.0"
__all__ = ["check", "pytest_cases", "summary", "Case", "CaseError", "read_case",
           "read_result", "valid_id", "write_result", "Problem", "ProblemError", "reference",
           "NotSupported", "RunReport", "run", "CaseResult", "ScoreError", "export_prompts",
           "find_golden", "find_kda", "score"]

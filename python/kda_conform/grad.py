# kda_conform.grad: gradient cases from Python (SPEC.md §13.7): seeds in, gradients out.
# SPDX-License-Identifier: MIT
"""A gradient case is a case file that also holds the seeds `do` (shaped as o), `dht` (as ht)
and `dhc` (as hc); `kda conform --export-prompts` copies them into its prompt file.  A backward
kernel returns, with o, ht, hc, the gradients of

    L = sum(do * o) + sum(dht * ht) + sum(dhc * hc)

with respect to every input the problem reads, named `dq dk dv dg dbeta dA_log ddt_bias dh0`
and shaped as q k v g beta A_log dt_bias h0 (SPEC.md §13.1).  The runner scores them in the
report `ID.backward` of each case.

The backward kernel interface (what kda_conform.torch.autograd_adapter makes)::

    def kernel(problem, inputs, seeds) -> dict

`inputs` as for kda_conform.run; `seeds` maps `do` (and `dht`, `dhc` where the problem has
them) to float64 arrays, or is None for a prompt without seeds (a serving prompt, a case that
is not a gradient case), when only o, ht, hc are asked for.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

from . import files as _files
from .files import CaseError
from .problem import Problem
from . import run as _run
from .run import RunReport

SEEDS = ("do", "dht", "dhc")
INPUTS = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "h0")
GRADS = tuple("d" + m for m in INPUTS)


def seed_shapes(p: Problem) -> Dict[str, tuple]:
    """The seeds a problem has, with their shapes (those of o, ht, hc)."""
    r = _files.result_shapes(p)
    return {s: r[m] for s, m in zip(SEEDS, ("o", "ht", "hc")) if m in r}


def grad_shapes(p: Problem) -> Dict[str, tuple]:
    """The gradients a problem has (SPEC.md §13.1), with their shapes (their inputs')."""
    shapes = _files._expected_shapes(p)
    used = _files._used(p)
    out = {}
    for m in INPUTS:
        if used[m] and (p.T > 0 or m == "h0"):
            out["d" + m] = shapes[m]
    return out


def read_seeds(path: str, p: Problem) -> Optional[Dict[str, np.ndarray]]:
    """The seeds of a case or prompt file as float64 (None when it has no `do`), read within
    the bounds of every reader (files._read_npz); CaseError naming the file for a seed of the
    wrong dtype or shape or a non-finite one."""
    _, arrays = _files._read_npz(path)
    if "do" not in arrays:
        return None
    out = {}
    for s, shape in seed_shapes(p).items():
        if s not in arrays:
            out[s] = np.zeros(shape)       # an absent seed is zero (SPEC.md §13.7)
            continue
        x = arrays[s]
        if x.dtype.str not in ("<f8", "<f4") or tuple(x.shape) != shape:
            raise CaseError(f"{path}: seed {s!r} is {x.dtype.str} {tuple(x.shape)}, "
                            f"expected <f4/<f8 {shape}")
        if not np.all(np.isfinite(x)):
            raise CaseError(f"{path}: seed {s!r} holds a non-finite value")
        out[s] = x.astype(np.float64)
    return out


def write_grad_result(path: str, case_id: str, problem: Problem, ret: Mapping[str, Any],
                      backend: Optional[str] = None) -> None:
    """One result file with o, ht, hc and the gradients of `ret` (those the problem has;
    one it lacks is left out and reported as not provided), written atomically."""
    if not isinstance(ret, Mapping):
        raise TypeError(f"a backward kernel returns a dict, got {type(ret).__name__}")
    unknown = set(ret) - {"o", "ht", "hc"} - set(GRADS)
    if unknown:
        raise TypeError(f"backward kernel returned unknown keys {sorted(unknown)}")
    if not _files.valid_id(case_id):
        raise CaseError(f"{path}: case id {case_id!r} cannot name a result file")
    man: Dict[str, Any] = {"schema": _files.RESULT_SCHEMA, "case_id": case_id}
    if backend:
        man["backend"] = str(backend)
    members: Dict[str, np.ndarray] = {}
    for m, shape in _files.result_shapes(problem).items():
        if ret.get(m) is None:
            raise CaseError(f"{path}: the problem needs result member {m!r}")
        members[m] = _files._as_member(m, ret[m], shape)
    for m, shape in grad_shapes(problem).items():
        if ret.get(m) is not None:
            members[m] = _files._as_member(m, ret[m], shape)
    _files._write_npz_atomic(path, man, members)


def run(kernel: Any, prompts: Union[str, Iterable[str]], results: str, *,
        cases: Optional[Sequence[str]] = None, backend: str = "python",
        input_dtype: Any = None) -> RunReport:
    """kda_conform.run.run for a backward kernel (the interface above)."""
    return _run.run(kernel, prompts, results, cases=cases, backend=backend,
                    input_dtype=input_dtype, backward=True)


__all__ = ["SEEDS", "GRADS", "INPUTS", "seed_shapes", "grad_shapes", "read_seeds",
           "write_grad_result", "run"]

# kda_conform.problem: the manifest's problem (SPEC.md §10.2) and a float64 numpy reference (§3-§5).
# SPDX-License-Identifier: MIT
"""The problem of a case, the input transforms of SPEC.md §4, and a plain float64 reference.

The reference is a straightforward port of SPEC.md §3.1 (one step: decay, erase, write,
readout), vectorised over value heads and value columns, looping over tokens.  It is for
tests and for checking adapters, not a certified result (the runner scores against the
certified golden values).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Mapping, Optional

import numpy as np

FAMILIES = ("kda", "gdn", "deltanet", "linear")
GATES = ("log", "softplus", "lower_bound")
BETAS = ("prob", "logit", "logit_neg")
L2S = ("off", "fla", "ggml")
HEAD_MAPS = ("div", "mod")
LAYOUTS = ("kv", "vk")

_INTS = ("N", "T", "H", "HV", "K", "V", "n_checkpoints")
_MODES = {"family": FAMILIES, "gate": GATES, "beta": BETAS, "l2": L2S,
          "head_map": HEAD_MAPS, "state_layout": LAYOUTS}
_BOOLS = ("has_A_log", "has_initial_state", "want_final_state")
_REALS = ("scale", "lower_bound", "l2_eps")
_REQUIRED = ("T", "H", "HV", "K", "V")


class ProblemError(ValueError):
    """A problem object that breaks SPEC.md §2.2 / §4 / §10.2."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """One case's problem: the `problem` object of a case manifest (SPEC.md §10.2).

    Defaults are those of SPEC.md §4 (`kda_problem_init`): scale = 1/sqrt(K) in float64.
    """
    T: int
    H: int
    HV: int
    K: int
    V: int
    N: int = 1
    n_checkpoints: int = 0
    family: str = "kda"
    gate: str = "log"
    beta: str = "prob"
    l2: str = "off"
    head_map: str = "div"
    state_layout: str = "kv"
    has_A_log: bool = False
    has_initial_state: bool = False
    want_final_state: bool = True
    scale: Optional[float] = None
    lower_bound: float = -5.0
    l2_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.scale is None:
            object.__setattr__(self, "scale", 1.0 / math.sqrt(self.K) if self.K > 0 else 1.0)
        self._validate()

    def _validate(self) -> None:
        for k in _INTS:
            x = getattr(self, k)
            if isinstance(x, bool) or not isinstance(x, int) or x < 0:
                raise ProblemError(f"problem.{k} must be an integer >= 0, got {x!r}")
        if min(self.N, self.H, self.HV, self.K, self.V) < 1:
            raise ProblemError("problem: N, H, HV, K and V must be >= 1 (SPEC.md §2.2)")
        if self.HV % self.H:
            raise ProblemError(f"problem: HV = {self.HV} is not a multiple of H = {self.H}")
        for k, names in _MODES.items():
            if getattr(self, k) not in names:
                raise ProblemError(f"problem.{k} = {getattr(self, k)!r} is not one of {names}")
        for k in _BOOLS:
            if not isinstance(getattr(self, k), bool):
                raise ProblemError(f"problem.{k} must be a boolean")
        for k in _REALS:
            x = getattr(self, k)
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise ProblemError(f"problem.{k} must be a finite real, got {x!r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Problem":
        """The problem object of a manifest; unknown keys are an error (SPEC.md §10.2)."""
        if not isinstance(d, Mapping):
            raise ProblemError("manifest 'problem' is not an object")
        known = set(_INTS) | set(_MODES) | set(_BOOLS) | set(_REALS)
        for k in d:
            if k not in known:
                raise ProblemError(f"problem: unknown key {k!r}")
        for k in _REQUIRED:
            if k not in d:
                raise ProblemError(f"problem: missing key {k!r}")
        kw = {k: (float(v) if k in _REALS and isinstance(v, int) and not isinstance(v, bool)
                  else v) for k, v in d.items()}
        return cls(**kw)

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def G(self) -> int:
        """Value heads per q/k head (SPEC.md §4.4)."""
        return self.HV // self.H

    @property
    def gate_width(self) -> int:
        """GW of SPEC.md §5: K for kda, 1 for gdn, 0 (no g) otherwise."""
        return {"kda": self.K, "gdn": 1}.get(self.family, 0)

    @property
    def uses_dt_bias(self) -> bool:
        return self.gate_width > 0 and self.gate != "log"

    def state_shape(self, count: int) -> tuple:
        """Shape of h0 / ht / hc with `count` states, in this problem's layout (SPEC.md §2.4)."""
        if self.state_layout == "vk":
            return (count, self.HV, self.V, self.K)
        return (count, self.HV, self.K, self.V)


def head_of(p: Problem) -> np.ndarray:
    """h for each value head hv (SPEC.md §4.4)."""
    hv = np.arange(p.HV)
    return hv // p.G if p.head_map == "div" else hv % p.H


def l2norm(x: np.ndarray, mode: str, eps: float) -> np.ndarray:
    """L2 of SPEC.md §4.3 along the last axis, in float64."""
    x = np.asarray(x, dtype=np.float64)
    if mode == "off":
        return x
    n2 = (x * x).sum(-1, keepdims=True)
    if mode == "fla":
        return x / np.sqrt(n2 + eps)
    if mode == "ggml":
        return x / np.maximum(np.sqrt(n2), eps)
    raise ProblemError(f"unknown l2 mode {mode!r}")


def _sigmoid(y: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-y))


def gate_eff(p: Problem, g: np.ndarray, A_log: Optional[np.ndarray],
             dt_bias: Optional[np.ndarray]) -> np.ndarray:
    """g_eff [T, HV, GW] of SPEC.md §4.1 in float64 (softplus without a threshold)."""
    g = np.asarray(g, dtype=np.float64)
    if p.gate == "log":
        return g
    y = g + np.asarray(dt_bias, dtype=np.float64)[None]
    A = np.exp(np.asarray(A_log, dtype=np.float64))[None, :, None] if p.has_A_log else 1.0
    if p.gate == "softplus":
        return -A * np.logaddexp(0.0, y)
    return p.lower_bound * _sigmoid(A * y)


def beta_eff(p: Problem, beta: np.ndarray) -> np.ndarray:
    """beta_eff [T, HV] of SPEC.md §4.2 in float64."""
    b = np.asarray(beta, dtype=np.float64)
    if p.beta == "prob":
        return b
    return _sigmoid(b) * (2.0 if p.beta == "logit_neg" else 1.0)


def seqlens(p: Problem, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """cu_seqlens as int64 ({0, T} when absent, SPEC.md §2.3)."""
    if "cu_seqlens" in inputs:
        return np.asarray(inputs["cu_seqlens"], dtype=np.int64)
    return np.array([0, p.T], dtype=np.int64)


def reference(p: Problem, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """o [T,HV,V], ht, hc of SPEC.md §3 in float64; states in the problem's layout."""
    h = head_of(p)
    q = p.scale * l2norm(inputs["q"], p.l2, p.l2_eps)[:, h]        # [T, HV, K]
    k = l2norm(inputs["k"], p.l2, p.l2_eps)[:, h]
    v = np.asarray(inputs["v"], dtype=np.float64)
    b = beta_eff(p, inputs["beta"])
    decay = None
    if p.gate_width:
        ge = gate_eff(p, inputs["g"], inputs.get("A_log"), inputs.get("dt_bias"))
        decay = np.exp(np.broadcast_to(ge, (p.T, p.HV, p.K)))      # a_i of §3.1, §5
    cu = seqlens(p, inputs)
    ck = [int(c) for c in inputs.get("checkpoints", [])]
    vk = p.state_layout == "vk"
    o = np.zeros((p.T, p.HV, p.V))
    ht = np.zeros((p.N, p.HV, p.K, p.V))
    hc = np.zeros((len(ck), p.HV, p.K, p.V))
    where = {c: i for i, c in enumerate(ck)}
    for n in range(p.N):
        S = np.zeros((p.HV, p.K, p.V))
        if p.has_initial_state:
            h0 = np.asarray(inputs["h0"][n], dtype=np.float64)
            S = h0.transpose(0, 2, 1).copy() if vk else h0.copy()
        for t in range(int(cu[n]), int(cu[n + 1])):
            if decay is not None:
                S *= decay[t][:, :, None]                             # 1. decay, key axis
            if p.family == "linear":
                pred = 0.0
            else:
                pred = np.einsum("hkv,hk->hv", S, k[t])               # 2. erase on decayed S
            S += b[t][:, None, None] * k[t][:, :, None] * (v[t] - pred)[:, None, :]  # 3. write
            o[t] = np.einsum("hkv,hk->hv", S, q[t])                   # 4. readout
            if t in where:
                hc[where[t]] = S
        ht[n] = S
    if vk:
        ht, hc = ht.transpose(0, 1, 3, 2), hc.transpose(0, 1, 3, 2)
    return {"o": o, "ht": np.ascontiguousarray(ht), "hc": np.ascontiguousarray(hc)}

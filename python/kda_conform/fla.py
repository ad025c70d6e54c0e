# kda_conform.fla: every manifest mode as keyword arguments of fla's chunk_kda / fused_recurrent_kda.
# SPDX-License-Identifier: MIT
"""Adapter for flash-linear-attention's KDA kernels (fla/ops/kda/chunk.py `chunk_kda`,
fla/ops/kda/fused_recurrent.py `fused_recurrent_kda`; signatures as of fla commit
bc3b101d, 2026-08-22).

    from fla.ops.kda import chunk_kda
    kernel = kda_conform.fla.adapter(chunk_kda, dtype="bfloat16")
    results = kda_conform.check(kernel, level="L1", cls="bf16")

Mode mapping (SPEC.md §4, §5) -- `plan(problem)` returns it without calling anything:

| mode | fla |
|---|---|
| gate log | `use_gate_in_kernel=False`, g as given |
| gate softplus | `use_gate_in_kernel=True`, `A_log` [HV], `dt_bias` [HV*K] |
| gate lower_bound | `use_gate_in_kernel=True`, `lower_bound=lb`, `A_log` or None, `dt_bias`; chunk_kda also `safe_gate=True` (adapter option) |
| beta prob / logit / logit_neg | `use_beta_sigmoid_in_kernel` False / True / True with `allow_neg_eigval=True` |
| l2 fla, eps 1e-6 | `use_qk_l2norm_in_kernel=True` |
| l2 fla with another eps, l2 ggml | normalised here in float64, `use_qk_l2norm_in_kernel=False` |
| head_map mod (G > 1) | value heads permuted into fla's div order, outputs permuted back |
| state_layout vk | `state_v_first=True` |
| N > 1 | `cu_seqlens` (int64), batch 1 |
| h0 / final state | `initial_state` (float32) / `output_final_state` |
| checkpoints | chained calls, one per segment ending at a checkpoint, each resuming from the previous final state |
| family gdn / deltanet | g broadcast over K / g = 0 |
| family linear | declined: fla's KDA kernels always erase |
| chunk_kda with K > 256 | declined (fla asserts K <= 256) |
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np

from . import _adapt as A
from .problem import Problem

KERNELS = ("chunk", "recurrent")


def _kind(fn: Callable, kernel: Optional[str]) -> str:
    if kernel is None:
        name = getattr(fn, "__name__", "")
        kernel = "chunk" if "chunk" in name else "recurrent" if "recurrent" in name else None
        if kernel is None:
            raise ValueError(f"cannot tell from its name whether {name!r} is chunk_kda or "
                             "fused_recurrent_kda: pass kernel='chunk' or 'recurrent'")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    return kernel


def plan(p: Problem, kernel: str = "chunk", safe_gate: bool = True) -> Dict[str, Any]:
    """The fla call for problem `p`: {"kwargs": fla keyword flags, "l2_outside": bool,
    "perm": value-head permutation or None, "chained": bool}.  Raises NotSupported."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if p.family == "linear":
        A.decline("fla's KDA kernels always erase (delta rule): family=linear has no erase")
    if kernel == "chunk" and p.K > 256:
        A.decline(f"chunk_kda supports K <= 256 only (K = {p.K})")
    kw: Dict[str, Any] = {"scale": p.scale, "output_final_state": bool(p.want_final_state),
                          "use_gate_in_kernel": False, "use_beta_sigmoid_in_kernel": False,
                          "allow_neg_eigval": False, "use_qk_l2norm_in_kernel": False,
                          "state_v_first": p.state_layout == "vk"}
    if p.gate_width and p.gate != "log":
        kw["use_gate_in_kernel"] = True
        if p.gate == "lower_bound":
            kw["lower_bound"] = float(p.lower_bound)
            if kernel == "chunk" and safe_gate:
                kw["safe_gate"] = True
    if p.beta in ("logit", "logit_neg"):
        kw["use_beta_sigmoid_in_kernel"] = True
        kw["allow_neg_eigval"] = p.beta == "logit_neg"
    in_kernel = p.l2 == "fla" and p.l2_eps == A.FLA_L2_EPS
    kw["use_qk_l2norm_in_kernel"] = in_kernel
    return {"kwargs": kw, "l2_outside": p.l2 != "off" and not in_kernel,
            "perm": A.mod_to_div(p), "chained": p.n_checkpoints > 0}


class Adapter:
    """A kda_conform kernel calling fla's `fn` (chunk_kda or fused_recurrent_kda)."""

    def __init__(self, fn: Callable, *, kernel: Optional[str] = None, dtype: Any = "float32",
                 device: str = "cuda", array: str = "torch", safe_gate: bool = True,
                 extra: Optional[Mapping[str, Any]] = None):
        self.fn, self.kernel = fn, _kind(fn, kernel)
        self.t = A.Tensors(array, dtype, device)
        self.safe_gate, self.extra = safe_gate, dict(extra or {})

    def __call__(self, p: Problem, a: Mapping[str, np.ndarray]) -> Dict[str, Any]:
        pl = plan(p, self.kernel, self.safe_gate)
        perm, t = pl["perm"], self.t
        q, k, _ = A.qk(p, a, in_kernel=not pl["l2_outside"])
        v = np.asarray(a["v"], np.float64)
        g, beta = A.g_full(p, a), np.asarray(a["beta"], np.float64)
        h0 = np.asarray(a["h0"], np.float64) if p.has_initial_state else None
        dt_bias, A_log = None, None
        if pl["kwargs"]["use_gate_in_kernel"]:
            dt_bias = A.dt_bias_full(p, a)
            if p.has_A_log:
                A_log = np.asarray(a["A_log"], np.float64)
        if perm is not None:
            v, g, beta = v[:, perm], g[:, perm], beta[:, perm]
            h0 = None if h0 is None else h0[:, perm]
            dt_bias = None if dt_bias is None else dt_bias[perm]
            A_log = None if A_log is None else A_log[perm]
        x = {"q": t.x(q)[None], "k": t.x(k)[None], "v": t.x(v)[None], "g": t.x(g)[None],
             "beta": t.x(beta)[None]}
        gate = {}
        if pl["kwargs"]["use_gate_in_kernel"]:
            gate = {"A_log": None if A_log is None else t.state(A_log),
                    "dt_bias": t.state(dt_bias.reshape(-1))}
        kw = dict(pl["kwargs"], **gate, **self.extra)
        cu = t.index(a["cu_seqlens"]) if p.N > 1 else None
        o, ht = A.first_two(self.fn(**x, initial_state=None if h0 is None else t.state(h0),
                                    cu_seqlens=cu, **kw))
        out = {"o": A.unpermute(t.np(o).reshape(p.T, p.HV, p.V), perm, 1)}
        if p.want_final_state:
            out["ht"] = A.unpermute(t.np(ht).reshape(p.state_shape(p.N)), perm, 1)
        if pl["chained"]:
            out["hc"] = A.unpermute(self._chain(p, a, x, h0, kw), perm, 1)
        return out

    def _chain(self, p: Problem, a: Mapping[str, np.ndarray], x: Dict[str, Any],
               h0: Optional[np.ndarray], kw: Dict[str, Any]) -> np.ndarray:
        """Checkpoint states by chained calls: one sequence at a time, one call per segment
        ending at a checkpoint, each resuming from the previous call's final state."""
        t = self.t
        hc = np.zeros(p.state_shape(p.n_checkpoints))
        kw = dict(kw, output_final_state=True)
        for n, segs in A.checkpoint_segments(p, a):
            state = None if h0 is None else t.state(h0[n:n + 1])
            for start, end, c in segs:
                part = {m: y[:, start:end] for m, y in x.items()}
                _, state = A.first_two(self.fn(**part, initial_state=state, cu_seqlens=None,
                                               **kw))
                hc[c] = t.np(state).reshape(p.state_shape(1))[0]
        return hc


def backward_adapter(fn: Callable, **kw: Any) -> Any:
    """chunk_kda scored forward and backward (check(..., backward=True)):
    kda_conform.fla_grad.backward_adapter(fn, dtype=..., device=..., safe_gate=..., extra=...)."""
    from .fla_grad import backward_adapter as make
    return make(fn, **kw)


def adapter(fn: Callable, **kw: Any) -> Adapter:
    """`Adapter(fn, **kw)`: kernel='chunk'|'recurrent' (default: from fn's name),
    dtype (torch dtype or its name, default float32), device (default cuda),
    array='torch'|'numpy', safe_gate (chunk_kda, lower_bound gate; default True),
    extra (more keyword arguments for every call, e.g. {"chunk_size": 32})."""
    return Adapter(fn, **kw)

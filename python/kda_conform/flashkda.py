# kda_conform.flashkda: cases as calls of FlashKDA's flash_kda.fwd, declining what it cannot express.
# SPDX-License-Identifier: MIT
"""Adapter for FlashKDA (github.com/MoonshotAI/FlashKDA, flash_kda/__init__.py `fwd`, as of
commit 1ce47ea3, 2026-07-29):

    fwd(q, k, v, g, beta, scale, out, A_log, dt_bias, lower_bound,
        initial_state=None, final_state=None, cu_seqlens=None)

bf16 q/k/v/g/beta [B,T,H,*], fp32 A_log [H] and dt_bias [H,K], states [N,H,V,K] (fp32 here),
`out` and `final_state` written in place, K = V = 128, L2 (fla's, eps 1e-6) and
beta = sigmoid(beta) always applied in the kernel, gate always
lower_bound * sigmoid(exp(A_log) * (g + dt_bias)).

| mode | FlashKDA |
|---|---|
| gate lower_bound | as is; without A_log, A_log = 0 (exp(0) = 1: the same formula) |
| gate log, softplus | declined |
| beta logit | as is; prob, logit_neg declined |
| l2 fla, eps 1e-6 | as is; off, ggml, other eps declined (the kernel always normalises) |
| HV > H (div or mod) | q, k heads copied to one per value head (exact) |
| state_layout kv | states transposed here (FlashKDA stores [V, K]; exact) |
| N > 1 | cu_seqlens, batch 1 |
| checkpoints | chained calls |
| family gdn | g, dt_bias broadcast over K; deltanet, linear declined (no decay of exactly 1) |
| K or V not 128 | declined |
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np

from . import _adapt as A
from .problem import Problem, head_of


def plan(p: Problem) -> Dict[str, Any]:
    """{"expand": q/k head per value head or None, "transpose": bool, "chained": bool};
    NotSupported for what FlashKDA cannot express."""
    if p.K != 128 or p.V != 128:
        A.decline(f"FlashKDA requires K = V = 128 (K = {p.K}, V = {p.V})")
    if p.family in ("deltanet", "linear"):
        A.decline(f"FlashKDA always decays through lower_bound*sigmoid(.): family={p.family} "
                  "(no decay) cannot be expressed")
    if p.gate != "lower_bound":
        A.decline(f"FlashKDA computes only the lower_bound gate in the kernel: gate={p.gate} "
                  "cannot be expressed")
    if p.beta != "logit":
        A.decline(f"FlashKDA applies sigmoid(beta) in the kernel: beta={p.beta} cannot be "
                  "expressed")
    if p.l2 != "fla" or p.l2_eps != A.FLA_L2_EPS:
        A.decline(f"FlashKDA always applies fla's L2 (eps 1e-6) in the kernel: l2={p.l2} "
                  f"eps={p.l2_eps:g} cannot be expressed")
    return {"expand": head_of(p) if p.HV != p.H else None,
            "transpose": p.state_layout == "kv", "chained": p.n_checkpoints > 0}


class Adapter:
    """A kda_conform kernel calling FlashKDA's `fwd`."""

    def __init__(self, fn: Callable, *, dtype: Any = "bfloat16", device: str = "cuda",
                 array: str = "torch"):
        self.fn, self.t = fn, A.Tensors(array, dtype, device)

    def __call__(self, p: Problem, a: Mapping[str, np.ndarray]) -> Dict[str, Any]:
        pl, t = plan(p), self.t
        h = pl["expand"] if pl["expand"] is not None else slice(None)
        q, k = (np.asarray(a[m], np.float64)[:, h] for m in ("q", "k"))
        x = {"q": t.x(q)[None], "k": t.x(k)[None], "v": t.x(a["v"])[None],
             "g": t.x(A.g_full(p, a))[None], "beta": t.x(a["beta"])[None]}
        A_log = np.asarray(a["A_log"], np.float64) if p.has_A_log else np.zeros(p.HV)
        gate = {"A_log": t.state(A_log), "dt_bias": t.state(A.dt_bias_full(p, a)),
                "lower_bound": float(p.lower_bound)}
        h0 = np.asarray(a["h0"], np.float64) if p.has_initial_state else None
        if h0 is not None and pl["transpose"]:
            h0 = A.transpose_state(h0)
        cu = t.index(a["cu_seqlens"]) if p.N > 1 else None
        o, ht = self._call(p, x, gate, h0, p.N, p.T, cu, p.want_final_state)
        out = {"o": o.reshape(p.T, p.HV, p.V)}
        fix = A.transpose_state if pl["transpose"] else (lambda s: s)
        if p.want_final_state:
            out["ht"] = fix(ht)
        if pl["chained"]:
            hc = np.zeros((p.n_checkpoints, p.HV, p.V, p.K))
            for n, segs in A.checkpoint_segments(p, a):
                state = None if h0 is None else h0[n:n + 1]
                for start, end, c in segs:
                    part = {m: y[:, start:end] for m, y in x.items()}
                    _, state = self._call(p, part, gate, state, 1, end - start, None, True)
                    hc[c] = state[0]
            out["hc"] = fix(hc)
        return out

    def _call(self, p: Problem, x: Dict[str, Any], gate: Dict[str, Any],
              h0: Optional[np.ndarray], n: int, T: int, cu: Any, final: bool):
        t = self.t
        out = t.x(np.zeros((1, T, p.HV, p.V)))
        fs = t.state(np.zeros((n, p.HV, p.V, p.K))) if final else None
        self.fn(x["q"], x["k"], x["v"], x["g"], x["beta"], p.scale, out, gate["A_log"],
                gate["dt_bias"], gate["lower_bound"],
                initial_state=None if h0 is None else t.state(h0), final_state=fs,
                cu_seqlens=cu)
        return t.np(out), (t.np(fs) if final else None)


def adapter(fn: Callable, **kw: Any) -> Adapter:
    """`Adapter(fn, dtype="bfloat16", device="cuda", array="torch")`."""
    return Adapter(fn, **kw)

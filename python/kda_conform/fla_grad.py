# kda_conform.fla_grad: fla's chunk_kda scored on its backward (SPEC.md §13.7).
# SPDX-License-Identifier: MIT
"""    kernel = kda_conform.fla.backward_adapter(chunk_kda, dtype="bfloat16")
    results = kda_conform.check(kernel, level="L1", cls="bf16", backward=True)

The modes map as for the forward adapter (kda_conform.fla.plan); what that adapter does
outside the kernel -- L2 in another convention, the gdn and deltanet gates as fla's per-key
g, dt_bias broadcast, the value-head permutation of head_map=mod, checkpoints by chained calls
-- is done here in torch on the case's float64 leaves, so that autograd carries the gradients
back through it to the case's own inputs (kda_conform.torch.autograd_adapter).  The inputs
reach fla in `dtype`, the states in float32, as the forward adapter passes them.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

from . import _adapt as A
from .problem import Problem


def _l2(torch: Any, x: Any, p: Problem) -> Any:
    """SPEC.md §4.3 on the last axis, differentiable (ggml's floor: a constant eps)."""
    ss = (x * x).sum(-1, keepdim=True)
    if p.l2 == "fla":
        return x / torch.sqrt(ss + p.l2_eps)
    return x / torch.sqrt(ss).clamp(min=p.l2_eps)


def _unperm(torch: Any, x: Any, perm: Any, axis: int) -> Any:
    """Undo fla.plan's value-head permutation (A.mod_to_div) on axis."""
    if perm is None:
        return x
    inv = torch.as_tensor(perm.argsort(), device=x.device)
    return x.index_select(axis, inv)


class FlaTorchFn:
    """fn(problem, x) for autograd_adapter: fla's chunk_kda on the case's leaves."""

    def __init__(self, fn: Callable, dtype: Any = "float32", safe_gate: bool = True,
                 extra: Optional[Mapping[str, Any]] = None):
        self.fn, self.dtype, self.safe_gate = fn, dtype, safe_gate
        self.extra = dict(extra or {})

    def _inputs(self, torch: Any, p: Problem, x: Mapping[str, Any], pl: Dict[str, Any]) -> Dict[str, Any]:
        q, k, v, beta = x["q"], x["k"], x["v"], x["beta"]
        if pl["l2_outside"]:
            q, k = _l2(torch, q, p), _l2(torch, k, p)
        if p.family == "kda":
            g = x["g"]
        elif p.family == "gdn":
            g = x["g"].expand(p.T, p.HV, p.K)
        else:
            g = torch.zeros(p.T, p.HV, p.K, dtype=v.dtype, device=v.device)
        a = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "h0": x.get("h0")}
        if pl["kwargs"]["use_gate_in_kernel"]:
            a["dt_bias"] = x["dt_bias"].expand(p.HV, p.K)
            a["A_log"] = x.get("A_log")
        perm = pl["perm"]
        if perm is not None:
            idx = torch.as_tensor(perm, device=v.device)
            for m in ("v", "g", "beta", "h0"):
                if a.get(m) is not None:
                    a[m] = a[m].index_select(1, idx)
            for m in ("dt_bias", "A_log"):
                if a.get(m) is not None:
                    a[m] = a[m].index_select(0, idx)
        return a

    def __call__(self, p: Problem, x: Mapping[str, Any]) -> Dict[str, Any]:
        from .fla import plan
        torch = A.torch_module()
        pl = plan(p, "chunk", self.safe_gate)
        dt = getattr(torch, self.dtype) if isinstance(self.dtype, str) else self.dtype
        a = self._inputs(torch, p, x, pl)
        args = {m: a[m].to(dt)[None] for m in ("q", "k", "v", "g", "beta")}
        kw = dict(pl["kwargs"], **self.extra)
        if kw["use_gate_in_kernel"]:
            kw["A_log"] = None if a.get("A_log") is None else a["A_log"].float()
            kw["dt_bias"] = a["dt_bias"].reshape(-1).float()
        h0 = None if a["h0"] is None else a["h0"].float()
        cu = x["cu_seqlens"] if p.N > 1 else None
        o, ht = A.first_two(self.fn(**args, initial_state=h0, cu_seqlens=cu, **kw))
        perm = pl["perm"]
        out = {"o": _unperm(torch, o.reshape(p.T, p.HV, p.V), perm, 1)}
        if p.want_final_state:
            out["ht"] = _unperm(torch, ht.reshape(p.state_shape(p.N)), perm, 1)
        if pl["chained"]:
            out["hc"] = _unperm(torch, self._chain(p, x, args, h0, kw), perm, 1)
        return out

    def _chain(self, p: Problem, x: Mapping[str, Any], args: Dict[str, Any], h0: Any,
               kw: Dict[str, Any]) -> Any:
        """Checkpoint states by chained calls, as the forward adapter makes them."""
        torch = A.torch_module()
        kw = dict(kw, output_final_state=True)
        inputs = {"cu_seqlens": [int(c) for c in x["cu_seqlens"]],
                  "checkpoints": [int(c) for c in x["checkpoints"]]}
        hc: Dict[int, Any] = {}
        for n, segs in A.checkpoint_segments(p, inputs):
            state = None if h0 is None else h0[n:n + 1]
            for start, end, c in segs:
                part = {m: y[:, start:end] for m, y in args.items()}
                _, state = A.first_two(self.fn(**part, initial_state=state, cu_seqlens=None,
                                               **kw))
                hc[c] = state.reshape(p.state_shape(1))[0]
        return torch.stack([hc[c] for c in range(p.n_checkpoints)])


def backward_adapter(fn: Callable, *, dtype: Any = "float32", device: str = "cuda",
                     safe_gate: bool = True, extra: Optional[Mapping[str, Any]] = None) -> Any:
    """A backward kernel (kda_conform.grad) scoring fla's chunk_kda `fn` forward and backward:
    the case's inputs as float64 leaves on `device`, passed to fn in `dtype`."""
    from .torch import TorchEngine, autograd_adapter
    return autograd_adapter(FlaTorchFn(fn, dtype, safe_gate, extra),
                            engine=TorchEngine("float64", device))


__all__ = ["backward_adapter", "FlaTorchFn"]

# kda_conform.torch: score any autograd function's gradients (SPEC.md §13.7).
# SPDX-License-Identifier: MIT
"""Three lines to score a PyTorch function's forward and backward:

    def fn(problem, x):            # x: the case's inputs as tensors (floats require grad)
        return my_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], ...)   # (o, ht[, hc])
    results = kda_conform.check(kda_conform.torch.autograd_adapter(fn), backward=True)

`autograd_adapter(fn)` makes a backward kernel (kda_conform.grad): it calls `fn(problem, x)`
with every float input the problem has (`q k v g beta A_log dt_bias h0`, shapes of SPEC.md
§2.3) as a leaf tensor that requires grad and `cu_seqlens`, `checkpoints` as int64 tensors;
`fn` returns o, ht, hc as a dict or a tuple `(o, ht[, hc])`, as a forward kernel does.  With the
case's seeds it then backpropagates `do`, `dht`, `dhc` through them in one vector-Jacobian
product and returns the gradients of the leaves as `dq` ... `dh0` (a leaf the outputs do not
depend on has gradient zero).  An input a function does not take it simply does not read.

The autograd engine is a parameter: `TorchEngine(dtype, device)` (the default: float64 on the
CPU; torch is imported on first use), or any object with the same four methods (`leaf`,
`index`, `vjp`, `numpy`), which is how the package tests the adapter without torch.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np

from .grad import INPUTS, grad_shapes
from .problem import Problem
from .run import _outputs


class TorchEngine:
    """Leaves, a vector-Jacobian product and conversions in torch (`dtype` a torch dtype or its
    name, default float64; `device` default "cpu")."""

    def __init__(self, dtype: Any = "float64", device: str = "cpu"):
        import torch  # noqa: PLC0415 -- only when the engine is made
        self.torch = torch
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        self.device = device

    def leaf(self, a: np.ndarray) -> Any:
        t = self.torch.tensor(np.asarray(a, np.float64), dtype=self.dtype, device=self.device)
        return t.requires_grad_(True)

    def index(self, a: np.ndarray) -> Any:
        return self.torch.tensor(np.asarray(a, np.int64), device=self.device)

    def vjp(self, outputs: List[Any], leaves: List[Any], seeds: List[np.ndarray]) -> List[Any]:
        torch = self.torch
        grads_out = [torch.as_tensor(np.asarray(s), device=o.device).to(o.dtype).reshape(o.shape)
                     for o, s in zip(outputs, seeds)]
        return list(torch.autograd.grad(outputs, leaves, grad_outputs=grads_out,
                                        allow_unused=True))

    def numpy(self, t: Any) -> Optional[np.ndarray]:
        if t is None:
            return None
        t = t.detach().to("cpu")
        if t.dtype in (self.torch.bfloat16, self.torch.float16):
            t = t.float()
        return np.asarray(t.numpy(), np.float64)


class AutogradKernel:
    """A backward kernel (kda_conform.grad's interface) around a differentiable `fn`."""

    def __init__(self, fn: Callable[[Problem, Dict[str, Any]], Any], engine: Any = None):
        self.fn = fn
        self.engine = engine

    def _engine(self) -> Any:
        if self.engine is None:
            self.engine = TorchEngine()
        return self.engine

    def __call__(self, p: Problem, inputs: Mapping[str, np.ndarray],
                 seeds: Optional[Mapping[str, np.ndarray]] = None) -> Dict[str, Any]:
        e = self._engine()
        names = [m for m in INPUTS if m in inputs]
        x: Dict[str, Any] = {m: e.leaf(inputs[m]) for m in names}
        for m in ("cu_seqlens", "checkpoints"):
            if m in inputs:
                x[m] = e.index(inputs[m])
        outs = _outputs(self.fn(p, x))
        ret: Dict[str, Any] = {m: e.numpy(v) for m, v in outs.items() if v is not None}
        if seeds is None:
            return ret
        pairs = [(outs[m], seeds[s]) for m, s in (("o", "do"), ("ht", "dht"), ("hc", "dhc"))
                 if s in seeds and outs.get(m) is not None]
        want = [m for m in names if "d" + m in grad_shapes(p)]
        grads = e.vjp([o for o, _ in pairs], [x[m] for m in want], [s for _, s in pairs])
        for m, g in zip(want, grads):
            ret["d" + m] = e.numpy(g) if g is not None else np.zeros(np.shape(inputs[m]))
        return ret


def autograd_adapter(fn: Callable[[Problem, Dict[str, Any]], Any],
                     engine: Any = None) -> AutogradKernel:
    """A backward kernel for kda_conform.check(..., backward=True) from `fn(problem, x)`;
    `engine` default TorchEngine() (float64, CPU)."""
    return AutogradKernel(fn, engine)


__all__ = ["autograd_adapter", "AutogradKernel", "TorchEngine"]

# kda_conform._adapt: what the kernel adapters share: tensors, head maps, L2 outside, checkpoints.
# SPDX-License-Identifier: MIT
"""Pieces shared by kda_conform.fla, .flashkda and .vllm.

Each adapter turns a case (SPEC.md §2-§5) into one kernel's call and back, declining
(NotSupported, with the reason) what that kernel cannot express.  Transformations done
outside the kernel are exact rearrangements (head permutations, copies of q/k heads, state
transposes) except the L2 normalisation of the "other" convention, computed in float64
before the inputs are rounded to the kernel's dtype (documented in docs/scoring.md).
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Tuple

import numpy as np

from .problem import Problem, head_of, l2norm, seqlens
from .run import NotSupported

FLA_L2_EPS = 1e-6      # fla's l2norm_fwd default and its fused kernels' constant


def torch_module() -> Any:
    """torch, imported on first use only (the package itself needs numpy alone)."""
    try:
        import torch  # noqa: PLC0415
    except ImportError as e:
        raise ImportError("this adapter converts to torch tensors: install torch, or pass "
                          "array='numpy' to call the kernel with numpy arrays") from e
    return torch


class Tensors:
    """Converts numpy arrays to the kernel's arrays (torch tensors on `device` in `dtype`,
    or numpy arrays of `dtype` when array='numpy') and back to float64 numpy."""

    def __init__(self, array: str = "torch", dtype: Any = "float32", device: str = "cuda"):
        if array not in ("torch", "numpy"):
            raise ValueError(f"array must be 'torch' or 'numpy', got {array!r}")
        self.array, self.device = array, device
        if array == "torch":
            torch = torch_module()
            self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
            self.f32, self.i64 = torch.float32, torch.int64
        else:
            self.dtype = np.dtype(dtype)
            if self.dtype.kind != "f":
                raise ValueError(f"numpy dtype {dtype!r} is not floating point")
            self.f32, self.i64 = np.dtype(np.float32), np.dtype(np.int64)

    def to(self, a: np.ndarray, dtype: Any = None) -> Any:
        dtype = self.dtype if dtype is None else dtype
        a = np.ascontiguousarray(a)
        if self.array == "numpy":
            return a.astype(dtype, copy=True)
        torch = torch_module()
        src = torch.from_numpy(a.astype(np.int64 if dtype == self.i64 else np.float64))
        return src.to(device=self.device, dtype=dtype).contiguous()

    def x(self, a: np.ndarray) -> Any:
        return self.to(a)

    def state(self, a: np.ndarray) -> Any:
        return self.to(a, self.f32)

    def index(self, a: np.ndarray) -> Any:
        return self.to(np.asarray(a, dtype=np.int64), self.i64)

    def np(self, t: Any) -> np.ndarray:
        if t is None:
            return None
        if self.array == "torch":
            t = t.detach().to("cpu").double().numpy()
        return np.array(t, dtype=np.float64)


def mod_to_div(p: Problem) -> Optional[np.ndarray]:
    """For head_map=mod with G > 1, `perm` such that value head j of the permuted problem is
    value head perm[j] of the case and reads q/k head j // G (the div map, SPEC.md §4.4);
    None when no permutation is needed."""
    if p.head_map == "div" or p.G == 1:
        return None
    j = np.arange(p.HV)
    return (j % p.G) * p.H + j // p.G


def unpermute(x: Optional[np.ndarray], perm: Optional[np.ndarray], axis: int) -> Any:
    """Undo `mod_to_div` on the value-head axis of an output."""
    if x is None or perm is None:
        return x
    out = np.empty_like(x)
    idx = [slice(None)] * x.ndim
    idx[axis] = perm
    out[tuple(idx)] = x
    return out


def qk(p: Problem, a: Mapping[str, np.ndarray], in_kernel: bool) -> Tuple[np.ndarray, np.ndarray, bool]:
    """q, k in float64 and whether the kernel should normalise them: fla's convention with
    eps 1e-6 goes to the kernel when it can; any other convention is applied here."""
    q, k = np.asarray(a["q"], np.float64), np.asarray(a["k"], np.float64)
    if p.l2 == "off":
        return q, k, False
    if in_kernel and p.l2 == "fla" and p.l2_eps == FLA_L2_EPS:
        return q, k, True
    return l2norm(q, p.l2, p.l2_eps), l2norm(k, p.l2, p.l2_eps), False


def g_full(p: Problem, a: Mapping[str, np.ndarray]) -> np.ndarray:
    """g as [T, HV, K]: kda as is, gdn broadcast over the key channels, deltanet zeros
    (a log-gate of 0 is a decay of exactly 1, SPEC.md §5)."""
    if p.family == "kda":
        return np.asarray(a["g"], np.float64)
    if p.family == "gdn":
        return np.broadcast_to(np.asarray(a["g"], np.float64), (p.T, p.HV, p.K)).copy()
    return np.zeros((p.T, p.HV, p.K))


def dt_bias_full(p: Problem, a: Mapping[str, np.ndarray]) -> np.ndarray:
    """dt_bias as [HV, K] (gdn's [HV, 1] broadcast)."""
    return np.broadcast_to(np.asarray(a["dt_bias"], np.float64), (p.HV, p.K)).copy()


def checkpoint_segments(p: Problem, a: Mapping[str, np.ndarray]) -> List[Tuple[int, List[Tuple[int, int, int]]]]:
    """For each sequence holding checkpoints: (n, [(start, end, c), ...]) where segment
    [start, end) ends right after checkpoint token end-1 = checkpoints[c] (SPEC.md §2.3).
    Chained calls on these segments, each starting from the previous one's final state,
    give the checkpoint states through the kernel's own resume path."""
    if not p.n_checkpoints:
        return []
    cu = seqlens(p, a)
    ck = [int(c) for c in a["checkpoints"]]
    out = []
    for n in range(p.N):
        lo, hi = int(cu[n]), int(cu[n + 1])
        mine = [(c, i) for i, c in enumerate(ck) if lo <= c < hi]
        segs, start = [], lo
        for c, i in mine:
            segs.append((start, c + 1, i))
            start = c + 1
        if segs:
            out.append((n, segs))
    return out


def transpose_state(x: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """[.., K, V] <-> [.., V, K] (storage only, SPEC.md §2.4)."""
    return None if x is None else np.ascontiguousarray(np.swapaxes(x, -1, -2))


def decline(reason: str) -> None:
    raise NotSupported(reason)


def first_two(ret: Any) -> Tuple[Any, Any]:
    """(o, final_state) of a kernel returning a tuple of 2 or 3, or a bare o."""
    if isinstance(ret, (tuple, list)):
        return ret[0], (ret[1] if len(ret) > 1 else None)
    return ret, None


__all__ = ["Tensors", "mod_to_div", "unpermute", "qk", "g_full", "dt_bias_full",
           "checkpoint_segments", "transpose_state", "decline", "first_two", "head_of",
           "torch_module", "FLA_L2_EPS"]

# kda_conform.vllm: cases as one call of a vLLM/SGLang-style decode kernel over a state pool.
# SPDX-License-Identifier: MIT
"""Adapter for the serving stacks' recurrent KDA/GDN kernels with a state pool: vLLM's
`fused_recurrent_kda_fwd` / `fused_recurrent_gated_delta_rule_fwd`
(vllm/model_executor/layers/fla/ops/), SGLang's copies:

    fn(q, k, v, g, beta, scale, initial_state, inplace_final_state=True, cu_seqlens=None,
       ssm_state_indices=None, num_accepted_tokens=None, use_qk_l2norm_in_kernel=False)

`initial_state` is a pool [slots, HV, K, V]; with 2-D `ssm_state_indices` [N, L] the kernel
reads sequence n's state from slot `ssm_state_indices[n, num_accepted_tokens[n] - 1]` (column
0 without num_accepted_tokens) and writes the state after its token i to slot
`ssm_state_indices[n, i]`.  The adapter gives every (sequence, token) its own slot, in
reversed order, so the final and checkpoint states come out of one call; unused pool slots
are NaN (a read of the wrong slot shows) and two spare slots must stay bit-identical (the
adapter raises if the kernel wrote them).

| mode | decode kernel |
|---|---|
| gate log | g as given ([T,HV,K]; gate_shape="gdn": [T,HV], family gdn/deltanet only) |
| gate softplus, lower_bound | declined (computed by a separate kernel in the serving stack), or computed here in float64 with precompute=True |
| beta prob | as is; logit, logit_neg declined, or computed here with precompute=True |
| l2 fla eps 1e-6 | `use_qk_l2norm_in_kernel=True`; other conventions normalised here |
| head_map mod | value heads permuted into the div order |
| state_layout | pool layout `layout` ("kv" default); the other one transposed here (exact) |
| h0 | placed in the slot the kernel reads; zeros without h0 |
| family linear | declined |
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping

import numpy as np

from . import _adapt as A
from .problem import Problem, beta_eff, gate_eff, seqlens

SPARE_VALUE = 7.0


def plan(p: Problem, gate_shape: str = "kda", precompute: bool = False,
         layout: str = "kv") -> Dict[str, Any]:
    """{"kwargs": flags, "gate_outside", "beta_outside", "l2_outside", "perm",
    "transpose"}; NotSupported for what the decode kernel cannot express."""
    if gate_shape not in ("kda", "gdn") or layout not in ("kv", "vk"):
        raise ValueError("gate_shape must be 'kda' or 'gdn', layout 'kv' or 'vk'")
    if p.family == "linear":
        A.decline("the decode kernel always erases (delta rule): family=linear has no erase")
    if gate_shape == "gdn" and p.family == "kda":
        A.decline("a scalar-gate (GDN) kernel cannot express KDA's per-channel decay")
    gate_out = p.gate_width > 0 and p.gate != "log"
    if gate_out and not precompute:
        A.decline(f"the decode kernel takes a pre-computed log gate: gate={p.gate} is "
                  "computed outside it (precompute=True computes it here in float64)")
    if p.beta != "prob" and not precompute:
        A.decline(f"the decode kernel takes beta as a probability: beta={p.beta} is computed "
                  "outside it (precompute=True computes it here in float64)")
    in_kernel = p.l2 == "fla" and p.l2_eps == A.FLA_L2_EPS
    return {"kwargs": {"scale": p.scale, "inplace_final_state": True,
                       "use_qk_l2norm_in_kernel": in_kernel},
            "gate_outside": gate_out, "beta_outside": p.beta != "prob",
            "l2_outside": p.l2 != "off" and not in_kernel, "perm": A.mod_to_div(p),
            "transpose": p.state_layout != layout}


def pool_plan(p: Problem, cu: np.ndarray, accepted: bool) -> Dict[str, np.ndarray]:
    """Slot indices [N, L], accepted counts [N] and the slot holding each initial state."""
    lens = np.diff(cu)
    L = max(int(lens.max()) if len(lens) else 0, 1)
    idx = (np.arange(p.N * L)[::-1] + 1).reshape(p.N, L)   # slots 1..N*L, reversed
    acc = np.array([1 + (n % max(int(lens[n]), 1)) if accepted else 1 for n in range(p.N)])
    return {"idx": idx, "acc": acc, "lens": lens, "slots": p.N * L + 2,
            "spare": np.array([0, p.N * L + 1]),
            "h0_slot": idx[np.arange(p.N), acc - 1]}


class Adapter:
    """A kda_conform kernel calling a decode kernel `fn` with a state pool."""

    def __init__(self, fn: Callable, *, dtype: Any = "float32", device: str = "cuda",
                 array: str = "torch", gate_shape: str = "kda", precompute: bool = False,
                 layout: str = "kv", accepted: bool = True):
        self.fn, self.t = fn, A.Tensors(array, dtype, device)
        self.gate_shape, self.precompute = gate_shape, precompute
        self.layout, self.accepted = layout, accepted

    def __call__(self, p: Problem, a: Mapping[str, np.ndarray]) -> Dict[str, Any]:
        pl = plan(p, self.gate_shape, self.precompute, self.layout)
        t, perm = self.t, pl["perm"]
        q, k, _ = A.qk(p, a, in_kernel=not pl["l2_outside"])
        v = np.asarray(a["v"], np.float64)
        if pl["gate_outside"]:
            g = np.broadcast_to(gate_eff(p, a["g"], a.get("A_log"), a.get("dt_bias")),
                                (p.T, p.HV, p.K)).copy()
        else:
            g = A.g_full(p, a)
        g = g[:, :, 0] if self.gate_shape == "gdn" else g
        beta = beta_eff(p, a["beta"]) if pl["beta_outside"] else np.asarray(a["beta"], np.float64)
        state = (p.HV, p.K, p.V) if self.layout == "kv" else (p.HV, p.V, p.K)
        h0 = np.asarray(a["h0"], np.float64) if p.has_initial_state else np.zeros((p.N,) + state)
        if p.has_initial_state and pl["transpose"]:
            h0 = A.transpose_state(h0)
        if perm is not None:
            v, g, beta, h0 = v[:, perm], g[:, perm], beta[:, perm], h0[:, perm]
        cu = seqlens(p, a)
        pp = pool_plan(p, cu, self.accepted)
        pool = np.full((pp["slots"],) + state, np.nan)
        pool[pp["spare"]] = SPARE_VALUE
        pool[pp["h0_slot"]] = h0
        pool_t = t.state(pool)
        spare_before = t.np(pool_t)[pp["spare"]].copy()
        o, _ = A.first_two(self.fn(
                t.x(q)[None], t.x(k)[None], t.x(v)[None], t.x(g)[None], t.x(beta)[None],
                initial_state=pool_t, cu_seqlens=t.index(cu),
                ssm_state_indices=t.index(pp["idx"]),
                num_accepted_tokens=t.index(pp["acc"]) if self.accepted else None,
                **pl["kwargs"]))
        after = t.np(pool_t)
        if not np.array_equal(after[pp["spare"]], spare_before):
            raise RuntimeError("the kernel wrote a state-pool slot no index named "
                               f"(slots {pp['spare'].tolist()})")
        out = {"o": A.unpermute(t.np(o).reshape(p.T, p.HV, p.V), perm, 1)}
        out.update(_states(p, a, after, pp, perm, pl["transpose"]))
        return out


def _states(p: Problem, a: Mapping[str, np.ndarray], after: np.ndarray,
            pp: Dict[str, np.ndarray], perm: Any, transpose: bool) -> Dict[str, Any]:
    """ht and hc out of the pool: the slot of each sequence's last token (its h0 slot when
    it is empty) and of each checkpoint token."""
    fix = A.transpose_state if transpose else (lambda s: s)
    idx, lens, cu = pp["idx"], pp["lens"], seqlens(p, a)
    last = [idx[n, lens[n] - 1] if lens[n] else pp["h0_slot"][n] for n in range(p.N)]
    out: Dict[str, Any] = {}
    if p.want_final_state:
        out["ht"] = fix(A.unpermute(after[last], perm, 1))
    if p.n_checkpoints:
        slots = []
        for c in (int(x) for x in a["checkpoints"]):
            n = int(np.searchsorted(cu, c, side="right")) - 1
            slots.append(idx[n, c - cu[n]])
        out["hc"] = fix(A.unpermute(after[slots], perm, 1))
    return out


def adapter(fn: Callable, **kw: Any) -> Adapter:
    """`Adapter(fn, dtype="float32", device="cuda", array="torch", gate_shape="kda",
    precompute=False, layout="kv", accepted=True)`; accepted=False passes
    num_accepted_tokens=None (for wrappers that do not forward it)."""
    return Adapter(fn, **kw)


# --- fused_sigmoid_gating_delta_rule_update: the decode step with its gate in the kernel ---

def sigmoid_gating_plan(p: Problem, is_kda: bool = False,
                        l2_in_kernel: bool = False) -> Dict[str, Any]:
    """For vLLM/SGLang's `fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias,
    softplus_beta, softplus_threshold, q, k, v, b, initial_state_source,
    initial_state_indices, scale, use_qk_l2norm_in_kernel, cu_seqlens[, is_kda])`: a kernel
    that computes g = -exp(A_log) * softplus(a + dt_bias) (per head; per key channel with
    is_kda=True, SGLang's KDA decode) and beta = sigmoid(b), reads and writes back pool
    slot `initial_state_indices[n]`.  l2_in_kernel: the kernel's own L2 is fla's
    convention (sqrt(sum x^2 + 1e-6), as in SGLang's file); otherwise q/k are normalised
    here, since some copies divide by (||x|| + 1e-6), neither convention of SPEC.md §4.3."""
    if is_kda and p.family not in ("kda", "gdn"):
        A.decline(f"the KDA decode kernel always decays through -exp(A_log)*softplus(.): "
                  f"family={p.family} cannot be expressed")
    if not is_kda and p.family != "gdn":
        A.decline(f"fused_sigmoid_gating_delta_rule_update is a GDN kernel (one gate per head "
                  f"with its softplus): family={p.family} cannot be expressed")
    if p.gate != "softplus" or (not p.has_A_log and not is_kda):
        A.decline(f"the kernel computes -exp(A_log)*softplus(a+dt_bias): gate={p.gate} "
                  f"(has_A_log={p.has_A_log}) cannot be expressed")
    if p.beta != "logit":
        A.decline(f"the kernel computes beta = sigmoid(b): beta={p.beta} cannot be expressed")
    in_kernel = l2_in_kernel and p.l2 == "fla" and p.l2_eps == A.FLA_L2_EPS
    kw: Dict[str, Any] = {"scale": p.scale, "use_qk_l2norm_in_kernel": in_kernel}
    if is_kda:
        kw["is_kda"] = True
    return {"kwargs": kw, "l2_outside": p.l2 != "off" and not in_kernel,
            "perm": A.mod_to_div(p), "chained": p.n_checkpoints > 0}


class SigmoidGatingAdapter:
    """A kda_conform kernel calling `fused_sigmoid_gating_delta_rule_update`: one call with
    a pool slot per sequence (reversed order, two spare slots that must stay bit-identical),
    chained calls for checkpoints.  layout: the pool's state layout ("kv" [slots,HV,K,V];
    "vk" [slots,HV,V,K], SGLang's KDA pool); the case's layout is transposed to it."""

    def __init__(self, fn: Callable, *, dtype: Any = "float32", device: str = "cuda",
                 array: str = "torch", softplus_threshold: float = 20.0,
                 is_kda: bool = False, layout: str = "kv", l2_in_kernel: bool = False):
        if layout not in ("kv", "vk"):
            raise ValueError(f"layout must be 'kv' or 'vk', got {layout!r}")
        self.fn, self.t = fn, A.Tensors(array, dtype, device)
        self.threshold = float(softplus_threshold)
        self.is_kda, self.layout, self.l2_in_kernel = is_kda, layout, l2_in_kernel

    def __call__(self, p: Problem, a: Mapping[str, np.ndarray]) -> Dict[str, Any]:
        pl, t = sigmoid_gating_plan(p, self.is_kda, self.l2_in_kernel), self.t
        perm = pl["perm"]
        q, k, _ = A.qk(p, a, in_kernel=not pl["l2_outside"])
        v, beta = np.asarray(a["v"], np.float64), np.asarray(a["beta"], np.float64)
        if self.is_kda:
            g, dt_bias = A.g_full(p, a), A.dt_bias_full(p, a)
        else:
            g = np.asarray(a["g"], np.float64)[:, :, 0]
            dt_bias = np.asarray(a["dt_bias"], np.float64)[:, 0]
        A_log = np.asarray(a["A_log"], np.float64) if p.has_A_log else np.zeros(p.HV)
        transpose = p.state_layout != self.layout
        state = (p.HV, p.K, p.V) if self.layout == "kv" else (p.HV, p.V, p.K)
        h0 = np.asarray(a["h0"], np.float64) if p.has_initial_state else np.zeros((p.N,) + state)
        if p.has_initial_state and transpose:
            h0 = A.transpose_state(h0)
        if perm is not None:
            v, g, beta, h0 = v[:, perm], g[:, perm], beta[:, perm], h0[:, perm]
            A_log, dt_bias = A_log[perm], dt_bias[perm]
        if self.is_kda:              # a [1, T, HV*K]: the kernel steps it by stride()[-2]
            g, dt_bias = g.reshape(p.T, p.HV * p.K), dt_bias.reshape(-1)
        x = {"q": t.x(q)[None], "k": t.x(k)[None], "v": t.x(v)[None], "a": t.x(g)[None],
             "b": t.x(beta)[None]}
        gate = {"A_log": t.state(A_log), "dt_bias": t.state(dt_bias)}
        o, ht = self._call(p, x, gate, h0, seqlens(p, a), pl["kwargs"])
        fix = A.transpose_state if transpose else (lambda s: s)
        out = {"o": A.unpermute(o.reshape(p.T, p.HV, p.V), perm, 1)}
        if p.want_final_state:
            out["ht"] = fix(A.unpermute(ht, perm, 1))
        if pl["chained"]:
            hc = np.zeros((p.n_checkpoints,) + state)
            for n, segs in A.checkpoint_segments(p, a):
                s = h0[n:n + 1]
                for start, end, c in segs:
                    part = {m: y[:, start:end] for m, y in x.items()}
                    _, s = self._call(p, part, gate, s, np.array([0, end - start]),
                                      pl["kwargs"])
                    hc[c] = s[0]
            out["hc"] = fix(A.unpermute(hc, perm, 1))
        return out

    def _call(self, p: Problem, x: Dict[str, Any], gate: Dict[str, Any], h0: np.ndarray,
              cu: np.ndarray, kw: Dict[str, Any]):
        """One call over len(cu)-1 sequences; returns o and each sequence's final state."""
        t, n = self.t, len(cu) - 1
        idx = np.arange(n, 0, -1)                       # slots n..1; 0 and n+1 spare
        pool = np.full((n + 2,) + h0.shape[1:], SPARE_VALUE)
        pool[idx] = h0
        pool_t = t.state(pool)
        o = self.fn(gate["A_log"], x["a"], gate["dt_bias"], 1.0, self.threshold, x["q"],
                    x["k"], x["v"], x["b"], pool_t, t.index(idx), cu_seqlens=t.index(cu), **kw)
        after = t.np(pool_t)
        if not np.array_equal(after[[0, n + 1]], pool[[0, n + 1]].astype(np.float32)):
            raise RuntimeError("the kernel wrote a state-pool slot no index named (0, n+1)")
        return t.np(A.first_two(o)[0]), after[idx]


def sigmoid_gating_adapter(fn: Callable, **kw: Any) -> SigmoidGatingAdapter:
    """`SigmoidGatingAdapter(fn, dtype="float32", device="cuda", array="torch",
    softplus_threshold=20.0, is_kda=False, layout="kv", l2_in_kernel=False)` for
    fused_sigmoid_gating_delta_rule_update (is_kda=True, layout="vk", l2_in_kernel=True:
    SGLang's KDA decode kernel)."""
    return SigmoidGatingAdapter(fn, **kw)

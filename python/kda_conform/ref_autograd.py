# kda_conform.ref_autograd: an independent reverse-mode autograd of the KDA forward (SPEC.md §13).
# SPDX-License-Identifier: MIT
"""Gradients of the KDA forward by a generic reverse-mode autograd, in plain Python floats.

Nothing here knows the adjoint recurrence of SPEC.md §13.2: the forward of SPEC.md §3-§5 is
written once with scalar nodes (`Node`) that record their operands and local derivatives on a
tape, and `backward` walks the tape in reverse, accumulating `∂L/∂x` for every node.  Its
results are therefore an independent check of the C backward references and of the certified
golden gradients (`golden/grad`).  No numpy, no jax, no torch: only `math`.

Cost: one Python object per scalar operation (about 12 K V per token and value head), so this is
for small cases (the golden gradient sets), not production sizes.
"""
from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional, Sequence

__all__ = ["Node", "gradients"]


class Node:
    """A real number on the tape: its value, its operands with their local partial derivatives,
    and the adjoint `grad` filled by `backward`."""
    __slots__ = ("value", "parents", "grad", "order")
    tape: List["Node"] = []

    def __init__(self, value: float, parents: Sequence = ()):
        self.value = value
        self.parents = parents          # ((node, d self / d node), ...)
        self.grad = 0.0
        self.order = len(Node.tape)
        Node.tape.append(self)

    def __add__(self, o: "Node") -> "Node":
        return Node(self.value + o.value, ((self, 1.0), (o, 1.0)))

    def __sub__(self, o: "Node") -> "Node":
        return Node(self.value - o.value, ((self, 1.0), (o, -1.0)))

    def __mul__(self, o: "Node") -> "Node":
        return Node(self.value * o.value, ((self, o.value), (o, self.value)))

    def __neg__(self) -> "Node":
        return Node(-self.value, ((self, -1.0),))

    def __truediv__(self, o: "Node") -> "Node":
        q = self.value / o.value
        return Node(q, ((self, 1.0 / o.value), (o, -q / o.value)))


def const(x: float) -> Node:
    return Node(float(x))


def exp(x: Node) -> Node:
    if x.value == -math.inf:             # a wiped channel: exp(-inf) = 0, slope 0
        return Node(0.0, ((x, 0.0),))
    e = math.exp(x.value)
    return Node(e, ((x, e),))


def sqrt(x: Node) -> Node:
    r = math.sqrt(x.value)          # at 0 only ggml's floor reads it, which has slope 0
    return Node(r, ((x, 0.5 / r if r > 0 else math.inf),))


def _sig(y: float) -> float:
    return 1.0 / (1.0 + math.exp(-y)) if y >= 0 else math.exp(y) / (1.0 + math.exp(y))


def sigmoid(x: Node) -> Node:
    """σ(y), slope σ(y)·σ(−y) (no cancellation in 1 − σ in either tail)."""
    return Node(_sig(x.value), ((x, _sig(x.value) * _sig(-x.value)),))


def softplus(x: Node) -> Node:
    y = x.value
    return Node(max(y, 0.0) + math.log1p(math.exp(-abs(y))), ((x, _sig(y)),))


def maximum_floor(x: Node, floor: float) -> Node:
    """max(x, floor): the floor branch (slope 0) when x <= floor (SPEC.md §13.3)."""
    return Node(x.value, ((x, 1.0),)) if x.value > floor else Node(floor, ())


def backward(loss: Node) -> None:
    """Fills `grad` of every node that `loss` depends on: reverse order of creation."""
    loss.grad = 1.0
    for n in reversed(Node.tape[: loss.order + 1]):
        if n.grad == 0.0:
            continue
        for parent, d in n.parents:
            parent.grad += n.grad * d


def _l2(mode: str, eps: float, x: List[Node]) -> List[Node]:
    if mode == "off":
        return x
    ss = const(0.0)
    for xi in x:
        ss = ss + xi * xi
    d = sqrt(ss + const(eps)) if mode == "fla" else maximum_floor(sqrt(ss), eps)
    return [xi / d for xi in x]


def _gate(p, g: Node, b: Optional[Node], A: Optional[Node]) -> Node:
    if p.gate == "log":
        return g
    x = g + b
    E = exp(A) if A is not None else const(1.0)
    if p.gate == "softplus":
        return -(E * softplus(x))
    u = E * x if A is not None else x
    return const(p.lower_bound) * sigmoid(u)


def _beta(mode: str, x: Node) -> Node:
    if mode == "prob":
        return x
    s = sigmoid(x)
    return s if mode == "logit" else const(2.0) * s


def gradients(p, inputs: Mapping[str, Sequence[float]], seeds: Mapping[str, Sequence[float]]
              ) -> Dict[str, List[float]]:
    """The gradients of L = Σ do·o + Σ dht·ht + Σ dhc·hc (SPEC.md §13.1) of problem `p`
    (kda_conform.problem.Problem) with respect to every input it reads.

    `inputs` maps q, k, v, g, beta, A_log, dt_bias, h0, cu_seqlens, checkpoints to flat
    sequences in the canonical layouts (SPEC.md §2.3; those the problem does not use may be
    absent); `seeds` maps do, dht, dhc likewise.  Returns flat lists named dq, dk, dv, dg,
    dbeta, dA_log, ddt_bias, dh0 (those the problem has)."""
    Node.tape = []
    K, V, H, HV, T = p.K, p.V, p.H, p.HV, p.T
    GW = {"kda": K, "gdn": 1}.get(p.family, 0)
    scale = p.scale if p.scale is not None else 1.0 / math.sqrt(K)
    reads_bias = GW > 0 and p.gate != "log"
    reads_A = reads_bias and p.has_A_log
    leaf = {name: [const(x) for x in inputs[name]] for name in
            ["q", "k", "v", "beta"] + (["g"] if GW else []) + (["dt_bias"] if reads_bias else [])
            + (["A_log"] if reads_A else []) + (["h0"] if p.has_initial_state else [])}
    cu = list(inputs.get("cu_seqlens", [0, T]))
    cps = list(inputs.get("checkpoints", []))
    vk = p.state_layout == "vk"
    at = (lambda i, j: j * K + i) if vk else (lambda i, j: i * V + j)
    L = const(0.0)
    for n in range(p.N):
        for hv in range(HV):
            h = hv // (HV // H) if p.head_map == "div" else hv % H
            base = (n * HV + hv) * K * V
            S = [[leaf["h0"][base + at(i, j)] if p.has_initial_state else const(0.0)
                  for j in range(V)] for i in range(K)]
            for t in range(cu[n], cu[n + 1]):
                qk = (t * H + h) * K
                qq = [const(scale) * x for x in _l2(p.l2, p.l2_eps, leaf["q"][qk:qk + K])]
                kk = _l2(p.l2, p.l2_eps, leaf["k"][qk:qk + K])
                if GW:
                    A = leaf["A_log"][hv] if reads_A else None
                    a = [exp(_gate(p, leaf["g"][(t * HV + hv) * GW + c],
                                   leaf["dt_bias"][hv * GW + c] if reads_bias else None, A))
                         for c in range(GW)]
                    a = a if GW == K else a * K
                    S = [[a[i] * S[i][j] for j in range(V)] for i in range(K)]
                b = _beta(p.beta, leaf["beta"][t * HV + hv])
                vv = leaf["v"][(t * HV + hv) * V:(t * HV + hv + 1) * V]
                r = []
                for j in range(V):
                    pj = const(0.0)
                    if p.family != "linear":
                        for i in range(K):
                            pj = pj + S[i][j] * kk[i]
                    r.append(b * (vv[j] - pj))
                S = [[S[i][j] + kk[i] * r[j] for j in range(V)] for i in range(K)]
                dout = seeds["do"][(t * HV + hv) * V:(t * HV + hv + 1) * V]
                for j in range(V):
                    o = const(0.0)
                    for i in range(K):
                        o = o + S[i][j] * qq[i]
                    L = L + const(dout[j]) * o
                if t in cps:
                    c = cps.index(t)
                    for i in range(K):
                        for j in range(V):
                            L = L + const(seeds["dhc"][(c * HV + hv) * K * V + at(i, j)]) * S[i][j]
            if p.want_final_state and "dht" in seeds:
                for i in range(K):
                    for j in range(V):
                        L = L + const(seeds["dht"][base + at(i, j)]) * S[i][j]
    backward(L)
    names = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "beta": "dbeta", "A_log": "dA_log",
             "dt_bias": "ddt_bias", "h0": "dh0"}
    out = {names[k]: [x.grad for x in xs] for k, xs in leaf.items()}
    Node.tape = []
    return out

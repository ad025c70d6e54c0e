# autograd_standin.py: a pure-Python reverse-mode autograd and a KDA forward written on it.
# SPDX-License-Identifier: MIT
"""The stand-in for torch in the tests of kda_conform.torch.autograd_adapter: scalars that
record their parents (no numpy, no torch in the arithmetic), an engine with the adapter's four
methods (leaf, index, vjp, numpy), and `forward(problem, x)`, SPEC.md §3-§4 written on them
(every family, gate, beta, L2 convention, head map, layout, varlen, h0, checkpoints).
`forward(..., drop_l2_grad=True)` normalises by a constant norm (the L2 gradient dropped): a
deliberate bug the scoring must catch."""
import math

import numpy as np


class Var:
    __slots__ = ("val", "parents", "grad")

    def __init__(self, val, parents=()):
        self.val, self.parents, self.grad = float(val), parents, 0.0

    def __add__(self, o):
        o = o if isinstance(o, Var) else Var(o)
        return Var(self.val + o.val, ((self, 1.0), (o, 1.0)))

    __radd__ = __add__

    def __sub__(self, o):
        o = o if isinstance(o, Var) else Var(o)
        return Var(self.val - o.val, ((self, 1.0), (o, -1.0)))

    def __rsub__(self, o):
        return Var(o) - self

    def __mul__(self, o):
        o = o if isinstance(o, Var) else Var(o)
        return Var(self.val * o.val, ((self, o.val), (o, self.val)))

    __rmul__ = __mul__

    def __truediv__(self, o):
        o = o if isinstance(o, Var) else Var(o)
        return Var(self.val / o.val, ((self, 1.0 / o.val), (o, -self.val / (o.val * o.val))))

    def __rtruediv__(self, o):
        return Var(o) / self

    def __neg__(self):
        return Var(-self.val, ((self, -1.0),))


def exp(x):
    e = math.exp(x.val)
    return Var(e, ((x, e),))


def log1p(x):
    return Var(math.log1p(x.val), ((x, 1.0 / (1.0 + x.val)),))


def sqrt(x):
    r = math.sqrt(x.val)
    return Var(r, ((x, 0.5 / r if r > 0 else 0.0),))


def sigmoid(x):
    return 1.0 / (1.0 + exp(-x))


def softplus(x):
    return x + log1p(exp(-x)) if x.val > 0 else log1p(exp(x))


def _nest(a, f):
    return [_nest(x, f) for x in a] if isinstance(a, list) else f(a)


def _flat(a):
    return [y for x in a for y in _flat(x)] if isinstance(a, list) else [a]


class StandInEngine:
    """kda_conform.torch's engine interface on Var."""

    def leaf(self, a):
        return _nest(np.asarray(a, np.float64).tolist(), Var)

    def index(self, a):
        return [int(x) for x in np.asarray(a).reshape(-1)]

    def vjp(self, outputs, leaves, seeds):
        order, seen = [], set()
        roots = []
        for out, s in zip(outputs, seeds):
            for v, g in zip(_flat(out), np.asarray(s, np.float64).reshape(-1).tolist()):
                v.grad += g
                roots.append(v)
        stack = [(r, False) for r in roots]
        while stack:                                  # iterative topological order
            v, done = stack.pop()
            if done:
                order.append(v)
                continue
            if id(v) in seen:
                continue
            seen.add(id(v))
            stack.append((v, True))
            stack.extend((p, False) for p, _ in v.parents if id(p) not in seen)
        for v in reversed(order):
            for p, d in v.parents:
                p.grad += d * v.grad
        return [_nest(leaf, lambda v: v.grad) for leaf in leaves]

    def numpy(self, t):
        return np.asarray(_nest(t, lambda v: v.val if isinstance(v, Var) else float(v)),
                          np.float64)


class Ops:
    """The arithmetic forward() needs beyond + - * /: on Var (the stand-in), or on torch's 0-d
    tensors (TorchOps)."""
    exp, log1p, sqrt = staticmethod(exp), staticmethod(log1p), staticmethod(sqrt)
    const = staticmethod(Var)
    val = staticmethod(lambda v: v.val)
    stack = staticmethod(lambda nested: nested)


class TorchOps:
    def __init__(self, torch):
        self.t = torch
        self.exp, self.log1p, self.sqrt = torch.exp, torch.log1p, torch.sqrt

    def const(self, c):
        return self.t.tensor(float(c), dtype=self.t.float64)

    def val(self, v):
        return float(v)

    def stack(self, nested):
        if isinstance(nested, list):
            return self.t.stack([self.stack(x) for x in nested])
        return nested


def _l2(ops, x, mode, eps, drop):
    if mode == "off":
        return list(x)
    ss = sum((xi * xi for xi in x), ops.const(0.0))
    if mode == "fla":
        d = ops.sqrt(ss + eps)
    else:
        d = ops.sqrt(ss) if math.sqrt(ops.val(ss)) > eps else ops.const(eps)
    if drop:
        d = ops.const(ops.val(d))
    return [xi / d for xi in x]


def _sig(ops, x):
    return 1.0 / (1.0 + ops.exp(-x))


def _softplus(ops, x):
    return x + ops.log1p(ops.exp(-x)) if ops.val(x) > 0 else ops.log1p(ops.exp(x))


def _gate(ops, p, x, b, A):
    if p.gate == "log":
        return x
    E = ops.exp(A) if A is not None else ops.const(1.0)
    if p.gate == "softplus":
        return -(E * _softplus(ops, x + b))
    return p.lower_bound * _sig(ops, E * (x + b))


def _beta(ops, p, b):
    if p.beta == "prob":
        return b
    return _sig(ops, b) if p.beta == "logit" else 2.0 * _sig(ops, b)


def forward(p, x, ops=Ops, drop_l2_grad=False):
    """o [T][HV][V], ht [N][HV][..], hc [C][HV][..] (states in the problem's layout), as
    ops.stack makes them."""
    K, V, HV, G = p.K, p.V, p.HV, p.G
    cu = [int(c) for c in x["cu_seqlens"]] if "cu_seqlens" in x else [0, p.T]
    ck = [int(c) for c in x["checkpoints"]] if "checkpoints" in x else []
    vk = p.state_layout == "vk"
    zero = ops.const(0.0)
    o = [[[zero] * V for _ in range(HV)] for _ in range(p.T)]
    ht, hc = [], [[None] * HV for _ in ck]
    for n in range(p.N):
        heads = []
        for hv in range(HV):
            h = hv // G if p.head_map == "div" else hv % p.H
            S = [[(x["h0"][n][hv][j][i] if vk else x["h0"][n][hv][i][j])
                  if p.has_initial_state else zero for j in range(V)] for i in range(K)]
            for t in range(cu[n], cu[n + 1]):
                qq = [p.scale * y for y in _l2(ops, x["q"][t][h], p.l2, p.l2_eps, drop_l2_grad)]
                kk = _l2(ops, x["k"][t][h], p.l2, p.l2_eps, drop_l2_grad)
                if p.gate_width:
                    a = [ops.exp(_gate(ops, p, x["g"][t][hv][c],
                                       x["dt_bias"][hv][c] if p.uses_dt_bias else None,
                                       x["A_log"][hv] if "A_log" in x else None))
                         for c in range(p.gate_width)]
                    a = a if p.gate_width == K else a * K
                    S = [[a[i] * S[i][j] for j in range(V)] for i in range(K)]
                b = _beta(ops, p, x["beta"][t][hv])
                for j in range(V):
                    pr = sum((S[i][j] * kk[i] for i in range(K)), zero) \
                        if p.family != "linear" else zero
                    u = b * (x["v"][t][hv][j] - pr)
                    for i in range(K):
                        S[i][j] = S[i][j] + kk[i] * u
                o[t][hv] = [sum((S[i][j] * qq[i] for i in range(K)), zero) for j in range(V)]
                for c, tc in enumerate(ck):
                    if tc == t:
                        hc[c][hv] = _layout(S, vk)
            heads.append(_layout(S, vk))
        ht.append(heads)
    out = {"o": ops.stack(o), "ht": ops.stack(ht) if p.want_final_state else None}
    if ck:
        out["hc"] = ops.stack(hc)
    return out


def _layout(S, vk):
    return [list(r) for r in zip(*S)] if vk else [list(r) for r in S]

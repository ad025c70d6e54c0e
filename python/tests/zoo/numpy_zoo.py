# numpy_zoo.py: the honest zoo's numpy kernels: float32 KDA in other evaluation orders.
# SPDX-License-Identifier: MIT
"""Float32 KDA kernels with the interface of kda_conform.run (`kernel(problem, inputs)`), each
exact in exact arithmetic and float32 throughout (`f64acc` widens its dot products only),
differing only in evaluation order the way numpy code written by a kernel author would.
Written from SPEC.md §3-§5, not from the project's references.  KERNELS maps a name to a
kernel; `perm(seed)` makes a random-order kernel for any seed.

  textbook  decay, p = S^T k (batched matmul), rank-one write with b folded into k, o = S^T q
  fold      decay folded into the key: p = S^T (a*k) on the undecayed state
  split     the correction as two rank-one updates, S -= (b k) p^T, S += (b k) v^T
  f64acc    textbook with p, o and the norms accumulated in float64, rounded to float32
  gate64    textbook with gates, exp, sigmoid and softplus in float64, rounded once
  einsum    textbook with einsum reductions (numpy's own summation order)
  chunk16   the chunked WY/UT form, 16-token chunks, in-chunk float32 cumulative log-decays
  chunk64   the same with 64-token chunks
  perm-N    textbook with every reduction in a random order of the key axis, fresh for each
            token (seeded by N and the token's index, so a repeated call gives the same bits)
"""
import numpy as np

F = np.float32


def _f32(x):
    return None if x is None else np.asarray(x, dtype=F)


def _sigmoid(y, dt):
    y = y.astype(dt)
    return np.where(y >= 0, 1 / (1 + np.exp(-np.abs(y))),
                    np.exp(-np.abs(y)) / (1 + np.exp(-np.abs(y)))).astype(dt)


def _gate(p, inputs, wide):
    """g_eff [T, HV, K] (SPEC.md §4.1; GDN broadcast), float32 or computed in float64 and
    rounded once (wide)."""
    if p.gate_width == 0:
        return None
    dt = np.float64 if wide else F
    g = _f32(inputs["g"]).astype(dt)
    if p.gate == "log":
        ge = g
    else:
        bias = _f32(inputs["dt_bias"]).astype(dt)[None]
        y = g + bias
        A = np.exp(_f32(inputs["A_log"]).astype(dt))[None, :, None] if p.has_A_log else None
        if p.gate == "softplus":
            sp = np.maximum(y, 0) + np.log1p(np.exp(-np.abs(y)))
            ge = -(A * sp)
        else:
            lb = dt(p.lower_bound)
            ge = lb * _sigmoid(A * y if A is not None else y, dt)
    ge = np.broadcast_to(ge.astype(F), (p.T, p.HV, p.K))
    return ge


def _decay(p, inputs, wide):
    ge = _gate(p, inputs, wide)
    if ge is None:
        return None
    return (np.exp(ge.astype(np.float64)) if wide else np.exp(ge)).astype(F)


def _beta(p, inputs, wide):
    b = _f32(inputs["beta"])
    dt = np.float64 if wide else F
    if p.beta == "prob":
        return b
    s = _sigmoid(b.astype(dt), dt)
    return (s if p.beta == "logit" else 2 * s).astype(F)


def _l2(x, mode, eps, acc):
    """L2 of SPEC.md §4.3 along the last axis; acc: the dtype of the sum of squares."""
    if mode == "off":
        return x
    ss = np.sum(x.astype(acc) * x.astype(acc), axis=-1, keepdims=True).astype(F)
    e = F(eps)
    d = np.sqrt(ss + e) if mode == "fla" else np.maximum(np.sqrt(ss), e)
    return (x / d).astype(F)


def _heads(p):
    hv = np.arange(p.HV)
    return hv // p.G if p.head_map == "div" else hv % p.H


def _prepare(p, inputs, acc=F, wide=False):
    h = _heads(p)
    q = _l2(_f32(inputs["q"]), p.l2, p.l2_eps, acc)[:, h] * F(p.scale)   # [T, HV, K]
    k = _l2(_f32(inputs["k"]), p.l2, p.l2_eps, acc)[:, h]
    return q.astype(F), k.astype(F), _f32(inputs["v"]), _beta(p, inputs, wide), \
        _decay(p, inputs, wide)


def _outputs(p, inputs):
    """cu_seqlens, {checkpoint token: index}, and zeroed o, ht, hc (states K-major)."""
    cu = np.asarray(inputs["cu_seqlens"], dtype=np.int64) if "cu_seqlens" in inputs else \
        np.array([0, p.T], dtype=np.int64)
    ck = [int(c) for c in inputs.get("checkpoints", [])]
    return cu, {c: i for i, c in enumerate(ck)}, np.zeros((p.T, p.HV, p.V), dtype=F), \
        np.zeros((p.N, p.HV, p.K, p.V), dtype=F), np.zeros((len(ck), p.HV, p.K, p.V), dtype=F)


def _initial(p, inputs, n):
    if not p.has_initial_state:
        return np.zeros((p.HV, p.K, p.V), dtype=F)
    h0 = _f32(inputs["h0"][n])
    return (h0.transpose(0, 2, 1) if p.state_layout == "vk" else h0).copy()


def _finish(p, o, ht, hc):
    if p.state_layout == "vk":
        ht, hc = ht.transpose(0, 1, 3, 2), hc.transpose(0, 1, 3, 2)
    out = {"o": o}
    if p.want_final_state:
        out["ht"] = np.ascontiguousarray(ht)
    if p.n_checkpoints:
        out["hc"] = np.ascontiguousarray(hc)
    return out


def _recurrent(order, seed=0):
    """A token-by-token kernel in the given order."""
    def kernel(p, inputs):
        acc = np.float64 if order == "f64acc" else F
        q, k, v, b, a = _prepare(p, inputs, acc, wide=(order == "gate64"))
        cu, where, o, ht, hc = _outputs(p, inputs)
        erase = p.family != "linear"

        def dot(S, x, t, what):   # S^T x per head: [HV, V]
            if order == "f64acc":
                return np.matmul(x.astype(np.float64)[:, None, :], S.astype(np.float64))[:, 0].astype(F)
            if order == "einsum":
                return np.einsum("hkv,hk->hv", S, x)
            if order == "perm":
                r = np.random.default_rng([seed, t, what]).permutation(p.K)
                return np.matmul(x[:, None, r], S[:, r, :])[:, 0]
            return np.matmul(x[:, None, :], S)[:, 0]

        for n in range(p.N):
            S = _initial(p, inputs, n)
            for t in range(int(cu[n]), int(cu[n + 1])):
                bk = (b[t][:, None] * k[t])[:, :, None]                   # [HV, K, 1]
                if order == "fold":
                    ak = k[t] if a is None else a[t] * k[t]
                    pr = dot(S, ak, t, 0) if erase else 0
                    Sd = S if a is None else S * a[t][:, :, None]
                    S = Sd + k[t][:, :, None] * (b[t][:, None] * (v[t] - pr))[:, None, :]
                else:
                    if a is not None:
                        S = S * a[t][:, :, None]
                    pr = dot(S, k[t], t, 0) if erase else np.zeros_like(v[t])
                    if order == "split":
                        S = S - bk * pr[:, None, :]
                        S = S + bk * v[t][:, None, :]
                    else:
                        S = S + bk * (v[t] - pr)[:, None, :]
                o[t] = dot(S, q[t], t, 1)
                if t in where:
                    hc[where[t]] = S
            ht[n] = S
        return _finish(p, o, ht, hc)
    kernel.__name__ = order if order != "perm" else f"perm{seed}"
    return kernel


def _chunked(C):
    """The chunked WY/UT form (fla's chunk_kda order), float32 throughout."""
    def kernel(p, inputs):
        q, k, v, b, a = _prepare(p, inputs)
        g = None if a is None else _gate(p, inputs, False).astype(F)
        cu, ckset, o, ht, hc = _outputs(p, inputs)
        erase = p.family != "linear"
        for n in range(p.N):
            S = _initial(p, inputs, n)
            t0, end = int(cu[n]), int(cu[n + 1])
            while t0 < end:
                t1 = min(t0 + C - (t0 - int(cu[n])) % C, end)
                if g is not None:   # a chunk also ends before a token whose decay is zero
                    for t in range(t0 + 1, t1):
                        if np.any(a[t] == 0):
                            t1 = t
                            break
                S = _chunk(p, S, q, k, v, b, a, g, t0, t1, erase, o, ckset, hc)
                t0 = t1
            ht[n] = S
        return _finish(p, o, ht, hc)
    kernel.__name__ = f"chunk{C}"
    return kernel


def _chunk(p, S, q, k, v, b, a, g, t0, t1, erase, o, ckset, hc):
    """Tokens [t0, t1) from S (before t0's decay); returns the state after t1 - 1."""
    n = t1 - t0
    kk, qq, vv, bb = k[t0:t1], q[t0:t1], v[t0:t1], b[t0:t1]           # [n, HV, *]
    if g is not None:
        S = S * a[t0][:, :, None]                       # the first token's decay, on S0
        G = np.zeros((n, p.HV, p.K), dtype=F)
        for t in range(1, n):
            G[t] = G[t - 1] + g[t0 + t]                 # in-chunk cumulative log-decay
    else:
        G = np.zeros((n, p.HV, p.K), dtype=F)
    with np.errstate(over="ignore"):                    # above the diagonal: masked below
        D = np.exp(G[:, None] - G[None, :])             # [t, s, HV, K]: exp(G_t - G_s)
    tri = np.tril(np.ones((n, n), dtype=bool))
    D = np.where(tri[:, :, None, None], D, F(0))
    Akk = np.einsum("thk,tshk,shk->hts", kk, D, kk) if erase else np.zeros((p.HV, n, n), F)
    L = np.tril(Akk * bb.T[:, :, None], -1)             # b_t A_ts, strictly lower
    Tm = np.zeros((p.HV, n, n), dtype=F)                # (I + L)^-1 by forward substitution
    for t in range(n):
        Tm[:, t, t] = 1
        if t:
            Tm[:, t, :t] = -np.einsum("hr,hrs->hs", L[:, t, :t], Tm[:, :t, :t])
    eG = np.exp(G)
    U = np.einsum("hts,sh,shv->thv", Tm, bb, vv)
    if erase:
        Wk = np.einsum("hts,sh,shk->thk", Tm, bb, eG * kk)
        W = U - np.einsum("thk,hkv->thv", Wk, S)
    else:
        W = U
    Aqk = np.einsum("thk,tshk,shk->hts", qq, D, kk)
    o[t0:t1] = np.einsum("thk,hkv->thv", eG * qq, S) + np.einsum("hts,shv->thv", Aqk, W)

    def state(t):
        return eG[t][:, :, None] * S + np.einsum("shk,shv->hkv", D[t, :t + 1] * kk[:t + 1], W[:t + 1])
    for t in range(n):
        if t0 + t in ckset:
            hc[ckset[t0 + t]] = state(t)
    return state(n - 1)


def perm(seed):
    return _recurrent("perm", seed)


KERNELS = {name: _recurrent(name) for name in
           ("textbook", "fold", "split", "f64acc", "gate64", "einsum")}
KERNELS["chunk16"] = _chunked(16)
KERNELS["chunk64"] = _chunked(64)
KERNELS["perm1"] = perm(1)

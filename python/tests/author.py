# author.py: a numpy KDA kernel written as a kernel author would, and five deliberate bugs of it.
# SPDX-License-Identifier: MIT
"""`kernel(problem, inputs)` computes every mode of SPEC.md §2-§5 with a token loop over
all value heads at once, as one writes a first numpy port of a Triton kernel: gates,
beta and L2 first, then decay, erase, write and readout per token.  `buggy(name)` returns
the same kernel with one classic mistake (BUGS): each is a way real ports went wrong."""
import numpy as np

BUGS = ("no_decay", "l2_eps", "transposed_state", "beta_raw", "checkpoint_late")


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _l2(x, mode, eps, bug):
    if mode == "off":
        return x
    n2 = np.sum(x * x, axis=-1, keepdims=True)
    if mode == "ggml":
        return x / np.maximum(np.sqrt(n2), eps)
    return x / np.sqrt(n2 + (1e-12 if bug == "l2_eps" else eps))     # fla: eps under the root


def _gate(p, a):
    """log decay [T, HV, K] (zeros: no decay)."""
    T, HV, K = p.T, p.HV, p.K
    if p.family in ("deltanet", "linear"):
        return np.zeros((T, HV, K))
    g = np.broadcast_to(np.asarray(a["g"], np.float64), (T, HV, K if p.family == "kda" else 1))
    if p.gate != "log":
        y = g + np.asarray(a["dt_bias"], np.float64)[None]
        A = np.exp(np.asarray(a["A_log"], np.float64))[None, :, None] if p.has_A_log else 1.0
        g = -A * np.logaddexp(0.0, y) if p.gate == "softplus" else p.lower_bound * _sigmoid(A * y)
    return np.broadcast_to(g, (T, HV, K))


def kernel(p, a, bug=None):
    heads = np.arange(p.HV) // p.G if p.head_map == "div" else np.arange(p.HV) % p.H
    q = p.scale * _l2(np.asarray(a["q"], np.float64), p.l2, p.l2_eps, bug)[:, heads]
    k = _l2(np.asarray(a["k"], np.float64), p.l2, p.l2_eps, bug)[:, heads]
    v = np.asarray(a["v"], np.float64)
    beta = np.asarray(a["beta"], np.float64)
    if p.beta != "prob" and bug != "beta_raw":
        beta = _sigmoid(beta) * (2.0 if p.beta == "logit_neg" else 1.0)
    decay = np.exp(_gate(p, a))
    cu = np.asarray(a.get("cu_seqlens", [0, p.T]), np.int64)
    ck = {int(c): i for i, c in enumerate(a.get("checkpoints", []))}
    vk = p.state_layout == "vk"
    o = np.zeros((p.T, p.HV, p.V))
    ht = np.zeros((p.N, p.HV, p.K, p.V))
    hc = np.zeros((len(ck), p.HV, p.K, p.V))
    for n in range(p.N):
        S = np.zeros((p.HV, p.K, p.V))
        if p.has_initial_state:
            h0 = np.asarray(a["h0"][n], np.float64)
            transposed = vk != (bug == "transposed_state" and p.K == p.V)
            S = np.swapaxes(h0, -1, -2).copy() if transposed else h0.copy()
        for t in range(int(cu[n]), int(cu[n + 1])):
            if bug != "no_decay":
                S *= decay[t][:, :, None]
            if p.family != "linear":
                pred = np.einsum("hkv,hk->hv", S, k[t])
            else:
                pred = 0.0
            S += (beta[t][:, None] * k[t])[:, :, None] * (v[t] - pred)[:, None, :]
            o[t] = np.einsum("hkv,hk->hv", S, q[t])
            if bug == "checkpoint_late" and t - 1 in ck:
                hc[ck[t - 1]] = S
            elif bug != "checkpoint_late" and t in ck:
                hc[ck[t]] = S
        ht[n] = S
    if vk:
        ht, hc = np.swapaxes(ht, -1, -2), np.swapaxes(hc, -1, -2)
    out = {"o": o}
    if p.want_final_state:
        out["ht"] = ht
    if ck:
        out["hc"] = hc
    return out


def buggy(name):
    assert name in BUGS, name

    def k(p, a):
        return kernel(p, a, bug=name)
    k.__name__ = f"kernel_{name}"
    return k

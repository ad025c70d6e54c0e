# fakes.py: numpy float64 stand-ins with the exact signatures of fla, FlashKDA and vLLM kernels.
# SPDX-License-Identifier: MIT
"""Written from the kernels' documented semantics (fla/ops/kda/chunk.py and
fused_recurrent.py; flash_kda/__init__.py; vLLM's fused_recurrent_kda_fwd), not from the
package, so an adapter that passes a flag wrongly gets wrong numbers here.  Each fake
records its calls' keyword arguments in CALLS.  No torch, no GPU."""
import numpy as np

CALLS = []


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _l2(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def _recur(q, k, v, gk, b, S, scale, H, vfirst):
    """One sequence: q,k [L,H,K]; v [L,HV,V]; gk [L,HV,K] log decay; b [L,HV];
    S [HV,K,V] float64 (K-major here).  Returns o [L,HV,V] and the states after each token."""
    HV = v.shape[1]
    hmap = np.arange(HV) // (HV // H)
    o, states = np.zeros(v.shape), []
    for t in range(q.shape[0]):
        S = S * np.exp(gk[t])[:, :, None]
        kk, qq = k[t][hmap], q[t][hmap] * scale
        p = np.einsum("hkv,hk->hv", S, kk)
        S = S + b[t][:, None, None] * kk[:, :, None] * (v[t] - p)[:, None, :]
        o[t] = np.einsum("hkv,hk->hv", S, qq)
        states.append(S)
    return o, states


def _bounds(B, T, cu):
    if cu is None:
        return [(n * T, n * T + T) for n in range(B)]
    cu = np.asarray(cu)
    return [(int(cu[n]), int(cu[n + 1])) for n in range(len(cu) - 1)]


def _fla(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
         use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound,
         state_v_first, cu_seqlens, A_log, dt_bias):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    assert HV % H == 0
    assert g.shape == (B, T, HV, K) and beta.shape == (B, T, HV)
    if cu_seqlens is not None and B != 1:
        raise ValueError("batch size must be 1 with cu_seqlens")
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError("allow_neg_eigval=True requires use_beta_sigmoid_in_kernel=True")
    f = lambda x: np.asarray(x, np.float64).reshape((B * T,) + x.shape[2:])  # noqa: E731
    q, k, v, g, beta = f(q), f(k), f(v), f(g), f(beta)
    if use_qk_l2norm_in_kernel:
        q, k = _l2(q), _l2(k)
    if use_gate_in_kernel:
        if A_log is None and lower_bound is None:
            raise ValueError("A_log must be provided")
        y = g + np.asarray(dt_bias, np.float64).reshape(HV, K)[None]
        Aexp = np.exp(np.asarray(A_log, np.float64))[None, :, None] if A_log is not None else 1.0
        g = lower_bound * _sig(Aexp * y) if lower_bound is not None else -Aexp * np.logaddexp(0, y)
    if use_beta_sigmoid_in_kernel:
        beta = _sig(beta) * (2.0 if allow_neg_eigval else 1.0)
    if scale is None:
        scale = K ** -0.5
    bounds = _bounds(B, T, cu_seqlens)
    if initial_state is not None:
        assert initial_state.dtype == np.float32, "initial_state must be in float32."
        assert initial_state.shape[0] == len(bounds)
    o = np.zeros((B * T, HV, V))
    ht = np.zeros((len(bounds), HV, K, V))
    for n, (lo, hi) in enumerate(bounds):
        S = np.zeros((HV, K, V))
        if initial_state is not None:
            S = np.asarray(initial_state[n], np.float64)
            S = S.transpose(0, 2, 1) if state_v_first else S
        o[lo:hi], st = _recur(q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], S, scale, H,
                              state_v_first)
        ht[n] = st[-1] if st else S
    if state_v_first:
        ht = ht.transpose(0, 1, 3, 2)
    o = o.reshape(B, T, HV, V).astype(np.float32)
    return o, (np.ascontiguousarray(ht, np.float32) if output_final_state else None)


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
              use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
              lower_bound=None, disable_recompute=False, return_intermediate_states=False,
              state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None,
              **kwargs):
    """fla's chunk_kda signature (A_log, dt_bias through **kwargs)."""
    CALLS.append(dict(kwargs, scale=scale, output_final_state=output_final_state,
                      use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                      use_gate_in_kernel=use_gate_in_kernel,
                      use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
                      allow_neg_eigval=allow_neg_eigval, safe_gate=safe_gate,
                      lower_bound=lower_bound, state_v_first=state_v_first,
                      cu_seqlens=cu_seqlens, T=q.shape[1], h0=initial_state is not None))
    A_log = dt_bias = None
    if use_gate_in_kernel:
        A_log, dt_bias = kwargs.get("A_log"), kwargs.get("dt_bias")
    if safe_gate and use_gate_in_kernel:
        if lower_bound is None or not -5 <= lower_bound < 0:
            raise ValueError("`lower_bound` must be in the safe range [-5, 0)")
    assert q.shape[-1] <= 256
    return _fla(q, k, v, g, beta, scale, initial_state, output_final_state,
                use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                allow_neg_eigval, lower_bound, state_v_first, cu_seqlens, A_log, dt_bias)


def fused_recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None,
                        initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                        use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                        lower_bound=None, state_v_first=False, cu_seqlens=None, **kwargs):
    """fla's fused_recurrent_kda signature."""
    assert not kwargs, f"fused_recurrent_kda swallows {sorted(kwargs)} silently"
    CALLS.append(dict(A_log=A_log, dt_bias=dt_bias, scale=scale,
                      use_gate_in_kernel=use_gate_in_kernel, lower_bound=lower_bound,
                      state_v_first=state_v_first, cu_seqlens=cu_seqlens, T=q.shape[1]))
    return _fla(q, k, v, g, beta, scale, initial_state, output_final_state,
                use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                allow_neg_eigval, lower_bound, state_v_first, cu_seqlens,
                A_log if use_gate_in_kernel else None, dt_bias if use_gate_in_kernel else None)


def flash_kda_fwd(q, k, v, g, beta, scale, out, A_log, dt_bias, lower_bound,
                  initial_state=None, final_state=None, cu_seqlens=None):
    """FlashKDA's fwd: K = V = 128, HV = H, states [N,H,V,K], out/final_state in place."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    assert K == 128 and V == 128 and v.shape[2] == H
    assert A_log.dtype == np.float32 and dt_bias.shape == (H, K)
    CALLS.append(dict(T=T, lower_bound=lower_bound, cu_seqlens=cu_seqlens,
                      h0=initial_state is not None, final=final_state is not None))
    f = lambda x: np.asarray(x, np.float64).reshape((B * T,) + x.shape[2:])  # noqa: E731
    q, k, v, g, beta = _l2(f(q)), _l2(f(k)), f(v), f(g), _sig(f(beta))
    y = g + np.asarray(dt_bias, np.float64)[None]
    g = lower_bound * _sig(np.exp(np.asarray(A_log, np.float64))[None, :, None] * y)
    for n, (lo, hi) in enumerate(_bounds(B, T, cu_seqlens)):
        S = np.zeros((H, K, V))
        if initial_state is not None:
            S = np.asarray(initial_state[n], np.float64).transpose(0, 2, 1)
        o, st = _recur(q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], S, scale, H, True)
        out.reshape(B * T, H, V)[lo:hi] = o
        if final_state is not None:
            final_state[n] = (st[-1] if st else S).transpose(0, 2, 1)


def fused_recurrent_kda_fwd(q, k, v, g, beta, scale, initial_state, inplace_final_state=True,
                            cu_seqlens=None, ssm_state_indices=None, num_accepted_tokens=None,
                            use_qk_l2norm_in_kernel=False):
    """vLLM's decode kernel: pool initial_state [slots,HV,K,V], 2-D ssm_state_indices."""
    assert inplace_final_state and ssm_state_indices is not None and ssm_state_indices.ndim == 2
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    CALLS.append(dict(T=T, scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                      accepted=num_accepted_tokens is not None, g_ndim=g.ndim))
    f = lambda x: np.asarray(x, np.float64).reshape((B * T,) + x.shape[2:])  # noqa: E731
    q, k, v, g, beta = f(q), f(k), f(v), f(g), f(beta)
    if g.ndim == 2:
        g = np.broadcast_to(g[:, :, None], (B * T, HV, K))
    if use_qk_l2norm_in_kernel:
        q, k = _l2(q), _l2(k)
    o = np.zeros((B * T, HV, V))
    for n, (lo, hi) in enumerate(_bounds(B, T, cu_seqlens)):
        if hi == lo:
            continue
        i0 = int(num_accepted_tokens[n]) - 1 if num_accepted_tokens is not None else 0
        S = np.asarray(initial_state[int(ssm_state_indices[n, i0])], np.float64)
        o[lo:hi], st = _recur(q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], S, scale,
                              H, False)
        for i, s in enumerate(st):
            initial_state[int(ssm_state_indices[n, i])] = s
    return o.reshape(B, T, HV, V).astype(np.float32), initial_state


def random_inputs(p, seed=0, lens=None, checkpoints=()):
    """Inputs of problem p (shapes of SPEC.md §2.3) with values in each mode's range, stored
    as <f4 like a case file; lens: sequence lengths (sum T), checkpoints: token indices."""
    r = np.random.default_rng(seed)
    f4 = lambda *s: r.standard_normal(s).astype("<f4")  # noqa: E731
    a = {"q": f4(p.T, p.H, p.K), "k": f4(p.T, p.H, p.K), "v": f4(p.T, p.HV, p.V)}
    gw = p.gate_width
    if gw:
        a["g"] = (-r.uniform(0.01, 0.5, (p.T, p.HV, gw)) if p.gate == "log"
                  else r.standard_normal((p.T, p.HV, gw))).astype("<f4")
        if p.gate != "log":
            a["dt_bias"] = f4(p.HV, gw)
            if p.has_A_log:
                a["A_log"] = (0.3 * r.standard_normal(p.HV)).astype("<f4")
    a["beta"] = (r.uniform(0.05, 0.95, (p.T, p.HV)) if p.beta == "prob"
                 else r.standard_normal((p.T, p.HV))).astype("<f4")
    lens = [p.T] if lens is None else list(lens)
    assert len(lens) == p.N and sum(lens) == p.T
    a["cu_seqlens"] = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    if p.has_initial_state:
        a["h0"] = (0.2 * r.standard_normal(p.state_shape(p.N))).astype("<f4")
    if p.n_checkpoints:
        assert len(checkpoints) == p.n_checkpoints
        a["checkpoints"] = np.array(checkpoints, np.int64)
    if p.l2 == "off":                      # keep unnormalised runs bounded
        a["q"] *= 0.3
        a["k"] /= np.sqrt(p.K) * 1.5
    return a


def close(out, ref, tol=2e-5):
    """max |out - ref| / (1 + max |ref|) over o, ht, hc, member by member."""
    for m in ("o", "ht", "hc"):
        if m in out and out[m] is not None:
            want = ref[m]
            got = np.asarray(out[m], np.float64)
            assert got.shape == want.shape, (m, got.shape, want.shape)
            err = np.abs(got - want).max(initial=0.0) / (1 + np.abs(want).max(initial=0.0))
            assert err < tol, f"{m}: relative error {err:.3g}"


def fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, softplus_beta, softplus_threshold,
                                           q, k, v, b, initial_state_source,
                                           initial_state_indices, scale=None,
                                           use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    """vLLM/SGLang's GDN decode step: gate and sigmoid(b) in the kernel, pool [slots,HV,K,V]
    read from and written back to initial_state_indices[n] (< 0: zero state, no write)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    assert A_log.shape == (HV,) and dt_bias.shape == (HV,) and a.shape == (B, T, HV)
    CALLS.append(dict(T=T, threshold=softplus_threshold, l2=use_qk_l2norm_in_kernel))
    f = lambda x: np.asarray(x, np.float64).reshape((B * T,) + x.shape[2:])  # noqa: E731
    q, k, v, a, b = f(q), f(k), f(v), f(a), f(b)
    x = (a + np.asarray(dt_bias, np.float64)[None]) * softplus_beta
    sp = np.where(x <= softplus_threshold, np.log1p(np.exp(np.minimum(x, 50))) / softplus_beta,
                  x / softplus_beta)
    g = -np.exp(np.asarray(A_log, np.float64))[None] * sp
    gk = np.broadcast_to(g[:, :, None], (B * T, HV, K))
    if use_qk_l2norm_in_kernel:
        q = q / (np.sqrt((q * q).sum(-1, keepdims=True)) + 1e-6)
        k = k / (np.sqrt((k * k).sum(-1, keepdims=True)) + 1e-6)
    o = np.zeros((B * T, HV, V))
    for n, (lo, hi) in enumerate(_bounds(B, T, cu_seqlens)):
        i = int(initial_state_indices[n])
        S = np.zeros((HV, K, V)) if i < 0 else np.asarray(initial_state_source[i], np.float64)
        o[lo:hi], st = _recur(q[lo:hi], k[lo:hi], v[lo:hi], gk[lo:hi], _sig(b[lo:hi]), S,
                              scale, H, False)
        if i >= 0:
            initial_state_source[i] = st[-1] if st else S
    return o.reshape(B, T, HV, V).astype(np.float32)


def fused_sigmoid_gating_delta_rule_update_kda(A_log, a, dt_bias, softplus_beta,
                                               softplus_threshold, q, k, v, b,
                                               initial_state_source, initial_state_indices,
                                               scale=None, use_qk_l2norm_in_kernel=False,
                                               cu_seqlens=None, is_kda=False,
                                               disable_state_update=False,
                                               intermediate_states_buffer=None,
                                               intermediate_state_indices=None,
                                               cache_steps=None, retrieve_parent_token=None):
    """SGLang's decode step with is_kda (fla/fused_sigmoid_gating_recurrent.py): a
    [B,T,HV*K] and dt_bias [HV*K] per key channel, A_log [HV], fla's L2
    x / sqrt(sum x^2 + 1e-6), pool [slots,HV,V,K] read from and written back to
    initial_state_indices[n] (< 0: zero state, no write)."""
    assert is_kda and intermediate_states_buffer is None and retrieve_parent_token is None
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    assert A_log.shape == (HV,) and dt_bias.shape == (HV * K,) and a.shape == (B, T, HV * K)
    CALLS.append(dict(T=T, threshold=softplus_threshold, l2=use_qk_l2norm_in_kernel))
    f = lambda x: np.asarray(x, np.float64).reshape((B * T,) + x.shape[2:])  # noqa: E731
    q, k, v, b = f(q), f(k), f(v), f(b)
    x = (np.asarray(a, np.float64).reshape(B * T, HV, K)
         + np.asarray(dt_bias, np.float64).reshape(HV, K)[None]) * softplus_beta
    sp = np.where(x <= softplus_threshold, np.log1p(np.exp(np.minimum(x, 50))) / softplus_beta,
                  x / softplus_beta)
    gk = -np.exp(np.asarray(A_log, np.float64))[None, :, None] * sp
    if use_qk_l2norm_in_kernel:
        q, k = _l2(q), _l2(k)
    o = np.zeros((B * T, HV, V))
    for n, (lo, hi) in enumerate(_bounds(B, T, cu_seqlens)):
        i = int(initial_state_indices[n])
        S = (np.zeros((HV, K, V)) if i < 0
             else np.asarray(initial_state_source[i], np.float64).transpose(0, 2, 1))
        o[lo:hi], st = _recur(q[lo:hi], k[lo:hi], v[lo:hi], gk[lo:hi], _sig(b[lo:hi]), S,
                              scale, H, False)
        if i >= 0 and not disable_state_update:
            initial_state_source[i] = (st[-1] if st else S).transpose(0, 2, 1)
    return o.reshape(B, T, HV, V).astype(np.float32)

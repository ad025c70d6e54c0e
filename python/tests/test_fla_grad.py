# test_fla_grad.py: kda_conform.fla.backward_adapter through a differentiable torch stand-in of
# fla's chunk_kda (skipped where torch is not installed): every gradient passes; a stand-in
# whose L2 normalisation is detached fails its gradient reports.
# SPDX-License-Identifier: MIT
import pytest

import kda_conform as kc
from test_grad import by_case, grad_set  # noqa: F401 (the fixture)

torch = pytest.importorskip("torch")


def torch_chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                    use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                    use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
                    lower_bound=None, state_v_first=False, cu_seqlens=None, A_log=None,
                    dt_bias=None, detach_l2=False, **kwargs):
    """fla's chunk_kda semantics (fla/ops/kda/chunk.py), written plainly in torch float64."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q, k, v, g, beta = (t.double().reshape((B * T,) + t.shape[2:]) for t in (q, k, v, g, beta))
    if use_qk_l2norm_in_kernel:
        nq = torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        nk = torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        if detach_l2:
            nq, nk = nq.detach(), nk.detach()
        q, k = q / nq, k / nk
    if use_gate_in_kernel:
        y = g + dt_bias.double().reshape(HV, K)[None]
        E = torch.exp(A_log.double())[None, :, None] if A_log is not None else 1.0
        g = lower_bound * torch.sigmoid(E * y) if lower_bound is not None \
            else -E * torch.nn.functional.softplus(y)
    if use_beta_sigmoid_in_kernel:
        beta = torch.sigmoid(beta) * (2.0 if allow_neg_eigval else 1.0)
    scale = K ** -0.5 if scale is None else scale
    cu = [0, B * T] if cu_seqlens is None else [int(c) for c in cu_seqlens]
    hmap = torch.arange(HV) // (HV // H)
    outs, finals = [], []
    for n in range(len(cu) - 1):
        S = torch.zeros(HV, K, V, dtype=torch.float64)
        if initial_state is not None:
            S = initial_state[n].double()
            S = S.transpose(1, 2) if state_v_first else S
        for t in range(cu[n], cu[n + 1]):
            S = S * torch.exp(g[t])[:, :, None]
            kk, qq = k[t][hmap], q[t][hmap] * scale
            pr = torch.einsum("hkv,hk->hv", S, kk)
            S = S + beta[t][:, None, None] * kk[:, :, None] * (v[t] - pr)[:, None, :]
            outs.append(torch.einsum("hkv,hk->hv", S, qq))
        finals.append(S.transpose(1, 2) if state_v_first else S)
    o = torch.stack(outs).reshape(B, T, HV, V).float()
    return o, (torch.stack(finals).float() if output_final_state else None)


def test_fla_backward_adapter(grad_set):
    kernel = kc.fla.backward_adapter(torch_chunk_kda, dtype="float64", device="cpu")
    res = by_case(kc.check(kernel, golden=grad_set, cls="fp32", backward=True,
                           runner_args=["--serving", "off"]))
    assert {"gs-soft.backward", "gs-lb.backward", "gs-gdn.backward"} <= set(res)
    assert all(r.verdict == "Pass" for r in res.values()), kc.summary(list(res.values()))


def test_fla_backward_detached_l2_fails(grad_set):
    kernel = kc.fla.backward_adapter(torch_chunk_kda, dtype="float64", device="cpu",
                                     extra={"detach_l2": True})
    res = by_case(kc.check(kernel, golden=grad_set, cls="fp32", backward=True,
                           cases=["gs-soft"], runner_args=["--serving", "off"]))
    assert res["gs-soft"].verdict == "Pass"
    assert res["gs-soft.backward"].verdict == "Fail"

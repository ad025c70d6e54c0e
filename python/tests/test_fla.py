# test_fla.py: kda_conform.fla: every mode's keyword arguments, the declines, and numbers through fakes.
# SPDX-License-Identifier: MIT
import numpy as np
import pytest

import fakes
import kda_conform as kc
from kda_conform import fla

BASE = dict(T=12, H=2, HV=4, K=8, V=6)


def P(**kw):
    return kc.Problem(**dict(BASE, **kw))


def kwargs(kernel="chunk", safe_gate=True, **kw):
    return fla.plan(P(**kw), kernel, safe_gate)["kwargs"]


@pytest.mark.parametrize("kernel", ["chunk", "recurrent"])
def test_gate_modes(kernel):
    kw = kwargs(kernel, gate="log")
    assert kw["use_gate_in_kernel"] is False and "lower_bound" not in kw
    kw = kwargs(kernel, gate="softplus", has_A_log=True)
    assert kw["use_gate_in_kernel"] is True and "lower_bound" not in kw and "safe_gate" not in kw
    kw = kwargs(kernel, gate="lower_bound", lower_bound=-3.0)
    assert kw["use_gate_in_kernel"] is True and kw["lower_bound"] == -3.0
    # safe_gate is a chunk_kda argument; fused_recurrent_kda would swallow it in **kwargs.
    assert kw.get("safe_gate") is (True if kernel == "chunk" else None)
    assert "safe_gate" not in kwargs(kernel, safe_gate=False, gate="lower_bound")


@pytest.mark.parametrize("beta,sig,neg", [("prob", False, False), ("logit", True, False),
                                          ("logit_neg", True, True)])
def test_beta_modes(beta, sig, neg):
    kw = kwargs(beta=beta)
    assert (kw["use_beta_sigmoid_in_kernel"], kw["allow_neg_eigval"]) == (sig, neg)


@pytest.mark.parametrize("l2,eps,inside,outside", [("off", 1e-6, False, False),
                                                   ("fla", 1e-6, True, False),
                                                   ("fla", 1e-3, False, True),
                                                   ("ggml", 1e-6, False, True)])
def test_l2_modes(l2, eps, inside, outside):
    pl = fla.plan(P(l2=l2, l2_eps=eps))
    assert pl["kwargs"]["use_qk_l2norm_in_kernel"] is inside and pl["l2_outside"] is outside


def test_layout_scale_final_state_checkpoints():
    kw = kwargs(state_layout="vk", scale=0.25, want_final_state=False)
    assert kw["state_v_first"] is True and kw["scale"] == 0.25
    assert kw["output_final_state"] is False
    assert kwargs()["state_v_first"] is False
    assert fla.plan(P(n_checkpoints=2))["chained"] and not fla.plan(P())["chained"]


def test_head_map_permutation():
    assert fla.plan(P())["perm"] is None
    assert fla.plan(P(H=4, head_map="mod"))["perm"] is None          # G = 1: the maps agree
    perm = fla.plan(P(head_map="mod", HV=6))["perm"]
    # Position j of the permuted problem reads q/k head j // G under fla's div map; the
    # case's value head perm[j] reads perm[j] % H under the mod map: the same head.
    assert perm.tolist() == [0, 2, 4, 1, 3, 5]
    assert all(perm[j] % 2 == j // 3 for j in range(6))


@pytest.mark.parametrize("kw,reason", [(dict(family="linear"), "family=linear"),
                                       (dict(K=512), "K <= 256")])
def test_declines(kw, reason):
    with pytest.raises(kc.NotSupported, match=reason):
        fla.plan(P(**kw), "chunk")
    if "K" in kw:
        fla.plan(P(**kw), "recurrent")                 # fused_recurrent_kda has no K limit


MODES = [
    dict(),
    dict(gate="softplus", has_A_log=True, beta="logit", l2="fla"),
    dict(gate="lower_bound", beta="logit_neg", l2="fla", state_layout="vk", has_initial_state=True),
    dict(gate="lower_bound", has_A_log=True, l2="ggml", head_map="mod"),
    dict(family="gdn", gate="softplus", has_A_log=True, l2="fla", l2_eps=1e-3, head_map="mod",
         state_layout="vk", has_initial_state=True),
    dict(family="deltanet", beta="logit", l2="fla"),
    dict(N=3, has_initial_state=True, head_map="mod", gate="softplus", has_A_log=True,
         n_checkpoints=3, state_layout="vk"),
    dict(N=3, n_checkpoints=2, want_final_state=False, l2="fla"),
]


@pytest.mark.parametrize("fn", [fakes.chunk_kda, fakes.fused_recurrent_kda])
@pytest.mark.parametrize("i", range(len(MODES)))
def test_numbers_match_the_reference(fn, i):
    p = P(**MODES[i])
    lens = [5, 0, 7] if p.N == 3 else None
    ck = [1, 4, 8][:p.n_checkpoints]
    a = fakes.random_inputs(p, seed=i, lens=lens, checkpoints=ck)
    out = fla.adapter(fn, array="numpy", dtype="float64")(p, a)
    fakes.close(out, kc.reference(p, a))
    assert set(out) == set(kc.files.result_shapes(p))


def test_calls_and_chained_checkpoints():
    p = P(N=3, has_initial_state=True, gate="softplus", has_A_log=True, n_checkpoints=3)
    a = fakes.random_inputs(p, lens=[5, 0, 7], checkpoints=[1, 4, 8])
    fakes.CALLS.clear()
    fla.adapter(fakes.chunk_kda, array="numpy", dtype="float64")(p, a)
    main, *chain = fakes.CALLS
    assert main["T"] == 12 and main["cu_seqlens"].tolist() == [0, 5, 5, 12] and main["h0"]
    assert main["A_log"].shape == (4,) and main["dt_bias"].shape == (32,)
    assert main["A_log"].dtype == np.float32 and main["lower_bound"] is None
    # Sequence 0 holds checkpoints 1 and 4 (segments [0,2) and [2,5)), sequence 2 holds 8
    # (segment [5,9)): one call each, batch 1, resuming from the previous final state.
    assert [(c["T"], c["cu_seqlens"], c["output_final_state"]) for c in chain] == \
        [(2, None, True), (3, None, True), (4, None, True)]


def test_numpy_arrays_need_no_torch():
    with pytest.raises(ValueError, match="array"):
        fla.adapter(fakes.chunk_kda, array="jax")
    with pytest.raises(ValueError, match="chunk_kda or"):
        fla.adapter(lambda **kw: None, array="numpy")


@pytest.mark.slow
def test_l1_through_the_runner(kda):
    # The 65536-token drift cases are left to test_check (the fakes loop in Python).
    res = kc.check(fla.adapter(fakes.chunk_kda, array="numpy", dtype="float64"), cls="fp32",
                   cases=["!drift-*"], expect_declines=["t127-linear"])
    declined = {r.base_case for r in res if r.skipped}
    assert declined == {"t127-linear"} and len(res) >= 45
    assert all(r.ok for r in res if r.base_case not in declined), kc.summary(res)
    assert all(r.verdict == "NotSupported" for r in res if r.base_case in declined)


def test_adapters_after_a_plain_import():
    """kda_conform.fla.adapter(...) as the README writes it, after `import kda_conform`."""
    import subprocess
    import sys
    code = ("import kda_conform; print(kda_conform.fla.adapter.__module__, "
            "kda_conform.flashkda.plan.__module__, kda_conform.vllm.adapter.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["kda_conform.fla", "kda_conform.flashkda",
                                  "kda_conform.vllm"], out.stderr
    with pytest.raises(AttributeError, match="no_such"):
        kc.no_such_adapter


def test_torch_tensors_on_the_cpu():
    """The torch path of the adapter (skipped where torch is not installed, as in CI)."""
    torch = pytest.importorskip("torch")

    def torch_chunk_kda(q, k, v, g, beta, **kw):
        assert q.dtype == torch.bfloat16 and q.device.type == "cpu"
        assert kw.get("cu_seqlens") is None or kw["cu_seqlens"].dtype == torch.int64
        n = lambda x: x if not torch.is_tensor(x) else (  # noqa: E731
            x.numpy() if x.dtype in (torch.float32, torch.int64) else x.double().numpy())
        o, ht = fakes.chunk_kda(n(q), n(k), n(v), n(g), n(beta),
                               **{m: n(x) for m, x in kw.items()})
        return torch.from_numpy(o).to(torch.bfloat16), None if ht is None else torch.from_numpy(ht)
    p = P(N=3, has_initial_state=True, gate="softplus", has_A_log=True, n_checkpoints=2,
          head_map="mod", l2="fla")
    a = fakes.random_inputs(p, seed=7, lens=[5, 0, 7], checkpoints=[1, 8])
    out = fla.adapter(torch_chunk_kda, kernel="chunk", dtype="bfloat16", device="cpu")(p, a)
    fakes.close(out, kc.reference(p, a), tol=3e-2)

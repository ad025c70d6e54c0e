# test_vllm.py: kda_conform.vllm: the decode signature with a state pool, slots, declines, numbers.
# SPDX-License-Identifier: MIT
import numpy as np
import pytest

import fakes
import kda_conform as kc
from kda_conform import vllm

BASE = dict(T=12, H=2, HV=4, K=8, V=6)


def P(**kw):
    return kc.Problem(**dict(BASE, **kw))


@pytest.mark.parametrize("kw,reason,opts", [
    (dict(family="linear"), "family=linear", {}),
    (dict(gate="softplus", has_A_log=True), "gate=softplus", {}),
    (dict(beta="logit"), "beta=logit", {}),
    (dict(), "per-channel decay", {"gate_shape": "gdn"}),
])
def test_declines(kw, reason, opts):
    with pytest.raises(kc.NotSupported, match=reason):
        vllm.plan(P(**kw), **opts)


def test_plan():
    pl = vllm.plan(P(l2="fla"))
    assert pl["kwargs"] == {"scale": P().scale, "inplace_final_state": True,
                            "use_qk_l2norm_in_kernel": True}
    pl = vllm.plan(P(gate="lower_bound", beta="logit", l2="ggml", state_layout="vk"),
                   precompute=True)
    assert pl["gate_outside"] and pl["beta_outside"] and pl["l2_outside"] and pl["transpose"]


def test_pool_plan():
    p = P(N=3, T=6)
    pp = vllm.pool_plan(p, np.array([0, 2, 2, 6]), accepted=True)
    assert pp["idx"].shape == (3, 4) and sorted(pp["idx"].ravel()) == list(range(1, 13))
    assert pp["acc"].tolist() == [1, 1, 3]             # num_accepted_tokens in [1, len]
    assert pp["spare"].tolist() == [0, 13] and pp["slots"] == 14
    assert pp["h0_slot"].tolist() == [pp["idx"][0, 0], pp["idx"][1, 0], pp["idx"][2, 2]]


MODES = [dict(), dict(l2="fla", has_initial_state=True),
         dict(N=3, has_initial_state=True, head_map="mod", n_checkpoints=3, state_layout="vk"),
         dict(N=3, gate="softplus", has_A_log=True, beta="logit_neg", l2="ggml",
              has_initial_state=True, n_checkpoints=2),
         dict(family="deltanet", beta="logit")]


@pytest.mark.parametrize("accepted", [True, False])
@pytest.mark.parametrize("i", range(len(MODES)))
def test_numbers_match_the_reference(i, accepted):
    p = P(**MODES[i])
    a = fakes.random_inputs(p, seed=20 + i, lens=[5, 0, 7] if p.N == 3 else None,
                            checkpoints=[1, 4, 8][:p.n_checkpoints])
    fn = vllm.adapter(fakes.fused_recurrent_kda_fwd, array="numpy", dtype="float64",
                      precompute=True, accepted=accepted)
    fakes.close(fn(p, a), kc.reference(p, a))


def test_gdn_kernel_gets_scalar_gates():
    p = P(family="gdn", has_initial_state=True)
    a = fakes.random_inputs(p, seed=3)
    fakes.CALLS.clear()
    out = vllm.adapter(fakes.fused_recurrent_kda_fwd, array="numpy", dtype="float64",
                       gate_shape="gdn")(p, a)
    assert fakes.CALLS[-1]["g_ndim"] == 4 - 1 and fakes.CALLS[-1]["accepted"]
    fakes.close(out, kc.reference(p, a))


def test_a_kernel_that_reads_or_writes_the_wrong_slot_is_caught():
    p = P(N=3, has_initial_state=True)
    a = fakes.random_inputs(p, seed=4, lens=[5, 0, 7])

    def ignores_accepted(*args, num_accepted_tokens=None, **kw):   # reads column 0
        return fakes.fused_recurrent_kda_fwd(*args, num_accepted_tokens=None, **kw)
    out = vllm.adapter(ignores_accepted, array="numpy", dtype="float64")(p, a)
    assert np.isnan(out["o"][5:]).all()          # sequence 2 resumed from a never-written slot

    def scribbles(*args, initial_state=None, **kw):
        r = fakes.fused_recurrent_kda_fwd(*args, initial_state=initial_state, **kw)
        initial_state[0] = 0.0
        return r
    with pytest.raises(RuntimeError, match="slot no index named"):
        vllm.adapter(scribbles, array="numpy", dtype="float64")(p, a)


@pytest.mark.slow
def test_l1_through_the_runner(kda):
    fn = vllm.adapter(fakes.fused_recurrent_kda_fwd, array="numpy", dtype="float64",
                      precompute=True)
    res = kc.check(fn, cls="fp32", cases=["!drift-*"])      # drift: see test_check
    declined = {r.base_case for r in res if "declined" in r.reason or r.skipped}
    assert declined == {"t127-linear"} and len(res) >= 45
    assert all(r.ok for r in res if r.base_case not in declined), kc.summary(res)


GDN = dict(family="gdn", gate="softplus", has_A_log=True, beta="logit")


@pytest.mark.parametrize("kw,reason", [(dict(GDN, family="kda"), "family=kda"),
                                       (dict(GDN, gate="lower_bound"), "gate=lower_bound"),
                                       (dict(GDN, has_A_log=False, gate="log"), "gate=log"),
                                       (dict(GDN, beta="prob"), "beta=prob")])
def test_sigmoid_gating_declines(kw, reason):
    with pytest.raises(kc.NotSupported, match=reason):
        vllm.sigmoid_gating_plan(P(**kw))


SG_MODES = [dict(GDN), dict(GDN, l2="fla", has_initial_state=True, state_layout="vk"),
            dict(GDN, N=3, l2="ggml", head_map="mod", has_initial_state=True, n_checkpoints=3),
            dict(GDN, N=3, n_checkpoints=2, want_final_state=False, state_layout="vk")]


@pytest.mark.parametrize("i", range(len(SG_MODES)))
def test_sigmoid_gating_numbers(i):
    p = P(**SG_MODES[i])
    a = fakes.random_inputs(p, seed=30 + i, lens=[5, 0, 7] if p.N == 3 else None,
                            checkpoints=[1, 4, 8][:p.n_checkpoints])
    fakes.CALLS.clear()
    out = vllm.sigmoid_gating_adapter(fakes.fused_sigmoid_gating_delta_rule_update,
                                      array="numpy", dtype="float64")(p, a)
    fakes.close(out, kc.reference(p, a))
    assert not any(c["l2"] for c in fakes.CALLS)       # its L2 is neither convention
    assert len(fakes.CALLS) == 1 + (p.n_checkpoints if p.N == 3 else 0)


def test_sigmoid_gating_l1(kda):
    fn = vllm.sigmoid_gating_adapter(fakes.fused_sigmoid_gating_delta_rule_update,
                                     array="numpy", dtype="float64")
    res = kc.check(fn, cls="fp32", cases=["flag:FAMILY_GDN", "*gdn*"])
    ran = [r for r in res if not ("declined" in r.reason or r.skipped)]
    assert ran and all(r.ok for r in ran), kc.summary(res)

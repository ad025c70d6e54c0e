# test_sglang_kda.py: kda_conform.vllm.sigmoid_gating_adapter in SGLang's KDA mode (is_kda, [V,K] pool, L2 in the kernel).
# SPDX-License-Identifier: MIT
import numpy as np
import pytest

import fakes
import kda_conform as kc
from kda_conform import vllm

BASE = dict(T=12, H=2, HV=4, K=8, V=6, gate="softplus", beta="logit", has_A_log=True)
KDA = dict(is_kda=True, layout="vk", l2_in_kernel=True, array="numpy", dtype="float64")
MODES = [dict(BASE), dict(BASE, l2="fla", has_initial_state=True),
         dict(BASE, N=3, l2="ggml", head_map="mod", has_initial_state=True, n_checkpoints=3,
              state_layout="vk"),
         dict(BASE, has_A_log=False, family="gdn", l2="fla"),
         dict(BASE, N=3, n_checkpoints=2, want_final_state=False)]


def P(**kw):
    return kc.Problem(**kw)


@pytest.mark.parametrize("i", range(len(MODES)))
def test_kda_mode_numbers(i):
    p = P(**MODES[i])
    a = fakes.random_inputs(p, seed=60 + i, lens=[5, 0, 7] if p.N == 3 else None,
                            checkpoints=[1, 4, 8][:p.n_checkpoints])
    fakes.CALLS.clear()
    out = vllm.sigmoid_gating_adapter(fakes.fused_sigmoid_gating_delta_rule_update_kda,
                                      **KDA)(p, a)
    fakes.close(out, kc.reference(p, a))
    inside = p.l2 == "fla"
    assert all(c["l2"] is inside for c in fakes.CALLS)


def test_kda_mode_declines():
    plan = vllm.sigmoid_gating_plan
    for kw, why in [(dict(gate="log"), "gate=log"), (dict(beta="prob"), "beta=prob"),
                    (dict(family="deltanet"), "family=deltanet")]:
        with pytest.raises(kc.NotSupported, match=why):
            plan(P(**dict(BASE, **kw)), is_kda=True)
    with pytest.raises(kc.NotSupported, match="family=kda"):
        plan(P(**BASE))                                   # the GDN kernel stays GDN-only
    assert plan(P(**dict(BASE, l2="fla")), is_kda=True)["l2_outside"]   # default: outside
    assert not plan(P(**dict(BASE, l2="fla")), True, True)["l2_outside"]


def test_a_wrong_pool_layout_is_caught():
    """The deliberate bug: the adapter told the [V,K] pool is [K,V] gives wrong states."""
    p = P(**dict(BASE, has_initial_state=True, K=6, V=6))
    a = fakes.random_inputs(p, seed=7)
    out = vllm.sigmoid_gating_adapter(fakes.fused_sigmoid_gating_delta_rule_update_kda,
                                      **dict(KDA, layout="kv"))(p, a)
    with pytest.raises(AssertionError):
        fakes.close(out, kc.reference(p, a))
    with pytest.raises(ValueError, match="layout"):
        vllm.sigmoid_gating_adapter(np.sum, layout="kvv")

# test_flashkda.py: kda_conform.flashkda: declines, GVA by copied q/k heads, kv layout, numbers.
# SPDX-License-Identifier: MIT
import pytest

import fakes
import kda_conform as kc
from kda_conform import flashkda

OK = dict(T=9, H=1, HV=1, K=128, V=128, gate="lower_bound", beta="logit", l2="fla",
          state_layout="vk")


def P(**kw):
    return kc.Problem(**dict(OK, **kw))


@pytest.mark.parametrize("kw,reason", [
    (dict(K=64), "K = V = 128"), (dict(V=100), "K = V = 128"),
    (dict(gate="softplus", has_A_log=True), "gate=softplus"), (dict(gate="log"), "gate=log"),
    (dict(beta="prob"), "beta=prob"), (dict(beta="logit_neg"), "beta=logit_neg"),
    (dict(l2="ggml"), "l2=ggml"), (dict(l2="off"), "l2=off"), (dict(l2_eps=1e-5), "eps=1e-05"),
    (dict(family="deltanet"), "family=deltanet"), (dict(family="linear"), "family=linear"),
])
def test_declines(kw, reason):
    with pytest.raises(kc.NotSupported, match=reason):
        flashkda.plan(P(**kw))


def test_plan():
    pl = flashkda.plan(P(H=2, HV=4, head_map="mod", state_layout="kv"))
    assert pl["expand"].tolist() == [0, 1, 0, 1] and pl["transpose"] is True
    assert flashkda.plan(P())["expand"] is None and flashkda.plan(P())["transpose"] is False


MODES = [dict(), dict(has_A_log=True, has_initial_state=True),
         dict(H=2, HV=4, head_map="mod", state_layout="kv", has_initial_state=True),
         dict(family="gdn", H=1, HV=2, has_A_log=True),
         dict(T=10, N=3, has_initial_state=True, n_checkpoints=3, state_layout="kv", HV=2)]


@pytest.mark.parametrize("i", range(len(MODES)))
def test_numbers_match_the_reference(i):
    p = P(**MODES[i])
    a = fakes.random_inputs(p, seed=10 + i, lens=[4, 0, 6] if p.N == 3 else None,
                            checkpoints=[0, 3, 9][:p.n_checkpoints])
    out = flashkda.adapter(fakes.flash_kda_fwd, array="numpy", dtype="float64")(p, a)
    fakes.close(out, kc.reference(p, a))


def test_l1_cases_flashkda_can_take(kda):
    res = kc.check(flashkda.adapter(fakes.flash_kda_fwd, array="numpy", dtype="float64"),
                   cases=["t128-k128", "t129-k128"], expect_declines=["t12[89]-k128"])
    assert [(r.verdict, r.skipped) for r in res if not r.serving] == [("NotSupported", True)] * 2

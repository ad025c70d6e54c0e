# test_zoo_numpy.py: every numpy kernel of the honest zoo (tests/zoo/numpy_zoo.py) is a
# correct float32 KDA: on small well-conditioned problems it agrees with the float64 reference
# to float32 accuracy, and a deliberately broken variant (key channel 0 never decays) does not.
# SPDX-License-Identifier: MIT
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo"))

import kda_conform  # noqa: E402
import numpy_zoo  # noqa: E402

PROBLEMS = [
    dict(T=70, H=2, HV=4, K=16, V=8, N=3, n_checkpoints=3, family="kda", gate="softplus",
         beta="logit", l2="fla", has_A_log=True, has_initial_state=True),
    dict(T=40, H=2, HV=4, K=8, V=16, family="gdn", gate="lower_bound", beta="logit_neg",
         l2="ggml", head_map="mod", state_layout="vk", has_initial_state=True, n_checkpoints=2),
    dict(T=33, H=1, HV=2, K=8, V=8, family="deltanet", beta="prob", l2="fla"),
    dict(T=20, H=1, HV=1, K=8, V=8, family="linear", beta="prob", l2="off",
         has_initial_state=True),
    dict(T=90, H=1, HV=2, K=16, V=16, family="kda", gate="log", beta="logit", l2="fla"),
]


def _inputs(p, seed):
    r = np.random.default_rng(seed)
    f = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
    x = {"q": f(p.T, p.H, p.K), "k": f(p.T, p.H, p.K), "v": f(p.T, p.HV, p.V),
         "beta": (r.uniform(0, 1, (p.T, p.HV)) if p.beta == "prob" else
                  r.standard_normal((p.T, p.HV))).astype(np.float32)}
    if p.gate_width:
        x["g"] = (-r.uniform(0, 1, (p.T, p.HV, p.gate_width)) if p.gate == "log" else
                  f(p.T, p.HV, p.gate_width)).astype(np.float32)
        if p.gate != "log":
            x["dt_bias"] = f(p.HV, p.gate_width)
        if p.has_A_log:
            x["A_log"] = (0.1 * f(p.HV)).astype(np.float32)
    if p.N > 1:
        x["cu_seqlens"] = np.array([0, 25, 25, p.T], dtype=np.int64)
    if p.has_initial_state:
        x["h0"] = (0.5 * f(*p.state_shape(p.N))).astype(np.float32)
    if p.n_checkpoints:
        x["checkpoints"] = np.linspace(3, p.T - 2, p.n_checkpoints).astype(np.int64)
    return x


def _worst(p, x, out):
    """Worst error of o (relative to the largest |o| of its token) and of the states."""
    ref = kda_conform.reference(p, x)
    e = 0.0
    for key in ("o", "ht", "hc"):
        if key not in out or ref[key].size == 0:
            continue
        r, c = ref[key], np.asarray(out[key], dtype=np.float64)
        assert c.shape == r.shape, key
        scale = np.max(np.abs(r)) + 1e-30
        e = max(e, float(np.max(np.abs(c - r)) / scale))
    return e


@pytest.mark.parametrize("name", sorted(numpy_zoo.KERNELS) + ["perm7"])
@pytest.mark.parametrize("i", range(len(PROBLEMS)))
def test_zoo_kernel_is_correct(name, i):
    p = kda_conform.Problem(**PROBLEMS[i])
    x = _inputs(p, 100 + i)
    kern = numpy_zoo.perm(7) if name == "perm7" else numpy_zoo.KERNELS[name]
    with np.errstate(over="ignore", invalid="ignore"):
        out = kern(p, x)
    assert out["o"].dtype == np.float32
    # float32 accuracy: a few hundred ulps of the largest value at most (2^-24 * 256 ~ 1.5e-5)
    assert _worst(p, x, out) < 1.5e-5, name


def test_broken_member_fails():
    p = kda_conform.Problem(**PROBLEMS[4])
    x = _inputs(p, 104)
    y = dict(x)
    y["g"] = x["g"].copy()
    y["g"][:, :, 0] = 0.0                     # key channel 0 never decays
    out = numpy_zoo.KERNELS["textbook"](p, y)
    assert _worst(p, x, out) > 1e-3

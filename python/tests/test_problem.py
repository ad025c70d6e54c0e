# test_problem.py: the float64 numpy reference against the certified golden answers of golden/L1.
# SPDX-License-Identifier: MIT
import glob
import os

import numpy as np
import pytest

import kda_conform as kc
from kda_conform.problem import head_of


def test_defaults_follow_spec():
    p = kc.Problem(T=1, H=1, HV=1, K=8, V=8)
    assert p.scale == 1.0 / np.sqrt(8.0) and p.l2_eps == 1e-6 and p.lower_bound == -5.0
    assert (p.family, p.gate, p.beta, p.l2, p.state_layout) == ("kda", "log", "prob", "off", "kv")


def test_head_maps():
    div = kc.Problem(T=1, H=2, HV=6, K=1, V=1)
    mod = kc.Problem(T=1, H=2, HV=6, K=1, V=1, head_map="mod")
    assert head_of(div).tolist() == [0, 0, 0, 1, 1, 1]
    assert head_of(mod).tolist() == [0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize("kw", [dict(HV=3), dict(gate="exp"), dict(K=0), dict(scale=float("nan")),
                                dict(has_A_log=1)])
def test_invalid_problems(kw):
    with pytest.raises(kc.ProblemError):
        kc.Problem(**dict(dict(T=1, H=2, HV=2, K=4, V=4), **kw))


def _golden(golden_l1):
    return sorted(glob.glob(os.path.join(golden_l1, "*.npz")))


def test_reference_matches_golden(golden_l1):
    """The port of SPEC.md §3.1 agrees with the certified values on every L1 case (to
    float64 accuracy relative to each case's magnitude)."""
    files = _golden(golden_l1)
    assert len(files) >= 50
    for path in files:
        c = kc.read_case(path)
        ref = kc.reference(c.problem, c.inputs)
        with np.load(path) as z:
            for m in ("o", "ht", "hc"):
                if m not in z.files:
                    continue
                want = z[m]
                scale = 1.0 + np.abs(want).max(initial=0.0)
                err = np.abs(ref[m] - want).max(initial=0.0) / scale
                assert err < 1e-9, f"{c.id}: {m} differs by {err:.3g} (relative)"

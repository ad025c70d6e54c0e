# test_ref_autograd.py: the independent pure-Python autograd against the certified golden gradients.
# SPDX-License-Identifier: MIT
"""kda_conform.ref_autograd differentiates the forward generically (a tape of scalar nodes),
knowing nothing of the adjoint recurrence; its gradients must agree with the certified ones of
golden/grad (SPEC.md §13.9) to 1e-12 of each gradient tensor's largest element, on every
gradient case: make check-python the small ones (T HV K V <= 4096), make check-python-l1 (the
`slow` mark) the others."""
import glob
import os

import pytest

from kda_conform.files import _read_npz, read_case
from kda_conform import ref_autograd

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRAD = os.path.join(REPO, "golden", "grad")
FAST = 4096  # T HV K V of the cases make check-python takes


def _cases():
    out = []
    for path in sorted(glob.glob(os.path.join(GRAD, "L*", "*.npz"))):
        p = _read_npz(path)[0]["problem"]
        size = p["T"] * p["HV"] * p["K"] * p["V"]
        marks = () if size <= FAST else (pytest.mark.slow,)
        out.append(pytest.param(path, marks=marks, id=os.path.basename(path)[:-4]))
    return out


CASES = _cases()


def _flat(x):
    return [float(v) for v in x.reshape(-1).tolist()]


def autograd_vs_gold(path):
    """The largest error of the autograd over its tensor's largest certified gradient."""
    case = read_case(path)
    _, arrays = _read_npz(path)
    inputs = {k: _flat(v) if k not in ("cu_seqlens", "checkpoints") else [int(t) for t in v]
              for k, v in case.inputs.items()}
    seeds = {k: _flat(arrays[k]) for k in ("do", "dht", "dhc") if k in arrays}
    got = ref_autograd.gradients(case.problem, inputs, seeds)
    worst = 0.0
    for name, vals in got.items():
        if name not in arrays:  # a gradient the file omits has no element (T = 0)
            assert not any(vals), name
            continue
        gold = _flat(arrays[name])
        assert len(vals) == len(gold), name
        mag = max([abs(x) for x in gold] + [1e-300])
        worst = max(worst, max(abs(a - b) for a, b in zip(vals, gold)) / mag)
    return worst


def test_cases_cover_every_mode():
    assert len(CASES) >= 44, CASES
    seen = set()
    for case in CASES:
        p = _read_npz(case.values[0])[0]["problem"]
        seen |= {p["family"], p["gate"], p["beta"], "l2=" + p["l2"], p["head_map"],
                 p["state_layout"]}
    for mode in ("kda", "gdn", "deltanet", "linear", "log", "softplus", "lower_bound", "prob",
                 "logit", "logit_neg", "l2=off", "l2=fla", "l2=ggml", "div", "mod", "kv", "vk"):
        assert mode in seen, mode


@pytest.mark.parametrize("path", CASES)
def test_autograd_matches_certified(path):
    err = autograd_vs_gold(path)
    assert err <= 1e-12, f"{path}: autograd differs from the certified gradients by {err:.3g}"

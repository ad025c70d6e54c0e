# test_grad.py: gradients scored from Python (SPEC.md §13.7): kda_conform.torch.autograd_adapter
# on a torch-free autograd stand-in, and on torch when it is installed; check(backward=True).
# SPDX-License-Identifier: MIT
import io
import subprocess
import zipfile

import numpy as np
import pytest

import kda_conform as kc
from autograd_standin import StandInEngine, TorchOps, forward

DESCS = [
    "seed=21 T=7 H=1 HV=2 K=3 V=3 gate=softplus beta=logit l2=fla h0=1 checkpoints=2,5 id=gs-soft",
    "seed=22 seqlens=3,0,4 H=2 HV=4 K=3 V=2 head_map=mod gate=lower_bound beta=logit_neg "
    "l2=ggml h0=1 layout=vk id=gs-lb",
    "seed=23 T=6 H=1 K=3 V=3 family=gdn gate=log beta=prob l2=off id=gs-gdn",
]


def make_grad_case(kda, desc, path, seed=5):
    """`kda gen` plus the seeds do, dht, dhc (float32 values, SPEC.md §13.7)."""
    tmp = str(path.parent.parent / (path.name + ".in.npz"))
    subprocess.run([kda, "gen"] + desc.split() + ["-o", tmp], check=True)
    case = kc.read_case(tmp)
    rng = np.random.default_rng(seed)
    with zipfile.ZipFile(tmp) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
        for name, shape in kc.grad.seed_shapes(case.problem).items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, rng.standard_normal(shape).astype("<f4"))
            dst.writestr(name + ".npy", buf.getvalue())
    path.parent.parent.joinpath(path.name + ".in.npz").unlink()


@pytest.fixture(scope="module")
def grad_set(kda, tmp_path_factory):
    d = tmp_path_factory.mktemp("gradset") / "set"
    d.mkdir()
    for desc in DESCS:
        make_grad_case(kda, desc, d / (desc.split("id=")[1] + ".npz"))
    return str(d)


def by_case(results):
    return {r.case: r for r in results}


def test_standin_gradients_pass(grad_set):
    """A float64 autograd of the recurrence passes every forward and gradient report, and
    every gradient the problem has is scored (none missing)."""
    kernel = kc.torch.autograd_adapter(forward, engine=StandInEngine())
    res = by_case(kc.check(kernel, golden=grad_set, cls="fp64", backward=True,
                           runner_args=["--serving", "off"]))
    for cid in ("gs-soft", "gs-lb", "gs-gdn"):
        assert res[cid].verdict == "Pass", kc.summary(list(res.values()))
        b = res[cid + ".backward"]
        assert b.verdict == "Pass", kc.summary(list(res.values()))
        assert b.record["not_provided"] == []
    assert set(res["gs-soft.backward"].record["gradients"]) == {
        "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"}
    assert set(res["gs-gdn.backward"].record["gradients"]) == {"dq", "dk", "dv", "dg", "dbeta"}


def test_dropped_l2_gradient_fails(grad_set):
    """The same function with the L2 norm's gradient dropped: its outputs still pass, its
    gradients fail on the cases that normalise q and k."""
    kernel = kc.torch.autograd_adapter(lambda p, x: forward(p, x, drop_l2_grad=True),
                                       engine=StandInEngine())
    res = by_case(kc.check(kernel, golden=grad_set, cls="fp64", backward=True,
                           runner_args=["--serving", "off"]))
    assert res["gs-soft"].verdict == "Pass"
    assert res["gs-soft.backward"].verdict == "Fail"
    assert res["gs-soft.backward"].reason.startswith(("dq error", "dk error"))
    assert res["gs-lb.backward"].verdict == "Fail"
    assert res["gs-gdn.backward"].verdict == "Pass"          # l2=off: nothing dropped


def test_missing_gradient_is_named(grad_set):
    """A backward kernel that leaves a gradient out: a QualityWarning naming it."""
    inner = kc.torch.autograd_adapter(forward, engine=StandInEngine())

    def kernel(p, inputs, seeds):
        ret = inner(p, inputs, seeds)
        ret.pop("dh0", None)
        return ret
    res = by_case(kc.check(kernel, golden=grad_set, cls="fp64", backward=True,
                           cases=["gs-soft"], runner_args=["--serving", "off"]))
    assert res["gs-soft.backward"].verdict == "QualityWarning"
    assert "not provided: dh0" in res["gs-soft.backward"].reason


def test_torch_autograd(grad_set):
    """The same forward on torch's autograd (skipped where torch is not installed)."""
    torch = pytest.importorskip("torch")
    kernel = kc.torch.autograd_adapter(lambda p, x: forward(p, x, ops=TorchOps(torch)))
    res = by_case(kc.check(kernel, golden=grad_set, cls="fp64", backward=True,
                           runner_args=["--serving", "off"]))
    assert all(r.verdict == "Pass" for r in res.values()), kc.summary(list(res.values()))
    assert "gs-lb.backward" in res


def test_forward_kernel_on_gradient_cases(grad_set):
    """A forward kernel checked on gradient cases: its outputs are scored, and the cases'
    gradient reports (which it cannot pass) are not its results."""
    res = by_case(kc.check(kc.reference, golden=grad_set, cls="fp64", expect_declines=[],
                           runner_args=["--serving", "off"]))
    assert set(res) == {"gs-soft", "gs-lb", "gs-gdn"}
    assert all(r.verdict == "Pass" for r in res.values()), kc.summary(list(res.values()))

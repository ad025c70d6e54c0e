# test_run.py: kda_conform.run: the kernel interface, declines, errors, stale results, filters.
# SPDX-License-Identifier: MIT

import numpy as np
import pytest

import kda_conform as kc
from kda_conform.run import selected

CASE = "t17-gdn"


def test_return_forms_and_report(prompts, tmp_path):
    seen = {}

    def as_tuple(problem, inputs):
        seen.update(inputs)
        out = kc.reference(problem, inputs)
        return out["o"], out["ht"]
    rep = kc.run(as_tuple, prompts, str(tmp_path), cases=[CASE])
    assert rep.written == [str(tmp_path / (CASE + ".npz"))] and not rep.errors
    assert seen["q"].dtype == np.float32 and "g" in seen       # as stored
    r = kc.read_result(rep.written[0])
    assert r["manifest"]["case_id"] == CASE and r["manifest"]["backend"] == "python"


def test_errors_remove_a_stale_result(prompts, tmp_path):
    stale = tmp_path / (CASE + ".npz")
    stale.write_bytes(b"from an earlier run")

    def wrong_shape(problem, inputs):
        return {"o": np.zeros((1, 1, 1))}
    rep = kc.run(wrong_shape, prompts, str(tmp_path), cases=[CASE])
    assert "CaseError" in rep.errors[CASE] and "'o' has shape" in rep.errors[CASE]
    assert not stale.exists()


@pytest.mark.parametrize("ret,msg", [(None, "must return"), ({"x": 1}, "unknown keys"),
                                     ((1, 2, 3, 4), "must return")])
def test_bad_returns(prompts, tmp_path, ret, msg):
    rep = kc.run(lambda p, a: ret, prompts, str(tmp_path), cases=[CASE])
    assert msg in rep.errors[CASE] and not rep.written


def test_not_supported(prompts, tmp_path):
    def no(problem, inputs):
        raise kc.NotSupported("gdn is not my job")
    rep = kc.run(no, prompts, str(tmp_path), cases=[CASE])
    assert rep.not_supported == {CASE: "gdn is not my job"}
    assert kc.read_result(str(tmp_path / (CASE + ".npz")))["manifest"]["not_supported"] == \
        "gdn is not my job"


class FakeTensor:
    """What write_result sees of a torch tensor: detach, cpu, dtype, float, numpy."""
    def __init__(self, a, dtype="torch.bfloat16"):
        self.a, self.dtype = a, dtype

    def detach(self):
        return self

    def cpu(self):
        return self

    def float(self):
        return FakeTensor(self.a.astype(np.float32), "torch.float32")

    def numpy(self):
        assert self.dtype != "torch.bfloat16", "numpy() of a bfloat16 tensor raises in torch"
        return self.a


def test_tensors_are_converted(prompts, tmp_path):
    def tensors(problem, inputs):
        out = kc.reference(problem, inputs)
        return {m: FakeTensor(x) for m, x in out.items() if m != "hc"}
    rep = kc.run(tensors, prompts, str(tmp_path), cases=[CASE])
    assert not rep.errors and kc.read_result(rep.written[0])["o"].dtype.str == "<f4"


def test_selection_rule():
    assert selected("a", None) and selected("a", [])
    assert selected("t17-gdn", ["t1*"]) and not selected("t17-gdn", ["t2*"])
    assert not selected("t17-gdn", ["t*", "!*gdn"]) and selected("x", ["!y"])
    assert selected("x", ["flag:FAMILY_GDN"])            # flags are the runner's business

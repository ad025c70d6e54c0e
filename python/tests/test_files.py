# test_files.py: prompt reading, atomic result writing, not_supported results, id validation.
# SPDX-License-Identifier: MIT
import json
import os
import zipfile

import numpy as np
import pytest

import kda_conform as kc
from kda_conform.files import _write_npz_atomic


def test_read_prompt(prompts):
    c = kc.read_case(os.path.join(prompts, "t65-lower-bound-vk.npz"))
    assert c.id == "t65-lower-bound-vk" and c.problem.state_layout == "vk"
    assert c.inputs["h0"].shape == (1, 1, 64, 32)            # [N, HV, V, K] for vk
    assert "o" not in c.inputs and c.inputs["cu_seqlens"].dtype == np.int64


def test_result_shapes_follow_layout(prompts):
    p = kc.read_case(os.path.join(prompts, "t65-lower-bound-vk.npz")).problem
    assert kc.files.result_shapes(p) == {"o": (65, 1, 64), "ht": (1, 1, 64, 32)}


def _problem(**kw):
    return kc.Problem(**dict(dict(T=3, H=1, HV=2, K=4, V=5, n_checkpoints=1), **kw))


def test_write_result_roundtrip(tmp_path):
    p = _problem()
    path = str(tmp_path / "x.npz")
    o = np.ones((3, 2, 5), np.float32)
    kc.write_result(path, "x", o=o, ht=np.zeros((1, 2, 4, 5)), hc=np.zeros((1, 2, 4, 5)),
                    problem=p, backend="me")
    r = kc.read_result(path)
    assert r["manifest"] == {"schema": "kda-result/1", "case_id": "x", "backend": "me"}
    assert r["o"].dtype.str == "<f4" and r["ht"].dtype.str == "<f8"
    assert os.listdir(tmp_path) == ["x.npz"]                  # no temporary file left


def test_write_result_checks_shapes_and_keeps_target(tmp_path):
    path = str(tmp_path / "x.npz")
    with open(path, "wb") as f:
        f.write(b"old")
    with pytest.raises(kc.CaseError, match="'ht' has shape"):
        kc.write_result(path, "x", o=np.zeros((3, 2, 5)), ht=np.zeros((1, 2, 5, 4)),
                        hc=np.zeros((1, 2, 4, 5)), problem=_problem())
    with pytest.raises(kc.CaseError, match="needs result member 'hc'"):
        kc.write_result(path, "x", o=np.zeros((3, 2, 5)), ht=np.zeros((1, 2, 4, 5)),
                        problem=_problem())
    with pytest.raises(kc.CaseError, match="not floating point"):
        kc.write_result(path, "x", o=np.zeros((3, 2, 5), np.int32), problem=_problem(
            n_checkpoints=0, want_final_state=False))
    assert open(path, "rb").read() == b"old" and os.listdir(tmp_path) == ["x.npz"]


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(np.lib.format, "write_array", boom)
    with pytest.raises(OSError):
        _write_npz_atomic(str(tmp_path / "y.npz"), {"schema": "kda-result/1"},
                          {"o": np.zeros(1)})
    assert os.listdir(tmp_path) == []


def test_not_supported_result(tmp_path):
    path = str(tmp_path / "c.npz")
    kc.write_result(path, "c", not_supported="K > 256")
    with zipfile.ZipFile(path) as z:
        assert z.namelist() == ["manifest.json"]
        assert json.loads(z.read("manifest.json")) == {
            "schema": "kda-result/1", "case_id": "c", "not_supported": "K > 256"}


@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/b", "a\\b", "x" * 101, "a+b",
                                 "caf\u00e9", "a\x00", 3, None])
def test_ids_that_cannot_name_a_file(bad, tmp_path):
    assert not kc.valid_id(bad)
    with pytest.raises(kc.CaseError):
        kc.write_result(str(tmp_path / "r.npz"), bad, not_supported="x")


def test_ids_of_spec_10_2():
    for good in ("a", ".hidden", "a..b", "t65-lower-bound-vk", "x" * 100, "A_9.z"):
        assert kc.valid_id(good), good


def _npz(path, manifest, **arrays):
    with zipfile.ZipFile(path, "w") as z:
        if manifest is not None:
            z.writestr("manifest.json", manifest if isinstance(manifest, str) else
                       json.dumps(manifest))
        for m, a in arrays.items():
            import io
            b = io.BytesIO()
            np.lib.format.write_array(b, a)
            z.writestr(m + ".npy", b.getvalue())


GOOD = {"schema": "kda-case/1", "id": "c", "problem": {"T": 1, "H": 1, "HV": 1, "K": 2, "V": 2}}
ARR = dict(q=np.zeros((1, 1, 2), "<f4"), k=np.zeros((1, 1, 2), "<f4"),
           v=np.zeros((1, 1, 2), "<f4"), g=np.zeros((1, 1, 2), "<f4"),
           beta=np.zeros((1, 1), "<f4"), cu_seqlens=np.array([0, 1], "<i8"))


@pytest.mark.parametrize("manifest,arrays,msg", [
    (None, ARR, "no manifest.json"),
    ("{not json", ARR, "not JSON"),
    ("[]", ARR, "not an object"),
    (dict(GOOD, schema="kda-result/1"), ARR, "schema"),
    (dict(GOOD, id="../evil"), ARR, "cannot name"),
    (dict(GOOD, id=".."), ARR, "cannot name"),
    (dict(GOOD, problem={"T": 1, "H": 1, "HV": 1, "K": 2, "V": 2, "bogus": 1}), ARR, "unknown key"),
    (dict(GOOD, problem={"T": 1, "H": 2, "HV": 3, "K": 2, "V": 2}), ARR, "multiple"),
    (GOOD, dict(ARR, q=np.zeros((1, 1, 3), "<f4")), "'q' has shape"),
    (GOOD, dict(ARR, q=np.zeros((1, 1, 2), "<i2")), "'q' has dtype"),
    (GOOD, {m: a for m, a in ARR.items() if m != "g"}, "'g' is missing"),
    (GOOD, dict(ARR, h0=np.zeros((1, 1, 2, 2), "<f4")), "'h0' is present but unused"),
    (GOOD, dict(ARR, cu_seqlens=np.array([0, 2], "<i8")), "cu_seqlens"),
])
def test_malformed_cases_name_the_file(tmp_path, manifest, arrays, msg):
    path = str(tmp_path / "bad.npz")
    _npz(path, manifest, **arrays)
    with pytest.raises(kc.CaseError, match=msg) as e:
        kc.read_case(path)
    assert str(e.value).startswith(path)


def test_an_empty_id_takes_the_file_name(tmp_path):
    path = str(tmp_path / "from-name.npz")
    _npz(path, dict(GOOD, id=""), **ARR)
    assert kc.read_case(path).id == "from-name"


def test_not_a_zip(tmp_path):
    path = tmp_path / "junk.npz"
    path.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(kc.CaseError, match="not a readable"):
        kc.read_case(str(path))


def test_the_installed_package_is_tested():
    """make check-python tests what `pip install ./python` installed, not the source tree."""
    site = os.environ.get("KDA_EXPECT_SITE")
    if not site:
        pytest.skip("not run by make check-python")
    assert os.path.realpath(kc.__file__).startswith(os.path.realpath(site) + os.sep)

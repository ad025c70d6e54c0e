# test_hostile.py: read_case and run() against hostile files: every malformed file is a
# CaseError naming it (never RecursionError, RuntimeError or NotImplementedError), a FIFO is
# refused at once, zip bombs are refused before inflating, and a directory where a result
# goes is that case's error, not the end of the run (SPEC.md §10.1).
# SPDX-License-Identifier: MIT
import io
import json
import os
import signal
import zipfile

import numpy as np
import pytest

import kda_conform as kc

GOOD = {"schema": "kda-case/1", "id": "c", "problem": {"T": 1, "H": 1, "HV": 1, "K": 2, "V": 2}}
ARR = dict(q=np.zeros((1, 1, 2), "<f4"), k=np.zeros((1, 1, 2), "<f4"),
           v=np.zeros((1, 1, 2), "<f4"), g=np.zeros((1, 1, 2), "<f4"),
           beta=np.zeros((1, 1), "<f4"), cu_seqlens=np.array([0, 1], "<i8"))


def _npy(a):
    b = io.BytesIO()
    np.lib.format.write_array(b, a)
    return b.getvalue()


def _npz(path, manifest, compress=zipfile.ZIP_STORED, **arrays):
    with zipfile.ZipFile(path, "w", compress) as z:
        z.writestr("manifest.json", manifest if isinstance(manifest, str) else
                   json.dumps(manifest))
        for m, a in arrays.items():
            z.writestr(m + ".npy", _npy(a))


def _patch(path, offset_of, value, width=2):
    """Every local and central header's field at offset_of (from each signature) set."""
    b = bytearray(open(path, "rb").read())
    for sig, off in ((b"PK\x03\x04", offset_of[0]), (b"PK\x01\x02", offset_of[1])):
        i = b.find(sig)
        while i >= 0:
            b[i + off:i + off + width] = value.to_bytes(width, "little")
            i = b.find(sig, i + 4)
    open(path, "wb").write(bytes(b))


@pytest.fixture
def alarm():
    """Fails a test that blocks for more than 10 s instead of hanging the suite."""
    def on_alarm(*_):
        raise TimeoutError("blocked")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_deep_json_is_a_case_error(tmp_path):
    path = str(tmp_path / "deep.npz")
    _npz(path, "[" * 60000 + "]" * 60000, **ARR)  # within the value count, past recursion
    with pytest.raises(kc.CaseError, match="manifest.json is not JSON") as e:
        kc.read_case(path)
    assert str(e.value).startswith(path)


def test_encrypted_member_is_a_case_error(tmp_path):
    path = str(tmp_path / "enc.npz")
    _npz(path, GOOD, **ARR)
    _patch(path, (6, 8), 1)              # general purpose flag bit 0: encrypted
    with pytest.raises(kc.CaseError) as e:
        kc.read_case(path)
    assert str(e.value).startswith(path)


def test_unknown_compression_is_a_case_error(tmp_path):
    path = str(tmp_path / "method.npz")
    _npz(path, GOOD, **ARR)
    _patch(path, (8, 10), 99)            # compression method 99 (AES): NotImplementedError
    with pytest.raises(kc.CaseError, match="compression") as e:
        kc.read_case(path)
    assert str(e.value).startswith(path)


def test_wrong_types_in_problem_are_a_case_error(tmp_path):
    path = str(tmp_path / "types.npz")
    _npz(path, dict(GOOD, problem={"T": [1], "H": {"x": 1}, "HV": 1, "K": 2, "V": 2}), **ARR)
    with pytest.raises(kc.CaseError):
        kc.read_case(path)


def test_fifo_is_refused_at_once(tmp_path, alarm):
    path = str(tmp_path / "fifo.npz")
    os.mkfifo(path)
    with pytest.raises(kc.CaseError, match="not a regular file"):
        kc.read_case(path)


def test_zip_bomb_refused_before_inflating(tmp_path):
    path = str(tmp_path / "bomb.npz")
    zeros = np.zeros(8 << 20, "<f8")     # 64 MiB of zeros deflate to ~64 KB
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(GOOD))
        z.writestr("q.npy", _npy(zeros))
    assert os.path.getsize(path) < 1 << 20
    with pytest.raises(kc.CaseError, match="zip bomb"):
        kc.read_case(path)


def test_large_manifest_refused(tmp_path):
    path = str(tmp_path / "bigman.npz")
    _npz(path, "{" + " " * (17 << 20) + "}", **ARR)
    with pytest.raises(kc.CaseError, match="manifest.json is larger"):
        kc.read_case(path)


def test_manifest_values_refused_before_parsing(tmp_path):
    # 400 KB of text within every cap, 2^17 empty objects: a parse would cost ~100x the text
    path = str(tmp_path / "values.npz")
    _npz(path, dict(GOOD, pad=[{}] * (1 << 17)), **ARR)
    with pytest.raises(kc.CaseError, match="JSON values"):
        kc.read_case(path)
    _npz(path, dict(GOOD, pad="{[,:" * (1 << 17)), **ARR)   # inside a string: no values
    kc.read_case(path)


def test_read_result_bounded_and_case_errors(tmp_path):
    path = str(tmp_path / "r.npz")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:   # 64 MiB of zeros
        z.writestr("manifest.json", json.dumps({"schema": "kda-result/1", "case_id": "c"}))
        z.writestr("o.npy", _npy(np.zeros(8 << 20, "<f8")))
    with pytest.raises(kc.CaseError, match="zip bomb"):
        kc.read_result(path)
    fifo = str(tmp_path / "fifo.npz")
    os.mkfifo(fifo)
    with pytest.raises(kc.CaseError, match="not a regular file"):
        kc.read_result(fifo)
    with open(path, "wb") as f:
        f.write(b"PK\x03\x04 not a zip")
    with pytest.raises(kc.CaseError, match="not a readable .npz"):
        kc.read_result(path)


def test_directory_at_result_path_is_that_cases_error(tmp_path):
    prompts, results = tmp_path / "p", tmp_path / "r"
    prompts.mkdir(), results.mkdir()
    _npz(str(prompts / "c.npz"), GOOD, **ARR)
    _npz(str(prompts / "d.npz"), dict(GOOD, id="d"), **ARR)
    (results / "c.npz").mkdir()
    (results / "c.npz" / "keep").write_text("x")

    def kernel(p, x):
        return {"o": np.zeros((p.T, p.HV, p.V)), "ht": np.zeros(p.state_shape(p.N))}

    rep = kc.run(kernel, str(prompts), str(results))
    assert "c" in rep.errors and "not a regular file" in rep.errors["c"]
    assert (results / "c.npz" / "keep").exists()
    assert str(results / "d.npz") in rep.written

# kda_conform.files: read case / prompt files and write result files atomically (SPEC.md §10).
# SPDX-License-Identifier: MIT
"""Case and prompt files in, result files out, with numpy only.

A case or prompt file is an `.npz` whose `manifest.json` member is raw JSON (numpy gives it
as bytes) and whose other members are `.npy` arrays (SPEC.md §10.1-§10.2).  A result file
holds `o`, `ht`, `hc` as `<f4` or `<f8` and a manifest `{"schema": "kda-result/1",
"case_id": ...}`, or no arrays and `"not_supported": "reason"` when the candidate declines
the case.  Results are written to a temporary file in the target directory and renamed over
the target only when complete (SPEC.md §10.1, atomicity).
"""
from __future__ import annotations

import dataclasses
import io as _io
import json
import os
import re
import stat
import tempfile
import zipfile
from typing import Any, Dict, Mapping, Optional

import numpy as np

from .problem import Problem, ProblemError

RESULT_SCHEMA = "kda-result/1"
# An id names a file DIR/<id>.npz (SPEC.md §10.2, Ids): 1 to 100 bytes of [A-Za-z0-9._-],
# not "." or "..".
_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_FLOAT_DTYPES = ("<f8", "<f4", "<f2")
_INDEX_DTYPES = ("<i8", "<i4")
_INDEX_MEMBERS = ("cu_seqlens", "checkpoints")
_MEMBERS = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "cu_seqlens", "h0", "checkpoints")


class CaseError(ValueError):
    """A case, prompt or result file that cannot be used; the message names the file."""


@dataclasses.dataclass
class Case:
    """One case (or prompt) file: its id, problem, input arrays and raw manifest."""
    id: str
    problem: Problem
    inputs: Dict[str, np.ndarray]
    manifest: Dict[str, Any]
    path: str


def valid_id(case_id: Any) -> bool:
    """True when `case_id` can name a file `DIR/<id>.npz` (no separator, no '..')."""
    return (isinstance(case_id, str) and bool(_ID_RE.fullmatch(case_id))
            and case_id not in (".", ".."))


def _expected_shapes(p: Problem) -> Dict[str, tuple]:
    gw = p.gate_width
    return {"q": (p.T, p.H, p.K), "k": (p.T, p.H, p.K), "v": (p.T, p.HV, p.V),
            "g": (p.T, p.HV, gw), "beta": (p.T, p.HV), "A_log": (p.HV,),
            "dt_bias": (p.HV, gw), "cu_seqlens": (p.N + 1,), "h0": p.state_shape(p.N),
            "checkpoints": (p.n_checkpoints,)}


def _used(p: Problem) -> Dict[str, bool]:
    """Which members the options use (SPEC.md §10.2)."""
    return {"q": True, "k": True, "v": True, "beta": True, "g": p.gate_width > 0,
            "dt_bias": p.uses_dt_bias, "A_log": p.uses_dt_bias and p.has_A_log,
            "h0": p.has_initial_state, "checkpoints": p.n_checkpoints > 0,
            "cu_seqlens": False}


def _check_indices(path: str, p: Problem, a: Mapping[str, np.ndarray]) -> None:
    if "cu_seqlens" in a:
        cu = a["cu_seqlens"]
        if cu[0] != 0 or cu[-1] != p.T or np.any(np.diff(cu) < 0):
            raise CaseError(f"{path}: cu_seqlens is not 0 <= ... nondecreasing ... = T")
    elif p.N != 1:
        raise CaseError(f"{path}: N = {p.N} but no cu_seqlens")
    if "checkpoints" in a:
        c = a["checkpoints"]
        if len(c) and (c[0] < 0 or c[-1] >= p.T or np.any(np.diff(c) <= 0)):
            raise CaseError(f"{path}: checkpoints are not strictly increasing in [0, T)")


# What a reader allocates is bounded by the bytes present (SPEC.md §10.1, bounded allocation):
# a deflated member may inflate at most 1032:1 (deflate's limit), the deflated members together
# at most 64:1 plus 1 MiB, and manifest.json is text of at most 16 MiB holding at most 65536
# JSON values (what parsing it allocates is bounded too: an empty object is 3 bytes of text).
_DEFLATE_RATIO, _DEFLATE_SLACK = 1032, 1024
_ARCHIVE_RATIO, _ARCHIVE_SLACK = 64, 1 << 20
_MAX_MANIFEST = 16 << 20
_MAX_MANIFEST_VALUES = 1 << 16
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


def _json_values(text: bytes) -> int:
    """An upper bound of the values parsing text makes: '{', '[', ',' and ':' outside strings,
    plus one (SPEC.md §10.1, as the C readers count)."""
    bare = _JSON_STRING.sub(b'""', text)
    return 1 + sum(bare.count(c) for c in (b"{", b"[", b",", b":"))


def _open_regular(path: str):
    """The file at path, opened for reading only when it is a regular file (a FIFO or a device
    is refused at once, never waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise CaseError(f"{path}: cannot open ({e.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CaseError(f"{path}: not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _check_sizes(path: str, zf: zipfile.ZipFile) -> None:
    comp = size = 0
    for i in zf.infolist():
        if i.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise CaseError(f"{path}: member {i.filename!r}: unsupported compression")
        if i.compress_type == zipfile.ZIP_STORED and i.file_size != i.compress_size:
            raise CaseError(f"{path}: member {i.filename!r}: stored size differs")
        if i.compress_type == zipfile.ZIP_DEFLATED:
            if i.file_size > i.compress_size * _DEFLATE_RATIO + _DEFLATE_SLACK:
                raise CaseError(f"{path}: member {i.filename!r}: more than deflate can "
                                "produce (zip bomb)")
            comp, size = comp + i.compress_size, size + i.file_size
        if i.filename == "manifest.json" and i.file_size > _MAX_MANIFEST:
            raise CaseError(f"{path}: manifest.json is larger than {_MAX_MANIFEST} bytes")
    if size > comp * _ARCHIVE_RATIO + _ARCHIVE_SLACK:
        raise CaseError(f"{path}: its compressed members declare {size} bytes from {comp}, "
                        f"more than {_ARCHIVE_RATIO}:1 (zip bomb)")


def _read_npz(path: str):
    """The manifest (a dict) and the arrays of an .npz file, read within the bounds of
    SPEC.md §10.1 (a regular file, the zip-bomb caps, the manifest's JSON value count); every
    failure a CaseError naming the file."""
    try:
        with _open_regular(path) as f:
            with zipfile.ZipFile(f) as zf:
                _check_sizes(path, zf)
            f.seek(0)
            with np.load(f, allow_pickle=False) as z:
                names = list(z.files)
                if "manifest.json" not in names:
                    raise CaseError(f"{path}: no manifest.json member")
                raw = bytes(z["manifest.json"])
                arrays = {m: z[m] for m in names if m != "manifest.json"}
    except CaseError:
        raise
    except Exception as e:  # whatever numpy or zipfile raise: the file is unusable
        raise CaseError(f"{path}: not a readable .npz ({type(e).__name__}: {e})") from None
    if _json_values(raw) > _MAX_MANIFEST_VALUES:
        raise CaseError(f"{path}: manifest.json holds more than {_MAX_MANIFEST_VALUES} JSON "
                        "values, more than such a file holds")
    try:
        man = json.loads(raw.decode("utf-8"))
    except Exception as e:  # ValueError, TypeError, RecursionError (nesting) ...
        raise CaseError(f"{path}: manifest.json is not JSON ({type(e).__name__})") from None
    if not isinstance(man, dict):
        raise CaseError(f"{path}: manifest.json is not an object")
    return man, arrays


def read_case(path: str) -> Case:
    """Read a case or prompt file; CaseError (naming the file) when it is malformed."""
    man, arrays = _read_npz(path)
    if not str(man.get("schema", "")).startswith("kda-case/"):
        raise CaseError(f"{path}: manifest schema {man.get('schema')!r} is not kda-case/1")
    case_id = man.get("id")
    if case_id == "":                  # an empty id: the file name stands in (SPEC.md §10.2)
        case_id = os.path.basename(path)[:-4] if path.endswith(".npz") else ""
    if not valid_id(case_id):
        raise CaseError(f"{path}: case id {case_id!r} cannot name a result file")
    try:
        p = Problem.from_dict(man.get("problem"))
    except ProblemError as e:
        raise CaseError(f"{path}: {e}") from None
    except Exception as e:  # a value of the wrong type deep in the problem
        raise CaseError(f"{path}: malformed problem ({type(e).__name__}: {e})") from None
    shapes, used = _expected_shapes(p), _used(p)
    inputs: Dict[str, np.ndarray] = {}
    for m in _MEMBERS:
        if m not in arrays:
            if used[m]:
                raise CaseError(f"{path}: member {m!r} is missing")
            continue
        if not used[m] and m != "cu_seqlens":
            raise CaseError(f"{path}: member {m!r} is present but unused by the problem")
        x = arrays[m]
        ok = _INDEX_DTYPES if m in _INDEX_MEMBERS else _FLOAT_DTYPES
        if x.dtype.str not in ok:
            raise CaseError(f"{path}: member {m!r} has dtype {x.dtype.str}, not one of {ok}")
        if tuple(x.shape) != shapes[m]:
            raise CaseError(f"{path}: member {m!r} has shape {tuple(x.shape)}, "
                            f"expected {shapes[m]}")
        inputs[m] = x.astype(np.int64) if m in _INDEX_MEMBERS else x
    _check_indices(path, p, inputs)
    return Case(case_id, p, inputs, man, path)


def to_numpy(x: Any) -> np.ndarray:
    """A numpy array from a numpy array or a torch tensor (any device; bf16/fp16 widened)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):         # torch, without importing it
        x = x.detach().cpu()
        if str(x.dtype) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        x = x.numpy()
    return np.asarray(x)


def _as_member(name: str, x: Any, shape: Optional[tuple]) -> np.ndarray:
    a = to_numpy(x)
    if a.dtype.kind != "f":
        raise CaseError(f"result member {name!r} has dtype {a.dtype}, not floating point")
    a = a.astype("<f8" if a.dtype.itemsize >= 8 else "<f4", copy=False)
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise CaseError(f"result member {name!r} has shape {tuple(a.shape)}, expected {shape}")
    return np.ascontiguousarray(a)


def result_shapes(p: Problem) -> Dict[str, tuple]:
    """Shapes of the result members the runner expects (SPEC.md §10.2)."""
    out = {"o": (p.T, p.HV, p.V)}
    if p.want_final_state:
        out["ht"] = p.state_shape(p.N)
    if p.n_checkpoints:
        out["hc"] = p.state_shape(p.n_checkpoints)
    return out


def write_result(path: str, case_id: str, *, o: Any = None, ht: Any = None, hc: Any = None,
                 problem: Optional[Problem] = None, not_supported: Optional[str] = None,
                 backend: Optional[str] = None) -> None:
    """Write one result file atomically.  With `problem`, shapes are checked and exactly the
    members the problem needs are written; `not_supported` writes a declining result."""
    if not valid_id(case_id):
        raise CaseError(f"{path}: case id {case_id!r} cannot name a result file")
    man: Dict[str, Any] = {"schema": RESULT_SCHEMA, "case_id": case_id}
    if backend:
        man["backend"] = str(backend)
    members: Dict[str, np.ndarray] = {}
    if not_supported is not None:
        man["not_supported"] = str(not_supported) or "not supported"
    else:
        given = {"o": o, "ht": ht, "hc": hc}
        want = result_shapes(problem) if problem is not None else \
            {m: None for m, x in given.items() if x is not None}
        for m, shape in want.items():
            if given[m] is None:
                raise CaseError(f"{path}: the problem needs result member {m!r}")
            members[m] = _as_member(m, given[m], shape)
    _write_npz_atomic(path, man, members)


def _file_mode() -> int:
    """The mode open() would give a new file: 0666 less the umask (mkstemp gives 0600)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _write_npz_atomic(path: str, manifest: Mapping[str, Any],
                      members: Mapping[str, np.ndarray]) -> None:
    try:  # a target that exists is replaced only when it is a regular file (SPEC.md §10.1)
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise CaseError(f"{path}: exists and is not a regular file; refusing to replace it")
    except FileNotFoundError:
        pass
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
                zf.writestr("manifest.json", json.dumps(manifest))
                for m, a in members.items():
                    buf = _io.BytesIO()
                    np.lib.format.write_array(buf, a, allow_pickle=False)
                    zf.writestr(m + ".npy", buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_result(path: str) -> Dict[str, Any]:
    """A result file as {"manifest": dict, "o": ..., "ht": ..., "hc": ...}; CaseError (naming
    the file) when it is not one, read within the bounds read_case keeps (SPEC.md §10.1)."""
    man, arrays = _read_npz(path)
    return dict(arrays, manifest=man)

# kda_conform.native: libkda in-process (ctypes): gen() and assert_kda(), no files, the runner's scorer.
# SPDX-License-Identifier: MIT
"""One case built in memory, scored by the C code of the runner (kda_conform_outputs of
libkda.so, SPEC.md §7.3-§7.6): the same truth, units, caps, allowance and verdict as
`kda conform --candidate`, and the same failure text (kda_report_human).  No Python copy of
the scorer exists.

    problem, inputs = kda_conform.gen("seed=7 T=64 H=2 HV=4 K=32 V=16 gate=softplus beta=logit")
    kda_conform.assert_kda(problem, inputs, my_kernel(problem, inputs), cls="bf16")

The truth of an in-memory case is the float64 reference of SPEC.md §3 (a golden case's
certified outputs are used only on the file path).  libkda.so is the one the wheel carries,
else the one beside the kda found (a source tree's build/), else the system's.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from .files import result_shapes
from .problem import Problem
from .run import _outputs
from .score import ScoreError, find_kda

_d = ctypes.c_double
_pd = ctypes.POINTER(ctypes.c_double)
_pi = ctypes.POINTER(ctypes.c_int64)
_MODES = (("family", "family"), ("gate", "gate_mode"), ("beta", "beta_mode"), ("l2", "l2_mode"),
          ("head_map", "head_map"), ("state_layout", "state_layout"))
_NAMES = {"family": "kda_family_name", "gate": "kda_gate_name", "beta": "kda_beta_name",
          "l2": "kda_l2_name", "head_map": "kda_head_map_name",
          "state_layout": "kda_state_layout_name"}
_FLOATS = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "h0")
_VERDICTS = ("Pass", "Fail", "QualityWarning", "NotSupported", "Waived", "Crash", "Timeout")


class _Problem(ctypes.Structure):       # kda_problem of ref/kda_problem.h (backend ABI 2)
    _fields_ = [(n, ctypes.c_int64) for n in ("N", "T", "H", "HV", "K", "V", "n_checkpoints")] + \
        [(n, ctypes.c_int32) for n in ("family", "gate_mode", "beta_mode", "l2_mode", "head_map",
                                       "state_layout", "has_A_log", "has_initial_state",
                                       "want_final_state", "reserved0")] + \
        [("scale", _d), ("lower_bound", _d), ("l2_eps", _d), ("struct_size", ctypes.c_uint32),
         ("reserved1", ctypes.c_int32)]


class _Tensors(ctypes.Structure):       # kda_tensors_f64
    _fields_ = [(n, _pd) for n in _FLOATS] + [("cu_seqlens", _pi), ("checkpoints", _pi)] + \
        [(n, _pd) for n in ("o", "ht", "hc")]


class _Case(ctypes.Structure):          # kda_case of vectors/kda_case.h
    _fields_ = [("p", _Problem), ("input_precision", ctypes.c_int32),
                ("reserved0", ctypes.c_int32)] + [(n, _pd) for n in _FLOATS] + \
        [("cu_seqlens", _pi), ("checkpoints", _pi), ("id", ctypes.c_void_p),
         ("manifest_json", ctypes.c_void_p)]


_lib: Optional[ctypes.CDLL] = None


def _find_lib() -> str:
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_judge", "lib", "libkda.so")
    if os.path.isfile(here):
        return here
    try:
        beside = os.path.join(os.path.dirname(find_kda()), "libkda.so")
        if os.path.isfile(beside):
            return beside
    except ScoreError:
        pass
    found = ctypes.util.find_library("kda")
    if found:
        return found
    raise ScoreError("libkda.so not found: this kda-conform install carries none, none is "
                     "beside the kda found and none is installed; install the wheel "
                     "(pip install ./python) or run `make`")


def lib() -> ctypes.CDLL:
    """libkda.so, loaded once, its functions typed and its kda_problem checked against this
    binding's."""
    global _lib
    if _lib is not None:
        return _lib
    path = _find_lib()
    try:
        L = ctypes.CDLL(path)
    except OSError as e:
        raise ScoreError(f"{path}: cannot load ({e})") from None
    L.kda_problem_init.argtypes = [ctypes.POINTER(_Problem)] + [ctypes.c_int64] * 5
    L.kda_problem_init.restype = None
    L.kda_mode_parse.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32)]
    L.kda_precision_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32)]
    for fn in _NAMES.values():
        getattr(L, fn).argtypes = [ctypes.c_int32]
        getattr(L, fn).restype = ctypes.c_char_p
    L.kda_conform_outputs.argtypes = [
        ctypes.POINTER(_Problem), ctypes.POINTER(_Tensors), ctypes.c_int32, ctypes.c_char_p,
        ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_char_p, ctypes.c_size_t]
    L.kda_conform_text_free.argtypes = [ctypes.c_void_p]
    L.kda_conform_gen.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Case), ctypes.c_char_p,
                                  ctypes.c_size_t]
    L.kda_case_free.argtypes = [ctypes.POINTER(_Case)]
    probe = _Problem()
    L.kda_problem_init(ctypes.byref(probe), 1, 1, 1, 1, 1)
    if probe.struct_size != ctypes.sizeof(_Problem):
        raise ScoreError(f"{path}: its kda_problem is {probe.struct_size} bytes, this binding's "
                         f"{ctypes.sizeof(_Problem)}: a libkda of another version")
    _lib = L
    return L


def _c_problem(p: Problem) -> _Problem:
    L, cp = lib(), _Problem()
    L.kda_problem_init(ctypes.byref(cp), p.T, p.H, p.HV, p.K, p.V)
    cp.N, cp.n_checkpoints = p.N, p.n_checkpoints
    for kind, field in _MODES:
        v = ctypes.c_int32()
        if L.kda_mode_parse(kind.encode(), str(getattr(p, kind)).encode(), ctypes.byref(v)):
            raise ValueError(f"problem.{kind} = {getattr(p, kind)!r} is not a mode of libkda")
        setattr(cp, field, v.value)
    cp.has_A_log, cp.has_initial_state = int(p.has_A_log), int(p.has_initial_state)
    cp.want_final_state = int(p.want_final_state)
    cp.scale, cp.lower_bound, cp.l2_eps = p.scale, p.lower_bound, p.l2_eps
    return cp


def _py_problem(cp: _Problem) -> Problem:
    L = lib()
    modes = {kind: getattr(L, _NAMES[kind])(getattr(cp, field)).decode()
             for kind, field in _MODES}
    return Problem(T=cp.T, H=cp.H, HV=cp.HV, K=cp.K, V=cp.V, N=cp.N,
                   n_checkpoints=cp.n_checkpoints, has_A_log=bool(cp.has_A_log),
                   has_initial_state=bool(cp.has_initial_state),
                   want_final_state=bool(cp.want_final_state), scale=cp.scale,
                   lower_bound=cp.lower_bound, l2_eps=cp.l2_eps, **modes)


def _sizes(p: Problem) -> Dict[str, int]:
    gw = p.gate_width
    n = {"q": p.T * p.H * p.K, "k": p.T * p.H * p.K, "v": p.T * p.HV * p.V,
         "g": p.T * p.HV * gw if gw else 0, "beta": p.T * p.HV,
         "A_log": p.HV if p.uses_dt_bias and p.has_A_log else 0,
         "dt_bias": p.HV * gw if p.uses_dt_bias else 0,
         "h0": p.N * p.HV * p.K * p.V if p.has_initial_state else 0}
    return n


def gen(desc: str) -> Tuple[Problem, Dict[str, np.ndarray]]:
    """The case `kda gen DESC` makes (docs/generator.md: "seed=7 T=64 H=2 HV=4 K=32 V=16
    gate=softplus beta=logit l2=fla ..."), in memory: (problem, inputs) with float64 inputs
    of the shapes of SPEC.md §2.3 and int64 cu_seqlens / checkpoints."""
    L, c = lib(), _Case()
    err = ctypes.create_string_buffer(512)
    if L.kda_conform_gen(str(desc).encode(), ctypes.byref(c), err, len(err)):
        raise ValueError(f"kda gen {desc!r}: {err.value.decode(errors='replace')}")
    try:
        p = _py_problem(c.p)
        shapes = {"q": (p.T, p.H, p.K), "k": (p.T, p.H, p.K), "v": (p.T, p.HV, p.V),
                  "g": (p.T, p.HV, p.gate_width), "beta": (p.T, p.HV), "A_log": (p.HV,),
                  "dt_bias": (p.HV, p.gate_width), "h0": p.state_shape(p.N)}
        inputs: Dict[str, np.ndarray] = {}
        for m, n in _sizes(p).items():
            ptr = getattr(c, m)
            if n and ptr:
                inputs[m] = np.ctypeslib.as_array(ptr, (n,)).copy().reshape(shapes[m])
        inputs["cu_seqlens"] = np.ctypeslib.as_array(c.cu_seqlens, (p.N + 1,)).copy()
        if p.n_checkpoints:
            inputs["checkpoints"] = np.ctypeslib.as_array(c.checkpoints,
                                                          (p.n_checkpoints,)).copy()
        return p, inputs
    finally:
        L.kda_case_free(ctypes.byref(c))


class KdaAssertionError(AssertionError):
    """assert_kda's failure: the runner's report of the case (str) and its verdict."""

    def __init__(self, text: str, verdict: str) -> None:
        super().__init__(text)
        self.verdict = verdict


def score_outputs(problem: Problem, inputs: Mapping[str, Any], outputs: Any, *,
                  cls: str = "fp32", case_id: str = "in-memory",
                  max_lines: int = 5) -> Tuple[str, str]:
    """(verdict, the runner's report text) of `outputs` (a dict {"o","ht","hc"} or a tuple,
    numpy arrays or torch tensors) on problem and inputs, scored by libkda in class cls."""
    from .files import _as_member
    L = lib()
    cp = _c_problem(problem)
    keep = []

    def ptr(a: Any, dtype: Any, pt: Any) -> Any:
        x = np.ascontiguousarray(np.asarray(a, dtype=dtype))
        keep.append(x)
        return x.ctypes.data_as(pt)
    t = _Tensors()
    sizes = _sizes(problem)
    for m in _FLOATS:
        if sizes[m]:
            if m not in inputs:
                raise ValueError(f"inputs lack {m!r}, which the problem uses")
            if np.asarray(inputs[m]).size != sizes[m]:
                raise ValueError(f"inputs[{m!r}] has {np.asarray(inputs[m]).size} elements, "
                                 f"the problem needs {sizes[m]}")
            setattr(t, m, ptr(inputs[m], np.float64, _pd))
    if "cu_seqlens" in inputs:
        t.cu_seqlens = ptr(inputs["cu_seqlens"], np.int64, _pi)
    if problem.n_checkpoints:
        t.checkpoints = ptr(inputs["checkpoints"], np.int64, _pi)
    got = _outputs(outputs)
    for m, shape in result_shapes(problem).items():
        if got.get(m) is None:
            raise ValueError(f"outputs lack {m!r}, which the problem needs")
        setattr(t, m, ptr(_as_member(m, got[m], shape), np.float64, _pd))
    c_cls = ctypes.c_int32()
    if L.kda_precision_parse(cls.encode(), ctypes.byref(c_cls)):
        raise ValueError(f"cls {cls!r} is not a precision class of libkda")
    verdict, text = ctypes.c_int32(), ctypes.c_void_p()
    err = ctypes.create_string_buffer(512)
    st = L.kda_conform_outputs(ctypes.byref(cp), ctypes.byref(t), c_cls, case_id.encode(),
                               max_lines, ctypes.byref(verdict), ctypes.byref(text), err,
                               len(err))
    if st:
        raise ValueError(f"libkda refused the case: {err.value.decode(errors='replace')}")
    try:
        report = ctypes.string_at(text.value).decode(errors="replace") if text.value else ""
    finally:
        L.kda_conform_text_free(text)
    return _VERDICTS[verdict.value], report.rstrip("\n")


def assert_kda(problem: Problem, inputs: Mapping[str, Any], outputs: Any, *,
               cls: str = "fp32", case_id: str = "in-memory") -> None:
    """torch.testing.assert_close for KDA: raise KdaAssertionError with the runner's report
    (worst element, both values, the allowance there, what a unit is) unless the outputs pass
    in class cls (Pass or QualityWarning) against the float64 reference of this problem."""
    verdict, text = score_outputs(problem, inputs, outputs, cls=cls, case_id=case_id)
    if verdict not in ("Pass", "QualityWarning"):
        raise KdaAssertionError(text, verdict)

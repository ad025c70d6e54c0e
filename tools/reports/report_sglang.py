#!/usr/bin/env python3
# report_sglang.py: score SGLang's KDA decode kernel through kda_conform (docs/reports/sglang.md).
# SPDX-License-Identifier: MIT
"""Usage (on a machine with a GPU, torch and triton; SGLang fetched separately, never
committed):

    python3 tools/reports/report_sglang.py --checkout SGLANG_SRC [--sets ...] [--jobs 8]

The kernel is `fused_sigmoid_gating_delta_rule_update(..., is_kda=True)` of
SGLANG_SRC/python/sglang/srt/layers/attention/fla/fused_sigmoid_gating_recurrent.py (the
KDA decode step: gate -exp(A_log)*softplus(a + dt_bias) per key channel and sigmoid(b) in
the kernel, float32 state pool [slots, HV, V, K]).  That file is loaded alone: the one
name it imports from SGLang, `utils.is_intel`, is given as False (an NVIDIA card), so the
rest of SGLang need not be importable.  Run: decode-fp32 (float32 inputs and states,
class fp32).  `--stand-in`: the numpy stand-in of python/tests/fakes.py on the CPU.
"""
import importlib.util
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reportlib as R  # noqa: E402

KERNEL_FILE = os.path.join("python", "sglang", "srt", "layers", "attention", "fla",
                           "fused_sigmoid_gating_recurrent.py")


def load_kernel(checkout):
    """The kernel module from its file, with a stand-in for sglang's utils module."""
    path = os.path.join(checkout, KERNEL_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: not found (SGLang checkout expected)")
    parts = "sglang.srt.layers.attention.fla".split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            m = types.ModuleType(name)
            m.__path__ = []
            sys.modules[name] = m
    utils = types.ModuleType("sglang.srt.layers.attention.fla.utils")
    utils.is_intel = False
    sys.modules[utils.__name__] = utils
    spec = importlib.util.spec_from_file_location(
        "sglang.srt.layers.attention.fla.fused_sigmoid_gating_recurrent", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def make(checkout, stand_in):
    from kda_conform import vllm  # noqa: PLC0415
    kw = dict(is_kda=True, layout="vk", l2_in_kernel=True)
    if stand_in:
        sys.path.insert(0, os.path.join(R.REPO, "python", "tests"))
        import fakes  # noqa: PLC0415
        return vllm.sigmoid_gating_adapter(fakes.fused_sigmoid_gating_delta_rule_update_kda,
                                           dtype="float32", array="numpy", **kw)
    fn = load_kernel(checkout).fused_sigmoid_gating_delta_rule_update
    return vllm.sigmoid_gating_adapter(fn, dtype="float32", **kw)


RUNS = (R.Run("decode-fp32", "float32", ("fp32",), make,
              "float32 state pool [slots, HV, V, K]; q/k L2 in the kernel"),)

if __name__ == "__main__":
    sys.exit(R.main("sglang", __file__, RUNS, skip=("p32-lb-64k",)))

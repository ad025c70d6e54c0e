#!/usr/bin/env python3
# report_fla.py: score fla's chunk_kda and fused_recurrent_kda through kda_conform (docs/reports/fla.md).
# SPDX-License-Identifier: MIT
"""Usage (on a machine with a GPU, torch and triton; fla fetched separately, never committed):

    python3 tools/reports/report_fla.py --checkout FLA_SRC [--runs chunk-bf16,...] \\
        [--sets L1,prod,prod64k] [--jobs 8] [--history docs/reports/history.md]

FLA_SRC is the folder holding the `fla` package of github.com/fla-org/flash-linear-attention.
Runs: chunk-bf16 (bf16 inputs, class bf16), chunk-fp32 (float32 inputs, classes fp32, tf32
and bf16), chunk-fp32-ieee (the same with TRITON_F32_DEFAULT=ieee, so that Triton's float32
dots are IEEE float32 rather than TF32; classes fp32 and tf32), recurrent-fp32
(fused_recurrent_kda, float32 inputs, class fp32).  `--stand-in`
runs the numpy stand-ins of python/tests/fakes.py on the CPU instead (the script's test).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reportlib as R  # noqa: E402


def _kernel(name, dtype):
    def make(checkout, stand_in):
        from kda_conform import fla as kfla  # noqa: PLC0415
        if stand_in:
            sys.path.insert(0, os.path.join(R.REPO, "python", "tests"))
            import fakes  # noqa: PLC0415
            fn = fakes.chunk_kda if name == "chunk" else fakes.fused_recurrent_kda
            return kfla.adapter(fn, kernel=name, dtype="float32", array="numpy")
        sys.path.insert(0, checkout)
        from fla.ops import kda as ops  # noqa: PLC0415 (the checkout's fla)
        fn = ops.chunk_kda if name == "chunk" else ops.fused_recurrent_kda
        return kfla.adapter(fn, kernel=name, dtype=dtype)
    return make


RUNS = (
    R.Run("chunk-bf16", "bfloat16", ("bf16",), _kernel("chunk", "bfloat16")),
    R.Run("chunk-fp32", "float32", ("fp32", "tf32", "bf16"), _kernel("chunk", "float32")),
    R.Run("chunk-fp32-ieee", "float32", ("fp32", "tf32"), _kernel("chunk", "float32"),
          "TRITON_F32_DEFAULT=ieee: Triton's float32 dots in IEEE float32, not TF32",
          (("TRITON_F32_DEFAULT", "ieee"),)),
    R.Run("recurrent-fp32", "float32", ("fp32",), _kernel("recurrent", "float32")),
)

if __name__ == "__main__":
    sys.exit(R.main("fla", __file__, RUNS, skip=("p32-lb-64k",)))

#!/usr/bin/env python3
# fla_kda_bench.py: times fla's KDA kernels on bench_cuda's shapes (docs/cuda.md), for a
# same-run comparison with `kda bench -b libkda_cuda.so`.
# SPDX-License-Identifier: MIT
#
# fla is not part of this project: fetch fla-org/flash-linear-attention and put its checkout
# on PYTHONPATH (docs/cuda.md gives the commit and the commands).  H = HV = 32, K = V = 128,
# float32 inputs, the production options fused in the kernel (softplus gate with A_log and
# dt_bias, sigmoid beta, L2 of q and k); median of triton.testing.do_bench.
# Usage: fla_kda_bench.py [SHAPE ...], SHAPE = prefill-B<b>-T<t> | decode-B<n>
#   (default: prefill-B1-T8192 prefill-B1-T32768 prefill-B4-T8192 decode-B1024 decode-B64).
import sys

import torch
import triton
from fla.ops.kda import chunk_kda, fused_recurrent_kda

H, K, V = 32, 128, 128
DEFAULT = ["prefill-B1-T8192", "prefill-B1-T32768", "prefill-B4-T8192", "decode-B1024", "decode-B64"]


def inputs(B, T, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s: torch.rand(*s, generator=g, device="cuda", dtype=torch.float32)
    return dict(q=r(B, T, H, K) - 0.5, k=r(B, T, H, K) - 0.5, v=r(B, T, H, V) - 0.5,
                g=r(B, T, H, K) * 4 - 2, beta=r(B, T, H) * 4 - 2,
                A_log=torch.log(r(H) * 15 + 1), dt_bias=r(H * K) - 0.5)


def run(shape):
    kind, *dims = shape.split("-")
    d = {x[0]: int(x[1:]) for x in dims}
    B, T = d["B"], d.get("T", 1)
    x = inputs(B, T, 1)
    opts = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], use_qk_l2norm_in_kernel=True,
                use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)
    if kind == "prefill":
        f = lambda: chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], output_final_state=True, **opts)
        name = "chunk_kda"
    else:  # T = 1 a sequence, float32 state in and out, in place
        h0 = torch.rand(B, H, K, V, device="cuda", dtype=torch.float32) - 0.5
        f = lambda: fused_recurrent_kda(x["q"].view(1, B, H, K), x["k"].view(1, B, H, K),
                                        x["v"].view(1, B, H, V), x["g"].view(1, B, H, K),
                                        x["beta"].view(1, B, H), initial_state=h0,
                                        output_final_state=True,
                                        cu_seqlens=torch.arange(B + 1, device="cuda"), **opts)
        name = "fused_recurrent_kda"
    f()
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(f, warmup=25, rep=200, quantiles=[0.5, 0.0, 1.0])
    toks = B * T
    extra = (f"{toks / ms[0] / 1e3:.3f} M tok/s" if kind == "prefill"
             else f"{2 * B * H * K * V * 4 / ms[0] / 1e6:.0f} GB/s state")
    print(f"fla {name} {shape}: median {ms[0]:.4f} ms (min {ms[1]:.4f}, max {ms[2]:.4f}), {extra}",
          flush=True)


if __name__ == "__main__":
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    for s in sys.argv[1:] or DEFAULT:
        run(s)

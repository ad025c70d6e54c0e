#!/usr/bin/env python3
# report_flashkda.py: score FlashKDA's flash_kda.fwd through kda_conform (docs/reports/flashkda.md).
# SPDX-License-Identifier: MIT
"""Usage (on a Hopper or newer GPU with torch; FlashKDA fetched and built separately, never
committed):

    python3 tools/reports/report_flashkda.py --checkout FLASHKDA_SRC [--sets ...] [--jobs 8]

FLASHKDA_SRC holds the `flash_kda` package and its built extension `flash_kda_C*.so`
(FlashKDA's own build; docs/reports/flashkda.md names the commits and the command).  Run:
fwd-bf16 (bf16 inputs, float32 states, class bf16).  `--stand-in`: the numpy stand-in of
python/tests/fakes.py on the CPU.
"""
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reportlib as R  # noqa: E402


def built(checkout):
    return sorted(glob.glob(os.path.join(checkout, "flash_kda_C*.so")))


def check_built(a, log):
    """The checkout must hold FlashKDA's built extension: this script never builds it."""
    if not built(a.checkout):
        raise R.ReportError(f"{a.checkout}: no flash_kda_C*.so (build FlashKDA first, with "
                            "its own setup.py)")


def make(checkout, stand_in):
    from kda_conform import flashkda  # noqa: PLC0415
    if stand_in:
        sys.path.insert(0, os.path.join(R.REPO, "python", "tests"))
        import fakes  # noqa: PLC0415
        return flashkda.adapter(fakes.flash_kda_fwd, dtype="float32", array="numpy")
    sys.path.insert(0, checkout)
    import flash_kda  # noqa: PLC0415 (the checkout's package and its built extension)
    return flashkda.adapter(flash_kda.fwd, dtype="bfloat16")


RUNS = (R.Run("fwd-bf16", "bfloat16", ("bf16",), make, "float32 initial and final states"),)

if __name__ == "__main__":
    sys.exit(R.main("flashkda", __file__, RUNS, prepare=check_built, skip=("p32-softplus-64k",)))

# fuzz_read_case.py: atheris (libFuzzer for Python) target for the package's readers,
# kda_conform.read_case (case and prompt files) and read_result (result files): any bytes give
# a Case (a dict) or a CaseError naming the file, never another exception, a hang or memory
# beyond the bounds of SPEC.md §10.1.
# SPDX-License-Identifier: MIT
#
# make fuzz runs it: python3 python/tests/fuzz_read_case.py -runs=N CORPUS SEEDS...
# (atheris installed with pip; the package imported from python/).
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import kda_conform as kc

PATH = os.path.join(tempfile.gettempdir(), "kda-fuzz-py-%d.npz" % os.getpid())


def one_input(data: bytes) -> None:
    with open(PATH, "wb") as f:
        f.write(data)
    try:
        r = kc.read_result(PATH)
        assert isinstance(r["manifest"], dict)
    except kc.CaseError as e:
        assert str(e).startswith(PATH) and "\n" not in str(e).split(": ", 1)[0]
    try:
        c = kc.read_case(PATH)
    except kc.CaseError as e:
        assert str(e).startswith(PATH) and "\n" not in str(e).split(": ", 1)[0]
        return
    assert kc.valid_id(c.id)
    for m, a in c.inputs.items():
        assert a.size == int(__import__("numpy").prod(a.shape)), m


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

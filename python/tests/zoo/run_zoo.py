#!/usr/bin/env python3
# run_zoo.py: scores the numpy zoo (numpy_zoo.py) through kda_conform.check on a golden set,
# every serving prompt included, and prints the member x case pass/fail table.
# SPDX-License-Identifier: MIT
"""Usage: python3 python/tests/zoo/run_zoo.py [--strict] [--level L1] [-k GLOB]... [NAME...]

NAME: members of numpy_zoo.KERNELS (default: all), or permN for a random order with seed N.
Needs kda (KDA_BIN or build/kda) and kda_conform importable (pip install ./python, or
PYTHONPATH=python).  Exit 1 when a member fails a case (the zoo's claim is that none does)."""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", ".."))          # python/, for kda_conform

import kda_conform  # noqa: E402
import numpy_zoo  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--level", default="L1")
    ap.add_argument("-k", action="append", dest="cases")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args(argv)
    names = a.names or list(numpy_zoo.KERNELS)
    failed = 0
    for name in names:
        kern = numpy_zoo.perm(int(name[4:])) if name.startswith("perm") and \
            name not in numpy_zoo.KERNELS else numpy_zoo.KERNELS[name]
        t = time.time()
        res = kda_conform.check(kern, level=a.level, cls="fp32", cases=a.cases,
                                backend="numpy-" + name,
                                runner_args=["--strict"] if a.strict else [])
        bad = [r for r in res if not (r.ok or r.skipped)]
        failed += len(bad)
        print("%-10s %4d passed %3d failed %3d skipped  %5.0f s  %s" % (
            name, sum(r.ok for r in res), len(bad), sum(r.skipped for r in res),
            time.time() - t, "; ".join("%s (%s)" % (r.case, r.reason[:120]) for r in bad)),
            flush=True)
    print("numpy zoo: %d members, %d failures%s" % (len(names), failed,
                                                    " (--strict)" if a.strict else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

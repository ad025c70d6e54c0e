#!/usr/bin/env python3
# function_sizes.py: the length of every function of the library code (ref/, vectors/,
# conformance/ without their tests and examples), from Universal Ctags' line and end fields;
# prints the median, p90 and maximum and fails above the limits the tree keeps (docs/layout.md).
# SPDX-License-Identifier: MIT
#
# Usage: function_sizes.py [--list N]   (from the repository root)
# Without ctags it says so and exits 0, unless KDA_REQUIRE_CTAGS=1 (CI), where that fails.
import os
import shutil
import subprocess
import sys

LIMITS = {"median": 10, "p90": 30, "max": 75}
ROOTS = ("ref", "vectors", "conformance")


def library_sources():
    out = []
    for root in ROOTS:
        for d, subdirs, names in os.walk(root):
            subdirs[:] = sorted(s for s in subdirs if s not in ("tests", "examples"))
            out += [os.path.join(d, n) for n in sorted(names) if n.endswith(".c")]
    return out


def sizes(files):
    r = subprocess.run(["ctags", "--fields=+ne", "--kinds-C=f", "-o", "-"] + files,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"function_sizes: ctags: {r.stderr.strip()}")
    out = []
    for line in r.stdout.splitlines():
        f = line.split("\t")
        fields = dict(x.split(":", 1) for x in f[3:] if ":" in x)
        if "line" in fields and "end" in fields:
            out.append((int(fields["end"]) - int(fields["line"]) + 1, f[1], f[0]))
    return sorted(out)


def main():
    if shutil.which("ctags") is None:
        msg = "function_sizes: ctags (universal-ctags) not found"
        if os.environ.get("KDA_REQUIRE_CTAGS") == "1":
            sys.exit(msg)
        print(msg + ": not measured")
        return
    listed = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "--list" else 0
    s = sizes(library_sources())
    if not s:
        sys.exit("function_sizes: no functions found")
    n = [x[0] for x in s]
    got = {"median": n[(len(n) - 1) // 2] if len(n) % 2 else (n[len(n) // 2 - 1] + n[len(n) // 2]) / 2,
           "p90": n[int(0.9 * (len(n) - 1))], "max": n[-1]}
    for size, path, name in s[len(s) - listed:] if listed else []:
        print(f"{size:4d} {path} {name}")
    over = [k for k in LIMITS if got[k] > LIMITS[k]]
    print(f"function_sizes: {len(n)} library functions, lines: median {got['median']:g}, "
          f"p90 {got['p90']}, max {got['max']} ({s[-1][1]} {s[-1][2]}); limits "
          + ", ".join(f"{k} {v}" for k, v in LIMITS.items()))
    if over:
        sys.exit("function_sizes: over the limit: " + ", ".join(over))


if __name__ == "__main__":
    main()

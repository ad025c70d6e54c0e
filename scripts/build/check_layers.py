#!/usr/bin/env python3
# check_layers.py: the source tree keeps its rooms (docs/layout.md), checked from the objects'
# symbols (nm) and the sources' #include lines, not by eye.
# SPDX-License-Identifier: MIT
#
# Usage: check_layers.py BUILD   (run from the repository root, after the objects are built)
#
# Fails, naming each offence, on
#   1. an upward reference: a file that calls (nm: an undefined symbol another object defines)
#      or includes something of a room above its own, in the order
#      ref < ref/oracle < vectors/format < vectors/case < vectors/catalog < vectors/golden
#        < conformance (and its backends) < tools;
#   2. a reference across libraries: libkda's rooms use only libkda; libkda-oracle's (ref/oracle,
#      conformance/backends/mpfr) use libkda and the oracle; libkda-golden (vectors/golden)
#      uses all three; of the command's files only those in ORACLE_USERS use the oracle;
#   3. a cycle between files (object files calling each other, directly or around a ring);
#   4. an include of another module's private header (*_internal.h, *_impl.h; a module is a
#      top-level folder: ref, vectors, conformance, tools). ref/kda_internal.h is libkda's
#      shared internal header: every library module may include it, the command may not.
# Library and command code only: tests and test plugins are white-box and not checked.
# Known exceptions are listed in scripts/build/layers-known.txt, one offence a line, with the
# reason; the check fails on any offence not listed there and on a listed one that is gone.
import os
import re
import subprocess
import sys

ROOMS = [  # (folder, rank, library)
    ("ref", 0, "lib"),
    ("ref/oracle", 1, "oracle"),
    ("vectors/format", 2, "lib"),
    ("vectors/case", 3, "lib"),
    ("vectors/catalog", 4, "lib"),
    ("vectors/golden", 5, "golden"),
    ("conformance", 6, "lib"),
    ("conformance/backends/ref", 6, "lib"),
    ("conformance/backends/simd", 6, "lib"),
    ("conformance/backends/mpfr", 6, "oracle"),
    ("tools", 7, "command"),
    ("tools/scale", 7, "command"),
]
RANK = {f: r for f, r, _ in ROOMS}
LIBRARY = {f: l for f, _, l in ROOMS}
USES = {  # which libraries a library may reference
    "lib": {"lib"},
    "oracle": {"lib", "oracle"},
    "golden": {"lib", "oracle", "golden"},
    "command": {"lib", "golden", "command"},
}
# The command's files that use the oracle: kda golden, kda-mpi, the study of one case that
# kda trace and kda explore certify with MPFR, and the registration of the mpfr backend.
ORACLE_USERS = {"tools/kda_cmd_golden.c", "tools/scale/kda_mpi.c", "tools/kda_study.c",
                "tools/kda_tool.c"}
INCLUDE_DIRS = ["ref", "ref/oracle", "vectors/format", "vectors/case", "vectors/catalog",
                "vectors/golden", "conformance", "tools", "tools/scale"]
SHARED_INTERNAL = "ref/kda_internal.h"


def room_of(path):
    d = os.path.dirname(path)
    return d if d in RANK else None


def module_of(path):
    return path.split("/", 1)[0]


def sources():
    out = []
    for folder, _, _ in ROOMS:
        for name in sorted(os.listdir(folder)):
            if name.endswith((".c", ".h")):
                out.append(folder + "/" + name)
    return out


INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def resolve(src, name):
    """A quoted include as the compiler finds it: beside the file, then on the path."""
    for d in [os.path.dirname(src)] + INCLUDE_DIRS:
        p = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(p):
            return p
    return None


def include_offences(files):
    out = []
    for src in files:
        with open(src, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name in INCLUDE_RE.findall(text):
            hdr = resolve(src, name)
            if hdr is None or room_of(hdr) is None:
                continue
            out += edge_offences(src, hdr, "includes")
            base = os.path.basename(hdr)
            private = base.endswith(("_internal.h", "_impl.h"))
            if not private or module_of(hdr) == module_of(src):
                continue
            if hdr == SHARED_INTERNAL and LIBRARY[room_of(src)] != "command":
                continue
            out.append(f"{src} includes {hdr}, a private header of {module_of(hdr)}/")
    return out


def edge_offences(user, used, verb):
    ru, rd = room_of(user), room_of(used)
    if ru == rd:
        return []
    out = []
    if RANK[rd] > RANK[ru]:
        out.append(f"{user} {verb} {used}: upward ({ru} is below {rd})")
    lu, ld = LIBRARY[ru], LIBRARY[rd]
    if ld == "oracle" and lu == "command" and user in ORACLE_USERS:
        return out
    if ld not in USES[lu]:
        out.append(f"{user} {verb} {used}: {lu} code uses {ld} (libkda-{ld})"
                   if ld != "lib" else f"{user} {verb} {used}: across libraries")
    return out


def nm(args):
    r = subprocess.run(["nm"] + args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check-layers: nm {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def symbol_graph(build, files):
    """Object-level references: {source: {source: [symbols]}} from nm (two runs in all)."""
    objs = {}
    for src in files:
        o = os.path.join(build, src[:-2] + ".o")
        if src.endswith(".c") and os.path.isfile(o):
            objs[o] = src
    if not objs:
        sys.exit(f"check-layers: no objects under {build}: build first")
    defined, undefined = {}, {}
    for line in nm(["-A", "-g", "--defined-only"] + sorted(objs)).splitlines():
        where, _, rest = line.partition(".o:")  # "BUILD/x.o:ADDRESS T name"
        where += ".o"
        f = rest.split()
        if len(f) == 3:
            defined.setdefault(f[2], objs[where])
    for line in nm(["-A", "-u"] + sorted(objs)).splitlines():
        where, _, rest = line.partition(".o:")  # "BUILD/x.o:          U name"
        where += ".o"
        if rest.split():
            undefined.setdefault(objs[where], []).append(rest.split()[-1])
    graph = {}
    for src, syms in undefined.items():
        for s in syms:
            d = defined.get(s)
            if d and d != src:
                graph.setdefault(src, {}).setdefault(d, []).append(s)
    return graph, len(objs)


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, {}))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_layers.py BUILD")
    build = sys.argv[1]
    files = sources()
    graph, nobj = symbol_graph(build, files)
    offences = include_offences(files)
    for user in sorted(graph):
        for used in sorted(graph[user]):
            syms = sorted(set(graph[user][used]))
            for o in edge_offences(user, used, "calls"):
                offences.append(f"{o} [{', '.join(syms[:3])}{', ...' if len(syms) > 3 else ''}]")
    for comp in cycles(graph):
        offences.append("cycle between files: " + " <-> ".join(comp))
    known_path = os.path.join(os.path.dirname(__file__), "layers-known.txt")
    known = {}
    if os.path.exists(known_path):
        with open(known_path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line and not line.startswith("#"):
                    known[line.split("  #", 1)[0].rstrip()] = line
    keys = {re.sub(r" \[.*\]$", "", o) for o in offences}
    new = sorted(o for o in offences if re.sub(r" \[.*\]$", "", o) not in known)
    gone = sorted(k for k in known if k not in keys)
    for o in new:
        print(f"check-layers: {o}")
    for k in gone:
        print(f"check-layers: {k}: listed in scripts/build/layers-known.txt but no longer "
              "found: remove the line")
    if new or gone:
        sys.exit(1)
    edges = sum(len(v) for v in graph.values())
    print(f"check-layers: {len(files)} files, {nobj} objects, {edges} references between "
          f"files: nothing new (no upward reference, no cycle, no private header of another module) "
          f"beyond the {len(known)} known offences of layers-known.txt")


if __name__ == "__main__":
    main()

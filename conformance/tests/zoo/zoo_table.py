#!/usr/bin/env python3
# zoo_table.py: the honest zoo's pass/fail table from kda conform's results.jsonl files.
# SPDX-License-Identifier: MIT
# Usage: zoo_table.py RESULTS.jsonl... : one line per member (passed, failed, and each failure
# with its worst error, allowance and reason), then one line per case some member failed.
# Exit 1 when any member failed a case (the zoo's claim is that none does), else 0.
import collections
import json
import sys


def short(r):
    """A failure as 'case o 99.4/64 @t3100 (reason)'."""
    bits = []
    for q in ("o", "ht", "hc"):
        m = r.get(q)
        if m and m.get("worst") is not None and m["worst"] > m.get("allowed", 0):
            bits.append("%s %.4g/%.4g" % (q, m["worst"], m["allowed"]))
    if r.get("first_fail_token", -1) >= 0:
        bits.append("@t%d" % r["first_fail_token"])
    why = (r.get("reason") or "").replace("\n", " ")
    return "%s %s%s" % (r["case"], " ".join(bits), " (%s)" % why[:160] if why else "")


def main(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    by_member = collections.OrderedDict()
    by_case = collections.OrderedDict()
    for r in rows:
        m = by_member.setdefault(r["backend"], {"pass": 0, "skip": 0, "fail": []})
        v = r["verdict"]
        if v in ("Pass", "QualityWarning"):
            m["pass"] += 1
        elif v in ("NotSupported", "Waived"):
            m["skip"] += 1
        else:
            m["fail"].append(r)
            by_case.setdefault(r["case"], []).append(r["backend"])
    width = max([len(b) for b in by_member] + [6])
    print("%-*s %6s %6s %6s  failures" % (width, "member", "passed", "failed", "skipped"))
    for b, m in by_member.items():
        print("%-*s %6d %6d %6d  %s" % (width, b, m["pass"], len(m["fail"]), m["skip"],
                                        "; ".join(short(r) for r in m["fail"])))
    if by_case:
        print("\ncases failed by some member:")
        for c, bs in by_case.items():
            print("  %s: %d members (%s)" % (c, len(bs), " ".join(bs)))
    nfail = sum(len(m["fail"]) for m in by_member.values())
    print("\nzoo: %d members, %d reports, %d failed" % (len(by_member), len(rows), nfail))
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

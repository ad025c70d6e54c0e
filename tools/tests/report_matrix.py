#!/usr/bin/env python3
# report_matrix.py: the kda conform --html matrix against results.jsonl (make check-browser).
# SPDX-License-Identifier: MIT
# Usage: report_matrix.py REPORT.dom RESULTS.jsonl  (the DOM Chromium dumped of index.html)
# Every record must be the cell of its case's row and its backend's column, with its verdict and
# worst o error / cap as %.3g / %g; and every cell must be one record.
import html.parser, json, sys
class P(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.rows = []; self.cols = []; self.inm = False; self.cell = None
    def handle_starttag(self, tag, a):
        a = dict(a)
        if tag == "table" and a.get("id") == "matrix": self.inm = True
        if not self.inm: return
        if tag == "tr": self.rows.append([])
        if tag in ("td", "th"): self.cell = [tag, a.get("scope"), ""]
    def handle_endtag(self, tag):
        if tag == "table" and self.inm: self.inm = False
        if self.inm and tag in ("td", "th") and self.cell:
            self.rows[-1].append(self.cell); self.cell = None
    def handle_data(self, d):
        if self.cell is not None: self.cell[2] += d
p = P(); p.feed(open(sys.argv[1]).read())
head = [c[2] for c in p.rows[0][1:]]
grid = {(r[0][2], head[i]): c[2] for r in p.rows[1:] for i, c in enumerate(r[1:])}
n = bad = 0
for line in open(sys.argv[2]):
    r = json.loads(line); n += 1
    want = r["verdict"] + (" o %.3g/%g" % (r["o"]["worst"], r["o"]["allowed"]) if r.get("o") and r["o"]["count"] else "")
    got = grid.get((r["case"], r["backend"]))
    if got != want: bad += 1; print(f"{r['case']} x {r['backend']}: matrix '{got}', results.jsonl '{want}'")
print(f"matrix: {n} records of results.jsonl, {bad} differ from their cell")
sys.exit(1 if bad or n == 0 or len(grid) != n else 0)

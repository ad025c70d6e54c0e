# kda_conform.score: find `kda`, export prompts, score result files with `kda conform --candidate`.
# SPDX-License-Identifier: MIT
"""The runner is the judge: this module only drives `kda conform` and parses its JSON Lines
report (SPEC.md §7.9).  `kda` is found through $KDA_BIN, then $PATH, then `build/kda` of a
repository above the working directory or above this package; golden sets through
$KDA_GOLDEN (a directory holding L1, L2, ...), then `golden/` next to that repository's
`build/`."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from typing import Any, Dict, List, Optional, Sequence

_LEVEL_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NOTHING_RAN = 5          # kda conform: no case ran, or every case was NotSupported
OK_VERDICTS = ("Pass", "QualityWarning", "Waived")
SKIP_VERDICTS = ("NotSupported",)


class ScoreError(RuntimeError):
    """`kda` is missing, or it refused the run (usage or I/O error: exit status 2)."""


@dataclasses.dataclass
class CaseResult:
    """The runner's verdict on one case."""
    case: str
    verdict: str
    reason: str = ""
    record: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def base_case(self) -> str:
        """The golden case a report belongs to: the case itself, or the case a serving-path
        prompt was derived from ("t17-gdn.resume-65" -> "t17-gdn", SPEC.md §7.7)."""
        return self.case.split(".", 1)[0]

    @property
    def serving(self) -> str:
        """The serving-path check of a derived prompt ("resume-65", "decode", ...), "" for the
        case itself."""
        return self.case.split(".", 1)[1] if "." in self.case else ""

    @property
    def ok(self) -> bool:
        """Pass, QualityWarning or Waived."""
        return self.verdict in OK_VERDICTS

    @property
    def skipped(self) -> bool:
        return self.verdict in SKIP_VERDICTS

    @property
    def message(self) -> str:
        return f"{self.case}: {self.verdict}" + (f" -- {self.reason}" if self.reason else "")

    def check(self) -> None:
        """In a pytest test: skip a NotSupported case, fail a failing one with the runner's
        message, return on a pass."""
        if self.skipped:
            import pytest
            pytest.skip(self.message)
        if not self.ok:
            raise AssertionError(self.message)

    def __str__(self) -> str:
        return self.message


@dataclasses.dataclass
class ScoreReport:
    returncode: int
    results: List[CaseResult]
    stdout: str
    stderr: str
    summary: Optional[Dict[str, Any]] = None


def _repo_roots() -> List[str]:
    roots, seen = [], set()
    for start in (os.getcwd(), os.path.dirname(os.path.abspath(__file__))):
        d = start
        while d not in seen:
            seen.add(d)
            roots.append(d)
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
    return roots


def find_kda(kda: Optional[str] = None) -> str:
    """The `kda` executable: the argument, $KDA_BIN, $PATH, then a repository's build/kda."""
    for cand, origin in ((kda, "argument"), (os.environ.get("KDA_BIN"), "KDA_BIN")):
        if cand:
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return os.path.abspath(cand)
            raise ScoreError(f"kda from {origin} ({cand}) is not an executable file")
    on_path = shutil.which("kda")
    if on_path:
        return on_path
    for root in _repo_roots():
        cand = os.path.join(root, "build", "kda")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise ScoreError("kda not found: set KDA_BIN, put kda on PATH, or run `make` in the "
                     "repository (build/kda)")


def find_golden(level: str = "L1", kda: Optional[str] = None) -> str:
    """The golden set directory for `level`: $KDA_GOLDEN/LEVEL, then golden/LEVEL of the
    repository above the working directory, this package or the kda binary."""
    if not _LEVEL_RE.match(level or ""):
        raise ScoreError(f"level {level!r} is not a plain name such as L1")
    bases = []
    if os.environ.get("KDA_GOLDEN"):
        bases.append(os.environ["KDA_GOLDEN"])
    bases += [os.path.join(r, "golden") for r in _repo_roots()]
    if kda:
        bases.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(kda))),
                                  "golden"))
    for b in bases:
        d = os.path.join(b, level)
        if os.path.isdir(d):
            return d
    raise ScoreError(f"golden set {level} not found (set KDA_GOLDEN to the directory that "
                     "holds L1, L2, ...)")


def _run(cmd: Sequence[str], timeout: Optional[float]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except OSError as e:
        raise ScoreError(f"cannot run {cmd[0]}: {e}") from None
    except subprocess.TimeoutExpired:
        raise ScoreError(f"{' '.join(cmd[:3])} ... took longer than {timeout} s") from None


def _stderr_line(p: subprocess.CompletedProcess) -> str:
    lines = [l for l in (p.stderr or "").splitlines() if l.strip()]
    return lines[-1] if lines else f"exit status {p.returncode}"


def help_text(kda: Optional[str] = None) -> str:
    """`kda conform --help`, to learn what this runner knows (e.g. not_supported)."""
    p = _run([find_kda(kda), "conform", "--help"], 60)
    return p.stdout + p.stderr


def export_prompts(cases: str, out_dir: str, kda: Optional[str] = None,
                   timeout: Optional[float] = 600) -> None:
    """`kda conform --export-prompts OUT_DIR CASES`: the inputs only, no answers."""
    p = _run([find_kda(kda), "conform", "--export-prompts", out_dir, cases], timeout)
    if p.returncode != 0:
        raise ScoreError(f"kda conform --export-prompts: {_stderr_line(p)}")


def parse_jsonl(path: str) -> List[CaseResult]:
    """results.jsonl of `kda conform --out` as CaseResults."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                out.append(CaseResult(str(rec["case"]), str(rec["verdict"]),
                                      str(rec.get("reason") or ""), rec))
            except (ValueError, KeyError, TypeError) as e:
                raise ScoreError(f"{path}:{n}: not a result record ({e})") from None
    return out


def score(results_dir: str, cases: str, out_dir: str, *, cls: str = "fp32",
          filters: Optional[Sequence[str]] = None, kda: Optional[str] = None,
          extra: Sequence[str] = (), timeout: Optional[float] = 3600) -> ScoreReport:
    """`kda conform --candidate RESULTS_DIR --class CLS --out OUT_DIR [-k F]... CASES`.
    Returns every case's verdict (exit 0, 1, or 5 when every case was NotSupported);
    ScoreError when the runner refused the run (exit 2) or no case was selected."""
    cmd = [find_kda(kda), "conform", "--candidate", results_dir, "--class", cls,
           "--out", out_dir, "--quiet"]
    for f in filters or ():
        cmd += ["-k", f]
    cmd += list(extra) + [cases]
    p = _run(cmd, timeout)
    if p.returncode not in (0, 1, NOTHING_RAN):
        raise ScoreError(f"kda conform --candidate: {_stderr_line(p)}")
    jsonl = os.path.join(out_dir, "results.jsonl")
    results = parse_jsonl(jsonl) if os.path.exists(jsonl) else []
    if not results:          # exit 5 without a case: the filters selected nothing (§12.2)
        raise ScoreError(f"kda conform --candidate scored no case: {_stderr_line(p)}")
    summary = None
    sp = os.path.join(out_dir, "summary.json")
    if os.path.exists(sp):
        with open(sp, encoding="utf-8") as f:
            summary = json.load(f)
    return ScoreReport(p.returncode, results, p.stdout, p.stderr, summary)

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
    text: str = ""      # the runner's human report of the case (its failure detail), if printed

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
        report of it, return on a pass."""
        if self.skipped:
            import pytest
            pytest.skip(self.message)
        if not self.ok:
            raise AssertionError(self.text or self.message)

    def __str__(self) -> str:
        return self.message


@dataclasses.dataclass
class ScoreReport:
    returncode: int
    results: List[CaseResult]
    stdout: str
    stderr: str
    summary: Optional[Dict[str, Any]] = None


def _bundled_kda() -> Optional[str]:
    """The kda the wheel carries (kda_conform/_judge/bin/kda), when this install has one."""
    cand = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_judge", "bin", "kda")
    return cand if os.path.isfile(cand) and os.access(cand, os.X_OK) else None


def _source_tree_kda() -> Optional[str]:
    """build/kda of the repository holding the working directory or this package (an
    editable or source-tree use), or None."""
    seen = set()
    for start in (os.getcwd(), os.path.dirname(os.path.abspath(__file__))):
        d = start
        while d not in seen:
            seen.add(d)
            cand = os.path.join(d, "build", "kda")
            if (os.path.isfile(cand) and os.access(cand, os.X_OK)
                    and os.path.isfile(os.path.join(d, "ref", "kda_version.h"))):
                return cand
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
    return None


def find_kda(kda: Optional[str] = None) -> str:
    """The `kda` executable: the argument, $KDA_BIN, the one this package carries (a wheel
    install), `kda` on $PATH, then build/kda of a source tree above the working directory or
    this package.  ScoreError, saying what was tried, when there is none: the judge is never
    optional."""
    for cand, origin in ((kda, "argument"), (os.environ.get("KDA_BIN"), "KDA_BIN")):
        if cand:
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return os.path.abspath(cand)
            raise ScoreError(f"kda from {origin} ({cand}) is not an executable file")
    found = _bundled_kda() or shutil.which("kda") or _source_tree_kda()
    if found:
        return os.path.abspath(found)
    raise ScoreError("kda not found: this kda-conform install carries none, none is on PATH "
                     "and no source tree's build/kda is above the working directory; install "
                     "the wheel (pip install ./python), set KDA_BIN, or run `make`")


def golden_root(kda: Optional[str] = None) -> str:
    """The directory holding the golden sets, as `kda golden --where` answers it (the same
    lookup `kda conform` uses: $KDA_GOLDEN, ./golden, golden/ beside kda's folder, the
    installed share/kda/golden; SPEC.md §12.3)."""
    exe = find_kda(kda)
    p = _run([exe, "golden", "--where"], 60)
    if p.returncode != 0:
        raise ScoreError(f"{exe} golden --where: {_stderr_line(p)}")
    where = (p.stdout or "").strip()
    if not where or not os.path.isdir(where):
        raise ScoreError(f"{exe} golden --where answered {where!r}, not a directory")
    return where


def find_golden(level: str = "L1", kda: Optional[str] = None) -> str:
    """The golden set directory for `level` under golden_root(kda); ScoreError when kda
    has no such set (never a silent fallback)."""
    if not _LEVEL_RE.match(level or ""):
        raise ScoreError(f"level {level!r} is not a plain name such as L1")
    root = golden_root(kda)
    d = os.path.join(root, level)
    if not os.path.isdir(d):
        have = sorted(x for x in os.listdir(root) if os.path.isdir(os.path.join(root, x)))
        raise ScoreError(f"golden set {level} not found: {root} (from `kda golden --where`) "
                         f"holds {', '.join(have) or 'no set'}")
    return d


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
                   timeout: Optional[float] = 600,
                   filters: Optional[Sequence[str]] = None) -> None:
    """`kda conform --export-prompts OUT_DIR [-k F]... CASES`: the inputs only, no answers;
    the -k patterns select cases and serving prompts (SPEC.md §7.7)."""
    cmd = [find_kda(kda), "conform", "--export-prompts", out_dir]
    for f in filters or ():
        cmd += ["-k", f]
    p = _run(cmd + [cases], timeout)
    if p.returncode != 0:
        raise ScoreError(f"kda conform --export-prompts: {_stderr_line(p)}")


@dataclasses.dataclass
class CaseInfo:
    """One case of a golden set as `kda conform --list-cases --json` lists it (kda-cases/1):
    read from the manifests, nothing run."""
    id: str
    path: str
    selected: bool
    problem: Dict[str, Any]
    flags: List[str]
    comment: str
    design: str
    input_precision: str
    intent: str
    prompts: List[str]


def list_cases(cases: str, kda: Optional[str] = None,
               filters: Optional[Sequence[str]] = None) -> List[CaseInfo]:
    """The cases (and the ids of their serving prompts) of a golden set or case file, in the
    runner's order, without making any prompt."""
    cmd = [find_kda(kda), "conform", "--list-cases", "--json"]
    for f in filters or ():
        cmd += ["-k", f]
    p = _run(cmd + [cases], 120)
    if p.returncode != 0:
        raise ScoreError(f"kda conform --list-cases: {_stderr_line(p)}")
    try:
        doc = json.loads(p.stdout)
        if doc.get("schema") != "kda-cases/1":
            raise ValueError(f"schema {doc.get('schema')!r}")
        out = []
        for c in doc["cases"]:
            path = c["path"] if os.path.isabs(c["path"]) else os.path.abspath(c["path"])
            out.append(CaseInfo(str(c["id"]), path, bool(c["selected"]), dict(c["problem"]),
                                [str(f) for f in c["flags"]], str(c["comment"]),
                                str(c["design"]), str(c["input_precision"]),
                                str(c["intent"]), [str(x) for x in c["prompts"]]))
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ScoreError(f"kda conform --list-cases --json: not a kda-cases/1 listing ({e}); "
                         "is this kda older than the package?") from None


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


def score(results_dir: str, cases: str, out_dir: Optional[str] = None, *, cls: str = "fp32",
          filters: Optional[Sequence[str]] = None, kda: Optional[str] = None,
          extra: Sequence[str] = (), timeout: Optional[float] = 3600,
          jsonl: Optional[str] = None) -> ScoreReport:
    """`kda conform --candidate RESULTS_DIR --class CLS (--out OUT_DIR | --jsonl FILE)
    [-k F]... CASES`.  Returns every report's verdict (exit 0, 1, or 5 when every report
    was NotSupported) and the runner's text; ScoreError when the runner refused the run
    (exit 2) or scored nothing (SPEC.md §12.2)."""
    if (out_dir is None) == (jsonl is None):
        raise ValueError("give exactly one of out_dir and jsonl")
    cmd = [find_kda(kda), "conform", "--candidate", results_dir, "--class", cls, "--quiet"]
    cmd += ["--out", out_dir] if out_dir is not None else ["--jsonl", jsonl]
    for f in filters or ():
        cmd += ["-k", f]
    cmd += list(extra) + [cases]
    p = _run(cmd, timeout)
    if p.returncode not in (0, 1, NOTHING_RAN):
        raise ScoreError(f"kda conform --candidate: {_stderr_line(p)}")
    path = jsonl if jsonl is not None else os.path.join(out_dir, "results.jsonl")
    results = parse_jsonl(path) if os.path.exists(path) else []
    if not results:          # exit 5 without a report: nothing was selected (§12.2)
        raise ScoreError(f"kda conform --candidate scored nothing: {_stderr_line(p)}")
    for r in results:
        r.text = runner_text(p.stdout, r.case)
    summary = None
    sp = os.path.join(out_dir, "summary.json") if out_dir is not None else None
    if sp and os.path.exists(sp):
        with open(sp, encoding="utf-8") as f:
            summary = json.load(f)
    return ScoreReport(p.returncode, results, p.stdout, p.stderr, summary)


def runner_text(stdout: str, case: str) -> str:
    """The runner's human report of one case (its verdict line and the failure detail
    under it, as `kda conform` prints them), from the stdout of a scoring run."""
    lines, keep = [], False
    for line in stdout.splitlines():
        if not line.startswith(" "):
            fields = line.split()
            keep = len(fields) >= 3 and fields[2] == case
        if keep:
            lines.append(line)
    return "\n".join(lines)

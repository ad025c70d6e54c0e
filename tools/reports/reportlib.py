# reportlib.py: what the kernel-report scripts share: case sets, prompts, sharded runs, scoring, tables.
# SPDX-License-Identifier: MIT
"""The machinery behind tools/reports/report_*.py (docs/reports/README.md).

A report run scores one kernel family, in one or more *runs* (a kernel, an input dtype, the
precision classes it is scored in), on case *sets*:

- `L1`: golden/L1 with every serving prompt (`--serving full`);
- `prod`: production-size prompts made by `kda gen` (K = V = 128, H = 32, 2048 tokens;
  the regimes of golden/L2), every serving prompt, scored whole (`--no-stream`);
- `prod64k`: the same at T = 2^16, scored streamed (no serving prompts: SPEC.md §7.10).

Steps, each cached in the work folder so a rerun repeats only what is missing: make the
`prod*` case files (`kda gen`), export the prompts (`kda conform --export-prompts`), call
the kernel on every prompt through kda_conform (the prompts sharded over `--jobs`
processes, largest first; each process builds its kernels once), score every (run, class,
set) with `kda conform --candidate` (in parallel), then write the verdict tables and the
regression rows.  The kernels' own code is never part of this repository: the scripts take
the folder of a checkout fetched separately.
"""
from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import multiprocessing as mp
import os
import shlex
import shutil
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

CLASSES = ("fp64", "fp32", "tf32", "bf16", "fp16")
SETS = ("L1", "prod", "prod64k")

# Production-size cases: the regimes of golden/L2 (docs/golden.md) at H = 32 value heads.
# (id, description, sets): the description is `kda gen`'s; truth is ref-f64 (SPEC.md §7.1).
PROD_CASES: Tuple[Tuple[str, str, str], ...] = (
    ("p32-softplus-2k", "seed=3101 T=2048 H=32 K=128 V=128 gate=softplus beta=logit l2=fla "
     "h0=1 checkpoints=1023,2047 prec=bf16", "prod"),
    ("p32-lb-2k", "seed=3108 T=2048 H=32 K=128 V=128 gate=lower_bound lb=-5 alog=1 "
     "beta=logit l2=fla h0=1 checkpoints=1023 prec=bf16", "prod"),
    ("p32-mixed-2k", "seed=3104 T=2048 H=32 K=128 V=128 regime=mixed gate=softplus "
     "beta=logit l2=fla h0=1 prec=bf16", "prod"),
    ("p32-varlen-h0", "seed=3107 seqlens=1024,0,700,324 H=32 K=128 V=128 gate=softplus "
     "beta=logit l2=fla h0=1 prec=bf16", "prod"),
    ("p32-lowrank-log-2k", "seed=3103 T=2048 H=32 K=128 V=128 regime=lowrank-slow gate=log "
     "beta=logit l2=fla h0=1 prec=bf16", "prod"),
    ("p32-softplus-64k", "seed=3111 T=65536 H=32 K=128 V=128 gate=softplus beta=logit "
     "l2=fla h0=1 prec=bf16", "prod64k"),
    ("p32-lb-64k", "seed=3112 T=65536 H=32 K=128 V=128 gate=lower_bound lb=-5 alog=1 "
     "beta=logit l2=fla h0=1 prec=bf16", "prod64k"),
)


def tiny(desc: str) -> str:
    """The same description at a CPU-test size: T = 64 (varlen: 40,0,24), H = 2."""
    out = []
    for w in desc.split():
        k, _, v = w.partition("=")
        if k == "T":
            w = "T=64"
        elif k == "seqlens":
            w = "seqlens=40,0,24"
        elif k == "H":
            w = "H=2"
        elif k == "checkpoints":
            w = "checkpoints=31,63"
        out.append(w)
    return " ".join(out)


@dataclasses.dataclass
class Run:
    """One way of calling the kernel: name (used in file names), the adapter's input dtype,
    the classes its results are scored in, and a factory `make(checkout, stand_in)` returning
    the kda_conform kernel (called once in each worker process)."""
    name: str
    dtype: str
    classes: Tuple[str, ...]
    make: Callable[[str, bool], Any]
    note: str = ""
    env: Tuple[Tuple[str, str], ...] = ()     # environment of its worker processes


class ReportError(RuntimeError):
    """A step of the report could not be done (the message names the file or command)."""


# ---------------------------------------------------------------- arguments and sets

def parse_args(family: str, runs: Sequence[Run], argv: Optional[Sequence[str]] = None,
               needs_checkout: bool = True) -> argparse.Namespace:
    names = [r.name for r in runs]
    ap = argparse.ArgumentParser(
        prog=f"report_{family}.py",
        description=f"Score {family}'s KDA kernels through kda_conform (docs/reports/).")
    ap.add_argument("--checkout", required=needs_checkout,
                    help="the fetched source folder of the kernel (never committed here)")
    ap.add_argument("--commit", default="", help="the checkout's commit hash (default: git "
                    "rev-parse HEAD in --checkout, else 'unknown')")
    ap.add_argument("--runs", default=",".join(names),
                    help=f"comma list of runs (default all: {','.join(names)})")
    ap.add_argument("--sets", default="L1,prod,prod64k",
                    help="comma list of case sets: L1, prod, prod64k (default all)")
    ap.add_argument("-k", "--cases", action="append", default=[],
                    help="glob on case ids (repeatable; !GLOB drops); serving prompts follow "
                    "their case")
    ap.add_argument("--jobs", type=int, default=8, help="kernel processes and scoring "
                    "processes at once (default 8)")
    ap.add_argument("--work", default="/tmp/kda-report",
                    help="work folder: cases, prompts, results, scores (default "
                    "/tmp/kda-report); what exists is reused")
    ap.add_argument("--out", default="", help="folder for the tables and the compressed "
                    "scores (default WORK/out)")
    ap.add_argument("--card", default="", help="the GPU's name for the tables (default: "
                    "torch's device name, else 'cpu')")
    ap.add_argument("--history", default="", help="append one row per (run, class, set) to "
                    "this markdown table (the regression table)")
    ap.add_argument("--kda", default="", help="the kda binary (default: kda_conform.find_kda)")
    ap.add_argument("--golden", default="", help="golden/L1 (default: kda_conform.find_golden)")
    ap.add_argument("--stand-in", action="store_true",
                    help="the numpy stand-ins of python/tests/fakes.py instead of the kernel, "
                    "on the CPU, with the prod cases at T = 64, H = 2 (the scripts' own tests)")
    ap.add_argument("--timeout", type=float, default=540.0,
                    help="seconds for the kernel step (default 540); cases not reached are "
                    "reported as not run")
    a = ap.parse_args(argv)
    a.family = family
    a.runs = _choose(a.runs, names, "run")
    a.sets = _choose(a.sets, SETS, "set")
    if a.jobs < 1 or a.jobs > 256:
        ap.error(f"--jobs must be 1..256, got {a.jobs}")
    if a.checkout and not os.path.isdir(a.checkout):
        ap.error(f"--checkout {a.checkout}: not a folder")
    a.work = os.path.abspath(a.work)
    a.out = os.path.abspath(a.out or os.path.join(a.work, "out"))
    return a


def _choose(text: str, allowed: Sequence[str], what: str) -> List[str]:
    got = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in got if w not in allowed]
    if bad or not got:
        raise SystemExit(f"unknown {what} {', '.join(bad) or '(none)'}: choose from "
                         f"{', '.join(allowed)}")
    return got


def case_selected(case_id: str, globs: Sequence[str]) -> bool:
    """The -k rule on the case a prompt belongs to ("t17-gdn.resume-11" -> "t17-gdn")."""
    base = case_id.split(".", 1)[0]
    pos = [g for g in globs if not g.startswith("!")]
    if any(fnmatch.fnmatchcase(base, g[1:]) for g in globs if g.startswith("!")):
        return False
    return not pos or any(fnmatch.fnmatchcase(base, g) for g in pos)


def shard(files: Sequence[Tuple[str, int]], n: int) -> List[List[str]]:
    """Split (path, cost) items into n lists of nearly equal cost: largest first, each to
    the least loaded list (deterministic: ties go to the lowest index)."""
    bins: List[List[str]] = [[] for _ in range(max(1, n))]
    load = [0] * len(bins)
    for path, cost in sorted(files, key=lambda x: (-x[1], x[0])):
        i = min(range(len(bins)), key=lambda j: (load[j], j))
        bins[i].append(path)
        load[i] += cost
    return [b for b in bins if b]


# ---------------------------------------------------------------- external commands

def run_cmd(cmd: Sequence[str], log: Optional[str] = None, ok=(0,)) -> int:
    """Run a command; its output goes to `log` (appended). A status outside `ok` raises."""
    with open(log or os.devnull, "a", encoding="utf-8") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        f.flush()
        p = subprocess.run(list(cmd), stdout=f, stderr=subprocess.STDOUT)
    if p.returncode not in ok:
        raise ReportError(f"{' '.join(cmd[:3])} ... exited {p.returncode} (see {log})")
    return p.returncode


def make_prod_cases(a: argparse.Namespace, log: str) -> Dict[str, str]:
    """`kda gen` the production cases of the chosen sets into WORK/cases/SET/ (kept when
    present); returns {set: folder}."""
    dirs = {}
    for s in ("prod", "prod64k"):
        if s not in a.sets:
            continue
        d = os.path.join(a.work, "cases-tiny" if a.stand_in else "cases", s)
        os.makedirs(d, exist_ok=True)
        for cid, desc, where in PROD_CASES:
            if where != s or not case_selected(cid, a.cases):
                continue
            path = os.path.join(d, cid + ".npz")
            if not os.path.exists(path):
                words = (tiny(desc) if a.stand_in else desc).split() + [f"id={cid}"]
                run_cmd([a.kda, "gen", *words, "-o", path], log)
        if any(f.endswith(".npz") and case_selected(f[:-4], a.cases) for f in os.listdir(d)):
            dirs[s] = d
    return dirs


def set_flags(s: str) -> List[str]:
    """kda conform options of a set: serving prompts and whole-array scoring."""
    if s == "prod64k":
        return ["--serving", "off", "--stream"]
    if s == "prod":
        return ["--serving", "full", "--no-stream"]
    return ["--serving", "full"]


def export(a: argparse.Namespace, sets: Dict[str, str], log: str) -> Dict[str, str]:
    """`kda conform --export-prompts` of each set into WORK/prompts/SET (kept when its
    stamp matches the set's folder); returns {set: prompt folder}."""
    out = {}
    for s, src in sets.items():
        d = os.path.join(a.work, "prompts-tiny" if a.stand_in else "prompts", s)
        stamp = os.path.join(d, ".exported")
        want = src + "\n" + " ".join(sorted(os.listdir(src)))
        if not (os.path.exists(stamp) and open(stamp, encoding="utf-8").read() == want):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            serving = set_flags(s)[:2]
            run_cmd([a.kda, "conform", "--export-prompts", d, *serving, src], log)
            with open(stamp, "w", encoding="utf-8") as f:
                f.write(want)
        out[s] = d
    return out


# ---------------------------------------------------------------- the kernel step

def _worker(args: Tuple[str, str, bool, List[Tuple[str, str, str]], str, float]) -> Dict:
    """In a child process: build each run's kernel once, call it on its prompts.  The runs
    of one child share one environment (set before anything is imported)."""
    script, checkout, stand_in, tasks, log, deadline, env = args
    os.environ.update(dict(env))
    sys.path[:0] = [HERE, os.path.join(REPO, "python")]
    mod = _load_script(script)
    from kda_conform.run import RunReport, run_case  # noqa: PLC0415
    kernels: Dict[str, Any] = {}
    done: Dict[str, Dict[str, Any]] = {}
    with open(log, "a", encoding="utf-8") as f:
        for run_name, prompt, results in tasks:
            cid = os.path.basename(prompt)[:-4]
            if time.time() > deadline:
                f.write(f"{run_name} {cid}: not run (--timeout)\n")
                done.setdefault(run_name, {})[cid] = "not run: --timeout"
                continue
            if run_name not in kernels:
                run = next(r for r in mod.RUNS if r.name == run_name)
                t0 = time.time()
                kernels[run_name] = run.make(checkout, stand_in)
                f.write(f"{run_name}: kernel built in {time.time() - t0:.1f} s\n")
            rep = RunReport()
            t0 = time.time()
            os.makedirs(results, exist_ok=True)
            run_case(kernels[run_name], prompt, results, rep)
            why = rep.errors.get(cid) or rep.not_supported.get(cid)
            status = ("raised " + rep.errors[cid]) if cid in rep.errors else (
                "declined" if cid in rep.not_supported else "ok")
            f.write(f"{run_name} {cid}: {status} {time.time() - t0:.3f} s"
                    + (f" ({why})" if why else "") + "\n")
            f.flush()
            if cid in rep.errors:
                done.setdefault(run_name, {})[cid] = rep.errors[cid]
    return done


def _load_script(path: str):
    import importlib.util  # noqa: PLC0415
    spec = importlib.util.spec_from_file_location("kda_report_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_kernels(a: argparse.Namespace, script: str, runs: Sequence[Run],
                prompts: Dict[str, str], log_dir: str) -> Dict[str, Dict[str, str]]:
    """Every (run, prompt) not yet in WORK/results/RUN/SET, sharded over --jobs processes
    (runs with different environments in different processes); returns {run: {case: what
    it raised}}."""
    by_env: Dict[Tuple[Tuple[str, str], ...], List[Tuple[str, int]]] = {}
    tasks_of = {}
    for r in runs:
        for s, pdir in prompts.items():
            res = os.path.join(a.work, "results", r.name, s)
            for fn in sorted(os.listdir(pdir)):
                if not fn.endswith(".npz") or not case_selected(fn[:-4], a.cases):
                    continue
                if os.path.exists(os.path.join(res, fn)):
                    continue
                p = os.path.join(pdir, fn)
                key = f"{r.name}\0{p}"
                tasks_of[key] = (r.name, p, res)
                by_env.setdefault(tuple(r.env), []).append((key, os.path.getsize(p)))
    if not tasks_of:
        return {}
    deadline = time.time() + a.timeout
    jobs = []
    for env, items in by_env.items():
        for g in shard(items, a.jobs):
            jobs.append((os.path.abspath(script), a.checkout or "", a.stand_in,
                         [tasks_of[k] for k in g],
                         os.path.join(log_dir, f"kernel-{len(jobs)}.log"), deadline, env))
    ctx = mp.get_context("spawn")
    errors: Dict[str, Dict[str, str]] = {}
    with ctx.Pool(min(a.jobs, len(jobs)), maxtasksperchild=1) as pool:
        for d in pool.imap_unordered(_worker, jobs):
            for run, errs in d.items():
                errors.setdefault(run, {}).update(errs)
    return errors


# ---------------------------------------------------------------- scoring

def score_all(a: argparse.Namespace, runs: Sequence[Run], sets: Dict[str, str],
              log_dir: str) -> Dict[Tuple[str, str, str], str]:
    """`kda conform --candidate` for every (run, class, set), --jobs at a time; returns
    {(run, class, set): score folder}."""
    todo, procs, out = [], [], {}
    for r in runs:
        for c in r.classes:
            for s, src in sets.items():
                res = os.path.join(a.work, "results", r.name, s)
                d = os.path.join(a.work, "scores", f"{r.name}.{c}", s)
                out[(r.name, c, s)] = d
                if not os.path.isdir(res):
                    continue
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d)
                cmd = [a.kda, "conform", "--candidate", res, "--class", c, "--out", d,
                       "--quiet", *set_flags(s)]
                for g in a.cases:
                    cmd += ["-k", g]
                todo.append((cmd + [src], os.path.join(log_dir, f"score-{r.name}.{c}.{s}.log")))
    while todo or procs:
        while todo and len(procs) < a.jobs:
            cmd, log = todo.pop(0)
            f = open(log, "w", encoding="utf-8")
            f.write("$ " + " ".join(shlex.quote(x) for x in cmd) + "\n")
            f.flush()
            procs.append((subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT), f, cmd))
        time.sleep(0.2)
        for p in [x for x in procs if x[0].poll() is not None]:
            procs.remove(p)
            p[1].close()
            if p[0].returncode not in (0, 1, 5):
                raise ReportError(f"kda conform --candidate exited {p[0].returncode} "
                                  f"(see {p[1].name})")
    return out


# ---------------------------------------------------------------- tables

def load_results(d: str) -> List[Dict[str, Any]]:
    path = os.path.join(d, "results.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _worst(rec: Dict[str, Any], m: str) -> str:
    x = rec.get(m)
    if not isinstance(x, dict) or x.get("worst") is None:
        return "–"
    w = x["worst"]
    bad = ""
    if x.get("nan"):
        bad = f" ({x['nan']} NaN)"
    elif x.get("inf"):
        bad = f" ({x['inf']} inf)"
    return (f"{w:.3g}" if w == w and abs(w) != float("inf") else str(w)) + bad


def cell(s: str, n: int = 160) -> str:
    """A string made safe for one markdown table cell."""
    s = " ".join(str(s).split()).replace("|", "\\|")
    return s if len(s) <= n else s[:n - 1] + "…"


def tally(recs: Sequence[Dict[str, Any]]) -> Dict[str, int]:
    t = {"passed": 0, "failed": 0, "declined": 0}
    for r in recs:
        v = r.get("verdict")
        t["passed" if v in ("Pass", "QualityWarning", "Waived") else
          "declined" if v == "NotSupported" else "failed"] += 1
    return t


def worst_finding(recs: Sequence[Dict[str, Any]], errors: Dict[str, str]) -> str:
    """The failing case with the largest o error (NaN/inf first), with the runner's reason."""
    bad = [r for r in recs if r.get("verdict") not in ("Pass", "QualityWarning", "Waived",
                                                       "NotSupported")]
    if not bad:
        return "none"

    def key(r):
        o = r.get("o") or {}
        nonfinite = (o.get("nan") or 0) + (o.get("inf") or 0)
        w = o.get("worst")
        return (nonfinite > 0, w if isinstance(w, (int, float)) and w == w else 0.0)
    r = max(bad, key=key)
    why = errors.get(r["case"]) or r.get("reason") or r.get("verdict")
    return f"{r['case']}: {why}"


def write_tables(a: argparse.Namespace, runs: Sequence[Run], scores, errors, commit: str,
                 card: str) -> List[str]:
    """WORK/out/<run>.<class>.md (every case) and the summary rows; appends the rows to
    --history.  Returns the summary rows."""
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for r in runs:
        errs = errors.get(r.name, {})
        for c in r.classes:
            lines = [f"# {a.family} `{r.name}` in class {c}", "",
                     f"commit `{commit}`, card {card}, inputs {r.dtype}" +
                     (f"; {r.note}" if r.note else ""), "",
                     "| set | case | verdict | o | ht | hc | reason |",
                     "|---|---|---|---|---|---|---|"]
            for s in a.sets:
                recs = load_results(scores.get((r.name, c, s), ""))
                if not recs:
                    continue
                for rec in recs:
                    why = errs.get(rec["case"]) or rec.get("reason") or ""
                    lines.append(f"| {s} | `{rec['case']}` | {rec['verdict']} | "
                                 f"{_worst(rec, 'o')} | {_worst(rec, 'ht')} | "
                                 f"{_worst(rec, 'hc')} | {cell(why)} |")
                t = tally(recs)
                row = (f"| {a.family} `{r.name}` | `{commit[:12]}` | {card} | {r.dtype} | {c} "
                       f"| {s} | {t['passed']} | {t['failed']} | {t['declined']} | "
                       f"{cell(worst_finding(recs, errs), 200)} |")
                rows.append(row)
            with open(os.path.join(a.out, f"{r.name}.{c}.md"), "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    if a.history:
        append_history(a.history, rows)
    with open(os.path.join(a.out, "rows.md"), "w", encoding="utf-8") as f:
        f.write("\n".join([HISTORY_HEAD[0], HISTORY_HEAD[1]] + rows) + "\n")
    return rows


HISTORY_HEAD = ("| kernel | commit | card | inputs | class | set | passed | failed | declined "
                "| worst finding |",
                "|---|---|---|---|---|---|---|---|---|---|")


def append_history(path: str, rows: Sequence[str]) -> None:
    """Append rows to the markdown table in `path` (created with its header), skipping rows
    already there; atomic."""
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    lines = old.splitlines()
    if not any(l.startswith(HISTORY_HEAD[0][:20]) for l in lines):
        lines += ([""] if lines else []) + list(HISTORY_HEAD)
    have = set(lines)
    lines += [r for r in rows if r not in have]
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def pack_scores(a: argparse.Namespace) -> str:
    """WORK/scores (results.jsonl and summary.json of each score) as OUT/scores.tar.xz."""
    dst = os.path.join(a.out, "scores.tar.xz")
    src = os.path.join(a.work, "scores")
    if os.path.isdir(src):
        subprocess.run(["tar", "cJf", dst, "-C", a.work, "--exclude=junit.xml", "scores"],
                       check=True)
    return dst


# ---------------------------------------------------------------- main

def git_commit(checkout: str) -> str:
    try:
        p = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=30)
        return p.stdout.strip() if p.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def card_name(stand_in: bool) -> str:
    if stand_in:
        return "cpu (stand-in)"
    try:
        import torch  # noqa: PLC0415
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return "cpu"


def main(family: str, script: str, runs: Sequence[Run], argv=None,
         needs_checkout: bool = True, prepare: Optional[Callable] = None,
         skip: Sequence[str] = ()) -> int:
    """`skip`: case globs left out unless -k is given (production cases the kernel can only
    decline, which would cost a read of several GB each)."""
    a = parse_args(family, runs, argv, needs_checkout and "--stand-in" not in (argv or sys.argv))
    if not a.cases:
        a.cases = ["!" + g for g in skip]
    sys.path.insert(0, os.path.join(REPO, "python"))
    import kda_conform  # noqa: PLC0415
    try:
        a.kda = kda_conform.find_kda(a.kda or None)
        golden = a.golden or kda_conform.find_golden("L1", a.kda)
    except kda_conform.ScoreError as e:
        print(f"report_{family}: {e}", file=sys.stderr)
        return 2
    chosen = [r for r in runs if r.name in a.runs]
    log_dir = os.path.join(a.out, "logs")
    os.makedirs(log_dir, exist_ok=True)
    log = os.path.join(log_dir, "steps.log")
    commit = a.commit or (git_commit(a.checkout) if a.checkout else "") or (
        "stand-in" if a.stand_in else "unknown")
    card = a.card or card_name(a.stand_in)
    t0 = time.time()
    try:
        if prepare is not None and not a.stand_in:
            prepare(a, log)
        sets = {}
        if "L1" in a.sets:
            sets["L1"] = golden
        sets.update(make_prod_cases(a, log))
        prompts = export(a, sets, log)
        print(f"report_{family}: prompts ready ({time.time() - t0:.0f} s)", flush=True)
        errors = run_kernels(a, script, chosen, prompts, log_dir)
        print(f"report_{family}: kernels done ({time.time() - t0:.0f} s)", flush=True)
        scores = score_all(a, chosen, sets, log_dir)
        print(f"report_{family}: scored ({time.time() - t0:.0f} s)", flush=True)
    except ReportError as e:
        print(f"report_{family}: {e}", file=sys.stderr)
        return 2
    rows = write_tables(a, chosen, scores, errors, commit, card)
    pack_scores(a)
    print("\n".join([HISTORY_HEAD[0], HISTORY_HEAD[1]] + rows))
    return 0

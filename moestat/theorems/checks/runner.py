"""Runner of the theory checks (what ``moestat theory --quick|--full`` calls).

Runs every check module (or those named with ``--only``), prints one line per check
("name: predicted ..., measured ... [CI] -> VERDICT"), and writes ``theory_report.md`` and
``theory_report.json`` into ``--out``.

Exit status: 0 when every check passed; 1 when any check failed, was inconclusive or raised; 3
when none failed but some were skipped (``--allow-skips`` turns that into 0); 2 for bad arguments.
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path
from typing import Sequence

from moestat.io import atomic_write_json, atomic_write_text

from moestat.theorems.checks import (exact_weak, expert_split, lecam, null_control, over_strong, pde, prop1, regression_rate,
                                        softmoe_witness, vanilla_slow)
from moestat.theorems.checks.framework import CheckResult, Context, run_guarded

__all__ = ["MODULES", "CHECK_NAMES", "run_checks", "write_report", "exit_code", "merge_reports"]

#: Check modules in run order (cheap, engine-free checks first).
MODULES = [pde, lecam, expert_split, prop1, softmoe_witness, regression_rate, exact_weak, vanilla_slow, over_strong, null_control]
CHECK_NAMES = [n for m in MODULES for n in m.NAMES]
REPORT_SCHEMA = "moestat.theory_report/1"


def run_checks(mode: str = "quick", out_dir: str | Path = "moestat-out/theory", only: Sequence[str] | None = None, seed: int = 0,
               n_jobs: int = 1, verbose: bool = True, reps: int | None = None, n_max: int | None = None,
               resume: bool = False) -> list[CheckResult]:
    """Run the checks and return their results (nothing is written but the rate runs' files).

    Parameters
    ----------
    mode : {"quick", "full"}
    out_dir : path
        Folder for the rate runs (``<out_dir>/rates/<key>/``).
    only : sequence of str, optional
        Check names or module names to run (default: all).
    seed : int
        Root seed.
    n_jobs : int
        Parallel work units of the rates engine.
    verbose : bool
        Print one line per check as it finishes.
    reps, n_max : int, optional
        Override the mode's replicate count and largest sample size (e.g. to fit a time budget).
    resume : bool
        Reuse finished rate fits in ``out_dir`` (see :class:`~moestat.theorems.checks.framework.Context`).
    """
    log = (lambda s: print(s, flush=True)) if verbose else (lambda s: None)
    ctx = Context(mode, Path(out_dir), seed=seed, n_jobs=n_jobs, log=log, reps=reps, n_max=n_max,
                  resume=resume)
    wanted = None if not only else set(only)
    if wanted is not None:
        known = set(CHECK_NAMES) | {m.__name__.rsplit(".", 1)[-1] for m in MODULES}
        bad = sorted(wanted - known)
        if bad:
            raise ValueError(f"unknown check(s) {', '.join(bad)}; known: {', '.join(CHECK_NAMES)}")
    results: list[CheckResult] = []
    for mod in MODULES:
        short = mod.__name__.rsplit(".", 1)[-1]
        if wanted is not None and short not in wanted and not (set(mod.NAMES) & wanted):
            continue
        t0 = time.perf_counter()
        res = run_guarded(mod.run, ctx, mod.NAMES)
        dt = time.perf_counter() - t0
        for r in res:
            r.elapsed_s = round(dt / max(len(res), 1), 3)
            if wanted is not None and short not in wanted and r.name not in wanted:
                continue
            results.append(r)
            log(r.line() + (f"  ({r.note})" if r.note and r.status != "passed" else ""))
    return results


def exit_code(results: Sequence[CheckResult], allow_skips: bool = False) -> int:
    """0 all passed; 1 any failure, near, inconclusive or error; 3 skips only (0 with ``allow_skips``)."""
    if any(r.status in ("failed", "near", "inconclusive", "error") for r in results):
        return 1
    if any(r.status == "skipped" for r in results):
        return 0 if allow_skips else 3
    return 0


def totals_line(results: Sequence[CheckResult]) -> str:
    """``"3 passed, 1 failed, 0 near, 0 inconclusive, 0 skipped, 0 errors (4 checks)"``."""
    c = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "near", "inconclusive", "skipped", "error")}
    return (f"{c['passed']} passed, {c['failed']} failed, {c['near']} near, {c['inconclusive']} inconclusive, {c['skipped']} skipped, "
            f"{c['error']} error{'s' if c['error'] != 1 else ''} ({len(results)} checks)")


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    v = float(v)
    return "n/a" if not math.isfinite(v) else f"{v:.3g}"


def write_report(results: Sequence[CheckResult], out_dir: str | Path, mode: str, command: str, elapsed_s: float) -> tuple[Path, Path]:
    """Write ``theory_report.json`` and ``theory_report.md`` into ``out_dir`` (atomically)."""
    out = Path(out_dir)
    meta = {
        "schema": REPORT_SCHEMA,
        "mode": mode,
        "command": command,
        "elapsed_s": round(elapsed_s, 1),
        "python": platform.python_version(),
        "note": "rate checks use moestat.rates (LSE, near-truth start with constant noise 0.05); see docs/guide/theory.rst",
        "n_passed": sum(r.status == "passed" for r in results),
        "n_failed": sum(r.status in ("failed", "error") for r in results),
        "n_near": sum(r.status == "near" for r in results),
        "n_inconclusive": sum(r.status == "inconclusive" for r in results),
        "n_skipped": sum(r.status == "skipped" for r in results),
    }
    jpath = out / "theory_report.json"
    atomic_write_json(jpath, {**meta, "checks": [r.to_dict() for r in results]})
    lines = [
        f"# Theory checks ({mode})", "",
        f"Command: `{command}`  ", f"Elapsed: {meta['elapsed_s']} s; passed {meta['n_passed']}, failed {meta['n_failed']}, "
        f"near {meta['n_near']}, inconclusive {meta['n_inconclusive']}, skipped {meta['n_skipped']}.", "",
        "| check | predicted | sided | measured | 95% CI | verdict |", "|---|---|---|---|---|---|",
    ]
    for r in results:
        ci = "" if r.ci_low is None and r.ci_high is None else f"[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]"
        lines.append(f"| {r.name} | {_fmt(r.predicted)} | {r.sided or '-'} | {_fmt(r.measured)} | {ci} | {r.status} |")
    lines += ["", "## Details", ""]
    for r in results:
        lines.append(f"### {r.name}: {r.status}")
        if r.claim:
            lines.append(f"- claim: {r.claim}")
        if r.rule:
            lines.append(f"- rule: {r.rule}")
        if r.category:
            lines.append(f"- category: {r.category}: {r.reason}")
        if r.note:
            lines.append(f"- note: {r.note}")
        for k, v in r.details.items():
            if k == "traceback":
                continue
            lines.append(f"- {k}: `{json.dumps(v, default=str)[:600]}`")
        lines.append("")
    mpath = out / "theory_report.md"
    atomic_write_text(mpath, "\n".join(lines))
    return mpath, jpath


def merge_reports(folders: Sequence[str | Path], order: Sequence[str] | None = None,
                  mode: str = "full") -> tuple[list[CheckResult], list[str], float]:
    """One report from several ``moestat theory`` runs that each ran part of the checks (``--only``).

    A paper-scale (``--full``) run of every check takes CPU-hours on a small machine, so it is run
    module by module; this gathers their ``theory_report.json`` into one, running nothing: each check
    keeps the verdict, numbers and details of the run that made it, and its ``note`` names that
    folder and command.

    Parameters
    ----------
    folders : sequence of path-like
        Folders each holding a ``theory_report.json`` of mode ``mode``.
    order : sequence of str, optional
        The checks every report together must hold, in the merged report's order (default:
        :data:`CHECK_NAMES`); checks outside it follow, sorted.
    mode : str
        The mode every report must have been run in.

    Returns
    -------
    tuple
        ``(results, commands, elapsed_s)``: the checks, each folder's command, the summed time.

    Raises
    ------
    ValueError
        A folder without a report, a report of another mode, a check held by two reports, or a check
        of ``order`` held by none -- a merged report never drops or doubles a check silently.
    """
    order = list(CHECK_NAMES if order is None else order)
    found: dict[str, CheckResult] = {}
    commands, elapsed = [], 0.0
    for folder in map(Path, folders):
        path = folder / "theory_report.json"
        if not path.is_file():
            raise ValueError(f"{folder}: no theory_report.json")
        rep = json.loads(path.read_text(encoding="utf-8"))
        if rep.get("mode") != mode:
            raise ValueError(f"{folder}: not a --{mode} report (mode {rep.get('mode')!r})")
        commands.append(rep["command"])
        elapsed += float(rep["elapsed_s"])
        for c in rep["checks"]:
            if c["name"] in found:
                raise ValueError(f"check {c['name']} recorded twice (second in {folder.name})")
            r = CheckResult(**c)
            src = f"recorded in {folder.name}/ by `{rep['command']}`"
            r.note = f"{r.note}; {src}" if r.note else src
            found[c["name"]] = r
    missing = [n for n in order if n not in found]
    if missing:
        raise ValueError(f"no report holds: {', '.join(missing)}")
    extra = sorted(set(found) - set(order))
    return [found[n] for n in order + extra], commands, elapsed

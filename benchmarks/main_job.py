"""The main job (``python -m moestat.rates --router perturbed``), this checkout against a baseline, interleaved.

Why (issue 36): the target is the main job on 2 quiet CPU cores in <= 10 s wall.  This script
times the whole command -- imports, the sweep's processes, the rate fits and the figures -- as a
user runs it, from a copy of a baseline commit's ``moestat/`` (``git archive``) and from this
checkout, alternating (``before, after, before, after, ...``) so that both see the same load.
Each run is measured from outside: wall seconds, user and system CPU-seconds of the whole process
tree (``RUSAGE_CHILDREN`` before and after, as ``/usr/bin/time`` counts), the seconds at which the
last work unit was written (the sweep's end: the line ``moestat rates: 140/140 fits, ...``) and
when each unit was (``units_done``, ``[seconds, n]``: how the processes shared the units), and the
load average before and after.  Every run's ``results.csv`` is compared with the first
baseline run's (every column but ``time``: the largest relative difference, 0.0 when identical),
and its PNG figures byte by byte.  Reported: medians per version, the after/before ratios of the
medians, the machine, its cores and the thread settings.

On a shared machine the wall time mostly says how loaded it was; compare only runs of the same
call, and say the load average.

Usage::

    python benchmarks/main_job.py --json /tmp/main_job.json
    python benchmarks/main_job.py --baseline-dir /path/to/other/checkout --repeat 5
    python benchmarks/main_job.py --variant patched=/tmp/patched-checkout   # a third version, same rounds
    python benchmarks/main_job.py --variant-env nofork=MOESTAT_SWEEP_FORK=0  # this checkout on loky workers
    python benchmarks/main_job.py -- --n-jobs 1                             # arguments for moestat.rates
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: main before the CPU work of issue 36 on the least-squares path (the baseline of docs/guide/performance.rst)
BASELINE_REF = "42552e1"
#: the progress line of the last work unit (off a terminal, one line per unit; moestat.rates.sweep)
UNIT_LINE = "moestat rates: "


def _children_cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime, r.ru_stime


def run_once(source: Path, out: Path, extra: list[str], env_extra: dict[str, str] | None = None) -> dict:
    """The main job from the package in ``source`` into ``out``; its costs (``source`` is the
    working directory and ``PYTHONPATH``, so ``python -m`` imports that package; ``env_extra``:
    further environment variables of the run)."""
    env = dict(os.environ, PYTHONPATH=str(source), **(env_extra or {}))
    cmd = [sys.executable, "-m", "moestat.rates", "--router", "perturbed", "--out", str(out), *extra]
    load0 = os.getloadavg()[0]
    u0, s0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=str(source), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sweep_end, units, tail = None, [], []
    for line in proc.stderr:  # off a terminal: one line per finished unit, then the summary
        if line.startswith(UNIT_LINE) and " fits, " in line:
            sweep_end = time.perf_counter() - t0
            m = re.search(r" n=(\d+) ", line)
            units.append([round(sweep_end, 2), int(m.group(1)) if m else None])
        tail = (tail + [line])[-5:]
    proc.wait()
    wall = time.perf_counter() - t0
    u1, s1 = _children_cpu()
    return {"wall_s": wall, "sweep_end_s": sweep_end, "units_done": units, "user_s": u1 - u0, "sys_s": s1 - s0,
            "cpu_s": (u1 - u0) + (s1 - s0), "load_before": load0, "load_after": os.getloadavg()[0],
            "returncode": proc.returncode, "stderr_tail": "".join(tail)[-400:]}


def max_rel_diff(a: Path, b: Path) -> float:
    """Largest relative difference over every column but ``time``/``crc32`` of two ``results.csv``
    (``inf`` for a differing text column, row count or NaN pattern)."""
    import numpy as np
    import pandas as pd

    key = ["router", "n", "replicate"]
    x, y = (pd.read_csv(p).sort_values(key).reset_index(drop=True) for p in (a, b))
    if len(x) != len(y) or list(x.columns) != list(y.columns):
        return float("inf")
    worst = 0.0
    for c in x.columns:
        if c in ("time", "crc32"):
            continue
        if not pd.api.types.is_numeric_dtype(x[c]):
            if not (x[c].astype(str) == y[c].astype(str)).all():
                return float("inf")
            continue
        u, v = x[c].to_numpy(float), y[c].to_numpy(float)
        if not (np.isnan(u) == np.isnan(v)).all():
            return float("inf")
        m = ~np.isnan(u) & (u != v)
        if m.any():
            worst = max(worst, float(np.max(np.abs(u[m] - v[m]) / np.maximum(np.abs(v[m]), 1e-300))))
    return worst


def same_figures(a: Path, b: Path) -> bool | None:
    """Whether every PNG of run ``a`` equals run ``b``'s byte for byte (``None``: no PNG)."""
    pngs = sorted(p.name for p in a.glob("*.png"))
    if not pngs:
        return None
    return all((b / name).exists() and (a / name).read_bytes() == (b / name).read_bytes() for name in pngs)


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-ref", default=BASELINE_REF, help=f"git commit of the baseline (default {BASELINE_REF})")
    ap.add_argument("--baseline-dir", type=Path, default=None,
                    help="an existing checkout to time as the baseline instead of --baseline-ref")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=DIR",
                    help="a further checkout timed in the same rounds (repeatable)")
    ap.add_argument("--variant-env", action="append", default=[], metavar="NAME=VAR=VALUE",
                    help="this checkout run with the environment variable VAR=VALUE, timed in the same rounds "
                         "(repeatable), e.g. nofork=MOESTAT_SWEEP_FORK=0 for the loky workers")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each version (default 5)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="main-job-"))
    if args.baseline_dir is not None:
        base, base_name = args.baseline_dir.resolve(), str(args.baseline_dir)
    else:
        base, base_name = work / "baseline", args.baseline_ref
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline_ref, "moestat"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    sources = {"before": base, "after": ROOT}
    envs: dict[str, dict[str, str]] = {}
    for v in args.variant:
        name, _, path = v.partition("=")
        sources[name] = Path(path).resolve()
    for v in args.variant_env:
        name, _, assignment = v.partition("=")
        var, _, value = assignment.partition("=")
        sources[name], envs[name] = ROOT, {var: value}
    runs: dict[str, list[dict]] = {v: [] for v in sources}
    first = None
    for r in range(args.repeat):
        for version, source in sources.items():
            out = work / f"out-{version}-{r}"
            res = run_once(source, out, extra, envs.get(version))
            csv = out / "results.csv"
            first = first or out
            res["max_rel_diff_vs_first"] = max_rel_diff(csv, first / "results.csv") if csv.exists() else None
            res["figures_identical_to_first"] = same_figures(out, first)
            runs[version].append(res)
            print(f"{version:8s} run {r}: {res['wall_s']:.2f} s wall (sweep ends {res['sweep_end_s'] or float('nan'):.2f} s), "
                  f"{res['cpu_s']:.1f} CPU-s ({res['user_s']:.1f} user, {res['sys_s']:.1f} sys), load "
                  f"{res['load_before']:.2f}->{res['load_after']:.2f}, rows max rel diff {res['max_rel_diff_vs_first']}, "
                  f"figures identical {res['figures_identical_to_first']}", flush=True)
    keys = ("wall_s", "sweep_end_s", "cpu_s", "user_s", "sys_s")
    med = {v: {k: statistics.median(x[k] for x in rs if x[k] is not None) for k in keys} for v, rs in runs.items()}
    ratios = {v: {k: med[v][k] / med["before"][k] for k in keys if med["before"][k]} for v in sources if v != "before"}
    import torch

    report = {
        "command": "python -m moestat.rates --router perturbed " + " ".join(extra),
        "baseline": base_name,
        "variant_env": envs,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cores_affinity": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "threads": {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "unset"),
                    "torch_per_unit": 1, "n_jobs": "the command's (default: one process per usable core)"},
        "repeat": args.repeat,
        "median": med,
        "over_before": ratios,
        "max_rel_diff_vs_first": max((x["max_rel_diff_vs_first"] or 0.0) for rs in runs.values() for x in rs),
        "figures_identical": all(x["figures_identical_to_first"] is not False for rs in runs.values() for x in rs),
        "runs": runs,
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("median", "over_before", "max_rel_diff_vs_first", "figures_identical")},
                     indent=1))
    return report


if __name__ == "__main__":
    main()

"""A Gaussian-MoE maximum-likelihood sweep on a cold and a warm compile cache: CPU-seconds and processes.

Why (issue 36): ``moestat rates --preset gmoe_exact`` with ``--n-jobs 16`` on a fresh 16-core
machine wrote no row in 92 s, and on 2 cores it spent 68 of its 183 CPU-s in the kernel.  Every
sweep worker compiles the fused EM pass (``compile="auto"``), on a cold Inductor cache from
scratch and all at the same time, and each one starts Inductor's own pool of ``cpu_count`` compile
processes.  The fix (``moestat.estimators.em_driver.compile_lock``: the first compilation in a
cache folder holds a lock, the others then load the cached code; ``moestat.rates.backends``:
no compile-process pool in sweep workers) is measured here against a baseline commit, in the same
run, on the same machine.

What runs: the ``gmoe_exact`` design scaled to a few minutes (``--n-points`` sizes from 100 to
``--n-max``, ``--reps`` replicates x 5 starts, chunk 10; ``--figure-formats none``) with
``--n-jobs`` workers, once from a copy of the baseline commit's ``moestat/`` (``git archive``) and
once from this checkout, each on a fresh cache folder ("cold") and then again on the same folder
("warm"); ``--repeat`` such rounds, interleaved.  Each run is measured from outside: user and
system CPU-seconds of the whole process tree (``RUSAGE_CHILDREN`` before and after: the
command and every process it and its children waited for, as ``/usr/bin/time`` counts), wall seconds, the largest number of processes in its
session (sampled every 0.2 s), and the rows written.  Reported: medians per condition, the
after/before ratios of the medians, the largest relative difference between the results of
every run and the first baseline run (every numeric column but ``time``), the machine, its
cores, its load average before and after, and the thread settings.

On a shared machine the wall time mostly says how loaded it was; CPU-seconds, and their user /
system split, say what the sweep itself cost.

Usage::

    python benchmarks/sweep_compile.py --json benchmarks/sweep_compile.json
    python benchmarks/sweep_compile.py --n-jobs 8 --repeat 1 --json /tmp/sc8.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the commit before issue 36's compile fix (the baseline of the measurements in the docs)
BASELINE_REF = "f07496c"


def _count_session(sid: int) -> int:
    import psutil

    n = 0
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.info["pid"]) == sid:
                n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n


def run_once(source: Path, cache: Path, out: Path, args) -> dict:
    """One sweep from the package in ``source`` with Inductor's cache in ``cache``; its costs."""
    env = dict(os.environ, PYTHONPATH=str(source), TORCHINDUCTOR_CACHE_DIR=str(cache), OMP_NUM_THREADS="1")
    env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)  # the package's own choice in both
    cmd = [sys.executable, "-m", "moestat", "rates", "--preset", "gmoe_exact", "--n-points", str(args.n_points),
           "--n-max", str(args.n_max), "--reps", str(args.reps), "--n-jobs", str(args.n_jobs), "--out", str(out),
           "--figure-formats", "none", "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=str(source), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _count_session(proc.pid))
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    return {"wall_s": wall, "peak_processes": peak, "returncode": proc.returncode, "stderr_tail": err[-400:]}


def _children_cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime, r.ru_stime


def measured(source: Path, cache: Path, out: Path, args) -> dict:
    u0, s0 = _children_cpu()
    res = run_once(source, cache, out, args)
    u1, s1 = _children_cpu()
    res.update(user_s=u1 - u0, sys_s=s1 - s0, cpu_s=(u1 - u0) + (s1 - s0))
    csv = out / "results.csv"
    res["rows"] = max(0, len(csv.read_text().splitlines()) - 1) if csv.exists() else 0
    return res


def max_rel_diff(a: Path, b: Path) -> float:
    """Largest relative difference over the numeric columns but ``time`` of two ``results.csv``."""
    import numpy as np
    import pandas as pd

    key = ["scenario", "n", "replicate"]
    x, y = (pd.read_csv(p).sort_values(key).reset_index(drop=True) for p in (a, b))
    if len(x) != len(y):
        return float("inf")
    worst = 0.0
    for c in x.columns:
        if c in ("time", "crc32") or not pd.api.types.is_numeric_dtype(x[c]):
            if c not in ("time", "crc32") and not (x[c].astype(str) == y[c].astype(str)).all():
                return float("inf")
            continue
        u, v = x[c].to_numpy(float), y[c].to_numpy(float)
        if not (np.isnan(u) == np.isnan(v)).all():
            return float("inf")
        m = ~np.isnan(u)
        if m.any():
            worst = max(worst, float(np.max(np.abs(u[m] - v[m]) / np.maximum(np.abs(v[m]), 1e-300))))
    return worst


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-ref", default=BASELINE_REF, help="git commit of the baseline (default: before the fix)")
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--n-points", type=int, default=4)
    ap.add_argument("--n-max", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    work = Path(tempfile.mkdtemp(prefix="sweep-compile-"))
    base = work / "baseline"
    base.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline_ref, "moestat"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    sources = {"before": base, "after": ROOT}
    load0 = os.getloadavg()
    runs: dict[str, list[dict]] = {f"{v}_{c}": [] for v in sources for c in ("cold", "warm")}
    first = None
    for r in range(args.repeat):
        for version, source in sources.items():
            cache = work / f"cache-{version}-{r}"
            for cond in ("cold", "warm"):  # warm: the same cache folder, filled by the cold run
                out = work / f"out-{version}-{cond}-{r}"
                res = measured(source, cache, out, args)
                first = first or out / "results.csv"
                res["max_rel_diff_vs_first"] = max_rel_diff(out / "results.csv", first) if res["rows"] else None
                runs[f"{version}_{cond}"].append(res)
                print(f"{version:6s} {cond:4s} rep {r}: {res['cpu_s']:.1f} CPU-s ({res['user_s']:.1f} user, "
                      f"{res['sys_s']:.1f} sys), {res['wall_s']:.1f} s wall, {res['peak_processes']} processes, "
                      f"{res['rows']} rows", flush=True)
    load1 = os.getloadavg()
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("cpu_s", "user_s", "sys_s", "wall_s", "peak_processes")}
           for k, v in runs.items()}
    ratios = {c: {m: med[f"after_{c}"][m] / med[f"before_{c}"][m] for m in ("cpu_s", "user_s", "sys_s", "wall_s")
                  if med[f"before_{c}"][m] > 0} for c in ("cold", "warm")}
    report = {
        "design": {"preset": "gmoe_exact", "n_points": args.n_points, "n_min": 100, "n_max": args.n_max,
                   "reps": args.reps, "starts": 5, "chunk": 10, "n_jobs": args.n_jobs, "figure_formats": "none"},
        "baseline_ref": args.baseline_ref,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cores_affinity": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "loadavg_start": load0, "loadavg_end": load1},
        "threads": {"OMP_NUM_THREADS": "1", "torch_per_unit": 1, "n_jobs": args.n_jobs,
                    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE (moestat's default)")},
        "repeat": args.repeat,
        "median": med,
        "after_over_before": ratios,
        "max_rel_diff_vs_first": max((x["max_rel_diff_vs_first"] or 0.0) for v in runs.values() for x in v),
        "runs": runs,
    }
    text = json.dumps(report, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(json.dumps({"median": med, "after_over_before": ratios, "max_rel_diff": report["max_rel_diff_vs_first"]},
                     indent=1))
    return report


if __name__ == "__main__":
    main()

"""Peak resident memory of the maximum-likelihood fits of a sigmoid-gated Gaussian MoE against n.

Design (``benchmarks/sigmoid_gmoe_d2.toml``): d = 2, k* = k = 2, linear experts, one variance per
atom, ``y`` drawn from the mixture, ``--estimator mle`` (the generic EM).  Two measurements, each
in a fresh interpreter whose peak resident set is read by the parent from
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` (the largest of the processes it waited for):

* ``unit``: one work unit of the sweep (:func:`moestat.rates.sweep.run_unit`: the draw, the fit,
  the truth check and its answers, the losses) at each ``--n`` with ``--reps`` replicates, under
  ``--max-memory`` (``"1T"``: no chunking, the former behaviour);
* ``sweep``: ``python -m moestat rates --scenario ... --n-min 8000 --n-max 128000 --n-points 5
  --reps 20 --n-jobs 1 --quiet`` (``--sweep``), whose peak is the largest of its processes.

``--compare-rows`` also checks, per ``unit`` measurement, that the rows (every column but
``time``) equal those of the same unit without chunking, where both were run.

Usage::

    python benchmarks/mle_peak_memory.py --n 8000,32000,128000 --reps 20 --max-memory auto,1T \\
        --json benchmarks/results/mle_peak_memory.json
    python benchmarks/mle_peak_memory.py --n 1000000 --reps 2 --max-memory auto --json ...
    python benchmarks/mle_peak_memory.py --sweep --max-memory auto --json ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DESIGN = HERE / "sigmoid_gmoe_d2.toml"

_UNIT = r"""
import hashlib, json, math, sys, time
import moestat
from moestat.rates.config import RatesConfig
from moestat.rates.sweep import make_units, run_unit
from moestat.threads import keep_freed_memory
keep_freed_memory()  # as a sweep's worker process does (moestat.rates.backends)
n, reps, budget, design = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
cfg = RatesConfig.from_dict({"scenario_file": design, "estimator": "mle", "n_min": n, "n_max": 4 * n, "n_points": 3,
                             "reps": reps, "max_memory": budget})
unit = [u for u in make_units(cfg.resolve()) if u.n == n][0]
t0 = time.perf_counter()
rows = run_unit(unit)
wall = time.perf_counter() - t0
def clean(v):
    return None if isinstance(v, float) and math.isnan(v) else v
body = json.dumps([{k: clean(v) for k, v in r.items() if k != "time"} for r in rows], sort_keys=True, default=str)
print(json.dumps({"wall_s": wall, "rows_sha256": hashlib.sha256(body.encode()).hexdigest()[:16],
                  "statuses": sorted({r["status"] for r in rows})}))
"""


def _peak_mb_of(cmd: list[str], env: dict) -> tuple[float, str, float]:
    """Run ``cmd`` in a fresh process (a fresh Python parent too, so that RUSAGE_CHILDREN is its own)."""
    probe = ("import resource, subprocess, sys, json, time; t0 = time.perf_counter(); "
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(json.dumps({'rc': p.returncode, 'out': p.stdout[-4000:], 'err': p.stderr[-2000:], "
             "'wall': time.perf_counter() - t0, "
             "'maxrss_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, env=env, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if res["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res['err']}")
    return res["maxrss_kb"] / 1024.0, res["out"], res["wall"]


def measure_unit(n: int, reps: int, budget: str, env: dict) -> dict:
    peak, out, wall = _peak_mb_of([sys.executable, "-c", _UNIT, str(n), str(reps), budget, str(DESIGN)], env)
    res = json.loads(out.strip().splitlines()[-1])
    return {"kind": "unit", "n": n, "reps": reps, "max_memory": budget, "peak_rss_mb": peak, "process_wall_s": wall,
            "fit_wall_s": res["wall_s"], "rows_sha256": res["rows_sha256"], "statuses": res["statuses"],
            "load_1min_after": os.getloadavg()[0]}


def measure_sweep(budget: str, env: dict, reps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="moestat-mem-") as tmp:
        cmd = [sys.executable, "-m", "moestat", "rates", "--scenario", str(DESIGN), "--estimator", "mle", "--n-min", "8000",
               "--n-max", "128000", "--n-points", "5", "--reps", str(reps), "--n-jobs", "1", "--quiet",
               "--figure-formats", "none", "--out", str(Path(tmp) / "out")]
        if budget != "auto":
            cmd += ["--max-memory", budget]
        peak, _, wall = _peak_mb_of(cmd, env)
        body = (Path(tmp) / "out" / "results.csv").read_text().splitlines()
        # every column but time (hashed as the rows would be compared)
        header = body[0].split(",")
        keep = [i for i, h in enumerate(header) if h != "time"]
        rows = "\n".join(",".join(c for i, c in enumerate(line.split(",")) if i in keep) for line in body)
    return {"kind": "sweep", "ns": "8000..128000 (5 sizes)", "reps": reps, "max_memory": budget, "peak_rss_mb": peak,
            "process_wall_s": wall, "rows_sha256": hashlib.sha256(rows.encode()).hexdigest()[:16],
            "load_1min_after": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/mle_peak_memory.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", default="8000,32000,128000", help="comma list of sample sizes (unit measurements)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--max-memory", default="auto", help="comma list of budgets (auto, 1T for no chunking, 1.5G, ...)")
    p.add_argument("--sweep", action="store_true", help="measure the whole 5-size sweep instead of single units")
    p.add_argument("--json", default=None, help="append the measurements to this JSON file (created if missing)")
    args = p.parse_args(argv)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    budgets = [b for b in args.max_memory.split(",") if b]
    results = []
    if args.sweep:
        for b in budgets:
            results.append(measure_sweep(b, env, args.reps))
            print(json.dumps(results[-1]), flush=True)
    else:
        for n in [int(v) for v in args.n.split(",") if v]:
            for b in budgets:
                results.append(measure_unit(n, args.reps, b, env))
                print(json.dumps(results[-1]), flush=True)
    if args.json:
        path = Path(args.json)
        old = json.loads(path.read_text()) if path.exists() else {"design": str(DESIGN.relative_to(HERE.parent)),
                                                                   "measurements": []}
        for r in results:
            r.update(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), machine=platform.machine(),
                     cores=len(os.sched_getaffinity(0)), python=platform.python_version())
        old["measurements"].extend(results)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(old, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Wall time and peak memory of a rate sweep reaching n = 1 000 000 (issue 16, "Scale").

Runs ``python -m moestat.rates`` as a child process under ``/usr/bin/time -v`` (peak resident
memory of the whole process tree's largest process: ``Maximum resident set size``) and records
the wall time, the peak memory, the fit counts (converged / not) and the slope table's
categories.  The sweep (defaults): the default scenario (exact-specified, perturbed cosine
router, d = 4, k* = 3, GELU experts), ``n`` = 15 625 ... 1 000 000 (7 sizes, doubling), 20
replicates, ``--chunk 5`` (four work units per ``n``: each holds 5 replicates, so one unit's
``(X, Y)``, features and Jacobian chunks stay a few hundred MB), one worker.

Usage::

    python benchmarks/rates_scale.py --json docs/_static/bench/rates_scale.json
    python benchmarks/rates_scale.py --setting over --router perturbed --max-iter 1000 --json over_1e6.json
    python benchmarks/rates_scale.py --n-jobs 2 --json scale_2jobs.json

Everything after ``--`` is passed on to ``moestat rates`` unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--setting", default="exact", help="exact (default) or over")
    p.add_argument("--router", default="perturbed", help="router(s), comma list; default perturbed")
    p.add_argument("--n-min", type=int, default=15625, help="smallest n; default 15625")
    p.add_argument("--n-max", type=int, default=1_000_000, help="largest n; default 1000000")
    p.add_argument("--n-points", type=int, default=7, help="sample sizes; default 7")
    p.add_argument("--reps", type=int, default=20, help="replicates per n; default 20")
    p.add_argument("--chunk", type=int, default=5, help="replicates per work unit; default 5")
    p.add_argument("--max-iter", type=int, default=200, help="LM budget; default 200")
    p.add_argument("--n-jobs", type=int, default=1, help="workers; default 1")
    p.add_argument("--out", default=None, help="sweep folder (default: a temporary one, removed)")
    p.add_argument("--json", default=None, help="write the record here")
    args, rest = p.parse_known_args(argv)
    rest = [a for a in rest if a != "--"]
    tmp = None
    out = args.out
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="moestat-scale-")
        out = str(Path(tmp.name) / "sweep")
    cmd = [sys.executable, "-m", "moestat.rates", "--setting", args.setting, "--router", args.router,
           "--n-min", str(args.n_min), "--n-max", str(args.n_max), "--n-points", str(args.n_points),
           "--reps", str(args.reps), "--chunk", str(args.chunk), "--max-iter", str(args.max_iter),
           "--n-jobs", str(args.n_jobs), "--quiet", "--out", out, *rest]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        return proc.returncode
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    summary = json.loads((Path(out) / "summary.json").read_text())
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    rec = {
        "benchmark": "rates_scale",
        "command": " ".join(cmd[1:]),
        "wall_s": round(wall, 1),
        "peak_rss_gb": round(int(m.group(1)) / 1024**2, 3) if m else None,
        "counts": {k: v for k, v in summary["counts"].items() if k != "by_router"},
        "fits": [{k: f.get(k) for k in ("router", "loss", "slope", "ci_low", "ci_high", "predicted", "category", "reason")}
                 for f in summary["fits"]],
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "loadavg_at_end": load,
                    "python": platform.python_version()},
    }
    print(json.dumps({k: rec[k] for k in ("command", "wall_s", "peak_rss_gb", "counts")}, indent=1))
    for f in rec["fits"]:
        print(f"{f['router']:<10} {f['loss']:<18} {f['slope'] if f['slope'] is None else round(f['slope'], 3)!s:>7} "
              f"{f['category'] or '-':<15} {f['reason']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rec, indent=1) + "\n")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The batched least-squares fit quiet and beside one busy process, alternated (A B A B).

Why: ``benchmarks/lse_batched_vs_scipy.py`` imported torch before moestat, so the OpenMP runtime
had read its wait policy (spinning, the runtime's default) before moestat could set
``OMP_WAIT_POLICY=PASSIVE`` (:mod:`moestat.threads`), and its 2-thread fit took 3.4 times its quiet
time beside one busy process.  This script measures that ratio for the benchmark as it is now
(``as-is``: moestat first) and, in the same rounds, for the former import order (``torch-first``:
torch imported before the script runs), so that the two are compared on the same machine at the
same time.

Each run is a fresh interpreter running ``lse_batched_vs_scipy.py --batched-only`` (one warm-up
fit, then the median of ``--repeat`` timed fits on ``--threads``); "busy" = one extra ``while
True: pass`` process for the whole run.  A round runs every variant quiet and busy, in the order
quiet, busy, quiet, busy ... so that a drift of the machine's load (other users) falls on both
conditions alike; the figure is the median over ``--rounds`` rounds of each condition, the ratio
busy / quiet of those medians, and the median of the per-round ratios.  The load average
(``os.getloadavg``, what ``uptime`` prints) is recorded before every run.  The fitted parameters'
digest of every run is recorded: the wait policy must not change the arithmetic.

Usage::

    python benchmarks/busy_ab.py --rounds 6 --json docs/_static/bench/lse_busy_ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "lse_batched_vs_scipy.py"
_BURN = "while True:\n    pass\n"
#: the former import order: torch (hence its OpenMP runtime) loaded before the script imports moestat
_TORCH_FIRST = "import sys, runpy, torch; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
VARIANTS = {"as-is": [], "torch-first": ["-c", _TORCH_FIRST]}


def _env() -> dict:
    # the package's default policy decides, not the caller's shell
    env = dict(os.environ)
    for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "MOESTAT_WAIT_POLICY"):
        env.pop(v, None)
    return env


def run_once(variant: str, busy: bool, threads: int, repeat: int, n: int, reps: int) -> dict:
    """One fresh interpreter of ``variant``, quiet or beside one spinning process."""
    burner = subprocess.Popen([sys.executable, "-c", _BURN]) if busy else None
    try:
        if burner is not None:
            time.sleep(0.5)  # the burner is running before the worker starts
        load = os.getloadavg()[0]
        cmd = [sys.executable, *VARIANTS[variant], str(SCRIPT), "--batched-only", "--threads", str(threads),
               "--repeat", str(repeat), "--n", str(n), "--reps", str(reps)]
        out = subprocess.run(cmd, capture_output=True, text=True, env=_env(), check=True, timeout=3600)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return {"variant": variant, "busy": busy, "load_1min_before": load, "median_s": res["median_s"],
            "min_s": res["min_s"], "times_s": res["times_s"], "digest": res["digest"]}


def summarise(runs: list[dict]) -> dict:
    """Medians per (variant, condition), busy/quiet ratios, and the digests seen."""
    out = {}
    for v in sorted({r["variant"] for r in runs}):
        q = [r["median_s"] for r in runs if r["variant"] == v and not r["busy"]]
        b = [r["median_s"] for r in runs if r["variant"] == v and r["busy"]]
        paired = [bb / qq for qq, bb in zip(q, b)]
        out[v] = {"quiet_median_s": statistics.median(q), "busy_median_s": statistics.median(b),
                  "busy_over_quiet": statistics.median(b) / statistics.median(q),
                  "median_of_round_ratios": statistics.median(paired), "rounds": len(paired),
                  "digests": sorted({r["digest"] for r in runs if r["variant"] == v})}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/busy_ab.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--repeat", type=int, default=7, help="timed fits per run (their median is the run's figure)")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the fit (default 2: the benchmark's default)")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--variants", default="as-is,torch-first", help="comma list of " + ", ".join(VARIANTS))
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    runs = []
    for rnd in range(args.rounds):
        for v in variants:
            for busy in (False, True):
                r = run_once(v, busy, args.threads, args.repeat, args.n, args.reps)
                r["round"] = rnd
                runs.append(r)
                print(f"round {rnd} {v:11s} {'busy ' if busy else 'quiet'} median {r['median_s']:.4f} s "
                      f"(load {r['load_1min_before']:.2f}, digest {r['digest']})", flush=True)
    summary = summarise(runs)
    for v, s in summary.items():
        print(f"{v}: quiet {s['quiet_median_s']:.4f} s, busy {s['busy_median_s']:.4f} s, busy/quiet "
              f"{s['busy_over_quiet']:.2f}x (median of round ratios {s['median_of_round_ratios']:.2f}x); digests {s['digests']}")
    res = {"summary": summary, "runs": runs, "threads": args.threads, "repeat": args.repeat, "n": args.n, "reps": args.reps,
           "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
           "machine": platform.machine(), "python": platform.python_version(),
           "uptime_at_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

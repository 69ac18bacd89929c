"""The batched least-squares fit on a quiet and on a busy machine, on 1 and 2 threads.

Why: on a shared node another process holds some of the cores.  torch's intra-op pool (OpenMP)
and the BLAS pools spin-wait at their barriers; when one of their threads has no core, every
parallel region waits for it and the fit collapses (issue: 0.058 s quiet, 3.85 s busy on 2 threads
for the cell below).  This benchmark measures that cell under four conditions so that the default
thread policy (:mod:`moestat.threads`) is chosen from numbers, not guessed.

Cell timed: the default scenario of ``python -m moestat.rates`` (``make_scenario("perturbed",
"exact")``: d = 4, k* = 3, GELU experts) at n = 2000 with R = 20 replicates, near-truth starts
(noise 0.05), :class:`~moestat.estimators.LeastSquaresMoE` -- the same cell as
``benchmarks/lse_batched_vs_scipy.py``.

Conditions: ``threads`` in {1, 2} (torch intra-op and BLAS, set through :func:`moestat.threads.
limit_threads`), ``load`` in {quiet, busy}; busy = one extra process spinning on one core for the
whole measurement (``--burners``).  Each condition runs in a fresh interpreter (the OpenMP
runtime reads its wait policy once, at start-up), does one untimed warm-up fit and then
``--repeat`` timed fits; the figure is the **median**.  ``--policy`` runs the worker as the
package does by default (``moestat.threads``: ``OMP_WAIT_POLICY=PASSIVE`` unless the user set
one) or with the runtime's own default (``runtime``: active spinning), to show which one matters.

Optionally ``--default-run`` also times the main job (``python -m moestat.rates --router
perturbed --quiet``) once per load condition, on the package's default threads.

Usage::

    python benchmarks/busy_machine.py --json docs/_static/busy_machine.json
    python benchmarks/busy_machine.py --repeat 5 --policy runtime
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_BURN = "while True:\n    pass\n"


def _worker(threads: int, repeat: int, n: int, reps: int) -> None:
    # imported here: the parent sets the environment (wait policy) before this interpreter starts
    import numpy as np

    from moestat.threads import limit_threads

    limit_threads(threads)
    from moestat.data.synthetic import make_scenario
    from moestat.estimators import LeastSquaresMoE, near_truth_init
    from moestat.model.mixing import MixingMeasure

    s = make_scenario("perturbed", "exact")
    ss = np.random.SeedSequence(0)
    data = [s.sample(n, np.random.default_rng(c)) for c in ss.spawn(reps)]
    X = np.stack([d[0] for d in data])
    Y = np.stack([d[1] for d in data])
    rng = np.random.default_rng(1)
    G0 = MixingMeasure.stack([near_truth_init(s.truth, s.k_fit, 0.05, rng) for _ in range(reps)])

    def fit():
        LeastSquaresMoE(s.fit_model, s.k_fit).fit(X, Y, init=G0)

    fit()  # warm-up: first-call allocations and kernel selection are not what is measured
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fit()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"times": times}))


def _burners(k: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", _BURN]) for _ in range(k)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def _env(policy: str) -> dict:
    env = dict(os.environ)
    for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.pop(v, None)
    if policy == "runtime":
        env["MOESTAT_WAIT_POLICY"] = "runtime"  # moestat.threads leaves the OpenMP runtime's default
    return env


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else 0.5 * (xs[m - 1] + xs[m])


def measure(threads: int, busy: int, repeat: int, n: int, reps: int, policy: str) -> dict:
    procs = _burners(busy)
    try:
        time.sleep(0.5)  # the burners are running before the worker starts
        out = subprocess.run(
            [sys.executable, __file__, "--worker", "--threads", str(threads), "--repeat", str(repeat), "--n", str(n),
             "--reps", str(reps)],
            capture_output=True, text=True, env=_env(policy), check=True, timeout=3600,
        )
    finally:
        _stop(procs)
    times = json.loads(out.stdout.strip().splitlines()[-1])["times"]
    return {"threads": threads, "busy_processes": busy, "policy": policy, "median_s": _median(times),
            "min_s": min(times), "max_s": max(times), "times_s": times}


def default_run(busy: int) -> float:
    procs = _burners(busy)
    tmp = Path(tempfile.mkdtemp(prefix="moestat-busy-"))
    try:
        time.sleep(0.5)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "moestat.rates", "--router", "perturbed", "--quiet", "--out", str(tmp / "o")],
                       check=True, env=_env("package"), capture_output=True, timeout=3600)
        return time.perf_counter() - t0
    finally:
        _stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


def rst_table(res: dict) -> str:
    """The results as the reStructuredText table of docs/guide/performance.rst."""
    quiet = {(r["policy"], r["threads"]): r["median_s"] for r in res["rows"] if r["busy_processes"] == 0}
    lines = ["=========  =======  ==============  =============  ===========",
             "policy     threads  quiet median s  busy median s  busy/quiet",
             "=========  =======  ==============  =============  ==========="]
    for r in res["rows"]:
        if r["busy_processes"] == 0:
            continue
        q = quiet[(r["policy"], r["threads"])]
        lines.append(f"{r['policy']:9s}  {r['threads']:7d}  {q:14.3f}  {r['median_s']:13.3f}  {r['median_s'] / q:10.1f}x")
    lines.append(lines[0])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--repeat", type=int, default=7, help="timed fits per condition (median reported; default 7)")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--burners", type=int, default=1, help="spinning processes of the busy condition (default 1)")
    p.add_argument("--policy", default="both", choices=["package", "runtime", "both"],
                   help="OpenMP wait policy: the package's default (passive), the runtime's (active), or both")
    p.add_argument("--default-run", action="store_true", help="also time the main job quiet and busy")
    p.add_argument("--json", default=None, help="write the results here")
    a = p.parse_args(argv)
    if a.worker:
        _worker(a.threads, a.repeat, a.n, a.reps)
        return 0
    policies = ["package", "runtime"] if a.policy == "both" else [a.policy]
    rows = []
    for policy in policies:
        for threads in (1, 2):
            for busy in (0, a.burners):
                r = measure(threads, busy, a.repeat, a.n, a.reps, policy)
                rows.append(r)
                print(f"policy={policy:8s} threads={threads} busy={busy}: median {r['median_s']:.3f} s "
                      f"(min {r['min_s']:.3f}, max {r['max_s']:.3f})", flush=True)
    res = {"cell": {"scenario": "perturbed exact", "n": a.n, "reps": a.reps}, "repeat": a.repeat, "rows": rows,
           "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
                       "loadavg_at_start": os.getloadavg()}}
    if a.default_run:
        res["default_run_s"] = {"quiet": default_run(0), "busy": default_run(a.burners)}
        print(f"default run: quiet {res['default_run_s']['quiet']:.1f} s, busy {res['default_run_s']['busy']:.1f} s")
    print(rst_table(res))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

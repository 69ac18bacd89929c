"""Batched Levenberg-Marquardt LSE versus scipy.optimize.least_squares in a Python loop.

Slice timed (one cell of the reference sweep of ``python -m moestat.rates``): the default
scenario ``make_scenario(router, "exact")`` -- d = 4, k* = 3, dense gate, GELU experts, noise
variance 0.01, Uniform[-1, 1]^d inputs -- at one sample size ``n`` (default 2000, the smallest
of the default sweep grid 2000 ... 128000) with ``R`` replicates (default 20, the sweep's
count), near-truth starts with constant noise 0.05 (``near_truth_init``).  ``--n`` takes a
comma-separated list to time several cells of the grid in one run.

Baseline (fair by construction): :func:`moestat.estimators.reference.scipy_reference_fit`, i.e.
``scipy.optimize.least_squares(method="trf")`` per replicate in a Python loop, with the same
residual and the same analytic Jacobian (the same kernel,
:mod:`moestat.estimators.lse_kernel`, with its features built once per replicate), the same
start, the same box, and the same procedure (for a Top-K gate: the smoothed continuation
stages, then the hard gate with ftol = xtol = 1e-12, gtol = 1e-10); only the optimiser differs.
The scipy loop runs on one thread -- torch and, through ``threadpoolctl``, numpy's BLAS, which
scipy's trust-region solver calls for an SVD per iteration -- its fastest setting (with two BLAS
threads it was 6-20 times slower on the project's machine, the more so when the other core was
busy); the batched
estimator is timed on one thread and on ``--threads`` (default 2: the project's machine has two
cores).  Each timing is the minimum over ``--repeat`` runs after one untimed warm-up call (the
usual ``timeit`` convention: the minimum is the run least disturbed by the machine).

Output: ``speedup`` = scipy-loop seconds / batched seconds (batched on ``--threads``),
``speedup_one_thread`` = the same with both on one thread, and ``max_rel_objective_gap`` =
max over replicates of ``(obj_batched - obj_scipy) / obj_scipy`` (negative: batched lower),
printed and written as JSON with ``--json PATH`` (for a list of ``n``, the JSON holds one
record per ``n`` under ``"cells"`` and the first cell's figures at the top level).

Usage::

    python benchmarks/lse_batched_vs_scipy.py --n 2000 --reps 20 --json bench.json
    python benchmarks/lse_batched_vs_scipy.py --n 1000,2000,8000,32000 --threads 1
    python benchmarks/lse_batched_vs_scipy.py --batched-only --repeat 7 --json fit.json

``--batched-only`` times the batched fit alone, on ``--threads`` (no scipy loop): every timed
run's seconds, their median and minimum, and a SHA-256 of the fitted parameters and objectives
(the same digest means the same fits, bit for bit); ``benchmarks/busy_ab.py`` runs it quiet and
beside a busy process.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import sys
import time

# moestat before torch: importing moestat sets OMP_WAIT_POLICY=PASSIVE (moestat.threads), and the
# OpenMP runtime that torch loads reads it once, when torch is first imported.  With torch first,
# the 2-thread fit ran with spinning threads: 3.4x its quiet time beside one busy process instead
# of about 2x (docs/guide/performance.rst, "Threads on a shared machine").
import moestat  # noqa: F401  (first: the wait policy)
import numpy as np
import torch
from threadpoolctl import threadpool_limits

from moestat.cli.common import positive_int, run_main
from moestat.estimators import LeastSquaresMoE, near_truth_init
from moestat.estimators.lse import AUTO_TEMPERATURES
from moestat.estimators.reference import scipy_reference_fit
from moestat.io import atomic_write_json
from moestat.model.mixing import MixingMeasure
from moestat.data.synthetic import ROUTERS, make_scenario


def _best_time(fn, repeat: int):
    """Warm up once, then return (min seconds over ``repeat`` runs, last result)."""
    out = fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _problem(router: str, n: int, reps: int, seed: int, init_scale: float):
    """The benchmark's scenario, data ``X [R, n, d]``, ``Y [R, n]``, fitted model and near-truth starts
    ``[R]``, all drawn from ``seed`` in one order (both timings fit the same problem)."""
    sc = make_scenario(router, "exact")
    rng = np.random.default_rng(seed)
    XY = [sc.sample(n, rng) for _ in range(reps)]
    X = np.stack([a for a, _ in XY])
    Y = np.stack([b for _, b in XY])
    model = sc.model.with_k_active(sc.k_active_fit)
    init = MixingMeasure.stack([near_truth_init(sc.truth, sc.k_fit, init_scale, rng) for _ in range(reps)])
    return sc, X, Y, model, init


def run_benchmark(
    router: str = "perturbed",
    n: int = 2000,
    reps: int = 20,
    seed: int = 0,
    init_scale: float = 0.05,
    repeat: int = 3,
    with_2point: bool = True,
    threads: int = 2,
) -> dict:
    """Time both fits on the same data and starts; return the figures as a dict."""
    sc, X, Y, model, init = _problem(router, n, reps, seed, init_scale)
    sparse = model.gate.k_active is not None and model.gate.k_active < sc.k_fit
    temps = AUTO_TEMPERATURES if sparse else ()

    def batched():
        return LeastSquaresMoE(model, sc.k_fit, box=sc.box).fit(X, Y, init=init)

    torch.set_num_threads(1)
    with threadpool_limits(limits=1):
        t_scipy, ref = _best_time(
            lambda: scipy_reference_fit(model, X, Y, init, sc.k_fit, box=sc.box, temperatures=temps), repeat
        )
    t_batched_1, est = _best_time(batched, repeat)
    torch.set_num_threads(threads)
    t_batched, est = _best_time(batched, repeat) if threads != 1 else (t_batched_1, est)
    gap = (est.objective_ - ref["objective"]) / ref["objective"]
    res = {
        "speedup": t_scipy / t_batched,
        "speedup_one_thread": t_scipy / t_batched_1,
        "batched_seconds_one_thread": t_batched_1,
        "max_rel_objective_gap": float(gap.max()),
        "median_rel_objective_gap": float(np.median(gap)),
        "min_rel_objective_gap": float(gap.min()),
        "batched_seconds": t_batched,
        "scipy_loop_seconds": t_scipy,
        "batched_converged": int(est.converged_.sum()),
        "batched_iterations_mean": float(est.n_iter_.mean()),
        "batched_iterations_max": int(est.n_iter_.max()),
        "scipy_nfev_mean": float(ref["nfev"].mean()),
    }
    if with_2point:
        # scipy as it is usually called (its own finite-difference Jacobian): a second, weaker
        # baseline, reported beside -- never instead of -- the analytic one above (one run).
        torch.set_num_threads(1)
        with threadpool_limits(limits=1):
            t0 = time.perf_counter()
            ref_fd = scipy_reference_fit(model, X, Y, init, sc.k_fit, box=sc.box, temperatures=temps, jac="2-point")
            t_fd = time.perf_counter() - t0
        torch.set_num_threads(threads)
        gap_fd = (est.objective_ - ref_fd["objective"]) / ref_fd["objective"]
        res.update(
            speedup_vs_scipy_2point=t_fd / t_batched,
            scipy_2point_loop_seconds=t_fd,
            max_rel_objective_gap_vs_scipy_2point=float(gap_fd.max()),
        )
    res["slice"] = {
        "scenario": sc.name,
        "n": n,
        "reps": reps,
        "seed": seed,
        "init": f"near_truth_init(scale={init_scale}, schedule='constant')",
        "continuation_temperatures": list(temps),
        "timing": f"min of {repeat} runs after one warm-up",
    }
    res["baseline"] = (
        "scipy.optimize.least_squares(method='trf') per replicate, same residual, analytic Jacobian "
        "(same kernel), start, box and continuation"
    )
    res["threads"] = threads
    res["scipy_threads"] = 1
    res["load_average_at_end"] = list(os.getloadavg())
    res["python"] = platform.python_version()
    res["torch"] = torch.__version__
    return res


def batched_only(router: str = "perturbed", n: int = 2000, reps: int = 20, seed: int = 0, init_scale: float = 0.05,
                 repeat: int = 7, threads: int = 2) -> dict:
    """The batched fit alone on ``threads`` threads: one warm-up, then ``repeat`` timed fits.

    Same data and starts as :func:`run_benchmark` (the same draws from ``seed``).  Returns every
    run's seconds, their median and minimum, and ``digest``: SHA-256 of the fitted parameters and
    objectives of the last fit (equal digests: bit-identical fits).
    """
    sc, X, Y, model, init = _problem(router, n, reps, seed, init_scale)
    torch.set_num_threads(threads)

    def batched():
        return LeastSquaresMoE(model, sc.k_fit, box=sc.box).fit(X, Y, init=init)

    est = batched()  # warm-up: first-call allocations and kernel selection are not what is measured
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        est = batched()
        times.append(time.perf_counter() - t0)
    h = hashlib.sha256()
    for a in (est.params_.beta0, est.params_.beta1, est.params_.eta, est.objective_):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return {"times_s": times, "median_s": statistics.median(times), "min_s": min(times), "digest": h.hexdigest()[:16],
            "threads": threads, "n": n, "reps": reps, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "load_average_at_end": list(os.getloadavg())}


def _n_list(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--n must be a comma-separated list of positive integers, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise ValueError(f"--n must be a comma-separated list of positive integers, got {text!r}")
    return vals


def main(argv: list[str] | None = None) -> int:
    from moestat.cli.common import ArgumentParser

    p = ArgumentParser(prog="python benchmarks/lse_batched_vs_scipy.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--router", choices=ROUTERS, default="perturbed")
    p.add_argument("--n", default="2000", help="sample size, or a comma-separated list (default 2000)")
    p.add_argument("--reps", type=positive_int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=positive_int, default=2, help="torch threads of the batched fit (default 2; also timed on 1)")
    p.add_argument("--repeat", type=positive_int, default=3, help="timed runs per method; the minimum is kept")
    p.add_argument("--no-2point", action="store_true", help="skip the (slow) finite-difference scipy baseline")
    p.add_argument("--json", default=None, help="write the figures to this JSON file")
    p.add_argument("--batched-only", action="store_true",
                   help="time the batched fit alone on --threads (median of --repeat runs; no scipy loop)")
    args = p.parse_args(argv)
    ns = _n_list(args.n)
    if args.batched_only:
        res = batched_only(args.router, ns[0], args.reps, args.seed, repeat=args.repeat, threads=args.threads)
        print(json.dumps(res), flush=True)
        if args.json:
            atomic_write_json(args.json, res)
        return 0
    cells = []
    for n in ns:
        res = run_benchmark(
            args.router, n, args.reps, args.seed, repeat=args.repeat, with_2point=not args.no_2point, threads=args.threads
        )
        cells.append(res)
        extra = ""
        if "speedup_vs_scipy_2point" in res:
            extra = (
                f" [vs scipy with its default 2-point Jacobian: {res['scipy_2point_loop_seconds']:.2f} s, "
                f"speedup {res['speedup_vs_scipy_2point']:.2f}x]"
            )
        print(
            f"{res['slice']['scenario']}, n={n}, R={args.reps}: scipy loop (1 thread) "
            f"{res['scipy_loop_seconds']:.3f} s; batched {res['batched_seconds_one_thread']:.3f} s on 1 thread "
            f"({res['speedup_one_thread']:.2f}x), {res['batched_seconds']:.3f} s on {args.threads} "
            f"({res['speedup']:.2f}x); max relative objective gap {res['max_rel_objective_gap']:.3e} "
            f"(min {res['min_rel_objective_gap']:.3e}); iterations mean {res['batched_iterations_mean']:.1f} "
            f"max {res['batched_iterations_max']} vs scipy nfev {res['scipy_nfev_mean']:.1f}{extra}; "
            f"load average {res['load_average_at_end'][0]:.1f}",
            flush=True,
        )
    if args.json:
        out = dict(cells[0])
        if len(cells) > 1:
            out["cells"] = cells
        atomic_write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, sys.argv[1:], prog="python benchmarks/lse_batched_vs_scipy.py"))

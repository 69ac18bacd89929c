"""Batched Levenberg-Marquardt LSE versus scipy.optimize.least_squares in a Python loop.

Slice timed (one cell of the reference sweep of ``python -m moestat.rates``): the default
scenario ``make_scenario(router, "exact")`` -- d = 4, k* = 3, K = 2, GELU experts, noise
variance 0.01, Uniform[-1, 1]^d inputs -- at one sample size ``n`` (default 1000, the smallest
of the sweep grid) with ``R`` replicates (default 20, the paper's count), near-truth starts with
constant noise 0.05 (``near_truth_init``).

Baseline (fair by construction): :func:`moestat.estimators.lse.scipy_reference_fit`, i.e.
``scipy.optimize.least_squares(method="trf")`` per replicate in a Python loop, with the same
residual, the same analytic Jacobian, the same start, the same box, and the same procedure
(the smoothed Top-K continuation stages, then the hard gate with ftol = xtol = 1e-12,
gtol = 1e-10); only the optimiser differs (and the batched estimator's second, direct hard-gate
path, which scipy does not get).  Both run on one thread.

Output: ``speedup`` = scipy-loop seconds / batched seconds and ``max_rel_objective_gap`` =
max over replicates of ``(obj_batched - obj_scipy) / obj_scipy`` (negative: batched lower),
printed and written as JSON with ``--json PATH``.

Usage::

    python benchmarks/lse_batched_vs_scipy.py --n 1000 --reps 20 --json bench.json
"""

from __future__ import annotations

import os
import platform
import sys
import time

import numpy as np
import torch

from moestat.cli import positive_int, run_main
from moestat.estimators import LeastSquaresMoE, near_truth_init
from moestat.estimators.lse import AUTO_TEMPERATURES, scipy_reference_fit
from moestat.io import atomic_write_json
from moestat.mixing import MixingMeasure
from moestat.scenarios import ROUTERS, make_scenario


def run_benchmark(router: str = "perturbed", n: int = 1000, reps: int = 20, seed: int = 0, init_scale: float = 0.05) -> dict:
    """Time both fits on the same data and starts; return the figures as a dict."""
    sc = make_scenario(router, "exact")
    rng = np.random.default_rng(seed)
    XY = [sc.sample(n, rng) for _ in range(reps)]
    X = np.stack([a for a, _ in XY])
    Y = np.stack([b for _, b in XY])
    model = sc.model.with_k_active(sc.k_active_fit)
    init = MixingMeasure.stack([near_truth_init(sc.truth, sc.k_fit, init_scale, rng) for _ in range(reps)])
    sparse = model.gate.k_active is not None and model.gate.k_active < sc.k_fit
    temps = AUTO_TEMPERATURES if sparse else ()

    t0 = time.perf_counter()
    est = LeastSquaresMoE(model, sc.k_fit, box=sc.box).fit(X, Y, init=init)
    t_batched = time.perf_counter() - t0

    t0 = time.perf_counter()
    ref = scipy_reference_fit(model, X, Y, init, sc.k_fit, box=sc.box, temperatures=temps)
    t_scipy = time.perf_counter() - t0

    # scipy as it is usually called (its own finite-difference Jacobian): a second, weaker
    # baseline, reported beside -- never instead of -- the analytic one above.
    t0 = time.perf_counter()
    ref_fd = scipy_reference_fit(model, X, Y, init, sc.k_fit, box=sc.box, temperatures=temps, jac="2-point")
    t_scipy_fd = time.perf_counter() - t0

    gap = (est.objective_ - ref["objective"]) / ref["objective"]
    gap_fd = (est.objective_ - ref_fd["objective"]) / ref_fd["objective"]
    return {
        "speedup": t_scipy / t_batched,
        "speedup_vs_scipy_2point": t_scipy_fd / t_batched,
        "max_rel_objective_gap_vs_scipy_2point": float(gap_fd.max()),
        "scipy_2point_loop_seconds": t_scipy_fd,
        "max_rel_objective_gap": float(gap.max()),
        "median_rel_objective_gap": float(np.median(gap)),
        "min_rel_objective_gap": float(gap.min()),
        "batched_seconds": t_batched,
        "scipy_loop_seconds": t_scipy,
        "batched_converged": int(est.converged_.sum()),
        "batched_iterations_mean": float(est.n_iter_.mean()),
        "scipy_nfev_mean": float(ref["nfev"].mean()),
        "slice": {
            "scenario": sc.name,
            "n": n,
            "reps": reps,
            "seed": seed,
            "init": f"near_truth_init(scale={init_scale}, schedule='constant')",
            "continuation_temperatures": list(temps),
        },
        "baseline": "scipy.optimize.least_squares(method='trf') per replicate, same residual, analytic Jacobian, start, box and continuation",
        "threads": torch.get_num_threads(),
        "load_average_at_end": list(os.getloadavg()),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    from moestat.cli import ArgumentParser

    p = ArgumentParser(prog="python benchmarks/lse_batched_vs_scipy.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--router", choices=ROUTERS, default="perturbed")
    p.add_argument("--n", type=positive_int, default=1000)
    p.add_argument("--reps", type=positive_int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the figures to this JSON file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    res = run_benchmark(args.router, args.n, args.reps, args.seed)
    print(
        f"{res['slice']['scenario']}, n={args.n}, R={args.reps}: batched {res['batched_seconds']:.2f} s, "
        f"scipy loop {res['scipy_loop_seconds']:.2f} s, speedup {res['speedup']:.2f}x, "
        f"max relative objective gap {res['max_rel_objective_gap']:.3e} "
        f"[vs scipy with its default 2-point Jacobian: {res['scipy_2point_loop_seconds']:.2f} s, "
        f"speedup {res['speedup_vs_scipy_2point']:.2f}x, gap {res['max_rel_objective_gap_vs_scipy_2point']:.3e}] "
        f"(median {res['median_rel_objective_gap']:.3e}, min {res['min_rel_objective_gap']:.3e}), "
        f"load average {res['load_average_at_end'][0]:.1f}"
    )
    if args.json:
        atomic_write_json(args.json, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, sys.argv[1:], prog="python benchmarks/lse_batched_vs_scipy.py"))

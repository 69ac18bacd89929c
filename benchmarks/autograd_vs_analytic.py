"""Autograd (torch.func) vs analytic least-squares kernel on the default scenario (issue 14).

Fits the same replicates from the same near-truth starts twice -- once with the built-in model
(analytic Jacobian, :mod:`moestat.estimators.lse_kernel`) and once with the same model
re-expressed in the protocol (:func:`moestat.model.protocol.protocol_from_builtin`, Jacobians
from :mod:`moestat.estimators.jacobians`) -- and writes wall times, their ratio and the largest
objective gap as JSON.

    OMP_NUM_THREADS=1 python benchmarks/autograd_vs_analytic.py --n 2000 --reps 4 --out benchmarks/autograd_vs_analytic.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
import moestat  # noqa: F401  (before torch: it sets the OpenMP wait policy torch's runtime reads once, moestat.threads)
import torch


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="samples per replicate (default 2000)")
    p.add_argument("--reps", type=int, default=4, help="replicates fitted in one batch (default 4)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--out", default="benchmarks/autograd_vs_analytic.json", help="JSON output")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    from moestat.data.synthetic import default_scenario
    from moestat.estimators.lse import LeastSquaresMoE
    from moestat.estimators.starts import near_truth_init
    from moestat.model.mixing import MixingMeasure
    from moestat.model.protocol import protocol_from_builtin

    sc = default_scenario()
    rng = np.random.default_rng(0)
    Xs, Ys = [], []
    for _ in range(a.reps):
        x, y = sc.sample(a.n, rng)
        Xs.append(np.asarray(x)), Ys.append(np.asarray(y))
    X, Y = torch.as_tensor(np.stack(Xs)), torch.as_tensor(np.stack(Ys))
    start = MixingMeasure.stack([near_truth_init(sc.truth, sc.k_fit, 0.05, rng) for _ in range(a.reps)])
    out = {"n": a.n, "reps": a.reps, "threads": a.threads, "machine": platform.platform(), "cpus": os.cpu_count()}
    objs = {}
    for name, model in (("analytic", sc.fit_model), ("autograd", protocol_from_builtin(sc.fit_model, sc.d))):
        est = LeastSquaresMoE(model, sc.k_fit, box=sc.box, init=start, max_iter=200)
        t = time.perf_counter()
        est.fit(X, Y)
        out[f"{name}_seconds"] = time.perf_counter() - t
        out[f"{name}_n_iter"] = est.n_iter_.tolist()
        out[f"{name}_converged"] = est.converged_.tolist()
        objs[name] = est.objective_
    out["ratio_autograd_over_analytic"] = out["autograd_seconds"] / out["analytic_seconds"]
    out["max_relative_objective_gap"] = float(np.max(np.abs(objs["autograd"] - objs["analytic"]) / objs["analytic"]))
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()

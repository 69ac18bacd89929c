"""Batched EM (moestat) versus R's flexmix on model 1 of Nguyen, Nguyen & Ho (2023): log-likelihood and time.

Same data, same start: ``--reps`` replicates of model 1 at ``--n`` samples (data and near-truth
start, noise ``--init-scale``, from the rates sweep's streams ``SeedSequence(seed, spawn_key=(n,
r, 0 | 1))``); flexmix (``FLXMRglm`` experts, ``FLXPmultinom`` concomitant, ``minprior = 0``,
``tolerance = 1e-12``) starts from the responsibilities of the start, which is moestat's first
E-step (:mod:`moestat.estimators.flexmix_reference`).

Reported per replicate and in total: both log-likelihoods and their relative difference, both
iteration counts, flexmix's time inside R (the ``flexmix()`` call alone, without R's start-up)
and moestat's time -- one batched call for all replicates, on ``--threads`` torch threads.

flexmix's Gaussian expert is not exactly the maximum-likelihood update: its ``sigma`` divides
the weighted residual sum of squares by ``n - rank`` after rescaling the weights
(``sqrt(sum(w r^2) / mean(w) / (n - rank))``, ``FLXMRglm``'s M-step), so its log-likelihood sits
slightly below the maximum that moestat's EM reaches.

Usage (about 30 s, most of it R start-up)::

    python benchmarks/mle_vs_flexmix.py --n 1000 --reps 10 --json mle_vs_flexmix.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import moestat  # noqa: F401  (before torch: it sets the OpenMP wait policy torch's runtime reads once, moestat.threads)
import torch

from moestat.data.gaussian_scenarios import model1_scenario
from moestat.estimators.flexmix_reference import flexmix_available, flexmix_fit
from moestat.estimators.mle import MLEGaussianMoE
from model1_batch import model1_batch  # benchmarks/model1_batch.py, beside this script


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--setting", choices=["exact", "over"], default="exact")
    ap.add_argument("--init-scale", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=2023)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not flexmix_available():
        print("Rscript with the flexmix package is not installed", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    sc = model1_scenario(args.setting)
    X, Y, init = model1_batch(sc, args.n, args.reps, args.seed, args.init_scale)
    MLEGaussianMoE(sc.k_fit, tol=1e-13).fit(X[:1], Y[:1], init=init[:1])  # warm-up
    t0 = time.perf_counter()
    est = MLEGaussianMoE(sc.k_fit, tol=1e-13).fit(X, Y, init=init)
    t_moestat = time.perf_counter() - t0
    rows = []
    for r in range(args.reps):
        fx = flexmix_fit(X[r], Y[r], init[r])
        ours, theirs = float(est.loglik_[r]), fx["loglik"]
        rows.append({"replicate": r, "loglik_moestat": ours, "loglik_flexmix": theirs,
                     "rel_diff": (ours - theirs) / abs(theirs), "n_iter_moestat": int(est.n_iter_[r]),
                     "n_iter_flexmix": fx["n_iter"], "time_flexmix": fx["time"]})
    rel = np.array([row["rel_diff"] for row in rows])
    report = {
        "benchmark": "mle_vs_flexmix", "scenario": sc.name, "n": args.n, "reps": args.reps,
        "init_scale": args.init_scale, "threads": args.threads,
        "moestat_seconds_all_reps": t_moestat, "flexmix_seconds_all_reps": float(sum(r["time_flexmix"] for r in rows)),
        "moestat_at_least_flexmix": int(np.sum(rel >= 0)), "min_rel_diff": float(rel.min()),
        "max_rel_diff": float(rel.max()), "rows": rows, "load_average": os.getloadavg(),
        "command": " ".join(sys.argv),
    }
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

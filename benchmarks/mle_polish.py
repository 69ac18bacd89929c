"""EM alone versus EM + Newton polish on the over-fitted model 1 of Nguyen, Nguyen & Ho (2023).

Same data and starts (``--reps`` replicates x 2 starts at ``--n`` samples, ``K = --k``; data and
near-truth start, noise 0.1, from the rates sweep's streams), fitted by

* ``em``: SQUAREM EM with ``max_iter = --em-iter`` (default 5000, the budget before the polish);
* ``polish``: SQUAREM EM with ``max_iter = --polish-em-iter`` (default 1000), then up to 100
  Newton iterations (``MLEGaussianMoE(polish_iter=100)``, the over-fitted presets' rule).

Reported, for each: wall time (median of ``--repeat`` runs, one process, ``--threads`` torch
threads), the statuses, converged count, and per replicate the log-likelihood, plus the
difference ``polish - em`` (positive: the polish found a higher likelihood).

Usage (about 4 min on 2 cores at the defaults)::

    python benchmarks/mle_polish.py --n 20000 --k 3 --json simulations/gaussian_moe/mle_polish_k3.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import moestat  # noqa: F401  (before torch: it sets the OpenMP wait policy torch's runtime reads once, moestat.threads)
import torch

from moestat.data.gaussian_scenarios import model1_scenario
from moestat.estimators.mle import MLEGaussianMoE
from model1_batch import model1_batch  # benchmarks/model1_batch.py, beside this script


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--k", type=int, default=3, choices=(3, 4))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--em-iter", type=int, default=5000)
    ap.add_argument("--polish-em-iter", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    sc = model1_scenario("over", a.k)
    X, Y, G0 = model1_batch(sc, a.n, a.reps, a.seed, 0.1)
    out = {"machine": f"{platform.node()} {os.cpu_count()} cores", "threads": a.threads, "args": vars(a)}
    for name, kw in (("em", dict(max_iter=a.em_iter)), ("polish", dict(max_iter=a.polish_em_iter, polish_iter=100))):
        times = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            est = MLEGaussianMoE(a.k, n_init=2, accelerate=True, random_state=a.seed, **kw).fit(X, Y, init=G0)
            times.append(time.perf_counter() - t)
        out[name] = {"wall_s": statistics.median(times), "status": est.status_, "converged": int(est.converged_.sum()),
                     "loglik": est.loglik_.tolist(), "n_iter": est.n_iter_.tolist(), "n_newton": est.n_newton_.tolist()}
        print(f"{name:7s} {statistics.median(times):7.1f} s  converged {int(est.converged_.sum())}/{a.reps}  "
              f"statuses {sorted(set(est.status_))}", flush=True)
    diff = np.array(out["polish"]["loglik"]) - np.array(out["em"]["loglik"])
    out["loglik_polish_minus_em"] = diff.tolist()
    out["time_ratio_em_over_polish"] = out["em"]["wall_s"] / out["polish"]["wall_s"]
    print("log-likelihood, polish - em:", np.array2string(diff, precision=4))
    print(f"time ratio em / polish: {out['time_ratio_em_over_polish']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

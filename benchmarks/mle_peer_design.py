"""Model 1 of Nguyen, Nguyen & Ho (2023) at the peers' design: wall time, losses and slopes.

The peers' exact-fitted run (``Trung-TinNGUYEN/CRPE-SGaME``; their log: 877 s on 8 cores, i.e.
7 016 core-seconds) fits model 1 at 150 sample sizes log-spaced from 100 to 1e5, 40 replicates
each, 5 starts per replicate, one EM per start in R.  This script fits the same design with
:class:`moestat.estimators.mle.MLEGaussianMoE`: for every ``n``, all replicates x starts on one
batch axis (in groups of at most ``--max-batch-samples`` samples x starts, to bound memory),
near-truth starts drawn as the rates sweep draws them (``SeedSequence(seed, spawn_key=(n,
replicate, 1))``, constant noise ``--init-scale`` by default, the peers' ``0.005 n^-0.083`` with
``--schedule peer``), data from ``spawn_key=(n, replicate, 0)``.

Output (JSON, ``--json``): the wall time of the fits alone and of the whole run, the number of
fits, statuses, iterations, and per loss (D1 or D2, per-atom errors by cell type, mass) the
log-of-mean slope with its 95% interval (:func:`moestat.rates.fit.slope_with_interval`), with
the theorem's predicted exponent beside it; ``--csv`` writes the per-replicate losses.

Usage (full exact-fitted design, about 1-3 min on 2 quiet cores)::

    python benchmarks/mle_peer_design.py --setting exact --threads 2 --json peer_exact.json

Reduced (seconds)::

    python benchmarks/mle_peer_design.py --n-points 15 --reps 10 --json quick.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import moestat  # noqa: F401  (before torch: it sets the OpenMP wait policy torch's runtime reads once, moestat.threads)
import torch

from moestat.data.gaussian_scenarios import gaussian_voronoi, model1_scenario
from moestat.estimators.mle import MLEGaussianMoE
from moestat.estimators.starts import near_truth_init
from moestat.model.mixing import MixingMeasure
from moestat.rates.config import sample_sizes
from moestat.rates.fit import slope_with_interval
from moestat.rates.sweep import replicate_streams

PEER_SECONDS, PEER_CORES = 877.0, 8  # the peers' logged exact-fitted run


def fit_one_n(sc, n, reps, starts, args, device):
    """Data, starts and the batched fits of every replicate at one ``n``; returns a dict of arrays."""
    Xs, Ys, inits = [], [], []
    for r in range(reps):
        data_ss, init_ss = replicate_streams(args.seed, n, r)
        X, Y = sc.sample(n, np.random.default_rng(data_ss))
        rng = np.random.default_rng(init_ss)
        G = [near_truth_init(sc.truth, sc.k_fit, args.init_scale, rng, n=n, schedule=args.schedule, log_last=True)
             for _ in range(starts)]
        Xs.append(X)
        Ys.append(Y)
        inits.append(MixingMeasure.stack(G))
    X, Y, G0 = np.stack(Xs), np.stack(Ys), MixingMeasure.stack(inits)  # G0 batch [R, S]
    group = max(1, args.max_batch_samples // (n * starts))
    out = {"loglik": [], "n_iter": [], "status": [], "params": []}
    t0 = time.perf_counter()
    for lo in range(0, reps, group):
        sl = slice(lo, min(lo + group, reps))
        est = MLEGaussianMoE(sc.k_fit, max_iter=args.max_iter, device=device, accelerate=args.accelerate,
                             compile={"auto": "auto", "on": True, "off": False}[args.compile]).fit(X[sl], Y[sl], init=G0[sl])
        out["loglik"].append(est.loglik_)
        out["n_iter"].append(est.n_iter_)
        out["status"] += est.status_
        out["params"].append(est.params_)
    out["seconds"] = time.perf_counter() - t0
    out["params"] = MixingMeasure(*(np.concatenate([getattr(p, f) for p in out["params"]]) for f in ("beta0", "beta1", "eta")))
    out["loglik"], out["n_iter"] = np.concatenate(out["loglik"]), np.concatenate(out["n_iter"])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", choices=["exact", "over"], default="exact")
    ap.add_argument("--k-fit", type=int, default=None, help="over-fitted atoms (default 3)")
    ap.add_argument("--n-min", type=int, default=100)
    ap.add_argument("--n-max", type=int, default=100_000)
    ap.add_argument("--n-points", type=int, default=150)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--init-scale", type=float, default=0.1)
    ap.add_argument("--schedule", choices=["constant", "peer"], default="constant")
    ap.add_argument("--input-law", choices=["uniform", "grid"], default="uniform")
    ap.add_argument("--max-iter", type=int, default=1000)
    ap.add_argument("--max-batch-samples", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=2023)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--accelerate", action="store_true", help="SQUAREM steps between pairs of EM steps")
    ap.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                    help="fuse the EM pass with torch.compile (auto: for large batches on the CPU)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    sc = model1_scenario(args.setting, args.k_fit, args.input_law)
    ns = sample_sizes(args.n_min, args.n_max, args.n_points)
    name = "D1" if sc.setting == "exact" else "D2"
    t_all = time.perf_counter()
    rows, fit_seconds, statuses, iters = [], 0.0, {}, []
    for n in sorted(ns, reverse=True):
        res = fit_one_n(sc, n, args.reps, args.starts, args, args.device)
        fit_seconds += res["seconds"]
        L = gaussian_voronoi(res["params"], sc.truth, name)
        for r in range(args.reps):
            rows.append({"n": n, "replicate": r, "status": res["status"][r], "n_iter": int(res["n_iter"][r]),
                         "loglik": float(res["loglik"][r]), **{k: float(v[r]) for k, v in L.items()}})
        for s in res["status"]:
            statuses[s] = statuses.get(s, 0) + 1
        iters += res["n_iter"].tolist()
    wall = time.perf_counter() - t_all
    slopes = {}
    rng = np.random.default_rng(0)
    for loss in ("voronoi", "param_single", "param_multi", "mass"):
        vals = [np.array([row[loss] for row in rows if row["n"] == n]) for n in ns]
        if any(np.isnan(v).all() for v in vals):
            continue
        vals = [v[np.isfinite(v) & (v > 0)] for v in vals]
        s = slope_with_interval(ns, vals, rng, n_boot=1000)
        slopes[loss] = {"slope": s["slope"], "ci_low": s["ci_low"], "ci_high": s["ci_high"],
                        "predicted": sc.predicted.get(loss)}
    cores = args.threads if args.device == "cpu" else None
    report = {
        "benchmark": "mle_peer_design", "scenario": sc.name, "loss": name, "ns": [ns[0], ns[-1], len(ns)],
        "reps": args.reps, "starts": args.starts, "fits": len(rows) * args.starts, "schedule": args.schedule,
        "init_scale": args.init_scale, "input_law": args.input_law, "accelerate": args.accelerate,
        "compile": args.compile, "device": args.device, "threads": args.threads,
        "fit_seconds": fit_seconds, "wall_seconds": wall,
        "core_seconds": None if cores is None else wall * cores,
        "peer_core_seconds": PEER_SECONDS * PEER_CORES,
        "core_time_ratio": None if cores is None else PEER_SECONDS * PEER_CORES / (wall * cores),
        "statuses": statuses, "n_iter_median": float(np.median(iters)), "n_iter_max": int(np.max(iters)),
        "slopes": slopes, "load_average": os.getloadavg(), "machine": platform.processor() or platform.machine(),
        "python": sys.version.split()[0], "torch": torch.__version__, "command": " ".join(sys.argv),
    }
    print(json.dumps({k: report[k] for k in ("scenario", "fits", "wall_seconds", "core_time_ratio", "statuses",
                                              "n_iter_median", "slopes")}, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
    if args.csv:
        import csv

        with open(args.csv, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

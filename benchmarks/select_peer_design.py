"""Core time of one selection replicate at the design of Dendrogram_SGMoE's experiment 5.

Their ``dsc_aic_bic_icl_K4_100_10000_32`` runs (maitrungnguyen/Dendrogram_SGMoE, ``data/experiment
5``): model 1 of Nguyen, Nguyen & Ho (2023) (their ``alphak [[-8], [25]]``, ``betak [[15, -5],
[-20, 20]]``, ``sigmak [0.3, 0.4]``), ``K_max = 4``, 32 sample sizes from 100 to 10 000 -- linearly
spaced in the JSONs (100, 420, 739, ..., 10 000) although ``description.json`` says ``log`` --, one EM
try per fit, a start near the truth (``favourable``); one replicate = every size, the over-fitted
fit plus refits ``k = 3, 2, 1``, DSC/AIC/BIC/ICL.  Their JSONs report ``time_elapsed`` per
replicate: median 1 323 s over 69 replicates (min 1 000 s, max 2 382 s).

Here the same design runs through :func:`moestat.selection.study.run_unit` (fits ``k = 1..4``,
one start near the truth, SQUAREM EM + Newton polish, both DSC trees, AIC/BIC/ICL, the Voronoi
losses), one size at a time, and the process (core) time of each size is summed.  ``--every m``
measures every ``m``-th of the 32 sizes only (CPU is scarce) and also reports the estimate of the
whole design ``measured * sum(all n) / sum(measured n)`` (the cost per sample being about constant
over these sizes, which the per-size times in the JSON let one check).

Usage::

    python benchmarks/select_peer_design.py --reps 1 --every 4 --json simulations/selection/peer_design_cost.json
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

from moestat.selection.study import SelectConfig, run_unit

PEER_MEDIAN_S = 1323.0  # median time_elapsed of their 69 K4_100_10000_32 replicates (read from their JSONs)


def peer_sizes(n_min: int = 100, n_max: int = 10_000, count: int = 32) -> list[int]:
    """Their ``np.ceil(np.linspace(n_min, n_max, count))`` (the sizes in their result JSONs)."""
    return [int(v) for v in np.ceil(np.linspace(n_min, n_max, num=count))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    all_ns = peer_sizes()
    ns = all_ns[:: a.every]
    cfg = SelectConfig(k_bars=(4,), ns=tuple(ns), replicates=a.reps, seed=a.seed, n_starts=1, chunk=a.reps)
    t0, w0 = time.process_time(), time.perf_counter()
    per_n, picks = {}, {}
    for n in ns:
        c = time.process_time()
        recs = run_unit(cfg, n, list(range(a.reps)))
        per_n[n] = time.process_time() - c
        picks[n] = [{c2: r["per_kbar"]["4"].get(c2) for c2 in ("DSC", "DSC0", "AIC", "BIC", "ICL")} for r in recs]
        print(f"n = {n}: {per_n[n]:.2f} s core, picks {picks[n]}", flush=True)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    out = {"machine": f"{platform.node()} {os.cpu_count()} cores, shared (load {os.getloadavg()[0]:.1f} at the end)",
           "threads": a.threads, "args": vars(a), "sizes": ns, "all_sizes": all_ns, "core_s_total": cpu, "wall_s_total": wall,
           "core_s_per_replicate_measured_sizes": cpu / a.reps,
           "core_s_per_replicate": cpu / a.reps * sum(all_ns) / sum(ns),
           "core_s_per_replicate_is": "measured" if a.every == 1 else f"estimated: measured x sum(all n) / sum(measured n) = x{sum(all_ns) / sum(ns):.3f}", "core_s_per_size": {str(k): v for k, v in per_n.items()},
           "picks": {str(k): v for k, v in picks.items()}, "peer_median_s_per_replicate": PEER_MEDIAN_S,
           "speedup_vs_peer": PEER_MEDIAN_S / (cpu / a.reps * sum(all_ns) / sum(ns))}
    print(json.dumps({k: out[k] for k in ("core_s_per_replicate", "wall_s_total", "speedup_vs_peer")}))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

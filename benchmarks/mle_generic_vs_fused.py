"""The generic EM (any gate and expert, :mod:`moestat.estimators.mle_generic`) against the fused EM of
the linear softmax gate (:mod:`moestat.estimators.mle_fused`) on model 1 of Nguyen, Nguyen & Ho (2023).

Same data, same starts (the rates sweep's streams, :mod:`benchmarks.model1_batch`): the two must reach
the same fits (log-likelihood rtol 1e-8) and the generic EM should be at most 2x slower.  Each fit is
run once to warm up (``torch.compile`` of the fused pass and of the generic E-step), then timed
``REPEATS`` times, the variants interleaved (the median is reported, every time kept); one torch
thread.  Writes
``benchmarks/mle_generic_vs_fused.json`` (``--json PATH`` elsewhere).

    python benchmarks/mle_generic_vs_fused.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import moestat  # noqa: F401  (before torch: it sets the OpenMP wait policy torch's runtime reads once, moestat.threads)
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model1_batch import model1_batch  # noqa: E402

from moestat.data.gaussian_scenarios import model1_scenario  # noqa: E402
from moestat.estimators.mle import MLEGaussianMoE  # noqa: E402

SIZES = ((1_000, 20), (20_000, 10))  # (n, replicates)
STARTS = 5
REPEATS = 5


def _fit(X, Y, G0, **kw):
    est = MLEGaussianMoE(n_components=2, n_init=STARTS, random_state=0, **kw)
    t0 = time.perf_counter()
    est.fit(X, Y, init=G0)
    return est, time.perf_counter() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=Path(__file__).with_suffix(".json"), help="where to write the results")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sc = model1_scenario("exact")
    rows = []
    for n, reps in SIZES:
        X, Y, G0 = model1_batch(sc, n, reps, seed=2023, init_scale=0.1)
        out = {"n": n, "replicates": reps, "starts": STARTS}
        variants = (("fused", {}), ("fused_eager", {"compile": False}), ("generic", {"generic": True}),
                    ("generic_eager", {"generic": True, "compile": False}))
        for _, kw in variants:
            _fit(X, Y, G0, **kw)  # warm-up at the same size: the compiled passes specialise on it
        times = {name: [] for name, _ in variants}
        for _ in range(REPEATS):  # interleaved, so a change of load hits every variant alike
            for name, kw in variants:
                est, t = _fit(X, Y, G0, **kw)
                times[name].append(t)
                out[name] = {"kernel": est.kernel_, "loglik": est.loglik_.tolist(), "n_iter_mean": float(np.mean(est.n_iter_)),
                             "status": sorted(set(est.status_))}
        for name, _ in variants:
            out[name].update(seconds=float(np.median(times[name])), all_seconds=times[name])
        ref = np.asarray(out["fused"]["loglik"])
        out["max_rel_loglik_diff"] = float(np.max(np.abs(np.asarray(out["generic"]["loglik"]) - ref) / np.abs(ref)))
        out["slowdown_vs_fused"] = out["generic"]["seconds"] / out["fused"]["seconds"]
        # the median of the per-repeat ratios: each pair ran back to back, under the same load
        out["paired_slowdown_vs_fused"] = float(np.median(np.array(times["generic"]) / np.array(times["fused"])))
        out["slowdown_vs_fused_eager"] = out["generic"]["seconds"] / out["fused_eager"]["seconds"]
        out["eager_slowdown_vs_fused_eager"] = out["generic_eager"]["seconds"] / out["fused_eager"]["seconds"]
        rows.append(out)
        print(f"n={n:>7} R={reps:>2} S={STARTS}: fused {out['fused']['seconds']:.2f} s ({out['fused']['kernel']}), "
              f"eager {out['fused_eager']['seconds']:.2f} s, generic {out['generic']['seconds']:.2f} s "
              f"(x{out['slowdown_vs_fused']:.2f}, paired x{out['paired_slowdown_vs_fused']:.2f}, {out['generic']['kernel']}), generic eager {out['generic_eager']['seconds']:.2f} s "
              f"(x{out['eager_slowdown_vs_fused_eager']:.2f} the eager fused); max rel. loglik diff {out['max_rel_loglik_diff']:.1e}", flush=True)
    meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "threads": 1, "repeats": REPEATS, "load_avg_at_end": os.getloadavg()}
    args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

"""The tutorial's own Gaussian MoE (``examples/gaussian_moe_d2.toml``: d = 2, k* = 3, softmax gate, linear
experts, one variance per atom) fitted by moestat's MLE and by R's flexmix from the same starts.

Data and near-truth starts come from the rates sweep's streams (``--seed``, ``--init-scale``, the
values of ``moestat rates``'s defaults), so these are the data sets a ``moestat rates --scenario
examples/gaussian_moe_d2.toml --estimator mle`` run fits.  flexmix (``FLXMRglm`` experts,
``FLXPmultinom`` concomitant) starts from the start's responsibilities, which is moestat's first
E-step (:mod:`moestat.estimators.flexmix_reference`).  Writes ``benchmarks/own_gmoe_vs_flexmix.json``.

    python benchmarks/own_gmoe_vs_flexmix.py --n 2000 --reps 10
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from moestat.data.scenario_files import load_scenario
from moestat.estimators.flexmix_reference import flexmix_available, flexmix_fit
from moestat.estimators.mle import MLEGaussianMoE
from moestat.model.mixing import MixingMeasure
from moestat.rates.sweep import replicate_streams

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init-scale", type=float, default=0.05)
    a = p.parse_args(argv)
    if not flexmix_available():
        print("Rscript with flexmix is not installed")
        return 1
    sc = load_scenario(str(ROOT / "examples" / "gaussian_moe_d2.toml"))
    rows = []
    for r in range(a.reps):
        data_ss, init_ss = replicate_streams(a.seed, a.n, r)
        X, Y = sc.sample(a.n, np.random.default_rng(data_ss))
        G0 = sc.near_truth_start(a.init_scale, np.random.default_rng(init_ss))
        est = MLEGaussianMoE.for_scenario(sc, max_iter=1000, random_state=0).fit(X, Y, init=G0)
        fx = flexmix_fit(X, Y, G0)
        ll_m = float(est.loglik_[0])
        # flexmix's parameters scored by moestat's likelihood (its own figure is reported too)
        ll_fx = float(sc.model.loglik(X, Y, fx["params"]))
        rows.append({"replicate": r, "moestat": ll_m, "flexmix": fx["loglik"], "flexmix_rescored": ll_fx,
                     "moestat_minus_flexmix": ll_m - fx["loglik"], "status": est.status_[0], "flexmix_iter": fx["n_iter"]})
        print(f"rep {r}: moestat {ll_m:.6f} ({est.status_[0]})  flexmix {fx['loglik']:.6f} (rescored {ll_fx:.6f})  "
              f"diff {ll_m - fx['loglik']:+.2e}", flush=True)
    d = np.array([row["moestat_minus_flexmix"] for row in rows])
    summary = {"n": a.n, "reps": a.reps, "seed": a.seed, "init_scale": a.init_scale,
               "moestat_ge_flexmix": int((d >= -1e-8 * np.abs([row['flexmix'] for row in rows])).sum()),
               "min_diff": float(d.min()), "max_diff": float(d.max())}
    print(summary)
    (Path(__file__).with_suffix(".json")).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

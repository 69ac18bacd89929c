"""Every recorded fit of a joint-GLLiM run against the truth's log-likelihood on the same data.

Refits each (n, replicate) of a ``moestat rates`` / ``moestat reproduce`` run folder of a joint
GLLiM scenario (``[input] law = "gate"``) exactly as the sweep did -- the same data and start
streams (:func:`moestat.rates.sweep.replicate_streams`), the same estimator seed -- checks that the
refit's D-bar equals the recorded one (``extras.csv``), and writes, per fit, the joint
log-likelihood of the fit and of the true parameters on that sample
(:func:`moestat.estimators.gllim.gllim_loglik`) and their difference.  A fit below the truth's
log-likelihood is not the maximum-likelihood estimate the theorem bounds.

Usage::

    python simulations/catalogue/gllim_fit_vs_truth.py RUN_DIR --json OUT.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd


def main() -> None:
    from moestat.model.mixing import MixingMeasure
    from moestat.rates.config import RatesConfig
    from moestat.rates.resolve import build_estimator, build_scenario
    from moestat.rates.sweep import WorkUnit, _start, compute_losses, make_units, replicate_streams

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder (results.csv, extras.csv, summary.json)")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    summary = json.loads((args.run / "summary.json").read_text())
    cfg = RatesConfig.from_dict({k: v for k, v in summary["config"].items() if k not in ("n_jobs",)})
    extras = pd.read_csv(args.run / "extras.csv").set_index(["n", "replicate"])
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    rows = []
    with threadpool_limits(limits=1):
        for unit in make_units(cfg):
            unit: WorkUnit
            sc = build_scenario(unit.scenario_key)
            Xs, Ys, starts = [], [], []
            for r in unit.replicates:
                data_ss, init_ss = replicate_streams(unit.seed, unit.n, r)
                X, Y = sc.sample(unit.n, np.random.default_rng(data_ss))
                Xs.append(X)
                Ys.append(Y)
                starts.append(_start(unit, sc, unit.n, np.random.default_rng(init_ss), X, Y))
            X, Y = np.stack(Xs), np.stack(Ys)
            est_ss = np.random.SeedSequence(unit.seed, spawn_key=(unit.n, unit.replicates[0], 2))
            est = build_estimator(unit.estimator, sc, unit.max_iter, int(est_ss.generate_state(1)[0]), unit.device)
            est.fit(X, Y, init=MixingMeasure.stack(starts))
            dbar = compute_losses(sc, est.params_, sc.holdout(unit.holdout))["Dbar"]
            ll_true = sc.loglik(X, Y)
            for i, r in enumerate(unit.replicates):
                rec = float(extras.loc[(unit.n, r), "Dbar"])
                rows.append({"n": unit.n, "replicate": r, "status": est.status_[i], "n_iter": int(est.n_iter_[i]),
                             "best_start": int(est.best_start_[i]), "loglik": float(est.loglik_[i]),
                             "loglik_truth": float(ll_true[i]), "diff": float(est.loglik_[i] - ll_true[i]),
                             "n_floored": int(est.n_floored_[i]), "Dbar": float(dbar[i]), "Dbar_recorded": rec,
                             "same_as_recorded": bool(np.isclose(dbar[i], rec, rtol=1e-9, atol=0))})
                print(f"n={unit.n} rep {r}: {est.status_[i]:>8} iters {est.n_iter_[i]:>5} start {est.best_start_[i]} "
                      f"loglik - truth {rows[-1]['diff']:+.3f}  Dbar {dbar[i]:.4g} (recorded {rec:.4g})", flush=True)
    df = pd.DataFrame(rows).sort_values(["n", "replicate"])
    out = {"run": str(args.run), "fits": len(df), "above_truth": int((df["diff"] >= 0).sum()),
           "below_truth": int((df["diff"] < 0).sum()), "min_diff": float(df["diff"].min()),
           "converged": int((df["status"] == "tol").sum()), "all_same_as_recorded": bool(df["same_as_recorded"].all()),
           "rows": df.to_dict(orient="records")}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{out['above_truth']}/{out['fits']} fits at or above the truth's log-likelihood (smallest difference "
          f"{out['min_diff']:+.3f}); {out['converged']} converged; refits equal the record: {out['all_same_as_recorded']}")


if __name__ == "__main__":
    main()

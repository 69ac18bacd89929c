"""Every recorded fit of a joint-GLLiM run against the truth's log-likelihood on the same data.

Refits each (n, replicate) of a ``moestat rates`` / ``moestat reproduce`` run folder of a joint
GLLiM scenario (``[input] law = "gate"``) exactly as the sweep did -- the same data and start
streams (:func:`moestat.rates.sweep.replicate_streams`), the same estimator seed -- checks that the
refit's D-bar equals the recorded one (``extras.csv``), and writes, per fit, the joint
log-likelihood of the fit and of the true parameters on that sample
(:func:`moestat.estimators.gllim.gllim_loglik`) and their difference.  A fit below the truth's
log-likelihood is not the maximum-likelihood estimate the theorem bounds.

Usage::

    python studies/tools/gllim_fit_vs_truth.py RUN_DIR --json OUT.json [--n-jobs 2]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def _fit_unit(unit) -> list[dict]:
    """Refit one work unit as :func:`moestat.rates.sweep.run_unit` does; one row per replicate."""
    import torch
    from threadpoolctl import threadpool_limits

    from moestat.rates.resolve import build_scenario
    from moestat.rates.sweep import compute_losses, draw_unit
    from moestat.rates.truth_check import unit_estimator

    torch.set_num_threads(1)
    with threadpool_limits(limits=1):
        sc = build_scenario(unit.scenario_key)
        X, Y, starts = draw_unit(unit, sc)  # the sweep's own data streams and starts
        est = unit_estimator(unit, sc, 2)  # stream 2: the reported fit's
        est.fit(X, Y, init=starts)
        dbar = compute_losses(sc, est.params_, sc.holdout(unit.holdout))["Dbar"]
        ll_true = sc.loglik(X, Y)
    return [{"n": unit.n, "replicate": r, "status": est.status_[i], "n_iter": int(est.n_iter_[i]),
             "best_start": int(est.best_start_[i]), "loglik": float(est.loglik_[i]), "loglik_truth": float(ll_true[i]),
             "diff": float(est.loglik_[i] - ll_true[i]), "n_floored": int(est.n_floored_[i]), "Dbar": float(dbar[i])}
            for i, r in enumerate(unit.replicates)]


def main(argv: list[str] | None = None) -> int:
    from joblib import Parallel, delayed

    from moestat.cli.common import ArgumentParser, positive_int
    from moestat.rates.config import RatesConfig
    from moestat.rates.sweep import make_units

    ap = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("run", type=Path, help="a run folder (results.csv, extras.csv, summary.json)")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--n-jobs", type=positive_int, default=1, help="work units refitted in parallel (results do not depend on it)")
    args = ap.parse_args(argv)
    missing = [f for f in ("summary.json", "extras.csv") if not (args.run / f).is_file()]
    if missing:
        ap.error(f"{args.run}: not a run folder (missing {', '.join(missing)})")
    summary = json.loads((args.run / "summary.json").read_text())
    cfg = RatesConfig.from_dict({k: v for k, v in summary["config"].items() if k not in ("n_jobs",)})
    extras = pd.read_csv(args.run / "extras.csv").set_index(["n", "replicate"])
    rows = [row for rows in Parallel(n_jobs=args.n_jobs)(delayed(_fit_unit)(u) for u in make_units(cfg)) for row in rows]
    for row in rows:
        rec = float(extras.loc[(row["n"], row["replicate"]), "Dbar"])
        row.update(Dbar_recorded=rec, same_as_recorded=bool(np.isclose(row["Dbar"], rec, rtol=1e-9, atol=0)))
        print(f"n={row['n']} rep {row['replicate']}: {row['status']:>8} iters {row['n_iter']:>5} start {row['best_start']} "
              f"floored {row['n_floored']:>4} loglik - truth {row['diff']:+.3f}  Dbar {row['Dbar']:.4g} (recorded {rec:.4g})")
    df = pd.DataFrame(rows).sort_values(["n", "replicate"])
    out = {"run": str(args.run), "fits": len(df), "above_truth": int((df["diff"] >= 0).sum()),
           "below_truth": int((df["diff"] < 0).sum()), "min_diff": float(df["diff"].min()),
           "converged": int((df["status"] == "tol").sum()), "floor_bound": int((df["n_floored"] > 0).sum()),
           "all_same_as_recorded": bool(df["same_as_recorded"].all()), "rows": df.to_dict(orient="records")}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{out['above_truth']}/{out['fits']} fits at or above the truth's log-likelihood (smallest difference "
          f"{out['min_diff']:+.3f}); {out['converged']} converged; a floor bound in {out['floor_bound']}; refits equal "
          f"the record: {out['all_same_as_recorded']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

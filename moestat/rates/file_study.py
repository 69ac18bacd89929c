"""A rate study of a file scenario: fit over a grid of ``n``, report slopes against predictions.

``python -m moestat.rates.file_study SCENARIO [--n-min ... --n-max ... --n-points ... --reps ...]``
where ``SCENARIO`` is ``FILE.toml`` or ``path/file.py:function``
(:mod:`moestat.data.scenario_files`).  For each ``n`` the ``R`` replicates are fitted in one
batch by the least-squares estimator (:class:`~moestat.estimators.lse.LeastSquaresMoE`; analytic
kernel for built-ins, :mod:`torch.func` otherwise) from near-truth starts (the truth plus
``N(0, init_scale^2)`` noise, recorded), every loss the scenario declares is computed
(:func:`moestat.rates.sweep.compute_losses`), and each loss's log-log slope with its 95%
interval (:func:`moestat.rates.fit.slope_with_interval`) is compared with the scenario's
predicted exponent (:func:`moestat.rates.fit.verdict`).

Seeds: one :class:`numpy.random.SeedSequence` child per (``n``, replicate) of ``--seed``, so
the data of a replicate do not depend on the grid or on ``R``.  Fits that do not converge are
counted and kept (never dropped).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import torch

__all__ = ["run_file_study", "main"]


def run_file_study(
    scenario, ns, reps: int = 10, seed: int = 0, init_scale: float = 0.05, max_iter: int = 200
) -> dict[str, Any]:
    """Fit ``reps`` replicates at each ``n`` and fit the rate of every declared loss.

    Parameters
    ----------
    scenario : FileScenario
    ns : sequence of int
        Sample sizes (at least 3).
    reps : int
        Replicates per sample size.
    seed : int
        Root of the seed tree.
    init_scale : float
        Standard deviation of the near-truth start's noise.
    max_iter : int
        Levenberg-Marquardt iterations.

    Returns
    -------
    dict
        ``rows`` (per n: losses ``[R]``, converged count), ``rates`` (per loss: slope, CI,
        predicted, verdict) and ``seconds``.
    """
    from moestat.estimators.lse import LeastSquaresMoE
    from moestat.model.mixing import MixingMeasure
    from moestat.rates.fit import slope_with_interval, verdict
    from moestat.rates.sweep import compute_losses

    t0 = time.perf_counter()
    root = np.random.SeedSequence(seed)
    per_n = root.spawn(len(ns))
    X_hold = scenario.holdout()
    rows = []
    for n, ss in zip(ns, per_n):
        streams = [np.random.default_rng(c) for c in ss.spawn(reps)]
        data = [scenario.sample(int(n), g) for g in streams]
        X = torch.as_tensor(np.stack([d[0] for d in data]))
        Y = torch.as_tensor(np.stack([d[1] for d in data]))
        start = MixingMeasure.stack([scenario.near_truth_start(init_scale, g) for g in streams])
        est = LeastSquaresMoE(scenario.fit_model, scenario.k_fit, box=scenario.box, init=start, max_iter=max_iter)
        est.fit(X, Y)
        losses = compute_losses(scenario, est.params_, X_hold)
        rows.append({"n": int(n), "converged": int(est.converged_.sum()), "status": list(est.status_),
                     "losses": {k: np.asarray(v).tolist() for k, v in losses.items()}})
    rates = {}
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(len(ns) + 1)[-1])
    for name in rows[0]["losses"]:
        vals = [np.asarray(r["losses"][name]) for r in rows]
        s = slope_with_interval(list(ns), vals, rng)
        pred = scenario.predicted.get(name) if name != "regression_l2" else scenario.predicted.get(name, -0.5)
        rates[name] = {"slope": s["slope"], "ci_low": s["ci_low"], "ci_high": s["ci_high"], "predicted": pred,
                       **verdict(pred, s["ci_low"], s["ci_high"])}
    return {"rows": rows, "rates": rates, "seconds": time.perf_counter() - t0}


def format_rates(result: dict[str, Any]) -> str:
    """A plain-text table: loss, slope, 95% CI, predicted, verdict."""
    lines = [f"{'loss':<16} {'slope':>7}  {'95% CI':<18} {'pred':>6}  verdict", "-" * 62]
    for name, r in result["rates"].items():
        pred = "-" if r["predicted"] is None else f"{r['predicted']:.2f}"
        v = "-" if r["consistent"] is None else ("consistent" if r["consistent"] else "INCONSISTENT")
        lines.append(f"{name:<16} {r['slope']:>7.3f}  [{r['ci_low']:.3f}, {r['ci_high']:.3f}]  {pred:>6}  {v}")
    fits = sum(len(r["status"]) for r in result["rows"])
    conv = sum(r["converged"] for r in result["rows"])
    lines.append(f"fits: {fits}, converged {conv}; {result['seconds']:.1f} s")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Command line; see the module docstring.  Exit 2 on a bad scenario (one line)."""
    from moestat.data.scenario_files import ScenarioFileError, load_scenario

    p = argparse.ArgumentParser(prog="python -m moestat.rates.file_study", description="Rate study of a scenario file.")
    p.add_argument("scenario", help="FILE.toml or path/file.py:function")
    p.add_argument("--n-min", type=int, default=500, help="smallest n (default 500)")
    p.add_argument("--n-max", type=int, default=8000, help="largest n (default 8000)")
    p.add_argument("--n-points", type=int, default=5, help="log-spaced sample sizes (default 5)")
    p.add_argument("--reps", type=int, default=8, help="replicates per n (default 8)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--init-scale", type=float, default=0.05, help="near-truth start noise (default 0.05)")
    p.add_argument("--json", default=None, help="also write the result as JSON to this file")
    a = p.parse_args(argv)
    if a.n_points < 3 or a.n_min < 10 or a.n_max <= a.n_min or a.reps < 2 or a.seed < 0 or not a.init_scale >= 0:
        print("error: need --n-points >= 3, 10 <= --n-min < --n-max, --reps >= 2, --seed >= 0, --init-scale >= 0", file=sys.stderr)
        return 2
    try:
        sc = load_scenario(a.scenario)
    except ScenarioFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    ns = np.unique(np.round(np.geomspace(a.n_min, a.n_max, a.n_points)).astype(int)).tolist()
    res = run_file_study(sc, ns, a.reps, a.seed, a.init_scale)
    print(f"scenario {sc.name}: {sc.model.describe()}, k*={sc.k_true}, k_fit={sc.k_fit}, n={ns}, reps={a.reps}")
    print(format_rates(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Theorem 5 of Nguyen et al. (2024): perturbed router, over-specified (k = k* + 1), strongly identifiable experts.

Predictions (slopes of log mean loss on log n):

- ``thm5_over_D2``: the Voronoi loss D_2 (eq. 13): -1/2;
- ``thm5_param_single``: the plain parameter error of atoms alone in their Voronoi cell: -1/2;
- ``thm5_param_multi``: the plain parameter error of atoms sharing a cell: -1/4;
- ``thm5_weighted_single`` / ``thm5_weighted_multi``: the mass-weighted cell errors that D2 is made of
  (``sum_{A_j} exp(beta0_i) ||omega_i - omega*_j||^e``, ``e = 1`` one-atom cells, ``e = 2``
  multi-atom cells; :mod:`moestat.losses.cell_errors`): -1/2 each.  The plain per-atom rates
  follow from these only where the cell's masses stay bounded away from 0.

Rule for each: the prediction inside the 95% CI widened by 0.15, and the verdict category
``consistent`` (:mod:`moestat.rates.verdicts`).

Diagnostics (issue 34; reported, they decide nothing): the local slopes of the mean over the
lower and the upper half of the sample sizes (``local_slopes``: curvature of the log-log curve
shows a pre-asymptotic regime), the slope of the per-n *median* (robust to a few far-off fits)
and the fit-vs-truth objective certificate (:mod:`moestat.rates.truth_check`: how many fits are
not worse than the true parameters on their own data; one that is worse did not reach the
least-squares estimate).  Where a
check is not passed these numbers go into its note.
"""

from __future__ import annotations

from moestat.experiments.theory.framework import CheckResult, Context, find_fit, per_n_means, slope_verdict
from moestat.experiments.theory.grids import TOLERANCE, over_run
from moestat.rates.extras import merge_extras

NAMES = ["thm5_over_D2", "thm5_param_single", "thm5_param_multi", "thm5_weighted_single", "thm5_weighted_multi"]


def _diagnostics(ctx: Context, key: str, loss: str) -> dict:
    """Local slopes (lower / upper half of n), the median's slope and the fit-vs-truth certificate."""
    from pathlib import Path

    import numpy as np
    import pandas as pd


    path = Path(ctx.out_dir) / "rates" / key / "results.csv"
    if not path.exists():
        return {}
    df = merge_extras(pd.read_csv(path), path.parent / "extras.csv")
    sub = df[df["router"] == "perturbed"]
    if loss not in sub or sub[loss].isna().all():
        return {}
    g = sub.groupby("n")[loss]
    ns, mean, med = np.array(g.mean().index, float), g.mean().to_numpy(), g.median().to_numpy()
    if ns.size < 3:
        return {}

    def sl(x, y):
        ok = (y > 0) & np.isfinite(y)
        return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0]) if ok.sum() >= 2 else float("nan")

    h = (ns.size + 1) // 2  # overlapping halves for an odd count: 5 sizes -> first 3 and last 3
    out = {"local_slopes": {f"n <= {int(ns[h - 1])}": sl(ns[:h], mean[:h]), f"n >= {int(ns[-h])}": sl(ns[-h:], mean[-h:])},
           "median_slope": sl(ns, med), "median_by_n": {int(n): float(v) for n, v in zip(ns, med)}}
    if "truth_check" in sub:
        tc = sub["truth_check"].astype(str)
        out["fits_not_worse_than_truth"] = f"{int((tc == 'above').sum() + (tc == 'answered').sum())}/{len(tc)}"  # moestat.rates.truth_check
    return out


def _note(d: dict) -> str:
    if not d:
        return ""
    lo, hi = list(d["local_slopes"].items())
    txt = (f"measured: local slope {lo[1]:.2f} over {lo[0]}, {hi[1]:.2f} over {hi[0]}; median slope {d['median_slope']:.2f}")
    if "fits_not_worse_than_truth" in d:
        txt += f"; fits not worse than the truth's objective {d['fits_not_worse_than_truth']}"
    return txt


def run(ctx: Context) -> list[CheckResult]:
    key, s = over_run(ctx)
    out = []
    for name, loss, pred, what in (
        ("thm5_over_D2", "voronoi", -0.5, "D2(G_hat, G*) = O_P((log n / n)^1/2)"),
        ("thm5_param_single", "param_single", -0.5, "atoms alone in their cell: ||omega_hat - omega*|| = O_P((log n / n)^1/2)"),
        ("thm5_param_multi", "param_multi", -0.25, "atoms sharing a cell: ||omega_hat - omega*|| = O_P((log n / n)^1/4)"),
        ("thm5_weighted_single", "weighted_single", -0.5, "one-atom cells: sum exp(beta0_i) ||omega_i - omega*_j|| = O_P((log n / n)^1/2)"),
        ("thm5_weighted_multi", "weighted_multi", -0.5, "multi-atom cells: sum exp(beta0_i) ||omega_i - omega*_j||^2 = O_P((log n / n)^1/2)"),
    ):
        diag = _diagnostics(ctx, key, loss)
        res = slope_verdict(name, f"Theorem 5: {what}, perturbed router, over-specified, GELU experts",
                            find_fit(s, "perturbed", loss), pred, TOLERANCE,
                            {"mean_by_n": per_n_means(s, ctx.out_dir, key, "perturbed", loss), **diag})
        if not res.passed and diag:
            res.note = (res.note + "; " if res.note else "") + _note(diag)
        out.append(res)
    return out

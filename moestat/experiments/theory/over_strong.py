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
"""

from __future__ import annotations

from moestat.experiments.theory.framework import CheckResult, Context, find_fit, per_n_means, slope_verdict
from moestat.experiments.theory.grids import TOLERANCE, over_run

NAMES = ["thm5_over_D2", "thm5_param_single", "thm5_param_multi", "thm5_weighted_single", "thm5_weighted_multi"]


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
        out.append(slope_verdict(name, f"Theorem 5: {what}, perturbed router, over-specified, GELU experts",
                                 find_fit(s, "perturbed", loss), pred, TOLERANCE,
                                 {"mean_by_n": per_n_means(s, ctx.out_dir, key, "perturbed", loss)}))
    return out

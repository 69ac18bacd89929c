"""Theorem 5 of Nguyen et al. (2024): perturbed router, over-specified (k = k* + 1), strongly identifiable experts.

Predictions (slopes of log mean loss on log n):

- ``thm5_over_D2``: the Voronoi loss D_2 (eq. 13): -1/2;
- ``thm5_param_single``: the plain parameter error of atoms alone in their Voronoi cell: -1/2;
- ``thm5_param_multi``: the plain parameter error of atoms sharing a cell: -1/4.

Rule for each: the prediction inside the 95% CI widened by 0.15.
"""

from __future__ import annotations

from moestat.experiments.theory.framework import CheckResult, Context, find_fit, per_n_means, slope_verdict
from moestat.experiments.theory.grids import TOLERANCE, over_run

NAMES = ["thm5_over_D2", "thm5_param_single", "thm5_param_multi"]


def run(ctx: Context) -> list[CheckResult]:
    key, s = over_run(ctx)
    out = []
    for name, loss, pred, what in (
        ("thm5_over_D2", "voronoi", -0.5, "D2(G_hat, G*) = O_P((log n / n)^1/2)"),
        ("thm5_param_single", "param_single", -0.5, "atoms alone in their cell: ||omega_hat - omega*|| = O_P((log n / n)^1/2)"),
        ("thm5_param_multi", "param_multi", -0.25, "atoms sharing a cell: ||omega_hat - omega*|| = O_P((log n / n)^1/4)"),
    ):
        out.append(slope_verdict(name, f"Theorem 5: {what}, perturbed router, over-specified, GELU experts",
                                 find_fit(s, "perturbed", loss), pred, TOLERANCE,
                                 {"mean_by_n": per_n_means(s, ctx.out_dir, key, "perturbed", loss)}))
    return out

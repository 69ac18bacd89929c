"""Theorem 6 (App. A) of Nguyen et al. (2024): perturbed router, exact-specified, weakly identifiable experts.

Prediction: the Voronoi loss D_3 (eq. 16) decays like n^{-1/2}: slope -1/2.  GELU experts are
weakly identifiable (see :mod:`moestat.model.identifiability`).  Rule: -1/2 inside the 95% CI
(:func:`moestat.rates.verdicts.judge_interval`; excluded within 0.15: near, not passed).
"""

from __future__ import annotations

from moestat.theorems.checks.framework import CheckResult, Context, find_fit, per_n_means, slope_verdict
from moestat.theorems.checks.grids import TOLERANCE, exact_run

NAMES = ["thm6_exact_D3_perturbed"]


def run(ctx: Context) -> list[CheckResult]:
    key, s = exact_run(ctx)
    extra = {
        "mean_by_n": per_n_means(s, ctx.out_dir, key, "perturbed", "voronoi"),
        "direction_only_mean_by_n": per_n_means(s, ctx.out_dir, key, "perturbed", "voronoi_direction"),
        "param_single_mean_by_n": per_n_means(s, ctx.out_dir, key, "perturbed", "param_single"),
    }
    d = find_fit(s, "perturbed", "voronoi_direction")
    if d is not None:
        extra["direction_only_slope"] = d.get("slope")
    return [slope_verdict("thm6_exact_D3_perturbed",
                          "Theorem 6: D3(G_hat, G*) = O_P((log n / n)^1/2), perturbed router, exact, weakly identifiable (GELU) experts",
                          find_fit(s, "perturbed", "voronoi"), -0.5, TOLERANCE, extra)]

"""The null-estimator control: an unfitted start has slope 0.

The null estimator returns its near-truth start (noise of constant scale), so its Voronoi loss
cannot improve with n.  A non-zero slope would reveal an artefact of the pipeline (e.g. an
n-dependent start, as in the peer code's ``0.005 n^-0.083`` schedule).  Prediction: slope 0;
rule: 0 inside the 95% CI (:func:`moestat.rates.verdicts.judge_interval`; excluded within 0.15: near, not passed).
"""

from __future__ import annotations

from moestat.theorems.checks.framework import CheckResult, Context, find_fit, per_n_means, slope_verdict
from moestat.theorems.checks.grids import TOLERANCE, null_run

NAMES = ["null_control_slope"]


def run(ctx: Context) -> list[CheckResult]:
    key, s = null_run(ctx)
    return [slope_verdict("null_control_slope", "Control: the unfitted (null) estimator's Voronoi loss has slope 0",
                          find_fit(s, "perturbed", "voronoi"), 0.0, TOLERANCE,
                          {"mean_by_n": per_n_means(s, ctx.out_dir, key, "perturbed", "voronoi")})]

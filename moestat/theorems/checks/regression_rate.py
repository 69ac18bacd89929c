"""Theorems 1 and 4 of Nguyen et al. (2024): the regression L2 error decays like (log n / n)^{1/2}.

Prediction: slope -1/2 of log(mean L2 error) on log n (the log factor changes the slope over
our grids by less than 0.05), for the vanilla cosine router (Thm 1) and the perturbed router
(Thm 4).  Rule: -1/2 inside the slope's 95% CI (:func:`moestat.rates.verdicts.judge_interval`; excluded within 0.15: near).
"""

from __future__ import annotations

from moestat.theorems.checks.framework import CheckResult, Context, find_fit, per_n_means, slope_verdict
from moestat.theorems.checks.grids import TOLERANCE, exact_run

NAMES = ["thm1_regression_cosine", "thm4_regression_perturbed"]


def run(ctx: Context) -> list[CheckResult]:
    key, s = exact_run(ctx)
    out = []
    for name, router, thm in (("thm1_regression_cosine", "cosine", "Theorem 1"), ("thm4_regression_perturbed", "perturbed", "Theorem 4")):
        out.append(slope_verdict(
            name, f"{thm}: ||g_hat - g*||_L2 = O_P((log n / n)^1/2), {router} router, exact-specified",
            find_fit(s, router, "regression_l2"), -0.5, TOLERANCE,
            {"mean_by_n": per_n_means(s, ctx.out_dir, key, router, "regression_l2")}))
    return out

"""Theorems 2 and 3 of Nguyen et al. (2024): the vanilla cosine router has no polynomial rate in the paper's loss.

The paper's loss D_{1,r} compares ``beta1`` itself.  By PDE (4) the regression function depends
on ``beta1`` only through ``beta1 / ||beta1||``, so the norm is never corrected by the data:
started near the truth with constant noise, the radial error stays at the size of the start
noise and the loss flattens.  The direction-only loss (``beta1 / ||beta1||`` in place of
``beta1``) measures what the data can identify and may decay polynomially.

Prediction: the slope of the paper's loss is shallower than any polynomial rate the perturbed
router achieves; operationally (written before any run) the measured slope is above -0.25
(the reference digest's acceptance band).  The direction-only slope is reported, not judged.
The engine's verdict category (:mod:`moestat.rates.verdicts`) is attached and may only tighten
the rule: a pass needs the category ``consistent`` or ``floor``.
"""

from __future__ import annotations

from moestat.experiments.theory.framework import CheckResult, Context, apply_category, find_fit, per_n_means, verdict
from moestat.experiments.theory.grids import exact_run, over_run

NAMES = ["thm2_vanilla_exact_slow", "thm3_vanilla_over_slow"]
THRESHOLD = -0.25


def _one(ctx: Context, name: str, thm: str, key: str, s: dict) -> CheckResult:
    fit = find_fit(s, "cosine", "voronoi")
    dirf = find_fit(s, "cosine", "voronoi_direction")
    rule = f"slope of the paper's loss > {THRESHOLD} (no polynomial rate visible)"
    extra = {
        "mean_by_n": per_n_means(s, ctx.out_dir, key, "cosine", "voronoi"),
        "direction_only_slope": None if dirf is None else dirf.get("slope"),
        "direction_only_ci": None if dirf is None else [dirf.get("ci_low"), dirf.get("ci_high")],
        "direction_only_mean_by_n": per_n_means(s, ctx.out_dir, key, "cosine", "voronoi_direction"),
        "perturbed_slope_same_data": (find_fit(s, "perturbed", "voronoi") or {}).get("slope"),
    }
    if fit is None or fit.get("slope") is None:
        return CheckResult(name, "", None, None, None, None, False, "failed", rule, "no slope in the summary", extra)
    slope = float(fit["slope"])
    # a floor is the "no polynomial rate" the theorems predict; inconclusive/pre-asymptotic data cannot pass
    return apply_category(verdict(name, f"{thm}: vanilla cosine router, paper's Voronoi loss slower than any polynomial ({key.split('-')[-1]}-specified)",
                   THRESHOLD, slope, fit.get("ci_low"), fit.get("ci_high"), slope > THRESHOLD, rule, details=extra), fit,
                          passing=("consistent", "floor"))


def run(ctx: Context) -> list[CheckResult]:
    k1, s1 = exact_run(ctx)
    out = [_one(ctx, "thm2_vanilla_exact_slow", "Theorem 2", k1, s1)]
    k2, s2 = over_run(ctx)
    out.append(_one(ctx, "thm3_vanilla_over_slow", "Theorem 3", k2, s2))
    return out

"""The one interval rule (moestat.rates.verdicts.judge_interval) and every door that decides by it.

Consistent only when the 95% interval covers the prediction; ``near`` when it misses it within the
tolerance; an upper bound tested one-sided; intervals wider than the cap inconclusive; a rate with a
log factor covering the slopes between ``n^-r`` and ``(log n / n)^r`` over the window.
"""

from __future__ import annotations

import pytest
import ast
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from moestat.rates.verdicts import (DEFAULT_HALFWIDTH, DEFAULT_TOLERANCE, MAX_CI_WIDTH, judge_interval, log_factor_slope,
                                    prediction_interval)

ROOT = Path(__file__).resolve().parents[2]
NS = [1000, 2000, 4000, 8000, 16000, 32000]

exponents = st.sampled_from([0.0, -0.125, -0.25, -0.5, -1.0]) | st.floats(-1.5, 0.5)
lows = st.floats(-1.5, 0.5)
widths = st.floats(0.0, 0.6)
tols = st.floats(0.0, 0.3)


# ---- the rule itself ------------------------------------------------------------------------
@given(p=exponents, lo=lows, w=widths, tol=tols)
def test_two_sided_never_consistent_when_the_interval_excludes_the_prediction(p, lo, w, tol):
    hi = lo + w
    r = judge_interval(p, lo, hi, tolerance=tol)
    if p < lo or p > hi:
        assert r["category"] != "consistent", r
    elif w <= MAX_CI_WIDTH:
        assert r["category"] == "consistent", r


@given(p=exponents, lo=lows, w=widths, tol=tols)
def test_an_upper_bound_is_never_contradicted_by_an_interval_reaching_its_steep_side(p, lo, w, tol):
    hi = lo + w
    r = judge_interval(p, lo, hi, sided="upper", tolerance=tol)
    assert r["sided"] == "upper"
    if lo <= p:  # the interval reaches the bound or lies steeper than it
        assert r["category"] not in ("inconsistent", "near"), r
        if w <= MAX_CI_WIDTH:
            assert r["category"] == "consistent", r
    elif w <= MAX_CI_WIDTH:  # wholly on the slow side: near or inconsistent, by the band
        assert r["category"] == ("near" if lo - p <= tol else "inconsistent"), r


@given(p=exponents, lo=lows, w=widths, tol=tols, sided=st.sampled_from(["two", "upper"]))
def test_near_only_within_the_band(p, lo, w, tol, sided):
    hi = lo + w
    r = judge_interval(p, lo, hi, sided=sided, tolerance=tol)
    gap = max(lo - p, 0.0) if sided == "upper" else max(lo - p, p - hi, 0.0)
    if r["category"] == "near":
        assert 0 < gap <= tol and not r["covers"]
    if r["category"] == "inconsistent":
        assert gap > tol
    if w <= MAX_CI_WIDTH and 0 < gap <= tol:
        assert r["category"] == "near"


@given(p=exponents, lo=lows, w=st.floats(0.0, 2.0), sided=st.sampled_from(["two", "upper"]))
def test_inconclusive_above_the_width_cap(p, lo, w, sided):
    r = judge_interval(p, lo, lo + w, sided=sided)
    if w > MAX_CI_WIDTH:
        assert r["category"] == "inconclusive"
        assert f"{w:.2f} wide" in r["reason"] and f"cap {MAX_CI_WIDTH:g}" in r["reason"]
    else:
        assert r["category"] in ("consistent", "near", "inconsistent")


def test_the_cap_tells_adjacent_exponents_apart_and_the_plan_target_fits_inside():
    # an interval that could hold both -1/2 and -1/4 is not allowed to call either consistent
    assert MAX_CI_WIDTH <= 0.5 - 0.25
    assert judge_interval(-0.5, -0.52, -0.23)["category"] == "inconclusive"
    # the planning target (half-width 0.05) gives intervals the cap accepts
    assert 2 * DEFAULT_HALFWIDTH < MAX_CI_WIDTH


def test_the_audit_example_is_near_not_consistent():
    r = judge_interval(-0.5, -0.40, -0.24)
    assert r["category"] == "near"
    assert "excludes n^-0.5 by 0.10 on the slow side" in r["reason"] and "near, not consistent" in r["reason"]
    assert judge_interval(-0.5, -0.40, -0.24, tolerance=0.05)["category"] == "inconsistent"


def test_an_upper_bound_says_why_a_steeper_slope_is_consistent():
    r = judge_interval(-0.25, -0.60, -0.45, sided="upper")
    assert r["category"] == "consistent"
    assert "steeper than the upper bound n^-0.25: consistent with it" in r["reason"]
    # the same interval against a two-sided -1/4 is beyond the band
    assert judge_interval(-0.25, -0.60, -0.45)["category"] == "inconsistent"
    # a shared-cell rate bounded by n^-1/8 measured at -0.28: consistent with the bound, not through a band
    assert judge_interval(-0.125, -0.36, -0.20, sided="upper")["category"] == "consistent"


def test_sided_must_be_declared_as_two_or_upper():
    import pytest

    with pytest.raises(ValueError, match="sided"):
        judge_interval(-0.5, -0.6, -0.4, sided="lower")
    assert judge_interval(None, -0.6, -0.4)["category"] is None


# ---- a rate with a log factor -----------------------------------------------------------------
def test_log_factor_slope_is_the_ols_slope_of_the_rate_over_the_window():
    x = np.log(np.asarray(NS, float))
    y = 0.5 * (np.log(x) - x)  # log (log n / n)^{1/2}
    assert math.isclose(log_factor_slope(-0.5, NS), float(np.polyfit(x, y, 1)[0]), rel_tol=1e-12)
    steep, flat = prediction_interval(-0.5, log_factor=True, ns=NS)
    assert steep == -0.5 and -0.5 < flat < -0.4


def test_a_rate_with_a_log_factor_covers_the_slopes_between_its_two_forms():
    steep, flat = prediction_interval(-0.5, log_factor=True, ns=NS)
    # an interval between the two slopes, missing -1/2 itself: consistent with (log n / n)^{1/2}
    lo, hi = steep + 0.01, flat - 0.01
    assert lo > steep
    r = judge_interval(-0.5, lo, hi, log_factor=True, ns=NS)
    assert r["category"] == "consistent" and "(log n / n)^0.5" in r["reason"] and "OLS slope" in r["reason"]
    assert judge_interval(-0.5, steep + 0.005, hi)["category"] == "near"  # without the log factor it misses -1/2
    # flatter than the log-factor slope: near by its distance to that end, not to -1/2
    r = judge_interval(-0.5, flat + 0.05, flat + 0.15, log_factor=True, ns=NS)
    assert r["category"] == "near" and math.isclose(r["gap"], 0.05, abs_tol=1e-12)


# ---- every door decides by the one rule ---------------------------------------------------------
def _frame(law, reps=24, sigma=0.05, loss="param_multi", seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"router": "perturbed", "n": n, "replicate": r, "converged": True,
                          loss: law(n) * math.exp(sigma * rng.standard_normal())} for n in NS for r in range(reps)])


def test_rates_door_tests_the_shared_cell_bound_one_sided_and_records_sided():
    from moestat.rates.fit import fit_rates

    # over-specified perturbed param_multi: Theorem 5's n^-1/4 is an upper bound; a loss at n^-1/2 meets it
    df = _frame(lambda n: n ** -0.5)
    (f,) = fit_rates(df, setting="over", estimator="lse", routers=["perturbed"], losses=["param_multi"], n_boot=200)
    assert f["predicted"] == -0.25 and f["sided"] == "upper"
    assert f["category"] == "consistent", f["reason"]
    assert "steeper than the upper bound n^-0.25: consistent with it" in f["reason"]
    # the parametric Voronoi loss of the same run is two-sided: a slope of -0.35 misses -1/2 within the band
    df = _frame(lambda n: n ** -0.37, loss="voronoi")
    (g,) = fit_rates(df, setting="over", estimator="lse", routers=["perturbed"], losses=["voronoi"], n_boot=200)
    assert g["sided"] == "two" and g["category"] == "near", g["reason"]
    assert g["consistent"] is False and g["near"] is True


def test_rates_door_judges_a_declared_log_factor_against_both_slopes():
    from moestat.rates.fit import fit_rates

    # a loss at exactly (log n / n)^{1/2}: its plain slope over the window is flatter than -1/2
    df = _frame(lambda n: math.sqrt(math.log(n) / n), loss="voronoi", sigma=0.01)
    (plain,) = fit_rates(df, setting="exact", estimator="lse", routers=["perturbed"], losses=["voronoi"], n_boot=200)
    (lf,) = fit_rates(df, setting="exact", estimator="lse", routers=["perturbed"], losses=["voronoi"], n_boot=200,
                      log_factor=["voronoi"])
    assert plain["category"] == "near" and "log_factor" not in plain, plain["reason"]
    assert lf["log_factor"] is True and lf["category"] == "consistent", lf["reason"]
    assert "(log n / n)^0.5 has OLS slope" in lf["reason"]


def test_theory_door_reports_near_and_never_passes_it():
    from moestat.theorems.checks.framework import slope_verdict
    from moestat.theorems.checks.runner import exit_code, totals_line

    fit = {"slope": -0.32, "ci_low": -0.40, "ci_high": -0.24, "predicted": -0.5, "sided": "two", "consistent": False,
           "category": "near", "reason": "from the engine"}
    res = slope_verdict("c", "claim", fit, -0.5, DEFAULT_TOLERANCE)
    assert res.passed is False and res.status == "near" and res.category == "near" and res.sided == "two"
    assert exit_code([res]) == 1 and "1 near" in totals_line([res])
    up = slope_verdict("u", "claim", {**fit, "predicted": -0.125, "sided": "upper", "category": "consistent",
                                      "slope": -0.28, "ci_low": -0.36, "ci_high": -0.20}, -0.125, DEFAULT_TOLERANCE)
    assert up.passed and up.status == "passed" and up.sided == "upper"
    wide = slope_verdict("w", "claim", {**fit, "ci_low": -0.8, "ci_high": -0.3, "category": "inconclusive"}, -0.5,
                         DEFAULT_TOLERANCE)
    assert wide.passed is False and wide.status == "inconclusive"


def test_reproduce_door_counts_near_apart_from_consistent():
    from moestat.rates import catalogue as cat

    e = cat.entry("gmoe-exact")
    fits = [{"router": "gaussian-moe", "loss": "voronoi", "slope": -0.32, "ci_low": -0.40, "ci_high": -0.24,
             "predicted": -0.5, "sided": "two", "category": "near", "reason": "excludes"},
            {"router": "gaussian-moe", "loss": "param_single", "slope": -0.5, "ci_low": -0.55, "ci_high": -0.45,
             "predicted": -0.5, "sided": "two", "category": "consistent", "reason": "inside"}]
    runs = [{"label": "gaussian-moe", "wall_s": 0.0, "counts": {"converged": 1, "expected": 1}, "summary": {"fits": fits}}]
    report = cat._report(e, False, runs)
    assert report["counts"]["consistent"] == 1 and report["counts"]["near"] == 1 and report["counts"]["reproduced"] == 1
    assert all(r["sided"] == "two" for r in report["predictions"])
    text = cat.format_report(report)
    assert "near" in text and "categories: consistent 1, near 1" in text and "sided" in text


def test_select_door_judges_by_the_rates_categorize():
    import moestat.selection.summary as summary
    from moestat.rates import verdicts

    assert summary.categorize is verdicts.categorize and summary.SIDED == "two"


@pytest.mark.slow
def test_no_module_reimplements_the_interval_rule():
    # a tolerance-widened containment ("lo - tol <= p <= hi + tol") or a width cap of its own outside
    # the rule's own module (moestat/rates/interval_rule.py, re-exported by verdicts.py) would be a second rule
    widened = re.compile(r"-\s*(tol|tolerance|TOLERANCE)\s*\)?\s*<=\s*[\w.\[\]\"']+\s*<=")
    offenders = []
    for path in (ROOT / "moestat").rglob("*.py"):
        if path.name in ("verdicts.py", "interval_rule.py") and path.parent.name == "rates":
            continue
        text = path.read_text(encoding="utf-8")
        if widened.search(text):
            offenders.append(str(path))
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MAX_CI_WIDTH" for t in node.targets):
                offenders.append(f"{path}: MAX_CI_WIDTH assigned")
    assert not offenders, offenders
    # and the doors import the rule
    for rel in ("moestat/rates/stability.py", "moestat/theorems/checks/framework.py",
                "moestat/theorems/checks/vanilla_slow.py"):
        assert "judge_interval" in (ROOT / rel).read_text(encoding="utf-8"), rel


def test_catalogue_sided_agrees_with_the_rates_pipeline_and_says_why():
    from catalogue_cases import stated_predictions

    from catalogue_cases import file_predictions
    from moestat.rates.fit import predicted_sided

    uppers = []
    for e, p, router, loss, cfg in stated_predictions():
        assert predicted_sided(router, cfg.setting, loss, cfg.estimator, file_predictions(cfg)) == p.sided, (e.key, p)
        if p.sided == "upper":
            assert "upper bound" in p.sided_reason and "upper bound" in p.text
            uppers.append((e.key, p.loss))
    assert ("cosine-over", "perturbed param_multi") in uppers and ("gmoe-over3", "param_multi") in uppers
    assert all(loss != "regression_l2" for _, loss in uppers)


def test_categorize_says_contains_both_only_when_the_interval_covers_the_prediction():
    from moestat.rates.verdicts import categorize

    def cat(ci, sided):
        ns, values = [1000, 4000, 16000], [np.ones(3)] * 3
        ev = {"slope": sum(ci) / 2, "ci_low": ci[0], "ci_high": ci[1]}
        return categorize(predicted=-0.125, slope=ev["slope"], ci=ci, ns=ns, values=values, tolerance=0.15, robust=ev,
                          tail={**ev, "ci_low": -0.5, "ci_high": 0.4, "n_min": 1000}, curv={"significant": False},
                          sided=sided)

    r = cat((-0.2, 0.02), "upper")
    assert r["category"] == "inconclusive" and "contains both -0.125 and 0" in r["reason"]
    r = cat((-0.1, 0.1), "upper")  # slower than the bound by 0.025, within the band
    assert r["category"] == "near" and "contains both" not in r["reason"], r
    r = cat((-0.45, -0.3), "upper")  # steeper than the bound: consistent, the robust interval agreeing
    assert r["category"] == "consistent" and "steeper than the upper bound" in r["reason"], r
    r = cat((-0.45, -0.3), "two")
    assert r["category"] == "inconsistent", r


def test_theory_report_counts_near_apart_and_shows_sided(tmp_path):
    import json

    from moestat.theorems.checks.framework import slope_verdict
    from moestat.theorems.checks.runner import write_report

    fit = {"slope": -0.32, "ci_low": -0.40, "ci_high": -0.24, "predicted": -0.5, "sided": "two", "category": "near",
           "reason": "engine"}
    res = [slope_verdict("near_one", "claim", fit, -0.5, DEFAULT_TOLERANCE),
           slope_verdict("upper_one", "claim", {**fit, "predicted": -0.125, "sided": "upper", "category": "consistent"},
                         -0.125, DEFAULT_TOLERANCE)]
    md, js = write_report(res, tmp_path, "quick", "moestat theory", 1.0)
    data = json.loads(js.read_text())
    assert data["n_near"] == 1 and data["n_passed"] == 1 and data["n_failed"] == 0
    assert [c["sided"] for c in data["checks"]] == ["two", "upper"]
    text = md.read_text()
    assert "| near_one | -0.5 | two |" in text and "| near |" in text and "near 1" in text

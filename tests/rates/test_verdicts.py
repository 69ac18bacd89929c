"""Verdict categories, robust slopes and planning (moestat.rates.verdicts) on synthetic losses with a known law."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moestat.rates.fit import fit_rates, verdict
from moestat.rates.verdicts import CATEGORIES, categorize, curvature, plan, robust_slope

NS = [1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000]


def _losses(law, reps=20, sigma=0.3, seed=0, ns=NS):
    """Per-n arrays of losses law(n) * lognormal noise."""
    rng = np.random.default_rng(seed)
    return [law(n) * np.exp(sigma * rng.standard_normal(reps)) for n in ns]


def _frame(values, ns=NS, router="perturbed", loss="voronoi", converged=True):
    rows = []
    for n, v in zip(ns, values):
        for r, x in enumerate(v):
            rows.append({"router": router, "n": n, "replicate": r, "converged": converged, loss: x})
    return pd.DataFrame(rows)


def _fit(values, predicted_setting="exact", loss="voronoi", converged=True, ns=NS, **kw):
    df = _frame(values, ns=ns, loss=loss, converged=converged)
    (f,) = fit_rates(df, setting=predicted_setting, estimator="lse", routers=["perturbed"], losses=[loss], n_boot=300, **kw)
    return f


def test_true_rate_is_consistent_with_a_reason():
    f = _fit(_losses(lambda n: n ** -0.5))
    assert f["category"] == "consistent", f["reason"]
    assert "inside 95% CI" in f["reason"] and "Theil-Sen" in f["reason"]
    assert f["plan"]["reps_needed"] >= 20


def test_wrong_rate_is_inconsistent():
    f = _fit(_losses(lambda n: n ** -1.0))
    assert f["category"] == "inconsistent", f["reason"]


def test_no_convergence_is_inconclusive_whatever_the_interval():
    # the old smoke preset's case (max_iter = 20): 0 of 9 fits converged must never read "consistent"
    f = _fit(_losses(lambda n: n ** -0.5), converged=False)
    assert f["consistent"] is True  # the bare interval rule would have said so
    assert f["category"] == "inconclusive" and "0/160 fits" in f["reason"]


def test_wide_interval_is_inconclusive_and_says_how_wide():
    ns = [100, 200, 400]
    f = _fit(_losses(lambda n: n ** -0.5, reps=3, sigma=2.0, ns=ns), ns=ns)
    assert f["ci_high"] - f["ci_low"] > 1.0
    assert f["category"] == "inconclusive" and "wide" in f["reason"]


def test_flat_multi_atom_loss_does_not_pass_against_minus_quarter():
    # thm5_param_multi: a flat slope (-0.02) against a predicted -1/4 must not be "consistent"
    vals = _losses(lambda n: 0.3 * n ** -0.02, sigma=0.5, seed=3)
    f = _fit(vals, predicted_setting="over", loss="param_multi")
    assert f["predicted"] == -0.25
    assert f["category"] in ("floor", "inconclusive"), f["reason"]


def test_a_floor_is_named_with_the_n_it_starts_from():
    vals = _losses(lambda n: max(n ** -0.5, 0.01), sigma=0.1, seed=4)  # flat from n = 10 000
    f = _fit(vals)
    assert f["category"] == "floor", f["reason"]
    assert "stops decreasing" in f["reason"] and "n >= 16000" in f["reason"]


def test_bending_curve_is_pre_asymptotic():
    # a fast transient in front of the n^-1/2 rate: the local slope moves by more than the tolerance
    vals = _losses(lambda n: n ** -0.5 + 2e3 * n ** -1.5, sigma=0.1, seed=5)
    f = _fit(vals)
    assert f["category"] == "pre-asymptotic", f["reason"]
    assert "local slope" in f["reason"]
    # the transient has died out within the window: the plan names the window, not a larger n
    assert f["stable_from"] is not None and f"--window-min {f['stable_from']}" in f["plan"]["line"]
    assert f["plan"]["larger_n_needed"] is False


def test_curve_still_bending_at_the_top_needs_larger_n():
    vals = _losses(lambda n: n ** -0.5 + 2e4 * n ** -1.5, sigma=0.1, seed=5)
    f = _fit(vals)
    assert f["category"] == "pre-asymptotic" and "not yet stable" in f["reason"], f["reason"]
    assert f["plan"]["larger_n_needed"] is True and "larger n-max needed" in f["plan"]["line"]
    assert f["plan"]["n_reach"] > NS[-1]  # where the local slope reaches -1/2 (extrapolated)


def test_one_wild_replicate_cannot_make_a_verdict():
    vals = _losses(lambda n: n ** -0.5, sigma=0.2, seed=6)
    clean = _fit(vals)
    vals[-1][0] *= 1e3  # one replicate at the largest n diverged
    f = _fit(vals)
    assert f["slope"] > clean["slope"] + 0.3  # the log-of-mean slope is dragged far from -1/2
    assert f["category"] in ("inconclusive", "consistent"), f["reason"]
    assert abs(f["robust"]["slope"] + 0.5) < 0.1


def test_robust_slope_recovers_the_exponent():
    r = robust_slope(NS, _losses(lambda n: 2 * n ** -0.75, sigma=0.2, seed=7))
    assert r["ci_low"] <= -0.75 <= r["ci_high"] and r["ci_high"] - r["ci_low"] < 0.2


def test_curvature_detects_bend_and_not_a_straight_line():
    assert not curvature(NS, _losses(lambda n: n ** -0.5, sigma=0.2, seed=8))["significant"]
    c = curvature(NS, _losses(lambda n: n ** -0.5 + 2e3 * n ** -1.5, sigma=0.1, seed=8))
    assert c["significant"] and c["slope_start"] < c["slope_end"] < 0


def test_plan_scales_like_one_over_halfwidth_squared():
    vals = _losses(lambda n: n ** -0.5, sigma=0.5, seed=9, reps=10)
    f = _fit(vals)
    cv = f["curvature"]
    p1 = plan(predicted=-0.5, reps=10, bootstrap=f["bootstrap"], log_mean=f["log_mean"], curv=cv, ns=NS, category="consistent", halfwidth=0.05)
    p2 = plan(predicted=-0.5, reps=10, bootstrap=f["bootstrap"], log_mean=f["log_mean"], curv=cv, ns=NS, category="consistent", halfwidth=0.1)
    hb = p1["halfwidth_now"]
    assert p1["reps_needed"] == max(10, math.ceil(10 * (hb / 0.05) ** 2))
    assert p2["reps_needed"] == max(10, math.ceil(10 * (hb / 0.1) ** 2)) < p1["reps_needed"]


def test_missing_loss_has_no_category():
    vals = [np.full(5, np.nan) for _ in NS]
    f = _fit(vals, loss="param_multi")
    assert f["slope"] is None and f["category"] is None and "not defined" in f["reason"]


@given(p=st.floats(-1.5, 0.5), lo=st.floats(-2, 1), w=st.floats(0, 1.5))
def test_consistent_category_implies_the_interval_rule(p, lo, w):
    hi = lo + w
    vals = _losses(lambda n: n ** -0.5, reps=8, sigma=0.2, seed=1, ns=NS[:5])
    c = categorize(predicted=p, slope=0.5 * (lo + hi), ci=(lo, hi), ns=NS[:5], values=vals, tolerance=0.15)
    assert c["category"] in CATEGORIES
    if c["category"] == "consistent":
        assert verdict(p, lo, hi, 0.15)["consistent"]


@pytest.mark.slow
def test_smoke_preset_fits_converge(tmp_path):
    """The smoke preset does what its name says (issue 35): a seconds-long run whose fits are the
    least-squares estimates (every fit stopped on a convergence criterion), so no verdict blames
    the fits; it had max_iter = 20 and 0 of 9 converged."""
    from moestat.rates import RatesConfig, run_rates

    s = run_rates(RatesConfig.from_preset("smoke").replace(quiet=True), tmp_path / "smoke")
    assert s["counts"]["fits"] == s["counts"]["converged"] == 9, s["counts"]
    assert not any("convergence criterion" in f["reason"] for f in s["fits"] if f.get("reason"))
    # docs/guide/rates.rst: with 3 sizes the OLS t-interval has 1 degree of freedom (t = 12.71),
    # so the Voronoi loss's interval is wider than 1 and the verdict inconclusive
    vor = next(f for f in s["fits"] if f["loss"] == "voronoi")
    assert vor["ci_high"] - vor["ci_low"] > 1 and vor["category"] == "inconclusive" and "wide" in vor["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("quiet", [True])
def test_unconverged_fits_never_say_consistent(tmp_path, quiet):
    from moestat.rates import RatesConfig, run_rates
    from moestat.rates.experiment import format_table

    # the old smoke preset (max_iter = 20): 0 of 9 fits converge
    s = run_rates(RatesConfig.from_preset("smoke").replace(quiet=quiet, max_iter=20), tmp_path / "smoke")
    assert s["counts"]["converged"] == 0
    cats = {f["loss"]: f["category"] for f in s["fits"]}
    assert "consistent" not in cats.values(), cats
    table = format_table(s)
    assert "category" in table and "plan:" in table and "convergence criterion" in table


# ---- contrasts: the replicate-paired bootstrap interval of the slope difference -----------------
def _paired_arms(gap: float, shared_sd: float = 0.3, own_sd: float = 0.02, seed: int = 0):
    """Two arms on the same streams: log L = c + slope log n + (shared replicate noise) + (small own noise)."""
    from numpy.random import default_rng

    rng = default_rng(seed)
    ns = [1000, 2000, 4000, 8000, 16000, 32000]
    x = np.log(ns)[:, None]
    shared = rng.normal(0, shared_sd, size=(len(ns), 12))  # the same X and noise draws in both arms
    a = np.exp(1.0 + (-0.5 + gap) * x + shared + rng.normal(0, own_sd, size=shared.shape))
    b = np.exp(1.0 - 0.5 * x + shared + rng.normal(0, own_sd, size=shared.shape))
    return ns, a, b


def test_paired_interval_excludes_zero_on_a_known_gap():
    from moestat.rates.verdicts import paired_contrast, paired_slope_difference

    ns, a, b = _paired_arms(0.15)
    r = paired_slope_difference(ns, a, b, seed=1)
    # own noise sd 0.02 per point: the paired difference's sd is about 0.02 * sqrt(2/12) / sd(log n) ~ 0.008
    assert 0.1 < r["ci"][0] < 0.15 < r["ci"][1] < 0.2
    assert paired_contrast(ns, a, b)["category"] == "consistent"
    assert paired_contrast(ns, b, a)["category"] == "inconsistent"  # the other way round: faster, not slower


def test_paired_interval_contains_zero_for_identical_arms():
    from moestat.rates.verdicts import paired_contrast, paired_slope_difference

    ns, a, _ = _paired_arms(0.15)
    r = paired_slope_difference(ns, a, a.copy(), seed=1)
    assert r["ci"] == [0.0, 0.0] and r["difference"] == 0.0
    assert paired_contrast(ns, a, a.copy())["category"] == "inconclusive"


def test_pairing_is_what_resolves_the_gap():
    """Separate per-arm intervals overlap (shared replicate noise sd 0.3), the paired one excludes 0."""
    from moestat.rates.fit import slope_with_interval
    from moestat.rates.verdicts import paired_slope_difference

    ns, a, b = _paired_arms(0.15)
    ia = slope_with_interval(ns, list(a), np.random.default_rng(0), 500)
    ib = slope_with_interval(ns, list(b), np.random.default_rng(0), 500)
    assert ia["ci_low"] < ib["ci_high"]  # the two marginal intervals cannot tell them apart
    assert paired_slope_difference(ns, a, b, seed=0)["ci"][0] > 0


def test_paired_interval_is_deterministic_given_the_seed():
    from moestat.rates.verdicts import paired_slope_difference

    ns, a, b = _paired_arms(0.05, own_sd=0.2)
    r1, r2 = paired_slope_difference(ns, a, b, seed=5), paired_slope_difference(ns, a, b, seed=5)
    assert r1 == r2
    assert paired_slope_difference(ns, a, b, seed=6)["ci"] != r1["ci"]


def test_paired_arrays_pair_on_n_and_replicate():
    import pandas as pd

    from moestat.rates.verdicts import paired_arrays

    rows_a = pd.DataFrame({"n": [100, 100, 200, 200], "replicate": [0, 1, 0, 1], "L": [1.0, 2.0, 3.0, 4.0]})
    rows_b = pd.DataFrame({"n": [200, 100, 200], "replicate": [1, 0, 0], "L": [40.0, 10.0, 30.0]})  # (100, 1) missing
    ns, a, b = paired_arrays(rows_a, rows_b, "L")
    assert ns == [100, 200]
    assert a.tolist()[1] == [3.0, 4.0] and b.tolist()[1] == [30.0, 40.0]
    assert a[0, 0] == 1.0 and b[0, 0] == 10.0 and np.isnan(a[0, 1]) and np.isnan(b[0, 1])
    rows_c = rows_b.assign(seed=[1, 1, 1])
    with pytest.raises(ValueError, match="different seeds"):
        paired_arrays(rows_a.assign(seed=0), rows_c, "L")


def test_a_loss_without_a_stated_rate_gets_no_category_not_a_floor():
    """Issue 33: a flat loss with no prediction is not a "floor" (nothing was predicted to fall), and
    its reason says the theorem states no rate (not "no polynomial rate", which reads as "slower")."""
    flat = _losses(lambda n: 0.3, sigma=0.1, seed=11)
    f = _fit(flat, predicted={"voronoi": None})
    assert f["predicted"] is None and f["category"] is None
    assert f["reason"] == "no rate stated by the theorem for this loss" and "polynomial" not in f["reason"]
    # the same data with a prediction is a floor; a slower-than-polynomial claim keeps its floor evidence
    assert _fit(flat)["category"] == "floor"
    kw = dict(slope=0.0, ci=(-0.05, 0.05), ns=NS, values=flat, tolerance=0.1)
    assert categorize(predicted=None, **kw)["category"] is None
    assert categorize(predicted=None, slow_rate=True, **kw)["category"] == "floor"


def test_a_halves_reason_never_prints_none():
    from moestat.rates.stability import combine_halves

    res = combine_halves({"category": "floor", "reason": "r"}, [{"category": "floor", "slope": 0.0}, {"category": None, "slope": 0.1}])
    assert res["category"] == "inconclusive" and "None" not in res["reason"] and "B: no category" in res["reason"]


def test_judge_fits_gives_verdict_category_and_plan_and_leaves_entries_without_data():
    """The verdict flow on one known law: a -1/2 power law with lognormal noise is judged
    consistent with -1/2 (its interval, widened by the tolerance, contains it), gets a plan and
    both halves' categories; an entry without data keeps exactly what it had."""
    from moestat.rates.fit import slope_with_interval
    from moestat.rates.stability import HALF_NAMES
    from moestat.rates.verdicts import Curve, FitData, judge_fits

    vals = _losses(lambda n: n ** -0.5, reps=20, sigma=0.2)

    def curve(v, seed):
        return Curve(NS, v, (len(v[0]) * len(NS), len(v[0]) * len(NS)),
                     slope_with_interval(NS, v, np.random.default_rng(seed), 200))

    whole = curve(vals, 1)
    half = [curve([v[h::2] for v in vals], 2 + h) for h in range(2)]
    entry = {"router": "perturbed", "loss": "voronoi", "predicted": -0.5, "slope": whole.slope["slope"],
             "ci_low": whole.slope["ci_low"], "ci_high": whole.slope["ci_high"]}
    bare = {"router": "perturbed", "loss": "mass", "predicted": -0.5, "slope": None, "category": "inconclusive",
            "reason": "fewer than 3 sample sizes"}
    kept = dict(bare)
    judge_fits([entry, bare], [FitData(whole, tuple(half), False), None], tolerance=0.15, halfwidth=0.05)
    assert bare == kept
    assert entry["category"] == "consistent" and entry["consistent"] is True, entry["reason"]
    assert entry["ci_low"] - 0.15 <= -0.5 <= entry["ci_high"] + 0.15
    assert entry["plan"]["line"] and [h["half"] for h in entry["halves"]] == list(HALF_NAMES)
    assert all(h["slope"] is not None for h in entry["halves"]) and "start_sensitivity" not in entry

"""The median statistic of the rate fits (``statistic="median"``): the theorems' ``O_P`` bounds are
statements about quantiles, which a minority of wild replicates cannot move (issue 33; the rule of
``records/declarations/catalogue/README.md``, 2026-12-02)."""

import math

import numpy as np
import pandas as pd
import pytest

from moestat.rates.config import RatesConfig
from moestat.rates.fit import fit_rates
from moestat.rates.verdicts import PAIRED_BOOT, paired_contrast, paired_slope_difference

NS = [1000, 2000, 4000, 8000, 16000, 32000]


def _contaminated(reps=40, wild=3, seed=0):
    """Losses ``n^-1/2`` times a lognormal factor; in ``wild`` of the ``reps`` replicates per n the loss
    is a constant 1e3 instead (an estimator's rare far-away maximum, not decaying with n)."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in NS:
        bad = set(rng.choice(reps, size=wild, replace=False).tolist())
        for r in range(reps):
            v = 1e3 if r in bad else n ** -0.5 * math.exp(0.2 * rng.standard_normal())
            rows.append({"router": "perturbed", "setting": "exact", "n": n, "replicate": r, "voronoi": v})
    return pd.DataFrame(rows)


def test_the_median_slope_is_the_rate_of_the_majority_and_the_mean_is_ruled_by_the_wild_minority():
    df = _contaminated()
    (med,) = fit_rates(df, setting="exact", estimator="lse", losses=["voronoi"], n_boot=300, statistic="median")
    (mean,) = fit_rates(df, setting="exact", estimator="lse", losses=["voronoi"], n_boot=300)
    # 3 of 40 replicates above every other value shift the median by at most 3 ranks out of 40: the
    # slope stays that of n^-1/2; the mean is about 3/40 * 1e3 at every n: no decay
    assert abs(med["slope"] + 0.5) < 0.1 and med["category"] == "consistent"
    assert abs(mean["slope"]) < 0.05 and mean["category"] != "consistent"
    # the mean's verdict travels beside the median's, computed as fit_rates' own mean fit
    assert med["mean_statistic"]["slope"] == pytest.approx(mean["slope"], abs=1e-12)
    assert med["mean_statistic"]["category"] == mean["category"]
    assert "mean_statistic" not in mean


def test_the_median_fit_reports_the_median_ingredients():
    df = _contaminated(wild=0)
    (med,) = fit_rates(df, setting="exact", estimator="lse", losses=["voronoi"], n_boot=200, statistic="median")
    medians = [np.median(df.loc[df["n"] == n, "voronoi"]) for n in NS]
    want = np.polyfit(np.log(NS), np.log(medians), 1)[0]
    assert med["slope"] == pytest.approx(want, abs=1e-10)
    assert med["window_sensitivity"][0]["slope"] == pytest.approx(want, abs=1e-10)


def test_an_unknown_statistic_is_refused():
    with pytest.raises(ValueError, match="statistic"):
        fit_rates(_contaminated(wild=0), setting="exact", estimator="lse", losses=["voronoi"], statistic="mode")
    with pytest.raises(ValueError, match="statistic must be 'mean' or 'median'"):
        RatesConfig().replace(statistic="mode").validate()


def test_the_statistic_changes_no_row_and_no_config_hash():
    from moestat.rates.store import config_hash

    a, b = RatesConfig(), RatesConfig().replace(statistic="median")
    assert config_hash(a) == config_hash(b)  # an analysis setting: a resume with another statistic keeps its rows
    assert b.to_dict()["statistic"] == "median" and RatesConfig.from_dict(b.to_dict()) == b
    old = {k: v for k, v in a.to_dict().items() if k != "statistic"}  # a provenance.json written before the key
    assert RatesConfig.from_dict(old).statistic == "mean"


def _direct_paired_median(ns, a, b, n_boot, seed):
    """The paired median-slope difference by a plain loop (the reference of the vectorised one)."""
    x = np.log(np.asarray(ns, float))
    valid = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)

    def slope(idx, arr):
        pts = [(x[s], np.log(np.median(arr[s, idx][valid[s, idx]]))) for s in range(len(ns)) if valid[s, idx].any()]
        return np.polyfit(*zip(*pts), 1)[0]

    full = np.arange(a.shape[1])
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    d = []
    for _ in range(n_boot):
        idx = rng.integers(0, a.shape[1], size=a.shape[1])
        d.append(slope(idx, a) - slope(idx, b))
    return slope(full, a), slope(full, b), np.quantile(d, [0.025, 0.975])


def test_the_paired_median_interval_equals_a_direct_loop():
    rng = np.random.default_rng(3)
    ns = [1000, 2000, 4000, 8000]
    a = np.array(ns, float)[:, None] ** -0.25 * np.exp(0.3 * rng.standard_normal((4, 15)))
    b = np.array(ns, float)[:, None] ** -0.5 * np.exp(0.3 * rng.standard_normal((4, 15)))
    a[1, 4] = np.nan  # a pair left out of both arms
    r = paired_slope_difference(ns, a, b, n_boot=200, seed=5, statistic="median")
    sa, sb, ci = _direct_paired_median(ns, a, b, 200, 5)
    assert r["slope_a"] == pytest.approx(sa, abs=1e-10) and r["slope_b"] == pytest.approx(sb, abs=1e-10)
    assert r["ci"] == pytest.approx(list(ci), abs=1e-10)
    assert r["statistic"] == "median" and r["pairs"] == 4 * 15 - 1


def test_a_contrast_on_the_medians_sees_through_wild_replicates_that_hide_it_in_the_means():
    rng = np.random.default_rng(4)
    ns = np.array([1000, 2000, 4000, 8000, 16000, 32000], float)
    slow = ns[:, None] ** -0.1 * np.exp(0.2 * rng.standard_normal((6, 40)))
    fast = ns[:, None] ** -0.5 * np.exp(0.2 * rng.standard_normal((6, 40)))
    fast[:, :2] = 1e4  # two replicates of the fast arm far away at every n: its mean does not decay
    med = paired_contrast(list(ns.astype(int)), slow, fast, statistic="median")
    mean = paired_contrast(list(ns.astype(int)), slow, fast)
    assert med["category"] == "consistent" and med["ci"][0] > 0.2
    assert mean["category"] != "consistent"
    assert "per-n medians" in med["reason"] and med["n_boot"] == PAIRED_BOOT


def test_the_catalogue_judges_on_the_median():
    from moestat.rates.catalogue import STATISTIC, entry, run_config

    assert STATISTIC == "median"
    for run in entry("gmoe-exact").runs:
        assert run_config(run, quick=True).statistic == "median"



def test_the_figure_draws_the_statistic_the_slopes_were_fitted_to():
    from moestat.rates import figures

    df = _contaminated(reps=10, wild=1)
    med = figures._per_n(df, "voronoi", "perturbed", "median")
    mean = figures._per_n(df, "voronoi", "perturbed")
    for (n, m, *_), (n2, a, *_) in zip(med, mean):
        v = df.loc[df["n"] == n, "voronoi"].to_numpy()
        assert n == n2 and m == np.median(v) and a == pytest.approx(v.mean())
    fits = fit_rates(df, setting="exact", estimator="lse", losses=["voronoi"], n_boot=100, statistic="median")
    by_key = {(f["router"], f["loss"]): f for f in fits}
    assert figures._statistic(by_key) == "median" and figures._statistic({}) == "mean"
    note = figures._note(10, True, {"theorem"}, "median")
    assert "markers: median over 10" in note and "fit of log median on log n" in note

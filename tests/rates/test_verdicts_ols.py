"""``moestat.rates.verdicts.ols`` and ``theil_sen``: statsmodels' OLS and scipy's Theil--Sen, the same numbers.

Issue 36: the rate fits compute these without importing statsmodels and ``scipy.stats`` (about
1.2 CPU-s of the main job's first worker).  The values must be those of the libraries -- compared
to 1e-10 relative (the same arithmetic: on the machine they were written on they agree bitwise, but
another statsmodels, scipy or BLAS may round a pseudo-inverse differently), on designs like the rate fits' (log sample sizes, one point
per size or every replicate, the curvature's quadratic design), with ties, and in the irregular
cases that are handed to the libraries themselves.
"""

import warnings

import numpy as np
import pytest
from scipy.stats import theilslopes
from statsmodels.regression.linear_model import OLS

from moestat.rates.fit import ols_fit
from moestat.rates.verdicts import CURVATURE_ALPHA, ols, theil_sen

NS = np.array([2000, 4000, 8000, 16000, 32000, 64000, 128000])


def _statsmodels(X, y, robust, alpha):
    res = OLS(y, X).fit(cov_type="HC3" if robust else "nonrobust")
    return [np.asarray(res.params), np.asarray(res.bse), np.asarray(res.conf_int(alpha)), res.rsquared, res.aic]


def _ours(X, y, robust, alpha):
    r = ols(X, y, robust=robust, alpha=alpha)
    return [r["params"], r["bse"], r["ci"], r["rsquared"], r["aic"]]


def _same(a, b) -> bool:
    return all(np.allclose(np.asarray(u, float), np.asarray(v, float), rtol=1e-10, atol=1e-13, equal_nan=True)
               for u, v in zip(a, b))


def _designs(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for t in range(count):
        m = int(rng.integers(3, 160))
        x = np.log(rng.choice(NS, size=m)) if t % 2 else np.log(np.sort(rng.choice(NS, size=min(m, 7), replace=False)))
        if np.ptp(x) == 0:
            continue
        y = -0.5 * x + rng.normal(size=x.size) * rng.uniform(0.01, 2.0)
        if t % 5 == 0:
            y = np.round(y, 1)  # ties in y
        yield x, y


@pytest.mark.parametrize("robust", [False, True])
def test_ols_is_statsmodels_bit_for_bit(robust):
    checked = 0
    for x, y in _designs(0, 200):
        X = np.column_stack((np.ones(x.size), x))
        if X.shape[0] <= 2:
            continue
        for alpha in (0.05, CURVATURE_ALPHA):
            assert _same(_ours(X, y, robust, alpha), _statsmodels(X, y, robust, alpha))
            checked += 1
    assert checked > 200


def test_ols_of_the_curvature_design_is_statsmodels_bit_for_bit():
    checked = 0
    for x, y in _designs(1, 200):
        u = x - x.mean()
        X = np.column_stack([np.ones_like(u), u, u * u])
        if np.unique(x).size < 3 or X.shape[0] <= 3:
            continue
        assert _same(_ours(X, y, True, CURVATURE_ALPHA), _statsmodels(X, y, True, CURVATURE_ALPHA))
        checked += 1
    assert checked > 50


def test_ols_fit_is_the_statsmodels_fit_it_was():
    # ols_fit before issue 36: add_constant, OLS(...).fit(cov_type), conf_int(0.05)
    from statsmodels.tools.tools import add_constant

    for x, y in _designs(2, 60):
        if x.size <= 2:
            continue
        for robust in (False, True):
            res = OLS(y, add_constant(x, has_constant="add")).fit(cov_type="HC3" if robust else "nonrobust")
            ci = np.asarray(res.conf_int(0.05))
            old = {"slope": float(res.params[1]), "intercept": float(res.params[0]), "se": float(res.bse[1]),
                   "ci_low": float(ci[1, 0]), "ci_high": float(ci[1, 1]), "r2": float(res.rsquared),
                   "aic": float(res.aic), "n_points": int(len(y))}
            new = ols_fit(x, y, robust=robust)
            assert new.keys() == old.keys() and new["n_points"] == old["n_points"]
            assert all(new[k] == pytest.approx(old[k], rel=1e-10, abs=1e-13) for k in old)


@pytest.mark.parametrize("case", ["two points", "constant y", "exact fit", "constant x", "nan"])
def test_ols_irregular_cases_are_statsmodels_own(case):
    # handed to statsmodels itself: its conventions (NaN, inf) and its warnings
    x = np.log(NS[:5])
    y = -0.5 * x + np.array([0.1, -0.2, 0.05, 0.3, -0.1])
    if case == "two points":
        x, y = x[:2], y[:2]
    elif case == "constant y":
        y = np.full_like(x, 1.5)
    elif case == "exact fit":
        y = 2.0 - 0.5 * x
    elif case == "constant x":
        x = np.full_like(x, 7.0)
    else:
        y = y.copy()
        y[2] = np.nan
    X = np.column_stack((np.ones(x.size), x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for robust in (False, True):
            assert _same(_ours(X, y, robust, 0.05), _statsmodels(X, y, robust, 0.05))


def test_theil_sen_is_scipy_bit_for_bit():
    checked = 0
    for x, y in _designs(3, 300):
        ref = theilslopes(y, x, alpha=0.95)
        assert _same(theil_sen(y, x, 0.95), (ref.slope, ref.intercept, ref.low_slope, ref.high_slope))
        checked += 1
    assert checked > 250


@pytest.mark.parametrize("case", ["one x", "one point", "nan"])
def test_theil_sen_irregular_cases_are_scipy_own(case):
    x = np.log(NS[:4])
    y = np.array([0.3, 0.1, -0.2, -0.4])
    if case == "one x":
        x = np.full_like(x, 8.0)
    elif case == "one point":
        x, y = x[:1], y[:1]
    else:
        y = y.copy()
        y[1] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ref = theilslopes(y, x, alpha=0.95)
        except ValueError as exc:  # scipy refuses: so must we, with scipy's own error
            with pytest.raises(ValueError, match=str(exc)[:30]):
                theil_sen(y, x, 0.95)
            return
        assert _same(theil_sen(y, x, 0.95), (ref.slope, ref.intercept, ref.low_slope, ref.high_slope))

"""Verdict categories with reasons, robust slopes and Monte Carlo planning for one rate fit.

:func:`moestat.rates.fit.fit_rates` computes, for one router and one loss, the log-of-mean slope
with its 95% interval (the envelope of a replicate bootstrap and the OLS t-interval).  Whether
that interval *contains* the prediction is not yet a verdict one can trust: an interval 12 wide
contains every rate, a loss that has stopped decreasing can sit inside a widened interval, a
log-log curve that is still bending has no single slope, and one wild replicate can move a
log-of-mean slope.  :func:`categorize` turns the evidence into one of six categories, each with a
one-line reason, evaluated in this order (the first that applies wins):

``inconclusive``
    fewer than 3 sample sizes; fewer than :data:`MIN_CONVERGED` of the fits in the window stopped on
    a convergence criterion (the fitted values need not be the least-squares estimates the theorems
    speak of); the 95% interval wider than :data:`UNINFORMATIVE_WIDTH` (it cannot tell -1/2 from 0
    or -1).
``floor``
    the loss stops decreasing: over the upper part of the window (the largest
    ``max(3, ceil(S/2))`` sample sizes) the robust slope's interval contains 0 and, widened by the
    tolerance, excludes the predicted exponent (-1/2 when nothing is predicted), or the
    whole-window interval does so.
``pre-asymptotic``
    significant curvature in log-log (the 99% interval of the quadratic coefficient of a
    per-replicate fit of ``log L`` on ``log n, (log n)^2`` excludes 0) *and* the local slope changes by
    more than the tolerance across the window; the reason says from which ``n`` the slope is stable
    (no significant curvature over ``n >= n_0`` with at least 3 sizes) or that it is not yet.
``consistent`` / ``near`` / ``inconsistent``
    the interval rule :func:`judge_interval`, the one rule every door uses: ``inconclusive`` when
    the interval is wider than :data:`MAX_CI_WIDTH` (it could not tell -1/2 from -1/4) or contains
    both the prediction and 0; ``consistent`` only when the interval covers the prediction (for an
    upper bound, ``sided="upper"``: reaches its steep side; for a rate with a log factor: meets the
    slopes between ``n^-r`` and ``(log n / n)^r``); ``near`` when it excludes it by at most the
    tolerance; ``inconsistent`` beyond.  The Theil--Sen slope's interval, judged by the same rule,
    must agree: one covering and the other not is ``inconclusive``.

``near`` is never counted as consistent: the interval says the prediction is not the slope.

:func:`paired_slope_difference` decides a contrast "A is slower than B" between two runs that share
their data streams (rows with the same ``(n, replicate)`` drew from the same ``SeedSequence``,
:func:`moestat.rates.sweep.replicate_streams`): a bootstrap that resamples replicates with their
whole n-trajectories, the same indices in both arms, refits both log-of-mean slopes per draw and
takes the percentile interval of the difference.  The pairing removes the variance the two arms
share (the same ``X`` and noise draws), which two separate slope intervals cannot; "A slower" is
decided when the interval excludes 0 on the predicted side, never by a fixed margin.

A loss for which the theorem states no rate gets no category (:data:`NO_RATE_STATED`): there is
nothing to be consistent with, and a ``floor`` would read as a finding about a rate nobody
predicted.  The one exception is a "slower than any polynomial rate" claim (Theorems 2/3,
:func:`moestat.rates.stability.is_slow_rate`), whose rule takes the ``floor`` (against the
parametric -1/2) as its evidence.

:func:`plan` answers "how many replicates and how large an n would settle it": the bootstrap
half-width shrinks like ``1/sqrt(R)``, so ``R_needed = ceil(R (h_boot / h)^2)`` for a target
half-width ``h``; the lack-of-fit half-width of the straight line does not shrink with ``R``, and a
significant curvature says a larger n-max is needed (with a quadratic extrapolation of where the
local slope reaches the prediction).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from moestat.rates.interval_rule import (  # noqa: F401 - the one rule, public here too
    DEFAULT_TOLERANCE, MAX_CI_WIDTH, NO_RATE_STATED, SIDES, judge_interval, log_factor_slope, prediction_text,
    prediction_interval,
)
from moestat.rates.stability import settle

#: Per-sample-size statistics a slope can be fitted to: the mean (the expected loss) or the median (the
#: theorems' O_P bounds are statements about quantiles).  The one table of the choice: the rate fits
#: (:func:`moestat.rates.fit.slope_with_interval`), the paired contrasts below and the configuration.
STATISTICS = {"mean": np.mean, "median": np.median}  # keyed by labels.STATISTIC_NAMES, the words the configuration accepts

__all__ = [
    "STATISTICS",
    "CATEGORIES",
    "MAX_CI_WIDTH",
    "UNINFORMATIVE_WIDTH",
    "SIDES",
    "MIN_CONVERGED",
    "DEFAULT_HALFWIDTH",
    "DEFAULT_TOLERANCE",
    "verdict",
    "judge_interval",
    "prediction_interval",
    "log_factor_slope",
    "ols",
    "theil_sen",
    "robust_slope",
    "curvature",
    "tail_slope",
    "stable_from",
    "categorize",
    "plan",
    "paired_slope_difference",
    "paired_arrays",
    "paired_contrast",
    "Curve",
    "FitData",
    "judge_fits",
]

#: The verdict categories, in the order they are tested (the interval rule's three last).
CATEGORIES = ("inconclusive", "floor", "pre-asymptotic", "consistent", "near", "inconsistent")
#: A 95% interval wider than this says nothing at all (it cannot tell -1/2 from both 0 and -1): no
#: category but ``inconclusive``, a floor included.  The interval verdicts use :data:`MAX_CI_WIDTH`.
UNINFORMATIVE_WIDTH = 1.0
#: Fraction of the window's fits that must stop on a convergence criterion for any verdict.
MIN_CONVERGED = 0.9
#: Level of the curvature test: with six losses and two routers per run, a 5% test would call a
#: straight line pre-asymptotic in about half of all runs; 1% keeps that to about one in ten.
CURVATURE_ALPHA = 0.01
#: Default target half-width of the 95% slope interval for :func:`plan`.
DEFAULT_HALFWIDTH = 0.05


def ols(X: np.ndarray, y: np.ndarray, *, robust: bool, alpha: float) -> dict[str, Any]:
    """statsmodels' ``OLS(y, X).fit(cov_type="HC3" if robust else "nonrobust")``, its results.

    Why: importing statsmodels' OLS imports ``scipy.stats`` (about 1.2 CPU-s with it on
    the project's 2-core machine; scipy parses some 600 docstrings), and the main job's first
    forked worker paid that during the sweep only to fit the rates afterwards.  Here the same
    arithmetic is done with NumPy and two quantiles of ``scipy.special`` (``stdtrit``, ``ndtri``:
    what ``scipy.stats.t.ppf`` and ``norm.ppf`` evaluate), step by step as statsmodels 0.15 does it
    (the pseudo-inverse of ``pinv_extended``, ``ssr``, ``centered_tss``, the profile
    log-likelihood, ``cov_HC3``; the t quantile for the classical errors, the normal one for HC3,
    statsmodels' defaults), so the numbers are the same bits (``tests/rates/test_verdicts_ols.py``
    compares thousands of fits).  Anything outside the regular case -- non-finite data, not
    exactly one constant column, a rank-deficient design, no residual degree of freedom, a
    leverage of 1, a constant or exactly fitted ``y`` -- is handed to statsmodels itself, with its
    warnings and conventions.

    Parameters
    ----------
    X : ndarray, shape ``[m, p]``
        Design with one constant column (``add_constant``'s column of ones).
    y : ndarray, shape ``[m]``
    robust : bool
        HC3 standard errors (else the classical ones).
    alpha : float
        ``conf_int(alpha)``: the ``1 - alpha`` interval.

    Returns
    -------
    dict
        ``params [p]``, ``bse [p]``, ``ci [p, 2]`` (lower, upper), ``rsquared``, ``aic``.
    """
    got = _ols_regular(np.asarray(X, dtype=float), np.asarray(y, dtype=float), robust, alpha)
    if got is not None:
        return got
    from statsmodels.regression.linear_model import OLS  # the irregular cases: statsmodels itself

    res = OLS(y, X).fit(cov_type="HC3" if robust else "nonrobust")
    return {"params": np.asarray(res.params), "bse": np.asarray(res.bse), "ci": np.asarray(res.conf_int(alpha)),
            "rsquared": float(res.rsquared), "aic": float(res.aic)}


def _ols_regular(X: np.ndarray, y: np.ndarray, robust: bool, alpha: float) -> dict[str, Any] | None:
    """:func:`ols` in the regular case, statsmodels' operations in statsmodels' order; ``None``
    where the case is not regular (see :func:`ols`)."""
    # imported here: this module is on the sweep's start-up path (0.2-0.3 CPU-s of scipy.special
    # there, serial); a rates run imports it in a background thread during the sweep (WARM_MODULES)
    from scipy.special import ndtri, stdtrit

    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0] or not (np.isfinite(X).all() and np.isfinite(y).all()):
        return None
    nobs, p = X.shape
    const = np.flatnonzero(X.max(axis=0) == X.min(axis=0))  # statsmodels' k_constant
    if const.size != 1 or X[:, const[0]].mean() == 0:
        return None
    # statsmodels.tools.tools.pinv_extended (rcond 1e-15), then the rank of diag(singular values)
    u, s, vt = np.linalg.svd(X, False)
    s_orig = np.copy(s)
    cutoff = 1e-15 * np.maximum.reduce(s)
    for i in range(min(nobs, p)):
        s[i] = 1.0 / s[i] if s[i] > cutoff else 0.0
    pinv = np.dot(np.transpose(vt), np.multiply(s[:, np.newaxis], np.transpose(u)))
    rank = int(np.linalg.matrix_rank(np.diag(s_orig)))
    df_resid = float(nobs) - rank
    if rank < p or df_resid <= 0:
        return None
    ncp = np.dot(pinv, np.transpose(pinv))  # normalized_cov_params
    params = np.dot(pinv, y)
    wresid = y - np.dot(X, params)
    ssr = np.dot(wresid, wresid)
    ones = np.ones_like(y)  # OLS is WLS with unit weights: centered_tss takes the weighted branch
    mean = np.average(y, weights=ones)
    ctss = np.sum(ones * (y - mean) ** 2)
    resid = y - np.dot(X, params)  # loglike's own residuals and sum
    ssr_llf = np.sum(resid**2)
    if ctss == 0 or ssr_llf == 0:
        return None
    if robust:  # cov_HC3 with _abat_diagonal's leverages; statsmodels' default: normal quantile
        h = np.einsum("ij,ik,kj->i", X, X, ncp)
        if not (h < 1).all():
            return None
        cov = np.dot(pinv, ((wresid / (1 - h)) ** 2)[:, None] * pinv.T)
        q = ndtri(1 - alpha / 2)
    else:  # normalized_cov_params * scale; t quantile on df_resid
        cov = ncp * (np.dot(wresid, wresid) / df_resid)
        q = stdtrit(df_resid, 1 - alpha / 2)
    bse = np.sqrt(np.diag(cov))
    nobs2 = nobs / 2.0
    llf = -nobs2 * np.log(2 * np.pi) - nobs2 * np.log(ssr_llf / float(nobs)) - nobs2
    df_model = float(rank - 1)
    return {"params": params, "bse": bse, "ci": np.column_stack([params - q * bse, params + q * bse]),
            "rsquared": float(1 - ssr / ctss), "aic": float(-2 * llf + 2 * (df_model + 1))}


def theil_sen(y: np.ndarray, x: np.ndarray, alpha: float = 0.95) -> tuple[float, float, float, float]:
    """``scipy.stats.theilslopes(y, x, alpha)``: slope, intercept and Sen's (1968) interval.

    The same operations as scipy 1.17's implementation (the sorted pairwise slopes over
    ``x_i > x_j``, their median, ``median(y) - slope median(x)``, eq. (2.6) of Sen (1968) with
    the ties of ``x`` and ``y``), without importing ``scipy.stats`` (see :func:`ols`):
    the same bits (``tests/rates/test_verdicts_ols.py``).  Non-finite data, fewer than two
    points or no two distinct ``x`` go to scipy itself.

    Parameters
    ----------
    y, x : ndarray, shape ``[m]``
    alpha : float
        Confidence level of the interval (``theilslopes``' ``alpha``).

    Returns
    -------
    tuple of float
        ``(slope, intercept, low_slope, high_slope)``.
    """
    yy = np.array(y, dtype=float, copy=True).ravel()
    xx = np.array(x, dtype=float, copy=True).ravel()
    slopes = None
    if len(xx) == len(yy) and len(xx) >= 2 and np.isfinite(xx).all() and np.isfinite(yy).all():
        deltax = xx[:, np.newaxis] - xx
        deltay = yy[:, np.newaxis] - yy
        slopes = deltay[deltax > 0] / deltax[deltax > 0]
    if slopes is None or not slopes.size:
        from scipy.stats import theilslopes  # the irregular cases: scipy itself

        res = theilslopes(y, x, alpha=alpha)
        return float(res.slope), float(res.intercept), float(res.low_slope), float(res.high_slope)
    from scipy.special import ndtri

    slopes.sort()
    medslope = np.median(slopes)
    medinter = np.median(yy) - medslope * np.median(xx)
    if alpha > 0.5:
        alpha = 1.0 - alpha
    z = ndtri(alpha / 2.0)
    nxreps, nyreps = _repeat_counts(xx), _repeat_counts(yy)
    nt, ny = len(slopes), len(yy)
    sigsq = 1 / 18.0 * (ny * (ny - 1) * (2 * ny + 5) - sum(k * (k - 1) * (2 * k + 5) for k in nxreps)
                        - sum(k * (k - 1) * (2 * k + 5) for k in nyreps))
    try:
        sigma = np.sqrt(sigsq)
        Ru = min(int(np.round((nt - z * sigma) / 2.0)), len(slopes) - 1)
        Rl = max(int(np.round((nt + z * sigma) / 2.0)) - 1, 0)
        delta = slopes[[Rl, Ru]]
    except (ValueError, IndexError):
        delta = (np.nan, np.nan)
    return float(medslope), float(medinter), float(delta[0]), float(delta[1])


def _repeat_counts(a: np.ndarray) -> np.ndarray:
    """How often each repeated value of ``a`` occurs (scipy's ``_find_repeats``' counts)."""
    a = np.sort(np.asarray(a, np.float64).ravel())
    change = np.concatenate(([True], a[1:] != a[:-1]))
    freq = np.diff(np.concatenate(np.nonzero(change) + ([a.size],)))
    return freq[freq > 1]


def _xy(ns: Sequence[int], values: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    x = np.concatenate([np.full(len(v), math.log(n)) for n, v in zip(ns, values)])
    y = np.concatenate([np.log(np.asarray(v, float)) for v in values])
    return x, y


def robust_slope(ns: Sequence[int], values: Sequence[np.ndarray]) -> dict[str, float]:
    """Theil--Sen slope of the per-replicate ``log L`` on ``log n`` (scipy.stats.theilslopes, by :func:`theil_sen`).

    The median of pairwise slopes: one wild replicate moves it by at most one rank, where it can
    move a log-of-mean slope arbitrarily.

    Parameters
    ----------
    ns : sequence of int, length S
    values : sequence of S arrays of positive losses

    Returns
    -------
    dict
        ``slope``, ``ci_low``, ``ci_high`` (the 95% interval of Sen (1968)), ``intercept``.
    """
    x, y = _xy(ns, values)
    slope, intercept, low, high = theil_sen(y, x, 0.95)
    return {"slope": slope, "ci_low": low, "ci_high": high, "intercept": intercept}


def curvature(ns: Sequence[int], values: Sequence[np.ndarray]) -> dict[str, Any]:
    """Quadratic per-replicate fit ``log L = a + b u + c u^2`` with ``u = log n - mean``, HC3 errors.

    Returns
    -------
    dict
        ``c``, ``c_ci`` (99%, :data:`CURVATURE_ALPHA`), ``significant`` (the interval excludes 0), the local slopes
        ``slope_start``/``slope_end`` (``b + 2 c u``) at the window's ends, ``change`` (their
        difference) and ``b``/``u_mean`` for extrapolation.  ``significant`` is False with fewer
        than 4 sample sizes (3 points always fit a parabola).
    """
    x, y = _xy(ns, values)
    um = float(np.mean(np.log(ns)))
    u = x - um
    out: dict[str, Any] = {"c": math.nan, "c_ci": [math.nan, math.nan], "significant": False, "u_mean": um}
    if len(ns) < 4:
        return out
    X = np.column_stack([np.ones_like(u), u, u * u])
    res = ols(X, y, robust=True, alpha=CURVATURE_ALPHA)  # statsmodels' HC3 OLS, same bits
    ci = res["ci"]
    b, c = float(res["params"][1]), float(res["params"][2])
    u0, u1 = math.log(ns[0]) - um, math.log(ns[-1]) - um
    out.update({
        "b": b, "c": c, "c_ci": [float(ci[2, 0]), float(ci[2, 1])],
        "significant": bool(ci[2, 0] > 0 or ci[2, 1] < 0),
        "slope_start": b + 2 * c * u0, "slope_end": b + 2 * c * u1, "change": 2 * c * (u1 - u0),
    })
    return out


def tail_slope(ns: Sequence[int], values: Sequence[np.ndarray]) -> dict[str, Any]:
    """Theil--Sen slope over the largest ``max(3, ceil(S/2))`` sample sizes (``n_min`` included)."""
    m = max(3, math.ceil(len(ns) / 2))
    r = robust_slope(ns[-m:], values[-m:])
    r["n_min"] = int(ns[-m])
    return r


def stable_from(ns: Sequence[int], values: Sequence[np.ndarray], tolerance: float) -> int | None:
    """The smallest ``n_0`` of the grid such that over ``n >= n_0`` the log-log curve is straight.

    Straight: no significant curvature, or a local-slope change across that part of at most
    ``tolerance``.  Needs at least 4 sizes in the part (3 always fit a parabola); ``None`` when no
    such ``n_0`` exists (not yet stable within the window).
    """
    for j in range(0, len(ns) - 3):
        cv = curvature(ns[j:], values[j:])
        if not cv["significant"] or abs(cv["change"]) <= tolerance:
            return int(ns[j])
    return None


def _f(v: float) -> str:
    return f"{v:.2f}"




def categorize(
    *,
    predicted: float | None,
    slope: float | None,
    ci: tuple[float, float] | None,
    ns: Sequence[int],
    values: Sequence[np.ndarray],
    tolerance: float,
    converged: tuple[int, int] | None = None,
    robust: dict | None = None,
    curv: dict | None = None,
    tail: dict | None = None,
    halfwidth: float = DEFAULT_HALFWIDTH,
    slow_rate: bool = False,
    sided: str = "two",
    log_factor: bool = False,
) -> dict[str, Any]:
    """The category and one-line reason of one rate fit (rules in the module docstring).

    Parameters
    ----------
    predicted : float or None
        Predicted exponent (``None``: no rate stated; the category is ``None`` with the reason
        :data:`NO_RATE_STATED`, unless ``slow_rate``).
    slope : float or None
        Log-of-mean slope (``None`` when there were too few sample sizes).
    ci : (float, float) or None
        Its 95% interval.
    ns, values : the window's sample sizes and per-replicate losses (see :func:`robust_slope`).
    tolerance : float
        The band of :func:`judge_interval` (``near``) and the slope change the floor and curvature
        rules count.
    converged : (int, int), optional
        Fits in the window that stopped on a convergence criterion, and all fits.
    robust, curv, tail : dict, optional
        Precomputed :func:`robust_slope`, :func:`curvature`, :func:`tail_slope` (computed when absent).
    halfwidth : float
        Target half-width quoted in an ``inconclusive`` reason (see :func:`plan`).
    slow_rate : bool
        ``predicted`` is ``None`` because the theorem says "slower than any polynomial rate"
        (Theorems 2/3): then only ``inconclusive``/``floor`` or ``None`` are returned, as the
        evidence of :func:`moestat.rates.stability.slow_rate_category`.
    sided : {"two", "upper"}
        How the prediction is tested (:func:`judge_interval`).
    log_factor : bool
        The rate is stated as ``(log n / n)^{-predicted}`` (:func:`judge_interval`).

    Returns
    -------
    dict
        ``category`` (one of :data:`CATEGORIES`, or ``None`` when nothing is predicted, and for a
        slow-rate claim also when no floor is seen) and ``reason`` (one line).
    """
    tol = float(tolerance)
    if predicted is None and not slow_rate:
        return {"category": None, "reason": NO_RATE_STATED}
    if slope is None or ci is None or len(ns) < 3:
        return {"category": "inconclusive", "reason": "fewer than 3 sample sizes with >= 2 finite positive losses in the window"}
    lo, hi = float(ci[0]), float(ci[1])
    if converged is not None and converged[1] > 0 and converged[0] < MIN_CONVERGED * converged[1]:
        return {"category": "inconclusive",
                "reason": f"only {converged[0]}/{converged[1]} fits stopped on a convergence criterion (< {MIN_CONVERGED:.0%}): "
                          "not the estimates (least squares or maximum likelihood) the theorem bounds (a larger max_iter?)"}
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return {"category": "inconclusive", "reason": "non-finite interval"}
    width = hi - lo
    if width > UNINFORMATIVE_WIDTH:
        return {"category": "inconclusive",
                "reason": f"95% CI [{_f(lo)}, {_f(hi)}] is {width:.2f} wide (> {UNINFORMATIVE_WIDTH:g}): cannot tell -1/2 from 0 or -1"}
    robust = robust if robust is not None else robust_slope(ns, values)
    tail = tail if tail is not None else tail_slope(ns, values)
    curv = curv if curv is not None else curvature(ns, values)
    # floor: flat at the top of the window where it should decrease (Theil-Sen, so one replicate
    # cannot fake it); with no prediction, the flat tail must exclude the parametric -1/2 (widened)
    ref = predicted if predicted is not None else -0.5
    if tail["ci_high"] >= 0.0 and tail["ci_high"] - tail["ci_low"] <= UNINFORMATIVE_WIDTH and ref < 0 and tail["ci_low"] - tol > ref:
        what = f", excludes {ref:g} - {tol:g}"
        return {"category": "floor",
                "reason": f"stops decreasing: Theil-Sen slope over n >= {tail['n_min']} is {_f(tail['slope'])} "
                          f"[{_f(tail['ci_low'])}, {_f(tail['ci_high'])}] (contains 0{what})"}
    if ref < 0 and hi >= 0.0 and lo - tol > ref:
        return {"category": "floor", "reason": f"no decay over the window: 95% CI [{_f(lo)}, {_f(hi)}] contains 0 and excludes {ref:g} - {tol:g}"}
    rule = {"sided": sided, "log_factor": log_factor, "tolerance": tol}
    if curv.get("significant") and abs(curv["change"]) > tol:
        n0 = stable_from(ns, values, tol)
        if n0 is not None and n0 > ns[0]:
            j = list(ns).index(n0)
            st = robust_slope(ns[j:], values[j:])
            # what the interval rule says of the stable part (reported; the category stays pre-asymptotic)
            verdict_there = "" if predicted is None else (
                f", {judge_interval(predicted, st['ci_low'], st['ci_high'], ns=ns[j:], max_width=math.inf, **rule)['category']} "
                f"against {prediction_text(predicted, sided, log_factor)}")
            where = (f"stable from n = {n0}: Theil-Sen slope there {_f(st['slope'])} [{_f(st['ci_low'])}, {_f(st['ci_high'])}]"
                     f"{verdict_there}")
        else:
            where = "not yet stable within the window: a larger n-max is needed"
        return {"category": "pre-asymptotic",
                "reason": f"log-log curvature: local slope {_f(curv['slope_start'])} at n = {ns[0]} -> {_f(curv['slope_end'])} "
                          f"at n = {ns[-1]}; {where}",
                "stable_from": n0 if n0 is not None and n0 > ns[0] else None}
    if predicted is None:
        return {"category": None, "reason": "no floor, and no polynomial rate to compare with (Thms 2/3)"}
    main = judge_interval(predicted, lo, hi, ns=ns, **rule)
    if main["category"] == "inconclusive":  # wider than the cap
        return {"category": "inconclusive", "reason": main["reason"]}
    if predicted < 0 and hi >= 0.0 and main["covers"]:
        return {"category": "inconclusive",
                "reason": f"95% CI [{_f(lo)}, {_f(hi)}] contains both {predicted:g} and 0 (no decay)"}
    # the robust slope must reach the same verdict: its interval judged by the same rule (no cap: the
    # cap is on the reported interval)
    rob = judge_interval(predicted, robust["ci_low"], robust["ci_high"], ns=ns, max_width=math.inf, **rule)
    rs = f"Theil-Sen {_f(robust['slope'])} [{_f(robust['ci_low'])}, {_f(robust['ci_high'])}]"
    cat, rcat = main["category"], rob["category"]
    if cat == rcat:
        return {"category": cat, "reason": f"{main['reason']}; {rs} agrees"}
    if "consistent" in (cat, rcat):
        which = "OLS" if cat == "consistent" else "Theil-Sen"
        return {"category": "inconclusive",
                "reason": f"only the {which} interval covers {prediction_text(predicted, sided, log_factor)} (CI [{_f(lo)}, {_f(hi)}], "
                          f"{rs}): a few replicates drive the slope"}
    # both exclude the prediction, one of them within the band: not more than near
    return {"category": "near", "reason": f"{main['reason']}; {rs} {rcat}"}


def plan(
    *,
    predicted: float | None,
    reps: int,
    bootstrap: dict,
    log_mean: dict,
    curv: dict,
    ns: Sequence[int],
    category: str | None,
    halfwidth: float = DEFAULT_HALFWIDTH,
    stable_from: int | None = None,
) -> dict[str, Any]:
    """Monte Carlo planning from the run's own variance.

    Parameters
    ----------
    predicted : float or None
    reps : int
        Replicates per sample size (the smallest count in the window).
    bootstrap, log_mean : dict
        :func:`moestat.rates.fit.bootstrap_slope` and :func:`moestat.rates.fit.log_mean_fit` results.
    curv : dict
        :func:`curvature` result.
    ns : sequence of int
        Sample sizes of the window.
    category : str or None
    halfwidth : float
        Target half-width ``h`` of the 95% interval.
    stable_from : int, optional
        For a ``pre-asymptotic`` fit, the ``n`` from which the curve is straight
        (:func:`stable_from`): then a window starting there, not a larger n-max, is what is needed.

    Returns
    -------
    dict
        ``halfwidth`` (target), ``halfwidth_now`` (bootstrap), ``lack_of_fit_halfwidth``,
        ``reps_needed`` (``ceil(R (h_boot/h)^2)``, at least ``R``), ``larger_n_needed`` (bool),
        ``n_reach`` (quadratic extrapolation of where the local slope reaches the prediction, or
        ``None``) and ``line`` (one printed sentence).
    """
    hb = 0.5 * (bootstrap["ci_high"] - bootstrap["ci_low"])
    hl = 0.5 * (log_mean["ci_high"] - log_mean["ci_low"])
    need = max(int(reps), int(math.ceil(reps * (hb / halfwidth) ** 2))) if hb > 0 else int(reps)
    larger = bool(category == "floor" or (category == "pre-asymptotic" and stable_from is None)
                  or (category != "pre-asymptotic" and curv.get("significant") and hl > halfwidth))
    n_reach = None
    if curv.get("significant") and predicted is not None and curv.get("c", 0) != 0:
        u = (predicted - curv["b"]) / (2 * curv["c"])
        n_star = math.exp(u + curv["u_mean"])
        if n_star > ns[-1] and math.isfinite(n_star):
            n_reach = float(n_star)
    parts = [f"{need} replicates per n for +-{halfwidth:g} (bootstrap +-{hb:.3f} with {reps})"]
    if 2 * halfwidth > MAX_CI_WIDTH:  # a target the verdict's cap would still turn away
        parts.append(f"the target width {2 * halfwidth:g} exceeds the verdict's cap {MAX_CI_WIDTH:g}: ask for +-{MAX_CI_WIDTH / 2:g} or less")
    if hl > halfwidth:
        parts.append(f"straight-line lack of fit +-{hl:.3f} does not shrink with replicates")
    if stable_from is not None:
        parts.append(f"fit the window n >= {stable_from} (declare --window-min {stable_from} before the next run)")
    if larger:
        parts.append("larger n-max needed" + (f" (local slope reaches {predicted:g} near n = {n_reach:.3g}, quadratic extrapolation)"
                                               if n_reach is not None else ""))
    return {"halfwidth": halfwidth, "halfwidth_now": hb, "lack_of_fit_halfwidth": hl, "reps_needed": need,
            "larger_n_needed": larger, "n_reach": n_reach, "line": "; ".join(parts)}


# ---------------------------------------------------------------------------------------------
# contrasts: a replicate-paired bootstrap interval of the slope difference
# ---------------------------------------------------------------------------------------------
#: Bootstrap draws of :func:`paired_slope_difference`.
PAIRED_BOOT = 4000


def _masked_slopes(x: np.ndarray, y: np.ndarray, m: np.ndarray) -> np.ndarray:
    """OLS slopes of ``y[b, s]`` on ``x[s]`` over the points ``m[b, s]`` (NaN with fewer than 3)."""
    w = m.astype(float)
    cnt = w.sum(1)
    yz = np.where(m, y, 0.0)
    xm = (w * x).sum(1) / np.maximum(cnt, 1)
    ym = yz.sum(1) / np.maximum(cnt, 1)
    dx = (x[None, :] - xm[:, None]) * w
    sxx = (dx * dx).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (dx * (yz - ym[:, None] * w)).sum(1) / sxx
    return np.where((cnt >= 3) & (sxx > 0), out, np.nan)


def paired_slope_difference(ns: Sequence[int], a: np.ndarray, b: np.ndarray, *, n_boot: int = PAIRED_BOOT,
                            seed: int = 0, level: float = 0.95, statistic: str = "mean") -> dict[str, Any]:
    """Replicate-paired bootstrap interval of ``slope(A) - slope(B)`` (log-of-mean, or log-of-median,
    slopes on ``log n``).

    Parameters
    ----------
    ns : sequence of int, length S
        Sample sizes (the window), increasing.
    a, b : ndarray, shape ``[S, R]``
        Losses of arms A and B; ``a[s, r]`` and ``b[s, r]`` come from the same data stream
        (sample size ``ns[s]``, replicate ``r``).  A pair with a non-finite or non-positive value
        in either arm is left out of both (the pairing is kept).
    n_boot : int
        Bootstrap draws: each draws ``R`` replicate indices with replacement, keeps them at every
        ``n`` in both arms, and refits both slopes to the log of the per-``n`` means.
    seed : int
        Seed of the draws (``SeedSequence(seed)``): the interval is a function of the data and the seed.
    level : float
        Coverage of the percentile interval.
    statistic : {"mean", "median"}
        What each arm's slope is fitted to per ``n`` (the same draws either way).

    Returns
    -------
    dict
        ``slope_a``, ``slope_b``, ``difference`` (on all replicates), ``ci`` ([low, high] of the
        difference), ``level``, ``n_boot`` (draws with a slope in both arms), ``replicates``,
        ``pairs`` (valid pairs), ``ns``, ``seed``, ``statistic``.
    """
    ns = [int(n) for n in ns]
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or a.ndim != 2 or a.shape[0] != len(ns):
        raise ValueError(f"a and b must both have shape [len(ns), R] = [{len(ns)}, R], got {a.shape} and {b.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if isinstance(n_boot, bool) or int(n_boot) != n_boot or n_boot < 100:
        raise ValueError(f"n_boot must be an integer >= 100, got {n_boot!r}")
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    S, R = a.shape
    x = np.log(np.asarray(ns, float))
    A, B, V = np.where(valid, a, 0.0), np.where(valid, b, 0.0), valid.astype(float)

    def slopes(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        den = W @ V.T  # [D, S]: resampled pairs at each n
        m = den > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            ya, yb = np.log((W @ A.T) / den), np.log((W @ B.T) / den)
        return _masked_slopes(x, ya, m), _masked_slopes(x, yb, m)

    Am, Bm = np.where(valid, a, np.nan), np.where(valid, b, np.nan)  # an invalid pair: NaN in both arms

    def median_slopes(I: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # the drawn replicates I [D, R] at every n; NaN pairs are left out of the medians, as above of the means
        m = valid[:, I].any(axis=2).T  # [D, S]
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an n without a valid drawn pair: masked
            ya = np.log(np.nanmedian(Am[:, I], axis=2)).T
            yb = np.log(np.nanmedian(Bm[:, I], axis=2)).T
        return _masked_slopes(x, ya, m), _masked_slopes(x, yb, m)

    rng = np.random.default_rng(np.random.SeedSequence(int(seed)))
    draws = [rng.integers(0, R, size=R) for _ in range(int(n_boot))]
    if statistic == "mean":
        sa, sb = slopes(np.ones((1, R)))
        W = np.stack([np.bincount(i, minlength=R) for i in draws]).astype(float)
        da, db = slopes(W)
    else:
        sa, sb = median_slopes(np.arange(R)[None, :])
        da, db = median_slopes(np.stack(draws))
    d = da - db
    d = d[np.isfinite(d)]
    lo, hi = (np.quantile(d, [(1 - level) / 2, (1 + level) / 2]) if d.size else (math.nan, math.nan))
    return {"slope_a": float(sa[0]), "slope_b": float(sb[0]), "difference": float(sa[0] - sb[0]),
            "ci": [float(lo), float(hi)], "level": float(level), "n_boot": int(d.size), "replicates": int(R),
            "pairs": int(valid.sum()), "ns": ns, "seed": int(seed), "statistic": statistic}


def paired_arrays(rows_a, rows_b, loss: str, window: tuple[int | None, int | None] = (None, None),
                  router_a: str | None = None, router_b: str | None = None) -> tuple[list[int], np.ndarray, np.ndarray]:
    """``(ns, a [S, R], b [S, R])`` of ``loss`` from two ``results.csv`` tables, paired on ``(n, replicate)``.

    Only ``(n, replicate)`` present in both tables are kept (NaN elsewhere); ``router_a``/``router_b``
    select a router's rows (two routers fitted to the same data in one run).

    Raises
    ------
    ValueError
        Two rows of one table share an ``(n, replicate)``, or (with a ``seed`` column) a pair was
        drawn from different root seeds: not the same data stream, so not paired.
    """
    def table(df, router):
        if router is not None:
            df = df[df["router"] == router]
        if df.duplicated(["n", "replicate"]).any():
            raise ValueError("several rows share an (n, replicate): select one router")
        seeds = df["seed"] if "seed" in df else [None] * len(df)
        return {(int(n), int(r)): (float(v), s) for n, r, v, s in zip(df["n"], df["replicate"], df[loss], seeds)}

    ta, tb = table(rows_a, router_a), table(rows_b, router_b)
    unpaired = [k for k in set(ta) & set(tb) if ta[k][1] is not None and tb[k][1] is not None and int(ta[k][1]) != int(tb[k][1])]
    if unpaired:
        raise ValueError(f"{len(unpaired)} (n, replicate) pairs come from different seeds (e.g. {sorted(unpaired)[0]}): "
                         "not the same data streams, a paired interval does not apply")
    ta, tb = {k: v for k, (v, _) in ta.items()}, {k: v for k, (v, _) in tb.items()}
    keys = sorted(set(ta) & set(tb))
    lo, hi = window
    ns = sorted({n for n, _ in keys if (lo is None or n >= lo) and (hi is None or n <= hi)})
    reps = sorted({r for _, r in keys})
    a = np.full((len(ns), len(reps)), np.nan)
    b = np.full_like(a, np.nan)
    for (n, r) in keys:
        if n in ns:
            a[ns.index(n), reps.index(r)], b[ns.index(n), reps.index(r)] = ta[(n, r)], tb[(n, r)]
    return ns, a, b


def paired_contrast(ns: Sequence[int], slow: np.ndarray, fast: np.ndarray, *, n_boot: int = PAIRED_BOOT,
                    seed: int = 0, level: float = 0.95, statistic: str = "mean") -> dict[str, Any]:
    """The contrast "``slow`` is slower than ``fast``" from :func:`paired_slope_difference`.

    ``consistent`` when the interval of ``slope(slow) - slope(fast)`` lies above 0 (the slow arm
    is flatter), ``inconsistent`` when it lies below 0 (it is steeper), ``inconclusive`` when it
    contains 0 or fewer than 3 sample sizes hold pairs.
    """
    if len(ns) < 3:
        return {"category": "inconclusive", "reason": f"{len(ns)} sample sizes with pairs in both arms (< 3)", "ci": None}
    r = paired_slope_difference(ns, slow, fast, n_boot=n_boot, seed=seed, level=level, statistic=statistic)
    lo, hi = r["ci"]
    cat = "inconclusive" if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0.0 <= hi else (
        "consistent" if lo > 0 else "inconsistent")
    words = {"consistent": "excludes 0: slower", "inconsistent": "excludes 0 on the wrong side: faster",
             "inconclusive": "contains 0: cannot tell"}[cat]
    of = "" if statistic == "mean" else " of the per-n medians"
    reason = (f"slope difference{of} {r['difference']:+.3f} (slow {r['slope_a']:.3f} - fast {r['slope_b']:.3f}), "
              f"replicate-paired {level:.0%} bootstrap interval [{lo:+.3f}, {hi:+.3f}] ({r['replicates']} replicates, "
              f"n {ns[0]}-{ns[-1]}, {r['n_boot']} draws, seed {r['seed']}) {words}")
    return {"category": cat, "reason": reason, **r}


def verdict(predicted: float | None, ci_low: float, ci_high: float, tolerance: float = DEFAULT_TOLERANCE, *,
            sided: str = "two", log_factor: bool = False, ns: Sequence[float] | None = None) -> dict[str, Any]:
    """The interval flags of one fit, from :func:`judge_interval` (no width cap: flags, not a verdict).

    ``consistent``: the interval covers the prediction (the rule's ``covers``; for an upper bound,
    reaches its steep side); ``near``: it excludes it by at most ``tolerance``; ``within_band``: the
    whole interval inside ``[predicted - tol, predicted + tol]``; ``sided`` as given.  ``None`` for
    the flags when nothing is predicted or the interval is not finite.
    """
    if predicted is None or not (np.isfinite(ci_low) and np.isfinite(ci_high)):
        return {"consistent": None, "near": None, "within_band": None, "sided": None if predicted is None else sided}
    r = judge_interval(predicted, ci_low, ci_high, sided=sided, log_factor=log_factor, ns=ns, tolerance=tolerance,
                       max_width=math.inf)
    return {
        "consistent": bool(r["covers"]),
        "near": r["category"] == "near",
        "within_band": bool(predicted - tolerance <= ci_low and ci_high <= predicted + tolerance),
        "sided": sided,
    }


# ----------------------------------------------------------------------------------------------
# the verdict flow of a table of rate fits (what moestat.rates.fit.fit_rates hands over)
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Curve:
    """One data set of a rate fit: the window's sample sizes, the per-replicate losses, the
    converged fits and the slope with its interval.

    Attributes
    ----------
    ns : list of int, length S
    values : list of S arrays
        Finite positive losses of the replicates at each ``ns[j]``.
    converged : (int, int) or None
        Fits that stopped on a convergence criterion, and all fits (``None``: not recorded).
    slope : dict
        :func:`moestat.rates.fit.slope_with_interval` of ``(ns, values)``.
    """

    ns: list
    values: list
    converged: tuple[int, int] | None
    slope: dict


@dataclass(frozen=True)
class FitData:
    """What :func:`judge_fits` judges one fit entry by.

    Attributes
    ----------
    whole : Curve
        Every replicate in the window (the entry's ``slope``, ``ci_low``, ``ci_high``).
    halves : tuple of (Curve or None)
        The two independent halves (:func:`moestat.rates.stability.halves`); ``None``: fewer
        than 3 sample sizes in that half.
    slow_rate : bool
        A Theorem 2/3 claim (:func:`moestat.rates.stability.is_slow_rate`).
    alt : dict or None
        The slope with interval of the same loss after a start of another noise scale
        (``alt_<loss>``), with ``alt_scales = (init_scale, alt_init_scale)``.
    """

    whole: Curve
    halves: tuple
    slow_rate: bool
    alt: dict | None = None
    alt_scales: tuple[float, float] | None = None


def judge_fits(fits: list[dict[str, Any]], data: Sequence[FitData | None], *, tolerance: float = DEFAULT_TOLERANCE,
               halfwidth: float = DEFAULT_HALFWIDTH) -> None:
    """Give every fit entry its verdict, category, reason and plan (in place).

    Each entry with data (``None``: no slope, the entry keeps what it has) gets :func:`verdict`,
    the evidence of :func:`categorize` on its whole data (robust slope, curvature, tail), its
    :func:`plan` and, with ``alt``, its ``start_sensitivity``; then the rules of
    :mod:`moestat.rates.stability` settle the categories (the slow-rate rule, and two
    independent halves agreeing), and a start that moves the slope beyond the interval's
    half-width is named in the reason.

    Parameters
    ----------
    fits : list of dict
        Entries of :func:`moestat.rates.fit.fit_rates` with ``router, loss, predicted`` and,
        with data, ``slope, ci_low, ci_high``.
    data : sequence of FitData or None, aligned with ``fits``
    tolerance, halfwidth : float
        See :func:`verdict` and :func:`plan`.
    """
    evidence = [None if d is None else _judge(f, d, tolerance, halfwidth) for f, d in zip(fits, data)]
    settle(fits, evidence, tolerance)
    for f in fits:
        st = f.get("start_sensitivity")
        if st and st["moves"]:
            f["reason"] = (f"{f.get('reason') or ''}; the start moves the slope: start noise {st['init_scale']:g} -> "
                           f"{st['alt_init_scale']:g} gives {st['alt_slope']:.2f} (by {st['difference']:+.2f}, more than the "
                           f"interval's half-width {st['halfwidth']:.2f}): what is measured depends on the start")


def _evidence(c: Curve, predicted: float | None, tolerance: float, halfwidth: float, slow_rate: bool,
              rule: dict[str, Any] | None = None) -> dict[str, Any]:
    """Slope with interval, robust slope, curvature, tail and the generic category of one data set
    (``slow_rate``: a Theorem 2/3 claim, see :func:`categorize`; ``rule``: ``sided`` and ``log_factor``)."""
    swi = c.slope
    rob, cv, tl = robust_slope(c.ns, c.values), curvature(c.ns, c.values), tail_slope(c.ns, c.values)
    cat = categorize(predicted=predicted, slope=swi["slope"], ci=(swi["ci_low"], swi["ci_high"]), ns=c.ns, values=c.values,
                     tolerance=tolerance, converged=c.converged, robust=rob, curv=cv, tail=tl, halfwidth=halfwidth,
                     slow_rate=slow_rate, **(rule or {}))
    return {**swi, "robust": rob, "curvature": cv, "tail": tl, "ns": list(c.ns), "values": c.values, **cat}


def _judge(entry: dict[str, Any], d: FitData, tolerance: float, halfwidth: float) -> list[dict[str, Any]]:
    """One entry's verdict, category and plan; returns the evidence of the whole data and of each half."""
    predicted, w = entry["predicted"], d.whole
    # how the entry's prediction is tested, as the fit declared it (moestat.rates.fit.predicted_sided)
    rule = {"sided": entry.get("sided") or "two", "log_factor": bool(entry.get("log_factor", False))}
    ev = _evidence(w, predicted, tolerance, halfwidth, d.slow_rate, rule)
    entry.update(verdict(predicted, entry["ci_low"], entry["ci_high"], tolerance, ns=w.ns, **rule))
    cat = {"category": ev["category"], "reason": ev["reason"]}
    entry.update({"robust": ev["robust"], "curvature": ev["curvature"], "tail": ev["tail"],
                  "converged": list(w.converged) if w.converged else None, **cat})
    if ev.get("stable_from") is not None:
        entry["stable_from"] = ev["stable_from"]
    entry["plan"] = plan(predicted=predicted, reps=min(len(v) for v in w.values), bootstrap=w.slope["bootstrap"],
                         log_mean=w.slope["log_mean"], curv=ev["curvature"], ns=w.ns, category=cat["category"],
                         halfwidth=halfwidth, stable_from=ev.get("stable_from"))
    halves = [{"category": "inconclusive", "reason": "fewer than 3 sample sizes in this half", "slope": None} if h is None
              else _evidence(h, predicted, tolerance, halfwidth, d.slow_rate, rule) for h in d.halves]
    if d.alt is not None:
        entry["start_sensitivity"] = _start_sensitivity(entry, d.alt, d.alt_scales)
    return [ev, *halves]


def _start_sensitivity(entry: dict[str, Any], alt: dict[str, Any], scales: tuple[float, float]) -> dict[str, Any]:
    """How far a start of another noise scale moves the slope, against the interval's half-width."""
    half = 0.5 * (entry["ci_high"] - entry["ci_low"])
    diff = alt["slope"] - entry["slope"]
    return {"init_scale": scales[0], "alt_init_scale": scales[1], "slope": entry["slope"], "alt_slope": alt["slope"],
            "alt_ci": [alt["ci_low"], alt["ci_high"]], "difference": diff, "halfwidth": half, "moves": bool(abs(diff) > half)}

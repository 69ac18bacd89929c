"""Rate fits with uncertainty: statsmodels OLS on log-log, a bootstrap over replicates, window
sensitivity, the ``C / log(n)^t`` alternative, and verdicts against the theorems of Nguyen et al. (2024)
("Statistical Advantages of Perturbing Cosine Router in Sparse Mixture of Experts").

For one router and one loss, the data are the per-replicate losses ``L_{n,r}`` on a grid of
sample sizes.  Within the declared window ``[window_min, window_max]``:

* **log-of-mean fit** (the peers' and the paper's figure): OLS of ``log(mean_r L_{n,r})`` on
  ``log n``; its slope is the reported ``slope``.
* **per-replicate fit**: OLS of ``log L_{n,r}`` on ``log n`` over every point, with
  heteroscedasticity-robust (HC3) errors (the slope of ``E log L``; reported beside it).
* **bootstrap over replicates**: replicates are resampled with replacement independently at
  each ``n`` (the data sets at different ``n`` are independent), the log-of-mean slope is
  refitted, and the 2.5% / 97.5% percentiles taken.

The reported 95% interval ``[ci_low, ci_high]`` is the **envelope** of the bootstrap interval
(sampling noise of the replicates) and the OLS t-interval of the log-of-mean fit (lack of fit
of a straight line, e.g. curvature before the asymptotic regime); it is never narrower than
either.

This module computes the slopes; :func:`fit_rates` hands each fit's data (the whole window and
its two halves, :class:`moestat.rates.verdicts.FitData`) to
:func:`moestat.rates.verdicts.judge_fits`, which gives every fit its verdict, category and plan.

Verdict (:func:`moestat.rates.verdicts.judge_interval`, the one interval rule, applied to every fit
through :func:`moestat.rates.verdicts.categorize`): a loss with a predicted exponent ``p`` is
``consistent`` only when the 95% interval covers ``p`` (an upper bound, ``sided = "upper"``
(:data:`UPPER_BOUNDS`): when the interval reaches ``p`` or its steep side), ``near`` when it excludes
``p`` by at most the declared tolerance (default 0.15), ``inconsistent`` beyond, and ``inconclusive``
when it is wider than :data:`moestat.rates.verdicts.MAX_CI_WIDTH`.  The flags ``consistent`` (the
interval covers) and ``near`` are recorded beside the category with ``sided``; ``within_band`` says
whether the whole interval lies inside ``[p - tol, p + tol]``.  Losses without a polynomial prediction (the
vanilla cosine router's Voronoi losses) get ``predicted = None`` and are judged by the slow-rate
rule of :mod:`moestat.rates.stability` (a floor, or local slopes flattening with ``n``, compared
with the perturbed router in the same run); the AIC comparison with ``C / log(n)^t`` is reported
and decides nothing.  Every category is reported only when two independent halves of the
replicates reach the same one (:func:`moestat.rates.stability.combine_halves`).

The theorems' rates carry a log factor, ``(log n / n)^{1/2}``; the slope of the log loss on
``log(n / log n)`` is reported too (``slope_log_n_over_n``; ``-1/2`` for a loss of exactly that
rate, where the slope on ``log n`` is slightly flatter).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from moestat.rates.labels import LOSS_NAMES
from moestat.rates.stability import halves, is_slow_rate
from moestat.seeding import numpy_generator
from moestat.rates.verdicts import (DEFAULT_HALFWIDTH, DEFAULT_TOLERANCE, STATISTICS, Curve, FitData, judge_fits, ols,
                                     verdict)

__all__ = [
    "DEFAULT_TOLERANCE",
    "LOSS_DEFINITIONS",
    "predicted_exponent",
    "predicted_sided",
    "UPPER_BOUNDS",
    "fit_experiment",
    "ols_fit",
    "log_mean_fit",
    "per_replicate_fit",
    "bootstrap_slope",
    "slope_with_interval",
    "window_sensitivity",
    "log_model_comparison",
    "verdict",
    "fit_rates",
    "aggregate",
]


#: What each loss column measures (written into summary.json).
LOSS_DEFINITIONS = {
    "voronoi": "Voronoi loss of the setting: D3 (eq. 16 = D_{1,1}) exact, D2 (eq. 13) over-specified; max over K-subsets of true cells",
    "voronoi_direction": "the same Voronoi loss with beta1 replaced by beta1/||beta1|| (direction only)",
    "param_single": "max plain distance ||omega_i - omega*_j|| over fitted atoms alone in their Voronoi cell (Thm 5 (i))",
    "param_multi": "max over shared Voronoi cells of the mass-weighted RMS distance "
                   "sqrt(sum_{A_j} w_i ||omega_i - omega*_j||^2 / sum_{A_j} w_i), the quantity D2 bounds (Thm 5 (i))",
    "mass": "max |sum_{i in A_j} exp(beta0_i) - exp(beta0*_j)| over cells",
    "regression_l2": "||g_hat - g*||_{L2(mu)} on a fixed held-out sample (Thms 1, 4)",
    "weighted_single": "sum over one-atom cells of exp(beta0_i) ||omega_i - omega*_j|| (a D2 term, Thm 5)",
    "weighted_multi": "sum over multi-atom cells of sum_{i in A_j} exp(beta0_i) ||omega_i - omega*_j||^2 (a D2 term, Thm 5)",
    "beta1_radial": "max | ||beta1_i|| - ||beta1*_j|| | (PDE (4): unidentified under the vanilla cosine router)",
    "beta1_direction": "max || beta1_i/||beta1_i|| - beta1*_j/||beta1*_j|| || (identified by both cosine routers)",
}


def predicted_exponent(
    router: str, setting: str, loss: str, estimator: str = "lse", predicted: Mapping[str, float | None] | None = None
) -> float | None:
    """The exponent of ``n`` that Nguyen et al. (2024) predict for ``loss`` (``None``: no rate stated).

    Perturbed router: Nguyen et al. (2024), Theorem 6 (exact; every loss ``-1/2``) and Theorem 5 (over-specified:
    D2, single-atom cells, masses and regression ``-1/2``; atoms in multi-atom cells ``-1/4``).
    Vanilla cosine router: regression ``-1/2`` (Theorem 1), Voronoi and parameter losses have no
    polynomial rate (Theorems 2, 3).  Linear router: regression ``-1/2`` (same entropy argument);
    its parameter losses are not covered by Nguyen et al. (2024).  The null estimator (returns its start)
    has slope 0 for every loss.  ``predicted`` (loss name -> exponent or ``None``), e.g. a file
    scenario's declared exponents (:mod:`moestat.data.scenario_files`), takes precedence for the
    losses it names.

    Theorem 5's mass-weighted cell errors (``weighted_single``, ``weighted_multi``: terms of D2,
    eq. 13) are predicted ``-1/2`` for the perturbed router; PDE (4) splits the ``beta1`` error into
    ``beta1_radial`` (no rate under the vanilla router: a floor) and ``beta1_direction`` (``-1/2``
    exact-specified).  Over-specified, both are the largest error over *all* fitted atoms, unweighted,
    and no theorem states a rate for that: Theorem 5 (i) bounds a shared cell's atoms only weighted by
    their masses ``exp(beta0_i)`` (D2, eq. 13), so an atom whose mass vanishes may sit anywhere (the
    perturbed fits' run-off atom sits at the box), and both get ``None``; the mass-weighted
    ``weighted_single``/``weighted_multi`` carry the theorem.
    ``best_<loss>`` (the loss at the certificate's best-objective fit) has the prediction of ``<loss>``.
    """
    if estimator == "null":
        return 0.0
    if predicted is not None and loss in predicted:
        return predicted[loss]
    if loss.startswith("best_"):  # the same loss at the best-objective fit of the certificate
        loss = loss[len("best_"):]
        if predicted is not None and loss in predicted:  # e.g. a scenario file's declared loss
            return predicted[loss]
    if loss in ("beta1_direction", "beta1_radial") and setting != "exact":
        return None  # the unweighted max over atoms: Theorem 5 (i) bounds shared cells only by mass
    if loss == "beta1_direction":  # PDE (4): the direction is identified by both cosine routers
        return -0.5 if router in ("perturbed", "cosine") else None
    if loss == "beta1_radial":  # unidentified under the vanilla router (a floor), -1/2 perturbed (Thm 6)
        return -0.5 if router == "perturbed" else None
    if loss in ("weighted_single", "weighted_multi"):  # D2 terms (eq. 13), Theorem 5
        return -0.5 if router == "perturbed" else None
    if loss == "regression_l2":
        return -0.5
    if router != "perturbed":
        return None
    if setting == "exact":
        return None if loss == "param_multi" else -0.5
    return -0.25 if loss == "param_multi" else -0.5


#: Losses whose predicted exponent the theorems state as a worst-case upper bound, with the reason;
#: judged one-sided (``sided="upper"``, :func:`moestat.rates.verdicts.judge_interval`): a loss falling
#: faster than the bound does not contradict it.  Every other prediction is tested two-sided.
UPPER_BOUNDS = {
    "param_multi": "over-specified shared-cell per-parameter rate: Theorem 5 of Nguyen et al. (2024) (n^-1/4) and "
                   "Theorem 2 of Nguyen, Nguyen & Ho (2023) (n^-1/(2 rbar)) bound the slowest atom of a shared cell "
                   "over the worst case; a given truth's cell may converge faster",
    **{col: "over-specified shared-cell per-block rate of Theorem 2 of Nguyen, Nguyen & Ho (2023) (n^-1/(2 rbar) or "
            "n^-1/rbar): a worst-case upper bound over the cell's atoms" for col in ("multi_beta1", "multi_b", "multi_a",
                                                                                    "multi_variance")},
}


def predicted_sided(
    router: str, setting: str, loss: str, estimator: str = "lse", predicted: Mapping[str, float | None] | None = None
) -> str | None:
    """How the prediction of :func:`predicted_exponent` is tested: ``"upper"`` or ``"two"`` (``None``: nothing predicted).

    ``"upper"`` for the over-specified shared-cell rates of :data:`UPPER_BOUNDS` (worst-case
    bounds: a faster loss does not contradict them), ``"two"`` for everything else -- the
    parametric ``n^-1/2`` of exact fits, Voronoi losses, masses and the regression function, which
    the estimators attain, and the null estimator's 0.
    """
    p = predicted_exponent(router, setting, loss, estimator, predicted)
    if p is None:
        return None
    base = loss[len("best_"):] if loss.startswith("best_") else loss
    return "upper" if estimator != "null" and setting == "over" and base in UPPER_BOUNDS else "two"


def ols_fit(x: np.ndarray, y: np.ndarray, robust: bool = False) -> dict[str, float]:
    """statsmodels OLS of ``y`` on ``x`` with intercept: slope, 95% CI, intercept, R^2, AIC.

    Computed by :func:`moestat.rates.verdicts.ols` (statsmodels' arithmetic without importing
    statsmodels and ``scipy.stats``, about 1.2 CPU-s per process; the same numbers)."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    X = np.column_stack((np.ones(x.shape[0]), x))  # statsmodels' add_constant(x, has_constant="add")
    res = ols(X, y, robust=robust, alpha=0.05)
    ci = res["ci"]
    return {
        "slope": float(res["params"][1]),
        "intercept": float(res["params"][0]),
        "se": float(res["bse"][1]),
        "ci_low": float(ci[1, 0]),
        "ci_high": float(ci[1, 1]),
        "r2": float(res["rsquared"]),
        "aic": float(res["aic"]),
        "n_points": int(len(y)),
    }


def _clean(ns: Sequence[int], values: Sequence[np.ndarray]):
    """Keep finite positive losses; drop sample sizes with fewer than 2 of them."""
    out_n, out_v = [], []
    for n, v in zip(ns, values):
        v = np.asarray(v, float)
        v = v[np.isfinite(v) & (v > 0)]
        if v.size >= 2:
            out_n.append(int(n))
            out_v.append(v)
    return out_n, out_v


def log_mean_fit(ns: Sequence[int], values: Sequence[np.ndarray], statistic: str = "mean") -> dict[str, float]:
    """OLS of ``log(mean loss)`` (or of the log ``statistic``) on ``log n`` (one point per sample size)."""
    stat = STATISTICS[statistic]
    means = np.array([stat(v) for v in values])
    return ols_fit(np.log(ns), np.log(means))


def per_replicate_fit(ns: Sequence[int], values: Sequence[np.ndarray]) -> dict[str, float]:
    """OLS of ``log loss`` on ``log n`` over every replicate, HC3 errors."""
    x = np.concatenate([np.full(len(v), math.log(n)) for n, v in zip(ns, values)])
    y = np.concatenate([np.log(v) for v in values])
    return ols_fit(x, y, robust=True)


def bootstrap_slope(
    ns: Sequence[int], values: Sequence[np.ndarray], rng: np.random.Generator, n_boot: int = 1000,
    statistic: str = "mean",
) -> dict[str, float]:
    """Percentile bootstrap of the log-of-mean (or log-``statistic``) slope, resampling replicates
    within each ``n``."""
    stat = STATISTICS[statistic]
    x = np.log(np.asarray(ns, float))
    xc = x - x.mean()
    logm = np.empty((n_boot, len(ns)))
    for j, v in enumerate(values):
        v = np.asarray(v, float)
        idx = rng.integers(0, len(v), size=(n_boot, len(v)))
        logm[:, j] = np.log(stat(v[idx], axis=1))
    slopes = (logm - logm.mean(axis=1, keepdims=True)) @ xc / (xc @ xc)
    lo, hi = np.percentile(slopes, [2.5, 97.5])
    return {"ci_low": float(lo), "ci_high": float(hi), "se": float(slopes.std(ddof=1)), "n_boot": int(n_boot)}


def slope_with_interval(
    ns: Sequence[int], values: Sequence[np.ndarray], rng: np.random.Generator | int | None = None, n_boot: int = 1000,
    statistic: str = "mean",
) -> dict[str, Any]:
    """The log-of-mean slope with its 95% interval: the one slope-with-interval of moestat.

    The slope is the least-squares slope of ``log(mean_r values[j][r])`` on ``log(ns[j])``: the
    exponent ``a`` of a loss that decays as ``n^a``.  The interval is the envelope of the replicate
    bootstrap (:func:`bootstrap_slope`) and the OLS t-interval of the log-of-mean fit
    (:func:`log_mean_fit`): never narrower than either.  Used by :func:`fit_rates` for every rate in
    ``summary.json`` and by the theory checks (:mod:`moestat.theorems.checks`); judging the slope
    against a prediction is :func:`fit_rates`' (the verdicts), not this function's.

    Parameters
    ----------
    ns : sequence of int, length S
        Sample sizes, increasing (at least 3 for a finite t-interval).
    values : sequence of S arrays of shape ``(R_j,)``, or one array of shape ``(S, R)``
        Positive finite losses per sample size: ``values[j]`` holds the ``R_j`` replicates at
        ``ns[j]`` (the replicate counts may differ between sizes).
    rng : numpy.random.Generator, int or None
        Stream of the bootstrap resamples; ``None`` (default): seed 0, so that the same losses give
        the same interval.
    n_boot : int
        Bootstrap resamples (default 1000).
    statistic : {"mean", "median"}
        What is fitted per sample size.  The mean (default) is the rate of the expected loss.  The
        median is the rate of an ``O_P`` statement (``P(L > M n^a) < eps``: a bound on quantiles,
        not on the mean), for losses where a few replicates sit orders of magnitude above the rest
        and rule every mean (e.g. a dendrogram that merged the wrong atoms,
        :mod:`moestat.selection`).

    Returns
    -------
    dict
        ``slope`` (float), ``ci_low`` and ``ci_high`` (floats, the 95% interval), ``statistic``, and
        the two ingredients: ``log_mean`` (the OLS fit: ``slope``, ``intercept``, ``se``,
        ``ci_low``, ``ci_high``, ``r2``, ``aic``, ``n_points``; see :func:`ols_fit`) and
        ``bootstrap`` (see :func:`bootstrap_slope`).

    Examples
    --------
    >>> import numpy as np
    >>> ns = [1000, 2000, 4000, 8000]
    >>> values = [n ** -0.5 * np.exp(np.random.default_rng(n).normal(0, 0.1, 20)) for n in ns]
    >>> r = slope_with_interval(ns, values)
    >>> round(r["slope"], 2), r["ci_low"] < -0.5 < r["ci_high"]
    (-0.51, True)
    """
    rng = numpy_generator(0 if rng is None else rng)
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    lm = log_mean_fit(ns, values, statistic)
    bs = bootstrap_slope(ns, values, rng, n_boot, statistic)
    return {
        "statistic": statistic,
        "slope": lm["slope"],
        "ci_low": min(bs["ci_low"], lm["ci_low"]),
        "ci_high": max(bs["ci_high"], lm["ci_high"]),
        "log_mean": lm,
        "bootstrap": bs,
    }


def window_sensitivity(ns: Sequence[int], values: Sequence[np.ndarray], min_points: int = 3,
                       statistic: str = "mean") -> list[dict[str, Any]]:
    """Log-of-mean (or log-``statistic``) slope after dropping the first ``j`` sample sizes, ``j = 0, 1, ...``."""
    out = []
    for j in range(0, len(ns) - min_points + 1):
        f = log_mean_fit(ns[j:], values[j:], statistic)
        out.append({"drop": j, "n_min": int(ns[j]), "slope": f["slope"], "ci_low": f["ci_low"], "ci_high": f["ci_high"]})
    return out


def log_model_comparison(ns: Sequence[int], values: Sequence[np.ndarray]) -> dict[str, Any]:
    """Compare ``log L = a + s log n`` (power) with ``log L = a - t log log n`` (``C/log(n)^t``) by AIC.

    Both models have two parameters and are fitted to the log-of-mean points, so the lower AIC is
    the better fit.
    """
    means = np.log([np.mean(v) for v in values])
    power = ols_fit(np.log(ns), means)
    logm = ols_fit(np.log(np.log(np.asarray(ns, float))), means)
    return {
        "power_aic": power["aic"],
        "log_aic": logm["aic"],
        "t": -logm["slope"],
        "t_ci": [-logm["ci_high"], -logm["ci_low"]],
        "better": "log" if logm["aic"] < power["aic"] else "power",
    }


def aggregate(df, loss: str, router: str):
    """Per-``n`` mean, standard deviation and count of ``loss`` for ``router`` (finite values)."""
    sub = df[df["router"] == router]
    rows = []
    for n, g in sub.groupby("n"):
        v = g[loss].to_numpy(float)
        v = v[np.isfinite(v)]
        rows.append({"n": int(n), "mean": float(v.mean()) if v.size else math.nan, "std": float(v.std(ddof=1)) if v.size > 1 else math.nan, "count": int(v.size)})
    return rows


def fit_rates(
    df,
    *,
    setting: str,
    estimator: str,
    routers: Sequence[str] | None = None,
    losses: Sequence[str] | None = None,
    window: tuple[int | None, int | None] = (None, None),
    tolerance: float = DEFAULT_TOLERANCE,
    n_boot: int = 1000,
    seed: int = 0,
    halfwidth: float = DEFAULT_HALFWIDTH,
    predicted: Mapping[str, float | None] | None = None,
    alt_start: tuple[float, float] | None = None,
    statistic: str = "mean",
    log_factor: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """One fit entry per (router, loss) of a results DataFrame (see the module docstring).

    Parameters
    ----------
    df : pandas.DataFrame
        ``results.csv`` as read by :func:`moestat.rates.store.read_results`.
    setting, estimator : str
        Used for the predicted exponents.
    routers, losses : sequence of str, optional
        Default: every router in ``df`` and every loss column with data.
    window : (int or None, int or None)
        Declared fitting window in ``n``.
    tolerance : float
        See :func:`verdict`.
    n_boot : int
        Bootstrap resamples.
    seed : int
        Seed of the bootstrap (``SeedSequence(seed, spawn_key=(router, loss))``-style).
    halfwidth : float
        Target half-width of the 95% interval for the Monte Carlo plan
        (:func:`moestat.rates.verdicts.plan`).
    predicted : mapping, optional
        Loss name -> predicted exponent (e.g. a file scenario's), passed to :func:`predicted_exponent`.
    alt_start : (float, float), optional
        ``(init_scale, alt_init_scale)`` when ``df`` holds the start-sensitivity columns
        ``alt_<loss>`` (:mod:`moestat.rates.extras`): each fit gets ``start_sensitivity``, and its
        reason says so when the other start moves the slope by more than the interval's half-width.
    statistic : {"mean", "median"}
        What the slope is fitted to per sample size (:func:`slope_with_interval`), for the whole
        data and each half.  With ``"median"`` every entry with a slope also gets
        ``mean_statistic``: the same fit on the mean (``slope``, ``ci_low``, ``ci_high``,
        ``category``, ``reason``), reported beside the verdict.
    log_factor : sequence of str
        Losses whose predicted rate is stated with a log factor, ``(log n / n)^{-p}``: judged by
        :func:`moestat.rates.verdicts.judge_interval` against the slopes between ``n^p`` and that
        rate over the window (``log_factor`` true in the entry).

    Returns
    -------
    list of dict
        Each with at least ``router, setting, loss, slope, ci_low, ci_high, predicted,
        consistent, category, reason``; with a slope also ``robust`` (Theil--Sen),
        ``curvature``, ``tail``, ``converged`` ([converged, fits] in the window) and ``plan``.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    opts = _FitOptions(setting, estimator, window, tolerance, n_boot, seed, halfwidth, predicted, alt_start, statistic,
                       tuple(log_factor))
    routers = list(routers) if routers is not None else sorted(df["router"].unique())
    losses = list(losses) if losses is not None else list(LOSS_NAMES)
    fits = _fit_all(df, routers, losses, opts)
    if statistic != "mean":
        # the expected loss's slope, reported beside the verdict (a tail that rules the mean shows as a gap)
        means = _fit_all(df, routers, losses, dataclasses.replace(opts, statistic="mean"))
        for f, m in zip(fits, means):
            if f.get("slope") is not None:
                f["mean_statistic"] = {k: m.get(k) for k in ("slope", "ci_low", "ci_high", "category", "reason")}
    return fits


def _fit_all(df, routers: Sequence[str], losses: Sequence[str], opts: "_FitOptions") -> list[dict[str, Any]]:
    """The judged fit entries of every (router, loss) under ``opts`` (the body of :func:`fit_rates`)."""
    fits: list[dict[str, Any]] = []
    data: list[FitData | None] = []
    for ri, router in enumerate(routers):
        sub = df[df["router"] == router]
        for li, loss in enumerate(losses):
            entry, d = _fit_loss(sub, router, loss, (ri, li), opts)
            fits.append(entry)
            data.append(d)
    judge_fits(fits, data, tolerance=opts.tolerance, halfwidth=opts.halfwidth)  # verdicts, categories, plans
    return fits


def fit_experiment(df, experiment) -> list[dict[str, Any]]:
    """:func:`fit_rates` of every loss of a resolved :class:`~moestat.rates.resolve.Experiment`.

    The loss columns, the setting, the predictions and the analysis settings are the
    experiment's; a prediction the scenario file did not state but a theorem its truth meets gives
    (:mod:`moestat.theorems.file_theorems`) names its theorem (``prediction_theorem``, the short name;
    ``prediction_source``, its statement; ``prediction_standing``, one of
    :data:`moestat.rates.catalogue.STANDINGS`; ``prediction_claim`` where it states no exponent).
    """
    c = experiment.config
    # a declared loss's best_<loss> is absent from an extras.csv written before moestat recorded it
    # (resumed with its own header, moestat.rates.extras.ExtrasStore): not fitted, every other loss is
    losses = [x for x in experiment.losses if x in df or not x.startswith("best_")]
    fits = fit_rates(
        df,
        losses=losses,
        setting=experiment.setting,
        estimator=c.estimator,
        routers=c.router,
        window=(c.window_min, c.window_max),
        tolerance=c.tolerance,
        n_boot=c.n_boot,
        seed=c.seed,
        halfwidth=c.halfwidth,
        predicted=experiment.predicted,
        alt_start=(c.init_scale, c.alt_init_scale) if c.alt_init_scale > 0 else None,
        statistic=c.statistic,
    )
    th = experiment.theorems
    details = th["details"] if th else {}
    for f in fits:  # a prediction the file did not state but a theorem its truth meets gives: name the theorem
        base = f["loss"][len("best_"):] if f["loss"].startswith("best_") else f["loss"]
        d = details.get(f["loss"], details.get(base))
        if d is None or f.get("predicted") != th["predicted"].get(f["loss"], th["predicted"].get(base)):
            continue  # the file's own exponent (or none) stands
        f["prediction_source"] = d["source"]
        f["prediction_theorem"] = d["name"]
        f["prediction_standing"] = d["standing"]
        if "claim" in d:  # "slower than any polynomial rate": no exponent, the theorem's words
            f["prediction_claim"] = d["claim"]
    return fits


@dataclass(frozen=True)
class _FitOptions:
    """The settings of :func:`fit_rates` shared by every (router, loss)."""

    setting: str
    estimator: str
    window: tuple[int | None, int | None]
    tolerance: float
    n_boot: int
    seed: int
    halfwidth: float
    predicted: Mapping[str, float | None] | None
    alt_start: tuple[float, float] | None
    statistic: str = "mean"
    log_factor: tuple[str, ...] = ()


def _converged(part) -> tuple[int, int] | None:
    """``(converged, fits)`` of a part of the frame (None without a ``converged`` column)."""
    return (int(part["converged"].fillna(False).astype(bool).sum()), int(len(part))) if "converged" in part else None


def _fit_loss(sub, router: str, loss: str, where: tuple[int, int], o: _FitOptions) -> tuple[dict[str, Any], FitData | None]:
    """The fit entry of one router's rows ``sub`` and one loss, and the data it is judged by
    (:func:`moestat.rates.verdicts.judge_fits`; ``None`` without a slope).  ``where = (router
    index, loss index)`` names its bootstrap streams ``SeedSequence(seed, spawn_key=(ri, li, ...))``."""
    ri, li = where
    lo, hi = o.window
    ns_all = sorted(int(n) for n in sub["n"].unique())
    ns_win = [n for n in ns_all if (lo is None or n >= lo) and (hi is None or n <= hi)]
    vals = [sub.loc[sub["n"] == n, loss].to_numpy(float) for n in ns_win]
    ns, vals = _clean(ns_win, vals)
    in_win = sub[sub["n"].isin(ns_win)]
    entry: dict[str, Any] = {
        "router": router,
        "setting": o.setting,
        "loss": loss,
        "definition": LOSS_DEFINITIONS.get(loss, loss),
        "estimator": o.estimator,
        "predicted": predicted_exponent(router, o.setting, loss, o.estimator, o.predicted),
        "sided": predicted_sided(router, o.setting, loss, o.estimator, o.predicted),
    }
    if loss in o.log_factor and entry["predicted"] is not None:
        entry["log_factor"] = True
    if len(ns) < 3 and not any(np.isfinite(v).any() for v in vals):
        entry.update({"slope": None, "ci_low": None, "ci_high": None, "consistent": None, "near": None, "within_band": None,
                      "note": "no finite positive value: the loss is not defined here (e.g. no atom of that kind)",
                      "category": None, "reason": "not defined in this setting (no finite positive value)"})
        return entry, None
    if len(ns) < 3:
        entry.update({"slope": None, "ci_low": None, "ci_high": None, "consistent": None, "near": None, "within_band": None,
                      "note": "fewer than 3 sample sizes with >= 2 finite positive losses in the window",
                      "category": "inconclusive",
                      "reason": "fewer than 3 sample sizes with >= 2 finite positive losses in the window"})
        return entry, None
    # what the curve says; its verdict is moestat.rates.verdicts.judge_fits'
    pr = per_replicate_fit(ns, vals)
    nf = np.asarray(ns, float)
    # slope against log(n / log n): a loss ~ (log n / n)^{1/2} has slope exactly -1/2 here
    stat = STATISTICS[o.statistic]
    lnn = ols_fit(np.log(nf / np.log(nf)), np.log([stat(v) for v in vals]))
    sensitivity = window_sensitivity(ns, vals, statistic=o.statistic)
    log_model = log_model_comparison(ns, vals) if router == "cosine" else None
    rng = np.random.default_rng(np.random.SeedSequence(o.seed, spawn_key=(ri, li)))
    swi = slope_with_interval(ns, vals, rng, o.n_boot, o.statistic)
    lm, bs = swi["log_mean"], swi["bootstrap"]
    entry.update(
        {
            "slope": lm["slope"],
            "statistic": o.statistic,
            "ci_low": swi["ci_low"],
            "ci_high": swi["ci_high"],
            "window": [ns[0], ns[-1]],
            "n_sizes": len(ns),
            "n_values": int(sum(len(v) for v in vals)),
            "log_mean": lm,
            "per_replicate": pr,
            "bootstrap": bs,
            "slope_log_n_over_n": lnn["slope"],
            "window_sensitivity": sensitivity,
        }
    )
    if log_model is not None:
        entry["log_model"] = log_model
    # the same slope on two independent halves of the replicates (moestat.rates.stability)
    half_curves = []
    for h, part in enumerate(halves(in_win)):
        hn, hv = _clean(ns_win, [part.loc[part["n"] == n, loss].to_numpy(float) for n in ns_win])
        hrng = np.random.default_rng(np.random.SeedSequence(o.seed, spawn_key=(*where, 1 + h)))
        half_curves.append(Curve(hn, hv, _converged(part), slope_with_interval(hn, hv, hrng, o.n_boot, o.statistic)) if len(hn) >= 3 else None)
    alt = None
    if o.alt_start is not None and f"alt_{loss}" in sub:
        an, av = _clean(ns_win, [sub.loc[sub["n"] == n, f"alt_{loss}"].to_numpy(float) for n in ns_win])
        if len(an) >= 3:
            arng = np.random.default_rng(np.random.SeedSequence(o.seed, spawn_key=(ri, li, 9)))
            alt = slope_with_interval(an, av, arng, o.n_boot, o.statistic)
    whole = Curve(ns, vals, _converged(in_win), swi)
    return entry, FitData(whole, tuple(half_curves), is_slow_rate(router, loss, entry["predicted"]), alt, o.alt_start)

"""The one interval rule: whether a slope's 95% interval agrees with a predicted exponent.

Every door that judges a rate -- ``moestat rates``, ``reproduce``, ``theory`` and ``select`` --
decides by :func:`judge_interval` (re-exported by :mod:`moestat.rates.verdicts`, whose
:func:`~moestat.rates.verdicts.categorize` adds the floor, curvature and convergence rules around
it).  It lives in a module of its own so that the slow-rate rule (:mod:`moestat.rates.stability`),
which :mod:`moestat.rates.verdicts` imports, can use it too.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

__all__ = ["SIDES", "MAX_CI_WIDTH", "DEFAULT_TOLERANCE", "NO_RATE_STATED", "log_factor_slope", "prediction_interval", "prediction_text", "judge_interval"]

#: How a prediction is tested (:func:`judge_interval`): ``"two"`` for a rate the theorem says is
#: attained, ``"upper"`` for a worst-case upper bound (a faster loss does not contradict it).
SIDES = ("two", "upper")
#: The widest 95% slope interval :func:`judge_interval` judges.  A referee's requirement: the interval
#: must be able to tell adjacent exponents of the catalogue apart -- the parametric ``n^-1/2`` from the
#: over-specified shared cell's ``n^-1/4``, the two rates every over-specified entry is about.  An
#: interval can hold two exponents ``d`` apart only if it is at least ``d`` wide, so the cap is
#: ``1/4``: a wider interval would call one slope consistent with both.  The planning target
#: (:data:`DEFAULT_HALFWIDTH`, a width of 0.1) lies well inside it, so a run sized by :func:`plan`
#: is not turned away by the cap.
MAX_CI_WIDTH = 0.25
#: The planning target of :func:`moestat.rates.verdicts.plan` (its ``DEFAULT_HALFWIDTH``, a width
#: of 0.1) lies well inside :data:`MAX_CI_WIDTH`.
#: The band of :func:`judge_interval`: a prediction outside the 95% interval by at most this much is
#: ``near`` (never ``consistent``); the floor and curvature rules use it as the size of a slope change
#: that matters.
DEFAULT_TOLERANCE = 0.15

#: The reason of a loss whose theorem states no rate (it gets no category).
NO_RATE_STATED = "no rate stated by the theorem for this loss"


def _f(v: float) -> str:
    return f"{v:.2f}"


# ---------------------------------------------------------------------------------------------
# the one interval rule: every door (rates, reproduce, theory, select) decides by judge_interval
# ---------------------------------------------------------------------------------------------
def log_factor_slope(exponent: float, ns: Sequence[float]) -> float:
    """The OLS slope on ``log n`` of ``log (log n / n)^r`` over the sample sizes ``ns``, ``r = -exponent``.

    ``log L = exponent (log n - log log n)``, so the slope is ``exponent (1 - b)`` with ``b`` the OLS
    slope of ``log log n`` on ``log n`` over the window: slightly flatter than ``exponent`` (about
    -0.44 for ``-1/2`` on ``n = 1 000 .. 32 000``).

    Parameters
    ----------
    exponent : float
        The exponent of ``n`` of the rate without its log factor (``-r``).
    ns : sequence of float
        The fitted window's sample sizes (at least two distinct, all above ``e``).
    """
    x = np.log(np.asarray(ns, float))
    if x.size < 2 or not np.all(x > 1.0) or np.ptp(x) == 0:
        raise ValueError(f"a log-factor slope needs at least two distinct sample sizes above e, got {list(ns)!r}")
    xc = x - x.mean()
    b = float(xc @ np.log(x) / (xc @ xc))
    return float(exponent) * (1.0 - b)


def prediction_interval(predicted: float, *, log_factor: bool = False, ns: Sequence[float] | None = None) -> tuple[float, float]:
    """``(steep, flat)``: the slopes a prediction allows over the window.

    ``(p, p)`` for ``n^p``; for a rate stated with a log factor, ``(log n / n)^{-p}``, the interval
    between ``p`` (the slope of ``n^p``) and :func:`log_factor_slope` over ``ns``: the log factor's
    contribution to a straight-line slope depends on the window, and neither end alone is the
    slope the theorem predicts there.
    """
    p = float(predicted)
    if not log_factor:
        return p, p
    if ns is None:
        raise ValueError("a prediction with a log factor needs the window's sample sizes (ns)")
    s = log_factor_slope(p, ns)
    return min(p, s), max(p, s)


def prediction_text(predicted: float, sided: str, log_factor: bool) -> str:
    """The prediction in words: ``n^p``, ``(log n / n)^r``, or "the upper bound ..." for ``sided="upper"``."""
    rate = f"(log n / n)^{-predicted:g}" if log_factor else f"n^{predicted:g}"
    return f"the upper bound {rate}" if sided == "upper" else rate


def judge_interval(predicted: float | None, ci_low: float, ci_high: float, *, sided: str = "two",
                   log_factor: bool = False, ns: Sequence[float] | None = None,
                   tolerance: float = DEFAULT_TOLERANCE, max_width: float = MAX_CI_WIDTH) -> dict[str, Any]:
    """The one rule that decides whether a slope's 95% interval agrees with a predicted exponent.

    ``inconclusive``
        the interval is not finite or is wider than ``max_width`` (:data:`MAX_CI_WIDTH`).
    ``consistent``
        the interval covers the prediction: ``ci_low <= p <= ci_high`` (two-sided); for a rate
        with a log factor, the interval meets ``[p, s]`` (:func:`prediction_interval`); for an
        upper bound (``sided="upper"``) the interval reaches the bound or its steep side
        (``ci_low <= flat end``): a loss falling faster than an upper bound does not contradict it.
    ``near``
        the interval excludes the prediction, but by at most ``tolerance`` (the gap between the
        prediction and the interval's nearest end).  Not consistent: counted nowhere as reproduced.
    ``inconsistent``
        the interval excludes the prediction by more than ``tolerance`` (for an upper bound: lies
        wholly on its slow side, by more than ``tolerance``).

    Parameters
    ----------
    predicted : float or None
        Predicted exponent of ``n`` (``None``: nothing predicted; the category is ``None``).
    ci_low, ci_high : float
        The slope's 95% interval.
    sided : {"two", "upper"}
        ``"two"`` for a rate the theorem states as attained (the exact-fit parametric ``n^-1/2``),
        ``"upper"`` for a worst-case upper bound (e.g. a shared cell's per-parameter ``n^-1/4``).
    log_factor : bool
        The rate is stated as ``(log n / n)^{-predicted}``; needs ``ns``.
    ns : sequence of float, optional
        The fitted window's sample sizes (for ``log_factor``).
    tolerance : float
        The band within which an excluded prediction is ``near``.
    max_width : float
        The widest interval judged (``math.inf`` for none).

    Returns
    -------
    dict
        ``category``, ``reason`` (one line), ``sided``, ``prediction_interval`` ([steep, flat]),
        ``covers`` (bool) and ``gap`` (the distance from the interval to the prediction, 0 when
        covered).

    Examples
    --------
    >>> from moestat.rates.verdicts import judge_interval
    >>> judge_interval(-0.5, -0.40, -0.24)["category"]  # excludes -1/2 by 0.10 < 0.15
    'near'
    >>> judge_interval(-0.125, -0.40, -0.20, sided="upper")["category"]  # steeper than the bound
    'consistent'
    """
    if sided not in SIDES:
        raise ValueError(f"sided must be one of {', '.join(SIDES)}, got {sided!r}")
    out: dict[str, Any] = {"category": None, "reason": NO_RATE_STATED, "sided": sided, "prediction_interval": None,
                           "covers": None, "gap": None}
    if predicted is None:
        return out
    lo, hi = float(ci_low), float(ci_high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return {**out, "category": "inconclusive", "reason": "non-finite interval"}
    steep, flat = prediction_interval(predicted, log_factor=log_factor, ns=ns)
    out["prediction_interval"] = [steep, flat]
    what = prediction_text(float(predicted), sided, log_factor)
    ci = f"95% CI [{_f(lo)}, {_f(hi)}]"
    lf = ""
    if log_factor:
        lf = (f" ((log n / n)^{-float(predicted):g} has OLS slope {flat:.3f} on log n over n = {int(min(ns))}..{int(max(ns))}: "
              f"the prediction covers [{steep:.3f}, {flat:.3f}])")
    width = hi - lo
    if width > max_width:
        return {**out, "category": "inconclusive",
                "reason": f"{ci} is {width:.2f} wide (> the cap {max_width:g}): it cannot tell adjacent exponents "
                          f"of the catalogue apart (-1/2 from -1/4)"}
    if sided == "upper":
        covers, gap = lo <= flat, max(lo - flat, 0.0)
    else:
        covers, gap = lo <= flat and hi >= steep, max(lo - flat, steep - hi, 0.0)
    out.update(covers=bool(covers), gap=float(gap))
    if covers:
        if sided == "upper" and hi < steep:
            reason = f"{ci} steeper than {what}: consistent with it (an upper bound, tested one-sided){lf}"
        else:
            inside = f"{ci} meets [{steep:.3f}, {flat:.3f}], the slopes of n^{float(predicted):g} and" if log_factor else ""
            reason = (f"{inside} {what}" if log_factor else f"{what} inside {ci}") + (
                " (an upper bound, tested one-sided)" if sided == "upper" else "") + lf
        return {**out, "category": "consistent", "reason": reason}
    side = "slow" if lo > flat else "fast"
    one = " (an upper bound, tested one-sided: only the slow side contradicts it)" if sided == "upper" else ""
    if gap <= tolerance:
        return {**out, "category": "near",
                "reason": f"{ci} excludes {what} by {gap:.2f} on the {side} side, within the tolerance {tolerance:g}: "
                          f"near, not consistent{one}{lf}"}
    return {**out, "category": "inconsistent",
            "reason": f"{ci} excludes {what} by {gap:.2f} on the {side} side (beyond the tolerance {tolerance:g}){one}{lf}"}

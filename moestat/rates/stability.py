"""Verdicts that survive a split, and the slow-rate rule of Theorems 2/3 (Nguyen et al. 2024).

Two rules, stated here before any run was judged by them.

**Split-half stability.**  The replicates are split into two independent halves by their index
(half A: even ``replicate``, half B: odd).  Data sets of different replicates are independent
(:func:`moestat.rates.sweep.replicate_streams`), so the halves are two independent experiments of
half the size.  Each half is judged by exactly the rule the whole data are judged by
(:func:`moestat.rates.verdicts.categorize`, and :func:`slow_rate_category` where it applies).  When
the two halves reach *different* categories, the reported category is ``inconclusive`` with the
reason "independent halves disagree" and both halves' categories; otherwise the whole data's
category stands (both halves may lack the power of the whole, so two halves agreeing with each
other but not with the whole are not a disagreement).  A fit without a category on the whole data
(a loss with no prediction and no floor) has no verdict to confirm and keeps none.

**Slow-rate rule ("slower than any polynomial").**  Theorems 2 and 3 say the vanilla cosine
router's Voronoi loss has no polynomial rate.  A loss ``L(n) ~ n^-a`` has a constant local slope
``s(n) = d log L / d log n = -a``; a loss slower than every polynomial has ``s(n) -> 0``.  On a grid
``n <= 1e6`` a small constant ``a`` and a slowly vanishing ``s`` cannot be told apart from a
straight log-log line: ``C / log(n)^t`` has ``s = -t / log n``, which changes by about
``0.55 |s|`` between ``n = 2000`` and ``n = 128000`` -- visible only as curvature.  So the rule asks
for what the grid *can* show, in this order:

1. ``inconclusive`` when the generic rules say the data cannot decide (fewer than 3 sizes, fits
   not converged, an interval wider than :data:`moestat.rates.verdicts.UNINFORMATIVE_WIDTH`);
2. ``floor`` when the loss stops decreasing (the generic floor rule with the parametric ``-1/2``
   as reference): no polynomial rate, as predicted;
3. ``consistent`` when the local slope *flattens*: the quadratic coefficient of the per-replicate
   ``log L`` on ``log n`` fit (:func:`moestat.rates.verdicts.curvature`, 99% HC3 interval) is
   significantly positive -- and, when a router the theorems say is fast (the perturbed router,
   Theorem 6) is in the same run, the slow loss's tail slope (Theil--Sen over the upper half of the
   window) is flatter than the fast router's: their 95% intervals are disjoint;
4. ``pre-asymptotic`` when the local slope significantly *steepens* (not the shape of a slow rate);
5. ``inconsistent`` when the curve is straight (no significant curvature) and its slope is
   at the parametric ``-1/2`` (:func:`moestat.rates.verdicts.judge_interval` says ``consistent`` or
   ``near``: the interval covers it or misses it by at most the tolerance):
   a polynomial rate as fast as the fast router's is visible, against the theorem;
6. ``inconclusive`` otherwise: a straight line at a slope between ``-1/2`` and 0 -- a polynomial
   ``n^s`` and a slower-than-polynomial rate cannot be told apart at these ``n``.

An AIC difference between a power law and ``C / log(n)^t`` on a handful of points is reported
(``log_model``) but decides nothing: both are two-parameter curves that differ by less than the
noise over two decades.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from moestat.rates.interval_rule import judge_interval

__all__ = ["SLOW_RATE", "FAST_ROUTER", "PARAMETRIC", "is_slow_rate", "slow_rate_category", "halves", "combine_halves",
           "HALF_NAMES", "settle"]

#: (router, loss) pairs with no polynomial rate by Theorems 2/3 of Nguyen et al. (2024).
SLOW_RATE = (("cosine", "voronoi"),)
#: The router the theorems say is fast on the same losses (Theorem 6), compared in the same run.
FAST_ROUTER = "perturbed"
#: The parametric exponent the fast router reaches.
PARAMETRIC = -0.5
#: The two halves: replicate index modulo 2.
HALF_NAMES = ("A (even replicates)", "B (odd replicates)")


def is_slow_rate(router: str, loss: str, predicted: float | None) -> bool:
    """Whether the slow-rate rule judges this fit (no prediction and a Theorem 2/3 pair)."""
    return predicted is None and (router, loss) in SLOW_RATE


def _f(v: float) -> str:
    return f"{v:.2f}"


def slow_rate_category(
    *,
    base: dict[str, Any],
    slope: float,
    ci: tuple[float, float],
    ns: Sequence[int],
    values: Sequence[np.ndarray],
    tolerance: float,
    curv: dict,
    tail: dict,
    fast_tail: dict | None = None,
) -> dict[str, Any]:
    """Category and reason of a "no polynomial rate" claim (rules 1-6 of the module docstring).

    Parameters
    ----------
    base : dict
        :func:`moestat.rates.verdicts.categorize` of the same data with ``predicted=None``
        (supplies rules 1 and 2).
    slope, ci : float, (float, float)
        Log-of-mean slope and its 95% interval.
    ns, values : the window's sample sizes and per-replicate losses.
    tolerance : float
    curv, tail : dict
        :func:`moestat.rates.verdicts.curvature` and :func:`moestat.rates.verdicts.tail_slope` of
        this loss on the same data.
    fast_tail : dict, optional
        :func:`moestat.rates.verdicts.tail_slope` of the fast router's same loss on the same data.

    Returns
    -------
    dict
        ``category``, ``reason`` and ``slow_rule`` (the evidence: local slopes, curvature interval,
        tail slopes).
    """
    cat = base.get("category")
    if cat in ("inconclusive", "floor"):
        reason = base["reason"] + ("; a floor is what Thms 2/3 predict (no polynomial rate)" if cat == "floor" else "")
        return {"category": cat, "reason": reason, "slow_rule": {"rule": cat}}
    lo, hi = float(ci[0]), float(ci[1])
    ev: dict[str, Any] = {"c_ci": curv.get("c_ci"), "slope_start": curv.get("slope_start"), "slope_end": curv.get("slope_end"),
                          "tail": [tail["slope"], tail["ci_low"], tail["ci_high"]],
                          "fast_tail": None if fast_tail is None else [fast_tail["slope"], fast_tail["ci_low"], fast_tail["ci_high"]]}
    if curv.get("significant"):
        span = (f"local slope {_f(curv['slope_start'])} at n = {ns[0]} -> {_f(curv['slope_end'])} at n = {ns[-1]} "
                f"(curvature 99% CI [{curv['c_ci'][0]:.3f}, {curv['c_ci'][1]:.3f}])")
        if curv["c"] > 0:
            if fast_tail is not None and not tail["ci_low"] > fast_tail["ci_high"]:
                ev["rule"] = "flattens, not flatter than the fast router"
                return {"category": "inconclusive", "slow_rule": ev,
                        "reason": f"flattens ({span}) but its tail slope {_f(tail['slope'])} [{_f(tail['ci_low'])}, {_f(tail['ci_high'])}] "
                                  f"is not flatter than the {FAST_ROUTER} router's {_f(fast_tail['slope'])} "
                                  f"[{_f(fast_tail['ci_low'])}, {_f(fast_tail['ci_high'])}] on the same data"}
            ev["rule"] = "flattens"
            fast = ("" if fast_tail is None else f"; tail {_f(tail['slope'])} flatter than the {FAST_ROUTER} router's "
                    f"{_f(fast_tail['slope'])} (95% intervals disjoint)")
            return {"category": "consistent", "slow_rule": ev,
                    "reason": f"no polynomial rate (Thms 2/3): the curve flattens, {span}{fast}"}
        ev["rule"] = "steepens"
        return {"category": "pre-asymptotic", "slow_rule": ev,
                "reason": f"the local slope steepens ({span}): not the flattening of a slower-than-polynomial rate"}
    straight = (f"straight over n = {ns[0]}..{ns[-1]}: slope {_f(slope)} [{_f(lo)}, {_f(hi)}], "
                f"no significant curvature (99% CI [{curv['c_ci'][0]:.3f}, {curv['c_ci'][1]:.3f}])"
                if math.isfinite(curv.get("c", math.nan)) else
                f"slope {_f(slope)} [{_f(lo)}, {_f(hi)}] on {len(ns)} sizes (too few for a curvature test)")
    # "as fast as parametric": the interval covers -1/2 or is near it (within the tolerance); this
    # makes the slow claim inconsistent, so the band here only ever withholds a "consistent"
    at_parametric = judge_interval(PARAMETRIC, lo, hi, tolerance=tolerance, max_width=math.inf)["category"] in ("consistent", "near")
    if at_parametric:
        ev["rule"] = "straight at the parametric rate"
        return {"category": "inconsistent", "slow_rule": ev,
                "reason": f"{straight}; at the parametric {PARAMETRIC:g} (covered, or missed by at most {tolerance:g}): a polynomial rate, "
                          "against Thms 2/3 (with a near-truth start the unidentified radial error may still sit below the "
                          "directional one at these n)"}
    ev["rule"] = "straight, slower than parametric"
    return {"category": "inconclusive", "slow_rule": ev,
            "reason": f"{straight}, excluding {PARAMETRIC:g} +- {tolerance:g}: a polynomial n^{_f(slope)} and a rate slower "
                      f"than any polynomial cannot be told apart at n <= {ns[-1]} (no flattening, no floor)"}


def halves(df) -> list:
    """The two independent halves of a results frame (even and odd ``replicate``)."""
    r = df["replicate"].to_numpy(int)
    return [df[r % 2 == 0], df[r % 2 == 1]]


def combine_halves(full: dict[str, Any], half: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The reported category: the whole data's, or ``inconclusive`` when the halves disagree.

    Parameters
    ----------
    full : dict
        ``category`` and ``reason`` of the whole data.
    half : sequence of two dicts
        ``category``, ``reason`` and optionally ``slope`` of each half.

    Returns
    -------
    dict
        ``category``, ``reason``, ``halves`` (each half's ``category``, ``slope``, ``reason``) and
        ``halves_agree``.
    """
    rec = [{"half": name, "category": h.get("category"), "slope": h.get("slope"), "reason": h.get("reason")}
           for name, h in zip(HALF_NAMES, half)]
    agree = rec[0]["category"] == rec[1]["category"]
    out = {"category": full.get("category"), "reason": full.get("reason"), "halves": rec, "halves_agree": bool(agree)}
    if full.get("category") is None:  # no verdict on the whole data (nothing predicted): nothing to confirm
        return out
    if not agree:
        # a half without a category (nothing it could be judged by) says so, not "None"
        sl = ", ".join(f"{r['half'].split()[0]}: {r['category'] or 'no category'}"
                       + (f" (slope {_f(r['slope'])})" if r["slope"] is not None else "") for r in rec)
        out["category"] = "inconclusive"
        out["reason"] = (f"independent halves of the replicates disagree ({sl}); whole data: {full.get('category')}: "
                         f"{full.get('reason')}")
    return out


def settle(fits: list[dict[str, Any]], evidence: Sequence[list[dict[str, Any]] | None], tolerance: float) -> None:
    """Apply both rules of this module to a table of fits (in place): the slow-rate rule, then the
    split-half agreement.

    Parameters
    ----------
    fits : list of dict
        Fit entries with ``router, loss, predicted, slope, category, reason``.
    evidence : sequence aligned with ``fits``
        ``None`` (no slope), or the evidence of the whole data and of each half: dicts with
        :func:`moestat.rates.verdicts.categorize`'s ``category`` and ``reason``, the slope with
        interval (``slope``, ``ci_low``, ``ci_high``), ``ns``, ``values``, ``curvature`` and
        ``tail`` (``slope`` None: a half too small to judge).  Updated by the slow-rate rule.
    tolerance : float
    """
    _judge_slow_rate(fits, evidence, tolerance)
    for f, evs in zip(fits, evidence):
        if not evs or f.get("slope") is None:
            continue
        f.update(combine_halves({"category": f.get("category"), "reason": f.get("reason")}, evs[1:]))


def _judge_slow_rate(fits: list[dict[str, Any]], evidence: Sequence[list[dict[str, Any]] | None], tolerance: float) -> None:
    """Theorems 2/3 (no polynomial rate): the slow-rate rule on the whole data and on each half,
    with the fast router's tail on the same part."""
    by_key = {(f["router"], f["loss"]): (f, evs) for f, evs in zip(fits, evidence)}
    for f, evs in zip(fits, evidence):
        if not is_slow_rate(f["router"], f["loss"], f["predicted"]) or f.get("slope") is None:
            continue
        ref, ref_ev = by_key.get((FAST_ROUTER, f["loss"]), (None, None))
        ref_ev = ref_ev if ref is not None and ref.get("slope") is not None else None
        if ref is not None and ref.get("slope") is not None:
            f["perturbed_slope"] = ref["slope"]
        for j, ev in enumerate(evs):
            if ev.get("slope") is None:
                continue
            fast = ref_ev[j] if ref_ev is not None and j < len(ref_ev) and ref_ev[j].get("slope") is not None else None
            res = slow_rate_category(base=ev, slope=ev["slope"], ci=(ev["ci_low"], ev["ci_high"]), ns=ev["ns"],
                                     values=ev["values"], tolerance=tolerance, fast_tail=None if fast is None else fast["tail"],
                                     curv=ev["curvature"], tail=ev["tail"])
            ev.update(res)
            if j == 0:
                f.update({"category": res["category"], "reason": res["reason"], "slow_rule": res["slow_rule"]})
        f["judged_by"] = "slow_rate_rule"
        f["consistent"] = {"consistent": True, "floor": True, "inconsistent": False}.get(f["category"])

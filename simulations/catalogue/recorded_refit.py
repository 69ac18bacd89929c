"""Refit a recorded work unit exactly as the sweep fitted it, keeping every start's result.

Shared by the outlier diagnostics ``gmoe_over4_outliers.py`` and ``laplace_over_outliers.py``: the
unit's own data streams, starts and estimator seed (:func:`moestat.rates.sweep.run_unit`'s reported
fit: one torch and one BLAS thread, :func:`moestat.rates.truth_check.fit_starts`), and the per-start
results that the estimator's best-start pick sees, kept by a wrapper of that pick (the fit itself is
unchanged).  The unit comes from :func:`moestat.rates.sweep.recorded_unit`.
"""

from __future__ import annotations

import numpy as np


def refit_keeping_starts(unit) -> dict:
    """Refit ``unit`` (a :class:`moestat.rates.sweep.WorkUnit`) as the sweep's reported fit.

    Returns ``scenario``, ``X [B, n, d]``, ``Y [B, n]``, the fitted estimator ``est``, ``kept`` (the
    arguments of its best-start pick: ``res``, ``R``, ``S``, ``owner``), ``first_loglik [B]`` (the
    estimator's log-likelihoods before the truth check answers anything), ``state``
    (:func:`moestat.rates.truth_check.against_truth`) and ``losses`` (per loss, ``[B]``).
    """
    import torch
    from threadpoolctl import threadpool_limits

    from moestat.model.mixing import MixingMeasure
    from moestat.rates import truth_check as tc
    from moestat.rates.sweep import _draw, _holdout, _scenario, compute_losses

    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            sc = _scenario(unit.scenario_key)
            holdout = _holdout(unit.scenario_key, unit.holdout)
            X, Y, G0 = _draw(unit, sc)
            est = tc.unit_estimator(unit, sc, 2)  # the recorded unit's estimator seed, as tc.fit_starts
            kept = {}
            pick_best = est._best_starts

            def keep(res, R, S, owner=None):  # every start's result, then the estimator's own pick
                kept.update(res=res, R=R, S=S, owner=owner)
                return pick_best(res, R, S, owner)

            est._best_starts = keep
            est.fit(X, Y, init=MixingMeasure.stack(G0))  # exactly tc.fit_starts
            first_ll = np.array(est.loglik_, dtype=float)
            state = tc.against_truth(unit, sc, X, Y, est)
            losses = compute_losses(sc, state["params"], holdout)
    finally:
        torch.set_num_threads(old_threads)
    return {"scenario": sc, "X": X, "Y": Y, "est": est, "kept": kept, "first_loglik": first_ll,
            "state": state, "losses": losses}

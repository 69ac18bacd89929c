"""Every fit of a work unit, and the fit against the truth: the criterion at the true parameters, the answer.

A work unit (:class:`moestat.rates.sweep.WorkUnit`) fits in one way only, :func:`fit_starts` (its
estimator, :func:`unit_estimator`, from given starts): the reported fit from the unit's starts
(:func:`unit_start`), the answer's refits (below), and the refits that hold the reported fit
against more starts (:func:`more_starts`: the optimum certificate, :func:`certificate`, and the
start sensitivity, :func:`alt_start`; their columns are the ``extras.csv`` ones of
:mod:`moestat.rates.extras`).

A simulation knows what a real data analysis does not: the true mixing measure ``G*``.  Its
criterion on the same data is a free certificate.  The maximum-likelihood estimate maximises the
log-likelihood over a set that contains ``G*`` (exact fit; over-specified: ``G*`` with an atom split),
so a fit whose log-likelihood is *below* ``G*``'s is not the estimate the theorems speak of -- it
is a local maximum or a stalled search, and its loss measures the optimiser, not the rate.  The
same holds for least squares and the sum of squared residuals.

For every fit of a sweep (:func:`moestat.rates.sweep.run_unit`) ``results.csv`` records
(:data:`moestat.rates.store.TRUTH_COLUMNS`):

``fit_objective``
    the fit's criterion: the observed-data log-likelihood ``sum_n log p(y_n | x_n)`` in nats
    (maximum likelihood, :data:`LOGLIK_ESTIMATORS`), or the sum of squared residuals
    ``sum_n (y_n - g_hat(x_n))^2`` (least squares, :data:`SSE_ESTIMATORS`);
``truth_objective``
    the same at the true parameters (the true model, e.g. the true Top-K) on the same ``(X, Y)``;
``truth_gap``
    how much better the fit is than the truth: ``loglik(fit) - loglik(G*)`` or
    ``SSE(G*) - SSE(fit)``; negative means worse than the truth;
``first_gap``
    the same for the first fit, before it was answered (equal to ``truth_gap`` when it was not);
``truth_check``
    ``above`` (not worse than the truth), ``answered`` (the first fit was worse, the answer
    found one that is not), ``below_truth`` (still worse after the answer: its ``status`` is
    ``below_truth``, or ``estimator_fault`` (below), and it does not count as converged),
    ``nonfinite`` (a criterion is not finite) or ``n/a`` (no comparable criterion: the ``null``
    estimator, or a likelihood estimator on additive-noise data, whose truth has no likelihood in
    the fitted model);
    ``unknown`` for a file written before these columns.

**The estimator's own check** comes first (:func:`truth_start_faults`): for least squares
(:data:`TRUTH_START_ESTIMATORS`), where the fitted model contains the truth as it is (exact fit,
the true gate, inside the box), each fit worse than the truth is refitted once from the truth
itself.  A descent method started at a point never ends above that point's criterion, so a fit from the truth that ends worse than the truth is a fault of the estimator,
not a local optimum: more starts cannot mend it, the answer below skips it, and its row is
reported once with the status ``estimator_fault`` (and ``truth_check = below_truth``).  This fit
is a diagnostic only; it is never the reported fit.  Its stream is
``SeedSequence(seed, spawn_key=(n, first replicate, 10))`` (the estimator's).

**The answer** (:func:`answer_below_truth`), for the other fits worse than the truth, is what a
careful analyst would do without knowing ``G*``: more starts of the kinds the design already
declares -- :data:`ANSWER_NEAR` near-truth starts *with noise* at larger scales
(:data:`PERTURB_SCALES`) and :data:`ANSWER_RANDOM` random (data-driven)
starts -- and :data:`ANSWER_JITTER` restarts from the best fit so far, perturbed; then, for what is
still worse, :data:`ANSWER_ROUNDS` - 1 more rounds of restarts from the best fit so far.  The
best fit by the criterion is kept.  No start is ever placed at the truth.  What remains below
the truth is counted (``truth_check = below_truth``), never dropped.  A sweep with ``answer = false``
(:attr:`moestat.rates.config.FittingSpec.answer`, ``--no-answer``) skips the answer: every fit is
reported as its one start left it, and one worse than the truth is ``below_truth`` -- the one-start
procedure of Nguyen et al. (2024), App. E.1 (``--preset fig1_paper``).  Every start has its own
stream ``SeedSequence(seed, spawn_key=(n, replicate, 7, round, s))``.

**What a fit worse than the truth costs, at most**: one fit from the truth (least squares, where
the truth is representable) and ``ANSWER_ROUNDS`` rounds of ``ANSWER_JITTER + ANSWER_NEAR +
ANSWER_RANDOM`` starts, i.e. at most 17 more fits per replicate, then its row is written once --
never refitted in a loop.  The answer's fits run in batches of at most the unit's number of
replicates (:func:`_fit_in_batches`), so its peak memory is the unit's own fit's, whatever the
number of fits found worse than the truth.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from moestat.estimators.choice import LIKELIHOOD_ESTIMATORS, estimator_for, random_start_for
from moestat.estimators.memory import chunks, entries_per_chunk
from moestat.model.mixing import MixingMeasure
from moestat.rates.extras import ALT_PREFIX, BEATEN_RTOL
from moestat.rates.labels import LOSS_NAMES

__all__ = [
    "LOGLIK_ESTIMATORS",
    "SSE_ESTIMATORS",
    "TRUTH_START_ESTIMATORS",
    "TRUTH_RTOL",
    "TRUTH_ATOL",
    "unit_estimator",
    "unit_start",
    "fit_starts",
    "against_truth",
    "criterion_kind",
    "fit_criterion",
    "truth_criterion",
    "truth_gap",
    "is_below",
    "truth_is_representable",
    "truth_start_faults",
    "answer_below_truth",
    "truth_columns",
    "more_starts",
    "certificate",
    "alt_start",
]

#: Estimators judged by the log-likelihood (the data are drawn from the mixture): the registry's
#: maximum-likelihood entries (``mle``, ``em``, ``gllim``).
LOGLIK_ESTIMATORS = LIKELIHOOD_ESTIMATORS
#: Estimators judged by the sum of squared residuals.
SSE_ESTIMATORS = ("lse", "sgd")
#: Estimators checked from the truth itself (:func:`truth_start_faults`): those that accept a step
#: only where it lowers the criterion on the data, so that a fit started at the truth cannot end
#: worse than the truth.  Levenberg-Marquardt does (its gain ratio uses the actual decrease); SGD
#: does not (its steps follow minibatches), and an EM whose M-step is approximate (a Newton step, a
#: Top-K gate) need not either.
TRUTH_START_ESTIMATORS = ("lse",)
#: A fit is *worse than the truth* when its gap is below ``-(TRUTH_ATOL + TRUTH_RTOL * |truth|)``.
#: Why so small: a global optimum is never worse than the truth (the truth is a feasible point), so
#: the only allowance is the rounding of a float64 sum of ``n`` terms (relative ~1e-12 for
#: n <= 1e5) and the optimisers' stopping rules (EM stops when the per-sample log-likelihood
#: changes by <= 1e-10, i.e. 1e-6 nats at n = 1e4; least squares at a relative change of 1e-12);
#: 1e-8 relative to the criterion (1e-4 nats for a log-likelihood of 1e4 in size) is above both
#: and far below the gap between distinct local optima (the fits found below the truth on
#: topk-gmoe were 2-28 nats below it).
TRUTH_RTOL = 1e-8
TRUTH_ATOL = 1e-6
#: The answer: near-truth-with-noise starts, random starts, restarts from the best fit so far, rounds.
ANSWER_NEAR = 3
ANSWER_RANDOM = 3
ANSWER_JITTER = 2
ANSWER_ROUNDS = 2
#: Absolute noise scales of the perturbed near-truth starts (cycled): the answer's near-truth
#: starts and the even extra starts of the optimum certificate (:func:`certificate`).
PERTURB_SCALES = (0.2, 0.5, 1.0)
#: Noise scales of the restarts from the best fit so far (cycled).
JITTER_SCALES = (0.1, 0.3)


def unit_estimator(unit, scenario, *stream: int):
    """A work unit's estimator (:func:`moestat.estimators.choice.estimator_for`: the class the
    scenario's declared model is fitted by), with the
    sweep's one ``compile`` decision (:attr:`moestat.rates.sweep.WorkUnit.compile`) for an EM.

    Its internal randomness (restarts) gets its own child ``SeedSequence(seed, spawn_key=(n, first
    replicate, *stream))``, fixed by the unit's composition, never by the router or the worker:
    ``stream`` ``(2,)`` for the reported fit, ``(4,)`` for the optimum certificate's, ``(6,)`` for the
    start sensitivity's, ``(8, round)`` for the answer's (:func:`answer_below_truth`) and ``(10,)``
    for the fit from the truth (:func:`truth_start_faults`).
    """
    est_ss = np.random.SeedSequence(unit.seed, spawn_key=(unit.n, unit.replicates[0], *stream))
    est = estimator_for(scenario, unit.estimator, max_iter=unit.max_iter, random_state=int(est_ss.generate_state(1)[0]),
                        device=unit.device)
    if hasattr(est, "compile"):  # an EM: the sweep's one compile decision
        est.compile = unit.compile
    if hasattr(est, "max_memory"):  # a likelihood fit: replicates in chunks within the budget (same fits)
        est.max_memory = getattr(unit, "max_memory", "auto")
    options = dict(getattr(unit, "estimator_options", ()))
    if options:  # the configured settings of the estimator (SGD's lr, batch, epochs, schedule)
        est.set_params(**options)
    return est


def unit_start(unit, scenario, n: int, rng: np.random.Generator, X=None, Y=None):
    """The start of one replicate: the scenario's own near-truth start
    (:class:`moestat.data.synthetic.ScenarioBase`; a scenario knows its own gate's conventions), or the
    random start of its declared model (:func:`moestat.estimators.choice.random_start_for`)."""
    if unit.init == "random":
        return random_start_for(scenario.declaration, X, Y, rng)
    return scenario.near_truth_start(unit.init_scale, rng, n=n, peer=unit.init == "peer")


def fit_starts(unit, scenario, X: np.ndarray, Y: np.ndarray, starts, *stream: int):
    """Every fit of a work unit: :func:`unit_estimator` (randomness from ``stream``) fitted to
    ``X [B, n, d]``, ``Y [B, n]`` from ``starts`` (one measure per batch entry: a list of unbatched
    :class:`~moestat.model.mixing.MixingMeasure` or a batched one, stacked into ``[B]``).

    The reported fit, the answer's refits, the optimum certificate and the start sensitivity
    (:mod:`moestat.rates.sweep`) all fit this way.  Returns the fitted estimator.
    """
    est = unit_estimator(unit, scenario, *stream)
    est.fit(X, Y, init=MixingMeasure.stack(starts))
    return est


def against_truth(unit, scenario, X: np.ndarray, Y: np.ndarray, est) -> dict:
    """A work unit's fits (:class:`moestat.rates.sweep.WorkUnit`, its fitted estimator ``est`` on
    ``X [R, n, d]``, ``Y [R, n]``) compared with the truth and, where worse, answered.

    Returns the fits to report: ``params`` (MixingMeasure ``[R]``), ``objective``, ``converged``,
    ``n_iter``, ``status`` and ``truth`` (the truth columns of each replicate).  A fit still worse
    than the truth after the answer gets the status ``below_truth`` and is not converged.
    """
    P = est.params_  # float64 NumPy arrays (the estimator contract: MoEEstimator._set_fit); copied below
    state = {
        "params": MixingMeasure(np.array(P.beta0, dtype=float), np.array(P.beta1, dtype=float), np.array(P.eta, dtype=float)),
        "objective": np.array(est.objective_, dtype=float),
        "converged": np.array(est.converged_, dtype=bool),
        "n_iter": np.array(est.n_iter_, dtype=np.int64),
        "status": [str(s) for s in est.status_],
    }
    kind = criterion_kind(scenario, unit.estimator)
    truth = truth_criterion(scenario, kind, X, Y, est)
    first = fit_criterion(scenario, kind, est, X, Y)
    state["criterion"] = first.copy()
    fault = np.zeros(len(truth), dtype=bool)
    if kind is not None:
        fault = truth_start_faults(unit, scenario, X, Y, first, kind, truth)
        if getattr(unit, "answer", True):  # else: each fit as its one start left it (still judged below)
            answer_below_truth(unit, scenario, X, Y, state, kind, truth, skip=fault)
    state["truth"] = truth_columns(kind, first, state["criterion"], truth)
    for i, t in enumerate(state["truth"]):
        if t["truth_check"] == "below_truth":  # not the estimate: counted, never dropped
            state["status"][i] = "estimator_fault" if fault[i] else "below_truth"
            state["converged"][i] = False
    return state


def criterion_kind(scenario, estimator: str) -> str | None:
    """``"loglik"``, ``"sse"`` or ``None`` (no criterion comparable with the truth's)."""
    if estimator in LOGLIK_ESTIMATORS:
        return "loglik" if scenario.mixture_data else None
    if estimator in SSE_ESTIMATORS:
        return "sse"
    return None


def _by_the_fits_pass(scenario, kind: str | None, est) -> bool:
    """Whether the fit's own EM pass gives the log-likelihoods: a Gaussian-MoE scenario (model 1,
    :class:`moestat.data.gaussian_scenarios.GaussianMoEScenario`) fitted by the fused EM
    (:meth:`moestat.estimators.mle.MLEGaussianMoE.loglik_of`), whose model *is* the scenario's.

    Why: the eager :meth:`~moestat.data.gaussian_scenarios.GaussianMoEScenario.loglik_at`
    of the fit and of the truth cost about 290 ns per sample each on the project's 2-core machine,
    a fifth of the ``gmoe_exact`` sweep; the fit already holds its log-likelihood (``loglik_``, the
    value its EM stopped on) and its pass, compiled in a large sweep, evaluates the truth in one
    loop over the samples.  The values agree with the eager ones to rounding (``tests/rates/test_truth_check.py``).
    """
    return (kind == "loglik" and bool(getattr(scenario, "gaussian_moe", False))
            and getattr(est, "kernel_", None) in ("compiled", "eager") and callable(getattr(est, "loglik_of", None)))


def fit_criterion(scenario, kind: str | None, est, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """The criterion ``[R]`` of a fitted estimator on its data (NaN where the fit failed).

    ``loglik``: the fitted model's log-likelihood at ``est.params_`` (the fit's own ``loglik_``
    where its EM pass is the scenario's likelihood and it is finite, :func:`_by_the_fits_pass`);
    ``sse``: ``n * objective_`` (the estimator's own mean squared residual, its gate as fitted).
    """
    R, n = np.asarray(Y).shape
    if kind is None:
        return np.full(R, np.nan)
    if kind == "sse":
        return n * np.asarray(est.objective_, dtype=float)
    G = est.params_.numpy()
    ok = G.finite()
    out = np.full(R, np.nan)
    if _by_the_fits_pass(scenario, kind, est):
        own = np.asarray(est.loglik_, dtype=float)
        mine = ok & np.isfinite(own)
        out[mine] = own[mine]
        ok = ok & ~mine  # finite parameters whose trace ended non-finite: the scenario's likelihood, as before
    if ok.any():
        out[ok] = _loglik_in_chunks(scenario, X[ok], Y[ok], _take(G, ok), True, getattr(est, "max_memory", "auto"))
    return out


def _loglik_in_chunks(scenario, X: np.ndarray, Y: np.ndarray, G, fitted: bool, max_memory) -> np.ndarray:
    """``scenario.loglik_at`` ``[R]`` by chunks of replicates within the likelihood fit's memory budget
    (:mod:`moestat.estimators.memory`): its per-sample temporaries are ``[R, n, k]``; a replicate's
    sum is computed by the same operations in any chunk, so the values are the same bits."""
    R, n = np.asarray(Y).shape
    per = entries_per_chunk(n, np.shape(G.beta0)[-1], np.shape(X)[-1], max_memory)
    batched = np.ndim(G.beta0) > 1
    parts = [scenario.loglik_at(X[a:b], Y[a:b], _take(G, slice(a, b)) if batched else G, fitted=fitted)
             for a, b in chunks(R, per)]
    return np.concatenate([np.atleast_1d(p) for p in parts])


def truth_criterion(scenario, kind: str | None, X: np.ndarray, Y: np.ndarray, est=None) -> np.ndarray:
    """The criterion ``[R]`` of the true parameters (the true model) on the same data; with the
    fitted estimator ``est`` whose EM pass is the scenario's likelihood (:func:`_by_the_fits_pass`),
    by that pass."""
    R = np.asarray(Y).shape[0]
    if kind is None:
        return np.full(R, np.nan)
    if kind == "sse":
        return np.sum((np.asarray(Y, float) - scenario.regression_function(X)) ** 2, axis=-1)
    if est is not None and _by_the_fits_pass(scenario, kind, est):
        return np.asarray(est.loglik_of(X, Y, scenario.truth), dtype=float)
    return _loglik_in_chunks(scenario, X, Y, scenario.truth, False, getattr(est, "max_memory", "auto"))


def truth_gap(kind: str | None, fit: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """How much better the fit is than the truth (negative: worse): ``fit - truth`` for a
    log-likelihood, ``truth - fit`` for a sum of squares."""
    fit, truth = np.asarray(fit, float), np.asarray(truth, float)
    return truth - fit if kind == "sse" else fit - truth


def is_below(gap: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Whether each fit is worse than the truth beyond the tolerance (see :data:`TRUTH_RTOL`)."""
    gap, truth = np.asarray(gap, float), np.asarray(truth, float)
    with np.errstate(invalid="ignore"):
        return np.isfinite(gap) & (gap < -(TRUTH_ATOL + TRUTH_RTOL * np.abs(truth)))


def _take(G, idx):
    return MixingMeasure(G.beta0[idx], G.beta1[idx], G.eta[idx])


def _jitter_fit(G, scale: float, rng: np.random.Generator, gaussian_variance: bool):
    """A restart from a fit (unbatched ``G``): ``N(0, scale^2)`` noise on every free parameter,
    the variance (last ``eta`` column of a Gaussian likelihood fit) multiplied by ``exp(N(0, scale^2))``;
    a reference atom (last atom with ``beta0 = 0``, ``beta1 = 0``) keeps its zero gate."""
    b0 = G.beta0 + scale * rng.normal(size=G.beta0.shape)
    b1 = G.beta1 + scale * rng.normal(size=G.beta1.shape)
    eta = G.eta + scale * rng.normal(size=G.eta.shape)
    if gaussian_variance:
        eta[:, -1] = G.eta[:, -1] * np.exp(scale * rng.normal(size=G.eta.shape[0]))
    if G.beta0[-1] == 0 and not np.any(G.beta1[-1]):
        b0[-1], b1[-1] = 0.0, 0.0
    return MixingMeasure(b0, b1, eta)


def truth_is_representable(scenario) -> bool:
    """Whether the fitted model contains the truth as it is: an exact fit (``k_fit == k*``) with the
    true model's gate (e.g. the same Top-K; a scenario without ``model``/``fit_model`` counts as
    the same), the truth inside the parameter box where the scenario has one.  Over-specified, the
    truth is only approached by splitting an atom, under a larger K-bar the fitted gate may not
    reproduce ``g_{G*}`` at all, and a start outside the box is projected onto it."""
    if getattr(scenario, "k_fit", None) != getattr(scenario, "k_true", None):
        return False
    model, fitted = getattr(scenario, "model", None), getattr(scenario, "fit_model", None)
    if not (model is None or fitted is None or model == fitted):
        return False
    box, truth = getattr(scenario, "box", None), getattr(scenario, "truth", None)
    if box is None or truth is None or not callable(getattr(box, "clip", None)):
        return True
    inside, G = box.clip(truth), truth.numpy()
    return all(np.array_equal(getattr(inside, a), getattr(G, a)) for a in ("beta0", "beta1", "eta"))


def truth_start_faults(unit, scenario, X: np.ndarray, Y: np.ndarray, criterion: np.ndarray, kind: str,
                       truth: np.ndarray) -> np.ndarray:
    """Which fits worse than the truth are faults of the estimator: its fit from the truth itself
    is worse than the truth too.

    One fit per replicate worse than the truth (``criterion [R]`` against ``truth [R]``), from the
    scenario's near-truth start of scale 0 (the truth in the scenario's own conventions), in one
    batch; nothing is fitted for an estimator outside :data:`TRUTH_START_ESTIMATORS` or where the
    fitted model does not contain the truth (:func:`truth_is_representable`).  Why a fault: the
    truth is the start, and a descent method never ends with a criterion worse than its start's.
    The fits are diagnostics, never reported.

    Returns
    -------
    ndarray of bool, shape ``[R]``
    """
    R = len(truth)
    fault = np.zeros(R, dtype=bool)
    todo = np.flatnonzero(is_below(truth_gap(kind, criterion, truth), truth))
    if todo.size == 0 or unit.estimator not in TRUTH_START_ESTIMATORS or not truth_is_representable(scenario):
        return fault
    # scale 0 draws no noise; the generator is only the start method's argument
    starts = [scenario.near_truth_start(0.0, np.random.default_rng(0), n=unit.n) for _ in todo]
    ex = fit_starts(unit, scenario, X[todo], Y[todo], starts, 10)
    crit = fit_criterion(scenario, kind, ex, X[todo], Y[todo])
    fault[todo] = is_below(truth_gap(kind, crit, truth[todo]), truth[todo])
    return fault


def answer_below_truth(unit, scenario, X: np.ndarray, Y: np.ndarray, state: dict[str, Any], kind: str,
                       truth: np.ndarray, skip: np.ndarray | None = None) -> dict[str, Any]:
    """Refit the replicates whose fit is worse than the truth; keep each replicate's best fit.

    Parameters
    ----------
    unit : moestat.rates.sweep.WorkUnit
    scenario : the unit's scenario
    X, Y : ndarray, shapes ``[R, n, d]`` and ``[R, n]``
    state : dict
        The unit's fits, updated in place and returned: ``params`` (MixingMeasure ``[R]``),
        ``criterion``, ``objective``, ``converged``, ``n_iter`` (arrays ``[R]``), ``status`` (list).
    kind : {"loglik", "sse"}
    truth : ndarray, shape ``[R]``
        The truth's criterion.
    skip : ndarray of bool, shape ``[R]``, optional
        Replicates not to refit (:func:`truth_start_faults`: restarts cannot mend an estimator
        that loses the truth's criterion from the truth itself).

    Returns
    -------
    dict
        ``state``, with ``rounds`` (answer rounds run) and ``starts`` (``[R]``, starts tried).
    """
    n = unit.n
    R = len(unit.replicates)
    starts_tried = np.zeros(R, dtype=int)
    gvar = scenario.variance_last
    rounds = 0
    for rnd in range(ANSWER_ROUNDS):
        gap = truth_gap(kind, state["criterion"], truth)
        below = is_below(gap, truth)
        todo = np.flatnonzero(below if skip is None else below & ~skip)
        if todo.size == 0:
            break
        rounds += 1
        starts, owner = [], []
        for i in todo:
            r = unit.replicates[i]
            best = _take(state["params"], i)
            s = 0

            def rng() -> np.random.Generator:
                return np.random.default_rng(np.random.SeedSequence(unit.seed, spawn_key=(n, r, 7, rnd, s)))

            kinds = [("jitter", j) for j in range(ANSWER_JITTER if rnd == 0 else ANSWER_JITTER + ANSWER_NEAR + ANSWER_RANDOM)]
            if rnd == 0:  # the design's kinds of start, more of them; later rounds restart from the best
                kinds += [("near", j) for j in range(ANSWER_NEAR)] + [("random", j) for j in range(ANSWER_RANDOM)]
            for what, j in kinds:
                g = rng()
                if what == "jitter":
                    starts.append(_jitter_fit(best, JITTER_SCALES[j % len(JITTER_SCALES)], g, gvar))
                elif what == "near":
                    starts.append(scenario.near_truth_start(PERTURB_SCALES[j % len(PERTURB_SCALES)], g, n=n))
                else:
                    starts.append(random_start_for(scenario.declaration, X[i], Y[i], g))
                owner.append(i)
                s += 1
        owner = np.asarray(owner)
        fits = _fit_in_batches(unit, scenario, X, Y, owner, starts, kind, (8, rnd))
        crit = fits["criterion"]
        sign = -1.0 if kind == "sse" else 1.0  # larger is better after the sign
        for i in todo:
            mine = np.flatnonzero(owner == i)
            starts_tried[i] += mine.size
            vals = np.where(np.isfinite(crit[mine]), sign * crit[mine], -np.inf)
            j = mine[int(np.argmax(vals))]
            cur = sign * state["criterion"][i] if np.isfinite(state["criterion"][i]) else -np.inf
            if np.isfinite(crit[j]) and sign * crit[j] > cur:
                for name in ("beta0", "beta1", "eta"):
                    getattr(state["params"], name)[i] = fits[name][j]
                state["criterion"][i] = crit[j]
                state["objective"][i] = float(fits["objective"][j])
                state["converged"][i] = bool(fits["converged"][j])
                state["n_iter"][i] = int(fits["n_iter"][j])
                state["status"][i] = str(fits["status"][j])
    state["rounds"], state["starts"] = rounds, starts_tried
    return state


def _fit_in_batches(unit, scenario, X: np.ndarray, Y: np.ndarray, owner: np.ndarray, starts: list, kind: str,
                    stream: tuple[int, ...]) -> dict[str, Any]:
    """The answer's fits (start ``starts[j]`` on replicate ``owner[j]`` of ``X [R, n, d]``, ``Y [R, n]``)
    in batches of at most ``R = len(unit.replicates)`` entries; their criteria and results, one entry
    per start.

    Why batches: the answer fits ``ANSWER_JITTER + ANSWER_NEAR + ANSWER_RANDOM = 8`` starts per
    replicate worse than the truth, and one batch of all of them held ``8 R`` copies of the
    unit's data, features and per-sample temporaries at once -- eight times the unit's own fit,
    the peak of a sweep whose fits are mostly worse than the truth (a sparse gate).  In batches
    of ``R`` the answer's peak memory is the unit's own fit's.  Every replicate is fitted by
    itself (Levenberg-Marquardt and EM are per replicate; the batch only changes the order of
    the sums over samples, i.e. rounding).

    Returns
    -------
    dict
        ``criterion``, ``objective``, ``converged``, ``n_iter`` (arrays ``[S]``), ``status``
        (list), ``beta0``, ``beta1``, ``eta`` (the fitted parameters, leading axis ``[S]``).
    """
    size = max(1, len(unit.replicates))
    parts: dict[str, list] = {key: [] for key in ("criterion", "objective", "converged", "n_iter", "status",
                                                  "beta0", "beta1", "eta")}
    for a, b in chunks(len(owner), size):
        rows = owner[a:b]
        ex = fit_starts(unit, scenario, X[rows], Y[rows], starts[a:b], *stream)
        P = ex.params_.numpy()
        parts["criterion"].append(fit_criterion(scenario, kind, ex, X[rows], Y[rows]))
        parts["objective"].append(np.asarray(ex.objective_, dtype=float))
        parts["converged"].append(np.asarray(ex.converged_, dtype=bool))
        parts["n_iter"].append(np.asarray(ex.n_iter_, dtype=np.int64))
        parts["status"].append(np.asarray([str(t) for t in ex.status_], dtype=object))
        for name in ("beta0", "beta1", "eta"):
            parts[name].append(np.asarray(getattr(P, name)))
        del ex  # the batch's fit (its data copies) goes before the next batch is fitted
    return {key: np.concatenate(val) for key, val in parts.items()}


def truth_columns(kind: str | None, first: np.ndarray, final: np.ndarray, truth: np.ndarray) -> list[dict[str, Any]]:
    """The :data:`~moestat.rates.store.TRUTH_COLUMNS` of each replicate (see the module docstring).

    ``first`` and ``final`` are the criterion of the first fit and of the fit kept after the answer.
    """
    g0, g1 = truth_gap(kind, first, truth), truth_gap(kind, final, truth)
    below0, below1 = is_below(g0, truth), is_below(g1, truth)
    rows = []
    for i in range(len(truth)):
        if kind is None:
            check = "n/a"
        elif not (np.isfinite(final[i]) and np.isfinite(truth[i])):
            check = "nonfinite"
        elif below1[i]:
            check = "below_truth"
        elif below0[i]:
            check = "answered"
        else:
            check = "above"
        rows.append({"fit_objective": float(final[i]), "truth_objective": float(truth[i]), "truth_gap": float(g1[i]),
                     "first_gap": float(g0[i]), "truth_check": check})
    return rows


# ---- the reported fit against more starts: the optimum certificate and the start sensitivity ----
def more_starts(unit, scenario, X: np.ndarray, Y: np.ndarray, state: dict, holdout: np.ndarray) -> list[dict]:
    """The reported fit (``state`` of :func:`against_truth`) against more starts, as the unit asks:
    the optimum certificate (:func:`certificate`, ``unit.extra_starts > 0``) and the start
    sensitivity (:func:`alt_start`, ``unit.alt_init_scale > 0``).  One dict of ``extras.csv``
    columns per replicate (empty when the unit asks for neither)."""
    out = [{} for _ in unit.replicates]
    if unit.extra_starts > 0:
        for o, c in zip(out, certificate(unit, scenario, X, Y, state, holdout)):
            o |= c
    if unit.alt_init_scale > 0:
        for o, a in zip(out, alt_start(unit, scenario, X, Y, holdout)):
            o |= a
    return out


def _extra_start(scenario, n: int, s: int, rng: np.random.Generator, X: np.ndarray, Y: np.ndarray):
    """Extra start ``s`` of the optimum certificate, drawn by the scenario's own start methods (a
    scenario file's gate convention, expert width and variances): even ``s`` its near-truth start at
    scale ``PERTURB_SCALES[(s // 2) % 3]``, odd ``s`` its random start (data-free for a regression
    scenario, :func:`moestat.estimators.starts.random_init`; from the replicate's ``X [n, d]``,
    ``Y [n]`` for a mixture-noise file)."""
    if s % 2 == 1:
        return random_start_for(scenario.declaration, X, Y, rng)
    return scenario.near_truth_start(PERTURB_SCALES[(s // 2) % len(PERTURB_SCALES)], rng, n=n)


def certificate(unit, scenario, X: np.ndarray, Y: np.ndarray, state: dict, holdout: np.ndarray) -> list[dict]:
    """Fit ``unit.extra_starts`` more starts per replicate in one batch; the certificate columns
    (:mod:`moestat.rates.extras`) of each replicate.

    Each start has its own stream ``SeedSequence(seed, spawn_key=(n, replicate, 3, s))``, so the
    result does not depend on chunking or workers; the reported fit (``state`` of
    :func:`against_truth`) is untouched.  ``holdout``: the unit's held-out inputs, for the losses
    of the best fit.
    """
    E, n = unit.extra_starts, unit.n
    fitted = state["params"]
    starts = [_extra_start(scenario, n, s, np.random.default_rng(np.random.SeedSequence(unit.seed, spawn_key=(n, r, 3, s))),
                           X[i], Y[i])
              for i, r in enumerate(unit.replicates) for s in range(E)]
    ex = fit_starts(unit, scenario, np.repeat(X, E, axis=0), np.repeat(Y, E, axis=0), starts, 4)
    R = len(unit.replicates)
    obj_e = np.asarray(ex.objective_, float).reshape(R, E)
    conv_e = np.asarray(ex.converged_, bool).reshape(R, E)
    fit_e = ex.params_  # float64 NumPy arrays (the estimator contract)
    obj0 = np.asarray(state["objective"], float)  # the reported fit (answered when it was worse than the truth)
    rows, best = [], []
    for i in range(R):
        cand = np.concatenate([[obj0[i]], np.where(np.isfinite(obj_e[i]), obj_e[i], np.inf)])
        b = int(np.argmin(np.where(np.isfinite(cand), cand, np.inf)))
        beaten = (not np.isfinite(obj0[i]) and np.isfinite(cand[b])) or bool(cand[b] < obj0[i] - BEATEN_RTOL * abs(obj0[i]))
        b = b if beaten else 0  # a tie within the tolerance is the same minimum: keep the near-truth fit
        best.append(fitted[i] if b == 0 else fit_e[i * E + b - 1])
        rows.append({"best_objective": float(cand[b]), "best_start": b, "n_starts": E + 1,
                     "n_starts_converged": int(bool(state["converged"][i])) + int(conv_e[i].sum()),
                     "beaten": int(beaten)})
    losses = scenario.loss_columns(MixingMeasure.stack(best), holdout)
    names = (*LOSS_NAMES, *(spec.name for spec in scenario.loss_specs))  # the declared losses too
    for i, row in enumerate(rows):
        for name in names:
            row[f"best_{name}"] = float(losses[name][i])
    return rows


def alt_start(unit, scenario, X: np.ndarray, Y: np.ndarray, holdout: np.ndarray) -> list[dict]:
    """Start sensitivity: refit every replicate from a near-truth start of scale ``alt_init_scale``.

    The start noise has its own stream ``SeedSequence(seed, spawn_key=(n, replicate, 5))``; the
    near-truth fit of ``results.csv`` is untouched.  Columns ``alt_converged`` and ``alt_<loss>``
    (losses on the unit's held-out inputs ``holdout``).
    """
    alt = replace(unit, init_scale=unit.alt_init_scale)
    starts = [unit_start(alt, scenario, unit.n, np.random.default_rng(np.random.SeedSequence(unit.seed, spawn_key=(unit.n, r, 5))),
                         X[i], Y[i]) for i, r in enumerate(unit.replicates)]
    est = fit_starts(unit, scenario, X, Y, starts, 6)
    losses = scenario.loss_columns(est.params_, holdout)
    conv = np.asarray(est.converged_, bool)
    return [{"alt_converged": int(conv[i]), **{f"{ALT_PREFIX}{k}": float(v[i]) for k, v in losses.items()}}
            for i in range(len(unit.replicates))]

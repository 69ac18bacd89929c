"""Every simulated fit against the truth (issue 33, scope 1): the criterion at the true parameters
on the same data, the status of a fit worse than the truth, the answer, and old files still read."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from moestat.rates import RatesConfig
from moestat.rates import truth_check as tc
from moestat.rates.store import ResultStore, read_results
from moestat.rates.sweep import _against_truth, build_estimator, build_scenario, make_units, replicate_streams, run_unit

ROOT = Path(__file__).resolve().parents[2]

GMOE = {"family": "gaussian-moe", "estimator": "mle", "n_min": 2000, "n_max": 8000, "n_points": 3, "reps": 2,
        "init_scale": 0.1, "max_iter": 300, "holdout": 256, "n_boot": 50, "quiet": True}


def _unit(cfg: dict, **kw):
    u = make_units(RatesConfig.from_dict(cfg).validate())[-1]  # the smallest n
    return replace(u, **kw)


def _data(unit, scenario):
    Xs, Ys = [], []
    for r in unit.replicates:
        X, Y = scenario.sample(unit.n, np.random.default_rng(replicate_streams(unit.seed, unit.n, r)[0]))
        Xs.append(X)
        Ys.append(Y)
    return np.stack(Xs), np.stack(Ys)


# -------------------------------------------------------------------------------------------------
# the rule
# -------------------------------------------------------------------------------------------------
def test_the_gap_is_signed_so_that_negative_means_worse_than_the_truth():
    # log-likelihood: larger is better; sum of squares: smaller is better
    assert tc.truth_gap("loglik", np.array([-10.0]), np.array([-8.0]))[0] == -2.0
    assert tc.truth_gap("sse", np.array([10.0]), np.array([8.0]))[0] == -2.0
    truth = np.array([-1.0e4, -1.0e4, -1.0e4, np.nan])
    gap = np.array([-1.0, -1e-5, 0.5, -3.0])
    # 1 nat below is worse; 1e-5 nats of a 1e4-nat log-likelihood is rounding (tolerance 1e-4 + 1e-6)
    assert tc.is_below(gap, truth).tolist() == [True, False, False, False]
    rows = tc.truth_columns("loglik", np.array([-5.0, -5.0, 1.0]), np.array([1.0, -5.0, 1.0]), np.zeros(3))
    assert [r["truth_check"] for r in rows] == ["answered", "below_truth", "above"]
    assert rows[0]["first_gap"] == -5.0 and rows[0]["truth_gap"] == 1.0
    assert [r["truth_check"] for r in tc.truth_columns(None, np.ones(1), np.ones(1), np.ones(1))] == ["n/a"]


def test_the_truth_criterion_is_the_log_likelihood_of_the_true_model_on_the_same_data():
    from moestat.model.gaussian_moe import log_likelihood

    unit = _unit(GMOE)
    sc = build_scenario(unit.scenario_key)
    X, Y = _data(unit, sc)
    truth = tc.truth_criterion(sc, "loglik", X, Y)
    assert truth.shape == (2,)
    for i in range(2):
        assert truth[i] == pytest.approx(float(log_likelihood(X[i], Y[i], sc.truth)), rel=1e-12)


def test_the_fits_own_pass_gives_the_same_criteria_as_the_eager_likelihood():
    # issue 36: a Gaussian-MoE fit by the fused EM is judged by its own loglik_ and its pass at the
    # truth, not by the eager log-likelihood twice; the values agree to rounding of n terms
    unit = _unit(GMOE)
    sc = build_scenario(unit.scenario_key)
    X, Y = _data(unit, sc)
    est = tc.fit_starts(unit, sc, X, Y, [sc.near_truth_start(0.1, np.random.default_rng(r), n=unit.n) for r in range(2)], 2)
    assert est.kernel_ in ("compiled", "eager") and tc._by_the_fits_pass(sc, "loglik", est)
    eager_truth = sc.loglik_at(X, Y, sc.truth, fitted=False)
    eager_fit = sc.loglik_at(X, Y, est.params_, fitted=True)
    np.testing.assert_allclose(tc.truth_criterion(sc, "loglik", X, Y, est), eager_truth, rtol=1e-12)
    fit = tc.fit_criterion(sc, "loglik", est, X, Y)
    np.testing.assert_array_equal(fit, est.loglik_)
    np.testing.assert_allclose(fit, eager_fit, rtol=1e-12)
    # another estimator (least squares' criterion, or no fused pass) keeps the scenario's likelihood
    assert not tc._by_the_fits_pass(sc, "sse", est)
    assert not tc._by_the_fits_pass(sc, "loglik", object())


def test_a_unit_has_the_same_truth_columns_by_the_fits_pass_as_by_the_eager_likelihood(monkeypatch):
    # the rows of a unit whose first fits are below the truth (one EM step from far starts) and get
    # answered: the same statuses and checks either way, the criteria equal to rounding
    unit = _unit(GMOE, max_iter=1, init_scale=1.0)
    fast = run_unit(unit)
    monkeypatch.setattr(tc, "_by_the_fits_pass", lambda *a: False)
    slow = run_unit(unit)
    assert [r["truth_check"] for r in fast] == [r["truth_check"] for r in slow]
    assert any(r["truth_check"] != "above" for r in slow)  # the rule was exercised
    for a, b in zip(fast, slow):
        assert (a["status"], a["converged"], a["n_iter"]) == (b["status"], b["converged"], b["n_iter"])
        for col in ("fit_objective", "truth_objective"):
            assert a[col] == pytest.approx(b[col], rel=1e-12)
        # the gap is a difference of two such values: rounding of their size, not of its own
        assert a["truth_gap"] == pytest.approx(b["truth_gap"], abs=1e-12 * abs(b["truth_objective"]))


# -------------------------------------------------------------------------------------------------
# a fit worse than the truth: answered, or counted with its own status
# -------------------------------------------------------------------------------------------------
def test_a_fit_stopped_far_from_the_optimum_is_answered_by_more_starts_never_from_the_truth():
    unit = _unit(GMOE)
    sc = build_scenario(unit.scenario_key)
    X, Y = _data(unit, sc)
    # a first fit stopped after one EM step from a start far from the truth: worse than the truth
    from moestat.estimators.starts import near_truth_init
    from moestat.model.mixing import MixingMeasure

    bad = MixingMeasure.stack([near_truth_init(sc.truth, sc.k_fit, 2.0, np.random.default_rng(s), log_last=True)
                               for s in range(2)])
    est = build_estimator("mle", sc, 1, 0, "cpu").fit(X, Y, init=bad)
    state = _against_truth(unit, sc, X, Y, est)
    checks = [t["truth_check"] for t in state["truth"]]
    assert all(t["first_gap"] < -1.0 for t in state["truth"])  # the first fits were found
    # the global maximum of the likelihood is never below the truth's: the answer's starts reach it
    assert checks == ["answered", "answered"]
    assert all(t["truth_gap"] >= -1e-6 for t in state["truth"])
    assert state["rounds"] >= 1 and (state["starts"] > 0).all()
    assert all(s != "below_truth" for s in state["status"])


def test_what_the_answer_cannot_lift_is_counted_below_the_truth_and_not_converged(tmp_path, monkeypatch):
    # one EM iteration from a start far from the truth, and no answer (its rounds switched off): the
    # fits stay below the truth, and they are written with their own status, never dropped
    monkeypatch.setattr(tc, "ANSWER_ROUNDS", 0)
    unit = _unit(GMOE, max_iter=1, init_scale=1.0)
    rows = run_unit(unit)
    assert len(rows) == 2
    below = [r for r in rows if r["truth_check"] == "below_truth"]
    assert below, [r["truth_gap"] for r in rows]
    for r in below:
        assert r["status"] == "below_truth" and r["converged"] is False and r["truth_gap"] < 0
    store = ResultStore(tmp_path / "results.csv")
    store.create()
    store.append(rows)
    df = read_results(store.path)
    assert (df["truth_check"] == "below_truth").sum() == len(below)
    assert np.allclose(df["truth_gap"], df["fit_objective"] - df["truth_objective"])


def test_least_squares_fits_are_compared_by_their_sum_of_squares():
    unit = _unit({"router": "perturbed", "d": 2, "n_min": 60, "n_max": 120, "n_points": 3, "reps": 2, "max_iter": 50,
                  "holdout": 64, "quiet": True})
    rows = run_unit(unit)
    for r in rows:
        assert r["fit_objective"] == pytest.approx(unit.n * r["objective"], rel=1e-12)
        assert r["truth_gap"] == pytest.approx(r["truth_objective"] - r["fit_objective"], rel=1e-12, abs=1e-12)
        assert r["truth_check"] in ("above", "answered", "below_truth")
        assert (r["truth_check"] == "below_truth") == (r["status"] in ("below_truth", "estimator_fault"))


SPARSE = {"router": "perturbed", "k_active": 2, "expert": "tanh", "n_min": 200, "n_max": 800, "n_points": 3, "reps": 2,
          "max_iter": 1, "init_scale": 1.0, "holdout": 64, "quiet": True}


def test_a_fit_from_the_truth_that_ends_worse_than_the_truth_is_an_estimator_fault_reported_once(monkeypatch):
    # One least-squares iteration from far starts leaves both fits worse than the truth.  The fit
    # from the truth itself is made to fail (its start swapped for a far one, as an estimator that
    # walks away from its start would): each row is reported once, status estimator_fault, after
    # exactly one diagnostic fit and without the answer's restarts.
    calls = []
    fit_starts = tc.fit_starts

    def spy(unit, scenario, X, Y, starts, *stream):
        calls.append(stream)
        if stream == (10,):
            starts = [scenario.near_truth_start(1.0, np.random.default_rng(i), n=unit.n) for i in range(len(starts))]
        return fit_starts(unit, scenario, X, Y, starts, *stream)

    monkeypatch.setattr(tc, "fit_starts", spy)
    rows = run_unit(_unit(SPARSE))
    assert [r["truth_check"] for r in rows] == ["below_truth", "below_truth"]
    assert all(r["status"] == "estimator_fault" and r["converged"] is False and r["truth_gap"] < 0 for r in rows)
    assert [c for c in calls if c and c[0] in (8, 10)] == [(10,)]  # one diagnostic batch, no restarts


def test_the_answer_is_bounded_and_fits_in_batches_of_the_units_size(monkeypatch):
    # A fit worse than the truth is answered by a declared, bounded number of starts (at most
    # ANSWER_ROUNDS rounds of ANSWER_JITTER + ANSWER_NEAR + ANSWER_RANDOM), each batch no larger
    # than the unit's own (the answer's memory is the unit's fit's), and its row is written once
    batches = []
    fit_starts = tc.fit_starts

    def spy(unit, scenario, X, Y, starts, *stream):
        batches.append((stream, len(X), len(X)))
        return fit_starts(unit, scenario, X, Y, starts, *stream)

    monkeypatch.setattr(tc, "fit_starts", spy)
    unit = _unit({**SPARSE, "reps": 3})
    rows = run_unit(unit)
    assert len(rows) == 3 and sorted(r["replicate"] for r in rows) == list(unit.replicates)
    answer = [b for b in batches if b[0][0] == 8]
    assert answer and all(b[1] <= len(unit.replicates) for b in answer)
    found = sum(r["first_gap"] < 0 for r in rows)
    per_replicate = tc.ANSWER_JITTER + tc.ANSWER_NEAR + tc.ANSWER_RANDOM
    assert sum(b[1] for b in answer) <= tc.ANSWER_ROUNDS * per_replicate * found
    assert len([b for b in batches if b[0] == (10,)]) <= 1  # the truth-start check: one batch at most
    # the bound the module states is the constants' (docs/guide/rates.rst states it too)
    assert f"at most {1 + tc.ANSWER_ROUNDS * per_replicate} more fits" in " ".join(tc.__doc__.split())


def test_the_answer_keeps_the_same_fits_whatever_the_batch():
    # each replicate is fitted by itself: batches of the unit's size give the fits of one batch
    unit = _unit({**SPARSE, "reps": 3})
    sc = build_scenario(unit.scenario_key)
    X, Y = _data(unit, sc)
    starts = [sc.near_truth_start(0.5, np.random.default_rng(i), n=unit.n) for i in range(7)]
    owner = np.array([0, 0, 1, 1, 2, 2, 0])
    small = tc._fit_in_batches(unit, sc, X, Y, owner, starts, "sse", (8, 0))
    one = tc._fit_in_batches(replace(unit, replicates=tuple(range(len(owner)))), sc, X, Y, owner, starts, "sse", (8, 0))
    assert list(small["status"]) == list(one["status"])
    np.testing.assert_allclose(small["criterion"], one["criterion"], rtol=1e-9)
    np.testing.assert_array_equal(small["n_iter"], one["n_iter"])


def test_the_least_squares_fit_from_the_truth_is_no_fault(monkeypatch):
    # the real estimator, one iteration from the truth: never worse than the truth (LM accepts only
    # decreases), so the fits worse than the truth are local optima, left to the answer
    unit = _unit(SPARSE)
    sc = build_scenario(unit.scenario_key)
    X, Y = _data(unit, sc)
    est = tc.fit_starts(unit, sc, X, Y, [sc.near_truth_start(1.0, np.random.default_rng(i), n=unit.n) for i in range(2)], 2)
    truth = tc.truth_criterion(sc, "sse", X, Y)
    first = tc.fit_criterion(sc, "sse", est, X, Y)
    assert tc.is_below(tc.truth_gap("sse", first, truth), truth).all()
    assert not tc.truth_start_faults(unit, sc, X, Y, first, "sse", truth).any()
    # SGD is not a descent method on the data's criterion: it is not checked from the truth
    calls = []
    monkeypatch.setattr(tc, "fit_starts", lambda *a: calls.append(a))
    assert not tc.truth_start_faults(replace(unit, estimator="sgd"), sc, X, Y, first, "sse", truth).any() and not calls
    assert tc.truth_is_representable(sc)
    assert not tc.truth_is_representable(build_scenario(_unit({**SPARSE, "setting": "over"}).scenario_key))
    from moestat.model.mixing import ParameterBox

    assert not tc.truth_is_representable(replace(sc, box=ParameterBox(beta1=0.05)))  # the truth outside the box


# -------------------------------------------------------------------------------------------------
# the summary's counts (the recorded files written before the truth columns: tests/records/test_truth_check_records.py)
# -------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_summary_counts_the_fits_found_answered_and_remaining(tmp_path, monkeypatch):
    from moestat.rates import run_rates
    from moestat.rates.experiment import format_table

    monkeypatch.setattr(tc, "ANSWER_ROUNDS", 0)  # nothing is answered: every fit found remains
    cfg = RatesConfig.from_dict({**GMOE, "n_min": 300, "n_max": 1200, "max_iter": 1, "init_scale": 1.0, "n_boot": 20})
    s = run_rates(cfg.validate(), tmp_path / "o")
    df = read_results(tmp_path / "o" / "results.csv")
    below = int((df["truth_check"] == "below_truth").sum())
    assert below > 0
    t = s["truth_check"]["gaussian-moe"]
    assert t == {"found": below, "answered": 0, "remain": below, "above": int((df["truth_check"] == "above").sum()),
                 "unknown": 0, "not_comparable": int(df["truth_check"].isin(["n/a", "nonfinite"]).sum())}
    assert s["counts"]["converged"] <= len(df) - below  # a fit below the truth is not converged
    assert f"gaussian-moe: {below} found, 0 answered, {below} remain (status below_truth)" in format_table(s)


# -------------------------------------------------------------------------------------------------
# every fit of a unit: one seam, one stream each
# -------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_every_fit_of_a_unit_goes_through_fit_starts_with_its_own_stream(monkeypatch):
    """The reported fit, the optimum certificate and the start sensitivity (and the answer, when a
    fit is worse than the truth) each build the unit's estimator once through
    :func:`~moestat.rates.truth_check.unit_estimator`, with the streams its docstring names; the
    rows are those of an unobserved run."""
    cfg = {"router": "perturbed", "n_min": 200, "n_max": 800, "n_points": 3, "reps": 2, "max_iter": 60,
           "extra_starts": 2, "alt_init_scale": 0.3, "holdout": 128, "quiet": True}
    unit = _unit(cfg)
    plain = run_unit(unit)
    seen = []
    build = tc.unit_estimator

    def watched(u, scenario, *stream):
        seen.append(stream)
        return build(u, scenario, *stream)

    monkeypatch.setattr(tc, "unit_estimator", watched)
    rows = run_unit(unit)
    # the reported fit first, then the answer's rounds (8, round) if any, the certificate and the start sensitivity
    assert seen[0] == (2,) and seen[-2:] == [(4,), (6,)]
    assert all(len(s) == 2 and s[0] == 8 for s in seen[1:-2])

    def same(a, b):
        return a == b or (isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b))

    for a, b in zip(plain, rows):
        assert a.keys() == b.keys()
        assert all(same(a[k], b[k]) for k in a if k != "time")

"""The estimator contract (moestat.estimators.base), checked for every entry of ``ESTIMATORS``.

A new estimator added to the registry is picked up by every test here automatically.  The data
come from the dense linear-gate scenario with identity experts, the one regression model every
estimator (EM included) accepts -- except for ``gllim``, the joint GLLiM's EM, which models ``x``
too and is fitted to data of a joint Gaussian-gated MoE (:data:`SCENARIO_OF`); each estimator is
built through ``for_scenario``, as the rates sweep does.
"""

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from moestat.data.gllim_scenarios import GLLiMScenario
from moestat.data.synthetic import make_scenario
from moestat.estimators import ESTIMATORS, FAILURE_STATUSES, MoEEstimator, random_starts
from moestat.estimators.gllim import random_gllim_start
from moestat.model.gllim_model import join_measure
from moestat.model.mixing import MixingMeasure

NAMES = sorted(ESTIMATORS)
R, N, D = 3, 120, 2

#: Estimators whose replicates are not independent of the batch they are in (documented in the
#: class): SGD draws its minibatch order for the whole ``[R, n]`` batch, so removing a replicate
#: changes the others' order; their independence of the other replicates' *data* is still checked.
BATCH_COUPLED = {"sgd"}
#: The entries fitted to another model's data than the regression scenario's (name -> scenario kind).
SCENARIO_OF = {"gllim": "gllim"}


def _gllim_scenario():
    """A joint GLLiM with two well-separated atoms in d = 2 (weights 0.4 / 0.6)."""
    truth = join_measure(np.log([0.4, 0.6]), np.array([[-1.0, 0.5], [1.0, -0.5]]),
                         np.array([np.diag([0.3, 0.2]), np.diag([0.2, 0.4])]), np.array([[1.0, -1.0], [-0.5, 2.0]]),
                         np.array([0.5, -0.5]), np.array([0.05, 0.1]))
    return GLLiMScenario(truth)


SCENARIOS = {"regression": make_scenario("linear", "exact", d=D, k_true=2, expert="identity"), "gllim": _gllim_scenario()}


def _data(kind):
    sc = SCENARIOS[kind]
    rng = np.random.default_rng(0)
    XY = [sc.sample(N, rng) for _ in range(R)]
    X = np.stack([a for a, _ in XY])
    Y = np.stack([b for _, b in XY])
    if kind == "gllim":  # a start in the GLLiM layout, drawn from each replicate's data
        g = np.random.default_rng(1)
        init = MixingMeasure.stack([random_gllim_start(X[r], Y[r], sc.k_fit, g) for r in range(R)])
    else:
        init = random_starts(R, sc.k_fit, D, np.random.default_rng(1))
    return X, Y, init


DATA = {kind: _data(kind) for kind in SCENARIOS}


@pytest.fixture
def scenario(request):
    return SCENARIOS[SCENARIO_OF.get(request.getfixturevalue("name"), "regression")]


@pytest.fixture
def data(request):
    return DATA[SCENARIO_OF.get(request.getfixturevalue("name"), "regression")]


def build(name, scenario, random_state=0, **params):
    est = ESTIMATORS[name].for_scenario(scenario, max_iter=30, random_state=random_state, device="cpu")
    return est.set_params(**params) if params else est


def construct(name, scenario, n_components, **params):
    """The class of ``name`` built directly: ``(model, n_components)``, or ``n_components`` alone for
    the joint GLLiM (its model is fixed by the class)."""
    cls = ESTIMATORS[name]
    return cls(n_components, **params) if name in SCENARIO_OF else cls(scenario.fit_model, n_components, **params)


def same_fit(a, b, idx_a=slice(None), idx_b=slice(None), rtol=0.0):
    """Two fits agree on the given replicates (parameters, objective, status, iterations)."""
    for field in ("beta0", "beta1", "eta"):
        np.testing.assert_allclose(
            getattr(a.params_, field)[idx_a], getattr(b.params_, field)[idx_b], rtol=rtol, atol=rtol * 1e-2
        )
    np.testing.assert_allclose(a.objective_[idx_a], b.objective_[idx_b], rtol=rtol)
    np.testing.assert_array_equal(np.asarray(a.status_)[idx_a], np.asarray(b.status_)[idx_b])
    np.testing.assert_array_equal(a.n_iter_[idx_a], b.n_iter_[idx_b])


@pytest.fixture(autouse=True)
def one_thread():
    # a replicate's LSE fit is independent of its batch only with one thread (see
    # tests/estimators/test_lse.py::test_batched_equals_one_at_a_time); sweeps run so too
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_registry_is_the_contract():
    assert NAMES == ["em", "gllim", "lse", "mle", "null", "sgd"]
    for cls in ESTIMATORS.values():
        assert issubclass(cls, MoEEstimator)


@pytest.mark.parametrize("name", NAMES)
def test_fit_returns_self_with_common_attributes(name, scenario, data):
    X, Y, init = data
    est = build(name, scenario)
    assert est.fit(X, Y, init=init) is est
    G = est.params_
    assert G.batch_shape == (R,) and isinstance(G.beta0, np.ndarray)
    assert G.beta0.shape == (R, 2) and G.beta1.shape == (R, 2, D) and G.eta.shape == (R, 2, init.eta.shape[-1])
    assert est.objective_.shape == (R,) and est.objective_.dtype == np.float64
    assert est.converged_.shape == (R,) and est.converged_.dtype == bool
    assert est.n_iter_.shape == (R,) and est.n_iter_.dtype.kind == "i"
    assert isinstance(est.status_, list) and len(est.status_) == R and all(isinstance(s, str) for s in est.status_)
    assert not set(est.status_) & set(FAILURE_STATUSES)
    assert est.n_features_in_ == D
    assert np.all(np.isfinite(est.objective_))


@pytest.mark.parametrize("name", NAMES)
def test_objective_is_mean_squared_residual_of_predict(name, scenario, data):
    X, Y, init = data
    est = build(name, scenario).fit(X, Y, init=init)
    pred = est.predict(X)
    assert pred.shape == (R, N)
    np.testing.assert_allclose(est.objective_, np.mean((Y - pred) ** 2, axis=1), rtol=1e-10)
    score = est.score(X, Y)
    assert score.shape == (R,)
    np.testing.assert_allclose(score, -est.objective_, rtol=1e-10)
    # an unbatched X is evaluated under every replicate's fit
    np.testing.assert_allclose(est.predict(X[0])[0], pred[0], rtol=1e-12)
    with pytest.raises(ValueError, match="X must have shape"):
        est.predict(X[..., :1])


@pytest.mark.parametrize("name", NAMES)
def test_unfitted_predict_and_score_raise(name, scenario, data):
    X, Y, _ = data
    est = build(name, scenario)
    with pytest.raises(NotFittedError):
        est.predict(X)
    with pytest.raises(NotFittedError):
        est.score(X, Y)


@pytest.mark.parametrize("name", NAMES)
def test_init_only_stores_and_fit_validates(name, scenario, data):
    X, Y, _ = data
    # no check in __init__: any value is stored as given ...
    est = construct(name, scenario, 0, random_state="not a seed")
    assert est.get_params()["n_components"] == 0 and est.random_state == "not a seed"
    # ... and fit refuses it
    with pytest.raises(ValueError, match="n_components"):
        est.fit(X, Y)
    with pytest.raises(TypeError, match="random_state"):
        construct(name, scenario, 2, random_state="not a seed").fit(X, Y)
    # scikit-learn's parameter API: clone, set_params, repr
    good = build(name, scenario, random_state=3)
    twin = clone(good)
    assert twin is not good and twin.get_params() == good.get_params()
    assert good.set_params(random_state=4) is good and good.random_state == 4
    assert type(good).__name__ in repr(good)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["int", "seedsequence", "generator"])
def test_same_random_state_same_fit(name, kind, scenario, data):
    """Random starts (no init): the same seed gives the same fit, for every kind of seed."""
    X, Y, _ = data

    def seed():
        return {
            "int": 7,
            "seedsequence": np.random.SeedSequence(7),
            "generator": np.random.default_rng(7),
        }[kind]

    a = build(name, scenario, random_state=seed()).fit(X, Y)
    b = build(name, scenario, random_state=seed()).fit(X, Y)
    same_fit(a, b)
    if kind == "seedsequence":
        # one SeedSequence object used twice gives the same fit twice (it is never consumed)
        ss = np.random.SeedSequence(7)
        first = build(name, scenario, random_state=ss).fit(X, Y)
        again = build(name, scenario, random_state=ss).fit(X, Y)
        same_fit(first, again)
        same_fit(a, first)
    # None draws fresh entropy and still fits
    assert build(name, scenario, random_state=None).fit(X, Y).objective_.shape == (R,)


@pytest.mark.parametrize("name", NAMES)
def test_failed_replicate_is_reported_not_raised(name, scenario, data):
    """A replicate whose data overflow (finite, but squares beyond float64) fails alone."""
    X, Y, init = data
    bad = 1
    Yb = Y.copy()
    Yb[bad] *= 1e200
    with np.errstate(over="ignore", invalid="ignore"):
        est = build(name, scenario).fit(X, Yb, init=init)
    assert est.status_[bad] in FAILURE_STATUSES
    assert np.isnan(est.objective_[bad]) and not est.converged_[bad]
    good = [r for r in range(R) if r != bad]
    assert not {est.status_[r] for r in good} & set(FAILURE_STATUSES)
    # the others are fitted as if the bad replicate were sound ...
    sound = build(name, scenario).fit(X, Y, init=init)
    same_fit(est, sound, good, good, rtol=1e-10)
    # ... and, unless the estimator couples its batch, as if it were not there at all
    if name not in BATCH_COUPLED:
        alone = build(name, scenario).fit(X[good], Y[good], init=init[good])
        same_fit(est, alone, good, slice(None), rtol=1e-10)
    np.testing.assert_allclose(est.objective_[good], np.mean((Y[good] - est.predict(X)[good]) ** 2, axis=1), rtol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_is_a_value_error_at_fit(name, scenario, data):
    """Non-finite *data* is bad input (ValueError), unlike a fit that becomes non-finite."""
    X, Y, _ = data
    Xn = X.copy()
    Xn[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        build(name, scenario).fit(Xn, Y)
    with pytest.raises(ValueError, match="shape"):
        build(name, scenario).fit(X, Y[:, :-1])


@pytest.mark.parametrize("name", NAMES)
def test_for_scenario_builds_the_fit_model(name, scenario):
    est = build(name, scenario, random_state=5)
    assert type(est) is ESTIMATORS[name]
    assert est.n_components == scenario.k_fit and est.random_state == 5
    if name not in SCENARIO_OF:  # the joint GLLiM's model is its class's
        assert est.model == scenario.fit_model


@pytest.mark.parametrize("name", ["em"])
def test_em_starts_reach_torch_without_its_read_only_warning(name, scenario, data):
    """A start given per replicate (batch shape ``(R,)``) or once for all (``()``) is broadcast to the
    fused EM's ``[R, S]`` layout by a read-only NumPy view; handing such a view to torch must not put
    torch's "non-writable array ... undefined behavior" warning on a user's screen.  (torch warns once
    per process: without the fix this test fails when it runs before any other EM fit, e.g. alone.)"""
    import warnings

    X, Y, init = data
    G = init.numpy()
    for start in (G, type(G)(G.beta0[0], G.beta1[0], G.eta[0])):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            est = build("em", scenario).fit(X, Y, init=start)
        assert est.params_.batch_shape == (R,)

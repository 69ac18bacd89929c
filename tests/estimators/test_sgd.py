"""SGD (the paper's optimiser): it lowers the objective, reports convergence honestly."""

import numpy as np
import pytest

from moestat import Expert, Gate, MixingMeasure, MoEModel
from moestat.estimators import ESTIMATORS, NullEstimator, SGDMoE, near_truth_init
from moestat.data.synthetic import make_scenario


def _data(n=400, R=2, seed=0, scale=0.2):
    sc = make_scenario("perturbed", "exact", d=3, k_true=3)
    rng = np.random.default_rng(seed)
    XY = [sc.sample(n, rng) for _ in range(R)]
    X = np.stack([a for a, _ in XY])
    Y = np.stack([b for _, b in XY])
    init = MixingMeasure.stack([near_truth_init(sc.truth, 3, scale, rng) for _ in range(R)])
    return sc, X, Y, init


def test_sgd_lowers_objective_and_reports_gradient():
    sc, X, Y, init = _data()
    start = NullEstimator(sc.model, 3).fit(X, Y, init=init)
    est = SGDMoE(sc.model, 3, epochs=5, lr=5e-2, random_state=0).fit(X, Y, init=init)
    assert np.all(est.objective_ < start.objective_)
    assert est.n_iter_.tolist() == [5 * int(np.ceil(400 / 64))] * 2
    # converged_ is exactly the documented final full-gradient test
    np.testing.assert_array_equal(est.converged_, est.grad_norm_ <= est.tol)
    assert set(est.status_) <= {"grad_tol", "max_epochs"}
    assert est.params_.satisfies_reference_convention()
    assert ESTIMATORS["sgd"] is SGDMoE


@pytest.mark.slow
def test_polish_reaches_a_stationary_point():
    sc, X, Y, init = _data()
    plain = SGDMoE(sc.model, 3, epochs=2, random_state=0).fit(X, Y, init=init)
    pol = SGDMoE(sc.model, 3, epochs=2, random_state=0, polish="lbfgs").fit(X, Y, init=init)
    assert np.all(pol.objective_ <= plain.objective_)
    assert np.all(pol.grad_norm_ < plain.grad_norm_)
    lm = SGDMoE(sc.model, 3, epochs=2, random_state=0, polish="lm").fit(X, Y, init=init)
    assert np.all(lm.objective_ <= plain.objective_)


def test_sgd_reproducible_and_seed_dependent():
    sc, X, Y, init = _data(R=1)
    a = SGDMoE(sc.model, 3, epochs=2, random_state=3).fit(X, Y, init=init)
    b = SGDMoE(sc.model, 3, epochs=2, random_state=3).fit(X, Y, init=init)
    c = SGDMoE(sc.model, 3, epochs=2, random_state=4).fit(X, Y, init=init)
    np.testing.assert_array_equal(a.params_.beta1, b.params_.beta1)
    assert not np.array_equal(a.params_.beta1, c.params_.beta1)


MODEL = MoEModel(Gate("perturbed", k_active=2), Expert("gelu"))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(lr=0.0), "lr"),
        (dict(batch_size=0), "batch_size"),
        (dict(epochs=0), "epochs"),
        (dict(lr_schedule="linear"), "lr_schedule"),
        (dict(polish="adam"), "polish"),
        (dict(device="gpu"), "device"),
        (dict(tol=float("nan")), "tol"),
    ],
)
def test_sgd_bad_parameters(kwargs, match):
    """Parameters are stored by ``__init__`` and checked by ``fit``."""
    est = SGDMoE(MODEL, 3, **kwargs)
    X, Y = np.random.default_rng(0).uniform(-1, 1, (1, 100, 3)), np.zeros((1, 100))
    with pytest.raises(ValueError, match=match):
        est.fit(X, Y)


def test_sgd_bad_data():
    rng = np.random.default_rng(0)
    X, Y = rng.uniform(-1, 1, (2, 100, 3)), rng.standard_normal((2, 100))
    with pytest.raises(ValueError, match="Y"):
        SGDMoE(MODEL, 3).fit(X, Y[0])
    with pytest.raises(ValueError, match="n_components"):
        SGDMoE(MODEL, 1).fit(X, Y)

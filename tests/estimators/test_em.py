"""EM for the softmax-gated Gaussian MoE regression (Jordan & Jacobs)."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import softmax

from moestat.data.synthetic import make_scenario
from moestat.estimators.em import EMGaussianMoE
from moestat.model.experts import Expert
from moestat.model.gates import Gate
from moestat.model.mixing import MixingMeasure
from moestat.model.regression import MoEModel

# Truth (reference convention: last atom beta0 = 0, beta1 = 0), k = 2, d = 1.
B0 = np.array([0.5, 0.0])
B1 = np.array([[2.0], [0.0]])
ETA = np.array([[1.5, -0.5], [-1.0, 0.8]])
SIGMA = 0.3


def sample(n, R, seed, b0=B0, b1=B1, eta=ETA, sigma=SIGMA):
    rng = np.random.default_rng(seed)
    d = b1.shape[1]
    X = rng.standard_normal((R, n, d))
    pi = softmax(X @ b1.T + b0, axis=-1)
    z = (rng.random((R, n, 1)) > pi.cumsum(-1)).sum(-1).clip(max=len(b0) - 1)
    mu = np.einsum("rnd,rnd->rn", X, eta[z, :-1]) + eta[z, -1]
    return X, mu + sigma * rng.standard_normal((R, n))


def aligned_error(G: MixingMeasure) -> np.ndarray:
    """Per-replicate max-abs parameter error after the best relabelling (re-normalised to the reference)."""
    out = []
    for r in range(G.batch_shape[0]):
        best = np.inf
        for perm in itertools.permutations(range(G.n_atoms)):
            perm = list(perm)
            b0, b1, eta = G.beta0[r][perm], G.beta1[r][perm], G.eta[r][perm]
            b0, b1 = b0 - b0[-1], b1 - b1[-1]
            err = max(np.abs(b0 - B0).max(), np.abs(b1 - B1).max(), np.abs(eta - ETA).max())
            best = min(best, err)
        out.append(best)
    return np.array(out)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 3), st.integers(1, 2))
def test_loglik_never_decreases(seed, k, d):
    rng = np.random.default_rng(seed)
    b1 = np.vstack([rng.normal(0, 2, (k - 1, d)), np.zeros((1, d))])
    b0 = np.append(rng.normal(0, 1, k - 1), 0.0)
    eta = rng.normal(0, 1.5, (k, d + 1))
    X, Y = sample(150, 1, seed, b0, b1, eta, 0.4)
    em = EMGaussianMoE(k, random_state=seed, n_init=1, max_iter=60, tol=0.0).fit(X, Y)
    path = np.array(em.loglik_path_[0])
    assert np.all(np.diff(path) >= -1e-8 * (1 + np.abs(path[:-1]))), np.diff(path).min()
    assert em.loglik_[0] == path[-1]


def test_recovers_parameters_as_n_grows():
    errs = {}
    for n in (300, 6000):
        X, Y = sample(n, 2, seed=n)
        em = EMGaussianMoE(2, random_state=1, n_init=2).fit(X, Y)
        assert em.converged_.all()
        errs[n] = aligned_error(em.params_)
        assert em.params_.satisfies_reference_convention()
    assert errs[6000].mean() < errs[300].mean()
    assert errs[6000].max() < 0.15
    assert np.sqrt(em.noise_var_) == pytest.approx(SIGMA, abs=0.02)


def test_fitted_attributes_and_objective():
    X, Y = sample(400, 3, seed=5)
    em = EMGaussianMoE(n_components=2, random_state=0, n_init=1).fit(torch.as_tensor(X), torch.as_tensor(Y))
    assert em.params_.beta0.shape == (3, 2) and em.params_.beta1.shape == (3, 2, 1) and em.params_.eta.shape == (3, 2, 2)
    for name in ("noise_var_", "converged_", "n_iter_", "objective_", "loglik_"):
        assert getattr(em, name).shape == (3,)
    assert em.converged_.dtype == bool and em.n_iter_.dtype.kind == "i"
    assert len(em.loglik_path_) == 3
    # objective_ is the mean squared residual of its own predict, as for every estimator
    np.testing.assert_allclose(em.objective_, ((Y - em.predict(X)) ** 2).mean(1))
    assert em.status_ == ["tol"] * 3
    # The EM fit should beat the best single line in mean squared residual.
    for r in range(3):
        A = np.c_[X[r], np.ones(400)]
        mse_ols = ((Y[r] - A @ np.linalg.lstsq(A, Y[r], rcond=None)[0]) ** 2).mean()
        assert em.objective_[r] < mse_ols


def test_init_near_truth_is_used():
    X, Y = sample(2000, 2, seed=11)
    init = MixingMeasure(B0, B1, ETA)  # unbatched: used for every replicate
    em = EMGaussianMoE(2, random_state=0).fit(X, Y, init=init)
    assert aligned_error(em.params_).max() < 0.25
    # the label order of the start is kept (no relabelling when starting at the truth)
    np.testing.assert_allclose(em.params_.eta, np.broadcast_to(ETA, (2, 2, 2)), atol=0.25)


def test_single_component_is_ols():
    X, Y = sample(300, 1, seed=3)
    em = EMGaussianMoE(1, random_state=0).fit(X, Y)
    A = np.c_[X[0], np.ones(300)]
    np.testing.assert_allclose(em.params_.eta[0, 0], np.linalg.lstsq(A, Y[0], rcond=None)[0], atol=1e-10)


def test_rejects_unsupported_models_and_bad_input():
    # parameters are stored by __init__ and checked by fit (scikit-learn's convention)
    X, Y = sample(50, 1, seed=0)
    with pytest.raises(ValueError, match="linear softmax gate"):
        EMGaussianMoE(MoEModel(Gate("cosine"), Expert("identity")), 2).fit(X, Y)
    with pytest.raises(ValueError, match="linear softmax gate"):
        EMGaussianMoE(MoEModel(Gate("linear", k_active=1), Expert("identity")), 2).fit(X, Y)
    EMGaussianMoE(MoEModel(Gate("linear", k_active=2), Expert("identity")), 2).fit(X, Y)  # K = k is dense
    with pytest.raises(ValueError, match="identity"):
        EMGaussianMoE(MoEModel(Gate("linear"), Expert("gelu")), 2).fit(X, Y)
    with pytest.raises(ValueError, match="MoEModel"):
        EMGaussianMoE("linear", 2).fit(X, Y)
    with pytest.raises(ValueError, match="once"):
        EMGaussianMoE(2, 3).fit(X, Y)
    # the rates engine's constructor, EMGaussianMoE.for_scenario, checks at once
    with pytest.raises(ValueError, match="linear softmax gate"):
        EMGaussianMoE.for_scenario(make_scenario("perturbed", "exact"), max_iter=5, random_state=0)
    # the rates engine's calling convention, EMGaussianMoE(model, k, max_iter=..., random_state=...)
    em = EMGaussianMoE(MoEModel(Gate("linear"), Expert("identity")), 3, max_iter=5, random_state=0)
    assert em.n_components == 3
    with pytest.raises(ValueError, match="n_components"):
        EMGaussianMoE(0).fit(X, Y)
    em = EMGaussianMoE(2)
    with pytest.raises(ValueError, match="shape"):
        em.fit(np.zeros((2, 10, 1)), np.zeros((2, 9)))
    with pytest.raises(ValueError, match="NaN"):
        em.fit(np.full((1, 10, 1), np.nan), np.zeros((1, 10)))
    with pytest.raises(ValueError, match="atoms"):
        em.fit(np.zeros((1, 10, 1)), np.zeros((1, 10)), init=MixingMeasure(np.zeros(3), np.zeros((3, 1)), np.zeros((3, 2))))
    with pytest.raises(ValueError, match="not fitted"):
        EMGaussianMoE(2).predict(np.zeros((1, 3, 1)))

"""Selection criteria: AIC/BIC/ICL against a direct computation, DSC on large-n cases, bad input."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from moestat.data.gaussian_scenarios import model1_scenario, model1_truth
from moestat.model.mixing import MixingMeasure
from moestat.selection.criteria import dsc_path, fit_ladder, information_criteria, n_parameters, pick
from moestat.selection.dendrogram import build_dendrogram


def _sample(G, n, seed):
    from moestat.model.gaussian_moe import sample_y

    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, G.dim))
    return X, sample_y(X, G, rng)


def _split(truth, atom, dbeta1=0.0, share=0.5):
    """``truth`` with atom ``atom`` split into two near-identical atoms of masses ``share`` and ``1 - share``."""
    T = truth.numpy()
    b0 = np.insert(T.beta0, atom, T.beta0[atom] + np.log(share))
    b0[atom + 1] = T.beta0[atom] + np.log(1 - share)
    b1 = np.insert(T.beta1, atom, T.beta1[atom] + dbeta1, axis=0)
    eta = np.insert(T.eta, atom, T.eta[atom] * (1 + 1e-3), axis=0)
    return MixingMeasure(b0, b1, eta)


def test_information_criteria_match_a_direct_computation():
    G = model1_truth()
    X, Y = _sample(G, 500, 0)
    logits = X @ G.beta1.T + G.beta0
    pi = np.exp(logits - logits.max(1, keepdims=True))
    pi /= pi.sum(1, keepdims=True)
    dens = pi * norm.pdf(Y[:, None], X @ G.eta[:, :1].T + G.eta[:, 1], np.sqrt(G.eta[:, 2]))
    ll = np.log(dens.sum(1)).sum()
    tau = dens / dens.sum(1, keepdims=True)
    ent = -np.sum(tau * np.log(np.where(tau > 0, tau, 1.0)))
    p = n_parameters(2, 1)
    assert p == 8  # gate (beta0, beta1) of one atom; (a, b, sigma^2) of two
    ic = information_criteria(X, Y, G)
    assert np.isclose(ic["loglik"], ll, rtol=1e-10)
    assert np.isclose(ic["AIC"], -2 * ll + 2 * p, rtol=1e-10)
    assert np.isclose(ic["BIC"], -2 * ll + p * math.log(500), rtol=1e-10)
    assert np.isclose(ic["ICL"], -2 * ll + p * math.log(500) + 2 * ent, rtol=1e-8)


def test_pick_takes_the_least_finite_score_and_the_smallest_k_on_ties():
    assert pick({1: 3.0, 2: 1.0, 3: 1.0}) == 2
    assert pick({1: np.nan, 2: 5.0, 3: np.inf}) == 2
    with pytest.raises(ValueError, match="every fit failed"):
        pick({1: np.nan, 2: np.inf})


@pytest.mark.parametrize("k_bar", [3, 4])
def test_dsc_picks_k_star_from_a_split_truth_at_large_n(k_bar):
    # the limit of an over-fitted MLE: the reference atom of model 1 carried by K_bar - 1 near-identical
    # atoms (slightly different gate slopes); at n = 20 000 the heights above k* are tiny, the merge
    # at k* is not, and below k* the likelihood falls
    T = model1_truth()
    G = _split(T, 1, dbeta1=0.05)
    if k_bar == 4:
        G = _split(G, 1, dbeta1=-0.03, share=0.3)
    X, Y = _sample(T, 20_000, 1)
    for center in (X.mean(0), None):
        path = dsc_path(build_dendrogram(G, center=center), X, Y)
        assert path["k_hat"] == 2, path
        assert list(path["k"]) == list(range(k_bar, 1, -1))


@pytest.mark.slow
def test_dsc_picks_k_star_on_a_fitted_over_specified_model1():
    sc = model1_scenario("over", 3)
    n = 4000
    X, Y = sc.sample(n, np.random.default_rng(np.random.SeedSequence(7, spawn_key=(n, 0, 0))))
    fits = fit_ladder(X[None], Y[None], [3], truth=sc.truth, n_starts=1,
                      streams=lambda r, k, s: np.random.SeedSequence(7, spawn_key=(n, r, 10 + k, s)))
    assert fits[3]["status"][0] in ("tol", "newton")
    dend = build_dendrogram(fits[3]["params"][0], center=X.mean(0))
    path = dsc_path(dend, X, Y)
    assert path["k_hat"] == 2, path
    # the merge at k* joins the two true experts: the largest height by far (25x here)
    assert path["height"][-1] > 10 * path["height"][0]


def test_dsc_refuses_a_regression_tree():
    G = MixingMeasure(np.zeros(3), np.zeros((3, 1)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="likelihood"):
        dsc_path(build_dendrogram(G, "regression"), np.zeros((10, 1)), np.zeros(10))

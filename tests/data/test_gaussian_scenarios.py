"""Gaussian-MoE model, model-1 scenario and its Voronoi losses (Nguyen, Nguyen & Ho 2023)."""

import numpy as np
import pytest
from scipy import stats

from moestat.data.gaussian_scenarios import GaussianMoEScenario, gaussian_voronoi, model1_scenario, model1_truth
from moestat.model.gaussian_moe import log_likelihood, mean_function
from moestat.model.mixing import MixingMeasure


def test_sampling_follows_the_mixture():
    # at x = 0.2 the gate gives expert 1 the weight sigmoid(-8 + 5) = 0.047; check the law of y
    sc = model1_scenario("exact")
    G = sc.truth
    X = np.full((20000, 1), 0.2)
    from moestat.model.gaussian_moe import sample_y

    y = sample_y(X, G, np.random.default_rng(0))
    w1 = 1 / (1 + np.exp(-(-8 + 25 * 0.2)))
    mu1, mu2 = 15 - 20 * 0.2, -5 + 20 * 0.2

    def cdf(t):
        return w1 * stats.norm.cdf(t, mu1, 0.3) + (1 - w1) * stats.norm.cdf(t, mu2, 0.4)

    assert stats.kstest(y, cdf).pvalue > 1e-3
    np.testing.assert_allclose(mean_function(X[:1], G), w1 * mu1 + (1 - w1) * mu2)


def test_loglik_is_the_mixture_density():
    G = model1_truth()
    X, Y = np.array([[0.3], [0.7]]), np.array([1.0, 8.0])
    w1 = 1 / (1 + np.exp(-(-8 + 25 * X[:, 0])))
    dens = w1 * stats.norm.pdf(Y, 15 - 20 * X[:, 0], 0.3) + (1 - w1) * stats.norm.pdf(Y, -5 + 20 * X[:, 0], 0.4)
    np.testing.assert_allclose(log_likelihood(X, Y, G), np.log(dens).sum(), rtol=1e-12)


def test_same_stream_same_data_and_grid_design():
    sc = model1_scenario("exact")
    a, b = sc.sample(50, 3), sc.sample(50, 3)
    np.testing.assert_array_equal(a[1], b[1])
    g = model1_scenario("exact", input_law="grid")
    np.testing.assert_array_equal(g.sample(5, 0)[0][:, 0], np.linspace(0, 1, 5))
    assert model1_scenario("over").k_fit == 3 and model1_scenario("over", 4).setting == "over"


def test_voronoi_zero_at_truth_and_invariant_to_relabelling():
    T = model1_truth()
    for name in ("D1", "D2"):
        assert gaussian_voronoi(T, T, name)["voronoi"][0] == 0.0
    rng = np.random.default_rng(0)
    G = MixingMeasure(T.beta0 + [0.1, 0.0], T.beta1 + rng.normal(0, 0.1, (2, 1)), T.eta + rng.normal(0, 0.01, (2, 3)))
    G = MixingMeasure(G.beta0 - G.beta0[-1], G.beta1 - G.beta1[-1], G.eta)
    swapped = MixingMeasure(G.beta0[::-1] - G.beta0[0], G.beta1[::-1] - G.beta1[0], G.eta[::-1])
    np.testing.assert_allclose(gaussian_voronoi(swapped, T)["voronoi"], gaussian_voronoi(G, T)["voronoi"], rtol=1e-12)


def test_d2_exponents_of_a_shared_cell():
    # two atoms splitting atom 1 (mass halves), offset eps in every coordinate of the cell:
    # the cell terms are exp(beta0)(eps^4 + eps^2 + eps^4 + eps^2) each (rbar = 4)
    T = model1_truth()
    eps = 1e-2
    b0 = np.array([T.beta0[0] - np.log(2), T.beta0[0] - np.log(2), 0.0])
    b1 = np.array([T.beta1[0] + eps, T.beta1[0] - eps, [0.0]])
    eta = np.array([T.eta[0] + eps, T.eta[0] - eps, T.eta[1]])
    L = gaussian_voronoi(MixingMeasure(b0, b1, eta), T, "D2")
    m = np.exp(T.beta0[0])
    np.testing.assert_allclose(L["voronoi"][0], 2 * (m / 2) * (2 * eps**4 + 2 * eps**2), rtol=1e-6)
    assert L["param_single"][0] == 0.0 and L["param_multi"][0] == pytest.approx(2 * eps)
    assert L["mass"][0] == pytest.approx(0.0, abs=1e-15)


def test_bad_scenarios():
    with pytest.raises(ValueError, match="input_law"):
        GaussianMoEScenario("x", model1_truth(), 2, "normal")
    with pytest.raises(ValueError, match="k_fit"):
        GaussianMoEScenario("x", model1_truth(), 1)
    with pytest.raises(ValueError, match="D1 or D2"):
        gaussian_voronoi(model1_truth(), model1_truth(), "D3")

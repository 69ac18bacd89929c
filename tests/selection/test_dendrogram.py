"""The dendrogram of mixing measures: merge rule, linkage matrix, heights, bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moestat.model.gaussian_moe import mean_function
from moestat.model.mixing import MixingMeasure
from moestat.selection.dendrogram import build_dendrogram, dissimilarity, merge_pair, plot_dendrogram


def _measure(rng, k, d=1, family="gaussian"):
    q = d + 2 if family == "gaussian" else d + 1
    eta = rng.normal(size=(k, q))
    if family == "gaussian":
        eta[:, -1] = rng.uniform(0.05, 1.0, size=k)
    b0, b1 = rng.normal(size=k), rng.normal(size=(k, d))
    b0[-1], b1[-1] = 0.0, 0.0
    return MixingMeasure(b0, b1, eta)


@given(seed=st.integers(0, 2**31 - 1), k=st.integers(2, 6), d=st.integers(1, 3),
       family=st.sampled_from(["gaussian", "regression"]), center=st.booleans())
def test_every_level_keeps_the_total_mass_and_the_tree_is_a_valid_linkage(seed, k, d, family, center):
    from scipy.cluster.hierarchy import is_valid_linkage

    rng = np.random.default_rng(seed)
    G = _measure(rng, k, d, family)
    c = rng.uniform(0, 1, size=d) if center else None
    dend = build_dendrogram(G, family, center=c)
    for t, lev in enumerate(dend.levels):
        assert lev.n_atoms == k - t
        assert lev.satisfies_reference_convention(atol=0.0)
        # masses add: every level sums to 1 and each merged atom carries the mass of its leaves
        assert np.isclose(dend.masses[t].sum(), 1.0, rtol=1e-12)
        for i, leaves in enumerate(dend.members[t]):
            assert np.isclose(dend.masses[t][i], dend.masses[0][list(leaves)].sum(), rtol=1e-12)
    assert dend.linkage.shape == (k - 1, 4) and is_valid_linkage(dend.linkage)
    assert dend.linkage[-1, 3] == k and np.all(dend.heights >= 0)
    assert sorted(sum(dend.members[-1], ())) == list(range(k))


def test_merge_pair_adds_masses_exactly_and_averages_by_mass():
    rng = np.random.default_rng(1)
    G = _measure(rng, 4, 2)
    M = merge_pair(G, 1, 3)
    p = np.exp(G.beta0)
    assert M.n_atoms == 3
    assert np.isclose(np.exp(M.beta0).sum(), p.sum(), rtol=1e-14)
    w = p[[1, 3]] / p[[1, 3]].sum()
    assert np.allclose(M.eta[1], w[0] * G.eta[1] + w[1] * G.eta[3])
    assert np.allclose(M.beta1[1], w[0] * G.beta1[1] + w[1] * G.beta1[3])
    assert np.allclose(M.eta[[0, 2]], G.eta[[0, 2]])


@given(seed=st.integers(0, 2**31 - 1), d=st.integers(1, 3))
def test_merging_two_atoms_with_the_same_gate_slope_keeps_the_mean_function(seed, d):
    rng = np.random.default_rng(seed)
    G = _measure(rng, 4, d)
    b1 = G.beta1.copy()
    b1[2] = b1[0]  # atoms 0 and 2 share their gate slope; experts differ
    G = MixingMeasure(G.beta0, b1, G.eta)
    X = rng.uniform(-1, 1, size=(200, d))
    M = merge_pair(G, 0, 2)
    assert np.allclose(mean_function(X, M), mean_function(X, G), rtol=1e-10, atol=1e-10)
    # and a merge of atoms with different slopes does change it (the rule says nothing there)
    M2 = merge_pair(G, 0, 1)
    assert not np.allclose(mean_function(X, M2), mean_function(X, G), rtol=1e-6)


def test_every_level_of_the_tree_keeps_the_mean_function_when_all_slopes_agree():
    rng = np.random.default_rng(3)
    G = _measure(rng, 5, 1)
    G = MixingMeasure(G.beta0, np.zeros_like(G.beta1), G.eta)  # plain mixture of regressions
    X = rng.uniform(0, 1, size=(100, 1))
    dend = build_dendrogram(G)
    for lev in dend.levels:
        assert np.allclose(mean_function(X, lev), mean_function(X, G), rtol=1e-10, atol=1e-10)


def test_two_near_identical_atoms_merge_first():
    truth_like = MixingMeasure(np.array([-0.5, 0.3, -0.2, 0.0]), np.array([[2.0], [-1.0], [-1.0 + 1e-3], [0.0]]),
                               np.array([[1.0, 0.0, 0.2], [-2.0, 1.0, 0.3], [-2.0 + 1e-3, 1.0 - 1e-3, 0.3], [0.5, 3.0, 0.5]]))
    for center in (None, np.array([0.5])):
        dend = build_dendrogram(truth_like, center=center)
        assert tuple(dend.linkage[0, :2]) == (1.0, 2.0)
        assert dend.heights[0] < 1e-3 < 0.1 < dend.heights[1]
        assert dend.members[1] == ((0,), (1, 2), (3,))


def test_dissimilarity_follows_the_gaussian_exponents():
    G = MixingMeasure(np.log(np.array([0.5, 0.5])), np.array([[1.0], [0.0]]),
                      np.array([[3.0, 2.0, 0.4], [0.0, 0.0, 0.1]]))
    # p_i p_j / (p_i + p_j) = 0.25; |dbeta1|^2 + |da| + |db|^2 + |dsigma2| = 1 + 3 + 4 + 0.3
    assert np.isclose(dissimilarity(G, 0, 1, "gaussian"), 0.25 * 8.3)
    R = MixingMeasure(G.beta0, G.beta1, G.eta[:, :2])
    assert np.isclose(dissimilarity(R, 0, 1, "regression"), 0.25 * (1 + 9 + 4))


def test_bad_input_is_a_clear_error():
    G = _measure(np.random.default_rng(0), 3)
    with pytest.raises(ValueError, match="family"):
        build_dendrogram(G, "cosine")
    with pytest.raises(ValueError, match="eta"):
        build_dendrogram(G, "regression")
    with pytest.raises(ValueError, match="non-finite"):
        build_dendrogram(MixingMeasure(G.beta0 * np.nan, G.beta1, G.eta))
    with pytest.raises(ValueError, match="one measure at a time"):
        build_dendrogram(G.expand(2))
    with pytest.raises(ValueError, match="at least 2"):
        build_dendrogram(MixingMeasure(G.beta0[:1], G.beta1[:1], G.eta[:1]))
    with pytest.raises(ValueError, match="center"):
        build_dendrogram(G, center=[0.0, 1.0])


def test_the_tree_draws(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    dend = build_dendrogram(_measure(np.random.default_rng(2), 4))
    ax = plot_dendrogram(dend, title="t")
    assert len(ax.get_xticklabels()) == 4


def test_masses_that_underflow_exp_merge_at_height_zero_not_nan():
    # a dead atom (beta0 ~ -800 at the centre) next to another: exp(beta0) is 0 for both
    G = MixingMeasure(np.array([-900.0, -800.0, 0.0]), np.zeros((3, 1)),
                      np.array([[1.0, 0.0, 0.1], [2.0, 0.0, 0.2], [0.0, 1.0, 0.3]]))
    assert dissimilarity(G, 0, 1) == 0.0
    dend = build_dendrogram(G)
    assert np.all(np.isfinite(dend.heights)) and tuple(dend.linkage[0, :2]) == (0.0, 1.0)

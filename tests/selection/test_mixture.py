"""The plain location-mixture example (Do et al. 2024): EM optimum, merge rule, DSC, bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import minimize
from scipy.special import logsumexp

from moestat.selection.mixture import (ExampleConfig, dsc_scores, fit_location_mixture, mixture_dendrogram,
                                       mixture_loglik, run_replicate, sample_location_mixture, wasserstein)


def _streams(seed, S):
    return [np.random.SeedSequence(seed, spawn_key=(s,)) for s in range(S)]


@given(seed=st.integers(0, 2**31 - 1), k=st.integers(2, 7), d=st.integers(1, 3))
def test_every_level_keeps_total_mass_and_the_mixture_mean(seed, k, d):
    from scipy.cluster.hierarchy import is_valid_linkage

    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(k))
    mu = rng.normal(scale=3.0, size=(k, d))
    dend = mixture_dendrogram(w, mu)
    mean0 = w @ mu
    for t, (wt, mt) in enumerate(dend.levels):
        assert wt.size == k - t and mt.shape == (k - t, d)
        assert np.isclose(wt.sum(), 1.0, rtol=0, atol=1e-12)
        np.testing.assert_allclose(wt @ mt, mean0, rtol=0, atol=1e-10)
        for i, leaves in enumerate(dend.members[t]):  # each merged atom carries its leaves' mass and barycentre
            assert np.isclose(wt[i], w[list(leaves)].sum(), rtol=1e-12)
            np.testing.assert_allclose(mt[i], w[list(leaves)] @ mu[list(leaves)] / w[list(leaves)].sum(), atol=1e-10)
    assert is_valid_linkage(dend.linkage) and dend.linkage[-1, 3] == k and np.all(dend.heights >= 0)


def test_two_near_identical_atoms_merge_first_at_the_papers_height():
    w = np.array([0.2, 0.3, 0.25, 0.25])
    mu = np.array([[0.0, 0.0], [5.0, 0.0], [5.0 + 1e-3, 0.0], [0.0, 7.0]])
    dend = mixture_dendrogram(w, mu)
    assert set(dend.linkage[0, :2]) == {1.0, 2.0} and dend.members[1] == ((0,), (1, 2), (3,))
    # d(i, j) = p_i p_j / (p_i + p_j) ||theta_i - theta_j||^2
    assert np.isclose(dend.heights[0], 0.3 * 0.25 / 0.55 * 1e-6, rtol=1e-6)
    np.testing.assert_allclose(dend.level(3)[1][1], (0.3 * mu[1] + 0.25 * mu[2]) / 0.55)


def test_em_reaches_the_maximum_found_by_an_independent_optimiser():
    rng = np.random.default_rng(3)
    X = sample_location_mixture(300, [0.4, 0.6], [[-1.5, 0.0], [1.5, 0.5]], rng)
    fit = fit_location_mixture(X, 2, _streams(1, 3), tol=1e-12, max_iter=20000)
    assert fit.status == "tol" and fit.converged

    def nll(z):  # weights by a logit, means free: an unconstrained problem for BFGS, with its gradient
        a, mu = z[0], z[1:].reshape(2, 2)
        logw = np.array([a, 0.0]) - np.logaddexp(a, 0.0)
        lj = logw - 0.5 * ((X[:, None, :] - mu[None]) ** 2).sum(-1) - np.log(2 * np.pi)
        ll = logsumexp(lj, axis=1)
        r = np.exp(lj - ll[:, None])
        g_mu = -np.einsum("nk,nkd->kd", r, X[:, None, :] - mu[None])
        g_a = -(r[:, 0] - np.exp(logw[0])).sum()
        return -ll.sum(), np.concatenate([[g_a], g_mu.ravel()])

    z0 = np.array([0.0, -1.0, -1.0, 1.0, 1.0])  # not EM's start (EM starts at data points)
    res = minimize(nll, z0, jac=True, method="BFGS", options={"gtol": 1e-7})
    assert res.success and np.abs(res.jac).max() < 1e-6
    assert np.isclose(fit.loglik, -res.fun, rtol=0, atol=1e-6)
    order = np.argsort(fit.means[:, 0])
    ref_mu = res.x[1:].reshape(2, 2)
    ref_w = np.exp(np.array([res.x[0], 0.0]) - np.logaddexp(res.x[0], 0.0))
    ro = np.argsort(ref_mu[:, 0])
    np.testing.assert_allclose(fit.means[order], ref_mu[ro], atol=1e-4)
    np.testing.assert_allclose(fit.weights[order], ref_w[ro], atol=1e-4)
    assert np.isclose(fit.loglik, mixture_loglik(X, fit.weights, fit.means), rtol=1e-12)


@pytest.mark.slow
def test_dsc_picks_k_star_on_a_large_well_separated_sample():
    rng = np.random.default_rng(11)
    X = sample_location_mixture(3000, [0.5, 0.5], [[-4.0], [4.0]], rng)
    fit = fit_location_mixture(X, 4, _streams(5, 2), tol=1e-8, max_iter=3000)
    dend = mixture_dendrogram(fit.weights, fit.means)
    scores = dsc_scores(dend, X)
    assert scores["k_hat"] == 2 and scores["k_hat_rescaled"] == 2
    assert list(scores["k"]) == [4, 3, 2]
    # the merged level k* is close to the truth although the 4 atoms were over-fitted
    w2, m2 = dend.level(2)
    assert wasserstein(w2, m2, [0.5, 0.5], [[-4.0], [4.0]], 1) < 0.1


def test_wasserstein_of_known_measures():
    assert wasserstein([1.0], [[0.0, 0.0]], [1.0], [[3.0, 4.0]], 1) == pytest.approx(5.0)
    assert wasserstein([0.5, 0.5], [[0.0], [1.0]], [0.5, 0.5], [[1.0], [0.0]], 2) == pytest.approx(0.0, abs=1e-12)
    assert wasserstein([0.5, 0.5], [[0.0], [2.0]], [1.0], [[0.0]], 2) == pytest.approx(np.sqrt(2.0))


def test_a_replicate_does_not_depend_on_what_ran_before():
    cfg = ExampleConfig(n_starts=2, tol=1e-8, max_iter=300)
    a = run_replicate(cfg, 60, 1)
    run_replicate(cfg, 60, 0)
    b = run_replicate(cfg, 60, 1)
    assert a["k_hat"] == b["k_hat"] and a["loglik"] == b["loglik"] and a["loss"] == b["loss"]
    assert set(a["status"]) == {"1", "2", "3", "4", "5"} and len(a["start_status"]["5"]) == 2


def test_bad_input_is_a_clear_value_error():
    with pytest.raises(ValueError, match="K_bar must be an integer > k\\* = 3"):
        ExampleConfig(k_bar=3)
    with pytest.raises(ValueError, match="K_bar"):
        ExampleConfig(k_bar=2)
    with pytest.raises(ValueError, match="at least 2 atoms"):
        mixture_dendrogram([1.0], [[0.0]])
    with pytest.raises(ValueError, match="sum to 1"):
        mixture_dendrogram([0.5, 0.2], [[0.0], [1.0]])
    with pytest.raises(ValueError, match="non-finite"):
        mixture_dendrogram([0.5, 0.5], [[0.0], [np.nan]])
    with pytest.raises(ValueError, match="k must be an integer in 1..n=3"):
        fit_location_mixture(np.zeros((3, 1)), 4, _streams(0, 1))


def test_a_start_stopped_by_max_iter_is_reported_not_dropped():
    rng = np.random.default_rng(2)
    X = sample_location_mixture(200, [0.5, 0.5], [[-1.0], [1.0]], rng)
    fit = fit_location_mixture(X, 3, _streams(4, 2), tol=1e-12, max_iter=3)
    assert fit.status == "max_iter" and not fit.converged and fit.n_iter == 3
    assert fit.start_status == ("max_iter", "max_iter") and len(fit.start_loglik) == 2
    assert fit.loglik == max(fit.start_loglik)


@pytest.mark.slow
def test_merged_loss_figure_without_a_fitted_rate_says_why_and_draws_no_empty_legend(tmp_path, monkeypatch):
    """With fewer than three sample sizes no rate is fitted: the panel says so (the summary's reason)
    instead of calling an empty legend (a matplotlib warning on the user's screen)."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from moestat.selection.summary import _plot_merged_loss

    reason = "2 sample sizes with >= 2 losses (3 needed)"
    summary = {"rates": {"3": {"D1_merged": {"slope": None, "reason": reason}, "D2_over": {"slope": None, "reason": reason}}}}
    records = [{"n": n, "per_kbar": {"3": {"D1_merged": 0.1 * r + 0.2, "D2_over": 0.3 + 0.1 * r}}} for n in (100, 200)
               for r in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        path = _plot_merged_loss(plt, summary, records, [3], [100, 200], tmp_path)
    assert path.is_file() and path.stat().st_size > 0
    axes = []  # the panel's text, read back from a second draw whose axes are kept
    orig = plt.subplots

    def keep(*a, **k):
        f, ax = orig(*a, **k)
        axes.append(ax)
        return f, ax

    monkeypatch.setattr(plt, "subplots", keep)
    _plot_merged_loss(plt, summary, records, [3], [100, 200], tmp_path)
    title = axes[0][0][0].get_legend().get_title().get_text()
    assert title.startswith("no rate fitted") and title.count(reason) == 2
    labels = axes[0][0][0].get_legend_handles_labels()[1]
    assert labels == ["merged to k*, D1: replicates", "unmerged, D2: replicates"]

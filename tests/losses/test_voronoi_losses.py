"""Voronoi losses, scenarios and the regression error (Nguyen et al. (2024), eqs. (5), (13), (16))."""

import itertools
import math

import numpy as np
import pytest

from moestat import MixingMeasure, ParameterBox
from moestat.losses import (
    cell_parameter_errors,
    cell_terms,
    direction_only,
    regression_l2_error,
    voronoi_cells,
    voronoi_loss,
)
from moestat.data.synthetic import default_scenario, draw_truth, make_scenario


@pytest.fixture
def truth():
    return default_scenario().truth


def test_loss_zero_at_truth_and_atom_order_invariant(truth):
    rng = np.random.default_rng(0)
    fitted = MixingMeasure(truth.beta0 + 0.01, truth.beta1 + 0.02 * rng.normal(size=truth.beta1.shape), truth.eta - 0.03)
    for loss in ("D1", "D2", "D3"):
        assert voronoi_loss(truth, truth, loss) == 0.0
        base = voronoi_loss(fitted, truth, loss, k_active=2)
        for perm in itertools.permutations(range(3)):
            assert voronoi_loss(fitted.permute(perm), truth, loss, k_active=2) == pytest.approx(base, rel=1e-13)


def test_d3_by_hand():
    truth = MixingMeasure(np.array([0.0, 0.0]), np.array([[1.0, 0.0], [0.0, 0.0]]), np.zeros((2, 3)))
    fitted = MixingMeasure(np.array([math.log(2.0), 0.0]), np.array([[1.0, 0.1], [0.0, 0.0]]), np.array([[0.0, 0.0, 0.2], [0.0, 0.0, 0.0]]))
    # cell 0: exp(b0)=2 -> 2*(0.1 + 0.2) + |2 - 1| = 1.6 ; cell 1: 0
    assert voronoi_loss(fitted, truth, "D3") == pytest.approx(1.6)
    assert voronoi_loss(fitted, truth, "D1", r=2) == pytest.approx(2 * (0.01 + 0.04) + 1.0)


def test_d2_uses_squares_in_multi_atom_cells():
    truth = MixingMeasure(np.array([0.0, 0.0]), np.array([[1.0, 0.0], [0.0, 0.0]]), np.zeros((2, 3)))
    half = math.log(0.5)
    fitted = MixingMeasure(
        np.array([half, half, 0.0]),
        np.array([[1.1, 0.0], [0.9, 0.0], [0.0, 0.0]]),
        np.zeros((3, 3)),
    )
    t = cell_terms(fitted, truth, "D2")
    assert t["sizes"].tolist() == [2, 1]
    assert voronoi_loss(fitted, truth, "D2") == pytest.approx(0.5 * 0.01 + 0.5 * 0.01)
    errs = cell_parameter_errors(fitted, truth)
    assert errs["multi"] == pytest.approx(0.1) and errs["single"] == pytest.approx(0.0)


def test_top_k_sum_equals_max_over_k_subsets(truth):
    rng = np.random.default_rng(1)
    for _ in range(20):
        fitted = MixingMeasure(truth.beta0 + rng.normal(0, 0.3, 3), truth.beta1 + rng.normal(0, 0.3, (3, 4)), truth.eta + rng.normal(0, 0.3, (3, 5)))
        terms = cell_terms(fitted, truth, "D3")["terms"]
        for K in (1, 2, 3):
            brute = max(sum(terms[list(s)]) for s in itertools.combinations(range(3), K))
            assert voronoi_loss(fitted, truth, "D3", k_active=K) == pytest.approx(brute)


def test_empty_cell_counts_its_true_mass(truth):
    # every fitted atom on true atom 0: cells 1, 2 empty and contribute exp(beta0*_j)
    fitted = MixingMeasure(truth.beta0[[0, 0, 0]], truth.beta1[[0, 0, 0]], truth.eta[[0, 0, 0]])
    t = cell_terms(fitted, truth, "D2")
    assert t["sizes"].tolist() == [3, 0, 0]
    assert t["terms"][1:] == pytest.approx(np.exp(truth.beta0[1:]))


def test_batched_loss_matches_loop(truth):
    rng = np.random.default_rng(2)
    batch = MixingMeasure(truth.beta0 + rng.normal(0, 0.1, (5, 3)), truth.beta1 + rng.normal(0, 0.1, (5, 3, 4)), truth.eta + rng.normal(0, 0.1, (5, 3, 5)))
    out = voronoi_loss(batch, truth, "D2", k_active=2)
    assert out.shape == (5,)
    assert out == pytest.approx([voronoi_loss(batch[r], truth, "D2", k_active=2) for r in range(5)])


def test_direction_only_ignores_router_norms(truth):
    scaled = MixingMeasure(truth.beta0, truth.beta1 * np.array([3.0, 0.5, 1.0])[:, None], truth.eta)
    assert voronoi_loss(scaled, truth, "D1") > 0.1
    assert voronoi_loss(scaled, truth, "D1", direction=True) == pytest.approx(0.0, abs=1e-14)
    assert np.allclose(np.linalg.norm(direction_only(truth).beta1[:-1], axis=1), 1.0)


def test_cells_use_omega_not_beta0(truth):
    fitted = MixingMeasure(truth.beta0 + np.array([5.0, -5.0, 0.0]), truth.beta1, truth.eta)
    assert voronoi_cells(fitted, truth).tolist() == [0, 1, 2]


def test_unknown_loss_and_metric_rejected(truth):
    with pytest.raises(ValueError, match="unknown Voronoi loss"):
        voronoi_loss(truth, truth, "D9")
    with pytest.raises(ValueError, match="metric"):
        voronoi_loss(truth, truth, "D3", metric="manhattan")
    with pytest.raises(ValueError, match="r must be"):
        voronoi_loss(truth, truth, "D1", r=0.5)


def test_regression_error_zero_at_truth_positive_elsewhere():
    s = default_scenario()
    X = s.holdout(512)
    assert regression_l2_error(s.fit_model, s.truth, s.model, s.truth, X) == pytest.approx(0.0, abs=1e-15)
    moved = MixingMeasure(s.truth.beta0, s.truth.beta1, s.truth.eta + 0.1)
    err = regression_l2_error(s.fit_model, moved.expand(2), s.model, s.truth, X)
    assert err.shape == (2,) and np.all(err > 0.05)


def test_scenario_sampling_is_reproducible_and_seed_dependent():
    s = default_scenario("perturbed", "exact")
    X1, Y1 = s.sample(200, np.random.SeedSequence(7))
    X2, Y2 = s.sample(200, np.random.SeedSequence(7))
    X3, _ = s.sample(200, np.random.SeedSequence(8))
    assert np.array_equal(X1, X2) and np.array_equal(Y1, Y2)
    assert not np.array_equal(X1, X3)
    assert X1.min() >= -1 and X1.max() <= 1
    # the noise has the scenario's variance
    X, Y = s.sample(20000, 3)
    assert np.var(Y - s.regression_function(X)) == pytest.approx(s.noise_var, rel=0.05)


def test_sample_replicates_is_successive_samples_from_one_stream():
    s = default_scenario("perturbed", "exact")
    X, Y = s.sample_replicates(50, 3, 11)
    assert X.shape == (3, 50, s.d) and Y.shape == (3, 50)
    rng = np.random.default_rng(11)
    for r in range(3):
        Xr, Yr = s.sample(50, rng)
        assert np.array_equal(X[r], Xr) and np.array_equal(Y[r], Yr)
    with pytest.raises(ValueError, match="n_rep"):
        s.sample_replicates(50, 0, 11)
    with pytest.raises(ValueError, match="no global randomness"):
        s.sample(50, None)


def test_routers_share_truth_and_data():
    a, b = default_scenario("perturbed"), default_scenario("cosine")
    assert np.array_equal(a.truth.beta1, b.truth.beta1)
    Xa, _ = a.sample(50, 1)
    Xb, _ = b.sample(50, 1)
    assert np.array_equal(Xa, Xb)
    assert b.router == "cosine" and a.router == "perturbed"


def test_over_specified_defaults():
    s = make_scenario("perturbed", "over")
    assert (s.k_true, s.k_fit, s.setting) == (3, 4, "over")
    s2 = make_scenario("perturbed", "over", k_active=2)
    assert s2.k_active_fit == 3  # Proposition 1 minimum K + 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(router="softmax"), "unknown router"),
        (dict(setting="under"), "unknown setting"),
        (dict(tau=-1.0), "tau"),
        (dict(k_active=5), "k_active"),
        (dict(expert="swish"), "unknown expert"),
        (dict(d=0), "d must be"),
        (dict(noise_var=0.0), "noise_var"),
        (dict(setting="over", k_fit=3), "k_fit"),
        (dict(setting="over", k_active=2, k_active_fit=5), "k_active_fit"),
    ],
)
def test_make_scenario_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_scenario(**kwargs)


def test_truth_is_well_separated_and_follows_convention():
    G = draw_truth(6, 4, np.random.default_rng(5))
    assert G.satisfies_reference_convention()
    u = G.beta1[:-1] / np.linalg.norm(G.beta1[:-1], axis=1, keepdims=True)
    c = u @ u.T
    np.fill_diagonal(c, -1)
    assert c.max() <= math.cos(math.radians(40)) + 1e-12
    assert ParameterBox().contains(G)


def test_mixing_measure_roundtrip_and_normalise(truth):
    assert MixingMeasure.from_dict(truth.to_dict()).to_dict() == truth.to_dict()
    shifted = MixingMeasure(truth.beta0 + 2.5, truth.beta1, truth.eta)
    assert np.allclose(shifted.normalised().beta0, truth.beta0)
    with pytest.raises(ValueError, match="inconsistent"):
        MixingMeasure(np.zeros(2), np.zeros((3, 2)), np.zeros((3, 3)))


def test_param_multi_is_the_mass_weighted_error_that_d2_bounds():
    """Issue 33: a shared cell's error is the mass-weighted root mean square, bounded by D2; an atom
    whose mass vanishes far from the truth does not set it (an unweighted maximum would be 1.0)."""
    truth = MixingMeasure(np.array([0.0, 0.0]), np.array([[1.0, 0.0], [0.0, 0.0]]), np.zeros((2, 3)))
    fitted = MixingMeasure(
        np.array([0.0, -30.0, 0.0]),  # atom 1: mass exp(-30), 0.5 away from true atom 0 (its cell)
        np.array([[1.01, 0.0], [1.0, 0.5], [0.0, 0.0]]),
        np.zeros((3, 3)),
    )
    assert cell_terms(fitted, truth, "D2")["sizes"].tolist() == [2, 1]
    w = np.exp([0.0, -30.0])
    want = math.sqrt((w[0] * 0.01**2 + w[1] * 0.5**2) / w.sum())
    errs = cell_parameter_errors(fitted, truth)
    assert errs["multi"] == pytest.approx(want, rel=1e-12) and errs["multi"] < 0.011
    # by hand with comparable masses: 2/3 of the mass at 0.1, 1/3 at 0.4
    fitted = MixingMeasure(np.array([math.log(2.0), 0.0, 0.0]), np.array([[1.1, 0.0], [1.0, 0.4], [0.0, 0.0]]),
                           np.zeros((3, 3)))
    assert cell_parameter_errors(fitted, truth)["multi"] == pytest.approx(math.sqrt((2 * 0.01 + 0.16) / 3), rel=1e-12)
    # bounded by D2 over the cell mass (power-mean inequality with r = 2)
    d2 = voronoi_loss(fitted, truth, "D2")
    assert cell_parameter_errors(fitted, truth)["multi"] ** 2 <= d2 / 3.0 + 1e-15


def test_the_gaussian_moe_param_multi_is_mass_weighted_too():
    from moestat.data.gaussian_scenarios import gaussian_voronoi

    # d = 1, eta = (a, b, sigma^2); true atoms far apart; fitted atoms 0 and 1 share true atom 0's cell
    truth = MixingMeasure(np.array([0.0, 0.0]), np.array([[1.0], [0.0]]), np.array([[1.0, 0.0, 0.5], [-3.0, 2.0, 0.5]]))
    fitted = MixingMeasure(np.array([0.0, -30.0, 0.0]), np.array([[1.0], [1.0], [0.0]]),
                           np.array([[1.01, 0.0, 0.5], [1.5, 0.0, 0.5], [-3.0, 2.0, 0.5]]))
    out = gaussian_voronoi(fitted, truth, "D2", shift=False)
    assert out["param_multi"][0] < 0.011  # unweighted, the far atom of mass e^-30 would give 0.5

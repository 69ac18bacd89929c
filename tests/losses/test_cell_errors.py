"""Theorem 5's mass-weighted cell errors and the PDE (4) split of the beta1 error, against hand computations."""

import numpy as np
import pytest

from moestat.losses.cell_errors import beta1_split, weighted_cell_errors
from moestat.model.mixing import MixingMeasure


def _truth():
    # two true atoms plus the reference (beta0 = 0, beta1 = 0), d = 2, eta of length 3
    beta0 = np.array([0.3, -0.2, 0.0])
    beta1 = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    eta = np.array([[0.5, 0.1, 0.0], [-0.5, 0.2, 0.1], [0.0, 0.0, 1.0]])
    return MixingMeasure(beta0, beta1, eta)


def test_exact_fit_has_zero_errors_and_no_multi_cell():
    T = _truth()
    w = weighted_cell_errors(T, T)
    assert w["weighted_single"] == 0.0 and np.isnan(w["weighted_multi"])
    s = beta1_split(T, T)
    assert s["beta1_radial"] == 0.0 and s["beta1_direction"] == 0.0


def test_split_atom_weighted_by_mass_and_squared():
    T = _truth()
    # atom 0 split into two halves of its mass, each moved by 0.01 along eta; atom 1 moved by 0.02
    beta0 = np.array([0.3 + np.log(0.5), 0.3 + np.log(0.5), -0.2, 0.0])
    beta1 = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    eta = T.eta[[0, 0, 1, 2]].copy()
    eta[0, 0] += 0.01
    eta[1, 0] -= 0.01
    eta[2, 1] += 0.02
    G = MixingMeasure(beta0, beta1, eta)
    w = weighted_cell_errors(G, T)
    # multi cell: 2 * (exp(0.3)/2) * 0.01^2; single cells: exp(-0.2) * 0.02 + the exact reference atom
    assert w["weighted_multi"] == pytest.approx(np.exp(0.3) * 1e-4, rel=1e-12)
    assert w["weighted_single"] == pytest.approx(np.exp(-0.2) * 0.02, rel=1e-12)


def test_radial_and_direction_parts_separate():
    T = _truth()
    G = MixingMeasure(T.beta0.copy(), T.beta1 * np.array([[3.0], [1.0], [1.0]]), T.eta.copy())  # atom 0 three times longer
    s = beta1_split(G, T)
    assert s["beta1_radial"] == pytest.approx(2.0) and s["beta1_direction"] == pytest.approx(0.0, abs=1e-15)
    rot = T.beta1.copy()
    rot[1] = [2.0 * np.sin(0.1), 2.0 * np.cos(0.1)]  # atom 1 rotated by 0.1 rad, same length
    s = beta1_split(MixingMeasure(T.beta0.copy(), rot, T.eta.copy()), T)
    assert s["beta1_radial"] == pytest.approx(0.0, abs=1e-15)
    assert s["beta1_direction"] == pytest.approx(2 * np.sin(0.05), rel=1e-12)


def test_batched_matches_one_by_one():
    T = _truth()
    rng = np.random.default_rng(0)
    Gs = [MixingMeasure(T.beta0 + 0.1 * rng.standard_normal(3), T.beta1 + 0.1 * rng.standard_normal((3, 2)),
                        T.eta + 0.1 * rng.standard_normal((3, 3))) for _ in range(4)]
    B = MixingMeasure.stack(Gs)
    wb, sb = weighted_cell_errors(B, T), beta1_split(B, T)
    for i, G in enumerate(Gs):
        w, s = weighted_cell_errors(G, T), beta1_split(G, T)
        for k in w:
            assert np.allclose(wb[k][i], w[k], equal_nan=True)
        for k in s:
            assert sb[k][i] == pytest.approx(s[k])

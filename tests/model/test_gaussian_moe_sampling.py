"""Drawing ``y`` from the Gaussian MoE (:func:`moestat.model.gaussian_moe.sample_y`), written column by
column (issue 36), against the row-wise form it replaced: the same draws, bit for bit; and the mean
function of two atoms against the softmax reduction it replaced (to rounding).

Bit equality is what the mathematics of the rewrite guarantees on any machine: the maximum is exact,
``exp`` is applied to the same differences (for two atoms only to the one that is not ``0``:
``exp(0) = 1`` exactly), and every sum, division and running sum adds the same terms in the same
order; the uniform and normal draws are taken in the same order from the generator.
"""

import numpy as np
import pytest
import torch

from moestat.data.gaussian_scenarios import model1_scenario
from moestat.model.gaussian_moe import sample_y, split_eta
from moestat.model.mixing import MixingMeasure


def _row_wise(X, G, rng):
    """The former ``sample_y``: reductions along each row of the ``[n, k]`` gate probabilities."""
    G = G.numpy()
    X = np.asarray(X, dtype=np.float64)
    a, b, s2 = split_eta(G.eta)
    logits = X @ G.beta1.T + G.beta0
    pi = np.exp(logits - logits.max(1, keepdims=True))
    pi /= pi.sum(1, keepdims=True)
    u = rng.random(X.shape[0])
    z = np.minimum((u[:, None] > np.cumsum(pi, axis=1)).sum(1), G.n_atoms - 1)
    mu = np.einsum("nd,nd->n", X, a[z]) + b[z]
    return mu + np.sqrt(s2[z]) * rng.standard_normal(X.shape[0])


def _measure(k: int, d: int, rng: np.random.Generator, scale: float) -> MixingMeasure:
    eta = np.concatenate([rng.normal(size=(k, d + 1)), rng.uniform(0.01, 1.0, size=(k, 1))], axis=1)
    return MixingMeasure(scale * rng.normal(size=k), scale * rng.normal(size=(k, d)), eta)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("d", [1, 3])
def test_column_wise_draws_equal_the_row_wise_ones(k, d):
    rng = np.random.default_rng(100 * k + d)
    for trial, n in enumerate((1, 2, 7, 1000, 4099)):
        for scale in (0.1, 5.0, 60.0):  # flat, moderate and saturated gates
            G = _measure(k, d, rng, scale)
            X = rng.uniform(size=(n, d))
            want = _row_wise(X, G, np.random.default_rng(trial))
            got = sample_y(X, G, np.random.default_rng(trial))
            np.testing.assert_array_equal(got, want)


def test_model1_data_sets_are_unchanged():
    sc = model1_scenario("exact")
    for seed in range(3):
        X = sc.sample_x(5000, np.random.default_rng(seed))
        np.testing.assert_array_equal(sample_y(X, sc.truth, np.random.default_rng(seed)),
                                      _row_wise(X, sc.truth, np.random.default_rng(seed)))


def test_the_mean_function_of_two_atoms_is_the_softmax_reduction_to_rounding():
    # mean_function takes the gate of two atoms as the logistic function of the logits' difference
    # (issue 36): pi_0 = sigmoid(l_0 - l_1) is softmax's pi_0 in exact arithmetic, so the two forms
    # differ by rounding only -- a few units of the last place of the terms pi_i mu_i, here bounded
    # by 1e-14 of their absolute sum (the sum itself may cancel), saturated gates included
    from moestat.model.gaussian_moe import mean_function

    rng = np.random.default_rng(7)
    for R, n, d, scale in ((1, 1, 1, 5.0), (3, 1000, 1, 5.0), (2, 777, 3, 5.0), (2, 500, 1, 400.0)):
        X = rng.uniform(size=(R, n, d))
        G = MixingMeasure(scale * rng.normal(size=(R, 2)), 4 * scale * rng.normal(size=(R, 2, d)),
                          rng.normal(size=(R, 2, d + 2)))
        Xt = torch.as_tensor(X)
        a, b, _ = split_eta(torch.as_tensor(G.eta))
        pi = torch.softmax(Xt @ torch.as_tensor(G.beta1).transpose(-1, -2) + torch.as_tensor(G.beta0).unsqueeze(-2), dim=-1)
        terms = (pi * (Xt @ a.transpose(-1, -2) + b.unsqueeze(-2))).numpy()
        got = mean_function(X, G)
        assert got.shape == (R, n)
        assert np.all(np.abs(got - terms.sum(-1)) <= 1e-14 * np.abs(terms).sum(-1) + 1e-300)


@pytest.mark.parametrize("d", [1, 2])
def test_two_atom_draws_take_one_exponential_per_sample(d, monkeypatch):
    # the two-atom path (issue 36) computes exp of one difference per sample, not of the [n, 2] logits
    # (the draws themselves are checked against the row-wise form above, saturated gates included)
    import moestat.model.gaussian_moe as gm

    sizes = []
    real = np.exp

    def counting_exp(x, *args, **kwargs):
        sizes.append(np.size(x))
        return real(x, *args, **kwargs)

    rng = np.random.default_rng(d)
    G, X = _measure(2, d, rng, 5.0), rng.uniform(size=(300, d))
    want = _row_wise(X, G, np.random.default_rng(0))
    monkeypatch.setattr(gm.np, "exp", counting_exp)
    got = sample_y(X, G, np.random.default_rng(0))
    monkeypatch.undo()
    np.testing.assert_array_equal(got, want)
    assert sizes == [300]

"""Drawing ``y`` from the Gaussian MoE (:func:`moestat.model.gaussian_moe.sample_y`), written column by
column (issue 36), against the row-wise form it replaced: the same draws, bit for bit; and the mean
function of two atoms against the reduction it replaced.

Bit equality is what the mathematics of the rewrite guarantees on any machine: the maximum is exact,
``exp`` is applied to the same ``[n, k]`` array, and every sum, division and running sum adds the same
terms in the same order; the uniform and normal draws are taken in the same order from the generator.
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


def test_the_mean_function_of_two_atoms_is_the_former_reduction_bit_for_bit():
    # mean_function writes out the sum over two atoms (issue 36); the reduction it replaced, here
    from moestat.model.gaussian_moe import mean_function

    rng = np.random.default_rng(7)
    for R, n, d in ((1, 1, 1), (3, 1000, 1), (2, 777, 3)):
        X = rng.uniform(size=(R, n, d))
        G = MixingMeasure(5 * rng.normal(size=(R, 2)), 20 * rng.normal(size=(R, 2, d)), rng.normal(size=(R, 2, d + 2)))
        Xt = torch.as_tensor(X)
        a, b, _ = split_eta(torch.as_tensor(G.eta))
        pi = torch.softmax(Xt @ torch.as_tensor(G.beta1).transpose(-1, -2) + torch.as_tensor(G.beta0).unsqueeze(-2), dim=-1)
        want = (pi * (Xt @ a.transpose(-1, -2) + b.unsqueeze(-2))).sum(-1).numpy()
        np.testing.assert_array_equal(mean_function(X, G), want)

"""Decomposition metrics (Krishnamurthy 2023, Ch. 4), error attribution (Krishnamurthy & Watkins 2021) and the regularisers."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from moestat.nn.metrics import (
    count_matrix,
    entropy,
    error_attribution,
    expert_usage,
    gate_sparsity,
    mutual_information,
    softmax_temperature,
    usage_counts,
)
from moestat.nn.regularizers import euclidean_distances, importance_loss, similarity_loss


def test_softmax_temperature_thesis_example():
    # Sec. 5.1 worked example: z = [0.7, 0.2, 0.1].
    np.testing.assert_allclose(softmax_temperature([0.7, 0.2, 0.1], 1.0), [0.4640, 0.2814, 0.2546], atol=5e-5)
    np.testing.assert_allclose(softmax_temperature([0.7, 0.2, 0.1], 3.0), [0.3752, 0.3176, 0.3072], atol=5e-5)
    with pytest.raises(ValueError, match="temperature"):
        softmax_temperature([1.0, 2.0], 0.0)


@pytest.mark.parametrize("M", [2, 3, 5, 10, 15])
def test_metric_maxima_are_log2_M(M):
    uniform = np.full((7, M), 1.0 / M)
    assert gate_sparsity(uniform) == pytest.approx(math.log2(M))
    assert expert_usage(uniform) == pytest.approx(math.log2(M))
    # each expert gets one class exclusively: I(E;Y) = log2 M
    C = np.eye(M, dtype=int) * 11
    assert mutual_information(C) == pytest.approx(math.log2(M))


def test_collapse_and_one_hot():
    one_hot = np.zeros((6, 4))
    one_hot[np.arange(6), [0, 1, 2, 3, 0, 1]] = 1
    assert gate_sparsity(one_hot) == 0.0
    collapsed = np.zeros((6, 4))
    collapsed[:, 2] = 1
    assert expert_usage(collapsed) == 0.0
    C = count_matrix(np.full(6, 2), [0, 1, 2, 3, 4, 5], n_experts=4, n_classes=6)
    assert mutual_information(C) == 0.0  # module collapse: I(E;Y) = 0
    assert usage_counts(np.full(6, 2), 4).tolist() == [0, 0, 6, 0]


def test_hand_computed_values():
    # C = [[2, 1], [0, 1]]: H(E) = H(.75,.25), H(Y) = 1, H(E,Y) = 1.5.
    h_e = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert mutual_information([[2, 1], [0, 1]]) == pytest.approx(h_e + 1.0 - 1.5)
    p = np.array([[0.5, 0.5], [1.0, 0.0]])
    assert gate_sparsity(p) == pytest.approx(0.5)  # (1 + 0) / 2
    assert expert_usage(p) == pytest.approx(-(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25)))
    assert entropy([0.25] * 4) == pytest.approx(2.0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6), st.integers(2, 6))
def test_mi_bounds(seed, M, K):
    rng = np.random.default_rng(seed)
    C = rng.integers(0, 5, size=(M, K))
    C[0, 0] += 1
    mi = mutual_information(C)
    joint = C / C.sum()
    assert -1e-12 <= mi <= min(entropy(joint.sum(1)), entropy(joint.sum(0))) + 1e-9
    # independence (rank-one counts) gives 0
    assert mutual_information(np.outer(rng.integers(1, 5, M), rng.integers(1, 5, K))) == pytest.approx(0.0, abs=1e-12)


def test_metric_input_validation():
    with pytest.raises(ValueError, match="sum"):
        gate_sparsity([[0.2, 0.2]])
    with pytest.raises(ValueError, match="shape"):
        expert_usage([0.5, 0.5])
    with pytest.raises(ValueError, match="same length"):
        count_matrix([0, 1], [0])
    with pytest.raises(ValueError, match="non-negative"):
        mutual_information([[0, 0]])


def test_error_attribution():
    # 4 samples, 2 experts; true classes y; sample 1: selected expert wrong, other right -> gate;
    # sample 2: both wrong -> expert; samples 0 and 3 correct.
    P = np.array([[0, 1], [2, 1], [0, 0], [3, 3]])
    y = np.array([0, 1, 2, 3])
    res = error_attribution(P, y, selected=[0, 0, 1, 1])
    assert (res["errors"], res["gate_errors"], res["expert_errors"]) == (2, 1, 1)
    assert res["gate_error_rate"] == 0.25
    with pytest.raises(ValueError, match="y_pred or selected"):
        error_attribution(P, y)


def test_importance_loss_cv():
    p = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.5, 0.5], [0.5, 0.5]])  # I = [3, 1]
    assert float(importance_loss(p)) == pytest.approx(0.5)  # population std 1 / mean 2
    assert float(importance_loss(p, 0.4, squared=True)) == pytest.approx(0.4 * 0.25)
    assert float(importance_loss(torch.full((5, 3), 1 / 3))) == pytest.approx(0.0, abs=1e-7)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 5), st.integers(2, 9))
def test_similarity_loss_identity(seed, M, N):
    # D = d/(M^2-M) - S/(M-1): L_s = (beta_s + beta_d/(M-1)) mean S - beta_d mean d / (M^2-M).
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, 3, generator=g, dtype=torch.float64)
    z = torch.randn(N, M, generator=g, dtype=torch.float64, requires_grad=True)
    p = torch.softmax(z, -1)
    bs, bd = 0.7, 0.3
    loss = similarity_loss(x, p, bs, bd)
    d = euclidean_distances(x)
    mean_s = ((p @ p.T) * d / M).sum() / (N * N - N)
    expected = (bs + bd / (M - 1)) * mean_s - bd * d.sum() / (N * N - N) / (M * M - M)
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-10, abs=1e-12)
    g1 = torch.autograd.grad(loss, z, retain_graph=True)[0]
    g2 = torch.autograd.grad((bs + bd / (M - 1)) * mean_s, z)[0]
    torch.testing.assert_close(g1, g2)


def test_regulariser_validation():
    with pytest.raises(ValueError, match="shape"):
        importance_loss(torch.ones(3))
    with pytest.raises(ValueError, match="at least 2"):
        similarity_loss(torch.ones(1, 2), torch.full((1, 2), 0.5))

"""Gates and experts against hand-computed values (Nguyen et al. (2024), eqs. (2) and (9))."""

import math

import numpy as np
import pytest
import torch

from moestat import Expert, Gate, gate_scores, gate_weights, top_k_mask

T = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731


def test_linear_scores_by_hand():
    x = T([[1.0, 2.0]])
    b1 = T([[3.0, -1.0], [0.0, 0.0]])
    assert torch.allclose(gate_scores(x, b1, "linear"), T([[1.0, 0.0]]))


def test_cosine_scores_by_hand_and_zero_convention():
    x = T([[3.0, 4.0], [0.0, 0.0]])
    b1 = T([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]])
    s = gate_scores(x, b1, "cosine")
    # first row: cos with e1 = 3/5, zero beta1 -> 0, cos with e2 = 4/5; zero x -> 0 everywhere
    assert torch.allclose(s, T([[0.6, 0.0, 0.8], [0.0, 0.0, 0.0]]))


def test_perturbed_scores_by_hand():
    x = T([[3.0, 4.0]])  # ||x|| = 5
    b1 = T([[0.0, 2.0]])  # ||b1|| = 2
    s = gate_scores(x, b1, "perturbed", tau=(1.0, 0.5))
    assert s.item() == pytest.approx(8.0 / ((2.0 + 1.0) * (5.0 + 0.5)))
    # tau = 0 is the vanilla cosine router
    assert gate_scores(x, b1, "perturbed", tau=0.0).item() == pytest.approx(0.8)


def test_zero_beta1_has_finite_gradient():
    b1 = T([[0.0, 0.0]]).requires_grad_(True)
    x = T([[1.0, -2.0]])
    for kind in ("cosine", "perturbed"):
        s = gate_scores(x, b1, kind, tau=1.0).sum()
        (g,) = torch.autograd.grad(s, b1)
        assert torch.all(torch.isfinite(g))


def test_top_k_selects_on_score_without_bias():
    scores = T([[0.1, 0.5, 0.3]])
    beta0 = T([10.0, 0.0, 0.0])  # a huge bias must not rescue expert 0 from de-selection
    w = gate_weights(scores, beta0, k_active=2)
    assert w[0, 0].item() == 0.0
    expect = torch.softmax(T([0.5, 0.3]), dim=0)
    assert torch.allclose(w[0, 1:], expect)
    assert top_k_mask(scores, 2).tolist() == [[False, True, True]]


def test_dense_weights_are_softmax_with_bias():
    scores = T([[0.1, 0.5, 0.3]])
    beta0 = T([1.0, 0.0, -1.0])
    w = gate_weights(scores, beta0, None)
    assert torch.allclose(w, torch.softmax(scores + beta0, dim=-1))


def test_gate_weights_batched_over_replicates():
    g = Gate("perturbed", tau=1.0, k_active=2)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 7, 4, generator=gen, dtype=torch.float64)
    b1 = torch.randn(3, 5, 4, generator=gen, dtype=torch.float64)
    b0 = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    w = g.weights(x, b0, b1)
    assert w.shape == (3, 7, 5)
    assert torch.allclose(w.sum(-1), torch.ones(3, 7, dtype=torch.float64))
    assert ((w > 0).sum(-1) == 2).all()
    for r in range(3):  # batched == one replicate at a time
        assert torch.allclose(w[r], g.weights(x[r], b0[r], b1[r]))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kind="softplus"), "unknown gate kind"),
        (dict(kind="perturbed", tau=-0.1), "non-negative"),
        (dict(kind="perturbed", tau=(1.0, float("nan"))), "non-negative"),
        (dict(kind="cosine", k_active=0), "k_active"),
    ],
)
def test_gate_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Gate(**kwargs)


def test_k_active_larger_than_k_is_rejected():
    with pytest.raises(ValueError, match="k_active"):
        Gate("linear", k_active=4).weights(T([[1.0]]), T([0.0, 0.0]), T([[1.0], [0.0]]))


@pytest.mark.parametrize(
    "act, fn",
    [
        ("identity", lambda z: z),
        ("relu", lambda z: max(z, 0.0)),
        ("tanh", math.tanh),
        ("sigmoid", lambda z: 1 / (1 + math.exp(-z))),
        ("gelu", lambda z: 0.5 * z * (1 + math.erf(z / math.sqrt(2)))),
    ],
)
def test_experts_by_hand(act, fn):
    x = T([[0.5, -1.0], [2.0, 0.25]])
    eta = T([[1.0, 2.0, -0.5], [-1.0, 0.0, 0.3]])
    out = Expert(act)(x, eta)
    for i in range(2):
        for j in range(2):
            z = float(x[i] @ eta[j, :2] + eta[j, 2])
            assert out[i, j].item() == pytest.approx(fn(z), rel=1e-12, abs=1e-12)


def test_polynomial_expert_and_derivatives_match_autograd():
    x = T([[0.5, -1.0]])
    eta = T([[1.0, 2.0, -0.5]])
    assert Expert("poly", degree=3)(x, eta).item() == pytest.approx((0.5 - 2.0 - 0.5) ** 3)
    z = torch.linspace(-2, 2, 21, dtype=torch.float64, requires_grad=True)
    for act in ("identity", "gelu", "tanh", "sigmoid", "poly"):
        e = Expert(act, degree=3)
        (g,) = torch.autograd.grad(e.phi(z).sum(), z)
        assert torch.allclose(g, e.dphi(z.detach()), atol=1e-12), act


def test_expert_rejects_bad_input():
    with pytest.raises(ValueError, match="activation"):
        Expert("swish")
    with pytest.raises(ValueError, match="degree"):
        Expert("poly", degree=0)
    with pytest.raises(ValueError, match="d \\+ 1"):
        Expert("gelu")(np.zeros((2, 3)), np.zeros((1, 3)))


def test_perturbed_scores_without_the_zero_convention_are_the_quotient():
    """With tau1, tau2 > 0 every denominator is positive, and the score is returned as the plain
    quotient (issue 36: no masking passes); zero inputs and a zero router row included."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(257, 4, generator=g, dtype=torch.float64)
    x[0] = 0.0
    beta1 = torch.randn(3, 4, generator=g, dtype=torch.float64)
    beta1[-1] = 0.0  # the reference atom (A.3)
    for tau in (0.5, (1e-3, 2.0)):
        s = gate_scores(x, beta1, "perturbed", tau)
        t1, t2 = (tau, tau) if isinstance(tau, float) else tau
        nb = torch.linalg.norm(beta1, dim=-1)
        nx = torch.linalg.norm(x, dim=-1, keepdim=True)
        ref = (x @ beta1.T) / ((nb + t1) * (nx + t2))
        assert torch.allclose(s, ref, rtol=1e-15, atol=0.0)
        assert torch.all(s[0] == 0) and torch.all(s[:, -1] == 0)
    # one tau at zero still applies the cosine convention (0 where a norm vanishes)
    s0 = gate_scores(x, beta1, "perturbed", (0.0, 1.0))
    assert torch.all(s0[:, -1] == 0) and torch.isfinite(s0).all()

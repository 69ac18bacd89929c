"""The analytic Jacobian of the LSE against torch.autograd, and PDE (4)."""

import numpy as np
import pytest
import torch

from moestat import Expert, Gate, MixingMeasure, MoEModel
from moestat.estimators import random_init
from moestat.estimators.layout import n_params, pack, unpack
from moestat.estimators.levenberg_marquardt import predict_and_jacobian
from moestat.model.gates import gate_scores


def _smoothed_topk_predict(model, X, beta0, beta1, eta, T):
    """Independent, sample-major oracle of the smoothed Top-K gate (autograd differentiates it).

    Mask ``m_i = sigmoid((s_i - t(x)) / T)`` with ``t(x)`` the midpoint of the K-th and (K+1)-th
    largest scores; weights ``m_i exp(u_i) / sum_j m_j exp(u_j)``, ``u = s + beta0``.
    """
    K = model.gate.k_active
    s = gate_scores(X, beta1, model.gate.kind, model.gate.tau)  # [R, n, k]
    top = torch.topk(s, K + 1, dim=-1).values
    thr = 0.5 * (top[..., K - 1] + top[..., K])
    m = torch.sigmoid((s - thr.unsqueeze(-1)) / T)
    e = m * torch.exp(s + beta0.unsqueeze(-2))
    w = e / e.sum(-1, keepdim=True)
    return (w * model.expert(X, eta)).sum(-1)


def _autograd_jacobian(fun, theta):
    J = torch.autograd.functional.jacobian(fun, theta)  # [R, n, R, P]
    return torch.stack([J[r, :, r, :] for r in range(theta.shape[0])])


def _setup(kind, k_active, activation, k=4, d=3, R=2, n=9, seed=0):
    rng = np.random.default_rng(seed)
    model = MoEModel(Gate(kind, tau=(0.7, 0.4), k_active=k_active), Expert(activation))
    G = MixingMeasure.stack([random_init(k, d, rng, scale_router=1.0, scale_expert=1.0) for _ in range(R)])
    theta = pack(G.torch(), True)
    X = torch.as_tensor(rng.uniform(-1, 1, (R, n, d)))
    return model, theta, X, k, d


@pytest.mark.parametrize("kind", ["linear", "cosine", "perturbed"])
@pytest.mark.parametrize("k_active", [None, 2])
@pytest.mark.parametrize("activation", ["gelu", "identity", "tanh"])
def test_hard_jacobian_matches_autograd(kind, k_active, activation):
    model, theta, X, k, d = _setup(kind, k_active, activation)
    f, J = predict_and_jacobian(model, X, theta, k)
    assert J.shape == (2, 9, n_params(k, d, d + 1, True))

    def fun(t):
        b0, b1, eta = unpack(t, k, d, d + 1, True)
        return model.predict(X, MixingMeasure(b0, b1, eta))

    torch.testing.assert_close(f, fun(theta), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(J, _autograd_jacobian(fun, theta), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("kind", ["linear", "cosine", "perturbed"])
def test_smoothed_topk_jacobian_matches_autograd(kind):
    model, theta, X, k, d = _setup(kind, 2, "gelu", seed=3)
    T = 0.05
    _, J = predict_and_jacobian(model, X, theta, k, temperature=T)

    def fun(t):
        b0, b1, eta = unpack(t, k, d, d + 1, True)
        return _smoothed_topk_predict(model, X, b0, b1, eta, T)

    torch.testing.assert_close(J, _autograd_jacobian(fun, theta), rtol=1e-9, atol=1e-11)


def test_smoothed_gate_tends_to_hard_gate():
    model, theta, X, k, d = _setup("perturbed", 2, "gelu", n=50, seed=5)
    f_hard, _ = predict_and_jacobian(model, X, theta, k, jacobian=False)
    f_soft, _ = predict_and_jacobian(model, X, theta, k, jacobian=False, temperature=1e-6)
    torch.testing.assert_close(f_soft, f_hard, rtol=0, atol=1e-6)


@pytest.mark.parametrize("k_active", [None, 2])
def test_cosine_radial_direction_is_flat(k_active):
    """PDE (4): beta1_i^T dg/dbeta1_i = 0 for the vanilla cosine router, not for tau > 0."""
    for kind, flat in (("cosine", True), ("perturbed", False)):
        model, theta, X, k, d = _setup(kind, k_active, "gelu", seed=7)
        _, J = predict_and_jacobian(model, X, theta, k)
        b0, b1, _ = unpack(theta, k, d, d + 1, True)
        i0 = k - 1
        Jb = J[..., i0 : i0 + (k - 1) * d].reshape(*J.shape[:2], k - 1, d)
        radial = (Jb * b1[:, None, : k - 1, :]).sum(-1)  # [R, n, k-1]
        if flat:
            assert radial.abs().max() < 1e-12
        else:
            assert radial.abs().max() > 1e-4

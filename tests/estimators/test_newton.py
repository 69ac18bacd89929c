"""The Newton toolkit's concave maximiser (moestat.estimators.newton.maximise_concave, issue 33)."""

import numpy as np
import torch
from scipy.optimize import minimize

from moestat.estimators.newton import grad_hess, maximise_concave


def _logistic(X, y, w):
    """Weighted logistic log-likelihood ``[B]`` of ``theta [B, p]`` (an intercept last)."""
    def F(theta):
        z = X @ theta[..., :-1].unsqueeze(-1) + theta[..., -1:].unsqueeze(-1)  # [B, n, 1]
        z = z.squeeze(-1)
        return (w * (y * z - torch.nn.functional.softplus(z))).sum(-1)
    return F


def _terms(F):
    def terms(theta):
        g, H = grad_hess(F, theta)
        return g, -H
    return terms


def test_it_reaches_scipys_maximiser_of_a_weighted_logistic_regression():
    rng = np.random.default_rng(0)
    X = torch.as_tensor(rng.uniform(-1, 1, size=(3, 400, 2)))
    y = torch.as_tensor((rng.uniform(size=(3, 400)) < 0.4).astype(float))
    w = torch.as_tensor(rng.uniform(0.1, 1.0, size=(3, 400)))
    F = _logistic(X, y, w)
    theta, steps, dec = maximise_concave(F, torch.zeros(3, 3, dtype=torch.float64), _terms(F), tol=1e-12)
    assert bool((dec <= 1e-12).all()) and bool((steps >= 2).all())
    for b in range(3):
        Fb = _logistic(X[b:b + 1], y[b:b + 1], w[b:b + 1])
        ref = minimize(lambda v: -float(Fb(torch.as_tensor(v[None]))[0]), np.zeros(3), method="BFGS", options={"gtol": 1e-10})
        np.testing.assert_allclose(theta[b].numpy(), ref.x, atol=1e-5)


def test_a_separated_class_stops_after_max_steps_with_a_finite_increasing_objective():
    # y = 1 exactly where x_0 > 0: the supremum is at infinity (no maximiser); the objective still rises
    rng = np.random.default_rng(1)
    X = torch.as_tensor(rng.uniform(-1, 1, size=(1, 200, 2)))
    y = (X[..., 0] > 0).double()
    F = _logistic(X, y, torch.ones(1, 200, dtype=torch.float64))
    th0 = torch.zeros(1, 3, dtype=torch.float64)
    theta, steps, dec = maximise_concave(F, th0, _terms(F), tol=1e-12, max_steps=6)
    assert int(steps[0]) == 6 and bool(torch.isfinite(theta).all())
    assert float(F(theta)[0]) > float(F(th0)[0]) and float(dec[0]) > 1e-12

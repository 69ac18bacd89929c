"""The Newton polish of the Gaussian-MoE likelihood (moestat.estimators.mle_newton)."""

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from torch.func import grad, hessian

from moestat.data.gaussian_scenarios import model1_scenario
from moestat.estimators.mle import MLEGaussianMoE
from moestat.estimators.mle_newton import loglik, newton_terms, pack, unpack
from moestat.estimators.starts import near_truth_init
from moestat.model.gaussian_moe import log_likelihood
from moestat.model.mixing import MixingMeasure


@pytest.mark.parametrize("d,k", [(1, 2), (1, 3), (2, 4)])
@pytest.mark.parametrize("shared", [False, True])
def test_analytic_gradient_and_hessian_equal_autodiff(d, k, shared):
    # torch.func of the same log-likelihood is the reference; two chunks exercise the accumulation
    g = torch.Generator().manual_seed(10 * d + k)
    B, n, p = 2, 5000, d + 1
    dt = torch.float64
    Xe = torch.cat([torch.rand(B, n, d, generator=g, dtype=dt), torch.ones(B, n, 1, dtype=dt)], -1)
    y = torch.randn(B, n, generator=g, dtype=dt)
    V = torch.randn(B, k, p, generator=g, dtype=dt)
    V[:, -1] = 0
    E = torch.randn(B, k, p, generator=g, dtype=dt)
    s2 = torch.rand(B, k, generator=g, dtype=dt) + 0.3
    if shared:
        s2 = s2[:, :1].expand(-1, k).contiguous()
    ll, gr, H = newton_terms(Xe, y, V, E, s2, shared)
    th = pack(V, E, s2, shared)
    for b in range(B):
        def f(t):
            return loglik(Xe[b : b + 1], y[b : b + 1], *unpack(t[None], k, p, shared))[0]

        torch.testing.assert_close(ll[b], f(th[b]), rtol=1e-12, atol=0)
        torch.testing.assert_close(gr[b], grad(f)(th[b]), rtol=1e-9, atol=1e-9 * float(gr[b].abs().max()))
        Hr = hessian(f)(th[b])
        torch.testing.assert_close(H[b], Hr, rtol=1e-9, atol=1e-9 * float(Hr.abs().max()))


def _over(n, R, seed, k=3):
    sc = model1_scenario("over", k)
    rng = np.random.default_rng(seed)
    XY = [sc.sample(n, rng) for _ in range(R)]
    X, Y = np.stack([a for a, _ in XY]), np.stack([b for _, b in XY])
    init = MixingMeasure.stack([near_truth_init(sc.truth, k, 0.1, rng, n=n, log_last=True) for _ in range(R)])
    return X, Y, init


@pytest.mark.slow
def test_polish_certifies_where_em_crawls_and_scipy_finds_nothing_higher():
    # over-fitted K = 3 (two atoms share a cell): 150 SQUAREM iterations leave EM short of the
    # maximum; the polish reaches the certificate, and a quasi-Newton run of scipy started there
    # (an independent optimiser with autograd gradients) finds no higher likelihood
    X, Y, init = _over(1500, 3, seed=11)
    em = MLEGaussianMoE(3, max_iter=150, accelerate=True, compile=False).fit(X, Y, init=init)
    est = MLEGaussianMoE(3, max_iter=150, accelerate=True, compile=False, polish_iter=100).fit(X, Y, init=init)
    assert "max_iter" in em.status_  # the premise: EM alone did not finish
    assert est.status_ == ["newton"] * 3 and est.converged_.all()
    assert np.all(est.n_newton_ > 0)
    assert np.all(est.loglik_ >= em.loglik_)
    np.testing.assert_allclose(log_likelihood(X, Y, est.params_), est.loglik_, rtol=1e-11)
    k, p = 3, 2
    for r in range(3):
        G = est.params_
        V = torch.tensor(np.concatenate([G.beta1[r], G.beta0[r][:, None]], 1))[None]
        E = torch.tensor(G.eta[r][:, :2])[None]
        s2 = torch.tensor(G.eta[r][:, 2])[None]
        th0 = pack(V, E, s2)[0].numpy()
        Xe = torch.tensor(np.concatenate([X[r], np.ones((X.shape[1], 1))], 1))[None]
        yt = torch.tensor(Y[r])[None]

        def nll(t):
            tt = torch.tensor(t, requires_grad=True)
            v = -loglik(Xe, yt, *unpack(tt[None], k, p))[0]
            v.backward()
            return float(v.detach()), tt.grad.numpy().copy()

        res = minimize(nll, th0, jac=True, method="BFGS", options={"gtol": 1e-10, "maxiter": 2000})
        assert -res.fun <= est.loglik_[r] + 1e-7 * abs(est.loglik_[r]), (-res.fun, est.loglik_[r])


def test_polish_is_off_by_default_and_leaves_exact_fits_alone():
    sc = model1_scenario("exact")
    rng = np.random.default_rng(2)
    X, Y = sc.sample(800, rng)
    a = MLEGaussianMoE(2, compile=False).fit(X, Y)
    b = MLEGaussianMoE(2, compile=False, polish_iter=50).fit(X, Y)
    assert a.status_ == ["tol"] and a.n_newton_.tolist() == [0]
    # an EM maximum is certified at once: at most a few rounding-level steps
    assert b.status_ == ["newton"] and b.n_newton_[0] <= 3
    np.testing.assert_allclose(b.loglik_, a.loglik_, rtol=1e-9)


def test_variance_floor_is_kept():
    X, Y, init = _over(400, 2, seed=3)
    est = MLEGaussianMoE(3, max_iter=50, compile=False, polish_iter=30, var_floor=0.05).fit(X, Y, init=init)
    floor = 0.05 * Y.var(axis=1, ddof=1)
    assert np.all(est.variances_ >= floor[:, None] * (1 - 1e-12))

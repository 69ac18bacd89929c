"""The fast paths of the generic EM (issue 33) against the reference computations they replace: the
separable gates' closed-form gate step against :func:`torch.func.jacfwd`, and the atom-major scores
against the gate's own formula."""

import copy

import numpy as np
import pytest
import torch

from moestat.estimators.mle_generic import GenericEM, Posterior, gate_fisher
from moestat.model.likelihood import LikelihoodModel, linear_expert
from moestat.model.protocol import ProtocolGate

GATES = {
    "laplace": dict(normalisation="laplace"),
    "laplace_T": dict(normalisation="laplace", temperature=0.5),
    "laplace_topk": dict(normalisation="laplace", k_active=2),
    "gaussian": dict(normalisation="gaussian", variance=0.7),
}


def _em(case, k=3, d=2, row=True):
    em = GenericEM(LikelihoodModel(ProtocolGate(**GATES[case]), linear_expert(d)), k, d)
    if not row:  # the reference: the generic branch (jacfwd of the gate's own log-weights)
        em = copy.copy(em)
        em.row_gate = False
    return em


@pytest.mark.parametrize("case", list(GATES))
def test_separable_gate_step_equals_the_jacfwd_one(case):
    """Gradient and Fisher curvature of Q_g from the family's atom-major score derivative equal
    torch.func's over every free parameter (block-diagonal Jacobian: each logit depends on its own row)."""
    em, ref = _em(case), _em(case, row=False)
    assert em.row_gate and not ref.row_gate
    rng = np.random.default_rng(0)
    X = torch.as_tensor(rng.uniform(-1, 1, size=(4, 300, 2)))
    fv = torch.as_tensor(rng.normal(size=(4, em.mg)))
    X[0, 0] = fv[0, : em.d]  # a sample on atom 0's centre (fv starts with beta1_0): safe_norm's zero derivative
    u = em.log_u(fv, X)
    u_ref = ref.log_u(fv, X)
    assert torch.equal(torch.isinf(u), torch.isinf(u_ref))
    fin = torch.isfinite(u_ref)
    assert torch.allclose(u[fin], u_ref[fin], rtol=1e-13, atol=1e-13)
    pi = torch.softmax(u_ref, -2)
    r = torch.softmax(u_ref + torch.as_tensor(rng.normal(size=u.shape)), -2)
    post = Posterior(r, None, None, None, None, None, None, None, pi, u_ref)
    g1, C1 = gate_fisher(em, fv, X, post)
    g2, C2 = gate_fisher(ref, fv, X, post)
    assert g1.shape == (4, em.mg) and C1.shape == (4, em.mg, em.mg)
    assert torch.allclose(g1, g2, rtol=1e-10, atol=1e-10) and torch.allclose(C1, C2, rtol=1e-10, atol=1e-10)
    assert float(g1.abs().max()) > 1.0 and float(C1.abs().max()) > 1.0  # not a comparison of zeros
    if case == "laplace_topk":
        assert bool(torch.isinf(u).any())


def _file(name):
    from moestat.data.scenario_files import load_scenario
    from moestat.rates.catalogue import catalogue_file

    return load_scenario(str(catalogue_file(name)))


def _fit(sc, X, Y, G0, **kw):
    from moestat.estimators.mle import MLEGaussianMoE

    est = MLEGaussianMoE.for_scenario(sc, max_iter=kw.pop("max_iter", 200), random_state=0)
    for k, v in kw.items():
        setattr(est, k, v)
    return est.fit(X, Y, init=G0)


@pytest.mark.slow
def test_laplace_over_fit_equals_the_jacfwd_reference(monkeypatch):
    """The over-specified Laplace fit of the catalogue (k = 3 on k* = 2: SQUAREM, then the Newton polish)
    by the closed-form gate step reaches the fits of the reference path (the gate's Jacobian by
    torch.func.jacfwd, the algorithm before issue 33's speed-up): same statuses, log-likelihoods within
    1e-8 relative, and the reference is what it claims (its GenericEM has no row gate)."""
    from moestat.estimators.mle_generic import GenericEM
    from moestat.model.laplace_gate import LAPLACE

    sc = _file("laplace_gmoe_over.toml")
    rng = np.random.default_rng(5)
    data = [sc.sample(300, rng) for _ in range(2)]
    X, Y = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    G0 = [sc.near_truth_start(0.05, np.random.default_rng(10 + r), n=300) for r in range(2)]
    from moestat.model.mixing import MixingMeasure

    G0 = MixingMeasure.stack(G0)
    fast = _fit(sc, X, Y, G0, max_iter=60)
    monkeypatch.setattr(LAPLACE, "separable_score", False)
    assert not GenericEM(sc.fit_model, 3, 2).row_gate
    ref = _fit(sc, X, Y, G0, max_iter=60)
    assert list(fast.status_) == list(ref.status_)
    np.testing.assert_allclose(fast.loglik_, ref.loglik_, rtol=1e-8)
    assert fast.accelerate and fast.polish_iter > 0  # the design's path: SQUAREM and the polish


def test_rank_mask_equals_torch_topk():
    """The atom-major Top-K mask by pairwise counts equals torch.topk's, ties (left to torch.topk) included."""
    from moestat.model import gate_families as gf

    def ref(s, K, dim):
        idx = torch.topk(s, K, dim=dim).indices
        return torch.zeros_like(s, dtype=torch.bool).scatter(dim, idx, True)

    gen = torch.Generator().manual_seed(0)
    for k in (3, 4, 6):
        for K in range(1, k):
            s = torch.randn(3, k, 50, generator=gen, dtype=torch.float64)
            assert gf._rank_mask(s, K, -2) is not None  # no ties: the counted path runs
            assert torch.equal(gf.top_k_mask(s, K, dim=-2), ref(s, K, -2))
            tied = torch.randint(0, 3, (3, k, 50), generator=gen).double()  # ties in most columns
            assert gf._rank_mask(tied, K, -2) is None
            assert torch.equal(gf.top_k_mask(tied, K, dim=-2), ref(tied, K, -2))
            nan = s.clone()
            nan[0, 0, 0] = float("nan")
            assert gf._rank_mask(nan, K, -2) is None


@pytest.mark.slow
def test_topk_over_fit_equals_the_topk_reference(monkeypatch):
    """topk-over's fit (Top-3 of 4: the two-block gate step, the score search, the polish) with the
    counted mask and the experts' densities computed once per gate search equals the reference path's
    (torch.topk for every mask): the same arithmetic, so the same statuses and log-likelihoods."""
    from moestat.model import gate_families as gf
    from moestat.model.mixing import MixingMeasure

    sc = _file("topk_gmoe_over.toml")
    rng = np.random.default_rng(3)
    data = [sc.sample(300, rng) for _ in range(2)]
    X, Y = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    G0 = MixingMeasure.stack([sc.near_truth_start(0.05, np.random.default_rng(20 + r), n=300) for r in range(2)])
    fast = _fit(sc, X, Y, G0, max_iter=40)
    monkeypatch.setattr(gf, "_RANK_MASK_MAX_K", 0)
    ref = _fit(sc, X, Y, G0, max_iter=40)
    assert list(fast.status_) == list(ref.status_)
    np.testing.assert_allclose(fast.loglik_, ref.loglik_, rtol=1e-10)
    np.testing.assert_array_equal(fast.n_iter_, ref.n_iter_)


def test_polish_in_chunks_of_entries_equals_the_whole_batch(monkeypatch):
    """The Newton polish forms its Hessian over chunks of entries (bounded memory): entries are
    independent, so one entry per chunk gives the same polished fits as the whole batch at once."""
    from moestat.estimators import mle_generic as mg
    from moestat.model.mixing import MixingMeasure

    sc = _file("laplace_gmoe_over.toml")
    rng = np.random.default_rng(7)
    data = [sc.sample(200, rng) for _ in range(3)]
    X, Y = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    G0 = MixingMeasure.stack([sc.near_truth_start(0.05, np.random.default_rng(30 + r), n=200) for r in range(3)])
    whole = _fit(sc, X, Y, G0, max_iter=30)
    monkeypatch.setattr(mg, "POLISH_CHUNK_SAMPLES", 1)  # one entry per chunk
    chunked = _fit(sc, X, Y, G0, max_iter=30)
    assert whole.n_newton_.sum() > 0  # the polish took steps
    assert list(whole.status_) == list(chunked.status_)
    np.testing.assert_allclose(chunked.loglik_, whole.loglik_, rtol=1e-12)


@pytest.mark.parametrize("case", ["laplace", "laplace_T", "gaussian"])
def test_closed_form_newton_terms_equal_torch_func(case):
    """The polish's closed-form gradient and Hessian of the observed log-likelihood (separable gate,
    linear Gaussian experts) equal torch.func's forward-over-reverse ones, a sample on a centre included."""
    from moestat.estimators.mle_generic import row_linear_newton_terms
    from moestat.estimators.newton import grad_hess

    em = _em(case)
    rng = np.random.default_rng(1)
    B, n, k = 3, 250, em.k
    X = torch.as_tensor(rng.uniform(-1, 1, size=(B, n, 2)))
    Y = torch.as_tensor(rng.normal(size=(B, n)))
    m = em.mg + k * em.p + k
    theta = torch.as_tensor(rng.normal(scale=0.7, size=(B, m)))
    X[0, 0] = theta[0, : em.d]  # on atom 0's centre
    mg, kq = em.mg, k * em.p

    def f(t):
        return em.loglik(t[:, :mg], t[:, mg : mg + kq].reshape(-1, k, em.p), t[:, mg + kq :], X, Y)

    g1, H1 = row_linear_newton_terms(em, theta, X, Y)
    g2, H2 = grad_hess(f, theta)
    assert torch.isfinite(H2).all()
    scale = float(H2.abs().max())
    assert torch.allclose(g1, g2, rtol=1e-9, atol=1e-9 * scale) and torch.allclose(H1, H2, rtol=1e-9, atol=1e-9 * scale)
    assert torch.allclose(H1, H1.transpose(-1, -2), atol=1e-9 * scale)

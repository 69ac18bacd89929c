"""The generic maximum likelihood (issue 27): every gate and expert of the protocol, checked against
scipy on an independent NumPy likelihood, and against the fused EM on model 1."""

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import erf, log_softmax, logsumexp

from moestat.data.gaussian_scenarios import model1_scenario
from moestat.data.scenario_files import scenario_from_mapping
from moestat.estimators.mle import MLEGaussianMoE
from moestat.estimators.starts import near_truth_init
from moestat.model.mixing import MixingMeasure

LIN = [dict(beta0=0.5, beta1=[2.0, -1.0], eta=[1.0, -1.0, 0.5], variance=0.1),
       dict(beta0=0.0, beta1=[0.0, 0.0], eta=[-1.0, 1.0, -0.5], variance=0.2)]
LIN3 = [dict(beta0=0.3, beta1=[1.5, 1.0], eta=[1.0, -1.0, 1.0], variance=0.1),
        dict(beta0=-0.2, beta1=[-1.0, 1.5], eta=[-1.0, 0.5, -1.0], variance=0.15)] + [dict(LIN[1], eta=[0.5, 1.0, 0.0])]
GAUSS_GATE = [dict(a, beta0=float(np.log(w)), beta1=c) for a, w, c in zip(LIN, [0.4, 0.6], [[0.5, 0.5], [-0.5, -0.3]])]
SIG_GATE = [LIN[0], dict(LIN[1], beta0=0.3, beta1=[1.0, 1.0])]
# n = 2000: the comparison needs a maximiser.  At n = 300 one expert's class separated and its MLE was at
# infinity (coefficients ~1e4); with flatter coefficients at n = 600 EM and scipy climbed to different
# local maxima (-600.20 and -596.18); at n = 1000 (issue 35) atom 1's class-1 logit still diverged along a
# ray (moestat stopped at coefficients ~2e4, scipy at ~1.6e3), where the log-likelihood only approaches its
# supremum and two optimisers' stopping points differ by whatever the platform's rounding leaves
# (0.004 nats here, -0.009 on another machine).  At n = 2000 both stop at the same finite point
# (largest |coefficient| 2.49), which the test checks before comparing the values.
MULTI = [dict(beta0=0.5, beta1=[2.0, -1.0], eta=[2, 2, 0, -2, 0, 1]), dict(beta0=0.0, beta1=[0.0, 0.0], eta=[-2, 0, 1, 0, -2, 0])]

CASES = {
    "temperature": ({"temperature": 0.5}, {"kind": "linear"}, LIN),
    "activation": ({"activation": "tanh", "temperature": 0.5}, {"kind": "linear"}, LIN),
    "top_k": ({"k_active": 2}, {"kind": "linear"}, LIN3),
    "sigmoid_gate": ({"normalisation": "sigmoid"}, {"kind": "linear"}, SIG_GATE),
    "gaussian_gate": ({"normalisation": "gaussian"}, {"kind": "linear"}, GAUSS_GATE),
    "poly": ({}, {"kind": "poly", "degree": 2}, LIN),
    "gelu": ({}, {"kind": "gelu"}, LIN),
    "tanh": ({}, {"kind": "tanh"}, LIN),
    "sigmoid_expert": ({}, {"kind": "sigmoid"}, LIN),
    "multinomial": ({}, {"kind": "multinomial", "classes": 3}, MULTI),
}


def _scenario(gate, expert, atoms):
    return scenario_from_mapping({"gate": gate, "expert": expert, "noise": {"model": "mixture"}, "atoms": atoms})


# ---- an independent NumPy likelihood (no moestat code) ---------------------------------------------
def _np_loglik(gate, expert, X, Y, b0, b1, eta):
    """Observed log-likelihood of one measure (``eta`` with the variance last for Gaussian experts)."""
    T = gate.get("temperature", 1.0)
    if gate.get("normalisation") == "gaussian":
        s = -0.5 * ((X[:, None, :] - b1[None]) ** 2).sum(-1)
    else:
        s = X @ b1.T
        if gate.get("activation") == "tanh":
            s = np.tanh(s)
    logits = (s + b0) / T
    if gate.get("normalisation") == "sigmoid":
        logits = -np.logaddexp(0.0, -logits)  # log sigmoid, then normalised
    if "k_active" in gate:
        K = gate["k_active"]
        thr = np.sort(s, axis=1)[:, -K][:, None]
        logits = np.where(s >= thr, logits, -np.inf)
    lw = log_softmax(logits, axis=1)
    kind = expert["kind"]
    if kind == "multinomial":
        C = expert["classes"]
        W = eta.reshape(eta.shape[0], C - 1, X.shape[1] + 1)
        z = np.einsum("nd,kcd->nkc", X, W[..., :-1]) + W[..., -1][None]
        z = np.concatenate([z, np.zeros(z.shape[:-1] + (1,))], -1)
        lf = log_softmax(z, axis=-1)[np.arange(len(Y)), :, Y.astype(int)]
    else:
        z = X @ eta[:, :-2].T + eta[:, -2]
        h = {"linear": z, "poly": z ** 2, "gelu": 0.5 * z * (1 + erf(z / np.sqrt(2))), "tanh": np.tanh(z),
             "sigmoid": 1 / (1 + np.exp(-z))}[kind]
        v = eta[:, -1]
        lf = -0.5 * (np.log(2 * np.pi * v) + (Y[:, None] - h) ** 2 / v)
    return float(logsumexp(lw + lf, axis=1).sum())


def _pack(G, gate, gaussian):
    """Free parameters for scipy: the gate without its reference entries, eta, log-variances."""
    k = G.beta0.shape[0]
    norm = gate.get("normalisation", "softmax")
    free0 = k - 1 if norm in ("softmax", "gaussian") else k
    free1 = k - 1 if norm == "softmax" else k
    eta = G.eta.copy()
    if gaussian:
        eta[:, -1] = np.log(eta[:, -1])
    return np.concatenate([G.beta0[:free0], G.beta1[:free1].ravel(), eta.ravel()]), (free0, free1)


def _unpack(v, G, free, gaussian):
    k, d = G.beta1.shape
    b0, b1, eta = np.zeros(k), np.zeros((k, d)), np.empty_like(G.eta)
    b0[: free[0]] = v[: free[0]]
    b1[: free[1]] = v[free[0] : free[0] + free[1] * d].reshape(free[1], d)
    eta[:] = v[free[0] + free[1] * d :].reshape(eta.shape)
    if gaussian:
        eta[:, -1] = np.exp(eta[:, -1])
    return b0, b1, eta


# Top-K: which K experts are active is piecewise constant in beta1, so EM alone never moves a boundary
# and stopped 4.6 nats below scipy's L-BFGS here (-249.11 against -244.46, the former xfail); the
# coordinate search on the scores between EM runs (mle_generic.score_search) now climbs to -229.57.
@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_generic_mle_reaches_scipys_optimum(case):
    gate, expert, atoms = CASES[case]
    sc = _scenario(gate, expert, atoms)
    gaussian = expert["kind"] != "multinomial"
    X, Y = sc.sample(2000 if case == "multinomial" else 300, np.random.default_rng(1))
    G0 = sc.near_truth_start(0.1, np.random.default_rng(2))
    if gate.get("normalisation") == "gaussian":  # the estimator's convention: the last beta0 is 0
        G0 = MixingMeasure(G0.beta0 - G0.beta0[-1], G0.beta1, G0.eta)
    # EM into the basin, then Newton to the second-order certificate (EM alone crawls on some of these)
    est = MLEGaussianMoE(sc.fit_model, len(atoms), max_iter=300, tol=1e-9, polish_iter=50, accelerate=True).fit(X, Y, init=G0)
    assert est.kernel_ == "generic"
    P = est.params_
    ll_m = _np_loglik(gate, expert, X, Y, P.beta0[0], P.beta1[0], P.eta[0])
    # moestat's own log-likelihood is the independent one's
    np.testing.assert_allclose(est.loglik_[0], ll_m, rtol=1e-9)
    path = est.loglik_path_[0]
    assert np.all(np.diff(path) >= -1e-9 * abs(path[-1])), "the EM trace decreased"
    v0, free = _pack(G0, gate, gaussian)
    res = minimize(lambda v: -_np_loglik(gate, expert, X, Y, *_unpack(v, G0, free, gaussian)), v0, method="L-BFGS-B",
                   options={"maxiter": 5000, "maxfun": 200000})
    ll_s = -res.fun
    assert np.isfinite(ll_s)
    if case == "multinomial":
        # a finite maximiser (no coefficient running off to infinity), which both optimisers reach: only
        # then is "moestat reaches the optimum" a statement that holds on every platform
        b0, b1, eta = _unpack(res.x, G0, free, gaussian)
        assert np.abs(eta).max() < 10 and np.abs(P.eta[0]).max() < 10, "the MLE is at infinity (separation)"
        np.testing.assert_allclose(P.eta[0], eta, atol=1e-2)
    # at a strict maximum, EM polished by Newton (status "newton": gradient ~0, Hessian negative definite)
    # sits at the maximiser, and L-BFGS-B stops below it (its rule: relative reduction <= factr * eps,
    # about 2.2e-9); 1e-6 relative is far above either's rounding
    assert ll_m >= ll_s - 1e-6 * abs(ll_s), f"{case}: moestat {ll_m:.8f} < scipy {ll_s:.8f}"


def _model1_batch(seed: int, R: int = 3, n: int = 1500):
    """``R`` replicates of model 1 (exact) and near-truth starts."""
    sc = model1_scenario("exact")
    rng = np.random.default_rng(seed)
    data = [sc.sample(n, rng) for _ in range(R)]
    X, Y = np.stack([a for a, _ in data]), np.stack([b for _, b in data])
    G0 = MixingMeasure.stack([near_truth_init(sc.truth, 2, 0.1, np.random.default_rng(r), log_last=True) for r in range(R)])
    return X, Y, G0


def test_generic_em_on_model1_equals_the_fused_em():
    X, Y, G0 = _model1_batch(0)
    R = X.shape[0]
    fused = MLEGaussianMoE(n_components=2, compile=False).fit(X, Y, init=G0)
    generic = MLEGaussianMoE(n_components=2, generic=True).fit(X, Y, init=G0)
    assert fused.kernel_ == "eager" and generic.kernel_ == "generic"
    np.testing.assert_allclose(generic.loglik_, fused.loglik_, rtol=1e-8)
    np.testing.assert_allclose(generic.params_.eta, fused.params_.eta, atol=1e-6)
    np.testing.assert_allclose(generic.params_.beta1, fused.params_.beta1, atol=1e-5)
    assert generic.status_ == fused.status_ == ["tol"] * R


@pytest.mark.slow
def test_the_compiled_generic_em_equals_the_eager_one():
    """torch.compile of the generic E-step and gate objective (``compile=True``) changes the
    summation order only: same fits as the eager generic EM and the fused EM."""
    X, Y, G0 = _model1_batch(1)
    fits = [MLEGaussianMoE(n_components=2, generic=True, compile=c).fit(X, Y, init=G0) for c in (True, False)]
    fused = MLEGaussianMoE(n_components=2, compile=False).fit(X, Y, init=G0)
    assert [f.kernel_ for f in fits] == ["generic-compiled", "generic"]
    np.testing.assert_allclose(fits[0].loglik_, fits[1].loglik_, rtol=1e-10)
    np.testing.assert_allclose(fits[0].loglik_, fused.loglik_, rtol=1e-8)
    assert fits[0].status_ == fits[1].status_ == fused.status_


def test_without_a_compiler_the_generic_em_runs_eagerly_with_one_warning(monkeypatch):
    """``compile="auto"`` on a machine where torch.compile fails: the same fits, eagerly, one warning,
    and no second attempt in the process."""
    import torch

    from moestat.estimators import mle_generic as mg

    def broken(name, fn):
        def run(em, *ts):
            raise torch._dynamo.exc.BackendCompilerFailed(fn, RuntimeError("no C++ compiler"), None)
        return run

    monkeypatch.setattr(mg, "_compiled", broken)
    monkeypatch.setattr(mg, "_COMPILED", {})
    monkeypatch.setattr("moestat.estimators.mle_fused.COMPILE_MIN_SAMPLES", 1)
    X, Y, G0 = _model1_batch(2, R=2, n=400)
    with pytest.warns(RuntimeWarning, match="torch.compile is unavailable"):
        first = MLEGaussianMoE(n_components=2, generic=True).fit(X, Y, init=G0)
    assert first.kernel_ == "generic" and mg._COMPILED.get("unavailable")
    again = MLEGaussianMoE(n_components=2, generic=True).fit(X, Y, init=G0)  # no warning, no attempt
    eager = MLEGaussianMoE(n_components=2, generic=True, compile=False).fit(X, Y, init=G0)
    np.testing.assert_array_equal(first.loglik_, eager.loglik_)
    np.testing.assert_array_equal(again.loglik_, eager.loglik_)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed):  # compile=True asked for it: no fallback
        mg._COMPILED.clear()
        MLEGaussianMoE(n_components=2, generic=True, compile=True).fit(X, Y, init=G0)


def _xt(X):
    """``xt = (x, 1)`` ``[B, n, p]``."""
    import torch

    return torch.cat([X, torch.ones_like(X[..., :1])], -1)


def test_the_affine_gate_objective_from_first_moments_equals_the_direct_one():
    """``Q_g`` of a dense affine gate from ``sum_n r xt`` (the trial steps of the gate step) equals
    ``sum_ni r_ni log w_i`` computed directly."""
    import torch

    from moestat.estimators.mle_generic import GenericEM

    sc = _scenario({"temperature": 0.7}, {"kind": "linear"}, LIN3)
    em = GenericEM(sc.model, 3, 2)
    rng = np.random.default_rng(2)
    X = torch.as_tensor(rng.uniform(-1, 1, size=(4, 300, 2)))
    fv = torch.as_tensor(rng.normal(size=(4, em.mg)))
    r = torch.softmax(torch.as_tensor(rng.normal(size=(4, 3, 300))), -2)
    rA = torch.einsum("bfn,bnp->bfp", r[:, : em.n_free_rows], _xt(X))
    direct = (r * torch.log_softmax(em.log_u(fv, X), -2)).sum((-2, -1))
    torch.testing.assert_close(em.q_gate_affine(fv, X, rA), direct, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(em.q_gate(fv, X, r), direct, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("d", [2, 5])  # sums as feature rows (p <= 5) and as matmuls (p = 6)
def test_the_e_step_sums_equal_the_per_sample_ones(d):
    """The E-step's sums over the samples (experts' weighted least squares, the closed-form gate
    step, ``Q_g``'s first moments) equal einsums of the responsibilities and gate weights computed
    here from the log-likelihood terms directly."""
    import torch

    from moestat.estimators.mle_generic import GenericEM

    k = 3
    atoms = [dict(beta0=0.1 * (k - 1 - i), beta1=[0.3 * (k - 1 - i)] * d, eta=[1.0 - i] * (d + 1), variance=0.1 + 0.05 * i)
             for i in range(k)]  # the last atom: the softmax's reference
    sc = _scenario({"temperature": 0.8}, {"kind": "linear"}, atoms)
    em = GenericEM(sc.model, k, d)
    assert not em.need_r
    rng = np.random.default_rng(3)
    B, n = 3, 250
    X = torch.as_tensor(rng.uniform(-1, 1, size=(B, n, d)))
    Y = torch.as_tensor(rng.normal(size=(B, n)))
    fv = torch.as_tensor(rng.normal(size=(B, em.mg)))
    eta = torch.as_tensor(rng.normal(size=(B, k, d + 1)))
    ls2 = torch.as_tensor(rng.normal(scale=0.3, size=(B, k)))
    ll, post = em.estep((fv, eta, ls2), X, Y)
    assert post.r is None and post.pi is None
    Xe = _xt(X)
    V = em.gate_V(fv)
    u = torch.einsum("bkp,bnp->bkn", V, Xe) / 0.8
    e = Y.unsqueeze(1) - torch.einsum("bkp,bnp->bkn", eta, Xe)
    lf = -0.5 * (np.log(2 * np.pi) + ls2.unsqueeze(-1) + e**2 / torch.exp(ls2).unsqueeze(-1))
    pi, r = torch.softmax(u, 1), torch.softmax(u + lf, 1)
    torch.testing.assert_close(ll, (torch.logsumexp(u + lf, 1) - torch.logsumexp(u, 1)).sum(-1), rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(post.M, torch.einsum("bkn,bnp,bnq->bkpq", r, Xe, Xe), rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(post.ge, torch.einsum("bkn,bnp->bkp", r * e, Xe), rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(post.q, (r * e * e).sum(-1), rtol=1e-12, atol=1e-10)
    f = em.n_free_rows
    torch.testing.assert_close(post.gV, torch.einsum("bfn,bnp->bfp", (r - pi)[:, :f], Xe), rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(post.rA, torch.einsum("bfn,bnp->bfp", r[:, :f], Xe), rtol=1e-12, atol=1e-10)
    I, J = torch.triu_indices(f, f)
    w = pi[:, I] * ((I == J).to(pi).reshape(1, -1, 1) - pi[:, J])
    torch.testing.assert_close(post.Wm, torch.einsum("bmn,bnp,bnq->bmpq", w, Xe, Xe), rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(post.f0, (r * torch.log_softmax(u, 1)).sum((1, 2)), rtol=1e-12, atol=1e-9)


def test_the_fast_path_stays_used_for_the_linear_softmax_model():
    from moestat.data.scenario_files import load_scenario
    from pathlib import Path

    sc = load_scenario(str(Path(__file__).resolve().parents[2] / "examples" / "gaussian_moe_d2.toml"))
    X, Y = sc.sample(400, np.random.default_rng(0))
    est = MLEGaussianMoE.for_scenario(sc, max_iter=200, random_state=0).fit(X, Y, init=sc.near_truth_start(0.05, np.random.default_rng(1)))
    assert est.kernel_ in ("eager", "compiled")
    assert est.params_.eta.shape == (1, 3, 4)


@pytest.mark.parametrize("case", ["plain", "temperature", "top_k"])
def test_the_closed_form_gate_step_equals_the_autograd_one(case):
    """The affine gate's gradient and Fisher curvature from the data equal torch.func's (dense, with a
    temperature, and Top-K, where switched-off experts must drop out of both)."""
    import torch

    from moestat.estimators.mle_generic import GenericEM, Posterior, gate_fisher

    gate, atoms = {"plain": ({}, LIN3), "temperature": ({"temperature": 0.5}, LIN3), "top_k": ({"k_active": 2}, LIN3)}[case]
    sc = _scenario(gate, {"kind": "linear"}, atoms)
    em = GenericEM(sc.model, 3, 2)
    assert em.affine_gate
    rng = np.random.default_rng(0)
    X = torch.as_tensor(rng.uniform(-1, 1, size=(4, 200, 2)))
    fv = torch.as_tensor(rng.normal(size=(4, em.mg)))
    u = em.log_u(fv, X)  # [B, k, n]
    pi = torch.softmax(u, -2)
    r = torch.softmax(u + torch.as_tensor(rng.normal(size=u.shape)), -2)  # responsibilities: zero where u = -inf
    dr, w = em.gate_weights(r, pi)
    Xe = _xt(X)
    gV, Wm = torch.einsum("bfn,bnp->bfp", dr, Xe), torch.einsum("bmn,bnp,bnq->bmpq", w, Xe, Xe)
    g1, C1 = gate_fisher(em, fv, X, Posterior(r, None, None, None, None, gV, Wm, None, None, None))  # closed form
    g2, C2 = gate_fisher(em, fv, X, Posterior(r, None, None, None, None, None, None, None, pi, u))  # torch.func
    assert dr is not None
    assert torch.allclose(g1, g2, rtol=1e-10, atol=1e-10) and torch.allclose(C1, C2, rtol=1e-10, atol=1e-10)
    if case == "top_k":
        assert bool(torch.isinf(u).any())  # the check covers switched-off experts


def test_the_multinomial_expert_step_equals_the_autograd_newton_step():
    """The closed-form IRLS gradient and Hessian of every atom's Q_i equal torch.func's."""
    import torch

    from moestat.estimators.mle_generic import GenericEM, multinomial_expert_fisher
    from moestat.estimators.newton import grad_hess as _grad_hess

    gate, expert, atoms = CASES["multinomial"]
    sc = _scenario(gate, expert, atoms)
    em = GenericEM(sc.model, 2, 2)
    rng = np.random.default_rng(1)
    X = torch.as_tensor(rng.uniform(-1, 1, size=(3, 150, 2)))
    Y = torch.as_tensor(rng.integers(0, 3, size=(3, 150)).astype(float))
    eta = torch.as_tensor(rng.normal(size=(3, 2, em.q)))
    r = torch.softmax(torch.as_tensor(rng.normal(size=(3, 2, 150))), -2)  # [B, k, n]
    g1, C1 = multinomial_expert_fisher(em, eta, X, Y, r)
    g2, H2 = _grad_hess(lambda e: em.q_expert(e, torch.zeros(3, 2, dtype=X.dtype), X, Y, r), eta)
    assert torch.allclose(g1, g2, rtol=1e-10, atol=1e-10) and torch.allclose(C1, -H2, rtol=1e-10, atol=1e-10)


def test_a_top_k_fit_moves_its_biases_to_a_stationary_point():
    """Top-2 of 3 (topk-gmoe's truth) from a start whose biases are off by 0.15: the active sets do
    not depend on ``beta0`` (Top-K on the score before the bias), so the observed log-likelihood is
    smooth in ``beta0`` and its score is zero at a converged fit.  Before the bias block of the gate
    step, every gate step was rejected (``Q_g = -inf`` once any boundary crossed a sample) and the
    biases stayed at the start: score 32 nats per unit of ``beta0``, fit below the truth's likelihood."""
    import torch

    from moestat.estimators import generic_starts as gs
    from moestat.estimators import mle_generic as mg

    atoms = [dict(beta0=0.5, beta1=[2.0, -1.0], eta=[1.0, -2.0, 0.5], variance=0.09),
             dict(beta0=-0.3, beta1=[-1.5, 2.0], eta=[-2.0, 1.0, -1.0], variance=0.16),
             dict(beta0=0.0, beta1=[0.0, 0.0], eta=[0.5, 1.5, 1.5], variance=0.25)]
    sc = _scenario({"k_active": 2}, {"kind": "linear"}, atoms)
    n = 2000
    X, Y = sc.sample(n, np.random.default_rng(11))
    T = sc.truth
    start = MixingMeasure(T.beta0 + np.array([0.15, -0.15, 0.0]), T.beta1, T.eta)
    est = MLEGaussianMoE(sc.fit_model, 3, eta_variance=True, accelerate=True, random_state=0).fit(X, Y, init=start)
    em = mg.GenericEM(sc.fit_model, 3, 2)
    fv, eta, ls2 = gs.to_free(em, est.params_.numpy())
    fv.requires_grad_(True)
    L = em.loglik(fv, eta, ls2, torch.as_tensor(X)[None], torch.as_tensor(Y)[None]).sum()
    (g,) = torch.autograd.grad(L, fv)
    bias = [2, 5]  # free layout (beta1_1, beta0_1, beta1_2, beta0_2); atom 3 is the reference
    assert np.all(np.abs(g[0, bias].numpy()) <= 1e-4 * n), g
    assert np.abs(est.params_.numpy().beta0[0, :2] - start.beta0[:2]).max() > 0.05  # left the start
    truth_ll = float(sc.fit_model.loglik(torch.as_tensor(X), torch.as_tensor(Y), T))
    assert est.loglik_[0] >= truth_ll


def test_predict_uses_the_model_the_generic_em_fitted_and_a_fused_refit_forgets_it():
    """``model_`` is what the generic EM fitted (predict evaluates it); a fused refit of the same
    estimator leaves none behind, so its predictions are the fused EM's mean function."""
    import torch

    from moestat.model.likelihood import LikelihoodModel

    X, Y, G0 = _model1_batch(1, R=2, n=400)
    est = MLEGaussianMoE(n_components=2, generic=True, max_iter=50).fit(X, Y, init=G0)
    assert isinstance(est.model_, LikelihoodModel)
    want = est.model_.predict(torch.as_tensor(X), est.params_).numpy()  # eta holds the variances (eta_variance)
    np.testing.assert_array_equal(est.predict(X), want)
    est.set_params(generic=False).fit(X, Y, init=G0)
    fused = MLEGaussianMoE(n_components=2, max_iter=50).fit(X, Y, init=G0)
    assert est.model_ is None and est.kernel_ == fused.kernel_
    np.testing.assert_array_equal(est.predict(X), fused.predict(X))


def test_the_multinomial_m_step_is_the_maximiser_of_its_weighted_objectives():
    """Issue 33: the M-step of multinomial-logistic experts and of their softmax gate maximises each
    weighted objective, not one Newton step of it.  ``Q_i(eta_i) = sum_n r_ni log P(y_n | x_n, eta_i)``
    (a weighted multinomial-logistic regression per atom) and ``Q_g = sum_ni r_ni log w_i(x_n)`` (one of
    the responsibilities on ``(x, 1)``) are concave; their maximisers are found here independently, by
    scipy's BFGS on a NumPy transcription of the two objectives, from the same responsibilities.  The
    damped Newton step of the M-step before issue 33 stopped 0.89 away from the experts' maximisers here."""
    import torch

    from moestat.estimators import generic_starts as gs
    from moestat.estimators import mle_generic as mg

    gate, expert, atoms = CASES["multinomial"]
    sc = _scenario(gate, expert, atoms)
    X, Y = sc.sample(1500, np.random.default_rng(3))
    em = mg.GenericEM(sc.model, 2, 2)
    G0 = sc.near_truth_start(0.5, np.random.default_rng(4))
    fv, eta, ls2 = gs.to_free(em, MixingMeasure(G0.beta0[None], G0.beta1[None], G0.eta[None]))
    Xt, Yt = torch.as_tensor(X[None]), torch.as_tensor(Y[None].astype(float))
    st = mg._State(fv, eta, ls2, torch.full((1,), 1e-6, dtype=torch.float64), torch.full((1, 2), 1e-6, dtype=torch.float64),
                   torch.full((1,), 1e-6, dtype=torch.float64))
    _, post = em.estep(st.th, Xt, Yt)
    new = mg._m_step(em, st, Xt, Yt, post, torch.zeros(1, dtype=torch.float64))
    r = post.r[0].numpy()  # [k, n]
    Xe = np.concatenate([X, np.ones((len(X), 1))], 1)

    def neg_q_expert(v, i):  # class 2 the reference; v = [A_0, b_0, A_1, b_1] row-major, as the toml's eta
        z = np.concatenate([Xe @ v.reshape(2, 3).T, np.zeros((len(X), 1))], 1)
        return -float((r[i] * log_softmax(z, axis=1)[np.arange(len(Y)), Y.astype(int)]).sum())

    def neg_q_gate(v):  # the reference atom (last) has zero logits; v = (beta1_0, beta0_0)
        u = np.stack([Xe @ v, np.zeros(len(X))], 1)
        return -float((r.T * log_softmax(u, axis=1)).sum())

    for i in range(2):
        ref = minimize(neg_q_expert, eta[0, i].numpy(), args=(i,), method="BFGS", options={"gtol": 1e-9})
        assert np.abs(ref.x).max() < 10, "a separated class: the maximiser is at infinity"
        np.testing.assert_allclose(new.eta[0, i].numpy(), ref.x, atol=1e-4)
        assert -neg_q_expert(new.eta[0, i].numpy(), i) >= -ref.fun - 1e-8 * abs(ref.fun)
    # the gate's free parameters in GenericEM's layout: (beta1_0, beta0_0)
    ref = minimize(neg_q_gate, fv[0].numpy(), method="BFGS", options={"gtol": 1e-9})
    np.testing.assert_allclose(new.fv[0].numpy(), ref.x, atol=1e-4)
    assert -neg_q_gate(new.fv[0].numpy()) >= -ref.fun - 1e-8 * abs(ref.fun)
    # the check can fail: one damped Newton step of each (the M-step before issue 33) is not the maximiser
    g, C = mg.multinomial_expert_fisher(em, eta, Xt, Yt, post.r)
    one = eta + torch.linalg.solve(C, g.unsqueeze(-1)).squeeze(-1)
    assert np.abs(one[0].numpy() - new.eta[0].numpy()).max() > 1e-3

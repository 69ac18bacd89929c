"""The joint GLLiM EM (moestat.estimators.gllim) against an independent NumPy likelihood and scipy,
its guarantees (monotone, batched = one at a time, consistent), and the scenario's D-bar against a
direct transcription of CRPE-GMoE's gauss_loss_GLLiM1 formula."""

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import logsumexp

from moestat.data.gllim_scenarios import GLLiMScenario, gllim_dbar_spec
from moestat.data.scenario_files import ScenarioFileError, load_scenario, scenario_from_mapping
from moestat.estimators.gllim import GLLiMEM
from moestat.model.gllim_model import gllim_loglik, join_measure, split_measure
from moestat.model.mixing import MixingMeasure
from moestat.rates.catalogue import catalogue_file

MODEL1 = catalogue_file("gllim_model1.toml")


def _truth() -> MixingMeasure:
    return load_scenario(str(MODEL1)).truth


def _np_loglik(X, Y, G):
    """Independent joint log-likelihood of one replicate (NumPy, slogdet and solve; no torch)."""
    d = X.shape[1]
    logpi, c, Gamma, A, b, nu = split_measure(G.numpy(), d)
    logpi = logpi - logsumexp(logpi)
    comp = []
    for i in range(logpi.size):
        diff = X - c[i]
        _, logdet = np.linalg.slogdet(Gamma[i])
        quad = np.einsum("nd,nd->n", diff, np.linalg.solve(Gamma[i], diff.T).T)
        lx = -0.5 * (d * np.log(2 * np.pi) + logdet + quad)
        ly = -0.5 * (np.log(2 * np.pi * nu[i]) + (Y - X @ A[i] - b[i]) ** 2 / nu[i])
        comp.append(logpi[i] + lx + ly)
    return float(logsumexp(np.stack(comp), axis=0).sum())


def _data(sc, n, reps, seed):
    rng = np.random.default_rng(seed)
    XY = [sc.sample(n, rng) for _ in range(reps)]
    return np.stack([x for x, _ in XY]), np.stack([y for _, y in XY])


def test_loglik_matches_independent_numpy():
    sc = GLLiMScenario(_truth(), 4)
    X, Y = _data(sc, 500, 2, 1)
    ours = gllim_loglik(X, Y, sc.truth)
    ref = [_np_loglik(X[r], Y[r], sc.truth) for r in range(2)]
    np.testing.assert_allclose(ours, ref, rtol=1e-12)
    # the fit's own log-likelihood (computed in the EM's expanded quadratic form) is the same quantity
    est = GLLiMEM(3, max_iter=50).fit(X, Y, init=sc.truth)
    np.testing.assert_allclose(est.loglik_, [_np_loglik(X[r], Y[r], MixingMeasure(*(a[r] for a in (
        est.params_.beta0, est.params_.beta1, est.params_.eta)))) for r in range(2)], rtol=1e-10)


@pytest.mark.parametrize("k", [3, 4])
def test_em_increases_the_likelihood_monotonically(k):
    sc = GLLiMScenario(_truth(), k)
    X, Y = _data(sc, 800, 2, 2)
    rng = np.random.default_rng(3)
    init = MixingMeasure.stack([sc.near_truth_start(0.3, rng) for _ in range(2)])
    est = GLLiMEM(k, n_init=3, max_iter=300, random_state=4).fit(X, Y, init=init)
    assert est.n_starts_ == 3
    for path in est.loglik_path_:
        assert path.size > 2
        # EM is exact (closed-form M-step): every step is >= the last up to float64 rounding of a sum of n terms
        assert np.all(np.diff(path) >= -1e-10 * np.abs(path[1:])), np.diff(path).min()
    # every start of every replicate, not only the best: the best start is the largest final value
    np.testing.assert_array_equal(est.loglik_, est.loglik_starts_.max(1))


def _exact_fit(n, seed, tol=1e-8):
    sc = GLLiMScenario(_truth(), 3)
    X, Y = _data(sc, n, 1, seed)
    rng = np.random.default_rng(seed + 1)
    est = GLLiMEM(3, max_iter=5000, tol=tol).fit(X, Y, init=sc.near_truth_start(0.05, rng))
    return sc, X, Y, est


def test_recovers_the_truth_on_a_large_sample():
    """Exact fit, n = 40 000: every free parameter within 5 Cramér-Rao standard deviations of the
    truth (the joint Fisher information of the pre-flight, moestat.rates.preflight)."""
    from moestat.rates.preflight import fisher_information

    n = 40000
    sc, X, Y, est = _exact_fit(n, 11)
    assert est.status_ == ["tol"]
    info, _ = fisher_information(sc, m=20000, seed=5)
    sd = np.sqrt(np.diag(np.linalg.inv(info)) / n)

    def free(G):  # the pre-flight's free coordinates: log pi_i - log pi_k (i < k), c, (a, b, nu, Gamma)
        G = G.numpy()
        return np.concatenate([(G.beta0 - G.beta0[..., -1:])[..., :-1].ravel(), G.beta1.ravel(), G.eta.ravel()])

    fit = MixingMeasure(est.params_.beta0[0], est.params_.beta1[0], est.params_.eta[0])
    z = (free(fit) - free(sc.truth)) / sd
    assert np.all(np.abs(z) < 5), np.round(z, 2)
    assert est.loglik_[0] >= gllim_loglik(X, Y, sc.truth)[0]


def _unconstrained(G, d):
    logpi, c, Gamma, A, b, nu = split_measure(G.numpy(), d)
    L = np.linalg.cholesky(Gamma)
    logdiag = np.log(np.diagonal(L, axis1=-2, axis2=-1))
    il = np.tril_indices(d, -1)
    return np.concatenate([logpi[:-1] - logpi[-1], c.ravel(), logdiag.ravel(), L[:, il[0], il[1]].ravel(), A.ravel(), b,
                           np.log(nu)])


def _measure(theta, k, d):
    i = 0

    def take(m):
        nonlocal i
        out = theta[i:i + m]
        i += m
        return out
    lp = np.append(take(k - 1), 0.0)
    c = take(k * d).reshape(k, d)
    logdiag = take(k * d).reshape(k, d)
    m = d * (d - 1) // 2
    off = take(k * m).reshape(k, m)
    L = np.zeros((k, d, d))
    L[:, np.arange(d), np.arange(d)] = np.exp(logdiag)
    il = np.tril_indices(d, -1)
    L[:, il[0], il[1]] = off
    A = take(k * d).reshape(k, d)
    b = take(k)
    nu = np.exp(take(k))
    return join_measure(lp - logsumexp(lp), c, L @ np.swapaxes(L, -1, -2), A, b, nu)


@pytest.mark.slow
def test_matches_scipy_optimum():
    """From the EM's solution scipy (BFGS on the independent NumPy likelihood, unconstrained
    parameters) finds nothing higher, and the gradient there is ~0."""
    n, k, d = 2000, 3, 1
    sc, X, Y, est = _exact_fit(n, 21, tol=1e-13)
    assert est.status_ == ["tol"] and est.n_floored_[0] == 0
    G = MixingMeasure(est.params_.beta0[0], est.params_.beta1[0], est.params_.eta[0])
    th0 = _unconstrained(G, d)

    def nll(th):
        return -_np_loglik(X[0], Y[0], _measure(th, k, d))

    np.testing.assert_allclose(-nll(th0), est.loglik_[0], rtol=1e-11)
    res = minimize(nll, th0, method="BFGS", options={"gtol": 1e-9})
    assert -res.fun <= est.loglik_[0] + 1e-8 * n, (-res.fun - est.loglik_[0])
    h = 1e-6
    grad = np.array([(nll(th0 + h * e) - nll(th0 - h * e)) / (2 * h) for e in np.eye(th0.size)])
    assert np.max(np.abs(grad)) < 1e-3, grad  # per-sample score ~1e-6: the total gradient of n = 2000 terms ~ 0


@pytest.mark.slow
def test_batched_equals_one_at_a_time():
    sc = GLLiMScenario(_truth(), 4)
    X, Y = _data(sc, 600, 3, 31)
    rng = np.random.default_rng(32)
    from moestat.estimators.gllim import random_gllim_start

    init = MixingMeasure.stack([MixingMeasure.stack([sc.near_truth_start(0.2, rng), random_gllim_start(X[r], Y[r], 4, rng)])
                                for r in range(3)])  # [R = 3, S = 2]
    batch = GLLiMEM(4, max_iter=400).fit(X, Y, init=init)
    for r in range(3):
        one = GLLiMEM(4, max_iter=400).fit(X[r:r + 1], Y[r:r + 1], init=MixingMeasure(*(a[r:r + 1] for a in (init.beta0, init.beta1, init.eta))))
        assert one.status_[0] == batch.status_[r] and one.n_iter_[0] == batch.n_iter_[r]
        np.testing.assert_allclose(one.loglik_[0], batch.loglik_[r], rtol=1e-12)
        for a, b in zip((one.params_.beta0, one.params_.beta1, one.params_.eta), (batch.params_.beta0, batch.params_.beta1, batch.params_.eta)):
            np.testing.assert_allclose(a[0], b[r], rtol=1e-9, atol=1e-12)


def test_floor_is_reported_and_a_failed_start_is_kept():
    """A sample whose first atom sits on one repeated x makes the covariance floor bind: counted in
    n_floored_; a start whose atom gets no responsibility at all stops with linalg_error and keeps
    its last finite parameters -- the replicate is never dropped."""
    rng = np.random.default_rng(41)
    n = 400
    X = np.concatenate([np.zeros((n // 2, 1)), rng.normal(1.0, 0.3, (n // 2, 1))])
    Y = np.concatenate([rng.normal(0.0, 0.1, n // 2), 2.0 * X[n // 2:, 0] + rng.normal(0.0, 0.1, n // 2)])
    start = join_measure(np.log([0.5, 0.5]), np.array([[0.0], [1.0]]), np.array([[[0.01]], [[0.1]]]), np.array([[0.0], [2.0]]),
                         np.array([0.0, 0.0]), np.array([0.01, 0.01]))
    est = GLLiMEM(2, max_iter=50).fit(X, Y, init=start)
    assert est.n_floored_[0] > 0
    assert np.isfinite(est.loglik_[0])
    # an atom 1e3 away with a tiny covariance: its responsibilities underflow to 0, its M-step is singular
    far = join_measure(np.log([0.5, 0.5]), np.array([[0.5], [1e3]]), np.array([[[0.5]], [[1e-4]]]), np.array([[1.0], [0.0]]),
                       np.array([0.0, 0.0]), np.array([1.0, 1.0]))
    bad = GLLiMEM(2, max_iter=50).fit(np.stack([X, X]), np.stack([Y, Y]), init=MixingMeasure.stack([start, far]))
    assert bad.status_[1] == "linalg_error" and not bad.converged_[1]
    assert bad.params_.beta0.shape == (2, 2) and np.all(np.isfinite(bad.params_.eta[1]))
    assert np.isfinite(bad.loglik_[1])


def _crpe_dbar(pi0, c0, G0, A0, b0, nu0, pi, c, G, A, b, nu):
    """gauss_loss_GLLiM1 of CRPE-GMoE (discrepancies.py), written out for d = 1 from its formula."""
    rbar = [0, 1, 4, 6]
    K, K0 = len(pi), len(pi0)
    D = np.array([[abs(c0[j] - c[i]) + abs(G0[j] - G[i]) + abs(A0[j] - A[i]) + abs(b0[j] - b[i]) + abs(nu0[j] - nu[i])
                   for j in range(K0)] for i in range(K)])
    vor = D.argmin(1)
    counts = np.bincount(vor, minlength=K0)
    s = 0.0
    for i in range(K):
        j = vor[i]
        if counts[j] == 1:
            s += pi[i] * D[i, j]
        else:
            rb = rbar[counts[j]]
            s += pi[i] * (abs(c[i] - c0[j]) ** rb + abs(G[i] - G0[j]) ** (rb / 2) + abs(A[i] - A0[j]) ** 2
                          + abs(b[i] - b0[j]) ** rb + abs(nu[i] - nu0[j]) ** (rb / 2))
    return s + sum(abs(pi[vor == j].sum() - pi0[j]) for j in range(K0))


def test_dbar_is_crpe_gmoe_formula():
    sc = load_scenario(str(MODEL1))
    assert sc.losses[0] == gllim_dbar_spec() and sc.predicted == {"Dbar": -0.5}
    rng = np.random.default_rng(51)
    fits = MixingMeasure.stack([sc.near_truth_start(s, rng) for s in (0.01, 0.05, 0.1, 0.3) for _ in range(5)])
    ours = sc.loss_columns(fits, sc.holdout(256))["Dbar"]
    t = [a[..., 0] if a.ndim > 1 else a for a in split_measure(sc.truth, 1)]
    t = [np.exp(t[0])] + [np.asarray(a).reshape(3) for a in t[1:]]
    for r in range(fits.beta0.shape[0]):
        f = split_measure(MixingMeasure(fits.beta0[r], fits.beta1[r], fits.eta[r]), 1)
        f = [np.exp(f[0])] + [np.asarray(a).reshape(4) for a in f[1:]]
        np.testing.assert_allclose(ours[r], _crpe_dbar(*t, *f), rtol=1e-12)


def test_scenario_file_and_wiring():
    from moestat.estimators.gllim import GLLiMEM as E
    from moestat.rates.resolve import build_estimator
    from moestat.rates.sweep import compute_losses

    sc = load_scenario(str(MODEL1))
    assert sc.setting == "over" and sc.k_fit == 4 and sc.d == 1
    assert isinstance(build_estimator("mle", sc, 100, 0, "cpu"), E)
    for name in ("lse", "null"):
        with pytest.raises(ValueError, match="maximum likelihood"):
            build_estimator(name, sc, 100, 0, "cpu")
    cols = compute_losses(sc, MixingMeasure.stack([sc.near_truth_start(0.0, np.random.default_rng(0))]), sc.holdout(128))
    # at the truth split over 4 atoms (the extra atom a copy of atom 0): D-bar and the regression error are 0
    assert cols["Dbar"][0] == pytest.approx(0.0, abs=1e-12) and cols["regression_l2"][0] == pytest.approx(0.0, abs=1e-12)
    base = {"gate": {"normalisation": "gaussian"}, "expert": {"kind": "linear"}, "noise": {"model": "mixture"},
            "input": {"law": "gate"}, "atoms": [dict(beta0=0.0, beta1=[0.0], eta=[1.0, 0.0], variance=0.1)]}
    with pytest.raises(ScenarioFileError, match="gamma"):
        scenario_from_mapping(base, where="f.toml")
    with pytest.raises(ScenarioFileError, match="positive definite"):
        scenario_from_mapping({**base, "atoms": [dict(base["atoms"][0], gamma=[[-1.0]])]}, where="f.toml")
    with pytest.raises(ScenarioFileError, match="Gaussian gate"):
        scenario_from_mapping({**base, "gate": {"normalisation": "softmax"}, "atoms": [dict(base["atoms"][0], gamma=[[1.0]])]})

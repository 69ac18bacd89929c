"""The generic EM's Top-K path made faster for ``topk-over`` (issue 33) against the reference computations
it replaces: the score search's batched candidates against :meth:`GenericEM.loglik` of each, the damped
ascent's per-entry tries against the whole-batch loop, the search of moved entries only against a search
of every entry in every round; and what the mathematics guarantees of the fits (a trace that never
decreases, a Top-K mask that is torch.topk's)."""

import numpy as np
import pytest
import torch

from moestat.estimators import mle_generic as mg
from moestat.estimators import newton
from moestat.model.likelihood import LikelihoodModel, linear_expert
from moestat.model.mixing import MixingMeasure
from moestat.model.protocol import ProtocolGate


def _file(name):
    from moestat.data.scenario_files import load_scenario
    from moestat.rates.catalogue import catalogue_file

    return load_scenario(str(catalogue_file(name)))


def _problem(k=4, K=3, temperature=1.0, B=3, n=400, seed=0):
    em = mg.GenericEM(LikelihoodModel(ProtocolGate(normalisation="softmax", k_active=K, temperature=temperature),
                                      linear_expert(2)), k, 2)
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(B, n, 2, generator=gen, dtype=torch.float64)
    Y = torch.randn(B, n, generator=gen, dtype=torch.float64)
    fv = torch.randn(B, em.mg, generator=gen, dtype=torch.float64)
    eta = torch.randn(B, k, 3, generator=gen, dtype=torch.float64)
    ls2 = 0.3 * torch.randn(B, k, generator=gen, dtype=torch.float64)
    return em, X, Y, fv, eta, ls2


def _reference_logliks(em, fv, j, steps, eta, ls2, X, Y, lf):
    out = []
    for step in steps:
        cand = fv.clone()
        cand[:, j] = step
        out.append(em.loglik(cand, eta, ls2, X, Y, lf))
    return torch.stack(out)


@pytest.mark.parametrize("k, K, temperature", [(4, 3, 1.0), (4, 2, 1.0), (5, 2, 0.7), (3, 1, 1.0)])
def test_the_batched_search_candidates_equal_each_candidates_loglik(k, K, temperature, monkeypatch):
    """Every step of every score coordinate at once, only the moved row and its mask recomputed (and in
    chunks smaller than the batch): the log-likelihoods of GenericEM.loglik at each candidate."""
    em, X, Y, fv, eta, ls2 = _problem(k, K, temperature)
    assert em.affine_gate and em.topk
    lf = em.log_f(eta, ls2, X, Y)
    monkeypatch.setattr(mg, "_SEARCH_CHUNK", 3 * k * X.shape[1] * 5)  # 5 steps per chunk
    for j in em.score_coords:
        steps = [fv[:, j] + float(t) * (fv[:, j].abs() + 0.1) for t in mg._SEARCH_STEPS]
        got = mg._search_logliks(em, fv, j, steps, X, lf)
        ref = _reference_logliks(em, fv, j, steps, eta, ls2, X, Y, lf)
        assert got.shape == (len(steps), X.shape[0])
        assert torch.isfinite(ref).all()
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-12, atol=0)
        assert float((ref.max(0).values - ref.min(0).values).min()) > 1.0  # the steps do change the likelihood


def test_the_batched_search_candidates_with_ties_fall_back_to_torch_topk():
    """Tied scores (a split start: two atoms with the same score row; a candidate row equal to another
    atom's) leave the mask to torch.topk's tie-breaking, as top_k_mask does: the same log-likelihoods."""
    em, X, Y, fv, eta, ls2 = _problem(4, 3)
    # atom 1's score row a copy of atom 0's (free layout: row i at i p .. i p + d - 1, p = 3)
    fv[:, 3:5] = fv[:, 0:2]
    lf = em.log_f(eta, ls2, X, Y)
    for j in em.score_coords:
        steps = [fv[:, j] + float(t) * (fv[:, j].abs() + 0.1) for t in mg._SEARCH_STEPS]
        np.testing.assert_allclose(mg._search_logliks(em, fv, j, steps, X, lf).numpy(),
                                   _reference_logliks(em, fv, j, steps, eta, ls2, X, Y, lf).numpy(), rtol=1e-12)
    # a candidate row equal to another row: atom 2's second coordinate atom 0's, its first stepped onto atom 0's
    em, X, Y, fv, eta, ls2 = _problem(4, 3)
    lf = em.log_f(eta, ls2, X, Y)
    fv[:, 7] = fv[:, 1]
    j = 6
    steps = [fv[:, 0].clone(), fv[:, j] + 0.1]
    got = mg._search_logliks(em, fv, j, steps, X, lf)
    np.testing.assert_allclose(got.numpy(), _reference_logliks(em, fv, j, steps, eta, ls2, X, Y, lf).numpy(), rtol=1e-12)
    assert torch.isfinite(got).all()


def _score_search_reference(em, fv, eta, ls2, X, Y, ll):
    """score_search before issue 33's speed-up: one GenericEM.loglik per step and coordinate."""
    idx = torch.nonzero(em.free).flatten()
    coords = [j for j, flat in enumerate(idx.tolist()) if flat % em.p < em.d]
    fv, best = fv.clone(), ll.clone()
    lf = em.log_f(eta, ls2, X, Y)
    for j in coords:
        scale = fv[:, j].abs() + 0.1
        col, top = fv[:, j].clone(), best.clone()
        for t in mg._SEARCH_STEPS:
            cand = fv.clone()
            cand[:, j] = fv[:, j] + float(t) * scale
            v = em.loglik(cand, eta, ls2, X, Y, lf)
            better = torch.isfinite(v) & (v > top)
            top, col = torch.where(better, v, top), torch.where(better, cand[:, j], col)
        fv[:, j], best = col, top
    return fv, best - ll


def test_the_score_search_equals_the_one_loglik_per_step_reference():
    em, X, Y, fv, eta, ls2 = _problem(4, 3, B=4, n=300, seed=3)
    ll = em.loglik(fv, eta, ls2, X, Y)
    fv1, gain1 = mg.score_search(em, fv, eta, ls2, X, Y, ll)
    fv2, gain2 = _score_search_reference(em, fv, eta, ls2, X, Y, ll)
    np.testing.assert_allclose(fv1.numpy(), fv2.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gain1.numpy(), gain2.numpy(), rtol=1e-9, atol=1e-9)
    assert float(gain1.min()) > 0  # from a random gate the search gains everywhere: not a comparison of no-ops
    # the gain is the log-likelihood's at the new gate, and never negative (a step is kept only if better)
    np.testing.assert_allclose((em.loglik(fv1, eta, ls2, X, Y) - ll).numpy(), gain1.numpy(), rtol=1e-9)


def _ascent_reference(F, theta, lam, g, C, tries=8, f0=None):
    """newton.ascent before issue 33: every try evaluates the whole batch, at the cap too."""
    calls = []
    f0 = F(theta) if f0 is None else f0
    eye = torch.eye(theta.shape[-1], dtype=theta.dtype)
    D = C.diagonal(dim1=-2, dim2=-1).abs() + 1e-12
    out, lam = theta.clone(), lam.clone()
    todo = torch.isfinite(f0) & torch.isfinite(g).all(-1) & torch.isfinite(C).all((-2, -1))
    for _ in range(tries):
        if not bool(todo.any()):
            break
        s, info = torch.linalg.solve_ex(C + lam[..., None, None] * (D.unsqueeze(-1) * eye), g.unsqueeze(-1))
        s = s.squeeze(-1)
        cand = theta + torch.where(torch.isfinite(s) & todo.unsqueeze(-1), s, torch.zeros_like(s))
        f1 = F(cand)
        calls.append(len(cand))
        ok = todo & (info == 0) & torch.isfinite(f1) & (f1 >= f0)
        out = torch.where(ok.unsqueeze(-1), cand, out)
        lam = torch.where(ok, (lam / 3).clamp_min(1e-12), torch.where(todo, (lam * 10).clamp_max(1e12), lam))
        todo = todo & ~ok
    return out, lam, calls


def test_ascent_tries_only_the_entries_still_trying_and_stops_at_the_cap():
    """Per-entry tries give the whole-batch loop's steps and dampings; an entry whose damping is at its
    cap when a try fails is not tried again (the same step would fail again): 5 entries, 1 + 4 + 3 + 1
    + 1 evaluations where the reference makes 8 tries of all 5 (the previous ascent: 40)."""
    a = torch.tensor([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0], [-2.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    theta = torch.zeros(5, 2, dtype=torch.float64)
    g = 2 * (a - theta)  # gradient of F = -|t - a|^2 at theta
    C = 2 * torch.eye(2, dtype=torch.float64).expand(5, 2, 2).clone()
    g[1] = -g[1]  # entry 1: an uphill-looking step that goes down: fails at every damping
    g[3] = -g[3]  # entry 3: the same, with its damping already at the cap
    lam = torch.tensor([1e-6, 1e9, 1e-2, 1e12, 1.0], dtype=torch.float64)
    # entry 2: a curvature too small, so the first two steps overshoot; entry 4 already at its maximum
    C[2] = 0.3 * C[2]
    evaluated = []

    def F_rows(t, rows):
        evaluated.append(rows.tolist())
        return -((t - a[rows]) ** 2).sum(-1)

    F = lambda t: -((t - a) ** 2).sum(-1)  # noqa: E731
    out, lam1 = newton.ascent(F_rows, theta, lam, g, C, subset=True)
    ref, lam_ref, calls = _ascent_reference(F, theta, lam, g, C)
    assert torch.equal(out, ref) and torch.equal(lam1, lam_ref)
    out2, lam2 = newton.ascent(F, theta, lam, g, C)  # the whole-batch form of the same rule
    assert torch.equal(out2, ref) and torch.equal(lam2, lam_ref)
    tries = [sum(b in rows for rows in evaluated[1:]) for b in range(5)]  # evaluated[0]: f0
    assert tries == [1, 4, 3, 1, 1]  # entry 1: 1e9, 1e10, 1e11, then one try at the cap 1e12
    assert sum(len(r) for r in evaluated[1:]) < sum(calls) == 40
    assert float(F(out)[0]) > float(F(theta)[0]) and torch.equal(out[1], theta[1]) and torch.equal(out[3], theta[3])


def _topk_search_reference(model, em, full, X, Y, status, paths, *, rounds, max_iter, tol, var_floor, accelerate,
                           compile="auto"):
    """topk_search before issue 33: every finite entry searched in every round."""
    n = X.shape[1]
    for _ in range(int(rounds)):
        ok = torch.tensor([s != "nonfinite" for s in status])
        if not bool(ok.any()):
            return
        act = torch.nonzero(ok).flatten()
        ll = em.loglik(full.fv[act], full.eta[act], full.ls2[act], X[act], Y[act])
        fv, gain = mg.score_search(em, full.fv[act], full.eta[act], full.ls2[act], X[act], Y[act], ll)
        moved = torch.isfinite(gain) & (gain > tol * n)
        if not bool(moved.any()):
            return
        sel = act[moved]
        sub = mg.fit_generic(model, X[sel], Y[sel], fv[moved], full.eta[sel], full.ls2[sel], max_iter=max_iter, tol=tol,
                             var_floor=var_floor, accelerate=accelerate, polish_iter=0, search_rounds=0, compile=compile)
        full.fv[sel] = torch.as_tensor(sub["fv"], dtype=X.dtype)
        full.eta[sel] = torch.as_tensor(sub["eta"], dtype=X.dtype)
        full.ls2[sel] = torch.as_tensor(sub["ls2"], dtype=X.dtype)
        for j, b in enumerate(sel.tolist()):
            paths[b] += sub["paths"][j].tolist()
            status[b] = sub["status"][j]


@pytest.mark.slow
def test_topk_over_fit_searches_moved_entries_only_and_equals_the_reference(monkeypatch):
    """topk-over's fit (Top-3 of 4 on the Top-2-of-3 truth; SQUAREM, the two-block gate step, the score
    search, the polish) on 3 replicates x 2 starts: each round searches only the entries the previous
    one moved, and the fits are the reference's (every entry searched every round, the previous
    ascent); the traces never decrease (generalised EM, and every search move and polish step kept only
    where the log-likelihood rises)."""
    from moestat.estimators.mle import MLEGaussianMoE

    sc = _file("topk_gmoe_over.toml")
    rng = np.random.default_rng(7)
    data = [sc.sample(400, rng) for _ in range(3)]
    X, Y = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    G0 = MixingMeasure.stack([sc.near_truth_start(0.05, np.random.default_rng(30 + r), n=400) for r in range(3)])

    def fit():
        est = MLEGaussianMoE.for_scenario(sc, max_iter=150, random_state=0)
        return est.fit(X, Y, init=G0)

    searched, real_search = [], mg.score_search
    tol = MLEGaussianMoE.for_scenario(sc, max_iter=150, random_state=0).tol

    def spy(em, fv, eta, ls2, X_, Y_, ll):
        out = real_search(em, fv, eta, ls2, X_, Y_, ll)
        searched.append((fv.shape[0], int((out[1] > tol * X_.shape[1]).sum())))
        return out

    monkeypatch.setattr(mg, "score_search", spy)
    fast = fit()
    assert len(searched) >= 2
    for (_, moved), (size, _) in zip(searched, searched[1:]):
        assert size == moved  # a round searches what the previous one moved (no entry of this fit is nonfinite)
    assert searched[0][0] > searched[-1][0]  # some entry stopped moving before the others
    monkeypatch.setattr(mg, "topk_search", _topk_search_reference)
    monkeypatch.setattr(mg, "ascent", lambda F, th, lam, g, C, tries=8, f0=None, subset=False: _ascent_reference(
        (lambda t: F(t, torch.arange(len(t)))) if subset else F, th, lam, g, C, tries, f0)[:2])
    ref = fit()
    assert list(fast.status_) == list(ref.status_)
    np.testing.assert_allclose(fast.loglik_, ref.loglik_, rtol=1e-10)
    np.testing.assert_array_equal(fast.n_iter_, ref.n_iter_)
    for path in fast.loglik_path_:
        assert np.all(np.diff(path) >= -1e-9 * abs(path[-1])), "the trace decreased"

"""Refinements after the generic EM (:mod:`moestat.estimators.mle_generic`): the coordinate search
on a Top-K gate's scores, which moves the boundaries EM cannot, and the damped Newton polish with
its second-order certificate."""

from __future__ import annotations

import numpy as np
import torch

from moestat.estimators.mle_generic import GenericEM, _ascent, _grad_hess, _State, fit_generic

__all__ = ["score_search", "topk_search", "polish"]


#: Relative steps of the score search (times ``|theta_j| + 0.1``), both signs, from 1e-3 to 1.
_SEARCH_STEPS = np.concatenate([-np.geomspace(1e-3, 1.0, 12), np.geomspace(1e-3, 1.0, 12)])


def score_search(em: GenericEM, fv, eta, ls2, X, Y, ll):
    """One sweep of coordinate search over the gate's *score* parameters (``beta1``) on the observed
    log-likelihood: for each coordinate in turn, the best of :data:`_SEARCH_STEPS` if it increases
    the likelihood, per batch entry.

    A Top-K gate activates the experts of the K largest scores ``beta1_i^T x``: which experts are
    active is piecewise constant in ``beta1``, so no derivative sees a boundary move and EM keeps
    its start's active sets.  A derivative-free move of ``beta1`` can cross them (the coordinate
    descent that Nguyen, Akbarian, Yan & Ho (2024, Appendix D) use beside EM).  Returns the new
    ``fv [B, mg]`` and the gain in log-likelihood ``[B]``.
    """
    idx = torch.nonzero(em.free).flatten()
    coords = [j for j, flat in enumerate(idx.tolist()) if flat % em.p < em.d]
    fv, best = fv.clone(), ll.clone()
    for j in coords:
        scale = fv[:, j].abs() + 0.1
        col, top = fv[:, j].clone(), best.clone()
        for t in _SEARCH_STEPS:
            cand = fv.clone()
            cand[:, j] = fv[:, j] + float(t) * scale
            v = em.loglik(cand, eta, ls2, X, Y)
            better = torch.isfinite(v) & (v > top)
            top, col = torch.where(better, v, top), torch.where(better, cand[:, j], col)
        fv[:, j], best = col, top
    return fv, best - ll


def topk_search(model, em: GenericEM, full: _State, X, Y, status, paths, *, rounds, max_iter, tol, var_floor,
                 accelerate, compile="auto") -> None:
    """Alternate :func:`score_search` and EM until no entry gains more than ``tol * n``; updates
    ``full``, ``status`` and ``paths`` in place (every accepted move and EM step is on the trace, so
    it still never decreases)."""
    n = X.shape[1]
    for _ in range(int(rounds)):
        ok = torch.tensor([s != "nonfinite" for s in status])
        if not bool(ok.any()):
            return
        act = torch.nonzero(ok).flatten()
        ll = em.loglik(full.fv[act], full.eta[act], full.ls2[act], X[act], Y[act])
        fv, gain = score_search(em, full.fv[act], full.eta[act], full.ls2[act], X[act], Y[act], ll)
        moved = torch.isfinite(gain) & (gain > tol * n)
        if not bool(moved.any()):
            return
        sel = act[moved]
        sub = fit_generic(model, X[sel], Y[sel], fv[moved], full.eta[sel], full.ls2[sel], max_iter=max_iter, tol=tol,
                          var_floor=var_floor, accelerate=accelerate, polish_iter=0, search_rounds=0, compile=compile)
        full.fv[sel] = torch.as_tensor(sub["fv"], dtype=X.dtype)
        full.eta[sel] = torch.as_tensor(sub["eta"], dtype=X.dtype)
        full.ls2[sel] = torch.as_tensor(sub["ls2"], dtype=X.dtype)
        for j, b in enumerate(sel.tolist()):
            paths[b] += sub["paths"][j].tolist()  # starts at the searched point
            status[b] = sub["status"][j]


def polish(em: GenericEM, st: _State, X, Y, floor, status, paths, *, tol, max_iter) -> np.ndarray:
    """Damped Newton on the observed log-likelihood for every finite start, with the certificate.

    Coordinates ``(free gate, eta, log sigma^2)``; a step is kept only if the log-likelihood does
    not decrease.  A start whose negative Hessian is positive definite and whose Newton decrement
    ``g^T (-H)^{-1} g / 2`` is at most ``tol * n`` gets status ``"newton"`` (a strict local maximum
    to EM's tolerance, Boyd & Vandenberghe 2004, section 9.5); the others keep EM's status.
    Updates ``st``, ``status`` and ``paths`` in place and returns the accepted steps per start.
    """
    B, n, _ = X.shape
    k, qe = st.eta.shape[1], st.eta.shape[2]
    mg, kq = em.mg, k * qe
    gauss = em.gaussian

    def f(theta, x, y):
        ls2 = theta[..., mg + kq :] if gauss else theta.new_zeros(theta.shape[:-1] + (k,))
        return em.loglik(theta[..., :mg], theta[..., mg : mg + kq].reshape(theta.shape[:-1] + (k, qe)), ls2, x, y)

    theta = torch.cat([st.fv, st.eta.flatten(1)] + ([st.ls2] if gauss else []), 1)
    act = torch.nonzero(torch.tensor([s != "nonfinite" for s in status])).flatten()
    n_newton = np.zeros(B, dtype=int)
    lam = torch.full((B,), 1e-8, dtype=X.dtype)
    for _ in range(int(max_iter) + 1):
        if not act.numel():
            break
        th, x, y = theta[act], X[act], Y[act]
        g, H = _grad_hess(lambda t: f(t, x, y), th)
        L, info = torch.linalg.cholesky_ex(-H)
        dec = torch.cholesky_solve(g.unsqueeze(-1), L).squeeze(-1)
        decrement = 0.5 * (g * dec).sum(-1)
        cert = (info == 0) & torch.isfinite(decrement) & (decrement <= tol * n)
        for j in torch.nonzero(cert).flatten().tolist():
            status[int(act[j])] = "newton"
        act = act[~cert]
        if not act.numel():
            break
        keep = ~cert
        xk, yk = x[keep], y[keep]
        new, lam_a = _ascent(lambda t: f(t, xk, yk), th[keep], lam[act], g[keep], -H[keep])
        if gauss:  # the variance floor of EM
            lo = torch.log(floor[act]).unsqueeze(-1)
            new = torch.cat([new[:, : mg + kq], torch.maximum(new[:, mg + kq :], lo)], 1)
        l_new = f(new, xk, yk)
        l_old = f(th[keep], xk, yk)
        moved = torch.isfinite(l_new) & (l_new >= l_old) & (new != th[keep]).any(-1)
        theta[act] = torch.where(moved.unsqueeze(-1), new, th[keep])
        lam[act] = lam_a
        for j, b in enumerate(act.tolist()):
            if bool(moved[j]):
                n_newton[b] += 1
                paths[b].append(float(l_new[j]))
        act = act[moved]  # a start Newton cannot move keeps EM's status
    st.fv, st.eta = theta[:, :mg], theta[:, mg : mg + kq].reshape(B, k, qe)
    if gauss:
        st.ls2 = theta[:, mg + kq :]
    return n_newton

"""Batched second-order tools: gradient and Hessian, damped ascent steps, the Newton-decrement
certificate, and the one Newton polish loop of the package.

EM is sublinear where the fitted model is over-fitted (two atoms sharing a cell of the truth make
the fraction of missing information approach one), and Newton's method does not care about the
missing information: near a strict local maximum it converges quadratically.  :func:`polish` runs
damped Newton steps on the observed log-likelihood of every entry of a batch after EM; the EMs
supply the gradient and Hessian (analytic for the fused EM, :func:`moestat.estimators.mle_newton.newton_terms`;
:func:`grad_hess` for the generic EM) and their damped step (:func:`cholesky_ascent` or :func:`ascent`).

The stopping rule is a certificate, not a stall test: an entry stops when the negative Hessian is
positive definite (a strict local maximum is near) and the Newton decrement ``lambda^2 / 2 = g^T
(-H)^{-1} g / 2`` -- the log-likelihood the local quadratic model still promises (Boyd &
Vandenberghe 2004, section 9.5, eq. (9.28)) -- is at most ``tol * n``, EM's per-sample tolerance.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch.func import grad, jacfwd

__all__ = ["grad_hess", "certificate", "ascent", "cholesky_ascent", "maximise_concave", "polish"]

_LAM_MAX = 1e12


def grad_hess(F: Callable, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-entry gradient ``[..., m]`` and Hessian ``[..., m, m]`` of ``F(theta [..., m]) -> [...]``
    whose entries are independent: the gradient of the sum, then one forward-mode pass per
    coordinate of a perturbation shared by every entry (:func:`torch.func.jacfwd`)."""
    gsum = grad(lambda t: F(t).sum())
    g = gsum(theta)
    H = jacfwd(lambda dl: gsum(theta + dl))(theta.new_zeros(theta.shape[-1]))
    return g, H


def certificate(g: torch.Tensor, H: torch.Tensor, tol_n: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The second-order certificate of a strict local maximum (module docstring).

    Parameters
    ----------
    g : Tensor, shape ``[B, m]``
    H : Tensor, shape ``[B, m, m]``
        Gradient and Hessian of the log-likelihood.
    tol_n : float
        The bound on the Newton decrement.

    Returns
    -------
    certified : Tensor, shape ``[B]``, bool
        ``-H`` positive definite (Cholesky succeeds), ``g`` finite and ``g^T (-H)^{-1} g / 2 <= tol_n``.
    decrement : Tensor, shape ``[B]``
        ``g^T (-H)^{-1} g / 2``; ``inf`` where ``-H`` is not positive definite or ``g`` not finite.
    """
    L, info = torch.linalg.cholesky_ex(-H)
    pd = (info == 0) & torch.isfinite(g).all(-1)
    d = torch.full(g.shape[:1], math.inf, dtype=g.dtype, device=g.device)
    if bool(pd.any()):
        z = torch.cholesky_solve(g[pd].unsqueeze(-1), L[pd]).squeeze(-1)
        d[pd] = 0.5 * (g[pd] * z).sum(-1)
    return pd & (d <= tol_n), d


def ascent(F: Callable, theta: torch.Tensor, lam: torch.Tensor, g: torch.Tensor, C: torch.Tensor,
           tries: int = 8, f0: torch.Tensor | None = None, subset: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """One Levenberg--Marquardt-damped ascent step of ``F`` per entry.

    Solve ``(C + lam (|diag C| + 1e-12) I) s = g`` (``C``: minus the Hessian, or its positive
    semi-definite part); a step that does not increase ``F`` is retried with ``10 lam`` (up to
    ``tries`` times) and dropped after that; an accepted one divides ``lam`` by 3.

    An entry whose ``lam`` is already at its cap ``1e12`` when a try fails would retry the very same
    step (the same ``lam``, so the same ``s`` and the same ``F``) and fail again: it stops at once,
    with the same result (most of a Top-K gate's score-block tries would be such repeats).

    Parameters
    ----------
    F : callable
        ``[B, m] -> [B]``, entries independent.
    theta : Tensor, shape ``[B, m]``
    lam : Tensor, shape ``[B]``
    g : Tensor, shape ``[B, m]``
    C : Tensor, shape ``[B, m, m]``
    f0 : Tensor, shape ``[B]``, optional
        ``F(theta)`` when the caller has it.
    subset : bool
        ``F(theta_b [b, m], idx [b]) -> [b]`` evaluates the entries ``idx`` only: a try then costs
        only the entries still trying, not the whole batch (the entries are independent, so their
        values are the same).  Only for a batch axis ``[B]`` (``lam`` of shape ``[B]``).

    Returns
    -------
    theta, lam : the new parameters ``[B, m]`` and dampings ``[B]``.
    """
    if theta.shape[-1] == 0:
        return theta, lam
    if subset:
        whole = torch.arange(theta.shape[0], device=theta.device)
        F_all = F

        def F(t):  # noqa: F811 -- the whole batch, for f0
            return F_all(t, whole)
    f0 = F(theta) if f0 is None else f0
    eye = torch.eye(theta.shape[-1], dtype=theta.dtype, device=theta.device)
    D = C.diagonal(dim1=-2, dim2=-1).abs() + 1e-12
    out, lam = theta.clone(), lam.clone()
    todo = torch.isfinite(f0) & torch.isfinite(g).all(-1) & torch.isfinite(C).all((-2, -1))
    for _ in range(tries):
        if not bool(todo.any()):
            break
        s, info = torch.linalg.solve_ex(C + lam[..., None, None] * (D.unsqueeze(-1) * eye), g.unsqueeze(-1))
        s = s.squeeze(-1)
        cand = theta + torch.where(torch.isfinite(s) & todo.unsqueeze(-1), s, torch.zeros_like(s))
        if subset:
            idx = torch.nonzero(todo).flatten()
            f1 = torch.full_like(f0, -math.inf)
            f1[idx] = F_all(cand[idx], idx)
        else:
            f1 = F(cand)
        ok = todo & (info == 0) & torch.isfinite(f1) & (f1 >= f0)
        out = torch.where(ok.unsqueeze(-1), cand, out)
        new_lam = torch.where(ok, (lam / 3).clamp_min(1e-12), torch.where(todo, (lam * 10).clamp_max(_LAM_MAX), lam))
        # a failed entry whose lam did not change (at the cap) would try the same step again
        todo = todo & ~ok & (new_lam != lam)
        lam = new_lam
    return out, lam


def maximise_concave(F: Callable, theta: torch.Tensor, terms: Callable, *, tol: float, max_steps: int = 30,
                     f0: torch.Tensor | None = None, armijo: float = 1e-4,
                     halvings: int = 40) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Newton's method with a backtracking line search, per entry, to the maximum of concave objectives.

    For a concave ``F`` (a weighted multinomial-logistic regression: the expert and gate M-steps of
    the generic EM) Newton's method with Armijo backtracking converges globally, and quadratically
    near the maximum (Boyd & Vandenberghe 2004, Algorithm 9.5 and section 9.5.3).  Each iteration:
    ``terms(theta)`` gives the gradient ``g`` and minus the Hessian ``C``; an entry stops when
    ``C`` is positive definite and its Newton decrement ``g^T C^{-1} g / 2`` (eq. (9.28): what the
    quadratic model still promises) is at most ``tol``.  The others step along ``s = C^{-1} g``
    (``C + 1e-10 |diag C|`` where ``C`` is only semi-definite: a class no sample of the weights
    shows), halving ``t`` from 1 until ``F(theta + t s) >= F(theta) + armijo t g^T s``; an entry no
    halving moves stops (rounding level).  The leading axes of ``theta`` are independent entries.

    Parameters
    ----------
    F : callable
        ``theta [..., m] -> [...]``.
    theta : Tensor, shape ``[..., m]``
    terms : callable
        ``theta [..., m] -> (g [..., m], C [..., m, m])``.
    tol : float
        Bound on the Newton decrement.
    max_steps : int
        Newton steps at most (where the supremum is at infinity -- a separated class -- no finite
        point meets ``tol`` and the entry stops here).
    f0 : Tensor, shape ``[...]``, optional
        ``F(theta)`` when the caller has it.

    Returns
    -------
    theta : Tensor, shape ``[..., m]``
    steps : Tensor, shape ``[...]``, int
        Accepted Newton steps.
    decrement : Tensor, shape ``[...]``
        The Newton decrement at the returned ``theta`` where it was checked last (``inf`` where
        ``C`` was not positive definite); an entry that took ``max_steps`` steps keeps the one
        before its last step.
    """
    lead, m = theta.shape[:-1], theta.shape[-1]
    steps = torch.zeros(lead, dtype=torch.long, device=theta.device)
    dec = torch.full(lead, math.inf, dtype=theta.dtype, device=theta.device)
    if m == 0:
        return theta, steps, dec.zero_()
    theta = theta.clone()
    f = F(theta) if f0 is None else f0.clone()
    act = torch.isfinite(f)
    eye = torch.eye(m, dtype=theta.dtype, device=theta.device)
    for _ in range(int(max_steps) + 1):
        if not bool(act.any()):
            break
        g, C = terms(theta)
        L, info = torch.linalg.cholesky_ex(C + 1e-10 * torch.diag_embed(C.diagonal(dim1=-2, dim2=-1).abs()))
        ok = (info == 0) & torch.isfinite(g).all(-1)
        s = torch.where(ok.unsqueeze(-1), torch.cholesky_solve(torch.where(ok.unsqueeze(-1), g, 0.0).unsqueeze(-1),
                                                              torch.where(ok[..., None, None], L, eye)).squeeze(-1), 0.0)
        gs = (g * s).sum(-1)
        dec = torch.where(act, torch.where(ok, 0.5 * gs, math.inf), dec)
        act = act & ok & (0.5 * gs > tol)
        if not bool(act.any()) or bool((steps >= max_steps).all()):
            break
        act = act & (steps < max_steps)
        t = torch.ones(lead, dtype=theta.dtype, device=theta.device)
        pend = act.clone()
        for _h in range(int(halvings)):
            if not bool(pend.any()):
                break
            cand = theta + torch.where(pend.unsqueeze(-1), t.unsqueeze(-1) * s, 0.0)
            fc = F(cand)
            good = pend & torch.isfinite(fc) & (fc >= f + armijo * t * gs)
            theta = torch.where(good.unsqueeze(-1), cand, theta)
            f = torch.where(good, fc, f)
            steps = steps + good.long()
            pend = pend & ~good
            t = torch.where(pend, t / 2, t)
        act = act & ~pend  # no halving moved it: the rounding level of F
    return theta, steps, dec


def cholesky_ascent(F: Callable, theta: torch.Tensor, f0: torch.Tensor, g: torch.Tensor, A: torch.Tensor,
                    mu: torch.Tensor, project: Callable | None = None, tries: int = 40):
    """One damped Newton step per entry with Marquardt's scaling, by Cholesky.

    Solve ``(A + mu diag(|diag A|)) s = g`` (each coordinate damped by its own curvature: a gate
    slope and a log-variance differ in curvature by orders of magnitude); a candidate
    ``project(theta + s)`` that does not increase ``F`` is retried with ``4 mu`` (``mu * 4^40``
    reaches any scale), an accepted one divides ``mu`` by 3.  Only the entries still pending are
    evaluated.

    Parameters
    ----------
    F : callable
        ``F(cand [b, m], j [b]) -> [b]``: the objective at ``cand`` for the entries at positions ``j``.
    theta : Tensor, shape ``[B, m]``
    f0 : Tensor, shape ``[B]``
        ``F`` at ``theta``.
    g : Tensor, shape ``[B, m]``
    A : Tensor, shape ``[B, m, m]``
        Minus the Hessian.
    mu : Tensor, shape ``[B]``
        Dampings (updated in place).
    project : callable, optional
        ``project(cand [b, m], j [b])``: onto the allowed set (a variance floor).

    Returns
    -------
    theta : ``[B, m]``, moved : ``[B]`` bool, f : ``[B]`` (the objective at the returned ``theta``).
    """
    theta, f = theta.clone(), f0.clone()
    dsc = A.diagonal(dim1=-2, dim2=-1).abs().clamp_min(1e-12)
    pend = torch.ones(theta.shape[0], dtype=torch.bool, device=theta.device)
    for _ in range(tries):
        j = torch.nonzero(pend).flatten()
        if j.numel() == 0:
            break
        Li, info = torch.linalg.cholesky_ex(A[j] + mu[j, None, None] * torch.diag_embed(dsc[j]))
        okc = info == 0
        step = torch.where(okc[:, None], torch.cholesky_solve(g[j].unsqueeze(-1), Li).squeeze(-1), torch.zeros_like(g[j]))
        cand = theta[j] + step
        if project is not None:
            cand = project(cand, j)
        fc = F(cand, j)
        good = okc & torch.isfinite(fc) & (fc >= f[j]) & (cand != theta[j]).any(-1)
        jg = j[good]
        theta[jg], f[jg] = cand[good], fc[good]
        mu[j] = torch.where(good, mu[j] / 3.0, mu[j] * 4.0).clamp(1e-12, 1e12)
        pend[jg] = False
    return theta, ~pend, f


def polish(theta: torch.Tensor, act: torch.Tensor, terms: Callable, ascend: Callable, *, tol_n: float,
           max_iter: int, final_step: bool = False) -> dict:
    """Damped Newton ascent of a batch of objectives to the certificate (module docstring).

    Each iteration: the gradient and Hessian of the entries still running, :func:`certificate`
    (certified entries stop), one damped step (``ascend``); an entry no damping could move is at a
    point where the quadratic model promises nothing the objective can deliver (rounding level): it
    stays uncertified and stops.

    Parameters
    ----------
    theta : Tensor, shape ``[B, m]``
        Starting points (overwritten with the polished ones).
    act : Tensor, shape ``[b]``
        The entries to polish (indices into ``B``).
    terms : callable
        ``terms(act, theta[act]) -> (g [b, m], H [b, m, m])``.
    ascend : callable
        ``ascend(act, theta[act], g, -H) -> (new [b, m], moved [b] bool, f [b])``: one damped step
        and the objective after it.
    tol_n : float
        Bound on the Newton decrement.
    max_iter : int
        Newton iterations: ``max_iter + 1`` certificate checks and ``max_iter`` steps
        (``max_iter + 1`` with ``final_step``: a step after the last check).

    Returns
    -------
    dict
        ``theta [B, m]``, ``certified [B]`` (bool), ``n_iter [B]`` (accepted steps), ``paths`` (list
        of ``B`` lists: the objective after every accepted step), ``decrement [B]``.
    """
    B = theta.shape[0]
    dev = theta.device
    cert = torch.zeros(B, dtype=torch.bool, device=dev)
    dec = torch.full((B,), math.inf, dtype=theta.dtype, device=dev)
    steps = torch.zeros(B, dtype=torch.long, device=dev)
    paths: list[list[float]] = [[] for _ in range(B)]
    for it in range(int(max_iter) + 1):
        if act.numel() == 0:
            break
        th = theta[act]
        g, H = terms(act, th)
        ok, d = certificate(g, H, tol_n)
        dec[act] = d
        cert[act[ok]] = True
        keep = ~ok
        act, th, g, H = act[keep], th[keep], g[keep], H[keep]
        if act.numel() == 0 or (it == max_iter and not final_step):
            break
        new, moved, f = ascend(act, th, g, -H)
        theta[act] = torch.where(moved.unsqueeze(-1), new, th)
        steps[act[moved]] += 1
        for b, v, m in zip(act.tolist(), f.tolist(), moved.tolist()):
            if m:
                paths[b].append(v)
        act = act[moved]  # an entry no step could move keeps EM's status
    return {"theta": theta, "certified": cert, "n_iter": steps, "paths": paths, "decrement": dec}

"""The Newton polish of the fused EM (the softmax-gated Gaussian MoE with linear experts): its
coordinates, and the analytic gradient and Hessian of its log-likelihood.

EM is sublinear where the fitted model is over-fitted: two atoms sharing a cell of the truth make
the fraction of missing information approach one, and EM (even with SQUAREM) crawls -- in model 1
of Nguyen, Nguyen & Ho (2023) with ``K = 3``, 7 of 10 fits at n = 20 000 were still moving after
5 000 iterations (docs/guide/gaussian_moe.rst).  :func:`polish_starts` takes every finite start
after EM (also those EM stopped on ``tol``) through :func:`moestat.estimators.newton.polish` (the
loop and its certificate: negative Hessian positive definite, Newton decrement at most ``tol * n``;
status ``"newton"``), with Levenberg--Marquardt-damped Newton steps
(:func:`~moestat.estimators.newton.cholesky_ascent`) in the unconstrained coordinates of :func:`pack`

    theta = (V_1, ..., V_{k-1}, E_1, ..., E_k, log sigma_1^2, ..., log sigma_k^2)

(gate rows ``(beta1, beta0)`` except the reference, experts ``(a, b)``, log-variances; one
log-variance for ``variance="shared"``) -- also SQUAREM's coordinates in the fused EM.  A step is
kept only if the log-likelihood does not decrease, so the trace stays monotone as EM's does.

The gradient and Hessian are analytic (a mixture's ``grad^2 log sum_i exp(u_i) = sum_i r_i
(grad^2 u_i + grad u_i grad u_i^T) - grad l grad l^T``), accumulated over chunks of samples so
memory stays bounded; ``torch.func.hessian`` of the same function is the test's reference (and
about 30 times slower).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from moestat.estimators import newton

__all__ = ["pack", "unpack", "loglik", "newton_terms", "polish", "polish_starts"]

_LOG2PI = math.log(2.0 * math.pi)
#: samples per chunk of the gradient/Hessian accumulation (bounds the [B, chunk, k, P] temporaries)
CHUNK = 4096


def pack(V: torch.Tensor, E: torch.Tensor, s2: torch.Tensor, shared: bool = False) -> torch.Tensor:
    """``theta [B, P]`` from gate ``V [B, k, p]`` (last row the reference), experts ``E [B, k, p]``
    and variances ``s2 [B, k]``; ``P = (k - 1) p + k p + k`` (``+ 1`` for a shared variance)."""
    ls = torch.log(s2[:, :1] if shared else s2)
    return torch.cat([V[:, :-1].flatten(1), E.flatten(1), ls], 1)


def unpack(theta: torch.Tensor, k: int, p: int, shared: bool = False):
    """Inverse of :func:`pack`: ``(V, E, s2)``."""
    m = (k - 1) * p
    V = torch.cat([theta[:, :m].reshape(-1, k - 1, p), theta.new_zeros(theta.shape[0], 1, p)], 1)
    E = theta[:, m : m + k * p].reshape(-1, k, p)
    s2 = torch.exp(theta[:, m + k * p :]).expand(-1, k) if shared else torch.exp(theta[:, m + k * p :])
    return V, E, s2


def _parts(Xe, y, V, E, s2):
    """Per-sample pieces: ``pi, e, log p(y_n | x_n), r`` (``[B, c, k]`` except the ``[B, c]`` log-likelihood)."""
    log_pi = torch.log_softmax(Xe @ V.transpose(1, 2), -1)
    e = y.unsqueeze(-1) - Xe @ E.transpose(1, 2)
    lj = log_pi - 0.5 * (_LOG2PI + torch.log(s2).unsqueeze(1) + e * e / s2.unsqueeze(1))
    ll = torch.logsumexp(lj, -1)
    return torch.exp(log_pi), e, ll, torch.exp(lj - ll.unsqueeze(-1))


def loglik(Xe: torch.Tensor, y: torch.Tensor, V: torch.Tensor, E: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
    """Observed-data log-likelihood ``[B]`` (sum over samples); ``Xe [B, n, p]`` holds ``x~ = (x, 1)``."""
    out = Xe.new_zeros(Xe.shape[0])
    for a in range(0, Xe.shape[1], CHUNK):
        out = out + _parts(Xe[:, a : a + CHUNK], y[:, a : a + CHUNK], V, E, s2)[2].sum(-1)
    return out


def newton_terms(Xe: torch.Tensor, y: torch.Tensor, V: torch.Tensor, E: torch.Tensor, s2: torch.Tensor,
                 shared: bool = False):
    """Log-likelihood, gradient and Hessian in the coordinates of :func:`pack`.

    Parameters
    ----------
    Xe : Tensor, shape ``[B, n, p]``
        Inputs with the constant last: ``x~ = (x, 1)``.
    y : Tensor, shape ``[B, n]``
    V, E : Tensor, shape ``[B, k, p]``
    s2 : Tensor, shape ``[B, k]``
    shared : bool
        One log-variance for all atoms.

    Returns
    -------
    ll : ``[B]``;  g : ``[B, P]``;  H : ``[B, P, P]`` (the Hessian of the log-likelihood itself:
    negative definite at a strict local maximum).
    """
    B, n, p = Xe.shape
    k = V.shape[1]
    m = (k - 1) * p
    nl = 1 if shared else k
    P = m + k * p + nl
    dt, dev = Xe.dtype, Xe.device
    eye_k = torch.eye(k, dtype=dt, device=dev)
    w = 1.0 / s2  # [B, k]
    ll = Xe.new_zeros(B)
    g = Xe.new_zeros(B, P)
    H = Xe.new_zeros(B, P, P)
    for a in range(0, n, CHUNK):
        x, yy = Xe[:, a : a + CHUNK], y[:, a : a + CHUNK]
        c = x.shape[1]
        pi, e, lln, r = _parts(x, yy, V, E, s2)
        ll = ll + lln.sum(-1)
        ew = e * w.unsqueeze(1)  # d log N_i / d mu_i
        dl = 0.5 * (e * ew) - 0.5  # d log N_i / d log sigma_i^2
        # D[b, n, i, :] = gradient of u_i = log pi_i + log N_i in theta
        Dg = (eye_k[:, : k - 1] - pi[:, :, None, : k - 1]).unsqueeze(-1) * x[:, :, None, None, :]
        DE = (eye_k * ew.unsqueeze(-1)).unsqueeze(-1) * x[:, :, None, None, :]
        Dl = dl.unsqueeze(-1) if shared else eye_k * dl.unsqueeze(-1)
        D = torch.cat([Dg.reshape(B, c, k, m), DE.reshape(B, c, k, k * p), Dl], -1)  # [B, c, k, P]
        gn = (r.unsqueeze(-1) * D).sum(2)  # [B, c, P]
        g = g + gn.sum(1)
        # the covariance of grad u_i under the responsibilities
        H = H + torch.einsum("bci,bcip,bciq->bpq", r, D, D) - torch.einsum("bcp,bcq->bpq", gn, gn)
        # sum_i r_i grad^2 u_i: the gate's log-softmax Hessian (sum_i r_i = 1) ...
        Pf = pi[..., : k - 1]
        W = Pf.unsqueeze(-1) * (torch.eye(k - 1, dtype=dt, device=dev) - Pf.unsqueeze(-2))  # [B, c, k-1, k-1]
        H[:, :m, :m] -= torch.einsum("bcjl,bcs,bct->bjslt", W, x, x).reshape(B, m, m)
        # ... and each expert's Gaussian block in (E_i, log sigma_i^2)
        rw = r * w.unsqueeze(1)
        EE = torch.einsum("bci,bcs,bct->bist", rw, x, x)  # [B, k, p, p]
        El = torch.einsum("bci,bcs->bis", r * ew, x)  # [B, k, p]
        ll2 = 0.5 * (r * e * ew).sum(1)  # [B, k]
        for i in range(k):
            s = slice(m + i * p, m + (i + 1) * p)
            li = m + k * p + (0 if shared else i)
            H[:, s, s] -= EE[:, i]
            H[:, s, li] -= El[:, i]
            H[:, li, s] -= El[:, i]
            H[:, li, li] -= ll2[:, i]
    return ll, g, H


def polish(Xe: torch.Tensor, y: torch.Tensor, V: torch.Tensor, E: torch.Tensor, s2: torch.Tensor,
           floor: torch.Tensor, *, tol: float = 1e-10, max_iter: int = 100, shared: bool = False) -> dict:
    """Damped Newton (Levenberg--Marquardt) ascent of the log-likelihood from ``(V, E, s2)``.

    Parameters
    ----------
    Xe : Tensor, shape ``[B, n, p]``
    y : Tensor, shape ``[B, n]``
    V, E : Tensor, shape ``[B, k, p]``
    s2 : Tensor, shape ``[B, k]``
    floor : Tensor, shape ``[B]``
        Variance floor of each entry (a candidate below it is clamped onto it).
    tol : float
        Per-sample tolerance of the Newton decrement.
    max_iter : int
        Newton iterations (each: one gradient/Hessian evaluation and one or more trial steps).
    shared : bool

    Returns
    -------
    dict
        ``V, E, s2``; ``loglik [B]``; ``certified [B]`` (bool: negative Hessian positive definite
        and decrement <= ``tol * n``); ``n_iter [B]`` (accepted steps); ``paths`` (list of the
        accepted log-likelihoods, per entry); ``decrement [B]``.
    """
    B, n, p = Xe.shape
    k = V.shape[1]
    th = pack(V, E, s2, shared)
    lfloor = torch.log(floor).unsqueeze(-1)
    nl = 1 if shared else k
    ll = loglik(Xe, y, *unpack(th, k, p, shared))
    mu = torch.full((B,), 1e-6, dtype=th.dtype, device=th.device)

    def terms(act, t):
        return newton_terms(Xe[act], y[act], *unpack(t, k, p, shared), shared=shared)[1:]

    def ascend(act, t, g, A):
        def project(cand, j):  # the variance floor: a log-variance below it is clamped onto it
            return torch.cat([cand[:, :-nl], torch.maximum(cand[:, -nl:], lfloor[act[j]].expand(-1, nl))], 1)

        def F(cand, j):
            return loglik(Xe[act[j]], y[act[j]], *unpack(cand, k, p, shared))

        m = mu[act]
        new, moved, f = newton.cholesky_ascent(F, t, ll[act], g, A, m, project)
        mu[act], ll[act] = m, f
        return new, moved, f

    out = newton.polish(th, torch.nonzero(torch.isfinite(ll)).flatten(), terms, ascend, tol_n=tol * n, max_iter=max_iter)
    V1, E1, s21 = unpack(out["theta"], k, p, shared)
    return {"V": V1, "E": E1, "s2": s21.contiguous(), "loglik": ll, "certified": out["certified"],
            "n_iter": out["n_iter"], "paths": out["paths"], "decrement": out["decrement"]}


def polish_starts(X: torch.Tensor, Y: torch.Tensor, rep: torch.Tensor, V: torch.Tensor, E: torch.Tensor,
                  s2: torch.Tensor, status: list, paths: list, *, var_floor: float, tol: float, max_iter: int,
                  shared: bool) -> np.ndarray:
    """:func:`polish` every finite start of a batched EM fit, in place (the last step of
    :func:`moestat.estimators.mle.fit_em`).

    ``X [R, n, d]``, ``Y [R, n]``; ``rep [B]`` maps a start to its replicate; ``V, E [B, k, p]``,
    ``s2 [B, k]`` are overwritten with the polished values, ``status`` (length ``B``) gets
    ``"newton"`` where the certificate holds, and ``paths[b]`` (the trace of start ``b``) the
    accepted log-likelihoods.  Returns the accepted Newton steps per start, ``[B]``.

    Starts EM stopped on ``tol`` are polished too: in a crawl EM's per-iteration change can fall
    below ``tol`` well short of the maximum (measured: 0.012 of log-likelihood at n = 20 000 on
    model 1 with K = 3).
    """
    n_newton = np.zeros(len(status), dtype=int)
    left = [b for b in range(len(status)) if status[b] != "nonfinite"]
    if not left:
        return n_newton
    li = torch.as_tensor(left, device=X.device)
    Xe = torch.cat([X[rep[li]], torch.ones_like(X[rep[li], :, :1])], -1)
    floor = (var_floor * Y.var(dim=1).clamp_min(1e-300))[rep[li]]
    pol = polish(Xe, Y[rep[li]], V[li], E[li], s2[li], floor, tol=tol, max_iter=max_iter, shared=shared)
    V[li], E[li], s2[li] = pol["V"], pol["E"], pol["s2"]
    for j, b in enumerate(left):
        paths[b].extend(pol["paths"][j])
        n_newton[b] = int(pol["n_iter"][j])
        if bool(pol["certified"][j]):
            status[b] = "newton"
    return n_newton

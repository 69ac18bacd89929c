"""The joint Gaussian-gated MoE (GLLiM) as a model: its measure layout, density and mean function.

The model of Nguyen, Nguyen, Nguyen & Ho (2024, "Towards Convergence Rates for Parameter
Estimation in Gaussian-gated Mixture of Experts", AISTATS 2024) is the *joint* Gaussian locally
linear mapping (GLLiM; Deleforge, Forbes & Horaud 2015) of ``(x, y)``::

    x ~ sum_i pi_i N(c_i, Gamma_i),      y | x, i ~ N(a_i^T x + b_i, nu_i).

The measure layout (:class:`~moestat.model.mixing.MixingMeasure`): ``beta0 = log pi``, ``beta1 =
c``, ``eta = (a [d], b, nu, vec Gamma [d*d])`` (row-major).  Why here and not beside the EM
(:mod:`moestat.estimators.gllim`): a scenario (:mod:`moestat.data.gllim_scenarios`) samples and
judges the model without choosing how it is fitted, so the model's functions must not live in
the estimators' package.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from moestat.model.mixing import MixingMeasure

__all__ = ["split_measure", "join_measure", "gllim_log_components", "gllim_loglik", "gllim_mean"]

_LOG2PI = math.log(2.0 * math.pi)


# ---- layout -----------------------------------------------------------------------------------
def split_measure(G: MixingMeasure, d: int):
    """``(logpi, c, Gamma, A, b, nu)`` of a GLLiM measure (NumPy or torch, any batch shape).

    Parameters
    ----------
    G : MixingMeasure
        ``beta0 [..., k]`` (log pi), ``beta1 [..., k, d]`` (c), ``eta [..., k, d + 2 + d*d]``.
    d : int

    Returns
    -------
    tuple
        ``logpi [..., k]``, ``c [..., k, d]``, ``Gamma [..., k, d, d]``, ``A [..., k, d]``,
        ``b [..., k]``, ``nu [..., k]``.
    """
    eta = G.eta
    if eta.shape[-1] != d + 2 + d * d:
        raise ValueError(f"a GLLiM atom's eta is (a [d], b, nu, vec Gamma [d*d]): {d + 2 + d * d} entries for d = {d}, "
                         f"got {eta.shape[-1]}")
    Gamma = eta[..., d + 2:].reshape(eta.shape[:-1] + (d, d))
    return G.beta0, G.beta1, Gamma, eta[..., :d], eta[..., d], eta[..., d + 1]


def join_measure(logpi, c, Gamma, A, b, nu) -> MixingMeasure:
    """The inverse of :func:`split_measure` (NumPy arrays or torch tensors, not mixed)."""
    lib = torch if isinstance(logpi, torch.Tensor) else np
    d = c.shape[-1]
    flat = Gamma.reshape(tuple(Gamma.shape[:-2]) + (d * d,))
    cat = torch.cat if lib is torch else np.concatenate
    return MixingMeasure(logpi, c, cat([A, b[..., None], nu[..., None], flat], -1))


# ---- densities --------------------------------------------------------------------------------
def gllim_log_components(X: torch.Tensor, Y: torch.Tensor, logpi, c, L, A, b, nu) -> torch.Tensor:
    """``log pi_i + log N(x_n; c_i, Gamma_i) + log N(y_n; a_i^T x_n + b_i, nu_i)``, ``[B, k, n]``.

    Parameters
    ----------
    X : Tensor ``[B, n, d]``
    Y : Tensor ``[B, n]``
    logpi : Tensor ``[B, k]``
    c : Tensor ``[B, k, d]``
    L : Tensor ``[B, k, d, d]``
        Lower Cholesky factor of each ``Gamma_i``.
    A : Tensor ``[B, k, d]``
    b, nu : Tensor ``[B, k]``
    """
    d = X.shape[-1]
    diff = X[:, None, :, :] - c[:, :, None, :]  # [B, k, n, d]
    z = torch.linalg.solve_triangular(L, diff.transpose(-1, -2), upper=False)  # [B, k, d, n]
    quad = (z * z).sum(-2)
    logdet = 2.0 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)  # [B, k]
    lx = -0.5 * (d * _LOG2PI + logdet[..., None] + quad)
    mu = torch.einsum("bnd,bkd->bkn", X, A) + b[..., None]
    ly = -0.5 * (_LOG2PI + torch.log(nu)[..., None] + (Y[:, None, :] - mu) ** 2 / nu[..., None])
    return logpi[..., None] + lx + ly


def gllim_loglik(X, Y, G: MixingMeasure) -> np.ndarray:
    """The joint log-likelihood ``l(G) = sum_n log sum_i pi_i N(x_n; c_i, Gamma_i) N(y_n; a_i^T x_n
    + b_i, nu_i)`` of each replicate -- e.g. at the true measure, beside a fit's ``loglik_``.

    ``pi`` is ``softmax(beta0)`` (a measure whose weights do not sum to one is read as normalised).

    Parameters
    ----------
    X : array ``[R, n, d]`` (or ``[n, d]``)
    Y : array ``[R, n]`` (or ``[n]``)
    G : MixingMeasure
        Batch ``()`` (the same measure for every replicate) or ``(R,)``; GLLiM layout
        (:func:`split_measure`).

    Returns
    -------
    ndarray, shape ``[R]`` (``-inf`` where a covariance is not positive definite or a variance not
    positive).
    """
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float64))
    Yt = torch.as_tensor(np.asarray(Y, dtype=np.float64))
    if Xt.ndim == 2:
        Xt, Yt = Xt[None], Yt[None]
    R, n, d = Xt.shape
    P = G.torch()
    if not P.batch_shape:
        P = MixingMeasure(*(a.expand((R,) + tuple(a.shape)) for a in (P.beta0, P.beta1, P.eta)))
    logpi, c, Gamma, A, b, nu = split_measure(P, d)
    logpi = logpi - torch.logsumexp(logpi, -1, keepdim=True)
    L, info = torch.linalg.cholesky_ex(Gamma)
    ok = (info == 0).all(-1) & (nu > 0).all(-1)
    L = torch.where((info == 0)[..., None, None], L, torch.eye(d, dtype=L.dtype).expand_as(L))
    lc = gllim_log_components(Xt, Yt, logpi, c, L, A, b, torch.where(nu > 0, nu, torch.ones_like(nu)))
    ll = torch.logsumexp(lc, dim=1).sum(-1)
    return torch.where(ok, ll, torch.full_like(ll, -math.inf)).numpy()


def gllim_mean(X, G: MixingMeasure) -> np.ndarray:
    """The regression function ``E[y | x] = sum_i w_i(x) (a_i^T x + b_i)`` with the Gaussian gate
    ``w_i(x) = pi_i N(x; c_i, Gamma_i) / sum_j pi_j N(x; c_j, Gamma_j)``.

    Parameters
    ----------
    X : array ``[n, d]`` or ``[R, n, d]``
    G : MixingMeasure, batch ``()`` or ``(R,)``

    Returns
    -------
    ndarray ``[R, n]`` (``[1, n]`` for an unbatched measure and ``X``)
    """
    P = G.numpy()
    Xa = np.asarray(X, dtype=np.float64)
    if not P.batch_shape:
        P = MixingMeasure(P.beta0[None], P.beta1[None], P.eta[None])
    R = P.beta0.shape[0]
    if Xa.ndim == 2:
        Xa = np.broadcast_to(Xa, (R,) + Xa.shape)
    d = Xa.shape[-1]
    Xt = torch.as_tensor(np.array(Xa, dtype=np.float64))  # a writable copy (Xa may be a broadcast view)
    logpi, c, Gamma, A, b, nu = split_measure(P.torch(), d)
    L = torch.linalg.cholesky(Gamma)
    # the y-part does not enter the gate: evaluate the components at y = mean so it cancels exactly
    lx = gllim_log_components(Xt, torch.zeros(Xt.shape[:2], dtype=torch.float64), logpi, c, L,
                              torch.zeros_like(A), torch.zeros_like(b), torch.ones_like(nu))
    w = torch.softmax(lx, dim=1)  # [R, k, n]
    mu = torch.einsum("bnd,bkd->bkn", Xt, A) + b[..., None]
    return (w * mu).sum(1).numpy()

"""The softmax-gated Gaussian mixture of experts: conditional density, log-likelihood, sampling.

Model (Nguyen, Nguyen & Ho 2023, eq. (1); Jordan & Jacobs 1994)::

    p(y | x) = sum_i softmax_i(beta1_i^T x + beta0_i) N(y; a_i^T x + b_i, sigma_i^2).

A measure of this model is a :class:`~moestat.model.mixing.MixingMeasure` whose expert
parameters are ``eta_i = (a_i [d], b_i, sigma_i^2)`` -- the variance **last**, so
``eta [..., k, d + 2]`` -- and whose last atom is the reference (``beta0 = 0``, ``beta1 = 0``),
as everywhere in moestat.  Every function takes NumPy arrays or torch tensors and broadcasts
over leading batch dimensions; the NumPy entry points return NumPy.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from moestat.model.mixing import MixingMeasure

__all__ = ["split_eta", "component_log_joint", "log_likelihood", "mean_function", "sample_y"]

_LOG2PI = math.log(2.0 * math.pi)


def _t(a) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a.to(torch.float64)
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def split_eta(eta):
    """``(a [..., k, d], b [..., k], sigma2 [..., k])`` from ``eta [..., k, d + 2]``."""
    if eta.shape[-1] < 3:
        raise ValueError(f"a Gaussian-MoE eta has d + 2 >= 3 columns (a, b, sigma^2), got {eta.shape[-1]}")
    return eta[..., :-2], eta[..., -2], eta[..., -1]


def component_log_joint(X, Y, G: MixingMeasure) -> torch.Tensor:
    """``log pi_i(x_n) + log N(y_n; a_i^T x_n + b_i, sigma_i^2)`` for every sample and atom.

    Parameters
    ----------
    X : array or Tensor, shape ``[..., n, d]``
    Y : array or Tensor, shape ``[..., n]``
    G : MixingMeasure
        Batch shape broadcastable with ``X``'s leading dimensions; ``eta [..., k, d + 2]``.

    Returns
    -------
    Tensor, shape ``[..., n, k]`` (float64)
    """
    X, Y = _t(X), _t(Y)
    b0, b1, eta = _t(G.beta0), _t(G.beta1), _t(G.eta)
    a, b, s2 = split_eta(eta)
    log_pi = torch.log_softmax(X @ b1.transpose(-1, -2) + b0.unsqueeze(-2), dim=-1)
    resid = Y.unsqueeze(-1) - (X @ a.transpose(-1, -2) + b.unsqueeze(-2))
    s2 = s2.unsqueeze(-2)
    return log_pi - 0.5 * (_LOG2PI + torch.log(s2)) - 0.5 * resid**2 / s2


def log_likelihood(X, Y, G: MixingMeasure) -> np.ndarray:
    """Observed-data log-likelihood ``sum_n log p(y_n | x_n)``, shape ``[...]`` (NumPy)."""
    return torch.logsumexp(component_log_joint(X, Y, G), dim=-1).sum(-1).numpy()


def mean_function(X, G: MixingMeasure) -> np.ndarray:
    """Regression function ``E[y | x] = sum_i pi_i(x) (a_i^T x + b_i)``, shape ``[..., n]`` (NumPy)."""
    X = _t(X)
    b0, b1, eta = _t(G.beta0), _t(G.beta1), _t(G.eta)
    a, b, _ = split_eta(eta)
    pi = torch.softmax(X @ b1.transpose(-1, -2) + b0.unsqueeze(-2), dim=-1)
    mu = X @ a.transpose(-1, -2) + b.unsqueeze(-2)
    if pi.shape[-1] == 2:
        # two atoms (every exact fit of model 1): the sum of the two products written out -- the same
        # number as the reduction along a dimension of two, which costs about a fifth of this
        # function on the CPU (issue 36; IEEE addition is commutative, so any order gives it)
        return (pi[..., 0] * mu[..., 0] + pi[..., 1] * mu[..., 1]).numpy()
    return (pi * mu).sum(-1).numpy()


def sample_y(X: np.ndarray, G: MixingMeasure, rng: np.random.Generator) -> np.ndarray:
    """Draw ``y`` given ``x``: the expert from the gate, then ``N(a_z^T x + b_z, sigma_z^2)``.

    Parameters
    ----------
    X : ndarray, shape ``[n, d]``
    G : MixingMeasure
        Unbatched, ``eta [k, d + 2]``.
    rng : numpy.random.Generator
        Two draws per sample, in this order: ``n`` uniforms (the expert), ``n`` normals.

    Returns
    -------
    ndarray, shape ``[n]``
    """
    G = G.numpy()
    X = np.asarray(X, dtype=np.float64)
    a, b, s2 = split_eta(G.eta)
    k = G.n_atoms
    logits = X @ G.beta1.T + G.beta0  # [n, k]
    # The expert is the number of cumulative gate probabilities c_j = pi_0 + ... + pi_j (j < k - 1)
    # that the uniform u exceeds.  Written column by column (issue 36): NumPy's reductions along a
    # row of k = 2 (max, sum, cumsum, the count) cost about 60% of drawing a data set; the columns
    # give the same floating-point numbers in the same order -- the maximum is exact, pi = exp(logits
    # - max) is the same call on the same [n, k] array, and the sum, the divisions and the running
    # sum add the same terms left to right (tests/model/test_gaussian_moe_sampling.py checks the
    # draws against the row-wise form bit for bit).
    top = logits[:, 0]
    for j in range(1, k):
        top = np.maximum(top, logits[:, j])
    pi = np.exp(logits - top[:, None])
    total = pi[:, 0] + pi[:, 1] if k > 1 else pi[:, 0]
    for j in range(2, k):
        total = total + pi[:, j]
    u = rng.random(X.shape[0])
    z = np.zeros(X.shape[0], dtype=np.intp)
    c = None
    for j in range(k - 1):  # the last cumulative probability is never compared (z <= k - 1)
        q = pi[:, j] / total
        c = q if c is None else c + q
        z += u > c
    mu = np.einsum("nd,nd->n", X, a[z]) + b[z]
    return mu + np.sqrt(s2[z]) * rng.standard_normal(X.shape[0])

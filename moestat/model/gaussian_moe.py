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
    logits = X @ b1.transpose(-1, -2) + b0.unsqueeze(-2)
    mu = X @ a.transpose(-1, -2) + b.unsqueeze(-2)
    if logits.shape[-1] == 2:
        # two atoms (every exact fit of model 1): softmax over two is the logistic function of the
        # difference, pi_0 = sigmoid(l_0 - l_1), pi_1 = sigmoid(l_1 - l_0), and the sum of the two
        # products is written out.  Why: ``torch.softmax`` and a reduction along a last
        # dimension of two cost about 210 ns per sample on the project's 2-core machine (predict()
        # after every fit of the gmoe_exact sweep, a tenth of a unit's time), the rows about 40.  Both
        # are the softmax to the last bit or two of rounding (a relative 2e-16).
        dl = logits[..., 0] - logits[..., 1]
        return (torch.sigmoid(dl) * mu[..., 0] + torch.sigmoid(-dl) * mu[..., 1]).numpy()
    return (torch.softmax(logits, dim=-1) * mu).sum(-1).numpy()


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
    if k == 2:
        return _sample_y_two(X, G, a, b, s2, rng)
    logits = X @ G.beta1.T + G.beta0  # [n, k]
    # The expert is the number of cumulative gate probabilities c_j = pi_0 + ... + pi_j (j < k - 1)
    # that the uniform u exceeds.  Written column by column: NumPy's reductions along a
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


def _sample_y_two(X: np.ndarray, G: MixingMeasure, a: np.ndarray, b: np.ndarray, s2: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """:func:`sample_y` for two atoms, drawing the same numbers with half the exponentials.

    Why: drawing the data is about a tenth of a unit of the ``gmoe_exact`` sweep, and
    most of it was the ``[n, 2]`` logits (a matrix product with an inner dimension of one) and
    their exponentials.  Here the two logits are columns (for ``d = 1`` the product of one term,
    the number the matrix product gives), and of ``exp(l_j - max(l_0, l_1))`` the row's maximum
    gives ``exp(0) = 1``, so one exponential of the other difference gives both -- the same
    differences as the general form, so the same gate probabilities, comparisons and draws bit for
    bit (``tests/model/test_gaussian_moe_sampling.py``).  The noise's scale is taken per atom,
    ``sqrt(s2)[z]`` (the same correctly rounded square roots as ``sqrt(s2[z])``).
    """
    if X.shape[1] == 1:
        l0 = X[:, 0] * G.beta1[0, 0] + G.beta0[0]
        l1 = X[:, 0] * G.beta1[1, 0] + G.beta0[1]
    else:
        logits = X @ G.beta1.T + G.beta0
        l0, l1 = logits[:, 0], logits[:, 1]
    first = l0 >= l1  # atom 0 has the larger logit (where they tie, either: both give exp(0) = 1)
    other = np.exp(np.where(first, l1 - l0, l0 - l1))
    pi0 = np.where(first, 1.0, other)
    total = pi0 + np.where(first, other, 1.0)
    u = rng.random(X.shape[0])
    z = (u > pi0 / total).astype(np.intp)
    mu = np.einsum("nd,nd->n", X, a[z]) + b[z]
    return mu + np.sqrt(s2)[z] * rng.standard_normal(X.shape[0])

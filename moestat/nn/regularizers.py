"""Gate regularisers: ``L_importance`` (Krishnamurthy 2023, Eqs. 3.2-3.3; with ``squared=True`` the
``CV^2`` form of Shazeer et al. 2017 and Datta 2024, used by the routers of :mod:`moestat.nn.routers`)
and the sample-similarity ``L_s`` (Krishnamurthy 2023, Eqs. 9.1-9.3).

Both take the gate probabilities ``p`` of a batch (``[N, M]``, rows summing to 1) and return a
scalar tensor to be *added* to the task loss (their weights are inside them, as in the thesis).
"""

from __future__ import annotations

from typing import Callable

import torch

__all__ = ["importance_loss", "similarity_loss", "euclidean_distances"]


def _check_probs(p: torch.Tensor, min_experts: int = 2) -> None:
    if p.ndim != 2 or p.shape[1] < min_experts:
        raise ValueError(f"gate probabilities must have shape [N, M >= {min_experts}], got {tuple(p.shape)}")


def importance_loss(p: torch.Tensor, weight: float = 1.0, *, squared: bool = False) -> torch.Tensor:
    """``L_importance = w * CV(I)`` with ``I = sum_{x in batch} p_x`` (Krishnamurthy 2023, Eqs. 3.2-3.3).

    The thesis uses the coefficient of variation ``std(I) / mean(I)`` over the ``M`` entries of
    ``I``, not its square as Shazeer et al. (2017); ``squared=True`` gives Shazeer's ``CV^2``.
    The standard deviation is the population one (``1/M``); the thesis does not say which.

    Parameters
    ----------
    p : Tensor, shape ``[N, M]``
        Gate probabilities (or a router's combine weights) of a batch; one expert gives 0.
    weight : float
        ``w_importance`` (thesis grid 0.2-1.0).
    squared : bool
        Use ``CV^2`` instead of ``CV``.

    Returns
    -------
    Tensor
        Scalar loss (0 for perfectly balanced importance).

    Examples
    --------
    >>> import torch
    >>> float(importance_loss(torch.full((4, 2), 0.5)))
    0.0
    """
    _check_probs(p, min_experts=1)
    imp = p.sum(0)
    cv = imp.std(correction=0) / imp.mean().clamp_min(torch.finfo(p.dtype).tiny)
    return weight * (cv * cv if squared else cv)


def euclidean_distances(x: torch.Tensor) -> torch.Tensor:
    """Pairwise Euclidean distances of the flattened rows of ``x``: ``[N, N]``, exact zeros on the diagonal."""
    flat = x.reshape(x.shape[0], -1)
    d2 = (flat.unsqueeze(0) - flat.unsqueeze(1)).pow(2).sum(-1)
    pos = d2 > 0
    return torch.where(pos, torch.sqrt(torch.where(pos, d2, torch.ones_like(d2))), torch.zeros_like(d2))


def similarity_loss(
    x: torch.Tensor,
    p: torch.Tensor,
    beta_s: float = 1e-5,
    beta_d: float = 1e-5,
    *,
    distance: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Sample-similarity soft constraint ``L_s`` (Krishnamurthy 2023, Ch. 9, Eqs. 9.1-9.3).

    ``L_s = 1/(N^2-N) sum_{x,x'} [beta_s S(x,x') - beta_d D(x,x')]`` with
    ``S = (1/M) sum_e p(e|x) p(e|x') d(x,x')`` (same-expert term, Eq. 9.2) and
    ``D = 1/(M^2-M) sum_{e != e'} p(e|x) p(e'|x') d(x,x')`` (different-expert term, Eq. 9.3).
    The sum runs over ordered pairs; the diagonal contributes nothing since ``d(x,x) = 0``.

    Because ``sum_{e,e'} p(e|x) p(e'|x') = 1``, ``D = d/(M^2-M) - S/(M-1)``: the loss equals
    ``(beta_s + beta_d/(M-1)) mean S`` minus a parameter-free constant, so ``D`` only re-weights ``S``
    (a property the tests check).

    Parameters
    ----------
    x : Tensor, shape ``[N, ...]``
        Inputs (or any fixed representation) of the batch; only used through ``distance``.
    p : Tensor, shape ``[N, M]``
        Gate probabilities.
    beta_s, beta_d : float
        Weights of the two terms.
    distance : callable, optional
        Maps ``x`` to an ``[N, N]`` distance matrix; default :func:`euclidean_distances` on the
        flattened inputs (the thesis's MNIST choice).

    Returns
    -------
    Tensor
        Scalar loss.
    """
    _check_probs(p)
    n, m = p.shape
    if n < 2:
        raise ValueError("similarity_loss needs a batch of at least 2 samples")
    d = (distance or euclidean_distances)(x).to(p.dtype)
    if d.shape != (n, n):
        raise ValueError(f"distance must return an [N, N] matrix, got {tuple(d.shape)}")
    same = p @ p.T  # sum_e p(e|x) p(e|x')
    total = p.sum(1, keepdim=True) * p.sum(1).unsqueeze(0)  # sum_{e,e'} p p' (= 1 for normalised p)
    s = same * d / m
    dd = (total - same) * d / (m * m - m)
    return (beta_s * s - beta_d * dd).sum() / (n * n - n)

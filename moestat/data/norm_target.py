"""The ``t(X) = ||X||_2`` target and Theorem 1's witnesses, from the Soft MoE implicit-bias paper (2024).

Appendix B draws ``X ~ N(0, 5 I_10)`` afresh for every batch and regresses ``y = ||X||_2``.  We
read the 5 as the variance (the paper does not say).  The best constant predictor is
``E||X||`` and its mean squared error is ``Var ||X|| = s^2 (D - mu_D^2)`` with
``mu_D = sqrt(2) Gamma((D + 1) / 2) / Gamma(D / 2)`` (``||X|| / s`` is chi-distributed with
``D`` degrees of freedom).

Theorem 1's proof (Appendix A) builds, for a router column ``Phi`` (one expert, one slot), pairs
``(A_a, B_a)`` whose slots ``D(A)^T A`` and ``D(B)^T B`` converge as ``a -> infinity`` while
``|t(A) - t(B)|`` grows like ``a``:

- ``Phi_c > 0``: ``A`` has ``A_{1c} = a``, ``A_{2c} = -a``; ``B`` has ``B_{1c} = a`` (token 1
  dominates the dispatch softmax for both), norm gap ``(sqrt 2 - 1) a``;
- ``Phi_c < 0``: the mirror image, ``A_{1c} = -a``, ``A_{2c} = a``, ``B_{1c} = -a``;
- ``Phi_c = 0``: ``B_{1c} = a`` and ``A_{1c} = A_{2c} = a / 2`` (uniform dispatch, identical
  slots), norm gap ``(1 - 1/sqrt 2) a``.

All other entries are 0, so only coordinate ``c`` of the router matters.  The paper uses
``c = 1``; any coordinate works and the one with the largest ``|Phi_c|`` converges fastest.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from scipy.special import gammaln

__all__ = [
    "sample_norm_target",
    "chi_mean",
    "constant_predictor_mse",
    "witness_pairs",
    "slot_gap",
    "theorem1_tolerance",
]


def sample_norm_target(n_samples: int, generator: torch.Generator, dim: int = 10, variance: float = 5.0,
                       dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``X ~ N(0, variance I_dim)`` and ``y = ||X||_2``.

    Parameters
    ----------
    n_samples : int
        Number of draws.
    generator : torch.Generator
        Source of the draws (its device is the output's device).
    dim : int
        Dimension (10 in the paper).
    variance : float
        Per-coordinate variance (5 in the paper).
    dtype : torch.dtype
        Floating dtype of the draws.

    Returns
    -------
    X : Tensor ``[n_samples, dim]``
    y : Tensor ``[n_samples]``

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> X, y = sample_norm_target(4, g)
    >>> X.shape, y.shape
    (torch.Size([4, 10]), torch.Size([4]))
    """
    if not isinstance(generator, torch.Generator):
        raise ValueError("generator must be a torch.Generator")
    if int(n_samples) < 1 or int(dim) < 1:
        raise ValueError(f"n_samples and dim must be positive, got {n_samples!r}, {dim!r}")
    if not (variance > 0 and math.isfinite(variance)):
        raise ValueError(f"variance must be positive and finite, got {variance!r}")
    X = torch.randn(int(n_samples), int(dim), generator=generator, device=generator.device, dtype=dtype)
    X = X * math.sqrt(variance)
    return X, torch.linalg.vector_norm(X, dim=-1)


def chi_mean(dim: int) -> float:
    """``E ||Z||`` for ``Z ~ N(0, I_dim)``: ``sqrt(2) Gamma((dim + 1) / 2) / Gamma(dim / 2)``."""
    return float(math.sqrt(2.0) * np.exp(gammaln((dim + 1) / 2) - gammaln(dim / 2)))


def constant_predictor_mse(dim: int = 10, variance: float = 5.0) -> float:
    """MSE of the best constant predictor of ``||X||``, i.e. ``Var ||X||``.

    Examples
    --------
    >>> round(constant_predictor_mse(10, 5.0), 3)
    2.435
    """
    return float(variance * (dim - chi_mean(dim) ** 2))


def witness_pairs(phi: torch.Tensor | np.ndarray, m: int, a_values: Sequence[float], coord: int | None = None,
                  zero_tol: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Theorem 1's pairs ``(A_a, B_a)`` for a single-slot router column ``phi``.

    Parameters
    ----------
    phi : Tensor or array, shape ``[d]``
        The router column (``router_weight[0]`` of a one-expert layer).
    m : int
        Number of tokens (``m >= 2``).
    a_values : sequence of float
        Scales ``a``.
    coord : int, optional
        Coordinate ``c`` used by the construction; default the one with the largest ``|phi_c|``.
    zero_tol : float
        ``|phi_c| <= zero_tol`` is treated as the ``phi_c = 0`` case.

    Returns
    -------
    A, B : Tensor ``[len(a_values), m, d]`` (float64)
    case : {"positive", "negative", "zero"}

    Examples
    --------
    >>> A, B, case = witness_pairs(torch.tensor([0.5, -0.1]), 3, [10.0])
    >>> case, A[0, :, 0].tolist(), B[0, :, 0].tolist()
    ('positive', [10.0, -10.0, 0.0], [10.0, 0.0, 0.0])
    """
    phi = torch.as_tensor(phi, dtype=torch.float64).detach().cpu().reshape(-1)
    d = phi.numel()
    if int(m) < 2:
        raise ValueError(f"m must be at least 2 (Theorem 1), got {m!r}")
    a = torch.as_tensor(np.asarray(a_values, dtype=np.float64)).reshape(-1)
    if a.numel() == 0 or bool((a <= 0).any()):
        raise ValueError("a_values must be a non-empty list of positive numbers")
    c = int(torch.argmax(phi.abs())) if coord is None else int(coord)
    if not 0 <= c < d:
        raise ValueError(f"coord must lie in [0, {d}), got {coord!r}")
    A = torch.zeros(a.numel(), int(m), d, dtype=torch.float64)
    B = torch.zeros_like(A)
    if phi[c].abs() <= zero_tol:
        case = "zero"
        B[:, 0, c] = a
        A[:, 0, c] = a / 2
        A[:, 1, c] = a / 2
    else:
        s = 1.0 if phi[c] > 0 else -1.0
        case = "positive" if s > 0 else "negative"
        A[:, 0, c] = s * a
        A[:, 1, c] = -s * a
        B[:, 0, c] = s * a
    return A, B, case


def slot_gap(phi: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``||D(B)^T B - D(A)^T A||_2`` for a single-slot router ``phi`` ``[d]`` (eq. 3 of Appendix A).

    Parameters
    ----------
    phi : Tensor ``[d]``
    A, B : Tensor ``[r, m, d]``

    Returns
    -------
    Tensor ``[r]``
    """
    phi = torch.as_tensor(phi, dtype=torch.float64).reshape(-1, 1)

    def slot(X: torch.Tensor) -> torch.Tensor:  # [r, m, d] -> the one slot, [r, d]
        w = torch.softmax(X.to(torch.float64) @ phi, dim=1)  # [r, m, 1], softmax over tokens
        return (w.transpose(1, 2) @ X.to(torch.float64))[:, 0]

    return torch.linalg.vector_norm(slot(B) - slot(A), dim=-1)


def theorem1_tolerance(t: torch.Tensor) -> torch.Tensor:
    """Theorem 1's allowed error ``max{1, t / 20}``."""
    return torch.clamp(t / 20.0, min=1.0)

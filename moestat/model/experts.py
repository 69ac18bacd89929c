"""Expert functions ``h(x, (a, b)) = phi(a^T x + b)`` (Nguyen et al. (2024), Section 5.1).

The expert parameter ``eta`` of one expert is the vector ``(a_1, ..., a_d, b)`` of length
``d + 1``; a stack of experts has shape ``[..., k, d + 1]``.

Which activations satisfy which identifiability condition (Nguyen et al. (2024), Definitions 1 and 2):
gelu, tanh and sigmoid are strongly identifiable; polynomials of degree ``p >= 2`` too; the
identity (linear experts) is only weakly identifiable; relu is not smooth enough for
Definition 1.  :mod:`moestat.model.identifiability` checks these numerically.

A bias inside the activation makes ``phi(a^T x + b)`` satisfy ``x_u dh/db = dh/da_u`` for every
``phi``: under a linear-score gate that is the gate-expert PDE which Nguyen et al. (2025, arXiv
2505.10860, Definition 1) use to exclude linear experts from strong identifiability.  Their strongly
identifiable example has no bias inside the activation and an output scale instead,
``h(x, (eta1, eta2)) = eta2 * phi(eta1^T x)`` (:func:`scaled_expert`, the scenario-file kinds
:data:`SCALED_KINDS`); :mod:`moestat.theorems.hypotheses` checks which form a truth meets.  That form is
linear in ``eta2`` (``d2h/deta2^2 = 0``), so it fails the second-order half of strong
identifiability as this package reads Nguyen, Ho & Rinaldo (2024, least squares)
(``expert_strong_second_order``); the form with neither a bias nor an outer coefficient,
``h(x, a) = phi(a^T x)`` (:func:`bare_expert`, the kinds :data:`BARE_KINDS`), meets both halves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

if TYPE_CHECKING:  # the annotation alias only; experts do not depend on gates
    from moestat.model.gates import TensorLike

__all__ = ["ACTIVATIONS", "SCALED_KINDS", "BARE_KINDS", "Expert", "activation_fn"]

ACTIVATIONS = ("identity", "gelu", "relu", "tanh", "sigmoid", "poly")
#: scenario-file expert kinds ``eta2 * phi(eta1^T x)`` (:func:`scaled_expert`): ``scaled_<phi>``
SCALED_KINDS = ("scaled_gelu", "scaled_tanh", "scaled_sigmoid")
#: scenario-file expert kinds ``phi(a^T x)`` (:func:`bare_expert`): no bias inside ``phi``, no outer
#: coefficient, ``eta = a`` (``q = d``): ``bare_<phi>``
BARE_KINDS = ("bare_gelu", "bare_tanh", "bare_sigmoid")


def activation_fn(name: str, degree: int = 2) -> Callable[[torch.Tensor], torch.Tensor]:
    """The scalar activation ``phi`` called ``name`` (``poly`` is ``z ** degree``), applied elementwise (any shape)."""
    if name == "identity":
        return lambda z: z
    if name == "gelu":
        return torch.nn.functional.gelu  # exact (erf) form
    if name == "relu":
        return torch.relu
    if name == "tanh":
        return torch.tanh
    if name == "sigmoid":
        return torch.sigmoid
    if name == "poly":
        return lambda z: z**degree
    raise ValueError(f"unknown expert activation {name!r}; expected one of {ACTIVATIONS}")


def _activation_grad(name: str, degree: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Analytic ``phi'`` used by the least-squares Jacobian."""
    if name == "identity":
        return torch.ones_like
    if name == "gelu":
        inv_sqrt2 = 0.7071067811865476
        inv_sqrt2pi = 0.3989422804014327

        def g(z: torch.Tensor) -> torch.Tensor:
            cdf = 0.5 * (1.0 + torch.erf(z * inv_sqrt2))
            return cdf + z * inv_sqrt2pi * torch.exp(-0.5 * z * z)

        return g
    if name == "relu":
        return lambda z: (z > 0).to(z.dtype)
    if name == "tanh":
        return lambda z: 1.0 - torch.tanh(z) ** 2
    if name == "sigmoid":
        return lambda z: torch.sigmoid(z) * (1.0 - torch.sigmoid(z))
    if name == "poly":
        return lambda z: degree * z ** (degree - 1) if degree > 0 else torch.zeros_like(z)
    raise ValueError(f"unknown expert activation {name!r}; expected one of {ACTIVATIONS}")


@dataclass(frozen=True)
class Expert:
    """The expert family ``h(x, (a, b)) = phi(a^T x + b)``.

    Parameters
    ----------
    activation : {"identity", "gelu", "relu", "tanh", "sigmoid", "poly"}
        The activation ``phi``.
    degree : int
        Degree ``p`` of the polynomial expert ``(a^T x + b) ** p`` (only for ``poly``).

    Examples
    --------
    >>> import torch
    >>> h = Expert("identity")
    >>> x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    >>> eta = torch.tensor([[3.0, 4.0, 0.5]], dtype=torch.float64)  # a = (3, 4), b = 0.5
    >>> h(x, eta)
    tensor([[11.5000]], dtype=torch.float64)
    """

    activation: str = "gelu"
    degree: int = 2

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown expert activation {self.activation!r}; expected one of {ACTIVATIONS}")
        if isinstance(self.degree, bool) or int(self.degree) != self.degree or self.degree < 1:
            raise ValueError(f"polynomial degree must be a positive integer, got {self.degree!r}")
        object.__setattr__(self, "degree", int(self.degree))

    @staticmethod
    def n_params(d: int) -> int:
        """Length ``q = d + 1`` of one expert's parameter vector ``eta = (a, b)``."""
        return d + 1

    def phi(self, z: torch.Tensor) -> torch.Tensor:
        """The activation applied elementwise."""
        return activation_fn(self.activation, self.degree)(z)

    def dphi(self, z: torch.Tensor) -> torch.Tensor:
        """The derivative ``phi'`` applied elementwise (analytic)."""
        return _activation_grad(self.activation, self.degree)(z)

    def phi_and_dphi(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(phi(z), phi'(z))`` sharing the transcendental work (the LSE's inner loop)."""
        a = self.activation
        if a == "gelu":
            # phi = z Phi(z), phi' = Phi(z) + z N(z): one erf and one exp for both
            # each step in place on this call's own temporaries (the same elementwise kernels on
            # the same operands as the out-of-place form: identical results, fewer arrays)
            cdf = torch.mul(z, 0.7071067811865476).erf_().add_(1.0).mul_(0.5)
            h = z * cdf
            dens = torch.mul(z, -0.5).mul_(z).exp_().mul_(0.3989422804014327).mul_(z)  # z N(z)
            return h, cdf.add_(dens)
        if a == "tanh":
            t = torch.tanh(z)
            return t, 1.0 - t * t
        if a == "sigmoid":
            sg = torch.sigmoid(z)
            return sg, sg * (1.0 - sg)
        return self.phi(z), self.dphi(z)

    def preactivation(self, x: TensorLike, eta: TensorLike) -> torch.Tensor:
        """``a^T x + b`` with shape ``[..., n, k]`` for ``x [..., n, d]`` and ``eta [..., k, d+1]``."""
        x = x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float64)
        eta = eta if isinstance(eta, torch.Tensor) else torch.as_tensor(eta, dtype=x.dtype, device=x.device)
        d = x.shape[-1]
        if eta.shape[-1] != d + 1:
            raise ValueError(f"eta must have d + 1 = {d + 1} entries per expert, got {eta.shape[-1]}")
        return x @ eta[..., :d].transpose(-1, -2) + eta[..., d].unsqueeze(-2)

    def __call__(self, x: TensorLike, eta: TensorLike) -> torch.Tensor:
        """Expert outputs ``h(x_i, eta_j)`` with shape ``[..., n, k]``."""
        return self.phi(self.preactivation(x, eta))

    def describe(self) -> str:
        """Short name: the activation, or ``poly<p>``."""
        return f"poly{self.degree}" if self.activation == "poly" else self.activation

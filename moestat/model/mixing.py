"""Mixing measures ``G = sum_i exp(beta0_i) delta_(beta1_i, eta_i)`` (Nguyen et al. (2024), Section 1).

A :class:`MixingMeasure` stores its atoms as three arrays with optional leading batch
(replicate) dimensions::

    beta0 [..., k]      router biases (the log-masses)
    beta1 [..., k, d]   router directions
    eta   [..., k, q]   expert parameters

Identifiability conventions (Nguyen et al. (2024), A.3): the **last** atom is the reference expert with
``beta0 = 0`` and ``beta1 = 0``, in the truth and in every fit.  Softmax translation invariance
makes any other choice equivalent to this one (see :meth:`MixingMeasure.normalised`).

The compact parameter space of assumption (A.1) is a :class:`ParameterBox`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import numpy.typing as npt
import torch

if TYPE_CHECKING:
    from moestat.model.gates import TensorLike

__all__ = ["MixingMeasure", "ParameterBox"]


def _to_numpy(a: TensorLike) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().numpy().astype(np.float64, copy=False)
    return np.asarray(a, dtype=np.float64)


@dataclass(frozen=True)
class MixingMeasure:
    """Atoms of a (possibly batched) mixing measure.

    Parameters
    ----------
    beta0 : array, shape ``[..., k]``
    beta1 : array, shape ``[..., k, d]``
    eta : array, shape ``[..., k, q]``

    Arrays may be NumPy arrays or torch tensors; :meth:`numpy` and :meth:`torch` convert.

    Examples
    --------
    >>> import numpy as np
    >>> G = MixingMeasure(np.zeros(2), np.array([[1.0, 0.0], [0.0, 0.0]]), np.ones((2, 3)))
    >>> G.n_atoms, G.dim, G.batch_shape
    (2, 2, ())
    """

    beta0: np.ndarray | torch.Tensor
    beta1: np.ndarray | torch.Tensor
    eta: np.ndarray | torch.Tensor

    def __post_init__(self) -> None:
        b0, b1, eta = self.beta0, self.beta1, self.eta
        if b1.ndim < 2 or eta.ndim < 2:
            raise ValueError("beta1 must have shape [..., k, d] and eta [..., k, q]")
        if tuple(b0.shape) != tuple(b1.shape[:-1]) or tuple(eta.shape[:-1]) != tuple(b0.shape):
            raise ValueError(
                "inconsistent atom shapes: beta0 "
                f"{tuple(b0.shape)}, beta1 {tuple(b1.shape)}, eta {tuple(eta.shape)}"
            )

    # ---- shape information -------------------------------------------------------------
    @property
    def n_atoms(self) -> int:
        """Number of atoms ``k``."""
        return int(self.beta0.shape[-1])

    @property
    def dim(self) -> int:
        """Input dimension ``d`` (length of ``beta1_i``)."""
        return int(self.beta1.shape[-1])

    @property
    def eta_dim(self) -> int:
        """Length ``q`` of an expert parameter ``eta_i`` (``d + 1`` for moestat experts)."""
        return int(self.eta.shape[-1])

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Leading (replicate) dimensions, ``()`` for a single measure."""
        return tuple(self.beta0.shape[:-1])

    # ---- conversions -------------------------------------------------------------------
    def numpy(self) -> "MixingMeasure":
        """A copy holding float64 NumPy arrays."""
        return MixingMeasure(_to_numpy(self.beta0), _to_numpy(self.beta1), _to_numpy(self.eta))

    def torch(self, device: str | torch.device | None = None, dtype: torch.dtype = torch.float64) -> "MixingMeasure":
        """A copy holding torch tensors on ``device``."""
        conv = lambda a: torch.as_tensor(_to_numpy(a) if not isinstance(a, torch.Tensor) else a, dtype=dtype, device=device)  # noqa: E731
        return MixingMeasure(conv(self.beta0), conv(self.beta1), conv(self.eta))

    def omega(self) -> np.ndarray | torch.Tensor:
        """``omega_i = (beta1_i, eta_i)`` concatenated: shape ``[..., k, d + q]`` (eq. 5)."""
        if isinstance(self.beta1, torch.Tensor):
            return torch.cat([self.beta1, self.eta], dim=-1)
        return np.concatenate([self.beta1, self.eta], axis=-1)

    def masses(self) -> np.ndarray | torch.Tensor:
        """``exp(beta0_i)``, the atom weights of ``G``: shape ``[..., k]``."""
        return torch.exp(self.beta0) if isinstance(self.beta0, torch.Tensor) else np.exp(self.beta0)

    def finite(self) -> np.ndarray:
        """Whether every parameter of each measure is finite: shape ``batch_shape`` (a diverged fit
        is ``False``; its losses are left NaN rather than computed from infinities)."""
        G = self.numpy()
        return np.isfinite(G.beta0).all(-1) & np.isfinite(G.beta1).all((-2, -1)) & np.isfinite(G.eta).all((-2, -1))

    # ---- batching ----------------------------------------------------------------------
    def __getitem__(self, idx: Any) -> "MixingMeasure":
        """Index the batch dimensions, e.g. ``G[r]`` is replicate ``r``."""
        if not self.batch_shape:
            raise IndexError("an unbatched mixing measure cannot be indexed; use .atom(i)")
        return MixingMeasure(self.beta0[idx], self.beta1[idx], self.eta[idx])

    def __iter__(self) -> Iterator["MixingMeasure"]:
        for r in range(self.batch_shape[0] if self.batch_shape else 0):
            yield self[r]

    def expand(self, n_rep: int) -> "MixingMeasure":
        """Repeat an unbatched measure along a new leading replicate axis of length ``n_rep``."""
        m = self.numpy()
        return MixingMeasure(
            np.broadcast_to(m.beta0, (n_rep, *m.beta0.shape)).copy(),
            np.broadcast_to(m.beta1, (n_rep, *m.beta1.shape)).copy(),
            np.broadcast_to(m.eta, (n_rep, *m.eta.shape)).copy(),
        )

    @staticmethod
    def stack(measures: list["MixingMeasure"]) -> "MixingMeasure":
        """Stack unbatched measures with the same k, d, q into one batch."""
        ms = [m.numpy() for m in measures]
        return MixingMeasure(
            np.stack([m.beta0 for m in ms]), np.stack([m.beta1 for m in ms]), np.stack([m.eta for m in ms])
        )

    def permute(self, perm: npt.ArrayLike) -> "MixingMeasure":
        """Reorder the atoms (last axis of beta0) by ``perm``."""
        perm = np.asarray(perm)
        m = self.numpy()
        return MixingMeasure(m.beta0[..., perm], m.beta1[..., perm, :], m.eta[..., perm, :])

    # ---- conventions -------------------------------------------------------------------
    def normalised(self) -> "MixingMeasure":
        """Shift ``beta0`` so that the last atom's bias is 0 (softmax translation invariance).

        The regression function is unchanged by the shift for the dense gate and for Top-K,
        because selection ignores ``beta0``.
        """
        m = self.numpy()
        return MixingMeasure(m.beta0 - m.beta0[..., -1:], m.beta1, m.eta)

    def satisfies_reference_convention(self, atol: float = 0.0) -> bool:
        """True when the last atom has ``beta0 = 0`` and ``beta1 = 0`` (A.3)."""
        m = self.numpy()
        return bool(np.all(np.abs(m.beta0[..., -1]) <= atol) and np.all(np.abs(m.beta1[..., -1, :]) <= atol))

    def to_dict(self) -> dict:
        """JSON-serialisable nested lists."""
        m = self.numpy()
        return {"beta0": m.beta0.tolist(), "beta1": m.beta1.tolist(), "eta": m.eta.tolist()}

    @staticmethod
    def from_dict(data: dict) -> "MixingMeasure":
        """The inverse of :meth:`to_dict`: float64 NumPy atoms from nested lists."""
        return MixingMeasure(np.asarray(data["beta0"], float), np.asarray(data["beta1"], float), np.asarray(data["eta"], float))


@dataclass(frozen=True)
class ParameterBox:
    """Compact parameter space Theta of assumption (A.1): coordinate-wise bounds.

    Parameters
    ----------
    beta0 : float
        ``|beta0_i| <= beta0``.
    beta1 : float
        ``|beta1_ij| <= beta1``.
    eta : float
        ``|eta_ij| <= eta``.
    """

    beta0: float = 10.0
    beta1: float = 10.0
    eta: float = 10.0

    def __post_init__(self) -> None:
        for name in ("beta0", "beta1", "eta"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"ParameterBox.{name} must be a positive finite number, got {v!r}")

    def contains(self, G: MixingMeasure, atol: float = 1e-12) -> bool:
        """True when every atom of ``G`` (every replicate) lies in the box, up to ``atol``."""
        m = G.numpy()
        return bool(
            np.all(np.abs(m.beta0) <= self.beta0 + atol)
            and np.all(np.abs(m.beta1) <= self.beta1 + atol)
            and np.all(np.abs(m.eta) <= self.eta + atol)
        )

    def clip(self, G: MixingMeasure) -> MixingMeasure:
        """Project ``G`` onto the box."""
        m = G.numpy()
        return MixingMeasure(
            np.clip(m.beta0, -self.beta0, self.beta0),
            np.clip(m.beta1, -self.beta1, self.beta1),
            np.clip(m.eta, -self.eta, self.eta),
        )

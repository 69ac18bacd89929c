"""The MoE regression function ``g_G(x)`` of Nguyen et al. (2024), eqs. (2), (7), (9) and (12).

``g_G(x) = sum_i w_i(x) h(x, eta_i)`` with ``w`` the gate's (Top-K) softmax weights.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from moestat.model.experts import Expert
from moestat.model.gates import Gate, TensorLike
from moestat.model.mixing import MixingMeasure

__all__ = ["MoEModel"]


@dataclass(frozen=True)
class MoEModel:
    """A gate and an expert family; evaluates regression functions of mixing measures.

    Parameters
    ----------
    gate : Gate
        Score function, perturbation and number of activated experts K.
    expert : Expert
        Expert family ``phi(a^T x + b)``.

    Examples
    --------
    >>> import numpy as np
    >>> from moestat import Gate, Expert, MixingMeasure
    >>> m = MoEModel(Gate("linear"), Expert("identity"))
    >>> G = MixingMeasure(np.zeros(1), np.zeros((1, 2)), np.array([[1.0, 0.0, 0.0]]))
    >>> m.predict(np.array([[2.0, 5.0]]), G)
    tensor([2.], dtype=torch.float64)
    """

    gate: Gate
    expert: Expert

    def with_k_active(self, k_active: int | None) -> "MoEModel":
        """The same model with ``k_active`` activated experts (K-bar of the fitted model, eq. (7))."""
        return replace(self, gate=self.gate.with_k_active(k_active))

    @staticmethod
    def _tensors(x: TensorLike, G: MixingMeasure) -> tuple[torch.Tensor, MixingMeasure]:
        x = x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float64)
        Gt = G.torch(device=x.device, dtype=x.dtype) if not isinstance(G.beta0, torch.Tensor) else G
        return x, Gt

    def weights(self, x: TensorLike, G: MixingMeasure) -> torch.Tensor:
        """Gate weights ``[..., n, k]``; batch dims of ``x`` and ``G`` broadcast."""
        x, Gt = self._tensors(x, G)
        return self.gate.weights(x, Gt.beta0, Gt.beta1)

    def expert_outputs(self, x: TensorLike, G: MixingMeasure) -> torch.Tensor:
        """``h(x_i, eta_j)`` with shape ``[..., n, k]``."""
        x, Gt = self._tensors(x, G)
        return self.expert(x, Gt.eta)

    def predict(self, x: TensorLike, G: MixingMeasure) -> torch.Tensor:
        """``g_G(x)`` with shape ``[..., n]``.

        ``x`` is ``[..., n, d]``; ``G`` may carry batch dimensions ``[...]`` that broadcast with
        those of ``x`` (e.g. ``x [R, n, d]`` with ``G`` batched ``[R]``).
        """
        x, Gt = self._tensors(x, G)
        w = self.gate.weights(x, Gt.beta0, Gt.beta1)
        h = self.expert(x, Gt.eta)
        return (w * h).sum(-1)

    def describe(self) -> str:
        """Short name, e.g. ``perturbed(tau=1,1) top-2 / gelu``."""
        return f"{self.gate.describe()} / {self.expert.describe()}"

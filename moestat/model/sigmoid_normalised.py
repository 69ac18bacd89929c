"""Normalised sigmoid gating, and the same gate beside a shared expert (DeepSeek's MoE layer).

DeepSeekMoE (Dai et al. 2024) adds *shared* experts that every input uses with weight one beside the
routed ones; DeepSeek-V3 (DeepSeek-AI 2024) weights the routed experts by sigmoid scores divided by
their sum.  The statistical
paper on that layer is Nguyen, Doan, Pham, Bui, Ho & Rinaldo (2025, arXiv 2505.10860, "On
DeepSeekMoE: Statistical Benefits of Shared Experts and Normalized Sigmoid Gating"); no stored copy
of its sections was found (only its title and a quoted definition), so the forms below
are the architecture's, written in this package's gate vocabulary, not equations copied from it.

``normalised-sigmoid``
    ``w_i(x) = sigmoid(u_i) / sum_j sigmoid(u_j)`` with ``u_i = (s_i(x) + beta0_i) / T`` (Top-K on
    the score first, as for the softmax gate; the selected atoms are renormalised).  Written as a
    softmax of ``log sigmoid(u_i)``, so the softmax gate's code paths (log-weights, Top-K masks, the
    smoothed mask of the least-squares continuation) serve it unchanged.  No reference atom: a
    common shift of ``u`` changes ``sigmoid(u_i) / sum_j sigmoid(u_j)`` (unlike a softmax), so every
    router is a free parameter.

``shared-sigmoid``
    The **last atom is a shared expert**: weight one at every ``x``, its router unused (pinned at
    zero, exactly the layout slot of a softmax gate's reference atom, so the least-squares layout,
    starts and pre-flight need nothing new); atoms ``0 .. k-2`` are routed, weighted by the
    normalised sigmoid above over themselves.  The regression function is
    ``f(x) = h(x, eta_k) + sum_{i<k} w_i(x) h(x, eta_i)``.  Its weights do not sum to one, so it
    has no likelihood (least squares only).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from moestat.model.gate_families import GateFamily

__all__ = ["NormalisedSigmoidGate", "SharedSigmoidGate", "NORMALISED_SIGMOID", "SHARED_SIGMOID"]


class NormalisedSigmoidGate(GateFamily):
    """``w_i = sigmoid(u_i) / sum_j sigmoid(u_j)``, ``u_i = (s_i(x) + beta0_i) / T`` (module docstring)."""

    name = "normalised-sigmoid"
    default_reference = False
    loss_mass = "sigmoid"

    def logits(self, gate: Any, s: torch.Tensor, beta0: torch.Tensor, atom_axis: int = -1) -> torch.Tensor:
        # a softmax of log sigmoid(u) is sigmoid(u_i) / sum_j sigmoid(u_j): every softmax path of the base class applies
        return torch.nn.functional.logsigmoid(super().logits(gate, s, beta0, atom_axis))

    def split_weight(self, gate: Any, x: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor) -> torch.Tensor:
        """``sigmoid(u_i)`` ``[..., n, k]`` before the division by the sum: copies whose ``sigmoid(u)``
        add up to the atom's keep its share."""
        return torch.sigmoid(GateFamily.logits(self, gate, self.score(gate, x, beta1), beta0))


class SharedSigmoidGate(NormalisedSigmoidGate):
    """The last atom a shared expert (weight one, router pinned at zero); the others routed by
    :class:`NormalisedSigmoidGate` over themselves (module docstring).  Least squares only."""

    name = "shared-sigmoid"
    top_k = False
    default_reference = True
    has_likelihood = False
    shared_expert = True

    def check(self, gate: Any) -> None:
        if not gate.reference:
            raise ValueError("the shared-sigmoid gate's last atom is the shared expert: reference must be true (or unset)")

    def weights_from_scores(self, gate: Any, s: torch.Tensor, beta0: torch.Tensor,
                            smooth_topk: float | None = None) -> torch.Tensor:
        if s.shape[-1] < 2:
            raise ValueError("the shared-sigmoid gate needs at least one routed atom besides the shared expert")
        routed = super().weights_from_scores(gate, s[..., :-1], beta0[..., :-1], smooth_topk)
        return torch.cat([routed, torch.ones_like(routed[..., :1])], dim=-1)

    def log_weights_from_scores(self, gate: Any, s: torch.Tensor, beta0: torch.Tensor, normalise: bool = True,
                                atom_axis: int = -1, mask: torch.Tensor | None = None) -> torch.Tensor:
        raise ValueError("the shared-sigmoid gate's weights do not sum to one (a shared expert has weight one): "
                         "it has no likelihood; fit it by least squares")

    def to_convention(self, V: np.ndarray, reference: bool) -> np.ndarray:
        # the shared expert's router is unused: zero it (no shift leaves a normalised sigmoid unchanged)
        V = V.copy()
        V[:, -1, :] = 0.0
        return V

    def truth_error(self, beta0: np.ndarray, beta1: np.ndarray, reference: bool) -> str | None:
        if beta0[-1] != 0 or np.any(beta1[-1] != 0):
            return "with a shared-sigmoid gate the last true atom is the shared expert: its router is unused, write beta0 = 0, beta1 = 0"
        return None


NORMALISED_SIGMOID = NormalisedSigmoidGate()
SHARED_SIGMOID = SharedSigmoidGate()

"""The dense-to-sparse gate with a fitted temperature (Nguyen, Akbarian & Ho (2024), arXiv 2401.13875).

Weights ``w_i(x) = softmax_i((s_i(x) + beta0_i) / tau)`` with the temperature ``tau > 0`` a
*parameter* of the model, shared by every atom, and ``s_i(x) = beta1_i^T x`` (the dense-to-sparse
gate) or ``act(beta1_i^T x)`` (the paper's *activation* dense-to-sparse gate: a scenario file's
``[gate] activation``).  The last atom is the reference: its logit is 0.

What was read.  The stored copies of the paper reachable from this project (sciencestack.ai,
researchtrend.ai, icml.cc, emergentmind.com, paperswithcode) hold its abstract and a third-party
summary only, not its sections, so the exact display of the model and of its losses was not read.
The abstract says that "due to interactions between the temperature and other model parameters via
some partial differential equations, the convergence rates of parameter estimations are slower
than any polynomial rates, and could be as slow as O(1/log(n))", and that an activation gate,
"which routes the output of a linear layer to an activation function before delivering them to the
softmax function", restores polynomial rates.  The form above is the project's.

Where ``tau`` lives -- the design.  The fits of :mod:`moestat.estimators.mle_generic` move the
gate parameters laid out as the rows ``V_i = (beta1_i, beta0_i)`` of ``V [k, d + 1]`` (one
:class:`~moestat.model.mixing.MixingMeasure`: ``beta0 [k]``, ``beta1 [k, d]``), choosing the free
entries with :meth:`GateFamily.free_mask`, and their gate M-step is a damped Newton step on those
free entries with derivatives by :mod:`torch.func` (any gate whose weights are a torch function of
``(beta0, beta1)``).  A separate scalar, or an extra column constrained equal across atoms, would
need a new slot in that layout (estimator and mixing-measure changes).  But a softmax over ``k``
atoms has a reference atom whose logit is fixed at 0, so its row carries no gate parameter; here
**that row carries the temperature**::

    V_i = (beta1_i, beta0_i),   i < k        (the router of atom i)
    V_k = (tau, 0, ..., 0, 0)                 (beta1_k[0] = tau; the other entries pinned at 0)

so ``tau`` is an ordinary free entry of ``V`` (:meth:`TemperatureGate.free_mask`), fitted by the
generic EM exactly like ``beta1`` with no change to the estimator, and every existing gate and
result is untouched (a new registry name).  A fit reports ``tau`` as ``beta1[-1, 0]``; a truth
is written the same way (``[[atoms]]``: the last atom's ``beta1 = [tau, 0, ...]``, ``beta0 = 0``).
A Voronoi loss of the file's ``beta1`` block therefore contains ``|Delta tau|`` through the
reference atom, next to ``||Delta beta1_i||`` -- the separate loss on ``(beta1, tau)`` of the
theorem.

Invariance (the source of the slow rate).  For every ``c != 0`` the rows ``c V`` give the same
weights: ``(c beta1_i^T x + c beta0_i) / (c tau)`` are the same logits (the linear score only; with
an activation ``act(c beta1^T x) != c act(beta1^T x)`` and the invariance is gone).  So the
parameters are identified only up to that ray: a loss on ``beta1`` and ``tau`` separately has no
rate, while the gate itself (the ratios ``beta1 / tau``) is estimated at the density rate.  The
canonical form is the raw one (nothing rescaled), so that this is visible.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from moestat.model.gate_families import GateFamily

__all__ = ["TemperatureGate", "TEMPERATURE"]


class TemperatureGate(GateFamily):
    """``w_i(x) = softmax_i((s_i(x) + beta0_i) / tau)`` over ``i < k`` and the reference logit 0;
    ``tau = beta1[-1, 0]`` a fitted parameter (module docstring).

    The configured ``temperature`` of the gate (a fixed number, 1 by default) multiplies the fitted
    one: logits ``(s_i + beta0_i) / (tau * temperature)``.
    """

    name = "temperature"
    top_k = False
    default_reference = False  # the last row is not zero: it carries tau
    # not invariant to a common shift of beta0 (the reference logit stays 0): the pinned entries of the
    # last row are this gate's own (free_mask), not a shift's
    pins_bias = False

    # ---- the weight formula ----------------------------------------------------------------
    def _logits(self, gate: Any, x: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor) -> torch.Tensor:
        """Logits ``[..., n, k]``: ``(s_i + beta0_i) / tau`` for ``i < k``, 0 for the reference."""
        tau = beta1[..., -1, 0] * gate.temperature  # [...]
        s = gate.score(x, beta1[..., :-1, :])  # [..., n, k - 1]; the reference row is not a router
        lg = (s + beta0[..., :-1].unsqueeze(-2)) / tau[..., None, None]
        return torch.cat([lg, torch.zeros_like(lg[..., :1])], -1)

    def log_weights(self, gate: Any, x: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor,
                    normalise: bool = True) -> torch.Tensor:
        u = self._logits(gate, x, beta0, beta1)
        return torch.log_softmax(u, -1) if normalise else u

    def weights(self, gate: Any, x: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor,
                smooth_topk: float | None = None) -> torch.Tensor:
        return torch.softmax(self._logits(gate, x, beta0, beta1), -1)

    def log_weights_from_scores(self, *args, **kwargs):
        raise NotImplementedError("the temperature gate needs tau (beta1[-1, 0]): use log_weights")

    def weights_from_scores(self, *args, **kwargs):
        raise NotImplementedError("the temperature gate needs tau (beta1[-1, 0]): use weights")

    # ---- free parameters and canonical form ------------------------------------------------
    def free_mask(self, k: int, d: int, reference: bool) -> np.ndarray:
        """Every router row ``i < k`` free; of the last row only ``beta1[-1, 0] = tau``."""
        free = np.ones((k, d + 1), dtype=bool)
        free[-1] = False
        free[-1, 0] = True
        return free

    def to_convention(self, V: np.ndarray, reference: bool) -> np.ndarray:
        """Zero the pinned entries of the last row (the gate does not read them): exact, no shift."""
        V = V.copy()
        V[..., -1, 1:] = 0.0
        return V

    def canonical_bias(self, beta0: np.ndarray) -> np.ndarray:
        return beta0

    def truth_error(self, beta0: np.ndarray, beta1: np.ndarray, reference: bool) -> str | None:
        if reference:
            return "the temperature gate has no zero reference row: its last row carries tau (reference = false)"
        if beta0[-1] != 0 or np.any(beta1[-1, 1:] != 0) or not beta1[-1, 0] > 0:
            return ("with a temperature gate the last true atom is the reference and carries the temperature: "
                    f"beta0 = 0, beta1 = [tau, 0, ...] with tau > 0, got beta0 = {float(beta0[-1]):.6g}, "
                    f"beta1 = {np.asarray(beta1[-1]).tolist()}")
        return None

    # ---- starts ------------------------------------------------------------------------------
    def random_router(self, X: np.ndarray, k: int, rng: np.random.Generator, beta0: np.ndarray,
                      beta1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A uniform gate with ``tau = 1`` (``tau = 0`` would divide by zero)."""
        beta0, beta1 = np.zeros(k), np.zeros((k, X.shape[1]))
        beta1[-1, 0] = 1.0
        return beta0, beta1


TEMPERATURE = TemperatureGate()

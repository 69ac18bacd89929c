"""The Laplace gate of FuseMoE (Han, Nguyen, Harris, Ho & Saria (2024), arXiv 2402.03226).

Weights ``w_i(x) = softmax_i(-||x - beta1_i||_2 + beta0_i)`` (with a temperature ``T``: the logits
over ``T``; Top-K on the score ``-||x - beta1_i||`` before the bias, as for the other gates): the
inner product ``beta1_i^T x`` of the softmax gate replaced by minus the Euclidean distance to a
centre ``beta1_i``, so that the gate is a softmax over Laplace kernels ``exp(-||x - beta1_i||)``.

Which form.  The stored copies of the paper this project could reach hold its abstract and
third-party summaries only, not its Section 3, so the exact display of the gate was not read.  The
form here is "softmax over -||x - beta1_i|| + beta0_i"); it
agrees with the summaries (a distance to a per-expert vector, not an inner product, inside the
softmax) and with the parameters ``(beta0, beta1, a, b, nu)`` whose rates the
paper's Theorem 3.2 states.  No scale of the distance and no other norm is assumed.

Parameterisation.  The weights are invariant to a common shift of ``beta0`` only (a shift of the
centres changes every distance differently), so the last atom's ``beta0`` is pinned at 0 and every
centre is free; a fit is reported in that form and a truth must be written in it
(:meth:`~moestat.model.gate_families.GateFamily.truth_error`), unlike the Gaussian gate, whose
``exp(beta0)`` are renormalised (they are the mixing weights of ``x``; here they are not).  A random
start puts the centres on random inputs (equal centres would give every atom the same gate).

Compact parameter set.  Theorem 3.2 of Han et al. (2024), like the softmax-gated theorems it
follows (Nguyen, Nguyen & Ho 2023), bounds the maximum-likelihood estimate over a compact parameter
set.  Over all of ``R^d`` a centre can run off: far from the inputs ``beta0 - ||x - c|| = beta0 -
||c|| + u^T x + O(||x||^2 / ||c||)`` (``u = c / ||c||``), a linear softmax score the likelihood may
approach at ``||c|| -> infinity`` (unbounded fits of the over-specified Laplace-gated Gaussian MoE
show centres with ``||c||`` in the thousands).
:meth:`LaplaceGate.box_limits` states which coordinates a scenario's ``[box]`` bounds when the file
asks for it (``[fit] gate_in_box = true``): every centre coordinate ``|beta1_ic| <= box.beta1`` and
every free intercept ``|beta0_i| <= box.beta0``; the generic EM then maximises over that box
(:func:`moestat.estimators.mle_generic.fit_generic`, ``gate_box``: each gate step and each
extrapolation projected onto it, a step kept only where its objective at the projected point
increases, so the log-likelihood still never decreases).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from moestat.model.gate_families import GateFamily, centre_offsets, squared_distance, safe_norm

__all__ = ["LaplaceGate", "LAPLACE"]


class LaplaceGate(GateFamily):
    """``w_i(x) = softmax_i((-||x - beta1_i|| + beta0_i) / T)``, the last ``beta0`` pinned at 0."""

    name = "laplace"
    own_score = True
    default_reference = False
    pins_bias = True

    separable_score = True

    def score(self, gate: Any, x: torch.Tensor, beta1: torch.Tensor) -> torch.Tensor:
        # safe_norm: a zero gradient where x sits on a centre (torch.linalg.norm's would be NaN)
        return -safe_norm(x.unsqueeze(-2) - beta1.unsqueeze(-3))

    def score_rows(self, gate: Any, xs: list, beta1: torch.Tensor, grad: bool = False):
        diffs = centre_offsets(xs, beta1)
        sq = squared_distance(diffs)
        pos = sq > 0
        # safe_norm's form: the Newton polish differentiates this score by autograd, and sqrt's
        # derivative at 0 (a sample on a centre) is infinite
        dist = torch.where(pos, torch.sqrt(torch.where(pos, sq, torch.ones_like(sq))), torch.zeros_like(sq))
        if not grad:
            return -dist, None
        # d/dbeta1_ic of -||x - beta1_i|| = (x_c - beta1_ic) / ||x - beta1_i||, and 0 where x sits on
        # the centre (safe_norm's derivative there)
        inv = torch.where(pos, 1.0 / torch.where(pos, dist, torch.ones_like(dist)), torch.zeros_like(dist))
        return -dist, [D * inv for D in diffs]

    def score_rows_hessian(self, gate: Any, xs: list, beta1: torch.Tensor):
        s, ds = self.score_rows(gate, xs, beta1, grad=True)
        # d^2/dbeta1_ic dbeta1_ie of -||x - beta1_i|| = -(delta_ce - v_c v_e) / ||x - beta1_i||, v the unit
        # vector ds; 0 on the centre (the derivative of safe_norm's zero branch)
        inv = torch.where(s < 0, -1.0 / torch.where(s < 0, s, -torch.ones_like(s)), torch.zeros_like(s))
        d = len(xs)
        dds = [[(ds[c] * ds[e] - (1.0 if c == e else 0.0)) * inv for e in range(d)] for c in range(d)]
        return s, ds, dds

    def box_limits(self, k: int, d: int, box: Any) -> np.ndarray:
        """Bounds of the compact gate parameter set: ``|V_ij| <= limits_ij``.

        Parameters
        ----------
        k, d : int
            Atoms and input dimension.
        box : moestat.model.mixing.ParameterBox
            The scenario's ``[box]``: ``beta1`` bounds every centre coordinate, ``beta0`` every intercept.

        Returns
        -------
        ndarray, shape ``[k, d + 1]``
            Columns ``:d`` the centres' bounds, column ``d`` the intercepts' (the layout of the gate rows
            ``(beta1_i, beta0_i)``; the pinned ``beta0_k = 0`` is inside any box).
        """
        lim = np.empty((k, d + 1))
        lim[:, :d] = float(box.beta1)
        lim[:, d] = float(box.beta0)
        return lim

    def random_router(self, X: np.ndarray, k: int, rng: np.random.Generator, beta0: np.ndarray,
                      beta1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Centres on ``k`` random inputs, ``beta0 = 0``."""
        n = X.shape[0]
        return np.zeros(k), X[rng.choice(n, size=k, replace=n < k)]


LAPLACE = LaplaceGate()

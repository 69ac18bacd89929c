"""Mixture likelihoods of the protocol: ``p(y | x) = sum_i w_i(x) f(y | x, eta_i)``.

A :class:`LikelihoodModel` is a protocol gate (:class:`~moestat.model.protocol.ProtocolGate`) and
an expert with a noise family:

* ``gaussian``: ``f(y | x, eta_i, sigma_i^2) = N(y; h(x, eta_i), sigma_i^2)`` for any protocol
  expert ``h`` (linear, polynomial, FFN, MLP, your own), one variance per atom -- the softmax-gated
  Gaussian MoE of Nguyen, Nguyen & Ho (2023) when the gate is the linear softmax and ``h`` is linear;
* ``multinomial``: ``f(y = c | x, eta_i) = softmax_c(A_i x + b_i)`` with class ``C - 1`` the
  reference (:class:`MultinomialExpert`; the softmax-gated multinomial logistic MoE of Nguyen,
  Akbarian, Nguyen & Ho (2024)); ``y`` holds class indices ``0 .. C-1``.

The gate weights of a likelihood must sum to one: ``softmax`` (dense, Top-K or with a
temperature) and ``gaussian`` gates do; a ``sigmoid`` gate's weights are normalised here,
``w_i = sigmoid(l_i) / sum_j sigmoid(l_j)`` (a least-squares fit uses them unnormalised).

Parameter layout of one atom in a :class:`~moestat.model.mixing.MixingMeasure`: ``beta0_i``,
``beta1_i`` (gate) and ``eta_i = (expert parameters [q], sigma_i^2)`` for ``gaussian`` (as in
:mod:`moestat.model.gaussian_moe`: ``(a, b, sigma^2)`` for linear experts), ``eta_i = expert
parameters [q]`` for ``multinomial``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from moestat.model.gates import linear_score
from moestat.model.mixing import MixingMeasure
from moestat.model.protocol import FunctionExpert, ProtocolGate

__all__ = ["FAMILIES", "MultinomialExpert", "LikelihoodModel", "log_gate", "linear_expert"]

FAMILIES = ("gaussian", "multinomial")
_LOG2PI = math.log(2.0 * math.pi)


def linear_expert(d: int) -> FunctionExpert:
    """``h(x, eta) = a^T x + b`` with ``eta = (a, b)`` (``q = d + 1``): the expert with a closed-form M-step."""
    return FunctionExpert(lambda x, eta: x @ eta[:-1] + eta[-1], d + 1, "identity")


@dataclass(frozen=True)
class MultinomialExpert:
    """Multinomial-logistic expert: ``P(y = c | x) = softmax_c(A x + b)``, class ``C - 1`` the reference.

    Parameters
    ----------
    d : int
        Input dimension.
    classes : int
        ``C >= 2``; ``eta`` is ``[A | b]`` of the first ``C - 1`` classes, row-major, ``q = (C - 1)(d + 1)``.
    """

    d: int
    classes: int
    name: str = "multinomial"

    def __post_init__(self) -> None:
        for nm, v, lo in (("d", self.d, 1), ("classes", self.classes, 2)):
            if isinstance(v, bool) or int(v) != v or v < lo:
                raise ValueError(f"{nm} must be an integer >= {lo}, got {v!r}")

    @property
    def n_params(self) -> int:
        return (self.classes - 1) * (self.d + 1)

    def log_probs(self, x: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
        """``log P(y = c | x, eta_i)``, ``[..., n, k, C]`` for ``x [..., n, d]``, ``eta [..., k, q]``."""
        W = eta.reshape(eta.shape[:-1] + (self.classes - 1, self.d + 1))  # [..., k, C-1, d+1]
        z = torch.einsum("...nd,...kcd->...nkc", x, W[..., :-1]) + W[..., -1].unsqueeze(-3)
        z = torch.cat([z, torch.zeros_like(z[..., :1])], -1)
        return torch.log_softmax(z, -1)

    def __call__(self, x: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
        """Expected class index ``sum_c c P(y = c | x)``, ``[..., n, k]`` (a mean function)."""
        c = torch.arange(self.classes, dtype=x.dtype, device=x.device)
        return (torch.exp(self.log_probs(x, eta)) * c).sum(-1)

    def describe(self) -> str:
        return f"multinomial{self.classes}"


def log_gate(gate: ProtocolGate, x: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor,
             normalise: bool = True) -> torch.Tensor:
    """Log gate weights ``[..., n, k]`` that sum to one (sigmoid weights normalised; Top-K zeros are ``-inf``).

    The gate's own formula (:meth:`ProtocolGate.log_weights`,
    :meth:`~moestat.model.gate_families.GateFamily.log_weights`) in log space, so that its
    derivatives (:mod:`torch.func`) stay finite where a Top-K gate switches an expert off.
    ``normalise=False``: the unnormalised ``u`` with ``log w = log_softmax(u)`` (the logits, or
    ``log sigmoid`` of them).  The same as ``gate.log_weights(x, beta0, beta1, normalise)``, the one
    entry point of the formula that the models and the generic EM call.
    """
    return gate.log_weights(x, beta0, beta1, normalise)


@dataclass(frozen=True)
class LikelihoodModel:
    """A gate, an expert and a noise family: the conditional density of a mixture of experts.

    Parameters
    ----------
    gate : ProtocolGate
    expert : FunctionExpert or MultinomialExpert
    family : {"gaussian", "multinomial"}
        Taken from the expert when it is a :class:`MultinomialExpert`.
    """

    gate: ProtocolGate
    expert: Any
    family: str = "gaussian"

    def __post_init__(self) -> None:
        if isinstance(self.expert, MultinomialExpert):
            object.__setattr__(self, "family", "multinomial")
        if self.family not in FAMILIES:
            raise ValueError(f"unknown likelihood family {self.family!r}; expected one of {FAMILIES}")
        if self.family == "multinomial" and not isinstance(self.expert, MultinomialExpert):
            raise ValueError("the multinomial family needs a MultinomialExpert")
        if not self.gate.family.has_likelihood:
            raise ValueError(f"the {self.gate.normalisation} gate has no likelihood (its weights do not sum to one); "
                             "fit it by least squares (noise.model = 'additive')")

    # ---- the ProtocolModel-like API ------------------------------------------------------
    def n_expert_params(self, d: int) -> int:
        """``q``: the expert's parameters (without the variance)."""
        return int(self.expert.n_params)

    def n_eta(self, d: int) -> int:
        """Columns of ``eta`` in a mixing measure: ``q + 1`` (Gaussian, with ``sigma^2``) or ``q``."""
        return self.n_expert_params(d) + (1 if self.family == "gaussian" else 0)

    def with_k_active(self, k_active: int | None) -> "LikelihoodModel":
        return LikelihoodModel(self.gate.with_k_active(k_active), self.expert, self.family)

    @property
    def is_linear_softmax(self) -> bool:
        """The dense linear softmax gate with linear experts and Gaussian noise: the fast EM's model."""
        g = self.gate
        return (self.family == "gaussian" and g.normalisation == "softmax" and g.score is linear_score and g.k_active is None
                and g.temperature == 1.0 and bool(g.reference) and getattr(self.expert, "name", "") == "identity")

    def describe(self) -> str:
        return f"{self.gate.describe()} / {self.expert.describe()} ({self.family})"

    def _split(self, x, G: MixingMeasure):
        x = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x, dtype=np.float64))
        Gt = G if isinstance(G.beta0, torch.Tensor) else G.torch(device=x.device, dtype=x.dtype)
        q = self.n_expert_params(Gt.dim)
        return x, Gt, Gt.eta[..., :q]

    def weights(self, x, G: MixingMeasure) -> torch.Tensor:
        """Gate weights ``[..., n, k]`` (summing to one)."""
        x, Gt, _ = self._split(x, G)
        return torch.exp(self.gate.log_weights(x, Gt.beta0, Gt.beta1))

    def expert_outputs(self, x, G: MixingMeasure) -> torch.Tensor:
        """Expert means ``[..., n, k]`` (multinomial: the expected class index)."""
        x, _, e = self._split(x, G)
        return self.expert(x, e)

    def predict(self, x, G: MixingMeasure) -> torch.Tensor:
        """The mean function ``E[y | x] = sum_i w_i(x) h(x, eta_i)``, ``[..., n]``."""
        return (self.weights(x, G) * self.expert_outputs(x, G)).sum(-1)

    # ---- the likelihood ------------------------------------------------------------------
    def log_components(self, x: torch.Tensor, y: torch.Tensor, eta: torch.Tensor, s2: torch.Tensor | None = None) -> torch.Tensor:
        """``log f(y_n | x_n, eta_i)``, ``[..., n, k]``; ``eta [..., k, q]``, ``s2 [..., k]`` (Gaussian)."""
        if self.family == "multinomial":
            lp = self.expert.log_probs(x, eta)  # [..., n, k, C]
            idx = y.long().unsqueeze(-1).unsqueeze(-1).expand(lp.shape[:-1] + (1,))
            return lp.gather(-1, idx).squeeze(-1)
        e = y.unsqueeze(-1) - self.expert(x, eta)
        return -0.5 * (_LOG2PI + torch.log(s2).unsqueeze(-2) + e * e / s2.unsqueeze(-2))

    def log_density(self, x, y, G: MixingMeasure) -> torch.Tensor:
        """``log p(y_n | x_n)`` of every sample, ``[..., n]``."""
        x, Gt, e = self._split(x, G)
        y = y if isinstance(y, torch.Tensor) else torch.as_tensor(np.asarray(y, dtype=np.float64))
        s2 = Gt.eta[..., -1] if self.family == "gaussian" else None
        lj = self.gate.log_weights(x, Gt.beta0, Gt.beta1) + self.log_components(x, y, e, s2)
        return torch.logsumexp(lj, -1)

    def loglik(self, x, y, G: MixingMeasure) -> torch.Tensor:
        """Observed-data log-likelihood ``[...]`` (sum over samples)."""
        return self.log_density(x, y, G).sum(-1)

    def sample_y(self, X: np.ndarray, G: MixingMeasure, rng: np.random.Generator) -> np.ndarray:
        """``y [n]`` from the mixture at inputs ``X [n, d]``: an atom by the gate, then ``y`` from it."""
        x, Gt, e = self._split(X, G)
        w = torch.exp(self.gate.log_weights(x, Gt.beta0, Gt.beta1)).numpy()
        n = X.shape[0]
        z = np.minimum((w.cumsum(-1) < rng.uniform(size=(n, 1))).sum(-1), w.shape[-1] - 1)
        if self.family == "multinomial":
            p = torch.exp(self.expert.log_probs(x, e)).numpy()[np.arange(n), z]  # [n, C]
            return np.minimum((p.cumsum(-1) < rng.uniform(size=(n, 1))).sum(-1), p.shape[-1] - 1).astype(np.float64)
        mu = self.expert(x, e).numpy()[np.arange(n), z]
        return mu + np.sqrt(np.asarray(G.numpy().eta)[z, -1]) * rng.normal(size=n)

"""The public model protocol: bring your own gate and expert.

A mixture-of-experts regression function is ``g_G(x) = sum_i w_i(x) h(x, eta_i)`` with

* a **gate** = a score ``s(x; beta1_i)`` (any torch function), a **normalisation** of
  ``logit_i = (s_i + beta0_i) / temperature`` -- ``softmax`` (weights sum to one; Top-K on the
  score first, as in Nguyen et al. (2024), eq. (2)) or ``sigmoid`` (unnormalised weights
  ``sigmoid(logit_i)``, Nguyen, Ho & Rinaldo (2024)) -- and an **identifiability convention**: a
  softmax gate is invariant to a common shift of ``(beta0, beta1)``, so its last atom is the
  reference (``beta0 = 0, beta1 = 0``) and is not a free parameter; a sigmoid gate has no such
  invariance and no reference atom;
* an **expert** = any torch function ``h(x [n, d], eta [q]) -> [n]`` of a flat parameter vector
  ``eta`` (vectorised over the ``k`` atoms with :func:`torch.func.vmap`);
* a **noise** model: Gaussian with a shared variance (the least-squares estimator needs nothing
  more; per-expert variances come with the maximum-likelihood estimator).

A :class:`ProtocolModel` evaluates like :class:`moestat.model.regression.MoEModel` (``weights``,
``expert_outputs``, ``predict``) and its least-squares fit gets its Jacobian from
:mod:`torch.func` (:mod:`moestat.estimators.jacobians`).  The built-in gates
(``linear``/``cosine``/``perturbed`` scores with softmax) and experts (``phi(a^T x + b)``) keep their
analytic kernel; :func:`protocol_from_builtin` re-expresses a built-in model in this protocol,
which is how the two paths are checked against each other.

Examples
--------
>>> import torch
>>> gate = ProtocolGate(score=linear_score, normalisation="sigmoid")
>>> model = ProtocolModel(gate, mlp_expert(d=2, hidden=3))
>>> model.expert.n_params
13
>>> x = torch.zeros(5, 2, dtype=torch.float64)
>>> G = MixingMeasure(torch.zeros(2), torch.zeros(2, 2), torch.zeros(2, 13))
>>> model.predict(x, G).shape
torch.Size([5])
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

from moestat.model.experts import BARE_KINDS, SCALED_KINDS, Expert, activation_fn
from moestat.model.gate_families import GateFamily
from moestat.model.gate_registry import GATES, score_function
from moestat.model.gates import Gate, ScoreFn, cosine_score, linear_score, perturbed_score
from moestat.model.mixing import MixingMeasure
from moestat.model.regression import MoEModel

__all__ = [
    "NORMALISATIONS",
    "FunctionExpert",
    "ProtocolGate",
    "ProtocolModel",
    "cosine_score",
    "linear_score",
    "mlp_expert",
    "scaled_expert",
    "bare_expert",
    "perturbed_score",
    "protocol_from_builtin",
    "sigmoid_gate",
]

#: the gates of :data:`moestat.model.gate_registry.GATES`, by name (``[gate] normalisation``)
NORMALISATIONS = tuple(GATES)

#: ``h(x [n, d], eta [q]) -> [n]``
ExpertFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ProtocolGate:
    """A gate: score, normalisation, Top-K, temperature and identifiability convention.

    Parameters
    ----------
    score : callable
        ``s(x [..., n, d], beta1 [..., k, d]) -> [..., n, k]``, differentiable in ``beta1``.
    normalisation : str
        The gate, a name of :data:`moestat.model.gate_registry.GATES`: ``softmax`` of the logits
        over the (Top-K) experts, elementwise ``sigmoid`` (weights need not sum to one; a likelihood
        normalises them, :mod:`moestat.model.likelihood`), ``gaussian``: ``pi_i N(x; mu_i, v I) /
        sum_j pi_j N(x; mu_j, v I)`` with ``beta0_i = log pi_i``, ``beta1_i = mu_i`` and the known gate
        variance ``variance`` (the Gaussian gate of Nguyen, Nguyen, Nguyen & Ho (2024) with a known
        isotropic covariance; it defines its own score from the centres ``beta1``, ``score`` is not used),
        or any other registered gate.
    k_active : int or None
        Top-K on the score (before the bias); ``None`` = dense.  Only for gates that define it
        (:attr:`~moestat.model.gate_families.GateFamily.top_k`, e.g. softmax; not sigmoid or gaussian).
    temperature : float
        Logits are ``(s + beta0) / temperature``.
    reference : bool or None
        Whether the last atom is the reference (``beta0 = beta1 = 0``, not free).  ``None``
        takes the convention of the gate (:attr:`~moestat.model.gate_families.GateFamily.default_reference`):
        softmax yes (translation invariance), the others no.
    name : str
        Display name.
    variance : float
        Variance ``v`` of the Gaussian gate's kernels (``normalisation="gaussian"`` only).
    """

    score: ScoreFn = linear_score
    normalisation: str = "softmax"
    k_active: int | None = None
    temperature: float = 1.0
    reference: bool | None = None
    name: str = "custom"
    variance: float = 1.0

    def __post_init__(self) -> None:
        if self.normalisation not in NORMALISATIONS:
            raise ValueError(f"unknown gate normalisation {self.normalisation!r}; expected one of {NORMALISATIONS}")
        if self.k_active is not None:
            if isinstance(self.k_active, bool) or int(self.k_active) != self.k_active or self.k_active < 1:
                raise ValueError(f"k_active must be a positive integer or None, got {self.k_active!r}")
            if not self.family.top_k:
                raise ValueError(f"Top-K (k_active) is not defined for the {self.normalisation} gate")
        if not (float(self.temperature) > 0 and float(self.temperature) < float("inf")):
            raise ValueError(f"gate temperature must be a positive finite number, got {self.temperature!r}")
        if not (float(self.variance) > 0 and float(self.variance) < float("inf")):
            raise ValueError(f"gate variance must be a positive finite number, got {self.variance!r}")
        if self.reference is None:
            # a Gaussian gate is invariant to a common shift of beta0 only (its beta1 are centres)
            object.__setattr__(self, "reference", self.family.default_reference)
        self.family.check(self)

    @property
    def family(self) -> GateFamily:
        """The registered gate (:data:`moestat.model.gate_registry.GATES`) that holds this gate's formula."""
        return GATES[self.normalisation]

    def with_k_active(self, k_active: int | None) -> "ProtocolGate":
        """The same gate with another number of activated experts."""
        return replace(self, k_active=k_active)

    def check_n_experts(self, k: int) -> None:
        """Raise ``ValueError`` if ``k_active`` exceeds the number of experts ``k``."""
        if self.k_active is not None and self.k_active > k:
            raise ValueError(f"k_active (K={self.k_active}) must not exceed the number of experts k={k}")

    def scores(self, x: torch.Tensor, beta1: torch.Tensor) -> torch.Tensor:
        """Scores without the bias ``[..., n, k]``: the gate's own (a Gaussian gate's) or ``score``."""
        return self.family.score(self, x, beta1)

    def weights(
        self, x: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor, smooth_topk: float | None = None
    ) -> torch.Tensor:
        """Weights ``[..., n, k]`` for ``x [..., n, d]``, ``beta0 [..., k]``, ``beta1 [..., k, d]``
        (:meth:`~moestat.model.gate_families.GateFamily.weights`; ``smooth_topk`` there)."""
        return self.family.weights(self, x, beta0, beta1, smooth_topk)

    def log_weights(self, x: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor, normalise: bool = True) -> torch.Tensor:
        """Log-weights ``[..., n, k]`` summing to one in the exponent (sigmoid weights normalised; Top-K
        zeros ``-inf``); :meth:`~moestat.model.gate_families.GateFamily.log_weights`."""
        return self.family.log_weights(self, x, beta0, beta1, normalise)

    def free_mask(self, k: int, d: int):
        """Free entries of the rows ``(beta1_i, beta0_i)``, ``bool [k, d + 1]`` (the reference convention)."""
        return self.family.free_mask(k, d, bool(self.reference))

    def describe(self) -> str:
        """Short name, e.g. ``linear-sigmoid`` or ``custom-softmax top-2``."""
        t = "" if self.temperature == 1.0 else f" T={self.temperature:g}"
        return f"{self.name}-{self.normalisation}{t}" + ("" if self.k_active is None else f" top-{self.k_active}")


def sigmoid_gate(score: ScoreFn = linear_score, temperature: float = 1.0) -> ProtocolGate:
    """The sigmoid gate ``w_i(x) = sigmoid(beta1_i^T x + beta0_i)`` of Nguyen, Ho & Rinaldo (2024) (no reference atom)."""
    return ProtocolGate(score, "sigmoid", None, temperature, False, "linear" if score is linear_score else "custom")


@dataclass(frozen=True)
class FunctionExpert:
    """An expert given as a torch function of a flat parameter vector.

    Parameters
    ----------
    fn : callable
        ``h(x [n, d], eta [q]) -> [n]``, differentiable in ``eta`` and free of in-place
        operations and Python control flow on tensor values (it runs under ``torch.func``).
    n_params : int
        ``q``, the length of ``eta``.
    name : str
        Display name.
    """

    fn: ExpertFn
    n_params: int
    name: str = "custom"

    def __post_init__(self) -> None:
        if isinstance(self.n_params, bool) or int(self.n_params) != self.n_params or self.n_params < 1:
            raise ValueError(f"n_params must be a positive integer, got {self.n_params!r}")

    def __call__(self, x: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
        """``h(x_i, eta_j)`` with shape ``[..., n, k]`` for ``x [..., n, d]``, ``eta [..., k, q]``."""
        if eta.shape[-1] != self.n_params:
            raise ValueError(f"expert {self.name!r} takes {self.n_params} parameters, eta has {eta.shape[-1]}")
        f = torch.vmap(self.fn, in_dims=(None, 0), out_dims=-1)  # over the k atoms
        for _ in range(eta.dim() - 2):  # leading batch dims of eta (and of x, if any)
            f = torch.vmap(f, in_dims=(0 if x.dim() > 2 else None, 0))
        return f(x, eta)

    def describe(self) -> str:
        """The display name."""
        return self.name


def scaled_expert(kind: str, d: int) -> "FunctionExpert":
    """The expert ``h(x, eta) = eta2 * phi(eta1^T x)``, ``eta = (eta1 [d], eta2)``, no bias inside ``phi``.

    The strongly identifiable form of Nguyen et al. (2025, arXiv 2505.10860, Definition 1 and its
    example ``eta2 * GELU(eta1^T x)``): with no bias inside the activation, the identity
    ``x_u dh/db = dh/da_u`` of ``phi(a^T x + b)`` -- a gate-expert PDE under a linear-score gate --
    has no counterpart.  It is linear in ``eta2`` (``d2h/deta2^2 = 0``, ``h = eta2 dh/deta2``),
    which the linear-gate condition allows but the second-order condition
    ``expert_strong_second_order`` of :mod:`moestat.theorems.hypotheses` does not (:func:`bare_expert`).

    Parameters
    ----------
    kind : {"scaled_gelu", "scaled_tanh", "scaled_sigmoid"}
        ``scaled_<phi>``, one of :data:`SCALED_KINDS`.
    d : int
        Input dimension; the expert has ``q = d + 1`` parameters.

    Returns
    -------
    FunctionExpert
        ``h(x [n, d], eta [d + 1]) -> [n]`` named ``kind``.

    Examples
    --------
    >>> import torch
    >>> h = scaled_expert("scaled_sigmoid", 2)
    >>> x = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    >>> h(x, torch.tensor([[2.0, 2.0, 1.5]], dtype=torch.float64))  # 1.5 * sigmoid(0)
    tensor([[0.7500]], dtype=torch.float64)
    """
    if kind not in SCALED_KINDS:
        raise ValueError(f"unknown scaled expert kind {kind!r}; expected one of {SCALED_KINDS}")
    if isinstance(d, bool) or int(d) != d or d < 1:
        raise ValueError(f"input dimension must be a positive integer, got {d!r}")
    phi = activation_fn(kind.removeprefix("scaled_"))
    return FunctionExpert(lambda x, eta: eta[-1] * phi(x @ eta[:-1]), int(d) + 1, kind)


def bare_expert(kind: str, d: int) -> "FunctionExpert":
    """The expert ``h(x, a) = phi(a^T x)``, ``eta = a [d]``: no bias inside ``phi``, no outer coefficient.

    A one-neuron feed-forward expert that is strongly identifiable in both halves of this package's
    reading (:mod:`moestat.theorems.hypotheses`): without a bias there is no ``x_u dh/db = dh/da_u``
    (the gate-expert PDE of ``phi(a^T x + b)`` under a linear-score gate), and without an outer
    coefficient no second derivative is identically zero (``eta2 * phi(eta1^T x)`` has
    ``d2h/deta2^2 = 0``): ``d2h/da_u da_v = x_u x_v phi''(a^T x)``.

    Parameters
    ----------
    kind : {"bare_gelu", "bare_tanh", "bare_sigmoid"}
        ``bare_<phi>``, one of :data:`BARE_KINDS`.
    d : int
        Input dimension; the expert has ``q = d`` parameters.

    Returns
    -------
    FunctionExpert
        ``h(x [n, d], eta [d]) -> [n]`` named ``kind``.

    Examples
    --------
    >>> import torch
    >>> h = bare_expert("bare_sigmoid", 2)
    >>> x = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    >>> h(x, torch.tensor([[2.0, 2.0]], dtype=torch.float64))  # sigmoid(0)
    tensor([[0.5000]], dtype=torch.float64)
    """
    if kind not in BARE_KINDS:
        raise ValueError(f"unknown bare expert kind {kind!r}; expected one of {BARE_KINDS}")
    if isinstance(d, bool) or int(d) != d or d < 1:
        raise ValueError(f"input dimension must be a positive integer, got {d!r}")
    phi = activation_fn(kind.removeprefix("bare_"))
    return FunctionExpert(lambda x, eta: phi(x @ eta), int(d), kind)


def mlp_expert(d: int, hidden: int, activation: Callable[[torch.Tensor], torch.Tensor] = torch.tanh) -> FunctionExpert:
    """A one-hidden-layer MLP expert ``h(x) = v^T act(W x + b) + c``.

    ``eta = [W (hidden x d, row-major), b (hidden), v (hidden), c]``, so ``q = hidden (d + 2) + 1``.
    """
    H = int(hidden)

    def h(x: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
        W = eta[: H * d].reshape(H, d)
        b = eta[H * d : H * d + H]
        v = eta[H * d + H : H * d + 2 * H]
        return activation(x @ W.T + b) @ v + eta[-1]

    return FunctionExpert(h, H * (d + 2) + 1, f"mlp{H}")


@dataclass(frozen=True)
class ProtocolModel:
    """A gate and an expert of the protocol; the same evaluation API as :class:`MoEModel`.

    Parameters
    ----------
    gate : ProtocolGate
    expert : FunctionExpert or Expert
        A built-in :class:`~moestat.model.experts.Expert` is accepted (``q = d + 1``).
    """

    gate: ProtocolGate
    expert: FunctionExpert | Expert

    def n_expert_params(self, d: int) -> int:
        """``q`` for input dimension ``d``."""
        return self.expert.n_params(d) if isinstance(self.expert, Expert) else self.expert.n_params

    def with_k_active(self, k_active: int | None) -> "ProtocolModel":
        """The same model with another number of activated experts."""
        return replace(self, gate=self.gate.with_k_active(k_active))

    @staticmethod
    def _tensors(x, G: MixingMeasure):
        x = x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float64)
        Gt = G.torch(device=x.device, dtype=x.dtype) if not isinstance(G.beta0, torch.Tensor) else G
        return x, Gt

    def weights(self, x, G: MixingMeasure) -> torch.Tensor:
        """Gate weights ``[..., n, k]``."""
        x, Gt = self._tensors(x, G)
        self.gate.check_n_experts(Gt.n_atoms)
        return self.gate.weights(x, Gt.beta0, Gt.beta1)

    def expert_outputs(self, x, G: MixingMeasure) -> torch.Tensor:
        """``h(x_i, eta_j)`` with shape ``[..., n, k]``."""
        x, Gt = self._tensors(x, G)
        return self.expert(x, Gt.eta)

    def predict(self, x, G: MixingMeasure) -> torch.Tensor:
        """``g_G(x)`` with shape ``[..., n]``."""
        return (self.weights(x, G) * self.expert_outputs(x, G)).sum(-1)

    def describe(self) -> str:
        """Short name, e.g. ``linear-sigmoid / mlp8``."""
        return f"{self.gate.describe()} / {self.expert.describe()}"


def protocol_from_builtin(model: MoEModel, d: int) -> ProtocolModel:
    """A built-in :class:`MoEModel` re-expressed in the protocol (same function, autograd path).

    The expert stays the built-in ``phi(a^T x + b)`` evaluated by its own ``__call__``, but
    every derivative of the protocol model comes from :mod:`torch.func`, never from
    ``Expert.dphi``; the score is :func:`moestat.model.gates.gate_scores`.  ``d`` is the
    input dimension (the expert then has ``q = d + 1`` parameters).
    """
    g: Gate = model.gate
    score = score_function(g.kind, g.tau)
    gate = ProtocolGate(score, "softmax", g.k_active, 1.0, True, g.kind)
    act, deg = model.expert.activation, model.expert.degree
    phi = activation_fn(act, deg)

    def h(x: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
        return phi(x @ eta[:-1] + eta[-1])

    return ProtocolModel(gate, FunctionExpert(h, d + 1, model.expert.describe()))


"""Gating functions: one vocabulary for the statistical models and the neural-network layers.

A gate turns inputs ``x`` and per-expert router parameters ``(beta0, beta1)`` into mixture
weights.  It does so in two steps, following Nguyen et al. (2024), eqs. (2) and (9):

1. a *score* ``s(x; beta1)`` per expert, **without** the bias ``beta0``:

   - ``linear``    : ``beta1^T x``                                         (softmax gating)
   - ``cosine``    : ``beta1^T x / (||beta1|| ||x||)``                     (eq. 2; 0 when beta1 = 0 or x = 0)
   - ``perturbed`` : ``beta1^T x / ((||beta1|| + tau1) (||x|| + tau2))``   (eq. 9)

2. Top-K *selection on the score alone* (the Top-K paper's convention, which the proofs of
   Lemma 3 rely on), then a softmax of ``score + beta0`` over the K selected experts; the others
   get weight exactly 0.  ``k_active=None`` (or K = k) is the dense softmax gate.

Step 2 is the formula of the registered softmax gate (:data:`moestat.model.gate_families.SOFTMAX`,
one of :data:`moestat.model.gate_registry.GATES`), written once there: :class:`Gate` (the built-in
routers) and :func:`gate_weights` call it, as do the protocol's gates.  The scores here are also
the ``score`` of a scenario file (:data:`moestat.model.gate_registry.SCORES`).

Every function works on torch tensors with arbitrary leading batch dimensions, e.g. a replicate
axis: ``x`` has shape ``[..., n, d]``, ``beta1`` ``[..., k, d]``, ``beta0`` ``[..., k]`` and the
result ``[..., n, k]``.  NumPy arrays are accepted and converted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Callable, ClassVar, Iterable, Mapping, Sequence, Union

import numpy.typing as npt
import torch

from moestat.model.gate_families import SOFTMAX, safe_norm, top_k_mask

__all__ = [
    "GATE_KINDS",
    "NAME_ALIASES",
    "canonical_name",
    "Gate",
    "gate_scores",
    "linear_score",
    "cosine_score",
    "perturbed_score",
    "safe_norm",
    "top_k_mask",
    "gate_weights",
]

#: The score kinds, which are also the router names of the statistical side
#: (:data:`moestat.data.synthetic.ROUTERS` is this same tuple): ``perturbed`` the perturbed cosine
#: router (eq. (9)), ``cosine`` the vanilla cosine router (eq. (2)), ``linear`` the softmax gate.
#: The neural-network routers (:mod:`moestat.nn.routers`) are a different vocabulary: they say how
#: experts are selected and trained, and use these kinds as their score.
GATE_KINDS = ("perturbed", "cosine", "linear")

#: What the model functions accept for an array argument: a torch tensor (used as it is) or
#: anything NumPy turns into an array (converted to float64).
TensorLike = Union[torch.Tensor, npt.ArrayLike]

#: Other spellings of gate and router names, accepted everywhere (statistical models, neural
#: layers, every subcommand) and mapped to the canonical one.  Hyphens and underscores are
#: interchangeable on top of this table.
NAME_ALIASES = {
    "perturbed_cosine": "perturbed",
    "vanilla": "cosine",
    "vanilla_cosine": "cosine",
    "softmax": "linear",
}


def canonical_name(text: str, known: Iterable[str], aliases: Mapping[str, str] | None = None) -> str:
    """The canonical spelling of a name from the vocabulary ``known``.

    ``-`` and ``_`` are interchangeable, in ``text`` and in the keys and targets of the alias
    tables (``output-mixture`` is ``output_mixture``).  A name in ``known`` is returned as it is
    spelled there.  Otherwise an alias of :data:`NAME_ALIASES` (or of ``aliases``, which takes
    precedence) and its target are the same name in either direction: ``perturbed_cosine`` gives
    ``perturbed`` in :data:`GATE_KINDS`, and ``perturbed`` gives ``perturbed_cosine`` in a
    vocabulary that spells it so.

    Parameters
    ----------
    text : str
        The name as the user wrote it (surrounding white space is ignored).
    known : iterable of str
        The canonical names of this vocabulary (e.g. :data:`GATE_KINDS`).
    aliases : mapping of str to str, optional
        Extra aliases of this vocabulary, on top of :data:`NAME_ALIASES`.

    Returns
    -------
    str
        An element of ``known``.

    Raises
    ------
    ValueError
        The name is not in the vocabulary (the message lists the known names).

    Examples
    --------
    >>> canonical_name("perturbed-cosine", GATE_KINDS)
    'perturbed'
    """
    known = tuple(known)
    name = str(text).strip()
    by_norm = {_fold(k): k for k in known}
    norm = _fold(name)
    if norm in by_norm:
        return by_norm[norm]
    table = {_fold(k): _fold(v) for k, v in {**NAME_ALIASES, **(aliases or {})}.items()}
    # An alias and its target name one thing, whichever of the two a vocabulary calls canonical
    # (the neural routers say ``perturbed_cosine`` where the statistical side says ``perturbed``).
    meaning = table.get(norm, norm)
    matches = [k for n, k in by_norm.items() if table.get(n, n) == meaning]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ValueError(f"ambiguous name {name!r}: it could be {' or '.join(matches)}")
    raise ValueError(f"unknown name {name!r}; expected one of {', '.join(known)}")


def _fold(name: str) -> str:
    """The spelling names are compared in: hyphens read as underscores."""
    return name.replace("-", "_")


def _as_tensor(a: TensorLike, like: torch.Tensor | None = None) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a
    dtype = like.dtype if like is not None else torch.float64
    device = like.device if like is not None else None
    return torch.as_tensor(a, dtype=dtype, device=device)


def _normalise_tau(tau: float | Sequence[float]) -> tuple[float, float]:
    if isinstance(tau, (int, float)):
        t1 = t2 = float(tau)
    else:
        t = tuple(float(v) for v in tau)
        if len(t) != 2:
            raise ValueError(f"tau must be a number or a pair (tau1, tau2), got {tau!r}")
        t1, t2 = t
    if not (t1 >= 0 and t2 >= 0):  # also rejects NaN
        raise ValueError(f"tau must be non-negative, got tau1={t1}, tau2={t2}")
    return t1, t2


def gate_scores(
    x: TensorLike,
    beta1: TensorLike,
    kind: str = "perturbed",
    tau: float | Sequence[float] = 1.0,
) -> torch.Tensor:
    """Router scores without the bias.

    Parameters
    ----------
    x : array or Tensor, shape ``[..., n, d]``
        Inputs.
    beta1 : array or Tensor, shape ``[..., k, d]``
        Router directions, one row per expert.
    kind : {"perturbed", "cosine", "linear"}
        Gate family.  ``cosine`` is eq. (2) of Nguyen et al. (2024), ``perturbed`` eq. (9).
    tau : float or (float, float)
        ``(tau1, tau2)`` of the perturbed router; a single number sets both (the paper's
        experiments use ``tau1 = tau2``).  Ignored for the other kinds.

    Returns
    -------
    Tensor, shape ``[..., n, k]``
        ``scores[..., i, j] = s(x_i; beta1_j)``.  For the cosine router the score of a zero
        ``beta1`` (or a zero ``x``) is defined as 0.
    """
    if kind not in GATE_KINDS:
        raise ValueError(f"unknown gate kind {kind!r}; expected one of {GATE_KINDS}")
    x = _as_tensor(x)
    beta1 = _as_tensor(beta1, like=x)
    if x.shape[-1] != beta1.shape[-1]:
        raise ValueError(
            f"x has {x.shape[-1]} features but beta1 has {beta1.shape[-1]}; they must agree"
        )
    dots = x @ beta1.transpose(-1, -2)
    if kind == "linear":
        return dots
    nb = safe_norm(beta1).unsqueeze(-2)  # [..., 1, k]
    nx = safe_norm(x).unsqueeze(-1)  # [..., n, 1]
    if kind == "cosine":
        denom = nb * nx
        pos = denom > 0
        return torch.where(pos, dots / torch.where(pos, denom, torch.ones_like(denom)), torch.zeros_like(dots))
    t1, t2 = _normalise_tau(tau)
    denom = (nb + t1) * (nx + t2)
    if t1 > 0 and t2 > 0:  # every denominator is positive: the quotient itself, no convention to apply
        return dots / denom
    pos = denom > 0  # only 0 when tau = 0 and a norm vanishes: the cosine convention
    return torch.where(pos, dots / torch.where(pos, denom, torch.ones_like(denom)), torch.zeros_like(dots))


def gate_weights(scores: torch.Tensor, beta0: TensorLike, k_active: int | None = None) -> torch.Tensor:
    """Softmax of ``score + beta0`` over the Top-K experts chosen on the score alone.

    Parameters
    ----------
    scores : Tensor, shape ``[..., n, k]``
        Output of :func:`gate_scores`.
    beta0 : array or Tensor, shape ``[..., k]``
        Router biases.
    k_active : int or None
        Number of activated experts K (``None``: dense).

    Returns
    -------
    Tensor, shape ``[..., n, k]``
        Non-negative weights summing to 1 over the last axis, exactly 0 off the Top-K set.
    """
    beta0 = _as_tensor(beta0, like=scores)
    k = scores.shape[-1]
    if k_active is not None and not (1 <= k_active <= k):
        raise ValueError(f"k_active must be between 1 and the number of experts {k}, got {k_active}")
    return SOFTMAX.weights_from_scores(SimpleNamespace(k_active=k_active, temperature=1.0), scores, beta0)


#: ``s(x [..., n, d], beta1 [..., k, d]) -> [..., n, k]``, the score of a gate without the bias
ScoreFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def linear_score(x: torch.Tensor, beta1: torch.Tensor) -> torch.Tensor:
    """``s_i(x) = beta1_i^T x`` (softmax gating; sigmoid gating of Nguyen, Ho & Rinaldo (2024))."""
    return x @ beta1.transpose(-1, -2)


def cosine_score(x: torch.Tensor, beta1: torch.Tensor) -> torch.Tensor:
    """The cosine router's score (Nguyen et al. (2024), eq. (2))."""
    return gate_scores(x, beta1, "cosine")


def perturbed_score(tau1: float = 1.0, tau2: float = 1.0) -> ScoreFn:
    """The perturbed cosine router's score (Nguyen et al. (2024), eq. (9))."""
    return lambda x, beta1: gate_scores(x, beta1, "perturbed", (tau1, tau2))


@dataclass(frozen=True)
class Gate:
    """A gate family with its hyper-parameters.

    Parameters
    ----------
    kind : {"perturbed", "cosine", "linear"}
        Score function (see module docstring).
    tau : float or (float, float)
        Perturbation ``(tau1, tau2)`` of the perturbed cosine router (Nguyen et al. (2024), eq. (9)).
    k_active : int or None
        Top-K: number of experts activated per input (``None`` = dense softmax).

    Examples
    --------
    >>> import torch
    >>> g = Gate("perturbed", tau=1.0, k_active=2)
    >>> x = torch.randn(5, 3, dtype=torch.float64)
    >>> w = g.weights(x, torch.zeros(4, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64))
    >>> tuple(w.shape), bool(torch.allclose(w.sum(-1), torch.ones(5, dtype=torch.float64)))
    ((5, 4), True)
    """

    kind: str = "perturbed"
    tau: float | tuple[float, float] = 1.0
    k_active: int | None = None
    #: the built-in routers are softmax gates without a temperature (:data:`~moestat.model.gate_families.SOFTMAX`)
    temperature: ClassVar[float] = 1.0
    family: ClassVar = SOFTMAX

    def __post_init__(self) -> None:
        if self.kind not in GATE_KINDS:
            raise ValueError(f"unknown gate kind {self.kind!r}; expected one of {GATE_KINDS}")
        t = _normalise_tau(self.tau)
        object.__setattr__(self, "tau", t)
        if self.k_active is not None:
            if isinstance(self.k_active, bool) or int(self.k_active) != self.k_active or self.k_active < 1:
                raise ValueError(f"k_active must be a positive integer or None, got {self.k_active!r}")
            object.__setattr__(self, "k_active", int(self.k_active))

    @property
    def tau1(self) -> float:
        """``tau1``, the perturbation of ``||beta1||``."""
        return self.tau[0]  # type: ignore[index]

    @property
    def tau2(self) -> float:
        """``tau2``, the perturbation of ``||x||``."""
        return self.tau[1]  # type: ignore[index]

    def check_n_experts(self, k: int) -> None:
        """Raise ``ValueError`` if ``k_active`` exceeds the number of experts ``k``."""
        if self.k_active is not None and self.k_active > k:
            raise ValueError(f"k_active (K={self.k_active}) must not exceed the number of experts k={k}")

    def with_k_active(self, k_active: int | None) -> "Gate":
        """The same gate with another number of activated experts (e.g. K-bar, eq. 7)."""
        return replace(self, k_active=k_active)

    def scores(self, x: TensorLike, beta1: TensorLike) -> torch.Tensor:
        """Scores ``[..., n, k]`` without bias; see :func:`gate_scores`."""
        return gate_scores(x, beta1, self.kind, self.tau)

    def weights(self, x: TensorLike, beta0: TensorLike, beta1: TensorLike) -> torch.Tensor:
        """Mixture weights ``[..., n, k]``; see :func:`gate_weights`."""
        beta1 = _as_tensor(beta1)
        self.check_n_experts(beta1.shape[-2])
        scores = self.scores(x, beta1)
        return SOFTMAX.weights_from_scores(self, scores, _as_tensor(beta0, like=scores))

    def describe(self) -> str:
        """Short human-readable name, e.g. ``perturbed(tau=1,1) top-2``."""
        base = self.kind if self.kind != "perturbed" else f"perturbed(tau={self.tau1:g},{self.tau2:g})"
        return base + ("" if self.k_active is None else f" top-{self.k_active}")

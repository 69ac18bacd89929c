"""Gate families: each gate's weight formula, free parameters, canonical form and starts, written once.

A gate turns inputs ``x [..., n, d]`` and per-atom router parameters ``beta0 [..., k]``,
``beta1 [..., k, d]`` into weights ``[..., n, k]``.  Every gate of the package is one
:class:`GateFamily` object, registered by name in :data:`moestat.model.gate_registry.GATES`; the
regression models (:class:`~moestat.model.regression.MoEModel`,
:class:`~moestat.model.protocol.ProtocolModel`), the likelihood models
(:class:`~moestat.model.likelihood.LikelihoodModel`), the generic EM (``GenericEM.log_u`` and the free-gate
layout of :mod:`moestat.estimators.generic_starts`) and the pre-flight read the gate through it.

The formula (Nguyen et al. (2024), eqs. (2) and (9); Nguyen, Ho & Rinaldo (2024) for the sigmoid):

1. a **score** ``s_i(x)`` without the bias -- the gate's own score function (``linear``, ``cosine``,
   ``perturbed`` or the user's), or one the family defines from ``beta1`` as a centre (the Gaussian
   gate);
2. **logits** ``l_i = (s_i + beta0_i) / temperature``;
3. **Top-K on the score alone** (before the bias; the proofs of the Top-K paper's Lemma 3 rely on it):
   the other atoms get weight exactly 0 (log-weight ``-inf``);
4. **normalisation**: a softmax over the atoms, or an elementwise sigmoid (weights need not sum to
   one; a likelihood normalises them, ``log_softmax(log sigmoid(l))``).

A family also says which parameters are free: a gate invariant to a common shift of ``(beta0,
beta1)`` (the softmax of a linear score) pins its last atom, the *reference* (``beta0 = beta1 = 0``,
convention (A.3) of Nguyen et al. (2024)); a gate invariant to a common shift of ``beta0`` only
(a softmax over scores of centres ``beta1``, e.g. the Gaussian gate) pins the last ``beta0``; a sigmoid gate pins nothing.
Parameters are laid out per atom as the rows ``V_i = (beta1_i, beta0_i)`` of ``V [..., k, d + 1]``.

To add a gate, subclass :class:`GateFamily` in a new module, override :meth:`GateFamily.score` (and
the class attributes that differ), and add it to :data:`moestat.model.gate_registry.GATES`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["GateFamily", "SoftmaxGate", "SigmoidGate", "GaussianGate", "SOFTMAX", "SIGMOID", "GAUSSIAN",
           "safe_norm", "top_k_mask", "centre_offsets", "squared_distance"]


def safe_norm(v: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """Euclidean norm whose gradient at the zero vector is 0 instead of NaN.

    The reference expert (convention (A.3) of Nguyen et al. (2024)) has ``beta1 = 0``;
    ``torch.linalg.norm`` would put ``0 * inf`` into the backward pass there.
    """
    sq = (v * v).sum(dim=dim, keepdim=keepdim)
    pos = sq > 0
    return torch.where(pos, torch.sqrt(torch.where(pos, sq, torch.ones_like(sq))), torch.zeros_like(sq))


def centre_offsets(xs: list, beta1: torch.Tensor) -> list:
    """``x_c - beta1_ic`` ``[B, k, n]`` for each coordinate ``c``: rows ``xs[c] [B, n]``, centres ``beta1 [B, k, d]``."""
    return [x.unsqueeze(-2) - beta1[..., c : c + 1] for c, x in enumerate(xs)]


def squared_distance(diffs: list) -> torch.Tensor:
    """``sum_c diffs[c]^2`` (the squared distance to each centre, atom-major)."""
    sq = diffs[0] * diffs[0]
    for D in diffs[1:]:
        sq = sq + D * D
    return sq


def top_k_mask(scores: torch.Tensor, k_active: int | None, dim: int = -1) -> torch.Tensor:
    """Boolean mask of the ``k_active`` largest scores along ``dim`` (the atom axis).

    Ties are broken by ``torch.topk`` (lowest index first in practice); they have probability 0
    for continuous inputs.  ``None`` or ``k_active == k`` selects every expert.
    """
    k = scores.shape[dim]
    if k_active is None or k_active == k:
        return torch.ones_like(scores, dtype=torch.bool)
    if not (1 <= k_active <= k):
        raise ValueError(f"k_active must be between 1 and the number of experts {k}, got {k_active}")
    if k <= _RANK_MASK_MAX_K and dim % scores.dim() != scores.dim() - 1:
        mask = _rank_mask(scores, k_active, dim)
        if mask is not None:
            return mask
    idx = torch.topk(scores, k_active, dim=dim).indices
    mask = torch.zeros_like(scores, dtype=torch.bool)
    return mask.scatter(dim, idx, True)


#: up to this many atoms, an atom-major mask (the atom axis not the last) is counted by pairwise
#: comparisons of contiguous rows (:func:`_rank_mask`): 3x faster than ``torch.topk`` along a
#: middle axis (k = 4, n = 8 000; the generic EM's Top-K gate evaluates it on every trial step)
_RANK_MASK_MAX_K = 8


def _rank_mask(scores: torch.Tensor, K: int, dim: int) -> torch.Tensor | None:
    """:func:`top_k_mask` by counting, for each atom, the atoms whose score is larger (selected:
    fewer than ``K``), or ``None`` where two scores along ``dim`` are equal or one is NaN: there the
    set depends on ``torch.topk``'s tie-breaking (not lowest index first), which this leaves to it,
    so that the mask is always ``torch.topk``'s (a split start has tied atoms)."""
    rows = scores.unbind(dim)
    k = len(rows)
    above = [torch.zeros_like(rows[0], dtype=torch.uint8) for _ in range(k)]
    for i in range(k):
        for j in range(i + 1, k):
            above[i] += rows[j] > rows[i]
            above[j] += rows[j] < rows[i]
    # each pair adds 1 to one count, or 0 where its scores are equal (or one is NaN): without a tie
    # anywhere the counts of every sample sum to k (k - 1) / 2
    total = above[0].clone()
    for a in above[1:]:
        total += a
    if not bool((total == k * (k - 1) // 2).all()):  # a tie (or NaN): torch.topk decides
        return None
    return torch.stack([a < K for a in above], dim)


class GateFamily:
    """One gate: its score, weight formula, free parameters, canonical form and starts.

    The methods take the gate's *configuration* ``gate`` (a
    :class:`~moestat.model.protocol.ProtocolGate`: score function, ``k_active``, ``temperature``,
    ``reference``, ``variance``); the family holds the mathematics.  Subclasses override
    :meth:`score` and the class attributes below.

    Attributes
    ----------
    name : str
        The registry key (``[gate] normalisation = name`` in a scenario file).
    normalised : bool
        Softmax over the atoms (weights sum to one) or elementwise sigmoid (``False``).
    top_k : bool
        Whether Top-K (``k_active``) is defined for this gate.
    own_score : bool
        The family defines the score from ``beta1`` (a centre); the gate's score function is unused.
    default_reference : bool
        Whether the last atom is the reference (``beta0 = beta1 = 0``) unless the gate says otherwise.
    pins_bias : bool
        Invariant to a common shift of ``beta0`` only: without a reference atom, the last ``beta0``
        is pinned (it is not a free parameter of the fit).
    loss_mass : str
        The mass term of this gate's default Voronoi loss (:mod:`moestat.losses.voronoi_spec`):
        ``softmax`` (``exp(beta0)``) or ``sigmoid`` (``sigmoid(beta0)``: no shift invariance, the
        intercept is identified).
    has_likelihood : bool
        Whether the normalised weights define a mixture likelihood (not for a gate with a shared
        expert of weight one).
    shared_expert : bool
        The last atom is a shared expert (weight one, no router), not routed by the gate.
    """

    name = "base"
    normalised = True
    top_k = True
    own_score = False
    default_reference = True
    pins_bias = False
    loss_mass = "softmax"
    has_likelihood = True
    shared_expert = False

    def __repr__(self) -> str:
        return f"<gate {self.name}>"

    #: whether :meth:`score_rows` is implemented: atom ``i``'s score depends on ``beta1_i`` alone and the
    #: family writes it, and its derivative in ``beta1_i``, atom-major (the generic EM's gate step)
    separable_score = False

    @property
    def split_by_shift(self) -> bool:
        """An atom copied ``m`` times keeps its weight when each copy's ``beta0`` drops by ``log m``:
        true where an atom's mass is ``exp(beta0)`` (:attr:`loss_mass` ``softmax``); otherwise a
        near-truth start solves for the copies' intercept (:meth:`split_weight`)."""
        return self.loss_mass == "softmax"

    def split_weight(self, gate: Any, x: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor) -> torch.Tensor:
        """The per-atom weight ``[..., n, k]`` that the copies of a split atom share (a near-truth
        start of an over-specified fit, when not :attr:`split_by_shift`): the weights themselves."""
        return self.weights(gate, x, beta0, beta1)

    def check(self, gate: Any) -> None:
        """Raise ``ValueError`` if the gate configuration ``gate`` is not one this family defines
        (called when a :class:`~moestat.model.protocol.ProtocolGate` is built)."""

    # ---- the weight formula ----------------------------------------------------------------
    def score(self, gate: Any, x: torch.Tensor, beta1: torch.Tensor) -> torch.Tensor:
        """Scores without the bias, ``[..., n, k]`` for ``x [..., n, d]``, ``beta1 [..., k, d]``."""
        return gate.score(x, beta1)

    def score_rows(self, gate: Any, xs: list, beta1: torch.Tensor,
                   grad: bool = False) -> tuple[torch.Tensor, list | None]:
        """The scores atom-major and, with ``grad``, their derivatives in each atom's own ``beta1_i``.

        Only for a family with :attr:`separable_score` (atom ``i``'s score a function of ``beta1_i``
        and ``x`` alone): then ``du_i / dbeta1_j = 0`` for ``j != i`` and the whole Jacobian of the
        logits is ``d`` rows ``[B, k, n]``, which the generic EM's gate step contracts in closed
        form instead of a :func:`torch.func.jacfwd` over every free parameter
        (:func:`moestat.estimators.mle_generic.gate_fisher`).

        Parameters
        ----------
        gate : ProtocolGate
        xs : list of Tensor
            The ``d`` input coordinates as rows ``[B, n]``.
        beta1 : Tensor, shape ``[B, k, d]``
        grad : bool
            Also return ``ds_i / dbeta1_ic``.

        Returns
        -------
        s : Tensor, shape ``[B, k, n]``
            The scores :meth:`score` gives, transposed (equal up to round-off).
        ds : list of ``d`` Tensor ``[B, k, n]``, or None
            ``ds[c][b, i, n] = ds_i(x_n) / dbeta1_ic`` (``None`` without ``grad``).
        """
        raise NotImplementedError(f"the {self.name} gate has no atom-major score (separable_score is False)")

    def score_rows_hessian(self, gate: Any, xs: list, beta1: torch.Tensor) -> tuple[torch.Tensor, list, list]:
        """:meth:`score_rows` with ``grad``, and the second derivatives ``dds[c][e] [B, k, n] =
        d^2 s_i / dbeta1_ic dbeta1_ie`` (the generic EM's analytic Newton polish)."""
        raise NotImplementedError(f"the {self.name} gate has no atom-major score (separable_score is False)")

    def logits(self, gate: Any, s: torch.Tensor, beta0: torch.Tensor, atom_axis: int = -1) -> torch.Tensor:
        """``(s + beta0) / temperature`` for scores ``s`` whose atoms lie along ``atom_axis``
        (``-1``: ``[..., n, k]``; ``-2``: the EM's atom-major ``[..., k, n]``)."""
        logits = s + beta0.unsqueeze(-2 if atom_axis == -1 else -1)
        if gate.temperature != 1.0:  # no pass over the samples for the common case
            logits = logits / gate.temperature
        return logits

    def log_weights_from_scores(self, gate: Any, s: torch.Tensor, beta0: torch.Tensor, normalise: bool = True,
                                atom_axis: int = -1, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Log-weights from the scores ``s`` (see :meth:`log_weights`); ``mask``: the Top-K mask of ``s``
        when the caller has it (:func:`top_k_mask` of the same scores: it depends on ``s`` alone)."""
        u = self.logits(gate, s, beta0, atom_axis)
        if not self.normalised:
            u = torch.nn.functional.logsigmoid(u)
        K = gate.k_active
        if K is not None and K < s.shape[atom_axis]:  # Top-K on the score, before the bias (eq. (2))
            if mask is None:
                mask = top_k_mask(s.detach(), K, dim=atom_axis)
            u = u.masked_fill(~mask, float("-inf"))
        return torch.log_softmax(u, atom_axis) if normalise else u

    def log_weights(self, gate: Any, x: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor,
                    normalise: bool = True) -> torch.Tensor:
        """Log gate weights ``[..., n, k]`` that sum to one (Top-K zeros are ``-inf``).

        Computed in log space so that derivatives (:mod:`torch.func`) stay finite where a Top-K
        gate switches an atom off; a sigmoid gate's weights are normalised here.
        ``normalise=False``: the unnormalised ``u`` with ``log w = log_softmax(u)`` (the logits, or
        ``log sigmoid`` of them).
        """
        return self.log_weights_from_scores(gate, self.score(gate, x, beta1), beta0, normalise)

    def weights(self, gate: Any, x: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor,
                smooth_topk: float | None = None) -> torch.Tensor:
        """Gate weights ``[..., n, k]`` (a sigmoid gate's unnormalised).

        ``smooth_topk``: temperature ``T`` of the smoothed Top-K mask the least-squares fit uses
        for continuation (mask ``sigmoid((s - t(x)) / T)``, ``t`` the midpoint of the K-th and
        (K+1)-th scores; the same as :mod:`moestat.estimators.lse_kernel`).
        """
        return self.weights_from_scores(gate, self.score(gate, x, beta1), beta0, smooth_topk)

    def weights_from_scores(self, gate: Any, s: torch.Tensor, beta0: torch.Tensor,
                            smooth_topk: float | None = None) -> torch.Tensor:
        """Weights from the scores ``s [..., n, k]`` (see :meth:`weights`)."""
        logits = self.logits(gate, s, beta0)
        if not self.normalised:
            return torch.sigmoid(logits)
        k, K = s.shape[-1], gate.k_active
        if K is None or K >= k:
            return torch.softmax(logits, dim=-1)
        if smooth_topk is not None:
            top = torch.topk(s, K + 1, dim=-1).values
            thr = 0.5 * (top[..., K - 1] + top[..., K])
            m = torch.sigmoid((s - thr.unsqueeze(-1)) / smooth_topk)
            e = torch.exp(logits - logits.amax(-1, keepdim=True))
            return m * e / (m * e).sum(-1, keepdim=True)
        return torch.softmax(logits.masked_fill(~top_k_mask(s, K), float("-inf")), dim=-1)

    # ---- free parameters and canonical form ------------------------------------------------
    def free_mask(self, k: int, d: int, reference: bool) -> np.ndarray:
        """Which of the rows ``V_i = (beta1_i, beta0_i)`` are free parameters, ``bool [k, d + 1]``."""
        free = np.ones((k, d + 1), dtype=bool)
        if reference:  # the last atom is the reference: beta0 = beta1 = 0
            free[-1] = False
        elif self.pins_bias:  # invariant to a common shift of beta0 only
            free[-1, d] = False
        return free

    def to_convention(self, V: np.ndarray, reference: bool) -> np.ndarray:
        """``V [B, k, d + 1]`` moved onto :meth:`free_mask`'s convention (the pinned entries zero),
        by the shift the gate is invariant to; a new array."""
        if reference:
            return V - V[:, -1:, :]  # softmax of a linear score: a common shift of (beta1, beta0)
        V = V.copy()
        if self.pins_bias:
            V[..., -1] -= V[:, -1:, -1]
        return V

    def canonical_bias(self, beta0: np.ndarray) -> np.ndarray:
        """The canonical ``beta0 [..., k]`` of a fit: a gate invariant to a common shift of ``beta0``
        reports the one with the last ``beta0 = 0`` (the pinned entry of :meth:`free_mask`)."""
        return beta0 - beta0[..., -1:] if self.pins_bias else beta0

    def truth_error(self, beta0: np.ndarray, beta1: np.ndarray, reference: bool) -> str | None:
        """Why the true router ``beta0 [k]``, ``beta1 [k, d]`` is not in this gate's canonical form
        (the form every fit is reported in, so that losses compare like with like), or ``None``."""
        if reference and (beta0[-1] != 0 or np.any(beta1[-1] != 0)):
            return "with a softmax gate the last true atom is the reference: beta0 = 0 and beta1 = 0"
        if self.pins_bias and not reference and beta0[-1] != 0:
            return (f"with a {self.name} gate the last true atom has beta0 = 0 (the gate is invariant to a common "
                    f"shift of beta0), got {float(beta0[-1]):.6g}")
        return None

    # ---- starts ------------------------------------------------------------------------------
    def random_router(self, X: np.ndarray, k: int, rng: np.random.Generator, beta0: np.ndarray,
                      beta1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The router ``(beta0 [k], beta1 [k, d])`` of a random start, from the default
        ``(beta0, beta1)`` (a uniform gate) and inputs ``X [n, d]``: unchanged here."""
        return beta0, beta1


class SoftmaxGate(GateFamily):
    """``w_i = softmax_i((s_i(x) + beta0_i) / T)`` (dense or Top-K); the last atom the reference."""

    name = "softmax"


class SigmoidGate(GateFamily):
    """``w_i = sigmoid((s_i(x) + beta0_i) / T)``, unnormalised (Nguyen, Ho & Rinaldo (2024)); no reference atom."""

    name = "sigmoid"
    normalised = False
    top_k = False
    default_reference = False
    loss_mass = "sigmoid"


class GaussianGate(GateFamily):
    """``w_i = pi_i N(x; mu_i, v I) / sum_j pi_j N(x; mu_j, v I)`` with ``beta0_i = log pi_i``, ``beta1_i = mu_i``.

    The Gaussian gate of Nguyen, Nguyen, Nguyen & Ho (2024) with the known isotropic kernel
    variance ``v = gate.variance``: a softmax of ``-||x - mu_i||^2 / (2 v) + beta0_i``.  Invariant to
    a common shift of ``beta0`` only; a fit's ``exp(beta0)`` are renormalised to sum to one (they are
    the mixing weights).
    """

    name = "gaussian"
    top_k = False
    own_score = True
    default_reference = False
    pins_bias = True

    separable_score = True

    def score(self, gate: Any, x: torch.Tensor, beta1: torch.Tensor) -> torch.Tensor:
        # log N(x; mu_i, v I) up to a term common to all i
        return -0.5 * ((x.unsqueeze(-2) - beta1.unsqueeze(-3)) ** 2).sum(-1) / gate.variance

    def score_rows(self, gate: Any, xs: list, beta1: torch.Tensor, grad: bool = False):
        diffs = centre_offsets(xs, beta1)
        s = -0.5 * squared_distance(diffs) / gate.variance
        # d/dmu_ic of -||x - mu_i||^2 / (2 v) = (x_c - mu_ic) / v
        return s, ([D / gate.variance for D in diffs] if grad else None)

    def score_rows_hessian(self, gate: Any, xs: list, beta1: torch.Tensor):
        s, ds = self.score_rows(gate, xs, beta1, grad=True)
        zero, diag = torch.zeros_like(s), torch.full_like(s, -1.0 / gate.variance)  # -I / v
        return s, ds, [[diag if c == e else zero for e in range(len(xs))] for c in range(len(xs))]

    def canonical_bias(self, beta0: np.ndarray) -> np.ndarray:
        # imported here: scipy.special costs about 0.5 CPU-s, on every command's start-up when at
        # module level (before the main job's first unit), and only this gate uses it
        from scipy.special import logsumexp

        return beta0 - logsumexp(beta0, axis=-1, keepdims=True)

    def truth_error(self, beta0: np.ndarray, beta1: np.ndarray, reference: bool) -> str | None:
        if reference:
            return super().truth_error(beta0, beta1, reference)
        if abs(np.exp(beta0).sum() - 1) > 1e-9:
            return f"a Gaussian gate's exp(beta0) are its mixing weights and must sum to 1, got {np.exp(beta0).sum():.6g}"
        return None

    def random_router(self, X, k, rng, beta0, beta1):
        """Centres on ``k`` random inputs, equal mixing weights."""
        n = X.shape[0]
        return np.full(k, -np.log(k)), X[rng.choice(n, size=k, replace=n < k)]


SOFTMAX = SoftmaxGate()
SIGMOID = SigmoidGate()
GAUSSIAN = GaussianGate()

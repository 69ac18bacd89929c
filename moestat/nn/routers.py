"""Pluggable routers (gates) for neural MoE layers, all speaking one output format.

Every router maps features ``h`` of shape ``[n, d]`` to a :class:`RouterOutput` holding the
combine weights ``[n, M]`` (exactly 0 off the selected experts), the boolean selection mask, the
full softmax probabilities and an auxiliary loss.  The score and Top-K vocabulary is the one of
:mod:`moestat.model.gates` (``gate_scores``, ``top_k_mask``, ``gate_weights``); this module only adds
the trainable parameters and the Datta (2024) / Shazeer et al. (2017) pieces that are not in it
(noise, un-renormalised top-k, balancing losses).

Routers (``LAYER_ROUTERS``):

========================  ====================================================================
``dense``                 softmax(x W^T + b) over all M experts (thesis "output mixture" gate)
``naive_topk``            softmax(x W^T) * TopK(x W^T, k), **not** renormalised (Datta (2024) B2.1)
``topk_mask``             softmax over the top-k logits only, renormalised (Datta (2024) B2.2)
``noisy_topk``            softmax(KeepTopK(x W_g + N(0,1) softplus(x W_noise), k)) (Datta (2024) B2.3)
``cosine``                Top-K softmax of the cosine score + b (Nguyen et al. (2024) eq. 2)
``perturbed``             Top-K softmax of the perturbed cosine score + b (Nguyen et al. (2024) eq. 9)
========================  ====================================================================

Any router accepts ``w_importance`` (Datta (2024) B3: ``w CV(sum_x G(x))^2``); ``noisy_topk`` also
accepts ``w_load`` (the Normal-CDF smooth load estimator).

The k = 1 zero-gradient problem (davidmrau/mixture-of-experts issue #27): with k = 1,
``softmax(KeepTopK(H, 1))`` is the constant 1 at the kept expert, so the task loss sends **no
gradient** to ``W_g`` (the same holds for ``topk_mask`` and the cosine routers with K = 1).  With
``k1_fix=True`` (the default) a top-1 router uses the un-renormalised full-softmax probability of
the selected expert as its weight (the Switch-Transformer / thesis top-1 convention), which keeps
a gradient path; ``k1_fix=False`` gives the literal formula.  The load loss is computed in
*logit* units in both cases (thresholds are taken from ``H``, never from probabilities), which
avoids the unit mix-up of the PR that fixed issue #27 upstream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from moestat.model.gates import canonical_name, gate_scores, gate_weights, top_k_mask
from moestat.nn.regularizers import importance_loss

__all__ = [
    "LAYER_ROUTERS",
    "RouterOutput",
    "Router",
    "DenseRouter",
    "NaiveTopKRouter",
    "TopKMaskRouter",
    "NoisyTopKRouter",
    "CosineRouter",
    "cv_squared",
    "load_loss",
    "noisy_top_k_load",
    "make_router",
]

#: The routers a neural MoE layer can use (a different list from the statistical score kinds of
#: :data:`moestat.model.gates.GATE_KINDS`, which these reuse for ``cosine`` and ``perturbed``);
#: ``perturbed_cosine`` is accepted as an alias of ``perturbed`` (and ``-`` for ``_``).
LAYER_ROUTERS = ("dense", "naive_topk", "topk_mask", "noisy_topk", "cosine", "perturbed")

_EPS = 1e-10


@dataclass
class RouterOutput:
    """What a router returns.

    Attributes
    ----------
    weights : Tensor, shape ``[n, M]``
        Combine weights; exactly 0 off the selected experts.  They sum to 1 per row except for
        ``naive_topk`` (and a top-1 router with ``k1_fix``), whose kept weights sum to < 1.
    mask : Tensor of bool, shape ``[n, M]``
        Selected experts (``weights > 0`` up to underflow).
    probs : Tensor, shape ``[n, M]``
        Full (dense) softmax probabilities of the logits the router selects on.
    aux_loss : Tensor, scalar
        Weighted balancing losses (0 when none is switched on).
    logits : Tensor, shape ``[n, M]``
        The (clean) scores used for selection.
    """

    weights: torch.Tensor
    mask: torch.Tensor
    probs: torch.Tensor
    aux_loss: torch.Tensor
    logits: torch.Tensor


def cv_squared(v: torch.Tensor, eps: float = _EPS) -> torch.Tensor:
    """Squared coefficient of variation ``(std(v) / (mean(v) + eps))^2`` over the last axis.

    The population standard deviation (``ddof = 0``) is used, as in Shazeer et al.'s
    ``tf.nn.moments``; Datta (2024) does not say which (B3).  A single entry gives 0.
    """
    if v.shape[-1] < 2:
        return torch.zeros(v.shape[:-1], dtype=v.dtype, device=v.device)
    std = v.std(dim=-1, unbiased=False)
    return (std / (v.mean(dim=-1) + eps)) ** 2


def noisy_top_k_load(
    clean: torch.Tensor, noisy: torch.Tensor, noise_std: torch.Tensor, k: int
) -> torch.Tensor:
    """Smooth per-sample probability that each expert is in the top k (Datta (2024) B3, Load).

    ``P(x, i) = Phi((clean_i - kth_excluding(H, k, i)) / noise_std_i)``, where
    ``kth_excluding(H, k, i)`` is the k-th largest entry of the noisy logits ``H`` without entry
    ``i``: the (k+1)-th largest of ``H`` when ``i`` is currently in the top k, the k-th largest
    otherwise (Shazeer et al. 2017, Appendix A).

    Parameters
    ----------
    clean : Tensor, shape ``[n, M]``
        Clean logits ``x W_g``.
    noisy : Tensor, shape ``[n, M]``
        One noisy sample ``H(x)`` (the same one used for routing).
    noise_std : Tensor, shape ``[n, M]``
        ``softplus(x W_noise)`` (> 0).
    k : int
        Number of selected experts, ``1 <= k < M``.

    Returns
    -------
    Tensor, shape ``[n, M]``
        ``P(x, i)``; summed over the batch this is ``Load(X)``.
    """
    M = clean.shape[-1]
    if not (1 <= k < M):
        raise ValueError(f"k must satisfy 1 <= k < M={M} for the load estimator, got {k}")
    top = torch.topk(noisy, k + 1, dim=-1).values  # [n, k+1], descending
    kth = top[..., k - 1 : k]  # k-th largest
    kp1 = top[..., k : k + 1]  # (k+1)-th largest
    in_top = noisy >= kth  # i is among the top k of H
    threshold = torch.where(in_top, kp1, kth)
    normal = torch.distributions.Normal(
        torch.zeros((), dtype=clean.dtype, device=clean.device), torch.ones((), dtype=clean.dtype, device=clean.device)
    )
    return normal.cdf((clean - threshold) / noise_std)


def load_loss(
    clean: torch.Tensor, noisy: torch.Tensor, noise_std: torch.Tensor, k: int, w_load: float = 0.1
) -> torch.Tensor:
    """``L_load = w * CV(Load(X))^2`` with ``Load(X)_i = sum_x P(x, i)`` (Datta (2024) B3).

    See :func:`noisy_top_k_load` for the arguments.

    Returns
    -------
    Tensor, scalar
    """
    return w_load * cv_squared(noisy_top_k_load(clean, noisy, noise_std, k).sum(dim=0))


class Router(nn.Module):
    """Base class: a linear router ``x -> logits`` of ``n_experts`` rows.

    Parameters
    ----------
    in_features : int
        Feature dimension ``d`` the router sees.
    n_experts : int
        ``M``.
    k : int or None
        Experts selected per input (``None`` = all).
    bias : bool
        Learn a per-expert bias ``beta0``.
    w_importance : float
        Weight of the importance loss (0 = off).
    k1_fix : bool
        For k = 1, weight the selected expert by its full-softmax probability (see module
        docstring).
    """

    def __init__(
        self,
        in_features: int,
        n_experts: int,
        k: int | None = None,
        bias: bool = True,
        w_importance: float = 0.0,
        k1_fix: bool = True,
    ) -> None:
        super().__init__()
        if n_experts < 1:
            raise ValueError(f"n_experts must be >= 1, got {n_experts}")
        if k is not None and not (1 <= int(k) <= n_experts):
            raise ValueError(f"k must be between 1 and n_experts={n_experts}, got {k}")
        if not (w_importance >= 0):
            raise ValueError(f"w_importance must be >= 0, got {w_importance}")
        self.in_features = int(in_features)
        self.n_experts = int(n_experts)
        self.k = None if k is None or int(k) == n_experts else int(k)
        self.w_importance = float(w_importance)
        self.k1_fix = bool(k1_fix)
        self.weight = nn.Parameter(torch.empty(n_experts, in_features))
        self.bias = nn.Parameter(torch.zeros(n_experts)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # nn.Linear's default

    def _beta0(self, like: torch.Tensor) -> torch.Tensor:
        return self.bias if self.bias is not None else torch.zeros(self.n_experts, dtype=like.dtype, device=like.device)

    def scores(self, h: torch.Tensor) -> torch.Tensor:
        """Clean scores ``[n, M]`` (without bias)."""
        return gate_scores(h, self.weight, "linear")

    def _finish(self, weights, mask, probs, logits, aux=None) -> RouterOutput:
        aux = torch.zeros((), dtype=weights.dtype, device=weights.device) if aux is None else aux
        if self.w_importance > 0 and self.training:
            aux = aux + importance_loss(weights, self.w_importance, squared=True)
        return RouterOutput(weights, mask, probs, aux, logits)

    def _topk_weights(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Renormalised Top-K softmax of ``scores + b`` (selection on the score alone)."""
        beta0 = self._beta0(scores)
        probs = torch.softmax(scores + beta0, dim=-1)
        mask = top_k_mask(scores, self.k)
        if self.k == 1 and self.k1_fix:
            weights = probs * mask  # un-renormalised: keeps a gradient to the router
        else:
            weights = gate_weights(scores, beta0, self.k)
        return weights, mask, probs

    def forward(self, h: torch.Tensor) -> RouterOutput:  # pragma: no cover - abstract
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, n_experts={self.n_experts}, k={self.k}"


class DenseRouter(Router):
    """Dense softmax gate ``softmax(x W^T + b)`` (``k`` is ignored)."""

    def __init__(self, in_features: int, n_experts: int, k: int | None = None, **kw) -> None:
        super().__init__(in_features, n_experts, None, **kw)

    def forward(self, h: torch.Tensor) -> RouterOutput:
        s = self.scores(h)
        w = gate_weights(s, self._beta0(s), None)
        return self._finish(w, torch.ones_like(w, dtype=torch.bool), w, s)


class TopKMaskRouter(Router):
    """Top-k mask gate: softmax over the top-k logits, renormalised (Datta (2024) B2.2)."""

    def forward(self, h: torch.Tensor) -> RouterOutput:
        s = self.scores(h)
        w, mask, probs = self._topk_weights(s)
        return self._finish(w, mask, probs, s)


class NaiveTopKRouter(Router):
    """Naive top-k gate: ``softmax(x W^T) * TopK(x W^T, k)``, not renormalised (Datta (2024) B2.1).

    The kept weights sum to less than 1, so the gate always receives a gradient, even for k = 1.
    """

    def forward(self, h: torch.Tensor) -> RouterOutput:
        s = self.scores(h)
        probs = torch.softmax(s + self._beta0(s), dim=-1)
        mask = top_k_mask(s, self.k)
        return self._finish(probs * mask, mask, probs, s)


class NoisyTopKRouter(Router):
    """Noisy top-k gate with optional load loss (Datta (2024) B2.3 and B3; Shazeer et al. 2017).

    ``H(x)_i = (x W_g)_i + eps_i softplus((x W_noise)_i)``, ``eps ~ N(0, 1)`` per input and expert,
    drawn only in training mode from the generator passed to :meth:`set_generator` (or the
    ``generator`` argument of ``forward``).  ``W_g`` and ``W_noise`` start at 0 as in Datta (2024),
    so the noise sd is ``log 2`` and the clean logits tie at initialisation.  No bias.

    Parameters
    ----------
    in_features, n_experts, k
        As for :class:`Router`; ``k`` is required here.
    w_load : float
        Weight of the load loss (0 = off; Datta (2024) uses 0.1).
    w_importance : float
        Weight of the importance loss (0 = off).
    k1_fix : bool
        See the module docstring.
    """

    def __init__(
        self,
        in_features: int,
        n_experts: int,
        k: int | None = 2,
        w_load: float = 0.0,
        w_importance: float = 0.0,
        k1_fix: bool = True,
    ) -> None:
        super().__init__(in_features, n_experts, k, bias=False, w_importance=w_importance, k1_fix=k1_fix)
        if not (w_load >= 0):
            raise ValueError(f"w_load must be >= 0, got {w_load}")
        self.w_load = float(w_load)
        self.w_noise = nn.Parameter(torch.zeros(n_experts, in_features))
        nn.init.zeros_(self.weight)
        self._generator: torch.Generator | None = None

    def set_generator(self, generator: torch.Generator | None) -> None:
        """Use ``generator`` for the routing noise (required in training mode)."""
        self._generator = generator

    def forward(self, h: torch.Tensor, generator: torch.Generator | None = None) -> RouterOutput:
        clean = self.scores(h)
        gen = generator if generator is not None else self._generator
        M = self.n_experts
        k = self.k if self.k is not None else M
        if self.training:
            if gen is None:
                raise ValueError("NoisyTopKRouter needs a torch.Generator in training mode (set_generator)")
            noise_std = F.softplus(gate_scores(h, self.w_noise, "linear"))  # threshold 20 = torch default
            eps = torch.randn(clean.shape, generator=gen, dtype=clean.dtype, device="cpu").to(clean.device)
            noisy = clean + eps * noise_std
        else:
            noise_std, noisy = None, clean  # noise off at evaluation (Datta (2024): "presumably")
        probs = torch.softmax(noisy, dim=-1)
        mask = top_k_mask(noisy, None if k == M else k)
        if k == 1 and self.k1_fix:
            weights = probs * mask
        else:
            weights = torch.softmax(noisy.masked_fill(~mask, float("-inf")), dim=-1)  # KeepTopK
        aux = None
        if self.training and self.w_load > 0 and k < M:
            aux = load_loss(clean, noisy, noise_std, k, self.w_load)
        return self._finish(weights, mask, probs, clean, aux)


class CosineRouter(Router):
    """Cosine (``tau = 0``) or perturbed cosine router with Top-K (Nguyen et al. (2024) eqs. 2 and 9).

    Scores come from :func:`moestat.model.gates.gate_scores` with ``kind="cosine"`` or
    ``"perturbed"``; Top-K is chosen on the score alone, and the softmax of ``score + b`` over the
    K selected experts gives the weights (:func:`moestat.model.gates.gate_weights`).  The scores lie in
    ``[-1, 1]``; ``temperature`` divides them before the softmax (1 = the paper's model).

    Parameters
    ----------
    tau : float or (float, float)
        ``(tau1, tau2)``; ``None`` or 0 gives the vanilla cosine router.
    temperature : float
        Score divisor (> 0).
    """

    def __init__(
        self,
        in_features: int,
        n_experts: int,
        k: int | None = None,
        tau: float | Sequence[float] | None = None,
        temperature: float = 1.0,
        **kw,
    ) -> None:
        super().__init__(in_features, n_experts, k, **kw)
        if not (temperature > 0):
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.tau = tau
        self.temperature = float(temperature)
        self.kind = "cosine" if tau is None or tau == 0 else "perturbed"

    def scores(self, h: torch.Tensor) -> torch.Tensor:
        tau = 0.0 if self.tau is None else self.tau
        return gate_scores(h, self.weight, self.kind, tau) / self.temperature

    def forward(self, h: torch.Tensor) -> RouterOutput:
        s = self.scores(h)
        w, mask, probs = self._topk_weights(s)
        return self._finish(w, mask, probs, s)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", kind={self.kind}, tau={self.tau}, temperature={self.temperature}"


def make_router(
    name: str,
    in_features: int,
    n_experts: int,
    k: int | None = 2,
    *,
    tau: float | Sequence[float] = 1.0,
    temperature: float = 1.0,
    w_importance: float = 0.0,
    w_load: float = 0.0,
    k1_fix: bool = True,
) -> Router:
    """Build a router by name.

    Parameters
    ----------
    name : str
        One of :data:`LAYER_ROUTERS`.
    in_features : int
        Router input dimension.
    n_experts : int
        ``M``.
    k : int or None
        Experts per input (ignored by ``dense``).
    tau : float or (float, float)
        Perturbation of ``perturbed_cosine`` (must be > 0 there).
    temperature : float
        Score divisor of the cosine routers.
    w_importance, w_load : float
        Balancing-loss weights (``w_load`` only for ``noisy_topk``).
    k1_fix : bool
        Keep a gradient path for k = 1 (see module docstring).

    Returns
    -------
    Router

    Examples
    --------
    >>> import torch
    >>> r = make_router("topk_mask", 5, 4, k=2)
    >>> out = r(torch.randn(3, 5))
    >>> out.weights.shape, int(out.mask.sum())
    (torch.Size([3, 4]), 6)
    """
    try:
        name = canonical_name(name, LAYER_ROUTERS)
    except ValueError:
        raise ValueError(f"unknown router {name!r}; expected one of {LAYER_ROUTERS}") from None
    common = dict(w_importance=w_importance, k1_fix=k1_fix)
    if name == "dense":
        return DenseRouter(in_features, n_experts, **common)
    if name == "naive_topk":
        return NaiveTopKRouter(in_features, n_experts, k, bias=False, **common)
    if name == "topk_mask":
        return TopKMaskRouter(in_features, n_experts, k, bias=False, **common)
    if name == "noisy_topk":
        return NoisyTopKRouter(in_features, n_experts, k, w_load=w_load, **common)
    if name == "cosine":
        return CosineRouter(in_features, n_experts, k, tau=None, temperature=temperature, **common)
    if name == "perturbed":
        t = (float(tau), float(tau)) if isinstance(tau, (int, float)) else tuple(tau)
        if not all(v > 0 for v in t):
            raise ValueError(f"the perturbed cosine router needs tau > 0, got {tau!r} (tau = 0 is the vanilla 'cosine')")
        return CosineRouter(in_features, n_experts, k, tau=t, temperature=temperature, **common)
    raise AssertionError(f"router {name!r} is in LAYER_ROUTERS but not built")  # pragma: no cover

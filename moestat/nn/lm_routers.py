"""Token routers of the MoE language model (:mod:`moestat.nn.transformer`).

Three score families, all followed by the same Top-K bookkeeping (X-MoE / Switch style):

* ``linear`` -- the softmax top-k router of the Switch Transformer: ``z = W x`` (no bias);
* ``cosine`` -- the X-MoE router (Chi et al. 2022): the token is projected to a low dimension
  ``r`` by a bias-free ``P`` (``h = P x``), expert embeddings ``e_i`` live in ``R^r`` and
  ``z_i = cos(h, e_i) / temperature``; the score is eq. (2) of Nguyen et al. (2024), computed by
  :func:`moestat.model.gates.gate_scores` (``kind="cosine"``);
* ``perturbed`` -- the perturbed cosine router of Nguyen et al. (2024), eq. (9):
  ``z_i = h . e_i / ((||e_i|| + tau1)(||h|| + tau2)) / temperature``
  (:func:`~moestat.model.gates.gate_scores`, ``kind="perturbed"``); ``tau -> 0`` gives ``cosine``.

Top-K: ``p = softmax(z)`` over the ``M`` experts, keep the ``k`` largest, renormalise them to
sum to one (the combination weights); with ``k = M`` this is the dense softmax gate.  The router
gradient flows through the kept probabilities (it vanishes for ``k = 1``, where the renormalised
weight is 1, as in the X-MoE code).  The optional balance loss is the Switch Transformer's
``M * sum_i f_i P_i`` with ``f_i`` the fraction of token-slots sent to expert ``i`` and ``P_i``
the mean probability of expert ``i`` (Fedus et al. 2022, eq. 4), times ``balance_coef``.

These routers are separate from :mod:`moestat.nn.routers` (the real-data classifier's gates):
the LM routers act on token features ``[n_tokens, d]`` and need the low-dimensional projection of
X-MoE, which those gates do not have.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from moestat.model.gates import canonical_name, gate_scores
from moestat.seeding import torch_generator

__all__ = ["LM_ROUTERS", "RoutedTokens", "LMRouter"]

#: The router kinds of the language model, in the order the docs compare them.
LM_ROUTERS = ("linear", "cosine", "perturbed")


@dataclass
class RoutedTokens:
    """What :class:`LMRouter` returns for ``n`` tokens and ``M`` experts.

    Attributes
    ----------
    logits : Tensor, shape ``[n, M]``
        Router logits ``z`` (scores divided by the temperature for the cosine kinds).
    probs : Tensor, shape ``[n, M]``
        ``softmax(z)`` over all experts.
    weights : Tensor, shape ``[n, M]``
        Combination weights: the top-k probabilities renormalised, 0 elsewhere.
    mask : BoolTensor, shape ``[n, M]``
        Selected experts (exactly ``k`` per token).
    topk : LongTensor, shape ``[n, k]``
        Indices of the selected experts, most probable first.
    aux_loss : Tensor, scalar
        ``balance_coef`` times the balance loss (0 when ``balance_coef == 0``).
    """

    logits: torch.Tensor
    probs: torch.Tensor
    weights: torch.Tensor
    mask: torch.Tensor
    topk: torch.Tensor
    aux_loss: torch.Tensor


class LMRouter(nn.Module):
    """A token router: ``[n, d] -> RoutedTokens``; see the module docstring for the maths.

    Parameters
    ----------
    d_model : int
        Token feature dimension ``d``.
    n_experts : int
        Number of experts ``M``.
    k : int
        Experts per token (``1 <= k <= M``).
    kind : {"linear", "cosine", "perturbed"}
        Score family (``perturbed_cosine`` is accepted, as everywhere in moestat).
    router_dim : int
        Projection dimension ``r`` of the cosine kinds (ignored by ``linear``).
    temperature : float
        Divisor of the cosine scores (0.3: the value of the public perturbed-router implementation).
    tau : float or (float, float)
        ``(tau1, tau2)`` of the perturbed score (one number sets both).
    balance_coef : float
        Weight of the Switch balance loss (0: none).
    random_state : int, SeedSequence or torch.Generator
        Initialisation seed: weights ``N(0, 0.02^2)``, expert embeddings ``N(0, 1)``.

    Examples
    --------
    >>> r = LMRouter(16, 4, 2, kind="cosine", random_state=0)
    >>> out = r(torch.zeros(5, 16) + 1.0)
    >>> tuple(out.weights.shape), tuple(out.topk.shape)
    ((5, 4), (5, 2))
    """

    def __init__(self, d_model: int, n_experts: int, k: int = 2, *, kind: str = "linear", router_dim: int = 8,
                 temperature: float = 0.3, tau: float | tuple[float, float] = 0.1, balance_coef: float = 0.0,
                 random_state=0) -> None:
        super().__init__()
        for name, v in (("d_model", d_model), ("n_experts", n_experts), ("k", k), ("router_dim", router_dim)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if k > n_experts:
            raise ValueError(f"k={k} must not exceed n_experts={n_experts}")
        try:
            kind = canonical_name(kind, LM_ROUTERS)
        except ValueError:
            raise ValueError(f"kind must be one of {LM_ROUTERS}, got {kind!r}") from None
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if not balance_coef >= 0:
            raise ValueError(f"balance_coef must be >= 0, got {balance_coef!r}")
        t = (float(tau), float(tau)) if isinstance(tau, (int, float)) else tuple(float(v) for v in tau)
        if len(t) != 2 or not all(v >= 0 for v in t):
            raise ValueError(f"tau must be a non-negative number or pair, got {tau!r}")
        self.d_model, self.n_experts, self.k, self.kind = int(d_model), int(n_experts), int(k), kind
        self.router_dim, self.temperature, self.tau, self.balance_coef = int(router_dim), float(temperature), t, float(balance_coef)
        gen = torch_generator(random_state)
        if kind == "linear":
            self.weight = nn.Parameter(torch.randn(n_experts, d_model, generator=gen) * 0.02)
            self.proj = self.expert_emb = None
        else:
            self.weight = None
            self.proj = nn.Parameter(torch.randn(router_dim, d_model, generator=gen) * 0.02)
            # unit-scale embeddings: only their directions (cosine) or norms relative to tau matter
            self.expert_emb = nn.Parameter(torch.randn(n_experts, router_dim, generator=gen))

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """Router logits ``z`` ``[n, M]`` of tokens ``x`` ``[n, d]``."""
        if self.kind == "linear":
            return gate_scores(x, self.weight, "linear")
        h = x @ self.proj.t()  # [n, r]
        return gate_scores(h, self.expert_emb, self.kind, self.tau) / self.temperature

    def forward(self, x: torch.Tensor) -> RoutedTokens:  # noqa: D401 - nn.Module API
        """Route tokens ``x`` of shape ``[n, d]``; see :class:`RoutedTokens`."""
        if x.ndim != 2 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape [n, {self.d_model}], got {tuple(x.shape)}")
        logits = self.scores(x)
        probs = torch.softmax(logits, dim=-1)
        top_p, top_i = probs.topk(self.k, dim=-1)
        kept = top_p / top_p.sum(-1, keepdim=True)
        weights = torch.zeros_like(probs).scatter(-1, top_i, kept)
        mask = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, top_i, True)
        aux = probs.new_zeros(())
        if self.balance_coef > 0:
            frac = mask.to(probs.dtype).mean(0) / self.k  # f_i: share of the n k token-slots
            aux = self.balance_coef * self.n_experts * (frac * probs.mean(0)).sum()
        return RoutedTokens(logits, probs, weights, mask, top_i, aux)

    def extra_repr(self) -> str:
        extra = "" if self.kind == "linear" else f", router_dim={self.router_dim}, temperature={self.temperature}"
        if self.kind == "perturbed":
            extra += f", tau={self.tau}"
        return f"kind={self.kind}, d_model={self.d_model}, n_experts={self.n_experts}, k={self.k}{extra}"

"""Expert-subset discovery for Soft MoE: Algorithm 1 of the Soft MoE implicit-bias paper (2024) and its baselines.

Algorithm 1 (the paper, Section 4.3) for an input ``X``:

1. ``C(X)`` = softmax of ``X Phi`` over slots (eq. 1);
2. ``C_sum_j = sum_i C(X)_{ij}`` (summed over the tokens ``i``, and over the ``p`` slots of
   expert ``j`` when ``p > 1``; the entries add up to ``m``);
3. keep the ``k`` experts with the **largest** ``C_sum`` (the paper's batched pseudo-code in
   Appendix C sorts ascending and would keep the smallest; we use ``torch.topk``);
4. evaluate only those experts and zero the other rows of ``Ytilde``; ``C`` is not renormalised.

Baselines: a uniformly random ``k``-subset per example (repeated over seeds, mean and sd, and the
z-statistic ``(acc_Alg1 - mean_random) / sd_random`` of Tables 2, 10a-13a), and the exhaustive
*existence* test of Section 4.2 (is there any ``k``-subset that predicts the label?), which needs
the label and ``C(n, k)`` subset evaluations per input.

The exhaustive search uses that the layer output is linear in the rows of ``Ytilde``: with a
linear (or summation) head the prediction of subset ``S`` is ``bias + sum_{j in S} contrib_j``,
so the ``n`` per-expert contributions are computed once and summed over all subsets.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

__all__ = [
    "combine_sum",
    "top_k_experts",
    "algorithm1_select",
    "random_subsets",
    "subset_mask",
    "all_subsets",
    "subset_predictions",
    "ExhaustiveResult",
    "exhaustive_subset_search",
    "csum_top_share",
]


def combine_sum(combine: torch.Tensor, n_experts: int) -> torch.Tensor:
    """``C_sum``: combine weight per expert, summed over tokens (and over each expert's slots).

    Parameters
    ----------
    combine : Tensor, shape ``[b, m, n * p]``
        ``C(X)``; slot ``s = j p + t`` belongs to expert ``j``.
    n_experts : int

    Returns
    -------
    Tensor, shape ``[b, n]``; each row sums to ``m``.
    """
    b, m, s = combine.shape
    if n_experts < 1 or s % n_experts:
        raise ValueError(f"combine has {s} slots, not a multiple of n_experts={n_experts}")
    return combine.reshape(b, m, n_experts, s // n_experts).sum(dim=(1, 3))


def top_k_experts(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest entries of each row (descending order).

    Parameters
    ----------
    scores : Tensor, shape ``[b, n]``
    k : int
        ``1 <= k <= n``.

    Returns
    -------
    LongTensor, shape ``[b, k]``
    """
    n = scores.shape[-1]
    if not 1 <= int(k) <= n:
        raise ValueError(f"k must lie in [1, {n}], got {k!r}")
    return torch.topk(scores, int(k), dim=-1, largest=True, sorted=True).indices


def algorithm1_select(layer, x: torch.Tensor, k: int) -> torch.Tensor:
    """Algorithm 1, steps 1-3: the ``k`` experts with the largest ``C_sum`` for each input.

    Parameters
    ----------
    layer : moestat.nn.softmoe.SoftMoE
    x : Tensor, shape ``[b, m, d]``
    k : int

    Returns
    -------
    LongTensor, shape ``[b, k]``; pass it as ``experts_idx`` to the layer (step 4).
    """
    with torch.no_grad():
        c = combine_sum(layer.combine_weights(x), layer.n_experts)
    return top_k_experts(c, k)


def random_subsets(batch: int, n_experts: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """A uniformly random ``k``-subset of ``range(n)`` for each of ``batch`` inputs.

    Parameters
    ----------
    batch, n_experts, k : int
    generator : torch.Generator
        Source of randomness (required).

    Returns
    -------
    LongTensor, shape ``[batch, k]``
    """
    if not isinstance(generator, torch.Generator):
        raise ValueError("generator must be a torch.Generator")
    if not 1 <= int(k) <= int(n_experts):
        raise ValueError(f"k must lie in [1, {n_experts}], got {k!r}")
    # the k smallest of n iid uniforms form a uniform k-subset
    u = torch.rand(batch, n_experts, generator=generator, device=generator.device)
    return torch.topk(u, int(k), dim=-1, largest=False).indices


def subset_mask(idx: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Boolean mask ``[b, n]`` from indices ``[b, k]``."""
    return torch.zeros(idx.shape[0], n_experts, dtype=torch.bool, device=idx.device).scatter(1, idx, True)


def all_subsets(n_experts: int, k: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """All ``C(n, k)`` subsets in lexicographic order, LongTensor ``[C(n, k), k]``."""
    if not 1 <= int(k) <= int(n_experts):
        raise ValueError(f"k must lie in [1, {n_experts}], got {k!r}")
    return torch.tensor(list(itertools.combinations(range(n_experts), k)), dtype=torch.long, device=device)


def subset_predictions(contrib: torch.Tensor, bias: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Predictions of per-example subsets from per-expert contributions.

    Parameters
    ----------
    contrib : Tensor, shape ``[b, n, c]``
        Per-expert additive parts of the head output.
    bias : Tensor, shape ``[c]``
    idx : LongTensor, shape ``[b, k]``

    Returns
    -------
    Tensor, shape ``[b, c]``: ``bias + sum_{j in idx[i]} contrib[i, j]``.
    """
    g = contrib.gather(1, idx[:, :, None].expand(-1, -1, contrib.shape[-1]))
    return bias + g.sum(1)


@dataclass
class ExhaustiveResult:
    """Outcome of the exhaustive ``k``-subset search.

    Attributes
    ----------
    best_subsets : LongTensor ``[b, k]``
        Per input, the subset with the best score (classification: largest margin of the true
        class over the best other class; regression: smallest squared error).
    success : BoolTensor ``[b]`` or None
        Classification: some subset predicts the label (the existence test of Table 1).
    best_error : Tensor ``[b]`` or None
        Regression: smallest squared error over the subsets.
    n_subsets : int
        ``C(n, k)``.
    n_unique : int
        Number of distinct best subsets over the inputs (Figure 5).  The best subset is the
        largest-margin one, which predicts the label whenever any subset does.
    """

    best_subsets: torch.Tensor
    success: torch.Tensor | None
    best_error: torch.Tensor | None
    n_subsets: int
    n_unique: int


def exhaustive_subset_search(contrib: torch.Tensor, bias: torch.Tensor, target: torch.Tensor, k: int,
                             task: str = "classification", chunk: int | None = None) -> ExhaustiveResult:
    """Search all ``k``-subsets of the experts for each input (needs the label).

    Parameters
    ----------
    contrib : Tensor, shape ``[b, n, c]``
        Per-expert contributions to the head output (``expert_contributions`` of the models).
    bias : Tensor, shape ``[c]``
    target : Tensor, shape ``[b]``
        Class labels (classification) or real targets (regression, ``c = 1``).
    k : int
    task : {"classification", "regression"}
    chunk : int, optional
        Number of subsets scored at once (memory ``b * chunk * k * c``); by default as many as
        keep that product near ``2e7``.

    Returns
    -------
    ExhaustiveResult
    """
    if task not in ("classification", "regression"):
        raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")
    b, n, c = contrib.shape
    subsets = all_subsets(n, k, contrib.device)
    if chunk is None:
        chunk = max(1, int(2e7 // max(1, b * k * c)))
    best_score = torch.full((b,), -math.inf, dtype=contrib.dtype, device=contrib.device)
    best_idx = torch.zeros(b, dtype=torch.long, device=contrib.device)
    for start in range(0, subsets.shape[0], int(chunk)):
        sub = subsets[start:start + int(chunk)]  # [M, k]
        out = bias + contrib[:, sub].sum(2)  # [b, M, c]
        if task == "classification":
            true = out.gather(2, target.long()[:, None, None].expand(b, out.shape[1], 1)).squeeze(2)
            other = out.scatter(2, target.long()[:, None, None].expand(b, out.shape[1], 1), -math.inf).amax(2)
            score = true - other
        else:
            score = -(out[..., 0] - target[:, None].to(out.dtype)) ** 2
        s, i = score.max(1)
        better = s > best_score
        best_score = torch.where(better, s, best_score)
        best_idx = torch.where(better, i + start, best_idx)
    best = subsets[best_idx]
    n_unique = int(torch.unique(best_idx).numel())
    if task == "classification":
        # margin > 0 means the subset predicts the label; ties (margin 0) count as failures,
        # argmax would break them by index order
        return ExhaustiveResult(best, best_score > 0, None, int(subsets.shape[0]), n_unique)
    return ExhaustiveResult(best, None, -best_score, int(subsets.shape[0]), n_unique)


def csum_top_share(c_sum: torch.Tensor, k: int) -> torch.Tensor:
    """Share of ``C_sum`` held by the ``k`` largest experts (the paper's Figure 6), per input.

    Parameters
    ----------
    c_sum : Tensor ``[b, n]``
    k : int

    Returns
    -------
    Tensor ``[b]`` in ``[k / n, 1]``.
    """
    top = torch.topk(c_sum, int(k), dim=-1).values.sum(-1)
    return top / c_sum.sum(-1)

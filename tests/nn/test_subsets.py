"""Algorithm 1, random subsets and the exhaustive existence test (the Soft MoE implicit-bias paper, 2024, Sections 4.2-4.3)."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from moestat.nn.softmoe import SoftMoEClassifier, SoftMoERegressor
from moestat.nn.subsets import (
    algorithm1_select,
    all_subsets,
    combine_sum,
    csum_top_share,
    exhaustive_subset_search,
    random_subsets,
    subset_predictions,
    top_k_experts,
)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 12).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.integers(1, n),
            st.lists(st.lists(st.floats(-50, 50, allow_nan=False), min_size=n, max_size=n), min_size=1, max_size=4),
        )
    )
)
def test_top_k_picks_the_largest_weights(args):
    n, k, rows = args
    s = torch.tensor(rows, dtype=torch.float64)
    idx = top_k_experts(s, k)
    for r in range(s.shape[0]):
        chosen = set(idx[r].tolist())
        assert len(chosen) == k
        rest = [j for j in range(n) if j not in chosen]
        if rest:
            assert min(s[r, j] for j in chosen) >= max(s[r, j] for j in rest)
        # descending order (the paper's Appendix C pseudo-code sorts ascending: a bug)
        vals = s[r, idx[r]]
        assert bool((vals[:-1] >= vals[1:]).all())


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6), st.integers(1, 3))
def test_algorithm1_selects_largest_combine_sums(seed, n, p):
    from moestat.nn.softmoe import SoftMoE

    layer = SoftMoE(d=3, n_experts=n, slots_per_expert=p, random_state=seed)
    x = torch.randn(4, 5, 3, generator=torch.Generator().manual_seed(seed))
    k = max(1, n // 2)
    idx = algorithm1_select(layer, x, k)
    with torch.no_grad():
        C = layer.combine_weights(x)
    csum = combine_sum(C, n)
    torch.testing.assert_close(csum.sum(-1), torch.full((4,), 5.0))  # sums to m
    for r in range(4):
        brute = sorted(range(n), key=lambda j: -float(sum(C[r, :, j * p + t].sum() for t in range(p))))[:k]
        assert sorted(idx[r].tolist()) == sorted(brute) or torch.allclose(
            csum[r, idx[r]].sort().values, csum[r, brute].sort().values)


def test_random_subsets_are_uniform_and_reproducible():
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a, b = random_subsets(6000, 4, 2, g1), random_subsets(6000, 4, 2, g2)
    assert torch.equal(a, b)
    assert all(len(set(r)) == 2 and all(0 <= v < 4 for v in r) for r in a.tolist())
    counts = {}
    for r in a.tolist():
        key = tuple(sorted(r))
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == math.comb(4, 2)
    freq = np.array(list(counts.values())) / 6000
    assert np.all(np.abs(freq - 1 / 6) < 0.03)
    with pytest.raises(ValueError, match="generator"):
        random_subsets(3, 4, 2, None)


def test_exhaustive_search_matches_brute_force_classifier():
    torch.manual_seed(0)  # only for the tiny label vector below; the model has its own seed
    model = SoftMoEClassifier(3, 4, 4, 3, budget_factor=8.0, random_state=5)
    x = torch.randn(40, 3, 4, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        y = model(x).argsort(-1)[:, 1]  # second-best class: often reachable by some subset, not always
        contrib, bias = model.expert_contributions(x)
        for k in (1, 2, 3):
            res = exhaustive_subset_search(contrib, bias, y, k, "classification", chunk=2)
            assert res.n_subsets == math.comb(4, k)
            brute = torch.zeros(40, dtype=torch.bool)
            for S in itertools.combinations(range(4), k):
                keep = torch.zeros(40, 4, dtype=torch.bool)
                keep[:, list(S)] = True
                logits = model(x, keep=keep)
                top2 = logits.topk(2, -1).values
                correct = (logits.argmax(-1) == y) & (top2[:, 0] > top2[:, 1])
                brute |= correct
            assert torch.equal(res.success, brute)
            # the reported best subset predicts the label whenever some subset does
            pred = subset_predictions(contrib, bias, res.best_subsets).argmax(-1)
            assert bool(((pred == y) | ~res.success).all())
        assert 0 < int(res.success.sum()) <= 40


def test_exhaustive_search_matches_brute_force_regression():
    model = SoftMoERegressor(5, 2, 5, random_state=1)
    x = torch.randn(30, 10, generator=torch.Generator().manual_seed(2))
    y = torch.linalg.vector_norm(x, dim=1)
    with torch.no_grad():
        contrib, bias = model.expert_contributions(x)
        res = exhaustive_subset_search(contrib, bias, y, 2, "regression")
        best = torch.full((30,), float("inf"))
        for S in itertools.combinations(range(5), 2):
            keep = torch.zeros(30, 5, dtype=torch.bool)
            keep[:, list(S)] = True
            best = torch.minimum(best, (model(x, keep=keep) - y) ** 2)
    torch.testing.assert_close(res.best_error, best, rtol=1e-4, atol=1e-4)


def test_all_subsets_and_share():
    s = all_subsets(5, 2)
    assert s.shape == (10, 2) and len({tuple(r) for r in s.tolist()}) == 10
    c = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    torch.testing.assert_close(csum_top_share(c, 2), torch.tensor([0.7]))
    with pytest.raises(ValueError, match="k must"):
        top_k_experts(c, 5)

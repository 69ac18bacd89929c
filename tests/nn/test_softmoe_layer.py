"""Soft MoE layer (the Soft MoE implicit-bias paper, 2024, Definition 1): shapes, weight normalisations, the n = 1 collapse."""


import pytest
import torch

from moestat.nn.softmoe import (
    SoftMoE,
    SoftMoEClassifier,
    SoftMoERegressor,
    budget_hidden_width,
    expert_param_count,
    parse_tokenisation,
    patch_tokenize,
    tokenize_vector,
)


def _x(b, m, d, seed=0):
    return torch.randn(b, m, d, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("n,p", [(1, 1), (3, 1), (4, 2), (5, 3)])
def test_shapes_and_weight_sums(n, p):
    layer = SoftMoE(d=3, n_experts=n, slots_per_expert=p, random_state=1)
    x = _x(7, 5, 3)
    det = layer(x, return_details=True)
    assert det.output.shape == (7, 5, 3)
    assert det.combine.shape == det.dispatch.shape == (7, 5, n * p)
    assert det.slots.shape == det.expert_outputs.shape == (7, n, p, 3)
    # combine: softmax over slots (each row sums to 1); dispatch: over tokens (each column sums to 1)
    torch.testing.assert_close(det.combine.sum(-1), torch.ones(7, 5))
    torch.testing.assert_close(det.dispatch.sum(1), torch.ones(7, n * p))
    # slots are D^T X and the output is C Ytilde
    torch.testing.assert_close(det.slots.reshape(7, n * p, 3), det.dispatch.transpose(1, 2) @ x)
    torch.testing.assert_close(det.output, det.combine @ det.expert_outputs.reshape(7, n * p, 3))


def test_single_expert_collapses_to_one_expert_on_the_dispatch_average():
    """Paper's remark (Section 3): with n = 1, C = 1_m and every output row is f(D^T X)."""
    layer = SoftMoE(d=4, n_experts=1, random_state=3)
    x = _x(6, 5, 4, seed=2)
    det = layer(x, return_details=True)
    assert torch.equal(det.combine, torch.ones(6, 5, 1))
    w = torch.softmax(x @ layer.router_weight[0], dim=1)  # [b, m], softmax over tokens
    avg = (w[:, :, None] * x).sum(1)  # [b, d]
    e = layer.experts
    f = torch.relu(avg @ e.weights[0][0] + e.biases[0][0]) @ e.weights[1][0] + e.biases[1][0]
    torch.testing.assert_close(det.output, f[:, None, :].expand(6, 5, 4))


def test_permutation_equivariance():
    layer = SoftMoE(d=2, n_experts=4, random_state=0)
    x = _x(3, 6, 2)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    torch.testing.assert_close(layer(x[:, perm]), layer(x)[:, perm])


@pytest.mark.parametrize("p", [1, 2])
def test_subset_paths_agree_and_do_not_renormalise(p):
    layer = SoftMoE(d=3, n_experts=5, slots_per_expert=p, random_state=4)
    x = _x(4, 6, 3, seed=5)
    idx = torch.tensor([[0, 3], [4, 1], [2, 3], [1, 0]])
    keep = torch.zeros(4, 5, dtype=torch.bool).scatter(1, idx, True)
    fast = layer(x, experts_idx=idx, return_details=True)
    masked = layer(x, keep=keep, return_details=True)
    full = layer(x, return_details=True)
    torch.testing.assert_close(fast.output, masked.output)
    # C is the full model's combine matrix (no renormalisation over the kept experts)
    torch.testing.assert_close(fast.combine, full.combine)
    y = full.expert_outputs * keep[:, :, None, None]
    torch.testing.assert_close(fast.output, full.combine @ y.reshape(4, 5 * p, 3))
    # per-expert contributions add up to the output of any subset
    contrib = layer.expert_contributions(x)
    torch.testing.assert_close(contrib.sum(1), full.output)
    torch.testing.assert_close((contrib * keep[:, :, None, None]).sum(1), fast.output)


def test_budget_keeps_expert_weights_fixed():
    for d in (2, 5):
        counts = {expert_param_count(d, budget_hidden_width(d, n), n) for n in (1, 2, 5, 10)}
        assert counts == {20 * d * d}
        layer = SoftMoE(d, 5)
        assert layer.experts.n_weights() == 20 * d * d
    assert [budget_hidden_width(5, n) for n in (1, 2, 5, 10)] == [50, 25, 10, 5]
    assert budget_hidden_width(196, 64, 4.0) == 12  # 784 / 64 = 12.25, rounded
    assert budget_hidden_width(196, 1024, 4.0) == 1  # floor of one unit


def test_tokenisers_keep_index_order():
    x = torch.arange(20.0).reshape(2, 10)
    t = tokenize_vector(x, 5, 2)
    assert t[1, 3].tolist() == [16.0, 17.0]
    assert tokenize_vector(x, 2, 5)[0, 1].tolist() == [5.0, 6.0, 7.0, 8.0, 9.0]
    img = torch.arange(16.0).reshape(1, 4, 4)
    p = patch_tokenize(img, 2)
    assert p.shape == (1, 4, 4)
    assert p[0, 1].tolist() == [2.0, 3.0, 6.0, 7.0]  # top-right patch, raster order
    assert p[0, 2].tolist() == [8.0, 9.0, 12.0, 13.0]
    assert parse_tokenisation("5x2") == (5, 2)


def test_models_run_and_decompose():
    reg = SoftMoERegressor(5, 2, 4, random_state=0)
    x = torch.randn(8, 10, generator=torch.Generator().manual_seed(1))
    c, b = reg.expert_contributions(x)
    torch.testing.assert_close(b + c.sum(1)[:, 0], reg(x))
    clf = SoftMoEClassifier(4, 16, 8, 10, random_state=0)
    t = torch.rand(5, 4, 16, generator=torch.Generator().manual_seed(2))
    c, b = clf.expert_contributions(t)
    torch.testing.assert_close(b + c.sum(1), clf(t), rtol=1e-5, atol=1e-5)


def test_normalised_router_option():
    layer = SoftMoE(d=3, n_experts=4, normalize=True, random_state=0)
    x = _x(2, 5, 3)
    logits = layer.router_logits(x)
    assert logits.abs().max() <= 1.0 + 1e-6  # cosine score times the unit initial scale
    assert layer(x * 10).shape == (2, 5, 3)


def test_same_seed_same_weights_and_device_move():
    a, b = SoftMoE(3, 4, random_state=7), SoftMoE(3, 4, random_state=7)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    c = SoftMoE(3, 4, random_state=8)
    assert not torch.equal(a.router_weight, c.router_weight)
    if torch.cuda.is_available():
        a = a.to("cuda")
        assert a(_x(2, 4, 3).cuda()).device.type == "cuda"


def test_bad_input():
    layer = SoftMoE(3, 2)
    with pytest.raises(ValueError, match="shape"):
        layer(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="experts_idx"):
        layer(torch.zeros(2, 4, 3), experts_idx=torch.tensor([[0], [2]]))
    with pytest.raises(ValueError, match="n_experts"):
        budget_hidden_width(2, 0)
    with pytest.raises(ValueError, match="tokens"):
        parse_tokenisation("5by2")
    with pytest.raises(ValueError, match="features"):
        tokenize_vector(torch.zeros(3, 9), 5, 2)
    with pytest.raises(ValueError, match="random_state"):
        SoftMoE(3, 2, random_state=None)

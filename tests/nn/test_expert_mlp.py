"""The one batched expert MLP and the one MoE layer."""

import pytest
import torch

from moestat.nn.expert_mlp import ExpertMLP
from moestat.nn.layer import MoELayer


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_shared_and_per_expert_paths_agree_with_a_loop_over_experts():
    e = ExpertMLP(3, 4, 2, hidden=(5, 6), activation="tanh", generator=_gen())
    x = torch.randn(7, 4, generator=_gen(1))
    out, hidden = e.forward_with_hidden(x)
    assert out.shape == (7, 3, 2) and hidden.shape == (7, 3, 6)
    for i in range(3):
        h = x
        for layer in range(3):
            h = h @ e.weights[layer][i] + e.biases[layer][i]
            if layer < 2:
                h = torch.tanh(h)
        torch.testing.assert_close(out[:, i], h)
    # per-expert inputs: the same input copied to every expert gives the shared result
    per = e.per_expert(x[:, None, None, :].expand(7, 3, 1, 4))
    torch.testing.assert_close(per[:, :, 0], out)
    # only k experts evaluated: the selected experts' rows
    idx = torch.tensor([[2, 0]] * 7)
    sub = e.per_expert(x[:, None, None, :].expand(7, 2, 1, 4), idx)
    torch.testing.assert_close(sub[:, :, 0], out[:, [2, 0]])


def test_init_orders_draw_the_same_numbers_in_another_order():
    a = ExpertMLP(2, 3, 4, hidden=(5,), generator=_gen(3), init_order="layerwise")
    b = ExpertMLP(2, 3, 4, hidden=(5,), generator=_gen(3), init_order="weights_first")
    assert torch.equal(a.weights[0], b.weights[0])  # the first draw is the same
    assert not torch.equal(a.weights[1], b.weights[1])
    assert a.n_weights() == 2 * (3 * 5 + 5 * 4) and a.n_weights(bias=True) == a.n_weights() + 2 * (5 + 4)
    lin = ExpertMLP(2, 3, 4, bias=False, generator=_gen(0))
    assert len(lin.biases) == 0 and lin(torch.zeros(1, 3)).abs().max() == 0
    with pytest.raises(ValueError, match="init_order"):
        ExpertMLP(2, 3, 4, init_order="random")
    with pytest.raises(ValueError, match="activation"):
        ExpertMLP(2, 3, 4, activation="swish")


def test_layer_with_a_named_router_and_with_the_score_router():
    x = torch.randn(6, 5, generator=_gen(2))
    sparse = MoELayer(5, 3, 4, expert_hidden=(8,), router="topk_mask", k=2, random_state=0)
    out = sparse(x)
    assert out.expert_out.shape == (6, 4, 3) and out.weights.shape == (6, 4)
    assert out.mask.sum(1).tolist() == [2] * 6
    torch.testing.assert_close(out.weights.sum(1), torch.ones(6))
    alias = MoELayer(5, 3, 4, router="perturbed_cosine", k=2, random_state=0)
    assert alias.router.kind == "perturbed"
    dense = MoELayer(5, 3, 4, gate_kind="perturbed_cosine", random_state=0)
    assert dense.gate_kind == "perturbed"
    o = dense(x)
    torch.testing.assert_close(o.weights, torch.softmax(o.gate_logits, -1))
    assert bool(o.mask.all()) and float(o.aux_loss) == 0.0
    with pytest.raises(ValueError, match="attentive"):
        MoELayer(5, 3, 4, router="dense", gate_type="attentive")


def test_init_order_changes_only_the_order_of_the_draws():
    a = MoELayer(5, 3, 4, expert_hidden=(8,), gate_hidden=(6,), init_order="experts_first", random_state=1)
    b = MoELayer(5, 3, 4, expert_hidden=(8,), gate_hidden=(6,), init_order="gate_first", random_state=1)
    assert {k: v.shape for k, v in a.state_dict().items()} == {k: v.shape for k, v in b.state_dict().items()}
    assert not torch.equal(a.experts.weights[0], b.experts.weights[0])
    c = MoELayer(5, 3, 4, expert_hidden=(8,), gate_hidden=(6,), init_order="gate_first", random_state=1)
    assert all(torch.equal(p, q) for p, q in zip(b.parameters(), c.parameters()))

"""The language model's routers: shapes, gradients, Top-K bookkeeping, balance loss, tau -> 0."""

from __future__ import annotations

import pytest
import torch

from moestat.model.gates import gate_scores
from moestat.nn.lm_routers import LM_ROUTERS, LMRouter


@pytest.mark.parametrize("kind", LM_ROUTERS)
def test_shapes_and_topk_bookkeeping(kind):
    r = LMRouter(16, 6, 2, kind=kind, random_state=1)
    x = torch.randn(50, 16, generator=torch.Generator().manual_seed(0))
    out = r(x)
    for t in (out.logits, out.probs, out.weights, out.mask):
        assert t.shape == (50, 6)
    assert out.topk.shape == (50, 2)
    # exactly k experts per token, the k most probable ones, weights = their renormalised probabilities
    assert torch.equal(out.mask.sum(1), torch.full((50,), 2))
    assert torch.equal(out.mask, out.weights > 0)
    assert torch.allclose(out.weights.sum(1), torch.ones(50))
    kth = out.probs.topk(2, dim=1).values[:, -1:]
    assert torch.all(out.probs[out.mask].view(50, 2) >= kth - 1e-7)
    kept = out.probs.gather(1, out.topk)
    assert torch.allclose(out.weights.gather(1, out.topk), kept / kept.sum(1, keepdim=True))
    assert torch.allclose(out.probs.sum(1), torch.ones(50))
    assert float(out.aux_loss) == 0.0


@pytest.mark.parametrize("kind", LM_ROUTERS)
def test_gradients_reach_every_router_parameter_and_the_input(kind):
    r = LMRouter(8, 4, 2, kind=kind, balance_coef=0.0, random_state=0)
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(3), requires_grad=True)
    out = r(x)
    target = torch.randn(32, 4, generator=torch.Generator().manual_seed(4))
    (out.weights * target).sum().backward()
    for name, p in r.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert x.grad.abs().sum() > 0


def test_k1_has_no_router_gradient_through_weights_but_the_balance_loss_has_one():
    # the renormalised top-1 weight is always 1 (X-MoE code); only the balance loss trains the router then
    r = LMRouter(8, 4, 1, kind="linear", balance_coef=0.01, random_state=0)
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(3))
    out = r(x)
    assert torch.allclose(out.weights.sum(1), torch.ones(32)) and torch.equal(out.weights, out.mask.float())
    out.aux_loss.backward()
    assert r.weight.grad.abs().sum() > 0


def test_balance_loss_is_switch_formula_and_minimal_when_balanced():
    r = LMRouter(4, 4, 1, kind="linear", balance_coef=1.0, random_state=0)
    x = torch.randn(200, 4, generator=torch.Generator().manual_seed(1))
    out = r(x)
    f = out.mask.float().mean(0)
    expected = 4 * (f * out.probs.mean(0)).sum()
    assert torch.allclose(out.aux_loss, expected)
    with torch.no_grad():  # every token's probabilities uniform: the loss is its minimum 1
        r.weight.zero_()
    assert float(r(x).aux_loss.detach()) == pytest.approx(1.0)


def test_cosine_scores_are_the_gates_score_of_the_projection_over_temperature():
    r = LMRouter(10, 5, 2, kind="cosine", router_dim=3, temperature=0.5, random_state=2)
    x = torch.randn(7, 10, generator=torch.Generator().manual_seed(0))
    z = r.scores(x)
    assert torch.allclose(z, gate_scores(x @ r.proj.t(), r.expert_emb, "cosine") / 0.5)
    assert torch.all(z.abs() <= 1 / 0.5 + 1e-6)
    # scale-invariant in the token and in the expert embeddings
    assert torch.allclose(r.scores(3.0 * x), z, atol=1e-6)


def test_perturbed_tends_to_cosine_as_tau_goes_to_zero():
    x = torch.randn(40, 12, generator=torch.Generator().manual_seed(0))
    cos = LMRouter(12, 4, 2, kind="cosine", random_state=5)
    gaps = []
    for tau in (1.0, 1e-1, 1e-2, 1e-3, 1e-5):
        per = LMRouter(12, 4, 2, kind="perturbed", tau=tau, random_state=5)
        assert torch.equal(per.proj, cos.proj)  # same seed, same draws
        gaps.append(float((per.scores(x) - cos.scores(x)).abs().max().detach()))
    assert all(a > b for a, b in zip(gaps, gaps[1:]))
    assert gaps[-1] < 1e-3
    per = LMRouter(12, 4, 2, kind="perturbed", tau=0.0, random_state=5)
    assert torch.allclose(per.scores(x), cos.scores(x), atol=1e-6)
    assert torch.equal(per(x).mask, cos(x).mask)


def test_perturbed_is_not_scale_invariant():
    per = LMRouter(6, 3, 2, kind="perturbed", tau=0.5, random_state=0)
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(per.scores(x), per.scores(10 * x))


@pytest.mark.parametrize("kwargs, msg", [
    (dict(kind="sigmoid"), "kind must be one of"),
    (dict(k=5), "must not exceed"),
    (dict(temperature=0.0), "temperature"),
    (dict(tau=-1.0), "tau"),
    (dict(balance_coef=-0.1), "balance_coef"),
])
def test_bad_arguments(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        LMRouter(4, 4, **{"k": 2, **kwargs})


def test_alias_and_input_shape():
    assert LMRouter(4, 2, 1, kind="perturbed_cosine").kind == "perturbed"
    with pytest.raises(ValueError, match="shape"):
        LMRouter(4, 2, 1)(torch.zeros(3, 5))

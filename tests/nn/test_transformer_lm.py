"""The MoE Transformer language model: shapes, causality, seeding, routing outputs."""

from __future__ import annotations

import pytest
import torch

from moestat.nn.lm_routers import LM_ROUTERS
from moestat.nn.transformer import LMConfig, MoETransformerLM


def _cfg(**kw):
    return LMConfig(**{**dict(vocab_size=11, context=8, d_model=16, n_layers=2, n_heads=2, n_experts=3, k=2,
                              expert_hidden=12), **kw})


@pytest.mark.parametrize("router", LM_ROUTERS)
def test_shapes_and_routing(router):
    m = MoETransformerLM(_cfg(router=router), random_state=0)
    x = torch.randint(0, 11, (4, 8), generator=torch.Generator().manual_seed(0))
    out = m(x)
    assert out.logits.shape == (4, 8, 11)
    assert len(out.routing) == 2
    for r in out.routing:
        assert r.weights.shape == (32, 3) and torch.equal(r.mask.sum(1), torch.full((32,), 2))
    assert out.aux_loss.ndim == 0 and float(out.aux_loss.detach()) > 0  # balance_coef 0.01 by default
    ce, total, _ = m.loss(x, x)
    assert float(total.detach()) == pytest.approx(float(ce.detach() + out.aux_loss.detach()), rel=1e-6)
    total.backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_causal_a_later_symbol_does_not_change_earlier_logits():
    m = MoETransformerLM(_cfg(), random_state=1).eval()
    x = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(2))
    y = x.clone()
    y[:, 5] = (y[:, 5] + 1) % 11
    a, b = m(x).logits, m(y).logits
    assert torch.allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_same_seed_same_model_other_seed_other_model():
    a, b, c = (MoETransformerLM(_cfg(router="cosine"), random_state=s) for s in (3, 3, 4))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["tok.weight"], sc["tok.weight"])
    assert a.n_parameters() == sum(p.numel() for p in a.parameters())


def test_bad_config():
    with pytest.raises(ValueError, match="multiple of n_heads"):
        _cfg(d_model=15)
    with pytest.raises(ValueError, match="T <="):
        MoETransformerLM(_cfg())(torch.zeros(1, 9, dtype=torch.long))

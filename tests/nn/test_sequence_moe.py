"""The study's BiLSTM + MoE model: every gate's forward/backward, padding ignored by the loss."""

from __future__ import annotations

import pytest
import torch

from moestat.data.text_tasks import IGNORE_INDEX, PAD
from moestat.nn.sequence import GATES, SequenceMoE, sequence_loss


def _batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(2, 30, (4, 7), generator=g)
    x[0, 5:] = PAD
    x[2, 3:] = PAD
    y = torch.randint(0, 9, (4, 7), generator=g)
    y[x == PAD] = IGNORE_INDEX
    return x, y


@pytest.mark.parametrize("gate", list(GATES))
def test_every_gate_forward_backward(gate):
    x, y = _batch()
    m = SequenceMoE(30, 9, gate, lstm_hidden=8, expert_hidden=6, embedding_dim=5, n_experts=4, k=2, random_state=1)
    m.train()
    out = m(x)
    n_real = int((x != PAD).sum())
    M = 1 if gate == "baseline" else 4
    assert out.logits.shape == (4, 7, 9) and out.weights.shape == (n_real, M)
    if gate != "baseline":
        assert (out.mask.sum(1) == 2).all()  # k = 2 of 4 experts per real token
    loss = sequence_loss(out, y)
    loss.backward()
    assert torch.isfinite(loss)
    assert m.moe.experts.weights[0].grad is not None and m.moe.experts.weights[0].grad.abs().sum() > 0
    if gate in ("naive", "mask", "importance"):  # the router learns from the task loss
        assert m.moe.router.weight.grad.abs().sum() > 0
    if gate in ("importance", "load"):
        assert float(out.aux_loss.detach()) > 0


def test_padding_changes_neither_loss_nor_real_logits():
    x, y = _batch()
    m = SequenceMoE(30, 9, "mask", lstm_hidden=8, expert_hidden=6, embedding_dim=5, n_experts=4, random_state=2)
    m.eval()
    a = m(x)
    # longer padding, and garbage labels where padded (masked by -100 in y2)
    x2 = torch.cat([x, torch.zeros(4, 3, dtype=torch.long)], 1)
    y2 = torch.cat([y, torch.full((4, 3), IGNORE_INDEX)], 1)
    b = m(x2)
    real = x != PAD
    torch.testing.assert_close(a.logits[real], b.logits[:, :7][real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sequence_loss(a, y), sequence_loss(b, y2), atol=1e-6, rtol=1e-5)
    # the -100 labels are ignored: changing the logits at padded positions leaves the loss alone
    a.logits[~real] = 1e3
    torch.testing.assert_close(sequence_loss(a, y), sequence_loss(b, y2), atol=1e-6, rtol=1e-5)


def test_span_head_splits_start_and_end_logits():
    m = SequenceMoE(30, 1, "load", task="spans", lstm_hidden=8, expert_hidden=6, embedding_dim=5, n_experts=4)
    m.train()
    x = torch.randint(1, 30, (3, 12))
    out = m(x)
    assert out.logits.shape == (3, 2, 6)
    loss = sequence_loss(out, torch.tensor([[0, 1], [2, 2], [5, 5]]))
    loss.backward()
    assert loss > 0


def test_same_seed_same_model_and_unknown_gate():
    a = SequenceMoE(30, 9, "noisy", lstm_hidden=8, random_state=5)
    b = SequenceMoE(30, 9, "noisy", lstm_hidden=8, random_state=5)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="unknown gate"):
        SequenceMoE(30, 9, "switch")

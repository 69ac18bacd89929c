"""MoE classifier, parameter-matched MLP, training function and decomposition metrics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from moestat.nn import metrics
from moestat.nn.classifier import (
    MLPClassifier,
    MoEClassifier,
    count_parameters,
    evaluate_classifier,
    fit_classifier,
    matched_mlp_hidden,
)
from moestat.nn.routers import LAYER_ROUTERS


def _data(n=64, d=12, C=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g)
    y = (X[:, :C].argmax(1)).long()  # learnable labels
    return X, y


@pytest.mark.parametrize("router", LAYER_ROUTERS)
@pytest.mark.parametrize("combine", ["probs", "logits"])
def test_each_gate_forward_backward(router, combine):
    X, y = _data()
    m = MoEClassifier(12, 3, n_experts=4, k=2, router=router, expert_hidden=6, combine=combine,
                      router_kwargs={"w_load": 0.1} if router == "noisy_topk" else None, random_state=0)
    if router == "noisy_topk":
        m.router.set_generator(torch.Generator().manual_seed(0))
    out = m(X)
    assert out.log_probs.shape == (64, 3) and out.expert_logits.shape == (64, 4, 3)
    if router != "naive_topk":  # naive top-k weights sum to < 1, so p(y|x) is not normalised
        assert torch.allclose(out.log_probs.exp().sum(1), torch.ones(64), atol=1e-5)
    loss = m.loss(out, y)
    loss.backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert m.layer.experts.weights[0].grad.abs().sum() > 0 and m.router.weight.grad.abs().sum() > 0


def test_output_mixture_equals_hand_formula():
    X, _ = _data(n=5)
    m = MoEClassifier(12, 3, n_experts=4, k=2, router="topk_mask", expert_hidden=6, random_state=1)
    out = m(X)
    p = (out.moe.weights.unsqueeze(-1) * torch.softmax(out.expert_logits, -1)).sum(1)
    assert torch.allclose(out.log_probs, torch.log(p), atol=1e-5)


def test_stochastic_method_loss_and_argmax_inference():
    X, y = _data(n=10)
    m = MoEClassifier(12, 3, n_experts=4, router="dense", expert_hidden=6, method="stochastic", random_state=2)
    out = m(X)
    ce = torch.stack([torch.nn.functional.cross_entropy(out.expert_logits[:, i], y, reduction="none") for i in range(4)], 1)
    assert torch.allclose(m.loss(out, y), (out.moe.weights * ce).sum(1).mean(), atol=1e-6)
    m.eval()
    out = m(X)
    sel = out.moe.weights.argmax(1)
    assert torch.allclose(out.log_probs, torch.log_softmax(out.expert_logits[torch.arange(10), sel], -1))


def test_same_seed_same_model_and_training():
    X, y = _data()
    runs = []
    for _ in range(2):
        m = MoEClassifier(12, 3, n_experts=4, k=2, router="noisy_topk", expert_hidden=6,
                          router_kwargs={"w_load": 0.1}, random_state=7)
        r = fit_classifier(m, X, y, X, y, epochs=2, batch_size=16, random_state=3, progress=False)
        runs.append((torch.cat([p.detach().flatten() for p in m.parameters()]), r.history[-1]["train_loss"]))
    assert torch.equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    m2 = MoEClassifier(12, 3, n_experts=4, k=2, router="noisy_topk", expert_hidden=6, random_state=7)
    fit_classifier(m2, X, y, epochs=2, batch_size=16, random_state=4, progress=False)
    assert not torch.equal(runs[0][0], torch.cat([p.detach().flatten() for p in m2.parameters()]))


def test_matched_mlp_parameter_count():
    m = MoEClassifier(784, 10, n_experts=8, k=2, router="dense", expert_hidden=64)
    P = count_parameters(m)
    H = matched_mlp_hidden(P, 784, 10)
    mlp = MLPClassifier(784, 10, H)
    assert abs(count_parameters(mlp) - P) <= 795  # within one hidden unit
    assert count_parameters(mlp) == (784 + 1) * H + (H + 1) * 10


@pytest.mark.slow
def test_fit_learns_digits_and_keeps_best_epoch():
    from moestat.data.images import load_dataset

    ds = load_dataset("digits", random_state=0)
    t = ds.tensors()
    m = MoEClassifier(64, 10, n_experts=4, k=2, router="topk_mask", expert_hidden=32,
                      router_kwargs={"w_importance": 0.1}, random_state=0)
    r = fit_classifier(m, t["X_train"], t["y_train"], t["X_val"], t["y_val"], epochs=15, batch_size=64,
                       lr=3e-3, random_state=0, progress=False)
    accs = [h["val_accuracy"] for h in r.history]
    assert r.best_epoch == int(np.argmax(accs)) + 1
    assert evaluate_classifier(m, t["X_val"], t["y_val"])["accuracy"] == pytest.approx(max(accs))
    ev = evaluate_classifier(m, t["X_test"], t["y_test"])
    assert ev["accuracy"] > 0.85
    # decomposition metrics agree with moestat.nn.metrics on the raw count matrix
    assert ev["counts"].sum() == len(t["y_test"]) and ev["counts"].shape == (4, 10)
    assert ev["I_EY"] == pytest.approx(metrics.mutual_information(ev["counts"]))
    assert 0 <= ev["H_s"] <= 1.0 + 1e-9  # top-2: at most one bit
    assert 0 <= ev["H_u"] <= 2.0 + 1e-9 and ev["tokens_per_expert"].sum() == 2 * len(t["y_test"])


def test_lr_schedule_and_bad_arguments():
    X, y = _data()
    m = MLPClassifier(12, 3, 8)
    fit_classifier(m, X, y, epochs=1, lr_schedule="cosine", progress=False)
    with pytest.raises(ValueError, match="lr_schedule"):
        fit_classifier(m, X, y, epochs=1, lr_schedule="step", progress=False)
    with pytest.raises(ValueError, match="epochs"):
        fit_classifier(m, X, y, epochs=0, progress=False)
    with pytest.raises(ValueError, match="combine"):
        MoEClassifier(12, 3, combine="max")
    with pytest.raises(ValueError, match="unknown router"):
        MoEClassifier(12, 3, router="hash")


def test_softmoe_gate_when_available():
    from moestat.nn.classifier import SoftMoEImageClassifier

    m = SoftMoEImageClassifier((8, 8), 10, n_experts=4, patch=4, random_state=0)
    X = torch.rand(6, 64)
    out = m(X)
    assert torch.allclose(out.moe.weights.sum(1), torch.ones(6), atol=1e-5)
    m.loss(out, torch.arange(6) % 10).backward()
    assert all(p.grad is not None for p in m.parameters())

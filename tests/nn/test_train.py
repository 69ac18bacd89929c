"""The one training loop."""

import numpy as np
import pytest
import torch

from moestat.nn.train import FreshBatches, ShuffledBatches, fit, make_optimizer


def _problem(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5])
    return x, y


def test_shuffled_batches_cover_the_data_once_per_epoch():
    x, y = _problem(10)
    b = ShuffledBatches(x, y, 4, torch.Generator().manual_seed(0))
    assert len(b) == 3
    idx = torch.cat([bt.idx for bt in b])
    assert sorted(idx.tolist()) == list(range(10))
    assert [len(bt.y) for bt in b] == [4, 4, 2]
    with pytest.raises(ValueError, match="batch_size"):
        ShuffledBatches(x, y, 0, torch.Generator())


def test_fit_learns_and_reports_mean_losses_per_epoch():
    x, y = _problem()
    model = torch.nn.Linear(3, 1)
    losses = []

    def step(b):
        loss = torch.mean((model(b.x)[:, 0] - b.y) ** 2)
        losses.append((float(loss.detach()), len(b.y)))
        return loss

    res = fit(model, step, ShuffledBatches(x, y, 16, torch.Generator().manual_seed(1)), epochs=30, lr=0.05,
              record_steps=True)
    assert len(res.history) == 30 and res.best_epoch == 30 and not model.training
    first = losses[:3]
    assert res.history[0]["train_loss"] == pytest.approx(sum(v * n for v, n in first) / 40)
    assert res.history[-1]["train_loss"] < 0.1 * res.history[0]["train_loss"]
    assert res.step_losses.shape == (90,) and res.step_losses[0] == pytest.approx(first[0][0])


def test_fit_keeps_the_best_validated_epoch():
    x, y = _problem()
    model = torch.nn.Linear(3, 1)
    scores = iter([0.1, 0.9, 0.3])
    kept = {}

    def validate(m):
        s = next(scores)
        if s == 0.9:
            kept["w"] = m.weight.detach().clone()
        return s

    res = fit(model, lambda b: torch.mean((model(b.x)[:, 0] - b.y) ** 2),
              ShuffledBatches(x, y, 8, torch.Generator().manual_seed(0)), epochs=3, lr=0.1, validate=validate)
    assert res.best_epoch == 2 and [h["val_accuracy"] for h in res.history] == [0.1, 0.9, 0.3]
    assert torch.equal(model.weight, kept["w"])


def test_fresh_batches_schedules_and_errors():
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Linear(3, 1)
    batches = FreshBatches(lambda n, gen: (torch.randn(n, 3, generator=gen), torch.zeros(n)), 5, 7, g)
    res = fit(model, lambda b: model(b.x).pow(2).mean(), batches, epochs=2, optimizer="sgd", lr=0.01,
              lr_schedule="cosine", record_steps=True)
    assert res.step_losses.shape == (14,) and np.isfinite(res.step_losses).all()
    with pytest.raises(FloatingPointError, match="epoch 1"):
        fit(model, lambda b: model(b.x).sum() * float("nan"), batches, epochs=1, check_finite=True)
    for kw, msg in (({"epochs": 0}, "epochs"), ({"epochs": 1, "lr": 0.0}, "lr"),
                    ({"epochs": 1, "lr_schedule": "step"}, "lr_schedule"), ({"epochs": 1, "optimizer": "lbfgs"}, "optimizer")):
        with pytest.raises(ValueError, match=msg):
            fit(model, lambda b: model(b.x).sum(), batches, **kw)
    frozen = torch.nn.Linear(2, 2)
    frozen.bias.requires_grad_(False)
    assert len(make_optimizer(frozen.parameters(), "rmsprop").param_groups[0]["params"]) == 1


def test_nn_module_train_is_not_overridden():
    from moestat.nn.classifier import MLPClassifier, MoEClassifier
    from moestat.nn.layer import MoELayer
    from moestat.nn.softmoe import SoftMoE

    for cls in (MoELayer, MoEClassifier, MLPClassifier, SoftMoE):
        assert cls.train is torch.nn.Module.train

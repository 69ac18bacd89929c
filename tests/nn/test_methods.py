"""The thesis's training methods (Krishnamurthy 2023) on the toy problems, and the MoE layer."""

import numpy as np
import pytest
import torch
from torch import nn

from moestat.data.toy import ROTATION, SCALING, make_toy_classification, make_toy_regression
from moestat.nn.metrics import gate_sparsity
from moestat.nn.layer import MoELayer
from moestat.nn.methods import METHODS, Method, get_method, train_moe
from moestat.nn.predict import evaluate_moe, predict_moe
from moestat.experiments.decomposition import toy_model


@pytest.fixture(scope="module")
def toy():
    return make_toy_classification(1200, 600, random_state=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_beats_chance_quickly(toy, name):
    model = toy_model(name, 3, "classification", random_state=1)
    res = train_moe(model, toy, name, epochs=12, random_state=2)
    ev = evaluate_moe(res.model, toy.x_test, toy.y_test, name)
    assert ev["accuracy"] > 80.0, ev  # chance is 16.7 %
    pred = predict_moe(res.model, toy.x_test, name)
    np.testing.assert_allclose(pred.weights.sum(1), 1.0, atol=1e-5)
    if METHODS[name].aggregation in ("expected_loss", "posterior", "select"):
        assert gate_sparsity(pred.weights) == 0.0  # argmax inference: one-hot weights
    if METHODS[name].aggregation == "top_k":
        assert ((pred.weights > 0).sum(1) <= METHODS[name].k).all()
    assert len(res.history) == 12


@pytest.mark.slow
def test_regression_toy_recovers_R_and_S():
    # Sec. 3.1.2: with the output mixture one expert converges to R and the other to S.
    d = make_toy_regression(2000, 500, random_state=0)
    model = toy_model("output_mixture", 2, "regression", random_state=0)
    train_moe(model, d, "output_mixture", epochs=40, random_state=0)
    A = model.expert_matrices().double().numpy()
    errs = min(
        (np.linalg.norm(A[i] - ROTATION), np.linalg.norm(A[1 - i] - SCALING)) for i in (0, 1)
    )
    assert max(errs) < 0.05, (A, errs)


def test_top1_gate_gets_no_gradient():
    # softmax(KeepTopK(z, 1)) is identically 1 on the kept expert: Eq. 2.6-2.8 give the gate no signal.
    d = make_toy_classification(120, 10, random_state=0)
    model = MoELayer(2, 6, 3, random_state=0)
    before = [p.detach().clone() for p in model.gate_parameters()]
    train_moe(model, d, "top1", epochs=2, random_state=0)
    for b, p in zip(before, model.gate_parameters()):
        torch.testing.assert_close(b, p.detach())


def test_em_differs_from_output_mixture(toy):
    # Per-batch E-steps would reproduce the output-mixture gradient (Fisher identity); the
    # epoch-level E-step of the generalised EM must not.
    outs = {}
    for name in ("em", "output_mixture"):
        m = MoELayer(2, 6, 3, random_state=4)
        train_moe(m, toy, name, epochs=2, random_state=5)
        outs[name] = m.router_weight.detach().clone()
    assert not torch.allclose(outs["em"], outs["output_mixture"])


def test_distillation_returns_plain_gate_with_teacher_experts(toy):
    model = toy_model("attentive_distilled", 3, "classification", random_state=0)
    res = train_moe(model, toy, "attentive_distilled", epochs=4, random_state=0)
    assert res.teacher is model and res.model.gate_type == "router"
    for a, b in zip(res.model.expert_parameters(), model.expert_parameters()):
        torch.testing.assert_close(a, b)  # experts frozen during distillation
    assert [h["phase"] for h in res.history].count("distill_gate") >= 1


def test_peeking_phases_and_frozen_experts(toy):
    model = MoELayer(2, 6, 3, random_state=0)
    res = train_moe(model, toy, get_method("peeking_expert", split_fraction=0.5), epochs=7, random_state=0)
    phases = [h["phase"] for h in res.history]
    assert phases[0] == "peeking_step1" and "peeking_gate_frozen_experts" in phases and phases[-1] == "peeking_joint"


def test_dual_temperature_schedule():
    d = make_toy_classification(120, 10, random_state=0)
    m = get_method("dual_temperature", temperature=4.0, temperature_decay=0.5, decay_start=0.5)
    res = train_moe(MoELayer(2, 6, 3, random_state=0), d, m, epochs=6, random_state=0)
    temps = [h["temperature"] for h in res.history]
    assert temps[:3] == [4.0] * 3 and temps[3] == pytest.approx(4.0) and temps[4] == pytest.approx(4.0 / 1.5)
    assert min(temps) >= 1.0


def test_loudest_schedule_blocks():
    d = make_toy_classification(120, 10, random_state=0)
    res = train_moe(MoELayer(2, 6, 2, random_state=0), d, "loudest_expert", epochs=8, random_state=0)
    assert [h["temperature"] for h in res.history] == [10.0, 10.0, 1.0, 1.0, 0.01, 0.01, 0.001, 0.001]


def test_training_is_seeded_and_module_train_untouched():
    assert MoELayer.train is nn.Module.train
    d = make_toy_classification(240, 10, random_state=0)
    w = []
    for _ in range(2):
        m = MoELayer(2, 6, 3, random_state=7)
        train_moe(m, d, "stochastic", epochs=2, random_state=8)
        w.append(m.router_weight.detach().clone())
    torch.testing.assert_close(w[0], w[1])


def test_moe_module_general_shapes_and_groups():
    m = MoELayer(5, 3, 4, task="regression", expert_hidden=(8, 6), gate_hidden=(7,), gate_kind="perturbed", random_state=0)
    out = m(torch.randn(10, 5))
    assert out.expert_out.shape == (10, 4, 3) and out.gate_logits.shape == (10, 4)
    assert out.expert_hidden.shape == (10, 4, 6) and out.gate_hidden.shape == (10, 7)
    e, g = {id(p) for p in m.expert_parameters()}, {id(p) for p in m.gate_parameters()}
    assert not (e & g) and e | g == {id(p) for p in m.parameters()}
    att = MoELayer(5, 3, 4, gate_type="attentive", expert_hidden=(8,), random_state=0)
    assert att(torch.randn(2, 5)).gate_logits.shape == (2, 4)
    cos = MoELayer(2, 6, 3, gate_kind="cosine", gate_bias=False, random_state=0)
    assert cos(torch.randn(4, 2)).gate_logits.abs().max() <= 1.0 + 1e-6  # cosine scores
    with pytest.raises(ValueError, match="gate_kind"):
        MoELayer(2, 6, 3, gate_kind="rbf")
    with pytest.raises(ValueError, match="shape"):
        m(torch.randn(3, 2))


def test_method_validation_messages():
    with pytest.raises(ValueError, match="unknown method"):
        get_method("nope")
    with pytest.raises(ValueError, match="positive integer k"):
        Method("x", "softmax", "top_k")
    with pytest.raises(ValueError, match="select"):
        Method("x", "softmax", "select")
    with pytest.raises(ValueError, match="regularisers"):
        Method("x", "entropy", "select", "loudest", importance=0.2)
    with pytest.raises(ValueError, match="attentive"):
        train_moe(MoELayer(2, 6, 3), (np.zeros((4, 2)), np.zeros(4)), "attentive")
    with pytest.raises(ValueError, match="classification only"):
        train_moe(MoELayer(2, 2, 2, task="regression"), (np.zeros((4, 2)), np.zeros((4, 2))), "loudest_expert")
    with pytest.raises(ValueError, match="class labels"):
        train_moe(MoELayer(2, 6, 3), (np.zeros((4, 2)), np.full(4, 9)), "stochastic")
    with pytest.raises(ValueError, match="exceeds"):
        train_moe(MoELayer(2, 6, 1), (np.zeros((4, 2)), np.zeros(4)), "top2")

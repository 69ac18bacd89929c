"""Normalised sigmoid gating and the shared expert (issue 33: the shared-sigmoid entry runs)."""

import numpy as np
import pytest
import torch

from moestat import MixingMeasure
from moestat.data.scenario_files import load_scenario
from moestat.estimators.layout import n_params
from moestat.model.likelihood import LikelihoodModel
from moestat.model.protocol import ProtocolGate, ProtocolModel, linear_score, scaled_expert
from moestat.rates.catalogue import catalogue_file


def _router(rng, k=4, d=3, n=7):
    return (torch.as_tensor(rng.normal(size=s)) for s in ((n, d), (k,), (k, d)))


def test_normalised_sigmoid_is_sigmoid_over_its_sum_and_not_shift_invariant():
    x, b0, b1 = _router(np.random.default_rng(0))
    g = ProtocolGate(linear_score, "normalised-sigmoid")
    assert g.reference is False and g.free_mask(4, 3).all()  # no reference atom: every router is free
    sig = torch.sigmoid(x @ b1.T + b0)
    w = g.weights(x, b0, b1)
    torch.testing.assert_close(w, sig / sig.sum(-1, keepdim=True), rtol=1e-14, atol=0)
    torch.testing.assert_close(g.log_weights(x, b0, b1), torch.log(w), rtol=1e-12, atol=1e-14)
    # unlike a softmax, a common shift of the logits changes the weights: the intercepts are identified
    assert not torch.allclose(g.weights(x, b0 + 1.0, b1), w)
    assert not torch.allclose(w, torch.softmax(x @ b1.T + b0, -1))


def test_normalised_sigmoid_top_k_renormalises_the_selected_atoms():
    x, b0, b1 = _router(np.random.default_rng(1))
    w = ProtocolGate(linear_score, "normalised-sigmoid", k_active=2).weights(x, b0, b1)
    s = x @ b1.T
    sel = s >= s.topk(2, -1).values[:, -1:]  # Top-K on the score, before the bias
    sig = torch.where(sel, torch.sigmoid(s + b0), torch.zeros_like(s))
    torch.testing.assert_close(w, sig / sig.sum(-1, keepdim=True), rtol=1e-14, atol=0)


def test_shared_expert_has_weight_one_and_the_routed_atoms_a_normalised_sigmoid():
    rng = np.random.default_rng(2)
    x, b0, b1 = _router(rng)
    g = ProtocolGate(linear_score, "shared-sigmoid")
    assert g.reference is True  # the shared expert sits in the reference slot: its router is not free
    assert g.free_mask(4, 3)[:-1].all() and not g.free_mask(4, 3)[-1].any()
    assert n_params(4, 3, 4, g.reference) == 3 * 4 + 4 * 4
    w = g.weights(x, b0, b1)
    torch.testing.assert_close(w[:, -1], torch.ones(7, dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(w[:, :-1], ProtocolGate(linear_score, "normalised-sigmoid").weights(x, b0[:-1], b1[:-1]))
    # the regression function is the shared expert plus the routed mixture
    h = scaled_expert("scaled_gelu", 3)
    eta = torch.as_tensor(rng.normal(size=(4, 4)))
    model = ProtocolModel(g, h)
    out = h(x, eta)
    torch.testing.assert_close(model.predict(x, MixingMeasure(b0, b1, eta)), out[:, -1] + (w[:, :-1] * out[:, :-1]).sum(-1))


@pytest.mark.parametrize("kwargs,msg", [
    ({"reference": False}, "last atom is the shared expert"),
    ({"k_active": 1}, "not defined for the shared-sigmoid gate"),
])
def test_shared_gate_refuses_what_it_does_not_define(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        ProtocolGate(linear_score, "shared-sigmoid", **kwargs)


def test_shared_gate_has_no_likelihood_and_needs_a_routed_atom():
    g = ProtocolGate(linear_score, "shared-sigmoid")
    with pytest.raises(ValueError, match="has no likelihood"):
        LikelihoodModel(g, scaled_expert("scaled_gelu", 2))
    x = torch.zeros(3, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="at least one routed atom"):
        g.weights(x, torch.zeros(1, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64))
    assert "shared expert" in g.family.truth_error(np.array([0.0, 0.5]), np.zeros((2, 2)), True)
    assert g.family.truth_error(np.array([0.3, 0.0]), np.array([[1.0, 0.0], [0.0, 0.0]]), True) is None


def test_shared_sigmoid_file_starts_keep_the_shared_expert_and_split_a_routed_atom():
    sc = load_scenario(str(catalogue_file("shared_sigmoid_over.toml")))
    assert sc.model.gate.normalisation == "shared-sigmoid" and sc.k_fit == 4 and sc.k_true == 3
    assert [s.mass for s in sc.losses] == ["sigmoid"]
    G = sc.near_truth_start(0.0, np.random.default_rng(0))
    t = sc.truth
    # the shared expert stays last with a zero router; the extra atom copies routed atom 0
    np.testing.assert_array_equal(G.eta[-1], t.eta[-1])
    assert G.beta0[-1] == 0 and not G.beta1[-1].any()
    np.testing.assert_array_equal(G.eta[2], t.eta[0])
    # the two copies share atom 0's sigmoid mass: each gets half of its mean sigmoid(u) on the holdout
    x = torch.as_tensor(sc.holdout())
    mean_sig = lambda b0, b1: float(torch.sigmoid(x @ torch.as_tensor(b1) + b0).mean())  # noqa: E731
    assert mean_sig(G.beta0[0], G.beta1[0]) == pytest.approx(0.5 * mean_sig(t.beta0[0], t.beta1[0]), rel=1e-8)
    assert G.beta0[2] == G.beta0[0]

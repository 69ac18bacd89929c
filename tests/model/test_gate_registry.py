"""The gate registry: one object per gate owns its weight formula, free parameters and canonical form."""

import numpy as np
import pytest
import torch

from moestat.estimators.generic_starts import from_free, to_free
from moestat.estimators.mle_generic import GenericEM
from moestat.model.gate_registry import GATES, SCORES, gate_family, score_function
from moestat.model.gates import GATE_KINDS, Gate, gate_scores, gate_weights
from moestat.model.likelihood import LikelihoodModel, linear_expert, log_gate
from moestat.model.mixing import MixingMeasure
from moestat.model.protocol import NORMALISATIONS, ProtocolGate, cosine_score, linear_score

#: (gate, score, k_active, temperature) covering every registered gate with a likelihood, Top-K and a
#: temperature (the shared-sigmoid gate has none: tests/model/test_sigmoid_normalised.py)
CASES = [(name, linear_score, None, 1.0) for name in GATES if GATES[name].has_likelihood] + [
    ("softmax", linear_score, 2, 1.0), ("softmax", linear_score, 2, 0.5), ("softmax", cosine_score, None, 1.7),
    ("sigmoid", linear_score, None, 0.5), ("gaussian", linear_score, None, 2.0),
    ("normalised-sigmoid", linear_score, 2, 0.7)]


def _data(seed=0, k=4, d=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 30, d, dtype=torch.float64, generator=g), torch.randn(2, k, dtype=torch.float64, generator=g),
            torch.randn(2, k, d, dtype=torch.float64, generator=g))


def test_registry_is_the_vocabulary():
    assert tuple(GATES) == NORMALISATIONS
    assert all(GATES[name].name == name and gate_family(name) is GATES[name] for name in GATES)
    assert set(SCORES) == set(GATE_KINDS)
    with pytest.raises(ValueError, match="unknown gate"):
        gate_family("nope")
    x, _, b1 = _data()
    for kind in GATE_KINDS:
        torch.testing.assert_close(score_function(kind, (0.5, 2.0))(x, b1), gate_scores(x, b1, kind, (0.5, 2.0)), rtol=0, atol=0)


@pytest.mark.parametrize("name,score,K,T", CASES)
def test_log_weights_are_the_weights(name, score, K, T):
    """The log-space form (likelihood, EM) is the log of the weights, normalised (a sigmoid gate's by their sum)."""
    gate = ProtocolGate(score, name, K, T)
    x, b0, b1 = _data()
    w = gate.weights(x, b0, b1)
    lw = log_gate(gate, x, b0, b1)
    torch.testing.assert_close(torch.exp(lw), w / w.sum(-1, keepdim=True), rtol=1e-12, atol=1e-14)
    if K is not None:
        assert int((w > 0).sum(-1).max()) == K


@pytest.mark.parametrize("name,score,K,T", CASES)
def test_em_logits_follow_the_gate(name, score, K, T):
    """``GenericEM.log_u`` (atom-major; the linear score by feature rows) gives the gate's own log-weights."""
    gate = ProtocolGate(score, name, K, T)
    model = LikelihoodModel(gate, linear_expert(3))
    k, d = 4, 3
    em = GenericEM(model, k, d)
    x, b0, b1 = _data(1, k, d)
    G = MixingMeasure(b0.numpy(), b1.numpy(), np.ones((2, k, 5)))
    fv, _, _ = to_free(em, G)
    Gc = from_free(em, fv.numpy(), np.ones((2, k, 4)), np.zeros((2, k)))  # the gate's canonical form
    u = em.log_u(fv, x)
    want = log_gate(gate, x, torch.as_tensor(Gc.beta0), torch.as_tensor(Gc.beta1))
    torch.testing.assert_close(torch.log_softmax(u, -2).transpose(-1, -2), want, rtol=1e-11, atol=1e-12)
    # the canonical form gives the same weights as the measure it came from where the shift is a
    # symmetry (not for a cosine score: its reference convention holds only for a measure already on it)
    if score is linear_score:
        torch.testing.assert_close(torch.exp(want), torch.exp(log_gate(gate, x, b0, b1)), rtol=1e-11, atol=1e-13)


def test_free_masks():
    k, d = 3, 2
    softmax = ProtocolGate(linear_score, "softmax").free_mask(k, d)
    assert not softmax[-1].any() and softmax[:-1].all()  # the reference atom (A.3)
    assert ProtocolGate(linear_score, "sigmoid").free_mask(k, d).all()
    for name, fam in GATES.items():  # the gates invariant to a common shift of beta0 only (Gaussian, ...)
        if fam.pins_bias and not fam.default_reference:
            m = ProtocolGate(linear_score, name).free_mask(k, d)
            assert m.sum() == k * (d + 1) - 1 and not m[-1, d]
    assert GATES["gaussian"].pins_bias


def test_builtin_router_is_the_softmax_gate():
    """``Gate`` (the built-in routers) and ``gate_weights`` use the registered softmax formula."""
    x, b0, b1 = _data(2)
    for kind in GATE_KINDS:
        for K in (None, 2):
            g = Gate(kind, tau=0.5, k_active=K)
            pg = ProtocolGate(score_function(kind, 0.5), "softmax", K)
            torch.testing.assert_close(g.weights(x, b0, b1), pg.weights(x, b0, b1), rtol=0, atol=0)
            torch.testing.assert_close(gate_weights(g.scores(x, b1), b0, K), pg.weights(x, b0, b1), rtol=0, atol=0)
    assert Gate("linear").family is GATES["softmax"]


def test_truth_errors():
    """Each gate names a truth that is not in its canonical form (the form fits are reported in)."""
    b1 = np.array([[1.0, 0.0], [0.0, 0.0]])
    assert GATES["softmax"].truth_error(np.array([0.3, 0.0]), b1, True) is None
    assert "reference" in GATES["softmax"].truth_error(np.array([0.3, 0.1]), b1, True)
    assert GATES["sigmoid"].truth_error(np.array([0.3, 0.1]), b1, False) is None
    assert GATES["gaussian"].truth_error(np.log([0.4, 0.6]), b1, False) is None
    assert "sum to 1" in GATES["gaussian"].truth_error(np.array([0.3, 0.0]), b1, False)

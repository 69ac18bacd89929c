"""The public gate/expert protocol (issue 14): sigmoid gate, MLP expert, built-ins re-expressed."""

import itertools

import numpy as np
import pytest
import torch

from moestat import Expert, Gate, MixingMeasure, MoEModel
from moestat.model.experts import ACTIVATIONS
from moestat.model.gates import GATE_KINDS
from moestat.model.protocol import (
    FunctionExpert,
    ProtocolGate,
    ProtocolModel,
    linear_score,
    mlp_expert,
    protocol_from_builtin,
    sigmoid_gate,
)


def _measure(rng, k, d, q, batch=()):
    return MixingMeasure(rng.normal(size=batch + (k,)), rng.normal(size=batch + (k, d)), rng.normal(size=batch + (k, q)))


def test_sigmoid_gate_is_elementwise_and_has_no_reference():
    rng = np.random.default_rng(0)
    g = sigmoid_gate()
    assert g.reference is False and ProtocolGate().reference is True
    x, b0, b1 = (torch.as_tensor(rng.normal(size=s)) for s in ((6, 3), (4,), (4, 3)))
    w = g.weights(x, b0, b1)
    torch.testing.assert_close(w, torch.sigmoid(x @ b1.T + b0), rtol=0, atol=0)
    # unnormalised: the weights do not sum to one, and a common shift changes them
    assert not torch.allclose(w.sum(-1), torch.ones(6, dtype=torch.float64))
    assert not torch.allclose(g.weights(x, b0 + 1.0, b1), w)
    # softmax: the common shift is invisible (why that gate needs a reference atom)
    s = ProtocolGate(linear_score, "softmax")
    torch.testing.assert_close(s.weights(x, b0 + 1.0, b1), s.weights(x, b0, b1))


def test_temperature_and_top_k():
    rng = np.random.default_rng(1)
    x, b0, b1 = (torch.as_tensor(rng.normal(size=s)) for s in ((6, 3), (4,), (4, 3)))
    hot = ProtocolGate(linear_score, "softmax", temperature=2.0).weights(x, b0, b1)
    torch.testing.assert_close(hot, torch.softmax((x @ b1.T + b0) / 2.0, -1))
    top = ProtocolGate(linear_score, "softmax", k_active=2).weights(x, b0, b1)
    assert ((top > 0).sum(-1) == 2).all()
    torch.testing.assert_close(top.sum(-1), torch.ones(6, dtype=torch.float64))


@pytest.mark.parametrize("kwargs,msg", [
    ({"normalisation": "tanh"}, "unknown gate normalisation"),
    ({"normalisation": "sigmoid", "k_active": 2}, "not defined for the sigmoid gate"),
    ({"k_active": 0}, "positive integer"),
    ({"temperature": 0.0}, "temperature"),
])
def test_gate_validation(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        ProtocolGate(**kwargs)


def test_mlp_expert_by_hand_and_batched():
    d, H = 2, 3
    e = mlp_expert(d, H)
    assert e.n_params == H * (d + 2) + 1
    rng = np.random.default_rng(2)
    eta = torch.as_tensor(rng.normal(size=(4, e.n_params)))
    x = torch.as_tensor(rng.normal(size=(5, d)))
    out = e(x, eta)
    assert out.shape == (5, 4)
    W, b, v, c = eta[1, :6].reshape(3, 2), eta[1, 6:9], eta[1, 9:12], eta[1, 12]
    torch.testing.assert_close(out[:, 1], torch.tanh(x @ W.T + b) @ v + c)
    # batched measure [R] with batched inputs [R, n, d]
    etaR = torch.as_tensor(rng.normal(size=(2, 4, e.n_params)))
    xR = torch.as_tensor(rng.normal(size=(2, 5, d)))
    torch.testing.assert_close(e(xR, etaR)[1], e(xR[1], etaR[1]))
    with pytest.raises(ValueError, match="takes 13 parameters"):
        e(x, eta[:, :5])


@pytest.mark.parametrize("kind,activation", list(itertools.product(GATE_KINDS, ACTIVATIONS)))
def test_protocol_from_builtin_is_the_same_function(kind, activation):
    rng = np.random.default_rng(3)
    model = MoEModel(Gate(kind, tau=(0.7, 0.4), k_active=2), Expert(activation))
    proto = protocol_from_builtin(model, 3)
    G = _measure(rng, 4, 3, 4, batch=(2,))
    x = torch.as_tensor(rng.uniform(-1, 1, (2, 7, 3)))
    torch.testing.assert_close(proto.predict(x, G), model.predict(x, G), rtol=1e-14, atol=1e-14)


def test_function_expert_validation():
    with pytest.raises(ValueError, match="n_params"):
        FunctionExpert(lambda x, e: x[:, 0], 0)
    m = ProtocolModel(sigmoid_gate(), Expert("identity"))
    assert m.n_expert_params(3) == 4 and "sigmoid" in m.describe()

"""The dense-to-sparse gate with a fitted temperature (Nguyen, Akbarian & Ho 2024): its weights against
an independent NumPy formula, the scale invariance behind its slow rate, its parameter layout, a
generic-EM fit that moves tau, and the two-point instrument of its catalogue entry."""

import numpy as np
import pytest
import torch

from moestat.estimators.generic_starts import from_free, to_free
from moestat.estimators.mle_generic import GenericEM, fit_generic
from moestat.model.gate_registry import GATES
from moestat.model.likelihood import LikelihoodModel, linear_expert, log_gate
from moestat.model.mixing import MixingMeasure
from moestat.model.protocol import ProtocolGate
from moestat.model.temperature_gate import TEMPERATURE
from moestat.rates import catalogue as cat
from moestat.rates.config import RatesConfig
from moestat.rates.resolve import build_scenario
from moestat.theorems.judges.temperature_two_point import scale_two_point, scale_witness

t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731


def _numpy_temperature(x, b0, b1, tau, act=None):
    """softmax over (s_i + b0_i) / tau, i < k - 1, and the reference logit 0, written in NumPy."""
    s = x @ b1.T  # [n, k - 1]
    if act is not None:
        s = act(s)
    logits = np.concatenate([(s + b0[None]) / tau, np.zeros((x.shape[0], 1))], 1)
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _layout(b0, b1, tau):
    """The gate's rows: routers b0 [k-1], b1 [k-1, d], then the reference row (tau, 0, ..., 0 | 0)."""
    d = b1.shape[1]
    ref = np.zeros((1, d))
    ref[0, 0] = tau
    return np.append(b0, 0.0), np.concatenate([b1, ref])


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
def test_weights_match_numpy(tau):
    rng = np.random.default_rng(0)
    x, b0, b1 = rng.normal(size=(50, 3)), rng.normal(size=3), rng.normal(size=(3, 3))
    gate = ProtocolGate(normalisation="temperature")
    assert gate.family is TEMPERATURE is GATES["temperature"] and gate.reference is False
    B0, B1 = _layout(b0, b1, tau)
    want = _numpy_temperature(x, b0, b1, tau)
    np.testing.assert_allclose(gate.weights(t(x), t(B0), t(B1)).numpy(), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(torch.exp(log_gate(gate, t(x), t(B0), t(B1))).numpy(), want, rtol=1e-12, atol=1e-15)
    # the activation gate: the gate's score function is used (here tanh(beta1^T x))
    act = ProtocolGate(score=lambda xx, bb: torch.tanh(xx @ bb.transpose(-1, -2)), normalisation="temperature")
    np.testing.assert_allclose(act.weights(t(x), t(B0), t(B1)).numpy(), _numpy_temperature(x, b0, b1, tau, np.tanh),
                               rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("c", [0.1, 3.0, -2.0])
def test_scale_invariance_linear_not_activation(c):
    """(c beta1, c beta0, c tau) gives the same gate under the linear score (the non-identified ray),
    not under tanh."""
    rng = np.random.default_rng(1)
    x, b0, b1 = rng.normal(size=(40, 2)), rng.normal(size=2), rng.normal(size=(2, 2))
    B0, B1 = _layout(b0, b1, 0.7)
    gate = ProtocolGate(normalisation="temperature")
    w, wc = gate.weights(t(x), t(B0), t(B1)), gate.weights(t(x), t(c * B0), t(c * B1))
    np.testing.assert_allclose(wc.numpy(), w.numpy(), rtol=1e-12, atol=1e-15)
    act = ProtocolGate(score=lambda xx, bb: torch.tanh(xx @ bb.transpose(-1, -2)), normalisation="temperature")
    assert np.abs(act.weights(t(x), t(c * B0), t(c * B1)).numpy() - act.weights(t(x), t(B0), t(B1)).numpy()).max() > 1e-3


def test_free_parameters_are_the_routers_and_tau():
    free = TEMPERATURE.free_mask(3, 2, False)
    assert free[:2].all() and free[2].tolist() == [True, False, False]
    V = np.arange(9, dtype=float).reshape(1, 3, 3) + 1.0
    W = TEMPERATURE.to_convention(V, False)
    assert W[0, 2].tolist() == [V[0, 2, 0], 0.0, 0.0] and np.array_equal(W[0, :2], V[0, :2])
    b0, b1 = _layout(np.zeros(2), np.zeros((2, 2)), 0.5)
    assert TEMPERATURE.truth_error(b0, b1, False) is None
    assert "tau > 0" in TEMPERATURE.truth_error(b0, -b1, False)
    _, r1 = TEMPERATURE.random_router(np.zeros((5, 2)), 3, np.random.default_rng(0), None, None)
    assert r1[-1, 0] == 1.0  # a start never divides by tau = 0


def test_generic_em_fits_tau_and_the_gate_ratio():
    """The generic EM moves tau (a free entry) and recovers the identified ratio beta1 / tau; the
    likelihood never decreases (generalised EM)."""
    model = LikelihoodModel(ProtocolGate(normalisation="temperature"), linear_expert(1))
    b0, b1 = _layout(np.array([0.5]), np.array([[2.0]]), 0.5)
    G = MixingMeasure(b0, b1, np.array([[1.0, 0.5, 0.09], [-1.0, -0.5, 0.16]]))
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(4000, 1))
    Y = model.sample_y(X, G, rng)
    em = GenericEM(model, 2, 1)
    S = MixingMeasure(G.beta0[None] * 1.2, G.beta1[None] * np.array([[[0.8], [1.3]]]), G.eta[None])
    fv, eta, ls2 = to_free(em, S)
    assert fv.shape == (1, 3)  # beta1_1, beta0_1, tau
    out = fit_generic(model, t(X)[None], t(Y)[None], fv, eta, ls2, max_iter=500)
    assert np.all(np.diff(out["paths"][0]) >= -1e-8 * abs(out["paths"][0][-1]))
    F = from_free(em, out["fv"], out["eta"], out["ls2"])
    assert abs(F.beta1[0, -1, 0] - S.beta1[0, -1, 0]) > 1e-3  # tau moved
    assert abs(F.beta1[0, 0, 0] / F.beta1[0, -1, 0] - 4.0) < 0.5  # the identified slope ratio 2 / 0.5


def _scenario(name):
    cfg = RatesConfig.from_dict({"scenario_file": str(cat.catalogue_file(name)), "estimator": "mle"})
    return build_scenario(cfg.scenario_key(cfg.router[0]))


def test_two_point_flat_for_the_temperature_falling_for_the_activation():
    ns = [1e2, 1e4, 1e6]
    sc = _scenario("temperature_gmoe.toml")
    alt = scale_witness(sc.truth, [0.5])
    assert np.allclose(alt.beta1[0], 1.5 * sc.truth.numpy().beta1) and np.allclose(alt.eta[0], sc.truth.numpy().eta)
    tem = scale_two_point(sc, ns, n_mc=500)
    assert tem["kappa_max"] < 1e-20  # KL = 0 up to round-off: the same conditional density
    assert tem["lower_bound_conservative"][-1] == pytest.approx(tem["lower_bound"][0])
    act = scale_two_point(_scenario("temperature_activation.toml"), ns, n_mc=500)
    assert act["lower_bound_conservative"][-1] < 0.1 * act["lower_bound"][0]


def test_entry_is_runnable_and_judged_by_the_instrument():
    e = cat.entry("temperature-gmoe")
    assert cat.entry_status(e) == "runnable" and e.judge
    assert {r.label for r, _ in cat.plan("temperature-gmoe", quick=True)} == {"temperature", "activation"}

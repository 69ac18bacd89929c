"""Le Cam's two points along the over-specified split of an expert (moestat.theorems.judges.expert_two_point)."""

import math

import numpy as np
import pytest
import torch

from moestat.theorems.checks import expert_split
from moestat.theorems.checks.framework import Context
from moestat.model.mixing import MixingMeasure
from moestat.theorems.judges import expert_two_point as etp
from moestat.theorems.judges.two_point import kl_rate, loglog_slope

EPS = np.finfo(np.float64).eps
U = np.ones(3) / math.sqrt(3.0)


@pytest.fixture(scope="module")
def scen():
    return {"linear": etp.entry_scenario(etp.LINEAR_FILE), "ffn": etp.entry_scenario(etp.FFN_FILE)}


@pytest.fixture(scope="module")
def curves():
    return etp.arm_curves(quick=True, n_mc=2000, n_t=61)


def _g(G: MixingMeasure, X: np.ndarray, expert: str) -> np.ndarray:
    """An independent numpy softmax-gated MoE: g_G(x) = sum_i softmax_i(beta0 + beta1^T x) h(x, eta_i), ``[T, m]``."""
    b0, b1, eta = G.numpy().beta0, G.numpy().beta1, G.numpy().eta  # [T, k], [T, k, d], [T, k, q]
    logits = b0[:, :, None] + np.einsum("tkd,md->tkm", b1, X)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    z = np.einsum("tkd,md->tkm", eta[..., :2], X)
    h = z + eta[..., 2:3] if expert == "linear" else eta[..., 2:3] / (1.0 + np.exp(-z))
    return (w * h).sum(axis=1)


def _batched(G, T):
    G = G.numpy()
    return MixingMeasure(G.beta0[None].repeat(T, 0), G.beta1[None].repeat(T, 0), G.eta[None].repeat(T, 0))


def test_witness_lies_in_the_over_specified_class(scen):
    for s in scen.values():
        G = s.truth.numpy()
        ts = np.array([1e-3, 0.1, etp.T_MAX])
        alt = etp.expert_split_witness(G, 0, ts, U)
        assert alt.n_atoms == G.n_atoms + 1 == s.k_fit  # k* + 1 = k atoms: the entry's fitted class
        assert s.box.contains(alt)
        # the halves keep the gate of atom 0 and its total weight; the other atoms (reference last) are unchanged
        np.testing.assert_allclose(np.exp(alt.beta0[:, 0]) + np.exp(alt.beta0[:, 1]), np.exp(G.beta0[0]), rtol=1e-15)
        np.testing.assert_array_equal(alt.beta1[:, 0], alt.beta1[:, 1])
        np.testing.assert_array_equal(alt.beta1[:, 0], np.broadcast_to(G.beta1[0], (3, G.dim)))
        np.testing.assert_array_equal(alt.beta0[:, 2], G.beta0[1])
        np.testing.assert_array_equal(alt.eta[:, 2], np.broadcast_to(G.eta[1], (3, G.eta_dim)))
        np.testing.assert_allclose(alt.eta[:, 1] - alt.eta[:, 0], 2 * ts[:, None] * U, rtol=1e-12)
        np.testing.assert_allclose((alt.eta[:, 1] + alt.eta[:, 0]) / 2, np.broadcast_to(G.eta[0], (3, 3)), rtol=1e-14)
    with pytest.raises(ValueError, match="direction"):
        etp.expert_split_witness(G, 0, [0.1], np.zeros(3))
    with pytest.raises(ValueError, match="t must be"):
        etp.expert_split_witness(G, 0, [0.0], U)


def test_separation_is_the_closed_form_weight_times_t_squared(scen):
    # D2_ls: two half-weight atoms in one cell, exponent 2, each at distance t, cell mass unchanged
    s = scen["ffn"]
    ts = np.logspace(-4, 0, 9)
    sep = etp.split_separation(s.losses[0], s.truth, etp.expert_split_witness(s.truth, 0, ts, U))
    # (eta -+ t u) - eta carries a round-off of eps |eta| / t relative to t: 1e-12 at t = 1e-4
    np.testing.assert_allclose(sep, np.exp(s.truth.numpy().beta0[0]) * ts**2, rtol=1e-9)


def test_linear_split_leaves_the_regression_function_unchanged(scen):
    s = scen["linear"]
    X = s.sample_x(3000, np.random.default_rng(3))
    ts = np.logspace(-6, 0, 13)
    for u in (U, [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.3, -2.0, 0.7]):  # every direction of (a, b)
        kappa, _ = kl_rate(s.model, s.truth, etp.expert_split_witness(s.truth, 0, ts, u), X, s.noise_var)
        # a^T x + b is affine in (a, b): the halves average to the atom's expert exactly; what is
        # left is round-off of |g| <= c eps max|g| (c well below 100), squared and over 2 nu
        gmax = float(np.abs(_g(_batched(s.truth, 1), X, "linear")).max())
        assert np.all(kappa <= (100 * EPS * gmax) ** 2 / (2 * s.noise_var)), kappa.max()


def test_kl_matches_an_independent_implementation_and_the_taylor_closed_form(scen):
    s = scen["ffn"]
    G = s.truth.numpy()
    X = s.sample_x(4000, np.random.default_rng(5))
    ts = np.array([1e-3, 1e-2, 0.3])
    alt = etp.expert_split_witness(G, 0, ts, U)
    kappa, se = kl_rate(s.model, G, alt, X, s.noise_var)
    # (1) the same inputs through an independent numpy model: the same numbers up to round-off
    ind = ((_g(alt, X, "ffn") - _g(_batched(G, 1), X, "ffn")) ** 2).mean(axis=1) / (2 * s.noise_var)
    np.testing.assert_allclose(kappa, ind, rtol=1e-6)
    # (2) g' - g = pi_0(x) [h(eta - tu)/2 + h(eta + tu)/2 - h(eta)] = pi_0 t^2/2 u^T H u + O(t^4), with
    # u^T H u = eta2 sigma''(z) (u1^T x)^2 + 2 u2 sigma'(z) u1^T x, z = eta1^T x: kappa / t^4 -> a
    logits = G.beta0[:, None] + G.beta1 @ X.T
    pi0 = np.exp(logits[0] - np.logaddexp.reduce(logits, axis=0))
    z = X @ G.eta[0, :2]
    sg = 1.0 / (1.0 + np.exp(-z))
    d1, d2 = sg * (1 - sg), sg * (1 - sg) * (1 - 2 * sg)
    ux = X @ U[:2]
    a = np.mean((pi0 * 0.5 * (G.eta[0, 2] * d2 * ux**2 + 2 * U[2] * d1 * ux)) ** 2) / (2 * s.noise_var)
    assert abs(kappa[0] / ts[0] ** 4 / a - 1) < 1e-4
    assert abs(kappa[1] / ts[1] ** 4 / a - 1) < 1e-2
    # (3) an independent Monte Carlo (other inputs) agrees within its standard errors
    X2 = s.sample_x(4000, np.random.default_rng(6))
    kappa2, se2 = kl_rate(s.model, G, alt, X2, s.noise_var)
    assert np.all(np.abs(kappa2 - kappa) <= 5 * np.hypot(se, se2))


def test_curves_flat_for_affine_directions_and_falling_at_minus_half_otherwise(curves):
    for key in ("linear", "ffn_eta2"):
        flat, ratio = etp.flat_verdict(curves[key])
        assert flat and ratio > 0.999
        assert np.all(curves[key].t_star == etp.T_MAX)  # KL = 0: the longest split is the best witness
    ok, det = etp.rate_verdict(curves["ffn"])
    assert ok, det
    small = curves["ffn"].ts < 1e-2
    assert abs(loglog_slope(curves["ffn"].ts, curves["ffn"].kappa[0], small) - 4.0) < 0.05  # kappa ~ t^4


def test_the_rules_can_fail(curves):
    # a falling curve fed to the flat rule fails, and a flat curve fed to the rate rule fails
    assert not etp.flat_verdict(curves["ffn"])[0]
    assert etp.flat_verdict(curves["ffn"])[1] < 0.01
    assert not etp.rate_verdict(curves["linear"])[0]


def test_theory_check_fails_when_the_slow_case_gets_a_falling_curve(monkeypatch, tmp_path, curves):
    ctx = Context("quick", tmp_path)
    good = {r.name: r for r in expert_split.run(ctx)}
    assert all(r.passed for r in good.values())
    swapped = {"linear": curves["ffn"], "ffn": curves["linear"], "ffn_eta2": curves["ffn"]}
    monkeypatch.setattr(expert_split, "arm_curves", lambda *a, **k: swapped)
    res = {r.name: r for r in expert_split.run(Context("quick", tmp_path))}
    assert [res[n].status for n in expert_split.NAMES] == ["failed", "failed", "failed"]


def test_judge_names_the_loss_and_turns_inconsistent_on_a_falling_linear_curve(monkeypatch, curves):
    monkeypatch.setattr(etp, "arm_curves", lambda *a, **k: curves)
    j = etp.judge(quick=True)
    assert set(j) == {"linear"} and j["linear"]["loss"] == "D2_ls"
    assert j["linear"]["category"] == "consistent" and j["linear"]["ffn_eta2_flat"]
    monkeypatch.setattr(etp, "arm_curves", lambda *a, **k: {**curves, "linear": curves["ffn"]})
    assert etp.judge(quick=True)["linear"]["category"] == "inconsistent"
    monkeypatch.setattr(etp, "arm_curves", lambda *a, **k: {**curves, "ffn": curves["linear"]})
    assert etp.judge(quick=True)["linear"]["category"] == "inconclusive"

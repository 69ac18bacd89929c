"""The torch.func kernel against the analytic kernel (every built-in gate x expert) and scipy."""

import itertools

import numpy as np
import pytest
import torch

from moestat import Expert, Gate, MixingMeasure, MoEModel
from moestat.estimators import random_init
from moestat.estimators.jacobians import AutogradKernel
from moestat.estimators.layout import n_params, pack, unpack
from moestat.estimators.lse import LeastSquaresMoE
from moestat.estimators.lse_kernel import Design, evaluate, residual_and_jacobian
from moestat.model.experts import ACTIVATIONS
from moestat.model.gates import GATE_KINDS
from moestat.model.protocol import FunctionExpert, ProtocolGate, ProtocolModel, linear_score, protocol_from_builtin, sigmoid_gate


def _setup(kind, k_active, activation, k=4, d=3, R=2, n=40, seed=0):
    rng = np.random.default_rng(seed)
    model = MoEModel(Gate(kind, tau=(0.7, 0.4), k_active=k_active), Expert(activation, degree=3))
    G = MixingMeasure.stack([random_init(k, d, rng, scale_router=1.0, scale_expert=1.0) for _ in range(R)])
    X = torch.as_tensor(rng.uniform(-1, 1, (R, n, d)))
    Y = torch.as_tensor(rng.normal(size=(R, n)))
    return model, pack(G.torch(), True), X, Y


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


@pytest.mark.slow
@pytest.mark.parametrize("kind,activation", list(itertools.product(GATE_KINDS, ACTIVATIONS)))
@pytest.mark.parametrize("k_active,temperature", [(None, None), (2, None), (2, 0.05)])
def test_autograd_matches_analytic_for_every_builtin(kind, activation, k_active, temperature):
    """Residuals, J, J^T J and J^T r of the two paths agree within 1e-10 relative (issue 14)."""
    k, d = 4, 3
    model, theta, X, Y = _setup(kind, k_active, activation)
    proto = protocol_from_builtin(model, d)
    kern = AutogradKernel(proto, d)
    assert n_params(k, d, d + 1, True) == theta.shape[1]
    # one-chunk analytic residuals and Jacobian
    r_an, J_an = residual_and_jacobian(model, Design.build(model, X, Y, chunk=X.shape[1]), theta, k, temperature)
    r_ag = kern.residuals(theta, X, Y, k, temperature)
    J_ag = kern.jacobian(theta, X, k, temperature)
    assert _rel(r_ag, r_an) <= 1e-10
    assert _rel(J_ag, J_an) <= 1e-10
    # chunked F, J^T J, J^T r through the Levenberg-Marquardt interface (several chunks each)
    F_an, A_an, g_an = evaluate(model, Design.build(model, X, Y, chunk=16, n_components=k), theta, k, True, temperature)
    F_ag, A_ag, g_ag = kern.evaluate(proto, kern.build(proto, X, Y, chunk=13, n_components=k), theta, k, True, temperature)
    assert _rel(F_ag, F_an) <= 1e-10 and _rel(A_ag, A_an) <= 1e-10 and _rel(g_ag, g_an) <= 1e-10


def test_pack_unpack_round_trip_and_bounded_chunks():
    rng = np.random.default_rng(1)
    for ref in (True, False):
        G = MixingMeasure(*(torch.as_tensor(rng.normal(size=s)) for s in ((2, 3), (2, 3, 2), (2, 3, 5))))
        if ref:
            G = MixingMeasure(torch.cat([G.beta0[:, :-1], torch.zeros(2, 1, dtype=torch.float64)], 1),
                              torch.cat([G.beta1[:, :-1], torch.zeros(2, 1, 2, dtype=torch.float64)], 1), G.eta)
        theta = pack(G, ref)
        assert theta.shape == (2, n_params(3, 2, 5, ref))
        for a, b in zip(unpack(theta, 3, 2, 5, ref), (G.beta0, G.beta1, G.eta)):
            assert torch.equal(a, b)
    model = ProtocolModel(sigmoid_gate(), Expert("identity"))
    kern = AutogradKernel(model, 2, chunk_bytes=8 * 2 * 18 * 100)  # J of one chunk: [R=2, 100, P=18]
    data = kern.build(model, torch.zeros(2, 1000, 2, dtype=torch.float64), torch.zeros(2, 1000, dtype=torch.float64), n_components=3)
    assert max(x.shape[1] for x in data.x) == 100 and sum(x.shape[1] for x in data.x) == 1000


def _wave_expert(x, eta):
    """A custom expert no analytic kernel covers: ``c sin(a^T x + b)``, eta = [a (d), b, c]."""
    return eta[-1] * torch.sin(x @ eta[:-2] + eta[-2])


@pytest.mark.slow
@pytest.mark.parametrize("gate", ["softmax", "sigmoid", "normalised-sigmoid", "shared-sigmoid"])
def test_autograd_lse_reaches_scipy_objective(gate):
    """Issue 14: on a custom-expert scenario the autograd-path LSE reaches scipy's objective (gap <= 1e-6);
    issue 33: also with the normalised sigmoid gate and with a shared expert (the last atom)."""
    from scipy.optimize import least_squares

    d, k, R, n = 2, 2, 2, 300
    pg = ProtocolGate(linear_score, gate)
    assert pg.reference == (gate in ("softmax", "shared-sigmoid"))
    model = ProtocolModel(pg, FunctionExpert(_wave_expert, d + 2, "wave"))
    q, ref = d + 2, pg.reference
    rng = np.random.default_rng(7)
    b0 = np.array([0.5, 0.0]) if ref else np.array([0.5, -0.3])
    b1 = np.array([[1.5, -1.0], [0.0, 0.0]]) if ref else np.array([[1.5, -1.0], [-1.0, 2.0]])
    eta = np.array([[1.0, 0.5, 0.2, 1.5], [-0.7, 1.2, -0.4, 1.0]])
    if gate == "shared-sigmoid":  # two routed atoms (one alone would have weight one) and the shared expert last
        k, b0, b1 = 3, np.array([0.5, -0.3, 0.0]), np.array([[1.5, -1.0], [-1.0, 2.0], [0.0, 0.0]])
        eta = np.vstack([eta, [0.4, -0.6, 0.3, 0.8]])
    truth = MixingMeasure(b0, b1, eta)
    X = torch.as_tensor(rng.uniform(-1, 1, (R, n, d)))
    Y = model.predict(X, truth) + 0.1 * torch.as_tensor(rng.normal(size=(R, n)))
    shift = np.array([[0.1]] * (k - 1) + [[0.0 if ref else 0.1]])  # the reference atom's router stays at zero
    start = MixingMeasure(truth.beta0 + shift[:, 0], truth.beta1 + shift, truth.eta - 0.1)
    est = LeastSquaresMoE(model, k, init=start, max_iter=200).fit(X, Y)
    assert all(est.converged_), est.status_
    kern = AutogradKernel(model, d)
    theta0 = pack(MixingMeasure.stack([start] * R).torch(), ref)
    for r in range(R):
        fun = lambda t: kern.residuals(torch.as_tensor(t)[None], X[r : r + 1], Y[r : r + 1], k)[0].numpy()  # noqa: E731
        jac = lambda t: kern.jacobian(torch.as_tensor(t)[None], X[r : r + 1], k)[0].numpy()  # noqa: E731
        res = least_squares(fun, theta0[r].numpy(), jac=jac, method="trf", xtol=1e-15, ftol=1e-15, gtol=1e-15)
        scipy_obj = 2 * res.cost / n
        assert abs(est.objective_[r] - scipy_obj) <= 1e-6 * scipy_obj
        # an independent check of the objective itself: the fitted measure's mean squared residual
        fitted = MixingMeasure(est.params_.beta0[r], est.params_.beta1[r], est.params_.eta[r])
        mse = float(((model.predict(X[r], fitted) - Y[r]) ** 2).mean())
        assert est.objective_[r] == pytest.approx(mse, rel=1e-12)


@pytest.mark.parametrize("reference", [True, False])
def test_free_parameters_round_trip_and_blocks_partition_the_layout(reference):
    """The pre-flight's view of a measure: ``measure(theta0)`` is the measure back (the reference
    atom's router at zero), and the blocks cover every free coordinate exactly once, in ``n_params``."""
    from moestat.estimators.jacobians import block_indices, free_parameters

    k, d, q = 3, 2, 3
    rng = np.random.default_rng(4)
    b0, b1 = rng.normal(size=k), rng.normal(size=(k, d))
    if reference:  # the layout leaves the last router out: it must be zero to come back
        b0[-1], b1[-1] = 0.0, 0.0
    G = MixingMeasure(b0, b1, rng.normal(size=(k, q)))
    theta0, measure, blocks = free_parameters(G, reference)
    assert theta0.shape == (n_params(k, d, q, reference),) and theta0.dtype == torch.float64
    back = measure(theta0)
    for a, b in ((back.beta0, b0), (back.beta1, b1), (back.eta, G.eta)):
        assert torch.equal(a, torch.as_tensor(b))
    idx = sorted(i for _, ix in blocks for i in ix)
    assert idx == list(range(theta0.numel()))
    assert blocks == block_indices(k, d, q, reference)
    names = [name for name, _ in blocks]
    assert ("atom 2 beta0" in names) is (not reference) and names.count("atom 2 eta") == 1
    # each beta1 block holds the coordinates of that atom's beta1 in pack's vector
    for i in range(k - 1 if reference else k):
        ix = dict(blocks)[f"atom {i} beta1"]
        assert torch.equal(theta0[ix], torch.as_tensor(b1[i]))

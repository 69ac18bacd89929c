"""Maximum likelihood of the Laplace-gated Gaussian MoE over a compact gate set (issue 33,
laplace-gmoe's over arm): ``fit_generic(..., gate_box=...)`` keeps every gate parameter in the box,
its log-likelihood trace never decreases, and its maximiser is the bounded maximiser of the same
likelihood that SciPy's L-BFGS-B finds (Karush-Kuhn-Tucker conditions checked too)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from moestat.data.scenario_files import ScenarioFileError, load_scenario, scenario_from_mapping
from moestat.estimators import estimator_for
from moestat.estimators.generic_starts import to_free
from moestat.estimators.mle import MLEGaussianMoE
from moestat.estimators.mle_generic import GenericEM, fit_generic
from moestat.model.laplace_gate import LAPLACE
from moestat.model.mixing import MixingMeasure, ParameterBox

ROOT = Path(__file__).resolve().parents[2]
OVER_BOX = ROOT / "moestat" / "rates" / "catalogue_files" / "laplace_gmoe_over_box.toml"
OVER = ROOT / "moestat" / "rates" / "catalogue_files" / "laplace_gmoe_over.toml"


def _data(n: int, seed: int):
    sc = load_scenario(str(OVER_BOX))
    X, Y = sc.sample(n, np.random.default_rng(seed))
    return sc, torch.as_tensor(X[None]), torch.as_tensor(Y[None])


def _start(em: GenericEM, sc, k: int, rng: np.random.Generator, centre_scale: float):
    """A start of ``k`` atoms: centres drawn with scale ``centre_scale`` (outside a small box on
    purpose), the true experts repeated, beta0 = 0."""
    eta = np.tile(sc.truth.eta, (k // sc.truth.n_atoms + 1, 1))[:k] + 0.1 * rng.normal(size=(k, sc.truth.eta.shape[1]))
    eta[:, -1] = np.abs(eta[:, -1])
    G = MixingMeasure(np.zeros((1, k)), centre_scale * rng.normal(size=(1, k, 2)), eta[None])
    return to_free(em, G)


def _loglik(em, fv, eta, ls2, X, Y) -> torch.Tensor:
    return em.loglik(fv, eta, ls2, X, Y)


@pytest.mark.slow
@pytest.mark.parametrize("accelerate,polish_iter", [(False, 0), (True, 20)])
def test_box_is_never_left_and_the_trace_never_decreases(accelerate, polish_iter):
    """Starts far outside a box smaller than the truth's centres (so the maximiser is on its boundary):
    the fitted gate lies in the box, ``on_box`` says so, and the log-likelihood after every EM step,
    SQUAREM extrapolation and polish step is at least the one before (generalised EM)."""
    sc, X, Y = _data(600, 0)
    box = ParameterBox(beta0=1.0, beta1=0.3, eta=10.0)
    em = GenericEM(sc.fit_model, 3, 2, gate_box=box)
    rng = np.random.default_rng(1)
    starts = [_start(em, sc, 3, rng, 3.0) for _ in range(3)]
    fv, eta, ls2 = (torch.cat([s[i] for s in starts]) for i in range(3))
    assert (fv.abs() > em.gate_hi).any(), "the starts must leave the box for the test to mean anything"
    B = fv.shape[0]
    res = fit_generic(sc.fit_model, X.expand(B, -1, -1), Y.expand(B, -1), fv, eta, ls2, max_iter=400,
                      accelerate=accelerate, polish_iter=polish_iter, gate_box=box)
    hi = em.gate_hi.numpy()
    assert np.all(np.abs(res["fv"]) <= hi), "a fitted gate parameter is outside the box"
    for path in res["paths"]:
        assert np.all(np.diff(path) >= -1e-9 * abs(path[-1])), "the constrained EM's log-likelihood decreased"
    # the truth's centres (|coordinate| 0.5) are outside a 0.3 box: every fit must be on its boundary
    assert res["on_box"].all()
    # the reported log-likelihood is the model's at the reported parameters
    ll = _loglik(em, torch.as_tensor(res["fv"]), torch.as_tensor(res["eta"]), torch.as_tensor(res["ls2"]),
                 X.expand(B, -1, -1), Y.expand(B, -1)).numpy()
    np.testing.assert_allclose(res["loglik"], ll, rtol=1e-10)


def test_without_a_box_nothing_changes_and_clamp_is_the_identity():
    sc, X, Y = _data(300, 2)
    em = GenericEM(sc.fit_model, 3, 2)
    fv, eta, ls2 = _start(em, sc, 3, np.random.default_rng(3), 3.0)
    assert em.clamp_gate(fv) is fv and not em.on_box(fv).any()
    a = fit_generic(sc.fit_model, X, Y, fv, eta, ls2, max_iter=50)
    b = fit_generic(sc.fit_model, X, Y, fv, eta, ls2, max_iter=50, gate_box=None)
    np.testing.assert_array_equal(a["fv"], b["fv"])
    np.testing.assert_array_equal(a["paths"][0], b["paths"][0])


def test_box_limits_layout():
    lim = LAPLACE.box_limits(3, 2, ParameterBox(beta0=7.0, beta1=2.0))
    np.testing.assert_array_equal(lim, [[2.0, 2.0, 7.0]] * 3)
    em = GenericEM(load_scenario(str(OVER_BOX)).fit_model, 3, 2, gate_box=ParameterBox(beta0=7.0, beta1=2.0))
    # free: the three centres and beta0_1, beta0_2 (beta0_3 pinned at 0)
    assert sorted(em.gate_hi.tolist()) == [2.0] * 6 + [7.0] * 2


def test_bounded_maximiser_agrees_with_lbfgsb():
    """On a small problem whose bounded maximiser lies on the boundary, the constrained EM's fit and
    SciPy's L-BFGS-B (box on the gate, experts free) on the same log-likelihood, started at the same
    point, reach the same maximum: log-likelihoods within 1e-5 nats (both stop on tolerances far below
    that; n = 400), parameters within 2e-3 (a maximum's log-likelihood moves quadratically with them:
    1e-5 nats allows ~1e-3 along a direction of curvature >= ~10), and the EM's point satisfies the
    KKT conditions: zero gradient in the free coordinates, an outward gradient on the active bounds."""
    sc, X, Y = _data(400, 4)
    box = ParameterBox(beta0=2.0, beta1=0.35, eta=10.0)
    em = GenericEM(sc.fit_model, 2, 2, gate_box=box)
    fv0, eta0, ls20 = _start(em, sc, 2, np.random.default_rng(5), 0.2)
    fv0 = em.clamp_gate(fv0)
    res = fit_generic(sc.fit_model, X, Y, fv0, eta0, ls20, max_iter=5000, accelerate=True, polish_iter=50, gate_box=box)
    # the polish certifies the bounded maximum (the projected Newton system: KKT and second order on the face)
    assert res["status"][0] == "newton", res["status"]
    mg, shape_eta = em.mg, eta0.shape[1:]
    hi = em.gate_hi.numpy()

    def unpack(v):
        t = torch.as_tensor(v, dtype=torch.float64)
        return t[None, :mg], t[mg: mg + eta0[0].numel()].reshape((1,) + tuple(shape_eta)), t[None, mg + eta0[0].numel():]

    def negll(v):
        t = torch.tensor(v, dtype=torch.float64, requires_grad=True)
        f, e, s = unpack(t)
        ll = _loglik(em, f, e, s, X, Y)[0]
        (g,) = torch.autograd.grad(ll, t)
        return -float(ll.detach()), -g.numpy()

    v0 = np.concatenate([fv0[0].numpy(), eta0[0].numpy().ravel(), ls20[0].numpy()])
    bounds = [(-h, h) for h in hi] + [(None, None)] * (v0.size - mg)
    opt = minimize(negll, v0, jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-9, "maxcor": 30})
    v_em = np.concatenate([res["fv"][0], res["eta"][0].ravel(), res["ls2"][0]])
    ll_em, ll_sp = -negll(v_em)[0], -opt.fun
    assert abs(ll_em - ll_sp) < 1e-5, (ll_em, ll_sp, opt.message)
    np.testing.assert_allclose(v_em, opt.x, atol=2e-3)
    # KKT at the EM's point: the bounded maximiser is on the boundary here, and no coordinate can improve
    g = -negll(v_em)[1]  # the gradient of the log-likelihood
    upper, lower = v_em[:mg] >= hi * (1 - 1e-9), v_em[:mg] <= -hi * (1 - 1e-9)
    assert (upper | lower).any(), "the test needs an active bound"
    assert np.all(g[:mg][upper] >= -1e-4) and np.all(g[:mg][lower] <= 1e-4)
    free = np.concatenate([~(upper | lower), np.ones(v0.size - mg, dtype=bool)])
    assert np.abs(g[free]).max() < 1e-3, np.abs(g[free]).max()


def test_scenario_file_and_estimator_wiring():
    sc = load_scenario(str(OVER_BOX))
    assert sc.gate_in_box and sc.box == ParameterBox(beta0=10.0, beta1=2.0, eta=10.0)
    assert sc.box.contains(sc.truth)
    est = estimator_for(sc, "mle", max_iter=10, random_state=0, device="cpu")
    assert est.gate_box == sc.box
    # the former file: unbounded, as recorded in laplace-gmoe/former_estimator/
    old = load_scenario(str(OVER))
    assert not old.gate_in_box and estimator_for(old, "mle", max_iter=10, random_state=0, device="cpu").gate_box is None
    with pytest.raises(ScenarioFileError, match="gate_in_box must be true or false"):
        scenario_from_mapping({"gate": {"normalisation": "laplace"}, "expert": {"kind": "linear"},
                               "noise": {"model": "mixture"}, "fit": {"gate_in_box": 1},
                               "atoms": [{"beta0": 0.0, "beta1": [0.0, 0.0], "eta": [1.0, 0.0], "variance": 0.1}]})
    with pytest.raises(TypeError, match="gate_box must be a ParameterBox"):
        MLEGaussianMoE(sc.fit_model, 3, gate_box=(1, 2))._check_params()
    with pytest.raises(ValueError, match="gate_box needs the generic EM"):
        MLEGaussianMoE(2, gate_box=ParameterBox())._check_params()

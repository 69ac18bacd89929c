"""The per-sample Fisher information of a scenario's truth, by forward-mode autograd.

For the least-squares scenarios (``Y = g_theta(X) + eps``, ``eps ~ N(0, nu)``) it is
``I(theta*) = E_X[J(X)^T J(X)] / nu`` with ``J(x) = d g_theta(x) / d theta`` at the truth; for the
likelihood scenarios (the softmax-gated Gaussian MoE of Nguyen, Nguyen & Ho 2023, the joint GLLiM,
and every scenario file with ``[noise] model = "mixture"``) it is ``E[s s^T]`` with the score
``s = d log p(y | x) / d theta`` of the model.  Both are Monte Carlo averages over ``m`` draws of the
scenario's own input law (and responses), in the free parameters of
:mod:`moestat.estimators.jacobians`.  The pre-flight (:mod:`moestat.rates.preflight`) turns the matrix
into Cramér--Rao standard deviations and ``n_ok``; the classical theorem's hypothesis
(:func:`moestat.theorems.hypotheses.fisher_condition`) asks whether it is nonsingular.  Apart from the
pre-flight so that the hypotheses do not import the rates engine.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch
from torch.func import jacfwd

from moestat.estimators.jacobians import free_parameters
from moestat.model.gaussian_moe import component_log_joint
from moestat.model.gllim_model import gllim_log_components, split_measure
from moestat.model.protocol import ProtocolModel

__all__ = ["MC_DRAWS", "fisher_information"]

#: Monte Carlo draws of the input law for ``E[J^T J]`` (relative error about ``1/sqrt(m)`` per entry).
MC_DRAWS = 20000


class _Density(NamedTuple):
    """The per-sample function of ``theta`` whose Jacobian makes the Fisher information, with its layout.

    ``f(G, x [c, d], y [c]) -> [c]`` (a log-density, or the regression function) of a measure ``G``
    that :func:`fisher_information` unpacks from ``theta [P]`` in the free-parameter layout of
    the truth (:func:`moestat.estimators.jacobians.free_parameters`, a reference atom when
    ``ref``); ``X``, ``Y`` the Monte Carlo draws; ``scale`` the factor of ``E[J^T J]`` (``1 / nu``
    for least squares); ``drop`` the free coordinates the model does not identify (fixed at the truth).
    """

    ref: bool
    X: np.ndarray
    Y: np.ndarray
    f: Callable
    scale: float
    drop: list[int]


def _gllim_density(scenario, m: int, rng) -> _Density:
    """The joint GLLiM: the score of ``log p(x, y)``."""
    t = scenario.truth
    k, d, q = t.n_atoms, t.dim, t.eta_dim
    X, Y = scenario.sample(m, rng)
    # pi = softmax(beta0) is invariant to a common shift of beta0: fix the last; Gamma is
    # symmetric: its strictly lower entries (zero derivative below) are fixed too
    drop = [k - 1] + [k * (d + 1) + i * q + d + 2 + r * d + s for i in range(k) for r in range(d) for s in range(r)]

    def f(G, x, y):
        logpi, c, Gm, A, b, nu = split_measure(G, d)
        Gs = torch.triu(Gm) + torch.triu(Gm, 1).transpose(-1, -2)
        lc = gllim_log_components(x[None], y[None], (logpi - torch.logsumexp(logpi, -1))[None], c[None],
                                  torch.linalg.cholesky(Gs)[None], A[None], b[None], nu[None])
        return torch.logsumexp(lc, dim=1)[0]  # per sample

    return _Density(False, X, Y, f, 1.0, drop)


def _file_likelihood_density(scenario, m: int, rng) -> _Density:
    """A scenario file drawing ``y`` from the mixture: the likelihood of its own model."""
    t, model = scenario.truth, scenario.model
    k, d, q, ref = t.n_atoms, t.dim, t.eta_dim, bool(model.gate.reference)
    # the coordinates the gate pins (GateFamily.free_mask) that the reference layout leaves free: a
    # gate invariant to a common shift of beta0 only (a Gaussian gate) has its last beta0 fixed
    free = model.gate.free_mask(k, d)
    drop = [] if ref else [i for i in range(k) if not free[i, d]]
    X, Y = scenario.sample(m, rng)

    def f(G, x, y):
        return model.log_density(x, y, G)  # per sample

    return _Density(ref, X, Y, f, 1.0, drop)


def _gaussian_moe_density(scenario, m: int, rng) -> _Density:
    """The softmax-gated Gaussian MoE (model 1): ``log p(y | x)`` from the joint components."""
    X, Y = scenario.sample(m, rng)

    def f(G, x, y):
        return torch.logsumexp(component_log_joint(x, y, G), dim=-1)

    return _Density(True, X, Y, f, 1.0, [])


def _least_squares_density(scenario, m: int, rng) -> _Density:
    """``Y = g_theta(X) + eps``: the regression function, scaled by ``1 / nu``."""
    ref = scenario.model.gate.reference if isinstance(scenario.model, ProtocolModel) else True
    X = scenario.sample_x(m, rng)

    def f(G, x, y):  # noqa: ARG001 - the regression function does not involve y
        return scenario.model.predict(x, G)

    return _Density(bool(ref), X, np.zeros(m), f, 1.0 / float(scenario.noise_var), [])


def fisher_information(scenario, m: int = MC_DRAWS, seed: int = 0, chunk: int = 4096) -> tuple[np.ndarray, list]:
    """Per-sample Fisher information ``[P, P]`` of the truth and the parameter blocks.

    Parameters
    ----------
    scenario : Scenario, FileScenario or GaussianMoEScenario
        Anything with ``truth``, ``model`` (least squares, with ``noise_var``) or ``gaussian_moe``.
    m : int
        Monte Carlo draws of ``(x, y)``.
    seed : int
        Seed of the draws.

    Returns
    -------
    (ndarray [P, P], list of (name, indices))
    """
    gaussian = bool(scenario.gaussian_moe)
    gllim = bool(scenario.gllim)  # the joint GLLiM: the score of log p(x, y)
    file_likelihood = not gaussian and not gllim and bool(scenario.mixture_data)
    rng = np.random.default_rng(seed)
    if gllim:
        dens = _gllim_density(scenario, m, rng)
    elif file_likelihood:
        dens = _file_likelihood_density(scenario, m, rng)
    elif gaussian:
        dens = _gaussian_moe_density(scenario, m, rng)
    else:
        dens = _least_squares_density(scenario, m, rng)
    theta0, measure, blocks = free_parameters(scenario.truth, dens.ref)

    def f(theta, x, y):  # the density's function of the free-parameter vector
        return dens.f(measure(theta), x, y)

    P = theta0.numel()
    info = torch.zeros(P, P, dtype=torch.float64)
    for s in range(0, m, chunk):
        x = torch.as_tensor(dens.X[s:s + chunk], dtype=torch.float64)
        y = torch.as_tensor(dens.Y[s:s + chunk], dtype=torch.float64)
        J = jacfwd(f)(theta0, x, y)  # [c, P]
        info += J.T @ J
    info = (info / m * dens.scale).numpy()
    if dens.drop:
        drops = sorted(dens.drop)
        keep = [i for i in range(info.shape[0]) if i not in drops]
        info = info[np.ix_(keep, keep)]
        blocks = [(name, [i - sum(j < i for j in drops) for i in idx if i not in drops]) for name, idx in blocks]
        blocks = [(name, idx) for name, idx in blocks if idx]
    return info, blocks

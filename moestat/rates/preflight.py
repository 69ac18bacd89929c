"""Pre-flight of a scenario: is its truth identifiable at the sample sizes of the grid?

Before a sweep spends hours, the Fisher information of the truth says how well the data *can*
pin the parameters down.  For the least-squares scenarios (``Y = g_theta(X) + eps``, ``eps ~
N(0, nu)``) the per-sample Fisher information is

    I(theta*) = E_X[ J(X)^T J(X) ] / nu,      J(x) = d g_theta(x) / d theta at theta*,

and the least-squares estimate has the asymptotic covariance ``I^-1 / n`` (the Cramér--Rao bound,
attained by the Gaussian-noise LSE).  For the likelihood scenarios (the softmax-gated Gaussian MoE
of Nguyen, Nguyen & Ho 2023, and every scenario file with ``[noise] model = "mixture"``: any gate,
Gaussian or multinomial-logistic experts) it is ``E[s s^T]`` with the score ``s = d log p(y | x) /
d theta`` of the file's own model (a Gaussian gate's last ``beta0`` is fixed: the model is
invariant to a common shift of the intercepts).
Both are computed by forward-mode autograd (:func:`torch.func.jacfwd`) at the true parameters, as a
Monte Carlo average over ``m`` draws of the scenario's own input law (and responses), in the free
parameters of :mod:`moestat.estimators.jacobians` (the reference atom of a softmax gate is fixed).

Reported (:func:`preflight`): the smallest eigenvalue and the condition number of ``I``; for every
parameter block (``beta0``, ``beta1``, ``eta`` of each atom) the Cramér--Rao standard deviation
of the block's error norm, ``sd_B(n) = sqrt(trace(I^-1)_B / n)``, at each ``n`` of the grid; and
``n_ok``, the ``n`` from which every block's ``sd`` is below :data:`FRACTION` of the separation of
the true atoms (the smallest distance between two atoms' ``omega = (beta1, eta)``): below it, the
fitted atoms are not even expected to sit in their own Voronoi cells and no rate is measured.
Warnings: ``near-singular`` when the condition number exceeds :data:`COND_WARN`, and
``grid below n_ok`` when part (or all) of the grid lies below ``n_ok``.

The pre-flight checks the *truth*: an over-specified fit (``k > k*``) is singular at the truth by
construction (Nguyen et al. 2024, Section 4) and is not what is tested here.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch
from torch.func import jacfwd

from moestat.estimators.jacobians import free_parameters
from moestat.model.gaussian_moe import component_log_joint
from moestat.model.gllim_model import gllim_log_components, split_measure
from moestat.model.protocol import ProtocolModel

__all__ = ["FRACTION", "COND_WARN", "MC_DRAWS", "fisher_information", "preflight", "scenario_preflight", "format_preflight"]

#: The predicted sd must fall below this fraction of the atoms' separation (``n_ok``).
FRACTION = 0.1
#: Condition number above which the truth is called near-singular (a sd 1000 times the best-determined direction's).
COND_WARN = 1e6
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


def scenario_preflight(experiment) -> dict[str, Any] | None:
    """The pre-flight of a rates run on a scenario file, as the doors hand it to
    :func:`moestat.rates.run_rates` (``preflight=``): :func:`preflight` of its first router's scenario on
    its grid; ``None`` for the built-in scenarios (the package's own truths, checked by their tests).

    Parameters
    ----------
    experiment : moestat.rates.resolve.Experiment
        The resolved run (``config.scenario_file``, ``config.router``, ``config.ns`` and ``scenarios``).
    """
    c = experiment.config
    if not c.scenario_file:
        return None
    return preflight(experiment.scenarios[c.router[0]], c.ns)


def preflight(scenario, ns: Sequence[int], *, fraction: float = FRACTION, m: int = MC_DRAWS, seed: int = 0) -> dict[str, Any]:
    """The pre-flight report of one scenario on the grid ``ns`` (see the module docstring).

    Returns
    -------
    dict
        ``n_params``, ``min_eigenvalue``, ``max_eigenvalue``, ``condition_number``,
        ``weakest_direction`` (the unit eigenvector of the smallest eigenvalue, by block),
        ``separation``, ``fraction``, ``target_sd``, ``blocks`` (name, ``sd_1`` = the sd at
        ``n = 1``, ``sd`` at each ``n``, ``n_ok``), ``n_ok`` (the largest), ``ns``, ``setting``,
        ``warnings`` (list of one-line strings) and ``kind`` (``least squares`` / ``likelihood``).
    """
    info, blocks = fisher_information(scenario, m=m, seed=seed)
    info = 0.5 * (info + info.T)
    w, V = np.linalg.eigh(info)
    lam_min, lam_max = float(w[0]), float(w[-1])
    cond = lam_max / lam_min if lam_min > 0 else math.inf
    cov = (V / w) @ V.T if lam_min > 0 else np.full_like(info, math.inf)
    om = np.asarray(scenario.truth.numpy().omega())  # the true atoms' omega = (beta1, eta), [k, d + q]
    sep = min((float(np.linalg.norm(a - b)) for i, a in enumerate(om) for b in om[i + 1:]), default=math.inf)
    target = fraction * sep
    rows, n_ok = [], 0.0
    for name, idx in blocks:
        var1 = float(np.trace(cov[np.ix_(idx, idx)])) if lam_min > 0 else math.inf
        sd1 = math.sqrt(var1) if var1 >= 0 else math.inf
        nb = (sd1 / target) ** 2 if math.isfinite(target) and target > 0 else 0.0
        n_ok = max(n_ok, nb)
        rows.append({"block": name, "sd_1": sd1, "sd": [sd1 / math.sqrt(n) for n in ns], "n_ok": nb})
    weak = V[:, 0]
    weakest = sorted(((name, float(np.linalg.norm(weak[idx]))) for name, idx in blocks), key=lambda t: -t[1])[:3]
    warnings = []
    if not cond <= COND_WARN:
        warnings.append(f"near-singular truth: Fisher information condition number {cond:.3g} > {COND_WARN:g} "
                        f"(smallest eigenvalue {lam_min:.3g}; weakest direction mostly {weakest[0][0]})")
    n_ok_int = int(math.ceil(n_ok)) if math.isfinite(n_ok) else None
    worst = max(rows, key=lambda r: r["sd_1"])
    if n_ok_int is None or n_ok_int > ns[-1]:
        warnings.append(f"the whole grid lies below n_ok = {n_ok_int if n_ok_int is not None else 'inf'}: at n = {ns[-1]} the "
                        f"Cramér-Rao sd of {worst['block']} is {worst['sd'][-1]:.3g} > {fraction:g} x separation {sep:.3g} "
                        f"= {target:.3g}; no rate can be measured on this grid")
    elif n_ok_int > ns[0]:
        below = [n for n in ns if n < n_ok_int]
        warnings.append(f"{len(below)} of {len(ns)} grid sizes lie below n_ok = {n_ok_int} (sd of {worst['block']} above "
                        f"{fraction:g} x separation there): declare --window-min {min(n for n in ns if n >= n_ok_int)} "
                        "or move n-min up")
    return {
        "kind": "likelihood" if scenario.gaussian_moe or scenario.mixture_data
        else "least squares",
        "setting": scenario.setting,
        "n_params": int(info.shape[0]),
        "mc_draws": int(m),
        "min_eigenvalue": lam_min,
        "max_eigenvalue": lam_max,
        "condition_number": cond,
        "weakest_direction": [{"block": b, "weight": v} for b, v in weakest],
        "separation": sep,
        "fraction": float(fraction),
        "target_sd": target,
        "ns": [int(n) for n in ns],
        "blocks": rows,
        "n_ok": n_ok_int,
        "warnings": warnings,
    }


def format_preflight(rep: dict[str, Any], title: str = "") -> str:
    """The printed table: one line per block with its sd at each n, then the summary and warnings."""
    ns = rep["ns"]
    head = f"{'block':<16} " + " ".join(f"{('n=' + str(n)):>10}" for n in ns) + f" {'n_ok':>10}"
    lines = [f"pre-flight {title} ({rep['kind']}, {rep['setting']}-specified truth, {rep['n_params']} free parameters, "
             f"{rep['mc_draws']} Monte Carlo draws)".replace("  ", " "),
             f"Fisher information per sample: smallest eigenvalue {rep['min_eigenvalue']:.3g}, largest {rep['max_eigenvalue']:.3g}, "
             f"condition number {rep['condition_number']:.3g}",
             f"Cramér-Rao sd of each block's error norm; target sd = {rep['fraction']:g} x separation of the true atoms "
             f"({rep['separation']:.3g}) = {rep['target_sd']:.3g}", head, "-" * len(head)]
    for r in rep["blocks"]:
        n_ok = "-" if not math.isfinite(r["n_ok"]) else (f"{int(math.ceil(r['n_ok'])):d}" if r["n_ok"] < 1e9 else f"{r['n_ok']:.3g}")
        lines.append(f"{r['block']:<16} " + " ".join(f"{v:>10.3g}" for v in r["sd"]) + f" {n_ok:>10}")
    n_ok = rep["n_ok"]
    lines.append("n_ok (every block below the target): " + ("never (singular)" if n_ok is None else (f"{n_ok}" if n_ok < 1e9 else f"{n_ok:.3g}")))
    if rep["setting"] == "over":
        lines.append("note: the truth is checked; the over-specified fit is singular at the truth by construction")
    for w in rep["warnings"]:
        lines.append(f"WARNING: {w}")
    if not rep["warnings"]:
        lines.append("ok: identifiable at every n of the grid")
    return "\n".join(lines)

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
from typing import Any, Sequence

import numpy as np

# the matrix is the estimators' (the hypotheses of moestat.theorems read it too, without the rates engine)
from moestat.estimators.fisher import MC_DRAWS, fisher_information

__all__ = ["FRACTION", "COND_WARN", "MC_DRAWS", "fisher_information", "preflight", "scenario_preflight", "format_preflight"]

#: The predicted sd must fall below this fraction of the atoms' separation (``n_ok``).
FRACTION = 0.1
#: Condition number above which the truth is called near-singular (a sd 1000 times the best-determined direction's).
COND_WARN = 1e6
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

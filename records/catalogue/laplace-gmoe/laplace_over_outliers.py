"""What the largest-D2 fits of ``laplace-gmoe``'s over-specified arm are: refitted, and the linear-limit reading checked.

``laplace-gmoe`` fits a Laplace-gated Gaussian MoE (Han et al. 2024, FuseMoE; gate
``w_i(x) = softmax_i(beta0_i - ||x - c_i||)``, ``c_i = beta1_i`` the kernel's centre, the last
``beta0`` pinned at 0; ``moestat/rates/catalogue_files/laplace_gmoe_over.toml``: d = 2, ``k* = 2``,
``K = 3``, inputs uniform on ``[-1, 1]^2``).  Its over-specified quick run has a D2 ruled by a few
fits with D2 above 1e3 (docs/guide/catalogue.rst), read there as atoms whose intercept ran off with
their centre: as ``||c|| -> inf`` with ``beta0 - ||c||`` fixed,

    beta0 - ||x - c|| = (beta0 - ||c||) + u^T x - (||x||^2 - (u^T x)^2) / (2 ||c||) + O(||c||^-2),   u = c / ||c||,

a *linear* softmax score with intercept ``beta0 - ||c||`` and unit slope ``u``, while D2's weight
``exp(beta0)`` and its gate block ``|c - c*|^rbar`` both diverge.  This script checks the reading on
the fitted parameters (nothing tuned, no estimator changed):

* the fits are chosen by a rule fixed before any parameter is looked at: the ``--top`` largest D2
  (``voronoi``) of the run's ``results.csv``;
* each is refitted exactly as the sweep fitted it (:func:`refit_unit`: its work unit's data and
  start from each replicate's own streams, :func:`moestat.rates.sweep._draw`; the unit's estimator
  from its recorded seed, :func:`moestat.rates.truth_check.unit_estimator`; the truth check and
  its answer, :func:`moestat.rates.truth_check.against_truth`), and its D2, log-likelihood and the
  truth's log-likelihood are checked against ``results.csv`` first;
* per fitted atom (:func:`atom_report`): ``||c||``, ``beta0``, ``beta0 - ||c||``, its Voronoi cell and
  D2 terms per block (``w_i |Dblock|^e``, ``w_i = exp(beta0_i)``, the declared exponents), the
  largest gap ``max_x |(beta0 - ||x - c||) - (beta0 - ||c|| + u^T x)|`` between its kernel score and
  that linear score on the sample, the log-likelihood of the fit with that atom's score replaced by
  the linear one, and how many samples have a posterior responsibility above 0.5 for it;
* per fit, the profile of the log-likelihood along the run-off ray (:func:`ray_profile`): the atom
  moved to ``c + t u``, ``beta0 + t`` (its linear limit unchanged) for ``t`` from ``-||c|| / 2`` to
  ``+1e4``, so a likelihood that still rises along the ray (its supremum at infinity) shows.

Usage (from the repository root; the run folder is the over arm of
``python -m moestat reproduce laplace-gmoe --quick --n-jobs 1 --out DIR``)::

    OMP_NUM_THREADS=1 python records/catalogue/laplace-gmoe/laplace_over_outliers.py \\
        records/catalogue/laplace-gmoe/quick_over --top 5 \\
        --json records/catalogue/laplace-gmoe/over_outliers.json

(``quick_over/`` is that over arm's run folder, recorded.)  The command line, the refit loop and the
JSON are :func:`recorded_refit.refit_main`'s; the JSON is standard, a non-finite number (an
overflowed ``exp(beta0)``, the ray's limit ``t = inf``) written as the string ``"inf"``, ``"-inf"``
or ``"nan"`` (:func:`recorded_refit.write_json`; :func:`recorded_refit.decode` reads them back).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

#: Where the catalogue's scenario files live (a recorded run's absolute path may name another checkout).
CATALOGUE_FILES = Path(__file__).resolve().parents[3] / "moestat" / "rates" / "catalogue_files"
#: A refit reproduces the recorded fit when D2 and both log-likelihoods agree to this relative tolerance.
SAME_RTOL = 1e-6
#: Kernel score within this of its linear limit at every sample: the atom "is" a linear softmax score there.
LINEAR_TOL = 1e-2
#: Steps ``t`` along the run-off ray (in units of the centre's distance), besides ``-||c|| / 2``.
RAY_STEPS = (-10.0, -1.0, 0.0, 1.0, 10.0, 100.0, 1e3, 1e4)


def laplace_parts(X: np.ndarray, Y: np.ndarray, G, linear: int | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """Gate, posterior responsibilities and log-likelihood of one Laplace-gated Gaussian MoE on one sample.

    Parameters
    ----------
    X : ndarray, shape ``[n, d]``
    Y : ndarray, shape ``[n]``
    G : MixingMeasure
        Unbatched: ``beta0 [k]``, centres ``beta1 [k, d]``, ``eta [k, d + 2]`` = ``(a, b, sigma^2)``.
    linear : int, optional
        An atom whose score ``beta0 - ||x - c||`` is replaced by its linear limit
        ``beta0 - ||c|| + u^T x``, ``u = c / ||c||``.

    Returns
    -------
    gate : ndarray ``[n, k]``
    post : ndarray ``[n, k]``
        ``P(atom i | x, y)``.
    loglik : float
        ``sum_n log sum_i gate_i(x_n) N(y_n | a_i^T x_n + b_i, sigma_i^2)`` in nats.
    """
    from studies.tools import recorded_refit as rr

    c = G.beta1
    score = G.beta0[None, :] - np.linalg.norm(X[:, None, :] - c[None, :, :], axis=-1)  # [n, k]
    if linear is not None:
        r = np.linalg.norm(c[linear])
        score[:, linear] = G.beta0[linear] - r + X @ (c[linear] / r)
    log_gate = score - np.logaddexp.reduce(score, axis=1, keepdims=True)
    return rr.gaussian_expert_posterior(log_gate, X, Y, G.eta)


def d2_terms(spec, fitted, truth) -> dict:
    """A declared Voronoi loss of one fit split into its terms, per atom and block, no gate shift.

    The Laplace gate has no reference atom (``gate.reference`` is false), so the sweep's loss
    (:func:`moestat.data.likelihood_losses.likelihood_loss_columns`) takes ``w_i = exp(beta0_i)``
    as fitted; ``total`` equals the recorded ``voronoi`` column.

    Returns
    -------
    dict
        ``total``, ``cells [k]``, ``sizes [k*]``, ``weights [k]``, ``mass_gaps [k*]``, ``errors``
        (block -> ``[k]`` plain norms), ``exponents`` (block -> ``[k]``), ``terms`` (block -> ``[k]``).
    """
    from moestat.losses.voronoi_spec import cell_terms_from_spec

    c = cell_terms_from_spec(spec, fitted, truth)
    sizes_of_atom = c["sizes"][c["cells"]]
    w = np.asarray(c["weights"], dtype=float)
    errors, exponents, terms = {}, {}, {}
    with np.errstate(over="ignore", invalid="ignore"):
        for b in spec.blocks:
            e = np.asarray(b.exponent(sizes_of_atom), dtype=float)
            errors[b.label], exponents[b.label] = np.asarray(c["block_errors"][b.label], dtype=float), e
            terms[b.label] = w * errors[b.label] ** e
    return {"total": float(c["terms"].sum()), "cells": c["cells"], "sizes": c["sizes"], "weights": w,
            "mass_gaps": np.asarray(c["mass_part"], dtype=float), "errors": errors, "exponents": exponents, "terms": terms}


def atom_report(X: np.ndarray, Y: np.ndarray, fitted, spec, truth, ll: float) -> tuple[list[dict], dict]:
    """Per fitted atom: centre norm, intercepts, cell, D2 terms, linear-limit gaps and responsibilities.

    ``ll``: the fit's log-likelihood on ``(X, Y)`` (the linearised fits are compared with it).
    Returns the atoms and :func:`d2_terms`' dict.
    """
    t = d2_terms(spec, fitted, truth)
    _, post, _ = laplace_parts(X, Y, fitted)
    out = []
    for i in range(fitted.n_atoms):
        c = fitted.beta1[i]
        r = float(np.linalg.norm(c))
        kernel = fitted.beta0[i] - np.linalg.norm(X - c, axis=-1)
        lin = fitted.beta0[i] - r + X @ (c / r)
        _, _, ll_lin = laplace_parts(X, Y, fitted, linear=i)
        out.append({
            "atom": i, "cell": int(t["cells"][i]), "cell_size": int(t["sizes"][t["cells"][i]]),
            "beta0": float(fitted.beta0[i]), "centre": c.tolist(), "centre_norm": r, "beta0_minus_norm": float(fitted.beta0[i] - r),
            "direction": (c / r).tolist(), "a": fitted.eta[i, :-2].tolist(), "b": float(fitted.eta[i, -2]),
            "variance": float(fitted.eta[i, -1]), "weight": float(t["weights"][i]),
            "max_gap_to_linear_score": float(np.max(np.abs(kernel - lin))),
            "loglik_linearised_minus_fit": ll_lin - ll,
            "n_responsible": int((post[:, i] > 0.5).sum()), "responsibility_sum": float(post[:, i].sum()),
            "errors": {k: float(v[i]) for k, v in t["errors"].items()},
            "exponents": {k: float(v[i]) for k, v in t["exponents"].items()},
            "terms": {k: float(v[i]) for k, v in t["terms"].items()},
        })
    return out, t


def ray_profile(X: np.ndarray, Y: np.ndarray, fitted, atom: int) -> list[dict]:
    """Log-likelihood along the run-off ray of ``atom``: ``c + t u``, ``beta0 + t``, minus the fit's.

    On the ray ``beta0 - ||c||`` and ``u`` stay fixed, so the score tends to the same linear limit at
    every ``t``; the gaps say whether the likelihood still rises towards that limit (the fit sits on a
    ray whose supremum is at infinity) or has a finite maximum near the fit.
    """
    from moestat.model.mixing import MixingMeasure

    c = fitted.beta1[atom]
    r = float(np.linalg.norm(c))
    u = c / r
    _, _, ll0 = laplace_parts(X, Y, fitted)
    out = []
    for t in (-r / 2, *RAY_STEPS):
        b0, b1 = fitted.beta0.copy(), fitted.beta1.copy()
        b0[atom] += t
        b1[atom] = c + t * u
        _, _, ll = laplace_parts(X, Y, MixingMeasure(b0, b1, fitted.eta))
        out.append({"t": float(t), "centre_norm": r + float(t), "loglik_minus_fit": ll - ll0})
    _, _, ll_lin = laplace_parts(X, Y, fitted, linear=atom)
    out.append({"t": float("inf"), "centre_norm": float("inf"), "loglik_minus_fit": ll_lin - ll0})
    return out


_UNITS: dict = {}  # (run, n, first replicate) -> the refitted unit: two chosen fits of one unit cost one refit


def refit_unit(run: Path, n: int, replicate: int) -> dict:
    """Refit the work unit of ``run`` that holds ``(n, replicate)`` as the sweep did; that replicate's fit.

    The sweep's config comes from the run's ``summary.json``.  A unit is refitted once per process.
    """
    from moestat.model.mixing import MixingMeasure
    from moestat.rates.sweep import recorded_unit
    from studies.tools import recorded_refit as rr

    unit, pos = recorded_unit(run, n, replicate, scenario_dir=CATALOGUE_FILES)  # the catalogue's own file
    key = (str(run), n, unit.replicates[0])
    if key not in _UNITS:
        _UNITS[key] = rr.refit_keeping_starts(unit)
    r = _UNITS[key]
    sc, X, Y, kept, first_ll, state = r["scenario"], r["X"], r["Y"], r["starts"], r["first_loglik"], r["state"]
    losses = r["losses"]
    P = state["params"]
    return {"X": X[pos], "Y": Y[pos], "scenario": sc, "unit": unit.replicates,
            "fit": MixingMeasure(P.beta0[pos], P.beta1[pos], P.eta[pos]),
            "starts": [{"loglik": float(kept.loglik[j]), "status": kept.status[j]} for j in np.flatnonzero(kept.replicate == pos)],
            "first_loglik": float(first_ll[pos]), "status": state["status"][pos], "truth": state["truth"][pos],
            "losses": {k: float(v[pos]) for k, v in losses.items()}}


def report_fit(run: Path, row: pd.Series) -> dict:
    """Refit one chosen fit, check it against its recorded row, and describe it."""
    n, rep = int(row["n"]), int(row["replicate"])
    t0 = time.process_time()
    r = refit_unit(run, n, rep)
    sc = r["scenario"]
    X, Y, G = r["X"], r["Y"], r["fit"]
    ll_truth = float(r["truth"]["truth_objective"])
    checks = {"voronoi": (r["losses"]["voronoi"], float(row["voronoi"])),
              "fit_objective": (float(r["truth"]["fit_objective"]), float(row["fit_objective"])),
              "truth_objective": (ll_truth, float(row["truth_objective"]))}
    same = all(np.isclose(a, b, rtol=SAME_RTOL, atol=0.0) for a, b in checks.values())
    _, _, ll = laplace_parts(X, Y, G)
    atoms, t = atom_report(X, Y, G, sc.losses[0], sc.truth, ll)
    terms = [(v, a["atom"], k) for a in atoms for k, v in a["terms"].items()] + [(g, j, "mass gap") for j, g in enumerate(t["mass_gaps"])]
    value, who, what = max(terms)
    dominant = {"value": value, "share": value / t["total"], "block": what, ("cell" if what == "mass gap" else "atom"): int(who)}
    if not np.isfinite(value):  # exp(beta0) overflowed: every term of that atom is infinite, none "dominates"
        over = int(np.flatnonzero(~np.isfinite(t["weights"]))[0])
        dominant = {"value": value, "share": None, "block": "exp(beta0) overflow", "atom": over}
    runoff = max(atoms, key=lambda a: a["centre_norm"])
    return {
        "n": n, "replicate": rep, "unit_replicates": list(r["unit"]), "D2_recorded": float(row["voronoi"]),
        "refit_vs_recorded": {k: {"refit": a, "recorded": b} for k, (a, b) in checks.items()},
        "same_as_recorded": bool(same), "status": r["status"], "truth_check": r["truth"]["truth_check"],
        "loglik_fit_minus_truth": float(r["truth"]["fit_objective"]) - ll_truth,
        "loglik_numpy_minus_recorded": ll - float(row["fit_objective"]),
        "starts_loglik_minus_truth": [s["loglik"] - ll_truth for s in r["starts"]],
        "starts_status": [s["status"] for s in r["starts"]],
        "D2": t["total"], "mass_gaps": t["mass_gaps"].tolist(),
        "dominant": dominant, "runoff_atom": runoff["atom"],
        # the last atom's beta0 is pinned at 0: when its centre runs off, the others' beta0 go to -||c|| instead
        "runoff_is_pinned_atom": runoff["atom"] == G.n_atoms - 1,
        "runoff_linear_within_tol": bool(runoff["max_gap_to_linear_score"] <= LINEAR_TOL),
        "ray": ray_profile(X, Y, G, runoff["atom"]), "atoms": atoms,
        "truth": {"beta0": sc.truth.beta0.tolist(), "beta1": sc.truth.beta1.tolist(), "eta": sc.truth.eta.tolist()},
        "cpu_s": round(time.process_time() - t0, 1),
    }


def print_fit(f: dict) -> None:
    """One fit's summary on stdout."""
    print(f"n={f['n']} rep {f['replicate']}: D2 {f['D2']:.4g} (recorded {f['D2_recorded']:.4g}; same as recorded {f['same_as_recorded']}), "
          f"loglik - truth {f['loglik_fit_minus_truth']:+.2f} ({f['truth_check']}, {f['status']}); starts "
          + ", ".join(f"{v:+.2f}" for v in f["starts_loglik_minus_truth"]))
    dom = f["dominant"]
    where = f"atom {dom['atom']}" if "atom" in dom else f"cell {dom['cell']}"
    share = "n/a" if dom["share"] is None else f"{100 * dom['share']:.2f} %"
    print(f"   dominant: {where} {dom['block']} {dom['value']:.4g} ({share} of D2); mass gaps "
          + " ".join(f"{g:.3g}" for g in f["mass_gaps"]))
    for a in f["atoms"]:
        terms = " ".join(f"{k} {v:.3g}" for k, v in a["terms"].items())
        print(f"   atom {a['atom']} cell {a['cell']} (size {a['cell_size']}): beta0 {a['beta0']:+.4g} |c| {a['centre_norm']:.4g} "
              f"beta0-|c| {a['beta0_minus_norm']:+.4g} u ({a['direction'][0]:+.3f}, {a['direction'][1]:+.3f}) max gap to linear "
              f"{a['max_gap_to_linear_score']:.3g}, loglik linearised {a['loglik_linearised_minus_fit']:+.2e}; a "
              f"({a['a'][0]:+.3f}, {a['a'][1]:+.3f}) b {a['b']:+.3f} var {a['variance']:.4g} resp>0.5 {a['n_responsible']} | {terms}")
    print("   ray (t: loglik - fit): " + ", ".join(f"{p['t']:.4g}: {p['loglik_minus_fit']:+.3g}" for p in f["ray"]))


def _header(results: pd.DataFrame, a) -> dict:
    from studies.tools import recorded_refit as rr

    return {"rule": f"the {a.top} largest D2 (voronoi) of results.csv, chosen before any parameter was looked at",
            "same_rtol": SAME_RTOL, "linear_tol": LINEAR_TOL, "D2_per_n": rr.per_n_tail(results)}


def main(argv: list[str] | None = None) -> int:
    from studies.tools import recorded_refit as rr

    return rr.refit_main(
        argv, description=__doc__.splitlines()[0],
        run_help="the over-specified run folder of laplace-gmoe (results.csv, summary.json)",
        top_help="how many of the largest-D2 fits to refit", table="results.csv", needs=("results.csv", "summary.json"),
        choose=lambda results, a: results.sort_values("voronoi", ascending=False).head(a.top), refit=report_fit,
        show=print_fit, header=_header, summary=rr.print_per_n_tail)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # this checkout's moestat
    sys.exit(main())

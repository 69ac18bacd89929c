"""What the largest-D2 fits of the ``gmoe-over4`` run are: each refitted from its recorded streams.

``gmoe-over4`` fits model 1 of Nguyen, Nguyen & Ho (2023) (d = 1, ``k* = 2``) with ``K = 4`` atoms.
Its 40-replicate run (``records/archive/catalogue/gmoe-over4/design40/gaussian-moe``) has a log-of-mean D2
slope ruled by a few fits whose D2 is 1e4 to 1e7 times their sample size's median
(docs/guide/catalogue.rst).  This script measures what makes those D2 values large, on the recorded
fits themselves (nothing tuned, no estimator changed):

* the fits are chosen by a rule fixed before any parameter is looked at: the ``--top`` largest
  ratios ``D2 / median D2 at the fit's n`` of ``results.csv``, or (``--above T``) every fit with
  ``D2 > T``, in the same order;
* each is refitted exactly as the sweep fitted it (:func:`refit_unit`): its work unit's data and
  near-truth starts from each replicate's own streams (:func:`moestat.rates.sweep._draw`, one
  ``SeedSequence`` per (scenario, n, replicate)), the unit's estimator from its recorded seed
  (:func:`moestat.rates.truth_check.unit_estimator`, the jittered second start of each replicate
  drawn from it for the whole unit, hence the whole unit is refitted; every start's result kept by
  its ``keep_starts`` option), the truth check of
  :func:`moestat.rates.truth_check.against_truth`; the refit's D2, log-likelihood and the truth's
  log-likelihood are checked against ``results.csv`` before anything is reported;
* per fit (:func:`anatomy`): every start's log-likelihood minus the truth's and its own D2, the
  start that won, and per fitted atom its weight ``exp(beta0)`` after D2's normalisation (the
  reference cell's mass 1 and mass-weighted slope 0, :func:`moestat.data.gaussian_scenarios._normalised`),
  its share of the gate on the sample, gate slope, expert ``a`` and ``b``, variance (and its ratio
  to the EM's floor ``1e-6 var(y)``), its Voronoi cell, and its contribution to D2 split by block
  (``w_i |Dbeta1|^rbar``, ``w_i |Da|^(rbar/2)``, ``w_i |Db|^rbar``, ``w_i |Dvar|^(rbar/2)``, with
  ``rbar = 1, 4, 6`` for cells of 1, 2, 3 atoms, their Theorem 2) plus the cells' mass gaps; the
  largest term is named; and how many samples have a posterior responsibility above 0.5 for the
  atom (a spike on few points, or an atom that carries data).

Usage (from the repository root; about 1-2 CPU-minutes for the default five fits)::

    OMP_NUM_THREADS=1 python records/archive/catalogue/gmoe-over4/gmoe_over4_outliers.py \\
        records/archive/catalogue/gmoe-over4/design40/gaussian-moe --top 5 \\
        --json records/archive/catalogue/gmoe-over4/design40/outliers.json

and every fit of the run with ``D2 > 1e3`` (21 of 440; about 14 CPU-seconds each)::

    OMP_NUM_THREADS=1 python records/archive/catalogue/gmoe-over4/gmoe_over4_outliers.py \\
        records/archive/catalogue/gmoe-over4/design40/gaussian-moe --above 1e3 \\
        --json records/archive/catalogue/gmoe-over4/design40/outliers_above_1e3.json

The command line, the refit loop and the JSON (standard: no ``NaN``/``Infinity``) are
:func:`recorded_refit.refit_main`'s.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

#: The blocks of D2 for model 1 (d = 1): name -> (where in the measure, "rbar" or "rbar/2").
BLOCKS = {"beta1": "rbar", "a": "rbar/2", "b": "rbar", "variance": "rbar/2"}
#: A refit reproduces the recorded fit when D2 and both log-likelihoods agree to this relative tolerance.
SAME_RTOL = 1e-6


def pick_fits(results: pd.DataFrame, top: int) -> pd.DataFrame:
    """The ``top`` fits of largest ``voronoi / median(voronoi at the same n)``, largest first.

    Parameters
    ----------
    results : DataFrame
        ``results.csv`` of a run (columns ``n``, ``replicate``, ``voronoi``).
    top : int

    Returns
    -------
    DataFrame
        The chosen rows, with ``median_at_n`` and ``ratio`` added.
    """
    med = results.groupby("n")["voronoi"].median()
    r = results.assign(median_at_n=results["n"].map(med))
    r = r.assign(ratio=r["voronoi"] / r["median_at_n"])
    return r.sort_values("ratio", ascending=False).head(top)


def pick_above(results: pd.DataFrame, above: float) -> pd.DataFrame:
    """Every fit with ``voronoi > above``, in :func:`pick_fits`' order (largest ratio to its n's median first)."""
    chosen = pick_fits(results, len(results))
    return chosen[chosen["voronoi"] > above]


def responsibilities(X: np.ndarray, Y: np.ndarray, G) -> tuple[np.ndarray, np.ndarray, float]:
    """Gate, posterior responsibilities and log-likelihood of one fit of model 1 on one sample.

    Parameters
    ----------
    X : ndarray, shape ``[n, d]``
    Y : ndarray, shape ``[n]``
    G : MixingMeasure
        Unbatched, ``beta0 [k]``, ``beta1 [k, d]``, ``eta [k, d + 2]`` = ``(a, b, sigma^2)``.

    Returns
    -------
    gate : ndarray ``[n, k]``
        ``softmax_i(beta0_i + beta1_i^T x)``.
    post : ndarray ``[n, k]``
        ``P(atom i | x, y)``, proportional to ``gate_i(x) N(y | a_i^T x + b_i, sigma_i^2)``.
    loglik : float
        ``sum_n log sum_i gate_i(x_n) N(y_n | ...)`` (nats): checked against the recorded
        ``fit_objective`` so that the responsibilities are those of the recorded fit.
    """
    from studies.tools import recorded_refit as rr

    score = G.beta0[None, :] + X @ G.beta1.T  # [n, k]
    log_gate = score - np.logaddexp.reduce(score, axis=1, keepdims=True)
    return rr.gaussian_expert_posterior(log_gate, X, Y, G.eta)


def d2_terms(fitted, truth) -> dict:
    """D2 of one fit (Nguyen, Nguyen & Ho 2023, Theorem 2) split into its terms, per atom and block.

    Same cells, exponents and softmax normalisation as :func:`moestat.data.gaussian_scenarios.gaussian_voronoi`
    (so ``total`` equals the recorded ``voronoi`` column).

    Parameters
    ----------
    fitted : MixingMeasure
        Unbatched fit, ``k`` atoms.
    truth : MixingMeasure
        Unbatched, ``k*`` atoms, the last the reference.

    Returns
    -------
    dict
        ``total``; ``beta0``, ``beta1`` (the normalised gate); ``cells [k]``, ``sizes [k*]``;
        ``weights [k]`` (``exp(beta0)`` normalised); ``mass_gaps [k*]``; ``errors``
        (block -> ``[k]`` plain norms ``|Dblock|``); ``exponents`` (block -> ``[k]``); ``terms``
        (block -> ``[k]``, ``w_i |Dblock_i|^e``).
    """
    from moestat.data.gaussian_scenarios import RBAR, _normalised, gaussian_loss_spec
    from moestat.losses.voronoi_spec import cell_terms_from_spec
    from moestat.model.mixing import MixingMeasure

    spec = gaussian_loss_spec("D2", truth.dim)
    cells = cell_terms_from_spec(spec, fitted, truth)["cells"]  # the expert blocks decide the cells
    ref = truth.n_atoms - 1
    b0, b1 = fitted.beta0.copy(), fitted.beta1.copy()
    if np.any(cells == ref):
        b0, b1 = _normalised(b0, b1, cells == ref)
    c = cell_terms_from_spec(spec, MixingMeasure(b0, b1, fitted.eta), truth)
    size_of_atom = c["sizes"][c["cells"]]
    rbar = np.array([RBAR[min(m, len(RBAR)) - 1] for m in size_of_atom], dtype=float)
    w = np.asarray(c["weights"], dtype=float)
    errors, exponents, terms = {}, {}, {}
    for name, kind in BLOCKS.items():
        e = np.where(size_of_atom == 1, 1.0, rbar if kind == "rbar" else rbar / 2)
        errors[name], exponents[name] = np.asarray(c["block_errors"][name], dtype=float), e
        terms[name] = w * errors[name] ** e
    return {"total": float(c["terms"].sum()), "beta0": b0, "beta1": b1, "cells": c["cells"], "sizes": c["sizes"],
            "weights": w, "mass_gaps": np.asarray(c["mass_part"], dtype=float), "errors": errors,
            "exponents": exponents, "terms": terms}


def anatomy(X: np.ndarray, Y: np.ndarray, fitted, truth, var_floor: float) -> dict:
    """Per atom of one fit: parameters, cell, D2 terms, gate share and responsibilities (see the module docstring).

    Parameters
    ----------
    X : ndarray ``[n, d]``, Y : ndarray ``[n]``
        The replicate's sample.
    fitted, truth : MixingMeasure
        Unbatched.
    var_floor : float
        The EM's variance floor relative to ``var(y)`` (:class:`moestat.estimators.mle.MLEGaussianMoE`).

    Returns
    -------
    dict
        ``D2``, ``loglik``, ``atoms`` (one dict per fitted atom), ``mass_gaps``, ``dominant``
        (the largest single term: atom, block or ``mass gap``, its value and share of D2).
    """
    d = X.shape[1]
    t = d2_terms(fitted, truth)
    gate, post, ll = responsibilities(X, Y, fitted)
    floor = var_floor * float(np.var(Y))
    atoms = []
    for i in range(fitted.n_atoms):
        terms = {name: float(t["terms"][name][i]) for name in BLOCKS}
        atoms.append({
            "atom": i, "cell": int(t["cells"][i]), "cell_size": int(t["sizes"][t["cells"][i]]),
            "weight": float(t["weights"][i]), "beta0": float(t["beta0"][i]), "beta1": t["beta1"][i].tolist(),
            "a": fitted.eta[i, :d].tolist(), "b": float(fitted.eta[i, d]), "variance": float(fitted.eta[i, d + 1]),
            "variance_over_floor": float(fitted.eta[i, d + 1] / floor),
            "gate_share": float(gate[:, i].mean()), "responsibility_sum": float(post[:, i].sum()),
            "n_responsible": int((post[:, i] > 0.5).sum()),
            "errors": {name: float(t["errors"][name][i]) for name in BLOCKS},
            "exponents": {name: float(t["exponents"][name][i]) for name in BLOCKS},
            "terms": terms, "contribution": float(sum(terms.values())),
        })
    candidates = [(a["terms"][b], a["atom"], b) for a in atoms for b in BLOCKS]
    candidates += [(float(g), j, "mass gap") for j, g in enumerate(t["mass_gaps"])]
    value, who, what = max(candidates)
    # "rest": D2 less its largest term, an accounting of the other terms (the fit left as it is)
    dominant = {"value": value, "share": value / t["total"], "block": what, "rest": t["total"] - value,
                ("cell" if what == "mass gap" else "atom"): int(who)}
    return {"D2": t["total"], "loglik": ll, "atoms": atoms, "mass_gaps": t["mass_gaps"].tolist(), "dominant": dominant}


def refit_unit(run: Path, n: int, replicate: int) -> dict:
    """Refit the work unit of ``run`` that holds ``(n, replicate)`` as the sweep did; that replicate's fit.

    Returns its data ``X``, ``Y``, the reported fit and every start's fit (the estimator's
    per-start results, :class:`moestat.estimators.mle.StartResults`; nothing of the fit changes), its
    refitted losses and truth columns, and the unit's replicates.
    """
    from moestat.model.mixing import MixingMeasure
    from moestat.rates.sweep import recorded_unit
    from studies.tools import recorded_refit as rr

    unit, pos = recorded_unit(run, n, replicate)
    r = rr.refit_keeping_starts(unit)
    sc, X, Y, est, state, losses = r["scenario"], r["X"], r["Y"], r["est"], r["state"], r["losses"]
    kept = r["starts"]
    starts = [{"loglik": float(kept.loglik[j]), "status": kept.status[j], "n_iter": int(kept.n_iter[j]),
               "params": MixingMeasure(kept.params.beta0[j], kept.params.beta1[j], kept.params.eta[j])}
              for j in np.flatnonzero(kept.replicate == pos)]
    P = state["params"]
    return {"X": X[pos], "Y": Y[pos], "scenario": sc, "var_floor": float(est.var_floor), "unit": unit.replicates,
            "fit": MixingMeasure(P.beta0[pos], P.beta1[pos], P.eta[pos]), "starts": starts,
            "status": state["status"][pos], "truth": state["truth"][pos],
            "losses": {k: float(v[pos]) for k, v in losses.items()}}


def report_fit(run: Path, row: pd.Series) -> dict:
    """Refit one chosen fit, check it against its recorded row, and describe it (:func:`anatomy`)."""
    n, rep = int(row["n"]), int(row["replicate"])
    t0 = time.process_time()
    r = refit_unit(run, n, rep)
    sc, truth = r["scenario"], r["scenario"].truth
    ll_truth = float(r["truth"]["truth_objective"])
    checks = {"voronoi": (r["losses"]["voronoi"], float(row["voronoi"])),
              "fit_objective": (float(r["truth"]["fit_objective"]), float(row["fit_objective"])),
              "truth_objective": (ll_truth, float(row["truth_objective"]))}
    same = all(np.isclose(a, b, rtol=SAME_RTOL, atol=0.0) for a, b in checks.values())
    fit = anatomy(r["X"], r["Y"], r["fit"], truth, r["var_floor"])
    starts = []
    for s, st in enumerate(r["starts"]):
        one = anatomy(r["X"], r["Y"], st["params"], truth, r["var_floor"])
        starts.append({"start": s, "loglik_minus_truth": st["loglik"] - ll_truth, "D2": one["D2"], "status": st["status"],
                       "n_iter": st["n_iter"], "dominant": one["dominant"]})
    won = int(np.argmax([s["loglik_minus_truth"] for s in starts]))
    return {
        "n": n, "replicate": rep, "unit_replicates": list(r["unit"]), "D2_recorded": float(row["voronoi"]),
        "median_at_n": float(row["median_at_n"]), "ratio_to_median": float(row["ratio"]),
        "refit_vs_recorded": {k: {"refit": a, "recorded": b} for k, (a, b) in checks.items()},
        "same_as_recorded": bool(same),
        "status": r["status"], "loglik_fit_minus_truth": float(r["truth"]["fit_objective"]) - ll_truth,
        "loglik_responsibilities_minus_recorded": fit["loglik"] - float(row["fit_objective"]),
        "starts": starts, "won": won, "var_floor_abs": r["var_floor"] * float(np.var(r["Y"])),
        "D2": fit["D2"], "dominant": fit["dominant"], "mass_gaps": fit["mass_gaps"], "atoms": fit["atoms"],
        "truth": {"beta0": truth.beta0.tolist(), "beta1": truth.beta1.tolist(), "eta": truth.eta.tolist()},
        "cpu_s": round(time.process_time() - t0, 1),
    }


def print_fit(f: dict) -> None:
    """One fit's summary on stdout."""
    print(f"n={f['n']} rep {f['replicate']}: D2 {f['D2']:.4g} (recorded {f['D2_recorded']:.4g}, {f['ratio_to_median']:.3g} x the "
          f"median {f['median_at_n']:.3g}; same as recorded: {f['same_as_recorded']}), loglik - truth "
          f"{f['loglik_fit_minus_truth']:+.2f}, status {f['status']}; starts "
          + ", ".join(f"{s['start']}: {s['loglik_minus_truth']:+.2f} nats D2 {s['D2']:.3g}" for s in f["starts"])
          + f"; won {f['won']}")
    dom = f["dominant"]
    where = f"atom {dom['atom']}" if "atom" in dom else f"cell {dom['cell']}"
    print(f"   dominant: {where} {dom['block']} {dom['value']:.4g} ({100 * dom['share']:.1f} % of D2; the rest {dom['rest']:.3g}); mass gaps "
          + " ".join(f"{g:.3g}" for g in f["mass_gaps"]))
    for a in f["atoms"]:
        terms = " ".join(f"{k} {v:.3g}" for k, v in a["terms"].items())
        print(f"   atom {a['atom']} cell {a['cell']} (size {a['cell_size']}): w {a['weight']:.4g} gate share {a['gate_share']:.3g} "
              f"beta1 {a['beta1'][0]:+.4g} a {a['a'][0]:+.4g} b {a['b']:+.4g} var {a['variance']:.4g} "
              f"({a['variance_over_floor']:.3g} x floor) resp>0.5 {a['n_responsible']} | {terms}")


#: The anatomy of the five largest-ratio fits (docs/guide/catalogue.rst), as a rule fixed before the other
#: fits above 1e3 were refitted: the steep true atom (the truth's largest |beta1|) carried by a cell of three;
#: the largest term of D2 is the gate-slope (beta1) term of one atom of that cell, more than SPIKE_SHARE of D2;
#: that atom's gate is flat (|beta1| below FLAT_FRACTION of the true slope) and it is a spike (the larger
#: responsibility of at most SPIKE_SAMPLES of the samples, a variance below the true atom's); the fit is
#: above the truth's log-likelihood.
SPIKE_SHARE = 0.99
FLAT_FRACTION = 0.5
SPIKE_SAMPLES = 0.05


def classify(fit: dict) -> dict:
    """Which parts of the five fits' anatomy one refitted fit (:func:`report_fit`'s dict) has.

    Returns
    -------
    dict
        ``cell_of_three``, ``gate_slope_term_dominates``, ``flat_gate``, ``spike``, ``above_truth``
        (bools; the three about the dominant atom are False when no atom of the cell dominates),
        ``same_anatomy`` (all of them), and ``steep_cell_size``, ``dominant_atom`` for the others.
    """
    truth = fit["truth"]
    slopes = [float(np.linalg.norm(b)) for b in truth["beta1"]]
    steep = int(np.argmax(slopes))
    atoms = fit["atoms"]
    in_cell = [a for a in atoms if a["cell"] == steep]
    dom = fit["dominant"]
    atom = atoms[dom["atom"]] if "atom" in dom else None
    dominates = bool(atom is not None and atom["cell"] == steep and dom["block"] == "beta1" and dom["share"] > SPIKE_SHARE)
    flat = bool(dominates and float(np.linalg.norm(atom["beta1"])) < FLAT_FRACTION * slopes[steep])
    spike = bool(dominates and atom["n_responsible"] <= SPIKE_SAMPLES * fit["n"] and atom["variance"] < truth["eta"][steep][-1])
    out = {"cell_of_three": len(in_cell) == 3, "gate_slope_term_dominates": dominates, "flat_gate": flat, "spike": spike,
           "above_truth": bool(fit["loglik_fit_minus_truth"] > 0)}
    out["same_anatomy"] = all(out.values())
    return out | {"steep_cell_size": len(in_cell), "dominant_atom": None if atom is None else int(dom["atom"])}


def _anatomy(fits: list[dict], a) -> dict:
    """The ``--above`` report's last fields: :func:`classify` of every fit and how many have the five fits' anatomy."""
    if a.above is None:
        return {}
    each = [classify(f) | {"n": f["n"], "replicate": f["replicate"]} for f in fits]
    return {"anatomy_rule": {"spike_share": SPIKE_SHARE, "flat_fraction": FLAT_FRACTION, "spike_samples": SPIKE_SAMPLES},
            "anatomy": {"same": sum(c["same_anatomy"] for c in each), "of": len(each), "fits": each}}


def _threshold(text: str) -> float:
    """``--above``'s value: a finite number > 0 (argparse reports anything else as bad input, exit 2)."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return v


def _above(group) -> list[str]:
    """The ``--above`` selection (exclusive with ``--top``)."""
    group.add_argument("--above", type=_threshold, default=None,
                       help="refit every fit with D2 above this (ordered as --top's), instead of the --top largest ratios")
    return ["above"]


def _choose(results: pd.DataFrame, a) -> pd.DataFrame:
    return pick_fits(results, a.top) if a.above is None else pick_above(results, a.above)


def _header(results: pd.DataFrame, a) -> dict:
    from studies.tools import recorded_refit as rr

    rule = (f"the {a.top} largest D2 / median D2 at the fit's n of results.csv" if a.above is None else
            f"every fit with D2 > {a.above:g} of results.csv ({int((results['voronoi'] > a.above).sum())} of {len(results)}), "
            "largest D2 / median D2 at the fit's n first")
    chosen_by = {"rule": f"{rule}, chosen before any parameter was looked at"} | ({} if a.above is None else {"above": a.above})
    return chosen_by | {"same_rtol": SAME_RTOL, "D2_per_n": rr.per_n_tail(results)}


def main(argv: list[str] | None = None) -> int:
    from studies.tools import recorded_refit as rr

    return rr.refit_main(
        argv, description=__doc__.splitlines()[0],
        run_help="the recorded gmoe-over4 run folder (results.csv, summary.json)",
        top_help="how many of the largest D2 / median-at-n fits to refit", table="results.csv",
        needs=("results.csv", "summary.json"), choose=_choose, refit=report_fit, show=print_fit, header=_header,
        summary=rr.print_per_n_tail, footer=_anatomy, more_arguments=_above)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # this checkout's moestat
    sys.exit(main())

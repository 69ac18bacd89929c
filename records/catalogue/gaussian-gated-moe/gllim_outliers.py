"""What the largest D-bar fits of a joint-GLLiM run are: each refitted from its recorded streams.

The 40-replicate run of ``gaussian-gated-moe`` has a log-of-mean D-bar slope ruled by a few fits
whose D-bar is many times their size's median (docs/guide/catalogue.rst).  This script refits the
``--top`` largest-D-bar ``(n, replicate)`` of a run folder exactly as the sweep fitted them
(its data and near-truth start from the replicate's own streams,
:func:`moestat.rates.sweep.replicate_streams`; its random starts from the recorded unit's estimator
generator, see :func:`refit`), checks that the refit's D-bar equals the recorded one, and writes the fitted atoms beside the true ones (``pi``, ``c``, ``Gamma``, ``a``,
``b``, ``nu``), with the fit's and the truth's joint log-likelihood on that sample.  Nothing is
tuned: the fits are the recorded ones.

Usage (from the repository root)::

    python records/catalogue/gaussian-gated-moe/gllim_outliers.py records/catalogue/gaussian-gated-moe/gllim \\
        --top 4 --json records/catalogue/gaussian-gated-moe/outliers.json

The command line, the refit loop and the (standard) JSON are :func:`recorded_refit.refit_main`'s.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def _atoms(G, d: int) -> list[dict]:
    """Each atom of a GLLiM measure (one fit, no batch axis) as plain numbers."""
    from moestat.estimators.gllim import split_measure

    logpi, c, Gamma, A, b, nu = (np.asarray(v) for v in split_measure(G, d))
    return [{"pi": float(np.exp(logpi[i])), "c": c[i].tolist(), "Gamma": Gamma[i].reshape(-1).tolist(), "a": A[i].tolist(),
             "b": float(b[i]), "nu": float(nu[i])} for i in range(len(logpi))]


def refit(run: Path, n: int, replicate: int) -> dict:
    """Refit one recorded ``(n, replicate)`` of ``run`` as the sweep did; its atoms and log-likelihoods.

    The replicate's data and near-truth start come from its own streams; its random starts are the
    ``S - 1`` children of the recorded unit's estimator generator at the replicate's position
    (:meth:`moestat.estimators.gllim.GLLiMEM._starts` spawns them replicate after replicate), so the
    refit fits the same ``S`` starts as the recorded batch without refitting the other replicates.
    """
    from moestat.estimators.gllim import random_gllim_start
    from moestat.model.mixing import MixingMeasure
    from moestat.rates import truth_check as tc
    from moestat.rates.sweep import _draw, _holdout, _scenario, compute_losses, recorded_unit
    from studies.tools.recorded_refit import one_thread

    # the run recorded its scenario file by the path of the checkout that ran it: the catalogue's own file
    unit, pos = recorded_unit(run, n, replicate, scenario_dir=Path(__file__).resolve().parents[3] / "moestat" / "rates" / "catalogue_files")
    one = dataclasses.replace(unit, replicates=(replicate,))  # its data and near-truth start streams
    with one_thread():  # the sweep's single-thread arithmetic, hence its numbers
        sc = _scenario(unit.scenario_key)
        holdout = _holdout(unit.scenario_key, unit.holdout)
        X, Y, G0 = _draw(one, sc)
        est = tc.unit_estimator(unit, sc, 2)  # the recorded unit's estimator seed
        S = int(est.n_init)
        rng = est._rng()
        rng.spawn(pos * (S - 1))  # the children of the replicates before this one in the unit
        near = MixingMeasure(G0.beta0[0], G0.beta1[0], G0.eta[0])
        starts = MixingMeasure.stack([near] + [random_gllim_start(X[0], Y[0], near.n_atoms, g) for g in rng.spawn(S - 1)])
        est.fit(X, Y, init=MixingMeasure.stack([starts]))
        fitted = est.params_
        dbar = float(compute_losses(sc, fitted, holdout)["Dbar"][0])
        ll_fit, ll_true = float(sc.loglik(X, Y, fitted)[0]), float(sc.loglik(X, Y)[0])
    d = X.shape[-1]
    one_fit = MixingMeasure(fitted.beta0[0], fitted.beta1[0], fitted.eta[0])
    return {"n": n, "replicate": replicate, "Dbar": dbar, "best_start": int(est.best_start_[0]),
            "loglik_starts_minus_truth": [float(v - ll_true) for v in est.loglik_starts_[0]],
            "n_floored": int(est.n_floored_[0]), "loglik_fit": ll_fit, "loglik_truth": ll_true,
            "fitted": _atoms(one_fit, d), "truth": _atoms(sc.truth, d)}


def pick_fits(extras: pd.DataFrame, top: int) -> pd.DataFrame:
    """The ``top`` largest D-bar of ``extras.csv``, largest first, with ``median_at_n`` (D-bar's median at the row's n)."""
    med = extras.groupby("n")["Dbar"].median()
    return extras.sort_values("Dbar", ascending=False).head(top).assign(median_at_n=lambda t: t["n"].map(med))


def report_fit(run: Path, r: pd.Series) -> dict:
    """Refit one chosen row (:func:`refit`) and compare it with its recorded D-bar."""
    row = refit(run, int(r["n"]), int(r["replicate"]))
    return row | {"Dbar_recorded": float(r["Dbar"]), "same_as_recorded": bool(np.isclose(row["Dbar"], r["Dbar"], rtol=1e-6)),
                  "median_at_n": float(r["median_at_n"])}


def print_fit(row: dict) -> None:
    """One fit's summary on stdout."""
    print(f"n={row['n']} rep {row['replicate']}: Dbar {row['Dbar']:.4g} (recorded {row['Dbar_recorded']:.4g}, "
          f"{row['Dbar'] / row['median_at_n']:.0f} x the median), loglik - truth {row['loglik_fit'] - row['loglik_truth']:+.2f} "
          f"(start {row['best_start']}; starts {', '.join(f'{v:+.1f}' for v in row['loglik_starts_minus_truth'])})")
    for f in sorted(row["fitted"], key=lambda t: t["c"][0]):
        print("   fit  pi {pi:.3f} c {c[0]:+.3f} Gamma {Gamma[0]:.4g} a {a[0]:+.3f} b {b:+.3f} nu {nu:.4g}".format(**f))


def main(argv: list[str] | None = None) -> int:
    from studies.tools import recorded_refit as rr

    return rr.refit_main(
        argv, description=__doc__.splitlines()[0],
        run_help="a joint-GLLiM run folder (results.csv, extras.csv, summary.json)",
        top_help="how many of the largest D-bar fits to refit", table="extras.csv",
        needs=("results.csv", "extras.csv", "summary.json"), choose=lambda extras, a: pick_fits(extras, a.top),
        refit=report_fit, show=print_fit, timed=False)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # this checkout's moestat
    sys.exit(main())

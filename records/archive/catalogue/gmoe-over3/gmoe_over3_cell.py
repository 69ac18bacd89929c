"""What the shared cell of the recorded ``gmoe-over3`` fits looks like: masses, split and blocks per n.

``gmoe-over3`` fits model 1 of Nguyen, Nguyen & Ho (2023) (``k* = 2``) with ``K = 3`` atoms, so one
true atom is carried by a cell of two fitted atoms.  Theorem 2's worst case for such a cell (``rbar(2)
= 4``; restated per block in Han et al. 2024, FuseMoE, Table 2) has the gate slope ``beta1`` and the
expert intercept ``b`` at ``n^{-1/8}``, the expert slope ``a`` and the variance ``nu`` at ``n^{-1/4}``.
That rate is what a *symmetric split* costs: two atoms of comparable mass whose parameters straddle
the true atom, their weighted mean at the parametric rate and their spread at the slow one.  The
recorded run's gate-slope block falls at about -0.46 instead.  This script measures why, on the
recorded fits themselves (nothing tuned, nothing new fitted):

* it refits every replicate of the chosen sample sizes exactly as the sweep fitted them (the unit's
  data and near-truth start from the replicate's own streams, :func:`moestat.rates.sweep._draw`; the
  unit's estimator from its recorded seed, :func:`moestat.rates.truth_check.fit_starts`; the truth
  check of :func:`moestat.rates.truth_check.against_truth`) and checks that the refit's losses equal
  the recorded ``results.csv`` / ``extras.csv`` columns;
* per fit, on the cells and the softmax normalisation of the recorded loss
  (:func:`moestat.data.gaussian_scenarios.block_errors`): the two atoms of the shared cell, their
  mass fraction ``p = min(w_1, w_2) / (w_1 + w_2)``, and per block the decomposition of the
  recorded mass-weighted root mean square error (``multi_<block>``) into its two exact parts,
  ``rms^2 = |mean|^2 + spread^2``, with ``mean = sum_i w_i (theta_i - theta*) / sum_i w_i`` (the cell's
  weighted mean, parametric in every regime) and ``spread = sqrt(p (1 - p)) |theta_1 - theta_2|`` (the
  split, the part Theorem 2's worst case makes slow);
* per n, the medians, and the log-of-mean slope with its 95 % interval
  (:func:`moestat.rates.fit.slope_with_interval`, the catalogue's rule) of every quantity.

Usage (from the repository root; about 3 CPU-minutes for the default six sizes)::

    OMP_NUM_THREADS=1 python records/archive/catalogue/gmoe-over3/gmoe_over3_cell.py \\
        records/archive/catalogue/gmoe-over3/ten_replicates/gaussian-moe \\
        --json records/archive/catalogue/gmoe-over3/ten_replicates/cell.json

and, without a refit, each block's slope on the lower and upper half of a run's sizes::

    python records/archive/catalogue/gmoe-over3/gmoe_over3_cell.py records/archive/catalogue/gmoe-over3/grid20k/gaussian-moe \\
        --range-halves --json records/archive/catalogue/gmoe-over3/grid20k/range_halves.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

#: The blocks of ``eta = (a, b, variance)`` and the gate slope, as ``block_errors`` slices them (d = 1 here).
BLOCK_NAMES = ("beta1", "b", "a", "variance")
#: Theorem 2's worst-case exponents per block for a cell of two atoms (rbar(2) = 4): the spread's.
WORST_CASE = {"beta1": -1 / 8, "b": -1 / 8, "a": -1 / 4, "variance": -1 / 4}


def _blocks(G, d: int) -> dict[str, np.ndarray]:
    """Each block of a fitted measure ``[R, k]`` as ``[R, k, width]``."""
    return {"beta1": G.beta1, "a": G.eta[..., :d], "b": G.eta[..., d:d + 1], "variance": G.eta[..., d + 1:d + 2]}


def cell_anatomy(fitted, truth) -> list[dict]:
    """The shared cell of each fit of ``fitted`` (``[R]``, ``K = k* + 1`` atoms) against ``truth``.

    Cells and normalisation are those of :func:`moestat.data.gaussian_scenarios.block_errors` (expert
    blocks decide the cells; softmax's common shift fixed on the reference cell), so ``rms`` below
    equals the recorded ``multi_<block>`` column.

    Returns
    -------
    list of dict, one per fit
        ``cell`` (the true atom carried by two fitted atoms), ``w`` (their masses ``exp(beta0)``),
        ``cell_mass`` and ``true_mass``, ``p_min``, and per block ``rms``, ``mean``, ``spread``,
        ``separation`` ``|theta_1 - theta_2|`` and each atom's own error ``errors``.
    """
    from moestat.data.gaussian_scenarios import _normalised, gaussian_loss_spec
    from moestat.losses.voronoi_spec import cell_terms_from_spec

    G, T = fitted.numpy(), truth.numpy()
    d, ref = T.dim, T.n_atoms - 1
    cells = cell_terms_from_spec(gaussian_loss_spec("D2", d), G, T)["cells"]
    out = []
    for r in range(G.beta0.shape[0]):
        c = cells[r]
        b0, b1 = G.beta0[r].copy(), G.beta1[r].copy()
        if np.any(c == ref):
            b0, b1 = _normalised(b0, b1, c == ref)
        sizes = np.bincount(c, minlength=T.n_atoms)
        (j,) = np.flatnonzero(sizes == 2)  # K = k* + 1: exactly one cell of two (none empty in this run)
        i1, i2 = np.flatnonzero(c == j)
        w = np.exp(b0[[i1, i2]])
        p = w / w.sum()
        eta = G.eta[r]
        fit_blocks = {"beta1": b1, "a": eta[:, :d], "b": eta[:, d:d + 1], "variance": eta[:, d + 1:d + 2]}
        true_blocks = {"beta1": T.beta1[j], "a": T.eta[j, :d], "b": T.eta[j, d:d + 1], "variance": T.eta[j, d + 1:d + 2]}
        row = {"cell": int(j), "w": w.tolist(), "cell_mass": float(w.sum()), "true_mass": float(np.exp(T.beta0[j])),
               "p_min": float(p.min())}
        for name in BLOCK_NAMES:
            dev = fit_blocks[name][[i1, i2]] - true_blocks[name]  # [2, width]
            mean = (p[:, None] * dev).sum(0)
            rms = float(np.sqrt((p * (dev ** 2).sum(-1)).sum()))
            sep = float(np.linalg.norm(dev[0] - dev[1]))
            row[name] = {"rms": rms, "mean": float(np.linalg.norm(mean)), "spread": float(np.sqrt(p[0] * p[1]) * sep),
                         "separation": sep, "errors": np.linalg.norm(dev, axis=-1).tolist()}
        out.append(row)
    return out


def refit_units(run: Path, sizes: list[int]) -> tuple[list[dict], pd.DataFrame]:
    """Refit every unit of ``run`` at ``sizes`` as the sweep did; per fit, its recorded losses and cell anatomy."""
    from moestat.rates import truth_check as tc
    from moestat.rates.config import RatesConfig
    from moestat.rates.resolve import Experiment
    from moestat.rates.sweep import _draw, _holdout, _scenario, compute_losses, make_units
    from studies.tools.recorded_refit import one_thread

    summary = json.loads((run / "summary.json").read_text())
    cfg = RatesConfig.from_dict({k: v for k, v in summary["config"].items() if k != "n_jobs"})
    res = pd.read_csv(run / "results.csv").merge(pd.read_csv(run / "extras.csv"), on=["router", "n", "replicate"])
    units = [u for u in make_units(Experiment.of(cfg)) if u.n in sizes]
    rows, checks = [], []
    with one_thread():  # the sweep's single-thread arithmetic, hence its numbers
        for unit in units:
            sc = _scenario(unit.scenario_key)
            holdout = _holdout(unit.scenario_key, unit.holdout)
            X, Y, G0 = _draw(unit, sc)
            est = tc.fit_starts(unit, sc, X, Y, G0, 2)  # the unit's reported fit, its recorded estimator seed
            state = tc.against_truth(unit, sc, X, Y, est)
            losses = compute_losses(sc, state["params"], holdout)
            for i, (rep, cell) in enumerate(zip(unit.replicates, cell_anatomy(state["params"], sc.truth))):
                rec = res[(res.n == unit.n) & (res.replicate == rep)].iloc[0]
                for col in ("voronoi", "param_multi", "mass", "multi_beta1", "multi_b", "multi_a", "multi_variance"):
                    checks.append({"n": unit.n, "replicate": rep, "column": col, "refit": float(losses[col][i]),
                                   "recorded": float(rec[col])})
                for name in BLOCK_NAMES:  # the anatomy's rms is the recorded block column, by construction
                    checks.append({"n": unit.n, "replicate": rep, "column": f"anatomy rms {name}",
                                   "refit": cell[name]["rms"], "recorded": float(rec[f"multi_{name}"])})
                rows.append({"n": unit.n, "replicate": rep, "status": state["status"][i],
                             "truth_gap": float(state["truth"][i]["truth_gap"]), **cell})
            print(f"n={unit.n} replicates {unit.replicates[0]}..{unit.replicates[-1]} refitted", flush=True)
    return rows, pd.DataFrame(checks)


def summarise(rows: list[dict]) -> dict:
    """Per n medians and the log-of-mean slope (95 % interval) of every quantity of the cell."""
    from moestat.rates.fit import slope_with_interval

    ns = sorted({r["n"] for r in rows})
    by_n = {n: [r for r in rows if r["n"] == n] for n in ns}
    quantities = {"p_min": lambda r: r["p_min"],
                  "cell_mass_error": lambda r: abs(r["cell_mass"] - r["true_mass"])}
    for name in BLOCK_NAMES:
        for part in ("rms", "mean", "spread", "separation"):
            quantities[f"{name} {part}"] = (lambda r, name=name, part=part: r[name][part])
    rng = np.random.default_rng(np.random.SeedSequence(20261126))
    out = {}
    for q, get in quantities.items():
        values = [np.array([get(r) for r in by_n[n]]) for n in ns]
        s = slope_with_interval(ns, values, rng)
        out[q] = {"median_per_n": {str(n): float(np.median(v)) for n, v in zip(ns, values)},
                  "mean_per_n": {str(n): float(np.mean(v)) for n, v in zip(ns, values)},
                  "slope": round(s["slope"], 4), "ci": [round(s["ci_low"], 4), round(s["ci_high"], 4)]}
    # share of the block's squared rms that is spread (the split), per n: median over replicates
    for name in BLOCK_NAMES:
        out[f"{name} spread share"] = {"median_per_n": {str(n): float(np.median([r[name]["spread"] ** 2 / r[name]["rms"] ** 2
                                                                                    for r in by_n[n]])) for n in ns}}
    out["shared cell"] = {str(n): sorted({r["cell"] for r in by_n[n]}) for n in ns}
    return out


def range_halves(run: Path) -> dict:
    """Each block's log-of-mean slope (95 % interval) on the lower and the upper half of ``run``'s sizes.

    No refit: the recorded ``extras.csv`` columns (:func:`studies.tools.range_halves.range_halves`).
    Where the cell's mean part (parametric) gives way to its spread as n grows (:func:`cell_anatomy`),
    the slope flattens from the lower half to the upper one; the two halves share their middle size.
    """
    from studies.tools.range_halves import range_halves as halves

    return halves(run, ("param_multi", "multi_beta1", "multi_b", "multi_a", "multi_variance"))


def main(argv: list[str] | None = None) -> int:
    from moestat.cli.common import ArgumentParser
    from studies.tools import recorded_refit as rr

    ap = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("run", type=Path, help="the recorded gmoe-over3 run folder (results.csv, extras.csv, summary.json)")
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="sample sizes to refit (default: every other recorded size, 200 .. 20 000: six of eleven)")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--range-halves", action="store_true",
                    help="no refit: each block's slope on the lower and upper half of the run's sizes (extras.csv)")
    a = ap.parse_args(argv)
    needs = ("results.csv", "extras.csv") + (() if a.range_halves else ("summary.json",))
    missing = [f for f in needs if not (a.run / f).is_file()]
    if missing:
        ap.error(f"{a.run}: not a run folder ({', '.join(needs)} needed; missing {', '.join(missing)})")
    if not a.json.parent.is_dir():
        ap.error(f"--json {a.json}: no folder {a.json.parent}")
    if a.range_halves:
        from studies.tools.range_halves import print_report

        report = range_halves(a.run)
        rr.write_json(a.json, report)
        print_report(report)
        return 0
    recorded = sorted(pd.read_csv(a.run / "results.csv")["n"].unique())
    sizes = a.sizes or [int(n) for n in recorded[::2]]
    if any(n not in recorded for n in sizes):
        print(f"--sizes: {sorted(set(sizes) - set(recorded))} not in the recorded run ({recorded})", file=sys.stderr)
        return 2
    t0, c0 = time.perf_counter(), time.process_time()
    rows, checks = refit_units(a.run, sizes)
    rel = (checks.refit - checks.recorded).abs() / checks.recorded.abs()
    report = {
        "run": str(a.run), "sizes": sizes, "fits": len(rows),
        "worst_case_spread_exponents": WORST_CASE,
        "refit_equals_recorded": {"max_relative_difference": float(rel.max()), "columns": sorted(checks.column.unique())},
        "summary": summarise(rows),
        "cpu_s": round(time.process_time() - c0, 1), "wall_s": round(time.perf_counter() - t0, 1),
        "fits_detail": rows,
    }
    rr.write_json(a.json, report)
    s = report["summary"]
    print(f"refit vs recorded: max relative difference {rel.max():.2e} over {len(checks)} values")
    print(f"{'quantity':26s} {'slope':>7s}  95% CI            medians per n")
    for q, v in s.items():
        if "slope" in v:
            med = " ".join(f"{m:.3g}" for m in v["median_per_n"].values())
            print(f"{q:26s} {v['slope']:+7.3f}  [{v['ci'][0]:+.3f}, {v['ci'][1]:+.3f}]  {med}")
    for name in BLOCK_NAMES:
        print(f"{name} spread share (median): " + " ".join(f"{m:.2f}" for m in s[f'{name} spread share']['median_per_n'].values()))
    print(f"cpu {report['cpu_s']} s, wall {report['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # this checkout's moestat
    sys.exit(main())

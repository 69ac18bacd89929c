"""A recorded run's slopes on the lower and the upper half of its sample sizes: does the rate drift?

A log-log slope fitted over a whole grid is one number; a loss whose decline is still steepening or
flattening across the grid (a pre-asymptotic regime giving way to the asymptotic one) shows it as a
difference between the slopes of the grid's lower and upper halves.  This script fits both halves of
a recorded run, without refitting a model: the recorded ``results.csv`` (and ``extras.csv`` where
the run has one), the catalogue's slope-with-interval (:func:`moestat.rates.fit.slope_with_interval`:
the envelope of the OLS t-interval and the replicate bootstrap) of the per-``n`` mean or median.
The halves share their middle size, so two halves of an odd number of sizes have equal length.

It is a diagnostic, labelled as such where it is quoted: it judges nothing, and two overlapping
intervals show no significant drift.

Usage (from the repository root; seconds)::

    python studies/tools/range_halves.py records/archive/catalogue/gmoe-over4/grid20k/gaussian-moe \\
        --columns voronoi param_single mass --statistic median --n-min 317 \\
        --json records/archive/catalogue/gmoe-over4/grid20k/range_halves.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd


class RunError(ValueError):
    """The run folder cannot answer the request (a column it lacks, too few sizes): the command line's one-line
    error, as distinct from a failure inside the fit, which keeps its traceback."""


def range_halves(run: Path, columns: tuple[str, ...], statistic: str = "mean", n_min: int = 0,
                 whole: bool = False) -> dict:
    """Each column's slope (95 % interval) on the lower and the upper half of ``run``'s sizes ``>= n_min``.

    Parameters
    ----------
    run : Path
        A recorded run folder (``results.csv``; ``extras.csv`` merged on ``router, n, replicate`` when present).
    columns : tuple of str
        Loss columns.
    statistic : {"mean", "median"}
        What is fitted per sample size (:func:`moestat.rates.fit.slope_with_interval`).
    n_min : int
        Smallest size used (the catalogue's window starts at the truth's pre-flight ``n_ok``).
    whole : bool
        Also each column's slope over every size ``>= n_min`` (``"whole"``; its own bootstrap stream).

    Returns
    -------
    dict
        ``run``, ``replicates`` (the fewest at any size), ``statistic``, ``halves`` (the sizes of each
        half; ``whole``: every size used, with ``whole=True``) and per column ``{"lower": {"slope", "ci"},
        "upper": {...}}`` (and ``"whole"``).
    """
    from moestat.rates.fit import slope_with_interval

    rows = pd.read_csv(run / "results.csv")
    if (run / "extras.csv").is_file():
        rows = rows.merge(pd.read_csv(run / "extras.csv"), on=["router", "n", "replicate"])
    missing = [c for c in columns if c not in rows]
    if missing:
        raise RunError(f"{run}: no column {', '.join(missing)}")
    ns = sorted(int(n) for n in rows["n"].unique() if n >= n_min)
    if len(ns) < 5:
        raise RunError(f"{run}: {len(ns)} sizes at or above {n_min}; two halves of 3 need at least 5")
    mid = len(ns) // 2
    halves = {"lower": ns[:mid + 1], "upper": ns[mid:]}

    def fit(sizes: list[int], col: str, rng: np.random.Generator) -> dict:
        s = slope_with_interval(sizes, [rows.loc[rows.n == n, col].to_numpy() for n in sizes], rng, statistic=statistic)
        return {"slope": round(s["slope"], 4), "ci": [round(s["ci_low"], 4), round(s["ci_high"], 4)]}

    rng = np.random.default_rng(np.random.SeedSequence(20261126))
    out = {"run": str(run), "replicates": int(rows[rows.n >= n_min].groupby("n").size().min()),
           "statistic": statistic, "halves": halves}
    for col in columns:
        out[col] = {name: fit(part, col, rng) for name, part in halves.items()}
    if whole:
        # its own bootstrap stream, so the halves' numbers are those of a report without it
        rng = np.random.default_rng(np.random.SeedSequence(20261203))
        out["whole"] = ns
        for col in columns:
            out[col]["whole"] = fit(ns, col, rng)
    return out


def print_report(report: dict) -> None:
    for col, v in report.items():
        if col != "halves" and isinstance(v, dict):
            print(f"{col:15s} " + "  ".join(f"{h} {v[h]['slope']:+.3f} [{v[h]['ci'][0]:+.3f}, {v[h]['ci'][1]:+.3f}]"
                                               for h in ("lower", "upper", "whole") if h in v))


def main(argv: list[str] | None = None) -> int:
    from moestat.cli.common import ArgumentParser
    from studies.tools import recorded_refit as rr

    ap = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("run", type=Path, help="a recorded run folder (results.csv; extras.csv if the run has one)")
    ap.add_argument("--columns", nargs="+", required=True, help="loss columns of results.csv / extras.csv")
    ap.add_argument("--statistic", choices=("mean", "median"), default="mean", help="fitted per size (default mean)")
    ap.add_argument("--n-min", type=int, default=0, help="smallest size used (default: every size)")
    ap.add_argument("--whole", action="store_true", help="also the slope over every size used")
    ap.add_argument("--json", type=Path, required=True)
    a = ap.parse_args(argv)
    if not (a.run / "results.csv").is_file():
        ap.error(f"{a.run}: not a run folder (no results.csv)")
    if not a.json.parent.is_dir():
        ap.error(f"--json {a.json}: no folder {a.json.parent}")
    try:
        report = range_halves(a.run, tuple(a.columns), a.statistic, a.n_min, whole=a.whole)
    except RunError as err:
        ap.error(str(err))
    rr.write_json(a.json, report)
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's moestat
    sys.exit(main())

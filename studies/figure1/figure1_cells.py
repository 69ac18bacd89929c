"""Record, per fitted atom, the radial and directional beta1 errors of a recorded over-specified rate run.

Records: records/figure1/cells_fig1b40w_seed0.json and cells_fig1b40wv_seed0.json (current),
records/archive/figure1/cells_over_seed0.json (superseded).

Figure 1(b) of Nguyen et al. (2024) needs the decomposition of the ``beta1`` error **per Voronoi
cell**: the rates engine's ``extras.csv`` keeps only the largest error over the fitted atoms, and
in the over-specified fit (``k = k* + 1``) that largest error belongs to the two atoms sharing a
cell, which no theorem gives a rate for under the vanilla router (Theorem 3 is a lower bound) and
which run off radially under the perturbed router (``docs/guide/theory.rst``, "Figure 1(b)").  The
atoms alone in their cell are the ones PDE (4) speaks about: their radius is not identified under
the vanilla router, their direction is.

This script refits every fit of a finished rate run (every router it ran, or ``--routers``),
exactly as the sweep fitted it -- the sweep's own data streams, starts and estimator seeds, one thread
(:func:`moestat.theorems.checks.vanilla_slow.refit_unit_cells`, the code behind ``thm3``'s rule
(c')) -- and writes one row per fit with the per-atom errors
(:func:`moestat.losses.cell_errors.beta1_decomposition`), the size of each atom's own cell and its
mass ``exp(beta0_i)``.  It also compares the refit's largest radial and directional errors with
the run's recorded ``extras.csv``: the refit must repeat the recorded fit (relative 1e-6, the CSV's
decimal round trip), otherwise the script says so and exits 1 without writing.

Recorded (about 5 CPU-minutes; the preset ``fig1b``, seed 0, both routers, 12 replicates,
n = 1000 .. 32000; panel (b2)'s vanilla curves until ``fig1b40wv`` replaced them)::

    OMP_NUM_THREADS=1 PYTHONPATH=. python studies/figure1/figure1_cells.py \\
        --run records/archive/figure1/fig1b/seed0 --json records/archive/figure1/cells_over_seed0.json

and (the preset ``fig1b40w``, default seed 0, perturbed router only, 40 replicates, n = 4000 ..
65000; panel (b2)'s perturbed curves; the run's seconds are in the JSON)::

    OMP_NUM_THREADS=1 PYTHONPATH=. python studies/figure1/figure1_cells.py \\
        --run records/archive/figure1/fig1b40w/seed0 --json records/figure1/cells_fig1b40w_seed0.json

and (the preset ``fig1b40wv``: the vanilla router at ``fig1b40w``'s design, default seed 0; panel
(b2)'s vanilla curves)::

    OMP_NUM_THREADS=1 PYTHONPATH=. python studies/figure1/figure1_cells.py \\
        --run records/figure1/fig1b40wv/seed0 --json records/figure1/cells_fig1b40wv_seed0.json
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from moestat.cli.common import ArgumentParser
from moestat.io import atomic_write_json

#: Relative agreement required between the refit and the recorded ``extras.csv`` (decimal round trip).
REFIT_RTOL = 1e-6


def refit_rows(run: Path, routers: tuple[str, ...], ns: list[int] | None) -> list[dict]:
    """Refit the fits of rate run ``run`` for ``routers`` (all sample sizes, or ``ns``).

    Returns one dict per fit: ``router``, ``n``, ``replicate``, ``radial``, ``direction``,
    ``cell_size``, ``mass`` (lists of length ``k``, one entry per fitted atom).
    """
    from moestat.theorems.checks.vanilla_slow import refit_unit_cells
    from moestat.rates import RatesConfig
    from moestat.rates.sweep import make_units

    summ = json.loads((run / "summary.json").read_text())
    cfg = RatesConfig.from_dict({k: v for k, v in summ["config"].items() if k != "n_jobs"})
    rows = []
    for u in make_units(cfg):
        if u.router not in routers or (ns is not None and int(u.n) not in ns):
            continue
        t0 = time.perf_counter()
        for r in refit_unit_cells(u):
            rows.append({"router": u.router, **r})
        print(f"  {u.router} n={u.n} replicates {list(u.replicates)}: {time.perf_counter() - t0:.1f} s", flush=True)
    return rows


def check_against_record(rows: list[dict], extras_csv: Path) -> list[str]:
    """Compare each refit's largest radial and directional error with ``extras.csv``; the mismatches."""
    import pandas as pd

    ex = pd.read_csv(extras_csv).set_index(["router", "n", "replicate"])
    bad = []
    for r in rows:
        key = (r["router"], r["n"], r["replicate"])
        for col, mine in (("beta1_radial", max(r["radial"])), ("beta1_direction", max(r["direction"]))):
            rec = float(ex.loc[key, col])
            if not np.isclose(mine, rec, rtol=REFIT_RTOL, atol=0.0):
                bad.append(f"{key} {col}: refit {mine!r} recorded {rec!r}")
    return bad


def main(argv=None) -> int:
    p = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    p.add_argument("--run", type=Path, required=True, help="a finished rates run folder with --cell-errors extras")
    p.add_argument("--json", type=Path, required=True, help="where to write the per-atom records")
    p.add_argument("--routers", nargs="+", default=["cosine", "perturbed"], choices=["cosine", "perturbed"])
    p.add_argument("--ns", type=int, nargs="+", default=None, help="only these sample sizes (default: all)")
    args = p.parse_args(argv)
    for f in ("summary.json", "extras.csv"):
        if not (args.run / f).is_file():
            p.error(f"--run {args.run}: {f} is missing (a rates run with --cell-errors is needed)")
    if not args.json.parent.is_dir():  # refused before the refits, not after them
        p.error(f"--json {args.json}: no folder {args.json.parent}")
    t0 = time.perf_counter()
    rows = refit_rows(args.run, tuple(args.routers), args.ns)
    if not rows:
        p.error("no fit matches --routers/--ns in that run")
    bad = check_against_record(rows, args.run / "extras.csv")
    if bad:
        print("figure1_cells: the refit does not repeat the recorded fits:\n  " + "\n  ".join(bad[:10]), file=sys.stderr)
        return 1
    atomic_write_json(args.json, {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
        "python": platform.python_version(), "run": args.run.as_posix(), "refit_matches_recorded": f"{len(rows)}/{len(rows)}",
        "seconds": round(time.perf_counter() - t0, 1), "rows": rows})
    print(f"wrote {args.json}: {len(rows)} fits, refit = recorded in all, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

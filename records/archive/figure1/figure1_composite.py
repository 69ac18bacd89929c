"""Figure 1 of Nguyen et al. (2024), both panels, as one 2 x 3 figure drawn from the recorded runs.

Rows: (a) exact-specified fit, ``k = k*`` (Theorems 2 and 6); (b) over-specified fit,
``k = k* + 1`` (Theorems 3 and 5).  The default scenario throughout (``make_scenario(router,
setting)``: d = 4, k* = 3, dense gate, GELU experts, nu = 0.01, tau = 0.5 for the perturbed router,
least squares started near the truth with noise 0.05).  Columns:

1. **fixed truth**: the paper's Voronoi loss of the least-squares fit, both routers, mean per n with
   a 95% bootstrap interval of the mean (replicates resampled), the log-of-mean slope with its 95%
   interval (:func:`moestat.rates.fit.slope_with_interval`, the engine's) drawn as a line, and the
   theorem's exponent where the paper states one.  (a): ``D_3`` (eq. 16), which is ``D_{1,1}`` in the
   exact setting, from the preset ``fig1a1e6`` seed 0 (``records/figure1/fig1a1e6/seed0``,
   20 replicates, n = 2000 .. 1 024 000; its first seven sizes are the ``cosine-exact`` catalogue
   record's fits), with the run's own slope and category, and for the vanilla router, judged by the
   slow-rate rule's curvature, the local slopes at both ends instead of a line; (b): the perturbed router's ``D_2`` (eq. 13), single-atom and
   shared-cell errors (Theorem 5 (i), ``param_single`` / ``param_multi``) of the preset ``fig1b124w``
   (``records/figure1/fig1b124w/seed{0,1,2}``: seed 0 the default, 1 and 2 the extra
   seeds; 124 replicates each, n = 4000 .. 65000, 6 sizes: ``fig1b40w`` with the replicates its plans
   ask for, replicates 0-39 being ``fig1b40w``'s data and starts), one curve per seed, with the slope,
   interval and category each run's ``summary.json`` records (the engine's; nothing refitted or
   recomputed); the vanilla router's ``D_2`` the same way from the preset ``fig1b40wv``
   (``records/figure1/fig1b40wv/seed{0,1,2}``: fig1b40w's design with the vanilla router,
   seed s drawing the same data and starts as fig1b40w's seed s, 40 replicates: the vanilla curves were
   not run at 124, whose cost on 2 cores is several hours), so that both routers of panel (b) share
   one grid, data streams and starts; and, in grey, the perturbed router's recorded sweep to n = 1e6
   (``records/over_1e6/reps10``, 10 replicates), the one curve of another design.
2. **mechanism**: the ``beta1`` error split into its radial part ``| ||b|| - ||b*|| |`` (not identified
   under the vanilla router, PDE (4)) and its directional part ``|| b/||b|| - b*/||b*|| ||``
   (:func:`moestat.losses.cell_errors.beta1_decomposition`), both routers.  (a): the paired start/fit
   record of ``studies/two_point/two_point.py`` (``two_point.json``, ``mechanism``: 20 replicates,
   n = 1e3 .. 1e5; largest over the atoms with a direction), with the start's radial error;
   (b): per Voronoi cell, from ``studies/figure1/figure1_cells.py`` (fits refitted per atom from
   the sweep's own streams, the refit checked against the recorded ``extras.csv``): atoms alone in
   their cell, and the two atoms sharing a cell.  Both routers from the default seed 0 of (b1)'s
   design (40 replicates, n = 4000 .. 65000): the perturbed router from ``fig1b40w``
   (``cells_fig1b40w_seed0.json``), the vanilla router from ``fig1b40wv``
   (``cells_fig1b40wv_seed0.json``), paired fit by fit (same data and starts).
3. **two-point (Le Cam) lower bounds** on the minimax risk (:mod:`moestat.theorems.judges.two_point`):
   (a) the radial witness of App. B.2 (``two_point.json``, m = 1e5 Monte Carlo inputs), (b) the
   split witness of App. B.3 (``figure1.json``, m = 5e4); the band is ``kappa +- 2 SE`` of the
   Monte Carlo KL rate (zero for the vanilla router: KL = 0 exactly by PDE (4)).

Nothing is refitted here: the script reads the records, computes intervals and slopes, writes
``figure1_composite.json`` (every plotted number) and ``figure1_composite.png``/``.pdf``
(``--figure-only`` redraws from the JSON).  About 20 s::

    OMP_NUM_THREADS=1 PYTHONPATH=. python records/archive/figure1/figure1_composite.py --figure-only

Superseded (issues 58 and 60): ``studies/figure1/figure1_paired.py`` draws Figure 1 with both routers on
the same draws and, in its column 4, this figure's mechanism column (the same numbers, moved with the
functions that compute them); this script and its outputs were moved here unchanged but for their paths.
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

ROOT = Path(__file__).resolve().parents[3]  # records/archive/figure1/ -> the repository root
ROUTERS = ("cosine", "perturbed")
NAME = {"cosine": "vanilla", "perturbed": "perturbed"}

#: The recorded inputs, relative to the repository root (see the module docstring).
SOURCES = {
    # (a1): Figure 1(a)'s design continued to 1 024 000 (its first seven sizes are the cosine-exact record's fits)
    "exact_fits": "records/figure1/fig1a1e6/seed0",
    "exact_mechanism_and_bounds": "records/two_point/two_point.json",
    # panel (b1): one grid (fig1b40w's sizes, starts and data streams), the perturbed router from fig1b124w
    # (124 replicates), the vanilla from fig1b40wv (40: replicates 0-39 are the same data and starts)
    "over_fits_fig1b124w": ["records/figure1/fig1b124w/seed0", "records/figure1/fig1b124w/seed1",
                            "records/figure1/fig1b124w/seed2"],
    "over_fits_fig1b40wv": ["records/figure1/fig1b40wv/seed0", "records/figure1/fig1b40wv/seed1",
                            "records/figure1/fig1b40wv/seed2"],
    "over_fits_1e6": "records/over_1e6/reps10",
    # (b2): each router's cells from its seed-0 run of that design
    "over_cells_fig1b40wv": "records/figure1/cells_fig1b40wv_seed0.json",
    "over_cells_fig1b40w": "records/figure1/cells_fig1b40w_seed0.json",
    "over_bounds": "records/figure1/figure1.json",
}

#: The exponents the paper states (Nguyen et al. 2024), up to their log factor ((log n / n)^{1/2}).
#: The vanilla router has none: Theorems 2 and 3 say "slower than any polynomial rate".
PAPER_EXPONENT = {"D3": (-0.5, "Thm 6"), "D2": (-0.5, "Thm 5"), "single": (-0.5, "Thm 5 (i)"),
                  "shared": (-0.25, "Thm 5 (i)"), "beta1_exact": (-0.5, "Thm 6")}

#: Panel (b2): which cells record each router's curves come from (:data:`SOURCES` keys).
CELLS_SOURCE = {"cosine": "over_cells_fig1b40wv", "perturbed": "over_cells_fig1b40w"}

#: Panel (b2)'s per-cell parts (:func:`cell_parts`), the first three in their original stream order.
CELL_PARTS = ("radial_single", "direction_single", "radial_shared", "direction_shared")

#: Panel (b1)'s perturbed losses from fig1b124w: (column, short name, :data:`PAPER_EXPONENT` key, marker).
OVER_LOSSES = (("voronoi", "$D_2$", "D2", "o"), ("param_single", "single-atom cells", "single", "s"),
               ("param_multi", "shared cells", "shared", "^"))


# ----------------------------------------------------------------------------------------- data


def replicate_values(folders: list[Path], router: str, column: str) -> dict[int, np.ndarray]:
    """Per sample size, the replicates of ``column`` for ``router``, pooled over rate-run ``folders``.

    Reads each folder's ``results.csv`` (left-joined with ``extras.csv`` when present, as the engine
    does) and keeps every replicate, converged or not (the engine's slopes do the same).  Pooling
    folders is meant for runs of one configuration with different ``seed`` (independent streams).

    Returns
    -------
    dict of int to numpy.ndarray, shape (R_n,)
        Sorted by ``n``; ``R_n`` is the replicate count at ``n`` summed over the folders.
    """
    import pandas as pd

    from moestat.rates.extras import merge_extras

    out: dict[int, list[np.ndarray]] = {}
    for folder in folders:
        df = merge_extras(pd.read_csv(folder / "results.csv"), folder / "extras.csv")
        sub = df[df["router"] == router]
        if column not in sub:
            raise KeyError(f"{folder}: no column {column!r}")
        for n, g in sub.groupby("n"):
            out.setdefault(int(n), []).append(g[column].to_numpy(float))
    return {n: np.concatenate(out[n]) for n in sorted(out)}


def interval_of_mean(values: np.ndarray, rng: np.random.Generator, n_boot: int = 2000) -> tuple[float, float, float]:
    """Mean of ``values`` (shape (R,)) and the 95% percentile-bootstrap interval of the mean."""
    v = np.asarray(values, float)
    boots = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return float(v.mean()), float(lo), float(hi)


def series(by_n: dict[int, np.ndarray], rng: np.random.Generator, n_boot: int = 1000) -> dict:
    """Per-n summaries of a curve and its log-of-mean slope with the engine's 95% interval.

    ``by_n`` maps each sample size to its replicates (positive losses).  Returns ``n``, ``mean``,
    ``ci_low``/``ci_high`` (bootstrap of the mean), ``median``, ``q25``/``q75``, ``count`` (lists, one
    per n) and ``slope`` (``slope``, ``ci_low``, ``ci_high``, ``intercept`` of the log-mean OLS).
    """
    from moestat.rates.fit import slope_with_interval

    ns = sorted(by_n)
    rec = {"n": ns, "mean": [], "ci_low": [], "ci_high": [], "median": [], "q25": [], "q75": [], "count": []}
    for n in ns:
        v = np.asarray(by_n[n], float)
        m, lo, hi = interval_of_mean(v, rng)
        q25, med, q75 = np.percentile(v, [25, 50, 75])
        for k, x in (("mean", m), ("ci_low", lo), ("ci_high", hi), ("median", med), ("q25", q25), ("q75", q75),
                     ("count", int(len(v)))):
            rec[k].append(x if k == "count" else float(x))
    s = slope_with_interval(ns, [by_n[n] for n in ns], rng, n_boot)
    rec["slope"] = {"slope": float(s["slope"]), "ci_low": float(s["ci_low"]), "ci_high": float(s["ci_high"]),
                    "intercept": float(s["log_mean"]["intercept"])}
    return rec


def cell_parts(radial, direction, cell_size) -> dict[str, float]:
    """One fit's largest radial and directional ``beta1`` errors, over atoms alone in their Voronoi
    cell (``*_single``) and over atoms sharing a cell (``*_shared``).

    Parameters
    ----------
    radial, direction : array_like, shape (k,)
        Per fitted atom: ``| ||b_i|| - ||b*_j|| |`` and ``|| u_i - u*_j ||`` (``u = b / ||b||``).
    cell_size : array_like of int, shape (k,)
        The size of each atom's own Voronoi cell (eq. 5).

    Returns
    -------
    dict of str to float
        ``radial_single``, ``direction_single``, ``radial_shared``, ``direction_shared``; NaN where
        the fit has no atom of that kind.
    """
    radial, direction, size = np.asarray(radial, float), np.asarray(direction, float), np.asarray(cell_size)
    out = {}
    for kind, mask in (("single", size == 1), ("shared", size > 1)):
        out[f"radial_{kind}"] = float(radial[mask].max()) if mask.any() else float("nan")
        out[f"direction_{kind}"] = float(direction[mask].max()) if mask.any() else float("nan")
    return out


def cells_by_n(rows: list[dict], router: str, part: str) -> dict[int, np.ndarray]:
    """:func:`cell_parts`'s ``part`` per sample size for ``router`` from ``figure1_cells.py`` rows
    (fits without an atom of that kind are left out)."""
    out: dict[int, list[float]] = {}
    for r in rows:
        if r["router"] != router:
            continue
        v = cell_parts(r["radial"], r["direction"], r["cell_size"])[part]
        if np.isfinite(v):
            out.setdefault(int(r["n"]), []).append(v)
    return {n: np.asarray(out[n]) for n in sorted(out)}


def runoff_by_n(rows: list[dict], router: str) -> dict:
    """Per sample size, the shared cell's atom with the largest radial error in each fit of
    ``router`` (``figure1_cells.py`` rows): the median of its radial error and of its mass
    ``exp(beta0_i)`` over the fits that have a shared cell.

    Theorem 5 (i) bounds a shared cell's atoms only weighted by their masses (D2, eq. 13), so the
    radius of an atom whose mass falls is not bounded: this is the measured reason why (b2)'s
    shared-cell radial error stays flat while (b1)'s mass-weighted shared-cell error falls.

    Returns
    -------
    dict
        ``n``, ``fits``, ``median_radial``, ``median_mass`` (lists, one per n).
    """
    by: dict[int, list[tuple[float, float]]] = {}
    for r in rows:
        if r["router"] != router:
            continue
        radial, size, mass = np.asarray(r["radial"], float), np.asarray(r["cell_size"]), np.asarray(r["mass"], float)
        if not (size > 1).any():
            continue
        i = int(np.argmax(np.where(size > 1, radial, -np.inf)))
        by.setdefault(int(r["n"]), []).append((radial[i], mass[i]))
    ns = sorted(by)
    return {"n": ns, "fits": [len(by[n]) for n in ns],
            "median_radial": [float(np.median([a for a, _ in by[n]])) for n in ns],
            "median_mass": [float(np.median([m for _, m in by[n]])) for n in ns]}


def mechanism_by_n(mech: dict, router: str, key: str) -> dict[int, np.ndarray]:
    """``two_point.json``'s ``mechanism`` per-replicate lists (``[S][R]``) as ``{n: values}``."""
    return {int(n): np.asarray(v, float) for n, v in zip(mech["ns"], mech["routers"][router]["per_replicate"][key])}


def recorded_slope(folder: Path, router: str, loss: str) -> dict:
    """The engine's slope of ``loss`` for ``router`` as the run's ``summary.json`` records it:
    ``slope``, ``ci_low``, ``ci_high``, ``intercept`` (of the log-of-mean OLS), ``predicted``,
    ``category``, ``reason`` and the two halves' categories (even / odd replicates)."""
    summ = json.loads((folder / "summary.json").read_text())
    f = next((f for f in summ["fits"] if f["router"] == router and f["loss"] == loss), None)
    if f is None:
        raise KeyError(f"{folder}: no {router} fit of {loss!r} in summary.json")
    return {"slope": float(f["slope"]), "ci_low": float(f["ci_low"]), "ci_high": float(f["ci_high"]),
            "intercept": float(f["log_mean"]["intercept"]), "predicted": f.get("predicted"),
            "category": f.get("category"), "reason": f.get("reason"),
            "halves": [h.get("category") for h in f.get("halves") or []]}


def recorded_curvature(folder: Path, router: str, loss: str) -> dict | None:
    """The slow-rate rule's curvature of ``loss`` as the run's ``summary.json`` records it
    (:mod:`moestat.rates.stability`: the local slopes at the first and the last size, the curvature's
    99% interval, whether it is significant), or ``None`` where the run recorded none."""
    summ = json.loads((folder / "summary.json").read_text())
    f = next((f for f in summ["fits"] if f["router"] == router and f["loss"] == loss), None)
    c = (f or {}).get("curvature")
    if not c:
        return None
    return {"slope_start": float(c["slope_start"]), "slope_end": float(c["slope_end"]), "c_ci": [float(x) for x in c["c_ci"]],
            "significant": bool(c["significant"]), "n": [int(f["window"][0]), int(f["window"][1])]}


def seed_series(folder: Path, router: str, column: str, rng: np.random.Generator) -> dict:
    """:func:`series` of one run folder (one seed), its slope replaced by the run's own record
    (:func:`recorded_slope`): the curve's per-n intervals are computed here, the slope, its interval
    and its category are the engine's.  ``slope["own_ols"]`` keeps the slope recomputed from the rows
    (equal to the recorded one: the log-of-mean OLS is deterministic; a test checks it)."""
    rec = series(replicate_values([folder], router, column), rng)
    own = rec["slope"]["slope"]
    rec["slope"] = {**recorded_slope(folder, router, column), "own_ols": own}
    rec["seed"] = int(json.loads((folder / "summary.json").read_text())["config"]["seed"])
    return rec


def cells_design(cells: dict, root: Path, router: str) -> dict:
    """Where a ``figure1_cells.py`` record's ``router`` rows come from, as (b2) labels them.

    Returns ``preset`` (the run folder's parent, e.g. ``fig1b40w``), ``seed`` (the run's
    ``summary.json``), ``run``, ``n`` (the sample sizes of the rows), ``replicates`` (fits per n, the
    smallest and largest count) and ``refit_matches_recorded`` (the record's, over all its rows).
    """
    run = Path(cells["run"])
    rows = [r for r in cells["rows"] if r["router"] == router]
    if not rows:
        raise KeyError(f"{cells['run']}: no {router} rows in the cells record")
    per_n: dict[int, int] = {}
    for r in rows:
        per_n[int(r["n"])] = per_n.get(int(r["n"]), 0) + 1
    seed = int(json.loads((_moved(root, run) / "summary.json").read_text())["config"]["seed"])
    return {"preset": run.parent.name, "seed": seed, "run": run.as_posix(), "n": sorted(per_n),
            "replicates": [min(per_n.values()), max(per_n.values())],
            "refit_matches_recorded": cells["refit_matches_recorded"]}


def _moved(root: Path, recorded: Path) -> Path:
    """Where a path a record names (written before issue 58 moved ``simulations/`` to ``records/``)
    lives now under ``root``: mapped through ``records/index.toml``'s ``former_path`` fields (the longest
    matching one wins); a path that was not moved is returned as is."""
    import tomllib

    rec = Path(recorded).as_posix()
    if (root / rec).exists():
        return root / rec
    former = {}
    for r in tomllib.loads((root / "records" / "index.toml").read_text(encoding="utf-8"))["record"]:
        for old, new in zip(r.get("former_path", []), [r["path"], *r.get("files", [])]):
            former[old] = new
    best = max((o for o in former if rec == o or rec.startswith(o + "/")), key=len, default=None)
    return root / (former[best] + rec[len(best):] if best else rec)


def bound_curve(c: dict) -> dict:
    """A two-point curve as plotted: ``n``, the bound, its Monte Carlo band and the recorded slopes."""
    out = {"n": list(map(float, c["ns"])), "lower_bound": c["lower_bound"], "low": c["lower_bound_low"],
           "high": c["lower_bound_high"], "loss": c.get("loss") or c["info"]["loss"],
           "ratio_last_first": c["ratio_last_first"], "slope_tail_conservative": c["slope_tail_conservative"],
           "kappa_max": c["kappa_max"], "kappa_se_max": c["kappa_se_max"]}
    if "t_star_slope_tail" in c:
        out["t_star_slope_tail"] = c["t_star_slope_tail"]
    return out


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


def collect(root: Path, seed: int = 0) -> dict:
    """Every plotted number, from the records under ``root`` (see :data:`SOURCES`)."""
    p = {k: ([root / x for x in v] if isinstance(v, list) else root / v) for k, v in SOURCES.items()}
    rec: dict = {"sources": SOURCES, "seed": seed}
    tp = json.loads(p["exact_mechanism_and_bounds"].read_text())
    over_bounds = json.loads(p["over_bounds"].read_text())["two_point"]["over"]
    cells = {r: json.loads(p[CELLS_SOURCE[r]].read_text()) for r in ROUTERS}
    key = iter(range(10_000))  # one bootstrap stream per series, in a fixed order
    # (a) exact
    a = {"fixed": {}, "mechanism": {}, "bounds": {}}
    for r in ROUTERS:  # the run's own slope, interval, category and (vanilla) curvature, as for (b1)
        a["fixed"][r] = seed_series(p["exact_fits"], r, "voronoi", _rng(seed, next(key)))
        a["fixed"][r]["curvature"] = recorded_curvature(p["exact_fits"], r, "voronoi")
    for r in ROUTERS:
        for part in ("fit_radial", "fit_direction"):
            a["mechanism"][f"{r}:{part}"] = series(mechanism_by_n(tp["mechanism"], r, part), _rng(seed, next(key)))
    a["mechanism"]["start:start_radial"] = series(mechanism_by_n(tp["mechanism"], "cosine", "start_radial"),
                                                  _rng(seed, next(key)))
    a["mechanism_radius_moved_max"] = {r: max(row["radius_moved_max"] for row in tp["mechanism"]["routers"][r]["rows"])
                                       for r in ROUTERS}
    for r in ROUTERS:
        a["bounds"][r] = bound_curve(tp["two_point"][r])
    # (b) over
    b = {"fixed": {}, "mechanism": {}, "bounds": {}}
    for _ in ROUTERS:  # the streams of fig1b's pooled D_2 curves, no longer drawn: skipped, so that every
        next(key)      # later curve keeps the bootstrap stream (and intervals) it had
    # fig1b124w, one curve per seed and loss; its own stream keys (10_000 + ...) leave the others' as they were
    wkey = iter(range(10_000, 20_000))
    b["fig1b124w"] = {col: [seed_series(f, "perturbed", col, _rng(seed, next(wkey))) for f in p["over_fits_fig1b124w"]]
                     for col, _, _, _ in OVER_LOSSES}
    vkey = iter(range(30_000, 40_000))  # fig1b40wv (the vanilla router at fig1b40w's design): its own keys
    b["fig1b40wv"] = {"voronoi": [seed_series(f, "cosine", "voronoi", _rng(seed, next(vkey)))
                                  for f in p["over_fits_fig1b40wv"]]}
    from moestat.rates.config import GridSpec

    b["default_seed"] = GridSpec().seed  # what `moestat rates --config studies/figure1/fig1b124w.toml` runs without --seed
    b["fixed"]["perturbed_1e6"] = series(replicate_values([p["over_fits_1e6"]], "perturbed", "voronoi"),
                                         _rng(seed, next(key)))
    for r in ROUTERS:  # each router from its own design (CELLS_SOURCE); the streams in their former order
        for part in CELL_PARTS[:3]:
            b["mechanism"][f"{r}:{part}"] = series(cells_by_n(cells[r]["rows"], r, part), _rng(seed, next(key)))
    ckey = iter(range(20_000, 30_000))  # the shared cells' direction, added later: its own stream keys
    for r in ROUTERS:
        b["mechanism"][f"{r}:direction_shared"] = series(cells_by_n(cells[r]["rows"], r, "direction_shared"),
                                                         _rng(seed, next(ckey)))
    b["mechanism_design"] = {r: cells_design(cells[r], root, r) for r in ROUTERS}
    b["mechanism_runoff"] = runoff_by_n(cells["perturbed"]["rows"], "perturbed")
    for r in ROUTERS:
        b["bounds"][r] = bound_curve(over_bounds[r])
    # fit counts: converged / all, per router (the figure's title says them)
    import pandas as pd

    def conv(folders):
        df = pd.concat([pd.read_csv(f / "results.csv") for f in folders])
        return {r: f"{int(df[df.router == r].converged.sum())}/{int((df.router == r).sum())}" for r in df.router.unique()}

    a["converged"] = conv([p["exact_fits"]])
    b["converged_1e6"] = conv([p["over_fits_1e6"]])
    b["converged_fig1b124w"] = [conv([f])["perturbed"] for f in p["over_fits_fig1b124w"]]
    b["converged_fig1b40wv"] = [conv([f])["cosine"] for f in p["over_fits_fig1b40wv"]]
    a["mechanism_converged"] = {r: sum(row["converged"] for row in tp["mechanism"]["routers"][r]["rows"]) for r in ROUTERS}
    rec["exact"], rec["over"] = a, b
    rec["n_mc"] = {"exact": tp["two_point"]["cosine"]["info"]["n_mc"],
                   "over": json.loads(p["over_bounds"].read_text())["n_mc"]}
    return rec


def exact_cells(rec: dict) -> dict[str, str]:
    """Per router, panel (a1)'s cell of the docs table (docs/guide/theory.rst, Figure 1), as the record
    holds it: ``slope [ci_low, ci_high] category; mean at the first n to mean at the last n``, and for
    a router judged by its curvature the local slopes at both ends and the curvature's 99% interval
    instead of the slope (a test checks each cell against the docs)."""
    out = {}
    for r in ROUTERS:
        d = rec["exact"]["fixed"][r]
        c = d.get("curvature")
        ends = f"{d['mean'][0]:.3g} to {d['mean'][-1]:.3g}"
        if r == "cosine" and c and c["significant"]:
            out[r] = (f"local slope {c['slope_start']:.2f} to {c['slope_end']:.2f} (curvature 99% CI [{c['c_ci'][0]:.3f}, "
                      f"{c['c_ci'][1]:.3f}]) {d['slope']['category']}; {ends}")
        else:
            out[r] = f"{_fmt(d['slope'])} {d['slope']['category']}; {ends}"
    return out


def fig1b124w_cells(rec: dict) -> dict[str, str]:
    """Per loss of :data:`OVER_LOSSES`, the cell of the docs table (docs/guide/theory.rst, Figure 1):
    ``seed S: slope [ci_low, ci_high] category`` for each fig1b124w seed, as the record holds them
    (the runs' own summary.json; a test checks each cell against the docs)."""
    b = rec["over"]
    out = {}
    for key, _, _, _ in OVER_LOSSES:
        cells = []
        for d in b["fig1b124w"][key]:
            tag = " (default)" if d["seed"] == b["default_seed"] else ""
            cells.append(f"seed {d['seed']}{tag}: {_fmt(d['slope'])} {d['slope']['category']}")
        out[key] = "; ".join(cells)
    return out


def fig1b40wv_cells(rec: dict) -> dict[str, str]:
    """:func:`fig1b124w_cells` for the vanilla router's ``D_2`` (``fig1b40wv``, panel (b1)): the cell of
    the docs table, ``seed S: slope [ci_low, ci_high] category`` per seed, from each run's summary.json."""
    b = rec["over"]
    return {"voronoi": "; ".join(
        f"seed {d['seed']}{' (default)' if d['seed'] == b['default_seed'] else ''}: {_fmt(d['slope'])} "
        f"{d['slope']['category']}" for d in b["fig1b40wv"]["voronoi"])}


def mechanism_cells(rec: dict) -> dict[str, str]:
    """Per ``router:part`` of panel (b2), the cell of the docs table (docs/guide/theory.rst, Figure 1):
    ``slope [ci_low, ci_high]; mean at the first n to mean at the last n``, as the record holds them
    (a test checks each cell against the docs and the record against the cells records' rows)."""
    out = {}
    for r in ROUTERS:
        for part in CELL_PARTS:
            d = rec["over"]["mechanism"][f"{r}:{part}"]
            out[f"{r}:{part}"] = f"{_fmt(d['slope'])}; {d['mean'][0]:.3g} to {d['mean'][-1]:.3g}"
    return out


# -------------------------------------------------------------------------------------- drawing


def _pow(e: float) -> str:
    """``$n^{-1/2}$`` for ``e = -0.5`` (the theorems' exponents are halves and quarters)."""
    return {-0.5: "$n^{-1/2}$", -0.25: "$n^{-1/4}$"}.get(e, f"$n^{{{e:g}}}$")


def _open(handle: tuple) -> tuple:
    """A :func:`moestat.plotting.curve_handle` whose marker is open, as drawn (``mfc="white"``)."""
    handle[-1].set_markerfacecolor("white")
    return handle


def _fmt(s: dict) -> str:
    return f"{s['slope']:.2f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}]"


def _curve(ax, d: dict, colour: str, marker: str, line: str, shift: float = 1.0, fit_line: bool = True,
           mfc: str | None = None, lw: float = 1.3, alpha: float = 1.0) -> None:
    n = np.asarray(d["n"], float) * shift
    m, lo, hi = (np.asarray(d[k], float) for k in ("mean", "ci_low", "ci_high"))
    ax.errorbar(n, m, yerr=[m - lo, hi - m], fmt=marker, ls=line, color=colour, ms=5, lw=lw, capsize=2.5,
                mfc=mfc or colour, alpha=alpha, zorder=3)
    if fit_line:
        s = d["slope"]
        x = np.asarray(d["n"], float)
        ax.plot(x, np.exp(s["intercept"]) * x ** s["slope"], "-", color=colour, lw=3.5, alpha=0.18, zorder=2)


def _reference(ax, n0: float, n1: float, y0: float, exponent: float) -> None:
    x = np.array([n0, n1])
    ax.plot(x, y0 * (x / n0) ** exponent, ":", color="0.2", lw=1.4, zorder=1)


#: fig1b124w's seeds in panel (b1): shades of the perturbed router's colour (seed 0, the default,
#: in the router's own), and a small shift along n so that the three seeds' bars sit side by side.
SEED_COLOURS = ("#0072B2", "#003A5C", "#56B4E9")
SEED_SHIFT = (1.0, 0.955, 1.045)
#: fig1b40wv's seeds (the vanilla router): shades of the vanilla router's orange, in the same order.
VANILLA_SEED_COLOURS = ("#D55E00", "#7A3600", "#F2A25C")


def _over_fixed(ax, R: dict, col: dict, below: dict) -> None:
    """Panel (b1): fig1b124w's D_2, single-atom and shared-cell curves per seed and fig1b40wv's (the
    vanilla router at the same design) D_2 per seed (bootstrap 95% CI of the mean per n, the engine's
    slope, interval and category in the legend), the sweep to 1e6, and Theorem 5's exponents."""
    from moestat.plotting import curve_handle, legend

    hs, ls = [], []
    default = R.get("default_seed", 0)
    for j, d in enumerate(R["fig1b40wv"]["voronoi"]):
        n = np.asarray(d["n"], float) * SEED_SHIFT[j]
        m, lo, hi = (np.asarray(d[k], float) for k in ("mean", "ci_low", "ci_high"))
        ax.errorbar(n, m, yerr=[m - lo, hi - m], fmt="o", ls="--", color=VANILLA_SEED_COLOURS[j], ms=4.5, lw=0.9,
                    capsize=2, zorder=3)
        hs.append(curve_handle(VANILLA_SEED_COLOURS[j], marker="o", line="--", bar=True))
        sl = d["slope"]
        tag = " (default)" if d["seed"] == default else ""
        ls.append(f"vanilla $D_2$, seed {d['seed']}{tag}: {_fmt(sl)} {sl['category']}")
    ds = R["fig1b40wv"]["voronoi"]  # named beside its last size, as the perturbed groups below
    ax.annotate("vanilla $D_2$", (ds[0]["n"][-1] * max(SEED_SHIFT), float(np.exp(np.mean([np.log(d["mean"][-1]) for d in ds])))),
                xytext=(12, 0), textcoords="offset points", ha="left", va="center", fontsize=10, color=col["cosine"])
    d = R["fixed"]["perturbed_1e6"]
    sweep = "0.45"  # grey: not one of fig1b124w's seeds
    _curve(ax, d, sweep, "D", "none", 1.0, mfc="white", fit_line=False, lw=1.0)
    hs.append(_open(curve_handle(sweep, marker="D", line=None, bar=True)))
    ls.append(f"perturbed, $D_2$, sweep to $10^6$ (10 reps; another design): {_fmt(d['slope'])}")
    for key, name, ekey, mk in OVER_LOSSES:
        for j, d in enumerate(R["fig1b124w"][key]):
            n = np.asarray(d["n"], float) * SEED_SHIFT[j]
            m, lo, hi = (np.asarray(d[k], float) for k in ("mean", "ci_low", "ci_high"))
            ax.errorbar(n, m, yerr=[m - lo, hi - m], fmt=mk, ls="-", color=SEED_COLOURS[j], ms=4.5, lw=0.9,
                        capsize=2, zorder=3)
            hs.append(curve_handle(SEED_COLOURS[j], marker=mk, line="-", bar=True))
            sl = d["slope"]
            tag = " (default)" if d["seed"] == default else ""
            ls.append(f"{name}, seed {d['seed']}{tag}: {_fmt(sl)} {sl['category']}")
    # each perturbed group named beside its first size, in the router's colour (the markers alone left
    # the reader to the legend)
    for key, name, _, _ in OVER_LOSSES:
        ds = R["fig1b124w"][key]
        right = key != "voronoi"  # on their left these labels would meet the vanilla curve or the axis's start
        i = -1 if right else 0
        y = float(np.exp(np.mean([np.log(d["mean"][i]) for d in ds])))
        x = ds[0]["n"][i] * (max(SEED_SHIFT) if right else min(SEED_SHIFT))
        # the shared-cell label a little low: the sweep's bars to 1e6 end just above its level
        ax.annotate(name, (x, y), xytext=(12 if right else -12, -7 if key == "param_multi" else 0), textcoords="offset points",
                    ha="left" if right else "right", va="center", fontsize=10, color=col["perturbed"])
    # room on the left for the D_2 label, clear of the axis (the sizes start at n = 4000)
    # (and on the right for the sweep's last point, which a fixed left limit would otherwise cut)
    ax.set_xlim(R["fig1b124w"]["voronoi"][0]["n"][0] * 0.6, R["fixed"]["perturbed_1e6"]["n"][-1] * 1.5)
    # Theorem 5's exponents, anchored below the seeds' geometric mean at the first n (compare slopes, not levels)
    for key, name, ekey, _ in OVER_LOSSES:
        e, thm = PAPER_EXPONENT[ekey]
        ds = R["fig1b124w"][key]
        y0 = float(np.exp(np.mean([np.log(d["mean"][0]) for d in ds]))) * 0.55
        x = np.array([ds[0]["n"][0], ds[0]["n"][-1]], float)
        ax.plot(x, y0 * (x / x[0]) ** e, ":" if e == -0.5 else "-.", color="0.2", lw=1.4, zorder=1)
    hs.append(curve_handle("0.2", marker=None, line=":", lw=1.4))
    ls.append(f"{_pow(-0.5)}: Thm 5, $D_2$ and single-atom cells (vanilla: no exponent, Thm 3)")
    hs.append(curve_handle("0.2", marker=None, line="-.", lw=1.4))
    ls.append(f"{_pow(-0.25)}: Thm 5 (i), shared cells")
    ax.set(xscale="log", yscale="log", xlabel="n", ylabel="loss of the least-squares fit (see legend)",
           title="(b1) fixed truth: $D_2$, single-atom and shared-cell errors\n"
                 "3 seeds, n = 4000-65000, one grid, data and starts\n"
                 "perturbed: fig1b124w (124 reps), vanilla: fig1b40wv (40); mean and 95% bootstrap CI")
    legend(ax, hs, ls, title="slope [95% CI] of the log-of-mean fit and the category, from each run's summary.json",
           title_fontsize=9, **below)


#: Panel (b2)'s curves: (part, marker, line style, open marker, what the legend calls it).
OVER_MECHANISM_PARTS = (("radial_single", "s", "-", True, "radial, alone in a cell"),
                        ("direction_single", "^", "--", False, "direction, alone in a cell"),
                        ("radial_shared", "x", ":", False, "radial, sharing a cell"),
                        ("direction_shared", "d", (0, (5, 1.5, 1, 1.5, 1, 1.5)), True, "direction, sharing a cell"))


def design_label(d: dict, default_seed: int | None = None) -> str:
    """``fig1b40w seed 0 (default), 40 reps, n = 4000-65000`` for a :func:`cells_design` record."""
    lo, hi = d["replicates"]
    reps = f"{hi}" if lo == hi else f"{lo}-{hi}"
    tag = " (default)" if default_seed is not None and d["seed"] == default_seed else ""
    return f"{d['preset']} seed {d['seed']}{tag}, {reps} reps, n = {d['n'][0]}-{d['n'][-1]}"


def _vanilla_design(des: dict, default_seed: int | None) -> str:
    """(b2)'s title line of the vanilla design: ``fig1b40wv, the same seed, sizes, data and starts``
    when it is the perturbed design at the same seed (same sizes and replicates: the router is not part
    of a replicate's stream key), else its own :func:`design_label`."""
    if all(des["cosine"][k] == des["perturbed"][k] for k in ("seed", "n", "replicates")):
        return f"{des['cosine']['preset']}, the same seed, sizes, data and starts"
    return design_label(des["cosine"], default_seed)


def _over_mechanism(ax, R: dict, col: dict, shift: dict, below: dict) -> None:
    """Panel (b2): per Voronoi cell, the radial and directional ``beta1`` errors, each router from
    its own design (:data:`CELLS_SOURCE`, named in the title and in every legend entry), with
    Theorem 5 (i)'s exponents for the perturbed router."""
    from moestat.plotting import curve_handle, legend

    des = R["mechanism_design"]
    default = R.get("default_seed")
    hs, ls = [], []
    for r in ROUTERS:
        for key, mk, lsty, open_, what in OVER_MECHANISM_PARTS:
            d = R["mechanism"][f"{r}:{key}"]
            # no theorem for the vanilla shared cell (Theorem 3 is a lower bound): drawn paler
            alpha = 0.5 if (r == "cosine" and "shared" in key) else 1.0
            _curve(ax, d, col[r], mk, lsty, shift[r], fit_line=False, mfc="white" if open_ else None, lw=1.1,
                   alpha=alpha)
            h = curve_handle(col[r], marker=mk, line=lsty, bar=True)
            for artist in h:
                artist.set_alpha(alpha)
            hs.append(_open(h) if open_ else h)
            ls.append(f"{NAME[r]} [{des[r]['preset']}], {what}: {_fmt(d['slope'])}")
    # Theorem 5 (i)'s exponents over the perturbed design's n: -1/2 well below every curve (higher, it
    # crossed the vanilla ones), -1/4 between the shared cell's radial and direction errors
    for key, ekey, line in (("direction_single", "single", ":"), ("radial_shared", "shared", "-.")):
        d = R["mechanism"][f"perturbed:{key}"]
        e, thm = PAPER_EXPONENT[ekey]
        x = np.array([d["n"][0], d["n"][-1]], float)
        ax.plot(x, d["mean"][0] * (0.1 if ekey == "single" else 0.6) * (x / x[0]) ** e, line, color="0.2", lw=1.4,
                zorder=1)
        hs.append(curve_handle("0.2", marker=None, line=line, lw=1.4))
        where = "alone in a cell" if ekey == "single" else "sharing a cell (weighted by mass, eq. 13)"
        ls.append(f"{_pow(e)}: {thm}, perturbed, atoms {where}")
    ax.set(xscale="log", yscale="log", xlabel="n", ylabel="$\\beta_1$ error (radial, direction)",
           title="(b2) mechanism per Voronoi cell: radial vs direction $\\beta_1$ error\n"
                 f"perturbed: {design_label(des['perturbed'], default)}\n"
                 f"vanilla: {_vanilla_design(des, default)}")
    legend(ax, hs, ls, title="mean and 95% bootstrap CI per n; [the design]; slope [95% CI] of the log-of-mean fit",
           title_fontsize=9,
           **below)


def figure(rec: dict, stem: Path) -> None:
    """Draw the 2 x 3 figure of :func:`collect`'s record to ``<stem>.png``/``.pdf``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from moestat.plotting import PALETTE, curve_handle, figure_problems, legend, save_figure

    col = {"cosine": PALETTE[1], "perturbed": PALETTE[0]}
    shift = {"cosine": 0.97, "perturbed": 1.03}  # side by side, not on top of each other
    fig, axes = plt.subplots(2, 3, figsize=(20, 15.5), layout="constrained")
    below = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.1), "fontsize": 9, "framealpha": 0.95}
    ref = curve_handle("0.2", marker=None, line=":", lw=1.4)
    fitl = curve_handle("0.6", marker=None, line="-", lw=3.5)
    for i, setting in enumerate(("exact", "over")):
        R = rec[setting]
        row = "a" if setting == "exact" else "b"
        loss = "$D_3$ (= $D_{1,1}$ here)" if setting == "exact" else "$D_2$"
        lsym = "D_3" if setting == "exact" else "D_2"
        # ---- column 1: fixed truth
        ax = axes[i, 0]
        if setting == "over":
            _over_fixed(ax, R, col, below)
        else:
            hs, ls = [], []
            for r in ROUTERS:
                d = R["fixed"][r]
                c = d.get("curvature")
                slow = r == "cosine" and c is not None and c["significant"]
                # a straight line through a curve that bends is not drawn: the vanilla row is judged by its curvature
                _curve(ax, d, col[r], "o", "none", shift[r], fit_line=not slow)
                hs.append(curve_handle(col[r], bar=True, line=None))
                if slow:
                    ls.append(f"{NAME[r]}: local slope {c['slope_start']:.2f} at n = {c['n'][0]:,} to {c['slope_end']:.2f} at "
                              f"{c['n'][1]:,}\n(curvature 99% CI [{c['c_ci'][0]:.3f}, {c['c_ci'][1]:.3f}]): "
                              f"{d['slope']['category']} with no polynomial rate (Thm 2)")
                else:
                    ls.append(f"{NAME[r]}: slope {_fmt(d['slope'])} {d['slope'].get('category') or ''}".rstrip())
            hs.append(fitl)
            ls.append("log-of-mean OLS line (perturbed; slope above)")
            e, thm = PAPER_EXPONENT["D3"]
            d = R["fixed"]["perturbed"]
            _reference(ax, d["n"][0], d["n"][-1], d["mean"][0] * 0.45, e)
            hs.append(ref)
            ls.append(f"{_pow(e)}: {thm}, perturbed (vanilla: no exponent, Thm 2)")
            ax.set(xscale="log", yscale="log", xlabel="n",
                   ylabel=f"paper's Voronoi loss ${lsym}(\\hat G_n, G_*)$",
                   title=f"({row}1) fixed truth: {loss} of the least-squares fit\nfig1a1e6 seed {R['fixed']['perturbed']['seed']} "
                         f"(default), 20 replicates, n = {R['fixed']['perturbed']['n'][0]:,}-{R['fixed']['perturbed']['n'][-1]:,}"
                         "\nmean and 95% bootstrap CI")
            legend(ax, hs, ls, **below)
        # ---- column 2: mechanism
        ax = axes[i, 1]
        if setting == "over":
            _over_mechanism(ax, R, col, shift, below)
        else:
            hs, ls = [], []
            d = R["mechanism"]["start:start_radial"]
            n = np.asarray(d["n"], float)
            ax.fill_between(n, d["ci_low"], d["ci_high"], color="0.6", alpha=0.35, lw=0, zorder=1)
            ax.plot(n, d["mean"], "-", color="0.45", lw=1, zorder=1)
            hs.append(curve_handle("0.45", marker=None, band=True))
            moved = max(R["mechanism_radius_moved_max"]["cosine"], 1e-300)
            ls.append(f"start (both routers), radial, 95% CI; the vanilla fit moves no radius (max {moved:.0e})")
            for r in ROUTERS:
                for key, mk, lsty, mfc, what in (("fit_radial", "s", "-", "white", "radial"),
                                                 ("fit_direction", "^", "--", None, "direction")):
                    d = R["mechanism"][f"{r}:{key}"]
                    _curve(ax, d, col[r], mk, lsty, shift[r], fit_line=False, mfc=mfc, lw=1.1)
                    h = curve_handle(col[r], marker=mk, line=lsty, bar=True)
                    hs.append(_open(h) if mfc == "white" else h)
                    ls.append(f"{NAME[r]}, {what}: {_fmt(d['slope'])}")
            d = R["mechanism"]["perturbed:fit_direction"]
            e, thm = PAPER_EXPONENT["beta1_exact"]
            _reference(ax, d["n"][0], d["n"][-1], d["mean"][0] * 0.5, e)
            hs.append(ref)
            ls.append(f"{_pow(e)}: {thm} (perturbed $\\beta_1$)")
            ax.set(xscale="log", yscale="log", xlabel="n", ylabel="$\\beta_1$ error (radial, direction)",
                   title=f"({row}2) mechanism: $\\beta_1$ error of the fit split in radial and direction parts\n"
                         "largest over atoms, mean and 95% bootstrap CI, 20 replicates (paired starts)")
            legend(ax, hs, ls, title="slope [95% CI] of the log-of-mean fit", title_fontsize=9, **below)
        # ---- column 3: two-point bounds
        ax = axes[i, 2]
        hs, ls = [], []
        for r in ROUTERS:
            b = R["bounds"][r]
            n = np.asarray(b["n"])
            ax.fill_between(n, b["low"], b["high"], color=col[r], alpha=0.3, lw=0)
            ax.plot(n, b["lower_bound"], "-", color=col[r], lw=2)
            hs.append(curve_handle(col[r], marker=None, band=True, lw=2))
            lname = "$D_{1,1}$" if b["loss"] == "D1" else ("$D_3$" if b["loss"] == "D3" else "$D_2$")
            if r == "cosine":
                what = f"flat at {b['lower_bound'][0]:.3f} (KL = 0, PDE (4)): ratio LB(1e7)/LB(1e2) = {b['ratio_last_first']:.3f}"
            else:
                what = f"tail slope (n >= 1e5) {b['slope_tail_conservative']:.3f}"
                if "t_star_slope_tail" in b:
                    what += f", t* slope {b['t_star_slope_tail']:.2f}"
            ls.append(f"{NAME[r]}, {lname}: {what}")
        b = R["bounds"]["perturbed"]
        e, thm = PAPER_EXPONENT["D3" if setting == "exact" else "D2"]
        _reference(ax, b["n"][0], b["n"][-1], b["lower_bound"][0] * 0.5, e)
        hs.append(ref)
        ls.append(f"{_pow(e)}: {thm} (the upper rate, up to its log factor)")
        wit = "radial witness $\\beta_{1j} \\to (1+t)\\beta_{1j}$ (App. B.2)" if setting == "exact" else \
            "split witness: two half-mass atoms at $(1 \\mp t)\\beta_{1j}$\n(App. B.3)"  # two lines: one ran off the figure
        ax.set(xscale="log", yscale="log", xlabel="n", ylabel="Le Cam lower bound on the minimax risk",
               title=f"({row}3) two-point lower bound on the minimax risk\n{wit}, band $\\kappa \\pm 2$ SE")
        legend(ax, hs, ls, **below)
    for ax in axes.flat:
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # 2x10^3 ... crowd the n axis
        ax.grid(True, which="major", color="0.9", lw=0.6)
    a, b = rec["exact"], rec["over"]
    fig.suptitle(
        "Nguyen et al. (2024), Figure 1 as measured (panel (b) not reproduced as a contrast of the routers, see the docs): (a) exact-specified k = k* (Theorems 2, 6); (b) over-specified "
        "k = k* + 1 (Theorems 3, 5).\nd = 4, k* = 3, dense gate, GELU experts, nu = 0.01, tau = 0.5 (perturbed); least "
        "squares started near the truth (noise 0.05).\n"
        f"Converged fits: (a1) {a['converged']['cosine']} vanilla, {a['converged']['perturbed']} perturbed; "
        f"(b1) {' / '.join(b['converged_fig1b40wv'])} vanilla (fig1b40wv), {' / '.join(b['converged_fig1b124w'])} perturbed "
        f"(fig1b124w), seeds {' / '.join(str(d['seed']) for d in b['fig1b124w']['voronoi'])}; {b['converged_1e6']['perturbed']} to 1e6; "
        "(b2) refit = recorded in "
        + "; ".join(f"{d['refit_matches_recorded']} ({d['preset']} seed {d['seed']})" for d in b["mechanism_design"].values())
        + ".  "
        "\nColumns 1-2: one fixed truth (a fixed-truth slope cannot test a minimax lower bound).  Column 3: lower bounds "
        f"on the minimax risk at each n, band kappa +- 2 SE (m = {rec['n_mc']['exact']:.0e} / {rec['n_mc']['over']:.0e} "
        "Monte Carlo inputs).", fontsize=10.5)
    for problem in figure_problems(fig):  # the project's reviewer checks (blank slots, mixed tick styles)
        print(f"figure1_composite: {problem}", file=sys.stderr)
    save_figure(fig, stem, formats=("png", "pdf"), min_px=2400)
    plt.close(fig)


def main(argv=None) -> int:
    p = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    p.add_argument("--root", type=Path, default=ROOT, help="the repository root the records are read from")
    p.add_argument("--out", type=Path, default=ROOT / "records" / "archive" / "figure1")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap intervals")
    p.add_argument("--figure-only", action="store_true", help="redraw from <out>/figure1_composite.json")
    args = p.parse_args(argv)
    path = args.out / "figure1_composite.json"
    if args.figure_only:
        if not path.is_file():
            p.error(f"--figure-only needs {path}; run without it first")
        rec = json.loads(path.read_text())
    else:
        missing = [v for vs in SOURCES.values() for v in (vs if isinstance(vs, list) else [vs])
                   if not (args.root / v).exists()]
        if missing:
            p.error(f"records missing under {args.root}: {', '.join(missing)}")
        t0 = time.perf_counter()
        rec = collect(args.root, args.seed)
        rec["command"] = " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])])
        rec["python"] = platform.python_version()
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, rec)
    figure(rec, args.out / "figure1_composite")
    for key, cell in exact_cells(rec).items():  # the docs table's (a1) cells
        print(f"(a1) {key}: {cell}")
    for key, cell in fig1b124w_cells(rec).items():  # the docs table's (b1) fig1b124w cells
        print(f"(b1) {key}: {cell}")
    print(f"(b1) vanilla voronoi: {fig1b40wv_cells(rec)['voronoi']}")
    for key, cell in mechanism_cells(rec).items():  # the docs table's (b2) cells
        print(f"(b2) {key}: {cell}")
    ro = rec["over"]["mechanism_runoff"]
    print("(b2) perturbed shared cell, the atom with the largest radial error, medians per n: radial "
          + ", ".join(f"{v:.3g}" for v in ro["median_radial"]) + "; mass " + ", ".join(f"{v:.3g}" for v in ro["median_mass"]))
    print(f"wrote {'' if args.figure_only else f'{path} and '}{args.out / 'figure1_composite'}.png/.pdf")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

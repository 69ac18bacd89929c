"""Figure 1 of Nguyen et al. (2024) as one figure: both routers on the same draws, with the paired contrast.

Nguyen et al. (2024), Figure 1: the perturbed cosine router's Voronoi loss falls at ``n^{-1/2}`` and the
vanilla cosine router's does not, (a) exact-specified (``k = k*``, Theorems 2 and 6) and (b)
over-specified (``k = k* + 1``, Theorems 3 and 5).  The claim is a contrast of the two routers, so each
panel is judged by one number: the replicate-paired slope difference

    Delta = slope(vanilla) - slope(perturbed)        (the paper's direction: Delta > 0, vanilla flatter)

of the log of the per-n **median** loss on ``log n`` (:func:`moestat.rates.verdicts.paired_contrast`,
``statistic="median"``: the statistic the Figure 1 records are judged on, declaration 01 in
``records/declarations/figure1/``), on the window the runs' own ``summary.json`` record (the whole grid
of each Figure 1 design; n >= 2000 for the catalogue record), with its replicate-paired 95% bootstrap
interval (4000 draws, seed 0),
for each seed of the design and for the seeds pooled (each seed's replicates kept as distinct
replicates).  A panel reproduces the paper's claim in a seed when that interval lies above 0.

Both routers come from the same draws: each pair ``(n, replicate)`` is one data set and one start fitted
by both routers (:func:`moestat.rates.verdicts.paired_arrays` refuses pairs of different root seeds).

* (a) the preset ``fig1a1e6`` (``records/figure1/fig1a1e6/seed{0,1,2}``): both routers in one run,
  20 replicates, n = 2000 .. 1 024 000, ten sizes.
* (b) the preset ``fig1b40wv`` (vanilla, ``records/figure1/fig1b40wv/seed{0,1,2}``, 40 replicates) paired
  with the preset ``fig1b124w`` (perturbed, ``records/figure1/fig1b124w/seed{0,1,2}``, 124 replicates)
  on the replicates both hold (0-39): the same truth, sizes (n = 4000 .. 65000), data and starts; seed
  ``s`` of one draws the same data as seed ``s`` of the other (their ``truth_objective`` agree to 4e-16
  relative).  The perturbed router's replicates 40-123 have no vanilla partner and are not drawn.
  The catalogue record ``cosine-over`` (both routers in one run, 324 replicates, seed 0, n = 1000 ..
  32000, fitted from 2000: another design, whose lowest size holds the singleton run-off) is stated
  beside it, not drawn.

Columns: the paper's Voronoi loss of the least-squares fit (``D_3`` in (a), which is ``D_{1,1}`` there;
``D_2`` in (b)); the same loss with every ``beta1`` replaced by its direction (``voronoi_direction``,
:func:`moestat.losses.direction_only`: the part the vanilla router identifies, PDE (4)), with the vanilla
router's full loss drawn beside it; the Le Cam two-point lower bounds on the minimax risk
(:mod:`moestat.theorems.judges.two_point`; radial witness of App. B.2 in (a), ``records/two_point/two_point.json``;
split witness of App. B.3 in (b), ``records/figure1/figure1.json``), which are computed, not simulated;
and the **mechanism** (column 4, the JSON's key ``mechanism``; column 2 of the retired composite figure, whose script and
outputs are in ``records/archive/figure1/``): the ``beta1`` error split into its radial part
``| ||b|| - ||b*|| |`` (not identified under the vanilla router, PDE (4)) and its direction part
``|| b/||b|| - b*/||b*|| ||`` (:func:`moestat.losses.cell_errors.beta1_decomposition`), both routers.
(a4): the paired start/fit record of ``studies/two_point/two_point.py`` (``two_point.json``'s
``mechanism``: 20 replicates, n = 1e3 .. 1e5, its own fits; largest over the atoms with a direction), with
the start's radial error; (b4): per Voronoi cell, from ``studies/figure1/figure1_cells.py`` (the fits of a
recorded sweep refitted atom by atom from its own streams, the refit checked against the recorded
``extras.csv``): atoms alone in their cell and the two atoms sharing a cell, the perturbed router from
``fig1b40w`` seed 0 (``cells_fig1b40w_seed0.json``; its replicates are fig1b124w's 0-39), the vanilla
router from ``fig1b40wv`` seed 0 (``cells_fig1b40wv_seed0.json``), paired fit by fit.
Curves of columns 1-2: the median over the pooled seeds' paired replicates per n with a 95% bootstrap
interval of the median (replicates resampled, 2000 draws), and each seed's median as a thin line; of
column 4: the mean per n with a 95% bootstrap interval of the mean and the log-of-mean slope with the
engine's interval (:func:`moestat.rates.fit.slope_with_interval`), the composite's statistic and
bootstrap streams, so that the numbers the docs quote are the ones it recorded.  The start scheme is
read from the runs' ``provenance.json`` and written on the figure.

Nothing is refitted: the script reads the records and writes ``figure1_paired.json`` (every plotted and
written number) and ``figure1_paired.png``/``.pdf``; ``--figure-only`` redraws from the JSON.  About 15 s::

    OMP_NUM_THREADS=1 PYTHONPATH=. python studies/figure1/figure1_paired.py
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from moestat.cli.common import ArgumentParser
from moestat.io import atomic_write_json

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (0, 1, 2)
#: The recorded inputs, relative to the repository root (see the module docstring).
SOURCES: dict[str, Any] = {
    "exact": {"vanilla": [f"records/figure1/fig1a1e6/seed{s}" for s in SEEDS],
              "perturbed": [f"records/figure1/fig1a1e6/seed{s}" for s in SEEDS],
              "design": "fig1a1e6 (both routers in one run)"},
    "over": {"vanilla": [f"records/figure1/fig1b40wv/seed{s}" for s in SEEDS],
             "perturbed": [f"records/figure1/fig1b124w/seed{s}" for s in SEEDS],
             "design": "fig1b40wv (vanilla) paired with fig1b124w (perturbed) on replicates 0-39"},
    "over_other": "records/catalogue/cosine-over/routers",
    "bounds_exact": "records/two_point/two_point.json",
    "bounds_over": "records/figure1/figure1.json",
}
ROUTER = {"vanilla": "cosine", "perturbed": "perturbed"}
LOSSES = ("voronoi", "voronoi_direction")
STATISTIC = "median"
#: Replicate ids of seed s in a pooled table: ``s * POOL_OFFSET + replicate`` (no design has 10^6 replicates).
POOL_OFFSET = 1_000_000
COLOUR = {"vanilla": "#D55E00", "perturbed": "#0072B2"}


SIDE = {"consistent": "> 0", "inconsistent": "< 0", "inconclusive": "contains 0"}
VERDICT = {"reproduced": "reproduced: the interval lies above 0 in every seed",
           "opposite": "opposite: the interval lies below 0 in every seed",
           "not reproduced": "not reproduced: not every seed's interval lies above 0"}


def pool_seeds(tables: Sequence[Any]) -> Any:
    """The rows of several seeds' ``results.csv`` as one table whose replicates are distinct.

    Parameters
    ----------
    tables : sequence of DataFrame
        One table per seed, each with ``seed``, ``n`` and ``replicate`` columns and one seed each.

    Returns
    -------
    DataFrame
        The rows of all tables, ``replicate`` replaced by ``seed * POOL_OFFSET + replicate`` so that two
        seeds' replicate 0 are two replicates (pairs stay paired: both arms are renumbered alike).
    """
    import pandas as pd

    out = []
    for t in tables:
        seeds = t["seed"].unique()
        if len(seeds) != 1:
            raise ValueError(f"each table must hold one seed, got {sorted(seeds.tolist())}")
        t = t.copy()
        t["replicate"] = int(seeds[0]) * POOL_OFFSET + t["replicate"].astype(int)
        out.append(t)
    return pd.concat(out, ignore_index=True)


def contrast(vanilla_rows: Any, perturbed_rows: Any, loss: str, *, statistic: str = STATISTIC,
             n_boot: int | None = None, window: tuple[int | None, int | None] = (None, None)) -> dict:
    """The paired slope difference ``slope(vanilla) - slope(perturbed)`` of ``loss`` and its 95% interval.

    Parameters
    ----------
    vanilla_rows, perturbed_rows : DataFrame
        ``results.csv`` rows holding the router ``cosine`` and ``perturbed`` respectively (one table may
        hold both); pairs are matched on ``(n, replicate)``.
    loss : str
        A loss column (``voronoi`` or ``voronoi_direction``).
    statistic : {"median", "mean"}
        Per-n statistic the slopes are fitted to.
    n_boot : int, optional
        Bootstrap draws (default: the engine's ``PAIRED_BOOT``).
    window : (int or None, int or None)
        The sizes fitted, ``n_min <= n <= n_max`` (``None``: no limit).

    Returns
    -------
    dict
        ``difference``, ``ci`` ([low, high]), ``category`` (``consistent``: the interval lies above 0,
        the paper's direction), ``slope_vanilla``, ``slope_perturbed``, ``replicates``, ``ns``, ``reason``.
    """
    from moestat.rates.verdicts import PAIRED_BOOT, paired_arrays, paired_contrast

    ns, a, b = paired_arrays(vanilla_rows, perturbed_rows, loss, window=window, router_a="cosine", router_b="perturbed")
    r = paired_contrast(ns, a, b, statistic=statistic, n_boot=n_boot or PAIRED_BOOT)
    return {"difference": r.get("difference"), "ci": r["ci"], "category": r["category"],
            "slope_vanilla": r.get("slope_a"), "slope_perturbed": r.get("slope_b"),
            "replicates": r.get("replicates"), "ns": [int(n) for n in ns], "reason": r["reason"]}


def median_band(ns: Sequence[int], values: np.ndarray, rng: np.random.Generator, n_boot: int = 2000) -> dict:
    """Per-n median of ``values`` with a 95% percentile bootstrap interval (replicates resampled).

    Parameters
    ----------
    ns : sequence of int, length S
    values : ndarray, shape ``[S, R]``
        Losses; non-finite or non-positive entries are left out at their n.
    rng : numpy.random.Generator
    n_boot : int

    Returns
    -------
    dict
        ``n``, ``median``, ``low``, ``high`` (lists of length S) and ``count`` (valid replicates per n).
    """
    values = np.asarray(values, float)
    if values.ndim != 2 or values.shape[0] != len(ns):
        raise ValueError(f"values must have shape [len(ns), R] = [{len(ns)}, R], got {values.shape}")
    med, lo, hi, cnt = [], [], [], []
    for row in values:
        v = row[np.isfinite(row) & (row > 0)]
        cnt.append(int(v.size))
        if v.size == 0:
            med.append(float("nan")), lo.append(float("nan")), hi.append(float("nan"))
            continue
        boot = np.median(v[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)
        med.append(float(np.median(v)))
        lo.append(float(np.quantile(boot, 0.025)))
        hi.append(float(np.quantile(boot, 0.975)))
    return {"n": [int(n) for n in ns], "median": med, "low": lo, "high": hi, "count": cnt}


def start_scheme(config: dict) -> str:
    """The start of the least-squares fits, in words, from a run's ``provenance.json`` ``config``.

    Parameters
    ----------
    config : dict
        Holds ``init``, ``init_scale`` and optionally ``starts``, ``extra_starts``.
    """
    words = {"near": "near the truth, truth + N(0, {s:g}^2) per parameter, the same at every n",
             "peer": "the peer code's truth + noise {s:g} n^-0.083",
             "random": "a data-free random start"}
    init = config.get("init")
    if init not in words:
        raise ValueError(f"unknown start scheme init={init!r}")
    starts = int(config.get("starts", 1)) + int(config.get("extra_starts", 0))
    return (f"start: {words[init].format(s=float(config.get('init_scale', 0.0)))}; "
            f"{starts} start{'s' if starts != 1 else ''} per fit (init={init}, init_scale={config.get('init_scale')})")


def panel_verdict(per_seed: Sequence[dict]) -> str:
    """A panel's verdict from its seeds' paired contrasts (:func:`contrast`).

    Parameters
    ----------
    per_seed : sequence of dict, length >= 1
        Each with ``category``.

    Returns
    -------
    str
        ``reproduced`` when every seed's paired interval lies above 0 (the paper's direction),
        ``opposite`` when every one lies below, else ``not reproduced``.
    """
    if not per_seed:
        raise ValueError("no seed to judge")
    cats = {c["category"] for c in per_seed}
    if cats == {"consistent"}:
        return "reproduced"
    if cats == {"inconsistent"}:
        return "opposite"
    return "not reproduced"


def _fmt(c: dict) -> str:
    lo, hi = c["ci"] if c["ci"] is not None else (float("nan"), float("nan"))
    return f"{c['difference']:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


def _bound(c: dict) -> dict:
    return {"n": list(map(float, c["ns"])), "lower_bound": c["lower_bound"], "low": c["lower_bound_low"],
            "high": c["lower_bound_high"], "loss": c.get("loss") or c["info"]["loss"],
            "ratio_last_first": c["ratio_last_first"], "slope_tail_conservative": c["slope_tail_conservative"]}


def recorded_window(root: Path, folders: Sequence[str]) -> tuple[int, int]:
    """The fit window ``(n_min, n_max)`` the runs' ``summary.json`` record (the engine's; one for all of them)."""
    got = {tuple(json.loads((root / f / "summary.json").read_text())["window"][k] for k in ("n_min", "n_max"))
           for f in folders}
    if len(got) != 1:
        raise ValueError(f"the runs {', '.join(folders)} were fitted on different windows: {sorted(got)}")
    return got.pop()


# ------------------------------------------------------------------------------------------ mechanism
# The beta1 error of the fit split into its radial part | ||b|| - ||b*|| | (not identified under the vanilla
# router, PDE (4)) and its direction part || b/||b|| - b*/||b*|| || (moestat.losses.cell_errors.beta1_decomposition),
# both routers: column 4 of the figure and ``figure1_paired.json``'s key ``mechanism``.  Moved here from the
# retired composite figure's script (records/archive/figure1/), whose column 2 it was, with the same
# statistic (the per-n mean, as the records of (a4) and (b4) were first read) and the same bootstrap
# streams, so that its numbers are the composite's and the docs quoting them did not change.

#: The records column 4 reads, relative to the repository root.  (a4): the paired start/fit record of
#: ``studies/two_point/two_point.py`` (its ``mechanism``); (b4): the per-cell refits of
#: ``studies/figure1/figure1_cells.py``, each router from the default seed 0 of the design of (b1)
#: (40 replicates, n = 4000 .. 65000): the perturbed router from ``fig1b40w`` (whose replicates 0-39 are
#: ``fig1b124w``'s), the vanilla router from ``fig1b40wv``, paired fit by fit (same data and starts).
MECHANISM_SOURCES: dict[str, str] = {
    "exact": "records/two_point/two_point.json",
    "over_cosine": "records/figure1/cells_fig1b40wv_seed0.json",
    "over_perturbed": "records/figure1/cells_fig1b40w_seed0.json",
}
#: Router names as the records spell them.
ROUTERS = ("cosine", "perturbed")
NAME = {"cosine": "vanilla", "perturbed": "perturbed"}
#: The exponents Nguyen et al. (2024) state for the mechanism's curves, up to their log factor:
#: Theorem 6 for the exact-specified beta1, Theorem 5 (i) for atoms alone in a Voronoi cell and (weighted
#: by their masses) for atoms sharing one.  The vanilla router has none (Theorems 2 and 3).
MECHANISM_EXPONENT = {"beta1_exact": (-0.5, "Thm 6"), "single": (-0.5, "Thm 5 (i)"), "shared": (-0.25, "Thm 5 (i)")}
#: (b4)'s per-cell parts (:func:`cell_parts`).
CELL_PARTS = ("radial_single", "direction_single", "radial_shared", "direction_shared")
#: The composite's bootstrap stream keys (``_rng(seed, key)``) of each curve, kept so that the intervals and
#: slopes are the ones it recorded and the docs quote.
MECHANISM_STREAM = {
    "exact": {"cosine:fit_radial": 2, "cosine:fit_direction": 3, "perturbed:fit_radial": 4,
              "perturbed:fit_direction": 5, "start:start_radial": 6},
    "over": {"cosine:radial_single": 10, "cosine:direction_single": 11, "cosine:radial_shared": 12,
             "perturbed:radial_single": 13, "perturbed:direction_single": 14, "perturbed:radial_shared": 15,
             "cosine:direction_shared": 20_000, "perturbed:direction_shared": 20_001},
}


def interval_of_mean(values: np.ndarray, rng: np.random.Generator, n_boot: int = 2000) -> tuple[float, float, float]:
    """Mean of ``values`` and the 95% percentile-bootstrap interval of the mean.

    Parameters
    ----------
    values : ndarray, shape (R,)
    rng : numpy.random.Generator
    n_boot : int

    Returns
    -------
    (float, float, float)
        The mean, the 2.5% and the 97.5% bootstrap percentiles.
    """
    v = np.asarray(values, float)
    boots = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return float(v.mean()), float(lo), float(hi)


def series(by_n: dict[int, np.ndarray], rng: np.random.Generator, n_boot: int = 1000) -> dict:
    """Per-n summaries of a curve and its log-of-mean slope with the engine's 95% interval.

    Parameters
    ----------
    by_n : dict of int to ndarray, shape (R_n,)
        Each sample size's replicates (positive values).
    rng : numpy.random.Generator
        Drives the per-n intervals, then the slope's (:func:`moestat.rates.fit.slope_with_interval`).
    n_boot : int
        Bootstrap draws of the slope's interval.

    Returns
    -------
    dict
        ``n``, ``mean``, ``ci_low``/``ci_high`` (bootstrap of the mean), ``median``, ``q25``/``q75``,
        ``count`` (lists, one per n) and ``slope`` (``slope``, ``ci_low``, ``ci_high``, ``intercept`` of
        the log-of-mean OLS).
    """
    from moestat.rates.fit import slope_with_interval

    ns = sorted(by_n)
    rec: dict[str, Any] = {"n": ns, "mean": [], "ci_low": [], "ci_high": [], "median": [], "q25": [], "q75": [],
                           "count": []}
    for n in ns:
        v = np.asarray(by_n[n], float)
        m, lo, hi = interval_of_mean(v, rng)
        q25, med, q75 = np.percentile(v, [25, 50, 75])
        for k, x in (("mean", m), ("ci_low", lo), ("ci_high", hi), ("median", med), ("q25", q25), ("q75", q75)):
            rec[k].append(float(x))
        rec["count"].append(int(len(v)))
    s = slope_with_interval(ns, [by_n[n] for n in ns], rng, n_boot)
    rec["slope"] = {"slope": float(s["slope"]), "ci_low": float(s["ci_low"]), "ci_high": float(s["ci_high"]),
                    "intercept": float(s["log_mean"]["intercept"])}
    return rec


def cell_parts(radial: Sequence[float], direction: Sequence[float], cell_size: Sequence[int]) -> dict[str, float]:
    """One fit's largest radial and direction ``beta1`` errors, over atoms alone in their Voronoi cell
    (``*_single``) and over atoms sharing a cell (``*_shared``).

    Parameters
    ----------
    radial, direction : array_like, shape (k,)
        Per fitted atom: ``| ||b_i|| - ||b*_j|| |`` and ``|| u_i - u*_j ||`` (``u = b / ||b||``).
    cell_size : array_like of int, shape (k,)
        The size of each atom's own Voronoi cell (Nguyen et al. 2024, eq. 5).

    Returns
    -------
    dict of str to float
        ``radial_single``, ``direction_single``, ``radial_shared``, ``direction_shared``; NaN where the
        fit has no atom of that kind.
    """
    radial_a, direction_a, size = np.asarray(radial, float), np.asarray(direction, float), np.asarray(cell_size)
    out = {}
    for kind, mask in (("single", size == 1), ("shared", size > 1)):
        out[f"radial_{kind}"] = float(radial_a[mask].max()) if mask.any() else float("nan")
        out[f"direction_{kind}"] = float(direction_a[mask].max()) if mask.any() else float("nan")
    return out


def cells_by_n(rows: Sequence[dict], router: str, part: str) -> dict[int, np.ndarray]:
    """:func:`cell_parts`'s ``part`` per sample size for ``router`` from ``figure1_cells.py`` rows.

    Parameters
    ----------
    rows : sequence of dict
        Each with ``router``, ``n``, ``radial``, ``direction``, ``cell_size`` (lists of length k).
    router, part : str

    Returns
    -------
    dict of int to ndarray, shape (R_n,)
        Sorted by ``n``; fits without an atom of that kind are left out.
    """
    out: dict[int, list[float]] = {}
    for r in rows:
        if r["router"] != router:
            continue
        v = cell_parts(r["radial"], r["direction"], r["cell_size"])[part]
        if np.isfinite(v):
            out.setdefault(int(r["n"]), []).append(v)
    return {n: np.asarray(out[n]) for n in sorted(out)}


def runoff_by_n(rows: Sequence[dict], router: str) -> dict:
    """Per sample size, the shared cell's atom with the largest radial error in each fit of ``router``:
    the median of its radial error and of its mass ``exp(beta0_i)`` over the fits that have a shared cell.

    Theorem 5 (i) of Nguyen et al. (2024) bounds a shared cell's atoms only weighted by their masses
    (``D_2``, eq. 13), so the radius of an atom whose mass falls is not bounded: this is the measured
    reason why (b4)'s shared-cell radial error stays flat while the mass-weighted shared-cell error falls.

    Parameters
    ----------
    rows : sequence of dict
        ``figure1_cells.py`` rows (``router``, ``n``, ``radial``, ``cell_size``, ``mass``; lists of length k).
    router : str

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
    """``two_point.json``'s ``mechanism`` per-replicate lists as ``{n: values}``.

    Parameters
    ----------
    mech : dict
        Holds ``ns`` (length S) and ``routers[router]["per_replicate"][key]`` (shape [S][R]).
    router, key : str

    Returns
    -------
    dict of int to ndarray, shape (R,)
    """
    return {int(n): np.asarray(v, float) for n, v in zip(mech["ns"], mech["routers"][router]["per_replicate"][key])}


def _moved(root: Path, recorded: Path | str) -> Path:
    """Where a path a record names (written before issue 58 moved ``simulations/`` to ``records/``) lives
    now under ``root``: mapped through ``records/index.toml``'s ``former_path`` fields (the longest matching
    one wins); a path that was not moved is returned as is."""
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


def cells_design(cells: dict, root: Path, router: str) -> dict:
    """Where a ``figure1_cells.py`` record's ``router`` rows come from, as (b4) labels them.

    Parameters
    ----------
    cells : dict
        A cells record (``run``, ``rows``, ``refit_matches_recorded``).
    root : Path
        The repository root (the run's ``summary.json`` is read for its seed).
    router : str

    Returns
    -------
    dict
        ``preset`` (the run folder's parent, e.g. ``fig1b40w``), ``seed`` (the run's ``summary.json``),
        ``run``, ``n`` (the sample sizes of the rows), ``replicates`` (fits per n, the smallest and largest
        count) and ``refit_matches_recorded`` (the record's, over all its rows).
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


def collect_mechanism(root: Path, seed: int = 0) -> dict:
    """Column 4's numbers (``figure1_paired.json``'s ``mechanism``), from the records of :data:`MECHANISM_SOURCES`.

    Parameters
    ----------
    root : Path
        The repository root.
    seed : int
        Seed of the bootstrap streams (:data:`MECHANISM_STREAM`).

    Returns
    -------
    dict
        ``sources``, ``statistic`` and, per setting, ``series`` (``router:part`` to :func:`series`); (a) also
        ``radius_moved_max`` and ``converged`` per router, (b) ``design`` (:func:`cells_design` per router),
        ``runoff`` (:func:`runoff_by_n`, perturbed) and ``default_seed``.
    """
    from moestat.rates.config import GridSpec

    tp = json.loads((root / MECHANISM_SOURCES["exact"]).read_text())["mechanism"]
    cells = {r: json.loads((root / MECHANISM_SOURCES[f"over_{r}"]).read_text()) for r in ROUTERS}
    out: dict[str, Any] = {
        "sources": MECHANISM_SOURCES, "statistic": "mean",
        "what": "the beta1 error of the fit split into its radial part | ||b|| - ||b*|| | and its direction part "
                "|| b/||b|| - b*/||b*|| ||; per n the mean with its 95% bootstrap interval, the log-of-mean OLS "
                "slope with the engine's 95% interval"}
    a: dict[str, Any] = {"series": {}}
    for key, k in MECHANISM_STREAM["exact"].items():
        router, part = key.split(":")
        # the start is the same for both routers (paired starts): recorded once, from the vanilla rows
        a["series"][key] = series(mechanism_by_n(tp, "cosine" if router == "start" else router, part), _rng(seed, k))
    a["radius_moved_max"] = {r: max(row["radius_moved_max"] for row in tp["routers"][r]["rows"]) for r in ROUTERS}
    a["converged"] = {r: sum(row["converged"] for row in tp["routers"][r]["rows"]) for r in ROUTERS}
    a["replicates"] = {r: len(tp["routers"][r]["per_replicate"]["fit_radial"][0]) for r in ROUTERS}
    a["init_scale"] = tp["init_scale"]  # its start: the truth plus N(0, init_scale^2) noise, paired across routers
    b: dict[str, Any] = {"series": {}}
    for key, k in MECHANISM_STREAM["over"].items():
        router, part = key.split(":")
        b["series"][key] = series(cells_by_n(cells[router]["rows"], router, part), _rng(seed, k))
    b["design"] = {r: cells_design(cells[r], root, r) for r in ROUTERS}
    b["runoff"] = runoff_by_n(cells["perturbed"]["rows"], "perturbed")
    b["default_seed"] = GridSpec().seed  # what `moestat rates --config ...` runs without --seed
    out["exact"], out["over"] = a, b
    return out


def _slope_text(s: dict) -> str:
    return f"{s['slope']:.2f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}]"


def mechanism_cells(rec: dict) -> dict[str, str]:
    """Per ``router:part`` of panel (b4), the cell of the docs table (docs/guide/theory.rst, Figure 1).

    Parameters
    ----------
    rec : dict
        ``figure1_paired.json`` (its ``mechanism``).

    Returns
    -------
    dict of str to str
        ``slope [ci_low, ci_high]; mean at the first n to mean at the last n``, as the record holds them
        (a test checks each cell against the docs).
    """
    out = {}
    for r in ROUTERS:
        for part in CELL_PARTS:
            d = rec["mechanism"]["over"]["series"][f"{r}:{part}"]
            out[f"{r}:{part}"] = f"{_slope_text(d['slope'])}; {d['mean'][0]:.3g} to {d['mean'][-1]:.3g}"
    return out


def design_label(d: dict, default_seed: int | None = None) -> str:
    """``fig1b40w seed 0 (default), 40 reps, n = 4000-65000`` for a :func:`cells_design` record."""
    lo, hi = d["replicates"]
    reps = f"{hi}" if lo == hi else f"{lo}-{hi}"
    tag = " (default)" if default_seed is not None and d["seed"] == default_seed else ""
    return f"{d['preset']} seed {d['seed']}{tag}, {reps} reps, n = {d['n'][0]}-{d['n'][-1]}"


def _vanilla_design(des: dict, default_seed: int | None) -> str:
    """(b4)'s title line of the vanilla design: ``fig1b40wv, the same seed, sizes, data and starts`` when
    it is the perturbed design at the same seed (same sizes and replicates: the router is not part of a
    replicate's stream key), else its own :func:`design_label`."""
    if all(des["cosine"][k] == des["perturbed"][k] for k in ("seed", "n", "replicates")):
        return f"{des['cosine']['preset']}, the same seed, sizes, data and starts"
    return design_label(des["cosine"], default_seed)


def collect(root: Path, seed: int = 0) -> dict:
    """Every plotted and written number, from the records under ``root`` (see :data:`SOURCES`)."""
    from moestat.rates.store import read_results
    from moestat.rates.verdicts import paired_arrays

    rec: dict = {"sources": SOURCES, "seed": seed, "statistic": STATISTIC,
                 "difference": "slope(vanilla) - slope(perturbed) of the log per-n median on log n; "
                               "the paper's direction is > 0 (vanilla flatter)"}
    key = iter(range(10_000))
    for setting in ("exact", "over"):
        src = SOURCES[setting]
        tabs = {arm: [read_results(root / f / "results.csv") for f in src[arm]] for arm in ("vanilla", "perturbed")}
        configs = {arm: [json.loads((root / f / "provenance.json").read_text())["config"] for f in src[arm]]
                   for arm in ("vanilla", "perturbed")}
        schemes = {start_scheme(c) for arm in configs for c in configs[arm]}
        if len(schemes) != 1:
            raise ValueError(f"{setting}: the runs were started differently: {sorted(schemes)}")
        window = recorded_window(root, [*src["vanilla"], *src["perturbed"]])
        P: dict = {"design": src["design"], "start_scheme": schemes.pop(), "window": list(window),
                   "seeds": [int(c["seed"]) for c in configs["vanilla"]], "per_seed": {}, "pooled": {}, "curves": {}}
        for loss in LOSSES:
            P["per_seed"][loss] = [contrast(v, p, loss, window=window) for v, p in zip(tabs["vanilla"], tabs["perturbed"])]
            pv, pp = pool_seeds(tabs["vanilla"]), pool_seeds(tabs["perturbed"])
            P["pooled"][loss] = contrast(pv, pp, loss, window=window)
            P["curves"][loss] = {}
            ns, a, b = paired_arrays(pv, pp, loss, window=window, router_a="cosine", router_b="perturbed")
            for arm, vals in (("vanilla", a), ("perturbed", b)):
                P["curves"][loss][arm] = {"pooled": median_band(ns, vals, _rng(seed, next(key))), "seeds": []}
                for v, p in zip(tabs["vanilla"], tabs["perturbed"]):
                    ns_s, a_s, b_s = paired_arrays(v, p, loss, window=window, router_a="cosine", router_b="perturbed")
                    x = a_s if arm == "vanilla" else b_s
                    with np.errstate(invalid="ignore"):
                        P["curves"][loss][arm]["seeds"].append(
                            {"n": ns_s, "median": np.nanmedian(np.where(x > 0, x, np.nan), axis=1).tolist()})
        P["pairs_per_seed"] = [c["replicates"] for c in P["per_seed"]["voronoi"]]
        # the same contrast on the per-n means, recorded beside (not drawn, not the verdict's statistic)
        P["per_seed_mean"] = {"voronoi": [contrast(v, p, "voronoi", statistic="mean", window=window)
                                          for v, p in zip(tabs["vanilla"], tabs["perturbed"])]}
        # the paper's claim is a contrast of the full loss; the direction-only loss has no claim (both routers
        # identify the directions), so only its sides are recorded
        P["verdict"] = {"voronoi": panel_verdict(P["per_seed"]["voronoi"])}
        P["sides"] = {loss: [SIDE[c["category"]] for c in P["per_seed"][loss]] for loss in LOSSES}
        P["converged"] = {arm: [f"{int(t[t.router == ROUTER[arm]].converged.sum())}/{int((t.router == ROUTER[arm]).sum())}"
                                for t in tabs[arm]] for arm in tabs}
        rec[setting] = P
    other = read_results(root / SOURCES["over_other"] / "results.csv")
    ow = recorded_window(root, [SOURCES["over_other"]])  # the catalogue's window (from n = 2000: singleton run-off below)
    rec["over_other"] = {loss: contrast(other, other, loss, window=ow) for loss in LOSSES}
    rec["over_other"]["window"] = list(ow)
    rec["over_other"]["design"] = "catalogue cosine-over: both routers in one run, 324 replicates, seed 0"
    ta = json.loads((root / SOURCES["bounds_exact"]).read_text())["two_point"]
    tb = json.loads((root / SOURCES["bounds_over"]).read_text())["two_point"]["over"]
    rec["exact"]["bounds"] = {arm: _bound(ta[ROUTER[arm]]) for arm in ROUTER}
    rec["over"]["bounds"] = {arm: _bound(tb[ROUTER[arm]]) for arm in ROUTER}
    rec["mechanism"] = collect_mechanism(root, seed)  # column 4, its own records and streams
    return rec


LOSS_NAME = {("exact", "voronoi"): r"$D_3$ ($=D_{1,1}$ here)", ("over", "voronoi"): r"$D_2$",
             ("exact", "voronoi_direction"): r"$D_3$ on directions $\beta_1/\|\beta_1\|$",
             ("over", "voronoi_direction"): r"$D_2$ on directions $\beta_1/\|\beta_1\|$"}
BOUND_NAME = {"D1": r"$D_{1,1}$", "D2": r"$D_2$", "D3": r"$D_3$"}


def _curve(ax, d: dict, colour: str, marker: str, label: str, mfc: str | None = None, ls: str = "-") -> None:
    n = np.asarray(d["n"], float)
    m, lo, hi = (np.asarray(d[k], float) for k in ("median", "low", "high"))
    ax.fill_between(n, lo, hi, color=colour, alpha=0.18, lw=0)
    ax.plot(n, m, marker=marker, ls=ls, color=colour, ms=5, lw=1.6, mfc=mfc or colour, label=label, zorder=3)


def _contrast_text(P: dict, loss: str) -> str:
    """The box under a panel: each seed's and the pooled paired contrast, and the panel's verdict."""
    claim = loss in P["verdict"]
    lines = [r"paired $\Delta$ = slope(vanilla) $-$ slope(perturbed)",
             r"95% CI; the paper's claim: $\Delta > 0$" if claim else "95% CI; the paper states no contrast here"]
    for s, c in zip(P["seeds"], P["per_seed"][loss]):
        lines.append(f"seed {s}:  {_fmt(c)}  {SIDE[c['category']]}")
    c = P["pooled"][loss]
    lines.append(f"pooled:  {_fmt(c)}  {SIDE[c['category']]}")
    if claim:
        lines.append(VERDICT[P["verdict"][loss]])
    return "\n".join(lines)


def _log_axes(ax, ns: Sequence[float]) -> None:
    """Log axes whose tick labels do not collide and share one style across the figure (plain numbers:
    ``4,000`` beside ``10^4`` in the next panel, or ``0.1`` beside ``10^-2``, is what the project's
    :func:`moestat.plotting.figure_problems` rejects): the grid's sizes as x ticks when it spans under two
    decades, else the decades written out; minor y labels on a y axis that spans under one decade."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log"), ax.set_yscale("log")
    if max(ns) / min(ns) < 100:
        ax.xaxis.set_major_locator(FixedLocator(list(ns)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: np.format_float_positional(v, trim="-")))
    lo, hi = ax.get_ylim()
    if hi / lo < 20:
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.tick_params(axis="y", which="minor", labelsize=7)


def _fixed_panel(ax, P: dict, setting: str, loss: str, title: str) -> None:
    """One fixed-truth panel: both routers' median curves of ``loss`` (pooled band, per-seed thin lines), the
    vanilla router's full loss beside a direction-only loss, and the paired contrasts written below."""
    for arm, marker in (("vanilla", "o"), ("perturbed", "s")):
        d = P["curves"][loss][arm]
        for s in d["seeds"]:
            ax.plot(s["n"], s["median"], "-", color=COLOUR[arm], lw=0.7, alpha=0.45, zorder=2)
        sl = P["pooled"][loss][f"slope_{arm}"]
        what = "directions only" if loss == "voronoi_direction" else "full loss"
        _curve(ax, d["pooled"], COLOUR[arm], marker, f"{arm}, {what}: slope {sl:.2f}")
    if loss == "voronoi_direction":  # the vanilla router's full loss beside its identifiable part
        _curve(ax, P["curves"]["voronoi"]["vanilla"]["pooled"], COLOUR["vanilla"], "o",
               "vanilla, full loss (left panel): slope "
               f"{P['pooled']['voronoi']['slope_vanilla']:.2f}", mfc="white", ls="--")
    n = np.asarray(P["curves"][loss]["perturbed"]["pooled"]["n"], float)
    y0 = np.nanmin([P["curves"][loss][arm]["pooled"]["median"][0] for arm in ("vanilla", "perturbed")]) * 0.6
    ax.plot(n[[0, -1]], y0 * (n[[0, -1]] / n[0]) ** -0.5, ":", color="0.2", lw=1.3, label=r"$n^{-1/2}$ (reference slope)")
    _log_axes(ax, n)
    ax.set_xlabel("sample size n"), ax.set_ylabel(f"loss of the least-squares fit: {LOSS_NAME[(setting, loss)]}")
    ax.set_title(title, fontsize=9.5)
    ax.grid(alpha=0.25, which="both")
    ax.legend(loc="upper left", bbox_to_anchor=(-0.02, -0.2), fontsize=7, frameon=False)
    ax.text(1.0, -0.2, _contrast_text(P, loss), transform=ax.transAxes, ha="right", va="top", fontsize=7,
            family="monospace", multialignment="left", bbox={"boxstyle": "round", "fc": "#f4f4f4", "ec": "0.6"})


def _bound_panel(ax, B: dict, title: str) -> None:
    """One two-point panel: each router's Le Cam lower bound with its Monte Carlo band (kappa +- 2 SE)."""
    for arm in ("vanilla", "perturbed"):
        c = B[arm]
        n = np.asarray(c["n"], float)
        ax.fill_between(n, c["low"], c["high"], color=COLOUR[arm], alpha=0.25, lw=0)
        tail = c["slope_tail_conservative"]
        what = f"tail slope {tail:.3f}" if tail is not None else f"flat, ratio last/first {c['ratio_last_first']:.3f}"
        ax.plot(n, c["lower_bound"], "-", color=COLOUR[arm], lw=2, label=f"{arm}, {BOUND_NAME[c['loss']]}: {what}")
    _log_axes(ax, B["perturbed"]["n"])
    ax.set_xlabel("sample size n"), ax.set_ylabel("Le Cam lower bound on the minimax risk")
    ax.set_title(title, fontsize=9.5)
    ax.grid(alpha=0.25, which="both")
    ax.legend(loc="upper left", bbox_to_anchor=(-0.02, -0.2), fontsize=7, frameon=False)
    ax.text(0.5, 0.45, "two-point lower bound\n(not a simulation)", transform=ax.transAxes, ha="center", va="center",
            fontsize=12, color="0.5")


def _pow(e: float) -> str:
    """``$n^{-1/2}$`` for ``e = -0.5`` (the theorems' exponents are halves and quarters)."""
    return {-0.5: "$n^{-1/2}$", -0.25: "$n^{-1/4}$"}.get(e, f"$n^{{{e:g}}}$")


def _mean_curve(ax, d: dict, colour: str, marker: str, ls: Any, shift: float, label: str, *, open_: bool = False,
                alpha: float = 1.0) -> None:
    """One mechanism curve: the per-n mean with its 95% bootstrap interval as error bars, shifted along n
    by ``shift`` so that the two routers' bars sit side by side."""
    n = np.asarray(d["n"], float) * shift
    m, lo, hi = (np.asarray(d[k], float) for k in ("mean", "ci_low", "ci_high"))
    ax.errorbar(n, m, yerr=[m - lo, hi - m], fmt=marker, ls=ls, color=colour, ms=5, lw=1.2, capsize=2.5,
                mfc="white" if open_ else colour, alpha=alpha, label=label, zorder=3)


def _curves_first(ax) -> tuple[list, list]:
    """The axes' legend entries with the measured curves first, then the start, then the theorems' exponents
    (matplotlib lists plain lines before error-bar curves)."""
    hs, ls = ax.get_legend_handles_labels()
    rank = [2 if lab.startswith("$n^") else 1 if lab.startswith("the start") else 0 for lab in ls]
    order = sorted(range(len(ls)), key=lambda i: (rank[i], i))
    return [hs[i] for i in order], [ls[i] for i in order]


#: The two routers' bars side by side along n (not on top of each other).
MECHANISM_SHIFT = {"cosine": 0.96, "perturbed": 1.04}
#: (b4)'s curves: (part, marker, line style, open marker, what the legend calls it).
OVER_MECHANISM_PARTS = (("radial_single", "s", "-", True, "radial, alone in a cell"),
                        ("direction_single", "^", "--", False, "direction, alone in a cell"),
                        ("radial_shared", "x", ":", False, "radial, sharing a cell"),
                        ("direction_shared", "d", (0, (5, 1.5, 1, 1.5, 1, 1.5)), True, "direction, sharing a cell"))


def _mechanism_exact_panel(ax, M: dict, title: str) -> None:
    """Panel (a4): the largest radial and direction beta1 errors of the paired start/fit record, both routers,
    with the start's radial error (the same start for both) as a grey band."""
    S = M["series"]
    d = S["start:start_radial"]
    n = np.asarray(d["n"], float)
    moved = max(M["radius_moved_max"]["cosine"], 1e-300)
    ax.fill_between(n, d["ci_low"], d["ci_high"], color="0.6", alpha=0.35, lw=0, zorder=1)
    ax.plot(n, d["mean"], "-", color="0.45", lw=1, zorder=1,
            label=f"the start's radial error (both routers), 95% CI; the vanilla fit moves no radius (max {moved:.0e})")
    for r in ROUTERS:
        for part, mk, ls, open_, what in (("fit_radial", "s", "-", True, "radial"), ("fit_direction", "^", "--", False, "direction")):
            e = S[f"{r}:{part}"]
            _mean_curve(ax, e, COLOUR[NAME[r]], mk, ls, MECHANISM_SHIFT[r], f"{NAME[r]}, {what}: slope {_slope_text(e['slope'])}",
                        open_=open_)
    e, thm = MECHANISM_EXPONENT["beta1_exact"]
    d = S["perturbed:fit_direction"]
    x = np.array([d["n"][0], d["n"][-1]], float)
    ax.plot(x, d["mean"][0] * 0.5 * (x / x[0]) ** e, ":", color="0.2", lw=1.3, label=f"{_pow(e)}: {thm} (perturbed $\\beta_1$)")
    _log_axes(ax, d["n"])
    ax.set_xlabel("sample size n"), ax.set_ylabel(r"$\beta_1$ error of the fit, largest over the atoms")
    ax.set_title(title, fontsize=9.5)
    ax.grid(alpha=0.25, which="both")
    ax.legend(*_curves_first(ax), loc="upper left", bbox_to_anchor=(-0.02, -0.2), fontsize=7, frameon=False,
              title="mean per n, 95% bootstrap CI; slope [95% CI] of the log-of-mean fit", title_fontsize=7)


def _mechanism_over_panel(ax, M: dict, title: str) -> None:
    """Panel (b4): per Voronoi cell, the radial and direction beta1 errors of both routers' seed-0 fits (each
    router's design in every legend entry), with Theorem 5 (i)'s exponents for the perturbed router."""
    S, des = M["series"], M["design"]
    for r in ROUTERS:
        for part, mk, ls, open_, what in OVER_MECHANISM_PARTS:
            d = S[f"{r}:{part}"]
            # no theorem gives the vanilla shared cell a rate (Theorem 3 is a lower bound): drawn paler
            alpha = 0.5 if (r == "cosine" and "shared" in part) else 1.0
            _mean_curve(ax, d, COLOUR[NAME[r]], mk, ls, MECHANISM_SHIFT[r],
                        f"{NAME[r]} [{des[r]['preset']}], {what}: {_slope_text(d['slope'])}", open_=open_, alpha=alpha)
    # Theorem 5 (i)'s exponents over the perturbed design's n: -1/2 below every curve, -1/4 between the shared
    # cell's radial and direction errors (compare slopes, not levels)
    for part, ekey, ls, scale in (("direction_single", "single", ":", 0.1), ("radial_shared", "shared", "-.", 0.6)):
        d = S[f"perturbed:{part}"]
        e, thm = MECHANISM_EXPONENT[ekey]
        x = np.array([d["n"][0], d["n"][-1]], float)
        where = "alone in a cell" if ekey == "single" else "sharing a cell (weighted by mass, eq. 13)"
        ax.plot(x, d["mean"][0] * scale * (x / x[0]) ** e, ls, color="0.2", lw=1.3, zorder=1,
                label=f"{_pow(e)}: {thm}, perturbed, atoms {where}")
    _log_axes(ax, S["perturbed:radial_single"]["n"])
    ax.set_xlabel("sample size n"), ax.set_ylabel(r"$\beta_1$ error of the fit, largest over the cell's atoms")
    ax.set_title(title, fontsize=9.5)
    ax.grid(alpha=0.25, which="both")
    ax.legend(*_curves_first(ax), loc="upper left", bbox_to_anchor=(-0.02, -0.2), fontsize=7, frameon=False,
              title="mean per n, 95% bootstrap CI; [the design]; slope [95% CI] of the log-of-mean fit", title_fontsize=7)


def figure(rec: dict, stem: Path) -> None:
    """Draw ``rec`` (what :func:`collect` returns) to ``<stem>.png`` and ``<stem>.pdf``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(26, 17), gridspec_kw={"width_ratios": [1.15, 1.15, 0.8, 1.15]})
    M = rec["mechanism"]
    A, B, O = rec["exact"], rec["over"], rec["over_other"]

    def head(P: dict) -> str:
        n = P["curves"]["voronoi"]["vanilla"]["pooled"]["n"]
        return (f"{P['design']}\nseeds {', '.join(map(str, P['seeds']))}, {P['pairs_per_seed'][0]} paired "
                f"replicates each, n = {n[0]:,}-{n[-1]:,}")

    rows = [("exact", A, "(a) exact-specified, k = k* (Thms 2, 6)"), ("over", B, "(b) over-specified, k = k* + 1 (Thms 3, 5)")]
    for i, (setting, P, what) in enumerate(rows):
        tag = "ab"[i]
        _fixed_panel(axes[i, 0], P, setting, "voronoi",
                     f"{what}\n({tag}1) paper's Voronoi loss, both routers on the same draws\n{head(P)}")
        _fixed_panel(axes[i, 1], P, setting, "voronoi_direction",
                     f"{what}\n({tag}2) direction-only loss (the part the vanilla router identifies, PDE (4)),\n"
                     f"beside the vanilla router's full loss; the same fits as ({tag}1)")
        wit = "radial witness (App. B.2)" if setting == "exact" else "split witness (App. B.3)"
        _bound_panel(axes[i, 2], P["bounds"],
                     f"{what}\n({tag}3) two-point lower bound (not a simulation)\n{wit}, band kappa +- 2 SE")
    mech = "mechanism: the fit's $\\beta_1$ error split into radial and direction parts"
    a4 = M["exact"]
    _mechanism_exact_panel(axes[0, 3], a4, f"{rows[0][2]}\n(a4) {mech}\ntwo_point.json's paired start/fit record\n"
                           f"({a4['replicates']['cosine']} replicates, start noise {a4['init_scale']:g}, its own fits, not (a1)'s)")
    b4 = M["over"]
    des, dflt = b4["design"], b4["default_seed"]
    _mechanism_over_panel(axes[1, 3], b4, f"{rows[1][2]}\n(b4) {mech}, per Voronoi cell\n"
                          f"perturbed: {design_label(des['perturbed'], dflt)}\nvanilla: {_vanilla_design(des, dflt)}")
    o = O["voronoi"]
    starts = {A["start_scheme"], B["start_scheme"]}
    start_line = (f"Both panels, both routers: {A['start_scheme']}" if len(starts) == 1
                  else f"(a) {A['start_scheme']}\n(b) {B['start_scheme']}")
    fig.suptitle(
        "Nguyen et al. (2024), Figure 1 as measured: perturbed vs vanilla cosine router fitted to the same draws\n"
        "d = 4, k* = 3, dense gate, GELU experts, noise variance 0.01, tau = 0.5 (perturbed); least squares.  "
        f"{start_line}\n"
        "Curves: median per n over the pooled seeds' paired replicates, band = 95% bootstrap CI of the median; "
        "thin lines: each seed's median; slopes: log of the per-n median on log n.\n"
        f"Converged fits per seed: (a) vanilla {', '.join(A['converged']['vanilla'])}; perturbed "
        f"{', '.join(A['converged']['perturbed'])}.  (b) vanilla {', '.join(B['converged']['vanilla'])}; perturbed "
        f"{', '.join(B['converged']['perturbed'])} (all 124 replicates of fig1b124w).\n"
        f"Panel (b), another design (not drawn): {O['design']}, fitted on n = {o['ns'][0]:,}-{o['ns'][-1]:,} (its recorded window): "
        f"paired Delta {_fmt(o)} ({'contains 0' if o['category'] == 'inconclusive' else o['category']}).\n"
        "Column 4 (mechanism): per n the mean with its 95% bootstrap CI, slopes of the log-of-mean fit; (b4) refit = recorded in "
        + "; ".join(f"{d['refit_matches_recorded']} ({d['preset']} seed {d['seed']})" for d in M["over"]["design"].values())
        + ".",
        fontsize=10)
    fig.subplots_adjust(left=0.04, right=0.99, top=0.875, bottom=0.155, hspace=0.85, wspace=0.22)  # room under (b4) for its legend
    from moestat.plotting import figure_problems

    for problem in figure_problems(fig):  # the project's reviewer checks (blank slots, mixed tick styles)
        print(f"figure1_paired: {problem}", file=sys.stderr)
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(stem.with_suffix(".png"), dpi=150)
    fig.savefig(stem.with_suffix(".pdf"))
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    p.add_argument("--root", type=Path, default=ROOT, help="the repository root the records are read from")
    p.add_argument("--out", type=Path, default=ROOT / "records" / "figure1")
    p.add_argument("--seed", type=int, default=0, help="seed of the median bands' bootstrap")
    p.add_argument("--figure-only", action="store_true", help="redraw from <out>/figure1_paired.json")
    args = p.parse_args(argv)
    stem = args.out / "figure1_paired"
    if args.figure_only:
        if not stem.with_suffix(".json").is_file():
            p.error(f"--figure-only needs {stem.with_suffix('.json')}; run without it first")
        rec = json.loads(stem.with_suffix(".json").read_text())
    else:
        named = [SOURCES["over_other"], SOURCES["bounds_exact"], SOURCES["bounds_over"]]
        named += [f for k in ("exact", "over") for arm in ("vanilla", "perturbed") for f in SOURCES[k][arm]]
        named += list(MECHANISM_SOURCES.values())
        missing = [f for f in named if not (args.root / f).exists()]
        if missing:
            p.error(f"records missing under {args.root}: {', '.join(missing)}")
        t0 = time.time()
        rec = collect(args.root, args.seed)
        rec["command"] = " ".join(["studies/figure1/figure1_paired.py", *(argv if argv is not None else sys.argv[1:])])
        rec["python"] = platform.python_version()
        rec["seconds"] = round(time.time() - t0, 1)
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(stem.with_suffix(".json"), rec)
    figure(rec, stem)
    for setting in ("exact", "over"):
        P = rec[setting]
        for loss in LOSSES:
            print(f"{setting} {loss}: " + "; ".join(f"seed {s} {_fmt(c)} {c['category']}" for s, c in zip(P["seeds"], P["per_seed"][loss]))
                  + f"; pooled {_fmt(P['pooled'][loss])}; {P['verdict'].get(loss, 'no claim')}")
    for key, cell in mechanism_cells(rec).items():  # the docs table's (b4) cells
        print(f"(b4) {key}: {cell}")
    ro = rec["mechanism"]["over"]["runoff"]
    print("(b4) perturbed shared cell, the atom with the largest radial error, medians per n: radial "
          + ", ".join(f"{v:.3g}" for v in ro["median_radial"]) + "; mass " + ", ".join(f"{v:.3g}" for v in ro["median_mass"]))
    print(f"wrote {stem}.json/.png/.pdf")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
router's full loss drawn beside it; and the Le Cam two-point lower bounds on the minimax risk
(:mod:`moestat.theorems.judges.two_point`; radial witness of App. B.2 in (a), ``records/two_point/two_point.json``;
split witness of App. B.3 in (b), ``records/figure1/figure1.json``), which are computed, not simulated.
Curves: the median over the pooled seeds' paired replicates per n with a 95% bootstrap interval of the
median (replicates resampled, 2000 draws), and each seed's median as a thin line.  The start scheme is read
from the runs' ``provenance.json`` and written on the figure.

Nothing is refitted: the script reads the records and writes ``figure1_paired.json`` (every plotted and
written number) and ``figure1_paired.png``/``.pdf``; ``--figure-only`` redraws from the JSON.  About 30 s::

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
    """Log axes whose tick labels do not collide: the grid's sizes as x ticks when it spans under two
    decades, plain numbers on a y axis that spans under one decade."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log"), ax.set_yscale("log")
    if max(ns) / min(ns) < 100:
        ax.xaxis.set_major_locator(FixedLocator(list(ns)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    lo, hi = ax.get_ylim()
    if hi / lo < 20:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
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
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlabel("sample size n"), ax.set_ylabel("Le Cam lower bound on the minimax risk")
    ax.set_title(title, fontsize=9.5)
    ax.grid(alpha=0.25, which="both")
    ax.legend(loc="upper left", bbox_to_anchor=(-0.02, -0.2), fontsize=7, frameon=False)
    ax.text(0.5, 0.45, "two-point lower bound\n(not a simulation)", transform=ax.transAxes, ha="center", va="center",
            fontsize=12, color="0.5")


def figure(rec: dict, stem: Path) -> None:
    """Draw ``rec`` (what :func:`collect` returns) to ``<stem>.png`` and ``<stem>.pdf``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(20, 15.5), gridspec_kw={"width_ratios": [1.15, 1.15, 0.8]})
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
        f"paired Delta {_fmt(o)} ({'contains 0' if o['category'] == 'inconclusive' else o['category']}).",
        fontsize=10)
    fig.subplots_adjust(left=0.05, right=0.985, top=0.875, bottom=0.12, hspace=0.9, wspace=0.22)
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
    print(f"wrote {stem}.json/.png/.pdf")
    return 0


if __name__ == "__main__":
    sys.exit(main())

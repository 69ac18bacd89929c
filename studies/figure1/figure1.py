"""Figure 1 of Nguyen et al. (2024), both panels, with the two-point lower bounds and the PDE (4) mechanism.

Panel (a) exact-specified (k = k*), panel (b) over-specified (k = k* + 1), the default scenario
(``make_scenario(router, setting)``: d = 4, k* = 3, dense gate, GELU experts, nu = 0.01, tau = 0.5).
For each panel:

* top: the fixed-truth curves of the paper's Voronoi loss for both routers (least squares started
  near the truth, mean +- 2 SE per n; ``D_3 = D_{1,1}`` exact, ``D_2`` over-specified, as the rates
  engine computes them), and the Le Cam two-point lower bounds on the minimax risk
  (:mod:`moestat.theorems.judges.two_point`; radial witness of App. B.2 in (a), split witness of App. B.3 in
  (b); vanilla loss ``D_{1,1}``, perturbed ``D_3`` in (a) and ``D_2`` in (b)) with their Monte
  Carlo bands (kappa +- 2 SE);
* bottom: the decomposition of the ``beta1`` error of the same fits, radial
  ``| ||beta1_i|| - ||beta1*_j|| |`` (unidentified under the vanilla router by PDE (4)) and
  directional ``|| u_i - u*_j ||`` (:mod:`moestat.losses.cell_errors`), mean +- 2 SE.

The fits are the rate runs of ``moestat theory --quick`` (8 replicates, n = 2000 .. 32000, seed 0):
``--rates-from DIR`` copies them from a theory run's ``--out`` folder, otherwise this script runs
them itself with the same configuration (about 5 CPU-minutes).  Writes ``figure1.json`` (every
plotted number) and ``figure1.png``/``.pdf``; ``--figure-only`` redraws from the JSON::

    OMP_NUM_THREADS=1 PYTHONPATH=. python studies/figure1/figure1.py --out records/figure1 \\
        --rates-from /tmp/tq

``--fig1b DIR [DIR ...]`` draws instead panel (b) of the bar-pinned preset ``fig1b`` (12 replicates,
n = 1000 .. 32000), one run folder per seed (``moestat rates --config studies/figure1/fig1b.toml
--cell-errors --seed S``): the perturbed router's ``D_2``, single-atom and shared-cell errors and
the largest ``beta1`` radial error, mean +- 2 SE per seed, with the engine's slopes, intervals and
categories ("no prediction" instead of a category for the radial error: see :func:`_verdict`); it writes ``fig1b_seeds.json`` and ``fig1b_seeds.png``/``.pdf`` (``--figure-only``
redraws them from the JSON)::

    OMP_NUM_THREADS=1 PYTHONPATH=. python studies/figure1/figure1.py --out records/archive/figure1 \\
        --fig1b records/archive/figure1/fig1b/seed0 records/archive/figure1/fig1b/seed1 \\
        records/archive/figure1/fig1b/seed2

The same panel for fig1b's successor, the preset ``fig1b40`` (perturbed router, 40 replicates,
n = 4000 .. 11314; ``--preset`` names it in the title and the JSON, ``--name`` is the output stem)::

    OMP_NUM_THREADS=1 PYTHONPATH=. python studies/figure1/figure1.py --out records/archive/figure1 \\
        --preset fig1b40 --name fig1b40_seeds --fig1b records/archive/figure1/fig1b40/seed0 \\
        records/archive/figure1/fig1b40/seed1 records/archive/figure1/fig1b40/seed2

Besides the slopes, each run's record holds the two halves' categories (even / odd replicates, the
engine's ``halves``) and the fit-vs-truth certificate (:mod:`moestat.rates.truth_check`): the
``truth_check`` counts, the fits whose sum of squares is below the truth's on the same data
(``truth_gap > 0``) and the fits that may sit on the box ``|beta1_ij| <= 10``: ``extras.csv`` does
not record ``on_box``, but a fit on the box has an atom of radius at least 10, hence a largest
radial error at least ``10 - max_j ||beta1*_j||`` (:func:`box_bound`); a fit below that bound is
certainly inside the box.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from moestat.cli.common import ArgumentParser
from moestat.io import atomic_write_json

ROUTERS = ("cosine", "perturbed")
SETTINGS = ("exact", "over")
LABEL = {"cosine": "vanilla cosine", "perturbed": "perturbed cosine (tau = 0.5)"}
#: The rate files a figure needs (copied from a theory run or written by run_rates).
RATE_FILES = ("results.csv", "extras.csv", "summary.json", "provenance.json")
COLUMNS = ("voronoi", "beta1_radial", "beta1_direction")


def rate_runs(args) -> dict[str, Path]:
    """The exact and over-specified rate folders: copied from ``--rates-from`` or run here."""
    out = {}
    for setting in SETTINGS:
        dest = args.out / "rates" / setting
        dest.mkdir(parents=True, exist_ok=True)
        if args.rates_from is not None:
            src = args.rates_from / "rates" / f"quick-{setting}"
            for f in RATE_FILES:
                if not (src / f).is_file():
                    raise SystemExit(f"figure1: {src / f} is missing (run moestat theory --quick --out {args.rates_from} first)")
                shutil.copyfile(src / f, dest / f)
        else:
            from moestat.theorems.checks.framework import Context
            from moestat.theorems.checks.grids import exact_run, over_run

            # the theory checks' own configurations (grids.py), so the figure shows the data they judge
            ctx = Context("quick", args.out / "_theory", seed=args.seed, resume=True)
            (exact_run if setting == "exact" else over_run)(ctx)
            src = args.out / "_theory" / "rates" / f"quick-{setting}"
            for f in RATE_FILES:
                shutil.copyfile(src / f, dest / f)
        out[setting] = dest
    return out


def fixed_truth(folder: Path) -> dict:
    """Mean +- 2 SE per (router, n) of the plotted columns and the engine's slopes with intervals."""
    import pandas as pd

    from moestat.rates.extras import merge_extras

    df = merge_extras(pd.read_csv(folder / "results.csv"), folder / "extras.csv")
    summ = json.loads((folder / "summary.json").read_text())
    rec = {}
    for router in ROUTERS:
        sub = df[df["router"] == router]
        r = {"converged": int(sub["converged"].sum()), "fits": int(len(sub))}
        for col in COLUMNS:
            g = sub.groupby("n")[col]
            r[col] = {"n": [int(v) for v in g.mean().index], "mean": g.mean().tolist(),
                      "two_se": (2 * g.std(ddof=1) / np.sqrt(g.count())).tolist(), "count": g.count().astype(int).tolist()}
            f = next((f for f in summ["fits"] if f["router"] == router and f["loss"] == col), None)
            r[col]["slope"] = None if f is None else {k: f.get(k) for k in ("slope", "ci_low", "ci_high", "category")}
        rec[router] = r
    return rec


def bounds(args) -> dict:
    """Two-point curves, radial witness (exact) and split witness (over), both routers."""
    from moestat.data.synthetic import make_scenario
    from moestat.theorems.judges.two_point import loglog_slope, two_point_curve

    ns = np.logspace(2, 7, 21)
    rec = {}
    for setting, witness, ts in (("exact", "radial", np.logspace(-6, 0, args.n_t)),
                                 ("over", "split", np.logspace(-6, np.log10(0.5), args.n_t))):
        rec[setting] = {}
        for router in ROUTERS:
            c = two_point_curve(make_scenario(router, setting), ns, ts, n_mc=args.n_mc, seed=args.seed, witness=witness)
            tail = c.interior() & (c.ns >= 1e5)
            rec[setting][router] = {
                "witness": witness, "loss": c.info["loss"], "ns": c.ns.tolist(), "lower_bound": c.lower_bound.tolist(),
                "lower_bound_low": c.lower_bound_low.tolist(), "lower_bound_high": c.lower_bound_high.tolist(),
                "t_star": c.t_star.tolist(), "kappa_max": float(c.kappa.max()), "kappa_se_max": float(c.kappa_se.max()),
                "ratio_last_first": float(c.lower_bound_low[-1] / c.lower_bound[0]),
                "slope_tail_conservative": loglog_slope(c.ns, c.lower_bound_low, tail),
                "t_star_slope_tail": loglog_slope(c.ns, c.t_star, tail), "tail_points": int(tail.sum())}
    return rec


def _fmt_slope(s: dict | None) -> str:
    if not s or s.get("slope") is None:
        return ""
    return f": slope {s['slope']:.2f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}]"


def figure(rec: dict, stem: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from moestat.plotting import PALETTE, curve_handle, legend, save_figure

    col = {"cosine": PALETTE[1], "perturbed": PALETTE[0]}
    shift = {"cosine": 1.0, "perturbed": 1.06}  # side by side, not on top of each other
    fig, axes = plt.subplots(2, 2, figsize=(12.5, 9.4))
    for j, setting in enumerate(SETTINGS):
        ft, lb = rec["fixed_truth"][setting], rec["two_point"][setting]
        ax = axes[0, j]
        hs, ls = [], []
        for router in ROUTERS:
            d = ft[router]["voronoi"]
            n, m, e = np.array(d["n"]), np.array(d["mean"]), np.array(d["two_se"])
            ax.errorbar(n * shift[router], m, yerr=[np.minimum(e, 0.9 * m), e], fmt="o-", color=col[router], ms=4, lw=1.2,
                        capsize=2)
            hs.append(curve_handle(col[router], bar=True))
            loss = "D_3 = D_{1,1}" if setting == "exact" else "D_2"
            ls.append(f"{LABEL[router]}, fit, {loss}{_fmt_slope(d['slope'])}")
        for router in ROUTERS:
            b = lb[router]
            ns = np.array(b["ns"])
            ax.fill_between(ns, b["lower_bound_low"], b["lower_bound_high"], color=col[router], alpha=0.25, lw=0)
            ax.plot(ns, b["lower_bound"], "--", color=col[router], lw=1.3)
            hs.append(curve_handle(col[router], marker=None, line="--", band=True))
            what = ("flat (KL = 0)" if router == "cosine" else f"tail slope {b['slope_tail_conservative']:.3f}")
            ls.append(f"{LABEL[router].split(' (')[0]}, two-point bound ({b['loss']}): {what}")
        ref = lb["perturbed"]
        n0 = np.array(ref["ns"])
        ax.plot(n0, ref["lower_bound"][-1] * (n0 / n0[-1]) ** -0.5, ":", color="0.35", lw=1)
        hs.append(curve_handle("0.35", marker=None, line=":"))
        ls.append("n^-1/2")
        title = ("(a) exact-specified (k = k*): radial witness (App. B.2)" if setting == "exact"
                 else "(b) over-specified (k = k* + 1): split witness (App. B.3)")
        ax.set(xscale="log", yscale="log", xlabel="n", ylabel="paper's Voronoi loss; minimax lower bound", title=title)
        legend(ax, hs, ls, fontsize=7.2, loc="lower left")
        ax = axes[1, j]
        hs, ls = [], []
        for router in ROUTERS:
            for key, mk, lsty, what in (("beta1_radial", "s", "-", "radial"), ("beta1_direction", "^", "--", "direction")):
                d = ft[router][key]
                n, m, e = np.array(d["n"]), np.array(d["mean"]), np.array(d["two_se"])
                ax.errorbar(n * shift[router], m, yerr=[np.minimum(e, 0.9 * m), e], fmt=mk + lsty, color=col[router], ms=4,
                            lw=1.2, capsize=2, mfc="white" if key == "beta1_radial" else col[router])
                hs.append(curve_handle(col[router], marker=mk, line=lsty, bar=True))
                ls.append(f"{LABEL[router].split(' (')[0]}, {what}{_fmt_slope(d['slope'])}")
        ax.set(xscale="log", yscale="log")
        ax.set_xticks(d["n"], [f"{v:g}" for v in d["n"]])  # the five sample sizes (log ticks show only 10^4)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set(xlabel="n", ylabel="beta1 error, max over atoms, mean ± 2 SE",
               title=f"({'a' if setting == 'exact' else 'b'}) the mechanism: radial vs direction error of the same fits")
        legend(ax, hs, ls, fontsize=7.2, loc="lower left")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # 2x10^3, 3x10^3 ... overlapped
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    conv = ", ".join(f"{s}: {sum(rec['fixed_truth'][s][r]['converged'] for r in ROUTERS)}/"
                     f"{sum(rec['fixed_truth'][s][r]['fits'] for r in ROUTERS)} converged" for s in SETTINGS)
    fig.suptitle("Nguyen et al. (2024), Figure 1 (d = 4, k* = 3, dense gate, GELU, nu = 0.01).\nSolid: one fixed truth, least "
                 f"squares started near it, 8 replicates per n ({conv}).\nDashed: Le Cam lower bounds on the minimax risk over "
                 f"the pair {{G, G'_t}} (m = {rec['n_mc']} Monte Carlo inputs, band kappa ± 2 SE), not the risk at the fixed truth.",
                 fontsize=9.5)
    fig.tight_layout()
    save_figure(fig, stem, formats=("png", "pdf"), min_px=1800)
    plt.close(fig)


#: fig1b_seeds panels label each of at most this many sample sizes on the n axis.
MAX_N_TICKS = 8

#: fig1b_seeds panels: (column, label, the theorem's exponent or None), Theorem 5 of Nguyen et al. (2024)
FIG1B_LOSSES = (("voronoi", "D_2 (eq. 13)", -0.5), ("param_single", "single-atom cells", -0.5),
                ("param_multi", "shared cells", -0.25), ("beta1_radial", "largest beta1 radial error", None))


def box_bound() -> float:
    """The smallest largest-radial error of a fit with a ``beta1`` coordinate on its box.

    ``|beta1_ij| = B`` gives ``||beta1_i|| >= B``, so ``| ||beta1_i|| - ||beta1*_j|| | >= B - max_j
    ||beta1*_j||`` for the atom's true atom ``j`` (``B = 10``, the default
    :class:`~moestat.model.mixing.ParameterBox`; the over-specified default scenario's truth).
    """
    from moestat.data.synthetic import make_scenario

    sc = make_scenario("perturbed", "over")
    return float(sc.box.beta1 - np.linalg.norm(sc.truth.numpy().beta1, axis=-1).max())


def fig1b_records(dirs: list[Path]) -> dict:
    """Per fig1b run folder (one seed): the perturbed router's curves (mean +- 2 SE per n), the
    engine's slope, interval, category and reason for each of :data:`FIG1B_LOSSES`, and the fit counts."""
    import pandas as pd

    from moestat.rates.extras import merge_extras

    rec = {}
    for folder in dirs:
        summ = json.loads((folder / "summary.json").read_text())
        df = merge_extras(pd.read_csv(folder / "results.csv"), folder / "extras.csv")
        sub = df[df["router"] == "perturbed"]
        r = {"seed": summ["config"]["seed"], "converged": int(sub["converged"].sum()), "fits": int(len(sub)),
             "reps": int(summ["config"]["reps"]),
             "cpu_seconds_both_routers": float(df.drop_duplicates(["router", "n", "time"])["time"].sum())}
        # the units' wall time over their replicates, summed per fit: the perturbed router's own cost
        r["seconds_perturbed"] = float(sub["time"].sum())
        bound = box_bound()
        r["certificate"] = {"truth_check": {str(k): int(v) for k, v in sub["truth_check"].value_counts().items()},
                            "sse_below_truth": int((sub["truth_gap"] > 0).sum()),
                            "box_bound": bound, "possibly_on_box": int((sub["beta1_radial"] >= bound).sum())}
        for col, _, _ in FIG1B_LOSSES:
            g = sub.groupby("n")[col]
            f = next((f for f in summ["fits"] if f["router"] == "perturbed" and f["loss"] == col), None)
            r[col] = {"n": [int(v) for v in g.mean().index], "mean": g.mean().tolist(),
                      "two_se": (2 * g.std(ddof=1) / np.sqrt(g.count())).tolist(),
                      "slope": None if f is None else {k: f.get(k) for k in ("slope", "ci_low", "ci_high", "predicted",
                                                                           "category", "reason")},
                      "halves": None if f is None else [{k: h.get(k) for k in ("half", "category", "slope")}
                                                        for h in f.get("halves") or []]}
        rec[str(folder)] = r
    return rec


#: What the legends and the docs tables say for a loss of :data:`FIG1B_LOSSES` without a prediction.
NO_PREDICTION = "no prediction"


def _verdict(sl: dict | None, pred: float | None) -> str:
    """The legend's tail after the slope: ``", <category>"`` for a loss with a prediction,
    ``", no prediction"`` for one without.

    A category says how a slope compares with a predicted exponent, so it means nothing where the
    figure states none.  The runs recorded before 2026-12-03 hold one for the largest radial error
    (:func:`moestat.rates.fit.predicted_exponent` gave ``-1/4`` for the perturbed over-specified
    ``beta1_radial``, the shared cells' rate; it gives none since), but Theorem 5 (i) bounds the shared cell's atoms only
    weighted by their masses ``exp(beta0_i)`` (D2, eq. 13): an atom whose mass vanishes may sit
    anywhere, and the run-off atom does (radius about 10), so the paper gives the largest error over
    all atoms no rate.  The figure prints the slope and its interval, and says so.
    """
    if pred is None:
        return f", {NO_PREDICTION}"
    return f", {sl['category']}" if sl and sl.get("category") else ""


#: Short category names of the table in docs/guide/theory.rst.
_SHORT = {"inconclusive": "inconcl.", "pre-asymptotic": "pre-asympt."}


def fig1b_table_rows(rec: dict) -> list[str]:
    """One line per loss of :data:`FIG1B_LOSSES`: ``slope [ci_low, ci_high] category`` per seed,
    then the two halves' categories (A: even, B: odd replicates) -- the cells of the seeds table
    in docs/guide/theory.rst, as the engine's summary.json gives them."""
    out = []
    for col, label, pred in FIG1B_LOSSES:
        cells = []
        for r in rec["runs"].values():
            sl = r[col]["slope"]
            head = f"{sl['slope']:.2f} [{sl['ci_low']:.2f}, {sl['ci_high']:.2f}]"
            if pred is None:  # no category without a prediction (see _verdict)
                cells.append(f"{head} {NO_PREDICTION}")
                continue
            cat = _SHORT.get(sl.get("category") or "", sl.get("category") or "none")
            halves = "/".join(_SHORT.get(h["category"], h["category"]) for h in r[col].get("halves") or [])
            cells.append(f"{head} {cat} ({halves})")
        out.append(f"{label} | {'none' if pred is None else f'{pred:g}'} | " + " | ".join(cells))
    return out


def fig1b_figure(rec: dict, stem: Path) -> None:
    """Four panels (D_2, single, shared, radial), one curve per seed; ``rec["preset"]`` (default
    ``fig1b``) names the preset in the title."""
    preset = rec.get("preset", "fig1b")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from moestat.plotting import PALETTE, curve_handle, figure_problems, legend, save_figure
    from moestat.rates.config import GridSpec

    default_seed = GridSpec().seed  # the seed `moestat rates --preset NAME` runs without --seed
    fig, axes = plt.subplots(1, 4, figsize=(17, 6.0), layout="constrained")
    for ax, (col, label, pred) in zip(axes, FIG1B_LOSSES):
        hs, ls = [], []
        for i, r in enumerate(rec["runs"].values()):
            d = r[col]
            n, m, e = np.array(d["n"]), np.array(d["mean"]), np.array(d["two_se"])
            ax.errorbar(n * 1.04 ** i, m, yerr=[np.minimum(e, 0.9 * m), e], fmt="o-", color=PALETTE[i], ms=4, lw=1.2,
                        capsize=2)
            hs.append(curve_handle(PALETTE[i], bar=True))
            tag = " (default)" if r["seed"] == default_seed else ""
            ls.append(f"seed {r['seed']}{tag}{_fmt_slope(d['slope'])}{_verdict(d['slope'], pred)}")
        if pred is not None:
            first = list(rec["runs"].values())[0][col]
            n0 = np.array(first["n"], dtype=float)
            ax.plot(n0, first["mean"][0] * (n0 / n0[0]) ** pred, ":", color="0.35", lw=1)
            hs.append(curve_handle("0.35", marker=None, line=":"))
            ls.append(f"n^{pred:g} (Thm 5)")
        ax.set(xscale="log", yscale="log", xlabel="n", title=label)
        n_all = sorted({v for r in rec["runs"].values() for v in r[col]["n"]})
        if len(n_all) <= MAX_N_TICKS:
            # the design's sample sizes as the ticks: a window of about a decade shows only 10^4 otherwise
            ax.set_xticks(n_all, [f"{v:g}" for v in n_all], fontsize=8)
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        elif max(n_all) > 10 * min(n_all):  # over a decade the minor tick labels collide
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        # below the axes: inside, the box covered the last sizes' bars
        legend(ax, hs, ls, fontsize=7.6, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    reps = sorted({r.get("reps", 12) for r in rec["runs"].values()})
    axes[0].set_ylabel(f"perturbed router, mean ± 2 SE over {'/'.join(map(str, reps))} replicates")
    conv = ", ".join(f"seed {r['seed']}: {r['converged']}/{r['fits']}" for r in rec["runs"].values())
    fig.suptitle(f"Nguyen et al. (2024), Figure 1(b), preset {preset}: over-specified perturbed cosine router (d = 4, k* = 3, "
                 f"k = 4, dense gate, GELU, nu = 0.01, tau = 0.5), least squares on the box |beta1_ij| <= 10 started near "
                 f"the truth.\nConverged: {conv}.  Slopes: log-of-mean fit with the engine's interval, and its category where Theorem 5 gives an "
                 "exponent (dotted).\n"
                 "The radial panel (no prediction: Theorem 5 (i) bounds a shared cell's atoms only weighted by their "
                 "masses, D_2 eq. 13): one atom of the shared cell sits near the box (records/archive/figure1/fig1b_runaway.py).",
                 fontsize=9)
    for problem in figure_problems(fig):  # the project's reviewer checks (blank slots, mixed tick styles)
        print(f"figure1 --fig1b: {problem}", file=sys.stderr)
    save_figure(fig, stem, formats=("png", "pdf"), min_px=1800)
    plt.close(fig)


def _positive(text: str) -> int:
    v = int(text)
    if v < 2:
        raise argparse.ArgumentTypeError(f"must be an integer >= 2, got {text}")
    return v


def main(argv=None) -> int:
    p = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    p.add_argument("--out", type=Path, default=Path("records/figure1"))
    p.add_argument("--rates-from", type=Path, default=None, help="a `moestat theory --quick --out DIR` folder to copy the fits from")
    p.add_argument("--n-mc", type=_positive, default=50_000, help="Monte Carlo inputs for the KL rate")
    p.add_argument("--n-t", type=_positive, default=121, help="points of the witness grid")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--figure-only", action="store_true", help="redraw the figure from <out>/figure1.json")
    p.add_argument("--fig1b", type=Path, nargs="+", default=None, metavar="DIR",
                   help="draw the fig1b preset's seeds instead (one run folder per seed): fig1b_seeds.json/png/pdf")
    p.add_argument("--preset", default="fig1b", help="with --fig1b: the preset the runs are of (title and JSON)")
    p.add_argument("--name", default="fig1b_seeds", help="with --fig1b: the output stem (<name>.json/png/pdf)")
    args = p.parse_args(argv)
    if args.fig1b is not None:
        if not args.name or "/" in args.name or args.name.startswith("."):
            p.error(f"--name {args.name!r}: a file stem without a folder")
        path = args.out / f"{args.name}.json"
        if args.figure_only:
            if not path.is_file():
                p.error(f"--figure-only needs {path}; run without it first")
        else:
            for folder in args.fig1b:
                if not all((folder / f).is_file() for f in RATE_FILES):
                    p.error(f"--fig1b {folder}: not a finished rates run (needs {', '.join(RATE_FILES)})")
            args.out.mkdir(parents=True, exist_ok=True)
            body = {"command": " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
                    "runs": fig1b_records(args.fig1b)}
            if args.preset != "fig1b":  # the fig1b record keeps its former keys
                body = {"preset": args.preset, **body}
            atomic_write_json(path, body)
        rec = json.loads(path.read_text())
        fig1b_figure(rec, args.out / args.name)
        print("\n".join(fig1b_table_rows(rec)))
        print(f"wrote {path} and {args.name}.png/.pdf")
        return 0
    path = args.out / "figure1.json"
    if args.figure_only and not path.is_file():
        p.error(f"--figure-only needs {path}; run without it first")
    if args.rates_from is not None and not (args.rates_from / "rates").is_dir():
        p.error(f"--rates-from {args.rates_from}: no rates/ folder there")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.figure_only:
        figure(json.loads(path.read_text()), args.out / "figure1")
        return 0
    t0 = time.perf_counter()
    folders = rate_runs(args)
    rec = {"command": " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
           "python": platform.python_version(), "n_mc": args.n_mc, "n_t": args.n_t, "seed": args.seed,
           "fixed_truth": {s: fixed_truth(folders[s]) for s in SETTINGS}, "two_point": bounds(args)}
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    atomic_write_json(path, rec)
    figure(rec, args.out / "figure1")
    print(f"wrote {path} and figure1.png/.pdf in {rec['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

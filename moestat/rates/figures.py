"""Paper-style convergence figures: log-log loss against n, one colour per router.

Each panel shows, for every router, the mean loss over replicates with error bars of two
standard deviations (the style of Figure 1 of Nguyen et al. (2024)), the fitted line of the log-of-mean regression
over the declared window with its slope and 95% interval in the legend, and a dashed grey line
with the theorem's predicted slope (anchored at the first fitted mean).  On a log axis a lower
bar ``mean - 2 sd <= 0`` cannot be drawn; such bars are truncated at ``mean / 20`` and the
truncation is said in the caption of the docs, not hidden.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["ROUTER_COLOURS", "LOSS_LABELS", "plot_convergence", "RedrawPlan", "prepare_redraw", "draw_redraw", "redraw",
           "COLUMN_WIDTH_IN"]

#: One colour per router (colour-blind safe pair for the two cosine routers).
ROUTER_COLOURS = {"perturbed": "#0072B2", "cosine": "#D55E00", "linear": "#009E73"}
ROUTER_LABELS = {"perturbed": "perturbed cosine", "cosine": "vanilla cosine", "linear": "linear (softmax)"}
#: Axis labels of the loss columns.
LOSS_LABELS = {
    "voronoi": "Voronoi loss",
    "voronoi_direction": "Voronoi loss (direction only)",
    "param_single": "param. error, single-atom cells",
    "param_multi": "param. error, multi-atom cells",
    "mass": "mass error",
    "regression_l2": r"$\|g_{\hat G_n}-g_{G_*}\|_{L^2(\mu)}$",
}
#: Width of one column of a two-column paper, in inches.
COLUMN_WIDTH_IN = 3.4


def _frac(p: float) -> str:
    known = {-0.5: "-1/2", -0.25: "-1/4", 0.0: "0"}
    return known.get(round(p, 6), f"{p:g}")


def _panel(ax, df, fits_by_key: dict, loss: str, routers: Sequence[str], setting: str) -> None:
    from moestat.rates.fit import aggregate

    anchored = set()
    for router in routers:
        agg = [a for a in aggregate(df, loss, router) if a["count"] > 0 and a["mean"] > 0]
        if not agg:
            continue
        colour = ROUTER_COLOURS.get(router, None)
        n = np.array([a["n"] for a in agg], float)
        m = np.array([a["mean"] for a in agg])
        sd = np.nan_to_num(np.array([a["std"] for a in agg]))
        lower = np.minimum(2 * sd, m - m / 20.0)
        ax.errorbar(n, m, yerr=[lower, 2 * sd], fmt="o", ms=3, color=colour, capsize=2, lw=0.8, elinewidth=0.7)
        fit = fits_by_key.get((router, loss))
        label = ROUTER_LABELS.get(router, router)
        if fit and fit.get("slope") is not None:
            lo, hi = fit["window"]
            xs = np.exp(np.linspace(math.log(lo), math.log(hi), 20))
            lm = fit["log_mean"]
            ax.plot(xs, np.exp(lm["intercept"]) * xs ** lm["slope"], "-", color=colour, lw=1.1,
                    label=f"{router}: {fit['slope']:.2f} [{fit['ci_low']:.2f}, {fit['ci_high']:.2f}]")
            p = fit.get("predicted")
            if p is not None and p not in anchored:
                anchored.add(p)
                x0, y0 = n[0], m[0] * 1.6
                xs_t = np.array([n[0], n[-1]])
                ax.plot(xs_t, y0 * (xs_t / x0) ** p, "--", color="0.45", lw=0.9, label=f"theory $n^{{{_frac(p)}}}$")
        else:
            ax.plot([], [], "o", color=colour, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sample size $n$")
    ax.set_ylabel(LOSS_LABELS.get(loss, loss))
    from matplotlib.ticker import NullFormatter

    ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide on short ranges
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="major", lw=0.3, alpha=0.5)
    ax.legend(fontsize=5.5, frameon=False, loc="best", handlelength=1.5)


def plot_convergence(
    df,
    fits: Sequence[dict[str, Any]],
    out_stem: str | Path,
    *,
    losses: Sequence[str] = ("voronoi",),
    routers: Sequence[str] | None = None,
    title: str | None = None,
) -> list[Path]:
    """Draw the convergence figure and write ``<out_stem>.pdf`` and ``<out_stem>.png``.

    Parameters
    ----------
    df : pandas.DataFrame
        Results (see :func:`moestat.rates.store.read_results`).
    fits : sequence of dict
        Fit entries (``summary.json["fits"]``); used for the lines and legend, never refitted.
    out_stem : path
        Output path without suffix.
    losses : sequence of str
        One panel per loss; one panel is one paper column wide, several panels span a page.
    routers : sequence of str, optional
        Default: every router in ``df``.
    title : str, optional
        Figure title.

    Returns
    -------
    list of Path
        The PDF and PNG paths.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from moestat.io import atomic_savefig

    routers = list(routers) if routers is not None else sorted(df["router"].unique(), key=lambda r: list(ROUTER_COLOURS).index(r) if r in ROUTER_COLOURS else 99)
    losses = [l for l in losses if l in df.columns and np.isfinite(df[l].to_numpy(float)).any()]
    if not losses:
        raise ValueError("nothing to plot: none of the requested losses has finite values")
    ncols = min(len(losses), 3)
    nrows = math.ceil(len(losses) / ncols)
    width = COLUMN_WIDTH_IN if ncols == 1 else 2.3 * ncols
    setting = str(df["setting"].iloc[0]) if len(df) else ""
    with plt.rc_context({"font.size": 7, "axes.labelsize": 7, "xtick.labelsize": 6, "ytick.labelsize": 6, "pdf.fonttype": 42}):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width, 2.5 * nrows), squeeze=False)
        by_key = {(f["router"], f["loss"]): f for f in fits}
        for ax, loss in zip(axes.flat, losses):
            _panel(ax, df, by_key, loss, routers, setting)
        for ax in list(axes.flat)[len(losses):]:
            ax.set_visible(False)
        if title:
            fig.suptitle(title, fontsize=7)
        fig.tight_layout()
        out_stem = Path(out_stem)
        paths = [atomic_savefig(fig, out_stem.with_suffix(".pdf")), atomic_savefig(fig, out_stem.with_suffix(".png"), dpi=200)]
        plt.close(fig)
    return paths


@dataclass(frozen=True)
class RedrawPlan:
    """A checked request to re-draw a rates run (what :func:`prepare_redraw` returns).

    Attributes
    ----------
    df : pandas.DataFrame
        ``results.csv`` of the run (see :func:`moestat.rates.store.read_results`).
    fits : list of dict or None
        ``summary.json["fits"]`` when the run has one; ``None``: refit in :func:`draw_redraw`.
    out_stem : Path
        Output path without suffix.
    losses : tuple of str
    routers : tuple of str or None
        ``None``: every router in the results.
    """

    df: Any
    fits: list | None
    out_stem: Path
    losses: tuple[str, ...]
    routers: tuple[str, ...] | None


def prepare_redraw(run_dir, *, losses: Sequence[str] = ("voronoi",), routers: Sequence[str] | None = None,
                   name: str = "convergence") -> RedrawPlan:
    """Read and check a run folder for :func:`draw_redraw`; draws nothing.

    Loss and router names accept ``-`` for ``_`` and the router aliases of
    :data:`moestat.model.gates.NAME_ALIASES`.

    Raises
    ------
    FileNotFoundError
        No such folder, or no ``results.csv`` in it.
    ValueError
        An unknown loss or router, a bad ``name``, an empty or foreign results file, losses
        without a finite value, an
        unreadable ``summary.json``, or a folder that cannot be written.
    """
    from moestat.io import ensure_writable_dir
    from moestat.model.gates import canonical_name
    from moestat.rates.config import ROUTERS
    from moestat.rates.store import LOSS_NAMES, read_results

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    clean_losses = []
    for loss in losses:
        try:
            clean_losses.append(canonical_name(loss, LOSS_NAMES))
        except ValueError:
            raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSS_NAMES)}") from None
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"--name must be a plain file stem, got {name!r}")
    df = read_results(run_dir / "results.csv")
    if df.empty:
        raise ValueError(f"{run_dir / 'results.csv'} holds no finished fits")
    if not any(np.isfinite(df[loss].to_numpy(float)).any() for loss in clean_losses):
        raise ValueError(f"nothing to plot: none of {', '.join(clean_losses)} has finite values in {run_dir / 'results.csv'}")
    present = sorted(df["router"].unique())
    clean_routers = None
    if routers is not None:
        clean_routers = []
        for r in routers:
            try:
                r = canonical_name(r, ROUTERS)
            except ValueError:
                pass  # reported just below, with the routers the run has
            if r not in present:
                raise ValueError(f"router {r!r} is not in {run_dir / 'results.csv'} (has {', '.join(present)})")
            clean_routers.append(r)
    summary_path = run_dir / "summary.json"
    fits = None
    if summary_path.exists():
        try:
            fits = json.loads(summary_path.read_text(encoding="utf-8"))["fits"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"cannot read the fits of {summary_path}: {exc!r}") from None
    ensure_writable_dir(run_dir)
    return RedrawPlan(df, fits, run_dir / name, tuple(clean_losses),
                      None if clean_routers is None else tuple(clean_routers))


def draw_redraw(plan: RedrawPlan) -> list[Path]:
    """Draw a checked :class:`RedrawPlan`: refit when the run has no ``summary.json``, then plot.

    Returns
    -------
    list of Path
        The written PDF and PNG.
    """
    from moestat.rates.fit import fit_rates

    df = plan.df
    fits = plan.fits
    if fits is None:
        fits = fit_rates(df, setting=str(df["setting"].iloc[0]), estimator=str(df["estimator"].iloc[0]),
                         losses=list(plan.losses))
    routers = None if plan.routers is None else list(plan.routers)
    return plot_convergence(df, fits, plan.out_stem, losses=list(plan.losses), routers=routers)


def redraw(run_dir, *, losses: Sequence[str] = ("voronoi",), routers: Sequence[str] | None = None, name: str = "convergence") -> list[Path]:
    """Draw ``run_dir/<name>.pdf`` and ``.png`` from a finished (or partial) rates run.

    The same as ``draw_redraw(prepare_redraw(...))``; ``moestat plot`` calls the two steps
    apart, so that only the first one's errors count as bad input.

    Parameters
    ----------
    run_dir : path-like
        A ``--out`` folder of ``moestat rates``.
    losses, routers : sequence of str
        What to draw (routers default to every router in the results).
    name : str
        File stem of the figure.

    Returns
    -------
    list of Path
        The written PDF and PNG.
    """
    return draw_redraw(prepare_redraw(run_dir, losses=losses, routers=routers, name=name))

"""Paper-style convergence figures: log-log loss against n, one colour per router.

Each panel shows, for every router, the mean loss over replicates (the median where the run's
slopes were fitted to it, ``--statistic median``) (markers) with a bar from
the 10th to the 90th percentile of the replicates (a band that is positive wherever the losses
are, so it needs no clipping on a log axis) -- or, with ``--bars sd2``, the bars of Nguyen et al.
(2024), Figure 1: the mean +- 2 standard deviations (:func:`mean_sd_bars`; a lower end at or below
0 cannot be drawn on a log axis and is drawn to the panel's bottom edge, marked by an open
triangle, the note says so) -- the fitted line of the log-of-mean regression over
the declared window, and a dashed grey line with the theorem's predicted slope (starting
:data:`DASHED_LIFT` times above the first curve's marker at the smallest n; the note under the
panels says so).  The legend names each curve in words with its loss (``perturbed cosine, D3``) and
its slope with the 95% interval; a note under the panels says what the markers, bars and lines
are.  Display names come from :mod:`moestat.rates.labels`.  This module draws what it is handed:
it reads no run folder (:mod:`moestat.rates.redraw` does, for ``moestat plot``) and forks no
process (:func:`figure_jobs` hands :func:`moestat.rates.experiment.run_rates` the jobs it draws at
the same time).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from moestat.estimators.choice import LIKELIHOOD_ESTIMATORS
from moestat.io import atomic_savefig
from moestat.rates.labels import (FILE_PREFIX, LOSS_NAMES, axis_label, curve_label, loss_name, run_title, slope_label,
                                  undefined_fits, undefined_reason)

__all__ = ["ROUTER_COLOURS", "BAND", "SD_BARS", "mean_sd_bars", "plot_convergence", "figure_jobs", "plot_run", "draw_convergence", "COLUMN_WIDTH_IN"]

#: One colour per router (colour-blind safe pair for the two cosine routers).
ROUTER_COLOURS = {"perturbed": "#0072B2", "cosine": "#D55E00", "linear": "#009E73"}
#: Percentiles of the replicates spanned by the error bars.
BAND = (10, 90)
#: Standard deviations on either side of the mean spanned by the bars of ``bars = "sd2"`` (Nguyen et
#: al. (2024), Section 5.1: "Error bars representing two standard deviations").
SD_BARS = 2.0
#: Above this many sample sizes per curve the bars and markers are drawn thin and small, so that
#: the fitted line stays visible (the peers' 150 sizes of gmoe-exact).
DENSE_SIZES = 30
#: Width of one column of a two-column paper, in inches.
COLUMN_WIDTH_IN = 3.4


def _frac(p: float) -> str:
    known = {-0.5: "-1/2", -0.25: "-1/4", 0.0: "0"}
    return known.get(round(p, 6), f"{p:g}")


def mean_sd_bars(values: Sequence[float] | np.ndarray, k: float = SD_BARS) -> tuple[float, float, float, float]:
    """The mean of ``values`` and the bar ``mean -+ k * sd`` (``sd`` the sample standard deviation,
    ``ddof = 1``): the bars of Nguyen et al. (2024), Figure 1 (``k = 2``).

    Parameters
    ----------
    values : array-like, shape ``(R,)``
        The replicates' losses at one sample size (``R >= 2``; non-finite values are left out).
    k : float
        Standard deviations on either side (default :data:`SD_BARS`).

    Returns
    -------
    tuple of float
        ``(mean, sd, mean - k sd, mean + k sd)``; the lower end may be at or below 0 (a loss is
        positive, a symmetric bar need not be), which a log axis cannot show.

    Raises
    ------
    ValueError
        Fewer than 2 finite values, or ``k`` not a finite number >= 0.

    Examples
    --------
    >>> mean_sd_bars([1.0, 2.0, 3.0])
    (2.0, 1.0, 0.0, 4.0)
    """
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if v.size < 2:
        raise ValueError(f"mean_sd_bars needs at least 2 finite values, got {v.size}")
    if not (isinstance(k, (int, float)) and math.isfinite(k) and k >= 0):
        raise ValueError(f"k must be a finite number >= 0, got {k!r}")
    m, sd = float(v.mean()), float(v.std(ddof=1))
    return m, sd, m - k * sd, m + k * sd


def _per_n(df, loss: str, router: str, statistic: str = "mean",
           bars: str = "percentile") -> list[tuple[int, float, float, float, int]]:
    """``(n, centre, lower, upper, count)`` per sample size: the mean (or, with ``statistic="median"``,
    the median: the statistic the slopes were fitted to) of the finite, positive values and the
    :data:`BAND` percentiles of the replicates; with ``bars="sd2"`` the mean of the finite values and
    :func:`mean_sd_bars` (the lower end may be <= 0: the caller clips it to the axis)."""
    sub = df[df["router"] == router]
    rows = []
    for n, g in sub.groupby("n"):
        v = g[loss].to_numpy(float)
        if bars == "sd2":
            v = v[np.isfinite(v)]
            if v.size >= 2:
                m, _, lo, hi = mean_sd_bars(v)
                rows.append((int(n), m, lo, hi, int(v.size)))
            continue
        v = v[np.isfinite(v) & (v > 0)]
        if v.size:
            lo, hi = np.percentile(v, BAND)
            rows.append((int(n), float(np.median(v) if statistic == "median" else v.mean()), float(lo), float(hi),
                         int(v.size)))
    return rows


def _statistic(fits_by_key: dict) -> str:
    """What the run's slopes were fitted to per ``n`` (``"mean"`` for fits written before the choice existed)."""
    return next((f["statistic"] for f in fits_by_key.values() if f.get("statistic")), "mean")


def _n_label(n: float, thousands: bool = True) -> str:
    if thousands and n >= 1000 and n % 1000 == 0:
        return f"{int(n) // 1000}k"
    return f"{int(n)}" if float(n).is_integer() else f"{n:g}"


def _x_shown(ns: Sequence[int]) -> list[int]:
    """The sample sizes that get a label: all of them, every other one beyond 8 sizes (or
    neighbours such as 7962 and 12619 run into each other on a column-wide panel)."""
    ns = sorted(set(int(n) for n in ns))
    return ns[::2] if len(ns) > 8 else ns


def _log_ticks(ax, ns: Sequence[int], *, thousands: bool | None = None, y_style: str | None = None) -> None:
    """Sample sizes as x ticks; y ticks at 1, 2, 5 x 10^k (or every integer multiple) when the
    range is short, so that every panel has at least two labelled y ticks.

    One style per figure (a reviewer's rule): ``thousands`` writes ``2k`` for the sizes that are
    multiples of 1000 and is only used when every labelled size >= 1000 is one (else ``2000, 2245``
    instead of ``2k, 2245``); ``y_style`` is ``"plain"`` (``0.05``) or ``"power"`` (``5x10^-2``),
    chosen for all panels of a figure by :func:`_y_style`.  ``None``: decided from this axes alone.
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

    ns = sorted(set(int(n) for n in ns))
    if len(ns) > 12:  # a dense grid (the peers' 150 sizes): decades, or labels would overprint
        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _n_label(x)))
        ax.xaxis.set_minor_locator(NullLocator())
    elif ns:
        shown = set(_x_shown(ns))
        if thousands is None:
            thousands = _thousands_ok(shown)
        ax.xaxis.set_major_locator(FixedLocator(ns))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _n_label(x, thousands) if int(round(x)) in shown else ""))
        ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = ax.get_ylim()
    if y_style is None:
        y_style = _y_style([(lo, hi)])
    if lo > 0 and hi / lo < 100:  # fewer than two decades: label 1, 2, 5 x 10^k (1, 2, ..., 9 if that gives < 2)
        subs: tuple[float, ...] = (1.0, 2.0, 5.0)
        decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
        if sum(lo <= m * 10.0 ** e <= hi for e in decades for m in subs) < 2:
            subs = tuple(float(m) for m in range(1, 10))
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
        ax.set_ylim(lo, hi)
    ax.yaxis.set_major_formatter(FuncFormatter(_y_label if y_style == "power" else _y_plain))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _thousands_ok(shown) -> bool:
    return all(n % 1000 == 0 for n in shown if n >= 1000)


def _y_style(ranges) -> str:
    """``plain`` when every range lies within [1e-3, 1e4) (labels such as 0.05 and 200), else ``power``."""
    return "plain" if all(1e-3 <= lo and hi < 1e4 for lo, hi in ranges) else "power"


def _y_plain(y: float, _pos=None) -> str:
    return f"{y:g}"


def _y_label(y: float, _pos=None) -> str:
    """``10^k`` and ``m x 10^k`` for every value (the ``power`` style of :func:`_log_ticks`)."""
    if y <= 0:
        return ""
    e = int(math.floor(math.log10(y) + 1e-9))
    m = y / 10 ** e
    return f"$10^{{{e}}}$" if abs(m - 1) < 1e-6 else f"${m:g}\\times10^{{{e}}}$"


#: The dashed line of a predicted slope starts this factor above the first curve's first marker
#: that predicts it: above the data, so that it does not hide the markers (the note says so).
DASHED_LIFT = 1.6


def _panel(ax, df, fits_by_key: dict, loss: str, routers: Sequence[str], setting: str,
           voronoi_holds: str | None = None, bars: str = "percentile") -> dict:
    """Draw one loss; returns what was drawn: ``ns``, legend ``handles`` and ``labels`` (one entry
    per router: its marker, bar and fit line as one key; the theorem's line last), ``fit`` and
    ``theorem`` (whether such lines were drawn, for the note)."""
    from matplotlib import patheffects

    from moestat.plotting import curve_handle

    anchored: dict = {}
    upper: set = set()  # exponents stated as upper bounds (tested one-sided)
    ns_all: list[int] = []
    handles, labels = [], []
    drew_fit = False
    clipped: list[tuple[float, float, str]] = []  # (n, mean, colour) of sd2 bars whose lower end is <= 0
    likelihood = bool("estimator" in df.columns and len(df) and str(df["estimator"].iloc[0]) in LIKELIHOOD_ESTIMATORS)
    for i, router in enumerate(routers):
        agg = _per_n(df, loss, router, _statistic(fits_by_key), bars)
        if not agg:
            continue
        colour = ROUTER_COLOURS.get(router) or _extra_colour(i)
        n, m, lo, hi, _ = (np.array(c, float) for c in zip(*agg))
        if bars == "sd2":
            lo = _clip_lower(n, m, lo, colour, clipped)
        ns_all += [int(x) for x in n]
        # bars drawn as segments, not yerr: a skewed sample can put its mean outside the band
        dense = n.size > DENSE_SIZES  # e.g. gmoe-exact's 150 sizes: full-size marks would hide the fitted line
        ax.vlines(n, lo, hi, color=colour, lw=0.35 if dense else 0.7, alpha=0.6 if dense else 1.0)
        if not dense:
            ax.plot(np.r_[n, n], np.r_[lo, hi], "_", color=colour, ms=4, mew=0.7)
        ax.plot(n, m, "o", ms=1.6 if dense else 3, color=colour)
        fit = fits_by_key.get((router, loss))
        label = curve_label(router, loss, setting, likelihood=likelihood, holds=voronoi_holds)
        has_fit = bool(fit and fit.get("slope") is not None)
        if has_fit:
            drew_fit = True
            w0, w1 = fit["window"]
            xs = np.exp(np.linspace(math.log(w0), math.log(w1), 20))
            lm = fit["log_mean"]
            # over a dense cloud of points: above the markers and bars, with a white edge, to stay visible
            over = dict(zorder=4, path_effects=[patheffects.withStroke(linewidth=2.3, foreground="white")]) if dense else {}
            ax.plot(xs, np.exp(lm["intercept"]) * xs ** lm["slope"], "-", color=colour, lw=1.1, **over)
            label = f"{label}: {slope_label(fit['slope'], fit['ci_low'], fit['ci_high'])}"
            p = fit.get("predicted")
            if p is not None and p not in anchored:
                x0, y0 = n[0], m[0] * DASHED_LIFT
                xs_t = np.array([n[0], n[-1]])
                ax.plot(xs_t, y0 * (xs_t / x0) ** p, "--", color="0.45", lw=0.9)
                anchored[p] = []
            kind = _prediction_kind(router, loss, fit)
            if p is not None and kind not in anchored[p]:
                anchored[p].append(kind)
            if p is not None and fit.get("sided") == "upper":  # tested one-sided: say so beside the line
                upper.add(p)
        handles.append(curve_handle(colour, line="-" if has_fit else None, bar=True, ms=3))
        labels.append(label)
    for p, kinds in anchored.items():  # one dashed line per exponent, named by every kind that predicts it
        handles.append(curve_handle("0.45", marker=None, line="--", lw=0.9))
        labels.append((f"{' and '.join(kinds)}: slope {_frac(p)}" + (", upper bound" if p in upper else "")).replace("-", "\u2212"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sample size $n$")
    ax.set_ylabel(_axis_label(axis_label(loss, setting, likelihood, voronoi_holds)))
    ax.grid(True, which="major", lw=0.3, alpha=0.5)
    if clipped:  # after the autoscale: those bars run down to the bottom edge, an open triangle there
        bottom = ax.get_ylim()[0]
        for x, mean, colour in clipped:
            ax.vlines([x], bottom, mean, color=colour, lw=0.7)
            ax.plot([x], [bottom], "v", mfc="none", mec=colour, ms=3, mew=0.6, clip_on=False)
        ax.set_ylim(bottom=bottom)
    return {"ns": ns_all, "handles": handles, "labels": labels, "fit": drew_fit,
            "predictions": {kind for kinds in anchored.values() for kind in kinds},
            "clipped": bool(clipped)}


def _clip_lower(n: np.ndarray, m: np.ndarray, lo: np.ndarray, colour: str, clipped: list) -> np.ndarray:
    """The lower ends of mean +- 2 SD bars for a log axis: an end at or below 0 is set to the mean
    (nothing is drawn below the marker yet) and appended to ``clipped`` as ``(n, mean, colour)``;
    :func:`_panel` draws that bar down to the panel's bottom edge once the limits are known."""
    bad = ~(lo > 0)
    clipped.extend((float(x), float(mm), colour) for x, mm in zip(n[bad], m[bad]))
    return np.where(bad, m, lo)


#: Characters of a y-label's line: a 2.3-inch panel's axes (about 1.5 inches tall) hold about 30
#: characters of the 7-point label font; a longer line ran up into the figure's title (param_multi's).
Y_LABEL_CHARS = 28


def _axis_label(text: str) -> str:
    """``text`` broken at spaces into lines of at most :data:`Y_LABEL_CHARS` characters -- two lines of
    about equal length where two suffice, so that no word hangs alone on a line; a label with mathtext
    (``$``) is kept whole, since a break inside ``$...$`` would split the formula."""
    import textwrap

    if "$" in text or len(text) <= Y_LABEL_CHARS:
        return text
    splits = [i for i, ch in enumerate(text) if ch == " "]
    if not splits:  # one word: nothing to break at
        return text
    best = min(splits, key=lambda i: max(i, len(text) - i - 1))
    if max(best, len(text) - best - 1) <= Y_LABEL_CHARS:
        return text[:best] + "\n" + text[best + 1:]
    return "\n".join(textwrap.wrap(text, Y_LABEL_CHARS))


def _below_xlabel(fig):
    """The offset (a transform in inches) from an axes' bottom edge to just under its x-label.

    Computed from the rc parameters in force (tick length and pad, tick-label and label sizes,
    the label pad), so that it holds whatever the axes' height: no drawing is needed to measure it.
    """
    import matplotlib as mpl
    from matplotlib.font_manager import FontProperties
    from matplotlib.transforms import ScaledTranslation

    rc = mpl.rcParams
    size = lambda key: FontProperties(size=rc[key]).get_size_in_points()  # noqa: E731 - "small" and the like resolved
    points = (max(rc["xtick.major.size"], 0) + rc["xtick.major.pad"] + 1.2 * size("xtick.labelsize")
              + rc["axes.labelpad"] + 1.4 * size("axes.labelsize") + 1.0)  # 1.2 / 1.4: line height, $n$'s descender
    return ScaledTranslation(0.0, -points / 72.0, fig.dpi_scale_trans)


def _prediction_kind(router: str, loss: str, fit: dict) -> str:
    """How a curve's predicted slope is named: ``"predicted"`` for a loss that a scenario file
    declares with its own ``predicted_exponent`` -- its author's statement, a theorem's exponent or,
    as for the catalogue's ``laplace-gmoe``, a slope read off a paper's figure -- and ``"theorem"``
    otherwise: a built-in loss's exponent (:func:`moestat.rates.fit.predicted_exponent`) or a
    theorem named by default for a file that states none (``prediction_source``)."""
    declared = str(router).startswith(FILE_PREFIX) and loss not in LOSS_NAMES and not fit.get("prediction_source")
    return "predicted" if declared else "theorem"


def _extra_colour(i: int) -> str:
    from moestat.plotting import PALETTE

    return PALETTE[(3 + i) % len(PALETTE)]  # past the three router colours


def _note(reps: int | str, drew_fit: bool, predictions: set, statistic: str = "mean", bars: str = "percentile",
          clipped: bool = False) -> str:
    """What the markers, bars and lines are; a line is named only when some panel draws it
    (``reps``: a count, or ``"19 to 20"`` for an incomplete run; ``predictions``: the kinds of
    dashed line drawn, ``{"theorem", "predicted"}`` or a part of it; ``statistic``: what the markers
    and the solid line are of, ``"mean"`` or ``"median"``)."""
    if bars == "sd2":
        parts = [f"markers: mean over {reps} replicate{'s' if reps != 1 else ''}",
                 f"bars: mean +- {SD_BARS:g} standard deviations of the replicates"
                 + (" (a lower end at or below 0 is drawn to the bottom edge, open triangle)" if clipped else "")]
    else:
        parts = [f"markers: {statistic} over {reps} replicate{'s' if reps != 1 else ''}",
                 f"bars: {BAND[0]}th to {BAND[1]}th percentile of the replicates"]
    if drew_fit:
        parts.append(f"solid: least-squares fit of log {statistic} on log n (slope, 95% CI)")
    kinds = set(predictions)
    # where the dashed line starts, so that no reader takes its height for a prediction too
    where = f", drawn from {DASHED_LIFT:g} x the first curve's {statistic} at its smallest n (its height is arbitrary)"
    if kinds == {"theorem"}:
        parts.append("dashed: the theorem's slope" + where)
    elif kinds == {"predicted"}:
        parts.append("dashed: the slope the scenario file predicts" + where)
    elif kinds:
        parts.append("dashed: the theorem's or the scenario file's predicted slope" + where)
    return "; ".join(parts)


#: The drawing functions' default files (``moestat plot OUT`` redrawing a run): a PDF (vector, for papers) and a 200-dpi PNG.
FIGURE_FORMATS = ("pdf", "png")
#: The files of a rates run's figures (``moestat rates --figure-formats``, :func:`moestat.rates.run_rates`):
#: the PNG only: the four files of both formats of both figures take about a fifth of a quick run's
#: time, the PDFs (font subsetting) the larger part; ``--figure-formats pdf,png``
#: writes the vector figure a paper needs, and ``moestat plot`` draws both formats later.
DEFAULT_FIGURE_FORMATS = ("png",)
#: Every format ``--figure-formats`` accepts.
KNOWN_FIGURE_FORMATS = ("pdf", "png", "svg")


def check_figure_formats(formats: Sequence[str] | str) -> tuple[str, ...]:
    """``formats`` as a tuple without repeats (a comma list is split; ``"none"`` or ``""``: no file).

    Raises
    ------
    ValueError
        A format not in :data:`KNOWN_FIGURE_FORMATS` (one line, naming it).
    """
    if isinstance(formats, str):
        formats = [] if formats.strip() in ("", "none") else formats.split(",")
    out: list[str] = []
    for f in formats:
        f = str(f).strip().lower()
        if f not in KNOWN_FIGURE_FORMATS:
            raise ValueError(f"figure format must be among {', '.join(KNOWN_FIGURE_FORMATS)} (or none), got {f!r}")
        if f not in out:
            out.append(f)
    return tuple(out)


def plot_convergence(
    df,
    fits: Sequence[dict[str, Any]],
    out_stem: str | Path,
    *,
    losses: Sequence[str] = ("voronoi",),
    routers: Sequence[str] | None = None,
    title: str | None = None,
    formats: Sequence[str] = FIGURE_FORMATS,
    voronoi_holds: str | None = None,
    not_drawn: Sequence[str] = (),
    bars: str = "percentile",
) -> list[Path]:
    """Draw the convergence figure once and write it as ``<out_stem>.<format>`` per format
    (default ``<out_stem>.pdf`` and ``<out_stem>.png``).

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
        Ignored when it is the internal ``"<setting>-specified, <estimator>"`` tag that
        :func:`moestat.rates.run_rates` passes: the title is then written in words from the
        results (:func:`moestat.rates.labels.run_title`).  Any other string is used as given.
    formats : sequence of {"pdf", "png", "svg"}
        The files to write (:data:`FIGURE_FORMATS` by default); empty: nothing is drawn.
    voronoi_holds : str, optional
        The name of the loss the ``voronoi`` column holds, when the run knows it (a mixture-noise
        scenario file: its first declared loss); default: from the setting and the estimator
        (:func:`moestat.rates.labels.voronoi_variant`).
    not_drawn : sequence of str
        Losses left out with their reason (``"param_multi (no shared cells in an exact fit)"``),
        named in the note under the panels so that no panel is missing unexplained.
    bars : {"percentile", "sd2"}
        The error bars (:attr:`moestat.rates.config.AnalysisSpec.bars`): the :data:`BAND`
        percentiles, or the mean +- :data:`SD_BARS` standard deviations (:func:`mean_sd_bars`).

    Returns
    -------
    list of Path
        The files written, in the order of ``formats``.
    """
    formats = check_figure_formats(formats)
    if not formats:
        return []
    import matplotlib.pyplot as plt

    fig = draw_convergence(df, fits, losses=losses, routers=routers, title=title, voronoi_holds=voronoi_holds,
                           not_drawn=not_drawn, bars=bars)
    try:
        out_stem = Path(out_stem)
        with plt.rc_context({"pdf.fonttype": 42}):  # TrueType in the PDF: editable text, as journals ask
            return [atomic_savefig(fig, out_stem.with_suffix("." + f), **({"dpi": 200} if f == "png" else {}))
                    for f in formats]
    finally:
        plt.close(fig)


def figure_jobs(df, fits: Sequence[dict[str, Any]], out_dir: str | Path, *, headline: Sequence[str],
                routers: Sequence[str], title: str | None = None, formats: Sequence[str] = FIGURE_FORMATS,
                voronoi_holds: str | None = None, suffix: str = "",
                bars: str = "percentile") -> list[Callable[[], list[Path]]]:
    """The figures of a rates run as jobs without arguments, each a :func:`plot_convergence`:
    ``convergence`` (the ``headline`` losses) and ``convergence_all`` (every loss of the first
    router that has a slope in ``fits``; no job when none has); none when ``formats`` is empty.
    ``title``, ``formats``, ``voronoi_holds``, ``bars`` as :func:`plot_convergence`; ``suffix`` ends both
    file stems (``convergence_median``: a re-analysis beside the run's first one).

    Why jobs: :func:`moestat.rates.experiment.run_rates` draws them at the same time, the second in
    a forked child (:func:`moestat.rates.forked.draw_in_fork`: about 1 CPU-s each on the project's
    2-core machine, after the sweep, when the second core is otherwise idle); this module draws,
    and forks nothing (:func:`plot_run`).  Each job writes its files atomically, so running one
    again gives the same files."""
    if not check_figure_formats(formats):
        return []
    every = [f["loss"] for f in fits if f["router"] == routers[0] and f["slope"] is not None]
    missing = tuple(f"{f['loss']} ({undefined_reason(f['loss'], str(f.get('setting')))})"
                    for f in undefined_fits(fits) if f["router"] == routers[0])
    drawn = [(f"convergence{suffix}", list(headline), ())] + ([(f"convergence_all{suffix}", every, missing)] if every else [])
    return [functools.partial(plot_convergence, df, fits, Path(out_dir) / stem, losses=losses, routers=routers,
                              title=title, formats=formats, voronoi_holds=voronoi_holds, not_drawn=not_drawn,
                              bars=bars)
            for stem, losses, not_drawn in drawn]


def plot_run(df, fits: Sequence[dict[str, Any]], out_dir: str | Path, *, headline: Sequence[str], routers: Sequence[str],
             title: str | None = None, formats: Sequence[str] = FIGURE_FORMATS, voronoi_holds: str | None = None,
             suffix: str = "", bars: str = "percentile") -> None:
    """The figures of a rates run (those :func:`moestat.rates.run_rates` draws): every job of
    :func:`figure_jobs` (same arguments), one after the other in this process.  The files are
    those of ``run_rates``, which draws the two at the same time."""
    for job in figure_jobs(df, fits, out_dir, headline=headline, routers=routers, title=title, formats=formats,
                           voronoi_holds=voronoi_holds, suffix=suffix, bars=bars):
        job()


def draw_convergence(df, fits: Sequence[dict[str, Any]], *, losses: Sequence[str] = ("voronoi",),
                     routers: Sequence[str] | None = None, title: str | None = None, voronoi_holds: str | None = None,
                     not_drawn: Sequence[str] = (), bars: str = "percentile"):
    """The figure of :func:`plot_convergence`, not saved (a :class:`matplotlib.figure.Figure`;
    the caller closes it).  Same parameters."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    routers = list(routers) if routers is not None else sorted(df["router"].unique(), key=lambda r: list(ROUTER_COLOURS).index(r) if r in ROUTER_COLOURS else 99)
    losses = [l for l in losses if l in df.columns and np.isfinite(df[l].to_numpy(float)).any()]
    if not losses:
        raise ValueError("nothing to plot: none of the requested losses has finite values")
    ncols = min(len(losses), 3)
    nrows = math.ceil(len(losses) / ncols)
    width = COLUMN_WIDTH_IN if ncols == 1 else 3.1 * ncols
    setting = str(df["setting"].iloc[0]) if len(df) else ""
    estimator = str(df["estimator"].iloc[0]) if len(df) else ""
    if title is None or title == f"{setting}-specified, {estimator}":
        title = run_title(loss_name(losses[0]) if len(losses) == 1 else "Losses", setting, estimator)
    sizes = df.groupby(["router", "n"]).size() if len(df) else None
    lo_reps, reps = (int(sizes.min()), int(sizes.max())) if sizes is not None else (0, 0)
    reps = f"{lo_reps} to {reps}" if lo_reps != reps else reps  # an incomplete run: say so, not the most
    panel_h, legend_h = 2.3, 0.11 * (len(routers) + 1) + 0.15
    # the layout is this function's (tight_layout below) whatever a matplotlibrc says: no layout
    # engine is attached to the figure, so that the last line can leave it without one
    with plt.rc_context({"font.size": 7, "axes.labelsize": 7, "xtick.labelsize": 6, "ytick.labelsize": 6, "pdf.fonttype": 42,
                         "figure.autolayout": False, "figure.constrained_layout.use": False}):
        from moestat.plotting import legend, panel_grid, tight_layout

        fig = plt.figure(figsize=(width, (panel_h + legend_h) * nrows + 0.4))
        # no blank slot: a short last row is centred (moestat.plotting.panel_grid)
        axes = panel_grid(fig, len(losses), ncols)
        by_key = {(f["router"], f["loss"]): f for f in fits}
        drawn = [_panel(ax, df, by_key, loss, routers, setting, voronoi_holds, bars) for ax, loss in zip(axes, losses)]
        # one tick style for the whole figure: 2k everywhere or 2000 everywhere, 0.05 or 5x10^-2
        shown = {n for d in drawn for n in _x_shown(d["ns"])}
        y_style = _y_style([ax.get_ylim() for ax in axes])
        below = _below_xlabel(fig)
        for ax, d in zip(axes, drawn):
            _log_ticks(ax, d["ns"], thousands=_thousands_ok(shown), y_style=y_style)
            # below the axes and their x-label, so that no legend ever covers the data or the label:
            # anchored a fixed distance under the axes, not a fraction of their height, which the
            # layout below changes (a fraction put the legend on the label and left a blank band)
            legend(ax, d["handles"], d["labels"], fontsize=5.5 if ncols == 1 else 5.2, frameon=False, loc="upper center",
                   bbox_to_anchor=(0.5, 0.0), bbox_transform=ax.transAxes + below, handlelength=2.2, borderaxespad=0.0)
        note = _note(reps, any(d["fit"] for d in drawn), set().union(*(d["predictions"] for d in drawn)),
                     _statistic(by_key), bars, any(d["clipped"] for d in drawn))
        if not_drawn:
            note += "; not drawn: " + ", ".join(not_drawn)
        import textwrap

        note_lines = textwrap.wrap(note, 90 if ncols == 1 else 170)
        # a note of more than two lines makes the figure taller, not the panels shorter
        extra = 0.09 * max(0, len(note_lines) - 2)
        if extra:
            fig.set_figheight(fig.get_figheight() + extra)
        head = title.replace(": ", ":\n", 1) if ncols == 1 else title  # one column: the words, then the setting
        title_lines = [w for part in head.split("\n") for w in textwrap.wrap(part, 62 if ncols == 1 else 130)]
        # The title's top at most 0.08 inch under the figure's edge: tight_layout keeps the panels
        # one title height and one pad (about 0.1 inch) below the edge, and matplotlib's default
        # place, 2% of the height down, sank the title into the top row of a tall grid (11 panels:
        # onto the middle frame).  A figure of up to 4 inches keeps the default place.
        fig.suptitle("\n".join(title_lines), fontsize=7, y=max(0.98, 1.0 - 0.08 / fig.get_figheight()))
        fig.text(0.5, 0.004, "\n".join(note_lines), ha="center", va="bottom", fontsize=5, color="0.3")
        tight_layout(fig, rect=(0, 0.09 * len(note_lines) / ((panel_h + legend_h) * nrows + extra), 1, 1))  # each box measured once
        # Laid out: no engine left on the figure.  tight_layout leaves a placeholder engine, and
        # savefig, finding an engine, first draws the whole figure once more with rendering off
        # (every tick and text laid out again) before it renders -- for the same pixels: the
        # placeholder changes nothing.  That pass is about 15% of convergence_all.png, the last
        # step of a rates run; the PNG bytes are the same without it
        # (tests/rates/test_figures.py).
        fig.set_layout_engine(None)
    return fig

"""House style of every figure and table the doors write: one module, so every door follows it.

What the figures must do, and the helper here that does it:

* one colour per curve, its markers, bars and fit line in one legend entry: :data:`PALETTE`,
  :func:`colours`, :func:`curve_handle` (a tuple handle drawn as one legend key) and :func:`legend`;
* no blank panel slots: :func:`panel_grid` centres a short last row instead of leaving empty axes;
* print size: :func:`save_figure` picks the resolution that makes the PNG at least
  ``min_px`` pixels wide (:data:`PRINT_WIDTH_PX` for the real-data figures);
* synthetic data said in the title: :data:`SYNTHETIC` starts the title of a demo task's figure;
* one seed is "(1 seed)", never "± nan" or "± 0": :func:`mean_sd`;
* :func:`figure_problems` checks a drawn figure against the rules that can be checked (empty axes,
  legend entries, width, mixed tick-label styles); the tests use it on every door's figure.

matplotlib is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

from moestat.io import atomic_savefig

__all__ = ["PALETTE", "PRINT_WIDTH_PX", "SYNTHETIC", "colours", "curve_handle", "legend", "mean_sd", "panel_grid",
           "save_figure", "tick_style", "figure_problems", "tight_layout"]

#: Okabe & Ito's colour-blind safe palette (yellow left out: it vanishes on white), the first
#: three in the order of :data:`moestat.rates.figures.ROUTER_COLOURS`.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999")
#: Width of a print figure in pixels (the real-data figures are written at least this wide).
PRINT_WIDTH_PX = 1200
#: The words a figure of the synthetic demo task starts its title with.
SYNTHETIC = "SYNTHETIC DEMO"


def colours(n: int) -> list[str]:
    """``n`` distinct colours: :data:`PALETTE`, then matplotlib's ``tab20`` beyond eight."""
    if n <= len(PALETTE):
        return list(PALETTE[:n])
    import matplotlib

    extra = [matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab20"].colors]
    return list(PALETTE) + extra[: n - len(PALETTE)]


def curve_handle(colour: str, *, marker: str | None = "o", line: str | None = "-", bar: bool = False,
                 band: bool = False, ms: float = 3.5, lw: float = 1.1) -> tuple:
    """A legend handle showing a curve's marker, line, error bar and band as ONE key.

    Draw legends of such handles with :func:`legend` (or pass
    ``handler_map={tuple: HandlerTuple(ndivide=1)}``); the parts are drawn on top of each other.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    parts: list[Any] = []
    if band:
        parts.append(Patch(facecolor=colour, alpha=0.2, edgecolor="none"))
    if line:
        parts.append(Line2D([], [], color=colour, ls=line, lw=lw))
    if bar:
        parts.append(Line2D([], [], color=colour, ls="none", marker="|", ms=8, mew=0.8))
    if marker:
        parts.append(Line2D([], [], color=colour, ls="none", marker=marker, ms=ms))
    return tuple(parts)


def legend(ax_or_fig: Any, handles: Sequence[Any], labels: Sequence[str], **kwargs: Any) -> Any:
    """``legend`` with the tuple handles of :func:`curve_handle` drawn as one key each."""
    from matplotlib.legend_handler import HandlerTuple

    kwargs.setdefault("handler_map", {tuple: HandlerTuple(ndivide=1, pad=0.0)})
    return ax_or_fig.legend(list(handles), list(labels), **kwargs)


def mean_sd(mean: float, sd: float | None, n: int, digits: int = 4, *, fmt: str = "f", pm: str = "±") -> str:
    """``"0.8123 ± 0.0100"`` over ``n >= 2`` seeds; ``"0.8123 (1 seed)"`` for one seed.

    A spread over one value is not zero and not unknown, it does not exist: the table says so
    instead of writing ``± nan`` or ``± 0``.  A non-finite mean is ``"-"``.
    """
    if mean is None or not math.isfinite(float(mean)):
        return "-"
    m = f"{float(mean):.{digits}{fmt}}"
    if n <= 1:
        return f"{m} (1 seed)"
    if sd is None or not math.isfinite(float(sd)):
        return f"{m} (sd n/a)"
    return f"{m} {pm} {float(sd):.{digits}{fmt}}"


def panel_grid(fig: Any, n: int, ncols: int, **subplot_kw: Any) -> list[Any]:
    """``n`` axes on a grid of ``ncols`` columns with no blank slot: a short last row is centred.

    Each panel spans two columns of a ``2 * ncols`` grid, so that a last row of ``r < ncols``
    panels can start half a panel in.  Returns the axes in reading order.
    """
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    gs = fig.add_gridspec(nrows, 2 * ncols)
    axes = []
    for i in range(n):
        row, col = divmod(i, ncols)
        in_row = min(ncols, n - row * ncols)
        start = (ncols - in_row) + 2 * col
        axes.append(fig.add_subplot(gs[row, start:start + 2], **subplot_kw))
    return axes


def tight_layout(fig: Any, **kwargs: Any) -> None:
    """``fig.tight_layout(**kwargs)`` with each artist's layout box measured once, not twice.

    With ``rect``, matplotlib's tight layout (``matplotlib._tight_layout.get_tight_layout_figure``)
    runs its adjustment twice, and each pass measures the tight box of every axes again -- every
    tick, tick label and legend laid out anew -- although nothing moves between the passes (the
    subplot parameters are applied after the second).  Here the boxes of the first pass are kept
    for the second (:func:`matplotlib.artist._get_tightbbox_for_layout_only` memoised for the
    duration of the call), so the layout is the same and the figure's bytes are too (tested), at
    about half the cost: a third of the convergence figure's drawing, the last step of the rates
    door's main job.  Where that private function is not there (another matplotlib),
    this is the plain ``fig.tight_layout``.
    """
    import matplotlib.artist as martist

    measure = getattr(martist, "_get_tightbbox_for_layout_only", None)
    if measure is None:
        fig.tight_layout(**kwargs)
        return
    boxes: dict = {}

    def measured_once(obj, *args, **kw):
        key = (id(obj), tuple(id(a) for a in args), tuple(sorted((k, id(v)) for k, v in kw.items())))
        if key not in boxes:
            # obj and the arguments kept alive: their ids cannot be reused during the call
            boxes[key] = (obj, args, kw, measure(obj, *args, **kw))
        box = boxes[key][3]
        return None if box is None else box.frozen()

    martist._get_tightbbox_for_layout_only = measured_once
    try:
        fig.tight_layout(**kwargs)
    finally:
        martist._get_tightbbox_for_layout_only = measure


def _draws_something(ax: Any) -> bool:
    return ax.get_visible() and bool(ax.lines or ax.images or ax.collections or ax.patches or ax.texts or ax.tables)


def save_figure(fig: Any, stem: str | Path, formats: Iterable[str] = ("pdf", "png"), *, dpi: int = 200,
                min_px: int | None = None, **kwargs: Any) -> list[Path]:
    """Write ``<stem>.<fmt>`` for each format atomically; PNGs at least ``min_px`` pixels wide.

    The resolution is raised (never lowered below ``dpi``) until the figure's width in inches
    times it reaches ``min_px``.  ``pdf.fonttype`` 42 (TrueType: editable text, as journals ask).
    """
    import matplotlib.pyplot as plt

    stem = Path(stem)
    if min_px:
        dpi = max(dpi, math.ceil(min_px / fig.get_figwidth()))
    with plt.rc_context({"pdf.fonttype": 42}):
        return [atomic_savefig(fig, stem.with_name(f"{stem.name}.{fmt}"), dpi=dpi, **kwargs) for fmt in formats]


_POWER = re.compile(r"10\^|\\times|10\^\{")
_SUFFIX = re.compile(r"^[\u2212-]?[\d.]+\s*[kKM]$")
_PLAIN = re.compile(r"^[\u2212-]?[\d.,]+$")


def tick_style(text: str) -> str | None:
    """The style of a numeric tick label: ``power`` (``10^k``, ``2x10^k``), ``suffix`` (``2k``),
    ``plain`` (``2000``, ``0.5``); ``None`` for a label that is not a number."""
    t = text.strip().strip("$")
    if not t:
        return None
    if _POWER.search(t):
        return "power"
    if _SUFFIX.match(t):
        return "suffix"
    if _PLAIN.match(t):
        return "plain"
    return None


def figure_problems(fig: Any, *, min_px: int | None = None, dpi: float | None = None, curves: int | None = None,
                    title_contains: str | None = None) -> list[str]:
    """What a reviewer would reject in ``fig``, as sentences (empty: nothing found).

    Checks: axes that draw nothing (blank slots); numeric tick labels of more than one style on
    the x axes of the figure, or on its y axes (``2k`` beside ``2245``; ``0.05`` in one panel and
    ``5x10^-2`` in the next); with ``min_px`` and ``dpi``, a figure narrower than ``min_px`` pixels; with
    ``curves``, every legend having that many entries; with ``title_contains``, the figure's
    title (suptitle, or else every axes title) containing those words.
    """
    problems = []
    fig.canvas.draw()
    for i, ax in enumerate(fig.axes):
        if not _draws_something(ax) and not _is_colorbar(ax):
            problems.append(f"axes {i} is empty (a blank slot)")
    for direction in ("x", "y"):  # every x axis of the figure in one style, every y axis in one style
        styles: dict[str, str] = {}
        for ax in fig.axes:
            if _is_colorbar(ax):
                continue
            axis = ax.xaxis if direction == "x" else ax.yaxis
            for t in axis.get_ticklabels(which="both"):
                text = t.get_text()
                s = tick_style(text) if t.get_visible() and text else None
                if s:
                    styles.setdefault(s, text)
        if "suffix" in styles and "plain" in styles and _number(styles["plain"]) < 1000:
            # 500, 1k, 2k: one style (sizes under 1000 need no suffix); a plain 2245 beside 2k would not be
            plain = [t.get_text() for ax in fig.axes for t in (ax.xaxis if direction == "x" else ax.yaxis).get_ticklabels()
                     if tick_style(t.get_text()) == "plain"]
            if all(_number(t) < 1000 for t in plain):
                del styles["plain"]
        if len(styles) > 1:
            problems.append(f"{direction} tick labels in several styles: "
                            + ", ".join(f"{k} ({v!r})" for k, v in sorted(styles.items())))
    if min_px is not None and dpi is not None and fig.get_figwidth() * dpi < min_px:
        problems.append(f"figure {fig.get_figwidth() * dpi:.0f} px wide, less than {min_px}")
    if curves is not None:
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
        if not legends:
            problems.append(f"no legend for {curves} curves")
        for leg in legends:
            if len(leg.get_texts()) != curves:
                problems.append(f"a legend has {len(leg.get_texts())} entries for {curves} curves")
    if title_contains is not None:
        sup = fig._suptitle.get_text() if fig._suptitle is not None else ""
        titles = [sup] if sup else [ax.get_title() for ax in fig.axes if not _is_colorbar(ax)]
        if not titles or not all(title_contains in t for t in titles):
            problems.append(f"title {titles!r} does not say {title_contains!r}")
    return problems


def _number(text: str) -> float:
    try:
        return abs(float(text.strip().strip("$").replace("\u2212", "-").replace(",", "")))
    except ValueError:
        return math.inf


def _is_colorbar(ax: Any) -> bool:
    return getattr(ax, "_colorbar", None) is not None or ax.get_label() == "<colorbar>"

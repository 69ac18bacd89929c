"""Re-drawing a recorded rates run (``moestat plot DIR``): its folder read and checked, then drawn.

:func:`prepare_redraw` reads a run's ``provenance.json``, ``results.csv`` (audited against the
run's own configuration, :func:`moestat.rates.store.read_audited`), ``extras.csv`` and
``summary.json`` and checks what was asked for (bad input: one line, exit 2 at the door);
:func:`draw_redraw` refits where the run has no summary and draws with
:func:`moestat.rates.figures.plot_convergence` (looked up there when drawing).  Why a module of its own: the figures draw what
they are handed, and reading a run folder is the store's business.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from moestat.folder_lock import holder, holder_alive
from moestat.io import check_output_file, ensure_writable_dir
from moestat.model.gates import canonical_name
from moestat.rates.config import ROUTERS, RatesConfig
from moestat.rates.extras import merge_extras
from moestat.rates import figures
from moestat.rates.fit import fit_rates
from moestat.rates.resolve import Experiment
from moestat.rates.store import LOSS_NAMES, SUMMARY_RECOVERY, read_audited, summary_rows_changed

__all__ = ["RedrawPlan", "prepare_redraw", "draw_redraw", "redraw"]


@dataclass(frozen=True)
class RedrawPlan:
    """A checked request to re-draw a rates run (what :func:`prepare_redraw` returns).

    Attributes
    ----------
    df : pandas.DataFrame
        ``results.csv`` of the run, checked against the run's own configuration
        (:func:`moestat.rates.store.read_results`).
    fits : list of dict or None
        ``summary.json["fits"]`` when the run has them; ``None``: refit in :func:`draw_redraw`
        with the run's own settings.
    config : RatesConfig
        The configuration stored with the results (``provenance.json``).
    out_stem : Path
        Output path without suffix.
    losses : tuple of str
    routers : tuple of str or None
        ``None``: every router in the results.
    notes : tuple of str
        What the user must know about the figure: an incomplete run (drawn with fits of its own),
        a file without row checksums, a summary older than row digests.
    """

    df: Any
    fits: list | None
    config: Any
    out_stem: Path
    losses: tuple[str, ...]
    routers: tuple[str, ...] | None
    notes: tuple[str, ...] = ()
    predicted: dict | None = None
    setting: str | None = None
    voronoi_holds: str | None = None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def prepare_redraw(run_dir, *, losses: Sequence[str] | None = None, routers: Sequence[str] | None = None,
                   name: str | None = None, overwrite: bool = False, theorems: Any = None) -> RedrawPlan:
    """Read and check a run folder for :func:`draw_redraw`; draws nothing.

    The configuration is the one stored with the results (``provenance.json``), never a default:
    the rows are checked against its grid and a refit (when ``summary.json`` has no fits) uses
    its settings.  Loss and router names accept ``-`` for ``_`` and the router aliases of
    :data:`moestat.model.gates.NAME_ALIASES`.

    Parameters
    ----------
    losses : sequence of str, optional
        The losses to draw: built-in names, or a column the run wrote to ``extras.csv`` (a
        scenario file's ``[[losses]]``, ``--cell-errors``' ``weighted_single`` and the like).  Default: the run's headline -- the declared
        losses of a scenario file, else ``voronoi`` -- as in the sweep's own ``convergence.png``.
    name : str, optional
        File stem; default ``convergence_replot`` (beside the sweep's own ``convergence``), or
        ``convergence`` with ``overwrite``.
    overwrite : bool
        Allow replacing existing figures of that name.
    theorems : callable or mapping, optional
        A scenario file's theorems, as :func:`moestat.rates.run_rates` takes them (``moestat plot``
        passes :func:`moestat.theorems.file_theorems.scenario_theorems`): the predicted lines of the
        losses the file states no exponent for.  Without them only the file's own are drawn.

    Raises
    ------
    FileNotFoundError
        No such folder, or no ``results.csv`` or ``provenance.json`` in it.
    ValueError
        An unknown loss or router, a bad ``name``, figures of that name without ``overwrite``,
        an empty, foreign or tampered results file, losses without a finite value, a
        ``provenance.json`` or ``summary.json`` that is not what a rates run writes, or a folder
        that cannot be written.  Every message names the file.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is a file, not a run folder: pass the folder that holds results.csv")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    if name is None:
        name = "convergence" if overwrite else "convergence_replot"
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"--name must be a plain file stem, got {name!r}")
    taken = [p for p in (run_dir / f"{name}.pdf", run_dir / f"{name}.png") if os.path.lexists(p)]
    for p in taken:  # never a link, device or folder replaced, --overwrite or not
        check_output_file(p)
    if taken and not overwrite:
        raise ValueError(f"{taken[0]} exists; pass --overwrite to replace it, or --name for another file")
    prov_path = run_dir / "provenance.json"
    if not prov_path.is_file():
        raise FileNotFoundError(f"no provenance.json in {run_dir}: not a moestat rates folder (its configuration is needed)")
    prov = _read_json(prov_path)
    if not isinstance(prov, dict) or not isinstance(prov.get("config"), dict):
        raise ValueError(f"{prov_path}: no configuration in it (not written by moestat rates)")
    try:
        config = RatesConfig.from_dict(prov["config"])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{prov_path}: its configuration is not readable: {exc}") from None
    notes = []
    # resolved once, for the losses and for both reads of the rows below; a scenario file that cannot
    # be read is one line of bad input (ScenarioFileError)
    experiment = Experiment.of(config).with_theorems(theorems)
    declared: tuple[str, ...] = ()
    predicted = setting = None
    if config.scenario_file:  # the file's declared losses and their predictions (the sweep's own figure's)
        declared, predicted, setting = tuple(experiment.declared), dict(experiment.predicted or {}), experiment.setting
    # every loss the run wrote: results.csv's, and extras.csv's (declared losses, --cell-errors' and
    # the over-fitted Gaussian MoE's block errors), as the run's own fits and convergence_all.png have them
    known = tuple(dict.fromkeys((*LOSS_NAMES, *declared, *experiment.losses)))
    clean_losses = []
    for loss in (losses if losses is not None else declared or ("voronoi",)):
        try:
            clean_losses.append(canonical_name(loss, known))
        except ValueError:
            raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(known)}") from None
    res_path = run_dir / "results.csv"
    # refuses edited, foreign, duplicate and unreadable rows, naming the lines; the audit's count and digest below
    df, audit = read_audited(res_path, experiment)
    if any(loss not in LOSS_NAMES for loss in clean_losses):  # a column of extras.csv
        df = merge_extras(df, run_dir / "extras.csv")
    if not audit.checked:
        notes.append(f"{res_path} has no row checksums (written by an earlier moestat): edits to it cannot be found")
    expected = len(config.ns) * config.reps * len(config.router)
    incomplete = audit.rows < expected
    if incomplete:
        h = holder(run_dir)
        alive = holder_alive(run_dir) if h else False
        who = f"moestat {h.get('door')} pid {h.get('pid')} on {h.get('host')}" if h else ""
        # the lock's flock says whether its holder lives: a kill -9 leaves the file, never the flock
        running = ("" if not h else f"; {who} is still writing it" if alive
                   else f"; {who} stopped without finishing, --resume continues it" if alive is False
                   else f"; its lock names {who}, which may still be running")
        notes.append(f"{res_path} holds {audit.rows} of {expected} fits (the run is incomplete{running}): the figure shows "
                     "those, with slopes fitted to them, not the fits of summary.json")
    if df.empty:
        raise ValueError(f"{run_dir / 'results.csv'} holds no finished fits")
    if not clean_losses:
        raise ValueError("--losses names no loss")
    empty = [loss for loss in clean_losses if loss not in df.columns or not np.isfinite(df[loss].to_numpy(float)).any()]
    if empty:  # a requested curve is never dropped silently; a declared loss is read from extras.csv
        where = sorted({str(run_dir / ("results.csv" if loss in LOSS_NAMES else "extras.csv")) for loss in empty})
        raise ValueError(f"nothing to plot for {', '.join(empty)}: no finite values in {' or '.join(where)} "
                         "(this run did not compute it)")
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
        summary = _read_json(summary_path)
        if not isinstance(summary, dict) or not isinstance(summary.get("fits"), list):
            raise ValueError(f"{summary_path}: no list of fits in it (not written by moestat rates); "
                             "remove it to refit from results.csv")
        fits = summary["fits"]
        bad = [f for f in fits if not isinstance(f, dict) or not {"router", "loss", "slope"} <= set(f)]
        if bad:
            raise ValueError(f"{summary_path}: {len(bad)} fit entr{'y' if len(bad) == 1 else 'ies'} without router, loss and slope")
        rows = summary.get("rows")
        if incomplete:
            fits = None  # never the fits of other rows
        elif not isinstance(rows, dict):
            notes.append(f"{summary_path} predates row digests: its fits are not checked against {res_path}")
        elif rows.get("sha256") != audit.digest:
            raise ValueError(f"{summary_rows_changed(summary_path, rows, audit)}; {SUMMARY_RECOVERY} (then plot refits them)")
    ensure_writable_dir(run_dir)
    return RedrawPlan(df, fits, config, run_dir / name, tuple(clean_losses),
                      None if clean_routers is None else tuple(clean_routers), tuple(notes), predicted, setting,
                      experiment.voronoi_holds)


def draw_redraw(plan: RedrawPlan) -> list[Path]:
    """Draw a checked :class:`RedrawPlan`: refit (with the run's own settings) when the run has no
    ``summary.json``, then plot.

    Returns
    -------
    list of Path
        The written PDF and PNG.
    """
    df, cfg = plan.df, plan.config
    fits = plan.fits
    if fits is None:
        # a scenario file decides its setting and states its declared losses' predictions (the sweep's own fits')
        fits = fit_rates(df, setting=plan.setting or cfg.setting, estimator=cfg.estimator, routers=cfg.router,
                         losses=list(plan.losses), window=(cfg.window_min, cfg.window_max), tolerance=cfg.tolerance,
                         n_boot=cfg.n_boot, seed=cfg.seed, predicted=plan.predicted)
    routers = None if plan.routers is None else list(plan.routers)
    return figures.plot_convergence(df, fits, plan.out_stem, losses=list(plan.losses), routers=routers,
                            voronoi_holds=plan.voronoi_holds, bars=getattr(cfg, "bars", "percentile"))


def redraw(run_dir, *, losses: Sequence[str] | None = None, routers: Sequence[str] | None = None,
           name: str | None = None, overwrite: bool = False, theorems: Any = None) -> list[Path]:
    """Draw ``run_dir/<name>.pdf`` and ``.png`` from a finished (or partial) rates run.

    The same as ``draw_redraw(prepare_redraw(...))``; ``moestat plot`` calls the two steps
    apart, so that only the first one's errors count as bad input.

    Parameters
    ----------
    run_dir : path-like
        A ``--out`` folder of ``moestat rates``.
    losses, routers : sequence of str
        What to draw (losses default to the run's headline, as :func:`prepare_redraw`; routers to
        every router in the results).
    name : str, optional
        File stem of the figure (default ``convergence_replot``, or ``convergence`` with
        ``overwrite``).
    overwrite : bool
        Replace existing figures of that name.
    theorems : callable or mapping, optional
        As :func:`prepare_redraw`.

    Returns
    -------
    list of Path
        The written PDF and PNG.
    """
    return draw_redraw(prepare_redraw(run_dir, losses=losses, routers=routers, name=name, overwrite=overwrite,
                                      theorems=theorems))

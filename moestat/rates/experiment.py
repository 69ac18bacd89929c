"""A rate experiment end to end: a scenario in, a convergence plot and an honest slope table out.

:func:`run_rates` (what ``moestat rates`` calls) chains :mod:`moestat.rates.sweep`
(seeds, work units, the sweep planned once; run by :mod:`moestat.rates.backends` or
:mod:`moestat.rates.forked`, stored by :mod:`moestat.rates.store`: resumable ``results.csv``,
``provenance.json``), :mod:`moestat.rates.fit` (slopes with intervals, window sensitivity,
verdicts), :mod:`moestat.rates.run_summary` (``summary.json``) and :mod:`moestat.rates.figures`
(``convergence.png``, other formats on request), everything after the sweep in its own process.
From Python::

    from moestat.rates import RatesConfig, run_rates
    summary = run_rates(RatesConfig.from_dict({"router": "perturbed,cosine", "reps": 10}), "out/")
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence


from moestat.folder_lock import check_door, lock_out, mark_door, unlock_out
from moestat.io import atomic_write_json, ensure_writable_dir, refuse_links_in
from moestat.rates.config import RatesConfig, stored_file_label
from moestat.rates.figures import DEFAULT_FIGURE_FORMATS, check_figure_formats, figure_jobs
from moestat.rates.fit import fit_experiment
from moestat.rates.verdicts import MAX_CI_WIDTH
from moestat.rates.labels import undefined_fits, undefined_reason, withhold_former_definitions
from moestat.rates.resolve import NOT_JUDGED, Experiment
from moestat.rates.run_summary import SUMMARY_SCHEMA, format_theorem_report, rule_fields, write_summary  # noqa: F401 - SUMMARY_SCHEMA, rule_fields: re-exported
from moestat.rates.store import analysis_suffix, check_resumable, read_run  # noqa: F401 - analysis_suffix: re-exported
from moestat.rates.forked import ForkedWorkers, draw_in_fork
from moestat.rates.sweep import SweepPlan, plan_sweep, run_sweep_rows

__all__ = ["RatesConfig", "run_rates", "format_table"]


def _sweep_and_fit(experiment: Experiment, out: Path, resume: bool, cluster=None, workers=None,
                   plan: SweepPlan | None = None):
    """One round: run (or resume) the sweep of ``experiment``, read its rows back and fit every loss,
    here in the sweep's own process; ``(rows, fits)`` (:class:`~moestat.rates.store.RunRows`:
    ``results.csv`` joined with ``extras.csv``, its audit and tallies).  ``plan``: the sweep's
    :class:`~moestat.rates.sweep.SweepPlan`, that of an earlier round made again for
    ``experiment`` on the same device (:meth:`~moestat.rates.sweep.SweepPlan.grown`); ``None``:
    planned by :func:`~moestat.rates.sweep.run_sweep_rows`.  ``workers``: the processes forked for
    the sweep, or ``None``."""
    if plan is not None and plan.experiment is not experiment:  # a later round: more replicates or sizes
        plan = plan.grown(experiment, out)
    rows = run_sweep_rows(experiment, out, resume=resume, progress=False if experiment.config.quiet else None,
                          cluster=cluster, forked=workers, plan=plan)
    return rows, fit_experiment(rows.df, experiment)


def _sweep_rounds(plan: SweepPlan, out: Path, resume: bool, cluster=None, workers=None):
    """Run (or resume) the sweep, join ``extras.csv`` and fit every loss, in rounds while an
    adaptive plan asks for more: first replicates (``max_reps``), then sizes (``grow_n``).

    Adaptive replicates grow ``reps`` (at most doubling per round) while the Monte Carlo plan of
    a predicted rate asks for more; adaptive n-max then adds the next size of the grid's ladder
    while a predicted rate's plan asks for a larger n.  Replicate ``r`` of size ``n`` has the same
    streams in every round, so the store only gains rows.  ``plan``: the first round's
    :class:`~moestat.rates.sweep.SweepPlan`; a later round's is made on its device
    (:meth:`~moestat.rates.sweep.SweepPlan.grown`).  ``workers``: the processes forked for the
    plan (:meth:`~moestat.rates.forked.ForkedWorkers.start` of ``plan.forks``), or ``None``.  Each
    round's rows are read and fitted in this process (:func:`_sweep_and_fit`).

    Returns
    -------
    tuple
        ``(experiment, rows, fits, adaptive, growth)``: the experiment of the last round, its rows
        (:class:`~moestat.rates.store.RunRows`) and fits, and the record of each adaptive loop (``None`` when off).
    """
    experiment = plan.experiment
    c = experiment.config
    adaptive = {"max_reps": c.max_reps, "halfwidth": c.halfwidth, "rounds": []} if c.max_reps else None
    growth = {"grow_n": c.grow_n, "ladder": c.grid.ladder, "rounds": []} if c.grow_n else None
    more_reps = adaptive is not None
    while True:
        rows, fits = _sweep_and_fit(experiment, out, resume, cluster, workers, plan)
        resume = True
        if more_reps:
            need = max((f["plan"]["reps_needed"] for f in fits if f.get("plan") and f.get("predicted") is not None),
                       default=c.reps)
            adaptive["rounds"].append({"reps": c.reps, "reps_needed": int(need)})
            if need > c.reps and c.reps < c.max_reps:
                experiment = experiment.replace(reps=min(c.max_reps, max(c.reps + 1, min(need, 2 * c.reps))))
                c = experiment.config
                continue
            more_reps = False
            adaptive["final_reps"] = c.reps
            adaptive["met"] = bool(adaptive["rounds"][-1]["reps_needed"] <= c.reps)
        if growth is not None:
            asking = [f"{f['router']} {f['loss']} ({f.get('category')})" for f in fits
                      if f.get("predicted") is not None and (f.get("plan") or {}).get("larger_n_needed")]
            growth["rounds"].append({"n_max": c.ns[-1], "asking": asking})
            if not asking:
                growth["stopped"] = "no predicted rate asks for a larger n"
            elif c.grown >= len(growth["ladder"]):
                growth["stopped"] = f"--grow-n {c.grow_n} reached"
            else:
                experiment = experiment.replace(grown=c.grown + 1)
                c = experiment.config
                continue
            growth["added"] = c.grid.ladder[: c.grown]
        return experiment, rows, fits, adaptive, growth


def effective_setting(config: RatesConfig) -> str:
    """``exact`` or ``over`` as the scenario has it: a scenario file (or the Gaussian-MoE family)
    decides by its own fitted and true atom counts, and ``--setting`` is ignored for it
    (:attr:`moestat.rates.resolve.Experiment.setting`)."""
    return Experiment.of(config).setting


def headline_losses(config: RatesConfig) -> list[str]:
    """The losses of ``convergence.png`` (:attr:`moestat.rates.resolve.Experiment.headline`)."""
    return list(Experiment.of(config).headline)


@contextlib.contextmanager
def _locked(out: Path, resume: bool) -> Iterator[None]:
    """``out`` made writable and locked for ``moestat rates`` while the block runs (re-entrant:
    ``moestat rates`` took the lock while validating); on resume, a folder holding links or written
    by another door is refused first (:func:`moestat.folder_lock.check_door`)."""
    ensure_writable_dir(out)
    lock_out(out, "rates")
    try:
        if resume:
            refuse_links_in(out)  # results.csv linked elsewhere must not be appended to
            check_door(out, "rates")
        yield
    finally:
        unlock_out(out)


def run_rates(config: RatesConfig, out_dir, *, resume: bool = False, cluster=None,
              figure_formats: Sequence[str] | str = DEFAULT_FIGURE_FORMATS,
              preflight: Mapping[str, Any] | None = None, theorems: Any = None) -> dict[str, Any]:
    """Run a rate experiment end to end and return the summary written to ``summary.json``.

    In this process, in order: the configuration resolved once (:meth:`RatesConfig.resolve`), the
    folder checked and locked, the pre-flight report handed in (``preflight``) written,
    the sweep planned once (:func:`moestat.rates.sweep.plan_sweep`: its units, its device resolved
    once, its processes and whether they are forked), its rounds (each one's rows read back and
    fitted here, :func:`moestat.rates.fit.fit_experiment`), ``summary.json``
    (:func:`moestat.rates.run_summary.write_summary`) and the figures
    (:func:`moestat.rates.figures.figure_jobs`, the second drawn in a forked child:
    :func:`moestat.rates.forked.draw_in_fork`).

    Parameters
    ----------
    config : RatesConfig
        The experiment; validated here (a bad field raises a one-line ``ValueError`` before
        anything is written).
    out_dir : path-like
        Output folder: ``results.csv``, ``provenance.json``, ``summary.json``,
        ``convergence.png`` (the Voronoi loss) and ``convergence_all.png`` (every loss), in the
        ``figure_formats`` asked for.
    resume : bool
        Continue a sweep in ``out_dir`` written by the same configuration, skipping finished
        fits.  Without it, a folder that already holds results is refused.
    cluster : moestat.rates.backends.ClusterOptions, optional
        Timeouts and the worker-environment check of a dask sweep.
    figure_formats : sequence of {"pdf", "png", "svg"}, or a comma list
        The files of each convergence figure (each figure is drawn once and saved per format;
        default :data:`~moestat.rates.figures.DEFAULT_FIGURE_FORMATS`, png only: a pdf costs
        more to write than the png);
        ``()`` or ``"none"``: no figure (``moestat plot OUT`` draws them later from the results).
        Never part of the configuration: it changes no number.
    preflight : mapping, optional
        The pre-flight report of a scenario file's truth (:func:`moestat.rates.preflight.scenario_preflight`;
        the doors ``moestat rates`` and ``moestat reproduce`` compute it): written to ``preflight.json``,
        its warnings (a grid below ``n_ok`` measures no rate) to stderr and, shortened, into
        ``summary.json``.  The pre-flight is a theorem instrument: the engine writes it, never computes it.
    theorems : callable or mapping, optional
        A scenario file's theorems: :func:`moestat.theorems.file_theorems.scenario_theorems` (what the
        doors ``moestat rates`` and ``moestat reproduce`` pass; called here on the resolved experiment)
        or what it returned.  They give the predictions of the losses the file states no exponent for,
        name the theorem beside each, and are reported in ``summary.json`` (``theorems``).  Without
        them a scenario file's run says so (:data:`moestat.rates.resolve.NOT_JUDGED`) and predicts
        only what the file states: the engine never judges a truth itself.  Ignored without a file.

    Returns
    -------
    dict
        Exactly the content of ``summary.json``: ``schema``, ``config``, ``config_hash``,
        ``tolerance``, ``window``, ``counts``, ``rows`` (count and SHA-256 of the ``results.csv``
        rows summarised), ``fits`` (one entry per router and loss with
        ``router, setting, loss, slope, ci_low, ci_high, predicted, consistent`` and
        diagnostics), ``elapsed_s``.

    Examples
    --------
    >>> from moestat.rates import RatesConfig, run_rates
    >>> cfg = RatesConfig.from_preset("smoke").replace(quiet=True)
    >>> summary = run_rates(cfg, "/tmp/moestat-doc-rates")  # doctest: +SKIP
    >>> sorted(summary["fits"][0])[:3]  # doctest: +SKIP
    ['bootstrap', 'ci_high', 'ci_low']
    """
    if not isinstance(config, RatesConfig):
        raise TypeError(f"config must be a RatesConfig, got {type(config).__name__}")
    if resume and Path(out_dir).is_dir():
        config = stored_file_label(Path(out_dir), config)  # a folder written before labels came from ``name``
    experiment = config.resolve()  # validated and resolved once: what every step below reads
    experiment = experiment.with_theorems(NOT_JUDGED if theorems is None else theorems)
    formats = check_figure_formats(figure_formats)  # a bad format is refused before any work
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    with _locked(out, resume):
        check_resumable(out, experiment, resume)
        suffix = analysis_suffix(out, experiment, resume)  # read before the sweep rewrites anything
        if suffix:
            sys.stderr.write(f"moestat rates: summary.json holds another statistic's analysis; this one is written "
                             f"beside it: summary{suffix}.json, convergence{suffix}.png\n")
        mark_door(out, "rates")
        t0 = time.perf_counter()
        pre = None
        if preflight is not None:
            atomic_write_json(out / "preflight.json", dict(preflight))
            for w in preflight["warnings"]:
                sys.stderr.write(f"moestat rates: pre-flight warning: {w}\n")
            pre = {k: preflight[k] for k in ("min_eigenvalue", "condition_number", "separation", "target_sd", "n_ok", "warnings")}
        # the sweep planned once: its units, its device (resolved here, once), its processes and
        # whether they are forked (moestat.rates.sweep.SweepPlan)
        plan = plan_sweep(experiment, out)
        if plan.memory_line and not experiment.config.quiet:
            print(plan.memory_line, flush=True)  # what the largest unit's likelihood fit holds
        # The sweep's workers are forked first, while no other thread runs (moestat.rates.forked); then
        # this process imports what reading the rows, the rate fits and the figures need in a
        # background thread (_warm_imports), and does all three itself after the sweep.
        workers = ForkedWorkers.start(plan.forks)
        try:
            _warm_imports(formats)
            experiment, rows, fits, adaptive, growth = _sweep_rounds(plan, out, resume, cluster, workers)
        finally:
            if workers is not None:
                workers.close()
        summary = write_summary(experiment, rows, fits, adaptive, growth, pre, t0, out, suffix)
        config = experiment.config
        # the figures at the same time, the second in a forked child (one after the other where fork
        # is refused): the second core is otherwise idle after the sweep
        draw_in_fork(figure_jobs(rows.df, summary["fits"], out, headline=experiment.headline, routers=config.router,
                                 title=f"{experiment.setting}-specified, {config.estimator}", formats=formats,
                                 voronoi_holds=experiment.voronoi_holds, suffix=suffix, bars=config.bars))
        return summary


#: Imported while the sweep runs (:func:`_warm_imports`): what reading the rows and the rate fits
#: need (pandas; the quantiles of ``scipy.special`` behind :func:`moestat.rates.verdicts.ols` and
#: :func:`~moestat.rates.verdicts.theil_sen`, which compute statsmodels' OLS and scipy's Theil-Sen
#: without importing statsmodels or ``scipy.stats``: about 1.2 CPU-s less) and, when
#: figures are asked for, matplotlib (``matplotlib.use("Agg")`` first, as
#: :func:`moestat.rates.figures.draw_convergence` does).
WARM_MODULES = ("pandas", "scipy.special")
WARM_FIGURE_MODULES = ("matplotlib.pyplot",)


def _warm_imports(formats: Sequence[str]) -> threading.Thread:
    """Import :data:`WARM_MODULES` (and :data:`WARM_FIGURE_MODULES` if ``formats``) in a
    background thread, started before the sweep.

    Why: on two cores the sweep's processes keep both busy until its last units, but
    the rate fits and the figures after it run in this process alone, and about 2.5 CPU-s of
    them (of a main job of about 25) was importing these modules.  Imported while the sweep
    computes -- torch releases the GIL in its kernels -- they are ready when the fits start.
    A failed import is left to the step that needs the module (it imports it again and reports
    the error where it belongs); nothing else is done here.
    """

    thread = threading.Thread(target=import_quietly, args=(warm_modules(formats),), name="moestat-warm-imports",
                              daemon=True)
    thread.start()
    return thread


def warm_modules(formats: Sequence[str]) -> tuple[str, ...]:
    """What the steps after the sweep import: :data:`WARM_MODULES`, and :data:`WARM_FIGURE_MODULES`
    when ``formats`` asks for figures."""
    return WARM_MODULES + (WARM_FIGURE_MODULES if formats else ())


def import_quietly(names: Sequence[str]) -> None:
    """Import the modules ``names`` in order (``matplotlib.use("Agg")`` before matplotlib's, as
    :func:`moestat.rates.figures.draw_convergence` does), stopping at the first that fails: a
    failed import is left to the step that needs the module (it imports it again and reports the
    error where it belongs)."""
    for name in names:
        try:
            if name.startswith("matplotlib"):
                import matplotlib

                matplotlib.use("Agg")  # no display backend in a sweep (draw_convergence does the same)
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - reported by the step that imports it for use
            return


#: What :func:`rejudge_run` writes as ``rejudged.rule``: the rule the new fits were judged by.
REJUDGE_RULE = (f"moestat.rates.verdicts.judge_interval: consistent only when the 95% CI covers the prediction "
                f"(sided 'upper': reaches it or its steep side), near within the tolerance band, inconsistent beyond, "
                f"inconclusive when the CI is wider than MAX_CI_WIDTH = {MAX_CI_WIDTH:g}")


def rejudge_run(run_dir, *, date: str | None = None, theorems: Any = None) -> dict[str, Any]:
    """Judge a recorded rates run folder again under today's rules, without refitting a model.

    Reads the folder's ``results.csv`` (and ``extras.csv``) and ``provenance.json``, fits the rates
    exactly as :func:`run_rates` does after its sweep (:func:`moestat.rates.store.read_run`, then
    :func:`moestat.rates.fit.fit_experiment` with the run's own configuration: its statistic, its
    window, its tolerance), and rewrites ``summary.json`` atomically with the new ``fits`` and the
    rule fields of today (``verdict_rule``, ``category_rule``, ``default_tolerance``,
    ``max_ci_width``); every other field is kept as it was, and a field ``rejudged``
    (``rule``, ``date``, the former ``max_ci_width`` and the former and new category counts) records
    the re-judging.  No row of ``results.csv`` or ``extras.csv`` is touched.

    The configuration is the one stored with the results (``provenance.json``); the statistic is
    that of the analysis ``summary.json`` holds (a folder resumed with another ``--statistic`` wrote
    that analysis beside it, :func:`analysis_suffix`).  A loss column whose definition changed after
    the run started (:data:`moestat.rates.labels.REDEFINED`) keeps its slope and gets no category,
    as in :func:`moestat.rates.catalogue_views.recorded_fits`.

    Parameters
    ----------
    run_dir : path-like
        An output folder of ``moestat rates`` (or one run of ``moestat reproduce`` / ``moestat
        theory``) holding ``results.csv``, ``provenance.json`` and ``summary.json``.
    date : str, optional
        The date recorded in ``rejudged`` (ISO 8601); default: now, in UTC.
    theorems : callable or mapping, optional
        A scenario file's theorems, as :func:`run_rates` takes them (the door passes
        :func:`moestat.theorems.file_theorems.scenario_theorems`); without them a file's losses keep
        only the predictions the file states, and ``theorems`` in ``summary.json`` says the truth was
        not judged.

    Returns
    -------
    dict
        The new content of ``summary.json`` (as read back).

    Raises
    ------
    FileNotFoundError
        A file of the three is missing.
    ValueError
        ``results.csv`` holds rows that are not this run's (:func:`~moestat.rates.store.read_run`),
        or rows other than those ``summary.json`` summarised (its ``rows.sha256``).

    Examples
    --------
    >>> from moestat.rates.experiment import rejudge_run
    >>> summary = rejudge_run("runs/exact")  # doctest: +SKIP
    >>> summary["rejudged"]["rule"]  # doctest: +SKIP
    'moestat.rates.verdicts.judge_interval: consistent only when ...'
    """
    from datetime import datetime, timezone

    out = Path(run_dir)
    for name in ("results.csv", "provenance.json", "summary.json"):
        if not (out / name).is_file():
            raise FileNotFoundError(f"no {name} in {out}: not a finished moestat rates folder")
    prov = json.loads((out / "provenance.json").read_text(encoding="utf-8"))
    config = RatesConfig.from_dict(prov["config"])
    lock_out(out, "rates")
    tmp = None
    try:
        recorded_file = config.scenario_file
        if recorded_file and not Path(recorded_file).is_file():
            # a run records its scenario file by the absolute path of the checkout that ran it: read the
            # file as run (scenario_as_run.toml beside the rows, where the shipped file changed since),
            # else the shipped file of the same name, under the recorded name (the curve label is its stem)
            import importlib.resources
            import tempfile

            name = Path(recorded_file).name
            src = out / "scenario_as_run.toml"
            if not src.is_file():
                src = Path(str(importlib.resources.files("moestat.rates") / "catalogue_files" / name))
            if not src.is_file():
                raise FileNotFoundError(f"{out / 'provenance.json'}: its scenario file {recorded_file} does not exist, and "
                                        f"neither {out / 'scenario_as_run.toml'} nor a shipped file of that name")
            tmp = tempfile.TemporaryDirectory()
            (Path(tmp.name) / name).write_bytes(src.read_bytes())
            config = config.replace(scenario_file=str(Path(tmp.name) / name))
        old = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        statistic = (old.get("config") or {}).get("statistic", "mean")
        if statistic != config.statistic:
            config = config.replace(statistic=statistic)
        config = stored_file_label(out, config)
        experiment = config.resolve().with_theorems(NOT_JUDGED if theorems is None else theorems)
        rows = read_run(out, experiment)
        recorded = (old.get("rows") or {}).get("sha256")
        if recorded is not None and recorded != rows.audit.digest:
            raise ValueError(f"{out / 'summary.json'} summarises other rows than {out / 'results.csv'} holds "
                             f"(sha256 {recorded[:12]}... against {rows.audit.digest[:12]}...): run moestat rates --resume")
        # a loss column added since the run (e.g. the Gaussian MoE's per-block errors) is not in its rows:
        # the fits are those of the columns it wrote (as moestat.rates.catalogue_views.recorded_fits)
        missing = [c for c in experiment.losses if c not in rows.df]
        if missing:
            experiment = dataclasses.replace(experiment, losses=tuple(c for c in experiment.losses if c in rows.df))
        fits = withhold_former_definitions(fit_experiment(rows.df, experiment), prov)

        def tally(fs) -> dict[str, int]:
            out_: dict[str, int] = {}
            for f in fs:
                if f.get("category") is not None:
                    out_[f["category"]] = out_.get(f["category"], 0) + 1
            return out_

        new = dict(old)
        new.update(rule_fields(config))
        new["fits"] = fits
        if experiment.theorems is NOT_JUDGED:  # the fits carry no theorem's prediction: the summary says so
            new["theorems"] = dict(NOT_JUDGED["report"])
        new["rejudged"] = {
            "rule": REJUDGE_RULE,
            "date": date or datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "max_ci_width_before": old.get("max_ci_width"),
            "categories_before": tally(old.get("fits") or []),
            "categories_after": tally(fits),
        }
        if missing:
            new["rejudged"]["losses_not_in_rows"] = missing
        if tmp is not None:
            new["rejudged"]["scenario_file_read"] = (src.name if src.parent == out
                                                     else f"moestat/rates/catalogue_files/{src.name}")
        path = atomic_write_json(out / "summary.json", new)
    finally:
        unlock_out(out)
        if tmp is not None:
            tmp.cleanup()
    return json.loads(path.read_text(encoding="utf-8"))


def _fmt(v, spec=".3f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def format_table(summary: dict[str, Any]) -> str:
    """The slope table printed by the command: one line per router and loss with its category,
    then one reason line and one Monte Carlo planning line per fit."""
    # a loss with no value in this setting is one line below the table, not a row of dashes
    undefined = undefined_fits(summary["fits"])
    shown = [f for f in summary["fits"] if not any(f is u for u in undefined)]
    cells = []
    for f in shown:
        ci = f"[{_fmt(f['ci_low'], '.3f')}, {_fmt(f['ci_high'], '.3f')}]" if f.get("slope") is not None else "-"
        cat = f.get("category") or "-"
        if f.get("judged_by") == "slow_rate_rule":
            cat += "*"
        rob = (f.get("robust") or {}).get("slope")
        win = f"{f['window'][0]}-{f['window'][1]}" if f.get("window") else "-"
        pred = "slower" if f.get("prediction_claim") else _fmt(f.get("predicted"), ".2f")
        theorem = f"{f['prediction_theorem']} [{f['prediction_standing']}]" if f.get("prediction_theorem") else "-"
        cells.append((str(f["router"]), str(f["loss"]), _fmt(f.get("slope")), ci, _fmt(rob),
                      pred, f.get("sided") or "-", cat, win, theorem))
    # columns as wide as their longest entry: a scenario file's name or a declared loss's can be
    # longer than any built-in one, and a fixed width would shift the rest of its row
    titles = ("router", "loss", "slope", "95% CI", "Theil-Sen", "pred", "sided", "category", "window", "theorem [standing]")
    w = [max([len(t)] + [len(c[i]) for c in cells]) for i, t in enumerate(titles)]
    # the theorem beside each prediction, where a scenario file's truth meets one (moestat.theorems.file_theorems)
    named = any(c[9] != "-" for c in cells)

    def row(c) -> str:
        return (f"{c[0]:<{w[0]}} {c[1]:<{w[1]}} {c[2]:>{w[2]}}  {c[3]:<{w[3]}} {c[4]:>{w[4]}} {c[5]:>{w[5]}}  "
                f"{c[6]:<{w[6]}} {c[7]:<{w[7]}} {c[8]:<{w[8]}}" + (f"  {c[9]}" if named else "")).rstrip()

    head = row(titles)
    lines = [head, "-" * len(head)] + [row(c) for c in cells]
    for loss in dict.fromkeys(f["loss"] for f in undefined):  # one line per loss, whatever the routers
        f = next(u for u in undefined if u["loss"] == loss)
        lines.append(f"not shown: {loss}: {undefined_reason(loss, str(f.get('setting')))}")
    if summary.get("theorems"):
        lines.extend(format_theorem_report(summary["theorems"]))
    lines.append("")
    lines.append("reasons and plans:")
    median = any(f.get("statistic") == "median" for f in summary["fits"])
    if median:  # say what the slope column is, before a reader takes it for the usual log-of-mean slope
        lines.insert(0, "slopes of the per-n median (--statistic median); the mean's slope and category follow each reason")
    for f in shown:
        lines.append(f"  {f['router']} {f['loss']}: {f.get('reason') or '-'}")
        m = f.get("mean_statistic")
        if m and m.get("slope") is not None:
            lines.append(f"    the mean: slope {_fmt(m['slope'])} [{_fmt(m['ci_low'])}, {_fmt(m['ci_high'])}], "
                         f"{m.get('category') or '-'}")
        if f.get("prediction_source"):
            lines.append(f"    prediction by default (the file states none): {f['prediction_source']}")
        if f.get("plan") and f.get("predicted") is not None:
            lines.append(f"    plan: {f['plan']['line']}")
    tc = summary.get("truth_check")
    if tc and any(v["found"] or v["above"] for v in tc.values()):
        lines.append("fits against the truth (worse than the true parameters on the same data): " + "; ".join(
            f"{router}: {v['found']} found, {v['answered']} answered, {v['remain']} remain (status below_truth)"
            for router, v in tc.items()))
    cert = summary.get("certificate")
    if cert:
        lines.append(f"certificate ({cert['extra_starts']} extra starts; near-truth fit beaten by > {cert['beaten_rtol']:g} relative):")
        for router, rows in cert["by_router"].items():
            lines.append(f"  {router}: " + ", ".join(f"n={r['n']} {r['beaten']}/{r['certified']}" for r in rows))
    ad = summary.get("adaptive")
    if ad:
        steps = " -> ".join(f"{r['reps']} (plan {r['reps_needed']})" for r in ad["rounds"])
        lines.append(f"adaptive replicates (max {ad['max_reps']}, +-{ad['halfwidth']:g}): {steps}; "
                     + ("target met" if ad["met"] else "budget spent before the target"))
    gr = summary.get("growth")
    if gr:
        path = " -> ".join(str(r["n_max"]) for r in gr["rounds"])
        last = gr["rounds"][-1]["asking"]
        lines.append(f"adaptive n-max (--grow-n {gr['grow_n']}): {path}; stopped: {gr['stopped']}"
                     + (f"; still asking: {', '.join(last)}" if last else ""))
    c = summary["counts"]
    lines.append(f"fits: {c['fits']}/{c['expected']}, converged {c['converged']}, not converged {c['failed']}, non-finite {c['nonfinite']}; "
                 f"tolerance {summary['tolerance']}" + ("; * judged by the slow-rate rule (no polynomial rate: floor or flattening)" if any(f.get("judged_by") == "slow_rate_rule" for f in summary["fits"]) else ""))
    return "\n".join(lines)

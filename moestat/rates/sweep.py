"""Sweeps over (router, n, replicate): seed streams, work units, one unit's fit, the sweep.

A sweep is cut into :class:`WorkUnit` s of **fixed composition** -- one router, one sample size
and a fixed chunk of replicates (``chunk`` replicates, default all of them) -- that do not depend
on ``n_jobs`` or on the backend.  Every random draw of a unit comes from
:func:`replicate_streams`, i.e. from ``numpy.random.SeedSequence(seed, spawn_key=(n, replicate,
stream))``; the data stream (``stream = 0``) does *not* involve the router, so a comma list of
routers fits the very same ``(X, Y)`` with every router (common random numbers), and the start
of the optimiser has its own child (``stream = 1``).  Results are therefore bit-identical
whatever ``n_jobs``, the backend (:mod:`moestat.rates.backends`: in-process, joblib ``loky`` or
``dask.distributed``) or the order in which units finish.  :func:`run_sweep` appends each
unit's rows to the resumable store of :mod:`moestat.rates.store`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from moestat.devices import resolve_device
from moestat.estimators.em_driver import sweep_compile
from moestat.losses.cell_errors import beta1_split, weighted_cell_errors
from moestat.model.mixing import MixingMeasure
from moestat.rates.backends import execute
from moestat.rates.config import RatesConfig
from moestat.rates.extras import ExtrasStore, legacy_columns
from moestat.rates.forked import ForkedWorkers
from moestat.rates.resolve import (  # noqa: F401 - build_estimator, build_scenario, estimator_registry re-exported
    Experiment,
    build_estimator,
    build_scenario,
    estimator_registry,
)
from moestat.rates.store import LOSS_NAMES, ResultStore, RunRows, read_run, utc_now, write_provenance
from moestat.rates import truth_check as tc
from moestat.rates.truth_check import against_truth as _against_truth  # noqa: F401 - its name before it moved
from moestat.rates.truth_check import unit_estimator as _estimator  # noqa: F401 - its name before it moved
from moestat.rates.worker_env import environment
from moestat.threads import available_cores

__all__ = [
    "WorkUnit",
    "replicate_streams",
    "make_units",
    "run_sweep_rows",
    "build_scenario",
    "estimator_registry",
    "compute_losses",
    "auto_n_jobs",
    "fork_workers",
    "run_unit",
    "run_sweep",
]


def replicate_streams(seed: int, n: int, replicate: int) -> tuple[np.random.SeedSequence, np.random.SeedSequence]:
    """The data and start streams of one ``(n, replicate)``.

    ``SeedSequence(seed, spawn_key=(n, replicate, 0))`` draws ``(X, Y)`` and
    ``spawn_key=(n, replicate, 1)`` the optimiser's start.  The router is not part of the key:
    every router sees the same data and the same start noise.
    """
    return (
        np.random.SeedSequence(seed, spawn_key=(int(n), int(replicate), 0)),
        np.random.SeedSequence(seed, spawn_key=(int(n), int(replicate), 1)),
    )


# ----------------------------------------------------------------------------------------------
# work units
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkUnit:
    """One router, one sample size and a fixed chunk of replicates, fitted in one batched call.

    Everything a worker needs travels in the unit (plain, picklable values).
    """

    scenario_key: str
    router: str
    n: int
    replicates: tuple[int, ...]
    chunk_index: int
    estimator: str
    max_iter: int
    init: str
    init_scale: float
    seed: int
    holdout: int
    device: str
    extra_starts: int = 0
    cell_errors: bool = False
    alt_init_scale: float = 0.0
    #: every EM fit's ``compile`` (:func:`moestat.estimators.em_driver.sweep_compile`: one decision
    #: per sweep from its design, so the rows never depend on which worker compiled)
    compile: bool | str = "auto"
    #: the likelihood fits' memory budget (:class:`~moestat.rates.config.ExecutionSpec`); it sets how
    #: many replicates a fit holds at once, never a number of the rows
    max_memory: int | str = "auto"
    #: ``(name, value)`` settings of the estimator (:attr:`~moestat.rates.config.FittingSpec.estimator_options`:
    #: SGD's learning rate, batch, epochs and schedule)
    estimator_options: tuple = ()
    #: whether fits worse than the truth are answered with more starts (:attr:`~moestat.rates.config.FittingSpec.answer`)
    answer: bool = True

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.router, self.n, self.chunk_index)


def make_units(experiment: Experiment) -> list[WorkUnit]:
    """All work units of a sweep, largest ``n`` first (the slowest start first balances the pool).

    The composition of each unit depends only on the configuration (``reps`` and ``chunk``),
    never on ``n_jobs``.  ``experiment``: a resolved :class:`~moestat.rates.resolve.Experiment`
    (or a :class:`~moestat.rates.config.RatesConfig`, resolved here).
    """
    experiment = Experiment.of(experiment)
    config = experiment.config
    chunk = config.chunk or config.reps
    comp = sweep_compile(int(config.starts or 1) * config.reps * len(config.router) * sum(config.ns), config.device)
    units = []
    for n in sorted(config.ns, reverse=True):
        for router in config.router:
            for c, start in enumerate(range(0, config.reps, chunk)):
                reps = tuple(range(start, min(start + chunk, config.reps)))
                units.append(
                    WorkUnit(
                        experiment.keys[router], router, n, reps, c, config.estimator, config.max_iter,
                        config.init, float(config.init_scale), config.seed, config.holdout, config.device,
                        int(config.extra_starts), bool(config.cell_errors), float(config.alt_init_scale), comp,
                        config.max_memory, tuple(config.fitting.estimator_options), bool(config.answer),
                    )
                )
    return units


def recorded_unit(run: str | os.PathLike, n: int, replicate: int,
                  scenario_dir: str | os.PathLike | None = None) -> tuple[WorkUnit, int]:
    """The work unit of a recorded run that holds ``(n, replicate)``, and the replicate's position in it.

    A refit of a recorded fit from its own streams (a diagnostic of one outlying fit) starts here: the unit is rebuilt from the configuration in the run's ``summary.json``, so its
    data, starts and estimator seeds are the sweep's.  A run records its scenario file by the absolute
    path of the checkout that ran it; where that path does not exist, the file of the same name in
    ``scenario_dir`` is used (e.g. ``moestat/rates/catalogue_files``).
    """
    summary = json.loads((Path(run) / "summary.json").read_text())
    config = {k: v for k, v in summary["config"].items() if k != "n_jobs"}
    recorded = config.get("scenario_file")
    if recorded and scenario_dir is not None and not Path(recorded).is_file():
        config["scenario_file"] = str(Path(scenario_dir) / Path(recorded).name)
    units = make_units(Experiment.of(RatesConfig.from_dict(config)))
    unit = next((u for u in units if u.n == n and replicate in u.replicates), None)
    if unit is None:
        raise ValueError(f"{run}: no work unit holds n = {n}, replicate {replicate}")
    return unit, unit.replicates.index(replicate)


#: ``n_jobs="auto"`` gives each process at least this many samples x replicates x starts to fit.
#: A loky worker's start-up (a fresh interpreter importing torch and the package) costs about
#: 3 CPU-s on the project's 2-core machine, and the main job fits 5.1e6 of them in about 14 CPU-s
#: (``docs/guide/performance.rst``): below 1e6 a worker costs about as much as it saves.
AUTO_SAMPLES_PER_PROCESS = 1_000_000


def auto_n_jobs(units: list[WorkUnit], config) -> int:
    """The processes of ``n_jobs="auto"``: one per usable core
    (:func:`moestat.threads.available_cores`), at most one per work unit, and at most one per
    :data:`AUTO_SAMPLES_PER_PROCESS` samples x replicates x starts of ``units``; 1 on an
    accelerator (one device, which the processes would share).  Never changes a number: units
    have a fixed composition and run on one thread wherever they run."""
    if resolve_device(config.device).type != "cpu":
        return 1
    work = sum(u.n * len(u.replicates) for u in units) * int(config.starts or 1)
    return max(1, min(available_cores(), len(units), work // AUTO_SAMPLES_PER_PROCESS))


def fork_workers(experiment: Experiment) -> ForkedWorkers | None:
    """The workers of ``experiment``'s sweep forked from this process now, or ``None`` (one
    process, the dask backend, an accelerator, or fork refused: :func:`moestat.rates.forked.fork_refusal`).

    Called by :func:`moestat.rates.experiment.run_rates` before it starts any thread, with the
    processes of the whole design (``n_jobs``, or :func:`auto_n_jobs` of every unit; a resumed
    sweep may then use fewer).  The caller closes them (:meth:`~moestat.rates.forked.ForkedWorkers.close`).
    """
    experiment = Experiment.of(experiment)
    config = experiment.config
    if config.backend != "loky" or resolve_device(config.device).type != "cpu":
        return None  # a dask cluster has its own workers; a CUDA context does not survive a fork
    units = make_units(experiment)
    n_jobs = auto_n_jobs(units, config) if config.n_jobs == "auto" else int(config.n_jobs)
    return ForkedWorkers.start(min(n_jobs, len(units)) - 1)


def compute_losses(scenario, fitted, X_holdout) -> dict[str, np.ndarray]:
    """Every loss of one batch of fits, each an array ``[R]``: the scenario's own loss columns
    (:meth:`moestat.data.synthetic.ScenarioBase.loss_columns`; for a least-squares regression
    scenario :func:`moestat.data.synthetic.regression_loss_columns`, with the declared losses of a
    :class:`~moestat.data.scenario_files.FileScenario` by name)."""
    return scenario.loss_columns(fitted, X_holdout)


@lru_cache(maxsize=16)
def _holdout(key: str, m: int) -> np.ndarray:
    # the fixed held-out inputs of a unit's scenario, drawn once per process (the key names the scenario)
    return _scenario(key).holdout(m)


def _scenario(key: str):
    """The scenario a work unit names, rebuilt from its key once per worker process."""
    return build_scenario(key)


def run_unit(unit: WorkUnit) -> list[dict]:
    """Fit one work unit and return one result row (dict) per replicate.

    Runs with one torch thread and one BLAS thread (restored afterwards) so that a unit's
    arithmetic, hence its result, is the same in the main process, a loky worker or a dask worker,
    and so that ``n_jobs`` workers use ``n_jobs`` cores (:mod:`moestat.threads`).
    """
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    blas = threadpool_limits(limits=1)  # numpy's BLAS too: its spinning pool collapses on a busy machine
    try:
        scenario = _scenario(unit.scenario_key)
        holdout = _holdout(unit.scenario_key, unit.holdout)
        X, Y, G0, mean = _draw_with_mean(unit, scenario)
        t0 = time.perf_counter()
        est = tc.fit_starts(unit, scenario, X, Y, G0, 2)
        # the truth's criterion reuses g_{G*}(X) of the draw (Scenario.knowing_mean; same numbers)
        state = tc.against_truth(unit, scenario if mean is None else scenario.knowing_mean(X, mean), X, Y, est)
        elapsed = time.perf_counter() - t0
        checks = tc.more_starts(unit, scenario, X, Y, state, holdout)
        losses = compute_losses(scenario, state["params"], holdout)
        extras = _extras(unit, scenario, state, losses, checks)
    finally:
        torch.set_num_threads(old_threads)
        blas.restore_original_limits()
    return _rows(unit, scenario, state, losses, elapsed, extras)


def _draw(unit: WorkUnit, scenario) -> tuple[np.ndarray, np.ndarray, MixingMeasure]:
    """The unit's data ``X [R, n, d]``, ``Y [R, n]`` and starts ``[R]``, each replicate from its
    own streams (:func:`replicate_streams`)."""
    return _draw_with_mean(unit, scenario)[:3]


def _draw_with_mean(unit: WorkUnit, scenario) -> tuple[np.ndarray, np.ndarray, MixingMeasure, np.ndarray | None]:
    """:func:`_draw`'s ``X``, ``Y`` and starts, and the truth's regression function at ``X``,
    ``[R, n]``, where the scenario gives it with its draws (``Scenario.sample_with_mean``; else
    ``None``)."""
    with_mean = getattr(scenario, "sample_with_mean", None)
    Xs, Ys, means, starts = [], [], [], []
    for r in unit.replicates:
        data_ss, init_ss = replicate_streams(unit.seed, unit.n, r)
        rng = np.random.default_rng(data_ss)
        if with_mean is not None:
            X, Y, mean = with_mean(unit.n, rng)
            means.append(mean)
        else:
            X, Y = scenario.sample(unit.n, rng)
        Xs.append(X)
        Ys.append(Y)
        starts.append(tc.unit_start(unit, scenario, unit.n, np.random.default_rng(init_ss), X, Y))
    return np.stack(Xs), np.stack(Ys), MixingMeasure.stack(starts), (np.stack(means) if with_mean is not None else None)


def _extras(unit: WorkUnit, scenario, state: dict, losses: dict, checks: list[dict]) -> list[dict]:
    """The ``extras.csv`` columns of each replicate (:mod:`moestat.rates.extras`): the declared
    losses, the optimum certificate and the start sensitivity (``checks``,
    :func:`moestat.rates.truth_check.more_starts`), the cell errors, as the unit asks, and the
    scenario's ``extra_loss_columns``."""
    fitted = state["params"]
    extras = [{} for _ in unit.replicates]
    # the declared losses, and an over-fitted Gaussian MoE's per-block errors: loss
    # columns of the scenario that results.csv does not hold
    for name in [spec.name for spec in scenario.loss_specs] + list(scenario.extra_loss_columns):
        for i, e in enumerate(extras):
            e[name] = float(losses[name][i])
    for e, c in zip(extras, checks):
        e |= c
    if unit.cell_errors:
        ce = {**weighted_cell_errors(fitted, scenario.truth), **beta1_split(fitted, scenario.truth)}
        for i, e in enumerate(extras):
            e |= {k: float(v[i]) for k, v in ce.items()}
    return extras


def _rows(unit: WorkUnit, scenario, state: dict, losses: dict, elapsed: float, extras: list[dict]) -> list[dict]:
    """One result row per replicate: ``results.csv``'s columns, then the extras'."""
    R = len(unit.replicates)
    rows = []
    for i, r in enumerate(unit.replicates):
        row = {
            "scenario": scenario.name,
            "router": unit.router,
            "setting": scenario.setting,
            "n": unit.n,
            "replicate": r,
            "seed": unit.seed,
            "estimator": unit.estimator,
            "converged": bool(state["converged"][i]),
            "status": str(state["status"][i]),
            "n_iter": int(state["n_iter"][i]),
            "objective": float(state["objective"][i]),
        }
        for name in LOSS_NAMES:
            row[name] = float(losses[name][i])
        row["time"] = elapsed / R
        row |= state["truth"][i]
        row |= extras[i]  # extras.csv columns (ignored by results.csv)
        rows.append(row)
    return rows


def run_sweep(experiment: Experiment, out_dir: str | os.PathLike, *, resume: bool = False, progress: bool | None = None,
              cluster=None):
    """Run (or resume) the sweep of ``experiment`` into ``out_dir``; return its rows as a DataFrame
    (``results.csv``, joined with ``extras.csv`` when the run writes one): the ``df`` of
    :func:`run_sweep_rows`."""
    return run_sweep_rows(experiment, out_dir, resume=resume, progress=progress, cluster=cluster).df


def run_sweep_rows(experiment: Experiment, out_dir: str | os.PathLike, *, resume: bool = False, progress: bool | None = None,
                   cluster=None, forked: ForkedWorkers | None = None, read: bool = True) -> RunRows | None:
    """Run (or resume) the sweep of ``experiment`` into ``out_dir``; return the run's rows with
    their audit and tallies (:func:`moestat.rates.store.read_run`).

    ``experiment`` (a resolved :class:`~moestat.rates.resolve.Experiment`, or a validated
    :class:`~moestat.rates.config.RatesConfig`) and ``out_dir`` must already be checked
    (:func:`moestat.rates.store.check_resumable`).
    ``cluster`` (:class:`moestat.rates.backends.ClusterOptions`) sets the timeouts and the
    environment check of a dask sweep; the workers' environments are recorded in
    ``provenance.json`` (``runs[-1]["workers"]``).  ``forked``: processes forked from this one
    (:class:`moestat.rates.forked.ForkedWorkers`, :func:`fork_workers`), used instead of loky
    workers when the sweep runs on loky with ``n_jobs - 1`` of them or fewer.  ``read=False``: the
    rows are written and sorted but not read back (``None`` is returned; the caller reads them
    elsewhere, :func:`moestat.rates.experiment.read_and_fit`).
    """
    experiment = Experiment.of(experiment)
    config = experiment.config
    units = make_units(experiment)
    out_dir = Path(out_dir)
    prev = None
    prov_path = out_dir / "provenance.json"
    if resume and prov_path.exists():
        prev = json.loads(prov_path.read_text(encoding="utf-8"))
    started = utc_now()
    write_provenance(out_dir, experiment, started=started, previous=prev)
    prev = json.loads(prov_path.read_text(encoding="utf-8"))
    workers: dict = {}

    def on_workers(envs: dict) -> None:
        workers.update(envs)
        write_provenance(out_dir, experiment, started=started, previous=prev, workers=envs)

    store = ResultStore(out_dir / "results.csv")
    if store.create():
        sys.stderr.write(f"note: {store.path} had no row checksums (written by an earlier moestat); its rows are "
                         "taken as they are and now carry them\n")
    if store.repaired:
        sys.stderr.write(f"note: {store.path}: cut a partial last line left by an interrupted write; its unit is run again\n")
    done = store.done()
    todo = []
    for u in units:
        missing = [r for r in u.replicates if (u.router, u.n, r) not in done]
        if missing:
            todo.append(u)
    total = sum(len(u.replicates) for u in todo)
    if resume and not todo:
        # a resumed run that was finished: the summary and figures are rewritten from its rows, and
        # the user is told so rather than left to wonder whether anything was fitted
        sys.stderr.write(f"moestat rates: nothing to fit: all {len(done)} rows present; re-analysing\n")
    extras = None
    if experiment.extra_columns:
        legacy = legacy_columns(experiment.extra_columns, experiment.declared)
        extras = ExtrasStore(out_dir / "extras.csv", experiment.extra_columns, legacy)

    # off a terminal (a log file, a batch job) tqdm draws nothing: one line per finished unit instead
    lines = progress is None and not sys.stderr.isatty()
    t_start, written = time.perf_counter(), [0]

    def on_result(unit: WorkUnit, rows: list[dict]) -> None:
        new = [r for r in rows if (r["router"], r["n"], r["replicate"]) not in done]
        store.append(new)
        if extras is not None:
            extras.append(new)
        written[0] += len(rows)
        if lines:
            conv = sum(bool(r["converged"]) for r in rows)
            sys.stderr.write(f"moestat rates: {written[0]}/{total} fits, {unit.router} n={unit.n} replicates "
                             f"{unit.replicates[0]}-{unit.replicates[-1]} ({conv}/{len(rows)} converged), "
                             f"{time.perf_counter() - t_start:.0f} s\n")
            sys.stderr.flush()

    if extras is not None:
        extras.create()
        if extras.adopted_legacy:
            sys.stderr.write(f"note: {extras.path} was written before moestat recorded the declared losses at the best "
                             "fit; it is continued with its own columns (no best_<declared loss>)\n")
    n_jobs = auto_n_jobs(todo, config) if config.n_jobs == "auto" else config.n_jobs
    if forked is not None and config.backend == "loky" and len(todo) > 1 and 2 <= n_jobs <= forked.size + 1:
        # the processes forked after this one's imports: no worker imports torch again
        on_workers({"client": environment(), "workers": "processes forked from the client", "processes": n_jobs,
                    "mismatch": []})
        forked.run(run_unit, todo, on_result, n_jobs, progress=progress, total_fits=total)
    else:
        execute(run_unit, todo, on_result, n_jobs=n_jobs, backend=config.backend, scheduler=config.scheduler,
                progress=progress, total_fits=total, cluster=cluster, on_workers=on_workers, share=True)
    write_provenance(out_dir, experiment, started=started, finished=utc_now(), previous=prev, workers=workers or None)
    store.sort()  # canonical row order: the file does not depend on n_jobs or the backend
    return read_run(out_dir, experiment) if read else None

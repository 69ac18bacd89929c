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
from moestat.estimators.memory import scenario_line
from moestat.losses.cell_errors import beta1_split, weighted_cell_errors
from moestat.model.mixing import MixingMeasure
from moestat.rates.backends import execute
from moestat.rates.config import RatesConfig
from moestat.rates.extras import ExtrasStore
from moestat.rates.forked import ForkedWorkers
from moestat.rates.resolve import (  # noqa: F401 - build_estimator, build_scenario, estimator_registry re-exported
    Experiment,
    build_estimator,
    build_scenario,
    estimator_registry,
)
from moestat.rates.store import LOSS_NAMES, ResultStore, RunRows, RunStore, read_run, utc_now, write_provenance
from moestat.rates import truth_check as tc
from moestat.rates.truth_check import against_truth as _against_truth  # noqa: F401 - its name before it moved
from moestat.rates.truth_check import unit_estimator as _estimator  # noqa: F401 - its name before it moved
from moestat.rates.worker_env import environment
from moestat.threads import available_cores

__all__ = [
    "WorkUnit",
    "draw_unit",
    "draw_unit_with_mean",
    "unit_holdout",
    "unit_scenario",
    "replicate_streams",
    "make_units",
    "run_sweep_rows",
    "build_scenario",
    "estimator_registry",
    "compute_losses",
    "auto_n_jobs",
    "SweepPlan",
    "plan_sweep",
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
    """All work units of a sweep, largest ``n`` first (the slowest start first balances the pool):
    :attr:`SweepPlan.units` of :func:`plan_sweep`.

    The composition of each unit depends only on the configuration (``reps`` and ``chunk``),
    never on ``n_jobs`` or the device's kind, which is not resolved here (a recorded run's units
    are rebuilt on any machine, :func:`recorded_unit`).  ``experiment``: a resolved
    :class:`~moestat.rates.resolve.Experiment` (or a :class:`~moestat.rates.config.RatesConfig`,
    resolved here).
    """
    return list(plan_sweep(experiment, on_cpu=True).units)


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
    have a fixed composition and run on one thread wherever they run.  A sweep resolves its
    device once (:func:`plan_sweep`); this resolves ``config.device`` for a caller without a plan."""
    if resolve_device(config.device).type != "cpu":
        return 1
    return _processes(sum(u.n * len(u.replicates) for u in units) * int(config.starts or 1), len(units))


def _processes(work: int, n_units: int) -> int:
    """:func:`auto_n_jobs` on the CPU of ``n_units`` units holding ``work`` samples x replicates x
    starts."""
    return max(1, min(available_cores(), n_units, work // AUTO_SAMPLES_PER_PROCESS))


@dataclass(frozen=True)
class SweepPlan:
    """A sweep planned once (:func:`plan_sweep`): its units, the units still to fit, its device,
    its processes and whether they are forked, decided together.

    Why one plan: the units, the job count and the fork decision were each made by a function
    of their own that resolved the device and made the units again; made once, they cannot
    disagree, and the sweep, its forked workers and ``provenance.json`` read the same decision.
    None of it changes a number: units have a fixed composition whatever runs them (module
    docstring).

    Attributes
    ----------
    experiment : Experiment
        The resolved experiment planned.
    units : tuple of WorkUnit
        Every unit of the design, largest ``n`` first.
    done : frozenset of (router, n, replicate)
        The rows the run's ``results.csv`` held when the plan was made (empty for a new run).
    todo : tuple of WorkUnit
        The units with a replicate not in ``done``, in the order of ``units``.
    on_cpu : bool
        ``config.device`` resolved (:func:`moestat.devices.resolve_device`) is the CPU.
    n_jobs : int
        The processes of ``todo``: ``config.n_jobs``, or :func:`auto_n_jobs` of ``todo``.
    forks : int
        The workers to fork from the sweep's process
        (:meth:`moestat.rates.forked.ForkedWorkers.start`): ``min(n_jobs, len(todo)) - 1`` on loky
        and the CPU; 0 on dask (a cluster has its own workers) or an accelerator (a CUDA context
        does not survive a fork).
    memory_line : str or None
        What the largest unit's likelihood fit holds and the chunks ``--max-memory`` asks for
        (:func:`moestat.estimators.memory.scenario_line`), for ``--estimator mle``; else ``None``.
    """

    experiment: Experiment
    units: tuple[WorkUnit, ...]
    done: frozenset
    todo: tuple[WorkUnit, ...]
    on_cpu: bool
    n_jobs: int
    forks: int
    memory_line: str | None = None

    def grown(self, experiment: Experiment, out_dir: str | os.PathLike) -> "SweepPlan":
        """The plan of ``experiment`` (a later round of an adaptive sweep: more replicates or sizes)
        in ``out_dir``, on the device of this plan (not resolved again)."""
        return plan_sweep(experiment, out_dir, on_cpu=self.on_cpu)


def plan_sweep(experiment: Experiment, out_dir: str | os.PathLike | None = None, *,
               on_cpu: bool | None = None) -> SweepPlan:
    """The :class:`SweepPlan` of ``experiment`` (a resolved :class:`~moestat.rates.resolve.Experiment`,
    or a :class:`~moestat.rates.config.RatesConfig`, resolved here) into ``out_dir``.

    ``out_dir``: the run's folder, whose ``results.csv`` (if any) says which rows are done; ``None``:
    none is.  ``on_cpu``: the device already resolved (:meth:`SweepPlan.grown`); by default
    ``config.device`` is resolved here, once for the sweep.
    """
    experiment = Experiment.of(experiment)
    config = experiment.config
    results = None if out_dir is None else Path(out_dir) / "results.csv"
    done = frozenset(ResultStore(results).done()) if results is not None and results.exists() else frozenset()
    chunk = config.chunk or config.reps
    # the units' composition, (n, router, chunk index, replicates), from the configuration alone
    shapes = [(n, router, c, tuple(range(start, min(start + chunk, config.reps))))
              for n in sorted(config.ns, reverse=True) for router in config.router
              for c, start in enumerate(range(0, config.reps, chunk))]
    left = [any((router, n, r) not in done for r in reps) for n, router, _, reps in shapes]  # a replicate to fit
    work = sum(n * len(reps) for (n, _, _, reps), to_fit in zip(shapes, left) if to_fit) * int(config.starts or 1)
    cpu_jobs = _processes(work, sum(left))
    # one compile decision for every unit (sweep_compile), from the design alone
    comp = sweep_compile(int(config.starts or 1) * config.reps * len(config.router) * sum(config.ns), config.device)
    line = None
    if config.estimator == "mle":
        line = scenario_line(experiment.scenarios[config.router[0]], max(config.ns), min(config.reps, chunk),
                             config.max_memory)
    if on_cpu is None:
        on_cpu = resolve_device(config.device).type == "cpu"
    units = tuple(WorkUnit(experiment.keys[router], router, n, reps, c, config.estimator, config.max_iter, config.init,
                           float(config.init_scale), config.seed, config.holdout, config.device, int(config.extra_starts),
                           bool(config.cell_errors), float(config.alt_init_scale), comp, config.max_memory,
                           tuple(config.fitting.estimator_options), bool(config.answer))
                  for n, router, c, reps in shapes)
    todo = tuple(u for u, to_fit in zip(units, left) if to_fit)
    # n_jobs="auto": one process on an accelerator (auto_n_jobs); an integer is kept as given
    n_jobs = (cpu_jobs if on_cpu else 1) if config.n_jobs == "auto" else int(config.n_jobs)
    forks = max(0, min(n_jobs, len(todo)) - 1) if config.backend == "loky" and on_cpu else 0
    return SweepPlan(experiment, units, done, todo, on_cpu, n_jobs, forks, line)


def fork_workers(experiment: Experiment | SweepPlan) -> ForkedWorkers | None:
    """The workers of a sweep forked from this process now: :attr:`SweepPlan.forks` of
    ``experiment``'s plan (or of the plan given), or ``None`` (one process, the dask backend, an
    accelerator, or fork refused: :func:`moestat.rates.forked.fork_refusal`).

    Called before any other thread of the process starts.  The caller closes them
    (:meth:`~moestat.rates.forked.ForkedWorkers.close`).
    """
    plan = experiment if isinstance(experiment, SweepPlan) else plan_sweep(experiment)
    return ForkedWorkers.start(plan.forks)


def compute_losses(scenario, fitted, X_holdout) -> dict[str, np.ndarray]:
    """Every loss of one batch of fits, each an array ``[R]``: the scenario's own loss columns
    (:meth:`moestat.data.synthetic.ScenarioBase.loss_columns`; for a least-squares regression
    scenario :func:`moestat.data.synthetic.regression_loss_columns`, with the declared losses of a
    :class:`~moestat.data.scenario_files.FileScenario` by name)."""
    return scenario.loss_columns(fitted, X_holdout)


@lru_cache(maxsize=16)
def unit_holdout(key: str, m: int) -> np.ndarray:
    """The fixed held-out inputs (``m`` of them) of the scenario a work unit names: those its losses
    are computed on."""
    # drawn once per process (the key names the scenario)
    return unit_scenario(key).holdout(m)


def unit_scenario(key: str):
    """The scenario a work unit names (:attr:`WorkUnit.scenario_key`), rebuilt from its key once per worker process."""
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
        scenario = unit_scenario(unit.scenario_key)
        holdout = unit_holdout(unit.scenario_key, unit.holdout)
        X, Y, G0, mean = draw_unit_with_mean(unit, scenario)
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


def draw_unit(unit: WorkUnit, scenario) -> tuple[np.ndarray, np.ndarray, MixingMeasure]:
    """The unit's data ``X [R, n, d]``, ``Y [R, n]`` and starts ``[R]``, each replicate from its
    own streams (:func:`replicate_streams`)."""
    return draw_unit_with_mean(unit, scenario)[:3]


def draw_unit_with_mean(unit: WorkUnit, scenario) -> tuple[np.ndarray, np.ndarray, MixingMeasure, np.ndarray | None]:
    """:func:`draw_unit`'s ``X``, ``Y`` and starts, and the truth's regression function at ``X``,
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
                   cluster=None, forked: ForkedWorkers | None = None, plan: SweepPlan | None = None) -> RunRows:
    """Run (or resume) the sweep of ``experiment`` into ``out_dir``; return the run's rows with
    their audit and tallies (:func:`moestat.rates.store.read_run`).

    ``experiment`` (a resolved :class:`~moestat.rates.resolve.Experiment`, or a validated
    :class:`~moestat.rates.config.RatesConfig`) and ``out_dir`` must already be checked
    (:func:`moestat.rates.store.check_resumable`).
    ``cluster`` (:class:`moestat.rates.backends.ClusterOptions`) sets the timeouts and the
    environment check of a dask sweep; the workers' environments are recorded in
    ``provenance.json`` (``runs[-1]["workers"]``).  ``forked``: processes forked from this one
    (:class:`moestat.rates.forked.ForkedWorkers`, :attr:`SweepPlan.forks` of them), used instead of loky
    workers when the sweep runs on loky with ``n_jobs - 1`` of them or fewer.  ``plan``: the
    sweep's :class:`SweepPlan` (:func:`plan_sweep` of ``experiment`` in ``out_dir``, made just
    before: its ``done`` rows are those of ``results.csv``; made here when not given).
    """
    plan = plan if plan is not None else plan_sweep(experiment, out_dir)
    experiment = plan.experiment
    config = experiment.config
    out_dir = Path(out_dir)
    extras = ExtrasStore.of_run(out_dir, experiment)
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

    store = RunStore(out_dir, extras)  # results.csv and extras.csv, appended together
    for note in store.open():
        sys.stderr.write(note + "\n")
    done, todo, n_jobs = plan.done, list(plan.todo), plan.n_jobs
    total = sum(len(u.replicates) for u in todo)
    if resume and not todo:
        # a resumed run that was finished: the summary and figures are rewritten from its rows, and
        # the user is told so rather than left to wonder whether anything was fitted
        sys.stderr.write(f"moestat rates: nothing to fit: all {len(done)} rows present; re-analysing\n")

    # off a terminal (a log file, a batch job) tqdm draws nothing: one line per finished unit instead
    lines = progress is None and not sys.stderr.isatty()
    t_start, written = time.perf_counter(), [0]

    def on_result(unit: WorkUnit, rows: list[dict]) -> None:
        store.append([r for r in rows if (r["router"], r["n"], r["replicate"]) not in done])
        written[0] += len(rows)
        if lines:
            conv = sum(bool(r["converged"]) for r in rows)
            sys.stderr.write(f"moestat rates: {written[0]}/{total} fits, {unit.router} n={unit.n} replicates "
                             f"{unit.replicates[0]}-{unit.replicates[-1]} ({conv}/{len(rows)} converged), "
                             f"{time.perf_counter() - t_start:.0f} s\n")
            sys.stderr.flush()

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
    return read_run(out_dir, experiment)


# The names of these functions before they were public: the one-off analyses kept beside their records
# under records/ call them so, and a refactor must not break history.
_draw, _draw_with_mean, _holdout, _scenario = draw_unit, draw_unit_with_mean, unit_holdout, unit_scenario

"""Sweeps over (router, n, replicate): seeds, work units, execution, a resumable store, provenance.

The configuration of a rate experiment is a :class:`RatesConfig`.  A sweep is cut into
:class:`WorkUnit` s of **fixed composition** -- one router, one sample size and a fixed chunk of
replicates (``chunk`` replicates, default all of them) -- that do not depend on ``n_jobs`` or on
the backend.  Every random draw of a unit comes from :func:`replicate_streams`, i.e. from
``numpy.random.SeedSequence(seed, spawn_key=(n, replicate, stream))``; the data stream
(``stream = 0``) does *not* involve the router, so a comma list of routers fits the very same
``(X, Y)`` with every router (common random numbers), and the start of the optimiser has its own
child (``stream = 1``).  Results are therefore bit-identical whatever ``n_jobs``, the backend
(joblib ``loky`` or ``dask.distributed``) or the order in which units finish.

Finished fits are appended one line per fit to a long-format ``results.csv``
(:class:`ResultStore`); a kill loses at most the unit in flight, and ``resume`` recomputes only
missing ``(router, n, replicate)`` rows.  ``provenance.json`` records the package version, git
commit, full configuration, platform, torch version/device and timestamps.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

__all__ = [
    "RatesConfig",
    "WorkUnit",
    "LOSS_NAMES",
    "RESULT_COLUMNS",
    "sample_sizes",
    "replicate_streams",
    "make_units",
    "build_scenario",
    "run_unit",
    "execute",
    "ResultStore",
    "read_results",
    "write_provenance",
    "config_hash",
    "run_sweep",
]

ROUTERS = ("perturbed", "cosine", "linear")
SETTINGS = ("exact", "over")
INITS = ("near", "peer", "random")
BACKENDS = ("loky", "dask")

#: Loss columns of ``results.csv`` (see :func:`compute_losses`).
LOSS_NAMES = ("voronoi", "voronoi_direction", "param_single", "param_multi", "mass", "regression_l2")
#: All columns of ``results.csv``, in order.
RESULT_COLUMNS = (
    "scenario",
    "router",
    "setting",
    "n",
    "replicate",
    "seed",
    "estimator",
    "converged",
    "status",
    "n_iter",
    "objective",
    *LOSS_NAMES,
    "time",
)
# Fields of the configuration that do not change any number in results.csv: they are left out
# of the hash that guards ``resume`` (a sweep may be resumed with more jobs or on a cluster).
_EXECUTION_FIELDS = ("n_jobs", "backend", "scheduler", "quiet")
# Fields that only change the rate fit / plot, not results.csv.
_ANALYSIS_FIELDS = ("window_min", "window_max", "tolerance", "n_boot")


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclass
class RatesConfig:
    """Configuration of a rate experiment; field names mirror ``python -m moestat.rates`` flags.

    Parameters
    ----------
    router : list of str
        Routers, one curve each: ``perturbed`` (eq. 9), ``cosine`` (vanilla, eq. 2) and
        ``linear`` (softmax gate); all see the same data.
    setting : {"exact", "over"}
        Exact-specified (``k_fit = k_true``) or over-specified (``k_fit = k_true + 1``).
    tau : float
        ``tau1 = tau2 = tau`` of the perturbed router (> 0).
    expert : str
        Expert activation, see :data:`moestat.model.experts.ACTIVATIONS`.
    d, k_true : int
        Input dimension and true number of experts.
    k_active : int, "auto" or "dense"
        True number of activated experts K (``"auto"``: :func:`moestat.data.synthetic.make_scenario`'s
        default, K = 2 exact and dense over-specified).
    k_fit : int or None
        Fitted atoms (``None``: the setting's default).
    k_active_fit : int, "auto" or "dense"
        K-bar of the fitted model (``"auto"``: the Proposition 1 minimum).
    noise_var : float
        Noise variance nu.
    input_law : {"uniform", "gaussian"}
    truth_seed : int
        Seed of the one-off draw of the true parameters.
    n_min, n_max, n_points : int
        ``n_points`` log-spaced sample sizes from ``n_min`` to ``n_max`` (rounded, distinct).
    reps : int
        Replicates per sample size (>= 2).
    estimator : str
        A key of ``moestat.estimators.ESTIMATORS`` (``lse``, ``sgd``, ``null``, ``em``).
    max_iter : int
        Iteration budget passed to estimators that take one.
    init : {"near", "peer", "random"}
        ``near``: truth + N(0, init_scale^2) (constant in n); ``peer``: the peer code's
        ``init_scale * n^-0.083`` (an artefact, kept to show it); ``random``: a data-free start.
    init_scale : float
        Noise scale of the near-truth start.
    seed : int
        Root seed of every data and start stream.
    chunk : int or None
        Replicates per work unit (``None``: all of them); fixed, so results do not depend on
        ``n_jobs``.
    holdout : int
        Size of the fixed held-out sample of the regression L2 error.
    n_jobs : int
        Parallel work units.
    backend : {"loky", "dask"}
    scheduler : str or None
        ``dask.distributed`` scheduler address (``backend="dask"`` only).
    device : str
        ``cpu``, ``cuda`` or ``auto`` (estimator tensors).
    quiet : bool
        No progress bar and no printed table.
    window_min, window_max : int or None
        Declared fitting window in ``n`` (``None``: the whole grid).
    tolerance : float
        Half-width by which the 95% CI is widened for the ``consistent`` verdict.
    n_boot : int
        Bootstrap resamples over replicates.
    """

    router: list[str] = field(default_factory=lambda: ["perturbed"])
    setting: str = "exact"
    tau: float = 0.5  # scenarios.DEFAULTS["tau"]
    expert: str = "gelu"
    d: int = 4
    k_true: int = 3
    k_active: int | str = "auto"
    k_fit: int | None = None
    k_active_fit: int | str = "auto"
    noise_var: float = 0.01
    input_law: str = "uniform"
    truth_seed: int = 2405_14131
    n_min: int = 2000
    n_max: int = 128000
    n_points: int = 7
    reps: int = 20
    estimator: str = "lse"
    max_iter: int = 200
    init: str = "near"
    init_scale: float = 0.05
    seed: int = 0
    chunk: int | None = None
    holdout: int = 4096
    n_jobs: int = 1
    backend: str = "loky"
    scheduler: str | None = None
    device: str = "cpu"
    quiet: bool = False
    window_min: int | None = None
    window_max: int | None = None
    tolerance: float = 0.15
    n_boot: int = 1000

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, data: dict) -> "RatesConfig":
        """Build from a mapping (TOML table, JSON); unknown keys are an error."""
        if not isinstance(data, dict):
            raise ValueError(f"config must be a table of settings, got {type(data).__name__}")
        names = set(cls.field_names())
        clean = {}
        for key, value in data.items():
            k = str(key).replace("-", "_")
            if k not in names:
                raise ValueError(f"unknown config key {key!r}")
            clean[k] = value
        if "router" in clean and isinstance(clean["router"], str):
            clean["router"] = [r.strip() for r in clean["router"].split(",") if r.strip()]
        return cls(**clean)

    @classmethod
    def from_preset(cls, name: str) -> "RatesConfig":
        """A named preset (see :mod:`moestat.rates.presets`)."""
        from moestat.rates.presets import preset_dict

        return cls.from_dict(preset_dict(name))

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> "RatesConfig":
        """Read a TOML file whose top level (or ``[rates]`` table) holds config keys."""
        from moestat.rates.presets import load_toml

        return cls.from_dict(load_toml(path))

    def replace(self, **changes) -> "RatesConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    # ---- validation ---------------------------------------------------------------------
    def validate(self) -> "RatesConfig":
        """Check every field; raise a one-line ``ValueError`` naming the first bad one.

        Also builds the scenario of every router, so model-level problems (K > k, tau = 0 for
        the perturbed router, ...) are found before anything is written.
        """
        if isinstance(self.router, str):
            self.router = [r.strip() for r in self.router.split(",") if r.strip()]
        if not isinstance(self.router, (list, tuple)) or not self.router:
            raise ValueError("router must be a non-empty list of router names")
        for r in self.router:
            if r not in ROUTERS:
                raise ValueError(f"unknown router {r!r}; expected one of {', '.join(ROUTERS)}")
        if len(set(self.router)) != len(self.router):
            raise ValueError(f"router lists a router twice: {','.join(self.router)}")
        self.router = list(self.router)
        if self.setting not in SETTINGS:
            raise ValueError(f"unknown setting {self.setting!r}; expected one of {', '.join(SETTINGS)}")
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)) or not math.isfinite(self.tau):
            raise ValueError(f"tau must be a finite number, got {self.tau!r}")
        if self.tau < 0:
            raise ValueError(f"tau must be >= 0, got {self.tau!r}")
        self.tau = float(self.tau)
        for name in ("d", "k_true", "n_min", "n_max", "n_points", "reps", "max_iter", "holdout", "n_jobs", "n_boot"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not _is_int(self.seed) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        if not _is_int(self.truth_seed) or self.truth_seed < 0:
            raise ValueError(f"truth_seed must be a non-negative integer, got {self.truth_seed!r}")
        for name in ("k_active", "k_active_fit"):
            v = getattr(self, name)
            if v is None:
                setattr(self, name, "dense")
            elif isinstance(v, str):
                if v not in ("auto", "dense"):
                    raise ValueError(f"{name} must be a positive integer, 'auto' or 'dense', got {v!r}")
            elif not _is_int(v) or v < 1:
                raise ValueError(f"{name} must be a positive integer, 'auto' or 'dense', got {v!r}")
        if _is_int(self.k_active) and self.k_active > self.k_true:
            raise ValueError(f"k_active (K={self.k_active}) must not exceed k_true (k={self.k_true})")
        if self.k_fit is not None and (not _is_int(self.k_fit) or self.k_fit < 1):
            raise ValueError(f"k_fit must be a positive integer, got {self.k_fit!r}")
        if self.n_min > self.n_max:
            raise ValueError(f"n_min ({self.n_min}) must not exceed n_max ({self.n_max})")
        if self.reps < 2:
            raise ValueError(f"reps must be >= 2 for a rate fit with an interval, got {self.reps}")
        if self.n_points < 3:
            raise ValueError(f"n_points must be >= 3 for a rate fit with an interval, got {self.n_points}")
        ns = sample_sizes(self.n_min, self.n_max, self.n_points)
        if len(ns) < 3:
            raise ValueError(
                f"n_min={self.n_min}..n_max={self.n_max} gives only {len(ns)} distinct sample sizes; need >= 3"
            )
        if self.chunk is not None and (not _is_int(self.chunk) or self.chunk < 1):
            raise ValueError(f"chunk must be a positive integer, got {self.chunk!r}")
        if self.init not in INITS:
            raise ValueError(f"unknown init {self.init!r}; expected one of {', '.join(INITS)}")
        for name in ("init_scale", "noise_var", "tolerance"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.noise_var <= 0:
            raise ValueError(f"noise_var must be > 0, got {self.noise_var!r}")
        ESTIMATORS = estimator_registry()
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator {self.estimator!r}; expected one of {', '.join(sorted(ESTIMATORS))}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; expected one of {', '.join(BACKENDS)}")
        if self.backend == "dask" and not self.scheduler:
            raise ValueError("backend 'dask' needs a scheduler address (--scheduler tcp://HOST:PORT)")
        if self.backend != "dask" and self.scheduler:
            raise ValueError("scheduler is only used with backend 'dask'")
        if not isinstance(self.device, str):
            raise ValueError(f"device must be a string, got {self.device!r}")
        from moestat.estimators.lse import resolve_device

        resolve_device(self.device)
        for name in ("window_min", "window_max"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        lo = self.window_min or ns[0]
        hi = self.window_max or ns[-1]
        if sum(lo <= n <= hi for n in ns) < 3:
            raise ValueError(f"the fitting window [{lo}, {hi}] holds fewer than 3 sample sizes of the grid {ns}")
        for r in self.router:
            # building the estimator too catches estimator/model mismatches (e.g. EM needs a
            # dense linear gate) before anything is written
            _build_estimator(self.estimator, build_scenario(self.scenario_key(r)), self.max_iter, 0, self.device)
        return self

    # ---- derived --------------------------------------------------------------------------
    @property
    def ns(self) -> list[int]:
        """The grid of sample sizes."""
        return sample_sizes(self.n_min, self.n_max, self.n_points)

    def scenario_key(self, router: str) -> str:
        """JSON key from which a worker rebuilds the scenario of ``router`` (cached per process)."""
        keys = ("setting", "tau", "expert", "d", "k_true", "k_active", "k_fit", "k_active_fit", "noise_var", "input_law", "truth_seed")
        return json.dumps({"router": router, **{k: getattr(self, k) for k in keys}}, sort_keys=True)

    def result_fields(self) -> dict:
        """The fields that determine the numbers in ``results.csv`` (guarded on resume)."""
        return {k: v for k, v in self.to_dict().items() if k not in _EXECUTION_FIELDS + _ANALYSIS_FIELDS}


def sample_sizes(n_min: int, n_max: int, n_points: int) -> list[int]:
    """``n_points`` log-spaced integers from ``n_min`` to ``n_max`` (duplicates after rounding dropped)."""
    if n_points == 1 or n_min == n_max:
        return [int(n_min)]
    vals = np.rint(np.exp(np.linspace(math.log(n_min), math.log(n_max), n_points))).astype(int)
    return sorted(set(int(v) for v in vals))


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


def config_hash(config: RatesConfig) -> str:
    """SHA-256 of the result-determining fields (see :meth:`RatesConfig.result_fields`)."""
    blob = json.dumps(config.result_fields(), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.router, self.n, self.chunk_index)


def make_units(config: RatesConfig) -> list[WorkUnit]:
    """All work units of a sweep, largest ``n`` first (the slowest start first balances the pool).

    The composition of each unit depends only on the configuration (``reps`` and ``chunk``),
    never on ``n_jobs``.
    """
    chunk = config.chunk or config.reps
    units = []
    for n in sorted(config.ns, reverse=True):
        for router in config.router:
            for c, start in enumerate(range(0, config.reps, chunk)):
                reps = tuple(range(start, min(start + chunk, config.reps)))
                units.append(
                    WorkUnit(
                        config.scenario_key(router), router, n, reps, c, config.estimator, config.max_iter,
                        config.init, float(config.init_scale), config.seed, config.holdout, config.device,
                    )
                )
    return units


@lru_cache(maxsize=16)
def build_scenario(key: str):
    """Rebuild a :class:`~moestat.data.synthetic.Scenario` from :meth:`RatesConfig.scenario_key`."""
    from moestat.data.synthetic import make_scenario

    p = json.loads(key)
    k_active = None if p["k_active"] == "dense" else p["k_active"]
    kaf = p["k_active_fit"]
    if kaf == "dense":  # K-bar = k: every fitted expert active
        kaf = p["k_fit"] if p["k_fit"] is not None else (p["k_true"] if p["setting"] == "exact" else p["k_true"] + 1)
    elif kaf == "auto":
        kaf = None
    return make_scenario(
        p["router"],
        p["setting"],
        d=p["d"],
        k_true=p["k_true"],
        k_active=k_active,
        k_fit=p["k_fit"],
        k_active_fit=kaf,
        expert=p["expert"],
        tau=p["tau"],
        noise_var=p["noise_var"],
        input_law=p["input_law"],
        truth_seed=p["truth_seed"],
    )


def estimator_registry() -> dict:
    """``moestat.estimators.ESTIMATORS`` (name -> estimator class)."""
    try:
        from moestat.estimators import ESTIMATORS
    except ImportError:  # the registry is being written; fall back to what exists
        from moestat.estimators.lse import LeastSquaresMoE

        ESTIMATORS = {"lse": LeastSquaresMoE}
    return dict(ESTIMATORS)


def _build_estimator(name: str, scenario, max_iter: int, random_state: int, device: str):
    cls = estimator_registry()[name]
    return cls.for_scenario(scenario, max_iter=max_iter, random_state=random_state, device=device)


def _start(unit: WorkUnit, scenario, n: int, rng: np.random.Generator):
    from moestat.estimators.starts import near_truth_init, random_init

    if unit.init == "random":
        return random_init(scenario.k_fit, scenario.d, rng)
    schedule = "peer" if unit.init == "peer" else "constant"
    return near_truth_init(scenario.truth, scenario.k_fit, unit.init_scale, rng, n=n, schedule=schedule)


def compute_losses(scenario, fitted, X_holdout) -> dict[str, np.ndarray]:
    """Every loss of one batch of fits, each an array ``[R]``.

    ``voronoi``: the setting's Voronoi loss -- ``D3`` (eq. 16; equal to ``D_{1,1}``) when exact,
    ``D2`` (eq. 13) when over-specified -- with the max over K-subsets of the *true* model;
    ``voronoi_direction``: the same with ``beta1 / ||beta1||`` (what the vanilla router can
    identify, PDE (4)); ``param_single`` / ``param_multi``: the largest plain distance
    ``||omega_i - omega*_j||`` over atoms alone in / sharing their Voronoi cell (Theorem 5 (i);
    NaN when no atom is of that kind); ``mass``: the largest ``|sum_{A_j} exp(beta0_i) -
    exp(beta0*_j)|``; ``regression_l2``: ``||g_hat - g*||_{L2(mu)}`` on a fixed held-out sample.
    """
    from moestat.losses import cell_parameter_errors, regression_l2_error, voronoi_loss

    name = "D3" if scenario.setting == "exact" else "D2"
    K = scenario.model.gate.k_active
    pe = cell_parameter_errors(fitted, scenario.truth)
    return {
        "voronoi": voronoi_loss(fitted, scenario.truth, name, K),
        "voronoi_direction": voronoi_loss(fitted, scenario.truth, name, K, direction=True),
        "param_single": pe["single"],
        "param_multi": pe["multi"],
        "mass": pe["mass"],
        "regression_l2": regression_l2_error(scenario.fit_model, fitted, scenario.model, scenario.truth, X_holdout),
    }


@lru_cache(maxsize=16)
def _holdout(key: str, m: int) -> np.ndarray:
    return build_scenario(key).holdout(m)


def run_unit(unit: WorkUnit) -> list[dict]:
    """Fit one work unit and return one result row (dict) per replicate.

    Runs with one torch thread (restored afterwards) so that a unit's arithmetic, hence its
    result, is the same in the main process, a loky worker or a dask worker.
    """
    import torch

    from moestat.model.mixing import MixingMeasure

    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        scenario = build_scenario(unit.scenario_key)
        n = unit.n
        Xs, Ys, starts = [], [], []
        for r in unit.replicates:
            data_ss, init_ss = replicate_streams(unit.seed, n, r)
            X, Y = scenario.sample(n, np.random.default_rng(data_ss))
            Xs.append(X)
            Ys.append(Y)
            starts.append(_start(unit, scenario, n, np.random.default_rng(init_ss)))
        X = np.stack(Xs)
        Y = np.stack(Ys)
        G0 = MixingMeasure.stack(starts)
        # Estimator-internal randomness (restarts) gets its own child, fixed by the unit's
        # composition (n, first replicate), never by the router or the worker.
        est_ss = np.random.SeedSequence(unit.seed, spawn_key=(n, unit.replicates[0], 2))
        random_state = int(est_ss.generate_state(1)[0])
        est = _build_estimator(unit.estimator, scenario, unit.max_iter, random_state, unit.device)
        t0 = time.perf_counter()
        est.fit(X, Y, init=G0)
        elapsed = time.perf_counter() - t0
        fitted = est.params_.numpy()
        losses = compute_losses(scenario, fitted, _holdout(unit.scenario_key, unit.holdout))
    finally:
        torch.set_num_threads(old_threads)
    R = len(unit.replicates)
    status = list(getattr(est, "status_", ["ok"] * R))
    rows = []
    for i, r in enumerate(unit.replicates):
        row = {
            "scenario": scenario.name,
            "router": unit.router,
            "setting": scenario.setting,
            "n": n,
            "replicate": r,
            "seed": unit.seed,
            "estimator": unit.estimator,
            "converged": bool(np.asarray(est.converged_)[i]),
            "status": str(status[i]),
            "n_iter": int(np.asarray(est.n_iter_)[i]),
            "objective": float(np.asarray(est.objective_)[i]),
        }
        for name in LOSS_NAMES:
            row[name] = float(losses[name][i])
        row["time"] = elapsed / R
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------
# execution
# ----------------------------------------------------------------------------------------------
def execute(
    units: Sequence[WorkUnit],
    on_result: Callable[[WorkUnit, list[dict]], None],
    *,
    n_jobs: int = 1,
    backend: str = "loky",
    scheduler: str | None = None,
    progress: bool | None = None,
    total_fits: int | None = None,
) -> None:
    """Run ``units`` and hand each unit's rows to ``on_result`` as soon as it finishes.

    Parameters
    ----------
    units : sequence of WorkUnit
    on_result : callable
        Called in the calling process, one unit at a time (so one writer appends to the store).
    n_jobs : int
        joblib workers (``backend="loky"``); 1 runs in-process.
    backend : {"loky", "dask"}
        ``dask``: submit to the ``dask.distributed`` scheduler at ``scheduler``.
    progress : bool or None
        tqdm progress bar; ``None`` shows it only on a terminal, ``False`` never.
    """
    from tqdm.auto import tqdm

    units = list(units)
    total = total_fits if total_fits is not None else sum(len(u.replicates) for u in units)
    bar = tqdm(total=total, unit="fit", disable=None if progress is None or progress else True, leave=False)
    try:
        if backend == "dask":
            from distributed import Client, as_completed

            with Client(scheduler) as client:  # the default client while open: as_completed needs it
                futures = client.map(run_unit, units, pure=False)
                by_future = dict(zip(futures, units))
                for fut in as_completed(futures):
                    rows = fut.result()
                    on_result(by_future[fut], rows)
                    bar.update(len(rows))
        elif n_jobs == 1 or len(units) <= 1:
            for u in units:
                rows = run_unit(u)
                on_result(u, rows)
                bar.update(len(rows))
        else:
            from joblib import Parallel, delayed

            par = Parallel(n_jobs=n_jobs, backend="loky", return_as="generator_unordered")
            # Unordered results carry their unit, so completion order is irrelevant.
            for u, rows in par(delayed(_run_tagged)(u) for u in units):
                on_result(u, rows)
                bar.update(len(rows))
    finally:
        bar.close()


def _run_tagged(unit: WorkUnit):
    return unit, run_unit(unit)


# ----------------------------------------------------------------------------------------------
# store
# ----------------------------------------------------------------------------------------------
def _fmt(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)  # round-trips exactly, so a resumed sweep compares bit for bit
    return str(v)


class ResultStore:
    """Long-format ``results.csv``: one line per finished fit, appended atomically.

    Parameters
    ----------
    path : path-like
        The CSV file (created with its header on first use).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def create(self) -> None:
        """Write the header if the file is new; otherwise drop a torn last line (see :meth:`repair`)."""
        from moestat.io import atomic_write_text

        if not self.path.exists():
            atomic_write_text(self.path, ",".join(RESULT_COLUMNS) + "\n")
        else:
            self.repair()

    def repair(self) -> bool:
        """Cut a partial last line left by a kill during an append (rewrites the file atomically).

        Without this, the next appended row would be glued to the torn fragment.  Returns True
        when something was cut.
        """
        from moestat.io import atomic_write_text

        text = self.path.read_text(encoding="utf-8")
        if text.endswith("\n") or not text:
            return False
        atomic_write_text(self.path, text[: text.rfind("\n") + 1])
        return True

    def append(self, rows: Iterable[dict]) -> None:
        """Append rows, one ``write`` + ``fsync`` per row (see :func:`moestat.io.append_line`)."""
        from moestat.io import append_line

        for row in rows:
            buf = io.StringIO()
            csv.writer(buf, lineterminator="").writerow([_fmt(row[c]) for c in RESULT_COLUMNS])
            append_line(self.path, buf.getvalue())

    def read(self):
        """The results as a :class:`pandas.DataFrame` (see :func:`read_results`)."""
        return read_results(self.path)

    def done(self) -> set[tuple[str, int, int]]:
        """``(router, n, replicate)`` of every complete row."""
        df = self.read()
        return set(zip(df["router"], df["n"].astype(int), df["replicate"].astype(int)))


def read_results(path: str | os.PathLike):
    """Read ``results.csv`` into a DataFrame, skipping a torn last line and duplicate rows.

    A kill during an append can leave a partial last line (no newline, or too few fields);
    such lines are ignored.  If a unit was recomputed after a kill, the first copy of each
    ``(router, n, replicate)`` is kept (the copies are identical by construction).
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results file {path}")
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if not lines or lines[0].split(",") != list(RESULT_COLUMNS):
        raise ValueError(f"{path} is not a moestat results file (unexpected header)")
    complete = lines[1:-1] if not text.endswith("\n") else lines[1:]
    rows = []
    for rec in csv.reader(complete):
        if len(rec) == len(RESULT_COLUMNS):
            rows.append(rec)
    df = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    for c in ("n", "replicate", "seed", "n_iter"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    df["converged"] = df["converged"].map({"1": True, "0": False, "True": True, "False": False})
    for c in ("objective", *LOSS_NAMES, "time"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    df = df.dropna(subset=["n", "replicate"]).drop_duplicates(subset=["router", "n", "replicate"], keep="first")
    df["n"] = df["n"].astype(int)
    df["replicate"] = df["replicate"].astype(int)
    return df.reset_index(drop=True)


# ----------------------------------------------------------------------------------------------
# provenance
# ----------------------------------------------------------------------------------------------
def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_provenance(out_dir: Path, config: RatesConfig, *, started: str, finished: str | None = None, previous: dict | None = None) -> dict:
    """Write ``provenance.json``: version, git commit, config (+ hash), platform, torch, timestamps.

    ``previous`` (a resumed sweep's old provenance) keeps the earlier runs in ``runs``.
    """
    import torch

    from moestat import __version__
    from moestat.io import atomic_write_json

    runs = list(previous.get("runs", [])) if previous else []
    this_run = {"started": started, "finished": finished, "n_jobs": config.n_jobs, "backend": config.backend, "scheduler": config.scheduler}
    if runs and runs[-1].get("started") == started:
        runs[-1] = this_run
    else:
        runs.append(this_run)
    prov = {
        "package": "moestat",
        "version": __version__,
        "git_commit": _git_commit(),
        "config": config.to_dict(),
        "config_hash": config_hash(config),
        "platform": {
            "python": sys.version.split()[0],
            "system": platform.platform(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
        },
        "torch": {
            "version": torch.__version__,
            "device": config.device,
            "cuda_available": bool(torch.cuda.is_available()),
        },
        "numpy": np.__version__,
        "runs": runs,
    }
    atomic_write_json(out_dir / "provenance.json", prov)
    return prov


def check_resumable(out_dir: Path, config: RatesConfig, resume: bool) -> dict | None:
    """Refuse an output folder that belongs to another sweep; return its provenance on resume.

    Raises
    ------
    ValueError
        ``--out`` already holds results and ``resume`` is false, or its configuration differs.
    """
    prov_path = out_dir / "provenance.json"
    res_path = out_dir / "results.csv"
    if not resume:
        if res_path.exists():
            raise ValueError(f"--out {out_dir} already holds results.csv; pass --resume or choose an empty folder")
        return None
    if not prov_path.exists():
        if res_path.exists():
            raise ValueError(f"--resume: {out_dir} has results.csv but no provenance.json; cannot check its config")
        return None
    try:
        prev = json.loads(prov_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--resume: cannot read {prov_path}: {exc}") from None
    if prev.get("config_hash") != config_hash(config):
        old = prev.get("config", {})
        new = config.result_fields()
        diff = sorted(k for k in new if old.get(k) != (new[k] if not isinstance(new[k], tuple) else list(new[k])))
        raise ValueError(
            f"--resume: {out_dir} was written by a different config (differs in: {', '.join(diff) or 'unknown'})"
        )
    return prev


def run_sweep(config: RatesConfig, out_dir: str | os.PathLike, *, resume: bool = False, progress: bool | None = None):
    """Run (or resume) the sweep of ``config`` into ``out_dir``; return the results DataFrame.

    ``config`` must already be validated and ``out_dir`` checked (:func:`check_resumable`).
    """
    out_dir = Path(out_dir)
    prev = None
    prov_path = out_dir / "provenance.json"
    if resume and prov_path.exists():
        prev = json.loads(prov_path.read_text(encoding="utf-8"))
    started = _now()
    write_provenance(out_dir, config, started=started, previous=prev)
    prev = json.loads(prov_path.read_text(encoding="utf-8"))
    store = ResultStore(out_dir / "results.csv")
    store.create()
    done = store.done()
    todo = []
    for u in make_units(config):
        missing = [r for r in u.replicates if (u.router, u.n, r) not in done]
        if missing:
            todo.append(u)

    def on_result(unit: WorkUnit, rows: list[dict]) -> None:
        store.append([r for r in rows if (r["router"], r["n"], r["replicate"]) not in done])

    total = sum(len(u.replicates) for u in todo)
    execute(todo, on_result, n_jobs=config.n_jobs, backend=config.backend, scheduler=config.scheduler, progress=progress, total_fits=total)
    write_provenance(out_dir, config, started=started, finished=_now(), previous=prev)
    return store.read()

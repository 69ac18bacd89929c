"""The configuration of a rate experiment: small frozen specs, built from flat keys.

A :class:`RatesConfig` is made of five specs, one per concern:

===============  ========================  =========================================================
attribute        spec                      flat keys (the long flags of ``moestat rates``)
===============  ========================  =========================================================
``router``       tuple of str              ``router`` (one curve each, all on the same data)
``scenario``     :class:`ScenarioSpec`     ``setting tau expert d k_true k_active k_fit
                                           k_active_fit noise_var input_law truth_seed``
``grid``         :class:`GridSpec`         ``n_min n_max n_points reps seed chunk holdout
                                           max_reps``
``fitting``      :class:`FittingSpec`      ``estimator max_iter init init_scale device
                                           extra_starts cell_errors alt_init_scale answer
                                           sgd_lr sgd_batch sgd_epochs sgd_schedule``
``execution``    :class:`ExecutionSpec`    ``n_jobs backend scheduler quiet``
``analysis``     :class:`AnalysisSpec`     ``window_min window_max tolerance n_boot halfwidth
                                           statistic bars``
===============  ========================  =========================================================

Presets, TOML files and command-line flags speak the flat keys; :meth:`RatesConfig.from_dict`
sorts them into the specs, and every flat key can be read back as an attribute
(``config.reps`` is ``config.grid.reps``).  The split also says what a resumed sweep may change:
``execution`` and ``analysis`` never change a number in ``results.csv``, so they are left out of
:func:`moestat.rates.store.config_hash`.

Building a spec *normalises* (a comma string of routers becomes a tuple, router and setting
names take their canonical spelling through :func:`moestat.model.gates.canonical_name`,
``k_active=None`` becomes ``"dense"``, an integer ``tau`` a float); :meth:`RatesConfig.validate`
only *checks* and never changes the object.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
import math
import os
import tomllib
from dataclasses import dataclass, field
from typing import Any


# The router and setting words are owned by the scenarios (one tuple, one meaning).
from moestat.data.scenario_files import scenario_digest
from moestat.data.synthetic import ROUTERS, SETTINGS
from moestat.devices import resolve_device
from moestat.estimators.memory import parse_memory
from moestat.estimators.sgd import LR_SCHEDULES, SGD_DEFAULTS
from moestat.rates.labels import FILE_PREFIX  # noqa: F401 - re-exported: a scenario file's curve label prefix
from moestat.rates.labels import STATISTIC_NAMES
from moestat.rates.presets import load_toml, preset_dict
from moestat.rates.resolve import Experiment, estimator_registry
from moestat.rates.spec_checks import canonical as _canonical, check_truth_memory, is_int as _is_int, is_number as _is_number, positive_ints as _positive_ints, set_field as _set, unhonoured_fields as _unhonoured
from moestat.rates.spec_checks import sample_sizes  # noqa: F401 - public here since the first release
from moestat.seeding import MAX_SEED

#: Model families of a sweep (:attr:`ScenarioSpec.family`).
FAMILIES = ("regression", "gaussian-moe")

__all__ = [
    "ROUTERS",
    "SETTINGS",
    "FAMILIES",
    "INITS",
    "BACKENDS",
    "ScenarioSpec",
    "GridSpec",
    "FittingSpec",
    "ExecutionSpec",
    "AnalysisSpec",
    "RatesConfig",
    "sample_sizes",
]

INITS = ("near", "peer", "random")
BACKENDS = ("loky", "dask")
#: Error bars of the convergence figures (:attr:`AnalysisSpec.bars`).
BARS = ("percentile", "sd2")


# ---------------------------------------------------------------------------------------------
# the specs
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScenarioSpec:
    """The synthetic regression model (see :func:`moestat.data.synthetic.make_scenario`).

    Parameters
    ----------
    setting : {"exact", "over"}
        Exact-specified (``k_fit = k_true``) or over-specified (``k_fit = k_true + 1``).
    tau : float
        ``tau1 = tau2 = tau`` of the perturbed router (> 0 for it).
    expert : str
        Expert activation, see :data:`moestat.model.experts.ACTIVATIONS`.
    d, k_true : int
        Input dimension and true number of experts.
    k_active : int, "auto" or "dense"
        True number of activated experts K (``"auto"``: ``make_scenario``'s default, K = 2 exact
        and dense over-specified; ``None`` is read as ``"dense"``).
    k_fit : int or None
        Fitted atoms (``None``: the setting's default).
    k_active_fit : int, "auto" or "dense"
        K-bar of the fitted model (``"auto"``: the Proposition 1 minimum).
    noise_var : float
        Noise variance nu (> 0).
    input_law : {"uniform", "gaussian"}
    truth_seed : int
        Seed of the one-off draw of the true parameters.
    scenario_file : str
        A user scenario instead of the built-in one: ``FILE.toml`` or ``path/file.py:function``
        (:func:`moestat.data.scenario_files.load_scenario`); empty for the built-in scenarios.  With
        a file, the fields above are ignored and the one curve is labelled ``file:<stem>``.
    family : {"regression", "gaussian-moe"}
        ``regression``: the regression MoE of Nguyen et al. (2024) with the gates of ``router``;
        ``gaussian-moe``: model 1 of Nguyen, Nguyen & Ho (2023), the softmax-gated Gaussian MoE
        (:func:`moestat.data.gaussian_scenarios.model1_scenario`), fitted by maximum likelihood
        (``estimator = "mle"``); only ``setting``, ``k_fit``, ``input_law`` (``uniform`` or the
        peers' ``grid``) and ``starts`` apply, and the one curve is labelled ``gaussian-moe``.
    starts : int
        Starts per replicate of the Gaussian-MoE maximum likelihood (the near-truth start and
        ``starts - 1`` jittered copies; best by log-likelihood; the peers used 5).
    """

    setting: str = "exact"
    tau: float = 0.5  # moestat.data.synthetic.DEFAULTS["tau"]
    expert: str = "gelu"
    d: int = 4
    k_true: int = 3
    k_active: int | str = "auto"
    k_fit: int | None = None
    k_active_fit: int | str = "auto"
    noise_var: float = 0.01
    input_law: str = "uniform"
    truth_seed: int = 2405_14131
    scenario_file: str = ""
    family: str = "regression"
    starts: int = 1

    def __post_init__(self) -> None:
        _set(self, "setting", _canonical(self.setting, SETTINGS))
        if _is_int(self.tau):
            _set(self, "tau", float(self.tau))
        for name in ("k_active", "k_active_fit"):
            if getattr(self, name) is None:
                _set(self, name, "dense")

    def validate(self) -> None:
        """Check every field; raise a one-line ``ValueError`` naming the first bad one."""
        if self.setting not in SETTINGS:
            raise ValueError(f"unknown setting {self.setting!r}; expected one of {', '.join(SETTINGS)}")
        if not _is_number(self.tau) or not math.isfinite(self.tau):
            raise ValueError(f"tau must be a finite number, got {self.tau!r}")
        if self.tau < 0:
            raise ValueError(f"tau must be >= 0, got {self.tau!r}")
        _positive_ints(self, ("d", "k_true"))
        if not _is_int(self.truth_seed) or not 0 <= self.truth_seed <= MAX_SEED:
            raise ValueError(f"truth_seed must be an integer in [0, 2**63 - 1], got {self.truth_seed!r}")
        for name in ("k_active", "k_active_fit"):
            v = getattr(self, name)
            if isinstance(v, str):
                if v not in ("auto", "dense"):
                    raise ValueError(f"{name} must be a positive integer, 'auto' or 'dense', got {v!r}")
            elif not _is_int(v) or v < 1:
                raise ValueError(f"{name} must be a positive integer, 'auto' or 'dense', got {v!r}")
        if _is_int(self.k_active) and self.k_active > self.k_true:
            raise ValueError(f"k_active (K={self.k_active}) must not exceed k_true (k={self.k_true})")
        if self.k_fit is not None and (not _is_int(self.k_fit) or self.k_fit < 1):
            raise ValueError(f"k_fit must be a positive integer, got {self.k_fit!r}")
        if not _is_number(self.noise_var) or not math.isfinite(self.noise_var) or self.noise_var < 0:
            raise ValueError(f"noise_var must be a finite number >= 0, got {self.noise_var!r}")
        if not self.scenario_file and self.family == "regression":
            check_truth_memory(self.k_true, self.k_fit, self.d)
        if self.noise_var <= 0:
            raise ValueError(f"noise_var must be > 0, got {self.noise_var!r}")
        if not isinstance(self.scenario_file, str):
            raise ValueError(f"scenario_file must be a path string, got {self.scenario_file!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"unknown family {self.family!r}; expected one of {', '.join(FAMILIES)}")
        if self.family != "regression" and self.scenario_file:
            raise ValueError("give either a scenario file or a model family, not both")
        if not _is_int(self.starts) or self.starts < 1:
            raise ValueError(f"starts must be a positive integer, got {self.starts!r}")
        if self.starts > 1 and self.family != "gaussian-moe" and not self.scenario_file:
            raise ValueError("starts > 1 is for maximum likelihood (the least-squares sweeps have --extra-starts)")
        _unhonoured(self)

    def key(self, router: str, digest: str | None = None) -> str:
        """JSON key from which a worker rebuilds the scenario of ``router`` (see
        :func:`moestat.rates.resolve.build_scenario`, cached per process).

        ``digest``: the scenario file's :func:`~moestat.data.scenario_files.scenario_digest` when
        the caller has read it already (:meth:`moestat.rates.resolve.Experiment.of`); else it is read here.
        """
        if self.scenario_file:  # a user scenario: the file (and what it holds) is the whole key
            extra = {"starts": self.starts} if self.starts != 1 else {}  # keys of earlier runs stay as they were
            digest = scenario_digest(self.scenario_file) if digest is None else digest
            return json.dumps({"router": router, "scenario_file": self.scenario_file,
                               "digest": digest, **extra}, sort_keys=True)
        if self.family == "gaussian-moe":  # model 1 of Nguyen, Nguyen & Ho (2023): only these apply
            return json.dumps({"router": router, "family": self.family, "setting": self.setting, "k_fit": self.k_fit,
                               "input_law": self.input_law, "starts": self.starts}, sort_keys=True)
        fields = dataclasses.asdict(self)
        for name in ("scenario_file", "family", "starts"):  # keys of the built-in scenarios stay as they were
            del fields[name]
        return json.dumps({"router": router, **fields}, sort_keys=True)


@dataclass(frozen=True)
class GridSpec:
    """The sweep grid: sample sizes, replicates, seeds and the work-unit size.

    Parameters
    ----------
    n_min, n_max, n_points : int
        ``n_points`` log-spaced sample sizes from ``n_min`` to ``n_max`` (rounded, distinct; at
        least 3 for a rate fit with an interval).
    reps : int
        Replicates per sample size (>= 2).
    seed : int
        Root seed of every data and start stream (see :func:`moestat.rates.sweep.replicate_streams`).
    chunk : int or None
        Replicates per work unit (``None``: all of them); fixed, so results do not depend on
        ``n_jobs``.
    holdout : int
        Size of the fixed held-out sample of the regression L2 error.
    max_reps : int
        Adaptive replicates (0: off): after the sweep, while the Monte Carlo plan
        (:func:`moestat.rates.verdicts.plan`) asks for more replicates than ``reps`` for some
        predicted rate, add replicates (at most doubling per round) up to ``max_reps`` and refit;
        replicate ``r`` has the same streams whatever the round, so the grown sweep equals a sweep
        run with the final ``reps`` from the start, and ``--resume`` continues it.
    grow_n : int
        Adaptive n-max (0: off): after the sweep (and the adaptive replicates), while some
        predicted rate's plan says a larger n-max is needed (``larger_n_needed``: a ``floor``, a
        ``pre-asymptotic`` curve not yet straight, or significant curvature with a lack of fit wider
        than the target), add the next size of :attr:`ladder` and refit, up to ``grow_n``.
        Resumable like ``max_reps``: each ``(n, replicate)`` has its own streams.
    grown : int
        How many :attr:`ladder` sizes the grid holds now (set by the growth loop; 0 to start).
    """

    n_min: int = 2000
    n_max: int = 128000
    n_points: int = 7
    reps: int = 20
    seed: int = 0
    chunk: int | None = None
    holdout: int = 4096
    max_reps: int = 0
    grow_n: int = 0
    grown: int = 0

    @property
    def base_ns(self) -> list[int]:
        """The grid of sample sizes before any growth."""
        return sample_sizes(self.n_min, self.n_max, self.n_points)

    @property
    def ladder(self) -> list[int]:
        """The sizes beyond ``n_max`` that ``grow_n`` may add: ``n_max r^j`` (rounded), ``j = 1,
        2, ...``, with the grid's own log-spacing ratio ``r``, up to ``grow_n`` (empty when off)."""
        if not self.grow_n or self.n_points < 2 or self.n_max <= self.n_min:
            return []
        r = (self.n_max / self.n_min) ** (1.0 / (self.n_points - 1))
        out, j = [], 1
        while True:
            v = int(round(self.n_max * r**j))
            if v > self.grow_n:
                return out
            if not out or v > out[-1]:
                out.append(v)
            j += 1

    @property
    def ns(self) -> list[int]:
        """The grid of sample sizes (with the ``grown`` ladder sizes)."""
        return self.base_ns + self.ladder[: self.grown]

    def validate(self) -> None:
        """Check every field; raise a one-line ``ValueError`` naming the first bad one."""
        _positive_ints(self, ("n_min", "n_max", "n_points", "reps", "holdout"))
        if not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be an integer in [0, 2**63 - 1], got {self.seed!r}")
        if self.n_min > self.n_max:
            raise ValueError(f"n_min ({self.n_min}) must not exceed n_max ({self.n_max})")
        if self.reps < 2:
            raise ValueError(f"reps must be >= 2 for a rate fit with an interval, got {self.reps}")
        if self.n_points < 3:
            raise ValueError(f"n_points must be >= 3 for a rate fit with an interval, got {self.n_points}")
        ns = self.ns
        if len(ns) < 3:
            raise ValueError(
                f"n_min={self.n_min}..n_max={self.n_max} gives only {len(ns)} distinct sample sizes; need >= 3"
            )
        if self.chunk is not None and (not _is_int(self.chunk) or self.chunk < 1):
            raise ValueError(f"chunk must be a positive integer, got {self.chunk!r}")
        if not _is_int(self.max_reps) or self.max_reps < 0 or (self.max_reps and self.max_reps < self.reps):
            raise ValueError(f"max_reps must be 0 (off) or an integer >= reps ({self.reps}), got {self.max_reps!r}")
        if not _is_int(self.grow_n) or self.grow_n < 0 or (self.grow_n and self.grow_n <= self.n_max):
            raise ValueError(f"grow_n must be 0 (off) or an integer > n_max ({self.n_max}), got {self.grow_n!r}")
        if self.grow_n and not self.ladder:
            raise ValueError(f"grow_n {self.grow_n} is below the next size of the grid's ladder "
                             f"({int(round(self.n_max * (self.n_max / self.n_min) ** (1.0 / (self.n_points - 1))))})")
        if not _is_int(self.grown) or not 0 <= self.grown <= len(self.ladder):
            raise ValueError(f"grown must be an integer in 0..{len(self.ladder)} (sizes of the ladder), got {self.grown!r}")


@dataclass(frozen=True)
class FittingSpec:
    """How each replicate is fitted.

    Parameters
    ----------
    estimator : str
        A key of ``moestat.estimators.ESTIMATORS`` (``lse``, ``sgd``, ``null``, ``em``).
    max_iter : int
        Iteration budget passed to estimators that take one.
    init : {"near", "peer", "random"}
        ``near``: truth + N(0, init_scale^2) (constant in n); ``peer``: the peer code's
        ``init_scale * n^-0.083`` (an artefact, kept to show it); ``random``: a data-free start.
    init_scale : float
        Noise scale of the near-truth start.
    device : str
        ``cpu``, ``cuda[:N]`` or ``auto`` (estimator tensors; may change the last digits, so it
        is part of the configuration a resumed sweep must match).
    extra_starts : int
        Optimum certificate: extra starts per (n, replicate), fitted in one batch after the
        near-truth fit (which stays bit-identical); results in ``extras.csv``
        (:mod:`moestat.rates.extras`).  0 (the default): none.
    cell_errors : bool
        Also record Theorem 5's mass-weighted per-cell errors and the beta1 radial/directional
        split (:mod:`moestat.losses.cell_errors`) in ``extras.csv``.
    alt_init_scale : float
        Start sensitivity (0: off): a second near-truth fit with this noise scale, its losses as ``alt_<loss>`` in ``extras.csv``.
    answer : bool
        Refit a fit worse than the truth's criterion from more starts and keep the best
        (:func:`moestat.rates.truth_check.answer_below_truth`; the default).  ``False`` reports each
        fit from its one start as it is (its ``truth_check`` still says ``below_truth``, and it is
        not counted as converged): the one-start procedure of Nguyen et al. (2024), App. E.1, whose
        fits are not answered.
    sgd_lr, sgd_batch, sgd_epochs, sgd_schedule : float, int, int, str
        Learning rate, minibatch size, epochs and learning-rate schedule (``constant``, ``cosine``,
        ``step``) of ``estimator = "sgd"`` (:class:`~moestat.estimators.sgd.SGDMoE`; its defaults);
        a value other than the default with another estimator is an error.
    """

    estimator: str = "lse"
    max_iter: int = 200
    init: str = "near"
    init_scale: float = 0.05
    device: str = "cpu"
    extra_starts: int = 0
    cell_errors: bool = False
    alt_init_scale: float = 0.0
    answer: bool = True
    sgd_lr: float = SGD_DEFAULTS["lr"]
    sgd_batch: int = SGD_DEFAULTS["batch_size"]
    sgd_epochs: int = SGD_DEFAULTS["epochs"]
    sgd_schedule: str = SGD_DEFAULTS["lr_schedule"]

    @property
    def estimator_options(self) -> tuple[tuple[str, Any], ...]:
        """``(name, value)`` pairs set on the estimator of every work unit (the SGD settings for
        ``estimator = "sgd"``; none for another estimator)."""
        if self.estimator != "sgd":
            return ()
        return (("lr", float(self.sgd_lr)), ("batch_size", int(self.sgd_batch)), ("epochs", int(self.sgd_epochs)),
                ("lr_schedule", str(self.sgd_schedule)))

    def validate(self) -> None:
        """Check every field; raise a one-line ``ValueError`` naming the first bad one."""
        _positive_ints(self, ("max_iter",))
        if not _is_int(self.extra_starts) or not 0 <= self.extra_starts <= 64:
            raise ValueError(f"extra_starts must be an integer in [0, 64], got {self.extra_starts!r}")
        if not isinstance(self.cell_errors, bool):
            raise ValueError(f"cell_errors must be true or false, got {self.cell_errors!r}")
        if not _is_number(self.alt_init_scale) or not 0 <= self.alt_init_scale < math.inf:
            raise ValueError(f"alt_init_scale must be a finite number >= 0, got {self.alt_init_scale!r}")
        if self.init not in INITS:
            raise ValueError(f"unknown init {self.init!r}; expected one of {', '.join(INITS)}")
        if not isinstance(self.answer, bool):
            raise ValueError(f"answer must be true or false, got {self.answer!r}")
        if not _is_number(self.sgd_lr) or not math.isfinite(self.sgd_lr) or self.sgd_lr <= 0:
            raise ValueError(f"sgd_lr must be a finite number > 0, got {self.sgd_lr!r}")
        _positive_ints(self, ("sgd_batch", "sgd_epochs"))
        if self.sgd_schedule not in LR_SCHEDULES:
            raise ValueError(f"unknown sgd_schedule {self.sgd_schedule!r}; expected one of {', '.join(LR_SCHEDULES)}")
        if self.estimator != "sgd":
            for name, key in (("sgd_lr", "lr"), ("sgd_batch", "batch_size"), ("sgd_epochs", "epochs"),
                              ("sgd_schedule", "lr_schedule")):
                if getattr(self, name) != SGD_DEFAULTS[key]:
                    raise ValueError(f"{name} applies to --estimator sgd only (the estimator is {self.estimator!r})")
        if not _is_number(self.init_scale) or not math.isfinite(self.init_scale) or self.init_scale < 0:
            raise ValueError(f"init_scale must be a finite number >= 0, got {self.init_scale!r}")
        registry = estimator_registry()
        if self.estimator not in registry:
            raise ValueError(f"unknown estimator {self.estimator!r}; expected one of {', '.join(sorted(registry))}")
        if not isinstance(self.device, str):
            raise ValueError(f"device must be a string, got {self.device!r}")
        resolve_device(self.device)


@dataclass(frozen=True)
class ExecutionSpec:
    """Where and how the work units run; never changes a number of ``results.csv``.

    Parameters
    ----------
    n_jobs : int or "auto"
        Processes that fit work units (this one and ``n_jobs - 1`` loky workers).  ``"auto"``
        (the default of ``moestat rates``; this class keeps 1): one per usable core, at most one
        per work unit, and fewer when the sweep is too small for a worker's start-up to pay
        (:func:`moestat.rates.sweep.auto_n_jobs`).
    backend : {"loky", "dask"}
    scheduler : str or None
        ``dask.distributed`` scheduler address (``backend="dask"`` only).
    quiet : bool
        No progress bar and no printed table.
    max_memory : int or str
        Budget of a likelihood fit's per-sample arrays in one process (bytes, or ``"1.5G"``-style
        text): the maximum-likelihood fits of a work unit run their replicates in chunks within it,
        with the same rows (:mod:`moestat.estimators.memory`); ``"auto"`` (default): 1 GiB, or half
        the available memory where that is less.
    """

    n_jobs: int | str = 1
    backend: str = "loky"
    scheduler: str | None = None
    quiet: bool = False
    max_memory: int | str = "auto"

    def validate(self) -> None:
        """Check every field; raise a one-line ``ValueError`` naming the first bad one."""
        if self.n_jobs != "auto":
            try:
                _positive_ints(self, ("n_jobs",))
            except ValueError:
                raise ValueError(f"n_jobs must be a positive integer or 'auto', got {self.n_jobs!r}") from None
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; expected one of {', '.join(BACKENDS)}")
        parse_memory(self.max_memory)
        if self.backend == "dask" and not self.scheduler:
            raise ValueError("backend 'dask' needs a scheduler address (--scheduler tcp://HOST:PORT)")
        if self.backend != "dask" and self.scheduler:
            raise ValueError("scheduler is only used with backend 'dask'")


@dataclass(frozen=True)
class AnalysisSpec:
    """The rate fit of :func:`moestat.rates.fit.fit_rates`; never changes ``results.csv``.

    Parameters
    ----------
    window_min, window_max : int or None
        Declared fitting window in ``n`` (``None``: the whole grid).
    tolerance : float
        The band of :func:`moestat.rates.verdicts.judge_interval`: a prediction outside the 95% CI by
        at most this much is ``near`` (never ``consistent``).
    n_boot : int
        Bootstrap resamples over replicates.
    halfwidth : float
        Target half-width of the 95% slope interval for the Monte Carlo plan printed with the
        table (:func:`moestat.rates.verdicts.plan`).
    statistic : {"mean", "median"}
        What the slope is fitted to per sample size (:func:`moestat.rates.fit.slope_with_interval`):
        the log of the mean over replicates (the expected loss; the default), or of the median
        (the ``O_P`` statements of the theorems bound quantiles, not means).  With ``median`` each
        fit also reports the mean's slope and category beside it (``mean_statistic``).
    bars : {"percentile", "sd2"}
        The error bars of the convergence figures (:mod:`moestat.rates.figures`): the 10th to 90th
        percentile of the replicates (the default), or the mean +- 2 standard deviations, the bars
        of Nguyen et al. (2024), Figure 1 (:func:`moestat.rates.figures.mean_sd_bars`).
    """

    window_min: int | None = None
    window_max: int | None = None
    tolerance: float = 0.15
    n_boot: int = 1000
    halfwidth: float = 0.05
    statistic: str = "mean"
    bars: str = "percentile"

    def validate(self) -> None:
        """Check every field; raise a one-line ``ValueError`` naming the first bad one."""
        _positive_ints(self, ("n_boot",))
        if not _is_number(self.tolerance) or not math.isfinite(self.tolerance) or self.tolerance < 0:
            raise ValueError(f"tolerance must be a finite number >= 0, got {self.tolerance!r}")
        if not _is_number(self.halfwidth) or not math.isfinite(self.halfwidth) or self.halfwidth <= 0:
            raise ValueError(f"halfwidth must be a finite number > 0, got {self.halfwidth!r}")
        if self.statistic not in STATISTIC_NAMES:
            raise ValueError(f"statistic must be {' or '.join(repr(k) for k in STATISTIC_NAMES)}, got {self.statistic!r}")
        if self.bars not in BARS:
            raise ValueError(f"bars must be {' or '.join(repr(k) for k in BARS)}, got {self.bars!r}")
        for name in ("window_min", "window_max"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")


#: Spec attribute of :class:`RatesConfig` -> its class.
_GROUPS: dict[str, type] = {
    "scenario": ScenarioSpec,
    "grid": GridSpec,
    "fitting": FittingSpec,
    "execution": ExecutionSpec,
    "analysis": AnalysisSpec,
}
#: Flat key -> the spec attribute that holds it.
_GROUP_OF: dict[str, str] = {f.name: g for g, cls in _GROUPS.items() for f in dataclasses.fields(cls)}
#: Flat keys in the order of ``to_dict`` (that of the flat configuration of earlier versions, so
#: ``summary.json``, ``provenance.json`` and :func:`~moestat.rates.store.config_hash` are unchanged).
FLAT_KEYS = (
    "router", "setting", "tau", "expert", "d", "k_true", "k_active", "k_fit", "k_active_fit", "noise_var",
    "input_law", "truth_seed", "n_min", "n_max", "n_points", "reps", "estimator", "max_iter", "init",
    "init_scale", "seed", "chunk", "holdout", "n_jobs", "backend", "scheduler", "device", "quiet",
    "window_min", "window_max", "tolerance", "n_boot", "halfwidth", "extra_starts", "cell_errors", "max_reps",
    "scenario_file", "family", "starts", "grow_n", "grown", "alt_init_scale", "statistic", "max_memory",
    "answer", "sgd_lr", "sgd_batch", "sgd_epochs", "sgd_schedule", "bars",
)
assert set(FLAT_KEYS) == {"router", *_GROUP_OF}, "every flat key belongs to exactly one spec"




def file_label(source: str) -> str:
    """The curve label of a scenario file: ``file:<name>``, the TOML file's ``name`` key when it has
    one, else ``file:<stem>`` (``file:<stem>.<function>`` for Python, whose function is not run here).

    The ``file:`` prefix keeps a file's curve apart from the built-in routers (a file named
    ``perturbed`` must not receive their predictions); taking the label from ``name`` rather than
    the path lets a renamed or moved copy of the file resume the same run.
    """
    path, func = source, ""
    head, sep, tail = source.rpartition(":")
    if sep and head.endswith(".py"):
        path, func = head, tail
    if not func:
        name = _toml_name(path)
        if name:
            return f"{FILE_PREFIX}{name}"
    stem = Path(path).stem
    return f"{FILE_PREFIX}{stem}.{func}" if func else f"{FILE_PREFIX}{stem}"


def legacy_file_label(source: str) -> str:
    """The label earlier versions gave every scenario file: ``file:<stem>`` (``.<function>``)."""
    head, sep, tail = source.rpartition(":")
    if sep and head.endswith(".py"):
        return f"{FILE_PREFIX}{Path(head).stem}.{tail}"
    return f"{FILE_PREFIX}{Path(source).stem}"


def stored_file_label(out_dir: Path, config: RatesConfig) -> RatesConfig:
    """``config`` with the curve label a scenario-file run in ``out_dir`` was written with, when that
    is the label earlier versions took from the file's path (``file:<stem>``) and the file is at
    the same path: such a folder's rows are labelled so, and it stays resumable now that the label
    comes from the file's ``name`` (:func:`file_label`).  Otherwise ``config``
    unchanged (:func:`moestat.rates.store.check_resumable` then reports any difference)."""
    if not config.scenario_file:
        return config
    try:
        prev = json.loads((Path(out_dir) / "provenance.json").read_text(encoding="utf-8"))
        stored = tuple(prev["config"]["router"])
    except (OSError, ValueError, KeyError, TypeError):
        return config
    legacy = (legacy_file_label(config.scenario_file),)
    if stored == legacy and config.router != legacy:
        return config.replace(router=list(stored))
    return config


def _toml_name(path: str) -> str | None:
    """The ``name`` string of a TOML scenario file, or ``None`` (no such key, or the file cannot be
    read or parsed here; loading the scenario reports that with its own one-line error)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # tomllib.TOMLDecodeError and UnicodeDecodeError are ValueErrors
        return None
    name = data.get("name")
    return name.strip() if isinstance(name, str) and name.strip() else None


def _routers(value: Any) -> Any:
    """A comma string or a sequence of router names -> a tuple of canonical names (unknown names
    are kept as given for :meth:`RatesConfig.validate` to report)."""
    if isinstance(value, str):
        value = [r.strip() for r in value.split(",")]
        if len(value) > 1 and not all(value):
            raise ValueError(f"router: an empty name in the comma list {','.join(value)!r}")
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(r, ROUTERS) for r in value)
    return value


@dataclass(frozen=True)
class RatesConfig:
    """Configuration of a rate experiment (see the module docstring for the specs).

    Build it from flat keys with :meth:`from_dict`, :meth:`from_preset` or :meth:`from_toml`
    (or from the specs directly); change it with :meth:`replace`, which returns a new object.
    Every flat key reads as an attribute: ``config.reps``, ``config.estimator``, ...

    Parameters
    ----------
    router : tuple of str
        Routers, one curve each: ``perturbed`` (Nguyen et al. (2024), eq. 9), ``cosine``
        (vanilla, eq. 2) and ``linear`` (softmax gate); all see the same data.  Aliases
        (``perturbed-cosine``, ``vanilla``, ``softmax``) and a comma string are accepted.
    scenario : ScenarioSpec
    grid : GridSpec
    fitting : FittingSpec
    execution : ExecutionSpec
    analysis : AnalysisSpec

    Examples
    --------
    >>> cfg = RatesConfig.from_dict({"router": "perturbed-cosine,vanilla", "reps": 10})
    >>> cfg.router, cfg.reps, cfg.grid.reps
    (('perturbed', 'cosine'), 10, 10)
    """

    router: tuple[str, ...] = ("perturbed",)
    scenario: ScenarioSpec = field(default_factory=ScenarioSpec)
    grid: GridSpec = field(default_factory=GridSpec)
    fitting: FittingSpec = field(default_factory=FittingSpec)
    execution: ExecutionSpec = field(default_factory=ExecutionSpec)
    analysis: AnalysisSpec = field(default_factory=AnalysisSpec)

    def __post_init__(self) -> None:
        _set(self, "router", _routers(self.router))
        for name, cls in _GROUPS.items():
            if not isinstance(getattr(self, name), cls):
                raise TypeError(f"{name} must be a {cls.__name__}, got {type(getattr(self, name)).__name__}")
        if self.scenario.scenario_file:
            # one curve, labelled by the file: never a built-in router's name, whose predictions
            # (Nguyen et al. (2024)) would then be applied to the user's model.  A label already of
            # the path's form is a run stored before labels came from ``name`` (summary.json,
            # provenance.json): it names that folder's rows, so it is kept.
            if self.router != (legacy_file_label(self.scenario.scenario_file),):
                _set(self, "router", (file_label(self.scenario.scenario_file),))
        elif self.scenario.family == "gaussian-moe":  # one curve; the routers' predictions do not apply
            _set(self, "router", ("gaussian-moe",))

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails: the flat keys read through to their spec
        group = _GROUP_OF.get(name)
        if group is None:
            raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")
        return getattr(object.__getattribute__(self, group), name)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The flat keys (what presets, TOML files and flags may set)."""
        return FLAT_KEYS

    @classmethod
    def from_dict(cls, data: dict) -> "RatesConfig":
        """Build from flat keys (a TOML table, ``summary.json["config"]``); ``-`` or ``_`` in keys.

        Raises
        ------
        ValueError
            ``data`` is not a mapping, or holds an unknown key.
        """
        if not isinstance(data, dict):
            raise ValueError(f"config must be a table of settings, got {type(data).__name__}")
        return cls().replace(**data)

    @classmethod
    def from_preset(cls, name: str) -> "RatesConfig":
        """A named preset (see :mod:`moestat.rates.presets`)."""

        return cls.from_dict(preset_dict(name))

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> "RatesConfig":
        """Read a TOML file whose top level (or ``[rates]`` table) holds flat config keys."""

        return cls.from_dict(load_toml(path))

    def replace(self, **changes: Any) -> "RatesConfig":
        """A new configuration with ``changes`` (flat keys, or whole specs by attribute name).

        Raises
        ------
        ValueError
            An unknown key.
        """
        top: dict[str, Any] = {}
        per_group: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            k = str(key).replace("-", "_")
            if k == "router" or k in _GROUPS:
                top[k] = value
            elif k in _GROUP_OF:
                per_group.setdefault(_GROUP_OF[k], {})[k] = value
            else:
                raise ValueError(f"unknown config key {key!r}")
        for group, vals in per_group.items():
            top[group] = dataclasses.replace(top.get(group, getattr(self, group)), **vals)
        return dataclasses.replace(self, **top)

    def to_dict(self) -> dict[str, Any]:
        """The flat keys and their values (JSON-ready; ``router`` as a list)."""
        return {k: (list(self.router) if k == "router" else getattr(self, k)) for k in FLAT_KEYS}

    # ---- validation ---------------------------------------------------------------------
    def validate(self) -> "RatesConfig":
        """Check every field and return ``self`` unchanged; raise a one-line ``ValueError`` naming
        the first bad one.

        Also builds the scenario and the estimator of every router (:meth:`resolve`), so
        model-level problems (K > k, tau = 0 for the perturbed router, an estimator that needs
        another gate, ...) are found before anything is written.
        """
        self.resolve()
        return self

    def resolve(self) -> Experiment:
        """Check every field, then resolve the configuration once into its checked
        :class:`~moestat.rates.resolve.Experiment` (what :func:`~moestat.rates.experiment.run_rates`
        hands to the sweep, the store, the fits and the figures)."""
        self.check_fields()
        return Experiment.of(self).check()

    def check_fields(self) -> None:
        """The field checks of :meth:`validate`, without building a scenario."""
        if not isinstance(self.router, tuple) or not self.router:
            raise ValueError("router must be a non-empty list of router names")
        for r in self.router:
            if r not in ROUTERS and not self.scenario_file and self.family == "regression":
                raise ValueError(f"unknown router {r!r}; expected one of {', '.join(ROUTERS)}")
        if len(set(self.router)) != len(self.router):
            raise ValueError(f"router lists a router twice: {','.join(self.router)}")
        for name in _GROUPS:
            getattr(self, name).validate()
        ns = self.ns
        lo = self.window_min or ns[0]
        hi = self.window_max or ns[-1]
        if sum(lo <= n <= hi for n in ns) < 3:
            raise ValueError(f"the fitting window [{lo}, {hi}] holds fewer than 3 sample sizes of the grid {ns}")
        if self.family == "gaussian-moe":
            if self.estimator != "mle":
                raise ValueError(f"the gaussian-moe family is fitted by maximum likelihood: use --estimator mle (got {self.estimator!r})")
            if self.extra_starts or self.cell_errors or self.alt_init_scale:
                raise ValueError("--extra-starts and --cell-errors are least-squares certificates; the gaussian-moe family "
                                 "keeps the best of --starts starts by likelihood")

    # ---- derived --------------------------------------------------------------------------
    @property
    def ns(self) -> list[int]:
        """The grid of sample sizes."""
        return self.grid.ns

    def scenario_key(self, router: str) -> str:
        """JSON key from which a worker rebuilds the scenario of ``router`` (cached per process)."""
        return self.scenario.key(router)

    def result_fields(self, digest: str | None = None) -> dict[str, Any]:
        """The flat keys that determine the numbers in ``results.csv`` (guarded on resume):
        everything but the ``execution`` and ``analysis`` specs (``digest``: the scenario file's,
        when already read)."""
        skip = {f.name for g in ("execution", "analysis") for f in dataclasses.fields(_GROUPS[g])}
        # keys added after results existed count only when set, so earlier folders stay resumable
        optional = {"extra_starts": 0, "cell_errors": False, "alt_init_scale": 0.0, "max_reps": 0, "scenario_file": "", "family": "regression",
                    "starts": 1, "grow_n": 0, "grown": 0, "answer": True, "sgd_lr": SGD_DEFAULTS["lr"],
                    "sgd_batch": SGD_DEFAULTS["batch_size"], "sgd_epochs": SGD_DEFAULTS["epochs"],
                    "sgd_schedule": SGD_DEFAULTS["lr_schedule"]}
        if self.max_reps:  # an adaptive sweep grows reps: the starting count does not name its results
            skip = skip | {"reps"}
        skip = skip | {"grown"}  # nor does the number of sizes a growing sweep has added so far
        out = {k: v for k, v in self.to_dict().items() if k not in skip and not (k in optional and v == optional[k])}
        if self.scenario_file:  # an edited scenario file is another sweep: resume must refuse it
            out["scenario_digest"] = scenario_digest(self.scenario_file) if digest is None else digest
        return out

"""Where a rate experiment is resolved: scenarios, estimators, and the :class:`Experiment`.

A rates configuration (:class:`moestat.rates.config.RatesConfig`) names its scenario by a JSON
key (:meth:`RatesConfig.scenario_key`) and its estimator by a registry name.  This module turns
them into objects, once: :meth:`Experiment.of` resolves a configuration into one frozen
:class:`Experiment` -- the scenario of every router (the scenario file parsed and hashed once),
the estimator factory, the effective setting, the predictions and the loss columns -- which the
sweep, the store, the rate fits and the figures receive.  The JSON key remains only what a work
unit carries to a worker process, which rebuilds the scenario from it once
(:func:`build_scenario`, cached per process).

It imports nothing of :mod:`moestat.rates` but the modules below the configuration (labels,
extras, spec checks, gmoe_blocks), so ``config`` (validation), ``store`` (the resume audit) and ``sweep``
(the work) all read downwards into it instead of into each other.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping

from moestat.data.gaussian_scenarios import model1_scenario
from moestat.data.scenario_files import load_scenario, scenario_digest
from moestat.data.synthetic import make_scenario
from moestat.estimators import ESTIMATORS, estimator_for
from moestat.estimators.memory import entries_per_chunk
from moestat.rates.extras import ALT_PREFIX, CERTIFICATE_COLUMNS, KEY, extra_columns
from moestat.rates.gmoe_blocks import block_columns, block_predicted
from moestat.rates.labels import LOSS_NAMES
from moestat.rates.spec_checks import check_enough_samples, check_scenario_memory

__all__ = ["Experiment", "NOT_JUDGED", "fields_hash", "build_scenario", "estimator_registry", "build_estimator", "declared_losses"]


#: The theorems of a scenario file whose caller handed in none (:meth:`Experiment.with_theorems`): no
#: theorem's prediction, and ``summary.json`` and the printed table say why.  The engine never judges a
#: truth itself (the theorem registry imports the engine, not the other way round); the doors do.
NOT_JUDGED: Mapping[str, Any] = {
    "predicted": {}, "details": {},
    "report": {"not_checked": "not judged in this call: no theorems were handed in (moestat rates judges a file's "
                              "truth: run_rates(..., theorems=moestat.theorems.file_theorems.scenario_theorems))"},
}


@lru_cache(maxsize=16)
def build_scenario(key: str):
    """Rebuild a scenario from :meth:`RatesConfig.scenario_key`: once by :meth:`Experiment.of`, and
    once per worker process from the key a :class:`~moestat.rates.sweep.WorkUnit` carries."""
    p = json.loads(key)
    if p.get("scenario_file"):  # a user scenario: TOML or file.py:function
        sc = load_scenario(p["scenario_file"])
        return dataclasses.replace(sc, n_starts=int(p["starts"])) if p.get("starts", 1) != 1 else sc
    if p.get("family") == "gaussian-moe":  # model 1 of Nguyen, Nguyen & Ho (2023)
        return model1_scenario(p["setting"], p["k_fit"], p["input_law"], p["starts"])
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
    return dict(ESTIMATORS)


def build_estimator(name: str, scenario, max_iter: int, random_state: int, device: str):
    """The estimator ``name`` for ``scenario``; a one-line ``ValueError`` when they do not go together
    (:func:`moestat.estimators.choice.estimator_for`: the scenario declares its model, the registry's
    rule picks the class)."""
    return estimator_for(scenario, name, max_iter=max_iter, random_state=random_state, device=device)


def declared_losses(scenario) -> tuple:
    """The loss specifications a user scenario declares (empty for the built-in scenarios).

    They are written to ``extras.csv`` (one column each, by name) and fitted like every loss,
    with the scenario's own predicted exponents.
    """
    return tuple(scenario.loss_specs)


@dataclass(frozen=True, eq=False)
class Experiment:
    """A rates configuration resolved once: what the sweep, the store, the fits and the figures read.

    Built by :meth:`of` (without model checks: a configuration read back from ``summary.json``
    resolves too) and checked by :meth:`check` (what :meth:`RatesConfig.validate` adds to the
    field checks).  :meth:`replace` changes the grid of an adaptive sweep without resolving the
    scenarios again: reps and sizes are not part of a scenario.

    Attributes
    ----------
    config : RatesConfig
        The flat settings (``config.reps``, ``config.ns``, ...; its ``to_dict`` is what is recorded).
    keys : mapping of str to str
        Router -> the JSON key a work unit carries to a worker (:meth:`RatesConfig.scenario_key`).
    scenarios : mapping of str to scenario
        Router -> its scenario, built once from its key.
    digest : str or None
        SHA-256 of the scenario file (``None``: built-in scenario): read once, here.
    setting : {"exact", "over"}
        The setting of the fits: a scenario file (or the Gaussian-MoE family) decides it by its own
        atom counts, and ``--setting`` is ignored for it.
    predicted : dict or None
        A scenario file's (or the Gaussian-MoE family's) predicted exponents, loss name ->
        exponent or None; ``None`` for the built-in routers (Nguyen et al. (2024)'s table applies).
        A property: for a scenario file, the exponents of the theorems its truth meets
        (:attr:`theorems`, handed in by the door) under the file's own.
    own_predicted : dict or None
        The exponents the scenario states itself (a file's ``[[losses]]``, the Gaussian-MoE family's
        table), over the pipeline's defaults; ``None`` for the built-in routers.
    prediction_sources : dict
        Loss name -> the theorem of a default prediction the file did not state (a property).
    theorem_key : str or None
        A scenario file's key, by which its truth is judged (once per process,
        :func:`moestat.theorems.file_theorems.scenario_theorems`).
    theorems : mapping or None
        A scenario file's theorems as the door judged them and handed in (:meth:`with_theorems`).
    declared : tuple of str
        Names of the losses a scenario file declares (one ``extras.csv`` column each).
    extra_columns : tuple of str
        Columns of ``extras.csv`` (empty: no file; :func:`moestat.rates.extras.extra_columns`).
    losses : tuple of str
        The loss columns whose rates are fitted: :data:`~moestat.rates.labels.LOSS_NAMES`, then the
        declared losses and the certificate's ``best_<loss>`` and cell columns of ``extras.csv``.
    headline : tuple of str
        The losses of ``convergence.png``: the declared ones (a file's own mass term), else ``voronoi``.
    result_fields : dict
        The fields that determine the numbers of ``results.csv`` (:meth:`RatesConfig.result_fields`,
        with the digest read once); ``hash`` is their :func:`fields_hash`, guarded on resume.
    hash : str
    expected : mapping of str to (str, str)
        Router -> ``(scenario name, setting)`` that its rows of ``results.csv`` carry.
    """

    config: Any
    keys: Mapping[str, str]
    scenarios: Mapping[str, Any]
    digest: str | None
    setting: str
    own_predicted: dict | None
    declared: tuple[str, ...]
    extra_columns: tuple[str, ...]
    losses: tuple[str, ...]
    headline: tuple[str, ...]
    result_fields: dict
    hash: str
    expected: Mapping[str, tuple[str, str]]
    theorem_key: str | None = None
    #: A scenario file's theorems as the door judged them
    #: (:func:`moestat.theorems.file_theorems.scenario_theorems`: ``predicted``, ``details``, ``report``),
    #: handed in by :meth:`with_theorems`; ``None`` without a file or before the door judged it.  The
    #: engine never judges a truth: the theorems import the engine, not the other way round.
    theorems: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, config: Any) -> "Experiment":
        """Resolve ``config`` (a :class:`~moestat.rates.config.RatesConfig`; an :class:`Experiment`
        is returned as it is)."""
        if isinstance(config, Experiment):
            return config
        spec = config.scenario
        digest = None
        if spec.scenario_file:  # the file is read and hashed here, once
            digest = scenario_digest(spec.scenario_file)
        keys = {r: spec.key(r, digest) for r in config.router}
        scenarios = {r: build_scenario(k) for r, k in keys.items()}
        first = scenarios[config.router[0]]
        builtin = not spec.scenario_file and spec.family == "regression"
        declared = tuple(s.name for s in declared_losses(first)) if spec.scenario_file else ()
        ex_cols = extra_columns(config.extra_starts, config.cell_errors, declared, config.alt_init_scale > 0,
                                block_columns(first))
        losses = (*LOSS_NAMES, *(c for c in ex_cols if c not in KEY and c not in CERTIFICATE_COLUMNS
                                 and not c.startswith(ALT_PREFIX)))
        own = {} if builtin else dict(first.predicted)
        if spec.scenario_file:  # a file's default prediction comes from the theorems its truth meets (handed in)
            own = {k: v for k, v in own.items() if k not in (first.prediction_sources or {})}
        predicted = None if builtin else {**own, **block_predicted(first)}
        fields = config.result_fields(digest)
        return cls(config=config, keys=keys, scenarios=scenarios, digest=digest,
                   setting=spec.setting if builtin else first.setting, own_predicted=predicted,
                   declared=declared, extra_columns=tuple(ex_cols), losses=losses,
                   headline=declared or ("voronoi",), result_fields=fields, hash=fields_hash(fields),
                   expected={r: (str(sc.name), str(sc.setting)) for r, sc in scenarios.items()},
                   theorem_key=keys[config.router[0]] if spec.scenario_file else None)

    @property
    def predicted(self) -> dict | None:
        """Loss name -> predicted exponent (see the class docstring); ``None`` for the built-in routers.

        What a file does not state and no theorem its truth meets gives has no prediction: the
        built-in table is Nguyen et al. (2024)'s for their routers, not the user's model -- except
        the regression error's parametric -1/2."""
        if self.own_predicted is None:
            return None
        th = self.theorems
        return {**{k: None for k in LOSS_NAMES}, "regression_l2": -0.5, **(th["predicted"] if th else {}),
                **self.own_predicted}

    @property
    def prediction_sources(self) -> dict[str, str]:
        """Loss name -> the theorem (its source text) of a prediction the file did not state."""
        th = self.theorems
        return {k: d["source"] for k, d in th["details"].items()} if th else {}

    @property
    def voronoi_holds(self) -> str | None:
        """The loss the ``voronoi`` column holds when it is not the setting's D3/D2 (or D1/D2): a
        mixture-noise scenario file's first declared or default loss
        (:func:`moestat.data.likelihood_losses.likelihood_loss_columns`), whose mass term is the
        gate's own; ``None`` otherwise."""
        first = self.scenarios[self.config.router[0]]
        if self.config.scenario_file and getattr(first, "likelihood", False) and self.declared:
            return self.declared[0]
        return None

    def with_theorems(self, theorems: "Mapping[str, Any] | Callable[[Experiment], Mapping[str, Any] | None] | None"
                      ) -> "Experiment":
        """The same experiment with a scenario file's theorems handed in.

        ``theorems`` is :func:`moestat.theorems.file_theorems.scenario_theorems` (called here on this
        experiment) or what it returned; ``None``, or an experiment without a scenario file: unchanged.
        A mapping without ``predicted``, ``details`` and ``report`` is refused (``TypeError``)."""
        if theorems is None or self.theorem_key is None:
            return self
        if callable(theorems):
            theorems = theorems(self)
            if theorems is None:
                return self
        if not {"predicted", "details", "report"} <= set(theorems):
            raise TypeError("theorems must be moestat.theorems.file_theorems.scenario_theorems or what it returns "
                            "(predicted, details, report)")
        return dataclasses.replace(self, theorems=theorems)

    def check(self) -> "Experiment":
        """The model-level checks of :meth:`RatesConfig.validate`: the estimator of every router is
        built (an estimator/model mismatch, e.g. EM needs a dense linear gate, is found before
        anything is written), the grid holds enough samples, the units fit in memory."""
        c = self.config
        builtin = not c.scenario_file and c.family == "regression"
        for sc in self.scenarios.values():
            self.estimator(sc, 0)
            if builtin and c.estimator != "null":
                check_enough_samples(min(c.ns), sc.k_fit, sc.d)
            reps = min(c.reps, c.chunk or c.reps)
            if c.estimator == "mle":  # a likelihood fit holds one chunk of its replicates at a time
                reps = min(reps, entries_per_chunk(max(c.ns), sc.k_fit, sc.d, c.max_memory))
            check_scenario_memory(sc, max(c.ns), reps)
        return self

    def estimator(self, scenario, random_state: int):
        """The configured estimator for ``scenario`` (see :func:`build_estimator`)."""
        c = self.config
        return build_estimator(c.estimator, scenario, c.max_iter, random_state, c.device)

    def replace(self, **changes: Any) -> "Experiment":
        """The same experiment with grid changes (``reps``, ``grown``): the scenarios stay resolved."""
        config = self.config.replace(**changes)
        fields = config.result_fields(self.digest)
        return dataclasses.replace(self, config=config, result_fields=fields, hash=fields_hash(fields))


def fields_hash(fields: Mapping[str, Any]) -> str:
    """SHA-256 (16 hex digits) of result-determining fields: what ``provenance.json`` records and
    ``--resume`` compares (:func:`moestat.rates.store.config_hash`)."""
    blob = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]

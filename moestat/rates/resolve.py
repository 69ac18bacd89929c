"""Where scenarios and estimators are resolved: one module below config, store and sweep.

A rates configuration names its scenario by a JSON key (:meth:`RatesConfig.scenario_key`) and its
estimator by a registry name; this module turns those names into objects.  It imports nothing of
:mod:`moestat.rates` above it, so ``config`` (validation), ``store`` (the resume audit) and
``sweep`` (the work) all read downwards into it instead of into each other.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - a type only
    from moestat.rates.config import RatesConfig

__all__ = ["build_scenario", "estimator_registry", "build_estimator", "declared_losses", "config_declared_losses"]


@lru_cache(maxsize=16)
def build_scenario(key: str):
    """Rebuild a :class:`~moestat.data.synthetic.Scenario` from :meth:`RatesConfig.scenario_key`."""
    from moestat.data.synthetic import make_scenario

    p = json.loads(key)
    if p.get("scenario_file"):  # a user scenario (issue 14): TOML or file.py:function
        from dataclasses import replace

        from moestat.data.scenario_files import load_scenario

        sc = load_scenario(p["scenario_file"])
        return replace(sc, n_starts=int(p["starts"])) if p.get("starts", 1) != 1 else sc
    if p.get("family") == "gaussian-moe":  # model 1 of Nguyen, Nguyen & Ho (2023)
        from moestat.data.gaussian_scenarios import model1_scenario

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
    from moestat.estimators import ESTIMATORS

    return dict(ESTIMATORS)


#: estimators of the likelihood (y drawn from the mixture); ``null`` returns its start, whatever the noise
LIKELIHOOD_ESTIMATORS = ("mle", "em")


def build_estimator(name: str, scenario, max_iter: int, random_state: int, device: str):
    """The estimator ``name`` for ``scenario``; a one-line ``ValueError`` when they do not go together."""
    if getattr(scenario, "likelihood", None) is False and name in LIKELIHOOD_ESTIMATORS:
        raise ValueError(f"--estimator {name} is maximum likelihood, but this scenario file draws y = g(x) + noise "
                         "(noise.model = \"additive\"); use --estimator lse, or declare [noise] model = \"mixture\" "
                         "with a variance in every [[atoms]] table")
    if getattr(scenario, "likelihood", False) and name not in LIKELIHOOD_ESTIMATORS + ("null",):
        raise ValueError(f"this scenario file draws y from the mixture (noise.model = \"mixture\"): fit it by maximum "
                         f"likelihood with --estimator mle, not {name!r}")
    if getattr(scenario, "likelihood", None) is not None and getattr(scenario, "n_starts", 1) > 1 and name != "mle":
        raise ValueError(f"--starts > 1 is for --estimator mle (the least-squares sweeps have --extra-starts), not {name!r}")
    if getattr(scenario, "gllim", False):  # the joint GLLiM: its own closed-form EM (moestat.estimators.gllim)
        if name != "mle":
            raise ValueError(f"a joint GLLiM scenario ([input] law = \"gate\") is fitted by its joint maximum likelihood: "
                             f"use --estimator mle, not {name!r}")
        from moestat.estimators.gllim import GLLiMEM

        return GLLiMEM.for_scenario(scenario, max_iter=max_iter, random_state=random_state, device=device)
    # every estimator takes what it needs from the same keywords (the estimator contract)
    cls = estimator_registry()[name]
    return cls.for_scenario(scenario, max_iter=max_iter, random_state=random_state, device=device)



def declared_losses(scenario) -> tuple:
    """The loss specifications a user scenario declares (empty for the built-in scenarios).

    They are written to ``extras.csv`` (one column each, by name) and fitted like every loss,
    with the scenario's own predicted exponents.
    """
    losses = getattr(scenario, "losses", ())
    return () if callable(losses) else tuple(losses or ())  # a Gaussian-MoE scenario's losses() is a method


def config_declared_losses(config: "RatesConfig") -> tuple[str, ...]:
    """Names of the losses declared by the configuration's scenario (empty: built-in scenario)."""
    if not config.scenario_file:
        return ()
    return tuple(spec.name for spec in declared_losses(build_scenario(config.scenario_key(config.router[0]))))

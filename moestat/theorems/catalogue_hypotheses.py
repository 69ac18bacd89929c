"""Every catalogue run's truth against the hypotheses of its own theorem.

:data:`~moestat.theorems.registry.CATALOGUE_THEOREMS` names, for each run of the catalogue, the theorem
whose hypotheses its truth must meet (the run's ``theorem`` in its entry's data file); :func:`catalogue_hypotheses`
checks them, so that a run is never judged against a theorem whose hypotheses its truth breaks;
:func:`run_hypotheses` does it for one run as :func:`moestat.rates.catalogue.reproduce` runs it, and the
catalogue's report carries the result per run (a run whose truth fails is not judged).
"""

from __future__ import annotations

from typing import Any

from moestat.rates.catalogue_config import run_config
from moestat.theorems.hypotheses import N_X, check_hypotheses
from moestat.theorems.registry import CATALOGUE_THEOREMS, ENTRIES
from moestat.theorems.registry import theorem as registry_theorem
from moestat.rates.resolve import Experiment

__all__ = ["CATALOGUE_THEOREMS", "catalogue_hypotheses", "run_hypotheses"]

def run_hypotheses(key: str, label: str, experiment: Experiment, *, n: int = N_X, seed: int = 0) -> list[dict[str, Any]]:
    """The computed hypotheses of one catalogue run's truth, one row per router of ``experiment``.

    Parameters
    ----------
    key, label : str
        The catalogue entry and the run's label (:data:`CATALOGUE_THEOREMS` names its theorem).
    experiment : Experiment
        The run's resolved configuration (its scenarios are the truths checked).
    n, seed : int
        Inputs drawn from the scenario's law (:func:`moestat.theorems.hypotheses.check_hypotheses`).

    Returns
    -------
    list of dict
        ``router``, ``theorem`` (``None`` where no theorem is named for the run), ``cite``, ``met``
        (``None``: not checked) and ``failing`` (the failing conditions, each with its evidence's
        reading), and ``report`` (the full :func:`check_hypotheses` output; ``{"conditions": {}}``
        where nothing was checked).
    """
    rows = []
    for router in experiment.config.router:
        th = CATALOGUE_THEOREMS.get((key, label, router), CATALOGUE_THEOREMS.get((key, label, None)))
        sc = experiment.scenarios[router]
        if th is None:
            rows.append({"router": router, "theorem": None, "cite": None, "met": None,
                         "failing": ["not checked: no theorem is named for this run"], "report": {"conditions": {}}})
        elif getattr(sc, "model", True) is None:  # the joint GLLiM: x modelled by the gate's mixture, no conditional model
            rows.append({"router": router, "theorem": th, "cite": registry_theorem(th).cite, "met": None,
                         "failing": ["not checked: the joint GLLiM has no conditional gate-expert model for these conditions"],
                         "report": {"conditions": {}}})
        else:
            rep = check_hypotheses(sc, n=n, seed=seed, theorem=th)
            t = rep["theorems"][0]
            rows.append({"router": router, "theorem": th, "cite": t["cite"], "met": t["met"], "failing": t["failing"],
                         "report": rep})
    return rows


def catalogue_hypotheses(keys: list[str] | None = None, *, n: int = N_X, seed: int = 0) -> list[dict[str, Any]]:
    """Check every catalogue run's truth against its own theorem (:data:`CATALOGUE_THEOREMS`).

    Returns
    -------
    list of dict
        ``entry``, ``run``, ``router``, ``theorem``, ``met``, ``failing`` and the full report
        ``report`` of :func:`check_hypotheses`.  A run whose scenario has no conditional model (the
        joint GLLiM of ``gaussian-gated-moe``) has ``met = None`` and says it was not checked.
    """

    rows = []
    for (key, label, router), th in CATALOGUE_THEOREMS.items():
        if keys is not None and key not in keys:
            continue
        run = next(r for r in ENTRIES[key].runs if r.label == label)
        ex = Experiment.of(run_config(run, quick=True))
        r = next(h for h in run_hypotheses(key, label, ex, n=n, seed=seed)
                 if router is None or h["router"] == router)
        rows.append({"entry": key, "run": label, "router": router, **{k: r[k] for k in ("theorem", "cite", "met",
                                                                                       "failing", "report")}})
    return rows

"""Views of the catalogue computed from what runs and what was recorded, so that no text goes stale.

:func:`run_models` describes each run's model from the scenario the run builds (``moestat
reproduce --list``); :func:`rejudge_recorded` judges a recorded full run's rows again under the
current rules (what docs/guide/catalogue.rst may say of it).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from moestat.rates.catalogue import (ENTRIES, STANDINGS, STATISTIC, THEOREM_STANDING, UNREAD_STANDING, Entry,
                                    _report, entry, entry_status, run_config, run_hypotheses_of, with_preflight_window)
from moestat.rates.config import RatesConfig
from moestat.rates.extras import merge_extras
from moestat.rates.fit import fit_experiment
from moestat.rates.labels import REDEFINED, former_definition, withhold_former_definitions
from moestat.rates.resolve import Experiment
from moestat.rates.store import read_results
from moestat.theorems.file_theorems import scenario_theorems

__all__ = ["describe_scenario", "run_models", "format_list", "rejudge_recorded", "REDEFINED", "former_definition"]

def describe_scenario(sc) -> str:
    """One line of a built scenario's model: gate (Top-K of k*), experts, noise, d, k*, fitted k."""
    K = None
    if sc.gaussian_moe:  # model 1 of Nguyen, Nguyen & Ho (2023)
        what = "softmax gate / linear Gaussian experts, y drawn from the mixture"
    elif sc.gllim:  # the joint GLLiM of the Gaussian-gated entry: no regression model
        what = "joint GLLiM: x ~ sum pi N(c, Gamma), linear Gaussian experts, (x, y) drawn from the mixture"
    else:
        m = sc.model
        K = getattr(m.gate, "k_active", None)
        noise = "y drawn from the mixture" if sc.mixture_data else "y = g(x) + Gaussian noise"
        what = f"{m.describe()}, {noise}"
    k_star, k = int(sc.k_true), int(sc.k_fit)
    sparse = f"Top-{K} of k* = {k_star}" if K is not None and K < k_star else "dense gate"
    fit = "exact fit" if k == k_star else "over-specified fit"
    return f"{what}; {sparse}; d = {sc.d}, k* = {k_star}, fitted k = {k} ({fit})"


def run_models(e: Entry) -> list[str]:
    """``"<run> [router]: <model>"`` for every run (and router) of ``e``, read from the scenario each
    run builds (its shipped file or preset), so that ``--list`` cannot disagree with what runs; an
    entry that cannot build its runs falls back to its :attr:`Entry.model` text."""
    out = []
    for run in e.runs:
        try:
            cfg = run_config(run, quick=True)
            for router, sc in Experiment.of(cfg).scenarios.items():
                label = run.label if len(cfg.router) == 1 else f"{run.label} {router}"
                out.append(f"{label}: {describe_scenario(sc)}")
        except (ValueError, FileNotFoundError, TypeError, KeyError):
            return [e.model]
    return out or [e.model]


def format_list() -> str:
    """The ``moestat reproduce --list`` table: key, paper, theorem/figure, the model of every run
    (generated from the scenario it builds: :func:`run_models`), the estimator, one line per
    prediction (run/loss, prediction, ``source``: its standing, :data:`moestat.rates.catalogue.STANDINGS`;
    the columns as wide as their content over the whole list), where the paper was read
    (``Paper.read_at``), status; then the predictions counted by standing."""
    lines = []
    preds = [(f"{p.run}/{p.loss}", p.text, p.standing) for e in ENTRIES.values() for p in e.predictions]
    w0, w1 = (max(len(c[i]) for c in preds) for i in (0, 1))
    for e in ENTRIES.values():
        lines.append(f"{e.key:<20} {e.paper.cite}, {e.figure} -- {e.theorem}")
        for i, m in enumerate(run_models(e)):  # from the scenario each run builds: never stale
            lines.append(f"{'':<20} {'model: ' if i == 0 else '       '}{m}")
        lines.append(f"{'':<20} estimator: {e.estimator}")
        for i, p in enumerate(e.predictions):
            lines.append(f"{'':<20} {'predicted: ' if i == 0 else '           '}{p.run + '/' + p.loss:<{w0}}  {p.text:<{w1}}  "
                         f"source: {p.standing}")
        lines.append(f"{'':<20} read at: {e.paper.read_at}")  # the copy of the paper the entry was written from
        lines.append(f"{'':<20} status: {entry_status(e)}")
        for label, why in e.untested.items():  # not fitted by reproduce, never judged (Entry.untested)
            lines.append(f"{'':<20} untested: {label} -- {why}")
    by = {s: sum(p.standing == s for e in ENTRIES.values() for p in e.predictions) for s in STANDINGS}
    full = [e.key for e in ENTRIES.values() if any(p.standing == THEOREM_STANDING for p in e.predictions)]
    unread = [e.key for e in ENTRIES.values() if any(p.standing == UNREAD_STANDING for p in e.predictions)]
    lower = ", ".join(f"{s} {by[s]}" for s in STANDINGS if s not in (THEOREM_STANDING, UNREAD_STANDING) and by[s])
    return ("\n".join(lines) + f"\n{len(ENTRIES)} entries; run one with: moestat reproduce KEY [--quick] --out DIR"
            f"\npredictions by source: {THEOREM_STANDING} {by[THEOREM_STANDING]} (the only rows whose consistent verdict "
            f"reproduces a theorem{': ' + ', '.join(full) if full else ''}); qualitative claims / lower standing "
            f"{sum(by[s] for s in STANDINGS if s not in (THEOREM_STANDING, UNREAD_STANDING))} ({lower}); "
            f"exponent not read {by[UNREAD_STANDING]}" + (f" (entries: {', '.join(unread)})" if unread else ""))


def recorded_fits(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rate fits of one recorded run folder under the *current* rules, without refitting a model.

    What :func:`rejudge_recorded` judges each run of an entry by: the run's ``results.csv`` (and
    ``extras.csv``) and ``provenance.json``, fitted with the catalogue's statistic
    (:data:`moestat.rates.catalogue.STATISTIC`) over the window above the truth's pre-flight ``n_ok``.

    Parameters
    ----------
    run_dir : path-like
        A recorded run folder (one run of a catalogue entry, e.g. ``gmoe-over4/gaussian-moe`` in the
        folder of the catalogue's records).

    Returns
    -------
    list of dict
        One fit per loss, as :func:`moestat.rates.fit.fit_experiment` returns it (slope, interval,
        category, reason, ``plan``); a loss recorded under a former definition keeps its slope and has
        no category.
    """
    d = Path(run_dir)
    prov = json.loads((d / "provenance.json").read_text(encoding="utf-8"))
    cfg = RatesConfig.from_dict(prov["config"])
    # the catalogue's rules of today, whatever the run was fitted with: the statistic and the window
    # above the pre-flight's n_ok (the configuration resolved once, for both)
    experiment = with_preflight_window(Experiment.of(cfg.replace(statistic=STATISTIC))).with_theorems(scenario_theorems)
    df = read_results(d / "results.csv", experiment)
    df = merge_extras(df, d / "extras.csv") if experiment.extra_columns else df
    # a loss column added since the run (e.g. the Gaussian MoE's per-block errors) is not in its rows:
    # its prediction reads "loss not in the run's fits"
    experiment = dataclasses.replace(experiment, losses=tuple(c for c in experiment.losses if c in df))
    return withhold_former_definitions(fit_experiment(df, experiment), prov)


def _recorded_hypotheses(key: str, label: str, run_dir: Path) -> list[dict[str, Any]]:
    """The computed hypotheses of the truth a recorded run was fitted to (its ``provenance.json``)."""
    prov = json.loads((run_dir / "provenance.json").read_text(encoding="utf-8"))
    return run_hypotheses_of(key, label, RatesConfig.from_dict(prov["config"]))


def rejudge_recorded(key: str, folder: str | Path) -> dict[str, Any]:
    """The report of an entry's recorded full run, judged again under the *current* rules.

    Reads each run's ``results.csv`` (and ``extras.csv``) and ``provenance.json`` under
    ``folder/<run label>/`` and fits the rates as :func:`moestat.rates.run_rates` does, without
    refitting a single model: what the docs may say of a recorded run is what the rules of today
    say of its rows, not what was printed when it ran -- among them the catalogue's statistic
    (:data:`moestat.rates.catalogue.STATISTIC`, the per-``n`` median, the mean reported beside).

    Parameters
    ----------
    key : str
        Entry key.
    folder : path-like
        The entry's recorded folder (e.g. ``cosine-exact`` in the folder of the catalogue's records).

    Returns
    -------
    dict
        The report of :func:`reproduce` (``predictions`` with ``category`` and ``reason``,
        ``contrast``), with ``wall_s`` 0.
    """
    e = entry(key)
    # an untested run (Entry.untested) is not judged, recorded or not; each recorded run carries the computed
    # hypotheses of the truth it was fitted to (its provenance's configuration), so a run whose truth fails
    # them is not judged either
    runs = [{"label": run.label, "wall_s": 0.0, "summary": {"fits": recorded_fits(Path(folder) / run.label)},
             "hypotheses": _recorded_hypotheses(key, run.label, Path(folder) / run.label)}
            for run in e.runs if run.label not in e.untested]
    return _report(e, False, runs, Path(folder))  # the folder: a contrast's paired interval reads its rows

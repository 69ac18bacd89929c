"""``summary.json``: what a rates run's analysis writes, and the rules its fits were judged by.

:func:`write_summary` is the last file :func:`moestat.rates.experiment.run_rates` writes before its
figures: the configuration and its hash, the row counts and the SHA-256 of the rows summarised
(:class:`~moestat.rates.store.RunRows`), the fits of :func:`moestat.rates.fit.fit_experiment` and the
rule fields of today (:func:`rule_fields`, also written by
:func:`moestat.rates.experiment.rejudge_run` when a recorded run is judged again).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moestat.io import atomic_write_json
from moestat.rates.fit import DEFAULT_TOLERANCE
from moestat.rates.verdicts import MAX_CI_WIDTH

if TYPE_CHECKING:  # names of the annotations only: the analysis reads what the engine hands it
    from moestat.rates.config import RatesConfig
    from moestat.rates.resolve import Experiment
    from moestat.rates.store import RunRows

__all__ = ["SUMMARY_SCHEMA", "rule_fields", "write_summary", "format_theorem_report"]

#: The ``schema`` field of ``summary.json``.
SUMMARY_SCHEMA = "moestat.rates.run_summary/1"


def rule_fields(config: RatesConfig) -> dict[str, Any]:
    """The fields of ``summary.json`` that say by which rules its fits were judged (``verdict_rule``,
    ``category_rule``, ``default_tolerance``, ``max_ci_width``): those of today, for ``config``'s statistic."""
    return {
        "verdict_rule": (
            "moestat.rates.verdicts.judge_interval: consistent = the CI covers the prediction (sided 'upper', a worst-case "
            "upper bound: the CI reaches it or its steep side); near = the CI excludes it by at most the tolerance (never "
            "counted as consistent); inconsistent = beyond; inconclusive = CI wider than max_ci_width; "
            "within_band = [ci_low, ci_high] inside [predicted - tolerance, predicted + tolerance]; "
            "CI = envelope of the replicate bootstrap and the OLS t-interval of the log-of-mean fit"
            if config.statistic == "mean" else
            "CI = envelope of the replicate bootstrap and the OLS t-interval of the log-of-median fit (the slope is that "
            "of the per-n median: the theorems' O_P bounds are statements about quantiles); the log-of-mean slope and "
            "its category are reported beside each fit (mean_statistic)"
        ),
        "category_rule": (
            "a loss whose theorem states no rate gets no category (reason: no rate stated by the theorem); otherwise the "
            "first that applies: inconclusive (< 3 sizes, < 90% of fits converged, CI wider than 1); floor (Theil-Sen slope over the upper half of the window "
            "contains 0 and excludes the prediction - tolerance); pre-asymptotic (significant quadratic curvature in "
            "log-log with a local-slope change > tolerance); inconclusive (CI wider than max_ci_width, CI contains the prediction "
            "and 0, or OLS and Theil-Sen disagree on covering it); consistent / near / inconsistent (the interval rule, "
            "Theil-Sen agreeing); "
            "no polynomial rate (Thms 2/3): the slow-rate rule of moestat.rates.stability (floor, or local slopes flattening "
            "with the fast router's tail steeper); every category only when two independent halves of the replicates "
            "(even / odd replicate) reach the same one, else inconclusive"
        ),
        "default_tolerance": DEFAULT_TOLERANCE,
        "max_ci_width": MAX_CI_WIDTH,
    }


def write_summary(experiment: Experiment, rows: RunRows, fits: list, adaptive: dict | None, growth: dict | None,
                  pre: dict | None, t0: float, out: Path, suffix: str = "") -> dict[str, Any]:
    """Write ``summary<suffix>.json`` of a finished sweep and return its content (as read back).

    Parameters
    ----------
    experiment : Experiment
        The experiment of the last round.
    rows : RunRows
        Its rows, audit and tallies (:func:`moestat.rates.store.read_run`).
    fits : list of dict
        :func:`moestat.rates.fit.fit_experiment` of the rows.
    adaptive, growth : dict or None
        The record of each adaptive loop (``None`` when off).
    pre : dict or None
        The pre-flight's fields of a scenario file (:func:`moestat.rates.preflight.preflight`).
    t0 : float
        :func:`time.perf_counter` at the start of the run (``elapsed_s``).
    out : Path
        The run's folder.
    suffix : str
        :func:`moestat.rates.store.analysis_suffix`.
    """
    config = experiment.config
    setting = experiment.setting
    summary = {
        "schema": SUMMARY_SCHEMA,
        "config": config.to_dict(),
        # the setting of the fits: a scenario file decides it itself (config.setting, the --setting
        # flag, is ignored for it and kept as given so that the configuration round-trips)
        "setting": setting,
        "config_hash": experiment.hash,
        "sample_sizes": config.ns,
        "tolerance": config.tolerance,
        **rule_fields(config),
        "window": {"n_min": config.window_min or config.ns[0], "n_max": config.window_max or config.ns[-1]},
        "counts": rows.counts,
        # what the fits were computed from: ``moestat plot`` refuses a summary whose rows changed
        "rows": {"file": "results.csv", "count": rows.audit.rows, "sha256": rows.audit.digest},
        "certificate": rows.certificate,
        "truth_check": rows.truth_check,
        "adaptive": adaptive,
        "growth": growth,
        "preflight": pre,
        "fits": fits,
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }
    if experiment.theorems is not None:  # a scenario file: the theorems its truth meets, and those it fails
        summary["theorems"] = experiment.theorems["report"]
    path = atomic_write_json(out / f"summary{suffix}.json", summary)
    return json.loads(path.read_text(encoding="utf-8"))


def format_theorem_report(report: Mapping[str, Any]) -> list[str]:
    """The lines ``moestat rates`` prints under its table: each theorem met and the losses it
    predicts, then each theorem of the model's class whose hypotheses fail, with the condition."""
    if report.get("not_checked"):
        return [f"theorems: not checked: {report['not_checked']}"]
    lines = []
    for t in report["met"]:
        if t["attached"]:
            lines.append(f"theorem met: {t['name']} ({t['standing']}): predicts {', '.join(t['attached'])}")
        elif t["losses"]:
            lines.append(f"theorem met: {t['name']}: every loss it speaks of is predicted by the file or a theorem above")
        else:
            lines.append(f"theorem met: {t['cite']}: no exponent tabulated for a file's losses (see the catalogue)")
    for t in report["failed"]:
        lines.append(f"theorem not applied (hypotheses fail): {t['cite']} ({t['claim']}): {'; '.join(t['failing'])}")
    if not report["met"] and not report["failed"]:
        lines.append(f"theorems: none of the catalogue speaks of this model class in the {report['setting']} setting")
    return lines

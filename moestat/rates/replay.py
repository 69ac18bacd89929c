"""Replay one recorded work unit: refit it exactly as the sweep fitted it and check the recorded row.

A sweep's unit is fitted from streams keyed by ``(seed, n, replicate)``
(:func:`moestat.rates.sweep.replicate_streams`) on one torch and one BLAS thread
(:func:`moestat.rates.sweep.run_unit`), so the same code refits it to the same bits.  Replaying a
recorded fit answers two questions about one row of a record: *does this checkout still compute
it* (the row is reproduced), and *what did its starts do* (every start's result, kept by the
estimator's ``keep_starts`` option, :class:`moestat.estimators.mle.StartResults`; the fit itself is
unchanged by keeping them).

* :func:`refit_unit`: a :class:`~moestat.rates.sweep.WorkUnit` refitted as the sweep's reported
  fit, every start kept (the study scripts' refits, ``studies/tools/recorded_refit.py``, start here).
* :func:`replay_unit`: a recorded run folder's ``(n, replicate)`` replayed and compared with its
  ``results.csv`` row (:func:`compare_row`).

The door is ``moestat rates --replay RUN --n N --replicate R [--out FILE.json]``.  This module is
the engine's: it imports neither the catalogue nor the theorem registry.

Tolerance.  With one thread the replay repeats the recorded arithmetic operation for operation, and
``results.csv`` writes each float by its shortest round-trip representation, so a reproduced row is
equal to the bit on the machine that recorded it.  :data:`REPLAY_RTOL` (relative ``1e-9``) leaves
room only for a BLAS or libm of another build, whose results differ in the last bits (relative
``1e-16`` per operation, amplified by the fit's iterations to ``1e-12`` at most in what we have
seen), while any change of the fitted estimate shows far above it: the losses of two replicates
differ by tens of percent.  The largest relative difference found is reported beside the verdict.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from moestat import __version__
from moestat.model.mixing import MixingMeasure
from moestat.rates import truth_check as tc
from moestat.rates.grow import GrowError, recorded_config
from moestat.rates.resolve import Experiment
from moestat.rates.store import LOSS_NAMES, read_run
from moestat.rates.sweep import WorkUnit, compute_losses, draw_unit, make_units, unit_holdout, unit_scenario
from moestat.threads import one_thread

__all__ = ["COMPARED", "REPLAY_RTOL", "ReplayError", "compare_row", "refit_unit", "replay_unit", "format_replay"]

#: Relative tolerance of a reproduced number (the module's docstring says why ``1e-9``).
REPLAY_RTOL = 1e-9

#: The recorded columns a replay must reproduce: the estimator's objective and every loss.
COMPARED = ("objective", *LOSS_NAMES)


class ReplayError(ValueError):
    """A record that cannot be replayed (no such folder, not a run, ``(n, replicate)`` not in it, a
    configuration this version cannot rebuild): one line naming the folder."""


def refit_unit(unit: WorkUnit) -> dict[str, Any]:
    """Refit ``unit`` exactly as the sweep's reported fit, keeping every start's result.

    The unit's own data streams, starts and estimator seed, on one torch and one BLAS thread
    (:func:`moestat.threads.one_thread`), then the truth check of the sweep
    (:func:`moestat.rates.truth_check.against_truth`) and the losses on the scenario's held-out inputs.

    Parameters
    ----------
    unit : WorkUnit
        A sweep's work unit of ``B`` replicates (e.g. from :func:`moestat.rates.sweep.recorded_unit`).

    Returns
    -------
    dict
        ``scenario``; ``X [B, n, d]``; ``Y [B, n]``; the fitted estimator ``est``; ``starts``: its
        :class:`~moestat.estimators.mle.StartResults` (``E`` entries with their replicate position)
        for an estimator with ``keep_starts`` (the likelihood estimators), else ``None`` (one start
        per replicate); ``first_loglik [B]`` (the estimator's log-likelihoods before the truth check
        answers anything, NaN for an estimator without one); ``state``
        (:func:`~moestat.rates.truth_check.against_truth`: the fits the sweep reports) and
        ``losses`` (per loss name, ``[B]``).
    """
    with one_thread():
        sc = unit_scenario(unit.scenario_key)
        holdout = unit_holdout(unit.scenario_key, unit.holdout)
        X, Y, G0 = draw_unit(unit, sc)
        est = tc.unit_estimator(unit, sc, 2)  # the recorded unit's estimator seed, as tc.fit_starts
        keeps = "keep_starts" in est.get_params()
        if keeps:
            est.set_params(keep_starts=True)  # the same fit, every start's result kept
        est.fit(X, Y, init=MixingMeasure.stack(G0))  # exactly tc.fit_starts
        first_ll = np.array(getattr(est, "loglik_", np.full(len(unit.replicates), np.nan)), dtype=float)
        state = tc.against_truth(unit, sc, X, Y, est)
        losses = compute_losses(sc, state["params"], holdout)
    return {"scenario": sc, "X": X, "Y": Y, "est": est, "starts": est.starts_ if keeps else None,
            "first_loglik": first_ll, "state": state, "losses": losses}


def _close(a: float, b: float, rtol: float) -> tuple[bool, float]:
    """Whether ``a`` reproduces ``b`` (both NaN counts as equal: a loss undefined for the scenario)
    and their relative difference (0 for equal numbers, inf where only one is finite)."""
    if math.isnan(a) and math.isnan(b):
        return True, 0.0
    if a == b:
        return True, 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return False, math.inf
    rel = abs(a - b) / max(abs(a), abs(b))
    return rel <= rtol, rel


def compare_row(replayed: dict[str, Any], recorded: dict[str, Any] | pd.Series, rtol: float = REPLAY_RTOL) -> dict[str, Any]:
    """Compare a replayed fit with its recorded ``results.csv`` row.

    Parameters
    ----------
    replayed, recorded : dict or Series
        ``objective``, each loss of :data:`COMPARED`, ``n_iter`` and ``status`` of one fit.
    rtol : float
        Relative tolerance of each number (:data:`REPLAY_RTOL`).

    Returns
    -------
    dict
        ``reproduced`` (every number within ``rtol``, ``n_iter`` and ``status`` equal),
        ``max_rel_diff`` (the largest relative difference of the numbers), ``mismatched`` (the
        columns that differ) and ``rtol``.
    """
    mismatched, worst = [], 0.0
    for col in COMPARED:
        ok, rel = _close(float(replayed[col]), float(recorded[col]), rtol)
        worst = max(worst, rel)
        if not ok:
            mismatched.append(col)
    for col in ("n_iter", "status"):
        if str(replayed[col]) != str(recorded[col]):
            mismatched.append(col)
    return {"reproduced": not mismatched, "max_rel_diff": worst, "mismatched": mismatched, "rtol": rtol}


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name where it has none)."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _unit_of(experiment: Experiment, run: Path, n: int, replicate: int, router: str | None) -> tuple[WorkUnit, int]:
    """The unit of ``experiment`` holding ``(n, replicate)`` (of ``router``) and the replicate's position."""
    routers = list(experiment.config.router)
    if router is None:
        if len(routers) > 1:
            raise ReplayError(f"{run}: the record fits routers {', '.join(routers)}; name one (--router)")
        router = routers[0]
    elif router not in routers:
        raise ReplayError(f"{run}: the record fits routers {', '.join(routers)}, not {router}")
    units = make_units(experiment)
    unit = next((u for u in units if u.router == router and u.n == n and replicate in u.replicates), None)
    if unit is None:
        ns = sorted({u.n for u in units})
        reps = sorted({r for u in units for r in u.replicates})
        raise ReplayError(f"{run}: no recorded fit at n = {n}, replicate {replicate} (sizes {ns}, replicates "
                          f"{reps[0]}..{reps[-1]})")
    return unit, unit.replicates.index(replicate)


def replay_unit(run: str | os.PathLike, n: int, replicate: int, *, router: str | None = None,
                scenario_dir: str | os.PathLike | None = None, rtol: float = REPLAY_RTOL) -> dict[str, Any]:
    """Replay the recorded fit ``(n, replicate)`` of a run folder and check its recorded row.

    The whole work unit holding it is refitted (its other replicates too): a unit's replicates are
    fitted as one batch, so the batch is part of what the record computed.  The cost is that of
    one unit of the sweep.

    Parameters
    ----------
    run : path-like
        A ``moestat rates`` run folder (``provenance.json``, ``results.csv``); its rows are audited
        as ``--resume`` reads them (:func:`moestat.rates.store.read_run`: an edited row, whose
        ``crc32`` no longer matches, is refused).
    n, replicate : int
        The recorded fit.
    router : str, optional
        Its router, where the record fits several.
    scenario_dir : path-like, optional
        Where to find the record's scenario file when the absolute path it recorded does not
        exist (a record made in another checkout): the file of the same name there.
    rtol : float
        Relative tolerance of the check (:data:`REPLAY_RTOL`).

    Returns
    -------
    dict
        ``run``, ``n``, ``replicate``, ``router``, ``recorded_version`` and ``version`` (the
        package's now); ``starts``: one dict per start of the replicate (``start``, ``objective``
        -- the negative mean log-likelihood ``-loglik / n`` a likelihood start maximises, or the
        estimator's objective for a one-start estimator --, ``converged``, ``status``, ``n_iter``,
        ``selected``: the start the estimator reported); ``replayed`` and ``recorded``: the fit's
        ``objective``, losses, ``n_iter``, ``status``, ``converged`` and ``truth_check``; and
        :func:`compare_row`'s ``reproduced``, ``max_rel_diff``, ``mismatched``, ``rtol``.

    Raises
    ------
    ReplayError
        No such folder, not a run's, a configuration this version cannot rebuild, or
        ``(n, replicate)`` not recorded: one line.
    """
    run = Path(run)
    if not run.is_dir():
        raise ReplayError(f"{run}: no such run folder")
    if not (run / "provenance.json").is_file():
        raise ReplayError(f"{run}: not a moestat rates run (no provenance.json)")
    try:
        prov = json.loads((run / "provenance.json").read_text(encoding="utf-8"))
        recorded_version, recorded_commit = str(prov.get("version", "?")), prov.get("git_commit")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        raise ReplayError(f"{run / 'provenance.json'}: not a moestat run's provenance (not JSON)") from None
    versions = "" if recorded_version == __version__ else f" (recorded by moestat {recorded_version}, this is {__version__})"
    try:  # a configuration this version cannot rebuild: another version's (a key it does not know)
        config = recorded_config(run)
    except GrowError as exc:
        raise ReplayError(f"{run}: cannot be replayed{versions}: {exc}") from None
    if config.scenario_file and scenario_dir is not None and not Path(config.scenario_file).is_file():
        config = config.replace(scenario_file=str(Path(scenario_dir) / Path(config.scenario_file).name))
    try:
        experiment = Experiment.of(config)  # the scenario rebuilt (its file read and hashed) as the sweep did
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise ReplayError(f"{run}: cannot be replayed{versions}: {_first_line(exc)}") from None
    try:
        rows = read_run(run, experiment).df  # every row audited (crc32, grid) as --resume and --grow-from read it
    except (UnicodeDecodeError, ValueError, OSError) as exc:
        raise ReplayError(_first_line(exc) or f"{run / 'results.csv'}: unreadable") from None
    unit, pos = _unit_of(experiment, run, int(n), int(replicate), router)
    match = rows[(rows["router"] == unit.router) & (rows["n"] == unit.n) & (rows["replicate"] == replicate)]
    if len(match) != 1:
        raise ReplayError(f"{run}: results.csv holds {len(match)} rows for n = {n}, replicate {replicate} "
                          f"(router {unit.router}); the record is not whole")
    row = match.iloc[0]
    r = refit_unit(unit)
    state, losses = r["state"], r["losses"]
    replayed = {"objective": float(state["objective"][pos]), **{k: float(losses[k][pos]) for k in LOSS_NAMES},
                "n_iter": int(state["n_iter"][pos]), "status": str(state["status"][pos]),
                "converged": bool(state["converged"][pos]), "truth_check": state["truth"][pos].get("truth_check")}
    recorded = {"objective": float(row["objective"]), **{k: float(row[k]) for k in LOSS_NAMES},
                "n_iter": int(row["n_iter"]), "status": str(row["status"]), "converged": bool(row["converged"]),
                "truth_check": row.get("truth_check")}
    return {"run": str(run), "n": int(n), "replicate": int(replicate), "router": unit.router,
            "recorded_version": recorded_version, "recorded_commit": recorded_commit, "version": __version__,
            "start_objective": ("-loglik / n, the criterion that selects a start" if r["starts"] is not None
                                else "the estimator's objective (one start per replicate)"),
            "starts": _starts(r, pos, unit.n), "replayed": replayed, "recorded": recorded,
            **compare_row(replayed, recorded, rtol)}


def _starts(r: dict, pos: int, n: int) -> list[dict[str, Any]]:
    """The starts of the replicate at position ``pos`` of a :func:`refit_unit` result."""
    st, state = r["starts"], r["state"]
    if st is None:  # one start per replicate: the fit itself
        return [{"start": 0, "objective": float(r["est"].objective_[pos]), "converged": bool(r["est"].converged_[pos]),
                 "status": str(r["est"].status_[pos]), "n_iter": int(r["est"].n_iter_[pos]), "selected": True}]
    out = []
    for s, e in enumerate(np.flatnonzero(np.asarray(st.replicate) == pos)):
        status = str(st.status[e])
        out.append({"start": s, "objective": float(-st.loglik[e] / n), "converged": status in ("tol", "newton"),
                    "status": status, "n_iter": int(st.n_iter[e]), "selected": bool(e == st.chosen[pos])})
    return out


def format_replay(report: dict[str, Any]) -> str:
    """The door's table of a :func:`replay_unit` report: one line per start, then the verdict."""
    lines = [f"starts' objective: {report['start_objective']}",
             f"{'start':>5}  {'objective':>22}  {'converged':>9}  {'n_iter':>6}  selected"]
    for s in report["starts"]:
        lines.append(f"{s['start']:>5}  {s['objective']:>22.17g}  {str(s['converged']):>9}  {s['n_iter']:>6}  "
                     f"{'*' if s['selected'] else ''}")
    rep, rec = report["replayed"], report["recorded"]
    lines.append(f"objective: replayed {rep['objective']!r}, recorded {rec['objective']!r}")
    if report["reproduced"]:
        lines.append(f"reproduced: objective and {len(COMPARED) - 1} losses within relative {report['rtol']:g} "
                     f"(largest difference {report['max_rel_diff']:.3g}), n_iter and status equal")
    else:
        lines.append(f"NOT reproduced: {', '.join(report['mismatched'])} differ (largest relative difference "
                     f"{report['max_rel_diff']:.3g}; recorded by moestat {report['recorded_version']} at commit "
                     f"{report['recorded_commit']}, replayed by {report['version']}: the code that fits it, or the "
                     "numerical libraries beneath it, changed since)")
    return "\n".join(lines)

"""One protocol for every catalogue entry, fixed before any run: sizes, replicates, window, statistic.

The catalogue's own designs (:attr:`moestat.rates.catalogue.Run.full`) grew entry by entry: grids
extended and replicates raised where a first result failed.  Each step was fixed before its run,
but a sequence of steps taken only where a result disappointed is tuning.  The protocol replaces
every entry's grid by one rule applied alike, so that no entry's design depends on its results:

* **Sizes from the truth.**  ``n_ok`` is the pre-flight's smallest ``n`` at which every parameter
  block's Cramér-Rao sd is below a tenth of the true atoms' separation
  (:func:`moestat.rates.preflight.preflight`); a run whose Fisher information is singular or whose
  ``n_ok`` exceeds :data:`N_OK_CAP` (a slow case) has none.  The entry's grid starts at the first size
  of the ladder ``N_FLOOR * 2**j`` at or above the largest finite ``n_ok`` of its runs and routers, and
  has :data:`N_POINTS` sizes doubling up to :data:`SPAN` times the first.  Every run of an entry uses
  the same sizes, so its contrasts pair on ``(n, replicate)``.
* **Replicates from one planning rule.**  :data:`REPS` to start; the rates pipeline's adaptive
  replicates (``max_reps``, :func:`moestat.rates.verdicts.plan`) then add replicates, at most doubling
  per round, while a predicted rate's Monte Carlo plan needs more for a 95% half-width of
  :data:`HALFWIDTH` (an interval of width ``2 * HALFWIDTH``, below the categories' cap
  :data:`moestat.rates.verdicts.MAX_CI_WIDTH`), up to :data:`MAX_REPS`.
* **Window**: the whole grid (it starts at ``n_ok`` already); the rates pipeline's own floor and
  pre-asymptotic rules apply as everywhere.
* **Statistic**: the per-``n`` median (:data:`moestat.rates.catalogue.STATISTIC`), the mean beside it.
* **Categories**: :func:`moestat.rates.verdicts.judge_interval`, unchanged.

The model, the truth, the estimator and its starts stay the entry's (:attr:`Run.base`, and the
non-grid keys of :attr:`Run.full` such as ``starts`` and ``chunk``): the protocol fixes the design of
the measurement, not the object measured.
"""

from __future__ import annotations

import math
from typing import Any

from moestat.rates.catalogue import Entry, Run, entry, entry_status, reproduce, router_n_oks, run_config

__all__ = ["N_FLOOR", "SPAN", "N_POINTS", "REPS", "MAX_REPS", "HALFWIDTH", "N_OK_CAP", "GRID_KEYS",
           "entry_n_ok", "protocol_grid", "protocol_plan", "describe", "reproduce_protocol"]

#: The smallest size of any grid, and the base of the size ladder ``N_FLOOR * 2**j``.
N_FLOOR = 1000
#: ``n_max / n_min``: four doublings, 1.2 decades -- the span over which a slope of 1/4 moves the loss
#: by a factor 2, enough to tell -1/2 from -1/4 at the half-width below.
SPAN = 16
#: Sizes per grid (doubling).
N_POINTS = 5
#: Replicates to start with, and the adaptive cap.
REPS = 20
MAX_REPS = 60
#: The target 95% half-width of a predicted slope's interval.
HALFWIDTH = 0.1
#: An ``n_ok`` above this is no identifiability within reach of any grid the protocol can afford: the
#: run counts as a slow case (no finite ``n_ok``).
N_OK_CAP = 1_000_000
#: The keys of :attr:`Run.full` the protocol replaces; the rest (``starts``, ``chunk`` ...) stay the entry's.
GRID_KEYS = ("n_min", "n_max", "n_points", "reps", "max_reps", "halfwidth", "window_min", "window_max", "grow_n")


def _run_n_oks(run: Run) -> dict[str, float | None]:
    return router_n_oks(run_config(run, quick=False).validate())


def entry_n_ok(e: Entry) -> tuple[int | None, dict[str, dict[str, float | None]]]:
    """The largest finite pre-flight ``n_ok`` (at most :data:`N_OK_CAP`) over the entry's runs and
    routers, and every ``n_ok`` by run label and router (``None``: singular Fisher information); a run
    the entry leaves untested (:attr:`Entry.untested`: not fitted) does not count."""
    per_run = {run.label: _run_n_oks(run) for run in e.runs if run.label not in e.untested}
    finite = [float(v) for oks in per_run.values() for v in oks.values()
              if v is not None and math.isfinite(float(v)) and float(v) <= N_OK_CAP]
    return (int(math.ceil(max(finite))) if finite else None), per_run


def protocol_grid(e: Entry) -> dict[str, Any]:
    """The protocol's grid of entry ``e`` (the same for each of its runs), with the ``n_ok`` it came from.

    Returns
    -------
    dict
        ``n_min n_max n_points reps max_reps halfwidth`` (keys of
        :class:`~moestat.rates.config.RatesConfig`) and ``n_ok`` / ``n_ok_by_run`` (provenance).
    """
    n_ok, per_run = entry_n_ok(e)
    start = N_FLOOR
    while n_ok is not None and start < n_ok:
        start *= 2
    return {"n_min": start, "n_max": start * SPAN, "n_points": N_POINTS, "reps": REPS, "max_reps": MAX_REPS,
            "halfwidth": HALFWIDTH, "n_ok": n_ok, "n_ok_by_run": per_run}


def protocol_plan(key: str, **execution: Any) -> list[tuple[Run, Any]]:
    """The validated configuration of every run of entry ``key`` under the protocol (nothing is written).

    The grid keys of each run's full design are replaced by :func:`protocol_grid`; its model, estimator
    and other keys stay.  Raises ``ValueError`` for an unknown key or an entry that cannot run.
    """
    e = entry(key)
    status = entry_status(e)
    if status != "runnable":
        raise ValueError(f"catalogue entry {key} cannot run: {status}")
    grid = {k: v for k, v in protocol_grid(e).items() if k in GRID_KEYS}
    planned = []
    for run in (r for r in e.runs if r.label not in e.untested):  # an untested run is not fitted (as in plan)
        full = {k: v for k, v in run.full.items() if k not in GRID_KEYS}
        run_p = Run(run.label, run.base, {**full, **grid}, run.quick, run.requires)
        # no pre-flight window: the grid starts at or above every router's n_ok already (the whole grid)
        planned.append((run, run_config(run_p, quick=False, **execution).validate()))
    return planned


def describe() -> str:
    """The protocol in one paragraph (for reports and ``--list``)."""
    return (f"sizes: {N_POINTS} doubling sizes from the first of {N_FLOOR}*2^j at or above the entry's largest finite "
            f"pre-flight n_ok (<= {N_OK_CAP:,}) to {SPAN}x that; replicates: {REPS}, grown by the adaptive plan to a 95% "
            f"half-width of {HALFWIDTH:g}, at most {MAX_REPS}; window: the whole grid; statistic: median; categories: "
            "judge_interval")


def reproduce_protocol(key: str, out, *, n_jobs: int = 1, resume: bool = False, quiet: bool = True,
                       runs: list[tuple[Run, Any]] | None = None) -> dict[str, Any]:
    """Run catalogue entry ``key`` under the protocol into ``out`` (:func:`moestat.rates.catalogue.reproduce`
    with :func:`protocol_plan`); ``runs``: a plan made already (the command validates first)."""
    if runs is None:
        runs = protocol_plan(key, n_jobs=n_jobs, quiet=quiet)
    return reproduce(key, out, resume=resume, runs=runs, protocol=describe())

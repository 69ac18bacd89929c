"""What the catalogue's refit diagnostics share: their command line, a posterior, and standard JSON.

* :func:`refit_keeping_starts`: a recorded work unit refitted exactly as the sweep fitted it, every
  start's result kept (``gmoe_over4_outliers.py``, ``laplace_over_outliers.py``): the package's
  :func:`moestat.rates.replay.refit_unit` (the door ``moestat rates --replay RUN --n N --replicate R``
  replays one recorded fit and checks its row).  The unit comes from
  :func:`moestat.rates.sweep.recorded_unit`.
* :func:`refit_main`: the ``main()`` of the three outlier scripts (``gllim_outliers.py`` too): the
  run folder, the selection rule fixed before any parameter is looked at, the refit loop and the
  JSON report.
* :func:`one_thread`: one torch and one BLAS thread for a block (the package's
  :func:`moestat.threads.one_thread`); every refit of the catalogue's diagnostics runs inside it.
* :func:`gaussian_expert_posterior`: gate weights, posteriors and log-likelihood of Gaussian linear
  experts under a fit's log gate weights (the softmax gate of ``gmoe_over4_outliers.py``, the Laplace
  gate of ``laplace_over_outliers.py``).
* :func:`write_json`: standard JSON (RFC 8259 has no NaN or infinity; Python's ``json`` writes
  ``NaN``/``Infinity`` by default, which strict parsers reject).  A non-finite number is written as
  the string ``"inf"``, ``"-inf"`` or ``"nan"`` (what ``float()`` reads back; :func:`decode` does it
  for a whole report), and the report then says so in a last field ``non_finite``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from moestat.cli.common import ArgumentParser
from moestat.rates.replay import refit_unit
from moestat.threads import one_thread  # noqa: F401 - the scripts import it from here

#: The strings that stand for non-finite numbers in the JSON this module writes.
NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
#: The report's last field when it holds one of them.
NON_FINITE_NOTE = 'non-finite numbers are written as the strings "inf", "-inf" and "nan" (standard JSON has none)'


#: Refit a recorded unit keeping every start (the package's function, under the name the scripts use).
refit_keeping_starts = refit_unit


def gaussian_expert_posterior(log_gate: np.ndarray, X: np.ndarray, Y: np.ndarray,
                              eta: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Gate weights, responsibilities and log-likelihood of Gaussian linear experts on one sample.

    Parameters
    ----------
    log_gate : ndarray ``[n, k]``
        ``log gate_i(x_n)`` of the fit (each row's exponentials sum to 1).
    X : ndarray ``[n, d]``
    Y : ndarray ``[n]``
    eta : ndarray ``[k, d + 2]``
        Each expert's ``(a_i, b_i, sigma_i^2)``: the mean ``a_i^T x + b_i`` and the variance.

    Returns
    -------
    gate : ndarray ``[n, k]``
        ``gate_i(x_n)``.
    post : ndarray ``[n, k]``
        ``P(atom i | x, y)``, proportional to ``gate_i(x) N(y | a_i^T x + b_i, sigma_i^2)``.
    loglik : float
        ``sum_n log sum_i gate_i(x_n) N(y_n | a_i^T x_n + b_i, sigma_i^2)`` (nats).
    """
    d = X.shape[1]
    mean = X @ eta[:, :d].T + eta[:, d][None, :]
    var = eta[:, d + 1][None, :]
    log_joint = log_gate - 0.5 * (np.log(2 * np.pi * var) + (Y[:, None] - mean) ** 2 / var)
    log_norm = np.logaddexp.reduce(log_joint, axis=1, keepdims=True)
    return np.exp(log_gate), np.exp(log_joint - log_norm), float(log_norm.sum())


def per_n_tail(results: pd.DataFrame, column: str = "voronoi", above: float = 1e3) -> dict:
    """Per ``n`` of a run's table: fits, the median of ``column``, how many are above ``above``, the largest.

    Returns ``{str(n): {"fits", "median", "above_<above>", "max"}}`` (``above_1000`` for the default).
    """
    out = {}
    for n, v in results.groupby("n")[column]:
        out[str(int(n))] = {"fits": int(v.size), "median": float(v.median()), f"above_{above:g}": int((v > above).sum()),
                            "max": float(v.max())}
    return out


def print_per_n_tail(report: dict) -> None:
    """Print the ``D2_per_n`` entry of a refit report (:func:`per_n_tail`'s table) on one line."""
    print("D2 per n (median, fits above 1e3, largest): " + "; ".join(f"{n}: {v['median']:.3g}, {v['above_1000']}, {v['max']:.3g}"
                                                                    for n, v in report["D2_per_n"].items()))


def _encode(obj: Any) -> tuple[Any, bool]:
    """``obj`` with every non-finite float replaced by its :data:`NON_FINITE` string; whether any was."""
    if isinstance(obj, dict):
        pairs = [(k, _encode(v)) for k, v in obj.items()]
        return {k: v for k, (v, _) in pairs}, any(f for _, (_, f) in pairs)
    if isinstance(obj, (list, tuple)):
        items = [_encode(v) for v in obj]
        return [v for v, _ in items], any(f for _, f in items)
    if isinstance(obj, (float, np.floating)) and not math.isfinite(obj):
        return ("nan" if math.isnan(obj) else "inf" if obj > 0 else "-inf"), True
    return obj, False


def write_json(path: Path, report: dict) -> None:
    """Write ``report`` as standard JSON (indent 1, a final newline), non-finite numbers as strings.

    A report that held any gets the last field ``non_finite`` (:data:`NON_FINITE_NOTE`).  A
    non-finite number the encoding missed (a type it does not know) raises (``allow_nan=False``)
    before anything is written, so no invalid file is left.
    """
    body, any_non_finite = _encode(report)
    if any_non_finite:
        body["non_finite"] = NON_FINITE_NOTE
    text = json.dumps(body, indent=1, allow_nan=False) + "\n"
    Path(path).write_text(text)


def decode(obj: Any) -> Any:
    """A report read back with the :data:`NON_FINITE` strings as floats again (every other value as read)."""
    if isinstance(obj, dict):
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if isinstance(obj, str) and obj in NON_FINITE:
        return NON_FINITE[obj]
    return obj


def refit_main(argv: list[str] | None, *, description: str, run_help: str, top_help: str, table: str,
               needs: tuple[str, ...], choose: Callable[[pd.DataFrame, argparse.Namespace], pd.DataFrame],
               refit: Callable[[Path, pd.Series], dict], show: Callable[[dict], None],
               header: Callable[[pd.DataFrame, argparse.Namespace], dict] | None = None, timed: bool = True,
               summary: Callable[[dict], None] | None = None,
               footer: Callable[[list[dict], argparse.Namespace], dict] | None = None,
               more_arguments: Callable[[Any], list[str]] | None = None) -> int:
    """The ``main()`` of a refit diagnostic: choose recorded fits by a fixed rule, refit each, write a JSON report.

    Parameters
    ----------
    argv : list of str or None
        The command line (``None``: ``sys.argv[1:]``): a run folder, ``--top N`` (default 5) and
        ``--json PATH``, plus what ``more_arguments`` adds to the selection group (exclusive with ``--top``).
    description, run_help, top_help : str
        The ``--help`` texts.
    table : str
        The run's table the rule reads (``results.csv`` or ``extras.csv``).
    needs : tuple of str
        Files the run folder must hold; a missing one is bad input (one line on stderr, exit 2, nothing written).
    choose : callable
        ``(table, args) -> rows`` to refit, in the report's order (the rule, fixed before any parameter is read).
    refit : callable
        ``(run, row) -> dict``: one refitted fit of the report's ``fits``.
    show : callable
        Prints one fit's summary.
    header : callable, optional
        ``(table, args) -> dict``: the report's fields between ``run`` and the time fields (e.g. the rule).
    timed : bool
        Whether the report gets ``cpu_s`` and ``wall_s`` (of the whole run) before ``fits``.
    summary : callable, optional
        Prints the report's summary after it is written.
    footer : callable, optional
        ``(fits, args) -> dict``: fields computed from the refitted fits, written after ``fits``.
    more_arguments : callable, optional
        Adds script-specific selection options to the argparse group that holds ``--top`` (one of
        them at most is given; ``--top 5`` when none is) and returns their ``dest`` names.

    Returns
    -------
    int
        0, or 2 for bad input.
    """
    ap = ArgumentParser(description=description)  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("run", type=Path, help=run_help)
    rule = ap.add_mutually_exclusive_group()
    rule.add_argument("--top", type=int, default=None, help=f"{top_help} (default 5)")
    others = more_arguments(rule) if more_arguments is not None else []
    ap.add_argument("--json", type=Path, required=True)
    a = ap.parse_args(argv)
    if a.top is None and all(getattr(a, dest) is None for dest in others):
        a.top = 5
    if a.top is not None and a.top < 1:
        print(f"--top must be at least 1, got {a.top}", file=sys.stderr)
        return 2
    missing = [f for f in needs if not (a.run / f).is_file()]
    if missing:
        print(f"{a.run}: not a run folder ({', '.join(needs)} needed; missing {', '.join(missing)})", file=sys.stderr)
        return 2
    if not a.json.parent.is_dir():  # refused before the refits, not after them
        print(f"--json {a.json}: no folder {a.json.parent}", file=sys.stderr)
        return 2
    t0, c0 = time.perf_counter(), time.process_time()
    rows = pd.read_csv(a.run / table)
    fits = []
    for _, row in choose(rows, a).iterrows():
        fits.append(refit(a.run, row))
        show(fits[-1])
    report = {"run": str(a.run), **(header(rows, a) if header is not None else {})}
    if timed:
        report |= {"cpu_s": round(time.process_time() - c0, 1), "wall_s": round(time.perf_counter() - t0, 1)}
    report["fits"] = fits
    if footer is not None:
        report |= footer(fits, a)
    write_json(a.json, report)
    if summary is not None:
        summary(report)
    if timed:
        print(f"cpu {report['cpu_s']} s, wall {report['wall_s']} s; wrote {a.json}")
    return 0

"""The result store of a sweep: a long-format, append-only ``results.csv`` and ``provenance.json``.

Finished fits are appended one line per fit (:class:`ResultStore`); a kill loses at most the
unit in flight, a torn last line is skipped on reading and cut before the next append, and
``resume`` recomputes only missing ``(router, n, replicate)`` rows.  What is read back is
checked (:func:`audit_results`): a row outside the configured grid, a duplicate or an
unreadable line is reported in one line naming the file and never enters a summary, and
``--resume`` refuses such a file rather than guessing which rows to keep.  At the end of a
sweep the rows are sorted canonically (:meth:`ResultStore.sort`), so ``results.csv`` does not
depend on ``n_jobs`` or the backend.  ``provenance.json`` records
the package version, git commit, full configuration (and its :func:`config_hash`), platform,
torch version/device and the timestamps of every run into the folder; :func:`check_resumable`
refuses a folder written by another configuration.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from moestat import __version__
from moestat.io import append_line, atomic_write_json, atomic_write_text, not_text, refuse_links_in, sync_file
from moestat.rates.config import RatesConfig, stored_file_label  # noqa: F401 - stored_file_label: its name before it moved
from moestat.rates.extras import ExtrasStore, certificate_summary, merge_extras
from moestat.rates.resolve import Experiment, fields_hash
from moestat.rates.labels import LOSS_NAMES  # the one list of loss columns, re-exported

__all__ = [
    "audit_stored_runs",
    "LOSS_NAMES",
    "TRUTH_COLUMNS",
    "LEGACY_COLUMNS",
    "RESULT_COLUMNS",
    "CHECK_COLUMN",
    "FILE_COLUMNS",
    "row_check",
    "ResultStore",
    "RunStore",
    "read_results",
    "read_run",
    "RunRows",
    "write_provenance",
    "check_resumable",
    "analysis_suffix",
    "config_hash",
    "audit_results",
    "read_audited",
    "StoreAudit",
    "sort_key",
    "summary_rows_changed",
    "SUMMARY_RECOVERY",
]

#: The fit against the truth (:mod:`moestat.rates.truth_check`): the fit's criterion
#: (log-likelihood for maximum likelihood, sum of squared residuals for least squares), the same
#: at the true parameters on the same data, the fit's advantage over the truth (positive: the fit
#: is better), the advantage of the first fit before it was answered, and the verdict.
TRUTH_COLUMNS = ("fit_objective", "truth_objective", "truth_gap", "first_gap", "truth_check")
#: The columns of ``results.csv`` written before the truth columns existed (still read: the truth
#: columns of such a file are NaN / ``"unknown"``).
LEGACY_COLUMNS = (
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
#: All columns of ``results.csv``, in order (the truth columns after ``time``, so that the columns
#: of a file written before them keep their positions).
RESULT_COLUMNS = (*LEGACY_COLUMNS, *TRUTH_COLUMNS)
#: The last column of ``results.csv``: a CRC-32 of the row's fields but ``time``, so that an
#: edited value is found (files written before it existed have no such column: they are read
#: unchecked).  ``time`` is left out so that the column, like every result, does not depend on
#: ``n_jobs``, the backend or the machine's load.
CHECK_COLUMN = "crc32"
#: The header of ``results.csv``.
FILE_COLUMNS = (*RESULT_COLUMNS, CHECK_COLUMN)
_TIME = RESULT_COLUMNS.index("time")


_N_LEGACY = len(LEGACY_COLUMNS)
#: The headers ``results.csv`` may have: (columns, whether the rows carry a ``crc32``).
_HEADERS = ((RESULT_COLUMNS, True), (LEGACY_COLUMNS, True), (RESULT_COLUMNS, False), (LEGACY_COLUMNS, False))


def _kept(fields: Sequence[str]) -> list[str]:
    """The fields a checksum or digest covers: all but ``time``, and no truth columns on a row of a
    file written before them (padded with empty fields when read), so that its checksum and the
    digest of an old ``summary.json`` stay what they were."""
    fields = list(fields)
    if len(fields) > _N_LEGACY and not any(fields[_N_LEGACY:]):
        fields = fields[:_N_LEGACY]
    return [f for i, f in enumerate(fields) if i != _TIME]


def row_check(fields: Sequence[str]) -> str:
    """The ``crc32`` of a row: CRC-32 of its fields as written (all but ``time``), joined by the
    unit separator."""
    return f"{zlib.crc32(chr(31).join(_kept(fields)).encode('utf-8')):08x}"


def rows_digest(rows: Iterable[Sequence[str]]) -> str:
    """SHA-256 of rows (fields as written, all but ``time``) in the order given: what
    ``summary.json`` was computed from."""
    h = hashlib.sha256()
    for rec in rows:
        h.update(chr(31).join(_kept(rec)).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def config_hash(config: RatesConfig | Experiment) -> str:
    """SHA-256 of the result-determining fields (see :meth:`RatesConfig.result_fields`); an
    :class:`~moestat.rates.resolve.Experiment` carries it."""
    return config.hash if isinstance(config, Experiment) else fields_hash(config.result_fields())


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
        #: :meth:`create` cut a torn last line (a kill during an append); the sweep says so.
        self.repaired = False
        self._unsynced = False
        self._synced_at = -float("inf")  # the first append syncs

    def create(self) -> bool:
        """Write the header if the file is new; otherwise drop a torn last line (see :meth:`repair`)
        and give the rows of a file written before row checksums existed their ``crc32``.

        Returns True when such an unchecked file was given checksums.
        """
        if not self.path.exists():
            atomic_write_text(self.path, ",".join(FILE_COLUMNS) + "\n")
            return False
        self.repaired = self.repair()
        if _is_current(self.path):
            return False
        unchecked = not _is_checked(self.path)
        # rewritten with the current header (the truth columns empty, the checksum column); the
        # rows were audited by check_resumable
        self.sort()
        return unchecked

    def repair(self) -> bool:
        """Cut a partial last line left by a kill during an append (rewrites the file atomically).

        Without this, the next appended row would be glued to the torn fragment.  Returns True
        when something was cut.
        """
        text = self.path.read_text(encoding="utf-8")
        if text.endswith("\n") or not text:
            return False
        atomic_write_text(self.path, text[: text.rfind("\n") + 1])
        return True

    #: Seconds between two ``fsync`` of the file (:meth:`append`); :meth:`sort` syncs what is left.
    SYNC_INTERVAL = 1.0

    def append(self, rows: Iterable[dict]) -> None:
        """Append rows, each with its ``crc32``, in one ``write`` (a unit's rows whole or not at all,
        :func:`moestat.io.append_line`), and ``fsync`` the file when the last ``fsync`` is at least
        :attr:`SYNC_INTERVAL` seconds old.

        Why not an ``fsync`` per unit: the ``gmoe_exact`` design writes 600 units in
        about a minute from the process that also fits units, and 600 ``fsync`` s cost it 2.3 s of
        waiting on the project's 2-core machine.  The rows are in the file (the kernel's page cache)
        as soon as :meth:`append` returns -- a killed run keeps them -- so only a crash of the
        machine itself can lose the rows of the last second, which ``--resume`` recomputes.
        """
        lines = []
        for row in rows:
            fields = [_fmt(row[c]) for c in RESULT_COLUMNS]
            buf = io.StringIO()
            csv.writer(buf, lineterminator="").writerow([*fields, row_check(fields)])
            lines.append(buf.getvalue())
        if not lines:
            return
        append_line(self.path, "\n".join(lines), sync=False)
        self._unsynced = True
        now = time.monotonic()
        if now - self._synced_at >= self.SYNC_INTERVAL:
            self.sync()
            self._synced_at = now

    def sync(self) -> None:
        """``fsync`` the rows appended since the last one (none: nothing to do)."""
        if self._unsynced:
            sync_file(self.path)
            self._unsynced = False

    def read(self, config: RatesConfig | Experiment | None = None):
        """The results as a :class:`pandas.DataFrame` (see :func:`read_results`)."""
        return read_results(self.path, config)

    def sort(self) -> None:
        """Rewrite the file (atomically) with its rows in the canonical order of :func:`sort_key`.

        Rows are appended in the order units finish, which depends on ``n_jobs`` and the
        backend; sorting at the end of a sweep makes ``results.csv`` the same whatever they were.
        Rows are written back exactly as read (the text of each field is kept).
        """
        rows, audit = audit_results(self.path)
        msg = audit.message()
        if msg:
            raise ValueError(msg)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(FILE_COLUMNS)
        w.writerows([*rec, row_check(rec)] for rec in rows)
        text = buf.getvalue()
        if text != self.path.read_text(encoding="utf-8"):
            atomic_write_text(self.path, text)  # written and synced whole
            self._unsynced = False
        self.sync()  # the rows of the last appends (sort ends every sweep)

    def done(self) -> set[tuple[str, int, int]]:
        """``(router, n, replicate)`` of every complete row (the rows :meth:`read` accepts).

        From the audited rows, without a DataFrame: this runs before the sweep's first unit, and
        importing pandas there (about 1 s, in the import lock the background imports of
        :mod:`moestat.rates.experiment` also take) delayed this process's first unit.
        """
        rows, audit = audit_results(self.path)
        msg = audit.message()
        if msg:
            raise ValueError(msg)
        i_router, i_n, i_rep = (RESULT_COLUMNS.index(c) for c in ("router", "n", "replicate"))
        return {(r[i_router], int(r[i_n]), int(r[i_rep])) for r in rows}


class RunStore:
    """The files a sweep appends its rows to, written together: ``results.csv``
    (:class:`ResultStore`) and, when the run writes one, ``extras.csv``
    (:class:`~moestat.rates.extras.ExtrasStore`).

    Why one object: a unit's rows went to two stores, each created, appended and checked by the
    sweep in turn; here one :meth:`append` writes a unit's rows to both, ``results.csv`` first
    (a kill between the two loses at most that unit's extras: :mod:`moestat.rates.extras`).

    Parameters
    ----------
    out_dir : path-like
        The run's folder.
    extras : ExtrasStore or None
        The run's ``extras.csv`` (:meth:`~moestat.rates.extras.ExtrasStore.of_run`), or ``None``.
    """

    def __init__(self, out_dir: str | os.PathLike, extras: ExtrasStore | None = None):
        self.results = ResultStore(Path(out_dir) / "results.csv")
        self.extras = extras

    def open(self) -> list[str]:
        """Create the files (headers) or repair a torn last line of each (:meth:`ResultStore.create`,
        :meth:`~moestat.rates.extras.ExtrasStore.create`); return the notes the sweep prints about
        what was found (one line each: rows given checksums, a torn line cut, an old extras header)."""
        notes = []
        if self.results.create():
            notes.append(f"note: {self.results.path} had no row checksums (written by an earlier moestat); its rows "
                         "are taken as they are and now carry them")
        if self.results.repaired:
            notes.append(f"note: {self.results.path}: cut a partial last line left by an interrupted write; its unit "
                         "is run again")
        if self.extras is not None:
            self.extras.create()
            if self.extras.adopted_legacy:
                notes.append(f"note: {self.extras.path} was written before moestat recorded the declared losses at the "
                             "best fit; it is continued with its own columns (no best_<declared loss>)")
        return notes

    def done(self) -> set[tuple[str, int, int]]:
        """:meth:`ResultStore.done` of ``results.csv``."""
        return self.results.done()

    def append(self, rows: list[dict]) -> None:
        """A unit's rows: to ``results.csv``, then (their extras columns) to ``extras.csv``."""
        self.results.append(rows)
        if self.extras is not None:
            self.extras.append(rows)

    def sort(self) -> None:
        """:meth:`ResultStore.sort`: the canonical row order, whatever ran the units."""
        self.results.sort()


@dataclass
class StoreAudit:
    """What :func:`audit_results` found in a ``results.csv`` besides clean rows.

    Attributes
    ----------
    path : Path
    rows : int
        Complete, well-formed rows that belong to the sweep.
    torn : bool
        The last line is a partial append (a kill during a write); it is dropped, never an error.
    garbage : list of int
        Line numbers (1-based, the header is line 1) that are not a results row: wrong field
        count or a non-number where a number belongs.
    duplicates : list of int
        Line numbers repeating the ``(router, n, replicate)`` of an earlier row.
    outside : list of tuple(int, str)
        Line numbers (and why) of rows outside the configured grid: ``n`` not a sample size of
        the sweep, ``replicate >= reps``, a router, scenario, setting, seed or estimator the
        configuration does not have.
    edited : list of int
        Line numbers of rows whose ``crc32`` does not match their fields (changed after they
        were written).
    checked : bool
        The file has the ``crc32`` column (False: written before row checksums; edits cannot
        be found).
    digest : str
        :func:`rows_digest` of the clean rows, in canonical order.
    """

    path: Path
    rows: int = 0
    torn: bool = False
    garbage: list = field(default_factory=list)
    duplicates: list = field(default_factory=list)
    outside: list = field(default_factory=list)
    edited: list = field(default_factory=list)
    checked: bool = True
    digest: str = ""

    @property
    def n_bad(self) -> int:
        return len(self.garbage) + len(self.duplicates) + len(self.outside) + len(self.edited)

    def message(self) -> str | None:
        """One line naming the file and counting every kind of bad row; ``None`` when clean."""
        if not self.n_bad:
            return None

        def lines(nums: list) -> str:
            shown = ", ".join(str(i) for i in nums[:5])
            return shown + (", ..." if len(nums) > 5 else "")

        parts = []
        if self.outside:
            parts.append(f"{len(self.outside)} outside the configured grid (line {lines([i for i, _ in self.outside])}: "
                         f"{self.outside[0][1]})")
        if self.duplicates:
            parts.append(f"{len(self.duplicates)} duplicate (router, n, replicate) (line {lines(self.duplicates)})")
        if self.garbage:
            parts.append(f"{len(self.garbage)} unreadable (line {lines(self.garbage)})")
        if self.edited:
            parts.append(f"{len(self.edited)} edited after they were written (line {lines(self.edited)}: "
                         f"the {CHECK_COLUMN} column does not match the values)")
        return f"{self.path} has {self.n_bad} row(s) that are not results of this sweep: " + "; ".join(parts)


def sort_key(router: str, n: int, replicate: int) -> tuple:
    """The canonical row order of ``results.csv``: ``n`` descending (the order a one-worker sweep
    appends in: largest ``n`` first), then router name, then replicate."""
    return (-int(n), str(router), int(replicate))


_INT_COLS = ("n", "replicate", "seed", "n_iter")
_FLOAT_COLS = ("objective", *LOSS_NAMES, "time")
#: Float truth columns: empty (a file written before them) is read as NaN.
_TRUTH_FLOATS = ("fit_objective", "truth_objective", "truth_gap", "first_gap")


def _header(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.readline().rstrip("\n").split(",")
    except UnicodeDecodeError as exc:
        raise not_text(path, exc, "results file") from None


def _utf8_text(path: Path) -> str:
    """The file's text; a binary (or non-UTF-8) file is one line naming it, not the codec's message."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise not_text(path, exc, "results file") from None


def _is_checked(path: Path) -> bool:
    return _header(path)[-1:] == [CHECK_COLUMN]


def _is_current(path: Path) -> bool:
    return _header(path) == list(FILE_COLUMNS)


def _parse_lines(path: Path) -> tuple[list[tuple[int, list[str]]], bool, list[int], list[int], bool]:
    """``[(line number, fields)]`` of the well-formed rows (without their ``crc32``), whether the
    last line is torn, the line numbers of the malformed ones and of the edited ones, and whether
    the file carries row checksums."""
    text = _utf8_text(path)
    if not text.strip():  # no header: a file emptied (or created) by hand, never by an append
        raise ValueError(f"{path} is empty (not even its header); delete it and run moestat rates --resume with this "
                         "--out to compute its rows again")
    lines = text.split("\n")
    header = lines[0].split(",") if lines else []
    for cols, checked in _HEADERS:
        if header == [*cols, CHECK_COLUMN] if checked else header == list(cols):
            break
    else:
        raise ValueError(f"{path} is not a moestat results file (unexpected header)")
    width = len(cols) + checked
    pad = [""] * (len(RESULT_COLUMNS) - len(cols))  # a file written before the truth columns
    torn = bool(text) and not text.endswith("\n")
    body = lines[1:-1]  # split leaves "" after a final newline, or the torn fragment
    rows, garbage, edited = [], [], []
    for i, line in enumerate(body, start=2):
        if not line.strip():
            continue
        try:
            rec = next(csv.reader([line]))
        except (csv.Error, StopIteration):
            garbage.append(i)
            continue
        if len(rec) != width:
            garbage.append(i)
            continue
        d = dict(zip(cols, rec))
        try:
            for c in _INT_COLS:
                int(d[c])
            for c in _FLOAT_COLS:
                float(d[c])
            for c in _TRUTH_FLOATS:
                if d.get(c):
                    float(d[c])
            if d["converged"] not in ("0", "1", "True", "False"):
                raise ValueError
        except ValueError:
            garbage.append(i)
            continue
        if checked:
            rec, crc = rec[:-1], rec[-1]
            if crc != row_check(rec):
                edited.append(i)
        rows.append((i, rec + pad))
    return rows, torn, garbage, edited, checked


def audit_results(path: str | os.PathLike, config: RatesConfig | Experiment | None = None) -> tuple[list[list[str]], StoreAudit]:
    """Read ``results.csv`` line by line and sort its rows into clean and bad.

    Parameters
    ----------
    path : path-like
    config : RatesConfig or Experiment, optional
        The sweep the file belongs to (a configuration is resolved here); without it only garbage
        and duplicates are found.

    Returns
    -------
    rows : list of list of str
        The clean rows (fields as written), in the canonical order of :func:`sort_key`.
    audit : StoreAudit
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results file {path}")
    parsed, torn, garbage, edited, checked = _parse_lines(path)
    edited_set = set(edited)
    audit = StoreAudit(path, torn=torn, garbage=garbage, checked=checked)
    expected = None
    if config is not None:
        experiment = Experiment.of(config)
        expected, config = experiment.expected, experiment.config
    # a growing sweep (--grow-n) owns every size of its ladder
    ns = set(config.ns) | set(getattr(config.grid, "ladder", [])) if config is not None else None
    # an adaptive sweep (--max-reps) owns the replicates up to its budget
    bound = max(config.reps, getattr(config, "max_reps", 0) or 0) if config is not None else None
    seen: set = set()
    clean = []
    for i, rec in parsed:
        d = dict(zip(RESULT_COLUMNS, rec))
        key = (d["router"], int(d["n"]), int(d["replicate"]))
        if config is not None:
            why = None
            if d["router"] not in expected:
                why = f"router {d['router']!r} not in {','.join(config.router)}"
            elif int(d["n"]) not in ns:
                why = f"n = {d['n']} is not a sample size of the sweep"
            elif not 0 <= int(d["replicate"]) < bound:
                why = f"replicate {d['replicate']} outside 0..{bound - 1} (--reps {config.reps}" + (
                    f", --max-reps {config.max_reps})" if config.max_reps else ")")
            elif (d["scenario"], d["setting"]) != expected[d["router"]]:
                why = f"scenario {d['scenario']!r} is not the configured one"
            elif int(d["seed"]) != config.seed:
                why = f"seed {d['seed']} is not --seed {config.seed}"
            elif d["estimator"] != config.estimator:
                why = f"estimator {d['estimator']!r} is not --estimator {config.estimator}"
            if why:
                audit.outside.append((i, why))
                continue
        if i in edited_set:
            audit.edited.append(i)
            continue
        if key in seen:
            audit.duplicates.append(i)
            continue
        seen.add(key)
        if config is not None and int(d["replicate"]) >= config.reps:
            # a later round of an adaptive sweep (--max-reps): a row of the sweep, not of this round
            continue
        clean.append(rec)
    clean.sort(key=lambda rec: sort_key(rec[1], rec[3], rec[4]))
    audit.rows = len(clean)
    audit.digest = rows_digest(clean)
    return clean, audit


def summary_rows_changed(summary_path: str | os.PathLike, rows: dict, audit: StoreAudit) -> str:
    """The one line that says ``summary.json`` was not computed from the rows ``results.csv`` holds.

    ``rows`` is the summary's record of its rows (``{"count", "sha256"}``, see
    :func:`rows_digest`); ``audit`` the :func:`audit_results` of the file now.  A row changed
    with its ``crc32`` recomputed passes the row check but not this digest.  Used by ``moestat
    plot`` and ``moestat rates --resume`` alike, so both refuse the same files with the same words.
    """
    return (f"{summary_path} was not computed from the rows {audit.path} holds now ({rows.get('count')} rows then, "
            f"{audit.rows} now, other values: rows sha256 {str(rows.get('sha256'))[:12]}... then, {audit.digest[:12]}... now); "
            f"a row was changed after it was written, its {CHECK_COLUMN} recomputed")


#: How to get out of :func:`summary_rows_changed` (plot and resume say the same).
SUMMARY_RECOVERY = "restore results.csv, or delete summary.json to accept the rows as they are now"


def read_results(path: str | os.PathLike, config: RatesConfig | Experiment | None = None):
    """Read ``results.csv`` into a DataFrame in the canonical row order (see :func:`sort_key`).

    A kill during an append can leave a partial last line; it is dropped.  Anything else that is
    not a row of the sweep -- an unreadable line, a duplicate ``(router, n, replicate)``, or (with
    ``config``) a row outside its grid -- is an error: it must never enter a summary.

    Raises
    ------
    ValueError
        One line naming the file and counting the bad rows (see :class:`StoreAudit`).
    """
    return read_audited(path, config)[0]


def read_audited(path: str | os.PathLike, config: RatesConfig | Experiment | None = None):
    """:func:`read_results` and the :class:`StoreAudit` it read the file with (one pass over the
    file: a caller that reports the row count or digest needs no second audit).

    Returns
    -------
    (DataFrame, StoreAudit)

    Raises
    ------
    ValueError
        As :func:`read_results`.
    """
    rows, audit = audit_results(path, config)
    msg = audit.message()
    if msg:
        raise ValueError(msg)
    return _frame(rows), audit


def _frame(rows: list[list[str]]):
    """The clean rows of :func:`audit_results` as a typed DataFrame (truth columns of an old file: NaN)."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    for c in _INT_COLS:
        df[c] = df[c].astype(int)
    df["converged"] = df["converged"].map({"1": True, "0": False, "True": True, "False": False})
    for c in _FLOAT_COLS:
        df[c] = df[c].astype(float)
    for c in _TRUTH_FLOATS:  # empty in a file written before the truth columns: NaN
        df[c] = df[c].replace("", "nan").astype(float)
    df["truth_check"] = df["truth_check"].replace("", "unknown")
    return df.reset_index(drop=True)


@dataclass(frozen=True)
class RunRows:
    """The rows of a run as a sweep round left them, with the tallies ``summary.json`` reports.

    Attributes
    ----------
    df : pandas.DataFrame
        ``results.csv`` in canonical order (:func:`read_results`), left-joined with
        ``extras.csv`` when the run writes one (:func:`moestat.rates.extras.merge_extras`).
    audit : StoreAudit
        The audit of ``results.csv`` (its ``rows`` and ``digest`` are the summary's ``rows``).
    counts : dict
        ``expected, fits, converged, failed, nonfinite`` over all routers, and ``by_router``.
    truth_check : dict
        Per router: fits found worse than the truth, answered and remaining
        (:mod:`moestat.rates.truth_check`; ``unknown``: rows written before the check existed).
    certificate : dict or None
        :func:`moestat.rates.extras.certificate_summary` (``None`` without extra starts).
    """

    df: Any
    audit: StoreAudit
    counts: dict
    truth_check: dict
    certificate: dict | None


def read_run(out_dir: str | os.PathLike, experiment: RatesConfig | Experiment) -> RunRows:
    """Read a run's ``results.csv`` (audited against ``experiment``, as :func:`read_results`) and
    its ``extras.csv``, with the tallies of ``summary.json``.

    Raises
    ------
    ValueError
        One line naming the file and counting the rows that are not results of this sweep.
    """
    out_dir = Path(out_dir)
    experiment = Experiment.of(experiment)
    rows, audit = audit_results(out_dir / "results.csv", experiment)
    msg = audit.message()
    if msg:
        raise ValueError(msg)
    df = _frame(rows)
    config = experiment.config
    counts, truth = _row_counts(df, config.ns, config.reps, config.router), _truth_tallies(df, config.router)
    if experiment.extra_columns:
        df = merge_extras(df, out_dir / "extras.csv")
    return RunRows(df, audit, counts, truth, certificate_summary(df, config.router, config.extra_starts))


def _row_counts(df, ns: Sequence[int], reps: int, routers: Sequence[str]) -> dict[str, Any]:
    """Expected, written, converged, failed and non-finite fits, per router and in all."""
    expected = len(ns) * reps
    out: dict[str, Any] = {}
    total = {"expected": 0, "fits": 0, "converged": 0, "failed": 0, "nonfinite": 0}
    for router in routers:
        sub = df[df["router"] == router]
        nonfinite = int((~np.isfinite(sub[["voronoi", "regression_l2"]].to_numpy(float))).any(axis=1).sum())
        c = {
            "expected": expected,
            "fits": int(len(sub)),
            "converged": int(sub["converged"].fillna(False).astype(bool).sum()),
            "failed": int((~sub["converged"].fillna(False).astype(bool)).sum()),
            "nonfinite": nonfinite,
        }
        out[router] = c
        for k in total:
            total[k] += c[k]
    return {**total, "by_router": out}


def _truth_tallies(df, routers: Sequence[str]) -> dict[str, Any]:
    """Per router: the fits found worse than the truth, answered, and remaining."""
    out: dict[str, Any] = {}
    for router in routers:
        c = df.loc[df["router"] == router, "truth_check"].value_counts().to_dict() if "truth_check" in df else {}
        answered, remain = int(c.get("answered", 0)), int(c.get("below_truth", 0))
        out[router] = {"found": answered + remain, "answered": answered, "remain": remain,
                       "above": int(c.get("above", 0)), "unknown": int(c.get("unknown", 0)),
                       "not_comparable": int(c.get("n/a", 0)) + int(c.get("nonfinite", 0))}
    return out


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


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (the timestamps of ``provenance.json``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_provenance(out_dir: Path, config: RatesConfig | Experiment, *, started: str, finished: str | None = None, previous: dict | None = None,
                     workers: dict | None = None) -> dict:
    """Write ``provenance.json``: version, git commit, config (+ hash), platform, torch, timestamps.

    ``previous`` (a resumed sweep's old provenance) keeps the earlier runs in ``runs``;
    ``workers`` (the client's and every worker's environment, see
    :mod:`moestat.rates.worker_env`) is recorded with this run.
    """
    import torch

    experiment = Experiment.of(config)
    config = experiment.config
    runs = list(previous.get("runs", [])) if previous else []
    this_run = {"started": started, "finished": finished, "n_jobs": config.n_jobs, "backend": config.backend, "scheduler": config.scheduler}
    if workers is not None:
        this_run["workers"] = workers
    if runs and runs[-1].get("started") == started:
        runs[-1] = this_run
    else:
        runs.append(this_run)
    prov = {
        "package": "moestat",
        "version": __version__,
        "git_commit": _git_commit(),
        "config": config.to_dict(),
        "config_hash": experiment.hash,
        # the scenario file's SHA-256, a field of the hash that config.to_dict() does not hold: a refused
        # resume can then say whether the file's bytes or only its path differ
        **({"scenario_digest": experiment.digest} if experiment.digest is not None else {}),
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


def check_resumable(out_dir: Path, config: RatesConfig | Experiment, resume: bool) -> dict | None:
    """Refuse an output folder that belongs to another sweep; return its provenance on resume.

    Raises
    ------
    ValueError
        ``--out`` already holds results and ``resume`` is false, or its configuration differs.
    """
    prov_path = out_dir / "provenance.json"
    res_path = out_dir / "results.csv"
    if resume and out_dir.is_dir():
        refuse_links_in(out_dir)  # nothing of the store is read or written through a link
    if not resume:
        if res_path.exists():
            raise ValueError(f"--out {out_dir} is not empty; pass --resume to continue the run in it, or choose an empty or new folder")
        return None
    if not prov_path.exists():
        if res_path.exists():
            raise ValueError(f"--resume: {out_dir} has results.csv but no provenance.json; cannot check its config")
        return None
    try:
        prev = json.loads(prov_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--resume: cannot read {prov_path}: {exc}") from None
    experiment = Experiment.of(config)  # the scenario file is read once for the hash and the audit
    if prev.get("config_hash") != experiment.hash:
        old = dict(prev.get("config", {}))
        if "scenario_digest" in prev:
            old.setdefault("scenario_digest", prev["scenario_digest"])
        new = experiment.result_fields
        # a field the earlier run did not record is not called different: it is unknown
        diff = sorted(k for k in new if k in old and old[k] != (new[k] if not isinstance(new[k], tuple) else list(new[k])))
        unknown = sorted(k for k in new if k not in old)
        what = ", ".join(diff) if diff else (f"what its provenance.json does not record: {', '.join(unknown)}" if unknown
                                              else "unknown")
        # Moved, not edited: the same bytes at another path.  The path enters no data stream
        # (moestat.rates.sweep.replicate_streams) and no row, so the rows are this sweep's; the
        # provenance written at the end of the resume records the new path.
        moved = diff == ["scenario_file"] and old.get("scenario_digest") is not None \
            and old.get("scenario_digest") == new.get("scenario_digest")
        if not moved:
            hint = ""
            if "router" in diff and new.get("scenario_file"):
                # a scenario file's curve label: from its ``name`` key, else from its file name, so a
                # renamed copy without ``name`` labels its rows differently
                hint = (f"; the curve label was {', '.join(map(str, old['router']))} and is now "
                        f"{', '.join(map(str, new['router']))} (a scenario file's label is its name key, "
                        f"else its file name): resume with the file at {old.get('scenario_file')}, or start a new --out")
            elif "scenario_file" in diff and "scenario_digest" not in diff and old.get("scenario_digest") is None:
                # moved; edited or not is not known
                hint = (f"; its provenance.json does not record the scenario file's digest, so a file at another path "
                        f"cannot be told from an edited one: resume with the file at {old.get('scenario_file')}, "
                        f"or start a new --out")
            raise ValueError(f"--resume: {out_dir} was written by a different config (differs in: {what}){hint}")
    if res_path.exists():
        # Refused, not quarantined: a row outside the grid, a duplicate or a garbage line means
        # the file was edited or merged by hand, and only its owner knows which copy is right.
        _, audit = audit_results(res_path, experiment)
        msg = audit.message()
        if msg:
            raise ValueError(f"--resume: {msg}; nothing was run -- delete those lines (or start a new --out) and resume again")
        # A row changed with its crc32 recomputed passes the row check; the digest of the rows the
        # summary was computed from does not (as in ``moestat plot``).  Only when the count is the
        # same: a resume of an interrupted or grown sweep adds rows, and deleted rows are recomputed.
        summary_path = out_dir / "summary.json"
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else None
        except (OSError, ValueError):
            summary = None  # unreadable: it is rewritten from the rows at the end of the resume
        rows = summary.get("rows") if isinstance(summary, dict) else None
        if isinstance(rows, dict) and isinstance(rows.get("sha256"), str) and rows.get("count") == audit.rows \
                and rows["sha256"] != audit.digest:
            raise ValueError(f"--resume: {summary_rows_changed(summary_path, rows, audit)}; nothing was run -- "
                             f"{SUMMARY_RECOVERY}, or start a new --out")
    return prev


def analysis_suffix(out: Path, config: RatesConfig | Experiment, resume: bool) -> str:
    """``""`` or ``"_<statistic>"``: the suffix of the summary and figures a run writes.

    A resumed folder whose ``summary.json`` was analysed with another ``--statistic`` keeps that
    analysis: the new one is written beside it (``summary_median.json``, ``convergence_median.png``,
    ``convergence_all_median.png``) instead of over it.  ``summary.json`` is the analysis of the
    statistic the run was first made with; a folder without one (a first run, an interrupted one)
    gets it.  ``config``: a :class:`~moestat.rates.config.RatesConfig` or its resolved
    :class:`~moestat.rates.resolve.Experiment`."""
    if not resume:
        return ""
    try:
        prev = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        before = (prev.get("config") or {}).get("statistic", "mean")
    except (OSError, ValueError, AttributeError):
        return ""
    statistic = (config.config if isinstance(config, Experiment) else config).statistic
    return "" if before == statistic else f"_{statistic}"


def audit_stored_runs(root: str | os.PathLike) -> None:
    """Audit the rows of every run folder under ``root`` (``OUT/rates`` of ``moestat theory``)
    before a resume runs anything.

    A row edited by hand (its ``crc32`` no longer matching), a duplicate or a garbage line is
    refused as :func:`check_resumable` refuses it, naming the file and the line; found while the
    resume runs, it would only fail the one check that reads it.  Each run is read with the
    configuration its ``provenance.json`` records; a run whose record cannot be read, or is not
    that configuration's, is left to its own resume, which says what is wrong with it.

    Raises
    ------
    ValueError
        One line naming the file and the rows.
    """
    root = Path(root)
    if not root.is_dir():
        return
    for run in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        if not (run / "results.csv").is_file():
            continue
        try:
            prev = json.loads((run / "provenance.json").read_text(encoding="utf-8"))
            experiment = Experiment.of(RatesConfig.from_dict(prev["config"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if prev.get("config_hash") != experiment.hash:
            continue
        msg = audit_results(run / "results.csv", experiment)[1].message()
        if msg:
            raise ValueError(f"--resume: {msg}; nothing was run -- delete those lines (or start a new --out) and "
                             "resume again")

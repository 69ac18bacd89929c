"""Grow a recorded rates run to a larger grid or more replicates, fitting only the units it lacks.

A sweep's data and start streams are keyed by ``(seed, n, replicate)``
(:func:`moestat.rates.sweep.replicate_streams`), so a sweep whose grid contains a record's sizes
computes, at those sizes, the record's fits.  When a design grows (more sizes on the same
log-spacing, or more replicates), its record need not be refitted: :func:`grow_run`

1. checks (:func:`check_growable`) that the new configuration differs from the record's
   (``provenance.json``) only in the grid (``n_min``, ``n_max``, ``n_points``) and the replicate
   count, that every recorded size is a size of the new grid, that more replicates keep the recorded
   chunks of replicates whole (a unit's replicates are fitted as one batch) and that the sweep's
   compile decision is the same -- anything else is another sweep and is refused (:class:`GrowError`);
2. copies the record's ``results.csv``, ``extras.csv`` and ``provenance.json`` into the new folder,
   whole or not at all (:func:`copy_and_fit`);
3. fits the missing ``(n, replicate)`` units there with the sweep's own
   :func:`moestat.rates.sweep.run_sweep_rows` (the resume of a grown sweep: the provenance keeps the
   record's run in ``runs`` and now names the grown configuration).

The doors are ``moestat rates ... --grow-from RECORD --out OUT`` (one run, by its own configuration
and the grid given) and ``moestat reproduce KEY --grow-from RECORD --out OUT`` (a catalogue entry's
runs, :func:`moestat.rates.catalogue_grow.grow_entry`).  This module is the engine's: it imports
neither the catalogue nor the theorem registry.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from moestat.estimators.em_driver import sweep_compile
from moestat.faults import EnvironmentFault, as_environment_fault
from moestat.folder_lock import lock_out, unlock_out
from moestat.io import NotARegularFile, refuse_links_in
from moestat.rates.config import RatesConfig
from moestat.rates.resolve import Experiment
from moestat.rates.store import read_run
from moestat.rates.sweep import run_sweep_rows

__all__ = ["GRID_KEYS", "GrowError", "check_folders", "check_growable", "copy_and_fit", "copy_record", "grow_run",
           "read_record", "recorded_config"]

#: The configuration keys a grown sweep may change; every other key that names the numbers must be equal.
GRID_KEYS = frozenset({"n_min", "n_max", "n_points", "reps"})


class GrowError(ValueError):
    """The record cannot be grown into the new design (another sweep, sizes off the new grid, a
    damaged record, a taken destination): one line naming the file or folder."""


def recorded_config(record: Path) -> RatesConfig:
    """The configuration a recorded run folder's ``provenance.json`` names.

    Parameters
    ----------
    record : Path
        A recorded run folder.

    Returns
    -------
    RatesConfig
        The record's configuration (not validated again).

    Raises
    ------
    GrowError
        ``provenance.json`` truncated, not JSON, not UTF-8 or not a moestat run's.
    """
    prov = record / "provenance.json"
    try:
        return RatesConfig.from_dict(json.loads(prov.read_text(encoding="utf-8"))["config"])
    except UnicodeDecodeError:
        raise GrowError(f"{prov}: not UTF-8 text; the record is damaged") from None
    except json.JSONDecodeError as exc:
        raise GrowError(f"{prov}: not valid JSON ({exc.msg}, line {exc.lineno}); the record is truncated or "
                        "damaged") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise GrowError(f"{prov}: not a moestat run's provenance ({exc})") from None


def read_record(record: Path) -> tuple[RatesConfig, pd.DataFrame]:
    """The configuration and rows of a recorded run folder, every row checked as ``moestat rates
    --resume`` checks it.

    Parameters
    ----------
    record : Path
        A recorded run folder (``provenance.json``, ``results.csv``).

    Returns
    -------
    config : RatesConfig
        The record's configuration.
    rows : pandas.DataFrame
        Its ``results.csv`` rows, shape ``(len(ns) * reps * len(router), n_columns)`` for a whole record.

    Raises
    ------
    GrowError
        Anything that is not a whole, unedited record (a link in it, an edited or torn row, a
        damaged file), one line naming the file -- raised before anything is copied.
    """
    try:
        refuse_links_in(record, flag="record")  # a link (dangling or not) would be copied as someone else's file
    except NotARegularFile as exc:
        raise GrowError(str(exc)) from None
    config = recorded_config(record)
    results = record / "results.csv"
    try:
        run = read_run(record, Experiment.of(config))
    except UnicodeDecodeError as exc:
        raise GrowError(f"{results}: not UTF-8 text (byte at offset {exc.start}); the record is damaged") from None
    except ValueError as exc:  # rows edited, duplicated, garbled or outside the grid: the store's own line
        raise GrowError(str(exc).splitlines()[0] if str(exc) else f"{results}: unreadable") from None
    if run.audit.torn:
        raise GrowError(f"{results}: its last line is torn (the run was stopped while writing it); finish the run "
                        "with --resume first, then grow it")
    return config, run.df


def _compile_of(config: RatesConfig) -> object:
    """The sweep's one compile decision (as :func:`moestat.rates.sweep.make_units` takes it)."""
    return sweep_compile(int(config.starts or 1) * config.reps * len(config.router) * sum(config.ns), config.device)


def check_growable(record: Path, config: RatesConfig) -> list[int]:
    """The sizes of ``config``'s grid at which fits must be added to ``record``.

    Parameters
    ----------
    record : Path
        A recorded run folder (``provenance.json``, ``results.csv``).
    config : RatesConfig
        The grown configuration (validated).

    Returns
    -------
    list of int
        The sizes the record lacks, or every size of the new grid when replicates are added.

    Raises
    ------
    GrowError
        ``config`` is another sweep than the record's: it differs beyond :data:`GRID_KEYS`, a
        recorded size is not on the new grid, the record is incomplete, it has fewer replicates,
        more replicates would split a recorded chunk, or the compile decision differs.
    """
    old, rows = read_record(record)
    a, b = old.result_fields(), config.result_fields()
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in GRID_KEYS)
    if differ:
        raise GrowError(f"{record}: the new configuration differs from the record's beyond the grid "
                        f"(in: {', '.join(differ)})")
    recorded = sorted(int(n) for n in rows["n"].unique())
    off = [n for n in recorded if n not in config.ns]
    if off:
        raise GrowError(f"{record}: recorded sizes {off} are not sizes of the new grid {config.ns}")
    if recorded != sorted(old.ns) or len(rows) != len(old.ns) * old.reps * len(old.router):
        raise GrowError(f"{record}: its rows hold sizes {recorded} ({len(rows)} rows), its configuration "
                        f"{old.ns} x {old.reps} replicates: an incomplete record")
    if config.reps < old.reps:
        raise GrowError(f"{record}: {config.reps} replicates is fewer than the record's {old.reps}")
    chunk = old.chunk or old.reps
    if config.reps > old.reps and (not old.chunk or old.reps % chunk):
        # a unit's replicates are fitted as one batch; a recorded partial chunk would be another batch here
        raise GrowError(f"{record}: its {old.reps} replicates do not fill whole chunks of {chunk}, so more "
                        "replicates would change the recorded units")
    if _compile_of(old) != _compile_of(config):
        raise GrowError(f"{record}: the grown sweep's compile decision ({_compile_of(config)!r}) differs from the "
                        f"record's ({_compile_of(old)!r}), so its fits could round differently")
    return [n for n in config.ns if n not in recorded or config.reps > old.reps]


def check_folders(src: Path, dst: Path, continued_by: str) -> None:
    """Refuse a source that is not a recorded run folder, and a destination that exists or cannot be made.

    Parameters
    ----------
    src, dst : Path
        The recorded run folder and the grown run's new folder.
    continued_by : str
        The command that continues a stopped growth (named in the refusal of an existing ``dst``).

    Raises
    ------
    GrowError
        One line naming the folder.
    """
    if not (src / "provenance.json").is_file() or not (src / "results.csv").is_file():
        raise GrowError(f"{src}: not a recorded run folder (no provenance.json or results.csv)")
    if os.path.lexists(dst):  # a link, dangling or not, is there too
        raise GrowError(f"{dst} exists; choose a new folder (a stopped growth is continued by {continued_by})")
    parent = dst.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise GrowError(f"{parent} is not a writable folder; choose a new folder for {dst.name}")


def copy_record(src: Path, dst: Path) -> None:
    """Copy the record ``src`` into the new folder ``dst`` whole or not at all.

    ``dst`` is claimed first (``mkdir``, which only one of two growths into it wins); the files are
    copied into a temporary folder beside it, which replaces the claimed (empty) folder by a rename
    once complete, so a full or read-only disk leaves no torn copy: the temporary folder and the
    claim are removed and the error raised.

    Raises
    ------
    GrowError
        ``dst`` exists (another growth claimed it).
    moestat.faults.EnvironmentFault
        The copy failed on the machine (full or read-only disk, permissions): nothing was copied.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        dst.mkdir()
    except FileExistsError:
        raise GrowError(f"{dst} exists; another growth is writing it, or choose a new folder") from None
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".copying", dir=dst.parent))
    try:
        for name in ("results.csv", "extras.csv", "provenance.json"):
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        os.replace(tmp, dst)  # over the empty folder this growth claimed
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            dst.rmdir()
        except OSError:
            pass
        if isinstance(exc, OSError) and as_environment_fault(exc) is None:  # read-only, permissions: the machine's
            raise EnvironmentFault(f"cannot copy {src} into {dst.parent}: {exc.strerror or exc}; nothing was copied") from exc
        raise


def copy_and_fit(src: Path, dst: Path, config: RatesConfig, missing: list[int]) -> list[int]:
    """Copy the record ``src`` into ``dst`` (:func:`copy_record`), then fit the units it lacks there.

    The fits hold ``dst``'s lock, as ``moestat rates`` does, so a ``--resume`` started meanwhile is
    refused.

    Parameters
    ----------
    src, dst : Path
        The checked record (:func:`check_growable`) and its new folder (:func:`check_folders`).
    config : RatesConfig
        The grown configuration.
    missing : list of int
        The sizes :func:`check_growable` returned (passed through).

    Returns
    -------
    list of int
        ``missing``.
    """
    copy_record(src, dst)
    lock_out(dst, "rates")
    try:
        run_sweep_rows(config, dst, resume=True)  # the rows are read back (and audited) as it returns
    finally:
        unlock_out(dst)
    return missing


def grow_run(record: Path, out: Path, config: RatesConfig | None = None, *, n_jobs: int = 1,
             **grid: int | None) -> list[int]:
    """Grow the recorded run folder ``record`` (any sweep) into the new folder ``out``.

    Parameters
    ----------
    record : Path
        The recorded run folder (``provenance.json``, ``results.csv``, ``extras.csv``).
    out : Path
        The grown run's folder; must not exist.
    config : RatesConfig, optional
        The grown configuration.  When ``None``, the record's own configuration with the ``grid``
        keys replaced and ``n_jobs``.
    n_jobs : int
        Parallel workers (used when ``config`` is ``None``).
    **grid : int or None
        With ``config=None``: new values of :data:`GRID_KEYS` (``n_min``, ``n_max``, ``n_points``,
        ``reps``); ``None`` keeps the record's.

    Returns
    -------
    list of int
        The sizes at which fits were added.

    Raises
    ------
    GrowError
        Checked before anything is copied or fitted: a damaged record, another sweep
        (:func:`check_growable`), an existing ``out``, an impossible grid.
    """
    bad = sorted(set(grid) - GRID_KEYS)
    if bad:
        raise GrowError(f"only {', '.join(sorted(GRID_KEYS))} may change, not {', '.join(bad)}")
    if config is not None and any(v is not None for v in grid.values()):
        raise GrowError("give the grown configuration or the grid keys, not both")
    check_folders(record, out, f"moestat rates with the grown options, --resume --out {out}")
    if config is None:
        old = recorded_config(record)
        try:
            config = old.replace(n_jobs=n_jobs, **{k: v for k, v in grid.items() if v is not None}).validate()
        except ValueError as exc:  # an impossible grid (n_min > n_max, 2 points): the one-line error
            raise GrowError(str(exc).splitlines()[0]) from None
    return copy_and_fit(record, out, config, check_growable(record, config))

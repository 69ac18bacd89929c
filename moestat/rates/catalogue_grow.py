"""Grow a catalogue entry's recorded runs to the entry's (larger) design: the catalogue side of
:mod:`moestat.rates.grow`.

The entry's full-design configurations (:func:`moestat.rates.catalogue.plan`) are the grown ones;
each recorded run folder ``RECORD/<run label>/`` is checked against its configuration
(:func:`moestat.rates.grow.check_growable`) and ``OUT/<run label>/`` must not exist -- all of them
before anything is copied or fitted -- then each is copied and its missing units fitted.
``moestat reproduce KEY --grow-from RECORD --out OUT`` does this and then writes the report as
``--resume`` would.
"""

from __future__ import annotations

from pathlib import Path

from moestat.rates.catalogue import plan
from moestat.rates.config import RatesConfig
from moestat.rates.grow import GrowError, check_folders, check_growable, copy_and_fit
from moestat.theorems.registry import Run, entry

__all__ = ["check_entry_growable", "grow_entry"]


def check_entry_growable(key: str, record: Path, out: Path,
                         runs: list[tuple[Run, RatesConfig]]) -> list[tuple[Path, Path, RatesConfig, list[int]]]:
    """Check that every run of entry ``key`` recorded under ``record`` grows into ``out``.

    Parameters
    ----------
    key : str
        The catalogue entry (named in the refusals).
    record : Path
        The entry's recorded folder, holding one ``<run label>/`` folder per run.
    out : Path
        The new folder; ``out/<run label>/`` must not exist.
    runs : list of (moestat.theorems.registry.Run, RatesConfig)
        The entry's grown runs (:func:`moestat.rates.catalogue.plan`).

    Returns
    -------
    list of (Path, Path, RatesConfig, list of int)
        Per run: the recorded folder, its new folder, the grown configuration and the sizes to fit.

    Raises
    ------
    GrowError
        The first run that cannot be grown (one line naming its folder).
    """
    if not record.is_dir():
        raise GrowError(f"{record}: no such folder")
    todo = []
    for run, config in runs:
        src, dst = record / run.label, out / run.label
        check_folders(src, dst, f"moestat reproduce {key} --resume --out {out}")
        todo.append((src, dst, config, check_growable(src, config)))
    return todo


def grow_entry(key: str, record: Path, out: Path, *, n_jobs: int = 1, quiet: bool = True) -> dict[str, list[int]]:
    """Copy each run of entry ``key`` recorded under ``record`` into ``out`` and fit the units it lacks.

    Every run is checked (:func:`check_entry_growable`) before anything is copied or fitted.  The
    summary, table and figures are written afterwards by ``moestat reproduce KEY --resume --out OUT``
    (or :func:`moestat.rates.catalogue.reproduce` with ``resume=True``).

    Parameters
    ----------
    key : str
        The catalogue entry.
    record : Path
        The entry's recorded folder (``records/catalogue/KEY``), one ``<run label>/`` per run.
    out : Path
        The new folder for the grown record.
    n_jobs : int
        Parallel workers.
    quiet : bool
        No progress bar.

    Returns
    -------
    dict of str to list of int
        ``{run label: the sizes at which fits were added}``.

    Raises
    ------
    GrowError
        An unknown entry, or a run that cannot be grown (:func:`moestat.rates.grow.check_growable`).
    """
    try:
        entry(key)
    except ValueError as exc:  # an unknown key: the command line's one-line error
        raise GrowError(str(exc)) from None
    todo = check_entry_growable(key, record, out, plan(key, n_jobs=n_jobs, quiet=quiet))
    return {dst.name: copy_and_fit(src, dst, config, missing) for src, dst, config, missing in todo}

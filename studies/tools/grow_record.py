"""Grow a recorded catalogue run to its entry's larger grid, fitting only the sizes it lacks.

A sweep's data and start streams are keyed by ``(seed, n, replicate)``
(:func:`moestat.rates.sweep.replicate_streams`), so a sweep whose grid contains a record's sizes
computes, at those sizes, the record's fits.  When an entry's grid grows (more sizes on the same
log-spacing), its record need not be refitted: this script

1. checks that the entry's configuration differs from the record's (``provenance.json``) only in the
   grid (``n_min``, ``n_max``, ``n_points``) and the replicate count, that every recorded size is a
   size of the new grid, that more replicates keep the recorded chunks of replicates whole (a unit's
   replicates are fitted as one batch) and that the sweep's compile decision is the same -- anything
   else is another sweep and is refused;
2. copies the record's ``results.csv``, ``extras.csv`` and ``provenance.json`` into ``OUT/<label>/``;
3. fits the missing ``(n, replicate)`` units there with the sweep's own
   :func:`moestat.rates.sweep.run_sweep_rows` (the resume of a grown sweep: the provenance keeps the
   record's run in ``runs`` and now names the grown configuration).

``moestat reproduce KEY --resume --out OUT`` then writes the summary, table and figures from the rows
(its resume guard now accepts the folder: the configuration is the entry's).

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python studies/tools/grow_record.py gmoe-over4 \\
        records/catalogue/gmoe-over4 OUT --n-jobs 2
    OMP_NUM_THREADS=1 python -m moestat reproduce gmoe-over4 --resume --n-jobs 2 --out OUT

A run that is not a catalogue entry's (a certificate, say: ``moestat rates`` with ``--extra-starts``)
is grown with ``--run``: the record's own configuration with the grid and replicates given, written to
``OUT`` (one run folder); ``moestat rates`` with the same options and ``--resume --out OUT`` then
writes its summary::

    OMP_NUM_THREADS=1 python studies/tools/grow_record.py --run RECORD/softmax OUT/softmax \\
        --n-min 1000 --n-points 6 --reps 40 --n-jobs 2
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

#: The configuration keys a grown sweep may change; every other key that names the numbers must be equal.
GRID_KEYS = frozenset({"n_min", "n_max", "n_points", "reps"})


class GrowError(ValueError):
    """The record cannot be grown into the entry's grid (another sweep, or sizes off the new grid)."""


def check_growable(record: Path, config) -> list[int]:
    """The sizes of ``config``'s grid that ``record`` lacks; :class:`GrowError` when it is another sweep.

    Parameters
    ----------
    record : Path
        A recorded run folder (``provenance.json``, ``results.csv``).
    config : moestat.rates.config.RatesConfig
        The entry's (grown) configuration.
    """
    old, rows = _read_record(record)
    a, b = old.result_fields(), config.result_fields()
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in GRID_KEYS)
    if differ:
        raise GrowError(f"{record}: the entry's configuration differs from the record's beyond the grid (in: {', '.join(differ)})")
    from moestat.estimators.em_driver import sweep_compile

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

    def compile_of(c) -> object:  # the sweep's one compile decision (moestat.rates.sweep.make_units)
        return sweep_compile(int(c.starts or 1) * c.reps * len(c.router) * sum(c.ns), c.device)

    if compile_of(old) != compile_of(config):
        raise GrowError(f"{record}: the grown sweep's compile decision ({compile_of(config)!r}) differs from the "
                        f"record's ({compile_of(old)!r}), so its fits could round differently")
    return [n for n in config.ns if n not in recorded or config.reps > old.reps]


def grow(key: str, record_dir: Path, out: Path, n_jobs: int) -> dict:
    """Copy each run of entry ``key`` recorded under ``record_dir`` into ``out`` and fit the sizes it lacks.

    Every run is checked (:func:`check_growable`) and ``out`` must not hold it yet before anything is
    copied or fitted.  Returns ``{run label: the sizes fitted}``.
    """
    from moestat.rates.catalogue import entry, plan

    try:
        entry(key)
    except ValueError as exc:  # an unknown key: the command line's one-line error
        raise GrowError(str(exc)) from None
    runs = plan(key, n_jobs=n_jobs, quiet=True)
    todo = []
    for run, config in runs:
        src, dst = record_dir / run.label, out / run.label
        _check_folders(src, dst, f"moestat reproduce {key} --resume --out {out}")
        todo.append((src, dst, config, check_growable(src, config)))
    return {dst.name: _copy_and_fit(src, dst, config, missing) for src, dst, config, missing in todo}


def _recorded_config(record: Path):
    """The :class:`~moestat.rates.config.RatesConfig` a recorded run folder's ``provenance.json``
    names; :class:`GrowError` naming the file when it cannot be read (truncated, not JSON, not UTF-8)."""
    from moestat.rates.config import RatesConfig

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


def _read_record(record: Path):
    """``(configuration, rows)`` of a recorded run folder, every row checked as ``moestat rates
    --resume`` checks it; :class:`GrowError` (one line naming the file) for anything that is not
    a whole, unedited record -- before anything is copied, so a refused growth leaves nothing.
    """
    from moestat.io import NotARegularFile, refuse_links_in
    from moestat.rates.resolve import Experiment
    from moestat.rates.store import read_run

    try:
        refuse_links_in(record, flag="record")  # a link (dangling or not) would be copied as someone else's file
    except NotARegularFile as exc:
        raise GrowError(str(exc)) from None
    config = _recorded_config(record)
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


def _check_folders(src: Path, dst: Path, continued_by: str) -> None:
    """Refuse a source that is not a recorded run folder, and a destination that exists."""
    if not (src / "provenance.json").is_file() or not (src / "results.csv").is_file():
        raise GrowError(f"{src}: not a recorded run folder (no provenance.json or results.csv)")
    if os.path.lexists(dst):  # a link, dangling or not, is there too
        raise GrowError(f"{dst} exists; choose a new folder (a stopped growth is continued by {continued_by})")
    parent = dst.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise GrowError(f"{parent} is not a writable folder; choose a new folder for {dst.name}")


def _copy_and_fit(src: Path, dst: Path, config, missing: list[int]) -> list[int]:
    """Copy the record into ``dst`` whole or not at all, then fit the sizes it lacks there.

    ``dst`` is claimed first (``mkdir``, which only one of two growths into it wins); the files
    are copied into a temporary folder beside it, which replaces the claimed (empty) folder by a
    rename once complete, so a full or read-only disk leaves no torn copy: the temporary folder
    and the claim are removed and the error raised (an environment fault: one line, exit 1).  The fits hold ``dst``'s lock, as ``moestat
    rates`` does, so a ``--resume`` started meanwhile is refused.
    """
    from moestat.faults import EnvironmentFault, as_environment_fault
    from moestat.folder_lock import lock_out, unlock_out
    from moestat.rates.sweep import run_sweep_rows

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
    lock_out(dst, "rates")
    try:
        run_sweep_rows(config, dst, resume=True)  # the rows are read back (and audited) as it returns
    finally:
        unlock_out(dst)
    return missing


def grow_run(src: Path, dst: Path, n_jobs: int, **grid) -> list[int]:
    """Grow the recorded run folder ``src`` (any sweep, not only a catalogue entry's) into ``dst``.

    Its own configuration (``provenance.json``) with the ``grid`` keys replaced (of :data:`GRID_KEYS`;
    ``None`` keeps the record's) and ``n_jobs``; checked by :func:`check_growable` before anything is
    copied or fitted.  Returns the sizes at which fits were added.
    """
    bad = sorted(set(grid) - GRID_KEYS)
    if bad:
        raise GrowError(f"only {', '.join(sorted(GRID_KEYS))} may change, not {', '.join(bad)}")
    _check_folders(src, dst, f"moestat rates with the grown options, --resume --out {dst}")
    old = _recorded_config(src)
    try:
        config = old.replace(n_jobs=n_jobs, **{k: v for k, v in grid.items() if v is not None}).validate()
    except ValueError as exc:  # an impossible grid (n_min > n_max, 2 points): the one-line error
        raise GrowError(str(exc)) from None
    return _copy_and_fit(src, dst, config, check_growable(src, config))


def main(argv: list[str] | None = None) -> int:
    """Grow a record (see the module's docstring); exit 0, 2 for bad input, 1 for a fault of the
    machine (a full disk: one line) or a bug (a traceback), as the doors end."""
    from moestat.cli.common import run_main

    return run_main(_main, argv, prog="grow_record.py",
                    on_interrupt="a copy not finished was removed; a growth stopped while fitting is continued by "
                                 "--resume on the new folder")


def _main(argv: list[str] | None = None) -> int:
    from moestat.cli.common import ArgumentParser, n_jobs_int

    ap = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("key", nargs="?", help="catalogue entry (not with --run)")
    ap.add_argument("record", type=Path, help="the entry's recorded folder (holding <run label>/); with --run, "
                                              "the recorded run folder itself")
    ap.add_argument("out", type=Path, help="new folder for the grown record (with --run: for the grown run)")
    ap.add_argument("--run", action="store_true", help="grow one run folder by its own configuration and the "
                                                       "options below, not a catalogue entry")
    ap.add_argument("--n-min", type=int, help="with --run: the new smallest size")
    ap.add_argument("--n-max", type=int, help="with --run: the new largest size")
    ap.add_argument("--n-points", type=int, help="with --run: the new number of sizes")
    ap.add_argument("--reps", type=int, help="with --run: the new number of replicates")
    # the rates door's bound: a few workers per usable core, under the process limit (100 000 hung)
    ap.add_argument("--n-jobs", type=n_jobs_int, default=1, help="parallel workers (default 1)")
    a = ap.parse_args(argv)
    grid = {"n_min": a.n_min, "n_max": a.n_max, "n_points": a.n_points, "reps": a.reps}
    if a.run == (a.key is not None):
        ap.error("give a catalogue entry KEY, or --run without one")
    if not a.run and any(v is not None for v in grid.values()):
        ap.error("--n-min, --n-max, --n-points and --reps are for --run (an entry grows to its own design)")
    if not a.record.is_dir():
        ap.error(f"{a.record}: no such folder")
    try:
        done = ({a.out.name: grow_run(a.record, a.out, a.n_jobs, **grid)} if a.run
                else grow(a.key, a.record, a.out, a.n_jobs))
    except GrowError as err:
        ap.error(str(err))
    for label, sizes in done.items():
        print(f"{label}: fitted sizes {sizes}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's moestat
    sys.exit(main())

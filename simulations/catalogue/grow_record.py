"""Grow a recorded catalogue run to its entry's larger grid, fitting only the sizes it lacks.

A sweep's data and start streams are keyed by ``(seed, n, replicate)``
(:func:`moestat.rates.sweep.replicate_streams`), so a sweep whose grid contains a record's sizes
computes, at those sizes, the record's fits.  When an entry's grid grows (more sizes on the same
log-spacing), its record need not be refitted: this script

1. checks that the entry's configuration differs from the record's (``provenance.json``) only in the
   grid (``n_max``, ``n_points``) and that every recorded size is a size of the new grid -- anything
   else is another sweep and is refused;
2. copies the record's ``results.csv``, ``extras.csv`` and ``provenance.json`` into ``OUT/<label>/``;
3. fits the missing ``(n, replicate)`` units there with the sweep's own
   :func:`moestat.rates.sweep.run_sweep_rows` (the resume of a grown sweep: the provenance keeps the
   record's run in ``runs`` and now names the grown configuration).

``moestat reproduce KEY --resume --out OUT`` then writes the summary, table and figures from the rows
(its resume guard now accepts the folder: the configuration is the entry's).

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python simulations/catalogue/grow_record.py gmoe-over4 \\
        simulations/catalogue/gmoe-over4 OUT --n-jobs 2
    OMP_NUM_THREADS=1 python -m moestat reproduce gmoe-over4 --resume --n-jobs 2 --out OUT
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

#: The configuration keys a grown grid may change; every other key that names the numbers must be equal.
GRID_KEYS = frozenset({"n_max", "n_points"})


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
    import pandas as pd

    from moestat.rates.config import RatesConfig

    old = RatesConfig.from_dict(json.loads((record / "provenance.json").read_text(encoding="utf-8"))["config"])
    a, b = old.result_fields(), config.result_fields()
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in GRID_KEYS)
    if differ:
        raise GrowError(f"{record}: the entry's configuration differs from the record's beyond the grid (in: {', '.join(differ)})")
    recorded = sorted(int(n) for n in pd.read_csv(record / "results.csv")["n"].unique())
    off = [n for n in recorded if n not in config.ns]
    if off:
        raise GrowError(f"{record}: recorded sizes {off} are not sizes of the new grid {config.ns}")
    if recorded != sorted(old.ns):
        raise GrowError(f"{record}: its rows hold sizes {recorded}, its configuration {old.ns}: an incomplete record")
    return [n for n in config.ns if n not in recorded]


def grow(key: str, record_dir: Path, out: Path, n_jobs: int) -> dict:
    """Copy each run of entry ``key`` recorded under ``record_dir`` into ``out`` and fit the sizes it lacks.

    Every run is checked (:func:`check_growable`) and ``out`` must not hold it yet before anything is
    copied or fitted.  Returns ``{run label: the sizes fitted}``.
    """
    from moestat.rates.catalogue import entry, plan
    from moestat.rates.sweep import run_sweep_rows

    try:
        entry(key)
    except ValueError as exc:  # an unknown key: the command line's one-line error
        raise GrowError(str(exc)) from None
    runs = plan(key, n_jobs=n_jobs, quiet=True)
    todo = []
    for run, config in runs:
        src, dst = record_dir / run.label, out / run.label
        if not (src / "provenance.json").is_file() or not (src / "results.csv").is_file():
            raise GrowError(f"{src}: not a recorded run folder (no provenance.json or results.csv)")
        if dst.exists():
            raise GrowError(f"{dst} exists; choose a new OUT (a stopped growth is continued by moestat reproduce "
                            f"{key} --resume --out {out})")
        todo.append((src, dst, config, check_growable(src, config)))
    done = {}
    for src, dst, config, missing in todo:
        dst.mkdir(parents=True)
        for name in ("results.csv", "extras.csv", "provenance.json"):
            if (src / name).is_file():
                shutil.copy2(src / name, dst / name)
        run_sweep_rows(config, dst, resume=True, read=False)
        done[dst.name] = missing
    return done


def main(argv: list[str] | None = None) -> int:
    from moestat.cli.common import ArgumentParser

    ap = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("key", help="catalogue entry")
    ap.add_argument("record", type=Path, help="the entry's recorded folder (holding <run label>/)")
    ap.add_argument("out", type=Path, help="new folder for the grown record")
    ap.add_argument("--n-jobs", type=int, default=1)
    a = ap.parse_args(argv)
    if not a.record.is_dir():
        ap.error(f"{a.record}: no such folder")
    if a.n_jobs < 1:
        ap.error(f"--n-jobs must be >= 1, got {a.n_jobs}")
    try:
        done = grow(a.key, a.record, a.out, a.n_jobs)
    except GrowError as err:
        ap.error(str(err))
    for label, sizes in done.items():
        print(f"{label}: fitted sizes {sizes}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's moestat
    sys.exit(main())

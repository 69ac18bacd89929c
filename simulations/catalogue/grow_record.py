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

import argparse
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
    """Copy each run of entry ``key`` recorded under ``record_dir`` into ``out`` and fit the sizes it lacks."""
    from moestat.rates.catalogue import plan
    from moestat.rates.sweep import run_sweep_rows

    done = {}
    for run, config in plan(key, n_jobs=n_jobs, quiet=True):
        src, dst = record_dir / run.label, out / run.label
        missing = check_growable(src, config)
        if dst.exists():
            raise GrowError(f"{dst} exists; choose a new OUT (a stopped growth is continued by moestat reproduce "
                            f"{key} --resume --out {out})")
        dst.mkdir(parents=True)
        for name in ("results.csv", "extras.csv", "provenance.json"):
            if (src / name).is_file():
                shutil.copy2(src / name, dst / name)
        run_sweep_rows(config, dst, resume=True, read=False)
        done[run.label] = missing
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("key", help="catalogue entry")
    p.add_argument("record", type=Path, help="the entry's recorded folder (holding <run label>/)")
    p.add_argument("out", type=Path, help="new folder for the grown record")
    p.add_argument("--n-jobs", type=int, default=1)
    ns = p.parse_args(argv)
    try:
        done = grow(ns.key, ns.record, ns.out, ns.n_jobs)
    except GrowError as exc:
        print(f"grow_record.py: error: {exc}", file=sys.stderr)
        return 2
    for label, sizes in done.items():
        print(f"{label}: fitted sizes {sizes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Grow a recorded catalogue run to its entry's larger grid, fitting only the sizes it lacks.

A thin wrapper kept for the commands written in the records' histories: the logic is the package's
(:func:`moestat.rates.grow.grow_run`, :func:`moestat.rates.catalogue_grow.grow_entry`) and the
documented doors are ``moestat reproduce KEY --grow-from RECORD --out OUT`` and
``moestat rates ... --grow-from RECORD --out OUT`` (docs/guide/catalogue.rst, "Growing a record").

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python studies/tools/grow_record.py gmoe-over4 \\
        records/catalogue/gmoe-over4 OUT --n-jobs 2
    OMP_NUM_THREADS=1 python -m moestat reproduce gmoe-over4 --resume --n-jobs 2 --out OUT

A run that is not a catalogue entry's is grown with ``--run``: the record's own configuration with the
grid and replicates given, written to ``OUT`` (one run folder)::

    OMP_NUM_THREADS=1 python studies/tools/grow_record.py --run RECORD/softmax OUT/softmax \\
        --n-min 1000 --n-points 6 --reps 40 --n-jobs 2
"""

from __future__ import annotations

import sys
from pathlib import Path


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
    from moestat.rates.catalogue_grow import grow_entry
    from moestat.rates.grow import GrowError, grow_run

    try:
        done = ({a.out.name: grow_run(a.record, a.out, n_jobs=a.n_jobs, **grid)} if a.run
                else grow_entry(a.key, a.record, a.out, n_jobs=a.n_jobs))
    except GrowError as err:
        ap.error(str(err))
    for label, sizes in done.items():
        print(f"{label}: fitted sizes {sizes}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's moestat
    sys.exit(main())

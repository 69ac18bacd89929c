"""``moestat plot DIR``: argument parsing for :func:`moestat.rates.redraw.prepare_redraw` (the run
folder is read and checked: bad input, exit 2) and :func:`~moestat.rates.redraw.draw_redraw` (the
work: any error there is an internal one, exit 1)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from moestat.cli.common import ArgumentParser, NOTHING_KEPT, usage_errors
from moestat.rates.redraw import draw_redraw, prepare_redraw
from moestat.theorems.file_theorems import scenario_theorems

# The figures are written when the door finishes (it has no --resume): a fault or Ctrl-C leaves nothing of them.
ON_INTERRUPT = NOTHING_KEPT

__all__ = ["main"]

EXAMPLES = """\
examples:
  moestat plot runs/fig1a                  # writes runs/fig1a/convergence_replot.pdf/.png
  moestat plot runs/fig1a --overwrite      # writes convergence.pdf/.png over the sweep's own figures
  moestat plot runs/fig1b --losses voronoi,param_single,param_multi --name fig1b_params
  moestat plot runs/exact --routers perturbed
"""


def _list(text: str) -> list[str]:
    parts = [t.strip() for t in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"expected a comma list of names, got {text!r}")
    return parts


#: Characters the figure's atomic write adds to ``--name`` in its temporary file's name
#: (``.NAME.png.XXXXXXXX.png``, :func:`moestat.io.atomic_savefig`).
TMP_NAME_EXTRA = len("..png.XXXXXXXX.png")


def check_name_length(name: str, run_dir: str) -> None:
    """Refuse a ``--name`` whose files the file system cannot hold (its ``NAME_MAX``, usually 255)."""
    import os

    try:
        name_max = os.pathconf(run_dir if os.path.isdir(run_dir) else ".", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        name_max = 255
    if len(name.encode()) + TMP_NAME_EXTRA > name_max:
        raise ValueError(f"--name is {len(name.encode())} bytes long; file names here are at most {name_max} bytes and "
                         f"the figure's temporary file adds {TMP_NAME_EXTRA}: use at most {name_max - TMP_NAME_EXTRA}")


def build_parser() -> ArgumentParser:
    """The argument parser of ``moestat plot``."""
    p = ArgumentParser(prog="moestat plot", description="Re-draw a rates run's convergence figure from results.csv, with "
                       "the configuration stored with the results (provenance.json).", epilog=EXAMPLES)
    p.add_argument("run_dir", metavar="DIR", help="output folder of moestat rates")
    p.add_argument("--losses", type=_list, default=None, help="comma list of losses (voronoi, voronoi_direction, param_single, "
                   "param_multi, mass, regression_l2, or the losses a scenario file declares; default: the run's "
                   "headline -- the file's declared losses, else voronoi)")
    p.add_argument("--routers", type=_list, default=None, help="comma list of routers, aliases accepted (default: all in the run)")
    p.add_argument("--name", default=None, help="file stem of the figure (default convergence_replot, beside the sweep's "
                   "own figure; convergence with --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace existing figures of that name")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat plot``."""
    args = build_parser().parse_args(argv)
    with usage_errors():
        if args.name is not None:
            check_name_length(args.name, args.run_dir)
        plan = prepare_redraw(args.run_dir, losses=args.losses, routers=args.routers, name=args.name,
                              overwrite=args.overwrite, theorems=scenario_theorems)
    for note in plan.notes:
        sys.stderr.write(f"moestat plot: note: {note}\n")
    paths = draw_redraw(plan)
    print("wrote " + ", ".join(str(x) for x in paths))
    return 0


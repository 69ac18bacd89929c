"""``moestat reproduce``: argument parsing for the rate catalogue (:mod:`moestat.rates.catalogue`).

``--list`` prints every entry with its paper, predictions and status; ``KEY [--quick] --out DIR``
validates the entry's runs, ``--out`` and (with ``--resume``) each run's folder inside
:func:`~moestat.cli.common.usage_errors` (bad input: one line, exit 2, nothing written), then runs
them with :func:`~moestat.rates.catalogue.reproduce` (an exception there is an internal error).

``KEY --grow-from RECORD --out OUT`` grows the entry's recorded folder to the entry's (larger) design:
every run is checked first (:func:`moestat.rates.catalogue_grow.check_entry_growable`: another sweep,
a damaged record or an existing folder is one line, exit 2, nothing written), the record's rows are
copied, only the missing ``(n, replicate)`` units fitted (:func:`moestat.rates.grow.copy_and_fit`),
and the report written as ``--resume`` writes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from moestat.cli.common import ArgumentParser, add_n_jobs, add_out, add_quiet, add_resume, prepare_out, usage_errors
from moestat.rates import catalogue, catalogue_protocol, catalogue_views
from moestat.rates.catalogue_grow import check_entry_growable
from moestat.rates.grow import copy_and_fit
from moestat.rates.store import check_resumable

__all__ = ["build_parser", "main"]

EXAMPLES = """\
examples:
  moestat reproduce --list
  moestat reproduce cosine-exact --quick --out runs/cosine-exact-quick
  moestat reproduce lse-ffn-vs-linear --n-jobs 2 --out runs/lse
  moestat reproduce gmoe-over3 --out runs/gmoe-over3 --resume
  moestat reproduce cosine-over --protocol --out runs/cosine-over-protocol
  moestat reproduce gmoe-over4 --grow-from records/archive/catalogue/gmoe-over4/grid20k --n-jobs 2 --out runs/over4
"""


def build_parser() -> ArgumentParser:
    """The argument parser of ``moestat reproduce``."""
    p = ArgumentParser(prog="moestat reproduce", description="Reproduce a published MoE parameter-rate theorem from "
                       "the catalogue: the paper's model and estimator through the rates pipeline, measured slopes "
                       "beside the predicted exponents, with categories.", epilog=EXAMPLES)
    p.add_argument("key", nargs="?", help="catalogue entry (see --list)")
    p.add_argument("--list", action="store_true", help="list the entries with their papers, predictions and status")
    p.add_argument("--quick", action="store_true", help="the reduced grid (at most 5 minutes on 2 cores) instead of "
                   "the paper's design")
    p.add_argument("--protocol", action="store_true", help="the catalogue's one protocol (sizes from the truth's "
                   "pre-flight n_ok, adaptive replicates, median; moestat.rates.catalogue_protocol) instead of the "
                   "entry's own full design")
    p.add_argument("--grow-from", metavar="RECORD", type=Path,
                   help="grow this recorded folder of the entry (one <run label>/ per run) to the entry's design: its "
                        "rows are copied and only the missing (n, replicate) units fitted; --out must be new; "
                        "default none")
    add_n_jobs(p)
    add_out(p, "reproduce")
    add_resume(p)
    add_quiet(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat reproduce``."""
    args = build_parser().parse_args(argv)
    with usage_errors():
        if args.list:
            if args.key:
                raise ValueError("give either --list or an entry KEY, not both")
            print(catalogue_views.format_list())
            return 0
        if not args.key:
            raise ValueError("name an entry (moestat reproduce --list shows them) or pass --list")
        if args.protocol and args.quick:
            raise ValueError("give --protocol or --quick, not both")
        grow = args.grow_from is not None
        if grow and (args.quick or args.protocol or args.resume):
            raise ValueError("--grow-from grows a record to the entry's own full design into a new --out: not with "
                             "--quick, --protocol or --resume (a stopped growth is continued by --resume alone)")
        if args.protocol:
            runs = catalogue_protocol.protocol_plan(args.key, n_jobs=args.n_jobs, quiet=args.quiet)
        else:
            runs = catalogue.plan(args.key, quick=args.quick, n_jobs=args.n_jobs, quiet=args.quiet)
        out = Path(args.out)
        # every run checked before anything is copied: another sweep or a damaged record writes nothing
        todo = check_entry_growable(args.key, args.grow_from, out, runs) if grow else []
        for run, cfg in runs:
            if (out / run.label).is_dir():
                check_resumable(out / run.label, cfg, args.resume)
        prepare_out(out, args.resume)
    for src, dst, cfg, missing in todo:
        copy_and_fit(src, dst, cfg, missing)
        if not args.quiet:
            print(f"{dst.name}: copied from {src}, fitted sizes {missing}")
    if args.protocol:
        report = catalogue_protocol.reproduce_protocol(args.key, out, resume=args.resume, runs=runs)
    else:
        report = catalogue.reproduce(args.key, out, quick=args.quick, resume=args.resume or grow, runs=runs)
    print(catalogue.format_report(report))
    print(f"wrote {out / 'catalogue.json'} and one folder per run")
    return 0

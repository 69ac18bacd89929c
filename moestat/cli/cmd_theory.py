"""``moestat theory``: argument parsing for :func:`moestat.theorems.checks.run_checks`.

Exit status: 0 when every check passed; 1 when any check failed, was inconclusive or raised; 3
when none failed but some were skipped (``--allow-skips`` turns that into 0); 2 for bad arguments.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Sequence

from moestat.cli.common import ArgumentParser, add_n_jobs, add_out, add_quiet, add_resume, add_seed, positive_int, prepare_out, usage_errors
from moestat.io import check_run_config, read_run_config, write_run_config
from moestat.rates.store import audit_stored_runs
from moestat.theorems.checks.runner import CHECK_NAMES, MODULES, exit_code, merge_reports, run_checks, totals_line, write_report
from moestat.theorems.checks.grids import GRIDS, check_grid_memory

__all__ = ["build_parser", "main"]

#: Smallest --reps: the rate checks run moestat.rates, whose configuration needs two replicates per
#: n (the replicate bootstrap of the slope interval resamples replicates; see RatesConfig).
MIN_REPS = 2


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="moestat theory", description="Check the theorems of Nguyen et al. (2024) on cosine routers (and Theorem 1 of the Soft MoE implicit-bias paper, 2024) against measurements.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="mode", action="store_const", const="quick", help="CI-sized run (default)")
    g.add_argument("--full", dest="mode", action="store_const", const="full", help="paper-scale run (long)")
    p.set_defaults(mode="quick")
    p.add_argument("--only", nargs="+", metavar="NAME", help="check or module names to run (default: all, see --list)")
    add_out(p, "theory")
    add_seed(p, 0)
    add_n_jobs(p, 1)
    p.add_argument("--reps", type=positive_int, default=None, help=f"override the mode's replicates per n (>= {MIN_REPS}; default: 8 quick, 20 full)")
    p.add_argument("--n-max", type=positive_int, default=None, help="override the mode's largest sample size (>= 64; default: 32000 quick, 128000 full)")
    add_resume(p, "reuse finished rate fits already in --out (same settings only)")
    add_quiet(p)
    p.add_argument("--allow-skips", action="store_true", help="exit 0 when checks were skipped but none failed")
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    p.add_argument("--merge", nargs="+", metavar="FOLDER", help="run nothing: merge the reports of runs that each ran part "
                   "of the checks (--only) into one report in --out; every check once, in the package's order (default: run the checks)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        print("\n".join(CHECK_NAMES))
        return 0
    if args.merge:
        return _merge(args, argv)
    with usage_errors():
        _validate(args)
    # the checks run outside usage_errors: an exception there is a bug, not bad input (and each
    # check's own exceptions are reported as an "error" result by the runner)
    argv_list = list(sys.argv[1:] if argv is None else argv)
    command = "moestat theory " + " ".join(argv_list)
    t0 = time.perf_counter()
    results = run_checks(args.mode, args.out, args.only, args.seed, args.n_jobs, verbose=not args.quiet, reps=args.reps,
                         n_max=args.n_max, resume=args.resume)
    mpath, jpath = write_report(results, args.out, args.mode, command.strip(), time.perf_counter() - t0)
    code = exit_code(results, args.allow_skips)
    print(f"{totals_line(results)}; wrote {mpath} and {jpath}; exit {code} "
          "(0 all passed, 1 a failure/inconclusive/error, 3 skips only)")
    return code


def _merge(args, argv) -> int:
    """``--merge FOLDER...``: one report of the reports' mode (``--full`` by default) in ``--out``."""
    # the mode's default is quick for a run; the reports one merges are the --full ones unless --quick is given
    mode = "quick" if "--quick" in list(sys.argv[1:] if argv is None else argv) else "full"
    with usage_errors():
        if args.only or args.resume:
            raise ValueError("--merge runs nothing: give it without --only and --resume")
        results, commands, elapsed = merge_reports(args.merge, mode=mode)
        prepare_out(args.out, False)
    command = f"assembled from {len(commands)} runs: " + " ; ".join(commands)
    mpath, _ = write_report(results, args.out, mode, command, elapsed)
    print(f"wrote {mpath}: {len(results)} checks, elapsed {elapsed:.0f} s summed over the runs (nothing run)")
    return exit_code(results, args.allow_skips)


def _validate(args) -> None:
    """Check the arguments (raises ``ValueError``); ``--only`` names take ``-`` for ``_``."""
    if args.only:
        args.only = [name.replace("-", "_") for name in args.only]
        known = set(CHECK_NAMES) | {m.__name__.rsplit(".", 1)[-1] for m in MODULES}
        bad = sorted(set(args.only) - known)
        if bad:
            raise ValueError(f"--only: unknown check(s) {', '.join(bad)}")
    if args.n_max is not None and args.n_max < 64:
        raise ValueError(f"--n-max must be at least 64, got {args.n_max}")
    if args.reps is not None and args.reps < MIN_REPS:
        raise ValueError(f"--reps must be at least {MIN_REPS} (a slope interval needs replicates to resample), got {args.reps}")
    # a MemoryError after the report folder exists is bad input found late; --reps alone can ask for
    # one too (--reps 1000000000 at the mode's own n-max), so the check runs whatever is given
    check_grid_memory(args.mode, args.n_max or GRIDS[args.mode]["n_max"], args.reps)
    # the settings every stored rate run of the folder shares: a resume with others is refused here,
    # before any check runs (the rate runs would refuse one by one, after the others had run)
    settings = _settings(args)
    stored = read_run_config(args.out) if args.resume and Path(args.out).is_dir() else None
    if stored is not None:
        check_run_config(args.out, settings, True)
    elif args.resume:
        _check_report_settings(Path(args.out), settings)
    prepare_out(args.out, args.resume)
    if args.resume:  # an edited row of a stored rate run: refused here, as rates --resume refuses it
        audit_stored_runs(Path(args.out) / "rates")
    if stored is None:
        write_run_config(args.out, settings)


def _settings(args) -> dict:
    """The settings every rate run of a theory folder shares (``run_config.json``)."""
    return {"mode": args.mode, "seed": args.seed, "reps": args.reps, "n_max": args.n_max}


def _check_report_settings(out: Path, settings: dict) -> None:
    """A folder written before ``run_config.json``: its settings are those of the command recorded
    in ``theory_report.json`` (refused, naming them, when they differ)."""
    import json
    import shlex

    try:
        command = json.loads((out / "theory_report.json").read_text(encoding="utf-8"))["command"]
        old = _settings(build_parser().parse_args(shlex.split(command)[2:]))
    except (OSError, ValueError, KeyError, TypeError, SystemExit):
        return  # no readable report: the rate runs check their own configurations
    diff = [f"--{k.replace('_', '-')} ({old[k]!r} there, {settings[k]!r} now)" for k in settings if old[k] != settings[k]]
    if diff:
        raise ValueError(f"--resume: {out} was written with other settings (differs in: {', '.join(diff)}); "
                         "resume with those settings or choose a new --out")

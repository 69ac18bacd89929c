"""``moestat check``: the pre-flight of a scenario (:mod:`moestat.rates.preflight`), before any sweep.

Parses a scenario (a file, a built-in router or the Gaussian-MoE family) and the grid, prints the
Fisher information of the truth, the Cramér--Rao sd of every parameter block at each ``n`` and
the warnings (also on stderr), then the theorem hypotheses of the truth
(:mod:`moestat.theorems.hypotheses`: identifiability conditions and PDE identities by autograd, and
which theorem's hypotheses the truth meets); ``--json`` writes both reports.  Bad input: one
line, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from moestat.cli.common import ArgumentParser, NOTHING_KEPT, argtype, name_choice, positive_int, usage_errors
from moestat.estimators.memory import parse_memory, scenario_line
from moestat.io import atomic_write_json, check_output_file, ensure_writable_dir
from moestat.rates.config import FAMILIES, ROUTERS, SETTINGS, RatesConfig
from moestat.theorems.hypotheses import THEOREMS, check_hypotheses, format_hypotheses
from moestat.rates.preflight import FRACTION, MC_DRAWS, format_preflight, preflight
from moestat.rates.resolve import Experiment
from moestat.resources import check_memory

# The --json report is written when the door finishes (it has no --resume): a fault or Ctrl-C leaves nothing of it.
ON_INTERRUPT = NOTHING_KEPT

__all__ = ["build_parser", "main"]

EXAMPLES = """\
examples:
  moestat check examples/softmax_linear.toml
  moestat check examples/sigmoid_exact.toml --n-min 8000 --n-max 512000
  moestat check --router perturbed                # the built-in scenario of moestat rates
  moestat check --family gaussian-moe --json pre.json
  moestat check my_truth.toml --theorem lse-strong   # judge the truth against one theorem's hypotheses
"""


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1), got {text!r}")
    return v


def _json_path(text: str) -> str:
    """argparse type of ``--json``: a file name (``''`` would name no file, as ``--out ''`` is refused)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a file name, got {text!r}")
    return text


def check_json_target(path: str) -> None:
    """Refuse a ``--json`` that exists and is not a regular file (a folder, device, FIFO or link:
    never replaced nor written through), before the work: the report would be computed, then fail
    to be written."""
    from pathlib import Path

    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        raise ValueError(f"--json {p} exists and is a folder; give a file name (e.g. {p / 'preflight.json'})")
    check_output_file(p, "--json")
    ensure_writable_dir(p.resolve().parent)


def build_parser() -> ArgumentParser:
    """The argument parser of ``moestat check``."""
    S = argparse.SUPPRESS
    p = ArgumentParser(prog="moestat check", description="Pre-flight of a scenario: Fisher information of the truth "
                       "(autograd), Cramér-Rao sd of every parameter block at each n of the grid, and the n from which "
                       "the truth is identifiable.", epilog=EXAMPLES)
    p.add_argument("scenario", nargs="?", default=None, metavar="SCENARIO",
                   help="FILE.toml or path/file.py:function (default: the built-in scenario of --router)")
    p.add_argument("--router", type=name_choice(ROUTERS), default=S, help="built-in scenario's router (default perturbed)")
    p.add_argument("--setting", type=name_choice(SETTINGS), default=S, help="exact or over (built-in scenarios); default exact")
    p.add_argument("--family", choices=FAMILIES, default=S, help="regression (default) or gaussian-moe")
    p.add_argument("--n-min", type=positive_int, default=S, help="smallest sample size of the grid; default 2000")
    p.add_argument("--n-max", type=positive_int, default=S, help="largest sample size of the grid; default 128000")
    p.add_argument("--n-points", type=positive_int, default=S, help="number of log-spaced sample sizes; default 7")
    p.add_argument("--reps", type=positive_int, default=S, help="replicates per sample size (the memory line); default 20")
    p.add_argument("--max-memory", type=argtype(parse_memory), default="auto",
                   help="the likelihood fit's memory budget, as moestat rates --max-memory (the memory line); default auto")
    p.add_argument("--fraction", type=_fraction, default=FRACTION,
                   help=f"target sd as a fraction of the true atoms' separation (default {FRACTION:g})")
    p.add_argument("--draws", type=positive_int, default=MC_DRAWS, help=f"Monte Carlo draws (default {MC_DRAWS})")
    p.add_argument("--theorem", type=name_choice(tuple(t.key for t in THEOREMS)), default=None,
                   help="judge the truth against this theorem's hypotheses only; default every theorem of its model class")
    p.add_argument("--json", type=_json_path, default=None, metavar="PATH", help="also write the report as JSON; default none")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat check``."""
    args = build_parser().parse_args(argv)
    keys = {k: v for k, v in vars(args).items() if k in ("router", "setting", "family", "n_min", "n_max", "n_points", "reps")}
    if args.scenario:
        keys["scenario_file"] = args.scenario
    with usage_errors():
        if args.scenario and "router" in keys:  # the file states the gate: --router would be dropped without a word
            raise ValueError("--router cannot be combined with a SCENARIO file: the scenario file defines the router")
        cfg = RatesConfig.from_dict(keys)
        cfg.grid.validate()
        cfg.scenario.validate()
        scenario = Experiment.of(cfg).scenarios[cfg.router[0]]
        # the draws of x (d numbers each) and y are held at once: a lower bound, in float64
        d = int(getattr(scenario, "d", 1) or 1)
        check_memory(8.0 * args.draws * (d + 1), f"--draws {args.draws}: the Monte Carlo draws of (x, y) would",
                     "lower --draws")
        if args.json:
            check_json_target(args.json)
    rep = preflight(scenario, cfg.ns, fraction=args.fraction, m=args.draws)
    print(format_preflight(rep, args.scenario or ("gaussian-moe" if cfg.family != "regression" else cfg.router[0])))
    for w in rep["warnings"]:
        sys.stderr.write(f"moestat check: warning: {w}\n")
    rep["hypotheses"] = check_hypotheses(scenario, theorem=args.theorem)
    print(format_hypotheses(rep["hypotheses"]))
    if getattr(scenario, "likelihood", False) or getattr(scenario, "gaussian_moe", False):
        # fitted by maximum likelihood: what the largest grid size holds (moestat rates prints the same line)
        print(scenario_line(scenario, max(cfg.ns), cfg.reps, args.max_memory))
    if args.json:
        atomic_write_json(args.json, rep)
    return 0

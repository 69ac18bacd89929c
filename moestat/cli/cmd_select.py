"""``moestat select``: argument parsing for :func:`moestat.selection.study.run_select`.

How many experts?  Fits model 1 of Nguyen, Nguyen & Ho (2023) (``k* = 2``) with ``k = 1..max(K_bar)``
experts over a grid of ``n`` and replicates, and selects ``k`` by the dendrogram selection
criterion (Do et al. 2024) from the over-fitted fit and by AIC, BIC and ICL from the refits.
The settings are validated and ``--out`` checked inside :func:`~moestat.cli.common.usage_errors`
(bad input: one line, exit 2, nothing written); a study where no over-fitted fit of a cell
converged stops with one line and exit 1; any other exception is an internal error.
"""

from __future__ import annotations

import sys
from typing import Sequence

from moestat.cli.common import (
    ArgumentParser,
    add_out,
    add_quiet,
    add_resume,
    add_n_jobs,
    add_seed,
    add_threads,
    apply_threads,
    int_list,
    nonneg_float,
    positive_int,
    prepare_out,
    usage_errors,
)
from moestat.io import refuse_links_in
from moestat.resources import check_memory
from moestat.selection.study import SelectConfig, SelectionError, run_select, same_model_settings

__all__ = ["build_parser", "main"]

EXAMPLES = """\
examples:
  moestat select --k-bar 3 --n 400,2000 --reps 10 --out runs/select
  moestat select --k-bar 3 --n 400,2000 --reps 10 --n-jobs 2 --out runs/select2   # same records, 2 workers
  moestat select --k-bar 3,4,5 --n 400,2000,10000 --reps 40 --chunk 20 --out runs/model1 --resume
"""


def build_parser() -> ArgumentParser:
    import argparse

    p = ArgumentParser(prog="moestat select", description="Select the number of experts: DSC (dendrogram of mixing measures) "
                       "against AIC, BIC and ICL, P(k_hat = k*) against n with binomial intervals.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default="model1", metavar="model1|FILE",
                   help="the truth: model1 (model 1 of Nguyen, Nguyen & Ho 2023, k* = 2; default) or a scenario file "
                        "(TOML or file.py:function) drawing y from a softmax-gated Gaussian MoE with linear experts")
    p.add_argument("--k-bar", type=int_list, default=[3, 4, 5], help="over-fitted numbers of experts, each > k* (default 3,4,5)")
    p.add_argument("--n", type=int_list, default=[400, 2000, 10000], help="sample sizes, each >= 20 (default 400,2000,10000)")
    p.add_argument("--reps", type=positive_int, default=40, help="replicates per n (default 40)")
    p.add_argument("--starts", type=positive_int, default=1, help="starts per fit (default 1)")
    p.add_argument("--chunk", type=positive_int, default=10, help="replicates fitted in one batch (default 10)")
    p.add_argument("--init-scale", type=nonneg_float, default=0.1, help="noise of the near-truth starts (default 0.1)")
    p.add_argument("--max-iter", type=positive_int, default=1000, help="EM iterations before the Newton polish (default 1000)")
    add_seed(p, 0)
    add_out(p, "select")
    add_resume(p, "continue the study in --out, skipping what is finished (same model settings; --n, --reps and --chunk may grow it)")
    add_quiet(p)
    add_n_jobs(p, 1)
    add_threads(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    threads = apply_threads(args, args.n_jobs)
    with usage_errors():
        config = SelectConfig(scenario=args.scenario, k_bars=tuple(args.k_bar), ns=tuple(args.n), replicates=args.reps,
                              seed=args.seed, n_starts=args.starts, chunk=args.chunk, init_scale=args.init_scale,
                              max_iter=args.max_iter)
        _check_memory(config)
        _check_out(args.out, config, args.resume)
    try:
        summary = run_select(config, args.out, resume=args.resume, verbose=not args.quiet, n_jobs=args.n_jobs,
                             threads=threads)
    except SelectionError as exc:
        sys.stderr.write(f"moestat select: {exc}\n")
        return 1
    if not args.quiet:
        print("wrote " + ", ".join(summary["files"]))
    return 0


def _check_memory(config) -> None:
    """Refuse a grid whose largest unit cannot be held: one unit draws ``min(chunk, reps)`` data sets
    of the largest ``n`` (inputs ``[n, d]``, responses) and fits them with up to ``max(K_bar)``
    experts (responsibilities ``[n, K]``), float64 -- a lower bound on what it allocates.
    ``--n 1000000000000`` asked for 7.28 TiB and failed after config.json was written."""
    n, reps = max(config.ns), min(config.chunk, config.replicates)
    d = int(getattr(config.scenario_object(), "d", 1))
    check_memory(8.0 * n * reps * (d + 2 + max(config.k_bars)),
                 f"--n {n}: one unit ({reps} replicates of {n} samples, up to {max(config.k_bars)} experts) would",
                 "lower --n (or --chunk)")


def _check_out(out: str, config, resume: bool) -> None:
    """``--out`` empty, or (with ``--resume``) holding a study of the same model settings (the grid
    may grow)."""
    import json
    from pathlib import Path

    cfg = Path(out) / "config.json"
    if resume and Path(out).is_dir():
        refuse_links_in(out)  # first: config.json read through a link would already be someone else's file
    if resume and cfg.exists():
        try:
            old = json.loads(cfg.read_text())["config"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{cfg} is not a selection study's config.json") from None
        if not same_model_settings(old, config):
            raise ValueError(f"--out {out} holds a study of other settings; --resume needs the same settings "
                             f"(only --n, --reps and --chunk may change)")
    elif resume and Path(out).is_dir() and any(Path(out).iterdir()):
        raise ValueError(f"--out {out} holds no selection study (no config.json) to resume")
    prepare_out(out, resume)

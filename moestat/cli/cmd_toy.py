"""``moestat toy``: argument parsing for :mod:`moestat.experiments.decomposition`."""

from __future__ import annotations

from typing import Sequence

from moestat.cli.common import (
    NOTHING_KEPT,
    ArgumentParser,
    add_out,
    add_quiet,
    add_seed,
    add_threads,
    apply_threads,
    cleaned_on_interrupt,
    int_list,
    learning_rate,
    positive_int,
    prepare_out,
    usage_errors,
)
from moestat.experiments import decomposition as _toy
from moestat.experiments.decomposition import (
    parse_methods,
    run_classification,
    run_regression,
    write_toy_outputs,
)
from moestat.nn.methods import get_method
from moestat.nn.train import OPTIMIZERS

__all__ = ["build_parser", "main"]

# Every configuration's runs are written together at the end (the tables and figures need all of
# them); the door says so on Ctrl-C instead of promising to keep anything.
ON_INTERRUPT = NOTHING_KEPT


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="moestat toy", description=_toy.__doc__.split("\n\n")[0],
                       epilog=_toy.__doc__.split("Examples\n--------\n")[1].split("\n\nEvery")[0])
    p.add_argument("task", choices=("classify", "regress"), help="6-class Gaussian toy or rotation/scale regression toy")
    p.add_argument("--method", default="all",
                   help="method name, comma-separated names, or 'all' (default); - and _ are interchangeable")
    p.add_argument("--experts", type=int_list, default=None, help="number(s) of experts, e.g. 3,5 (default: 3,5 classify; 2 regress)")
    p.add_argument("--runs", type=positive_int, default=10, help="independent runs per configuration (default 10)")
    p.add_argument("--epochs", type=positive_int, default=40, help="training epochs (default 40)")
    p.add_argument("--lr", type=learning_rate, default=0.01, help="learning rate (default 0.01)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="mini-batch size (default 64)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="rmsprop", help="default rmsprop (thesis toy)")
    add_seed(p, help="root seed of data, initialisation and shuffling")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    add_out(p, "toy", help="output directory")
    add_quiet(p)
    add_threads(p)
    return p


MAX_EXPERTS = 1024


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat toy``."""
    args = build_parser().parse_args(argv)
    apply_threads(args)
    with usage_errors():
        task = "classification" if args.task == "classify" else "regression"
        methods = parse_methods(args.method, task)
        if args.lr <= 0:
            raise ValueError("--lr must be positive")
        experts = args.experts or ([3, 5] if task == "classification" else [2])
        if max(experts) > MAX_EXPERTS:  # each expert is a network of its own: 1e9 of them fail in allocation
            raise ValueError(f"--experts must be at most {MAX_EXPERTS} (the toy tasks of the thesis use 2 to 10), "
                             f"got {max(experts)}")
        if task == "regression" and len(experts) != 1:
            raise ValueError("--experts: the regression toy takes one number of experts")
        if task == "regression" and experts[0] < 2:
            raise ValueError("--experts: the regression toy needs at least 2 experts")
        for nm in methods:
            m = get_method(nm)
            if m.aggregation == "top_k" and m.k > min(experts):
                raise ValueError(f"--experts: method {nm} keeps {m.k} experts, more than {min(experts)}")
        prepare_out(args.out, None)
    common = dict(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, optimizer=args.optimizer,
                  seed=args.seed, keep_models=not args.no_figures)
    with cleaned_on_interrupt(args.out):
        if task == "classification":
            res = run_classification(methods, experts, args.runs, progress=False if args.quiet else None, **common)
        else:
            res = run_regression(methods, args.runs, experts=experts[0], progress=False if args.quiet else None, **common)
    config = dict(vars(args)) | {"methods": methods, "experts": experts}
    table = write_toy_outputs(res, task, args.out, config, figures=not args.no_figures)
    if not args.quiet:
        print(table, end="")
    return 0

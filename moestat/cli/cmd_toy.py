"""``moestat toy``: argument parsing for :mod:`moestat.experiments.decomposition`."""

from __future__ import annotations

from typing import Sequence

from moestat.cli.common import ArgumentParser, int_list, nonneg_float, positive_int, usage_errors
from moestat.experiments import decomposition as _toy
from moestat.experiments.decomposition import (
    CLASSIFY_METHODS,
    REGRESS_METHODS,
    format_table,
    plot_decision_regions,
    plot_expert_matrices,
    run_classification,
    run_regression,
)
from moestat.io import atomic_write_json, atomic_write_text, ensure_writable_dir
from moestat.nn.methods import METHODS, get_method

__all__ = ["build_parser", "main"]


def _parse_methods(text: str, task: str) -> list[str]:
    if text == "all":
        return list(CLASSIFY_METHODS if task == "classification" else REGRESS_METHODS)
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError("--method: give a method name, a comma-separated list or 'all'")
    for nm in names:
        if nm not in METHODS:
            raise ValueError(f"--method: unknown method {nm!r}; expected 'all' or one of {', '.join(sorted(METHODS))}")
        if task == "regression" and METHODS[nm].gate == "entropy":
            raise ValueError(f"--method: {nm!r} needs class distributions and cannot run on the regression toy")
    return names


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="moestat toy", description=_toy.__doc__.split("\n\n")[0], epilog=_toy.__doc__.split("Examples\n--------\n")[1].split("\n\nEvery")[0])
    p.add_argument("task", choices=("classify", "regress"), help="6-class Gaussian toy or rotation/scale regression toy")
    p.add_argument("--method", default="all", help="method name, comma-separated names, or 'all' (default)")
    p.add_argument("--experts", type=int_list, default=None, help="number(s) of experts, e.g. 3,5 (default: 3,5 classify; 2 regress)")
    p.add_argument("--runs", type=positive_int, default=10, help="independent runs per configuration (default 10)")
    p.add_argument("--epochs", type=positive_int, default=40, help="training epochs (default 40)")
    p.add_argument("--lr", type=nonneg_float, default=0.01, help="learning rate (default 0.01)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="mini-batch size (default 64)")
    p.add_argument("--optimizer", choices=("rmsprop", "adam", "sgd"), default="rmsprop", help="default rmsprop (thesis toy)")
    p.add_argument("--seed", type=int, default=0, help="root seed of data, initialisation and shuffling")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.add_argument("--out", required=True, help="output directory")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat toy``."""
    args = build_parser().parse_args(argv)
    with usage_errors():
        task = "classification" if args.task == "classify" else "regression"
        methods = _parse_methods(args.method, task)
        if args.lr <= 0:
            raise ValueError("--lr must be positive")
        experts = args.experts or ([3, 5] if task == "classification" else [2])
        if task == "regression" and len(experts) != 1:
            raise ValueError("--experts: the regression toy takes one number of experts")
        for nm in methods:
            m = get_method(nm)
            if m.aggregation == "top_k" and m.k > min(experts):
                raise ValueError(f"--experts: method {nm} keeps {m.k} experts, more than {min(experts)}")
        out = ensure_writable_dir(args.out)
    common = dict(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, optimizer=args.optimizer,
                  seed=args.seed, keep_models=not args.no_figures)
    if task == "classification":
        res = run_classification(methods, experts, args.runs, **common)
    else:
        res = run_regression(methods, args.runs, experts=experts[0], **common)
    stem = "classify" if task == "classification" else "regress"
    table = format_table(res["rows"], task)
    config = {k: v for k, v in vars(args).items()} | {"methods": methods, "experts": experts}
    atomic_write_json(out / f"{stem}_results.json", {"config": config, "rows": res["rows"]})
    atomic_write_text(out / f"{stem}_table.md", table)
    if not args.no_figures:
        if task == "classification":
            for (name, M), model in res["models"].items():
                plot_decision_regions(model, name, res["data"], out / f"regions_{name}_M{M}", title=f"{name}, {M} experts (run 0)")
        else:
            plot_expert_matrices(res["rows"], out / "expert_matrices")
    print(table, end="")
    return 0

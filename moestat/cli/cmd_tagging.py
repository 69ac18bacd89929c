"""``moestat tagging``: argument parsing for :mod:`moestat.experiments.tagging`."""

from __future__ import annotations

import sys
from typing import Sequence


from moestat.cli.common import (
    ArgumentParser,
    add_device,
    add_threads,
    apply_threads,
    add_out,
    add_quiet,
    add_resume,
    add_seed,
    check_comma_list,
    learning_rate,
    prepare_out,
    positive_int,
    usage_errors,
)
from moestat.devices import resolve_device
from moestat.experiments import tagging as _tg
from moestat.experiments.tagging import TASKS, format_table, load_task, parse_gates, run_experiment
from moestat.io import check_run_config, write_run_config
from moestat.nn.sequence import GATES

__all__ = ["build_parser", "main"]


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="moestat tagging",
        description=_tg.__doc__.split("\n\n")[0],
        epilog=(
            "examples:\n"
            "  moestat tagging --task conll --compare all --epochs 4 --out runs/demo      # synthetic demo task\n"
            "  moestat tagging --task conll --data-path conll2003/ --glove glove.6B.50d.txt --compare all --out runs/conll\n"
            "  moestat tagging --task squad --data-path squad/ --glove glove.6B.50d.txt --gate load --epochs 5 --out runs/squad\n"
            "without --data-path a SYNTHETIC demo task is used (not CoNLL-2003 / SQuAD; every table says so)\n"
            f"gates: {', '.join(GATES)}"
        ),
    )
    p.add_argument("--task", choices=TASKS, default="conll", help="named-entity tagging (CoNLL-2003) or span extraction (SQuAD 1.1)")
    p.add_argument("--data-path", default=None,
                   help="folder with train.txt/valid.txt (CoNLL-2003) or train-v1.1.json/dev-v1.1.json (SQuAD 1.1); "
                        "default: the synthetic demo task")
    p.add_argument("--glove", default=None, help="GloVe text file (glove.6B.50d.txt); default: embeddings drawn from the seed")
    p.add_argument("--gate", default="load", help="one model (ignored with --compare)")
    p.add_argument("--compare", default=None, help="comma-separated models or 'all' (default: --gate alone)")
    p.add_argument("--experts", type=positive_int, default=8, help="experts of the MoE layer")
    p.add_argument("--k", type=positive_int, default=2, help="experts kept per token by the top-k gates")
    p.add_argument("--epochs", type=positive_int, default=None, help="default 10 (conll), 5 (squad)")
    p.add_argument("--seeds", type=positive_int, default=1, help="runs per model (seeds --seed, --seed + 1, ...)")
    add_seed(p, help="seed of the first run; run s of a model uses --seed + s")
    p.add_argument("--batch-size", type=positive_int, default=32, help="sentences per mini-batch")
    p.add_argument("--lr", type=learning_rate, default=1e-3, help="Adam learning rate (the study names none)")
    p.add_argument("--max-len", type=positive_int, default=None, help="default 128 (conll), 256 (squad), 40 (demo spans)")
    p.add_argument("--max-train", type=positive_int, default=None, help="use the first N training examples (default: all)")
    p.add_argument("--demo-train", type=positive_int, default=1500, help="demo task: training sentences")
    p.add_argument("--demo-val", type=positive_int, default=400, help="demo task: validation sentences")
    p.add_argument("--max-steps", type=positive_int, default=None,
                   help="stop every epoch after N batches (timing; s/epoch is extrapolated; default: whole epochs)")
    add_device(p)
    add_threads(p)
    add_resume(p, help="skip the runs already in OUT/runs.jsonl")
    add_quiet(p)
    add_out(p, "tagging")
    return p


#: Most sentences of each split of the demo task.  The demo checks the pipeline in seconds
#: (CoNLL-2003 itself has 14 041 training sentences); its sentences are generated one by one
#: in Python, so 10**12 of them ran for days before memory ran out.
MAX_DEMO_SENTENCES = 1_000_000


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat tagging``."""
    a = build_parser().parse_args(argv)
    with usage_errors():
        for flag, value in (("--demo-train", a.demo_train), ("--demo-val", a.demo_val)):
            if value > MAX_DEMO_SENTENCES:
                raise ValueError(f"{flag} must be at most {MAX_DEMO_SENTENCES} sentences (the demo checks the pipeline; "
                                 f"CoNLL-2003 has 14041 training sentences), got {value}")
        if a.compare is not None and not a.compare.strip():
            raise ValueError("--compare: give comma-separated models or 'all' (an empty list would run --gate)")
        check_comma_list(a.compare, "--compare")
        gates = parse_gates(a.compare) if a.compare is not None else parse_gates(a.gate)
        if a.k > a.experts:
            raise ValueError(f"--k {a.k} must not exceed --experts {a.experts}")
        if not (a.lr > 0):
            raise ValueError(f"--lr must be > 0, got {a.lr}")
        device = str(resolve_device(a.device))  # checked by the parser; resolves auto
        task = load_task(a.task, a.data_path, a.glove, max_len=a.max_len, demo_train=a.demo_train,
                         demo_val=a.demo_val, max_train=a.max_train)
        # the settings the runs in OUT share (runs.jsonl keys them by gate and seed only)
        settings = {k: getattr(a, k) for k in ("task", "data_path", "glove", "experts", "k", "epochs", "batch_size", "lr",
                                               "max_len", "max_train", "demo_train", "demo_val", "max_steps")}
        check_run_config(a.out, settings, a.resume)
        prepare_out(a.out, a.resume)
        write_run_config(a.out, settings, {"gates": gates, "seeds": a.seeds, "seed": a.seed})
    apply_threads(a)
    if not a.quiet:
        sys.stderr.write(task.description + "\n")
    summary = run_experiment(task, gates, a.out, seeds=a.seeds, base_seed=a.seed,
                             epochs=a.epochs or (10 if a.task == "conll" else 5), batch_size=a.batch_size, lr=a.lr,
                             device=device, resume=a.resume, progress=False if a.quiet else None, verbose=not a.quiet,
                             n_experts=a.experts, k=a.k, max_steps=a.max_steps)
    if not a.quiet:
        print(format_table(summary))
    return 0

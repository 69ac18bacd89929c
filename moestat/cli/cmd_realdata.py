"""``moestat realdata``: argument parsing for :mod:`moestat.experiments.realdata`."""

from __future__ import annotations

import argparse
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
    positive_finite,
    seed_int,
    prepare_out,
    nonneg_float,
    positive_int,
    usage_errors,
)
from moestat.data.images import DATASETS, load_dataset
from moestat.devices import resolve_device
from moestat.experiments import realdata as _rd
from moestat.experiments.realdata import GATE_SPECS, format_table, parse_gates, run_experiment
from moestat.nn.classifier import CLASSIFIER_METHODS
from moestat.io import RUN_CONFIG, check_run_config, read_jsonl, read_run_config

__all__ = ["build_parser", "main"]


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="moestat realdata",
        description=_rd.__doc__.split("\n\n")[0],
        epilog=(
            "examples:\n"
            "  moestat realdata --dataset digits --gate topk_mask --epochs 30 --out runs/digits\n"
            "  moestat realdata --dataset fashion-mnist --compare all --epochs 15 --seeds 3 --out runs/cmp\n"
            f"gates: {', '.join(GATE_SPECS)}"
        ),
    )
    p.add_argument("--dataset", choices=DATASETS, default="fashion-mnist", help="image data set (digits ships with scikit-learn)")
    p.add_argument("--data-path", default=None, help="folder with the IDX files (default: MOESTAT_DATA or /usr/share/datasets/<dataset>)")
    p.add_argument("--gate", default="dense",
                   help="one gate (ignored with --compare); - and _ interchangeable, perturbed_cosine = perturbed")
    p.add_argument("--compare", default=None, help="comma-separated gates, 'all' (every gate) and/or 'thesis' (every thesis method); default: --gate alone")
    p.add_argument("--experts", type=positive_int, default=8, help="experts M of the MoE layer")
    p.add_argument("--k", type=positive_int, default=2, help="experts kept per input by the Top-K gates")
    p.add_argument("--epochs", type=positive_int, default=10, help="passes over the training split")
    p.add_argument("--seeds", type=positive_int, default=3, help="runs per gate (seeds --seed, --seed + 1, ...)")
    add_seed(p, help="seed of the first run; run s of a gate uses --seed + s")
    # --base-seed was this command's spelling of --seed; kept as a hidden alias
    p.add_argument("--base-seed", dest="seed", type=seed_int, help=argparse.SUPPRESS)
    p.add_argument("--batch-size", type=positive_int, default=256, help="mini-batch size")
    p.add_argument("--lr", type=learning_rate, default=1e-3, help="Adam learning rate (> 0)")
    p.add_argument("--lr-schedule", choices=("constant", "cosine"), default="constant", help="constant, or cosine annealing to 0")
    p.add_argument("--expert-hidden", type=positive_int, default=64, help="hidden width of each expert MLP")
    p.add_argument("--gate-hidden", type=int, default=0, help="gate MLP hidden width (0: linear router)")
    p.add_argument("--shared-hidden", type=int, default=0, help="shared feature extractor width (0: none)")
    p.add_argument("--combine", choices=("probs", "logits"), default="probs", help="mix expert probabilities (output mixture) or logits (pre-softmax)")
    p.add_argument("--method", choices=CLASSIFIER_METHODS, default=None, help="override the gate's training method (default: the gate's own)")
    p.add_argument("--tau", type=nonneg_float, default=1.0, help="perturbed cosine tau1 = tau2")
    p.add_argument("--temperature", type=positive_finite, default=1.0, help="cosine score divisor")
    p.add_argument("--no-k1-fix", action="store_true", help="literal top-1 softmax (zero gate gradient)")
    p.add_argument("--val-fraction", type=float, default=1 / 12, help="share of the training images held out for choosing the best epoch (default 1/12)")
    p.add_argument("--split-seed", type=seed_int, default=0,
                   help="seed of the validation (and digits test) split (default 0; see moestat.data.images)")
    p.add_argument("--max-train", type=positive_int, default=None, help="use at most this many training images (default: all)")
    add_device(p)
    add_threads(p)
    add_resume(p, help="skip the runs already in OUT/runs.jsonl")
    p.add_argument("--summarise-only", action="store_true", help="train nothing; summarise OUT/runs.jsonl")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_quiet(p)
    add_out(p, "realdata")
    return p


#: The flags that change a run's numbers: recorded in OUT/run_config.json; ``--resume`` with any
#: of them changed is refused (the runs are keyed by gate and seed only).
SETTINGS = ("dataset", "val_fraction", "split_seed", "max_train", "experts", "k", "epochs", "batch_size", "lr",
            "lr_schedule", "expert_hidden", "gate_hidden", "shared_hidden", "combine", "method", "tau", "temperature",
            "no_k1_fix")


def _use_stored_settings(a: argparse.Namespace) -> None:
    """``--summarise-only`` summarises what is in ``--out`` with the settings and gates it was run
    with, never the command line's defaults."""
    from pathlib import Path

    stored = read_run_config(a.out)
    if stored is None or not read_jsonl(Path(a.out) / "runs.jsonl"):
        raise ValueError(f"--summarise-only: {a.out} holds no finished runs (runs.jsonl and {RUN_CONFIG} of a realdata run)")
    defaults = build_parser().parse_args([])
    given = [k for k in (*SETTINGS, "gate", "compare", "seeds", "seed") if getattr(a, k) != getattr(defaults, k)]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ValueError(f"--summarise-only summarises {a.out} with the settings stored in its {RUN_CONFIG}; drop {flag}")
    for k, v in stored["result"].items():
        if k in SETTINGS:
            setattr(a, k, v)
    extra = stored.get("extra", {})
    a.compare = ",".join(extra.get("gates", [])) or None
    a.seeds = int(extra.get("seeds", a.seeds))
    a.seed = int(extra.get("seed", a.seed))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat realdata``."""
    a = build_parser().parse_args(argv)
    with usage_errors():
        if a.summarise_only:
            _use_stored_settings(a)
        if a.compare is not None and not a.compare.strip():
            raise ValueError("--compare: give comma-separated gates, 'all' or 'thesis' (an empty list would run --gate)")
        check_comma_list(a.compare, "--compare")
        gates = parse_gates(a.compare) if a.compare is not None else parse_gates(a.gate)
        if a.k > a.experts:
            raise ValueError(f"--k {a.k} must not exceed --experts {a.experts}")
        if not (a.lr > 0):
            raise ValueError(f"--lr must be > 0, got {a.lr}")
        if not (a.temperature > 0):
            raise ValueError(f"--temperature must be > 0, got {a.temperature}")
        if "perturbed" in gates and a.tau <= 0:
            raise ValueError("--tau must be > 0 for the perturbed cosine router (tau = 0 is the gate 'cosine')")
        if a.gate_hidden < 0 or a.shared_hidden < 0:
            raise ValueError("--gate-hidden and --shared-hidden must be >= 0")
        device = str(resolve_device(a.device))  # checked by the parser; resolves auto
        if not 0 < a.val_fraction < 1:
            raise ValueError(f"--val-fraction must lie in (0, 1), got {a.val_fraction}")
        ds = load_dataset(a.dataset, a.data_path, val_fraction=a.val_fraction, random_state=a.split_seed, max_train=a.max_train)
        settings = {k: getattr(a, k) for k in SETTINGS}
        check_run_config(a.out, settings, a.resume or a.summarise_only)
        prepare_out(a.out, a.resume or a.summarise_only)
    apply_threads(a)
    if not a.quiet:
        sys.stderr.write(ds.describe() + "\n")
    summary = run_experiment(
        ds, gates, a.out, seeds=a.seeds, base_seed=a.seed, epochs=a.epochs, batch_size=a.batch_size,
        lr=a.lr, lr_schedule=a.lr_schedule, device=device, resume=a.resume, summarise_only=a.summarise_only,
        progress=False if (a.no_progress or a.quiet) else None, verbose=not a.quiet,
        n_experts=a.experts, k=a.k, expert_hidden=a.expert_hidden, gate_hidden=a.gate_hidden or None,
        shared_hidden=a.shared_hidden or None, combine=a.combine, method=a.method, tau=a.tau,
        temperature=a.temperature, k1_fix=not a.no_k1_fix, settings=settings,
    )
    if a.quiet:
        return 0
    print(format_table(summary))
    ref = summary["references"].get("readme_mlp_256_128_100")
    if ref:
        print(f"reference: Fashion-MNIST README, {ref['classifier']} ({ref['preprocessing']} preprocessing): {ref['test_accuracy']}")
    return 0

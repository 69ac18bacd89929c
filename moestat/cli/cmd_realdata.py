"""``moestat realdata``: argument parsing for :mod:`moestat.experiments.realdata`."""

from __future__ import annotations

from typing import Sequence

import torch

from moestat.cli.common import ArgumentParser, nonneg_float, positive_int, usage_errors
from moestat.data.images import DATASETS, load_dataset
from moestat.experiments import realdata as _rd
from moestat.experiments.realdata import (
    GATE_SPECS,
    _device,
    _gate_list,
    _log,
    format_table,
    run_experiment,
    softmoe_available,
)
from moestat.io import ensure_writable_dir

__all__ = ["main"]


def _parser() -> ArgumentParser:
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
    p.add_argument("--dataset", choices=DATASETS, default="fashion-mnist")
    p.add_argument("--data-path", default=None, help="folder with the IDX files (default: MOESTAT_DATA or /usr/share/datasets/<dataset>)")
    p.add_argument("--gate", default="dense", help="one gate (ignored with --compare)")
    p.add_argument("--compare", default=None, help="comma-separated gates, 'all' (every gate) and/or 'thesis' (every thesis method)")
    p.add_argument("--experts", type=positive_int, default=8)
    p.add_argument("--k", type=positive_int, default=2)
    p.add_argument("--epochs", type=positive_int, default=10)
    p.add_argument("--seeds", type=positive_int, default=3)
    p.add_argument("--base-seed", type=int, default=0)
    p.add_argument("--batch-size", type=positive_int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-schedule", choices=("constant", "cosine"), default="constant")
    p.add_argument("--expert-hidden", type=positive_int, default=64)
    p.add_argument("--gate-hidden", type=int, default=0, help="gate MLP hidden width (0: linear router)")
    p.add_argument("--shared-hidden", type=int, default=0, help="shared feature extractor width (0: none)")
    p.add_argument("--combine", choices=("probs", "logits"), default="probs")
    p.add_argument("--method", choices=("mixture", "stochastic"), default=None, help="override the gate's training method")
    p.add_argument("--tau", type=nonneg_float, default=1.0, help="perturbed cosine tau1 = tau2")
    p.add_argument("--temperature", type=float, default=1.0, help="cosine score divisor")
    p.add_argument("--no-k1-fix", action="store_true", help="literal top-1 softmax (zero gate gradient)")
    p.add_argument("--val-fraction", type=float, default=1 / 12)
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--max-train", type=positive_int, default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    p.add_argument("--resume", action="store_true", help="skip the runs already in OUT/runs.jsonl")
    p.add_argument("--summarise-only", action="store_true", help="train nothing; summarise OUT/runs.jsonl")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", required=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat realdata``."""
    a = _parser().parse_args(argv)
    with usage_errors():
        gates = _gate_list(a.compare) if a.compare else _gate_list(a.gate)
        if "softmoe" in gates and not softmoe_available():
            raise ValueError("gate softmoe needs a working moestat.nn.softmoe")
        if a.k > a.experts:
            raise ValueError(f"--k {a.k} must not exceed --experts {a.experts}")
        if not (a.lr > 0):
            raise ValueError(f"--lr must be > 0, got {a.lr}")
        if not (a.temperature > 0):
            raise ValueError(f"--temperature must be > 0, got {a.temperature}")
        if "perturbed_cosine" in gates and a.tau <= 0:
            raise ValueError("--tau must be > 0 for perturbed_cosine (tau = 0 is the gate 'cosine')")
        if a.gate_hidden < 0 or a.shared_hidden < 0 or a.threads < 0:
            raise ValueError("--gate-hidden, --shared-hidden and --threads must be >= 0")
        device = _device(a.device)
        if a.threads:
            torch.set_num_threads(a.threads)
        ds = load_dataset(a.dataset, a.data_path, val_fraction=a.val_fraction, random_state=a.split_seed, max_train=a.max_train)
        ensure_writable_dir(a.out)
    _log(ds.describe())
    summary = run_experiment(
        ds, gates, a.out, seeds=a.seeds, base_seed=a.base_seed, epochs=a.epochs, batch_size=a.batch_size,
        lr=a.lr, lr_schedule=a.lr_schedule, device=device, resume=a.resume, summarise_only=a.summarise_only,
        progress=False if a.no_progress else None,
        n_experts=a.experts, k=a.k, expert_hidden=a.expert_hidden, gate_hidden=a.gate_hidden or None,
        shared_hidden=a.shared_hidden or None, combine=a.combine, method=a.method, tau=a.tau,
        temperature=a.temperature, k1_fix=not a.no_k1_fix,
    )
    print(format_table(summary))
    ref = summary["references"].get("readme_mlp_256_128_100")
    if ref:
        print(f"reference: Fashion-MNIST README, {ref['classifier']} ({ref['preprocessing']} preprocessing): {ref['test_accuracy']}")
    return 0

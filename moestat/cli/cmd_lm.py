"""``moestat lm``: argument parsing for :mod:`moestat.experiments.lm`."""

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
    learning_rate,
    positive_finite,
    prepare_out,
    name_choice,
    nonneg_float,
    positive_int,
    usage_errors,
)
from moestat.data.text_corpus import CORPORA, load_corpus
from moestat.devices import resolve_device
from moestat.experiments import lm as _lm
from moestat.io import check_run_config, write_run_config
from moestat.nn.lm_routers import LM_ROUTERS

__all__ = ["build_parser", "main"]


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="moestat lm",
        description=_lm.__doc__.split("\n\n")[0],
        epilog=(
            "examples:\n"
            "  moestat lm --out runs/lm                      # cpu preset, kjv corpus, 3 routers x 3 seeds\n"
            "  moestat lm --routers cosine,perturbed --seeds 1 --steps 200 --out runs/quick\n"
            "  moestat lm --preset small --corpus enwik8 --data-path ~/data/enwik8 --device cuda --out runs/enwik8\n"
            "the kjv corpus needs the Debian packages bible-kjv and bible-kjv-text (apt-get install bible-kjv)"
        ),
    )
    p.add_argument("--corpus", choices=CORPORA, default="kjv", help="kjv (offline, Debian package), enwik8, text8 or any UTF-8 file")
    p.add_argument("--data-path", default=None, help="the enwik8 / text8 / text file (or its folder); default: the kjv text of the Debian package")
    p.add_argument("--max-chars", type=positive_int, default=None, help="keep only the first N characters (kjv, file; default: all)")
    p.add_argument("--routers", type=name_choice(LM_ROUTERS, many=True), default=list(LM_ROUTERS),
                   help=f"comma-separated routers among {', '.join(LM_ROUTERS)}")
    p.add_argument("--preset", choices=tuple(_lm.PRESETS), default="cpu", help="model and training sizes: cpu (minutes on 2 cores) or small (for a GPU)")
    p.add_argument("--seeds", type=positive_int, default=3, help="runs per router")
    add_seed(p, help="seed of the first run; run s of a router uses --seed + s")
    g = p.add_argument_group("overrides of the preset")
    sizes = {
        "steps": "optimiser steps per run", "batch_size": "windows per step",
        "eval_every": "steps between validation evaluations", "eval_symbols": "validation characters per evaluation",
        "context": "characters per window", "d_model": "model width", "n_layers": "Transformer blocks",
        "n_heads": "attention heads", "n_experts": "experts per MoE layer", "k": "experts kept per token",
        "expert_hidden": "hidden width of each expert", "router_dim": "projection dimension of the cosine routers",
    }
    for name, what in sizes.items():
        g.add_argument("--" + name.replace("_", "-"), type=positive_int, default=None, help=f"{what} (default: the preset's)")
    g.add_argument("--lr", type=learning_rate, default=None, help="Adam learning rate (default: the preset's)")
    g.add_argument("--temperature", type=positive_finite, default=None, help="cosine score divisor (default 0.3)")
    g.add_argument("--tau", type=nonneg_float, default=None, help="perturbed cosine tau1 = tau2 (default 0.1)")
    g.add_argument("--balance-coef", type=nonneg_float, default=None, help="Switch balance loss weight (default 0.01)")
    g.add_argument("--dropout", type=nonneg_float, default=None, help="dropout rate (default 0)")
    add_device(p)
    p.add_argument("--precision", choices=_lm.PRECISIONS, default="fp32",
                   help="training arithmetic: fp32, or bf16 autocast with float32 weights (for a GPU) (default fp32)")
    add_threads(p)
    add_resume(p, help="skip the runs already in OUT/runs.jsonl")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_quiet(p)
    add_out(p, "lm")
    return p


_TRAIN = ("steps", "batch_size", "eval_every", "eval_symbols", "lr")
_MODEL = ("context", "d_model", "n_layers", "n_heads", "n_experts", "k", "expert_hidden", "router_dim", "temperature",
          "tau", "balance_coef", "dropout")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat lm``."""
    a = build_parser().parse_args(argv)
    with usage_errors():
        routers = a.routers if isinstance(a.routers, list) else [a.routers]
        train_o = {k: getattr(a, k) for k in _TRAIN if getattr(a, k) is not None}
        model_o = {k: getattr(a, k) for k in _MODEL if getattr(a, k) is not None}
        if "lr" in train_o and not train_o["lr"] > 0:
            raise ValueError(f"--lr must be > 0, got {train_o['lr']}")
        if "dropout" in model_o and not 0 <= model_o["dropout"] < 1:
            raise ValueError(f"--dropout must be in [0, 1), got {model_o['dropout']}")
        if "temperature" in model_o and not model_o["temperature"] > 0:
            raise ValueError(f"--temperature must be > 0, got {model_o['temperature']}")
        tk = {**_lm.PRESETS[a.preset]["train"], **train_o}
        if tk["steps"] % tk["eval_every"]:
            raise ValueError(f"--steps {tk['steps']} must be a multiple of --eval-every {tk['eval_every']}")
        mk = {**_lm.PRESETS[a.preset]["model"], **model_o}
        if mk["k"] > mk["n_experts"]:
            raise ValueError(f"--k {mk['k']} must not exceed --n-experts {mk['n_experts']}")
        if mk["d_model"] % mk["n_heads"]:
            raise ValueError(f"--d-model {mk['d_model']} must be a multiple of --n-heads {mk['n_heads']}")
        device = str(resolve_device(a.device))  # checked by the parser; resolves auto
        corpus = load_corpus(a.corpus, a.data_path, max_chars=a.max_chars)
        if len(corpus.val) < mk["context"] + 1 or len(corpus.test) < mk["context"] + 1:
            raise ValueError(f"the validation / test parts are shorter than one window of {mk['context']} + 1")
        # the settings the runs in OUT share (runs.jsonl keys them by router and seed only)
        settings = {"corpus": a.corpus, "data_path": a.data_path, "max_chars": a.max_chars, "preset": a.preset, **tk, **mk}
        if a.precision != "fp32":  # only then: the runs of an OUT written before the flag resume as they did
            settings["precision"] = a.precision
        check_run_config(a.out, settings, a.resume)
        prepare_out(a.out, a.resume)
        write_run_config(a.out, settings, {"routers": routers, "seeds": a.seeds, "seed": a.seed})
    apply_threads(a)
    if not a.quiet:
        sys.stderr.write(corpus.describe() + "\n")
    summary = _lm.run_experiment(
        corpus, routers, a.out, preset=a.preset, seeds=a.seeds, base_seed=a.seed, model_overrides=model_o,
        train_overrides=train_o, device=device, resume=a.resume,
        progress=False if (a.no_progress or a.quiet) else None, verbose=not a.quiet, precision=a.precision,
    )
    if not a.quiet:
        print(_lm.format_table(summary))
    return 0

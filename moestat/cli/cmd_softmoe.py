"""``moestat softmoe``: argument parsing for :mod:`moestat.experiments.softmoe_norm_target` and
:mod:`moestat.experiments.softmoe_subsets` (the Soft MoE implicit-bias paper, 2024)."""

from __future__ import annotations

import argparse
from typing import Sequence


from moestat.cli.common import (
    ArgumentParser,
    add_device,
    add_n_jobs,
    add_threads,
    apply_threads,
    add_out,
    add_quiet,
    add_seed,
    cleaned_on_interrupt,
    NOTHING_KEPT,
    prepare_out,
    int_list,
    learning_rate,
    seed_int,
    nonneg_float,
    positive_int,
    usage_errors,
)
from moestat.data.images import check_idx_header, find_idx_files
from moestat.experiments.softmoe_norm_target import run_norm_target, write_norm_outputs
from moestat.experiments.softmoe_subsets import run_subsets, subset_sizes, write_subset_outputs
from moestat.nn.softmoe import parse_tokenisation
from moestat.resources import check_memory

__all__ = ["build_parser", "main"]

# Both experiments write their tables and figures at the end; Ctrl-C keeps nothing, and says so.
ON_INTERRUPT = NOTHING_KEPT


def _seed_alias(p: ArgumentParser) -> None:
    # --random-state was this command's spelling of --seed; kept as a hidden alias
    p.add_argument("--random-state", dest="seed", type=seed_int, help=argparse.SUPPRESS)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="moestat softmoe",
                       description="Soft MoE experiments of the Soft MoE implicit-bias paper (2024): the ||X||_2 "
                                   "target (Appendix B, Theorem 1) and expert subsets (Algorithm 1).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    a = sub.add_parser("norm-target", help="Appendix B: ||X||_2 with n experts at a fixed expert budget",
                       description="The paper's Appendix B and the Theorem 1 witness.\n\nExample:\n"
                                   "  moestat softmoe norm-target --steps 3000 --seeds 5 --out results/norm")
    a.add_argument("--steps", type=positive_int, default=3000, help="Adam steps, a fresh batch each (default 3000)")
    a.add_argument("--seeds", type=positive_int, default=5, help="seeds per configuration (default 5)")
    a.add_argument("--tokens", default="5x2,2x5", help="comma-separated tokenisations m x d of R^10 (default 5x2,2x5)")
    a.add_argument("--experts", type=int_list, default=[1, 2, 5, 10], help="numbers of experts (default 1,2,5,10)")
    a.add_argument("--batch-size", type=positive_int, default=256, help="samples per Adam step")
    a.add_argument("--lr", type=learning_rate, default=1e-3, help="Adam learning rate (> 0)")
    a.add_argument("--budget-factor", type=nonneg_float, default=10.0, help="expert width c*d/n (default c=10)")
    a.add_argument("--eval-size", type=positive_int, default=20000, help="fresh samples for the final mean squared error")
    add_seed(a)
    _seed_alias(a)
    add_device(a)
    add_n_jobs(a)
    add_threads(a)
    add_out(a, "softmoe-norm-target")
    add_quiet(a)
    b = sub.add_parser("subsets", help="Algorithm 1 vs random and exhaustive expert subsets",
                       description="The paper's Sections 4.2-4.4 on digits, Fashion-MNIST or the ||X|| task.\n\n"
                                   "Example:\n  moestat softmoe subsets --dataset digits --experts 4,8,16 "
                                   "--model-seeds 5 --out results/digits")
    b.add_argument("--dataset", choices=("digits", "fashion-mnist", "norm"), default="digits", help="scikit-learn digits, Fashion-MNIST (IDX files) or the ||X||_2 regression task")
    b.add_argument("--arch", choices=("conv", "patch"), default=None,
                   help="classifier: conv stem -> 9 tokens -> LayerNorm -> Soft MoE (no residual) -> linear head, or "
                        "patch tokens -> Soft MoE -> linear head (the paper's MNIST model); default conv for digits, "
                        "patch for fashion-mnist")
    b.add_argument("--channels", type=int_list, default=[32, 64], help="conv stem channels (default 32,64)")
    b.add_argument("--grid", type=positive_int, default=3, help="conv model: grid x grid tokens (default 3)")
    b.add_argument("--no-token-norm", action="store_true", help="conv model: no LayerNorm before the Soft MoE layer")
    b.add_argument("--split", choices=("test", "val"), default="test",
                   help="evaluate on the test split, or on a validation split carved from the training split "
                        "(for choosing settings; default test)")
    b.add_argument("--split-seed", type=seed_int, default=0,
                   help="seed of the digits test split and of the validation split (default 0: the split of every "
                        "digits run)")
    b.add_argument("--experts", type=int_list, default=[4, 8, 16], help="numbers of experts n, one model per n and model seed")
    b.add_argument("--k-fracs", type=int_list, default=[4, 8], help="k = n / f for each f (default 4,8)")
    b.add_argument("--k", type=int_list, default=None, help="absolute k values (overrides --k-fracs; default: from --k-fracs)")
    b.add_argument("--model-seeds", type=positive_int, default=3, help="models trained per n")
    b.add_argument("--random-seeds", type=positive_int, default=10, help="random k-subsets drawn per test point as the baseline")
    b.add_argument("--epochs", type=positive_int, default=None, help="training epochs (default: 60 digits, 5 fashion-mnist)")
    b.add_argument("--steps", type=positive_int, default=3000, help="Adam steps for --dataset norm")
    b.add_argument("--batch-size", type=positive_int, default=None, help="mini-batch size (default: 64 digits, 256 otherwise)")
    b.add_argument("--lr", type=learning_rate, default=1e-3, help="Adam learning rate (> 0)")
    b.add_argument("--budget-factor", type=nonneg_float, default=None, help="expert width c*d/n (default: c = 4 conv, 16 digits patch, 4 fashion-mnist, 16 norm)")
    b.add_argument("--patch", type=positive_int, default=None, help="patch side of the patch model (default: 4 digits, 14 fashion-mnist)")
    b.add_argument("--tokens", default="5x2", help="tokenisation for --dataset norm")
    b.add_argument("--data-path", default=None, help="Fashion-MNIST IDX folder (default $MOESTAT_DATA/fashion-mnist "
                                                     "or /usr/share/datasets/fashion-mnist)")
    b.add_argument("--max-exhaustive", type=positive_int, default=5000, help="largest number of k-subsets searched exhaustively for the oracle")
    add_seed(b)
    _seed_alias(b)
    add_device(b)
    add_threads(b)
    b.add_argument("--normalize", action="store_true", help="Puigcerver et al.'s normalised router (off in the paper)")
    add_out(b, "softmoe-subsets")
    add_quiet(b)
    return p


SUBCOMMANDS = ("norm-target", "subsets")  # moestat.cli.main prefixes messages with "moestat softmoe <it>"
IMAGE_SIDE = {"digits": 8, "fashion-mnist": 28}  # scikit-learn's 8x8 digits, Fashion-MNIST's 28x28
#: Most experts of one model, as ``moestat toy``: each is a network of its own (100 000 of them ran
#: for minutes before anything was said).
MAX_EXPERTS = 1024


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat softmoe``."""
    args = build_parser().parse_args(argv)
    if args.command == "norm-target":
        with usage_errors():
            tokens = [t.strip() for t in args.tokens.split(",")]
            if not all(tokens):
                raise ValueError(f"--tokens {args.tokens!r}: expected a comma list of MxD tokenisations such as 5x2,10x1")
            for t in tokens:
                m, d = parse_tokenisation(t)
                if m * d != 10:
                    raise ValueError(f"--tokens {t!r} must multiply to 10, the dimension of X")
            if args.lr <= 0 or args.budget_factor <= 0:
                raise ValueError("--lr and --budget-factor must be positive")
            if max(args.experts) > MAX_EXPERTS:  # each expert is a network of its own (as moestat toy)
                raise ValueError(f"--experts must be at most {MAX_EXPERTS} (the paper's Appendix B uses 1 to 10), "
                                 f"got {max(args.experts)}")
            # the fresh evaluation samples are drawn at once: X (10 numbers) and y, float32 -- a lower bound
            check_memory(4.0 * 11 * args.eval_size, f"--eval-size {args.eval_size}: the evaluation samples would",
                         "lower --eval-size")
            prepare_out(args.out, None)
        apply_threads(args, args.n_jobs)
        with cleaned_on_interrupt(args.out):
            result = run_norm_target(tokens, args.experts, args.steps, args.seeds, args.batch_size, args.lr,
                                     args.budget_factor, args.eval_size, args.seed, device=args.device,
                                     n_jobs=args.n_jobs)
        write_norm_outputs(result, args.out, echo=not args.quiet)
        return 0
    with usage_errors():
        if args.lr <= 0 or (args.budget_factor is not None and args.budget_factor <= 0):
            raise ValueError("--lr and --budget-factor must be positive")
        if args.dataset == "norm":
            parse_tokenisation(args.tokens)
            if args.arch is not None:
                raise ValueError("--arch applies to the image datasets only, not to --dataset norm")
        elif (args.arch or ("conv" if args.dataset == "digits" else "patch")) == "conv" and args.patch is not None:
            raise ValueError("--patch applies to --arch patch only (the conv model's tokens come from --grid)")
        if args.dataset != "norm" and args.grid > IMAGE_SIDE[args.dataset]:
            # the conv stem keeps the image side (3x3 kernels, padding 1); pooling it to a larger
            # grid only repeats cells, and grid^2 tokens make every layer and the subset search grow
            side = IMAGE_SIDE[args.dataset]
            raise ValueError(f"--grid {args.grid} exceeds the {args.dataset} image side {side} (the conv model pools "
                             f"the {side}x{side} feature map to grid x grid tokens)")
        if max(args.experts) > MAX_EXPERTS:
            raise ValueError(f"--experts must be at most {MAX_EXPERTS} (the paper's Sections 4.2-4.4 use 4 to 16), "
                             f"got {max(args.experts)}")
        elif args.patch is not None:
            side = IMAGE_SIDE[args.dataset]  # the model would refuse it only after --out exists
            if args.patch < 1 or side % args.patch:
                raise ValueError(f"--patch {args.patch} must divide the {args.dataset} image side {side} "
                                 f"(e.g. {', '.join(str(p) for p in range(1, side + 1) if side % p == 0)})")
        if not any(subset_sizes(n, args.k_fracs, args.k) for n in args.experts):
            raise ValueError("no (n, k) pair to evaluate: check --experts and --k-fracs/--k")
        if args.dataset == "fashion-mnist":
            for f in find_idx_files("fashion-mnist", args.data_path).values():  # fail before --out is created,
                check_idx_header(f)  # as realdata does: random bytes are refused naming the file
        prepare_out(args.out, None)
    apply_threads(args)
    with cleaned_on_interrupt(args.out):
        result = run_subsets(args.dataset, args.experts, args.k_fracs, args.k, args.model_seeds, args.random_seeds,
                             args.epochs, args.steps, args.batch_size, args.lr, args.budget_factor, args.patch,
                             args.tokens, args.data_path, args.max_exhaustive, args.seed, args.device,
                             normalize=args.normalize, progress=False if args.quiet else None, arch=args.arch,
                             channels=args.channels, grid=args.grid, token_norm=not args.no_token_norm,
                             split=args.split, split_seed=args.split_seed)
    write_subset_outputs(result, args.out, echo=not args.quiet)
    return 0

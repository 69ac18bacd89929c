"""Reproduce every figure and table of the Soft MoE implicit-bias paper (2024) recorded in docs/guide/softmoe.rst.

Record: none under records/ (its numbers are recorded in docs/guide/softmoe.rst itself).

Usage::

    OMP_NUM_THREADS=1 python studies/softmoe/run_all.py --out results/softmoe [--only norm,digits,...]

Each step prints the command it runs; outputs go to ``<out>/<step>/``.  Steps:

- ``norm``        Appendix B / Theorem 1 at the package default (3000 Adam steps, batch 256, 5 seeds);
- ``norm-paper``  the paper's protocol read literally (batch 10,000, 500 steps, 5 seeds; slower);
- ``digits``      Algorithm 1 vs random vs exhaustive on scikit-learn digits, n in {4, 8, 16}, k = n/2, n/4, n/8, conv model
                  (conv stem -> 9 tokens -> LayerNorm -> Soft MoE, no residual), 5 models per n, test split;
- ``digits-val``  the same on the validation split carved from the training split (model selection);
- ``digits-val-nonorm`` conv model without the LayerNorm before the Soft MoE (ablation, validation split);
- ``digits-val-patch`` the patch model below on the same validation split, 5 models per n;
- ``digits-patch`` the paper's MNIST-style model (4 tokens of 4x4 -> Soft MoE -> linear head), 3 models per n;
- ``digits-p2``   the patch model with 16 tokens of 2x2 pixels instead of 4 tokens of 4x4 (ablation);
- ``fashion``     Fashion-MNIST, the paper's MNIST model (4 tokens of 14x14, width 784/n), if installed;
- ``norm-subsets`` Algorithm 1 on the ||X|| regressor (5x2 tokens).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from moestat.cli.common import ArgumentParser

STEPS = {
    "norm": ["norm-target"],
    "norm-paper": ["norm-target", "--steps", "500", "--batch-size", "10000"],
    "digits": ["subsets", "--dataset", "digits", "--arch", "conv", "--model-seeds", "5", "--k-fracs", "2,4,8"],
    "digits-val": ["subsets", "--dataset", "digits", "--arch", "conv", "--model-seeds", "5", "--split", "val"],
    "digits-val-nonorm": ["subsets", "--dataset", "digits", "--arch", "conv", "--model-seeds", "5", "--split", "val",
                          "--no-token-norm"],
    "digits-val-patch": ["subsets", "--dataset", "digits", "--arch", "patch", "--model-seeds", "5", "--split", "val"],
    "digits-patch": ["subsets", "--dataset", "digits", "--arch", "patch"],
    "digits-p2": ["subsets", "--dataset", "digits", "--arch", "patch", "--patch", "2", "--budget-factor", "256"],
    "fashion": ["subsets", "--dataset", "fashion-mnist", "--model-seeds", "2"],
    "norm-subsets": ["subsets", "--dataset", "norm", "--experts", "4,8,16", "--k-fracs", "2,4,8"],
}


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])  # the doors' parser: a bad option is one line, exit 2
    p.add_argument("--out", required=True)
    p.add_argument("--only", default=",".join(STEPS), help="comma-separated subset of " + ",".join(STEPS))
    a = p.parse_args(argv)
    unknown = [name for name in a.only.split(",") if name not in STEPS]
    if unknown:  # refused before any step runs, not after the steps before it
        p.error(f"unknown step {unknown[0]!r} (known: {', '.join(STEPS)})")
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    for name in a.only.split(","):
        if name == "fashion" and not (Path(os.environ.get("MOESTAT_DATA", "/nonexistent")) / "fashion-mnist").is_dir() \
                and not Path("/usr/share/datasets/fashion-mnist").is_dir():
            print("skipping fashion: dataset-fashion-mnist not installed (set MOESTAT_DATA)")
            continue
        cmd = [sys.executable, "-m", "moestat", "softmoe", *STEPS[name], "--out", str(Path(a.out) / name)]
        print("$", " ".join(shlex.quote(c) for c in cmd), flush=True)
        rc = subprocess.call(cmd, env=env)
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

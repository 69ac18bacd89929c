"""Slopes from the committed result arrays of CRPE-GMoE (Nguyen, Nguyen, Nguyen & Ho 2024, the
authors' code of the Gaussian-gated MoE paper), beside moestat's judgement of the same arrays.

Reads ``results_GLLiM/result_model{m}_K{K}_n100000_rep20_{loss,iters}.npy`` (100 sample sizes x 20
replicates) from a CRPE-GMoE checkout -- a work tree, or a bare git directory such as the one the
``fetch`` tool leaves (files read with ``git show HEAD:<path>``) -- and writes, per (model, K):

* ``their_slope``: their plotting rule (plotting_GLLiM.py): OLS of log(mean loss) on log n over all
  100 sizes (n0 = 0), and the same from n = 500 on (n0 = 5);
* ``moestat``: :func:`moestat.rates.fit.fit_rates` on the per-replicate losses -- slope, 95% CI,
  Theil-Sen slope, category and reason against the predicted -1/2;
* ``iters``: the distinct values of their committed EM iteration counts.

Nothing of their code is run or copied; only their ``.npy`` arrays are read.

Usage::

    python records/catalogue/crpe_gmoe.py /work/.mirror/Trung-TinNGUYEN+CRPE-GMoE/repo \\
        --json records/catalogue/crpe_gmoe.json
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

#: their grid (experiment.py): 5 sizes in [100, 500], 95 in [500, 1e5]
NS = np.concatenate([np.linspace(100, 500, 5), np.linspace(500, 100000, 95)])


def _load(repo: Path, rel: str) -> np.ndarray:
    if (repo / rel).is_file():
        return np.load(repo / rel)
    blob = subprocess.run(["git", f"--git-dir={repo}", "show", f"HEAD:{rel}"], check=True, capture_output=True).stdout
    return np.load(io.BytesIO(blob))


def _ols(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.polyfit(x, y, 1)[0])


def main(argv: list[str] | None = None) -> int:
    from moestat.cli.common import ArgumentParser
    from moestat.rates.fit import fit_rates

    ap = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("repo", type=Path, help="CRPE-GMoE checkout (work tree or bare git directory)")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    if not args.repo.is_dir():
        ap.error(f"{args.repo}: no such folder (a CRPE-GMoE work tree or bare git directory)")
    commit = subprocess.run(["git", f"--git-dir={args.repo}" if (args.repo / "HEAD").is_file() else f"--git-dir={args.repo / '.git'}",
                             "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    for m in (1, 2, 3, 4):
        for K in (4, 5):
            stem = f"results_GLLiM/result_model{m}_K{K}_n100000_rep20"
            D = _load(args.repo, f"{stem}_loss.npy")
            iters = _load(args.repo, f"{stem}_iters.npy")
            x, y = np.log(NS), np.log(D.mean(axis=1))
            n_int = NS.astype(int)
            df = pd.DataFrame({"router": "crpe", "n": np.repeat(n_int, D.shape[1]),
                               "replicate": np.tile(np.arange(D.shape[1]), len(NS)), "converged": True,
                               "voronoi": D.ravel()})
            fit = fit_rates(df, losses=["voronoi"], setting="over", estimator="mle", routers=["crpe"], n_boot=1000,
                            seed=0, predicted={"voronoi": -0.5})[0]
            rows.append({
                "model": m, "K": K, "shape": list(D.shape),
                "their_slope_all_n": round(_ols(x, y), 4), "their_slope_n_ge_500": round(_ols(x[5:], y[5:]), 4),
                "moestat": {"slope": fit["slope"], "ci": [fit["ci_low"], fit["ci_high"]],
                            "theil_sen": (fit.get("robust") or {}).get("slope"), "category": fit.get("category"),
                            "reason": fit.get("reason")},
                "iters_distinct": sorted(set(np.unique(iters).tolist())),
            })
            print(f"model {m} K {K}: their OLS {rows[-1]['their_slope_all_n']:+.3f} (n>=500 {rows[-1]['their_slope_n_ge_500']:+.3f}); "
                  f"moestat {fit['slope']:+.3f} [{fit['ci_low']:+.3f}, {fit['ci_high']:+.3f}] {fit.get('category')}; "
                  f"EM iterations recorded: {rows[-1]['iters_distinct']}")
    out = {"source": "github:Trung-TinNGUYEN/CRPE-GMoE", "commit": commit, "grid": "5 sizes in [100, 500], 95 in [500, 1e5]; 20 replicates",
           "predicted": -0.5, "rows": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Figure 1(b)'s perturbed rates (``fig1b40w``, seeds 0, 1, 2) judged on the per-``n`` median.

Declared before it was computed (``records/declarations/figure1/README.md``, 2026-12-02): Theorems 5 and 6
of Nguyen et al. (2024) are ``O_P`` statements, as the catalogue's are, so the recorded rows of the
three seeds are fitted again as ``moestat rates --resume --statistic median`` would, without
refitting a model: each seed's ``results.csv`` and ``extras.csv`` read with the configuration of its
``provenance.json`` (only the analysis setting ``statistic`` changed), every loss judged by
:func:`moestat.rates.fit.fit_experiment`, the mean's verdict kept beside (``mean_statistic``).
Deterministic (the bootstrap streams are the run's).  Run::

    PYTHONPATH=. python records/figure1/fig1b40w_median.py --json records/archive/figure1/fig1b40w_median.json

``--preset fig1b124w`` (or ``fig1b124x``) reads ``records/figure1/PRESET/seed{0,1,2}`` instead (the same
design with 124 replicates, declared in the same file).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SEEDS = (0, 1, 2)
#: the losses of Theorem 5 the composite figure and theory.rst report
LOSSES = ("voronoi", "param_single", "param_multi", "weighted_single", "weighted_multi")


def rejudge(run: Path) -> list[dict]:
    """The fits of one recorded run on the per-n median (the mean beside), for :data:`LOSSES`."""
    from moestat.rates.config import RatesConfig
    from moestat.rates.extras import merge_extras
    from moestat.rates.fit import fit_experiment
    from moestat.rates.resolve import Experiment
    from moestat.rates.store import read_results

    cfg = RatesConfig.from_dict(json.loads((run / "provenance.json").read_text(encoding="utf-8"))["config"])
    experiment = Experiment.of(cfg.replace(statistic="median"))
    df = merge_extras(read_results(run / "results.csv", experiment), run / "extras.csv")
    keep = ("loss", "slope", "ci_low", "ci_high", "category", "reason", "mean_statistic")
    return [{k: f.get(k) for k in keep} for f in fit_experiment(df, experiment) if f["loss"] in LOSSES]


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    from moestat.cli.common import ArgumentParser
    from moestat.io import atomic_write_json

    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True, help="where to write the record")
    ap.add_argument("--preset", default="fig1b40w", choices=("fig1b40w", "fig1b124w", "fig1b124x"),
                    help="whose recorded seeds to read (records/figure1/PRESET/seed{0,1,2})")
    a = ap.parse_args(argv)
    if not a.json.parent.is_dir():
        ap.error(f"--json: folder {a.json.parent} does not exist")
    runs = HERE / a.preset if (HERE / a.preset).is_dir() else ROOT / "records" / "archive" / "figure1" / a.preset
    rec = {"runs": f"records/figure1/{a.preset}/seed{{0,1,2}}", "statistic": "median",
           "declared": "records/declarations/figure1/README.md", "seeds": {}}
    for s in SEEDS:
        rec["seeds"][str(s)] = fits = rejudge(runs / f"seed{s}")
        for f in fits:
            m = f["mean_statistic"] or {}
            print(f"seed {s} {f['loss']:<16} median {f['slope']:+.3f} [{f['ci_low']:+.2f}, {f['ci_high']:+.2f}] "
                  f"{f['category']:<13} | mean {m.get('slope', float('nan')):+.3f} {m.get('category')}")
    atomic_write_json(a.json, rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())

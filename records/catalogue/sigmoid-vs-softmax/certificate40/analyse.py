"""Summarise the best-of-five certificate of sigmoid-vs-softmax at the record's design (HYPOTHESES.md, declared at 7f18fed).

Usage: ``python records/catalogue/sigmoid-vs-softmax/certificate40/analyse.py [FOLDER]`` (``FOLDER`` holds the
grown ``sigmoid/`` and ``softmax/`` runs; default: this script's folder); prints the JSON quoted in ``how.json``'s
``found``.  The declared check: every near-truth row equals the 40-replicate record's row
(``sigmoid-vs-softmax/{sigmoid,softmax}/results.csv``, the same streams).  The paired contrasts are
:func:`moestat.rates.verdicts.paired_contrast` of softmax (the arm the paper calls slower) against sigmoid, at
the near-truth fit (the record's contrast again) and at the best of the five starts (``best_*``).
"""
import json
import sys
from pathlib import Path

import pandas as pd

from moestat.rates.verdicts import paired_arrays, paired_contrast

HERE = Path(__file__).resolve().parent
RECORD = HERE.parent


def arm_summary(rows: pd.DataFrame, record: pd.DataFrame) -> dict:
    """Per-n counts of beaten near-truth fits and medians, and the equality with the record's rows."""
    same = rows.merge(record, on=["n", "replicate"], suffixes=("", "_record"))
    rel = lambda c: float((abs(same[c] - same[c + "_record"]) / abs(same[c + "_record"])).max())  # noqa: E731
    per_n = {}
    for n, g in rows.groupby("n"):
        beaten = g[g.beaten == 1]
        per_n[int(n)] = {"fits": len(g), "converged": int(g.converged.sum()), "beaten": len(beaten),
                         "beaten_farther_in_param_multi": int((beaten.best_param_multi > beaten.param_multi).sum()),
                         "param_multi_median_near_best": [float(g.param_multi.median()), float(g.best_param_multi.median())]}
    return {"per_n": per_n, "statuses": rows.status.value_counts().to_dict(),
            "record_rows_equal": {"rows": len(same), "of": len(record), "max_rel_objective": rel("objective"),
                                  "max_rel_param_multi": rel("param_multi"),
                                  "n_iter_equal": bool((same.n_iter == same.n_iter_record).all())}}


def main(folder: Path) -> dict:
    arms = {}
    out = {}
    for arm in ("sigmoid", "softmax"):
        r = pd.read_csv(folder / arm / "results.csv")
        arms[arm] = r.merge(pd.read_csv(folder / arm / "extras.csv"), on=["router", "n", "replicate"])
        out[arm] = arm_summary(arms[arm], pd.read_csv(RECORD / arm / "results.csv"))
    contrasts = {}
    for loss in ("param_multi", "best_param_multi", "D2_gate", "best_D2_gate"):
        ns, slow, fast = paired_arrays(arms["softmax"], arms["sigmoid"], loss)
        for statistic in ("median", "mean"):
            c = paired_contrast(ns, slow, fast, statistic=statistic)
            contrasts[f"{loss} ({statistic})"] = {k: c.get(k) for k in ("category", "slope_a", "slope_b", "difference", "ci",
                                                                         "n_boot", "pairs")}
    out["paired_contrasts_softmax_minus_sigmoid"] = contrasts
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE), indent=1, default=float))

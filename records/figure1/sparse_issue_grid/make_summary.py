"""Summarise the issue's sparse command beside the dense main job (records/figure1/sparse_issue_grid).

Reads runs/{sparse1,dense1}/results.csv (the other runs' rows were identical apart from time and
crc32; how.json) and times/*.txt (/usr/bin/time lines), writes summary.json.  Imports nothing of
moestat.  Run from the repository root: python records/figure1/sparse_issue_grid/make_summary.py
"""
import json
import re
import statistics
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent


def times(kind: str) -> list[dict]:
    out = []
    for p in sorted((HERE / "times").glob(f"{kind}*.txt")):
        m = re.search(r"WALL ([\d.]+) USER ([\d.]+) RSS_KB (\d+)", p.read_text())
        out.append({"run": p.stem, "wall_s": float(m[1]), "user_s": float(m[2]), "peak_rss_mb": round(int(m[3]) / 1024)})
    return out


def rows(kind: str) -> dict:
    d = pd.read_csv(HERE / "runs" / f"{kind}1" / "results.csv")
    below = d[d.truth_check != "above"]
    return {"rows": len(d), "truth_check": d.truth_check.value_counts().to_dict(), "status": d.status.value_counts().to_dict(),
            "median_n_iter": float(d.n_iter.median()),
            "median_n_iter_per_n": {int(k): float(v) for k, v in d.groupby("n").n_iter.median().items()},
            "fitting_s": round(float(d.time.sum()), 1),
            "not_above": below[["n", "replicate", "status", "truth_check", "truth_gap", "n_iter"]].to_dict("records")}


sparse, dense = times("sparse"), times("dense")
ms, md = statistics.median(t["wall_s"] for t in sparse), statistics.median(t["wall_s"] for t in dense)
summary = {"sparse": {"times": sparse, "median_wall_s": ms, **rows("sparse")},
           "dense": {"times": dense, "median_wall_s": md, **rows("dense")},
           "wall_ratio_median": round(ms / md, 1)}
(HERE / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
print(json.dumps({k: summary[k] for k in ("wall_ratio_median",)}), ms, md)

"""Recompute every current record's recorded slopes from its rows, without moestat (issue 59).

For every rates run folder under a record of ``records/index.toml`` with status ``current`` (a folder
holding ``results.csv``, ``provenance.json`` and ``summary.json``), and every fit of its
``summary.json`` with a slope: the run's statistic per sample size (the fit's ``statistic``, else the
configuration's, default ``mean``) of the finite positive losses of that router (``results.csv``
joined with ``extras.csv`` on router, n, replicate), over the summary's window, sizes with at least 2
such values; the OLS slope of log statistic on log n; and its difference from the recorded slope
(agreement: within 0.02).  Imports numpy and pandas only (no moestat), so it checks the records
independently of the code that wrote them.

Usage (from the repository root)::

    python records/recompute_slopes.py            # prints the table, writes records/recompute_slopes.json
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "records" / "recompute_slopes.json"
TOLERANCE = 0.02
KEY = ["router", "n", "replicate"]


def run_folders(root: Path = ROOT) -> list[Path]:
    """Every rates run folder under a current record (nested records listed once)."""
    index = tomllib.loads((root / "records" / "index.toml").read_text(encoding="utf-8"))["record"]
    found: set[Path] = set()
    for rec in index:
        path = root / rec["path"]
        if rec["status"] == "current" and path.is_dir():
            found.update(s.parent for s in path.rglob("summary.json")
                         if (s.parent / "results.csv").is_file() and (s.parent / "provenance.json").is_file())
    return sorted(found)


def rows(folder: Path) -> pd.DataFrame:
    """``results.csv`` joined with ``extras.csv`` (when there is one)."""
    df = pd.read_csv(folder / "results.csv")
    if (folder / "extras.csv").is_file():
        ex = pd.read_csv(folder / "extras.csv")
        ex = ex[[c for c in ex.columns if c in KEY or c not in df.columns]]
        df = df.merge(ex.drop_duplicates(KEY, keep="last"), on=KEY, how="left")
    return df


def ols_slope(ns, stats) -> float:
    x, y = np.log(np.asarray(ns, float)), np.log(np.asarray(stats, float))
    return float(np.polyfit(x, y, 1)[0])


def recompute(folder: Path) -> list[dict]:
    """One entry per fit with a recorded slope: router, loss, statistic, recorded and recomputed slope."""
    s = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    df = rows(folder)
    lo, hi = s["window"]["n_min"], s["window"]["n_max"]
    default = (s.get("config") or {}).get("statistic") or "mean"
    out = []
    for f in s["fits"]:
        if f.get("slope") is None:
            continue
        stat = f.get("statistic") or default
        entry = {"router": f["router"], "loss": f["loss"], "statistic": stat, "recorded": f["slope"], "recomputed": None}
        if f["loss"] in df.columns:
            sub = df[(df["router"] == f["router"]) & (df["n"] >= lo) & (df["n"] <= hi)]
            ns, vals = [], []
            for n, part in sub.groupby("n"):
                v = pd.to_numeric(part[f["loss"]], errors="coerce").to_numpy(float)
                v = v[np.isfinite(v) & (v > 0)]
                if v.size >= 2:
                    ns.append(n)
                    vals.append(np.median(v) if stat == "median" else np.mean(v))
            if len(ns) >= 2:
                entry["recomputed"] = ols_slope(ns, vals)
        entry["difference"] = None if entry["recomputed"] is None else entry["recomputed"] - entry["recorded"]
        entry["agrees"] = entry["difference"] is not None and abs(entry["difference"]) <= TOLERANCE
        out.append(entry)
    return out


def main() -> int:
    report = {"tolerance": TOLERANCE, "runs": {}}
    bad = 0
    print(f"{'run folder':<52} {'router':<22} {'loss':<20} {'stat':<6} {'recorded':>9} {'recomputed':>10}  ok")
    for folder in run_folders():
        rel = folder.relative_to(ROOT).as_posix()
        entries = recompute(folder)
        report["runs"][rel] = entries
        for e in entries:
            bad += not e["agrees"]
            rc = "-" if e["recomputed"] is None else f"{e['recomputed']:+.4f}"
            print(f"{rel:<52} {e['router'][:22]:<22} {e['loss'][:20]:<20} {e['statistic']:<6} {e['recorded']:+9.4f} {rc:>10}  "
                  f"{'yes' if e['agrees'] else 'NO'}")
    n = sum(len(v) for v in report["runs"].values())
    report.update(fits=n, agree=n - bad, disagree=bad)
    OUT.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"{len(report['runs'])} run folders, {n} slopes: {n - bad} agree within {TOLERANCE}, {bad} do not; wrote {OUT.relative_to(ROOT)}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

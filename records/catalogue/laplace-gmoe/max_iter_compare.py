"""Compare two recorded runs of laplace-gmoe's over arm that differ only in ``max_iter`` (issue 33).

The declaration (``records/declarations/catalogue/README.md``, "laplace-gmoe's over arm with
``max_iter`` 4 000") expected every fit that stopped before the old budget to be the same
computation.  This script checks it row by row from the two ``results.csv`` files -- nothing is
refitted -- and says what changed where: the fits whose reported start used fewer than ``max_iter``
iterations of the old run, those that spent the old budget and were then certified (the Newton
polish starts from where EM stopped, so a longer EM can end at another maximum), and those that
stopped at the old budget.  Every compared column but the wall time and the row checksum must be
equal for a row to count as identical.

Usage (from the repository root)::

    python records/catalogue/laplace-gmoe/max_iter_compare.py OLD_RUN NEW_RUN --json OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from moestat.cli.common import ArgumentParser

KEY = ["n", "replicate"]
SKIP = {"time", "crc32"}


def _same(a: pd.Series, b: pd.Series) -> np.ndarray:
    both_nan = a.isna().to_numpy() & b.isna().to_numpy()
    return both_nan | (a.to_numpy() == b.to_numpy())


def compare(old: pd.DataFrame, new: pd.DataFrame, old_max_iter: int) -> dict:
    """The comparison of two runs' rows ``(n, replicate)`` by ``(n, replicate)``."""
    if sorted(map(tuple, old[KEY].to_numpy())) != sorted(map(tuple, new[KEY].to_numpy())):
        raise ValueError("the two runs do not hold the same (n, replicate) rows")
    cols = [c for c in old.columns if c not in SKIP and c not in KEY]
    m = old.merge(new, on=KEY, suffixes=("_old", "_new"))
    same = np.ones(len(m), bool)
    for c in cols:
        same &= _same(m[c + "_old"], m[c + "_new"])
    m["identical"] = same
    m["loglik_change"] = m["fit_objective_new"] - m["fit_objective_old"]
    m["d2_ratio"] = m["voronoi_new"] / m["voronoi_old"]
    groups = {
        f"stopped on a criterion with n_iter < {old_max_iter}": (m["status_old"] != "max_iter") & (m["n_iter_old"] < old_max_iter),
        f"stopped on a criterion with n_iter >= {old_max_iter}": (m["status_old"] != "max_iter") & (m["n_iter_old"] >= old_max_iter),
        "stopped at max_iter": m["status_old"] == "max_iter",
    }
    out: dict = {"rows": int(len(m)), "old_status": old["status"].value_counts().to_dict(),
                 "new_status": new["status"].value_counts().to_dict(), "groups": {}}
    for name, mask in groups.items():
        g = m[mask]
        ch = g[~g["identical"]]
        dl = ch["loglik_change"]
        out["groups"][name] = {
            "fits": int(len(g)), "identical": int(g["identical"].sum()), "changed": int(len(ch)),
            "changed_loglik_up_more_than_1e-6": int((dl > 1e-6).sum()),
            "changed_loglik_down_more_than_1e-6": int((dl < -1e-6).sum()),
            "changed_loglik_within_1e-6": int((dl.abs() <= 1e-6).sum()),
            "largest_loglik_drop": float(dl.min()) if len(ch) else None,
            "largest_loglik_gain": float(dl.max()) if len(ch) else None,
            "d2_ratio_new_over_old": ({"min": float(ch["d2_ratio"].min()), "median": float(ch["d2_ratio"].median()),
                                       "max": float(ch["d2_ratio"].max())} if len(ch) else None),
            "new_status": g["status_new"].value_counts().to_dict(),
        }
    big = m[~m["identical"] & (m["loglik_change"].abs() > 1e-6)].sort_values(KEY, ascending=[False, True])
    out["changed_by_more_than_1e-6_nats"] = [
        {"n": int(r.n), "replicate": int(r.replicate), "status": [r.status_old, r.status_new],
         "n_iter": [int(r.n_iter_old), int(r.n_iter_new)], "loglik_change": round(float(r.loglik_change), 6),
         "D2": [round(float(r.voronoi_old), 6), round(float(r.voronoi_new), 6)]} for r in big.itertuples()]
    out["smallest_margin_over_truth_new"] = float(new["truth_gap"].min()) if "truth_gap" in new else None
    return out


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (2: bad input, one line on stderr, nothing written)."""
    try:
        return _main(argv)
    except SystemExit as exc:  # the parser's one-line error
        return int(exc.code or 0)


def _main(argv: list[str] | None) -> int:
    p = ArgumentParser(prog="max_iter_compare.py", description=__doc__.split("\n\n")[0])
    p.add_argument("old", type=Path, help="the recorded run with the smaller max_iter")
    p.add_argument("new", type=Path, help="the recorded run with the larger max_iter")
    p.add_argument("--json", type=Path, required=True, help="where to write the comparison")
    a = p.parse_args(argv)
    runs = []
    for d in (a.old, a.new):
        if not (d / "results.csv").is_file() or not (d / "provenance.json").is_file():
            p.error(f"{d} is not a recorded run (no results.csv and provenance.json)")
        runs.append(d)
    if not a.json.parent.is_dir():
        p.error(f"--json {a.json}: folder {a.json.parent} does not exist")
    cfg = [json.loads((d / "provenance.json").read_text(encoding="utf-8"))["config"] for d in runs]
    for c in cfg:  # recorded from different copies of the checkout: the file is named by its name
        if c.get("scenario_file"):
            c["scenario_file"] = Path(c["scenario_file"]).name
    differ = sorted(k for k in set(cfg[0]) | set(cfg[1]) if cfg[0].get(k) != cfg[1].get(k) and k not in ("n_jobs", "quiet"))
    if differ != ["max_iter"]:
        p.error(f"the runs must differ in max_iter only; they differ in {', '.join(differ) or 'nothing'}")
    old, new = (pd.read_csv(d / "results.csv") for d in runs)
    report = {"old": str(a.old), "new": str(a.new), "max_iter": [cfg[0]["max_iter"], cfg[1]["max_iter"]],
              **compare(old, new, int(cfg[0]["max_iter"]))}
    a.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    g = report["groups"]
    for name, v in g.items():
        print(f"{name}: {v['fits']} fits, {v['identical']} identical, {v['changed']} changed "
              f"({v['changed_loglik_up_more_than_1e-6']} up, {v['changed_loglik_down_more_than_1e-6']} down by more than 1e-6 nats)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

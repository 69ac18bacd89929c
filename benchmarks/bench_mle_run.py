"""Time the Gaussian-MoE maximum-likelihood run of two checkouts, interleaved (issue 36).

The design is ``moestat rates --preset gmoe_exact`` (150 sizes from 100 to 1e5, 40 replicates x 5
starts: 30 000 fits) with ``--full``; by default a reduced design with the same range of sizes,
``--n-points 15`` (60 work units of 10 replicates x 5 starts, 3 000 fits, 5.1e7 samples x starts:
above :data:`moestat.estimators.em_driver.SWEEP_COMPILE_MIN_SAMPLES`, so its EM is compiled as in
the full design).  Each round runs both checkouts, whole runs (start-up, data, fits, truth check,
losses, store, rate fits, figures), in alternating order (A B, B A, ...), each in its own process
started from the checkout's root (``python -m moestat rates ...``: that checkout's package is
imported).  Wall time, and user and system CPU time of the run and the worker processes it waited
for (``os.wait4``), per run; medians per side, their ratios (``other / base``) and the median of the per-round ratios printed as one JSON
object, with the load average before and after and the agreement of the two last runs'
``results.csv`` (every numeric column but ``time``: largest relative difference, and whether the
statuses are identical; the log-likelihoods are ``fit_objective`` and ``truth_objective``).

Run it on quiet cores (nothing else running) for figures worth quoting::

    python benchmarks/bench_mle_run.py --base /path/to/main --other . --repeats 3           # reduced
    python benchmarks/bench_mle_run.py --base /path/to/main --other . --repeats 2 --full    # ~4 CPU-min a run

Extra ``moestat rates`` flags go after ``--`` (e.g. ``-- --n-jobs 1``).  The first run of a
checkout whose EM pass changed compiles it (about 25 CPU-s, once per cache folder); run
``--warm`` to do one untimed run of each side first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the reduced design: the preset's sizes at 15 log-spaced points instead of 150
REDUCED = ["--preset", "gmoe_exact", "--n-points", "15"]
FULL = ["--preset", "gmoe_exact"]


def run_once(root: Path, args: list[str], out: Path, env: dict) -> dict:
    """One whole ``moestat rates`` run from checkout ``root``; wall and CPU seconds (process tree waited for)."""
    cmd = [sys.executable, "-m", "moestat", "rates", *args, "--quiet", "--out", str(out)]
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: a chatty run cannot block on it
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip()[-400:]
            raise SystemExit(f"bench_mle_run: {' '.join(cmd)} (in {root}) exited {code}: {tail}")
    return {"wall_s": round(wall, 2), "user_s": round(usage.ru_utime, 2), "sys_s": round(usage.ru_stime, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2)}


def agreement(base_dir: Path, other_dir: Path) -> dict:
    """Largest relative difference per numeric column of ``results.csv`` (``time`` left out), statuses."""
    import numpy as np
    import pandas as pd

    a, b = pd.read_csv(base_dir / "results.csv"), pd.read_csv(other_dir / "results.csv")
    keys = [c for c in ("router", "n", "replicate") if c in a.columns]
    a, b = a.sort_values(keys).reset_index(drop=True), b.sort_values(keys).reset_index(drop=True)
    out: dict = {"rows": [len(a), len(b)], "columns_equal": list(a.columns) == list(b.columns), "max_rel_diff": {}}
    if len(a) != len(b):
        return out
    for col in a.columns:
        if col == "time" or col not in b.columns:
            continue
        if pd.api.types.is_numeric_dtype(a[col]) and pd.api.types.is_numeric_dtype(b[col]):
            x, y = a[col].to_numpy(float), b[col].to_numpy(float)
            same = (x == y) | (np.isnan(x) & np.isnan(y))
            rel = np.abs(x - y)[~same] / np.maximum(np.abs(x[~same]), 1e-300)
            out["max_rel_diff"][col] = float(rel.max()) if rel.size else 0.0
        else:
            out.setdefault("text_columns_equal", {})[col] = bool((a[col].astype(str) == b[col].astype(str)).all())
    out["status_identical"] = bool((a["status"].astype(str) == b["status"].astype(str)).all()) if "status" in a else None
    out["worst"] = max(out["max_rel_diff"].values(), default=0.0)
    return out


def _paired(runs: list[dict], key: str) -> list[float]:
    """``other / base`` of ``key`` in every round."""
    by = {(r["round"], r["side"]): r[key] for r in runs}
    return [by[(i, "other")] / by[(i, "base")] for i in sorted({r["round"] for r in runs}) if by[(i, "base")] > 0]


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, type=Path, help="checkout timed as the baseline (e.g. main)")
    p.add_argument("--other", default=Path(__file__).resolve().parents[1], type=Path,
                   help="checkout compared with it (default: this one)")
    p.add_argument("--repeats", type=int, default=3, help="rounds (each runs both sides once); default 3")
    p.add_argument("--full", action="store_true", help="the whole gmoe_exact preset instead of the reduced design")
    p.add_argument("--warm", action="store_true", help="one untimed run of each side first (compile caches)")
    p.add_argument("--json", type=Path, help="also write the JSON here")
    p.add_argument("--keep", type=Path, help="copy the last round's run folders to KEEP/base and KEEP/other "
                                             "(to compare them later, e.g. with another worker count)")
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    design = (FULL if a.full else REDUCED) + extra
    sides = {"base": a.base.resolve(), "other": a.other.resolve()}
    for root in sides.values():
        if not (root / "moestat" / "__main__.py").exists():
            p.error(f"{root} is not a moestat checkout")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # each side imports the package of its own root
    work = Path(tempfile.mkdtemp(prefix="bench_mle_run_"))
    runs: list[dict] = []
    load_before = os.getloadavg()
    try:
        if a.warm:
            for name, root in sides.items():
                run_once(root, design, work / f"warm_{name}", env)
        for rnd in range(a.repeats):
            order = ["base", "other"] if rnd % 2 == 0 else ["other", "base"]
            for name in order:
                out = work / f"{name}_{rnd}"
                rec = run_once(sides[name], design, out, env)
                rec.update(side=name, round=rnd, loadavg_1min=round(os.getloadavg()[0], 2))
                runs.append(rec)
                print(json.dumps(rec), file=sys.stderr, flush=True)
        last = a.repeats - 1
        agree = agreement(work / f"base_{last}", work / f"other_{last}")
        if a.keep is not None:
            for name in sides:
                shutil.copytree(work / f"{name}_{last}", a.keep / name, dirs_exist_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {name: {key: round(statistics.median(r[key] for r in runs if r["side"] == name), 2)
                  for key in ("wall_s", "user_s", "sys_s", "cpu_s")} for name in sides}
    result = {
        "design": "full" if a.full else "reduced", "rates_args": design, "repeats": a.repeats,
        "base": str(sides["base"]), "other": str(sides["other"]), "cores": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "runs": runs, "median": med,
        "ratio_other_over_base": {key: round(med["other"][key] / med["base"][key], 3) for key in med["base"] if med["base"][key] > 0},
        # the ratio within each round (both sides a few minutes apart), median over rounds: less
        # sensitive to a load that drifts over the whole benchmark than the ratio of medians
        "paired_ratio_median": {key: round(statistics.median(_paired(runs, key)), 3) for key in ("wall_s", "cpu_s")},
        "sys_share": {name: round(m["sys_s"] / m["cpu_s"], 3) if m["cpu_s"] else None for name, m in med.items()},
        "agreement": agree,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()

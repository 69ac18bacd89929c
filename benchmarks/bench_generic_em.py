"""The generic EM (:mod:`moestat.estimators.mle_generic`) of this checkout against a baseline copy of the
package, on work units of the two catalogue designs it was too slow for (issue 33): ``laplace-gmoe``'s
over-specified arm (Laplace gate, k = 3 on k* = 2) and ``topk-over`` (Top-3 of 4 on a Top-2-of-3 truth).

Each fit is the sweep's reported fit of a real work unit (:func:`moestat.rates.sweep.make_units` of the
entry's full design, its first ``R`` replicates: the same data streams, starts and estimator seed as
``moestat reproduce KEY``; SQUAREM, the Newton polish, for Top-K the score search), run in a fresh
process with one torch and one BLAS thread; the CPU time of ``fit`` alone is measured (a warm-up fit on
a small unit first, so one-time imports are not counted).  The baseline and this checkout alternate
(``--repeats`` times), so a change of load hits both alike; the ratio is the median of the per-repeat
ratios.  The fits are compared: largest relative difference of the log-likelihoods, and the statuses.

    python benchmarks/bench_generic_em.py --baseline /work/base84 [--json benchmarks/bench_generic_em.json]

``--baseline``: the root of a copy of the package (e.g. ``git archive 84f7d03 | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: (entry, run index, n, replicates): units of the entries' full designs
CASES = (("laplace-gmoe", 1, 4000, 2), ("topk-over", 0, 2000, 4), ("laplace-gmoe", 1, 16000, 1))

_CHILD = r'''
import dataclasses, json, sys, time
import numpy as np, torch
from threadpoolctl import threadpool_limits
torch.set_num_threads(1)
from moestat.model.mixing import MixingMeasure
from moestat.rates import catalogue as cat, truth_check as tc
from moestat.rates.resolve import Experiment
from moestat.rates.sweep import _draw, _scenario, make_units
key, run, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
units = make_units(Experiment.of(cat.run_config(cat.entry(key).runs[run], False, n_jobs=1)))
def fit(n, reps):
    u = next(u for u in units if u.n == n)
    u = dataclasses.replace(u, replicates=u.replicates[:reps])
    sc = _scenario(u.scenario_key)
    X, Y, G0 = _draw(u, sc)
    est = tc.unit_estimator(u, sc, 2)
    t0 = time.process_time()
    est.fit(X, Y, init=MixingMeasure.stack(G0))
    return est, time.process_time() - t0
with threadpool_limits(limits=1):
    fit(min(u.n for u in units), 1)  # warm-up: imports (torch.func, dynamo) and first calls
    est, cpu = fit(n, reps)
print(json.dumps({"cpu_s": cpu, "loglik": np.asarray(est.loglik_, float).tolist(), "status": list(est.status_),
                  "n_iter": np.asarray(est.n_iter_).tolist(), "kernel": getattr(est, "kernel_", None)}))
'''


def _run(root: Path, case) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _CHILD, *map(str, case)], env=env, cwd=root, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="root of the baseline copy of the package")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--case", type=int, action="append", help="indices into CASES (default: all)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    rows = []
    for i in args.case or range(len(CASES)):
        case = CASES[i]
        base, new = [], []
        for _ in range(args.repeats):  # interleaved
            base.append(_run(args.baseline, case))
            new.append(_run(ROOT, case))
        lb, ln = np.array(base[0]["loglik"]), np.array(new[0]["loglik"])
        row = {
            "entry": case[0], "n": case[2], "replicates": case[3],
            "baseline_cpu_s": [b["cpu_s"] for b in base], "new_cpu_s": [b["cpu_s"] for b in new],
            "baseline_median_s": float(np.median([b["cpu_s"] for b in base])),
            "new_median_s": float(np.median([b["cpu_s"] for b in new])),
            "median_ratio": float(np.median([b["cpu_s"] / m["cpu_s"] for b, m in zip(base, new)])),
            "max_rel_loglik_diff": float(np.max(np.abs(ln - lb) / np.abs(lb))),
            "same_status": base[0]["status"] == new[0]["status"],
            "baseline_status": base[0]["status"], "new_status": new[0]["status"],
            "baseline_n_iter": base[0]["n_iter"], "new_n_iter": new[0]["n_iter"],
        }
        rows.append(row)
        print(f"{case[0]} n={case[2]} R={case[3]}: baseline {row['baseline_median_s']:.1f} CPU-s, this checkout "
              f"{row['new_median_s']:.1f} CPU-s, x{row['median_ratio']:.1f} (median of {args.repeats} paired ratios); "
              f"max rel. loglik diff {row['max_rel_loglik_diff']:.1e}, same statuses: {row['same_status']}", flush=True)
    meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "threads": 1,
            "load_before": load_before, "load_after": os.getloadavg(), "baseline": str(args.baseline)}
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

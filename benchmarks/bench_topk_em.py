"""The generic EM's Top-K path (:mod:`moestat.estimators.mle_generic`) of this checkout against a baseline
copy of the package, on work units of ``topk-over``'s full design (issue 33: Top-2-of-3 Gaussian MoE truth
fitted with Top-3 of 4; Nguyen, Akbarian, Yan & Ho 2024).

Each fit is the sweep's reported fit of a real work unit (:func:`moestat.rates.sweep.make_units` of the
entry's full design, its first ``R`` replicates: the same data streams, starts and estimator seed as
``moestat reproduce topk-over``; SQUAREM, the score search, the Newton polish), in a fresh process with one
torch and one BLAS thread; the CPU time (``time.process_time``) of ``fit`` alone is measured, after a
warm-up fit (n = 2 000, one replicate), so that one-time imports are not counted.  The design's units run
eagerly (the sweep's compile decision for this entry is ``False``).  The baseline and this checkout alternate
(``--repeats`` times), so a change of load hits both alike; reported: the medians and the median of the
per-repeat ratios.  The fits are compared: log-likelihoods (largest relative difference), EM iteration
counts and statuses.

    python benchmarks/bench_topk_em.py --baseline /tmp/base [--repeats 3] [--json benchmarks/bench_topk_em.json]

``--baseline``: the root of a copy of the package (e.g. ``git archive deb4721 | tar -x -C DIR``).
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
#: (n, replicates): units of topk-over's full design (run 0), their first replicates (two starts each:
#: the near-truth start and its re-seated idle-atom start); the last, the design's whole n = 2 000 unit
#: (40 replicates, 80 starts: the batch a design fit runs in), is not in the default set
CASES = ((2000, 4), (8000, 4), (2000, 40))
DEFAULT = (0, 1)

# the fit of one unit in a fresh process: bench_generic_em's child, on entry "topk-over", run 0 (its
# warm-up, the design's smallest n, is n = 2 000 here)
from bench_generic_em import _run as _run_entry  # noqa: E402  (benchmarks/ is the script's folder)


def _run(root: Path, case) -> dict:
    return _run_entry(root, ("topk-over", 0, *case))


def _commit(root: Path) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="root of the baseline copy of the package")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--case", type=int, action="append", help="indices into CASES (default: DEFAULT)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--note", default="", help="stored in the JSON (e.g. the commit of a copy without git)")
    args = ap.parse_args(argv)
    if not (args.baseline / "moestat" / "__init__.py").is_file():
        ap.error(f"--baseline {args.baseline}: no moestat package there")
    load_before = os.getloadavg()
    rows = []
    for i in args.case or DEFAULT:
        case = CASES[i]
        base, new = [], []
        for _ in range(args.repeats):  # interleaved
            base.append(_run(args.baseline, case))
            new.append(_run(ROOT, case))
        lb, ln = np.array(base[0]["loglik"]), np.array(new[0]["loglik"])
        row = {
            "entry": "topk-over", "n": case[0], "replicates": case[1], "kernel": new[0]["kernel"],
            "baseline_cpu_s": [b["cpu_s"] for b in base], "new_cpu_s": [b["cpu_s"] for b in new],
            "baseline_median_s": float(np.median([b["cpu_s"] for b in base])),
            "new_median_s": float(np.median([b["cpu_s"] for b in new])),
            "median_ratio": float(np.median([b["cpu_s"] / m["cpu_s"] for b, m in zip(base, new)])),
            "new_ms_per_sample_fit": 1e3 * float(np.median([b["cpu_s"] for b in new])) / (case[0] * case[1]),
            "baseline_ms_per_sample_fit": 1e3 * float(np.median([b["cpu_s"] for b in base])) / (case[0] * case[1]),
            "max_rel_loglik_diff": float(np.max(np.abs(ln - lb) / np.abs(lb))),
            "same_n_iter": base[0]["n_iter"] == new[0]["n_iter"], "same_status": base[0]["status"] == new[0]["status"],
            "baseline_loglik": base[0]["loglik"], "new_loglik": new[0]["loglik"],
            "baseline_status": base[0]["status"], "new_status": new[0]["status"],
            "baseline_n_iter": base[0]["n_iter"], "new_n_iter": new[0]["n_iter"],
        }
        rows.append(row)
        print(f"topk-over n={case[0]} R={case[1]} ({row['kernel']}): baseline {row['baseline_median_s']:.1f} CPU-s, "
              f"this checkout {row['new_median_s']:.1f} CPU-s, x{row['median_ratio']:.2f} (median of {args.repeats} "
              f"paired ratios); max rel. loglik diff {row['max_rel_loglik_diff']:.1e}, same n_iter: "
              f"{row['same_n_iter']}, same statuses: {row['same_status']}", flush=True)
    meta = {"machine": platform.processor() or platform.machine(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "threads": 1, "load_before": load_before, "load_after": os.getloadavg(),
            "baseline": str(args.baseline), "commit": _commit(ROOT), "repeats": args.repeats,
            "note": args.note}
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

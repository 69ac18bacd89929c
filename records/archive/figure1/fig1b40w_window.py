"""The design of preset ``fig1b40w``: fig1b40's window rule with the cost measured on the current code.

The preset ``fig1b40`` (``fig1b40_window.py``) priced its sizes with ``fig1b``'s recorded time per
fit (commit f281d69, two workers on the busy machine): 45.3 CPU-minutes predicted for three seeds.
Run on the current code it took about 2 minutes per seed -- the least-squares kernel became
about 8 times faster since (issue 36) -- so its top size, 11 314, was lowered for a cost that
does not exist, and its window (a factor 2.8) cannot give intervals near +-0.1.  This second design
keeps everything ``fig1b40`` fixed before its run -- the lower end (the singleton run-off criterion,
computed by ``fig1b40_window.design``: n = 4000), the 40 replicates, the budget of about 45
CPU-minutes for three seeds, ``fig1b``'s estimator, starts and truth -- and changes the rule of the
upper end only, fixed before it was computed:

**Upper end.**  Six log-spaced sizes (the most the brief allows: degrees of freedom for the OLS
t-interval and the curvature rule), from the lower end to the largest ``n_max`` (a multiple of
1000) whose predicted cost is within the budget.  The time of one fit is measured on
``fig1b40``'s three recorded seeds (``results.csv``'s ``time``, mean per size), log-log
interpolated inside its sizes and extrapolated beyond 11 314 with the larger of the fitted
exponent and 1 (the cost of a Levenberg-Marquardt iteration grows at least linearly in ``n``;
the iteration counts are about the same at every size of ``fig1b``).

As for ``fig1b40``, the expected 95% half-widths are stated before the run (the replicate spread of
``fig1b40``'s sizes, delta method, OLS on equally precise means).  Deterministic: it reads only
recorded CSV files.  Run (recorded ``records/archive/figure1/fig1b40w_window.json``)::

    PYTHONPATH=. python records/archive/figure1/fig1b40w_window.py --json records/archive/figure1/fig1b40w_window.json
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
#: fig1b40's recorded seeds: the measured cost and replicate spread.
RUNS = [HERE / "fig1b40" / f"seed{s}" for s in (0, 1, 2)]
N_SIZES = 6
#: Top sizes are searched on multiples of this.
STEP = 1000


def _base():
    spec = importlib.util.spec_from_file_location("fig1b40_window", HERE / "fig1b40_window.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def design(runs: list[Path] = RUNS) -> dict:
    """The window, the cost and the expected half-widths (module docstring)."""
    from moestat.rates.spec_checks import sample_sizes

    base = _base()
    lower = base.design()  # the lower end, the replicates and the budget of fig1b40
    n_lo, reps, seeds, budget = lower["n_min"], lower["reps"], lower["seeds"], lower["budget_s"]
    rows = [r for run in runs for r in base._rows(run)]
    ns = sorted({int(r["n"]) for r in rows})
    t_rec = {n: float(np.mean([float(r["time"]) for r in rows if int(r["n"]) == n])) for n in ns}
    ln, lt = np.log(ns), np.log([t_rec[n] for n in ns])
    a_fit = float(np.polyfit(ln, lt, 1)[0])
    a_ext = max(a_fit, 1.0)

    def t_fit(n: float) -> float:
        if n <= ns[-1]:
            return float(np.exp(np.interp(math.log(n), ln, lt)))
        return t_rec[ns[-1]] * (n / ns[-1]) ** a_ext

    def cost(n_max: int) -> float:
        return seeds * reps * sum(t_fit(n) for n in sample_sizes(n_lo, n_max, N_SIZES))

    n_max = n_lo + STEP * N_SIZES
    while cost(n_max + STEP) <= budget:
        n_max += STEP
    if cost(n_max) > budget:
        raise SystemExit(f"no window of {N_SIZES} sizes from n = {n_lo} fits the budget of {budget} s")
    sizes = sample_sizes(n_lo, n_max, N_SIZES)
    expected = base.expected_halfwidths(rows, ns, sizes, reps)
    return {
        "lower_end_from": "fig1b40_window.design()",
        "n_min": n_lo, "reps": reps, "seeds": seeds, "budget_s": budget,
        "measured_time_per_fit_s": {str(n): t_rec[n] for n in ns},
        "time_exponent_fit": a_fit, "time_exponent_used": a_ext,
        "predicted_time_per_fit_s": {str(n): t_fit(n) for n in sizes},
        "sizes": sizes, "n_max": n_max, "n_points": N_SIZES,
        "predicted_cost_s": cost(n_max),
        "expected_halfwidth": expected,
        "runs": [str(r.relative_to(ROOT)) for r in runs],
    }


def _show(rec: dict) -> None:
    print("measured time per fit: " + ", ".join(f"{n}: {t:.2f} s" for n, t in rec["measured_time_per_fit_s"].items())
          + f" (exponent {rec['time_exponent_fit']:.2f}, {rec['time_exponent_used']:.2f} used beyond)")
    print(f"sizes {rec['sizes']}: predicted {rec['predicted_cost_s'] / 60:.1f} CPU-min for {rec['seeds']} seeds x {rec['reps']} replicates")


def main(argv: list[str] | None = None) -> int:
    return _base().window_main(argv, __doc__, design, _show)  # fig1b40_window's command line and report


if __name__ == "__main__":
    sys.exit(main())

"""Profile the work units of the ``gmoe_exact`` design in one process, one thread (issue 36).

Every ``--every``-th unit of ``moestat rates --preset gmoe_exact`` (600 units of 10 replicates x 5
starts, largest ``n`` first; default every 10th: 60 units covering the whole range of sizes, a
tenth of the design's fitting work) is run by :func:`moestat.rates.sweep.run_unit` under
``cProfile``, after one untimed unit (which loads the compiled EM pass).  Prints the CPU time of
the units, the share of the main parts of a unit (the EM passes, the rest of the EM, drawing the
data, ``predict`` after the fit, the losses, the truth check) and the top functions by own time::

    OMP_NUM_THREADS=1 python benchmarks/profile_mle_units.py [--every 10] [--top 25]

Run it from the checkout to be profiled (its ``moestat`` is imported).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's moestat


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=int, default=10, help="profile every EVERY-th unit (default 10)")
    p.add_argument("--top", type=int, default=25, help="functions listed by own time (default 25)")
    a = p.parse_args(argv)
    from moestat.rates.config import RatesConfig
    from moestat.rates.sweep import make_units, run_unit
    from moestat.threads import keep_freed_memory

    keep_freed_memory()  # as in a sweep process
    units = make_units(RatesConfig.from_preset("gmoe_exact").resolve())
    chosen = units[:: a.every]
    run_unit(units[-1])  # loads the compiled pass (and warms the caches) outside the profile
    prof = cProfile.Profile()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    prof.enable()
    for u in chosen:
        run_unit(u)
    prof.disable()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    stats = pstats.Stats(prof)
    total = stats.total_tt
    parts = {"EM passes (compiled)": ("_aoti.run",),
             "EM passes (eager)": ("mle_fused.py", "_em_pass"), "run_em (all of the EM)": ("em_driver.py", "run_em"),
             "draw the data": ("sweep.py", "_draw_with_mean"), "predict after the fit": ("mle.py", "predict"),
             "losses": ("sweep.py", "compute_losses"), "truth check": ("truth_check.py", "against_truth"),
             "prepare_data": ("validation.py", "prepare_data"), "thread limits": ("threadpoolctl.py", "__init__")}
    shares = {}
    for name, key in parts.items():
        cum = 0.0
        for (file, _line, fn), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
            # a built-in is listed by name ("<built-in method torch._C._aoti.run>"): matched by a part of it
            if (len(key) == 1 and key[0] in fn) or (len(key) == 2 and file.endswith(key[0]) and fn == key[1]):
                cum += ct
        shares[name] = round(cum / total, 3)
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(a.top)
    print(out.getvalue())
    result = {"units": len(chosen), "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "profiled_s": round(total, 2),
              "share_of_profiled": shares}
    print(result)
    return result


if __name__ == "__main__":
    main()

"""The rates run's background imports (issue 36): ready for the rate fits and the figures when the sweep ends."""

import pytest
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from moestat.rates.experiment import WARM_FIGURE_MODULES, WARM_MODULES, _warm_imports
before = [m for m in WARM_MODULES + WARM_FIGURE_MODULES if m in sys.modules]
_warm_imports({formats}).join(timeout=300)
print(before, [m in sys.modules for m in WARM_MODULES], [m in sys.modules for m in WARM_FIGURE_MODULES])
"""


def _probe(formats: tuple) -> str:
    # a fresh interpreter: in this one the test suite has imported them all already
    res = subprocess.run([sys.executable, "-c", PROBE.format(formats=formats)], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.mark.slow
def test_the_fits_modules_are_imported_in_the_background_and_matplotlib_only_for_figures():
    # nothing of it on the import path of the rates run itself: the thread is what imports them
    assert _probe(("png",)) == "[] [True, True] [True]"
    assert _probe(()) == "[] [True, True] [False]"


RUN_PROBE = """
import sys
from moestat.rates import RatesConfig, run_rates
config = RatesConfig.from_dict({{"router": "perturbed", "reps": 4, "n_points": 4, "n_min": 300, "n_max": 1200, "n_jobs": 1}})
summary = run_rates(config, {out!r})
assert summary["fits"], "no rate fits"
print([m in sys.modules for m in ("statsmodels", "scipy.stats")])
"""


@pytest.mark.slow
def test_a_rates_run_fits_and_draws_without_statsmodels_or_scipy_stats(tmp_path):
    # issue 36: the rate fits compute statsmodels' OLS and scipy's Theil-Sen with NumPy and
    # scipy.special (moestat.rates.verdicts.ols, theil_sen), so the process that fits the rates --
    # the main job's first forked worker -- no longer imports statsmodels and scipy.stats (about
    # 1.2 CPU-s); the numbers are the same (tests/rates/test_verdicts_ols.py)
    res = subprocess.run([sys.executable, "-c", RUN_PROBE.format(out=str(tmp_path / "run"))], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "[False, False]"
    assert (tmp_path / "run" / "convergence.png").exists()

"""The rates run's background imports (issue 36): ready for the rate fits and the figures when the sweep ends."""

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


def test_the_fits_modules_are_imported_in_the_background_and_matplotlib_only_for_figures():
    # nothing of it on the import path of the rates run itself: the thread is what imports them
    assert _probe(("png",)) == "[] [True, True] [True]"
    assert _probe(()) == "[] [True, True] [False]"

"""Theory checks: one module per claim of seed 004 (and seed 002's Theorem 1), and a runner.

Each module exposes ``NAMES`` (its check names) and ``run(ctx) -> list[CheckResult]``; each result
carries the prediction, the measurement, a confidence interval where one exists, the rule that
decides the verdict (stated in the module docstring before any run) and the verdict.  Run them all
with ``moestat theory --quick`` (CI) or ``--full`` (paper scale).
"""

from moestat.experiments.theory.framework import CheckResult, Context
from moestat.experiments.theory.runner import CHECK_NAMES, MODULES, exit_code, run_checks, write_report

__all__ = ["CheckResult", "Context", "CHECK_NAMES", "MODULES", "run_checks", "write_report", "exit_code"]

"""Theory checks: one module per claim of Nguyen et al. (2024) (and Theorem 1 of
the Soft MoE implicit-bias paper (2024)), and a runner.

Each module exposes ``NAMES`` (its check names) and ``run(ctx) -> list[CheckResult]``; each result
carries the prediction, the measurement, a confidence interval where one exists, the rule that
decides the verdict (stated in the module docstring before any run) and the verdict.  Run them all
with ``moestat theory --quick`` (CI) or ``--full`` (paper scale).
"""

from moestat.theorems.checks.framework import CheckResult, Context
from moestat.theorems.checks.runner import CHECK_NAMES, MODULES, exit_code, run_checks, write_report

__all__ = ["CheckResult", "Context", "CHECK_NAMES", "MODULES", "run_checks", "write_report", "exit_code"]

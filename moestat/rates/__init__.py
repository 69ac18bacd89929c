"""Rate experiments: configuration, sweeps over (n, replicate), result store, rate fits, figures.

From Python::

    from moestat.rates import RatesConfig, run_rates
    summary = run_rates(RatesConfig(router=["perturbed", "cosine"], reps=10), "out/")
"""

from moestat.rates.experiment import format_table, run_rates
from moestat.rates.config import RatesConfig

__all__ = ["RatesConfig", "run_rates", "format_table"]

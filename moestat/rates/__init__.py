"""Rate experiments: configuration, sweeps over (n, replicate), result store, rate fits, figures.

One module per job: :mod:`~moestat.rates.config` (the nested configuration),
:mod:`~moestat.rates.sweep` (seed streams, work units, the sweep), :mod:`~moestat.rates.backends`
(in-process / joblib loky / dask.distributed), :mod:`~moestat.rates.store` (``results.csv``,
provenance, the resume guard), :mod:`~moestat.rates.fit` (slopes with intervals, verdicts),
:mod:`~moestat.rates.figures`, :mod:`~moestat.rates.presets` and
:mod:`~moestat.rates.experiment` (:func:`run_rates`, the whole experiment).

From Python::

    from moestat.rates import RatesConfig, run_rates
    summary = run_rates(RatesConfig.from_dict({"router": "perturbed,cosine", "reps": 10}), "out/")
"""

from moestat.rates.experiment import format_table, run_rates
from moestat.rates.config import RatesConfig

__all__ = ["RatesConfig", "run_rates", "format_table"]

"""The rates configuration of a catalogue run (:func:`run_config`).

Apart from :mod:`moestat.rates.catalogue` so that what checks a run's truth
(:mod:`moestat.theorems.catalogue_hypotheses`) builds the run's configuration without importing the
module that runs and reports it.
"""

from __future__ import annotations

from typing import Any

from moestat.theorems.registry import STATISTIC, Run, catalogue_file
from moestat.rates.config import RatesConfig

__all__ = ["run_config"]


def run_config(run: Run, quick: bool, **execution: Any):
    """The :class:`~moestat.rates.config.RatesConfig` of ``run`` (full or quick grid), with
    execution keys (``n_jobs``, ``quiet`` ...) added; built, not validated.

    Raises
    ------
    FileNotFoundError
        A ``catalogue_file`` that is not shipped (yet).
    """

    data = {"statistic": STATISTIC, **run.base}
    name = data.pop("catalogue_file", None)
    if name is not None:
        path = catalogue_file(name)
        if not path.is_file():
            raise FileNotFoundError(f"catalogue scenario file {name} is not shipped")
        data["scenario_file"] = str(path)
    data.update(run.quick if quick else run.full)
    data.update(execution)
    return RatesConfig.from_dict(data)

"""The catalogue's stated exponents as the rates pipeline sees them: one walk for the tests that hold
the catalogue's predictions against the pipeline's (exponent, sidedness)."""

from __future__ import annotations

from typing import Iterator

from moestat.rates import catalogue as cat


def stated_predictions() -> Iterator[tuple]:
    """``(entry, prediction, router, loss, config)`` for every prediction with an exponent of a
    runnable entry; ``config`` is its run's ``--quick`` configuration, ``router`` the curve the
    prediction names (``"router loss"``) or the run's first."""
    for e in cat.ENTRIES.values():
        if cat.entry_status(e) != "runnable":
            continue
        runs = {r.label: r for r in e.runs}
        for p in e.predictions:
            if p.exponent is None:
                continue
            cfg = cat.run_config(runs[p.run], quick=True)
            router, loss = p.loss.split(" ", 1) if " " in p.loss else (cfg.router[0], p.loss)
            yield e, p, router, loss, cfg


def file_predictions(cfg):
    """A catalogue run's predictions as ``moestat reproduce`` judges them: its own, then those of the
    theorems its scenario file's truth meets (handed in as the door hands them to ``run_rates``)."""
    from moestat.rates.resolve import Experiment
    from moestat.theorems.file_theorems import scenario_theorems

    return Experiment.of(cfg).with_theorems(scenario_theorems).predicted

"""The over-fitted softmax-gated Gaussian MoE entries' designs (``gmoe-over3``, ``gmoe-over4``)."""

from __future__ import annotations

from moestat.rates import catalogue as cat


def _full(key: str) -> dict:
    (run,) = cat.entry(key).runs
    return run.full


def test_gmoe_over3_full_design_has_forty_replicates_on_the_recorded_grid():
    # issue 33 scope 4: >= 40 replicates for over-specified designs; the grid, starts and estimator are the
    # 10-replicate record's (simulations/catalogue/gmoe-over3/ten_replicates/), only the replicate count changed
    full = _full("gmoe-over3")
    assert full["reps"] == 40
    assert (full["n_min"], full["n_max"], full["n_points"], full["starts"]) == (200, 20_000, 11, 2)
    assert "40 replicates" in cat.entry("gmoe-over3").paper_design
    (run,) = cat.entry("gmoe-over3").runs
    assert run.base["estimator"] == "mle" and run.base["k_fit"] == 3


def test_gmoe_over4_keeps_its_recorded_design():
    full = _full("gmoe-over4")
    assert (full["n_min"], full["n_max"], full["n_points"], full["reps"], full["starts"]) == (200, 20_000, 11, 10, 2)
    assert "10 replicates" in cat.entry("gmoe-over4").paper_design

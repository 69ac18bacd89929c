"""Adaptive replicates: the sweep grows until the plan's half-width is met or max_reps is reached."""

import pandas as pd
import pytest

from moestat.rates import RatesConfig, run_rates


pytestmark = pytest.mark.usefixtures("no_figures")  # tests/rates/conftest.py

BASE = {"n_min": 100, "n_max": 400, "n_points": 3, "reps": 2, "max_iter": 10, "holdout": 256, "n_boot": 50,
        "chunk": 2, "quiet": True}


@pytest.mark.slow
def test_adaptive_grows_to_the_budget_and_equals_a_plain_sweep(tmp_path):
    s = run_rates(RatesConfig.from_dict({**BASE, "max_reps": 5, "halfwidth": 0.01}), tmp_path / "ad")
    ad = s["adaptive"]
    assert [r["reps"] for r in ad["rounds"]] == [2, 4, 5] and ad["final_reps"] == 5 and ad["met"] is False
    assert s["counts"]["fits"] == 15 and s["config"]["reps"] == 5
    plain = run_rates(RatesConfig.from_dict({**BASE, "reps": 5}), tmp_path / "plain")
    assert plain["adaptive"] is None
    key = ["router", "n", "replicate"]
    a, b = (pd.read_csv(tmp_path / d / "results.csv").drop(columns="time").sort_values(key).reset_index(drop=True)
            for d in ("ad", "plain"))
    assert a.equals(b)  # replicate r has the same streams whatever the round
    # resuming the same command finds every fit done and ends in the same state
    s2 = run_rates(RatesConfig.from_dict({**BASE, "max_reps": 5, "halfwidth": 0.01}), tmp_path / "ad", resume=True)
    assert s2["adaptive"]["final_reps"] == 5 and s2["counts"]["fits"] == 15


def test_adaptive_stops_when_the_target_is_met(tmp_path):
    s = run_rates(RatesConfig.from_dict({**BASE, "max_reps": 50, "halfwidth": 100.0}), tmp_path / "ad")
    assert s["adaptive"]["rounds"] == [{"reps": 2, "reps_needed": 2}] and s["adaptive"]["met"] is True

"""records/figure1/paper_procedure/ (issue 60 scope 2): the recorded summary is what its driver
computes from the four recorded runs, and the runs are the declared design on the same data."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from moestat.rates.store import read_results

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "records" / "figure1" / "paper_procedure"


def _driver():
    spec = importlib.util.spec_from_file_location("paper_procedure", ROOT / "studies" / "figure1" / "paper_procedure.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_recorded_summary_is_recomputed_from_the_recorded_runs():
    mod = _driver()
    recorded = json.loads((RECORD / "summary.json").read_text(encoding="utf-8"))
    assert mod._plain(mod.summarise(RECORD)) == recorded


def test_the_runs_are_the_declared_design_on_the_same_draws():
    frames = {name: read_results(RECORD / name / "results.csv") for name in ("sgd_exact", "sgd_over", "lse_exact", "lse_over")}
    for name, df in frames.items():
        config = json.loads((RECORD / name / "summary.json").read_text(encoding="utf-8"))["config"]
        assert (config["reps"], config["k_active"], config["n_min"], config["n_max"], config["n_points"]) == (20, 2, 500, 8000, 5)
        assert config["estimator"] == name[:3] and config["setting"] == name[4:]
        assert len(df) == 2 * 5 * 20, name  # every fit is a row: none dropped
    for setting in ("exact", "over"):
        sgd, lse = frames[f"sgd_{setting}"], frames[f"lse_{setting}"]
        # the same data: the truth's sum of squares on each (router, n, replicate)'s draw agrees
        key = ["router", "n", "replicate"]
        both = sgd[key + ["truth_objective"]].merge(lse[key + ["truth_objective"]], on=key, suffixes=("_sgd", "_lse"))
        assert len(both) == 200
        assert both["truth_objective_sgd"].to_numpy() == pytest.approx(both["truth_objective_lse"].to_numpy(), rel=1e-12)
        # SGD runs its whole budget: 20 epochs of ceil(n / 64) steps, never answered
        assert (sgd["n_iter"] == 20 * ((sgd["n"] + 63) // 64)).all()
        assert "answered" not in set(sgd["truth_check"])

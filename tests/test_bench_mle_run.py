"""The comparison of ``benchmarks/bench_mle_run.py`` (issue 36): the agreement of two runs' rows and
the per-round ratios it reports, on small hand-made files (the benchmark itself runs whole sweeps)."""

from pathlib import Path

import pandas as pd
import pytest

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    return load_script(ROOT / "benchmarks" / "bench_mle_run.py")


def _write(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    return folder


def test_agreement_reports_the_largest_relative_difference_per_column_and_the_statuses(tmp_path):
    bench = _bench()
    rows = [{"router": "softmax", "n": 100, "replicate": r, "status": "tol", "fit_objective": -10.0 - r,
             "time": 0.1 * r} for r in range(3)]
    a = _write(tmp_path / "a", rows)
    other = [dict(r) for r in reversed(rows)]  # another row order: matched by (router, n, replicate)
    other[0]["fit_objective"] *= 1 + 1e-12
    other[1]["time"] = 99.0  # time is not compared
    b = _write(tmp_path / "b", other)
    out = bench.agreement(a, b)
    assert out["rows"] == [3, 3] and out["status_identical"] and out["columns_equal"]
    assert out["max_rel_diff"]["fit_objective"] == pytest.approx(1e-12, rel=1e-3)
    assert "time" not in out["max_rel_diff"] and out["worst"] == out["max_rel_diff"]["fit_objective"]
    other[2]["status"] = "max_iter"
    c = _write(tmp_path / "c", other)
    assert bench.agreement(a, c)["status_identical"] is False


def test_paired_ratios_are_taken_within_each_round():
    bench = _bench()
    runs = [{"round": 0, "side": "base", "cpu_s": 10.0}, {"round": 0, "side": "other", "cpu_s": 5.0},
            {"round": 1, "side": "other", "cpu_s": 9.0}, {"round": 1, "side": "base", "cpu_s": 30.0}]
    assert bench._paired(runs, "cpu_s") == [0.5, 0.3]

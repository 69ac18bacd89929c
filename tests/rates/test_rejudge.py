"""moestat.rates.experiment.rejudge_run: a run folder judged again from its rows, no model refitted."""

import json

import pytest

from moestat.rates import RatesConfig, run_rates
from moestat.rates.experiment import REJUDGE_RULE, rejudge_run

pytestmark = pytest.mark.usefixtures("no_figures")  # tests/rates/conftest.py

# the run's own statistic and window (not the defaults): re-judging must use them
TINY = {"n_min": 100, "n_max": 800, "n_points": 4, "reps": 3, "max_iter": 10, "holdout": 256, "n_boot": 50,
        "chunk": 2, "quiet": True, "statistic": "median", "window_min": 200}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("rejudge") / "run"
    run_rates(RatesConfig.from_dict(TINY), out)
    return out


def test_rejudging_a_run_keeps_its_rows_and_gives_the_sweeps_own_fits(run):
    rows = (run / "results.csv").read_bytes()
    before = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    after = rejudge_run(run, date="2026-12-06")
    assert (run / "results.csv").read_bytes() == rows  # no row changed
    assert after == json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert after["fits"] == before["fits"]  # the same rule: the same fits, bit for bit
    assert all(f["statistic"] == "median" for f in after["fits"] if f.get("slope") is not None)
    assert after["window"] == {"n_min": 200, "n_max": 800}
    assert {k: v for k, v in after.items() if k != "rejudged"} == before  # every other field kept
    rj = after["rejudged"]
    assert rj["rule"] == REJUDGE_RULE and rj["date"] == "2026-12-06"
    assert rj["categories_before"] == rj["categories_after"]


def test_a_summary_of_other_rows_is_refused(run, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    s = json.loads((copy / "summary.json").read_text(encoding="utf-8"))
    s["rows"]["sha256"] = "0" * 64
    (copy / "summary.json").write_text(json.dumps(s), encoding="utf-8")
    with pytest.raises(ValueError, match="other rows"):
        rejudge_run(copy)
    assert json.loads((copy / "summary.json").read_text(encoding="utf-8")) == s  # nothing written


def test_a_folder_without_a_summary_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="results.csv"):
        rejudge_run(tmp_path)

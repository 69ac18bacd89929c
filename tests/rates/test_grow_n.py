"""``--grow-n``: the sweep adds larger sample sizes while a predicted rate's plan asks for them (issue 16)."""

import json

import pandas as pd
import pytest

from moestat.cli.main import main
from moestat.rates import RatesConfig, run_rates
import moestat.rates.experiment as experiment

# Which fits ask for a larger n is the plan's decision (moestat.rates.verdicts.plan, tested in
# test_verdicts.py); here the loop is tested with the plan forced one way or the other on real sweeps
# of the null estimator (seconds).
FLAT = {"estimator": "null", "n_min": 100, "n_max": 400, "n_points": 3, "reps": 3, "holdout": 256, "n_boot": 50,
        "quiet": True, "grow_n": 2000}
ARGS = ["rates", "--estimator", "null", "--n-min", "100", "--n-max", "400", "--n-points", "3", "--reps", "3",
        "--n-boot", "50", "--quiet", "--grow-n", "2000"]


pytestmark = pytest.mark.usefixtures("no_figures")  # tests/rates/conftest.py


def _force_plan(monkeypatch, asking: bool):
    real = experiment._sweep_and_fit

    def forced(config, out, resume, *rest):
        df, fits = real(config, out, resume)
        for f in fits:
            if f.get("plan"):
                f["plan"]["larger_n_needed"] = asking and f["loss"] == "voronoi"
        return df, fits

    monkeypatch.setattr(experiment, "_sweep_and_fit", forced)


def test_ladder_continues_the_grid_ratio():
    g = RatesConfig.from_dict(FLAT).grid
    assert g.base_ns == [100, 200, 400] and g.ladder == [800, 1600]
    assert RatesConfig.from_dict({**FLAT, "grown": 1}).ns == [100, 200, 400, 800]
    assert RatesConfig.from_dict({**FLAT, "grow_n": 0}).grid.ladder == []


@pytest.mark.slow
def test_a_sweep_of_three_rounds_resolves_its_device_once(tmp_path, monkeypatch):
    # issue 58: run_rates plans the sweep once on the device resolved once; a later round's plan
    # (moestat.rates.sweep.SweepPlan.grown) keeps it
    import torch

    import moestat.rates.sweep as sweep

    calls = []
    monkeypatch.setattr(sweep, "resolve_device", lambda device: calls.append(device) or torch.device("cpu"))
    real = experiment.fit_experiment

    def asking(df, exp):  # every round's voronoi fit asks for a larger n (as _force_plan, one level down)
        fits = real(df, exp)
        for f in fits:
            if f.get("plan"):
                f["plan"]["larger_n_needed"] = f["loss"] == "voronoi"
        return fits

    monkeypatch.setattr(experiment, "fit_experiment", asking)
    s = run_rates(RatesConfig.from_dict({**FLAT, "n_jobs": "auto"}).validate(), tmp_path / "o")
    assert [r["n_max"] for r in s["growth"]["rounds"]] == [400, 800, 1600] and calls == ["cpu"]


@pytest.mark.slow
def test_grows_n_max_to_the_limit_and_says_why_it_stopped(tmp_path, monkeypatch):
    _force_plan(monkeypatch, True)
    s = run_rates(RatesConfig.from_dict(FLAT).validate(), tmp_path / "o")
    g = s["growth"]
    assert [r["n_max"] for r in g["rounds"]] == [400, 800, 1600]
    assert g["added"] == [800, 1600] and g["stopped"] == "--grow-n 2000 reached"
    assert all(r["asking"] == ["perturbed voronoi (consistent)"] or r["asking"][0].startswith("perturbed voronoi")
               for r in g["rounds"])
    assert s["sample_sizes"] == [100, 200, 400, 800, 1600]
    res = pd.read_csv(tmp_path / "o" / "results.csv")
    assert sorted(set(res["n"])) == [100, 200, 400, 800, 1600] and len(res) == 15
    fit = next(f for f in s["fits"] if f["loss"] == "voronoi")
    assert fit["window"][1] == 1600  # the default window follows the grown grid
    assert "adaptive n-max" in experiment.format_table(s)


def test_nothing_asking_means_no_growth(tmp_path, monkeypatch):
    _force_plan(monkeypatch, False)
    s = run_rates(RatesConfig.from_dict(FLAT).validate(), tmp_path / "o")
    assert s["growth"]["added"] == [] and s["growth"]["stopped"] == "no predicted rate asks for a larger n"
    assert sorted(set(pd.read_csv(tmp_path / "o" / "results.csv")["n"])) == [100, 200, 400]


@pytest.mark.slow
def test_resume_continues_a_grown_sweep_and_refuses_sizes_off_the_ladder(tmp_path, capsys, monkeypatch):
    _force_plan(monkeypatch, True)
    out = tmp_path / "o"
    assert main([*ARGS, "--out", str(out)]) == 0
    before = pd.read_csv(out / "results.csv").drop(columns="time")
    # an interrupted growth: drop the last grown size, resume fits exactly it again
    res = pd.read_csv(out / "results.csv")
    lines = (out / "results.csv").read_text().splitlines(keepends=True)
    keep = [lines[0]] + [ln for ln, n in zip(lines[1:], res["n"]) if n != 1600]
    (out / "results.csv").write_text("".join(keep))
    assert main([*ARGS, "--out", str(out), "--resume"]) == 0
    after = pd.read_csv(out / "results.csv")
    pd.testing.assert_frame_equal(after.drop(columns="time"), before)  # the same rows, refitted identically
    assert (after["time"] != res["time"]).any()  # ... and the dropped size really was fitted again
    assert json.loads((out / "summary.json").read_text())["growth"]["added"] == [800, 1600]
    # a row at an n that is neither on the grid nor on the ladder is not a result of this sweep
    row = lines[1].split(",")
    row[3] = "1000"
    (out / "results.csv").write_text("".join(lines) + ",".join(row))
    capsys.readouterr()
    assert main([*ARGS, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "n = 1000 is not a sample size of the sweep" in err and err.count("\n") == 1


@pytest.mark.parametrize("bad, words", [(["--grow-n", "300"], "grow_n must be 0 (off) or an integer > n_max"),
                                        (["--grow-n", "500"], "below the next size")])
def test_bad_limits_are_one_line_errors(tmp_path, capsys, bad, words):
    args = ["rates", "--estimator", "null", "--n-min", "100", "--n-max", "400", "--n-points", "3", *bad,
            "--out", str(tmp_path / "b")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and not (tmp_path / "b").exists()

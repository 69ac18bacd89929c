"""``moestat rates --scenario FILE``: a user scenario through the whole rates pipeline (issue 14)."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from moestat.cli.main import main
from moestat.rates import RatesConfig, run_rates

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = {"n_min": 200, "n_max": 800, "n_points": 3, "reps": 2, "max_iter": 30, "holdout": 256, "n_boot": 50,
        "quiet": True}


pytestmark = pytest.mark.usefixtures("no_figures")  # tests/rates/conftest.py


@pytest.mark.slow
def test_a_toml_scenario_runs_through_the_sweep_with_its_own_losses_and_predictions(tmp_path):
    src = tmp_path / "s.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", src)
    cfg = RatesConfig.from_dict({**TINY, "scenario_file": str(src)})
    assert cfg.router == ("file:sigmoid-exact",)  # the file's name, never a built-in router's
    s = run_rates(cfg.validate(), tmp_path / "out")
    fits = {f["loss"]: f for f in s["fits"]}
    assert fits["D_sigmoid"]["predicted"] == -0.5  # the file's declared exponent
    assert fits["voronoi"]["predicted"] is None  # Nguyen et al. (2024)'s table is not applied to a user model
    assert fits["regression_l2"]["predicted"] == -0.5
    ex = pd.read_csv(tmp_path / "out" / "extras.csv")
    assert list(ex.columns) == ["router", "n", "replicate", "D_sigmoid"] and len(ex) == 6
    assert (ex["D_sigmoid"] > 0).all()
    res = pd.read_csv(tmp_path / "out" / "results.csv")
    assert set(res["router"]) == {"file:sigmoid-exact"} and set(res["scenario"]) == {"sigmoid-exact"}


@pytest.mark.slow
def test_resume_refuses_an_edited_scenario_file_and_bad_files_are_usage_errors(tmp_path, capsys):
    src = tmp_path / "s.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", src)
    args = ["rates", "--scenario", str(src), "--n-min", "200", "--n-max", "800", "--n-points", "3", "--reps", "2",
            "--max-iter", "20", "--n-boot", "50", "--quiet", "--out", str(tmp_path / "o")]
    assert main(args) == 0
    before = (tmp_path / "o" / "results.csv").read_bytes()
    assert main([*args, "--resume"]) == 0  # same file: nothing to do
    assert (tmp_path / "o" / "results.csv").read_bytes() == before
    src.write_text(src.read_text().replace("variance = 0.01", "variance = 0.02"))
    capsys.readouterr()
    assert main([*args, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "scenario_digest" in err and err.count("\n") == 1
    assert (tmp_path / "o" / "results.csv").read_bytes() == before
    bad = tmp_path / "bad.toml"
    bad.write_text('[gate]\nnormalisation = "tanh"\n')
    assert main(["rates", "--scenario", str(bad), "--out", str(tmp_path / "b")]) == 2
    assert str(bad) in capsys.readouterr().err and not (tmp_path / "b").exists()
    assert main(["rates", "--scenario", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "m")]) == 2
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_the_summary_names_the_scenario_file(tmp_path):
    src = tmp_path / "s.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", src)
    run_rates(RatesConfig.from_dict({**TINY, "reps": 2, "scenario_file": str(src)}).validate(), tmp_path / "o")
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["config"]["scenario_file"] == str(src)


@pytest.mark.slow
def test_a_moved_scenario_file_resumes_when_its_digest_was_recorded(tmp_path, capsys):
    """The same bytes at another path are the same sweep: the path enters no data stream and no row, so
    a resume from a moved copy continues (provenance then names the new path).  A run that did not
    record the file's digest cannot tell a moved file from an edited one: refused, naming where the
    file was."""
    import hashlib

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    src, moved = tmp_path / "a" / "s.toml", tmp_path / "b" / "s.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", src)
    shutil.copy(src, moved)
    out = tmp_path / "o"
    grid = ["--n-min", "200", "--n-max", "800", "--n-points", "3", "--reps", "2", "--max-iter", "20", "--n-boot", "50",
            "--quiet", "--out", str(out)]
    assert main(["rates", "--scenario", str(src), *grid]) == 0
    prov_path = out / "provenance.json"
    prov = json.loads(prov_path.read_text())
    assert prov["scenario_digest"] == hashlib.sha256(src.read_bytes()).hexdigest()
    rows = (out / "results.csv").read_bytes()
    capsys.readouterr()
    assert main(["rates", "--scenario", str(moved), *grid, "--resume"]) == 0
    assert (out / "results.csv").read_bytes() == rows  # nothing refitted, nothing added
    assert json.loads(prov_path.read_text())["config"]["scenario_file"] == str(moved)
    # an edited file at the new path is another sweep
    moved.write_text(moved.read_text().replace("variance = 0.01", "variance = 0.02"))
    assert "variance = 0.02" in moved.read_text()
    assert main(["rates", "--scenario", str(moved), *grid, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # a pre-flight warning of the new variance, then the refusal
    assert err[-1].endswith("(differs in: scenario_digest)")
    # a run written before the digest was recorded: moved cannot be told from edited
    shutil.copy(src, moved)
    prov = json.loads(prov_path.read_text())
    prov.pop("scenario_digest")
    prov_path.write_text(json.dumps(prov))
    assert main(["rates", "--scenario", str(src), *grid, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(differs in: scenario_file);" in err and "does not record the scenario file's digest" in err
    assert f"resume with the file at {moved}" in err

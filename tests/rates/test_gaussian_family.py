"""``moestat rates --family gaussian-moe --estimator mle``: model 1 of Nguyen, Nguyen & Ho (2023)
through the whole rates pipeline (issue 15)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from moestat.cli.main import main
from moestat.rates import RatesConfig, run_rates
from moestat.rates.config import ScenarioSpec

TINY = {"family": "gaussian-moe", "estimator": "mle", "n_min": 300, "n_max": 1200, "n_points": 3, "reps": 3,
        "starts": 2, "init_scale": 0.1, "max_iter": 300, "holdout": 256, "n_boot": 50, "quiet": True}
ARGS = ["rates", "--family", "gaussian-moe", "--estimator", "mle", "--n-min", "300", "--n-max", "1200", "--n-points", "3",
        "--reps", "3", "--starts", "2", "--max-iter", "300", "--n-boot", "50", "--quiet"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


pytestmark = pytest.mark.usefixtures("no_figures")  # tests/rates/conftest.py


def test_exact_model1_runs_with_the_theorem_predictions(tmp_path):
    cfg = RatesConfig.from_dict(TINY)
    assert cfg.router == ("gaussian-moe",)
    s = run_rates(cfg.validate(), tmp_path / "o")
    fits = {f["loss"]: f for f in s["fits"]}
    # Nguyen, Nguyen & Ho (2023), Theorem 1: D1 and the single-atom errors at -1/2
    assert fits["voronoi"]["predicted"] == -0.5 and fits["param_single"]["predicted"] == -0.5
    assert fits["voronoi"]["category"] in ("consistent", "inconsistent", "inconclusive", "pre-asymptotic", "floor")
    res = pd.read_csv(tmp_path / "o" / "results.csv")
    assert len(res) == 9 and set(res["scenario"]) == {"gaussian-moe-model1-exact-k2"}
    assert set(res["estimator"]) == {"mle"} and res["status"].isin(["tol", "max_iter", "nonfinite"]).all()
    assert (res["voronoi"] > 0).all() and res["voronoi_direction"].isna().all()
    assert res["param_multi"].isna().all()  # exact fit: every atom alone in its cell


@pytest.mark.slow
def test_over_fitted_k3_has_shared_cells_and_their_prediction(tmp_path):
    s = run_rates(RatesConfig.from_dict({**TINY, "setting": "over", "k_fit": 3}).validate(), tmp_path / "o")
    fits = {f["loss"]: f for f in s["fits"]}
    assert fits["param_multi"]["predicted"] == pytest.approx(-1 / 8)  # Theorem 2, a cell of two atoms: rbar = 4
    res = pd.read_csv(tmp_path / "o" / "results.csv")
    assert set(res["scenario"]) == {"gaussian-moe-model1-over-k3"}
    assert res["param_multi"].notna().any()
    # over-fitted: SQUAREM, then the Newton polish; its certificate is a convergence status
    assert res["status"].isin(["tol", "newton", "max_iter", "nonfinite"]).all()
    assert (res["status"] == "newton").any()
    assert (res["converged"] == res["status"].isin(["tol", "newton"])).all()


def test_over_fitted_scenarios_get_the_polish_and_exact_ones_do_not():
    from moestat.data.gaussian_scenarios import model1_scenario
    from moestat.estimators.mle import OVER_POLISH_ITER, MLEGaussianMoE

    kw = dict(max_iter=100, random_state=0, device="cpu")
    over = MLEGaussianMoE.for_scenario(model1_scenario("over", 4), **kw)
    exact = MLEGaussianMoE.for_scenario(model1_scenario("exact"), **kw)
    assert (over.polish_iter, over.accelerate) == (OVER_POLISH_ITER, True)
    assert (exact.polish_iter, exact.accelerate) == (0, False)


@pytest.mark.slow
def test_results_do_not_depend_on_workers(tmp_path):
    base = [*ARGS, "--setting", "over", "--k-fit", "3", "--chunk", "1"]
    assert main([*base, "--n-jobs", "1", "--out", str(tmp_path / "a")]) == 0
    assert main([*base, "--n-jobs", "2", "--out", str(tmp_path / "b")]) == 0
    a, b = (pd.read_csv(tmp_path / x / "results.csv").drop(columns="time") for x in "ab")
    pd.testing.assert_frame_equal(a, b)


def test_resume_refuses_another_model_and_bad_input_is_one_line(tmp_path, capsys):
    out = str(tmp_path / "o")
    assert main([*ARGS, "--out", out]) == 0
    before = (tmp_path / "o" / "results.csv").read_bytes()
    capsys.readouterr()
    assert main([*ARGS, "--setting", "over", "--out", out, "--resume"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert (tmp_path / "o" / "results.csv").read_bytes() == before
    for bad, words in (
        (["--family", "gaussian-moe", "--estimator", "lse"], "use --estimator mle"),
        (["--family", "gaussian-moe", "--estimator", "mle", "--extra-starts", "2"], "--extra-starts"),
        (["--family", "gaussian-moe", "--estimator", "mle", "--input-law", "gaussian"], "input_law"),
        (["--starts", "3"], "starts > 1"),
        # flags the family cannot honour (issue 27): it is model 1, never silently
        (["--family", "gaussian-moe", "--estimator", "mle", "--d", "3", "--k-true", "3", "--noise-var", "0.5"],
         "--d, --noise-var cannot be honoured by the gaussian-moe family"),
        (["--scenario", str(EXAMPLES / "softmax_linear.toml"), "--estimator", "mle"], 'declare [noise] model = "mixture"'),
        (["--scenario", str(EXAMPLES / "softmax_linear.toml"), "--estimator", "em"], "use --estimator lse"),
        (["--scenario", str(EXAMPLES / "gaussian_moe_d2.toml"), "--estimator", "lse"], "--estimator mle"),
        (["--scenario", str(EXAMPLES / "gaussian_moe_d2.toml"), "--estimator", "em"], "use --estimator mle"),
        (["--scenario", str(EXAMPLES / "gaussian_moe_d2.toml"), "--estimator", "mle", "--noise-var", "0.5"],
         "--noise-var cannot be honoured by a scenario file"),
        (["--family", "nonsense"], "family"),
    ):
        target = tmp_path / "bad"
        try:
            code = main(["rates", *bad, "--out", str(target)])
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code
        assert code == 2, bad
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1 and "Traceback" not in err, (bad, err)
        assert not target.exists()


def test_the_default_scenario_keys_are_unchanged():
    # results of the regression family written before the family key existed stay resumable
    key = json.loads(ScenarioSpec().key("perturbed"))
    assert "family" not in key and "starts" not in key
    g = json.loads(ScenarioSpec(family="gaussian-moe", setting="over", k_fit=4).key("gaussian-moe"))
    assert g == {"router": "gaussian-moe", "family": "gaussian-moe", "setting": "over", "k_fit": 4,
                 "input_law": "uniform", "starts": 1}


def test_peer_grid_inputs_and_schedule(tmp_path):
    s = run_rates(RatesConfig.from_dict({**TINY, "input_law": "grid", "init": "peer"}).validate(), tmp_path / "o")
    assert s["config"]["input_law"] == "grid" and s["config"]["init"] == "peer"
    res = pd.read_csv(tmp_path / "o" / "results.csv")
    assert np.isfinite(res["voronoi"]).all()


@pytest.mark.slow
def test_random_partition_starts(tmp_path):
    # --init random: each replicate starts from a random partition of its own (x, y), then jittered copies
    s = run_rates(RatesConfig.from_dict({**TINY, "init": "random"}).validate(), tmp_path / "o")
    res = pd.read_csv(tmp_path / "o" / "results.csv")
    assert len(res) == 9 and np.isfinite(res["voronoi"]).all()
    near = run_rates(RatesConfig.from_dict(TINY).validate(), tmp_path / "n")
    assert not pd.read_csv(tmp_path / "n" / "results.csv")["n_iter"].equals(res["n_iter"])  # other starts, other paths
    assert s["config"]["init"] == "random" and near["config"]["init"] == "near"

"""A rates configuration resolved once (issue 32): one :class:`~moestat.rates.resolve.Experiment`
read by the sweep, the store, the fits and the figures, and one scenario protocol."""

import shutil
from pathlib import Path

import numpy as np
import pytest

import moestat.rates.config as config_module
import moestat.rates.resolve as resolve
from moestat.data.gaussian_scenarios import GaussianMoEScenario
from moestat.data.gllim_scenarios import GLLiMScenario
from moestat.data.scenario_files import FileScenario, load_scenario
from moestat.data.synthetic import Scenario, ScenarioBase, make_scenario
from moestat.model.mixing import MixingMeasure
from moestat.rates import RatesConfig, run_rates
from moestat.rates.resolve import Experiment
from moestat.rates.store import config_hash
from moestat.rates.sweep import make_units
from moestat.rates.truth_check import unit_start

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = {"n_min": 200, "n_max": 800, "n_points": 3, "reps": 2, "max_iter": 30, "holdout": 256, "n_boot": 50,
        "quiet": True}


pytestmark = pytest.mark.usefixtures("no_figures")  # tests/rates/conftest.py


def _count_digests(monkeypatch) -> list:
    """Count every read of a scenario file's digest, wherever the rates package reads it."""
    calls = []
    real = resolve.scenario_digest

    def counting(source):
        calls.append(source)
        return real(source)

    monkeypatch.setattr(resolve, "scenario_digest", counting)
    monkeypatch.setattr(config_module, "scenario_digest", counting)
    return calls


@pytest.mark.slow
def test_a_scenario_file_is_read_and_hashed_once_per_run(tmp_path, monkeypatch):
    # before the experiment was resolved once, every scenario_key() and result_fields() hashed the
    # file again: the validation, the store's resume guard and hash, the units, the predictions
    src = tmp_path / "s.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", src)
    cfg = RatesConfig.from_dict({**TINY, "scenario_file": str(src)})
    calls = _count_digests(monkeypatch)
    summary = run_rates(cfg, tmp_path / "out")
    assert calls == [str(src)]
    assert summary["config_hash"] == config_hash(cfg)  # the hash the experiment carries is the config's


def test_the_experiment_holds_what_the_configuration_names(tmp_path):
    src = tmp_path / "s.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", src)
    cfg = RatesConfig.from_dict({**TINY, "scenario_file": str(src)})
    ex = cfg.resolve()
    (router,) = cfg.router
    assert ex.keys == {router: cfg.scenario_key(router)}  # the key a worker rebuilds from
    assert ex.scenarios[router] is resolve.build_scenario(ex.keys[router])
    assert ex.declared == ("D_sigmoid",) and ex.headline == ("D_sigmoid",)
    assert ex.losses[-1] == "D_sigmoid" and ex.predicted["D_sigmoid"] == -0.5
    assert ex.setting == ex.scenarios[router].setting
    assert [u.scenario_key for u in make_units(ex)] == [u.scenario_key for u in make_units(cfg)]


def test_replace_changes_the_grid_without_resolving_the_scenarios_again():
    cfg = RatesConfig.from_dict({**TINY, "router": "perturbed,cosine", "max_reps": 8})
    ex = Experiment.of(cfg)
    grown = ex.replace(reps=4)
    assert grown.config.reps == 4 and grown.scenarios is ex.scenarios and grown.keys is ex.keys
    assert grown.hash == config_hash(cfg.replace(reps=4))
    assert Experiment.of(ex) is ex


def _kinds(tmp_path):
    src = tmp_path / "m.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", src)
    from moestat.data.gaussian_scenarios import model1_scenario
    from moestat.rates.catalogue import catalogue_file

    return [make_scenario("perturbed", "exact"), model1_scenario("exact", None, "uniform", 1), load_scenario(str(src)),
            load_scenario(str(catalogue_file("gllim_model1.toml")))]


def test_every_scenario_kind_follows_the_one_protocol(tmp_path):
    kinds = _kinds(tmp_path)
    assert [type(s) for s in kinds] == [Scenario, GaussianMoEScenario, FileScenario, GLLiMScenario]
    for sc in kinds:
        assert isinstance(sc, ScenarioBase)
        X = sc.holdout(64)
        start = sc.near_truth_start(0.0, np.random.default_rng(0), n=100)
        cols = sc.loss_columns(MixingMeasure.stack([start]), X)
        # a start at the truth with no noise: every defined Voronoi loss is zero
        assert {"voronoi", "regression_l2"} <= set(cols)
        assert np.all(np.asarray(cols["voronoi"])[np.isfinite(cols["voronoi"])] < 1e-8)
        assert {s.name for s in sc.loss_specs} <= set(cols)


def test_a_scenario_file_refuses_the_peer_schedule(tmp_path):
    from moestat.rates.sweep import WorkUnit

    sc = _kinds(tmp_path)[2]
    unit = WorkUnit("{}", "file:m", 100, (0,), 0, "lse", 10, "peer", 0.1, 0, 64, "cpu")
    with pytest.raises(ValueError, match="init = 'peer' is not available for a scenario file"):
        unit_start(unit, sc, 100, np.random.default_rng(0))


def test_a_joint_gllim_fit_is_judged_against_the_truth_by_its_joint_likelihood(tmp_path):
    # the truth check asked the GLLiM scenario for a regression model it does not have (model = None)
    # and the sweep stopped on an AttributeError; the protocol's loglik_at is the joint likelihood
    from moestat.rates.catalogue import catalogue_file

    cfg = RatesConfig.from_dict({**TINY, "max_iter": 20, "estimator": "mle",
                                 "scenario_file": str(catalogue_file("gllim_model1.toml"))})
    run_rates(cfg, tmp_path / "o")
    import pandas as pd

    res = pd.read_csv(tmp_path / "o" / "results.csv")
    assert len(res) == 6 and set(res["truth_check"]) <= {"above", "answered", "below_truth"}
    sc = Experiment.of(cfg).scenarios[cfg.router[0]]
    X, Y = sc.sample(50, np.random.default_rng(1))
    assert np.allclose(sc.loglik_at(X[None], Y[None], sc.truth, fitted=False), sc.loglik(X[None], Y[None]))

"""Scenarios from TOML and Python files (issue 14): parsing, one-line errors, losses, a small study."""

from pathlib import Path

import numpy as np
import pytest

from moestat.data.scenario_files import FileScenario, ScenarioFileError, load_scenario, scenario_digest
from moestat.estimators.lse import LeastSquaresMoE
from moestat.model.protocol import ProtocolModel
from moestat.model.regression import MoEModel
from moestat.rates.sweep import compute_losses

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

GOOD = """
name = "t"
[gate]
score = "linear"
normalisation = "sigmoid"
[expert]
kind = "tanh"
[fit]
k = 3
[[atoms]]
beta0 = 0.5
beta1 = [1.0, -1.0]
eta = [1.0, 0.5, 0.2]
[[atoms]]
beta0 = -0.3
beta1 = [-1.0, 2.0]
eta = [-0.7, 1.2, -0.4]
[[losses]]
name = "L"
mass = "sigmoid"
predicted_exponent = -0.25
blocks = [{ label = "b", source = "beta1", exponent = [1, 2] }, { label = "a", source = "eta[:d]", exponent = 1 }]
"""


def _write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_toml_scenario_round_trip(tmp_path):
    sc = load_scenario(_write(tmp_path, GOOD))
    assert isinstance(sc.model, ProtocolModel) and sc.model.gate.normalisation == "sigmoid"
    assert (sc.k_true, sc.k_fit, sc.setting, sc.d) == (2, 3, "over", 2)
    assert sc.predicted == {"L": -0.25}
    np.testing.assert_array_equal(sc.truth.beta1, [[1.0, -1.0], [-1.0, 2.0]])
    X, Y = sc.sample(50, np.random.default_rng(0))
    X2, Y2 = sc.sample(50, np.random.default_rng(0))
    assert X.shape == (50, 2) and np.array_equal(Y, Y2)
    start = sc.near_truth_start(0.0, np.random.default_rng(0))
    assert start.n_atoms == 3 and np.array_equal(start.beta1[2], sc.truth.beta1[0])


def test_builtin_softmax_file_uses_the_analytic_model():
    sc = load_scenario(str(EXAMPLES / "softmax_linear.toml"))
    assert isinstance(sc.model, MoEModel) and sc.model.gate.kind == "linear"
    start = sc.near_truth_start(0.0, np.random.default_rng(0))
    np.testing.assert_array_equal(start.beta0, sc.truth.beta0)  # exact start, reference atom last


def test_npy_inputs_are_resampled(tmp_path):
    X = np.random.default_rng(1).uniform(-1, 1, (30, 2))
    np.save(tmp_path / "x.npy", X)
    text = GOOD.replace('[fit]', '[input]\nlaw = "npy"\npath = "x.npy"\n[fit]')
    sc = load_scenario(_write(tmp_path, text))
    rows = sc.sample_x(100, np.random.default_rng(0))
    assert all(any(np.array_equal(r, x) for x in X) for r in rows)


@pytest.mark.parametrize("edit,msg", [
    (lambda s: s.replace('normalisation = "sigmoid"', 'normalisation = "tanh"'), "unknown gate normalisation"),
    (lambda s: s.replace('kind = "tanh"', 'kind = "cubic"'), "expert.kind"),
    (lambda s: s.replace('k = 3', 'k = 1'), "at least the true number"),
    (lambda s: s.replace('eta = [1.0, 0.5, 0.2]', 'eta = [1.0, 0.5]'), "atoms"),
    (lambda s: s.replace('beta0 = 0.5\n', ''), "missing 'beta0'"),
    (lambda s: s.replace('predicted_exponent = -0.25', 'predicted_exponent = "fast"'), "predicted_exponent"),
    (lambda s: s.replace('source = "beta1"', 'source = "gamma"'), "bad block source"),
    (lambda s: "colour = 1\n" + s, "unknown key"),
    (lambda s: s.replace('[fit]', '[input]\nlaw = "npy"\npath = "none.npy"\n[fit]'), "input.path"),
    (lambda s: s.replace("[[atoms]]", "[[atoms", 1), "not valid TOML"),
])
def test_bad_files_give_one_line_errors_naming_file_and_key(tmp_path, edit, msg):
    path = _write(tmp_path, edit(GOOD))
    with pytest.raises(ScenarioFileError, match=msg) as e:
        load_scenario(path)
    assert str(e.value).startswith(path) and "\n" not in str(e.value)


def test_softmax_file_needs_a_reference_atom(tmp_path):
    text = GOOD.replace('normalisation = "sigmoid"', 'normalisation = "softmax"').replace('mass = "sigmoid"', 'mass = "softmax"')
    with pytest.raises(ScenarioFileError, match="reference"):
        load_scenario(_write(tmp_path, text))


def test_python_scenario_and_its_errors(tmp_path):
    sc = load_scenario(str(EXAMPLES / "mlp_expert.py") + ":scenario")
    assert isinstance(sc, FileScenario) and sc.model.n_expert_params(2) == 9
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    return 3\ndef g():\n    raise RuntimeError('boom')\n")
    for src, msg in ((f"{bad}:f", "must return a moestat FileScenario"), (f"{bad}:g", "boom"), (f"{bad}:h", "no function 'h'"),
                     (f"{tmp_path}/none.py:f", "no such file")):
        with pytest.raises(ScenarioFileError, match=msg):
            load_scenario(src)


def test_digest_changes_with_the_file(tmp_path):
    p = _write(tmp_path, GOOD)
    d1 = scenario_digest(p)
    Path(p).write_text(GOOD.replace("-0.25", "-0.5"))
    assert scenario_digest(p) != d1 and len(d1) == 64


def test_compute_losses_reports_the_declared_losses(tmp_path):
    sc = load_scenario(_write(tmp_path, GOOD))
    rng = np.random.default_rng(0)
    fitted = type(sc.truth).stack([sc.near_truth_start(0.01, rng) for _ in range(3)])
    out = compute_losses(sc, fitted, sc.holdout(256))
    # the sweep's usual columns plus the declared loss (written to extras.csv by the sweep)
    assert set(out) == {"voronoi", "voronoi_direction", "param_single", "param_multi", "mass", "regression_l2", "L"}
    assert out["L"].shape == (3,)
    assert np.all(out["L"] > 0) and np.all(out["regression_l2"] > 0)


@pytest.mark.slow
def test_sigmoid_exact_example_fits_converge_below_the_truth_objective():
    """Fits of the shipped sigmoid example (autograd path) converge, and each reaches an objective
    no larger than the truth's own mean squared residual (a least-squares fit near the truth must)."""
    import torch

    sc = load_scenario(str(EXAMPLES / "sigmoid_exact.toml"))
    rng = np.random.default_rng(1)
    data = [sc.sample(400, rng) for _ in range(4)]
    X, Y = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    start = type(sc.truth).stack([sc.near_truth_start(0.05, rng) for _ in range(4)])
    est = LeastSquaresMoE(sc.fit_model, sc.k_fit, init=start).fit(X, Y)
    assert est.converged_.all(), est.status_
    truth_mse = ((sc.model.predict(torch.as_tensor(X), sc.truth).numpy() - Y) ** 2).mean(-1)
    assert np.all(est.objective_ <= truth_mse * (1 + 1e-12))
    assert np.all(est.objective_ < truth_mse)  # strictly: the fit absorbs some noise


# ---- likelihood scenarios (issue 27) ------------------------------------------------------------------
MIXTURE = """
name = "mix"
[gate]
normalisation = "softmax"
[expert]
kind = "linear"
[noise]
model = "mixture"
[[atoms]]
beta0 = 0.5
beta1 = [2.0, -1.0]
eta = [1.0, -1.0, 0.5]
variance = 0.04
[[atoms]]
beta0 = 0.0
beta1 = [0.0, 0.0]
eta = [-1.0, 1.0, -0.5]
variance = 0.25
"""


def test_mixture_scenario_draws_y_from_the_mixture(tmp_path):
    from moestat.model.likelihood import LikelihoodModel

    sc = load_scenario(_write(tmp_path, MIXTURE))
    assert sc.likelihood and isinstance(sc.model, LikelihoodModel) and sc.truth.eta.shape == (2, 4)
    X, Y = sc.sample(20000, np.random.default_rng(0))
    # the residual around the true mean function has the mixture's variance, not an additive one
    w = sc.model.weights(X, sc.truth).numpy()
    mu = sc.model.expert_outputs(X, sc.truth).numpy()
    g = (w * mu).sum(1)
    var = (w * (mu ** 2 + sc.truth.eta[:, -1])).sum(1) - g ** 2
    np.testing.assert_allclose(np.mean((Y - g) ** 2), var.mean(), rtol=0.05)
    # additive files are unchanged: no variance column, the additive noise
    add = load_scenario(str(EXAMPLES / "softmax_linear.toml"))
    assert not add.likelihood and add.truth.eta.shape == (3, 3)


@pytest.mark.parametrize("edit, words", [
    (("variance = 0.04", "varience = 0.04"), "unknown key(s) ['varience'] in atoms[0]"),
    (('normalisation = "softmax"', 'scroe = "linear"'), "unknown key(s) ['scroe'] in [gate]"),
    (('model = "mixture"', 'model = "mixture"\nvariance = 0.1'), "give each atom its variance"),
    (("variance = 0.25\n", ""), "every atom needs its variance"),
    (('model = "mixture"', 'model = "mixtur"'), "noise.model must be one of"),
    (('kind = "linear"', 'kind = "multinomial"\nclasses = 3'), "atoms[].variance"),
])
def test_likelihood_file_errors_name_the_key(tmp_path, edit, words):
    with pytest.raises(ScenarioFileError) as e:
        load_scenario(_write(tmp_path, MIXTURE.replace(*edit, 1)))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_misspelt_predicted_exponent_is_an_error(tmp_path):
    with pytest.raises(ScenarioFileError, match=r"unknown key\(s\) \['predicted_exponant'\] in losses\[0\]"):
        load_scenario(_write(tmp_path, GOOD.replace("predicted_exponent", "predicted_exponant")))


def test_gaussian_gate_weights_must_sum_to_one(tmp_path):
    text = MIXTURE.replace('normalisation = "softmax"', 'normalisation = "gaussian"')
    with pytest.raises(ScenarioFileError, match="mixing weights and must sum to 1"):
        load_scenario(_write(tmp_path, text))
    ok = text.replace("beta0 = 0.5", f"beta0 = {float(np.log(0.3))!r}").replace("beta0 = 0.0", f"beta0 = {float(np.log(0.7))!r}")
    sc = load_scenario(_write(tmp_path, ok))
    assert sc.model.gate.normalisation == "gaussian" and not sc.model.gate.reference


@pytest.mark.slow
def test_a_generic_likelihood_sweep_runs_end_to_end(tmp_path):
    from moestat.rates import RatesConfig, run_rates

    path = _write(tmp_path, MIXTURE.replace('kind = "linear"', 'kind = "tanh"'))
    cfg = RatesConfig.from_dict({"scenario_file": path, "estimator": "mle", "n_min": 200, "n_max": 800, "n_points": 3,
                                 "reps": 2, "max_iter": 100, "holdout": 128, "n_boot": 20, "quiet": True}).validate()
    run_rates(cfg, tmp_path / "o")
    import pandas as pd

    df = pd.read_csv(tmp_path / "o" / "results.csv")
    assert len(df) == 6 and np.isfinite(df["voronoi"]).all() and np.isfinite(df["regression_l2"]).all()
    assert set(df["status"]) <= {"tol", "newton", "max_iter"}


def test_an_over_specified_top_k_likelihood_fit_is_judged_with_its_fitted_gate(tmp_path):
    """Issue 33: regression_l2 of a Top-K likelihood file evaluates the fitted measure with the
    fitted gate (K-bar = K + k - k* active experts), not with the true Top-K gate."""
    import torch

    from moestat.data.likelihood_losses import likelihood_loss_columns
    from moestat.model.mixing import MixingMeasure

    src = Path(__file__).resolve().parents[2] / "moestat" / "rates" / "catalogue_files" / "topk_gmoe_exact.toml"
    text = src.read_text().replace("[fit]\nk = 3", "[fit]\nk = 4")  # Top-2 of 3, fitted with 4 atoms
    sc = load_scenario(_write(tmp_path, text))
    assert sc.setting == "over" and sc.model.gate.k_active == 2 and sc.fit_model.gate.k_active == 3
    fitted = MixingMeasure.stack([sc.near_truth_start(0.2, np.random.default_rng(s)) for s in range(3)])
    Xh = sc.holdout(512)
    out = likelihood_loss_columns(sc, fitted, Xh)
    x = torch.as_tensor(Xh)
    g_star = sc.model.predict(x, sc.truth).numpy()
    want = np.sqrt(np.mean((sc.fit_model.predict(x, fitted).numpy() - g_star) ** 2, axis=-1))
    true_gate = np.sqrt(np.mean((sc.model.predict(x, fitted).numpy() - g_star) ** 2, axis=-1))
    np.testing.assert_allclose(out["regression_l2"], want, rtol=1e-12)
    assert np.all(np.abs(want - true_gate) > 1e-3)  # the two gates give different numbers here


def _own_gmoe(tmp_path, edit=None):
    """examples/gaussian_moe_d2.toml without its [[losses]] table: a user's own exact-fit softmax
    Gaussian MoE with linear experts that states no loss."""
    text = (EXAMPLES / "gaussian_moe_d2.toml").read_text()
    text = text[: text.index("[[losses]]")]
    if edit:
        text = text.replace(*edit)
    return _write(tmp_path, text, "own.toml")


def test_a_users_exact_softmax_gaussian_moe_gets_theorem_1_by_default(tmp_path):
    """Issue 33, scope 7: D1 with the exponent -1/2 of Nguyen, Nguyen & Ho (2023), Theorem 1, named."""
    sc = load_scenario(_own_gmoe(tmp_path))
    (spec,) = sc.losses
    assert sc.predicted == {spec.name: -0.5} and spec.name.endswith("D1")
    assert "Nguyen, Nguyen & Ho (2023), Theorem 1" in sc.prediction_sources[spec.name]
    # declared losses still override: the example's own D1 and exponent, no default source
    ex = load_scenario(str(EXAMPLES / "gaussian_moe_d2.toml"))
    assert ex.predicted == {"D1": -0.5} and ex.prediction_sources == {}


@pytest.mark.parametrize("edit", [
    ("[fit]\nk = 3", "[fit]\nk = 4"),                                    # over-specified: Theorem 1 does not apply
    ('normalisation = "softmax"', 'normalisation = "softmax"\nk_active = 2'),  # Top-2: another theorem
])
def test_outside_theorem_1_no_default_prediction_is_made(tmp_path, edit):
    sc = load_scenario(_own_gmoe(tmp_path, edit))
    assert sc.predicted == {} and sc.prediction_sources == {}


@pytest.mark.slow
def test_the_default_prediction_reaches_the_summary_with_its_theorem(tmp_path):
    from moestat.rates import RatesConfig, run_rates
    from moestat.rates.experiment import format_table
    from moestat.theorems.file_theorems import scenario_theorems

    cfg = RatesConfig.from_dict({"scenario_file": _own_gmoe(tmp_path), "estimator": "mle", "n_min": 300, "n_max": 1200,
                                 "n_points": 3, "reps": 2, "n_boot": 50, "holdout": 256, "quiet": True})
    s = run_rates(cfg.validate(), tmp_path / "o", theorems=scenario_theorems)  # as moestat rates hands them
    f = next(f for f in s["fits"] if f["loss"] == "gaussian_D1")
    assert f["predicted"] == -0.5 and "Theorem 1" in f["prediction_source"]
    assert "prediction by default (the file states none): Nguyen, Nguyen & Ho (2023), Theorem 1" in format_table(s)

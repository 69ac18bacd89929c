"""Theorems for the user's own files (issue 59, scope 5): a scenario file whose truth meets a theorem's
hypotheses gets that theorem's predictions on the losses it speaks of, named, with their standing;
a truth that fails them gets none and the failing condition; the file's own ``[[losses]]`` override;
``moestat check`` lists only the theorems of the fit's setting."""

import tomllib
from pathlib import Path

import numpy as np
import pandas as pd

from moestat.cli.main import main
from moestat.data.scenario_files import load_scenario
from moestat.rates import RatesConfig
from moestat.rates.experiment import format_table
from moestat.rates.fit import fit_experiment
from moestat.theorems.hypotheses import CLASSICAL_CITE, check_hypotheses
from moestat.rates.resolve import Experiment
from moestat.rates.store import RESULT_COLUMNS
from moestat.theorems.file_theorems import scenario_theorems

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
COSINE = EXAMPLES / "perturbed_cosine_over.toml"
SIGMOID = EXAMPLES / "sigmoid_gmoe_exact.toml"
GMOE = EXAMPLES / "gaussian_moe_d2.toml"


def _file(tmp_path, src: Path, edits=(), cut_losses=False, append="", name="f.toml") -> str:
    text = src.read_text()
    if cut_losses:
        text = text[: text.index("[[losses]]")]
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    p = tmp_path / name
    p.write_text(text + append)
    return str(p)


def _experiment(path: str, **extra) -> Experiment:
    # as the doors hand a file's theorems to the engine (moestat rates, reproduce, plot)
    return Experiment.of(RatesConfig.from_dict({"scenario_file": path, "n_min": 500, "n_max": 2000, "n_points": 3,
                                                "reps": 2, **extra})).with_theorems(scenario_theorems)


def _keys(rep) -> list[str]:
    return [t["theorem"] for t in rep["theorems"]]


def test_over_specified_perturbed_cosine_file_gets_theorem_5_and_check_does_not_list_theorem_6():
    rep = check_hypotheses(load_scenario(str(COSINE)))
    assert rep["met"] == ["cosine-thm5"] and "cosine-thm6" not in _keys(rep)  # k = 4 > k* = 3: Theorem 6 is exact-fit
    ex = _experiment(str(COSINE))
    p, d = ex.predicted, ex.theorems["details"]
    # Theorem 5: D2, single-atom cells and masses at n^-1/2, atoms of a shared cell at n^-1/4 (an upper bound)
    assert p["D2"] == -0.5 and p["voronoi"] == -0.5 and p["param_single"] == -0.5 and p["mass"] == -0.5
    assert p["param_multi"] == -0.25
    for loss in ("D2", "voronoi", "param_single", "param_multi", "mass"):
        assert d[loss]["name"] == "Nguyen et al. (2024), Theorem 5" and d[loss]["standing"] == "digest"
    assert "regression_l2" not in d  # the pipeline's -1/2, not Theorem 5's
    assert ex.theorems["report"]["failed"] == []


def test_exact_fit_of_the_same_truth_lists_theorem_6_only_and_predicts_d3(tmp_path):
    path = _file(tmp_path, COSINE, [("k = 4", "k = 3")])
    rep = check_hypotheses(load_scenario(path))
    assert rep["met"] == ["cosine-thm6"] and "cosine-thm5" not in _keys(rep)
    ex = _experiment(path)
    assert ex.predicted["D3"] == -0.5 and ex.theorems["details"]["D3"]["name"] == "Nguyen et al. (2024), Theorem 6"
    assert ex.predicted["param_multi"] is None and "param_multi" not in ex.theorems["details"]  # no shared cell


def test_a_truth_breaking_a_hypothesis_gets_no_prediction_and_the_failing_condition(tmp_path):
    # the second atom made a copy of the first: atoms_distinct fails (and Definition 1 with it)
    path = _file(tmp_path, COSINE, [("beta1 = [-1.0, 1.5, 1.0]", "beta1 = [2.0, -1.0, 0.5]"),
                                    ("eta = [-1.0, 2.0, -0.5, -0.4]", "eta = [1.5, -1.0, 0.5, 0.3]")])
    ex = _experiment(path)
    assert ex.predicted.get("D2") is None and ex.predicted["param_single"] is None and ex.theorems["details"] == {}
    (failed,) = ex.theorems["report"]["failed"]
    assert failed["theorem"] == "cosine-thm5"
    assert any(f.startswith("atoms_distinct fails (needs holds)") for f in failed["failing"])


def test_the_files_own_losses_override_the_theorems_exponent(tmp_path):
    own = '\n[[losses]]\nname = "D2"\nbuiltin = "D2"\npredicted_exponent = -0.3\n'
    ex = _experiment(_file(tmp_path, COSINE, append=own))
    assert ex.predicted["D2"] == -0.3 and "D2" not in ex.theorems["details"]
    assert ex.predicted["param_single"] == -0.5  # a loss the file does not state keeps Theorem 5's


def test_sigmoid_gated_gaussian_moe_exact_mle_gets_the_classical_rate_on_every_parameter_loss():
    rep = check_hypotheses(load_scenario(str(SIGMOID)))
    assert rep["met"] == ["classical-mle"] and rep["conditions"]["fisher_nonsingular"]["holds"]
    ex = _experiment(str(SIGMOID), estimator="mle")
    for loss in ("D1", "voronoi", "param_single", "mass", "regression_l2"):
        assert ex.predicted[loss] == -0.5
        assert ex.theorems["details"][loss]["name"] == CLASSICAL_CITE
        assert ex.theorems["details"][loss]["standing"] == "own derivation"


def test_the_classical_theorem_is_for_exact_fits_only(tmp_path):
    path = _file(tmp_path, SIGMOID, [("k = 2", "k = 3")])
    rep = check_hypotheses(load_scenario(path))
    assert "classical-mle" not in _keys(rep) and "fisher_nonsingular" not in rep["conditions"]
    ex = _experiment(path, estimator="mle")
    assert ex.predicted["param_single"] is None and ex.theorems["details"] == {}


def test_a_singular_fisher_information_withholds_the_classical_theorem(tmp_path):
    """A Gaussian gate with a known common variance: a common shift of the centres leaves p(y | x)
    unchanged, so the Fisher information of the truth is singular."""
    p = tmp_path / "ggate.toml"
    p.write_text('[gate]\nscore = "linear"\nnormalisation = "gaussian"\nvariance = 0.5\n[expert]\nkind = "linear"\n'
                 '[noise]\nmodel = "mixture"\n'
                 f'[[atoms]]\nbeta0 = {float(np.log(0.5))!r}\nbeta1 = [-0.5]\neta = [1.0, 0.5]\nvariance = 0.05\n'
                 f'[[atoms]]\nbeta0 = {float(np.log(0.5))!r}\nbeta1 = [0.5]\neta = [-1.0, 0.0]\nvariance = 0.08\n')
    ex = _experiment(str(p), estimator="mle")
    assert ex.predicted["param_single"] is None and ex.theorems["details"] == {}
    classical = next(t for t in ex.theorems["report"]["failed"] if t["theorem"] == "classical-mle")
    assert any(f.startswith("fisher_nonsingular fails") for f in classical["failing"])


def test_softmax_gaussian_moe_over_specified_gets_theorem_2(tmp_path):
    """examples/gaussian_moe_d2.toml without its losses, fitted with k = k* + 1: Nguyen, Nguyen & Ho (2023),
    Theorem 2 -- D2 and single-atom cells at n^-1/2, the cell of two atoms at n^-1/(2 rbar(2)) = n^-1/8."""
    ex = _experiment(_file(tmp_path, GMOE, [("k = 3", "k = 4")], cut_losses=True), estimator="mle")
    p, d = ex.predicted, ex.theorems["details"]
    assert p["gaussian_D2"] == -0.5 and p["param_single"] == -0.5 and p["param_multi"] == -0.125
    assert d["gaussian_D2"]["name"] == "Nguyen, Nguyen & Ho (2023), Theorem 2" and d["gaussian_D2"]["standing"] == "abstract"
    # exact: Theorem 1 (the classical theorem is met too, but the named theorem speaks first)
    ex1 = _experiment(_file(tmp_path, GMOE, cut_losses=True, name="g1.toml"), estimator="mle")
    assert ex1.predicted["gaussian_D1"] == -0.5
    assert ex1.theorems["details"]["gaussian_D1"]["name"] == "Nguyen, Nguyen & Ho (2023), Theorem 1"


def test_the_table_and_summary_name_the_theorem_beside_each_prediction():
    """The rate fits of a file's losses carry the theorem, its standing and its source; the printed
    table has them in a column and a line per theorem met."""
    ex = _experiment(str(COSINE))
    rng = np.random.default_rng(0)
    rows = []
    for n in (500, 1000, 2000):
        for r in range(2):
            row = {c: 0 for c in RESULT_COLUMNS}
            v = n ** -0.5 * rng.lognormal(0, 0.05)
            row.update(scenario="perturbed-tanh-over", router="file:perturbed-tanh-over", setting="over", n=n,
                       replicate=r, estimator="lse", converged=True, status="ftol", voronoi=v, voronoi_direction=v,
                       param_single=v, param_multi=v ** 0.5, mass=v, regression_l2=v, D2=v)
            rows.append(row)
    fits = fit_experiment(pd.DataFrame(rows), ex)
    f = next(f for f in fits if f["loss"] == "D2")
    assert f["predicted"] == -0.5 and f["prediction_theorem"] == "Nguyen et al. (2024), Theorem 5"
    assert f["prediction_standing"] == "digest"
    assert "prediction_theorem" not in next(f for f in fits if f["loss"] == "regression_l2")
    summary = {"fits": fits, "counts": {"fits": 6, "expected": 6, "converged": 6, "failed": 0, "nonfinite": 0},
               "tolerance": 0.15, "theorems": ex.theorems["report"]}
    text = format_table(summary)
    head = text.splitlines()[0]
    d2 = next(line for line in text.splitlines() if line.startswith("file:perturbed-tanh-over D2 "))
    assert "theorem [standing]" in head and d2.endswith("Nguyen et al. (2024), Theorem 5 [digest]")
    assert "theorem met: Nguyen et al. (2024), Theorem 5 (digest): predicts voronoi, D2" in text


def test_a_slow_theorem_labels_its_losses_without_an_exponent(tmp_path):
    """Polynomial (linear) experts under an over-specified softmax gate: slower than any polynomial rate."""
    path = tmp_path / "lin.toml"
    path.write_text('name = "lin"\n[gate]\nscore = "linear"\n[expert]\nkind = "linear"\n[noise]\nvariance = 0.01\n'
                    '[fit]\nk = 3\n[[atoms]]\nbeta0 = 0.4\nbeta1 = [1.5, -1.0]\neta = [1.0, 0.5, 0.2]\n'
                    '[[atoms]]\nbeta0 = 0.0\nbeta1 = [0.0, 0.0]\neta = [-0.7, 1.2, -0.4]\n')
    ex = _experiment(str(path))
    d = ex.theorems["details"]
    assert ex.predicted["D2"] is None and d["D2"]["claim"] == "slower than any polynomial rate"
    assert d["D2"]["theorem"] == "lse-polynomial" and d["D2"]["standing"] == "abstract"


def test_check_prints_only_the_theorems_of_the_fits_setting(capsys):
    assert main(["check", str(COSINE), "--n-min", "1000", "--n-max", "4000", "--n-points", "3", "--draws", "2000"]) == 0
    out = capsys.readouterr().out
    assert "MEETS Nguyen et al. (2024), Theorem 5" in out and "Theorem 6" not in out


def test_the_examples_state_no_losses():
    for f in (COSINE, SIGMOID):
        assert "losses" not in tomllib.loads(f.read_text())


def test_the_engine_without_the_doors_theorems_says_the_truth_was_not_judged(tmp_path):
    # run_rates never judges a truth itself: a file's run without theorems handed in predicts only what
    # the file states and records why, instead of silently dropping the theorem's prediction
    from moestat.rates import run_rates
    from moestat.rates.resolve import NOT_JUDGED

    ex = _experiment(str(COSINE))
    bare = Experiment.of(ex.config)
    assert bare.theorems is None and bare.prediction_sources == {}
    assert ex.prediction_sources and bare.with_theorems(NOT_JUDGED).predicted.get("D2") is None
    assert ex.predicted["D2"] == -0.5
    cfg = ex.config.replace(quiet=True, reps=2, n_min=500, n_max=1000, n_points=3)
    s = run_rates(cfg, tmp_path / "plain", figure_formats="none")
    assert s["theorems"]["not_checked"].startswith("not judged")
    assert all(f.get("prediction_theorem") is None for f in s["fits"])
    s = run_rates(cfg, tmp_path / "judged", figure_formats="none", theorems=scenario_theorems)
    assert "not_checked" not in s["theorems"] and any(f.get("prediction_theorem") for f in s["fits"])


def test_a_rejudged_file_run_without_the_doors_theorems_says_so(tmp_path):
    from moestat.rates import run_rates
    from moestat.rates.experiment import rejudge_run

    cfg = _experiment(str(COSINE)).config.replace(quiet=True, reps=2, n_min=500, n_max=1000, n_points=3)
    s = run_rates(cfg, tmp_path / "r", figure_formats="none", theorems=scenario_theorems)
    assert "not_checked" not in s["theorems"]
    judged = rejudge_run(tmp_path / "r", date="2026-12-06", theorems=scenario_theorems)
    assert judged["theorems"] == s["theorems"] and judged["fits"] == s["fits"]  # the same rules, the same verdicts
    bare = rejudge_run(tmp_path / "r", date="2026-12-06")
    assert bare["theorems"]["not_checked"].startswith("not judged")
    assert all(f.get("prediction_theorem") is None for f in bare["fits"])

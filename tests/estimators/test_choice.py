"""The one rule from a scenario's declared model to its estimator (moestat.estimators.choice), and the
layering it buys: no scenario module imports the estimators' package (issue 58)."""

import ast
from pathlib import Path

import numpy as np
import pytest

from moestat.data.gaussian_scenarios import model1_scenario
from moestat.data.scenario_files import load_scenario
from moestat.data.synthetic import make_scenario
from moestat.estimators import ESTIMATORS, estimator_class_for, estimator_for, random_start_for
from moestat.estimators.choice import LIKELIHOOD_ESTIMATORS, OBJECTIVE
from moestat.estimators.em import EMGaussianMoE
from moestat.estimators.gllim import GLLiMEM
from moestat.estimators.lse import LeastSquaresMoE
from moestat.estimators.mle import MLEGaussianMoE, em_engine
from moestat.model.declaration import FitDeclaration
from moestat.rates.catalogue import catalogue_file

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth of its code (a function's own import included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", ["data", "model"])
def test_scenarios_and_models_never_import_the_estimators(package):
    offenders = {p.name: sorted(m for m in _imports(p) if m.startswith("moestat.estimators"))
                 for p in sorted((ROOT / "moestat" / package).glob("*.py"))}
    assert not {k: v for k, v in offenders.items() if v}


def test_every_registry_entry_has_an_objective():
    assert set(OBJECTIVE) == set(ESTIMATORS)
    assert set(LIKELIHOOD_ESTIMATORS) == {"em", "mle", "gllim"}


def test_each_scenario_kind_declares_its_family_and_gets_its_class():
    builtin = make_scenario("linear", "exact", d=2, k_true=2, expert="identity")
    gmoe = model1_scenario("exact")
    lik = load_scenario(str(ROOT / "examples" / "gaussian_moe_d2.toml"))
    lse_file = load_scenario(str(ROOT / "examples" / "softmax_linear.toml"))
    gllim = load_scenario(str(catalogue_file("gllim_model1.toml")))
    assert [s.declaration.family for s in (builtin, gmoe, lik, lse_file, gllim)] == [
        "regression", "gaussian-moe", "likelihood", "regression", "gllim"]
    # the default of each (moestat rates' too) and the class it names
    assert [type(estimator_for(s)) for s in (builtin, gmoe, lik, lse_file, gllim)] == [
        LeastSquaresMoE, MLEGaussianMoE, MLEGaussianMoE, LeastSquaresMoE, GLLiMEM]
    # the joint GLLiM answers to its own name and to mle (its maximum likelihood)
    assert estimator_class_for(gllim.declaration, "gllim") is GLLiMEM is estimator_class_for(gllim.declaration, "mle")
    # the built-in scenario's Gaussian noise is fitted by EM too (the decomposition study)
    assert estimator_class_for(builtin.declaration, "em") is EMGaussianMoE


@pytest.mark.parametrize("source,name,words", [
    ("softmax_linear.toml", "mle", 'declare [noise] model = "mixture"'),
    ("gaussian_moe_d2.toml", "lse", "--estimator mle, not 'lse'"),
    ("gllim", "em", "fitted by its joint maximum likelihood"),
    ("gllim", "null", "use --estimator mle"),
    ("gaussian_moe_d2.toml", "gllim", "use --estimator mle"),
    ("softmax_linear.toml", "gllim", "use --estimator lse"),
    ("softmax_linear.toml", "nonsense", "unknown estimator"),
])
def test_a_name_that_does_not_fit_the_model_is_one_line(source, name, words):
    path = catalogue_file("gllim_model1.toml") if source == "gllim" else ROOT / "examples" / source
    with pytest.raises(ValueError) as err:
        estimator_for(load_scenario(str(path)), name)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_several_starts_are_for_the_likelihood_entries_only():
    d = FitDeclaration("likelihood", None, 2, 1, 3, ("mle",), n_starts=3)
    assert estimator_class_for(d, "mle") is MLEGaussianMoE
    with pytest.raises(ValueError, match="--starts > 1"):
        estimator_class_for(d, "em")


def test_the_declaration_refuses_what_it_cannot_mean():
    with pytest.raises(ValueError, match="unknown model family"):
        FitDeclaration("poisson", None, 2, 1, 2, ("mle",))
    with pytest.raises(ValueError, match="objectives"):
        FitDeclaration("regression", None, 2, 1, 2, ("bayes",))


def test_the_em_engine_rule_is_public():
    lik = load_scenario(str(ROOT / "examples" / "gaussian_moe_d2.toml"))  # the linear softmax, linear experts
    laplace = load_scenario(str(catalogue_file("laplace_gmoe_exact.toml")))
    assert em_engine(None) == em_engine(lik.fit_model) == "fused"
    assert em_engine(laplace.fit_model) == "generic" and em_engine(None, generic=True) == "generic"


def test_random_starts_follow_the_declared_model():
    rng = np.random.default_rng(0)
    lse_file = load_scenario(str(ROOT / "examples" / "softmax_linear.toml"))
    G = random_start_for(lse_file.declaration, None, None, rng)  # data-free: X and Y are not read
    assert G.eta.shape == (lse_file.k_fit, lse_file.d + 1) and G.satisfies_reference_convention()
    gllim = load_scenario(str(catalogue_file("gllim_model1.toml")))
    X, Y = gllim.sample(300, np.random.default_rng(1))
    H = random_start_for(gllim.declaration, X, Y, rng)
    d = gllim.d
    assert H.eta.shape == (gllim.k_fit, d + 2 + d * d) and np.isclose(np.exp(H.beta0).sum(), 1.0)

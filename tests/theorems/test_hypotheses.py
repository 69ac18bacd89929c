"""Theorem hypotheses checked by autograd (moestat.theorems.hypotheses, ``moestat check``)."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from moestat.cli.main import main
from moestat.data.scenario_files import scenario_from_mapping
from moestat.model.mixing import MixingMeasure
from moestat.model.protocol import FunctionExpert, ProtocolModel
from moestat.theorems.hypotheses import check_hypotheses, conditions, independence

N = 1500  # inputs: enough for the largest family here (about 100 columns)


def _softmax_truth(kind: str, normalisation: str = "softmax", score: str = "linear") -> dict:
    atoms = [{"beta0": 0.4, "beta1": [1.5, -1.0], "eta": [1.0, 0.5, 0.2]},
             {"beta0": 0.0, "beta1": [0.0, 0.0] if normalisation == "softmax" else [-1.0, 2.0], "eta": [-0.7, 1.2, -0.4]}]
    return {"name": "t", "gate": {"score": score, "normalisation": normalisation}, "expert": {"kind": kind},
            "noise": {"variance": 0.01}, "fit": {"k": 3}, "atoms": atoms}


def _scaled_gelu(normalisation: str = "softmax"):
    """``eta2 * GELU(eta1^T x)`` on the gate atoms of :func:`_softmax_truth`."""
    sc = scenario_from_mapping(_softmax_truth("gelu", normalisation))
    gate = sc.model.gate
    if not hasattr(gate, "normalisation"):  # a built-in MoEModel: its protocol gate
        from moestat.model.protocol import ProtocolGate, linear_score

        gate = ProtocolGate(linear_score, "softmax", None, 1.0, True, "linear")
    ex = FunctionExpert(lambda x, eta: eta[-1] * torch.nn.functional.gelu(x @ eta[:-1]), 3, "eta2*gelu")
    t = sc.truth.numpy()
    truth = MixingMeasure(t.beta0, t.beta1, np.array([[1.0, 0.5, 1.5], [-0.7, 1.2, -1.0]]))
    return dataclasses.replace(sc, truth=truth, model=ProtocolModel(gate, ex))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sigmoid", "gelu", "tanh"])
def test_bias_inside_the_activation_gives_the_pde_under_a_linear_gate(kind):
    """x_u dh/db = dh/da_u for every phi(a^T x + b): flagged, named, and strong identifiability fails."""
    rep = check_hypotheses(scenario_from_mapping(_softmax_truth(kind)), n=N)
    c = rep["conditions"]
    assert c["gate_expert_pde"]["holds"] is True
    assert c["gate_expert_pde"]["value"] <= c["gate_expert_pde"]["tol"]
    assert "x_0 * dh/db = dh/da_0" in c["gate_expert_pde"]["detail"]
    assert "x_1 * dh/db = dh/da_1" in c["gate_expert_pde"]["detail"]
    assert c["strong_linear_gate"]["holds"] is False
    assert c["expert_jacobian"]["holds"] is True  # the failure is the PDE, not the expert alone
    th = {t["theorem"]: t for t in rep["theorems"]}
    assert not th["lse-strong"]["met"] and "x_0 * dh/db = dh/da_0" in th["lse-strong"]["failing"][0]
    assert "lse-polynomial" not in th  # the slow theorem speaks of polynomial experts only


@pytest.mark.slow
@pytest.mark.parametrize("normalisation", ["softmax", "sigmoid"])
def test_scaled_gelu_has_no_pde_but_fails_the_second_order_condition(normalisation):
    """eta2 * GELU(eta1^T x): no gate-expert relation, by a wide margin, but linear in eta2, so
    d2h/deta2^2 = 0 and expert_strong_second_order fails: its theorem's hypotheses are not met (issue 59)."""
    rep = check_hypotheses(_scaled_gelu(normalisation), n=N)
    c = rep["conditions"]
    assert c["gate_expert_pde"]["holds"] is False
    assert c["gate_expert_pde"]["value"] > 1e6 * c["gate_expert_pde"]["tol"]
    assert c["strong_linear_gate"]["holds"] is True
    assert c["expert_strong_second_order"]["holds"] is False and c["expert_strong_second_order"]["value"] == 0.0
    th = {t["theorem"]: t for t in rep["theorems"]}["lse-strong" if normalisation == "softmax" else "sigmoid-strong"]
    assert not th["met"] and th["failing"][0].startswith("expert_strong_second_order fails")
    # reported facts of this expert: linear in eta2 (Euler) and d2h/deta2^2 = 0
    assert c["expert_euler"]["holds"] is False
    assert "d2h/deta_2^2" in c["expert_hessian_nonzero"]["detail"]


@pytest.mark.slow
def test_linear_independence_on_known_sets():
    x = np.random.default_rng(0).uniform(-1, 1, size=(400, 2))
    dep = np.stack([x[:, 0], x[:, 1], np.ones(400), 2 * x[:, 0] - 3 * x[:, 1] + 0.5], 1)
    ok, sv, tol = independence(dep)
    assert not ok and sv <= tol
    ind = np.stack([x[:, 0], x[:, 1], np.ones(400), x[:, 0] * x[:, 1]], 1)
    ok, sv, tol = independence(ind)
    assert ok and sv > 1e6 * tol
    assert not independence(np.stack([x[:, 0], np.zeros(400)], 1))[0]  # a zero function
    # linear experts: dh/deta = (x, 1) at every atom, the same functions across atoms
    rep = check_hypotheses(scenario_from_mapping(_softmax_truth("identity")), n=N)
    c = rep["conditions"]
    assert rep["met"] == ["lse-polynomial"]  # the PDE holds: the slow theorem's case
    assert c["expert_jacobian"]["holds"] is False
    assert c["expert_hessian_nonzero"]["holds"] is False and "d2h/db^2" in c["expert_hessian_nonzero"]["detail"]


@pytest.mark.slow
def test_radial_pde_holds_for_the_cosine_router_only():
    from moestat.data.synthetic import make_scenario

    cos = conditions(make_scenario("cosine", "exact"), n=N)
    per = conditions(make_scenario("perturbed", "exact"), n=N)
    assert cos["radial_pde"]["holds"] is True and cos["radial_pde"]["value"] <= cos["radial_pde"]["tol"]
    assert per["radial_pde"]["holds"] is False and per["radial_pde"]["value"] > 0.01
    assert per["weak_def2"]["holds"] is True and cos["weak_def2"]["holds"] is False


@pytest.mark.slow
def test_vanishing_expert_slopes_are_found():
    m = _softmax_truth("multinomial")
    m["expert"]["classes"] = 3
    m["noise"] = {"model": "mixture"}
    m["fit"] = {"k": 2}
    m["atoms"][0]["eta"] = [0.0, 0.0, 0.5, 0.0, 0.0, -0.5]
    m["atoms"][1]["eta"] = [-1.0, 1.0, -0.3, 1.0, 0.5, 0.2]
    rep = check_hypotheses(scenario_from_mapping(m), n=N)
    assert rep["conditions"]["expert_depends_on_x"]["holds"] is False
    # the exact fit of vanishing slopes is a regular point: its Fisher information is nonsingular, so the
    # classical theorem's hypotheses hold too (why the catalogue leaves its slow arm untested)
    assert rep["met"] == ["multinomial-vanishing", "classical-mle"]
    assert rep["conditions"]["fisher_nonsingular"]["holds"] is True


@pytest.mark.slow
def test_deterministic_given_the_seed():
    sc = scenario_from_mapping(_softmax_truth("tanh"))
    a, b = conditions(sc, n=600, seed=3), conditions(sc, n=600, seed=3)
    assert [(c["holds"], c["value"]) for c in a.values()] == [(c["holds"], c["value"]) for c in b.values()]


@pytest.mark.slow
def test_cli_check_names_the_violated_condition(tmp_path, capsys):
    p = tmp_path / "s.toml"
    p.write_text("""name = "ffn"
[gate]
score = "linear"
normalisation = "softmax"
[expert]
kind = "sigmoid"
[fit]
k = 3
[[atoms]]
beta0 = 0.4
beta1 = [1.5, -1.0]
eta = [1.0, 0.5, 0.2]
[[atoms]]
beta0 = 0.0
beta1 = [0.0, 0.0]
eta = [-0.7, 1.2, -0.4]
""")
    out = tmp_path / "r.json"
    assert main(["check", str(p), "--draws", "2000", "--theorem", "lse-strong", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "FAILS Nguyen, Ho & Rinaldo (2024, least squares)" in text and "x_0 * dh/db = dh/da_0" in text
    rep = json.loads(out.read_text())["hypotheses"]
    assert rep["met"] == [] and rep["conditions"]["gate_expert_pde"]["holds"] is True
    capsys.readouterr()
    with pytest.raises(SystemExit) as ex:  # an argparse choice: exit 2 from the parser
        main(["check", str(p), "--theorem", "no-such-theorem"])
    assert ex.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]


@pytest.mark.slow
def test_gaussian_gate_with_a_known_common_variance_is_not_identifiable():
    """A common shift of the centres (beta0 adjusted) adds t x / v to every logit: the weights do not move."""
    from moestat.data.scenario_files import load_scenario
    from moestat.rates.catalogue import catalogue_file

    c = conditions(load_scenario(str(catalogue_file("gaussian_gate_over.toml"))), n=N)
    assert c["gate_identifiable"]["holds"] is False and c["gate_identifiable"]["value"] <= c["gate_identifiable"]["tol"]
    ok = conditions(scenario_from_mapping(_softmax_truth("tanh")), n=N)["gate_identifiable"]
    assert ok["holds"] is True and ok["value"] > 1e6 * ok["tol"]


@pytest.mark.slow
def test_a_theorem_outside_its_model_class_is_not_met():
    """An exact fit is not the over-specified strong-identifiability theorem's case, whatever its expert."""
    m = _softmax_truth("tanh")
    m["fit"] = {"k": 2}
    sc = scenario_from_mapping(m)
    assert "lse-strong" not in [t["theorem"] for t in check_hypotheses(sc, n=600)["theorems"]]
    t = check_hypotheses(sc, n=600, theorem="lse-strong")["theorems"][0]
    assert not t["met"] and "not of the theorem's class" in t["failing"][0]


@pytest.mark.slow
def test_every_catalogue_expert_contrast_truth_meets_its_own_theorem():
    """Issue 59 (declaration 24): the truths phi(a^T x) wired into the catalogue files meet the strong
    conditions of their theorem (phi(a^T x + b) fails it by the PDE, eta2 * phi(eta1^T x) by d2h/deta2^2 = 0)."""
    from moestat.theorems.catalogue_hypotheses import catalogue_hypotheses

    rows = catalogue_hypotheses(["lse-ffn-vs-linear", "sigmoid-vs-softmax"], n=N)
    by = {(r["entry"], r["run"]): r for r in rows}
    assert set(by) == {("lse-ffn-vs-linear", "ffn-sigmoid"), ("lse-ffn-vs-linear", "linear"),
                       ("sigmoid-vs-softmax", "sigmoid"), ("sigmoid-vs-softmax", "softmax")}
    assert all(r["met"] for r in rows), [(k, r["failing"]) for k, r in by.items() if not r["met"]]
    for key in (("lse-ffn-vs-linear", "ffn-sigmoid"), ("sigmoid-vs-softmax", "sigmoid"), ("sigmoid-vs-softmax", "softmax")):
        c = by[key]["report"]["conditions"]
        assert c["gate_expert_pde"]["holds"] is False and c["gate_expert_pde"]["value"] > 1e6 * c["gate_expert_pde"]["tol"]
        assert c["expert_strong_second_order"]["holds"] is True
        assert c["expert_strong_second_order"]["value"] > 1e6 * c["expert_strong_second_order"]["tol"]
    # the slow arm keeps its bias inside (linear experts): the PDE holds there, as its theorem needs
    assert by[("lse-ffn-vs-linear", "linear")]["report"]["conditions"]["gate_expert_pde"]["holds"] is True


def test_the_joint_gllim_run_is_reported_as_not_checked_not_as_met():
    from moestat.theorems.catalogue_hypotheses import catalogue_hypotheses

    (row,) = catalogue_hypotheses(["gaussian-gated-moe"], n=N)
    assert row["run"] == "gllim" and row["met"] is None and "not checked" in row["failing"][0]


@pytest.mark.slow
def test_check_on_a_joint_gllim_file_says_not_checked_instead_of_crashing(tmp_path):
    """`moestat check` on the Gaussian-gated entry's GLLiM file stopped with an internal
    AttributeError (the GLLiM scenario has no conditional model); it now names why nothing is checked."""
    import subprocess
    import sys

    from moestat.rates.catalogue import catalogue_file

    out = subprocess.run([sys.executable, "-m", "moestat", "check", str(catalogue_file("gllim_model1.toml")), "--draws", "500",
                          "--n-min", "1000", "--n-max", "4000", "--n-points", "3"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "hypotheses of the truth: not checked: the joint GLLiM" in out.stdout
    assert "internal error" not in out.stderr


def test_temperature_gate_reference_row_is_read_as_tau_not_as_a_slope():
    """moestat.model.temperature_gate keeps tau in the reference row (beta1[-1, 0]): the check must
    divide the routers' scores by it, give the reference no router, and find the ray invariance
    c (beta1, beta0, tau) as the gate's non-identifiability.  Before the fix the row was read as a
    slope tau * x_0: two router rows, scores not divided by tau."""
    from moestat.data.scenario_files import load_scenario
    from moestat.rates.catalogue import catalogue_file
    from moestat.theorems.hypotheses import _parts

    sc = load_scenario(str(catalogue_file("temperature_gmoe.toml")))
    tau = float(sc.truth.numpy().beta1[-1, 0])
    assert tau == 0.5
    P = _parts(sc, 200, 0)
    assert P.tau == tau and float(P.beta1[-1].abs().sum()) == 0.0  # no router on the reference atom
    b = P.beta1[0]
    assert torch.allclose(P.score(b), (P.x @ b) / tau, rtol=1e-12, atol=0)  # the router's logit is divided by tau
    c = conditions(sc, n=N)
    assert c["gate_input_dependent"]["value"] == 1.0  # one router row, not two
    gi = c["gate_identifiable"]
    assert gi["holds"] is False and "ray c (beta1, beta0, tau)" in gi["detail"]
    # the named pair is ds/dbeta1 * dh/db = (1 / tau) dh/da: the score derivative is x / tau, not x
    assert "ds/dbeta1_0 * dh/db = 2 * dh/da_0" in c["gate_expert_pde"]["detail"]

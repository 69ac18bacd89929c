"""Issue 59, scope 2: strong identifiability computed (expert_strong_second_order), the catalogue's runs
judged only where their truth meets it, sigmoid-vs-softmax on the same data, multinomial-moe's slow arm untested."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from moestat.data.scenario_files import scenario_from_mapping
from moestat.rates import catalogue as cat
from moestat.theorems.catalogue_hypotheses import run_hypotheses
from moestat.theorems.hypotheses import check_hypotheses, conditions
from moestat.rates.resolve import Experiment
from moestat.rates.sweep import replicate_streams

N = 1500  # inputs: over ten times the columns of the largest family here


def _truth(kind: str, eta: list[list[float]]) -> dict:
    atoms = [{"beta0": 0.4, "beta1": [1.5, -1.0], "eta": eta[0]}, {"beta0": 0.0, "beta1": [0.0, 0.0], "eta": eta[1]}]
    return {"name": "t", "gate": {"score": "linear", "normalisation": "softmax"}, "expert": {"kind": kind},
            "noise": {"variance": 0.01}, "fit": {"k": 3}, "atoms": atoms}


@pytest.mark.parametrize("kind, eta, holds, zero", [
    ("scaled_sigmoid", [[2.0, 1.0, 1.5], [-1.4, 2.4, -1.0]], False, "d2h/deta2^2"),  # linear in eta2
    ("identity", [[1.0, 0.5, 0.2], [-0.7, 1.2, -0.4]], False, "d2h/db^2"),  # every second derivative zero
    ("sigmoid", [[1.0, 0.5, 0.2], [-0.7, 1.2, -0.4]], True, None),  # sigmoid(a^T x + b)
    ("bare_sigmoid", [[4.0, 2.0], [-2.8, 4.8]], True, None),  # sigmoid(a^T x)
])
def test_the_second_order_condition_on_known_experts(kind, eta, holds, zero):
    c = conditions(scenario_from_mapping(_truth(kind, eta)), n=N)["expert_strong_second_order"]
    assert c["holds"] is holds
    if holds:  # independent by a wide margin, not at the threshold
        assert c["value"] > 1e6 * c["tol"]
    else:
        assert c["value"] <= c["tol"] and zero in c["detail"]


def test_the_bare_expert_meets_lse_strong_where_the_biased_one_fails_by_the_pde():
    bare = check_hypotheses(scenario_from_mapping(_truth("bare_sigmoid", [[4.0, 2.0], [-2.8, 4.8]])), n=N,
                            theorem="lse-strong")["theorems"][0]
    biased = check_hypotheses(scenario_from_mapping(_truth("sigmoid", [[1.0, 0.5, 0.2], [-0.7, 1.2, -0.4]])), n=N,
                              theorem="lse-strong")["theorems"][0]
    assert bare["met"] and bare["requires"]["expert_strong_second_order"] == "holds"
    assert not biased["met"] and biased["failing"][0].startswith("strong_linear_gate fails")


def test_the_former_ffn_truth_fails_its_theorem_in_the_catalogue_check():
    """The former lse-ffn-vs-linear FFN truth (eta2 * sigmoid(eta1^T x)) run as the entry runs it: FAILS lse-strong,
    naming expert_strong_second_order; the shipped truth meets it."""
    e = cat.entry("lse-ffn-vs-linear")
    run = {r.label: r for r in e.runs}["ffn-sigmoid"]
    former = dataclasses.replace(run, base={**run.base, "catalogue_file": "lse_sigmoid_over.toml"})
    (old,) = run_hypotheses(e.key, run.label, Experiment.of(cat.run_config(former, quick=True)), n=N)
    assert old["theorem"] == "lse-strong" and old["met"] is False
    assert old["failing"] == ["expert_strong_second_order fails (needs holds): identically zero: d2h/deta2^2"]
    (new,) = run_hypotheses(e.key, run.label, Experiment.of(cat.run_config(run, quick=True)), n=N)
    assert new["met"] is True and new["failing"] == []


def test_both_gates_of_sigmoid_vs_softmax_see_the_same_x_and_y():
    """One truth in both gate families: for every (n, replicate) the two arms draw identical x and noise,
    and y agrees to rounding (the two parametrisations of one regression function)."""
    e = cat.entry("sigmoid-vs-softmax")
    cfgs = {r.label: cat.run_config(r, quick=True) for r in e.runs}
    assert cfgs["sigmoid"].seed == cfgs["softmax"].seed and cfgs["sigmoid"].ns == cfgs["softmax"].ns
    scen = {k: Experiment.of(c).scenarios[c.router[0]] for k, c in cfgs.items()}
    assert scen["sigmoid"].model.gate.normalisation == "sigmoid" and scen["softmax"].model.gate.normalisation == "softmax"
    for n, r in ((1000, 0), (8000, 5)):
        draws = {k: s.sample(n, np.random.default_rng(replicate_streams(cfgs[k].seed, n, r)[0])) for k, s in scen.items()}
        np.testing.assert_array_equal(draws["sigmoid"][0], draws["softmax"][0])
        np.testing.assert_allclose(draws["sigmoid"][1], draws["softmax"][1], rtol=0, atol=1e-14)
    # the truths differ as parameters (each Voronoi loss against its own parametrisation), not as functions
    assert not np.array_equal(scen["sigmoid"].truth.beta1, scen["softmax"].truth.beta1)


def _fit(loss: str, slope: float, category: str) -> dict:
    return {"loss": loss, "router": "r", "slope": slope, "ci_low": slope - 0.1, "ci_high": slope + 0.1,
            "category": category, "reason": "the interval rule", "window": [1000, 8000]}


def test_a_run_whose_truth_fails_its_hypotheses_is_not_judged():
    e = cat.entry("lse-ffn-vs-linear")
    e = dataclasses.replace(e, judge="")  # the two-point instrument is not what is tested here
    failing = [{"router": "file:x", "theorem": "lse-strong", "cite": "c", "met": False,
                "failing": ["expert_strong_second_order fails (needs holds): identically zero: d2h/deta2^2"]}]
    met = [{"router": "file:y", "theorem": "lse-polynomial", "cite": "c", "met": True, "failing": []}]
    runs = [{"label": "ffn-sigmoid", "wall_s": 0.0, "hypotheses": failing,
             "summary": {"fits": [_fit("D2_ls", -0.5, "consistent"), _fit("regression_l2", -0.5, "consistent")]}},
            {"label": "linear", "wall_s": 0.0, "hypotheses": met,
             "summary": {"fits": [_fit("D2_ls", -0.1, "inconclusive"), _fit("regression_l2", -0.5, "consistent")]}}]
    rep = cat._report(e, True, runs)
    rows = {(r["run"], r["loss"]): r for r in rep["predictions"]}
    ffn = rows[("ffn-sigmoid", "D2_ls")]
    assert ffn["category"] == cat.UNMET_CATEGORY and "expert_strong_second_order fails" in ffn["reason"]
    assert ffn["unjudged"]["category"] == "consistent" and ffn["slope"] == -0.5  # the slope is still reported
    assert rows[("linear", "regression_l2")]["category"] == "consistent"  # the other arm is judged
    # the contrast names the failing arm, so it is not judged either, nor the row it decides
    assert rep["contrast"]["category"] == cat.UNMET_CATEGORY
    assert rows[("linear", "D2_ls")]["category"] == cat.UNMET_CATEGORY
    assert rep["counts"]["consistent"] == 1 and rep["counts"][cat.UNMET_CATEGORY] == 3
    assert rep["counts"]["reproduced"] == 1 and rep["counts"]["inconsistent"] == 0
    text = cat.format_report(rep)
    assert "hypotheses: ffn-sigmoid FAILS lse-strong -- expert_strong_second_order fails" in text
    assert "hypotheses: linear MEETS lse-polynomial" in text


def test_multinomial_slow_arm_is_untested_with_its_preflight():
    e = cat.entry("multinomial-moe")
    assert [r.label for r, _ in cat.plan(e.key, quick=True)] == ["nonvanishing"]  # the slow arm is not fitted
    runs = [{"label": "nonvanishing", "wall_s": 0.0, "hypotheses": [],
             "summary": {"fits": [_fit("D1", -0.5, "consistent")]}}]
    rep = cat._report(e, True, runs)
    rows = {r["run"]: r for r in rep["predictions"]}
    assert rows["vanishing"]["category"] == cat.UNTESTED and rows["nonvanishing"]["category"] == "consistent"
    why = rows["vanishing"]["reason"]
    # the pre-flight is computed, not written: a finite n_ok and a positive smallest eigenvalue (regular point)
    n_ok = int(why.split("n_ok ")[1].split(",")[0])
    eig = float(why.split("smallest Fisher eigenvalue ")[1].split(",")[0])
    assert n_ok > 0 and eig > 0
    assert rep["contrast"]["category"] == cat.UNTESTED and rep["counts"][cat.UNTESTED] == 1


def test_bare_expert_values_and_bad_input():
    import torch

    from moestat.model.protocol import bare_expert

    h = bare_expert("bare_tanh", 2)
    x = torch.tensor([[0.5, -1.0], [1.0, 2.0]], dtype=torch.float64)
    a = torch.tensor([[2.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(h(x, a)[:, 0], torch.tanh(x @ a[0]))  # no bias, no outer coefficient
    assert h.n_params == 2
    with pytest.raises(ValueError, match="unknown bare expert kind"):
        bare_expert("bare_relu6", 2)
    with pytest.raises(ValueError, match="eta must have 2 entries"):
        scenario_from_mapping(_truth("bare_sigmoid", [[1.0, 0.5, 0.2], [-0.7, 1.2, -0.4]]))

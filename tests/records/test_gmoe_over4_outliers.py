"""records/archive/catalogue/gmoe-over4/gmoe_over4_outliers.py: its D2 split and responsibilities, and its recorded JSON against the run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from record_paths import resolve
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
OVER4 = ROOT / "records" / "catalogue" / "gmoe-over4"
#: The 40-replicate record's five worst fits (``--top 5``) and every fit with D2 > 1e3 (``--above 1e3``), refitted
ARCH4 = ROOT / "records" / "archive" / "catalogue" / "gmoe-over4"  # the superseded records and their analyses
JSON = ARCH4 / "design40" / "outliers.json"
ABOVE = ARCH4 / "design40" / "outliers_above_1e3.json"
#: The 85-replicate record's worst fit (``--top 1``), on its 11 sizes up to 20 000 (grid20k/)
TOP1 = ARCH4 / "grid20k" / "outliers_top1.json"


def _script():
    path = ROOT / "records" / "archive" / "catalogue" / "gmoe-over4" / "gmoe_over4_outliers.py"
    return load_script(path)


def _four_atoms(slope_of_spike: float, weight_of_spike: float):
    """Model 1's truth fitted with K = 4: its first atom split in two near copies plus a third atom of
    that cell with gate slope ``slope_of_spike`` and weight ``weight_of_spike`` (the shape the recorded
    outliers have)."""
    from moestat.model.mixing import MixingMeasure

    beta0 = np.array([-8 + np.log(0.6), -8 + np.log(0.4), np.log(weight_of_spike), 0.0])
    beta1 = np.array([[25.5], [24.0], [slope_of_spike], [0.0]])
    eta = np.array([[-20.1, 15.05, 0.09], [-19.8, 14.9, 0.085], [-18.0, 14.7, 0.005], [20.0, -5.0, 0.16]])
    return MixingMeasure(beta0, beta1, eta)


def test_d2_terms_add_up_to_the_sweeps_d2_and_name_the_gate_slope_of_a_flat_spike():
    # the per-atom, per-block terms must add up (with the cells' mass gaps) to gaussian_voronoi's D2, which the
    # sweep records; a third atom of the steep atom's cell with slope 2 (|Dbeta1| = 23) and weight 5e-3 gives
    # w |Dbeta1|^6 = 5e-3 * 23^6 ~ 7.4e5 (rbar(3) = 6), the largest term
    from moestat.data.gaussian_scenarios import gaussian_voronoi, model1_truth

    mod = _script()
    T = model1_truth()
    for slope, w in ((2.0, 5e-3), (24.9, 1e-6)):
        G = _four_atoms(slope, w)
        t = mod.d2_terms(G, T)
        rebuilt = sum(t["terms"][b].sum() for b in mod.BLOCKS) + t["mass_gaps"].sum()
        recorded = gaussian_voronoi(G, T, "D2")["voronoi"][0]
        assert np.isclose(t["total"], recorded, rtol=1e-12) and np.isclose(rebuilt, recorded, rtol=1e-12)
        assert list(t["cells"]) == [0, 0, 0, 1] and list(t["sizes"]) == [3, 1]
    t = mod.d2_terms(_four_atoms(2.0, 5e-3), T)
    assert t["exponents"]["beta1"][2] == 6.0 and t["exponents"]["a"][2] == 3.0 and t["exponents"]["beta1"][3] == 1.0
    assert np.isclose(t["terms"]["beta1"][2], t["weights"][2] * 23.0 ** 6, rtol=1e-3)  # w normalised: reference mass 1


def test_responsibilities_give_the_models_log_likelihood_and_sum_to_one():
    # the responsibilities come from the same joint as the model's log-likelihood: their normaliser's log-sum is it
    from moestat.data.gaussian_scenarios import model1_scenario
    from moestat.model.gaussian_moe import log_likelihood

    mod = _script()
    sc = model1_scenario("over", k_fit=4)
    X, Y = sc.sample(300, np.random.default_rng(np.random.SeedSequence(33)))
    G = _four_atoms(2.0, 5e-3)
    gate, post, ll = mod.responsibilities(X, Y, G)
    assert np.allclose(gate.sum(1), 1.0, rtol=1e-12) and np.allclose(post.sum(1), 1.0, rtol=1e-12)
    assert np.isclose(ll, float(log_likelihood(X, Y, G)), rtol=1e-10)


def test_classify_names_each_part_of_the_five_fits_anatomy():
    # a flat-gated (slope 2 against 25), light, narrow third atom of the steep atom's cell: its w |Dbeta1|^6 is
    # > 99.99 % of D2 and it carries no sample, so the anatomy holds for a fit above the truth; each part fails alone
    from moestat.data.gaussian_scenarios import model1_scenario

    mod = _script()
    sc = model1_scenario("over", k_fit=4)
    T = sc.truth
    X, Y = sc.sample(300, np.random.default_rng(np.random.SeedSequence(33)))
    truth = {"beta0": T.beta0.tolist(), "beta1": T.beta1.tolist(), "eta": T.eta.tolist()}

    def fit(G, gap=1.0):
        return mod.anatomy(X, Y, G, T, 1e-6) | {"n": 300, "loglik_fit_minus_truth": gap, "truth": truth}

    spike = mod.classify(fit(_four_atoms(2.0, 5e-3)))
    assert spike["same_anatomy"] and spike["steep_cell_size"] == 3 and spike["dominant_atom"] == 2
    below = mod.classify(fit(_four_atoms(2.0, 5e-3), gap=-1.0))
    assert not below["above_truth"] and not below["same_anatomy"] and below["spike"]
    wide = _four_atoms(2.0, 5e-3)
    wide.eta[2, -1] = 0.2  # wider than the true atom's 0.09: not a spike, though its gate term still rules D2
    c = mod.classify(fit(wide))
    assert c["gate_slope_term_dominates"] and c["flat_gate"] and not c["spike"] and not c["same_anatomy"]
    steep = mod.classify(fit(_four_atoms(24.9, 1e-6)))  # a third copy of the steep atom: no term near 99 % of D2
    assert not steep["gate_slope_term_dominates"] and not steep["flat_gate"] and not steep["same_anatomy"]


@pytest.mark.parametrize("path", [JSON, ABOVE, TOP1], ids=["design40_top5", "design40_above_1e3", "top1"])
def test_recorded_outliers_are_the_runs_worst_fits_and_reproduce_its_rows(path):
    # the JSON must list exactly the fits its rule picks from its run's results.csv (the run it names), each refit
    # equal to its recorded row, its D2 terms adding up to that D2, and the dominant term the largest one.
    # The records are committed: a missing one fails (it is not skipped)
    mod = _script()
    report = json.loads(path.read_text())
    run = resolve(report["run"])  # the path as recorded, now under records/
    assert run.parent.parent in (OVER4, ARCH4) or run.parent == OVER4
    results = pd.read_csv(run / "results.csv")
    if "above" in report:  # every fit above the threshold, none left out
        chosen = mod.pick_above(results, report["above"])
        assert len(report["fits"]) == int((results["voronoi"] > report["above"]).sum())
    else:
        chosen = mod.pick_fits(results, len(report["fits"]))
    assert [(f["n"], f["replicate"]) for f in report["fits"]] == list(zip(chosen["n"], chosen["replicate"]))
    for f in report["fits"]:
        row = results[(results.n == f["n"]) & (results.replicate == f["replicate"])].iloc[0]
        assert f["D2_recorded"] == row["voronoi"]
        assert f["same_as_recorded"]
        for col, v in f["refit_vs_recorded"].items():
            assert v["recorded"] == row[col] and np.isclose(v["refit"], row[col], rtol=report["same_rtol"], atol=0.0)
        assert np.isclose(f["loglik_fit_minus_truth"], row["truth_gap"], rtol=1e-6)
        assert abs(f["loglik_responsibilities_minus_recorded"]) < 1e-6 * abs(row["fit_objective"])
        total = sum(a["contribution"] for a in f["atoms"]) + sum(f["mass_gaps"])
        assert np.isclose(total, f["D2"], rtol=1e-9)
        largest = max(max(a["terms"].values()) for a in f["atoms"])
        assert f["dominant"]["value"] == max(largest, *f["mass_gaps"])
        assert f["won"] == int(np.argmax([s["loglik_minus_truth"] for s in f["starts"]]))
    per_n = report["D2_per_n"]
    assert sum(v["fits"] for v in per_n.values()) == len(results)
    if "anatomy" in report:  # the classification written is the script's rule applied to the fits written
        each = [mod.classify(f) | {"n": f["n"], "replicate": f["replicate"]} for f in report["fits"]]
        assert report["anatomy"]["fits"] == each and report["anatomy"]["of"] == len(each)
        assert report["anatomy"]["same"] == sum(c["same_anatomy"] for c in each)

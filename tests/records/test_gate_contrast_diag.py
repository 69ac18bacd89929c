"""records/catalogue/sigmoid-vs-softmax/gate_contrast_diag.py: its hypothesis rule, its per-atom anatomy, one refit, and its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from json_close import same_numbers
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "records" / "catalogue" / "sigmoid-vs-softmax"
JSONS = {arm: RUNS / f"gate_contrast_diag_{arm}.json" for arm in ("sigmoid", "softmax")}


def _script():
    path = ROOT / "records" / "catalogue" / "sigmoid-vs-softmax" / "gate_contrast_diag.py"
    return load_script(path)


def _scenario(arm: str):
    from moestat.rates.sweep import recorded_unit, unit_scenario as build

    mod = _script()
    unit, _ = recorded_unit(RUNS / arm, 1000, 0, scenario_dir=mod.SCENARIO_DIR)
    return unit, build(unit.scenario_key)


def test_anatomy_names_a_switched_off_far_atom_h1_and_two_live_atoms_h2():
    # the sigmoid truth plus a third atom in cell 0: with beta0 = -12 its gate is below 1e-4 on [-1, 1]^2 (H1; it
    # carries param_multi because it is 3 away and the live copy is exact); with beta0 = 0.5 it is as live as the
    # copy (H2).  param_multi rebuilt by anatomy must equal the library's cell_parameter_errors
    from moestat.losses.voronoi import cell_parameter_errors
    from moestat.model.mixing import MixingMeasure

    mod = _script()
    _, sc = _scenario("sigmoid")
    T = sc.truth
    X = np.random.default_rng(np.random.SeedSequence(33)).uniform(-1, 1, size=(2000, 2))
    for b0, expect in ((-12.0, "H1"), (0.5, "H2")):
        G = MixingMeasure(np.r_[T.beta0, b0], np.vstack([T.beta1, T.beta1[0]]), np.vstack([T.eta, T.eta[0] + [3.0, 0, 0]]))
        a = mod.anatomy(sc, X, G)
        assert a["shared_cell"] == 0 and a["carrier"] == 2 and [x["cell"] for x in a["atoms"]] == [0, 1, 0]
        assert np.isclose(a["param_multi_recomputed"], cell_parameter_errors(G, T)["multi"], rtol=1e-12)
        assert mod.hypothesis(a) == expect
        w = a["atoms"][2]["mean_gate_weight"]
        manual = np.mean(1.0 / (1.0 + np.exp(-(b0 + X @ T.beta1[0]))))  # sigmoid(beta0 + beta1^T x), unnormalised
        assert np.isclose(w, manual, rtol=1e-10)
        # gate-weighted: sqrt(w2 * 3^2 / (w0 + w2)) (the live copy is at distance 0)
        w0 = a["atoms"][0]["mean_gate_weight"]
        assert np.isclose(a["weighted_multi_gate"], np.sqrt(w * 9.0 / (w0 + w)), rtol=1e-10)


@pytest.mark.parametrize("arm", ["sigmoid", "softmax"])
def test_the_flat_set_reproduces_the_truth_and_bounds_param_multi(arm):
    # eta2 * GELU(eta1^T x) is linear in eta2: two copies of true atom 0 whose eta2 combine to eta2* = 1.5 give the
    # truth's regression function for every t.  Sigmoid (each copy the whole gate, eta2 = t and 1.5 - t):
    # param_multi = sqrt(((t - 1.5)^2 + t^2) / 2) >= 0.75, reached at t = 0.75; softmax (half the mass each, eta2 =
    # t and 3 - t): param_multi = |t - 1.5|, zero at t = 1.5, where both copies are the true atom
    mod = _script()
    e = 1.5
    for row in mod.flat_set_losses(arm, ts=(-2.0, 0.0, 0.75, 1.5, 3.0)):
        t = row["t"]
        assert row["regression_l2"] < 1e-12
        want = np.sqrt(((t - e) ** 2 + t**2) / 2) if arm == "sigmoid" else abs(t - e)
        assert np.isclose(row["param_multi"], want, rtol=1e-12, atol=1e-12)
        if arm == "sigmoid":
            assert row["param_multi"] >= e / 2 - 1e-12


@pytest.mark.slow
def test_a_refit_of_an_n1000_unit_equals_its_recorded_rows():
    # the sweep's own steps on the recorded streams: the unit of replicates 4-7 at n = 1 000 (the cheapest unit,
    # ~5 CPU-s): every compared column equal to results.csv
    mod = _script()
    fits = mod.diagnose("sigmoid", ns=(1000,), replicates=(4,))
    rec = pd.read_csv(RUNS / "sigmoid" / "results.csv").set_index(["n", "replicate"])
    assert [f["replicate"] for f in fits] == [4, 5, 6, 7]
    for f in fits:
        for c in mod.COMPARED:
            assert f["recorded"][c] == rec.loc[(1000, f["replicate"]), c]
            # a refit on another NumPy/BLAS build stops at an iterate a few ulps away: 1.0e-9 relative
            # was seen on a fresh machine, far below any difference between distinct optima
            assert np.isclose(f["refit"][c], f["recorded"][c], rtol=1e-7, atol=0.0)


@pytest.mark.parametrize("arm", ["sigmoid", "softmax"])
def test_recorded_json_follows_its_rule_and_its_counts(arm):
    if not JSONS[arm].is_file():
        pytest.skip(f"no recorded {JSONS[arm].name}")
    mod = _script()
    report = json.loads(JSONS[arm].read_text())
    fits = report["fits"]
    # the rule: all 12 replicates at each refitted n, each compared with its recorded row
    rec = pd.read_csv(RUNS / arm / "results.csv").set_index(["n", "replicate"])
    ns = sorted({f["n"] for f in fits})
    assert sorted((f["n"], f["replicate"]) for f in fits) == [(n, r) for n in ns for r in range(12)]
    for f in fits:
        for c in mod.COMPARED:
            assert f["recorded"][c] == rec.loc[(f["n"], f["replicate"]), c]
        assert f["max_rel_diff"] <= 1e-9
        assert np.isclose(f["param_multi_recomputed"], f["refit"]["param_multi"], rtol=1e-12)
    assert report["max_rel_diff"] == max(f["max_rel_diff"] for f in fits)
    for f in fits:
        assert same_numbers(f["pair"], mod.pair_metrics(f, report["truth"], arm))
    assert same_numbers(report["truth"], mod.truth_atoms(arm))
    # the counts and slopes, recomputed from the stored atoms
    assert same_numbers(mod.summarise(fits), report["summary"])
    for n, s in report["summary"]["per_n"].items():
        got = [mod.hypothesis(f) for f in fits if f["n"] == int(n)]
        assert [s["H1"], s["H2"], s["H3"]] == [got.count(h) for h in ("H1", "H2", "H3")]
    if len(ns) == 2:
        med = [np.median([f["weighted_multi_gate"] for f in fits if f["n"] == n]) for n in ns]
        slope = np.log(med[1] / med[0]) / np.log(ns[1] / ns[0])
        assert np.isclose(report["summary"]["slopes_of_medians"]["weighted_multi_gate"], slope, rtol=1e-9)


def test_the_certificate40_analysis_reproduces_certificate20s_recorded_contrasts():
    # certificate40/analyse.py was fixed before its run's rows existed (HYPOTHESES.md, "the best-of-five certificate
    # at the record's design"); on certificate20's rows it must give certificate20's recorded contrasts and find
    # every near-truth row equal to the 40-replicate record's (the same streams)
    import json
    from pathlib import Path

    import pytest

    sv = Path(__file__).resolve().parents[2] / "records" / "catalogue" / "sigmoid-vs-softmax"
    analyse = load_script(sv / "certificate40" / "analyse.py")
    got = analyse.main(sv20 := Path(__file__).resolve().parents[2] / "records" / "archive" / "catalogue" / "sigmoid-vs-softmax" / "certificate20")
    want = json.loads((sv20 / "how.json").read_text())["found"]["paired_contrasts_softmax_minus_sigmoid"]
    assert set(got["paired_contrasts_softmax_minus_sigmoid"]) == set(want)
    for key, w in want.items():
        g = got["paired_contrasts_softmax_minus_sigmoid"][key]
        assert g["category"] == w["category"] and g["pairs"] == w["pairs"] == 60
        assert g["difference"] == pytest.approx(w["difference"], rel=1e-9)
        assert g["ci"] == pytest.approx(w["ci"], rel=1e-9)
    for arm in ("sigmoid", "softmax"):
        eq = got[arm]["record_rows_equal"]
        assert eq["rows"] == 60 and eq["n_iter_equal"] and eq["max_rel_objective"] < 1e-12


def test_the_certificate40_record_is_its_analysis_of_its_rows():
    # the recorded best-of-five certificate at the record's design: its how.json's 'found' is what the
    # analysis committed before the run computes from the recorded rows, 40 replicates at 6 sizes per arm,
    # certificate20's kept fits equal to the record's and the rest within round-off of it (how.json 'check')
    import json
    from pathlib import Path

    import pandas as pd
    import pytest

    sv = Path(__file__).resolve().parents[2] / "records" / "catalogue" / "sigmoid-vs-softmax"
    analyse = load_script(sv / "certificate40" / "analyse.py")
    got = analyse.main(sv / "certificate40")
    want = json.loads((sv / "certificate40" / "how.json").read_text())["found"]
    for arm in ("sigmoid", "softmax"):
        assert got[arm]["per_n"] == {int(k): v for k, v in want[arm]["per_n"].items()}
        assert [g["fits"] for g in got[arm]["per_n"].values()] == [40] * 6
        eq = got[arm]["record_rows_equal"]
        assert eq["rows"] == eq["of"] == 240 and eq["max_rel_objective"] < 1e-7
        rows = pd.read_csv(sv / "certificate40" / arm / "results.csv")
        kept = rows.merge(pd.read_csv(Path(__file__).resolve().parents[2] / "records" / "archive" / "catalogue" / "sigmoid-vs-softmax" / "certificate20" / arm / "results.csv"), on=["n", "replicate"])
        assert len(kept) == 60 and (kept.objective_x == kept.objective_y).all() and (kept.n_iter_x == kept.n_iter_y).all()
    for key, w in want["paired_contrasts_softmax_minus_sigmoid"].items():
        g = got["paired_contrasts_softmax_minus_sigmoid"][key]
        assert g["category"] == w["category"] and g["pairs"] == w["pairs"] == 240
        assert g["difference"] == pytest.approx(w["difference"], rel=1e-9)
        assert g["ci"] == pytest.approx(w["ci"], rel=1e-9)

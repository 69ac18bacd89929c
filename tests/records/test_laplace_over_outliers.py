"""records/catalogue/laplace-gmoe/laplace_over_outliers.py: its likelihood, D2 split and linear limit, and its JSON against the run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from record_paths import resolve
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "moestat" / "rates" / "catalogue_files" / "laplace_gmoe_over.toml"
JSON = ROOT / "records" / "catalogue" / "laplace-gmoe" / "over_outliers.json"


def _script():
    path = ROOT / "records" / "catalogue" / "laplace-gmoe" / "laplace_over_outliers.py"
    return load_script(path)


def _three_atoms(runoff: float):
    """The file's truth with a third atom whose centre sits ``runoff`` away along (0.6, 0.8) and whose
    ``beta0 = runoff - 1`` (its linear limit: intercept -1, slope (0.6, 0.8))."""
    from moestat.model.mixing import MixingMeasure

    beta0 = np.array([0.4, runoff - 1.0, 0.0])
    beta1 = np.array([[-0.5, 0.5], [0.6 * runoff, 0.8 * runoff], [0.5, -0.5]])
    eta = np.array([[2.0, -1.0, 0.5, 0.09], [2.1, -0.9, 0.45, 0.05], [-1.5, 1.0, -0.5, 0.16]])
    return MixingMeasure(beta0, beta1, eta)


def _batched(G):
    """``G`` with a batch axis of one."""
    from moestat.model.mixing import MixingMeasure

    return MixingMeasure(G.beta0[None], G.beta1[None], G.eta[None])


def test_laplace_parts_is_the_fitted_models_log_likelihood_and_d2_terms_add_up_to_the_sweeps_d2():
    # the script's numpy likelihood must be the scenario's (the one the truth check and the fit use), and its
    # per-atom, per-block D2 terms must add up with the mass gaps to the sweep's voronoi column
    from moestat.data.likelihood_losses import likelihood_loss_columns
    from moestat.data.scenario_files import load_scenario

    mod = _script()
    sc = load_scenario(str(FILE))
    X, Y = sc.sample(400, np.random.default_rng(np.random.SeedSequence(33)))
    for runoff in (3.0, 40.0):
        G = _three_atoms(runoff)
        gate, post, ll = mod.laplace_parts(X, Y, G)
        assert np.allclose(gate.sum(1), 1.0) and np.allclose(post.sum(1), 1.0)
        assert np.isclose(ll, float(sc.loglik_at(X[None], Y[None], G, fitted=True)[0]), rtol=1e-10)
        t = mod.d2_terms(sc.losses[0], G, sc.truth)
        recorded = likelihood_loss_columns(sc, _batched(G), sc.holdout(64))["voronoi"][0]
        rebuilt = sum(v.sum() for v in t["terms"].values()) + t["mass_gaps"].sum()
        assert np.isclose(t["total"], recorded, rtol=1e-12) and np.isclose(rebuilt, recorded, rtol=1e-12)


def test_a_far_centre_is_a_linear_score_and_the_ray_tends_to_it():
    # ||x - c|| - (||c|| - u^T x) = (||x||^2 - (u^T x)^2) / (||x - c|| + ||c|| - u^T x): nonnegative, about
    # (||x||^2 - (u^T x)^2) / (2 ||c||) far away; along the ray the likelihood tends to the linearised one
    from moestat.data.scenario_files import load_scenario

    mod = _script()
    sc = load_scenario(str(FILE))
    X, Y = sc.sample(300, np.random.default_rng(np.random.SeedSequence(34)))
    u = np.array([0.6, 0.8])
    expected = np.max(((X ** 2).sum(1) - (X @ u) ** 2) / 2)
    G = _three_atoms(1e4)
    _, _, ll = mod.laplace_parts(X, Y, G)
    atoms, _ = mod.atom_report(X, Y, G, sc.losses[0], sc.truth, ll)
    assert np.isclose(atoms[1]["max_gap_to_linear_score"] * 1e4, expected, rtol=1e-3)
    assert np.isclose(atoms[1]["beta0_minus_norm"], -1.0) and np.allclose(atoms[1]["direction"], u)
    ray = mod.ray_profile(X, Y, _three_atoms(5.0), atom=1)
    far, limit = ray[-2], ray[-1]
    assert far["t"] == 1e4 and limit["t"] == float("inf")
    assert abs(far["loglik_minus_fit"] - limit["loglik_minus_fit"]) < 1e-2
    assert ray[0]["t"] == -2.5 and ray[3]["t"] == 0.0 and ray[3]["loglik_minus_fit"] == 0.0


@pytest.mark.skipif(not JSON.is_file(), reason="no recorded over_outliers.json")
def test_recorded_outliers_are_the_runs_largest_d2_and_reproduce_its_rows():
    # the JSON must list the largest-D2 fits of its recorded run, each refit equal to its row, its D2 terms adding
    # up to that D2, and its linear-limit verdict the comparison of its gap with the stated tolerance
    # standard JSON: its non-finite numbers (an overflowed exp(beta0), the ray's t = inf) are strings, read back here
    mod = load_script("studies/tools/recorded_refit.py")
    report = mod.decode(json.loads(JSON.read_text()))
    results = pd.read_csv(resolve(report["run"]) / "results.csv")  # the path as recorded, now under records/
    chosen = results.sort_values("voronoi", ascending=False).head(len(report["fits"]))
    assert [(f["n"], f["replicate"]) for f in report["fits"]] == list(zip(chosen["n"], chosen["replicate"]))
    for f in report["fits"]:
        row = results[(results.n == f["n"]) & (results.replicate == f["replicate"])].iloc[0]
        assert f["D2_recorded"] == row["voronoi"] and f["same_as_recorded"]
        for col, v in f["refit_vs_recorded"].items():
            assert v["recorded"] == row[col] and np.isclose(v["refit"], row[col], rtol=report["same_rtol"], atol=0.0)
        assert abs(f["loglik_numpy_minus_recorded"]) < 1e-6 * abs(row["fit_objective"])
        terms = sum(sum(a["terms"].values()) for a in f["atoms"]) + sum(f["mass_gaps"])
        assert np.isclose(terms, f["D2"], rtol=1e-9)
        dom = f["dominant"]
        if np.isfinite(f["D2"]):
            largest = max(max(max(a["terms"].values()) for a in f["atoms"]), *f["mass_gaps"])
            assert dom["value"] == largest and np.isclose(dom["share"], largest / f["D2"])
        else:  # an overflowed exp(beta0): the atom named has an infinite weight and a beta0 beyond exp's range
            assert dom["block"] == "exp(beta0) overflow" and f["atoms"][dom["atom"]]["beta0"] > np.log(np.finfo(float).max)
        runoff = f["atoms"][f["runoff_atom"]]
        assert runoff["centre_norm"] == max(a["centre_norm"] for a in f["atoms"])
        assert f["runoff_linear_within_tol"] == (runoff["max_gap_to_linear_score"] <= report["linear_tol"])

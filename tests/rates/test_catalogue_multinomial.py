"""The multinomial-moe catalogue entry (issue 33, Scope 4): its truths meet their hypotheses, its
arms differ only in the first expert's slopes, and both grids start above the pre-flight's n_ok."""

import pytest
import tomllib

import numpy as np

from moestat.rates import catalogue as cat


def _atoms(name):
    return tomllib.loads(cat.catalogue_file(name).read_text())["atoms"]


def test_the_arms_differ_only_in_the_first_experts_slopes():
    fast, slow = _atoms("multinomial_nonvanishing.toml"), _atoms("multinomial_vanishing.toml")
    for a, b in zip(fast, slow):
        assert a["beta0"] == b["beta0"] and a["beta1"] == b["beta1"]
    A_fast = np.reshape(fast[0]["eta"], (2, 3))  # rows [A_c | b_c] of classes 0 and 1
    A_slow = np.reshape(slow[0]["eta"], (2, 3))
    assert np.all(A_fast[:, :2] != 0) and np.all(A_slow[:, :2] == 0)  # the paper's vanishing case: A_0 = 0
    np.testing.assert_array_equal(A_fast[:, 2], A_slow[:, 2])
    assert fast[1]["eta"] == slow[1]["eta"]


def test_every_experts_class_probabilities_stay_above_one_percent():
    # the truth's criterion against a class separated within an atom (its coefficients then run to
    # infinity: the old truth at n = 8 000); logits are affine, so the box's corners bound them
    for name in ("multinomial_nonvanishing.toml", "multinomial_vanishing.toml"):
        for a in _atoms(name):
            W = np.reshape(a["eta"], (2, 3))
            for x in [(-1, -1), (-1, 1), (1, -1), (1, 1)]:
                z = np.append(W[:, :2] @ np.array(x, float) + W[:, 2], 0.0)
                p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
                assert p.min() >= 0.01, (name, a, x, p)


@pytest.mark.slow
def test_the_truths_meet_their_theorem_and_the_grids_start_above_n_ok():
    from moestat.theorems.catalogue_hypotheses import catalogue_hypotheses
    from moestat.rates.preflight import preflight
    from moestat.rates.resolve import build_scenario

    rows = catalogue_hypotheses(["multinomial-moe"], n=800)
    assert {r["run"] for r in rows} == {"nonvanishing", "vanishing"}
    assert all(r["met"] for r in rows), [(r["run"], r["failing"]) for r in rows]
    for run in cat.entry("multinomial-moe").runs:
        cfg = cat.run_config(run, quick=True)
        sc = build_scenario(cfg.scenario_key(cfg.router[0]))
        # 4 000 draws: n_ok within a few percent of the 20 000-draw values (3 751 and 2 704), far
        # below the grids' first size 5 000
        n_ok = preflight(sc, [run.quick["n_min"], run.full["n_min"]], m=4000)["n_ok"]
        assert n_ok is not None and n_ok < min(run.quick["n_min"], run.full["n_min"]), (run.label, n_ok)

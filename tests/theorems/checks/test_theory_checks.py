"""Smoke tests of the theory-check runner (PDE checks only: seconds, no rates engine)."""

import json

import pytest

from moestat.theorems.checks import CHECK_NAMES, CheckResult, exit_code, run_checks  # noqa: E402
from moestat.theorems.checks.framework import skipped  # noqa: E402
from moestat.cli.cmd_theory import main  # noqa: E402


def test_pde_checks_pass_and_report(tmp_path, capsys):
    rc = main(["--quick", "--only", "pde", "--out", str(tmp_path)])
    assert rc == 0
    data = json.loads((tmp_path / "theory_report.json").read_text())
    names = [c["name"] for c in data["checks"]]
    assert names == ["pde4_cosine", "lemma4_cosine_order2", "pde4_perturbed_nonzero", "lemma4_perturbed_closed_form"]
    for c in data["checks"]:
        assert {"name", "predicted", "measured", "ci_low", "ci_high", "passed"} <= set(c)
        assert c["passed"] is True and c["status"] == "passed"
    md = (tmp_path / "theory_report.md").read_text()
    assert "| pde4_cosine |" in md and "passed" in md
    assert "pde4_cosine: predicted 0" in capsys.readouterr().out


def test_exit_codes():
    ok = CheckResult("a", "", 0.0, 0.0, passed=True, status="passed")
    bad = CheckResult("b", "", 0.0, 1.0, passed=False, status="failed")
    skip = skipped("c", "", "engine unavailable")
    assert skip.passed is None and "skipped" in skip.note
    assert exit_code([ok]) == 0
    assert exit_code([ok, bad]) == 1
    assert exit_code([ok, skip]) == 3
    assert exit_code([ok, skip], allow_skips=True) == 0
    assert exit_code([bad, skip], allow_skips=True) == 1


def test_a_failing_check_fails_the_run(tmp_path, monkeypatch):
    import moestat.theorems.checks.pde as pde

    monkeypatch.setattr(pde, "TOL", 0.0)  # no residual can be < 0: the verdict must flip
    results = run_checks("quick", tmp_path, only=["pde4_cosine"], verbose=False)
    assert [r.name for r in results] == ["pde4_cosine"]
    assert results[0].passed is False and exit_code(results) == 1


def test_bad_arguments_exit_2(tmp_path, capsys):
    from moestat.cli.common import run_main

    assert run_main(main, ["--only", "nonsense", "--out", str(tmp_path / "x")], prog="moestat theory") == 2
    assert "unknown check" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(SystemExit) as e:
        main(["--quick", "--full"])
    assert e.value.code == 2


def test_check_names_are_unique():
    assert len(CHECK_NAMES) == len(set(CHECK_NAMES))


def test_checks_use_the_rates_slope_with_interval():
    """One slope-with-interval implementation: the theory checks have no copy of their own."""
    import moestat.theorems.checks.framework as framework
    import moestat.theorems.checks.prop1 as prop1
    from moestat.rates.fit import slope_with_interval

    assert prop1.slope_with_interval is slope_with_interval
    assert not hasattr(framework, "ols_slope") and not hasattr(framework, "bootstrap_slope")


def test_slope_verdict_pass_fail_inconclusive():
    from moestat.theorems.checks.framework import slope_verdict

    ok = slope_verdict("a", "", {"slope": -0.48, "ci_low": -0.6, "ci_high": -0.35}, -0.5, 0.15)
    far = slope_verdict("b", "", {"slope": 0.05, "ci_low": -0.05, "ci_high": 0.15}, -0.5, 0.15)
    wide = slope_verdict("c", "", {"slope": -0.3, "ci_low": -1.3, "ci_high": 0.7}, -0.5, 0.15)
    missing = slope_verdict("d", "", None, -0.5, 0.15)
    assert ok.status == "passed" and ok.passed is True
    assert far.status == "failed" and far.passed is False
    assert wide.status == "inconclusive" and wide.passed is False and exit_code([wide]) == 1
    assert missing.passed is False


def test_prop1_fits_the_scenarios_own_router(monkeypatch, tmp_path):
    """Proposition 1 varies only K-bar: the fitted router must be the truth's (its tau).  With
    tau = 1 against the default truth's 0.5 the K-bar = 4 noiseless fit kept an approximation error
    (0.0059) and prop1_population_floor failed its 10x rule (issue 34)."""
    import numpy as np

    import moestat.theorems.checks.prop1 as prop1
    from moestat.data.synthetic import make_scenario
    from moestat.theorems.checks.framework import Context

    seen = []

    class Stop(Exception):
        pass

    def fake_fit_best(model, *a, **k):
        seen.append((model.gate.kind, tuple(np.atleast_1d(model.gate.tau)), model.gate.k_active))
        raise Stop

    monkeypatch.setattr(prop1, "_fit_best", fake_fit_best)
    sc = make_scenario("perturbed", "exact", k_active=None)
    try:
        prop1._population(Context("quick", tmp_path), sc, sc.model, sc.truth, sc.holdout(16))
    except Stop:
        pass
    assert seen == [("perturbed", tuple(np.atleast_1d(sc.model.gate.tau)), 3)]

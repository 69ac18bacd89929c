"""The recorded moestat theory --quick reports (records/theory/quick, records/archive/theory/quick_thm5_causes): their over-strong causes recomputed from their recorded fits."""

import pytest
from json_close import same_numbers
from moestat.theorems.checks import over_strong
from moestat.theorems.checks.framework import Context


@pytest.mark.parametrize("folder, key", [("quick_thm5_causes", "quick-over"), ("quick", "quick-over-thm5")])
def test_recorded_quick_report_is_recomputed_from_its_recorded_fits(monkeypatch, folder, key):
    """records/theory/<folder> (records/archive/theory/ when superseded): the five checks' causes and reasons, recomputed
    now from the fits the report recorded beside it (rates/<key>), equal the recorded report's:
    nothing in it was typed, and the verdicts are the rule's.  ``quick`` is the 56-replicate run
    (grids.THM5_QUICK_REPS); ``quick_thm5_causes`` its 8-replicate pilot."""
    import json
    from pathlib import Path

    records = Path(__file__).resolve().parents[2] / "records"
    root = records / "theory" / folder if (records / "theory" / folder).is_dir() else records / "archive" / "theory" / folder
    summary = json.loads((root / "rates" / key / "summary.json").read_text())
    assert key != "quick-over-thm5" or summary["config"]["reps"] == 56
    monkeypatch.setattr(over_strong, "thm5_run", lambda c: (key, summary))
    now = {x.name: json.loads(json.dumps(x.to_dict(), default=str)) for x in over_strong.run(Context("quick", root))}
    recorded = {c["name"]: c for c in json.loads((root / "theory_report.json").read_text())["checks"]
                if c["name"] in over_strong.NAMES}  # the whole suite's report holds the other checks too
    assert set(now) == set(recorded) == set(over_strong.NAMES)
    for name, c in now.items():
        r = recorded[name]
        assert (c["status"], c["measured"], c["reason"]) == (r["status"], r["measured"], r["reason"]), name
        # a slope recomputed by NumPy's least squares: the last digit depends on the BLAS build
        assert same_numbers(c["details"]["causes"], r["details"]["causes"]), name
        if r["status"] != "passed":
            assert "causes measured on these fits" in r["reason"], name


def test_docs_quote_the_recorded_causes():
    """The paragraph on the thm5 causes (an archived quick round, moved with the page's rounds to
    records/theory/history.rst by issue 58) quotes the recorded report's numbers."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    checks = {c["name"]: c for c in json.loads((root / "records" / "archive" / "theory" / "quick_thm5_causes" / "theory_report.json").read_text())["checks"]}
    doc = (root / "records" / "theory" / "history.rst").read_text(encoding="utf-8")
    c = checks["thm5_over_D2"]["details"]["causes"]
    lo, hi = c["shared_share_range"]
    assert f"0.974 to 0.989 of the" in doc and (round(lo, 3), round(hi, 3)) == (0.974, 0.989)
    assert c["singleton_run_off"] == 0 and c["fits"] == 40 and "(0 of 40 fits;" in doc
    for name, (with_, without) in {"thm5_over_D2": (-0.74, -0.58), "thm5_weighted_multi": (-0.74, -0.58),
                                   "thm5_param_multi": (-0.39, -0.37), "thm5_param_single": (-0.79, -0.75),
                                   "thm5_weighted_single": (-0.83, -0.72)}.items():
        cc = checks[name]["details"]["causes"]
        assert (round(cc["slope_mean"], 2), round(cc["slope_without_largest"], 2)) == (with_, without), name


def test_thm5_quick_reps_is_the_recorded_pilots_count():
    """THM5_QUICK_REPS is recomputed from the pilot it was derived from (the quick over run's 8
    replicates, records/archive/theory/quick_thm5_causes): the count that brings the widest
    of the five thm5 intervals to the rule's width, rounded up to a multiple of 8."""
    import json
    from pathlib import Path

    # the check rule's width cap when the count was derived (since replaced by the interval rule's
    # moestat.rates.verdicts.MAX_CI_WIDTH of 1/4): the count recomputes from the cap it was sized for
    MAX_CI_WIDTH = 1.0
    from moestat.theorems.checks.grids import GRIDS, THM5_QUICK_REPS, thm5_quick_reps

    root = Path(__file__).resolve().parents[2] / "records" / "archive" / "theory" / "quick_thm5_causes"
    checks = {c["name"]: c for c in json.loads((root / "theory_report.json").read_text())["checks"]}
    widths = [checks[n]["ci_high"] - checks[n]["ci_low"] for n in over_strong.NAMES]
    assert GRIDS["quick"]["reps"] == 8 and max(widths) > MAX_CI_WIDTH  # the pilot was too narrow a design
    assert thm5_quick_reps(widths, 8, MAX_CI_WIDTH) == THM5_QUICK_REPS == 56
    assert thm5_quick_reps([1.0]) == 8 and thm5_quick_reps([1.01]) == 16  # rounded up, never down

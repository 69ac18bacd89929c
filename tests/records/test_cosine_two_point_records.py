"""The recorded cosine-exact and cosine-over rows (records/catalogue) judged by the two-point instrument."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
import pytest
from moestat.rates import catalogue as cat
from moestat.theorems.judges import cosine_two_point as ctp

ROOT = Path(__file__).resolve().parents[2]


def _recorded_runs(key: str) -> list[dict]:
    rec = ROOT / "records" / "catalogue" / key
    out = []
    for r in cat.entry(key).runs:
        summary = json.loads((rec / r.label / "summary.json").read_text())
        out.append({"label": r.label, "wall_s": 0.0, "counts": summary["counts"], "sample_sizes": [], "reps": 0,
                    "summary": summary})
    return out


def test_the_instrument_replaces_only_the_row_of_its_run_and_loss(monkeypatch):
    """Both routers' rows live in run 'routers': the verdict names its loss and replaces that row only; the
    fixed-truth verdict stays beside it.  A verdict that does not name its loss is refused (it used to
    replace every row of its run)."""
    e = cat.entry("cosine-exact")
    runs = _recorded_runs("cosine-exact")
    plain = {r["loss"]: r for r in cat._report(dataclasses.replace(e, judge=""), True, runs)["predictions"]}
    monkeypatch.setattr(ctp, "judge_exact", lambda quick: {"routers": {"category": "inconclusive", "reason": "probe",
                                                                          "loss": "cosine voronoi"}})
    rows = {r["loss"]: r for r in cat._report(e, True, runs)["predictions"]}
    assert rows["cosine voronoi"]["category"] == "inconclusive" and rows["cosine voronoi"]["reason"] == "two-point: probe"
    assert rows["cosine voronoi"]["fixed_truth"] == {k: plain["cosine voronoi"][k] for k in ("category", "reason")}
    for loss in ("perturbed voronoi", "perturbed regression_l2", "cosine regression_l2"):
        assert rows[loss] == plain[loss]
    table = cat.format_report(cat._report(e, True, runs))  # what `moestat reproduce` prints: both verdicts
    assert "routers cosine voronoi: two-point: probe" in table
    assert f"routers cosine voronoi (fixed-truth rule, reported): {plain['cosine voronoi']['category']}" in table
    assert "routers perturbed voronoi (fixed-truth rule" not in table
    monkeypatch.setattr(ctp, "judge_exact", lambda quick: {"routers": {"category": "inconclusive", "reason": "probe"}})
    with pytest.raises(ValueError, match="without its loss"):
        cat._report(e, True, runs)


def test_the_recorded_over_specified_rows_are_judged_by_the_split_witness():
    runs = _recorded_runs("cosine-over")
    rows = {r["loss"]: r for r in cat._report(cat.entry("cosine-over"), True, runs)["predictions"]}
    v = rows["cosine voronoi"]
    assert v["category"] == "consistent" and "App. B.3" in v["reason"] and v["slope"] is not None
    assert v["fixed_truth"]["category"] == "inconsistent"  # the slope's own rule, reported beside
    # the perturbed router's rows keep the category their own fit gave (only the vanilla row is the instrument's)
    as_ran = {(f["router"], f["loss"]): f["category"] for f in runs[0]["summary"]["fits"]}
    assert "fixed_truth" not in rows["perturbed voronoi"]
    assert rows["perturbed param_multi"]["category"] == as_ran[("perturbed", "param_multi")]
    assert rows["perturbed voronoi"]["category"] == as_ran[("perturbed", "voronoi")]

"""The catalogue's recorded runs re-judged under the current rules (records/catalogue, records/archive/catalogue)."""

from __future__ import annotations

import json
from pathlib import Path
import numpy as np
import pandas as pd
import pytest
from moestat.rates import catalogue as cat
from moestat.rates.catalogue_views import rejudge_recorded

ROOT = Path(__file__).resolve().parents[2]


def test_recorded_contrast_is_rejudged_by_the_paired_interval():
    """The report of lse-ffn-vs-linear, rebuilt from its recorded runs, carries the paired interval."""
    rec = ROOT / "records" / "catalogue" / "lse-ffn-vs-linear"
    e = cat.entry("lse-ffn-vs-linear")
    runs = [{"label": r.label, "wall_s": 0.0, "counts": {}, "sample_sizes": [], "reps": 40,
             "summary": json.loads((rec / r.label / "summary.json").read_text())} for r in e.runs]
    c = cat._report(e, False, runs, rec)["contrast"]
    lo, hi = c["paired"]["ci"]
    assert c["category"] == ("inconclusive" if lo <= 0 <= hi else "consistent" if lo > 0 else "inconsistent")
    # the common window of the two arms' fits: the linear arm's from its n_ok (8 000) to the FFN arm's last size
    windows = [next(f["window"] for f in r["summary"]["fits"] if f["loss"] == "D2_ls") for r in runs]
    common = [n for n in runs[0]["summary"]["sample_sizes"]
              if max(w[0] for w in windows) <= n <= min(w[1] for w in windows)]
    assert c["paired"]["replicates"] == 40 and c["paired"]["ns"] == common == [8000, 16000, 32000]
    assert "replicate-paired" in c["reason"]
    # every (n, replicate) holds a finite loss in both arms: the paired point estimate is the difference of the two
    # arms' OLS slopes of the log per-n statistic over that window, recomputed here from the rows
    stat = {"mean": np.mean, "median": np.median}[c["paired"]["statistic"]]
    slope = {}
    for r in runs:
        ex = pd.read_csv(rec / r["label"] / "extras.csv")  # a declared loss is a column of extras.csv
        y = [np.log(stat(ex.loc[ex.n == n, "D2_ls"])) for n in common]
        slope[r["label"]] = np.polyfit(np.log(common), y, 1)[0]
    assert c["paired"]["difference"] == pytest.approx(slope["linear"] - slope["ffn-sigmoid"], abs=1e-9)


def test_the_docs_say_of_figure_1_what_the_paired_contrast_says():
    """Issue 33: catalogue.rst once said "Figure 1(a) reproduced" while the current rules judged the recorded
    vanilla-router rows inconsistent; issue 60: a panel is reproduced only where the paired contrast of both
    routers on the same draws excludes 0 in the paper's direction.  The page's cosine paragraph quotes each
    panel's pooled contrast as the record holds it and calls a panel reproduced exactly when the record does;
    the two-point row is still the catalogue row's verdict, with the fixed-truth rule beside it."""
    import json

    rec = json.loads((ROOT / "records" / "figure1" / "figure1_paired.json").read_text(encoding="utf-8"))
    doc = " ".join((ROOT / "docs" / "guide" / "catalogue.rst").read_text(encoding="utf-8").split())
    para = doc[doc.index("``cosine-exact`` and ``cosine-over`` (Nguyen et al. 2024)"):]
    para = para[: para.index("From Python::")]
    for setting, panel in (("exact", "(a)"), ("over", "(b)")):
        pooled = rec[setting]["pooled"]["voronoi"]
        lo, hi = pooled["ci"]
        assert f"{pooled['difference']:+.3f} [{lo:+.3f}, {hi:+.3f}]".replace("+", "") in para.replace("+", ""), setting
        reproduced = rec[setting]["verdict"]["voronoi"] == "reproduced"
        assert (f"**panel {panel} reproduced" in para) == reproduced, (setting, rec[setting]["verdict"])
        assert (f"**panel {panel} not reproduced**" in para) == (not reproduced), setting
    rep = rejudge_recorded("cosine-exact", ROOT / "records" / "catalogue" / "cosine-exact")
    van = {r["loss"]: r for r in rep["predictions"]}["cosine voronoi"]
    assert van["reason"].startswith("two-point:") and van["fixed_truth"]["category"]


def test_a_column_recorded_under_a_former_definition_is_not_judged():
    """cosine-over's 12-replicate record (2026-11-25) holds param_multi as the unweighted maximum over shared
    cells' atoms; 0a31535 (2026-11-26) made it the mass-weighted quantity D2 bounds.  Re-judged today, that row
    keeps its slope but gets no verdict, with the reason; the other predictions of the same run are judged."""
    from moestat.rates.catalogue_views import REDEFINED, former_definition

    rep = rejudge_recorded("cosine-over", ROOT / "records" / "archive" / "catalogue" / "cosine-over" / "design12")
    rows = {r["loss"]: r for r in rep["predictions"]}
    stale = rows["perturbed param_multi"]
    assert stale["category"] is None and stale["slope"] is not None
    assert REDEFINED["param_multi"][1] in stale["reason"] and "unweighted" in stale["reason"]
    assert "mean_statistic" not in stale
    assert rows["perturbed voronoi"]["category"] is not None and rows["perturbed regression_l2"]["category"] is not None
    when = REDEFINED["param_multi"][0]
    assert former_definition("param_multi", when) is None  # from the change on, the column is today's
    assert former_definition("voronoi", "2020-01-01T00:00:00+00:00") is None  # never redefined
    assert former_definition("param_multi", None) is None

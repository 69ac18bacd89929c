"""``moestat reproduce``'s table as a new user reads it: a --quick grid that cannot decide a rate says
so, long prediction texts do not shift the columns, and a row decided by a two-point bound shows the
slope rule's verdict beside it."""

from moestat.rates.catalogue import PREDICTION_WIDTH, format_report, quick_grid_note


def _report(mode="quick", rows=None):
    rows = rows or [
        {"run": "sigmoid", "loss": "D2_sigmoid", "predicted": -0.5, "slope": -1.2, "ci": [-3.5, 1.3],
         "prediction": "n^-1/2 for the sigmoid gate, Theorem 2 (over-specified, strongly identifiable experts)",
         "category": "inconclusive", "reason": "wide"},
        {"run": "softmax", "loss": "D2_softmax", "predicted": -0.25, "slope": -0.2, "ci": [-2.6, 2.2],
         "prediction": "n^-1/4", "category": "inconclusive", "reason": "wide"},
    ]
    return {"key": "k", "mode": mode, "paper": {"authors": "A", "year": 2024}, "figure": "Fig. 1", "predictions": rows,
            "contrast": None, "instrument": None, "runs": [], "wall_s": 1.0}


def test_a_quick_grid_that_cannot_decide_says_so_in_one_line():
    text = format_report(_report())
    note = [line for line in text.splitlines() if line.startswith("quick grid:")]
    assert len(note) == 1 and "2 of 2 intervals are wider (up to 4.80)" in note[0]
    assert "0.25 that separates the predictions" in note[0] and "cannot decide a rate" in note[0]
    assert quick_grid_note(_report(mode="full")) is None  # the full run is judged by its categories
    narrow = _report(rows=[{"run": "a", "loss": "D", "predicted": -0.5, "slope": -0.5, "ci": [-0.6, -0.4],
                            "prediction": "n^-1/2", "category": "consistent", "reason": "-"}])
    assert quick_grid_note(narrow) is None


def test_columns_stay_aligned_with_a_long_prediction_text():
    lines = format_report(_report()).splitlines()
    head, rows = lines[1], lines[3:5]
    end = head.index("slope") + len("slope")  # the slope column is right-aligned under its title
    assert all(r[end - 1] != " " and r[end] == " " for r in rows)
    assert rows[0].index("[") == rows[1].index("[") == head.index("95% CI")
    assert rows[0].index("inconclusive") == rows[1].index("inconclusive") == head.index("category")
    assert all(len(r.split("  ")[0]) < 80 for r in rows)
    assert "full texts are in catalogue.json" in "\n".join(lines)
    assert PREDICTION_WIDTH < len(_report()["predictions"][0]["prediction"])


def test_a_two_point_verdict_and_the_slope_rules_stand_side_by_side():
    rows = [{"run": "routers", "loss": "cosine voronoi", "predicted": None, "slope": -0.35, "ci": [-0.43, -0.27],
             "prediction": "slower than any polynomial rate", "category": "consistent", "reason": "two-point: bound",
             "fixed_truth": {"category": "inconsistent", "reason": "a polynomial slope"}},
            {"run": "routers", "loss": "perturbed voronoi", "predicted": -0.5, "slope": -0.54, "ci": [-0.61, -0.48],
             "prediction": "n^-0.5", "category": "consistent", "reason": "ok"}]
    lines = format_report(_report(mode="full", rows=rows)).splitlines()
    head = lines[1]
    assert "slope rule" in head and "two-point" in head
    cosine = next(line for line in lines if line.startswith("routers cosine voronoi"))
    assert cosine[head.index("slope rule"):].split()[:2] == ["inconsistent", "consistent"]
    perturbed = next(line for line in lines if line.startswith("routers perturbed voronoi"))
    assert perturbed[head.index("slope rule"):].split() == ["consistent", "-"]

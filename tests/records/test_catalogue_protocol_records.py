"""records/catalogue_protocol/: the cross-entry table, its count and its summary are the rendering of the
protocol runs' own reports (``studies/catalogue/protocol_table.py``), and the count can fail."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "records" / "catalogue_protocol"


@pytest.fixture(scope="module")
def mod():
    return load_script(ROOT / "studies/catalogue/protocol_table.py")


@pytest.fixture(scope="module")
def summary():
    return json.loads((RECORD / "summary.json").read_text(encoding="utf-8"))


def test_table_and_count_are_the_rendering_of_the_summary(mod, summary):
    assert (RECORD / "table.txt").read_text(encoding="utf-8") == mod.table(summary)
    assert (RECORD / "count.rst").read_text(encoding="utf-8") == mod.count_rst(summary)


def test_summary_rows_are_the_recorded_reports_rows(summary):
    """Every protocol report's predictions, as it wrote them, are the summary's rows (nothing dropped,
    nothing re-judged), and the counts are counted from them."""
    rows = []
    for e in summary["entries"]:
        path = RECORD / e["key"] / "catalogue.json"
        assert path.is_file() == e["run"], e["key"]
        if not e["run"]:
            continue
        rep = json.loads(path.read_text(encoding="utf-8"))
        assert rep["mode"] == "protocol"
        got = [(r["loss"], r["category"], r["slope"]) for r in e["predictions"]]
        assert got == [(p["loss"], p["category"], p["slope"]) for p in rep["predictions"]], e["key"]
        rows += rep["predictions"]
        assert e["all_consistent"] == all(p["category"] == "consistent" for p in rep["predictions"])
    assert summary["rows_by_category"] == dict(Counter(r["category"] or "none" for r in rows))
    assert summary["entries_run"] == sum(e["run"] for e in summary["entries"])


def test_only_a_full_text_consistent_row_is_a_theorem_reproduction(mod, summary):
    """The count line's theorem reproductions are the consistent rows of standing ``full text``: changing
    one consistent row's standing to ``full text`` changes the count by one, an inconclusive row's does not."""
    import copy

    def theorems(s):
        line = mod.count_rst(s).split("paper's full text): **")[1]
        return int(line.split("**")[0])

    base = theorems(summary)
    rows = [r for e in summary["entries"] if e["run"] for r in e["predictions"]]
    for cat, delta in (("consistent", 1), ("inconclusive", 0)):
        i = next(i for i, r in enumerate(rows) if r["category"] == cat and r["standing"] != "full text")
        s = copy.deepcopy(summary)
        [r for e in s["entries"] if e["run"] for r in e["predictions"]][i]["standing"] = "full text"
        assert theorems(s) == base + delta, cat

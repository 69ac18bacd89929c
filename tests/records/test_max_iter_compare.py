"""``records/catalogue/laplace-gmoe/max_iter_compare.py``: two records of one design that differ in
``max_iter`` only, compared row by row (nothing refitted)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "records" / "catalogue" / "laplace-gmoe" / "max_iter_compare.py"
REC = ROOT / "records" / "catalogue" / "laplace-gmoe"


def _module():
    return load_script(SCRIPT)


def _rows(*rows):
    return pd.DataFrame(rows, columns=["n", "replicate", "status", "n_iter", "fit_objective", "voronoi", "time"])


def test_rows_are_grouped_by_how_the_old_fit_stopped_and_compared_on_every_column_but_time():
    old = _rows((100, 0, "tol", 50, -10.0, 1.0, 1.0), (100, 1, "newton", 1200, -9.0, 2.0, 1.0),
                (100, 2, "max_iter", 1000, -8.0, 3.0, 1.0), (100, 3, "newton", 1100, -7.0, 4.0, 1.0))
    new = _rows((100, 0, "tol", 50, -10.0, 1.0, 9.0), (100, 1, "newton", 3000, -9.5, 1.0, 9.0),
                (100, 2, "tol", 2500, -7.0, 3.0, 9.0), (100, 3, "newton", 1100, -7.0, 4.0, 2.0))
    out = _module().compare(old, new, 1000)
    g = out["groups"]
    assert g["stopped on a criterion with n_iter < 1000"]["identical"] == 1  # the time differs only
    late = g["stopped on a criterion with n_iter >= 1000"]
    assert (late["fits"], late["identical"], late["changed"], late["changed_loglik_down_more_than_1e-6"]) == (2, 1, 1, 1)
    assert late["largest_loglik_drop"] == pytest.approx(-0.5)
    mi = g["stopped at max_iter"]
    assert (mi["changed"], mi["changed_loglik_up_more_than_1e-6"], mi["new_status"]) == (1, 1, {"tol": 1})
    assert [(r["n"], r["replicate"]) for r in out["changed_by_more_than_1e-6_nats"]] == [(100, 1), (100, 2)]
    with pytest.raises(ValueError, match="same"):
        _module().compare(old, new.iloc[:3], 1000)


def test_the_recorded_comparison_is_what_the_script_computes_from_the_two_records(tmp_path):
    out = tmp_path / "c.json"
    assert _module().main([str(ROOT / "records" / "archive" / "catalogue" / "laplace-gmoe" / "max_iter_1000" / "over"), str(REC / "over"), "--json", str(out)]) == 0
    got, recorded = json.loads(out.read_text()), json.loads((REC / "max_iter_compare.json").read_text())
    for d in (got, recorded):
        d.pop("old"), d.pop("new")  # the paths as given
    assert got == recorded


def test_runs_that_differ_in_more_than_max_iter_are_refused(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert _module().main([str(REC / "exact"), str(REC / "over"), "--json", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "differ in" in err[0] and not out.exists()

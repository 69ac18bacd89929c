"""studies/tools/recorded_refit.py: standard JSON (and every recorded JSON under records/ parses
strictly), and the command line shared by the refit diagnostics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str = "recorded_refit"):
    path = ROOT / "studies" / "tools" / f"{name}.py" if name == "recorded_refit" else ROOT / "records" / "archive" / "catalogue" / "gmoe-over4" / f"{name}.py"
    return load_script(path)


def _strict(text: str):
    """RFC 8259 JSON: Python's parser, with its NaN / Infinity / -Infinity extension refused."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not standard JSON")

    return json.loads(text, parse_constant=refuse)


def test_the_strict_parser_refuses_python_s_non_finite_numbers():
    # the check above must be able to fail: Python's default output of an infinity is refused
    with pytest.raises(ValueError, match="Infinity"):
        _strict(json.dumps({"D2": float("inf")}))
    with pytest.raises(ValueError, match="NaN"):
        _strict(json.dumps([float("nan")]))


def test_write_json_encodes_non_finite_numbers_as_strings_and_decode_reads_them_back(tmp_path):
    mod = _script()
    report = {"run": "x", "D2": math.inf, "fits": [{"ray": [{"t": -math.inf}, {"t": 1.5}], "share": math.nan,
                                                       "w": np.float64(np.inf), "status": "tol", "n": 3}]}
    out = tmp_path / "r.json"
    mod.write_json(out, report)
    back = _strict(out.read_text())
    assert back["D2"] == "inf" and back["fits"][0]["ray"][0]["t"] == "-inf" and back["fits"][0]["share"] == "nan"
    assert back["fits"][0]["w"] == "inf" and back["fits"][0]["ray"][1]["t"] == 1.5 and back["fits"][0]["n"] == 3
    assert list(back)[-1] == "non_finite" and back["non_finite"] == mod.NON_FINITE_NOTE
    dec = mod.decode(back)
    assert dec["D2"] == math.inf and dec["fits"][0]["ray"][0]["t"] == -math.inf and math.isnan(dec["fits"][0]["share"])
    assert dec["fits"][0]["status"] == "tol"
    # a finite report is written as json.dumps writes it, with no note
    mod.write_json(out, {"run": "x", "fits": [1.0, 2]})
    assert out.read_text() == json.dumps({"run": "x", "fits": [1.0, 2]}, indent=1) + "\n"


def _fake_main(mod, tmp_path, argv, chosen: list):
    """refit_main on a two-column table, with a refit that records the rows it is given."""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    pd.DataFrame({"n": [100, 100, 200, 200], "replicate": [0, 1, 0, 1], "voronoi": [1.0, 5.0, 3.0, 4.0]}).to_csv(
        run / "results.csv", index=False)
    (run / "summary.json").write_text("{}")

    def refit(run_, row):
        chosen.append((int(row["n"]), int(row["replicate"])))
        return {"n": int(row["n"]), "replicate": int(row["replicate"]), "D2": float(row["voronoi"])}

    return mod.refit_main([str(run)] + argv, description="d", run_help="r", top_help="t", table="results.csv",
                          needs=("results.csv", "summary.json"),
                          choose=lambda t, a: t.sort_values("voronoi", ascending=False).head(a.top), refit=refit,
                          show=lambda f: None, header=lambda t, a: {"rule": f"top {a.top}"})


def test_refit_main_chooses_refits_and_writes_the_report(tmp_path):
    mod = _script()
    chosen: list = []
    out = tmp_path / "out.json"
    assert _fake_main(mod, tmp_path, ["--top", "2", "--json", str(out)], chosen) == 0
    assert chosen == [(100, 1), (200, 1)]
    report = _strict(out.read_text())
    assert list(report) == ["run", "rule", "cpu_s", "wall_s", "fits"] and report["rule"] == "top 2"
    assert [f["D2"] for f in report["fits"]] == [5.0, 4.0]
    chosen.clear()
    assert _fake_main(mod, tmp_path, ["--json", str(out)], chosen) == 0 and len(chosen) == 4  # --top 5 by default


@pytest.mark.parametrize("argv, message", [(["--top", "0"], "--top must be at least 1"), ([], "not a run folder")])
def test_refit_main_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, argv, message):
    mod = _script()
    out = tmp_path / "out.json"
    if message == "not a run folder":
        rc = mod.refit_main([str(tmp_path / "nowhere"), "--json", str(out)], description="d", run_help="r", top_help="t",
                            table="results.csv", needs=("results.csv",), choose=None, refit=None, show=None)
    else:
        rc = _fake_main(mod, tmp_path, argv + ["--json", str(out)], [])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_refit_main_refuses_a_json_in_a_missing_folder_before_any_refit(tmp_path, capsys):
    mod = _script()
    chosen: list = []
    out = tmp_path / "absent" / "out.json"
    rc = _fake_main(mod, tmp_path, ["--json", str(out)], chosen)
    err = capsys.readouterr().err
    # refused before the refits (minutes each in the real scripts), not when the report is written
    assert rc == 2 and "no folder" in err and len(err.strip().splitlines()) == 1 and chosen == []
    assert not out.parent.exists()


def test_gmoe_over4_above_rule_takes_every_fit_above_the_threshold_in_ratio_order(capsys):
    mod = _script("gmoe_over4_outliers")
    results = pd.DataFrame({"n": [100] * 4 + [200] * 4, "replicate": list(range(4)) * 2,
                            "voronoi": [1.0, 2.0, 2e3, 5e3, 10.0, 20.0, 1.5e3, 30.0]})
    above = mod.pick_above(results, 1e3)
    # medians 1001 (n = 100) and 25 (n = 200): ratios 1.5e3/25 = 60, 5e3/1001 = 5.0, 2e3/1001 = 2.0; 30 and 2 stay out
    assert list(zip(above["n"], above["replicate"])) == [(200, 2), (100, 3), (100, 2)]
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        mod.main(["run", "--above", "inf", "--json", "x.json"])
    err = capsys.readouterr().err  # an option argparse refuses is one line too (the doors' parser), no usage block
    assert e.value.code == 2 and "--above" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as e:
        mod.main(["run", "--above", "1e3", "--top", "3", "--json", "x.json"])  # one rule at a time
    err = capsys.readouterr().err
    assert e.value.code == 2 and "not allowed with" in err and len(err.strip().splitlines()) == 1

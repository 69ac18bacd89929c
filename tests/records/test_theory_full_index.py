"""The full theory index gathers every module report, and refuses a missing or doubled check."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "studies" / "tools" / "theory_full_index.py"


def _load():
    return load_script(SCRIPT)


def _check(name: str, status: str = "passed") -> dict:
    return {"name": name, "claim": "c", "predicted": -0.5, "measured": -0.5, "ci_low": None, "ci_high": None,
            "passed": status == "passed", "status": status, "rule": "r", "note": "", "details": {},
            "elapsed_s": 0.0, "category": None, "reason": ""}


def _report(folder: Path, mode: str, names: list[str], command: str = "moestat theory") -> None:
    folder.mkdir(parents=True)
    (folder / "theory_report.json").write_text(json.dumps(
        {"mode": mode, "command": command, "elapsed_s": 10.0, "checks": [_check(n) for n in names]}))


def test_gathers_in_quick_order_and_names_the_source(tmp_path):
    _report(tmp_path / "quick", "quick", ["a", "b", "c"])
    _report(tmp_path / "full_x", "full", ["c", "a"], "cmd-x")
    _report(tmp_path / "full_y", "full", ["b"], "cmd-y")
    results, commands, elapsed = _load().gather(tmp_path)
    assert [r.name for r in results] == ["a", "b", "c"]
    assert commands == ["cmd-x", "cmd-y"] and elapsed == 20.0
    assert "full_y/" in results[1].note and "cmd-y" in results[1].note


def test_missing_or_doubled_check_fails(tmp_path):
    _report(tmp_path / "quick", "quick", ["a", "b"])
    _report(tmp_path / "full_x", "full", ["a"])
    with pytest.raises(SystemExit, match="no report holds: b"):
        _load().gather(tmp_path)
    _report(tmp_path / "full_y", "full", ["a", "b"])
    with pytest.raises(SystemExit, match="recorded twice"):
        _load().gather(tmp_path)


def test_recorded_index_matches_the_module_reports():
    """The committed full report is what the script gives from the committed module reports."""
    results, _, _ = _load().gather(ROOT / "records" / "theory")
    recorded = json.loads((ROOT / "records/theory/full/theory_report.json").read_text())
    assert [(c["name"], c["status"], c["measured"]) for c in recorded["checks"]] == \
        [(r.name, r.status, r.to_dict()["measured"]) for r in results]


def test_a_folder_without_reports_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        _load().main(["--root", str(tmp_path / "none")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and "no quick/theory_report.json" in err[-1]  # argparse: usage line + the error
    assert not (tmp_path / "none").exists()

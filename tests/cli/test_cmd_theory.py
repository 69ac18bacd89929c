"""``moestat theory``: shared options and name spellings (PDE checks only: seconds)."""

import pytest
import json

from moestat.cli.cmd_theory import main


@pytest.mark.slow
def test_quiet_and_hyphenated_check_names(tmp_path, capsys):
    rc = main(["--quick", "--only", "pde4-cosine", "--quiet", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "pde4_cosine: predicted" not in out and "wrote" in out
    data = json.loads((tmp_path / "theory_report.json").read_text())
    assert [c["name"] for c in data["checks"]] == ["pde4_cosine"]


def _part_report(folder, mode, names, command):
    import json

    folder.mkdir(parents=True)
    checks = [{"name": n, "claim": "c", "predicted": -0.5, "measured": -0.5, "ci_low": None, "ci_high": None, "passed": True,
               "status": "passed", "rule": "r", "note": "", "details": {}, "elapsed_s": 0.0, "category": None, "reason": ""}
              for n in names]
    (folder / "theory_report.json").write_text(json.dumps({"mode": mode, "command": command, "elapsed_s": 5.0, "checks": checks}))


def test_merge_gathers_partial_full_runs_in_the_package_order(tmp_path, capsys):
    import json

    from moestat.theorems.checks.runner import CHECK_NAMES

    names = list(CHECK_NAMES)
    _part_report(tmp_path / "b", "full", names[1:], "moestat theory --full --only rest")
    _part_report(tmp_path / "a", "full", names[:1], "moestat theory --full --only first")
    assert main(["--merge", str(tmp_path / "b"), str(tmp_path / "a"), "--out", str(tmp_path / "m")]) == 0
    rep = json.loads((tmp_path / "m" / "theory_report.json").read_text())
    assert rep["mode"] == "full" and [c["name"] for c in rep["checks"]] == names
    assert rep["elapsed_s"] == 10.0 and "--only first" in rep["checks"][0]["note"]


def test_merge_refuses_a_missing_or_doubled_check_in_one_line(tmp_path, capsys):
    from moestat.cli.main import main as moestat_main
    from moestat.theorems.checks.runner import CHECK_NAMES

    names = list(CHECK_NAMES)
    _part_report(tmp_path / "a", "full", names[:-1], "x")
    assert moestat_main(["theory", "--merge", str(tmp_path / "a"), "--out", str(tmp_path / "m")]) == 2
    assert f"no report holds: {names[-1]}" in capsys.readouterr().err and not (tmp_path / "m").exists()
    _part_report(tmp_path / "b", "full", names[-2:], "y")
    assert moestat_main(["theory", "--merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 2
    assert "recorded twice" in capsys.readouterr().err
    _part_report(tmp_path / "q", "quick", names, "z")
    assert moestat_main(["theory", "--merge", str(tmp_path / "q"), "--out", str(tmp_path / "m")]) == 2  # a quick report is not a --full one
    assert "not a --full report" in capsys.readouterr().err

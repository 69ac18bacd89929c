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

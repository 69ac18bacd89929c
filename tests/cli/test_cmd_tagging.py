"""``moestat tagging``: a demo run end to end and one-line usage errors with nothing written."""

from __future__ import annotations

import pytest
from moestat.cli.common import run_main
from moestat.cli.cmd_tagging import main


@pytest.mark.slow
def test_demo_command_end_to_end(tmp_path, capsys):
    out = tmp_path / "o"
    rc = run_main(main, ["--compare", "baseline,load", "--epochs", "1", "--demo-train", "32", "--demo-val", "8",
                         "--out", str(out)])
    assert rc == 0
    table = capsys.readouterr().out
    assert "SYNTHETIC DEMO" in table and "load" in table and "baseline" in table
    assert (out / "summary.json").is_file() and (out / "results.csv").is_file()


def test_usage_errors_are_one_line_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "o"
    for argv, msg in ((["--data-path", str(tmp_path / "none")], "is not a folder"),
                      (["--data-path", str(tmp_path)], "no CoNLL-2003 training file"),
                      (["--gate", "switch"], "unknown gate"),
                      (["--k", "9"], "must not exceed")):
        assert run_main(main, argv + ["--out", str(out)], prog="moestat tagging") == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1
    assert not out.exists()
    (tmp_path / "train.txt").write_text("a NN B-NP O\nb NN\n", encoding="utf-8")
    (tmp_path / "valid.txt").write_text("a NN B-NP O\n", encoding="utf-8")
    assert run_main(main, ["--data-path", str(tmp_path), "--out", str(out)], prog="moestat tagging") == 2
    assert f"{tmp_path / 'train.txt'}:2: expected 4 columns" in capsys.readouterr().err

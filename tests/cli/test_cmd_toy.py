"""``moestat toy``."""

import json
import subprocess
import sys

import pytest

from moestat.cli.common import run_main
from moestat.cli.cmd_toy import main


@pytest.mark.slow
def test_classify_writes_table_and_figures(tmp_path, capsys):
    out = tmp_path / "toy"
    rc = main(["classify", "--method", "output_mixture,top1", "--experts", "2", "--runs", "2",
               "--epochs", "2", "--out", str(out)])
    assert rc == 0
    table = (out / "classify_table.md").read_text()
    assert "| output_mixture | 2 |" in table and "±" in table and "I(E;Y)" in table
    rows = json.loads((out / "classify_results.json").read_text())["rows"]
    assert len(rows) == 4 and {"accuracy", "H_s", "H_u", "I_EY"} <= set(rows[0])
    for stem in ("regions_output_mixture_M2", "regions_top1_M2"):
        assert (out / f"{stem}.png").stat().st_size > 0 and (out / f"{stem}.pdf").exists()
    assert "output_mixture" in capsys.readouterr().out


@pytest.mark.slow
def test_regress_writes_matrices(tmp_path):
    out = tmp_path / "reg"
    assert main(["regress", "--method", "output_mixture", "--runs", "1", "--epochs", "2", "--out", str(out)]) == 0
    assert "err R" in (out / "regress_table.md").read_text()
    assert (out / "expert_matrices.png").exists()


@pytest.mark.parametrize(
    "args, msg",
    [
        (["classify", "--method", "bogus"], "unknown method"),
        (["regress", "--method", "loudest_expert"], "regression toy"),
        (["classify", "--method", "top2", "--experts", "1"], "keeps 2 experts"),
        (["classify", "--runs", "0"], "positive integer"),
    ],
)
def test_bad_input_exit_2_nothing_written(tmp_path, capsys, args, msg):
    out = tmp_path / "never"
    try:
        rc = run_main(main, [*args, "--out", str(out)], prog="moestat toy")
    except SystemExit as exc:  # argparse errors exit directly with status 2
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2
    assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.slow
def test_module_entry_point_exit_status(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "moestat", "toy", "classify", "--method", "bogus", "--out",
                           str(tmp_path / "x")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("moestat toy: error:")
    assert not (tmp_path / "x").exists()


def test_internal_error_during_the_work_exits_1(tmp_path, capsys, monkeypatch):
    import moestat.cli.cmd_toy as cmd

    def boom(*args, **kwargs):
        raise ValueError("a bug in the middle of the work")  # a ValueError too: still not bad input

    monkeypatch.setattr(cmd, "run_classification", boom)
    rc = run_main(main, ["classify", "--method", "top1", "--experts", "2", "--runs", "1", "--out", str(tmp_path / "o")],
                  prog="moestat toy")
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" in err and "internal error" in err


@pytest.mark.slow
def test_method_names_accept_hyphens(tmp_path):
    out = tmp_path / "h"
    assert main(["classify", "--method", "output-mixture", "--experts", "2", "--runs", "1", "--epochs", "1",
                 "--no-figures", "--quiet", "--out", str(out)]) == 0
    rows = json.loads((out / "classify_results.json").read_text())["rows"]
    assert [r["method"] for r in rows] == ["output_mixture"]

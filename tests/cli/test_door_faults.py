"""Faults a new user meets at the doors: sizes beyond the machine, edited stores, a bare
``moestat``, a closed stdout, interrupts.  Each is one line on stderr with its exit status;
bad input writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_doors import DOORS, _run

HUGE = "1000000000000"  # 10**12: no machine holds that many samples


@pytest.mark.parametrize("argv,flag", [
    (["check", "--draws", HUGE], "--draws"),
    (DOORS["softmoe norm-target"] + ["--eval-size", HUGE], "--eval-size"),
    (DOORS["tagging"] + ["--demo-train", HUGE], "--demo-train"),
    (DOORS["tagging"] + ["--demo-val", HUGE], "--demo-val"),
], ids=["check --draws", "softmoe --eval-size", "tagging --demo-train", "tagging --demo-val"])
def test_a_size_beyond_the_machine_is_bad_input_not_an_internal_error(argv, flag, tmp_path, capsys):
    out = tmp_path / "out"
    extra = [] if argv[0] == "check" else ["--out", str(out)]
    rc, err = _run(argv + extra, capsys)
    assert rc == 2 and err.count("\n") == 1 and flag in err and "internal error" not in err, err
    assert not out.exists()


@pytest.fixture(scope="module")
def rates_run(tmp_path_factory):
    from tests.cli.test_doors import RATES, moestat

    out = tmp_path_factory.mktemp("rates") / "run"
    assert moestat(RATES + ["--out", str(out)]) == 0
    return out


def _edit_a_row(results):
    """Change one value of row 1 without its crc32 (an edit by hand)."""
    lines = results.read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[1].rstrip("\n").split(",")
    col = header.index("voronoi")
    cells[col] = repr(float(cells[col]) * 2 + 1.0)
    lines[1] = ",".join(cells) + "\n"
    results.write_text("".join(lines))


@pytest.mark.slow  # the rates run it edits (about 10 s)
def test_theory_resume_refuses_an_edited_row_naming_the_line(rates_run, tmp_path, capsys):
    import shutil

    from moestat.folder_lock import DOOR_NAME

    out = tmp_path / "out"
    (out / "rates").mkdir(parents=True)
    (out / DOOR_NAME).write_text('{"door": "theory"}\n')
    run = Path(shutil.copytree(rates_run, out / "rates" / "quick-exact"))
    _edit_a_row(run / "results.csv")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    rc, err = _run(["theory", "--only", "pde", "--quiet", "--out", str(out), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert "edited after they were written (line 2" in err and "results.csv" in err, err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("argv", [["reproduce", "--list"], ["--version"], ["theory", "--list"]])
def test_a_closed_stdout_is_refused_not_a_silent_success(argv, monkeypatch, capsys):
    # `moestat reproduce --list >&-`: Python then has no sys.stdout and print() drops the listing
    from moestat.cli.main import main

    monkeypatch.setattr("sys.stdout", None)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "standard output is closed" in err


@pytest.mark.slow
def test_a_closed_stdout_fails_in_a_real_process(tmp_path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(["bash", "-c", f"exec {sys.executable} -m moestat reproduce --list >&-"], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert proc.returncode == 2 and "standard output is closed" in proc.stderr, proc.stderr


# -------------------------------------------------------------------------------------------------
# a second Ctrl-C while the command cleans up
# -------------------------------------------------------------------------------------------------
def _second_ctrl_c(real):
    """``real`` (a cleanup step), preceded by a Ctrl-C delivered to this process."""
    import os
    import signal

    def step(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    return step


def test_a_second_ctrl_c_during_the_lock_release_is_no_traceback_and_leaves_no_lock(tmp_path, monkeypatch, capsys):
    import moestat.cli.common as common
    from moestat.folder_lock import LOCK_NAME

    out = tmp_path / "out"

    def door(argv):
        common.prepare_out(out, False, door="rates")
        raise KeyboardInterrupt  # the first Ctrl-C

    monkeypatch.setattr(common, "unlock_all", _second_ctrl_c(common.unlock_all))
    assert common.run_main(door, [], prog="moestat rates") == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and "Traceback" not in err, err
    assert not (out / LOCK_NAME).exists()


def test_a_second_ctrl_c_while_toy_cleans_its_folder_leaves_nothing_a_rerun_refuses(tmp_path, monkeypatch, capsys):
    import moestat.cli.common as common

    out = tmp_path / "out"

    def door(argv):
        common.prepare_out(out, None, door="toy")
        with common.cleaned_on_interrupt(out):
            raise KeyboardInterrupt

    monkeypatch.setattr(common, "unlock_out", _second_ctrl_c(common.unlock_out))
    assert common.run_main(door, [], prog="moestat toy", on_interrupt=common.NOTHING_KEPT) == 130
    assert "Traceback" not in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_a_folder_holding_only_the_doors_own_marker_is_empty_to_a_rerun(tmp_path, capsys):
    from moestat.folder_lock import DOOR_NAME
    from tests.cli.test_doors import TOY

    out = tmp_path / "out"
    out.mkdir()
    (out / DOOR_NAME).write_text('{"door": "toy"}\n')  # what an interrupted start could leave
    rc, err = _run(TOY + ["--out", str(out)], capsys)
    assert rc == 0, err
    (out / "other").mkdir()
    (tmp_path / "out2").mkdir()
    (tmp_path / "out2" / DOOR_NAME).write_text('{"door": "rates"}\n')  # another door's folder is not empty
    rc, err = _run(TOY + ["--out", str(tmp_path / "out2")], capsys)
    assert rc == 2 and "not empty" in err, err

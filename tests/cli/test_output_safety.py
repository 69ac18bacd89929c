"""No door writes over its own input, and no write follows a link out of ``--out``, at any depth.

The resuming doors meet a folder prepared by someone else (``OUT/deep/run -> elsewhere``): the
walk of :func:`moestat.io.refuse_links_in` refuses it before anything is written.  The doors
without ``--resume`` only accept an empty ``--out``, so a link below it is refused as "not
empty"; ``plot`` writes beside the rates run it reads, and ``check`` writes only ``--json``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moestat.folder_lock import DOOR_NAME
from moestat.io import (NotARegularFile, OutputIsInput, append_line, atomic_write_text, begin_command, end_command,
                        note_out_root)
from tests.cli.test_doors import DOORS, _run, rates_run  # noqa: F401 (a fixture)

CHECK = ["check", "--n-min", "200", "--n-max", "800", "--n-points", "3", "--draws", "200"]

SCENARIO = (Path(__file__).resolve().parents[2] / "examples" / "softmax_linear.toml").read_text()

def _outside(tmp_path: Path) -> tuple[Path, Path]:
    """A folder outside every --out holding one file, and that file's content."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "precious.txt"
    victim.write_text("not moestat's\n")
    return elsewhere, victim


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# -------------------------------------------------------------------------------------------------
# links below --out, door by door
# -------------------------------------------------------------------------------------------------
RESUMING = ["select", "reproduce", "rates", "theory", "realdata", "tagging", "lm"]


@pytest.mark.parametrize("door", [pytest.param(d, marks=pytest.mark.slow) if d in ("reproduce", "realdata") else d
                                  for d in RESUMING])  # these two load their catalogue / data set first (> 10 s)
def test_resume_refuses_a_link_one_folder_down_in_out(door, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "deep").mkdir(parents=True)
    (out / DOOR_NAME).write_text(f'{{"door": "{door}"}}\n')
    elsewhere, victim = _outside(tmp_path)
    (out / "deep" / "run").symlink_to(elsewhere, target_is_directory=True)
    rc, err = _run(DOORS[door] + ["--out", str(out), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert "deep/run, which is a symbolic link" in err, err
    assert _snapshot(elsewhere) == {Path("precious.txt"): b"not moestat's\n"}
    assert sorted(p.name for p in out.iterdir()) == [DOOR_NAME, "deep"]  # no lock or file left beside


def test_theory_resume_refuses_a_linked_run_folder_and_leaves_its_target_untouched(tmp_path, capsys):
    # the tester's case: OUT/rates/quick-exact linked elsewhere; four files there were replaced
    out = tmp_path / "out"
    (out / "rates").mkdir(parents=True)
    (out / DOOR_NAME).write_text('{"door": "theory"}\n')
    elsewhere, victim = _outside(tmp_path)
    (out / "rates" / "quick-exact").symlink_to(elsewhere, target_is_directory=True)
    rc, err = _run(DOORS["theory"] + ["--out", str(out), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "rates/quick-exact, which is a symbolic link" in err, err
    assert _snapshot(elsewhere) == {Path("precious.txt"): b"not moestat's\n"}


@pytest.mark.parametrize("door", ["toy", "softmoe norm-target", "softmoe subsets"])
def test_a_door_without_resume_refuses_an_out_with_a_link_below(door, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "deep").mkdir(parents=True)
    elsewhere, victim = _outside(tmp_path)
    (out / "deep" / "run").symlink_to(elsewhere, target_is_directory=True)
    rc, err = _run(DOORS[door] + ["--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1 and "not empty" in err, err
    assert _snapshot(elsewhere) == {Path("precious.txt"): b"not moestat's\n"}


@pytest.mark.slow  # the rates run it reads
def test_plot_refuses_a_figure_name_that_is_a_link(rates_run, tmp_path, capsys):
    import shutil

    run = Path(shutil.copytree(rates_run, tmp_path / "run"))
    elsewhere, victim = _outside(tmp_path)
    (run / "convergence_replot.png").symlink_to(victim)
    rc, err = _run(["plot", str(run), "--losses", "voronoi"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "symbolic link" in err, err
    assert victim.read_text() == "not moestat's\n"


def test_check_refuses_a_json_that_is_a_link(tmp_path, capsys):
    elsewhere, victim = _outside(tmp_path)
    link = tmp_path / "report.json"
    link.symlink_to(victim)
    rc, err = _run(CHECK + ["--json", str(link)], capsys)
    assert rc == 2 and err.count("\n") == 1 and "symbolic link" in err, err
    assert victim.read_text() == "not moestat's\n"


# the helper itself: a link folder put below --out while the work runs (after the walk) is refused too
@pytest.mark.parametrize("write", [lambda p: atomic_write_text(p, "x\n"), lambda p: append_line(p, "x")],
                         ids=["atomic_write_text", "append_line"])
def test_a_write_below_out_through_a_link_made_meanwhile_is_refused(write, tmp_path):
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    elsewhere, victim = _outside(tmp_path)
    (out / "a" / "b").symlink_to(elsewhere, target_is_directory=True)
    begin_command()
    try:
        note_out_root(out)
        with pytest.raises(NotARegularFile, match="a/b is a symbolic link inside --out"):
            write(out / "a" / "b" / "precious.txt")
        write(out / "a" / "fine.txt")  # a real folder below --out is written as before
    finally:
        end_command()
    assert victim.read_text() == "not moestat's\n"
    write(out / "a" / "b" / "other.txt")  # outside a command the helpers check only the file itself
    assert (elsewhere / "other.txt").exists()


def test_lm_checkpoint_is_not_saved_through_a_link(tmp_path):
    from moestat.io import atomic_write_with

    elsewhere, victim = _outside(tmp_path)
    ckpt = tmp_path / "seed0.pt"
    ckpt.symlink_to(victim)
    with pytest.raises(NotARegularFile, match="symbolic link"):
        atomic_write_with(ckpt, lambda tmp: Path(tmp).write_bytes(b"weights"), ".pt")
    assert victim.read_text() == "not moestat's\n"


def test_lm_resume_refuses_a_linked_checkpoint(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    (out / DOOR_NAME).write_text('{"door": "lm"}\n')
    elsewhere, victim = _outside(tmp_path)
    (out / "checkpoints" / "linear_seed0.pt").symlink_to(victim)
    rc, err = _run(DOORS["lm"] + ["--out", str(out), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "checkpoints/linear_seed0.pt, which is a symbolic link" in err, err
    assert victim.read_text() == "not moestat's\n"


# -------------------------------------------------------------------------------------------------
# an output that is an input
# -------------------------------------------------------------------------------------------------
def test_check_refuses_a_json_report_over_its_scenario_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("mine.toml").write_text(SCENARIO)
    rc, err = _run(["check", "mine.toml", "--json", "mine.toml", "--draws", "200"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "--json mine.toml is the scenario file" in err, err
    assert Path("mine.toml").read_text() == SCENARIO
    # another spelling of the same file, and a hard link to it, are the same file
    os.link("mine.toml", "alias.toml")
    for spelling in ("./mine.toml", str(tmp_path / "mine.toml"), "alias.toml"):
        rc, err = _run(["check", "mine.toml", "--json", spelling, "--draws", "200"], capsys)
        assert rc == 2 and "never writes over its input" in err, (spelling, err)
    assert Path("mine.toml").read_text() == SCENARIO


def test_an_output_equal_to_an_input_is_refused_by_the_shared_helper(tmp_path):
    from moestat.io import regular_file

    src = tmp_path / "config.toml"
    src.write_text("a = 1\n")
    begin_command()
    try:
        regular_file(src, "--config")
        with pytest.raises(OutputIsInput, match="is the --config .* this command reads"):
            atomic_write_text(tmp_path / "." / "config.toml", "b = 2\n")
        with pytest.raises(OutputIsInput):
            append_line(src, "b = 2")
    finally:
        end_command()
    assert src.read_text() == "a = 1\n"

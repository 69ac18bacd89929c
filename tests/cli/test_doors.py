"""Every door keeps its promises (issue 13): one --out rule, one validation layer, resume keyed by
the full configuration, and Ctrl-C either keeps what finished or says that nothing was kept.

Each test is one reproduction of the issue, door by door."""

from __future__ import annotations

import json
import os
import stat

import shutil
import tempfile
from pathlib import Path

import pytest

from moestat.cli.main import main as moestat

# The lm door gets its own tiny corpus: the offline King James text is an optional Debian package
# (bible-kjv) that a fresh machine lacks; the kjv path has its own test below, skipped without it.
_CORPUS = Path(tempfile.mkdtemp(prefix="moestat-doors-")) / "corpus.txt"
_CORPUS.write_text("In the beginning was the word, and the word was with the text.\n" * 60, encoding="utf-8")

TOY = ["toy", "classify", "--method", "output_mixture", "--experts", "3", "--runs", "1", "--epochs", "1", "--no-figures", "--quiet"]
NORM = ["softmoe", "norm-target", "--steps", "2", "--seeds", "1", "--experts", "1", "--tokens", "5x2", "--eval-size", "64",
        "--n-jobs", "1", "--quiet"]
SUBSETS = ["softmoe", "subsets", "--dataset", "norm", "--experts", "4", "--k", "2", "--model-seeds", "1", "--steps", "2",
           "--random-seeds", "1", "--quiet"]
REAL = ["realdata", "--dataset", "digits", "--gate", "dense", "--experts", "2", "--k", "1", "--epochs", "1", "--seeds", "2",
        "--expert-hidden", "4", "--max-train", "200", "--batch-size", "64", "--device", "cpu", "--no-progress", "--quiet"]
RATES = ["rates", "--d", "2", "--n-min", "40", "--n-max", "90", "--n-points", "3", "--reps", "3", "--max-iter", "5",
         "--n-boot", "100", "--quiet"]
THEORY = ["theory", "--only", "pde", "--quiet"]
TAGGING = ["tagging", "--demo-train", "20", "--demo-val", "10", "--epochs", "1", "--quiet"]
LM = ["lm", "--corpus", "file", "--data-path", str(_CORPUS), "--context", "8", "--quiet"]

SELECT = ["select", "--k-bar", "3", "--n", "200,400,800", "--reps", "2", "--quiet"]
REPRODUCE = ["reproduce", "gmoe-exact", "--quick", "--quiet"]

DOORS = {"select": SELECT, "reproduce": REPRODUCE, "rates": RATES, "theory": THEORY, "toy": TOY, "softmoe norm-target": NORM, "softmoe subsets": SUBSETS,
         "realdata": REAL, "tagging": TAGGING, "lm": LM}


def _run(argv, capsys):
    try:
        rc = moestat(list(argv))
    except SystemExit as exc:  # argparse refuses from inside the parser
        rc = exc.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("door", list(DOORS))
def test_empty_out_is_refused_by_every_door(door, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, err = _run(DOORS[door] + ["--out", ""], capsys)
    assert rc == 2 and err.count("\n") == 1 and "--out" in err
    assert list(tmp_path.iterdir()) == []  # nothing written in the current folder


@pytest.mark.parametrize("door", list(DOORS))
def test_a_non_empty_out_without_resume_is_refused_and_left_untouched(door, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    runs = out / "runs.jsonl"
    runs.write_text('{"gate": "dense", "seed": 0}\n{"gate": "dense", "seed": 1}\n')  # a 2-run store
    rc, err = _run(DOORS[door] + ["--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1 and "--out" in err and "not empty" in err
    assert sorted(p.name for p in out.iterdir()) == ["runs.jsonl"]
    assert runs.read_text().count("\n") == 2


@pytest.mark.skipif(shutil.which("bible") is None or not Path("/usr/lib/bible.data").exists(),
                    reason="the Debian package bible-kjv (the offline kjv corpus) is not installed")
def test_the_kjv_door_refuses_a_non_empty_out(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "runs.jsonl").write_text('{"gate": "dense", "seed": 0}\n')
    rc, err = _run(["lm", "--corpus", "kjv", "--quiet", "--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1 and "not empty" in err
    assert sorted(p.name for p in out.iterdir()) == ["runs.jsonl"]


def test_the_default_out_is_moestat_out_slash_door():
    from moestat.cli.common import DEFAULT_OUT_ROOT
    from tests.cli.test_main import _parsers

    for p in _parsers():
        for a in p._actions:
            if "--out" in a.option_strings:
                assert a.default.startswith(f"{DEFAULT_OUT_ROOT}/"), (p.prog, a.default)


SEEDS = [
    (TOY, "--seed"),
    (NORM, "--seed"),
    (SUBSETS, "--seed"),
    (SUBSETS, "--split-seed"),
    (REAL, "--seed"),
    (REAL, "--split-seed"),
    (THEORY, "--seed"),
    (TAGGING, "--seed"),
    (LM, "--seed"),
    (RATES, "--seed"),
    (RATES, "--truth-seed"),
]


@pytest.mark.parametrize("argv,flag", SEEDS, ids=[f"{a[0]} {a[1] if a[0] == 'softmoe' else ''} {f}" for a, f in SEEDS])
def test_negative_seeds_are_refused_naming_the_flag(argv, flag, tmp_path, capsys):
    out = tmp_path / "out"
    rc, err = _run(argv + [flag, "-1", "--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1 and flag in err
    assert not out.exists()


def test_theory_reps_1_is_refused(tmp_path, capsys):
    rc, err = _run(THEORY + ["--reps", "1", "--out", str(tmp_path / "t")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "--reps" in err
    assert not (tmp_path / "t").exists()


def test_realdata_compare_empty_is_refused(tmp_path, capsys):
    rc, err = _run(REAL + ["--compare", "", "--out", str(tmp_path / "r")], capsys)
    assert rc == 2 and "--compare" in err and not (tmp_path / "r").exists()


def test_softmoe_subsets_is_validated_before_the_folder_is_created(tmp_path, capsys):
    out = tmp_path / "s"
    rc, err = _run(["softmoe", "subsets", "--dataset", "digits", "--experts", "4", "--k", "9", "--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1
    rc, err = _run(["softmoe", "subsets", "--dataset", "fashion-mnist", "--data-path", str(tmp_path / "none"),
                    "--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert not out.exists()


# -------------------------------------------------------------------------------------------------
# Ctrl-C
# -------------------------------------------------------------------------------------------------
def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("argv,target", [(TOY, "moestat.cli.cmd_toy.run_classification"),
                                         (NORM, "moestat.cli.cmd_softmoe.run_norm_target"),
                                         (SUBSETS, "moestat.cli.cmd_softmoe.run_subsets")])
def test_doors_that_write_at_the_end_say_that_ctrl_c_kept_nothing(argv, target, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(target, _interrupt)
    out = tmp_path / "out"
    rc, err = _run(argv + ["--out", str(out)], capsys)
    assert rc == 130 and "nothing was kept" in err and "kept;" not in err
    assert not out.exists()  # no empty folder left behind


@pytest.mark.slow
def test_realdata_ctrl_c_keeps_finished_runs_and_resume_completes_them(tmp_path, capsys, monkeypatch):
    import moestat.experiments.realdata as rd

    full = tmp_path / "full"
    assert _run(REAL + ["--out", str(full)], capsys)[0] == 0
    real_eval = rd.evaluate_classifier
    calls = []

    def eval_then_interrupt(*a, **k):
        calls.append(1)
        if len(calls) == 2:  # Ctrl-C during the second run
            raise KeyboardInterrupt
        return real_eval(*a, **k)

    part = tmp_path / "part"
    monkeypatch.setattr(rd, "evaluate_classifier", eval_then_interrupt)
    rc, err = _run(REAL + ["--out", str(part)], capsys)
    assert rc == 130 and "finished results are kept" in err
    kept = [json.loads(l) for l in (part / "runs.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in kept] == [0]
    monkeypatch.setattr(rd, "evaluate_classifier", real_eval)
    assert _run(REAL + ["--out", str(part), "--resume"], capsys)[0] == 0

    def accs(path):
        return [(r["gate"], r["seed"], r["test_accuracy"]) for r in map(json.loads, path.read_text().splitlines())]

    assert accs(part / "runs.jsonl") == accs(full / "runs.jsonl")


# -------------------------------------------------------------------------------------------------
# resume keyed by the full configuration; --summarise-only from the stored configuration
# -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "run"
    assert moestat(REAL + ["--out", str(out)]) == 0
    return out


@pytest.mark.slow
@pytest.mark.parametrize("change,flag", [(["--epochs", "2"], "--epochs"), (["--experts", "3"], "--experts"),
                                         (["--split-seed", "1"], "--split-seed"), (["--lr", "0.01"], "--lr")])
def test_realdata_resume_with_other_settings_is_refused_naming_them(real_run, change, flag, capsys):
    before = (real_run / "runs.jsonl").read_text()
    rc, err = _run(REAL + change + ["--out", str(real_run), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1 and flag in err and "other settings" in err
    assert (real_run / "runs.jsonl").read_text() == before


@pytest.mark.slow
def test_realdata_summarise_only_uses_the_stored_settings(real_run, tmp_path, capsys):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(real_run, out)
    (out / "summary.json").unlink()
    assert _run(["realdata", "--summarise-only", "--quiet", "--out", str(out)], capsys)[0] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [g["gate"] for g in summary["gates"]] == ["dense"] and summary["gates"][0]["n_seeds"] == 2
    assert summary["config"]["epochs"] == 1 and summary["config"]["n_experts"] == 2
    # a flag that would change the settings is refused rather than ignored
    rc, err = _run(["realdata", "--summarise-only", "--epochs", "5", "--out", str(out)], capsys)
    assert rc == 2 and "--epochs" in err


def test_realdata_summarise_only_on_an_empty_folder_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc, err = _run(["realdata", "--summarise-only", "--out", str(tmp_path / "empty")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "no finished runs" in err
    assert list((tmp_path / "empty").iterdir()) == []


# -------------------------------------------------------------------------------------------------
# moestat plot
# -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rates_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("rates") / "run"
    assert moestat(RATES + ["--router", "perturbed,cosine", "--out", str(out)]) == 0
    return out


@pytest.fixture
def rates_copy(rates_run, tmp_path):
    import shutil

    return shutil.copytree(rates_run, tmp_path / "run")


@pytest.mark.slow
@pytest.mark.parametrize("text,word", [("{}", "no list of fits"), ('{"fits": [', "not valid JSON")])
def test_plot_on_a_broken_summary_is_one_line_naming_the_file(rates_copy, text, word, capsys):
    (rates_copy / "summary.json").write_text(text)
    rc, err = _run(["plot", str(rates_copy)], capsys)
    assert rc == 2 and err.count("\n") == 1 and str(rates_copy / "summary.json") in err and word in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_plot_writes_beside_the_sweep_figure_unless_overwrite(rates_copy, capsys):
    own = (rates_copy / "convergence.png").stat().st_ino  # an atomic replace makes a new file
    assert _run(["plot", str(rates_copy)], capsys)[0] == 0
    assert (rates_copy / "convergence_replot.png").exists() and (rates_copy / "convergence.png").stat().st_ino == own
    rc, err = _run(["plot", str(rates_copy)], capsys)  # a second re-plot does not replace the first silently
    assert rc == 2 and "--overwrite" in err
    assert _run(["plot", str(rates_copy), "--overwrite"], capsys)[0] == 0
    assert (rates_copy / "convergence.png").stat().st_ino != own


@pytest.mark.slow
def test_plot_refits_with_the_stored_configuration_not_the_defaults(rates_copy, capsys):
    # without summary.json the figure is refitted: with the run's routers and bootstrap settings
    from moestat.rates.redraw import prepare_redraw

    (rates_copy / "summary.json").unlink()
    plan = prepare_redraw(rates_copy)
    assert plan.config.reps == 3 and list(plan.config.router) == ["perturbed", "cosine"]
    assert plan.config.n_boot == 100
    assert _run(["plot", str(rates_copy)], capsys)[0] == 0


def test_plot_refuses_a_tampered_store(rates_copy, capsys):
    lines = (rates_copy / "results.csv").read_text().splitlines()
    fields = lines[1].split(",")
    fields[4] = "25"  # replicate 25 of a 3-replicate sweep
    with open(rates_copy / "results.csv", "a") as fh:
        fh.write(",".join(fields) + "\n")
    rc, err = _run(["plot", str(rates_copy)], capsys)
    assert rc == 2 and "outside the configured grid" in err and str(rates_copy / "results.csv") in err


# -------------------------------------------------------------------------------------------------
# files readable per umask
# -------------------------------------------------------------------------------------------------
def test_every_file_of_a_run_is_as_readable_as_open_makes_it(rates_run):
    mask = os.umask(0)
    os.umask(mask)
    for p in rates_run.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask, p.name


def test_append_line_creates_files_per_umask(tmp_path):
    from moestat.io import append_line

    old = os.umask(0o002)  # a shared group folder
    try:
        append_line(tmp_path / "runs.jsonl", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "runs.jsonl").stat().st_mode) == 0o664

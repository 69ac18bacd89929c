"""``moestat lm``: outputs, table, resume, one-line errors (on a generated text file)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from moestat.cli.cmd_lm import main
from moestat.cli.common import run_main

TINY = ["--steps", "10", "--eval-every", "5", "--eval-symbols", "64", "--batch-size", "4", "--context", "8",
        "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--n-experts", "3", "--expert-hidden", "8",
        "--no-progress", "--device", "cpu"]


@pytest.fixture()
def text_file(tmp_path):
    p = tmp_path / "corpus.txt"
    p.write_text("In the beginning was the word, and the word was with the text.\n" * 60, encoding="utf-8")
    return p


@pytest.mark.slow
def test_two_routers_two_seeds_outputs_table_and_resume(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    args = ["--corpus", "file", "--data-path", str(text_file), "--routers", "cosine,perturbed-cosine",
            "--seeds", "2", *TINY, "--out", str(out)]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "| cosine | 2 |" in table and "| perturbed | 2 |" in table
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["router"], r["seed"]) for r in rows] == [("cosine", 0), ("perturbed", 0), ("cosine", 1), ("perturbed", 1)]  # seed-major
    assert all(len(r["curve"]) == 2 and r["steps"] == 10 for r in rows)
    for f in ("summary.json", "table.md", "curves.png", "routing.png", "checkpoints/perturbed_seed1.pt"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["model"]["n_experts"] == 3 and summary["config"]["train"]["steps"] == 10
    assert summary["paper_table1"]["perturbed"]["enwik8"] == [1.197, 1.147]
    # --resume trains nothing already finished
    before = (out / "runs.jsonl").read_text()
    assert main([*args, "--resume"]) == 0
    assert (out / "runs.jsonl").read_text() == before
    # ... and only what is missing when a seed is added
    assert main([*args, "--resume", "--seeds", "3"]) == 0
    assert len((out / "runs.jsonl").read_text().splitlines()) == 6


@pytest.mark.parametrize("args, msg", [
    (["--routers", "softmax-gate"], "unknown name"),
    (["--n-experts", "2", "--k", "3"], "--k 3"),
    (["--d-model", "15"], "multiple of --n-heads"),
    (["--steps", "7"], "multiple of --eval-every"),
    (["--lr", "0"], "--lr"),
    (["--corpus", "text8"], "fewer than the 100,000,000"),  # a file far short of the standard split
    (["--corpus", "text8", "--data-path", "/nonexistent/text8"], "no text8 file"),
    (["--device", "tpu"], "--device"),
    (["--precision", "fp16"], "--precision"),
    (["--context", "4000"], "shorter than one window"),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, text_file, args, msg, capsys):
    out = tmp_path / "o"
    base = ["--corpus", "file", "--data-path", str(text_file), *TINY]
    with pytest.raises(SystemExit) as ei:
        raise SystemExit(run_main(main, [*base, *args, "--out", str(out)], prog="moestat lm"))
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0] and "Traceback" not in err[0]
    assert not out.exists()


def test_missing_offline_corpus_names_the_package(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    rc = run_main(main, [*TINY, "--out", str(tmp_path / "o")], prog="moestat lm")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "apt-get install bible-kjv" in err[0]
    assert not (tmp_path / "o").exists()


def test_listed_in_the_command():
    from moestat.cli.main import SUBCOMMANDS

    assert SUBCOMMANDS["lm"][0] == "moestat.cli.cmd_lm"


@pytest.mark.slow
def test_bf16_precision_trains_with_float32_weights_and_is_recorded(tmp_path, text_file):
    """``--precision bf16``: autocast in the training passes, float32 master weights (the saved
    checkpoint), the precision in runs.jsonl and summary.json; BPC evaluated in float32, finite."""
    out = tmp_path / "bf16"
    args = ["--corpus", "file", "--data-path", str(text_file), "--routers", "perturbed", "--seeds", "1", *TINY,
            "--precision", "bf16", "--quiet", "--out", str(out)]
    assert main(args) == 0
    row = json.loads((out / "runs.jsonl").read_text().splitlines()[0])
    assert row["precision"] == "bf16" and np.isfinite(row["val_bpc"]) and np.isfinite(row["test_bpc"])
    assert json.loads((out / "summary.json").read_text())["config"]["precision"] == "bf16"
    state = torch.load(out / "checkpoints" / "perturbed_seed0.pt", weights_only=False)["state_dict"]
    assert all(v.dtype == torch.float32 for v in state.values() if v.is_floating_point())

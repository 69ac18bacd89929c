"""``moestat realdata``: outputs, --compare table, resume, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from moestat.cli.common import run_main
from moestat.cli.cmd_realdata import main
from moestat.experiments.realdata import GATE_SPECS, readme_reference, summarise


@pytest.mark.slow
def test_compare_on_digits_writes_table_and_plots(tmp_path, capsys):
    out = tmp_path / "cmp"
    rc = main(["--dataset", "digits", "--compare", "mlp,dense,noisy_topk_load,perturbed_cosine", "--experts", "4",
               "--k", "2", "--epochs", "2", "--seeds", "2", "--expert-hidden", "8", "--no-progress",
               "--device", "cpu", "--out", str(out)])
    assert rc == 0
    table = capsys.readouterr().out
    for g in ("mlp", "dense", "noisy_topk_load", "perturbed"):
        assert g in table
    assert "perturbed_cosine" not in table  # the alias is reported under the canonical name
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and {r["seed"] for r in rows} == {0, 1}
    summary = json.loads((out / "summary.json").read_text())
    by = {e["gate"]: e for e in summary["gates"]}
    assert by["dense"]["n_seeds"] == 2 and "H_u_mean" in by["dense"] and "H_u_mean" not in by["mlp"]
    # the plain MLP is parameter-matched to the dense MoE
    assert abs(by["mlp"]["n_params_mean"] - by["dense"]["n_params_mean"]) <= 64 + 1 + 10
    for f in ("summary.md", "summary.csv", "router_distribution.png", "router_distribution.pdf",
              "class_expert_heatmaps.png", "class_expert_heatmaps.pdf"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    # --resume keeps the finished rows and trains nothing new
    before = (out / "runs.jsonl").read_text()
    assert main(["--dataset", "digits", "--compare", "mlp,dense,noisy_topk_load,perturbed_cosine", "--experts", "4",
                 "--epochs", "2", "--seeds", "2", "--expert-hidden", "8", "--no-progress", "--resume",
                 "--out", str(out)]) == 0
    assert (out / "runs.jsonl").read_text() == before
    # --summarise-only trains nothing and summarises every gate of the folder with its stored settings
    (out / "summary.json").unlink()
    assert main(["--no-progress", "--summarise-only", "--out", str(out)]) == 0
    assert (out / "runs.jsonl").read_text() == before
    gates = [e["gate"] for e in json.loads((out / "summary.json").read_text())["gates"]]
    assert gates == ["mlp", "dense", "noisy_topk_load", "perturbed"]


def test_summarise_mean_and_sample_std():
    rows = [{"gate": "a", "test_accuracy": v, "seconds_per_epoch": 1.0, "n_params": 5, "best_epoch": 1} for v in (0.8, 0.9)]
    s = summarise(rows)["gates"][0]
    assert s["test_accuracy_mean"] == pytest.approx(0.85)
    assert s["test_accuracy_std"] == pytest.approx(0.0707107, rel=1e-5)


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--gate", "nope"], "unknown gate"),
        (["--experts", "4", "--k", "5"], "--k 5"),
        (["--compare", "perturbed_cosine", "--tau", "0"], "--tau"),
        (["--dataset", "mnist", "--data-path", "/nonexistent/mnist"], "IDX files not found"),
        (["--epochs", "0"], "positive integer"),
        (["--device", "tpu"], "--device"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, args, msg, capsys):
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as ei:  # argparse-level errors exit directly
        raise SystemExit(run_main(main, ["--dataset", "digits", *args, "--out", str(out)], prog="moestat realdata"))
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0] and "Traceback" not in err[0]
    assert not out.exists()


@pytest.mark.slow
def test_module_entry_point_reports_one_line(tmp_path):
    out = tmp_path / "o"
    p = subprocess.run([sys.executable, "-m", "moestat", "realdata", "--dataset", "digits", "--gate", "nope", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "unknown gate" in p.stderr
    assert not out.exists()


def test_readme_reference_parses_the_debian_readme():
    ref = readme_reference()
    if ref is None:
        pytest.skip("the dataset-fashion-mnist README is not installed")
    assert ref["classifier"] == "MLP 256-128-100" and 0.5 < ref["test_accuracy"] < 1.0


def test_every_gate_spec_builds():
    from moestat.data.images import load_dataset
    from moestat.experiments.realdata import build_model

    ds = load_dataset("digits")
    for g in GATE_SPECS:
        m = build_model(g, ds, n_experts=4, k=2, expert_hidden=8)
        assert sum(p.numel() for p in m.parameters()) > 0


def test_internal_error_during_the_work_exits_1(tmp_path, capsys, monkeypatch):
    import moestat.cli.cmd_realdata as cmd

    def boom(*args, **kwargs):
        raise ValueError("a bug in the middle of the work")  # a ValueError too: still not bad input

    monkeypatch.setattr(cmd, "run_experiment", boom)
    rc = run_main(main, ["--dataset", "digits", "--gate", "dense", "--out", str(tmp_path / "o")], prog="moestat realdata")
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" in err and "internal error" in err


def test_gate_names_accept_aliases_and_hyphens():
    from moestat.experiments.realdata import parse_gates

    assert parse_gates("perturbed-cosine,topk-mask,thesis:output-mixture") == ["perturbed", "topk_mask",
                                                                              "thesis:output_mixture"]
    assert parse_gates("perturbed_cosine,perturbed") == ["perturbed"]
    with pytest.raises(ValueError, match="unknown thesis method"):
        parse_gates("thesis:nope")


def test_base_seed_is_an_alias_of_seed():
    from moestat.cli.cmd_realdata import build_parser

    assert build_parser().parse_args(["--base-seed", "4", "--out", "x"]).seed == 4
    assert build_parser().parse_args(["--seed", "4", "--out", "x"]).seed == 4


def test_rows_recorded_as_perturbed_cosine_are_read_as_perturbed(tmp_path, capsys):
    out = tmp_path / "old"
    out.mkdir()
    row = {"gate": "perturbed_cosine", "seed": 0, "dataset": "digits", "test_accuracy": 0.5, "n_params": 10}
    (out / "runs.jsonl").write_text(json.dumps(row) + "\n")
    # a folder from before run_config.json: the command refuses to guess its settings ...
    assert run_main(main, ["--summarise-only", "--quiet", "--out", str(out)], prog="moestat realdata") == 2
    assert "run_config.json" in capsys.readouterr().err
    # ... the library summarises it when told which gates to read
    from moestat.data.images import load_dataset
    from moestat.experiments.realdata import run_experiment

    run_experiment(load_dataset("digits", None), ["perturbed"], out, seeds=1, summarise_only=True, verbose=False,
                   progress=False)
    gates = json.loads((out / "summary.json").read_text())["gates"]
    assert [g["gate"] for g in gates] == ["perturbed"] and gates[0]["test_accuracy_mean"] == 0.5

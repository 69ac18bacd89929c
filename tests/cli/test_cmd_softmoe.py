"""``moestat softmoe``: one-line errors with nothing written, and tiny end-to-end runs."""

import gzip
import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from moestat.cli.common import run_main
from moestat.data.norm_target import constant_predictor_mse
from moestat.cli.cmd_softmoe import main
from moestat.data.images import read_idx
from moestat.experiments.softmoe_norm_target import norm_target_table, run_norm_target
from moestat.experiments.softmoe_subsets import load_image_tokens


def _run(argv, capsys):
    rc = run_main(main, argv, prog="moestat softmoe")
    return rc, capsys.readouterr()


@pytest.mark.parametrize("argv,msg", [
    (["norm-target", "--tokens", "3x3"], "multiply to 10"),
    (["norm-target", "--tokens", "5by2"], "tokens"),
    (["norm-target", "--experts", "0,2"], "positive"),
    (["norm-target", "--device", "tpu"], "device"),
    (["subsets", "--dataset", "fashion-mnist", "--data-path", "/nonexistent/fm"], "not found"),
    (["subsets", "--dataset", "mnist"], "invalid choice"),
])
def test_bad_input_exits_2_without_writing(tmp_path, capsys, argv, msg):
    out = tmp_path / "out"
    try:
        rc, cap = _run(argv + ["--out", str(out)], capsys)
    except SystemExit as e:  # argparse errors exit directly with status 2
        rc, cap = e.code, capsys.readouterr()
    assert rc == 2
    assert msg in cap.err and len(cap.err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.slow
def test_norm_target_tiny_run(tmp_path, capsys):
    out = tmp_path / "norm"
    rc, cap = _run(["norm-target", "--steps", "30", "--seeds", "2", "--experts", "1,2", "--tokens", "5x2",
                    "--eval-size", "500", "--out", str(out)], capsys)
    assert rc == 0, cap.err
    for f in ("norm_target.json", "norm_target_table.rst", "witness.csv", "norm_target_loss.png",
              "norm_target_loss.pdf", "models.pt"):
        assert (out / f).is_file()
    res = json.loads((out / "norm_target.json").read_text())
    assert {(r["n_experts"], r["tokens"]) for r in res["table"]} == {(1, "5x2"), (2, "5x2")}
    assert all(len(r["per_seed"]) == 2 for r in res["table"])
    assert res["constant_mse"] == pytest.approx(constant_predictor_mse(10, 5.0))
    # the CLI ran with its default 2 joblib workers; one process must give the same numbers
    serial = run_norm_target(tokens=("5x2",), experts=(1, 2), steps=30, seeds=2, eval_size=500, n_jobs=1)
    assert [r["per_seed"] for r in norm_target_table(serial)] == [r["per_seed"] for r in res["table"]]


@pytest.mark.slow
def test_subsets_digits_tiny_run(tmp_path, capsys):
    out = tmp_path / "sub"
    rc, cap = _run(["subsets", "--dataset", "digits", "--experts", "4", "--epochs", "2", "--model-seeds", "1",
                    "--random-seeds", "3", "--out", str(out)], capsys)
    assert rc == 0, cap.err
    res = json.loads((out / "subsets.json").read_text())
    row = res["rows"][0]
    assert row["n_experts"] == 4 and row["k"] == 1 and len(row["random_per_seed"]) == 3
    assert row["oracle"] >= row["alg1"] - 1e-12  # the label-aware oracle can only do better
    assert row["evals_saved"] == pytest.approx(0.75)


def _write_idx(path, arr, code):
    header = struct.pack(">BBBB", 0, 0, code, arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.tobytes())


def test_idx_reader_and_fashion_loader(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("t10k", 3)):
        _write_idx(tmp_path / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), 0x08)
        _write_idx(tmp_path / f"{split}-labels-idx1-ubyte.gz", rng.integers(0, 10, n, dtype=np.uint8), 0x08)
    imgs = read_idx(tmp_path / "train-images-idx3-ubyte.gz")
    assert imgs.shape == (6, 28, 28) and imgs.dtype == np.uint8
    Xtr, ytr, Xte, yte = load_image_tokens("fashion-mnist", patch=14, data_path=tmp_path)
    assert Xtr.shape == (6, 4, 196) and Xte.shape == (3, 4, 196) and float(Xtr.max()) <= 1.0
    assert Xtr[0, 0, :14].mul(255).round().long().tolist() == imgs[0, 0, :14].tolist()
    (tmp_path / "bad.gz").write_bytes(gzip.compress(b"\x01\x02\x03\x04"))
    with pytest.raises(ValueError, match="IDX"):
        read_idx(tmp_path / "bad.gz")


@pytest.mark.slow
def test_module_entry_point_reports_one_line():
    p = subprocess.run([sys.executable, "-m", "moestat", "softmoe", "norm-target", "--tokens", "3x3"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_internal_error_during_the_work_exits_1(tmp_path, capsys, monkeypatch):
    import moestat.cli.cmd_softmoe as cmd

    def boom(*args, **kwargs):
        raise ValueError("a bug in the middle of the work")  # a ValueError too: still not bad input

    monkeypatch.setattr(cmd, "run_subsets", boom)
    rc = run_main(main, ["subsets", "--dataset", "digits", "--experts", "4", "--out", str(tmp_path / "o")],
                  prog="moestat softmoe")
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" in err and "internal error" in err


def test_no_subset_to_evaluate_is_a_usage_error_before_any_work(tmp_path, capsys):
    out = tmp_path / "o"
    rc = run_main(main, ["subsets", "--dataset", "digits", "--experts", "3", "--k-fracs", "2", "--out", str(out)],
                  prog="moestat softmoe")
    err = capsys.readouterr().err
    assert rc == 2 and "no (n, k) pair" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_random_state_is_an_alias_of_seed():
    from moestat.cli.cmd_softmoe import build_parser

    p = build_parser()
    assert p.parse_args(["norm-target", "--random-state", "7"]).seed == 7
    assert p.parse_args(["subsets", "--seed", "7"]).seed == 7

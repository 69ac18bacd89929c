"""Replaying a recorded fit (:mod:`moestat.rates.replay`, ``moestat rates --replay``).

A replay must reproduce the recorded row of a fresh record (objective and losses within
:data:`~moestat.rates.replay.REPLAY_RTOL`), must be able to say "not reproduced" (a changed number is
found), must list a likelihood fit's starts with the selected one the best, and the door must refuse
bad input in one line, exit 2, writing nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from moestat.cli.cmd_rates import main as rates_main
from moestat.cli.common import run_main
from moestat.rates.config import RatesConfig
from moestat.rates.replay import COMPARED, REPLAY_RTOL, ReplayError, compare_row, replay_unit
from moestat.rates.sweep import run_sweep_rows

#: Three sizes (40, 80, 160), two replicates: a record fitted in about a second.
TINY = dict(d=2, n_min=40, n_max=160, n_points=3, reps=2, max_iter=5, n_boot=100, quiet=True, n_jobs=1)
#: The same with the Gaussian MoE's maximum likelihood from three starts per replicate.
TINY_MLE = dict(family="gaussian-moe", estimator="mle", starts=3, n_min=200, n_max=400, n_points=3, reps=2,
                n_boot=100, quiet=True, n_jobs=1)


def _record(folder: Path, settings: dict) -> Path:
    folder.mkdir()
    run_sweep_rows(RatesConfig.from_dict(settings).validate(), folder, progress=False)
    return folder


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> Path:
    return _record(tmp_path_factory.mktemp("replay") / "tiny", TINY)


def _row(run: Path, n: int, replicate: int) -> pd.Series:
    rows = pd.read_csv(run / "results.csv")
    return rows[(rows["n"] == n) & (rows["replicate"] == replicate)].iloc[0]


def test_a_replay_reproduces_the_recorded_objective_and_losses(record):
    report = replay_unit(record, 80, 1)
    row = _row(record, 80, 1)
    assert report["reproduced"] and report["mismatched"] == [] and report["rtol"] == REPLAY_RTOL
    for col in COMPARED:  # within the stated tolerance, read independently of the replay's own reading
        got, want = report["replayed"][col], float(row[col])
        assert (np.isnan(got) and np.isnan(want)) or abs(got - want) <= REPLAY_RTOL * max(abs(got), abs(want)), col
    assert report["replayed"]["n_iter"] == int(row["n_iter"]) and report["replayed"]["status"] == row["status"]
    assert [s["selected"] for s in report["starts"]] == [True]  # one start per replicate for least squares
    assert report["starts"][0]["objective"] == report["replayed"]["objective"]


def test_a_changed_recorded_number_is_not_reproduced(record):
    """The check can fail: a recorded row whose objective, or one loss, is moved by 1e-6 relative
    (1000 tolerances) is reported as not reproduced, naming the column."""
    report = replay_unit(record, 160, 0)
    assert report["reproduced"]
    for col in ("objective", "voronoi"):
        tampered = dict(report["recorded"], **{col: report["recorded"][col] * (1 + 1e-6)})
        verdict = compare_row(report["replayed"], tampered)
        assert not verdict["reproduced"] and verdict["mismatched"] == [col]
        assert verdict["max_rel_diff"] == pytest.approx(1e-6, rel=1e-3)
    verdict = compare_row(report["replayed"], dict(report["recorded"], n_iter=report["recorded"]["n_iter"] + 1))
    assert not verdict["reproduced"] and verdict["mismatched"] == ["n_iter"]


def test_a_likelihood_fit_lists_its_starts_with_the_best_selected(tmp_path):
    run = _record(tmp_path / "mle", TINY_MLE)
    report = replay_unit(run, 283, 1)
    assert report["reproduced"], report["mismatched"]
    starts = report["starts"]
    assert len(starts) == 3 and sum(s["selected"] for s in starts) == 1
    best = min(s["objective"] for s in starts)  # -loglik / n: the selected start has the largest likelihood
    assert next(s for s in starts if s["selected"])["objective"] == best


def test_replay_unit_refuses_what_it_cannot_replay(record, tmp_path):
    with pytest.raises(ReplayError, match="no such run folder"):
        replay_unit(tmp_path / "nowhere", 80, 1)
    with pytest.raises(ReplayError, match="no provenance.json"):
        replay_unit(tmp_path, 80, 1)
    with pytest.raises(ReplayError, match="n = 81, replicate 1"):
        replay_unit(record, 81, 1)


def _door(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = run_main(rates_main, argv, prog="moestat rates")
    except SystemExit as exc:  # the parser's one-line error (a bad option value)
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_door_prints_the_starts_and_writes_the_report(record, tmp_path, capsys):
    out = tmp_path / "replay.json"
    rc, printed, err = _door(["--replay", str(record), "--n", "40", "--replicate", "0", "--out", str(out)], capsys)
    assert rc == 0, err
    assert "reproduced: objective and" in printed and "NOT" not in printed
    report = json.loads(out.read_text())  # standard JSON (NaN written as null)
    assert report["reproduced"] is True and report["n"] == 40 and report["replicate"] == 0


def _other_version(record: Path, tmp_path: Path) -> Path:
    """A copy of the record whose provenance names a configuration key this version does not know."""
    other = tmp_path / "other"
    other.mkdir()
    for f in record.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    prov = json.loads((record / "provenance.json").read_text())
    prov["version"], prov["config"]["gate_temperature"] = "9.9.0", 2.0
    (other / "provenance.json").write_text(json.dumps(prov))
    return other


def _edited(record: Path, tmp_path: Path) -> Path:
    """A copy of the record with one recorded objective changed (its row's crc32 left as it was)."""
    edited = tmp_path / "edited"
    edited.mkdir()
    for f in record.iterdir():
        (edited / f.name).write_bytes(f.read_bytes())
    lines = (record / "results.csv").read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[1].rstrip("\n").split(",")
    i = header.index("objective")
    cells[i] = repr(float(cells[i]) * 2)
    lines[1] = ",".join(cells) + "\n"
    (edited / "results.csv").write_text("".join(lines))
    return edited


@pytest.mark.parametrize("case,message", [
    ("missing", "no such run folder"),
    ("no_provenance", "no provenance.json"),
    ("bad_n", "no recorded fit at n = 81"),
    ("bad_replicate", "replicate 9"),
    ("other_version", "recorded by moestat 9.9.0"),
    ("edited", "crc32"),
    ("other_option", "not --reps"),
    ("no_replicate", "--replay needs --replicate"),
    ("not_json", "name a FILE.json"),
    ("inside_record", "inside the record"),
])
def test_the_door_refuses_bad_input_in_one_line(record, tmp_path, capsys, case, message):
    run, n, rep, extra = str(record), "80", "1", []
    if case == "missing":
        run = str(tmp_path / "nowhere")
    elif case == "no_provenance":
        (tmp_path / "empty").mkdir()
        run = str(tmp_path / "empty")
    elif case == "bad_n":
        n = "81"
    elif case == "bad_replicate":
        rep = "9"
    elif case == "other_version":
        run = str(_other_version(record, tmp_path))
    elif case == "edited":
        run = str(_edited(record, tmp_path))
    elif case == "other_option":
        extra = ["--reps", "3"]
    out = tmp_path / "out" / "replay.json"
    out.parent.mkdir()
    if case == "not_json":
        out = tmp_path / "out" / "replay.txt"
    elif case == "inside_record":
        out = record / "replay.json"
    argv = ["--replay", run, "--n", n] + ([] if case == "no_replicate" else ["--replicate", rep]) + extra
    before = sorted(p.name for p in record.iterdir())
    rc, printed, err = _door(argv + ["--out", str(out)], capsys)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and printed == ""
    assert sorted(p.name for p in record.iterdir()) == before  # nothing written into the record either

"""The doors of growing a record: ``moestat rates --grow-from RECORD`` and ``moestat reproduce KEY
--grow-from RECORD`` (:mod:`moestat.rates.grow`, :mod:`moestat.rates.catalogue_grow`).

A grown run must hold the rows of the grown design run afresh (the streams are keyed by
``(seed, n, replicate)``), keep the record's rows as they were, and write its summary as
``--resume`` does; anything that is not a growth of the record is one line, exit 2, nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from moestat.cli.cmd_rates import main as rates_main
from moestat.cli.cmd_reproduce import main as reproduce_main
from moestat.cli.common import run_main
from moestat.rates.config import RatesConfig
from moestat.rates.sweep import run_sweep_rows

ROOT = Path(__file__).resolve().parents[2]
#: Three sizes (40, 80, 160), two replicates: a record fitted in about a second.
TINY = dict(d=2, n_min=40, n_max=160, n_points=3, reps=2, chunk=2, max_iter=5, n_boot=100, quiet=True, n_jobs=1)
#: Numbers that depend on the machine's clock or the file's bytes, not on the fit.
VOLATILE = ("time", "crc32")


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("record") / "small"
    src.mkdir()
    run_sweep_rows(RatesConfig.from_dict(TINY).validate(), src, progress=False)
    return src


def _rows(folder: Path) -> pd.DataFrame:
    df = pd.read_csv(folder / "results.csv").sort_values(["n", "router", "replicate"]).reset_index(drop=True)
    return df[[c for c in df.columns if c not in VOLATILE]]


def _door(main, prog: str, argv: list[str], capsys) -> tuple[int, str]:
    try:
        rc = run_main(main, argv, prog=prog)
    except SystemExit as exc:  # the parser's one-line error (a bad option value)
        rc = exc.code
    return rc, capsys.readouterr().err


def test_a_grown_run_equals_the_grown_design_run_directly(record, tmp_path, capsys):
    grown, fresh = tmp_path / "grown", tmp_path / "fresh"
    rc, err = _door(rates_main, "moestat rates", ["--grow-from", str(record), "--n-max", "320", "--n-points", "4",
                                                  "--reps", "4", "--quiet", "--figure-formats", "none",
                                                  "--out", str(grown)], capsys)
    assert rc == 0, err
    big = RatesConfig.from_dict({**TINY, "n_max": 320, "n_points": 4, "reps": 4}).validate()
    fresh.mkdir()
    run_sweep_rows(big, fresh, progress=False)
    got, want, old = _rows(grown), _rows(fresh), _rows(record)
    assert len(got) == len(big.ns) * big.reps and sorted(got["n"].unique()) == big.ns
    pd.testing.assert_frame_equal(got, want)
    # the record's rows are copied, not refitted: the same bytes' numbers, time included
    kept = pd.read_csv(grown / "results.csv").merge(pd.read_csv(record / "results.csv"), on=["n", "router", "replicate"],
                                                  suffixes=("", "_old"))
    assert len(kept) == len(old) and (kept["time"] == kept["time_old"]).all()
    summary = json.loads((grown / "summary.json").read_text())
    prov = json.loads((grown / "provenance.json").read_text())
    assert RatesConfig.from_dict(prov["config"]).result_fields() == big.result_fields()
    assert RatesConfig.from_dict(summary["config"]).ns == big.ns


@pytest.mark.parametrize("argv,word", [
    (["--router", "cosine"], "not --router"),
    (["--resume"], "not --resume"),
    (["--n-min", "30"], "are not sizes of the new grid"),
    (["--n-points", "2"], "n_points"),
], ids=["another scenario", "resume", "sizes off the grid", "too few sizes"])
def test_the_rates_door_refuses_what_is_not_a_growth(record, tmp_path, argv, word, capsys):
    out = tmp_path / "grown"
    rc, err = _door(rates_main, "moestat rates", ["--grow-from", str(record), *argv, "--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1 and word in err and "Traceback" not in err, err
    assert not out.exists()


def test_the_rates_door_refuses_a_missing_record_and_an_existing_out(record, tmp_path, capsys):
    rc, err = _door(rates_main, "moestat rates", ["--grow-from", str(tmp_path / "absent"), "--out",
                                                  str(tmp_path / "o")], capsys)
    assert rc == 2 and "absent: no such folder" in err and not (tmp_path / "o").exists(), err
    (tmp_path / "o").mkdir()
    rc, err = _door(rates_main, "moestat rates", ["--grow-from", str(record), "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "exists; choose a new folder" in err, err
    assert list((tmp_path / "o").iterdir()) == []


@pytest.mark.parametrize("argv,word", [
    (["gmoe-over4", "--grow-from", "{tmp}/absent"], "absent: no such folder"),
    (["no-such-entry", "--grow-from", "records/catalogue/gmoe-over4"], "no-such-entry"),
    (["gmoe-over3", "--grow-from", "records/catalogue/gmoe-over4"], "k_fit"),
    (["gmoe-over4", "--grow-from", "records/catalogue/gmoe-over4", "--resume"], "--resume"),
    (["gmoe-over4", "--grow-from", "records/catalogue/gmoe-over4", "--quick"], "--quick"),
    (["gmoe-over4", "--grow-from", "records/catalogue/gmoe-over4", "--n-jobs", "two"], "--n-jobs"),
], ids=["absent record", "unknown entry", "another entry's record", "with resume", "with quick", "bad n-jobs"])
def test_the_reproduce_door_refuses_what_is_not_a_growth(argv, word, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the records' paths are the repository's
    out = tmp_path / "out"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    rc, err = _door(reproduce_main, "moestat reproduce", [*argv, "--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1 and word in err and "Traceback" not in err, err
    assert not out.exists()


@pytest.mark.slow
def test_the_reproduce_door_grows_an_entrys_record_and_writes_its_report(tmp_path, capsys, monkeypatch):
    # gmoe-over4's record is already at the entry's design: the door copies it, fits nothing (no size is
    # missing) and writes the report as --resume does, the rows unchanged (about 6 s: the analysis only)
    monkeypatch.chdir(ROOT)
    out = tmp_path / "out"
    record = Path("records/catalogue/gmoe-over4")
    rc, err = _door(reproduce_main, "moestat reproduce", ["gmoe-over4", "--grow-from", str(record), "--quiet",
                                                          "--out", str(out)], capsys)
    assert rc == 0, err
    report = json.loads((out / "catalogue.json").read_text())
    assert report["key"] == "gmoe-over4"
    assert (out / "gaussian-moe" / "results.csv").read_bytes() == (record / "gaussian-moe" / "results.csv").read_bytes()

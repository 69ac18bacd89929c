"""A recorded run written before the truth columns (records/archive/catalogue/multinomial-moe/old_truth): read, redrawn and resumed unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from moestat.rates.store import (CHECK_COLUMN, FILE_COLUMNS, LEGACY_COLUMNS, TRUTH_COLUMNS, ResultStore, audit_results,
                                 read_results)

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "records" / "archive" / "catalogue" / "multinomial-moe" / "old_truth" / "nonvanishing"


def test_a_recorded_results_file_without_the_truth_columns_reads_with_nan_and_its_digest_is_unchanged():
    path = RECORDED / "results.csv"
    assert path.read_text().splitlines()[0].split(",") == [*LEGACY_COLUMNS, CHECK_COLUMN]
    df = read_results(path)
    assert len(df) > 0 and df["truth_gap"].isna().all() and df["fit_objective"].isna().all()
    assert (df["truth_check"] == "unknown").all()
    _, audit = audit_results(path)
    assert audit.n_bad == 0 and audit.checked
    summary = json.loads((RECORDED / "summary.json").read_text())
    assert audit.digest == summary["rows"]["sha256"]  # moestat plot still accepts its summary


def test_moestat_plot_redraws_a_recorded_folder_written_before_the_truth_columns(tmp_path, monkeypatch):
    from moestat.cli import cmd_plot
    from moestat.cli.common import run_main

    run = Path(shutil.copytree(RECORDED, tmp_path / "run"))
    assert run_main(cmd_plot.main, [str(run)], prog="moestat plot") == 0
    assert (run / "results.csv").read_bytes() == (RECORDED / "results.csv").read_bytes()  # read, not rewritten


def test_resuming_into_an_old_file_upgrades_its_header_and_keeps_its_rows(tmp_path):
    path = tmp_path / "results.csv"
    shutil.copy(RECORDED / "results.csv", path)
    before = read_results(path)
    assert ResultStore(path).create() is False  # it had checksums: no note
    assert path.read_text().splitlines()[0].split(",") == list(FILE_COLUMNS)
    after = read_results(path)
    cols = [c for c in LEGACY_COLUMNS]
    assert after[cols].equals(before[cols])
    assert after["truth_check"].eq("unknown").all()
    _, audit = audit_results(path)
    assert audit.n_bad == 0
    assert set(TRUTH_COLUMNS) <= set(after.columns)

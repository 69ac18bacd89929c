"""The result store under faults (issue 28): short writes and a full disk, edited rows, a summary
that does not match its rows, a truncated folder plotted, a folder written before row checksums."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest

import moestat.io as mio
from moestat.cli import cmd_plot, cmd_rates
from moestat.cli.common import run_main
from moestat.rates.store import CHECK_COLUMN, FILE_COLUMNS, RESULT_COLUMNS, ResultStore, read_results, row_check

TINY = ["--d", "2", "--n-min", "40", "--n-max", "90", "--n-points", "3", "--reps", "3", "--max-iter", "5",
        "--n-boot", "100", "--quiet"]


def _rates(argv, capsys):
    rc = run_main(cmd_rates.main, list(argv), prog="moestat rates")
    return rc, capsys.readouterr().err


def _plot(argv, capsys):
    rc = run_main(cmd_plot.main, list(argv), prog="moestat plot")
    return rc, capsys.readouterr().err


def _frame(df):
    cols = [c for c in RESULT_COLUMNS if c != "time"]
    return df[cols].sort_values(["router", "n", "replicate"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("faults") / "run"
    assert run_main(cmd_rates.main, [*TINY, "--router", "perturbed,cosine", "--out", str(out)], prog="moestat rates") == 0
    return out


@pytest.fixture
def run(finished, tmp_path):
    return Path(shutil.copytree(finished, tmp_path / "run"))


def _snapshot(path: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


# -------------------------------------------------------------------------------------------------
# appends: whole or raise
# -------------------------------------------------------------------------------------------------
def test_partial_writes_are_continued_until_the_line_is_whole(tmp_path, monkeypatch):
    real = mio._write
    calls = []

    def dribble(fd, data):  # the kernel may accept fewer bytes than asked
        calls.append(len(data))
        return real(fd, data[:7])

    monkeypatch.setattr(mio, "_write", dribble)
    mio.append_line(tmp_path / "f.txt", "a" * 40)
    assert (tmp_path / "f.txt").read_text() == "a" * 40 + "\n" and len(calls) == 6


@pytest.mark.parametrize("how", ["short", "enospc"])
def test_a_row_that_does_not_fit_raises_disk_full_and_leaves_no_part_of_it(tmp_path, monkeypatch, how):
    from moestat.faults import DiskFull

    path = tmp_path / "f.txt"
    mio.append_line(path, "first row")
    real = mio._write

    def full(fd, data):  # the measured fault: 95 of 342 bytes written, then no space
        if how == "short":
            return real(fd, data[:5]) if len(data) > 20 else 0
        real(fd, data[:5])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mio, "_write", full)
    with pytest.raises(DiskFull, match="disk full: free space and run with --resume"):
        mio.append_line(path, "x" * 100)
    assert path.read_text() == "first row\n"  # the 5 bytes that landed were cut again


def test_a_full_disk_stops_the_sweep_in_one_line_and_resume_completes_it(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    args = [*TINY, "--router", "perturbed,cosine", "--chunk", "1"]
    assert _rates([*args, "--out", str(tmp_path / "ref")], capsys)[0] == 0
    real = mio._write
    written = []

    def fills_up(fd, data):
        if len(written) >= 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(len(data))
        return real(fd, data)

    monkeypatch.setattr(mio, "_write", fills_up)
    rc, err = _rates([*args, "--out", str(out)], capsys)
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("moestat rates: disk full") and "free space and run with --resume" in err
    assert "finished results are kept" in err and "internal error" not in err
    kept = read_results(out / "results.csv")
    assert len(kept) == 4 and not (out / "summary.json").exists()
    monkeypatch.setattr(mio, "_write", real)  # space freed
    rc, err = _rates([*args, "--out", str(out), "--resume"], capsys)
    assert rc == 0
    assert _frame(read_results(out / "results.csv")).equals(_frame(read_results(tmp_path / "ref" / "results.csv")))


# -------------------------------------------------------------------------------------------------
# row checksums and the digest of summary.json
# -------------------------------------------------------------------------------------------------
def _edit(run: Path, line: int, column: str, change) -> None:
    path = run / "results.csv"
    lines = path.read_text().splitlines()
    fields = lines[line - 1].split(",")
    i = FILE_COLUMNS.index(column)
    fields[i] = change(fields[i])
    lines[line - 1] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("column,change", [("voronoi", lambda v: repr(float(v) * 10)),
                                           ("converged", lambda v: "0" if v == "1" else "1")])
def test_an_edited_row_is_refused_by_plot_and_resume_naming_the_line(run, capsys, column, change):
    _edit(run, 5, column, change)
    before = _snapshot(run)
    rc, err = _plot([str(run)], capsys)
    assert rc == 2 and err.count("\n") == 1 and "edited after they were written (line 5" in err and str(run / "results.csv") in err
    rc, err = _rates([*TINY, "--router", "perturbed,cosine", "--out", str(run), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "line 5" in err and "edited" in err
    assert _snapshot(run) == before  # summary.json not rewritten


def test_a_summary_not_computed_from_the_rows_is_refused_by_plot(run, capsys):
    # a forger who also recomputes the row checksum: the digest in summary.json still differs
    path = run / "results.csv"
    lines = path.read_text().splitlines()
    rec = lines[3].split(",")[:-1]
    rec[RESULT_COLUMNS.index("voronoi")] = repr(float(rec[RESULT_COLUMNS.index("voronoi")]) * 10)
    lines[3] = ",".join([*rec, row_check(rec)])
    path.write_text("\n".join(lines) + "\n")
    rc, err = _plot([str(run)], capsys)
    assert rc == 2 and err.count("\n") == 1 and "summary.json was not computed from the rows" in err


def test_a_truncated_folder_is_plotted_with_its_own_fits_and_says_so(run, capsys):
    from moestat.rates.figures import prepare_redraw

    summary = json.loads((run / "summary.json").read_text())
    assert summary["rows"]["count"] == 18 and len(summary["rows"]["sha256"]) == 64
    path = run / "results.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:12]) + "\n")  # 11 of 18 rows
    plan = prepare_redraw(run)
    assert plan.fits is None  # never the fits of summary.json, which were computed from 18 rows
    rc, err = _plot([str(run)], capsys)
    assert rc == 0 and "holds 11 of 18 fits (the run is incomplete" in err and "not the fits of summary.json" in err
    assert (run / "convergence_replot.png").exists()


def test_the_caption_counts_the_replicates_each_point_has(run):
    from moestat.rates.figures import draw_convergence

    df = read_results(run / "results.csv")
    df = df.drop(df.index[0])  # one point now has 2 of 3 replicates
    fig = draw_convergence(df, [], losses=["voronoi"])
    text = " ".join(t.get_text() for t in fig.texts)
    assert "mean over 2 to 3 replicates" in text


def test_a_folder_written_before_row_checksums_is_plotted_and_resumed_with_a_note(run, capsys):
    path = run / "results.csv"
    lines = path.read_text().splitlines()
    assert lines[0].endswith("," + CHECK_COLUMN)
    path.write_text("\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n")  # the old format
    rc, err = _plot([str(run)], capsys)
    assert rc == 0 and "no row checksums" in err
    rc, err = _rates([*TINY, "--router", "perturbed,cosine", "--out", str(run), "--resume"], capsys)
    assert rc == 0 and "no row checksums" in err
    assert path.read_text().splitlines()[0].endswith("," + CHECK_COLUMN)  # upgraded
    assert ResultStore(path).read().shape[0] == 18


# -------------------------------------------------------------------------------------------------
# the scheduler is reached while validating
# -------------------------------------------------------------------------------------------------
def test_an_unreachable_scheduler_is_refused_before_anything_is_written(tmp_path, capsys):
    pytest.importorskip("distributed")
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    rc, err = _rates([*TINY, "--backend", "dask", "--scheduler", f"tcp://127.0.0.1:{port}", "--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1 and f"cannot reach the dask scheduler at tcp://127.0.0.1:{port}" in err
    assert not out.exists()


def test_a_scheduler_file_that_is_missing_is_refused(tmp_path, capsys):
    rc, err = _rates([*TINY, "--scheduler-file", str(tmp_path / "nope.json"), "--out", str(tmp_path / "out")], capsys)
    assert rc == 2 and "--scheduler-file" in err and "does not exist" in err
    assert not (tmp_path / "out").exists()

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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_truncated_folder_is_plotted_with_its_own_fits_and_says_so(run, capsys):
    from moestat.rates.redraw import prepare_redraw

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


@pytest.mark.slow
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
@pytest.mark.slow
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


# -------------------------------------------------------------------------------------------------
# issue 35: what held in plot but not in resume, faults under a library's own error, quieter notes
# -------------------------------------------------------------------------------------------------
def _forge(run: Path, index: int = 3) -> None:
    """Change a loss of one row and recompute its crc32: the row check passes, the digest does not."""
    path = run / "results.csv"
    lines = path.read_text().splitlines()
    rec = lines[index].split(",")[:-1]
    rec[RESULT_COLUMNS.index("voronoi")] = repr(float(rec[RESULT_COLUMNS.index("voronoi")]) * 10)
    lines[index] = ",".join([*rec, row_check(rec)])
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_a_row_forged_with_its_checksum_is_refused_by_resume_as_by_plot(run, capsys):
    _forge(run)
    before = _snapshot(run)
    rc, plot_err = _plot([str(run)], capsys)
    assert rc == 2 and plot_err.count("\n") == 1
    rc, err = _rates([*TINY, "--router", "perturbed,cosine", "--out", str(run), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    summary = json.loads((run / "summary.json").read_text())
    for said in (plot_err, err):  # the same words: the digest then and now, and how to get out
        assert "summary.json was not computed from the rows" in said and summary["rows"]["sha256"][:12] in said
        assert "restore results.csv, or delete summary.json to accept the rows as they are now" in said
    assert _snapshot(run) == before  # summary.json not rebuilt from the forged row
    (run / "summary.json").unlink()  # the way out the message names: the rows are accepted as they are
    rc, err = _rates([*TINY, "--router", "perturbed,cosine", "--out", str(run), "--resume"], capsys)
    assert rc == 0, err


@pytest.mark.slow
def test_rows_deleted_after_the_summary_are_recomputed_by_resume(run, capsys):
    path = run / "results.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-2]) + "\n")  # fewer rows than the summary: not refused, recomputed
    rc, err = _rates([*TINY, "--router", "perturbed,cosine", "--out", str(run), "--resume"], capsys)
    assert rc == 0, err
    assert read_results(path).shape[0] == 18


def test_a_full_disk_while_a_figure_is_written_is_one_line_not_an_internal_error(run, capsys, monkeypatch):
    # matplotlib's PDF backend on a full disk raises AttributeError ('Stream' object has no attribute
    # 'pos') while handling the OSError(ENOSPC): the fault is in the exception's context
    import matplotlib.figure

    def full(self, fname, *args, **kwargs):
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(fname))
        except OSError:
            raise AttributeError("'Stream' object has no attribute 'pos'")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    before = _snapshot(run)
    from moestat.cli.common import KEEPS

    rc = run_main(cmd_plot.main, [str(run)], prog="moestat plot", on_interrupt=getattr(cmd_plot, "ON_INTERRUPT", KEEPS))
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and "internal error" not in err, err
    assert err == (f"moestat plot: disk full writing {run / 'convergence_replot.pdf'}: free space and run it again; "
                   "nothing was kept (this door writes its results when it finishes)\n")  # plot has no --resume
    assert _snapshot(run) == before and not [p for p in run.iterdir() if p.name.startswith(".convergence")]


@pytest.mark.slow
def test_a_torn_last_line_is_cut_with_one_line_on_stderr(run, capsys):
    path = run / "results.csv"
    with open(path, "a") as fh:
        fh.write("perturbed,exact,90,2,0,ls")  # a kill during an append
    rc, err = _rates([*TINY, "--router", "perturbed,cosine", "--out", str(run), "--resume"], capsys)
    # one line for the torn line; the run was complete, so the resume then says it only re-analyses
    lines = err.splitlines()
    assert rc == 0 and len(lines) == 2, err
    assert "cut a partial last line" in lines[0] and str(path) in lines[0], err
    assert lines[1] == "moestat rates: nothing to fit: all 18 rows present; re-analysing", err
    assert path.read_text().endswith("\n") and read_results(path).shape[0] == 18


@pytest.mark.slow
def test_an_empty_results_file_is_refused_with_the_way_out(run, capsys):
    (run / "results.csv").write_text("")
    for rc, err in (_rates([*TINY, "--router", "perturbed,cosine", "--out", str(run), "--resume"], capsys), _plot([str(run)], capsys)):
        assert rc == 2 and err.count("\n") == 1 and "is empty" in err and "delete it and run moestat rates --resume" in err, err
    (run / "results.csv").unlink()
    rc, err = _rates([*TINY, "--router", "perturbed,cosine", "--out", str(run), "--resume"], capsys)
    assert rc == 0, err
    assert read_results(run / "results.csv").shape[0] == 18


def test_plot_says_a_killed_writer_stopped_rather_than_may_still_be_running(run, capsys):
    import os
    import socket
    import subprocess
    import sys

    from moestat.folder_lock import LOCK_NAME

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    # what kill -9 leaves: the lock file naming the dead writer (its flock went with it), some rows
    (run / LOCK_NAME).write_text(json.dumps({"host": socket.gethostname(), "pid": pid, "door": "rates", "started": "x"}) + "\n")
    path = run / "results.csv"
    path.write_text("\n".join(path.read_text().splitlines()[:12]) + "\n")
    rc, err = _plot([str(run)], capsys)
    assert rc == 0 and f"moestat rates pid {pid} on {socket.gethostname()} stopped without finishing" in err, err
    assert "may still be running" not in err and os.path.exists(run / LOCK_NAME)


def test_plot_never_replaces_a_figure_path_that_is_a_link_even_with_overwrite(run, capsys, tmp_path):
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(b"not a figure of this run")
    (run / "convergence_replot.png").symlink_to(outside)
    for argv in ([str(run)], [str(run), "--name", "convergence_replot", "--overwrite"]):
        rc, err = _plot(argv, capsys)
        assert rc == 2 and err.count("\n") == 1 and "convergence_replot.png exists and is a symbolic link" in err, err
    assert outside.read_bytes() == b"not a figure of this run" and (run / "convergence_replot.png").is_symlink()
    assert not (run / "convergence_replot.pdf").exists()

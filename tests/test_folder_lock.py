"""One run per output folder, and a door's --resume only into its own folder (issues 28 and 24).

Each fault is reproduced on localhost with real processes: a live holder, a holder killed with
SIGKILL (stale lock), two ``--resume`` runs started at once, SIGTERM, and ``kill -9`` of a main
process with loky workers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moestat.cli.main import main as moestat
from moestat.folder_lock import DOOR_NAME, LOCK_NAME, FolderBusy, holder, holder_alive, lock_out, read_door, unlock_out

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TINY = ["--d", "2", "--n-min", "40", "--n-max", "90", "--n-points", "3", "--reps", "3", "--max-iter", "5",
        "--n-boot", "100", "--quiet"]
REAL = ["realdata", "--dataset", "digits", "--gate", "dense", "--experts", "2", "--k", "1", "--epochs", "1", "--seeds", "1",
        "--expert-hidden", "4", "--max-train", "200", "--batch-size", "64", "--device", "cpu", "--no-progress", "--quiet"]


def _run(argv, capsys):
    try:
        rc = moestat(list(argv))
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr().err


def _snapshot(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _holder_process(out: Path) -> subprocess.Popen:
    """A separate process that takes the lock of ``out`` and sleeps."""
    code = ("import sys, time; from moestat.folder_lock import lock_out; lock_out(sys.argv[1], 'rates'); "
            "print('locked', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.fixture(scope="module")
def rates_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lock") / "run"
    assert moestat(["rates", *TINY, "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_a_finished_run_leaves_its_door_marker_and_no_lock(rates_run):
    assert not (rates_run / LOCK_NAME).exists()
    assert json.loads((rates_run / DOOR_NAME).read_text())["door"] == "rates"
    assert read_door(rates_run) == "rates"


@pytest.mark.slow
def test_a_folder_held_by_a_live_run_is_refused_naming_the_holder(rates_run, tmp_path, capsys):
    import shutil

    out = Path(shutil.copytree(rates_run, tmp_path / "run"))
    proc = _holder_process(out)
    try:
        before = _snapshot(out)
        rc, err = _run(["rates", *TINY, "--out", str(out), "--resume"], capsys)
        assert rc == 2 and err.count("\n") == 1
        assert f"pid {proc.pid} on {socket.gethostname()}" in err and "in use by moestat rates" in err
        assert _snapshot(out) == before  # nothing written, the holder's lock untouched
        rc, err = _run(["plot", str(out)], capsys)  # reading is allowed while a run holds the folder
        assert rc == 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_a_lock_left_by_a_killed_run_is_stale_and_taken_over(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = _holder_process(out)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert holder(out)["pid"] == proc.pid  # the file is still there, naming a dead process
    assert lock_out(out, "rates") is True  # stale: taken over
    try:
        assert holder(out)["pid"] == os.getpid()
    finally:
        unlock_out(out)
    assert not (out / LOCK_NAME).exists()


@pytest.mark.slow
def test_the_lock_is_reentrant_in_one_process_and_exclusive_between_processes(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    lock_out(out, "rates")
    lock_out(out, "rates")
    unlock_out(out)
    assert (out / LOCK_NAME).exists()  # still held once
    code = "import sys; from moestat.folder_lock import lock_out; lock_out(sys.argv[1], 'rates')"
    res = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert res.returncode == 1 and "FolderBusy" in res.stderr and f"pid {os.getpid()}" in res.stderr
    unlock_out(out)
    assert not (out / LOCK_NAME).exists()
    with pytest.raises(FolderBusy):
        proc = _holder_process(out)
        try:
            lock_out(out, "rates")
        finally:
            proc.kill()
            proc.wait()


def test_a_refusal_in_the_holders_first_instant_still_names_it(tmp_path):
    # the window CI met: the holder has the flock but has not yet written its record
    from moestat.folder_lock import FolderBusy, lock_out

    out = tmp_path / "out"
    out.mkdir()
    code = ("import fcntl, json, os, sys, time; p = os.path.join(sys.argv[1], %r); "
            "fd = os.open(p, os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print('flocked', flush=True); "
            "time.sleep(0.3); os.pwrite(fd, (json.dumps({'host': 'h', 'pid': os.getpid(), 'door': 'rates', "
            "'started': 'now'}) + chr(10)).encode(), 0); time.sleep(60)") % LOCK_NAME
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "flocked"
        with pytest.raises(FolderBusy, match=f"in use by moestat rates \\(pid {proc.pid} on h"):
            lock_out(out, "rates")
    finally:
        proc.kill()
        proc.wait()


def test_a_holder_that_finishes_while_a_refused_run_reads_its_record_leaves_the_folder_to_it(tmp_path):
    # the other window of two runs started at once: the holder unlinks its file and lets go
    # between the refused flock and the read of its record; the folder is free, and the
    # refused run takes it (before, it stopped with "in use by another process")
    from moestat.folder_lock import holder, lock_out, unlock_out

    out = tmp_path / "out"
    out.mkdir()
    code = ("import fcntl, os, sys, time; p = os.path.join(sys.argv[1], %r); "
            "fd = os.open(p, os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print('flocked', flush=True); "
            "time.sleep(0.3); os.unlink(p); os.close(fd)") % LOCK_NAME
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "flocked"
        assert lock_out(out, "rates") is False  # taken, and not a stale lock: the holder cleaned up
        assert holder(out)["pid"] == os.getpid()
        unlock_out(out)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_two_resumes_started_at_once_compute_each_fit_once(tmp_path):
    # the reproduction: job scripts that always pass --resume, started together
    out = tmp_path / "out"
    args = [sys.executable, "-m", "moestat.rates", *TINY, "--chunk", "1", "--out", str(out), "--resume"]
    procs = [subprocess.Popen(args, cwd=ROOT, env=ENV, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    rcs = sorted(rc for rc, _ in results)
    assert rcs in ([0, 2], [0, 0]), results
    if rcs == [0, 2]:
        err = next(e for rc, e in results if rc == 2)
        assert "in use by moestat rates" in err and err.count("\n") == 1
    from moestat.rates.store import read_results

    df = read_results(out / "results.csv")  # a duplicate would raise
    assert len(df) == 9 and json.loads((out / "summary.json").read_text())["counts"]["fits"] == 9
    assert (out / "results.csv").read_text().count("\n") == 10


# -------------------------------------------------------------------------------------------------
# a door's --resume refuses another door's folder (issue 24, item 3)
# -------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_rates_resume_into_a_realdata_folder_is_refused_and_left_untouched(tmp_path, capsys):
    out = tmp_path / "real"
    assert _run([*REAL, "--out", str(out)], capsys)[0] == 0
    before = _snapshot(out)
    rc, err = _run(["rates", *TINY, "--out", str(out), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "moestat realdata" in err and "not of moestat rates" in err
    assert _snapshot(out) == before


@pytest.mark.slow
def test_realdata_resume_into_a_rates_folder_is_refused_and_left_untouched(rates_run, capsys):
    before = _snapshot(rates_run)
    rc, err = _run([*REAL, "--out", str(rates_run), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "moestat rates, not of moestat realdata" in err
    assert _snapshot(rates_run) == before


def test_a_folder_written_before_door_markers_is_recognised_by_its_files(rates_run, tmp_path, capsys):
    import shutil

    out = Path(shutil.copytree(rates_run, tmp_path / "old"))
    (out / DOOR_NAME).unlink()
    before = _snapshot(out)
    rc, err = _run([*REAL, "--out", str(out), "--resume"], capsys)
    assert rc == 2 and "moestat rates, not of moestat realdata" in err
    assert _snapshot(out) == before


@pytest.mark.slow
def test_theory_resume_with_other_settings_is_refused_before_any_check(tmp_path, capsys):
    out = tmp_path / "theory"
    rc, _ = _run(["theory", "--only", "pde", "--quiet", "--out", str(out)], capsys)
    assert rc in (0, 1, 3) and (out / "theory_report.json").exists()
    before = _snapshot(out)
    rc, err = _run(["theory", "--only", "pde", "--quiet", "--seed", "7", "--out", str(out), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "--seed (0 there, 7 now)" in err
    assert _snapshot(out) == before  # theory_report.* untouched
    rc, _ = _run(["theory", "--only", "pde", "--quiet", "--out", str(out), "--resume"], capsys)
    assert rc in (0, 1, 3)  # the same settings resume


# -------------------------------------------------------------------------------------------------
# SIGTERM and child processes
# -------------------------------------------------------------------------------------------------
def _wait_rows(csv: Path, rows: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if csv.exists() and csv.read_text().count("\n") > rows:
            return
        time.sleep(0.05)
    raise AssertionError(f"{csv} did not reach {rows} rows")


@pytest.mark.slow
def test_sigterm_keeps_finished_fits_says_so_and_releases_the_folder(tmp_path):
    from moestat.rates.store import read_results

    out = tmp_path / "out"
    args = ["--d", "2", "--n-min", "40", "--n-max", "200", "--n-points", "4", "--reps", "4", "--chunk", "1",
            "--max-iter", "5", "--n-boot", "100", "--quiet", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "moestat.rates", *args], cwd=ROOT, env=ENV, stderr=subprocess.PIPE, text=True)
    _wait_rows(out / "results.csv", 2)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)
    err = proc.stderr.read()
    assert rc == 143 and err.strip().splitlines()[-1] == "moestat rates: terminated (SIGTERM); finished results are kept; --resume continues"
    assert "Traceback" not in err
    kept = len(read_results(out / "results.csv"))
    assert 2 <= kept < 16 and not (out / LOCK_NAME).exists()
    res = subprocess.run([sys.executable, "-m", "moestat.rates", *args, "--resume"], cwd=ROOT, env=ENV, timeout=300)
    assert res.returncode == 0 and len(read_results(out / "results.csv")) == 16


def _children(pid: int) -> list[int]:
    kids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(p.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find the workers")
def test_loky_workers_end_when_the_main_process_is_killed(tmp_path):
    out = tmp_path / "out"
    args = ["--d", "2", "--n-min", "40", "--n-max", "400", "--n-points", "5", "--reps", "6", "--chunk", "1",
            "--max-iter", "20", "--n-boot", "100", "--n-jobs", "2", "--quiet", "--out", str(out)]
    # the loky path on purpose (the forked workers have their own kill test, tests/rates/test_forked.py); the
    # workers are found by their command line, which a loky worker names, not by the folder's name
    env = {**ENV, "MOESTAT_SWEEP_FORK": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "moestat.rates", *args], cwd=ROOT, env=env)
    _wait_rows(out / "results.csv", 1)
    workers = [k for k in _children(proc.pid) if "popen_loky" in Path(f"/proc/{k}/cmdline").read_text(errors="replace")
               or "LokyProcess" in Path(f"/proc/{k}/cmdline").read_text(errors="replace")
               or "joblib" in Path(f"/proc/{k}/cmdline").read_text(errors="replace")]
    assert workers, "no loky workers found"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 30
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.2)
    assert not any(_alive(w) for w in workers), "loky workers outlived their parent"


@pytest.mark.slow
def test_theory_resume_of_a_folder_without_run_config_checks_the_recorded_command(tmp_path, capsys):
    out = tmp_path / "theory"
    assert _run(["theory", "--only", "pde", "--quiet", "--out", str(out)], capsys)[0] in (0, 1, 3)
    (out / "run_config.json").unlink()  # as written before run_config.json existed
    before = _snapshot(out)
    rc, err = _run(["theory", "--only", "pde", "--quiet", "--reps", "3", "--out", str(out), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "--reps (None there, 3 now)" in err
    assert _snapshot(out) == before


# -------------------------------------------------------------------------------------------------
# links are never followed (issue 35: a file outside --out was truncated by the lock)
# -------------------------------------------------------------------------------------------------
def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path, capsys):
    outside = tmp_path / "precious.txt"
    outside.write_text("not moestat's\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(outside)
    from moestat.io import NotARegularFile

    with pytest.raises(NotARegularFile, match="is a symbolic link"):
        lock_out(out, "rates")
    # a folder holding only such a link is not "empty": the door refuses it in one line
    rc, err = _run(["rates", *TINY, "--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1 and str(out / LOCK_NAME) in err and "symbolic link" in err, err
    assert outside.read_text() == "not moestat's\n" and (out / LOCK_NAME).is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing written beside it


def test_a_resume_into_a_folder_with_a_linked_results_file_is_refused(rates_run, tmp_path, capsys):
    import shutil

    out = Path(shutil.copytree(rates_run, tmp_path / "run"))
    outside = tmp_path / "elsewhere.csv"
    (out / "results.csv").rename(outside)
    (out / "results.csv").symlink_to(outside)
    kept = outside.read_bytes()
    rows = kept.count(b"\n")
    outside.write_bytes(b"\n".join(kept.split(b"\n")[:3]) + b"\n")  # 2 rows: a resume would append the others to it
    before = outside.read_bytes()
    rc, err = _run(["rates", *TINY, "--out", str(out), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "holds results.csv, which is a symbolic link" in err, err
    assert outside.read_bytes() == before and rows > 3


@pytest.mark.slow
def test_holder_alive_tells_a_killed_holder_from_a_live_one(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert holder_alive(out) is False  # no lock file
    proc = _holder_process(out)
    try:
        assert holder_alive(out) is True
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert holder(out)["pid"] == proc.pid and holder_alive(out) is False  # the file is left, the flock is not

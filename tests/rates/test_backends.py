"""The same sweep on a dask.distributed LocalCluster (loopback) and after a real SIGKILL."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moestat.rates.config import RatesConfig
from moestat.rates.store import RESULT_COLUMNS, read_results
from moestat.rates.sweep import run_sweep

TINY = dict(d=2, n_min=40, n_max=90, n_points=3, reps=3, max_iter=5, holdout=256, n_boot=100, quiet=True, chunk=2)
ROOT = Path(__file__).resolve().parents[2]


def _frame(df):
    cols = [c for c in RESULT_COLUMNS if c != "time"]
    return df[cols].sort_values(["router", "n", "replicate"]).reset_index(drop=True)


@pytest.mark.slow
def test_dask_local_cluster_gives_the_same_results(tmp_path):
    distributed = pytest.importorskip("distributed")
    cfg = RatesConfig.from_dict(TINY).validate()
    (tmp_path / "loky").mkdir()
    ref = run_sweep(cfg, tmp_path / "loky", progress=False)
    import dask

    with dask.config.set({"temporary-directory": str(tmp_path / "dask-tmp")}), distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
        local_directory=str(tmp_path / "dask-scratch"),  # not /tmp/dask-scratch-space: tests write only to tmp_path
    ) as cluster:
        dcfg = cfg.replace(backend="dask", scheduler=cluster.scheduler_address).validate()
        (tmp_path / "dask").mkdir()
        got = run_sweep(dcfg, tmp_path / "dask", progress=False)
    assert cluster.scheduler_address.startswith("tcp://127.0.0.1")
    assert any(tmp_path.glob("dask-*/*"))  # the cluster's scratch files went to the test's folder
    assert _frame(got).equals(_frame(ref))


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(tmp_path):
    args = ["--d", "2", "--n-min", "40", "--n-max", "200", "--n-points", "4", "--reps", "4", "--chunk", "1",
            "--max-iter", "5", "--n-boot", "100", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full = tmp_path / "full"
    subprocess.run([sys.executable, "-m", "moestat.rates", *args, "--out", str(full)], check=True, cwd=ROOT, env=env, timeout=120)
    part = tmp_path / "part"
    proc = subprocess.Popen([sys.executable, "-m", "moestat.rates", *args, "--out", str(part)], cwd=ROOT, env=env)
    csv = part / "results.csv"
    deadline = time.time() + 90
    while time.time() < deadline:  # kill as soon as some, but not all, fits are on disk
        if csv.exists() and csv.read_text().count("\n") >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    n_before = len(read_results(csv))
    assert n_before < 16
    subprocess.run([sys.executable, "-m", "moestat.rates", *args, "--out", str(part), "--resume"], check=True, cwd=ROOT, env=env, timeout=120)
    assert _frame(read_results(csv)).equals(_frame(read_results(full / "results.csv")))


def test_progress_is_written_as_lines_when_stderr_is_not_a_terminal(capsys):
    from moestat.rates.backends import Progress

    p = Progress(10, None, interval=0)  # capsys: stderr is not a terminal, as in a batch job's log
    p.update(4)
    p.update(6)
    p.close()
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("progress:")]
    assert [l.split(" fits")[0] for l in lines] == ["progress: 4/10", "progress: 10/10"]
    q = Progress(10, False, interval=0)  # --quiet: nothing
    q.update(10)
    q.close()
    assert "progress" not in capsys.readouterr().err


def test_environment_faults_are_one_line_with_resume_not_internal_errors(capsys):
    import errno

    from moestat.cli.common import run_main

    def full(argv):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/run/summary.json")

    assert run_main(full, [], prog="moestat rates") == 1
    err = capsys.readouterr().err
    assert err == "moestat rates: disk full writing /data/run/summary.json: free space and run with --resume; finished results are kept\n"

    def bug(argv):
        raise OSError(errno.EBADF, "Bad file descriptor")

    assert run_main(bug, [], prog="moestat rates") == 1
    assert "internal error" in capsys.readouterr().err  # not every OSError is the environment's


def test_a_unit_whose_worker_died_before_its_rows_were_gathered_does_not_hang_the_sweep(monkeypatch):
    """The race CI hit: a future is reported finished, its worker is killed before the client
    fetches the rows, and ``result()`` without a timeout then waits forever for a worker to
    recompute it.  The watchdog must still see that no worker is alive and stop."""
    distributed = pytest.importorskip("distributed")  # absent on a machine without the cluster extra

    from moestat.faults import ClusterFault
    from moestat.rates.backends import ClusterOptions, Progress, _watch

    class LostFuture:
        waited = []

        def result(self, timeout=None):
            assert timeout is not None, "an untimed result() is the hang"
            self.waited.append(timeout)
            raise TimeoutError(f"timed out after {timeout} s")

    class NoWorkers:
        def nthreads(self):
            return {}

    fut = LostFuture()
    monkeypatch.setattr(distributed, "wait", lambda fs, timeout, return_when: (set(fs), set()))
    options = ClusterOptions(worker_timeout=0.2, gather_timeout=0.01)
    got = []
    with pytest.raises(ClusterFault, match=r"no live dask worker at tcp://x for 0.2 s \(1 unit\(s\) not run\)"):
        _watch(NoWorkers(), {fut: "unit"}, lambda u, rows: got.append(rows), "tcp://x", options, Progress(1, False))
    assert got == [] and len(LostFuture.waited) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError])
def test_a_loky_sweep_stopped_while_rows_are_handed_over_prints_no_joblib_warning(stop):
    # issue 35: Ctrl-C with --n-jobs 2 printed joblib's 2-line "N tasks which were still being
    # processed by the workers have been cancelled ..." before the door's one line (when it landed
    # while a unit's rows were written); a full disk there did the same
    import gc
    import warnings

    from moestat.rates.backends import execute

    def stop_here(unit, rows):
        raise stop("stopped while writing rows")

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(stop) as excinfo:
            execute(list, [(1, 2), (3, 4), (5, 6), (7, 8)], stop_here, n_jobs=2, progress=False, total_fits=8)
        del excinfo  # the traceback held the generator: freeing it is when joblib warned
        gc.collect()
        warnings.warn("another warning", UserWarning)  # the others still show
    assert [str(w.message) for w in seen] == ["another warning"]


@pytest.mark.slow
def test_loky_workers_leave_ctrl_c_to_the_parent():
    # issue 35: a terminal's Ctrl-C reached the workers too, and one printed its KeyboardInterrupt
    # traceback (13 lines) after the door's one line
    import signal

    from moestat.rates.backends import execute

    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN under nohup / a background job
    got = []
    execute(lambda unit: [signal.getsignal(signal.SIGINT) == signal.SIG_IGN] * len(unit), [(1, 2), (3, 4), (5, 6)],
            lambda unit, rows: got.extend(rows), n_jobs=2, progress=False, total_fits=6)
    assert got == [True] * 6
    assert signal.getsignal(signal.SIGINT) is before  # the parent's own is untouched


def _compile_threads_seen(unit):
    """In a loky worker: the compile-pool size that torch.compile would use there."""
    from torch._inductor import config

    return [(os.environ.get("TORCHINDUCTOR_COMPILE_THREADS"), config.compile_threads)] * len(unit)


@pytest.mark.slow
def test_loky_workers_compile_without_their_own_pool_of_compile_processes(monkeypatch):
    # issue 36: every worker of a sweep started Inductor's pool of cpu_count compile processes
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    from moestat.rates.backends import execute

    got = []
    execute(_compile_threads_seen, [(1, 2), (3, 4), (5, 6)], lambda unit, rows: got.extend(rows),
            n_jobs=2, progress=False, total_fits=6)
    assert got == [("1", 1)] * 6
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ  # the sweep's own process is untouched


def test_a_compile_thread_count_the_user_set_is_kept_in_the_workers(monkeypatch):
    from moestat.rates import backends

    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "3")
    backends._limit_compile_workers()
    assert os.environ["TORCHINDUCTOR_COMPILE_THREADS"] == "3"


def _malloc_kept(unit):
    from moestat import threads

    return [threads._KEPT == [True]] * len(unit)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt (Linux)")
def test_loky_workers_keep_freed_memory_in_the_heap():
    # issue 36: eager EM steps at n = 1e5 spent 78% of their CPU time in the kernel, zeroing the
    # pages of 80 MB temporaries that glibc mapped and unmapped afresh at every step
    from moestat.rates.backends import execute

    got = []
    execute(_malloc_kept, [(1, 2), (3, 4), (5, 6)], lambda unit, rows: got.extend(rows), n_jobs=2, progress=False,
            total_fits=6)
    assert got == [True] * 6


def _pid_rows(unit):
    """Rows naming the process that ran the unit."""
    return [(unit, os.getpid())]


def _fails_in_a_worker(unit):
    if unit[1] != os.getpid():  # not the sweep's own process
        raise ZeroDivisionError("a bug in a worker's unit")
    return [unit]


@pytest.mark.slow
def test_a_shared_sweep_runs_units_in_this_process_and_in_a_worker_each_once():
    # issue 36: the sweep's own process fits units beside n_jobs - 1 loky workers, so that the
    # second core is used while the worker starts up, and no unit is lost or run twice
    from moestat.rates.backends import execute

    units = [(i,) for i in range(12)]
    got = []
    execute(_pid_rows, units, lambda unit, rows: got.extend(rows), n_jobs=2, progress=False, total_fits=12, share=True)
    assert sorted(u for u, _ in got) == units
    pids = {pid for _, pid in got}
    assert os.getpid() in pids and len(pids) == 2  # the first unit here, the second in the worker


@pytest.mark.slow
def test_a_shared_sweep_runs_its_first_unit_in_this_process():
    # the units come largest first and this process is ready before any worker has started:
    # handing the first unit to a starting worker left this process idle at the end
    from moestat.rates.backends import execute

    units = [(i,) for i in range(4)]
    got = []
    execute(_pid_rows, units, lambda unit, rows: got.extend(rows), n_jobs=2, progress=False, total_fits=4, share=True)
    assert dict(got)[(0,)] == os.getpid()


def test_a_bug_in_a_workers_unit_stops_a_shared_sweep_with_that_error():
    from moestat.rates.backends import execute

    units = [(i, os.getpid()) for i in range(4)]
    with pytest.raises(ZeroDivisionError, match="a bug in a worker's unit"):
        execute(_fails_in_a_worker, units, lambda unit, rows: None, n_jobs=2, progress=False, total_fits=4, share=True)


@pytest.mark.slow
def test_joblib_still_runs_after_a_shared_sweep_in_the_same_process():
    # the shared sweep uses joblib's own loky pool: loky's bare reusable executor replaced it, and
    # the next joblib Parallel call failed ('_ReusablePoolExecutor' has no '_temp_folder_manager')
    from moestat.rates.backends import execute

    units = [(i,) for i in range(4)]
    for share in (True, False, True):
        got = []
        execute(_pid_rows, units, lambda unit, rows: got.extend(rows), n_jobs=2, progress=False, total_fits=4,
                share=share)
        assert sorted(u for u, _ in got) == units


def _first_unit_waits_for_the_seconds_rows(unit):
    """Unit 0 (the sweep's own process takes the first) ends only once unit 1's rows, fitted by a
    worker, have been handed to ``on_result`` -- which the test's ``on_result`` marks on disk."""
    i, folder = unit
    if i == 0:
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(folder, "1.written")):
            if time.monotonic() > deadline:
                raise TimeoutError("a worker's finished unit was not written while this process fitted its own")
            time.sleep(0.01)
    return [i]


def _mark_written(unit, rows):
    Path(unit[1], f"{unit[0]}.written").write_text(str(rows))


@pytest.mark.slow
def test_a_workers_rows_are_written_while_this_process_still_fits_its_unit(tmp_path):
    # a kill during this process's long unit lost the workers' finished units: their rows waited
    # in memory until this process's unit ended (before, this test timed out after 60 s)
    from moestat.rates.backends import execute

    units = [(0, str(tmp_path)), (1, str(tmp_path))]
    execute(_first_unit_waits_for_the_seconds_rows, units, _mark_written, n_jobs=2, progress=False, total_fits=2,
            share=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.written", "1.written"]



def test_a_fault_of_on_result_for_a_workers_unit_is_raised_by_the_shared_sweep():
    # the worker's rows are written by loky's result thread, where an exception is only logged
    from moestat.rates.backends import execute

    def on_result(unit, rows):
        if rows[0][1] != os.getpid():
            raise OSError(28, "No space left on device (a worker's unit)")

    units = [(i,) for i in range(4)]
    with pytest.raises(OSError, match="a worker's unit"):
        execute(_pid_rows, units, on_result, n_jobs=2, progress=False, total_fits=4, share=True)

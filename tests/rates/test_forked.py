"""Sweep workers forked after the imports, and figures drawn in a fork (issue 36): the same rows as one
process, refused where fork is not safe, errors reported in the sweep's process."""

import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import pytest

import moestat.rates.forked as forked
from moestat.rates.config import RatesConfig
from moestat.rates.forked import FORK_ENV, ForkedWorkers, NotSendable, WorkerLost, draw_in_fork, fork_refusal
from moestat.rates.store import RESULT_COLUMNS
from moestat.rates.sweep import fork_workers, run_sweep_rows
from moestat.rates.sweep import run_unit as _run_unit
from tests.rates.test_backends import _first_unit_waits_for_the_seconds_rows, _mark_written
from tests.test_folder_lock import _alive, _children, _wait_rows  # the /proc helpers of the kill tests

TINY = dict(d=2, n_min=40, n_max=90, n_points=3, reps=3, max_iter=5, holdout=256, n_boot=100, quiet=True)
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers are used on Linux only")


def tiny(**kw):
    return RatesConfig.from_dict({**TINY, **kw}).validate()


def _rows(path):
    # every column but the wall-clock time, row by row as written
    t = RESULT_COLUMNS.index("time")
    return [",".join(line.split(",")[:t]) for line in path.read_text().splitlines()]


def _units_of(pid_file):
    return [int(x) for x in pid_file.read_text().split()] if pid_file.exists() else []


def _tagged_unit(unit):
    """A work function that records the process that ran each unit (module level: sent by name)."""
    with open(os.environ["MOESTAT_TEST_PIDS"], "a") as fh:
        fh.write(f"{os.getpid()}\n")
    return _run_unit(unit)


def _fail_unit(unit):
    if os.getpid() != int(os.environ["MOESTAT_TEST_PARENT"]):
        raise ZeroDivisionError(f"unit {unit} failed in a worker")
    return [{"replicates": len(unit.replicates)}]


def _set_env(name, value):
    os.environ[name] = value


def _get_env(name):
    return os.environ.get(name)


def _die_unit(unit):
    if os.getpid() != int(os.environ["MOESTAT_TEST_PARENT"]):
        os._exit(3)
    return []


_FRESH = "MOESTAT_TEST_FORK_FRESH_PROCESS"


@pytest.fixture
def forkable(request):
    """A process state in which the sweep may fork: what earlier tests left running is ended
    (joblib's loky pool and its threads; the background imports of a rates run are waited for).

    Where a thread the tests cannot end is still running (dask's offload thread, started by an
    earlier dask test of the same session, lives as long as the process), the test is run alone in
    a fresh interpreter instead -- never skipped -- and the fixture returns True: the test body then
    returns at once, its verdict being the fresh run's."""
    reusable = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(reusable, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)
    for t in threading.enumerate():
        if t.name == "moestat-warm-imports":
            t.join(timeout=120)
    why = fork_refusal()
    if why is None:
        return False
    if os.environ.get(_FRESH):  # a fresh interpreter that still may not fork: a real failure
        pytest.fail(f"fork refused in a fresh test process: {why}")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           request.node.nodeid], cwd=root, env={**os.environ, _FRESH: "1"},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (f"{request.node.nodeid} failed in a fresh interpreter (this one holds: {why})\n"
                                  + done.stdout[-4000:] + done.stderr[-2000:])
    return True


class _Unit:
    def __init__(self, i):
        self.replicates = (i,)
        self.key = ("u", i)


@pytest.mark.slow
@linux_only
def test_forked_workers_give_the_rows_of_one_process(tmp_path, monkeypatch, forkable):
    if forkable:  # run and passed in a fresh interpreter (the fixture)
        return
    cfg = tiny(router=["perturbed", "cosine"], chunk=2)
    (tmp_path / "one").mkdir()
    (tmp_path / "fork").mkdir()
    run_sweep_rows(cfg.replace(n_jobs=1), tmp_path / "one", progress=False)
    pids = tmp_path / "pids"
    monkeypatch.setenv("MOESTAT_TEST_PIDS", str(pids))
    import moestat.rates.sweep as sweep

    monkeypatch.setattr(sweep, "run_unit", _tagged_unit)  # run_sweep_rows hands this function to the workers
    pool = fork_workers(cfg.replace(n_jobs=2))
    assert pool is not None and pool.size == 1
    try:
        run_sweep_rows(cfg.replace(n_jobs=2), tmp_path / "fork", progress=False, forked=pool)
    finally:
        pool.close()
    assert _rows(tmp_path / "one" / "results.csv") == _rows(tmp_path / "fork" / "results.csv")
    ran = _units_of(pids)
    assert len(ran) == 2 * 3 * 2  # 2 routers x 3 sizes x 2 chunks, each unit once
    assert os.getpid() in ran and len(set(ran)) == 2  # this process and the forked worker both fitted units
    prov = json.loads((tmp_path / "fork" / "provenance.json").read_text())
    assert prov["runs"][-1]["workers"]["workers"] == "processes forked from the client"
    assert prov["runs"][-1]["workers"]["processes"] == 2


@pytest.mark.slow
@linux_only
def test_run_rates_takes_the_fork_path_and_the_loky_path_when_fork_is_refused(tmp_path, monkeypatch, forkable):
    if forkable:  # run and passed in a fresh interpreter (the fixture)
        return
    from moestat.rates.experiment import run_rates

    cfg = tiny(router=["perturbed"], chunk=1, n_jobs=2)
    fork = run_rates(cfg, tmp_path / "fork")  # units in the forked worker too
    monkeypatch.setenv(FORK_ENV, "0")
    assert fork_refusal() == f"{FORK_ENV}=0"
    assert fork_workers(cfg) is None
    loky = run_rates(cfg, tmp_path / "loky")  # everything after the sweep in this process
    reusable = sys.modules["joblib.externals.loky.reusable_executor"]
    reusable._executor.shutdown(wait=True, kill_workers=True)  # its threads would refuse the next test's fork
    kinds = [json.loads((tmp_path / d / "provenance.json").read_text())["runs"][-1]["workers"]["workers"]
             for d in ("fork", "loky")]
    assert kinds == ["processes forked from the client", "local processes of the client's interpreter"]
    assert _rows(tmp_path / "fork" / "results.csv") == _rows(tmp_path / "loky" / "results.csv")
    assert json.dumps(fork["fits"], sort_keys=True) == json.dumps(loky["fits"], sort_keys=True)
    pngs = sorted(p.name for p in (tmp_path / "loky").glob("*.png"))
    assert pngs == ["convergence.png", "convergence_all.png"]
    for name in pngs:
        assert (tmp_path / "fork" / name).read_bytes() == (tmp_path / "loky" / name).read_bytes()


@pytest.mark.slow
@linux_only
def test_a_scenario_that_pickle_cannot_carry_is_fitted_and_drawn_in_this_process(tmp_path, forkable):
    """The forked workers are given the experiment by fork, so a user's expert written as a closure (the
    shipped examples/mlp_expert.py) fits its units in both processes; the rate fits and figures run
    in this process (issue 58; before, they were sent to the worker by pickle, and the run ended with
    an internal error after writing every row, found by topk-over's full run with --n-jobs 2)."""
    if forkable:  # run and passed in a fresh interpreter (the fixture)
        return
    import pickle as _pickle

    from moestat.rates.experiment import run_rates
    from moestat.rates.resolve import Experiment

    scenario = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "mlp_expert.py") + ":scenario"
    cfg = RatesConfig.from_dict({**{k: v for k, v in TINY.items() if k != "d"}, "scenario_file": scenario, "chunk": 1,
                                 "n_jobs": 2}).validate()
    with pytest.raises((AttributeError, TypeError, _pickle.PicklingError)):
        _pickle.dumps(Experiment.of(cfg))  # the case under test: the experiment cannot be pickled
    fork = run_rates(cfg, tmp_path / "fork")
    one = run_rates(cfg.replace(n_jobs=1), tmp_path / "one")
    prov = json.loads((tmp_path / "fork" / "provenance.json").read_text())
    assert prov["runs"][-1]["workers"]["workers"] == "processes forked from the client"
    assert fork["counts"]["fits"] == 3 * 3 and _rows(tmp_path / "fork" / "results.csv") == _rows(tmp_path / "one" / "results.csv")
    assert json.dumps(fork["fits"], sort_keys=True) == json.dumps(one["fits"], sort_keys=True)
    for name in ("convergence.png", "convergence_all.png"):
        assert (tmp_path / "fork" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()


@pytest.mark.slow
@linux_only
def test_with_forked_workers_the_sweeps_process_reads_fits_and_draws_without_statsmodels(tmp_path):
    # the rows are read (pandas), fitted and drawn (matplotlib) in the sweep's own process after the
    # sweep (issue 58: no post-sweep work in a worker); the rate fits import neither statsmodels nor
    # scipy.stats there (moestat.rates.verdicts.ols, theil_sen)
    script = textwrap.dedent(f"""
        import sys
        from moestat.rates.config import RatesConfig
        from moestat.rates.experiment import run_rates
        cfg = RatesConfig.from_dict({TINY!r} | {{"router": ["perturbed"], "chunk": 1, "n_jobs": 2}}).validate()
        s = run_rates(cfg, {str(tmp_path / "out")!r})
        print(sorted(m for m in ("statsmodels", "scipy.stats") if m in sys.modules),
              sorted(m for m in ("pandas", "matplotlib") if m in sys.modules), len(s["fits"]) > 0,
              s["counts"]["fits"] == 3 * 3)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                         env={k: v for k, v in os.environ.items() if k != FORK_ENV})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[]", "['matplotlib',", "'pandas']", "True", "True"]
    prov = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert prov["runs"][-1]["workers"]["workers"] == "processes forked from the client"  # the fork path was taken
    assert (tmp_path / "out" / "convergence.png").exists() and (tmp_path / "out" / "convergence_all.png").exists()


@pytest.mark.slow
@linux_only
def test_call_runs_in_the_worker_after_what_was_posted_and_raises_its_errors_here(forkable):
    if forkable:  # run and passed in a fresh interpreter (the fixture)
        return
    pool = ForkedWorkers.start(1)
    assert pool is not None
    try:
        pool.post(_set_env, "MOESTAT_TEST_POSTED", "yes")  # no reply
        assert pool.call(_get_env, "MOESTAT_TEST_POSTED") == "yes"  # the worker's environment, not ours
        assert "MOESTAT_TEST_POSTED" not in os.environ
        assert pool.call(os.getpid) == pool.procs[0].pid
        with pytest.raises(ValueError, match="invalid literal") as info:
            pool.call(int, "not a number")
        assert any("in sweep worker" in note for note in getattr(info.value, "__notes__", []))
        assert pool.call(divmod, 7, 2) == (3, 1)  # an error in a call leaves the worker usable
        with pytest.raises(NotSendable, match="cannot send"):
            pool.call(lambda: 1)  # not picklable: refused here, nothing sent
        assert pool.call(divmod, 9, 4) == (2, 1)
    finally:
        pool.close()
    assert not pool.procs


def test_fork_is_refused_off_linux_and_while_another_thread_runs(monkeypatch):
    monkeypatch.delenv(FORK_ENV, raising=False)
    monkeypatch.setattr(forked.sys, "platform", "darwin")
    assert "darwin" in fork_refusal()
    assert ForkedWorkers.start(1) is None
    monkeypatch.setattr(forked.sys, "platform", "win32")
    assert ForkedWorkers.start(1) is None
    monkeypatch.setattr(forked.sys, "platform", "linux")
    if "fork" not in forked.multiprocessing.get_all_start_methods():  # pragma: no cover
        pytest.skip("no fork start method here")
    release = threading.Event()
    t = threading.Thread(target=release.wait, name="busy-importer", daemon=True)
    t.start()
    try:
        # threads left by earlier tests (dask's offload, executors) may come first in the message,
        # which names three: the refusal must count this one, whatever else runs
        assert t in forked._other_threads()
        why = fork_refusal()
        assert why is not None and "other thread(s) running" in why
        assert ForkedWorkers.start(1) is None
    finally:
        release.set()
        t.join()
    assert ForkedWorkers.start(0) is None  # nothing to fork for one process


@pytest.mark.slow
@linux_only
def test_a_worker_error_is_raised_here_with_its_traceback_and_stops_the_pool(monkeypatch, forkable):
    if forkable:  # run and passed in a fresh interpreter (the fixture)
        return
    monkeypatch.setenv("MOESTAT_TEST_PARENT", str(os.getpid()))
    pool = ForkedWorkers.start(1)
    assert pool is not None
    got = []
    try:
        with pytest.raises(ZeroDivisionError, match="failed in a worker") as info:
            pool.run(_fail_unit, [_Unit(i) for i in range(6)], lambda u, rows: got.append(u), n_jobs=2, progress=False)
        assert any("in sweep worker" in note for note in getattr(info.value, "__notes__", []))
        assert pool.broken
        with pytest.raises(RuntimeError, match="stopped by an earlier error"):
            pool.run(_fail_unit, [_Unit(0)], lambda u, rows: None, n_jobs=2, progress=False)
    finally:
        pool.close()
    assert all(not p.is_alive() for p in pool.procs)
    assert len(got) < 6  # stopped before every unit ran


@pytest.mark.slow
@linux_only
def test_a_workers_rows_are_written_while_this_process_still_fits_its_unit(tmp_path, forkable):
    # a kill during this process's long unit lost the workers' finished units: their rows waited
    # in memory until this process's unit ended (before, this test timed out after 60 s)
    if forkable:  # run and passed in a fresh interpreter (the fixture)
        return
    pool = ForkedWorkers.start(1)
    try:
        pool.run(_first_unit_waits_for_the_seconds_rows, [(0, str(tmp_path)), (1, str(tmp_path))], _mark_written,
                 n_jobs=2, progress=False, total_fits=2)
    finally:
        pool.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.written", "1.written"]


@pytest.mark.slow
@linux_only
def test_a_fault_of_on_result_for_a_workers_unit_is_raised_here_and_stops_the_pool(monkeypatch, forkable):
    if forkable:  # run and passed in a fresh interpreter (the fixture)
        return
    monkeypatch.setenv("MOESTAT_TEST_PARENT", str(os.getpid()))
    parent, got = os.getpid(), []

    def on_result(unit, rows):
        if rows and rows[0] != parent:
            raise OSError(28, "No space left on device (a worker's unit)")
        got.append(unit)

    pool = ForkedWorkers.start(1)
    try:
        with pytest.raises(OSError, match="a worker's unit"):
            pool.run(_pid_unit, [_Unit(i) for i in range(6)], on_result, n_jobs=2, progress=False)
        assert pool.broken
    finally:
        pool.close()
    assert len(got) < 6


def _pid_unit(unit):
    return [os.getpid()]


@pytest.mark.slow
@linux_only
def test_a_worker_that_dies_is_reported(monkeypatch, forkable):
    if forkable:  # run and passed in a fresh interpreter (the fixture)
        return
    monkeypatch.setenv("MOESTAT_TEST_PARENT", str(os.getpid()))
    pool = ForkedWorkers.start(1)
    try:
        with pytest.raises(WorkerLost, match="exit code 3"):
            pool.run(_die_unit, [_Unit(i) for i in range(4)], lambda u, rows: None, n_jobs=2, progress=False)
    finally:
        pool.close()


@pytest.mark.slow
@linux_only
def test_draw_in_fork_runs_the_jobs_in_two_processes_and_reruns_a_failed_one_here(tmp_path, forkable):
    if forkable:  # run and passed in a fresh interpreter (the fixture)
        return
    where = tmp_path / "where"

    def job(name):
        def run():
            with open(where, "a") as fh:
                fh.write(f"{name} {os.getpid()}\n")
        return run

    draw_in_fork([job("a"), job("b")])
    lines = dict(line.split() for line in where.read_text().splitlines())
    assert set(lines) == {"a", "b"} and int(lines["a"]) == os.getpid() and int(lines["b"]) != os.getpid()

    calls = tmp_path / "calls"

    def failing():
        with open(calls, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):  # the child's failure is raised here, by the rerun
        draw_in_fork([job("c"), failing])
    pids = [int(x) for x in calls.read_text().split()]
    assert len(pids) == 2 and pids[-1] == os.getpid() and pids[0] != os.getpid()


@pytest.mark.slow
@linux_only
def test_a_fork_after_a_multithreaded_torch_region_runs_units(tmp_path):
    # The parent ran an intra-op parallel region on two threads before forking (OpenMP is not
    # fork-safe in general); a forked worker runs its units on one thread and must not hang.
    script = textwrap.dedent(f"""
        import torch
        torch.set_num_threads(2)
        a = torch.randn(600, 600, dtype=torch.float64)
        (a @ a).sum().item(); torch.exp(torch.randn(2_000_000)).sum().item()
        from moestat.rates.config import RatesConfig
        from moestat.rates.sweep import fork_workers, run_sweep_rows
        cfg = RatesConfig.from_dict({TINY!r} | {{"router": ["perturbed"], "chunk": 1, "n_jobs": 2}}).validate()
        pool = fork_workers(cfg)
        assert pool is not None
        try:
            run_sweep_rows(cfg, {str(tmp_path)!r}, progress=False, forked=pool)
        finally:
            pool.close()
        print("done")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                         env=dict(os.environ, OMP_NUM_THREADS="2"))
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr[-2000:]
    assert len(_rows(tmp_path / "results.csv")) == 1 + 3 * 3  # header and 3 sizes x 3 replicates


@pytest.mark.slow
@linux_only
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to find the workers")
def test_forked_workers_end_when_the_main_process_is_killed(tmp_path):
    import signal
    import time

    out = tmp_path / "out"
    args = ["--d", "2", "--n-min", "40", "--n-max", "400", "--n-points", "5", "--reps", "6", "--chunk", "1",
            "--max-iter", "20", "--n-boot", "100", "--n-jobs", "2", "--quiet", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != FORK_ENV} | {"OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "moestat.rates", *args], env=env)
    try:
        _wait_rows(out / "results.csv", 1)
        workers = _children(proc.pid)
        assert workers, "no forked worker found"
        with open(f"/proc/{workers[0]}/cmdline") as fh:
            assert "loky" not in fh.read()  # a fork of the main process, not a loky interpreter
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.time() + 30
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.2)
    assert not any(_alive(w) for w in workers), "forked workers outlived their parent"


def _slow_result(seconds: float) -> list:
    import time

    time.sleep(seconds)
    return [{"rows": 1}]


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="no fork here")
def test_a_worker_whose_parent_is_gone_ends_without_a_traceback(capfd):
    # after `kill -9` of the sweep, a worker finishing its unit writes to a closed pipe: BrokenPipeError,
    # which printed a traceback after the shell's prompt; now the worker just ends
    import multiprocessing
    import os

    from moestat.rates.forked import _serve

    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe(duplex=True)
    here.send((_slow_result, (0.2,), True))
    proc = ctx.Process(target=_serve, args=(there, [here], os.getpid()))
    proc.start()
    there.close()
    here.close()  # the parent's end gone, as when it is killed
    proc.join(30)
    err = capfd.readouterr().err
    assert proc.exitcode == 0 and "Traceback" not in err and "BrokenPipeError" not in err, err

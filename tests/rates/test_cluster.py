"""A sweep on a real ``dask scheduler`` + ``dask worker`` on localhost (the recipe of
docs/guide/cluster.rst): the scheduler file, every worker's environment checked and recorded, a
worker running other code refused, and all workers killed stopping the sweep in one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")
# the dask command of *this* interpreter (a venv's, also when the venv is not activated): a scheduler
# or worker from another Python would run another environment's moestat, which the sweep refuses
DASK = shutil.which("dask", path=str(Path(sys.executable).parent)) or shutil.which("dask")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(DASK is None, reason="the dask command line is not installed")]

from moestat.rates.store import RESULT_COLUMNS, read_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--d", "2", "--n-min", "40", "--n-max", "90", "--n-points", "3", "--reps", "3", "--max-iter", "5",
        "--n-boot", "100", "--quiet"]


def _env(pythonpath: Path = ROOT) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(pythonpath), "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}


def _wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Cluster:
    """``dask scheduler --scheduler-file`` and workers started as separate processes, in ``tmp``."""

    def __init__(self, tmp: Path):
        self.tmp, self.file, self.workers = tmp, tmp / "scheduler.json", []
        self.scheduler = subprocess.Popen(
            [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(self.file)],
            cwd=tmp, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for(lambda: self.file.exists() and self.file.read_text().strip(), 60, "the scheduler file")

    @property
    def address(self) -> str:
        return json.loads(self.file.read_text())["address"]

    def add_worker(self, pythonpath: Path = ROOT) -> subprocess.Popen:
        w = subprocess.Popen([DASK, "worker", "--scheduler-file", str(self.file), "--nthreads", "1", "--no-nanny",
                              "--no-dashboard", "--local-directory", str(self.tmp / "scratch")],
                             cwd=self.tmp, env=_env(pythonpath), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.workers.append(w)
        from distributed import Client

        with Client(self.address, timeout=30) as c:
            c.wait_for_workers(len([p for p in self.workers if p.poll() is None]), timeout=60)
        return w

    def close(self) -> None:
        for p in [*self.workers, self.scheduler]:
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def _rates(args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moestat.rates", *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=300, **kw)


def _frame(df):
    cols = [c for c in RESULT_COLUMNS if c != "time"]
    return df[cols].sort_values(["router", "n", "replicate"]).reset_index(drop=True)


def test_the_localhost_recipe_gives_the_loky_results_and_records_the_workers(cluster, tmp_path):
    cluster.add_worker()
    got = _rates([*TINY, "--scheduler-file", str(cluster.file), "--out", str(tmp_path / "dask")])
    assert got.returncode == 0, got.stderr
    ref = _rates([*TINY, "--out", str(tmp_path / "loky")])
    assert ref.returncode == 0, ref.stderr
    assert _frame(read_results(tmp_path / "dask" / "results.csv")).equals(_frame(read_results(tmp_path / "loky" / "results.csv")))
    run = json.loads((tmp_path / "dask" / "provenance.json").read_text())["runs"][-1]
    assert run["backend"] == "dask" and run["scheduler"] == cluster.address
    (env,) = run["workers"]["workers"].values()
    assert env == {**run["workers"]["client"], "host": env["host"]} and run["workers"]["mismatch"] == []


def test_a_worker_running_other_code_is_refused_before_anything_is_written(cluster, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(ROOT / "moestat", other / "moestat", ignore=shutil.ignore_patterns("__pycache__"))
    path = other / "moestat" / "estimators" / "lse.py"
    path.write_text(path.read_text() + "\n# an edited default on one node\n")
    cluster.add_worker(other)
    out = tmp_path / "out"
    res = _rates([*TINY, "--scheduler-file", str(cluster.file), "--out", str(out)])
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "runs source_sha256" in res.stderr and "--allow-worker-mismatch" in res.stderr
    assert not out.exists()
    res = _rates([*TINY, "--scheduler-file", str(cluster.file), "--out", str(out), "--allow-worker-mismatch"])
    assert res.returncode == 0, res.stderr
    run = json.loads((out / "provenance.json").read_text())["runs"][-1]
    assert len(run["workers"]["mismatch"]) == 1 and "source_sha256" in run["workers"]["mismatch"][0]


def _sweep_until_first_rows(cluster, out: Path):
    """Start a longer sweep on ``cluster`` (one unit per chunk, a short worker timeout) and return
    ``(args, process)`` once its first rows are written: the moment the fault tests strike."""
    args = ["--d", "2", "--n-min", "40", "--n-max", "400", "--n-points", "5", "--reps", "6", "--chunk", "1", "--max-iter", "20",
            "--n-boot", "100", "--quiet", "--scheduler-file", str(cluster.file), "--worker-timeout", "4", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "moestat.rates", *args], cwd=ROOT, env=_env(), stderr=subprocess.PIPE, text=True)
    csv = out / "results.csv"
    _wait_for(lambda: csv.exists() and csv.read_text().count("\n") >= 2, 120, "the first rows")
    return args, proc


def test_all_workers_killed_stops_the_sweep_in_one_line_and_resume_finishes(cluster, tmp_path):
    worker = cluster.add_worker()
    out = tmp_path / "out"
    args, proc = _sweep_until_first_rows(cluster, out)
    csv = out / "results.csv"
    worker.send_signal(signal.SIGKILL)
    rc = proc.wait(timeout=120)
    err = proc.stderr.read()
    assert rc == 1 and "Traceback" not in err and "internal error" not in err, err
    assert err.strip().splitlines()[-1].startswith("moestat rates: no live dask worker at ")
    assert "finished results are kept; --resume continues" in err
    kept = len(read_results(csv))
    assert 1 <= kept < 30
    cluster.add_worker()
    res = _rates([*args, "--resume"])
    assert res.returncode == 0, res.stderr
    assert len(read_results(csv)) == 30


def _never_retrieved(exc: BaseException, caplog) -> list[str]:
    """Run a task that fails with ``exc``, drop it unretrieved, and return what asyncio logged."""
    import asyncio
    import gc

    async def fail():
        raise exc

    async def main():
        task = asyncio.ensure_future(fail())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        del task

    caplog.clear()
    with caplog.at_level("ERROR", logger="asyncio"):
        asyncio.run(main())
        gc.collect()
    return [r.getMessage() for r in caplog.records if r.name == "asyncio"]


def test_dask_allexit_left_by_a_timed_out_gather_is_not_printed_but_other_task_errors_are(caplog):
    # CI once printed asyncio's "Task exception was never retrieved" with a traceback for
    # distributed's AllExit after the sweep had stopped with its one line (the test above).
    from distributed.client import AllExit

    from moestat.rates.backends import _drop_dask_allexit

    logger = __import__("logging").getLogger("asyncio")
    logger.removeFilter(_drop_dask_allexit)
    assert len(_never_retrieved(AllExit(), caplog)) == 1  # what asyncio prints without the filter
    logger.addFilter(_drop_dask_allexit)
    try:
        assert _never_retrieved(AllExit(), caplog) == []
        kept = _never_retrieved(RuntimeError("a real bug"), caplog)
        assert len(kept) == 1 and "never retrieved" in kept[0]
    finally:
        logger.removeFilter(_drop_dask_allexit)


def test_the_scheduler_killed_mid_sweep_stops_it_in_one_line_and_resume_finishes(cluster, tmp_path):
    # issue 35: a killed scheduler ended in 76-81 lines and "internal error (FuturesCancelledError)"
    cluster.add_worker()
    out = tmp_path / "out"
    args, proc = _sweep_until_first_rows(cluster, out)
    csv = out / "results.csv"
    cluster.scheduler.send_signal(signal.SIGKILL)
    rc = proc.wait(timeout=120)
    err = proc.stderr.read()
    assert rc == 1 and "Traceback" not in err and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert "dask scheduler" in err and "finished results are kept; --resume continues" in err, err
    kept = len(read_results(csv))
    assert 1 <= kept < 30
    (tmp_path / "again").mkdir()
    restarted = Cluster(tmp_path / "again")
    try:
        restarted.add_worker()
        res = _rates([*args[:-4], "--scheduler-file", str(restarted.file), "--worker-timeout", "4", "--out", str(out), "--resume"])
        assert res.returncode == 0, res.stderr
    finally:
        restarted.close()
    assert len(read_results(csv)) == 30


def test_dask_workers_get_the_sweep_worker_settings(cluster):
    # issue 36: loky workers ran without Inductor's compile pool and kept freed memory in the heap,
    # dask workers did not (client.map ran the unit function bare)
    from moestat.rates.backends import execute

    cluster.add_worker()

    def seen(unit):  # nested: pickled by value, so the worker needs no test module
        import os as _os

        from moestat import threads

        return [(_os.environ.get("TORCHINDUCTOR_COMPILE_THREADS"), threads._KEPT == [True])] * len(unit)

    got = []
    execute(seen, [(1, 2), (3, 4)], lambda unit, rows: got.extend(rows), backend="dask", scheduler=cluster.address,
            progress=False, total_fits=4)
    kept = sys.platform.startswith("linux")  # glibc's mallopt
    assert got == [("1", kept)] * 4

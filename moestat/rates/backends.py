"""Execution of work units: in-process, joblib ``loky`` workers, or a ``dask.distributed`` cluster.

The backends only decide *where* a unit runs.  A unit carries everything it needs and its result
depends on nothing else (see :mod:`moestat.rates.sweep`), so the rows are bit-identical
whatever the backend, ``n_jobs`` or the order in which units finish -- provided every worker
runs the same code: :func:`check_scheduler` (called while the command validates its input)
reaches the scheduler within seconds and compares every worker's environment
(:func:`moestat.rates.worker_env.environment`) with the client's.  While a dask sweep runs, a
watchdog stops it when no worker has been alive for ``worker_timeout`` seconds, and the faults
of the cluster (a worker killed too often, the scheduler gone) stop it with one line
(:class:`moestat.faults.ClusterFault`; ``--resume`` continues).  loky workers end with their
parent, even after ``kill -9`` of the main process.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from moestat.faults import ClusterFault, as_environment_fault
from moestat.rates.worker_env import compare_environments, environment
from moestat.threads import keep_freed_memory

__all__ = ["ClusterOptions", "execute", "check_scheduler", "require_cluster_extra", "scheduler_from_file", "Progress", "UnitWriter"]

U = TypeVar("U")


@dataclass(frozen=True)
class ClusterOptions:
    """How a dask sweep treats its cluster (never a number of ``results.csv``).

    Attributes
    ----------
    connect_timeout : float
        Seconds to reach the scheduler before giving up.
    worker_timeout : float
        Seconds without any live worker after which the sweep stops (``--worker-timeout``).
    allow_mismatch : bool
        Run even when a worker's environment differs from the client's (recorded in
        ``provenance.json``); refused by default.
    gather_timeout : float
        Seconds to fetch a finished unit's rows before checking again that a worker is alive
        (its worker may have died between finishing and handing the rows over).
    """

    connect_timeout: float = 10.0
    worker_timeout: float = 300.0
    allow_mismatch: bool = False
    gather_timeout: float = 5.0


def require_cluster_extra(flag: str) -> None:
    """Raise a one-line ``ValueError`` naming the ``[cluster]`` extra when dask.distributed is not
    installed (``flag`` is what needs it), instead of a ``ModuleNotFoundError`` traceback."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ValueError(f"{flag} needs dask.distributed, which is not installed: pip install -e .[cluster] "
                         "(or pip install 'moestat[cluster]')") from None


def scheduler_from_file(path: str | os.PathLike) -> str:
    """The address in a dask scheduler file (``dask scheduler --scheduler-file``, dask-jobqueue).

    Raises
    ------
    ValueError
        The file is missing, not JSON or has no address (one line naming it).
    """
    import json

    try:
        data = json.loads(open(path, encoding="utf-8").read())
    except FileNotFoundError:
        raise ValueError(f"--scheduler-file {path} does not exist (is the scheduler started?)") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"--scheduler-file {path}: not a dask scheduler file ({exc})") from None
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or "://" not in address:
        raise ValueError(f"--scheduler-file {path}: no scheduler address in it")
    return address


def _drop_dask_allexit(record: logging.LogRecord) -> bool:
    """Logging filter for ``asyncio``: drop "Task exception was never retrieved" for dask's ``AllExit``.

    When a gather times out on a dead worker (``_watch``), distributed leaves an inner task of
    ``Client._gather`` that its own shutdown later fails with ``distributed.client.AllExit``; asyncio
    prints that, with a traceback, when the task is collected -- after the sweep already stopped
    with its one line.  It is distributed's bookkeeping, not a fault of the sweep, so only that
    record is dropped; every other asyncio error still prints.
    """
    exc = record.exc_info[0] if record.exc_info else None
    return not (exc is not None and exc.__name__ == "AllExit" and exc.__module__.startswith("distributed"))


def _drop_scheduler_loss(record: logging.LogRecord) -> bool:
    """Logging filter for ``distributed.client`` while a sweep runs: drop what the client logs when
    the scheduler is gone.

    A killed scheduler makes the client log "Failed to reconnect to scheduler ..., closing client"
    and two ``CancelledError`` tracebacks of its own shutdown; the sweep then stops with one line
    (:func:`_watch`), which says the same.  Only those records are dropped.
    """
    if record.getMessage().startswith("Failed to reconnect to scheduler"):
        return False
    exc = record.exc_info[0] if record.exc_info else None
    return not (exc is not None and issubclass(exc, asyncio.CancelledError))


def _client(address: str, timeout: float):
    from distributed import Client

    logging.getLogger("asyncio").addFilter(_drop_dask_allexit)  # the same object is added once
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ClusterFault(f"cannot reach the dask scheduler at {address} within {timeout:g} s "
                           f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None


def _worker_environments(client) -> dict[str, dict]:
    return client.run(environment)


def check_scheduler(address: str, options: ClusterOptions | None = None) -> dict:
    """Reach the scheduler at ``address`` and check its workers' environments (validation).

    Returns
    -------
    dict
        ``{"client": env, "workers": {address: env}, "mismatch": [lines]}``.

    Raises
    ------
    ValueError
        The scheduler cannot be reached within ``connect_timeout``, or a worker runs another
        moestat, torch or numpy (unless ``allow_mismatch``); one line.
    """
    options = options or ClusterOptions()
    try:
        client = _client(address, options.connect_timeout)
    except ClusterFault as exc:
        raise ValueError(f"--scheduler: {exc}") from None
    try:
        workers = _worker_environments(client)
    finally:
        client.close()
    mine = environment()
    mismatch = compare_environments(mine, workers)
    if mismatch and not options.allow_mismatch:
        raise ValueError(f"dask worker {mismatch[0]}{f' (and {len(mismatch) - 1} more)' if len(mismatch) > 1 else ''}; "
                         "its results could differ from this client's: install the same versions, or pass "
                         "--allow-worker-mismatch to run anyway")
    return {"client": mine, "workers": workers, "mismatch": mismatch}


class UnitWriter:
    """``on_result(unit, rows)`` and the progress bar for each finished unit, from whichever thread
    received it, one call at a time; nothing after :meth:`stop`.

    Why: a sweep's own process fits units beside its workers, and a worker's rows are
    written the moment they arrive (by the thread that received them) rather than after this
    process's current unit, so that a kill loses only the units being fitted.  Shared by the
    forked workers (:meth:`moestat.rates.forked.ForkedWorkers.run`) and the shared loky sweep
    (:func:`_execute_shared`).
    """

    def __init__(self, on_result: Callable[[Any, list[dict]], None], bar: "Progress"):
        self._on_result, self._bar = on_result, bar
        self._lock = threading.Lock()
        self._stopped = False

    def __call__(self, unit: Any, rows: list[dict]) -> None:
        with self._lock:
            if self._stopped:  # after an error or Ctrl-C nothing more is written
                return
            self._on_result(unit, rows)
            self._bar.update(len(rows))

    def stop(self) -> None:
        """Write nothing more; returns once a write in progress (in another thread) has ended whole."""
        with self._lock:
            self._stopped = True


class Progress:
    """Progress of a sweep: a tqdm bar on a terminal; off a terminal (a batch job's log) one line
    at most every ``interval`` seconds and at the end."""

    def __init__(self, total: int, progress: bool | None, interval: float = 30.0):
        from tqdm.auto import tqdm

        self.total, self.done, self.interval = int(total), 0, float(interval)
        tty = sys.stderr.isatty()
        self.lines = progress is not False and not tty and self.total > 0
        self.bar = tqdm(total=total, unit="fit", disable=None if progress is None or progress else True, leave=False)
        self.t0 = self.last = time.monotonic()

    def update(self, k: int) -> None:
        self.bar.update(k)
        self.done += k
        now = time.monotonic()
        if self.lines and (now - self.last >= self.interval or self.done >= self.total):
            self.last = now
            sys.stderr.write(f"progress: {self.done}/{self.total} fits ({100 * self.done / self.total:.0f}%), "
                             f"{now - self.t0:.0f} s\n")
            sys.stderr.flush()

    def close(self) -> None:
        self.bar.close()


def execute(
    work: Callable[[U], list[dict]],
    units: Sequence[U],
    on_result: Callable[[U, list[dict]], None],
    *,
    n_jobs: int = 1,
    backend: str = "loky",
    scheduler: str | None = None,
    progress: bool | None = None,
    total_fits: int | None = None,
    cluster: ClusterOptions | None = None,
    on_workers: Callable[[dict], None] | None = None,
    share: bool = False,
) -> None:
    """Run ``work(unit)`` for every unit and hand its rows to ``on_result`` as soon as it finishes.

    Parameters
    ----------
    work : callable
        ``work(unit) -> list of row dicts``; a module-level function (workers unpickle it by
        name), e.g. :func:`moestat.rates.sweep.run_unit`.
    units : sequence
        Picklable work units (e.g. :class:`moestat.rates.sweep.WorkUnit`).
    on_result : callable
        Called in the calling process, one unit at a time (so one writer appends to the store).
    n_jobs : int
        Processes (``backend="loky"``): ``n_jobs`` joblib workers, or this process and ``n_jobs - 1``
        workers with ``share``; 1 runs in-process.
    backend : {"loky", "dask"}
        ``dask``: submit to the ``dask.distributed`` scheduler at ``scheduler``.
    progress : bool or None
        ``None``: a tqdm bar on a terminal, progress lines otherwise; ``False`` neither.
    total_fits : int, optional
        Total of the progress bar (rows expected); default the replicates of every unit.
    cluster : ClusterOptions, optional
        Timeouts and the environment check of a dask sweep.
    on_workers : callable, optional
        Called once before any unit runs with the environments of the workers
        (``{"client": env, "workers": ..., "mismatch": [...]}``), e.g. to record them.
    share : bool
        With ``n_jobs > 1`` on loky: this process runs units too, beside ``n_jobs - 1`` loky
        workers (:func:`_execute_shared`), so ``n_jobs`` processes compute on ``n_jobs`` cores and
        one worker's start-up (a fresh interpreter importing torch and the package, about 3 CPU-s)
        is saved and the others' overlap this process's first unit.  ``False``: ``n_jobs`` loky
        workers run every unit (this process only waits).

    Raises
    ------
    moestat.faults.ClusterFault
        The scheduler is unreachable or lost, no worker was alive for ``worker_timeout``
        seconds, a worker died too often on a unit, or a worker's environment differs.
    """
    units = list(units)
    total = total_fits if total_fits is not None else sum(len(u.replicates) for u in units)
    bar = Progress(total, progress)
    try:
        if backend == "dask":
            _execute_dask(work, units, on_result, scheduler, cluster or ClusterOptions(), bar, on_workers)
            return
        if on_workers is not None:
            on_workers({"client": environment(), "workers": "local processes of the client's interpreter" if n_jobs > 1
                        else "the client process", "processes": n_jobs if len(units) > 1 else 1, "mismatch": []})
        if n_jobs == 1 or len(units) <= 1:
            keep_freed_memory()  # the units run in this process (moestat.threads.keep_freed_memory)
            for u in units:
                rows = work(u)
                on_result(u, rows)
                bar.update(len(rows))
        elif share:
            keep_freed_memory()
            _execute_shared(work, units, on_result, n_jobs, bar)
        else:
            from joblib import Parallel, delayed

            par = Parallel(n_jobs=n_jobs, backend="loky", return_as="generator_unordered")
            # Unordered results carry their unit, so completion order is irrelevant.
            results = par(delayed(_run_tagged)(work, u, os.getpid()) for u in units)
            try:
                for u, rows in results:
                    on_result(u, rows)
                    bar.update(len(rows))
            except BaseException:
                _close_quietly(results)
                raise
    finally:
        bar.close()


def _execute_shared(work: Callable[[U], list[dict]], units: list, on_result, n_jobs: int, bar: Progress) -> None:
    """Run ``units`` in this process and in ``n_jobs - 1`` loky workers, each taking the next unit
    in the given order (largest first: the slowest start first balances the processes) as soon
    as it is free; this process, ready first, takes the first unit.

    Why: a loky worker is a fresh interpreter that imports torch and the package
    before its first unit (about 3 CPU-s on the project's 2-core machine, 12% of the main job);
    this process has them already.  With ``n_jobs - 1`` workers it computes from the start
    while they start up, and ``n_jobs`` processes never exceed ``n_jobs`` cores.  Where a unit
    runs changes none of its numbers (:func:`moestat.rates.sweep.run_unit` fixes its threads).

    ``on_result`` is called once per unit as soon as it is finished -- a worker's by loky's
    result thread (a finished future's callback), this process's own by this thread -- one call
    at a time (a write lock), so a worker's rows are on disk while this process still fits a
    long unit, and a run killed then loses only the units being fitted.  The same callback hands
    the worker its next unit, so it never waits for this process to finish a unit.  An exception
    (a unit's bug, Ctrl-C, a fault in ``on_result``, raised here whichever thread met it) stops
    handing out units, lets a write in progress end, writes nothing more, cancels what has not
    started and is re-raised; the workers stay in loky's reusable pool (an interrupted unit ends
    with them, :func:`_die_with_parent`).
    """
    import queue

    from joblib.executor import get_memmapping_executor

    todo = list(units)
    lock = threading.Lock()
    # one item per finished worker unit, in completion order: None (its rows are written), its
    # future (cancelled, or failed: raised here) or an exception (on_result's, or a broken pool's)
    finished: queue.SimpleQueue = queue.SimpleQueue()
    state = {"inflight": 0, "stop": False}
    hand_over = UnitWriter(on_result, bar)  # called by loky's result thread and by this one
    futures: list = []
    # joblib's own loky pool (the one Parallel uses: loky's bare get_reusable_executor would replace
    # it by an executor that a later Parallel call cannot use), with its idle timeout of 300 s
    executor = get_memmapping_executor(n_jobs - 1, timeout=300)

    def take(worker: bool = False):
        with lock:
            if state["stop"] or not todo:
                return None
            if worker:  # counted with the pop, so that this thread never sees "none left, none running" in between
                state["inflight"] += 1
            return todo.pop(0)

    def hand_out() -> None:
        # called here and in loky's result thread (a finished future's callback): one unit per free worker
        unit = take(worker=True)
        if unit is None:
            return
        try:
            fut = executor.submit(_run_tagged, work, unit, os.getpid())
        except BaseException as exc:  # noqa: BLE001 - a broken pool: raised in this thread by deliver()
            finished.put(exc)  # in loky's thread it would only be logged, and this thread would wait forever
            return
        futures.append(fut)
        fut.add_done_callback(_on_done)

    def _on_done(fut) -> None:
        if fut.cancelled() or fut.exception() is not None:
            finished.put(fut)
            return
        try:  # written now, while this process may still be fitting a long unit
            hand_over(*fut.result())
        except BaseException as exc:  # noqa: BLE001 - in loky's thread it would only be logged
            finished.put(exc)
            return
        finished.put(None)
        hand_out()

    def deliver(block: bool) -> None:
        while True:
            try:
                # with a timeout: a blocking wait of a lock is not interrupted by Ctrl-C everywhere
                fut = finished.get(timeout=0.5) if block else finished.get(block=False)
            except queue.Empty:
                if block:
                    continue
                return
            with lock:
                state["inflight"] -= 1
            if isinstance(fut, BaseException):
                raise fut
            if fut is not None and not fut.cancelled():
                fut.result()  # a worker's exception is raised here, in this thread
            if block:
                return

    try:
        # this process computes at once, a worker only after its start-up: this process takes the
        # first (largest) unit itself and the workers the next ones, so the longest unit goes to the
        # first free process (measured on the main job: both processes end within 0.1 s of each other,
        # against 1.7-2.5 s of idle here when a starting worker got the largest unit)
        unit = take()
        for _ in range(n_jobs - 1):
            hand_out()
        while unit is not None:
            rows = work(unit)
            hand_over(unit, rows)
            deliver(block=False)
            unit = take()
        while True:
            with lock:
                left = state["inflight"]
            if not left:
                break
            deliver(block=True)
    except BaseException:
        with lock:
            state["stop"] = True
        hand_over.stop()  # a write in progress in loky's thread ends whole; none starts after this
        for fut in futures:
            fut.cancel()
        # a running unit would go on for minutes after Ctrl-C or a fault: end its worker (as joblib
        # does when its generator of results is closed)
        executor.shutdown(wait=False, kill_workers=True)
        raise


def _execute_dask(work, units, on_result, scheduler: str, options: ClusterOptions, bar: Progress, on_workers) -> None:
    client = _client(scheduler, options.connect_timeout)
    quiet = logging.getLogger("distributed.client")
    quiet.addFilter(_drop_scheduler_loss)
    try:
        try:
            envs = {"client": environment(), "workers": _worker_environments(client)}
        except Exception as exc:  # noqa: BLE001 - the cluster's, re-raised as one when it is
            raise as_environment_fault(exc) or exc
        envs["mismatch"] = compare_environments(envs["client"], envs["workers"])
        if envs["mismatch"] and not options.allow_mismatch:
            raise ClusterFault(f"dask worker {envs['mismatch'][0]}; pass --allow-worker-mismatch to run anyway")
        if on_workers is not None:
            on_workers(envs)
        # Each unit runs through _run_on_worker: a dask worker gets the sweep process's settings
        # (compile pool, kept memory) that a loky worker gets in _run_tagged.
        futures = client.map(functools.partial(_run_on_worker, work), units, pure=False)
        with client.as_current():  # distributed.wait finds its client here
            _watch(client, dict(zip(futures, units)), on_result, scheduler, options, bar)
    finally:
        try:
            client.close()
        finally:
            quiet.removeFilter(_drop_scheduler_loss)


def _fault(exc: Exception, client, scheduler: str, pending) -> Exception:
    """What to raise for ``exc`` met while waiting on the cluster: the environment fault it is; the
    scheduler lost when the client lost its connection (a killed scheduler cancels every future,
    ``FuturesCancelledError``, "scheduler-connection-lost"); else ``exc`` itself (a bug)."""
    if "scheduler-connection-lost" in str(exc) or getattr(client, "status", "running") in ("closing", "closed"):
        return ClusterFault(f"lost the connection to the dask scheduler at {scheduler} ({len(pending)} unit(s) not run); "
                            "restart the scheduler and its workers")
    return as_environment_fault(exc) or exc


def _watch(client, by_future: dict, on_result, scheduler: str, options: ClusterOptions, bar: Progress) -> None:
    """Hand each finished unit to ``on_result``; stop when no worker has been alive for ``worker_timeout``."""
    from distributed import wait

    pending = set(by_future)
    no_workers_since = None
    while pending:
        try:
            done, pending = wait(pending, timeout=2.0, return_when="FIRST_COMPLETED")
        except (TimeoutError, asyncio.TimeoutError):
            done = set()
        except Exception as exc:  # noqa: BLE001
            raise _fault(exc, client, scheduler, pending)
        handed = False
        for fut in done:
            try:
                rows = fut.result(timeout=options.gather_timeout)
            except (TimeoutError, asyncio.TimeoutError):  # the same class from Python 3.11
                # Finished on a worker that died before its rows were gathered: without a timeout
                # result() waits forever for a worker to recompute it.  Keep waiting on it below,
                # where the live-worker watchdog applies.
                pending.add(fut)
                continue
            except Exception as exc:  # noqa: BLE001 - a bug in the unit stays a bug
                raise _fault(exc, client, scheduler, pending)
            on_result(by_future[fut], rows)
            bar.update(len(rows))
            handed = True
        if handed:
            continue
        try:
            alive = len(client.nthreads())
        except Exception as exc:  # noqa: BLE001
            raise _fault(exc, client, scheduler, pending)
        now = time.monotonic()
        if alive:
            no_workers_since = None
        elif no_workers_since is None:
            no_workers_since = now
        elif now - no_workers_since >= options.worker_timeout:
            raise ClusterFault(f"no live dask worker at {scheduler} for {options.worker_timeout:g} s "
                               f"({len(pending)} unit(s) not run); start workers")


#: What joblib warns, in two lines, when the generator of results is closed before its end: after
#: Ctrl-C, SIGTERM or a full disk while a unit's rows are written, before the door's own one line.
ABANDONED = r"\d+ tasks (which were still being processed by the workers have been cancelled|have been successfully executed)"


def _close_quietly(results) -> None:
    """Close joblib's result generator without its "N tasks ... have been cancelled" warning.

    The generator is only abandoned because the sweep stops on an exception (an interrupt, a
    fault), which is reported in one line itself; joblib's advice to adjust "the input task
    iterator" is not for our users.  Closed here, in this thread, so the filter applies (left to
    the garbage collector it would fire whenever the traceback is freed).
    """
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=ABANDONED, category=UserWarning)
        results.close()


_PARENT_WATCH: list = []


def _die_with_parent(parent: int) -> None:
    """In a loky worker: exit as soon as the process that started the sweep is gone (``kill -9``
    of the main process would otherwise leave its workers computing for minutes), and ignore
    Ctrl-C, which the parent handles."""
    if _PARENT_WATCH or os.getpid() == parent:
        return
    # A terminal's Ctrl-C reaches every process of its group: the workers too, which printed a
    # KeyboardInterrupt traceback each after the door's one line.  The parent handles the
    # interrupt (and stops its workers); a worker ignores it.
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # pragma: no cover - not the worker's main thread
        pass

    child_of_parent = os.getppid() == parent  # then a new parent pid means it died (even as a zombie)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if child_of_parent and os.getppid() != parent:
                os._exit(1)
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass

    t = threading.Thread(target=watch, name="moestat-parent-watch", daemon=True)
    t.start()
    _PARENT_WATCH.append(t)


#: Inductor's pool of compile processes in a sweep worker (``TORCHINDUCTOR_COMPILE_THREADS``).
WORKER_COMPILE_THREADS = "1"


def _limit_compile_workers() -> None:
    """In a sweep worker: Inductor compiles in this process, without its own pool of compile processes.

    Why: where Triton is installed (every CUDA build of torch), torch.compile starts
    and wakes a pool of ``cpu_count`` compile processes in every process that compiles
    (``torch._inductor.async_compile.maybe_warm_pool``; ``torch._inductor.config.compile_threads``),
    each importing torch -- torch's own source skips it in fbcode for "usages inside
    multiprocessing pools that lead a multiplicative number of compile subprocesses".  With 16
    sweep workers on 16 cores that is 16 x 16 such processes for one small EM pass, on cores the
    workers already use.  Not measured here: the project's CPU machine has no Triton, so no pool
    starts there (a cold ``fit_em`` compilation took 26 to 29 CPU-s whatever this setting, peak 5
    to 7 processes; ``docs/guide/performance.rst``).  A value the user set is kept.  The variable
    is read when ``torch._inductor.config`` is first imported; if it already is, its
    ``compile_threads`` is set too (the pool starts on the first compilation).
    """
    if "TORCHINDUCTOR_COMPILE_THREADS" in os.environ:
        return
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = WORKER_COMPILE_THREADS
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        config.compile_threads = int(WORKER_COMPILE_THREADS)


def _worker_settings() -> None:
    """The settings of a process that runs sweep units and is not the sweep's own process (a loky
    or a dask worker): Inductor compiles without its own pool (:func:`_limit_compile_workers`) and
    glibc keeps freed memory (:func:`moestat.threads.keep_freed_memory`).  Idempotent and cheap,
    so it is applied before every unit rather than by a per-worker hook that a worker started
    before the sweep (a long-lived dask cluster) would not have run."""
    _limit_compile_workers()
    keep_freed_memory()


def _run_on_worker(work: Callable[[U], list[dict]], unit: U) -> list[dict]:
    """One unit on a dask worker, with :func:`_worker_settings` applied first."""
    _worker_settings()
    return work(unit)


def _run_tagged(work: Callable[[U], list[dict]], unit: U, parent: int | None = None) -> tuple[U, list[dict]]:
    if parent is not None:
        if os.getpid() != parent:  # a loky worker, not the sweep's own process
            _worker_settings()
        _die_with_parent(parent)
    return unit, work(unit)

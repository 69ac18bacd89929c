"""Sweep workers forked from the sweep's own process after its imports, and a figure drawn in a fork.

Why: a loky worker (:mod:`moestat.rates.backends`) is a fresh interpreter that imports
torch and the package before its first unit -- 3.5 to 4.3 CPU-s on the project's 2-core machine,
a fifth of the main job's sweep -- although the sweep's process has them already.  A process
forked from it after those imports starts computing at once: its memory (the imported modules)
is shared copy-on-write.  :class:`ForkedWorkers` forks the workers of a ``moestat rates`` run
**before** any other thread of the process starts (the background imports of
:func:`moestat.rates.experiment._warm_imports`, tqdm's monitor, a pool's threads): a fork copies
the locks that other threads hold, and a child that needed one of them (an import lock, say)
would wait forever.  Units then run there as in a loky worker (:func:`moestat.rates.sweep.run_unit`
with one torch and one BLAS thread, so a forked child never enters a multi-threaded OpenMP
region that its parent may have started), and this process runs units too, largest first
(:meth:`ForkedWorkers.run`, the same policy as :func:`moestat.rates.backends._execute_shared`).

Where a unit runs changes none of its numbers (a unit has a fixed composition and its own
``SeedSequence`` streams), so ``results.csv`` is the same as with loky workers or one process.
Fork is used only where it is safe and available (:func:`fork_refusal`): Linux (macOS system
libraries are not fork-safe, Windows has no fork), no other live thread, and not disabled by
``MOESTAT_SWEEP_FORK=0``; everywhere else the sweep takes the loky path as before.

After each round of a sweep :func:`moestat.rates.experiment.run_rates` reads the rows and fits the
rates in its own process, and draws the figures there once the workers are closed (no
post-sweep work in a worker, no table kept in one between calls); :meth:`ForkedWorkers.call`
and :meth:`ForkedWorkers.post` still run a function in the first worker for a caller that wants
one.  :func:`draw_in_fork` draws the second figure in a child forked for it while the first is
drawn (same rules; the worker's watch of its parent is the one thread it tolerates).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import threading
import traceback
from typing import Any, Callable, Sequence

from moestat.rates.backends import _PARENT_WATCH, Progress, UnitWriter, _die_with_parent, _worker_settings
from moestat.threads import keep_freed_memory

__all__ = ["FORK_ENV", "fork_refusal", "ForkedWorkers", "NotSendable", "WorkerLost", "draw_in_fork"]

#: Set to ``0`` to keep every sweep on loky workers and draw the figures in one process.
FORK_ENV = "MOESTAT_SWEEP_FORK"


class WorkerLost(RuntimeError):
    """A forked sweep worker ended without returning its unit (killed, out of memory)."""


class NotSendable(TypeError):
    """What :meth:`ForkedWorkers.call` was asked to send cannot be pickled (e.g. an expert of a
    user's scenario written as a lambda or a closure); nothing was sent, the workers are intact."""


def _other_threads() -> list[threading.Thread]:
    """Live Python threads other than this one, except tqdm's monitor (it only sleeps and, briefly,
    takes tqdm's own lock, which no forked child uses) and a worker's watch of its parent
    (:func:`moestat.rates.backends._die_with_parent`: it sleeps and signals, holding no lock)."""
    monitor = getattr(sys.modules.get("tqdm._monitor"), "TMonitor", None)
    me = threading.current_thread()
    return [t for t in threading.enumerate()
            if t is not me and t.is_alive() and t not in _PARENT_WATCH
            and not (monitor is not None and isinstance(t, monitor))]


def fork_refusal() -> str | None:
    """Why this process must not fork its sweep workers now (``None``: it may).

    Refused: ``MOESTAT_SWEEP_FORK=0``; a platform other than Linux (no ``fork`` on Windows; on
    macOS the system frameworks are not fork-safe and Python defaults to ``spawn``); another
    live thread (a forked child inherits the locks that thread holds, e.g. an import lock taken
    by :func:`moestat.rates.experiment._warm_imports`, and would deadlock on it).
    """
    if os.environ.get(FORK_ENV, "1").strip() == "0":
        return f"{FORK_ENV}=0"
    if not sys.platform.startswith("linux"):
        return f"fork is not used on {sys.platform}"
    if "fork" not in multiprocessing.get_all_start_methods():  # pragma: no cover - every Linux has it
        return "no fork start method"
    others = _other_threads()
    if others:
        return f"{len(others)} other thread(s) running ({', '.join(t.name for t in others[:3])})"
    return None


def _serve(conn, parent_ends: list, parent: int) -> None:
    """A forked worker's loop: receive ``(fn, args, reply)``, run ``fn(*args)`` and, if ``reply``,
    send back ``("ok", result)`` or ``("err", exception, traceback text)``; end on ``None`` or when
    the parent's end is closed."""
    for end in parent_ends:  # this child's copies of the parent's ends: only the parent may hold them
        end.close()
    _die_with_parent(parent)  # Ctrl-C is the parent's; exit when the parent is gone (kill -9 included)
    _worker_settings()  # as a loky worker: Inductor without its own pool, glibc keeps freed memory
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        fn, args, wanted = msg
        try:
            reply: tuple = ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the parent, with this traceback
            reply = ("err", exc, traceback.format_exc())
        if not wanted:
            continue
        try:
            conn.send(reply)
        except OSError:  # the parent is gone (kill -9): no one to answer, and nothing to tell the user
            return
        except Exception as exc:  # noqa: BLE001 - an exception (or rows) that cannot be pickled
            try:
                conn.send(("err", RuntimeError(f"sweep worker could not return its result: {exc!r}"),
                           traceback.format_exc()))
            except OSError:
                return


def _with_note(reply: tuple, pid: int) -> BaseException:
    """The exception of a worker's ``("err", exception, traceback text)`` reply, the worker's
    traceback added as a note."""
    exc, text = reply[1], reply[2]
    if hasattr(exc, "add_note"):
        exc.add_note(f"in sweep worker {pid}:\n{text.rstrip()}")
    return exc


class ForkedWorkers:
    """``count`` sweep workers forked from this process now (see the module's docstring).

    Create it with :meth:`start` (``None`` where fork is refused), run units with :meth:`run`
    (any number of times: the rounds of an adaptive sweep), end it with :meth:`close`.
    """

    def __init__(self, count: int):
        ctx = multiprocessing.get_context("fork")
        self.parent = os.getpid()
        self.procs: list = []
        self.conns: list = []
        self.broken = False
        for _ in range(int(count)):
            here, there = ctx.Pipe(duplex=True)
            # not daemonic: what call() runs in a worker may fork a child of its own (draw_in_fork),
            # which a daemonic process may not; a worker is always ended by close() (run_rates calls
            # it in a finally) or when this process dies
            proc = ctx.Process(target=_serve, args=(there, [*self.conns, here], self.parent), name="moestat-sweep-worker",
                               daemon=False)
            proc.start()
            there.close()
            self.procs.append(proc)
            self.conns.append(here)

    @classmethod
    def start(cls, count: int) -> "ForkedWorkers | None":
        """Fork ``count`` workers, or return ``None`` when ``count < 1`` or :func:`fork_refusal` says no."""
        if count < 1 or fork_refusal() is not None:
            return None
        return cls(count)

    @property
    def size(self) -> int:
        """The number of workers."""
        return len(self.procs)

    def run(self, work: Callable[[Any], list[dict]], units: Sequence, on_result: Callable[[Any, list[dict]], None],
            n_jobs: int, progress: bool | None = None, total_fits: int | None = None) -> None:
        """Run ``work(unit)`` for every unit in this process and ``n_jobs - 1`` of the workers.

        Each process takes the next unit in the given order (largest first) as soon as it is
        free; this process, computing from the start like the workers, takes the first.
        ``on_result(unit, rows)`` is called once per unit as soon as it is finished -- a
        worker's by the thread that received it, this process's own by this thread -- one call
        at a time (a write lock: one writer appends to the store at a time).  So a worker's
        finished unit is on disk while this process still fits a long unit of its own, and a
        run killed then loses only the units still being fitted (before, a worker's rows waited
        in memory until this process finished its unit).  A worker's exception is re-raised here
        (its traceback added as a note); a worker that dies raises :class:`WorkerLost`; an
        exception in ``on_result`` is raised here too.  Any exception stops handing out units,
        lets a write in progress end, writes nothing more, ends the workers (a running unit
        would go on for minutes) and leaves this pool broken (:meth:`close` still applies).

        Parameters
        ----------
        work : callable
            ``work(unit) -> rows``, a module-level function (sent to the workers by name).
        units : sequence
            Picklable units, in the order to hand them out.
        on_result : callable
            ``on_result(unit, rows)`` for each finished unit.
        n_jobs : int
            Processes: this one and ``n_jobs - 1`` workers (at most :attr:`size`).
        progress, total_fits
            As :func:`moestat.rates.backends.execute`.
        """
        if self.broken:
            raise RuntimeError("the forked sweep workers were stopped by an earlier error")
        if not 1 <= n_jobs - 1 <= self.size:
            raise ValueError(f"n_jobs={n_jobs} needs {n_jobs - 1} workers; this pool has {self.size}")
        units = list(units)
        bar = Progress(total_fits if total_fits is not None else sum(len(u.replicates) for u in units), progress)
        keep_freed_memory()  # this process fits units too (moestat.threads.keep_freed_memory)
        todo, lock = list(units), threading.Lock()
        stop = threading.Event()
        hand_over = UnitWriter(on_result, bar)  # called by the feeders and by this thread
        results: queue.SimpleQueue = queue.SimpleQueue()  # ("err", exc) | ("end",)

        def take():
            with lock:
                return None if stop.is_set() or not todo else todo.pop(0)

        def feed(i: int) -> None:
            # one thread per worker: hand it the next unit as soon as it returns one (recv waits
            # without the GIL, so this process's own units go on meanwhile)
            conn, proc = self.conns[i], self.procs[i]
            try:
                while (unit := take()) is not None:
                    try:
                        conn.send((work, (unit,), True))
                        reply = conn.recv()
                    except (EOFError, OSError):
                        proc.join(timeout=1.0)
                        results.put(("err", WorkerLost(f"sweep worker {proc.pid} ended (exit code {proc.exitcode}) "
                                                       f"while fitting {getattr(unit, 'key', unit)}")))
                        return
                    if reply[0] == "ok":
                        try:  # written now, while this process may still be fitting a long unit
                            hand_over(unit, reply[1])
                        except BaseException as exc:  # noqa: BLE001 - a fault of the store: raised in the sweep's thread
                            stop.set()
                            hand_over.stop()  # no other feeder writes after the fault
                            results.put(("err", exc))
                            return
                    else:
                        results.put(("err", _with_note(reply, proc.pid)))
                        return
            finally:
                results.put(("end",))

        def deliver(block: bool) -> bool:
            """Take one message of the feeders: raise a worker's error, count a feeder's end;
            ``False`` when none was queued."""
            try:
                item = results.get(timeout=0.5) if block else results.get(block=False)
            except queue.Empty:
                return False
            if item[0] == "err":
                raise item[1]
            feeding[0] -= 1  # "end"
            return True

        feeding = [0]
        try:
            unit = take()  # this process takes the first (largest) unit, the workers the next ones
            threads = [threading.Thread(target=feed, args=(i,), name="moestat-sweep-feed", daemon=True)
                       for i in range(n_jobs - 1)]
            feeding[0] = len(threads)
            for t in threads:
                t.start()
            while unit is not None:
                rows = work(unit)
                hand_over(unit, rows)
                while deliver(block=False):
                    pass
                unit = take()
            while feeding[0] > 0:  # a feeder writes its rows before its end, so all rows are written then
                deliver(block=True)  # a timed wait: a blocking one is not interrupted by Ctrl-C everywhere
            for t in threads:  # ended: none is left alive to refuse a later fork (draw_in_fork)
                t.join()
        except BaseException:
            stop.set()
            hand_over.stop()  # a feeder's write in progress ends whole; none starts after this
            self.broken = True
            self._kill()
            raise
        finally:
            bar.close()

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Have the first worker run ``fn(*args)`` before what it is sent next, without waiting
        for it and without its result (its errors are ignored: e.g. imports that the steps which
        need them would redo and report, :func:`moestat.rates.experiment.import_quietly`)."""
        self.conns[0].send((fn, args, False))

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` run by the first worker (after what was posted to it); its result, or its
        exception raised here (the worker's traceback added as a note).  Used after the sweep for
        the rate fits and the figures (:func:`moestat.rates.experiment.run_rates`): the worker
        imported their modules while this process fitted units."""
        if self.broken:
            raise RuntimeError("the forked sweep workers were stopped by an earlier error")
        proc = self.procs[0]
        try:
            self.conns[0].send((fn, args, True))
        except OSError:
            self.broken = True
            raise WorkerLost(f"sweep worker {proc.pid} is gone (exit code {proc.exitcode})") from None
        except Exception as exc:  # noqa: BLE001 - Connection.send pickles before it writes: nothing was sent
            raise NotSendable(f"cannot send {getattr(fn, '__qualname__', fn)} to a sweep worker: {exc!r}") from exc
        try:
            reply = self.conns[0].recv()
        except (EOFError, OSError):
            self.broken = True
            proc.join(timeout=1.0)
            raise WorkerLost(f"sweep worker {proc.pid} ended (exit code {proc.exitcode}) while running "
                             f"{getattr(fn, '__qualname__', fn)}") from None
        except BaseException:  # Ctrl-C while waiting: the worker would go on
            self.broken = True
            self._kill()
            raise
        if reply[0] != "ok":
            raise _with_note(reply, proc.pid)
        return reply[1]

    def _kill(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
        for proc in self.procs:
            proc.join(timeout=5.0)

    def close(self) -> None:
        """End the workers: ask each to stop, wait briefly, kill what is left."""
        for conn in self.conns:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        for proc in self.procs:
            proc.join(timeout=5.0)
        self._kill()
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []


def _quietly(job: Callable[[], Any]) -> None:
    """In a forked child: run ``job``; on any error exit with status 1 without a traceback (the
    parent runs the job again and reports the error itself)."""
    try:
        job()
    except BaseException:  # noqa: BLE001 - reported by the parent's own run of the job
        raise SystemExit(1) from None


def draw_in_fork(jobs: Sequence[Callable[[], Any]]) -> None:
    """Run every job of ``jobs`` (functions without arguments, e.g. figures to draw), the first in
    this process and each other in a child forked for it, at the same time; return when all are done.

    Why: the two figures of a rates run (about 1 CPU-s each on the project's 2-core
    machine) were drawn one after the other after the sweep, with the second core idle.  A job
    whose child fails (or that cannot be forked, :func:`fork_refusal`) is run again here, so that
    its error is raised in this process with its own traceback; a job must therefore be safe to
    repeat (a figure written atomically is).
    """
    jobs = list(jobs)
    children = []
    if len(jobs) > 1 and fork_refusal() is None:
        ctx = multiprocessing.get_context("fork")
        for job in jobs[1:]:
            proc = ctx.Process(target=_quietly, args=(job,), name="moestat-figure", daemon=True)
            proc.start()
            children.append((job, proc))
        jobs = jobs[:1]
    for job in jobs:
        job()
    for job, proc in children:
        proc.join()
        if proc.exitcode != 0:
            job()

"""Faults of the environment -- the disk, the cluster, the machine -- told apart from bugs.

A full disk, a lost dask worker or an unreachable scheduler is not a problem with the user's
input (exit 2) and not a bug of the package ("internal error, please report it"): the command
stops with exit 1 and one line saying what happened and that ``--resume`` continues (finished
units are on disk).  Code that knows the cause raises :class:`EnvironmentFault` itself;
:func:`as_environment_fault` recognises the others by their type (``OSError`` errno, the
``distributed`` exceptions) when they reach :func:`moestat.cli.common.run_main`.
"""

from __future__ import annotations

import errno

__all__ = ["EnvironmentFault", "DiskFull", "ClusterFault", "DISK_FULL", "as_environment_fault"]

#: What a row that cannot be written says.
DISK_FULL = "disk full: free space and run with --resume"

#: errno values that mean "no space left" (a quota counts).
_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class EnvironmentFault(RuntimeError):
    """The environment failed the run (not the input, not the package); ``--resume`` continues it."""


class DiskFull(EnvironmentFault):
    """A write did not land: no space left (or a quota reached)."""


class ClusterFault(EnvironmentFault):
    """The dask cluster failed the run: workers lost or gone, the scheduler unreachable."""


def as_environment_fault(exc: BaseException) -> EnvironmentFault | None:
    """The :class:`EnvironmentFault` that ``exc`` is, or was caused by; ``None`` when it may be a bug.

    ``OSError`` with ENOSPC/EDQUOT is a full disk (EIO a failing disk); ``KilledWorker``,
    ``CommClosedError`` and the scheduler timeouts of ``distributed`` are the cluster.

    The exception's chain (``__cause__``, else ``__context__``) is walked: a library that fails
    while handling the real fault raises its own error on top of it -- matplotlib's PDF writer,
    on a full disk, ends in ``AttributeError: 'Stream' object has no attribute 'pos'`` with the
    ``OSError(ENOSPC)`` as its context -- and that is the disk, not a bug.  The first link that
    is a fault decides; a context hidden with ``raise ... from None`` is not followed.
    """
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(seen) < 32:
        seen.add(id(link))
        fault = _one_fault(link)
        if fault is not None:
            return fault
        # ``raise ... from None`` hides the context on purpose: it is not followed
        link = link.__cause__ if link.__cause__ is not None else None if link.__suppress_context__ else link.__context__
    return None


def _one_fault(exc: BaseException) -> EnvironmentFault | None:
    """:func:`as_environment_fault` of one exception, its chain not looked at."""
    if isinstance(exc, EnvironmentFault):
        return exc
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        where = f" writing {exc.filename}" if getattr(exc, "filename", None) else ""
        return DiskFull(f"{DISK_FULL}{where}" if not where else f"disk full{where}: free space and run with --resume")
    if isinstance(exc, OSError) and exc.errno == errno.EIO:
        return EnvironmentFault(f"input/output error{f' on {exc.filename}' if exc.filename else ''} (a failing disk?)")
    mod = type(exc).__module__ or ""
    name = type(exc).__name__
    if mod.startswith("distributed"):
        if name == "KilledWorker":
            return ClusterFault(f"dask workers died while running a unit ({exc}); check the workers' memory and logs")
        if name in ("CommClosedError", "FatalCommClosedError"):
            return ClusterFault(f"lost the connection to the dask scheduler ({exc})")
        if name == "FuturesCancelledError" and "scheduler-connection-lost" in str(exc):
            # a killed scheduler: the client cancels every future it was waiting on
            return ClusterFault("lost the connection to the dask scheduler (it stopped, or the network failed); "
                                "restart the scheduler and its workers")
    if isinstance(exc, (TimeoutError, OSError)) and "connect" in str(exc).lower() and "tcp://" in str(exc).lower():
        return ClusterFault(f"cannot reach the dask scheduler ({str(exc).splitlines()[0]})")
    return None

"""Thread policy: how many threads torch and the BLAS libraries use, and how they wait.

Why this module exists: on a shared machine another process holds some of the cores.  The OpenMP
runtime behind torch's intra-op pool spins at every barrier by default (``OMP_WAIT_POLICY``
active); when one of its threads has no core, each parallel region waits for that thread to be
scheduled, and a fit that takes 0.06 s on a quiet 2-core machine took 3.9 s beside one busy
process (``benchmarks/busy_machine.py``; the table is in ``docs/guide/performance.rst``).  Two
rules follow from the measurements there:

1. **Passive waiting.**  :func:`configure_environment` sets ``OMP_WAIT_POLICY=PASSIVE`` before
   torch is first imported (``moestat/__init__.py`` calls it first thing), unless the user set a
   policy or ``MOESTAT_WAIT_POLICY=runtime`` asks for the runtime's own default.  It must run
   before torch loads: the runtime reads the variable once.
2. **Workers x threads never exceed the cores.**  :func:`default_threads` gives each of
   ``n_jobs`` workers ``cores // n_jobs`` threads (at least one), where ``cores`` is what this
   process may run on (``os.sched_getaffinity``, so a CPU set of a batch scheduler counts, not the
   machine's total).  :func:`limit_threads` applies a count to torch and, through threadpoolctl,
   to numpy's BLAS.

Every door's ``--threads`` means the same: threads per worker, ``0`` = this default.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

__all__ = ["configure_environment", "available_cores", "default_threads", "limit_threads", "resolve_threads",
           "keep_freed_memory", "KEEP_FREED_BYTES", "one_thread"]


def configure_environment() -> None:
    """Set the OpenMP wait policy to passive unless the user chose one (module docstring, rule 1).

    Idempotent and cheap; has an effect only if it runs before torch (or another OpenMP user) is
    imported in this process -- and in child processes, which inherit the environment.
    """
    if os.environ.get("MOESTAT_WAIT_POLICY", "").lower() == "runtime":
        return
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity set; ``os.cpu_count()`` where unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def default_threads(n_jobs: int = 1) -> int:
    """Threads per worker so that ``n_jobs`` workers never use more threads than there are cores."""
    return max(1, available_cores() // max(1, int(n_jobs)))


def resolve_threads(threads: int | None, n_jobs: int = 1) -> int:
    """``--threads`` as given, or :func:`default_threads` for ``0`` / ``None``."""
    return default_threads(n_jobs) if not threads else int(threads)


def limit_threads(threads: int) -> int:
    """Use ``threads`` threads in torch's intra-op pool and in numpy's BLAS; returns ``threads``.

    The BLAS limit is global for the process (threadpoolctl), like torch's; call it once at the
    start of a door or worker.
    """
    import torch
    from threadpoolctl import threadpool_limits

    threads = max(1, int(threads))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    threadpool_limits(limits=threads)
    return threads


@contextmanager
def one_thread() -> Iterator[None]:
    """One torch thread and one BLAS thread (threadpoolctl) inside the block; both restored after.

    :func:`moestat.rates.sweep.run_unit` fits every work unit so (one worker, one core), and a
    refit of a recorded unit repeats the recorded numbers only with the same single-thread
    arithmetic (:func:`moestat.rates.replay.refit_unit`): a reduction split over more threads sums
    in another order.
    """
    import torch
    from threadpoolctl import threadpool_limits

    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        torch.set_num_threads(old_threads)


#: Blocks up to this size come from the heap and freed memory up to this size is kept there
#: (:func:`keep_freed_memory`).
KEEP_FREED_BYTES = 1 << 30

_KEPT: list[bool] = []


def keep_freed_memory(nbytes: int = KEEP_FREED_BYTES) -> bool:
    """Let glibc's ``malloc`` serve blocks up to ``nbytes`` from the heap and keep what is freed there.

    Why: glibc maps every block above its ``mmap`` threshold (at most 32 MiB by default)
    afresh and unmaps it when it is freed, so the kernel zeroes its pages again on every touch.  An
    eager EM step at n = 100 000 over 10 x 5 entries makes many ``[B, k, n]`` float64 temporaries
    of 80 MB: measured on the project's 2-core machine (one thread, 5 EM iterations), 2.8 s user
    and **9.8 s system** time (3.7 million page faults), against 3.1 s user and 1.0 s system with
    this setting (0.43 million); the compiled pass 1.41 + 1.74 s against 1.23 + 0.36 s.  That is
    the system time of a sweep on 2 cores.  Results do not change (only where memory comes
    from).  The cost: up to ``nbytes`` of freed memory stays with the process instead of going
    back to the system, so it is set in the sweep's processes only (:mod:`moestat.rates.backends`),
    not on ``import moestat``.

    Returns whether it was applied (glibc only, once per process; elsewhere nothing happens).
    """
    if _KEPT:
        return _KEPT[0]
    ok = False
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt"):
            m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
            value = ctypes.c_int(min(int(nbytes), 2**31 - 1))
            ok = bool(libc.mallopt(m_mmap_threshold, value)) and bool(libc.mallopt(m_trim_threshold, value))
    except (OSError, AttributeError, ValueError):  # pragma: no cover - not glibc
        ok = False
    _KEPT.append(ok)
    return ok

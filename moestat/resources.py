"""What this machine can give a run: usable cores, worker processes and memory.

The doors bound what a user may ask for by what the machine has, and refuse more with one line
naming the flag and the limit (exit 2, nothing written), instead of starting 100 000 worker
processes or allocating 75 GiB and failing half way.  Every limit is read from the
operating system when the door validates its arguments:

* **cores**: :func:`moestat.threads.available_cores` (``os.sched_getaffinity``: a batch
  scheduler's CPU set counts, not the machine's total);
* **processes**: the cgroup's ``pids.max`` minus ``pids.current`` (cgroup v2, the group this
  process is in, from ``/proc/self/cgroup``), else ``RLIMIT_NPROC``; ``None`` when neither says;
* **memory**: ``MemAvailable`` of ``/proc/meminfo`` (what can be allocated without swapping),
  else ``os.sysconf('SC_AVPHYS_PAGES')`` pages -- no new dependency (psutil comes only with the
  ``[cluster]`` extra).

The bounds are deliberately generous: they refuse what cannot work, not what is merely slow.
"""

from __future__ import annotations

import os
from pathlib import Path

from moestat.threads import available_cores

__all__ = ["JOBS_PER_CORE", "available_cores", "available_memory", "pid_headroom", "max_n_jobs", "check_memory",
           "format_bytes"]

#: Worker processes allowed per usable core: more than one helps when workers wait on I/O, but a
#: process per job beyond a few per core only adds memory and start-up time (results never depend
#: on ``--n-jobs``).
JOBS_PER_CORE = 4

#: Processes kept free under a PID limit (the door itself, its BLAS/torch threads, the shell).
_PID_MARGIN = 16


def _cgroup_dir() -> Path | None:
    """The cgroup-v2 folder of this process (``0::/path`` in ``/proc/self/cgroup``)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return Path("/sys/fs/cgroup") / line[3:].lstrip("/")
    except OSError:
        return None
    return None


def _cgroup_dirs() -> list[Path]:
    """Where the cgroup's ``pids.max`` may be: this process's group and the root, as a container sees it."""
    return list(dict.fromkeys(p for p in (_cgroup_dir(), Path("/sys/fs/cgroup")) if p is not None))


def _nproc_limit() -> int | None:
    """The soft ``RLIMIT_NPROC`` (``None``: unlimited or unknown)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    return int(soft) if soft != resource.RLIM_INFINITY and soft > 0 else None


def pid_headroom() -> int | None:
    """How many more processes (threads count too) this process may start, or ``None`` if unknown.

    The tightest of the cgroup's ``pids.max - pids.current`` (the group of this process and the
    root folder of ``/sys/fs/cgroup``, as a container sees it) and the soft ``RLIMIT_NPROC`` (a cap:
    it counts the user's processes, which are not counted here).
    """
    limits = []
    for d in _cgroup_dirs():
        try:
            cap = (d / "pids.max").read_text().strip()
            if cap != "max":
                limits.append(int(cap) - int((d / "pids.current").read_text().strip()))
        except (OSError, ValueError):
            continue
    nproc = _nproc_limit()
    if nproc is not None:
        limits.append(nproc)  # per user, the processes already running not counted: a cap only
    return max(0, min(limits)) if limits else None


def max_n_jobs() -> tuple[int, str]:
    """The largest ``--n-jobs`` this process may ask for, and why (for the refusal's message)."""
    cores = available_cores()
    limit, why = JOBS_PER_CORE * cores, f"{JOBS_PER_CORE} per usable core, {cores} core{'s' if cores > 1 else ''}"
    head = pid_headroom()
    if head is not None and head - _PID_MARGIN < limit:
        limit, why = max(1, head - _PID_MARGIN), f"the process limit leaves room for {head} more"
    return limit, why


def available_memory() -> int | None:
    """Bytes that can be allocated now without swapping, or ``None`` where the OS does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def format_bytes(n: float) -> str:
    """``n`` bytes in GiB (or TiB above 1024 GiB), 3 significant digits."""
    gib = n / 2**30
    return f"{gib / 1024:.3g} TiB" if gib >= 1024 else f"{gib:.3g} GiB"


def check_memory(need: float, what: str, hint: str) -> None:
    """Raise a one-line ``ValueError`` when ``need`` bytes exceed the available memory.

    Parameters
    ----------
    need : float
        A lower bound on what the work allocates at once (bytes).
    what : str
        The flag and what it makes the run hold, e.g. ``"--k-true 100000: the truth's 100000 x 100000
        atom distances"``.
    hint : str
        What to lower.
    """
    avail = available_memory()
    if avail is not None and need > avail:
        raise ValueError(f"{what} need at least {format_bytes(need)}, more than the {format_bytes(avail)} of memory "
                         f"available on this machine; {hint}")

"""Who owns an output folder: an exclusive lock while a door writes into it, and a door marker.

Two runs writing into one ``--out`` at once (two job scripts that both pass ``--resume``, or a
plain run and a ``--resume`` started seconds later) would both compute every missing unit and
append it twice.  :func:`lock_out` takes ``OUT/.moestat.lock``: the file holds the host, pid,
door and start time of the holder (for the message of the one refused), and the exclusion itself
is an ``fcntl.flock`` on it, which the kernel drops when the holder dies -- ``kill -9`` included
-- so a lock left behind is recognised as stale without guessing from pids.  Where ``flock`` is
not available (some network file systems) the holder's pid is checked when it ran on this host.

``OUT/.moestat-door`` names the door that wrote the folder; a door's ``--resume`` refuses a folder
of another door (:func:`check_door`), with the files of each door recognised in folders written
before the marker existed.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from moestat.io import NotARegularFile, atomic_write_json, check_output_file

__all__ = ["LOCK_NAME", "DOOR_NAME", "FolderBusy", "lock_out", "unlock_out", "unlock_all", "holder", "holder_alive",
           "check_door", "mark_door", "read_door"]

#: The lock file inside ``--out`` (removed when the holder finishes).
LOCK_NAME = ".moestat.lock"
#: The door marker inside ``--out`` (kept: it says which door's folder this is).
DOOR_NAME = ".moestat-door"

try:  # not on Windows
    import fcntl
except ImportError:  # pragma: no cover - the pid check alone
    fcntl = None


class FolderBusy(ValueError):
    """``--out`` is held by another live run (a ``ValueError``: refused before anything is written)."""


#: Locks this process holds: resolved folder -> [file descriptor, count] (re-entrant per process).
_HELD: dict[str, list] = {}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


#: ``O_NOFOLLOW``: the lock file is never opened through a link (which could point outside ``--out``).
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _read_lock(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def holder(out: str | os.PathLike) -> dict | None:
    """The recorded holder of ``out``'s lock (``None`` when there is no lock file, it is unreadable
    or it is not a regular file)."""
    try:
        data = json.loads(_read_lock(Path(out) / LOCK_NAME).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def holder_alive(out: str | os.PathLike) -> bool | None:
    """Whether the process recorded in ``out``'s lock still holds it.

    ``False`` when there is no lock file or its ``flock`` is free (the holder died -- ``kill -9``
    included -- and the file was left behind); ``True`` when it is held; ``None`` when it cannot
    be told (no ``flock`` on this file system and the holder ran on another host).
    """
    path = Path(out) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    return True
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return False
    finally:
        os.close(fd)
    h = holder(out)  # no flock here: the pid, when it ran on this host
    if h and h.get("host") == socket.gethostname() and isinstance(h.get("pid"), int):
        return _pid_alive(h["pid"])
    return None


def _describe(h: dict | None) -> str:
    if not h:
        return "another process"
    return f"moestat {h.get('door', '?')} (pid {h.get('pid', '?')} on {h.get('host', '?')}, since {h.get('started', '?')})"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _busy(out: Path, h: dict | None) -> FolderBusy:
    return FolderBusy(f"--out {out} is in use by {_describe(h)}; wait for it to finish or choose another --out")


def lock_out(out: str | os.PathLike, door: str) -> bool:
    """Take the exclusive lock of the existing folder ``out`` for ``door`` (re-entrant in one process).

    Returns
    -------
    bool
        True when a stale lock (its holder died) was taken over.

    Raises
    ------
    FolderBusy
        Another live process holds it; one line naming that process.
    moestat.io.NotARegularFile
        ``OUT/.moestat.lock`` is a symbolic link, a folder, a FIFO or a device: it is never
        followed or written through (a link would truncate a file outside ``--out``).
    """
    out = Path(out)
    key = str(out.resolve())
    if key in _HELD:
        _HELD[key][1] += 1
        return False
    path = out / LOCK_NAME
    stale = False
    for _ in range(20):  # a holder may unlink the file between our open and our flock: try again
        check_output_file(path)
        try:  # O_NOFOLLOW: a link put there after the check is refused, never followed
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0), 0o666)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotARegularFile(f"{path} exists and is a symbolic link; moestat only replaces regular files: "
                                      "remove it or choose another path") from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NotARegularFile(f"{path} exists and is not a regular file; remove it or choose another path")
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        h = _holder_once_written(out, fd)
                        if h is _RELEASED:  # the holder finished meanwhile: take the lock after all
                            os.close(fd)
                            continue
                        raise _busy(out, h) from None
                    _pid_fallback(out)  # no flock on this file system: trust a live pid on this host
            else:  # pragma: no cover
                _pid_fallback(out)
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the previous holder removed the file after our open: lock the new one
                os.close(fd)
                continue
            old = os.read(fd, 4096)
            stale = bool(old.strip())  # content left by a holder that died without cleaning up
            record = {"host": socket.gethostname(), "pid": os.getpid(), "door": door, "started": _now(),
                      "command": " ".join(sys.argv)[:300]}
            data = (json.dumps(record) + "\n").encode()
            # write first, then cut to length: the file is never empty while held, so a refused run
            # that reads it names this process
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        _HELD[key] = [fd, 1]
        return stale
    raise _busy(out, holder(out))  # pragma: no cover - twenty races in a row


#: :func:`_holder_once_written`: the holder let go while this process waited for its record.
_RELEASED = object()


def _holder_once_written(out: Path, fd: int, wait_s: float = 5.0):
    """The holder's record, waiting briefly for it, or :data:`_RELEASED`.

    Two runs started at once meet in two windows: the holder has taken the ``flock`` and writes
    its record microseconds later (a loaded machine may delay it by seconds), or the holder
    finishes -- unlinks the file and lets go -- between our refused ``flock`` and our read.  In
    the second the folder is free and the caller takes it (seen in CI as a refusal naming
    "another process").  ``fd`` is our descriptor of the file the ``flock`` was refused on.
    """
    deadline = time.monotonic() + wait_s
    path = out / LOCK_NAME
    while True:
        h = holder(out)
        if h is not None:
            return h
        try:
            released = os.stat(path, follow_symlinks=False).st_ino != os.fstat(fd).st_ino
        except FileNotFoundError:
            released = True
        if not released:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pass
            else:  # free: let go of it again, the caller's next round takes it properly
                fcntl.flock(fd, fcntl.LOCK_UN)
                released = True
        if released:
            return _RELEASED
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def _pid_fallback(out: Path) -> None:
    h = holder(out)
    if h and h.get("host") == socket.gethostname() and isinstance(h.get("pid"), int) and h["pid"] != os.getpid() \
            and _pid_alive(h["pid"]):
        raise _busy(out, h)


def unlock_out(out: str | os.PathLike) -> None:
    """Release one hold of ``out``'s lock; the last one removes the lock file."""
    key = str(Path(out).resolve())
    entry = _HELD.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] > 0:
        return
    del _HELD[key]
    fd = entry[0]
    try:  # unlink while holding the flock, so a waiter re-checks the inode and locks a fresh file
        os.unlink(Path(key) / LOCK_NAME)
    except OSError:
        pass
    os.close(fd)


def unlock_all() -> None:
    """Release every lock this process holds (the end of a command)."""
    for key in list(_HELD):
        _HELD[key][1] = 1
        unlock_out(key)


# ---------------------------------------------------------------------------------------------
# door marker
# ---------------------------------------------------------------------------------------------
def read_door(out: str | os.PathLike) -> str | None:
    """The door that wrote ``out``: its marker, else recognised by its files (``None``: unknown or empty).

    Folders written before the marker existed are recognised by what only one door writes:
    ``provenance.json`` + ``results.csv`` (rates), ``theory_report.json`` or a ``rates/`` folder of
    runs (theory), ``runs.jsonl`` (realdata, tagging or lm: told apart by their settings, which
    :func:`moestat.io.check_run_config` compares).
    """
    out = Path(out)
    try:
        text = (out / DOOR_NAME).read_text(encoding="utf-8").strip()
    except OSError:
        text = ""
    if text:
        try:
            return str(json.loads(text)["door"])
        except (ValueError, KeyError, TypeError):
            return text.split()[0]
    if (out / "theory_report.json").exists() or (out / "rates").is_dir():
        return "theory"
    if (out / "provenance.json").exists() or (out / "results.csv").exists() and (out / "summary.json").exists() \
            and not (out / "runs.jsonl").exists():
        return "rates"
    if (out / "runs.jsonl").exists():
        return "realdata|tagging|lm"
    return None


def check_door(out: str | os.PathLike, door: str) -> None:
    """Refuse to resume ``door`` in a folder another door wrote.

    Raises
    ------
    ValueError
        One line naming the folder, the door that wrote it and the one asked for.
    """
    found = read_door(out)
    if found is None or door in found.split("|"):
        return
    shown = " or ".join(f"moestat {d}" for d in found.split("|"))
    raise ValueError(f"--resume: {out} holds the results of {shown}, not of moestat {door}; "
                     f"resume it with that command or choose another --out")


def mark_door(out: str | os.PathLike, door: str) -> None:
    """Record ``door`` as the owner of ``out`` (once; an existing marker is kept)."""
    path = Path(out) / DOOR_NAME
    if path.is_symlink() or not path.is_file():  # a link or a device is no marker: atomic_write_json refuses it
        atomic_write_json(path, {"door": door, "created": _now()})
